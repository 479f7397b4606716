//! Next-token sampling: greedy, temperature, top-k and top-p (nucleus), one algorithm shared by
//! the host ([`Sampler`]) and every backend's `sample` op ([`sample_row`] is the reference the
//! CPU backend runs and the device kernels, `shaders/sample.wgsl` and `cuda/sample.cu`, mirror).
//!
//! [`sample_row`] for `temperature > 0`, with weights `w_i = exp((l_i - max) / T)`:
//! 1. rank: tokens ordered by logit descending (equivalently by weight: exp is monotone), ties
//!    by ascending id; NaN logits are never kept, `-0.0` and `+0.0` are one value;
//! 2. top-k (`top_k > 0`): keep the first `top_k` in rank order;
//! 3. top-p (`top_p < 1`): of those, keep the shortest rank prefix whose weight reaches
//!    `(top_p - 1e-6) · total` (the `1e-6` of slack keeps f32 rounding of the logits from pulling
//!    in one token past an exact boundary; at least one token is always kept);
//! 4. draw by inverse CDF in ascending *token-id* order over the kept set: with
//!    `r = u · kept_mass`, the first kept token whose running weight exceeds `r`.
//!
//! The kept set is therefore always "rank <= cut" for one cut token, i.e. a threshold on the logit
//! plus a tie cut by id — what lets a device find it in parallel (a bitwise search for the
//! threshold with block-wide counts or mass sums, then scans in id order; docs/backends.md). The
//! draw in id order (not rank order) needs no sort either. `temperature == 0` is argmax (lowest id
//! on ties). Results differ between host and device only where a float sum lands within rounding
//! of a boundary (`tests/backend_parity.rs` checks that only such cases differ).
//!
//! Invariants:
//! * NaN logits are ignored (treated as `-inf`); a row with no logit above `-inf` samples
//!   [`NO_TOKEN`] ([`Sampler::sample`] makes it an error), never a panic. Invalid parameters are
//!   errors in [`Sampler`]; the op itself treats `!(T > 0)` as greedy and `!(top_p < 1)` as off.
//! * With `+inf` logits only the `+inf` tokens have weight (1 each).
//! * Determinism: a sampler built from the same [`SamplingParams`] (hence seed) fed the same
//!   logits sequence returns the same tokens. Every non-greedy draw consumes exactly one `f32`
//!   `u` in `[0, 1)` from the RNG, whether the host or a device then samples; greedy draws
//!   consume none.
//! * The host accumulates weights in `f64`. Cost for a 150k vocabulary: one linear pass plus
//!   `select_nth_unstable` for top-k; the nucleus is grown in sorted chunks, so only the kept
//!   candidates (plus at most one chunk) are ever sorted.

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::cmp::Ordering;

/// Slack on the nucleus mass test (see the module docs).
pub const TOP_P_SLACK: f64 = 1e-6;
/// First chunk of candidates sorted when growing the nucleus.
const NUCLEUS_CHUNK: usize = 64;
/// What [`sample_row`] (and the `sample` op) returns for a row with no logit above `-inf`.
pub const NO_TOKEN: u32 = u32::MAX;

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

/// One row's sampling settings as the `sample` op reads them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowSampling {
    /// `!(> 0)` = greedy.
    pub temperature: f32,
    /// 0 = off.
    pub top_k: u32,
    /// `!(< 1)` = off.
    pub top_p: f32,
}

impl RowSampling {
    /// The row's four words of the op's settings buffer `[rows][4]` u32:
    /// temperature f32 bits, top_k, top_p f32 bits, u f32 bits.
    pub fn words(&self, u: f32) -> [u32; 4] {
        [self.temperature.to_bits(), self.top_k, self.top_p.to_bits(), u.to_bits()]
    }
    /// Inverse of [`RowSampling::words`]: the settings and `u`.
    pub fn from_words(w: [u32; 4]) -> (RowSampling, f32) {
        let s = RowSampling { temperature: f32::from_bits(w[0]), top_k: w[1], top_p: f32::from_bits(w[2]) };
        (s, f32::from_bits(w[3]))
    }
}

