// sample: out[r] = a token drawn from row r of the logits x [rows][n] f32 with row r's settings
// (settings[4r..4r+4]: temperature f32 bits, top_k, top_p f32 bits, u f32 bits), the algorithm of
// crate::sampling::sample_row: temperature 0 (or not > 0) is argmax; else weights
// w = exp((l - max) / T), keep the top_k first in rank order (logit desc, id asc), then the
// shortest rank prefix whose mass reaches (top_p - 1e-6) * total, then draw by inverse CDF in
// ascending id order with r = u * kept mass. A row with no logit above -inf gets NONE.
//
// One workgroup of 256 per row (r = wg.x + wg.y * num_workgroups.x), nothing but the logits read:
// - logits become order-preserving u32 keys (NaN 0, -0 as +0), so "rank <= cut" is
//   key > tau || (key == tau && id <= cut);
// - top-k: tau = the largest key with count(key >= tau) >= k, by four 8-bit radix rounds
//   (workgroup histograms); the cut among the ties of tau is the (k - count(key > tau))-th in
//   id order;
// - top-p: the same search on the mass of the top-k set (32 block sums; sums of non-negative
//   weights in a fixed order are monotone in the set, so the search is exact for its own sums),
//   then j ties at tau with mass_gt + j * w(tau) >= goal;
// - the tie cuts and the draw scan ids in order: thread t owns ids [t * seg, (t + 1) * seg), a
//   workgroup prefix sum over the threads finds the owner, which walks its ids.
// f32 throughout (WGSL has no f64); float tests use bit patterns (NaN may not compare as IEEE).
// Control flow that reaches a barrier depends only on uniform values (workgroupUniformLoad).
@group(0) @binding(0) var<uniform> p: SampleParams;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> settings: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<u32>;

const WG: u32 = 256u;
const NONE: u32 = 0xffffffffu;
// KEY_NEG_INF (0x007fffff): common.wgsl.
const KEY_POS_INF: u32 = 0xff800000u;

var<workgroup> red_u: array<u32, 256>;
var<workgroup> red_i: array<u32, 256>;
var<workgroup> red_f: array<f32, 256>;
var<workgroup> bcast: u32;
var<workgroup> hist: array<atomic<u32>, 256>;  // radix_topk's histogram (WG == 256 bins)
var<workgroup> rad: vec2<u32>;

// Larger logit, larger key; NaN is 0 (below -inf), -0 and +0 share one key.
fn key_of(l: f32) -> u32 {
    let b = bitcast<u32>(l);
    let a = b & 0x7fffffffu;
    if (a > 0x7f800000u) { return 0u; }
    if (a == 0u) { return 0x80000000u; }
    if (b != a) { return ~b; }
    return b | 0x80000000u;
}

fn logit_of(k: u32) -> f32 {
    if ((k & 0x80000000u) != 0u) { return bitcast<f32>(k & 0x7fffffffu); }
    return bitcast<f32>(~k);
}

// The row's weight function: exp((l - mx) / temp); with a +inf maximum, 1 for the +inf tokens.
struct Row { base: u32, n: u32, kmax: u32, mx: f32, temp: f32 }

fn weight(w: Row, key: u32, l: f32) -> f32 {
    if (key == w.kmax) { return 1.0; }
    if (key <= KEY_NEG_INF || w.kmax == KEY_POS_INF) { return 0.0; }
    let z = (l - w.mx) / w.temp;
    if (!(z >= -87.0)) { return 0.0; }
    return exp(z);
}

fn sum_u(t: u32, v: u32) -> u32 {
    workgroupBarrier();
    red_u[t] = v;
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        workgroupBarrier();
        if (t < s) { red_u[t] = red_u[t] + red_u[t + s]; }
    }
    return workgroupUniformLoad(&red_u[0]);
}

fn max_u(t: u32, v: u32) -> u32 {
    workgroupBarrier();
    red_u[t] = v;
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        workgroupBarrier();
        if (t < s) { red_u[t] = max(red_u[t], red_u[t + s]); }
    }
    return workgroupUniformLoad(&red_u[0]);
}

fn sum_f(t: u32, v: f32) -> f32 {
    workgroupBarrier();
    red_f[t] = v;
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        workgroupBarrier();
        if (t < s) { red_f[t] = red_f[t] + red_f[t + s]; }
    }
    return workgroupUniformLoad(&red_f[0]);
}

