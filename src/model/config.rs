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
    /// The window within 1 ..= the model's positions (it sizes each local layer's KV ring), the
    /// layer pattern at least 1, the local RoPE base and the attention scalar finite and above 0.
    pub fn validate(&self, max_positions: usize) -> Result<()> {
        let bad = |m: String| Err(Error::Config(m));
        if !(1..=max_positions).contains(&self.sliding_window) {
            return bad(format!(
                "sliding_window {} must be between 1 and max_position_embeddings ({max_positions})",
                self.sliding_window
            ));
        }
        if self.global_every == 0 {
            return bad("sliding_window_pattern is zero".into());
        }
        for (name, v) in
            [("rope_local_base_freq", self.local_rope_theta), ("query_pre_attn_scalar", self.query_pre_attn_scalar)]
        {
            if !(v.is_finite() && v > 0.0) {
                return bad(format!("{name} must be a finite number above 0, got {v}"));
            }
        }
        Ok(())
    }

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

    /// A Gemma 3 window wider than the model's positions means full attention (as in HF): it
    /// becomes the positions, so that it never sizes a KV ring beyond the context.
    pub fn clamp_window(&mut self) {
        let max = self.max_position_embeddings;
        if let Some(g) = &mut self.gemma {
            g.sliding_window = g.sliding_window.min(max);
        }
    }

    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Config(m));
        let dims = [
            ("vocab_size", self.vocab_size, MAX_VOCAB),
            ("hidden_size", self.hidden_size, MAX_HIDDEN),
            ("intermediate_size", self.intermediate_size, MAX_INTERMEDIATE),
            ("num_layers", self.num_layers, MAX_LAYERS),
            ("num_heads", self.num_heads, MAX_HEADS),
            ("num_kv_heads", self.num_kv_heads, MAX_HEADS),
            ("head_dim", self.head_dim, MAX_HEAD_DIM),
            ("max_position_embeddings", self.max_position_embeddings, MAX_POSITIONS),
        ];
        for (name, v, max) in dims {
            if v == 0 {
                return bad(format!("{name} is zero"));
            }
            if v > max {
                return bad(format!("{name} {v} is larger than lserve accepts ({max}): a corrupt file?"));
            }
        }
        if !self.num_heads.is_multiple_of(self.num_kv_heads) {
            return bad(format!("{} heads are not a multiple of {} KV heads", self.num_heads, self.num_kv_heads));
        }
        if !self.head_dim.is_multiple_of(2) {
            return bad(format!("head_dim {} is odd", self.head_dim));
        }
        if !(self.rms_norm_eps.is_finite() && self.rms_norm_eps > 0.0) {
            return bad(format!("rms_norm_eps must be a finite number above 0, got {}", self.rms_norm_eps));
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0) {
            return bad(format!("rope_theta must be a finite number above 0, got {}", self.rope_theta));
        }
        if self.context_len() > MAX_POSITIONS {
            return bad(format!(
                "the context ({} tokens with RoPE scaling) is larger than lserve accepts",
                self.context_len()
            ));
        }
        if let Some(w) = self.sliding_window
            && w == 0
        {
            return bad("sliding_window is zero".into());
        }
        if let Some(g) = &self.gemma {
            g.validate(self.max_position_embeddings)?;
        }
        self.rope().validate().map_err(Error::Config)
    }

    /// Every weight tensor the forward pass reads, by Hugging Face name, with its row-major shape.
    /// The loader checks each against the file before any is read (see `loader::open`).
    pub fn expected_tensors(&self) -> Vec<(String, Vec<usize>)> {
        let (h, ffn) = (self.hidden_size, self.intermediate_size);
        let (nq, nkv) = (self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim);
        let mut out = vec![("model.embed_tokens.weight".to_string(), vec![self.vocab_size, h])];
        if !self.tie_word_embeddings {
            out.push(("lm_head.weight".into(), vec![self.vocab_size, h]));
        }
        out.push(("model.norm.weight".into(), vec![h]));
        for i in 0..self.num_layers {
            let p = |s: &str| format!("model.layers.{i}.{s}");
            out.push((p("input_layernorm.weight"), vec![h]));
            out.push((p("post_attention_layernorm.weight"), vec![h]));
            out.push((p("self_attn.q_proj.weight"), vec![nq, h]));
            out.push((p("self_attn.k_proj.weight"), vec![nkv, h]));
            out.push((p("self_attn.v_proj.weight"), vec![nkv, h]));
            out.push((p("self_attn.o_proj.weight"), vec![h, nq]));
            if self.attention_bias {
                out.push((p("self_attn.q_proj.bias"), vec![nq]));
                out.push((p("self_attn.k_proj.bias"), vec![nkv]));
                out.push((p("self_attn.v_proj.bias"), vec![nkv]));
            }
            out.push((p("mlp.gate_proj.weight"), vec![ffn, h]));
            out.push((p("mlp.up_proj.weight"), vec![ffn, h]));
            out.push((p("mlp.down_proj.weight"), vec![h, ffn]));
        }
        out
    }

    /// Parse a Hugging Face `config.json`. Every key lserve reads is type-checked: a value of the
    /// wrong type, a negative size or a number that is not finite as f32 is an error naming the
    /// key, never a silent default.
    pub fn from_hf_json(v: &Value) -> Result<ModelConfig> {
        let j = Json(v);
        let archs: Vec<&str> = match v.get("architectures") {
            None | Some(Value::Null) => vec![],
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
            Some(other) => return Err(j.wrong("architectures", "a list of strings", other)),
        };
        let model_type = j.str("model_type")?.unwrap_or("");
        let arch = hf_arch(model_type, &archs)?;
        let hidden = j.req_usize("hidden_size")?;
        let heads = j.req_usize("num_attention_heads")?;
        let max_pos = j.usize("max_position_embeddings")?.unwrap_or(4096);
        if j.f64("partial_rotary_factor")?.is_some_and(|f| f != 1.0) {
            return Err(Error::Config("partial rotary embeddings are not supported".into()));
        }
        // transformers 5 nests RoPE under `rope_parameters` (Gemma 3: per layer type, the global
        // layers' under `rope_parameters.full_attention`).
        let rope_params =
            v.get("rope_parameters").filter(|r| !r.is_null()).map(|r| r.get("full_attention").unwrap_or(r));
        let scaling = v.get("rope_scaling").filter(|s| !s.is_null()).or(rope_params);
        let rope_scaling =
            RopeScaling::from_hf_json(scaling, max_pos).map_err(|e| Error::Config(format!("config.json: {e}")))?;
        let theta = match j.f32("rope_theta")? {
            Some(t) => Some(t),
            None => match rope_params {
                Some(p @ Value::Object(_)) => Json(p).f32("rope_theta")?,
                _ => None,
            },
        };
        let sliding = j.usize("sliding_window")?;
        let use_sliding = j.bool("use_sliding_window")?.unwrap_or(arch == "mistral");
        let gemma = (arch == "gemma3").then(|| gemma_from_hf(v)).transpose()?;
        let mut cfg = ModelConfig {
            vocab_size: j.req_usize("vocab_size")?,
            hidden_size: hidden,
            intermediate_size: j.req_usize("intermediate_size")?,
            num_layers: j.req_usize("num_hidden_layers")?,
            num_heads: heads,
            num_kv_heads: j.usize("num_key_value_heads")?.unwrap_or(heads),
            head_dim: j.usize("head_dim")?.unwrap_or(hidden / heads.max(1)),
            rms_norm_eps: j.f32("rms_norm_eps")?.unwrap_or(1e-6),
            rope_theta: theta.unwrap_or(10000.0),
            rope_scaling,
            max_position_embeddings: max_pos,
            tie_word_embeddings: j.bool("tie_word_embeddings")?.unwrap_or(arch == "gemma3"),
            attention_bias: j.bool("attention_bias")?.unwrap_or(arch == "qwen2"),
            sliding_window: sliding.filter(|&w| use_sliding && w < max_pos && gemma.is_none()),
            bos_token_id: j.u32("bos_token_id")?,
            eos_token_ids: j.id_list("eos_token_id")?,
            gemma,
            arch,
        };
        cfg.clamp_window();
        cfg.validate()?;
        Ok(cfg)
    }
}

