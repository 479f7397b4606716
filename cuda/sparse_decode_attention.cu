// sparse_decode_attention: one query per sequence (position kv_len - 1), split-KV ("flash
// decoding"), ONE kernel for both head kinds: each block reads head_map and walks either its
// retrieval head's page list or its streaming head's Lambda window through the ring.
//
// Grid (n_splits, n_kv_heads * head_chunks, num_seqs); a block takes the query heads h0..h0+ng of
// one KV head (ng <= G <= 8, so a GQA group shares every K/V load) over split x of the head's key
// list. Layouts: q/out [num_seqs][n_heads][head_dim] f32; pools [page][heads][page_size][head_dim]
// in KT; selected [slot][n_ret][sel_stride], counts [slot][n_ret], seq_slot/tail_start [num_seqs].
//
// Key list ("slots"): retrieval heads: the selected pages below tail_start (the selection is
// ascending, so a prefix), then pages tail_start..n_pages, page_size slots each (kept when the
// position is < kv_len and within the window). Streaming heads: the Lambda mask, positions
// wlo..sink then max(sink, wlo, pos + 1 - local)..=pos, through the ring. Split i covers slots
// [i * per, (i + 1) * per), per = max(ceil(n_slots / n_splits), 32); empty splits report
// (m, l) = (-inf, 0).
//
// Work split: a key row is read by a sub-group of LPK = head_dim / 8 lanes, each lane one 16-byte
// load (8 elements) of K and of V; a warp holds 32 / LPK sub-groups, each taking UNROLL keys per
// iteration (all loads issued before use), with online softmax in the exp2 domain (q pre-scaled by
// scale * log2 e). Sub-groups merge through shared memory at the end. n_splits == 1 writes `out`;
// otherwise part [num_seqs][n_heads][n_splits][head_dim + 2] (accumulator, m, l), merged by
// sparse_decode_attention_merge.cu. Requires head_dim % 8 == 0 and head_dim <= 256 (host-checked);
// device-side page ids, slots and table indices are bounds-checked (an unaddressable key is skipped).

#define SDA_THREADS 128
#define SDA_UNROLL 4

struct KeyList {
    bool streaming;
    u32 hi, s, len, wlo, nsel, sel_base, tail0, n_pages, a0, na, b0;
};

__device__ __forceinline__ u32 slot_offset(const AttentionParams& p, const KeyList& ls, u32 e, const u32* page_indptr,
                                           const u32* page_table, const u32* ring_table, const u32* selected,
                                           u32 page_table_len, u32 ring_table_len) {
    u32 ps = p.page_size;
    if (ls.streaming) {
        u32 pos = e < ls.na ? ls.a0 + e : ls.b0 + (e - ls.na);
        u32 r = ring_index(pos, p.sink, p.ring_tokens);
        u32 at = ls.s * (p.ring_tokens / ps) + r / ps;
        if (at >= ring_table_len) return NONE_U32;
        u32 page = ring_table[at];
        if (page >= p.num_str_pages) return NONE_U32;
        return ((page * p.n_str + ls.hi) * ps + r % ps) * p.head_dim;
    }
    u32 idx = e / ps, off = e % ps;
    u32 j = idx < ls.nsel ? selected[ls.sel_base + idx] : ls.tail0 + (idx - ls.nsel);
    if (j >= ls.n_pages) return NONE_U32;
    u32 pos = j * ps + off;
    u32 at = page_indptr[ls.s] + j;
    if (pos >= ls.len || pos < ls.wlo || at >= page_indptr[ls.s + 1] || at >= page_table_len) return NONE_U32;
    u32 page = page_table[at];
    if (page >= p.num_pages) return NONE_U32;
    return ((page * p.n_ret + ls.hi) * ps + off) * p.head_dim;
}

