// prefill_attention: causal attention of each sequence's new rows over its paged context, flash
// style (online softmax over key tiles staged in shared memory), both head kinds in one kernel:
// retrieval heads see keys wlo(pos)..=pos through the page table, streaming heads the Lambda mask
// (k < sink or pos - k < local, also clipped by the window) through their ring.
//
// Grid (tiles, n_heads): a tile is up to PF_TQ consecutive query rows of ONE sequence (q_indptr
// CSR; tiles are numbered sequence by sequence, surplus blocks exit). Block 128 threads: 4 per
// row, each owning the interleaved dims sub + 4 i (i < DPT, head_dim <= 4 DPT), so the four read
// consecutive shared words of a key and rows broadcast. Keys of the tile's range are staged PF_TK
// at a time as f32 (K and V, dynamic shared memory 2 * tk * head_dim * 4 bytes, tk = min(32, 4096 /
// head_dim)) and consumed 8 at a time per online-softmax update (exp2 domain). Rows that see no key
// write zeros. This scalar version serves f32 KV (the exact reference) and 8-bit KV (codes times
// their row's scale, staged as f32); 16-bit KV runs the tensor-core version at the end of this file
// (the scalar one on 16-bit KV was measured against it and removed: docs/benchmarks.md).
//
// Layouts: q/out [n_tokens][n_heads][head_dim] f32; pools [page][heads][page_size][head_dim] KT.

#define PF_TQ 32
#define PF_THREADS 128

// Finding the pool row of the key at position kp, in two phases so that a kernel can issue the
// table loads well before it needs the rows. key_page: the table entry of kp's page (NONE_U32
// past the sequence's page-table span [pt0, pt1) or the ring table; a streaming head's keys live
// in its ring) and kp's row in that page. key_row_offset: that row's element offset in the pool,
// NONE_U32 for no page. key_offset: both, for key kp of sequence s.
__device__ __forceinline__ u32 key_page(const AttentionParams& p, bool streaming, u32 s, u32 kp, u32 pt0, u32 pt1,
                                        const u32* page_table, const u32* ring_table, u32 ring_table_len, u32& row) {
    const u32 ps = p.page_size;
    if (streaming) {
        const u32 r = ring_index(kp, p.sink, p.ring_tokens), at = s * (p.ring_tokens / ps) + r / ps;
        row = r % ps;
        return at < ring_table_len ? ring_table[at] : NONE_U32;
    }
    const u32 at = pt0 + kp / ps;
    row = kp % ps;
    return at < pt1 ? page_table[at] : NONE_U32;
}
__device__ __forceinline__ u32 key_row_offset(const AttentionParams& p, bool streaming, u32 hi, u32 pg, u32 row) {
    const u32 n = streaming ? p.n_str : p.n_ret, np = streaming ? p.num_str_pages : p.num_pages;
    return pg < np ? ((pg * n + hi) * p.page_size + row) * p.head_dim : NONE_U32;
}
// The page-table span [pt[0], pt[1]) of sequence s, for key_page.
__device__ __forceinline__ void table_span(const u32* page_indptr, u32 s, u32 page_table_len, u32* pt) {
    pt[0] = page_indptr[s];
    pt[1] = min(page_indptr[s + 1], page_table_len);
}
__device__ __forceinline__ u32 key_offset(const AttentionParams& p, bool streaming, u32 hi, u32 s, u32 kp,
                                          const u32* page_indptr, const u32* page_table, const u32* ring_table,
                                          u32 page_table_len, u32 ring_table_len) {
    u32 pt[2] = {0u, 0u}, row;
    if (!streaming) table_span(page_indptr, s, page_table_len, pt);
    const u32 pg = key_page(p, streaming, s, kp, pt[0], pt[1], page_table, ring_table, ring_table_len, row);
    return key_row_offset(p, streaming, hi, pg, row);
}

// Most list pages of a sparse block (page 0 + sel_stride entries; the host bounds sel_stride).
#define PM_MAX_LIST 1024

// Block-uniform geometry of a tile of query rows.
struct PmTile {
    u32 s, r0, nr;       // sequence, first row (token index), rows (<= BQ)
    u32 p_lo, p_hi;      // positions of the first and the last row
    bool streaming;
    u32 hi;              // head index within its kind's pool
    u32 lo_a, hi_a, lo_b, hi_b;  // visible key ranges [lo_a, hi_a) and [lo_b, hi_b)
    // Block-sparse (retrieval head of a sparse block): the tail's first page and position (klo,
    // below which range keys are masked; 0 otherwise), the block's selected entries (count cnt at
    // blk_sel[sel_off]), and after compaction nv = the list pages' keys (read as virtual keys
    // 0..nv, nvt tiles of them, before the ranges).
    bool sparse;
    u32 tpage, klo, cnt, sel_off, nv;
};

// A sparse block's list pages in lst (warp 0): page 0 when the tail starts past it, then each
// selected entry j with j + 1 < tpage as page j + 1, in order; sets t.nv.
__device__ __forceinline__ void pm_block_list(const AttentionParams& p, const u32* blk_sel, PmTile& t, u32* lst) {
    const u32 lane = threadIdx.x % 32;
    u32 n = t.tpage > 0 ? 1u : 0u;
    if (lane == 0 && n) lst[0] = 0;
    for (u32 i0 = 0; i0 < t.cnt; i0 += 32) {
        const u32 i = i0 + lane;
        const u32 j = i < t.cnt ? blk_sel[t.sel_off + i] : NONE_U32;
        const bool ok = j != NONE_U32 && j + 1 < t.tpage;
        const u32 bal = __ballot_sync(0xffffffffu, ok);
        if (ok) lst[n + __popc(bal & ((1u << lane) - 1u))] = j + 1;
        n += __popc(bal);
    }
    if (lane == 0) t.nv = n * p.page_size;
}

