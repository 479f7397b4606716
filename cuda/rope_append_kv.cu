// rope_append_kv, pass 1 of 2 (pass 2: rope_append_kv_summary.cu). qkv [n_tokens][(n_heads +
// 2 n_kv_heads) head_dim] f32 -> q [n_tokens][n_heads][head_dim] rotated (rotate-half RoPE at
// positions[t], cos/sin times attention_scaling); per KV head, the rotated k and the v go to the
// retrieval pool at slots[t] or, for a streaming head (head_map & STREAMING_BIT), to the
// streaming pool at ring_slots[t]. Pools [page][heads][page_size][head_dim] in KT (f32/f16/bf16).
// Grid (n_tokens, n_heads + n_kv_heads); thread i rotates the pair (i, i + head_dim/2). Slots
// outside their pool are skipped (the host checks the slots it uploads; this guards the rest).
template <typename KT>
__device__ void rope_impl(RopeAppendKvParams p, const float* qkv, const u32* positions, const u32* slots,
                          const u32* ring_slots, const float* inv_freq, const u32* head_map, float* q,
                          KT* k, KT* v, KT* sk, KT* sv) {
    u32 t = blockIdx.x, h = blockIdx.y, hd = p.head_dim, half = hd / 2;
    u32 width = (p.n_heads + 2 * p.n_kv_heads) * hd;
    const float* row = qkv + (u64)t * width;
    float pos = (float)positions[t];
    if (h < p.n_heads) {
        const float* src = row + h * hd;
        float* dst = q + ((u64)t * p.n_heads + h) * hd;
        for (u32 i = threadIdx.x; i < half; i += blockDim.x) {
            float a = __fmul_rn(pos, inv_freq[i]);
            float c = cosf(a) * p.attention_scaling, s = sinf(a) * p.attention_scaling;
            float x0 = src[i], x1 = src[i + half];
            dst[i] = x0 * c - x1 * s;
            dst[i + half] = x1 * c + x0 * s;
        }
        if ((hd & 1u) && threadIdx.x == 0) dst[hd - 1] = src[hd - 1];
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
    const float* ks = row + (p.n_heads + kvh) * hd;
    const float* vs = row + (p.n_heads + p.n_kv_heads + kvh) * hd;
    for (u32 i = threadIdx.x; i < half; i += blockDim.x) {
        float a = __fmul_rn(pos, inv_freq[i]);
        float c = cosf(a) * p.attention_scaling, s = sinf(a) * p.attention_scaling;
        float x0 = ks[i], x1 = ks[i + half];
        kd[i] = from_f32<KT>(x0 * c - x1 * s);
        kd[i + half] = from_f32<KT>(x1 * c + x0 * s);
    }
    if ((hd & 1u) && threadIdx.x == 0) kd[hd - 1] = from_f32<KT>(ks[hd - 1]);
    for (u32 i = threadIdx.x; i < hd; i += blockDim.x) vd[i] = from_f32<KT>(vs[i]);
}

#define ROPE(name, KT) \
    extern "C" __global__ void name(RopeAppendKvParams p, const float* qkv, const u32* positions, const u32* slots, \
                                    const u32* ring_slots, const float* inv_freq, const u32* head_map, float* q, \
                                    KT* k, KT* v, KT* sk, KT* sv) { \
        rope_impl<KT>(p, qkv, positions, slots, ring_slots, inv_freq, head_map, q, k, v, sk, sv); \
    }
ROPE(rope_append_kv_f32, float)
ROPE(rope_append_kv_f16, f16_t)
ROPE(rope_append_kv_bf16, bf16_t)
