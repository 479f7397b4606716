//! Launches of the elementwise and row ops: embed (float and quantized tables), rmsnorm/add_rmsnorm, add, silu_mul,
//! gelu_tanh_mul, head_rmsnorm, scale,
//! gather_rows, mean_rows, argmax, sample, fill_random (cuda/<op>.cu). Each checks its buffers first.

use super::bindings::{self as k, entry_in};
use super::context::{Launch, err};
use super::{CudaBackend, CudaBuffer, need, need_float, need_weights};
use crate::backend::*;
use crate::error::Result;

fn u(x: u32) -> usize {
    x as usize
}

pub fn embed(
    be: &CudaBackend,
    p: &EmbedParams,
    table: &CudaBuffer,
    ids: &CudaBuffer,
    out: &mut CudaBuffer,
) -> Result<()> {
    let (n, d) = (u(p.n_tokens), u(p.dim));
    need(ids, DType::U32, n, "embed ids")?;
    need(out, DType::F32, n * d, "embed out")?;
    let name = k::entry_w(k::embed::ENTRIES, &k::embed_dtypes(), table, 0, 1)?;
    let l = match table.dtype {
        DType::Ggml(t) => {
            need_weights(table, u(p.vocab), d, "embed table")?;
            // One thread per decode chunk: 64 weights of a K-quant, 32 of the others (a packed
            // super-block's 8 chunks are its 8 blocks: the same count).
            let chunks = (d / t.block_size()) * if t.block_size() == 256 { 4 } else { 1 };
            Launch::new((chunks.div_ceil(64) as u32, n as u32, 1), 64)
        }
        DType::I8Row | DType::F8Row => {
            need_weights(table, u(p.vocab), d, "embed table")?;
            Launch::new((d.div_ceil(256) as u32, n as u32, 1), 256)
        }
        _ => {
            need_float(table, u(p.vocab) * d, "embed table")?;
            Launch::new((d.div_ceil(256) as u32, n as u32, 1), 256)
        }
    };
    k::embed::launch_variant(be.gpu(), name, l, p, k::embed::Args { t: table, ids, out })
}

pub fn rmsnorm(
    be: &CudaBackend,
    p: &RmsnormParams,
    residual: Option<&mut CudaBuffer>,
    x: &CudaBuffer,
    w: &CudaBuffer,
    out: &mut CudaBuffer,
) -> Result<()> {
    let n = u(p.rows) * u(p.dim);
    need(x, DType::F32, n, "rmsnorm x")?;
    need(w, DType::F32, u(p.dim), "rmsnorm w")?;
    need_act(be, out, u(p.rows), u(p.dim), "rmsnorm out")?;
    // One block a row: 1024 threads while rows are few (a decode step), 256 for long launches
    // (a prefill), whose rows then overlap four times as many blocks a multiprocessor.
    let l = Launch::new((p.rows, 1, 1), if p.rows >= 1024 { 256 } else { 1024 });
    match residual {
        None => {
            let name = entry_in(k::rmsnorm::ENTRIES, &k::ACT_DTYPES, out.dtype, 0, 1)?;
            k::rmsnorm::launch_variant(be.gpu(), name, l, p, k::rmsnorm::Args { x, w, out })
        }
        Some(res) => {
            need(res, DType::F32, n, "add_rmsnorm residual")?;
            let name = entry_in(k::add_rmsnorm::ENTRIES, &k::ACT_DTYPES, out.dtype, 0, 1)?;
            k::add_rmsnorm::launch_variant(be.gpu(), name, l, p, k::add_rmsnorm::Args { res, x, w, out })
        }
    }
}

/// The out of an activation op (rmsnorm, add_rmsnorm, silu_mul) of `rows` x `dim`: f32, 16-bit
/// (Caps::act16_from), or one row of x8 digits (DType::X8, Caps::act_x8_dtypes: dim a multiple of
/// 4 up to act_x8_max_k, x8_bytes(dim) bytes).
fn need_act(be: &CudaBackend, out: &CudaBuffer, rows: usize, dim: usize, what: &str) -> Result<()> {
    if out.dtype != DType::X8 {
        return need_float(out, rows * dim, what);
    }
    if rows != 1 || !be.caps().x8_row_fits(dim) {
        let max = be.caps().act_x8_max_k;
        return Err(err(format!("{what}: an X8 out is one row of a multiple of 4 up to {max}, not {rows} x {dim}")));
    }
    need(out, DType::X8, x8_bytes(dim), what)
}

