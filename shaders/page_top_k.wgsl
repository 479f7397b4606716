// page_top_k (1 of 2, keys): the score table (f32, [(page_indptr[s] + j) * n_ret + r], the layout
// page_select writes its keys in) as page_select_topk's u32 keys, f32::total_cmp order with NaN
// as -inf (f32_key, common.wgsl). One thread per entry: i = (wg.x + wg.y * num_workgroups.x) *
// 256 + local id, every entry both buffers hold. page_select_topk (2 of 2) then picks the best k
// per (row, retrieval head), rank max, over an identity head map (src/backend/wgpu/ops_blocks.rs).

@group(0) @binding(0) var<uniform> p: PageTopKParams;
@group(0) @binding(1) var<storage, read> scores: array<f32>;
@group(0) @binding(2) var<storage, read_write> keys: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = (wg.x + wg.y * nwg.x) * 256u + lid.x;
    if (p.n_ret == 0u || i >= min(arrayLength(&scores), arrayLength(&keys))) { return; }
    let x = scores[i];
    // NaN by its bits (a shader compiler may fold x != x to false).
    let nan = (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
    keys[i] = select(f32_key(x), KEY_NEG_INF, nan);
}
