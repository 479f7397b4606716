//! Unit tests of `dequant` (kept beside it so src/loader/dequant.rs stays a readable size).

//! Blocks are packed here from chosen scales and integer codes, written
//! from what each layout *means* (set bit k of byte i), and the expected
//! floats are computed in f64 from the codes with the textbook formula.
//! Scales are small dyadic rationals, exact in f16 and leaving every
//! product and difference exact in f32, so results must match bit for bit.
use super::*;
use GgmlType::*;

/// splitmix64; seeded from the clock (or `DEQUANT_SEED`), seed printed.
struct Rng(u64);
impl Rng {
    fn new(test: &str) -> Rng {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        let seed = match std::env::var("DEQUANT_SEED").map(|s| s.parse()) {
            Ok(Ok(seed)) => seed,
            _ => now.map_or(0x5eed, |t| t.as_nanos() as u64),
        };
        eprintln!("{test}: seed {seed} (rerun with DEQUANT_SEED={seed})");
        Rng(seed)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Where a test block's scales and codes come from.
trait Src {
    /// A scale exactly representable in f16, with at most 10 significant bits.
    fn scale(&mut self) -> f64;
    /// An integer code in `lo..=hi`.
    fn code(&mut self, lo: i64, hi: i64) -> i64;
}
impl Src for Rng {
    fn scale(&mut self) -> f64 {
        (self.next() % 2047) as f64 / 4096.0 - 1023.0 / 4096.0
    }
    fn code(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo + 1) as u64) as i64
    }
}
/// A fixed, deterministic pattern: codes sweep their range, scales cycle.
struct Fixed(usize, usize);
impl Src for Fixed {
    fn scale(&mut self) -> f64 {
        self.1 += 1;
        [0.5, -0.25, 1.5, 0.125, -0.75, 2.0, 0.0625, -1.0][self.1 % 8]
    }
    fn code(&mut self, lo: i64, hi: i64) -> i64 {
        self.0 += 1;
        lo + (self.0 as i64 * 7) % (hi - lo + 1)
    }
}

/// ORs the low bits of `v` into byte `i` at bit `shift`.
fn set_bits(b: &mut [u8], i: usize, shift: usize, v: i64) {
    assert!((0..1 << (8 - shift)).contains(&v), "{v} at bit {shift}");
    b[i] |= (v as u8) << shift;
}
fn put_f16(b: &mut [u8], at: usize, v: f64) {
    let h = f16::from_f64(v);
    assert_eq!(h.to_f64(), v, "test scale not exact in f16");
    b[at..at + 2].copy_from_slice(&h.to_le_bytes());
}

/// Builds `nb` blocks of `size` bytes with `f`, which packs one zeroed
/// block and pushes its expected values.
fn build(
    s: &mut dyn Src,
    nb: usize,
    size: usize,
    mut f: impl FnMut(&mut dyn Src, &mut [u8], &mut Vec<f64>),
) -> (Vec<u8>, Vec<f32>) {
    let (mut bytes, mut want) = (vec![0u8; nb * size], Vec::new());
    for b in bytes.chunks_exact_mut(size) {
        f(s, b, &mut want);
    }
    (bytes, want.into_iter().map(|v| v as f32).collect())
}

/// Q4_0/Q4_1/Q5_0/Q5_1: element e < 16 is the low nibble of qs[e], e >= 16
/// the high nibble of qs[e - 16]; the fifth bit of e is bit e of qh.
fn build_q4_q5(ty: GgmlType, s: &mut dyn Src, nb: usize) -> (Vec<u8>, Vec<f32>) {
    let (has_min, has_qh) = (matches!(ty, Q4_1 | Q5_1), matches!(ty, Q5_0 | Q5_1));
    build(s, nb, ty.type_size(), |s, b, want| {
        let d = s.scale();
        put_f16(b, 0, d);
        let m = if has_min { s.scale() } else { 0.0 };
        if has_min {
            put_f16(b, 2, m);
        }
        let qh = 2 + 2 * has_min as usize;
        let qs = qh + 4 * has_qh as usize;
        let top = if has_qh { 31 } else { 15 };
        for e in 0..32 {
            let q = s.code(0, top);
            set_bits(b, qs + e % 16, 4 * (e / 16), q & 15);
            if has_qh {
                set_bits(b, qh + e / 8, e % 8, q >> 4);
            }
            let centre = if has_min { 0 } else { (top + 1) / 2 };
            want.push((q - centre) as f64 * d + m);
        }
    })
}

fn build_q8_0(s: &mut dyn Src, nb: usize) -> (Vec<u8>, Vec<f32>) {
    build(s, nb, 34, |s, b, want| {
        let d = s.scale();
        put_f16(b, 0, d);
        for e in 0..32 {
            let q = s.code(-128, 127);
            b[2 + e] = q as i8 as u8;
            want.push(q as f64 * d);
        }
    })
}

