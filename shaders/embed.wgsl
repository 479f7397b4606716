// embed: out[t][d] = table[ids[t] - first][d] as f32; ids outside first .. first + vocab (another
// tensor-parallel rank's rows) give zeros. One thread per output element; quantized tables are
// dequantized element by element by load_w (shaders/quant_weights.wgsl).
@group(0) @binding(0) var<uniform> p: EmbedParams;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> ids: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
// The table's geometry, read by the quantized formats' decoders (shaders/quant_weights.wgsl).
fn w_cols() -> u32 { return p.dim; }
fn w_rows() -> u32 { return p.vocab; }

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= p.n_tokens * p.dim) { return; }
    let t = i / p.dim;
    let id = ids[t] - p.first; // u32: ids below first wrap past vocab
    if (id >= p.vocab) {
        out[i] = 0.0;
        return;
    }
    out[i] = load_w(id * p.dim + i % p.dim);
}