// Long (about 120 lines) on purpose: the kernel's phases (query staging, key tiles, online softmax,
// output) share its registers and shared memory; split into device functions they would pass all of
// that state around, and the body reads in the order it runs.
template <typename KT, int DPT>
__device__ void prefill_impl(AttentionParams p, const float* q, const u32* q_indptr, const KT* k, const KT* v,
                             const KT* sk, const KT* sv, const u32* head_map, const u32* page_indptr,
                             const u32* page_table, const u32* kv_len, const u32* ring_table, void* out,
                             u32 page_table_len, u32 ring_table_len, const u32* blk_sel, const u32* blk_cnt,
                             u32 bsl, u32 bcl, u32 out16) {
    extern __shared__ float smem[];
    __shared__ u32 lst[PM_MAX_LIST];  // a sparse block's list pages (pm_block_list)
    __shared__ PmTile bt;             // its block geometry (sparse, tpage, klo, cnt, sel_off, nv)
    const u32 hd = p.head_dim, nh = p.n_heads, h = blockIdx.y;
    const u32 tk = min(32u, 4096u / hd);
    float* ks = smem;
    float* vs = smem + tk * hd;
    // Which sequence and rows this block takes.
    u32 b = blockIdx.x, s = 0, r0 = 0, r1 = 0, qb = 0;
    bool found = false;
    for (; s < p.num_seqs; s++) {
        u32 a = q_indptr[s], e = q_indptr[s + 1];
        u32 nt = e > a ? (e - a + PF_TQ - 1) / PF_TQ : 0;
        if (b < nt) {
            r0 = a + b * PF_TQ; r1 = min(r0 + PF_TQ, e); found = true;
            qb += (r0 - a) / PREFILL_BLOCK_ROWS;
            break;
        }
        b -= nt;
        qb += e > a ? (e - a + PREFILL_BLOCK_ROWS - 1) / PREFILL_BLOCK_ROWS : 0;
    }
    if (!found || r1 > p.n_tokens) return;
    const u32 len = kv_len[s], rows_s = q_indptr[s + 1] - q_indptr[s];
    if (rows_s > len) return;
    const u32 first = len - rows_s;  // position of the sequence's first new row
    const u32 group = nh / p.n_kv_heads, kvh = h / group;
    const u32 hm = head_map[kvh];
    const bool streaming = (hm & STREAMING_BIT) != 0u;
    const u32 hi = hm & ~STREAMING_BIT;
    const KT* kp_ = streaming ? sk : k;
    const KT* vp_ = streaming ? sv : v;
    // Block-sparse: a retrieval head of a sparse block reads its list pages (virtual keys 0..nv)
    // and the tail from klo (the same geometry as the tensor-core kernel's).
    const u32 ci = qb * p.n_ret + hi;
    const u32 c = !streaming && ci < bcl ? blk_cnt[ci] : BLOCK_DENSE;
    if (threadIdx.x == 0) {
        bt.sparse = c != BLOCK_DENSE;
        const u32 bfirst = first + (r0 - q_indptr[s]) / PREFILL_BLOCK_ROWS * PREFILL_BLOCK_ROWS;
        bt.tpage = bt.sparse ? block_tail_page(bfirst, p.page_size) : 0u;
        bt.klo = bt.tpage * p.page_size;
        bt.sel_off = ci * p.sel_stride;
        bt.cnt = bt.sparse && bt.sel_off < bsl ? min(min(c, p.sel_stride), bsl - bt.sel_off) : 0u;
        bt.nv = 0;
    }
    __syncthreads();
    if (bt.sparse && threadIdx.x < 32) pm_block_list(p, blk_sel, bt, lst);
    __syncthreads();
    const u32 klo = bt.klo, nv = bt.nv;

    const u32 rloc = threadIdx.x / 4, sub = threadIdx.x % 4;
    const u32 row = r0 + rloc;
    const bool active = row < r1;
    const u32 pos = first + ((active ? row : r0) - q_indptr[s]);
    const u32 wlo = window_lo(pos, p.window);
    const float qscale = p.scale * 1.4426950408889634f;
    float qr[DPT], acc[DPT];
#pragma unroll
    for (int i = 0; i < DPT; i++) {
        u32 d = sub + 4 * i;
        qr[i] = (active && d < hd) ? q[((u64)row * nh + h) * hd + d] * qscale : 0.0f;
        acc[i] = 0.0f;
    }
    float m = -LS_INF, l = 0.0f;

    // Key ranges of the tile: [lo_a, hi_a) then [lo_b, hi_b).
    const u32 p_lo = first + (r0 - q_indptr[s]), p_hi = first + (r1 - 1 - q_indptr[s]);
    const u32 w0 = window_lo(p_lo, p.window);
    u32 lo_a = max(w0, klo), hi_a = p_hi + 1, lo_b = 0, hi_b = 0;
    if (streaming) {
        hi_a = max(w0, min(p.sink, p_hi + 1));
        lo_b = max(max(p.sink, w0), p_lo + 1 > p.local ? p_lo + 1 - p.local : 0u);
        hi_b = p_hi + 1;
        if (lo_b <= hi_a) { hi_a = max(hi_a, hi_b); lo_b = hi_b = 0; }
    }
    // Range -1: the list pages' virtual keys; 0 and 1: [lo_a, hi_a) and [lo_b, hi_b).
    for (int range = -1; range < 2; range++) {
        const bool virt = range < 0;
        u32 lo = range <= 0 ? (virt ? 0u : lo_a) : lo_b, hi_end = virt ? nv : range == 0 ? hi_a : hi_b;
        for (u32 t0 = lo; t0 < hi_end; t0 += tk) {
            u32 nk = min(tk, hi_end - t0);
            __syncthreads();
            for (u32 i = threadIdx.x; i < tk * hd; i += PF_THREADS) {
                u32 j = i / hd, d = i % hd;
                float kx = 0.0f, vx = 0.0f;
                if (j < nk) {
                    u32 kk = t0 + j;
                    if (virt) kk = lst[kk / p.page_size] * p.page_size + kk % p.page_size;
                    u32 off = key_offset(p, streaming, hi, s, kk, page_indptr, page_table, ring_table,
                                         page_table_len, ring_table_len);
                    if (off != NONE_U32) {
                        kx = kv_elem(kp_, off, d, p.page_size, hd);
                        vx = kv_elem(vp_, off, d, p.page_size, hd);
                    }
                }
                ks[i] = kx;
                vs[i] = vx;
            }
            __syncthreads();
            for (u32 j0 = 0; j0 < nk; j0 += 8) {
                float sc[8];
                float mx = m;
#pragma unroll
                for (int u = 0; u < 8; u++) {
                    u32 j = j0 + u, kp = t0 + j;
                    float d = 0.0f;
                    if (j < nk) {
#pragma unroll
                        for (int i = 0; i < DPT; i++) {
                            u32 dd = sub + 4 * i;
                            if (dd < hd) d += qr[i] * ks[j * hd + dd];
                        }
                    }
                    d += __shfl_xor_sync(0xffffffffu, d, 1);
                    d += __shfl_xor_sync(0xffffffffu, d, 2);
                    bool vis = active && j < nk &&
                               (virt || (kp <= pos && kp >= max(wlo, klo) &&
                                         (!streaming || kp < p.sink || pos - kp < p.local)));
                    sc[u] = vis ? d : -LS_INF;
                    mx = fmaxf(mx, sc[u]);
                }
                if (mx == -LS_INF) continue;
                float corr = exp2f(m - mx);
                l *= corr;
#pragma unroll
                for (int i = 0; i < DPT; i++) acc[i] *= corr;
#pragma unroll
                for (int u = 0; u < 8; u++) {
                    if (sc[u] == -LS_INF) continue;
                    float pr = exp2f(sc[u] - mx);
                    l += pr;
                    u32 j = j0 + u;
#pragma unroll
                    for (int i = 0; i < DPT; i++) {
                        u32 dd = sub + 4 * i;
                        if (dd < hd) acc[i] += pr * vs[j * hd + dd];
                    }
                }
                m = mx;
            }
        }
    }
    if (!active) return;
#pragma unroll
    for (int i = 0; i < DPT; i++) {
        u32 d = sub + 4 * i;
        if (d < hd) attn_store1(out, ((u64)row * nh + h) * hd + d, l > 0.0f ? acc[i] / l : 0.0f, out16);
    }
}

