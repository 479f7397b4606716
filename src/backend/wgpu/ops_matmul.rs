//! Recording of `matmul`: out[m][n] = x[m][k] . w[n][k]^T (+ bias[n]), f32 accumulation.
//!
//! Layout: x `[m][k]` f32, w `[n][k]` in any weight dtype of `shaders::WEIGHT_DTYPES` (read
//! through the module's `load_w`, or `w8` in the subgroup GEMVs; quantized dtypes are decoded
//! by shaders/quant_weights.wgsl), bias `[n]` f32, out `[m]` rows of `ldo` f32 from element
//! `out_off` (out[out_off + r * ldo + c], r < m, c < n; the rest untouched, so the parts of a
//! fused output can be written by one matmul each). `MatmulParams::accumulate` (out += the
//! product) is taken at m == 1, where every kernel below is a GEMV that adds in its store
//! (`Backend::matmul_accumulates`: a batch-1 step's o_proj and down into the residual stream).
//! Kernels, picked per call from m (see [`pick`]):
//! - m == 1 on quantized weights with an integer form (every GGML type; int8 rows with k % 32 ==
//!   0; not fp8), adapters with SUBGROUP: two dispatches, llama.cpp's mmvq scheme in WGSL.
//!   `matmul_gemv_x8_pack` quantizes x to two int8 digits per element in blocks of 32 (d = max|x|
//!   / 127, x = d (hi + lo / 254), code sum; weight_quant::x8_blocks)
//!   into the backend's scratch buffer (8 threads per block of 32, 32 blocks per workgroup), then
//!   `matmul_gemv_x8` (8 rows per workgroup, one subgroup per row, lanes on consecutive slices of
//!   32..128 weights; [`gemv_x8`]) multiplies whole weight words with
//!   both x digits by `dot4I8Packed`, reading each block header once per slice. A pre-pass rather
//!   than a per-workgroup prologue: a prologue would quantize x once per 8 weight rows (512 times
//!   for a 4096x4096 matmul, reading x's 16 KiB of f32 each time: 8 MiB through L2, as many
//!   bytes as the Q4_K weights themselves, plus a barrier and the quantizing ALU in every
//!   workgroup); the pre-pass reads x once, for one more dispatch (and barrier) per matmul. The
//!   result is the weights times x to ~16 bits (`Caps::matmul_x8_max_m`, docs/backends.md).
//!   Where x comes as [`DType::X8`] (one row of digits in the device layout of
//!   shaders/x8_store.wgsl, written by the decode step's norms, silu_mul and attention merge:
//!   `Caps::act_x8_dtypes`), `matmul_gemv_x8` reads it as it is and the pack pass is not run.
//! - m <= [`GEMV_MAX_M`] (decode, batches up to 16), one pass over the weights for all m rows:
//!   - adapters with SUBGROUP, 16-bit or quantized weights, k % 8 == 0 ("pairs": 16-byte words
//!     of 8 16-bit weights, or groups of 8 quantized weights of one sub-block, decoded in
//!     registers with one scale): for m == 1 (16-bit weights, fp8, int8 with k % 32 != 0)
//!     `matmul_gemv_subgroup`, 8 rows per workgroup, one subgroup per row, 16-byte weight loads,
//!     `subgroupAdd` (the measured batch-1 kernel: docs/benchmarks.md); for 2..=16 rows, on
//!     adapters whose subgroups have at least 8 lanes, `matmul_gemv_subgroup_batch`: 16 weight
//!     rows per 256-thread workgroup, lane groups of 8 each on 4 rows and one of 8 k slices,
//!     up to 8 x rows per pass in registers (each x load feeds 4 weight rows, and the 4 groups of
//!     a 32-lane subgroup load the same x), no reduction in the k loop: three shuffle folds per
//!     group, one barrier, 8 slices summed per output. For m >= 5 its `_cu1` variant
//!     ([`gemv_batch`]): every pass computes all 8 x rows (clamped; no branch in the k loop) and
//!     a lane loads one word per row at a time (fewer registers, more warps).
//!   - `matmul_gemv` (everything else): 16 weight rows per 256-thread workgroup, each streamed
//!     once by a group of 32 lanes and tree-reduced in workgroup memory; up to 16 x rows per pass.
//!     Quantized weights reach it only on adapters without SUBGROUP (or int8/fp8 rows of k % 8 !=
//!     0, or batches on subgroups of fewer than 8 lanes): each element is decoded alone (correct,
//!     not tuned).
//! - [`GEMV_MAX_M`] < m <= [`M32_MAX_M`] (batched decode beyond 16, short chunks): `matmul_m32`,
//!   32x64 output tiles, 4x4 per thread.
//! - larger m (prefill): `matmul`, 128x64 output tiles, k steps of 16, 8x4 per thread.
//! - Adapters with cooperative matrices (`WgpuBackend::has_coop`: 16x16x16 f16 x f16 -> f32 at
//!   subgroup size 32, context.rs `coop_supported`), m >= [`COOP_FROM_M`] (17: decode batches
//!   keep the GEMVs), 16-bit or quantized weights: tensor cores through wgpu's
//!   EXPERIMENTAL_COOPERATIVE_MATRIX: `matmul_coop` (64x64 tiles, x and weights converted to f16
//!   per staged tile) for 17..=64;
//!   above, `matmul_coop_x16` (x to f16 once, into the scratch buffer) then `matmul_coop_128`
//!   (128x128 tiles, 8 subgroups of 64x32, k steps of 64 in one stage, f16 weights staged as stored;
//!   [`coop_128`]), or `matmul_coop` where the adapter lacks its 44 KiB of workgroup memory or a
//!   binding that holds the f16 x ([`coop128_fits`]). x and the weights are multiplied as
//!   f16 (x rounded to the weights' dtype first: `Caps::matmul_x16_from`), f32 accumulation; this
//!   replaces every kernel above for those m (not the batch-1 GEMVs).
//!
//! The tiled GEMMs dequantize quantized weights as they stage each weight tile into workgroup
//! memory (each staged value then feeds 32 or 128 rows of FMAs).
//!
//! Why these thresholds: a decode step multiplies a few rows of x with every weight, so it costs
//! at least one read of the weights. The GEMVs reach that for m <= 16 (one pass). Each 16-bit
//! weight costs m f32 FMAs; an H200 does about 7 FMAs per byte it reads from HBM (33.5 T FMA/s :
//! 4.8 TB/s), so the read bounds the step up to m ~ 14 and at 16 the two are about even: the cost
//! grows slowly with m. Beyond 16 rows the f32 FMAs (on adapters without cooperative matrices, the only
//! tensor-core path of WGSL on wgpu 30) bound the step, and
//! what matters is not computing padding rows: 32-row tiles pad at most 31 rows, never more than
//! 128-row tiles up to m = 96. From 97 to 128 both pad to 128; for prefill-size m (hundreds of rows
//! and more) the last tile's padding is a small share, and the 128-row tile's 8x4 micro-tile does
//! twice the FMAs per staged value of the 4x4 one.
//!
//! All take bindings (params, x, w, bias, out); without a bias, x is bound in its place and the
//! shader (has_bias == 0) never reads it. Workgroup counts are folded into 2D by `rows_grid` when
//! over the adapter's per-dimension limit; the shaders index `wg.x + wg.y * num_workgroups.x` and
//! return early, as a whole workgroup, past the last tile.

