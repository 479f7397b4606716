// sparse_decode_attention_merge: combine the split-KV partials of sparse_decode_attention.
// part [num_seqs][n_heads][n_splits][head_dim + 2] (accumulator relative to the split's max m,
// then m and the split's sum l); n_splits = arrayLength(part) / (num_seqs * n_heads * (hd + 2)) —
// the backend allocates `part` at exactly that size, with n_splits <= 256. out
// [num_seqs][n_heads][head_dim]. One workgroup of 128 threads per (sequence, head) row:
// out = sum_i acc_i w_i / sum_i l_i w_i with w_i = e^(m_i - M), M = max_i m_i (tree reductions in
// workgroup memory); each thread then sums its dims over the splits, 16 loads at a time. A row
// that saw no key (every l_i = 0) gets zeros, like the CPU reference.

@group(0) @binding(0) var<uniform> p: AttentionParams;
@group(0) @binding(1) var<storage, read> part: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

const WG: u32 = 128u;

var<workgroup> w: array<f32, 256>;
var<workgroup> red: array<f32, 128>;

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = lid.x;
    let row = wg.x + wg.y * nwg.x;
    let rows = p.num_seqs * p.n_heads;
    if (row >= rows) { return; }
    let hd = p.head_dim;
    let st = hd + 2u;
    let ns = min(arrayLength(&part) / (rows * st), 256u);
    let base = row * ns * st;

    // M = max m_i.
    var mx = NEG_INF;
    for (var i = t; i < ns; i = i + WG) {
        w[i] = part[base + i * st + hd];
        mx = max(mx, w[i]);
    }
    red[t] = mx;
    workgroupBarrier();
    for (var h = WG / 2u; h > 0u; h = h >> 1u) {
        if (t < h) { red[t] = max(red[t], red[t + h]); }
        workgroupBarrier();
    }
    let m = red[0];
    workgroupBarrier();
    // w_i = e^(m_i - M), L = sum l_i w_i.
    var l = 0.0;
    for (var i = t; i < ns; i = i + WG) {
        w[i] = exp(w[i] - m);
        l = l + part[base + i * st + hd + 1u] * w[i];
    }
    red[t] = l;
    workgroupBarrier();
    for (var h = WG / 2u; h > 0u; h = h >> 1u) {
        if (t < h) { red[t] = red[t] + red[t + h]; }
        workgroupBarrier();
    }
    let inv = select(0.0, 1.0 / red[0], red[0] > 0.0);

    for (var d = t; d < hd; d = d + WG) {
        var o = 0.0;
        for (var i0 = 0u; i0 < ns; i0 = i0 + 16u) {
            var x: array<f32, 16>;
            for (var u = 0u; u < 16u; u = u + 1u) { x[u] = part[base + min(i0 + u, ns - 1u) * st + d]; }
            for (var u = 0u; u < 16u; u = u + 1u) {
                if (i0 + u < ns) { o = o + x[u] * w[i0 + u]; }
            }
        }
        out[row * hd + d] = o * inv;
    }
}