#define PF(name, KT, DPT) \
    extern "C" __global__ void __launch_bounds__(PF_THREADS) name( \
        AttentionParams p, const float* q, const u32* q_indptr, const KT* k, const KT* v, const KT* sk, const KT* sv, \
        const u32* head_map, const u32* page_indptr, const u32* page_table, const u32* kv_len, const u32* ring_table, \
        void* out, const u32* blk_sel, const u32* blk_cnt, u32 ptl, u32 rtl, u32 bsl, u32 bcl, u32 out16) { \
        prefill_impl<KT, DPT>(p, q, q_indptr, k, v, sk, sv, head_map, page_indptr, page_table, kv_len, ring_table, out, \
                              ptl, rtl, blk_sel, blk_cnt, bsl, bcl, out16); \
    }
PF(prefill_attention_f32_d4, float, 4)
PF(prefill_attention_f32_d8, float, 8)
PF(prefill_attention_f32_d16, float, 16)
PF(prefill_attention_f32_d32, float, 32)
PF(prefill_attention_f32_d64, float, 64)
PF(prefill_attention_int8_d4, i8kv_t, 4)
PF(prefill_attention_int8_d8, i8kv_t, 8)
PF(prefill_attention_int8_d16, i8kv_t, 16)
PF(prefill_attention_int8_d32, i8kv_t, 32)
PF(prefill_attention_int8_d64, i8kv_t, 64)
PF(prefill_attention_fp8_d4, e4m3_t, 4)
PF(prefill_attention_fp8_d8, e4m3_t, 8)
PF(prefill_attention_fp8_d16, e4m3_t, 16)
PF(prefill_attention_fp8_d32, e4m3_t, 32)
PF(prefill_attention_fp8_d64, e4m3_t, 64)

// ---- the tensor-core version ---------------------------------------------------------------
//
// (On sm_90 at head_dim 128, 16-bit KV runs the wgmma version instead: prefill_attention_wgmma.cu,
// appended to this file as one module, reusing PmTile, pm_tile, pm_block_list and key_offset.)
//
// `prefill_attention_mma_<kv>_d<D>[_pad]` for 16-bit KV: the same contract as above on mma.sync tiles,
// laid out as FlashAttention-2 does. A block takes BQ query rows of one sequence and one head (BQ =
// 128 for D <= 128, 64 for D = 256), 4 warps of MT = BQ / 64 m16 tiles each (32 or 16 rows): a warp
// that owns two m-tiles uses every K and V fragment it loads twice, which is what keeps the
// shared-memory pipe below the tensor pipe. Key tiles of BK = 64 keys (32 when D = 256) are ALIGNED
// to multiples of BK in key position and staged with 16-byte cp.async copies into two
// shared-memory stages (the next tile loads while this one is consumed). Shared memory (16-bit
// elements, rows padded to D + 8 so ldmatrix is bank-conflict free): Q [BQ][D+8] (f32 activations
// rounded to the KV type), K and V [2][BK][D+8]. Per warp and key tile: S = Q K^T by m16n8k16 mma
// (A = Q by ldmatrix, or registers when they fit; B = K rows by ldmatrix), online softmax in
// registers (exp2 domain, each thread owns two rows per m-tile and reduces across its quad; the
// row max is taken on raw scores, so the scale must be positive), P rounded to the KV type and
// reused as the A operand of O += P V (B = V through ldmatrix.trans); f32 accumulation throughout.
//
// Paged gather: each key row's pool offset (page table or streaming ring lookup) is computed once
// per tile by one lane of the warp that copies that row and broadcast by shuffle to the lanes that
// copy its 16-byte chunks.
//
// Head dims: D is 64, 128 or 256; a head_dim below D (any multiple of 8) is zero-padded in shared
// memory, and k-steps / output tiles past head_dim are skipped (FULL: head_dim == D, compiled
// without those checks).
//
// Lambda block sparsity: a block visits only the key tiles that intersect its visible set: for
// retrieval heads [wlo(first row), last row]; for streaming heads the sink [0, sink) and the band
// [first row + 1 - local, last row] (each clipped by the window), as two tile ranges merged when
// they touch. Keys outside those ranges are zero-filled, never read, so garbage past the written
// positions cannot reach P V. A tile visible to every row of the block (at or below the first
// row, at or above the last row's window start, and for streaming heads inside the sink or within
// local of the last row) skips the per-element mask; the others (diagonal, window and band edges)
// mask k <= pos, k >= wlo(pos) and (k < sink or pos - k < local) element by element.

#define PM_THREADS 128

// Tile shape for head dim D (host twin: ops_attention::prefill_mma_kernel).
template <int D> struct PmShape {
    static constexpr u32 MT = D <= 128 ? 2 : 1;    // m16 tiles per warp
    static constexpr u32 BQ = 64 * MT;             // query rows per block (4 warps)
    static constexpr u32 BK = D <= 128 ? 64 : 32;  // keys per tile
    static constexpr u32 LD = D + 8;               // shared row stride (elements)
};

