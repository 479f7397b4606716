// fill_random: element i = offset + scale * u(seed, i), u a PCG hash mapped to [-1, 1) with exact
// f32 arithmetic (the same bits as params::fill_random_value); stored as f32 (dtype 0), f16 (1)
// or bf16 (2). Grid-stride loop.
extern "C" __global__ void fill_random(FillRandomParams p, void* out) {
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < p.n; i += gridDim.x * blockDim.x) {
        u32 h = i * 747796405u + 2891336453u ^ p.seed * 0x9E3779B9u;
        h = ((h >> ((h >> 28) + 4u)) ^ h) * 277803737u;
        h = (h >> 22) ^ h;
        float u = __fsub_rn(__fmul_rn((float)(h >> 8), 1.0f / 8388608.0f), 1.0f);
        float v = __fadd_rn(p.offset, __fmul_rn(p.scale, u));
        if (p.dtype == 0u) ((float*)out)[i] = v;
        else if (p.dtype == 1u) ((u16*)out)[i] = f32_to_f16(v);
        else ((u16*)out)[i] = f32_to_bf16(v);
    }
}
