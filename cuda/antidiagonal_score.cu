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
// recomputes z over the candidate pages' tiles only and adds exp(z - m) / l per page. After a
// tile's products, all the CTA's threads finalize: a row's (head, row group) TPR threads are adjacent
// lanes holding CPT cells each, reduce the row's max and sum by shuffles and keep identical copies
// of (m, l); pass 1 writes the cells' shares to shared memory, a warp per key group sums them over
// the rows (a fixed shuffle tree), and one thread per page adds its key groups in order into the
// block's score (the CTA owns its scores: it zeroes them first and adds each tile's page sums in
// tile order, so the result does not depend on scheduling). Rows past the block's last full group
// of 8 contribute nothing.
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

// A block of `info` / `v_indptr` as both antidiagonal paths read it. ok: false where the block
// is skipped before anything is written (no candidates; rows, sequence, page size or score row
// out of range). cand and groups are meaningful only when ok.
struct AdBlock {
    bool ok;
    u32 q_row, rows, first, seq, at, cand, groups;
};

__device__ __forceinline__ AdBlock ad_block(const AntidiagonalParams& p, u32 b, const u32* info, const u32* v_indptr,
                                            u32 scores_len) {
    AdBlock k;
    k.q_row = info[4 * b];
    k.rows = info[4 * b + 1];
    k.first = info[4 * b + 2];
    k.seq = info[4 * b + 3];
    k.at = v_indptr[b];
    const u32 e = v_indptr[b + 1], ps = p.page_size;
    k.ok = e >= k.at + 2 && k.seq < p.num_seqs && k.q_row + k.rows <= p.n_tokens && ps >= 8 && ps % 8 == 0 &&
           (u64)e * p.n_ret <= scores_len;
    k.cand = e - k.at - 1;
    k.groups = k.rows / 8;
    return k;
}

// Key groups [0, vmax) a block with groups >= 1 reads: those before its last row group, within
// its sequence's length and page table.
__device__ __forceinline__ u32 ad_vmax(const AntidiagonalParams& p, const AdBlock& k, const u32* page_indptr,
                                       const u32* kv_len, u32 page_table_len) {
    const u32 pt0 = page_indptr[k.seq], pt1 = min(page_indptr[k.seq + 1], page_table_len);
    const u32 v = min((k.first + 8 * (k.groups - 1)) / 8, kv_len[k.seq] / 8);
    return pt1 > pt0 ? min(v, (pt1 - pt0) * p.page_size / 8) : 0u;
}

