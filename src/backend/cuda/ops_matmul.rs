//! matmul: out[out_off + r * ldo + c] = x[r, :] . w[c, :] (+ bias[c]) for r < m, c < n (other
//! elements of out untouched; a dense output has ldo = n, out_off = 0), x/out f32, w f32/f16/bf16
//! or a quantized format (GGML blocks, int8/fp8 rows), f32 accumulation.
//!
//! - m == 1 (a batch-1 decode step), float weights: our GEMV (cuda/matmul.cu), one warp per output
//!   column reading each weight row once with 16-byte loads, x in f32; it is what bounds a decode
//!   step at the memory floor.
//! - m >= 2 (batched decode, prefill) with 16-bit weights: x is rounded to the weights' dtype
//!   (`matmul_round_x`, the trait's `Caps::matmul_x16_from`) and one tensor-core cuBLAS GEMM
//!   with f32 accumulation reads every weight once for all rows. It is recorded in the step's
//!   launch list like a kernel (graph.rs), so a batched decode step replays as one graph. (The
//!   hi + lo split this replaced kept ~16 mantissa bits of x at twice the weight reads; the
//!   accuracy of 16-bit activations is measured in docs/benchmarks.md.)
//! - Quantized weights, m == 1 (not fp8): the integer-dot GEMV (cuda/matmul_quant.cu `_m1`):
//!   each block quantizes x to two int8 digits per element, blocks of 32, in shared memory
//!   ([`mmv_smem_bytes`]), lanes read consecutive slices of a weight row and multiply 4 codes at
//!   a time with `__dp4a`, once per digit. [`MmvMode::Pre`] (`LSERVE_CUDA_MMV=pre`):
//!   `matmul_quantize_x_m1` writes those digits once per call into the `mmv_xq` scratch (the
//!   shared-memory layout, [`mmv_smem_bytes`]) and `matmul_gemv_<fmt>_m1_pre` copies them into
//!   shared memory with cp.async (no arithmetic), prefetching its first weight lines meanwhile;
//!   same digits, same dot code. [`MmvMode::Reg`] (`LSERVE_CUDA_MMV=reg|regf`; Q4_K, Q5_K,
//!   int8 rows): lanes own the same elements of every row and hold x's digits in registers
//!   (`matmul_gemv_<fmt>_m1_reg[f]`, [`mmv_reg_launch`]). The default, [`MmvMode::Auto`], takes
//!   whichever was fastest on the H200 for the weight format ([`MmvMode::for_dtype`],
//!   docs/benchmarks.md). Packed 32-element-format weights (`CudaBuffer::packed`, packed.rs)
//!   take their own kernels, `<fmt>p` at the end of each entry table ([`packed_mode`]).
//! - Quantized weights but fp8, 2 <= m <= [`MMQ_MAX_M`]: the tensor-core MMQ GEMM
//!   (cuda/matmul_mmq.cu): `matmul_quantize_x` writes x as the same two int8 digits per element
//!   (blocks of 32) into two scratches, then `matmul_mmq_<fmt>_n<NT>` (NT = ceil(m / 8) rounded up
//!   to 1, 2, 4 or 8 n-tiles) multiplies 32 weight rows per block with s8 `mma.sync`, reading each
//!   weight byte once per call.
//! - fp8 rows, m <= [`QUANT_GEMV_MAX_M`] (and m == 1 where the integer GEMV does not fit): the
//!   f32 GEMV (`_m16`), which dequantizes in registers and reads each weight byte once for all
//!   rows, x in f32.
//! - Quantized weights, larger m: chunks of at most [`DEQUANT_SCRATCH_BYTES`] (or
//!   `LSERVE_CUDA_DEQUANT_MB`) of weight rows are
//!   dequantized to f16 (`matmul_dequant`, the reference's values rounded to nearest even) into a
//!   scratch, and each chunk is one f16 cuBLAS GEMM with x rounded to f16, writing its column
//!   block of out (ldc = ldo, the pointer offset to the chunk's first column). docs/backends.md
//!   argues this against per-tile dequantization into shared memory.
//! - An x already in the 16-bit dtype the GEMM multiplies ([`x16_dtype`]: the 16-bit weights' own
//!   from m = 2, f16 for quantized weights on the dequantize path; `Caps::act16_from`: rmsnorm,
//!   add_rmsnorm and silu_mul wrote it rounded) skips the rounding pass: the same GEMM operands.
//! - f32 weights (tests): SGEMM at m >= 2. A bias is added by a small kernel afterwards.
//!
//! Row-major to cuBLAS column-major: out^T (n x m, ldc = ldo) = op(W)(n x k) . x^T (k x m), with W
//! `[n][k]` read as a k x n column-major matrix transposed (lda k) and x `[m][k]` as k x m (ldb k);
//! a strided output is the same matrix with leading dimension ldo starting at out + out_off.

use cudarc::cublas::sys as blas;

use super::bindings::{self as kern, MMQ_DTYPES, QUANT_DTYPES, REG_DTYPES, Scratch, entry, entry_w};
use super::context::{Launch, err};
use super::graph::{GemmBatch, GemmRec};
use super::{CudaBackend, CudaBuffer, need, need_float, need_weights};
use crate::backend::reference::ggml_quant::GgmlType;
use crate::backend::*;
use crate::error::{Error, Result};

/// Rows of x from which 16-bit-weight matmuls round x to 16 bits and run as one GEMM.
pub const X16_FROM_M: usize = 2;
/// Rows of x up to which quantized weights (not fp8) multiply x as two int8 digits per element:
/// the integer-dot GEMV at m == 1, the MMQ GEMM from 2 rows to this (`Caps::matmul_x8_max_m`).
pub const MMQ_MAX_M: usize = 64;
/// Rows from which the model is told to fold the residual add into o_proj's and down's GEMMs
/// (`Backend::matmul_accumulates`): a 32K prefill's 8,192-row steps gained ~10 ms (H100, session
/// 39), while a batch-16 decode step measured 8.88 ms against 8.78 without it (cuBLAS picks its
/// small-m kernels differently with beta = 1; the norm it saves is ~4 us there).
pub const ACC_FROM_M: usize = 256;
/// Rows of x up to which fp8 weights take the f32 GEMV (dequantizing in registers).
pub const QUANT_GEMV_MAX_M: usize = 16;
/// Bound of the f16 scratch a quantized GEMM dequantizes its weight rows into (one chunk), unless
/// `LSERVE_CUDA_DEQUANT_MB` says otherwise at open: 256 MiB holds every matrix of an 8B model whole
/// (gate|up, 235 MB), one GEMM per matrix as with 16-bit weights (64 MiB cut gate|up in four and
/// down in two: 4K prefill 121.0 / 122.6 ms against 112.3 / 112.6, H100, docs/benchmarks.md session
/// 26). The scratch is only as large as the largest matrix that uses it.
pub const DEQUANT_SCRATCH_BYTES: usize = 256 << 20;

fn u(x: u32) -> usize {
    x as usize
}

