// argmax: out[r] = index of the max of row r of x [rows][n] f32, the lowest index on ties, NaN
// skipped (0 when the row has no number), as crate::sampling::argmax. One block per row.
__device__ __forceinline__ void better(float& v, u32& i, float v2, u32 i2) {
    bool take = (v2 == v2) && (v != v || v2 > v || (v2 == v && i2 < i));
    if (take) { v = v2; i = i2; }
}
extern "C" __global__ void argmax(ArgmaxParams p, const float* x, u32* out) {
    __shared__ float sv[32];
    __shared__ u32 si[32];
    const float* row = x + (u64)blockIdx.x * p.n;
    float v = __int_as_float(0x7fffffff);
    u32 idx = NONE_U32;
    for (u32 c = threadIdx.x; c < p.n; c += blockDim.x) better(v, idx, row[c], c);
    for (int o = 16; o > 0; o >>= 1) {
        float v2 = __shfl_xor_sync(0xffffffffu, v, o);
        u32 i2 = __shfl_xor_sync(0xffffffffu, idx, o);
        better(v, idx, v2, i2);
    }
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0) { sv[w] = v; si[w] = idx; }
    __syncthreads();
    if (w == 0) {
        v = lane < (int)(blockDim.x >> 5) ? sv[lane] : __int_as_float(0x7fffffff);
        idx = lane < (int)(blockDim.x >> 5) ? si[lane] : NONE_U32;
        for (int o = 16; o > 0; o >>= 1) {
            float v2 = __shfl_xor_sync(0xffffffffu, v, o);
            u32 i2 = __shfl_xor_sync(0xffffffffu, idx, o);
            better(v, idx, v2, i2);
        }
        if (lane == 0) out[blockIdx.x] = idx == NONE_U32 ? 0u : idx;
    }
}