/// A candidate token: id, logit and its unnormalised weight `exp((logit - max) / T)`.
#[derive(Clone, Copy, Debug)]
struct Cand {
    id: u32,
    l: f32,
    w: f64,
}

/// Rank order: descending logit, then ascending id (a total order: candidates are never NaN).
fn by_rank(a: &Cand, b: &Cand) -> Ordering {
    b.l.partial_cmp(&a.l).unwrap_or(Ordering::Equal).then(a.id.cmp(&b.id))
}

/// Whether `c` is at or before `cut` in rank order.
fn within(c: &Cand, cut: &Cand) -> bool {
    c.l > cut.l || (c.l == cut.l && c.id <= cut.id)
}

/// Reusable buffers of [`sample_row`] (avoids two vocab-sized allocations per token).
#[derive(Default)]
pub struct SampleScratch {
    /// Candidates in id order.
    cands: Vec<Cand>,
    /// A copy permuted by selection and sorting.
    work: Vec<Cand>,
}

/// The reference sampler of one row (module docs): `u` in `[0, 1)` is the draw. Returns
/// [`NO_TOKEN`] when the row has no logit above `-inf`.
pub fn sample_row(logits: &[f32], s: &RowSampling, u: f32) -> u32 {
    sample_row_with(&mut SampleScratch::default(), logits, s, u)
}

/// [`sample_row`] with caller-held buffers.
pub fn sample_row_with(scratch: &mut SampleScratch, logits: &[f32], s: &RowSampling, u: f32) -> u32 {
    let Some(max) = max_logit(logits) else { return NO_TOKEN };
    if s.temperature.is_nan() || s.temperature <= 0.0 {
        return argmax(logits);
    }
    let SampleScratch { cands, work } = scratch;
    fill_candidates(cands, logits, max, s.temperature);
    work.clear();
    work.extend_from_slice(cands);
    let mut cut: Option<Cand> = None;
    let mut n = work.len();
    let k = s.top_k as usize;
    if k > 0 && k < n {
        work.select_nth_unstable_by(k - 1, by_rank);
        cut = Some(work[k - 1]);
        n = k;
    }
    if s.top_p < 1.0 {
        let kept = &mut work[..n];
        let total: f64 = kept.iter().map(|c| c.w).sum();
        let m = nucleus_len(kept, total, s.top_p as f64);
        cut = Some(kept[m - 1]);
    }
    let kept = |c: &&Cand| cut.as_ref().is_none_or(|e| within(c, e));
    let mass: f64 = cands.iter().filter(kept).map(|c| c.w).sum();
    let r = u as f64 * mass;
    let mut acc = 0.0;
    let mut last = NO_TOKEN;
    for c in cands.iter().filter(kept) {
        acc += c.w;
        last = c.id;
        if r < acc {
            return c.id;
        }
    }
    // Rounding left r at the very top: the last kept token.
    last
}

