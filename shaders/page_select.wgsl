// page_select (1 of 2, scores): Quest page scores for decode rows with select_mask[s] != 0.
//
// q `[num_seqs][n_heads][head_dim]`; summary `[page][n_ret][page_size / logical_page][2][head_dim]`
// (0 = min, 1 = max); sequence s owns page_table[page_indptr[s]..page_indptr[s+1]] in logical order.
// Candidates are its pages j = 0..n_pages-2 (the newest is always read by attention). Score of j
// for retrieval head r (KV head h with head_map[h] == r, query heads h*group..(h+1)*group,
// group = n_heads / n_kv_heads): max over its logical pages and those query heads of
// sum_c max(q_c * max_c, q_c * min_c), the sum taken sequentially over c exactly as the CPU
// reference does, so scores (and hence ties) are bitwise equal.
//
// Scores are written as u32 keys ordered like f32::total_cmp (key(-inf) = 0x007fffff; NaN
// scores are skipped by the max, as f32::max does; key 1 marks a page id outside the pool) to
// keys[(page_indptr[s] + j) * n_ret + r]. page_select_topk then picks the best k per row.
//
// One thread per (page-table entry e, retrieval head r), e * n_ret + r = wg.x * 256 + lid +
// wg.y * num_workgroups.x * 256; the entry's sequence is found by binary search in page_indptr.
// Entries of rows that are not selecting, or whose head/row data are out of range, are skipped.
@group(0) @binding(0) var<uniform> p: PageSelectParams;
@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>;        // head_dim % 4 == 0 (host checks)
@group(0) @binding(2) var<storage, read> summary: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> head_map: array<u32>;
@group(0) @binding(4) var<storage, read> page_indptr: array<u32>;
@group(0) @binding(5) var<storage, read> page_table: array<u32>;
@group(0) @binding(6) var<storage, read> select_mask: array<u32>;
@group(0) @binding(7) var<storage, read_write> keys: array<u32>;

const KEY_NEG_INF: u32 = 0x007fffffu;

// Monotone map of f32 to u32 in f32::total_cmp order.
fn f32_key(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    return select(b ^ 0x80000000u, ~b, (b >> 31u) == 1u);
}

// Key of the page at page_table[e] for retrieval head r; q0 = first element of the head group's q.
// Loads are 16-byte vectors; the sum still runs over c in order, one component at a time.
fn page_key(e: u32, r: u32, q0: u32, group: u32) -> u32 {
    let page = page_table[e];
    if (page >= p.num_pages) { return 1u; }
    let hv = p.head_dim / 4u;
    let lpp = p.page_size / p.logical_page;
    var best = KEY_NEG_INF;
    for (var l = 0u; l < lpp; l = l + 1u) {
        let at = ((page * p.n_ret + r) * lpp + l) * 2u * hv;
        for (var g = 0u; g < group; g = g + 1u) {
            let qb = q0 / 4u + g * hv;
            let q4 = q[qb];
            let m = max(q4 * summary[at + hv], q4 * summary[at]);
            var sc = m.x + m.y;
            sc = sc + m.z;
            sc = sc + m.w;
            for (var c = 1u; c < hv; c = c + 1u) {
                let qc = q[qb + c];
                let t = max(qc * summary[at + hv + c], qc * summary[at + c]);
                sc = sc + t.x;
                sc = sc + t.y;
                sc = sc + t.z;
                sc = sc + t.w;
            }
            if (sc == sc) { best = max(best, f32_key(sc)); }
        }
    }
    return best;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let gi = (wg.x + wg.y * nwg.x) * 256u + lid.x;
    let ns = p.num_seqs;
    let e = gi / p.n_ret;
    let r = gi % p.n_ret;
    if (e >= page_indptr[ns] || e >= arrayLength(&page_table)) { return; }
    // The sequence owning entry e: the last s with page_indptr[s] <= e.
    var lo = 0u;
    var hi = ns;
    while (hi - lo > 1u) {
        let mid = (lo + hi) / 2u;
        if (page_indptr[mid] <= e) { lo = mid; } else { hi = mid; }
    }
    let s = lo;
    if (select_mask[s] == 0u) { return; }
    let start = page_indptr[s];
    let end = page_indptr[s + 1u];
    if (e < start || e + 1u >= end) { return; } // not a candidate (the newest page is not one)
    var h = p.n_kv_heads;
    for (var x = 0u; x < p.n_kv_heads; x = x + 1u) {
        if (head_map[x] == r) { h = x; break; }
    }
    if (h == p.n_kv_heads || gi >= arrayLength(&keys)) { return; }
    let group = p.n_heads / p.n_kv_heads;
    keys[gi] = page_key(e, r, (s * p.n_heads + h * group) * p.head_dim, group);
}
