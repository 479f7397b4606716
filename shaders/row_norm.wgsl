// row_norm: the body of the row norms (rmsnorm, add_rmsnorm, head_rmsnorm), appended to each
// op's shader, which declares `wn` and the hooks: norm_segs() (segments to normalize),
// norm_dim(), norm_eps(), norm_base(seg) / norm_wbase(seg) (first element of a segment in the
// data and in wn), norm_load(i) (the value to normalize), norm_keep(i, v) (add_rmsnorm stores the
// new residual), norm_reload(i) (the value again, from memory) and norm_store(i, v).
//
// One workgroup of 256 per segment. Latency is the point (a decode step has 8 rows or fewer):
// a thread holds columns lid + 256 j in chunks of four (chunk k: j = 4k .. 4k+3), and for
// segments up to NORM_HELD floats it issues every load it needs (value and weight, 8 chunks at
// most, chunks wholly past the segment skipped by uniform branches) before it uses any, keeps the
// values in registers for the scaling, and reduces the sum of squares in two barrier rounds
// (row_sum, shaders/row_sum.wgsl), so a segment costs about one memory latency. Wider segments loop over chunks (four
// loads in flight) and read the values again for the scaling. Reads past the segment's end are
// clamped to its last element and their values dropped, so each chunk's loads are unconditional.
const NORM_HELD: u32 = 8192u;

// The four columns of the chunk that starts at column c0.
fn norm_cols(c0: u32) -> vec4<u32> {
    return vec4(c0, c0 + 256u, c0 + 512u, c0 + 768u);
}

fn norm_live(c0: u32, d: u32) -> vec4<bool> {
    return norm_cols(c0) < vec4(d);
}

// The element offsets of a chunk, clamped into the segment.
fn norm_at(base: u32, c0: u32, d: u32) -> vec4<u32> {
    return vec4(base) + min(norm_cols(c0), vec4(d - 1u));
}

fn norm_load4(base: u32, c0: u32, d: u32) -> vec4<f32> {
    let i = norm_at(base, c0, d);
    let v = vec4(norm_load(i.x), norm_load(i.y), norm_load(i.z), norm_load(i.w));
    return select(vec4(0.0), v, norm_live(c0, d));
}

fn norm_reload4(base: u32, c0: u32, d: u32) -> vec4<f32> {
    let i = norm_at(base, c0, d);
    return vec4(norm_reload(i.x), norm_reload(i.y), norm_reload(i.z), norm_reload(i.w));
}

fn norm_w4(wbase: u32, c0: u32, d: u32) -> vec4<f32> {
    let i = norm_at(wbase, c0, d);
    return vec4(wn[i.x], wn[i.y], wn[i.z], wn[i.w]);
}

fn norm_keep4(base: u32, c0: u32, d: u32, v: vec4<f32>) {
    let c = norm_cols(c0);
    if (c.x < d) { norm_keep(base + c.x, v.x); }
    if (c.y < d) { norm_keep(base + c.y, v.y); }
    if (c.z < d) { norm_keep(base + c.z, v.z); }
    if (c.w < d) { norm_keep(base + c.w, v.w); }
}

