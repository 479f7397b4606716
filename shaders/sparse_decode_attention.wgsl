// sparse_decode_attention: one query per sequence (position kv_len - 1), split-KV ("flash
// decoding"). Workgroup (split wg.x, KV head and head chunk wg.y, sequence wg.z) takes the query
// heads h0..h0+ng of one KV head (ng <= 8, so a GQA group shares every K/V load) over its share of
// the head's key list, online softmax over chunks of 128 keys.
//
// Layouts: q/out [num_seqs][n_heads][head_dim]; pools, head_map, page_indptr/page_table, kv_len,
// ring_table as in prefill_attention.wgsl; selected [slot][n_ret][sel_stride], counts
// [slot][n_ret], seq_slot/tail_start [num_seqs]. part: a 4-word header (word 0 = n_splits, u32
// bits), then [num_seqs][n_heads][n_splits][head_dim + 2]: un-normalised accumulator, the running
// max m and sum l (merged by sparse_decode_attention_merge). n_splits = nwg.x; with one split the
// result goes straight to `out` and `part` is not touched.
//
// One dispatch covers one head kind (the backend records a pass per kind present): k_pool/v_pool
// are the retrieval pool, or the streaming pool in the pass recorded with n_ret = 0; workgroups of
// the other kind's heads return at once. No branch picks a pool, so loads stay back to back.
//
// Key list ("slots"): retrieval heads: the selected units below tail_start (a prefix, the list
// being ascending), then units tail_start.. of the sequence's pages (decode_key_list.wgsl: units
// of sel_unit tokens, 0 meaning page_size), unit-size slots each (slot -> position
// unit * sel_unit + offset, kept when < kv_len and within the window). Streaming heads: the Lambda
// mask, positions wlo..sink then max(sink, wlo, pos + 1 - local)..=pos, through the ring.
// Split i covers slots [i * per, (i + 1) * per), per = max(ceil(n_slots / n_splits), 128).
//
// Per chunk: thread t scores slot c0 + t for all 8 head lanes (vec4 pairs; qs rows of absent heads
// and past head_dim are zero, so no lane needs a guard), reading its K row 32 values at a time
// as 16-byte vectors (16-bit pools with head_dim % 8 == 0: 64 at a time, 8 per 16-byte word);
// chunk max (16 partials); probabilities; P.V with thread (key group kg, dim lane dl) owning dims
// dl and dl + 128 of every head, V read 32 keys at a time (two 16-key blocks in flight).
// Accumulators are vec4 registers (no private arrays: loads are all issued before their first
// use).

@group(0) @binding(0) var<uniform> p: AttentionParams;
@group(0) @binding(1) var<storage, read> q: array<f32>;
// KV dtype accessors kv4_k_pool / kv8_k_pool / kv_v_pool (f32, f16, bf16, int8, fp8) come from the
// KV snippet (src/backend/wgpu/shaders.rs); KV_K4 is vec4<f32> for f32 pools, 16-byte words
// (vec4<u32>, 8 values) for 16-bit ones, else u32 words.
@group(0) @binding(2) var<storage, read> k_pool: array<KV_K4>; // head_dim % 4 == 0 (host checks)
@group(0) @binding(3) var<storage, read> v_pool: array<KV_EL>;
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

var<workgroup> qs: array<vec4<f32>, 512>;  // [GMAX][hv] scaled queries, hv = ceil(hd / 32) * 8 (or / 64 * 16)
var<workgroup> sc: array<vec4<f32>, 256>;  // [key][2]: scores, then probabilities, heads 0-3 | 4-7
var<workgroup> kb: array<u32, 128>;        // pool offset of each chunk key, NONE if masked/absent
var<workgroup> red: array<vec4<f32>, 32>;  // [16][2] partial maxima / sums
var<workgroup> nsel_w: atomic<u32>;
var<workgroup> nsel_u: u32;

// Four K values of a row from element `i` (a multiple of 4), clamped to the row's last vector
// `lim` (past head_dim the query is zero, so the clamped values add nothing).
fn k4(i: u32, lim: u32) -> vec4<f32> {
    return kv4_k_pool(min(i, lim));
}