use super::context::err;
use super::ops_basic::rows_grid;
use super::pipelines as pl;
use super::shaders;
use super::{WgpuBackend, WgpuBuffer, need, need_weights};
use crate::backend::*;
use crate::error::Result;

/// Rows of x from which the cooperative-matrix GEMMs serve 16-bit and quantized weights
/// (`Caps::matmul_x16_from` on adapters that have them): above the GEMVs' range, since decode
/// batches stream the weights once and the subgroup GEMVs do that best (on the H200 a
/// tensor-core decode kernel for 2..=16 rows made a batch-8 step 2.5x slower and was removed;
/// docs/backends.md).
pub const COOP_FROM_M: usize = GEMV_MAX_M + 1;
/// Output tile of `matmul_coop` (`BM`, `BN` there).
const COOP_TILE: usize = 64;

/// Largest m served by the GEMV kernels (`MX` in shaders/matmul_gemv.wgsl: one pass over the
/// weights; shaders/matmul_gemv_subgroup_batch.wgsl makes passes of 8 x rows).
pub const GEMV_MAX_M: usize = 16;
/// Largest m served by the 32-row GEMM tiles; above it the 128-row tiles are used.
pub const M32_MAX_M: usize = 96;
/// Weight rows per workgroup of `matmul_gemv` (`ROWS` in shaders/matmul_gemv.wgsl).
const GEMV_ROWS: usize = 16;
/// Weight rows per workgroup of `matmul_gemv_subgroup` (`ROWS` there).
const GEMV_SUBGROUP_ROWS: usize = 8;