// Exclusive prefix sum of v over the threads (Hillis-Steele).
fn exclusive_scan_u(t: u32, v: u32) -> u32 {
    workgroupBarrier();
    red_u[t] = v;
    for (var o = 1u; o < WG; o = o << 1u) {
        workgroupBarrier();
        var add = 0u;
        if (t >= o) { add = red_u[t - o]; }
        workgroupBarrier();
        red_u[t] = red_u[t] + add;
    }
    workgroupBarrier();
    return red_u[t] - v;
}

// Inclusive prefix sum of v over the threads, left in red_f.
fn inclusive_scan_f(t: u32, v: f32) {
    workgroupBarrier();
    red_f[t] = v;
    for (var o = 1u; o < WG; o = o << 1u) {
        workgroupBarrier();
        var add = 0.0;
        if (t >= o) { add = red_f[t - o]; }
        workgroupBarrier();
        red_f[t] = red_f[t] + add;
    }
    workgroupBarrier();
}

// The kk-th largest key (the largest c with count(key >= c) >= kk) and how many keys exceed it:
// four 8-bit radix rounds from the top, each a workgroup histogram of the next byte among the
// keys whose higher bytes match (integer atomics, so exact), then the highest byte whose suffix
// count reaches kk. Four passes over the row instead of a bitwise search's 32.
fn radix_topk(t: u32, w: Row, kk: u32) -> vec2<u32> {
    var prefix = 0u;
    var above = 0u;
    for (var round = 0u; round < 4u; round++) {
        let shift = 24u - 8u * round;
        atomicStore(&hist[t], 0u);
        workgroupBarrier();
        for (var i = t; i < w.n; i += WG) {
            let k = key_of(x[w.base + i]);
            if (round == 0u || (k >> (shift + 8u)) == (prefix >> (shift + 8u))) {
                atomicAdd(&hist[(k >> shift) & 255u], 1u);
            }
        }
        workgroupBarrier();
        if (t == 0u) {
            var acc = above;
            var b = 255u;
            loop {
                if (b == 0u) { break; }
                let h = atomicLoad(&hist[b]);
                if (acc + h >= kk) { break; }
                acc += h;
                b -= 1u;
            }
            rad = vec2<u32>(prefix | (b << shift), acc);
        }
        let v = workgroupUniformLoad(&rad);
        prefix = v.x;
        above = v.y;
    }
    return vec2<u32>(prefix, above);
}

// Weight of the tokens with key >= c among those kept by top-k (key > tk || key == tk && id <= ck).
fn mass_ge(t: u32, w: Row, c: u32, tk: u32, ck: u32) -> f32 {
    var m = 0.0;
    for (var i = t; i < w.n; i += WG) {
        let l = x[w.base + i];
        let k = key_of(l);
        if (k >= c && (k > tk || (k == tk && i <= ck))) { m += weight(w, k, l); }
    }
    return sum_f(t, m);
}

// Tokens with key == tau and id <= lim.
fn count_ties(t: u32, w: Row, tau: u32, lim: u32) -> u32 {
    var m = 0u;
    for (var i = t; i < w.n; i += WG) { m += select(0u, 1u, key_of(x[w.base + i]) == tau && i <= lim); }
    return sum_u(t, m);
}

// The id of the j-th (from 1, in id order) token with key == tau and id <= lim; NONE if fewer.
fn nth_tie(t: u32, w: Row, tau: u32, lim: u32, j: u32) -> u32 {
    let seg = (w.n + WG - 1u) / WG;
    let lo = min(t * seg, w.n);
    let hi = min(lo + seg, w.n);
    var c = 0u;
    for (var i = lo; i < hi; i++) { c += select(0u, 1u, key_of(x[w.base + i]) == tau && i <= lim); }
    if (t == 0u) { bcast = NONE; }
    let before = exclusive_scan_u(t, c);
    if (before < j && j <= before + c) {
        var left = j - before;
        for (var i = lo; i < hi; i++) {
            if (key_of(x[w.base + i]) == tau && i <= lim) {
                left -= 1u;
                if (left == 0u) {
                    bcast = i;
                    break;
                }
            }
        }
    }
    return workgroupUniformLoad(&bcast);
}

