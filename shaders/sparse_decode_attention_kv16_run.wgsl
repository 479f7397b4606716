// The chunk loop of sparse_decode_attention_kv16 (its header describes it), a template that
// shaders.rs instantiates once per head kind: `run_KIND` reads K_POOL / V_POOL (run_ret:
// k_pool / v_pool, run_str: sk_pool / sv_pool). Called by every thread of the workgroup.
//
// Long (about 130 lines) on purpose: the K and V loads of a chunk are held in 16 word registers
// from the point kb is known to their uses, which must stay in one function body.
fn run_KIND(ls: List, j: Job, t: u32) {
    let w = j.hd / 8u;       // 16-byte words a row
    let hw = w / 2u;         // words a half row = keys a thread in P.V
    let kk = t / 2u;         // K: the thread's key and half
    let hh = t % 2u;
    let kgn = WG / w;        // V: key groups, the thread's group and dim word
    let kg = t / w;
    let dw = t % w;
    let hi_heads = GMAX > 4u && j.ng > 4u;
    var mA = vec4(NEG_INF);
    var mB = vec4(NEG_INF);
    var lA = vec4(0.0); // partial sums of threads t < 16
    var lB = vec4(0.0);
    var acc: Acc; // zero-initialised
    for (var c0 = j.b; c0 < j.e; c0 = c0 + CK) {
        if (t < CK) {
            var o = NONE;
            if (c0 + t < j.e) { o = slot_offset(ls, c0 + t); }
            kb[t] = o;
        }
        workgroupBarrier();
        if (CUT == 3u) {
            out[j.h0 * j.hd + t] = f32(kb[t % CK]);
            return;
        }
        // K: words hh * hw .. + hw of key kk's row (masked keys read row 0; words past the half
        // are clamped to its last and meet the zero query word).
        let ko = kb[kk];
        let kw = select(0u, ko / 8u, ko != NONE) + hh * hw;
        let kl = kw + hw - 1u;
        let k0 = K_POOL[kw];
        let k1 = K_POOL[min(kw + 1u, kl)];
        let k2 = K_POOL[min(kw + 2u, kl)];
        let k3 = K_POOL[min(kw + 3u, kl)];
        let k4 = K_POOL[min(kw + 4u, kl)];
        let k5 = K_POOL[min(kw + 5u, kl)];
        let k6 = K_POOL[min(kw + 6u, kl)];
        let k7 = K_POOL[min(kw + 7u, kl)];
        // V: word dw of keys kg + i * kgn, i < hw (past hw: key kg again, weighed 0).
        let j0 = kg;
        let j1 = select(kg, kg + kgn, 1u < hw);
        let j2 = select(kg, kg + 2u * kgn, 2u < hw);
        let j3 = select(kg, kg + 3u * kgn, 3u < hw);
        let j4 = select(kg, kg + 4u * kgn, 4u < hw);
        let j5 = select(kg, kg + 5u * kgn, 5u < hw);
        let j6 = select(kg, kg + 6u * kgn, 6u < hw);
        let j7 = select(kg, kg + 7u * kgn, 7u < hw);
        let v0 = V_POOL[vword(j0, dw)];
        let v1 = V_POOL[vword(j1, dw)];
        let v2 = V_POOL[vword(j2, dw)];
        let v3 = V_POOL[vword(j3, dw)];
        let v4 = V_POOL[vword(j4, dw)];
        let v5 = V_POOL[vword(j5, dw)];
        let v6 = V_POOL[vword(j6, dw)];
        let v7 = V_POOL[vword(j7, dw)];
        if (CUT == 4u) {
            let x = k0 ^ k1 ^ k2 ^ k3 ^ k4 ^ k5 ^ k6 ^ k7 ^ v0 ^ v1 ^ v2 ^ v3 ^ v4 ^ v5 ^ v6 ^ v7;
            out[j.h0 * j.hd + t] = f32(x.x ^ x.y ^ x.z ^ x.w);
            return;
        }

        // Half-row scores, then the key's score (the two halves summed).
        var sA = qdots(0u, qword(hh, hw, 0u), k0) + qdots(0u, qword(hh, hw, 1u), k1)
            + qdots(0u, qword(hh, hw, 2u), k2) + qdots(0u, qword(hh, hw, 3u), k3)
            + qdots(0u, qword(hh, hw, 4u), k4) + qdots(0u, qword(hh, hw, 5u), k5)
            + qdots(0u, qword(hh, hw, 6u), k6) + qdots(0u, qword(hh, hw, 7u), k7);
        var sB = vec4(0.0);
        if (hi_heads) {
            sB = qdots(4u, qword(hh, hw, 0u), k0) + qdots(4u, qword(hh, hw, 1u), k1)
                + qdots(4u, qword(hh, hw, 2u), k2) + qdots(4u, qword(hh, hw, 3u), k3)
                + qdots(4u, qword(hh, hw, 4u), k4) + qdots(4u, qword(hh, hw, 5u), k5)
                + qdots(4u, qword(hh, hw, 6u), k6) + qdots(4u, qword(hh, hw, 7u), k7);
        }
        sc[2u * t] = sA;
        sc[2u * t + 1u] = sB;
        workgroupBarrier();
        if (t < CK) {
            let valid = kb[t] != NONE;
            ss[2u * t] = select(vec4(NEG_INF), sc[4u * t] + sc[4u * t + 2u], valid);
            ss[2u * t + 1u] = select(vec4(NEG_INF), sc[4u * t + 1u] + sc[4u * t + 3u], valid);
        }
        workgroupBarrier();
        // Chunk maxima: 16 partials, then every thread.
        if (t < 16u) {
            red[2u * t] = max(max(ss[2u * t], ss[2u * (t + 16u)]), max(ss[2u * (t + 32u)], ss[2u * (t + 48u)]));
            red[2u * t + 1u] = max(max(ss[2u * t + 1u], ss[2u * (t + 16u) + 1u]), max(ss[2u * (t + 32u) + 1u], ss[2u * (t + 48u) + 1u]));
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
        if (t < CK) {
            let valid = kb[t] != NONE;
            ss[2u * t] = select(vec4(0.0), exp(ss[2u * t] - nA), valid);
            ss[2u * t + 1u] = select(vec4(0.0), exp(ss[2u * t + 1u] - nB), valid);
        }
        workgroupBarrier();
        if (t < 16u) {
            lA = lA * alA + (ss[2u * t] + ss[2u * (t + 16u)]) + (ss[2u * (t + 32u)] + ss[2u * (t + 48u)]);
            lB = lB * alB + (ss[2u * t + 1u] + ss[2u * (t + 16u) + 1u]) + (ss[2u * (t + 32u) + 1u] + ss[2u * (t + 48u) + 1u]);
        }
        // P.V of this thread's keys (past hw: weighed 0).
        acc = acc_scale(acc, alA, alB, hi_heads);
        acc = pv_add(acc, v0, ss[2u * j0], ss[2u * j0 + 1u], hi_heads);
        acc = pv_add(acc, v1, ss[2u * j1] * live(1u, hw), ss[2u * j1 + 1u] * live(1u, hw), hi_heads);
        acc = pv_add(acc, v2, ss[2u * j2] * live(2u, hw), ss[2u * j2 + 1u] * live(2u, hw), hi_heads);
        acc = pv_add(acc, v3, ss[2u * j3] * live(3u, hw), ss[2u * j3 + 1u] * live(3u, hw), hi_heads);
        acc = pv_add(acc, v4, ss[2u * j4] * live(4u, hw), ss[2u * j4 + 1u] * live(4u, hw), hi_heads);
        acc = pv_add(acc, v5, ss[2u * j5] * live(5u, hw), ss[2u * j5 + 1u] * live(5u, hw), hi_heads);
        acc = pv_add(acc, v6, ss[2u * j6] * live(6u, hw), ss[2u * j6 + 1u] * live(6u, hw), hi_heads);
        acc = pv_add(acc, v7, ss[2u * j7] * live(7u, hw), ss[2u * j7 + 1u] * live(7u, hw), hi_heads);
    }

    if (CUT == 5u) {
        out[j.h0 * j.hd + t] = acc.a0.x + acc.b0.x + mA.x + lA.x;
        return;
    }
    // Row sums (16 partials), then each head's dims summed over the key groups and written.
    if (t < 16u) {
        red[2u * t] = lA;
        red[2u * t + 1u] = lB;
    }
    workgroupBarrier();
    var sumA = vec4(0.0);
    var sumB = vec4(0.0);
    for (var i = 0u; i < 16u; i = i + 1u) {
        sumA = sumA + red[2u * i];
        sumB = sumB + red[2u * i + 1u];
    }
    put_head(j, 0u, acc.a0, acc.b0, mA.x, sumA.x, t);
    if (j.ng > 1u) { put_head(j, 1u, acc.a1, acc.b1, mA.y, sumA.y, t); }
    if (j.ng > 2u) { put_head(j, 2u, acc.a2, acc.b2, mA.z, sumA.z, t); }
    if (j.ng > 3u) { put_head(j, 3u, acc.a3, acc.b3, mA.w, sumA.w, t); }
    if (GMAX > 4u && j.ng > 4u) { put_head(j, 4u, acc.a4, acc.b4, mB.x, sumB.x, t); }
    if (GMAX > 4u && j.ng > 5u) { put_head(j, 5u, acc.a5, acc.b5, mB.y, sumB.y, t); }
    if (GMAX > 4u && j.ng > 6u) { put_head(j, 6u, acc.a6, acc.b6, mB.z, sumB.z, t); }
    if (GMAX > 4u && j.ng > 7u) { put_head(j, 7u, acc.a7, acc.b7, mB.w, sumB.w, t); }
}