/// Weight rows per workgroup of the batched subgroup GEMVs (`ROWS` = 4 NR in
/// shaders/matmul_gemv_subgroup_batch.wgsl, NR = 4 in both variants).
const GEMV_SUBGROUP_BATCH_ROWS: usize = 16;

/// The batched subgroup GEMV variant for 2..=16 rows: m >= 5 takes `_cu1` (a branch-free k loop
/// over all 8 x rows of a pass, clamped to row m - 1; one word per row in flight per lane: fewer
/// registers, more warps) and 2..=4 the plain kernel (two words per row in flight, a branch per
/// x row: it computes only the x rows it has). Both: 16 rows, 4 row groups x 8 k slices, 256
/// threads. H200, Llama-3-8B f16, batch 8, the GEMVs of one step: plain 11.5 ms, `cu1` 8.5;
/// the plain loop clamped with two words in flight 9.1, and that with 8 rows per 128-thread
/// workgroup 9.0 (both removed; docs/benchmarks.md, 2026-12-02). Every workgroup reads all of x
/// (m rows of k f32), so x costs 2 m / ROWS bytes per weight byte through L2 wherever L1 does not
/// keep it between workgroups.
pub fn gemv_batch(m: usize) -> &'static str {
    if m >= 5 { pl::matmul::GEMV_SUBGROUP_BATCH_CU1 } else { pl::matmul::GEMV_SUBGROUP_BATCH }
}

/// x blocks (of 32) per workgroup of `matmul_gemv_x8_pack` (256 threads, 8 per block); weight
/// rows per workgroup of `matmul_gemv_x8` are `GEMV_SUBGROUP_ROWS` (`ROWS` there).
const X8_PACK_BLOCKS: usize = 32;

/// The kernel for m rows of x against n weight rows and the number of workgroups it runs (before
/// folding).
/// `pairs`: the weights are 16-bit or quantized with k % 8 == 0 and the adapter has SUBGROUP;
/// `lanes8`: its subgroups have at least 8 lanes (the batch kernel's shuffle folds span 8).
pub fn pick(m: usize, n: usize, pairs: bool, lanes8: bool) -> (&'static str, usize) {
    if m == 1 && pairs {
        (pl::matmul::GEMV_SUBGROUP, n.div_ceil(GEMV_SUBGROUP_ROWS))
    } else if m <= GEMV_MAX_M && pairs && lanes8 {
        (gemv_batch(m), n.div_ceil(GEMV_SUBGROUP_BATCH_ROWS))
    } else if m <= GEMV_MAX_M {
        (pl::matmul::GEMV, n.div_ceil(GEMV_ROWS))
    } else if m <= M32_MAX_M {
        (pl::matmul::M32, m.div_ceil(32) * n.div_ceil(64))
    } else {
        (pl::matmul::OP, m.div_ceil(128) * n.div_ceil(64))
    }
}

pub fn matmul(
    be: &WgpuBackend,
    p: &MatmulParams,
    x: &WgpuBuffer,
    w: &WgpuBuffer,
    bias: Option<&WgpuBuffer>,
    out: &mut WgpuBuffer,
) -> Result<()> {
    let (m, n, k) = (p.m as usize, p.n as usize, p.k as usize);
    let bias = check(be, p, x, w, bias, out)?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    if x.dtype == DType::X8 || (m == 1 && k % 32 == 0 && be.has_subgroup() && shaders::has_x8(w.dtype)) {
        return with_x8(be, p, x, |xq| gemv_x8(be, p, (xq, w, bias), out));
    }
    if m >= COOP_FROM_M && be.has_coop() && w.dtype != DType::F32 {
        if m > COOP_TILE && coop128_fits(be, m, k) {
            return coop_128(be, p, x, w, bias, out);
        }
        let tiles = m.div_ceil(COOP_TILE) * n.div_ceil(COOP_TILE);
        let binds = pl::matmul::Binds { x, w, bias, out };
        return pl::matmul::dispatch_variant(be.gpu(), pl::matmul::COOP, Some(w.dtype), p, binds, rows_grid(be, tiles));
    }
    let pairs =
        (matches!(w.dtype, DType::F16 | DType::BF16) || w.dtype.is_weight_quant()) && k % 8 == 0 && be.has_subgroup();
    let (op, groups) = pick(m, n, pairs, be.gpu().info.subgroup_min_size >= 8);
    let binds = pl::matmul::Binds { x, w, bias, out };
    pl::matmul::dispatch_variant(be.gpu(), op, Some(w.dtype), p, binds, rows_grid(be, groups))
}

