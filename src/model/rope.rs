//! Rotary position embedding (RoPE) frequency tables for the Llama family.
//!
//! Computes the per-pair inverse frequencies and the cos/sin multiplier
//! ("attention scaling") for every scaling variant the Hugging Face
//! `transformers` `modeling_rope_utils.py` implements for Llama-style models:
//! default, `linear`, `dynamic` (dynamic NTK), `yarn` and `llama3`.  The
//! formulas follow `_compute_*_parameters` there, including its quirks (the
//! YaRN ramp is indexed by pair but its bounds are computed in full-dimension
//! units and clamped to `dim - 1`; `beta_fast`/`beta_slow` of `0` fall back to
//! 32/1 the way Python's `or` does).
//!
//! Invariants:
//! * `RopeFreqs::inv_freq.len() == head_dim / 2`; entry `i` belongs to the
//!   rotate-half pair `(i, i + head_dim / 2)`.
//! * Frequencies are evaluated in `f64` and rounded once to `f32` (HF evaluates
//!   the same formulas in `f32`; the results agree to a few ulp).
//! * Rotation angles are `(pos as f32) * inv_freq[i]` in `f32`, as HF does, and
//!   cos/sin are multiplied by `attention_scaling` (YaRN only, else 1).
//! * Nothing here panics on bad input: JSON problems come back as `Err`,
//!   degenerate configurations yield non-finite numbers that
//!   [`RopeConfig::validate`] reports, and a badly shaped weight makes
//!   [`inverse_permute_gguf_rows`] return an empty vector.
//!
//! GGUF files written by llama.cpp's `convert_hf_to_gguf.py` store the Llama
//! `attn_q`/`attn_k` rows permuted for interleaved-pair RoPE;
//! [`inverse_permute_gguf_rows`] restores the HF rotate-half row order so that
//! [`rotate_half_in_place`] applies to both sources.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::f64::consts::PI;

pub use crate::backend::reference::rope::{RopeFreqs, rotate_half_in_place};

/// How RoPE is scaled (HF `rope_scaling` / `rope_parameters`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum RopeScaling {
    None,
    Linear {
        factor: f32,
    },
    DynamicNtk {
        factor: f32,
    },
    Yarn {
        factor: f32,
        original_max_position: usize,
        beta_fast: f32,
        beta_slow: f32,
        mscale: Option<f32>,
        mscale_all_dim: Option<f32>,
        attention_factor: Option<f32>,
        truncate: bool,
    },
    Llama3 {
        factor: f32,
        low_freq_factor: f32,
        high_freq_factor: f32,
        original_max_position: usize,
    },
}

type JsonObj = Map<String, Value>;

/// A JSON value that is present and not `null`.
fn present<'a>(o: &'a JsonObj, key: &str) -> Option<&'a Value> {
    o.get(key).filter(|v| !v.is_null())
}

/// Optional finite number; `Err` when present but not a finite number.
fn opt_f32(o: &JsonObj, key: &str) -> Result<Option<f32>, String> {
    match present(o, key) {
        None => Ok(None),
        Some(v) => match v.as_f64() {
            Some(x) if (x as f32).is_finite() => Ok(Some(x as f32)),
            _ => Err(format!("rope_scaling.{key} must be a finite number, got {v}")),
        },
    }
}

/// Required finite number.
fn req_f32(o: &JsonObj, key: &str, ty: &str) -> Result<f32, String> {
    opt_f32(o, key)?.ok_or_else(|| format!("rope_scaling of type `{ty}` is missing `{key}`"))
}

/// Optional non-negative integer (an integral float such as `8192.0` is accepted).
fn opt_usize(o: &JsonObj, key: &str) -> Result<Option<usize>, String> {
    let Some(v) = present(o, key) else {
        return Ok(None);
    };
    if let Some(n) = v.as_u64() {
        return usize::try_from(n).map(Some).map_err(|_| format!("rope_scaling.{key} too large: {n}"));
    }
    match v.as_f64() {
        Some(x) if x >= 0.0 && x.fract() == 0.0 && x < usize::MAX as f64 => Ok(Some(x as usize)),
        _ => Err(format!("rope_scaling.{key} must be a non-negative integer, got {v}")),
    }
}

/// A scaling factor must be finite and strictly positive (it divides frequencies).
fn check_factor(factor: f32, ty: &str) -> Result<f32, String> {
    if factor.is_finite() && factor > 0.0 {
        Ok(factor)
    } else {
        Err(format!("rope_scaling of type `{ty}` needs factor > 0, got {factor}"))
    }
}

