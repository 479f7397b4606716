// Quantized weight formats (docs/weights.md; the values are those of
// src/backend/reference/weight_quant.rs dequantize_rows, the GGML blocks those of ggml's
// dequantize_row_*: same operation order). Included, with the snippet naming one format, in the
// modules of ops that read weights (shaders.rs); the module declares `w: array<u32>` (the
// matrix's bytes, little-endian, read as u32 words: WGSL has no 8-bit types) and `w_cols()` /
// `w_rows()` (the `[rows][cols]` geometry: k / n for matmul, dim / vocab for embed).
//
// Per format X: `deq1_X(r, c) -> f32`, element (r, c); `deq8_X(r, j) -> array<vec4<f32>, 2>`,
// elements 8j .. 8j + 7 of row r (cols % 8 == 0; one block's sub-block, so one scale). GGML
// blocks of 18, 22, 34 and 210 bytes are only 2-byte aligned and row-scaled rows of odd k are
// byte aligned: multi-byte fields are read as the words that cover them, shifted (wq_u32). f16
// scales go through unpack2x16float (bitcast<vec2<f16>> miscomputes on lavapipe,
// gfx-rs/wgpu#8896).

// Byte b.
fn wq_byte(b: u32) -> u32 {
    return (w[b >> 2u] >> ((b & 3u) * 8u)) & 0xffu;
}

// The little-endian f16 at even byte b.
fn wq_f16(b: u32) -> f32 {
    return unpack2x16float(w[b >> 2u] >> ((b & 2u) * 8u)).x;
}

// Bytes b .. b + 3 as a little-endian u32, any alignment (shifts are taken mod 32 in WGSL, and
// the select drops the unaligned form when s == 0).
fn wq_u32(b: u32) -> u32 {
    let s = (b & 3u) * 8u;
    let lo = w[b >> 2u];
    let hi = w[(b >> 2u) + 1u];
    return select((lo >> s) | (hi << (32u - s)), lo, s == 0u);
}

// (byte_i >> sh) & mask for the 8 bytes of lo (bytes 0..3) and hi (4..7), as f32.
fn wq_bits8(lo: u32, hi: u32, sh: u32, mask: u32) -> array<vec4<f32>, 2> {
    let s = vec4<u32>(0u, 8u, 16u, 24u) + sh;
    return array<vec4<f32>, 2>(vec4<f32>((vec4<u32>(lo) >> s) & vec4<u32>(mask)), vec4<f32>((vec4<u32>(hi) >> s) & vec4<u32>(mask)));
}

// The 8 signed bytes of lo, hi as f32.
fn wq_i8x8(lo: u32, hi: u32) -> array<vec4<f32>, 2> {
    let s = vec4<u32>(24u, 16u, 8u, 0u);
    return array<vec4<f32>, 2>(
        vec4<f32>(bitcast<vec4<i32>>(vec4<u32>(lo) << s) >> vec4<u32>(24u)),
        vec4<f32>(bitcast<vec4<i32>>(vec4<u32>(hi) << s) >> vec4<u32>(24u)),
    );
}

// Bits 0..7 of h, one per element, as f32 0 or 1.
fn wq_bit8(h: u32) -> array<vec4<f32>, 2> {
    return array<vec4<f32>, 2>(
        vec4<f32>((vec4<u32>(h) >> vec4<u32>(0u, 1u, 2u, 3u)) & vec4<u32>(1u)),
        vec4<f32>((vec4<u32>(h) >> vec4<u32>(4u, 5u, 6u, 7u)) & vec4<u32>(1u)),
    );
}

fn wq_i8(v: u32) -> f32 {
    return f32(bitcast<i32>(v << 24u) >> 24u);
}

// fp8 e4m3 code -> f32 (as shaders.rs kv8_val and reference/kv_quant.rs e4m3_to_f32).
fn wq_e4m3(b: u32) -> f32 {
    let e = (b >> 3u) & 15u;
    let m = b & 7u;
    let v = select(bitcast<f32>(((e + 120u) << 23u) | (m << 20u)), f32(m) * 0.001953125, e == 0u);
    return select(v, -v, (b & 0x80u) != 0u);
}

fn wq_e4m3x4(v: u32) -> vec4<f32> {
    return vec4<f32>(wq_e4m3(v & 0xffu), wq_e4m3((v >> 8u) & 0xffu), wq_e4m3((v >> 16u) & 0xffu), wq_e4m3(v >> 24u));
}

