// matmul_gemv_x8_pack (pass 1 of matmul_gemv_x8 where x comes as f32): x [m][k] f32 (k % 32 ==
// 0) to two int8 digits per element in blocks of 32 (the CUDA m = 1 GEMV's numerics,
// reference/weight_quant.rs x8_blocks; one digit alone, llama.cpp's q8_1, moved the default
// model's greedy ids away from the f32 reference), stored by shaders/x8_store.wgsl (its header
// has the layout) with B = m k / 32 blocks, block i = row * k / 32 + b. Eight threads per block
// (one vec4 of x each), 32 blocks per 256-thread workgroup (workgroup id wg.x + wg.y *
// num_workgroups.x): a 4096-wide x is 16 workgroups.

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> xq: array<u32>;

fn x8_put(i: u32, v: u32) { xq[i] = v; }

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let blocks = p.m * (p.k / 32u);
    let g = (wg.x + wg.y * nwg.x) * 256u + t; // vec4 g of x: part g % 8 of block g / 8
    let live = g / 8u < blocks;
    var v = vec4<f32>(0.0);
    if (live) { v = x[g]; }
    x8_store(t, g / 8u, v, live, blocks);
}