/// Largest values [`ModelConfig::validate`] accepts: far above any Llama-family model (Llama 3.1
/// 405B has 126 layers, 128 heads, hidden 16384), low enough that nothing sized by them can
/// overflow or ask for an impossible allocation.
pub const MAX_LAYERS: usize = 1024;
pub const MAX_HEADS: usize = 1024;
pub const MAX_HEAD_DIM: usize = 1024;
pub const MAX_HIDDEN: usize = 1 << 17;
pub const MAX_INTERMEDIATE: usize = 1 << 20;
pub const MAX_VOCAB: usize = 1 << 22;
pub const MAX_POSITIONS: usize = 1 << 24;

/// Typed, key-naming access to a config.json object.
struct Json<'a>(&'a Value);

impl Json<'_> {
    /// The value at `key`, None when absent or null.
    fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key).filter(|v| !v.is_null())
    }
    fn wrong(&self, key: &str, want: &str, got: &Value) -> Error {
        let mut shown = got.to_string();
        if shown.len() > 40 {
            shown = format!("{}...", &shown[..shown.floor_char_boundary(40)]);
        }
        Error::Config(format!("config.json: `{key}` must be {want}, got {shown}"))
    }
    fn usize(&self, key: &str) -> Result<Option<usize>> {
        let Some(v) = self.get(key) else { return Ok(None) };
        let n = v.as_u64().and_then(|n| usize::try_from(n).ok());
        n.map(Some).ok_or_else(|| self.wrong(key, "a non-negative integer", v))
    }
    fn req_usize(&self, key: &str) -> Result<usize> {
        self.usize(key)?.ok_or_else(|| Error::Config(format!("config.json lacks `{key}`")))
    }
    fn u32(&self, key: &str) -> Result<Option<u32>> {
        let Some(v) = self.get(key) else { return Ok(None) };
        let n = v.as_u64().and_then(|n| u32::try_from(n).ok());
        n.map(Some).ok_or_else(|| self.wrong(key, "a token id", v))
    }
    fn f64(&self, key: &str) -> Result<Option<f64>> {
        let Some(v) = self.get(key) else { return Ok(None) };
        v.as_f64().filter(|x| x.is_finite()).map(Some).ok_or_else(|| self.wrong(key, "a finite number", v))
    }
    /// A number that must also be finite once rounded to f32 (1e40 is not).
    fn f32(&self, key: &str) -> Result<Option<f32>> {
        let Some(v) = self.get(key) else { return Ok(None) };
        let x = v.as_f64().map(|x| x as f32).filter(|x| x.is_finite());
        x.map(Some).ok_or_else(|| self.wrong(key, "a finite number (as f32)", v))
    }
    fn bool(&self, key: &str) -> Result<Option<bool>> {
        let Some(v) = self.get(key) else { return Ok(None) };
        v.as_bool().map(Some).ok_or_else(|| self.wrong(key, "true or false", v))
    }
    fn str(&self, key: &str) -> Result<Option<&str>> {
        let Some(v) = self.get(key) else { return Ok(None) };
        v.as_str().map(Some).ok_or_else(|| self.wrong(key, "a string", v))
    }
    /// A token id or a list of them.
    fn id_list(&self, key: &str) -> Result<Vec<u32>> {
        let one = |v: &Value| v.as_u64().and_then(|n| u32::try_from(n).ok());
        match self.get(key) {
            None => Ok(vec![]),
            Some(Value::Array(a)) => {
                a.iter().map(|x| one(x).ok_or_else(|| self.wrong(key, "a token id or a list of them", x))).collect()
            }
            Some(v) => one(v).map(|x| vec![x]).ok_or_else(|| self.wrong(key, "a token id or a list of them", v)),
        }
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
        // The sparse config's bound on its token counts is the positions bound.
        assert_eq!(crate::sparse::config::MAX_TOKENS, MAX_POSITIONS);
        // Gemma's own parameters are bounded: the window sizes each local layer's KV ring, so one
        // wider than the context is the context (full attention, as in HF).
        for w in [40_000u64, 1_000_000_000_000] {
            let c = ModelConfig::from_hf_json(&gemma_json(json!({"sliding_window": w}))).unwrap();
            assert_eq!(c.gemma.unwrap().sliding_window, 32768);
        }
        for (extra, needle) in [
            (json!({"sliding_window": 0}), "sliding_window 0 must be between 1 and"),
            (json!({"rope_local_base_freq": 0.0}), "rope_local_base_freq must be a finite number above 0"),
            (json!({"rope_local_base_freq": 1e300}), "rope_local_base_freq must be a finite number above 0"),
            (json!({"query_pre_attn_scalar": -1.0}), "query_pre_attn_scalar must be a finite number above 0"),
        ] {
            let e = ModelConfig::from_hf_json(&gemma_json(extra.clone())).unwrap_err().to_string();
            assert!(e.contains(needle), "{extra}: {e}");
        }
    }
}
