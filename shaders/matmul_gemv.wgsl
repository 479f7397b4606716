// matmul_gemv (decode, small m): out[m][n] = x[m][k] . w[n][k]^T (+ bias[n]), f32 accumulation.
// Layout as matmul.wgsl: x [m][k] f32, w [n][k] via load_w, bias [n] f32 (unread when has_bias
// == 0), out [m][n] f32. One workgroup of 256 threads = 8 groups of 32 lanes covers 16 weight rows;
// group g reduces rows 16 wg + 2g and 2g + 1 (clamped to n - 1 for loads, masked on store). Lane l
// walks each row in element pairs 2l + 64i, so a group streams its rows once with coalesced word
// loads, two rows x two pairs in flight per step; each x value feeds both rows. x rows are taken
// four at a time (a vec4 of accumulators per weight row; for m == 1 one x load per element); the
// 32 lane partials are tree-reduced in workgroup memory (8 KiB). Extra chunks of four x rows walk
// the same weight rows again, which then come from cache. Workgroup id = wg.x + wg.y * nwg.x.

const ROWS: u32 = 16u; // weight rows per workgroup

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<u32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

// red[t] and red[256 + t]: thread t's partial sums for its two rows (one x row per component).
var<workgroup> red: array<vec4<f32>, 512>;

struct Acc { a: vec4<f32>, b: vec4<f32> }

// Four elements e of x row r (at offset o) as a vector.
fn xg(o: u32, e: vec4<u32>) -> vec4<f32> {
    return vec4<f32>(x[o + e.x], x[o + e.y], x[o + e.z], x[o + e.w]);
}

// Adds, for each of the mc (1..4) x rows at offsets xo, the dot products of its elements e with
// the weight values wa4 / wb4 of the two rows (component r of acc.a / acc.b = x row r).
fn dots(acc: ptr<function, Acc>, xo: vec4<u32>, mc: u32, e: vec4<u32>, wa4: vec4<f32>, wb4: vec4<f32>) {
    let x0 = xg(xo.x, e);
    (*acc).a.x += dot(x0, wa4);
    (*acc).b.x += dot(x0, wb4);
    if (mc > 1u) {
        let x1 = xg(xo.y, e);
        (*acc).a.y += dot(x1, wa4);
        (*acc).b.y += dot(x1, wb4);
    }
    if (mc > 2u) {
        let x2 = xg(xo.z, e);
        (*acc).a.z += dot(x2, wa4);
        (*acc).b.z += dot(x2, wb4);
    }
    if (mc > 3u) {
        let x3 = xg(xo.w, e);
        (*acc).a.w += dot(x3, wa4);
        (*acc).b.w += dot(x3, wb4);
    }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = lid.x;
    let lane = t % 32u;
    let row = (wg.x + wg.y * nwg.x) * ROWS + 2u * (t / 32u);
    if ((wg.x + wg.y * nwg.x) * ROWS >= p.n) { return; } // whole workgroup: barriers stay uniform
    let k = p.k;
    let ra = min(row, p.n - 1u);
    let rb = min(row + 1u, p.n - 1u);
    let wa = ra * k;
    let wb = rb * k;
    let full = k - k % 128u; // elements covered by whole steps of 128 (4 per lane)
    for (var m0 = 0u; m0 < p.m; m0 += 4u) {
        let mc = min(p.m - m0, 4u);
        let xo = vec4<u32>(m0, m0 + 1u, m0 + 2u, m0 + 3u) * k;
        var acc = Acc(vec4<f32>(0.0), vec4<f32>(0.0));
        if ((k & 1u) == 0u) {
            // Even k: every row starts on a word, and lane l takes the element pairs 2l, 2l + 1
            // and 2l + 64, 2l + 65 of each step. Indices are written 2 * P (+ 1) so the compiler
            // sees their parity: a 16-bit pair becomes one word load.
            let ha = ra * (k / 2u);
            let hb = rb * (k / 2u);
            for (var s = 0u; s < full; s += 128u) {
                let pa = ha + s / 2u + lane;
                let pb = hb + s / 2u + lane;
                let wa4 = vec4<f32>(load_w(2u * pa), load_w(2u * pa + 1u), load_w(2u * pa + 64u), load_w(2u * pa + 65u));
                let wb4 = vec4<f32>(load_w(2u * pb), load_w(2u * pb + 1u), load_w(2u * pb + 64u), load_w(2u * pb + 65u));
                let e = vec4<u32>(0u, 1u, 64u, 65u) + (s + 2u * lane);
                dots(&acc, xo, mc, e, wa4, wb4);
            }
        } else {
            for (var s = 0u; s < full; s += 128u) {
                let e = vec4<u32>(0u, 32u, 64u, 96u) + (s + lane);
                let wa4 = vec4<f32>(load_w(wa + e.x), load_w(wa + e.y), load_w(wa + e.z), load_w(wa + e.w));
                let wb4 = vec4<f32>(load_w(wb + e.x), load_w(wb + e.y), load_w(wb + e.z), load_w(wb + e.w));
                dots(&acc, xo, mc, e, wa4, wb4);
            }
        }
        for (var j = full + lane; j < k; j += 32u) { // the last k % 128 elements, one at a time
            dots(&acc, xo, mc, vec4<u32>(j), vec4<f32>(load_w(wa + j), 0.0, 0.0, 0.0), vec4<f32>(load_w(wb + j), 0.0, 0.0, 0.0));
        }
        workgroupBarrier(); // the previous chunk's reads of red are done
        red[t] = acc.a;
        red[256u + t] = acc.b;
        for (var s = 16u; s > 0u; s >>= 1u) {
            workgroupBarrier();
            if (lane < s) {
                red[t] += red[t + s];
                red[256u + t] += red[256u + t + s];
            }
        }
        if (lane == 0u) {
            for (var r = 0u; r < 2u; r++) {
                let nr = row + r;
                if (nr < p.n) {
                    var b = 0.0;
                    if (p.has_bias != 0u) { b = bias[nr]; }
                    let v = red[256u * r + t];
                    for (var i = 0u; i < mc; i++) { out[(m0 + i) * p.n + nr] = v[i] + b; }
                }
            }
        }
    }
}
