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

    /// Streaming heads: the lowest `ratio` of the heads outside `dense_layers`.
    pub fn layout(&self, num_layers: usize, n_kv: usize, ratio: f32, dense_layers: &[usize]) -> Result<HeadLayout> {
        if self.scores.len() != num_layers || self.scores[0].len() != n_kv {
            return Err(Error::Config(format!(
                "head pattern is {}x{} (layers x KV heads) but the model has {num_layers}x{n_kv}",
                self.scores.len(),
                self.scores[0].len()
            )));
        }
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
