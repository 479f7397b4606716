// prefill_attention_coop: the prefill_attention op (causal flash attention of each sequence's new
// tokens over its cached context, as shaders/prefill_attention.wgsl and the CPU reference) on
// cooperative matrices (wgpu's EXPERIMENTAL_COOPERATIVE_MATRIX, 16x16x16 f16 x f16 -> f32, subgroup
// size 32, as shaders/matmul_coop.wgsl), for 16-bit KV pools and head_dim HD = 64 or 128 (the
// module's constant; ops_attention.rs picks this kernel and the scalar one otherwise, and for
// block lists). f16 KV is read as f16 (exact); bf16 values are converted to f16, exact inside
// f16's range (saturated at +-65504; below 2^-14 the driver's conversion rounds). Q (f32) is
// multiplied by scale * log2(e) and converted to f16, P is converted to f16; S and O accumulate
// in f32 (conversions are the implementation's round-to-nearest, within the 16-bit KV parity
// tolerance).
//
// Layouts: as prefill_attention.wgsl (q/out [n_tokens][n_heads][HD], bound here as vec4 / f32;
// 16-bit pools as 16-byte words of 8 values: `kvh8_<pool>(i)`, i % 8 == 0, from the KV snippet).
//
// Mapping: one workgroup of WG = 128 threads = 4 subgroups of 32 per (tile, KV head): KV head =
// wg.z; tiles are BR = 64 query rows of one sequence, rows flattened (token, head of the KV
// head's group) token-major as the scalar kernel does, sequence s owning ceil(nq(s) * group / 64)
// tiles after those of sequences < s; tile = total - 1 - (wg.x + wg.y * nwg.x), so the last
// rows (the most keys) start first; extra workgroups exit at once. Subgroup sg owns rows
// 16 sg .. 16 sg + 15: its Q as HD / 16 A fragments (loaded once), its O as HD / 16 f32
// accumulators o0..o7.
//
// Keys: tiles of BK = 64 keys aligned to multiples of 64 in position, covering the visible set:
// retrieval heads [wlo(first row), last row]; streaming heads the sink [.., sink) and the band
// [first row + 1 - local, last row] (both clipped to the window), two tile ranges merged when
// they touch, so tiles between sink and band are never visited. A tile key outside those ranges
// (or not addressable) has offset NONE, is staged as zeros and masked. Per tile:
//  1. K (staged in registers during the previous tile) -> kv, f16 rows of SK = HD + 8 halves;
//  2. V loads issued; S = Q K^T (coopLoad of K^T: column-major) per subgroup, 16 x 64, to ss;
//  3. V -> kv; online softmax by the threads, thread (row 16 sg + lane / 2, keys h + 2 jj, h =
//     lane % 2), in the exp2 domain: the per-element mask (k <= pos, k >= wlo(pos), Lambda for
//     streaming heads, key present, row in range) only on tiles not wholly visible to every row;
//     P = exp2(s - m) to pp as f16; the next tile's key offsets;
//  4. the next tile's K loads issued; O rescaled if needed; O += P V (V row-major: coopLoadT).
// Rescale: a row keeps its running max m until a tile's max exceeds it by more than TAU = 8
// (then P <= 2^8, safe in f16, and l, O in f32 are consistent with the m used); only when some
// row of the workgroup moves its max (workgroupUniformLoad of per-subgroup flags, so the branch
// is uniform) do the subgroups store O through ss, scale each row by exp2(m_old - m_new) and
// reload it: O is opaque in the coop registers, so a per-row scale needs the round trip. A row
// that has seen no key yet (O = 0, l = 0) just takes the tile's max.
// Output: O through ss, divided by l (0 for a row that saw no key, as the scalar kernel).
//
// Workgroup memory (HD 128): kv 17 KiB + ss 17 KiB + pp 9 KiB + koff = 43.5 KiB (HD 64: 35.5
// KiB); ops_attention.rs checks the adapter's limit (PREFILL_COOP_BYTES). Every barrier is
// reached by the whole workgroup: the early returns are per workgroup, the tile count and the
// rescale flag are uniform. Row strides are 16-byte multiples (coopLoad/coopStore alignment);
// ss's 68-float rows put a subgroup's 16 rows x 2 halves on distinct-ish banks (2-way).

