// antidiagonal_score: block-sparse prefill's antidiagonal estimate (XAttention, stride 8; the
// contract: Backend::antidiagonal_score in src/backend/mod.rs).
//
// One workgroup of 256 per (query block b, KV head): item = wg.x + wg.y * num_workgroups.x,
// b = item / n_kv_heads; streaming heads and blocks without candidates return. Rows are
// (query head g of the KV head's group, row group rg), head-major, at most MAX_ROWS (the host
// checks group * 16). z(row, kg) = scale / 8 * sum_{i<8} q[q_row + 8 rg + 7 - i][g] . k[8 kg + i]
// (keys of retrieval head r read through the sequence's page table, 16 bytes at a time; any KV
// dtype by the KV snippet's kv4_k_pool; head_dim % 4 == 0, the host checks), for the row's
// visible key groups kg < (first + 8 rg) / 8.
// Pass 0, per row in turn: thread t takes key groups t, t + 256, ... keeping its max and its sum
// of exp(z - max); a workgroup reduction (fixed tree) gives the row's max m and sum l (stats).
// Pass 1, CC candidates (pages j + 1) at a time: thread t takes candidate t % CC and every
// (WG / CC)-th row from t / CC, recomputes z over the page's visible key groups and sums
// exp(z - m) / l; the WG / CC partials of a candidate are added in a fixed order and written.
// The row's last entry (the tail's) is written 0. z is computed twice.
//
// Lavapipe (llvmpipe) stops a loop after 65,535 iterations counted over the whole invocation
// (its loop limiter), silently: the vector loads (8 * head_dim / 4 iterations a call of zval)
// and the work spread over the workgroup keep CI's sizes below it; real GPUs have no such
// limit, but lavapipe gives wrong scores for long contexts.

@group(0) @binding(0) var<uniform> p: AntidiagonalParams;
@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>;
// kv4_k_pool / kv8_k_pool (any KV dtype) come from the KV snippet (src/backend/wgpu/shaders.rs).
@group(0) @binding(2) var<storage, read> k_pool: array<KV_K4>;
@group(0) @binding(3) var<storage, read> head_map: array<u32>;
@group(0) @binding(4) var<storage, read> page_indptr: array<u32>;
@group(0) @binding(5) var<storage, read> page_table: array<u32>;
@group(0) @binding(6) var<storage, read> kv_len: array<u32>;
@group(0) @binding(7) var<storage, read> info: array<u32>;
@group(0) @binding(8) var<storage, read> v_indptr: array<u32>;
@group(0) @binding(9) var<storage, read_write> scores: array<f32>;

const WG: u32 = 256u;
const MAX_ROWS: u32 = 1024u;
const CC: u32 = 16u;  // candidates per chunk of pass 1

var<workgroup> red: array<vec2<f32>, 256>;         // (max, sum) partials of one row
var<workgroup> stats: array<vec2<f32>, MAX_ROWS>;  // (m, l) per row

// The block (workgroup-uniform, set once): its first q row, first position, page-table start,
// retrieval head, and the end of the keys it may read.
var<private> b_q_row: u32;
var<private> b_first: u32;
var<private> b_pt0: u32;
var<private> b_r: u32;
var<private> b_kend: u32;

// z of key group kg for query head h and row group rg (0 where the page id lies outside the pool).
fn zval(h: u32, rg: u32, kg: u32) -> f32 {
    let ps = p.page_size;
    let hd = p.head_dim;
    let pos = 8u * kg;
    let page = page_table[b_pt0 + pos / ps];
    let ok = page < p.num_pages;
    let base = select(0u, ((page * p.n_ret + b_r) * ps + pos % ps) * hd, ok);
    var acc = 0.0;
    for (var i = 0u; i < 8u; i = i + 1u) {
        let qb = ((b_q_row + 8u * rg + 7u - i) * p.n_heads + h) * hd;
        let kb = base + i * hd;
        var s = vec4(0.0);
        for (var d = 0u; d < hd; d = d + 4u) { s = s + q[(qb + d) / 4u] * kv4_k_pool(kb + d); }
        acc = acc + (s.x + s.y) + (s.z + s.w);
    }
    return select(0.0, acc * (p.scale * 0.125), ok);
}

