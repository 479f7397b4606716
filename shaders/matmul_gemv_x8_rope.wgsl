// matmul_gemv_x8_rope: a batch-1 decode step's q|k|v GEMV (matmul_gemv_x8's, row for row: the
// products of shaders/gemv_x8_row.wgsl) with rope_append_kv16 in its epilogue, so the step does
// not dispatch the rotation and the KV store separately (Backend::matmul_rope_append_kv; the
// host sends one token, m == 1, 16-bit pools: KV_KIND, prepended by shaders.rs, 1 = f16, 2 =
// bf16; head_dim % 8 == 0; n = (n_heads + 2 n_kv_heads) head_dim). It writes what the two ops
// would: out (q|k|v unrotated, as the GEMV stores it), q (rotated), the K/V rows and the page
// summary (shaders/rope16_quad.wgsl, the same text rope_append_kv16 runs, so every value is the
// same bit for bit).
//
// A rotation needs dims j, j + 1, hh + j and hh + j + 1 of a head (hh = head_dim / 2, j = 2u:
// quad u), which the plain GEMV's workgroups of 8 consecutive rows never hold together. So
// workgroup g (of n / 8) takes 8 rows by quads: with qw = head_dim / 8 workgroups a query head,
// g < n_heads qw takes quads 2 (g % qw) and 2 (g % qw) + 1 of query head g / qw (rows 0-3 and
// 4-7 of the workgroup); the rest, g' = g - n_heads qw, quad g' % (head_dim / 4) of KV head g' /
// (head_dim / 4): its four k rows (0-3) and the same four v rows (4-7). Subgroup s computes
// rows s, s + num_subgroups, ... of the 8 (any subgroup size), lane 0 stores each into out and
// into workgroup memory; after a barrier, threads 0 and 1 (query workgroups) or thread 0 (KV)
// rotate and store their quad.

const ROWS: u32 = 8u;

@group(0) @binding(0) var<uniform> p: MatmulRopeParams;
// Bindings 1-4 (xq, w, bias, out): gemv_x8_row.wgsl and the weight snippet.
@group(0) @binding(5) var<storage, read> positions: array<u32>;
@group(0) @binding(6) var<storage, read> slots: array<u32>;
@group(0) @binding(7) var<storage, read> ring_slots: array<u32>;
@group(0) @binding(8) var<storage, read> inv_freq: array<f32>;
@group(0) @binding(9) var<storage, read> head_map: array<u32>;
@group(0) @binding(10) var<storage, read_write> q: array<f32>;
@group(0) @binding(11) var<storage, read_write> k: array<u32>;
@group(0) @binding(12) var<storage, read_write> v: array<u32>;
@group(0) @binding(13) var<storage, read_write> sk: array<u32>;
@group(0) @binding(14) var<storage, read_write> sv: array<u32>;
@group(0) @binding(15) var<storage, read_write> summary: array<f32>;

// The workgroup's 8 rows as out holds them.
var<workgroup> vals: array<f32, 8>;

// Row r (0..8) of workgroup g: (see the header) the quad's dims in order j, j + 1, hh + j,
// hh + j + 1, for the workgroup's first quad / the k rows (r < 4) and its second quad / the v
// rows (r >= 4).
fn rope_row(g: u32, r: u32) -> u32 {
    let hd = p.head_dim;
    let qw = hd / 8u;
    let d = (r % 4u) / 2u * (hd / 2u) + r % 2u;
    if (g < p.n_heads * qw) {
        return (g / qw) * hd + 2u * (2u * (g % qw) + r / 4u) + d;
    }
    let gk = g - p.n_heads * qw;
    let quads = hd / 4u;
    let kh = gk / quads;
    let region = select(p.n_heads, p.n_heads + p.n_kv_heads, r >= 4u);
    return (region + kh) * hd + 2u * (gk % quads) + d;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32,
        @builtin(subgroup_invocation_id) lane: u32, @builtin(subgroup_size) sgs: u32,
        @builtin(subgroup_id) sg: u32, @builtin(num_subgroups) nsg: u32) {
    let g = wg.x + wg.y * nwg.x;
    // Workgroups past the rows (a 2-D grid's padding): uniform, before the barrier.
    if (g * ROWS >= p.n) { return; }
    for (var rr = sg; rr < ROWS; rr += nsg) {
        let row = rope_row(g, rr);
        let x = gemv_x8_row(row, lane, sgs);
        if (lane == 0u) {
            out[p.out_off + row] = x;
            vals[rr] = x;
        }
    }
    workgroupBarrier();
    let qw = p.head_dim / 8u;
    let v4 = vec4(vals[0], vals[1], vals[2], vals[3]);
    let w4 = vec4(vals[4], vals[5], vals[6], vals[7]);
    if (g < p.n_heads * qw) {
        if (li < 2u) { rope_q_quad(0u, g / qw, 2u * (g % qw) + li, select(v4, w4, li == 1u)); }
    } else if (li == 0u) {
        let gk = g - p.n_heads * qw;
        let quads = p.head_dim / 4u;
        rope_kv_quad(0u, gk / quads, gk % quads, v4, w4);
    }
}