// Long (about 125 lines) on purpose: the entry point's phases (keys and row maximum, the top-k key
// search, the top-p key search, tie cuts, the draw) share its workgroup memory and per-invocation
// state, and the body reads in the order it runs.
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = wg.x + wg.y * nwg.x;
    if (r >= p.rows) { return; }
    let t = lid.x;
    let n = p.n;
    let base = r * n;

    // Argmax by key (lowest id on ties) and the count of numbers.
    var bk = 0u;
    var bi = NONE;
    var nv = 0u;
    for (var i = t; i < n; i += WG) {
        let k = key_of(x[base + i]);
        if (k > bk) { bk = k; bi = i; }
        nv += select(0u, 1u, k != 0u);
    }
    workgroupBarrier();
    red_u[t] = bk;
    red_i[t] = bi;
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        workgroupBarrier();
        if (t < s) {
            let ok = red_u[t + s];
            let oi = red_i[t + s];
            if (ok > red_u[t] || (ok == red_u[t] && oi < red_i[t])) {
                red_u[t] = ok;
                red_i[t] = oi;
            }
        }
    }
    let kmax = workgroupUniformLoad(&red_u[0]);
    let best = workgroupUniformLoad(&red_i[0]);
    nv = sum_u(t, nv);
    let tb = settings[4u * r];
    let kk = settings[4u * r + 1u];
    let pb = settings[4u * r + 2u];
    let u = bitcast<f32>(settings[4u * r + 3u]);
    if (kmax <= KEY_NEG_INF) {
        if (t == 0u) { out[r] = NONE; }
        return;
    }
    // Greedy unless T > 0 (sign clear, not zero, not NaN).
    if ((tb & 0x80000000u) != 0u || tb == 0u || tb > 0x7f800000u) {
        if (t == 0u) { out[r] = best; }
        return;
    }
    let w = Row(base, n, kmax, logit_of(kmax), bitcast<f32>(tb));

    // Top-k: keep key > tk || (key == tk && id <= ck); (0, 0) keeps every number.
    var tk = 0u;
    var ck = 0u;
    if (kk > 0u && kk < nv) {
        let rk = radix_topk(t, w, kk);
        tk = rk.x;
        ck = nth_tie(t, w, rk.x, NONE, kk - rk.y);
    }

    // Top-p within the top-k set: the final cut (tp, cp).
    var tp = tk;
    var cp = ck;
    let pp = bitcast<f32>(pb);
    if ((pb & 0x7fffffffu) <= 0x7f800000u && pp < 1.0) {
        let total = mass_ge(t, w, 1u, tk, ck);
        let goal = total * (pp - 1e-6);
        var tau = kmax;
        var j = 1u;
        if (goal > 0.0) {
            tau = 0u;
            for (var b = 31i; b >= 0i; b -= 1i) {
                let c = tau | (1u << u32(b));
                if (mass_ge(t, w, c, tk, ck) >= goal) { tau = c; }
            }
            let gt = mass_ge(t, w, tau + 1u, tk, ck);
            let lim = select(NONE, ck, tau == tk);
            let cnt = count_ties(t, w, tau, lim);
            let wt = weight(w, tau, logit_of(tau));
            let q = (goal - gt) / wt;
            j = cnt;
            if (wt > 0.0 && q < f32(cnt)) { j = select(1u, u32(ceil(q)), q > 1.0); }
        }
        cp = nth_tie(t, w, tau, select(NONE, ck, tau == tk), max(j, 1u));
        tp = tau;
    }

    // Inverse CDF in id order over key > tp || (key == tp && id <= cp).
    let seg = (n + WG - 1u) / WG;
    let lo = min(t * seg, n);
    let hi = min(lo + seg, n);
    var ms = 0.0;
    for (var i = lo; i < hi; i++) {
        let l = x[base + i];
        let k = key_of(l);
        if (k > tp || (k == tp && i <= cp)) { ms += weight(w, k, l); }
    }
    inclusive_scan_f(t, ms);
    let incl = red_f[t];
    var excl = 0.0;
    if (t > 0u) { excl = red_f[t - 1u]; }
    let kept_mass = workgroupUniformLoad(&red_f[WG - 1u]);
    let rr = u * kept_mass;
    var owner = sum_u(t, select(0u, 1u, incl <= rr));
    let last_seg = max_u(t, select(0u, t + 1u, ms > 0.0));
    if (owner >= WG) { owner = max(last_seg, 1u) - 1u; }
    if (t == owner) {
        var acc = excl;
        var pick = NONE;
        var last = NONE;
        for (var i = lo; i < hi; i++) {
            let l = x[base + i];
            let k = key_of(l);
            if (k > tp || (k == tp && i <= cp)) {
                let wi = weight(w, k, l);
                if (wi > 0.0) {
                    last = i;
                    acc += wi;
                    if (rr < acc) {
                        pick = i;
                        break;
                    }
                }
            }
        }
        if (pick == NONE) { pick = last; }
        if (pick == NONE) { pick = best; }
        out[r] = pick;
    }
}