/// The 16-bit x the GEMM paths take as it is at m rows (`Backend::weight_x16_dtype`): f16 / bf16
/// weights their dtype from [`X16_FROM_M`]; quantized weights f16 where they take the
/// dequantize-then-cuBLAS path (above [`MMQ_MAX_M`], fp8 above [`QUANT_GEMV_MAX_M`]), whose GEMM
/// multiplies x rounded to f16: the producers' rounding replaces `matmul_round_x`'s.
pub fn x16_dtype(w: DType, m: usize) -> Option<DType> {
    match w {
        DType::F16 | DType::BF16 if m >= X16_FROM_M => Some(w),
        DType::F8Row if m > QUANT_GEMV_MAX_M => Some(DType::F16),
        w if w.is_weight_quant() && w != DType::F8Row && m > MMQ_MAX_M => Some(DType::F16),
        _ => None,
    }
}

/// A matmul_prologue's operands as the batch-1 GEMVs take them (`xop` of cuda/matmul.cu and
/// cuda/matmul_quant.cu): the op (0 none, 1 rmsnorm, 2 silu_mul), the norm's weight and eps.
#[derive(Clone, Copy, Default)]
pub struct XOp<'a> {
    pub op: u32,
    pub xw: Option<&'a CudaBuffer>,
    pub eps: f32,
}

impl<'a> XOp<'a> {
    pub const NONE: XOp<'static> = XOp { op: 0, xw: None, eps: 0.0 };

    pub fn of(pro: Prologue<'a, CudaBuffer>) -> Self {
        match pro {
            Prologue::Rmsnorm { w, eps } => XOp { op: 1, xw: Some(w), eps },
            Prologue::SiluMul => XOp { op: 2, xw: None, eps: 0.0 },
        }
    }
}

pub fn matmul(
    be: &CudaBackend,
    p: &MatmulParams,
    x: &CudaBuffer,
    w: &CudaBuffer,
    bias: Option<&CudaBuffer>,
    out: &mut CudaBuffer,
) -> Result<()> {
    matmul_xop(be, p, x, XOp::NONE, w, bias, out)
}

/// `Backend::matmul_prologue`: one batch-1 GEMV whose lanes make x from `src` by the op, only
/// where [`prologue_fuses`] (refused elsewhere: the model then runs the op and `matmul`).
pub fn matmul_prologue(
    be: &CudaBackend,
    p: &MatmulParams,
    pro: Prologue<'_, CudaBuffer>,
    src: &CudaBuffer,
    w: &CudaBuffer,
    bias: Option<&CudaBuffer>,
    out: &mut CudaBuffer,
) -> Result<()> {
    if !prologue_fuses(be, p, w, pro.kind()) {
        return Err(err(format!(
            "matmul_prologue: {:?} before a {}x{}x{} matmul over {:?} weights is not one kernel here \
             (Backend::matmul_prologue_fuses)",
            pro.kind(),
            p.m,
            p.n,
            p.k,
            w.dtype
        )));
    }
    let xop = XOp::of(pro);
    if let Some(nw) = xop.xw {
        need(nw, DType::F32, u(p.k), "matmul_prologue norm weight")?;
    }
    matmul_xop(be, p, src, xop, w, bias, out)
}

/// Whether [`matmul_prologue`] runs a prologue of `kind` before weights `w` at `p`'s shape: one
/// row, and a register GEMV ([`reg_gemv`]) of the integer-coded formats, whose lanes quantize x
/// once a block. (Not the 16-bit weights' GEMV: a warp per output column reads x whole from L1,
/// and the norm's weight beside it made the bf16 8B step 8% slower, docs/benchmarks.md session
/// 40.)
pub fn prologue_fuses(be: &CudaBackend, p: &MatmulParams, w: &CudaBuffer, kind: PrologueKind) -> bool {
    let (n, k) = (u(p.n), u(p.k));
    let on = match kind {
        PrologueKind::Rmsnorm => true,
        PrologueKind::SiluMul => be.fuse_silu,
    };
    on && p.m == 1 && n > 0 && w.dtype.is_weight_quant() && mmv_fits(be, w.dtype, k) && reg_gemv(be, w, n, k).is_some()
}

fn matmul_xop(
    be: &CudaBackend,
    p: &MatmulParams,
    x: &CudaBuffer,
    xop: XOp<'_>,
    w: &CudaBuffer,
    bias: Option<&CudaBuffer>,
    out: &mut CudaBuffer,
) -> Result<()> {
    let (m, n, k) = (u(p.m), u(p.n), u(p.k));
    // x in the 16-bit dtype the GEMM multiplies (x16_dtype: Caps::act16_from) goes to it as it is.
    let gemm16 = x16_dtype(w.dtype, m);
    let x_act16 = gemm16 == Some(x.dtype);
    if x.dtype == DType::X8 {
        need_x8(be, p, x, w)?;
    } else {
        // silu_mul's prologue reads gate | up: two rows' worth.
        let len = if xop.op == 2 { 2 * m * k } else { m * k };
        need(x, if x_act16 { x.dtype } else { DType::F32 }, len, "matmul x")?;
    }
    if w.dtype.is_weight_quant() {
        need_weights(w, n, k, "matmul w")?;
    } else {
        need_float(w, n * k, "matmul w")?;
    }
    if m > 1 && u(p.ldo) < n {
        return Err(err(format!("matmul: ldo = {} is shorter than a row of n = {n} outputs", p.ldo)));
    }
    // A 16-bit out where the GEMM is cuBLAS's (Backend::matmul_out16_dtype = x16_dtype), no bias.
    let out16 = matches!(out.dtype, DType::F16 | DType::BF16);
    if out16 && (gemm16 != Some(out.dtype) || p.has_bias != 0) {
        return Err(err(format!(
            "matmul: a {:?} out needs a {:?}-row GEMM over weights that give it (not {:?}) and no bias",
            out.dtype, m, w.dtype
        )));
    }
    need(out, if out16 { out.dtype } else { DType::F32 }, p.out_len(), "matmul out")?;
    // accumulate: a cuBLAS GEMM (beta = 1) or any batch-1 GEMV, into an f32 out
    // (Backend::matmul_accumulates).
    if p.accumulate != 0 && ((gemm16.is_none() && m != 1) || out16) {
        return Err(err(format!(
            "matmul: accumulate needs a cuBLAS GEMM or one row, into an f32 out ({:?} weights at {m} rows into {:?} do not take it)",
            w.dtype, out.dtype
        )));
    }
    let bias = match (p.has_bias, bias) {
        (0, _) => None,
        (_, Some(b)) => {
            need(b, DType::F32, n, "matmul bias")?;
            Some(b)
        }
        (_, None) => return Err(err("matmul: has_bias set but no bias buffer given")),
    };
    if m == 0 || n == 0 {
        return Ok(());
    }
    if w.dtype.is_weight_quant() {
        return matmul_quant(be, p, x, x_act16, xop, w, bias, out);
    }
    if m < X16_FROM_M {
        // Entries [weight dtype][plain | _vec].
        let name = entry(kern::matmul_gemv::ENTRIES, w.dtype, k.is_multiple_of(8) as usize, 2)?;
        let l = Launch::new((n.div_ceil(8) as u32, 1, 1), 256);
        if xop.op != 0 {
            return Err(err(format!("matmul_prologue: the {:?} GEMV makes no x", w.dtype)));
        }
        let args = kern::matmul_gemv::Args { x, w, b: bias, o: out };
        return kern::matmul_gemv::launch_variant(be.gpu(), name, l, p, args);
    }
    let out0 = out_at(out, p.out_off as u64);
    if w.dtype == DType::F32 {
        be.gpu().timed("matmul_cublas", || sgemm(be, p, x, w, out0))?;
    } else {
        let bf16 = w.dtype == DType::BF16;
        let x16 = if x_act16 { x.ptr() } else { round_x(be, p, x, bf16)? };
        let ldc = p.ldo as i32;
        let g = GemmRec {
            m: m as i32,
            n: n as i32,
            k: k as i32,
            bf16,
            out16,
            ldc,
            w: w.ptr(),
            x: x16,
            out: out0,
            acc: p.accumulate != 0,
            batch: GemmBatch::ONE,
        };
        be.gpu().gemm16(g)?;
    }
    add_bias(be, p, bias, out)
}

