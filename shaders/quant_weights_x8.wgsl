// Quantized weights against int8 x (the snippet of matmul_gemv_x8; docs/backends.md "Quantized
// weights"). The module declares `w: array<u32>` (the matrix's bytes, little-endian), `w_cols()` /
// `w_rows()` (k / n), and the int8 x blocks: `xq_lo(b)` / `xq_hi(b)` (codes 0..15 / 16..31 of x
// block b, four i8 per u32) and `xq_ds(b)` (its scale d and the sum of its 32 codes, as f32), so
// that x block b holds the values d * code.
//
// Per format X: `wx8_X(r, j, xb) -> f32`, slice j of weight row r (WX8_SLICE_X consecutive
// weights: one 32-weight block of the small formats, one 64-weight group of Q4_K / Q5_K, one
// 128-weight half of a Q6_K block) times x, whose first block is xb. A slice reads its block's
// header (f16 scales, 6-bit K scales) once and its codes as whole u32 words, multiplies them with
// `dot4I8Packed` (4 i8 products per instruction; naga emits OpSDot where the Vulkan device has
// integer dot products, else a shift polyfill) and applies the scales to the integer sums: the
// value is that of the dequantized weights (reference/weight_quant.rs) times the int8 x, up to
// f32 rounding. Offsets: Q4_0 -8 and Q5_0 -16 through the x code sum (d_w d_x (sumi - 8 sumq)),
// Q6_K -32 folded into the bytes before the dot (its scales change every 16 weights), the mins of
// Q4_1 / Q5_1 / Q4_K / Q5_K through the code sum. Blocks of 18, 22, 34 and 210 bytes start 2-byte
// aligned: a slice loads the words covering it (one more than it holds) and shifts by 16 bits
// where its start is odd in halves (`wq_skip2`, `wq_fun`). fp8 rows have no integer form (no
// wx8_fp8: they stay on matmul_gemv_subgroup).

const WQ_LO4: u32 = 0x0f0f0f0fu;

// Words i .. i + 3 of w.
fn wq_w4(i: u32) -> vec4<u32> {
    return vec4<u32>(w[i], w[i + 1u], w[i + 2u], w[i + 3u]);
}

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

// ---- Q4_0 (18 B: d f16, qs[16]; low nibbles elements 0..15, high 16..31; (q - 8) d). Slice =
// block: 5 words.
const WX8_SLICE_Q4_0: u32 = 32u;
fn wx8_q4_0(r: u32, j: u32, xb: u32) -> f32 {
    let b = (r * (w_cols() / 32u) + j) * 18u;
    let i = b >> 2u;
    let odd = (b & 2u) != 0u;
    let v = wq_w4(i);
    let q = wq_skip2(v, w[i + 4u], odd);
    let d = wq_half(v.x, odd);
    let xa = xb + j;
    let s = wq_dot16(q & vec4<u32>(WQ_LO4), xq_lo(xa)) + wq_dot16((q >> vec4<u32>(4u)) & vec4<u32>(WQ_LO4), xq_hi(xa));
    return wq_block_x(d, -8.0 * d, s, xa);
}

// ---- Q4_1 (20 B: d, m f16, qs[16]; q d + m). Slice = block: 5 words.
const WX8_SLICE_Q4_1: u32 = 32u;
fn wx8_q4_1(r: u32, j: u32, xb: u32) -> f32 {
    let i = (r * (w_cols() / 32u) + j) * 5u;
    let dm = unpack2x16float(w[i]);
    let q = wq_w4(i + 1u);
    let xa = xb + j;
    let s = wq_dot16(q & vec4<u32>(WQ_LO4), xq_lo(xa)) + wq_dot16((q >> vec4<u32>(4u)) & vec4<u32>(WQ_LO4), xq_hi(xa));
    return wq_block_x(dm.x, dm.y, s, xa);
}

// The 32 five-bit codes of a Q5_0 / Q5_1 block, low 16 and high 16: nibbles of qs, fifth bit e of qh.
fn wq_q5_codes(q: vec4<u32>, qh: u32) -> array<vec4<u32>, 2> {
    let lo = (q & vec4<u32>(WQ_LO4)) | wq_bit5(vec4<u32>(qh) >> vec4<u32>(0u, 4u, 8u, 12u));
    let hi = ((q >> vec4<u32>(4u)) & vec4<u32>(WQ_LO4)) | wq_bit5(vec4<u32>(qh) >> vec4<u32>(16u, 20u, 24u, 28u));
    return array<vec4<u32>, 2>(lo, hi);
}

