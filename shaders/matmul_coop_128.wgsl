// matmul_coop_128 (tensor-core GEMM for prefill-size m, pass 2 after matmul_coop_x16, on the
// adapters of matmul_coop with 44 KiB of workgroup memory; ops_matmul.rs decides):
// out[m][n] = x[m][k] . w[n][k]^T (+ bias[n]), f16 operands (rounded as shaders/coop_round.wgsl
// states), f32 accumulation.
//
// Layout: xh = x as matmul_coop_x16 leaves it (f16 rows of kp = k rounded up to 8, zero-padded,
// as 16-byte words of 8), w [n][k] in any 16-bit or quantized weight dtype (the weight snippet's
// wh8 / load_w; f16 weights are staged as stored, no conversion), bias [n] f32,
// out[out_off + r * ldo + c] (r < m, c < n; nothing else written). Any m, n, k: edge tiles are
// zero-padded on staging and masked on store.
//
// shaders.rs prepends NSG = 8, BK = 64, STAGES = 1 and the stage sizes SX_LEN = SW_LEN = 2304.
// One workgroup of WG = 32 NSG threads = NSG subgroups of 32 (the host requires subgroup size 32)
// computes a BM x BN = 128 x 16 NSG output tile: subgroup s owns the 64 x 32 block at rows 64
// (s % 2), columns 32 (s / 2), the 16 x 16 f32 accumulators c<i><j> (rows 16 i, columns 16 j of
// the block); per 16-wide k slice it loads four A fragments (x rows, coopLoadT: row-major) and
// two B fragments (w^T: element (kk, nn) = sw[nn][kk], column-major, coopLoad) for 8
// coopMultiplyAdd. Tiles are numbered m-fastest (tile = wg.x + wg.y * num_workgroups.x), so the
// m-tiles that share a weight tile run side by side and read it from L2.
//
// k steps of BK halves staged in workgroup memory as vec4<f16>, row-major, SV = BK / 4 + 2 vec4s
// per row (144 bytes at BK = 64: coopLoad needs 16-byte aligned rows and strides; with the
// 16-byte pad the 8 rows of one 8 x 8 fragment load fall on distinct banks). With one stage
// (STAGES = 1) each step writes the 16-byte groups a thread loaded into registers during the
// previous step's MMAs, barrier, loads the next step's groups (in flight during the MMAs), runs
// the step's MMAs, barrier. With two (STAGES = 2, BK = 32: the previous kernel) the next step's
// groups go to the other stage after the MMAs, one barrier a step. 48 KiB (NVIDIA's Vulkan
// limit) holds one stage of 64 or two of 32; on the H200 (docs/benchmarks.md, session 20) one
// stage of 64 took the 4K prefill's GEMMs from 1,053 to 854 ms (twice the MMAs between
// barriers; both with wgpu's shader checks), and 128 x 64 tiles (NSG = 4) were 1.6-1.9x
// slower. The source keeps those shapes (constant branches).
// Epilogue: a tile fully inside the matrix, without bias, whose rows start 16-byte aligned (ldo
// and out_off multiples of 4) is stored straight from the accumulators (coopStoreT to out); any
// other tile goes accumulator by accumulator through the subgroup's 16 x 16 f32 patch of
// workgroup memory, from which its lanes add the bias and write the in-range elements.
// Workgroup memory: STAGES x (BM + BN) rows x SV vec4s + NSG KiB of epilogue patches (44 KiB as
// built); none of it is read before this workgroup wrote it.
// Every barrier is reached by the whole workgroup (the early return and the epilogue choice are
// per workgroup; the k loop count is uniform; NSG, BK and STAGES are constants).

const BM: u32 = 128u;
const BN: u32 = 16u * NSG;
const GR: u32 = BK / 8u; // 8-half groups of a staged row (before the pad)
const SV: u32 = BK / 4u + 2u; // vec4<f16> per staged row: 80 (BK 32) or 144 (BK 64) bytes
const XSTAGE: u32 = BM * SV; // vec4<f16> per stage of x
const WSTAGE: u32 = BN * SV; // and of w
const WG: u32 = 32u * NSG;
const XPT: u32 = BM * GR / WG; // groups of the x tile a thread stages per k step: 2, 4 or 8
const WPT: u32 = BN * GR / WG; // of the w tile: 2 or 4

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read> xh: array<mat2x4<f16>>;
// w (binding 2) is declared by the weight snippet.
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
fn w_cols() -> u32 { return p.k; }
fn w_rows() -> u32 { return p.n; }

var<workgroup> sx: array<vec4<f16>, SX_LEN>; // STAGES * XSTAGE
var<workgroup> sw: array<vec4<f16>, SW_LEN>; // STAGES * WSTAGE
var<workgroup> cs: array<f32, 256u * NSG>;

