// silu_mul: gate_up [rows][2 dim] (gate | up) -> out [rows][dim] = silu(gate) * up (f32).
extern "C" __global__ void silu_mul(SiluMulParams p, const float* gu, float* out) {
    u64 n = (u64)p.rows * p.dim;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        u64 r = i / p.dim, c = i % p.dim;
        float g = gu[r * 2 * p.dim + c], u = gu[r * 2 * p.dim + p.dim + c];
        out[i] = g / (1.0f + expf(-g)) * u;
    }
}
