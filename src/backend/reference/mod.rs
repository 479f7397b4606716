//! Host functions that define what an op computes, shared by the CPU backend (which runs them)
//! and everything above it (which builds the ops' inputs). The GPU kernels mirror them; the
//! parity tests hold the kernels to them. Nothing here depends on a layer above the backend:
//! the model, the cache and the engine import these, never the other way round.
//!
//! - [`sample`]: the `sample` / `argmax` reference (`sample_row`, `argmax`, `RowSampling`).
//! - [`rope`]: rotate-half RoPE with precomputed inverse frequencies (`rope_append_kv`).
//! - [`kv_layout`]: how the attention ops address a streaming ring and read `head_map`.
//! - [`kv_quant`]: the 8-bit KV quantization (int8, fp8 e4m3) whose bytes every backend stores.

pub mod kv_layout;
pub mod kv_quant;
pub mod rope;
pub mod sample;