fn build_q8_k(s: &mut dyn Src, nb: usize) -> (Vec<u8>, Vec<f32>) {
    build(s, nb, 292, |s, b, want| {
        let d = s.scale() as f32; // an f32 here; bsums (bytes 260..) are not read
        b[..4].copy_from_slice(&d.to_le_bytes());
        for e in 0..256 {
            let q = s.code(-128, 127);
            b[4 + e] = q as i8 as u8;
            want.push(q as f64 * d as f64);
        }
    })
}

/// The 2-bit field of element e in a Q2_K/Q3_K `qs` array at `base`:
/// half n = e/128 uses bytes 32n.., element 32j + l of it is bits 2j of byte l.
fn set_2bit(b: &mut [u8], base: usize, e: usize, v: i64) {
    set_bits(b, base + 32 * (e / 128) + e % 32, 2 * ((e % 128) / 32), v);
}

fn build_q2_k(s: &mut dyn Src, nb: usize) -> (Vec<u8>, Vec<f32>) {
    build(s, nb, 84, |s, b, want| {
        let (d, dmin) = (s.scale(), s.scale());
        put_f16(b, 80, d);
        put_f16(b, 82, dmin);
        let sm: Vec<(i64, i64)> = (0..16).map(|_| (s.code(0, 15), s.code(0, 15))).collect();
        for (i, &(sc, m)) in sm.iter().enumerate() {
            b[i] = (sc | m << 4) as u8;
        }
        for e in 0..256 {
            let q = s.code(0, 3);
            set_2bit(b, 16, e, q);
            let (sc, m) = sm[e / 16];
            want.push(d * (sc * q) as f64 - dmin * m as f64);
        }
    })
}

fn build_q3_k(s: &mut dyn Src, nb: usize) -> (Vec<u8>, Vec<f32>) {
    build(s, nb, 110, |s, b, want| {
        let d = s.scale();
        put_f16(b, 108, d);
        // Scale k (6 bits): low nibble in byte k % 8 (high nibble if k >= 8),
        // top two bits in byte 8 + k % 4 at bit 2 * (k / 4).
        let scales: Vec<i64> = (0..16).map(|_| s.code(0, 63)).collect();
        for (k, &v) in scales.iter().enumerate() {
            set_bits(b, 96 + k % 8, 4 * (k / 8), v & 15);
            set_bits(b, 96 + 8 + k % 4, 2 * (k / 4), v >> 4);
        }
        for e in 0..256 {
            let q = s.code(-4, 3);
            let u = q + 4; // bit 2 set in hmask <=> no "- 4"
            set_2bit(b, 32, e, u & 3);
            set_bits(b, e % 32, e / 32, u >> 2);
            want.push(d * ((scales[e / 16] - 32) * q) as f64);
        }
    })
}

/// Q4_K/Q5_K 6-bit scale and min j: j < 4 in bytes j and j + 4 (low 6 bits);
/// j >= 4 as nibbles of byte j + 4 with their top bits in bytes j - 4, j.
fn set_scale_min_k4(b: &mut [u8], j: usize, sc: i64, m: i64) {
    if j < 4 {
        set_bits(b, j, 0, sc);
        set_bits(b, j + 4, 0, m);
    } else {
        set_bits(b, j + 4, 0, sc & 15);
        set_bits(b, j + 4, 4, m & 15);
        set_bits(b, j - 4, 6, sc >> 4);
        set_bits(b, j, 6, m >> 4);
    }
}

fn build_q45_k(five: bool, s: &mut dyn Src, nb: usize) -> (Vec<u8>, Vec<f32>) {
    let size = if five { 176 } else { 144 };
    build(s, nb, size, |s, b, want| {
        let (d, dmin) = (s.scale(), s.scale());
        put_f16(b, 0, d);
        put_f16(b, 2, dmin);
        let sm: Vec<(i64, i64)> = (0..8).map(|_| (s.code(0, 63), s.code(0, 63))).collect();
        for (j, &(sc, m)) in sm.iter().enumerate() {
            set_scale_min_k4(&mut b[4..16], j, sc, m);
        }
        let qs = if five { 48 } else { 16 };
        for e in 0..256 {
            // 64-element group g: 32 bytes, first 32 elements in low nibbles.
            let q = s.code(0, if five { 31 } else { 15 });
            set_bits(b, qs + 32 * (e / 64) + e % 32, 4 * ((e % 64) / 32), q & 15);
            if five {
                set_bits(b, 16 + e % 32, e / 32, q >> 4);
            }
            let (sc, m) = sm[e / 32];
            want.push(d * (sc * q) as f64 - dmin * m as f64);
        }
    })
}

