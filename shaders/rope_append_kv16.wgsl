// rope_append_kv16: rope_append_kv (shaders/rope_append_kv.wgsl has the layouts, the rotation and
// the skipping of slots and head_map entries outside the pools) in one pass for 16-bit pools
// (KV_KIND 1 = f16, 2 = bf16, from the KV snippet), where the backend would otherwise stage f32
// rows and store them with rope_append_kv_pack: the backend picks it where head_dim % 4 == 0.
//
// One thread per (token, head, quad u < head_dim / 4): rope pairs 2u and 2u + 1, i.e. dims 2u,
// 2u + 1, hh + 2u and hh + 2u + 1 (hh = head_dim / 2, even). q heads write their four rotated f32
// values; KV heads round k (rotated) and v (copied) to the pool's type (shaders/kv_round16.wgsl,
// the values rope_append_kv_pack stores, bit for bit) and store two u32 words of each row: word
// u (dims 2u, 2u + 1) and word hh / 2 + u (dims hh + 2u, hh + 2u + 1).
//
// Page summaries: with several tokens a call, rope_append_kv_summary.wgsl refreshes them
// afterwards, as for every pool (tokens of one logical page cannot order their writes within a
// dispatch). With one token (n_tokens == 1: a batch-1 decode step) this pass folds the stored
// (rounded) key values into their logical page's min/max itself: the summary pass would compute
// min(...min(k_first, k_first+1)..., k_off) over the page's tokens in offset order, which is the
// page's summary so far (kept by every earlier call) then min with this key; a token at a
// logical page's first offset starts it (min = max = its value). So the result is the same, bit
// for bit, and the step saves the summary's dispatch.
@group(0) @binding(0) var<uniform> p: RopeAppendKvParams;
@group(0) @binding(1) var<storage, read> qkv: array<f32>;
@group(0) @binding(2) var<storage, read> positions: array<u32>;
@group(0) @binding(3) var<storage, read> slots: array<u32>;
@group(0) @binding(4) var<storage, read> ring_slots: array<u32>;
@group(0) @binding(5) var<storage, read> inv_freq: array<f32>;
@group(0) @binding(6) var<storage, read> head_map: array<u32>;
@group(0) @binding(7) var<storage, read_write> q: array<f32>;
@group(0) @binding(8) var<storage, read_write> k: array<u32>;
@group(0) @binding(9) var<storage, read_write> v: array<u32>;
@group(0) @binding(10) var<storage, read_write> sk: array<u32>;
@group(0) @binding(11) var<storage, read_write> sv: array<u32>;
@group(0) @binding(12) var<storage, read_write> summary: array<f32>;

// The rotation and the stores: shaders/rope16_quad.wgsl (one thread a quad here).

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    let hd = p.head_dim;
    let hh = hd / 2u;
    let quads = hd / 4u;
    let heads = p.n_heads + p.n_kv_heads;
    if (i >= p.n_tokens * heads * quads) { return; }
    let u = i % quads;
    let h = (i / quads) % heads;
    let t = i / (quads * heads);
    let row = t * (heads + p.n_kv_heads) * hd;
    let j = 2u * u;
    // A quad's dims in a head's row of qkv (rope16_quad.wgsl's order).
    let dims = vec4(j, j + 1u, hh + j, hh + j + 1u);
    if (h < p.n_heads) {
        let d = dims + vec4(row + h * hd);
        rope_q_quad(t, h, u, vec4(qkv[d.x], qkv[d.y], qkv[d.z], qkv[d.w]));
        return;
    }
    let kh = h - p.n_heads;
    let dk = dims + vec4(row + (p.n_heads + kh) * hd);
    let dv = dims + vec4(row + (p.n_heads + p.n_kv_heads + kh) * hd);
    rope_kv_quad(t, kh, u, vec4(qkv[dk.x], qkv[dk.y], qkv[dk.z], qkv[dk.w]),
                 vec4(qkv[dv.x], qkv[dv.y], qkv[dv.z], qkv[dv.w]));
}
