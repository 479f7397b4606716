// matmul_coop_128 (tensor-core GEMM for prefill-size m, pass 2 after matmul_coop_x16, on the
// adapters of matmul_coop with 48 KiB of workgroup memory; ops_matmul.rs decides):
// out[m][n] = x[m][k] . w[n][k]^T (+ bias[n]), f16 operands (rounded as shaders/coop_round.wgsl
// states), f32 accumulation.
//
// Layout: xh = x as matmul_coop_x16 leaves it (f16 rows of kp = k rounded up to 8, zero-padded,
// as 16-byte words of 8), w [n][k] in any 16-bit or quantized weight dtype (the weight snippet's
// wh8 / load_w; f16 weights are staged as stored, no conversion), bias [n] f32,
// out[out_off + r * ldo + c] (r < m, c < n; nothing else written). Any m, n, k: edge tiles are
// zero-padded on staging and masked on store.
//
// One workgroup of WG = 32 NSG threads = NSG subgroups of 32 (the host requires subgroup size
// 32) computes a BM x BN = 128 x 128 output tile. NSG = 8: subgroup s owns the 64 x 32 block at
// rows 64 (s % 2), columns 32 (s / 2), the 16 x 16 f32 accumulators c<i>0 and c<i>1 (rows 16 i,
// columns 16 j of the block); per 16-wide k slice it loads four A fragments (x rows, coopLoadT:
// row-major) and two B fragments (w^T: element (kk, nn) = sw[nn][kk], column-major, coopLoad)
// for 8 coopMultiplyAdd. The source also takes NSG = 4 (64 x 64 quadrants, all sixteen c<i><j>:
// the NJ == 4 and GPT == 4 branches, constant-false at NSG = 8): half the fragment loads per MMA,
// but twice the registers per thread and half the warps; on the H200 it was 1.8x slower, and
// shaders.rs no longer builds it (docs/backends.md). Tiles are numbered
// m-fastest (tile = wg.x + wg.y * num_workgroups.x), so the m-tiles that share a weight tile run
// side by side and read it from L2.
//
// k steps of BK = 32, double-buffered in workgroup memory: stage s holds the x tile (128 x 32)
// and the w tile (128 x 32) as vec4<f16>, row-major, SV = 10 vec4s per row (80 bytes: coopLoad
// needs 16-byte aligned rows and strides; with the 16-byte pad the 8 rows of one 8 x 8 fragment
// load fall on distinct banks). Per k step each thread first loads its GPT groups of 8 halves of
// each tile for the next step into registers (16-byte loads), then runs the MMAs on the current
// stage, then writes its registers to the other stage (8-byte stores), then one barrier: the
// loads are in flight during the MMAs, and the other stage is free (every subgroup finished
// reading it before the previous barrier).
// Epilogue: a tile fully inside the matrix, without bias, whose rows start 16-byte aligned (ldo
// and out_off multiples of 4) is stored straight from the accumulators (coopStoreT to out); any
// other tile goes accumulator by accumulator through the subgroup's 16 x 16 f32 patch of
// workgroup memory, from which its lanes add the bias and write the in-range elements.
// Workgroup memory: 2 stages x 2 operands x 10 KiB + NSG KiB of epilogue patches = 48 KiB.
// Every barrier is reached by the whole workgroup (the early return and the epilogue choice are
// per workgroup; the k loop count is uniform; NJ and GPT are constants).

const BM: u32 = 128u;
const BN: u32 = 128u;
const BK: u32 = 32u;
const SV: u32 = 10u; // vec4<f16> per staged row: (BK + 8) / 4
const STAGE: u32 = 1280u; // vec4<f16> per stage of one operand: BM * SV
// NSG (subgroups per workgroup) is prepended by shaders.rs: 8 (64 x 32 blocks; 4 would give 64 x
// 64 quadrants, header).
const WG: u32 = 32u * NSG;
const NJ: u32 = 16u / NSG; // B fragments (16 columns each) per subgroup: 4 or 2
const GPT: u32 = 512u / WG; // 8-element groups of each tile a thread stages per k step: 4 or 2

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read> xh: array<mat2x4<f16>>;
// w (binding 2) is declared by the weight snippet.
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
// The weight matrix's geometry, read by the quantized formats' decoders (shaders/quant_weights.wgsl).
fn w_cols() -> u32 { return p.k; }
fn w_rows() -> u32 { return p.n; }