impl RopeScaling {
    /// Parse the HF config.json `rope_scaling` object (keys `type` or `rope_type`: "linear", "dynamic", "yarn", "llama3", "default"; missing/null => None). `max_position_embeddings` is the config's value (used as original_max_position fallback for yarn). Unknown type => Err(String) naming it.
    pub fn from_hf_json(v: Option<&Value>, max_position_embeddings: usize) -> Result<RopeScaling, String> {
        let obj = match v {
            None | Some(Value::Null) => return Ok(RopeScaling::None),
            Some(Value::Object(o)) => o,
            Some(other) => {
                return Err(format!("rope_scaling must be an object or null, got {other}"));
            }
        };
        // HF: rope_scaling.get("rope_type", rope_scaling.get("type")).
        let ty = match present(obj, "rope_type").or_else(|| present(obj, "type")) {
            Some(Value::String(s)) => s.as_str(),
            Some(other) => return Err(format!("rope_scaling type must be a string, got {other}")),
            None => return Err("rope_scaling has neither `rope_type` nor `type`".to_string()),
        };
        match ty {
            "default" => Ok(RopeScaling::None),
            "linear" => Ok(RopeScaling::Linear { factor: check_factor(req_f32(obj, "factor", ty)?, ty)? }),
            "dynamic" => Ok(RopeScaling::DynamicNtk { factor: check_factor(req_f32(obj, "factor", ty)?, ty)? }),
            "yarn" => parse_yarn(obj, max_position_embeddings),
            "llama3" => parse_llama3(obj),
            other => Err(format!(
                "unsupported rope_scaling type `{other}` (supported: default, linear, dynamic, yarn, llama3)"
            )),
        }
    }
}

/// `_compute_yarn_parameters` inputs: `original_max_position_embeddings or
/// max_position_embeddings`; a missing `factor` is the ratio of the two (as in
/// current HF); `beta_fast or 32`, `beta_slow or 1`; `truncate` defaults to true
/// and follows Python truthiness (`null` => false).
fn parse_yarn(obj: &JsonObj, max_position_embeddings: usize) -> Result<RopeScaling, String> {
    let original = opt_usize(obj, "original_max_position_embeddings")?;
    let original_max_position = original.filter(|&n| n > 0).unwrap_or(max_position_embeddings);
    let factor = match (opt_f32(obj, "factor")?, original) {
        (Some(f), _) => f,
        (None, Some(orig)) if orig > 0 => (max_position_embeddings as f64 / orig as f64) as f32,
        (None, _) => return Err("rope_scaling of type `yarn` is missing `factor`".to_string()),
    };
    let or_default = |x: Option<f32>, d: f32| x.filter(|&b| b != 0.0).unwrap_or(d);
    let truncate = match obj.get("truncate") {
        None => true,
        Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => return Err(format!("rope_scaling.truncate must be a bool, got {other}")),
    };
    Ok(RopeScaling::Yarn {
        factor: check_factor(factor, "yarn")?,
        original_max_position,
        beta_fast: or_default(opt_f32(obj, "beta_fast")?, 32.0),
        beta_slow: or_default(opt_f32(obj, "beta_slow")?, 1.0),
        mscale: opt_f32(obj, "mscale")?,
        mscale_all_dim: opt_f32(obj, "mscale_all_dim")?,
        attention_factor: opt_f32(obj, "attention_factor")?,
        truncate,
    })
}

/// `_compute_llama3_parameters` inputs; all four keys are required, as in HF.
fn parse_llama3(obj: &JsonObj) -> Result<RopeScaling, String> {
    let ty = "llama3";
    let factor = check_factor(req_f32(obj, "factor", ty)?, ty)?;
    let low_freq_factor = req_f32(obj, "low_freq_factor", ty)?;
    let high_freq_factor = req_f32(obj, "high_freq_factor", ty)?;
    let original_max_position = opt_usize(obj, "original_max_position_embeddings")?
        .ok_or("rope_scaling of type `llama3` is missing `original_max_position_embeddings`")?;
    if !(low_freq_factor > 0.0 && high_freq_factor > low_freq_factor) {
        return Err(format!(
            "llama3 rope_scaling needs 0 < low_freq_factor < high_freq_factor, got {low_freq_factor}, {high_freq_factor}"
        ));
    }
    if original_max_position == 0 {
        return Err("llama3 rope_scaling needs original_max_position_embeddings > 0".to_string());
    }
    Ok(RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position })
}

#[derive(Clone, Debug)]
pub struct RopeConfig {
    /// Rotary dims (= head_dim; partial rotary not needed).
    pub head_dim: usize,
    pub theta: f32,
    pub scaling: RopeScaling,
    /// The config's `max_position_embeddings`.
    pub max_position: usize,
}

/// HF `_compute_default_rope_parameters`: `base^(-2i/dim)` for `i < dim/2`.
fn default_inv_freq(base: f64, dim: usize) -> Vec<f64> {
    (0..dim / 2).map(|i| 1.0 / base.powf((2 * i) as f64 / dim as f64)).collect()
}

