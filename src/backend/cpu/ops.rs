//! Dense CPU kernels: matmul and rmsnorm. Layouts are row-major; `w` is `[n][k]` (the Hugging
//! Face `Linear` layout), so out = x . w^T.

use rayon::prelude::*;

/// Dot product with 8 independent accumulators so the compiler vectorises it.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// Rows up to which `matmul` takes the small-m path (`gemv`; before: below 4 rows). Measured on
/// the CPU backend with SmolLM2-135M decode steps (docs/benchmarks.md, "CPU batched decode"): at
/// 8 rows the `gemm` crate spends more time packing the weight matrix than multiplying (a decode
/// batch reads every weight once for only a few rows).
pub const GEMV_MAX_ROWS: usize = 8;

/// out[m][n] = x[m][k] . w[n][k]^T + bias[n].
pub fn matmul(x: &[f32], w: &[f32], bias: Option<&[f32]>, out: &mut [f32], m: usize, n: usize, k: usize) {
    if m <= GEMV_MAX_ROWS {
        gemv(x, w, out, m, n, k);
    } else {
        let threads = rayon::current_num_threads();
        // SAFETY: the pointers and strides describe exactly the slices checked by the caller:
        // x is m*k (row stride k), w is n*k read as its transpose (k x n, column stride k), out is
        // m*n (row stride n); `read_dst = false` so out's prior contents are never read.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                out.as_mut_ptr(),
                1,
                n as isize,
                false,
                x.as_ptr(),
                1,
                k as isize,
                w.as_ptr(),
                k as isize,
                1,
                0.0,
                1.0,
                false,
                false,
                false,
                gemm::Parallelism::Rayon(threads),
            );
        }
    }
    if let Some(b) = bias {
        out.chunks_exact_mut(n).for_each(|row| row.iter_mut().zip(b).for_each(|(o, b)| *o += b));
    }
}

/// The dot products of two `x` rows with four weight rows, `[x row][weight row]`, each exactly
/// what [`dot`] computes (the same 8 lanes, multiply then add, the same final sum), so a result
/// never depends on which rows share the call or on the instruction set.
type Dot2x4 = fn([&[f32]; 2], [&[f32]; 4]) -> [[f32; 4]; 2];

fn dot2x4_plain(x: [&[f32]; 2], w: [&[f32]; 4]) -> [[f32; 4]; 2] {
    x.map(|x| w.map(|r| dot(x, r)))
}

/// [`dot`]'s arithmetic on AVX2 registers for 2 x 4 rows at once: eight independent accumulator
/// chains instead of one, each x load shared by four weight rows and each weight load by two x
/// rows (~5x `dot` at 8 rows).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn dot2x4_avx2(x: [&[f32]; 2], w: [&[f32]; 4]) -> [[f32; 4]; 2] {
    use std::arch::x86_64::*;
    let k = x[0].len();
    assert!(x[1].len() == k && w.iter().all(|r| r.len() == k), "rows of one length");
    let n8 = k / 8 * 8;
    let mut acc = [[_mm256_setzero_ps(); 4]; 2];
    for c in (0..n8).step_by(8) {
        // SAFETY: c + 8 <= n8 <= k, the length of every x and weight row (asserted above).
        unsafe {
            let xv = [_mm256_loadu_ps(x[0].as_ptr().add(c)), _mm256_loadu_ps(x[1].as_ptr().add(c))];
            for (j, r) in w.iter().enumerate() {
                let wv = _mm256_loadu_ps(r.as_ptr().add(c));
                for (a, xv) in acc.iter_mut().zip(&xv) {
                    a[j] = _mm256_add_ps(a[j], _mm256_mul_ps(*xv, wv));
                }
            }
        }
    }
    let mut out = [[0f32; 4]; 2];
    for ((o, a), x) in out.iter_mut().zip(&acc).zip(&x) {
        for ((o, a), r) in o.iter_mut().zip(a).zip(&w) {
            let mut lanes = [0f32; 8];
            // SAFETY: `lanes` holds the 8 floats the store writes.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), *a) };
            let tail: f32 = x[n8..].iter().zip(&r[n8..]).map(|(a, b)| a * b).sum();
            *o = lanes.iter().sum::<f32>() + tail;
        }
    }
    out
}

fn pick_dot2x4() -> Dot2x4 {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        return |x, w| unsafe { dot2x4_avx2(x, w) };
    }
    dot2x4_plain
}