/// Fills `cands` (in id order) with every token of non-zero weight at temperature `t` (never
/// empty: the maximum itself has weight 1). `max` is the largest non-NaN logit (finite or +inf).
/// Tokens of zero weight can never be drawn, so leaving them out changes no kept set's draw.
fn fill_candidates(cands: &mut Vec<Cand>, logits: &[f32], max: f32, t: f32) {
    let (t, maxd) = (t as f64, max as f64);
    cands.clear();
    for (i, &l) in logits.iter().enumerate() {
        let ld = l as f64;
        // NaN and -inf never qualify; with a +inf logit only the +inf tokens do.
        let w = if maxd.is_infinite() {
            if ld == maxd { 1.0 } else { 0.0 }
        } else if ld.is_finite() {
            ((ld - maxd) / t).exp()
        } else {
            0.0
        };
        if w > 0.0 {
            // -0.0 and +0.0 are one value (the device keys them alike).
            cands.push(Cand { id: i as u32, l: if l == 0.0 { 0.0 } else { l }, w });
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

/// Largest non-NaN logit, `None` when there is none above `-inf`.
fn max_logit(logits: &[f32]) -> Option<f32> {
    let m = logits.iter().copied().filter(|x| !x.is_nan()).fold(f32::NEG_INFINITY, f32::max);
    (m > f32::NEG_INFINITY).then_some(m)
}

/// Sorts the most probable candidates to the front of `c` and returns the size
/// of the smallest descending prefix whose mass reaches `top_p` (at least 1).
/// The prefix is grown in chunks (64, 256, ...): each step partitions the rest
/// with `select_nth_unstable_by` and sorts only the chunk.
fn nucleus_len(c: &mut [Cand], total: f64, top_p: f64) -> usize {
    let target = top_p * total - TOP_P_SLACK * total;
    let mut sorted = 0;
    let mut mass = 0.0;
    let mut chunk = NUCLEUS_CHUNK;
    while sorted < c.len() {
        let rest = &mut c[sorted..];
        let take = chunk.min(rest.len());
        if take < rest.len() {
            rest.select_nth_unstable_by(take - 1, by_rank);
        }
        rest[..take].sort_unstable_by(by_rank);
        for (j, cand) in rest[..take].iter().enumerate() {
            mass += cand.w;
            if mass >= target {
                return sorted + j + 1;
            }
        }
        sorted += take;
        chunk = chunk.saturating_mul(4);
    }
    c.len().max(1)
}

/// Index of the largest logit, lowest index on ties; NaN is ignored.
/// Returns 0 for an empty or all-NaN row.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best: Option<(usize, f32)> = None;
    for (i, &x) in logits.iter().enumerate() {
        if x.is_nan() {
            continue;
        }
        if best.is_none_or(|(_, b)| x > b) {
            best = Some((i, x));
        }
    }
    best.map_or(0, |(i, _)| i as u32)
}

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

    /// The brute-force reference: every token sorted by (logit desc, id asc), the kept set of
    /// top-k then the nucleus, and each kept token's probability (0 for the rest).
    fn brute_probs(logits: &[f32], s: &RowSampling) -> Vec<f64> {
        let max = logits.iter().copied().filter(|x| !x.is_nan()).fold(f32::NEG_INFINITY, f32::max) as f64;
        let w: Vec<f64> = logits
            .iter()
            .map(|&l| match l as f64 {
                l if l.is_nan() => 0.0,
                l if max.is_infinite() => (l == max) as u8 as f64,
                l if l.is_finite() => ((l - max) / s.temperature as f64).exp(),
                _ => 0.0,
            })
            .collect();
        let mut order: Vec<usize> = (0..logits.len()).filter(|&i| w[i] > 0.0).collect();
        order.sort_by(|&a, &b| logits[b].partial_cmp(&logits[a]).unwrap().then(a.cmp(&b)));
        if s.top_k > 0 {
            order.truncate(s.top_k as usize);
        }
        if s.top_p < 1.0 {
            let total: f64 = order.iter().map(|&i| w[i]).sum();
            let (mut acc, mut m) = (0.0, order.len());
            for (j, &i) in order.iter().enumerate() {
                acc += w[i];
                if acc >= (s.top_p as f64 - TOP_P_SLACK) * total {
                    m = j + 1;
                    break;
                }
            }
            order.truncate(m);
        }
        let mass: f64 = order.iter().map(|&i| w[i]).sum();
        let mut p = vec![0.0; logits.len()];
        order.iter().for_each(|&i| p[i] = w[i] / mass);
        p
    }

    /// `sample_row` has exactly the brute-force distribution, drawn in ascending id order: over a
    /// fine grid of u each token's share is its probability within the grid's resolution, and the
    /// token at u is the one whose interval of the id-ordered CDF holds u.
    #[test]
    fn sample_row_is_the_brute_force_distribution_in_id_order() {
        const GRID: usize = 20_000;
        let mut rng = StdRng::seed_from_u64(2024);
        let mut rows: Vec<Vec<f32>> =
            (0..6).map(|_| (0..12).map(|_| rng.random::<f32>() * 6.0 - 3.0).collect()).collect();
        // Exact ties (quantized logits), ties at the top, ±0, NaN and -inf, +inf.
        rows.push((0..16).map(|_| (rng.random::<f32>() * 4.0).floor()).collect());
        rows.push(vec![1.0, 2.0, 2.0, 0.5, 2.0, 1.0, 1.0, -1.0]);
        rows.push(vec![-0.0, 0.0, -0.0, -1.0, 0.0, -2.0]);
        rows.push(vec![f32::NAN, 1.0, f32::NEG_INFINITY, 0.5, f32::NAN, 2.0, f32::NEG_INFINITY, 1.5]);
        rows.push(vec![0.0, f32::INFINITY, 3.0, f32::INFINITY, f32::NAN]);
        let settings = [
            (1.0, 0, 1.0),
            (0.7, 0, 1.0),
            (1.5, 3, 1.0),
            (1.0, 1, 1.0),
            (1.0, 0, 0.9),
            (0.7, 5, 0.5),
            (2.0, 4, 0.8),
            (1.0, 0, 0.3),
            (1.0, 2, 1e-7),
        ];
        for row in &rows {
            for &(temperature, top_k, top_p) in &settings {
                let s = RowSampling { temperature, top_k, top_p };
                let probs = brute_probs(row, &s);
                // Interval ends of the id-ordered CDF.
                let mut cdf = vec![0.0];
                for p in &probs {
                    cdf.push(cdf.last().unwrap() + p);
                }
                let mut freq = vec![0usize; row.len()];
                for g in 0..GRID {
                    let u = (g as f64 + 0.5) / GRID as f64;
                    let got = sample_row(row, &s, u as f32) as usize;
                    freq[got] += 1;
                    let want = (0..row.len()).find(|&i| probs[i] > 0.0 && u < cdf[i + 1]).unwrap();
                    let near = cdf.iter().any(|c| (c - u).abs() < 1e-6);
                    assert!(near || got == want, "{row:?} {s:?} u={u}: {got} vs {want}");
                }
                for (i, (&f, &p)) in freq.iter().zip(&probs).enumerate() {
                    let f = f as f64 / GRID as f64;
                    assert!((f - p).abs() <= 2.0 / GRID as f64, "{row:?} {s:?} token {i}: {f} vs {p}");
                    assert!(p > 0.0 || f == 0.0, "token {i} outside the kept set drawn");
                }
            }
        }
        // Greedy is argmax; a row without numbers is NO_TOKEN at any temperature.
        let greedy = RowSampling { temperature: 0.0, top_k: 0, top_p: 1.0 };
        assert_eq!(sample_row(&rows[7], &greedy, 0.9), 1);
        for t in [0.0, 1.0] {
            let s = RowSampling { temperature: t, top_k: 0, top_p: 1.0 };
            assert_eq!(sample_row(&[f32::NAN, f32::NEG_INFINITY], &s, 0.5), NO_TOKEN);
        }
    }

    /// The draw walks token ids upwards: u just above 0 takes the lowest kept id, u near 1 the
    /// highest, whatever their probabilities.
    #[test]
    fn the_draw_is_in_ascending_id_order() {
        let logits = [0.0f32, 5.0, 1.0, 4.0];
        let s = RowSampling { temperature: 1.0, top_k: 0, top_p: 1.0 };
        assert_eq!(sample_row(&logits, &s, 0.0), 0);
        assert_eq!(sample_row(&logits, &s, 0.999_999), 3);
        let s = RowSampling { temperature: 1.0, top_k: 2, top_p: 1.0 };
        assert_eq!(sample_row(&logits, &s, 0.0), 1);
        assert_eq!(sample_row(&logits, &s, 0.999_999), 3);
        let words = s.words(0.25);
        assert_eq!(RowSampling::from_words(words), (s, 0.25));
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
