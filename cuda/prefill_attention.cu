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

__device__ __forceinline__ u32 key_offset(const AttentionParams& p, bool streaming, u32 hi, u32 s, u32 kp,
                                          const u32* page_indptr, const u32* page_table, const u32* ring_table,
                                          u32 page_table_len, u32 ring_table_len) {
    u32 ps = p.page_size;
    if (streaming) {
        u32 r = ring_index(kp, p.sink, p.ring_tokens);
        u32 at = s * (p.ring_tokens / ps) + r / ps;
        if (at >= ring_table_len) return NONE_U32;
        u32 page = ring_table[at];
        if (page >= p.num_str_pages) return NONE_U32;
        return ((page * p.n_str + hi) * ps + r % ps) * p.head_dim;
    }
    u32 at = page_indptr[s] + kp / ps;
    if (at >= page_indptr[s + 1] || at >= page_table_len) return NONE_U32;
    u32 page = page_table[at];
    if (page >= p.num_pages) return NONE_U32;
    return ((page * p.n_ret + hi) * ps + kp % ps) * p.head_dim;
}

// Long (about 120 lines) on purpose: the kernel's phases (query staging, key tiles, online softmax,
// output) share its registers and shared memory; split into device functions they would pass all of
// that state around, and the body reads in the order it runs.
template <typename KT, int DPT>
__device__ void prefill_impl(AttentionParams p, const float* q, const u32* q_indptr, const KT* k, const KT* v,
                             const KT* sk, const KT* sv, const u32* head_map, const u32* page_indptr,
                             const u32* page_table, const u32* kv_len, const u32* ring_table, float* out,
                             u32 page_table_len, u32 ring_table_len) {
    extern __shared__ float smem[];
    const u32 hd = p.head_dim, nh = p.n_heads, h = blockIdx.y;
    const u32 tk = min(32u, 4096u / hd);
    float* ks = smem;
    float* vs = smem + tk * hd;
    // Which sequence and rows this block takes.
    u32 b = blockIdx.x, s = 0, r0 = 0, r1 = 0;
    bool found = false;
    for (; s < p.num_seqs; s++) {
        u32 a = q_indptr[s], e = q_indptr[s + 1];
        u32 nt = e > a ? (e - a + PF_TQ - 1) / PF_TQ : 0;
        if (b < nt) { r0 = a + b * PF_TQ; r1 = min(r0 + PF_TQ, e); found = true; break; }
        b -= nt;
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
    u32 lo_a = w0, hi_a = p_hi + 1, lo_b = 0, hi_b = 0;
    if (streaming) {
        hi_a = max(w0, min(p.sink, p_hi + 1));
        lo_b = max(max(p.sink, w0), p_lo + 1 > p.local ? p_lo + 1 - p.local : 0u);
        hi_b = p_hi + 1;
        if (lo_b <= hi_a) { hi_a = max(hi_a, hi_b); lo_b = hi_b = 0; }
    }
    for (int range = 0; range < 2; range++) {
        u32 lo = range == 0 ? lo_a : lo_b, hi_end = range == 0 ? hi_a : hi_b;
        for (u32 t0 = lo; t0 < hi_end; t0 += tk) {
            u32 nk = min(tk, hi_end - t0);
            __syncthreads();
            for (u32 i = threadIdx.x; i < tk * hd; i += PF_THREADS) {
                u32 j = i / hd, d = i % hd;
                float kx = 0.0f, vx = 0.0f;
                if (j < nk) {
                    u32 off = key_offset(p, streaming, hi, s, t0 + j, page_indptr, page_table, ring_table,
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
                    bool vis = active && j < nk && kp <= pos && kp >= wlo &&
                               (!streaming || kp < p.sink || pos - kp < p.local);
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
        if (d < hd) out[((u64)row * nh + h) * hd + d] = l > 0.0f ? acc[i] / l : 0.0f;
    }
}

#define PF(name, KT, DPT) \
    extern "C" __global__ void __launch_bounds__(PF_THREADS) name( \
        AttentionParams p, const float* q, const u32* q_indptr, const KT* k, const KT* v, const KT* sk, const KT* sv, \
        const u32* head_map, const u32* page_indptr, const u32* page_table, const u32* kv_len, const u32* ring_table, \
        float* out, u32 ptl, u32 rtl) { \
        prefill_impl<KT, DPT>(p, q, q_indptr, k, v, sk, sv, head_map, page_indptr, page_table, kv_len, ring_table, out, \
                              ptl, rtl); \
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
// `prefill_attention_mma_<kv>_d<D>` for 16-bit KV: the same contract as above on mma.sync tiles.
// A block takes PM_BQ = 64 query rows of one sequence and one head, 4 warps of 16 rows each; key
// tiles of BK = 64 keys (32 when D > 128) are ALIGNED to multiples of BK in key position and
// staged with 16-byte cp.async copies into two shared-memory stages (the next tile loads while
// this one is consumed). Shared memory (16-bit elements, rows padded to D + 8 so fragment loads
// and ldmatrix are bank-conflict free): Q [64][D+8] (f32 activations rounded to the KV type),
// K and V [2][BK][D+8]. Per warp and key tile: S = Q K^T by m16n8k16 mma (A = Q fragments, B = K
// rows as col-major operands), online softmax in registers (exp2 domain, each thread owns two
// rows and reduces across its quad), P rounded to the KV type and reused as the A operand of
// O += P V (B = V through ldmatrix.trans); f32 accumulation throughout.
//
// Head dims: D is 64, 128 or 256; a head_dim below D (any multiple of 8) is zero-padded in shared
// memory, and k-steps / output tiles past head_dim are skipped.
//
// Lambda block sparsity: a block visits only the key tiles that intersect its visible set: for
// retrieval heads [wlo(first row), last row]; for streaming heads the sink [0, sink) and the band
// [first row + 1 - local, last row] (each clipped by the window), as two tile ranges merged when
// they touch. Keys outside those ranges are zero-filled, never read, so garbage past the written
// positions cannot reach P V. A tile visible to every row of the block (at or below the first
// row, at or above the last row's window start, and for streaming heads inside the sink or within
// local of the last row) skips the per-element mask; the others (diagonal, window and band edges)
// mask k <= pos, k >= wlo(pos) and (k < sink or pos - k < local) element by element.

#define PM_BQ 64
#define PM_THREADS 128

__device__ __forceinline__ u32 pm_smem_addr(const void* p) {
    u32 s;
    asm volatile("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(s) : "l"(p));
    return s;
}
__device__ __forceinline__ void pm_cp_async16(void* smem, const void* gmem) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(pm_smem_addr(smem)), "l"(gmem) : "memory");
}
__device__ __forceinline__ void pm_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void pm_cp_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// Four 8x8 16-bit matrices, transposed: thread l gives the row address of matrix l / 8.
__device__ __forceinline__ void pm_ldsm_x4_t(u32* r, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(pm_smem_addr(p)));
}

// Block-uniform geometry of a tile of query rows.
struct PmTile {
    u32 s, r0, nr;       // sequence, first row (token index), rows (<= PM_BQ)
    u32 p_lo, p_hi;      // positions of the first and the last row
    bool streaming;
    u32 hi;              // head index within its kind's pool
    u32 lo_a, hi_a, lo_b, hi_b;  // visible key ranges [lo_a, hi_a) and [lo_b, hi_b)
};

// Which tile blockIdx.y is (the last tiles, which see the most keys, first); false when surplus.
__device__ __forceinline__ bool pm_tile(const AttentionParams& p, const u32* q_indptr, const u32* kv_len,
                                        const u32* head_map, PmTile& t) {
    u32 total = 0;
    for (u32 s = 0; s < p.num_seqs; s++) {
        u32 a = q_indptr[s], e = q_indptr[s + 1];
        total += e > a ? (e - a + PM_BQ - 1) / PM_BQ : 0;
    }
    if (blockIdx.y >= total) return false;
    u32 b = total - 1 - blockIdx.y;
    bool found = false;
    for (t.s = 0; t.s < p.num_seqs; t.s++) {
        u32 a = q_indptr[t.s], e = q_indptr[t.s + 1];
        u32 nt = e > a ? (e - a + PM_BQ - 1) / PM_BQ : 0;
        if (b < nt) { t.r0 = a + b * PM_BQ; t.nr = min(PM_BQ, e - t.r0); found = true; break; }
        b -= nt;
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
    return true;
}

// Long (about 200 lines) on purpose: the kernel's phases (Q fragments, cp.async K/V stages, mma
// scores, online softmax, P.V, output) share its registers and shared memory; split into device
// functions they would pass all of that state around, and the body reads in the order it runs.
template <typename KT, int D>
__device__ void prefill_mma_impl(AttentionParams p, const float* q, const u32* q_indptr, const KT* k, const KT* v,
                                 const KT* sk, const KT* sv, const u32* head_map, const u32* page_indptr,
                                 const u32* page_table, const u32* kv_len, const u32* ring_table, float* out,
                                 u32 page_table_len, u32 ring_table_len) {
    constexpr u32 BK = D <= 128 ? 64 : 32;  // keys per tile
    constexpr u32 LD = D + 8;               // shared row stride (elements)
    constexpr u32 NT = BK / 8;              // n-tiles of S per warp
    constexpr u32 ND = D / 8;               // n-tiles of O per warp
    constexpr u32 CH = D / 8;               // 16-byte chunks per row
    constexpr bool QREG = D <= 128;         // Q fragments kept in registers
    extern __shared__ __align__(16) unsigned char pm_smem[];
    KT* qs = reinterpret_cast<KT*>(pm_smem);
    KT* ks = qs + PM_BQ * LD;  // [2][BK][LD]
    KT* vs = ks + 2 * BK * LD;  // [2][BK][LD]

    PmTile t;
    if (!pm_tile(p, q_indptr, kv_len, head_map, t)) return;
    const u32 hd = p.head_dim, nh = p.n_heads, h = blockIdx.x;
    const u32 tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
    const KT* kpool = t.streaming ? sk : k;
    const KT* vpool = t.streaming ? sv : v;

    // Key tiles: [ta0, ta1) then [tb0, tb1), merged when they touch.
    u32 ta0 = t.lo_a / BK, ta1 = t.hi_a > t.lo_a ? (t.hi_a + BK - 1) / BK : ta0;
    u32 tb0 = t.lo_b / BK, tb1 = t.hi_b > t.lo_b ? (t.hi_b + BK - 1) / BK : tb0;
    if (tb1 > tb0 && ta1 > ta0 && tb0 < ta1) { ta1 = max(ta1, tb1); tb1 = tb0; }
    if (ta1 <= ta0) { ta0 = tb0; ta1 = tb1; tb1 = tb0; }
    const u32 na = ta1 - ta0, n_tiles = na + (tb1 - tb0);

    // Q rows, rounded to KT; rows past the tile and dims past head_dim are zero.
    for (u32 i = tid; i < PM_BQ * (D / 4); i += PM_THREADS) {
        u32 r = i / (D / 4), d = 4 * (i % (D / 4));
        float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r < t.nr && d < hd) x = *reinterpret_cast<const float4*>(q + ((u64)(t.r0 + r) * nh + h) * hd + d);
        *reinterpret_cast<uint2*>(qs + r * LD + d) = make_uint2(mma_pack<KT>(x.x, x.y), mma_pack<KT>(x.z, x.w));
    }

    auto stage = [&](u32 st, u32 ti) {
        const u32 k0 = (ti < na ? ta0 + ti : tb0 + (ti - na)) * BK;
        KT* kd = ks + st * BK * LD;
        KT* vd = vs + st * BK * LD;
        for (u32 i = tid; i < BK * CH; i += PM_THREADS) {
            u32 j = i / CH, d = 8 * (i % CH), kp = k0 + j;
            bool in = d < hd && ((kp >= t.lo_a && kp < t.hi_a) || (kp >= t.lo_b && kp < t.hi_b));
            u32 off = in ? key_offset(p, t.streaming, t.hi, t.s, kp, page_indptr, page_table, ring_table,
                                      page_table_len, ring_table_len)
                         : NONE_U32;
            if (off != NONE_U32) {
                pm_cp_async16(kd + j * LD + d, kpool + off + d);
                pm_cp_async16(vd + j * LD + d, vpool + off + d);
            } else {
                *reinterpret_cast<uint4*>(kd + j * LD + d) = make_uint4(0, 0, 0, 0);
                *reinterpret_cast<uint4*>(vd + j * LD + d) = make_uint4(0, 0, 0, 0);
            }
        }
        pm_cp_commit();
    };
    if (n_tiles > 0) stage(0, 0);

    // Per thread: rows ra = warp * 16 + g and ra + 8 of the tile.
    const u32 ra = warp * 16 + g;
    const u32 pos_a = t.p_lo + ra, pos_b = pos_a + 8;
    const u32 wlo_a = window_lo(pos_a, p.window), wlo_b = window_lo(pos_b, p.window);
    const u32 wlo_hi = window_lo(t.p_hi, p.window);
    const float qscale = p.scale * 1.4426950408889634f;
    float acc[ND][4];
#pragma unroll
    for (u32 n = 0; n < ND; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    float m_a = -LS_INF, m_b = -LS_INF, l_a = 0.0f, l_b = 0.0f;
    u32 qf[QREG ? D / 16 : 1][4];

    for (u32 ti = 0; ti < n_tiles; ti++) {
        const u32 st = ti & 1;
        if (ti + 1 < n_tiles) { stage(st ^ 1, ti + 1); pm_cp_wait<1>(); } else { pm_cp_wait<0>(); }
        __syncthreads();
        if (QREG && ti == 0) {
#pragma unroll
            for (u32 kd = 0; kd < (QREG ? D / 16 : 1); kd++) {
                const KT* qa = qs + ra * LD + kd * 16 + 2 * tq;
                qf[kd][0] = *reinterpret_cast<const u32*>(qa);
                qf[kd][1] = *reinterpret_cast<const u32*>(qa + 8 * LD);
                qf[kd][2] = *reinterpret_cast<const u32*>(qa + 8);
                qf[kd][3] = *reinterpret_cast<const u32*>(qa + 8 * LD + 8);
            }
        }
        const KT* kt = ks + st * BK * LD;
        const KT* vt = vs + st * BK * LD;
        const u32 k0 = (ti < na ? ta0 + ti : tb0 + (ti - na)) * BK;

        // S = Q K^T over the dims that exist.
        float sc[NT][4];
#pragma unroll
        for (u32 j = 0; j < NT; j++) sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.0f;
#pragma unroll
        for (u32 kd = 0; kd < D / 16; kd++) {
            if (kd * 16 >= hd) break;
            u32 a[4];
            if (QREG) {
#pragma unroll
                for (int e = 0; e < 4; e++) a[e] = qf[QREG ? kd : 0][e];
            } else {
                const KT* qa = qs + ra * LD + kd * 16 + 2 * tq;
                a[0] = *reinterpret_cast<const u32*>(qa);
                a[1] = *reinterpret_cast<const u32*>(qa + 8 * LD);
                a[2] = *reinterpret_cast<const u32*>(qa + 8);
                a[3] = *reinterpret_cast<const u32*>(qa + 8 * LD + 8);
            }
#pragma unroll
            for (u32 j = 0; j < NT; j++) {
                const KT* kr = kt + (j * 8 + g) * LD + kd * 16 + 2 * tq;
                mma_16816<KT>(sc[j], a, *reinterpret_cast<const u32*>(kr), *reinterpret_cast<const u32*>(kr + 8));
            }
        }

        // Scale, mask (boundary tiles only), online softmax.
        const bool full = k0 + BK - 1 <= t.p_lo && k0 >= wlo_hi &&
                          (!t.streaming || k0 + BK <= p.sink || t.p_hi - k0 < p.local);
        float mx_a = -LS_INF, mx_b = -LS_INF;
#pragma unroll
        for (u32 j = 0; j < NT; j++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float x = sc[j][e] * qscale;
                if (!full) {
                    u32 kp = k0 + j * 8 + 2 * tq + (e & 1), pos = e < 2 ? pos_a : pos_b;
                    u32 wlo = e < 2 ? wlo_a : wlo_b;
                    bool vis = kp <= pos && kp >= wlo && (!t.streaming || kp < p.sink || pos - kp < p.local);
                    if (!vis) x = -LS_INF;
                }
                sc[j][e] = x;
            }
            mx_a = fmaxf(mx_a, fmaxf(sc[j][0], sc[j][1]));
            mx_b = fmaxf(mx_b, fmaxf(sc[j][2], sc[j][3]));
        }
        mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
        mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
        mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
        mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
        const float mn_a = fmaxf(m_a, mx_a), mn_b = fmaxf(m_b, mx_b);
        // A row that has seen no key yet keeps m = -inf; 0 stands in so no inf - inf appears.
        const float mu_a = mn_a == -LS_INF ? 0.0f : mn_a, mu_b = mn_b == -LS_INF ? 0.0f : mn_b;
        const float corr_a = exp2f(m_a - mu_a), corr_b = exp2f(m_b - mu_b);
        m_a = mn_a;
        m_b = mn_b;
        l_a *= corr_a;
        l_b *= corr_b;
#pragma unroll
        for (u32 n = 0; n < ND; n++) {
            acc[n][0] *= corr_a; acc[n][1] *= corr_a;
            acc[n][2] *= corr_b; acc[n][3] *= corr_b;
        }
#pragma unroll
        for (u32 j = 0; j < NT; j++) {
            sc[j][0] = exp2f(sc[j][0] - mu_a);
            sc[j][1] = exp2f(sc[j][1] - mu_a);
            sc[j][2] = exp2f(sc[j][2] - mu_b);
            sc[j][3] = exp2f(sc[j][3] - mu_b);
            l_a += sc[j][0] + sc[j][1];
            l_b += sc[j][2] + sc[j][3];
        }

        // O += P V: P's S fragments become A fragments (16 keys = two n-tiles of S).
#pragma unroll
        for (u32 kk = 0; kk < BK / 16; kk++) {
            u32 a[4];
            a[0] = mma_pack<KT>(sc[2 * kk][0], sc[2 * kk][1]);
            a[1] = mma_pack<KT>(sc[2 * kk][2], sc[2 * kk][3]);
            a[2] = mma_pack<KT>(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
            a[3] = mma_pack<KT>(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
            // Lane l addresses row l % 8 of matrix l / 8: keys +8 for odd matrices, dims +8 for the
            // upper two.
            const KT* vr = vt + (kk * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)) * LD + 8 * (lane >> 4);
#pragma unroll
            for (u32 np = 0; np < ND / 2; np++) {
                if (np * 16 >= hd) break;
                u32 b[4];
                pm_ldsm_x4_t(b, vr + np * 16);
                mma_16816<KT>(acc[2 * np], a, b[0], b[1]);
                mma_16816<KT>(acc[2 * np + 1], a, b[2], b[3]);
            }
        }
        __syncthreads();  // the stage consumed here is refilled next iteration
    }

    l_a += __shfl_xor_sync(0xffffffffu, l_a, 1);
    l_a += __shfl_xor_sync(0xffffffffu, l_a, 2);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, 1);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, 2);
    const float ia = l_a > 0.0f ? 1.0f / l_a : 0.0f, ib = l_b > 0.0f ? 1.0f / l_b : 0.0f;
#pragma unroll
    for (u32 n = 0; n < ND; n++) {
        u32 d = n * 8 + 2 * tq;
        if (d >= hd) break;
        if (ra < t.nr)
            *reinterpret_cast<float2*>(out + ((u64)(t.r0 + ra) * nh + h) * hd + d) =
                make_float2(acc[n][0] * ia, acc[n][1] * ia);
        if (ra + 8 < t.nr)
            *reinterpret_cast<float2*>(out + ((u64)(t.r0 + ra + 8) * nh + h) * hd + d) =
                make_float2(acc[n][2] * ib, acc[n][3] * ib);
    }
}

#define PM(name, KT, D) \
    extern "C" __global__ void __launch_bounds__(PM_THREADS) name( \
        AttentionParams p, const float* q, const u32* q_indptr, const KT* k, const KT* v, const KT* sk, const KT* sv, \
        const u32* head_map, const u32* page_indptr, const u32* page_table, const u32* kv_len, const u32* ring_table, \
        float* out, u32 ptl, u32 rtl) { \
        prefill_mma_impl<KT, D>(p, q, q_indptr, k, v, sk, sv, head_map, page_indptr, page_table, kv_len, ring_table, \
                                out, ptl, rtl); \
    }
PM(prefill_attention_mma_f16_d64, f16_t, 64)
PM(prefill_attention_mma_f16_d128, f16_t, 128)
PM(prefill_attention_mma_f16_d256, f16_t, 256)
PM(prefill_attention_mma_bf16_d64, bf16_t, 64)
PM(prefill_attention_mma_bf16_d128, bf16_t, 128)
PM(prefill_attention_mma_bf16_d256, bf16_t, 256)
