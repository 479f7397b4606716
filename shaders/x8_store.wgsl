// x8_store: the one quantizer of x8 digits in wgpu, appended to matmul_gemv_x8_pack and to the
// ops that write a DType::X8 out (rmsnorm_x8, add_rmsnorm_x8, silu_mul_x8,
// sparse_decode_attention_merge_x8). The including module defines `x8_put(word, value)`, the
// store into its u32 out. Blocks of 32 elements, d = max|x| / 127 (0 for an all-zero block),
// hi = round(x / d), lo = clamp(round((x - d hi) / d * 254), -127, 127) (round half to even), so
// x = d (hi + lo / 254) within max|x| / 64516 (reference/weight_quant.rs x8_blocks). With B
// blocks in the buffer (one row for the ops; m rows of k / 32 for the pack), block i lies as
// (u32 words):
//   4i .. 4i + 3: hi digits 0..15, four i8 a word, element 4t in the low byte of word t;
//   4B + 4i .. + 3: hi digits 16..31 (so both halves of consecutive blocks are contiguous:
//   lanes of matmul_gemv_x8 reading 16 bytes of consecutive blocks read consecutive memory);
//   8B + 4i .. and 12B + 4i ..: the lo digits, likewise;
//   16B + 2i, + 1: d and the block's code sum sum(hi + lo / 254) (both f32 bits; the GEMV reads
//   these);
//   18B + i: the block's sum of x (f32, summed as DType::X8 states it: CUDA's 8-lane tree).
// This is wgpu's device layout of DType::X8 (the trait's 80 bytes a block, 76 used); the backend
// converts to and from the trait's layout where a buffer crosses to the host (x8.rs).

var<workgroup> x8_red: array<f32, 256>;
var<workgroup> x8_xsum: array<f32, 256>;

fn x8_amax4(v: vec4<f32>) -> f32 {
    let a = abs(v);
    return max(max(a.x, a.y), max(a.z, a.w));
}

// Thread t (< 256) of the workgroup holds v, elements 4c .. 4c + 3 of block i, c = t % 8: a
// block's 8 threads are t - c .. t - c + 7. Every thread of the workgroup calls it (barriers);
// threads with live false store nothing (their v must be 0). max|x| and the code sum are gathered
// in the order of one thread per block (the bits of the kernel this replaced).
fn x8_store(t: u32, i: u32, v: vec4<f32>, live: bool, blocks: u32) {
    let c = t % 8u;
    let b0 = t - c;
    workgroupBarrier(); // the previous call's readers of x8_red are done
    x8_red[t] = x8_amax4(v);
    workgroupBarrier();
    var amax = 0.0;
    for (var u = 0u; u < 8u; u++) { amax = max(amax, x8_red[b0 + u]); }
    let d = amax / 127.0;
    let id = select(0.0, 1.0 / d, d > 0.0);
    let h = round(v * id);
    let l = clamp(round((v - h * d) * id * 254.0), vec4<f32>(-127.0), vec4<f32>(127.0));
    workgroupBarrier();
    x8_red[t] = dot(h, vec4<f32>(1.0)) + dot(l, vec4<f32>(1.0 / 254.0));
    x8_xsum[t] = (v.x + v.y) + (v.z + v.w);
    workgroupBarrier();
    if (!live) { return; }
    let at = 4u * (i + (c / 4u) * blocks) + c % 4u;
    x8_put(at, pack4xI8(vec4<i32>(h)));
    x8_put(at + 8u * blocks, pack4xI8(vec4<i32>(l)));
    if (c == 0u) {
        var sum = 0.0;
        for (var u = 0u; u < 8u; u++) { sum += x8_red[b0 + u]; }
        x8_put(16u * blocks + 2u * i, bitcast<u32>(d));
        x8_put(16u * blocks + 2u * i + 1u, bitcast<u32>(sum));
        let s = array(x8_xsum[b0], x8_xsum[b0 + 1u], x8_xsum[b0 + 2u], x8_xsum[b0 + 3u], x8_xsum[b0 + 4u],
                      x8_xsum[b0 + 5u], x8_xsum[b0 + 6u], x8_xsum[b0 + 7u]);
        let xsum = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
        x8_put(18u * blocks + i, bitcast<u32>(xsum));
    }
}
