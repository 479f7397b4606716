// rope_append_kv, the store pass for 16-bit and 8-bit KV pools (WGSL has no 16- or 8-bit storage
// types without extensions, so these pools are u32 words). The backend first runs
// rope_append_kv.wgsl unchanged with an identity layout that writes each token's rotated k and
// its v as f32 rows to staged_k / staged_v ([n_tokens][n_kv_heads][head_dim]); one workgroup per
// (token, KV head) then stores both rows into the head's pool per head_map (retrieval pool at
// slots[t], streaming pool at ring_slots[t]), and rope_append_kv_summary.wgsl runs after it.
// - f16 / bf16 (KV_KIND 1 / 2): two values per word, round-to-nearest-even by bit operations
//   (shaders/kv_round16.wgsl). The backend takes this path for 16-bit pools only where
//   head_dim % 4 != 0; otherwise rope_append_kv16.wgsl does all in one pass.
// - int8 / fp8 (KV_KIND 3 / 4): the row's max |x| as u32 bits (atomicMax: exact, order-free),
//   then four codes per word and the f32 scale word, exactly as src/kv/quant.rs defines them
//   (integer arithmetic and one multiply); a (page, head) block is [page_size][head_dim] code
//   bytes followed by [page_size] f32 scales (bytes little-endian within a word).
// KV_KIND comes from the KV snippet (src/backend/wgpu/shaders.rs). Slots and head_map entries
// outside the pools are skipped, as in rope_append_kv.wgsl.
@group(0) @binding(0) var<uniform> p: RopeAppendKvParams;
@group(0) @binding(1) var<storage, read> staged_k: array<f32>;
@group(0) @binding(2) var<storage, read> staged_v: array<f32>;
@group(0) @binding(3) var<storage, read> slots: array<u32>;
@group(0) @binding(4) var<storage, read> ring_slots: array<u32>;
@group(0) @binding(5) var<storage, read> head_map: array<u32>;
@group(0) @binding(6) var<storage, read_write> k: array<u32>;
@group(0) @binding(7) var<storage, read_write> v: array<u32>;
@group(0) @binding(8) var<storage, read_write> sk: array<u32>;
@group(0) @binding(9) var<storage, read_write> sv: array<u32>;

var<workgroup> kmax: atomic<u32>;
var<workgroup> vmax: atomic<u32>;

// round-half-even(127 |x| / amax) for bits 0 <= xb <= ab (ab normal, finite), exactly.
fn int8_level(xb: u32, ab: u32) -> u32 {
    var ex = i32(xb >> 23u);
    let ea = i32(ab >> 23u);
    var mx = xb & 0x7fffffu;
    let ma = (ab & 0x7fffffu) | 0x800000u;
    if (ex == 0) { ex = 1; } else { mx = mx | 0x800000u; }
    let shift = ea - ex;
    if (mx == 0u || shift > 8) { return 0u; }
    let n = 127u * mx;
    let d = ma << u32(shift);
    let q = n / d;
    let r = n % d;
    if (r > d - r || (r == d - r && (q & 1u) == 1u)) { return q + 1u; }
    return q;
}

// Exponent field of the fp8 scale 2^k: the smallest k with amax / 2^k <= 448.
fn fp8_scale_field(ab: u32) -> u32 {
    let e = ab >> 23u;
    return select(e - 7u, e - 8u, (ab & 0x7fffffu) <= 0x600000u);
}

// e4m3 code (no sign) of |x| / 2^(kf - 127), round-to-nearest-even, saturating at 448 (0x7e).
fn e4m3_level(xb: u32, kf: u32) -> u32 {
    let ex = i32(xb >> 23u);
    if (ex == 0) { return 0u; }
    let mx = (xb & 0x7fffffu) | 0x800000u;
    let e = ex - i32(kf);
    let sh = 23 + (max(e, -6) - 3) - e;
    if (sh > 25) { return 0u; }
    let s = u32(sh);
    var n = mx >> s;
    let rem = mx & ((1u << s) - 1u);
    let hlf = 1u << (s - 1u);
    if (rem > hlf || (rem == hlf && (n & 1u) == 1u)) { n = n + 1u; }
    let code = (u32(max(e + 7, 1)) << 3u) + n - 8u;
    return min(code, 0x7eu);
}

