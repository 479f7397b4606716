//! Dequantization of GGML tensor data, as stored in GGUF files, to `f32`.
//!
//! [`GgmlType`] names every tensor type a GGUF file can declare (numeric ids
//! as in `ggml.h`) with its block geometry; [`dequantize`] expands the raw
//! bytes of one of the supported types into `f32`, one block at a time.
//!
//! The block layouts are those of ggml's `ggml-common.h`, and the formulas are
//! exactly the reference `dequantize_row_*` functions of `ggml-quants.c`
//! (same operation order, so results match ggml's CPU reference). All fields
//! are little-endian and read byte-wise, so the data may be unaligned. `half`
//! is an IEEE binary16 scale, `QK_K` = 256.
//!
//! | type | elems | bytes | layout (in order) | value |
//! |------|------:|------:|-------------------|-------|
//! | F32 / F16 / BF16 | 1 | 4 / 2 / 2 | one value | as is |
//! | Q4_0 | 32 | 18 | `d: half, qs[16]` | `(q - 8) * d` |
//! | Q4_1 | 32 | 20 | `d, m: half, qs[16]` | `q * d + m` |
//! | Q5_0 | 32 | 22 | `d: half, qh[4], qs[16]` | `(q - 16) * d` |
//! | Q5_1 | 32 | 24 | `d, m: half, qh[4], qs[16]` | `q * d + m` |
//! | Q8_0 | 32 | 34 | `d: half, qs: i8[32]` | `q * d` |
//! | Q2_K | 256 | 84 | `scales[16], qs[64], d, dmin: half` | `d*sc*q - dmin*m` |
//! | Q3_K | 256 | 110 | `hmask[32], qs[64], scales[12], d: half` | `d*(sc-32)*q` |
//! | Q4_K | 256 | 144 | `d, dmin: half, scales[12], qs[128]` | `d*sc*q - dmin*m` |
//! | Q5_K | 256 | 176 | `d, dmin: half, scales[12], qh[32], qs[128]` | `d*sc*q - dmin*m` |
//! | Q6_K | 256 | 210 | `ql[128], qh[64], scales: i8[16], d: half` | `d*sc*(q-32)` |
//! | Q8_K | 256 | 292 | `d: f32, qs: i8[256], bsums: i16[16]` | `d * q` |
//!
//! * Q4_0/Q4_1: byte `j` of `qs` holds element `j` in its low nibble and
//!   element `j + 16` in its high nibble. Q5_0/Q5_1 add the fifth bit of
//!   element `e` as bit `e` of `qh` read as a little-endian `u32`.
//! * Q2_K: 16 sub-blocks of 16; scale byte = `sc | m << 4`. Each 128-element
//!   half uses 32 `qs` bytes; element `32*j + l` of the half is bits
//!   `2j..2j+2` of byte `l`. Q3_K packs its 2 low bits the same way, the
//!   third bit of element `e` is bit `e / 32` of `hmask[e % 32]` (clear
//!   means subtract 4), and its sixteen 6-bit scales are packed in 12 bytes:
//!   low nibbles in bytes 0..8, high 2-bit pairs in bytes 8..12.
//! * Q4_K/Q5_K: 8 sub-blocks of 32 with 6-bit scales and mins packed in 12
//!   bytes (ggml's `get_scale_min_k4`); each 64-element group uses 32 `qs`
//!   bytes, low nibbles first. Q5_K's fifth bit of element `e` is bit
//!   `e / 32` of `qh[e % 32]`.
//! * Q6_K: 16 sub-blocks of 16 with `i8` scales; 4 low bits in `ql`, 2 high
//!   bits in `qh`, interleaved per 128-element half as in ggml.
//!
//! Other types (the IQ*, TQ*, MXFP4 codebook formats, Q8_1, the integer types
//! and F64) are recognised but return [`DequantError::Unsupported`].

use std::fmt;

use half::{bf16, f16, slice::HalfFloatSliceExt};

/// Elements per super-block of the K-quants (and IQ formats).
const QK_K: usize = 256;

