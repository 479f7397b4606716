// sparse_decode_attention: one query per sequence (position kv_len - 1), split-KV ("flash
// decoding"), ONE kernel for both head kinds: each block reads head_map and walks either its
// retrieval head's page list or its streaming head's Lambda window through the ring.
//
// Grid (n_splits, n_kv_heads * head_chunks, num_seqs); a block takes the query heads h0..h0+ng of
// one KV head (ng <= G <= 8, so a GQA group shares every K/V load) over split x of the head's key
// list. Layouts: q/out [num_seqs][n_heads][head_dim] f32; pools [page][heads][page_size][head_dim]
// in KT; selected [slot][n_ret][sel_stride], counts [slot][n_ret], seq_slot/tail_start [num_seqs].
//
// Key list ("slots"): retrieval heads: the selected units below tail_start (the selection is
// ascending, so a prefix), then units tail_start.. of the sequence's pages, u = sel_unit slots
// each (0: page_size; unit j is positions j * u .. (j + 1) * u, in page j * u / page_size; kept
// when the position is < kv_len and within the window). Streaming heads: the Lambda mask, positions
// wlo..sink then max(sink, wlo, pos + 1 - local)..=pos, through the ring. Split i covers slots
// [i * per, (i + 1) * per), per = max(ceil(n_slots / n_splits), 32); empty splits report
// (m, l) = (-inf, 0).
//
// 8-bit KV in the SIMT version: K/V rows are staged as their raw code bytes
// (head_dim bytes, 16-byte copies; the host requires head_dim % 16 == 0) and each row's f32
// scales go to shared memory beside them; a score is the dot product with the codes times the K
// scale, and P.V multiplies each V code pair by its row's scale.
//
// Two implementations with one contract. `sparse_decode_attention_<kv>_g<G>` (the SIMT one, every
// KV dtype and head_dim) stages chunks of CK keys of K and V into shared memory with cp.async
// (16-byte copies, two stages in flight), scores (key, head) pairs from shared memory, updates the
// online softmax per head once per chunk and accumulates P.V with one thread per dim pair and key
// group (probabilities read as float4 of four keys). `sparse_decode_attention_mma_<kv>_d<D>`
// (16-bit and 8-bit KV, head_dim D = 64 or 128; described at its code) runs the same key lists on
// tensor cores with K and V read straight into registers, so each byte is read once for the whole
// GQA group; the SIMT kernel re-reads each staged key from shared memory once per query head and
// is bound by that traffic (docs/benchmarks.md). Online softmax is in the exp2 domain (q
// pre-scaled by scale * log2 e). n_splits == 1 writes `out`; otherwise part
// [num_seqs][n_heads][n_splits][head_dim + 2] (accumulator, m, l), merged by
// sparse_decode_attention_merge.cu; an empty split reports (m, l) = (-inf, 0). Requires head_dim %
// 8 == 0 and head_dim <= 256 (host-checked); device-side page ids, slots and table indices are
// bounds-checked (an unaddressable key is skipped).

struct KeyList {
    bool streaming;
    u32 hi, s, len, wlo, nsel, sel_base, tail0, n_units, unit, a0, na, b0;
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
    // Unit idx of the list (selected, then the tail's), position pos, page pos / ps.
    u32 un = ls.unit, idx = e / un;
    u32 j = idx < ls.nsel ? selected[ls.sel_base + idx] : ls.tail0 + (idx - ls.nsel);
    if (j >= ls.n_units) return NONE_U32;
    u32 pos = j * un + e % un;
    u32 at = page_indptr[ls.s] + pos / ps;
    if (pos >= ls.len || pos < ls.wlo || at >= page_indptr[ls.s + 1] || at >= page_table_len) return NONE_U32;
    u32 page = page_table[at];
    if (page >= p.num_pages) return NONE_U32;
    return ((page * p.n_ret + ls.hi) * ps + pos % ps) * p.head_dim;
}

// The block's key list (`ls`) and its slot count. Every thread of the block must call it (it
// synchronises the block; the shared counter `sm_nsel` counts selected pages below tail_start).
__device__ __forceinline__ u32 decode_key_list(const AttentionParams& p, u32 kvh, u32 s, const u32* head_map,
                                               const u32* kv_len, const u32* selected, const u32* counts,
                                               const u32* seq_slot, const u32* tail_start, u32 selected_len,
                                               u32 counts_len, u32* sm_nsel, KeyList& ls) {
    const u32 ps = p.page_size;
    u32 hm = head_map[kvh];
    ls.streaming = (hm & STREAMING_BIT) != 0u;
    ls.hi = hm & ~STREAMING_BIT;
    ls.s = s;
    ls.len = kv_len[s];
    u32 pos = ls.len > 0 ? ls.len - 1 : 0;
    ls.wlo = window_lo(pos, p.window);
    // Retrieval lists count units of p.sel_unit tokens (0: page_size; the host checks it
    // divides page_size), tail_start among them.
    ls.unit = p.sel_unit == 0u ? ps : p.sel_unit;
    ls.n_units = (ls.len + ps - 1) / ps * (ps / ls.unit);
    u32 tail = min(tail_start[s], ls.n_units);
    ls.tail0 = tail;
    u32 ci = seq_slot[s] * p.n_ret + ls.hi;
    ls.sel_base = ci * p.sel_stride;
    u32 cnt = 0;
    if (!ls.streaming && ci < counts_len && ls.sel_base < selected_len)
        cnt = min(min(counts[ci], p.sel_stride), selected_len - ls.sel_base);
    if (threadIdx.x == 0) *sm_nsel = 0;
    __syncthreads();
    u32 below = 0;
    for (u32 i = threadIdx.x; i < cnt; i += blockDim.x) below += selected[ls.sel_base + i] < tail;
    if (below) atomicAdd(sm_nsel, below);
    __syncthreads();
    ls.nsel = *sm_nsel;
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
            n_slots = (ls.nsel + ls.n_units - ls.tail0) * ls.unit;
        }
    }
    return n_slots;
}