const BR: u32 = 64u;          // query rows per workgroup
const BK: u32 = 64u;          // keys per tile
const WG: u32 = 128u;
const SK: u32 = HD + 8u;      // f16 per staged Q/K/V row
const SS: u32 = 68u;          // f32 per row of ss
const SP: u32 = 72u;          // f16 per row of pp
const CPR: u32 = HD / 8u;     // 16-byte chunks per K/V row
const NCH: u32 = BK * CPR / WG; // chunks per thread per tile: 8 (HD 128) or 4 (HD 64)
const NONE: u32 = 0xffffffffu;
const TAU: f32 = 8.0;
const LOG2E: f32 = 1.4426950408889634;
const KV_N: u32 = BK * SK;
const SS_N: u32 = BR * SS;
const PP_N: u32 = BR * SP;

@group(0) @binding(0) var<uniform> p: AttentionParams;
@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> q_indptr: array<u32>;
@group(0) @binding(3) var<storage, read> k_pool: array<KV_EL>;
@group(0) @binding(4) var<storage, read> v_pool: array<KV_EL>;
@group(0) @binding(5) var<storage, read> head_map: array<u32>;
@group(0) @binding(6) var<storage, read> page_indptr: array<u32>;
@group(0) @binding(7) var<storage, read> page_table: array<u32>;
@group(0) @binding(8) var<storage, read> kv_len: array<u32>;
@group(0) @binding(9) var<storage, read> ring_table: array<u32>;
@group(0) @binding(10) var<storage, read_write> out: array<f32>;

var<workgroup> kv: array<f16, KV_N>;   // [64][SK]: the scaled Q, then each tile's K, then its V
var<workgroup> ss: array<f32, SS_N>;   // [64][SS]: the tile's S (masked to NEG_INF), or O patches
var<workgroup> pp: array<f16, PP_N>;   // [64][SP]: the tile's P
var<workgroup> koff: array<u32, 128>;  // [2][64]: pool offset of each tile key (by tile parity)
var<workgroup> resc: array<u32, 4>;    // per subgroup: a row of it rescales this tile
var<workgroup> tinfo: Tile;

// A workgroup's tile: whether it runs, its head kind and index among that kind, its sequence,
// the sequence's first query token and first query position, its first row and row count.
struct Tile { run: u32, streaming: u32, hi: u32, s: u32, tok0: u32, first: u32, row0: u32, nrows: u32 }

// The visible key set of a tile: positions [a0, a1) and [b0, b1), visited as key tiles
// ta0 .. ta0 + na, then tb0 .. (n in all); and who reads it.
struct Keys { a0: u32, a1: u32, b0: u32, b1: u32, ta0: u32, na: u32, tb0: u32, n: u32, streaming: bool, s: u32, hi: u32 }

// A tile's K or V staging registers: 16-byte chunks t + WG i (c4..c7 only at HD 128).
struct Chunks { c0: mat2x4<f16>, c1: mat2x4<f16>, c2: mat2x4<f16>, c3: mat2x4<f16>, c4: mat2x4<f16>, c5: mat2x4<f16>, c6: mat2x4<f16>, c7: mat2x4<f16> }

fn window_lo(pos: u32) -> u32 {
    if (p.window == 0u || pos + 1u <= p.window) { return 0u; }
    return pos + 1u - p.window;
}