/// Defines [`GgmlType`] (discriminants = ggml ids), `ALL_TYPES` and the
/// `(name, elements per block, bytes per block)` table.
macro_rules! ggml_types {
    ($($ty:ident = $id:literal, $block:expr, $size:literal;)*) => {
        /// GGML tensor types as stored in GGUF files (numeric ids as in ggml.h).
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u32)]
        pub enum GgmlType {
            $(#[doc = concat!("`", stringify!($ty), "`, ggml id ", stringify!($id), ".")] $ty = $id,)*
        }

        /// Every [`GgmlType`], in id order.
        const ALL_TYPES: &[GgmlType] = &[$(GgmlType::$ty,)*];

        impl GgmlType {
            const fn info(self) -> (&'static str, usize, usize) {
                match self {
                    $(GgmlType::$ty => (stringify!($ty), $block, $size),)*
                }
            }
        }
    };
}

// Ids from `ggml.h`; bytes per block from the `sizeof(block_*)` assertions of
// `ggml-common.h`. Ids 4, 5, 31..=33 and 36..=38 were removed from ggml.
ggml_types! {
    F32 = 0, 1, 4; F16 = 1, 1, 2; Q4_0 = 2, 32, 18; Q4_1 = 3, 32, 20;
    Q5_0 = 6, 32, 22; Q5_1 = 7, 32, 24; Q8_0 = 8, 32, 34; Q8_1 = 9, 32, 36;
    Q2_K = 10, QK_K, 84; Q3_K = 11, QK_K, 110; Q4_K = 12, QK_K, 144; Q5_K = 13, QK_K, 176;
    Q6_K = 14, QK_K, 210; Q8_K = 15, QK_K, 292; IQ2_XXS = 16, QK_K, 66; IQ2_XS = 17, QK_K, 74;
    IQ3_XXS = 18, QK_K, 98; IQ1_S = 19, QK_K, 50; IQ4_NL = 20, 32, 18; IQ3_S = 21, QK_K, 110;
    IQ2_S = 22, QK_K, 82; IQ4_XS = 23, QK_K, 136; I8 = 24, 1, 1; I16 = 25, 1, 2;
    I32 = 26, 1, 4; I64 = 27, 1, 8; F64 = 28, 1, 8; IQ1_M = 29, QK_K, 56;
    BF16 = 30, 1, 2; TQ1_0 = 34, QK_K, 54; TQ2_0 = 35, QK_K, 66; MXFP4 = 39, 32, 17;
}

impl GgmlType {
    /// The type with ggml id `id`, or `None` for unknown or removed ids.
    pub fn from_id(id: u32) -> Option<GgmlType> {
        ALL_TYPES.iter().copied().find(|t| t.id() == id)
    }

    /// The numeric id used in `ggml.h` and GGUF tensor infos.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// ggml's name for the type, e.g. `"Q4_K"`.
    pub fn name(self) -> &'static str {
        self.info().0
    }

    /// Elements per block (1 for plain scalar types).
    pub fn block_size(self) -> usize {
        self.info().1
    }

    /// Bytes per block.
    pub fn type_size(self) -> usize {
        self.info().2
    }

    /// Bytes for `n` elements; Err if n is not a multiple of block_size.
    pub fn bytes_for(self, n: usize) -> Result<usize, DequantError> {
        let (bs, ts) = (self.block_size(), self.type_size());
        let bytes = n.is_multiple_of(bs).then(|| (n / bs).checked_mul(ts));
        bytes.flatten().ok_or(bad_length(self, n, 0))
    }

    /// Whether [`dequantize`] supports this type.
    pub fn can_dequantize(self) -> bool {
        self.row_fn().is_some()
    }

    /// The row dequantizer for this type, if there is one.
    fn row_fn(self) -> Option<RowFn> {
        use GgmlType::*;
        Some(match self {
            F32 => f32_row,
            F16 => f16_row,
            BF16 => bf16_row,
            Q4_0 => |x, y| blocks(x, y, q4_0),
            Q4_1 => |x, y| blocks(x, y, q4_1),
            Q5_0 => |x, y| blocks(x, y, q5_0),
            Q5_1 => |x, y| blocks(x, y, q5_1),
            Q8_0 => |x, y| blocks(x, y, q8_0),
            Q2_K => |x, y| blocks(x, y, q2_k),
            Q3_K => |x, y| blocks(x, y, q3_k),
            Q4_K => |x, y| blocks(x, y, q4_k),
            Q5_K => |x, y| blocks(x, y, q5_k),
            Q6_K => |x, y| blocks(x, y, q6_k),
            Q8_K => |x, y| blocks(x, y, q8_k),
            _ => return None,
        })
    }
}

