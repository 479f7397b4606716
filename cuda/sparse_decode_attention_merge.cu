// sparse_decode_attention_merge: combine the n_splits partials of each (sequence, head) from
// part [num_seqs][n_heads][n_splits][head_dim + 2] (un-normalised accumulator, max m in the exp2
// domain, sum l) into out [num_seqs][n_heads][head_dim]; splits with m = -inf are empty. A
// (sequence, head) without any key writes zeros. One block per (sequence, head): the block
// reduces the split maxima and weights (weights staged in shared memory, up to 256 splits), then
// each thread sums one dim over the splits with independent loads.
#define MERGE_MAX_SPLITS 256
extern "C" __global__ void sparse_decode_attention_merge(AttentionParams p, const float* part, float* out, u32 n_splits) {
    __shared__ float red[32];
    __shared__ float wt[MERGE_MAX_SPLITS];
    u32 h = blockIdx.x, hd = p.head_dim, ns = min(n_splits, (u32)MERGE_MAX_SPLITS);
    const float* pp = part + (u64)h * n_splits * (hd + 2);
    float mi = threadIdx.x < ns ? pp[threadIdx.x * (hd + 2) + hd] : -LS_INF;
    float M = block_max(mi, red);
    float w = (threadIdx.x < ns && mi != -LS_INF) ? exp2f(mi - M) : 0.0f;
    float L = block_sum(threadIdx.x < ns ? pp[threadIdx.x * (hd + 2) + hd + 1] * w : 0.0f, red);
    if (threadIdx.x < ns) wt[threadIdx.x] = L > 0.0f ? w / L : 0.0f;
    __syncthreads();
    for (u32 d = threadIdx.x; d < hd; d += blockDim.x) {
        float a = 0.0f;
#pragma unroll 8
        for (u32 i = 0; i < ns; i++) a += pp[i * (hd + 2) + d] * wt[i];
        out[(u64)h * hd + d] = a;
    }
}
