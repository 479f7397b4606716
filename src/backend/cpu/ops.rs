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

/// out[m][n] = x[m][k] . w[n][k]^T + bias[n].
pub fn matmul(x: &[f32], w: &[f32], bias: Option<&[f32]>, out: &mut [f32], m: usize, n: usize, k: usize) {
    if m < 4 {
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

/// Small-m matmul: parallel over blocks of output columns, each weight row read once.
fn gemv(x: &[f32], w: &[f32], out: &mut [f32], m: usize, n: usize, k: usize) {
    const COLS: usize = 64;
    let mut tmp = vec![0f32; m * n];
    tmp.par_chunks_mut(COLS * m).enumerate().for_each(|(blk, chunk)| {
        // chunk holds [cols_in_block][m] results, column-major within the block.
        for (j, col) in chunk.chunks_exact_mut(m).enumerate() {
            let row = &w[(blk * COLS + j) * k..(blk * COLS + j + 1) * k];
            for (i, o) in col.iter_mut().enumerate() {
                *o = dot(&x[i * k..(i + 1) * k], row);
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
