//! `matmul` and `embed` over quantized weights (`DType::is_weight_quant`), reading the quantized
//! bytes: every weight row is dequantized by [`weight_quant::dequantize_rows`] (the definition of
//! the formats), so a quantized matmul equals the f32 matmul of the dequantized matrix up to
//! summation order.
//!
//! - Small m (decode, up to `ops::GEMV_MAX_ROWS` rows): rayon tasks over chunks of
//!   `ROW_CHUNK` weight rows; each row is dequantized into a `k`-float scratch that stays in L1
//!   and dotted with every x row by `ops::dot` right away (fused dequant-dot), so a decode step
//!   streams the quantized bytes once and never writes an f32 copy of the matrix to memory.
//!   out[r][c] is exactly `ops::dot(x[r], dequantized row c)` (+ bias) — what the f32 GEMV gives
//!   for the dequantized matrix, bit for bit. Q4_0, Q4_1 and Q8_0 rows (the default model's and
//!   Q8_0 files' types) take an AVX2/FMA/F16C kernel instead where the CPU has it: each block is
//!   dequantized in registers with the reference's arithmetic (the same f32 weights) and
//!   multiply-added into per-x-row accumulators (fused multiply-add, another summation order);
//!   at one x row (a decode step) the block's codes are multiplied first and its scale (and
//!   Q4_1's min times the block's x sum) applied once, the same products regrouped, with the
//!   row's bytes prefetched ahead (`row1`).
//! - Larger m (prefill): tiles of `TILE` rows are dequantized and multiplied by the f32 GEMM.

use super::{err, ops};
use crate::backend::reference::weight_quant::{self, QUANT_WEIGHT_DTYPES};
use crate::backend::{DType, EmbedParams, MatmulParams};
use crate::error::Result;
use rayon::prelude::*;

/// Weight rows dequantized per tile (bounds the f32 scratch at TILE * k floats).
const TILE: usize = 256;
/// Weight rows per rayon task of the small-m path.
const ROW_CHUNK: usize = 16;

/// Every weight type the CPU computes with.
pub fn weight_dtypes() -> Vec<DType> {
    let mut v = vec![DType::F32];
    v.extend(QUANT_WEIGHT_DTYPES);
    v
}

fn check(dt: DType, bytes: &[u8], n: usize, k: usize, what: &str) -> Result<()> {
    if !weight_dtypes().contains(&dt) {
        return Err(err(format!("{what}: {dt:?} weights are not supported on the CPU backend")));
    }
    match dt.weight_bytes(n, k) {
        Some(need) if need == bytes.len() => Ok(()),
        Some(need) => Err(err(format!("{what}: {} bytes, a [{n}][{k}] {dt:?} matrix has {need}", bytes.len()))),
        None => Err(err(format!("{what}: k = {k} is not a whole number of {dt:?} blocks"))),
    }
}

fn dequant(dt: DType, bytes: &[u8], n: usize, k: usize, r0: usize, out: &mut [f32]) -> Result<()> {
    let rows = out.len() / k.max(1);
    out.par_chunks_mut(k.max(1))
        .enumerate()
        .take(rows)
        .try_for_each(|(i, o)| weight_quant::dequantize_rows(dt, bytes, n, k, r0 + i, o).map_err(err))
}

/// out (p's strided layout) = x `[m][k]` . w^T for a quantized `[n][k]` w, + bias.
pub fn matmul(
    p: &MatmulParams,
    x: &[f32],
    dt: DType,
    bytes: &[u8],
    bias: Option<&[f32]>,
    out: &mut [f32],
) -> Result<()> {
    let (m, n, k) = (p.m as usize, p.n as usize, p.k as usize);
    check(dt, bytes, n, k, "matmul w")?;
    let (ldo, off) = (p.ldo as usize, p.out_off as usize);
    if m <= ops::GEMV_MAX_ROWS {
        return gemv(p, x, dt, bytes, bias, out);
    }
    let mut tile = vec![0f32; TILE.min(n) * k];
    let mut part = vec![0f32; m * TILE.min(n)];
    for c0 in (0..n).step_by(TILE) {
        let cols = TILE.min(n - c0);
        let (w, o) = (&mut tile[..cols * k], &mut part[..m * cols]);
        dequant(dt, bytes, n, k, c0, w)?;
        ops::matmul(x, w, bias.map(|b| &b[c0..c0 + cols]), o, m, cols, k);
        for (r, row) in o.chunks_exact(cols).enumerate() {
            out[off + r * ldo + c0..off + r * ldo + c0 + cols].copy_from_slice(row);
        }
    }
    Ok(())
}