template <typename KT, int G>
__device__ void decode_impl(AttentionParams p, const float* q, const KT* k, const KT* v, const KT* sk, const KT* sv,
                            const u32* head_map, const u32* page_indptr, const u32* page_table, const u32* kv_len,
                            const u32* ring_table, const u32* selected, const u32* counts, const u32* seq_slot,
                            const u32* tail_start, float* out, float* part, u32 page_table_len,
                            u32 ring_table_len, u32 selected_len, u32 counts_len) {
    __shared__ float sm_m[SDA_THREADS][G];
    __shared__ float sm_acc[G][256];
    __shared__ float sm_l[G];
    __shared__ u32 sm_nsel;
    const u32 hd = p.head_dim, nh = p.n_heads, ps = p.page_size;
    const u32 group = nh / p.n_kv_heads, hchunks = (group + G - 1) / G;
    const u32 s = blockIdx.z, kvh = blockIdx.y / hchunks, g0 = (blockIdx.y % hchunks) * G;
    const u32 ng = min((u32)G, group - g0), h0 = kvh * group + g0;
    const u32 split = blockIdx.x, n_splits = gridDim.x;
    const u32 lpk = hd / 8, kpw = 32 / lpk;  // lanes per key, keys per warp
    const u32 lane = threadIdx.x & 31, sub = lane % lpk, sg = threadIdx.x / lpk;  // sg: sub-group id
    const u32 n_sg = SDA_THREADS / lpk;

    KeyList ls;
    u32 hm = head_map[kvh];
    ls.streaming = (hm & STREAMING_BIT) != 0u;
    ls.hi = hm & ~STREAMING_BIT;
    ls.s = s;
    ls.len = kv_len[s];
    u32 pos = ls.len > 0 ? ls.len - 1 : 0;
    ls.wlo = window_lo(pos, p.window);
    ls.n_pages = (ls.len + ps - 1) / ps;
    u32 tail = tail_start[s];
    ls.tail0 = min(tail, ls.n_pages);
    u32 ci = seq_slot[s] * p.n_ret + ls.hi;
    ls.sel_base = ci * p.sel_stride;
    u32 cnt = 0;
    if (!ls.streaming && ci < counts_len && ls.sel_base < selected_len)
        cnt = min(min(counts[ci], p.sel_stride), selected_len - ls.sel_base);
    if (threadIdx.x == 0) sm_nsel = 0;
    for (u32 i = threadIdx.x; i < G * 256; i += SDA_THREADS) (&sm_acc[0][0])[i] = 0.0f;
    __syncthreads();
    u32 below = 0;
    for (u32 i = threadIdx.x; i < cnt; i += SDA_THREADS) below += selected[ls.sel_base + i] < tail;
    if (below) atomicAdd(&sm_nsel, below);
    __syncthreads();
    ls.nsel = sm_nsel;
    u32 n_slots = 0;
    if (ls.len > 0) {
        if (ls.streaming) {
            ls.a0 = ls.wlo;
            u32 a1 = min(p.sink, pos + 1);
            ls.na = a1 > ls.a0 ? a1 - ls.a0 : 0;
            u32 recent = pos + 1 > p.local ? pos + 1 - p.local : 0;
            ls.b0 = max(max(p.sink, ls.wlo), recent);
            n_slots = ls.na + (pos + 1 > ls.b0 ? pos + 1 - ls.b0 : 0);
        } else {
            n_slots = (ls.nsel + ls.n_pages - ls.tail0) * ps;
        }
    }
    u32 per = max((n_slots + n_splits - 1) / n_splits, 32u);
    u32 start = min(split * per, n_slots), end = min(start + per, n_slots);

    // This lane's 8 dims of each head's query, pre-scaled to the exp2 domain.
    const float qscale = p.scale * 1.4426950408889634f;
    float qr[G][8];
#pragma unroll
    for (int g = 0; g < G; g++) {
#pragma unroll
        for (int i = 0; i < 8; i++)
            qr[g][i] = (u32)g < ng ? q[((u64)s * nh + h0 + g) * hd + sub * 8 + i] * qscale : 0.0f;
    }
    float m[G], l[G], acc[G][8];
#pragma unroll
    for (int g = 0; g < G; g++) {
        m[g] = -LS_INF;
        l[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) acc[g][i] = 0.0f;
    }
    const KT* kp = ls.streaming ? sk : k;
    const KT* vp = ls.streaming ? sv : v;
    // The trip count is the same for every lane of a warp (shuffles below use the full mask).
    for (u32 base = start; base < end; base += n_sg * SDA_UNROLL) {
        const u32 e0 = base + sg;
        u32 offs[SDA_UNROLL];
        float kr[SDA_UNROLL][8], vr[SDA_UNROLL][8];
#pragma unroll
        for (int u = 0; u < SDA_UNROLL; u++) {
            u32 e = e0 + u * n_sg;
            offs[u] = e < end ? slot_offset(p, ls, e, page_indptr, page_table, ring_table, selected, page_table_len,
                                            ring_table_len)
                              : NONE_U32;
        }
#pragma unroll
        for (int u = 0; u < SDA_UNROLL; u++) {
            if (offs[u] != NONE_U32) {
                load8(kp + offs[u] + sub * 8, kr[u]);
                load8(vp + offs[u] + sub * 8, vr[u]);
            }
        }
#pragma unroll
        for (int g = 0; g < G; g++) {
            float sc[SDA_UNROLL];
            float mx = m[g];
#pragma unroll
            for (int u = 0; u < SDA_UNROLL; u++) {
                float d = 0.0f;
                if (offs[u] != NONE_U32) {
#pragma unroll
                    for (int i = 0; i < 8; i++) d += qr[g][i] * kr[u][i];
                }
                for (u32 o = lpk >> 1; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
                sc[u] = offs[u] != NONE_U32 ? d : -LS_INF;
                mx = fmaxf(mx, sc[u]);
            }
            if (mx == -LS_INF) continue;
            float corr = exp2f(m[g] - mx);
            l[g] *= corr;
#pragma unroll
            for (int i = 0; i < 8; i++) acc[g][i] *= corr;
#pragma unroll
            for (int u = 0; u < SDA_UNROLL; u++) {
                if (offs[u] != NONE_U32) {
                    float pr = exp2f(sc[u] - mx);
                    l[g] += pr;
#pragma unroll
                    for (int i = 0; i < 8; i++) acc[g][i] += pr * vr[u][i];
                }
            }
            m[g] = mx;
        }
    }
    // Merge the sub-groups: block max, then rescaled sums through shared memory.
    if (sub == 0) {
#pragma unroll
        for (int g = 0; g < G; g++) sm_m[sg][g] = m[g];
    }
    __syncthreads();
    float bm[G];
#pragma unroll
    for (int g = 0; g < G; g++) {
        bm[g] = -LS_INF;
        for (u32 i = 0; i < n_sg; i++) bm[g] = fmaxf(bm[g], sm_m[i][g]);
    }
    if (threadIdx.x < G) sm_l[threadIdx.x] = 0.0f;
    __syncthreads();
#pragma unroll
    for (int g = 0; g < G; g++) {
        if (m[g] == -LS_INF) continue;
        float f = exp2f(m[g] - bm[g]);
#pragma unroll
        for (int i = 0; i < 8; i++) atomicAdd(&sm_acc[g][sub * 8 + i], acc[g][i] * f);
        if (sub == 0) atomicAdd(&sm_l[g], l[g] * f);
    }
    __syncthreads();
    for (u32 i = threadIdx.x; i < ng * hd; i += SDA_THREADS) {
        u32 g = i / hd, d = i % hd;
        float L = sm_l[g];
        u64 h = (u64)s * nh + h0 + g;
        if (n_splits == 1) {
            out[h * hd + d] = L > 0.0f ? sm_acc[g][d] / L : 0.0f;
        } else {
            float* pp = part + (h * n_splits + split) * (hd + 2);
            pp[d] = sm_acc[g][d];
            if (d == 0) { pp[hd] = bm[g]; pp[hd + 1] = L; }
        }
    }
}

#define SDA(name, KT, G) \
    extern "C" __global__ void __launch_bounds__(SDA_THREADS) name( \
        AttentionParams p, const float* q, const KT* k, const KT* v, const KT* sk, const KT* sv, const u32* head_map, \
        const u32* page_indptr, const u32* page_table, const u32* kv_len, const u32* ring_table, const u32* selected, \
        const u32* counts, const u32* seq_slot, const u32* tail_start, float* out, float* part, u32 ptl, u32 rtl, \
        u32 sl, u32 cl) { \
        decode_impl<KT, G>(p, q, k, v, sk, sv, head_map, page_indptr, page_table, kv_len, ring_table, selected, counts, \
                           seq_slot, tail_start, out, part, ptl, rtl, sl, cl); \
    }
SDA(sparse_decode_attention_f32_g1, float, 1)
SDA(sparse_decode_attention_f32_g2, float, 2)
SDA(sparse_decode_attention_f32_g4, float, 4)
SDA(sparse_decode_attention_f32_g8, float, 8)
SDA(sparse_decode_attention_f16_g1, f16_t, 1)
SDA(sparse_decode_attention_f16_g2, f16_t, 2)
SDA(sparse_decode_attention_f16_g4, f16_t, 4)
SDA(sparse_decode_attention_f16_g8, f16_t, 8)
SDA(sparse_decode_attention_bf16_g1, bf16_t, 1)
SDA(sparse_decode_attention_bf16_g2, bf16_t, 2)
SDA(sparse_decode_attention_bf16_g4, bf16_t, 4)
SDA(sparse_decode_attention_bf16_g8, bf16_t, 8)
