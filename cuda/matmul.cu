// matmul: out[out_off + r * ldo + c] = x[r, :] . w[c, :] (+ bias[c]) for r < m, c < n (a dense
// [m][n] output has ldo = n, out_off = 0; other elements are untouched); x, out, bias f32; w
// f32/f16/bf16 here (the quantized formats: matmul_quant.cu), f32 accumulation. One row (batch-1 decode) runs the GEMV kernels below; more rows go to cuBLAS (see
// src/backend/cuda/ops_matmul.rs), which needs x in the weights' type: matmul_round_x writes x
// rounded to 16 bits (round to nearest even) for one tensor-core GEMM, and matmul_bias adds the
// bias afterwards.
//
// GEMV (out += the product where the params say accumulate: mm_put): one warp per output column
// n, all (up to MT) rows of x at once, so each weight row is
// read exactly once per call; lanes stride the row 8 elements (16 bytes of 16-bit weights) at a
// time with UNROLL loads in flight. The vector path needs k % 8 == 0 (16-byte aligned rows; every
// allocation is 256-byte aligned); other k take the scalar path. Block: 256 threads = 8 columns.

#define GEMV_UNROLL 4

template <typename W, int MT, bool VEC>
__device__ void gemv_impl(MatmulParams p, const float* x, const W* w, const float* bias, float* out) {
    u32 lane = threadIdx.x & 31;
    u32 n = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (n >= p.n) return;
    const W* row = w + (u64)n * p.k;
    float acc[MT];
#pragma unroll
    for (int r = 0; r < MT; r++) acc[r] = 0.0f;
    if (VEC) {
        u32 k8 = p.k >> 3;
        u32 v = lane;
        for (; v + 32 * (GEMV_UNROLL - 1) < k8; v += 32 * GEMV_UNROLL) {
            float wv[GEMV_UNROLL][8];
#pragma unroll
            for (int u = 0; u < GEMV_UNROLL; u++) load8(row + (u64)(v + 32 * u) * 8, wv[u]);
#pragma unroll
            for (int u = 0; u < GEMV_UNROLL; u++) {
#pragma unroll
                for (int r = 0; r < MT; r++) {
                    if (r < (int)p.m) {
                        const float4* xr = reinterpret_cast<const float4*>(x + (u64)r * p.k + (u64)(v + 32 * u) * 8);
                        float4 a = __ldg(xr), b = __ldg(xr + 1);
                        acc[r] += wv[u][0] * a.x + wv[u][1] * a.y + wv[u][2] * a.z + wv[u][3] * a.w
                                + wv[u][4] * b.x + wv[u][5] * b.y + wv[u][6] * b.z + wv[u][7] * b.w;
                    }
                }
            }
        }
        for (; v < k8; v += 32) {
            float wv[8];
            load8(row + (u64)v * 8, wv);
#pragma unroll
            for (int r = 0; r < MT; r++) {
                if (r < (int)p.m) {
                    const float4* xr = reinterpret_cast<const float4*>(x + (u64)r * p.k + (u64)v * 8);
                    float4 a = __ldg(xr), b = __ldg(xr + 1);
                    acc[r] += wv[0] * a.x + wv[1] * a.y + wv[2] * a.z + wv[3] * a.w
                            + wv[4] * b.x + wv[5] * b.y + wv[6] * b.z + wv[7] * b.w;
                }
            }
        }
    } else {
        for (u32 c = lane; c < p.k; c += 32) {
            float wc = to_f32(row[c]);
#pragma unroll
            for (int r = 0; r < MT; r++)
                if (r < (int)p.m) acc[r] += wc * x[(u64)r * p.k + c];
        }
    }
#pragma unroll
    for (int r = 0; r < MT; r++) {
        float s = warp_sum(acc[r]);
        if (lane == 0 && r < (int)p.m) mm_put(p, out, bias, (u64)r * p.ldo + n, n, s);
    }
}

#define GEMV(name, W, MT) \
    extern "C" __global__ void name##_vec(MatmulParams p, const float* x, const W* w, const float* b, float* o) { gemv_impl<W, MT, true>(p, x, w, b, o); } \
    extern "C" __global__ void name(MatmulParams p, const float* x, const W* w, const float* b, float* o) { gemv_impl<W, MT, false>(p, x, w, b, o); }
GEMV(matmul_gemv_f32, float, 1)
GEMV(matmul_gemv_f16, f16_t, 1)
GEMV(matmul_gemv_bf16, bf16_t, 1)

// x [m][k] f32 -> x16 [m][k] in the weights' 16-bit type. Four elements a thread and step (a
// 16-byte load, an 8-byte store: the host launches m k / 4 threads) where x and x16 are aligned
// for it, the rest (a tail, or unaligned views) one at a time; the same rounding either way.
template <typename T>
__device__ void round_impl(MatmulParams p, const float* x, T* x16) {
    const u64 n = (u64)p.m * p.k, tid = blockIdx.x * (u64)blockDim.x + threadIdx.x, stride = (u64)gridDim.x * blockDim.x;
    const u64 n4 = ((u64)x & 15u) == 0 && ((u64)x16 & 7u) == 0 ? n / 4 : 0;
    for (u64 c = tid; c < n4; c += stride) store4(x16 + 4 * c, load4(x + 4 * c));
    for (u64 i = 4 * n4 + tid; i < n; i += stride) x16[i] = from_f32<T>(x[i]);
}
extern "C" __global__ void matmul_round_x_bf16(MatmulParams p, const float* x, bf16_t* x16) { round_impl(p, x, x16); }
extern "C" __global__ void matmul_round_x_f16(MatmulParams p, const float* x, f16_t* x16) { round_impl(p, x, x16); }

// out[out_off + r * ldo + c] += bias[c] for r < m, c < n.
extern "C" __global__ void matmul_bias(MatmulParams p, const float* bias, float* out) {
    u64 total = (u64)p.m * p.n;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < total; i += (u64)gridDim.x * blockDim.x)
        out[p.out_off + (i / p.n) * p.ldo + i % p.n] += bias[i % p.n];
}