// ---- the cp.async version ----------------------------------------------------------------------

#define SD2_THREADS 128


// Eight elements from 16 bytes of shared memory.
__device__ __forceinline__ void smem8(const float* p, float* o) {
    float4 a = *reinterpret_cast<const float4*>(p), b = *(reinterpret_cast<const float4*>(p) + 1);
    o[0] = a.x; o[1] = a.y; o[2] = a.z; o[3] = a.w; o[4] = b.x; o[5] = b.y; o[6] = b.z; o[7] = b.w;
}
__device__ __forceinline__ void smem8(const bf16_t* p, float* o) {
    uint4 v = *reinterpret_cast<const uint4*>(p);
    u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) { o[2 * i] = __uint_as_float(w[i] << 16); o[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u); }
}
__device__ __forceinline__ void smem8(const f16_t* p, float* o) {
    uint4 v = *reinterpret_cast<const uint4*>(p);
    u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) { o[2 * i] = f16_to_f32((u16)(w[i] & 0xffffu)); o[2 * i + 1] = f16_to_f32((u16)(w[i] >> 16)); }
}

// Keys per staged chunk for a row of `row_bytes` (the host computes the same for the smem size).
__device__ __forceinline__ u32 sd2_chunk(u32 row_bytes) { return min(64u, max(8u, 8192u / row_bytes)) & ~7u; }

// Two consecutive elements (a dim pair) from shared memory.
__device__ __forceinline__ void ld2(const float* p, float& a, float& b) { float2 v = *reinterpret_cast<const float2*>(p); a = v.x; b = v.y; }
__device__ __forceinline__ void ld2(const bf16_t* p, float& a, float& b) {
    u32 w = *reinterpret_cast<const u32*>(p);
    a = __uint_as_float(w << 16);
    b = __uint_as_float(w & 0xffff0000u);
}
__device__ __forceinline__ void ld2(const f16_t* p, float& a, float& b) {
    u32 w = *reinterpret_cast<const u32*>(p);
    a = f16_to_f32((u16)(w & 0xffffu));
    b = f16_to_f32((u16)(w >> 16));
}

// 8-bit KV: sixteen codes from 16 bytes of shared memory, and a pair of codes (values before
// the row's scale, which the caller applies).
__device__ __forceinline__ void smem16(const i8kv_t* p, float* o) {
    uint4 v = *reinterpret_cast<const uint4*>(p);
    u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int b = 0; b < 4; b++) o[4 * i + b] = kv8_value_i8((w[i] >> (8 * b)) & 0xffu);
}
__device__ __forceinline__ void smem16(const e4m3_t* p, float* o) {
    uint4 v = *reinterpret_cast<const uint4*>(p);
    u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int b = 0; b < 4; b++) o[4 * i + b] = kv8_value_e4m3((w[i] >> (8 * b)) & 0xffu);
}
template <typename KT> __device__ __forceinline__ void smem16(const KT* p, float* o) {}
__device__ __forceinline__ void ld2(const i8kv_t* p, float& a, float& b) {
    u32 w = *reinterpret_cast<const unsigned short*>(p);
    a = kv8_value_i8(w & 0xffu);
    b = kv8_value_i8(w >> 8);
}
__device__ __forceinline__ void ld2(const e4m3_t* p, float& a, float& b) {
    u32 w = *reinterpret_cast<const unsigned short*>(p);
    a = kv8_value_e4m3(w & 0xffu);
    b = kv8_value_e4m3(w >> 8);
}

