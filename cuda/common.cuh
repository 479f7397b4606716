// Helpers shared by every kernel module (prepended after params.cuh): 16-bit float conversions
// without cuda_fp16.h/cuda_bf16.h (NVRTC then needs no CUDA include directory), typed loads of
// weights and KV (f32, f16 or bf16 storage; math is always f32), block reductions and the
// streaming-ring index. Storage types are plain structs so one template serves all three.

typedef unsigned short u16;
typedef unsigned long long u64;
#define STREAMING_BIT 0x80000000u
// Block-sparse prefill (src/backend/mod.rs BlockPages): query rows per block, the dense marker
// of a block's count, and the first page of a block's tail for its first position.
#define PREFILL_BLOCK_ROWS 128u
#define BLOCK_DENSE 0xffffffffu
__device__ __forceinline__ u32 block_tail_page(u32 first, u32 ps) { return first >= ps ? (first - ps) / ps : 0u; }
#define NONE_U32 0xffffffffu
#define LS_INF __int_as_float(0x7f800000)

struct bf16_t { u16 bits; };
struct f16_t { u16 bits; };

__device__ __forceinline__ float bf16_to_f32(u16 b) { return __uint_as_float(((u32)b) << 16); }
__device__ __forceinline__ u16 f32_to_bf16(float f) {
    u32 x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (u16)((x >> 16) | 0x40u); // quiet NaN
    x += 0x7fffu + ((x >> 16) & 1u); // round to nearest even
    return (u16)(x >> 16);
}
__device__ __forceinline__ float f16_to_f32(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ u16 f32_to_f16(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(bf16_t x) { return bf16_to_f32(x.bits); }
__device__ __forceinline__ float to_f32(f16_t x) { return f16_to_f32(x.bits); }
template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16_t from_f32<bf16_t>(float x) { bf16_t r; r.bits = f32_to_bf16(x); return r; }
template <> __device__ __forceinline__ f16_t from_f32<f16_t>(float x) { f16_t r; r.bits = f32_to_f16(x); return r; }

// Eight consecutive elements from a 16-byte aligned address of 16-bit storage, as f32.
__device__ __forceinline__ void load8(const bf16_t* p, float* out) {
    uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
    u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        out[2 * i] = __uint_as_float(w[i] << 16);
        out[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}
__device__ __forceinline__ void load8(const f16_t* p, float* out) {
    uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
    u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        out[2 * i] = f16_to_f32((u16)(w[i] & 0xffffu));
        out[2 * i + 1] = f16_to_f32((u16)(w[i] >> 16));
    }
}
// f32 storage: two 16-byte loads.
__device__ __forceinline__ void load8(const float* p, float* out) {
    float4 a = __ldg(reinterpret_cast<const float4*>(p));
    float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
    out[0] = a.x; out[1] = a.y; out[2] = a.z; out[3] = a.w;
    out[4] = b.x; out[5] = b.y; out[6] = b.z; out[7] = b.w;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ __forceinline__ float block_sum(float x, float* red) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    x = warp_sum(x);
    __syncthreads();
    if (lane == 0) red[w] = x;
    __syncthreads();
    x = lane < nw ? red[lane] : 0.0f;
    return warp_sum(x);
}
__device__ __forceinline__ float block_max(float x, float* red) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    x = warp_max(x);
    __syncthreads();
    if (lane == 0) red[w] = x;
    __syncthreads();
    x = lane < nw ? red[lane] : -LS_INF;
    return warp_max(x);
}

__device__ __forceinline__ u32 ring_index(u32 pos, u32 sink, u32 ring_tokens) {
    return pos < sink ? pos : sink + (pos - sink) % (ring_tokens - sink);
}
__device__ __forceinline__ u32 window_lo(u32 pos, u32 window) {
    return (window == 0u || pos + 1u <= window) ? 0u : pos + 1u - window;
}

// ---- 8-bit KV (int8 / fp8 e4m3) -------------------------------------------------------------
// The bytes are defined by the CPU reference (src/kv/quant.rs); these helpers reproduce them
// exactly with integer operations and one correctly rounded multiply (__fmul_rn, never
// contracted), identically on sm_80 and sm_90 (no fp8 hardware conversion is used: sm_89+ has
// cvt.e4m3x2, but the software path is exact on every arch and the codes are read with integer
// ops anyway). A pool of 8-bit KV is a byte buffer of (page, head) blocks, each [page_size]
// [head_dim] codes followed by [page_size] f32 scales; kernels address rows by the element
// offset a float pool would use (row * head_dim) and map it with kv8_code_off / kv8_scale_off.

struct i8kv_t { unsigned char b; };
struct e4m3_t { unsigned char b; };
template <typename KT> struct is_kv8 { static const bool value = false; };
template <> struct is_kv8<i8kv_t> { static const bool value = true; };
template <> struct is_kv8<e4m3_t> { static const bool value = true; };

#define KV8_TINY_BITS (27u << 23)
#define KV8_INV127_BITS 0x3c010204u
#define KV8_NAN_SCALE_BITS 0x7fc00000u

// Byte offset of the codes / the scale of row o of (page, head) block blk (= page * heads + head).
__device__ __forceinline__ u64 kv8_row_code_off(u64 blk, u32 o, u32 ps, u32 hd) {
    return blk * ps * (hd + 4) + (u64)o * hd;
}
__device__ __forceinline__ u64 kv8_row_scale_off(u64 blk, u32 o, u32 ps, u32 hd) {
    return blk * ps * (hd + 4) + (u64)ps * hd + 4u * o;
}
// The same for the row at float-pool element offset `el` (= row * hd); a 32-bit offset (the
// decode kernels') divides in 32 bits, a 64-bit one in 64 (a software routine each).
__device__ __forceinline__ u64 kv8_code_off(u64 el, u32 ps, u32 hd) {
    u64 row = el / hd;
    return (row / ps) * (u64)ps * (hd + 4) + (row % ps) * hd;
}
__device__ __forceinline__ u64 kv8_scale_off(u64 el, u32 ps, u32 hd) {
    u64 row = el / hd;
    return (row / ps) * (u64)ps * (hd + 4) + (u64)ps * hd + 4 * (row % ps);
}
__device__ __forceinline__ u64 kv8_code_off(u32 el, u32 ps, u32 hd) {
    u32 row = el / hd;
    return kv8_row_code_off(row / ps, row % ps, ps, hd);
}
__device__ __forceinline__ u64 kv8_scale_off(u32 el, u32 ps, u32 hd) {
    u32 row = el / hd;
    return kv8_row_scale_off(row / ps, row % ps, ps, hd);
}

// Value of a code (times the row's scale gives the stored value), without int-to-float
// conversions (those issue at a quarter of the FMA rate): 2^23 + i for a small integer i has i as
// its low mantissa bits and subtracting 2^23 is exact, so the results equal (float)code bit for
// bit. int8: i = code + 128 (the sign bit flipped); e4m3 subnormals: m 2^-9.
__device__ __forceinline__ float kv8_value_i8(u32 b) {
    return __fsub_rn(__uint_as_float(0x4b000000u | ((b & 0xffu) ^ 0x80u)), 8388736.0f);
}
__device__ __forceinline__ float kv8_value_e4m3(u32 b) {
    u32 e = (b >> 3) & 15u, m = b & 7u;
    float sub = __fmul_rn(__fsub_rn(__uint_as_float(0x4b000000u | m), 8388608.0f), 0.001953125f);
    float v = e == 0u ? sub : __uint_as_float(((e + 120u) << 23) | (m << 20));
    return (b & 0x80u) ? -v : v;
}
__device__ __forceinline__ float kv8_value(i8kv_t c) { return kv8_value_i8(c.b); }
__device__ __forceinline__ float kv8_value(e4m3_t c) { return kv8_value_e4m3(c.b); }

// round-half-even(127 |x| / amax) for bits 0 <= xb <= ab (ab normal, finite), exactly.
__device__ __forceinline__ u32 kv8_int8_level(u32 xb, u32 ab) {
    int ex = (int)(xb >> 23), ea = (int)(ab >> 23);
    u32 mx = xb & 0x7fffffu, ma = (ab & 0x7fffffu) | 0x800000u;
    if (ex == 0) ex = 1; else mx |= 0x800000u;
    int shift = ea - ex;
    if (mx == 0u || shift > 8) return 0u;
    u32 n = 127u * mx, d = ma << shift;
    u32 q = n / d, r = n % d;
    return (r > d - r || (r == d - r && (q & 1u))) ? q + 1u : q;
}
// Exponent field of the fp8 scale 2^k: the smallest k with amax / 2^k <= 448.
__device__ __forceinline__ u32 kv8_fp8_scale_field(u32 ab) {
    u32 e = ab >> 23;
    return (ab & 0x7fffffu) <= 0x600000u ? e - 8u : e - 7u;
}
// e4m3 code (no sign) of |x| / 2^(kf - 127), round-to-nearest-even, saturating at 448 (0x7e).
__device__ __forceinline__ u32 kv8_e4m3_level(u32 xb, u32 kf) {
    int ex = (int)(xb >> 23);
    if (ex == 0) return 0u;
    u32 mx = (xb & 0x7fffffu) | 0x800000u;
    int e = ex - (int)kf;
    int sh = 23 + (max(e, -6) - 3) - e;
    if (sh > 25) return 0u;
    u32 n = mx >> sh, rem = mx & ((1u << sh) - 1u), half = 1u << (sh - 1);
    if (rem > half || (rem == half && (n & 1u))) n++;
    u32 code = ((u32)max(e + 7, 1) << 3) + n - 8u;
    return min(code, 0x7eu);
}
// Scale bits of a row whose max |x| has bits ab (0 for tiny rows, NaN for non-finite ones).
__device__ __forceinline__ u32 kv8_scale_bits(bool fp8, u32 ab) {
    if (ab < KV8_TINY_BITS) return 0u;
    if (ab >= 0x7f800000u) return KV8_NAN_SCALE_BITS;
    if (fp8) return kv8_fp8_scale_field(ab) << 23;
    return __float_as_uint(__fmul_rn(__uint_as_float(ab), __uint_as_float(KV8_INV127_BITS)));
}
// The code of x in a row with max bits ab.
__device__ __forceinline__ unsigned char kv8_code(bool fp8, float x, u32 ab) {
    if (ab < KV8_TINY_BITS || ab >= 0x7f800000u) return 0;
    u32 xb = __float_as_uint(x), ax = xb & 0x7fffffffu, neg = xb >> 31;
    if (fp8) return (unsigned char)(kv8_e4m3_level(ax, kv8_fp8_scale_field(ab)) | (neg << 7));
    int l = (int)kv8_int8_level(ax, ab);
    return (unsigned char)(neg ? -l : l);
}

// (Shared by the tensor-core attention kernels, which multiply codes as exact f16 values and apply
// the row scales in f32.)
// Four 8-bit codes (one word, lowest byte first) as two f16 pairs of their values (fp8: / 256).
__device__ __forceinline__ void codes_f16(u32 w, u32& lo, u32& hi, i8kv_t) {
    const u32 u = w ^ 0x80808080u, one024 = 0x64646464u, c1152 = 0x64806480u;
    const u32 a = __byte_perm(u, one024, 0x4140), b = __byte_perm(u, one024, 0x4342);
    asm("sub.f16x2 %0, %1, %2;" : "=r"(lo) : "r"(a), "r"(c1152));
    asm("sub.f16x2 %0, %1, %2;" : "=r"(hi) : "r"(b), "r"(c1152));
}
__device__ __forceinline__ void codes_f16(u32 w, u32& lo, u32& hi, e4m3_t) {
    const u32 a = __byte_perm(w, 0u, 0x4140), b = __byte_perm(w, 0u, 0x4342);
    lo = ((a << 8) & 0x80008000u) | ((a << 7) & 0x3f803f80u);
    hi = ((b << 8) & 0x80008000u) | ((b << 7) & 0x3f803f80u);
}
template <typename KT> __device__ __forceinline__ float code_scale() { return 1.0f; }
template <> __device__ __forceinline__ float code_scale<e4m3_t>() { return 256.0f; }

// Element d of the row at element offset `el` of a pool of KT, as f32 (dequantized for 8-bit).
template <typename KT>
__device__ __forceinline__ float kv_elem(const KT* pool, u64 el, u32 d, u32 ps, u32 hd) {
    return to_f32(pool[el + d]);
}
template <>
__device__ __forceinline__ float kv_elem<i8kv_t>(const i8kv_t* pool, u64 el, u32 d, u32 ps, u32 hd) {
    const unsigned char* b = reinterpret_cast<const unsigned char*>(pool);
    float s = *reinterpret_cast<const float*>(b + kv8_scale_off(el, ps, hd));
    return __fmul_rn(kv8_value_i8(b[kv8_code_off(el, ps, hd) + d]), s);
}
template <>
__device__ __forceinline__ float kv_elem<e4m3_t>(const e4m3_t* pool, u64 el, u32 d, u32 ps, u32 hd) {
    const unsigned char* b = reinterpret_cast<const unsigned char*>(pool);
    float s = *reinterpret_cast<const float*>(b + kv8_scale_off(el, ps, hd));
    return __fmul_rn(kv8_value_e4m3(b[kv8_code_off(el, ps, hd) + d]), s);
}

// The shared-state-space address of a generic pointer into shared memory (cp.async, ldmatrix,
// wgmma descriptors take it).
__device__ __forceinline__ u32 smem_addr(const void* p) {
    u32 s;
    asm volatile("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(s) : "l"(p));
    return s;
}
// Asynchronous global -> shared copies (sm_80+): 16 bytes (L2 only) or 4 (an 8-bit row's scale),
// in commit groups waited on with cp_async_wait<N> (N groups may stay in flight).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(smem)), "l"(gmem) : "memory");
}
// 16 bytes to a shared-space address; when !ok the 16 bytes are zero-filled and gmem not read.
__device__ __forceinline__ void cp_async16z(u32 saddr, const void* gmem, bool ok) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(saddr), "l"(gmem), "r"(ok ? 16u : 0u) : "memory");
}
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem_addr(smem)), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// Shared-memory mbarriers (CTA scope, sm_90): init with an arrival count, arrive, wait for the
// phase of a parity to complete; the phase may also wait for `bytes` more bytes of async copies
// (expected before the copies that complete them are issued, and before this thread's own
// arrival on it).
__device__ __forceinline__ void mb_init(u32 a, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(a), "r"(count) : "memory");
}
__device__ __forceinline__ void mb_arrive(u32 a) {
    asm volatile("{ .reg .b64 st; mbarrier.arrive.shared::cta.b64 st, [%0]; }" ::"r"(a) : "memory");
}
__device__ __forceinline__ void mb_wait(u32 a, u32 parity) {
    u32 done = 0;
    while (!done)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(a), "r"(parity) : "memory");
}
__device__ __forceinline__ void mb_expect_tx(u32 a, u32 bytes) {
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(a), "r"(bytes) : "memory");
}
// This thread's arrival and `bytes` more expected, in one operation.
__device__ __forceinline__ void mb_arrive_expect_tx(u32 a, u32 bytes) {
    asm volatile("{ .reg .b64 st; mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1; }" ::"r"(a), "r"(bytes) : "memory");
}
// Barrier initialisations visible to the async proxy (the bulk copies' complete_tx) as well.
__device__ __forceinline__ void fence_mb_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
// `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to shared memory as one
// bulk copy (the TMA unit, no tensor map), completing on the mbarrier at `bar`.
__device__ __forceinline__ void bulk_g2s(u32 dst, const void* src, u32 bytes, u32 bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}
#endif

