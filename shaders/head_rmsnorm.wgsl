// head_rmsnorm, in place: in each of p.rows rows of p.row_stride floats, segment h < p.n_heads
// (floats h*head_dim .. (h+1)*head_dim) becomes x / sqrt(mean(x^2) + eps) * w[h][:]. One
// workgroup per (row, head) segment.
@group(0) @binding(0) var<uniform> p: HeadRmsnormParams;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read> wn: array<f32>;

var<workgroup> partial: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let seg = wg.x + wg.y * nwg.x;
    if (seg >= p.rows * p.n_heads) { return; }
    let r = seg / p.n_heads;
    let h = seg % p.n_heads;
    let base = r * p.row_stride + h * p.head_dim;
    var ss = 0.0;
    for (var c = lid.x; c < p.head_dim; c = c + 256u) {
        let v = x[base + c];
        ss = ss + v * v;
    }
    partial[lid.x] = ss;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {
        if (lid.x < s) { partial[lid.x] = partial[lid.x] + partial[lid.x + s]; }
        workgroupBarrier();
    }
    let inv = 1.0 / sqrt(partial[0] / f32(p.head_dim) + p.eps);
    for (var c = lid.x; c < p.head_dim; c = c + 256u) {
        x[base + c] = x[base + c] * inv * wn[h * p.head_dim + c];
    }
}
