// silu_mul_x8: silu_mul (shaders/silu_mul.wgsl) with one row's out as x8 digits (DType::X8,
// dim % 32 == 0: the op checks). Thread g (of dim / 4; workgroup id wg.x + wg.y *
// num_workgroups.x) computes elements 4g .. 4g + 3 of silu(gate) * up and shaders/x8_store.wgsl
// quantizes them, 8 threads a block of 32, 32 blocks a workgroup.
@group(0) @binding(0) var<uniform> p: SiluMulParams;
@group(0) @binding(1) var<storage, read> gate_up: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

fn x8_put(i: u32, v: u32) { out[i] = v; }

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let tasks = p.dim / 4u;
    let g = (wg.x + wg.y * nwg.x) * 256u + t;
    let live = g < tasks;
    var v = vec4<f32>(0.0);
    if (live) {
        let gate = gate_up[g];
        v = gate / (1.0 + exp(-gate)) * gate_up[tasks + g];
    }
    x8_store(t, g / 8u, v, live, p.dim / 32u);
}
