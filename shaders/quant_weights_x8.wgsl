// Quantized weights against int8 x: the helpers every format shares (the snippet of
// matmul_gemv_x8 is this file, then the format's: quant_weights_x8_w32.wgsl for the formats read
// as u32 words, quant_weights_x8_w128.wgsl for those read as 16-byte words; docs/backends.md
// "Quantized weights"). The module declares the weights `w` (binding 2), `w_cols()` / `w_rows()`
// (k / n), and the int8 x blocks: `xq_lo(b)` / `xq_hi(b)` (codes 0..15 / 16..31 of x block b,
// four i8 per u32, element 4t in the low byte of word t; `xq_part(b, h)` = half h of them) and
// `xq_ds(b)` (its scale d and the sum
// of its 32 codes, as f32), so that x block b holds the values d * code.
//
// Per format X: `wx8_X(r, j, xb) -> f32`, slice j of weight row r (WX8_SLICE_X consecutive
// weights: one 32-weight block of the small formats (half of one for Q8_0), one 64-weight group of Q4_K / Q5_K, one
// 128-weight half of a Q6_K block) times x, whose first block is xb. A slice reads its block's
// header (f16 scales, 6-bit K scales) once and its codes as whole words, multiplies them with
// `dot4I8Packed` (4 i8 products per instruction; naga emits OpSDot where the Vulkan device has
// integer dot products, else a shift polyfill) and applies the scales to the integer sums: the
// value is that of the dequantized weights (reference/weight_quant.rs) times the int8 x, up to
// f32 rounding. Offsets: Q4_0 -8 and Q5_0 -16 through the x code sum (d_w d_x (sumi - 8 sumq)),
// Q6_K -32 folded into the bytes before the dot (its scales change every 16 weights), the mins of
// Q4_1 / Q5_1 / Q4_K / Q5_K through the code sum. fp8 rows have no integer form (no wx8_fp8: they
// stay on matmul_gemv_subgroup).

const WQ_LO4: u32 = 0x0f0f0f0fu;

// Sum of the 16 products of the i8 bytes of a and b.
fn wq_dot16(a: vec4<u32>, b: vec4<u32>) -> i32 {
    return dot4I8Packed(a.x, b.x) + dot4I8Packed(a.y, b.y) + dot4I8Packed(a.z, b.z) + dot4I8Packed(a.w, b.w);
}

// The 16 bytes that start at byte 2 of the words v, e (v = the 4 words from the one holding byte
// 0, e the next) when `odd` is false; with `odd` the first byte is byte 2 of v.x, so the wanted
// bytes start at v.y.
fn wq_skip2(v: vec4<u32>, e: u32, odd: bool) -> vec4<u32> {
    let next = vec4<u32>(v.yzw, e);
    return select((v >> vec4<u32>(16u)) | (next << vec4<u32>(16u)), next, odd);
}

// The 16 bytes that start at v (the 4 words from the one holding the first byte, e the next):
// byte 0 of v.x, or byte 2 when `odd`.
fn wq_fun(v: vec4<u32>, e: u32, odd: bool) -> vec4<u32> {
    return select(v, (v >> vec4<u32>(16u)) | (vec4<u32>(v.yzw, e) << vec4<u32>(16u)), odd);
}

// The low f16 of v, or the high one when `odd`, as f32.
fn wq_half(v: u32, odd: bool) -> f32 {
    return unpack2x16float(select(v, v >> 16u, odd)).x;
}

// Bits 0..3 of each component of h, one per byte (bit i -> bit 4 of byte i): the fifth bits of
// Q5_0 / Q5_1. (h & 15) * 0x204081 puts bit i at bit 8i (the four shifted copies do not overlap).
fn wq_bit5(h: vec4<u32>) -> vec4<u32> {
    return (((h & vec4<u32>(15u)) * vec4<u32>(0x00204081u)) & vec4<u32>(0x01010101u)) << vec4<u32>(4u);
}

// d_w * (x block xa's d) * sumi + m_w * (x block's d * sum of codes): the value of one 32-weight
// block with scale d_w and offset m_w (min formats; m_w = offset * d_w for Q4_0 / Q5_0).
fn wq_block_x(dw: f32, mw: f32, sumi: i32, xa: u32) -> f32 {
    let ds = xq_ds(xa);
    return ds.x * (dw * f32(sumi) + mw * ds.y);
}