// Byte offset of block `blk` of row r for a format of bs elements / ts bytes per block.
fn wq_block(r: u32, blk: u32, bs: u32, ts: u32) -> u32 {
    return (r * (w_cols() / bs) + blk) * ts;
}

// ---- Q4_0: d: f16, qs[16]; element e is nibble e / 16 of qs[e % 16]; (q - 8) * d.
fn deq1_q4_0(r: u32, c: u32) -> f32 {
    let b = wq_block(r, c / 32u, 32u, 18u);
    let e = c % 32u;
    let q = (wq_byte(b + 2u + e % 16u) >> (4u * (e / 16u))) & 15u;
    return f32(i32(q) - 8) * wq_f16(b);
}

fn deq8_q4_0(r: u32, j: u32) -> array<vec4<f32>, 2> {
    let b = wq_block(r, j / 4u, 32u, 18u);
    let o = b + 2u + 8u * (j & 1u);
    let v = wq_bits8(wq_u32(o), wq_u32(o + 4u), 4u * ((j >> 1u) & 1u), 15u);
    let d = wq_f16(b);
    return array<vec4<f32>, 2>((v[0] - 8.0) * d, (v[1] - 8.0) * d);
}

// ---- Q4_1: d, m: f16, qs[16]; q * d + m.
fn deq1_q4_1(r: u32, c: u32) -> f32 {
    let b = wq_block(r, c / 32u, 32u, 20u);
    let e = c % 32u;
    let q = (wq_byte(b + 4u + e % 16u) >> (4u * (e / 16u))) & 15u;
    return f32(q) * wq_f16(b) + wq_f16(b + 2u);
}

fn deq8_q4_1(r: u32, j: u32) -> array<vec4<f32>, 2> {
    let b = wq_block(r, j / 4u, 32u, 20u);
    let o = b + 4u + 8u * (j & 1u);
    let v = wq_bits8(wq_u32(o), wq_u32(o + 4u), 4u * ((j >> 1u) & 1u), 15u);
    let d = wq_f16(b);
    let m = wq_f16(b + 2u);
    return array<vec4<f32>, 2>(v[0] * d + m, v[1] * d + m);
}

// ---- Q5_0: d: f16, qh: u32, qs[16]; the fifth bit of element e is bit e of qh; (q - 16) * d.
fn deq1_q5_0(r: u32, c: u32) -> f32 {
    let b = wq_block(r, c / 32u, 32u, 22u);
    let e = c % 32u;
    let q = ((wq_byte(b + 6u + e % 16u) >> (4u * (e / 16u))) & 15u) | (((wq_u32(b + 2u) >> e) & 1u) << 4u);
    return f32(i32(q) - 16) * wq_f16(b);
}

fn deq8_q5_0(r: u32, j: u32) -> array<vec4<f32>, 2> {
    let b = wq_block(r, j / 4u, 32u, 22u);
    let o = b + 6u + 8u * (j & 1u);
    let v = wq_bits8(wq_u32(o), wq_u32(o + 4u), 4u * ((j >> 1u) & 1u), 15u);
    let h = wq_bit8(wq_u32(b + 2u) >> (8u * (j % 4u)));
    let d = wq_f16(b);
    return array<vec4<f32>, 2>((v[0] + 16.0 * h[0] - 16.0) * d, (v[1] + 16.0 * h[1] - 16.0) * d);
}

// ---- Q5_1: d, m: f16, qh: u32, qs[16]; q * d + m.
fn deq1_q5_1(r: u32, c: u32) -> f32 {
    let b = wq_block(r, c / 32u, 32u, 24u);
    let e = c % 32u;
    let q = ((wq_byte(b + 8u + e % 16u) >> (4u * (e / 16u))) & 15u) | (((wq_u32(b + 4u) >> e) & 1u) << 4u);
    return f32(q) * wq_f16(b) + wq_f16(b + 2u);
}

