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
// LN = 128 / BR, owns the output vec4s lane + LN * i, i < 4 (dims 4 (lane + LN i) .. + 4). Per
// block of BK keys: K staged into kvs from registers, scores -> sp, V staged into kvs (same
// buffer), online softmax + P.V. Software pipeline: the next block's K loads are issued while V is
// staged, its V loads during P.V, and the block after's key positions/offsets are computed then
// too (double-buffered kpos/koff). Shared rows are vec4s at a stride of hd4 + 1 (conflict-free
// vec4 reads); accumulators and staged loads live in vec4 registers, never in private arrays
// (which can turn every load into a serialised round trip).
//
// One dispatch covers one head kind (the backend records a pass per kind present): k_pool/v_pool
// are the retrieval pool, or the streaming pool in the pass recorded with n_ret = 0; workgroups of
// the other kind's heads return at once. No branch picks a pool, so loads stay back to back.
//
// Block-sparse prefill (src/backend/mod.rs BlockPages; the host passes sel_stride 0 without
// block lists): a retrieval head's tile in a sparse block reads first its list slots (page 0 when
// the tail starts past it, then one slot per selected entry j: page j + 1, absent unless
// j + 1 < tail page), then the tail range from the tail page's first position. Absent keys are
// masked like any other (koff NONE), so the result is the CPU reference's, which skips them.
//
// Visibility (as the CPU reference): retrieval heads see wlo(pos)..=pos through the page table;
// streaming heads the Lambda mask (k < sink or pos - k < local, within the window) through their
// ring, iterating only the sink range then the local range of the tile. Invariant relied on: the
// ring holds sink + local + chunk tokens, so every key a query needs is still in it.

@group(0) @binding(0) var<uniform> p: AttentionParams;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> q_indptr: array<u32>;
// KV dtype accessors kv_k_pool / kv_v_pool come from the KV snippet (src/backend/wgpu/shaders.rs).
@group(0) @binding(3) var<storage, read> k_pool: array<KV_EL>;
@group(0) @binding(4) var<storage, read> v_pool: array<KV_EL>;
@group(0) @binding(5) var<storage, read> head_map: array<u32>;
@group(0) @binding(6) var<storage, read> page_indptr: array<u32>;
@group(0) @binding(7) var<storage, read> page_table: array<u32>;
@group(0) @binding(8) var<storage, read> kv_len: array<u32>;
@group(0) @binding(9) var<storage, read> ring_table: array<u32>;
@group(0) @binding(10) var<storage, read_write> out: array<f32>;
@group(0) @binding(11) var<storage, read> blk_sel: array<u32>;
@group(0) @binding(12) var<storage, read> blk_cnt: array<u32>;

const WG: u32 = 128u;
const NONE: u32 = 0xffffffffu;
const BLOCK_ROWS: u32 = 128u;  // PREFILL_BLOCK_ROWS
const BLOCK_DENSE: u32 = 0xffffffffu;

// A tile's block list: nl slots (p0 = 1: page 0 first), the entries at blk_sel[off..], the tail page.
struct Blk { nl: u32, p0: u32, off: u32, tpage: u32 }

// The page of list slot i, NONE for an entry that is not below the tail page - 1.
fn list_page(b: Blk, i: u32) -> u32 {
    if (i < b.p0) { return 0u; }
    let e = blk_sel[min(b.off + i - b.p0, arrayLength(&blk_sel) - 1u)];
    return select(NONE, e + 1u, e != NONE && e + 1u < b.tpage);
}

// Rows hold hd4 = ceil(hd / 4) vec4s (zero past hd) at a stride of hd4 + 1 vec4s (no bank
// conflicts for vec4 reads of different rows).
var<workgroup> qs: array<vec4<f32>, 544>;   // [BR][hd4 + 1] scaled queries
var<workgroup> kvs: array<vec4<f32>, 272>;  // [BK][hd4 + 1] keys, then values, of the block
var<workgroup> sp: array<f32, 512>;         // [BR][BK] scores (NEG_INF = masked)
var<workgroup> kpos: array<u32, 32>;        // [2][16] position of each block key (by block parity)
var<workgroup> koff: array<u32, 32>;        // [2][16] its pool offset, NONE if absent
var<workgroup> rpos: array<u32, 32>;        // position of each tile row

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

// Metadata slot j of buffer `buf` <- virtual key v: key v % page_size of list slot v / page_size
// for v < nl * page_size, then w = v - that: position a0 + w for w < na, else b0 + (w - na).
fn set_key(buf: u32, j: u32, v: u32, na: u32, nkeys: u32, a0: u32, b0: u32, streaming: bool, s: u32, hi: u32, b: Blk) {
    let nlk = b.nl * p.page_size;
    var ok = v < nkeys;
    var kp = 0u;
    if (v < nlk) {
        let pg = list_page(b, v / p.page_size);
        ok = pg != NONE;
        kp = pg * p.page_size + v % p.page_size;
    } else {
        let w = v - nlk;
        kp = a0 + w;
        if (w >= na) { kp = b0 + (w - na); }
    }
    kpos[buf * 16u + j] = kp;
    koff[buf * 16u + j] = NONE;
    if (ok) { koff[buf * 16u + j] = key_offset(streaming, s, hi, kp); }
}

