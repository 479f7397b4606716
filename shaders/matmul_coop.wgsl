// matmul_coop (tensor-core GEMM for m > 16 — prefill and batches beyond 16 — on adapters with
// wgpu's EXPERIMENTAL_COOPERATIVE_MATRIX and a 16x16x16 f16 x f16 -> f32 configuration at
// subgroup size 32; ops_matmul.rs decides): out[m][n] = x[m][k] . w[n][k]^T (+ bias[n]), f16
// operands (rounded as shaders/coop_common.wgsl states), f32 accumulation.
//
// Layout: x [m][k] f32 (bound as vec4s), w [n][k] in any 16-bit or quantized weight dtype (the
// weight snippet's load_w / w8), bias [n] f32, out[out_off + r * ldo + c] (r < m, c < n; nothing
// else written). Any m, n, k: edge tiles are zero-padded on staging and masked on store.
//
// One workgroup of WG = 128 threads = 4 subgroups of 32 (the host requires subgroup size 32)
// computes a BM x BN = 64 x 64 output tile. Tiles are numbered m-fastest (tile = wg.x + wg.y *
// num_workgroups.x), so the m-tiles sharing a weight tile run next to each other and re-read it
// from cache. Per k step of BK = 32 all threads stage the x tile (64 x 32) and the w tile (64 x
// 32) into workgroup memory as f16, row-major with SA = 40 halves per row (80 bytes: coopLoad
// needs 16-byte aligned rows and strides; the 8-half pad spreads rows over banks), two 8-element
// groups of each per thread. Subgroup s owns the 32 x 32 quadrant (rows 32 (s % 2), columns
// 32 (s / 2)) as four 16 x 16 f32 accumulators c00..c11; per 16-wide slice of the k step it loads
// two A fragments (x rows, coopLoadT: row-major) and two B fragments (w^T: element (kk, nn) =
// ws[nn * SA + kk], column-major, coopLoad) and issues four coopMultiplyAdd. Epilogue: each
// accumulator goes through the subgroup's 16 x 16 f32 patch of workgroup memory (coopStoreT),
// from which the subgroup's lanes add the bias and write the in-range elements.
// Workgroup memory: 2 x 5 KiB staging + 4 KiB epilogue = 14 KiB. Every barrier is reached by the
// whole workgroup (the early return is per workgroup; the k loop count is uniform).

const BM: u32 = 64u;
const BN: u32 = 64u;
const BK: u32 = 32u;
const SA: u32 = 40u; // f16 per staged row: BK + 8
const WG: u32 = 128u;

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
// w (binding 2) is declared by the weight snippet.
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
// The weight matrix's geometry, read by the quantized formats' decoders (shaders/quant_weights.wgsl).
fn w_cols() -> u32 { return p.k; }
fn w_rows() -> u32 { return p.n; }

// xs[r * SA + kk] = x[m0 + r][k0 + kk]; ws[r * SA + kk] = w[n0 + r][k0 + kk] (f16).
var<workgroup> xs: array<f16, 2560>; // BM * SA
var<workgroup> ws: array<f16, 2560>; // BN * SA
// cs[s * 256 + r * 16 + c]: element (r, c) of the accumulator subgroup s is writing out.
var<workgroup> cs: array<f32, 1024>;

// Stage 8-element group g (0 .. 255) of the x and w tiles at k0: tile row g / 4, k offset 8 (g % 4).
fn stage(m0: u32, n0: u32, k0: u32, g: u32) {
    let r = g / 4u;
    let kc = 8u * (g % 4u);
    let xv = x_group(m0 + r, k0 + kc);
    let wv = w_group(n0 + r, k0 + kc);
    let o = r * SA + kc;
    for (var e = 0u; e < 4u; e++) {
        xs[o + e] = x16(xv[0][e]);
        xs[o + 4u + e] = x16(xv[1][e]);
        ws[o + e] = w16(wv[0][e]);
        ws[o + 4u + e] = w16(wv[1][e]);
    }
}

// The subgroup's lanes write accumulator patch s (staged in cs) to out rows r0.., columns c0..
// (+ bias), masked to the matrix. Called by the whole workgroup between barriers.
fn emit(s: u32, lane: u32, r0: u32, c0: u32) {
    for (var e = lane; e < 256u; e += 32u) {
        let r = r0 + e / 16u;
        let c = c0 + e % 16u;
        if (r < p.m && c < p.n) {
            var b = 0.0;
            if (p.has_bias != 0u) { b = bias[c]; }
            out[p.out_off + r * p.ldo + c] = cs[s * 256u + e] + b;
        }
    }
}

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32, @builtin(subgroup_id) sg: u32,
        @builtin(subgroup_invocation_id) lane: u32) {
    let tiles_m = (p.m + BM - 1u) / BM;
    let tile = wg.x + wg.y * nwg.x;
    if (tile >= tiles_m * ((p.n + BN - 1u) / BN)) { return; } // whole workgroup: barriers stay uniform
    let m0 = (tile % tiles_m) * BM;
    let n0 = (tile / tiles_m) * BN;
    let qm = 32u * (sg % 2u); // the subgroup's quadrant within the tile
    let qn = 32u * (sg / 2u);

    var c00 = coop_mat16x16<f32, C>();
    var c01 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>();
    var c11 = coop_mat16x16<f32, C>();
    for (var k0 = 0u; k0 < p.k; k0 += BK) {
        stage(m0, n0, k0, t);
        stage(m0, n0, k0, t + WG);
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk += 16u) {
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&xs[qm * SA + kk], SA);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&xs[(qm + 16u) * SA + kk], SA);
            let b0 = coopLoad<coop_mat16x16<f16, B>>(&ws[qn * SA + kk], SA);
            let b1 = coopLoad<coop_mat16x16<f16, B>>(&ws[(qn + 16u) * SA + kk], SA);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
        }
        workgroupBarrier(); // the tiles are free for the next k step
    }

    let r0 = m0 + qm;
    let c0 = n0 + qn;
    coopStoreT(c00, &cs[sg * 256u], 16u);
    workgroupBarrier();
    emit(sg, lane, r0, c0);
    workgroupBarrier();
    coopStoreT(c01, &cs[sg * 256u], 16u);
    workgroupBarrier();
    emit(sg, lane, r0, c0 + 16u);
    workgroupBarrier();
    coopStoreT(c10, &cs[sg * 256u], 16u);
    workgroupBarrier();
    emit(sg, lane, r0 + 16u, c0);
    workgroupBarrier();
    coopStoreT(c11, &cs[sg * 256u], 16u);
    workgroupBarrier();
    emit(sg, lane, r0 + 16u, c0 + 16u);
}