/// The device address of element `off` of a matmul's out (f32, or 16-bit: `matmul_out16_dtype`).
fn out_at(out: &CudaBuffer, off: u64) -> u64 {
    out.ptr() + off * if out.dtype == DType::F32 { 4 } else { 2 }
}

/// x rounded to bf16 or f16 into the GEMM's x scratch; its device pointer.
fn round_x(be: &CudaBackend, p: &MatmulParams, x: &CudaBuffer, bf16: bool) -> Result<u64> {
    let g = be.gpu();
    let mk = u(p.m) * u(p.k);
    let x16 = g.scratch("gemm_x16", mk * 2)?;
    let round = kern::matmul_round_x::ENTRIES[usize::from(bf16)];
    let args = kern::matmul_round_x::Args { x, x16: Scratch(x16) };
    // Four elements a thread (round_impl).
    kern::matmul_round_x::launch_variant(g, round, Launch::elems(mk.div_ceil(4)), p, args)?;
    Ok(x16)
}

fn add_bias(be: &CudaBackend, p: &MatmulParams, bias: Option<&CudaBuffer>, out: &mut CudaBuffer) -> Result<()> {
    if let Some(bias) = bias {
        let args = kern::matmul_bias::Args { bias, out };
        kern::matmul_bias::launch(be.gpu(), Launch::elems(u(p.m) * u(p.n)), p, args)?;
    }
    Ok(())
}

/// Quantized weights: the integer GEMV at m == 1, the MMQ GEMM up to MMQ_MAX_M (not fp8), the f32
/// GEMV up to QUANT_GEMV_MAX_M, else f16 chunks and cuBLAS.
#[allow(clippy::too_many_arguments)]
fn matmul_quant(
    be: &CudaBackend,
    p: &MatmulParams,
    x: &CudaBuffer,
    x_act16: bool,
    xop: XOp<'_>,
    w: &CudaBuffer,
    bias: Option<&CudaBuffer>,
    out: &mut CudaBuffer,
) -> Result<()> {
    let (m, n, k) = (u(p.m), u(p.n), u(p.k));
    let g = be.gpu();
    if (2..=MMQ_MAX_M).contains(&m) && w.dtype != DType::F8Row {
        return matmul_mmq(be, p, x, w, bias, out);
    }
    if m == 1 && (x.dtype == DType::X8 || mmv_fits(be, w.dtype, k)) {
        return mmv(be, p, x, xop, w, bias, out);
    }
    if m <= QUANT_GEMV_MAX_M {
        // fp8 rows (m == 1: the f32 GEMV), or an integer-coded format at 2..=16 rows where the MMQ
        // GEMM does not run, or at m == 1 with k too long for the integer GEMV's shared memory.
        // Entries [QUANT_DTYPES][m1 | m16].
        let m1 = m == 1 && w.dtype == DType::F8Row;
        let name = entry_w(kern::matmul_gemv_quant::ENTRIES, &QUANT_DTYPES, w, usize::from(!m1), 2)?;
        let l = Launch::new((n.div_ceil(8) as u32, 1, 1), 256);
        return kern::matmul_gemv_quant::launch_variant(
            g,
            name,
            l,
            p,
            kern::matmul_gemv_quant::Args { x, w, b: bias, o: out },
        );
    }
    let dequant = entry_w(kern::matmul_dequant::ENTRIES, &QUANT_DTYPES, w, 0, 1)?;
    let x16 = if x_act16 { x.ptr() } else { round_x(be, p, x, false)? };
    let rows = dequant_rows(be.dequant_bytes, n, k);
    let w16 = g.scratch("matmul_w16", rows * k * 2)?;
    for r0 in (0..n).step_by(rows) {
        let nr = rows.min(n - r0);
        let pc = MatmulParams { n: nr as u32, ..*p };
        let args = kern::matmul_dequant::Args { w, w16: Scratch(w16), row0: r0 as u32, n_total: p.n };
        kern::matmul_dequant::launch_variant(g, dequant, dequant_launch(w.dtype, nr * k), &pc, args)?;
        let out0 = out_at(out, p.out_off as u64 + r0 as u64);
        let rec = GemmRec {
            m: m as i32,
            n: nr as i32,
            k: k as i32,
            bf16: false,
            out16: out.dtype == DType::F16,
            ldc: p.ldo as i32,
            w: w16,
            x: x16,
            out: out0,
            acc: p.accumulate != 0,
            batch: GemmBatch::ONE,
        };
        g.gemm16(rec)?;
    }
    add_bias(be, p, bias, out)
}

/// Weight rows per dequantize + GEMM chunk: all `n` where `n x k` f16 fit `bytes`, else as many
/// whole 128-row tiles as fit (a chunk of a ragged row count, 2,340 of the 8B shape's down
/// projection at 64 MiB, left cuBLAS a partial tile per chunk), at least one tile (or one row).
pub fn dequant_rows(bytes: usize, n: usize, k: usize) -> usize {
    let fit = bytes / (2 * k).max(1);
    if fit >= n {
        return n.max(1);
    }
    (fit / 128 * 128).max(128.min(n)).max(1)
}

/// The launch of `matmul_dequant` over `elems` weights: GGML formats a 256-thread block per span
/// of 256 decode chunks (`qdequant_impl`: 32 weights a chunk, 64 for the K-quants), the row-scaled
/// ones a thread per weight (grid-stride).
fn dequant_launch(d: DType, elems: usize) -> Launch {
    match d {
        DType::Ggml(GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K) => Launch::elems(elems / 64),
        DType::Ggml(_) => Launch::elems(elems / 32),
        _ => Launch::elems(elems),
    }
}

/// The weight formats whose batch-1 GEMV reads x's digits from memory in mode `mode` (`Reg` or
/// `Pre`, not `InBlock`): `Caps::act_x8_dtypes`, so an X8 x saves them the
/// `matmul_quantize_x_m1` launch. For the formats whose own blocks quantize x (`InBlock`: in
/// `Auto` Q4_0, Q4_1, Q5_0, GGML-block Q8_0) an X8 x would run `Pre` instead, measured slower for
/// Q8_0 (H200, 8B 32K sparse batch 1: 5.16 / 5.17 ms vs 5.05 / 5.07, docs/benchmarks.md session
/// 18). With `pack` the packed formats (every 32-element one) are listed where their packed layout
/// reads digits ([`packed_mode`]); only their packed matrices (rows of whole super-blocks: all of an
/// 8B model's) are handed X8 (`Backend::weight_takes_x8`), the others keep f32 x and `InBlock`
/// (an X8 x given to them directly runs `Pre`).
pub fn x8_dtypes(mode: MmvMode, pack: bool) -> Vec<DType> {
    let reads = |d: DType| match d {
        d if pack && super::packed::PACKED_DTYPES.contains(&d) => packed_mode(mode, d).grid().is_some(),
        d => mode.pre_grid(d).is_some(),
    };
    MMQ_DTYPES.into_iter().filter(|&d| reads(d)).collect()
}

