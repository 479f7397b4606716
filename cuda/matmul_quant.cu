// matmul over quantized weights (the formats of quant.cuh: GGML Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K
// Q5_K Q6_K; the row-scaled int8 / fp8 [n][k] codes then [n] f32 scales): out[out_off + r * ldo +
// c] = x[r, :] . w[c, :] (+ bias[c]), x / out / bias f32. src/backend/cuda/ops_matmul.rs picks:
//
// - m == 1 (a batch-1 decode step), every format but fp8: matmul_gemv_<fmt>_m1, the integer-dot
//   GEMV (the idea of llama.cpp's mmvq, our code). Each block first quantizes x into shared memory
//   per block of 32 as two int8 digits (x = d (hi + lo / 254), d = max|x| / 127: ~16 bits; see
//   mmv_quantize_x) with the f32 sum of the block's x (for the formats with a min term), then one
//   warp per weight row (up to Q::RM rows): lane l always takes slice l % Q::SL of every
//   (32 / Q::SL)-th block, so the lanes of a warp read neighbouring bytes of the row (16-byte loads
//   where the block's alignment allows, u16 pairs where not), decode the block's scales once per
//   slice and multiply 4 codes at a time with __dp4a against both digits; f32 d_w * d_x * (h + l /
//   254) per slice, one warp_sum. Signed offsets (Q4_0 -8, Q5_0 -16, Q6_K -32) are folded into
//   the codes before the dot; min terms use the exact f32 sums of x. A variant for measurement
//   (LSERVE_CUDA_MMV=pre, ops_matmul.rs MmvMode; in-block stays the default until it is
//   measured): matmul_quantize_x_m1 quantizes x once per call into a scratch in the same layout and
//   matmul_gemv_<fmt>_m1_pre copy it into shared memory instead of quantizing it per block (the
//   section "x quantized once per call" below); same digits, same dot code, so the same results.
//   For Q4_K, Q5_K and int8 rows, matmul_gemv_<fmt>_m1_reg[f] hold x in registers instead (the
//   section "x in registers" below; LSERVE_CUDA_MMV=reg|regf, the default for these three).
// - 2 <= m <= 64, every format but fp8: the tensor-core MMQ GEMM of matmul_mmq.cu.
// - fp8 at m <= 16 (and m == 1 where x does not fit the _m1 kernels' shared memory):
//   matmul_gemv_<fmt>_m16 — one warp per weight row, all m rows
//   of x at once in f32, so each weight byte is read exactly once per call; lanes take the row's
//   decode chunks (a whole 32-weight block, or a quarter of a K-quant super-block: 64 weights) in
//   turn, dequantize them in registers (quant.cuh) and multiply with x in f32 (float4 loads), f32
//   accumulation, one warp_sum per x row. Block: 256 threads = 8 weight rows.
// - m > 64 (fp8: m > 16): matmul_dequant_<fmt> writes rows row0 .. row0 + p.n of the weight as f16 (the
//   reference's f32 values, rounded to nearest even) into a scratch [p.n][k], which the host then
//   multiplies with x rounded to f16 in one cuBLAS tensor-core GEMM per chunk of rows. (f16, not
//   bf16: 3 more mantissa bits; with both operands in bf16 a k = 4096 dot product missed the
//   2e-2 parity tolerance on the H200, docs/backends.md.)
//
// Row-scaled types: the GEMVs multiply the codes and apply the row's scale once at the end
// (16-byte code loads when k % 16 == 0, else byte loads).

