// argmax, pass 1: workgroup (j, r) takes elements [j * span, (j + 1) * span) of row r of x, span =
// ceil(n / parts) with parts = argmax_parts(n) (argmax_best.wgsl; ArgmaxParams::parts on the
// host), and writes its best (value bits, index) to part[2 (r * parts + j) ..]: the largest
// number, the lowest index on ties, NaN ignored (index 0xffffffff where the span has no number).
// argmax.wgsl reduces them.
@group(0) @binding(0) var<uniform> p: ArgmaxParams;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> part: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let parts = argmax_parts(p.n);
    let r = wg.y + wg.z * nwg.y;
    if (r >= p.rows || wg.x >= parts) { return; }
    let span = (p.n + parts - 1u) / parts;
    let c0 = wg.x * span;
    let c1 = min(p.n, c0 + span);
    var bv = NEG_INF;
    var bi = 0xffffffffu;
    for (var c = c0 + lid.x; c < c1; c = c + 256u) {
        let v = x[r * p.n + c];
        if (v == v && (v > bv || bi == 0xffffffffu)) { bv = v; bi = c; }
    }
    let i = argmax_best(lid.x, bv, bi);
    if (lid.x == 0u) {
        let o = 2u * (r * parts + wg.x);
        part[o] = bitcast<u32>(best_v[0]);
        part[o + 1u] = i;
    }
}
