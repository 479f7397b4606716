// add_rmsnorm: residual += x, then out = rmsnorm(residual) * w (the pre-norm block boundary,
// fused so the residual is read and written once). [rows][dim] f32, one block per row (1024
// threads); each thread keeps its (up to RN_CACHE) sums in registers (no re-read of what it
// wrote; longer rows re-read the rest, which only this thread wrote).
#define RN_CACHE 8
extern "C" __global__ void add_rmsnorm(RmsnormParams p, float* __restrict__ res, const float* __restrict__ x,
                                       const float* __restrict__ w, float* __restrict__ out) {
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
        if (c < p.dim) out[base + c] = v[i] * inv * w[c];
    }
    for (u32 c = threadIdx.x + RN_CACHE * blockDim.x; c < p.dim; c += blockDim.x) out[base + c] = res[base + c] * inv * w[c];
}
