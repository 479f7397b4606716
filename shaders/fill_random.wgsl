// fill_random: element i = offset + scale * u(seed, i), u a PCG hash mapped exactly to [-1, 1)
// (same bits as fill_random_value in src/backend/params.rs). One thread per 32-bit word; f16/bf16
// buffers hold two elements per word.
@group(0) @binding(0) var<uniform> p: FillRandomParams;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;

fn value(i: u32) -> f32 {
    var h = (i * 747796405u + 2891336453u) ^ (p.seed * 0x9E3779B9u);
    h = ((h >> ((h >> 28u) + 4u)) ^ h) * 277803737u;
    h = (h >> 22u) ^ h;
    let u = f32(h >> 8u) * (1.0 / 8388608.0) - 1.0;
    return p.offset + p.scale * u;
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let wi = gid.x + gid.y * nwg.x * 256u;
    if (p.dtype == 0u) {
        if (wi < p.n) { out[wi] = bitcast<u32>(value(wi)); }
        return;
    }
    let i = wi * 2u;
    if (i >= p.n) { return; }
    let a = value(i);
    let b = select(0.0, value(i + 1u), i + 1u < p.n);
    if (p.dtype == 1u) {
        out[wi] = pack2x16float(vec2<f32>(a, b));
    } else {
        // bf16 by truncation of the f32 bits (round toward zero).
        out[wi] = (bitcast<u32>(a) >> 16u) | (bitcast<u32>(b) & 0xffff0000u);
    }
}