/// `matmul`'s checks of its operands (shared by `matmul_rope_append_kv`); the buffer bound as the
/// bias (x itself where there is none: the shaders then never read it).
pub fn check<'a>(
    be: &WgpuBackend,
    p: &MatmulParams,
    x: &'a WgpuBuffer,
    w: &WgpuBuffer,
    bias: Option<&'a WgpuBuffer>,
    out: &WgpuBuffer,
) -> Result<&'a WgpuBuffer> {
    let (m, n, k) = (p.m as usize, p.n as usize, p.k as usize);
    // At one row every kernel below is a GEMV whose store adds (`matmul_gemv_x8`,
    // `matmul_gemv_subgroup`, `matmul_gemv`: Backend::matmul_accumulates).
    if p.accumulate != 0 && m != 1 {
        return Err(err(format!("matmul: accumulate is taken at one row, not {m} (Backend::matmul_accumulates)")));
    }
    if x.dtype == DType::X8 {
        need_x8(be, p, x, w)?;
    } else {
        need(x, DType::F32, m * k, "matmul x")?;
    }
    need_weights(w, n, k, "matmul w")?;
    if (p.ldo as usize) < n {
        return Err(err(format!("matmul: ldo {} < n {n}", p.ldo)));
    }
    need(out, DType::F32, p.out_len(), "matmul out")?;
    let bias = match (p.has_bias, bias) {
        (0, _) => x,
        (_, Some(b)) => {
            need(b, DType::F32, n, "matmul bias")?;
            b
        }
        (_, None) => return Err(err("matmul: has_bias set but no bias buffer given")),
    };
    // Shaders index with u32.
    if [m * k, n * k, p.out_len()].iter().any(|&e| e > u32::MAX as usize) {
        return Err(err(format!("matmul: {m}x{n}x{k} exceeds 32-bit indexing")));
    }
    Ok(bias)
}

/// Output tile of `matmul_coop_128` (`BM`, `BN` there) and threads per workgroup of
/// `matmul_coop_x16`.
const COOP128_TILE: usize = 128;
const X16_WG: usize = 64;

/// Workgroup memory `matmul_coop_128` declares: one stage of two 128 x 72-half tiles, and a 1 KiB
/// epilogue patch for each of its 8 subgroups (44 KiB).
const COOP128_BYTES: u32 = 2 * 128 * 72 * 2 + 8 * 1024;

/// Whether `matmul_coop_128` can serve m rows of k (else `matmul_coop` does): the adapter's
/// workgroup memory holds it and one buffer binding holds the f16 x as the scratch buffer
/// allocates it (a power of two of words).
fn coop128_fits(be: &WgpuBackend, m: usize, k: usize) -> bool {
    let limits = &be.gpu().limits;
    let xh_bytes = 4 * (m * x16_row(k)).div_ceil(2).max(1 << 16).next_power_of_two() as u64;
    limits.max_compute_workgroup_storage_size >= COOP128_BYTES
        && xh_bytes <= limits.max_storage_buffer_binding_size.min(limits.max_buffer_size)
}

/// Halves per row of the f16 x of `matmul_coop_x16` (k rounded up to 8: 16-byte rows).
pub fn x16_row(k: usize) -> usize {
    k.div_ceil(8) * 8
}

/// m > 64 rows on adapters with cooperative matrices (`matmul_coop_128`, module header): x to
/// f16 rows in the backend's scratch buffer (pass 1: read once, where the GEMM's 128-column
/// tiles would each convert it again), then the 128x128-tile GEMM on it (pass 2; wgpu orders
/// the two dispatches). 17..=64 rows take `matmul_coop`: one 64-row tile holds them, where a
/// 128-row tile would compute twice the padding rows in half as many workgroups, reading the
/// weights once either way. On the H200 (docs/benchmarks.md, 2026-12-02, 4K prefill of the
/// Llama-3-8B shape) the GEMMs took 1,078 ms this way, against 1,904 with `matmul_coop` for
/// every m > 16 and 1,953 with the 128x128 tiles split over 4 subgroups of 64x64 (both removed);
/// 463 ms since session 20 (k steps of 64, shader checks off: docs/benchmarks.md).
fn coop_128(
    be: &WgpuBackend,
    p: &MatmulParams,
    x: &WgpuBuffer,
    w: &WgpuBuffer,
    bias: &WgpuBuffer,
    out: &mut WgpuBuffer,
) -> Result<()> {
    let (m, n, k) = (p.m as usize, p.n as usize, p.k as usize);
    let mut xh = be.scratch((m * x16_row(k)).div_ceil(2))?;
    let pack = if w.dtype == DType::BF16 { pl::matmul_coop_x16::X16_BF16 } else { pl::matmul_coop_x16::OP };
    let groups = (m * x16_row(k) / 8).div_ceil(X16_WG);
    if groups > 0 {
        let binds = pl::matmul_coop_x16::Binds { x, xh: &mut xh };
        pl::matmul_coop_x16::dispatch_variant(be.gpu(), pack, None, p, binds, rows_grid(be, groups))?;
    }
    let tiles = m.div_ceil(COOP128_TILE) * n.div_ceil(COOP128_TILE);
    let binds = pl::matmul_coop_128::Binds { xh: &xh, w, bias, out };
    pl::matmul_coop_128::dispatch(be.gpu(), Some(w.dtype), p, binds, rows_grid(be, tiles))
}