/// The batch-1 GEMV mode of packed weights of dtype `d` (packed.rs): in `Auto` x in registers,
/// quantized by the lanes from f32 x (`regf`: Q8_0 as int8 rows, the same kernel with a scale per
/// 32 codes; the 4-bit ones a lane per block) or read as digits, Q8_0's rows streamed by bulk
/// copies on sm_90 ([`MmvMode::for_dtype`]), else the mode itself.
pub fn packed_mode(mode: MmvMode, d: DType) -> MmvMode {
    match mode {
        MmvMode::Auto => MmvMode::Reg { max_grid: 0, lanes_quantize: true, bulk: d == DType::Ggml(GgmlType::Q8_0) },
        m => m,
    }
}

/// The batch-1 integer-dot GEMV runs for weights of dtype `d` (every integer-coded format, not
/// fp8) with rows of k: x's digits fit the `_m1` kernels' shared memory.
fn mmv_fits(be: &CudaBackend, d: DType, k: usize) -> bool {
    d != DType::F8Row && mmv_smem_bytes(k) <= be.gpu().smem_optin as usize
}

/// An X8 x (one row of digits, `Caps::act_x8_dtypes`) for weights `w`: m == 1, a dtype the
/// batch-1 integer GEMV reads, k a multiple of 4 up to `act_x8_max_k`, x8_bytes(k) bytes.
fn need_x8(be: &CudaBackend, p: &MatmulParams, x: &CudaBuffer, w: &CudaBuffer) -> Result<()> {
    let (c, k) = (be.caps(), u(p.k));
    if p.m != 1 || !c.act_x8_dtypes.contains(&w.dtype) || !c.x8_row_fits(k) {
        return Err(err(format!(
            "matmul: an X8 x is one row of k a multiple of 4 up to {} for weights of {:?}, not {} x {k} for {:?}",
            c.act_x8_max_k, c.act_x8_dtypes, p.m, w.dtype
        )));
    }
    need(x, DType::X8, x8_bytes(k), "matmul x")
}

/// The batch-1 integer-dot GEMV in the mode [`MmvMode::for_dtype`] gives: x in registers where the
/// format and shape allow it ([`mmv_reg_launch`]), else x's digits copied into each block's shared
/// memory (`Pre`) or quantized by each block (`InBlock`). x is f32, or already its digits
/// ([`DType::X8`]: no `matmul_quantize_x_m1`, and the modes that would quantize in the lanes or
/// in each block read the digits as `Reg` / `Pre` do). With a prologue (`xop`, only where
/// [`prologue_fuses`]) the register GEMV's lanes quantize x whatever the mode, after making it.
fn mmv(
    be: &CudaBackend,
    p: &MatmulParams,
    x: &CudaBuffer,
    xop: XOp<'_>,
    w: &CudaBuffer,
    bias: Option<&CudaBuffer>,
    out: &mut CudaBuffer,
) -> Result<()> {
    let (g, n, k) = (be.gpu(), u(p.n), u(p.k));
    let digits = x.dtype == DType::X8;
    if let Some((path, lanes_quantize)) = reg_gemv(be, w, n, k) {
        // The lanes quantize x (f32, or made by a prologue) unless it comes as digits or the
        // mode reads them from the scratch.
        let lanes = !digits && (lanes_quantize || xop.op != 0);
        let (xw, op, eps) = (xop.xw, xop.op, xop.eps.to_bits());
        return match (path, lanes) {
            (RegGemv::Bulk(l, stages), true) => {
                let name = entry_w(kern::matmul_gemv_quant_bulkf::ENTRIES, &REG_DTYPES, w, 0, 1)?;
                let args = kern::matmul_gemv_quant_bulkf::Args { x, xw, w, b: bias, o: out, stages, xop: op, eps };
                kern::matmul_gemv_quant_bulkf::launch_variant(g, name, l, p, args)
            }
            (RegGemv::Bulk(l, stages), false) => {
                let name = entry_w(kern::matmul_gemv_quant_bulk::ENTRIES, &REG_DTYPES, w, 0, 1)?;
                let xq = mmv_digits(be, p, x)?;
                let args = kern::matmul_gemv_quant_bulk::Args { xq, w, b: bias, o: out, stages };
                kern::matmul_gemv_quant_bulk::launch_variant(g, name, l, p, args)
            }
            (RegGemv::Reg(l), true) => {
                let name = entry_w(kern::matmul_gemv_quant_regf::ENTRIES, &REG_DTYPES, w, 0, 1)?;
                let args = kern::matmul_gemv_quant_regf::Args { x, xw, w, b: bias, o: out, xop: op, eps };
                kern::matmul_gemv_quant_regf::launch_variant(g, name, l, p, args)
            }
            (RegGemv::Reg(l), false) => {
                let name = entry_w(kern::matmul_gemv_quant_reg::ENTRIES, &REG_DTYPES, w, 0, 1)?;
                let xq = mmv_digits(be, p, x)?;
                let args = kern::matmul_gemv_quant_reg::Args { xq, w, b: bias, o: out };
                kern::matmul_gemv_quant_reg::launch_variant(g, name, l, p, args)
            }
        };
    }
    if xop.op != 0 {
        return Err(err(format!("matmul_prologue: no register GEMV for {:?} weights of k = {k}", w.dtype)));
    }
    let mode = mmv_mode(be, w);
    let (block, rows) = mmv_shape(rows_per_warp(w), n, g.sm_count as usize);
    let grid = n.div_ceil(block / 32 * rows);
    let smem = mmv_smem_bytes(k);
    match (mode.grid(), digits) {
        (None, false) => {
            let name = entry_w(kern::matmul_gemv_quant::ENTRIES, &QUANT_DTYPES, w, 0, 2)?;
            let l = Launch::new((grid as u32, 1, 1), block as u32).smem(smem);
            kern::matmul_gemv_quant::launch_variant(
                g,
                name,
                l,
                p,
                kern::matmul_gemv_quant::Args { x, w, b: bias, o: out },
            )
        }
        (max_grid, _) => {
            let grid = match max_grid {
                Some(mg) if mg > 0 => grid.min(mg as usize),
                _ => grid,
            };
            let l = Launch::new((grid as u32, 1, 1), block as u32).smem(smem);
            let name = entry_w(kern::matmul_gemv_quant_pre::ENTRIES, &MMQ_DTYPES, w, 0, 1)?;
            let xq = mmv_digits(be, p, x)?;
            let args = kern::matmul_gemv_quant_pre::Args { xq, w, b: bias, o: out };
            kern::matmul_gemv_quant_pre::launch_variant(g, name, l, p, args)
        }
    }
}