/// The small-m path (see the module header): `[n][m]` results per row chunk, then scattered to
/// p's strided layout.
fn gemv(p: &MatmulParams, x: &[f32], dt: DType, bytes: &[u8], bias: Option<&[f32]>, out: &mut [f32]) -> Result<()> {
    let (m, n, k) = (p.m as usize, p.n as usize, p.k as usize);
    let (ldo, off) = (p.ldo as usize, p.out_off as usize);
    let mut res = vec![0f32; n * m];
    let fused = if m > 0 { simd::fused_row_fn(dt) } else { None };
    res.par_chunks_mut(ROW_CHUNK * m.max(1)).enumerate().try_for_each(|(chunk, res)| {
        let mut w = vec![0f32; k];
        let rb = bytes.len() / n.max(1);
        for (i, r) in res.chunks_exact_mut(m.max(1)).enumerate() {
            let c = chunk * ROW_CHUNK + i;
            if let Some(f) = fused {
                f(&bytes[c * rb..(c + 1) * rb], x, k, r);
                continue;
            }
            weight_quant::dequantize_rows(dt, bytes, n, k, c, &mut w).map_err(err)?;
            for (o, xr) in r.iter_mut().zip(x.chunks_exact(k.max(1))) {
                *o = ops::dot(xr, &w);
            }
        }
        Ok::<(), crate::error::Error>(())
    })?;
    for r in 0..m {
        let row = &mut out[off + r * ldo..off + r * ldo + n];
        for (c, o) in row.iter_mut().enumerate() {
            *o = match bias {
                Some(b) => res[c * m + r] + b[c],
                None => res[c * m + r],
            };
        }
    }
    Ok(())
}

/// out[i] = dequantized row ids[i] of a quantized `[vocab][dim]` table.
pub fn embed(dt: DType, bytes: &[u8], p: &EmbedParams, ids: &[u32], out: &mut [f32]) -> Result<()> {
    let (vocab, d) = (p.vocab as usize, p.dim as usize);
    check(dt, bytes, vocab, d, "embed table")?;
    for (row, &id) in out.chunks_exact_mut(d.max(1)).zip(ids) {
        // Ids outside the table's slice (another rank's rows) give zeros.
        match id.wrapping_sub(p.first) as usize {
            r if r < vocab => weight_quant::dequantize_rows(dt, bytes, vocab, d, r, row).map_err(err)?,
            _ => row.fill(0.0),
        }
    }
    Ok(())
}

/// Fused dequant-dot kernels over one quantized weight row (see the module header).
mod simd {
    use crate::backend::{DType, GgmlType};

    /// out[r] = x row r `[k]` . the dequantized weight row `row` (one row of blocks), r < out.len().
    pub type FusedRow = fn(&[u8], &[f32], usize, &mut [f32]);

    /// The fused kernel for `dt` on this CPU, if there is one.
    pub fn fused_row_fn(dt: DType) -> Option<FusedRow> {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c")
        {
            // SAFETY (each closure): the CPU has AVX2, FMA and F16C, checked just above.
            return match dt {
                DType::Ggml(GgmlType::Q4_0) => Some(|w, x, k, o| unsafe { x86::rows::<0>(w, x, k, o) }),
                DType::Ggml(GgmlType::Q4_1) => Some(|w, x, k, o| unsafe { x86::rows::<1>(w, x, k, o) }),
                DType::Ggml(GgmlType::Q8_0) => Some(|w, x, k, o| unsafe { x86::rows::<2>(w, x, k, o) }),
                _ => None,
            };
        }
        let _ = dt;
        None
    }

    #[cfg(target_arch = "x86_64")]
    mod x86 {
        use std::arch::x86_64::*;

        /// Rows of x handled at once (the GEMV's largest m).
        const MAX_M: usize = crate::backend::cpu::ops::GEMV_MAX_ROWS;
        /// How far ahead of the block being multiplied its row's bytes are prefetched.
        const PREFETCH_BYTES: usize = 4096;

        /// The f16 at `p` as f32 (exact, as `half` converts it).
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn f16_at(p: *const u8) -> __m256 {
            // SAFETY: the caller's block holds two bytes at p.
            let h = unsafe { std::ptr::read_unaligned(p as *const u16) };
            _mm256_set1_ps(_mm_cvtss_f32(_mm_cvtph_ps(_mm_set1_epi16(h as i16))))
        }

        /// The 32 weights of one block as four vectors of 8, with the reference's arithmetic:
        /// Q4_0 `(q - 8) * d`, Q4_1 `q * d + m`, Q8_0 `q * d` (`ggml_quant`).
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn block<const T: u8>(b: *const u8) -> [__m256; 4] {
            // SAFETY: the caller passes a whole block of the type (18, 20 or 34 bytes).
            unsafe {
                let d = f16_at(b);
                codes::<T>(b).map(|c| match T {
                    1 => _mm256_add_ps(_mm256_mul_ps(c, d), f16_at(b.add(2))),
                    _ => _mm256_mul_ps(c, d),
                })
            }
        }

