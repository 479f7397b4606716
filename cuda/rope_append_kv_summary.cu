// rope_append_kv, pass 2 of 2: refresh the min/max summary of every logical page this call wrote
// (a separate launch, so pass 1's keys are in the pool). Retrieval pool k [page][n_ret][page_size]
// [head_dim] in KT; summary [page][n_ret][page_size / logical_page][2][head_dim] f32 (0 = min,
// 1 = max); 8-bit pools are read dequantized (code * scale), so summaries bound the keys as
// stored. Token t wrote slot page * ps + off in logical page l = off / logical_page; the summary
// of (page, l) becomes min/max over offsets l * logical_page ..= last, last = the largest offset
// this call wrote there (tokens are appended in position order).
//
// One block per token; block t owns (page, l) iff no other token of the call wrote (page, l) at
// a larger offset (slots of one call are distinct), so exactly one block writes each summary.
// Fast path: token t + 1 wrote the same logical page further on (a sequence's contiguous
// tokens); otherwise the block scans all slots. Threads then reduce channels (r, c).
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
    for (u32 j = threadIdx.x; j < p.n_tokens; j += blockDim.x) {
        u32 o = slots[j];
        if (j != t && o / ps == page && (o % ps) / lp == l && (o % ps > off || (o % ps == off && j > t))) beaten = 1;
    }
    __syncthreads();
    if (beaten) return;
    u32 lpp = ps / lp;
    for (u32 i = threadIdx.x; i < p.n_ret * hd; i += blockDim.x) {
        u32 r = i / hd, c = i % hd;
        float mn = LS_INF, mx = -LS_INF;
        for (u32 o = l * lp; o <= off; o++) {
            float x = kv_elem(k, (((u64)page * p.n_ret + r) * ps + o) * hd, c, ps, hd);
            mn = fminf(mn, x);
            mx = fmaxf(mx, x);
        }
        u64 at = ((((u64)page * p.n_ret + r) * lpp + l) * 2) * hd;
        summary[at + c] = mn;
        summary[at + hd + c] = mx;
    }
}
extern "C" __global__ void rope_append_kv_summary_f32(RopeAppendKvParams p, const u32* s, const float* k, float* sum) { summary_impl(p, s, k, sum); }
extern "C" __global__ void rope_append_kv_summary_f16(RopeAppendKvParams p, const u32* s, const f16_t* k, float* sum) { summary_impl(p, s, k, sum); }
extern "C" __global__ void rope_append_kv_summary_bf16(RopeAppendKvParams p, const u32* s, const bf16_t* k, float* sum) { summary_impl(p, s, k, sum); }
extern "C" __global__ void rope_append_kv_summary_int8(RopeAppendKvParams p, const u32* s, const i8kv_t* k, float* sum) { summary_impl(p, s, k, sum); }
extern "C" __global__ void rope_append_kv_summary_fp8(RopeAppendKvParams p, const u32* s, const e4m3_t* k, float* sum) { summary_impl(p, s, k, sum); }