// Pool offset (elements) of position `pos` of sequence `s` for KV head index `hi` of its kind,
// NONE if not addressable (as prefill_attention.wgsl's key_offset).
fn key_offset(streaming: bool, s: u32, hi: u32, pos: u32) -> u32 {
    let ps = p.page_size;
    if (streaming) {
        let r = ring_index(pos, p.sink, p.ring_tokens);
        let at = s * (p.ring_tokens / ps) + r / ps;
        if (at >= arrayLength(&ring_table)) { return NONE; }
        let page = ring_table[at];
        if (page >= p.num_str_pages) { return NONE; }
        return ((page * p.n_str + hi) * ps + r % ps) * HD;
    }
    let at = page_indptr[s] + pos / ps;
    if (at >= page_indptr[s + 1u] || at >= arrayLength(&page_table)) { return NONE; }
    let page = page_table[at];
    if (page >= p.num_pages) { return NONE; }
    return ((page * p.n_ret + hi) * ps + pos % ps) * HD;
}

// Position of key 0 of key tile i.
fn tile_key0(k: Keys, i: u32) -> u32 {
    return BK * select(k.tb0 + (i - k.na), k.ta0 + i, i < k.na);
}

// koff[buf][j] <- the offset of key j of key tile i, NONE outside the visible set.
fn set_key(k: Keys, buf: u32, i: u32, j: u32) {
    let kp = tile_key0(k, i) + j;
    var o = NONE;
    if (i < k.n && ((kp >= k.a0 && kp < k.a1) || (kp >= k.b0 && kp < k.b1))) { o = key_offset(k.streaming, k.s, k.hi, kp); }
    koff[buf * BK + j] = o;
}

// Chunk c (key c / CPR, values 8 (c % CPR) ..) of the tile's K or V rows; an absent key reads
// offset 0, which `stage` drops, so the load is issued unconditionally.
fn fetch(values: bool, buf: u32, c: u32) -> mat2x4<f16> {
    let o = koff[buf * BK + c / CPR];
    let at = select(o, 0u, o == NONE) + 8u * (c % CPR);
    if (values) { return kvh8_v_pool(at); }
    return kvh8_k_pool(at);
}

fn fetch_tile(values: bool, buf: u32, t: u32) -> Chunks {
    var x = Chunks();
    x.c0 = fetch(values, buf, t);
    x.c1 = fetch(values, buf, t + WG);
    x.c2 = fetch(values, buf, t + 2u * WG);
    x.c3 = fetch(values, buf, t + 3u * WG);
    if (NCH == 8u) {
        x.c4 = fetch(values, buf, t + 4u * WG);
        x.c5 = fetch(values, buf, t + 5u * WG);
        x.c6 = fetch(values, buf, t + 6u * WG);
        x.c7 = fetch(values, buf, t + 7u * WG);
    }
    return x;
}

// kv row c / CPR, halves 8 (c % CPR) .. + 7 <- chunk x, zeros for an absent key.
fn stage(x: mat2x4<f16>, buf: u32, c: u32) {
    let j = c / CPR;
    let keep = koff[buf * BK + j] != NONE;
    let lo = select(vec4<f16>(), x[0], keep);
    let hi = select(vec4<f16>(), x[1], keep);
    let o = j * SK + 8u * (c % CPR);
    kv[o] = lo.x;
    kv[o + 1u] = lo.y;
    kv[o + 2u] = lo.z;
    kv[o + 3u] = lo.w;
    kv[o + 4u] = hi.x;
    kv[o + 5u] = hi.y;
    kv[o + 6u] = hi.z;
    kv[o + 7u] = hi.w;
}

fn stage_tile(x: Chunks, buf: u32, t: u32) {
    stage(x.c0, buf, t);
    stage(x.c1, buf, t + WG);
    stage(x.c2, buf, t + 2u * WG);
    stage(x.c3, buf, t + 3u * WG);
    if (NCH == 8u) {
        stage(x.c4, buf, t + 4u * WG);
        stage(x.c5, buf, t + 5u * WG);
        stage(x.c6, buf, t + 6u * WG);
        stage(x.c7, buf, t + 7u * WG);
    }
}

// Row `r`'s 32 values h + 2 jj of an ss patch times `f`.
fn scale_row(r: u32, h: u32, f: f32) {
    for (var jj = 0u; jj < 32u; jj++) {
        let at = r * SS + 2u * jj + h;
        ss[at] = ss[at] * f;
    }
}