// The row's visible key groups (within the block's readable keys).
fn visible(rg: u32) -> u32 {
    return min((b_first + 8u * rg) / 8u, b_kend / 8u);
}

// Long (about 70 lines) on purpose: the two passes share the block's geometry and the row
// statistics in workgroup memory, and the body reads in the order it runs.
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = lid.x;
    let item = wg.x + wg.y * nwg.x;
    if (item >= p.n_blocks * p.n_kv_heads) { return; }
    let b = item / p.n_kv_heads;
    let kvh = item % p.n_kv_heads;
    let hm = head_map[kvh];
    if ((hm & STREAMING_BIT) != 0u) { return; }
    let at = v_indptr[b];
    let e = v_indptr[b + 1u];
    let seq = info[4u * b + 3u];
    let rows = info[4u * b + 1u];
    if (e < at + 2u || seq >= p.num_seqs || info[4u * b] + rows > p.n_tokens || e * p.n_ret > arrayLength(&scores)) { return; }
    let cand = e - at - 1u;
    let groups = rows / 8u;
    let group = p.n_heads / p.n_kv_heads;
    let pt0 = page_indptr[seq];
    let pt1 = min(page_indptr[seq + 1u], arrayLength(&page_table));
    let kend = select(0u, min(kv_len[seq], (pt1 - pt0) * p.page_size), pt1 > pt0);
    b_q_row = info[4u * b];
    b_first = info[4u * b + 2u];
    b_pt0 = pt0;
    b_r = hm;
    b_kend = kend;
    let nrow = group * 16u;

    // Pass 0: (m, l) per row.
    for (var row = 0u; row < nrow; row = row + 1u) {
        let g = row / 16u;
        let rg = row % 16u;
        let vis = select(0u, visible(rg), rg < groups);
        var m = NEG_INF;
        var l = 0.0;
        for (var kg = t; kg < vis; kg = kg + WG) {
            let z = zval(kvh * group + g, rg, kg);
            let mn = max(m, z);
            l = l * exp(m - mn) + exp(z - mn);
            m = mn;
        }
        red[t] = vec2(m, l);
        for (var w = WG / 2u; w > 0u; w = w >> 1u) {
            workgroupBarrier();
            if (t < w) {
                let a = red[t];
                let c = red[t + w];
                let mx = max(a.x, c.x);
                red[t] = vec2(mx, a.y * exp(a.x - mx) + c.y * exp(c.x - mx));
            }
        }
        workgroupBarrier();
        if (t == 0u) { stats[row] = red[0]; }
        workgroupBarrier();
    }

    // Pass 1: candidates in chunks of CC; thread t takes candidate c0 + t % CC (page + 1, key
    // groups (j + 1) ps / 8 ..) for rows t / CC, t / CC + WG / CC, ...; the partials are summed in
    // thread order per candidate.
    let kpp = p.page_size / 8u;
    for (var c0 = 0u; c0 <= cand; c0 = c0 + CC) {
        let j = c0 + t % CC;
        var acc = 0.0;
        if (j < cand) {
            let k0 = (j + 1u) * kpp;
            for (var row = t / CC; row < nrow; row = row + WG / CC) {
                let g = row / 16u;
                let rg = row % 16u;
                let st = stats[row];
                let vis = select(0u, visible(rg), rg < groups && st.y > 0.0);
                var a = 0.0;
                for (var kg = k0; kg < min(k0 + kpp, vis); kg = kg + 1u) {
                    a = a + exp(zval(kvh * group + g, rg, kg) - st.x);
                }
                acc = acc + select(0.0, a / st.y, vis > k0);
            }
        }
        red[t] = vec2(acc, 0.0);
        workgroupBarrier();
        if (t < CC && j <= cand) {
            var s = 0.0;
            for (var x = t; x < WG; x = x + CC) { s = s + red[x].x; }
            scores[(at + j) * p.n_ret + hm] = s;
        }
        workgroupBarrier();
    }
}
