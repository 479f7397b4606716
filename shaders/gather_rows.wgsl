// gather_rows: out[i][:] = src[rows[i]][:].
@group(0) @binding(0) var<uniform> p: GatherRowsParams;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read> rows: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= p.n_out * p.dim) { return; }
    let r = min(rows[i / p.dim], p.n_src - 1u);
    out[i] = src[r * p.dim + i % p.dim];
}
