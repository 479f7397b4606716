// matmul (tiled GEMM, prefill): out[m][n] = x[m][k] . w[n][k]^T (+ bias[n]), f32 accumulation.
// Layout: x [m][k] f32, w [n][k] weights read through load_w (f32, or two f16/bf16 per u32),
// bias [n] f32 (bound but unread when has_bias == 0), out rows of p.ldo floats from element p.out_off
// (out[out_off + r * ldo + c] for r < m, c < n; other elements untouched); all row-major. Quantized
// weights (shaders/quant_weights.wgsl) are dequantized by load_w as the tiles are staged.
// One workgroup of 256 threads computes a 128 (m) x 64 (n) output tile, stepping k by 16: both
// operand tiles are staged k-major in workgroup memory as vec4s of 4 consecutive rows (one pad
// vec4 per k row keeps the transposing stores nearly conflict-free), 12.5 KiB in all. Thread
// (tx, ty) = (t % 16, t / 16) owns an 8x4 micro-tile: rows m0 + 4ty + (0..3) and m0 + 64 + 4ty +
// (0..3), columns n0 + 4tx + (0..3). The next k step's operands are loaded into registers while
// the current one is multiplied. Private state is plain vec4s (no private arrays, which some
// drivers spill). Edges (m, n, k not multiples of
// the tile) are zero-filled on load and masked on store. Tiles are numbered m-fastest
// (tile = wg.x + wg.y * num_workgroups.x) so neighbouring workgroups share a weight tile in cache.

const BM: u32 = 128u;
const BN: u32 = 64u;
const BK: u32 = 16u;
const SX: u32 = 33u; // vec4s per k row of the staged x tile (32 + 1 pad)
const SW: u32 = 17u; // vec4s per k row of the staged w tile (16 + 1 pad)

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<u32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
// The weight matrix's geometry, read by the quantized formats' decoders (shaders/quant_weights.wgsl).
fn w_cols() -> u32 { return p.k; }
fn w_rows() -> u32 { return p.n; }

// xs[kk * SX + r / 4][r % 4] = x[m0 + r][k0 + kk]; ws[kk * SW + r / 4][r % 4] = w[n0 + r][k0 + kk].
var<workgroup> xs: array<vec4<f32>, 528>;
var<workgroup> ws: array<vec4<f32>, 272>;

// Element (m0 + r, kk) of x / (n0 + r, kk) of w, or 0 outside the matrix.
fn load_x(m0: u32, r: u32, kk: u32) -> f32 {
    var v = 0.0;
    if (m0 + r < p.m && kk < p.k) { v = x[(m0 + r) * p.k + kk]; }
    return v;
}

fn load_wt(n0: u32, r: u32, kk: u32) -> f32 {
    var v = 0.0;
    if (n0 + r < p.n && kk < p.k) { v = load_w((n0 + r) * p.k + kk); }
    return v;
}

// out[r][c0 + j] = v[j] for the in-range row and columns.
fn store(r: u32, c0: u32, v: vec4<f32>) {
    if (r >= p.m) { return; }
    for (var j = 0u; j < 4u; j++) {
        if (c0 + j < p.n) { out[p.out_off + r * p.ldo + c0 + j] = v[j]; }
    }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let tiles_m = (p.m + BM - 1u) / BM;
    let tile = wg.x + wg.y * nwg.x;
    if (tile >= tiles_m * ((p.n + BN - 1u) / BN)) { return; } // whole workgroup: barriers stay uniform
    let m0 = (tile % tiles_m) * BM;
    let n0 = (tile / tiles_m) * BN;
    let t = lid.x;
    let tx = t % 16u;
    let ty = t / 16u;
    // Loader mapping: thread t stages k offset lk of tile rows lr + 16e (16 threads read 16
    // consecutive k of one row: coalesced); x rows e = 0..7 (xr0, xr1), w rows e = 0..3 (wr).
    let lk = t % BK;
    let lr = t / BK;

    var xr0: vec4<f32>;
    var xr1: vec4<f32>;
    var wr: vec4<f32>;
    for (var e = 0u; e < 4u; e++) {
        xr0[e] = load_x(m0, lr + 16u * e, lk);
        xr1[e] = load_x(m0, lr + 64u + 16u * e, lk);
        wr[e] = load_wt(n0, lr + 16u * e, lk);
    }
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    var acc4 = vec4<f32>(0.0);
    var acc5 = vec4<f32>(0.0);
    var acc6 = vec4<f32>(0.0);
    var acc7 = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < p.k; k0 += BK) {
        for (var e = 0u; e < 4u; e++) {
            let r = lr + 16u * e;
            xs[lk * SX + r / 4u][r % 4u] = xr0[e];
            xs[lk * SX + 16u + r / 4u][r % 4u] = xr1[e];
            ws[lk * SW + r / 4u][r % 4u] = wr[e];
        }
        workgroupBarrier();
        let kn = k0 + BK;
        if (kn < p.k) {
            for (var e = 0u; e < 4u; e++) {
                xr0[e] = load_x(m0, lr + 16u * e, kn + lk);
                xr1[e] = load_x(m0, lr + 64u + 16u * e, kn + lk);
                wr[e] = load_wt(n0, lr + 16u * e, kn + lk);
            }
        }
        for (var kk = 0u; kk < BK; kk++) {
            let a0 = xs[kk * SX + ty];
            let a1 = xs[kk * SX + 16u + ty];
            let b = ws[kk * SW + tx];
            acc0 += a0.x * b;
            acc1 += a0.y * b;
            acc2 += a0.z * b;
            acc3 += a0.w * b;
            acc4 += a1.x * b;
            acc5 += a1.y * b;
            acc6 += a1.z * b;
            acc7 += a1.w * b;
        }
        workgroupBarrier();
    }

    let c0 = n0 + 4u * tx;
    var bv = vec4<f32>(0.0);
    if (p.has_bias != 0u) {
        for (var j = 0u; j < 4u; j++) {
            if (c0 + j < p.n) { bv[j] = bias[c0 + j]; }
        }
    }
    store(m0 + 4u * ty, c0, acc0 + bv);
    store(m0 + 4u * ty + 1u, c0, acc1 + bv);
    store(m0 + 4u * ty + 2u, c0, acc2 + bv);
    store(m0 + 4u * ty + 3u, c0, acc3 + bv);
    store(m0 + 64u + 4u * ty, c0, acc4 + bv);
    store(m0 + 65u + 4u * ty, c0, acc5 + bv);
    store(m0 + 66u + 4u * ty, c0, acc6 + bv);
    store(m0 + 67u + 4u * ty, c0, acc7 + bv);
}