// Four consecutive f32 values stored as O (f32, or f16/bf16 rounded as from_f32) at a 4-element
// aligned address: one 16- or 8-byte store.
template <typename O> __device__ __forceinline__ void store4(O* o, float4 v) {
    const u32 lo = (u32)from_f32<O>(v.x).bits | ((u32)from_f32<O>(v.y).bits << 16);
    const u32 hi = (u32)from_f32<O>(v.z).bits | ((u32)from_f32<O>(v.w).bits << 16);
    *reinterpret_cast<uint2*>(o) = make_uint2(lo, hi);
}
template <> __device__ __forceinline__ void store4<float>(float* o, float4 v) { *reinterpret_cast<float4*>(o) = v; }
// An attention output (prefill_attention's out): f32 (o16 = 0), or f16 (1) / bf16 (2) rounded
// to nearest even, the o projection's x as it is. Two elements at an even index, or one.
__device__ __forceinline__ u32 attn_bits16(float x, u32 o16) { return o16 == 1u ? f32_to_f16(x) : f32_to_bf16(x); }
__device__ __forceinline__ void attn_store2(void* out, u64 i, float a, float b, u32 o16) {
    if (o16 == 0u) {
        *reinterpret_cast<float2*>(reinterpret_cast<float*>(out) + i) = make_float2(a, b);
        return;
    }
    *reinterpret_cast<u32*>(reinterpret_cast<u16*>(out) + i) = attn_bits16(a, o16) | (attn_bits16(b, o16) << 16);
}
__device__ __forceinline__ void attn_store1(void* out, u64 i, float a, u32 o16) {
    if (o16 == 0u) reinterpret_cast<float*>(out)[i] = a;
    else reinterpret_cast<u16*>(out)[i] = (u16)attn_bits16(a, o16);
}
// Four consecutive elements (f32, or f16/bf16 widened) at a 4-element aligned address.
__device__ __forceinline__ float4 load4(const float* a) { return *reinterpret_cast<const float4*>(a); }
template <typename T> __device__ __forceinline__ float4 load4(const T* a) {
    const uint2 w = *reinterpret_cast<const uint2*>(a);
    T e[4] = {{(u16)(w.x & 0xffffu)}, {(u16)(w.x >> 16)}, {(u16)(w.y & 0xffffu)}, {(u16)(w.y >> 16)}};
    return make_float4(to_f32(e[0]), to_f32(e[1]), to_f32(e[2]), to_f32(e[3]));
}

