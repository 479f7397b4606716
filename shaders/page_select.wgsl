// page_select (1 of 2, scores): Quest page scores for decode rows with select_mask[s] != 0.
//
// q `[num_seqs][n_heads][head_dim]`; summary `[page][n_ret][page_size / logical_page][2][head_dim]`
// (0 = min, 1 = max); sequence s owns page_table[page_indptr[s]..page_indptr[s+1]] in logical order.
// Candidates are selection units (select_units.wgsl: sel_unit tokens, 0 the page; upp a page):
// candidate j is unit j % upp of page j / upp; the newest page (or unit) is always read by
// attention, never a candidate. Score of j for retrieval head r (KV head h with head_map[h] == r,
// query heads h*group..(h+1)*group, group = n_heads / n_kv_heads): max over the unit's logical
// pages and those query heads of
// sum_c max(q_c * max_c, q_c * min_c) (p.bound_shrink 0; see `term` otherwise), the sum taken
// sequentially over c exactly as the CPU reference does, so scores (and hence ties) are bitwise
// equal.
//
// Scores are written as u32 keys ordered like f32::total_cmp (key(-inf) = 0x007fffff; NaN
// scores are skipped by the max, as f32::max does; key 1 marks a page id outside the pool).
// rank PAGE_RANK_MAX (0): the max over the item's query heads goes to keys[(page_indptr[s] * upp
// + j) * n_ret + r] (with pin_first, candidate 0's key is 0xffffffff, above every score); then
// page_select_topk picks the best k per row. rank PAGE_RANK_HEAD_NORM (1): each query head g's own
// key goes to keys[((page_indptr[s] * upp + j) * n_ret + r) * group + g]; page_select_norm turns them
// into one key per item, in the slot of g = 0, which page_select_topk reads at stride group.
//
// Items (unit entry u = e * upp + x of page-table entry e, retrieval head r), numbered
// u * n_ret + r, go 256 / gpt to a
// workgroup (workgroup id wg.x + wg.y * num_workgroups.x), gpt = min(group, 64) threads per item,
// each scoring some of the item's query heads; the item's key is their max (atomicMax in
// workgroup memory, exact). The entry's sequence is found by binary search in page_indptr.
// Entries of rows that are not selecting, or whose head/row data are out of range, are skipped.
@group(0) @binding(0) var<uniform> p: PageSelectParams;
@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>;        // head_dim % 4 == 0 (host checks)
@group(0) @binding(2) var<storage, read> summary: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> head_map: array<u32>;
@group(0) @binding(4) var<storage, read> page_indptr: array<u32>;
@group(0) @binding(5) var<storage, read> page_table: array<u32>;
@group(0) @binding(6) var<storage, read> kv_len: array<u32>;
@group(0) @binding(7) var<storage, read> select_mask: array<u32>;
@group(0) @binding(8) var<storage, read_write> keys: array<u32>;

// KEY_NEG_INF and f32_key: common.wgsl.

// Term c of a score for the 4 dims of vec4 c (summary row at): max(q_c * max_c, q_c * min_c),
// or with p.bound_shrink > 0 the box shrunk toward its centre, q_c * mid_c + |q_c| * ((1 -
// bound_shrink) * half_c), the CPU reference's order of operations (a GPU may fuse them: the
// parity test allows ulps there, not with bound_shrink 0).
fn term(qb: u32, at: u32, hv: u32, c: u32) -> vec4<f32> {
    let qc = q[qb + c];
    let hi = summary[at + hv + c];
    let lo = summary[at + c];
    if (p.bound_shrink == 0.0) { return max(qc * hi, qc * lo); }
    let w = 1.0 - p.bound_shrink;
    return qc * ((hi + lo) * 0.5) + abs(qc) * (w * ((hi - lo) * 0.5));
}

// sc plus the 4 components of t, one at a time; the first term starts the sum (t.x + t.y, so a
// score of -0 stays -0, as in the CPU reference).
fn add4(sc: f32, t: vec4<f32>, first: bool) -> f32 {
    var s = select(sc + t.x, t.x, first);
    s = s + t.y;
    s = s + t.z;
    s = s + t.w;
    return s;
}

