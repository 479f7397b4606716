// argmax: out[r] = index of the max of row r of x [rows][n] f32, the lowest index on ties, NaN
// skipped (0 when the row has no number), as crate::sampling::argmax.
//
// Two passes (a batch-1 decode step's LM-head row is 128K logits, which one block read at ~15
// GB/s: 34 us of a 3 ms step on the H100, session 30): `argmax_part`, grid (rows, parts), block
// (r, j) takes elements [j * span, (j + 1) * span) of row r and writes its (value, index) to
// part[r][j]; then `argmax`, one block per row, reduces the row's parts. Both keep the rule
// above (`better`), so the result is the one-pass result: the first index of the max.
__device__ __forceinline__ void better(float& v, u32& i, float v2, u32 i2) {
    bool take = (v2 == v2) && (v != v || v2 > v || (v2 == v && i2 < i));
    if (take) { v = v2; i = i2; }
}
// The block's best (v, i) of its threads' (every thread calling); valid in thread 0.
__device__ __forceinline__ void block_best(float& v, u32& idx) {
    __shared__ float sv[32];
    __shared__ u32 si[32];
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
    }
}
// part [rows][gridDim.y] of (value bits, index) pairs, two words each; span = ceil(n / gridDim.y).
extern "C" __global__ void argmax_part(ArgmaxParams p, const float* x, u32* part) {
    const float* row = x + (u64)blockIdx.x * p.n;
    const u32 span = (p.n + gridDim.y - 1) / gridDim.y, c0 = blockIdx.y * span, c1 = min(p.n, c0 + span);
    float v = __int_as_float(0x7fffffff);
    u32 idx = NONE_U32;
    for (u32 c = c0 + threadIdx.x; c < c1; c += blockDim.x) better(v, idx, row[c], c);
    block_best(v, idx);
    if (threadIdx.x == 0) {
        u32* o = part + 2 * ((u64)blockIdx.x * gridDim.y + blockIdx.y);
        o[0] = __float_as_uint(v);
        o[1] = idx;
    }
}
// One block per row over its `parts` pairs.
extern "C" __global__ void argmax(ArgmaxParams p, const u32* part, u32* out, u32 parts) {
    float v = __int_as_float(0x7fffffff);
    u32 idx = NONE_U32;
    for (u32 j = threadIdx.x; j < parts; j += blockDim.x) {
        const u32* q = part + 2 * ((u64)blockIdx.x * parts + j);
        better(v, idx, __uint_as_float(q[0]), q[1]);
    }
    block_best(v, idx);
    if (threadIdx.x == 0) out[blockIdx.x] = idx == NONE_U32 ? 0u : idx;
}
