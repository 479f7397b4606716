//! Llama-family model configuration, read from a Hugging Face `config.json` or GGUF metadata.
//!
//! One struct covers Llama 2/3/3.1, Mistral, Qwen2/2.5 and SmolLM: they differ only in the fields
//! here (GQA head counts, qkv bias, tied embeddings, RoPE scaling, sliding window). Anything the
//! forward pass cannot honour (an unknown architecture, partial rotary, a head_dim that does not
//! divide) is refused here with a message, before any weight is read.

use serde_json::Value;

use super::rope::{RopeConfig, RopeScaling};
use crate::error::{Error, Result};
use crate::loader::gguf::GgufFile;

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
    /// Gemma 3's extras (arch "gemma3"); None for the Llama family.
    pub gemma: Option<GemmaParams>,
}

/// What Gemma 3 adds to the shared fields: interleaved sliding-window ("local") and global
/// layers, the local layers' own RoPE base, and the attention scale. Layer `i` is global when
/// `(i + 1) % global_every == 0` (HF `sliding_window_pattern` / llama.cpp's swa pattern 6).
/// `rope_theta` / `rope_scaling` of [`ModelConfig`] apply to the global layers.
#[derive(Clone, Debug, PartialEq)]
pub struct GemmaParams {
    /// Keys a local layer's query sees, itself included (HF: `q - k < sliding_window`).
    pub sliding_window: usize,
    pub global_every: usize,
    /// RoPE base of the local layers (HF `rope_local_base_freq`; llama.cpp fixes it at 10000).
    pub local_rope_theta: f32,
    /// Scores are scaled by `query_pre_attn_scalar^-0.5` (HF; 256 = head_dim for 270M).
    pub query_pre_attn_scalar: f32,
}