// Vec4 idx (row idx / hd4, vec4 idx % hd4) of the block's K or V rows (metadata buffer `buf`):
// four loads clamped to the row and issued unconditionally (an absent key reads offset 0, which
// `stage` drops), so that a thread's loads are all in flight before any use.
fn fetch(values: bool, buf: u32, idx: u32, bk: u32) -> vec4<f32> {
    let hd = p.head_dim;
    let hd4 = (hd + 3u) / 4u;
    let o = koff[buf * 16u + min(idx / hd4, bk - 1u)];
    let at = select(o, 0u, o == NONE);
    let d = (idx % hd4) * 4u;
    let e = hd - 1u;
    if (values) {
        return vec4(kv_v_pool(at + min(d, e)), kv_v_pool(at + min(d + 1u, e)), kv_v_pool(at + min(d + 2u, e)), kv_v_pool(at + min(d + 3u, e)));
    }
    return vec4(kv_k_pool(at + min(d, e)), kv_k_pool(at + min(d + 1u, e)), kv_k_pool(at + min(d + 2u, e)), kv_k_pool(at + min(d + 3u, e)));
}

// Stores a fetched vec4 into kvs, zero for absent keys and past head_dim.
fn stage(x: vec4<f32>, buf: u32, idx: u32, bk: u32) {
    let hd4 = (p.head_dim + 3u) / 4u;
    let j = idx / hd4;
    if (j < bk) {
        let d = (idx % hd4) * 4u;
        let keep = vec4(d, d + 1u, d + 2u, d + 3u) < vec4(p.head_dim);
        kvs[j * (hd4 + 1u) + idx % hd4] = select(vec4(0.0), x, keep & vec4(koff[buf * 16u + j] != NONE));
    }
}

