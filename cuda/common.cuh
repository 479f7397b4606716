// Helpers shared by every kernel module (prepended after params.cuh): 16-bit float conversions
// without cuda_fp16.h/cuda_bf16.h (NVRTC then needs no CUDA include directory), typed loads of
// weights and KV (f32, f16 or bf16 storage; math is always f32), block reductions and the
// streaming-ring index. Storage types are plain structs so one template serves all three.

typedef unsigned short u16;
typedef unsigned long long u64;
#define STREAMING_BIT 0x80000000u
#define NONE_U32 0xffffffffu
#define LS_INF __int_as_float(0x7f800000)

struct bf16_t { u16 bits; };
struct f16_t { u16 bits; };

__device__ __forceinline__ float bf16_to_f32(u16 b) { return __uint_as_float(((u32)b) << 16); }
__device__ __forceinline__ u16 f32_to_bf16(float f) {
    u32 x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (u16)((x >> 16) | 0x40u); // quiet NaN
    x += 0x7fffu + ((x >> 16) & 1u); // round to nearest even
    return (u16)(x >> 16);
}
__device__ __forceinline__ float f16_to_f32(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ u16 f32_to_f16(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(bf16_t x) { return bf16_to_f32(x.bits); }
__device__ __forceinline__ float to_f32(f16_t x) { return f16_to_f32(x.bits); }
template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16_t from_f32<bf16_t>(float x) { bf16_t r; r.bits = f32_to_bf16(x); return r; }
template <> __device__ __forceinline__ f16_t from_f32<f16_t>(float x) { f16_t r; r.bits = f32_to_f16(x); return r; }

// Eight consecutive elements from a 16-byte aligned address of 16-bit storage, as f32.
__device__ __forceinline__ void load8(const bf16_t* p, float* out) {
    uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
    u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        out[2 * i] = __uint_as_float(w[i] << 16);
        out[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}
__device__ __forceinline__ void load8(const f16_t* p, float* out) {
    uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
    u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        out[2 * i] = f16_to_f32((u16)(w[i] & 0xffffu));
        out[2 * i + 1] = f16_to_f32((u16)(w[i] >> 16));
    }
}
// f32 storage: two 16-byte loads.
__device__ __forceinline__ void load8(const float* p, float* out) {
    float4 a = __ldg(reinterpret_cast<const float4*>(p));
    float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
    out[0] = a.x; out[1] = a.y; out[2] = a.z; out[3] = a.w;
    out[4] = b.x; out[5] = b.y; out[6] = b.z; out[7] = b.w;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ __forceinline__ float block_sum(float x, float* red) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    x = warp_sum(x);
    __syncthreads();
    if (lane == 0) red[w] = x;
    __syncthreads();
    x = lane < nw ? red[lane] : 0.0f;
    return warp_sum(x);
}
__device__ __forceinline__ float block_max(float x, float* red) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    x = warp_max(x);
    __syncthreads();
    if (lane == 0) red[w] = x;
    __syncthreads();
    x = lane < nw ? red[lane] : -LS_INF;
    return warp_max(x);
}

__device__ __forceinline__ u32 ring_index(u32 pos, u32 sink, u32 ring_tokens) {
    return pos < sink ? pos : sink + (pos - sink) % (ring_tokens - sink);
}
__device__ __forceinline__ u32 window_lo(u32 pos, u32 window) {
    return (window == 0u || pos + 1u <= window) ? 0u : pos + 1u - window;
}