template <class Q, int MT>
__device__ void qgemv_impl(MatmulParams p, const float* x, const u8* w, const float* bias, float* out) {
    u32 lane = threadIdx.x & 31;
    u32 n = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (n >= p.n) return;
    u32 nb = p.k / Q::QK, chunks = nb * Q::LANES;
    const u8* row = w + (u64)n * nb * Q::BYTES;
    float acc[MT];
#pragma unroll
    for (int r = 0; r < MT; r++) acc[r] = 0.0f;
    for (u32 c = lane; c < chunks; c += 32) {
        u32 blk = c / Q::LANES;
        int sub = (int)(c % Q::LANES);
        float y[32 * Q::RUNS];
        Q::template decode<false>(row + (u64)blk * Q::BYTES, sub, y);
#pragma unroll
        for (int r = 0; r < MT; r++) {
            if (r < (int)p.m) {
#pragma unroll
                for (int run = 0; run < Q::RUNS; run++) {
                    const float4* xr =
                        reinterpret_cast<const float4*>(x + (u64)r * p.k + (u64)blk * Q::QK + Q::xoff(sub, run));
                    float s = 0.0f;
#pragma unroll
                    for (int i = 0; i < 8; i++) {
                        float4 a = __ldg(xr + i);
                        const float* yy = y + 32 * run + 4 * i;
                        s = fmaf(yy[0], a.x, s);
                        s = fmaf(yy[1], a.y, s);
                        s = fmaf(yy[2], a.z, s);
                        s = fmaf(yy[3], a.w, s);
                    }
                    acc[r] += s;
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < MT; r++) {
        float s = warp_sum(acc[r]);
        if (lane == 0 && r < (int)p.m) mm_put(p, out, bias, (u64)r * p.ldo + n, n, s);
    }
}

__device__ __forceinline__ float row_code(bool fp8, u32 c) { return fp8 ? e4m3_f32(c) : qf_i8(c); }

template <bool FP8, int MT>
__device__ void rgemv_impl(MatmulParams p, const float* x, const u8* w, const float* bias, float* out) {
    u32 lane = threadIdx.x & 31;
    u32 n = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (n >= p.n) return;
    const u8* row = w + (u64)n * p.k;
    float scale = __uint_as_float(ld_u32_a1(w + (u64)p.n * p.k + 4ull * n));
    float acc[MT];
#pragma unroll
    for (int r = 0; r < MT; r++) acc[r] = 0.0f;
    if ((p.k & 15u) == 0u) {
        for (u32 c = lane; c < (p.k >> 4); c += 32) {
            uint4 v = __ldg(reinterpret_cast<const uint4*>(row) + c);
            u32 q[4] = {v.x, v.y, v.z, v.w};
            float y[16];
#pragma unroll
            for (int j = 0; j < 16; j++) y[j] = row_code(FP8, byte_of(q, j));
#pragma unroll
            for (int r = 0; r < MT; r++) {
                if (r < (int)p.m) {
                    const float4* xr = reinterpret_cast<const float4*>(x + (u64)r * p.k + 16ull * c);
                    float s = 0.0f;
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        float4 a = __ldg(xr + i);
                        s = fmaf(y[4 * i], a.x, s);
                        s = fmaf(y[4 * i + 1], a.y, s);
                        s = fmaf(y[4 * i + 2], a.z, s);
                        s = fmaf(y[4 * i + 3], a.w, s);
                    }
                    acc[r] += s;
                }
            }
        }
    } else {
        for (u32 c = lane; c < p.k; c += 32) {
            float y = row_code(FP8, __ldg(row + c));
#pragma unroll
            for (int r = 0; r < MT; r++)
                if (r < (int)p.m) acc[r] = fmaf(y, x[(u64)r * p.k + c], acc[r]);
        }
    }
#pragma unroll
    for (int r = 0; r < MT; r++) {
        float s = warp_sum(acc[r]) * scale;
        if (lane == 0 && r < (int)p.m) mm_put(p, out, bias, (u64)r * p.ldo + n, n, s);
    }
}

// Weight rows row0 .. row0 + p.n (p.n = the chunk's rows) as f16 into w16 [p.n][k]. A block of
// DQ_THREADS threads takes a span of DQ_THREADS consecutive decode chunks (grid-stride over spans):
// each thread decodes its chunk into shared memory, then the block stores the span, which is one
// contiguous run of w16 (the chunks of a row are whole blocks in order, and a span starts on a
// block: LANES divides DQ_THREADS), with consecutive threads writing consecutive 16-byte words.
// (Each thread storing its own 32-element runs had a warp's store touch 16 bytes of every 64-128:
// ~640 GB/s on the H100, docs/benchmarks.md session 26.) The staging is padded one word in nine so
// that neither the chunk-strided writes nor the sequential reads meet in a bank.
#define DQ_THREADS 256
__device__ __forceinline__ u32 dq_pad(u32 q) { return q + (q >> 3); }
template <class Q>
__device__ void qdequant_impl(MatmulParams p, const u8* w, f16_t* w16, u32 row0) {
    const u32 NE = 32 * Q::RUNS; // elements per chunk (LANES * NE = QK)
    __shared__ uint4 span[DQ_THREADS * NE / 8 + DQ_THREADS * NE / 64];
    const u32 nb = p.k / Q::QK, per_row = nb * Q::LANES;
    const u64 total = (u64)p.n * per_row;
    uint4* out = reinterpret_cast<uint4*>(w16);
    for (u64 c0 = (u64)blockIdx.x * DQ_THREADS; c0 < total; c0 += (u64)gridDim.x * DQ_THREADS) {
        const u64 i = c0 + threadIdx.x;
        if (i < total) {
            u64 r = i / per_row;
            u32 c = (u32)(i % per_row), blk = c / Q::LANES;
            int sub = (int)(c % Q::LANES);
            float y[NE];
            Q::template decode<true>(w + ((u64)(row0 + r) * nb + blk) * Q::BYTES, sub, y);
            const u32 base = (threadIdx.x / Q::LANES) * Q::QK;
#pragma unroll
            for (int run = 0; run < Q::RUNS; run++)
#pragma unroll
                for (int i8 = 0; i8 < 4; i8++) {
                    const float* v = y + 32 * run + 8 * i8;
                    uint4 pk;
                    pk.x = (u32)f32_to_f16(v[0]) | ((u32)f32_to_f16(v[1]) << 16);
                    pk.y = (u32)f32_to_f16(v[2]) | ((u32)f32_to_f16(v[3]) << 16);
                    pk.z = (u32)f32_to_f16(v[4]) | ((u32)f32_to_f16(v[5]) << 16);
                    pk.w = (u32)f32_to_f16(v[6]) | ((u32)f32_to_f16(v[7]) << 16);
                    span[dq_pad((base + Q::xoff(sub, run)) / 8 + i8)] = pk;
                }
        }
        __syncthreads();
        const u64 chunks = total - c0 < DQ_THREADS ? total - c0 : DQ_THREADS;
        const u32 words = (u32)chunks * (NE / 8);
        for (u32 q = threadIdx.x; q < words; q += DQ_THREADS) out[c0 * (NE / 8) + q] = span[dq_pad(q)];
        __syncthreads();
    }
}

// Row-scaled types: one thread per weight, grid-stride; n_total = the matrix's rows (where the
// scales start).
template <bool FP8>
__device__ void rdequant_impl(MatmulParams p, const u8* w, f16_t* w16, u32 row0, u32 n_total) {
    u64 total = (u64)p.n * p.k;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < total; i += (u64)gridDim.x * blockDim.x) {
        u64 r = row0 + i / p.k;
        float scale = __uint_as_float(ld_u32_a1(w + (u64)n_total * p.k + 4 * r));
        float v = __fmul_rn(row_code(FP8, __ldg(w + r * p.k + i % p.k)), scale);
        w16[i].bits = f32_to_f16(v);
    }
}

// ---- m == 1: x as two int8 digits per element in shared memory, integer dots ----
//
// x is quantized per block of 32 elements: d = max|x| / 127, hi = round(x / d), lo = round((x -
// d hi) / (d / 254)) (|lo| <= 127), so x = d (hi + lo / 254) within d / 508 = max|x| / 64516 (about
// 16 bits; one int8 digit alone, llama.cpp's q8_1, moved the default model's greedy ids on CUDA
// away from the f32 reference). A weight word's dot with x is two __dp4a, one per digit.
// Dynamic shared memory of the _m1 kernels (mmv_smem_bytes on the host: 80 bytes per 32 elements
// of k, rounded up): the hi digits int[9 * nxb], then the lo digits int[9 * nxb], then float2
// xds[nxb] = (d, f32 sum of the block's x). Word e of x block b (elements 32b + 4e .. + 3, packed
// 4 per int; elements past k are 0) sits at 9b + e: the pad word spreads the lanes of a K-quant
// slice, which read the same word of x blocks 2l apart, over the banks (unpadded, 16 lanes hit one
// bank). XQ addresses both planes.
struct XQ {
    const int* p;
    u32 lo; // the lo plane's offset from the hi plane, in ints
    __device__ __forceinline__ int2 operator[](u32 i) const { return make_int2(p[i], p[i + lo]); }
    __device__ __forceinline__ XQ operator+(u32 o) const { return XQ{p + o, lo}; }
};

// x[0 .. k] into xq / xds, 8 lanes per x block: thread t of `threads` (whole warps, every one
// taking part) quantizes x words t, t + threads, ... — the block's threads in the in-block
// prologue, the grid's in matmul_quantize_x_m1, so both write the same digits (same lanes, same
// x8_quantize4; PAD as x8_put).
template <bool PAD>
__device__ __forceinline__ void mmv_quantize_x(const float* x, u32 k, int* xq, u32 lo_off, float2* xds, u32 t, u32 threads) {
    u32 nxb = (k + 31) / 32, words = 8 * nxb, lane = threadIdx.x & 31;
    for (u32 base = t & ~31u; base < words; base += threads) {
        u32 e4 = base + lane, e = 4 * e4;
        float v[4];
        if ((k & 3u) == 0u && e < k) {
            float4 a = __ldg(reinterpret_cast<const float4*>(x) + e4);
            v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
        } else {
#pragma unroll
            for (int i = 0; i < 4; i++) v[i] = e + i < k ? __ldg(x + e + i) : 0.0f;
        }
        x8_put<PAD>(xq, lo_off, xds, nxb, e4, v);
    }
}

// One weight word (4 signed or unsigned-below-128 codes) times both digits of an x word.
__device__ __forceinline__ void dp4a2(u32 w, int2 x, int& h, int& l) {
    h = __dp4a((int)w, x.x, h);
    l = __dp4a((int)w, x.y, l);
}

// (A variant that staged each warp's run of 2-byte-aligned blocks through shared memory with
// coalesced 16-byte loads was measured slower on the H200 — 8B shape, 32K sparse: Q8_0 4.84 vs
// 4.57 ms, Q6_K 5.06 vs 4.73 — its shared-memory u16 reads cost the same LSU issue slots as the
// global ones.)

// The value of one 32-weight block's slice sl: codes lo (elements 4sl..) and hi (16 + 4sl..) times
// both x digits, scale d, min m (0 for the formats whose offset is folded into the codes; the
// slice's share of the min term is a quarter of the block's exact x sum).
__device__ __forceinline__ float mq32(u32 lo, u32 hi, float d, float m, int sl, XQ xq, const float2* xds) {
    int h = 0, l = 0;
    dp4a2(lo, xq[sl], h, l);
    dp4a2(hi, xq[4 + sl], h, l);
    float2 xd = xds[0];
    return d * xd.x * xsum(h, l) + 0.25f * m * xd.y;
}

// Per format: SL slices per block, RM the most rows per warp; dot(b, sl, xq, xds) = slice sl of block b
// times x, where xq / xds point at the x block of the weight block's first element. The slices of
// a block together cover it once (min terms as the slice's share of the block's exact x sum).
struct MQ4_0 {
    static const int QK = 32, BYTES = 18, SL = 4, RM = 1;
    static __device__ __forceinline__ float dot(const u8* b, int sl, XQ xq, const float2* xds) {
        u32 q = ld_u32_a2(b + 2 + 4 * sl);
        return mq32(sub_bytes(q & LO4, 0x08080808u), sub_bytes((q >> 4) & LO4, 0x08080808u), ld_f16_a2(b), 0.0f, sl, xq, xds);
    }
};
struct MQ4_1 {
    static const int QK = 32, BYTES = 20, SL = 4, RM = 1;
    static __device__ __forceinline__ float dot(const u8* b, int sl, XQ xq, const float2* xds) {
        u32 dm = __ldg(reinterpret_cast<const u32*>(b)), q = __ldg(reinterpret_cast<const u32*>(b + 4) + sl);
        float d = f16_to_f32((u16)(dm & 0xffffu)), m = f16_to_f32((u16)(dm >> 16));
        return mq32(q & LO4, (q >> 4) & LO4, d, m, sl, xq, xds);
    }
};
struct MQ5_0 {
    static const int QK = 32, BYTES = 22, SL = 4, RM = 1;
    static __device__ __forceinline__ float dot(const u8* b, int sl, XQ xq, const float2* xds) {
        u32 qh = ld_u32_a2(b + 2), q = ld_u32_a2(b + 6 + 4 * sl);
        u32 lo = (q & LO4) | bit4_bytes(qh >> (4 * sl)), hi = ((q >> 4) & LO4) | bit4_bytes(qh >> (4 * sl + 16));
        return mq32(sub_bytes(lo, 0x10101010u), sub_bytes(hi, 0x10101010u), ld_f16_a2(b), 0.0f, sl, xq, xds);
    }
};
struct MQ5_1 {
    static const int QK = 32, BYTES = 24, SL = 4, RM = 1;
    static __device__ __forceinline__ float dot(const u8* b, int sl, XQ xq, const float2* xds) {
        uint2 hd = __ldg(reinterpret_cast<const uint2*>(b));
        u32 q = __ldg(reinterpret_cast<const u32*>(b + 8) + sl);
        u32 lo = (q & LO4) | bit4_bytes(hd.y >> (4 * sl)), hi = ((q >> 4) & LO4) | bit4_bytes(hd.y >> (4 * sl + 16));
        float d = f16_to_f32((u16)(hd.x & 0xffffu)), m = f16_to_f32((u16)(hd.x >> 16));
        return mq32(lo, hi, d, m, sl, xq, xds);
    }
};
struct MQ8_0 {
    static const int QK = 32, BYTES = 34, SL = 4, RM = 1;
    static __device__ __forceinline__ float dot(const u8* b, int sl, XQ xq, const float2* xds) {
        u32 q0 = ld_u32_a2(b + 2 + 8 * sl), q1 = ld_u32_a2(b + 6 + 8 * sl);
        int h = 0, l = 0;
        dp4a2(q0, xq[2 * sl], h, l);
        dp4a2(q1, xq[2 * sl + 1], h, l);
        return ld_f16_a2(b) * xds[0].x * xsum(h, l);
    }
};
// The packed 32-element formats (quant.cuh QQP) slice sl: GGML block sl of the super-block (x
// block 8 sb + sl), its codes as one or two 16-byte loads; Q4_1 / Q5_1's min times the block's
// exact x sum.
template <int KIND>
struct MQP {
    static const int QK = 256, BYTES = PQ<KIND>::BYTES, SL = 8, RM = 2;
    static __device__ __forceinline__ float dot(const u8* b, int sl, XQ xq, const float2* xds) {
        const uint4* qp = reinterpret_cast<const uint4*>(b + PQ<KIND>::QS + PQ<KIND>::QB * sl);
        XQ xa = xq + 9 * sl;
        int h = 0, l = 0;
        uint4 qa = __ldg(qp);
        u32 q[4] = {qa.x, qa.y, qa.z, qa.w};
        if (KIND == 2) {
            uint4 qb = __ldg(qp + 1);
            u32 q2[4] = {qb.x, qb.y, qb.z, qb.w};
#pragma unroll
            for (int i = 0; i < 4; i++) {
                dp4a2(q[i], xa[i], h, l);
                dp4a2(q2[i], xa[4 + i], h, l);
            }
        } else {
            u32 qh = PQ<KIND>::QH ? __ldg(reinterpret_cast<const u32*>(b + PQ<KIND>::HO + 4 * sl)) : 0u;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                u32 lo, hi;
                p4_codes<KIND>(q[i], qh, i, lo, hi);
                dp4a2(lo, xa[i], h, l);
                dp4a2(hi, xa[4 + i], h, l);
            }
        }
        float v = ld_f16_a2(b + 2 * sl) * xds[sl].x * xsum(h, l);
        return PQ<KIND>::MIN ? fmaf(ld_f16_a2(b + PQ<KIND>::MO + 2 * sl), xds[sl].y, v) : v;
    }
};
typedef MQP<0> MQ4_0P;
typedef MQP<1> MQ5_0P;
typedef MQP<2> MQ8_0P;
typedef MQP<3> MQ4_1P;
typedef MQP<4> MQ5_1P;
// Q4_K / Q5_K slice g (0..3): the 64 weights of chunk g, sub-blocks 2g (low nibbles of code
// bytes 32g .. 32g + 32) and 2g + 1 (high nibbles); Q5_K's fifth bits are bits 2g / 2g + 1 of
// qh[0 .. 32]. The 6-bit scales and mins of both sub-blocks without a branch (lanes of one warp
// take different g): with the 12 scale bytes as 16-bit words W(i), hi = g / 2, e = g % 2,
// g < 2: scales W(g) & 0x3f3f, mins W(g + 2) & 0x3f3f; g >= 2: scales (W(g + 2) & 0x0f0f) |
// ((W(g - 2) & 0xc0c0) >> 2), mins ((W(g + 2) >> 4) & 0x0f0f) | ((W(g) & 0xc0c0) >> 2)
// (ggml's get_scale_min_k4 for j = 2g, 2g + 1, two at a time).
template <bool Q5>
__device__ __forceinline__ float mq_k(const u8* b, int g, XQ xq, const float2* xds) {
    uint4 h = __ldg(reinterpret_cast<const uint4*>(b));
    u32 sh = 16u * (u32)(g & 1), w0 = (h.y >> sh) & 0xffffu, w1 = (h.z >> sh) & 0xffffu, w2 = (h.w >> sh) & 0xffffu;
    bool hi = g >= 2;
    u32 scs = hi ? (w2 & 0x0f0fu) | ((w0 & 0xc0c0u) >> 2) : w0 & 0x3f3fu;
    u32 mns = hi ? ((w2 >> 4) & 0x0f0fu) | ((w1 & 0xc0c0u) >> 2) : w1 & 0x3f3fu;
    const uint4* qp = reinterpret_cast<const uint4*>(b + (Q5 ? 48 : 16) + 32 * g);
    uint4 qa = __ldg(qp), qb = __ldg(qp + 1);
    u32 q[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w}, hb[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (Q5) {
        const uint4* hp = reinterpret_cast<const uint4*>(b + 16);
        uint4 ha = __ldg(hp), hc = __ldg(hp + 1);
        hb[0] = ha.x; hb[1] = ha.y; hb[2] = ha.z; hb[3] = ha.w; hb[4] = hc.x; hb[5] = hc.y; hb[6] = hc.z; hb[7] = hc.w;
    }
    XQ xa = xq + 18 * g; // x blocks 2g, 2g + 1
    int h0 = 0, l0 = 0, h1 = 0, l1 = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        u32 lo = q[i] & LO4, hi4 = (q[i] >> 4) & LO4;
        if (Q5) {
            lo |= ((hb[i] >> (2 * g)) & 0x01010101u) << 4;
            hi4 |= ((hb[i] >> (2 * g + 1)) & 0x01010101u) << 4;
        }
        dp4a2(lo, xa[i], h0, l0);
        dp4a2(hi4, xa[9 + i], h1, l1);
    }
    float d = f16_to_f32((u16)(h.x & 0xffffu)), dmin = f16_to_f32((u16)(h.x >> 16));
    float2 x0 = xds[2 * g], x1 = xds[2 * g + 1];
    float dot = qf(scs & 0xffu) * x0.x * xsum(h0, l0) + qf(scs >> 8) * x1.x * xsum(h1, l1);
    float mins = qf(mns & 0xffu) * x0.y + qf(mns >> 8) * x1.y;
    return d * dot - dmin * mins;
}
struct MQ4_K {
    static const int QK = 256, BYTES = 144, SL = 4, RM = 2;
    static __device__ __forceinline__ float dot(const u8* b, int sl, XQ xq, const float2* xds) {
        return mq_k<false>(b, sl, xq, xds);
    }
};
struct MQ5_K {
    static const int QK = 256, BYTES = 176, SL = 4, RM = 2;
    static __device__ __forceinline__ float dot(const u8* b, int sl, XQ xq, const float2* xds) {
        return mq_k<true>(b, sl, xq, xds);
    }
};
// Q6_K slice sl: half n = sl / 4 (128 weights), positions l = l0 .. l0 + 8 (l0 = 8 (sl % 4), one
// 16-position scale group is = l0 / 16) of its 32: elements 128n + 32i + l for i = 0..3 (x block
// 4n + i), scales sc[8n + is + 2i].
struct MQ6_K {
    static const int QK = 256, BYTES = 210, SL = 8, RM = 1;
    static __device__ __forceinline__ float dot(const u8* b, int sl, XQ xq, const float2* xds) {
        int n = sl >> 2, l0 = 8 * (sl & 3), is = l0 >> 4;
        const u8* pa = b + 64 * n + l0;
        const u8* ph = b + 128 + 32 * n + l0;
        u32 qa[2] = {ld_u32_a2(pa), ld_u32_a2(pa + 4)}, qb[2] = {ld_u32_a2(pa + 32), ld_u32_a2(pa + 36)};
        u32 qh[2] = {ld_u32_a2(ph), ld_u32_a2(ph + 4)};
        u32 sw[2] = {ld_u32_a2(b + 192 + 8 * n), ld_u32_a2(b + 196 + 8 * n)};
        XQ xa = xq + 36 * n + (l0 >> 2); // x block 4n, word l0 / 4
        float acc = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int h = 0, l = 0;
#pragma unroll
            for (int e = 0; e < 2; e++) {
                u32 ql = (i & 1) ? qb[e] : qa[e];
                u32 v = ((ql >> (4 * (i >> 1))) & LO4) | (((qh[e] >> (2 * i)) & 0x03030303u) << 4);
                dp4a2(sub_bytes(v, 0x20202020u), xa[9 * i + e], h, l);
            }
            float sc = qf_s((int)(signed char)byte_of(sw, is + 2 * i));
            acc = fmaf(sc * xds[4 * n + i].x, xsum(h, l), acc);
        }
        return ld_f16_a2(b + 208) * acc;
    }
};

