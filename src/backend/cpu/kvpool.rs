//! Typed views of a KV pool buffer for the CPU reference: f32 pools are read in place, 8-bit
//! pools (`CpuBuffer::Bytes`) are quantized on write and dequantized on read through
//! [`crate::backend::reference::kv_quant`], which defines the stored bytes every backend reproduces.
//!
//! Rows are addressed by their element offset `at = row * head_dim` (row = `(page * heads +
//! head) * page_size + token`), the same offsets the f32 code computes, so the attention and
//! append code is one path for every KV dtype.

use super::{CpuBuffer, err};
use crate::backend::reference::kv_quant as quant;
use crate::backend::{DType, kv_pool_len};
use crate::error::Result;

/// A read-only pool.
pub enum PoolRef<'a> {
    F32(&'a [f32]),
    Kv8 { dtype: DType, bytes: &'a [u8], ps: usize, hd: usize },
}

/// A writable pool.
pub enum PoolMut<'a> {
    F32(&'a mut [f32]),
    Kv8 { dtype: DType, bytes: &'a mut [u8], ps: usize, hd: usize },
}

/// A pool of `rows` token rows (page_size `ps`, head_dim `hd`), checked against the buffer.
pub fn pool<'a>(b: &'a CpuBuffer, rows: usize, ps: usize, hd: usize, what: &str) -> Result<PoolRef<'a>> {
    match b {
        CpuBuffer::Bytes(dtype, v) if dtype.is_kv8() => {
            let need = kv_pool_len(*dtype, rows, hd);
            let bytes = v.get(..need).ok_or_else(|| err(format!("{what}: {} bytes, op needs {need}", v.len())))?;
            Ok(PoolRef::Kv8 { dtype: *dtype, bytes, ps, hd })
        }
        _ => Ok(PoolRef::F32(super::f32s(b, rows * hd, what)?)),
    }
}

pub fn pool_mut<'a>(b: &'a mut CpuBuffer, rows: usize, ps: usize, hd: usize, what: &str) -> Result<PoolMut<'a>> {
    if !matches!(b, CpuBuffer::Bytes(d, _) if d.is_kv8()) {
        return Ok(PoolMut::F32(super::f32s_mut(b, rows * hd, what)?));
    }
    match b {
        CpuBuffer::Bytes(dtype, v) => {
            let need = kv_pool_len(*dtype, rows, hd);
            let have = v.len();
            let bytes = v.get_mut(..need).ok_or_else(|| err(format!("{what}: {have} bytes, op needs {need}")))?;
            Ok(PoolMut::Kv8 { dtype: *dtype, bytes, ps, hd })
        }
        _ => Ok(PoolMut::F32(super::f32s_mut(b, rows * hd, what)?)),
    }
}

fn read_row<'s>(dtype: DType, bytes: &[u8], ps: usize, hd: usize, at: usize, buf: &'s mut Vec<f32>) -> &'s [f32] {
    let (c, s) = quant::row_offsets(at / hd, ps, hd);
    let scale = f32::from_le_bytes(bytes[s..s + 4].try_into().expect("4 bytes"));
    buf.resize(hd, 0.0);
    quant::dequantize_row(dtype, &bytes[c..c + hd], scale, buf);
    buf
}

impl PoolRef<'_> {
    /// The (dequantized) row at element offset `at`; `buf` is scratch for the 8-bit types.
    pub fn row<'s>(&'s self, at: usize, hd: usize, buf: &'s mut Vec<f32>) -> &'s [f32] {
        match self {
            PoolRef::F32(v) => &v[at..at + hd],
            PoolRef::Kv8 { dtype, bytes, ps, hd } => read_row(*dtype, bytes, *ps, *hd, at, buf),
        }
    }

    /// The f32 rows `[n][hd]` at element offset `at` of an f32 pool (None for 8-bit pools).
    pub fn f32_rows(&self, at: usize, n: usize, hd: usize) -> Option<&[f32]> {
        match self {
            PoolRef::F32(v) => v.get(at..at + n * hd),
            PoolRef::Kv8 { .. } => None,
        }
    }

    /// `n` consecutive rows from element offset `at`, `[n][hd]`: f32 pools in place, 8-bit pools
    /// dequantized row by row into `buf` (each row exactly as [`PoolRef::row`] reads it).
    pub fn rows<'s>(&'s self, at: usize, n: usize, hd: usize, buf: &'s mut Vec<f32>) -> &'s [f32] {
        match self {
            PoolRef::F32(v) => &v[at..at + n * hd],
            PoolRef::Kv8 { dtype, bytes, ps, hd } => {
                buf.resize(n * hd, 0.0);
                for (r, out) in buf.chunks_exact_mut(*hd).enumerate() {
                    let (c, s) = quant::row_offsets(at / hd + r, *ps, *hd);
                    let scale = f32::from_le_bytes(bytes[s..s + 4].try_into().expect("4 bytes"));
                    quant::dequantize_row(*dtype, &bytes[c..c + hd], scale, out);
                }
                buf
            }
        }
    }
}

impl PoolMut<'_> {
    /// Store row `x` at element offset `at` (quantizing it for the 8-bit types).
    pub fn store(&mut self, at: usize, x: &[f32]) {
        match self {
            PoolMut::F32(v) => v[at..at + x.len()].copy_from_slice(x),
            PoolMut::Kv8 { dtype, bytes, ps, hd } => {
                let (c, s) = quant::row_offsets(at / *hd, *ps, *hd);
                let scale = quant::quantize_row(*dtype, x, &mut bytes[c..c + *hd]);
                bytes[s..s + 4].copy_from_slice(&scale.to_le_bytes());
            }
        }
    }
    /// The stored (dequantized) row at element offset `at`.
    pub fn row<'s>(&'s self, at: usize, hd: usize, buf: &'s mut Vec<f32>) -> &'s [f32] {
        match self {
            PoolMut::F32(v) => &v[at..at + hd],
            PoolMut::Kv8 { dtype, bytes, ps, hd } => read_row(*dtype, bytes, *ps, *hd, at, buf),
        }
    }
}
