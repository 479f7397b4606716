//! 8-bit KV quantization: the reference definition every backend reproduces bit for bit
//! (docs/kv-cache.md, "8-bit KV").
//!
//! A KV row is one token of one KV head (`head_dim` values). Each row is quantized on its own,
//! with one f32 scale; dequantized value = code value * scale (one f32 multiply).
//!
//! - `amax` = max |x| of the row, taken on the bit patterns (`bits & 0x7fffffff` as u32, whose
//!   order is the numeric order; NaN sorts above infinity), so it is exact on every backend.
//! - Rows with `amax < 2^-100` (including all-zero rows) store code 0 everywhere and scale 0.
//!   Rows holding an infinity or NaN store code 0 and a NaN scale (0x7fc00000), so attention
//!   over them yields NaN as an f32 cache would.
//! - int8: scale = `amax * (1/127)` (the f32 constant 0x3c010204, one correctly rounded multiply);
//!   code = round-half-even(127 |x| / amax), computed EXACTLY in u32 integer arithmetic on the
//!   mantissas (no division in float, whose rounding WGSL leaves to the driver), with x's sign;
//!   stored as two's complement i8 in -127..=127 (-128 never occurs; -0 is stored as 0).
//! - fp8 (e4m3, bias 7, no infinities, max 448, 0x7f/0xff NaN): scale = 2^k with the smallest k
//!   such that `amax / 2^k <= 448`, so `x / 2^k` is exact and the row's largest value lands in
//!   (224, 448]; code = e4m3(x / 2^k) by round-to-nearest-even on the exact value, saturating at
//!   ±448 (never reached by construction, kept as a guard), NaN never produced; the sign bit is
//!   x's (so -0 and tiny negative values give 0x80). A power-of-two scale costs nothing against
//!   an exact amax/448 scale: e4m3's relative step is the same in every binade.
//!
//! The integer formulation is what lets the WGSL and CUDA kernels store the same bytes as this
//! reference: only integer operations, comparisons and one f32 multiply are involved.

use crate::backend::DType;

/// Bytes of the per-row scale stored beside each page (f32).
pub const SCALE_BYTES: usize = 4;
/// `1/127` as f32 (bits 0x3c010204); the int8 scale is `amax * INV127`.
pub const INV127: f32 = 1.0 / 127.0;
/// Rows with `amax` below this (2^-100, bits) are stored as zeros with scale 0.
pub const TINY_BITS: u32 = 27 << 23;
const INF_BITS: u32 = 0x7f80_0000;
/// Scale of a row that holds an infinity or NaN.
pub const NAN_SCALE_BITS: u32 = 0x7fc0_0000;
/// Largest finite e4m3 code (448).
pub const E4M3_MAX_CODE: u32 = 0x7e;

fn abs_bits(x: f32) -> u32 {
    x.to_bits() & 0x7fff_ffff
}

/// Integer mantissa and effective exponent field of non-negative finite f32 bits:
/// value = m * 2^(e - 150).
fn split(b: u32) -> (u32, i32) {
    let e = (b >> 23) as i32;
    let m = b & 0x7f_ffff;
    if e == 0 { (m, 1) } else { (m | 0x80_0000, e) }
}

/// Round-half-even of `127 * x / a` for f32 bit patterns `0 <= x <= a`, `a` normal and finite,
/// exactly. 127 * mantissa fits in 31 bits; the divisor `ma << shift` fits in 32 bits while
/// shift <= 8, and for larger shifts the quotient is below 1/2.
pub fn int8_level(xb: u32, ab: u32) -> u32 {
    let (mx, ex) = split(xb);
    let (ma, ea) = split(ab);
    let shift = ea - ex;
    if mx == 0 || shift > 8 {
        return 0;
    }
    let n = 127 * mx;
    let d = ma << shift;
    let (q, r) = (n / d, n % d);
    if r > d - r || (r == d - r && q & 1 == 1) { q + 1 } else { q }
}

/// Biased exponent field of the fp8 scale 2^k of a row with max bits `ab` (normal, finite):
/// the smallest k with `amax / 2^k <= 448` (448 = 1.75 * 2^8, mantissa bits 0x600000).
pub fn fp8_scale_field(ab: u32) -> u32 {
    let e = ab >> 23;
    if ab & 0x7f_ffff <= 0x60_0000 { e - 8 } else { e - 7 }
}

