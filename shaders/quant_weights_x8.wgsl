// Quantized weights against two-digit int8 x (the snippet of matmul_gemv_x8; docs/backends.md "Quantized
// weights"). The module declares the weights `w: array<vec4<u32>>` (binding 2: the matrix's
// bytes as little-endian 16-byte words), `w_cols()` / `w_rows()` (k / n), and the x blocks:
// `xq_part(b, h)` (h = 0 / 1: the hi digits of elements 0..15 / 16..31 of x block b, four i8 per
// u32, element 4t in the low byte of word t; h = 2 / 3: their lo digits) and `xq_ds(b)` (its scale d and the sum of
// its 32 codes, as f32), so that x block b holds the values d * code.
//
// Per format X: `wx8_X(r, j, xb) -> f32`, slice j of weight row r (WX8_SLICE_X consecutive
// weights: one 32-weight block of the small formats, half of one for Q8_0, one 64-weight group
// of Q4_K / Q5_K, one 128-weight half of a Q6_K block) times x, whose first block is xb. A slice
// reads its block's header (f16 scales, 6-bit K scales) once and its codes as whole words,
// multiplies them with `dot4I8Packed` (4 i8 products per instruction; naga emits OpSDot where the
// Vulkan device has integer dot products, else a shift polyfill) and applies the scales to the
// integer sums: the value is that of the dequantized weights (reference/weight_quant.rs) times
// the two-digit x, up to f32 rounding. Offsets: Q4_0 -8 and Q5_0 -16 through the x code sum (d_w d_x
// (sumi - 8 sumq)), Q6_K -32 folded into the bytes before the dot (its scales change every 16
// weights), the mins of Q4_1 / Q5_1 / Q4_K / Q5_K through the code sum. Every slice is read as
// the 16-byte words that cover it: Q4_K (144-byte blocks), Q5_K (176) and int8 rows (k % 32 ==
// 0) are 16-byte aligned (a K block's first word is its whole header: d, dmin and the 12 scale
// bytes); the 18-, 20-, 22-, 24-, 34- and 210-byte blocks are cut out of the 2-3 words covering
// them (`wq_window`: a select of whole words, then a 16-bit funnel shift where the start is odd
// in halves), so a lane issues one 16-byte load per 16 bytes of its slice (plus one), not one u32
// load per 4 bytes. fp8 rows have no integer form (no wx8_fp8: they stay on
// matmul_gemv_subgroup).

const WQ_LO4: u32 = 0x0f0f0f0fu;

// Sum of the 16 products of the i8 bytes of a and b.
fn wq_dot16(a: vec4<u32>, b: vec4<u32>) -> i32 {
    return dot4I8Packed(a.x, b.x) + dot4I8Packed(a.y, b.y) + dot4I8Packed(a.z, b.z) + dot4I8Packed(a.w, b.w);
}

