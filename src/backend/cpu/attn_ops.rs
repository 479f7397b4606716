//! Inner loops of the CPU attention (`attention.rs`): the scores of a GQA group's queries against
//! a run of key rows, and the weighted sum of a run of value rows into the group's outputs.
//!
//! Each kernel has a plain build and an AVX2 build, picked at run time by [`kernels`], that
//! compute bit for bit the same values (checked by the unit test below): `weighted_sum` is one
//! source compiled twice (Rust never reassociates or contracts float arithmetic, so only the
//! vector width differs); the AVX2 scores are intrinsics doing exactly [`dot_lanes`]'s lane
//! products, sums and reduction tree. Layouts: `q`, `out` are `[group][head_dim]`; `k`, `v` are
//! `[n][head_dim]` (contiguous rows of one page of one head); scores / weights are
//! `[group][stride]`, row `j` of the run at column `j`.

/// `out[g * stride + j] = dot(q_g, k_j) * scale` for every query `g` and key row `j`.
pub type Scores = fn(q: &[f32], k: &[f32], hd: usize, scale: f32, out: &mut [f32], stride: usize);
/// `out_g += sum_j w[g * stride + j] * v_j`, in row order `j` for every output element.
pub type WeightedSum = fn(w: &[f32], stride: usize, v: &[f32], hd: usize, out: &mut [f32]);

/// The kernels for the running CPU.
#[derive(Clone, Copy)]
pub struct Kernels {
    pub scores: Scores,
    pub weighted_sum: WeightedSum,
    pub prefetch: fn(&[f32]),
}

/// Output columns one accumulator block of [`weighted_sum`] keeps in registers (8 AVX2 lanes x 8).
const BLOCK: usize = 64;

/// Dot product over 8 lanes (lane `i` sums elements `i mod 8` of the whole 8-chunks in order),
/// the lanes added as a tree, then the tail's products in order.
#[inline(always)]
fn dot_lanes(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let h = [acc[0] + acc[4], acc[1] + acc[5], acc[2] + acc[6], acc[3] + acc[7]];
    ((h[0] + h[2]) + (h[1] + h[3])) + tail
}

#[inline(always)]
fn scores(q: &[f32], k: &[f32], hd: usize, scale: f32, out: &mut [f32], stride: usize) {
    for (j, kr) in k.chunks_exact(hd).enumerate() {
        for (g, qg) in q.chunks_exact(hd).enumerate() {
            out[g * stride + j] = dot_lanes(qg, kr) * scale;
        }
    }
}

/// Per output row, blocks of [`BLOCK`] columns accumulate over all value rows in registers (the
/// rows, one page of one head, stay in L1 across the group); columns past the last whole block
/// go through memory.
#[inline(always)]
fn weighted_sum(w: &[f32], stride: usize, v: &[f32], hd: usize, out: &mut [f32]) {
    let n = v.len() / hd;
    for (g, o) in out.chunks_exact_mut(hd).enumerate() {
        let w = &w[g * stride..g * stride + n];
        let mut c0 = 0;
        while c0 + BLOCK <= hd {
            let mut acc: [f32; BLOCK] = o[c0..c0 + BLOCK].try_into().expect("a block");
            for (j, &wj) in w.iter().enumerate() {
                let vr = &v[j * hd + c0..j * hd + c0 + BLOCK];
                for i in 0..BLOCK {
                    acc[i] += wj * vr[i];
                }
            }
            o[c0..c0 + BLOCK].copy_from_slice(&acc);
            c0 += BLOCK;
        }
        for (j, &wj) in w.iter().enumerate() {
            o[c0..].iter_mut().zip(&v[j * hd + c0..(j + 1) * hd]).for_each(|(o, &x)| *o += wj * x);
        }
    }
}

fn scores_plain(q: &[f32], k: &[f32], hd: usize, scale: f32, out: &mut [f32], stride: usize) {
    scores(q, k, hd, scale, out, stride)
}

fn weighted_sum_plain(w: &[f32], stride: usize, v: &[f32], hd: usize, out: &mut [f32]) {
    weighted_sum(w, stride, v, hd, out)
}

/// [`scores`] on AVX2 registers: the same lanes, products, tree and tail as [`dot_lanes`] (so the
/// same bits), for two key rows against up to four queries at a time (each key load shared by the
/// queries, eight independent accumulator chains).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn scores_avx2(q: &[f32], k: &[f32], hd: usize, scale: f32, out: &mut [f32], stride: usize) {
    let group = q.len() / hd;
    let qr = |g: usize| &q[g.min(group - 1) * hd..(g.min(group - 1) + 1) * hd];
    for g0 in (0..group).step_by(4) {
        let o = &mut out[g0 * stride..];
        match group - g0 {
            1 => scores_block_avx2([qr(g0)], k, scale, o, stride),
            2 => scores_block_avx2([qr(g0), qr(g0 + 1)], k, scale, o, stride),
            3 => scores_block_avx2([qr(g0), qr(g0 + 1), qr(g0 + 2)], k, scale, o, stride),
            _ => scores_block_avx2([qr(g0), qr(g0 + 1), qr(g0 + 2), qr(g0 + 3)], k, scale, o, stride),
        }
    }
}

/// [`scores`] of `N` queries (rows `g` of `out`) over all key rows, two at a time (an odd last
/// row pairs with itself: computed twice, stored once).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn scores_block_avx2<const N: usize>(q: [&[f32]; N], k: &[f32], scale: f32, out: &mut [f32], stride: usize) {
    let hd = q[0].len();
    let n = k.len() / hd;
    let kr = |j: usize| &k[j.min(n - 1) * hd..(j.min(n - 1) + 1) * hd];
    for j in (0..n).step_by(2) {
        let d = dots_avx2(q, [kr(j), kr(j + 1)]);
        for (jj, row) in d.iter().enumerate().take(n - j) {
            for (g, &x) in row.iter().enumerate() {
                out[g * stride + j + jj] = x * scale;
            }
        }
    }
}

