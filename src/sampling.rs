//! Next-token sampling on the host: [`SamplingParams`] (validated user settings) and
//! [`Sampler`], which holds the seeded RNG and draws one `u` per token. The algorithm itself —
//! greedy, temperature, top-k, top-p, the draw in id order — is the `sample` op's reference,
//! [`sample_row`] in `crate::backend::reference::sample` (re-exported here), which the CPU backend
//! runs and the device kernels mirror.
//!
//! Invariants:
//! * Determinism: a sampler built from the same [`SamplingParams`] (hence seed) fed the same
//!   logits sequence returns the same tokens. Every non-greedy draw consumes exactly one `f32`
//!   `u` in `[0, 1)` from the RNG, whether the host or a device then samples; greedy draws
//!   consume none.
//! * A row with no logit above `-inf` or invalid parameters are errors of [`Sampler::sample`],
//!   never a panic.

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::backend::reference::sample::max_logit;
pub use crate::backend::reference::sample::{
    NO_TOKEN, RowSampling, SampleScratch, TOP_P_SLACK, argmax, sample_row, sample_row_with,
};

#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    pub temperature: f32,
    /// 0 = off.
    pub top_k: usize,
    /// 1.0 = off.
    pub top_p: f32,
    pub seed: u64,
}

impl SamplingParams {
    /// Argmax decoding: temperature 0, no top-k/top-p, seed 0.
    pub fn greedy() -> Self {
        SamplingParams { temperature: 0.0, top_k: 0, top_p: 1.0, seed: 0 }
    }

    /// temperature >= 0 finite, 0 < top_p <= 1.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(format!("temperature must be finite and >= 0, got {}", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(format!("top_p must be in (0, 1], got {}", self.top_p));
        }
        Ok(())
    }

    /// The per-row settings the `sample` op reads (top_k saturates at u32::MAX, which is "all").
    pub fn row(&self) -> RowSampling {
        RowSampling {
            temperature: self.temperature,
            top_k: u32::try_from(self.top_k).unwrap_or(u32::MAX),
            top_p: self.top_p,
        }
    }
}

pub struct Sampler {
    params: SamplingParams,
    rng: StdRng,
    scratch: SampleScratch,
}

impl Sampler {
    pub fn new(p: SamplingParams) -> Self {
        let rng = StdRng::seed_from_u64(p.seed);
        Sampler { params: p, rng, scratch: SampleScratch::default() }
    }

    /// The parameters this sampler was built with.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// The next draw `u` in `[0, 1)`: one RNG step when sampling, none (0) when greedy.
    fn next_u(&mut self) -> f32 {
        if self.params.temperature == 0.0 { 0.0 } else { self.rng.random::<f32>() }
    }

    /// The settings words of the next token for the device `sample` op (draws `u` exactly as
    /// [`Sampler::sample`] would, so host and device sampling consume the RNG alike).
    pub fn device_settings(&mut self) -> [u32; 4] {
        let u = self.next_u();
        self.params.row().words(u)
    }

    /// [`sample_row`] with this sampler's settings and next draw. Same seed + same logits sequence
    /// => same tokens. NaN logits are ignored (treated as -inf); all -inf/NaN or invalid
    /// parameters => Err.
    pub fn sample(&mut self, logits: &[f32]) -> Result<u32, String> {
        self.params.validate()?;
        if u32::try_from(logits.len()).is_err() {
            return Err(format!("vocabulary of {} tokens does not fit token ids (u32)", logits.len()));
        }
        if max_logit(logits).is_none() {
            return Err(NO_LOGIT.into());
        }
        let u = self.next_u();
        let row = self.params.row();
        Ok(sample_row_with(&mut self.scratch, logits, &row, u))
    }
}

/// The error of a row with nothing to sample.
pub const NO_LOGIT: &str = "no finite logit to sample from (all NaN or -inf)";