fn deq8_q5_1(r: u32, j: u32) -> array<vec4<f32>, 2> {
    let b = wq_block(r, j / 4u, 32u, 24u);
    let o = b + 8u + 8u * (j & 1u);
    let v = wq_bits8(wq_u32(o), wq_u32(o + 4u), 4u * ((j >> 1u) & 1u), 15u);
    let h = wq_bit8(wq_u32(b + 4u) >> (8u * (j % 4u)));
    let d = wq_f16(b);
    let m = wq_f16(b + 2u);
    return array<vec4<f32>, 2>((v[0] + 16.0 * h[0]) * d + m, (v[1] + 16.0 * h[1]) * d + m);
}

// ---- Q8_0: d: f16, qs: i8[32]; q * d.
fn deq1_q8_0(r: u32, c: u32) -> f32 {
    let b = wq_block(r, c / 32u, 32u, 34u);
    return wq_i8(wq_byte(b + 2u + c % 32u)) * wq_f16(b);
}

fn deq8_q8_0(r: u32, j: u32) -> array<vec4<f32>, 2> {
    let b = wq_block(r, j / 4u, 32u, 34u);
    let o = b + 2u + 8u * (j % 4u);
    let v = wq_i8x8(wq_u32(o), wq_u32(o + 4u));
    let d = wq_f16(b);
    return array<vec4<f32>, 2>(v[0] * d, v[1] * d);
}

// ---- K-quants (256 elements per block).
// Q4_K / Q5_K: 6-bit scale and min of sub-block j (0..8) from the 12 bytes at sb (ggml's
// get_scale_min_k4), as f32.
fn wq_scale_min_k4(sb: u32, j: u32) -> vec2<f32> {
    if (j < 4u) {
        return vec2<f32>(f32(wq_byte(sb + j) & 63u), f32(wq_byte(sb + j + 4u) & 63u));
    }
    let h = wq_byte(sb + j + 4u);
    let sc = (h & 15u) | ((wq_byte(sb + j - 4u) >> 6u) << 4u);
    let mn = (h >> 4u) | ((wq_byte(sb + j) >> 6u) << 4u);
    return vec2<f32>(f32(sc), f32(mn));
}

// ---- Q4_K: d, dmin: f16, scales[12], qs[128]; element e: group g = e / 64 uses qs[32g ..],
// low nibbles for e % 64 < 32, sub-block 2g + (e % 64) / 32; d * sc * q - dmin * m.
fn deq1_q4_k(r: u32, c: u32) -> f32 {
    let b = wq_block(r, c / 256u, 256u, 144u);
    let e = c % 256u;
    let g = e / 64u;
    let h = (e / 32u) & 1u;
    let sm = wq_scale_min_k4(b + 4u, 2u * g + h);
    let q = (wq_byte(b + 16u + 32u * g + e % 32u) >> (4u * h)) & 15u;
    return wq_f16(b) * sm.x * f32(q) - wq_f16(b + 2u) * sm.y;
}

fn deq8_q4_k(r: u32, j: u32) -> array<vec4<f32>, 2> {
    let b = wq_block(r, j / 32u, 256u, 144u);
    let e = 8u * (j % 32u);
    let g = e / 64u;
    let h = (e / 32u) & 1u;
    let sm = wq_scale_min_k4(b + 4u, 2u * g + h);
    let o = b + 16u + 32u * g + e % 32u;
    let v = wq_bits8(wq_u32(o), wq_u32(o + 4u), 4u * h, 15u);
    let d1 = wq_f16(b) * sm.x;
    let m1 = wq_f16(b + 2u) * sm.y;
    return array<vec4<f32>, 2>(d1 * v[0] - m1, d1 * v[1] - m1);
}

// ---- Q5_K: d, dmin: f16, scales[12], qh[32], qs[128]; as Q4_K plus the fifth bit of element
// e, bit 2g + (e % 64) / 32 of qh[e % 32].
fn deq1_q5_k(r: u32, c: u32) -> f32 {
    let b = wq_block(r, c / 256u, 256u, 176u);
    let e = c % 256u;
    let g = e / 64u;
    let h = (e / 32u) & 1u;
    let sm = wq_scale_min_k4(b + 4u, 2u * g + h);
    let lo = (wq_byte(b + 48u + 32u * g + e % 32u) >> (4u * h)) & 15u;
    let hi = (wq_byte(b + 16u + e % 32u) >> (2u * g + h)) & 1u;
    return wq_f16(b) * sm.x * f32(lo + 16u * hi) - wq_f16(b + 2u) * sm.y;
}

