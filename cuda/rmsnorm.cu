// rmsnorm: out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, [rows][dim] f32, one block per row.
extern "C" __global__ void rmsnorm(RmsnormParams p, const float* x, const float* w, float* out) {
    __shared__ float red[32];
    u64 base = (u64)blockIdx.x * p.dim;
    float ss = 0.0f;
    for (u32 c = threadIdx.x; c < p.dim; c += blockDim.x) { float v = x[base + c]; ss += v * v; }
    ss = block_sum(ss, red);
    float inv = rsqrtf(ss / (float)p.dim + p.eps);
    for (u32 c = threadIdx.x; c < p.dim; c += blockDim.x) out[base + c] = x[base + c] * inv * w[c];
}
