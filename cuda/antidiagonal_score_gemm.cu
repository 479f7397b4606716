// antidiagonal_score by cuBLAS (appended to antidiagonal_score.cu; src/backend/cuda/ops_blocks.rs
// picks it where one sequence holds every block with candidates and the step's blocks are known
// on the host). The fused kernel above recomputes the same products tile by tile in a CTA per
// (KV head, block) and spends most of its time waiting; here the products are one GEMM:
//
//   z[row][kg] = qs[row] . ks[kg], qs[row][i * hd + d] = q[q_row + 8 rg + 7 - i][h][d] and
//   ks[kg][i * hd + d] = k[8 kg + i][d] (so ks is simply the keys in position order),
//
// for the rows (block b, query head g of KV head kvh, row group rg) of retrieval head r.
// 1. antidiagonal_pack_q_<bf16|f16>: qs[r][b - b0][g][rg][8 hd] (zero for rg >= rows / 8),
//    q rounded to the 16-bit type the fused kernel's mma reads (f16 for f16 KV, else bf16).
// 2. antidiagonal_pack_k_<KV dtype>: ks[r][pos][hd] for pos < n_pos, in that 16-bit type
//    (8-bit KV dequantized as the fused kernel stages it; zero past kv_len or the page table).
// 3. a cuBLAS batched GEMM over r (f32 out, f32 accumulation) per chunk of blocks into z.
// 4. antidiagonal_row_stats: each row's max and sum of exp(z * scale / 8) over its visible key
//    groups (a warp per row); antidiagonal_block_sums: each candidate page's share (a thread per
//    key group summing the rows in order, then a thread per page summing its key groups in
//    order), written once.
// The scores equal the fused kernel's up to the order of the f32 sums (both round q and k to the
// same 16-bit type and accumulate their products in f32).

// ---- 1. q rows ------------------------------------------------------------------------------
template <typename CT>
__device__ void ad_pack_q(AntidiagonalParams p, const float* q, const u32* head_map, const u32* info, CT* qs,
                          u32 b0, u32 nbc) {
    const u32 kvh = blockIdx.x, bl = blockIdx.y, b = b0 + bl, g = blockIdx.z;
    const u32 hm = head_map[kvh];
    if ((hm & STREAMING_BIT) || hm >= p.n_ret || b >= p.n_blocks) return;
    const u32 r = hm, hd = p.head_dim, nh = p.n_heads, group = nh / p.n_kv_heads, kd = 8 * hd;
    const u32 q_row = info[4 * b], rows = info[4 * b + 1];
    const u32 groups = q_row + rows <= p.n_tokens ? rows / 8 : 0u;
    const u32 h = kvh * group + g;
    CT* dst = qs + ((((u64)r * nbc + bl) * group + g) * 16) * kd;
    if (hd % 4 == 0) {
        // Four dims a thread: 16-byte reads of q, 8-byte writes.
        const u32 n4 = hd / 4;
#pragma unroll 4
        for (u32 idx = threadIdx.x; idx < 16 * 8 * n4; idx += blockDim.x) {
            const u32 rg = idx / (8 * n4), c = idx % (8 * n4), i = c / n4, d = 4 * (c % n4);
            float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (rg < groups) x = *reinterpret_cast<const float4*>(q + ((u64)(q_row + 8 * rg + 7 - i) * nh + h) * hd + d);
            const u32 lo = (u32)from_f32<CT>(x.x).bits | ((u32)from_f32<CT>(x.y).bits << 16);
            const u32 hi = (u32)from_f32<CT>(x.z).bits | ((u32)from_f32<CT>(x.w).bits << 16);
            *reinterpret_cast<uint2*>(dst + (u64)rg * kd + i * hd + d) = make_uint2(lo, hi);
        }
        return;
    }
#pragma unroll 4
    for (u32 idx = threadIdx.x; idx < 16 * kd; idx += blockDim.x) {
        const u32 rg = idx / kd, c = idx % kd, i = c / hd, d = c % hd;
        float x = 0.0f;
        if (rg < groups) x = q[((u64)(q_row + 8 * rg + 7 - i) * nh + h) * hd + d];
        dst[idx] = from_f32<CT>(x);
    }
}