impl GemmaParams {
    pub fn is_local(&self, layer: usize) -> bool {
        !(layer + 1).is_multiple_of(self.global_every)
    }
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
        // transformers 5 nests Gemma 3's per-layer-type RoPE under rope_parameters.full_attention.
        let rope_params = v.get("rope_parameters").map(|r| r.get("full_attention").unwrap_or(r));
        let scaling = v.get("rope_scaling").filter(|s| !s.is_null()).or(rope_params);
        let rope_scaling = RopeScaling::from_hf_json(scaling, max_pos).map_err(Error::Config)?;
        let theta =
            v["rope_theta"].as_f64().or_else(|| rope_params.and_then(|r| r["rope_theta"].as_f64())).unwrap_or(10000.0);
        let sliding = v["sliding_window"].as_u64().map(|x| x as usize);
        let use_sliding = v["use_sliding_window"].as_bool().unwrap_or(arch == "mistral");
        let gemma = (arch == "gemma3").then(|| gemma_from_hf(v)).transpose()?;
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
            tie_word_embeddings: v["tie_word_embeddings"].as_bool().unwrap_or(arch == "gemma3"),
            attention_bias: v["attention_bias"].as_bool().unwrap_or(arch == "qwen2"),
            sliding_window: sliding.filter(|&w| use_sliding && w < max_pos && gemma.is_none()),
            bos_token_id: v["bos_token_id"].as_u64().map(|x| x as u32),
            eos_token_ids: id_list(&v["eos_token_id"]),
            gemma,
            arch,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Read the config from GGUF metadata (`{arch}.*` keys).
    pub fn from_gguf(g: &GgufFile) -> Result<ModelConfig> {
        let arch = g.get("general.architecture").and_then(|v| v.as_str()).unwrap_or("");
        let arch = match arch {
            "llama" | "mistral" | "qwen2" | "gemma3" => arch.to_string(),
            other => return Err(Error::UnsupportedArch(other.to_string())),
        };
        let key = |k: &str| g.get(&format!("{arch}.{k}"));
        let req = |k: &str| -> Result<usize> {
            key(k)
                .and_then(|v| v.as_u64())
                .map(|x| x as usize)
                .ok_or_else(|| Error::Config(format!("GGUF metadata lacks `{arch}.{k}`")))
        };
        let hidden = req("embedding_length")?;
        let heads = req("attention.head_count")?;
        let head_dim =
            key("attention.key_length").and_then(|v| v.as_u64()).map_or(hidden / heads.max(1), |x| x as usize);
        if key("rope.dimension_count").and_then(|v| v.as_u64()).is_some_and(|d| d as usize != head_dim) {
            return Err(Error::Config("partial rotary embeddings are not supported".into()));
        }
        let ctx = req("context_length")?;
        let vocab = match key("vocab_size").and_then(|v| v.as_u64()) {
            Some(n) => n as usize,
            None => g.get("tokenizer.ggml.tokens").and_then(|v| v.as_array()).map_or(0, |a| a.len()),
        };
        let gemma = (arch == "gemma3")
            .then(|| -> Result<GemmaParams> {
                Ok(GemmaParams {
                    sliding_window: req("attention.sliding_window")?,
                    global_every: 6,
                    local_rope_theta: 10000.0,
                    query_pre_attn_scalar: head_dim as f32,
                })
            })
            .transpose()?;
        let cfg = ModelConfig {
            vocab_size: vocab,
            hidden_size: hidden,
            intermediate_size: req("feed_forward_length")?,
            num_layers: req("block_count")?,
            num_heads: heads,
            num_kv_heads: key("attention.head_count_kv").and_then(|v| v.as_u64()).map_or(heads, |x| x as usize),
            head_dim,
            rms_norm_eps: key("attention.layer_norm_rms_epsilon").and_then(|v| v.as_f64()).unwrap_or(1e-5) as f32,
            rope_theta: key("rope.freq_base").and_then(|v| v.as_f64()).unwrap_or(10000.0) as f32,
            rope_scaling: gguf_rope_scaling(g, &arch, ctx)?,
            max_position_embeddings: ctx,
            tie_word_embeddings: g.tensor("output.weight").is_none(),
            attention_bias: g.tensor("blk.0.attn_q.bias").is_some(),
            sliding_window: None,
            bos_token_id: g.get("tokenizer.ggml.bos_token_id").and_then(|v| v.as_u64()).map(|x| x as u32),
            eos_token_ids: g
                .get("tokenizer.ggml.eos_token_id")
                .and_then(|v| v.as_u64())
                .map(|x| x as u32)
                .into_iter()
                .collect(),
            gemma,
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
        "gemma3_text" | "Gemma3ForCausalLM" => Some("gemma3"),
        _ => None,
    };
    archs.iter().copied().chain(std::iter::once(model_type)).find_map(family).map(str::to_string).ok_or_else(|| {
        let what = archs.first().copied().unwrap_or(model_type);
        Error::UnsupportedArch(if what.is_empty() { "<none given>".into() } else { what.into() })
    })
}

/// Gemma 3 fields of a `config.json` (text model; a multimodal `Gemma3ForConditionalGeneration`
/// is refused by the architecture check before this runs).
fn gemma_from_hf(v: &Value) -> Result<GemmaParams> {
    let window =
        v["sliding_window"].as_u64().ok_or_else(|| Error::Config("config.json lacks `sliding_window`".into()))?;
    let every = match v["layer_types"].as_array() {
        Some(types) => {
            let global: Vec<bool> = types.iter().map(|t| t.as_str() == Some("full_attention")).collect();
            let every = global.iter().position(|&g| g).map_or(global.len() + 1, |i| i + 1);
            if global.iter().enumerate().any(|(i, &g)| g != (i + 1).is_multiple_of(every)) {
                return Err(Error::Config("Gemma 3 layer_types must repeat one local/global pattern".into()));
            }
            every
        }
        None => v["sliding_window_pattern"].as_u64().unwrap_or(6) as usize,
    };
    let local = v["rope_local_base_freq"]
        .as_f64()
        .or_else(|| v["rope_parameters"]["sliding_attention"]["rope_theta"].as_f64())
        .unwrap_or(10000.0) as f32;
    if v["attn_logit_softcapping"].as_f64().is_some() || v["final_logit_softcapping"].as_f64().is_some() {
        return Err(Error::Config("Gemma 3 logit soft-capping is not supported".into()));
    }
    if let Some(act) = v["hidden_activation"].as_str().filter(|a| !matches!(*a, "gelu_pytorch_tanh" | "gelu_tanh")) {
        return Err(Error::Config(format!("Gemma 3 hidden_activation `{act}` is not supported")));
    }
    Ok(GemmaParams {
        sliding_window: window as usize,
        global_every: every.max(1),
        local_rope_theta: local,
        query_pre_attn_scalar: v["query_pre_attn_scalar"].as_f64().unwrap_or(256.0) as f32,
    })
}

fn id_list(v: &Value) -> Vec<u32> {
    match v {
        Value::Number(n) => n.as_u64().map(|x| x as u32).into_iter().collect(),
        Value::Array(a) => a.iter().filter_map(Value::as_u64).map(|x| x as u32).collect(),
        _ => vec![],
    }
}

/// GGUF's `{arch}.rope.scaling.*` keys (llama.cpp naming) mapped onto [`RopeScaling`]. Llama 3.1
/// GGUFs bake the llama3 scaling into a `rope_freqs.weight` tensor instead; that case is read by
/// the weight loader, which divides the inverse frequencies by it.
fn gguf_rope_scaling(g: &GgufFile, arch: &str, ctx: usize) -> Result<RopeScaling> {
    let key = |k: &str| g.get(&format!("{arch}.rope.scaling.{k}"));
    let factor = key("factor").and_then(|v| v.as_f64()).unwrap_or(1.0) as f32;
    let orig = key("original_context_length").and_then(|v| v.as_u64()).map_or(ctx, |x| x as usize);
    Ok(match key("type").and_then(|v| v.as_str()).unwrap_or("none") {
        "none" => RopeScaling::None,
        _ if factor == 1.0 => RopeScaling::None,
        "linear" => RopeScaling::Linear { factor },
        "yarn" => RopeScaling::Yarn {
            factor,
            original_max_position: orig,
            beta_fast: key("yarn_beta_fast").and_then(|v| v.as_f64()).unwrap_or(32.0) as f32,
            beta_slow: key("yarn_beta_slow").and_then(|v| v.as_f64()).unwrap_or(1.0) as f32,
            mscale: None,
            mscale_all_dim: None,
            attention_factor: None,
            truncate: true,
        },
        other => {
            return Err(Error::Config(format!("GGUF rope scaling type `{other}` is not supported")));
        }
    })
}

#[cfg(test)]
mod gemma_tests {
    use super::*;
    use serde_json::json;