/// Dequantizes a whole row: `data` holds exactly the blocks for `out`.
type RowFn = fn(&[u8], &mut [f32]);

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why [`dequantize`] (or [`GgmlType::bytes_for`]) failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DequantError {
    /// The type is known but has no dequantizer here.
    Unsupported(GgmlType),
    /// `elements` is not a whole number of blocks, or `bytes` (the length of
    /// the data given; 0 when raised by `bytes_for`) does not match it.
    BadLength {
        /// The tensor type.
        ty: GgmlType,
        /// Number of elements asked for.
        elements: usize,
        /// Number of bytes given.
        bytes: usize,
    },
}

fn bad_length(ty: GgmlType, elements: usize, bytes: usize) -> DequantError {
    DequantError::BadLength { ty, elements, bytes }
}

impl fmt::Display for DequantError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use DequantError::*;
        let (ty, n, got) = match *self {
            Unsupported(ty) => return write!(f, "dequantizing {ty} is not supported"),
            BadLength { ty, elements, bytes } => (ty, elements, bytes),
        };
        let bs = ty.block_size();
        match ty.bytes_for(n) {
            Ok(need) => write!(f, "{ty}: {n} elements need {need} bytes, got {got}"),
            Err(_) => write!(f, "{ty}: {n} elements is not a multiple of the block size {bs}"),
        }
    }
}

impl std::error::Error for DequantError {}

/// Dequantize `out.len()` elements from `data` (exactly bytes_for(out.len()) bytes) into f32.
///
/// Errors: [`DequantError::Unsupported`] unless `ty.can_dequantize()`, else
/// [`DequantError::BadLength`] if the lengths do not match; `out` is untouched.
pub fn dequantize(ty: GgmlType, data: &[u8], out: &mut [f32]) -> Result<(), DequantError> {
    let row = ty.row_fn().ok_or(DequantError::Unsupported(ty))?;
    if ty.bytes_for(out.len()).ok() != Some(data.len()) {
        return Err(bad_length(ty, out.len(), data.len()));
    }
    row(data, out);
    Ok(())
}

/// Runs `f` over each `B`-byte block of `data` and its `N` outputs.
/// The caller has checked that the lengths are whole, matching blocks.
#[inline]
fn blocks<const B: usize, const N: usize>(data: &[u8], out: &mut [f32], f: impl Fn(&[u8; B], &mut [f32; N])) {
    let (bs, _) = data.as_chunks::<B>();
    let (ys, _) = out.as_chunks_mut::<N>();
    debug_assert_eq!(bs.len(), ys.len());
    for (b, y) in bs.iter().zip(ys) {
        f(b, y);
    }
}

/// Little-endian f16 at byte `at`.
#[inline]
fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

fn f32_row(data: &[u8], out: &mut [f32]) {
    for (y, b) in out.iter_mut().zip(data.as_chunks::<4>().0) {
        *y = f32::from_le_bytes(*b);
    }
}

fn bf16_row(data: &[u8], out: &mut [f32]) {
    for (y, b) in out.iter_mut().zip(data.as_chunks::<2>().0) {
        *y = bf16::from_le_bytes(*b).to_f32();
    }
}

/// F16 rows go through a small aligned buffer so `half` can convert them in bulk.
fn f16_row(data: &[u8], out: &mut [f32]) {
    let mut buf = [f16::ZERO; 64];
    for (src, y) in data.as_chunks::<2>().0.chunks(64).zip(out.chunks_mut(64)) {
        for (h, b) in buf.iter_mut().zip(src) {
            *h = f16::from_le_bytes(*b);
        }
        buf[..y.len()].convert_to_f32_slice(y);
    }
}

/// `dequantize_row_q4_0`: `d: half, qs[16]`.
fn q4_0(b: &[u8; 18], y: &mut [f32; 32]) {
    let d = f16_at(b, 0);
    let (lo, hi) = y.split_at_mut(16);
    for ((&q, y0), y1) in b[2..].iter().zip(lo).zip(hi) {
        *y0 = ((q & 0x0F) as i32 - 8) as f32 * d;
        *y1 = ((q >> 4) as i32 - 8) as f32 * d;
    }
}

/// `dequantize_row_q4_1`: `d, m: half, qs[16]`.
fn q4_1(b: &[u8; 20], y: &mut [f32; 32]) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    let (lo, hi) = y.split_at_mut(16);
    for ((&q, y0), y1) in b[4..].iter().zip(lo).zip(hi) {
        *y0 = (q & 0x0F) as f32 * d + m;
        *y1 = (q >> 4) as f32 * d + m;
    }
}