/// YaRN `get_mscale`.
fn yarn_get_mscale(scale: f64, mscale: f64) -> f64 {
    if scale <= 1.0 { 1.0 } else { 0.1 * mscale * scale.ln() + 1.0 }
}

impl RopeConfig {
    /// Checks the configuration produces finite, positive frequencies.
    pub fn validate(&self) -> Result<(), String> {
        if self.head_dim < 2 || !self.head_dim.is_multiple_of(2) {
            return Err(format!("rope head_dim must be even and >= 2, got {}", self.head_dim));
        }
        if !(self.theta.is_finite() && self.theta > 1.0) {
            return Err(format!("rope_theta must be finite and > 1, got {}", self.theta));
        }
        if matches!(self.scaling, RopeScaling::DynamicNtk { .. }) && (self.head_dim < 4 || self.max_position == 0) {
            return Err("dynamic NTK rope needs head_dim >= 4 and max_position > 0".to_string());
        }
        let f = self.freqs(self.max_position.max(1));
        let ok = f.inv_freq.iter().all(|x| x.is_finite() && *x > 0.0) && f.attention_scaling.is_finite();
        if ok { Ok(()) } else { Err(format!("rope configuration yields non-finite frequencies: {:?}", self.scaling)) }
    }

    /// `seq_len` = the number of positions the current forward covers (max position + 1); only DynamicNtk depends on it (HF: base is rescaled when seq_len > max_position).
    pub fn freqs(&self, seq_len: usize) -> RopeFreqs {
        let dim = self.head_dim;
        let base = self.theta as f64;
        let (inv, attention_scaling) = match &self.scaling {
            RopeScaling::None => (default_inv_freq(base, dim), 1.0),
            RopeScaling::Linear { factor } => {
                let f = *factor as f64;
                (default_inv_freq(base, dim).into_iter().map(|x| x / f).collect(), 1.0)
            }
            RopeScaling::DynamicNtk { factor } => (self.dynamic_ntk(*factor as f64, seq_len), 1.0),
            RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position } => {
                let p = [*factor, *low_freq_factor, *high_freq_factor].map(f64::from);
                (llama3_inv_freq(base, dim, p, *original_max_position as f64), 1.0)
            }
            RopeScaling::Yarn { .. } => self.yarn(),
        };
        RopeFreqs { inv_freq: inv.into_iter().map(|x| x as f32).collect(), attention_scaling: attention_scaling as f32 }
    }

    /// HF `_compute_dynamic_ntk_parameters`: for `seq_len > max_position`,
    /// `base' = base * ((factor * seq_len / max_position) - (factor - 1))^(dim / (dim - 2))`.
    fn dynamic_ntk(&self, factor: f64, seq_len: usize) -> Vec<f64> {
        let base = self.theta as f64;
        if seq_len <= self.max_position || self.max_position == 0 || self.head_dim <= 2 {
            return default_inv_freq(base, self.head_dim);
        }
        let (d, max) = (self.head_dim as f64, self.max_position as f64);
        let scaled = base * ((factor * seq_len as f64 / max) - (factor - 1.0)).powf(d / (d - 2.0));
        default_inv_freq(scaled, self.head_dim)
    }

    /// HF `_compute_yarn_parameters` (inv_freq blend and attention factor).
    fn yarn(&self) -> (Vec<f64>, f64) {
        let RopeScaling::Yarn {
            factor,
            original_max_position,
            beta_fast,
            beta_slow,
            mscale,
            mscale_all_dim,
            attention_factor,
            truncate,
        } = &self.scaling
        else {
            return (default_inv_freq(self.theta as f64, self.head_dim), 1.0);
        };
        let factor = *factor as f64;
        // Python truthiness: `if mscale and mscale_all_dim`.
        let truthy = |x: &Option<f32>| x.filter(|&v| v != 0.0).map(f64::from);
        let attention = match (attention_factor, truthy(mscale), truthy(mscale_all_dim)) {
            (Some(a), _, _) => *a as f64,
            (None, Some(m), Some(m_all)) => yarn_get_mscale(factor, m) / yarn_get_mscale(factor, m_all),
            (None, _, _) => yarn_get_mscale(factor, 1.0),
        };
        let (base, dim) = (self.theta as f64, self.head_dim as f64);
        let orig = *original_max_position as f64;
        let correction_dim = |rot: f64| dim * (orig / (rot * 2.0 * PI)).ln() / (2.0 * base.ln());
        let (mut low, mut high) = (correction_dim(*beta_fast as f64), correction_dim(*beta_slow as f64));
        if *truncate {
            low = low.floor();
            high = high.ceil();
        }
        let low = low.max(0.0);
        let mut high = high.min(dim - 1.0);
        if low == high {
            high += 0.001; // HF: prevent singularity
        }
        let inv = default_inv_freq(base, self.head_dim)
            .into_iter()
            .enumerate()
            .map(|(i, extrapolation)| {
                let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                let extrapolation_factor = 1.0 - ramp;
                let interpolation = extrapolation / factor;
                interpolation * (1.0 - extrapolation_factor) + extrapolation * extrapolation_factor
            })
            .collect();
        (inv, attention)
    }
}

