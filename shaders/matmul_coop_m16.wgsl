// matmul_coop_m16 (tensor-core batched decode, 2 <= m <= 16, on the adapters of matmul_coop;
// ops_matmul.rs decides): out[m][n] = x[m][k] . w[n][k]^T (+ bias[n]), f16 operands (rounded as
// shaders/coop_common.wgsl states), f32 accumulation. Same layout and bindings as matmul_coop.
//
// All m rows of x are one 16-row A fragment (rows m.. are staged as zeros), so each weight is
// read exactly once per call. A decode matmul is bound by reading the weights, so the schedule
// is for memory parallelism, not for reuse: one workgroup of WG = 128 threads = 4 subgroups of
// 32 covers just 16 weight rows n0 .. n0 + 15 (n / 16 workgroups: 256 for a 4096-row matrix,
// against 64 for 64-row tiles), and splits k four ways: the k axis is cut into chunks of BK =
// 64, and subgroup s takes chunks s, s + 4, s + 8, ... (at any moment the workgroup reads 4 * BK
// consecutive weights of each row). Each subgroup stages its own chunk — 16 x rows and 16 weight
// rows of 64, four 8-element groups of each per lane — into its own patch of workgroup memory as
// f16 (SA = 72 halves per row: 144 bytes, 16-byte aligned as coopLoad needs), then multiplies it
// as four 16-wide k slices into its one f32 accumulator (A = x rows, row-major, coopLoadT; B =
// w^T, element (kk, nn) = ws[nn * SA + kk], column-major, coopLoad). Epilogue: the four partial
// accumulators go to workgroup memory (coopStoreT) and thread t adds elements t and t + 128
// over the subgroups, plus the bias, and writes them if in range.
// Workgroup memory: 4 x (2 x 2.25 KiB) staging + 4 KiB partials = 22 KiB (the host checks the
// adapter's limit). Every subgroup runs the same number of chunk steps (chunks past k stage
// zeros), so every barrier is reached by the whole workgroup.

const BK: u32 = 64u;
const SA: u32 = 72u; // f16 per staged row: BK + 8
const PATCH: u32 = 1152u; // 16 * SA: one subgroup's staged tile of one operand
const WG: u32 = 128u;
const NSG: u32 = 4u; // subgroups per workgroup (WG / 32)

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
// w (binding 2) is declared by the weight snippet.
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
// The weight matrix's geometry, read by the quantized formats' decoders (shaders/quant_weights.wgsl).
fn w_cols() -> u32 { return p.k; }
fn w_rows() -> u32 { return p.n; }

// xs[s * PATCH + r * SA + kk] = x[r][k0 + kk], ws[s * PATCH + r * SA + kk] = w[n0 + r][k0 + kk]
// for subgroup s's current chunk k0 (f16).
var<workgroup> xs: array<f16, 4608>; // NSG * PATCH
var<workgroup> ws: array<f16, 4608>;
// part[s * 256 + r * 16 + c]: subgroup s's partial sum of out[r][n0 + c].
var<workgroup> part: array<f32, 1024>;

// Stage 8-element group g (0 .. 127) of subgroup s's chunk at k0: row g / 8, k offset 8 (g % 8).
fn stage(s: u32, n0: u32, k0: u32, g: u32) {
    let r = g / 8u;
    let kc = 8u * (g % 8u);
    let xv = x_group(r, k0 + kc);
    let wv = w_group(n0 + r, k0 + kc);
    let o = s * PATCH + r * SA + kc;
    for (var e = 0u; e < 4u; e++) {
        xs[o + e] = x16(xv[0][e]);
        xs[o + 4u + e] = x16(xv[1][e]);
        ws[o + e] = w16(wv[0][e]);
        ws[o + 4u + e] = w16(wv[1][e]);
    }
}

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32, @builtin(subgroup_id) sg: u32,
        @builtin(subgroup_invocation_id) lane: u32) {
    let n0 = (wg.x + wg.y * nwg.x) * 16u;
    if (n0 >= p.n) { return; } // whole workgroup: barriers stay uniform
    let chunks = (p.k + BK - 1u) / BK;
    let steps = (chunks + NSG - 1u) / NSG;
    let base = sg * PATCH;

    var acc = coop_mat16x16<f32, C>();
    for (var i = 0u; i < steps; i++) {
        let k0 = (i * NSG + sg) * BK; // past k on the last step of some subgroups: zeros
        for (var g = lane; g < 128u; g += 32u) {
            stage(sg, n0, k0, g);
        }
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk += 16u) {
            let a = coopLoadT<coop_mat16x16<f16, A>>(&xs[base + kk], SA);
            let b = coopLoad<coop_mat16x16<f16, B>>(&ws[base + kk], SA);
            acc = coopMultiplyAdd(a, b, acc);
        }
        workgroupBarrier(); // the patches are free for the next step
    }

    coopStoreT(acc, &part[sg * 256u], 16u);
    workgroupBarrier();
    for (var e = t; e < 256u; e += WG) {
        let r = e / 16u;
        let c = n0 + e % 16u;
        if (r < p.m && c < p.n) {
            var s = 0.0;
            for (var q = 0u; q < NSG; q++) { s += part[q * 256u + e]; }
            if (p.has_bias != 0u) { s += bias[c]; }
            out[p.out_off + r * p.ldo + c] = s;
        }
    }
}