fn norm_store4(base: u32, c0: u32, d: u32, v: vec4<f32>) {
    let c = norm_cols(c0);
    if (c.x < d) { norm_store(base + c.x, v.x); }
    if (c.y < d) { norm_store(base + c.y, v.y); }
    if (c.z < d) { norm_store(base + c.z, v.z); }
    if (c.w < d) { norm_store(base + c.w, v.w); }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let seg = wg.x + wg.y * nwg.x;
    let d = norm_dim();
    if (seg >= norm_segs() || d == 0u) { return; }
    let base = norm_base(seg);
    let wb = norm_wbase(seg);
    let l = lid.x;
    let held = d <= NORM_HELD;
    // Values (v*) and weights (g*) of chunks 0..7, written out so they stay in registers.
    var v0 = vec4(0.0); var v1 = vec4(0.0); var v2 = vec4(0.0); var v3 = vec4(0.0);
    var v4 = vec4(0.0); var v5 = vec4(0.0); var v6 = vec4(0.0); var v7 = vec4(0.0);
    var g0 = vec4(0.0); var g1 = vec4(0.0); var g2 = vec4(0.0); var g3 = vec4(0.0);
    var g4 = vec4(0.0); var g5 = vec4(0.0); var g6 = vec4(0.0); var g7 = vec4(0.0);
    var ss = vec4(0.0);
    if (held) {
        v0 = norm_load4(base, l, d); g0 = norm_w4(wb, l, d);
        if (d > 1024u) { v1 = norm_load4(base, l + 1024u, d); g1 = norm_w4(wb, l + 1024u, d); }
        if (d > 2048u) { v2 = norm_load4(base, l + 2048u, d); g2 = norm_w4(wb, l + 2048u, d); }
        if (d > 3072u) { v3 = norm_load4(base, l + 3072u, d); g3 = norm_w4(wb, l + 3072u, d); }
        if (d > 4096u) { v4 = norm_load4(base, l + 4096u, d); g4 = norm_w4(wb, l + 4096u, d); }
        if (d > 5120u) { v5 = norm_load4(base, l + 5120u, d); g5 = norm_w4(wb, l + 5120u, d); }
        if (d > 6144u) { v6 = norm_load4(base, l + 6144u, d); g6 = norm_w4(wb, l + 6144u, d); }
        if (d > 7168u) { v7 = norm_load4(base, l + 7168u, d); g7 = norm_w4(wb, l + 7168u, d); }
        // Chunks past the segment are zero.
        ss = ((v0 * v0 + v1 * v1) + (v2 * v2 + v3 * v3)) + ((v4 * v4 + v5 * v5) + (v6 * v6 + v7 * v7));
        norm_keep4(base, l, d, v0);
        if (d > 1024u) { norm_keep4(base, l + 1024u, d, v1); }
        if (d > 2048u) { norm_keep4(base, l + 2048u, d, v2); }
        if (d > 3072u) { norm_keep4(base, l + 3072u, d, v3); }
        if (d > 4096u) { norm_keep4(base, l + 4096u, d, v4); }
        if (d > 5120u) { norm_keep4(base, l + 5120u, d, v5); }
        if (d > 6144u) { norm_keep4(base, l + 6144u, d, v6); }
        if (d > 7168u) { norm_keep4(base, l + 7168u, d, v7); }
    } else {
        for (var c0 = l; c0 < d; c0 = c0 + 1024u) {
            let v = norm_load4(base, c0, d);
            norm_keep4(base, c0, d, v);
            ss = ss + v * v;
        }
    }
    let inv = 1.0 / sqrt(row_sum((ss.x + ss.y) + (ss.z + ss.w), l) / f32(d) + norm_eps());
    if (held) {
        norm_store4(base, l, d, v0 * inv * g0);
        if (d > 1024u) { norm_store4(base, l + 1024u, d, v1 * inv * g1); }
        if (d > 2048u) { norm_store4(base, l + 2048u, d, v2 * inv * g2); }
        if (d > 3072u) { norm_store4(base, l + 3072u, d, v3 * inv * g3); }
        if (d > 4096u) { norm_store4(base, l + 4096u, d, v4 * inv * g4); }
        if (d > 5120u) { norm_store4(base, l + 5120u, d, v5 * inv * g5); }
        if (d > 6144u) { norm_store4(base, l + 6144u, d, v6 * inv * g6); }
        if (d > 7168u) { norm_store4(base, l + 7168u, d, v7 * inv * g7); }
    } else {
        for (var c0 = l; c0 < d; c0 = c0 + 1024u) {
            norm_store4(base, c0, d, norm_reload4(base, c0, d) * inv * norm_w4(wb, c0, d));
        }
    }
}
