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
//!   same digits, same dot code. The default, [`MmvMode::Auto`], takes whichever of the two was
//!   faster on the H200 for the weight format ([`mmv_pre_wins`], docs/benchmarks.md).
//! - Quantized weights but fp8, 2 <= m <= [`MMQ_MAX_M`]: the tensor-core MMQ GEMM
//!   (cuda/matmul_mmq.cu): `matmul_quantize_x` writes x as the same two int8 digits per element
//!   (blocks of 32) into two scratches, then `matmul_mmq_<fmt>_n<NT>` (NT = ceil(m / 8) rounded up
//!   to 1, 2, 4 or 8 n-tiles) multiplies 32 weight rows per block with s8 `mma.sync`, reading each
//!   weight byte once per call.
//! - fp8 rows, m <= [`QUANT_GEMV_MAX_M`] (and m == 1 where the integer GEMV does not fit): the
//!   f32 GEMV (`_m16`), which dequantizes in registers and reads each weight byte once for all
//!   rows, x in f32.
//! - Quantized weights, larger m: chunks of at most [`DEQUANT_SCRATCH_BYTES`] of weight rows are
//!   dequantized to f16 (`matmul_dequant`, the reference's values rounded to nearest even) into a
//!   scratch, and each chunk is one f16 cuBLAS GEMM with x rounded to f16, writing its column
//!   block of out (ldc = ldo, the pointer offset to the chunk's first column). docs/backends.md
//!   argues this against per-tile dequantization into shared memory.
//! - An x already in the 16-bit weights' dtype (m >= 2; `Caps::act16_from`: rmsnorm,
//!   add_rmsnorm and silu_mul wrote it rounded) skips the rounding pass: the same GEMM operands.
//! - f32 weights (tests): SGEMM at m >= 2. A bias is added by a small kernel afterwards.
//!
//! Row-major to cuBLAS column-major: out^T (n x m, ldc = ldo) = op(W)(n x k) . x^T (k x m), with W
//! `[n][k]` read as a k x n column-major matrix transposed (lda k) and x `[m][k]` as k x m (ldb k);
//! a strided output is the same matrix with leading dimension ldo starting at out + out_off.

use cudarc::cublas::sys as blas;

use super::bindings::{self as kern, MMQ_DTYPES, QUANT_DTYPES, Scratch, entry, entry_in};
use super::context::{Launch, err};
use super::graph::GemmRec;
use super::{CudaBackend, CudaBuffer, need, need_float, need_weights};
use crate::backend::*;
use crate::error::{Error, Result};

/// Rows of x from which 16-bit-weight matmuls round x to 16 bits and run as one GEMM.
pub const X16_FROM_M: usize = 2;
/// Rows of x up to which quantized weights (not fp8) multiply x as two int8 digits per element:
/// the integer-dot GEMV at m == 1, the MMQ GEMM from 2 rows to this (`Caps::matmul_x8_max_m`).
pub const MMQ_MAX_M: usize = 64;
/// Rows of x up to which fp8 weights take the f32 GEMV (dequantizing in registers).
pub const QUANT_GEMV_MAX_M: usize = 16;
/// Bound of the f16 scratch a quantized GEMM dequantizes its weight rows into (one chunk).
pub const DEQUANT_SCRATCH_BYTES: usize = 64 << 20;

fn u(x: u32) -> usize {
    x as usize
}

pub fn matmul(
    be: &CudaBackend,
    p: &MatmulParams,
    x: &CudaBuffer,
    w: &CudaBuffer,
    bias: Option<&CudaBuffer>,
    out: &mut CudaBuffer,
) -> Result<()> {
    let (m, n, k) = (u(p.m), u(p.n), u(p.k));
    // x in the weights' own 16-bit dtype (Caps::act16_from) goes to the GEMM as it is.
    let x_act16 = m >= X16_FROM_M && matches!(w.dtype, DType::F16 | DType::BF16) && x.dtype == w.dtype;
    need(x, if x_act16 { w.dtype } else { DType::F32 }, m * k, "matmul x")?;
    if w.dtype.is_weight_quant() {
        need_weights(w, n, k, "matmul w")?;
    } else {
        need_float(w, n * k, "matmul w")?;
    }
    if m > 1 && u(p.ldo) < n {
        return Err(err(format!("matmul: ldo = {} is shorter than a row of n = {n} outputs", p.ldo)));
    }
    need(out, DType::F32, p.out_len(), "matmul out")?;
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
        return matmul_quant(be, p, x, w, bias, out);
    }
    if m < X16_FROM_M {
        // Entries [weight dtype][plain | _vec].
        let name = entry(kern::matmul_gemv::ENTRIES, w.dtype, k.is_multiple_of(8) as usize, 2)?;
        let l = Launch::new((n.div_ceil(8) as u32, 1, 1), 256);
        return kern::matmul_gemv::launch_variant(
            be.gpu(),
            name,
            l,
            p,
            kern::matmul_gemv::Args { x, w, b: bias, o: out },
        );
    }
    let out0 = out.ptr() + 4 * p.out_off as u64;
    if w.dtype == DType::F32 {
        be.gpu().timed("matmul_cublas", || sgemm(be, p, x, w, out0))?;
    } else {
        let bf16 = w.dtype == DType::BF16;
        let x16 = if x_act16 { x.ptr() } else { round_x(be, p, x, bf16)? };
        let g =
            GemmRec { m: m as i32, n: n as i32, k: k as i32, bf16, ldc: p.ldo as i32, w: w.ptr(), x: x16, out: out0 };
        be.gpu().gemm16(g)?;
    }
    add_bias(be, p, bias, out)
}