template <typename KT, int G>
__device__ void decode2_impl(AttentionParams p, const float* q, const KT* k, const KT* v, const KT* sk, const KT* sv,
                             const u32* head_map, const u32* page_indptr, const u32* page_table, const u32* kv_len,
                             const u32* ring_table, const u32* selected, const u32* counts, const u32* seq_slot,
                             const u32* tail_start, float* out, float* part, u32 page_table_len,
                             u32 ring_table_len, u32 selected_len, u32 counts_len) {
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ u32 sm_nsel;
    __shared__ float sm_m[G], sm_l[G], sm_corr[G];
    const u32 hd = p.head_dim, nh = p.n_heads, ps = p.page_size, t = threadIdx.x;
    const u32 group = nh / p.n_kv_heads, hchunks = (group + G - 1) / G;
    const u32 s = blockIdx.z, kvh = blockIdx.y / hchunks, g0 = (blockIdx.y % hchunks) * G;
    const u32 ng = min((u32)G, group - g0), h0 = kvh * group + g0;
    const u32 split = blockIdx.x, n_splits = gridDim.x;
    constexpr bool KV8 = is_kv8<KT>::value;
    constexpr u32 EPC = 16 / sizeof(KT);  // elements per 16-byte copy
    const u32 row_bytes = hd * sizeof(KT), cpr = row_bytes / 16, ck = sd2_chunk(row_bytes);
    // Shared layout: K/V stages [2][2][ck][row], valid [2][ck], scores [G][ck], q [G][hd], acc [G][hd],
    // and for 8-bit KV the rows' scales, K then V, [2][ck] each.
    KT* kv_s = reinterpret_cast<KT*>(smem);
    u32* valid = reinterpret_cast<u32*>(smem + 4 * ck * row_bytes);
    float* sc = reinterpret_cast<float*>(valid + 2 * ck);
    float* q_s = sc + G * ck;
    float* acc_s = q_s + G * hd;
    float* ksc = acc_s + G * hd;
    float* vsc = ksc + 2 * ck;
#define KS(st) (kv_s + ((st) * 2) * ck * hd)
#define VS(st) (kv_s + ((st) * 2 + 1) * ck * hd)

    if (t < G) { sm_m[t] = -LS_INF; sm_l[t] = 0.0f; }
    const float qscale = p.scale * 1.4426950408889634f;
    for (u32 i = t; i < G * hd; i += SD2_THREADS) {
        u32 g = i / hd;
        q_s[i] = g < ng ? q[((u64)s * nh + h0 + g) * hd + i % hd] * qscale : 0.0f;
        acc_s[i] = 0.0f;
    }
    KeyList ls;
    const u32 n_slots = decode_key_list(p, kvh, s, head_map, kv_len, selected, counts, seq_slot, tail_start,
                                        selected_len, counts_len, &sm_nsel, ls);
    u32 per = max((n_slots + n_splits - 1) / n_splits, 32u);
    u32 start = min(split * per, n_slots), end = min(start + per, n_slots);
    const u32 n_chunks = (end - start + ck - 1) / ck;
    if (n_chunks == 0 && n_splits > 1) {
        // An empty split only reports (m, l) = (-inf, 0); the merge skips it.
        for (u32 g = t; g < ng; g += SD2_THREADS) {
            float* pp = part + (((u64)s * nh + h0 + g) * n_splits + split) * (hd + 2);
            pp[hd] = -LS_INF;
            pp[hd + 1] = 0.0f;
        }
        return;
    }
    const KT* kp = ls.streaming ? sk : k;
    const KT* vp = ls.streaming ? sv : v;

    // Issue the copies of chunk c into stage st (rows of masked/absent keys are zeroed).
    auto stage = [&](u32 st, u32 c) {
        for (u32 i = t; i < ck * cpr; i += SD2_THREADS) {
            u32 j = i / cpr, prt = i % cpr, e = start + c * ck + j;
            u32 off = e < end ? slot_offset(p, ls, e, page_indptr, page_table, ring_table, selected, page_table_len,
                                            ring_table_len)
                              : NONE_U32;
            KT* dk = KS(st) + j * hd + prt * EPC;
            KT* dv = VS(st) + j * hd + prt * EPC;
            if (off != NONE_U32) {
                if constexpr (KV8) {
                    const unsigned char* kb = reinterpret_cast<const unsigned char*>(kp);
                    const unsigned char* vb = reinterpret_cast<const unsigned char*>(vp);
                    u64 co = kv8_code_off(off, ps, hd) + prt * 16;
                    cp_async16(dk, kb + co);
                    cp_async16(dv, vb + co);
                    if (prt == 0) {
                        u64 so = kv8_scale_off(off, ps, hd);
                        cp_async4(ksc + st * ck + j, kb + so);
                        cp_async4(vsc + st * ck + j, vb + so);
                    }
                } else {
                    cp_async16(dk, kp + off + prt * EPC);
                    cp_async16(dv, vp + off + prt * EPC);
                }
            } else {
                if (KV8 && prt == 0) { ksc[st * ck + j] = 0.0f; vsc[st * ck + j] = 0.0f; }
                *reinterpret_cast<uint4*>(dk) = make_uint4(0, 0, 0, 0);
                *reinterpret_cast<uint4*>(dv) = make_uint4(0, 0, 0, 0);
            }
            if (prt == 0) valid[st * ck + j] = off != NONE_U32;
        }
        cp_async_commit();
    };
    if (n_chunks > 0) stage(0, 0);
    if (n_chunks > 1) stage(1, 1);
    // P.V mapping: a thread owns dim pair dp0 (and dp0 + 128 when head_dim is 256) of every head,
    // for key group kg of kgs; groups take 4-key slices round-robin so probabilities load as float4.
    const u32 pairs = hd / 2;
    const u32 kgs = pairs >= SD2_THREADS ? 1 : SD2_THREADS / pairs;
    const u32 kg = pairs >= SD2_THREADS ? 0 : t / pairs, dp0 = pairs >= SD2_THREADS ? t : t % pairs;
    const bool pv_on = pairs >= SD2_THREADS || t < kgs * pairs;
    const bool two = dp0 + SD2_THREADS < pairs;
    float acc[G][4];
#pragma unroll
    for (int g = 0; g < G; g++) acc[g][0] = acc[g][1] = acc[g][2] = acc[g][3] = 0.0f;
    for (u32 c = 0; c < n_chunks; c++) {
        u32 st = c & 1;
        if (c + 1 < n_chunks) cp_async_wait<1>(); else cp_async_wait<0>();
        __syncthreads();
        const KT* ks = KS(st);
        // Scores of (key j, head g), the key's 16-byte chunks visited from a rotated start.
        for (u32 pr = t; pr < ck * G; pr += SD2_THREADS) {
            u32 j = pr % ck, g = pr / ck;
            float d = 0.0f;
            if (valid[st * ck + j] && g < ng) {
                for (u32 i = 0; i < cpr; i++) {
                    u32 cc = (i + j) % cpr;
                    const float* qq = q_s + g * hd + cc * EPC;
                    if constexpr (KV8) {
                        float kx[16];
                        smem16(ks + j * hd + cc * EPC, kx);
#pragma unroll
                        for (int x = 0; x < 16; x++) d += qq[x] * kx[x];
                    } else {
                        float kx[8];
                        smem8(ks + j * hd + cc * EPC, kx);
                        if (sizeof(KT) == 2) {
#pragma unroll
                            for (int x = 0; x < 8; x++) d += qq[x] * kx[x];
                        } else {
#pragma unroll
                            for (int x = 0; x < 4; x++) d += qq[x] * kx[x];
                        }
                    }
                }
                if constexpr (KV8) d *= ksc[st * ck + j];
                sc[g * ck + j] = d;
            } else {
                sc[g * ck + j] = -LS_INF;
            }
        }
        __syncthreads();
        // Online softmax per head: warp w takes heads w, w + 4, ...
        {
            u32 w = t >> 5, lane = t & 31;
            for (u32 g = w; g < G; g += SD2_THREADS / 32) {
                float mx = -LS_INF;
                for (u32 j = lane; j < ck; j += 32) mx = fmaxf(mx, sc[g * ck + j]);
                mx = warp_max(mx);
                float m_old = sm_m[g], m_new = fmaxf(m_old, mx);
                float sum = 0.0f;
                for (u32 j = lane; j < ck; j += 32) {
                    float x = sc[g * ck + j];
                    float pr = x == -LS_INF ? 0.0f : exp2f(x - m_new);
                    sc[g * ck + j] = pr;
                    sum += pr;
                }
                sum = warp_sum(sum);
                if (lane == 0) {
                    float corr = (m_old == -LS_INF || m_new == -LS_INF) ? 1.0f : exp2f(m_old - m_new);
                    sm_corr[g] = corr;
                    sm_l[g] = sm_l[g] * corr + sum;
                    sm_m[g] = m_new;
                }
            }
        }
        __syncthreads();
        if (pv_on) {
            const KT* vs = VS(st);
#pragma unroll
            for (int g = 0; g < G; g++) {
                float cr = sm_corr[g];
                acc[g][0] *= cr; acc[g][1] *= cr; acc[g][2] *= cr; acc[g][3] *= cr;
            }
            for (u32 jg = kg; jg < ck / 4; jg += kgs) {
                u32 j = jg * 4;
                float va[4][2], vb[4][2];
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    ld2(vs + (j + u) * hd + 2 * dp0, va[u][0], va[u][1]);
                    if (two) ld2(vs + (j + u) * hd + 2 * (dp0 + SD2_THREADS), vb[u][0], vb[u][1]);
                    else vb[u][0] = vb[u][1] = 0.0f;
                    if constexpr (KV8) {
                        float f = vsc[st * ck + j + u];
                        va[u][0] *= f; va[u][1] *= f; vb[u][0] *= f; vb[u][1] *= f;
                    }
                }
#pragma unroll
                for (int g = 0; g < G; g++) {
                    float4 p4 = *reinterpret_cast<const float4*>(sc + g * ck + j);
                    float pr[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
                    for (int u = 0; u < 4; u++) {
                        acc[g][0] += pr[u] * va[u][0];
                        acc[g][1] += pr[u] * va[u][1];
                        acc[g][2] += pr[u] * vb[u][0];
                        acc[g][3] += pr[u] * vb[u][1];
                    }
                }
            }
        }
        __syncthreads();
        if (c + 2 < n_chunks) stage(st, c + 2);
    }
    // Reduce the key groups in a fixed order (no float atomics: the same inputs give the same
    // bits, which graph replay's bit-identity test and reproducible sampling rely on), then write
    // out (one split) or the partial (acc, m, l).
    for (u32 r = 0; r < kgs; r++) {
        if (pv_on && kg == r) {
#pragma unroll
            for (int g = 0; g < G; g++) {
                acc_s[g * hd + 2 * dp0] += acc[g][0];
                acc_s[g * hd + 2 * dp0 + 1] += acc[g][1];
                if (two) {
                    acc_s[g * hd + 2 * (dp0 + SD2_THREADS)] += acc[g][2];
                    acc_s[g * hd + 2 * (dp0 + SD2_THREADS) + 1] += acc[g][3];
                }
            }
        }
        __syncthreads();
    }
    for (u32 i = t; i < ng * hd; i += SD2_THREADS) {
        u32 g = i / hd, d = i % hd;
        float L = sm_l[g];
        u64 h = (u64)s * nh + h0 + g;
        if (n_splits == 1) {
            out[h * hd + d] = L > 0.0f ? acc_s[i] / L : 0.0f;
        } else {
            float* pp = part + (h * n_splits + split) * (hd + 2);
            pp[d] = acc_s[i];
            if (d == 0) { pp[hd] = sm_m[g]; pp[hd + 1] = L; }
        }
    }
#undef KS
#undef VS
}