/// The batch-1 GEMV mode that runs for weights `w`: the packed formats' ([`packed_mode`]) or the
/// backend's for their dtype ([`MmvMode::for_dtype`]).
fn mmv_mode(be: &CudaBackend, w: &CudaBuffer) -> MmvMode {
    if w.packed { packed_mode(be.mmv(), w.dtype) } else { be.mmv().for_dtype(w.dtype) }
}

/// Which register GEMV runs a batch-1 matmul over `w` (`MmvMode::Reg` for its format, where the
/// shape fits; with `bulk` on sm_90 the one streaming rows through shared memory), and whether
/// its mode has the lanes quantize an f32 x; None: the `Pre` / in-block GEMVs.
enum RegGemv {
    Bulk(Launch, u32),
    Reg(Launch),
}

fn reg_gemv(be: &CudaBackend, w: &CudaBuffer, n: usize, k: usize) -> Option<(RegGemv, bool)> {
    let g = be.gpu();
    let mode = mmv_mode(be, w);
    let MmvMode::Reg { max_grid, lanes_quantize, bulk } = mode else { return None };
    if !(w.packed || REG_DTYPES.contains(&w.dtype)) {
        return None;
    }
    let (unit, sms) = (reg_unit(w), g.sm_count as usize);
    if bulk && g.cc.0 >= 9 {
        let limits = BulkLimits { max_grid, smem_max: g.smem_optin as usize, max_stages: be.mmv_stages() };
        if let Some((l, stages)) = mmv_bulk_launch(unit, n, k, reg_row_bytes(w, k), sms, limits) {
            return Some((RegGemv::Bulk(l, stages as u32), lanes_quantize));
        }
    }
    let l = mmv_reg_launch(unit, n, k, sms, max_grid, g.smem_optin as usize)?;
    Some((RegGemv::Reg(l), lanes_quantize))
}

/// x's two int8 digits per element in the `_m1` layout ([`mmv_smem_bytes`]): an X8 x as it is,
/// or an f32 x quantized into the `mmv_xq` scratch (`matmul_quantize_x_m1`, one thread per x
/// word), for the `_m1_pre` and `_m1_reg` GEMVs.
fn mmv_digits(be: &CudaBackend, p: &MatmulParams, x: &CudaBuffer) -> Result<Scratch> {
    if x.dtype == DType::X8 {
        return Ok(Scratch(x.ptr()));
    }
    let g = be.gpu();
    let k = u(p.k);
    let xq = Scratch(g.scratch("mmv_xq", mmv_smem_bytes(k))?);
    let qargs = kern::matmul_quantize_x_m1::Args { x, xq };
    kern::matmul_quantize_x_m1::launch(g, Launch::elems(8 * k.div_ceil(32)), p, qargs)?;
    Ok(xq)
}

/// Threads a block of the GEMVs with x in registers (`matmul_gemv_<fmt>_m1_reg`) may have: one
/// per 32 elements of k for Q4_K / Q5_K (k / 256 <= 128 super-blocks), per 16 for int8 rows and
/// packed Q8_0.
pub const MMV_REG_MAX_THREADS: usize = 1024;

/// (elements k must be a multiple of, elements per thread) of the register GEMV for weights `w`:
/// int8 rows (16, 16), packed Q8_0 (256, 16: whole super-blocks), Q4_K / Q5_K and the packed
/// 4-bit formats (256, 32).
fn reg_unit(w: &CudaBuffer) -> (usize, usize) {
    match (w.packed, w.dtype) {
        (true, DType::Ggml(GgmlType::Q8_0)) => (256, 16),
        (false, DType::I8Row) => (16, 16),
        _ => (256, 32),
    }
}

/// Bytes of one weight row of k elements for the register GEMVs: GGML blocks (packed or not: the
/// same bytes), or int8 rows' k codes (their scales follow the matrix).
fn reg_row_bytes(w: &CudaBuffer, k: usize) -> usize {
    match w.dtype {
        DType::Ggml(t) => k / t.block_size() * t.type_size(),
        _ => k,
    }
}

/// Shared memory a multiprocessor gives the bulk GEMVs' stages and sums (of the 228 KiB of an
/// H100 / H200 SM; the rest stays for the L1 cache).
const MMV_BULK_SMEM_SM: usize = 200 << 10;
/// The most stages a bulk GEMV block has (`MMV_MAX_STAGES` of cuda/matmul_quant.cu).
pub const MMV_MAX_STAGES: usize = 8;

/// What bounds a bulk GEMV launch besides its shape: `max_grid` (blocks, 0: the SMs' share, as
/// `MmvMode::Reg`), the device's opt-in shared memory a block, and the most stages a block has
/// (`CudaBackend::mmv_stages`: [`MMV_MAX_STAGES`] unless `LSERVE_CUDA_MMV_STAGES` set it at open).
#[derive(Clone, Copy, Debug)]
pub struct BulkLimits {
    pub max_grid: u32,
    pub smem_max: usize,
    pub max_stages: usize,
}

/// The launch of `matmul_gemv_<fmt>_m1_bulk[f]` (sm_90, [`MmvMode::Reg`] with `bulk`) for n rows
/// of k, `rb` bytes a row, with its stage count; `None` where it does not run (as
/// [`mmv_reg_launch`], or rows not a multiple of 16 bytes, or two stages not fitting). Threads:
/// the register kernel's computing warps plus the producer warp; blocks per SM: as many as keep
/// 1024 computing threads an SM (at most 8) while two stages of each fit [`MMV_BULK_SMEM_SM`];
/// rows per block a multiple of 4 covering n over that grid (or over `max_grid` blocks, when not
/// 0: `bulk:N`, and the tests' many groups a block); stages: as many 4-row stages as
/// the SM's share allows (at most [`MMV_MAX_STAGES`], at most the block's groups). Shared memory:
/// the sums (one f32 per computing warp and row), 128 bytes of alignment, the stages.
pub fn mmv_bulk_launch(
    (unit, per): (usize, usize),
    n: usize,
    k: usize,
    rb: usize,
    sms: usize,
    BulkLimits { max_grid, smem_max, max_stages: cap }: BulkLimits,
) -> Option<(Launch, usize)> {
    if rb == 0 || !rb.is_multiple_of(16) {
        return None;
    }
    let compute = reg_threads((unit, per), n, k).filter(|&t| t + 32 <= MMV_REG_MAX_THREADS)?;
    let (stage, sms) = (4 * rb, sms.max(1));
    let (target, bps) = if max_grid > 0 {
        (max_grid as usize, (max_grid as usize).div_ceil(sms))
    } else {
        let mut bps = (1024 / compute).clamp(1, 8);
        while bps > 1 && bps * 2 * stage > MMV_BULK_SMEM_SM {
            bps -= 1;
        }
        (sms * bps, bps)
    };
    let rows = n.div_ceil(target).next_multiple_of(4);
    let grid = n.div_ceil(rows);
    let red = compute / 32 * rows * 4 + 128;
    let fit = (MMV_BULK_SMEM_SM / bps).saturating_sub(red) / stage;
    let stages = fit.min(cap).min(rows / 4);
    let smem = red + stages * stage;
    // One stage serializes copy and dots: only where a block has one group, or when asked.
    (stages >= 1 && (stages >= 2 || rows == 4 || cap == 1) && smem <= smem_max)
        .then(|| (Launch::new((grid as u32, 1, 1), (compute + 32) as u32).smem(smem), stages))
}