/// x rounded to bf16 or f16 into the GEMM's x scratch; its device pointer.
fn round_x(be: &CudaBackend, p: &MatmulParams, x: &CudaBuffer, bf16: bool) -> Result<u64> {
    let g = be.gpu();
    let mk = u(p.m) * u(p.k);
    let x16 = g.scratch("gemm_x16", mk * 2)?;
    let round = kern::matmul_round_x::ENTRIES[usize::from(bf16)];
    let args = kern::matmul_round_x::Args { x, x16: Scratch(x16) };
    kern::matmul_round_x::launch_variant(g, round, Launch::elems(mk), p, args)?;
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
fn matmul_quant(
    be: &CudaBackend,
    p: &MatmulParams,
    x: &CudaBuffer,
    w: &CudaBuffer,
    bias: Option<&CudaBuffer>,
    out: &mut CudaBuffer,
) -> Result<()> {
    let (m, n, k) = (u(p.m), u(p.n), u(p.k));
    let g = be.gpu();
    if (2..=MMQ_MAX_M).contains(&m) && w.dtype != DType::F8Row {
        return matmul_mmq(be, p, x, w, bias, out);
    }
    if m <= QUANT_GEMV_MAX_M {
        // The integer-dot GEMV at m == 1 (x quantized into shared memory), unless fp8 or k too long.
        let smem = mmv_smem_bytes(k);
        let mmv = m == 1 && w.dtype != DType::F8Row && smem <= g.smem_optin as usize;
        // Entries [QUANT_DTYPES][m1 | m16]; fp8's m1 is the f32 GEMV.
        let m1 = mmv || (m == 1 && w.dtype == DType::F8Row);
        let name = entry_in(kern::matmul_gemv_quant::ENTRIES, &QUANT_DTYPES, w.dtype, usize::from(!m1), 2)?;
        let l = if mmv {
            let (block, rows) = mmv_shape(w.dtype, n, g.sm_count as usize);
            let grid = n.div_ceil(block / 32 * rows);
            if let Some(max_grid) = be.mmv().pre_grid(w.dtype) {
                let grid = if max_grid > 0 { grid.min(max_grid as usize) } else { grid };
                let l = Launch::new((grid as u32, 1, 1), block as u32).smem(smem);
                return mmv_pre(be, p, x, w, bias, out, l);
            }
            Launch::new((grid as u32, 1, 1), block as u32).smem(smem)
        } else {
            Launch::new((n.div_ceil(8) as u32, 1, 1), 256)
        };
        return kern::matmul_gemv_quant::launch_variant(
            g,
            name,
            l,
            p,
            kern::matmul_gemv_quant::Args { x, w, b: bias, o: out },
        );
    }
    let dequant = entry_in(kern::matmul_dequant::ENTRIES, &QUANT_DTYPES, w.dtype, 0, 1)?;
    let x16 = round_x(be, p, x, false)?;
    let rows = (DEQUANT_SCRATCH_BYTES / (2 * k)).max(1).min(n);
    let w16 = g.scratch("matmul_w16", rows * k * 2)?;
    for r0 in (0..n).step_by(rows) {
        let nr = rows.min(n - r0);
        let pc = MatmulParams { n: nr as u32, ..*p };
        let args = kern::matmul_dequant::Args { w, w16: Scratch(w16), row0: r0 as u32, n_total: p.n };
        kern::matmul_dequant::launch_variant(g, dequant, Launch::elems(nr * k / 32), &pc, args)?;
        let out0 = out.ptr() + 4 * (p.out_off as u64 + r0 as u64);
        let rec = GemmRec {
            m: m as i32,
            n: nr as i32,
            k: k as i32,
            bf16: false,
            ldc: p.ldo as i32,
            w: w16,
            x: x16,
            out: out0,
        };
        g.gemm16(rec)?;
    }
    add_bias(be, p, bias, out)
}

/// The batch-1 integer-dot GEMV with x quantized once ([`MmvMode::Pre`]): x's digits into the
/// `mmv_xq` scratch (one thread per x word), then `matmul_gemv_<fmt>_m1_pre` with launch `l`.
fn mmv_pre(
    be: &CudaBackend,
    p: &MatmulParams,
    x: &CudaBuffer,
    w: &CudaBuffer,
    bias: Option<&CudaBuffer>,
    out: &mut CudaBuffer,
    l: Launch,
) -> Result<()> {
    let g = be.gpu();
    let k = u(p.k);
    let xq = Scratch(g.scratch("mmv_xq", mmv_smem_bytes(k))?);
    let qargs = kern::matmul_quantize_x_m1::Args { x, xq };
    kern::matmul_quantize_x_m1::launch(g, Launch::elems(8 * k.div_ceil(32)), p, qargs)?;
    let name = entry_in(kern::matmul_gemv_quant_pre::ENTRIES, &MMQ_DTYPES, w.dtype, 0, 1)?;
    let args = kern::matmul_gemv_quant_pre::Args { xq, w, b: bias, o: out };
    kern::matmul_gemv_quant_pre::launch_variant(g, name, l, p, args)
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
    let name = entry_in(kern::matmul_mmq::ENTRIES, &MMQ_DTYPES, w.dtype, tiles.trailing_zeros() as usize, 4)?;
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

/// Threads per block and weight rows per warp of the integer-dot GEMV for n rows of `d`: 8 warps
/// (4 below 4096 rows), and as many rows per warp (up to the format's `RM` in matmul_quant.cu: 2
/// for Q4_K and Q5_K, 4 for int8 rows, else 1; each block quantizes x once for all its rows) as leave
/// at least 4 blocks per SM.
pub fn mmv_shape(d: DType, n: usize, sms: usize) -> (usize, usize) {
    use crate::backend::reference::ggml_quant::GgmlType;
    let block = if n >= 4096 { 256 } else { 128 };
    let most = match d {
        DType::Ggml(GgmlType::Q4_K | GgmlType::Q5_K) => 2,
        DType::I8Row => 4,
        _ => 1,
    };
    let rows = [4, 2].into_iter().filter(|&r| r <= most).find(|&r| n.div_ceil(block / 32 * r) >= 4 * sms).unwrap_or(1);
    (block, rows)
}

/// Where the batch-1 integer-dot GEMV (`matmul_gemv_<fmt>_m1`, every quantized format but fp8)
/// gets x's two int8 digits per element (cuda/matmul_quant.cu). Both give the same digits and run
/// the same dot code, so the same results; only the speed differs (docs/benchmarks.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MmvMode {
    /// Per weight format, whichever was faster on the H200: [`MmvMode::Pre`] where
    /// [`mmv_pre_wins`], else [`MmvMode::InBlock`].
    #[default]
    Auto,
    /// Each block quantizes x into its shared memory before its first weight load.
    InBlock,
    /// `matmul_quantize_x_m1` quantizes x once per call into a scratch; each block copies it into
    /// shared memory (cp.async) while its first weight lines are prefetched. `max_grid`: at most
    /// this many blocks (0: the in-block grid of [`mmv_shape`]); below that grid the warps loop
    /// over row groups of the format's most rows per warp.
    Pre { max_grid: u32 },
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
            v => match v.strip_prefix("pre:").and_then(|n| n.parse::<u32>().ok()).filter(|&n| n > 0) {
                Some(n) => Ok(MmvMode::Pre { max_grid: n.saturating_mul(sms.max(1)) }),
                None => Err(format!("`{v}` is not auto, inblock, pre or pre:N (N >= 1 blocks per SM)")),
            },
        }
    }

    /// For weights of dtype `d`: `Some(max_grid)` where x is quantized once per call (see
    /// [`MmvMode::Pre`]), `None` where each block quantizes it.
    pub fn pre_grid(self, d: DType) -> Option<u32> {
        match self {
            MmvMode::Auto => mmv_pre_wins(d).then_some(0),
            MmvMode::InBlock => None,
            MmvMode::Pre { max_grid } => Some(max_grid),
        }
    }
}

/// Shared memory of the integer-dot GEMV: x as two int8 digits (2 x 36 bytes, padded) and (d, sum) (8 bytes)
/// per block of 32 elements of k (cuda/matmul_quant.cu).
pub fn mmv_smem_bytes(k: usize) -> usize {
    80 * k.div_ceil(32)
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
