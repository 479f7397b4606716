// rope16_quad: the rotation and 16-bit stores of rope_append_kv16, one quad (rope pairs 2u and
// 2u + 1: dims j = 2u, j + 1, hh + j, hh + j + 1, hh = head_dim / 2) of one head of one token;
// part of rope_append_kv16 and of matmul_gemv_x8_rope (which rotates the rows its workgroups
// just computed). Each module declares the uniform `p` (RopeAppendKvParams' fields by their
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

// Query head h of token t: x = its dims (j, j + 1, hh + j, hh + j + 1) unrotated; writes the
// four rotated f32 values to q.
fn rope_q_quad(t: u32, h: u32, u: u32, x: vec4<f32>) {
    let hd = p.head_dim;
    let hh = hd / 2u;
    let j = 2u * u;
    let pos = positions[t];
    let a = rot(x.x, x.z, angle(pos, j));
    let b = rot(x.y, x.w, angle(pos, j + 1u));
    let dst = (t * p.n_heads + h) * hd;
    q[dst + j] = a.x;
    q[dst + j + hh] = a.y;
    q[dst + j + 1u] = b.x;
    q[dst + j + 1u + hh] = b.y;
}

// KV head kh of token t: xk / xv = the dims (j, j + 1, hh + j, hh + j + 1) of its k (rotated
// here) and v (copied); rounds both to the pool's type (shaders/kv_round16.wgsl), stores two u32
// words of each row (word u: dims j, j + 1; word hh / 2 + u: dims hh + j, hh + j + 1) into the
// retrieval pool or the streaming ring per head_map, and with one token a call folds the key into
// its logical page's summary (the module header of rope_append_kv16 says why that is exact).
// Slots and head_map entries outside the pools are skipped.
fn rope_kv_quad(t: u32, kh: u32, u: u32, xk: vec4<f32>, xv: vec4<f32>) {
    let hd = p.head_dim;
    let hh = hd / 2u;
    let j = 2u * u;
    let pos = positions[t];
    let m = head_map[kh];
    let streaming = (m & STREAMING_BIT) != 0u;
    let idx = m & ~STREAMING_BIT;
    let a = rot(xk.x, xk.z, angle(pos, j));
    let b = rot(xk.y, xk.w, angle(pos, j + 1u));
    let k_lo = pack16(a.x, b.x);
    let k_hi = pack16(a.y, b.y);
    let v_lo = pack16(xv.x, xv.y);
    let v_hi = pack16(xv.z, xv.w);
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