// Eight K values from element `i` (a multiple of 8: head_dim % 8 == 0), clamped to the row's last
// 8 at `lim`.
fn k8(i: u32, lim: u32) -> array<vec4<f32>, 2> {
    return kv8_k_pool(min(i, lim));
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

// V of keys j..j+4 (offsets from kb; NONE reads offset 0, whose probability is 0) at dim d.
fn v4(j: u32, d: u32) -> vec4<f32> {
    let o = vec4(kb[j], kb[j + 1u], kb[j + 2u], kb[j + 3u]);
    let at = select(o, vec4(0u), o == vec4(NONE)) + d;
    return vec4(kv_v_pool(at.x), kv_v_pool(at.y), kv_v_pool(at.z), kv_v_pool(at.w));
}

// sum over keys j..j+4 of p(key, heads half h) * v, from sc index i = 2 j.
fn pv(i: u32, h: u32, v: vec4<f32>) -> vec4<f32> {
    return sc[i + h] * v.x + sc[i + 2u + h] * v.y + sc[i + 4u + h] * v.z + sc[i + 6u + h] * v.w;
}

// pv over the 16 keys j..j+16 (V of keys j.., j+4.., j+8.., j+12.. in a, b, c, d), from i = 2 j.
fn pv16(i: u32, h: u32, a: vec4<f32>, b: vec4<f32>, c: vec4<f32>, d: vec4<f32>) -> vec4<f32> {
    return pv(i, h, a) + pv(i + 8u, h, b) + pv(i + 16u, h, c) + pv(i + 24u, h, d);
}

// Long (about 240 lines) on purpose: the entry point's phases (key list, K/V chunks, scores, online
// softmax, P.V, output) share its workgroup memory and per-invocation state, and the body reads in
// the order it runs.
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
    let ng = min(GMAX, group - g0);
    let h0 = kvh * group + g0;
    let split = wg.x;
    let n_splits = nwg.x;
    // 16-bit pools with head_dim % 8 == 0 read K 64 values per step (8 words of 8), the others 32
    // (8 vec4s); the query rows are zero-padded to a whole step.
    let wide = hd % 8u == 0u && (KV_KIND == 1u || KV_KIND == 2u);
    let hv = select((hd + 31u) / 32u * 8u, (hd + 63u) / 64u * 16u, wide);
    // This pass's heads only: streaming heads when recorded with n_ret = 0, else retrieval heads.
    let hm = head_map[kvh];
    if (((hm & STREAMING_BIT) != 0u) != (p.n_ret == 0u)) { return; }

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

    // This head's key list.
    // Retrieval: the selected entries below tail_start (first one at or above it, in parallel).
    let tail = tail_start[s];
    let ci = seq_slot[s] * p.n_ret + (hm & ~STREAMING_BIT);
    var ls = list_begin(hm, s, tail, ci);
    var cnt = 0u;
    if (!ls.streaming && ci < arrayLength(&counts) && ls.sel_base < arrayLength(&selected)) {
        cnt = min(min(counts[ci], p.sel_stride), arrayLength(&selected) - ls.sel_base);
    }
    if (t == 0u) { atomicStore(&nsel_w, cnt); }
    workgroupBarrier();
    for (var i = t; i < cnt; i = i + WG) {
        if (selected[ls.sel_base + i] >= ls.tail0) { atomicMin(&nsel_w, i); }
    }
    workgroupBarrier();
    if (t == 0u) { nsel_u = atomicLoad(&nsel_w); }
    ls.nsel = workgroupUniformLoad(&nsel_u);
    let n_slots = list_slots(&ls);
    // Splits of at least one chunk; the ones left without keys only report (m, l) = (-inf, 0).
    let per = max((n_slots + n_splits - 1u) / n_splits, WG);
    let b = min(split * per, n_slots);
    let e = min(b + per, n_slots);
    if (n_splits > 1u && t == 0u && split == 0u) { part[0] = bitcast<f32>(n_splits); }
    if (b >= e && n_splits > 1u) {
        if (t < ng) {
            let at = 4u + ((s * nh + h0 + t) * n_splits + split) * (hd + 2u) + hd;
            part[at] = NEG_INF;
            part[at + 1u] = 0.0;
        }
        return;
    }

    // P.V mapping: thread (key group kg, dim lane dl) owns dims dl and dl + 128 of every head.
    let dn = min(hd, WG);
    let kgn = WG / dn;
    let kg = t / dn;
    let dl = t % dn;
    let two = hd > WG;
    let hi_heads = ng > 4u;
    var mA = vec4(NEG_INF);
    var mB = vec4(NEG_INF);
    var lA = vec4(0.0);  // partial sums of threads t < 16
    var lB = vec4(0.0);
    var aA = vec4(0.0);  // dim dl, heads 0-3 | 4-7
    var aB = vec4(0.0);
    var cA = vec4(0.0);  // dim dl + 128
    var cB = vec4(0.0);

    for (var c0 = b; c0 < e; c0 = c0 + WG) {
        // Scores of this thread's key, its row read 32 (wide: 64) values at a time.
        var o = NONE;
        if (c0 + t < e) { o = slot_offset(ls, c0 + t); }
        kb[t] = o;
        var sA = vec4(0.0);
        var sB = vec4(0.0);
        if (o != NONE && wide) {
            // 8 values per load (one 16-byte word): the lanes read different rows, so each load
            // instruction touches a line per lane; fewer, wider loads cost fewer, and 8 in flight
            // per step halve the round trips of the 32-value step.
            let lim = o + hd - 8u;
            for (var c = 0u; c < hv; c = c + 16u) {
                let i = o + c * 4u;
                let y0 = k8(i, lim);
                let y1 = k8(i + 8u, lim);
                let y2 = k8(i + 16u, lim);
                let y3 = k8(i + 24u, lim);
                let y4 = k8(i + 32u, lim);
                let y5 = k8(i + 40u, lim);
                let y6 = k8(i + 48u, lim);
                let y7 = k8(i + 56u, lim);
                sA = sA + dots(0u, hv, c, y0[0], y0[1], y1[0], y1[1]) + dots(0u, hv, c + 4u, y2[0], y2[1], y3[0], y3[1])
                    + dots(0u, hv, c + 8u, y4[0], y4[1], y5[0], y5[1]) + dots(0u, hv, c + 12u, y6[0], y6[1], y7[0], y7[1]);
                if (hi_heads) {
                    sB = sB + dots(4u, hv, c, y0[0], y0[1], y1[0], y1[1]) + dots(4u, hv, c + 4u, y2[0], y2[1], y3[0], y3[1])
                        + dots(4u, hv, c + 8u, y4[0], y4[1], y5[0], y5[1]) + dots(4u, hv, c + 12u, y6[0], y6[1], y7[0], y7[1]);
                }
            }
        } else if (o != NONE) {
            let lim = o + hd - 4u;
            for (var c = 0u; c < hv; c = c + 8u) {
                let i = o + c * 4u;
                let x0 = k4(i, lim);
                let x1 = k4(i + 4u, lim);
                let x2 = k4(i + 8u, lim);
                let x3 = k4(i + 12u, lim);
                let x4 = k4(i + 16u, lim);
                let x5 = k4(i + 20u, lim);
                let x6 = k4(i + 24u, lim);
                let x7 = k4(i + 28u, lim);
                sA = sA + dots(0u, hv, c, x0, x1, x2, x3) + dots(0u, hv, c + 4u, x4, x5, x6, x7);
                if (hi_heads) { sB = sB + dots(4u, hv, c, x0, x1, x2, x3) + dots(4u, hv, c + 4u, x4, x5, x6, x7); }
            }
        }
        let valid = o != NONE;
        sc[2u * t] = select(vec4(NEG_INF), sA, valid);
        sc[2u * t + 1u] = select(vec4(NEG_INF), sB, valid);
        workgroupBarrier();
        // Chunk maxima: 16 partials, then every thread.
        if (t < 16u) {
            var xA = vec4(NEG_INF);
            var xB = vec4(NEG_INF);
            for (var i = 0u; i < 8u; i = i + 1u) {
                xA = max(xA, sc[2u * (t + 16u * i)]);
                xB = max(xB, sc[2u * (t + 16u * i) + 1u]);
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
        sc[2u * t] = select(vec4(0.0), exp(sA - nA), valid);
        sc[2u * t + 1u] = select(vec4(0.0), exp(sB - nB), valid);
        workgroupBarrier();
        // Probability sums (16 partials) and P.V, 32 keys at a time.
        if (t < 16u) {
            lA = lA * alA;
            lB = lB * alB;
            for (var i = 0u; i < 8u; i = i + 1u) {
                lA = lA + sc[2u * (t + 16u * i)];
                lB = lB + sc[2u * (t + 16u * i) + 1u];
            }
        }
        aA = aA * alA;
        aB = aB * alB;
        cA = cA * alA;
        cB = cB * alB;
        let nk = min(WG, e - c0);
        // Two 16-key blocks of this key group per step, all their V loads issued before the first
        // use (32 per dim in flight); the second block (j2) is masked (m2 = 0, clamped into the
        // chunk) where it is past nk.
        let kstep = 16u * kgn;
        for (var j = select(nk, 16u * kg, kg < kgn); j < nk; j = j + 2u * kstep) {
            let j2 = min(j + kstep, WG - 16u);
            let m2 = select(0.0, 1.0, j + kstep < nk);
            let i = 2u * j;
            let i2 = 2u * j2;
            let va = v4(j, dl);
            let vb = v4(j + 4u, dl);
            let vc = v4(j + 8u, dl);
            let vd = v4(j + 12u, dl);
            let ua = v4(j2, dl);
            let ub = v4(j2 + 4u, dl);
            let uc = v4(j2 + 8u, dl);
            let ud = v4(j2 + 12u, dl);
            aA = aA + pv16(i, 0u, va, vb, vc, vd) + m2 * pv16(i2, 0u, ua, ub, uc, ud);
            if (hi_heads) { aB = aB + pv16(i, 1u, va, vb, vc, vd) + m2 * pv16(i2, 1u, ua, ub, uc, ud); }
            if (two) {
                let d = min(dl + WG, hd - 1u);
                let wa = v4(j, d);
                let wb = v4(j + 4u, d);
                let wc = v4(j + 8u, d);
                let wd = v4(j + 12u, d);
                let xa = v4(j2, d);
                let xb = v4(j2 + 4u, d);
                let xc = v4(j2 + 8u, d);
                let xd = v4(j2 + 12u, d);
                cA = cA + pv16(i, 0u, wa, wb, wc, wd) + m2 * pv16(i2, 0u, xa, xb, xc, xd);
                if (hi_heads) { cB = cB + pv16(i, 1u, wa, wb, wc, wd) + m2 * pv16(i2, 1u, xa, xb, xc, xd); }
            }
        }
        workgroupBarrier();
    }

    // Row sums; key groups summed through sc ([kg][dl][2]) when there are several.
    if (t < 16u) {
        red[2u * t] = lA;
        red[2u * t + 1u] = lB;
    }
    if (kgn > 1u && kg < kgn) {
        sc[2u * t] = aA;
        sc[2u * t + 1u] = aB;
    }
    workgroupBarrier();
    var sumA = vec4(0.0);
    var sumB = vec4(0.0);
    for (var i = 0u; i < 16u; i = i + 1u) {
        sumA = sumA + red[2u * i];
        sumB = sumB + red[2u * i + 1u];
    }
    if (kgn > 1u && kg == 0u) {
        for (var i = 1u; i < kgn; i = i + 1u) {
            aA = aA + sc[2u * (i * dn + dl)];
            aB = aB + sc[2u * (i * dn + dl) + 1u];
        }
    }
    if (kg == 0u) {
        for (var g = 0u; g < ng; g = g + 1u) {
            let row = s * nh + h0 + g;
            let hA = g < 4u;
            let gi = g % 4u;
            let l = select(sumB[gi], sumA[gi], hA);
            let x = select(aB[gi], aA[gi], hA);
            let y = select(cB[gi], cA[gi], hA);
            if (n_splits == 1u) {
                let inv = select(0.0, 1.0 / l, l > 0.0);
                out[row * hd + dl] = x * inv;
                if (two && dl + WG < hd) { out[row * hd + dl + WG] = y * inv; }
            } else {
                let at = 4u + (row * n_splits + split) * (hd + 2u);
                part[at + dl] = x;
                if (two && dl + WG < hd) { part[at + dl + WG] = y; }
                if (dl == 0u) {
                    part[at + hd] = select(mB[gi], mA[gi], hA);
                    part[at + hd + 1u] = l;
                }
            }
        }
    }
}
