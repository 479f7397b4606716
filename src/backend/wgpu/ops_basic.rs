//! Recording of the elementwise and row ops: embed, rmsnorm / add_rmsnorm, add, silu_mul,
//! gelu_tanh_mul, head_rmsnorm, scale,
//! gather_rows, mean_rows, argmax, sample (shaders/<op>.wgsl).

use super::context::err;
use super::pipelines as pl;
use super::{WgpuBackend, WgpuBuffer, need, need_weights};
use crate::backend::*;
use crate::error::Result;

/// Workgroups for `n` threads of 256, folded into 2D when over the per-dimension limit; shaders
/// index `gid.x + gid.y * num_workgroups.x * 256`.
pub(crate) fn grid(be: &WgpuBackend, threads: usize) -> (u32, u32, u32) {
    rows_grid(be, threads.div_ceil(256))
}

/// Workgroups for one workgroup per row (`wg.x + wg.y * num_workgroups.x`).
pub(crate) fn rows_grid(be: &WgpuBackend, groups: usize) -> (u32, u32, u32) {
    let max = be.gpu().limits.max_compute_workgroups_per_dimension as usize;
    if groups <= max { (groups as u32, 1, 1) } else { (max as u32, groups.div_ceil(max) as u32, 1) }
}

fn u(x: u32) -> usize {
    x as usize
}

pub fn embed(
    be: &WgpuBackend,
    p: &EmbedParams,
    table: &WgpuBuffer,
    ids: &WgpuBuffer,
    out: &mut WgpuBuffer,
) -> Result<()> {
    let (n, d) = (u(p.n_tokens), u(p.dim));
    need_weights(table, u(p.vocab), d, "embed table")?;
    need(ids, DType::U32, n, "embed ids")?;
    need(out, DType::F32, n * d, "embed out")?;
    if p.vocab == 0 {
        return Err(err("embed: empty vocabulary"));
    }
    let binds = pl::embed::Binds { w: table, ids, out };
    pl::embed::dispatch(be.gpu(), Some(table.dtype), p, binds, grid(be, n * d))
}

pub fn rmsnorm(
    be: &WgpuBackend,
    p: &RmsnormParams,
    residual: Option<&mut WgpuBuffer>,
    x: &WgpuBuffer,
    w: &WgpuBuffer,
    out: &mut WgpuBuffer,
) -> Result<()> {
    let (r, d) = (u(p.rows), u(p.dim));
    need(x, DType::F32, r * d, "rmsnorm x")?;
    need(w, DType::F32, d, "rmsnorm w")?;
    let x8 = need_act(be, out, r, d, "rmsnorm out")?;
    let grid = rows_grid(be, r);
    match residual {
        None => {
            let (op, grid) = if x8 { (pl::rmsnorm::X8, norm_x8_grid(d)) } else { (pl::rmsnorm::OP, grid) };
            pl::rmsnorm::dispatch_variant(be.gpu(), op, None, p, pl::rmsnorm::Binds { x, wn: w, out }, grid)
        }
        Some(residual) => {
            need(residual, DType::F32, r * d, "add_rmsnorm residual")?;
            let op = if x8 { pl::add_rmsnorm::X8 } else { pl::add_rmsnorm::OP };
            let binds = pl::add_rmsnorm::Binds { residual, x, wn: w, out };
            pl::add_rmsnorm::dispatch_variant(be.gpu(), op, None, p, binds, grid)
        }
    }
}

/// Workgroups of `rmsnorm_x8` over one row of `dim`: one per round of 1,024 elements where the
/// row is held in registers (up to 8 rounds: each workgroup sums the whole row and quantizes its
/// round, shaders/row_norm_x8.wgsl), else one.
fn norm_x8_grid(dim: usize) -> (u32, u32, u32) {
    let rounds = dim.div_ceil(1024);
    (if rounds <= 8 { rounds.max(1) as u32 } else { 1 }, 1, 1)
}

