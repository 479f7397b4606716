// row_norm_x8: the body of rmsnorm_x8 and add_rmsnorm_x8 — one row (the op checks rows == 1 and
// dim % 32 == 0), out as x8 digits — appended to the op's hooks (shaders/row_norm.wgsl lists
// them), shaders/row_sum.wgsl and shaders/x8_store.wgsl.
//
// One workgroup of 256. Thread l takes the row's vec4s g = l + 256 r (elements 4g .. 4g + 3),
// round r, which is also x8_store's mapping (8 threads a block of 32), so the values the norm
// reduces are the ones it quantizes without a second read: rows up to X8_HELD rounds (8192
// elements) keep each round's value and weight in registers (every round loaded before the sum
// of squares, add_rmsnorm's new residual stored after each round's loads; rounds past the row
// skipped by uniform branches). Longer rows loop over rounds and read
// the values again for the quantizing (norm_reload; storageBarrier makes add_rmsnorm's residual
// stores visible to the workgroup first). The f32 result is the same expression as
// row_norm.wgsl's, v * inv * w.
//
// Several workgroups (rmsnorm_x8 on rows of 2..X8_HELD rounds; the host dispatches one per round,
// and always one for add_rmsnorm_x8, whose residual stores another workgroup would read): each
// loads the whole row and sums its squares exactly as one workgroup would (the same inv, bit for
// bit, in every workgroup), then quantizes round wg only. Eight workgroups' row reads come from
// L2; what they save is the serial chain of one workgroup quantizing round after round.
const X8_HELD: u32 = 8u;

fn x8n_load(base: u32, g: u32, nv: u32) -> vec4<f32> {
    if (g >= nv) { return vec4(0.0); }
    let i = base + 4u * g;
    let v = vec4(norm_load(i), norm_load(i + 1u), norm_load(i + 2u), norm_load(i + 3u));
    norm_keep(i, v.x);
    norm_keep(i + 1u, v.y);
    norm_keep(i + 2u, v.z);
    norm_keep(i + 3u, v.w);
    return v;
}

fn x8n_w(wb: u32, g: u32, nv: u32) -> vec4<f32> {
    let i = wb + 4u * min(g, nv - 1u);
    return vec4(wn[i], wn[i + 1u], wn[i + 2u], wn[i + 3u]);
}

fn x8n_reload(base: u32, g: u32, nv: u32) -> vec4<f32> {
    if (g >= nv) { return vec4(0.0); }
    let i = base + 4u * g;
    return vec4(norm_reload(i), norm_reload(i + 1u), norm_reload(i + 2u), norm_reload(i + 3u));
}

// Quantize round r's vec4 (value v, weight w) of thread l.
fn x8n_put(l: u32, r: u32, v: vec4<f32>, w: vec4<f32>, inv: f32, nv: u32) {
    let g = l + 256u * r;
    x8_store(l, g / 8u, v * inv * w, g < nv, nv / 8u);
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let l = lid.x;
    // One workgroup: every round; else round wg.x only (uniform: barriers inside x8n_put).
    let all = nwg.x == 1u;
    let me = wg.x;
    let d = norm_dim();
    if (norm_segs() == 0u || d == 0u) { return; }
    let base = norm_base(0u);
    let wb = norm_wbase(0u);
    let nv = d / 4u;
    let rounds = (nv + 255u) / 256u;
    if (rounds <= X8_HELD) {
        var v0 = vec4(0.0); var v1 = vec4(0.0); var v2 = vec4(0.0); var v3 = vec4(0.0);
        var v4 = vec4(0.0); var v5 = vec4(0.0); var v6 = vec4(0.0); var v7 = vec4(0.0);
        var w0 = vec4(0.0); var w1 = vec4(0.0); var w2 = vec4(0.0); var w3 = vec4(0.0);
        var w4 = vec4(0.0); var w5 = vec4(0.0); var w6 = vec4(0.0); var w7 = vec4(0.0);
        v0 = x8n_load(base, l, nv); w0 = x8n_w(wb, l, nv);
        if (rounds > 1u) { v1 = x8n_load(base, l + 256u, nv); w1 = x8n_w(wb, l + 256u, nv); }
        if (rounds > 2u) { v2 = x8n_load(base, l + 512u, nv); w2 = x8n_w(wb, l + 512u, nv); }
        if (rounds > 3u) { v3 = x8n_load(base, l + 768u, nv); w3 = x8n_w(wb, l + 768u, nv); }
        if (rounds > 4u) { v4 = x8n_load(base, l + 1024u, nv); w4 = x8n_w(wb, l + 1024u, nv); }
        if (rounds > 5u) { v5 = x8n_load(base, l + 1280u, nv); w5 = x8n_w(wb, l + 1280u, nv); }
        if (rounds > 6u) { v6 = x8n_load(base, l + 1536u, nv); w6 = x8n_w(wb, l + 1536u, nv); }
        if (rounds > 7u) { v7 = x8n_load(base, l + 1792u, nv); w7 = x8n_w(wb, l + 1792u, nv); }
        let ss = ((v0 * v0 + v1 * v1) + (v2 * v2 + v3 * v3)) + ((v4 * v4 + v5 * v5) + (v6 * v6 + v7 * v7));
        let inv = 1.0 / sqrt(row_sum((ss.x + ss.y) + (ss.z + ss.w), l) / f32(d) + norm_eps());
        if (all || me == 0u) { x8n_put(l, 0u, v0, w0, inv, nv); }
        if (rounds > 1u && (all || me == 1u)) { x8n_put(l, 1u, v1, w1, inv, nv); }
        if (rounds > 2u && (all || me == 2u)) { x8n_put(l, 2u, v2, w2, inv, nv); }
        if (rounds > 3u && (all || me == 3u)) { x8n_put(l, 3u, v3, w3, inv, nv); }
        if (rounds > 4u && (all || me == 4u)) { x8n_put(l, 4u, v4, w4, inv, nv); }
        if (rounds > 5u && (all || me == 5u)) { x8n_put(l, 5u, v5, w5, inv, nv); }
        if (rounds > 6u && (all || me == 6u)) { x8n_put(l, 6u, v6, w6, inv, nv); }
        if (rounds > 7u && (all || me == 7u)) { x8n_put(l, 7u, v7, w7, inv, nv); }
        return;
    }
    var ss = vec4(0.0);
    for (var r = 0u; r < rounds; r++) {
        let v = x8n_load(base, l + 256u * r, nv);
        ss = ss + v * v;
    }
    let inv = 1.0 / sqrt(row_sum((ss.x + ss.y) + (ss.z + ss.w), l) / f32(d) + norm_eps());
    storageBarrier();
    for (var r = 0u; r < rounds; r++) {
        let g = l + 256u * r;
        x8n_put(l, r, x8n_reload(base, g, nv), x8n_w(wb, g, nv), inv, nv);
    }
}