/// HF `_compute_llama3_parameters`; `p = [factor, low_freq_factor, high_freq_factor]`.
fn llama3_inv_freq(base: f64, dim: usize, p: [f64; 3], old_context_len: f64) -> Vec<f64> {
    let [factor, low_freq_factor, high_freq_factor] = p;
    let low_freq_wavelen = old_context_len / low_freq_factor;
    let high_freq_wavelen = old_context_len / high_freq_factor;
    default_inv_freq(base, dim)
        .into_iter()
        .map(|inv| {
            let wavelen = 2.0 * PI / inv;
            if wavelen < high_freq_wavelen {
                inv
            } else if wavelen > low_freq_wavelen {
                inv / factor
            } else {
                let smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
                (1.0 - smooth) * inv / factor + smooth * inv
            }
        })
        .collect()
}

/// Rotate-half (HF / NeoX) rotation of one head vector in place at position `pos`:
/// angle_i = (pos as f32) * inv_freq[i] computed in f32 (as HF does), c = cos*scaling, s = sin*scaling,
/// Inverse of llama.cpp `convert_hf_to_gguf.py` `LlamaModel.permute`
/// (`w.reshape(n_head, 2, rows_per_head/2, cols).swapaxes(1, 2).reshape(rows, cols)`),
/// i.e. GGUF row `h*r + 2j + t` came from HF row `h*r + t*r/2 + j`.  `w` is
/// row-major `[n_rows][n_cols]` (a bias is `n_cols = 1`); `n_head` is the number
/// of heads of this tensor (the KV head count for `attn_k`).  Returns the HF
/// rotate-half row order, or an empty vector when the shape is inconsistent
/// (see [`try_inverse_permute_gguf_rows`] for the reason).
pub fn inverse_permute_gguf_rows(w: &[f32], n_rows: usize, n_cols: usize, n_head: usize) -> Vec<f32> {
    try_inverse_permute_gguf_rows(w, n_rows, n_cols, n_head).unwrap_or_default()
}

