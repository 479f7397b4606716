// embed: out[i, :] = table[ids[i], :] as f32. table [vocab][dim] (f32/f16/bf16), ids [n_tokens]
// u32, out [n_tokens][dim] f32. Grid (ceil(dim/256), n_tokens); ids outside the vocabulary write
// zeros (the host checks ids it knows; device-made ids are clamped, never read out of bounds).
template <typename W>
__device__ void embed_impl(EmbedParams p, const W* table, const u32* ids, float* out) {
    u32 t = blockIdx.y, d = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= p.n_tokens || d >= p.dim) return;
    u32 id = ids[t];
    out[(u64)t * p.dim + d] = id < p.vocab ? to_f32(table[(u64)id * p.dim + d]) : 0.0f;
}
extern "C" __global__ void embed_f32(EmbedParams p, const float* t, const u32* ids, float* out) { embed_impl(p, t, ids, out); }
extern "C" __global__ void embed_f16(EmbedParams p, const f16_t* t, const u32* ids, float* out) { embed_impl(p, t, ids, out); }
extern "C" __global__ void embed_bf16(EmbedParams p, const bf16_t* t, const u32* ids, float* out) { embed_impl(p, t, ids, out); }
