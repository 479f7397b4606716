//! Q8_0 weights in 16-byte-aligned super-blocks (`q8_0p`): how the CUDA backend stores a Q8_0
//! matrix whose rows are whole 256-element super-blocks (`Backend::upload_weight` with k % 256
//! == 0).
//!
//! A GGML Q8_0 block is 34 bytes (an f16 scale, then 32 int8 codes), so its codes sit at 2-byte
//! alignment and every kernel reads them as pairs of u16 (cuda/quant.cuh); the batch-1 Q8_0 GEMV
//! was the slowest of the 8-bit formats (docs/benchmarks.md, session 19). Packed, 8 consecutive
//! blocks of a row become one 272-byte super-block: their 8 scales (16 bytes), then their 8 x 32
//! codes. Same bytes, same values, every run of codes 16-byte aligned (rows are 272 (k / 256)
//! bytes, allocations 256-byte aligned): the kernels read them as `uint4` (`QQ8_0P`, `MQ8_0P`,
//! `MMQ8_0P`, `matmul_gemv_q8_0p_m1_reg[f]`).
//!
//! Invariants: a packed buffer keeps `dtype == Q8_0` and its byte length (`Backend::len`); only
//! the CUDA backend's kernel choice and raw transfers see the flag (`CudaBuffer::packed`):
//! `download_raw` returns the GGML bytes, `write_raw_at` into a packed buffer is refused.

use crate::backend::DType;
use crate::backend::reference::ggml_quant::GgmlType;

/// Bytes of a GGML Q8_0 block and of a packed super-block of 8 of them.
const BLOCK: usize = 34;
const SUPER: usize = 8 * BLOCK;

/// Whether a `[rows][k]` matrix of `dtype` is stored packed: Q8_0 with k a whole number of 256-
/// element super-blocks (8 blocks never straddle a row), unless packing is off.
pub fn packs(dtype: DType, k: usize, on: bool) -> bool {
    on && dtype == DType::Ggml(GgmlType::Q8_0) && k > 0 && k.is_multiple_of(256)
}

/// GGML Q8_0 bytes (a whole number of 8-block groups) -> the packed layout.
pub fn pack(ggml: &[u8]) -> Vec<u8> {
    debug_assert!(ggml.len().is_multiple_of(SUPER));
    let mut out = vec![0u8; ggml.len()];
    for (src, dst) in ggml.chunks_exact(SUPER).zip(out.chunks_exact_mut(SUPER)) {
        for (c, b) in src.chunks_exact(BLOCK).enumerate() {
            dst[2 * c..2 * c + 2].copy_from_slice(&b[..2]);
            dst[16 + 32 * c..16 + 32 * c + 32].copy_from_slice(&b[2..]);
        }
    }
    out
}

/// The packed layout -> GGML Q8_0 bytes ([`pack`]'s inverse).
pub fn unpack(packed: &[u8]) -> Vec<u8> {
    debug_assert!(packed.len().is_multiple_of(SUPER));
    let mut out = vec![0u8; packed.len()];
    for (src, dst) in packed.chunks_exact(SUPER).zip(out.chunks_exact_mut(SUPER)) {
        for (c, b) in dst.chunks_exact_mut(BLOCK).enumerate() {
            b[..2].copy_from_slice(&src[2 * c..2 * c + 2]);
            b[2..].copy_from_slice(&src[16 + 32 * c..16 + 32 * c + 32]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::reference::weight_quant;

    /// Each block's scale lands at bytes 2c of its super-block and its codes at 16 + 32c; the
    /// round trip gives the GGML bytes back.
    #[test]
    fn pack_places_scales_then_codes_and_unpacks() {
        let q8 = DType::Ggml(GgmlType::Q8_0);
        let (rows, k) = (3, 512);
        let ggml = weight_quant::random_weights(q8, rows, k, 7).expect("whole blocks");
        assert_eq!(ggml.len(), rows * k / 32 * BLOCK);
        let p = pack(&ggml);
        for blk in 0..rows * k / 32 {
            let (sb, c) = (blk / 8, blk % 8);
            let b = &ggml[blk * BLOCK..(blk + 1) * BLOCK];
            assert_eq!(&p[sb * SUPER + 2 * c..sb * SUPER + 2 * c + 2], &b[..2], "scale of block {blk}");
            assert_eq!(&p[sb * SUPER + 16 + 32 * c..sb * SUPER + 48 + 32 * c], &b[2..], "codes of block {blk}");
        }
        assert_eq!(unpack(&p), ggml);
    }

    #[test]
    fn only_q8_0_rows_of_whole_super_blocks_pack() {
        let q8 = DType::Ggml(GgmlType::Q8_0);
        assert!(packs(q8, 256, true) && packs(q8, 4096, true) && packs(q8, 14336, true));
        assert!(!packs(q8, 576, true) && !packs(q8, 32, true) && !packs(q8, 0, true));
        assert!(!packs(q8, 4096, false), "off");
        assert!(!packs(DType::Ggml(GgmlType::Q4_0), 4096, true) && !packs(DType::I8Row, 4096, true));
    }
}