// The mma operand type for a KV storage type: itself for 16-bit KV, f16 for 8-bit codes (exact).
template <typename KT> struct PmType { typedef KT T; };
template <> struct PmType<i8kv_t> { typedef f16_t T; };
template <> struct PmType<e4m3_t> { typedef f16_t T; };

// 2^x by the MUFU unit, subnormal results flushed to zero (they are below any weight P V keeps).
__device__ __forceinline__ float pm_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// Four 8x8 16-bit matrices: thread l gives the row address of matrix l / 8.
__device__ __forceinline__ void pm_ldsm_x4(u32* r, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
// The same, transposed.
__device__ __forceinline__ void pm_ldsm_x4_t(u32* r, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}


// Which tile blockIdx.y is (the last tiles, which see the most keys, first); false when surplus.
template <u32 BQ>
__device__ __forceinline__ bool pm_tile(const AttentionParams& p, const u32* q_indptr, const u32* kv_len,
                                        const u32* head_map, const u32* blk_cnt, u32 bsl, u32 bcl, PmTile& t) {
    static_assert(PREFILL_BLOCK_ROWS % BQ == 0, "a tile lies inside one prefill block");
    u32 total = 0;
    for (u32 s = 0; s < p.num_seqs; s++) {
        u32 a = q_indptr[s], e = q_indptr[s + 1];
        total += e > a ? (e - a + BQ - 1) / BQ : 0;
    }
    if (blockIdx.y >= total) return false;
    u32 b = total - 1 - blockIdx.y, qb = 0;
    bool found = false;
    for (t.s = 0; t.s < p.num_seqs; t.s++) {
        u32 a = q_indptr[t.s], e = q_indptr[t.s + 1];
        u32 nt = e > a ? (e - a + BQ - 1) / BQ : 0;
        if (b < nt) {
            t.r0 = a + b * BQ; t.nr = min(BQ, e - t.r0); found = true;
            qb += (t.r0 - a) / PREFILL_BLOCK_ROWS;
            break;
        }
        b -= nt;
        qb += e > a ? (e - a + PREFILL_BLOCK_ROWS - 1) / PREFILL_BLOCK_ROWS : 0;
    }
    if (!found || t.r0 + t.nr > p.n_tokens) return false;
    const u32 len = kv_len[t.s], rows_s = q_indptr[t.s + 1] - q_indptr[t.s];
    if (rows_s > len) return false;
    t.p_lo = len - rows_s + (t.r0 - q_indptr[t.s]);
    t.p_hi = t.p_lo + t.nr - 1;
    const u32 hm = head_map[blockIdx.x / (p.n_heads / p.n_kv_heads)];
    t.streaming = (hm & STREAMING_BIT) != 0u;
    t.hi = hm & ~STREAMING_BIT;
    const u32 w0 = window_lo(t.p_lo, p.window);
    t.lo_a = w0; t.hi_a = t.p_hi + 1; t.lo_b = t.hi_b = 0;
    if (t.streaming) {
        t.hi_a = max(w0, min(p.sink, t.p_hi + 1));
        t.lo_b = max(max(p.sink, w0), t.p_lo + 1 > p.local ? t.p_lo + 1 - p.local : 0u);
        t.hi_b = t.p_hi + 1;
        if (t.lo_b <= t.hi_a) { t.hi_a = max(t.hi_a, t.hi_b); t.lo_b = t.hi_b = 0; }
    }
    t.sparse = false;
    t.tpage = t.klo = t.cnt = t.sel_off = t.nv = 0;
    const u32 ci = qb * p.n_ret + t.hi;
    if (!t.streaming && ci < bcl) {
        const u32 c = blk_cnt[ci];
        if (c != BLOCK_DENSE) {
            // The block's first position: the tile's, less the rows of earlier tiles of the block.
            const u32 first = t.p_lo - (t.r0 - q_indptr[t.s]) % PREFILL_BLOCK_ROWS;
            t.sparse = true;
            t.tpage = block_tail_page(first, p.page_size);
            t.klo = t.tpage * p.page_size;
            t.sel_off = ci * p.sel_stride;
            t.cnt = t.sel_off < bsl ? min(min(c, p.sel_stride), bsl - t.sel_off) : 0u;
            t.lo_a = t.klo;
        }
    }
    return true;
}

// The key tiles (of BK keys) a tile of query rows visits, in order: a sparse block's list pages
// first, as nvt tiles of virtual keys 0..nv, then the visible ranges [lo_a, hi_a) and [lo_b, hi_b)
// as tiles [ta0, ta0 + na) and [tb0, ...), merged when they touch; n tiles in all.
struct PmKeyTiles {
    u32 nvt, ta0, na, tb0, n, bk;
    // The first key (position, or virtual key for the list tiles) of tile ti.
    __device__ __forceinline__ u32 k0(u32 ti) const {
        return ti < nvt ? ti * bk : (ti - nvt < na ? ta0 + (ti - nvt) : tb0 + (ti - nvt - na)) * bk;
    }
};
__device__ __forceinline__ PmKeyTiles pm_key_tiles(const PmTile& t, u32 bk) {
    u32 ta0 = t.lo_a / bk, ta1 = t.hi_a > t.lo_a ? (t.hi_a + bk - 1) / bk : ta0;
    u32 tb0 = t.lo_b / bk, tb1 = t.hi_b > t.lo_b ? (t.hi_b + bk - 1) / bk : tb0;
    if (tb1 > tb0 && ta1 > ta0 && tb0 < ta1) { ta1 = max(ta1, tb1); tb1 = tb0; }
    if (ta1 <= ta0) { ta0 = tb0; ta1 = tb1; tb1 = tb0; }
    const u32 nvt = (t.nv + bk - 1) / bk;
    return PmKeyTiles{nvt, ta0, ta1 - ta0, tb0, nvt + (ta1 - ta0) + (tb1 - tb0), bk};
}

// key_page for key j of tile ti: NONE_U32 outside the tile's visible ranges; a list tile's key
// (retrieval heads only) is its list page's, lst as pm_block_list wrote it. pt0, pt1: the
// sequence's page-table span. pm_key_at: the key's pool element offset (key_row_offset).
__device__ __forceinline__ u32 pm_key_page(const AttentionParams& p, const PmTile& t, const PmKeyTiles& kt,
                                           const u32* lst, u32 ti, u32 j, u32 pt0, u32 pt1, const u32* page_table,
                                           const u32* ring_table, u32 ring_table_len, u32& row) {
    const u32 ps = p.page_size, kk = kt.k0(ti) + j;
    u32 kp = kk;
    row = 0;
    if (ti < kt.nvt) {
        if (kk >= t.nv) return NONE_U32;
        kp = lst[kk / ps] * ps + kk % ps;
    } else if (!((kk >= t.lo_a && kk < t.hi_a) || (kk >= t.lo_b && kk < t.hi_b))) {
        return NONE_U32;
    }
    return key_page(p, t.streaming, t.s, kp, pt0, pt1, page_table, ring_table, ring_table_len, row);
}
// The mask of a boundary key tile on one thread's accumulator fragment (mma m16n8 layout: rows
// ps0 and ps0 + 8, element 4 j + 2 r + b at key k0 + 2 tq + 8 j + b, j < NT): keys outside the
// row's visible range, or in a streaming head's gap [sink, ps - local], become -inf. Selects,
// not branches: the caller branches once per tile (a conditional store per element compiles to a
// branch per element, on every tile). List tiles (virt): keys before nv are visible (nv > 0).
template <u32 NT>
__device__ __forceinline__ void pm_mask(const AttentionParams& p, const PmTile& t, bool virt, u32 k0, u32 tq, u32 ps0,
                                        float* s) {
#pragma unroll
    for (u32 r = 0; r < 2; r++) {
        // As columns c = 8 j + b of this thread's elements: visible [lo, hi], less the gap [g0, g1].
        const u32 ps = ps0 + 8 * r, c0 = k0 + 2 * tq;
        const int lo = (int)(virt ? 0u : max(window_lo(ps, p.window), t.klo)) - (int)c0;
        const int hi = (int)(virt ? t.nv - 1 : ps) - (int)c0;
        const bool gap = !virt && t.streaming && ps >= p.local;
        const int g0 = gap ? (int)p.sink - (int)c0 : 1 << 30, g1 = (int)(ps - p.local) - (int)c0;
#pragma unroll
        for (int j = 0; j < (int)NT; j++) {
#pragma unroll
            for (int b = 0; b < 2; b++) {
                const int c = 8 * j + b;
                const bool vis = c >= lo && c <= hi && !(c >= g0 && c <= g1);
                s[4 * j + 2 * r + b] = vis ? s[4 * j + 2 * r + b] : -LS_INF;
            }
        }
    }
}

__device__ __forceinline__ u32 pm_key_at(const AttentionParams& p, const PmTile& t, const PmKeyTiles& kt,
                                         const u32* lst, u32 ti, u32 j, u32 pt0, u32 pt1, const u32* page_table,
                                         const u32* ring_table, u32 ring_table_len) {
    u32 row;
    const u32 pg = pm_key_page(p, t, kt, lst, ti, j, pt0, pt1, page_table, ring_table, ring_table_len, row);
    return key_row_offset(p, t.streaming, t.hi, pg, row);
}

// Long (about 220 lines) on purpose: the kernel's phases (Q fragments, cp.async K/V stages, mma
// scores, online softmax, P.V, output) share its registers and shared memory; split into device
// functions they would pass all of that state around, and the body reads in the order it runs.
template <typename KT, int D, bool FULL>
__device__ void prefill_mma_impl(AttentionParams p, const float* q, const u32* q_indptr, const KT* k, const KT* v,
                                 const KT* sk, const KT* sv, const u32* head_map, const u32* page_indptr,
                                 const u32* page_table, const u32* kv_len, const u32* ring_table, void* out,
                                 u32 page_table_len, u32 ring_table_len, const u32* blk_sel, const u32* blk_cnt,
                                 u32 bsl, u32 bcl, u32 out16) {
    using S = PmShape<D>;
    constexpr u32 MT = S::MT, BQ = S::BQ, BK = S::BK, LD = S::LD;
    constexpr u32 NT = BK / 8;                     // n-tiles of S per m-tile
    constexpr u32 ND = D / 8;                      // n-tiles of O per m-tile
    constexpr u32 CH = D / 8;                      // 16-byte chunks per row
    constexpr u32 WR = 32 / CH;                    // rows a warp copies per pass
    constexpr u32 RP = PM_THREADS / CH;            // rows the block copies per pass
    constexpr u32 NP = BK * CH / PM_THREADS;       // passes per tile
    constexpr bool QREG = MT * (D / 16) * 4 <= 32;  // Q fragments kept in registers
    static_assert(WR * NP <= 32, "a warp's rows of a tile must fit its lanes");
    // 8-bit KV: 16-byte chunks of codes per row, and the copy geometry for them.
    constexpr bool KV8 = is_kv8<KT>::value;
    constexpr u32 C8 = D / 16, W8 = 32 / C8, R8 = PM_THREADS / C8, N8 = BK * C8 / PM_THREADS;
    static_assert(!KV8 || (FULL && W8 * N8 <= 32), "8-bit tiles: head_dim == D, rows fit the lanes");
    typedef typename PmType<KT>::T CT;  // the mma operand type
    constexpr u32 NS = KV8 ? 1 : 2;     // stages of 16-bit K/V tiles
    extern __shared__ __align__(16) unsigned char pm_smem[];
    CT* qs = reinterpret_cast<CT*>(pm_smem);
    CT* ks = qs + BQ * LD;       // [NS][BK][LD]
    CT* vs = ks + NS * BK * LD;  // [NS][BK][LD]
    // 8-bit only: raw codes [2 stages][K, V][BK][D] and row scales [2][K, V][BK] (times code_scale).
    unsigned char* raw = reinterpret_cast<unsigned char*>(vs + NS * BK * LD);
    float* scl = reinterpret_cast<float*>(raw + (KV8 ? 4 * BK * D : 0));

    // The tile's geometry lives in shared memory (block-uniform, read where used) so it does not
    // hold registers through the key loop.
    __shared__ PmTile t;
    __shared__ bool live;
    __shared__ u32 lst[PM_MAX_LIST];  // a sparse block's list pages (pm_block_list)
    if (threadIdx.x == 0) live = pm_tile<BQ>(p, q_indptr, kv_len, head_map, blk_cnt, bsl, bcl, t);
    __syncthreads();
    if (!live) return;
    __shared__ u32 pt[2];  // the sequence's page-table span [pt[0], pt[1])
    if (t.sparse && threadIdx.x < 32) pm_block_list(p, blk_sel, t, lst);
    if (threadIdx.x == 0) table_span(page_indptr, t.s, page_table_len, pt);
    __syncthreads();
    const u32 hd = FULL ? D : p.head_dim, nh = p.n_heads, h = blockIdx.x;
    const u32 tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
    const KT* kpool = t.streaming ? sk : k;
    const KT* vpool = t.streaming ? sv : v;

    const PmKeyTiles tiles = pm_key_tiles(t, BK);
    const u32 n_tiles = tiles.n;

    // Q rows, rounded to KT; rows past the tile and dims past head_dim are zero.
    for (u32 i = tid; i < BQ * (D / 4); i += PM_THREADS) {
        u32 r = i / (D / 4), d = 4 * (i % (D / 4));
        float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r < t.nr && (FULL || d < hd)) x = *reinterpret_cast<const float4*>(q + ((u64)(t.r0 + r) * nh + h) * hd + d);
        *reinterpret_cast<uint2*>(qs + r * LD + d) = make_uint2(mma_pack<CT>(x.x, x.y), mma_pack<CT>(x.z, x.w));
    }

    auto key_at = [&](u32 ti, u32 j) {
        return pm_key_at(p, t, tiles, lst, ti, j, pt[0], pt[1], page_table, ring_table, ring_table_len);
    };

    // 8-bit KV: stage the codes (16-byte cp.async) and the row scales (4-byte cp.async) of key
    // tile ti into raw stage st; lane l < W8 * N8 of each warp looks up its row
    // l % W8 + R8 * (l / W8) (+ warp * W8) and passes the code offset on by shuffle.
    auto stage8 = [&](u32 st, u32 ti) {
        unsigned char* kr8 = raw + st * 2 * BK * D;
        float* ss = scl + st * 2 * BK;
        u32 lo = NONE_U32, hi32 = 0u;
        if (lane < W8 * N8) {
            const u32 j = warp * W8 + lane % W8 + R8 * (lane / W8);
            const u32 el = key_at(ti, j);
            if (el != NONE_U32) {
                const u32 row = el / D, blk = row / p.page_size, r = row - blk * p.page_size;
                const u64 code = kv8_row_code_off(blk, r, p.page_size, D), sc = kv8_row_scale_off(blk, r, p.page_size, D);
                const unsigned char* kb = reinterpret_cast<const unsigned char*>(kpool);
                const unsigned char* vb = reinterpret_cast<const unsigned char*>(vpool);
                cp_async4(ss + j, kb + sc);
                cp_async4(ss + BK + j, vb + sc);
                lo = (u32)code;
                hi32 = (u32)(code >> 32);
            } else {
                ss[j] = 0.0f;
                ss[BK + j] = 0.0f;
            }
        }
        const u32 c = 16 * (lane % C8);
#pragma unroll
        for (u32 n = 0; n < N8; n++) {
            const u32 from = lane / C8 + W8 * n;
            const u32 olo = __shfl_sync(0xffffffffu, lo, from), ohi = __shfl_sync(0xffffffffu, hi32, from);
            const u32 j = warp * W8 + lane / C8 + R8 * n;
            unsigned char* kd = kr8 + j * D + c;
            if (olo != NONE_U32 || ohi != 0u) {
                const u64 code = ((u64)ohi << 32) | olo;
                cp_async16(kd, reinterpret_cast<const unsigned char*>(kpool) + code + c);
                cp_async16(kd + BK * D, reinterpret_cast<const unsigned char*>(vpool) + code + c);
            } else {
                *reinterpret_cast<uint4*>(kd) = make_uint4(0, 0, 0, 0);
                *reinterpret_cast<uint4*>(kd + BK * D) = make_uint4(0, 0, 0, 0);
            }
        }
        cp_async_commit();
    };
    // 8-bit KV: the codes of raw stage st as exact f16 values in the K/V tiles (16 codes an item).
    auto convert8 = [&](u32 st) {
        if constexpr (KV8) {
            const unsigned char* src = raw + st * 2 * BK * D;
            for (u32 i = tid; i < 2 * BK * C8; i += PM_THREADS) {
                const u32 kv = i / (BK * C8), j = (i / C8) % BK, c = 16 * (i % C8);
                const uint4 w = *reinterpret_cast<const uint4*>(src + kv * BK * D + j * D + c);
                uint4 a, b;
                codes_f16(w.x, a.x, a.y, KT{});
                codes_f16(w.y, a.z, a.w, KT{});
                codes_f16(w.z, b.x, b.y, KT{});
                codes_f16(w.w, b.z, b.w, KT{});
                CT* dst = (kv ? vs : ks) + j * LD + c;
                *reinterpret_cast<uint4*>(dst) = a;
                *reinterpret_cast<uint4*>(dst + 8) = b;
            }
        }
    };

    // Stage key tile ti: lane l < WR * NP of each warp looks up the pool offset of the warp's row
    // l % WR + RP * (l / WR) (+ warp * WR); pass n's lanes take it by shuffle.
    auto stage = [&](u32 st, u32 ti) {
        if constexpr (KV8) {
            stage8(st, ti);
        } else {
            CT* kd = ks + st * BK * LD;
            CT* vd = vs + st * BK * LD;
            u32 mine = NONE_U32;
            if (lane < WR * NP) mine = key_at(ti, warp * WR + lane % WR + RP * (lane / WR));
            const u32 d = 8 * (lane % CH);
#pragma unroll
            for (u32 n = 0; n < NP; n++) {
                const u32 off = __shfl_sync(0xffffffffu, mine, lane / CH + WR * n);
                const u32 j = warp * WR + lane / CH + RP * n;
                if (off != NONE_U32 && (FULL || d < hd)) {
                    cp_async16(kd + j * LD + d, kpool + off + d);
                    cp_async16(vd + j * LD + d, vpool + off + d);
                } else {
                    *reinterpret_cast<uint4*>(kd + j * LD + d) = make_uint4(0, 0, 0, 0);
                    *reinterpret_cast<uint4*>(vd + j * LD + d) = make_uint4(0, 0, 0, 0);
                }
            }
            cp_async_commit();
        }
    };
    if (n_tiles > 0) stage(0, 0);

    // 8-bit KV: S or P fragments times their key's row scale (times code_scale), from `rs` [BK].
    auto mul_keys = [&](float (&x)[MT][NT][4], const float* rs) {
#pragma unroll
        for (u32 j = 0; j < NT; j++) {
            const float2 f = *reinterpret_cast<const float2*>(rs + j * 8 + 2 * tq);
            const float fx = f.x * code_scale<KT>(), fy = f.y * code_scale<KT>();
#pragma unroll
            for (u32 mt = 0; mt < MT; mt++) {
                x[mt][j][0] *= fx;
                x[mt][j][1] *= fy;
                x[mt][j][2] *= fx;
                x[mt][j][3] *= fy;
            }
        }
    };

    // Per thread and m-tile mt: rows w0 + 16 mt + g and that + 8 of the tile.
    const u32 w0 = warp * 16 * MT;
    const u32 wlo_hi = max(window_lo(t.p_hi, p.window), t.klo);
    const float qscale = p.scale * 1.4426950408889634f;
    float acc[MT][ND][4];
    float m[MT][2], l[MT][2];
#pragma unroll
    for (u32 mt = 0; mt < MT; mt++) {
#pragma unroll
        for (u32 n = 0; n < ND; n++) acc[mt][n][0] = acc[mt][n][1] = acc[mt][n][2] = acc[mt][n][3] = 0.0f;
        m[mt][0] = m[mt][1] = -LS_INF;
        l[mt][0] = l[mt][1] = 0.0f;
    }
    u32 qf[QREG ? MT : 1][QREG ? D / 16 : 1][4];
    // Lane l's ldmatrix row within a 16-row A tile, and its 8-column half.
    const u32 a_row = lane & 15, a_col = 8 * (lane >> 4);

    for (u32 ti = 0; ti < n_tiles; ti++) {
        const u32 st = ti & 1;
        if (ti + 1 < n_tiles) { stage(st ^ 1, ti + 1); cp_async_wait<1>(); } else { cp_async_wait<0>(); }
        __syncthreads();
        if (QREG && ti == 0) {
#pragma unroll
            for (u32 mt = 0; mt < (QREG ? MT : 1); mt++)
#pragma unroll
                for (u32 kd = 0; kd < (QREG ? D / 16 : 1); kd++)
                    pm_ldsm_x4(qf[mt][kd], qs + (w0 + 16 * mt + a_row) * LD + kd * 16 + a_col);
        }
        if constexpr (KV8) {
            convert8(st);
            __syncthreads();
        }
        const CT* kt = ks + (KV8 ? 0 : st) * BK * LD;
        const CT* vt = vs + (KV8 ? 0 : st) * BK * LD;
        const u32 k0 = tiles.k0(ti);
        const bool virt = ti < tiles.nvt;

        // S = Q K^T over the dims that exist. Lane l addresses key (l & 7) + 8 (l >> 4), dims
        // + 8 ((l >> 3) & 1): matrices (keys 0-7 | 8-15) x (dims 0-7 | 8-15) = b0 b1 of two n-tiles.
        float sc[MT][NT][4];
#pragma unroll
        for (u32 mt = 0; mt < MT; mt++)
#pragma unroll
            for (u32 j = 0; j < NT; j++) sc[mt][j][0] = sc[mt][j][1] = sc[mt][j][2] = sc[mt][j][3] = 0.0f;
        const CT* kr = kt + ((lane & 7) + 8 * (lane >> 4)) * LD + 8 * ((lane >> 3) & 1);
#pragma unroll
        for (u32 kd = 0; kd < D / 16; kd++) {
            if (!FULL && kd * 16 >= hd) break;
            u32 a[MT][4];
#pragma unroll
            for (u32 mt = 0; mt < MT; mt++) {
                if (QREG) {
#pragma unroll
                    for (int e = 0; e < 4; e++) a[mt][e] = qf[QREG ? mt : 0][QREG ? kd : 0][e];
                } else {
                    pm_ldsm_x4(a[mt], qs + (w0 + 16 * mt + a_row) * LD + kd * 16 + a_col);
                }
            }
#pragma unroll
            for (u32 jp = 0; jp < NT / 2; jp++) {
                u32 b[4];
                pm_ldsm_x4(b, kr + jp * 16 * LD + kd * 16);
#pragma unroll
                for (u32 mt = 0; mt < MT; mt++) {
                    mma_16816<CT>(sc[mt][2 * jp], a[mt], b[0], b[1]);
                    mma_16816<CT>(sc[mt][2 * jp + 1], a[mt], b[2], b[3]);
                }
            }
        }

        // 8-bit KV: a score times its key's K scale (the codes were multiplied as exact values).
        if constexpr (KV8) mul_keys(sc, scl + st * 2 * BK);

        // Mask (boundary tiles only), online softmax on raw scores (qscale > 0).
        float corr[MT][2];
        // List tiles: every key before nv is visible to every row (its page lies below the tail).
        const bool full = virt ? k0 + BK <= t.nv
                               : k0 + BK - 1 <= t.p_lo && k0 >= wlo_hi &&
                                     (!t.streaming || k0 + BK <= p.sink || t.p_hi - k0 < p.local);
        if (!full) {
#pragma unroll
            for (u32 mt = 0; mt < MT; mt++) pm_mask<NT>(p, t, virt, k0, tq, t.p_lo + w0 + 16 * mt + g, &sc[mt][0][0]);
        }
#pragma unroll
        for (u32 mt = 0; mt < MT; mt++) {
            float mx[2] = {-LS_INF, -LS_INF};
#pragma unroll
            for (u32 j = 0; j < NT; j++) {
#pragma unroll
                for (int e = 0; e < 4; e++) mx[e >> 1] = fmaxf(mx[e >> 1], sc[mt][j][e]);
            }
#pragma unroll
            for (int r = 0; r < 2; r++) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                const float mn = fmaxf(m[mt][r], mx[r] * qscale);
                // A row that has seen no key yet keeps m = -inf; 0 stands in so no inf - inf appears.
                const float mu = mn == -LS_INF ? 0.0f : mn;
                corr[mt][r] = pm_exp2(m[mt][r] - mu);
                m[mt][r] = mn;
                l[mt][r] *= corr[mt][r];
#pragma unroll
                for (u32 j = 0; j < NT; j++) {
                    sc[mt][j][2 * r] = pm_exp2(fmaf(sc[mt][j][2 * r], qscale, -mu));
                    sc[mt][j][2 * r + 1] = pm_exp2(fmaf(sc[mt][j][2 * r + 1], qscale, -mu));
                    l[mt][r] += sc[mt][j][2 * r] + sc[mt][j][2 * r + 1];
                }
            }
        }
        // 8-bit KV: P times its key's V scale before it is rounded for P V (l keeps plain P).
        if constexpr (KV8) mul_keys(sc, scl + st * 2 * BK + BK);

        // The output rescale, skipped when no row of the warp saw a new maximum (most tiles once
        // a row has seen a few hundred keys).
        bool grew = false;
#pragma unroll
        for (u32 mt = 0; mt < MT; mt++) grew |= corr[mt][0] != 1.0f || corr[mt][1] != 1.0f;
        if (__any_sync(0xffffffffu, grew)) {
#pragma unroll
            for (u32 mt = 0; mt < MT; mt++)
#pragma unroll
                for (u32 n = 0; n < ND; n++) {
                    acc[mt][n][0] *= corr[mt][0];
                    acc[mt][n][1] *= corr[mt][0];
                    acc[mt][n][2] *= corr[mt][1];
                    acc[mt][n][3] *= corr[mt][1];
                }
        }

        // O += P V: P's S fragments become A fragments (16 keys = two n-tiles of S). Lane l
        // addresses row l % 8 of matrix l / 8: keys +8 for odd matrices, dims +8 for the upper two.
        const CT* vr = vt + ((lane & 7) + 8 * ((lane >> 3) & 1)) * LD + 8 * (lane >> 4);
#pragma unroll
        for (u32 kk = 0; kk < BK / 16; kk++) {
            u32 a[MT][4];
#pragma unroll
            for (u32 mt = 0; mt < MT; mt++) {
                a[mt][0] = mma_pack<CT>(sc[mt][2 * kk][0], sc[mt][2 * kk][1]);
                a[mt][1] = mma_pack<CT>(sc[mt][2 * kk][2], sc[mt][2 * kk][3]);
                a[mt][2] = mma_pack<CT>(sc[mt][2 * kk + 1][0], sc[mt][2 * kk + 1][1]);
                a[mt][3] = mma_pack<CT>(sc[mt][2 * kk + 1][2], sc[mt][2 * kk + 1][3]);
            }
#pragma unroll
            for (u32 np = 0; np < ND / 2; np++) {
                if (!FULL && np * 16 >= hd) break;
                u32 b[4];
                pm_ldsm_x4_t(b, vr + kk * 16 * LD + np * 16);
#pragma unroll
                for (u32 mt = 0; mt < MT; mt++) {
                    mma_16816<CT>(acc[mt][2 * np], a[mt], b[0], b[1]);
                    mma_16816<CT>(acc[mt][2 * np + 1], a[mt], b[2], b[3]);
                }
            }
        }
        __syncthreads();  // the stage consumed here is refilled next iteration
    }

