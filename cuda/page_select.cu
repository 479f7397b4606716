// page_select: Quest page selection for decode. One block per (KV head, sequence) (grid
// (n_kv_heads, num_seqs)); blocks of streaming heads and of rows with select_mask[s] == 0 return.
// For retrieval head r (head_map) of sequence s, candidate j < (n_pages - 1) * upp (the newest
// page is always read, never selected): the selection unit j % upp (u = sel_unit tokens, 0:
// page_size; upp = page_size / u units a page) of page j / upp. It scores max over the unit's
// logical pages l and the KV head's query heads g of sum_c max(q_c * max_c, q_c * min_c)
// (summary [page][n_ret][lpp][2][head_dim] f32; with p.bound_shrink > 0 the box shrunk toward
// its centre, box_term). The k_pages best (ties to the lower index) go ascending to
// selected[(seq_slot[s] * n_ret + r) * sel_stride ..], their number to counts[seq_slot[s] * n_ret + r].
//
// Two kernels. page_select_score: grid (np / 8, n_kv_heads, num_seqs), one warp per candidate
// page, writes u64 keys (inverted order-preserving float bits << 32 | j; ~0 past the candidates)
// to keys [num_seqs][n_kv_heads][np] (np a power of two >= the candidates, chosen by the host
// from the page table's length). page_select: grid (n_kv_heads, num_seqs), picks the k smallest
// of a row's keys (the winners: the first k of the keys sorted ascending) by a radix select
// (select_row) in dynamic shared memory (page_select_global: from the scratch keys, for rows
// longer than shared memory holds) and writes them in ascending page order. np comes from the
// step's longest sequence (max_seq_pages), not the batch's whole page table. Lengths of selected/counts/page_table come
// as arguments: nothing is read or written outside them.
//
// Ranks (p.rank): PAGE_RANK_MAX (0) as above. PAGE_RANK_HEAD_NORM (1): page_select_score writes
// each query head g's own max bound over the page's logical pages to heads
// [num_seqs][n_kv_heads][group][np] f32 instead of keys, and page_select_norm (grid (n_kv_heads,
// num_seqs)) normalizes them per head over the candidates and combines them over the group into
// the keys the sort reads (the formula: its header). With p.pin_first, candidate 0's key is 0,
// first in the ascending sort (both ranks).

