// sparse_decode_attention: one query per sequence (position kv_len - 1), split-KV ("flash
// decoding"). Each workgroup handles (split wg.x, KV head and head chunk wg.y, sequence wg.z): the
// query heads h0..h0+ng of one KV head (ng <= GMAX, so GQA groups share every K/V load) over its
// share of the head's key list, with online softmax over chunks of WG keys.
//
// Layouts: q/out [num_seqs][n_heads][head_dim]; pools, head_map, page_indptr/page_table, kv_len,
// ring_table as in prefill_attention.wgsl; selected [slot][n_ret][sel_stride], counts
// [slot][n_ret], seq_slot/tail_start [num_seqs]. part [num_seqs][n_heads][n_splits][head_dim + 2]:
// un-normalised accumulator, then the running max m and sum l (merged by
// sparse_decode_attention_merge). n_splits = nwg.x; with one split the result goes straight to
// `out` and `part` is not touched.
//
// Key list ("slots"): retrieval heads: the selected pages below tail_start (a prefix: the list is
// ascending), then pages tail_start..n_pages, page_size slots each (slot -> position
// page * page_size + offset, kept when < kv_len and within the window). Streaming heads: the Lambda
// mask, positions wlo..sink then max(sink, wlo, pos + 1 - local)..=pos, through the ring.
// Split i covers slots [i * per, (i + 1) * per), per = ceil(n_slots / n_splits).
//
// Per chunk (thread t = slot c0 + t): scores of all ng heads -> sc; per-row max (16 lanes per row,
// then one thread per row) -> row_m / rescale row_a; probabilities in place + row sums -> row_l;
// P.V with thread t owning outputs t + WG * k of the [ng][hd] block (V reads coalesced over d).

@group(0) @binding(0) var<uniform> p: AttentionParams;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k_pool: array<f32>;
@group(0) @binding(3) var<storage, read> v_pool: array<f32>;
@group(0) @binding(4) var<storage, read> sk_pool: array<f32>;
@group(0) @binding(5) var<storage, read> sv_pool: array<f32>;
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
const GMAX: u32 = 8u;
const NONE: u32 = 0xffffffffu;

var<workgroup> qs: array<f32, 2048>;  // [ng][hd] scaled queries
var<workgroup> sc: array<f32, 1024>;  // [GMAX][WG] scores, then probabilities
var<workgroup> kb: array<u32, 128>;   // pool offset of each chunk key, NONE if masked/absent
var<workgroup> red: array<f32, 128>;  // [GMAX][16] partial maxima / sums
var<workgroup> row_m: array<f32, 8>;
var<workgroup> row_l: array<f32, 8>;
var<workgroup> row_a: array<f32, 8>;

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
    // retrieval
    nsel: u32,
    sel_base: u32,
    tail0: u32,
    // streaming
    a0: u32,
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

fn key_at(streaming: bool, o: u32) -> f32 {
    if (streaming) { return sk_pool[o]; }
    return k_pool[o];
}

