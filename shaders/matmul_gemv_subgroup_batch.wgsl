// matmul_gemv_subgroup_batch (batched decode, 2 <= m <= 16, adapters with SUBGROUP): out[m][n] =
// x[m][k] . w[n][k]^T (+ bias[n]), f32 accumulation, for 16-bit or quantized weights with k % 8 == 0 (the host
// checks; else it uses matmul_gemv). Same math and layout as matmul_gemv_subgroup (which keeps
// m == 1: one subgroup per weight row, no workgroup memory), a schedule that shares x:
//
// One workgroup of WG = 128 threads covers ROWS = 4 weight rows r0..r0+3 (r0 = 4 * (wg.x + wg.y *
// num_workgroups.x); rows past n are clamped to n - 1 for loads and masked on store). Thread t
// walks the 16-byte words t, t + WG, ... (8 weights each, via w8 of the weight snippet) of all
// four rows, so every row is read by coalesced 2 KiB sweeps, and multiplies each word with up to
// MX = 16 x rows (a pass): each weight is read once per pass, each x vec4 feeds four weight rows.
// For m <= MX (every decode batch the host sends here) the weights are read exactly once.
// Partial sums: a_i = x row m0 + i against the four rows, one row per component. subgroupAdd sums
// them over each subgroup; lane 0 stashes them in workgroup memory (subgroups have >= 4 lanes, so
// at most 32 of them: 8 x rows x 32 subgroups = 4 KiB) and thread i then adds x row i over the
// subgroups and writes its four outputs. Weight rows start 16-byte aligned because k % 8 == 0 (16-bit
// weights). Quantized weights: w8 decodes the 8 weights of group i (one sub-block, one scale) from
// the u32 words covering them (shaders/quant_weights.wgsl).

const ROWS: u32 = 4u; // weight rows per workgroup
const WG: u32 = 128u; // threads per workgroup
const MX: u32 = 16u; // x rows per pass over the weights
const HALF: u32 = 8u; // x rows per stash of partial sums

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>; // k % 8 == 0: rows are whole vec4s
// binding 2, the weights as 16-byte words, and w8() come with the weight snippet.
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
// The weight matrix's geometry, read by the quantized formats' decoders (shaders/quant_weights.wgsl).
fn w_cols() -> u32 { return p.k; }
fn w_rows() -> u32 { return p.n; }

// part[s * HALF + i]: subgroup s's sums for x row i of the current half pass.
var<workgroup> part: array<vec4<f32>, 256>;

// The four weight words q0..q3 (rows r0..r0 + 3, same k) times the 8 x elements at vec4 offset o:
// one weight row per component.
fn dot4(q0: array<vec4<f32>, 2>, q1: array<vec4<f32>, 2>, q2: array<vec4<f32>, 2>, q3: array<vec4<f32>, 2>, o: u32) -> vec4<f32> {
    let xa = x[o];
    let xb = x[o + 1u];
    return vec4<f32>(
        dot(q0[0], xa) + dot(q0[1], xb),
        dot(q1[0], xa) + dot(q1[1], xb),
        dot(q2[0], xa) + dot(q2[1], xb),
        dot(q3[0], xa) + dot(q3[1], xb),
    );
}

// Sums v (x row i of the half pass) over the subgroup into part; skipped, uniformly, for i >= cnt.
fn stash(sg: u32, lane: u32, i: u32, cnt: u32, v: vec4<f32>) {
    if (i >= cnt) { return; }
    let s = subgroupAdd(v);
    if (lane == 0u) { part[sg * HALF + i] = s; }
}