// Long (about 165 lines) on purpose: the entry point's phases (query staging, key tiles, online
// softmax, output) share its workgroup memory and per-invocation state, and the body reads in the
// order it runs.
@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = lid.x;
    let hd = p.head_dim;
    let nh = p.n_heads;
    let group = nh / p.n_kv_heads;
    let br = tile_rows(hd);
    let bk = br / 2u;
    let ln = WG / br;
    let hd4 = (hd + 3u) / 4u;
    let st = hd4 + 1u;
    let tile = wg.x + wg.y * nwg.x;
    let kvh = wg.z;
    // This pass's heads only: streaming heads when recorded with n_ret = 0, else retrieval heads.
    let hm = head_map[kvh];
    let streaming = (hm & STREAMING_BIT) != 0u;
    let hi = hm & ~STREAMING_BIT;
    if (streaming != (p.n_ret == 0u)) { return; }

    // Find this tile's sequence.
    var s = 0u;
    var t0 = 0u;
    var nq = 0u;
    var qb = 0u;  // prefill blocks of the sequences before s
    for (; s < p.num_seqs; s = s + 1u) {
        let a = q_indptr[s];
        let b = q_indptr[s + 1u];
        nq = select(0u, b - a, b > a);
        let nt = (nq * group + br - 1u) / br;
        if (tile < t0 + nt) { break; }
        t0 = t0 + nt;
        qb = qb + (nq + BLOCK_ROWS - 1u) / BLOCK_ROWS;
    }
    let len = kv_len[min(s, p.num_seqs - 1u)];
    if (s >= p.num_seqs || nq > len) { return; }
    let tok0 = q_indptr[s];
    let first = len - nq;
    let row0 = (tile - t0) * br;
    let nrows = min(br, nq * group - row0);
    let p_first = first + row0 / group;
    let p_last = first + (row0 + nrows - 1u) / group;


    // A sparse block's list (a tile lies inside one block: BR divides BLOCK_ROWS * group).
    var blk = Blk(0u, 0u, 0u, 0u);
    var klo = 0u;
    let ci = (qb + (row0 / group) / BLOCK_ROWS) * p.n_ret + hi;
    if (p.sel_stride != 0u && !streaming && ci < arrayLength(&blk_cnt)) {
        let c = blk_cnt[ci];
        if (c != BLOCK_DENSE) {
            let bfirst = first + (row0 / group) / BLOCK_ROWS * BLOCK_ROWS;
            let tpage = select(0u, (bfirst - p.page_size) / p.page_size, bfirst >= p.page_size);
            let p0 = select(0u, 1u, tpage > 0u);
            blk = Blk(p0 + min(c, p.sel_stride), p0, ci * p.sel_stride, tpage);
            klo = tpage * p.page_size;
        }
    }

    // Keys: the list's keys, then virtual index w < na is position a0 + w, else b0 + (w - na).
    let a0 = max(window_lo(p_first), klo);
    var na = 0u;
    var b0 = a0;
    if (streaming) {
        let a1 = min(p.sink, p_last + 1u);
        na = select(0u, a1 - a0, a1 > a0);
        let recent = select(0u, p_first + 1u - p.local, p_first + 1u > p.local);
        b0 = max(max(p.sink, a0), recent);
    }
    let nb = select(0u, p_last + 1u - b0, p_last + 1u > b0);
    let nkeys = blk.nl * p.page_size + na + nb;

    // Queries (scaled, zero past hd), row positions, the first block's keys.
    for (var i = t; i < nrows * hd4; i = i + WG) {
        let fr = row0 + i / hd4;
        let tok = min(tok0 + fr / group, p.n_tokens - 1u);
        let at = (tok * nh + kvh * group + fr % group) * hd;
        let d = (i % hd4) * 4u;
        var x = vec4(0.0);
        for (var c = 0u; c < 4u; c = c + 1u) {
            if (d + c < hd) { x[c] = q[at + d + c] * p.scale; }
        }
        qs[(i / hd4) * st + i % hd4] = x;
    }
    if (t < br) { rpos[t] = first + (row0 + t) / group; }
    if (t < bk) { set_key(0u, t, t, na, nkeys, a0, b0, streaming, s, hi, blk); }
    workgroupBarrier();

    // Pipeline: block b's K is staged from registers and scored; its V staged while block b+1's K
    // loads; P.V while block b+1's V loads and block b+2's metadata is computed. A thread holds
    // vec4s t and t + 128 (bk * hd4 <= 256) of a block's K (k0, k1) and V (v0, v1).
    let nblocks = (nkeys + bk - 1u) / bk;
    var k0 = fetch(false, 0u, t, bk);
    var k1 = fetch(false, 0u, t + WG, bk);
    var v0 = fetch(true, 0u, t, bk);
    var v1 = fetch(true, 0u, t + WG, bk);
    if (t < bk) { set_key(1u, t, bk + t, na, nkeys, a0, b0, streaming, s, hi, blk); }

    // Thread (row r, lane) owns vec4s lane + ln * i (dims 4 (lane + ln i) .. + 4) in acc0..acc3.
    let r = t / ln;
    let lane = t % ln;
    var m = NEG_INF;
    var l = 0.0;
    var acc0 = vec4(0.0);
    var acc1 = vec4(0.0);
    var acc2 = vec4(0.0);
    var acc3 = vec4(0.0);

    for (var kb = 0u; kb < nblocks; kb = kb + 1u) {
        let cur = kb & 1u;
        stage(k0, cur, t, bk);
        stage(k1, cur, t + WG, bk);
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
                var acc = vec4(0.0);
                for (var c = 0u; c < hd4; c = c + 1u) { acc = acc + qs[rr * st + c] * kvs[j * st + c]; }
                sc = acc.x + acc.y + acc.z + acc.w;
            }
            sp[i] = sc;
        }
        workgroupBarrier();
        stage(v0, cur, t, bk);
        stage(v1, cur, t + WG, bk);
        if (kb + 1u < nblocks) {
            k0 = fetch(false, cur ^ 1u, t, bk);
            k1 = fetch(false, cur ^ 1u, t + WG, bk);
        }
        workgroupBarrier();
        if (kb + 1u < nblocks) {
            v0 = fetch(true, cur ^ 1u, t, bk);
            v1 = fetch(true, cur ^ 1u, t + WG, bk);
        }
        // Online softmax and P.V for this thread's row and dims (vec4s past hd4 hold junk, unused).
        if (r < nrows) {
            var mb = NEG_INF;
            for (var j = 0u; j < bk; j = j + 1u) { mb = max(mb, sp[r * bk + j]); }
            let mn = max(m, mb);
            let alpha = exp(m - mn);
            l = l * alpha;
            acc0 = acc0 * alpha;
            acc1 = acc1 * alpha;
            acc2 = acc2 * alpha;
            acc3 = acc3 * alpha;
            for (var j = 0u; j < bk; j = j + 1u) {
                let sc = sp[r * bk + j];
                let pj = select(0.0, exp(sc - mn), sc > NEG_INF);
                l = l + pj;
                let x = j * st + lane;
                acc0 = acc0 + pj * kvs[x];
                acc1 = acc1 + pj * kvs[x + ln];
                acc2 = acc2 + pj * kvs[x + 2u * ln];
                acc3 = acc3 + pj * kvs[x + 3u * ln];
            }
            m = mn;
        }
        if (t < bk) { set_key(cur, t, (kb + 2u) * bk + t, na, nkeys, a0, b0, streaming, s, hi, blk); }
        workgroupBarrier();
    }

    if (r < nrows) {
        let fr = row0 + r;
        let tok = tok0 + fr / group;
        if (tok < p.n_tokens) {
            let base = (tok * nh + kvh * group + fr % group) * hd;
            let inv = select(0.0, 1.0 / l, l > 0.0);
            for (var i = 0u; i < 4u; i = i + 1u) {
                var x = acc3;
                if (i == 0u) { x = acc0; } else if (i == 1u) { x = acc1; } else if (i == 2u) { x = acc2; }
                let d = 4u * (lane + ln * i);
                for (var c = 0u; c < 4u; c = c + 1u) {
                    if (d + c < hd) { out[base + d + c] = x[c] * inv; }
                }
            }
        }
    }
}
