// rmsnorm: out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, [rows][dim] f32, one block per row
// (1024 threads). Each thread keeps its (up to RN_CACHE) elements in registers between the sum of
// squares and the scaling, so a row is read once; longer rows re-read the rest.
#define RN_CACHE 8
extern "C" __global__ void rmsnorm(RmsnormParams p, const float* __restrict__ x, const float* __restrict__ w,
                                   float* __restrict__ out) {
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
        if (c < p.dim) out[base + c] = v[i] * inv * w[c];
    }
    for (u32 c = threadIdx.x + RN_CACHE * blockDim.x; c < p.dim; c += blockDim.x) out[base + c] = x[base + c] * inv * w[c];
}
