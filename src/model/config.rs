//! Llama-family model configuration, read from a Hugging Face `config.json` (GGUF metadata is read
//! by the loader, `crate::loader::gguf_config`).
//!
//! One struct covers Llama 2/3/3.1, Mistral, Qwen2/2.5 and SmolLM: they differ only in the fields
//! here (GQA head counts, qkv bias, tied embeddings, RoPE scaling, sliding window). Anything the
//! forward pass cannot honour (an unknown architecture, partial rotary, a head_dim that does not
//! divide) is refused here with a message, before any weight is read.

use serde_json::Value;

use super::rope::{RopeConfig, RopeScaling};
use crate::error::{Error, Result};

#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    /// HF-style architecture family: "llama", "mistral" or "qwen2".
    pub arch: String,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f32,
    pub rope_theta: f32,
    pub rope_scaling: RopeScaling,
    /// Positions the model was trained for (the context limit lserve enforces).
    pub max_position_embeddings: usize,
    pub tie_word_embeddings: bool,
    /// q/k/v projections carry a bias (Qwen2).
    pub attention_bias: bool,
    /// Mistral v0.1-style sliding window attention, in tokens; None = full attention.
    pub sliding_window: Option<usize>,
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
}

impl ModelConfig {
    pub fn rope(&self) -> RopeConfig {
        RopeConfig {
            head_dim: self.head_dim,
            theta: self.rope_theta,
            scaling: self.rope_scaling.clone(),
            max_position: self.max_position_embeddings,
        }
    }

    /// The longest sequence lserve accepts: `max_position_embeddings`, extended by the RoPE
    /// scalings whose configs give the original window (linear and dynamic NTK multiply it by the
    /// factor; YaRN reaches `original_max_position * factor`).
    pub fn context_len(&self) -> usize {
        let m = self.max_position_embeddings;
        match &self.rope_scaling {
            RopeScaling::Linear { factor } | RopeScaling::DynamicNtk { factor } => {
                (m as f32 * factor.max(1.0)) as usize
            }
            RopeScaling::Yarn { factor, original_max_position, .. } => {
                m.max((*original_max_position as f32 * factor) as usize)
            }
            _ => m,
        }
    }

    /// Width of the fused q|k|v projection output.
    pub fn qkv_dim(&self) -> usize {
        (self.num_heads + 2 * self.num_kv_heads) * self.head_dim
    }

    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Config(m));
        let dims = [
            self.vocab_size,
            self.hidden_size,
            self.intermediate_size,
            self.num_layers,
            self.num_heads,
            self.num_kv_heads,
            self.head_dim,
        ];
        if dims.contains(&0) {
            return bad(format!("a size is zero: {self:?}"));
        }
        if !self.num_heads.is_multiple_of(self.num_kv_heads) {
            return bad(format!("{} heads are not a multiple of {} KV heads", self.num_heads, self.num_kv_heads));
        }
        if !self.head_dim.is_multiple_of(2) {
            return bad(format!("head_dim {} is odd", self.head_dim));
        }
        if !(self.rms_norm_eps > 0.0 && self.rope_theta > 0.0) {
            return bad("rms_norm_eps and rope_theta must be positive".into());
        }
        Ok(())
    }

    /// Parse a Hugging Face `config.json`.
    pub fn from_hf_json(v: &Value) -> Result<ModelConfig> {
        let archs: Vec<&str> = v["architectures"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        let model_type = v["model_type"].as_str().unwrap_or("");
        let arch = hf_arch(model_type, &archs)?;
        let req = |k: &str| -> Result<usize> {
            v[k].as_u64().map(|x| x as usize).ok_or_else(|| Error::Config(format!("config.json lacks `{k}`")))
        };
        let hidden = req("hidden_size")?;
        let heads = req("num_attention_heads")?;
        let max_pos = v["max_position_embeddings"].as_u64().unwrap_or(4096) as usize;
        if v["partial_rotary_factor"].as_f64().is_some_and(|f| f != 1.0) {
            return Err(Error::Config("partial rotary embeddings are not supported".into()));
        }
        let scaling = v.get("rope_scaling").or_else(|| v.get("rope_parameters"));
        let rope_scaling = RopeScaling::from_hf_json(scaling, max_pos).map_err(Error::Config)?;
        let theta = v["rope_theta"].as_f64().or_else(|| v["rope_parameters"]["rope_theta"].as_f64()).unwrap_or(10000.0);
        let sliding = v["sliding_window"].as_u64().map(|x| x as usize);
        let use_sliding = v["use_sliding_window"].as_bool().unwrap_or(arch == "mistral");
        let cfg = ModelConfig {
            vocab_size: req("vocab_size")?,
            hidden_size: hidden,
            intermediate_size: req("intermediate_size")?,
            num_layers: req("num_hidden_layers")?,
            num_heads: heads,
            num_kv_heads: v["num_key_value_heads"].as_u64().map_or(heads, |x| x as usize),
            head_dim: v["head_dim"].as_u64().map_or(hidden / heads.max(1), |x| x as usize),
            rms_norm_eps: v["rms_norm_eps"].as_f64().unwrap_or(1e-6) as f32,
            rope_theta: theta as f32,
            rope_scaling,
            max_position_embeddings: max_pos,
            tie_word_embeddings: v["tie_word_embeddings"].as_bool().unwrap_or(false),
            attention_bias: v["attention_bias"].as_bool().unwrap_or(arch == "qwen2"),
            sliding_window: sliding.filter(|&w| use_sliding && w < max_pos),
            bos_token_id: v["bos_token_id"].as_u64().map(|x| x as u32),
            eos_token_ids: id_list(&v["eos_token_id"]),
            arch,
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

fn hf_arch(model_type: &str, archs: &[&str]) -> Result<String> {
    let family = |s: &str| match s {
        "llama" | "LlamaForCausalLM" => Some("llama"),
        "mistral" | "MistralForCausalLM" => Some("mistral"),
        "qwen2" | "Qwen2ForCausalLM" => Some("qwen2"),
        _ => None,
    };
    archs.iter().copied().chain(std::iter::once(model_type)).find_map(family).map(str::to_string).ok_or_else(|| {
        let what = archs.first().copied().unwrap_or(model_type);
        Error::UnsupportedArch(if what.is_empty() { "<none given>".into() } else { what.into() })
    })
}

fn id_list(v: &Value) -> Vec<u32> {
    match v {
        Value::Number(n) => n.as_u64().map(|x| x as u32).into_iter().collect(),
        Value::Array(a) => a.iter().filter_map(Value::as_u64).map(|x| x as u32).collect(),
        _ => vec![],
    }
}