pub fn add(be: &CudaBackend, p: &AddParams, a: &mut CudaBuffer, b: &CudaBuffer) -> Result<()> {
    need(a, DType::F32, u(p.n), "add a")?;
    need(b, DType::F32, u(p.n), "add b")?;
    k::add::launch(be.gpu(), Launch::elems(u(p.n)), p, k::add::Args { a, b })
}

pub fn silu_mul(be: &CudaBackend, p: &SiluMulParams, gate_up: &CudaBuffer, out: &mut CudaBuffer) -> Result<()> {
    let n = u(p.rows) * u(p.dim);
    // gate_up f32, or 16-bit as the gate|up GEMM wrote it (Backend::matmul_out16_dtype) with out
    // in the same dtype.
    let in16 = matches!(gate_up.dtype, DType::F16 | DType::BF16);
    if in16 {
        need(gate_up, gate_up.dtype, 2 * n, "silu_mul gate_up")?;
        need(out, gate_up.dtype, n, "silu_mul out")?;
    } else {
        need(gate_up, DType::F32, 2 * n, "silu_mul gate_up")?;
        need_act(be, out, u(p.rows), u(p.dim), "silu_mul out")?;
    }
    if n == 0 {
        return Ok(());
    }
    // 4 columns a thread (an X8 row: a word of 4 elements, whole blocks of 32; 8 for wide 16-bit
    // rows), 256 threads a block along the row; rows over y (strided past 65535).
    let cols = if out.dtype == DType::X8 { 32 * u(p.dim).div_ceil(32) } else { u(p.dim) };
    // 16-bit rows of a multiple of 8 on 16-byte boundaries: 8 columns a thread, 16-byte accesses.
    let wide = in16 && p.dim.is_multiple_of(8) && gate_up.ptr().is_multiple_of(16) && out.ptr().is_multiple_of(16);
    let per = if wide { 8 } else { 4 };
    let l = Launch::new((cols.div_ceil(256 * per) as u32, p.rows.min(65535), 1), 256);
    if in16 {
        let name = k::silu_mul_in16::ENTRIES[usize::from(gate_up.dtype == DType::BF16) + 2 * usize::from(wide)];
        return k::silu_mul_in16::launch_variant(be.gpu(), name, l, p, k::silu_mul_in16::Args { gu: gate_up, out });
    }
    let name = entry_in(k::silu_mul::ENTRIES, &k::ACT_DTYPES, out.dtype, 0, 1)?;
    k::silu_mul::launch_variant(be.gpu(), name, l, p, k::silu_mul::Args { gu: gate_up, out })
}

pub fn gelu_tanh_mul(
    be: &CudaBackend,
    p: &GeluTanhMulParams,
    gate_up: &CudaBuffer,
    out: &mut CudaBuffer,
) -> Result<()> {
    let n = u(p.rows) * u(p.dim);
    need(gate_up, DType::F32, 2 * n, "gelu_tanh_mul gate_up")?;
    need(out, DType::F32, n, "gelu_tanh_mul out")?;
    k::gelu_tanh_mul::launch(be.gpu(), Launch::elems(n), p, k::gelu_tanh_mul::Args { gu: gate_up, out })
}

pub fn head_rmsnorm(be: &CudaBackend, p: &HeadRmsnormParams, x: &mut CudaBuffer, w: &CudaBuffer) -> Result<()> {
    let (r, nh, hd) = (u(p.rows), u(p.n_heads), u(p.head_dim));
    if nh * hd > u(p.row_stride) {
        return Err(err("head_rmsnorm: the heads do not fit in a row"));
    }
    need(x, DType::F32, r * u(p.row_stride), "head_rmsnorm x")?;
    need(w, DType::F32, nh * hd, "head_rmsnorm w")?;
    if r * nh == 0 {
        return Ok(());
    }
    let l = Launch::new(((r * nh) as u32, 1, 1), 256);
    k::head_rmsnorm::launch(be.gpu(), l, p, k::head_rmsnorm::Args { x, w })
}

