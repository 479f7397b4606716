// matmul over quantized weights (the formats of quant.cuh: GGML Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K
// Q5_K Q6_K; the row-scaled int8 / fp8 [n][k] codes then [n] f32 scales): out[out_off + r * ldo +
// c] = x[r, :] . w[c, :] (+ bias[c]), x / out / bias f32. src/backend/cuda/ops_matmul.rs picks:
//
// - m <= 16: matmul_gemv_<fmt>_m1 / _m16 — one warp per weight row, all m rows of x at once, so
//   each weight byte is read exactly once per call; lanes take the row's decode chunks (a whole
//   32-weight block, or a quarter of a K-quant super-block: 64 weights) in turn, dequantize them
//   in registers (quant.cuh) and multiply with x in f32 (float4 loads), f32 accumulation, one
//   warp_sum per x row. Block: 256 threads = 8 weight rows.
// - m > 16: matmul_dequant_<fmt> writes rows row0 .. row0 + p.n of the weight as f16 (the
//   reference's f32 values, rounded to nearest even) into a scratch [p.n][k], which the host then
//   multiplies with x rounded to f16 in one cuBLAS tensor-core GEMM per chunk of rows. (f16, not
//   bf16: 3 more mantissa bits; with both operands in bf16 a k = 4096 dot product missed the
//   2e-2 parity tolerance on the H200, docs/backends.md.)
//
// Row-scaled types: the GEMV multiplies the codes and applies the row's scale once at the end
// (16-byte code loads when k % 16 == 0, else one byte per lane and step).

template <class Q, int MT>
__device__ void qgemv_impl(MatmulParams p, const float* x, const u8* w, const float* bias, float* out) {
    u32 lane = threadIdx.x & 31;
    u32 n = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (n >= p.n) return;
    u32 nb = p.k / Q::QK, chunks = nb * Q::LANES;
    const u8* row = w + (u64)n * nb * Q::BYTES;
    float acc[MT];
#pragma unroll
    for (int r = 0; r < MT; r++) acc[r] = 0.0f;
    for (u32 c = lane; c < chunks; c += 32) {
        u32 blk = c / Q::LANES;
        int sub = (int)(c % Q::LANES);
        float y[32 * Q::RUNS];
        Q::template decode<false>(row + (u64)blk * Q::BYTES, sub, y);
#pragma unroll
        for (int r = 0; r < MT; r++) {
            if (r < (int)p.m) {
#pragma unroll
                for (int run = 0; run < Q::RUNS; run++) {
                    const float4* xr =
                        reinterpret_cast<const float4*>(x + (u64)r * p.k + (u64)blk * Q::QK + Q::xoff(sub, run));
                    float s = 0.0f;
#pragma unroll
                    for (int i = 0; i < 8; i++) {
                        float4 a = __ldg(xr + i);
                        const float* yy = y + 32 * run + 4 * i;
                        s = fmaf(yy[0], a.x, s);
                        s = fmaf(yy[1], a.y, s);
                        s = fmaf(yy[2], a.z, s);
                        s = fmaf(yy[3], a.w, s);
                    }
                    acc[r] += s;
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < MT; r++) {
        float s = warp_sum(acc[r]);
        if (lane == 0 && r < (int)p.m) out[p.out_off + (u64)r * p.ldo + n] = s + (p.has_bias ? bias[n] : 0.0f);
    }
}

__device__ __forceinline__ float row_code(bool fp8, u32 c) { return fp8 ? e4m3_f32(c) : qf_i8(c); }

template <bool FP8, int MT>
__device__ void rgemv_impl(MatmulParams p, const float* x, const u8* w, const float* bias, float* out) {
    u32 lane = threadIdx.x & 31;
    u32 n = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (n >= p.n) return;
    const u8* row = w + (u64)n * p.k;
    float scale = __uint_as_float(ld_u32_a1(w + (u64)p.n * p.k + 4ull * n));
    float acc[MT];
#pragma unroll
    for (int r = 0; r < MT; r++) acc[r] = 0.0f;
    if ((p.k & 15u) == 0u) {
        for (u32 c = lane; c < (p.k >> 4); c += 32) {
            uint4 v = __ldg(reinterpret_cast<const uint4*>(row) + c);
            u32 q[4] = {v.x, v.y, v.z, v.w};
            float y[16];
#pragma unroll
            for (int j = 0; j < 16; j++) y[j] = row_code(FP8, byte_of(q, j));
#pragma unroll
            for (int r = 0; r < MT; r++) {
                if (r < (int)p.m) {
                    const float4* xr = reinterpret_cast<const float4*>(x + (u64)r * p.k + 16ull * c);
                    float s = 0.0f;
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        float4 a = __ldg(xr + i);
                        s = fmaf(y[4 * i], a.x, s);
                        s = fmaf(y[4 * i + 1], a.y, s);
                        s = fmaf(y[4 * i + 2], a.z, s);
                        s = fmaf(y[4 * i + 3], a.w, s);
                    }
                    acc[r] += s;
                }
            }
        }
    } else {
        for (u32 c = lane; c < p.k; c += 32) {
            float y = row_code(FP8, __ldg(row + c));
#pragma unroll
            for (int r = 0; r < MT; r++)
                if (r < (int)p.m) acc[r] = fmaf(y, x[(u64)r * p.k + c], acc[r]);
        }
    }
#pragma unroll
    for (int r = 0; r < MT; r++) {
        float s = warp_sum(acc[r]) * scale;
        if (lane == 0 && r < (int)p.m) out[p.out_off + (u64)r * p.ldo + n] = s + (p.has_bias ? bias[n] : 0.0f);
    }
}

// Weight rows row0 .. row0 + p.n (p.n = the chunk's rows) as f16 into w16 [p.n][k]: one thread
// per decode chunk, grid-stride.
template <class Q>
__device__ void qdequant_impl(MatmulParams p, const u8* w, f16_t* w16, u32 row0) {
    u32 nb = p.k / Q::QK, per_row = nb * Q::LANES;
    u64 total = (u64)p.n * per_row;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < total; i += (u64)gridDim.x * blockDim.x) {
        u64 r = i / per_row;
        u32 c = (u32)(i % per_row), blk = c / Q::LANES;
        int sub = (int)(c % Q::LANES);
        float y[32 * Q::RUNS];
        Q::template decode<true>(w + ((u64)(row0 + r) * nb + blk) * Q::BYTES, sub, y);
#pragma unroll
        for (int run = 0; run < Q::RUNS; run++) {
            uint4* o = reinterpret_cast<uint4*>(w16 + r * p.k + (u64)blk * Q::QK + Q::xoff(sub, run));
#pragma unroll
            for (int i8 = 0; i8 < 4; i8++) {
                const float* v = y + 32 * run + 8 * i8;
                uint4 pk;
                pk.x = (u32)f32_to_f16(v[0]) | ((u32)f32_to_f16(v[1]) << 16);
                pk.y = (u32)f32_to_f16(v[2]) | ((u32)f32_to_f16(v[3]) << 16);
                pk.z = (u32)f32_to_f16(v[4]) | ((u32)f32_to_f16(v[5]) << 16);
                pk.w = (u32)f32_to_f16(v[6]) | ((u32)f32_to_f16(v[7]) << 16);
                o[i8] = pk;
            }
        }
    }
}

// Row-scaled types: one thread per weight, grid-stride; n_total = the matrix's rows (where the
// scales start).
template <bool FP8>
__device__ void rdequant_impl(MatmulParams p, const u8* w, f16_t* w16, u32 row0, u32 n_total) {
    u64 total = (u64)p.n * p.k;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < total; i += (u64)gridDim.x * blockDim.x) {
        u64 r = row0 + i / p.k;
        float scale = __uint_as_float(ld_u32_a1(w + (u64)n_total * p.k + 4 * r));
        float v = __fmul_rn(row_code(FP8, __ldg(w + r * p.k + i % p.k)), scale);
        w16[i].bits = f32_to_f16(v);
    }
}

