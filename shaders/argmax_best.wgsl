// argmax's shared pieces, for both passes (argmax_part.wgsl and argmax.wgsl).

// Workgroups of argmax_part per row: one per 8,192 elements, at most 256 (ArgmaxParams::parts).
fn argmax_parts(n: u32) -> u32 {
    return clamp((n + 8191u) / 8192u, 1u, 256u);
}

// The workgroup reduction: every invocation offers (v, i) (i = 0xffffffff: none); returns the
// workgroup's best — the largest value, the lowest index on ties, none only where nobody offered
// one — valid in invocation 0. Called from uniform control flow (barriers).
var<workgroup> best_v: array<f32, 256>;
var<workgroup> best_i: array<u32, 256>;

fn argmax_best(lid: u32, v: f32, i: u32) -> u32 {
    best_v[lid] = v;
    best_i[lid] = i;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            let ov = best_v[lid + s];
            let oi = best_i[lid + s];
            let mine = best_i[lid];
            if (oi != 0xffffffffu && (mine == 0xffffffffu || ov > best_v[lid] || (ov == best_v[lid] && oi < mine))) {
                best_v[lid] = ov;
                best_i[lid] = oi;
            }
        }
        workgroupBarrier();
    }
    return best_i[0];
}