// This warp's index gw among all `warps` of an _m1 launch and R, its rows per group:
// ceil(n / warps), at most rm (the host picks the in-block grid with at most Q::RM rows per warp,
// src/backend/cuda/ops_matmul.rs mmv_shape: more rows per warp share one quantization of x;
// measured on the H200 that pays for the 16-byte-aligned K-quant and int8 rows, while the
// 2-byte-aligned formats' u16 loads do better one row per warp, unrolled).
__device__ __forceinline__ void mmv_groups(u32 n, u32 rm, u32& gw, u32& warps, u32& R) {
    u32 wpb = blockDim.x >> 5;
    warps = gridDim.x * wpb;
    gw = blockIdx.x * wpb + (threadIdx.x >> 5);
    R = min((n + warps - 1) / warps, rm);
}

// The _m1 kernels' dynamic shared memory (the layout above): the digit planes (returned), xq, xds.
__device__ __forceinline__ int* mmv_layout(u32 k, XQ& xq, float2*& xds) {
    extern __shared__ __align__(16) unsigned char mmv_smem[];
    u32 nxb = (k + 31) / 32;
    int* planes = reinterpret_cast<int*>(mmv_smem);
    xq = XQ{planes, 9 * nxb};
    xds = reinterpret_cast<float2*>(mmv_smem + 72 * nxb);
    return planes;
}

// Shared prologue of the in-block _m1 kernels: x into shared memory; the warp's first row and row count.
__device__ __forceinline__ void mmv_begin(const MatmulParams& p, const float* x, XQ& xq, float2*& xds, u32& n0, u32& rows) {
    int* planes = mmv_layout(p.k, xq, xds);
    mmv_quantize_x<false>(x, p.k, planes, xq.lo, xds, threadIdx.x, blockDim.x);
    __syncthreads();
    u32 gw, warps, r;
    mmv_groups(p.n, 4u, gw, warps, r);
    n0 = gw * r;
    rows = n0 < p.n ? min(r, p.n - n0) : 0;
}

// Rows n0 .. n0 + rows (1 <= rows <= Q::RM) of the output, one warp, x in shared memory.
template <class Q>
__device__ __forceinline__ void mmv_rows(const MatmulParams& p, XQ xq, const float2* xds, const u8* w, const float* bias, float* out, u32 n0, u32 rows) {
    const u32 lane = threadIdx.x & 31, nb = p.k / Q::QK, XB = Q::QK / 32;
    const u64 rb = (u64)nb * Q::BYTES;
    const u8* row = w + n0 * rb;
    const int sl = (int)(lane % Q::SL);
    float acc[Q::RM];
#pragma unroll
    for (int r = 0; r < Q::RM; r++) acc[r] = 0.0f;
#pragma unroll(Q::RM == 1 ? 2 : 1)
    for (u32 blk = lane / Q::SL; blk < nb; blk += 32 / Q::SL) {
        const u8* b = row + (u64)blk * Q::BYTES;
#pragma unroll
        for (u32 r = 0; r < Q::RM; r++)
            if (r < rows) acc[r] += Q::dot(b + r * rb, sl, xq + 9 * XB * blk, xds + XB * blk);
    }
#pragma unroll
    for (u32 r = 0; r < Q::RM; r++) {
        float v = warp_sum(acc[r]);
        if (lane == 0 && r < rows) mm_put(p, out, bias, n0 + r, n0 + r, v);
    }
}

