// gather_rows: out[i, :] = src[rows[i], :], [n_out][dim] f32; a row index >= n_src writes zeros.
extern "C" __global__ void gather_rows(GatherRowsParams p, const float* src, const u32* rows, float* out) {
    u32 i = blockIdx.y, d = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= p.n_out || d >= p.dim) return;
    u32 r = rows[i];
    out[(u64)i * p.dim + d] = r < p.n_src ? src[(u64)r * p.dim + d] : 0.0f;
}