#define SDA(name, KT, G) \
    extern "C" __global__ void __launch_bounds__(SD2_THREADS) name( \
        AttentionParams p, const float* q, const KT* k, const KT* v, const KT* sk, const KT* sv, const u32* head_map, \
        const u32* page_indptr, const u32* page_table, const u32* kv_len, const u32* ring_table, const u32* selected, \
        const u32* counts, const u32* seq_slot, const u32* tail_start, float* out, float* part, u32 ptl, u32 rtl, \
        u32 sl, u32 cl) { \
        decode2_impl<KT, G>(p, q, k, v, sk, sv, head_map, page_indptr, page_table, kv_len, ring_table, selected, \
                            counts, seq_slot, tail_start, out, part, ptl, rtl, sl, cl); \
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
SDA(sparse_decode_attention_int8_g1, i8kv_t, 1)
SDA(sparse_decode_attention_int8_g2, i8kv_t, 2)
SDA(sparse_decode_attention_int8_g4, i8kv_t, 4)
SDA(sparse_decode_attention_int8_g8, i8kv_t, 8)
SDA(sparse_decode_attention_fp8_g1, e4m3_t, 1)
SDA(sparse_decode_attention_fp8_g2, e4m3_t, 2)
SDA(sparse_decode_attention_fp8_g4, e4m3_t, 4)
SDA(sparse_decode_attention_fp8_g8, e4m3_t, 8)

// ---- the tensor-core version ---------------------------------------------------------------------
//
// `sparse_decode_attention_mma_<kv>_d<D>` (KV f16 / bf16 / int8 / fp8, head_dim == D, 64 or 128):
// the grid, key lists and output contract above, with G = 8 (head chunks of 8). The chunk's query
// heads are the N = 8 columns of m16n8k16 tiles (columns past ng have q = 0 and are never
// written); keys are the M = 16 rows. Warp w (of 4) takes 16-key tiles w, w + 4, ... of the
// block's split; nothing is staged in shared memory. Lane l has r = l / 4, c = l % 4.
// - S^T = K Q^T. A dot product does not depend on the order its dims are summed in, so lane
//   (r, c) loads the 8 contiguous dims 32 j + 8 c .. + 7 of keys r and r + 8 (one 16-byte load
//   each for 16-bit KV) and uses them as its A-fragment elements of k-steps 2 j and 2 j + 1; the
//   B fragment (Q^T) is permuted the same way. q is split into 16-bit hi and lo parts (two mmas)
//   so scores keep about f32 precision.
// - Online softmax on the accumulator: lane (r, c) holds keys r and r + 8 of heads 2 c, 2 c + 1;
//   the tile max is reduced over the 8 lanes of a column; l stays per lane until the end.
// - O^T += V^T P^T. B = P^T: the probabilities packed to 16 bits (hi and lo parts again) and
//   transposed in registers by movmatrix. A = V^T: lane (r, c) loads dims 64 h + 8 r .. + 7 of
//   keys 2 c, 2 c + 1, 2 c + 8, 2 c + 9 and pairs two keys' values of one dim with byte permutes;
//   m-tile t's row r is dim 64 (t / 4) + 8 r + 2 (t % 4), its row r + 8 the next dim.
// - 8-bit KV: codes become exact f16 values in registers, once per key for the whole group
//   (int8: x ^ 0x80 under the f16 bits of 1024, minus 1152; fp8: sign and low 7 bits moved under
//   f16's exponent and mantissa, which is the value / 256, the 256 folded into the row scales).
//   A score is multiplied by its key's K scale; P by its key's V scale divided by the tile's
//   largest (so 16-bit P stays in range), and the tile's P.V is added to O times that largest.
// Warps merge (m, l, O) through shared memory in a fixed order (deterministic). The host picks
// this kernel for head_dim 64 / 128 (page_size even for 8-bit KV, so 8-byte code loads align).

#define SDM_WARPS 4

template <typename KT> struct mma_type { typedef f16_t T; };
template <> struct mma_type<bf16_t> { typedef bf16_t T; };

__device__ __forceinline__ u32 movmatrix_t(u32 x) {
    u32 r;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(r) : "r"(x));
    return r;
}

