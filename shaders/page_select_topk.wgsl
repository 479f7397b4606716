// page_select (2 of 2, top-k): for each selecting row s and retrieval head r, the best
// min(k_pages, candidates) candidate pages j by (key desc, j asc), written ascending to
// selected[(slot * n_ret + r) * sel_stride..] with their number in counts[slot * n_ret + r]
// (slot = seq_slot[s]); keys come from page_select (keys[((page_indptr[s] * upp + j) * n_ret + r)
// * stride], upp selection units a page (select_units.wgsl), stride 1, or the query-head group
// size for PAGE_RANK_HEAD_NORM, whose page_select_norm leaves each key in its item's first
// slot).
//
// One workgroup of 256 per (row, head): g = wg.x + wg.y * num_workgroups.x, s = g / n_ret,
// r = g % n_ret. Radix select, most significant byte first, finds the k-th largest key T in four
// histogram passes; then every key > T is taken, and of the keys == T the lowest-indexed
// k - #(key > T). Thread t owns candidates [t * per, (t + 1) * per) so that two workgroup prefix
// sums (ties, then picks) give each pick its place in ascending order. Any number of pages and
// any k work. Rows whose slot, page_indptr or head are out of range are left untouched (the host
// cannot read them; the CPU reference rejects them).
@group(0) @binding(0) var<uniform> p: PageSelectParams;
@group(0) @binding(1) var<storage, read> keys: array<u32>;
@group(0) @binding(2) var<storage, read> head_map: array<u32>;
@group(0) @binding(3) var<storage, read> page_indptr: array<u32>;
@group(0) @binding(4) var<storage, read> kv_len: array<u32>;
@group(0) @binding(5) var<storage, read> seq_slot: array<u32>;
@group(0) @binding(6) var<storage, read> select_mask: array<u32>;
@group(0) @binding(7) var<storage, read_write> selected: array<u32>;
@group(0) @binding(8) var<storage, read_write> counts: array<u32>;

var<workgroup> hist: array<atomic<u32>, 256>;
var<workgroup> scan: array<u32, 256>;
// [0]: prefix of T found so far, [1]: picks still needed among keys matching the prefix.
var<workgroup> found: array<u32, 2>;

// Exclusive prefix sum of v over the workgroup (Hillis-Steele in `scan`); uniform control flow.
fn exclusive_scan(t: u32, v: u32) -> u32 {
    workgroupBarrier();
    scan[t] = v;
    for (var o = 1u; o < 256u; o = o << 1u) {
        workgroupBarrier();
        var add = 0u;
        if (t >= o) { add = scan[t - o]; }
        workgroupBarrier();
        scan[t] = scan[t] + add;
    }
    workgroupBarrier();
    return scan[t] - v;
}

// Long (about 85 lines) on purpose: the entry point's phases (four histogram passes of the radix
// select, the tie and pick prefix sums, the writes) share its workgroup memory and per-invocation
// state, and the body reads in the order it runs.
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
    let row = seq_slot[s] * p.n_ret + r;
    if (row >= arrayLength(&counts) || (row + 1u) * p.sel_stride > arrayLength(&selected)) { return; }
    // Keys are per selection unit: upp units a page-table entry (select_units.wgsl).
    let upp = units_per_page();
    let start = page_indptr[s] * upp;
    let end = page_indptr[s + 1u] * upp;
    let stride = select(1u, p.n_heads / p.n_kv_heads, p.rank == 1u);
    if (end < start || end * p.n_ret * stride > arrayLength(&keys)) { return; }
    let cand = row_candidates(s, (end - start) / upp);
    let k = min(p.k_pages, cand);
    let base = (start * p.n_ret + r) * stride; // key of candidate j: keys[base + j * n_ret * stride]
    let step = p.n_ret * stride;

    // Radix select of T, the k-th largest key (when k > 0).
    if (t == 0u) {
        found[0] = 0u;
        found[1] = k;
    }
    var mask = 0u;
    for (var shift = 24i; shift >= 0i && k > 0u; shift = shift - 8i) {
        atomicStore(&hist[t], 0u);
        workgroupBarrier();
        let prefix = found[0];
        for (var j = t; j < cand; j = j + 256u) {
            let key = keys[base + j * step];
            if ((key & mask) == prefix) { atomicAdd(&hist[(key >> u32(shift)) & 255u], 1u); }
        }
        workgroupBarrier();
        if (t == 0u) {
            var need = found[1];
            var d = 255u;
            loop {
                let c = atomicLoad(&hist[d]);
                if (c >= need || d == 0u) { break; }
                need = need - c;
                d = d - 1u;
            }
            found[0] = prefix | (d << u32(shift));
            found[1] = need;
        }
        workgroupBarrier();
        mask = mask | (255u << u32(shift));
    }
    workgroupBarrier();
    let thr = found[0];
    let ties = found[1]; // keys == T to take, lowest index first

    // Thread t's candidates, counted, then placed by two prefix sums.
    let per = (cand + 255u) / 256u;
    let j0 = min(t * per, cand);
    let j1 = min(j0 + per, cand);
    var gt = 0u;
    var eq = 0u;
    for (var j = j0; j < j1 && k > 0u; j = j + 1u) {
        let key = keys[base + j * step];
        gt = gt + select(0u, 1u, key > thr);
        eq = eq + select(0u, 1u, key == thr);
    }
    let eq_before = exclusive_scan(t, eq);
    let take_eq = min(eq, ties - min(ties, eq_before));
    var at = exclusive_scan(t, gt + take_eq);
    let out = row * p.sel_stride;
    var eq_seen = 0u;
    for (var j = j0; j < j1 && k > 0u; j = j + 1u) {
        let key = keys[base + j * step];
        var pick = key > thr;
        if (key == thr) {
            pick = eq_seen < take_eq;
            eq_seen = eq_seen + 1u;
        }
        if (pick) {
            selected[out + at] = j;
            at = at + 1u;
        }
    }
    if (t == 0u) { counts[row] = k; }
}
