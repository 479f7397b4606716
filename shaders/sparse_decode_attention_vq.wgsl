// sparse_decode_attention_vq: a variant of sparse_decode_attention (same bindings and results;
// ops_attention.rs takes it with LSERVE_WGPU_DECODE_ATTN=new): K as 16-byte words for every KV
// dtype, V four dims a thread ("quads"), three barriers a chunk, a grid of one head kind, splits
// of whole chunks. Ported from docs/data/s10-h200-2026-12-02/wgpuattn-unmeasured.patch.
//
// One query per sequence (position kv_len - 1), split-KV ("flash decoding"). Workgroup (split wg.x, head of this pass's kind and head chunk wg.y, sequence wg.z)
// takes the query heads h0..h0+ng of one KV head (ng <= 8, so a GQA group shares every K/V load)
// over its share of the head's key list, online softmax over chunks of 128 keys.
//
// Layouts: q/out [num_seqs][n_heads][head_dim]; pools, head_map, page_indptr/page_table, kv_len,
// ring_table as in prefill_attention.wgsl; selected [slot][n_ret][sel_stride], counts
// [slot][n_ret], seq_slot/tail_start [num_seqs]. part: a 4-word header (word 0 = n_splits, u32
// bits), then [num_seqs][n_heads][n_splits][head_dim + 2]: un-normalised accumulator, the running
// max m and sum l (merged by sparse_decode_attention_merge). n_splits = nwg.x; with one split the
// result goes straight to `out` and `part` is not touched.
//
// One dispatch covers one head kind (the backend records a pass per kind present, its grid
// n_kind x head chunks high): k_pool/v_pool are the retrieval pool, or the streaming pool in the
// pass recorded with n_ret = 0. Head hi of the kind is the KV head whose head_map entry is hi (with
// STREAMING_BIT for streaming heads), found by one parallel look-up. No branch picks a pool, so
// loads stay back to back.
//
// Key list ("slots"): retrieval heads: the selected pages below tail_start (a prefix, the list
// being ascending), then pages tail_start..n_pages, page_size slots each (slot -> position
// page * page_size + offset, kept when < kv_len and within the window). Streaming heads: the Lambda
// mask, positions wlo..sink then max(sink, wlo, pos + 1 - local)..=pos, through the ring.
// Splits take whole chunks of 128 slots (`split_chunks`): one each while the list has at most
// n_splits chunks, else a balanced share (every split busy). A split at or past an upper bound
// of the chunk count returns before reading queries or the selection.
//
// Per chunk: thread t scores slot c0 + t for all 8 head lanes (vec4 pairs; qs rows of absent
// heads and past head_dim are zero, so no lane needs a guard), reading its K row 32 values a step
// as 16-byte words (`kv16_k_pool`: 4 f32, 8 f16/bf16 or 16 int8/fp8 values a load; a word past
// the row is clamped to its last word; `kvrow_k_pool` locates the row, and loads an 8-bit row's
// scale, once per key). 16-bit rows that do not start on a word (head_dim % 8 == 4) take
// 4-value reads instead (`kv4_k_pool`, workgroup-uniform branch). The same thread locates the
// key's V row (`kvrow_v_pool`, into kb/ks). Chunk max (16 partials); probabilities; P.V with
// thread (key group kg, dim lane dl) owning dims 4 dl..4 dl + 3 of every head (hd / 4 lanes a
// row, kgn = 128 / (hd / 4) key groups taking keys kg, kg + kgn, ..., 8 in flight), V read 4
// values a load (`kv4_v_pool`); the accumulators are 4x4 matrices (dims x heads 0-3 | 4-7)
// updated by one matrix product per 4 keys. Three barriers a chunk (scores, maxima,
// probabilities; sc/kb/ks alternate between chunks). At the end key groups 1.. add into group 0
// through qs. No private arrays: loads are all issued before their first use.