// The 16-bit value in the low (hi = false) or high half of a packed register, as f32.
template <typename MT> __device__ __forceinline__ float half_f32(u32 w, bool hi);
template <> __device__ __forceinline__ float half_f32<bf16_t>(u32 w, bool hi) {
    return __uint_as_float(hi ? (w & 0xffff0000u) : (w << 16));
}
template <> __device__ __forceinline__ float half_f32<f16_t>(u32 w, bool hi) {
    return f16_to_f32((u16)(hi ? (w >> 16) : (w & 0xffffu)));
}

// x ~ hi + lo, both packed pairs of the mma type.
template <typename MT> __device__ __forceinline__ void split_pair(float a, float b, u32& hi, u32& lo) {
    hi = mma_pack<MT>(a, b);
    lo = mma_pack<MT>(a - half_f32<MT>(hi, false), b - half_f32<MT>(hi, true));
}


// A key's address for the loads below: 16-bit pools: a = the element offset of its row, b unused;
// 8-bit pools: a = its (page, head) block, b = its row in the block. a = NONE_U32: absent key.
struct KeyAddr { u32 a, b; };
template <typename KT> __device__ __forceinline__ KeyAddr key_addr(u32 off, u32 ps, u32 hd) {
    if (!is_kv8<KT>::value || off == NONE_U32) return KeyAddr{off, 0u};
    const u32 row = off / hd, blk = row / ps;
    return KeyAddr{blk, row - blk * ps};
}
template <typename KT> __device__ __forceinline__ KeyAddr shfl_addr(KeyAddr x, u32 from) {
    KeyAddr y;
    y.a = __shfl_sync(0xffffffffu, x.a, from);
    y.b = is_kv8<KT>::value ? __shfl_sync(0xffffffffu, x.b, from) : 0u;
    return y;
}

// Eight elements from element `at` of a key's row, as loaded (16 bytes of 16-bit values or 8
// codes); zeros for an absent key. `unpack8` makes them four packed mma-type pairs: the loads of a
// tile are all issued first and 8-bit codes are converted only where they are used.
template <typename KT> struct Raw8 { typedef uint4 T; };
template <> struct Raw8<i8kv_t> { typedef uint2 T; };
template <> struct Raw8<e4m3_t> { typedef uint2 T; };
template <typename KT>
__device__ __forceinline__ typename Raw8<KT>::T load_row8(const KT* pool, KeyAddr x, u32 at, u32 ps, u32 hd) {
    typedef typename Raw8<KT>::T R;
    if (x.a == NONE_U32) return R{};
    if constexpr (is_kv8<KT>::value) {
        const unsigned char* b = reinterpret_cast<const unsigned char*>(pool);
        const u64 code = kv8_row_code_off(x.a, x.b, ps, hd) + at;
        return __ldg(reinterpret_cast<const uint2*>(b + code));
    } else {
        return __ldg(reinterpret_cast<const uint4*>(pool + x.a + at));
    }
}
template <typename KT> __device__ __forceinline__ void unpack8(uint4 w, u32* o) { o[0] = w.x; o[1] = w.y; o[2] = w.z; o[3] = w.w; }
template <typename KT> __device__ __forceinline__ void unpack8(uint2 w, u32* o) {
    codes_f16(w.x, o[0], o[1], KT{});
    codes_f16(w.y, o[2], o[3], KT{});
}
// A key's row scale (8-bit pools, times code_scale), 0 for an absent key; 1 for 16-bit pools.
template <typename KT> __device__ __forceinline__ float row_scale(const KT* pool, KeyAddr x, u32 ps, u32 hd) {
    if constexpr (is_kv8<KT>::value) {
        if (x.a == NONE_U32) return 0.0f;
        const unsigned char* b = reinterpret_cast<const unsigned char*>(pool);
        return __ldg(reinterpret_cast<const float*>(b + kv8_row_scale_off(x.a, x.b, ps, hd))) * code_scale<KT>();
    } else {
        return 1.0f;
    }
}

