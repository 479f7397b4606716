// sparse_decode_attention_kv16: the split-KV decode attention of sparse_decode_attention.wgsl
// (same contract: key lists, splits, `part` layout, the merge) for 16-bit pools and head_dim 16,
// 32, 64 or 128, built for latency: one dispatch for both head kinds, every K and V load of a
// chunk issued before the first use, and no serial load loops.
//
// Workgroup (split wg.x, KV head and head chunk wg.y, sequence wg.z) takes the query heads
// h0..h0+ng of one KV head (ng <= GMAX, prepended by shaders.rs: 4, or 8 for measuring; the
// accumulators and stores of heads 4-7 fold away at 4) over its split of the head's key list, in chunks of CK = 64
// keys. The head's kind picks the pools: retrieval heads read k_pool/v_pool, streaming heads
// sk_pool/sv_pool, through two copies of the chunk loop (`run_ret`, `run_str`: shaders.rs
// instantiates shaders/sparse_decode_attention_kv16_run.wgsl once per kind), so no load sits
// behind a pool choice. Split i covers slots [i * per, (i + 1) * per), per = max(ceil(n_slots /
// n_splits), CK).
//
// Per chunk (W = head_dim / 8 16-byte words a row):
// - threads t < CK locate key c0 + t (kb[t]: the row's element offset, NONE if masked/absent);
// - K: thread t scores key t / 2 against every head with half its row (W / 2 words, t % 2 the
//   half; query words past the half read a zero word of qs); V: thread (key group kg = t / W,
//   dim word dw = t % W) loads word dw of keys kg, kg + 128 / W, ... (W / 2 keys). Both sets of
//   loads are issued together, right after kb is known: one round trip a chunk.
// - the halves' partial scores are summed (sc -> ss), online softmax over the chunk (16 partial
//   maxima and sums, as sparse_decode_attention.wgsl), P.V into registers: a_g / b_g hold dims
//   8 dw .. 8 dw + 3 / + 7 of head g.
// At the end the key groups are summed through workgroup memory, a head at a time, and thread
// d < head_dim writes dim d (to `out` with one split, else its `part` row).
//
// CUT (prepended by shaders.rs, 0 unless `LSERVE_WGPU_KV16_CUT` asks for a timing ablation)
// ends the kernel after a phase (1: the key list's loads, 2: its selection scan, 3: the first
// chunk's key offsets, 4: its K/V loads, 5: the chunk loop), writing one value a thread that
// depends on that phase, so the phase is not optimised away: measurement only, wrong results.
//
// Layouts: q/out [num_seqs][n_heads][head_dim] f32; pools [page][heads][page_size][head_dim] as
// 16-byte words (KV_K4 = vec4<u32>, 8 values: f16 or bf16 by KV_KIND); the rest as in
// sparse_decode_attention.wgsl.

@group(0) @binding(0) var<uniform> p: AttentionParams;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k_pool: array<KV_K4>;
@group(0) @binding(3) var<storage, read> v_pool: array<KV_K4>;
@group(0) @binding(4) var<storage, read> sk_pool: array<KV_K4>;
@group(0) @binding(5) var<storage, read> sv_pool: array<KV_K4>;
@group(0) @binding(6) var<storage, read> head_map: array<u32>;
@group(0) @binding(7) var<storage, read> page_indptr: array<u32>;
@group(0) @binding(8) var<storage, read> page_table: array<u32>;
@group(0) @binding(9) var<storage, read> kv_len: array<u32>;
@group(0) @binding(10) var<storage, read> ring_table: array<u32>;
@group(0) @binding(11) var<storage, read> selected: array<u32>;
@group(0) @binding(12) var<storage, read> counts: array<u32>;
@group(0) @binding(13) var<storage, read> seq_slot: array<u32>;
@group(0) @binding(14) var<storage, read> tail_start: array<u32>;
@group(0) @binding(15) var<storage, read_write> out: array<f32>;
@group(0) @binding(16) var<storage, read_write> part: array<f32>;

const WG: u32 = 128u;
const CK: u32 = 64u;
// Query words a head in qs: 16 (head_dim <= 128) and a zero word.
const QW: u32 = 17u;
const ZW: u32 = 16u;
const NONE: u32 = 0xffffffffu;

var<workgroup> qs: array<vec4<f32>, 272>; // [8][QW][2]: 8 scaled query values a word (heads >= ng zero)
var<workgroup> sc: array<vec4<f32>, 256>; // [thread][2] half-row scores (heads 0-3 | 4-7); the final sums
var<workgroup> ss: array<vec4<f32>, 128>; // [key][2] scores, then probabilities
var<workgroup> kb: array<u32, 64>;        // element offset of each chunk key's row, NONE if masked
var<workgroup> red: array<vec4<f32>, 32>; // [16][2] partial maxima / sums
var<workgroup> nsel_w: atomic<u32>;
var<workgroup> nsel_u: u32;