#define ADQ(name, CT) \
    extern "C" __global__ void __launch_bounds__(256) name(AntidiagonalParams p, const float* q, const u32* head_map, \
                                                            const u32* info, CT* qs, u32 b0, u32 nbc) { \
        ad_pack_q<CT>(p, q, head_map, info, qs, b0, nbc); \
    }
ADQ(antidiagonal_pack_q_f16, f16_t)
ADQ(antidiagonal_pack_q_bf16, bf16_t)

// ---- 2. keys in position order ----------------------------------------------------------------
// A CTA per (KV head, 64 positions). 16-bit KV of the 16-bit type itself (hd % 8 == 0) copies
// 16 bytes at a time; other KV converts element by element as the fused kernel's staging does.
#define ADK_POS 64u
template <typename KT>
__device__ void ad_pack_k(AntidiagonalParams p, const KT* k, const u32* head_map, const u32* page_indptr,
                          const u32* page_table, const u32* kv_len, typename AdType<KT>::T* ks, u32 seq, u32 n_pos,
                          u32 page_table_len) {
    typedef typename AdType<KT>::T CT;
    const u32 kvh = blockIdx.x, pos0 = blockIdx.y * ADK_POS;
    const u32 hm = head_map[kvh];
    if ((hm & STREAMING_BIT) || hm >= p.n_ret || seq >= p.num_seqs) return;
    const u32 r = hm, hd = p.head_dim, ps = p.page_size;
    const u32 pt0 = page_indptr[seq], pt1 = min(page_indptr[seq + 1], page_table_len);
    const u32 len = min(kv_len[seq], pt1 > pt0 ? (pt1 - pt0) * ps : 0u);
    CT* dst = ks + (u64)r * n_pos * hd;
    if (AdAsync<KT>::value && hd % 8 == 0) {
        const u32 ch = hd / 8;
        for (u32 idx = threadIdx.x; idx < ADK_POS * ch; idx += blockDim.x) {
            const u32 pos = pos0 + idx / ch, c = idx % ch;
            if (pos >= n_pos) break;
            uint4 v = make_uint4(0, 0, 0, 0);
            if (pos < len) {
                const u32 page = page_table[pt0 + pos / ps];
                if (page < p.num_pages)
                    v = *reinterpret_cast<const uint4*>(k + (((u64)page * p.n_ret + r) * ps + pos % ps) * hd + 8 * c);
            }
            *reinterpret_cast<uint4*>(dst + (u64)pos * hd + 8 * c) = v;
        }
        return;
    }
    for (u32 idx = threadIdx.x; idx < ADK_POS * hd; idx += blockDim.x) {
        const u32 pos = pos0 + idx / hd, d = idx % hd;
        if (pos >= n_pos) break;
        float x = 0.0f;
        if (pos < len) {
            const u32 page = page_table[pt0 + pos / ps];
            if (page < p.num_pages) x = kv_elem<KT>(k, (((u64)page * p.n_ret + r) * ps + pos % ps) * hd, d, ps, hd);
        }
        dst[(u64)pos * hd + d] = from_f32<CT>(x);
    }
}

// CT: AdType<KT>::T (the 16-bit type the products read).
#define ADK(name, KT, CT) \
    extern "C" __global__ void __launch_bounds__(256) name( \
        AntidiagonalParams p, const KT* k, const u32* head_map, const u32* page_indptr, const u32* page_table, \
        const u32* kv_len, CT* ks, u32 seq, u32 n_pos, u32 page_table_len) { \
        ad_pack_k<KT>(p, k, head_map, page_indptr, page_table, kv_len, ks, seq, n_pos, page_table_len); \
    }
ADK(antidiagonal_pack_k_f32, float, bf16_t)
ADK(antidiagonal_pack_k_f16, f16_t, f16_t)
ADK(antidiagonal_pack_k_bf16, bf16_t, bf16_t)
ADK(antidiagonal_pack_k_int8, i8kv_t, bf16_t)
ADK(antidiagonal_pack_k_fp8, e4m3_t, bf16_t)