/// log-softmax of one row in f64 accumulation, returns log p(target).
///
/// NaN logits count as `-inf`.  Returns NaN when `target` is out of range or the
/// row has no logit above `-inf` (the distribution is undefined); with `+inf`
/// logits the mass is shared equally among them.
pub fn log_prob(logits: &[f32], target: u32) -> f64 {
    let Some(&t) = logits.get(target as usize) else {
        return f64::NAN;
    };
    let Some(max) = max_logit(logits) else {
        return f64::NAN;
    };
    let t = if t.is_nan() { f64::NEG_INFINITY } else { t as f64 };
    let max = max as f64;
    if max.is_infinite() {
        let n_inf = logits.iter().filter(|&&x| x as f64 == max).count() as f64;
        return if t == max { -n_inf.ln() } else { f64::NEG_INFINITY };
    }
    let sum: f64 = logits.iter().filter(|x| !x.is_nan()).map(|&x| (x as f64 - max).exp()).sum();
    (t - max) - sum.ln()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::reference::sample::NUCLEUS_CHUNK;

    fn params(temperature: f32, top_k: usize, top_p: f32, seed: u64) -> SamplingParams {
        SamplingParams { temperature, top_k, top_p, seed }
    }

    /// Exact softmax(logits / t) in f64.
    fn softmax(logits: &[f32], t: f64) -> Vec<f64> {
        let e: Vec<f64> = logits.iter().map(|&l| (l as f64 / t).exp()).collect();
        let s: f64 = e.iter().sum();
        e.iter().map(|x| x / s).collect()
    }

    fn histogram(s: &mut Sampler, logits: &[f32], draws: usize) -> Vec<f64> {
        let mut h = vec![0usize; logits.len()];
        for _ in 0..draws {
            h[s.sample(logits).unwrap() as usize] += 1;
        }
        h.iter().map(|&c| c as f64 / draws as f64).collect()
    }

    fn max_abs_diff(a: &[f64], b: &[f64]) -> f64 {
        a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
    }

    #[test]
    fn greedy_is_argmax_with_lowest_index_ties() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(argmax(&[f32::NAN, 1.0, 0.5]), 1);
        assert_eq!(argmax(&[-1.0, f32::NAN, -1.0]), 0);
        assert_eq!(argmax(&[0.0, f32::INFINITY, f32::INFINITY]), 1);
        assert_eq!(argmax(&[]), 0);
        let mut s = Sampler::new(SamplingParams::greedy());
        for logits in [vec![1.0, 3.0, 3.0, 2.0], vec![f32::NAN, -5.0, -4.0, f32::NEG_INFINITY], vec![7.0]] {
            assert_eq!(s.sample(&logits).unwrap(), argmax(&logits));
        }
        assert_eq!(s.sample(&[1.0, 3.0, 3.0, 2.0]).unwrap(), 1);
    }

    #[test]
    fn top_k_one_is_greedy_at_any_temperature() {
        let logits: Vec<f32> = (0..1000).map(|i| ((i * 7919) % 1009) as f32 * 0.01).collect();
        let mut tied = logits.clone();
        tied[3] = 100.0;
        tied[500] = 100.0;
        for t in [0.01f32, 0.7, 1.0, 10.0, 1000.0] {
            let mut s = Sampler::new(params(t, 1, 1.0, 42));
            for row in [&logits, &tied] {
                for _ in 0..20 {
                    assert_eq!(s.sample(row).unwrap(), argmax(row));
                }
            }
            let mut s = Sampler::new(params(t, 1, 0.5, 7));
            assert_eq!(s.sample(&tied).unwrap(), 3);
        }
    }

    #[test]
    fn seeded_reproducibility_and_seed_sensitivity() {
        let rows: Vec<Vec<f32>> =
            (0..200).map(|r| (0..50).map(|i| ((i * 31 + r * 17) % 23) as f32 * 0.2).collect()).collect();
        let run = |seed| {
            let mut s = Sampler::new(params(1.0, 20, 0.95, seed));
            rows.iter().map(|row| s.sample(row).unwrap()).collect::<Vec<u32>>()
        };
        assert_eq!(run(1234), run(1234));
        assert_ne!(run(1234), run(1235));
    }

    #[test]
    fn empirical_distribution_matches_softmax() {
        let logits = [1.0f32, 2.0, 0.5, -1.0, 1.5];
        let mut s = Sampler::new(params(1.0, 0, 1.0, 99));
        let emp = histogram(&mut s, &logits, 20_000);
        let exact = softmax(&logits, 1.0);
        assert!(max_abs_diff(&emp, &exact) < 0.02, "{emp:?} vs {exact:?}");
        // Chi-square with 4 degrees of freedom; 18.47 is the 0.999 quantile.
        let chi2: f64 = emp.iter().zip(&exact).map(|(o, e)| 20_000.0 * (o - e).powi(2) / e).sum();
        assert!(chi2 < 18.47, "chi2 {chi2}");
    }

    #[test]
    fn temperature_sharpens_and_flattens() {
        let logits = [1.0f32, 2.0, 0.5, -1.0, 1.5];
        let mut top = Vec::new();
        for t in [0.5f32, 1.0, 2.0] {
            let mut s = Sampler::new(params(t, 0, 1.0, 5));
            let emp = histogram(&mut s, &logits, 20_000);
            let exact = softmax(&logits, t as f64);
            assert!(max_abs_diff(&emp, &exact) < 0.02, "T={t}: {emp:?} vs {exact:?}");
            top.push(emp[1]);
        }
        assert!(top[0] > top[1] + 0.05 && top[1] > top[2] + 0.05, "{top:?}");
    }

    #[test]
    fn top_k_excludes_tokens_outside_the_k_best() {
        let logits = [0.1f32, 0.9, 0.3, 0.8, 0.2, 0.7, 0.0, 0.4];
        let mut s = Sampler::new(params(5.0, 3, 1.0, 11));
        let emp = histogram(&mut s, &logits, 6000);
        for (i, p) in emp.iter().enumerate() {
            if [1, 3, 5].contains(&i) {
                assert!(*p > 0.25, "token {i} p {p}");
            } else {
                assert_eq!(*p, 0.0, "token {i} outside top-3 was drawn");
            }
        }
        // The kept three are renormalised: exact softmax over them.
        let sub = softmax(&[0.9, 0.8, 0.7], 5.0);
        assert!(max_abs_diff(&[emp[1], emp[3], emp[5]], &sub) < 0.03);
    }

    #[test]
    fn top_p_keeps_exactly_the_nucleus() {
        // Probabilities 0.5, 0.3, 0.15, 0.05 in shuffled positions; top_p 0.8 keeps {0.5, 0.3}.
        let probs = [0.15f64, 0.5, 0.05, 0.3];
        let logits: Vec<f32> = probs.iter().map(|p| p.ln() as f32).collect();
        let mut s = Sampler::new(params(1.0, 0, 0.8, 3));
        let emp = histogram(&mut s, &logits, 10_000);
        assert_eq!(emp[0], 0.0);
        assert_eq!(emp[2], 0.0);
        assert!((emp[1] - 0.5 / 0.8).abs() < 0.03 && (emp[3] - 0.3 / 0.8).abs() < 0.03, "{emp:?}");
        // Just above 0.8 the 0.15 token joins; tiny top_p still keeps one token.
        let emp = histogram(&mut Sampler::new(params(1.0, 0, 0.81, 3)), &logits, 5000);
        assert!(emp[0] > 0.0 && emp[2] == 0.0);
        let emp = histogram(&mut Sampler::new(params(1.0, 0, 1e-6, 3)), &logits, 500);
        assert_eq!(emp[1], 1.0);
    }

    #[test]
    fn nucleus_grows_past_the_first_chunk_on_a_large_vocab() {
        // 1000 tokens whose rank is a fixed permutation of the id; nucleus ~ hundreds.
        let n = 1000usize;
        let rank = |id: usize| (id * 7919) % n;
        let logits: Vec<f32> = (0..n).map(|id| -(rank(id) as f32) * 0.002).collect();
        let w: Vec<f64> = (0..n).map(|r| (-(r as f32 * 0.002) as f64).exp()).collect();
        let total: f64 = w.iter().sum();
        let mut acc = 0.0;
        let m = w.iter().position(|x| {
            acc += x / total;
            acc >= 0.5
        });
        let m = m.unwrap() + 1;
        assert!(m > 4 * NUCLEUS_CHUNK, "nucleus {m} should span several chunks");
        let mut s = Sampler::new(params(1.0, 0, 0.5, 8));
        let mut worst = 0;
        for _ in 0..5000 {
            let id = s.sample(&logits).unwrap() as usize;
            assert!(rank(id) < m, "token of rank {} outside nucleus of {m}", rank(id));
            worst = worst.max(rank(id));
        }
        assert!(worst > m - 20, "tail of the nucleus never drawn: {worst} / {m}");
        // 150k vocabulary with top-k and top-p together.
        let big: Vec<f32> = (0..150_000).map(|i| ((i * 7919) % 150_001) as f32 * 1e-4).collect();
        let mut s = Sampler::new(params(0.8, 50, 0.9, 1));
        let mut best: Vec<u32> = (0..150_000u32).collect();
        best.sort_by(|&a, &b| big[b as usize].total_cmp(&big[a as usize]));
        for _ in 0..50 {
            let id = s.sample(&big).unwrap();
            assert!(best[..50].contains(&id));
        }
    }

    #[test]
    fn log_prob_matches_direct_f64() {
        let logits = [0.3f32, -1.2, 2.5, 0.0, 1.1];
        let denom: f64 = logits.iter().map(|&l| (l as f64).exp()).sum();
        for (t, &l) in logits.iter().enumerate() {
            let direct = ((l as f64).exp() / denom).ln();
            assert!((log_prob(&logits, t as u32) - direct).abs() < 1e-12);
        }
        // Large logits: direct formula after subtracting 1000 by hand.
        let big = [1000.0f32, 1001.0, 999.5];
        let denom: f64 = [0.0f64, 1.0, -0.5].iter().map(|x| x.exp()).sum();
        assert!((log_prob(&big, 1) - (1.0f64.exp() / denom).ln()).abs() < 1e-12);
        // NaN ignored, target NaN is -inf, out of range / all -inf is NaN.
        let with_nan = [f32::NAN, 0.0, 0.0];
        assert!((log_prob(&with_nan, 1) - 0.5f64.ln()).abs() < 1e-12);
        assert_eq!(log_prob(&with_nan, 0), f64::NEG_INFINITY);
        assert!(log_prob(&with_nan, 3).is_nan());
        assert!(log_prob(&[f32::NEG_INFINITY; 2], 0).is_nan());
        assert_eq!(log_prob(&[0.0, f32::INFINITY], 1), 0.0);
    }

    #[test]
    fn errors_instead_of_panics() {
        for p in [SamplingParams::greedy(), params(1.0, 0, 1.0, 0), params(0.7, 5, 0.9, 0)] {
            let mut s = Sampler::new(p);
            assert!(s.sample(&[f32::NAN; 4]).is_err());
            assert!(s.sample(&[f32::NEG_INFINITY, f32::NAN]).is_err());
            assert!(s.sample(&[]).is_err());
        }
        for bad in [
            params(-1.0, 0, 1.0, 0),
            params(f32::NAN, 0, 1.0, 0),
            params(1.0, 0, 0.0, 0),
            params(1.0, 0, 1.5, 0),
            params(1.0, 0, f32::NAN, 0),
            params(f32::INFINITY, 0, 1.0, 0),
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
            assert!(Sampler::new(bad).sample(&[1.0, 2.0]).is_err());
        }
        SamplingParams::greedy().validate().unwrap();
        // NaNs are skipped when sampling; +inf logits take all the mass.
        let mut s = Sampler::new(params(1.0, 0, 1.0, 2));
        for _ in 0..100 {
            assert_eq!(s.sample(&[f32::NAN, 1.0, f32::NAN]).unwrap(), 1);
            assert_eq!(s.sample(&[5.0, f32::INFINITY, 1.0]).unwrap(), 1);
        }
        // Tiny temperature behaves like greedy without under/overflow.
        let mut s = Sampler::new(params(1e-30, 0, 1.0, 2));
        assert_eq!(s.sample(&[0.0, 1.0, 0.999_999]).unwrap(), 1);
    }
}
