// antidiagonal_score: block-sparse prefill's antidiagonal estimate (XAttention, stride 8; the
// contract: Backend::antidiagonal_score in src/backend/mod.rs). One CTA per (KV head, query block)
// (grid (n_kv_heads, n_blocks)); streaming heads and blocks without candidates return.
//
// For stride S = 8 the score of (row group rg, key group kg) is a GEMM over the index pair (i, d):
// z = scale / 8 * sum_{i<8} sum_d q[r0 + 7 - i][d] k[8 kg + i][d], r0 = 8 rg. A block's 16 row
// groups are one m16 tile per query head; its key groups come in tiles of TK keys (TK / 8 key
// groups = n8 tiles). Warp w serves query head w / WPH of the CTA's head chunk and the IPW values
// of i from IPW (w % WPH): its Q fragments (rows 8 rg + 7 - i, all dims) live in registers for
// the whole kernel (IPW * D / 16 * 4 = 64 registers), its partial S sums over its i through
// m16n8k16 mma.sync, and the WPH partials of a head are added in shared memory. Key tiles are
// staged in shared memory by key group: position k0 + j at row (j % 8) * NKG + j / 8, so one i's
// key groups are consecutive rows (B fragments by 32-bit loads, conflict-free at pitch D + 8).
//
// Two passes over the key tiles per head chunk: pass 0 keeps each (head, row group) row's running
// max and sum of exp (online softmax) over its visible key groups kg < (first + r0) / 8; pass 1
// recomputes z over the candidate pages' tiles only and sums exp(z - m) / l per (row, page), then
// per page over the rows in a fixed order into the block's scores (the CTA owns its scores: it
// zeroes them first and adds each tile's page sums in tile order, so the result does not depend
// on scheduling). Rows past the block's last full group of 8 contribute nothing.
//
// 16-bit KV with head_dim % 8 == 0 stages tiles by cp.async (two stages); f32 and 8-bit KV (and
// other head dims) convert element by element (kv_elem) into bf16. Q is rounded to the same
// 16-bit type (mma operands); products accumulate in f32.

#define AD_TK(D) ((D) <= 128 ? 128u : 64u)

template <typename KT> struct AdType { typedef bf16_t T; };
template <> struct AdType<f16_t> { typedef f16_t T; };
template <> struct AdType<bf16_t> { typedef bf16_t T; };
template <typename KT> struct AdAsync { static const bool value = false; };
template <> struct AdAsync<f16_t> { static const bool value = true; };
template <> struct AdAsync<bf16_t> { static const bool value = true; };