// Row `r`'s 64 values of the ss patch (output dims d0 ..) divided by l, to out[base + d0 ..].
fn emit_row(r: u32, h: u32, base: u32, d0: u32, inv: f32) {
    for (var jj = 0u; jj < 32u; jj++) {
        let j = 2u * jj + h;
        out[base + d0 + j] = ss[r * SS + j] * inv;
    }
}

// Whether every key of tile i (first position k0) is visible to every row of p_first..p_last.
fn whole_tile(k: Keys, k0: u32, p_first: u32, p_last: u32) -> bool {
    let k1 = k0 + BK - 1u;
    var ok = k1 <= p_first && k0 >= window_lo(p_last);
    if (k.streaming) { ok = ok && (k1 < p.sink || p_last - k0 < p.local); }
    return ok;
}

// Workgroup `id`'s tile of KV head `kvh` (the last tiles first), run = 0 for none: a head of the
// other pass's kind, an id past the tiles, or a sequence with more rows than keys.
fn find_tile(kvh: u32, group: u32, id: u32) -> Tile {
    var none = Tile();
    // This pass's heads only: streaming heads when recorded with n_ret = 0, else retrieval heads.
    let hm = head_map[kvh];
    let streaming = (hm & STREAMING_BIT) != 0u;
    if (streaming != (p.n_ret == 0u)) { return none; }
    var total = 0u;
    for (var s = 0u; s < p.num_seqs; s++) {
        let a = q_indptr[s];
        let b = q_indptr[s + 1u];
        total += (select(0u, b - a, b > a) * group + BR - 1u) / BR;
    }
    if (id >= total) { return none; }
    let tile = total - 1u - id;
    var s = 0u;
    var t0 = 0u;
    var nq = 0u;
    for (; s < p.num_seqs; s++) {
        let a = q_indptr[s];
        let b = q_indptr[s + 1u];
        nq = select(0u, b - a, b > a);
        let nt = (nq * group + BR - 1u) / BR;
        if (tile < t0 + nt) { break; }
        t0 += nt;
    }
    let len = kv_len[min(s, p.num_seqs - 1u)];
    if (s >= p.num_seqs || nq > len) { return none; }
    let row0 = (tile - t0) * BR;
    return Tile(1u, select(0u, 1u, streaming), hm & ~STREAMING_BIT, s, q_indptr[s], len - nq, row0, min(BR, nq * group - row0));
}

