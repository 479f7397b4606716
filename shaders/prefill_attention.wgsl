// prefill_attention: causal flash attention of each sequence's new tokens over its cached
// context (prefix and chunk, already appended), online softmax over key blocks.
//
// Layouts: q/out [n_tokens][n_heads][head_dim]; retrieval pools k/v
// [page][n_ret][page_size][head_dim]; streaming pools sk/sv [str_page][n_str][page_size][head_dim];
// head_map [n_kv_heads]; q_indptr, page_indptr [num_seqs + 1]; kv_len [num_seqs];
// ring_table [num_seqs * ring_pages], ring_pages = ring_tokens / page_size.
//
// Mapping: one workgroup per (tile, KV head): tile = wg.x + wg.y * nwg.x, KV head = wg.z. A
// sequence's query rows are flattened as (token, head of the KV head's group), token-major, and
// cut into tiles of BR rows that never straddle sequences: sequence s owns the tiles after those
// of sequences < s, ceil(nq(s) * group / BR) of them. Extra workgroups exit at once.
// Tile geometry follows head_dim (ops_attention.rs mirrors `tile_rows`): hd <= 64: BR 32, BK 16;
// <= 128: BR 16, BK 8; <= 256: BR 8, BK 4. 128 threads; thread (row lid / LN, lane lid % LN),
// LN = 128 / BR, owns output dims lane + LN * i (at most 16). Per block of BK keys: K -> kvs,
// scores -> sp, V -> kvs (same buffer), then online softmax + P.V; the next block's key positions
// and pool offsets are computed during P.V. Shared rows are padded to hd + 1 (no bank conflicts).
//
// Visibility (as the CPU reference): retrieval heads see wlo(pos)..=pos through the page table;
// streaming heads the Lambda mask (k < sink or pos - k < local, within the window) through their
// ring, iterating only the sink range then the local range of the tile. Invariant relied on: the
// ring holds sink + local + chunk tokens, so every key a query needs is still in it.

@group(0) @binding(0) var<uniform> p: AttentionParams;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> q_indptr: array<u32>;
@group(0) @binding(3) var<storage, read> k_pool: array<f32>;
@group(0) @binding(4) var<storage, read> v_pool: array<f32>;
@group(0) @binding(5) var<storage, read> sk_pool: array<f32>;
@group(0) @binding(6) var<storage, read> sv_pool: array<f32>;
@group(0) @binding(7) var<storage, read> head_map: array<u32>;
@group(0) @binding(8) var<storage, read> page_indptr: array<u32>;
@group(0) @binding(9) var<storage, read> page_table: array<u32>;
@group(0) @binding(10) var<storage, read> kv_len: array<u32>;
@group(0) @binding(11) var<storage, read> ring_table: array<u32>;
@group(0) @binding(12) var<storage, read_write> out: array<f32>;

const WG: u32 = 128u;
const NONE: u32 = 0xffffffffu;

var<workgroup> qs: array<f32, 2080>;   // [BR][hd + 1] scaled queries
var<workgroup> kvs: array<f32, 1040>;  // [BK][hd + 1] keys, then values, of the block
var<workgroup> sp: array<f32, 512>;    // [BR][BK] scores (NEG_INF = masked)
var<workgroup> kpos: array<u32, 32>;   // [2][16] position of each block key (by block parity)
var<workgroup> koff: array<u32, 32>;   // [2][16] its pool offset, NONE if absent
var<workgroup> rpos: array<u32, 32>;   // position of each tile row

fn tile_rows(hd: u32) -> u32 {
    if (hd <= 64u) { return 32u; }
    if (hd <= 128u) { return 16u; }
    return 8u;
}

fn window_lo(pos: u32) -> u32 {
    if (p.window == 0u || pos + 1u <= p.window) { return 0u; }
    return pos + 1u - p.window;
}

