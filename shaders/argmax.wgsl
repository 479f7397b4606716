// argmax, pass 2: out[r] = the index of the max of row r, lowest index on ties (NaN ignored; 0 when
// the row has no number), from the row's parts (value bits, index) that argmax_part.wgsl wrote.
// One workgroup per row.
@group(0) @binding(0) var<uniform> p: ArgmaxParams;
@group(0) @binding(1) var<storage, read> part: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = wg.x + wg.y * nwg.x;
    if (r >= p.rows) { return; }
    let parts = argmax_parts(p.n);
    var bv = NEG_INF;
    var bi = 0xffffffffu;
    if (lid.x < parts) {
        let o = 2u * (r * parts + lid.x);
        bv = bitcast<f32>(part[o]);
        bi = part[o + 1u];
    }
    let i = argmax_best(lid.x, bv, bi);
    if (lid.x == 0u) { out[r] = select(i, 0u, i == 0xffffffffu); }
}