// Key of query head q0 / head_dim (one of the group) against logical pages l0..l0+n of the page
// at page_table[e], retrieval head r: their max. Loads are 16-byte vectors; the sum still runs over c
// in order, one component at a time. Four vec4 terms are loaded together (12 loads in flight)
// before they are added, so a thread waits on memory head_dim / 16 times per logical page, not
// head_dim / 4.
fn head_key(page: u32, r: u32, q0: u32, l0: u32, n: u32) -> u32 {
    let hv = p.head_dim / 4u;
    let lpp = p.page_size / p.logical_page;
    let qb = q0 / 4u;
    var best = KEY_NEG_INF;
    for (var l = l0; l < l0 + n; l = l + 1u) {
        let at = ((page * p.n_ret + r) * lpp + l) * 2u * hv;
        var sc = 0.0;
        var c = 0u;
        for (; c + 4u <= hv; c = c + 4u) {
            let t0 = term(qb, at, hv, c);
            let t1 = term(qb, at, hv, c + 1u);
            let t2 = term(qb, at, hv, c + 2u);
            let t3 = term(qb, at, hv, c + 3u);
            sc = add4(sc, t0, c == 0u);
            sc = add4(sc, t1, false);
            sc = add4(sc, t2, false);
            sc = add4(sc, t3, false);
        }
        for (; c < hv; c = c + 1u) { sc = add4(sc, term(qb, at, hv, c), c == 0u); }
        if (sc == sc) { best = max(best, f32_key(sc)); }
    }
    return best;
}

// Per workgroup item (entry, head) the max key over its query heads.
var<workgroup> item_key: array<atomic<u32>, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let group = p.n_heads / p.n_kv_heads;
    let gpt = clamp(group, 1u, 64u); // threads per item, each taking query heads g, g + gpt, ...
    let ipw = 256u / gpt;            // items per workgroup
    let li = lid.x / gpt;
    let gt = lid.x % gpt;
    let gi = (wg.x + wg.y * nwg.x) * ipw + li; // item = (e * upp + x) * n_ret + r
    let ns = p.num_seqs;
    let upp = units_per_page();
    let lpu = p.page_size / upp / p.logical_page; // logical pages a unit
    let e = gi / p.n_ret / upp;
    let x = gi / p.n_ret % upp;
    let r = gi % p.n_ret;
    let norm = p.rank == 1u;
    let width = select(1u, group, norm); // keys per item
    var key = 0u; // 0: no key (ranks below every real key; only the max is kept)
    var write = false;
    // Zeroed here, not left to wgpu's zero-fill of workgroup memory (docs/backends.md).
    if (gt == 0u && li < ipw) { atomicStore(&item_key[li], 0u); }
    workgroupBarrier();
    if (li < ipw && e < page_indptr[ns] && e < arrayLength(&page_table) && (gi + 1u) * width <= arrayLength(&keys)) {
        // The sequence owning entry e: the last s with page_indptr[s] <= e.
        var lo = 0u;
        var hi = ns;
        while (hi - lo > 1u) {
            let mid = (lo + hi) / 2u;
            if (page_indptr[mid] <= e) { lo = mid; } else { hi = mid; }
        }
        let s = lo;
        var h = p.n_kv_heads;
        for (var x = 0u; x < p.n_kv_heads; x = x + 1u) {
            if (head_map[x] == r) { h = x; break; }
        }
        // A candidate (select_units.wgsl) of a selecting row, with a retrieval head.
        let a = page_indptr[s];
        let b = page_indptr[s + 1u];
        if (select_mask[s] != 0u && e >= a && b >= a && (e - a) * upp + x < row_candidates(s, b - a) && h < p.n_kv_heads) {
            write = gt == 0u && !norm;
            let page = page_table[e];
            for (var g = gt; g < group; g = g + gpt) {
                var hk = 1u;
                if (page < p.num_pages) { hk = head_key(page, r, (s * p.n_heads + h * group + g) * p.head_dim, x * lpu, lpu); }
                if (norm) { keys[gi * group + g] = hk; }
                key = max(key, hk);
            }
            if (p.pin_first != 0u && e == page_indptr[s] && x == 0u) { key = 0xffffffffu; }
        }
    }
    if (li < ipw) { atomicMax(&item_key[li], key); }
    workgroupBarrier();
    if (write) { keys[gi] = atomicLoad(&item_key[li]); }
}
