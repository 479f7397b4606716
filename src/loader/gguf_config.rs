//! [`ModelConfig`] from GGUF metadata (`{arch}.*` keys, llama.cpp naming). Unknown architectures
//! and partial rotary embeddings are refused here, before any weight is read; the result passes
//! [`ModelConfig::validate`].

use super::gguf::GgufFile;
use crate::error::{Error, Result};
use crate::model::config::ModelConfig;
use crate::model::rope::RopeScaling;

/// Read the config from GGUF metadata (`{arch}.*` keys).
pub fn config_from_gguf(g: &GgufFile) -> Result<ModelConfig> {
    let arch = g.get("general.architecture").and_then(|v| v.as_str()).unwrap_or("");
    let arch = match arch {
        "llama" | "mistral" | "qwen2" => arch.to_string(),
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
    let head_dim = key("attention.key_length").and_then(|v| v.as_u64()).map_or(hidden / heads.max(1), |x| x as usize);
    if key("rope.dimension_count").and_then(|v| v.as_u64()).is_some_and(|d| d as usize != head_dim) {
        return Err(Error::Config("partial rotary embeddings are not supported".into()));
    }
    let ctx = req("context_length")?;
    let vocab = match key("vocab_size").and_then(|v| v.as_u64()) {
        Some(n) => n as usize,
        None => g.get("tokenizer.ggml.tokens").and_then(|v| v.as_array()).map_or(0, |a| a.len()),
    };
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
        arch,
    };
    cfg.validate()?;
    Ok(cfg)
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