// The sum of squares of a float4 (rmsnorm4 / add_rmsnorm4).
__device__ __forceinline__ float sq4(float4 t) { return t.x * t.x + t.y * t.y + t.z * t.z + t.w * t.w; }
// The first half of rmsnorm4 / add_rmsnorm4 (one block a row, n4 float4): this thread's part of
// the row's sum of squares, float4 c = tid + i * blockDim taken from load(c) (add_rmsnorm's also
// stores the new residual), the first N of them kept in v (zero past the row) for rn4_out.
template <int N, typename L>
__device__ __forceinline__ float rn4_in(u32 n4, L load, float4 (&v)[N]) {
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < N; i++) {
        const u32 c = threadIdx.x + i * blockDim.x;
        v[i] = c < n4 ? load(c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        ss += sq4(v[i]);
    }
    for (u32 c = threadIdx.x + N * blockDim.x; c < n4; c += blockDim.x) ss += sq4(load(c));
    return ss;
}
// The norm weights of the float4 rn4_in kept (zero past the row), loaded before the block's
// reduction so their latency overlaps it.
template <int N>
__device__ __forceinline__ void rn4_weights(u32 n4, const float4* w4, float4 (&wv)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) {
        const u32 c = threadIdx.x + i * blockDim.x;
        wv[i] = c < n4 ? w4[c] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}
