//! lserve: a long-context LLM inference and serving engine with LServe-style unified sparse
//! attention over a paged KV cache, on CPU (the reference), wgpu and CUDA backends.
//! See docs/architecture.md for the map.

pub mod backend;
pub mod bench;
pub mod chat;
pub mod engine;
pub mod error;
pub mod eval;
pub mod fetch;
pub mod kv;
pub mod loader;
pub mod model;
pub mod plot;
pub mod sampling;
pub mod sched;
pub mod server;
pub mod serving;
pub mod sparse;
pub mod tokenizer;

pub use error::{Error, Result};
