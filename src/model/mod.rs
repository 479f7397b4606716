//! Llama-family models: configuration, RoPE variants, and the backend-agnostic forward pass.
pub mod batch;
pub mod config;
pub mod llama;
pub mod pool;
pub mod rope;
pub mod step;
pub mod weights;