// The second half of rmsnorm4 / add_rmsnorm4 (one block a row of dim floats, dim % 4 == 0): this
// thread's part `ss` of the row's sum of squares reduced over the block, then out = row / rms *
// w, from the N float4 this thread holds (column i of v is float4 tid + i * blockDim) and `src`
// (the row as stored) for the rest.
template <int N, typename O>
__device__ __forceinline__ void rn4_out(u32 dim, float eps, float* red, float ss, const float4 (&v)[N],
                                        const float4* src, const float* w, O* out) {
    const u32 n4 = dim / 4;
    const float4* w4 = reinterpret_cast<const float4*>(w);
    float4 wv[N];
    rn4_weights(n4, w4, wv);
    ss = block_sum(ss, red);
    const float inv = rsqrtf(ss / (float)dim + eps);
    auto put = [&](u32 c, float4 t, float4 g) {
        store4(out + 4 * c, make_float4(t.x * inv * g.x, t.y * inv * g.y, t.z * inv * g.z, t.w * inv * g.w));
    };
#pragma unroll
    for (int i = 0; i < N; i++) {
        const u32 c = threadIdx.x + i * blockDim.x;
        if (c < n4) put(c, v[i], wv[i]);
    }
    for (u32 c = threadIdx.x + N * blockDim.x; c < n4; c += blockDim.x) put(c, src[c], w4[c]);
}

