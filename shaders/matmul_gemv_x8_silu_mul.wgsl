// matmul_gemv_x8_silu_mul: a batch-1 decode step's gate|up GEMV (matmul_gemv_x8's, row for row:
// the products of shaders/gemv_x8_row.wgsl) with silu_mul_x8 in its epilogue, so the step does
// not dispatch silu_mul separately (Backend::matmul_silu_mul; the host sends m == 1, n = 2 dim,
// dim % 32 == 0, a dense out, no accumulate). It writes what the two ops would: out (gate|up, as
// the GEMV stores it) and act, silu(gate) * up as one row of x8 digits (DType::X8, quantized by
// shaders/x8_store.wgsl, the text silu_mul_x8 runs; the same silu expression), bit for bit.
//
// A block of x8 digits is 32 elements, so workgroup g (of dim / 32) takes ROWS = 64 rows: gate
// rows 32g .. 32g + 31 (0-31) and the up rows dim + 32g .. (32-63). Subgroup s computes rows s,
// s + num_subgroups, ... (any subgroup size); lane 0 stores each into out and into workgroup
// memory; after a barrier threads 0-7 take elements 4t .. 4t + 3 of the block and every thread
// runs x8_store (its barriers), which quantizes them into block g of act.

const ROWS: u32 = 64u;

@group(0) @binding(0) var<uniform> p: MatmulParams;
// Bindings 1-4 (xq, w, bias, out): gemv_x8_row.wgsl and the weight snippet.
@group(0) @binding(5) var<storage, read_write> act: array<u32>;

fn x8_put(i: u32, v: u32) { act[i] = v; }

// The workgroup's 64 rows as out holds them.
var<workgroup> vals: array<f32, 64>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_invocation_id) lane: u32, @builtin(subgroup_size) sgs: u32,
        @builtin(subgroup_id) sg: u32, @builtin(num_subgroups) nsg: u32) {
    let g = wg.x + wg.y * nwg.x;
    let dim = p.n / 2u;
    // Workgroups past the blocks (a 2-D grid's padding): uniform, before the barriers.
    if (g * 32u >= dim) { return; }
    for (var rr = sg; rr < ROWS; rr += nsg) {
        let row = select(32u * g + rr, dim + 32u * g + rr - 32u, rr >= 32u);
        let x = gemv_x8_row(row, lane, sgs);
        if (lane == 0u) {
            out[p.out_off + row] = x;
            vals[rr] = x;
        }
    }
    workgroupBarrier();
    let live = li < 8u;
    var v = vec4<f32>(0.0);
    if (live) {
        let gate = vec4(vals[4u * li], vals[4u * li + 1u], vals[4u * li + 2u], vals[4u * li + 3u]);
        let up = vec4(vals[32u + 4u * li], vals[33u + 4u * li], vals[34u + 4u * li], vals[35u + 4u * li]);
        v = gate / (1.0 + exp(-gate)) * up;
    }
    x8_store(li, g, v, live, dim / 32u);
}