// Pool offset of position `pos` of sequence `s` for KV head index `hi` of its kind.
fn key_offset(streaming: bool, s: u32, hi: u32, pos: u32) -> u32 {
    let ps = p.page_size;
    if (streaming) {
        let r = ring_index(pos, p.sink, p.ring_tokens);
        let at = s * (p.ring_tokens / ps) + r / ps;
        if (at >= arrayLength(&ring_table)) { return NONE; }
        let page = ring_table[at];
        if (page >= p.num_str_pages) { return NONE; }
        return ((page * p.n_str + hi) * ps + r % ps) * p.head_dim;
    }
    let at = page_indptr[s] + pos / ps;
    if (at >= page_indptr[s + 1u] || at >= arrayLength(&page_table)) { return NONE; }
    let page = page_table[at];
    if (page >= p.num_pages) { return NONE; }
    return ((page * p.n_ret + hi) * ps + pos % ps) * p.head_dim;
}

// Metadata slot j of buffer `buf` <- virtual key v: position a0 + v for v < na, else b0 + (v - na).
fn set_key(buf: u32, j: u32, v: u32, na: u32, nkeys: u32, a0: u32, b0: u32, streaming: bool, s: u32, hi: u32) {
    var kp = a0 + v;
    if (v >= na) { kp = b0 + (v - na); }
    kpos[buf * 16u + j] = kp;
    koff[buf * 16u + j] = NONE;
    if (v < nkeys) { koff[buf * 16u + j] = key_offset(streaming, s, hi, kp); }
}

fn pool_at(values: bool, streaming: bool, o: u32) -> f32 {
    if (values) {
        if (streaming) { return sv_pool[o]; }
        return v_pool[o];
    }
    if (streaming) { return sk_pool[o]; }
    return k_pool[o];
}

// This thread's elements t + WG * i (< bk * hd, at most 8) of the K or V rows of the block whose
// metadata is in buffer `buf`, fetched into registers (all loads issued before any use).
fn fetch(values: bool, streaming: bool, buf: u32, t: u32, bk: u32) -> array<f32, 8> {
    let hd = p.head_dim;
    var r: array<f32, 8>;
    for (var i = 0u; i < 8u; i = i + 1u) {
        let idx = t + WG * i;
        if (idx < bk * hd) {
            let o = koff[buf * 16u + idx / hd];
            if (o != NONE) { r[i] = pool_at(values, streaming, o + idx % hd); }
        }
    }
    return r;
}