// ---- x as two int8 digits per element (DType::X8; the batch-1 integer-dot matmul's x) ----------

// A block's scale from its max|x|: d = max|x| / 127, id = 127 / max|x| (0 for an all-zero block).
__device__ __forceinline__ void x8_scale(float amax, float& d, float& id) {
    d = amax / 127.0f;
    id = amax > 0.0f ? 127.0f / amax : 0.0f;
}
// Element v's two digits in a block of scale d (d and id from x8_scale), each as its low 8 bits:
// hi = round(v id), lo = round((v - d hi) id 254) clamped to |lo| <= 127.
__device__ __forceinline__ void x8_digits(float v, float d, float id, u32& h, u32& l) {
    const float fh = rintf(v * id);
    h = (u32)(int)fh & 0xffu;
    l = (u32)(int)fminf(fmaxf(rintf((v - fh * d) * id * 254.0f), -127.0f), 127.0f) & 0xffu;
}
// x as two int8 digits per element, blocks of 32 (weight_quant::x8_blocks on the CPU): d = max|x| /
// 127, hi = round(x / d), lo = round((x - d hi) / (d / 254)) clamped to |lo| <= 127, so x = d (hi +
// lo / 254) within max|x| / 64516 (about 16 bits). Elements v[0..4] of one block, 8 lanes (an
// aligned group of 8 lanes of the warp, every lane of the warp calling) per block: the packed
// digits of the four elements (element i in byte i), the block's d and the f32 sum of its x.
__device__ __forceinline__ void x8_quantize4(const float* v, u32& hi, u32& lo, float& d, float& sum) {
    float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
    sum = (v[0] + v[1]) + (v[2] + v[3]);
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) {
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
    }
    float id;
    x8_scale(amax, d, id);
    hi = 0;
    lo = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        u32 h, l;
        x8_digits(v[i], d, id, h, l);
        hi |= h << (8 * i);
        lo |= l << (8 * i);
    }
}