#pragma unroll
    for (u32 mt = 0; mt < MT; mt++) {
        float inv[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float s = l[mt][r];
            s += __shfl_xor_sync(0xffffffffu, s, 1);
            s += __shfl_xor_sync(0xffffffffu, s, 2);
            inv[r] = s > 0.0f ? 1.0f / s : 0.0f;
        }
        const u32 ra = w0 + 16 * mt + g;
#pragma unroll
        for (u32 n = 0; n < ND; n++) {
            u32 d = n * 8 + 2 * tq;
            if (!FULL && d >= hd) break;
#pragma unroll
            for (int r = 0; r < 2; r++) {
                if (ra + 8 * r < t.nr)
                    attn_store2(out, ((u64)(t.r0 + ra + 8 * r) * nh + h) * hd + d, acc[mt][n][2 * r] * inv[r],
                                acc[mt][n][2 * r + 1] * inv[r], out16);
            }
        }
    }
}

#define PM(name, KT, D, FULL) \
    extern "C" __global__ void __launch_bounds__(PM_THREADS) name( \
        AttentionParams p, const float* q, const u32* q_indptr, const KT* k, const KT* v, const KT* sk, const KT* sv, \
        const u32* head_map, const u32* page_indptr, const u32* page_table, const u32* kv_len, const u32* ring_table, \
        void* out, const u32* blk_sel, const u32* blk_cnt, u32 ptl, u32 rtl, u32 bsl, u32 bcl, u32 out16) { \
        prefill_mma_impl<KT, D, FULL>(p, q, q_indptr, k, v, sk, sv, head_map, page_indptr, page_table, kv_len, \
                                      ring_table, out, ptl, rtl, blk_sel, blk_cnt, bsl, bcl, out16); \
    }