@group(0) @binding(0) var<uniform> p: AttentionParams;
@group(0) @binding(1) var<storage, read> q: array<f32>;
// KV dtype accessors kvrow_k_pool / kv16_k_pool / kv4_k_pool / kvrow_v_pool / kv4_v_pool (f32,
// f16, bf16, int8, fp8) come from the KV snippet (src/backend/wgpu/shaders.rs): K as 16-byte words of KV_WORD
// values, V as 4-value quads (vec4<f32>, two u32 of f16/bf16 pairs, one u32 of 8-bit codes).
// head_dim % 4 == 0 (host checks), so every V quad and every 4-value K read is aligned.
@group(0) @binding(2) var<storage, read> k_pool: array<KV_W16>;
@group(0) @binding(3) var<storage, read> v_pool: array<KV_V4>;
@group(0) @binding(4) var<storage, read> head_map: array<u32>;
@group(0) @binding(5) var<storage, read> page_indptr: array<u32>;
@group(0) @binding(6) var<storage, read> page_table: array<u32>;
@group(0) @binding(7) var<storage, read> kv_len: array<u32>;
@group(0) @binding(8) var<storage, read> ring_table: array<u32>;
@group(0) @binding(9) var<storage, read> selected: array<u32>;
@group(0) @binding(10) var<storage, read> counts: array<u32>;
@group(0) @binding(11) var<storage, read> seq_slot: array<u32>;
@group(0) @binding(12) var<storage, read> tail_start: array<u32>;
@group(0) @binding(13) var<storage, read_write> out: array<f32>;
@group(0) @binding(14) var<storage, read_write> part: array<f32>;

const WG: u32 = 128u;
const GMAX: u32 = 8u;
const NONE: u32 = 0xffffffffu;

var<workgroup> qs: array<vec4<f32>, 512>;  // [GMAX][hv] scaled queries, hv = ceil(hd / 32) * 8
// sc, kb and ks are double-buffered by chunk parity, so a chunk's writes cannot meet the previous
// chunk's P.V reads and the chunk loop needs no barrier at its end.
var<workgroup> sc: array<vec4<f32>, 512>;  // [2][key][2]: scores, then probabilities, heads 0-3 | 4-7
var<workgroup> kb: array<u32, 256>;        // [2][key]: V row of each chunk key (kvrow_v_pool .x; row 0 if masked)
var<workgroup> ks: array<u32, 256>;        // [2][key]: its .y (8-bit: the row scale's bits)
var<workgroup> red: array<vec4<f32>, 32>;  // [16][2] partial maxima / sums
var<workgroup> nsel_w: atomic<u32>;
var<workgroup> nsel_u: u32;
var<workgroup> kvh_w: u32;                 // 1 + the KV head of this workgroup (0: none; zero-initialised)

fn window_lo(pos: u32) -> u32 {
    if (p.window == 0u || pos + 1u <= p.window) { return 0u; }
    return pos + 1u - p.window;
}

// What a workgroup's key list is; every field is workgroup-uniform.
struct List {
    streaming: bool,
    hi: u32,
    s: u32,
    len: u32,
    wlo: u32,
    nsel: u32,      // retrieval: selected entries used, at sel_base
    sel_base: u32,
    tail0: u32,     // first tail page
    a0: u32,        // streaming: sink range a0..a0+na, then b0..
    na: u32,
    b0: u32,
}

fn slot_offset(ls: List, slot: u32) -> u32 {
    let ps = p.page_size;
    if (ls.streaming) {
        var pos = ls.a0 + slot;
        if (slot >= ls.na) { pos = ls.b0 + (slot - ls.na); }
        let r = ring_index(pos, p.sink, p.ring_tokens);
        let at = ls.s * (p.ring_tokens / ps) + r / ps;
        if (at >= arrayLength(&ring_table)) { return NONE; }
        let page = ring_table[at];
        if (page >= p.num_str_pages) { return NONE; }
        return ((page * p.n_str + ls.hi) * ps + r % ps) * p.head_dim;
    }
    let e = slot / ps;
    let off = slot % ps;
    var j = ls.tail0 + (e - ls.nsel);
    if (e < ls.nsel) { j = selected[ls.sel_base + e]; }
    if (j >= (ls.len + ps - 1u) / ps) { return NONE; }
    let pos = j * ps + off;
    let at = page_indptr[ls.s] + j;
    if (pos >= ls.len || pos < ls.wlo || at >= page_indptr[ls.s + 1u] || at >= arrayLength(&page_table)) { return NONE; }
    let page = page_table[at];
    if (page >= p.num_pages) { return NONE; }
    return ((page * p.n_ret + ls.hi) * ps + off) * p.head_dim;
}

