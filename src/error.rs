//! The library's error type. Every failure a user can cause (a bad file, a bad flag, a prompt that
//! does not fit) is a value of [`Error`] with a message that names the problem; the binary turns it
//! into a non-zero exit. Library code never panics on input.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The io error is part of the message, not a `source`: a chain-printing caller (the CLI's
    /// `{:#}`) would print it twice.
    #[error("{path}: {err}")]
    Io { path: PathBuf, err: std::io::Error },
    #[error("{path}: not a valid GGUF file: {msg}")]
    Gguf { path: PathBuf, msg: String },
    #[error("model format: {0}")]
    Format(String),
    #[error("unsupported model architecture `{0}` (supported: llama, mistral, qwen2, smollm)")]
    UnsupportedArch(String),
    #[error("tensor `{name}` has type {ty}, which lserve cannot dequantize")]
    UnsupportedTensorType { name: String, ty: String },
    #[error("model config: {0}")]
    Config(String),
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("chat template: {0}")]
    Template(String),
    #[error("the prompt has {tokens} tokens but the context holds {context}")]
    PromptTooLong { tokens: usize, context: usize },
    #[error("backend {backend}: {msg}")]
    Backend { backend: &'static str, msg: String },
    #[error("out of KV cache pages: {0}")]
    OutOfPages(String),
    #[error("fetching the model: {0}")]
    Fetch(String),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), err: source }
    }
}
