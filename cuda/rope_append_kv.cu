// rope_append_kv, pass 1 of 2 (pass 2: rope_append_kv_summary.cu, for calls of several tokens).
// qkv [n_tokens][(n_heads + 2 n_kv_heads) head_dim] f32, or f16 / bf16 (qkv16 = 1 / 2, QkvRow)
// -> q [n_tokens][n_heads][head_dim] rotated (rotate-half RoPE at positions[t], cos/sin times
// attention_scaling); per KV head, the rotated k and the v go to the retrieval pool at slots[t]
// or, for a streaming head (head_map & STREAMING_BIT), to the streaming pool at ring_slots[t].
// Pools [page][heads][page_size][head_dim] in KT (f32/f16/bf16). Grid (n_tokens, n_heads +
// n_kv_heads), 64 threads; thread i rotates the pairs (i, i + head_dim/2), i + blockDim.x, ...
// (four heads a block of 256 threads was measured 10% slower at 32K on an H100:
// docs/benchmarks.md session 28). Slots outside their pool are skipped (the host checks the slots
// it uploads; this guards the rest).
//
// Page summaries: rope_append_kv_summary.cu refreshes them after a call of several tokens (tokens
// of one logical page cannot order their writes within a launch). A call of one token (n_tokens
// == 1: a batch-1 decode step) folds its stored key values (rounded, or dequantized for 8-bit
// pools) into its logical page's min/max here instead, and the host skips the summary launch: the
// summary pass computes fminf(...fminf(k_first, k_first+1)..., k_off) over the page's rows in
// offset order, i.e. fminf(the page's summary so far, kept by every earlier call, this key), and a
// token at a logical page's first offset starts it (min = max = its value). The same values, bit
// for bit.

// A row of qkv as the call gave it: f32, or f16 / bf16 as the q|k|v GEMM wrote it (qkv16 = 1 / 2:
// Backend::matmul_out16_dtype), read widened to f32.
struct QkvRow {
    const void* p;
    u64 base;
    u32 d;
    __device__ __forceinline__ float operator[](u32 i) const {
        const u64 j = base + i;
        if (d == 0u) return reinterpret_cast<const float*>(p)[j];
        const u16 b = reinterpret_cast<const u16*>(p)[j];
        return d == 1u ? f16_to_f32(b) : bf16_to_f32(b);
    }
    __device__ __forceinline__ QkvRow operator+(u32 o) const { return QkvRow{p, base + o, d}; }
};
__device__ __forceinline__ void fold_summary(const RopeAppendKvParams& p, float* sum, u32 slot, u32 hi, u32 c, float x) {
    u32 ps = p.page_size, lp = p.logical_page, off = slot % ps, hd = p.head_dim;
    u64 at = ((((u64)(slot / ps) * p.n_ret + hi) * (ps / lp) + off / lp) * 2) * hd + c;
    float mn = x, mx = x;
    if (off % lp != 0u) {
        mn = fminf(sum[at], x);
        mx = fmaxf(sum[at + hd], x);
    }
    sum[at] = mn;
    sum[at + hd] = mx;
}

// Query head h of token t (h < n_heads): rotate into q.
__device__ void rope_q_head(const RopeAppendKvParams& p, QkvRow row, float pos, const float* inv_freq, u32 t,
                            u32 h, float* q) {
    u32 hd = p.head_dim, half = hd / 2;
    const QkvRow src = row + h * hd;
    float* dst = q + ((u64)t * p.n_heads + h) * hd;
    for (u32 i = threadIdx.x; i < half; i += blockDim.x) {
        float a = __fmul_rn(pos, inv_freq[i]);
        float c = cosf(a) * p.attention_scaling, s = sinf(a) * p.attention_scaling;
        float x0 = src[i], x1 = src[i + half];
        dst[i] = x0 * c - x1 * s;
        dst[i + half] = x1 * c + x0 * s;
    }
    if ((hd & 1u) && threadIdx.x == 0) dst[hd - 1] = src[hd - 1];
}

