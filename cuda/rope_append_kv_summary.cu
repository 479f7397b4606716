// rope_append_kv, pass 2 of 2: refresh the min/max summary of every logical page this call wrote
// (a separate launch, so pass 1's keys are in the pool). Retrieval pool k [page][n_ret][page_size]
// [head_dim] in KT; summary [page][n_ret][page_size / logical_page][2][head_dim] f32 (0 = min,
// 1 = max); 8-bit pools are read dequantized (code * scale), so summaries bound the keys as
// stored. Token t wrote slot page * ps + off in logical page l = off / logical_page; the summary
// of (page, l) becomes min/max over offsets l * logical_page ..= last, last = the largest offset
// this call wrote there (tokens are appended in position order).
//
// Grid (n_tokens, n_ret): block (t, r) owns head r of (page, l) iff no other token of the call
// wrote (page, l) at a larger offset (slots of one call are distinct), so exactly one block
// writes each summary row. Fast path: token t + 1 wrote the same logical page further on (a
// sequence's contiguous tokens); otherwise the block scans all slots. A thread owns channels c,
// c + blockDim.x, ... and folds the rows in offset order (min/max in the reference's order, so
// -0/+0 ties resolve alike), with SUM_ROWS row loads in flight (a decode step's logical page of 16
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

template <typename KT>
__device__ void summary_impl(RopeAppendKvParams p, const u32* slots, const KT* k, float* summary) {
    __shared__ int beaten;
    u32 t = blockIdx.x, r = blockIdx.y, ps = p.page_size, lp = p.logical_page, hd = p.head_dim;
    u32 slot = slots[t];
    if (r >= p.n_ret || slot >= p.num_pages * ps) return;
    u32 page = slot / ps, off = slot % ps, l = off / lp;
    if (t + 1 < p.n_tokens) {
        u32 nx = slots[t + 1];
        if (nx / ps == page && (nx % ps) / lp == l && nx % ps > off) return;
    }
    if (threadIdx.x == 0) beaten = 0;
    __syncthreads();
    for (u32 j = threadIdx.x; j < p.n_tokens; j += blockDim.x) {
        u32 o = slots[j];
        if (j != t && o / ps == page && (o % ps) / lp == l && (o % ps > off || (o % ps == off && j > t))) beaten = 1;
    }
    __syncthreads();
    if (beaten) return;
    u64 blk = (u64)page * p.n_ret + r;
    u64 at = ((blk * (ps / lp) + l) * 2) * hd;
    for (u32 c = threadIdx.x; c < hd; c += blockDim.x) {
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
