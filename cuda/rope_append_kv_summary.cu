// rope_append_kv, pass 2 of 2: refresh the min/max summary of every logical page this call wrote
// (a separate launch, so pass 1's keys are in the pool). Retrieval pool k [page][n_ret][page_size]
// [head_dim] in KT; summary [page][n_ret][page_size / logical_page][2][head_dim] f32 (0 = min,
// 1 = max); 8-bit pools are read dequantized (code * scale), so summaries bound the keys as
// stored. Token t wrote slot page * ps + off in logical page l = off / logical_page; the summary
// of (page, l) becomes min/max over offsets l * logical_page ..= last, last = the largest offset
// this call wrote there (tokens are appended in position order).
//
// Grid (n_tokens): block t owns (page, l) — every retrieval head's summary row of it — iff no
// other token of the call wrote (page, l) at a larger offset (slots of one call are distinct), so
// exactly one block writes each summary row. (A block per (t, head) scanned the call once per
// head: ~0.1 ms a call at 8,192 tokens and 8 heads, H100.) Fast path: token t + 1 wrote the same
// logical page further on (a sequence's contiguous tokens); otherwise the block scans all slots.
// A thread owns (head, channel) pairs i, i + blockDim.x, ... and folds the rows in offset order
// (min/max in the reference's order, so -0/+0 ties resolve alike), with SUM_ROWS row loads in
// flight (a decode step's logical page of 16
// rows is one round trip to memory, not sixteen); rows are addressed as (block, offset) without
// divisions.

// Element c of row o of (page, head) block blk, as stored.
template <typename KT>
__device__ __forceinline__ float summary_elem(const KT* k, u64 blk, u32 o, u32 c, u32 ps, u32 hd) {
    if constexpr (is_kv8<KT>::value) {
        const unsigned char* b = reinterpret_cast<const unsigned char*>(k);
        float s = *reinterpret_cast<const float*>(b + kv8_row_scale_off(blk, o, ps, hd));
        return __fmul_rn(kv8_value(KT{b[kv8_row_code_off(blk, o, ps, hd) + c]}), s);
    } else {
        return to_f32(k[(blk * ps + o) * hd + c]);
    }
}

#define SUM_ROWS 16u

// Whether a token j != t of the call writes (page, l = off / lp) at a larger offset (or the same
// offset later in the call), over this thread's share of the slots: 16-byte loads, SCAN_UNROLL of
// them in flight (a scalar loop with one load per trip was ~0.1 ms a call at 8,192 tokens, most of
// the pass: every last token of a logical page scans the whole call).
#define SCAN_UNROLL 8u
__device__ __forceinline__ bool summary_hit(u32 j, u32 o, u32 t, u32 page, u32 off, u32 ps, u32 lp) {
    const u32 oo = o % ps;
    return j != t && o / ps == page && oo / lp == off / lp && (oo > off || (oo == off && j > t));
}
__device__ bool summary_beaten(const u32* slots, u32 n, u32 t, u32 page, u32 off, u32 ps, u32 lp) {
    bool hit = false;
    u32 done = 0;
    if ((reinterpret_cast<u64>(slots) & 15u) == 0u) {
        const uint4* s4 = reinterpret_cast<const uint4*>(slots);
        const u32 n4 = n / 4, step = blockDim.x * SCAN_UNROLL;
        for (u32 b = 0; b < n4; b += step) {
            uint4 v[SCAN_UNROLL];
#pragma unroll
            for (u32 u = 0; u < SCAN_UNROLL; u++) {
                const u32 i = b + u * blockDim.x + threadIdx.x;
                // Past the slots: NONE_U32, whose page (NONE_U32 / ps >= num_pages) is no page's.
                v[u] = i < n4 ? __ldg(s4 + i) : make_uint4(NONE_U32, NONE_U32, NONE_U32, NONE_U32);
            }
#pragma unroll
            for (u32 u = 0; u < SCAN_UNROLL; u++) {
                const u32 j = 4 * (b + u * blockDim.x + threadIdx.x);
                hit |= summary_hit(j, v[u].x, t, page, off, ps, lp) || summary_hit(j + 1, v[u].y, t, page, off, ps, lp) ||
                       summary_hit(j + 2, v[u].z, t, page, off, ps, lp) || summary_hit(j + 3, v[u].w, t, page, off, ps, lp);
            }
        }
        done = 4 * n4;
    }
    for (u32 j = done + threadIdx.x; j < n; j += blockDim.x) hit |= summary_hit(j, slots[j], t, page, off, ps, lp);
    return hit;
}

template <typename KT>
__device__ void summary_impl(RopeAppendKvParams p, const u32* slots, const KT* k, float* summary) {
    __shared__ int beaten;
    u32 t = blockIdx.x, ps = p.page_size, lp = p.logical_page, hd = p.head_dim;
    u32 slot = slots[t];
    if (slot >= p.num_pages * ps) return;
    u32 page = slot / ps, off = slot % ps, l = off / lp;
    if (t + 1 < p.n_tokens) {
        u32 nx = slots[t + 1];
        if (nx / ps == page && (nx % ps) / lp == l && nx % ps > off) return;
    }
    if (threadIdx.x == 0) beaten = 0;
    __syncthreads();
    if (summary_beaten(slots, p.n_tokens, t, page, off, ps, lp)) beaten = 1;
    __syncthreads();
    if (beaten) return;
    // Thread i takes (head, channel) pairs i, i + blockDim.x, ... of the n_ret x hd rows.
    for (u32 rc = threadIdx.x; rc < p.n_ret * hd; rc += blockDim.x) {
        const u32 r = rc / hd, c = rc % hd;
        const u64 blk = (u64)page * p.n_ret + r;
        const u64 at = ((blk * (ps / lp) + l) * 2) * hd;
        float mn = LS_INF, mx = -LS_INF;
        for (u32 o0 = l * lp; o0 <= off; o0 += SUM_ROWS) {
            float x[SUM_ROWS];
#pragma unroll
            for (u32 i = 0; i < SUM_ROWS; i++) x[i] = o0 + i <= off ? summary_elem(k, blk, o0 + i, c, ps, hd) : 0.0f;
#pragma unroll
            for (u32 i = 0; i < SUM_ROWS; i++) {
                if (o0 + i <= off) {
                    mn = fminf(mn, x[i]);
                    mx = fmaxf(mx, x[i]);
                }
            }
        }
        summary[at + c] = mn;
        summary[at + hd + c] = mx;
    }
}
extern "C" __global__ void rope_append_kv_summary_f32(RopeAppendKvParams p, const u32* s, const float* k, float* sum) { summary_impl(p, s, k, sum); }
extern "C" __global__ void rope_append_kv_summary_f16(RopeAppendKvParams p, const u32* s, const f16_t* k, float* sum) { summary_impl(p, s, k, sum); }
extern "C" __global__ void rope_append_kv_summary_bf16(RopeAppendKvParams p, const u32* s, const bf16_t* k, float* sum) { summary_impl(p, s, k, sum); }
extern "C" __global__ void rope_append_kv_summary_int8(RopeAppendKvParams p, const u32* s, const i8kv_t* k, float* sum) { summary_impl(p, s, k, sum); }
extern "C" __global__ void rope_append_kv_summary_fp8(RopeAppendKvParams p, const u32* s, const e4m3_t* k, float* sum) { summary_impl(p, s, k, sum); }
