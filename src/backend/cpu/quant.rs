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
//!   for the dequantized matrix, bit for bit.
//! - Larger m (prefill): tiles of `TILE` rows are dequantized and multiplied by the f32 GEMM.

use super::{err, ops};
use crate::backend::reference::weight_quant::{self, GGML_WEIGHT_TYPES};
use crate::backend::{DType, EmbedParams, MatmulParams};
use crate::error::Result;
use rayon::prelude::*;

/// Weight rows dequantized per tile (bounds the f32 scratch at TILE * k floats).
const TILE: usize = 256;
/// Weight rows per rayon task of the small-m path.
const ROW_CHUNK: usize = 16;

/// Every weight type the CPU computes with.
pub fn weight_dtypes() -> Vec<DType> {
    let mut v = vec![DType::F32, DType::I8Row, DType::F8Row];
    v.extend(GGML_WEIGHT_TYPES.iter().map(|&t| DType::Ggml(t)));
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
    res.par_chunks_mut(ROW_CHUNK * m.max(1)).enumerate().try_for_each(|(chunk, res)| {
        let mut w = vec![0f32; k];
        for (i, r) in res.chunks_exact_mut(m.max(1)).enumerate() {
            let c = chunk * ROW_CHUNK + i;
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
    if let Some(bad) = ids.iter().find(|&&i| i >= p.vocab) {
        return Err(err(format!("embed: token id {bad} is outside the vocabulary ({vocab})")));
    }
    for (row, &id) in out.chunks_exact_mut(d.max(1)).zip(ids) {
        weight_quant::dequantize_rows(dt, bytes, vocab, d, id as usize, row).map_err(err)?;
    }
    Ok(())
}