// sx[s * STAGE + r * SV + v] = x[m0 + r][k0 + 4 v .. + 3]; sw likewise for w[n0 + r] (stage s).
var<workgroup> sx: array<vec4<f16>, 2560>; // 2 * STAGE
var<workgroup> sw: array<vec4<f16>, 2560>;
// cs[s * 256 + r * 16 + c]: element (r, c) of the accumulator subgroup s is writing out.
var<workgroup> cs: array<f32, 256u * NSG>;

// Group g (0 .. 511) of a tile at k0: tile row g / 4, halves k0 + 8 (g % 4) .. + 7.
// x's group, zero past m or kp (xh's zero padding covers k .. kp).
fn x_tile(m0: u32, k0: u32, g: u32) -> mat2x4<f16> {
    let r = m0 + g / 4u;
    let c = k0 + 8u * (g % 4u);
    let kg = (p.k + 7u) / 8u;
    if (r >= p.m || c >= 8u * kg) { return mat2x4<f16>(); }
    return xh[r * kg + c / 8u];
}

fn w_tile(n0: u32, k0: u32, g: u32) -> mat2x4<f16> {
    return w_group16(n0 + g / 4u, k0 + 8u * (g % 4u));
}

// The groups thread t stages per k step: t, t + WG, t + 2 WG, t + 3 WG of each tile (named
// members rather than an array, so they stay in registers whether or not loops are unrolled).
struct Regs {
    x0: mat2x4<f16>, x1: mat2x4<f16>, x2: mat2x4<f16>, x3: mat2x4<f16>,
    w0: mat2x4<f16>, w1: mat2x4<f16>, w2: mat2x4<f16>, w3: mat2x4<f16>,
}

fn fetch(m0: u32, n0: u32, k0: u32, t: u32) -> Regs {
    var r: Regs;
    r.x0 = x_tile(m0, k0, t);
    r.w0 = w_tile(n0, k0, t);
    r.x1 = x_tile(m0, k0, t + WG);
    r.w1 = w_tile(n0, k0, t + WG);
    if (GPT == 4u) {
        r.x2 = x_tile(m0, k0, t + 2u * WG);
        r.w2 = w_tile(n0, k0, t + 2u * WG);
        r.x3 = x_tile(m0, k0, t + 3u * WG);
        r.w3 = w_tile(n0, k0, t + 3u * WG);
    }
    return r;
}

// Write group g of the x and w tiles into stage s.
fn put(s: u32, g: u32, xv: mat2x4<f16>, wv: mat2x4<f16>) {
    let o = s * STAGE + (g / 4u) * SV + 2u * (g % 4u);
    sx[o] = xv[0];
    sx[o + 1u] = xv[1];
    sw[o] = wv[0];
    sw[o + 1u] = wv[1];
}