fn x_tile(m0: u32, k0: u32, g: u32) -> mat2x4<f16> {
    let r = m0 + g / GR;
    let c = k0 + 8u * (g % GR);
    let kg = (p.k + 7u) / 8u;
    if (r >= p.m || c >= 8u * kg) { return mat2x4<f16>(); }
    return xh[r * kg + c / 8u];
}

fn w_tile(n0: u32, k0: u32, g: u32) -> mat2x4<f16> {
    return w_group16(n0 + g / GR, k0 + 8u * (g % GR));
}

// Up to 8 x groups and 4 w groups a thread (named members: they stay in registers).
struct Regs {
    x0: mat2x4<f16>, x1: mat2x4<f16>, x2: mat2x4<f16>, x3: mat2x4<f16>,
    x4: mat2x4<f16>, x5: mat2x4<f16>, x6: mat2x4<f16>, x7: mat2x4<f16>,
    w0: mat2x4<f16>, w1: mat2x4<f16>, w2: mat2x4<f16>, w3: mat2x4<f16>,
}

fn fetch(m0: u32, n0: u32, k0: u32, t: u32) -> Regs {
    var r: Regs;
    r.x0 = x_tile(m0, k0, t);
    r.x1 = x_tile(m0, k0, t + WG);
    r.w0 = w_tile(n0, k0, t);
    r.w1 = w_tile(n0, k0, t + WG);
    if (XPT >= 4u) {
        r.x2 = x_tile(m0, k0, t + 2u * WG);
        r.x3 = x_tile(m0, k0, t + 3u * WG);
    }
    if (XPT == 8u) {
        r.x4 = x_tile(m0, k0, t + 4u * WG);
        r.x5 = x_tile(m0, k0, t + 5u * WG);
        r.x6 = x_tile(m0, k0, t + 6u * WG);
        r.x7 = x_tile(m0, k0, t + 7u * WG);
    }
    if (WPT == 4u) {
        r.w2 = w_tile(n0, k0, t + 2u * WG);
        r.w3 = w_tile(n0, k0, t + 3u * WG);
    }
    return r;
}

fn put_x(s: u32, g: u32, v: mat2x4<f16>) {
    let o = s * XSTAGE + (g / GR) * SV + 2u * (g % GR);
    sx[o] = v[0];
    sx[o + 1u] = v[1];
}

fn put_w(s: u32, g: u32, v: mat2x4<f16>) {
    let o = s * WSTAGE + (g / GR) * SV + 2u * (g % GR);
    sw[o] = v[0];
    sw[o + 1u] = v[1];
}