/// The most weight rows a warp of the `_m1` / `_m1_pre` GEMVs takes (`Q::RM` of
/// cuda/matmul_quant.cu): 2 for Q4_K, Q5_K and the packed formats, 4 for int8 rows, else 1.
fn rows_per_warp(w: &CudaBuffer) -> usize {
    match w.dtype {
        _ if w.packed => 2,
        DType::Ggml(GgmlType::Q4_K | GgmlType::Q5_K) => 2,
        DType::I8Row => 4,
        _ => 1,
    }
}

/// The register GEMVs' computing threads for rows of k (`(unit, per)` = [`reg_unit`]): one per
/// `per` elements in whole warps; `None` where k is not a whole number of units or n or k is 0.
fn reg_threads((unit, per): (usize, usize), n: usize, k: usize) -> Option<usize> {
    (k.is_multiple_of(unit) && k > 0 && n > 0).then(|| 32 * (k / per).div_ceil(32))
}

/// The launch of `matmul_gemv_<fmt>_m1_reg` for n rows of k with `(unit, per)` = [`reg_unit`]
/// ([`MmvMode::Reg`]), or `None` where it does not run (k not a multiple of `unit`: whole
/// super-blocks for the K-quants and packed Q8_0, 16 elements for int8 rows; or more than
/// [`MMV_REG_MAX_THREADS`] threads). Threads: one per `per` elements of k (32 for the K-quants,
/// 16 for the 8-bit codes), whole warps; grid: blocks of R rows (R a multiple
/// of 4), as many as `max_grid` (0: one 1024-thread SM's worth of blocks per SM, `sms` SMs);
/// shared memory: one f32 per warp and row of the block (cuda/matmul_quant.cu, whose kernels
/// derive their R from the grid: never more than the host's), declined above `smem_max` (the
/// device's opt-in limit: a long n on a GPU with few SMs).
pub fn mmv_reg_launch(
    (unit, per): (usize, usize),
    n: usize,
    k: usize,
    sms: usize,
    max_grid: u32,
    smem_max: usize,
) -> Option<Launch> {
    let threads = reg_threads((unit, per), n, k).filter(|&t| t <= MMV_REG_MAX_THREADS)?;
    let target = if max_grid > 0 { max_grid as usize } else { sms.max(1) * (1024 / threads).max(1) };
    let rows = n.div_ceil(target).next_multiple_of(4);
    let grid = n.div_ceil(rows);
    let smem = threads / 32 * rows * 4;
    (smem <= smem_max).then(|| Launch::new((grid as u32, 1, 1), threads as u32).smem(smem))
}

/// The MMQ GEMM (2 <= m <= MMQ_MAX_M, integer-coded weights): x into the digit scratches, then one
/// block of 256 threads per 32 weight rows (cuda/matmul_mmq.cu).
fn matmul_mmq(
    be: &CudaBackend,
    p: &MatmulParams,
    x: &CudaBuffer,
    w: &CudaBuffer,
    bias: Option<&CudaBuffer>,
    out: &mut CudaBuffer,
) -> Result<()> {
    let g = be.gpu();
    let (m, n, k) = (u(p.m), u(p.n), u(p.k));
    let (xq_bytes, xds_bytes) = mmq_x_bytes(m, k);
    let xq = Scratch(g.scratch("mmq_xq", xq_bytes)?);
    let xds = Scratch(g.scratch("mmq_xds", xds_bytes)?);
    let pairs = k.div_ceil(32) * 8 * mmq_tiles(m);
    let qargs = kern::matmul_quantize_x::Args { x, xq, xds };
    kern::matmul_quantize_x::launch(g, Launch::elems(8 * pairs), p, qargs)?;
    let tiles = mmq_tiles(m);
    let name = entry_w(kern::matmul_mmq::ENTRIES, &MMQ_DTYPES, w, tiles.trailing_zeros() as usize, 4)?;
    let l = Launch::new((n.div_ceil(32) as u32, 1, 1), 256);
    let args = kern::matmul_mmq::Args { xq, xds, w, b: bias, o: out };
    kern::matmul_mmq::launch_variant(g, name, l, p, args)
}

/// The n-tiles (8 rows of x each) of the MMQ entry for m rows: ceil(m / 8) rounded up to 1, 2, 4, 8.
pub fn mmq_tiles(m: usize) -> usize {
    m.div_ceil(8).next_power_of_two()
}

/// Bytes of the MMQ x scratches for m rows of k: the digits (64 bytes per 32 elements of a row,
/// rows padded to the entry's 8 * `mmq_tiles(m)`, cuda/matmul_mmq.cu `mmq_rows`) and (d, sum)
/// (8 bytes per 32 elements).
pub fn mmq_x_bytes(m: usize, k: usize) -> (usize, usize) {
    let pairs = k.div_ceil(32) * 8 * mmq_tiles(m);
    (64 * pairs, 8 * pairs)
}

/// Threads per block and weight rows per warp of the integer-dot GEMV for n rows: 8 warps (4
/// below 4096 rows), and as many rows per warp (up to `most`, the format's `RM` in
/// matmul_quant.cu: [`rows_per_warp`]; each block quantizes x once for all its rows) as leave at
/// least 4 blocks per SM.
pub fn mmv_shape(most: usize, n: usize, sms: usize) -> (usize, usize) {
    let block = if n >= 4096 { 256 } else { 128 };
    let rows = [4, 2].into_iter().filter(|&r| r <= most).find(|&r| n.div_ceil(block / 32 * r) >= 4 * sms).unwrap_or(1);
    (block, rows)
}

/// Where the batch-1 integer-dot GEMV (`matmul_gemv_<fmt>_m1`, every quantized format but fp8)
/// gets x's two int8 digits per element (cuda/matmul_quant.cu). Both give the same digits and run
/// the same dot code, so the same results; only the speed differs (docs/benchmarks.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MmvMode {
    /// Per weight format, whichever was fastest on the H200 ([`MmvMode::for_dtype`]).
    #[default]
    Auto,
    /// Each block quantizes x into its shared memory before its first weight load.
    InBlock,
    /// `matmul_quantize_x_m1` quantizes x once per call into a scratch; each block copies it into
    /// shared memory (cp.async) while its first weight lines are prefetched. `max_grid`: at most
    /// this many blocks (0: the in-block grid of [`mmv_shape`]); below that grid the warps loop
    /// over row groups of the format's most rows per warp.
    Pre { max_grid: u32 },
    /// Q4_K, Q5_K and int8 rows (where k allows, [`mmv_reg_launch`]): x quantized once per call as in
    /// `Pre`, held in registers by lanes that own the same 32 elements of every row
    /// (`matmul_gemv_<fmt>_m1_reg`); `max_grid`: at most this many blocks (0: [`mmv_reg_launch`]'s
    /// default). `lanes_quantize`: no separate quantization of x; the lanes quantize their own
    /// elements of x (`matmul_gemv_<fmt>_m1_regf`). `bulk` (sm_90; elsewhere, or where
    /// [`mmv_bulk_launch`] declines, as without it): the weight rows stream into shared memory by
    /// bulk copies (`matmul_gemv_<fmt>_m1_bulk[f]`). Other formats as `Pre` on
    /// the in-block grid.
    Reg { max_grid: u32, lanes_quantize: bool, bulk: bool },
}

