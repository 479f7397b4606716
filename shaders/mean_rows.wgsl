// mean_rows: out[i][:] = the mean of src rows indptr[i] .. indptr[i + 1], summed in row order in f32
// then divided by the count (the CPU reference's order); an empty range gives zeros. One invocation
// per output element.
@group(0) @binding(0) var<uniform> p: MeanRowsParams;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read> indptr: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= p.n_out * p.dim) { return; }
    let row = i / p.dim;
    let d = i % p.dim;
    let a = indptr[row];
    let b = min(indptr[row + 1u], p.n_src);
    var s = 0.0;
    for (var r = a; r < b; r++) { s += src[r * p.dim + d]; }
    out[i] = select(0.0, s / f32(b - a), b > a);
}