// Long (about 200 lines) on purpose: the phases share the coop registers (Q fragments, O
// accumulators) and the per-row softmax state, and the body reads in the order it runs.
@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) t: u32, @builtin(subgroup_id) sg: u32,
        @builtin(subgroup_invocation_id) lane: u32) {
    let nh = p.n_heads;
    let group = nh / p.n_kv_heads;
    let kvh = wg.z;
    // Thread 0 finds the tile; the workgroup reads it through workgroupUniformLoad, so that naga
    // sees the returns and the key loop as uniform (cooperative ops need uniform control flow).
    if (t == 0u) { tinfo = find_tile(kvh, group, wg.x + wg.y * nwg.x); }
    let ti = workgroupUniformLoad(&tinfo);
    if (ti.run == 0u) { return; }
    let streaming = ti.streaming != 0u;
    let hi = ti.hi;
    let s = ti.s;
    let tok0 = ti.tok0;
    let first = ti.first;
    let row0 = ti.row0;
    let nrows = ti.nrows;
    let p_first = first + row0 / group;
    let p_last = first + (row0 + nrows - 1u) / group;

    // The visible key ranges and their key tiles (merged when they touch).
    let a0 = window_lo(p_first);
    var a1 = p_last + 1u;
    var b0 = 0u;
    var b1 = 0u;
    if (streaming) {
        a1 = max(a0, min(p.sink, p_last + 1u));
        let recent = select(0u, p_first + 1u - p.local, p_first + 1u > p.local);
        b0 = max(max(p.sink, a0), recent);
        b1 = max(b0, p_last + 1u);
    }
    var ta0 = a0 / BK;
    var ta1 = select(ta0, (a1 + BK - 1u) / BK, a1 > a0);
    var tb0 = b0 / BK;
    var tb1 = select(tb0, (b1 + BK - 1u) / BK, b1 > b0);
    if (ta1 == ta0) {
        ta0 = tb0;
        ta1 = tb1;
        tb1 = tb0;
    } else if (tb1 > tb0 && tb0 <= ta1) {
        ta1 = max(ta1, tb1);
        tb1 = tb0;
    }
    let keys = Keys(a0, a1, b0, b1, ta0, ta1 - ta0, tb0, (ta1 - ta0) + (tb1 - tb0), streaming, s, hi);

    // Q rows (times scale * log2(e), zero past the tile's rows) into kv; the first tile's keys.
    let qscale = p.scale * LOG2E;
    for (var c = t; c < BR * HD / 4u; c += WG) {
        let r = c / (HD / 4u);
        let fr = row0 + r;
        let tok = tok0 + fr / group;
        var x = vec4<f32>(0.0);
        if (r < nrows && tok < p.n_tokens) {
            x = q[(tok * nh + kvh * group + fr % group) * (HD / 4u) + c % (HD / 4u)] * qscale;
        }
        let xh = vec4<f16>(clamp(x, vec4<f32>(-65504.0), vec4<f32>(65504.0)));
        let o = r * SK + 4u * (c % (HD / 4u));
        kv[o] = xh.x;
        kv[o + 1u] = xh.y;
        kv[o + 2u] = xh.z;
        kv[o + 3u] = xh.w;
    }
    if (t < BK) { set_key(keys, 0u, 0u, t); }
    workgroupBarrier();
    let qr = 16u * sg * SK;
    let q0 = coopLoadT<coop_mat16x16<f16, A>>(&kv[qr], SK);
    let q1 = coopLoadT<coop_mat16x16<f16, A>>(&kv[qr + 16u], SK);
    let q2 = coopLoadT<coop_mat16x16<f16, A>>(&kv[qr + 32u], SK);
    let q3 = coopLoadT<coop_mat16x16<f16, A>>(&kv[qr + 48u], SK);
    var q4 = coop_mat16x16<f16, A>();
    var q5 = coop_mat16x16<f16, A>();
    var q6 = coop_mat16x16<f16, A>();
    var q7 = coop_mat16x16<f16, A>();
    if (HD == 128u) {
        q4 = coopLoadT<coop_mat16x16<f16, A>>(&kv[qr + 64u], SK);
        q5 = coopLoadT<coop_mat16x16<f16, A>>(&kv[qr + 80u], SK);
        q6 = coopLoadT<coop_mat16x16<f16, A>>(&kv[qr + 96u], SK);
        q7 = coopLoadT<coop_mat16x16<f16, A>>(&kv[qr + 112u], SK);
    }
    var stg = fetch_tile(false, 0u, t);
    workgroupBarrier(); // Q is in registers: kv is free for the keys

    // Softmax state of this thread's row r (both of its threads hold the same m; l is this
    // thread's half of the row's sum until the end).
    let r = 16u * sg + lane / 2u;
    let h = lane % 2u;
    let qp = first + (row0 + r) / group;
    let wl = window_lo(qp);
    var m = NEG_INF;
    var l = 0.0;
    var o0 = coop_mat16x16<f32, C>();
    var o1 = coop_mat16x16<f32, C>();
    var o2 = coop_mat16x16<f32, C>();
    var o3 = coop_mat16x16<f32, C>();
    var o4 = coop_mat16x16<f32, C>();
    var o5 = coop_mat16x16<f32, C>();
    var o6 = coop_mat16x16<f32, C>();
    var o7 = coop_mat16x16<f32, C>();
    let sr = 16u * sg * SS; // the subgroup's rows of ss

    for (var i = 0u; i < keys.n; i++) {
        let cur = i & 1u;
        let k0 = tile_key0(keys, i);
        // 1. K into kv.
        stage_tile(stg, cur, t);
        workgroupBarrier();
        // 2. V loads in flight; S = Q K^T, 16 keys at a time, to ss.
        stg = fetch_tile(true, cur, t);
        for (var f = 0u; f < 4u; f++) {
            let kb = 16u * f * SK;
            var sc = coop_mat16x16<f32, C>();
            sc = coopMultiplyAdd(q0, coopLoad<coop_mat16x16<f16, B>>(&kv[kb], SK), sc);
            sc = coopMultiplyAdd(q1, coopLoad<coop_mat16x16<f16, B>>(&kv[kb + 16u], SK), sc);
            sc = coopMultiplyAdd(q2, coopLoad<coop_mat16x16<f16, B>>(&kv[kb + 32u], SK), sc);
            sc = coopMultiplyAdd(q3, coopLoad<coop_mat16x16<f16, B>>(&kv[kb + 48u], SK), sc);
            if (HD == 128u) {
                sc = coopMultiplyAdd(q4, coopLoad<coop_mat16x16<f16, B>>(&kv[kb + 64u], SK), sc);
                sc = coopMultiplyAdd(q5, coopLoad<coop_mat16x16<f16, B>>(&kv[kb + 80u], SK), sc);
                sc = coopMultiplyAdd(q6, coopLoad<coop_mat16x16<f16, B>>(&kv[kb + 96u], SK), sc);
                sc = coopMultiplyAdd(q7, coopLoad<coop_mat16x16<f16, B>>(&kv[kb + 112u], SK), sc);
            }
            coopStoreT(sc, &ss[sr + 16u * f], SS);
        }
        workgroupBarrier();

        // 3. V into kv; this thread's half row: mask, max, P; the next tile's key offsets.
        stage_tile(stg, cur, t);
        let whole = whole_tile(keys, k0, p_first, p_last);
        var mx = NEG_INF;
        for (var jj = 0u; jj < 32u; jj++) {
            let j = 2u * jj + h;
            var sc = ss[r * SS + j];
            if (!whole) {
                let kp = k0 + j;
                var vis = r < nrows && koff[cur * BK + j] != NONE && kp <= qp && kp >= wl;
                if (streaming) { vis = vis && (kp < p.sink || qp - kp < p.local); }
                if (!vis) {
                    sc = NEG_INF;
                    ss[r * SS + j] = NEG_INF;
                }
            }
            mx = max(mx, sc);
        }
        mx = max(mx, subgroupShuffleXor(mx, 1u));
        var need = false;
        var alpha = 1.0;
        if (m == NEG_INF) {
            m = mx; // nothing accumulated yet
        } else if (mx > m + TAU) {
            need = true;
            alpha = exp2(m - mx);
            m = mx;
        }
        l = l * alpha;
        for (var jj = 0u; jj < 32u; jj++) {
            let j = 2u * jj + h;
            let sc = ss[r * SS + j];
            let pj = select(0.0, exp2(sc - m), sc > NEG_INF);
            l += pj;
            pp[r * SP + j] = f16(pj);
        }
        let moved = subgroupAny(need);
        if (lane == 0u) { resc[sg] = select(0u, 1u, moved); }
        if (t < BK && i + 1u < keys.n) { set_key(keys, cur ^ 1u, i + 1u, t); }
        let flags = workgroupUniformLoad(&resc); // also the barrier: V, P, koff visible

        // 4. The next tile's K loads in flight; O rescaled if a row moved its max; O += P V.
        if (i + 1u < keys.n) { stg = fetch_tile(false, cur ^ 1u, t); }
        if ((flags[0] | flags[1] | flags[2] | flags[3]) != 0u) {
            coopStoreT(o0, &ss[sr], SS);
            coopStoreT(o1, &ss[sr + 16u], SS);
            coopStoreT(o2, &ss[sr + 32u], SS);
            coopStoreT(o3, &ss[sr + 48u], SS);
            workgroupBarrier();
            scale_row(r, h, alpha);
            workgroupBarrier();
            o0 = coopLoadT<coop_mat16x16<f32, C>>(&ss[sr], SS);
            o1 = coopLoadT<coop_mat16x16<f32, C>>(&ss[sr + 16u], SS);
            o2 = coopLoadT<coop_mat16x16<f32, C>>(&ss[sr + 32u], SS);
            o3 = coopLoadT<coop_mat16x16<f32, C>>(&ss[sr + 48u], SS);
            if (HD == 128u) {
                workgroupBarrier();
                coopStoreT(o4, &ss[sr], SS);
                coopStoreT(o5, &ss[sr + 16u], SS);
                coopStoreT(o6, &ss[sr + 32u], SS);
                coopStoreT(o7, &ss[sr + 48u], SS);
                workgroupBarrier();
                scale_row(r, h, alpha);
                workgroupBarrier();
                o4 = coopLoadT<coop_mat16x16<f32, C>>(&ss[sr], SS);
                o5 = coopLoadT<coop_mat16x16<f32, C>>(&ss[sr + 16u], SS);
                o6 = coopLoadT<coop_mat16x16<f32, C>>(&ss[sr + 32u], SS);
                o7 = coopLoadT<coop_mat16x16<f32, C>>(&ss[sr + 48u], SS);
            }
        }
        for (var kk = 0u; kk < 4u; kk++) {
            let pa = coopLoadT<coop_mat16x16<f16, A>>(&pp[16u * sg * SP + 16u * kk], SP);
            let vb = 16u * kk * SK;
            o0 = coopMultiplyAdd(pa, coopLoadT<coop_mat16x16<f16, B>>(&kv[vb], SK), o0);
            o1 = coopMultiplyAdd(pa, coopLoadT<coop_mat16x16<f16, B>>(&kv[vb + 16u], SK), o1);
            o2 = coopMultiplyAdd(pa, coopLoadT<coop_mat16x16<f16, B>>(&kv[vb + 32u], SK), o2);
            o3 = coopMultiplyAdd(pa, coopLoadT<coop_mat16x16<f16, B>>(&kv[vb + 48u], SK), o3);
            if (HD == 128u) {
                o4 = coopMultiplyAdd(pa, coopLoadT<coop_mat16x16<f16, B>>(&kv[vb + 64u], SK), o4);
                o5 = coopMultiplyAdd(pa, coopLoadT<coop_mat16x16<f16, B>>(&kv[vb + 80u], SK), o5);
                o6 = coopMultiplyAdd(pa, coopLoadT<coop_mat16x16<f16, B>>(&kv[vb + 96u], SK), o6);
                o7 = coopMultiplyAdd(pa, coopLoadT<coop_mat16x16<f16, B>>(&kv[vb + 112u], SK), o7);
            }
        }
        workgroupBarrier(); // kv, pp and ss are free for the next tile
    }

    // O / l through ss, 64 dims at a time.
    let lsum = l + subgroupShuffleXor(l, 1u);
    let inv = select(0.0, 1.0 / lsum, lsum > 0.0);
    let fr = row0 + r;
    let tok = tok0 + fr / group;
    let ok = r < nrows && tok < p.n_tokens;
    let base = (tok * nh + kvh * group + fr % group) * HD;
    coopStoreT(o0, &ss[sr], SS);
    coopStoreT(o1, &ss[sr + 16u], SS);
    coopStoreT(o2, &ss[sr + 32u], SS);
    coopStoreT(o3, &ss[sr + 48u], SS);
    workgroupBarrier();
    if (ok) { emit_row(r, h, base, 0u, inv); }
    if (HD == 128u) {
        workgroupBarrier();
        coopStoreT(o4, &ss[sr], SS);
        coopStoreT(o5, &ss[sr + 16u], SS);
        coopStoreT(o6, &ss[sr + 32u], SS);
        coopStoreT(o7, &ss[sr + 48u], SS);
        workgroupBarrier();
        if (ok) { emit_row(r, h, base, 64u, inv); }
    }
}