fn build_q6_k(s: &mut dyn Src, nb: usize) -> (Vec<u8>, Vec<f32>) {
    build(s, nb, 210, |s, b, want| {
        let d = s.scale();
        put_f16(b, 208, d);
        let scales: Vec<i64> = (0..16).map(|_| s.code(-128, 127)).collect();
        for (i, &sc) in scales.iter().enumerate() {
            b[192 + i] = sc as i8 as u8;
        }
        for e in 0..256 {
            // half n, quarter k, lane l: low nibble in ql[64n + l + 32(k%2)]
            // (high nibble if k >= 2), top 2 bits in qh[32n + l] at bit 2k.
            let (n, k, l) = (e / 128, (e % 128) / 32, e % 32);
            let q = s.code(-32, 31);
            let u = q + 32;
            set_bits(b, 64 * n + l + 32 * (k % 2), 4 * (k / 2), u & 15);
            set_bits(b, 128 + 32 * n + l, 2 * k, u >> 4);
            want.push(d * (scales[e / 16] * q) as f64);
        }
    })
}

fn build_any(ty: GgmlType, s: &mut dyn Src, nb: usize) -> (Vec<u8>, Vec<f32>) {
    match ty {
        Q4_0 | Q4_1 | Q5_0 | Q5_1 => build_q4_q5(ty, s, nb),
        Q8_0 => build_q8_0(s, nb),
        Q8_K => build_q8_k(s, nb),
        Q2_K => build_q2_k(s, nb),
        Q3_K => build_q3_k(s, nb),
        Q4_K => build_q45_k(false, s, nb),
        Q5_K => build_q45_k(true, s, nb),
        Q6_K => build_q6_k(s, nb),
        _ => unreachable!(),
    }
}

fn check(ty: GgmlType, bytes: &[u8], want: &[f32]) {
    assert_eq!(ty.bytes_for(want.len()), Ok(bytes.len()));
    let mut got = vec![f32::NAN; want.len()];
    dequantize(ty, bytes, &mut got).unwrap();
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(g == w || (g.is_nan() && w.is_nan()), "{ty} element {i}: got {g}, want {w}");
    }
}

const QUANTS: [GgmlType; 11] = [Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K];

#[test]
fn quants_fixed_pattern() {
    for ty in QUANTS {
        let (bytes, want) = build_any(ty, &mut Fixed(0, 0), 2);
        check(ty, &bytes, &want);
    }
}

#[test]
fn quants_random_multi_block() {
    let mut rng = Rng::new("quants_random_multi_block");
    for ty in QUANTS {
        for nb in [1, 3, 8] {
            let (bytes, want) = build_any(ty, &mut rng, nb);
            check(ty, &bytes, &want);
            // The same bytes at an odd address.
            let mut shifted = vec![0u8; 1];
            shifted.extend(&bytes);
            check(ty, &shifted[1..], &want);
        }
    }
}

#[test]
fn literal_blocks() {
    // d = 0.5 (f16 0x3800), codes -128..=127 over eight blocks.
    let mut bytes = Vec::new();
    for blk in 0..8 {
        bytes.extend([0x00, 0x38]);
        bytes.extend((0..32).map(|j| (blk * 32 + j) as u8 ^ 0x80));
    }
    let want: Vec<f32> = (-128..128).map(|q| q as f32 * 0.5).collect();
    check(Q8_0, &bytes, &want);
    // d = 2.0 (0x4000); qs[j] = j | (15 - j) << 4.
    let mut bytes = vec![0x00, 0x40];
    bytes.extend((0..16u8).map(|j| j | (15 - j) << 4));
    let mut want: Vec<f32> = (0..16).map(|j| (j - 8) as f32 * 2.0).collect();
    want.extend((0..16).map(|j| (7 - j) as f32 * 2.0));
    check(Q4_0, &bytes, &want);
}

/// IEEE binary16 decoded by hand.
fn f16_by_hand(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let (exp, man) = (i32::from((h >> 10) & 0x1F), f64::from(h & 0x3FF));
    let mag = match exp {
        0 => man * 2f64.powi(-24),
        31 if man == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        _ => (1024.0 + man) * 2f64.powi(exp - 25),
    };
    (sign * mag) as f32
}

