//! matmul: out[m, n] = x[m, k] . w[n, k]^T (+ bias), x/out f32, w f32/f16/bf16, f32 accumulation.
//!
//! - m == 1 (a batch-1 decode step): our GEMV (cuda/matmul.cu), one warp per output column
//!   reading each weight row once with 16-byte loads, x in f32; it is what bounds a decode step
//!   at the memory floor.
//! - m >= 2 (batched decode, prefill) with 16-bit weights: x is rounded to the weights' dtype
//!   (`matmul_round_x`, the trait's `Caps::matmul_x16_from`) and one tensor-core cuBLAS GEMM
//!   with f32 accumulation reads every weight once for all rows. It is recorded in the step's
//!   launch list like a kernel (graph.rs), so a batched decode step replays as one graph. (The
//!   hi + lo split this replaced kept ~16 mantissa bits of x at twice the weight reads; the
//!   accuracy of 16-bit activations is measured in docs/benchmarks.md.)
//! - f32 weights (tests): SGEMM at m >= 2. A bias is added by a small kernel afterwards.
//!
//! Row-major to cuBLAS column-major: out^T (n x m, ld n) = op(W)(n x k) . x^T (k x m), with W
//! `[n][k]` read as a k x n column-major matrix transposed (lda k) and x `[m][k]` as k x m (ldb k).

use cudarc::cublas::sys as blas;

use super::bindings::{self as kern, Scratch, entry};
use super::context::{Launch, err};
use super::graph::GemmRec;
use super::{CudaBackend, CudaBuffer, need, need_float};
use crate::backend::*;
use crate::error::Result;

/// Rows of x from which 16-bit-weight matmuls round x to 16 bits and run as one GEMM.
pub const X16_FROM_M: usize = 2;

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
    need(x, DType::F32, m * k, "matmul x")?;
    need_float(w, n * k, "matmul w")?;
    need(out, DType::F32, m * n, "matmul out")?;
    if !p.is_dense() {
        return Err(err("matmul: a strided output (ldo != n or out_off != 0) is not implemented on this backend"));
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
    if w.dtype == DType::F32 {
        be.gpu().timed("matmul_cublas", || sgemm(be, p, x, w, out))?;
    } else {
        let g = be.gpu();
        let x16 = g.scratch("gemm_x16", m * k * 2)?;
        let round = kern::matmul_round_x::ENTRIES[usize::from(w.dtype == DType::BF16)];
        let args = kern::matmul_round_x::Args { x, x16: Scratch(x16) };
        kern::matmul_round_x::launch_variant(g, round, Launch::elems(m * k), p, args)?;
        let bf16 = w.dtype == DType::BF16;
        g.gemm16(GemmRec { m: m as i32, n: n as i32, k: k as i32, bf16, w: w.ptr(), x: x16, out: out.ptr() })?;
    }
    if let Some(bias) = bias {
        let args = kern::matmul_bias::Args { bias, out };
        kern::matmul_bias::launch(be.gpu(), Launch::elems(m * n), p, args)?;
    }
    Ok(())
}

fn sgemm(be: &CudaBackend, p: &MatmulParams, x: &CudaBuffer, w: &CudaBuffer, out: &CudaBuffer) -> Result<()> {
    let (m, n, k) = (p.m as i32, p.n as i32, p.k as i32);
    let h = *be.gpu().blas.handle();
    let (one, zero) = (1f32, 0f32);
    let (tn, nn) = (blas::cublasOperation_t::CUBLAS_OP_T, blas::cublasOperation_t::CUBLAS_OP_N);
    // SAFETY: pointers and leading dimensions describe the buffers checked by `matmul`.
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
            out.ptr() as *mut f32,
            n,
        )
    }
    .map_err(|e| err(format!("cuBLAS SGEMM {m}x{n}x{k}: {e:?}")))
}