// ---- 4. softmax shares summed by page ---------------------------------------------------------
// Two kernels over a chunk's z: [r][bl][group * 16][ldz] for blocks b0 .. b0 + nbc, ldz a multiple
// of 4 and at least every block's visible key groups. antidiagonal_row_stats: a warp per row,
// its max and inverse sum (stats [r][bl][row][2]); antidiagonal_block_sums: a CTA per (KV head,
// block, run of whole pages), a thread per key group summing the rows' shares in row order, then
// a thread per page summing its key groups in order. Blocks the fused kernel skips are skipped.
#define ADS_COLS 256u

// A block as both reductions see it: ad_block's fields, its retrieval head r and the key groups
// [0, vmax) it reads (bounded by ldz); ok false where the fused kernel writes nothing or the
// block is not the packed sequence's.
struct AdSums {
    AdBlock k;
    u32 r, vmax;
};

__device__ __forceinline__ AdSums ad_sums_block(const AntidiagonalParams& p, u32 kvh, u32 b, const u32* head_map,
                                                const u32* page_indptr, const u32* kv_len, const u32* info,
                                                const u32* v_indptr, u32 ldz, u32 seq_one, u32 page_table_len,
                                                u32 scores_len) {
    AdSums s;
    s.k.ok = false;
    s.r = head_map[kvh];
    s.vmax = 0;
    if ((s.r & STREAMING_BIT) || s.r >= p.n_ret || b >= p.n_blocks) return s;
    s.k = ad_block(p, b, info, v_indptr, scores_len);
    if (!s.k.ok || s.k.seq != seq_one) {
        s.k.ok = false;
        return s;
    }
    if (s.k.groups > 0) s.vmax = min(ad_vmax(p, s.k, page_indptr, kv_len, page_table_len), ldz);
    return s;
}

// Key groups row group rg sees.
__device__ __forceinline__ u32 ad_lim(const AdSums& s, u32 rg) {
    return rg < s.k.groups ? min((s.k.first + 8 * rg) / 8, s.vmax) : 0u;
}

// (m, l) of two partial softmax sums combined; -inf maxima carry no mass.
__device__ __forceinline__ void ad_ml_merge(float& m, float& l, float m2, float l2) {
    const float mn = fmaxf(m, m2);
    if (mn == -LS_INF) return;
    l = (m == -LS_INF ? 0.0f : l * expf(m - mn)) + (m2 == -LS_INF ? 0.0f : l2 * expf(m2 - mn));
    m = mn;
}

// Grid (n_kv_heads, nbc, group * 16 / 8), 256 threads: warp w of CTA z serves row 8 z + w. The
// CTAs with z = 0 zero their block's score entries (pages the sums skip keep 0).
extern "C" __global__ void __launch_bounds__(256) antidiagonal_row_stats(
    AntidiagonalParams p, const u32* head_map, const u32* page_indptr, const u32* kv_len, const u32* info,
    const u32* v_indptr, const float* z, float* stats, float* scores, u32 b0, u32 nbc, u32 ldz, u32 seq_one,
    u32 page_table_len, u32 scores_len) {
    const u32 kvh = blockIdx.x, bl = blockIdx.y;
    const AdSums s = ad_sums_block(p, kvh, b0 + bl, head_map, page_indptr, kv_len, info, v_indptr, ldz, seq_one,
                                   page_table_len, scores_len);
    if (!s.k.ok) return;
    const u32 tid = threadIdx.x, lane = tid % 32, nrow = p.n_heads / p.n_kv_heads * 16;
    if (blockIdx.z == 0)
        for (u32 j = tid; j <= s.k.cand; j += blockDim.x) scores[(u64)(s.k.at + j) * p.n_ret + s.r] = 0.0f;
    const u32 row = blockIdx.z * 8 + tid / 32;
    if (row >= nrow) return;
    const u32 lim = ad_lim(s, row % 16);
    const float zs = p.scale * 0.125f;
    const u64 rix = ((u64)s.r * nbc + bl) * nrow + row;
    const float* zr = z + rix * ldz;
    float m = -LS_INF, l = 0.0f;
    for (u32 c0 = 4 * lane; c0 < lim; c0 += 128) {
        const float4 v = *reinterpret_cast<const float4*>(zr + c0);
        const float x[4] = {v.x * zs, v.y * zs, v.z * zs, v.w * zs};
        float cm = -LS_INF;
#pragma unroll
        for (u32 t = 0; t < 4; t++) if (c0 + t < lim) cm = fmaxf(cm, x[t]);
        float cl = 0.0f;
#pragma unroll
        for (u32 t = 0; t < 4; t++) if (c0 + t < lim) cl += expf(x[t] - cm);
        ad_ml_merge(m, l, cm, cl);
    }
#pragma unroll
    for (u32 o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o), l2 = __shfl_xor_sync(0xffffffffu, l, o);
        ad_ml_merge(m, l, m2, l2);
    }
    if (lane == 0) {
        stats[2 * rix] = m;
        stats[2 * rix + 1] = l > 0.0f ? 1.0f / l : 0.0f;
    }
}