    fn gemma_json(extra: Value) -> Value {
        let mut v = json!({
            "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "vocab_size": 262144,
            "hidden_size": 640, "intermediate_size": 2048, "num_hidden_layers": 18, "num_attention_heads": 4,
            "num_key_value_heads": 1, "head_dim": 256, "rms_norm_eps": 1e-6, "max_position_embeddings": 32768,
            "sliding_window": 512, "query_pre_attn_scalar": 256, "hidden_activation": "gelu_pytorch_tanh",
            "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "rope_scaling": null,
            "bos_token_id": 2, "eos_token_id": [1, 106]
        });
        v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        v
    }

    #[test]
    fn hf_gemma3_config() {
        let c = ModelConfig::from_hf_json(&gemma_json(json!({}))).unwrap();
        assert_eq!((c.arch.as_str(), c.tie_word_embeddings, c.sliding_window), ("gemma3", true, None));
        let g = c.gemma.unwrap();
        assert_eq!(
            (g.sliding_window, g.global_every, g.local_rope_theta, g.query_pre_attn_scalar),
            (512, 6, 1e4, 256.0)
        );
        assert_eq!((0..18).filter(|&l| !g.is_local(l)).collect::<Vec<_>>(), [5, 11, 17]);
        assert_eq!((c.rope_theta, c.eos_token_ids), (1e6, vec![1, 106]));
    }

    #[test]
    fn hf_gemma3_layer_types_and_rope_parameters() {
        // transformers 5 style: layer_types and per-type rope_parameters.
        let types: Vec<&str> =
            (0..8).map(|l| if (l + 1) % 4 == 0 { "full_attention" } else { "sliding_attention" }).collect();
        let v = gemma_json(json!({
            "num_hidden_layers": 8, "layer_types": types, "rope_theta": null, "rope_local_base_freq": null,
            "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 500000.0},
                                "sliding_attention": {"rope_type": "default", "rope_theta": 20000.0}}
        }));
        let c = ModelConfig::from_hf_json(&v).unwrap();
        let g = c.gemma.unwrap();
        assert_eq!((g.global_every, g.local_rope_theta, c.rope_theta), (4, 20000.0, 500000.0));
        let bad: Vec<&str> = vec!["sliding_attention", "full_attention", "full_attention"];
        assert!(ModelConfig::from_hf_json(&gemma_json(json!({"num_hidden_layers": 3, "layer_types": bad}))).is_err());
        let capped = gemma_json(json!({"final_logit_softcapping": 30.0}));
        assert!(ModelConfig::from_hf_json(&capped).is_err(), "soft-capping is refused, not ignored");
        assert!(ModelConfig::from_hf_json(&gemma_json(json!({"hidden_activation": "relu"}))).is_err());
    }
}
