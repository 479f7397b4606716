//! Quantized weight matrices: what a `[n][k]` weight of a quantized [`DType`] holds, row by row.
//! The CPU backend computes with these functions; the GPU kernels are held to them.
//!
//! - `DType::Ggml(t)`: GGUF bytes as they are; row `r` is bytes `r * row_bytes..` of
//!   `k / block_size` whole blocks, dequantized by [`ggml_quant`](super::ggml_quant).
//! - `DType::I8Row` / `DType::F8Row` (made at load, `--quantize int8|fp8`): `[n][k]` code bytes,
//!   then `[n]` f32 scales (little-endian). Each row is quantized exactly as an 8-bit KV row is
//!   ([`kv_quant::quantize_row`](super::kv_quant::quantize_row): int8 symmetric with scale
//!   amax/127, e4m3 with a power-of-two scale), and w = code * scale.

use super::{ggml_quant, kv_quant};
use crate::backend::DType;

/// The KV dtype whose row quantization a row-scaled weight type uses.
fn row_kv_dtype(dtype: DType) -> Option<DType> {
    match dtype {
        DType::I8Row => Some(DType::I8),
        DType::F8Row => Some(DType::F8E4M3),
        _ => None,
    }
}

/// Bytes of one row of `k` weights (the row-scaled types: codes only, the scales come after all rows).
pub fn row_bytes(dtype: DType, k: usize) -> Option<usize> {
    match dtype {
        DType::Ggml(t) => t.bytes_for(k).ok(),
        DType::I8Row | DType::F8Row => Some(k),
        DType::F32 | DType::F16 | DType::BF16 => Some(k * dtype.size()),
        _ => None,
    }
}

/// Quantizes an f32 `[n][k]` matrix to a row-scaled type (`I8Row` or `F8Row`).
pub fn quantize_rows(dtype: DType, w: &[f32], n: usize, k: usize) -> Option<Vec<u8>> {
    let kvd = row_kv_dtype(dtype)?;
    if w.len() != n * k {
        return None;
    }
    let mut out = vec![0u8; n * k + 4 * n];
    let (codes, scales) = out.split_at_mut(n * k);
    for (r, (row, c)) in w.chunks_exact(k.max(1)).zip(codes.chunks_exact_mut(k.max(1))).enumerate().take(n) {
        let s = kv_quant::quantize_row(kvd, row, c);
        scales[4 * r..4 * r + 4].copy_from_slice(&s.to_le_bytes());
    }
    Some(out)
}

/// Dequantizes rows `r0 .. r0 + out.len() / k` of the `[n][k]` weight `bytes` of `dtype` into
/// `out`. Errors (as text) when the lengths do not describe such a matrix.
pub fn dequantize_rows(
    dtype: DType,
    bytes: &[u8],
    n: usize,
    k: usize,
    r0: usize,
    out: &mut [f32],
) -> Result<(), String> {
    let total =
        dtype.weight_bytes(n, k).ok_or_else(|| format!("{dtype:?}: k = {k} is not a whole number of blocks"))?;
    if bytes.len() != total {
        return Err(format!("{dtype:?} [{n}][{k}] weight: {} bytes, expected {total}", bytes.len()));
    }
    let rows = out.len().checked_div(k).unwrap_or(0);
    if out.len() != rows * k || r0 + rows > n {
        return Err(format!("rows {r0}..{} of a {n}-row weight", r0 + rows));
    }
    let rb = row_bytes(dtype, k).ok_or_else(|| format!("{dtype:?} is not a weight type"))?;
    for (i, o) in out.chunks_exact_mut(k.max(1)).enumerate().take(rows) {
        let r = r0 + i;
        let row = &bytes[r * rb..(r + 1) * rb];
        match dtype {
            DType::Ggml(t) => ggml_quant::dequantize(t, row, o).map_err(|e| e.to_string())?,
            DType::I8Row | DType::F8Row => {
                let at = n * k + 4 * r;
                let scale = f32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
                kv_quant::dequantize_row(row_kv_dtype(dtype).unwrap(), row, scale, o);
            }
            DType::F32 => {
                o.iter_mut().zip(row.chunks_exact(4)).for_each(|(y, b)| *y = f32::from_le_bytes(b.try_into().unwrap()))
            }
            DType::F16 => o
                .iter_mut()
                .zip(row.chunks_exact(2))
                .for_each(|(y, b)| *y = half::f16::from_le_bytes([b[0], b[1]]).to_f32()),
            DType::BF16 => o
                .iter_mut()
                .zip(row.chunks_exact(2))
                .for_each(|(y, b)| *y = half::bf16::from_le_bytes([b[0], b[1]]).to_f32()),
            _ => unreachable!("row_bytes accepted only weight types"),
        }
    }
    Ok(())
}