template <class Q>
__device__ void mmv_impl(MatmulParams p, const float* x, const u8* w, const float* bias, float* out) {
    XQ xq;
    float2* xds;
    u32 n0, rows;
    mmv_begin(p, x, xq, xds, n0, rows);
    if (rows == 0) return;
    mmv_rows<Q>(p, xq, xds, w, bias, out, n0, rows);
}

// One int8 row's integer dot with x: 16-byte slices when k % 16 == 0, else 4-byte words assembled
// from bytes (x codes past k are 0, so are the bytes past the row); without the row's scale.
__device__ __forceinline__ float mmv_int8_row(const u8* row, u32 k, XQ xq, const float2* xds) {
    u32 lane = threadIdx.x & 31;
    float acc = 0.0f;
    if ((k & 15u) == 0u) {
        for (u32 c = lane; c < (k >> 4); c += 32) {
            uint4 v = __ldg(reinterpret_cast<const uint4*>(row) + c);
            XQ xa = xq + xq_pos(4 * c); // words 4c .. 4c + 3: one x block
            int h = 0, l = 0;
            dp4a2(v.x, xa[0], h, l);
            dp4a2(v.y, xa[1], h, l);
            dp4a2(v.z, xa[2], h, l);
            dp4a2(v.w, xa[3], h, l);
            acc = fmaf(xds[c >> 1].x, xsum(h, l), acc);
        }
    } else {
        for (u32 c = lane; c < (k + 3) / 4; c += 32) {
            u32 v = 0;
#pragma unroll
            for (u32 i = 0; i < 4; i++)
                if (4 * c + i < k) v |= (u32)__ldg(row + 4 * c + i) << (8 * i);
            int h = 0, l = 0;
            dp4a2(v, xq[xq_pos(c)], h, l);
            acc = fmaf(xds[c >> 3].x, xsum(h, l), acc);
        }
    }
    return warp_sum(acc);
}

// int8 rows n0 .. n0 + rows, one warp, x in shared memory.
__device__ __forceinline__ void mmv_int8_rows(const MatmulParams& p, XQ xq, const float2* xds, const u8* w, const float* bias, float* out, u32 n0, u32 rows) {
    for (u32 r = 0; r < rows; r++) {
        u32 n = n0 + r;
        float v = mmv_int8_row(w + (u64)n * p.k, p.k, xq, xds) * __uint_as_float(ld_u32_a1(w + (u64)p.n * p.k + 4ull * n));
        if ((threadIdx.x & 31) == 0) mm_put(p, out, bias, n, n, v);
    }
}

__device__ void mmv_int8_impl(MatmulParams p, const float* x, const u8* w, const float* bias, float* out) {
    XQ xq;
    float2* xds;
    u32 n0, rows;
    mmv_begin(p, x, xq, xds, n0, rows);
    mmv_int8_rows(p, xq, xds, w, bias, out, n0, rows);
}

// ---- m == 1, x quantized once per call (LSERVE_CUDA_MMV=pre: ops_matmul.rs MmvMode::Pre) ----
//
// matmul_quantize_x_m1 writes x's digit planes and (d, sum) exactly as mmv_begin puts them in
// shared memory (same mmv_quantize_x, so the same bits; the pad words zeroed) into a scratch of
// mmv_smem_bytes(k) = 80 nxb bytes: hi int[9 nxb], lo int[9 nxb], float2 xds[nxb]. Each block of
// the _m1_pre kernels then
//   1. issues a plain cp.async copy of those bytes into its shared memory (16 bytes a thread per
//      step, .ca: the later blocks of an SM may find them in L1), no arithmetic;
//   2. while the copy is in flight, prefetches into L1 (prefetch.global.L1, no register waits on
//      it) the lines of the weight bytes its warp's first dot steps read (every row of the warp's
//      first row group; two steps deep for RM == 1, the unroll of mmv_rows), so the weight stream
//      starts with the kernel rather than after the x prologue;
//   3. waits for the copy (cp.async.wait_group 0, __syncthreads) and runs the in-block kernels'
//      row code (mmv_rows / mmv_int8_rows) unchanged, x read from shared memory with the same
//      bank-spreading pad.
// Why a copy into shared memory rather than reading x from global / L1 in the dot loops: the
// lanes of a warp read 4-byte x words of different x blocks (36 bytes apart for the 32-weight
// formats; 72 and 288 for the K-quants' slices and super-blocks, a warp's words spanning 2.3 KB),
// which the padded shared layout serves in one wavefront per load but which from L1 would touch
// many 128-byte lines per load instruction.
// The grid: warp gw of `warps` takes row groups of R = min(ceil(n / warps), RM) rows (RM =
// Q::RM, 4 for int8 rows) at gw R, gw R + warps R, ...; with the in-block grid (the default,
// ops_matmul mmv_shape) that is one group per warp, the same rows as the in-block kernel; with a
// capped grid (LSERVE_CUDA_MMV=pre:N, at most N blocks per SM) the warps loop over row groups, so
// a block's x copy and barrier are paid once for several groups.

// cp.async of 16 bytes cached in L1 too (common.cuh's cp_async16 is L2-only): x is read by every
// block of an SM.
__device__ __forceinline__ void mmv_cp_async16_ca(void* smem, const void* gmem) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" ::"r"(smem_addr(smem)), "l"(gmem) : "memory");
}
__device__ __forceinline__ void mmv_prefetch_l1(const void* p) { asm volatile("prefetch.global.L1 [%0];" ::"l"(p)); }

// Step 1: the block's copy of x (80 nxb bytes) into shared memory, one commit group.
__device__ __forceinline__ void mmv_copy_x(u32 k, const u32* xg, XQ& xq, float2*& xds) {
    int* planes = mmv_layout(k, xq, xds);
    u32 n16 = 5 * ((k + 31) / 32);
    for (u32 i = threadIdx.x; i < n16; i += blockDim.x) mmv_cp_async16_ca(planes + 4 * i, xg + 4 * i);
    cp_async_commit();
}
// Step 3's wait.
__device__ __forceinline__ void mmv_wait_x() {
    cp_async_wait<0>();
    __syncthreads();
}

template <class Q>
__device__ void mmv_pre_impl(MatmulParams p, const u32* xg, const u8* w, const float* bias, float* out) {
    XQ xq;
    float2* xds;
    mmv_copy_x(p.k, xg, xq, xds);
    u32 gw, warps, R;
    mmv_groups(p.n, Q::RM, gw, warps, R);
    const u32 lane = threadIdx.x & 31, nb = p.k / Q::QK;
    const u64 rb = (u64)nb * Q::BYTES;
    if (gw * R < p.n) {
        // The lane's first block (and the next one it takes, for RM == 1) of every row of the
        // group, at the byte its slice starts from.
        const u32 n0 = gw * R, rows = min(R, p.n - n0), off = (u32)Q::BYTES * (lane % Q::SL) / Q::SL;
        for (u32 r = 0; r < rows; r++) {
            u32 blk = lane / Q::SL;
#pragma unroll
            for (int s = 0; s < (Q::RM == 1 ? 2 : 1); s++, blk += 32 / Q::SL)
                if (blk < nb) mmv_prefetch_l1(w + (u64)(n0 + r) * rb + (u64)blk * Q::BYTES + off);
        }
    }
    mmv_wait_x();
    for (u32 n0 = gw * R; n0 < p.n; n0 += warps * R) mmv_rows<Q>(p, xq, xds, w, bias, out, n0, min(R, p.n - n0));
}

__device__ void mmv_int8_pre_impl(MatmulParams p, const u32* xg, const u8* w, const float* bias, float* out) {
    XQ xq;
    float2* xds;
    mmv_copy_x(p.k, xg, xq, xds);
    u32 gw, warps, R;
    mmv_groups(p.n, 4u, gw, warps, R);
    // The lane's first load of every row of the group: 16 bytes at 16 lane (k % 16 == 0), else 4 at 4 lane.
    const u32 off = ((p.k & 15u) == 0u ? 16u : 4u) * (threadIdx.x & 31);
    if (gw * R < p.n && off < p.k) {
        const u32 n0 = gw * R, rows = min(R, p.n - n0);
        for (u32 r = 0; r < rows; r++) mmv_prefetch_l1(w + (u64)(n0 + r) * p.k + off);
    }
    mmv_wait_x();
    for (u32 n0 = gw * R; n0 < p.n; n0 += warps * R) mmv_int8_rows(p, xq, xds, w, bias, out, n0, min(R, p.n - n0));
}