fn stage(r: array<f32, 8>, t: u32, bk: u32) {
    let hd = p.head_dim;
    for (var i = 0u; i < 8u; i = i + 1u) {
        let idx = t + WG * i;
        if (idx < bk * hd) { kvs[(idx / hd) * (hd + 1u) + idx % hd] = r[i]; }
    }
}

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = lid.x;
    let hd = p.head_dim;
    let nh = p.n_heads;
    let group = nh / p.n_kv_heads;
    let br = tile_rows(hd);
    let bk = br / 2u;
    let ln = WG / br;
    let st = hd + 1u;
    let tile = wg.x + wg.y * nwg.x;
    let kvh = wg.z;

    // Find this tile's sequence.
    var s = 0u;
    var t0 = 0u;
    var nq = 0u;
    for (; s < p.num_seqs; s = s + 1u) {
        let a = q_indptr[s];
        let b = q_indptr[s + 1u];
        nq = select(0u, b - a, b > a);
        let nt = (nq * group + br - 1u) / br;
        if (tile < t0 + nt) { break; }
        t0 = t0 + nt;
    }
    let len = kv_len[min(s, p.num_seqs - 1u)];
    if (s >= p.num_seqs || nq > len) { return; }
    let tok0 = q_indptr[s];
    let first = len - nq;
    let row0 = (tile - t0) * br;
    let nrows = min(br, nq * group - row0);
    let p_first = first + row0 / group;
    let p_last = first + (row0 + nrows - 1u) / group;

    let hm = head_map[kvh];
    let streaming = (hm & STREAMING_BIT) != 0u;
    let hi = hm & ~STREAMING_BIT;

    // Keys: virtual index v < na is position a0 + v, else b0 + (v - na).
    let a0 = window_lo(p_first);
    var na = 0u;
    var b0 = a0;
    if (streaming) {
        let a1 = min(p.sink, p_last + 1u);
        na = select(0u, a1 - a0, a1 > a0);
        let recent = select(0u, p_first + 1u - p.local, p_first + 1u > p.local);
        b0 = max(max(p.sink, a0), recent);
    }
    let nb = select(0u, p_last + 1u - b0, p_last + 1u > b0);
    let nkeys = na + nb;

    // Queries (scaled; loads first), row positions, the first block's keys.
    var qr: array<f32, 16>;
    for (var i = 0u; i < 16u; i = i + 1u) {
        let idx = t + WG * i;
        let fr = row0 + idx / hd;
        let tok = tok0 + fr / group;
        if (idx < nrows * hd && tok < p.n_tokens) { qr[i] = q[(tok * nh + kvh * group + fr % group) * hd + idx % hd]; }
    }
    for (var i = 0u; i < 16u; i = i + 1u) {
        let idx = t + WG * i;
        if (idx < br * hd) { qs[(idx / hd) * st + idx % hd] = qr[i] * p.scale; }
    }
    if (t < br) { rpos[t] = first + (row0 + t) / group; }
    if (t < bk) { set_key(0u, t, t, na, nkeys, a0, b0, streaming, s, hi); }
    workgroupBarrier();

    // Pipeline: block b's K is staged from registers, scored; its V staged while block b+1's K
    // loads; P.V while block b+1's V loads and block b+2's metadata is computed.
    let nblocks = (nkeys + bk - 1u) / bk;
    var kr = fetch(false, streaming, 0u, t, bk);
    var vr = fetch(true, streaming, 0u, t, bk);
    if (t < bk) { set_key(1u, t, bk + t, na, nkeys, a0, b0, streaming, s, hi); }

    let r = t / ln;
    let lane = t % ln;
    var m = NEG_INF;
    var l = 0.0;
    var acc: array<f32, 16>;
    for (var i = 0u; i < 16u; i = i + 1u) { acc[i] = 0.0; }

    for (var blk = 0u; blk < nblocks; blk = blk + 1u) {
        let cur = blk & 1u;
        stage(kr, t, bk);
        workgroupBarrier();
        // Scores with causal, window and Lambda masks.
        for (var i = t; i < br * bk; i = i + WG) {
            let rr = i / bk;
            let j = i % bk;
            let qp = rpos[rr];
            let kp = kpos[cur * 16u + j];
            var vis = rr < nrows && koff[cur * 16u + j] != NONE && kp <= qp && kp >= window_lo(qp);
            if (streaming) { vis = vis && (kp < p.sink || qp - kp < p.local); }
            var sc = NEG_INF;
            if (vis) {
                sc = 0.0;
                for (var d = 0u; d < hd; d = d + 1u) { sc = sc + qs[rr * st + d] * kvs[j * st + d]; }
            }
            sp[i] = sc;
        }
        workgroupBarrier();
        stage(vr, t, bk);
        if (blk + 1u < nblocks) { kr = fetch(false, streaming, cur ^ 1u, t, bk); }
        workgroupBarrier();
        if (blk + 1u < nblocks) { vr = fetch(true, streaming, cur ^ 1u, t, bk); }
        // Online softmax and P.V for this thread's row and dims.
        if (r < nrows) {
            var mb = NEG_INF;
            for (var j = 0u; j < bk; j = j + 1u) { mb = max(mb, sp[r * bk + j]); }
            let mn = max(m, mb);
            let alpha = exp(m - mn);
            l = l * alpha;
            for (var i = 0u; i < 16u; i = i + 1u) { acc[i] = acc[i] * alpha; }
            for (var j = 0u; j < bk; j = j + 1u) {
                let sc = sp[r * bk + j];
                if (sc > NEG_INF) {
                    let pj = exp(sc - mn);
                    l = l + pj;
                    for (var i = 0u; i < 16u; i = i + 1u) {
                        let d = lane + ln * i;
                        if (d < hd) { acc[i] = acc[i] + pj * kvs[j * st + d]; }
                    }
                }
            }
            m = mn;
        }
        if (t < bk) { set_key(cur, t, (blk + 2u) * bk + t, na, nkeys, a0, b0, streaming, s, hi); }
        workgroupBarrier();
    }

    if (r < nrows) {
        let fr = row0 + r;
        let tok = tok0 + fr / group;
        if (tok < p.n_tokens) {
            let base = (tok * nh + kvh * group + fr % group) * hd;
            let inv = select(0.0, 1.0 / l, l > 0.0);
            for (var i = 0u; i < 16u; i = i + 1u) {
                let d = lane + ln * i;
                if (d < hd) { out[base + d] = acc[i] * inv; }
            }
        }
    }
}