// Long (about 190 lines) on purpose: staging, the two passes and the page sums share the Q
// fragments, the row statistics and shared memory; the body reads in the order it runs.
template <typename KT, int D>
__device__ void antidiag_impl(AntidiagonalParams p, const float* q, const KT* k, const u32* head_map,
                              const u32* page_indptr, const u32* page_table, const u32* kv_len, const u32* info,
                              const u32* v_indptr, float* scores, u32 page_table_len, u32 scores_len) {
    typedef typename AdType<KT>::T CT;
    constexpr u32 IPW = 256 / D, WPH = 8 / IPW, HG = 16 / WPH;  // i per warp, warps per head, heads
    constexpr u32 TK = AD_TK(D), NKG = TK / 8, NT = NKG / 8, LD = D + 8, KD = D / 16;
    constexpr u32 PMAX = NKG + 1;  // pages one tile touches (page_size >= 8)
    constexpr bool ASYNC = AdAsync<KT>::value;
    extern __shared__ __align__(16) unsigned char ad_smem[];
    CT* ks = reinterpret_cast<CT*>(ad_smem);                    // [2][TK][LD]
    float* red = reinterpret_cast<float*>(ks + 2 * TK * LD);    // [HG][WPH][16][NKG]
    float* prow = red + HG * WPH * 16 * NKG;                    // [HG * 16][PMAX]

    const u32 kvh = blockIdx.x, b = blockIdx.y;
    const u32 hm = head_map[kvh];
    if (hm & STREAMING_BIT) return;
    const u32 r = hm, ps = p.page_size, hd = p.head_dim, nh = p.n_heads;
    const u32 q_row = info[4 * b], rows = info[4 * b + 1], first = info[4 * b + 2], seq = info[4 * b + 3];
    const u32 at = v_indptr[b], e = v_indptr[b + 1];
    if (e < at + 2 || seq >= p.num_seqs || q_row + rows > p.n_tokens || ps < 8 || ps % 8 != 0) return;
    if ((u64)e * p.n_ret > scores_len) return;
    const u32 cand = e - at - 1, groups = rows / 8;
    const u32 tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
    for (u32 j = tid; j <= cand; j += blockDim.x) scores[(u64)(at + j) * p.n_ret + r] = 0.0f;
    if (groups == 0) return;
    const u32 pt0 = page_indptr[seq], pt1 = min(page_indptr[seq + 1], page_table_len);
    // Keys the block reads: [0, 8 vmax), within the sequence and its page table.
    u32 vmax = (first + 8 * (groups - 1)) / 8;
    vmax = min(vmax, kv_len[seq] / 8);
    if (pt1 > pt0) vmax = min(vmax, (pt1 - pt0) * ps / 8); else vmax = 0;
    const u32 kend = 8 * vmax;
    const u32 group = nh / p.n_kv_heads, n_hg = min(group, HG);
    const float zs = p.scale * 0.125f;

    // Stage key tile starting at k0 into stage st.
    auto stage = [&](u32 st, u32 k0) {
        CT* kd = ks + st * TK * LD;
        if (ASYNC && hd % 8 == 0) {
            constexpr u32 CH = D / 8;
            for (u32 idx = tid; idx < TK * CH; idx += blockDim.x) {
                const u32 j = idx / CH, c = idx % CH, pos = k0 + j;
                CT* dst = kd + ((j % 8) * NKG + j / 8) * LD + 8 * c;
                u32 page = NONE_U32;
                if (pos < kend && 8 * c < hd) page = page_table[pt0 + pos / ps];
                if (page < p.num_pages) {
                    const u64 el = (((u64)page * p.n_ret + r) * ps + pos % ps) * hd + 8 * c;
                    cp_async16(dst, k + el);
                } else {
                    *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
                }
            }
            cp_async_commit();
        } else {
            for (u32 idx = tid; idx < TK * D; idx += blockDim.x) {
                const u32 j = idx / D, d = idx % D, pos = k0 + j;
                float x = 0.0f;
                if (pos < kend && d < hd) {
                    const u32 page = page_table[pt0 + pos / ps];
                    if (page < p.num_pages) x = kv_elem<KT>(k, (((u64)page * p.n_ret + r) * ps + pos % ps) * hd, d, ps, hd);
                }
                kd[((j % 8) * NKG + j / 8) * LD + d] = from_f32<CT>(x);
            }
            cp_async_commit();
        }
    };

    const u32 hg = warp / WPH, ip = warp % WPH;
    const u32 nrow = n_hg * 16;  // (head, row group) rows of a chunk
    for (u32 h0 = 0; h0 < group; h0 += HG) {
        const u32 hc = min(HG, group - h0);
        const bool active = hg < hc;
        const u32 h = kvh * group + h0 + hg;
        // Q fragments: a[ii][kd] for i = IPW ip + ii; rows rg = g, g + 8 at query row 8 rg + 7 - i.
        u32 a[IPW][KD][4];
#pragma unroll
        for (u32 ii = 0; ii < IPW; ii++) {
            const u32 i = IPW * ip + ii;
#pragma unroll
            for (u32 kd = 0; kd < KD; kd++) {
#pragma unroll
                for (u32 e4 = 0; e4 < 4; e4++) {
                    const u32 rg = g + 8 * (e4 & 1), d = kd * 16 + 2 * tq + 8 * (e4 >> 1);
                    float x0 = 0.0f, x1 = 0.0f;
                    if (active && rg < groups) {
                        const float* qr = q + ((u64)(q_row + 8 * rg + 7 - i) * nh + h) * hd;
                        if (d < hd) x0 = qr[d];
                        if (d + 1 < hd) x1 = qr[d + 1];
                    }
                    a[ii][kd][e4] = mma_pack<CT>(x0, x1);
                }
            }
        }
        // Row statistics of the row this thread finalizes (tid < nrow: head tid / 16, rg tid % 16).
        float m_row = -LS_INF, l_row = 0.0f;
        const u32 my_rg = tid % 16;
        const bool row_ok = tid < hc * 16 && my_rg < groups;
        const u32 my_vis = (first + 8 * my_rg) / 8;
        for (u32 pass = 0; pass < 2; pass++) {
            // Pass 0: every key the block sees; pass 1: the candidate pages 1..cand.
            const u32 lo = pass == 0 ? 0u : ps / TK * TK;
            const u32 hi = pass == 0 ? kend : min(kend, (cand + 1) * ps);
            if (hi <= lo) continue;
            const u32 n_tiles = (hi - lo + TK - 1) / TK;
            stage(0, lo);
            for (u32 ti = 0; ti < n_tiles; ti++) {
                const u32 st = ti & 1, k0 = lo + ti * TK;
                if (ti + 1 < n_tiles) { stage(st ^ 1, k0 + TK); cp_async_wait<1>(); } else { cp_async_wait<0>(); }
                __syncthreads();
                if (active) {
                    float acc[NT][4];
#pragma unroll
                    for (u32 n = 0; n < NT; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
                    const CT* kt = ks + st * TK * LD;
#pragma unroll
                    for (u32 ii = 0; ii < IPW; ii++) {
                        const u32 i = IPW * ip + ii;
#pragma unroll
                        for (u32 n = 0; n < NT; n++) {
                            const CT* kr = kt + (i * NKG + 8 * n + g) * LD + 2 * tq;
#pragma unroll
                            for (u32 kd = 0; kd < KD; kd++) {
                                const u32 b0 = *reinterpret_cast<const u32*>(kr + kd * 16);
                                const u32 b1 = *reinterpret_cast<const u32*>(kr + kd * 16 + 8);
                                mma_16816<CT>(acc[n], a[ii][kd], b0, b1);
                            }
                        }
                    }
                    float* rw = red + ((hg * WPH + ip) * 16) * NKG;
#pragma unroll
                    for (u32 n = 0; n < NT; n++) {
                        const u32 c = 8 * n + 2 * tq;
                        rw[g * NKG + c] = acc[n][0];
                        rw[g * NKG + c + 1] = acc[n][1];
                        rw[(g + 8) * NKG + c] = acc[n][2];
                        rw[(g + 8) * NKG + c + 1] = acc[n][3];
                    }
                }
                __syncthreads();
                // Finalize: thread tid < hc * 16 owns row (head tid / 16, row group tid % 16).
                const u32 pa = k0 / ps;
                if (tid < nrow) {
                    float* pr = prow + tid * PMAX;
                    for (u32 x = 0; x < PMAX; x++) pr[x] = 0.0f;
                }
                if (row_ok) {
                    const u32 rh = tid / 16;
                    float z[NKG];
                    float tmax = -LS_INF;
#pragma unroll
                    for (u32 c = 0; c < NKG; c++) {
                        float s = 0.0f;
#pragma unroll
                        for (u32 w = 0; w < WPH; w++) s += red[((rh * WPH + w) * 16 + my_rg) * NKG + c];
                        const u32 kg = k0 / 8 + c;
                        z[c] = kg < my_vis && 8 * kg < hi ? s * zs : -LS_INF;
                        tmax = fmaxf(tmax, z[c]);
                    }
                    if (pass == 0) {
                        if (tmax > -LS_INF) {
                            const float mn = fmaxf(m_row, tmax);
                            float sum = 0.0f;
#pragma unroll
                            for (u32 c = 0; c < NKG; c++) sum += z[c] > -LS_INF ? expf(z[c] - mn) : 0.0f;
                            l_row = l_row * expf(m_row - mn) + sum;
                            m_row = mn;
                        }
                    } else if (l_row > 0.0f) {
                        float* pr = prow + tid * PMAX;
                        const float inv = 1.0f / l_row;
#pragma unroll
                        for (u32 c = 0; c < NKG; c++) {
                            if (z[c] > -LS_INF) pr[(k0 + 8 * c) / ps - pa] += expf(z[c] - m_row) * inv;
                        }
                    }
                }
                __syncthreads();
                if (pass == 1) {
                    // Page sums over the chunk's rows in row order, added to the block's scores.
                    const u32 pb = (k0 + TK - 1) / ps;
                    for (u32 x = tid; x <= pb - pa && x < PMAX; x += blockDim.x) {
                        const u32 pg = pa + x;
                        if (pg < 1 || pg > cand) continue;
                        float s = 0.0f;
                        for (u32 row = 0; row < hc * 16; row++) s += prow[row * PMAX + x];
                        scores[(u64)(at + pg - 1) * p.n_ret + r] += s;
                    }
                }
                __syncthreads();
            }
        }
    }
}

#define AD(name, KT, D) \
    extern "C" __global__ void __launch_bounds__(512, 1) name( \
        AntidiagonalParams p, const float* q, const KT* k, const u32* head_map, const u32* page_indptr, \
        const u32* page_table, const u32* kv_len, const u32* info, const u32* v_indptr, float* scores, \
        u32 page_table_len, u32 scores_len) { \
        antidiag_impl<KT, D>(p, q, k, head_map, page_indptr, page_table, kv_len, info, v_indptr, scores, \
                             page_table_len, scores_len); \
    }
AD(antidiagonal_score_f32_d64, float, 64)
AD(antidiagonal_score_f32_d128, float, 128)
AD(antidiagonal_score_f32_d256, float, 256)
AD(antidiagonal_score_f16_d64, f16_t, 64)
AD(antidiagonal_score_f16_d128, f16_t, 128)
AD(antidiagonal_score_f16_d256, f16_t, 256)
AD(antidiagonal_score_bf16_d64, bf16_t, 64)
AD(antidiagonal_score_bf16_d128, bf16_t, 128)
AD(antidiagonal_score_bf16_d256, bf16_t, 256)
AD(antidiagonal_score_int8_d64, i8kv_t, 64)
AD(antidiagonal_score_int8_d128, i8kv_t, 128)
AD(antidiagonal_score_int8_d256, i8kv_t, 256)
AD(antidiagonal_score_fp8_d64, e4m3_t, 64)
AD(antidiagonal_score_fp8_d128, e4m3_t, 128)
AD(antidiagonal_score_fp8_d256, e4m3_t, 256)