fn kv16_unpack(w: vec4<u32>) -> array<vec4<f32>, 2> {
    if (KV_KIND == 1u) {
        return array(vec4(unpack2x16float(w.x), unpack2x16float(w.y)), vec4(unpack2x16float(w.z), unpack2x16float(w.w)));
    }
    return array(
        bitcast<vec4<f32>>(vec4(w.x << 16u, w.x & 0xffff0000u, w.y << 16u, w.y & 0xffff0000u)),
        bitcast<vec4<f32>>(vec4(w.z << 16u, w.z & 0xffff0000u, w.w << 16u, w.w & 0xffff0000u)),
    );
}

// The workgroup's heads and slots; workgroup-uniform.
struct Job {
    hd: u32,
    nh: u32,
    h0: u32,
    ng: u32,
    split: u32,
    n_splits: u32,
    b: u32,
    e: u32,
}

// Word c (< QW) of head g's query dotted with 8 K values.
fn qdot8(g: u32, c: u32, k: array<vec4<f32>, 2>) -> f32 {
    let i = 2u * (g * QW + c);
    return dot(qs[i], k[0]) + dot(qs[i + 1u], k[1]);
}

// qdot8 for heads g0..g0+4.
fn qdots(g0: u32, c: u32, w: vec4<u32>) -> vec4<f32> {
    let k = kv16_unpack(w);
    return vec4(qdot8(g0, c, k), qdot8(g0 + 1u, c, k), qdot8(g0 + 2u, c, k), qdot8(g0 + 3u, c, k));
}

// P.V accumulators of one thread: a_g / b_g are dims 8 dw .. + 3 / 8 dw + 4 .. + 7 of head g.
struct Acc {
    a0: vec4<f32>, a1: vec4<f32>, a2: vec4<f32>, a3: vec4<f32>,
    a4: vec4<f32>, a5: vec4<f32>, a6: vec4<f32>, a7: vec4<f32>,
    b0: vec4<f32>, b1: vec4<f32>, b2: vec4<f32>, b3: vec4<f32>,
    b4: vec4<f32>, b5: vec4<f32>, b6: vec4<f32>, b7: vec4<f32>,
}

// The online-softmax rescale of every head (al: heads 0-3, bl: heads 4-7).
fn acc_scale(c: Acc, al: vec4<f32>, bl: vec4<f32>, hi: bool) -> Acc {
    var r = c;
    r.a0 = c.a0 * al.x; r.a1 = c.a1 * al.y; r.a2 = c.a2 * al.z; r.a3 = c.a3 * al.w;
    r.b0 = c.b0 * al.x; r.b1 = c.b1 * al.y; r.b2 = c.b2 * al.z; r.b3 = c.b3 * al.w;
    if (hi) {
        r.a4 = c.a4 * bl.x; r.a5 = c.a5 * bl.y; r.a6 = c.a6 * bl.z; r.a7 = c.a7 * bl.w;
        r.b4 = c.b4 * bl.x; r.b5 = c.b5 * bl.y; r.b6 = c.b6 * bl.z; r.b7 = c.b7 * bl.w;
    }
    return r;
}

// One key's V word (8 dims) times its probabilities pa (heads 0-3) and pb (heads 4-7).
fn pv_add(c: Acc, w: vec4<u32>, pa: vec4<f32>, pb: vec4<f32>, hi: bool) -> Acc {
    let v = kv16_unpack(w);
    var r = c;
    r.a0 = c.a0 + pa.x * v[0]; r.b0 = c.b0 + pa.x * v[1];
    r.a1 = c.a1 + pa.y * v[0]; r.b1 = c.b1 + pa.y * v[1];
    r.a2 = c.a2 + pa.z * v[0]; r.b2 = c.b2 + pa.z * v[1];
    r.a3 = c.a3 + pa.w * v[0]; r.b3 = c.b3 + pa.w * v[1];
    if (hi) {
        r.a4 = c.a4 + pb.x * v[0]; r.b4 = c.b4 + pb.x * v[1];
        r.a5 = c.a5 + pb.y * v[0]; r.b5 = c.b5 + pb.y * v[1];
        r.a6 = c.a6 + pb.z * v[0]; r.b6 = c.b6 + pb.z * v[1];
        r.a7 = c.a7 + pb.w * v[0]; r.b7 = c.b7 + pb.w * v[1];
    }
    return r;
}

// 1 for a thread's P.V key i below hw (its keys a chunk), else 0.
fn live(i: u32, hw: u32) -> f32 {
    return select(0.0, 1.0, i < hw);
}

// Pool word of dim word dw of chunk key ji (a masked key reads row 0, weighed 0).
fn vword(ji: u32, dw: u32) -> u32 {
    let o = kb[ji];
    return select(0u, o / 8u, o != NONE) + dw;
}

// Query word of this thread's K word i: its half's word, or the zero word past the half.
fn qword(hh: u32, hw: u32, i: u32) -> u32 {
    return select(ZW, hh * hw + i, i < hw);
}