// The 32 five-bit codes of a Q5_0 / Q5_1 block, low 16 and high 16: nibbles of qs, fifth bit e of qh.
fn wq_q5_codes(q: vec4<u32>, qh: u32) -> array<vec4<u32>, 2> {
    let lo = (q & vec4<u32>(WQ_LO4)) | wq_bit5(vec4<u32>(qh) >> vec4<u32>(0u, 4u, 8u, 12u));
    let hi = ((q >> vec4<u32>(4u)) & vec4<u32>(WQ_LO4)) | wq_bit5(vec4<u32>(qh) >> vec4<u32>(16u, 20u, 24u, 28u));
    return array<vec4<u32>, 2>(lo, hi);
}

// ---- K-quants: 6-bit scale and min of sub-block j (0..8) from the 12 scale bytes s (ggml's
// get_scale_min_k4), branch-free.
fn wq_sbyte(s: vec3<u32>, i: u32) -> u32 {
    return (s[i / 4u] >> (8u * (i % 4u))) & 0xffu;
}

fn wq_k4_scale_min(s: vec3<u32>, j: u32) -> vec2<f32> {
    let lo = vec2<u32>(wq_sbyte(s, j) & 63u, wq_sbyte(s, j + 4u) & 63u);
    let h = wq_sbyte(s, j + 4u);
    let hi = vec2<u32>((h & 15u) | ((wq_sbyte(s, j & 3u) >> 6u) << 4u), (h >> 4u) | ((wq_sbyte(s, j) >> 6u) << 4u));
    return vec2<f32>(select(hi, lo, j < 4u));
}

// One 64-weight group g of a Q4_K / Q5_K block: codes c0 (sub-block 2g) and c1 (2g + 1) as
// packed bytes, d / dmin dm, scales s; x blocks xa, xa + 1.
fn wq_k_group(c0: array<vec4<u32>, 2>, c1: array<vec4<u32>, 2>, dm: vec2<f32>, s: vec3<u32>, g: u32, xa: u32) -> f32 {
    let sm0 = wq_k4_scale_min(s, 2u * g);
    let sm1 = wq_k4_scale_min(s, 2u * g + 1u);
    let s0 = wq_dot16(c0[0], xq_lo(xa)) + wq_dot16(c0[1], xq_hi(xa));
    let s1 = wq_dot16(c1[0], xq_lo(xa + 1u)) + wq_dot16(c1[1], xq_hi(xa + 1u));
    return wq_block_x(dm.x * sm0.x, -dm.y * sm0.y, s0, xa) + wq_block_x(dm.x * sm1.x, -dm.y * sm1.y, s1, xa + 1u);
}

// Quarter c of a half: ql words l0 (l 0..15) / l1 (16..31) shifted by ns, qh words h0 / h1 shifted
// by hs, the two scale bytes in sc (low 16 bits), x block xa; d_x * sum(sc * (q - 32) * code).
fn wq_q6_quarter(l0: vec4<u32>, l1: vec4<u32>, h0: vec4<u32>, h1: vec4<u32>, ns: u32, hs: u32, sc: u32, xa: u32) -> f32 {
    let m4 = vec4<u32>(WQ_LO4);
    let m2 = vec4<u32>(0x03030303u);
    let hi = vec4<u32>(0x80808080u);
    // (q | 0x80) - 32, then ^ 0x80: q - 32 in each byte, no borrow between bytes.
    let qa = ((((l0 >> vec4<u32>(ns)) & m4) | (((h0 >> vec4<u32>(hs)) & m2) << vec4<u32>(4u)) | hi) - vec4<u32>(0x20202020u)) ^ hi;
    let qb = ((((l1 >> vec4<u32>(ns)) & m4) | (((h1 >> vec4<u32>(hs)) & m2) << vec4<u32>(4u)) | hi) - vec4<u32>(0x20202020u)) ^ hi;
    let s0 = bitcast<i32>(sc << 24u) >> 24u;
    let s1 = bitcast<i32>(sc << 16u) >> 24u;
    return xq_ds(xa).x * f32(s0 * wq_dot16(qa, xq_lo(xa)) + s1 * wq_dot16(qb, xq_hi(xa)));
}