// One warp's 16-key tile as loaded: K codes/values of keys r and r + 8, V of keys 2c, 2c + 1,
// 2c + 8, 2c + 9 (as `load_row8`), the keys' row scales (1 for 16-bit KV, 0 when absent) and
// whether keys r and r + 8 exist.
template <typename KT, int D> struct DecodeTile {
    typename Raw8<KT>::T kw[2][D / 32], vw[4][D / 64];
    float ks0, ks1, vs0, vs1;
    bool has0, has1;
};
// Issues every load of the tile whose 16 key addresses lane l % 16 holds in `ka` (warp-wide:
// the addresses are shuffled). Nothing here waits on the loads.
template <typename KT, int D>
__device__ __forceinline__ void load_tile(DecodeTile<KT, D>& t, KeyAddr ka, const KT* kp, const KT* vp, u32 ps,
                                          u32 r, u32 c) {
    constexpr int KC = D / 32, VC = D / 64;
    const KeyAddr ok0 = shfl_addr<KT>(ka, r), ok1 = shfl_addr<KT>(ka, r + 8);
    KeyAddr ov[4];
#pragma unroll
    for (int i = 0; i < 4; i++) ov[i] = shfl_addr<KT>(ka, 2 * c + (i & 1) + 8 * (i >> 1));
#pragma unroll
    for (int j = 0; j < KC; j++) {
        t.kw[0][j] = load_row8<KT>(kp, ok0, 32 * j + 8 * c, ps, D);
        t.kw[1][j] = load_row8<KT>(kp, ok1, 32 * j + 8 * c, ps, D);
    }
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int h = 0; h < VC; h++) t.vw[i][h] = load_row8<KT>(vp, ov[i], 64 * h + 8 * r, ps, D);
    t.ks0 = row_scale<KT>(kp, ok0, ps, D);
    t.ks1 = row_scale<KT>(kp, ok1, ps, D);
    t.vs0 = row_scale<KT>(vp, ok0, ps, D);
    t.vs1 = row_scale<KT>(vp, ok1, ps, D);
    t.has0 = ok0.a != NONE_U32;
    t.has1 = ok1.a != NONE_U32;
}

