// rmsnorm: out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w. One workgroup per row.
@group(0) @binding(0) var<uniform> p: RmsnormParams;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> wn: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

var<workgroup> partial: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = wg.x + wg.y * nwg.x;
    if (r >= p.rows) { return; }
    let base = r * p.dim;
    var ss = 0.0;
    for (var c = lid.x; c < p.dim; c = c + 256u) {
        let v = x[base + c];
        ss = ss + v * v;
    }
    partial[lid.x] = ss;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {
        if (lid.x < s) { partial[lid.x] = partial[lid.x] + partial[lid.x + s]; }
        workgroupBarrier();
    }
    let inv = 1.0 / sqrt(partial[0] / f32(p.dim) + p.eps);
    for (var c = lid.x; c < p.dim; c = c + 256u) {
        out[base + c] = x[base + c] * inv * wn[c];
    }
}