/// The GGML block types every backend's quantized kernels must support (what Q4_K_M, Q5_K_M,
/// Q8_0 and the default model's files contain).
pub const GGML_WEIGHT_TYPES: [ggml_quant::GgmlType; 8] = {
    use ggml_quant::GgmlType::*;
    [Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K]
};

/// Every quantized weight dtype a backend's kernels must support, in the order the kernel entry
/// tables follow: the [`GGML_WEIGHT_TYPES`] blocks, then the row-scaled int8 and fp8.
pub const QUANT_WEIGHT_DTYPES: [DType; 10] = {
    let mut out = [DType::F8Row; 10];
    let mut i = 0;
    while i < GGML_WEIGHT_TYPES.len() {
        out[i] = DType::Ggml(GGML_WEIGHT_TYPES[i]);
        i += 1;
    }
    out[8] = DType::I8Row;
    out
};

/// Where a GGML block keeps its f16 scale (`d`) and, for the affine types, its f16 offset (`m` /
/// `dmin`), a `d` that keeps |w| near 0.1 for random codes, and the offset's range (+-).
fn scale_fields(t: ggml_quant::GgmlType) -> Option<(usize, Option<usize>, f32, f32)> {
    use ggml_quant::GgmlType::*;
    Some(match t {
        Q4_0 => (0, None, 0.0125, 0.0),
        Q4_1 => (0, Some(2), 0.0125, 0.1),
        Q5_0 => (0, None, 0.006, 0.0),
        Q5_1 => (0, Some(2), 0.006, 0.1),
        Q8_0 => (0, None, 0.001, 0.0),
        // K-quants: 6-bit sub-block scales and mins (up to 63) multiply d and dmin.
        Q4_K => (0, Some(2), 1e-4, 1e-3),
        Q5_K => (0, Some(2), 5e-5, 1e-3),
        Q6_K => (208, None, 2.5e-5, 0.0),
        _ => return None,
    })
}

/// A random `[n][k]` weight of `dtype` (benchmarks' synthetic weights, tests' inputs): GGML blocks
/// with random code bytes and f16 scales drawn around a size that keeps |w| near 0.1; row-scaled
/// types get random codes and row scales of that size; float types are not made here.
/// Deterministic in `seed`. None if k is not a whole number of blocks.
pub fn random_weights(dtype: DType, n: usize, k: usize, seed: u64) -> Option<Vec<u8>> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let unit = |r: u64| (r >> 40) as f32 / (1u64 << 24) as f32;
    match dtype {
        DType::I8Row | DType::F8Row => {
            // Random codes and row scales directly (quantizing f32 values row by row takes
            // minutes for an 8B-parameter synthetic model): |w| up to ~0.15-0.2.
            let fp8 = dtype == DType::F8Row;
            let mut out = vec![0u8; dtype.weight_bytes(n, k)?];
            let (codes, scales) = out.split_at_mut(n * k);
            for chunk in codes.chunks_mut(8) {
                let r = next().to_le_bytes();
                chunk.copy_from_slice(&r[..chunk.len()]);
            }
            for c in codes.iter_mut() {
                // No NaN e4m3 codes (0x7f, 0xff); no -128 int8 code (the quantizer never makes one).
                if fp8 && *c & 0x7f == 0x7f {
                    *c ^= 1;
                } else if !fp8 && *c == 0x80 {
                    *c = 0;
                }
            }
            let top = if fp8 { 448.0 } else { 127.0 };
            for s in scales.chunks_exact_mut(4) {
                s.copy_from_slice(&(0.15 / top * (0.5 + unit(next()))).to_le_bytes());
            }
            Some(out)
        }
        DType::Ggml(t) => {
            let (d_at, m_at, d, m_range) = scale_fields(t)?;
            let mut out = vec![0u8; dtype.weight_bytes(n, k)?];
            for chunk in out.chunks_mut(8) {
                let r = next().to_le_bytes();
                chunk.copy_from_slice(&r[..chunk.len()]);
            }
            for b in out.chunks_exact_mut(t.type_size()) {
                let dv = half::f16::from_f32(d * (0.5 + unit(next())));
                b[d_at..d_at + 2].copy_from_slice(&dv.to_le_bytes());
                if let Some(m_at) = m_at {
                    let mv = half::f16::from_f32((unit(next()) - 0.5) * 2.0 * m_range);
                    b[m_at..m_at + 2].copy_from_slice(&mv.to_le_bytes());
                }
            }
            Some(out)
        }
        _ => None,
    }
}

