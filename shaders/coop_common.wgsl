// Staging helpers of the cooperative-matrix GEMMs (matmul_coop, matmul_coop_m16), part of their
// modules after the weight-format snippet (shaders.rs, Reads::Coop). The module declares `p:
// MatmulParams`, `x: array<vec4<f32>>` (x[m][k] f32, flattened) and `w: array<u32>`; the weight
// snippet gives `load_w(i)` (element i of the flattened [n][k] matrix) and `w8(i)` (its 8-element
// group i, only called when k % 8 == 0), `X_BF16` (the weights are bf16) and `W_F16` (they are
// f16: their values convert exactly, no rounding needed).
//
// Both operands reach the tensor cores as f16. Rounding is done here in integer arithmetic, ties
// to even, so that the conversion `f16(v)` that follows is exact and no driver rounding mode
// enters (WGSL leaves f32 -> f16 rounding to the implementation):
// - x: to the weights' dtype first (bf16 weights: x to bf16, as Caps::matmul_x16_from states and
//   the CPU reference rounds; bf16 values in f16's normal range are f16 values), then to f16;
// - weights: f16 are exact; bf16 and dequantized values are rounded to f16;
// - magnitudes above 65504 (f16's largest finite value) saturate to +-65504 instead of becoming
//   inf (an activation that large would already be far outside any trained model's range; the
//   CUDA backend's f16 GEMMs have the same range, docs/backends.md); subnormal f16 results are
//   rounded on the 2^-24 grid.

// v rounded to the nearest f16 value (ties to even), saturated to +-65504, as f16 (exactly).
fn to_f16(v: f32) -> f16 {
    let b = bitcast<u32>(v);
    let normal = bitcast<f32>((b + 0xfffu + ((b >> 13u) & 1u)) & 0xffffe000u);
    let sub = round(v * 16777216.0) * 5.9604644775390625e-8; // on the 2^-24 grid; round() ties to even
    let r = select(normal, sub, abs(v) < 6.103515625e-5);
    return f16(clamp(r, -65504.0, 65504.0));
}

// v rounded to bf16 (ties to even), as f32.
fn round_bf16(v: f32) -> f32 {
    let b = bitcast<u32>(v);
    return bitcast<f32>((b + 0x7fffu + ((b >> 16u) & 1u)) & 0xffff0000u);
}

// An x element as the GEMM multiplies it.
fn x16(v: f32) -> f16 {
    return to_f16(select(v, round_bf16(v), X_BF16));
}

// A weight as the GEMM multiplies it.
fn w16(v: f32) -> f16 {
    if (W_F16) { return f16(v); } // exact: v came from an f16
    return to_f16(v);
}

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