/// e4m3 code (without sign) of `|x| / 2^(kf - 127)` for |x| bits `xb` and scale field `kf`,
/// round-to-nearest-even, saturating at 448.
pub fn e4m3_level(xb: u32, kf: u32) -> u32 {
    let ex = (xb >> 23) as i32;
    if ex == 0 {
        return 0; // |x| < 2^-126, so |x| / 2^k < 2^-145: far below half the smallest subnormal
    }
    let mx = (xb & 0x7f_ffff) | 0x80_0000;
    let e = ex - kf as i32; // y = |x| / 2^k lies in [2^e, 2^(e+1))
    // Quantum 2^(max(e, -6) - 3); n = y / quantum has 4 significant bits (normal) or fewer.
    let sh = 23 + (e.max(-6) - 3) - e;
    if sh > 25 {
        return 0;
    }
    let sh = sh as u32;
    let (mut n, rem, half) = (mx >> sh, mx & ((1 << sh) - 1), 1u32 << (sh - 1));
    if rem > half || (rem == half && n & 1 == 1) {
        n += 1;
    }
    let code = (((e + 7).max(1) as u32) << 3) + n - 8;
    code.min(E4M3_MAX_CODE)
}

/// The value of an e4m3 code (exact in f32); 0x7f / 0xff are NaN.
const fn e4m3_value(b: u8) -> f32 {
    let (e, m) = (((b >> 3) & 15) as u32, (b & 7) as u32);
    let v = if b & 0x7f == 0x7f {
        f32::NAN
    } else if e == 0 {
        m as f32 * 0.001953125 // m * 2^-9
    } else {
        f32::from_bits(((e + 120) << 23) | (m << 20)) // (1 + m/8) * 2^(e-7)
    };
    if b >> 7 == 1 { -v } else { v }
}

/// Every e4m3 code's value.
const E4M3: [f32; 256] = {
    let mut t = [0f32; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = e4m3_value(b as u8);
        b += 1;
    }
    t
};

/// The value of an e4m3 code (exact in f32); 0x7f / 0xff are NaN.
pub fn e4m3_to_f32(b: u8) -> f32 {
    E4M3[b as usize]
}

/// Quantize one row `x` into `codes` (same length) for `dtype` (I8 or F8E4M3); returns the scale.
pub fn quantize_row(dtype: DType, x: &[f32], codes: &mut [u8]) -> f32 {
    let ab = x.iter().map(|&v| abs_bits(v)).max().unwrap_or(0);
    if ab < TINY_BITS {
        codes.fill(0);
        return 0.0;
    }
    if ab >= INF_BITS {
        codes.fill(0);
        return f32::from_bits(NAN_SCALE_BITS);
    }
    match dtype {
        DType::I8 => {
            for (c, &v) in codes.iter_mut().zip(x) {
                let l = int8_level(abs_bits(v), ab) as i32;
                *c = (if v.is_sign_negative() { -l } else { l }) as i8 as u8;
            }
            f32::from_bits(ab) * INV127
        }
        DType::F8E4M3 => {
            let kf = fp8_scale_field(ab);
            for (c, &v) in codes.iter_mut().zip(x) {
                *c = (e4m3_level(abs_bits(v), kf) | ((v.to_bits() >> 31) << 7)) as u8;
            }
            f32::from_bits(kf << 23)
        }
        d => panic!("quantize_row: {d:?} is not an 8-bit KV type"),
    }
}

/// Dequantize one row: `out[i] = value(codes[i]) * scale`.
pub fn dequantize_row(dtype: DType, codes: &[u8], scale: f32, out: &mut [f32]) {
    match dtype {
        DType::I8 => out.iter_mut().zip(codes).for_each(|(o, &c)| *o = c as i8 as f32 * scale),
        _ => out.iter_mut().zip(codes).for_each(|(o, &c)| *o = e4m3_to_f32(c) * scale),
    }
}

