// sparse_decode_attention_merge: combine the n_splits partials of each (sequence, head) from
// part [num_seqs][n_heads][n_splits][head_dim + 2] (un-normalised accumulator, max m in the exp2
// domain, sum l) into out [num_seqs][n_heads][head_dim]; splits with m = -inf are empty. A
// (sequence, head) without any key writes zeros. Grid (num_seqs * n_heads, ceil(head_dim / 32)),
// 256 threads: the block reduces the split maxima and weights (staged in shared memory, up to 256
// splits); warp w sums splits w, w + 8, ... for 32 dims (lane = dim), skipping empty splits (their
// accumulators are never written), and the 8 warps' sums meet in shared memory.
// sparse_decode_attention_merge_x8: the same with out one row of x8 digits (DType::X8, one
// sequence, head_dim % 32 == 0: warp 0's 32 dims are one x block), for the o projection's GEMV.
#define MERGE_MAX_SPLITS 256
template <typename O>
__device__ void merge_impl(AttentionParams p, const float* part, O* out, u32 n_splits) {
    __shared__ float red[32];
    __shared__ float wt[MERGE_MAX_SPLITS];
    __shared__ float part_sum[8][32];
    u32 h = blockIdx.x, hd = p.head_dim, ns = min(n_splits, (u32)MERGE_MAX_SPLITS);
    const float* pp = part + (u64)h * n_splits * (hd + 2);
    float mi = threadIdx.x < ns ? pp[threadIdx.x * (hd + 2) + hd] : -LS_INF;
    float M = block_max(mi, red);
    float wi = (threadIdx.x < ns && mi != -LS_INF) ? exp2f(mi - M) : 0.0f;
    float L = block_sum(threadIdx.x < ns ? pp[threadIdx.x * (hd + 2) + hd + 1] * wi : 0.0f, red);
    if (threadIdx.x < ns) wt[threadIdx.x] = L > 0.0f ? wi / L : 0.0f;
    __syncthreads();
    u32 lane = threadIdx.x & 31, w = threadIdx.x >> 5, d = blockIdx.y * 32 + lane;
    float a = 0.0f;
    if (d < hd)
        for (u32 i = w; i < ns; i += 8)
            if (wt[i] != 0.0f) a += pp[i * (hd + 2) + d] * wt[i];
    part_sum[w][lane] = a;
    __syncthreads();
    if (w == 0) {
        float tot = 0.0f;
        for (u32 i = 0; i < 8; i++) tot += part_sum[i][lane];
        if constexpr (is_x8<O>::value) {
            x8_row_put32(out, p.n_heads * hd, h * hd + blockIdx.y * 32, d < hd ? tot : 0.0f);
        } else if (d < hd) {
            out[(u64)h * hd + d] = tot;
        }
    }
}
extern "C" __global__ void sparse_decode_attention_merge(AttentionParams p, const float* part, float* out, u32 n_splits) {
    merge_impl(p, part, out, n_splits);
}
extern "C" __global__ void sparse_decode_attention_merge_x8(AttentionParams p, const float* part, x8_t* out, u32 n_splits) {
    merge_impl(p, part, out, n_splits);
}
