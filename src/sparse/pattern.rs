//! Head patterns: a score per (layer, KV head) saying how much that head needs attention beyond
//! its sink and local window. The lowest-scoring `streaming_ratio` of the heads become streaming
//! heads (sink + local window only); the rest are retrieval heads (paged, query-aware selection).
//!
//! Two formats load:
//! - lserve's own TOML (written by `lserve calibrate`): `scores = [[...], ...]`, one row per layer,
//!   the mean softmax mass each KV head puts outside sink + local on the calibration documents;
//! - DuoAttention's `full_attention_heads.tsv`: one line per layer, one tab-separated gate value per
//!   KV head (higher = full attention).
//!
//! Either way higher means "keep full attention"; ties are broken by (layer, head) order so the
//! choice is deterministic.
//!
//! Shipped patterns (`patterns/*.toml`) are compiled into the binary and found by model identity
//! ([`ModelIdentity`]: architecture, layer/head/width counts, vocabulary size and a hash of the
//! vocabulary's token strings), never by file path, so `--sparse on` works from any working
//! directory and for an installed binary, for the same model as GGUF or Hugging Face folder.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::kv::HeadLayout;

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct HeadPattern {
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub sink_tokens: usize,
    #[serde(default)]
    pub local_tokens: usize,
    /// `[layer][kv_head]`.
    pub scores: Vec<Vec<f64>>,
}

impl HeadPattern {
    pub fn load(path: &Path) -> Result<HeadPattern> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let bad = |m: String| Error::Config(format!("head pattern {}: {m}", path.display()));
        let p = if path.extension().is_some_and(|e| e == "tsv") {
            parse_tsv(&text).map_err(bad)?
        } else {
            toml::from_str::<HeadPattern>(&text).map_err(|e| bad(e.to_string()))?
        };
        if p.scores.is_empty() || p.scores.iter().any(|r| r.is_empty() || r.len() != p.scores[0].len()) {
            return Err(bad("scores must be a non-empty rectangle (layers x KV heads)".into()));
        }
        if p.scores.iter().flatten().any(|v| !v.is_finite()) {
            return Err(bad("scores must be finite numbers".into()));
        }
        Ok(p)
    }

    pub fn to_toml(&self) -> String {
        let mut s = String::from(
            "# lserve head pattern (written by `lserve calibrate`).\n\
             # scores[layer][kv_head]: mean softmax mass outside sink + local window on the calibration\n\
             # documents; the lowest `streaming_ratio` of the heads become streaming heads.\n",
        );
        s.push_str(&toml::to_string(self).unwrap_or_default());
        s
    }

    /// Whether the pattern has one score per (layer, KV head) of a model of this shape.
    pub fn check_shape(&self, num_layers: usize, n_kv: usize) -> Result<()> {
        if self.scores.len() != num_layers || self.scores[0].len() != n_kv {
            return Err(Error::Config(format!(
                "head pattern is {}x{} (layers x KV heads) but the model has {num_layers}x{n_kv}",
                self.scores.len(),
                self.scores[0].len()
            )));
        }
        Ok(())
    }

    /// Streaming heads: the lowest `ratio` of the heads outside `dense_layers`.
    pub fn layout(&self, num_layers: usize, n_kv: usize, ratio: f32, dense_layers: &[usize]) -> Result<HeadLayout> {
        self.check_shape(num_layers, n_kv)?;
        let mut heads: Vec<(f64, usize, usize)> = (0..num_layers)
            .filter(|l| !dense_layers.contains(l))
            .flat_map(|l| (0..n_kv).map(move |h| (l, h)))
            .map(|(l, h)| (self.scores[l][h], l, h))
            .collect();
        heads.sort_by(|a, b| a.0.total_cmp(&b.0).then((a.1, a.2).cmp(&(b.1, b.2))));
        let n = ((ratio as f64) * heads.len() as f64).round() as usize;
        let mut layout = HeadLayout::all_retrieval(num_layers, n_kv);
        for &(_, l, h) in &heads[..n.min(heads.len())] {
            layout.streaming[l][h] = true;
        }
        Ok(layout)
    }
}

/// What a shipped head pattern is matched on: the shapes that fix the (layer, KV head) grid and
/// the model family, plus a hash of the vocabulary so that a different model with the same
/// shapes does not match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelIdentity {
    pub arch: String,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub hidden_size: usize,
    pub vocab_size: usize,
    /// [`vocab_hash`] of the tokenizer's token strings.
    pub vocab_hash: u64,
}