/// The fifth bits (as 0 or 0x10) of elements `j` and `j + 16` of a Q5_0/Q5_1
/// block, from `qh` read as a little-endian u32.
#[inline(always)]
fn q5_high(qh: u32, j: usize) -> (u8, u8) {
    let xh_0 = (((qh >> j) << 4) & 0x10) as u8;
    let xh_1 = ((qh >> (j + 12)) & 0x10) as u8;
    (xh_0, xh_1)
}

/// `dequantize_row_q5_0`: `d: half, qh[4], qs[16]`.
fn q5_0(b: &[u8; 22], y: &mut [f32; 32]) {
    let d = f16_at(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let (lo, hi) = y.split_at_mut(16);
    for (j, ((&q, y0), y1)) in b[6..].iter().zip(lo).zip(hi).enumerate() {
        let (xh_0, xh_1) = q5_high(qh, j);
        *y0 = (((q & 0x0F) | xh_0) as i32 - 16) as f32 * d;
        *y1 = (((q >> 4) | xh_1) as i32 - 16) as f32 * d;
    }
}

/// `dequantize_row_q5_1`: `d, m: half, qh[4], qs[16]`.
fn q5_1(b: &[u8; 24], y: &mut [f32; 32]) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let (lo, hi) = y.split_at_mut(16);
    for (j, ((&q, y0), y1)) in b[8..].iter().zip(lo).zip(hi).enumerate() {
        let (xh_0, xh_1) = q5_high(qh, j);
        *y0 = ((q & 0x0F) | xh_0) as f32 * d + m;
        *y1 = ((q >> 4) | xh_1) as f32 * d + m;
    }
}

/// `dequantize_row_q8_0`: `d: half, qs: i8[32]`.
fn q8_0(b: &[u8; 34], y: &mut [f32; 32]) {
    let d = f16_at(b, 0);
    for (&q, y) in b[2..].iter().zip(y) {
        *y = (q as i8) as f32 * d;
    }
}

/// `dequantize_row_q8_K`: `d: f32, qs: i8[256], bsums: i16[16]` (unused).
fn q8_k(b: &[u8; 292], y: &mut [f32; QK_K]) {
    let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    for (&q, y) in b[4..4 + QK_K].iter().zip(y) {
        *y = d * (q as i8) as f32;
    }
}

/// `dequantize_row_q2_K`: `scales[16], qs[64], d, dmin: half`.
fn q2_k(b: &[u8; 84], y: &mut [f32; QK_K]) {
    let (scales, qs) = (&b[..16], &b[16..80]);
    let (d, min) = (f16_at(b, 80), f16_at(b, 82));
    // Each 16 outputs (sub-block `is`) take one scale byte; the 2-bit codes of
    // a 128-element half come from one 32-byte run of `qs`, shift 2*j.
    for (is, y16) in y.chunks_exact_mut(16).enumerate() {
        let (n, j, h) = (is / 8, (is / 2) % 4, is % 2);
        let q = &qs[32 * n + 16 * h..][..16];
        let sc = scales[is];
        let dl = d * (sc & 0xF) as f32;
        let ml = min * (sc >> 4) as f32;
        for (&q, y) in q.iter().zip(y16) {
            *y = dl * ((q >> (2 * j)) & 3) as f32 - ml;
        }
    }
}

