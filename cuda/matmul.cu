// matmul: out[m, n] = x[m, k] . w[n, k]^T (+ bias[n]); x, out, bias f32; w f32/f16/bf16, f32
// accumulation. Small m (decode) runs the GEMV kernels below; larger m goes to cuBLAS (see
// src/backend/cuda/ops_matmul.rs), which needs x in the weights' type: matmul_split_x writes
// x = hi + lo as two 16-bit matrices so two tensor-core GEMMs keep ~16 mantissa bits of x, and
// matmul_bias adds the bias afterwards.
//
// GEMV: one warp per output column n, all (up to MT) rows of x at once, so each weight row is
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
        if (lane == 0 && r < (int)p.m) out[(u64)r * p.n + n] = s + (p.has_bias ? bias[n] : 0.0f);
    }
}

#define GEMV(name, W, MT) \
    extern "C" __global__ void name##_vec(MatmulParams p, const float* x, const W* w, const float* b, float* o) { gemv_impl<W, MT, true>(p, x, w, b, o); } \
    extern "C" __global__ void name(MatmulParams p, const float* x, const W* w, const float* b, float* o) { gemv_impl<W, MT, false>(p, x, w, b, o); }
GEMV(matmul_gemv_f32_1, float, 1)
GEMV(matmul_gemv_f32_2, float, 2)
GEMV(matmul_gemv_f32_4, float, 4)
GEMV(matmul_gemv_f32_8, float, 8)
GEMV(matmul_gemv_f32_16, float, 16)
GEMV(matmul_gemv_f16_1, f16_t, 1)
GEMV(matmul_gemv_f16_2, f16_t, 2)
GEMV(matmul_gemv_f16_4, f16_t, 4)
GEMV(matmul_gemv_f16_8, f16_t, 8)
GEMV(matmul_gemv_f16_16, f16_t, 16)
GEMV(matmul_gemv_bf16_1, bf16_t, 1)
GEMV(matmul_gemv_bf16_2, bf16_t, 2)
GEMV(matmul_gemv_bf16_4, bf16_t, 4)
GEMV(matmul_gemv_bf16_8, bf16_t, 8)
GEMV(matmul_gemv_bf16_16, bf16_t, 16)

// x [m][k] f32 -> hi, lo [m][k] 16-bit with x ~= hi + lo.
template <typename T>
__device__ void split_impl(MatmulParams p, const float* x, T* hi, T* lo) {
    u64 n = (u64)p.m * p.k;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        float v = x[i];
        T h = from_f32<T>(v);
        hi[i] = h;
        lo[i] = from_f32<T>(v - to_f32(h));
    }
}
extern "C" __global__ void matmul_split_x_bf16(MatmulParams p, const float* x, bf16_t* hi, bf16_t* lo) { split_impl(p, x, hi, lo); }
extern "C" __global__ void matmul_split_x_f16(MatmulParams p, const float* x, f16_t* hi, f16_t* lo) { split_impl(p, x, hi, lo); }

// out[m][n] += bias[n].
extern "C" __global__ void matmul_bias(MatmulParams p, const float* bias, float* out) {
    u64 total = (u64)p.m * p.n;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < total; i += (u64)gridDim.x * blockDim.x) out[i] += bias[i % p.n];
}
