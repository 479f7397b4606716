//! Host functions that define what an op computes, shared by the CPU backend (which runs them)
//! and everything above it (which builds the ops' inputs). The GPU kernels mirror them; the
//! parity tests hold the kernels to them. Nothing here depends on a layer above the backend:
//! the model, the cache and the engine import these, never the other way round.
//!
//! - [`sample`]: the `sample` / `argmax` reference (`sample_row`, `argmax`, `RowSampling`).
//! - [`rope`]: rotate-half RoPE with precomputed inverse frequencies (`rope_append_kv`).
//! - [`kv_layout`]: how the attention ops address a streaming ring and read `head_map`.
//! - [`kv_quant`]: the 8-bit KV quantization (int8, fp8 e4m3) whose bytes every backend stores.
//! - [`ggml_quant`]: GGML's block formats (GGUF tensors) and their dequantization: the numbers a
//!   quantized weight (`DType::Ggml`) stands for on every backend.
//! - [`weight_quant`]: quantized weight matrices row by row (GGML blocks, int8/fp8 with row scales).

pub mod ggml_quant;
pub mod kv_layout;
pub mod kv_quant;
pub mod rope;
pub mod sample;
pub mod weight_quant;