template <typename KT>
__device__ void rope_impl(RopeAppendKvParams p, const void* qkv, const u32* positions, const u32* slots,
                          const u32* ring_slots, const float* inv_freq, const u32* head_map, float* q,
                          KT* k, KT* v, KT* sk, KT* sv, float* sum, u32 qkv16) {
    u32 t = blockIdx.x, h = blockIdx.y, hd = p.head_dim, half = hd / 2;
    u32 width = (p.n_heads + 2 * p.n_kv_heads) * hd;
    const QkvRow row{qkv, (u64)t * width, qkv16};
    float pos = (float)positions[t];
    if (h < p.n_heads) {
        rope_q_head(p, row, pos, inv_freq, t, h, q);
        return;
    }
    u32 kvh = h - p.n_heads;
    u32 hm = head_map[kvh];
    bool streaming = (hm & STREAMING_BIT) != 0u;
    u32 hi = hm & ~STREAMING_BIT;
    u32 slot = streaming ? ring_slots[t] : slots[t];
    u32 heads = streaming ? p.n_str : p.n_ret;
    u32 pages = streaming ? p.num_str_pages : p.num_pages;
    if (hi >= heads || slot >= pages * p.page_size) return;
    u64 at = (((u64)(slot / p.page_size) * heads + hi) * p.page_size + slot % p.page_size) * hd;
    KT* kd = (streaming ? sk : k) + at;
    KT* vd = (streaming ? sv : v) + at;
    const QkvRow ks = row + (p.n_heads + kvh) * hd;
    const QkvRow vs = row + (p.n_heads + p.n_kv_heads + kvh) * hd;
    const bool fold = p.n_tokens == 1u && !streaming;
    for (u32 i = threadIdx.x; i < half; i += blockDim.x) {
        float a = __fmul_rn(pos, inv_freq[i]);
        float c = cosf(a) * p.attention_scaling, s = sinf(a) * p.attention_scaling;
        float x0 = ks[i], x1 = ks[i + half];
        KT k0 = from_f32<KT>(x0 * c - x1 * s), k1 = from_f32<KT>(x1 * c + x0 * s);
        kd[i] = k0;
        kd[i + half] = k1;
        if (fold) {
            fold_summary(p, sum, slot, hi, i, to_f32(k0));
            fold_summary(p, sum, slot, hi, i + half, to_f32(k1));
        }
    }
    if ((hd & 1u) && threadIdx.x == 0) {
        KT kl = from_f32<KT>(ks[hd - 1]);
        kd[hd - 1] = kl;
        if (fold) fold_summary(p, sum, slot, hi, hd - 1, to_f32(kl));
    }
    for (u32 i = threadIdx.x; i < hd; i += blockDim.x) vd[i] = from_f32<KT>(vs[i]);
}

#define ROPE(name, KT) \
    extern "C" __global__ void name(RopeAppendKvParams p, const void* qkv, const u32* positions, const u32* slots, \
                                    const u32* ring_slots, const float* inv_freq, const u32* head_map, float* q, \
                                    KT* k, KT* v, KT* sk, KT* sv, float* sum, u32 qkv16) { \
        rope_impl<KT>(p, qkv, positions, slots, ring_slots, inv_freq, head_map, q, k, v, sk, sv, sum, qkv16); \
    }
ROPE(rope_append_kv_f32, float)
ROPE(rope_append_kv_f16, f16_t)
ROPE(rope_append_kv_bf16, bf16_t)

// The same op for calls of several tokens with 16-bit or f32 KV (`rope_append_kv_rows_<kv>`, the
// host's choice where head_dim / 2 divides 256): one block of 256 threads per token, thread i
// owns rotation pair i % (head_dim / 2) of heads i / (head_dim / 2), i / (head_dim / 2) + G, ...
// (G = 512 / head_dim), so each (token, pair) computes its cos/sin G times instead of once per
// head (the per-head grid above spends most of its instructions there: 2.6 IPC, 34% of DRAM
// bandwidth at 8,192 tokens on an H100, session 32). Same values: the same expressions per
// element. A thread takes its heads ROPE_ROWS_U at a time, loading all of them before storing
// any (session 39: 19.3 ms of a 32K prefill with one head's loads in flight a thread, H100). No
// summary fold (n_tokens > 1: rope_append_kv_summary.cu follows).
#define ROPE_ROWS_U 4u