// The 16 codes a times part h (0: elements 0..15, 1: 16..31) of x block xb, both digits: in units
// of the block's d, sum(a hi) + sum(a lo) / 254.
fn wq_dotx(a: vec4<u32>, xb: u32, h: u32) -> f32 {
    return f32(wq_dot16(a, xq_part(xb, h))) + f32(wq_dot16(a, xq_part(xb, h + 2u))) * (1.0 / 254.0);
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
fn wq_block_x(dw: f32, mw: f32, sumi: f32, xa: u32) -> f32 {
    let ds = xq_ds(xa);
    return ds.x * (dw * sumi + mw * ds.y);
}

// wq_block_x of the 32 codes c (elements 0..15, 16..31) of one block against x block xa.
fn wq_block32(dw: f32, mw: f32, c: array<vec4<u32>, 2>, xa: u32) -> f32 {
    return wq_block_x(dw, mw, wq_dotx(c[0], xa, 0u) + wq_dotx(c[1], xa, 1u), xa);
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
    return wq_block32(dm.x * sm0.x, -dm.y * sm0.y, c0, xa) + wq_block32(dm.x * sm1.x, -dm.y * sm1.y, c1, xa + 1u);
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
    return xq_ds(xa).x * (f32(s0) * wq_dotx(qa, xa, 0u) + f32(s1) * wq_dotx(qb, xa, 1u));
}

// The 16 bytes at even byte offset s (0..14) of the 32 bytes a, b.
fn wq_window(a: vec4<u32>, b: vec4<u32>, s: u32) -> vec4<u32> {
    let two = (s & 8u) != 0u; // start two words in
    let m = select(a, vec4<u32>(a.zw, b.xy), two);
    let n = select(b.xy, b.zw, two);
    let one = (s & 4u) != 0u; // one more word
    let u = select(m, vec4<u32>(m.yzw, n.x), one);
    return wq_fun(u, select(n.x, n.y, one), (s & 2u) != 0u);
}

// The 16 bytes at even byte offset s (0..30) of the 48 bytes a, b, c.
fn wq_window3(a: vec4<u32>, b: vec4<u32>, c: vec4<u32>, s: u32) -> vec4<u32> {
    return select(wq_window(a, b, s), wq_window(b, c, s - 16u), s >= 16u);
}

// The 16 bytes at even byte offset s (0..16) of the 32 bytes a, b (s == 16: b).
fn wq_window_b(a: vec4<u32>, b: vec4<u32>, s: u32) -> vec4<u32> {
    return select(wq_window(a, b, s & 15u), b, s == 16u);
}

// The f16 at even byte offset s (0..14) of a, as f32.
fn wq_half_at(a: vec4<u32>, s: u32) -> f32 {
    return wq_half(a[s / 4u], (s & 2u) != 0u);
}

// The 32-weight formats: block j of row r, of `bytes` bytes, lies in the 16-byte words from t =
// its first byte / 16, at byte offset s = its first byte % 16 (18-, 20- and 24-byte blocks start
// at s <= 14, 12, 8, so they end inside word t + 1; a 22-byte block can reach word t + 2).
fn wq_small(r: u32, j: u32, bytes: u32) -> vec2<u32> {
    let b = (r * (w_cols() / 32u) + j) * bytes;
    return vec2<u32>(b / 16u, b % 16u);
}

// Low nibbles (codes 0..15) and high nibbles (16..31) of 16 qs bytes.
fn wq_nibbles(q: vec4<u32>) -> array<vec4<u32>, 2> {
    return array<vec4<u32>, 2>(q & vec4<u32>(WQ_LO4), (q >> vec4<u32>(4u)) & vec4<u32>(WQ_LO4));
}

// ---- Q4_0 (18 B: d f16, qs[16]; low nibbles elements 0..15, high 16..31; (q - 8) d). Slice =
// block: 2 words.
const WX8_SLICE_Q4_0: u32 = 32u;
fn wx8_q4_0(r: u32, j: u32, xb: u32) -> f32 {
    let ts = wq_small(r, j, 18u);
    let a = w[ts.x];
    let c = wq_nibbles(wq_window_b(a, w[ts.x + 1u], ts.y + 2u));
    let d = wq_half_at(a, ts.y);
    let xa = xb + j;
    return wq_block32(d, -8.0 * d, c, xa);
}

// ---- Q4_1 (20 B: d, m f16, qs[16]; q d + m). Slice = block: 2 words.
const WX8_SLICE_Q4_1: u32 = 32u;
fn wx8_q4_1(r: u32, j: u32, xb: u32) -> f32 {
    let ts = wq_small(r, j, 20u);
    let a = w[ts.x];
    let c = wq_nibbles(wq_window_b(a, w[ts.x + 1u], ts.y + 4u));
    let dm = unpack2x16float(a[ts.y / 4u]);
    let xa = xb + j;
    return wq_block32(dm.x, dm.y, c, xa);
}

// ---- Q5_0 (22 B: d f16, qh u32, qs[16]; (q - 16) d). Slice = block: 3 words.
const WX8_SLICE_Q5_0: u32 = 32u;
fn wx8_q5_0(r: u32, j: u32, xb: u32) -> f32 {
    let ts = wq_small(r, j, 22u);
    let a = w[ts.x];
    let b = w[ts.x + 1u];
    let e = w[ts.x + 2u];
    let qh = wq_window3(a, b, e, ts.y + 2u).x;
    let c = wq_q5_codes(wq_window3(a, b, e, ts.y + 6u), qh);
    let d = wq_half_at(a, ts.y);
    let xa = xb + j;
    return wq_block32(d, -16.0 * d, c, xa);
}

// ---- Q5_1 (24 B: d, m f16, qh u32, qs[16]; q d + m; blocks 8-byte aligned). Slice = block: 2
// words.
const WX8_SLICE_Q5_1: u32 = 32u;
fn wx8_q5_1(r: u32, j: u32, xb: u32) -> f32 {
    let ts = wq_small(r, j, 24u);
    let a = w[ts.x];
    let c = wq_q5_codes(wq_window_b(a, w[ts.x + 1u], ts.y + 8u), a[ts.y / 4u + 1u]);
    let dm = unpack2x16float(a[ts.y / 4u]);
    let xa = xb + j;
    return wq_block32(dm.x, dm.y, c, xa);
}

// ---- Q8_0 (34 B: d f16, qs: i8[32]; q d). Slice = half a block (16 codes): the two words
// covering it and the one holding d.
const WX8_SLICE_Q8_0: u32 = 16u;
fn wx8_q8_0(r: u32, j: u32, xb: u32) -> f32 {
    let blk = j / 2u;
    let h = j % 2u;
    let b = (r * (w_cols() / 32u) + blk) * 34u;
    let o = b + 2u + 16u * h;
    let q = wq_window(w[o / 16u], w[o / 16u + 1u], o % 16u);
    let d = wq_half(w[b / 16u][(b % 16u) / 4u], (b & 2u) != 0u);
    let xa = xb + blk;
    return d * xq_ds(xa).x * wq_dotx(q, xa, h);
}

// ---- Q6_K (210 B: ql[128], qh[64], scales i8[16], d f16 at 208). Half n of a block, quarter c,
// l = 0..31: low 4 bits nibble c / 2 of ql[64n + 32(c % 2) + l], high 2 bits (qh[32n + l] >> 2c)
// & 3, scale scales[8n + 2c + l / 16]; d sc (q - 32). Slice = half n (128 weights): the
// 16-byte words covering its ql (5), qh (3), scales (2) and d (1).
const WX8_SLICE_Q6_K: u32 = 128u;

fn wx8_q6_k(r: u32, j: u32, xb: u32) -> f32 {
    let blk = j / 2u;
    let n = j % 2u;
    let b = (r * (w_cols() / 256u) + blk) * 210u;
    let s = b % 16u; // ql, qh and d are 16-byte-word aligned relative to b, so share s
    let tl = (b + 64u * n) / 16u;
    let v0 = w[tl];
    let v1 = w[tl + 1u];
    let v2 = w[tl + 2u];
    let v3 = w[tl + 3u];
    let l0 = wq_window(v0, v1, s);
    let l1 = wq_window(v1, v2, s);
    let l2 = wq_window(v2, v3, s);
    let l3 = wq_window(v3, w[tl + 4u], s);
    let th = (b + 128u + 32u * n) / 16u;
    let g1 = w[th + 1u];
    let h0 = wq_window(w[th], g1, s);
    let h1 = wq_window(g1, w[th + 2u], s);
    let os = b + 192u + 8u * n;
    let sc = wq_window(w[os / 16u], w[os / 16u + 1u], os % 16u);
    let d = wq_half_at(w[(b + 208u) / 16u], (b + 208u) % 16u);
    let xa = xb + 8u * blk + 4u * n;
    let q = wq_q6_quarter(l0, l1, h0, h1, 0u, 0u, sc.x, xa) + wq_q6_quarter(l2, l3, h0, h1, 0u, 2u, sc.x >> 16u, xa + 1u)
        + wq_q6_quarter(l0, l1, h0, h1, 4u, 4u, sc.y, xa + 2u) + wq_q6_quarter(l2, l3, h0, h1, 4u, 6u, sc.y >> 16u, xa + 3u);
    return d * q;
}

// ---- Q4_K (144 B: d, dmin f16, scales[12], qs[128]; group g = qs[32g ..], low nibbles sub-block
// 2g, high 2g + 1; d sc q - dmin m). Slice = group: 3 words (header, 2 of qs).
const WX8_SLICE_Q4_K: u32 = 64u;
fn wx8_q4_k(r: u32, j: u32, xb: u32) -> f32 {
    let blk = j / 4u;
    let g = j % 4u;
    let i = (r * (w_cols() / 256u) + blk) * 9u;
    let h = w[i];
    let q0 = w[i + 1u + 2u * g];
    let q1 = w[i + 2u + 2u * g];
    let m4 = vec4<u32>(WQ_LO4);
    let c0 = array<vec4<u32>, 2>(q0 & m4, q1 & m4);
    let c1 = array<vec4<u32>, 2>((q0 >> vec4<u32>(4u)) & m4, (q1 >> vec4<u32>(4u)) & m4);
    return wq_k_group(c0, c1, unpack2x16float(h.x), h.yzw, g, xb + 8u * blk + 2u * g);
}

// ---- Q5_K (176 B: d, dmin, scales[12], qh[32], qs[128]; as Q4_K plus fifth bit 2g (+1 for the
// high nibbles) of qh[l]). Slice = group: 5 words (header, 2 of qh, 2 of qs).
const WX8_SLICE_Q5_K: u32 = 64u;
fn wx8_q5_k(r: u32, j: u32, xb: u32) -> f32 {
    let blk = j / 4u;
    let g = j % 4u;
    let i = (r * (w_cols() / 256u) + blk) * 11u;
    let h = w[i];
    let h0 = w[i + 1u];
    let h1 = w[i + 2u];
    let q0 = w[i + 3u + 2u * g];
    let q1 = w[i + 4u + 2u * g];
    let m4 = vec4<u32>(WQ_LO4);
    let b1 = vec4<u32>(0x01010101u);
    let sl = vec4<u32>(2u * g);
    let sh = vec4<u32>(2u * g + 1u);
    let c0 = array<vec4<u32>, 2>((q0 & m4) | (((h0 >> sl) & b1) << vec4<u32>(4u)), (q1 & m4) | (((h1 >> sl) & b1) << vec4<u32>(4u)));
    let c1 = array<vec4<u32>, 2>(
        ((q0 >> vec4<u32>(4u)) & m4) | (((h0 >> sh) & b1) << vec4<u32>(4u)),
        ((q1 >> vec4<u32>(4u)) & m4) | (((h1 >> sh) & b1) << vec4<u32>(4u)),
    );
    return wq_k_group(c0, c1, unpack2x16float(h.x), h.yzw, g, xb + 8u * blk + 2u * g);
}

// ---- Row-scaled int8 (I8Row: [n][k] i8 codes, then [n] f32 scales; k % 32 == 0 here, so rows
// are 32-byte and the scales 16-byte aligned). Slice = 32 codes: 2 words and the row's scale.
const WX8_SLICE_INT8: u32 = 32u;
fn wx8_int8(r: u32, j: u32, xb: u32) -> f32 {
    let i = (r * w_cols() + 32u * j) / 16u;
    let scale = bitcast<f32>(w[w_rows() * w_cols() / 16u + r / 4u][r % 4u]);
    let xa = xb + j;
    return wq_block_x(scale, 0.0, wq_dotx(w[i], xa, 0u) + wq_dotx(w[i + 1u], xa, 1u), xa);
}
