// page_select (between the scores and the top-k, PAGE_RANK_HEAD_NORM only): for each selecting
// row s and retrieval head r, turn the per-query-head keys page_select wrote,
// keys[((page_indptr[s] * upp + j) * n_ret + r) * group + g] (upp selection units a page;
// g < group = n_heads / n_kv_heads; the max bound over candidate j's logical pages in
// f32::total_cmp key order), into one key per
// candidate in the slot of g = 0, which page_select_topk reads at stride group. The score, as
// the CPU reference computes it (`head_norm_scores`): per head, m = the bound clamped to +-1e30
// (keys at or below key(-inf), and key 1 of a page outside the pool, read as -1e30),
// M = max over candidates, d = max(scale * (m - M), -1e30), x = d - log(sum_j exp(d)); per
// candidate, mx + log(sum_g exp(x_g - mx)) with mx = max_g x_g; with pin_first, candidate 0's
// key is 0xffffffff, above every score.
//
// One workgroup of 256 per (row, head): g = wg.x + wg.y * num_workgroups.x, s = g / n_ret,
// r = g % n_ret. Thread t owns candidates t, t + 256, ... throughout: per head, a max and a sum
// over the candidates by workgroup tree reductions, then each thread rewrites its candidates'
// keys of that head to x (f32 bits) in place; last, each thread combines its candidates' x over
// the heads and writes their keys. Any number of pages and any group size work (no workgroup
// memory beyond the 256-entry reduction). Rows whose page_indptr or head are out of range are
// left untouched (page_select_topk skips them too).
@group(0) @binding(0) var<uniform> p: PageSelectParams;
@group(0) @binding(1) var<storage, read> head_map: array<u32>;
@group(0) @binding(2) var<storage, read> page_indptr: array<u32>;
@group(0) @binding(3) var<storage, read> kv_len: array<u32>;
@group(0) @binding(4) var<storage, read> select_mask: array<u32>;
@group(0) @binding(5) var<storage, read_write> keys: array<u32>;

const LIM: f32 = 1e30;

var<workgroup> red: array<f32, 256>;

// The bound a key encodes, clamped to +-LIM; keys at or below key(-inf) read as -LIM.
fn key_bound(k: u32) -> f32 {
    if (k <= KEY_NEG_INF) { return -LIM; }
    let b = select(~k, k ^ 0x80000000u, (k >> 31u) == 1u);
    return clamp(bitcast<f32>(b), -LIM, LIM);
}

// Max (is_max) or sum of v over the workgroup; uniform control flow; every thread gets it.
fn reduce(t: u32, v: f32, is_max: bool) -> f32 {
    workgroupBarrier();
    red[t] = v;
    for (var o = 128u; o > 0u; o = o >> 1u) {
        workgroupBarrier();
        if (t < o) {
            let a = red[t];
            let b = red[t + o];
            red[t] = select(a + b, max(a, b), is_max);
        }
    }
    workgroupBarrier();
    return red[0];
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = lid.x;
    let gi = wg.x + wg.y * nwg.x;
    if (gi >= p.num_seqs * p.n_ret) { return; }
    let s = gi / p.n_ret;
    let r = gi % p.n_ret;
    if (select_mask[s] == 0u) { return; }
    var h = p.n_kv_heads;
    for (var x = 0u; x < p.n_kv_heads; x = x + 1u) {
        if (head_map[x] == r) { h = x; break; }
    }
    if (h == p.n_kv_heads) { return; }
    let group = p.n_heads / p.n_kv_heads;
    let upp = units_per_page();
    let start = page_indptr[s] * upp;
    let end = page_indptr[s + 1u] * upp;
    if (end < start || end * p.n_ret * group > arrayLength(&keys)) { return; }
    let cand = row_candidates(s, (end - start) / upp);
    let step = p.n_ret * group;
    let base = (start * p.n_ret + r) * group; // head g of candidate j: keys[base + j * step + g]

    for (var g = 0u; g < group; g = g + 1u) {
        var m = -LIM;
        for (var j = t; j < cand; j = j + 256u) { m = max(m, key_bound(keys[base + j * step + g])); }
        let top = reduce(t, m, true);
        var z = 0.0;
        for (var j = t; j < cand; j = j + 256u) {
            z = z + exp(max(p.scale * (key_bound(keys[base + j * step + g]) - top), -LIM));
        }
        let lz = log(reduce(t, z, false));
        for (var j = t; j < cand; j = j + 256u) {
            let at = base + j * step + g;
            let d = max(p.scale * (key_bound(keys[at]) - top), -LIM);
            keys[at] = bitcast<u32>(d - lz);
        }
    }
    for (var j = t; j < cand; j = j + 256u) {
        let at = base + j * step;
        var mx = bitcast<f32>(keys[at]);
        for (var g = 1u; g < group; g = g + 1u) { mx = max(mx, bitcast<f32>(keys[at + g])); }
        var sum = 0.0;
        for (var g = 0u; g < group; g = g + 1u) { sum = sum + exp(bitcast<f32>(keys[at + g]) - mx); }
        var key = f32_key(mx + log(sum));
        if (p.pin_first != 0u && j == 0u) { key = 0xffffffffu; }
        keys[at] = key;
    }
}
