// matmul_gemv_x8 (batch-1 decode on quantized weights, adapters with SUBGROUP; the host sends m
// == 1 and k % 32 == 0 here, every format with an integer form: not fp8): out[out_off + c] =
// x[0][k] . w[c][k]^T (+ bias[c]) (p.accumulate: out += that), with x as the two int8 digits per element in xq, written by
// matmul_gemv_x8_pack or by the op that produced x (shaders/x8_store.wgsl has the layout: with
// B = m k / 32 blocks, block b's hi digits are vec4s b and B + b, its lo digits 2B + b and 3B +
// b, its (d, code sum) pair half of vec4 4B + b / 2). The weights are read as u32 words and multiplied in integers
// by the format's slice function `wx8` (shaders/quant_weights_x8.wgsl): d_w d_x sum(q_w q_x),
// f32 only per 32-weight block. The result is the dequantized weights times x to ~16 bits
// (reference/weight_quant.rs x8_blocks).
//
// One workgroup covers ROWS = 8 weight rows (workgroup id g = wg.x + wg.y * num_workgroups.x,
// rows 8g..8g+7) with 256 / RPS threads; RPS (rows per subgroup, the constant put before this
// source by shaders.rs: 1) is how many rows a subgroup multiplies at once. Subgroup s (of
// num_subgroups, any subgroup size) owns rows 8g + RPS s ..
// + RPS - 1, then RPS num_subgroups further, ...; lane l takes the slices l, l + subgroup_size,
// ... of its rows (WX8_SLICE weights each, two in flight per row), so the lanes of a subgroup
// read consecutive slices of a row (the row's bytes in one sweep) and each slice's header once;
// subgroupAdd sums the lanes and lane 0 writes. No workgroup memory, no barriers. Why RPS: a
// slice's x digits are 4x its bytes of Q4_K codes (64 elements x 2 digits against 32 bytes), so
// with one row per subgroup the x loads, not the weights, fill the load units; the RPS rows of a
// slice load the same x words with no store between them (the compiler may load them once), and
// the sum of each row is the same as with RPS = 1, bit for bit. On the H200 RPS = 1 was fastest
// (ops_matmul.rs `gemv_x8`), so shaders.rs builds only that module.

const ROWS: u32 = 8u;

@group(0) @binding(0) var<uniform> p: MatmulParams;
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

@compute @workgroup_size(256u / RPS)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(subgroup_invocation_id) lane: u32, @builtin(subgroup_size) sgs: u32,
        @builtin(subgroup_id) sg: u32, @builtin(num_subgroups) nsg: u32) {
    let row0 = (wg.x + wg.y * nwg.x) * ROWS;
    let slices = p.k / WX8_SLICE;
    for (var rr = sg * RPS; rr < ROWS; rr += nsg * RPS) {
        if (row0 + rr >= p.n) { break; }
        // Rows past n (the last workgroup) repeat row n - 1 and are not written.
        var rows: array<u32, RPS>;
        var acc: array<f32, RPS>;
        // accumulate (a batch-1 o_proj / down into the residual stream): out's old value, loaded
        // before the row's weights so its latency hides behind them.
        var prev: array<f32, RPS>;
        for (var i = 0u; i < RPS; i++) {
            rows[i] = min(row0 + rr + i, p.n - 1u);
            acc[i] = 0.0;
            prev[i] = 0.0;
            if (p.accumulate != 0u) { prev[i] = out[p.out_off + rows[i]]; }
        }
        var j = lane;
        for (; j + sgs < slices; j += 2u * sgs) {
            for (var i = 0u; i < RPS; i++) { acc[i] += wx8(rows[i], j, 0u) + wx8(rows[i], j + sgs, 0u); }
        }
        if (j < slices) {
            for (var i = 0u; i < RPS; i++) { acc[i] += wx8(rows[i], j, 0u); }
        }
        for (var i = 0u; i < RPS; i++) {
            let tot = subgroupAdd(acc[i]);
            let row = row0 + rr + i;
            if (lane == 0u && row < p.n) {
                var b = 0.0;
                if (p.has_bias != 0u) { b = bias[row]; }
                out[p.out_off + row] = prev[i] + (tot + b);
            }
        }
    }
}