template <typename KT>
__device__ void rope_rows_impl(RopeAppendKvParams p, const void* qkv, const u32* positions, const u32* slots,
                               const u32* ring_slots, const float* inv_freq, const u32* head_map, float* q,
                               KT* k, KT* v, KT* sk, KT* sv, u32 qkv16) {
    const u32 t = blockIdx.x, hd = p.head_dim, half = hd / 2, groups = blockDim.x / half;
    const u32 i = threadIdx.x % half, nh = p.n_heads, nkv = p.n_kv_heads;
    if (t >= p.n_tokens) return;
    const QkvRow row{qkv, (u64)t * (nh + 2 * nkv) * hd, qkv16};
    const float pos = (float)positions[t];
    const float a = __fmul_rn(pos, inv_freq[i]);
    const float c = cosf(a) * p.attention_scaling, s = sinf(a) * p.attention_scaling;
    // ROPE_ROWS_U heads a pass: every load of the pass is issued before its stores (q, k and v
    // may alias qkv as far as the compiler knows, so it would not move a load above a store).
    for (u32 h0 = threadIdx.x / half; h0 < nh + nkv; h0 += ROPE_ROWS_U * groups) {
        float x0[ROPE_ROWS_U], x1[ROPE_ROWS_U], v0[ROPE_ROWS_U], v1[ROPE_ROWS_U];
#pragma unroll
        for (u32 u = 0; u < ROPE_ROWS_U; u++) {
            const u32 h = h0 + u * groups;
            x0[u] = x1[u] = v0[u] = v1[u] = 0.0f;
            if (h >= nh + nkv) continue;
            const QkvRow src = row + h * hd;
            x0[u] = src[i];
            x1[u] = src[i + half];
            if (h < nh) continue;
            const QkvRow vs = row + (nkv + h) * hd;  // v of KV head h - nh
            v0[u] = vs[i];
            v1[u] = vs[i + half];
        }
#pragma unroll
        for (u32 u = 0; u < ROPE_ROWS_U; u++) {
            const u32 h = h0 + u * groups;
            if (h >= nh + nkv) continue;
            const float r0 = x0[u] * c - x1[u] * s, r1 = x1[u] * c + x0[u] * s;
            if (h < nh) {
                float* dst = q + ((u64)t * nh + h) * hd;
                dst[i] = r0;
                dst[i + half] = r1;
                continue;
            }
            const u32 kvh = h - nh, hm = head_map[kvh];
            const bool streaming = (hm & STREAMING_BIT) != 0u;
            const u32 hi = hm & ~STREAMING_BIT;
            const u32 slot = streaming ? ring_slots[t] : slots[t];
            const u32 nheads = streaming ? p.n_str : p.n_ret, pages = streaming ? p.num_str_pages : p.num_pages;
            if (hi >= nheads || slot >= pages * p.page_size) continue;
            const u64 at = (((u64)(slot / p.page_size) * nheads + hi) * p.page_size + slot % p.page_size) * hd;
            KT* kd = (streaming ? sk : k) + at;
            KT* vd = (streaming ? sv : v) + at;
            kd[i] = from_f32<KT>(r0);
            kd[i + half] = from_f32<KT>(r1);
            vd[i] = from_f32<KT>(v0[u]);
            vd[i + half] = from_f32<KT>(v1[u]);
        }
    }
}

#define ROPE_ROWS(name, KT) \
    extern "C" __global__ void name(RopeAppendKvParams p, const void* qkv, const u32* positions, const u32* slots, \
                                    const u32* ring_slots, const float* inv_freq, const u32* head_map, float* q, \
                                    KT* k, KT* v, KT* sk, KT* sv, float* sum, u32 qkv16) { \
        (void)sum; \
        rope_rows_impl<KT>(p, qkv, positions, slots, ring_slots, inv_freq, head_map, q, k, v, sk, sv, qkv16); \
    }
ROPE_ROWS(rope_append_kv_rows_f32, float)
ROPE_ROWS(rope_append_kv_rows_f16, f16_t)
ROPE_ROWS(rope_append_kv_rows_bf16, bf16_t)

// 8-bit KV (int8 / fp8, common.cuh): a KV row is quantized as a whole, so the block first puts
// the rotated k and the v row in shared memory and takes their max |x| (as u32 bits, reduced per
// warp then across the block's ROPE8_WARPS warps: exact and order-independent), then writes codes
// and scales. The block is 64 threads (ops_kv.rs; any multiple of 32 up to 32 ROPE8_WARPS).
// head_dim <= 256 and % 16 == 0 (host-checked). Pools are byte buffers of [page_size][head_dim]
// codes + [page_size] f32 scales per (page, head).
#define ROPE8_WARPS 8