fn put_all(s: u32, t: u32, r: Regs) {
    put_x(s, t, r.x0);
    put_x(s, t + WG, r.x1);
    put_w(s, t, r.w0);
    put_w(s, t + WG, r.w1);
    if (XPT >= 4u) {
        put_x(s, t + 2u * WG, r.x2);
        put_x(s, t + 3u * WG, r.x3);
    }
    if (XPT == 8u) {
        put_x(s, t + 4u * WG, r.x4);
        put_x(s, t + 5u * WG, r.x5);
        put_x(s, t + 6u * WG, r.x6);
        put_x(s, t + 7u * WG, r.x7);
    }
    if (WPT == 4u) {
        put_w(s, t + 2u * WG, r.w2);
        put_w(s, t + 3u * WG, r.w3);
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


@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32, @builtin(subgroup_id) sg: u32,
        @builtin(subgroup_invocation_id) lane: u32) {
    let tiles_m = (p.m + BM - 1u) / BM;
    let tile = wg.x + wg.y * nwg.x;
    if (tile >= tiles_m * ((p.n + BN - 1u) / BN)) { return; } // whole workgroup: barriers stay uniform
    let m0 = (tile % tiles_m) * BM;
    let n0 = (tile / tiles_m) * BN;
    let qm = 64u * (sg % 2u); // the subgroup's quadrant within the tile
    let qn = 32u * (sg / 2u);
    let ax = qm * SV; // first A row of the quadrant in a stage
    let bw = qn * SV; // first B column

    var c00 = coop_mat16x16<f32, C>();
    var c01 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>();
    var c11 = coop_mat16x16<f32, C>();
    var c20 = coop_mat16x16<f32, C>();
    var c21 = coop_mat16x16<f32, C>();
    var c30 = coop_mat16x16<f32, C>();
    var c31 = coop_mat16x16<f32, C>();

    var r = fetch(m0, n0, 0u, t);
    let steps = (p.k + BK - 1u) / BK;
    if (STAGES == 2u) {
        put_all(0u, t, r);
        workgroupBarrier();
    }
    for (var ks = 0u; ks < steps; ks++) {
        let more = ks + 1u < steps; // uniform
        var xb = 0u;
        var wb = 0u;
        if (STAGES == 1u) { // single stage: every subgroup left it at the last barrier
            put_all(0u, t, r);
            workgroupBarrier();
        } else {
            xb = (ks % 2u) * XSTAGE;
            wb = (ks % 2u) * WSTAGE;
        }
        if (more) { r = fetch(m0, n0, (ks + 1u) * BK, t); } // in flight during the MMAs
        for (var kv = 0u; kv < BK / 4u; kv += 4u) { // 16-wide k slices: 4 vec4s each
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&sx[xb + ax + kv], SV);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&sx[xb + ax + 16u * SV + kv], SV);
            let a2 = coopLoadT<coop_mat16x16<f16, A>>(&sx[xb + ax + 32u * SV + kv], SV);
            let a3 = coopLoadT<coop_mat16x16<f16, A>>(&sx[xb + ax + 48u * SV + kv], SV);
            let b0 = coopLoad<coop_mat16x16<f16, B>>(&sw[wb + bw + kv], SV);
            let b1 = coopLoad<coop_mat16x16<f16, B>>(&sw[wb + bw + 16u * SV + kv], SV);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
            c20 = coopMultiplyAdd(a2, b0, c20);
            c21 = coopMultiplyAdd(a2, b1, c21);
            c30 = coopMultiplyAdd(a3, b0, c30);
            c31 = coopMultiplyAdd(a3, b1, c31);
        }
        if (STAGES == 2u && more) { put_all(1u - ks % 2u, t, r); }
        workgroupBarrier();
    }

    // The epilogue is written out accumulator by accumulator (no cooperative matrices passed to
    // functions). naga 30's WGSL front end records a coopStore before the expressions computed in
    // its own arguments (they reach the SPIR-V writer uncached), so every pointer index and
    // stride below is a let computed before the call.
    let r0 = m0 + qm;
    let c0 = n0 + qn;
    let direct = p.has_bias == 0u && p.out_off % 4u == 0u && p.ldo % 4u == 0u && m0 + BM <= p.m && n0 + BN <= p.n;
    if (direct) { // straight to out: rows of stride l, 16-byte aligned (o % 4 == l % 4 == 0)
        let l = p.ldo;
        let o00 = p.out_off + r0 * l + c0;
        let o01 = o00 + 16u;
        let o10 = p.out_off + (r0 + 16u) * l + c0;
        let o11 = o10 + 16u;
        let o20 = p.out_off + (r0 + 32u) * l + c0;
        let o21 = o20 + 16u;
        let o30 = p.out_off + (r0 + 48u) * l + c0;
        let o31 = o30 + 16u;
        coopStoreT(c00, &out[o00], l);
        coopStoreT(c10, &out[o10], l);
        coopStoreT(c20, &out[o20], l);
        coopStoreT(c30, &out[o30], l);
        coopStoreT(c01, &out[o01], l);
        coopStoreT(c11, &out[o11], l);
        coopStoreT(c21, &out[o21], l);
        coopStoreT(c31, &out[o31], l);
        return;
    }
    // Through the subgroup's patch cs[pc ..] (whole workgroup: the choice above is uniform).
    let pc = sg * 256u;
    coopStoreT(c00, &cs[pc], 16u);
    workgroupBarrier();
    emit(sg, lane, r0, c0);
    workgroupBarrier();
    coopStoreT(c10, &cs[pc], 16u);
    workgroupBarrier();
    emit(sg, lane, r0 + 16u, c0);
    workgroupBarrier();
    coopStoreT(c20, &cs[pc], 16u);
    workgroupBarrier();
    emit(sg, lane, r0 + 32u, c0);
    workgroupBarrier();
    coopStoreT(c30, &cs[pc], 16u);
    workgroupBarrier();
    emit(sg, lane, r0 + 48u, c0);
    workgroupBarrier();
    coopStoreT(c01, &cs[pc], 16u);
    workgroupBarrier();
    emit(sg, lane, r0, c0 + 16u);
    workgroupBarrier();
    coopStoreT(c11, &cs[pc], 16u);
    workgroupBarrier();
    emit(sg, lane, r0 + 16u, c0 + 16u);
    workgroupBarrier();
    coopStoreT(c21, &cs[pc], 16u);
    workgroupBarrier();
    emit(sg, lane, r0 + 32u, c0 + 16u);
    workgroupBarrier();
    coopStoreT(c31, &cs[pc], 16u);
    workgroupBarrier();
    emit(sg, lane, r0 + 48u, c0 + 16u);
    workgroupBarrier();
}