/// FNV-1a (64 bit) over the token strings in id order, each followed by a 0 byte. The same for a
/// GGUF's `tokenizer.ggml.tokens` and the Hugging Face `tokenizer.json` it was converted from.
pub fn vocab_hash<'a>(tokens: impl IntoIterator<Item = &'a str>) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for t in tokens {
        for &b in t.as_bytes().iter().chain(&[0u8]) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

struct Shipped {
    name: &'static str,
    identity: fn() -> ModelIdentity,
    toml: &'static str,
}

/// The head patterns that ship with lserve.
const SHIPPED: &[Shipped] = &[Shipped {
    name: "smollm2-135m",
    identity: || ModelIdentity {
        arch: "llama".into(),
        num_layers: 30,
        num_heads: 9,
        num_kv_heads: 3,
        head_dim: 64,
        hidden_size: 576,
        vocab_size: 49152,
        vocab_hash: SMOLLM2_VOCAB_HASH,
    },
    toml: include_str!("../../patterns/smollm2-135m.toml"),
}];

/// [`vocab_hash`] of the SmolLM2 tokenizer (49152 tokens; the same for SmolLM2-135M, its
/// Instruct variant, and their GGUF conversions).
pub const SMOLLM2_VOCAB_HASH: u64 = 0x3ff3_b2ef_50df_d8ca;

/// The shipped pattern for the model `id` names, with the pattern's name.
pub fn shipped_pattern(id: &ModelIdentity) -> Option<(&'static str, HeadPattern)> {
    let s = SHIPPED.iter().find(|s| (s.identity)() == *id)?;
    // The embedded files are checked by a test; a parse failure here would be a build defect.
    let p = toml::from_str::<HeadPattern>(s.toml).ok()?;
    Some((s.name, p))
}

/// Gives `--sparse on` its streaming heads when no pattern file is named: the shipped pattern
/// for this model if there is one (put in `s.pattern`), else no streaming heads at all
/// (`streaming_ratio` 0: page selection only) and a one-line notice, returned for the caller to
/// print. Nothing changes when sparse attention is off, the ratio is 0 or a pattern is given.
pub fn resolve_pattern(s: &mut crate::sparse::SparseConfig, id: &ModelIdentity) -> Option<String> {
    if !s.enabled || s.streaming_ratio == 0.0 || s.head_pattern.is_some() || s.pattern.is_some() {
        return None;
    }
    if let Some((_, p)) = shipped_pattern(id) {
        s.pattern = Some(p);
        return None;
    }
    s.streaming_ratio = 0.0;
    Some(
        "note: no head pattern ships for this model, so --sparse on runs without streaming heads (page selection \
         only); `lserve calibrate --out heads.toml` and --head-pattern heads.toml add them"
            .to_string(),
    )
}

/// Names of the shipped patterns (for messages and tests).
pub fn shipped_names() -> Vec<&'static str> {
    SHIPPED.iter().map(|s| s.name).collect()
}

fn parse_tsv(text: &str) -> std::result::Result<HeadPattern, String> {
    let scores = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, line)| {
            line.split(['\t', ' ', ','])
                .filter(|t| !t.is_empty())
                .map(|t| t.parse::<f64>().map_err(|_| format!("line {}: `{t}` is not a number", i + 1)))
                .collect()
        })
        .collect::<std::result::Result<Vec<Vec<f64>>, String>>()?;
    Ok(HeadPattern { model: String::new(), sink_tokens: 0, local_tokens: 0, scores })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern() -> HeadPattern {
        HeadPattern {
            model: "m".into(),
            sink_tokens: 4,
            local_tokens: 8,
            scores: vec![vec![0.9, 0.1, 0.5], vec![0.2, 0.2, 0.8]],
        }
    }

    #[test]
    fn lowest_scores_stream() {
        let l = pattern().layout(2, 3, 0.5, &[]).unwrap();
        assert_eq!(l.streaming, vec![vec![false, true, false], vec![true, true, false]]);
        let l = pattern().layout(2, 3, 0.5, &[1]).unwrap();
        // Layer 1 is dense; half of layer 0's three heads (rounded) stream.
        assert_eq!(l.streaming, vec![vec![false, true, true], vec![false, false, false]]);
        assert!(!pattern().layout(2, 3, 0.0, &[]).unwrap().any_streaming());
        assert!(pattern().layout(3, 3, 0.5, &[]).is_err());
    }

    #[test]
    fn toml_round_trip_and_tsv() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.toml");
        std::fs::write(&p, pattern().to_toml()).unwrap();
        assert_eq!(HeadPattern::load(&p).unwrap(), pattern());
        let t = dir.path().join("full_attention_heads.tsv");
        std::fs::write(&t, "0.9\t0.1\t0.5\n0.2\t0.2\t0.8\n").unwrap();
        assert_eq!(HeadPattern::load(&t).unwrap().scores, pattern().scores);
        std::fs::write(&t, "0.9\tx\n").unwrap();
        assert!(HeadPattern::load(&t).is_err());
        std::fs::write(&t, "0.9\t0.1\n0.3\n").unwrap();
        assert!(HeadPattern::load(&t).is_err(), "ragged rows");
    }
}