// ---- m == 1, x in registers (LSERVE_CUDA_MMV=reg|regf: ops_matmul.rs MmvMode::Reg; Q4_K, Q5_K, int8 rows) ----
//
// Nsight Compute on the _m1_pre Q4_K kernels (docs/benchmarks.md, session 17) found the L1/TEX
// unit 93% busy at 41% of the DRAM bandwidth: x's digits read from shared memory (32 4-byte LDS
// per lane per 64 weights, 2-way bank conflicts) and weight loads whose 16-byte lanes used half
// of each 32-byte sector per instruction (a lane's two uint4 of one slice are 16 bytes apart).
// Here a lane owns the same 32 elements of every row, so x lives in its registers, and the
// lanes of a warp read four runs of 128 contiguous code bytes per instruction (int8: 512). The
// host launches up to 1024 threads a block (ops_matmul.rs mmv_reg_launch), which needs at most 64
// registers a thread: ptxas gives these kernels 32-64 (sm_90a, session 17). No __launch_bounds__:
// it changed the measured kernels' code (48 -> 52 registers for Q4_K), and any kernel growing past
// 64 would make large-k launches fail with an error rather than run wrong.
// - Block: 32 ceil(nb / 4) threads for nb = k / 256 super-blocks (at most 1024: ops_matmul.rs
//   mmv_reg_launch, MMV_REG_MAX_THREADS); thread
//   t takes super-block t / 8, part i = t % 8 (threads past 8 nb take nothing but join the
//   reductions): code bytes 16i .. 16i + 16 of the super-block, i.e. group g = i / 2, positions
//   l = 16e + 0..16 (e = i % 2) of its 32: elements 64g + l (low nibbles, sub-block 2g) and 64g +
//   32 + l (high nibbles, sub-block 2g + 1); Q5_K's fifth bits are bytes 16e .. 16e + 16 of qh.
// - x: the lane's 4 + 4 words of both digit planes of x blocks 2g and 2g + 1 and their d, loaded
//   once from the matmul_quantize_x_m1 scratch (_reg) or quantized by the lanes from f32 x (_regf,
//   mmv_quantize_xn<16>: the lane pair sharing each x block exchanges max|x| and its sum); the min
//   terms use the blocks' f32 x sums, taken by the e == 0 lane of each pair (the pair shares the
//   sub-blocks' mins). Measured (session 17): the L1 unit went from 93% to 29% busy, and the
//   kernels are then latency-bound (about 1.1 eligible warps per scheduler); with unpredicated
//   row loads the 8B step is 11-13% faster than _pre for Q4_K, and faster for int8 rows (regf)
//   and Q5_K (reg): the default for all three (MmvMode::for_dtype).
// - Rows: block b takes rows b R .. b R + R (R = 4 ceil(ceil(n / grid) / 4), the same R the host
//   sized the shared memory with), four at a time: each warp issues the four rows' header and
//   code loads, multiplies, and sums the four rows over its lanes in 6 shuffles (a butterfly
//   that halves the values per step: lanes 8r hold row r); the warps' sums meet in shared memory
//   (red[warp][R]) and one barrier at the end lets R threads add them up.
__device__ __forceinline__ u32 mmv_reg_rows(u32 n) {
    u32 per = (n + gridDim.x - 1) / gridDim.x;
    return (per + 3u) & ~3u;
}

// The four rows' partial sums v[0..4] of a warp -> lane 8r + j (j < 8) holds row r's total.
__device__ __forceinline__ float mmv_reduce4(const float* v) {
    const u32 lane = threadIdx.x & 31;
    const bool b4 = (lane & 16u) != 0u, b3 = (lane & 8u) != 0u;
    float a0 = b4 ? v[2] : v[0], a1 = b4 ? v[3] : v[1];
    float s0 = b4 ? v[0] : v[2], s1 = b4 ? v[1] : v[3];
    a0 += __shfl_xor_sync(0xffffffffu, s0, 16);
    a1 += __shfl_xor_sync(0xffffffffu, s1, 16);
    float c = (b3 ? a1 : a0) + __shfl_xor_sync(0xffffffffu, b3 ? a0 : a1, 8);
    c += __shfl_xor_sync(0xffffffffu, c, 4);
    c += __shfl_xor_sync(0xffffffffu, c, 2);
    c += __shfl_xor_sync(0xffffffffu, c, 1);
    return c;
}

// ---- matmul_prologue: x made from its producer's operands in the lanes (the XF kernels) ----
// xop 0: x as given. 1 (rmsnorm): the lanes take x * xw (the norm's weight) and add up x^2; the
// block's total (every block's lanes hold all of x) gives 1 / sqrt(mean + eps), one scalar for the
// whole row, which multiplies each row's dot at the end (the dot of x * xw scaled once is the
// normalized x's; the digits of x * xw are those of the normalized x but for the scale's
// rounding). 2 (silu_mul): x[e] = silu(x[e]) * x[k + e] (x is gate | up, as the gate|up GEMV
// wrote it). `eps` holds the f32's bits. silu takes the fast exponential and division (a few
// instructions where expf and an IEEE division are ~40 an element, before the first weight row
// is read): their ~1e-6 relative error is far below the two-digit quantization the lanes apply
// next (~2^-15 of the block's largest element).
__device__ __forceinline__ float mmv_silu(float g) { return __fdividef(g, 1.0f + __expf(-g)); }
struct XPro {
    const float* x;
    const float* xw;
    u32 op, k;
    // Elements e .. e + 4 of x (16-byte aligned), made by the op; ss += their x^2 for rmsnorm.
    __device__ __forceinline__ float4 load4(u32 e, float& ss) const {
        float4 a = __ldg(reinterpret_cast<const float4*>(x + e));
        if (op == 1u) {
            ss = fmaf(a.x, a.x, fmaf(a.y, a.y, fmaf(a.z, a.z, fmaf(a.w, a.w, ss))));
            const float4 g = __ldg(reinterpret_cast<const float4*>(xw + e));
            a = make_float4(a.x * g.x, a.y * g.y, a.z * g.z, a.w * g.w);
        } else if (op == 2u) {
            const float4 u = __ldg(reinterpret_cast<const float4*>(x + k + e));
            a = make_float4(mmv_silu(a.x) * u.x, mmv_silu(a.y) * u.y, mmv_silu(a.z) * u.z, mmv_silu(a.w) * u.w);
        }
        return a;
    }
};
// The warps' sums of x^2 (rmsnorm), one a warp: written after x is loaded, read after the block's
// final barrier.
__shared__ float mmv_ssq[32];
__device__ __forceinline__ void mmv_ssq_put(u32 op, float ss) {
    if (op != 1u) return;
    ss = warp_sum(ss);
    if ((threadIdx.x & 31) == 0) mmv_ssq[threadIdx.x >> 5] = ss;
}
// What each row's dot is multiplied by: 1 / sqrt(mean(x^2) + eps) for rmsnorm, else 1.
__device__ __forceinline__ float mmv_row_scale(u32 op, u32 k, u32 eps, u32 warps) {
    if (op != 1u) return 1.0f;
    float ss = 0.0f;
    for (u32 i = 0; i < warps; i++) ss += mmv_ssq[i];
    return 1.0f / sqrtf(ss / (float)k + __uint_as_float(eps));
}
// The first row group's lines at a + row * rb into L2 (rows r0 .. r0 + 4, clamped to r1 - 1)
// before a prologue makes x, so the weights are on their way while the lanes compute (the bulk
// kernels' producer streams them anyway).
__device__ __forceinline__ void mmv_prefetch_group(const u8* a, u64 rb, u32 r0, u32 r1) {
#pragma unroll
    for (u32 r = 0; r < 4; r++) asm volatile("prefetch.global.L2 [%0];" ::"l"(a + (u64)min(r0 + r, r1 - 1) * rb));
}

// N elements of x (f32 x + e0 .. + N, 16-byte aligned; `on` false: zeros) as both digits of their
// N / 4 words (x8_quantize4's formula, so the digits of matmul_quantize_x_m1), the x block's d and
// its f32 sum: N = 32, the whole block, quantized by the lane alone; N = 16, half of the block
// whose other half lane ^ 1 holds (every lane calling: max|x| and the sum exchanged with one
// shuffle each).
template <int N>
__device__ __forceinline__ void mmv_quantize_xn(const XPro& x, u32 e0, bool on, int* h, int* l, float& d, float& sum, float& ss) {
    float v[N];
#pragma unroll
    for (int j = 0; j < N / 4; j++) {
        float4 a = on ? x.load4(e0 + 4 * j, ss) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        v[4 * j] = a.x; v[4 * j + 1] = a.y; v[4 * j + 2] = a.z; v[4 * j + 3] = a.w;
    }
    float amax = 0.0f, s = 0.0f;
#pragma unroll
    for (int i = 0; i < N; i++) {
        amax = fmaxf(amax, fabsf(v[i]));
        s += v[i];
    }
    if (N == 16) {
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
        s += __shfl_xor_sync(0xffffffffu, s, 1);
    }
    sum = s;
    float id;
    x8_scale(amax, d, id);
#pragma unroll
    for (int j = 0; j < N / 4; j++) {
        u32 hi = 0, lo = 0;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            u32 hv, lv;
            x8_digits(v[4 * j + i], d, id, hv, lv);
            hi |= hv << (8 * i);
            lo |= lv << (8 * i);
        }
        h[j] = (int)hi;
        l[j] = (int)lo;
    }
}

// The lane's x for the _m1_reg GEMVs: elements e0 .. e0 + 16 of x, from the matmul_quantize_x_m1
// scratch (XF false: words at e0 / 4 of both planes, the block's (d, sum)) or quantized here from
// f32 x (XF true, every lane calling). Sets h, l, d and the block's sum.
template <bool XF>
__device__ __forceinline__ void mmv_reg_x(const void* src, const XPro& x, u32 k, u32 e0, bool on, int* h, int* l, float& d, float& sum, float& ss) {
    if (XF) return mmv_quantize_xn<16>(x, e0, on, h, l, d, sum, ss);
    const u32 nxb = (k + 31) / 32, b = e0 / 32, w0 = 9 * b + (e0 % 32) / 4;
    const int* hp = reinterpret_cast<const int*>(src);
    float2 ds = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        h[j] = on ? __ldg(hp + w0 + j) : 0;
        l[j] = on ? __ldg(hp + 9 * nxb + w0 + j) : 0;
    }
    if (on) ds = __ldg(reinterpret_cast<const float2*>(hp + 18 * nxb) + b);
    d = ds.x;
    sum = ds.y;
}


