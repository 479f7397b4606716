// sparse_decode_attention_merge: combine the split-KV partials of sparse_decode_attention.
// part: word 0 = n_splits (u32 bits, <= 256), words 1-3 unused, then
// [num_seqs][n_heads][n_splits][head_dim + 2] (accumulator relative to the split's max m, then m
// and the split's sum l); splits that got no keys hold (m, l) = (-inf, 0) and an undefined
// accumulator, and only splits below the last one with l > 0 are read. out
// [num_seqs][n_heads][head_dim]. One workgroup of 128 threads per (sequence, head) row:
// out = sum_i acc_i w_i / sum_i l_i w_i with w_i = e^(m_i - M), M = max_i m_i (tree reductions in
// workgroup memory); each thread then sums its dims over the splits, 16 loads at a time. A row
// that saw no key (every l_i = 0) gets zeros, like the CPU reference. X8_OUT (prepended by
// shaders.rs): the `sparse_decode_attention_merge_x8` variant, one sequence's row
// [n_heads][head_dim] as x8 digits (head_dim % 32 == 0: the op checks), by chunks of X8_CHUNK
// of the head's values staged in workgroup memory and quantized a vec4 a thread
// (shaders/x8_store.wgsl); out holds f32 bits otherwise. X8_CHUNK is the workgroup's width,
// so head_dim up to 128 merges in one pass (the parity tests' head_dim 256 crosses chunks).

@group(0) @binding(0) var<uniform> p: AttentionParams;
@group(0) @binding(1) var<storage, read> part: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

fn x8_put(i: u32, v: u32) { out[i] = v; }

const WG: u32 = 128u;

var<workgroup> w: array<f32, 256>;
var<workgroup> red: array<f32, 128>;
var<workgroup> used: atomic<u32>;
const X8_CHUNK: u32 = 128u;
var<workgroup> ov: array<f32, X8_CHUNK>;

// Splits i..i+8 of dim d (at = its first split's index): sum of acc w (reads past the last
// used split are clamped to it, `last`, and weigh w = 0).
fn merged8(at: u32, st: u32, last: u32, i: u32) -> f32 {
    let x0 = part[min(at, last)];
    let x1 = part[min(at + st, last)];
    let x2 = part[min(at + 2u * st, last)];
    let x3 = part[min(at + 3u * st, last)];
    let x4 = part[min(at + 4u * st, last)];
    let x5 = part[min(at + 5u * st, last)];
    let x6 = part[min(at + 6u * st, last)];
    let x7 = part[min(at + 7u * st, last)];
    return x0 * w[i] + x1 * w[i + 1u] + x2 * w[i + 2u] + x3 * w[i + 3u] + x4 * w[i + 4u] + x5 * w[i + 5u] + x6 * w[i + 6u] + x7 * w[i + 7u];
}

// Dim d of the row whose splits start at part[base]: sum_i acc_i w_i over the nu used splits,
// 16 loads in flight at a time.
fn merged(d: u32, base: u32, st: u32, nu: u32) -> f32 {
    let last = base + (max(nu, 1u) - 1u) * st + d;
    var o = 0.0;
    for (var i = 0u; i < nu; i = i + 16u) {
        let at = base + i * st + d;
        o = o + (merged8(at, st, last, i) + merged8(at + 8u * st, st, last, i + 8u));
    }
    return o;
}

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = lid.x;
    let row = wg.x + wg.y * nwg.x;
    let rows = p.num_seqs * p.n_heads;
    if (row >= rows) { return; }
    let hd = p.head_dim;
    let st = hd + 2u;
    let ns = min(bitcast<u32>(part[0]), 256u);
    let base = 4u + row * ns * st;
    if (t == 0u) { atomicStore(&used, 0u); }
    workgroupBarrier();

    // M = max m_i; splits used = 1 + the last with l > 0.
    var mx = NEG_INF;
    for (var i = t; i < ns; i = i + WG) {
        w[i] = part[base + i * st + hd];
        mx = max(mx, w[i]);
        if (part[base + i * st + hd + 1u] > 0.0) { atomicMax(&used, i + 1u); }
    }
    red[t] = mx;
    workgroupBarrier();
    for (var h = WG / 2u; h > 0u; h = h >> 1u) {
        if (t < h) { red[t] = max(red[t], red[t + h]); }
        workgroupBarrier();
    }
    let m = red[0];
    workgroupBarrier();
    // w_i = e^(m_i - M) (0 past the last split, up to a multiple of 16), L = sum l_i w_i.
    var l = 0.0;
    for (var i = t; i < (ns + 15u) / 16u * 16u; i = i + WG) {
        if (i < ns) {
            w[i] = exp(w[i] - m);
            l = l + part[base + i * st + hd + 1u] * w[i];
        } else {
            w[i] = 0.0;
        }
    }
    red[t] = l;
    workgroupBarrier();
    for (var h = WG / 2u; h > 0u; h = h >> 1u) {
        if (t < h) { red[t] = red[t] + red[t + h]; }
        workgroupBarrier();
    }
    let inv = select(0.0, 1.0 / red[0], red[0] > 0.0);

    let nu = atomicLoad(&used);
    if (X8_OUT) {
        for (var c0 = 0u; c0 < hd; c0 = c0 + X8_CHUNK) {
            let n = min(hd - c0, X8_CHUNK);
            for (var d = t; d < n; d = d + WG) { ov[d] = merged(c0 + d, base, st, nu) * inv; }
            workgroupBarrier();
            let live = t < n / 4u;
            var v = vec4(0.0);
            if (live) { v = vec4(ov[4u * t], ov[4u * t + 1u], ov[4u * t + 2u], ov[4u * t + 3u]); }
            x8_store(t, (row * hd + c0) / 32u + t / 8u, v, live, rows * hd / 32u);
        }
        return;
    }
    for (var d = t; d < hd; d = d + WG) {
        out[row * hd + d] = bitcast<u32>(merged(d, base, st, nu) * inv);
    }
}
