// gelu_tanh_mul: gate_up [rows][2*dim] (gate | up) -> out [rows][dim] = gelu_tanh(gate) * up, with
// gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) (PyTorch's approximate="tanh").
@group(0) @binding(0) var<uniform> p: GeluTanhMulParams;
@group(0) @binding(1) var<storage, read> gate_up: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= p.rows * p.dim) { return; }
    let r = i / p.dim;
    let c = i % p.dim;
    let g = gate_up[r * 2u * p.dim + c];
    let u = gate_up[r * 2u * p.dim + p.dim + c];
    // tanh(z) = 1 - 2 / (exp(2z) + 1), clamped so exp cannot overflow (tanh is +-1 there anyway).
    let z = clamp(0.7978845608028654 * (g + 0.044715 * g * g * g), -15.0, 15.0);
    let t = 1.0 - 2.0 / (exp(2.0 * z) + 1.0);
    out[i] = 0.5 * g * (1.0 + t) * u;
}