// ---- m == 1 on sm_90: the register GEMVs with their weight rows streamed by bulk copies ----
//
// `_bulk` / `_bulkf` (ops_matmul.rs MmvMode::Reg with `bulk`): the kernels below with BULK true.
// The lanes, x in registers, the dots and the reductions are the register kernels' own; what
// changes is where a 4-row group's bytes come from. The block has one more warp, the producer,
// whose lane 0 copies each group's rows (4 rb contiguous bytes, rows r1.. left out) into stage c
// % S of S shared-memory stages with one bulk copy (cp.async.bulk, the TMA unit) completing on
// the stage's mbarrier `full`, as soon as every computing warp has released the stage (`empty`,
// one arrival a warp). The computing threads wait for `full`, read their words of the group with
// shared loads (rows past r1 read a stale stage: discarded as before), and release it once their
// dots are done. So up to S groups of every block stream in while the lanes multiply, instead of
// each warp's loads of one group being in flight only between its multiplications (session 17:
// the register kernels are latency-bound, ~1.1 eligible warps a scheduler). Dynamic shared memory:
// red [warps][R] f32, then the stages from the next 128-byte boundary (mmv_bulk_smem on the host);
// `stages` (S, 2..=MMV_MAX_STAGES) is the launch's. sm_90 only; the host never launches them
// elsewhere, where their bodies are empty.
#define MMV_MAX_STAGES 8
struct MmvPipe {
    u32 full, empty, stage0, stages, bytes;
    u32 s = 0, ph = 0; // the computing thread's next group: its stage and that stage's phase parity
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // The next group's stage, once its bytes landed.
    __device__ __forceinline__ u32 acquire() const {
        mb_wait(full + 8 * s, ph);
        return stage0 + s * bytes;
    }
    // This warp is done reading the group's stage; on to the next.
    __device__ __forceinline__ void release() {
        __syncwarp();
        if ((threadIdx.x & 31) == 0) mb_arrive(empty + 8 * s);
        if (++s == stages) {
            s = 0;
            ph ^= 1u;
        }
    }
    // The producer: rows r0 .. r1 of rb bytes each from w, four at a time.
    __device__ __forceinline__ void produce(const u8* w, u64 rb, u32 r0, u32 r1) const {
        if ((threadIdx.x & 31) != 0) return;
        for (u32 n0 = r0, c = 0; n0 < r1; n0 += 4, c++) {
            const u32 st = c % stages, n = min(4u, r1 - n0) * (u32)rb;
            if (c >= stages) mb_wait(empty + 8 * st, (c / stages - 1) & 1u);
            mb_arrive_expect_tx(full + 8 * st, n);
            bulk_g2s(stage0 + st * bytes, w + (u64)n0 * rb, n, full + 8 * st);
        }
    }
#else
    __device__ u32 acquire() const { __trap(); return 0; }
    __device__ void release() {}
    __device__ void produce(const u8*, u64, u32, u32) const {}
#endif
};

// The pipeline of a block whose last warp is the producer (`warps` computing warps before it), R
// rows a block, stages of 4 rb bytes; every thread calls it (one barrier).
__device__ __forceinline__ MmvPipe mmv_pipe(u32 stages, u64 rb, u32 warps, u32 R) {
    extern __shared__ __align__(16) unsigned char mmv_smem[];
    __shared__ __align__(8) unsigned long long mmv_bars[2 * MMV_MAX_STAGES];
    const u32 bars = smem_addr(mmv_bars), red = smem_addr(mmv_smem);
    MmvPipe q{bars, bars + 8 * MMV_MAX_STAGES, (red + 4 * warps * R + 127u) & ~127u, stages, 4u * (u32)rb, 0u, 0u};
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (threadIdx.x == 0) {
        for (u32 s = 0; s < stages; s++) {
            mb_init(q.full + 8 * s, 1);
            mb_init(q.empty + 8 * s, warps);
        }
        fence_mb_init();
    }
#endif
    __syncthreads();
    return q;
}

// 16 / 4 / 2 (f16) bytes of a weight row: from global memory (__ldg) or, BULK, from a stage
// (a shared-state-space address).
template <bool BULK> __device__ __forceinline__ uint4 mmv_ld16(const u8* g, u32 s) {
    if (!BULK) return __ldg(reinterpret_cast<const uint4*>(g));
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(s) : "memory");
    return v;
}
template <bool BULK> __device__ __forceinline__ u32 mmv_ld4(const u8* g, u32 s) {
    if (!BULK) return __ldg(reinterpret_cast<const u32*>(g));
    u32 v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(s) : "memory");
    return v;
}
template <bool BULK> __device__ __forceinline__ float mmv_ldf16(const u8* g, u32 s) {
    if (!BULK) return ld_f16_a2(g);
    unsigned short v;
    asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(s) : "memory");
    return f16_to_f32(v);
}
// The computing warps' barrier before the final sums: the whole block, or (BULK) the computing
// threads only (named barrier 1; the producer may have returned).
template <bool BULK> __device__ __forceinline__ void mmv_sync(u32 warps) {
    if (BULK) asm volatile("bar.sync 1, %0;" ::"r"(32 * warps) : "memory");
    else __syncthreads();
}

