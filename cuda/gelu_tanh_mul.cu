// gelu_tanh_mul: gate_up [rows][2 dim] (gate | up) -> out [rows][dim] = gelu_tanh(gate) * up (f32),
// gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) (PyTorch's approximate="tanh").
extern "C" __global__ void gelu_tanh_mul(GeluTanhMulParams p, const float* gu, float* out) {
    u64 n = (u64)p.rows * p.dim;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        u64 r = i / p.dim, c = i % p.dim;
        float g = gu[r * 2 * p.dim + c], u = gu[r * 2 * p.dim + p.dim + c];
        out[i] = 0.5f * g * (1.0f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g))) * u;
    }
}
