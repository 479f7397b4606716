// rope_append_kv16: rope_append_kv (shaders/rope_append_kv.wgsl has the layouts, the rotation and
// the skipping of slots and head_map entries outside the pools) in one pass for 16-bit pools
// (KV_KIND 1 = f16, 2 = bf16, from the KV snippet), where the backend would otherwise stage f32
// rows and store them with rope_append_kv_pack: the backend picks it where head_dim % 4 == 0.
//
// One thread per (token, head, quad u < head_dim / 4): rope pairs 2u and 2u + 1, i.e. dims 2u,
// 2u + 1, hh + 2u and hh + 2u + 1 (hh = head_dim / 2, even). q heads write their four rotated f32
// values; KV heads round k (rotated) and v (copied) to the pool's type (shaders/kv_round16.wgsl,
// the values rope_append_kv_pack stores, bit for bit) and store two u32 words of each row: word
// u (dims 2u, 2u + 1) and word hh / 2 + u (dims hh + 2u, hh + 2u + 1).
//
// Page summaries: with several tokens a call, rope_append_kv_summary.wgsl refreshes them
// afterwards, as for every pool (tokens of one logical page cannot order their writes within a
// dispatch). With one token (n_tokens == 1: a batch-1 decode step) this pass folds the stored
// (rounded) key values into their logical page's min/max itself: the summary pass would compute
// min(...min(k_first, k_first+1)..., k_off) over the page's tokens in offset order, which is the
// page's summary so far (kept by every earlier call) then min with this key; a token at a
// logical page's first offset starts it (min = max = its value). So the result is the same, bit
// for bit, and the step saves the summary's dispatch.
@group(0) @binding(0) var<uniform> p: RopeAppendKvParams;
@group(0) @binding(1) var<storage, read> qkv: array<f32>;
@group(0) @binding(2) var<storage, read> positions: array<u32>;
@group(0) @binding(3) var<storage, read> slots: array<u32>;
@group(0) @binding(4) var<storage, read> ring_slots: array<u32>;
@group(0) @binding(5) var<storage, read> inv_freq: array<f32>;
@group(0) @binding(6) var<storage, read> head_map: array<u32>;
@group(0) @binding(7) var<storage, read_write> q: array<f32>;
@group(0) @binding(8) var<storage, read_write> k: array<u32>;
@group(0) @binding(9) var<storage, read_write> v: array<u32>;
@group(0) @binding(10) var<storage, read_write> sk: array<u32>;
@group(0) @binding(11) var<storage, read_write> sv: array<u32>;
@group(0) @binding(12) var<storage, read_write> summary: array<f32>;

// The four key values a thread stored (dims j, j + 1 in lo, hh + j, hh + j + 1 in hi), as the
// pool holds them.
fn stored4(lo: u32, hi: u32) -> vec4<f32> {
    if (KV_KIND == 1u) {
        return vec4(unpack2x16float(lo), unpack2x16float(hi));
    }
    return bitcast<vec4<f32>>(vec4(lo << 16u, lo & 0xffff0000u, hi << 16u, hi & 0xffff0000u));
}

// Fold key values x (dims j, j + 1, hh + j, hh + j + 1) of retrieval head r at pool slot `slot`
// into its logical page's summary ([page][n_ret][lpp][2][head_dim]: min, max).
fn fold_summary(slot: u32, r: u32, j: u32, hh: u32, x: vec4<f32>) {
    let ps = p.page_size;
    let lp = p.logical_page;
    let hd = p.head_dim;
    let off = slot % ps;
    let at = (((slot / ps) * p.n_ret + r) * (ps / lp) + off / lp) * 2u * hd;
    let d = vec4(j, j + 1u, hh + j, hh + j + 1u) + vec4(at);
    var mn = x;
    var mx = x;
    if (off % lp != 0u) {
        mn = min(vec4(summary[d.x], summary[d.y], summary[d.z], summary[d.w]), x);
        mx = max(vec4(summary[d.x + hd], summary[d.y + hd], summary[d.z + hd], summary[d.w + hd]), x);
    }
    summary[d.x] = mn.x; summary[d.y] = mn.y; summary[d.z] = mn.z; summary[d.w] = mn.w;
    summary[d.x + hd] = mx.x; summary[d.y + hd] = mx.y; summary[d.z + hd] = mx.z; summary[d.w + hd] = mx.w;
}

