// scale, in place: x[i] *= p.scale for i < p.n (f32).
extern "C" __global__ void scale(ScaleParams p, float* x) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < p.n; i += (u64)gridDim.x * blockDim.x) x[i] *= p.scale;
}