pub fn scale(be: &CudaBackend, p: &ScaleParams, x: &mut CudaBuffer) -> Result<()> {
    need(x, DType::F32, u(p.n), "scale x")?;
    k::scale::launch(be.gpu(), Launch::elems(u(p.n)), p, k::scale::Args { x })
}

pub fn gather_rows(
    be: &CudaBackend,
    p: &GatherRowsParams,
    src: &CudaBuffer,
    rows: &CudaBuffer,
    out: &mut CudaBuffer,
) -> Result<()> {
    let (n, d) = (u(p.n_out), u(p.dim));
    need(src, DType::F32, u(p.n_src) * d, "gather_rows src")?;
    need(rows, DType::U32, n, "gather_rows rows")?;
    need(out, DType::F32, n * d, "gather_rows out")?;
    let l = Launch::new((d.div_ceil(256) as u32, n as u32, 1), 256);
    k::gather_rows::launch(be.gpu(), l, p, k::gather_rows::Args { src, rows, out })
}

pub fn mean_rows(
    be: &CudaBackend,
    p: &MeanRowsParams,
    src: &CudaBuffer,
    indptr: &CudaBuffer,
    out: &mut CudaBuffer,
) -> Result<()> {
    let (n, d) = (u(p.n_out), u(p.dim));
    need(src, DType::F32, u(p.n_src) * d, "mean_rows src")?;
    need(indptr, DType::U32, n + 1, "mean_rows indptr")?;
    need(out, DType::F32, n * d, "mean_rows out")?;
    if n == 0 || d == 0 {
        return Ok(());
    }
    let l = Launch::new((d.div_ceil(256) as u32, n as u32, 1), 256);
    k::mean_rows::launch(be.gpu(), l, p, k::mean_rows::Args { src, indptr, out })
}

pub fn argmax(be: &CudaBackend, p: &ArgmaxParams, x: &CudaBuffer, out: &mut CudaBuffer) -> Result<()> {
    need(x, DType::F32, u(p.rows) * u(p.n), "argmax x")?;
    need(out, DType::U32, u(p.rows), "argmax out")?;
    if p.rows == 0 {
        return Ok(());
    }
    let g = be.gpu();
    let parts = p.parts();
    let part = k::Scratch(g.scratch("argmax_part", u(p.rows) * parts * 8)?);
    k::argmax_part::launch(g, Launch::new((p.rows, parts as u32, 1), 1024), p, k::argmax_part::Args { x, part })?;
    let args = k::argmax::Args { part, out, parts: parts as u32 };
    k::argmax::launch(g, Launch::new((p.rows, 1, 1), 256), p, args)
}

/// One block of [`SAMPLE_THREADS`] per row (cuda/sample.cu).
pub fn sample(
    be: &CudaBackend,
    p: &SampleParams,
    logits: &CudaBuffer,
    settings: &CudaBuffer,
    out: &mut CudaBuffer,
) -> Result<()> {
    need(logits, DType::F32, u(p.rows) * u(p.n), "sample logits")?;
    need(settings, DType::U32, 4 * u(p.rows), "sample settings")?;
    need(out, DType::U32, u(p.rows), "sample out")?;
    let l = Launch::new((p.rows, 1, 1), SAMPLE_THREADS);
    k::sample::launch(be.gpu(), l, p, k::sample::Args { x: logits, settings, out })
}

/// Threads per block of `sample` (the kernel's shared arrays hold one slot per warp).
const SAMPLE_THREADS: u32 = 512;

pub fn fill_random(be: &CudaBackend, p: &FillRandomParams, out: &mut CudaBuffer) -> Result<()> {
    let want = match p.dtype {
        0 => DType::F32,
        1 => DType::F16,
        2 => DType::BF16,
        d => return Err(err(format!("fill_random: dtype code {d} (0 = f32, 1 = f16, 2 = bf16)"))),
    };
    // An 8-bit KV pool is filled as f32 words (benchmark data: its codes and scales are then
    // arbitrary bytes).
    if !(want == DType::F32 && out.dtype.is_kv8() && out.len >= 4 * u(p.n)) {
        need(out, want, u(p.n), "fill_random out")?;
    }
    k::fill_random::launch(be.gpu(), Launch::elems(u(p.n)), p, k::fill_random::Args { out })
}