// Dot of head g's query (16 values from vec4 index c) with four K vec4s.
fn qdot(g: u32, hv: u32, c: u32, a: vec4<f32>, b: vec4<f32>, x: vec4<f32>, y: vec4<f32>) -> f32 {
    let i = g * hv + c;
    return dot(qs[i], a) + dot(qs[i + 1u], b) + dot(qs[i + 2u], x) + dot(qs[i + 3u], y);
}

// qdot for heads g0..g0+4.
fn dots(g0: u32, hv: u32, c: u32, a: vec4<f32>, b: vec4<f32>, x: vec4<f32>, y: vec4<f32>) -> vec4<f32> {
    return vec4(qdot(g0, hv, c, a, b, x, y), qdot(g0 + 1u, hv, c, a, b, x, y), qdot(g0 + 2u, hv, c, a, b, x, y), qdot(g0 + 3u, hv, c, a, b, x, y));
}

// Chunks [x, y) of a list of n slots taken by split i of ns: chunk i while there are at most ns
// chunks (splits past the count get none, so a split at or past an upper bound of it has none
// either), else floor(i C / ns)..floor((i + 1) C / ns), every split busy and at most
// ceil(C / ns) each.
fn split_chunks(n: u32, i: u32, ns: u32) -> vec2<u32> {
    let c = (n + WG - 1u) / WG;
    if (c <= ns) { return vec2(i, i + 1u); }
    return vec2(i * c / ns, (i + 1u) * c / ns);
}

// Scores of one key, heads 0-3 | 4-7.
struct Scores {
    a: vec4<f32>,
    b: vec4<f32>,
}

// Scores of the K row at pool offset o, read as 16-byte words (the row starts on a word:
// hd % KV_WORD == 0), each word clamped to the row's last (past head_dim the query is zero).
fn score_words(o: u32, hd: u32, hv: u32, hi_heads: bool) -> Scores {
    let r = kvrow_k_pool(o);
    let last = hd - KV_WORD;
    var s: Scores;
    for (var c = 0u; c < hv; c = c + 8u) {
        let i = c * 4u;
        let x = kv16_k_pool(r, i, last);
        let y = kv16_k_pool(r, i + 16u, last);
        s.a = s.a + dots(0u, hv, c, x[0], x[1], x[2], x[3]) + dots(0u, hv, c + 4u, y[0], y[1], y[2], y[3]);
        if (hi_heads) { s.b = s.b + dots(4u, hv, c, x[0], x[1], x[2], x[3]) + dots(4u, hv, c + 4u, y[0], y[1], y[2], y[3]); }
    }
    return s;
}

// score_words from 4-value reads clamped to the row's last four (16-bit rows off a word).
fn score_quads(o: u32, hd: u32, hv: u32, hi_heads: bool) -> Scores {
    let lim = o + hd - 4u;
    var s: Scores;
    for (var c = 0u; c < hv; c = c + 8u) {
        let i = o + c * 4u;
        let x0 = kv4_k_pool(min(i, lim));
        let x1 = kv4_k_pool(min(i + 4u, lim));
        let x2 = kv4_k_pool(min(i + 8u, lim));
        let x3 = kv4_k_pool(min(i + 12u, lim));
        let x4 = kv4_k_pool(min(i + 16u, lim));
        let x5 = kv4_k_pool(min(i + 20u, lim));
        let x6 = kv4_k_pool(min(i + 24u, lim));
        let x7 = kv4_k_pool(min(i + 28u, lim));
        s.a = s.a + dots(0u, hv, c, x0, x1, x2, x3) + dots(0u, hv, c + 4u, x4, x5, x6, x7);
        if (hi_heads) { s.b = s.b + dots(4u, hv, c, x0, x1, x2, x3) + dots(4u, hv, c + 4u, x4, x5, x6, x7); }
    }
    return s;
}

// V dims d..d+4 of chunk key j of kb buffer kbb (clamped to the chunk; masked keys read row 0:
// probability 0).
fn vq(kbb: u32, j: u32, d: u32) -> vec4<f32> {
    let at = kbb + min(j, WG - 1u);
    return kv4_v_pool(vec2(kb[at], ks[at]), d);
}

