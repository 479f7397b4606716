// matmul_gemv_subgroup_batch (batched decode, 2 <= m <= 16, adapters with SUBGROUP whose subgroups
// have >= 8 lanes): out[m][n] = x[m][k] . w[n][k]^T (+ bias[n]), f32 accumulation, for 16-bit or
// quantized weights with k % 8 == 0 (the host checks; else it uses matmul_gemv). Same math and
// layout as matmul_gemv_subgroup (which keeps m == 1), a schedule that shares each x load among
// many weight rows and keeps the reductions off the k loop:
//
// A workgroup of WG = 8 KS NR threads covers ROWS = 4 NR weight rows from r0 = ROWS * (wg.x +
// wg.y * num_workgroups.x) (rows past n are clamped to n - 1 for loads and masked on store). Its
// threads form KS NR lane groups of LG = 8 consecutive lanes of one subgroup (group q =
// subgroup_id * subgroup_size / 8 + lane / 8): group q owns the 4 weight rows r0 + 4 (q % NR) ..
// + 3 (one accumulator component each) and the k slice q / NR of KS, whose lane l reads the
// 16-byte words (8 weights each, via w8 of the weight snippet) l, l + KL, l + 2 KL, ... of its
// rows, KL = 8 KS (the workgroup's slices x 8 lanes), U words per row in flight (U = 2: both
// loaded before either is used; U = 1: one at a time, fewer registers). Each word is multiplied
// with up to MX = 8 x rows (a pass; m > 8 makes a second pass over the workgroup's rows, which
// mostly comes from L2; CLAMP: always all 8, rows past m re-reading row m - 1, so the k loop has
// no branch), and each x vec4 load feeds the 4 rows. Consecutive groups of a subgroup share
// their k slice (NR = 4: all 4 of a 32-lane subgroup), so they load the same x addresses (one
// broadcast) for 16 weight rows: x costs a quarter of the L1 wavefronts it would if all 32 lanes
// walked one row. Every workgroup
// reads all of x, so rows per workgroup set x's L2 traffic: 2 m / ROWS bytes per weight byte
// where L1 does not keep x between workgroups.
//
// Reduction, once per pass (the k loop has none): the group's 8 lanes each hold 8 vec4 partials
// (x row c, the 4 weight rows); three subgroupShuffleXor folds (4, 2, 1) each exchange half the
// partials, so lane l ends with x row l summed over the group (7 vec4 shuffles, not 8 x 3). Each
// lane stashes its vec4 in workgroup memory (16 WG bytes: KS slices x NR row groups x 8 x
// rows), one barrier, and thread t < 8 NR adds the KS slices of (row group t / 8, x row t % 8) and writes
// the 4 outputs (+ bias). Weight rows start 16-byte aligned because k % 8 == 0 (16-bit weights).
// Quantized weights: w8 decodes the 8 weights of group i (one sub-block, one scale) from the
// u32 words covering them (shaders/quant_weights.wgsl).

const MX: u32 = 8u; // x rows per pass over the weights
const LG: u32 = 8u; // lanes per group (the shuffle folds stay inside one subgroup)
// Prepended by shaders.rs per variant (ops_matmul.rs `gemv_batch` picks one; both built have NR
// 4, KS 8: the plain kernel CLAMP false U 2, `_cu1` CLAMP true U 1): NR, the row groups of 4
// weight rows per workgroup; KS, the k slices per workgroup (KS * NR groups of LG lanes);
// CLAMP, whether every pass computes all MX x rows (rows past m re-read row m - 1 and are not
// stored): a k loop without branches, for m >= 5; U, the words of each of its 4 rows a lane loads
// before using them (1 or 2). Measured on an H200 (Llama-3-8B f16, batch 8, one step's GEMVs):
// NR 4 KS 8 U 2 unclamped 11.5 ms, clamped 9.1, clamped U 1 8.5; 32 rows (NR 8) 16.6, 128- and
// 64-thread workgroups (KS 4, 2) 11.7 and 15.7, U 4 10.4 (docs/benchmarks.md).
const KL: u32 = KS * LG; // lanes striding over one weight row, in words
const ROWS: u32 = 4u * NR; // weight rows per workgroup
const WG: u32 = KS * NR * LG; // threads per workgroup

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>; // k % 8 == 0: rows are whole vec4s
// binding 2, the weights as 16-byte words, and w8() come with the weight snippet.
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
// The weight matrix's geometry, read by the quantized formats' decoders (shaders/quant_weights.wgsl).
fn w_cols() -> u32 { return p.k; }
fn w_rows() -> u32 { return p.n; }

// part[(slice * NR + row group) * MX + i]: the group's sums for x row i of the pass.
var<workgroup> part: array<vec4<f32>, WG>;

// Partial sums of one lane: a<i> = x row m0 + i against the group's 4 weight rows.
struct Acc { a0: vec4<f32>, a1: vec4<f32>, a2: vec4<f32>, a3: vec4<f32>, a4: vec4<f32>, a5: vec4<f32>, a6: vec4<f32>, a7: vec4<f32> }

// The four weight words q0..q3 (same k) times the 8 x elements at vec4 offset o: one weight row per
// component.
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