// After the stashes: thread t < cnt adds x row m0 + t over the subgroups and writes its outputs
// for the in-range weight rows r0..r0 + 3 (+ bias). Called in uniform control flow.
fn emit(t: u32, nsg: u32, r0: u32, m0: u32, cnt: u32) {
    workgroupBarrier(); // stashes visible
    if (t < cnt) {
        var s = vec4<f32>(0.0);
        for (var g = 0u; g < nsg; g++) { s += part[g * HALF + t]; }
        for (var c = 0u; c < ROWS; c++) {
            let row = r0 + c;
            if (row < p.n) {
                var b = 0.0;
                if (p.has_bias != 0u) { b = bias[row]; }
                out[p.out_off + (m0 + t) * p.ldo + row] = s[c] + b;
            }
        }
    }
    workgroupBarrier(); // part is free for the next stash
}

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32, @builtin(subgroup_invocation_id) lane: u32,
        @builtin(subgroup_id) sg: u32, @builtin(num_subgroups) nsg: u32) {
    let r0 = (wg.x + wg.y * nwg.x) * ROWS;
    if (r0 >= p.n) { return; } // whole workgroup: barriers stay uniform
    let words = p.k / 8u; // 16-byte words per weight row
    let kv = p.k / 4u; // vec4s per x row
    let last = p.n - 1u;
    let b0 = min(r0, last) * words;
    let b1 = min(r0 + 1u, last) * words;
    let b2 = min(r0 + 2u, last) * words;
    let b3 = min(r0 + 3u, last) * words;
    for (var m0 = 0u; m0 < p.m; m0 += MX) {
        let nx = min(p.m - m0, MX);
        var a0 = vec4<f32>(0.0); var a1 = vec4<f32>(0.0); var a2 = vec4<f32>(0.0); var a3 = vec4<f32>(0.0);
        var a4 = vec4<f32>(0.0); var a5 = vec4<f32>(0.0); var a6 = vec4<f32>(0.0); var a7 = vec4<f32>(0.0);
        var a8 = vec4<f32>(0.0); var a9 = vec4<f32>(0.0); var a10 = vec4<f32>(0.0); var a11 = vec4<f32>(0.0);
        var a12 = vec4<f32>(0.0); var a13 = vec4<f32>(0.0); var a14 = vec4<f32>(0.0); var a15 = vec4<f32>(0.0);
        for (var j = t; j < words; j += WG) {
            let q0 = w8(b0 + j);
            let q1 = w8(b1 + j);
            let q2 = w8(b2 + j);
            let q3 = w8(b3 + j);
            let o = m0 * kv + 2u * j; // x row m0, elements 8j..8j + 7
            a0 += dot4(q0, q1, q2, q3, o);
            if (nx > 1u) { a1 += dot4(q0, q1, q2, q3, o + kv); }
            if (nx > 2u) { a2 += dot4(q0, q1, q2, q3, o + 2u * kv); }
            if (nx > 3u) { a3 += dot4(q0, q1, q2, q3, o + 3u * kv); }
            if (nx > 4u) { a4 += dot4(q0, q1, q2, q3, o + 4u * kv); }
            if (nx > 5u) { a5 += dot4(q0, q1, q2, q3, o + 5u * kv); }
            if (nx > 6u) { a6 += dot4(q0, q1, q2, q3, o + 6u * kv); }
            if (nx > 7u) { a7 += dot4(q0, q1, q2, q3, o + 7u * kv); }
            if (nx > 8u) { a8 += dot4(q0, q1, q2, q3, o + 8u * kv); }
            if (nx > 9u) { a9 += dot4(q0, q1, q2, q3, o + 9u * kv); }
            if (nx > 10u) { a10 += dot4(q0, q1, q2, q3, o + 10u * kv); }
            if (nx > 11u) { a11 += dot4(q0, q1, q2, q3, o + 11u * kv); }
            if (nx > 12u) { a12 += dot4(q0, q1, q2, q3, o + 12u * kv); }
            if (nx > 13u) { a13 += dot4(q0, q1, q2, q3, o + 13u * kv); }
            if (nx > 14u) { a14 += dot4(q0, q1, q2, q3, o + 14u * kv); }
            if (nx > 15u) { a15 += dot4(q0, q1, q2, q3, o + 15u * kv); }
        }
        let lo = min(nx, HALF);
        stash(sg, lane, 0u, lo, a0); stash(sg, lane, 1u, lo, a1); stash(sg, lane, 2u, lo, a2); stash(sg, lane, 3u, lo, a3);
        stash(sg, lane, 4u, lo, a4); stash(sg, lane, 5u, lo, a5); stash(sg, lane, 6u, lo, a6); stash(sg, lane, 7u, lo, a7);
        emit(t, nsg, r0, m0, lo);
        if (nx > HALF) {
            let hi = nx - HALF;
            stash(sg, lane, 0u, hi, a8); stash(sg, lane, 1u, hi, a9); stash(sg, lane, 2u, hi, a10); stash(sg, lane, 3u, hi, a11);
            stash(sg, lane, 4u, hi, a12); stash(sg, lane, 5u, hi, a13); stash(sg, lane, 6u, hi, a14); stash(sg, lane, 7u, hi, a15);
            emit(t, nsg, r0, m0 + HALF, hi);
        }
    }
}
