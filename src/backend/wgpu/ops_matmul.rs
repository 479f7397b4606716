//! Recording of `matmul`: out[m][n] = x[m][k] . w[n][k]^T (+ bias[n]), f32 accumulation.
//!
//! Layout: x `[m][k]` f32, w `[n][k]` in any weight dtype (read through the module's `load_w`),
//! bias `[n]` f32, out `[m][n]` f32. Two kernels:
//! - `matmul_gemv` (m <= [`GEMV_MAX_M`], decode): 16 weight rows per 256-thread workgroup, each
//!   streamed once by a group of 32 lanes and reduced in workgroup memory; up to 8 x rows per pass
//!   over the weights (bandwidth-bound there), further chunks re-read the rows from cache.
//! - `matmul` (larger m, prefill): 128x64 output tiles, k steps of 16, 8x4 per thread.
//!
//! - `matmul_gemv_subgroup` replaces `matmul_gemv` on adapters with SUBGROUP for 16-bit weights
//!   with k % 8 == 0: 8 rows per workgroup, one per subgroup, 16-byte weight loads, `subgroupAdd`.
//!
//! The threshold is where the GEMM wins on an H200: its 128-row tiles leave few workgroups for
//! small m, while the GEMV costs about one weight pass per 8 rows of x.
//!
//! Both take bindings (params, x, w, bias, out); without a bias, x is bound in its place and the
//! shader (has_bias == 0) never reads it. Workgroup counts are folded into 2D by `rows_grid` when
//! over the adapter's per-dimension limit; the shaders index `wg.x + wg.y * num_workgroups.x` and
//! return early, as a whole workgroup, past the last tile.

use super::context::err;
use super::ops_basic::rows_grid;
use super::pipelines as pl;
use super::{WgpuBackend, WgpuBuffer, need, need_weights};
use crate::backend::*;
use crate::error::Result;

/// Largest m served by the GEMV kernel; above it the tiled GEMM is used.
pub const GEMV_MAX_M: usize = 16;
/// Weight rows per GEMV workgroup (`ROWS` in shaders/matmul_gemv.wgsl).
const GEMV_ROWS: usize = 16;
/// Output tile of the GEMM (`BM` x `BN` in shaders/matmul.wgsl).
const TILE_M: usize = 128;
const TILE_N: usize = 64;

pub fn matmul(
    be: &WgpuBackend,
    p: &MatmulParams,
    x: &WgpuBuffer,
    w: &WgpuBuffer,
    bias: Option<&WgpuBuffer>,
    out: &mut WgpuBuffer,
) -> Result<()> {
    let (m, n, k) = (p.m as usize, p.n as usize, p.k as usize);
    need(x, DType::F32, m * k, "matmul x")?;
    need_weights(w, n * k, "matmul w")?;
    need(out, DType::F32, m * n, "matmul out")?;
    let bias = match (p.has_bias, bias) {
        (0, _) => x,
        (_, Some(b)) => {
            need(b, DType::F32, n, "matmul bias")?;
            b
        }
        (_, None) => return Err(err("matmul: has_bias set but no bias buffer given")),
    };
    // Shaders index with u32.
    if [m * k, n * k, m * n].iter().any(|&e| e > u32::MAX as usize) {
        return Err(err(format!("matmul: {m}x{n}x{k} exceeds 32-bit indexing")));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    let pairs = matches!(w.dtype, DType::F16 | DType::BF16) && k % 8 == 0;
    let wd = Some(w.dtype);
    if m <= GEMV_MAX_M && pairs && be.has_subgroup() {
        let binds = pl::matmul_gemv_subgroup::Binds { x, w, bias, out };
        pl::matmul_gemv_subgroup::dispatch(be.gpu(), wd, p, binds, rows_grid(be, n.div_ceil(8)))
    } else if m <= GEMV_MAX_M {
        let binds = pl::matmul_gemv::Binds { x, w, bias, out };
        pl::matmul_gemv::dispatch(be.gpu(), wd, p, binds, rows_grid(be, n.div_ceil(GEMV_ROWS)))
    } else {
        let tiles = m.div_ceil(TILE_M) * n.div_ceil(TILE_N);
        pl::matmul::dispatch(be.gpu(), wd, p, pl::matmul::Binds { x, w, bias, out }, rows_grid(be, tiles))
    }
}
