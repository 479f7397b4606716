// x_group of the cooperative-matrix GEMM that stages x from f32 (matmul_coop; shaders.rs
// prepends it to its source): the module declares `p: MatmulParams` and `x: array<vec4<f32>>`
// (x[m][k] f32, flattened). matmul_coop_128 reads x pre-rounded to f16 by
// matmul_coop_x16 instead.

// x[r][c .. c + 7] (c % 8 == 0) as f32, zero past m or k.
fn x_group(r: u32, c: u32) -> array<vec4<f32>, 2> {
    var v = array<vec4<f32>, 2>(vec4<f32>(0.0), vec4<f32>(0.0));
    if (r >= p.m || c >= p.k) { return v; }
    let i = r * p.k + c;
    if (p.k % 8u == 0u) { return array<vec4<f32>, 2>(x[i / 4u], x[i / 4u + 1u]); }
    for (var e = 0u; e < 8u; e++) {
        if (c + e < p.k) { v[e / 4u][e % 4u] = x[(i + e) / 4u][(i + e) % 4u]; }
    }
    return v;
}