template <typename KT, int D, bool PF>
__device__ void decode_mma_impl(AttentionParams p, const float* q, const KT* k, const KT* v, const KT* sk,
                                const KT* sv, const u32* head_map, const u32* page_indptr, const u32* page_table,
                                const u32* kv_len, const u32* ring_table, const u32* selected, const u32* counts,
                                const u32* seq_slot, const u32* tail_start, float* out, float* part,
                                u32 page_table_len, u32 ring_table_len, u32 selected_len, u32 counts_len) {
    typedef typename mma_type<KT>::T MT;
    constexpr bool KV8 = is_kv8<KT>::value;
    constexpr int KC = D / 32, VC = D / 64, MTILES = D / 16;
    __shared__ u32 sm_nsel;
    __shared__ float sm_m[SDM_WARPS][8], sm_l[SDM_WARPS][8];
    __shared__ float sm_o[SDM_WARPS][8][D]; // each warp's O, unscaled
    const u32 nh = p.n_heads, ps = p.page_size, t = threadIdx.x;
    const u32 lane = t & 31, warp = t >> 5, r = lane >> 2, c = lane & 3;
    const u32 group = nh / p.n_kv_heads, hchunks = (group + 7) / 8;
    const u32 s = blockIdx.z, kvh = blockIdx.y / hchunks, g0 = (blockIdx.y % hchunks) * 8;
    const u32 ng = min(8u, group - g0), h0 = kvh * group + g0;
    const u32 split = blockIdx.x, n_splits = gridDim.x;
    // B fragments of Q^T (column r = head g0 + r), hi and lo parts, k-steps 2 j and 2 j + 1; loaded
    // before the key list so their latency overlaps its loads.
    u32 qh[KC][4], ql[KC][4];
    {
        const float qscale = p.scale * 1.4426950408889634f;
        const float* qr = q + ((u64)s * nh + h0 + r) * D;
#pragma unroll
        for (int j = 0; j < KC; j++) {
            float x[8];
#pragma unroll
            for (int i = 0; i < 8; i++) x[i] = r < ng ? qr[32 * j + 8 * c + i] * qscale : 0.0f;
#pragma unroll
            for (int i = 0; i < 4; i++) split_pair<MT>(x[2 * i], x[2 * i + 1], qh[j][i], ql[j][i]);
        }
    }
    KeyList ls;
    const u32 n_slots = decode_key_list(p, kvh, s, head_map, kv_len, selected, counts, seq_slot, tail_start,
                                        selected_len, counts_len, &sm_nsel, ls);
    const u32 per = max((n_slots + n_splits - 1) / n_splits, 32u);
    const u32 start = min(split * per, n_slots), end = min(start + per, n_slots);
    float o[MTILES][4];
#pragma unroll
    for (int i = 0; i < MTILES; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m0 = -LS_INF, m1 = -LS_INF, l0 = 0.0f, l1 = 0.0f;  // heads 2 c, 2 c + 1
    const KT* kp = ls.streaming ? sk : k;
    const KT* vp = ls.streaming ? sv : v;
    auto addr_of = [&](u32 tb) {
        const u32 e = tb + (lane & 15);
        const u32 off = e < end ? slot_offset(p, ls, e, page_indptr, page_table, ring_table, selected,
                                              page_table_len, ring_table_len)
                                : NONE_U32;
        return key_addr<KT>(off, ps, D);  // one division per lane, not per load
    };
    // The trip count is warp-uniform (shuffles, mma and movmatrix use the full warp). Without PF
    // an iteration issues its tile's loads, then looks up the next tile's key addresses (page-
    // table reads) before it waits on them, so the two latencies overlap. With PF (8-bit KV, whose
    // tiles are half the bytes) the next tile's K/V loads are issued before this tile is computed
    // and the addresses are looked up two tiles ahead: each warp keeps twice the bytes in flight.
    constexpr u32 STEP = SDM_WARPS * 16;
    u32 tb = start + warp * 16;
    KeyAddr ka_next = addr_of(tb);
    DecodeTile<KT, D> cur;
    if (PF && tb < end) {
        load_tile<KT, D>(cur, ka_next, kp, vp, ps, r, c);
        if (tb + STEP < end) ka_next = addr_of(tb + STEP);
    }
    for (; tb < end; tb += STEP) {
        DecodeTile<KT, D> nxt;
        if (PF) {
            if (tb + STEP < end) {
                load_tile<KT, D>(nxt, ka_next, kp, vp, ps, r, c);
                if (tb + 2 * STEP < end) ka_next = addr_of(tb + 2 * STEP);
            }
        } else {
            load_tile<KT, D>(cur, ka_next, kp, vp, ps, r, c);
            if (tb + STEP < end) ka_next = addr_of(tb + STEP);
        }
        const DecodeTile<KT, D>& t = cur;
        // Two independent accumulator chains (the hi and the lo part of q), summed after.
        float sq[2][4] = {};
#pragma unroll
        for (int j = 0; j < KC; j++) {
            u32 k0[4], k1[4];
            unpack8<KT>(t.kw[0][j], k0);
            unpack8<KT>(t.kw[1][j], k1);
            const u32 a0[4] = {k0[0], k1[0], k0[1], k1[1]};
            const u32 a1[4] = {k0[2], k1[2], k0[3], k1[3]};
            mma_16816<MT>(sq[0], a0, qh[j][0], qh[j][1]);
            mma_16816<MT>(sq[1], a0, ql[j][0], ql[j][1]);
            mma_16816<MT>(sq[0], a1, qh[j][2], qh[j][3]);
            mma_16816<MT>(sq[1], a1, ql[j][2], ql[j][3]);
        }
        float sc[4];
#pragma unroll
        for (int i = 0; i < 4; i++) sc[i] = sq[0][i] + sq[1][i];
        if (KV8) { sc[0] *= t.ks0; sc[1] *= t.ks0; sc[2] *= t.ks1; sc[3] *= t.ks1; }
        if (!t.has0) sc[0] = sc[1] = -LS_INF;
        if (!t.has1) sc[2] = sc[3] = -LS_INF;
        float mx0 = fmaxf(sc[0], sc[2]), mx1 = fmaxf(sc[1], sc[3]);
#pragma unroll
        for (int x = 4; x < 32; x <<= 1) {
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, x));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, x));
        }
        const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
        const float cr0 = m0 == -LS_INF ? 0.0f : exp2f(m0 - n0), cr1 = m1 == -LS_INF ? 0.0f : exp2f(m1 - n1);
        float pr[4];
        pr[0] = sc[0] == -LS_INF ? 0.0f : exp2f(sc[0] - n0);
        pr[1] = sc[1] == -LS_INF ? 0.0f : exp2f(sc[1] - n1);
        pr[2] = sc[2] == -LS_INF ? 0.0f : exp2f(sc[2] - n0);
        pr[3] = sc[3] == -LS_INF ? 0.0f : exp2f(sc[3] - n1);
        l0 = l0 * cr0 + pr[0] + pr[2];
        l1 = l1 * cr1 + pr[1] + pr[3];
        m0 = n0;
        m1 = n1;
        // 8-bit: P times its V scale over the tile's largest V scale (vmax, warp-uniform).
        float vmax = 1.0f, vs0 = t.vs0, vs1 = t.vs1;
        if (KV8) {
            vmax = fmaxf(vs0, vs1);
#pragma unroll
            for (int x = 4; x < 32; x <<= 1) vmax = fmaxf(vmax, __shfl_xor_sync(0xffffffffu, vmax, x));
            const float inv = vmax > 0.0f ? 1.0f / vmax : 0.0f;
            vs0 *= inv;
            vs1 *= inv;
        }
        u32 b0h, b0l, b1h, b1l;
        split_pair<MT>(KV8 ? pr[0] * vs0 : pr[0], KV8 ? pr[1] * vs0 : pr[1], b0h, b0l);
        split_pair<MT>(KV8 ? pr[2] * vs1 : pr[2], KV8 ? pr[3] * vs1 : pr[3], b1h, b1l);
        b0h = movmatrix_t(b0h);
        b0l = movmatrix_t(b0l);
        b1h = movmatrix_t(b1h);
        b1l = movmatrix_t(b1l);
