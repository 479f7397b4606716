// matmul_gemv (decode, small m): out[m][n] = x[m][k] . w[n][k]^T (+ bias[n]), f32 accumulation
// (p.accumulate, sent at m == 1 only: out += that).
// Layout as matmul.wgsl: x [m][k] f32, w [n][k] via load_w, bias [n] f32 (unread when has_bias
// == 0), out [m] rows of p.ldo floats from p.out_off (strided, as matmul.wgsl). One workgroup of 256 threads = 8 groups of 32 lanes covers ROWS = 16
// weight rows; group g owns rows 16 wg + 2g and + 1 (clamped to n - 1 for loads, masked on store;
// workgroup id = wg.x + wg.y * num_workgroups.x). A group streams its two rows once, in steps of
// 128 elements, 4 per lane: for even k the pairs 2l, 2l + 1 and 2l + 64, 2l + 65 (indices written
// 2P (+ 1), so a 16-bit pair is one coalesced word load), for odd k the elements l + 32i; the last
// k % 128 elements go one per lane. Each weight value is converted once and multiplied with up to
// MX = 16 x rows (a pass: every decode batch the host sends here reads the weights once; larger m
// walks the rows again per pass), each x value feeds both rows. The 32 lane partials are
// tree-reduced in workgroup memory (8 KiB, 4 x rows at a time).

const ROWS: u32 = 16u; // weight rows per workgroup
const MX: u32 = 16u; // x rows per pass over the weights

@group(0) @binding(0) var<uniform> p: MatmulParams;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<u32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
// The weight matrix's geometry, read by the quantized formats' decoders (shaders/quant_weights.wgsl).
fn w_cols() -> u32 { return p.k; }
fn w_rows() -> u32 { return p.n; }

// red[t] and red[256 + t]: thread t's partial sums for its two rows (one x row per component).
var<workgroup> red: array<vec4<f32>, 512>;

// a / b: weight rows A / B times x rows 0..3 of the pass; c / d: times x rows 4..7; e / f: 8..11;
// g / h: 12..15.
struct Acc { a: vec4<f32>, b: vec4<f32>, c: vec4<f32>, d: vec4<f32>, e: vec4<f32>, f: vec4<f32>, g: vec4<f32>, h: vec4<f32> }

// Weight rows A / B (wa4, wb4) against four x rows (x0..x3): the A sums, then the B sums.
fn dots4(x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>, wa4: vec4<f32>, wb4: vec4<f32>) -> array<vec4<f32>, 2> {
    return array<vec4<f32>, 2>(
        vec4<f32>(dot(x0, wa4), dot(x1, wa4), dot(x2, wa4), dot(x3, wa4)),
        vec4<f32>(dot(x0, wb4), dot(x1, wb4), dot(x2, wb4), dot(x3, wb4)),
    );
}

// Four elements e of x row r (at offset o) as a vector.
fn xg(o: u32, e: vec4<u32>) -> vec4<f32> {
    return vec4<f32>(x[o + e.x], x[o + e.y], x[o + e.z], x[o + e.w]);
}

// Adds the dot products of elements e of the pass's x rows (offsets xo[0] for rows 0..3, xo[1]
// for 4..7, ...) with the weight values wa4 / wb4: only row 0 when nx == 1, else the groups of four
// rows up to the one holding row nx - 1 (rows past m are clamped copies whose sums are discarded).
// Each weight value is converted once.
fn dots(acc: ptr<function, Acc>, xo: array<vec4<u32>, 4>, nx: u32, e: vec4<u32>, wa4: vec4<f32>, wb4: vec4<f32>) {
    let x0 = xg(xo[0].x, e);
    if (nx == 1u) {
        (*acc).a.x += dot(x0, wa4);
        (*acc).b.x += dot(x0, wb4);
        return;
    }
    let s0 = dots4(x0, xg(xo[0].y, e), xg(xo[0].z, e), xg(xo[0].w, e), wa4, wb4);
    (*acc).a += s0[0];
    (*acc).b += s0[1];
    if (nx > 4u) {
        let s1 = dots4(xg(xo[1].x, e), xg(xo[1].y, e), xg(xo[1].z, e), xg(xo[1].w, e), wa4, wb4);
        (*acc).c += s1[0];
        (*acc).d += s1[1];
    }
    if (nx > 8u) {
        let s2 = dots4(xg(xo[2].x, e), xg(xo[2].y, e), xg(xo[2].z, e), xg(xo[2].w, e), wa4, wb4);
        (*acc).e += s2[0];
        (*acc).f += s2[1];
    }
    if (nx > 12u) {
        let s3 = dots4(xg(xo[3].x, e), xg(xo[3].y, e), xg(xo[3].z, e), xg(xo[3].w, e), wa4, wb4);
        (*acc).g += s3[0];
        (*acc).h += s3[1];
    }
}

