// rope_append_kv, pass 1 of 2 (pass 2: rope_append_kv_summary.wgsl refreshes the page summaries).
//
// qkv `[n_tokens][(n_heads + 2 n_kv_heads) head_dim]` (q heads | k heads | v heads).
// q out `[n_tokens][n_heads][head_dim]`, rotated. KV head h goes, per head_map[h], to
//   retrieval head i (head_map = i):          k/v  at (((slot / ps) * n_ret + i) * ps + slot % ps) * hd, slot = slots[t]
//   streaming head i (head_map = BIT | i):    sk/sv at (((slot / ps) * n_str + i) * ps + slot % ps) * hd, slot = ring_slots[t]
// k is rotated, v copied. Rotate-half RoPE (src/model/rope.rs rotate_half_in_place): for pair
// j < hd/2, angle = f32(pos) * inv_freq[j], c = cos * attention_scaling, s = sin * attention_scaling,
// (x[j], x[j + hd/2]) -> (x0 c - x1 s, x1 c + x0 s); with an odd head_dim the last element is copied.
//
// One thread per (token, head, pair): i = (t * (n_heads + n_kv_heads) + h) * ceil(hd/2) + j.
// Threads of a kv head also copy the pair's v elements. Slots or head_map entries outside the
// pools are skipped (the host cannot read them; the CPU reference rejects them).
//
// sin/cos are computed by shaders/rope_sincos.wgsl, not with the builtins.
@group(0) @binding(0) var<uniform> p: RopeAppendKvParams;
@group(0) @binding(1) var<storage, read> qkv: array<f32>;
@group(0) @binding(2) var<storage, read> positions: array<u32>;
@group(0) @binding(3) var<storage, read> slots: array<u32>;
@group(0) @binding(4) var<storage, read> ring_slots: array<u32>;
@group(0) @binding(5) var<storage, read> inv_freq: array<f32>;
@group(0) @binding(6) var<storage, read> head_map: array<u32>;
@group(0) @binding(7) var<storage, read_write> q: array<f32>;
@group(0) @binding(8) var<storage, read_write> k: array<f32>;
@group(0) @binding(9) var<storage, read_write> v: array<f32>;
@group(0) @binding(10) var<storage, read_write> sk: array<f32>;
@group(0) @binding(11) var<storage, read_write> sv: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    let hd = p.head_dim;
    let hh = hd / 2u;
    let pairs = (hd + 1u) / 2u;
    let heads = p.n_heads + p.n_kv_heads;
    if (i >= p.n_tokens * heads * pairs) { return; }
    let j = i % pairs;
    let h = (i / pairs) % heads;
    let t = i / (pairs * heads);
    let row = t * (heads + p.n_kv_heads) * hd;
    let rotate = j < hh;
    var c = 0.0f;
    var s = 0.0f;
    if (rotate) {
        let sc = sin_cos(f32(positions[t]) * inv_freq[j]);
        c = sc.y * p.attention_scaling;
        s = sc.x * p.attention_scaling;
    }
    // j == hh only with an odd head_dim: the unpaired last element (index 2 * hh == j + hh).
    let lo = select(j + hh, j, rotate);
    let hi = j + hh;

    if (h < p.n_heads) {
        let src = row + h * hd;
        let dst = (t * p.n_heads + h) * hd;
        let x0 = qkv[src + lo];
        let x1 = qkv[src + hi];
        if (rotate) {
            q[dst + lo] = x0 * c - x1 * s;
            q[dst + hi] = x1 * c + x0 * s;
        } else {
            q[dst + hi] = x1;
        }
        return;
    }

    let kh = h - p.n_heads;
    let m = head_map[kh];
    let streaming = (m & STREAMING_BIT) != 0u;
    let idx = m & ~STREAMING_BIT;
    let ksrc = row + (p.n_heads + kh) * hd;
    let vsrc = row + (p.n_heads + p.n_kv_heads + kh) * hd;
    let x0 = qkv[ksrc + lo];
    let x1 = qkv[ksrc + hi];
    let k0 = select(x0, x0 * c - x1 * s, rotate);
    let k1 = select(x1, x1 * c + x0 * s, rotate);
    let v0 = qkv[vsrc + lo];
    let v1 = qkv[vsrc + hi];
    let ps = p.page_size;
    if (streaming) {
        let slot = ring_slots[t];
        if (idx >= p.n_str || slot >= p.num_str_pages * ps) { return; }
        let at = (((slot / ps) * p.n_str + idx) * ps + slot % ps) * hd;
        sk[at + lo] = k0;
        sk[at + hi] = k1;
        sv[at + lo] = v0;
        sv[at + hi] = v1;
    } else {
        let slot = slots[t];
        if (idx >= p.n_ret || slot >= p.num_pages * ps) { return; }
        let at = (((slot / ps) * p.n_ret + idx) * ps + slot % ps) * hd;
        k[at + lo] = k0;
        k[at + hi] = k1;
        v[at + lo] = v0;
        v[at + hi] = v1;
    }
}
