// add: a[i] += b[i] for i < n (f32). Grid-stride loop.
extern "C" __global__ void add(AddParams p, float* a, const float* b) {
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < p.n; i += gridDim.x * blockDim.x) a[i] += b[i];
}