// ---- Q5_0 (22 B: d f16, qh u32, qs[16]; (q - 16) d). Slice = block: 6 words.
const WX8_SLICE_Q5_0: u32 = 32u;
fn wx8_q5_0(r: u32, j: u32, xb: u32) -> f32 {
    let b = (r * (w_cols() / 32u) + j) * 22u;
    let i = b >> 2u;
    let odd = (b & 2u) != 0u;
    let v = wq_w4(i);
    let v4 = w[i + 4u];
    let v5 = w[i + 5u];
    let qh = select((v.x >> 16u) | (v.y << 16u), v.y, odd);
    let c = wq_q5_codes(wq_skip2(vec4<u32>(v.yzw, v4), v5, odd), qh);
    let d = wq_half(v.x, odd);
    let xa = xb + j;
    return wq_block_x(d, -16.0 * d, wq_dot16(c[0], xq_lo(xa)) + wq_dot16(c[1], xq_hi(xa)), xa);
}

// ---- Q5_1 (24 B: d, m f16, qh u32, qs[16]; q d + m). Slice = block: 6 words.
const WX8_SLICE_Q5_1: u32 = 32u;
fn wx8_q5_1(r: u32, j: u32, xb: u32) -> f32 {
    let i = (r * (w_cols() / 32u) + j) * 6u;
    let dm = unpack2x16float(w[i]);
    let c = wq_q5_codes(wq_w4(i + 2u), w[i + 1u]);
    let xa = xb + j;
    return wq_block_x(dm.x, dm.y, wq_dot16(c[0], xq_lo(xa)) + wq_dot16(c[1], xq_hi(xa)), xa);
}

