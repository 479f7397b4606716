//! Model loading: a GGUF file or a Hugging Face folder becomes a [`ModelConfig`], a tokenizer, a
//! chat template and a [`WeightSource`] that yields f32 tensors under Hugging Face names
//! (`model.layers.3.self_attn.q_proj.weight`), row-major in HF layout, and a GGUF matrix stored in
//! a block type also as its raw blocks (rows in HF order). The model code sees one naming and one
//! RoPE convention (rotate-half) whatever the file format.

/// GGML block formats and dequantization (they live in the backend layer, which computes with them).
pub use crate::backend::reference::ggml_quant as dequant;
pub mod gguf;
pub mod gguf_config;
pub mod safetensors;

use std::path::{Path, PathBuf};

use crate::backend::{DType, GgmlType};
use crate::chat::{CHATML_TEMPLATE, ChatTemplate, load_hf_chat_template};
use crate::error::{Error, Result};
use crate::model::config::ModelConfig;
use crate::model::rope::try_inverse_permute_gguf_rows;
pub use crate::model::weights::{RawTensor, WeightSource};
use crate::tokenizer::{GgufVocab, TextTokenizer};
use gguf::{GgufFile, GgufValue};

/// Every tensor the model needs is present with exactly the shape the config implies (a
/// transposed or reshaped weight is an error even when its element count matches). Runs on the
/// file's index only, before any weight is read or any buffer is sized by the config.
pub fn check_tensors(config: &ModelConfig, weights: &dyn WeightSource) -> Result<()> {
    for (name, want) in config.expected_tensors() {
        match weights.shape(&name)? {
            None => {
                return Err(Error::Format(format!(
                    "weight `{name}` is missing (the config says {} layers, hidden size {}, vocabulary {})",
                    config.num_layers, config.hidden_size, config.vocab_size
                )));
            }
            Some(got) if got != want => {
                return Err(Error::Format(format!("weight `{name}` has shape {got:?}, the config implies {want:?}")));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Everything loaded from a model path except the weights themselves.
pub struct LoadedModel {
    pub path: PathBuf,
    pub config: ModelConfig,
    pub tokenizer: TextTokenizer,
    pub template: ChatTemplate,
    pub weights: Box<dyn WeightSource>,
}

impl LoadedModel {
    /// Token ids that end generation: the tokenizer's (eos, eot, generation_config) and the
    /// model config's eos ids, sorted and deduplicated.
    pub fn stop_ids(&self) -> Vec<u32> {
        let mut ids = self.tokenizer.stop_ids().to_vec();
        ids.extend(&self.config.eos_token_ids);
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// What shipped head patterns are matched on (see [`crate::sparse::pattern::ModelIdentity`]).
    pub fn identity(&self) -> crate::sparse::pattern::ModelIdentity {
        let mut vocab: Vec<(u32, String)> =
            self.tokenizer.inner().get_vocab(true).into_iter().map(|(t, id)| (id, t)).collect();
        vocab.sort_unstable();
        let c = &self.config;
        crate::sparse::pattern::ModelIdentity {
            arch: c.arch.clone(),
            num_layers: c.num_layers,
            num_heads: c.num_heads,
            num_kv_heads: c.num_kv_heads,
            head_dim: c.head_dim,
            hidden_size: c.hidden_size,
            vocab_size: c.vocab_size,
            vocab_hash: crate::sparse::pattern::vocab_hash(vocab.iter().map(|(_, t)| t.as_str())),
        }
    }
}

/// Open a `.gguf` file or a Hugging Face model folder.
pub fn open(path: &Path) -> Result<LoadedModel> {
    if path.is_dir() {
        open_hf_dir(path)
    } else if path.exists() {
        open_gguf(path)
    } else {
        Err(Error::io(path, std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or folder")))
    }
}

fn open_gguf(path: &Path) -> Result<LoadedModel> {
    let g = GgufFile::open(path)?;
    let config = gguf_config::config_from_gguf(&g)?;
    let vocab = gguf_vocab(&g)?;
    let tokenizer = TextTokenizer::from_gguf(&vocab).map_err(|e| Error::Tokenizer(e.0))?;
    let source = g.get("tokenizer.chat_template").and_then(GgufValue::as_str).unwrap_or(CHATML_TEMPLATE);
    let template = make_template(source, &tokenizer)?;
    let weights = GgufWeights { g };
    // A file with no tensors at all is a vocab-only GGUF (`lserve vocab-only`: tokenizer,
    // template and config for `serve --synthetic`); building a model from it fails on the first
    // missing weight. Any tensor present means a model file, checked whole before use.
    if !weights.g.tensors.is_empty() {
        check_tensors(&config, &weights)?;
    }
    if let Some(t) = weights.g.tensor("rope_freqs.weight")
        && t.shape() != [config.head_dim / 2]
    {
        return Err(Error::Format(format!(
            "rope_freqs.weight has shape {:?}, expected [{}]",
            t.shape(),
            config.head_dim / 2
        )));
    }
    Ok(LoadedModel { path: path.to_path_buf(), config, tokenizer, template, weights: Box::new(weights) })
}

fn open_hf_dir(dir: &Path) -> Result<LoadedModel> {
    let cfg_path = dir.join("config.json");
    let text =
        crate::error::read_text_file(&cfg_path, crate::error::MAX_SIDE_FILE).map_err(|e| Error::io(&cfg_path, e))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Error::Config(format!("{}: {e}", cfg_path.display())))?;
    let config = ModelConfig::from_hf_json(&json)?;
    let tokenizer = TextTokenizer::from_hf_dir(dir).map_err(|e| Error::Tokenizer(e.0))?;
    let source = load_hf_chat_template(dir).map_err(|e| Error::Template(e.0))?;
    let template = make_template(source.as_deref().unwrap_or(CHATML_TEMPLATE), &tokenizer)?;
    let weights = safetensors::SafetensorsWeights::open(dir)?;
    check_tensors(&config, &weights)?;
    Ok(LoadedModel { path: dir.to_path_buf(), config, tokenizer, template, weights: Box::new(weights) })
}

fn make_template(source: &str, tok: &TextTokenizer) -> Result<ChatTemplate> {
    let bos = tok.bos_token().map(|(_, s)| s);
    let eos = tok.eos_token().map(|(_, s)| s);
    ChatTemplate::new(source, bos, eos).map_err(|e| Error::Template(e.0))
}

/// The `tokenizer.ggml.*` metadata of a GGUF file.
pub fn gguf_vocab(g: &GgufFile) -> Result<GgufVocab> {
    let get = |k: &str| g.get(&format!("tokenizer.ggml.{k}"));
    let strings = |k: &str| -> Vec<String> {
        get(k)
            .and_then(GgufValue::as_array)
            .unwrap_or(&[])
            .iter()
            .filter_map(|v| v.as_str().map(String::from))
            .collect()
    };
    let id = |k: &str| get(k).and_then(GgufValue::as_u64).map(|x| x as u32);
    let flag = |k: &str| get(k).and_then(GgufValue::as_bool);
    let model =
        get("model").and_then(GgufValue::as_str).ok_or_else(|| Error::Tokenizer("GGUF has no tokenizer".into()))?;
    Ok(GgufVocab {
        model: model.to_string(),
        pre: get("pre").and_then(GgufValue::as_str).map(String::from),
        tokens: strings("tokens"),
        token_types: get("token_type")
            .and_then(GgufValue::as_array)
            .unwrap_or(&[])
            .iter()
            .map(|v| v.as_i64().unwrap_or(1) as i32)
            .collect(),
        scores: get("scores")
            .and_then(GgufValue::as_array)
            .unwrap_or(&[])
            .iter()
            .map(|v| v.as_f64().unwrap_or(0.0) as f32)
            .collect(),
        merges: strings("merges"),
        bos: id("bos_token_id"),
        eos: id("eos_token_id"),
        eot: id("eot_token_id"),
        unk: id("unknown_token_id"),
        pad: id("padding_token_id"),
        add_bos: flag("add_bos_token"),
        add_eos: flag("add_eos_token"),
        add_space_prefix: flag("add_space_prefix"),
    })
}

/// GGUF tensors under HF names. llama.cpp's converter permutes the rows of llama/mistral q and k
/// projections for interleaved-pair RoPE; they are permuted back here so every format uses HF's
/// rotate-half convention (qwen2 GGUFs are not permuted).
struct GgufWeights {
    g: GgufFile,
}

fn gguf_name(hf: &str) -> Option<String> {
    let fixed = match hf {
        "model.embed_tokens.weight" => Some("token_embd.weight"),
        "model.norm.weight" => Some("output_norm.weight"),
        "lm_head.weight" => Some("output.weight"),
        _ => None,
    };
    if let Some(f) = fixed {
        return Some(f.to_string());
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (layer, what) = rest.split_once('.')?;
    let mapped = match what {
        "input_layernorm.weight" => "attn_norm.weight",
        "post_attention_layernorm.weight" => "ffn_norm.weight",
        "self_attn.q_proj.weight" => "attn_q.weight",
        "self_attn.k_proj.weight" => "attn_k.weight",
        "self_attn.v_proj.weight" => "attn_v.weight",
        "self_attn.q_proj.bias" => "attn_q.bias",
        "self_attn.k_proj.bias" => "attn_k.bias",
        "self_attn.v_proj.bias" => "attn_v.bias",
        "self_attn.o_proj.weight" => "attn_output.weight",
        "mlp.gate_proj.weight" => "ffn_gate.weight",
        "mlp.up_proj.weight" => "ffn_up.weight",
        "mlp.down_proj.weight" => "ffn_down.weight",
        _ => return None,
    };
    Some(format!("blk.{layer}.{mapped}"))
}

/// Gemma 3's GGUF names (llama.cpp): its four per-layer norms and the q/k norms. Note HF's
/// `post_attention_layernorm` is a norm *after* attention here, not the pre-FFN norm as in Llama.
fn gemma3_gguf_name(hf: &str) -> Option<String> {
    let rest = hf.strip_prefix("model.layers.")?;
    let (layer, what) = rest.split_once('.')?;
    let mapped = match what {
        "post_attention_layernorm.weight" => "post_attention_norm.weight",
        "pre_feedforward_layernorm.weight" => "ffn_norm.weight",
        "post_feedforward_layernorm.weight" => "post_ffw_norm.weight",
        "self_attn.q_norm.weight" => "attn_q_norm.weight",
        "self_attn.k_norm.weight" => "attn_k_norm.weight",
        _ => return gguf_name(hf),
    };
    Some(format!("blk.{layer}.{mapped}"))
}

impl GgufWeights {
    fn arch(&self) -> &str {
        self.g.get("general.architecture").and_then(GgufValue::as_str).unwrap_or("")
    }

    /// The GGUF tensor behind an HF name (Gemma 3 files name their extra norms differently).
    fn tensor_for(&self, name: &str) -> Option<&gguf::GgufTensorInfo> {
        let gname =
            if self.arch() == "gemma3" { gemma3_gguf_name(name).or_else(|| gguf_name(name)) } else { gguf_name(name) };
        self.g.tensor(&gname?)
    }

    /// The head count whose rows llama.cpp permuted in this tensor (llama/mistral q and k), if any.
    fn permuted_heads(&self, gname: &str, rows: usize) -> Result<Option<usize>> {
        let arch = self.arch();
        let k = if gname.contains("attn_q") {
            "attention.head_count"
        } else if gname.contains("attn_k") {
            "attention.head_count_kv"
        } else {
            return Ok(None);
        };
        if arch != "llama" && arch != "mistral" {
            return Ok(None);
        }
        let key = format!("{arch}.{k}");
        let heads = self.g.get(&key).and_then(GgufValue::as_u64).map(|x| x as usize);
        let heads = heads.or_else(|| {
            self.g.get(&format!("{arch}.attention.head_count")).and_then(GgufValue::as_u64).map(|x| x as usize)
        });
        let heads = heads.ok_or_else(|| Error::Config(format!("GGUF lacks `{key}`")))?;
        if heads == 0 || !rows.is_multiple_of(2 * heads) {
            return Err(Error::Format(format!("`{gname}` has {rows} rows, not divisible over {heads} heads")));
        }
        Ok(Some(heads))
    }
}

impl WeightSource for GgufWeights {
    fn get(&self, name: &str) -> Result<Option<(Vec<f32>, Vec<usize>)>> {
        let Some(t) = self.tensor_for(name) else {
            return Ok(None);
        };
        let gname = t.name.clone();
        let (mut data, shape) = self.g.tensor_f32(&gname)?;
        if self.arch() == "gemma3" && gname.ends_with("norm.weight") {
            // llama.cpp's converter stores Gemma's RMSNorm weights as 1 + w; HF (and the model
            // code) hold w and multiply by 1 + w.
            data.iter_mut().for_each(|x| *x -= 1.0);
        }
        let (rows, cols) = (shape[0], shape.get(1).copied().unwrap_or(1));
        match self.permuted_heads(&gname, rows)? {
            Some(heads) => {
                let data = try_inverse_permute_gguf_rows(&data, rows, cols, heads)
                    .map_err(|e| Error::Format(format!("`{gname}`: {e}")))?;
                Ok(Some((data, shape)))
            }
            None => Ok(Some((data, shape))),
        }
    }

    /// A 2-D tensor stored in a block type, its rows in HF order: the q/k un-permutation moves
    /// whole rows of blocks (a row is `cols / block_size` blocks, so no block is split).
    fn get_raw(&self, name: &str) -> Result<Option<RawTensor>> {
        let Some(t) = self.tensor_for(name) else {
            return Ok(None);
        };
        if matches!(t.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) || t.dims.len() != 2 {
            return Ok(None);
        }
        let shape = t.shape();
        let (rows, cols) = (shape[0], shape[1]);
        let bytes = self.g.tensor_bytes(t);
        if DType::Ggml(t.ty).weight_bytes(rows, cols) != Some(bytes.len()) {
            // Rows that are not whole blocks cannot be a quantized weight: read it as f32.
            return Ok(None);
        }
        let row_bytes = bytes.len() / rows.max(1);
        let bytes = match self.permuted_heads(&t.name, rows)? {
            Some(heads) => try_inverse_permute_gguf_rows(bytes, rows, row_bytes, heads)
                .map_err(|e| Error::Format(format!("`{}`: {e}", t.name)))?,
            None => bytes.to_vec(),
        };
        Ok(Some(RawTensor { dtype: DType::Ggml(t.ty), bytes, shape }))
    }

    fn shape(&self, name: &str) -> Result<Option<Vec<usize>>> {
        let Some(t) = gguf_name(name).and_then(|g| self.g.tensor(&g)) else {
            return Ok(None);
        };
        if !t.ty.can_dequantize() {
            return Err(Error::UnsupportedTensorType { name: t.name.clone(), ty: t.ty.name().to_string() });
        }
        Ok(Some(t.shape()))
    }

    fn rope_freq_factors(&self) -> Result<Option<Vec<f32>>> {
        if self.g.tensor("rope_freqs.weight").is_none() {
            return Ok(None);
        }
        Ok(Some(self.g.tensor_f32("rope_freqs.weight")?.0))
    }
}

/// The bytes of every tensor's data in a GGUF file (what `device_weight_bytes` is compared with).
pub fn gguf_tensor_bytes(g: &GgufFile) -> u64 {
    g.tensors.iter().map(|t| t.n_bytes).sum()
}

/// Weights held in memory under HF names: tests and synthetic benchmarks build models with it.
#[derive(Clone, Debug, Default)]
pub struct MemWeights {
    pub tensors: std::collections::HashMap<String, (Vec<f32>, Vec<usize>)>,
}

impl MemWeights {
    pub fn insert(&mut self, name: &str, shape: &[usize], data: Vec<f32>) {
        self.tensors.insert(name.to_string(), (data, shape.to_vec()));
    }
}

impl WeightSource for MemWeights {
    fn get(&self, name: &str) -> Result<Option<(Vec<f32>, Vec<usize>)>> {
        Ok(self.tensors.get(name).cloned())
    }
    fn shape(&self, name: &str) -> Result<Option<Vec<usize>>> {
        Ok(self.tensors.get(name).map(|(_, s)| s.clone()))
    }
}
