// gemv_x8_row: the batch-1 integer-dot GEMV of one weight row, part of matmul_gemv_x8 and
// matmul_gemv_x8_rope (each declares binding 0, the uniform `p`, whose struct has MatmulParams'
// fields m, n, k, has_bias, out_off and accumulate by those names). x is one row of two int8
// digits per element in xq (shaders/x8_store.wgsl has the layout: with B = m k / 32 blocks, block
// b's hi digits are vec4s b and B + b, its lo digits 2B + b and 3B + b, its (d, code sum) pair
// half of vec4 4B + b / 2); the weights are read as u32 words and multiplied in integers by the
// format's slice function `wx8` (shaders/quant_weights_x8.wgsl): d_w d_x sum(q_w q_x), f32 only
// per 32-weight block. The result is the dequantized weights times x to ~16 bits
// (reference/weight_quant.rs x8_blocks).

@group(0) @binding(1) var<storage, read> xq: array<vec4<u32>>;
// binding 2, the weights as u32 words, WX8_SLICE and wx8() come with the weight snippet.
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
fn w_cols() -> u32 { return p.k; }
fn w_rows() -> u32 { return p.n; }

// Digits of x block b: part h = 0 / 1: hi digits of elements 0..15 / 16..31, h = 2 / 3: the lo
// digits of them; and the block's (d, code sum).
fn xq_blocks() -> u32 { return p.m * (p.k / 32u); }
fn xq_part(b: u32, h: u32) -> vec4<u32> { return xq[h * xq_blocks() + b]; }
fn xq_ds(b: u32) -> vec2<f32> {
    let h = xq[4u * xq_blocks() + b / 2u];
    return bitcast<vec2<f32>>(select(h.xy, h.zw, (b & 1u) == 1u));
}

// Row `row` (< p.n) of out, as the GEMVs store it: out's old value where p.accumulate (loaded
// before the row's weights so its latency hides behind them), plus the row's dot with x, plus
// its bias. Called by a whole subgroup (every lane gets the value); lane l takes the slices l,
// l + sgs, ... of the row (WX8_SLICE weights each, two in flight), so the lanes read consecutive
// slices (the row's bytes in one sweep) and each slice's header once; subgroupAdd sums them.
fn gemv_x8_row(row: u32, lane: u32, sgs: u32) -> f32 {
    var prev = 0.0;
    if (p.accumulate != 0u) { prev = out[p.out_off + row]; }
    let slices = p.k / WX8_SLICE;
    var acc = 0.0;
    var j = lane;
    for (; j + sgs < slices; j += 2u * sgs) {
        acc += wx8(row, j, 0u) + wx8(row, j + sgs, 0u);
    }
    if (j < slices) { acc += wx8(row, j, 0u); }
    let tot = subgroupAdd(acc);
    var b = 0.0;
    if (p.has_bias != 0u) { b = bias[row]; }
    return prev + (tot + b);
}
