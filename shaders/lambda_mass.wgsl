// lambda_mass (calibration): for one sequence whose n_tokens queries are its last positions, the
// softmax mass each query head puts outside the Lambda mask: keys sink <= k < pos + 1 - local.
// Dense: every head reads the retrieval pool k [page][n_kv_heads][page_size][head_dim] (index
// head_map[kv] without the streaming bit), pages page_table[page_indptr[0]..], kv_len[0] tokens.
// q [n_tokens][n_heads][head_dim]; out [n_tokens][n_heads].
// One workgroup of 128 threads per (query row, head), row = wg.x + wg.y * nwg.x; thread t takes
// keys t, t + 128, ...; two passes over keys 0..=pos (max, then total and outside sums of
// e^(s - max)), each reduced through workgroup memory. Correctness first: scores are recomputed.
// More queries than tokens (invalid) writes 0.

@group(0) @binding(0) var<uniform> p: LambdaMassParams;
@group(0) @binding(1) var<storage, read> q: array<f32>;
// kv_k_pool (any KV dtype) comes from the KV snippet (src/backend/wgpu/shaders.rs).
@group(0) @binding(2) var<storage, read> k_pool: array<KV_EL>;
@group(0) @binding(3) var<storage, read> head_map: array<u32>;
@group(0) @binding(4) var<storage, read> page_indptr: array<u32>;
@group(0) @binding(5) var<storage, read> page_table: array<u32>;
@group(0) @binding(6) var<storage, read> kv_len: array<u32>;
@group(0) @binding(7) var<storage, read_write> out: array<f32>;

const WG: u32 = 128u;

var<workgroup> qs: array<f32, 256>;
var<workgroup> red: array<f32, 128>;
var<workgroup> red2: array<f32, 128>;

// Scaled score of key position k, or NEG_INF where the page table has no page for it.
fn score(hi: u32, k: u32) -> f32 {
    let ps = p.page_size;
    let at = page_indptr[0] + k / ps;
    if (at >= page_indptr[1] || at >= arrayLength(&page_table)) { return NEG_INF; }
    let page = page_table[at];
    if (page >= p.num_pages) { return NEG_INF; }
    let base = ((page * p.n_kv_heads + hi) * ps + k % ps) * p.head_dim;
    var s = 0.0;
    for (var d = 0u; d < p.head_dim; d = d + 1u) { s = s + qs[d] * kv_k_pool(base + d); }
    return s;
}

fn reduce_max(t: u32) {
    for (var w = WG / 2u; w > 0u; w = w >> 1u) {
        if (t < w) { red[t] = max(red[t], red[t + w]); }
        workgroupBarrier();
    }
}

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = lid.x;
    let row = wg.x + wg.y * nwg.x;
    let n = p.n_tokens;
    let nh = p.n_heads;
    if (row >= n * nh) { return; }
    let len = kv_len[0];
    if (len < n) {
        if (t == 0u) { out[row] = 0.0; }
        return;
    }
    let tq = row / nh;
    let h = row % nh;
    let hi = head_map[h / (nh / p.n_kv_heads)] & ~STREAMING_BIT;
    let pos = len - n + tq;
    let hd = p.head_dim;
    for (var d = t; d < hd; d = d + WG) { qs[d] = q[(tq * nh + h) * hd + d] * p.scale; }
    workgroupBarrier();

    var mx = NEG_INF;
    for (var k = t; k <= pos; k = k + WG) { mx = max(mx, score(hi, k)); }
    red[t] = mx;
    workgroupBarrier();
    reduce_max(t);
    let m = red[0];
    workgroupBarrier();

    var total = 0.0;
    var outside = 0.0;
    for (var k = t; k <= pos; k = k + WG) {
        let s = score(hi, k);
        if (s > NEG_INF) {
            let e = exp(s - m);
            total = total + e;
            if (k >= p.sink && k + p.local <= pos) { outside = outside + e; }
        }
    }
    red[t] = total;
    red2[t] = outside;
    workgroupBarrier();
    for (var w = WG / 2u; w > 0u; w = w >> 1u) {
        if (t < w) {
            red[t] = red[t] + red[t + w];
            red2[t] = red2[t] + red2[t + w];
        }
        workgroupBarrier();
    }
    if (t == 0u) { out[row] = select(0.0, red2[0] / red[0], red[0] > 0.0); }
}