/// Small-m matmul: parallel over blocks of output columns; within a block four weight rows at a
/// time meet the x rows two by two, so each weight row is read from memory once (x stays in
/// cache). out[i][j] is exactly `dot(x[i], w[j])` for every m.
fn gemv(x: &[f32], w: &[f32], out: &mut [f32], m: usize, n: usize, k: usize) {
    const COLS: usize = 64;
    let dot2x4 = pick_dot2x4();
    let mut tmp = vec![0f32; m * n];
    tmp.par_chunks_mut(COLS * m).enumerate().for_each(|(blk, chunk)| {
        // chunk holds [cols_in_block][m] results, column-major within the block.
        let cols = chunk.len() / m;
        let row = |j: usize| &w[(blk * COLS + j) * k..(blk * COLS + j + 1) * k];
        let xr = |i: usize| &x[i * k..(i + 1) * k];
        let mut j = 0;
        while j + 4 <= cols {
            let rows = [row(j), row(j + 1), row(j + 2), row(j + 3)];
            for i in (0..m).step_by(2) {
                // An odd last row pairs with itself (computed twice, stored once).
                let d = dot2x4([xr(i), xr((i + 1).min(m - 1))], rows);
                for (ii, d) in d.iter().enumerate().take(m - i) {
                    (0..4).for_each(|r| chunk[(j + r) * m + i + ii] = d[r]);
                }
            }
            j += 4;
        }
        for j in j..cols {
            for i in 0..m {
                chunk[j * m + i] = dot(xr(i), row(j));
            }
        }
    });
    for (j, col) in tmp.chunks_exact(m).enumerate() {
        for (i, &v) in col.iter().enumerate() {
            out[i * n + j] = v;
        }
    }
}

/// out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, sum of squares in f64 for stability.
pub fn rmsnorm(x: &[f32], w: &[f32], out: &mut [f32], dim: usize, eps: f32) {
    for (o, row) in out.chunks_exact_mut(dim).zip(x.chunks_exact(dim)) {
        let ss: f64 = row.iter().map(|&v| (v as f64) * (v as f64)).sum();
        let inv = 1.0 / ((ss / dim as f64) as f32 + eps).sqrt();
        for ((o, &v), &w) in o.iter_mut().zip(row).zip(w) {
            *o = v * inv * w;
        }
    }
}

/// c[m][n] = a[m][k] . b[n][k]^T, single-threaded (callers parallelise over tiles).
pub fn gemm_nt(a: &[f32], b: &[f32], c: &mut [f32], m: usize, n: usize, k: usize) {
    // SAFETY: a is m*k (row stride k), b is n*k read transposed (column stride k), c is m*n
    // (row stride n); the caller passes slices of exactly those sizes, checked below.
    assert!(a.len() >= m * k && b.len() >= n * k && c.len() >= m * n);
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            1,
            k as isize,
            b.as_ptr(),
            k as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// c[m][n] = a[m][k] . b[k][n], single-threaded.
pub fn gemm_nn(a: &[f32], b: &[f32], c: &mut [f32], m: usize, n: usize, k: usize) {
    assert!(a.len() >= m * k && b.len() >= k * n && c.len() >= m * n);
    // SAFETY: as gemm_nt, with b row-major [k][n] (row stride n).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            1,
            k as isize,
            b.as_ptr(),
            1,
            n as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// gemv's rows are exactly `dot` (so independent of m and of the four-row grouping), and agree
    /// with the `gemm` crate's path to rounding, on seeded random inputs with a k that leaves a
    /// tail and an n that leaves a remainder block.
    #[test]
    fn gemv_rows_are_dot_exactly_for_every_m() {
        let (n, k) = (70, 37);
        let mut state = 0x9e37_79b9_u32;
        let mut rnd = || {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            (state as f32 / u32::MAX as f32) * 2.0 - 1.0
        };
        let w: Vec<f32> = (0..n * k).map(|_| rnd()).collect();
        let x: Vec<f32> = (0..24 * k).map(|_| rnd()).collect();
        for m in [1, 3, 4, 8, 16, 24] {
            let mut out = vec![f32::NAN; m * n];
            gemv(&x[..m * k], &w, &mut out, m, n, k);
            for i in 0..m {
                for j in 0..n {
                    let want = dot(&x[i * k..(i + 1) * k], &w[j * k..(j + 1) * k]);
                    assert_eq!(out[i * n + j].to_bits(), want.to_bits(), "m {m} row {i} col {j}");
                }
            }
            let rows = [&w[..k], &w[k..2 * k], &w[2 * k..3 * k], &w[3 * k..4 * k]];
            let xs = [&x[..k], &x[k..2 * k]];
            let (a, b) = (pick_dot2x4()(xs, rows), dot2x4_plain(xs, rows));
            assert_eq!(a.map(|r| r.map(f32::to_bits)), b.map(|r| r.map(f32::to_bits)), "AVX2 and plain kernels agree");
        }
        let m = 24;
        let mut via_gemm = vec![f32::NAN; m * n];
        matmul(&x, &w, None, &mut via_gemm, m, n, k);
        let mut via_gemv = vec![f32::NAN; m * n];
        gemv(&x, &w, &mut via_gemv, m, n, k);
        for (a, b) in via_gemm.iter().zip(&via_gemv) {
            assert!((a - b).abs() < 1e-4, "{a} vs {b}");
        }
    }
}
