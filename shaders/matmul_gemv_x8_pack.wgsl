// matmul_gemv_x8_pack (pass 1 of matmul_gemv_x8): x [m][k] f32 (k % 32 == 0) to two int8 digits
// per element, in blocks of 32 (the CUDA m = 1 GEMV's numerics, reference/weight_quant.rs
// x8_blocks). Block i (= row * k / 32 + b, elements 32b .. 32b + 31 of row `row`): d = max|x| /
// 127 (0 for an all-zero block), hi = round(x / d), lo = clamp(round((x - d hi) / d * 254),
// -127, 127) (round half to even), so x = d (hi + lo / 254) within max|x| / 64516 (one digit
// alone, llama.cpp's q8_1, moved the default model's greedy ids away from the f32 reference).
// Stored in xq (u32 words; B = m k / 32 blocks) as:
//   words 4i .. 4i + 3: hi digits 0..15, four i8 per word, element 4t in the low byte of word t;
//   words 4B + 4i .. + 3: hi digits 16..31 (so both halves of consecutive blocks are contiguous:
//   lanes reading 16 bytes of consecutive blocks read consecutive memory);
//   words 8B + 4i .. and 12B + 4i ..: the lo digits, likewise;
//   words 16B + 2i, + 1: d and the block's code sum sum(hi + lo / 254) (both f32 bits).
// Eight threads per block (one vec4 of x each), 32 blocks per 256-thread workgroup (workgroup id
// wg.x + wg.y * num_workgroups.x): a 4096-wide x is 16 workgroups, not 2 of one thread per block
// that each loaded and quantized 32 elements in sequence. max|x| and the code sum are gathered
// through workgroup memory in the order of one thread per block (same bits).

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> xq: array<u32>;

var<workgroup> red: array<f32, 256>;

fn amax4(v: vec4<f32>) -> f32 {
    let a = abs(v);
    return max(max(a.x, a.y), max(a.z, a.w));
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let blocks = p.m * (p.k / 32u);
    let g = (wg.x + wg.y * nwg.x) * 256u + t; // vec4 g of x: part c of block i
    let i = g / 8u;
    let c = g % 8u;
    let b0 = t - c; // this block's first thread
    let live = i < blocks;
    var v = vec4<f32>(0.0);
    if (live) { v = x[g]; }
    red[t] = amax4(v);
    workgroupBarrier();
    var amax = 0.0;
    for (var u = 0u; u < 8u; u++) { amax = max(amax, red[b0 + u]); }
    let d = amax / 127.0;
    let id = select(0.0, 1.0 / d, d > 0.0);
    let h = round(v * id);
    let l = clamp(round((v - h * d) * id * 254.0), vec4<f32>(-127.0), vec4<f32>(127.0));
    workgroupBarrier();
    red[t] = dot(h, vec4<f32>(1.0)) + dot(l, vec4<f32>(1.0 / 254.0));
    workgroupBarrier();
    if (!live) { return; }
    let at = 4u * (i + (c / 4u) * blocks) + c % 4u;
    xq[at] = pack4xI8(vec4<i32>(h));
    xq[at + 8u * blocks] = pack4xI8(vec4<i32>(l));
    if (c == 0u) {
        var sum = 0.0;
        for (var u = 0u; u < 8u; u++) { sum += red[b0 + u]; }
        xq[16u * blocks + 2u * i] = bitcast<u32>(d);
        xq[16u * blocks + 2u * i + 1u] = bitcast<u32>(sum);
    }
}