/// [`inverse_permute_gguf_rows`] that reports an inconsistent shape as `Err`. Generic over the
/// element: a quantized tensor permutes as bytes with `n_cols` = the bytes of one row of blocks
/// (its rows are whole blocks, so moving rows never splits one).
pub fn try_inverse_permute_gguf_rows<T: Copy>(
    w: &[T],
    n_rows: usize,
    n_cols: usize,
    n_head: usize,
) -> Result<Vec<T>, String> {
    if n_rows.checked_mul(n_cols) != Some(w.len()) {
        return Err(format!("weight has {} values, expected {n_rows} x {n_cols}", w.len()));
    }
    let heads_even = n_head.checked_mul(2).is_some_and(|h2| h2 > 0 && n_rows.is_multiple_of(h2));
    if !heads_even {
        return Err(format!("{n_rows} rows cannot be split into {n_head} heads of an even size"));
    }
    let rows_per_head = n_rows / n_head;
    let half = rows_per_head / 2;
    let mut out = w.to_vec();
    for h in 0..n_head {
        for j in 0..half {
            for t in 0..2 {
                let src = (h * rows_per_head + 2 * j + t) * n_cols;
                let dst = (h * rows_per_head + t * half + j) * n_cols;
                out[dst..dst + n_cols].copy_from_slice(&w[src..src + n_cols]);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn close(a: f32, b: f64, rel: f64) -> bool {
        ((a as f64) - b).abs() <= rel * b.abs().max(1e-30)
    }

    fn assert_all_close(got: &[f32], want: &[f64], rel: f64) {
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(close(*g, *w, rel), "pair {i}: got {g}, want {w}");
        }
    }

    fn cfg(head_dim: usize, theta: f32, scaling: RopeScaling, max_position: usize) -> RopeConfig {
        RopeConfig { head_dim, theta, scaling, max_position }
    }

    #[test]
    fn default_is_theta_pow_minus_2i_over_d() {
        let c = cfg(128, 10000.0, RopeScaling::None, 4096);
        let f = c.freqs(10);
        let want: Vec<f64> = (0..64).map(|i| 10000f64.powf(-(2.0 * i as f64) / 128.0)).collect();
        assert_all_close(&f.inv_freq, &want, 1e-6);
        assert_eq!(f.attention_scaling, 1.0);
        assert_eq!(f.inv_freq[0], 1.0);
        c.validate().unwrap();
    }

    #[test]
    fn linear_divides_by_factor() {
        let c = cfg(64, 500000.0, RopeScaling::Linear { factor: 4.0 }, 4096);
        let want: Vec<f64> = (0..32).map(|i| 500000f64.powf(-(2.0 * i as f64) / 64.0) / 4.0).collect();
        let f = c.freqs(1_000_000);
        assert_all_close(&f.inv_freq, &want, 1e-6);
        assert_eq!(f.attention_scaling, 1.0);
    }

    #[test]
    fn dynamic_ntk_below_and_above_max_position() {
        let (d, theta, factor, max_pos) = (128usize, 10000.0f64, 2.0f64, 2048usize);
        let c = cfg(d, theta as f32, RopeScaling::DynamicNtk { factor: factor as f32 }, max_pos);
        let plain: Vec<f64> = (0..d / 2).map(|i| theta.powf(-(2.0 * i as f64) / d as f64)).collect();
        for seq_len in [1, 100, 2047, 2048] {
            assert_all_close(&c.freqs(seq_len).inv_freq, &plain, 1e-6);
        }
        for seq_len in [2049usize, 8192, 100_000] {
            let ratio = factor * seq_len as f64 / max_pos as f64 - (factor - 1.0);
            let base2 = theta * ratio.powf(d as f64 / (d as f64 - 2.0));
            let want: Vec<f64> = (0..d / 2).map(|i| base2.powf(-(2.0 * i as f64) / d as f64)).collect();
            let f = c.freqs(seq_len);
            assert_all_close(&f.inv_freq, &want, 1e-6);
            assert_eq!(f.attention_scaling, 1.0);
            assert!(f.inv_freq[d / 2 - 1] < plain[d / 2 - 1] as f32);
        }
    }

    #[test]
    fn llama3_piecewise_bands() {
        // Llama-3.1-8B: theta 500000, head_dim 128, factor 8, low 1, high 4, original 8192.
        let (d, theta) = (128usize, 500000.0f64);
        let (factor, low_ff, high_ff, old) = (8.0f64, 1.0f64, 4.0f64, 8192.0f64);
        let scaling = RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position: 8192,
        };
        let f = cfg(d, theta as f32, scaling, 131072).freqs(5);
        let (low_wl, high_wl) = (old / low_ff, old / high_ff);
        let (mut n_high, mut n_mid, mut n_low) = (0, 0, 0);
        for i in 0..d / 2 {
            let inv = theta.powf(-(2.0 * i as f64) / d as f64);
            let wavelen = 2.0 * std::f64::consts::PI / inv;
            let want = if wavelen < high_wl {
                n_high += 1;
                inv
            } else if wavelen > low_wl {
                n_low += 1;
                inv / factor
            } else {
                n_mid += 1;
                let s = (old / wavelen - low_ff) / (high_ff - low_ff);
                assert!((0.0..=1.0).contains(&s));
                (1.0 - s) * inv / factor + s * inv
            };
            assert!(close(f.inv_freq[i], want, 1e-6), "pair {i}: {} vs {want}", f.inv_freq[i]);
        }
        // The wavelengths cross both band edges.
        assert!(n_high > 0 && n_mid > 0 && n_low > 0, "{n_high} {n_mid} {n_low}");
        assert_eq!(f.attention_scaling, 1.0);
    }

    /// YaRN reference written out from the paper/HF formulas in f64.
    fn yarn_reference(d: usize, base: f64, factor: f64, orig: f64, betas: (f64, f64), truncate: bool) -> Vec<f64> {
        let dim = d as f64;
        let cd = |rot: f64| dim * (orig / (rot * 2.0 * std::f64::consts::PI)).ln() / (2.0 * base.ln());
        let (mut lo, mut hi) = (cd(betas.0), cd(betas.1));
        if truncate {
            lo = lo.floor();
            hi = hi.ceil();
        }
        let lo = lo.max(0.0);
        let hi = hi.min(dim - 1.0);
        let hi = if lo == hi { hi + 0.001 } else { hi };
        (0..d / 2)
            .map(|i| {
                let pos_freq = base.powf(2.0 * i as f64 / dim);
                let ramp = ((i as f64 - lo) / (hi - lo)).clamp(0.0, 1.0);
                let extra = 1.0 - ramp;
                (1.0 / (factor * pos_freq)) * (1.0 - extra) + (1.0 / pos_freq) * extra
            })
            .collect()
    }

    fn yarn(factor: f32, orig: usize, truncate: bool) -> RopeScaling {
        RopeScaling::Yarn {
            factor,
            original_max_position: orig,
            beta_fast: 32.0,
            beta_slow: 1.0,
            mscale: None,
            mscale_all_dim: None,
            attention_factor: None,
            truncate,
        }
    }

    #[test]
    fn yarn_blend_and_attention_factor() {
        // Qwen2.5: theta 1e6, head_dim 128, factor 4, original 32768.
        let (d, base) = (128usize, 1_000_000f64);
        for truncate in [true, false] {
            let f = cfg(d, base as f32, yarn(4.0, 32768, truncate), 32768).freqs(1);
            let want = yarn_reference(d, base, 4.0, 32768.0, (32.0, 1.0), truncate);
            assert_all_close(&f.inv_freq, &want, 1e-6);
            assert!(close(f.attention_scaling, 0.1 * 4f64.ln() + 1.0, 1e-6));
            // Pure extrapolation at the high-frequency end, pure interpolation at the low end,
            // and a blended band in between.
            let plain = |i: usize| base.powf(-(2.0 * i as f64) / d as f64);
            assert!(close(f.inv_freq[0], plain(0), 1e-7));
            assert!(close(f.inv_freq[d / 2 - 1], plain(d / 2 - 1) / 4.0, 1e-6));
            let blended = (0..d / 2).filter(|&i| {
                let r = f.inv_freq[i] as f64 / plain(i);
                r < 0.999 && r > 0.2501
            });
            assert!(blended.count() > 3);
        }
    }

    #[test]
    fn yarn_mscale_variants() {
        let with = |mscale, mscale_all_dim, attention_factor, factor| {
            let s = RopeScaling::Yarn {
                factor,
                original_max_position: 4096,
                beta_fast: 32.0,
                beta_slow: 1.0,
                mscale,
                mscale_all_dim,
                attention_factor,
                truncate: true,
            };
            cfg(64, 10000.0, s, 163840).freqs(1).attention_scaling
        };
        let m = |s: f64, ms: f64| 0.1 * ms * s.ln() + 1.0;
        // DeepSeek-V3 style: mscale == mscale_all_dim => 1.
        assert!(close(with(Some(1.0), Some(1.0), None, 40.0), 1.0, 1e-6));
        assert!(close(with(Some(0.707), Some(1.0), None, 40.0), m(40.0, 0.707) / m(40.0, 1.0), 1e-6));
        // Only one of them (or a zero) => plain 0.1 ln(s) + 1.
        assert!(close(with(Some(0.707), None, None, 40.0), m(40.0, 1.0), 1e-6));
        assert!(close(with(Some(0.0), Some(1.0), None, 40.0), m(40.0, 1.0), 1e-6));
        // Explicit attention_factor wins; factor <= 1 => 1.
        assert_eq!(with(Some(0.707), Some(1.0), Some(0.5), 40.0), 0.5);
        assert_eq!(with(None, None, None, 1.0), 1.0);
        // inv_freq does not depend on the mscale fields.
        let a = cfg(64, 10000.0, yarn(40.0, 4096, true), 163840).freqs(1);
        let want = yarn_reference(64, 10000.0, 40.0, 4096.0, (32.0, 1.0), true);
        assert_all_close(&a.inv_freq, &want, 1e-6);
    }

    /// (re, im) * (c, s) as complex numbers.
    fn cmul(a: (f64, f64), b: (f64, f64)) -> (f64, f64) {
        (a.0 * b.0 - a.1 * b.1, a.0 * b.1 + a.1 * b.0)
    }

    #[test]
    fn rotate_half_is_complex_multiplication_on_pairs() {
        let f = cfg(64, 10000.0, yarn(4.0, 4096, true), 16384).freqs(1);
        assert!(f.attention_scaling > 1.0);
        let x0: Vec<f32> = (0..64).map(|i| ((i * 37 % 17) as f32 - 8.0) * 0.25).collect();
        for pos in [0u32, 1, 7, 4095, 131071] {
            let mut x = x0.clone();
            rotate_half_in_place(&mut x, pos, &f);
            for i in 0..32 {
                let angle = (pos as f32 * f.inv_freq[i]) as f64; // the product is taken in f32, as in HF
                let sc = f.attention_scaling as f64;
                let (re, im) = cmul((x0[i] as f64, x0[i + 32] as f64), (angle.cos() * sc, angle.sin() * sc));
                assert!((x[i] as f64 - re).abs() < 1e-5, "pos {pos} pair {i}");
                assert!((x[i + 32] as f64 - im).abs() < 1e-5, "pos {pos} pair {i}");
            }
        }
        // Position 0 with scaling 1 is the identity.
        let plain = cfg(64, 10000.0, RopeScaling::None, 4096).freqs(1);
        let mut x = x0.clone();
        rotate_half_in_place(&mut x, 0, &plain);
        assert_eq!(x, x0);
    }

    /// convert_hf_to_gguf.py `LlamaModel.permute`, written with explicit indices:
    /// `w.reshape(n_head, 2, r/2, cols).swapaxes(1, 2).reshape(rows, cols)`,
    /// so out[h][j][t][c] = in[h][t][j][c].
    fn gguf_permute(w: &[f32], rows: usize, cols: usize, n_head: usize) -> Vec<f32> {
        let half = rows / n_head / 2;
        let mut out = vec![0.0; w.len()];
        for h in 0..n_head {
            for t in 0..2 {
                for j in 0..half {
                    for c in 0..cols {
                        let in_idx = ((h * 2 + t) * half + j) * cols + c;
                        let out_idx = ((h * half + j) * 2 + t) * cols + c;
                        out[out_idx] = w[in_idx];
                    }
                }
            }
        }
        out
    }

    #[test]
    fn permute_round_trips() {
        for (n_head, rows_per_head, cols) in [(4usize, 8usize, 3usize), (2, 64, 5), (8, 16, 1), (1, 2, 2)] {
            let rows = n_head * rows_per_head;
            let w: Vec<f32> = (0..rows * cols).map(|i| i as f32).collect();
            let p = gguf_permute(&w, rows, cols, n_head);
            if rows_per_head > 2 {
                assert_ne!(p, w, "permutation must not be the identity here");
            }
            assert_eq!(inverse_permute_gguf_rows(&p, rows, cols, n_head), w);
            assert_eq!(gguf_permute(&inverse_permute_gguf_rows(&w, rows, cols, n_head), rows, cols, n_head), w);
        }
        // Rows of a single element where the permutation is the identity.
        assert_eq!(inverse_permute_gguf_rows(&[1.0, 2.0], 2, 1, 1), vec![1.0, 2.0]);
    }

    #[test]
    fn permute_bad_shapes_do_not_panic() {
        assert!(inverse_permute_gguf_rows(&[0.0; 6], 3, 2, 1).is_empty());
        assert!(inverse_permute_gguf_rows(&[0.0; 8], 4, 2, 0).is_empty());
        assert!(inverse_permute_gguf_rows(&[0.0; 7], 4, 2, 1).is_empty());
        assert!(try_inverse_permute_gguf_rows(&[0.0; 12], 6, 2, 2).is_err());
        assert!(try_inverse_permute_gguf_rows::<f32>(&[], usize::MAX, 2, 2).is_err());
        assert!(try_inverse_permute_gguf_rows::<f32>(&[], 0, 2, usize::MAX).is_err());
    }

    #[test]
    fn interleaved_rope_on_gguf_rows_equals_rotate_half_on_hf_rows() {
        let (n_head, hd, cols) = (3usize, 16usize, 5usize);
        let rows = n_head * hd;
        let w: Vec<f32> = (0..rows * cols).map(|i| ((i * 7919 % 23) as f32 - 11.0) / 7.0).collect();
        let x: Vec<f32> = (0..cols).map(|i| (i as f32 - 2.0) / 3.0).collect();
        let matvec =
            |m: &[f32]| -> Vec<f32> { (0..rows).map(|r| (0..cols).map(|c| m[r * cols + c] * x[c]).sum()).collect() };
        let f = cfg(hd, 10000.0, RopeScaling::Linear { factor: 2.0 }, 4096).freqs(1);
        let pos = 123u32;
        // HF path: rotate-half per head on q = W x.
        let mut q_hf = matvec(&w);
        for head in q_hf.chunks_mut(hd) {
            rotate_half_in_place(head, pos, &f);
        }
        // GGUF path: q' = permute(W) x, interleaved (GPT-J) pairs (2j, 2j+1) with freq j.
        let mut q_gg = matvec(&gguf_permute(&w, rows, cols, n_head));
        for head in q_gg.chunks_mut(hd) {
            for j in 0..hd / 2 {
                let a = pos as f32 * f.inv_freq[j];
                let (c, s) = (a.cos() * f.attention_scaling, a.sin() * f.attention_scaling);
                let (x0, x1) = (head[2 * j], head[2 * j + 1]);
                head[2 * j] = x0 * c - x1 * s;
                head[2 * j + 1] = x1 * c + x0 * s;
            }
        }
        // Un-permuting the interleaved result (as a bias-like vector) gives the HF result.
        let back = inverse_permute_gguf_rows(&q_gg, rows, 1, n_head);
        for (a, b) in back.iter().zip(&q_hf) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
        // And rotate-half on the inverse-permuted weights' output equals the same thing.
        let w_back = inverse_permute_gguf_rows(&gguf_permute(&w, rows, cols, n_head), rows, cols, n_head);
        let mut q2 = matvec(&w_back);
        for head in q2.chunks_mut(hd) {
            rotate_half_in_place(head, pos, &f);
        }
        assert_eq!(q2, q_hf);
    }

    #[test]
    fn from_hf_json_variants() {
        let parse = |v: Value| RopeScaling::from_hf_json(Some(&v), 131072);
        assert_eq!(RopeScaling::from_hf_json(None, 4096), Ok(RopeScaling::None));
        assert_eq!(parse(Value::Null), Ok(RopeScaling::None));
        assert_eq!(parse(json!({"rope_type": "default", "rope_theta": 10000.0})), Ok(RopeScaling::None));
        assert_eq!(parse(json!({"type": "linear", "factor": 2.0})), Ok(RopeScaling::Linear { factor: 2.0 }));
        assert_eq!(parse(json!({"type": "dynamic", "factor": 2})), Ok(RopeScaling::DynamicNtk { factor: 2.0 }));
        // Llama-3.1-8B config.json.
        let llama31 = json!({"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 8192, "rope_type": "llama3"});
        let want = RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position: 8192,
        };
        assert_eq!(parse(llama31), Ok(want));
        // Qwen2.5 yarn snippet (max_position_embeddings 32768 in that config).
        let qwen = json!({"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"});
        let want = yarn(4.0, 32768, true);
        assert_eq!(RopeScaling::from_hf_json(Some(&qwen), 32768), Ok(want));
        // No original_max_position_embeddings => config value; rope_type wins over type.
        let v = json!({"factor": 2.0, "rope_type": "yarn", "type": "linear"});
        assert_eq!(RopeScaling::from_hf_json(Some(&v), 4096), Ok(yarn(2.0, 4096, true)));
        // DeepSeek-V3 style, with betas/mscale/truncate.
        let ds = json!({"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                        "original_max_position_embeddings": 4096, "type": "yarn", "truncate": false});
        let want = RopeScaling::Yarn {
            factor: 40.0,
            original_max_position: 4096,
            beta_fast: 32.0,
            beta_slow: 1.0,
            mscale: Some(1.0),
            mscale_all_dim: Some(1.0),
            attention_factor: None,
            truncate: false,
        };
        assert_eq!(RopeScaling::from_hf_json(Some(&ds), 163840), Ok(want));
        // Missing yarn factor => max_position_embeddings / original.
        let v = json!({"rope_type": "yarn", "original_max_position_embeddings": 4096, "beta_fast": 0});
        assert_eq!(RopeScaling::from_hf_json(Some(&v), 16384), Ok(yarn(4.0, 4096, true)));
    }

    #[test]
    fn from_hf_json_errors() {
        let parse = |v: Value| RopeScaling::from_hf_json(Some(&v), 4096);
        let e = parse(json!({"type": "longrope", "long_factor": [1.0], "short_factor": [1.0]})).unwrap_err();
        assert!(e.contains("longrope"), "{e}");
        assert!(parse(json!({"rope_type": "mystery"})).unwrap_err().contains("mystery"));
        assert!(parse(json!({"factor": 2.0})).is_err());
        assert!(parse(json!({"type": "linear"})).unwrap_err().contains("factor"));
        assert!(parse(json!({"type": "linear", "factor": "2"})).is_err());
        assert!(parse(json!({"type": "linear", "factor": 0.0})).is_err());
        assert!(parse(json!({"type": "yarn"})).is_err());
        let no_orig = json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0});
        assert!(parse(no_orig).unwrap_err().contains("original_max_position_embeddings"));
        let bad = json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192});
        assert!(parse(bad).is_err());
        assert!(parse(json!([1, 2])).is_err());
        assert!(parse(json!({"type": 3})).is_err());
    }

    #[test]
    fn parsed_configs_give_reference_tables_and_serde_round_trips() {
        let qwen = json!({"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"});
        let scaling = RopeScaling::from_hf_json(Some(&qwen), 32768).unwrap();
        let s = serde_json::to_string(&scaling).unwrap();
        assert_eq!(serde_json::from_str::<RopeScaling>(&s).unwrap(), scaling);
        let c = cfg(128, 1_000_000.0, scaling, 32768);
        c.validate().unwrap();
        let want = yarn_reference(128, 1_000_000.0, 4.0, 32768.0, (32.0, 1.0), true);
        assert_all_close(&c.freqs(100).inv_freq, &want, 1e-6);
    }

    #[test]
    fn validate_rejects_degenerate_configs() {
        assert!(cfg(0, 10000.0, RopeScaling::None, 4096).validate().is_err());
        assert!(cfg(7, 10000.0, RopeScaling::None, 4096).validate().is_err());
        assert!(cfg(64, f32::NAN, RopeScaling::None, 4096).validate().is_err());
        assert!(cfg(2, 10000.0, RopeScaling::DynamicNtk { factor: 2.0 }, 4096).validate().is_err());
        assert!(cfg(64, 10000.0, RopeScaling::Linear { factor: 0.0 }, 4096).validate().is_err());
        // Degenerate inputs never panic.
        assert!(cfg(0, 10000.0, RopeScaling::None, 0).freqs(0).inv_freq.is_empty());
        let mut short = [1.0f32; 3];
        rotate_half_in_place(&mut short, 5, &cfg(64, 10000.0, RopeScaling::None, 1).freqs(1));
    }
}
