// sparse_decode_attention_merge: combine the n_splits partials of each (sequence, head) from
// part [num_seqs][n_heads][n_splits][head_dim + 2] (un-normalised accumulator, max m in the exp2
// domain, sum l) into out [num_seqs][n_heads][head_dim]; splits with m = -inf are empty. A
// (sequence, head) without any key writes zeros. One block per (sequence, head).
extern "C" __global__ void sparse_decode_attention_merge(AttentionParams p, const float* part, float* out, u32 n_splits) {
    u32 h = blockIdx.x, hd = p.head_dim;
    const float* pp = part + (u64)h * n_splits * (hd + 2);
    float M = -LS_INF;
    for (u32 i = 0; i < n_splits; i++) M = fmaxf(M, pp[i * (hd + 2) + hd]);
    float L = 0.0f;
    if (M != -LS_INF)
        for (u32 i = 0; i < n_splits; i++) {
            float mi = pp[i * (hd + 2) + hd];
            if (mi != -LS_INF) L += pp[i * (hd + 2) + hd + 1] * exp2f(mi - M);
        }
    for (u32 d = threadIdx.x; d < hd; d += blockDim.x) {
        float a = 0.0f;
        if (L > 0.0f)
            for (u32 i = 0; i < n_splits; i++) {
                float mi = pp[i * (hd + 2) + hd];
                if (mi != -LS_INF) a += pp[i * (hd + 2) + d] * exp2f(mi - M);
            }
        out[(u64)h * hd + d] = L > 0.0f ? a / L : 0.0f;
    }
}
