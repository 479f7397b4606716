//! Megatron-style tensor-parallel sharding of a Llama-family model (docs/tensor-parallel.md).
//!
//! Rank r of N holds:
//! - query heads `[r·H/N, (r+1)·H/N)` and KV heads `[r·Hkv/N, (r+1)·Hkv/N)`: the rows of q, k and v
//!   (and their biases) of those heads, so its fused q|k|v is its q rows, then its k rows, then its
//!   v rows, and attention runs on its heads alone (each KV head's GQA group of query heads lives
//!   on the same rank because H/N is a whole number of groups: H/Hkv query heads per KV head);
//! - the columns of o_proj that read its heads (o is split by input columns, k): its o_proj gives
//!   a partial sum of the output, completed by an all-reduce;
//! - rows `[r·F/N, (r+1)·F/N)` of gate and of up (its gate|up is its gate rows then its up rows),
//!   and the matching input columns of down_proj (again a partial sum and an all-reduce);
//! - vocabulary rows `[r·V/N, (r+1)·V/N)` of the embedding table and of the LM head: the embedding
//!   gives zeros for other ranks' ids (all-reduce), the LM head this slice's logits (all-gather);
//! - every norm weight whole (the residual stream is replicated on every rank, in f32).
//!
//! [`ShardedSource`] presents rank r's slices of another [`WeightSource`] under the same names and
//! [`shard_config`] the shard's shapes, so the ordinary loader builds a rank's model unchanged.
//! Quantized blocks: a row slice is a byte slice; a column slice needs `k/N` to be a whole number
//! of the format's blocks (else a clear error, never a silent dequantize).

use super::config::ModelConfig;
use super::weights::{RawTensor, WeightSource};
use crate::backend::DType;
use crate::error::{Error, Result};

/// Which rank of how many.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardSpec {
    pub rank: usize,
    pub size: usize,
}

/// The shapes rank's model has: heads, KV heads, FFN width and vocabulary divided by `size`.
/// Refuses what does not divide (each named) and Gemma 3.
pub fn shard_config(cfg: &ModelConfig, size: usize) -> Result<ModelConfig> {
    if size == 0 {
        return Err(Error::InvalidArgument("the tensor-parallel size must be at least 1".into()));
    }
    if cfg.gemma.is_some() && size > 1 {
        return Err(Error::InvalidArgument("tensor parallelism is not implemented for Gemma 3".into()));
    }
    let parts = [
        ("attention heads", cfg.num_heads),
        ("KV heads", cfg.num_kv_heads),
        ("FFN width (intermediate_size)", cfg.intermediate_size),
        ("vocabulary", cfg.vocab_size),
    ];
    for (what, n) in parts {
        if !n.is_multiple_of(size) {
            return Err(Error::InvalidArgument(format!(
                "--tensor-parallel-size {size} does not divide the model's {n} {what}"
            )));
        }
    }
    Ok(ModelConfig {
        num_heads: cfg.num_heads / size,
        num_kv_heads: cfg.num_kv_heads / size,
        intermediate_size: cfg.intermediate_size / size,
        vocab_size: cfg.vocab_size / size,
        ..cfg.clone()
    })
}

/// How a tensor is split across ranks.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Split {
    /// Rows (output features; a 1-D bias by elements).
    Rows,
    /// Columns (input features) of a 2-D matrix.
    Cols,
    Whole,
}

fn split_of(name: &str) -> Split {
    const ROWS: [&str; 8] = [
        "self_attn.q_proj.weight",
        "self_attn.k_proj.weight",
        "self_attn.v_proj.weight",
        "self_attn.q_proj.bias",
        "self_attn.k_proj.bias",
        "self_attn.v_proj.bias",
        "mlp.gate_proj.weight",
        "mlp.up_proj.weight",
    ];
    if name == "model.embed_tokens.weight" || name == "lm_head.weight" || ROWS.iter().any(|s| name.ends_with(s)) {
        Split::Rows
    } else if name.ends_with("self_attn.o_proj.weight") || name.ends_with("mlp.down_proj.weight") {
        Split::Cols
    } else {
        Split::Whole
    }
}

/// Rank `spec.rank`'s slices of `inner` (module header).
pub struct ShardedSource<'a, S: WeightSource + ?Sized> {
    pub inner: &'a S,
    pub spec: ShardSpec,
}