// Position of x word w (elements 4w .. 4w + 3, packed one a byte) in a digit plane: 9 words per
// block of 32 elements, the ninth a pad (matmul_quant.cu's shared layout spreads banks with it).
__device__ __forceinline__ u32 xq_pos(u32 w) { return 9 * (w >> 3) + (w & 7); }
// Word e4 of an x of nxb blocks into the digit planes (hi at planes, lo at planes + lo_off) and
// xds (the block's (d, sum)), v = its four elements (0 past k): x8_quantize4, so every lane of the
// warp calls; stores only for e4 < 8 nxb. PAD: the block's first lane also zeroes its pad words
// (a DType::X8 buffer, which the _m1_pre kernels copy whole).
template <bool PAD>
__device__ __forceinline__ void x8_put(int* planes, u32 lo_off, float2* xds, u32 nxb, u32 e4, const float* v) {
    u32 hi, lo;
    float d, sum;
    x8_quantize4(v, hi, lo, d, sum);
    if (e4 < 8 * nxb) {
        planes[xq_pos(e4)] = (int)hi;
        planes[xq_pos(e4) + lo_off] = (int)lo;
        if ((e4 & 7u) == 0u) {
            xds[e4 >> 3] = make_float2(d, sum);
            if (PAD) planes[xq_pos(e4) + 8] = planes[xq_pos(e4) + 8 + lo_off] = 0;
        }
    }
}
// A DType::X8 row of k elements (host: x8_bytes): x8_put into its planes, lo at 9 nxb, xds at 18 nxb words.
struct x8_t {
    int w;
};
template <typename T> struct is_x8 { static const bool value = false; };
template <> struct is_x8<x8_t> { static const bool value = true; };
__device__ __forceinline__ void x8_row_put(x8_t* row, u32 k, u32 e4, const float* v) {
    const u32 nxb = (k + 31) / 32;
    int* planes = reinterpret_cast<int*>(row);
    x8_put<true>(planes, 9 * nxb, reinterpret_cast<float2*>(planes + 18 * nxb), nxb, e4, v);
}

