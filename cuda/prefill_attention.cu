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
// write zeros. Tensor-core (mma.sync) tiles are the planned next step (docs/backends.md).
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
                    if (off != NONE_U32) { kx = to_f32(kp_[off + d]); vx = to_f32(vp_[off + d]); }
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
PF(prefill_attention_f16_d4, f16_t, 4)
PF(prefill_attention_f16_d8, f16_t, 8)
PF(prefill_attention_f16_d16, f16_t, 16)
PF(prefill_attention_f16_d32, f16_t, 32)
PF(prefill_attention_f16_d64, f16_t, 64)
PF(prefill_attention_bf16_d4, bf16_t, 4)
PF(prefill_attention_bf16_d8, bf16_t, 8)
PF(prefill_attention_bf16_d16, bf16_t, 16)
PF(prefill_attention_bf16_d32, bf16_t, 32)
PF(prefill_attention_bf16_d64, bf16_t, 64)
