// rmsnorm: out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, [rows][dim] f32 in, one block per row
// (1024 threads). Each thread keeps its (up to RN_CACHE) elements in registers between the sum of
// squares and the scaling, so a row is read once; longer rows re-read the rest. `out` is f32, or
// f16/bf16 (the f32 result rounded to nearest even: the x of a 16-bit GEMM, Caps::act16_from),
// or rmsnorm_x8's one row of x8 digits (DType::X8, Caps::act_x8_dtypes; dim % 4 == 0).
// Rows of a multiple of 4 take rmsnorm4 (16-byte loads; the host gives long launches 256 threads).
#define RN_CACHE 8
#define RN_CACHE4 4
template <typename O>
__device__ void rmsnorm4(RmsnormParams p, const float* __restrict__ x, const float* __restrict__ w, O* __restrict__ out) {
    __shared__ float red[32];
    const u32 n4 = p.dim / 4;
    const u64 base = (u64)blockIdx.x * p.dim;
    const float4* x4 = reinterpret_cast<const float4*>(x + base);
    float4 v[RN_CACHE4];
    const float ss = rn4_in(n4, [&](u32 c) { return x4[c]; }, v);
    rn4_out(p.dim, p.eps, red, ss, v, x4, w, out + base);
}
template <typename O>
__device__ void rmsnorm_impl(RmsnormParams p, const float* __restrict__ x, const float* __restrict__ w,
                             O* __restrict__ out) {
    if (p.dim % 4 == 0) {
        rmsnorm4(p, x, w, out);
        return;
    }
    __shared__ float red[32];
    u64 base = (u64)blockIdx.x * p.dim;
    float v[RN_CACHE];
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < RN_CACHE; i++) {
        u32 c = threadIdx.x + i * blockDim.x;
        v[i] = c < p.dim ? x[base + c] : 0.0f;
        ss += v[i] * v[i];
    }
    for (u32 c = threadIdx.x + RN_CACHE * blockDim.x; c < p.dim; c += blockDim.x) ss += x[base + c] * x[base + c];
    ss = block_sum(ss, red);
    float inv = rsqrtf(ss / (float)p.dim + p.eps);
#pragma unroll
    for (int i = 0; i < RN_CACHE; i++) {
        u32 c = threadIdx.x + i * blockDim.x;
        if (c < p.dim) out[base + c] = from_f32<O>(v[i] * inv * w[c]);
    }
    for (u32 c = threadIdx.x + RN_CACHE * blockDim.x; c < p.dim; c += blockDim.x)
        out[base + c] = from_f32<O>(x[base + c] * inv * w[c]);
}
extern "C" __global__ void rmsnorm_f32(RmsnormParams p, const float* __restrict__ x, const float* __restrict__ w,
                                       float* __restrict__ out) { rmsnorm_impl(p, x, w, out); }
extern "C" __global__ void rmsnorm_f16(RmsnormParams p, const float* __restrict__ x, const float* __restrict__ w,
                                       f16_t* __restrict__ out) { rmsnorm_impl(p, x, w, out); }
extern "C" __global__ void rmsnorm_bf16(RmsnormParams p, const float* __restrict__ x, const float* __restrict__ w,
                                        bf16_t* __restrict__ out) { rmsnorm_impl(p, x, w, out); }
extern "C" __global__ void rmsnorm_x8(RmsnormParams p, const float* __restrict__ x, const float* __restrict__ w,
                                      x8_t* __restrict__ out) { rmsnorm4(p, x, w, out); }
