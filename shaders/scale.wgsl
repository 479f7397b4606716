// scale, in place: x[i] *= p.scale for i < p.n.
@group(0) @binding(0) var<uniform> p: ScaleParams;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= p.n) { return; }
    x[i] = x[i] * p.scale;
}