        /// out[r] = x[r] . row for r < out.len() (at most MAX_M), type `T` (0 Q4_0, 1 Q4_1, 2 Q8_0).
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn rows<const T: u8>(row: &[u8], x: &[f32], k: usize, out: &mut [f32]) {
            let bsize = [18, 20, 34][T as usize];
            let (m, nb) = (out.len().min(MAX_M), k / 32);
            assert!(row.len() == nb * bsize && k.is_multiple_of(32) && x.len() >= m * k, "whole blocks, m rows of x");
            if m == 1 {
                // SAFETY: as asserted; the CPU features are this function's.
                out[0] = unsafe { row1::<T>(row, x, nb, bsize) };
                return;
            }
            let mut acc = [[_mm256_setzero_ps(); 2]; MAX_M];
            for j in 0..nb {
                // SAFETY: block j lies in `row` and x[r*k + 32j .. + 32] in x (asserted above).
                unsafe {
                    let w = block::<T>(row.as_ptr().add(j * bsize));
                    for (r, a) in acc.iter_mut().enumerate().take(m) {
                        let xp = x.as_ptr().add(r * k + 32 * j);
                        a[0] = _mm256_fmadd_ps(_mm256_loadu_ps(xp), w[0], a[0]);
                        a[1] = _mm256_fmadd_ps(_mm256_loadu_ps(xp.add(8)), w[1], a[1]);
                        a[0] = _mm256_fmadd_ps(_mm256_loadu_ps(xp.add(16)), w[2], a[0]);
                        a[1] = _mm256_fmadd_ps(_mm256_loadu_ps(xp.add(24)), w[3], a[1]);
                    }
                }
            }
            for (o, a) in out.iter_mut().zip(&acc) {
                // SAFETY: plain vector arithmetic.
                *o = unsafe { hsum(_mm256_add_ps(a[0], a[1])) };
            }
        }

        /// The m == 1 case of [`rows`] (a decode step). Per block the codes as f32 times x (two
        /// FMA chains), then the block's scale once, and Q4_1's min times the block's x sum:
        /// d sum(x q) + m sum(x), the reference's products regrouped (a different rounding of the
        /// same sum, like the other summation orders here). The row's bytes 4 KiB ahead are
        /// prefetched into L1: the hardware prefetcher alone left the loop waiting on its weight
        /// loads. A SmolLM2-shaped Q4_1 step on the 2-core development machine: 28.5 ms with the
        /// exact weights and no prefetch, 18.1 with the prefetch, 13.7-14.1 regrouped
        /// (docs/benchmarks.md).
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn row1<const T: u8>(row: &[u8], x: &[f32], nb: usize, bsize: usize) -> f32 {
            let (mut acc, mut accm) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            for j in 0..nb {
                // SAFETY: block j lies in `row` and x[32j .. + 32] in x (the caller asserted both);
                // a prefetch never faults, whatever the address.
                unsafe {
                    let b = row.as_ptr().add(j * bsize);
                    _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(PREFETCH_BYTES) as *const i8);
                    let q = codes::<T>(b);
                    let xp = x.as_ptr().add(32 * j);
                    let xv = [0, 8, 16, 24].map(|o| _mm256_loadu_ps(xp.add(o)));
                    let s01 = _mm256_fmadd_ps(xv[1], q[1], _mm256_mul_ps(xv[0], q[0]));
                    let s23 = _mm256_fmadd_ps(xv[3], q[3], _mm256_mul_ps(xv[2], q[2]));
                    acc = _mm256_fmadd_ps(_mm256_add_ps(s01, s23), f16_at(b), acc);
                    if T == 1 {
                        let xs = _mm256_add_ps(_mm256_add_ps(xv[0], xv[1]), _mm256_add_ps(xv[2], xv[3]));
                        accm = _mm256_fmadd_ps(xs, f16_at(b.add(2)), accm);
                    }
                }
            }
            // SAFETY: plain vector arithmetic.
            unsafe { hsum(_mm256_add_ps(acc, accm)) }
        }

        /// The 32 codes of one block as four vectors of 8 f32: Q4_0 `q - 8`, Q4_1 `q`, Q8_0 `q`
        /// (the integers of [`block`], before the scale).
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn codes<const T: u8>(b: *const u8) -> [__m256; 4] {
            // SAFETY: the caller passes a whole block of the type (18, 20 or 34 bytes).
            unsafe {
                let ints: [__m128i; 4] = if T == 2 {
                    let lo = _mm_loadu_si128(b.add(2) as *const __m128i);
                    let hi = _mm_loadu_si128(b.add(18) as *const __m128i);
                    [lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)]
                } else {
                    let q = _mm_loadu_si128(b.add(if T == 1 { 4 } else { 2 }) as *const __m128i);
                    let mask = _mm_set1_epi8(0x0F);
                    let lo = _mm_and_si128(q, mask);
                    let hi = _mm_and_si128(_mm_srli_epi16(q, 4), mask);
                    [lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)]
                };
                ints.map(|v| {
                    let i = if T == 2 { _mm256_cvtepi8_epi32(v) } else { _mm256_cvtepu8_epi32(v) };
                    let i = if T == 0 { _mm256_sub_epi32(i, _mm256_set1_epi32(8)) } else { i };
                    _mm256_cvtepi32_ps(i)
                })
            }
        }

        /// The sum of a vector's 8 lanes (in lane order).
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn hsum(v: __m256) -> f32 {
            let mut lanes = [0f32; 8];
            // SAFETY: `lanes` holds the 8 floats the store writes.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), v) };
            lanes.iter().sum()
        }
    }
}