// Grid (n_kv_heads, nbc, runs), 256 threads: CTA z takes candidate pages 1 + z ppc .. (ppc =
// max(1, 256 / (ps / 8)) pages, so at most max(256, ps / 8) key groups). Shared memory:
// [group * 16][2] row stats, [16] row-group limits, [max(256, ps / 8)] key-group sums.
extern "C" __global__ void __launch_bounds__(256) antidiagonal_block_sums(
    AntidiagonalParams p, const u32* head_map, const u32* page_indptr, const u32* kv_len, const u32* info,
    const u32* v_indptr, const float* z, float* stats, float* scores, u32 b0, u32 nbc, u32 ldz, u32 seq_one,
    u32 page_table_len, u32 scores_len) {
    // stats: read only (written by antidiagonal_row_stats; one signature for both, bindings.rs).
    extern __shared__ __align__(16) float ads_smem[];
    const u32 kvh = blockIdx.x, bl = blockIdx.y;
    const AdSums s = ad_sums_block(p, kvh, b0 + bl, head_map, page_indptr, kv_len, info, v_indptr, ldz, seq_one,
                                   page_table_len, scores_len);
    if (!s.k.ok || s.k.groups == 0) return;
    const u32 cpp = p.page_size / 8, ppc = max(1u, ADS_COLS / cpp);
    const u32 pg0 = 1 + blockIdx.z * ppc;
    if (pg0 > s.k.cand || pg0 * cpp >= s.vmax) return;
    const u32 pg1 = min(pg0 + ppc, s.k.cand + 1);
    const u32 c_lo = pg0 * cpp, c_hi = min(pg1 * cpp, s.vmax);
    const u32 tid = threadIdx.x, nrow = p.n_heads / p.n_kv_heads * 16;
    float* st = ads_smem;                               // [nrow][2]
    u32* lim = reinterpret_cast<u32*>(st + 2 * nrow);  // [16]
    float* cs = st + 2 * nrow + 16;                     // key-group sums
    const u64 r0 = ((u64)s.r * nbc + bl) * nrow;
    for (u32 j = tid; j < 2 * nrow; j += blockDim.x) st[j] = stats[2 * r0 + j];
    if (tid < 16) lim[tid] = ad_lim(s, tid);
    __syncthreads();
    const float zs = p.scale * 0.125f;
    const float* zb = z + r0 * ldz;
    for (u32 c = c_lo + tid; c < c_hi; c += blockDim.x) {
        float acc = 0.0f;
        for (u32 row0 = 0; row0 < nrow; row0 += 8) {
            float v[8];
#pragma unroll
            for (u32 j = 0; j < 8; j++) v[j] = zb[(u64)(row0 + j) * ldz + c];
#pragma unroll
            for (u32 j = 0; j < 8; j++) {
                const u32 row = row0 + j;
                if (c < lim[row % 16]) acc += expf(v[j] * zs - st[2 * row]) * st[2 * row + 1];
            }
        }
        cs[c - c_lo] = acc;
    }
    __syncthreads();
    for (u32 pg = pg0 + tid; pg < pg1; pg += blockDim.x) {
        const u32 a = pg * cpp, e = min((pg + 1) * cpp, c_hi);
        if (a >= c_hi) break;
        float acc = 0.0f;
        for (u32 c = a; c < e; c++) acc += cs[c - c_lo];
        scores[(u64)(s.k.at + pg - 1) * p.n_ret + s.r] = acc;
    }
}
