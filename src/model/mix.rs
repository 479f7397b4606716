//! What synthetic weights are stored as (`lserve bench --dtype`, `serve --synthetic`): one type
//! for every matrix and the embedding table, or llama.cpp's Q4_K_M recipe, so a "Q4_K_M-shaped"
//! model has a Q4_K_M file's bytes and its mix of kernels.
//!
//! Invariant: `matrix` names a type for every matrix of a Llama-family layer stack; Q4_K_M's
//! Q6_K layers are `more_bits(layer, layers)`, the rule of llama.cpp's `llama-quant.cpp`
//! (`use_more_bits`: the first and last eighth of the layers and every third one between).
use crate::backend::DType;
use crate::backend::GgmlType;

/// The matrices of a Llama-family model as the recipe sees them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tensor {
    Embed,
    /// The LM head (a tied model's embedding table is its LM head: `Output`).
    Output,
    AttnQ,
    AttnK,
    AttnV,
    AttnO,
    FfnGateUp,
    FfnDown,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WeightMix {
    /// Every matrix and the table in one type (None: the backend's first weight type).
    #[default]
    Auto,
    Uniform(DType),
    /// Q4_K, except the output matrix and, in the `more_bits` layers, attn_v and ffn_down: Q6_K.
    Q4KM,
}

impl From<Option<DType>> for WeightMix {
    fn from(d: Option<DType>) -> Self {
        d.map_or(WeightMix::Auto, WeightMix::Uniform)
    }
}

/// llama.cpp's `use_more_bits(i, n)`.
pub fn more_bits(layer: usize, layers: usize) -> bool {
    layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2
}

impl WeightMix {
    /// The `--dtype` spelling.
    pub fn name(self) -> String {
        match self {
            WeightMix::Auto => "auto".into(),
            WeightMix::Uniform(d) => d.weight_name(),
            WeightMix::Q4KM => "q4_k_m".into(),
        }
    }

    /// The type of `tensor` in `layer` of `layers`; `auto` is the type the backend lists first.
    pub fn matrix(self, auto: DType, tensor: Tensor, layer: usize, layers: usize) -> DType {
        match self {
            WeightMix::Auto => auto,
            WeightMix::Uniform(d) => d,
            WeightMix::Q4KM => {
                let q6 = match tensor {
                    Tensor::Output => true,
                    Tensor::AttnV | Tensor::FfnDown => more_bits(layer, layers),
                    _ => false,
                };
                DType::Ggml(if q6 { GgmlType::Q6_K } else { GgmlType::Q4_K })
            }
        }
    }

    /// Every type the mix stores matrices in.
    pub fn types(self, auto: DType) -> Vec<DType> {
        match self {
            WeightMix::Q4KM => vec![DType::Ggml(GgmlType::Q4_K), DType::Ggml(GgmlType::Q6_K)],
            m => vec![m.matrix(auto, Tensor::Embed, 0, 1)],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_bits_is_llama_cpp_rule() {
        // 32 layers: 0-3, 28-31, and 6, 9, ..., 27 (every third after the first eighth).
        let want: Vec<usize> = (0..4).chain([6, 9, 12, 15, 18, 21, 24, 27]).chain(28..32).collect();
        let got: Vec<usize> = (0..32).filter(|&i| more_bits(i, 32)).collect();
        assert_eq!(got, want);
        // 3 layers: n / 8 = 0 and 7n / 8 = 2, so only layer 2 (which (i - 0) % 3 == 2 also picks).
        assert_eq!((0..3).filter(|&i| more_bits(i, 3)).collect::<Vec<_>>(), [2]);
    }

    #[test]
    fn q4_k_m_types() {
        let (q4, q6) = (DType::Ggml(GgmlType::Q4_K), DType::Ggml(GgmlType::Q6_K));
        let m = WeightMix::Q4KM;
        assert_eq!(m.matrix(DType::F32, Tensor::Output, 0, 32), q6);
        assert_eq!(m.matrix(DType::F32, Tensor::Embed, 0, 32), q4);
        assert_eq!(m.matrix(DType::F32, Tensor::AttnV, 0, 32), q6);
        assert_eq!(m.matrix(DType::F32, Tensor::AttnV, 4, 32), q4);
        assert_eq!(m.matrix(DType::F32, Tensor::FfnDown, 6, 32), q6);
        assert_eq!(m.matrix(DType::F32, Tensor::AttnQ, 0, 32), q4);
        assert_eq!(WeightMix::from(None), WeightMix::Auto);
        assert_eq!(WeightMix::from(Some(q6)).matrix(DType::F32, Tensor::AttnQ, 1, 2), q6);
    }
}