const TINY_BITS: u32 = 0x0d800000u; // 2^-100
const INF_BITS: u32 = 0x7f800000u;

fn scale_bits(ab: u32) -> u32 {
    if (ab < TINY_BITS) { return 0u; }
    if (ab >= INF_BITS) { return 0x7fc00000u; }
    if (KV_KIND == 4u) { return fp8_scale_field(ab) << 23u; }
    return bitcast<u32>(bitcast<f32>(ab) * bitcast<f32>(0x3c010204u));
}

fn kv8_code(x: f32, ab: u32) -> u32 {
    if (ab < TINY_BITS || ab >= INF_BITS) { return 0u; }
    let xb = bitcast<u32>(x);
    let ax = xb & 0x7fffffffu;
    let neg = xb >> 31u;
    if (KV_KIND == 4u) { return e4m3_level(ax, fp8_scale_field(ab)) | (neg << 7u); }
    let l = int8_level(ax, ab);
    return select(l, (0u - l) & 0xffu, neg == 1u);
}

fn put(streaming: bool, w: u32, kw: u32, vw: u32) {
    if (streaming) {
        sk[w] = kw;
        sv[w] = vw;
    } else {
        k[w] = kw;
        v[w] = vw;
    }
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let idx = wg.x + wg.y * nwg.x;
    if (idx >= p.n_tokens * p.n_kv_heads) { return; }
    let t = idx / p.n_kv_heads;
    let kh = idx % p.n_kv_heads;
    let hd = p.head_dim;
    let ps = p.page_size;
    let m = head_map[kh];
    let streaming = (m & STREAMING_BIT) != 0u;
    let hi = m & ~STREAMING_BIT;
    let slot = select(slots[t], ring_slots[t], streaming);
    let heads = select(p.n_ret, p.n_str, streaming);
    let pages = select(p.num_pages, p.num_str_pages, streaming);
    if (hi >= heads || slot >= pages * ps) { return; }
    let src = idx * hd;
    let row = ((slot / ps) * heads + hi) * ps + slot % ps;
    if (KV_KIND <= 2u) {
        for (var w = lid.x; w < hd / 2u; w = w + 64u) {
            let kw = pack16(staged_k[src + 2u * w], staged_k[src + 2u * w + 1u]);
            let vw = pack16(staged_v[src + 2u * w], staged_v[src + 2u * w + 1u]);
            put(streaming, row * hd / 2u + w, kw, vw);
        }
        return;
    }
    if (lid.x == 0u) {
        atomicStore(&kmax, 0u);
        atomicStore(&vmax, 0u);
    }
    workgroupBarrier();
    var km = 0u;
    var vm = 0u;
    for (var i = lid.x; i < hd; i = i + 64u) {
        km = max(km, bitcast<u32>(staged_k[src + i]) & 0x7fffffffu);
        vm = max(vm, bitcast<u32>(staged_v[src + i]) & 0x7fffffffu);
    }
    atomicMax(&kmax, km);
    atomicMax(&vmax, vm);
    workgroupBarrier();
    let ka = atomicLoad(&kmax);
    let va = atomicLoad(&vmax);
    let base = (row / ps) * ps * (hd + 4u);
    let co = base + (row % ps) * hd;
    let so = base + ps * hd + 4u * (row % ps);
    for (var w = lid.x; w < hd / 4u; w = w + 64u) {
        var kw = 0u;
        var vw = 0u;
        for (var b = 0u; b < 4u; b = b + 1u) {
            kw = kw | (kv8_code(staged_k[src + 4u * w + b], ka) << (8u * b));
            vw = vw | (kv8_code(staged_v[src + 4u * w + b], va) << (8u * b));
        }
        put(streaming, co / 4u + w, kw, vw);
    }
    if (lid.x == 0u) {
        put(streaming, so / 4u, scale_bits(ka), scale_bits(va));
    }
}
