// matmul_m32 (tiled GEMM for 17 <= m <= 96: batched decode, short prefill chunks): out[m][n] =
// x[m][k] . w[n][k]^T (+ bias[n]), f32 accumulation. Same layout, staging and edge handling as
// matmul.wgsl with a 32 (m) x 64 (n) output tile, so a small m pads at most 31 rows instead of up
// to 111 (matmul's 128-row tiles spend most of their FMAs on zero rows there).
// One workgroup of 128 threads steps k by 16: both operand tiles are staged k-major in workgroup
// memory as vec4s of 4 consecutive rows (one pad vec4 per k row), 6.6 KiB in all. Thread (tx, ty)
// = (t % 16, t / 16) owns a 4x4 micro-tile: rows m0 + 4ty + (0..3), columns n0 + 4tx + (0..3). The
// next k step's operands are loaded into registers while the current one is multiplied; private
// state is plain vec4s. Tiles are numbered m-fastest (tile = wg.x + wg.y * num_workgroups.x) so the
// m-tiles sharing a weight tile run next to each other and re-read it from cache.

const BM: u32 = 32u;
const BN: u32 = 64u;
const BK: u32 = 16u;
const SX: u32 = 9u; // vec4s per k row of the staged x tile (8 + 1 pad)
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
var<workgroup> xs: array<vec4<f32>, 144>;
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

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let tiles_m = (p.m + BM - 1u) / BM;
    let tile = wg.x + wg.y * nwg.x;
    if (tile >= tiles_m * ((p.n + BN - 1u) / BN)) { return; } // whole workgroup: barriers stay uniform
    let m0 = (tile % tiles_m) * BM;
    let n0 = (tile / tiles_m) * BN;
    let t = lid.x;
    let tx = t % 16u;
    let ty = t / 16u;
    // Loader mapping: thread t stages k offset lk of tile rows lr + 8e (16 threads read 16
    // consecutive k of one row: coalesced); x rows e = 0..3 (xr), w rows e = 0..7 (wr0, wr1).
    let lk = t % BK;
    let lr = t / BK;

    var xr: vec4<f32>;
    var wr0: vec4<f32>;
    var wr1: vec4<f32>;
    for (var e = 0u; e < 4u; e++) {
        xr[e] = load_x(m0, lr + 8u * e, lk);
        wr0[e] = load_wt(n0, lr + 8u * e, lk);
        wr1[e] = load_wt(n0, lr + 32u + 8u * e, lk);
    }
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < p.k; k0 += BK) {
        for (var e = 0u; e < 4u; e++) {
            let r = lr + 8u * e;
            xs[lk * SX + r / 4u][r % 4u] = xr[e];
            ws[lk * SW + r / 4u][r % 4u] = wr0[e];
            ws[lk * SW + 8u + r / 4u][r % 4u] = wr1[e];
        }
        workgroupBarrier();
        let kn = k0 + BK;
        if (kn < p.k) {
            for (var e = 0u; e < 4u; e++) {
                xr[e] = load_x(m0, lr + 8u * e, kn + lk);
                wr0[e] = load_wt(n0, lr + 8u * e, kn + lk);
                wr1[e] = load_wt(n0, lr + 32u + 8u * e, kn + lk);
            }
        }
        for (var kk = 0u; kk < BK; kk++) {
            let a = xs[kk * SX + ty];
            let b = ws[kk * SW + tx];
            acc0 += a.x * b;
            acc1 += a.y * b;
            acc2 += a.z * b;
            acc3 += a.w * b;
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
}
