// head_rmsnorm, in place: in each of p.rows rows of p.row_stride floats, segment h < p.n_heads
// becomes x / sqrt(mean(x^2) + eps) * w[h][:] (f32). One block per (row, head) segment.
extern "C" __global__ void head_rmsnorm(HeadRmsnormParams p, float* x, const float* __restrict__ w) {
    __shared__ float red[32];
    u32 seg = blockIdx.x, r = seg / p.n_heads, h = seg % p.n_heads;
    u64 base = (u64)r * p.row_stride + (u64)h * p.head_dim;
    float ss = 0.0f;
    for (u32 c = threadIdx.x; c < p.head_dim; c += blockDim.x) ss += x[base + c] * x[base + c];
    ss = block_sum(ss, red);
    float inv = rsqrtf(ss / (float)p.head_dim + p.eps);
    for (u32 c = threadIdx.x; c < p.head_dim; c += blockDim.x) x[base + c] = x[base + c] * inv * w[(u64)h * p.head_dim + c];
}
