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
// 4. antidiagonal_block_sums: a CTA (256 threads) per (KV head, block of the chunk) reads its
//    group * 16 rows of z: pass 0 a row's max and sum of exp(z * scale / 8) over its visible key
//    groups (a warp per row), pass 1 each candidate page's share (a thread per key group summing
//    the rows in order, then a thread per page summing its key groups in order), written once.
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
#define ADS_THREADS 256u
#define ADS_COLS 256u

// (m, l) of two partial softmax sums combined; -inf maxima carry no mass.
__device__ __forceinline__ void ad_ml_merge(float& m, float& l, float m2, float l2) {
    const float mn = fmaxf(m, m2);
    if (mn == -LS_INF) return;
    l = (m == -LS_INF ? 0.0f : l * expf(m - mn)) + (m2 == -LS_INF ? 0.0f : l2 * expf(m2 - mn));
    m = mn;
}

// Shared memory: [group * 16] row maxima, [group * 16] inverse sums, [max(ADS_COLS, ps / 8)]
// a chunk's column sums (ops_blocks.rs sizes it). z: [r][bl][group * 16][ldz] for the chunk's
// blocks b0 .. b0 + nbc; ldz a multiple of 4 and at least every block's visible key groups.
extern "C" __global__ void __launch_bounds__(256) antidiagonal_block_sums(
    AntidiagonalParams p, const u32* head_map, const u32* page_indptr, const u32* kv_len, const u32* info,
    const u32* v_indptr, const float* z, float* scores, u32 b0, u32 nbc, u32 ldz, u32 seq_one, u32 page_table_len,
    u32 scores_len) {
    extern __shared__ __align__(16) float ads_smem[];
    const u32 kvh = blockIdx.x, bl = blockIdx.y, b = b0 + bl;
    const u32 hm = head_map[kvh];
    if ((hm & STREAMING_BIT) || hm >= p.n_ret || b >= p.n_blocks) return;
    const u32 r = hm, ps = p.page_size, group = p.n_heads / p.n_kv_heads, nrow = group * 16;
    // The fused kernel's conditions, and the sequence the keys were packed from.
    const AdBlock blk = ad_block(p, b, info, v_indptr, scores_len);
    if (!blk.ok || blk.seq != seq_one) return;
    const u32 first = blk.first, at = blk.at, cand = blk.cand, groups = blk.groups;
    const u32 tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    for (u32 j = tid; j <= cand; j += blockDim.x) scores[(u64)(at + j) * p.n_ret + r] = 0.0f;
    if (groups == 0) return;
    const u32 vmax = min(ad_vmax(p, blk, page_indptr, kv_len, page_table_len), ldz);
    const float zs = p.scale * 0.125f;
    const float* zb = z + ((u64)r * nbc + bl) * nrow * ldz;
    float* m_s = ads_smem;
    float* inv_s = m_s + nrow;
    float* cs = inv_s + nrow;

    // Pass 0: row (g, rg) sees key groups kg < min((first + 8 rg) / 8, vmax).
    for (u32 row = warp; row < nrow; row += ADS_THREADS / 32) {
        const u32 rg = row % 16;
        const u32 lim = rg < groups ? min((first + 8 * rg) / 8, vmax) : 0u;
        const float* zr = zb + (u64)row * ldz;
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
            m_s[row] = m;
            inv_s[row] = l > 0.0f ? 1.0f / l : 0.0f;
        }
    }
    __syncthreads();

    // Pass 1: the candidate pages 1..cand in chunks of whole pages.
    const u32 cpp = ps / 8, ppc = max(1u, ADS_COLS / cpp);
    for (u32 pg0 = 1; pg0 <= cand && pg0 * cpp < vmax; pg0 += ppc) {
        const u32 pg1 = min(pg0 + ppc, cand + 1);
        const u32 c_lo = pg0 * cpp, c_hi = min(pg1 * cpp, vmax);
        for (u32 c = c_lo + tid; c < c_hi; c += blockDim.x) {
            float s = 0.0f;
            for (u32 row = 0; row < nrow; row++) {
                const u32 rg = row % 16;
                if (rg >= groups || c >= (first + 8 * rg) / 8) continue;
                s += expf(zb[(u64)row * ldz + c] * zs - m_s[row]) * inv_s[row];
            }
            cs[c - c_lo] = s;
        }
        __syncthreads();
        for (u32 pg = pg0 + tid; pg < pg1; pg += blockDim.x) {
            const u32 a = pg * cpp, z1 = min((pg + 1) * cpp, c_hi);
            float s = 0.0f;
            for (u32 c = a; c < z1; c++) s += cs[c - c_lo];
            if (a < c_hi) scores[(u64)(at + pg - 1) * p.n_ret + r] = s;
        }
        __syncthreads();
    }
}
