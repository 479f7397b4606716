// mean_rows: out[i, :] = the mean of src rows indptr[i] .. indptr[i + 1] ([n_src][dim] f32), summed
// in row order in f32 then divided by the count (the CPU reference's order, so the result is the
// same bit for bit); an empty range (or one past n_src, which the host refuses) gives zeros.
// Grid (dim / 256, n_out): one thread per column of one output row.
extern "C" __global__ void mean_rows(MeanRowsParams p, const float* src, const u32* indptr, float* out) {
    u32 i = blockIdx.y, d = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= p.n_out || d >= p.dim) return;
    u32 a = indptr[i], b = min(indptr[i + 1], p.n_src);
    float s = 0.0f;
    for (u32 r = a; r < b; r++) s = __fadd_rn(s, src[(u64)r * p.dim + d]);
    out[(u64)i * p.dim + d] = b > a ? __fdiv_rn(s, (float)(b - a)) : 0.0f;
}