template <bool Q5, bool XF, bool BULK = false>
__device__ void mmv_reg_k_impl(MatmulParams p, const void* xs, const float* xw, const u8* w, const float* bias, float* out, u32 stages = 0, u32 xop = 0, u32 eps = 0) {
    extern __shared__ __align__(16) unsigned char mmv_smem[];
    float* red = reinterpret_cast<float*>(mmv_smem);
    const u32 BYTES = Q5 ? 176u : 144u, QS = Q5 ? 48u : 16u;
    const u32 t = threadIdx.x, lane = t & 31, warp = t >> 5, nwarps = (blockDim.x >> 5) - (BULK ? 1 : 0);
    const u32 nb = p.k / 256, sb = t >> 3, i = t & 7, g = i >> 1, e = i & 1;
    const bool on = sb < nb;
    const u32 R = mmv_reg_rows(p.n), r0 = blockIdx.x * R, r1 = min(p.n, r0 + R);
    const u64 rb = (u64)nb * BYTES;
    MmvPipe pipe{};
    if (BULK) {
        pipe = mmv_pipe(stages, rb, nwarps, R);
        if (warp == nwarps) return pipe.produce(w, rb, r0, r1);
    }
    // x: elements 64g + 16e .. + 16 (low nibbles, x block 8 sb + 2g) and 32 further (high nibbles,
    // the next x block) of super-block sb.
    int xh0[4], xl0[4], xh1[4], xl1[4];
    float dx0, dx1, sx0, sx1;
    const u32 e0 = 256 * sb + 64 * g + 16 * e;
    const u32 col = min(sb, nb - 1) * BYTES;
    const u8* base = w + col;
    if (!BULK && xop != 0u) {
        mmv_prefetch_group(base, rb, r0, r1);
        mmv_prefetch_group(base + QS + 16 * i, rb, r0, r1);
    }
    const XPro xp{reinterpret_cast<const float*>(xs), xw, xop, p.k};
    float ss = 0.0f;
    mmv_reg_x<XF>(xs, xp, p.k, e0, on, xh0, xl0, dx0, sx0, ss);
    mmv_reg_x<XF>(xs, xp, p.k, e0 + 32, on, xh1, xl1, dx1, sx1, ss);
    mmv_ssq_put(xop, ss);
    if (e != 0) sx0 = sx1 = 0.0f; // the pair's e == 0 lane takes the blocks' min terms
    for (u32 n0 = r0; n0 < r1; n0 += 4) {
        // Unpredicated loads of valid addresses (rows past r1 re-read row r1 - 1, discarded; lanes
        // past the row read its last super-block against zero x).
        const u32 st = BULK ? pipe.acquire() + col : 0u;
        uint4 hd[4], q[4], qh[4];
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const u8* b = base + (u64)min(n0 + r, r1 - 1) * rb;
            const u32 sr = st + r * (u32)rb;
            hd[r] = mmv_ld16<BULK>(b, sr);
            q[r] = mmv_ld16<BULK>(b + QS + 16 * i, sr + QS + 16 * i);
            qh[r] = Q5 ? mmv_ld16<BULK>(b + 16 + 16 * e, sr + 16 + 16 * e) : make_uint4(0, 0, 0, 0);
        }
        // Word-major in the source; ptxas reorders the dots by row and issues the loads in three
        // waves (rows 0, 1, then 2 and 3) either way. What the unpredicated loads changed, with
        // this order: 368 SASS instructions per 4-row group instead of 391, each row's loads no
        // longer waiting on a predicate, and the Q4_K step 9% faster (docs/benchmarks.md,
        // session 17 call 4). A dependency forcing all eight loads ahead of the first dp4a was
        // tried and compiled to a predicated store that ptxas sank as well.
        int h0[4], l0[4], h1[4], l1[4];
#pragma unroll
        for (int r = 0; r < 4; r++) h0[r] = l0[r] = h1[r] = l1[r] = 0;
#pragma unroll
        for (int j = 0; j < 4; j++) {
#pragma unroll
            for (int r = 0; r < 4; r++) {
                u32 qw = j == 0 ? q[r].x : j == 1 ? q[r].y : j == 2 ? q[r].z : q[r].w;
                u32 lo = qw & LO4, hi4 = (qw >> 4) & LO4;
                if (Q5) {
                    u32 hw = j == 0 ? qh[r].x : j == 1 ? qh[r].y : j == 2 ? qh[r].z : qh[r].w;
                    lo |= ((hw >> (2 * g)) & 0x01010101u) << 4;
                    hi4 |= ((hw >> (2 * g + 1)) & 0x01010101u) << 4;
                }
                dp4a2(lo, make_int2(xh0[j], xl0[j]), h0[r], l0[r]);
                dp4a2(hi4, make_int2(xh1[j], xl1[j]), h1[r], l1[r]);
            }
        }
        if (BULK) pipe.release();
        float v[4];
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const uint4 h = hd[r];
            // The 6-bit scales and mins of sub-blocks 2g, 2g + 1 (mq_k's branch-free decode).
            u32 sh = 16u * (g & 1), w0 = (h.y >> sh) & 0xffffu, w1 = (h.z >> sh) & 0xffffu, w2 = (h.w >> sh) & 0xffffu;
            bool hi = g >= 2;
            u32 scs = hi ? (w2 & 0x0f0fu) | ((w0 & 0xc0c0u) >> 2) : w0 & 0x3f3fu;
            u32 mns = hi ? ((w2 >> 4) & 0x0f0fu) | ((w1 & 0xc0c0u) >> 2) : w1 & 0x3f3fu;
            float d = f16_to_f32((u16)(h.x & 0xffffu)), dmin = f16_to_f32((u16)(h.x >> 16));
            float dot = qf(scs & 0xffu) * dx0 * xsum(h0[r], l0[r]) + qf(scs >> 8) * dx1 * xsum(h1[r], l1[r]);
            float mins = qf(mns & 0xffu) * sx0 + qf(mns >> 8) * sx1;
            v[r] = d * dot - dmin * mins;
        }
        float s = mmv_reduce4(v);
        if ((lane & 7u) == 0u) red[warp * R + (n0 - r0) + (lane >> 3)] = s;
    }
    mmv_sync<BULK>(nwarps);
    const float scale = mmv_row_scale(xop, p.k, eps, nwarps);
    for (u32 r = t; r0 + r < r1; r += 32 * nwarps) {
        float s = 0.0f;
        for (u32 wi = 0; wi < nwarps; wi++) s += red[wi * R + r];
        mm_put(p, out, bias, r0 + r, r0 + r, s * scale);
    }
}
// The packed 4-bit formats (QQP: Q4_0, Q5_0, Q4_1, Q5_1) with x in registers: thread t owns GGML
// block t of every row (k % 256 == 0, k / 32 <= 1024 threads): its 16 code bytes (one uint4:
// element j in the low nibble of byte j, 16 + j in the high), its f16 scale (and min) and the
// fifth-bit word, and x block t with its f32 sum (from the digit scratch, or quantized by the
// lane itself: XF). Rows four at a time as in mmv_reg_k_impl.
template <int KIND, bool XF, bool BULK = false>
__device__ void mmv_reg_p4_impl(MatmulParams p, const void* xs, const float* xw, const u8* w, const float* bias, float* out, u32 stages = 0, u32 xop = 0, u32 eps = 0) {
    extern __shared__ __align__(16) unsigned char mmv_smem[];
    float* red = reinterpret_cast<float*>(mmv_smem);
    const u32 t = threadIdx.x, lane = t & 31, warp = t >> 5, nwarps = (blockDim.x >> 5) - (BULK ? 1 : 0);
    const bool on = 32 * t < p.k;
    const u32 R = mmv_reg_rows(p.n), r0 = blockIdx.x * R, r1 = min(p.n, r0 + R);
    const u64 rb = (u64)(p.k / 256) * PQ<KIND>::BYTES;
    MmvPipe pipe{};
    if (BULK) {
        pipe = mmv_pipe(stages, rb, nwarps, R);
        if (warp == nwarps) return pipe.produce(w, rb, r0, r1);
    }
    const u32 c = min(t, p.k / 32 - 1); // lanes past k: the row's last block, zero x
    const u32 col = PQ<KIND>::BYTES * (c / 8);
    const u8* sb = w + col;
    const u32 j = c % 8;
    if (!BULK && xop != 0u) {
        mmv_prefetch_group(sb + 2 * j, rb, r0, r1);
        mmv_prefetch_group(sb + PQ<KIND>::QS + 16 * j, rb, r0, r1);
    }
    int xh[8], xl[8];
    float dx, sx;
    const XPro xp{reinterpret_cast<const float*>(xs), xw, xop, p.k};
    float ss = 0.0f;
    if (XF) {
        mmv_quantize_xn<32>(xp, 32 * t, on, xh, xl, dx, sx, ss);
    } else {
        mmv_reg_x<false>(xs, xp, p.k, 32 * t, on, xh, xl, dx, sx, ss);
        mmv_reg_x<false>(xs, xp, p.k, 32 * t + 16, on, xh + 4, xl + 4, dx, sx, ss);
    }
    mmv_ssq_put(xop, ss);
    for (u32 n0 = r0; n0 < r1; n0 += 4) {
        const u32 st = BULK ? pipe.acquire() + col : 0u;
        uint4 q[4]; // unpredicated, as in mmv_reg_k_impl
        u32 qh[4] = {0, 0, 0, 0};
        float d[4], m[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const u8* b = sb + (u64)min(n0 + r, r1 - 1) * rb;
            const u32 sr = st + r * (u32)rb;
            q[r] = mmv_ld16<BULK>(b + PQ<KIND>::QS + 16 * j, sr + PQ<KIND>::QS + 16 * j);
            d[r] = mmv_ldf16<BULK>(b + 2 * j, sr + 2 * j);
            if (PQ<KIND>::MIN) m[r] = mmv_ldf16<BULK>(b + PQ<KIND>::MO + 2 * j, sr + PQ<KIND>::MO + 2 * j);
            if (PQ<KIND>::QH) qh[r] = mmv_ld4<BULK>(b + PQ<KIND>::HO + 4 * j, sr + PQ<KIND>::HO + 4 * j);
        }
        int h[4] = {0, 0, 0, 0}, l[4] = {0, 0, 0, 0};
#pragma unroll
        for (int i = 0; i < 4; i++) {
#pragma unroll
            for (int r = 0; r < 4; r++) {
                u32 qw = i == 0 ? q[r].x : i == 1 ? q[r].y : i == 2 ? q[r].z : q[r].w, lo, hi;
                p4_codes<KIND>(qw, qh[r], i, lo, hi);
                dp4a2(lo, make_int2(xh[i], xl[i]), h[r], l[r]);
                dp4a2(hi, make_int2(xh[4 + i], xl[4 + i]), h[r], l[r]);
            }
        }
        if (BULK) pipe.release();
        float v[4];
#pragma unroll
        for (int r = 0; r < 4; r++) v[r] = fmaf(m[r], sx, d[r] * dx * xsum(h[r], l[r]));
        float s = mmv_reduce4(v);
        if ((lane & 7u) == 0u) red[warp * R + (n0 - r0) + (lane >> 3)] = s;
    }
    mmv_sync<BULK>(nwarps);
    const float scale = mmv_row_scale(xop, p.k, eps, nwarps);
    for (u32 r = t; r0 + r < r1; r += 32 * nwarps) {
        float s = 0.0f;
        for (u32 wi = 0; wi < nwarps; wi++) s += red[wi * R + r];
        mm_put(p, out, bias, r0 + r, r0 + r, s * scale);
    }
}
// int8 rows the same way: thread t owns elements 16t .. 16t + 16 (one uint4 of every row; k % 16
// == 0, k / 16 <= 1024 threads), x words 4 (t % 2) .. + 4 of x block t / 2; the row's f32 scale
// (after the n k codes) applied once to the warps' total. P: Q8_0 in 272-byte super-blocks
// (QQ8_0P; k % 256 == 0) the same way, the codes of element 16c at byte 16 + 16 (c % 16) of
// super-block c / 16, each row's product scaled by its block's f16 scale (bytes 2 (c % 16 / 2)).
// (32 elements a thread, two uint4 of every row, was measured no faster: docs/benchmarks.md,
// session 19. The three register kernels' store tails are written out in each: shared as
// helpers they compiled to the same instruction count but another schedule, and the Q4_K and
// Q8_0 steps measured 4-6% slower.)
template <bool XF, bool P, bool BULK = false>
__device__ void mmv_reg_i8_impl(MatmulParams p, const void* xs, const float* xw, const u8* w, const float* bias, float* out, u32 stages = 0, u32 xop = 0, u32 eps = 0) {
    extern __shared__ __align__(16) unsigned char mmv_smem[];
    float* red = reinterpret_cast<float*>(mmv_smem);
    const u32 t = threadIdx.x, lane = t & 31, warp = t >> 5, nwarps = (blockDim.x >> 5) - (BULK ? 1 : 0);
    const bool on = 16 * t < p.k;
    const u32 R = mmv_reg_rows(p.n), r0 = blockIdx.x * R, r1 = min(p.n, r0 + R);
    const u64 rb = P ? (u64)(p.k / 256) * 272 : p.k;
    MmvPipe pipe{};
    if (BULK) {
        pipe = mmv_pipe(stages, rb, nwarps, R);
        if (warp == nwarps) return pipe.produce(w, rb, r0, r1);
    }
    const u32 c = min(t, p.k / 16 - 1); // the 16-code chunk; lanes past k: the row's last, zero x
    const u32 col = P ? 272u * (c / 16) + 16 * (c % 16 + 1) : 16u * c;
    const u32 scol = 272u * (c / 16) + 2 * (c % 16 / 2); // P: the block's scale
    const u8* base = w + col;
    const u8* sbase = w + scol;
    if (!BULK && xop != 0u) mmv_prefetch_group(base, rb, r0, r1);
    int xh[4], xl[4];
    float dx, sx;
    const XPro xp{reinterpret_cast<const float*>(xs), xw, xop, p.k};
    float ss = 0.0f;
    mmv_reg_x<XF>(xs, xp, p.k, 16 * t, on, xh, xl, dx, sx, ss);
    mmv_ssq_put(xop, ss);
    for (u32 n0 = r0; n0 < r1; n0 += 4) {
        const u32 st = BULK ? pipe.acquire() : 0u;
        uint4 q[4]; // unpredicated, as in mmv_reg_k_impl
        float ws[4] = {1.0f, 1.0f, 1.0f, 1.0f};
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const u64 ro = (u64)min(n0 + r, r1 - 1) * rb;
            const u32 sr = st + r * (u32)rb;
            q[r] = mmv_ld16<BULK>(base + ro, sr + col);
            if (P) ws[r] = mmv_ldf16<BULK>(sbase + ro, sr + scol);
        }
        int h[4] = {0, 0, 0, 0}, l[4] = {0, 0, 0, 0};
#pragma unroll
        for (int r = 0; r < 4; r++) dp4a2(q[r].x, make_int2(xh[0], xl[0]), h[r], l[r]);
#pragma unroll
        for (int r = 0; r < 4; r++) dp4a2(q[r].y, make_int2(xh[1], xl[1]), h[r], l[r]);
#pragma unroll
        for (int r = 0; r < 4; r++) dp4a2(q[r].z, make_int2(xh[2], xl[2]), h[r], l[r]);
#pragma unroll
        for (int r = 0; r < 4; r++) dp4a2(q[r].w, make_int2(xh[3], xl[3]), h[r], l[r]);
        if (BULK) pipe.release();
        float v[4];
#pragma unroll
        for (int r = 0; r < 4; r++) v[r] = (P ? ws[r] * dx : dx) * xsum(h[r], l[r]);
        float s = mmv_reduce4(v);
        if ((lane & 7u) == 0u) red[warp * R + (n0 - r0) + (lane >> 3)] = s;
    }
    mmv_sync<BULK>(nwarps);
    const float scale = mmv_row_scale(xop, p.k, eps, nwarps);
    for (u32 r = t; r0 + r < r1; r += 32 * nwarps) {
        float s = 0.0f;
        for (u32 wi = 0; wi < nwarps; wi++) s += red[wi * R + r];
        const u32 n = r0 + r;
        if (!P) s *= __uint_as_float(ld_u32_a1(w + (u64)p.n * p.k + 4ull * n));
        mm_put(p, out, bias, n, n, s * scale);
    }
}
// Each register GEMV as one template over XF and BULK (the entries below).
#define MMV_FMT(name, call) \
    template <bool XF, bool BULK> __device__ __forceinline__ void name(MatmulParams p, const void* x, const float* xw, const u8* w, const float* b, float* o, u32 st, u32 xop, u32 eps) { call; }
