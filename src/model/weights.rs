//! What the forward pass reads its weights from: f32 tensors under Hugging Face names in HF
//! layout. The loaders (`crate::loader`) implement it for GGUF, safetensors and in-memory
//! weights; the model depends only on this trait, never on a loader.

use crate::error::Result;

/// f32 tensors by Hugging Face name.
pub trait WeightSource: Send + Sync {
    /// The tensor and its row-major shape, or Ok(None) if the file does not have it.
    fn get(&self, name: &str) -> Result<Option<(Vec<f32>, Vec<usize>)>>;
    /// Llama 3.1 GGUF `rope_freqs.weight`: per-pair divisors of the inverse frequencies.
    fn rope_freq_factors(&self) -> Result<Option<Vec<f32>>> {
        Ok(None)
    }
    /// The row-major shape of a tensor from the file's index, without reading its data; Ok(None)
    /// if the file does not have it, Err if it has a type lserve cannot convert.
    fn shape(&self, name: &str) -> Result<Option<Vec<usize>>>;
}
