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
mod tests {
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
}