// Sums va / vb over the 32 lanes of each group; lane 0 then finds the totals in red[t] /
// red[256 + t]. Called in uniform control flow.
fn reduce(t: u32, lane: u32, va: vec4<f32>, vb: vec4<f32>) {
    workgroupBarrier(); // earlier reads of red are done
    red[t] = va;
    red[256u + t] = vb;
    for (var s = 16u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if (lane < s) {
            red[t] += red[t + s];
            red[256u + t] += red[256u + t + s];
        }
    }
}

// Lane 0 of a group: out[x row m0 + i][row + r] = red[256 r + t][i] (+ bias) for i < cnt.
fn write(t: u32, row: u32, m0: u32, cnt: u32) {
    for (var r = 0u; r < 2u; r++) {
        let nr = row + r;
        if (nr < p.n) {
            var b = 0.0;
            if (p.has_bias != 0u) { b = bias[nr]; }
            let v = red[256u * r + t];
            for (var i = 0u; i < cnt; i++) {
                let o = p.out_off + (m0 + i) * p.ldo + nr;
                // accumulate (the host sends it at m == 1 only): out + product.
                var prev = 0.0;
                if (p.accumulate != 0u) { prev = out[o]; }
                out[o] = prev + (v[i] + b);
            }
        }
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
    for (var m0 = 0u; m0 < p.m; m0 += MX) {
        let nx = min(p.m - m0, MX);
        let last = vec4<u32>(p.m - 1u);
        let r4 = vec4<u32>(m0) + vec4<u32>(0u, 1u, 2u, 3u);
        let xo = array<vec4<u32>, 4>(min(r4, last) * k, min(r4 + 4u, last) * k, min(r4 + 8u, last) * k, min(r4 + 12u, last) * k);
        let z = vec4<f32>(0.0);
        var acc = Acc(z, z, z, z, z, z, z, z);
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
                dots(&acc, xo, nx, e, wa4, wb4);
            }
        } else {
            for (var s = 0u; s < full; s += 128u) {
                let e = vec4<u32>(0u, 32u, 64u, 96u) + (s + lane);
                let wa4 = vec4<f32>(load_w(wa + e.x), load_w(wa + e.y), load_w(wa + e.z), load_w(wa + e.w));
                let wb4 = vec4<f32>(load_w(wb + e.x), load_w(wb + e.y), load_w(wb + e.z), load_w(wb + e.w));
                dots(&acc, xo, nx, e, wa4, wb4);
            }
        }
        for (var j = full + lane; j < k; j += 32u) { // the last k % 128 elements, one at a time
            dots(&acc, xo, nx, vec4<u32>(j), vec4<f32>(load_w(wa + j), 0.0, 0.0, 0.0), vec4<f32>(load_w(wb + j), 0.0, 0.0, 0.0));
        }
        reduce(t, lane, acc.a, acc.b);
        if (lane == 0u) { write(t, row, m0, min(nx, 4u)); }
        if (nx > 4u) {
            reduce(t, lane, acc.c, acc.d);
            if (lane == 0u) { write(t, row, m0 + 4u, min(nx - 4u, 4u)); }
        }
        if (nx > 8u) {
            reduce(t, lane, acc.e, acc.f);
            if (lane == 0u) { write(t, row, m0 + 8u, min(nx - 8u, 4u)); }
        }
        if (nx > 12u) {
            reduce(t, lane, acc.g, acc.h);
            if (lane == 0u) { write(t, row, m0 + 12u, nx - 12u); }
        }
    }
}