fn val_at(streaming: bool, o: u32) -> f32 {
    if (streaming) { return sv_pool[o]; }
    return v_pool[o];
}

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = lid.x;
    let hd = p.head_dim;
    let nh = p.n_heads;
    let ps = p.page_size;
    let group = nh / p.n_kv_heads;
    let hchunks = (group + GMAX - 1u) / GMAX;
    let s = wg.z;
    let kvh = wg.y / hchunks;
    let g0 = (wg.y % hchunks) * GMAX;
    let ng = min(GMAX, group - g0);
    let h0 = kvh * group + g0;
    let split = wg.x;
    let n_splits = nwg.x;

    // This head's key list.
    let hm = head_map[kvh];
    var ls: List;
    ls.streaming = (hm & STREAMING_BIT) != 0u;
    ls.hi = hm & ~STREAMING_BIT;
    ls.s = s;
    ls.len = kv_len[s];
    let pos = max(ls.len, 1u) - 1u;
    ls.wlo = window_lo(pos);
    var n_slots = 0u;
    if (ls.len == 0u) {
        n_slots = 0u;
    } else if (ls.streaming) {
        ls.a0 = ls.wlo;
        let a1 = min(p.sink, pos + 1u);
        ls.na = select(0u, a1 - ls.a0, a1 > ls.a0);
        let recent = select(0u, pos + 1u - p.local, pos + 1u > p.local);
        ls.b0 = max(max(p.sink, ls.wlo), recent);
        n_slots = ls.na + select(0u, pos + 1u - ls.b0, pos + 1u > ls.b0);
    } else {
        let n_pages = (ls.len + ps - 1u) / ps;
        let tail = tail_start[s];
        ls.tail0 = min(tail, n_pages);
        let ci = seq_slot[s] * p.n_ret + ls.hi;
        ls.sel_base = ci * p.sel_stride;
        var cnt = 0u;
        if (ci < arrayLength(&counts)) { cnt = min(counts[ci], p.sel_stride); }
        cnt = min(cnt, select(0u, arrayLength(&selected) - ls.sel_base, arrayLength(&selected) > ls.sel_base));
        var nsel = 0u;
        for (; nsel < cnt; nsel = nsel + 1u) {
            if (selected[ls.sel_base + nsel] >= tail) { break; }
        }
        ls.nsel = nsel;
        n_slots = (nsel + n_pages - ls.tail0) * ps;
    }
    let per = (n_slots + n_splits - 1u) / n_splits;
    let b = min(split * per, n_slots);
    let e = min(b + per, n_slots);

    for (var i = t; i < ng * hd; i = i + WG) { qs[i] = q[(s * nh + h0) * hd + i] * p.scale; }
    if (t < GMAX) {
        row_m[t] = NEG_INF;
        row_l[t] = 0.0;
        row_a[t] = 1.0;
    }
    workgroupBarrier();

    // P.V mapping: thread (key group kg, dim lane dl) owns dims dl and dl + dn of every head.
    let dn = min(hd, WG);
    let kgn = WG / dn;
    let kg = t / dn;
    let dl = t % dn;
    let two = hd > dn;
    let rg = t / 16u;
    let rl = t % 16u;
    var acc: array<f32, 16>;  // [GMAX][2]
    for (var k = 0u; k < 16u; k = k + 1u) { acc[k] = 0.0; }

    for (var c0 = b; c0 < e; c0 = c0 + WG) {
        // Scores of this thread's key for every head, its row read 32 values at a time.
        var o = NONE;
        if (c0 + t < e) { o = slot_offset(ls, c0 + t); }
        kb[t] = o;
        var sg: array<f32, 8>;
        for (var g = 0u; g < GMAX; g = g + 1u) { sg[g] = 0.0; }
        if (o != NONE) {
            for (var d0 = 0u; d0 < hd; d0 = d0 + 32u) {
                var kr: array<f32, 32>;
                for (var u = 0u; u < 32u; u = u + 1u) { kr[u] = key_at(ls.streaming, o + min(d0 + u, hd - 1u)); }
                for (var u = 0u; u < 32u; u = u + 1u) {
                    let d = d0 + u;
                    if (d < hd) {
                        for (var g = 0u; g < GMAX; g = g + 1u) {
                            if (g < ng) { sg[g] = sg[g] + qs[g * hd + d] * kr[u]; }
                        }
                    }
                }
            }
        }
        for (var g = 0u; g < GMAX; g = g + 1u) {
            if (g < ng) { sc[g * WG + t] = select(NEG_INF, sg[g], o != NONE); }
        }
        workgroupBarrier();
        // Row maxima: 16 lanes per row, then one thread per row.
        if (rg < ng) {
            var mx = NEG_INF;
            for (var i = 0u; i < WG / 16u; i = i + 1u) { mx = max(mx, sc[rg * WG + rl + 16u * i]); }
            red[t] = mx;
        }
        workgroupBarrier();
        if (t < ng) {
            var mc = NEG_INF;
            for (var i = 0u; i < 16u; i = i + 1u) { mc = max(mc, red[t * 16u + i]); }
            let mn = max(row_m[t], mc);
            row_a[t] = exp(row_m[t] - mn);
            row_m[t] = mn;
        }
        workgroupBarrier();
        // Probabilities in place, row sums.
        if (rg < ng) {
            let mn = row_m[rg];
            var sum = 0.0;
            for (var i = 0u; i < WG / 16u; i = i + 1u) {
                let j = rg * WG + rl + 16u * i;
                let x = sc[j];
                let pj = select(0.0, exp(x - mn), x > NEG_INF);
                sc[j] = pj;
                sum = sum + pj;
            }
            red[t] = sum;
        }
        workgroupBarrier();
        if (t < ng) {
            var sum = 0.0;
            for (var i = 0u; i < 16u; i = i + 1u) { sum = sum + red[t * 16u + i]; }
            row_l[t] = row_l[t] * row_a[t] + sum;
        }
        // P.V: keys kg, kg + kgn, ... of the chunk, 16 at a time (loads first, then FMAs).
        for (var g = 0u; g < GMAX; g = g + 1u) {
            if (g < ng) {
                acc[2u * g] = acc[2u * g] * row_a[g];
                acc[2u * g + 1u] = acc[2u * g + 1u] * row_a[g];
            }
        }
        let nk = min(WG, e - c0);
        for (var j0 = select(nk, kg, kg < kgn); j0 < nk; j0 = j0 + 16u * kgn) {
            var vr: array<f32, 32>;  // [16 keys][2 dims]
            for (var u = 0u; u < 16u; u = u + 1u) {
                let ko = kb[min(j0 + kgn * u, nk - 1u)];
                let base = select(ko, 0u, ko == NONE);
                vr[2u * u] = val_at(ls.streaming, base + dl);
                if (two) { vr[2u * u + 1u] = val_at(ls.streaming, base + min(dl + dn, hd - 1u)); }
            }
            for (var u = 0u; u < 16u; u = u + 1u) {
                let j = j0 + kgn * u;
                if (j < nk && kb[j] != NONE) {
                    for (var g = 0u; g < GMAX; g = g + 1u) {
                        if (g < ng) {
                            let pg = sc[g * WG + j];
                            acc[2u * g] = acc[2u * g] + pg * vr[2u * u];
                            acc[2u * g + 1u] = acc[2u * g + 1u] + pg * vr[2u * u + 1u];
                        }
                    }
                }
            }
        }
        workgroupBarrier();
    }

    // Sum the key groups (through sc, [kg][ng][hd]) when there are several.
    if (kgn > 1u) {
        for (var g = 0u; g < GMAX; g = g + 1u) {
            if (g < ng && kg < kgn) { sc[(kg * ng + g) * hd + dl] = acc[2u * g]; }
        }
        workgroupBarrier();
        if (kg == 0u) {
            for (var g = 0u; g < GMAX; g = g + 1u) {
                if (g < ng) {
                    var a = 0.0;
                    for (var i = 0u; i < kgn; i = i + 1u) { a = a + sc[(i * ng + g) * hd + dl]; }
                    acc[2u * g] = a;
                }
            }
        }
    }
    if (kg == 0u) {
        for (var g = 0u; g < GMAX; g = g + 1u) {
            for (var x = 0u; x < 2u; x = x + 1u) {
                let d = dl + dn * x;
                if (g < ng && d < hd) {
                    let row = s * nh + h0 + g;
                    if (n_splits == 1u) {
                        let l = row_l[g];
                        out[row * hd + d] = select(0.0, acc[2u * g + x] / l, l > 0.0);
                    } else {
                        part[(row * n_splits + split) * (hd + 2u) + d] = acc[2u * g + x];
                    }
                }
            }
        }
    }
    if (n_splits > 1u && t < ng) {
        let at = ((s * nh + h0 + t) * n_splits + split) * (hd + 2u) + hd;
        part[at] = row_m[t];
        part[at + 1u] = row_l[t];
    }
}
