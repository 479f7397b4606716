// add_rmsnorm: residual += x, then out = rmsnorm(residual) * w (the pre-norm block boundary,
// fused so the residual is read and written once). [rows][dim] f32, one block per row (1024
// threads); each thread keeps its (up to RN_CACHE) sums in registers (no re-read of what it
// wrote; longer rows re-read the rest, which only this thread wrote). `out` is f32, or f16/bf16
// (the f32 result rounded to nearest even: the x of a 16-bit GEMM, Caps::act16_from), or
// add_rmsnorm_x8's one row of x8 digits (DType::X8, Caps::act_x8_dtypes; dim % 4 == 0). Rows of a
// multiple of 4 take add_rmsnorm4 (16-byte loads; the host gives long launches 256 threads).
#define RN_CACHE 8
#define RN_CACHE4 4
template <typename O>
__device__ void add_rmsnorm4(RmsnormParams p, float* __restrict__ res, const float* __restrict__ x,
                             const float* __restrict__ w, O* __restrict__ out) {
    __shared__ float red[32];
    const u32 n4 = p.dim / 4;
    const u64 base = (u64)blockIdx.x * p.dim;
    float4* r4 = reinterpret_cast<float4*>(res + base);
    const float4* x4 = reinterpret_cast<const float4*>(x + base);
    float4 v[RN_CACHE4];
    const float ss = rn4_in(
        n4,
        [&](u32 c) {
            const float4 a = r4[c], b = x4[c];
            const float4 t = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
            r4[c] = t;
            return t;
        },
        v);
    rn4_out(p.dim, p.eps, red, ss, v, r4, w, out + base);
}
template <typename O>
__device__ void add_rmsnorm_impl(RmsnormParams p, float* __restrict__ res, const float* __restrict__ x,
                                 const float* __restrict__ w, O* __restrict__ out) {
    if (p.dim % 4 == 0) {
        add_rmsnorm4(p, res, x, w, out);
        return;
    }
    __shared__ float red[32];
    u64 base = (u64)blockIdx.x * p.dim;
    float v[RN_CACHE];
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < RN_CACHE; i++) {
        u32 c = threadIdx.x + i * blockDim.x;
        v[i] = c < p.dim ? res[base + c] + x[base + c] : 0.0f;
        ss += v[i] * v[i];
    }
#pragma unroll
    for (int i = 0; i < RN_CACHE; i++) {
        u32 c = threadIdx.x + i * blockDim.x;
        if (c < p.dim) res[base + c] = v[i];
    }
    for (u32 c = threadIdx.x + RN_CACHE * blockDim.x; c < p.dim; c += blockDim.x) {
        float t = res[base + c] + x[base + c];
        res[base + c] = t;
        ss += t * t;
    }
    ss = block_sum(ss, red);
    float inv = rsqrtf(ss / (float)p.dim + p.eps);
#pragma unroll
    for (int i = 0; i < RN_CACHE; i++) {
        u32 c = threadIdx.x + i * blockDim.x;
        if (c < p.dim) out[base + c] = from_f32<O>(v[i] * inv * w[c]);
    }
    for (u32 c = threadIdx.x + RN_CACHE * blockDim.x; c < p.dim; c += blockDim.x)
        out[base + c] = from_f32<O>(res[base + c] * inv * w[c]);
}
#define ADD_RMSNORM(name, O) \
    extern "C" __global__ void name(RmsnormParams p, float* __restrict__ res, const float* __restrict__ x, \
                                    const float* __restrict__ w, O* __restrict__ out) { add_rmsnorm_impl(p, res, x, w, out); }
ADD_RMSNORM(add_rmsnorm_f32, float)
ADD_RMSNORM(add_rmsnorm_f16, f16_t)
ADD_RMSNORM(add_rmsnorm_bf16, bf16_t)
extern "C" __global__ void add_rmsnorm_x8(RmsnormParams p, float* __restrict__ res, const float* __restrict__ x,
                                          const float* __restrict__ w, x8_t* __restrict__ out) { add_rmsnorm4(p, res, x, w, out); }