/// x as the integer-dot GEMVs multiply it (`Caps::matmul_x8_max_m`): each row of `k` elements in
/// blocks of 32 (the last one shorter when k % 32 != 0), d = max|x| / 127 per block, two int8
/// digits per element, hi = round(x / d) and lo = round((x - d hi) / (d / 254)) clamped to
/// +-127, values d (hi + lo / 254) (within max|x| / 64516 of x). Snapping x to this grid first
/// makes a GPU's integer dot equal to the f32 reference's product up to summation order.
pub fn x8_blocks(x: &[f32], k: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(k.max(1)) {
        for b in row.chunks(32) {
            let (d, id) = x8_scale(b);
            out.extend(b.iter().map(|&v| {
                let (hi, lo) = x8_digits(v, d, id, f32::round);
                d * (lo / 254.0 + hi)
            }));
        }
    }
    out
}

/// A block's scale d = max|x| / 127 and id = 127 / max|x| (both 0 for an all-zero block).
fn x8_scale(block: &[f32]) -> (f32, f32) {
    let amax = block.iter().fold(0f32, |a, v| a.max(v.abs()));
    if amax > 0.0 { (amax / 127.0, 127.0 / amax) } else { (0.0, 0.0) }
}

/// Element v's two digits (hi, lo) in a block of scale d, id ([`x8_scale`]), rounded by `round`:
/// hi = round(v id), lo = round((v - hi d) id 254) clamped to +-127.
fn x8_digits(v: f32, d: f32, id: f32, round: fn(f32) -> f32) -> (f32, f32) {
    let hi = round(v * id);
    (hi, round((v - hi * d) * id * 254.0).clamp(-127.0, 127.0))
}

/// One row x `[k]` as a [`DType::X8`] buffer's bytes (crate::backend::x8_bytes(k)): the digits
/// of [`x8_blocks`] rounded half to even (CUDA's `rintf`; a GPU that fuses `x - hi d` into one
/// FMA may round a lo digit the other way) and the block sums in the kernels' order (each 8-lane
/// group's tree, cuda/common.cuh `x8_quantize4`).
pub fn x8_encode(x: &[f32]) -> Vec<u8> {
    let nb = x.len().div_ceil(32);
    let mut out = vec![0u8; crate::backend::x8_bytes(x.len())];
    for (b, blk) in x.chunks(32).enumerate() {
        let (d, id) = x8_scale(blk);
        for (i, &v) in blk.iter().enumerate() {
            let (hi, lo) = x8_digits(v, d, id, f32::round_ties_even);
            let at = 4 * (9 * b) + i;
            out[at] = hi as i8 as u8;
            out[at + 36 * nb] = lo as i8 as u8;
        }
        // Each lane's four (pairs, then the pair sums), then a tree over the block's 8 lanes.
        let mut lanes = [0f32; 8];
        for (l, w) in blk.chunks(4).enumerate() {
            let v = |i: usize| w.get(i).copied().unwrap_or(0.0);
            lanes[l] = (v(0) + v(1)) + (v(2) + v(3));
        }
        let quad = |o: usize| (lanes[o] + lanes[o + 1]) + (lanes[o + 2] + lanes[o + 3]);
        let sum = quad(0) + quad(4);
        let at = 72 * nb + 8 * b;
        out[at..at + 4].copy_from_slice(&d.to_le_bytes());
        out[at + 4..at + 8].copy_from_slice(&sum.to_le_bytes());
    }
    out
}

