//! wgpu's device layout of [`DType::X8`] rows and the conversion to and from the trait's layout.
//!
//! The trait lays a row of `nb` blocks of 32 out for CUDA's shared-memory loads (9 words of digits
//! a block, a pad word, and the block's f32 sum of x; `DType::X8`). wgpu's GEMV reads x in
//! 16-byte words, two blocks' halves side by side (shaders/x8_store.wgsl has the layout, which
//! `matmul_gemv_x8_pack` and the ops' `_x8` variants write): with B = nb, words 4i.., 4B + 4i..
//! hold block i's hi digits 0..15 and 16..31, 8B + 4i.. and 12B + 4i.. its lo digits, and 16B +
//! 2i, + 1 its d and code sum sum(hi + lo / 254) (what the GEMV reads), 18B + i its sum of x (the
//! trait's). A buffer keeps the trait's size (80 bytes a block; 76 used). Only host transfers
//! convert ([`to_device`] on upload, which computes the code sums from the digits, and
//! [`from_device`] on download).
//!
//! Invariant: both functions take and give whole rows, `bytes.len() == x8_bytes(k)`, `nb = len /
//! 80`; [`to_device`] then [`from_device`] is the identity.

/// Bytes of the trait's layout a block.
const BLOCK: usize = 80;

fn word(b: &[u8], w: usize) -> u32 {
    u32::from_le_bytes(b[4 * w..4 * w + 4].try_into().expect("4 bytes"))
}

fn put(b: &mut [u8], w: usize, v: u32) {
    b[4 * w..4 * w + 4].copy_from_slice(&v.to_le_bytes());
}

/// Block i's code sum from its digit words (each word's four, in order, as x8_store sums them per
/// thread, then the 8 threads in order).
fn code_sum(hi: [u32; 8], lo: [u32; 8]) -> f32 {
    let digits = |w: u32| (0..4).map(move |j| (w >> (8 * j)) as u8 as i8 as f32);
    let mut sum = 0.0f32;
    for t in 0..8 {
        let h: Vec<f32> = digits(hi[t]).collect();
        let l: Vec<f32> = digits(lo[t]).collect();
        let dot = |v: &[f32], s: f32| ((v[0] * s + v[1] * s) + v[2] * s) + v[3] * s;
        sum += dot(&h, 1.0) + dot(&l, 1.0 / 254.0);
    }
    sum
}

/// The trait's layout to wgpu's.
pub fn to_device(bytes: &[u8]) -> Vec<u8> {
    let nb = bytes.len() / BLOCK;
    let mut out = vec![0u8; bytes.len()];
    for i in 0..nb {
        let hi: [u32; 8] = std::array::from_fn(|t| word(bytes, 9 * i + t));
        let lo: [u32; 8] = std::array::from_fn(|t| word(bytes, 9 * nb + 9 * i + t));
        for t in 0..8 {
            let at = 4 * (i + (t / 4) * nb) + t % 4;
            put(&mut out, at, hi[t]);
            put(&mut out, at + 8 * nb, lo[t]);
        }
        put(&mut out, 16 * nb + 2 * i, word(bytes, 18 * nb + 2 * i));
        put(&mut out, 16 * nb + 2 * i + 1, code_sum(hi, lo).to_bits());
        put(&mut out, 18 * nb + i, word(bytes, 18 * nb + 2 * i + 1));
    }
    out
}

/// wgpu's layout to the trait's (pad words zero).
pub fn from_device(bytes: &[u8]) -> Vec<u8> {
    let nb = bytes.len() / BLOCK;
    let mut out = vec![0u8; bytes.len()];
    for i in 0..nb {
        for t in 0..8 {
            let at = 4 * (i + (t / 4) * nb) + t % 4;
            put(&mut out, 9 * i + t, word(bytes, at));
            put(&mut out, 9 * nb + 9 * i + t, word(bytes, at + 8 * nb));
        }
        put(&mut out, 18 * nb + 2 * i, word(bytes, 16 * nb + 2 * i));
        put(&mut out, 18 * nb + 2 * i + 1, word(bytes, 18 * nb + i));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::reference::weight_quant::{x8_decode, x8_encode};

    /// Seeded x of three blocks (one all zero): to the device layout and back gives the same
    /// bytes, and the device words sit where x8_store puts them.
    #[test]
    fn round_trip_and_placement() {
        let seed = 0x5eed_u64;
        eprintln!("seed {seed:#x}");
        let mut s = seed;
        let mut x: Vec<f32> = (0..96)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 8.0
            })
            .collect();
        x[64..].iter_mut().for_each(|v| *v = 0.0);
        let k = x.len();
        let host = x8_encode(&x);
        let dev = to_device(&host);
        let back = from_device(&dev);
        assert_eq!(back, host);
        assert!(x8_decode(&back, k).is_some());
        let nb = 3;
        for i in 0..nb {
            // Element 17 of block i: hi digit in byte 1 of word 4 of the second half.
            assert_eq!(dev[4 * (4 * nb + 4 * i) + 1], host[4 * 9 * i + 17], "block {i}");
            let f = |b: &[u8], w: usize| f32::from_le_bytes(b[4 * w..4 * w + 4].try_into().unwrap());
            // The code sum: x's sum over d, to a few lo digits' rounding.
            let (d, xsum) = (f(&host, 18 * nb + 2 * i), f(&host, 18 * nb + 2 * i + 1));
            let want = if d > 0.0 { xsum / d } else { 0.0 };
            let got = f(&dev, 16 * nb + 2 * i + 1);
            assert!((got - want).abs() <= 32.0 / 254.0 + 1e-3, "block {i}: code sum {got} vs {want}");
        }
        assert_eq!(&back[4 * 8..4 * 9], &[0; 4], "pad word");
    }
}
