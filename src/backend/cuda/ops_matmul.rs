//! matmul: out[m, n] = x[m, k] . w[n, k]^T (+ bias), x/out f32, w f32/f16/bf16, f32 accumulation.
//!
//! - m <= [`GEMV_MAX_M`] (decode): our GEMV (cuda/matmul.cu), one warp per output column reading
//!   each weight row once with 16-byte loads; it is what bounds a decode step at the memory floor.
//! - larger m (prefill): cuBLAS. f32 weights: SGEMM. f16/bf16 weights: x is split into two 16-bit
//!   matrices (hi = round(x), lo = round(x - hi)) and two tensor-core GemmEx calls with f32
//!   accumulation sum into out, which keeps ~16 mantissa bits of the f32 activations (one bf16
//!   GEMM would keep 8 and miss the trait's f32-activation contract by ~1e-2). Costs 2x the GEMM
//!   FLOPs; a bias is added by a small kernel afterwards.
//!
//! Row-major to cuBLAS column-major: out^T (n x m, ld n) = op(W)(n x k) . x^T (k x m), with W
//! `[n][k]` read as a k x n column-major matrix transposed (lda k) and x `[m][k]` as k x m (ldb k).

use cudarc::cublas::sys as blas;

use super::context::{Launch, err};
use super::{CudaBackend, CudaBuffer, fidx, need, need_float};
use crate::backend::*;
use crate::error::Result;

/// Rows of x up to which the GEMV kernels run.
pub const GEMV_MAX_M: usize = 16;

fn u(x: u32) -> usize {
    x as usize
}

const GEMV: [[&str; 5]; 3] = [
    ["matmul_gemv_f32_1", "matmul_gemv_f32_2", "matmul_gemv_f32_4", "matmul_gemv_f32_8", "matmul_gemv_f32_16"],
    ["matmul_gemv_f16_1", "matmul_gemv_f16_2", "matmul_gemv_f16_4", "matmul_gemv_f16_8", "matmul_gemv_f16_16"],
    ["matmul_gemv_bf16_1", "matmul_gemv_bf16_2", "matmul_gemv_bf16_4", "matmul_gemv_bf16_8", "matmul_gemv_bf16_16"],
];
const GEMV_VEC: [[&str; 5]; 3] = [
    [
        "matmul_gemv_f32_1_vec",
        "matmul_gemv_f32_2_vec",
        "matmul_gemv_f32_4_vec",
        "matmul_gemv_f32_8_vec",
        "matmul_gemv_f32_16_vec",
    ],
    [
        "matmul_gemv_f16_1_vec",
        "matmul_gemv_f16_2_vec",
        "matmul_gemv_f16_4_vec",
        "matmul_gemv_f16_8_vec",
        "matmul_gemv_f16_16_vec",
    ],
    [
        "matmul_gemv_bf16_1_vec",
        "matmul_gemv_bf16_2_vec",
        "matmul_gemv_bf16_4_vec",
        "matmul_gemv_bf16_8_vec",
        "matmul_gemv_bf16_16_vec",
    ],
];

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
    let bias_ptr = match (p.has_bias, bias) {
        (0, _) => 0,
        (_, Some(b)) => {
            need(b, DType::F32, n, "matmul bias")?;
            b.ptr()
        }
        (_, None) => return Err(err("matmul: has_bias set but no bias buffer given")),
    };
    if m == 0 || n == 0 {
        return Ok(());
    }
    if m <= GEMV_MAX_M {
        let mt = (m.next_power_of_two().trailing_zeros()) as usize;
        let names = if k.is_multiple_of(8) { &GEMV_VEC } else { &GEMV };
        let l = Launch::new((n.div_ceil(8) as u32, 1, 1), 256);
        return be.gpu().launch(
            "matmul",
            names[fidx(w.dtype)][mt],
            l,
            p,
            &[x.ptr(), w.ptr(), bias_ptr, out.ptr()],
            &[],
        );
    }
    be.gpu().timed("matmul_cublas", || gemm(be, p, x, w, out))?;
    if bias_ptr != 0 {
        be.gpu().launch("matmul", "matmul_bias", Launch::elems(m * n), p, &[bias_ptr, out.ptr()], &[])?;
    }
    Ok(())
}

fn gemm(be: &CudaBackend, p: &MatmulParams, x: &CudaBuffer, w: &CudaBuffer, out: &CudaBuffer) -> Result<()> {
    let (m, n, k) = (p.m as i32, p.n as i32, p.k as i32);
    let g = be.gpu();
    let h = *g.blas.handle();
    let (one, zero) = (1f32, 0f32);
    let (tn, nn) = (blas::cublasOperation_t::CUBLAS_OP_T, blas::cublasOperation_t::CUBLAS_OP_N);
    let check = |r: std::result::Result<(), cudarc::cublas::result::CublasError>| {
        r.map_err(|e| err(format!("cuBLAS GEMM {m}x{n}x{k}: {e:?}")))
    };
    if w.dtype == DType::F32 {
        // SAFETY: pointers and leading dimensions describe the buffers checked by `matmul`.
        return check(unsafe {
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
        });
    }
    let elems = u(p.m) * u(p.k);
    let hi = g.scratch("gemm_x_hi", elems * 2)?;
    let lo = g.scratch("gemm_x_lo", elems * 2)?;
    let split = if w.dtype == DType::BF16 { "matmul_split_x_bf16" } else { "matmul_split_x_f16" };
    g.launch("matmul", split, Launch::elems(elems), p, &[x.ptr(), hi, lo], &[])?;
    let ty = if w.dtype == DType::BF16 { blas::cudaDataType::CUDA_R_16BF } else { blas::cudaDataType::CUDA_R_16F };
    for (part, beta) in [(hi, &zero), (lo, &one)] {
        // SAFETY: as above; hi/lo hold m*k 16-bit elements written by the split kernel in stream order.
        check(unsafe {
            cudarc::cublas::result::gemm_ex(
                h,
                tn,
                nn,
                n,
                m,
                k,
                &one as *const f32 as *const _,
                w.ptr() as *const _,
                ty,
                k,
                part as *const _,
                ty,
                k,
                beta as *const f32 as *const _,
                out.ptr() as *mut _,
                blas::cudaDataType::CUDA_R_32F,
                n,
                blas::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                blas::cublasGemmAlgo_t::CUBLAS_GEMM_DFALT,
            )
        })?;
    }
    Ok(())
}