/// The values of a [`DType::X8`] row of `k` elements: d (hi + lo / 254) per element (what
/// [`x8_blocks`] gives for the x it was made from). None if `bytes` is shorter than the layout.
pub fn x8_decode(bytes: &[u8], k: usize) -> Option<Vec<f32>> {
    let nb = k.div_ceil(32);
    if bytes.len() < crate::backend::x8_bytes(k) {
        return None;
    }
    let f = |at: usize| f32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    Some(
        (0..k)
            .map(|e| {
                let (b, i) = (e / 32, e % 32);
                let at = 4 * (9 * b) + i;
                let (hi, lo) = (bytes[at] as i8 as f32, bytes[at + 36 * nb] as i8 as f32);
                f(72 * nb + 8 * b) * (lo / 254.0 + hi)
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x8_encode_decodes_to_x8_blocks() {
        // k = 70: two whole blocks and a short one; a zero block; element 0 of block 1 an outlier.
        let k = 70;
        let mut x: Vec<f32> = (0..k).map(|i| ((i * 37 % 41) as f32 - 20.0) / 7.0).collect();
        x[32] = -55.0;
        x[64..].iter_mut().for_each(|v| *v = 0.0);
        let bytes = x8_encode(&x);
        assert_eq!(bytes.len(), crate::backend::x8_bytes(k));
        let got = x8_decode(&bytes, k).unwrap();
        for (i, (g, w)) in got.iter().zip(x8_blocks(&x, k)).enumerate() {
            assert!((g - w).abs() <= w.abs() * 1e-6 + 1e-7, "element {i}: {g} vs {w}");
        }
        // The pad words are zero, the sums are the blocks' sums.
        let nb = 3;
        for b in 0..nb {
            assert_eq!(&bytes[4 * (9 * b + 8)..4 * (9 * b + 9)], &[0; 4]);
            let sum = f32::from_le_bytes(bytes[72 * nb + 8 * b + 4..72 * nb + 8 * b + 8].try_into().unwrap());
            let want: f32 = x[32 * b..(32 * b + 32).min(k)].iter().sum();
            assert!((sum - want).abs() <= 1e-4 * want.abs().max(1.0), "block {b}: {sum} vs {want}");
        }
        assert!(x8_decode(&bytes[1..], k).is_none());
    }

    #[test]
    fn x8_blocks_is_within_a_two_digit_step_and_a_fixed_point() {
        // k = 70: two whole blocks and a short one, per row; an outlier per row.
        let k = 70;
        let x: Vec<f32> =
            (0..2 * k).map(|i| ((i * 53 % 97) as f32 - 48.0) / 9.0 + if i % 70 == 3 { 40.0 } else { 0.0 }).collect();
        let s = x8_blocks(&x, k);
        for (row, srow) in x.chunks(k).zip(s.chunks(k)) {
            for (b, sb) in row.chunks(32).zip(srow.chunks(32)) {
                let amax = b.iter().fold(0f32, |a, v| a.max(v.abs()));
                for (v, q) in b.iter().zip(sb) {
                    assert!((v - q).abs() <= amax / 64516.0 * 1.01 + 1e-6, "{v} -> {q} (amax {amax})");
                }
            }
        }
        // Snapped values are their own snap (what the parity tests rely on), within rounding.
        for (a, b) in s.iter().zip(x8_blocks(&s, k)) {
            assert!((a - b).abs() <= a.abs() * 1e-6 + 1e-7, "{a} vs {b}");
        }
    }

    #[test]
    fn row_scaled_round_trip_is_within_half_a_step() {
        let (n, k) = (3, 40);
        let w: Vec<f32> = (0..n * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0).collect();
        for dt in [DType::I8Row, DType::F8Row] {
            let q = quantize_rows(dt, &w, n, k).unwrap();
            assert_eq!(q.len(), dt.weight_bytes(n, k).unwrap());
            let mut back = vec![f32::NAN; n * k];
            dequantize_rows(dt, &q, n, k, 0, &mut back).unwrap();
            for r in 0..n {
                let amax = w[r * k..(r + 1) * k].iter().fold(0f32, |a, x| a.max(x.abs()));
                let step = if dt == DType::I8Row { amax / 127.0 } else { amax / 8.0 };
                for c in 0..k {
                    assert!((back[r * k + c] - w[r * k + c]).abs() <= step, "{dt:?} [{r}][{c}]");
                }
            }
        }
    }

    #[test]
    fn random_weights_are_finite_and_small() {
        for t in GGML_WEIGHT_TYPES {
            let dt = DType::Ggml(t);
            let (n, k) = (5, 512);
            let b = random_weights(dt, n, k, 7).unwrap();
            let mut w = vec![f32::NAN; n * k];
            dequantize_rows(dt, &b, n, k, 0, &mut w).unwrap();
            let amax = w.iter().fold(0f32, |a, x| a.max(x.abs()));
            assert!(amax.is_finite() && amax > 0.01 && amax < 2.0, "{t:?}: max |w| {amax}");
        }
    }
}