#pragma unroll
        for (int h = 0; h < VC; h++) {
            u32 vr[4][4];
#pragma unroll
            for (int i = 0; i < 4; i++) unpack8<KT>(t.vw[i][h], vr[i]);
#pragma unroll
            for (int w = 0; w < 4; w++) {
                const int mt = 4 * h + w;
                const u32 a[4] = {__byte_perm(vr[0][w], vr[1][w], 0x5410), __byte_perm(vr[0][w], vr[1][w], 0x7632),
                                  __byte_perm(vr[2][w], vr[3][w], 0x5410), __byte_perm(vr[2][w], vr[3][w], 0x7632)};
                float ct[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                mma_16816<MT>(ct, a, b0h, b1h);
                mma_16816<MT>(ct, a, b0l, b1l);
                o[mt][0] = o[mt][0] * cr0 + vmax * ct[0];
                o[mt][1] = o[mt][1] * cr1 + vmax * ct[1];
                o[mt][2] = o[mt][2] * cr0 + vmax * ct[2];
                o[mt][3] = o[mt][3] * cr1 + vmax * ct[3];
            }
        }
        if (PF) cur = nxt;
    }
    // l over the column's 8 lanes; the warps' (m, l) to shared memory, the block max per head.
#pragma unroll
    for (int x = 4; x < 32; x <<= 1) {
        l0 += __shfl_xor_sync(0xffffffffu, l0, x);
        l1 += __shfl_xor_sync(0xffffffffu, l1, x);
    }
    if (r == 0) {
        sm_m[warp][2 * c] = m0; sm_m[warp][2 * c + 1] = m1;
        sm_l[warp][2 * c] = l0; sm_l[warp][2 * c + 1] = l1;
    }
#pragma unroll
    for (int mt = 0; mt < MTILES; mt++) {
        const u32 d = 64 * (mt / 4) + 8 * r + 2 * (mt % 4);
        sm_o[warp][2 * c][d] = o[mt][0];
        sm_o[warp][2 * c + 1][d] = o[mt][1];
        sm_o[warp][2 * c][d + 1] = o[mt][2];
        sm_o[warp][2 * c + 1][d + 1] = o[mt][3];
    }
    // One barrier: the warps' (m, l, O) are combined in a fixed order, O_w times exp2(m_w - M)
    // added by fmaf warp after warp (no float atomics: the same inputs give the same bits; the
    // same sums as when each warp added its share into shared memory behind a barrier of its own).
    __syncthreads();
    for (u32 i = t; i < ng * D; i += blockDim.x) {
        const u32 g = i / D, d = i % D;
        float M = -LS_INF, L = 0.0f, acc = 0.0f;
        for (int w = 0; w < SDM_WARPS; w++) M = fmaxf(M, sm_m[w][g]);
        for (int w = 0; w < SDM_WARPS; w++) {
            const float mw = sm_m[w][g];
            if (mw == -LS_INF) continue;
            const float f = exp2f(mw - M);
            L += sm_l[w][g] * f;
            acc = fmaf(sm_o[w][g][d], f, acc);
        }
        const u64 h = (u64)s * nh + h0 + g;
        if (n_splits == 1) {
            out[h * D + d] = L > 0.0f ? acc / L : 0.0f;
        } else {
            float* pp = part + (h * n_splits + split) * (D + 2);
            pp[d] = acc;
            if (d == 0) { pp[D] = M; pp[D + 1] = L; }
        }
    }
}

#define SDM(name, KT, D, PF, MINB) \
    extern "C" __global__ void __launch_bounds__(SDM_WARPS * 32, MINB) name( \
        AttentionParams p, const float* q, const KT* k, const KT* v, const KT* sk, const KT* sv, const u32* head_map, \
        const u32* page_indptr, const u32* page_table, const u32* kv_len, const u32* ring_table, const u32* selected, \
        const u32* counts, const u32* seq_slot, const u32* tail_start, float* out, float* part, u32 ptl, u32 rtl, \
        u32 sl, u32 cl) { \
        decode_mma_impl<KT, D, PF>(p, q, k, v, sk, sv, head_map, page_indptr, page_table, kv_len, ring_table, \
                                   selected, counts, seq_slot, tail_start, out, part, ptl, rtl, sl, cl); \
    }
SDM(sparse_decode_attention_mma_f16_d64, f16_t, 64, false, 3)
SDM(sparse_decode_attention_mma_f16_d128, f16_t, 128, false, 3)
SDM(sparse_decode_attention_mma_bf16_d64, bf16_t, 64, false, 3)
SDM(sparse_decode_attention_mma_bf16_d128, bf16_t, 128, false, 3)
SDM(sparse_decode_attention_mma_int8_d64, i8kv_t, 64, false, 3)
SDM(sparse_decode_attention_mma_int8_d128, i8kv_t, 128, false, 3)
SDM(sparse_decode_attention_mma_fp8_d64, e4m3_t, 64, false, 3)
SDM(sparse_decode_attention_mma_fp8_d128, e4m3_t, 128, false, 3)
// 8-bit KV with the next tile's loads in flight (PF), three blocks an SM (d128 spills 20 / 76
// bytes under the 170-register cap; a two-block build was slower on the H200: dense 128K int8
// 9.33 vs 8.60 ms a step, docs/benchmarks.md).
SDM(sparse_decode_attention_mma_pf_int8_d64, i8kv_t, 64, true, 3)
SDM(sparse_decode_attention_mma_pf_int8_d128, i8kv_t, 128, true, 3)
SDM(sparse_decode_attention_mma_pf_fp8_d64, e4m3_t, 64, true, 3)
SDM(sparse_decode_attention_mma_pf_fp8_d128, e4m3_t, 128, true, 3)
