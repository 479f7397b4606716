// silu_mul: gate_up [rows][2 dim] (gate | up) f32 -> out [rows][dim] = silu(gate) * up, out f32
// or f16/bf16 (rounded to nearest even: the x of the down projection's 16-bit GEMM,
// Caps::act16_from). silu_mul_<f16|bf16>_in: gate_up in that 16-bit dtype as the gate|up GEMM
// wrote it (Backend::matmul_out16_dtype), out the same dtype (`_in8`: 8 columns a thread,
// below). Grid: x covers a row's columns, 4 a
// thread (16- or 8-byte loads when dim % 4 == 0, rows then aligned), y strides the rows — no
// per-element 64-bit division.
// silu_mul_x8: one row (dim % 4 == 0) as x8 digits (DType::X8, Caps::act_x8_dtypes): thread c
// of the grid takes word c (the same f32 values as silu_mul_f32), whole warps while their first
// word is below the row's 8 nxb words (x8_quantize4's shuffles), words past dim / 4 zero.
__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }
// silu(g) * u of four columns.
__device__ __forceinline__ float4 silu_mul4(float4 g, float4 u) {
    return make_float4(silu(g.x) * u.x, silu(g.y) * u.y, silu(g.z) * u.z, silu(g.w) * u.w);
}
template <typename O>
__device__ __forceinline__ void silu_store(O* o, float g, float u) { *o = from_f32<O>(silu(g) * u); }

template <typename G, typename O>
__device__ void silu_mul_impl(SiluMulParams p, const G* __restrict__ gu, O* __restrict__ out) {
    u32 c = 4 * (blockIdx.x * blockDim.x + threadIdx.x);
    if (c >= p.dim) return;
    bool vec = (p.dim & 3) == 0;
    for (u32 r = blockIdx.y; r < p.rows; r += gridDim.y) {
        const G* g = gu + (u64)r * 2 * p.dim;
        const G* up = g + p.dim;
        O* o = out + (u64)r * p.dim;
        if (vec) {
            store4(o + c, silu_mul4(load4(g + c), load4(up + c)));
        } else {
            for (u32 j = c; j < c + 4 && j < p.dim; j++) silu_store(o + j, to_f32(g[j]), to_f32(up[j]));
        }
    }
}
extern "C" __global__ void silu_mul_f32(SiluMulParams p, const float* gu, float* out) { silu_mul_impl(p, gu, out); }
extern "C" __global__ void silu_mul_f16(SiluMulParams p, const float* gu, f16_t* out) { silu_mul_impl(p, gu, out); }
extern "C" __global__ void silu_mul_bf16(SiluMulParams p, const float* gu, bf16_t* out) { silu_mul_impl(p, gu, out); }
extern "C" __global__ void silu_mul_f16_in(SiluMulParams p, const f16_t* gu, f16_t* out) { silu_mul_impl(p, gu, out); }
extern "C" __global__ void silu_mul_bf16_in(SiluMulParams p, const bf16_t* gu, bf16_t* out) { silu_mul_impl(p, gu, out); }

// silu(g) * u of the two 16-bit values packed in each word, rounded and packed the same way (the
// values silu_mul_impl makes of them).
template <typename T>
__device__ __forceinline__ u32 silu_mul_word(u32 g, u32 u) {
    const T g0 = {(u16)(g & 0xffffu)}, g1 = {(u16)(g >> 16)}, u0 = {(u16)(u & 0xffffu)}, u1 = {(u16)(u >> 16)};
    return (u32)from_f32<T>(silu(to_f32(g0)) * to_f32(u0)).bits | ((u32)from_f32<T>(silu(to_f32(g1)) * to_f32(u1)).bits << 16);
}
// silu_mul_<f16|bf16>_in8: as silu_mul_<f16|bf16>_in with 8 columns a thread (16-byte loads and
// store: dim % 8 == 0 and 16-byte aligned buffers, checked by the host), for prefill's wide rows.
template <typename T>
__device__ void silu_mul_in8_impl(SiluMulParams p, const T* __restrict__ gu, T* __restrict__ out) {
    const u32 c = 8 * (blockIdx.x * blockDim.x + threadIdx.x);
    if (c >= p.dim) return;
    for (u32 r = blockIdx.y; r < p.rows; r += gridDim.y) {
        const T* g = gu + (u64)r * 2 * p.dim + c;
        const uint4 a = *reinterpret_cast<const uint4*>(g), b = *reinterpret_cast<const uint4*>(g + p.dim);
        const uint4 o = make_uint4(silu_mul_word<T>(a.x, b.x), silu_mul_word<T>(a.y, b.y), silu_mul_word<T>(a.z, b.z),
                                   silu_mul_word<T>(a.w, b.w));
        *reinterpret_cast<uint4*>(out + (u64)r * p.dim + c) = o;
    }
}
extern "C" __global__ void silu_mul_f16_in8(SiluMulParams p, const f16_t* gu, f16_t* out) { silu_mul_in8_impl(p, gu, out); }
extern "C" __global__ void silu_mul_bf16_in8(SiluMulParams p, const bf16_t* gu, bf16_t* out) { silu_mul_in8_impl(p, gu, out); }
extern "C" __global__ void silu_mul_x8(SiluMulParams p, const float* __restrict__ gu, x8_t* __restrict__ out) {
    const u32 c = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x & 31;
    if (c - lane >= 8 * ((p.dim + 31) / 32)) return;
    float4 y = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (c < p.dim / 4) y = silu_mul4(reinterpret_cast<const float4*>(gu)[c], reinterpret_cast<const float4*>(gu + p.dim)[c]);
    const float v[4] = {y.x, y.y, y.z, y.w};
    x8_row_put(out, p.dim, c, v);
}
