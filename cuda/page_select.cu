// page_select: Quest page selection for decode. One block per (KV head, sequence) (grid
// (n_kv_heads, num_seqs)); blocks of streaming heads and of rows with select_mask[s] == 0 return.
// For retrieval head r (head_map) of sequence s, candidate j < n_pages - 1 (the newest page is
// always read, never selected) scores max over its logical pages l and the KV head's query heads
// g of sum_c max(q_c * max_c, q_c * min_c) (summary [page][n_ret][lpp][2][head_dim] f32). The
// k_pages best (ties to the lower index) go ascending to
// selected[(seq_slot[s] * n_ret + r) * sel_stride ..], their number to counts[seq_slot[s] * n_ret + r].
//
// Two kernels. page_select_score: grid (np / 8, n_kv_heads, num_seqs), one warp per candidate
// page, writes u64 keys (inverted order-preserving float bits << 32 | j; ~0 past the candidates)
// to keys [num_seqs][n_kv_heads][np] (np a power of two >= the candidates, chosen by the host
// from the page table's length). page_select: grid (n_kv_heads, num_seqs), sorts a row's keys
// ascending by a bitonic sort in dynamic shared memory (page_select_global: in place in the
// scratch keys, for rows longer than shared memory holds); the first k keys are the winners, put
// in ascending page order by counting ranks. np comes from the step's longest sequence
// (max_seq_pages), not the batch's whole page table. Lengths of selected/counts/page_table come
// as arguments: nothing is read or written outside them.

__device__ __forceinline__ u32 ordered(float f) {
    u32 b = __float_as_uint(f);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

#define PS_MAX_HD 256
extern "C" __global__ void page_select_score(PageSelectParams p, const float* q, const float* summary,
                                             const u32* head_map, const u32* page_indptr, const u32* page_table,
                                             const u32* select_mask, u64* keys, u32 np, u32 page_table_len) {
    __shared__ float qs[8 * PS_MAX_HD];
    u32 kvh = blockIdx.y, s = blockIdx.z;
    u32 hm = head_map[kvh];
    if ((hm & STREAMING_BIT) || select_mask[s] == 0u) return;
    u32 r = hm, hd = p.head_dim, group = p.n_heads / p.n_kv_heads, lpp = p.page_size / p.logical_page;
    u32 gq = min(group, 8u);
    for (u32 i = threadIdx.x; i < gq * hd; i += blockDim.x) qs[i] = q[((u64)s * p.n_heads + kvh * group) * hd + i];
    __syncthreads();
    u32 a = page_indptr[s], b = min(page_indptr[s + 1], page_table_len);
    u32 n_pages = b > a ? b - a : 0;
    u32 cand = min(n_pages > 0 ? n_pages - 1 : 0, np);
    u32 lane = threadIdx.x & 31, j = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (j >= np) return;
    u64* row = keys + ((u64)s * p.n_kv_heads + kvh) * np;
    if (j >= cand) { if (lane == 0) row[j] = ~0ull; return; }
    u32 page = page_table[a + j];
    float best = -LS_INF;  // NaN scores are skipped, as f32::max does in the reference
    if (page < p.num_pages) {
        for (u32 l = 0; l < lpp; l++) {
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
                    if (c < hd) { float qc = qg[c]; acc += fmaxf(qc * hi[i], qc * lo[i]); }
                }
                best = fmaxf(best, warp_sum(acc));
            }
        }
    }
    if (lane == 0) row[j] = ((u64)(~ordered(best)) << 32) | j;
}

// Sort one row's np keys ascending (bitonic, in place in `keys`: shared or global memory) and
// write the first k in ascending page order.
__device__ void select_row(PageSelectParams p, u32 r, u32 cand, u32 slot, u64* keys, u32* selected, u32* counts,
                           u32 np, u32 selected_len, u32 counts_len) {
    for (u32 size = 2; size <= np; size <<= 1) {
        for (u32 stride = size >> 1; stride > 0; stride >>= 1) {
            for (u32 i = threadIdx.x; i < np; i += blockDim.x) {
                u32 j = i ^ stride;
                if (j > i) {
                    bool up = (i & size) == 0;
                    u64 x = keys[i], y = keys[j];
                    if ((x > y) == up) { keys[i] = y; keys[j] = x; }
                }
            }
            __syncthreads();
        }
    }
    u32 k = p.k_pages < cand ? p.k_pages : cand;
    if (k > p.sel_stride) k = p.sel_stride;
    u64 base = ((u64)slot * p.n_ret + r) * p.sel_stride;
    u64 ci = (u64)slot * p.n_ret + r;
    if (base + p.sel_stride > selected_len || ci >= counts_len) return;
    for (u32 i = threadIdx.x; i < k; i += blockDim.x) {
        u32 mine = (u32)(keys[i] & 0xffffffffu), rank = 0;
        for (u32 j = 0; j < k; j++) rank += (u32)(keys[j] & 0xffffffffu) < mine;
        selected[base + rank] = mine;
    }
    if (threadIdx.x == 0) counts[ci] = k;
}

// The row's candidates: min(pages - 1, np) (the newest page is always read, never selected).
__device__ __forceinline__ u32 row_candidates(const u32* page_indptr, u32 s, u32 np, u32 page_table_len) {
    u32 a = page_indptr[s], b = min(page_indptr[s + 1], page_table_len);
    u32 n_pages = b > a ? b - a : 0;
    return min(n_pages > 0 ? n_pages - 1 : 0, np);
}

// The row's keys are copied to dynamic shared memory (np * 8 bytes) and sorted there.
extern "C" __global__ void page_select(PageSelectParams p, const u32* head_map, const u32* page_indptr,
                                       const u32* seq_slot, const u32* select_mask, const u64* keys_in,
                                       u32* selected, u32* counts, u32 np, u32 page_table_len, u32 selected_len,
                                       u32 counts_len) {
    extern __shared__ u64 keys[];
    u32 kvh = blockIdx.x, s = blockIdx.y;
    u32 hm = head_map[kvh];
    if ((hm & STREAMING_BIT) || select_mask[s] == 0u) return;
    u32 cand = row_candidates(page_indptr, s, np, page_table_len);
    const u64* row = keys_in + ((u64)s * p.n_kv_heads + kvh) * np;
    for (u32 i = threadIdx.x; i < np; i += blockDim.x) keys[i] = row[i];
    __syncthreads();
    select_row(p, hm, cand, seq_slot[s], keys, selected, counts, np, selected_len, counts_len);
}

// The same for rows too long for shared memory: sorted in place in the scratch keys (global
// memory, L2-resident), so no length is refused.
extern "C" __global__ void page_select_global(PageSelectParams p, const u32* head_map, const u32* page_indptr,
                                              const u32* seq_slot, const u32* select_mask, u64* keys_io,
                                              u32* selected, u32* counts, u32 np, u32 page_table_len,
                                              u32 selected_len, u32 counts_len) {
    u32 kvh = blockIdx.x, s = blockIdx.y;
    u32 hm = head_map[kvh];
    if ((hm & STREAMING_BIT) || select_mask[s] == 0u) return;
    u32 cand = row_candidates(page_indptr, s, np, page_table_len);
    u64* row = keys_io + ((u64)s * p.n_kv_heads + kvh) * np;
    select_row(p, hm, cand, seq_slot[s], row, selected, counts, np, selected_len, counts_len);
}
