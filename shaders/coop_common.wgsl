// Staging helpers of the cooperative-matrix GEMMs (matmul_coop, matmul_coop_128), part of their
// modules after the weight-format snippet and shaders/coop_round.wgsl (shaders.rs, Reads::Coop). The module declares `p: MatmulParams`; the
// weight snippet declares the weights `w` (binding 2: f16 weights as `array<mat2x4<f16>>`, 16-byte
// words of 8; every other dtype as `array<u32>`) and gives `load_w(i)` (element i of the flattened
// [n][k] matrix), `w8(i)` (its 8-element group i as f32) and `wh8(i)` (the same group as the GEMM
// multiplies it, f16; both only called when k % 8 == 0), `X_BF16` (the weights are bf16) and
// `W_F16` (they are f16: their values convert exactly, no rounding needed).
//
// Both operands reach the tensor cores as f16, rounded by shaders/coop_round.wgsl:
// - x: to the weights' dtype first (bf16 weights: x to bf16), then to f16;
// - weights: f16 are exact; bf16 and dequantized values are rounded to f16;
// - magnitudes above 65504 (f16's largest finite value) saturate to +-65504 instead of becoming
//   inf (an activation that large would already be far outside any trained model's range; the
//   CUDA backend's f16 GEMMs have the same range, docs/backends.md); subnormal f16 results are
//   rounded on the 2^-24 grid.

// v rounded to the nearest f16 value (shaders/coop_round.wgsl `round_f16`), as f16 (exactly).
fn to_f16(v: f32) -> f16 {
    return f16(round_f16(v));
}

// An x element as the GEMM multiplies it.
fn x16(v: f32) -> f16 {
    return f16(x16_f32(v));
}

// A weight as the GEMM multiplies it.
fn w16(v: f32) -> f16 {
    if (W_F16) { return f16(v); } // exact: v came from an f16
    return to_f16(v);
}

// Four weights as the GEMM multiplies them (the snippets' `wh8` of non-f16 weights).
fn w16x4(v: vec4<f32>) -> vec4<f16> {
    return vec4<f16>(w16(v.x), w16(v.y), w16(v.z), w16(v.w));
}

// w[r][c .. c + 7] (c % 8 == 0) as f32, zero past n or k: one 8-weight group (w8) when k % 8 ==
// 0, else element by element (load_w).
fn w_group(r: u32, c: u32) -> array<vec4<f32>, 2> {
    var v = array<vec4<f32>, 2>(vec4<f32>(0.0), vec4<f32>(0.0));
    if (r >= p.n || c >= p.k) { return v; }
    if (p.k % 8u == 0u) { return w8((r * p.k + c) / 8u); }
    for (var e = 0u; e < 8u; e++) {
        if (c + e < p.k) { v[e / 4u][e % 4u] = load_w(r * p.k + c + e); }
    }
    return v;
}

// w[r][c .. c + 7] (c % 8 == 0) as the GEMM multiplies it (f16, columns 0..3 in [0], 4..7 in
// [1]), zero past n or k: one group (wh8: f16 weights as they are stored) when k % 8 == 0, else
// element by element.
fn w_group16(r: u32, c: u32) -> mat2x4<f16> {
    var v = mat2x4<f16>();
    if (r >= p.n || c >= p.k) { return v; }
    if (p.k % 8u == 0u) { return wh8((r * p.k + c) / 8u); }
    for (var e = 0u; e < 8u; e++) {
        if (c + e < p.k) { v[e / 4u][e % 4u] = w16(load_w(r * p.k + c + e)); }
    }
    return v;
}