/// The out of an activation op (the norms, silu_mul): `rows * dim` f32, or one row of x8 digits
/// (DType::X8, `Caps::act_x8_dtypes`: dim a row length `Caps::x8_row_fits` takes, x8_bytes(dim)
/// bytes). Whether it is X8.
pub(crate) fn need_act(be: &WgpuBackend, out: &WgpuBuffer, rows: usize, dim: usize, what: &str) -> Result<bool> {
    if out.dtype != DType::X8 {
        need(out, DType::F32, rows * dim, what)?;
        return Ok(false);
    }
    let c = be.caps();
    if rows != 1 || !c.x8_row_fits(dim) {
        return Err(err(format!(
            "{what}: an X8 out is one row of a multiple of {} up to {}, not {rows} x {dim}",
            c.act_x8_k_multiple, c.act_x8_max_k
        )));
    }
    need(out, DType::X8, x8_bytes(dim), what)?;
    Ok(true)
}

pub fn add(be: &WgpuBackend, p: &AddParams, a: &mut WgpuBuffer, b: &WgpuBuffer) -> Result<()> {
    need(a, DType::F32, u(p.n), "add a")?;
    need(b, DType::F32, u(p.n), "add b")?;
    pl::add::dispatch(be.gpu(), None, p, pl::add::Binds { a, b }, grid(be, u(p.n)))
}

pub fn silu_mul(be: &WgpuBackend, p: &SiluMulParams, gate_up: &WgpuBuffer, out: &mut WgpuBuffer) -> Result<()> {
    let (r, d) = (u(p.rows), u(p.dim));
    need(gate_up, DType::F32, r * 2 * d, "silu_mul gate_up")?;
    let binds = pl::silu_mul::Binds { gate_up, out };
    if need_act(be, binds.out, r, d, "silu_mul out")? {
        // A thread per vec4 of the row (silu_mul_x8.wgsl).
        return pl::silu_mul::dispatch_variant(be.gpu(), pl::silu_mul::X8, None, p, binds, grid(be, d / 4));
    }
    pl::silu_mul::dispatch(be.gpu(), None, p, binds, grid(be, r * d))
}

pub fn gelu_tanh_mul(
    be: &WgpuBackend,
    p: &GeluTanhMulParams,
    gate_up: &WgpuBuffer,
    out: &mut WgpuBuffer,
) -> Result<()> {
    let (r, d) = (u(p.rows), u(p.dim));
    need(gate_up, DType::F32, r * 2 * d, "gelu_tanh_mul gate_up")?;
    need(out, DType::F32, r * d, "gelu_tanh_mul out")?;
    pl::gelu_tanh_mul::dispatch(be.gpu(), None, p, pl::gelu_tanh_mul::Binds { gate_up, out }, grid(be, r * d))
}

pub fn head_rmsnorm(be: &WgpuBackend, p: &HeadRmsnormParams, x: &mut WgpuBuffer, w: &WgpuBuffer) -> Result<()> {
    let (r, nh, hd) = (u(p.rows), u(p.n_heads), u(p.head_dim));
    if nh * hd > u(p.row_stride) {
        return Err(err("head_rmsnorm: the heads do not fit in a row"));
    }
    need(x, DType::F32, r * u(p.row_stride), "head_rmsnorm x")?;
    need(w, DType::F32, nh * hd, "head_rmsnorm w")?;
    pl::head_rmsnorm::dispatch(be.gpu(), None, p, pl::head_rmsnorm::Binds { x, wn: w }, rows_grid(be, r * nh))
}

pub fn scale(be: &WgpuBackend, p: &ScaleParams, x: &mut WgpuBuffer) -> Result<()> {
    need(x, DType::F32, u(p.n), "scale x")?;
    pl::scale::dispatch(be.gpu(), None, p, pl::scale::Binds { x }, grid(be, u(p.n)))
}

