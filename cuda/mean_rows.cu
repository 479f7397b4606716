// mean_rows: out[i, :] = the mean of src rows indptr[i] .. indptr[i + 1] ([n_src][dim] f32), summed
// in row order in f32 then divided by the count (the CPU reference's order, so the result is the
// same bit for bit); an empty range (or one past n_src, which the host refuses) gives zeros.
// Grid (dim / 256, n_out): one thread per column of one output row.
extern "C" __global__ void mean_rows(MeanRowsParams p, const float* src, const u32* indptr, float* out) {
    u32 i = blockIdx.y, d = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= p.n_out || d >= p.dim) return;
    u32 a = indptr[i], b = min(indptr[i + 1], p.n_src);
    float s = 0.0f;
    // Eight rows' loads in flight at a time, added in row order (one load at a time left a
    // 128-row block's mean latency-bound: 58 us for 8,192 rows of 4,096 on an H100, session 32).
    u32 r = a;
    for (; r + 8 <= b; r += 8) {
        float x[8];
#pragma unroll
        for (int i = 0; i < 8; i++) x[i] = src[(u64)(r + i) * p.dim + d];
#pragma unroll
        for (int i = 0; i < 8; i++) s = __fadd_rn(s, x[i]);
    }
    for (; r < b; r++) s = __fadd_rn(s, src[(u64)r * p.dim + d]);
    out[(u64)i * p.dim + d] = b > a ? __fdiv_rn(s, (float)(b - a)) : 0.0f;
}
