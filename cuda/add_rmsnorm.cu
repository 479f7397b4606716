// add_rmsnorm: residual += x, then out = rmsnorm(residual) * w (the pre-norm block boundary,
// fused so the residual is read and written once). [rows][dim] f32, one block per row (1024
// threads); each thread keeps its (up to RN_CACHE) sums in registers (no re-read of what it
// wrote; longer rows re-read the rest, which only this thread wrote). `out` is f32, or f16/bf16
// (the f32 result rounded to nearest even: the x of a 16-bit GEMM, Caps::act16_from).
#define RN_CACHE 8
template <typename O>
__device__ void add_rmsnorm_impl(RmsnormParams p, float* __restrict__ res, const float* __restrict__ x,
                                 const float* __restrict__ w, O* __restrict__ out) {
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