// Long (about 190 lines) on purpose: staging, the two passes and the page sums share the Q
// fragments, the row statistics and shared memory; the body reads in the order it runs.
template <typename KT, int D>
__device__ void antidiag_impl(AntidiagonalParams p, const float* q, const KT* k, const u32* head_map,
                              const u32* page_indptr, const u32* page_table, const u32* kv_len, const u32* info,
                              const u32* v_indptr, float* scores, u32 page_table_len, u32 scores_len) {
    typedef typename AdType<KT>::T CT;
    constexpr u32 IPW = 256 / D, WPH = 8 / IPW, HG = 16 / WPH;  // i per warp, warps per head, heads
    constexpr u32 TK = AD_TK(D), NKG = TK / 8, NT = NKG / 8, LD = D + 8, KD = D / 16;
    constexpr u32 NROW = HG * 16;  // (head, row group) rows of a head chunk
    // The finalize's cells (row, key group) per thread and threads per row (a power of two <= 32).
    constexpr u32 CPT = NROW * NKG >= 512 ? NROW * NKG / 512 : 1, TPR = NKG / CPT;
    static_assert(TPR >= 1 && TPR <= 32 && (TPR & (TPR - 1)) == 0 && NKG <= 16, "finalize mapping");
    constexpr bool ASYNC = AdAsync<KT>::value;
    extern __shared__ __align__(16) unsigned char ad_smem[];
    CT* ks = reinterpret_cast<CT*>(ad_smem);                    // [2][TK][LD]
    float* red = reinterpret_cast<float*>(ks + 2 * TK * LD);    // [HG][WPH][16][NKG]
    float* pz = red + HG * WPH * 16 * NKG;                      // [NROW][NKG]: pass 1's cell shares
    float* csum = pz + NROW * NKG;                              // [NKG]: their sums over the rows

    const u32 kvh = blockIdx.x, b = blockIdx.y;
    const u32 hm = head_map[kvh];
    if (hm & STREAMING_BIT) return;
    const u32 r = hm, ps = p.page_size, hd = p.head_dim, nh = p.n_heads;
    const AdBlock blk = ad_block(p, b, info, v_indptr, scores_len);
    if (!blk.ok) return;
    const u32 q_row = blk.q_row, first = blk.first, seq = blk.seq, at = blk.at, cand = blk.cand, groups = blk.groups;
    const u32 tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
    for (u32 j = tid; j <= cand; j += blockDim.x) scores[(u64)(at + j) * p.n_ret + r] = 0.0f;
    if (groups == 0) return;
    const u32 pt0 = page_indptr[seq];
    // Keys the block reads: [0, kend).
    const u32 kend = 8 * ad_vmax(p, blk, page_indptr, kv_len, page_table_len);
    const u32 group = nh / p.n_kv_heads;
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
        // Finalize mapping: thread t owns row fr = t / TPR of the chunk (head fr / 16, row group
        // fr % 16) and its columns fc0 .. fc0 + CPT; a row's TPR threads are consecutive lanes of
        // one warp and keep identical copies of the row's statistics (m, l).
        const u32 fr = tid / TPR, fc0 = (tid % TPR) * CPT, my_rg = fr % 16;
        const bool row_ok = fr < hc * 16 && my_rg < groups;
        const u32 my_vis = (first + 8 * my_rg) / 8;
        float m_row = -LS_INF, l_row = 0.0f;
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
                // z of this thread's cells: the WPH partial sums (over i) added in warp order.
                float z[CPT];
                float tmax = -LS_INF;
#pragma unroll
                for (u32 c = 0; c < CPT; c++) {
                    const u32 col = fc0 + c, kg = k0 / 8 + col;
                    z[c] = -LS_INF;
                    if (row_ok && kg < my_vis && 8 * kg < hi) {
                        float s = 0.0f;
#pragma unroll
                        for (u32 w = 0; w < WPH; w++) s += red[(((fr / 16) * WPH + w) * 16 + my_rg) * NKG + col];
                        z[c] = s * zs;
                    }
                    tmax = fmaxf(tmax, z[c]);
                }
#pragma unroll
                for (u32 o = TPR / 2; o > 0; o >>= 1) tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, o));
                if (pass == 0) {
                    const float mn = fmaxf(m_row, tmax);
                    float sum = 0.0f;
#pragma unroll
                    for (u32 c = 0; c < CPT; c++) sum += z[c] > -LS_INF ? expf(z[c] - mn) : 0.0f;
#pragma unroll
                    for (u32 o = TPR / 2; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
                    if (tmax > -LS_INF) {
                        l_row = l_row * expf(m_row - mn) + sum;
                        m_row = mn;
                    }
                    continue;  // the next tile's barrier orders red's reads before its writes
                }
                // Pass 1: each cell's softmax share into pz[row][col], then column sums over the
                // rows (a warp per column, fixed shuffle tree), then page sums over the columns.
                if (fr < NROW) {
                    const float inv = l_row > 0.0f ? 1.0f / l_row : 0.0f;
#pragma unroll
                    for (u32 c = 0; c < CPT; c++) pz[fr * NKG + fc0 + c] = z[c] > -LS_INF ? expf(z[c] - m_row) * inv : 0.0f;
                }
                __syncthreads();
                // The launch has min(group, HG) * WPH warps (fewer than 512 threads when group < HG):
                // only rows < hc * 16 of pz are written (the rest is stale shared memory) and there
                // may be fewer warps than columns, so sum the chunk's rows and stride the columns.
                for (u32 col = warp; col < NKG; col += blockDim.x / 32) {
                    float s = 0.0f;
                    for (u32 row = lane; row < hc * 16; row += 32) s += pz[row * NKG + col];
                    s = warp_sum(s);
                    if (lane == 0) csum[col] = s;
                }
                __syncthreads();
                const u32 pa = k0 / ps, pb = (k0 + TK - 1) / ps;
                for (u32 x = tid; x <= pb - pa; x += blockDim.x) {
                    const u32 pg = pa + x;
                    if (pg < 1 || pg > cand) continue;
                    const u32 c0 = pg * ps > k0 ? (pg * ps - k0) / 8 : 0u;
                    const u32 c1 = min(NKG, ((pg + 1) * ps - k0) / 8);
                    float s = 0.0f;
                    for (u32 c = c0; c < c1; c++) s += csum[c];
                    scores[(u64)(at + pg - 1) * p.n_ret + r] += s;
                }
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