/// An X8 x (one row of x8 digits in the device layout, shaders/x8_store.wgsl): what the batch-1
/// GEMV reads without its pack pass; the weights' dtype in `Caps::act_x8_dtypes`, one row of
/// k that `Caps::x8_row_fits`, x8_bytes(k) bytes.
fn need_x8(be: &WgpuBackend, p: &MatmulParams, x: &WgpuBuffer, w: &WgpuBuffer) -> Result<()> {
    let (c, k) = (be.caps(), p.k as usize);
    if p.m != 1 || !c.act_x8_dtypes.contains(&w.dtype) || !c.x8_row_fits(k) {
        return Err(err(format!(
            "matmul: an X8 x is one row of k a multiple of {} up to {} for weights of {:?}, not {} x {k} for {:?}",
            c.act_x8_k_multiple, c.act_x8_max_k, c.act_x8_dtypes, p.m, w.dtype
        )));
    }
    need(x, DType::X8, x8_bytes(k), "matmul x")
}

/// Words of the two-digit x of `matmul_gemv_x8_pack` for m rows of k (k % 32 == 0): per block of
/// 32, 8 code words per digit, the (d, code sum) pair and the block's sum of x (x8_store.wgsl
/// writes all three, the GEMV reads the pair).
pub fn x8_words(m: usize, k: usize) -> usize {
    m * (k / 32) * 19
}

/// m == 1 on quantized weights with an integer form (module header): the integer-dot GEMV of x's
/// digits ([`with_x8`] makes them where x is not [`DType::X8`]: pass 1; wgpu orders the two
/// dispatches and puts a barrier between them). On the H200 (Llama-3-8B, 32K sparse, warm
/// clocks; docs/data/wq-h200-2026-12-02) a q4_k step took 9.25-9.44 ms with one weight row per
/// subgroup, 9.48 / 10.0 with 2 / 4 rows sharing a slice's x loads (removed: the shared loads did
/// not pay for the fewer warps) and 14.5 with f32 x through `matmul_gemv_subgroup`, which serves
/// the dtypes without an integer form.
fn gemv_x8(
    be: &WgpuBackend,
    p: &MatmulParams,
    (xq, w, bias): (&WgpuBuffer, &WgpuBuffer, &WgpuBuffer),
    out: &mut WgpuBuffer,
) -> Result<()> {
    let binds = pl::matmul_gemv_x8::Binds { xq, w, bias, out };
    let n = p.n as usize;
    pl::matmul_gemv_x8::dispatch(be.gpu(), Some(w.dtype), p, binds, rows_grid(be, n.div_ceil(GEMV_SUBGROUP_ROWS)))
}

/// `f` of x as the batch-1 GEMVs read it: x itself where it comes as [`DType::X8`], else its
/// digits made by `matmul_gemv_x8_pack` in the backend's scratch buffer (a dispatch of its own).
pub fn with_x8<R>(
    be: &WgpuBackend,
    p: &MatmulParams,
    x: &WgpuBuffer,
    f: impl FnOnce(&WgpuBuffer) -> Result<R>,
) -> Result<R> {
    if x.dtype == DType::X8 {
        return f(x);
    }
    let (m, k) = (p.m as usize, p.k as usize);
    let mut xq = be.scratch(x8_words(m, k))?;
    let pack = pl::matmul_gemv_x8_pack::Binds { x, xq: &mut xq };
    let blocks = m * (k / 32);
    pl::matmul_gemv_x8_pack::dispatch(be.gpu(), None, p, pack, rows_grid(be, blocks.div_ceil(X8_PACK_BLOCKS)))?;
    f(&xq)
}