// _d<D>: head_dim == D; _d<D>_pad: head_dim below D, zero-padded up to it.
PM(prefill_attention_mma_f16_d64, f16_t, 64, true)
PM(prefill_attention_mma_f16_d128, f16_t, 128, true)
PM(prefill_attention_mma_f16_d256, f16_t, 256, true)
PM(prefill_attention_mma_f16_d64_pad, f16_t, 64, false)
PM(prefill_attention_mma_f16_d128_pad, f16_t, 128, false)
PM(prefill_attention_mma_f16_d256_pad, f16_t, 256, false)
PM(prefill_attention_mma_bf16_d64, bf16_t, 64, true)
PM(prefill_attention_mma_bf16_d128, bf16_t, 128, true)
PM(prefill_attention_mma_bf16_d256, bf16_t, 256, true)
PM(prefill_attention_mma_bf16_d64_pad, bf16_t, 64, false)
PM(prefill_attention_mma_bf16_d128_pad, bf16_t, 128, false)
PM(prefill_attention_mma_bf16_d256_pad, bf16_t, 256, false)
// 8-bit KV: head_dim == D only (16-byte code rows).
PM(prefill_attention_mma_int8_d64, i8kv_t, 64, true)
PM(prefill_attention_mma_int8_d128, i8kv_t, 128, true)
PM(prefill_attention_mma_int8_d256, i8kv_t, 256, true)
PM(prefill_attention_mma_fp8_d64, e4m3_t, 64, true)
PM(prefill_attention_mma_fp8_d128, e4m3_t, 128, true)
PM(prefill_attention_mma_fp8_d256, e4m3_t, 256, true)
