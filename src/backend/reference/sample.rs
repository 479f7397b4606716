//! The reference of the `sample` and `argmax` ops: greedy, temperature, top-k and top-p
//! (nucleus) over one row of logits. The CPU backend runs [`sample_row`]; the device kernels,
//! `shaders/sample.wgsl` and `cuda/sample.cu`, mirror it; the host sampler
//! (`crate::sampling::Sampler`, engine level) draws `u` and calls it.
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
//!   [`NO_TOKEN`], never a panic. The op treats `!(T > 0)` as greedy and `!(top_p < 1)` as off.
//! * With `+inf` logits only the `+inf` tokens have weight (1 each).
//! * Weights accumulate in `f64`. Cost for a 150k vocabulary: one linear pass plus
//!   `select_nth_unstable` for top-k; the nucleus is grown in sorted chunks, so only the kept
//!   candidates (plus at most one chunk) are ever sorted.

use std::cmp::Ordering;

/// Slack on the nucleus mass test (see the module docs).
pub const TOP_P_SLACK: f64 = 1e-6;
/// First chunk of candidates sorted when growing the nucleus.
pub const NUCLEUS_CHUNK: usize = 64;
/// What [`sample_row`] (and the `sample` op) returns for a row with no logit above `-inf`.
pub const NO_TOKEN: u32 = u32::MAX;

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

/// Largest non-NaN logit, `None` when there is none above `-inf`.
pub fn max_logit(logits: &[f32]) -> Option<f32> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};

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
}
