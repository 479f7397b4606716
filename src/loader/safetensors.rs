//! Hugging Face safetensors weights: one `model.safetensors` or shards listed in
//! `model.safetensors.index.json`, memory-mapped; F32, F16 and BF16 tensors are converted to f32
//! on request. Headers are parsed (and so validated: the safetensors crate checks every tensor's
//! byte range against its dtype and shape and the file size) when the folder is opened; the
//! shapes are kept so the loader can check them against the config before reading any data.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};

use super::WeightSource;
use crate::error::{Error, Result};

pub struct SafetensorsWeights {
    files: Vec<(PathBuf, Mmap)>,
    /// tensor name -> index into `files`, row-major shape, dtype.
    where_: HashMap<String, (usize, Vec<usize>, Dtype)>,
}

impl SafetensorsWeights {
    pub fn open(dir: &Path) -> Result<Self> {
        let index = dir.join("model.safetensors.index.json");
        let names: Vec<String> = if index.exists() {
            let text =
                crate::error::read_text_file(&index, crate::error::MAX_SIDE_FILE).map_err(|e| Error::io(&index, e))?;
            let v: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| Error::Format(format!("{}: {e}", index.display())))?;
            let map = v["weight_map"]
                .as_object()
                .ok_or_else(|| Error::Format(format!("{}: no `weight_map`", index.display())))?;
            let mut files: Vec<String> = map.values().filter_map(|f| f.as_str().map(String::from)).collect();
            files.sort();
            files.dedup();
            files
        } else if dir.join("model.safetensors").exists() {
            vec!["model.safetensors".into()]
        } else {
            return Err(Error::Format(format!("{}: no model.safetensors or index file", dir.display())));
        };
        let mut files = Vec::new();
        let mut where_ = HashMap::new();
        for name in names {
            if name.contains('/') || name.contains("..") {
                return Err(Error::Format(format!("shard name `{name}` leaves the model folder")));
            }
            let path = dir.join(&name);
            let file = std::fs::File::open(&path).map_err(|e| Error::io(&path, e))?;
            // SAFETY: read-only map; see loader::gguf.
            let mmap = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(&path, e))?;
            let st = SafeTensors::deserialize(&mmap).map_err(|e| Error::Format(format!("{}: {e}", path.display())))?;
            for (n, view) in st.tensors() {
                where_.insert(n, (files.len(), view.shape().to_vec(), view.dtype()));
            }
            files.push((path, mmap));
        }
        Ok(SafetensorsWeights { files, where_ })
    }
}

fn to_f32(dtype: Dtype, bytes: &[u8]) -> Option<Vec<f32>> {
    let words2 = || bytes.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]]));
    Some(match dtype {
        Dtype::F32 => bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
        Dtype::F16 => words2().map(|w| half::f16::from_bits(w).to_f32()).collect(),
        Dtype::BF16 => words2().map(|w| half::bf16::from_bits(w).to_f32()).collect(),
        _ => return None,
    })
}

impl WeightSource for SafetensorsWeights {
    fn get(&self, name: &str) -> Result<Option<(Vec<f32>, Vec<usize>)>> {
        let Some(&(i, _, _)) = self.where_.get(name) else {
            return Ok(None);
        };
        let (path, mmap) = &self.files[i];
        let st = SafeTensors::deserialize(mmap).map_err(|e| Error::Format(format!("{}: {e}", path.display())))?;
        let t = st.tensor(name).map_err(|e| Error::Format(format!("{}: {e}", path.display())))?;
        let data = to_f32(t.dtype(), t.data())
            .ok_or_else(|| Error::UnsupportedTensorType { name: name.to_string(), ty: format!("{:?}", t.dtype()) })?;
        Ok(Some((data, t.shape().to_vec())))
    }

    fn shape(&self, name: &str) -> Result<Option<Vec<usize>>> {
        let Some((_, shape, dtype)) = self.where_.get(name) else {
            return Ok(None);
        };
        if !matches!(dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16) {
            return Err(Error::UnsupportedTensorType { name: name.to_string(), ty: format!("{dtype:?}") });
        }
        Ok(Some(shape.clone()))
    }
}
