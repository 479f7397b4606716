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

/// Most bytes of a JSON / template side file of a model folder that lserve reads
/// ([`read_text_file`]): config.json, tokenizer_config.json, generation_config.json,
/// chat_template.jinja, model.safetensors.index.json.
pub const MAX_SIDE_FILE: u64 = 64 << 20;

/// The text of a regular file of at most `limit` bytes. A device, FIFO or a symlink to one (whose
/// size says nothing about what a read returns) and a longer file are errors, not a read without
/// end.
pub fn read_text_file(path: &std::path::Path, limit: u64) -> std::io::Result<String> {
    use std::io::Read;
    let too_long = || std::io::Error::new(std::io::ErrorKind::InvalidData, format!("larger than {limit} bytes"));
    // Checked before opening: opening a FIFO blocks until a writer comes.
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"));
    }
    if meta.len() > limit {
        return Err(too_long());
    }
    // Read at most one byte past the limit: the file may have grown since.
    let mut text = String::new();
    std::fs::File::open(path)?.take(limit + 1).read_to_string(&mut text)?;
    if text.len() as u64 > limit {
        return Err(too_long());
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A short regular file reads; a longer one, a directory, and a device (whose size says
    /// nothing about what reads return) are errors, never an endless read.
    #[test]
    fn read_text_file_is_bounded() {
        let dir = std::env::temp_dir().join(format!("lserve-read-text-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("a.json");
        std::fs::write(&f, "{\"x\": 1}").unwrap();
        assert_eq!(read_text_file(&f, 8).unwrap(), "{\"x\": 1}");
        assert!(read_text_file(&f, 7).unwrap_err().to_string().contains("larger than 7 bytes"));
        assert!(read_text_file(&dir, 100).is_err());
        #[cfg(unix)]
        {
            let link = dir.join("zero.json");
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
            assert!(read_text_file(&link, 100).unwrap_err().to_string().contains("not a regular file"));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
