// rope16_quad: the rotation and 16-bit stores of rope_append_kv16, one quad (rope pairs 2u and
// 2u + 1: dims j = 2u, j + 1, hh + j, hh + j + 1, hh = head_dim / 2) of one head of one token;
// part of rope_append_kv16 and of matmul_gemv_x8_rope (which rotates the rows its workgroups
// just computed). In two steps: `quad_q` / `quad_kv` take the loads and angles (a `Quad`),
// `rope_q_store` / `rope_kv_store` rotate, round and store the values. Each module declares the uniform `p` (RopeAppendKvParams' fields by their
// names) and the bindings positions, slots, ring_slots, inv_freq, head_map, q, k, v, sk, sv
// and summary, as rope_append_kv16 does; KV_KIND (1 = f16, 2 = bf16) comes before this text.

// The four key values a thread stored (dims j, j + 1 in lo, hh + j, hh + j + 1 in hi), as the
// pool holds them.
fn stored4(lo: u32, hi: u32) -> vec4<f32> {
    if (KV_KIND == 1u) {
        return vec4(unpack2x16float(lo), unpack2x16float(hi));
    }
    return bitcast<vec4<f32>>(vec4(lo << 16u, lo & 0xffff0000u, hi << 16u, hi & 0xffff0000u));
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

// What a quad's rotation and stores need before its values exist: the angles of pairs j and
// j + 1 (c, s each), and for a KV head where its rows go (`word`: the first pool word, NONE: no
// store; `streaming`: the ring) and, where it folds into a summary (a retrieval head, one token
// a call), the summary's element of dim j in the logical page's min row (`at`) and that row's and
// the max row's old values at the quad's dims (`mn`, `mx`; `first`: the token starts the logical
// page, which ignores them). matmul_gemv_x8_rope takes these before its GEMV, so that only the
// arithmetic and the stores are left after it.
struct Quad {
    c0: vec2<f32>,
    c1: vec2<f32>,
    word: u32,
    streaming: bool,
    fold: bool,
    first: bool,
    at: u32,
    mn: vec4<f32>,
    mx: vec4<f32>,
}

const QUAD_NONE: u32 = 0xffffffffu;

// A query head's quad u of token t.
fn quad_q(t: u32, u: u32) -> Quad {
    let pos = positions[t];
    let z = vec4<f32>(0.0);
    return Quad(angle(pos, 2u * u), angle(pos, 2u * u + 1u), QUAD_NONE, false, false, true, 0u, z, z);
}

// KV head kh's quad u of token t (slots and head_map entries outside the pools: no store).
fn quad_kv(t: u32, kh: u32, u: u32) -> Quad {
    var d = quad_q(t, u);
    let hd = p.head_dim;
    let ps = p.page_size;
    let m = head_map[kh];
    let idx = m & ~STREAMING_BIT;
    d.streaming = (m & STREAMING_BIT) != 0u;
    if (d.streaming) {
        let slot = ring_slots[t];
        if (idx >= p.n_str || slot >= p.num_str_pages * ps) { return d; }
        d.word = (((slot / ps) * p.n_str + idx) * ps + slot % ps) * hd / 2u + u;
        return d;
    }
    let slot = slots[t];
    if (idx >= p.n_ret || slot >= p.num_pages * ps) { return d; }
    d.word = (((slot / ps) * p.n_ret + idx) * ps + slot % ps) * hd / 2u + u;
    d.fold = p.n_tokens == 1u;
    let lp = p.logical_page;
    let off = slot % ps;
    d.at = (((slot / ps) * p.n_ret + idx) * (ps / lp) + off / lp) * 2u * hd + 2u * u;
    d.first = off % lp == 0u;
    if (d.fold && !d.first) {
        let e = vec4(d.at, d.at + 1u, d.at + hd / 2u, d.at + hd / 2u + 1u);
        d.mn = vec4(summary[e.x], summary[e.y], summary[e.z], summary[e.w]);
        d.mx = vec4(summary[e.x + hd], summary[e.y + hd], summary[e.z + hd], summary[e.w + hd]);
    }
    return d;
}

// Query head h of token t, quad u: x = its dims (j, j + 1, hh + j, hh + j + 1) unrotated;
// writes the four rotated f32 values to q.
fn rope_q_store(t: u32, h: u32, u: u32, d: Quad, x: vec4<f32>) {
    let hd = p.head_dim;
    let hh = hd / 2u;
    let j = 2u * u;
    let a = rot(x.x, x.z, d.c0);
    let b = rot(x.y, x.w, d.c1);
    let dst = (t * p.n_heads + h) * hd;
    q[dst + j] = a.x;
    q[dst + j + hh] = a.y;
    q[dst + j + 1u] = b.x;
    q[dst + j + 1u + hh] = b.y;
}

// A KV head's quad: xk / xv = the dims (j, j + 1, hh + j, hh + j + 1) of its k (rotated here)
// and v (copied); rounds both to the pool's type (shaders/kv_round16.wgsl), stores two u32 words
// of each row (word u: dims j, j + 1; word hh / 2 + u: dims hh + j, hh + j + 1) into the
// retrieval pool or the streaming ring, and where `d.fold` folds the stored (rounded) key values
// into their logical page's min/max (the module header of rope_append_kv16 says why that is
// exact: a token at a logical page's first offset starts it).
fn rope_kv_store(d: Quad, xk: vec4<f32>, xv: vec4<f32>) {
    if (d.word == QUAD_NONE) { return; }
    let hd = p.head_dim;
    let a = rot(xk.x, xk.z, d.c0);
    let b = rot(xk.y, xk.w, d.c1);
    let k_lo = pack16(a.x, b.x);
    let k_hi = pack16(a.y, b.y);
    put(d.streaming, d.word, hd / 4u, vec4(k_lo, k_hi, pack16(xv.x, xv.y), pack16(xv.z, xv.w)));
    if (!d.fold) { return; }
    let x = stored4(k_lo, k_hi);
    var mn = x;
    var mx = x;
    if (!d.first) {
        mn = min(d.mn, x);
        mx = max(d.mx, x);
    }
    let e = vec4(d.at, d.at + 1u, d.at + hd / 2u, d.at + hd / 2u + 1u);
    summary[e.x] = mn.x; summary[e.y] = mn.y; summary[e.z] = mn.z; summary[e.w] = mn.w;
    summary[e.x + hd] = mx.x; summary[e.y + hd] = mx.y; summary[e.z + hd] = mx.z; summary[e.w + hd] = mx.w;
}
