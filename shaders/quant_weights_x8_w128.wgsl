// Quantized weights against int8 x, the formats read as 16-byte words (`w: array<vec4<u32>>`):
// Q4_K (144-byte blocks), Q5_K (176) and int8 rows with k % 32 == 0, whose slices are 16-byte
// aligned (a K-quant block's first word is its whole header: d, dmin and the 12 scale bytes), and
// Q8_0 (34 bytes, 2-byte aligned), whose 16-byte halves are cut out of the two words covering
// them (`wq_window`), so that the lanes of a subgroup read consecutive 16-byte windows (after
// quant_weights_x8.wgsl, which states the contract).

// The 16 bytes at even byte offset s (0..14) of the 32 bytes a, b.
fn wq_window(a: vec4<u32>, b: vec4<u32>, s: u32) -> vec4<u32> {
    let two = (s & 8u) != 0u; // start two words in
    let m = select(a, vec4<u32>(a.zw, b.xy), two);
    let n = select(b.xy, b.zw, two);
    let one = (s & 4u) != 0u; // one more word
    let u = select(m, vec4<u32>(m.yzw, n.x), one);
    return wq_fun(u, select(n.x, n.y, one), (s & 2u) != 0u);
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
    return d * xq_ds(xa).x * f32(wq_dot16(q, xq_part(xa, h)));
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
    return wq_block_x(scale, 0.0, wq_dot16(w[i], xq_lo(xa)) + wq_dot16(w[i + 1u], xq_hi(xa)), xa);
}