pub fn gather_rows(
    be: &WgpuBackend,
    p: &GatherRowsParams,
    src: &WgpuBuffer,
    rows: &WgpuBuffer,
    out: &mut WgpuBuffer,
) -> Result<()> {
    let (n, d) = (u(p.n_out), u(p.dim));
    need(src, DType::F32, u(p.n_src) * d, "gather_rows src")?;
    need(rows, DType::U32, n, "gather_rows rows")?;
    need(out, DType::F32, n * d, "gather_rows out")?;
    if p.n_src == 0 {
        return Err(err("gather_rows: empty source"));
    }
    pl::gather_rows::dispatch(be.gpu(), None, p, pl::gather_rows::Binds { src, rows, out }, grid(be, n * d))
}

pub fn mean_rows(
    be: &WgpuBackend,
    p: &MeanRowsParams,
    src: &WgpuBuffer,
    indptr: &WgpuBuffer,
    out: &mut WgpuBuffer,
) -> Result<()> {
    let (n, d) = (u(p.n_out), u(p.dim));
    need(src, DType::F32, u(p.n_src) * d, "mean_rows src")?;
    need(indptr, DType::U32, n + 1, "mean_rows indptr")?;
    need(out, DType::F32, n * d, "mean_rows out")?;
    if n == 0 || d == 0 {
        return Ok(());
    }
    pl::mean_rows::dispatch(be.gpu(), None, p, pl::mean_rows::Binds { src, indptr, out }, grid(be, n * d))
}

pub fn argmax(be: &WgpuBackend, p: &ArgmaxParams, x: &WgpuBuffer, out: &mut WgpuBuffer) -> Result<()> {
    let (r, n) = (u(p.rows), u(p.n));
    need(x, DType::F32, r * n, "argmax x")?;
    need(out, DType::U32, r, "argmax out")?;
    if r == 0 {
        return Ok(());
    }
    // Pass 1: workgroups (part, row), rows past the dimension limit in z; pass 2: one per row.
    let parts = p.parts();
    let max = be.gpu().limits.max_compute_workgroups_per_dimension as usize;
    let (ry, rz) = if r <= max { (r, 1) } else { (max, r.div_ceil(max)) };
    let mut part = be.scratch(2 * r * parts)?;
    let binds = pl::argmax_part::Binds { x, part: &mut part };
    pl::argmax_part::dispatch(be.gpu(), None, p, binds, (parts as u32, ry as u32, rz as u32))?;
    pl::argmax::dispatch(be.gpu(), None, p, pl::argmax::Binds { part: &part, out }, rows_grid(be, r))
}

pub fn sample(
    be: &WgpuBackend,
    p: &SampleParams,
    logits: &WgpuBuffer,
    settings: &WgpuBuffer,
    out: &mut WgpuBuffer,
) -> Result<()> {
    let (r, n) = (u(p.rows), u(p.n));
    need(logits, DType::F32, r * n, "sample logits")?;
    need(settings, DType::U32, 4 * r, "sample settings")?;
    need(out, DType::U32, r, "sample out")?;
    let binds = pl::sample::Binds { x: logits, settings, out };
    pl::sample::dispatch(be.gpu(), None, p, binds, rows_grid(be, r))
}

pub fn fill_random(be: &WgpuBackend, p: &FillRandomParams, out: &mut WgpuBuffer) -> Result<()> {
    let want = match p.dtype {
        0 => DType::F32,
        1 => DType::F16,
        2 => DType::BF16,
        d => return Err(err(format!("fill_random: unknown dtype code {d}"))),
    };
    // An 8-bit KV pool is filled as f32 words (benchmark data: its codes and scales are then
    // arbitrary bytes).
    if !(want == DType::F32 && out.dtype.is_kv8() && out.len >= 4 * u(p.n)) {
        need(out, want, u(p.n), "fill_random out")?;
    }
    let words = if want == DType::F32 { u(p.n) } else { u(p.n).div_ceil(2) };
    pl::fill_random::dispatch(be.gpu(), None, p, pl::fill_random::Binds { out }, grid(be, words))
}
