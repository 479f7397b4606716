// embed: out[i, :] = table[ids[i] - first, :] as f32. table [vocab][dim] (f32/f16/bf16) holding ids
// first .. first + vocab (a tensor-parallel rank's slice), ids [n_tokens] u32, out [n_tokens][dim]
// f32. Grid (ceil(dim/256), n_tokens); ids outside the table write zeros (another rank's rows, whose
// sum the all-reduce forms; the host checks ids against the whole vocabulary before the step).
template <typename W>
__device__ void embed_impl(EmbedParams p, const W* table, const u32* ids, float* out) {
    u32 t = blockIdx.y, d = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= p.n_tokens || d >= p.dim) return;
    u32 id = ids[t] - p.first;  // unsigned: ids below first wrap past vocab
    out[(u64)t * p.dim + d] = id < p.vocab ? to_f32(table[(u64)id * p.dim + d]) : 0.0f;
}
extern "C" __global__ void embed_f32(EmbedParams p, const float* t, const u32* ids, float* out) { embed_impl(p, t, ids, out); }
extern "C" __global__ void embed_f16(EmbedParams p, const f16_t* t, const u32* ids, float* out) { embed_impl(p, t, ids, out); }
extern "C" __global__ void embed_bf16(EmbedParams p, const bf16_t* t, const u32* ids, float* out) { embed_impl(p, t, ids, out); }

// Quantized tables (quant.cuh; the reference's f32 values exactly): GGML formats one thread per
// decode chunk of a row (grid (ceil(chunks per row / 64), n_tokens), block 64); the row-scaled
// types one thread per element like the float tables (grid (ceil(dim / 256), n_tokens)).
template <class Q>
__device__ void qembed_impl(EmbedParams p, const u8* t, const u32* ids, float* out) {
    u32 tok = blockIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;
    u32 nb = p.dim / Q::QK;
    if (tok >= p.n_tokens || c >= nb * Q::LANES) return;
    u32 id = ids[tok] - p.first, blk = c / Q::LANES;
    int sub = (int)(c % Q::LANES);
    float y[32 * Q::RUNS];
    if (id < p.vocab) {
        Q::template decode<true>(t + ((u64)id * nb + blk) * Q::BYTES, sub, y);
    } else {
#pragma unroll
        for (int i = 0; i < 32 * Q::RUNS; i++) y[i] = 0.0f;
    }
    float* o = out + (u64)tok * p.dim + (u64)blk * Q::QK;
#pragma unroll
    for (int run = 0; run < Q::RUNS; run++)
#pragma unroll
        for (int i = 0; i < 32; i++) o[Q::xoff(sub, run) + i] = y[32 * run + i];
}
template <bool FP8>
__device__ void rembed_impl(EmbedParams p, const u8* t, const u32* ids, float* out) {
    u32 tok = blockIdx.y, d = blockIdx.x * blockDim.x + threadIdx.x;
    if (tok >= p.n_tokens || d >= p.dim) return;
    u32 id = ids[tok] - p.first;
    float v = 0.0f;
    if (id < p.vocab) {
        float scale = __uint_as_float(ld_u32_a1(t + (u64)p.vocab * p.dim + 4ull * id));
        u32 c = t[(u64)id * p.dim + d];
        v = __fmul_rn(FP8 ? e4m3_f32(c) : qf_i8(c), scale);
    }
    out[(u64)tok * p.dim + d] = v;
}
#define QEMBED(fmt, Q) \
    extern "C" __global__ void embed_##fmt(EmbedParams p, const u8* t, const u32* ids, float* out) { qembed_impl<Q>(p, t, ids, out); }
QEMBED(q4_0, QQ4_0)
QEMBED(q4_1, QQ4_1)
QEMBED(q5_0, QQ5_0)
QEMBED(q5_1, QQ5_1)
QEMBED(q8_0, QQ8_0)
QEMBED(q4_k, QQ4_K)
QEMBED(q5_k, QQ5_K)
QEMBED(q6_k, QQ6_K)
QEMBED(q4_0p, QQ4_0P)
QEMBED(q5_0p, QQ5_0P)
QEMBED(q8_0p, QQ8_0P)
QEMBED(q4_1p, QQ4_1P)
QEMBED(q5_1p, QQ5_1P)
extern "C" __global__ void embed_int8(EmbedParams p, const u8* t, const u32* ids, float* out) { rembed_impl<false>(p, t, ids, out); }
extern "C" __global__ void embed_fp8(EmbedParams p, const u8* t, const u32* ids, float* out) { rembed_impl<true>(p, t, ids, out); }
