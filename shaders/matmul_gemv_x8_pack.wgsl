// matmul_gemv_x8_pack (pass 1 of matmul_gemv_x8): x [m][k] f32 (k % 32 == 0) to int8 blocks of 32,
// as llama.cpp's q8_1. Block i (= row * k / 32 + b, elements 32b .. 32b + 31 of row `row`): d =
// max|x| / 127 (0 for an all-zero block), code = clamp(round(x / d), -127, 127) (round half to
// even), stored in xq (u32 words; B = m k / 32 blocks) as:
//   words 4i .. 4i + 3: codes 0..15, four i8 per word, element 4t in the low byte of word t;
//   words 4B + 4i .. + 3: codes 16..31 (so both halves of consecutive blocks are contiguous:
//   lanes reading 16 bytes of consecutive blocks read consecutive memory);
//   words 8B + 2i, + 1: d (f32 bits), the sum of the 32 codes (i32 bits).
// The values x block i stands for are d * code (matmul_gemv_x8 multiplies the weights with them).
// One thread per block, 64 per workgroup (workgroup id wg.x + wg.y * num_workgroups.x).

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> xq: array<u32>;

fn amax4(v: vec4<f32>) -> f32 {
    let a = abs(v);
    return max(max(a.x, a.y), max(a.z, a.w));
}

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let blocks = p.m * (p.k / 32u);
    let i = (wg.x + wg.y * nwg.x) * 64u + t;
    if (i >= blocks) { return; }
    var v: array<vec4<f32>, 8>;
    var amax = 0.0;
    for (var c = 0u; c < 8u; c++) {
        v[c] = x[8u * i + c];
        amax = max(amax, amax4(v[c]));
    }
    let d = amax / 127.0;
    let id = select(0.0, 1.0 / d, d > 0.0);
    var sum = 0;
    for (var c = 0u; c < 8u; c++) {
        let q = clamp(vec4<i32>(round(v[c] * id)), vec4<i32>(-127), vec4<i32>(127));
        sum += q.x + q.y + q.z + q.w;
        xq[4u * (i + (c / 4u) * blocks) + c % 4u] = pack4xI8(q);
    }
    xq[8u * blocks + 2u * i] = bitcast<u32>(d);
    xq[8u * blocks + 2u * i + 1u] = bitcast<u32>(sum);
}
