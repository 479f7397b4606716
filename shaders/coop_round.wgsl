// Rounding of the cooperative-matrix GEMMs' operands to 16 bits, in f32 and integer arithmetic
// only (no f16 types, so the x pre-pass `matmul_coop_x16` needs no extension): part of every
// `matmul_coop*` module (shaders.rs COOP_COMMON, before shaders/coop_common.wgsl) and of the
// `matmul_coop_x16` modules. Ties to even; the result is exactly an f16 (or bf16) value, so the
// conversion or packing that follows is exact and no driver rounding mode enters (WGSL leaves
// f32 -> f16 rounding to the implementation).

// v rounded to the nearest f16 value (ties to even), saturated to +-65504, as f32 (exactly an
// f16 value). Subnormal f16 results are rounded on the 2^-24 grid.
fn round_f16(v: f32) -> f32 {
    let b = bitcast<u32>(v);
    let normal = bitcast<f32>((b + 0xfffu + ((b >> 13u) & 1u)) & 0xffffe000u);
    let sub = round(v * 16777216.0) * 5.9604644775390625e-8; // on the 2^-24 grid; round() ties to even
    let r = select(normal, sub, abs(v) < 6.103515625e-5);
    return clamp(r, -65504.0, 65504.0);
}

// v rounded to bf16 (ties to even), as f32.
fn round_bf16(v: f32) -> f32 {
    let b = bitcast<u32>(v);
    return bitcast<f32>((b + 0x7fffu + ((b >> 16u) & 1u)) & 0xffff0000u);
}

// An x element as the GEMMs multiply it, as f32: to the weights' dtype first (bf16 weights: x
// to bf16, as Caps::matmul_x16_from states and the CPU reference rounds; bf16 values in f16's
// normal range are f16 values), then to f16. X_BF16 comes from the module (weight snippet, or
// the `matmul_coop_x16` variant).
fn x16_f32(v: f32) -> f32 {
    return round_f16(select(v, round_bf16(v), X_BF16));
}
