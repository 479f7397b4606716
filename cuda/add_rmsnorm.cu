// add_rmsnorm: residual += x, then out = rmsnorm(residual) * w (the pre-norm block boundary,
// fused so the residual is read and written once). [rows][dim] f32, one block per row; each
// thread re-reads only the residual elements it wrote itself.
extern "C" __global__ void add_rmsnorm(RmsnormParams p, float* res, const float* x, const float* w, float* out) {
    __shared__ float red[32];
    u64 base = (u64)blockIdx.x * p.dim;
    float ss = 0.0f;
    for (u32 c = threadIdx.x; c < p.dim; c += blockDim.x) {
        float v = res[base + c] + x[base + c];
        res[base + c] = v;
        ss += v * v;
    }
    ss = block_sum(ss, red);
    float inv = rsqrtf(ss / (float)p.dim + p.eps);
    for (u32 c = threadIdx.x; c < p.dim; c += blockDim.x) out[base + c] = res[base + c] * inv * w[c];
}