fn put_all(s: u32, t: u32, r: Regs) {
    put(s, t, r.x0, r.w0);
    put(s, t + WG, r.x1, r.w1);
    if (GPT == 4u) {
        put(s, t + 2u * WG, r.x2, r.w2);
        put(s, t + 3u * WG, r.x3, r.w3);
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
    let qn = 16u * NJ * (sg / 2u);
    let ax = qm * SV; // first A row of the quadrant in a stage
    let bw = qn * SV; // first B column

    var c00 = coop_mat16x16<f32, C>();
    var c01 = coop_mat16x16<f32, C>();
    var c02 = coop_mat16x16<f32, C>();
    var c03 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>();
    var c11 = coop_mat16x16<f32, C>();
    var c12 = coop_mat16x16<f32, C>();
    var c13 = coop_mat16x16<f32, C>();
    var c20 = coop_mat16x16<f32, C>();
    var c21 = coop_mat16x16<f32, C>();
    var c22 = coop_mat16x16<f32, C>();
    var c23 = coop_mat16x16<f32, C>();
    var c30 = coop_mat16x16<f32, C>();
    var c31 = coop_mat16x16<f32, C>();
    var c32 = coop_mat16x16<f32, C>();
    var c33 = coop_mat16x16<f32, C>();

    var r = fetch(m0, n0, 0u, t);
    put_all(0u, t, r);
    workgroupBarrier();

    let steps = (p.k + BK - 1u) / BK;
    for (var ks = 0u; ks < steps; ks++) {
        let more = ks + 1u < steps; // uniform
        if (more) { r = fetch(m0, n0, (ks + 1u) * BK, t); } // in flight during the MMAs
        let base = (ks % 2u) * STAGE;
        for (var kv = 0u; kv < BK / 4u; kv += 4u) { // two 16-wide k slices: 4 vec4s each
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&sx[base + ax + kv], SV);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&sx[base + ax + 16u * SV + kv], SV);
            let a2 = coopLoadT<coop_mat16x16<f16, A>>(&sx[base + ax + 32u * SV + kv], SV);
            let a3 = coopLoadT<coop_mat16x16<f16, A>>(&sx[base + ax + 48u * SV + kv], SV);
            let b0 = coopLoad<coop_mat16x16<f16, B>>(&sw[base + bw + kv], SV);
            let b1 = coopLoad<coop_mat16x16<f16, B>>(&sw[base + bw + 16u * SV + kv], SV);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
            c20 = coopMultiplyAdd(a2, b0, c20);
            c21 = coopMultiplyAdd(a2, b1, c21);
            c30 = coopMultiplyAdd(a3, b0, c30);
            c31 = coopMultiplyAdd(a3, b1, c31);
            if (NJ == 4u) {
                let b2 = coopLoad<coop_mat16x16<f16, B>>(&sw[base + bw + 32u * SV + kv], SV);
                let b3 = coopLoad<coop_mat16x16<f16, B>>(&sw[base + bw + 48u * SV + kv], SV);
                c02 = coopMultiplyAdd(a0, b2, c02);
                c03 = coopMultiplyAdd(a0, b3, c03);
                c12 = coopMultiplyAdd(a1, b2, c12);
                c13 = coopMultiplyAdd(a1, b3, c13);
                c22 = coopMultiplyAdd(a2, b2, c22);
                c23 = coopMultiplyAdd(a2, b3, c23);
                c32 = coopMultiplyAdd(a3, b2, c32);
                c33 = coopMultiplyAdd(a3, b3, c33);
            }
        }
        if (more) { put_all(1u - ks % 2u, t, r); }
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
        let o02 = o00 + 32u;
        let o03 = o00 + 48u;
        let o10 = p.out_off + (r0 + 16u) * l + c0;
        let o11 = o10 + 16u;
        let o12 = o10 + 32u;
        let o13 = o10 + 48u;
        let o20 = p.out_off + (r0 + 32u) * l + c0;
        let o21 = o20 + 16u;
        let o22 = o20 + 32u;
        let o23 = o20 + 48u;
        let o30 = p.out_off + (r0 + 48u) * l + c0;
        let o31 = o30 + 16u;
        let o32 = o30 + 32u;
        let o33 = o30 + 48u;
        coopStoreT(c00, &out[o00], l);
        coopStoreT(c10, &out[o10], l);
        coopStoreT(c20, &out[o20], l);
        coopStoreT(c30, &out[o30], l);
        coopStoreT(c01, &out[o01], l);
        coopStoreT(c11, &out[o11], l);
        coopStoreT(c21, &out[o21], l);
        coopStoreT(c31, &out[o31], l);
        if (NJ == 4u) {
            coopStoreT(c02, &out[o02], l);
            coopStoreT(c12, &out[o12], l);
            coopStoreT(c22, &out[o22], l);
            coopStoreT(c32, &out[o32], l);
            coopStoreT(c03, &out[o03], l);
            coopStoreT(c13, &out[o13], l);
            coopStoreT(c23, &out[o23], l);
            coopStoreT(c33, &out[o33], l);
        }
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
    if (NJ == 4u) { // a constant: uniform
        coopStoreT(c02, &cs[pc], 16u);
        workgroupBarrier();
        emit(sg, lane, r0, c0 + 32u);
        workgroupBarrier();
        coopStoreT(c12, &cs[pc], 16u);
        workgroupBarrier();
        emit(sg, lane, r0 + 16u, c0 + 32u);
        workgroupBarrier();
        coopStoreT(c22, &cs[pc], 16u);
        workgroupBarrier();
        emit(sg, lane, r0 + 32u, c0 + 32u);
        workgroupBarrier();
        coopStoreT(c32, &cs[pc], 16u);
        workgroupBarrier();
        emit(sg, lane, r0 + 48u, c0 + 32u);
        workgroupBarrier();
        coopStoreT(c03, &cs[pc], 16u);
        workgroupBarrier();
        emit(sg, lane, r0, c0 + 48u);
        workgroupBarrier();
        coopStoreT(c13, &cs[pc], 16u);
        workgroupBarrier();
        emit(sg, lane, r0 + 16u, c0 + 48u);
        workgroupBarrier();
        coopStoreT(c23, &cs[pc], 16u);
        workgroupBarrier();
        emit(sg, lane, r0 + 32u, c0 + 48u);
        workgroupBarrier();
        coopStoreT(c33, &cs[pc], 16u);
        workgroupBarrier();
        emit(sg, lane, r0 + 48u, c0 + 48u);
        workgroupBarrier();
    }
}
