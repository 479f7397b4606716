// Quantized weights against int8 x, the formats read as u32 words (`w: array<u32>`): Q4_0, Q4_1,
// Q5_0, Q5_1, Q6_K (after quant_weights_x8.wgsl, which states the contract). Blocks of 18,
// 22, 34 and 210 bytes start 2-byte aligned: a slice loads the words covering it (one more than
// it holds) and shifts by 16 bits where its start is odd in halves (`wq_skip2`, `wq_fun`).

// Words i .. i + 3 of w.
fn wq_w4(i: u32) -> vec4<u32> {
    return vec4<u32>(w[i], w[i + 1u], w[i + 2u], w[i + 3u]);
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

// ---- Q6_K (210 B: ql[128], qh[64], scales i8[16], d f16 at 208). Half n of a block, quarter c,
// l = 0..31: low 4 bits nibble c / 2 of ql[64n + 32(c % 2) + l], high 2 bits (qh[32n + l] >> 2c)
// & 3, scale scales[8n + 2c + l / 16]; d sc (q - 32). Slice = half n (128 weights): 30 words.
const WX8_SLICE_Q6_K: u32 = 128u;

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