// Probabilities of chunk key j for heads half h (0 past the chunk), h offset by the sc buffer.
fn pr(j: u32, h: u32) -> vec4<f32> {
    return select(vec4(0.0), sc[2u * min(j, WG - 1u) + h], j < WG);
}

// Accumulator (dims x heads) times the per-head factors f.
fn rescale(a: mat4x4<f32>, f: vec4<f32>) -> mat4x4<f32> {
    return mat4x4(a[0] * f.x, a[1] * f.y, a[2] * f.z, a[3] * f.w);
}

// Long (about 240 lines) on purpose: the entry point's phases (key list, K/V chunks, scores, online
// softmax, P.V, output) share its workgroup memory and per-invocation state, and the body reads in
// the order it runs.
@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = lid.x;
    let hd = p.head_dim;
    let nh = p.n_heads;
    let ps = p.page_size;
    let group = nh / p.n_kv_heads;
    let hchunks = (group + GMAX - 1u) / GMAX;
    let s = wg.z;
    let g0 = (wg.y % hchunks) * GMAX;
    let ng = min(GMAX, group - g0);
    let split = wg.x;
    let n_splits = nwg.x;
    let hv = (hd + 31u) / 32u * 8u;
    // This pass's head: streaming heads when recorded with n_ret = 0, else retrieval heads.
    let streaming = p.n_ret == 0u;
    let hi = wg.y / hchunks;
    if (hi >= select(p.n_ret, p.n_str, streaming)) { return; }
    let want = select(hi, hi | STREAMING_BIT, streaming);
    for (var k = t; k < p.n_kv_heads; k = k + WG) {
        if (head_map[k] == want) { kvh_w = k + 1u; }
    }
    let kvh1 = workgroupUniformLoad(&kvh_w);
    if (kvh1 == 0u) { return; }
    let kvh = kvh1 - 1u;
    let h0 = kvh * group + g0;

    // This head's key list.
    var ls: List;
    ls.streaming = streaming;
    ls.hi = hi;
    ls.s = s;
    ls.len = kv_len[s];
    let pos = max(ls.len, 1u) - 1u;
    ls.wlo = window_lo(pos);
    ls.a0 = ls.wlo;
    let a1 = min(p.sink, pos + 1u);
    ls.na = select(0u, a1 - ls.a0, a1 > ls.a0);
    let recent = select(0u, pos + 1u - p.local, pos + 1u > p.local);
    ls.b0 = max(max(p.sink, ls.wlo), recent);
    let n_str_slots = ls.na + select(0u, pos + 1u - ls.b0, pos + 1u > ls.b0);
    // Retrieval: the selected entries below tail_start (first one at or above it, in parallel).
    let n_pages = (ls.len + ps - 1u) / ps;
    let tail = tail_start[s];
    ls.tail0 = min(tail, n_pages);
    let ci = seq_slot[s] * p.n_ret + ls.hi;
    ls.sel_base = ci * p.sel_stride;
    var cnt = 0u;
    if (!ls.streaming && ci < arrayLength(&counts) && ls.sel_base < arrayLength(&selected)) {
        cnt = min(min(counts[ci], p.sel_stride), arrayLength(&selected) - ls.sel_base);
    }
    // A split at or past the list's chunk count (bounded with every selected entry) gets no keys
    // (see split_chunks): it reports (m, l) = (-inf, 0) before reading queries or the selection.
    var n_up = select((cnt + n_pages - ls.tail0) * ps, n_str_slots, ls.streaming);
    if (ls.len == 0u) { n_up = 0u; }
    if (n_splits > 1u && t == 0u && split == 0u) { part[0] = bitcast<f32>(n_splits); }
    if (n_splits > 1u && split * WG >= n_up) {
        if (t < ng) {
            let at = 4u + ((s * nh + h0 + t) * n_splits + split) * (hd + 2u) + hd;
            part[at] = NEG_INF;
            part[at + 1u] = 0.0;
        }
        return;
    }

    // Queries, zero past head_dim and for absent heads.
    for (var i = t; i < GMAX * hv; i = i + WG) {
        let g = i / hv;
        let d = (i % hv) * 4u;
        let at = (s * nh + h0 + min(g, ng - 1u)) * hd;
        var x = vec4(0.0);
        for (var c = 0u; c < 4u; c = c + 1u) {
            if (g < ng && d + c < hd) { x[c] = q[at + d + c] * p.scale; }
        }
        qs[i] = x;
    }

    if (t == 0u) { atomicStore(&nsel_w, cnt); }
    workgroupBarrier();
    for (var i = t; i < cnt; i = i + WG) {
        if (selected[ls.sel_base + i] >= tail) { atomicMin(&nsel_w, i); }
    }
    workgroupBarrier();
    if (t == 0u) { nsel_u = atomicLoad(&nsel_w); }
    ls.nsel = workgroupUniformLoad(&nsel_u);
    var n_slots = select((ls.nsel + n_pages - ls.tail0) * ps, n_str_slots, ls.streaming);
    if (ls.len == 0u) { n_slots = 0u; }
    let r = split_chunks(n_slots, split, n_splits);
    let b = min(r.x * WG, n_slots);
    let e = min(r.y * WG, n_slots);
    if (b >= e && n_splits > 1u) {
        if (t < ng) {
            let at = 4u + ((s * nh + h0 + t) * n_splits + split) * (hd + 2u) + hd;
            part[at] = NEG_INF;
            part[at + 1u] = 0.0;
        }
        return;
    }

    // P.V mapping: thread (key group kg, dim lane dl) owns dims 4 dl..4 dl + 3 of every head.
    let dq = hd / 4u;
    let kgn = WG / dq;
    let kg = t / dq;
    let dl = t % dq;
    let hi_heads = ng > 4u;
    let wide = hd % KV_WORD == 0u;
    var mA = vec4(NEG_INF);
    var mB = vec4(NEG_INF);
    var lA = vec4(0.0);  // partial sums of threads t < 16
    var lB = vec4(0.0);
    var aA = mat4x4<f32>();  // [head 0-3][dim 4 dl + i]
    var aB = mat4x4<f32>();  // heads 4-7

    for (var c0 = b; c0 < e; c0 = c0 + WG) {
        // Scores of this thread's key.
        var o = NONE;
        if (c0 + t < e) { o = slot_offset(ls, c0 + t); }
        let kbb = ((c0 - b) / WG) % 2u * WG;
        let sb = 2u * kbb;
        let vr = kvrow_v_pool(select(o, 0u, o == NONE));
        kb[kbb + t] = vr.x;
        ks[kbb + t] = vr.y;
        var sk: Scores;
        if (o != NONE) {
            if (wide) { sk = score_words(o, hd, hv, hi_heads); } else { sk = score_quads(o, hd, hv, hi_heads); }
        }
        let sA = sk.a;
        let sB = sk.b;
        let valid = o != NONE;
        sc[sb + 2u * t] = select(vec4(NEG_INF), sA, valid);
        sc[sb + 2u * t + 1u] = select(vec4(NEG_INF), sB, valid);
        workgroupBarrier();
        // Chunk maxima: 16 partials, then every thread.
        if (t < 16u) {
            var xA = vec4(NEG_INF);
            var xB = vec4(NEG_INF);
            for (var i = 0u; i < 8u; i = i + 1u) {
                xA = max(xA, sc[sb + 2u * (t + 16u * i)]);
                xB = max(xB, sc[sb + 2u * (t + 16u * i) + 1u]);
            }
            red[2u * t] = xA;
            red[2u * t + 1u] = xB;
        }
        workgroupBarrier();
        var nA = mA;
        var nB = mB;
        for (var i = 0u; i < 16u; i = i + 1u) {
            nA = max(nA, red[2u * i]);
            nB = max(nB, red[2u * i + 1u]);
        }
        let alA = exp(mA - nA);
        let alB = exp(mB - nB);
        mA = nA;
        mB = nB;
        sc[sb + 2u * t] = select(vec4(0.0), exp(sA - nA), valid);
        sc[sb + 2u * t + 1u] = select(vec4(0.0), exp(sB - nB), valid);
        workgroupBarrier();
        // Probability sums (16 partials) and P.V, 8 keys of this key group at a time.
        if (t < 16u) {
            lA = lA * alA;
            lB = lB * alB;
            for (var i = 0u; i < 8u; i = i + 1u) {
                lA = lA + sc[sb + 2u * (t + 16u * i)];
                lB = lB + sc[sb + 2u * (t + 16u * i) + 1u];
            }
        }
        aA = rescale(aA, alA);
        aB = rescale(aB, alB);
        let nk = min(WG, e - c0);
        let d = 4u * dl;
        for (var j = select(nk, kg, kg < kgn); j < nk; j = j + 8u * kgn) {
            let v0 = vq(kbb, j, d);
            let v1 = vq(kbb, j + kgn, d);
            let v2 = vq(kbb, j + 2u * kgn, d);
            let v3 = vq(kbb, j + 3u * kgn, d);
            let v4 = vq(kbb, j + 4u * kgn, d);
            let v5 = vq(kbb, j + 5u * kgn, d);
            let v6 = vq(kbb, j + 6u * kgn, d);
            let v7 = vq(kbb, j + 7u * kgn, d);
            let va = mat4x4(v0, v1, v2, v3);
            let vb = mat4x4(v4, v5, v6, v7);
            aA = aA + va * transpose(mat4x4(pr(j, sb), pr(j + kgn, sb), pr(j + 2u * kgn, sb), pr(j + 3u * kgn, sb)))
                + vb * transpose(mat4x4(pr(j + 4u * kgn, sb), pr(j + 5u * kgn, sb), pr(j + 6u * kgn, sb), pr(j + 7u * kgn, sb)));
            if (hi_heads) {
                aB = aB + va * transpose(mat4x4(pr(j, sb + 1u), pr(j + kgn, sb + 1u), pr(j + 2u * kgn, sb + 1u), pr(j + 3u * kgn, sb + 1u)))
                    + vb * transpose(mat4x4(pr(j + 4u * kgn, sb + 1u), pr(j + 5u * kgn, sb + 1u), pr(j + 6u * kgn, sb + 1u), pr(j + 7u * kgn, sb + 1u)));
            }
        }
    }

    // Row sums (16 partials through red); key groups 1.. add into group 0 through qs
    // ([kg][dl][head]), heads 0-3 then 4-7.
    if (t < 16u) {
        red[2u * t] = lA;
        red[2u * t + 1u] = lB;
    }
    let at_q = 4u * (kg * dq + dl);
    if (kg > 0u && kg < kgn) {
        for (var i = 0u; i < 4u; i = i + 1u) { qs[at_q + i] = aA[i]; }
    }
    workgroupBarrier();
    var sumA = vec4(0.0);
    var sumB = vec4(0.0);
    for (var i = 0u; i < 16u; i = i + 1u) {
        sumA = sumA + red[2u * i];
        sumB = sumB + red[2u * i + 1u];
    }
    if (kg == 0u) {
        for (var i = 1u; i < kgn; i = i + 1u) {
            let at = 4u * (i * dq + dl);
            aA = aA + mat4x4(qs[at], qs[at + 1u], qs[at + 2u], qs[at + 3u]);
        }
    }
    if (hi_heads) {
        workgroupBarrier();
        if (kg > 0u && kg < kgn) {
            for (var i = 0u; i < 4u; i = i + 1u) { qs[at_q + i] = aB[i]; }
        }
        workgroupBarrier();
        if (kg == 0u) {
            for (var i = 1u; i < kgn; i = i + 1u) {
                let at = 4u * (i * dq + dl);
                aB = aB + mat4x4(qs[at], qs[at + 1u], qs[at + 2u], qs[at + 3u]);
            }
        }
    }
    if (kg == 0u) {
        for (var g = 0u; g < ng; g = g + 1u) {
            let row = s * nh + h0 + g;
            let hA = g < 4u;
            let gi = g % 4u;
            let l = select(sumB[gi], sumA[gi], hA);
            let x = select(aB[gi], aA[gi], hA);
            if (n_splits == 1u) {
                let inv = select(0.0, 1.0 / l, l > 0.0);
                for (var i = 0u; i < 4u; i = i + 1u) { out[row * hd + 4u * dl + i] = x[i] * inv; }
            } else {
                let at = 4u + (row * n_splits + split) * (hd + 2u);
                for (var i = 0u; i < 4u; i = i + 1u) { part[at + 4u * dl + i] = x[i]; }
                if (dl == 0u) {
                    part[at + hd] = select(mB[gi], mA[gi], hA);
                    part[at + hd + 1u] = l;
                }
            }
        }
    }
}
