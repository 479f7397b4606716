// lambda_mass (calibration): for one sequence whose n_tokens queries are its last positions, the
// softmax mass each query head puts outside the Lambda mask, i.e. on keys sink..pos + 1 - local,
// with every KV head read from the retrieval pool (calibration runs dense; KT the KV dtype). q [n_tokens][n_heads]
// [head_dim] f32, out [n_tokens][n_heads] f32. One block per (row, head): pass 1 the max score,
// pass 2 the total and the outside sums (keys striped over threads, a full dot each).
template <typename KT>
__device__ void mass_impl(LambdaMassParams p, const float* q, const KT* k, const u32* head_map,
                                       const u32* page_indptr, const u32* page_table, const u32* kv_len, float* out,
                                       u32 page_table_len) {
    __shared__ float red[32];
    u32 t = blockIdx.x, h = blockIdx.y, hd = p.head_dim, ps = p.page_size;
    u32 len = kv_len[0];
    if (p.n_tokens > len) return;
    u32 pos = len - p.n_tokens + t;
    u32 kvh = h / (p.n_heads / p.n_kv_heads), hi = head_map[kvh] & ~STREAMING_BIT;
    const float* qr = q + ((u64)t * p.n_heads + h) * hd;
    u32 base = page_indptr[0];
    float mx = -LS_INF;
    for (int pass = 0; pass < 2; pass++) {
        float tot = 0.0f, outside = 0.0f;
        u32 o_hi = pos + 1 > p.local ? pos + 1 - p.local : 0;
        for (u32 kp = threadIdx.x; kp <= pos; kp += blockDim.x) {
            u32 at = base + kp / ps;
            if (at >= page_table_len || page_table[at] >= p.num_pages) continue;
            u64 el = (((u64)page_table[at] * p.n_kv_heads + hi) * ps + kp % ps) * hd;
            float d = 0.0f;
            for (u32 c = 0; c < hd; c++) d += qr[c] * kv_elem(k, el, c, ps, hd);
            d *= p.scale;
            if (pass == 0) { mx = fmaxf(mx, d); continue; }
            float e = expf(d - mx);
            tot += e;
            if (kp >= p.sink && kp < o_hi) outside += e;
        }
        if (pass == 0) {
            mx = block_max(mx, red);
        } else {
            tot = block_sum(tot, red);
            outside = block_sum(outside, red);
            if (threadIdx.x == 0) out[(u64)t * p.n_heads + h] = tot > 0.0f ? outside / tot : 0.0f;
        }
    }
}
#define LM(name, KT) \
    extern "C" __global__ void name(LambdaMassParams p, const float* q, const KT* k, const u32* head_map, \
                                    const u32* page_indptr, const u32* page_table, const u32* kv_len, float* out, \
                                    u32 ptl) { mass_impl<KT>(p, q, k, head_map, page_indptr, page_table, kv_len, out, ptl); }
LM(lambda_mass_f32, float)
LM(lambda_mass_f16, f16_t)
LM(lambda_mass_bf16, bf16_t)
LM(lambda_mass_int8, i8kv_t)
LM(lambda_mass_fp8, e4m3_t)