/// Weight formats whose batch-1 GEMV is faster with x quantized once per call ([`MmvMode::Pre`])
/// than in every block. Measured as the Llama-3-8B 32K sparse batch-1 step on the H200, two runs
/// each (docs/benchmarks.md, session 13), in-block vs pre, ms: Q4_K 4.09 / 4.14 vs 3.46 / 3.46,
/// Q5_K 4.40 / 4.40 vs 3.76 / 3.78, Q6_K 5.21 / 5.27 vs 4.96 / 4.87, Q5_1 5.09 / 5.31 vs 4.89 /
/// 4.91, int8 rows 4.29 vs 3.95; slower or equal with it: Q8_0 5.23 vs 5.42, Q4_0 4.85 / 4.74 vs
/// 4.93 / 4.94, Q5_0 5.43 / 5.48 vs 5.75 / 5.78, Q4_1 4.80 / 4.56 vs 4.80 / 4.58 (where a block's
/// own quantization of x is cheap beside its rows, the extra launch costs more than it saves).
pub fn mmv_pre_wins(d: DType) -> bool {
    use crate::backend::reference::ggml_quant::GgmlType;
    matches!(d, DType::I8Row | DType::Ggml(GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K | GgmlType::Q5_1))
}

impl MmvMode {
    /// The mode that runs for weights of dtype `d`: itself, or for [`MmvMode::Auto`] the fastest
    /// measured on the H200 (Llama-3-8B 32K sparse batch-1 step, ms, docs/benchmarks.md session
    /// 17 call 4, two runs, against `Pre` in the same call): Q4_K x in registers from the scratch
    /// (3.04 / 3.03 vs 3.41 / 3.47); Q5_K the same (3.58 / 3.39; `Pre` 3.65 / 3.62 in call 3);
    /// int8 rows x in registers quantized by the lanes (3.41 / 3.58; `Pre` 4.10 / 4.12 in call
    /// 3), their rows streamed by bulk copies on sm_90 (H100, session 30: 4.04 / 4.06 vs 4.12 /
    /// 4.28 without; packed Q8_0 likewise, [`packed_mode`]: 4.09 / 4.16 vs 4.41 / 4.51; Q4_K
    /// measured slower with them at every block and stage count tried, 3.07-3.48 vs 3.03-3.16); the
    /// others by [`mmv_pre_wins`]. Shapes the register kernels decline ([`mmv_reg_launch`]) run
    /// `Pre`.
    pub fn for_dtype(self, d: DType) -> MmvMode {
        use crate::backend::reference::ggml_quant::GgmlType;
        match (self, d) {
            (MmvMode::Auto, DType::I8Row) => MmvMode::Reg { max_grid: 0, lanes_quantize: true, bulk: true },
            (MmvMode::Auto, DType::Ggml(GgmlType::Q4_K | GgmlType::Q5_K)) => {
                MmvMode::Reg { max_grid: 0, lanes_quantize: false, bulk: false }
            }
            (MmvMode::Auto, d) if mmv_pre_wins(d) => MmvMode::Pre { max_grid: 0 },
            (MmvMode::Auto, _) => MmvMode::InBlock,
            (m, _) => m,
        }
    }
}

impl MmvMode {
    /// From `LSERVE_CUDA_MMV` ([`MmvMode::parse`]); unset means [`MmvMode::Auto`].
    pub fn from_env(sms: u32) -> Result<Self> {
        match std::env::var("LSERVE_CUDA_MMV") {
            Ok(v) => Self::parse(&v, sms).map_err(|e| Error::InvalidArgument(format!("LSERVE_CUDA_MMV: {e}"))),
            Err(_) => Ok(MmvMode::Auto),
        }
    }

    /// `auto` (or empty), `inblock`, `pre`, or `pre:N`: at most N blocks per SM (`sms` SMs),
    /// warps looping over row groups.
    pub fn parse(s: &str, sms: u32) -> std::result::Result<Self, String> {
        match s.trim() {
            "" | "auto" => Ok(MmvMode::Auto),
            "inblock" => Ok(MmvMode::InBlock),
            "pre" => Ok(MmvMode::Pre { max_grid: 0 }),
            "reg" => Ok(MmvMode::Reg { max_grid: 0, lanes_quantize: false, bulk: false }),
            "regf" => Ok(MmvMode::Reg { max_grid: 0, lanes_quantize: true, bulk: false }),
            "bulk" => Ok(MmvMode::Reg { max_grid: 0, lanes_quantize: false, bulk: true }),
            "bulkf" => Ok(MmvMode::Reg { max_grid: 0, lanes_quantize: true, bulk: true }),
            v => {
                let per_sm = |pre: &str| v.strip_prefix(pre).and_then(|n| n.parse::<u32>().ok()).filter(|&n| n > 0);
                let grid = |n: u32| n.saturating_mul(sms.max(1));
                let reg = |max_grid, lanes_quantize, bulk| Ok(MmvMode::Reg { max_grid, lanes_quantize, bulk });
                if let Some(n) = per_sm("pre:") {
                    Ok(MmvMode::Pre { max_grid: grid(n) })
                } else if let Some(n) = per_sm("reg:") {
                    reg(grid(n), false, false)
                } else if let Some(n) = per_sm("regf:") {
                    reg(grid(n), true, false)
                } else if let Some(n) = per_sm("bulk:") {
                    reg(grid(n), false, true)
                } else if let Some(n) = per_sm("bulkf:") {
                    reg(grid(n), true, true)
                } else {
                    Err(format!(
                        "`{v}` is not auto, inblock, pre, pre:N, reg, reg:N, regf, regf:N, bulk, bulk:N, bulkf or bulkf:N (N >= 1 blocks per SM)"
                    ))
                }
            }
        }
    }

    /// For weights of dtype `d`: `Some(max_grid)` where x is quantized once per call (see
    /// [`MmvMode::Pre`]), `None` where each block quantizes it.
    pub fn pre_grid(self, d: DType) -> Option<u32> {
        self.for_dtype(d).grid()
    }

    /// [`MmvMode::pre_grid`] of a mode already resolved for its weights (`for_dtype`,
    /// [`packed_mode`]): `Auto` and `InBlock` quantize x in every block.
    fn grid(self) -> Option<u32> {
        match self {
            MmvMode::Auto | MmvMode::InBlock => None,
            MmvMode::Pre { max_grid } => Some(max_grid),
            MmvMode::Reg { .. } => Some(0),
        }
    }
}

/// Shared memory of the integer-dot GEMV: x as two int8 digits (2 x 36 bytes, padded) and (d, sum) (8 bytes)
/// per block of 32 elements of k (cuda/matmul_quant.cu).
pub fn mmv_smem_bytes(k: usize) -> usize {
    x8_bytes(k)
}

