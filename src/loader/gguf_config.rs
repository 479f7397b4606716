//! [`ModelConfig`] from GGUF metadata (`{arch}.*` keys, llama.cpp naming). Unknown architectures
//! and partial rotary embeddings are refused here, before any weight is read; every key is
//! type-checked (a wrong type names the key) and the result passes [`ModelConfig::validate`].
//! Lives in the loader (it reads a [`GgufFile`]): model never imports loader.

use super::gguf::GgufFile;
use crate::error::{Error, Result};
use crate::model::config::{GemmaParams, ModelConfig};
use crate::model::rope::RopeScaling;

/// Read the config from GGUF metadata (`{arch}.*` keys), type-checked like
/// [`ModelConfig::from_hf_json`].
pub fn config_from_gguf(g: &GgufFile) -> Result<ModelConfig> {
    let arch = g.get("general.architecture").and_then(|v| v.as_str()).unwrap_or("");
    let arch = match arch {
        "llama" | "mistral" | "qwen2" | "gemma3" => arch.to_string(),
        other => return Err(Error::UnsupportedArch(other.to_string())),
    };
    let m = Meta { g, arch: &arch };
    let hidden = m.req_usize("embedding_length")?;
    let heads = m.req_usize("attention.head_count")?;
    let head_dim = m.usize("attention.key_length")?.unwrap_or(hidden / heads.max(1));
    if m.usize("rope.dimension_count")?.is_some_and(|d| d != head_dim) {
        return Err(Error::Config("partial rotary embeddings are not supported".into()));
    }
    let ctx = m.req_usize("context_length")?;
    let vocab = match m.usize("vocab_size")? {
        Some(n) => n,
        None => g.get("tokenizer.ggml.tokens").and_then(|v| v.as_array()).map_or(0, |a| a.len()),
    };
    let id = |k: &str| -> Result<Option<u32>> {
        match g.get(k) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|x| u32::try_from(x).ok())
                .map(Some)
                .ok_or_else(|| Error::Config(format!("GGUF metadata `{k}` must be a token id, got {v:?}"))),
        }
    };
    let gemma = (arch == "gemma3")
        .then(|| -> Result<GemmaParams> {
            Ok(GemmaParams {
                sliding_window: m.req_usize("attention.sliding_window")?,
                global_every: 6,
                local_rope_theta: 10000.0,
                query_pre_attn_scalar: head_dim as f32,
            })
        })
        .transpose()?;
    let mut cfg = ModelConfig {
        vocab_size: vocab,
        hidden_size: hidden,
        intermediate_size: m.req_usize("feed_forward_length")?,
        num_layers: m.req_usize("block_count")?,
        num_heads: heads,
        num_kv_heads: m.usize("attention.head_count_kv")?.unwrap_or(heads),
        head_dim,
        rms_norm_eps: m.f32("attention.layer_norm_rms_epsilon")?.unwrap_or(1e-5),
        rope_theta: m.f32("rope.freq_base")?.unwrap_or(10000.0),
        rope_scaling: gguf_rope_scaling(&m, ctx)?,
        max_position_embeddings: ctx,
        tie_word_embeddings: g.tensor("output.weight").is_none(),
        attention_bias: g.tensor("blk.0.attn_q.bias").is_some(),
        sliding_window: None,
        bos_token_id: id("tokenizer.ggml.bos_token_id")?,
        eos_token_ids: id("tokenizer.ggml.eos_token_id")?.into_iter().collect(),
        gemma,
        arch,
    };
    cfg.clamp_window();
    cfg.validate()?;
    Ok(cfg)
}

/// Typed, key-naming access to the `{arch}.*` GGUF metadata.
struct Meta<'a> {
    g: &'a GgufFile,
    arch: &'a str,
}

impl Meta<'_> {
    fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.arch)
    }
    fn usize(&self, k: &str) -> Result<Option<usize>> {
        let key = self.key(k);
        let Some(v) = self.g.get(&key) else { return Ok(None) };
        let n = v.as_u64().and_then(|n| usize::try_from(n).ok());
        n.map(Some)
            .ok_or_else(|| Error::Config(format!("GGUF metadata `{key}` must be a non-negative integer, got {v:?}")))
    }
    fn req_usize(&self, k: &str) -> Result<usize> {
        self.usize(k)?.ok_or_else(|| Error::Config(format!("GGUF metadata lacks `{}`", self.key(k))))
    }
    fn f32(&self, k: &str) -> Result<Option<f32>> {
        let key = self.key(k);
        let Some(v) = self.g.get(&key) else { return Ok(None) };
        let x = v.as_f64().map(|x| x as f32).filter(|x| x.is_finite());
        x.map(Some).ok_or_else(|| Error::Config(format!("GGUF metadata `{key}` must be a finite number, got {v:?}")))
    }
    fn str(&self, k: &str) -> Result<Option<&str>> {
        let key = self.key(k);
        let Some(v) = self.g.get(&key) else { return Ok(None) };
        v.as_str().map(Some).ok_or_else(|| Error::Config(format!("GGUF metadata `{key}` must be a string, got {v:?}")))
    }
}

/// GGUF's `{arch}.rope.scaling.*` keys (llama.cpp naming) mapped onto [`RopeScaling`]. Llama 3.1
/// GGUFs bake the llama3 scaling into a `rope_freqs.weight` tensor instead; that case is read by
/// the weight loader, which divides the inverse frequencies by it.
fn gguf_rope_scaling(m: &Meta, ctx: usize) -> Result<RopeScaling> {
    let factor = m.f32("rope.scaling.factor")?.unwrap_or(1.0);
    let orig = m.usize("rope.scaling.original_context_length")?.unwrap_or(ctx);
    Ok(match m.str("rope.scaling.type")?.unwrap_or("none") {
        "none" => RopeScaling::None,
        _ if factor == 1.0 => RopeScaling::None,
        _ if factor <= 0.0 => {
            return Err(Error::Config(format!("GGUF rope scaling factor must be above 0, got {factor}")));
        }
        "linear" => RopeScaling::Linear { factor },
        "yarn" => RopeScaling::Yarn {
            factor,
            original_max_position: orig,
            beta_fast: m.f32("rope.scaling.yarn_beta_fast")?.unwrap_or(32.0),
            beta_slow: m.f32("rope.scaling.yarn_beta_slow")?.unwrap_or(1.0),
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