#define QGEMV(fmt, Q) \
    extern "C" __global__ void matmul_gemv_##fmt##_m1(MatmulParams p, const float* x, const u8* w, const float* b, float* o) { qgemv_impl<Q, 1>(p, x, w, b, o); } \
    extern "C" __global__ void matmul_gemv_##fmt##_m16(MatmulParams p, const float* x, const u8* w, const float* b, float* o) { qgemv_impl<Q, 16>(p, x, w, b, o); } \
    extern "C" __global__ void matmul_dequant_##fmt(MatmulParams p, const u8* w, f16_t* w16, u32 row0, u32 n_total) { qdequant_impl<Q>(p, w, w16, row0); }
QGEMV(q4_0, QQ4_0)
QGEMV(q4_1, QQ4_1)
QGEMV(q5_0, QQ5_0)
QGEMV(q5_1, QQ5_1)
QGEMV(q8_0, QQ8_0)
QGEMV(q4_k, QQ4_K)
QGEMV(q5_k, QQ5_K)
QGEMV(q6_k, QQ6_K)

#define RGEMV(fmt, FP8) \
    extern "C" __global__ void matmul_gemv_##fmt##_m1(MatmulParams p, const float* x, const u8* w, const float* b, float* o) { rgemv_impl<FP8, 1>(p, x, w, b, o); } \
    extern "C" __global__ void matmul_gemv_##fmt##_m16(MatmulParams p, const float* x, const u8* w, const float* b, float* o) { rgemv_impl<FP8, 16>(p, x, w, b, o); } \
    extern "C" __global__ void matmul_dequant_##fmt(MatmulParams p, const u8* w, f16_t* w16, u32 row0, u32 n_total) { rdequant_impl<FP8>(p, w, w16, row0, n_total); }
RGEMV(int8, false)
RGEMV(fp8, true)
