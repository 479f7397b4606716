// page_select: Quest top-k page selection for decode rows with select_mask[s] != 0.
//
// q `[num_seqs][n_heads][head_dim]`; summary `[page][n_ret][page_size / logical_page][2][head_dim]`
// (0 = min, 1 = max); sequence s owns page_table[page_indptr[s]..page_indptr[s+1]] in logical order.
// Candidates are its pages j = 0..n_pages-2 (the newest is always read by attention). Score of j
// for retrieval head r (KV head h with head_map[h] == r, query heads h*group..(h+1)*group,
// group = n_heads / n_kv_heads): max over its logical pages and those query heads of
// sum_c max(q_c * max_c, q_c * min_c), the sum taken sequentially over c exactly as the CPU
// reference does, so scores (and hence ties) are bitwise equal. The best min(k_pages, candidates)
// indices j by (score desc, index asc) go ascending to selected[(slot * n_ret + r) * sel_stride..],
// their number to counts[slot * n_ret + r] (slot = seq_slot[s]).
//
// Scores are ranked as u32 keys ordered like f32::total_cmp (key(-inf) = 0x007fffff); NaN scores
// are skipped by the max (f32::max); key 0 marks an entry taken, key 1 a page id outside the pool.
//
// One workgroup of 256 per (row s, retrieval head r): g = wg.x + wg.y * num_workgroups.x,
// s = g / n_ret, r = g % n_ret. Candidates are scored in chunks of CHUNK pages (one thread per
// page) into workgroup memory, after which the running top-k (at most KMAX entries, kept after the
// chunk) and the chunk are merged by min(k, entries) rounds of a workgroup argmax. Any number of
// pages works; k_pages <= KMAX (the host checks). Rows whose slot, page_indptr or head are out of
// range are left untouched (the host cannot read them; the CPU reference rejects them).
@group(0) @binding(0) var<uniform> p: PageSelectParams;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> summary: array<f32>;
@group(0) @binding(3) var<storage, read> head_map: array<u32>;
@group(0) @binding(4) var<storage, read> page_indptr: array<u32>;
@group(0) @binding(5) var<storage, read> page_table: array<u32>;
@group(0) @binding(6) var<storage, read> seq_slot: array<u32>;
@group(0) @binding(7) var<storage, read> select_mask: array<u32>;
@group(0) @binding(8) var<storage, read_write> selected: array<u32>;
@group(0) @binding(9) var<storage, read_write> counts: array<u32>;

const CHUNK: u32 = 2048u;
const KMAX: u32 = 256u;
const KEY_NEG_INF: u32 = 0x007fffffu;

// keys[0..CHUNK): the chunk's pages (index base + pos); keys[CHUNK..CHUNK+m): the running top-k,
// whose indices are cidx[0..m).
var<workgroup> keys: array<u32, 2304>;
var<workgroup> cidx: array<u32, 256>;
var<workgroup> red_key: array<u32, 256>;
var<workgroup> red_idx: array<u32, 256>;
var<workgroup> red_pos: array<u32, 256>;
var<workgroup> pick_key: array<u32, 256>;
var<workgroup> pick_idx: array<u32, 256>;

// Monotone map of f32 to u32 in f32::total_cmp order.
fn f32_key(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    return select(b ^ 0x80000000u, ~b, (b >> 31u) == 1u);
}

// (key a, index ia) ranks before (key b, index ib).
fn better(a: u32, ia: u32, b: u32, ib: u32) -> bool {
    return a > b || (a == b && ia < ib);
}

// Key of the page at page_table[e] for retrieval head r; q0 = first element of the head group's q.
fn page_key(e: u32, r: u32, q0: u32, group: u32) -> u32 {
    let page = page_table[e];
    if (page >= p.num_pages) { return 1u; }
    let hd = p.head_dim;
    let lpp = p.page_size / p.logical_page;
    var best = KEY_NEG_INF;
    for (var l = 0u; l < lpp; l = l + 1u) {
        let at = ((page * p.n_ret + r) * lpp + l) * 2u * hd;
        for (var g = 0u; g < group; g = g + 1u) {
            let qb = q0 + g * hd;
            var sc = max(q[qb] * summary[at + hd], q[qb] * summary[at]);
            for (var c = 1u; c < hd; c = c + 1u) {
                let qc = q[qb + c];
                sc = sc + max(qc * summary[at + hd + c], qc * summary[at + c]);
            }
            if (sc == sc) { best = max(best, f32_key(sc)); }
        }
    }
    return best;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
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
    let start = page_indptr[s];
    let end = page_indptr[s + 1u];
    if (end < start || end > arrayLength(&page_table)) { return; }
    let cand = max(end - start, 1u) - 1u;
    let group = p.n_heads / p.n_kv_heads;
    let q0 = (s * p.n_heads + h * group) * p.head_dim;
    let k = min(p.k_pages, KMAX);

    var m = 0u;
    let n_chunks = (cand + CHUNK - 1u) / CHUNK;
    for (var ch = 0u; ch < n_chunks; ch = ch + 1u) {
        let base = ch * CHUNK;
        let clen = min(CHUNK, cand - base);
        for (var pos = lid.x; pos < clen; pos = pos + 256u) {
            keys[pos] = page_key(start + base + pos, r, q0, group);
        }
        workgroupBarrier();
        let rounds = min(k, m + clen);
        for (var rd = 0u; rd < rounds; rd = rd + 1u) {
            var bk = 0u;
            var bi = 0xffffffffu;
            var bp = 0u;
            for (var pos = lid.x; pos < clen; pos = pos + 256u) {
                let kk = keys[pos];
                if (kk != 0u && better(kk, base + pos, bk, bi)) { bk = kk; bi = base + pos; bp = pos; }
            }
            for (var e = lid.x; e < m; e = e + 256u) {
                let kk = keys[CHUNK + e];
                if (kk != 0u && better(kk, cidx[e], bk, bi)) { bk = kk; bi = cidx[e]; bp = CHUNK + e; }
            }
            red_key[lid.x] = bk;
            red_idx[lid.x] = bi;
            red_pos[lid.x] = bp;
            workgroupBarrier();
            for (var st = 128u; st > 0u; st = st >> 1u) {
                if (lid.x < st) {
                    let ok = red_key[lid.x + st];
                    let oi = red_idx[lid.x + st];
                    if (better(ok, oi, red_key[lid.x], red_idx[lid.x])) {
                        red_key[lid.x] = ok;
                        red_idx[lid.x] = oi;
                        red_pos[lid.x] = red_pos[lid.x + st];
                    }
                }
                workgroupBarrier();
            }
            if (lid.x == 0u) {
                pick_key[rd] = red_key[0];
                pick_idx[rd] = red_idx[0];
                keys[red_pos[0]] = 0u;
            }
            workgroupBarrier();
        }
        for (var e = lid.x; e < rounds; e = e + 256u) {
            keys[CHUNK + e] = pick_key[e];
            cidx[e] = pick_idx[e];
        }
        workgroupBarrier();
        m = rounds;
    }

    // The m picks in ascending index order (indices are distinct).
    let out = row * p.sel_stride;
    for (var e = lid.x; e < m; e = e + 256u) {
        let me = cidx[e];
        var rank = 0u;
        for (var o = 0u; o < m; o = o + 1u) {
            if (cidx[o] < me) { rank = rank + 1u; }
        }
        selected[out + rank] = me;
    }
    if (lid.x == 0u) { counts[row] = m; }
}
