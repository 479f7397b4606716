//! Llama-family models and Gemma 3: configuration, RoPE variants, and the backend-agnostic forward
//! passes (`llama.rs`; `gemma3.rs`, reached through `Llama` when the architecture is gemma3).
pub mod batch;
pub mod blocks;
pub mod config;
pub mod gemma3;
pub mod linear;
pub mod llama;
pub mod mix;
pub mod pool;
pub mod rope;
pub mod shard;
pub mod step;
pub mod weights;