/// Q3_K's sixteen 6-bit scales, unpacked as ggml does with kmask1/kmask2.
fn q3_k_scales(s: &[u8]) -> [u8; 16] {
    const KMASK1: u32 = 0x0303_0303;
    const KMASK2: u32 = 0x0f0f_0f0f;
    let a0 = u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
    let a1 = u32::from_le_bytes([s[4], s[5], s[6], s[7]]);
    let tmp = u32::from_le_bytes([s[8], s[9], s[10], s[11]]);
    let aux = [
        (a0 & KMASK2) | ((tmp & KMASK1) << 4),
        (a1 & KMASK2) | (((tmp >> 2) & KMASK1) << 4),
        ((a0 >> 4) & KMASK2) | (((tmp >> 4) & KMASK1) << 4),
        ((a1 >> 4) & KMASK2) | (((tmp >> 6) & KMASK1) << 4),
    ];
    let mut out = [0u8; 16];
    for (o, w) in out.chunks_exact_mut(4).zip(aux) {
        o.copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// `dequantize_row_q3_K`: `hmask[32], qs[64], scales[12], d: half`.
fn q3_k(b: &[u8; 110], y: &mut [f32; QK_K]) {
    let (hm, qs) = (&b[..32], &b[32..96]);
    let scales = q3_k_scales(&b[96..108]);
    let d_all = f16_at(b, 108);
    // Same 2-bit walk as Q2_K; the hmask bit for shift step `4n + j` is
    // bit `4n + j` of hm[l] (ggml's running `m`), clear means "minus 4".
    for (is, y16) in y.chunks_exact_mut(16).enumerate() {
        let (n, j, h) = (is / 8, (is / 2) % 4, is % 2);
        let q = &qs[32 * n + 16 * h..][..16];
        let hm = &hm[16 * h..][..16];
        let m = 1u8 << (4 * n + j);
        let dl = d_all * (scales[is] as i32 - 32) as f32;
        for ((&q, &hm), y) in q.iter().zip(hm).zip(y16) {
            let v = ((q >> (2 * j)) & 3) as i32 - if hm & m != 0 { 0 } else { 4 };
            *y = dl * v as f32;
        }
    }
}

/// ggml's `get_scale_min_k4`: 6-bit scale and min `j` (0..8) of Q4_K/Q5_K.
#[inline]
fn get_scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// `dequantize_row_q4_K`: `d, dmin: half, scales[12], qs[128]`.
fn q4_k(b: &[u8; 144], y: &mut [f32; QK_K]) {
    let (d, min) = (f16_at(b, 0), f16_at(b, 2));
    let (scales, qs) = (&b[4..16], &b[16..]);
    for (g, (y64, q)) in y.chunks_exact_mut(64).zip(qs.chunks_exact(32)).enumerate() {
        let (sc, m) = get_scale_min_k4(2 * g, scales);
        let (d1, m1) = (d * sc as f32, min * m as f32);
        let (sc, m) = get_scale_min_k4(2 * g + 1, scales);
        let (d2, m2) = (d * sc as f32, min * m as f32);
        let (lo, hi) = y64.split_at_mut(32);
        for ((&q, y0), y1) in q.iter().zip(lo).zip(hi) {
            *y0 = d1 * (q & 0xF) as f32 - m1;
            *y1 = d2 * (q >> 4) as f32 - m2;
        }
    }
}

/// `dequantize_row_q5_K`: `d, dmin: half, scales[12], qh[32], qs[128]`.
fn q5_k(b: &[u8; 176], y: &mut [f32; QK_K]) {
    let (d, min) = (f16_at(b, 0), f16_at(b, 2));
    let (scales, qh, qs) = (&b[4..16], &b[16..48], &b[48..]);
    for (g, (y64, ql)) in y.chunks_exact_mut(64).zip(qs.chunks_exact(32)).enumerate() {
        let (sc, m) = get_scale_min_k4(2 * g, scales);
        let (d1, m1) = (d * sc as f32, min * m as f32);
        let (sc, m) = get_scale_min_k4(2 * g + 1, scales);
        let (d2, m2) = (d * sc as f32, min * m as f32);
        let (u1, u2) = (1u8 << (2 * g), 2u8 << (2 * g));
        let (lo, hi) = y64.split_at_mut(32);
        for (((&q, &h), y0), y1) in ql.iter().zip(qh).zip(lo).zip(hi) {
            let h0 = if h & u1 != 0 { 16 } else { 0 };
            let h1 = if h & u2 != 0 { 16 } else { 0 };
            *y0 = d1 * ((q & 0xF) + h0) as f32 - m1;
            *y1 = d2 * ((q >> 4) + h1) as f32 - m2;
        }
    }
}

/// `dequantize_row_q6_K`: `ql[128], qh[64], scales: i8[16], d: half`.
fn q6_k(b: &[u8; 210], y: &mut [f32; QK_K]) {
    let d = f16_at(b, 208);
    for (n, y128) in y.chunks_exact_mut(128).enumerate() {
        let ql = &b[64 * n..][..64];
        let qh = &b[128 + 32 * n..][..32];
        let sc = &b[192 + 8 * n..][..8];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            y128[l] = d * (sc[is] as i8) as f32 * q1 as f32;
            y128[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
            y128[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
            y128[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
        }
    }
}

#[cfg(test)]
mod tests;
