//! What the forward pass reads its weights from: tensors under Hugging Face names in HF layout —
//! as f32 values (`get`, every source) or, for a matrix the file stores quantized, as its stored
//! bytes (`get_raw`: GGUF blocks, rows in HF order). The loaders (`crate::loader`) implement it for
//! GGUF, safetensors and in-memory weights; the model depends only on this trait, never on a
//! loader. [`LoadOptions`] says what the model keeps on the device (docs/weights.md).

use crate::backend::DType;
use crate::error::{Error, Result};

/// A weight matrix as the file stores it: `bytes` in the layout of
/// [`weight_quant`](crate::backend::reference::weight_quant) for `dtype`, `shape` `[n][k]` in HF
/// order (row `r` is HF's output row `r`).
#[derive(Clone, Debug)]
pub struct RawTensor {
    pub dtype: DType,
    pub bytes: Vec<u8>,
    pub shape: Vec<usize>,
}

/// Tensors by Hugging Face name.
pub trait WeightSource: Send + Sync {
    /// The tensor as f32 and its row-major shape, or Ok(None) if the file does not have it.
    fn get(&self, name: &str) -> Result<Option<(Vec<f32>, Vec<usize>)>>;
    /// The tensor's stored bytes when the file holds it in a quantized weight type
    /// (`DType::is_weight_quant`); Ok(None) when it is missing or stored as floats (read it with
    /// `get`). Its values are exactly `get`'s (both come from the same blocks).
    fn get_raw(&self, _name: &str) -> Result<Option<RawTensor>> {
        Ok(None)
    }
    /// Llama 3.1 GGUF `rope_freqs.weight`: per-pair divisors of the inverse frequencies.
    fn rope_freq_factors(&self) -> Result<Option<Vec<f32>>> {
        Ok(None)
    }
    /// The row-major shape of a tensor from the file's index, without reading its data; Ok(None)
    /// if the file does not have it, Err if it has a type lserve cannot convert.
    fn shape(&self, name: &str) -> Result<Option<Vec<usize>>>;
}

/// What happens to a matrix the file stores quantized.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WeightMode {
    /// Upload the stored blocks as they are when the backend computes with their type
    /// (`caps().weight_dtypes`); otherwise dequantize, logging why (`--weights native`).
    #[default]
    Native,
    /// Dequantize every matrix at load (`--weights dequant`).
    Dequant,
}

/// How `Llama::load_with` stores the weights.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// The float type of matrices held as floats (None: the backend's first weight dtype).
    pub dtype: Option<DType>,
    pub weights: WeightMode,
    /// Quantize the matrices held as floats at load to this row-scaled type (`DType::I8Row` for
    /// `--quantize int8`, `DType::F8Row` for `--quantize fp8`) instead of storing them as `dtype`.
    pub quantize: Option<DType>,
}

impl LoadOptions {
    /// Everything dequantized and stored as `dtype` (the behaviour of `Llama::load_as(Some(dtype))`).
    pub fn dequant(dtype: Option<DType>) -> Self {
        LoadOptions { dtype, weights: WeightMode::Dequant, quantize: None }
    }

    /// The float dtype to use on a backend whose weight types are `supported` (the first is its
    /// preferred float type), checked together with `quantize`.
    pub fn resolve(&self, backend: &str, supported: &[DType]) -> Result<DType> {
        let float = self.dtype.unwrap_or(supported[0]);
        let unsupported = |d: DType| {
            Error::InvalidArgument(format!(
                "{} weights are not supported by the {backend} backend (supported: {})",
                d.weight_name(),
                supported.iter().map(|d| d.weight_name()).collect::<Vec<_>>().join(", ")
            ))
        };
        if !matches!(float, DType::F32 | DType::F16 | DType::BF16) {
            return Err(Error::InvalidArgument(format!(
                "the float weight type must be f32, f16 or bf16, not {} (quantized types come from the file or --quantize)",
                float.weight_name()
            )));
        }
        if !supported.contains(&float) {
            return Err(unsupported(float));
        }
        if let Some(q) = self.quantize {
            if !matches!(q, DType::I8Row | DType::F8Row) {
                return Err(Error::InvalidArgument(format!("--quantize {}: expected int8 or fp8", q.weight_name())));
            }
            if !supported.contains(&q) {
                return Err(unsupported(q));
            }
        }
        Ok(float)
    }
}