MMV_FMT(mmv_q4_k, (mmv_reg_k_impl<false, XF, BULK>(p, x, xw, w, b, o, st, xop, eps)))
MMV_FMT(mmv_q5_k, (mmv_reg_k_impl<true, XF, BULK>(p, x, xw, w, b, o, st, xop, eps)))
MMV_FMT(mmv_int8, (mmv_reg_i8_impl<XF, false, BULK>(p, x, xw, w, b, o, st, xop, eps)))
MMV_FMT(mmv_q8_0p, (mmv_reg_i8_impl<XF, true, BULK>(p, x, xw, w, b, o, st, xop, eps)))
MMV_FMT(mmv_q4_0p, (mmv_reg_p4_impl<0, XF, BULK>(p, x, xw, w, b, o, st, xop, eps)))
MMV_FMT(mmv_q5_0p, (mmv_reg_p4_impl<1, XF, BULK>(p, x, xw, w, b, o, st, xop, eps)))
MMV_FMT(mmv_q4_1p, (mmv_reg_p4_impl<3, XF, BULK>(p, x, xw, w, b, o, st, xop, eps)))
MMV_FMT(mmv_q5_1p, (mmv_reg_p4_impl<4, XF, BULK>(p, x, xw, w, b, o, st, xop, eps)))

// Per format: x's digits from the scratch (`_reg`), or quantized by the lanes themselves from
// f32 x (no matmul_quantize_x_m1 launch; `_regf`) after the prologue `xop` (matmul_prologue: 0
// none, 1 rmsnorm with weight xw, 2 silu_mul; `eps` the f32's bits); `_bulk` / `_bulkf` the same
// with the rows streamed through shared memory (sm_90; `stages` as mmv_pipe's).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define MMV_BULK(call) call
#else
#define MMV_BULK(call)
#endif
#define MMV_ENTRIES(fmt) \
    extern "C" __global__ void matmul_gemv_##fmt##_m1_reg(MatmulParams p, const u32* xq, const u8* w, const float* b, float* o) { mmv_##fmt<false, false>(p, xq, nullptr, w, b, o, 0, 0, 0); } \
    extern "C" __global__ void matmul_gemv_##fmt##_m1_regf(MatmulParams p, const float* x, const float* xw, const u8* w, const float* b, float* o, u32 xop, u32 eps) { mmv_##fmt<true, false>(p, x, xw, w, b, o, 0, xop, eps); } \
    extern "C" __global__ void matmul_gemv_##fmt##_m1_bulk(MatmulParams p, const u32* xq, const u8* w, const float* b, float* o, u32 stages) { MMV_BULK((mmv_##fmt<false, true>(p, xq, nullptr, w, b, o, stages, 0, 0))); } \
    extern "C" __global__ void matmul_gemv_##fmt##_m1_bulkf(MatmulParams p, const float* x, const float* xw, const u8* w, const float* b, float* o, u32 stages, u32 xop, u32 eps) { MMV_BULK((mmv_##fmt<true, true>(p, x, xw, w, b, o, stages, xop, eps))); }
MMV_ENTRIES(q4_k)
MMV_ENTRIES(q5_k)
MMV_ENTRIES(int8)
MMV_ENTRIES(q4_0p)
MMV_ENTRIES(q5_0p)
MMV_ENTRIES(q4_1p)
MMV_ENTRIES(q5_1p)
MMV_ENTRIES(q8_0p)

// x [k] -> the _m1 layout in global memory (xq: mmv_smem_bytes(k) bytes, 256-byte aligned); one
// thread per x word, grid-stride (ops_matmul launches 8 nxb threads).
extern "C" __global__ void matmul_quantize_x_m1(MatmulParams p, const float* x, u32* xq) {
    const u32 nxb = (p.k + 31) / 32, t = blockIdx.x * blockDim.x + threadIdx.x, threads = gridDim.x * blockDim.x;
    int* planes = reinterpret_cast<int*>(xq);
    mmv_quantize_x<true>(x, p.k, planes, 9 * nxb, reinterpret_cast<float2*>(xq + 18 * nxb), t, threads);
}

#define QGEMV(fmt, Q, M) \
    extern "C" __global__ void matmul_gemv_##fmt##_m1(MatmulParams p, const float* x, const u8* w, const float* b, float* o) { mmv_impl<M>(p, x, w, b, o); } \
    extern "C" __global__ void matmul_gemv_##fmt##_m1_pre(MatmulParams p, const u32* xq, const u8* w, const float* b, float* o) { mmv_pre_impl<M>(p, xq, w, b, o); } \
    extern "C" __global__ void matmul_gemv_##fmt##_m16(MatmulParams p, const float* x, const u8* w, const float* b, float* o) { qgemv_impl<Q, 16>(p, x, w, b, o); } \
    extern "C" __global__ void matmul_dequant_##fmt(MatmulParams p, const u8* w, f16_t* w16, u32 row0, u32 n_total) { qdequant_impl<Q>(p, w, w16, row0); }
QGEMV(q4_0, QQ4_0, MQ4_0)
QGEMV(q4_1, QQ4_1, MQ4_1)
QGEMV(q5_0, QQ5_0, MQ5_0)
QGEMV(q5_1, QQ5_1, MQ5_1)
QGEMV(q8_0, QQ8_0, MQ8_0)
QGEMV(q4_k, QQ4_K, MQ4_K)
QGEMV(q5_k, QQ5_K, MQ5_K)
QGEMV(q6_k, QQ6_K, MQ6_K)
QGEMV(q4_0p, QQ4_0P, MQ4_0P)
QGEMV(q5_0p, QQ5_0P, MQ5_0P)
QGEMV(q8_0p, QQ8_0P, MQ8_0P)
QGEMV(q4_1p, QQ4_1P, MQ4_1P)
QGEMV(q5_1p, QQ5_1P, MQ5_1P)

#define RGEMV(fmt, FP8) \
    extern "C" __global__ void matmul_gemv_##fmt##_m16(MatmulParams p, const float* x, const u8* w, const float* b, float* o) { rgemv_impl<FP8, 16>(p, x, w, b, o); } \
    extern "C" __global__ void matmul_dequant_##fmt(MatmulParams p, const u8* w, f16_t* w16, u32 row0, u32 n_total) { rdequant_impl<FP8>(p, w, w16, row0, n_total); }
RGEMV(int8, false)
RGEMV(fp8, true)
extern "C" __global__ void matmul_gemv_int8_m1(MatmulParams p, const float* x, const u8* w, const float* b, float* o) { mmv_int8_impl(p, x, w, b, o); }
extern "C" __global__ void matmul_gemv_int8_m1_pre(MatmulParams p, const u32* xq, const u8* w, const float* b, float* o) { mmv_int8_pre_impl(p, xq, w, b, o); }
// fp8 has no integer dot: its m == 1 entry is the f32 GEMV.
extern "C" __global__ void matmul_gemv_fp8_m1(MatmulParams p, const float* x, const u8* w, const float* b, float* o) { rgemv_impl<true, 1>(p, x, w, b, o); }