fn sgemm(be: &CudaBackend, p: &MatmulParams, x: &CudaBuffer, w: &CudaBuffer, out0: u64) -> Result<()> {
    let (m, n, k) = (p.m as i32, p.n as i32, p.k as i32);
    let h = *be.gpu().blas.handle();
    let (one, zero) = (1f32, 0f32);
    let (tn, nn) = (blas::cublasOperation_t::CUBLAS_OP_T, blas::cublasOperation_t::CUBLAS_OP_N);
    // SAFETY: pointers and leading dimensions describe the buffers checked by `matmul` (out0 =
    // out + out_off, out_len() floats checked).
    unsafe {
        cudarc::cublas::result::sgemm(
            h,
            tn,
            nn,
            n,
            m,
            k,
            &one,
            w.ptr() as *const f32,
            k,
            x.ptr() as *const f32,
            k,
            &zero,
            out0 as *mut f32,
            p.ldo as i32,
        )
    }
    .map_err(|e| err(format!("cuBLAS SGEMM {m}x{n}x{k}: {e:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dequant_chunks_are_whole_matrices_or_whole_tiles() {
        let mib = 1 << 20;
        // The 8B shape: gate|up (28672 x 4096) and down (4096 x 14336).
        assert_eq!(dequant_rows(64 * mib, 28672, 4096), 8192);
        assert_eq!(dequant_rows(64 * mib, 4096, 14336), 2304); // 2340 rows fit: 18 whole tiles
        assert_eq!(dequant_rows(256 * mib, 28672, 4096), 28672);
        assert_eq!(dequant_rows(256 * mib, 4096, 14336), 4096);
        // Below one tile: one tile (or the whole matrix where it is smaller).
        assert_eq!(dequant_rows(16 << 10, 300, 4096), 128);
        assert_eq!(dequant_rows(16 << 10, 100, 4096), 100);
        assert_eq!(dequant_rows(16 << 10, 300, 32), 256);
        assert_eq!(dequant_rows(1, 1, 32), 1);
    }

    #[test]
    fn x8_dtypes_are_the_formats_that_read_digits() {
        use crate::backend::reference::ggml_quant::GgmlType::*;
        let g = DType::Ggml;
        assert_eq!(x8_dtypes(MmvMode::Auto, false), [g(Q5_1), g(Q4_K), g(Q5_K), g(Q6_K), DType::I8Row]);
        assert_eq!(x8_dtypes(MmvMode::Auto, true), MMQ_DTYPES, "packed: every 32-element format reads digits");
        for pack in [false, true] {
            assert!(x8_dtypes(MmvMode::InBlock, pack).is_empty());
            assert_eq!(x8_dtypes(MmvMode::Pre { max_grid: 0 }, pack), MMQ_DTYPES);
            let reg = x8_dtypes(MmvMode::Reg { max_grid: 0, lanes_quantize: true, bulk: false }, pack);
            assert_eq!(reg, MMQ_DTYPES, "Reg: the register formats read digits, the others run Pre");
        }
    }

    /// The bulk GEMVs' launch: the register kernel's threads plus a producer warp, blocks an SM
    /// within the stage budget, rows a multiple of 4, 2..=8 stages (1 where a block has one group).
    fn limits(max_grid: u32, smem_max: usize) -> BulkLimits {
        BulkLimits { max_grid, smem_max, max_stages: MMV_MAX_STAGES }
    }

    #[test]
    fn mmv_bulk_launch_shapes() {
        let (q4k, i8) = ((256, 32), (16, 16));
        for (d, n, k, rb, max_grid, grid, threads, stages, smem) in [
            (q4k, 28672, 4096, 2304, 0, 1024, 160, 2, 576 + 2 * 9216), // gate|up: 8 blocks an SM, 28 rows
            (q4k, 4096, 14336, 8064, 0, 256, 480, 3, 1024 + 3 * 32256), // down: 2 an SM, 16 rows
            (q4k, 4096, 4096, 2304, 0, 1024, 160, 1, 192 + 9216),      // o: one group a block
            (i8, 4096, 14336, 14336, 0, 128, 928, 3, 3712 + 3 * 57344), // int8 down: 1 an SM, 32 rows
            (q4k, 300, 512, 288, 2, 2, 64, 8, 736 + 8 * 1152),         // capped: 38 groups, 8 stages
        ] {
            let (l, st) = mmv_bulk_launch(d, n, k, rb, 132, limits(max_grid, 227 << 10))
                .unwrap_or_else(|| panic!("{d:?} {n}x{k} declined"));
            assert_eq!((l.grid.0, l.block, st, l.smem as usize), (grid, threads, stages, smem), "{d:?} {n}x{k}");
        }
        // Declined: k not whole units, too many threads, rows not 16-byte multiples, no room.
        assert!(mmv_bulk_launch(q4k, 10, 300, 144, 132, limits(0, 227 << 10)).is_none());
        assert!(mmv_bulk_launch(q4k, 10, 256 * 128, 144 * 128, 132, limits(0, 227 << 10)).is_none());
        assert!(mmv_bulk_launch(i8, 10, 48, 40, 132, limits(0, 227 << 10)).is_none());
        assert!(mmv_bulk_launch(q4k, 4096, 4096, 2304, 132, limits(0, 9_000)).is_none());
    }

    /// The launch of the GEMV with x in registers: threads per 32 (K-quants) or 16 (int8)
    /// elements of k in whole warps, up to 1024; rows per block a multiple of 4 covering n;
    /// shared memory one f32 per warp and row; shapes it cannot take are declined.
    #[test]
    fn mmv_reg_launch_shapes() {
        let (q4k, i8, q8p) = ((256, 32), (16, 16), (256, 16));
        for (d, n, k, grid, threads, rows) in [
            (q4k, 28672, 4096, 1024, 128, 28), // gate|up of the 8B shape: 132 SMs x 8 blocks -> 28 rows
            (q4k, 4096, 14336, 256, 448, 16),  // down: 448 threads, 2 blocks an SM -> 16 rows
            (q4k, 3, 256, 1, 32, 4),           // one super-block: one warp
            (i8, 4096, 4096, 512, 256, 8),
            (i8, 300, 48, 75, 32, 4),
            (q8p, 4096, 4096, 512, 256, 8), // packed Q8_0: int8's threads
            (q8p, 4096, 14336, 128, 896, 32),
        ] {
            let l = mmv_reg_launch(d, n, k, 132, 0, 227 << 10).unwrap_or_else(|| panic!("{d:?} {n}x{k} declined"));
            assert_eq!((l.grid.0, l.block), (grid, threads), "{d:?} {n}x{k}");
            assert_eq!(l.smem as usize, threads as usize / 32 * rows * 4, "{d:?} {n}x{k}");
            assert!(l.grid.0 as usize * rows >= n);
        }
        // A capped grid: 2 blocks of 152 rows for 300.
        let l = mmv_reg_launch(q4k, 300, 512, 132, 2, 227 << 10).unwrap();
        // The same with a tiny shared-memory limit: declined (x quantized once instead).
        assert!(mmv_reg_launch(q4k, 300, 512, 132, 2, 600).is_none());
        assert_eq!((l.grid.0, l.smem), (2, 152 * 4));
        for (d, k) in [(q4k, 300), (q4k, 256 * 129), (i8, 40), (i8, 16 * 1025), (q4k, 0), (q8p, 288), (q8p, 256 * 65)] {
            assert!(mmv_reg_launch(d, 10, k, 132, 0, 227 << 10).is_none(), "{d:?} k {k}");
        }
    }
}