// ---- Q8_0 (34 B: d f16, qs: i8[32]; q d). Slice = block: 9 words.
const WX8_SLICE_Q8_0: u32 = 32u;
fn wx8_q8_0(r: u32, j: u32, xb: u32) -> f32 {
    let b = (r * (w_cols() / 32u) + j) * 34u;
    let i = b >> 2u;
    let odd = (b & 2u) != 0u;
    let v0 = wq_w4(i);
    let v1 = wq_w4(i + 4u);
    let qa = wq_skip2(v0, v1.x, odd);
    let qb = wq_skip2(v1, w[i + 8u], odd);
    let xa = xb + j;
    return wq_block_x(wq_half(v0.x, odd), 0.0, wq_dot16(qa, xq_lo(xa)) + wq_dot16(qb, xq_hi(xa)), xa);
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

// ---- Q4_K (144 B: d, dmin f16, scales[12], qs[128]; group g = qs[32g ..], low nibbles sub-block
// 2g, high 2g + 1; d sc q - dmin m). Slice = group: 12 words.
const WX8_SLICE_Q4_K: u32 = 64u;
fn wx8_q4_k(r: u32, j: u32, xb: u32) -> f32 {
    let blk = j / 4u;
    let g = j % 4u;
    let i = (r * (w_cols() / 256u) + blk) * 36u;
    let s = vec3<u32>(w[i + 1u], w[i + 2u], w[i + 3u]);
    let q0 = wq_w4(i + 4u + 8u * g);
    let q1 = wq_w4(i + 8u + 8u * g);
    let m4 = vec4<u32>(WQ_LO4);
    let c0 = array<vec4<u32>, 2>(q0 & m4, q1 & m4);
    let c1 = array<vec4<u32>, 2>((q0 >> vec4<u32>(4u)) & m4, (q1 >> vec4<u32>(4u)) & m4);
    return wq_k_group(c0, c1, unpack2x16float(w[i]), s, g, xb + 8u * blk + 2u * g);
}

// ---- Q5_K (176 B: d, dmin, scales[12], qh[32], qs[128]; as Q4_K plus fifth bit 2g (+1 for the
// high nibbles) of qh[l]). Slice = group: 20 words.
const WX8_SLICE_Q5_K: u32 = 64u;
fn wx8_q5_k(r: u32, j: u32, xb: u32) -> f32 {
    let blk = j / 4u;
    let g = j % 4u;
    let i = (r * (w_cols() / 256u) + blk) * 44u;
    let s = vec3<u32>(w[i + 1u], w[i + 2u], w[i + 3u]);
    let h0 = wq_w4(i + 4u);
    let h1 = wq_w4(i + 8u);
    let q0 = wq_w4(i + 12u + 8u * g);
    let q1 = wq_w4(i + 16u + 8u * g);
    let m4 = vec4<u32>(WQ_LO4);
    let b1 = vec4<u32>(0x01010101u);
    let sl = vec4<u32>(2u * g);
    let sh = vec4<u32>(2u * g + 1u);
    let c0 = array<vec4<u32>, 2>((q0 & m4) | (((h0 >> sl) & b1) << vec4<u32>(4u)), (q1 & m4) | (((h1 >> sl) & b1) << vec4<u32>(4u)));
    let c1 = array<vec4<u32>, 2>(
        ((q0 >> vec4<u32>(4u)) & m4) | (((h0 >> sh) & b1) << vec4<u32>(4u)),
        ((q1 >> vec4<u32>(4u)) & m4) | (((h1 >> sh) & b1) << vec4<u32>(4u)),
    );
    return wq_k_group(c0, c1, unpack2x16float(w[i]), s, g, xb + 8u * blk + 2u * g);
}

// ---- Q6_K (210 B: ql[128], qh[64], scales i8[16], d f16 at 208). Half n of a block, quarter c,
// l = 0..31: low 4 bits nibble c / 2 of ql[64n + 32(c % 2) + l], high 2 bits (qh[32n + l] >> 2c)
// & 3, scale scales[8n + 2c + l / 16]; d sc (q - 32). Slice = half n (128 weights): 30 words.
const WX8_SLICE_Q6_K: u32 = 128u;

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

fn wx8_q6_k(r: u32, j: u32, xb: u32) -> f32 {
    let blk = j / 2u;
    let n = j % 2u;
    let b = (r * (w_cols() / 256u) + blk) * 210u;
    let odd = (b & 2u) != 0u;
    let il = (b + 64u * n) >> 2u;
    let a0 = wq_w4(il);
    let a1 = wq_w4(il + 4u);
    let a2 = wq_w4(il + 8u);
    let a3 = wq_w4(il + 12u);
    let l0 = wq_fun(a0, a1.x, odd);
    let l1 = wq_fun(a1, a2.x, odd);
    let l2 = wq_fun(a2, a3.x, odd);
    let l3 = wq_fun(a3, w[il + 16u], odd);
    let ih = (b + 128u + 32u * n) >> 2u;
    let g0 = wq_w4(ih);
    let g1 = wq_w4(ih + 4u);
    let h0 = wq_fun(g0, g1.x, odd);
    let h1 = wq_fun(g1, w[ih + 8u], odd);
    let is = (b + 192u + 8u * n) >> 2u;
    let t0 = w[is];
    let t1 = w[is + 1u];
    let sa = select(t0, (t0 >> 16u) | (t1 << 16u), odd);
    let sb = select(t1, (t1 >> 16u) | (w[is + 2u] << 16u), odd);
    let d = wq_half(w[(b + 208u) >> 2u], odd);
    let xa = xb + 8u * blk + 4u * n;
    let s = wq_q6_quarter(l0, l1, h0, h1, 0u, 0u, sa, xa) + wq_q6_quarter(l2, l3, h0, h1, 0u, 2u, sa >> 16u, xa + 1u)
        + wq_q6_quarter(l0, l1, h0, h1, 4u, 4u, sb, xa + 2u) + wq_q6_quarter(l2, l3, h0, h1, 4u, 6u, sb >> 16u, xa + 3u);
    return d * s;
}

// ---- Row-scaled int8 (I8Row: [n][k] i8 codes, then [n] f32 scales; k % 32 == 0 here, so rows
// and the scales are word aligned). Slice = 32 codes: 8 words and the row's scale.
const WX8_SLICE_INT8: u32 = 32u;
fn wx8_int8(r: u32, j: u32, xb: u32) -> f32 {
    let i = (r * w_cols() + 32u * j) / 4u;
    let scale = bitcast<f32>(w[w_rows() * w_cols() / 4u + r]);
    let xa = xb + j;
    return wq_block_x(scale, 0.0, wq_dot16(wq_w4(i), xq_lo(xa)) + wq_dot16(wq_w4(i + 4u), xq_hi(xa)), xa);
}