impl<S: WeightSource + ?Sized> ShardedSource<'_, S> {
    fn sliced_shape(&self, name: &str, shape: &[usize]) -> Result<Vec<usize>> {
        let n = self.spec.size;
        let mut s = shape.to_vec();
        let dim = match split_of(name) {
            Split::Whole => return Ok(s),
            Split::Rows => 0,
            Split::Cols if s.len() == 2 => 1,
            Split::Cols => return Err(Error::Format(format!("weight `{name}` should be a matrix, has shape {s:?}"))),
        };
        if s.is_empty() || !s[dim].is_multiple_of(n) {
            return Err(Error::Format(format!(
                "weight `{name}` of shape {shape:?} does not split in {n} tensor-parallel shards"
            )));
        }
        s[dim] /= n;
        Ok(s)
    }
}

impl<S: WeightSource + ?Sized> WeightSource for ShardedSource<'_, S> {
    fn get(&self, name: &str) -> Result<Option<(Vec<f32>, Vec<usize>)>> {
        let Some((data, shape)) = self.inner.get(name)? else { return Ok(None) };
        let out = self.sliced_shape(name, &shape)?;
        let r = self.spec.rank;
        let data = match split_of(name) {
            Split::Whole => data,
            Split::Rows => {
                let len = out.iter().product::<usize>();
                data[r * len..(r + 1) * len].to_vec()
            }
            Split::Cols => {
                let (k, kr) = (shape[1], out[1]);
                data.chunks(k).flat_map(|row| row[r * kr..(r + 1) * kr].iter().copied()).collect()
            }
        };
        Ok(Some((data, out)))
    }

    fn get_raw(&self, name: &str) -> Result<Option<RawTensor>> {
        let Some(raw) = self.inner.get_raw(name)? else { return Ok(None) };
        let out = self.sliced_shape(name, &raw.shape)?;
        let (r, dt) = (self.spec.rank, raw.dtype);
        let bytes = match split_of(name) {
            Split::Whole => raw.bytes,
            Split::Rows => {
                let len = raw.bytes.len() / self.spec.size;
                raw.bytes[r * len..(r + 1) * len].to_vec()
            }
            Split::Cols => {
                let (k, kr) = (raw.shape[1], out[1]);
                let row = dt.weight_bytes(1, k);
                let part = match dt {
                    DType::Ggml(_) => dt.weight_bytes(1, kr),
                    _ => None,
                };
                let (Some(row), Some(part)) = (row, part) else {
                    return Err(Error::Format(format!(
                        "weight `{name}` ({}, {k} columns): {kr} columns per tensor-parallel shard are not a whole number of its blocks",
                        dt.weight_name()
                    )));
                };
                raw.bytes.chunks(row).flat_map(|b| b[r * part..(r + 1) * part].iter().copied()).collect()
            }
        };
        Ok(Some(RawTensor { dtype: dt, bytes, shape: out }))
    }

    fn rope_freq_factors(&self) -> Result<Option<Vec<f32>>> {
        self.inner.rope_freq_factors()
    }

    fn shape(&self, name: &str) -> Result<Option<Vec<usize>>> {
        match self.inner.shape(name)? {
            Some(s) => Ok(Some(self.sliced_shape(name, &s)?)),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::reference::{ggml_quant, weight_quant};
    use crate::backend::{Backend, GgmlType, MatmulParams};
    use std::collections::HashMap;

    struct Mem(HashMap<String, (Vec<f32>, Vec<usize>)>, HashMap<String, RawTensor>);
    impl WeightSource for Mem {
        fn get(&self, name: &str) -> Result<Option<(Vec<f32>, Vec<usize>)>> {
            Ok(self.0.get(name).cloned())
        }
        fn get_raw(&self, name: &str) -> Result<Option<RawTensor>> {
            Ok(self.1.get(name).cloned())
        }
        fn shape(&self, name: &str) -> Result<Option<Vec<usize>>> {
            Ok(self.0.get(name).map(|t| t.1.clone()))
        }
    }

    fn values(n: usize) -> Vec<f32> {
        (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0).collect()
    }

    /// x · W^T on the CPU backend.
    fn matmul(x: &[f32], w: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
        let be = crate::backend::cpu::CpuBackend::new();
        let (xb, wb) = (be.upload_f32(DType::F32, x.to_vec()).unwrap(), be.upload_f32(DType::F32, w.to_vec()).unwrap());
        let mut out = be.alloc(DType::F32, m * n).unwrap();
        be.matmul(&MatmulParams::new(m, n, k, false), &xb, &wb, None, &mut out).unwrap();
        be.download_f32(&out, 0, m * n).unwrap()
    }

    /// Column-parallel then row-parallel: the concatenated row shards give the full output's
    /// columns, and the sum of the column shards' partial products the full product.
    #[test]
    fn sharded_matmuls_equal_the_full_one() {
        let (m, n, k, size) = (3, 12, 8, 4);
        let (x, w) = (values(m * k), values(n * k));
        let mut src = Mem(HashMap::new(), HashMap::new());
        src.0.insert("model.layers.0.mlp.gate_proj.weight".into(), (w.clone(), vec![n, k]));
        src.0.insert("model.layers.0.mlp.down_proj.weight".into(), (w.clone(), vec![n, k]));
        let full = matmul(&x, &w, m, n, k);
        let mut sum = vec![0.0f32; m * n];
        for rank in 0..size {
            let s = ShardedSource { inner: &src, spec: ShardSpec { rank, size } };
            let (rows, shape) = s.get("model.layers.0.mlp.gate_proj.weight").unwrap().unwrap();
            assert_eq!(shape, [n / size, k]);
            let part = matmul(&x, &rows, m, n / size, k);
            for i in 0..m {
                let want = &full[i * n + rank * n / size..i * n + (rank + 1) * n / size];
                assert_eq!(&part[i * n / size..(i + 1) * n / size], want);
            }
            let (cols, shape) = s.get("model.layers.0.mlp.down_proj.weight").unwrap().unwrap();
            assert_eq!(shape, [n, k / size]);
            let xs: Vec<f32> = x.chunks(k).flat_map(|r| r[rank * k / size..(rank + 1) * k / size].to_vec()).collect();
            let part = matmul(&xs, &cols, m, n, k / size);
            sum.iter_mut().zip(&part).for_each(|(s, p)| *s += p);
        }
        for (s, f) in sum.iter().zip(&full) {
            assert!((s - f).abs() <= 1e-5 * (1.0 + f.abs()), "{s} vs {f}");
        }
    }

    /// Quantized blocks: row shards are byte slices, column shards whole blocks per row; both
    /// dequantize to the slices of the full matrix's values. A column split inside a block fails.
    #[test]
    fn quantized_shards_are_block_slices() {
        let (n, k) = (8, 4 * 32);
        let dt = DType::Ggml(GgmlType::Q8_0);
        let bytes = weight_quant::random_weights(dt, n, k, 7).unwrap();
        let deq = |b: &[u8], rows: usize, cols: usize| {
            let mut v = vec![0.0; rows * cols];
            ggml_quant::dequantize(GgmlType::Q8_0, b, &mut v).unwrap();
            v
        };
        let full = deq(&bytes, n, k);
        let mut src = Mem(HashMap::new(), HashMap::new());
        for name in ["model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.o_proj.weight"] {
            src.1.insert(name.into(), RawTensor { dtype: dt, bytes: bytes.clone(), shape: vec![n, k] });
        }
        for (size, ok) in [(2, true), (4, true), (8, false)] {
            for rank in 0..size {
                let s = ShardedSource { inner: &src, spec: ShardSpec { rank, size } };
                let q = s.get_raw("model.layers.0.self_attn.q_proj.weight").unwrap().unwrap();
                let got = deq(&q.bytes, n / size, k);
                assert_eq!(got, full[rank * n / size * k..(rank + 1) * n / size * k]);
                let o = s.get_raw("model.layers.0.self_attn.o_proj.weight");
                if !ok {
                    assert!(o.unwrap_err().to_string().contains("whole number of its blocks"));
                    continue;
                }
                let o = o.unwrap().unwrap();
                let kr = k / size;
                let got = deq(&o.bytes, n, kr);
                let want: Vec<f32> = full.chunks(k).flat_map(|r| r[rank * kr..(rank + 1) * kr].to_vec()).collect();
                assert_eq!(got, want);
            }
        }
    }

    #[test]
    fn shard_config_names_what_does_not_divide() {
        let cfg = ModelConfig::from_hf_json(&serde_json::json!({
            "architectures": ["LlamaForCausalLM"], "vocab_size": 49152, "hidden_size": 576,
            "intermediate_size": 1536, "num_hidden_layers": 2, "num_attention_heads": 9,
            "num_key_value_heads": 3, "rms_norm_eps": 1e-5, "max_position_embeddings": 8192
        }))
        .unwrap();
        let s = shard_config(&cfg, 3).unwrap();
        assert_eq!((s.num_heads, s.num_kv_heads, s.intermediate_size, s.vocab_size), (3, 1, 512, 16384));
        let e = shard_config(&cfg, 2).unwrap_err().to_string();
        assert!(e.contains("does not divide the model's 9 attention heads"), "{e}");
    }
}