/// `[key][query]` dot products of two key rows with `N` query rows, each exactly [`dot_lanes`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn dots_avx2<const N: usize>(q: [&[f32]; N], k: [&[f32]; 2]) -> [[f32; N]; 2] {
    use std::arch::x86_64::*;
    let hd = k[0].len();
    assert!(k[1].len() == hd && q.iter().all(|r| r.len() == hd), "rows of one length");
    let n8 = hd / 8 * 8;
    let mut acc = [[_mm256_setzero_ps(); N]; 2];
    for c in (0..n8).step_by(8) {
        // SAFETY: c + 8 <= n8 <= hd, the length of every query and key row (asserted above).
        unsafe {
            let kv = [_mm256_loadu_ps(k[0].as_ptr().add(c)), _mm256_loadu_ps(k[1].as_ptr().add(c))];
            for (g, r) in q.iter().enumerate() {
                let qv = _mm256_loadu_ps(r.as_ptr().add(c));
                for (a, kv) in acc.iter_mut().zip(&kv) {
                    a[g] = _mm256_add_ps(a[g], _mm256_mul_ps(qv, *kv));
                }
            }
        }
    }
    let mut out = [[0f32; N]; 2];
    for ((o, a), kr) in out.iter_mut().zip(&acc).zip(&k) {
        for ((o, a), qr) in o.iter_mut().zip(a).zip(&q) {
            // The tree of dot_lanes: h = lo + hi lanes, then (h0 + h2) + (h1 + h3).
            let h = _mm_add_ps(_mm256_castps256_ps128(*a), _mm256_extractf128_ps::<1>(*a));
            let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
            let t = _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps::<1>(h, h)));
            let tail: f32 = qr[n8..].iter().zip(&kr[n8..]).map(|(x, y)| x * y).sum();
            *o = t + tail;
        }
    }
    out
}

/// Ask for every cache line of `x` ahead of its use (a span of rows is a few 4 KiB pages, and the
/// hardware prefetchers stop at each page's end). A hint only: nothing is read or written.
fn prefetch(x: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of the x86-64 baseline.
    unsafe {
        prefetch_sse(x)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse")]
fn prefetch_sse(x: &[f32]) {
    use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
    for line in x.chunks(16) {
        _mm_prefetch::<_MM_HINT_T0>(line.as_ptr() as *const i8);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn weighted_sum_avx2(w: &[f32], stride: usize, v: &[f32], hd: usize, out: &mut [f32]) {
    weighted_sum(w, stride, v, hd, out)
}

fn plain() -> Kernels {
    Kernels { scores: scores_plain, weighted_sum: weighted_sum_plain, prefetch }
}

pub fn kernels() -> Kernels {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY (each closure): the CPU has AVX2, checked just above.
        return Kernels {
            scores: |q, k, hd, scale, out, stride| unsafe { scores_avx2(q, k, hd, scale, out, stride) },
            weighted_sum: |w, stride, v, hd, out| unsafe { weighted_sum_avx2(w, stride, v, hd, out) },
            prefetch,
        };
    }
    plain()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The picked kernels equal the plain build bit for bit, and both agree with an f64 model, on
    /// seeded random inputs; head_dims with and without a tail past the 8-lane chunks and the
    /// 64-column blocks, groups 1 to 6, runs of 1 to 17 rows, a stride wider than the run.
    #[test]
    fn picked_kernels_equal_plain_and_f64() {
        let mut state = 0x2545_f491_u32;
        let mut rnd = || {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            (state as f32 / u32::MAX as f32) * 2.0 - 1.0
        };
        let (picked, plain) = (kernels(), plain());
        for hd in [8, 12, 64, 72, 128, 200] {
            for (group, n) in [(1, 1), (3, 17), (4, 2), (6, 9)] {
                let stride = n + 3;
                let q: Vec<f32> = (0..group * hd).map(|_| rnd()).collect();
                let k: Vec<f32> = (0..n * hd).map(|_| rnd()).collect();
                let w: Vec<f32> = (0..group * stride).map(|_| rnd()).collect();
                let o0: Vec<f32> = (0..group * hd).map(|_| rnd()).collect();
                let (mut sa, mut sb) = (vec![f32::NAN; group * stride], vec![f32::NAN; group * stride]);
                (picked.scores)(&q, &k, hd, 0.3, &mut sa, stride);
                (plain.scores)(&q, &k, hd, 0.3, &mut sb, stride);
                let (mut oa, mut ob) = (o0.clone(), o0.clone());
                (picked.weighted_sum)(&w, stride, &k, hd, &mut oa);
                (plain.weighted_sum)(&w, stride, &k, hd, &mut ob);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&sa), bits(&sb), "scores hd {hd} group {group} n {n}");
                assert_eq!(bits(&oa), bits(&ob), "weighted_sum hd {hd} group {group} n {n}");
                for g in 0..group {
                    for j in 0..n {
                        let d: f64 = (0..hd).map(|c| q[g * hd + c] as f64 * k[j * hd + c] as f64).sum();
                        let got = sa[g * stride + j] as f64;
                        assert!((got - 0.3 * d).abs() < 1e-5, "score {g} {j}: {got} vs {}", 0.3 * d);
                    }
                    for c in 0..hd {
                        let want = o0[g * hd + c] as f64
                            + (0..n).map(|j| w[g * stride + j] as f64 * k[j * hd + c] as f64).sum::<f64>();
                        assert!((oa[g * hd + c] as f64 - want).abs() < 1e-5, "out {g} {c}");
                    }
                }
            }
        }
    }
}