__device__ __forceinline__ u32 ordered(float f) {
    u32 b = __float_as_uint(f);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// Term c of a logical page's score: max(q_c * max_c, q_c * min_c) (bound_shrink 0), or the box
// shrunk toward its centre, q_c * mid_c + |q_c| * (keep * half_c) with keep = 1 - shrink.
// box_term_k takes the choice as a template argument (loops that hoist it), box_term at run time.
template <bool SHRINK>
__device__ __forceinline__ float box_term_k(float qc, float lo, float hi, float keep) {
    if (!SHRINK) return fmaxf(qc * hi, qc * lo);
    return qc * ((hi + lo) * 0.5f) + fabsf(qc) * (keep * ((hi - lo) * 0.5f));
}
__device__ __forceinline__ float box_term(float qc, float lo, float hi, float shrink) {
    return shrink == 0.0f ? box_term_k<false>(qc, lo, hi, 1.0f) : box_term_k<true>(qc, lo, hi, 1.0f - shrink);
}

// Selection units a page holds: page_size / sel_unit (0: one; the host checks sel_unit).
__device__ __forceinline__ u32 select_upp(const PageSelectParams& p) {
    return p.sel_unit == 0u ? 1u : p.page_size / p.sel_unit;
}

// The row's candidates, at most np: with sel_unit 0 its pages but the newest; otherwise its
// units below the one holding position kv_len - 1 (and within the page table). That newest page
// or unit is always read, never selected.
__device__ __forceinline__ u32 row_candidates(const PageSelectParams& p, const u32* page_indptr, const u32* kv_len,
                                              u32 s, u32 np, u32 page_table_len) {
    u32 a = page_indptr[s], b = min(page_indptr[s + 1], page_table_len);
    u32 n = b > a ? b - a : 0;
    if (p.sel_unit != 0u) n = min(n * select_upp(p), (kv_len[s] + p.sel_unit - 1) / p.sel_unit);
    return min(n > 0 ? n - 1 : 0, np);
}

#define PS_MAX_HD 256
extern "C" __global__ void page_select_score(PageSelectParams p, const float* q, const float* summary,
                                             const u32* head_map, const u32* page_indptr, const u32* page_table,
                                             const u32* kv_len, const u32* select_mask, u64* keys, float* heads, u32 np,
                                             u32 page_table_len) {
    __shared__ float qs[8 * PS_MAX_HD];
    u32 kvh = blockIdx.y, s = blockIdx.z;
    u32 hm = head_map[kvh];
    if ((hm & STREAMING_BIT) || select_mask[s] == 0u) return;
    u32 r = hm, hd = p.head_dim, group = p.n_heads / p.n_kv_heads, lpp = p.page_size / p.logical_page;
    u32 upp = select_upp(p), lpu = lpp / upp;
    u32 gq = min(group, 8u);
    for (u32 i = threadIdx.x; i < gq * hd; i += blockDim.x) qs[i] = q[((u64)s * p.n_heads + kvh * group) * hd + i];
    __syncthreads();
    u32 a = page_indptr[s];
    u32 cand = row_candidates(p, page_indptr, kv_len, s, np, page_table_len);
    u32 lane = threadIdx.x & 31, j = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (j >= np) return;
    bool hn = p.rank == 1u;
    u64* row = keys + ((u64)s * p.n_kv_heads + kvh) * np;
    if (j >= cand) { if (lane == 0 && !hn) row[j] = ~0ull; return; }
    // head_norm: query head g's bound of candidate j at hp[g * np].
    float* hp = hn ? heads + ((u64)s * p.n_kv_heads + kvh) * group * np + j : nullptr;
    u32 page = page_table[a + j / upp], l0 = (j % upp) * lpu;
    float best = -LS_INF;  // NaN scores are skipped, as f32::max does in the reference
    if (page >= p.num_pages && hn && lane == 0) {
        for (u32 g = 0; g < group; g++) hp[(u64)g * np] = -LS_INF;
    }
    if (page < p.num_pages) {
        for (u32 l = l0; l < l0 + lpu; l++) {
            const float* mn = summary + ((((u64)page * p.n_ret + r) * lpp + l) * 2) * hd;
            const float* mx = mn + hd;
            float lo[PS_MAX_HD / 32], hi[PS_MAX_HD / 32];
#pragma unroll
            for (int i = 0; i < PS_MAX_HD / 32; i++) {
                u32 c = lane + 32 * i;
                lo[i] = c < hd ? mn[c] : 0.0f;
                hi[i] = c < hd ? mx[c] : 0.0f;
            }
            for (u32 g = 0; g < group; g++) {
                const float* qg = g < gq ? qs + g * hd : q + ((u64)s * p.n_heads + kvh * group + g) * hd;
                float acc = 0.0f;
#pragma unroll
                for (int i = 0; i < PS_MAX_HD / 32; i++) {
                    u32 c = lane + 32 * i;
                    if (c < hd) { acc += box_term(qg[c], lo[i], hi[i], p.bound_shrink); }
                }
                float v = warp_sum(acc);
                best = fmaxf(best, v);
                if (hn && lane == 0) hp[(u64)g * np] = fmaxf(l == l0 ? -LS_INF : hp[(u64)g * np], v);
            }
        }
    }
    if (lane == 0 && !hn) row[j] = (p.pin_first != 0u && j == 0) ? 0ull : ((u64)(~ordered(best)) << 32) | j;
}


// page_select_score for many rows that share their page lists (p.rows_share_pages: block-sparse
// prefill's virtual rows, one per query block of a sequence, whose candidate j is the same page
// in every row that has it), PAGE_RANK_MAX, whole pages as units (upp 1), group <= PSR_GMAX,
// head_dim % 4 == 0 and lpp dividing PSR_COLS: page_select_score's keys, its sums taken in
// head-dim order instead of by lane and warp tree (equal up to f32 rounding). Grid
// (ceil(np * lpp / PSR_COLS), n_kv_heads, ceil(num_seqs / PSR_ROWS)), PSR_THREADS threads. A
// block scores a tile of PSR_ROWS rows against PSR_COLS logical pages (PSR_COLS / lpp
// candidates): each 16-wide head-dim chunk of the rows' query heads and of the candidates' boxes
// is staged in shared memory once (16-byte loads; lanes along rows / columns, so the stores are
// free of bank conflicts), the boxes from the page list of the tile's row with the most
// candidates (the leader), and thread (tr, tc) accumulates rows tr and tr + 16 x logical pages
// 4 tc .. 4 tc + 3 x the group's heads sequentially over head_dim (no shuffles; a 16-byte shared
// load a box half). A (row, candidate) whose own page differs from the leader's (a tile that
// straddles two sequences, or rows that do not share lists after all) is scored again from
// global memory, so a wrong hint costs only speed.
#define PSR_ROWS 32
#define PSR_COLS 64
#define PSR_C 16
#define PSR_GMAX 8
#define PSR_THREADS 256

// Row s's max over its query heads of logical page l of `page`'s bound, all from global memory.
__device__ float psr_direct(const PageSelectParams& p, const float* q, const float* summary, u32 s, u32 kvh, u32 r,
                            u32 page, u32 l, u32 group, u32 lpp) {
    const u32 hd = p.head_dim;
    const float* mn = summary + ((((u64)page * p.n_ret + r) * lpp + l) * 2) * hd;
    float best = -LS_INF;
    for (u32 g = 0; g < group; g++) {
        const float* qg = q + ((u64)s * p.n_heads + kvh * group + g) * hd;
        float acc = 0.0f;
        for (u32 c = 0; c < hd; c++) acc += box_term(qg[c], mn[c], mn[hd + c], p.bound_shrink);
        best = fmaxf(best, acc);
    }
    return best;
}

struct PsrSmem {
    float qs[PSR_C][PSR_GMAX][PSR_ROWS];
    float4 ss[PSR_C][2][PSR_COLS / 4];
    float sc[PSR_ROWS][PSR_COLS + 4];
    u32 pg[PSR_COLS], cands[PSR_ROWS], starts[PSR_ROWS], lead;
};

// Stage head-dim chunk c0 (zeros past the rows, head_dim or a missing page: such pairs are set
// to -inf later). Element i of the query part: row i % 32, 4 dims (i / 32) % 4, head i / 128; of
// the box part: column i % 64, half (i / 64) % 2, 4 dims i / 128 — a warp's lanes take
// consecutive rows or columns.
__device__ __forceinline__ void psr_stage(const PageSelectParams& p, const float* q, const float* summary, u32 kvh,
                                          u32 r, u32 s0, u32 group, u32 lpp, u32 c0, PsrSmem& sm) {
    const u32 hd = p.head_dim, t = threadIdx.x, ns = p.num_seqs;
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (u32 i = t; i < PSR_ROWS * 4 * group; i += PSR_THREADS) {
        const u32 row = i % PSR_ROWS, c4 = (i / PSR_ROWS) % 4, g = i / (PSR_ROWS * 4), s = s0 + row, c = c0 + 4 * c4;
        const float4 v = (s < ns && c < hd)
            ? *reinterpret_cast<const float4*>(q + ((u64)s * p.n_heads + kvh * group + g) * hd + c) : zero;
        sm.qs[4 * c4][g][row] = v.x;
        sm.qs[4 * c4 + 1][g][row] = v.y;
        sm.qs[4 * c4 + 2][g][row] = v.z;
        sm.qs[4 * c4 + 3][g][row] = v.w;
    }
    for (u32 i = t; i < PSR_COLS * 2 * 4; i += PSR_THREADS) {
        const u32 col = i % PSR_COLS, lh = (i / PSR_COLS) % 2, c4 = i / (PSR_COLS * 2), c = c0 + 4 * c4;
        const u32 page = sm.pg[col / lpp];
        const float4 v = (page < p.num_pages && c < hd)
            ? *reinterpret_cast<const float4*>(summary + ((((u64)page * p.n_ret + r) * lpp + col % lpp) * 2 + lh) * hd + c)
            : zero;
        float* d = reinterpret_cast<float*>(&sm.ss[0][lh][0]);
        const u32 stride = 2 * PSR_COLS;  // floats from one dim's box half to the next dim's
        d[(4 * c4) * stride + col] = v.x;
        d[(4 * c4 + 1) * stride + col] = v.y;
        d[(4 * c4 + 2) * stride + col] = v.z;
        d[(4 * c4 + 3) * stride + col] = v.w;
    }
}

template <bool SHRINK>
__device__ __forceinline__ void psr_tile(const PageSelectParams& p, const float* q, const float* summary, u32 kvh,
                                         u32 r, u32 s0, u32 group, u32 lpp, PsrSmem& sm, float acc[PSR_GMAX][2][4]) {
    const u32 hd = p.head_dim, t = threadIdx.x, tr = t / 16u, tc = t % 16u;
    const float keep = 1.0f - p.bound_shrink;
    for (u32 c0 = 0; c0 < hd; c0 += PSR_C) {
        psr_stage(p, q, summary, kvh, r, s0, group, lpp, c0, sm);
        __syncthreads();
#pragma unroll 4
        for (u32 cc = 0; cc < PSR_C; cc++) {
            const float4 lo4 = sm.ss[cc][0][tc], hi4 = sm.ss[cc][1][tc];
            const float lo[4] = {lo4.x, lo4.y, lo4.z, lo4.w}, hi[4] = {hi4.x, hi4.y, hi4.z, hi4.w};
#pragma unroll
            for (int g = 0; g < PSR_GMAX; g++) {
                if ((u32)g < group) {
#pragma unroll
                    for (int ri = 0; ri < 2; ri++) {
                        const float qv = sm.qs[cc][g][tr + 16 * ri];
#pragma unroll
                        for (int ci = 0; ci < 4; ci++) acc[g][ri][ci] += box_term_k<SHRINK>(qv, lo[ci], hi[ci], keep);
                    }
                }
            }
        }
        __syncthreads();
    }
}

extern "C" __global__ void __launch_bounds__(PSR_THREADS) page_select_score_rows(
    PageSelectParams p, const float* q, const float* summary, const u32* head_map, const u32* page_indptr,
    const u32* page_table, const u32* kv_len, const u32* select_mask, u64* keys, float* heads, u32 np,
    u32 page_table_len) {
    __shared__ PsrSmem sm;
    (void)heads;
    const u32 kvh = blockIdx.y, hm = head_map[kvh];
    if (hm & STREAMING_BIT) return;
    const u32 r = hm, ns = p.num_seqs, group = p.n_heads / p.n_kv_heads, lpp = p.page_size / p.logical_page;
    const u32 cpt = PSR_COLS / lpp, j0 = blockIdx.x * cpt, s0 = blockIdx.z * PSR_ROWS, t = threadIdx.x;
    if (t < PSR_ROWS) {
        u32 s = s0 + t;
        bool on = s < ns && select_mask[s] != 0u;
        sm.cands[t] = on ? row_candidates(p, page_indptr, kv_len, s, np, page_table_len) : 0u;
        sm.starts[t] = on ? page_indptr[s] : 0u;
    }
    __syncthreads();
    if (t == 0) {
        u32 best = 0;
        for (u32 i = 1; i < PSR_ROWS; i++) best = sm.cands[i] > sm.cands[best] ? i : best;
        sm.lead = best;
    }
    __syncthreads();
    const u32 L = sm.lead;
    if (t < cpt) sm.pg[t] = j0 + t < sm.cands[L] ? page_table[sm.starts[L] + j0 + t] : 0xffffffffu;
    __syncthreads();
    float acc[PSR_GMAX][2][4];
#pragma unroll
    for (int g = 0; g < PSR_GMAX; g++)
#pragma unroll
        for (int ri = 0; ri < 2; ri++)
#pragma unroll
            for (int ci = 0; ci < 4; ci++) acc[g][ri][ci] = 0.0f;
    if (j0 < sm.cands[L]) {
        if (p.bound_shrink == 0.0f) psr_tile<false>(p, q, summary, kvh, r, s0, group, lpp, sm, acc);
        else psr_tile<true>(p, q, summary, kvh, r, s0, group, lpp, sm, acc);
    }
    const u32 tr = t / 16u, tc = t % 16u;
#pragma unroll
    for (int ri = 0; ri < 2; ri++) {
        const u32 row = tr + 16 * ri;
        float v[4];
#pragma unroll
        for (int ci = 0; ci < 4; ci++) {
            const u32 col = 4 * tc + ci, j = j0 + col / lpp;
            v[ci] = -LS_INF;
            if (j < sm.cands[row]) {
                const u32 page = page_table[sm.starts[row] + j];
                if (page >= p.num_pages) v[ci] = -LS_INF;
                else if (page != sm.pg[col / lpp]) v[ci] = psr_direct(p, q, summary, s0 + row, kvh, r, page, col % lpp, group, lpp);
                else {
#pragma unroll
                    for (int g = 0; g < PSR_GMAX; g++) if ((u32)g < group) v[ci] = fmaxf(v[ci], acc[g][ri][ci]);
                }
            }
        }
        *reinterpret_cast<float4*>(&sm.sc[row][4 * tc]) = make_float4(v[0], v[1], v[2], v[3]);
    }
    __syncthreads();
    for (u32 i = t; i < PSR_ROWS * cpt; i += PSR_THREADS) {
        const u32 row = i / cpt, jt = i % cpt, s = s0 + row, j = j0 + jt;
        if (s >= ns || j >= np || select_mask[s] == 0u) continue;
        u64* out = keys + ((u64)s * p.n_kv_heads + kvh) * np;
        if (j >= sm.cands[row]) { out[j] = ~0ull; continue; }
        float best = -LS_INF;
        for (u32 l = 0; l < lpp; l++) best = fmaxf(best, sm.sc[row][jt * lpp + l]);
        out[j] = (p.pin_first != 0u && j == 0) ? 0ull : ((u64)(~ordered(best)) << 32) | j;
    }
}

#define PS_LIM 1e30f
// A head's bound as head_norm reads it: clamped to +-1e30 (-inf and NaN read as -1e30).
__device__ __forceinline__ float norm_bound(float v) { return fminf(fmaxf(v, -PS_LIM), PS_LIM); }

// PAGE_RANK_HEAD_NORM, between page_select_score and the sort; one block per (KV head, sequence),
// any block size that is a multiple of 32. As the CPU reference (`head_norm_scores`): per query
// head g, over the row's candidates j, m = norm_bound(bound), M = max_j m,
// d = max(scale * (m - M), -1e30), x = d - log(sum_j exp(d)) (block reductions; each thread
// rewrites its own candidates' entries to x in place); then per candidate
// score = mx + log(sum_g exp(x_g - mx)), mx = max_g x_g, written as the sort's key (candidate 0's
// key 0 with pin_first; ~0 past the candidates). Any number of pages and any group size.
extern "C" __global__ void page_select_norm(PageSelectParams p, const u32* head_map, const u32* page_indptr,
                                            const u32* kv_len, const u32* select_mask, float* heads, u64* keys, u32 np,
                                            u32 page_table_len) {
    __shared__ float red[32];
    u32 kvh = blockIdx.x, s = blockIdx.y;
    u32 hm = head_map[kvh];
    if ((hm & STREAMING_BIT) || select_mask[s] == 0u) return;
    u32 cand = row_candidates(p, page_indptr, kv_len, s, np, page_table_len);
    u32 group = p.n_heads / p.n_kv_heads;
    float* hrow = heads + ((u64)s * p.n_kv_heads + kvh) * group * np;  // head g, candidate j: hrow[g * np + j]
    for (u32 g = 0; g < group; g++) {
        float* x = hrow + (u64)g * np;
        float m = -PS_LIM;
        for (u32 j = threadIdx.x; j < cand; j += blockDim.x) m = fmaxf(m, norm_bound(x[j]));
        float top = block_max(m, red);
        float z = 0.0f;
        for (u32 j = threadIdx.x; j < cand; j += blockDim.x) z += expf(fmaxf(p.scale * (norm_bound(x[j]) - top), -PS_LIM));
        float lz = logf(block_sum(z, red));
        for (u32 j = threadIdx.x; j < cand; j += blockDim.x) x[j] = fmaxf(p.scale * (norm_bound(x[j]) - top), -PS_LIM) - lz;
    }
    u64* row = keys + ((u64)s * p.n_kv_heads + kvh) * np;
    for (u32 j = threadIdx.x; j < np; j += blockDim.x) {
        if (j >= cand) { row[j] = ~0ull; continue; }
        float mx = hrow[j];
        for (u32 g = 1; g < group; g++) mx = fmaxf(mx, hrow[(u64)g * np + j]);
        float sum = 0.0f;
        for (u32 g = 0; g < group; g++) sum += expf(hrow[(u64)g * np + j] - mx);
        float sc = mx + logf(sum);
        row[j] = (p.pin_first != 0u && j == 0) ? 0ull : ((u64)(~ordered(sc)) << 32) | j;
    }
}

// Block-wide exclusive prefix sum of v (blockDim.x a multiple of 32, at most 1024; every thread
// calls it); `sh` holds 32 words of shared memory.
__device__ __forceinline__ u32 block_exclusive_scan(u32 v, u32* sh) {
    const u32 lane = threadIdx.x & 31u, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    u32 x = v;
    for (u32 o = 1; o < 32u; o <<= 1) {
        u32 y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    __syncthreads();
    if (lane == 31u) sh[w] = x;
    __syncthreads();
    if (w == 0) {
        u32 t = lane < nw ? sh[lane] : 0u;
        for (u32 o = 1; o < 32u; o <<= 1) {
            u32 y = __shfl_up_sync(0xffffffffu, t, o);
            if (lane >= o) t += y;
        }
        if (lane < nw) sh[lane] = t;
    }
    __syncthreads();
    return (w > 0 ? sh[w - 1] : 0u) + x - v;
}

// The k = min(k_pages, cand, sel_stride) smallest of a row's keys (keys[j], j < cand: score word
// << 32 | j; shared or global memory, only read), written in ascending page order. The result
// of sorting the keys ascending and taking the first k, without the sort: a radix select finds
// T, the k-th smallest score word, most significant byte first (four 256-bin histogram passes,
// warp-aggregated shared atomics); every key whose word is < T is taken, and of those == T the
// lowest-indexed `ties`. Thread t owns candidates [t * per, (t + 1) * per), so two block prefix
// sums (ties, then picks) give each pick its place in ascending order.
__device__ void select_row(PageSelectParams p, u32 r, u32 cand, u32 slot, const u64* keys, u32* selected,
                           u32* counts, u32 selected_len, u32 counts_len) {
    __shared__ u32 hist[256];
    __shared__ u32 found[2]; // T's bytes found so far; picks still needed among keys matching them
    __shared__ u32 sh[32];
    u32 k = p.k_pages < cand ? p.k_pages : cand;
    if (k > p.sel_stride) k = p.sel_stride;
    const u64 base = ((u64)slot * p.n_ret + r) * p.sel_stride;
    const u64 ci = (u64)slot * p.n_ret + r;
    if (base + p.sel_stride > selected_len || ci >= counts_len) return;
    const u32 t = threadIdx.x, bd = blockDim.x;
    if (t == 0) {
        found[0] = 0u;
        found[1] = k;
    }
    u32 mask = 0u;
    for (int shift = 24; shift >= 0 && k > 0u; shift -= 8) {
        for (u32 i = t; i < 256u; i += bd) hist[i] = 0u;
        __syncthreads();
        const u32 prefix = found[0];
        // Whole warps step together (j0 is warp-uniform) so the match covers every lane.
        for (u32 j0 = t & ~31u; j0 < cand; j0 += bd) {
            const u32 j = j0 + (t & 31u);
            const u32 w = j < cand ? (u32)(keys[j] >> 32) : 0u;
            const bool in = j < cand && (w & mask) == prefix;
            const u32 bin = in ? (w >> shift) & 255u : 256u;
            const u32 peers = __match_any_sync(0xffffffffu, bin);
            if (in && (t & 31u) == (u32)(__ffs(peers) - 1)) atomicAdd(&hist[bin], (u32)__popc(peers));
        }
        __syncthreads();
        if (t == 0) {
            u32 need = found[1], d = 0u;
            while (d < 255u && hist[d] < need) need -= hist[d++];
            found[0] = prefix | (d << shift);
            found[1] = need;
        }
        __syncthreads();
        mask |= 255u << shift;
    }
    __syncthreads();
    const u32 thr = found[0], ties = found[1];
    const u32 per = (cand + bd - 1u) / bd, j0 = min(t * per, cand), j1 = min(j0 + per, cand);
    u32 lt = 0u, eq = 0u;
    for (u32 j = j0; j < j1 && k > 0u; j++) {
        const u32 w = (u32)(keys[j] >> 32);
        lt += w < thr;
        eq += w == thr;
    }
    const u32 eq_before = block_exclusive_scan(eq, sh);
    const u32 take_eq = min(eq, ties - min(ties, eq_before));
    u32 at = block_exclusive_scan(lt + take_eq, sh);
    u32 eq_seen = 0u;
    for (u32 j = j0; j < j1 && k > 0u; j++) {
        const u64 key = keys[j];
        const u32 w = (u32)(key >> 32);
        bool pick = w < thr;
        if (w == thr) pick = eq_seen++ < take_eq;
        if (pick) selected[base + at++] = (u32)(key & 0xffffffffu);
    }
    if (t == 0) counts[ci] = k;
}

// The row's keys are copied to dynamic shared memory (np * 8 bytes) and selected from there.
extern "C" __global__ void page_select(PageSelectParams p, const u32* head_map, const u32* page_indptr,
                                       const u32* kv_len, const u32* seq_slot, const u32* select_mask, const u64* keys_in,
                                       u32* selected, u32* counts, u32 np, u32 page_table_len, u32 selected_len,
                                       u32 counts_len) {
    extern __shared__ u64 keys[];
    u32 kvh = blockIdx.x, s = blockIdx.y;
    u32 hm = head_map[kvh];
    if ((hm & STREAMING_BIT) || select_mask[s] == 0u) return;
    u32 cand = row_candidates(p, page_indptr, kv_len, s, np, page_table_len);
    const u64* row = keys_in + ((u64)s * p.n_kv_heads + kvh) * np;
    for (u32 i = threadIdx.x; i < np; i += blockDim.x) keys[i] = row[i];
    __syncthreads();
    select_row(p, hm, cand, seq_slot[s], keys, selected, counts, selected_len, counts_len);
}

// The same for rows too long for shared memory: selected from the scratch keys (global memory,
// L2-resident), so no length is refused.
extern "C" __global__ void page_select_global(PageSelectParams p, const u32* head_map, const u32* page_indptr,
                                              const u32* kv_len, const u32* seq_slot, const u32* select_mask, u64* keys_io,
                                              u32* selected, u32* counts, u32 np, u32 page_table_len,
                                              u32 selected_len, u32 counts_len) {
    u32 kvh = blockIdx.x, s = blockIdx.y;
    u32 hm = head_map[kvh];
    if ((hm & STREAMING_BIT) || select_mask[s] == 0u) return;
    u32 cand = row_candidates(p, page_indptr, kv_len, s, np, page_table_len);
    u64* row = keys_io + ((u64)s * p.n_kv_heads + kvh) * np;
    select_row(p, hm, cand, seq_slot[s], row, selected, counts, selected_len, counts_len);
}

// page_top_k: the top-k of a CSR score table (the contract: Backend::page_top_k). One block per
// (retrieval head r, row s) (grid (n_ret, num_seqs)); rows with select_mask[s] == 0 return. A
// row's scores f32 [(page_indptr[s] + j) * n_ret + r] become page_select's sort keys (inverted
// order-preserving bits << 32 | j, NaN as -inf, ~0 from the row's candidates (entries - 1) to np,
// a power of two the host takes from max_seq_pages), whose k smallest select_row picks:
// page_top_k in dynamic shared memory (np * 8 bytes), page_top_k_global in the scratch keys
// [num_seqs][n_ret][np].
__device__ __forceinline__ u32 top_k_row(const PageTopKParams& p, const float* scores, const u32* page_indptr,
                                         u32 s, u32 r, u64* keys, u32 np, u32 scores_len) {
    u32 a = page_indptr[s], e = page_indptr[s + 1];
    u32 cand = min(e > a ? e - a - 1 : 0u, np);
    for (u32 j = threadIdx.x; j < np; j += blockDim.x) {
        u64 key = ~0ull;
        if (j < cand) {
            u64 at = (u64)(a + j) * p.n_ret + r;
            float x = at < scores_len ? scores[at] : -LS_INF;
            if (x != x) x = -LS_INF;
            key = ((u64)(~ordered(x)) << 32) | j;
        }
        keys[j] = key;
    }
    __syncthreads();
    return cand;
}

__device__ __forceinline__ PageSelectParams top_k_select_params(const PageTopKParams& p) {
    PageSelectParams sp = {};
    sp.n_ret = p.n_ret;
    sp.k_pages = p.k_pages;
    sp.sel_stride = p.sel_stride;
    return sp;
}

extern "C" __global__ void page_top_k(PageTopKParams p, const float* scores, const u32* page_indptr,
                                      const u32* seq_slot, const u32* select_mask, u32* selected, u32* counts,
                                      u32 np, u32 scores_len, u32 selected_len, u32 counts_len) {
    extern __shared__ u64 keys[];
    u32 r = blockIdx.x, s = blockIdx.y;
    if (select_mask[s] == 0u) return;
    u32 cand = top_k_row(p, scores, page_indptr, s, r, keys, np, scores_len);
    select_row(top_k_select_params(p), r, cand, seq_slot[s], keys, selected, counts, selected_len, counts_len);
}

extern "C" __global__ void page_top_k_global(PageTopKParams p, const float* scores, const u32* page_indptr,
                                             const u32* seq_slot, const u32* select_mask, u64* keys_io,
                                             u32* selected, u32* counts, u32 np, u32 scores_len,
                                             u32 selected_len, u32 counts_len) {
    u32 r = blockIdx.x, s = blockIdx.y;
    if (select_mask[s] == 0u) return;
    u64* row = keys_io + ((u64)s * p.n_ret + r) * np;
    u32 cand = top_k_row(p, scores, page_indptr, s, r, row, np, scores_len);
    select_row(top_k_select_params(p), r, cand, seq_slot[s], row, selected, counts, selected_len, counts_len);
}