// Words w and w + half of a K row and a V row (kv = k_lo, k_hi, v_lo, v_hi), in the streaming
// pools or the retrieval pools.
fn put(streaming: bool, w: u32, half: u32, kv: vec4<u32>) {
    if (streaming) {
        sk[w] = kv.x;
        sk[w + half] = kv.y;
        sv[w] = kv.z;
        sv[w + half] = kv.w;
    } else {
        k[w] = kv.x;
        k[w + half] = kv.y;
        v[w] = kv.z;
        v[w + half] = kv.w;
    }
}

// Pair (x[j], x[j + hh]) rotated by (c, s), as rope_append_kv.wgsl computes it.
fn rot(x0: f32, x1: f32, cs: vec2<f32>) -> vec2<f32> {
    return vec2(x0 * cs.x - x1 * cs.y, x1 * cs.x + x0 * cs.y);
}

// (c, s) of pair j at position pos, scaled by attention_scaling.
fn angle(pos: u32, j: u32) -> vec2<f32> {
    let sc = sin_cos(f32(pos) * inv_freq[j]);
    return vec2(sc.y * p.attention_scaling, sc.x * p.attention_scaling);
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    let hd = p.head_dim;
    let hh = hd / 2u;
    let quads = hd / 4u;
    let heads = p.n_heads + p.n_kv_heads;
    if (i >= p.n_tokens * heads * quads) { return; }
    let u = i % quads;
    let h = (i / quads) % heads;
    let t = i / (quads * heads);
    let row = t * (heads + p.n_kv_heads) * hd;
    let j = 2u * u;
    let pos = positions[t];
    let c0 = angle(pos, j);
    let c1 = angle(pos, j + 1u);

    if (h < p.n_heads) {
        let src = row + h * hd;
        let dst = (t * p.n_heads + h) * hd;
        let a = rot(qkv[src + j], qkv[src + j + hh], c0);
        let b = rot(qkv[src + j + 1u], qkv[src + j + 1u + hh], c1);
        q[dst + j] = a.x;
        q[dst + j + hh] = a.y;
        q[dst + j + 1u] = b.x;
        q[dst + j + 1u + hh] = b.y;
        return;
    }

    let kh = h - p.n_heads;
    let m = head_map[kh];
    let streaming = (m & STREAMING_BIT) != 0u;
    let idx = m & ~STREAMING_BIT;
    let ksrc = row + (p.n_heads + kh) * hd;
    let vsrc = row + (p.n_heads + p.n_kv_heads + kh) * hd;
    let a = rot(qkv[ksrc + j], qkv[ksrc + j + hh], c0);
    let b = rot(qkv[ksrc + j + 1u], qkv[ksrc + j + 1u + hh], c1);
    let k_lo = pack16(a.x, b.x);
    let k_hi = pack16(a.y, b.y);
    let v_lo = pack16(qkv[vsrc + j], qkv[vsrc + j + 1u]);
    let v_hi = pack16(qkv[vsrc + j + hh], qkv[vsrc + j + 1u + hh]);
    let ps = p.page_size;
    if (streaming) {
        let slot = ring_slots[t];
        if (idx >= p.n_str || slot >= p.num_str_pages * ps) { return; }
        put(true, (((slot / ps) * p.n_str + idx) * ps + slot % ps) * hd / 2u + u, hh / 2u, vec4(k_lo, k_hi, v_lo, v_hi));
    } else {
        let slot = slots[t];
        if (idx >= p.n_ret || slot >= p.num_pages * ps) { return; }
        put(false, (((slot / ps) * p.n_ret + idx) * ps + slot % ps) * hd / 2u + u, hh / 2u, vec4(k_lo, k_hi, v_lo, v_hi));
        if (p.n_tokens == 1u) { fold_summary(slot, idx, j, hh, stored4(k_lo, k_hi)); }
    }
}
