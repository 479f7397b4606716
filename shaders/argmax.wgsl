// argmax, pass 2: out[r] = the index of the max of row r, lowest index on ties (NaN ignored; 0 when
// the row has no number), from the row's parts (value bits, index) that argmax_part.wgsl wrote.
// One workgroup per row.
@group(0) @binding(0) var<uniform> p: ArgmaxParams;
@group(0) @binding(1) var<storage, read> part: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

var<workgroup> best_v: array<f32, 256>;
var<workgroup> best_i: array<u32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = wg.x + wg.y * nwg.x;
    if (r >= p.rows) { return; }
    let parts = clamp((p.n + 8191u) / 8192u, 1u, 256u);
    var bv = NEG_INF;
    var bi = 0xffffffffu;
    if (lid.x < parts) {
        let o = 2u * (r * parts + lid.x);
        bv = bitcast<f32>(part[o]);
        bi = part[o + 1u];
    }
    best_v[lid.x] = bv;
    best_i[lid.x] = bi;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {
        if (lid.x < s) {
            let ov = best_v[lid.x + s];
            let oi = best_i[lid.x + s];
            let mine = best_i[lid.x];
            if (oi != 0xffffffffu && (mine == 0xffffffffu || ov > best_v[lid.x] || (ov == best_v[lid.x] && oi < mine))) {
                best_v[lid.x] = ov;
                best_i[lid.x] = oi;
            }
        }
        workgroupBarrier();
    }
    if (lid.x == 0u) { out[r] = select(best_i[0], 0u, best_i[0] == 0xffffffffu); }
}