fn deq8_q5_k(r: u32, j: u32) -> array<vec4<f32>, 2> {
    let b = wq_block(r, j / 32u, 256u, 176u);
    let e = 8u * (j % 32u);
    let g = e / 64u;
    let h = (e / 32u) & 1u;
    let sm = wq_scale_min_k4(b + 4u, 2u * g + h);
    let o = b + 48u + 32u * g + e % 32u;
    let v = wq_bits8(wq_u32(o), wq_u32(o + 4u), 4u * h, 15u);
    let oh = b + 16u + e % 32u;
    let hb = wq_bits8(wq_u32(oh), wq_u32(oh + 4u), 2u * g + h, 1u);
    let d1 = wq_f16(b) * sm.x;
    let m1 = wq_f16(b + 2u) * sm.y;
    return array<vec4<f32>, 2>(d1 * (v[0] + 16.0 * hb[0]) - m1, d1 * (v[1] + 16.0 * hb[1]) - m1);
}

// ---- Q6_K: ql[128], qh[64], scales: i8[16], d: f16 (at 208). Element e: half n = e / 128,
// quarter c = (e % 128) / 32, l = e % 32: low 4 bits nibble c / 2 of ql[64n + 32(c % 2) + l],
// high 2 bits (qh[32n + l] >> 2c) & 3, scale scales[8n + 2c + l / 16]; d * sc * (q - 32).
fn deq1_q6_k(r: u32, c: u32) -> f32 {
    let b = wq_block(r, c / 256u, 256u, 210u);
    let e = c % 256u;
    let n = e / 128u;
    let qc = (e / 32u) & 3u;
    let l = e % 32u;
    let lo = (wq_byte(b + 64u * n + 32u * (qc & 1u) + l) >> (4u * (qc >> 1u))) & 15u;
    let hi = (wq_byte(b + 128u + 32u * n + l) >> (2u * qc)) & 3u;
    let sc = wq_i8(wq_byte(b + 192u + 8u * n + 2u * qc + l / 16u));
    return wq_f16(b + 208u) * sc * f32(i32(lo | (hi << 4u)) - 32);
}

fn deq8_q6_k(r: u32, j: u32) -> array<vec4<f32>, 2> {
    let b = wq_block(r, j / 32u, 256u, 210u);
    let e = 8u * (j % 32u);
    let n = e / 128u;
    let qc = (e / 32u) & 3u;
    let l = e % 32u;
    let o = b + 64u * n + 32u * (qc & 1u) + l;
    let lo = wq_bits8(wq_u32(o), wq_u32(o + 4u), 4u * (qc >> 1u), 15u);
    let oh = b + 128u + 32u * n + l;
    let hi = wq_bits8(wq_u32(oh), wq_u32(oh + 4u), 2u * qc, 3u);
    let s = wq_f16(b + 208u) * wq_i8(wq_byte(b + 192u + 8u * n + 2u * qc + l / 16u));
    return array<vec4<f32>, 2>(s * (lo[0] + 16.0 * hi[0] - 32.0), s * (lo[1] + 16.0 * hi[1] - 32.0));
}

// ---- Row-scaled 8-bit (I8Row "int8", F8Row "fp8"): [rows][cols] code bytes, then [rows] f32
// scales; code * scale.
fn wq_row_scale(r: u32) -> f32 {
    return bitcast<f32>(wq_u32(w_rows() * w_cols() + 4u * r));
}

fn deq1_int8(r: u32, c: u32) -> f32 {
    return wq_i8(wq_byte(r * w_cols() + c)) * wq_row_scale(r);
}

fn deq8_int8(r: u32, j: u32) -> array<vec4<f32>, 2> {
    let o = r * w_cols() + 8u * j;
    let v = wq_i8x8(wq_u32(o), wq_u32(o + 4u));
    let s = wq_row_scale(r);
    return array<vec4<f32>, 2>(v[0] * s, v[1] * s);
}

fn deq1_fp8(r: u32, c: u32) -> f32 {
    return wq_e4m3(wq_byte(r * w_cols() + c)) * wq_row_scale(r);
}

fn deq8_fp8(r: u32, j: u32) -> array<vec4<f32>, 2> {
    let o = r * w_cols() + 8u * j;
    let s = wq_row_scale(r);
    return array<vec4<f32>, 2>(wq_e4m3x4(wq_u32(o)) * s, wq_e4m3x4(wq_u32(o + 4u)) * s);
}
