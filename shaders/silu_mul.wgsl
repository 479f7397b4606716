// silu_mul: gate_up [rows][2*dim] (gate | up) -> out [rows][dim] = silu(gate) * up.
@group(0) @binding(0) var<uniform> p: SiluMulParams;
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
    out[i] = g / (1.0 + exp(-g)) * u;
}
