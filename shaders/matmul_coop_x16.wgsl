// matmul_coop_x16 (pass 1 of matmul_coop_128; ops_matmul.rs): x [m][k] f32 to the f16 operand
// the GEMM multiplies, once per matmul instead of once per weight tile (every one of the n / 128
// tile columns re-reads x). Each value is rounded as shaders/coop_round.wgsl `x16_f32` states
// (to bf16 first for bf16 weights: the `_bf16` variant, X_BF16 = true), then packed two per
// word (pack2x16float of an f16 value is exact).
//
// Layout: xh rows of kp = k rounded up to 8 halves (16-byte rows, as the GEMM's 16-byte group
// loads need): xh[r * kp + c] = x16(x[r][c]) for c < k, 0 for k <= c < kp; bound as vec4<u32>
// (one 8-element group per word). One thread per group, G = m * kp / 8 groups, 64 threads per
// workgroup, workgroup id wg.x + wg.y * num_workgroups.x.

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> xh: array<vec4<u32>>;

fn pack2(a: f32, b: f32) -> u32 {
    return pack2x16float(vec2<f32>(x16_f32(a), x16_f32(b)));
}

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let kg = (p.k + 7u) / 8u; // groups per row
    let g = (wg.x + wg.y * nwg.x) * 64u + t;
    if (g >= p.m * kg) { return; }
    let r = g / kg;
    let c = 8u * (g % kg);
    let i = r * p.k + c; // element (r, c) of the flattened x
    var v = array<vec4<f32>, 2>(vec4<f32>(0.0), vec4<f32>(0.0));
    if (p.k % 4u == 0u) {
        // i % 4 == 0: whole vec4s; the second is past k only in a row's last group (k % 8 == 4).
        v[0] = x[i / 4u];
        if (c + 4u < p.k) { v[1] = x[i / 4u + 1u]; }
    } else {
        for (var e = 0u; e < 8u; e++) {
            if (c + e < p.k) { v[e / 4u][e % 4u] = x[(i + e) / 4u][(i + e) % 4u]; }
        }
    }
    xh[g] = vec4<u32>(pack2(v[0].x, v[0].y), pack2(v[0].z, v[0].w), pack2(v[1].x, v[1].y), pack2(v[1].z, v[1].w));
}