#[test]
fn floats() {
    let mut rng = Rng::new("floats");
    let halves: Vec<u16> = [0x3C00, 0xC000, 0x3800, 0x7BFF, 0x0001, 0x8000, 0x7C00, 0xFC00]
        .into_iter()
        .chain((0..1000).map(|_| rng.next() as u16))
        .collect();
    let bytes: Vec<u8> = halves.iter().flat_map(|h| h.to_le_bytes()).collect();
    let want: Vec<f32> = halves.iter().map(|&h| f16_by_hand(h)).collect();
    assert_eq!(&want[..4], [1.0, -2.0, 0.5, 65504.0]);
    check(F16, &bytes, &want);
    check(F16, &bytes[2..], &want[1..]);
    let want: Vec<f32> = halves.iter().map(|&h| f32::from_bits(u32::from(h) << 16)).collect();
    assert_eq!(&want[..3], [2f32.powi(-7), -2.0, 2f32.powi(-15)]);
    check(BF16, &bytes, &want);
    let singles: Vec<f32> = [1.0, -2.5, 0.0, f32::MAX, f32::MIN_POSITIVE]
        .into_iter()
        .chain((0..1000).map(|_| f32::from_bits(rng.next() as u32)))
        .collect();
    let bytes: Vec<u8> = singles.iter().flat_map(|f| f.to_le_bytes()).collect();
    check(F32, &bytes[..4 * 999], &singles[..999]);
    check(F32, &bytes[4..], &singles[1..]);
}

#[test]
fn sizes_and_ids() {
    #[rustfmt::skip]
    let table = [
        (F32, 0, 1, 4), (F16, 1, 1, 2), (BF16, 30, 1, 2), (Q4_0, 2, 32, 18), (Q4_1, 3, 32, 20),
        (Q5_0, 6, 32, 22), (Q5_1, 7, 32, 24), (Q8_0, 8, 32, 34), (Q2_K, 10, 256, 84),
        (Q3_K, 11, 256, 110), (Q4_K, 12, 256, 144), (Q5_K, 13, 256, 176), (Q6_K, 14, 256, 210),
        (Q8_K, 15, 256, 292),
    ];
    for (ty, id, bs, ts) in table {
        assert_eq!((ty.id(), ty.block_size(), ty.type_size()), (id, bs, ts), "{ty}");
        assert_eq!(GgmlType::from_id(id), Some(ty));
        assert!(ty.can_dequantize());
    }
    assert_eq!(Q4_K.bytes_for(512), Ok(288));
    assert_eq!(F16.bytes_for(3), Ok(6));
    assert_eq!(Q6_K.bytes_for(0), Ok(0));
    assert_eq!((Q4_K.name(), IQ2_XXS.to_string().as_str()), ("Q4_K", "IQ2_XXS"));
    let mut names = std::collections::HashSet::new();
    for &ty in ALL_TYPES {
        assert_eq!(GgmlType::from_id(ty.id()), Some(ty));
        assert!(names.insert(ty.name()), "duplicate name {ty}");
    }
    let known = (0..64).filter(|&id| GgmlType::from_id(id).is_some()).count();
    assert_eq!(known, ALL_TYPES.len());
    for id in [4, 5, 31, 32, 33, 36, 37, 38, 40, 1000, u32::MAX] {
        assert_eq!(GgmlType::from_id(id), None, "id {id}");
    }
}

#[test]
fn length_errors() {
    let bad = bad_length;
    assert_eq!(Q4_K.bytes_for(100), Err(bad(Q4_K, 100, 0)));
    assert_eq!(Q8_0.bytes_for(33), Err(bad(Q8_0, 33, 0)));
    assert_eq!(F32.bytes_for(usize::MAX), Err(bad(F32, usize::MAX, 0)));
    let mut out = [0f32; 64];
    assert_eq!(dequantize(Q4_0, &[0; 35], &mut out), Err(bad(Q4_0, 64, 35)));
    assert_eq!(dequantize(Q4_0, &[0; 37], &mut out), Err(bad(Q4_0, 64, 37)));
    assert_eq!(dequantize(Q4_0, &[0; 36], &mut out[..40]), Err(bad(Q4_0, 40, 36)));
    assert_eq!(dequantize(F32, &[0; 7], &mut out[..2]), Err(bad(F32, 2, 7)));
    assert_eq!(dequantize(Q6_K, &[], &mut []), Ok(()));
    let msg = dequantize(Q4_0, &[0; 17], &mut out[..32]).unwrap_err().to_string();
    assert!(msg.contains("18 bytes") && msg.contains("17"), "{msg}");
    assert!(Q4_K.bytes_for(100).unwrap_err().to_string().contains("256"));
}

#[test]
fn unsupported_types() {
    let mut out = [0f32; 256];
    for ty in [IQ2_XXS, IQ4_NL, IQ4_XS, Q8_1, TQ2_0, MXFP4, I32, F64] {
        assert!(!ty.can_dequantize());
        let bytes = vec![0u8; ty.bytes_for(256).unwrap()];
        let err = dequantize(ty, &bytes, &mut out).unwrap_err();
        assert_eq!(err, DequantError::Unsupported(ty));
        assert!(err.to_string().contains(ty.name()));
    }
}