// Adds the words q0..q3 (word j of the 4 rows) times x rows m0 .. m0 + nx - 1 (nx is uniform).
// CLAMP: xo holds the vec4 offsets of the 8 x rows (clamped to row m - 1), no branches.
fn step(a: ptr<function, Acc>, q0: array<vec4<f32>, 2>, q1: array<vec4<f32>, 2>, q2: array<vec4<f32>, 2>, q3: array<vec4<f32>, 2>, j: u32, m0: u32, nx: u32, xo: array<u32, 8>) {
    if (CLAMP) {
        let o = 2u * j;
        (*a).a0 += dot4(q0, q1, q2, q3, xo[0] + o);
        (*a).a1 += dot4(q0, q1, q2, q3, xo[1] + o);
        (*a).a2 += dot4(q0, q1, q2, q3, xo[2] + o);
        (*a).a3 += dot4(q0, q1, q2, q3, xo[3] + o);
        (*a).a4 += dot4(q0, q1, q2, q3, xo[4] + o);
        (*a).a5 += dot4(q0, q1, q2, q3, xo[5] + o);
        (*a).a6 += dot4(q0, q1, q2, q3, xo[6] + o);
        (*a).a7 += dot4(q0, q1, q2, q3, xo[7] + o);
        return;
    }
    let kv = p.k / 4u; // vec4s per x row
    let o = m0 * kv + 2u * j;
    (*a).a0 += dot4(q0, q1, q2, q3, o);
    if (nx > 1u) { (*a).a1 += dot4(q0, q1, q2, q3, o + kv); }
    if (nx > 2u) { (*a).a2 += dot4(q0, q1, q2, q3, o + 2u * kv); }
    if (nx > 3u) { (*a).a3 += dot4(q0, q1, q2, q3, o + 3u * kv); }
    if (nx > 4u) { (*a).a4 += dot4(q0, q1, q2, q3, o + 4u * kv); }
    if (nx > 5u) { (*a).a5 += dot4(q0, q1, q2, q3, o + 5u * kv); }
    if (nx > 6u) { (*a).a6 += dot4(q0, q1, q2, q3, o + 6u * kv); }
    if (nx > 7u) { (*a).a7 += dot4(q0, q1, q2, q3, o + 7u * kv); }
}

// One fold of the transposing reduction: the lanes with lane bit d clear keep lo and add their
// partner's lo (lane ^ d), the others keep hi and add the partner's hi. Uniform control flow.
fn fold(lo: vec4<f32>, hi: vec4<f32>, l: u32, d: u32) -> vec4<f32> {
    let up = (l & d) != 0u;
    return select(lo, hi, up) + subgroupShuffleXor(select(hi, lo, up), d);
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32, @builtin(subgroup_invocation_id) lane: u32,
        @builtin(subgroup_size) sgs: u32, @builtin(subgroup_id) sg: u32) {
    let r0 = (wg.x + wg.y * nwg.x) * ROWS;
    if (r0 >= p.n) { return; } // whole workgroup: barriers and shuffles stay uniform
    let grp = sg * (sgs / LG) + lane / LG;
    let l = lane % LG;
    let rg = grp % NR;
    let slice = grp / NR;
    let words = p.k / 8u; // 16-byte words per weight row
    let last = p.n - 1u;
    let rb = r0 + 4u * rg;
    let b0 = min(rb, last) * words;
    let b1 = min(rb + 1u, last) * words;
    let b2 = min(rb + 2u, last) * words;
    let b3 = min(rb + 3u, last) * words;
    for (var m0 = 0u; m0 < p.m; m0 += MX) {
        let nx = min(p.m - m0, MX);
        let kv = p.k / 4u; // vec4s per x row
        let lm = p.m - 1u;
        let xo = array<u32, 8>(min(m0, lm) * kv, min(m0 + 1u, lm) * kv, min(m0 + 2u, lm) * kv, min(m0 + 3u, lm) * kv,
            min(m0 + 4u, lm) * kv, min(m0 + 5u, lm) * kv, min(m0 + 6u, lm) * kv, min(m0 + 7u, lm) * kv);
        var a: Acc;
        var j = slice * LG + l;
        for (; U == 2u && j + KL < words; j += 2u * KL) {
            let q0 = w8(b0 + j);
            let q1 = w8(b1 + j);
            let q2 = w8(b2 + j);
            let q3 = w8(b3 + j);
            let s0 = w8(b0 + j + KL);
            let s1 = w8(b1 + j + KL);
            let s2 = w8(b2 + j + KL);
            let s3 = w8(b3 + j + KL);
            step(&a, q0, q1, q2, q3, j, m0, nx, xo);
            step(&a, s0, s1, s2, s3, j + KL, m0, nx, xo);
        }
        for (; j < words; j += KL) { step(&a, w8(b0 + j), w8(b1 + j), w8(b2 + j), w8(b3 + j), j, m0, nx, xo); }
        // Lane l of the group ends with x row l (bits 4, 2, 1 of l pick the halves kept).
        let h0 = fold(a.a0, a.a4, l, 4u);
        let h1 = fold(a.a1, a.a5, l, 4u);
        let h2 = fold(a.a2, a.a6, l, 4u);
        let h3 = fold(a.a3, a.a7, l, 4u);
        let g0 = fold(h0, h2, l, 2u);
        let g1 = fold(h1, h3, l, 2u);
        part[(slice * NR + rg) * MX + l] = fold(g0, g1, l, 1u);
        workgroupBarrier();
        if (t < NR * MX && t % MX < nx) {
            let i = t % MX; // x row m0 + i
            let g = t / MX; // row group
            var s = vec4<f32>(0.0);
            for (var k = 0u; k < KS; k++) { s += part[(k * NR + g) * MX + i]; }
            for (var c = 0u; c < 4u; c++) {
                let row = r0 + 4u * g + c;
                if (row < p.n) {
                    var b = 0.0;
                    if (p.has_bias != 0u) { b = bias[row]; }
                    out[p.out_off + (m0 + i) * p.ldo + row] = s[c] + b;
                }
            }
        }
        workgroupBarrier(); // part is free for the next pass
    }
}
