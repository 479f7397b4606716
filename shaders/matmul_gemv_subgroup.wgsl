// matmul_gemv_subgroup (decode, adapters with SUBGROUP; the host sends m == 1 here and batches of
// 2..16 rows to matmul_gemv_subgroup_batch, any m works): out[m][n] = x[m][k] . w[n][k]^T
// (+ bias[n]) (p.accumulate, sent at m == 1 only: out += that), f32 accumulation, for 16-bit or quantized weights with k % 8 == 0 (the host checks; else it
// uses matmul_gemv). Same math and layout as matmul_gemv, different reduction:
//
// One workgroup of 256 covers ROWS = 8 weight rows (workgroup id g = wg.x + wg.y *
// num_workgroups.x, rows 8g..8g+7). Subgroup i (of num_subgroups, any subgroup size) owns rows
// 8g + i, 8g + i + num_subgroups, ...; its lanes stride over the row in 16-byte words (8 weights
// each, via w8 of the weight snippet), four words in flight per lane, each weight word
// feeding up to 4 x rows; subgroupAdd sums the lanes and lane 0 writes. No workgroup memory and
// no barriers. Weight rows start 16-byte aligned because k % 8 == 0 (16-bit
// weights). Quantized weights: w8 decodes the 8 weights of group i (one sub-block, one scale) from
// the u32 words covering them (shaders/quant_weights.wgsl).

const ROWS: u32 = 8u;

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>; // k % 8 == 0: rows are whole vec4s
// binding 2, the weights as 16-byte words, and w8() come with the weight snippet.
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
// The weight matrix's geometry, read by the quantized formats' decoders (shaders/quant_weights.wgsl).
fn w_cols() -> u32 { return p.k; }
fn w_rows() -> u32 { return p.n; }

// Dot of the 8 weights ws with the 8 elements of x from element offset o (o % 8 == 0).
fn dot8(ws: array<vec4<f32>, 2>, o: u32) -> f32 {
    return dot(ws[0], x[o / 4u]) + dot(ws[1], x[o / 4u + 1u]);
}

// Adds word q (elements e..e+8) times x rows m0..m0+nx to acc.
fn acc_word(acc: ptr<function, vec4<f32>>, q: array<vec4<f32>, 2>, e: u32, m0: u32, nx: u32) {
    let k = p.k;
    (*acc).x += dot8(q, m0 * k + e);
    if (nx > 1u) { (*acc).y += dot8(q, (m0 + 1u) * k + e); }
    if (nx > 2u) { (*acc).z += dot8(q, (m0 + 2u) * k + e); }
    if (nx > 3u) { (*acc).w += dot8(q, (m0 + 3u) * k + e); }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(subgroup_invocation_id) lane: u32, @builtin(subgroup_size) sgs: u32,
        @builtin(subgroup_id) sg: u32, @builtin(num_subgroups) nsg: u32) {
    let row0 = (wg.x + wg.y * nwg.x) * ROWS;
    let words = p.k / 8u; // 16-byte words per weight row
    for (var rr = sg; rr < ROWS; rr += nsg) {
        let row = row0 + rr;
        if (row >= p.n) { break; }
        var b = 0.0;
        if (p.has_bias != 0u) { b = bias[row]; }
        // accumulate (sent at m == 1 only: a batch-1 o_proj / down into the residual stream):
        // out's old value, loaded before the row's weights so its latency hides behind them.
        var prev = 0.0;
        if (p.accumulate != 0u) { prev = out[p.out_off + row]; }
        let base = row * words;
        for (var m0 = 0u; m0 < p.m; m0 += 4u) {
            let nx = min(p.m - m0, 4u);
            var acc = vec4<f32>(0.0);
            var j = lane;
            for (; j + 3u * sgs < words; j += 4u * sgs) {
                let q0 = w8(base + j);
                let q1 = w8(base + j + sgs);
                let q2 = w8(base + j + 2u * sgs);
                let q3 = w8(base + j + 3u * sgs);
                acc_word(&acc, q0, j * 8u, m0, nx);
                acc_word(&acc, q1, (j + sgs) * 8u, m0, nx);
                acc_word(&acc, q2, (j + 2u * sgs) * 8u, m0, nx);
                acc_word(&acc, q3, (j + 3u * sgs) * 8u, m0, nx);
            }
            for (; j < words; j += sgs) { acc_word(&acc, w8(base + j), j * 8u, m0, nx); }
            let tot = subgroupAdd(acc);
            if (lane == 0u) {
                for (var i = 0u; i < nx; i++) { out[p.out_off + (m0 + i) * p.ldo + row] = prev + (tot[i] + b); }
            }
        }
    }
}