/// Byte offsets of token row `row` (= `(page * heads + head) * page_size + token`) in an 8-bit
/// pool: (its `head_dim` codes, its f32 scale). A (page, head) block is `[page_size][head_dim]`
/// codes followed by `[page_size]` scales.
pub fn row_offsets(row: usize, page_size: usize, head_dim: usize) -> (usize, usize) {
    let (blk, t) = (row / page_size, row % page_size);
    let base = blk * page_size * (head_dim + SCALE_BYTES);
    (base + t * head_dim, base + page_size * head_dim + SCALE_BYTES * t)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tiny deterministic generator (xorshift) for the brute-force comparisons.
    fn rng(seed: &mut u64) -> f64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        (*seed >> 11) as f64 / (1u64 << 53) as f64
    }

    fn rows(seed: u64) -> Vec<Vec<f32>> {
        let mut s = seed | 1;
        (0..400)
            .map(|i| {
                let mag = 10f64.powi((i % 13) - 8);
                (0..64)
                    .map(|j| {
                        let x = (rng(&mut s) * 2.0 - 1.0) * mag;
                        // Exact ties of the int8 grid and repeated values show up too.
                        if j == 3 { (x.round() / 2.0) as f32 } else { x as f32 }
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn int8_matches_exact_rational_rounding() {
        let seed = 0x5eed_1234;
        for x in rows(seed) {
            let mut c = vec![0u8; x.len()];
            let s = quantize_row(DType::I8, &x, &mut c);
            let amax = x.iter().map(|v| v.abs()).fold(0f32, f32::max) as f64;
            if amax < 2f64.powi(-100) {
                assert!(s == 0.0 && c.iter().all(|&b| b == 0));
                continue;
            }
            assert_eq!(s, (amax as f32) * INV127);
            for (&v, &b) in x.iter().zip(&c) {
                // f64 holds 127 * x exactly; the quotient's rounding can only matter at exact ties,
                // which f64 also represents exactly.
                let r = 127.0 * (v as f64).abs() / amax;
                let f = r.floor();
                let want = if r - f > 0.5 || (r - f == 0.5 && f % 2.0 == 1.0) { f + 1.0 } else { f };
                let want = if v < 0.0 { -want } else { want };
                assert_eq!(b as i8 as f64, want, "x {v} amax {amax} (seed {seed:#x})");
            }
        }
    }

    #[test]
    fn int8_ties_round_to_even() {
        // amax 127: codes are x itself; 2.5 -> 2, 3.5 -> 4, -2.5 -> -2.
        let x = [127.0, 2.5, 3.5, -2.5, 0.5, 1.5, -0.0];
        let mut c = [0u8; 7];
        quantize_row(DType::I8, &x, &mut c);
        assert_eq!(c.map(|b| b as i8), [127, 2, 4, -2, 0, 2, 0]);
    }

    #[test]
    fn fp8_matches_brute_force_nearest() {
        let grid: Vec<(f64, u8)> = (0u8..=0x7e).map(|b| (e4m3_to_f32(b) as f64, b)).collect();
        let seed = 0xfeed_5678;
        for x in rows(seed) {
            let mut c = vec![0u8; x.len()];
            let s = quantize_row(DType::F8E4M3, &x, &mut c) as f64;
            let amax = x.iter().map(|v| v.abs()).fold(0f32, f32::max) as f64;
            if amax < 2f64.powi(-100) {
                continue;
            }
            assert!(amax / s <= 448.0 && amax / s > 224.0, "scale {s} for amax {amax}");
            for (&v, &b) in x.iter().zip(&c) {
                let y = (v as f64).abs() / s;
                // Nearest grid value; ties to the even code (even mantissa).
                let best = grid
                    .iter()
                    .min_by(|a, b2| (a.0 - y).abs().total_cmp(&(b2.0 - y).abs()).then((a.1 & 1).cmp(&(b2.1 & 1))))
                    .unwrap();
                assert_eq!(b & 0x7f, best.1, "x {v} y {y} (seed {seed:#x})");
                assert_eq!(b >> 7, v.is_sign_negative() as u8);
            }
        }
    }

    #[test]
    fn zero_and_nonfinite_rows() {
        for d in [DType::I8, DType::F8E4M3] {
            let mut c = [7u8; 4];
            assert_eq!(quantize_row(d, &[0.0; 4], &mut c), 0.0);
            assert_eq!(c, [0; 4]);
            let s = quantize_row(d, &[1.0, f32::INFINITY, 2.0, 0.0], &mut c);
            assert!(s.is_nan() && c == [0; 4]);
            let s = quantize_row(d, &[1.0, f32::NAN, 2.0, 0.0], &mut c);
            assert!(s.is_nan());
        }
    }

    #[test]
    fn e4m3_decode_table() {
        for b in 0u8..=255 {
            let (e, m) = ((b >> 3) & 15, (b & 7) as f64);
            let want = if e == 0 { m / 512.0 } else { (1.0 + m / 8.0) * 2f64.powi(e as i32 - 7) };
            let want = if b >> 7 == 1 { -want } else { want };
            if b & 0x7f != 0x7f {
                assert_eq!(e4m3_to_f32(b) as f64, want, "code {b:#04x}");
            }
        }
        assert_eq!(e4m3_to_f32(0x7e), 448.0);
        assert_eq!(e4m3_to_f32(0x01), 2f32.powi(-9));
        assert_eq!(e4m3_to_f32(0x08), 2f32.powi(-6));
        assert_eq!(e4m3_to_f32(0x38), 1.0);
        assert_eq!(e4m3_to_f32(0xb8), -1.0);
        assert!(e4m3_to_f32(0x7f).is_nan());
    }

    #[test]
    fn block_layout() {
        // page 4, head_dim 8: block = 32 code bytes + 16 scale bytes.
        assert_eq!(row_offsets(0, 4, 8), (0, 32));
        assert_eq!(row_offsets(3, 4, 8), (24, 44));
        assert_eq!(row_offsets(5, 4, 8), (48 + 8, 48 + 32 + 4));
    }
}