template <bool FP8>
__device__ void rope8_impl(RopeAppendKvParams p, const void* qkv, const u32* positions, const u32* slots,
                           const u32* ring_slots, const float* inv_freq, const u32* head_map, float* q,
                           unsigned char* k, unsigned char* v, unsigned char* sk, unsigned char* sv, float* sum,
                           u32 qkv16) {
    __shared__ float kr[256], vr[256];
    __shared__ u32 wmax[2][ROPE8_WARPS];
    u32 t = blockIdx.x, h = blockIdx.y, hd = p.head_dim, half = hd / 2;
    u32 width = (p.n_heads + 2 * p.n_kv_heads) * hd;
    const QkvRow row{qkv, (u64)t * width, qkv16};
    float pos = (float)positions[t];
    if (h < p.n_heads) {
        rope_q_head(p, row, pos, inv_freq, t, h, q);
        return;
    }
    u32 kvh = h - p.n_heads;
    u32 hm = head_map[kvh];
    bool streaming = (hm & STREAMING_BIT) != 0u;
    u32 hi = hm & ~STREAMING_BIT;
    u32 slot = streaming ? ring_slots[t] : slots[t];
    u32 heads = streaming ? p.n_str : p.n_ret;
    u32 pages = streaming ? p.num_str_pages : p.num_pages;
    if (hi >= heads || slot >= pages * p.page_size || hd > 256u) return;  // block-uniform
    const QkvRow ks = row + (p.n_heads + kvh) * hd;
    const QkvRow vs = row + (p.n_heads + p.n_kv_heads + kvh) * hd;
    u32 km = 0u, vm = 0u;
    for (u32 i = threadIdx.x; i < half; i += blockDim.x) {
        float a = __fmul_rn(pos, inv_freq[i]);
        float c = cosf(a) * p.attention_scaling, s = sinf(a) * p.attention_scaling;
        float x0 = ks[i], x1 = ks[i + half];
        float k0 = x0 * c - x1 * s, k1 = x1 * c + x0 * s;
        kr[i] = k0;
        kr[i + half] = k1;
        km = max(km, max(__float_as_uint(k0) & 0x7fffffffu, __float_as_uint(k1) & 0x7fffffffu));
    }
    for (u32 i = threadIdx.x; i < hd; i += blockDim.x) {
        float x = vs[i];
        vr[i] = x;
        vm = max(vm, __float_as_uint(x) & 0x7fffffffu);
    }
    // Max bits per warp (redux), then over the block's warps: exact and order-independent.
    km = __reduce_max_sync(0xffffffffu, km);
    vm = __reduce_max_sync(0xffffffffu, vm);
    const u32 warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    if ((threadIdx.x & 31u) == 0u) { wmax[0][warp] = km; wmax[1][warp] = vm; }
    __syncthreads();
    for (u32 w = 0; w < warps; w++) { km = max(km, wmax[0][w]); vm = max(vm, wmax[1][w]); }
    u32 ps = p.page_size;
    u64 blk = (u64)(slot / ps) * heads + hi;
    unsigned char* kd = streaming ? sk : k;
    unsigned char* vd = streaming ? sv : v;
    u64 co = kv8_row_code_off(blk, slot % ps, ps, hd), so = kv8_row_scale_off(blk, slot % ps, ps, hd);
    u32 ka = km, va = vm;
    const bool fold = p.n_tokens == 1u && !streaming;
    const float ks_f = __uint_as_float(kv8_scale_bits(FP8, ka)); // the row's scale as stored
    for (u32 i = threadIdx.x; i < hd; i += blockDim.x) {
        unsigned char kc = kv8_code(FP8, kr[i], ka);
        kd[co + i] = kc;
        vd[co + i] = kv8_code(FP8, vr[i], va);
        if (fold) fold_summary(p, sum, slot, hi, i, __fmul_rn(FP8 ? kv8_value_e4m3(kc) : kv8_value_i8(kc), ks_f));
    }
    if (threadIdx.x == 0) {
        *reinterpret_cast<u32*>(kd + so) = kv8_scale_bits(FP8, ka);
        *reinterpret_cast<u32*>(vd + so) = kv8_scale_bits(FP8, va);
    }
}

#define ROPE8(name, FP8) \
    extern "C" __global__ void name(RopeAppendKvParams p, const void* qkv, const u32* positions, const u32* slots, \
                                    const u32* ring_slots, const float* inv_freq, const u32* head_map, float* q, \
                                    unsigned char* k, unsigned char* v, unsigned char* sk, unsigned char* sv, float* sum, \
                                    u32 qkv16) { \
        rope8_impl<FP8>(p, qkv, positions, slots, ring_slots, inv_freq, head_map, q, k, v, sk, sv, sum, qkv16); \
    }
ROPE8(rope_append_kv_int8, false)
ROPE8(rope_append_kv_fp8, true)