// Elements e0 .. e0 + 32 of a DType::X8 row of k elements (e0 a multiple of 32: one x block) held
// one a lane, v = element e0 + lane (0 past k), every lane of the warp calling: the digits and
// (d, sum) of x8_quantize4 bit for bit (the same amax, the block sum in its order: each 4-lane
// group's (v0 + v1) + (v2 + v3), then the tree over the groups), four lanes' bytes a word.
__device__ __forceinline__ void x8_row_put32(x8_t* row, u32 k, u32 e0, float v) {
    const u32 nxb = (k + 31) / 32, lane = threadIdx.x & 31, b = e0 / 32;
    float amax = fabsf(v), sum = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
    }
    float d, id;
    x8_scale(amax, d, id);
    u32 hw, lw;
    x8_digits(v, d, id, hw, lw);
    hw <<= 8 * (lane & 3);
    lw <<= 8 * (lane & 3);
#pragma unroll
    for (int o = 1; o < 4; o <<= 1) {
        hw |= __shfl_xor_sync(0xffffffffu, hw, o);
        lw |= __shfl_xor_sync(0xffffffffu, lw, o);
    }
    int* planes = reinterpret_cast<int*>(row);
    if ((lane & 3) == 0 && b < nxb) {
        planes[9 * b + lane / 4] = (int)hw;
        planes[9 * nxb + 9 * b + lane / 4] = (int)lw;
    }
    if (lane == 0 && b < nxb) {
        planes[9 * b + 8] = planes[9 * nxb + 9 * b + 8] = 0;
        reinterpret_cast<float2*>(planes + 18 * nxb)[b] = make_float2(d, sum);
    }
}

// rn4_out for a DType::X8 out (one row): the same f32 values (t * inv * g, as rn4_out stores
// them) as their digits (x8_row_put). A warp takes part in a loop step while its first word is
// below the row's 8 nxb words (whole warps: x8_quantize4's shuffles); words past dim / 4 are 0.
template <int N>
__device__ __forceinline__ void rn4_out(u32 dim, float eps, float* red, float ss, const float4 (&v)[N],
                                        const float4* src, const float* w, x8_t* out) {
    const u32 n4 = dim / 4, words = 8 * ((dim + 31) / 32), lane = threadIdx.x & 31;
    const float4* w4 = reinterpret_cast<const float4*>(w);
    float4 wv[N];
    rn4_weights(n4, w4, wv);
    ss = block_sum(ss, red);
    const float inv = rsqrtf(ss / (float)dim + eps);
    auto put = [&](u32 c, float4 t, float4 g) {
        float y[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (c < n4) {
            y[0] = t.x * inv * g.x;
            y[1] = t.y * inv * g.y;
            y[2] = t.z * inv * g.z;
            y[3] = t.w * inv * g.w;
        }
        x8_row_put(out, dim, c, y);
    };
#pragma unroll
    for (int i = 0; i < N; i++) {
        const u32 c = threadIdx.x + i * blockDim.x;
        if (c - lane < words) put(c, v[i], wv[i]);
    }
    for (u32 c = threadIdx.x + N * blockDim.x; c - lane < words; c += blockDim.x) {
        const float4 z = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        put(c, c < n4 ? src[c] : z, c < n4 ? w4[c] : z);
    }
}

// ---- tensor-core fragments (mma.sync m16n8k16, f32 accumulation; sm_80+) --------------------------

// Two f32 as one register of two 16-bit values (lo in the low half, as mma fragments expect).
template <typename KT> __device__ __forceinline__ u32 mma_pack(float lo, float hi);
template <> __device__ __forceinline__ u32 mma_pack<bf16_t>(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
template <> __device__ __forceinline__ u32 mma_pack<f16_t>(float lo, float hi) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// c (16x8 f32) += a (16x16 row-major) * b (16x8 col-major).
template <typename KT> __device__ __forceinline__ void mma_16816(float* c, const u32* a, u32 b0, u32 b1);
template <> __device__ __forceinline__ void mma_16816<bf16_t>(float* c, const u32* a, u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <> __device__ __forceinline__ void mma_16816<f16_t>(float* c, const u32* a, u32 b0, u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Every GEMV's store (matmul.cu, matmul_quant.cu) of output i, column c: v plus the bias, or out
// + that where the params say accumulate (each output element is stored by one thread, once).
__device__ __forceinline__ void mm_put(const MatmulParams& p, float* out, const float* bias, u64 i, u32 c, float v) {
    float* o = out + p.out_off + i;
    v += p.has_bias ? bias[c] : 0.0f;
    *o = p.accumulate ? *o + v : v;
}
