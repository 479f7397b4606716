//! The 32-element GGML formats in 16-byte-aligned super-blocks (`q4_0p`, `q4_1p`, `q5_0p`,
//! `q5_1p`, `q8_0p`): how the CUDA backend stores a Q4_0, Q4_1, Q5_0, Q5_1 or Q8_0 matrix whose
//! rows are whole 256-element super-blocks (`Backend::upload_weight` with k % 256 == 0).
//!
//! A GGML Q4_0 / Q5_0 / Q8_0 block is 18 / 22 / 34 bytes (an f16 scale, Q5_0's 4 bytes of fifth
//! bits, then the codes), so its fields sit at 2-byte alignment and every kernel read them as
//! pairs of u16 (cuda/quant.cuh); Q4_1 / Q5_1 (20 / 24 bytes: scale, min, ...) allow 4- / 8-byte
//! loads. Their batch-1 GEMVs were the slowest (docs/benchmarks.md, session 19). Packed, 8
//! consecutive blocks of a row become one super-block of the same bytes with each field of the
//! 8 blocks together, in the block's field order: the 8 scales (16 bytes), Q4_1 / Q5_1's 8 mins
//! (16 bytes), Q5_0 / Q5_1's 8 qh words (32 bytes), the 8 blocks' codes (16 or 32 bytes each).
//! Field f of block c, at byte `o_f` of a GGML block with size `s_f`, lands at `8 o_f + c s_f`.
//! Rows are whole super-blocks (144 / 160 / 176 / 192 / 272 bytes, multiples of 16) and
//! allocations 256-byte aligned, so every field is 16-byte aligned: the kernels read codes as
//! `uint4` (`QQP`, `MQP`, `MMQP`, `matmul_gemv_<fmt>p_m1_reg[f]`).
//!
//! Invariants: a packed buffer keeps its GGML `dtype` and byte length (`Backend::len`); only the
//! CUDA backend's kernel choice and raw transfers see the flag (`CudaBuffer::packed`):
//! `download_raw` returns the GGML bytes, `write_raw_at` into a packed buffer is refused.

use crate::backend::DType;
use crate::backend::reference::ggml_quant::GgmlType;

/// The formats that pack, in the order of the packed tails of the kernel entry tables
/// (bindings.rs `entry_w`).
pub const PACKED_DTYPES: [DType; 5] = [
    DType::Ggml(GgmlType::Q4_0),
    DType::Ggml(GgmlType::Q4_1),
    DType::Ggml(GgmlType::Q5_0),
    DType::Ggml(GgmlType::Q5_1),
    DType::Ggml(GgmlType::Q8_0),
];

/// Byte sizes of a GGML block's fields, in order, for a format that packs.
fn fields(dtype: DType) -> Option<&'static [usize]> {
    match dtype {
        DType::Ggml(GgmlType::Q4_0) => Some(&[2, 16]),
        DType::Ggml(GgmlType::Q4_1) => Some(&[2, 2, 16]),
        DType::Ggml(GgmlType::Q5_0) => Some(&[2, 4, 16]),
        DType::Ggml(GgmlType::Q5_1) => Some(&[2, 2, 4, 16]),
        DType::Ggml(GgmlType::Q8_0) => Some(&[2, 32]),
        _ => None,
    }
}

/// Whether a `[rows][k]` matrix of `dtype` is stored packed: a 32-element format with k a whole
/// number of 256-element super-blocks (8 blocks never straddle a row), unless packing is off.
pub fn packs(dtype: DType, k: usize, on: bool) -> bool {
    on && fields(dtype).is_some() && k > 0 && k.is_multiple_of(256)
}

/// GGML bytes of a format that packs (a whole number of 8-block groups) <-> the packed layout.
fn permute(dtype: DType, src: &[u8], to_packed: bool) -> Vec<u8> {
    let f = fields(dtype).expect("a format that packs");
    let block: usize = f.iter().sum();
    let sup = 8 * block;
    debug_assert!(src.len().is_multiple_of(sup));
    let mut out = vec![0u8; src.len()];
    for (s, d) in src.chunks_exact(sup).zip(out.chunks_exact_mut(sup)) {
        let mut o = 0;
        for &size in f {
            for c in 0..8 {
                let (g, p) = (c * block + o, 8 * o + c * size);
                let (from, to) = if to_packed { (g, p) } else { (p, g) };
                d[to..to + size].copy_from_slice(&s[from..from + size]);
            }
            o += size;
        }
    }
    out
}

/// GGML bytes -> the packed layout.
pub fn pack(dtype: DType, ggml: &[u8]) -> Vec<u8> {
    permute(dtype, ggml, true)
}

/// The packed layout -> GGML bytes ([`pack`]'s inverse).
pub fn unpack(dtype: DType, packed: &[u8]) -> Vec<u8> {
    permute(dtype, packed, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::reference::weight_quant;

    /// Each block's scale lands at bytes 2c of its super-block, a min at 16 + 2c, the fifth bits
    /// at 16 + 4c (32 + 4c after mins), its codes after all of those; the round trip gives the
    /// GGML bytes back.
    #[test]
    fn pack_places_each_field_together_and_unpacks() {
        let g = DType::Ggml;
        for (dt, block, min, qh, codes) in [
            (g(GgmlType::Q4_0), 18, false, None, (16, 16)),
            (g(GgmlType::Q4_1), 20, true, None, (32, 16)),
            (g(GgmlType::Q5_0), 22, false, Some(16), (48, 16)),
            (g(GgmlType::Q5_1), 24, true, Some(32), (64, 16)),
            (g(GgmlType::Q8_0), 34, false, None, (16, 32)),
        ] {
            let (rows, k) = (3, 512);
            let ggml = weight_quant::random_weights(dt, rows, k, 7).expect("whole blocks");
            assert_eq!(ggml.len(), rows * k / 32 * block);
            let p = pack(dt, &ggml);
            let sup = 8 * block;
            for blk in 0..rows * k / 32 {
                let (sb, c) = (blk / 8, blk % 8);
                let b = &ggml[blk * block..(blk + 1) * block];
                let at = |o: usize, n: usize| &p[sb * sup + o..sb * sup + o + n];
                assert_eq!(at(2 * c, 2), &b[..2], "{dt:?} scale of block {blk}");
                let mut o = 2;
                if min {
                    assert_eq!(at(16 + 2 * c, 2), &b[2..4], "{dt:?} min of block {blk}");
                    o = 4;
                }
                if let Some(q) = qh {
                    assert_eq!(at(q + 4 * c, 4), &b[o..o + 4], "{dt:?} fifth bits of block {blk}");
                }
                assert_eq!(at(codes.0 + codes.1 * c, codes.1), &b[block - codes.1..], "{dt:?} codes of block {blk}");
            }
            assert_eq!(unpack(dt, &p), ggml, "{dt:?}");
        }
    }

    #[test]
    fn only_the_32_element_formats_of_whole_super_blocks_pack() {
        let g = DType::Ggml;
        for t in [GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0] {
            assert!(packs(g(t), 256, true) && packs(g(t), 4096, true) && packs(g(t), 14336, true));
            assert!(!packs(g(t), 576, true) && !packs(g(t), 32, true) && !packs(g(t), 0, true));
            assert!(!packs(g(t), 4096, false), "off");
        }
        for d in [g(GgmlType::Q4_K), g(GgmlType::Q5_K), g(GgmlType::Q6_K), DType::I8Row, DType::F8Row] {
            assert!(!packs(d, 4096, true), "{d:?}");
        }
    }
}