// Sum head g's dims over the key groups (lo / hi: this thread's dims 8 dw .. + 3 / + 7) and
// write them: `out` with one split, else the split's part row with its (m, l). Every thread of
// the workgroup calls it (it synchronises the workgroup).
fn put_head(j: Job, g: u32, lo: vec4<f32>, hi: vec4<f32>, m: f32, l: f32, t: u32) {
    workgroupBarrier();
    sc[2u * t] = lo;
    sc[2u * t + 1u] = hi;
    workgroupBarrier();
    let hd = j.hd;
    if (t >= hd) { return; }
    let w = hd / 8u;
    let dw = t / 8u;
    let half = (t / 4u) % 2u;
    let c = t % 4u;
    var x = 0.0;
    for (var kg = 0u; kg < WG / w; kg = kg + 1u) {
        x = x + sc[2u * (kg * w + dw) + half][c];
    }
    let row = j.h0 + g;
    if (j.n_splits == 1u) {
        out[row * hd + t] = x * select(0.0, 1.0 / l, l > 0.0);
    } else {
        let at = 4u + (row * j.n_splits + j.split) * (hd + 2u);
        part[at + t] = x;
        if (t == 0u) {
            part[at + hd] = m;
            part[at + hd + 1u] = l;
        }
    }
}

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = lid.x;
    let hd = p.head_dim;
    let nh = p.n_heads;
    let group = nh / p.n_kv_heads;
    let hchunks = (group + GMAX - 1u) / GMAX;
    let s = wg.z;
    let kvh = wg.y / hchunks;
    let g0 = (wg.y % hchunks) * GMAX;
    var j: Job;
    j.hd = hd;
    j.nh = nh;
    j.ng = min(GMAX, group - g0);
    j.h0 = s * nh + kvh * group + g0;
    j.split = wg.x;
    j.n_splits = nwg.x;
    let hm = head_map[kvh];

    // Queries: thread t takes word t % 16 of head t / 16 (zero past head_dim and for absent
    // heads); word ZW of every head is zero.
    {
        let g = t / 16u;
        let c = t % 16u;
        var a = vec4(0.0);
        var b = vec4(0.0);
        if (g < j.ng && 8u * c < hd) {
            let at = (j.h0 + g) * hd + 8u * c;
            a = vec4(q[at], q[at + 1u], q[at + 2u], q[at + 3u]) * p.scale;
            b = vec4(q[at + 4u], q[at + 5u], q[at + 6u], q[at + 7u]) * p.scale;
        }
        qs[2u * (g * QW + c)] = a;
        qs[2u * (g * QW + c) + 1u] = b;
        if (t < GMAX) {
            qs[2u * (t * QW + ZW)] = vec4(0.0);
            qs[2u * (t * QW + ZW) + 1u] = vec4(0.0);
        }
    }

    // This head's key list. Retrieval: the selected entries below tail_start (the first one at
    // or above it; the first 128 entries loaded beside counts).
    let tail = tail_start[s];
    let ci = seq_slot[s] * p.n_ret + (hm & ~STREAMING_BIT);
    var ls = list_begin(hm, s, tail, ci);
    let n_sel = arrayLength(&selected);
    let first = selected[min(ls.sel_base + t, max(n_sel, 1u) - 1u)];
    var cnt = 0u;
    if (!ls.streaming && ci < arrayLength(&counts) && ls.sel_base < n_sel) {
        cnt = min(min(counts[ci], p.sel_stride), n_sel - ls.sel_base);
    }
    if (t == 0u) { atomicStore(&nsel_w, cnt); }
    workgroupBarrier();
    if (t < cnt && first >= ls.tail0) { atomicMin(&nsel_w, t); }
    for (var i = t + WG; i < cnt; i = i + WG) {
        if (selected[ls.sel_base + i] >= ls.tail0) { atomicMin(&nsel_w, i); }
    }
    workgroupBarrier();
    if (CUT == 1u) {
        out[j.h0 * hd + t] = qs[2u * t].x + f32(first + cnt + tail + ls.len);
        return;
    }
    if (t == 0u) { nsel_u = atomicLoad(&nsel_w); }
    ls.nsel = workgroupUniformLoad(&nsel_u);
    if (CUT == 2u) {
        out[j.h0 * hd + t] = qs[2u * t].x + f32(ls.nsel);
        return;
    }
    let n_slots = list_slots(&ls);
    // Splits of at least one chunk; the ones left without keys only report (m, l) = (-inf, 0).
    let per = max((n_slots + j.n_splits - 1u) / j.n_splits, CK);
    j.b = min(j.split * per, n_slots);
    j.e = min(j.b + per, n_slots);
    if (j.n_splits > 1u && t == 0u && j.split == 0u) { part[0] = bitcast<f32>(j.n_splits); }
    if (j.b >= j.e && j.n_splits > 1u) {
        if (t < j.ng) {
            let at = 4u + ((j.h0 + t) * j.n_splits + j.split) * (hd + 2u) + hd;
            part[at] = NEG_INF;
            part[at + 1u] = 0.0;
        }
        return;
    }
    if (ls.streaming) {
        run_str(ls, j, t);
    } else {
        run_ret(ls, j, t);
    }
}
