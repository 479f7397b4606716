// Quantized weight formats in registers (appended after common.cuh to the modules that read
// them: embed, matmul_quant). The values are THOSE of the CPU reference
// (src/backend/reference/weight_quant.rs, ggml_quant.rs: ggml's dequantize_row_* formulas); with
// EX = true every multiply and add is rounded separately in the reference's order (__fmul_rn /
// __fadd_rn, never contracted), so embed and the bf16 scratch get the reference's f32 values bit
// for bit; the GEMV decodes with EX = false (contracted FMAs, within summation-order tolerance).
//
// A row of a GGML weight is k / QK whole blocks of BYTES bytes, the file's bytes as they are, so a
// block is only as aligned as BYTES allows: Q4_K / Q5_K blocks (144 / 176 bytes) are 16-byte
// aligned (allocations are 256-byte aligned), Q4_1 / Q5_1 (20 / 24) 4-byte, Q4_0, Q5_0, Q8_0 and
// Q6_K (18 / 22 / 34 / 210) only 2-byte: each format loads with the widest access its alignment
// allows (uint4, u32, or pairs of u16), never a wider unaligned one. Matrices of the 32-element
// formats whose rows are whole 256-element super-blocks are stored packed instead (QQP below).
//
// Decoding is split into "chunks" (what one lane decodes at once): Q::LANES chunks per block, each
// Q::NE = 32 * Q::RUNS weights, run r of chunk `sub` covering elements
// Q::xoff(sub, r) .. + 32 of the block (x offsets). Q::decode<EX>(blk, sub, w) writes them in that
// order. The 32-element types are one chunk of one run; the K-quants four chunks of two runs
// (64 weights), so 4 lanes share a 256-weight super-block.

typedef unsigned char u8;

// u32 of the little-endian bytes p[0..4] (p 2-byte aligned).
__device__ __forceinline__ u32 ld_u32_a2(const u8* p) {
    const u16* q = reinterpret_cast<const u16*>(p);
    return (u32)__ldg(q) | ((u32)__ldg(q + 1) << 16);
}
// u32 at any alignment (row scales of the row-scaled types sit after n * k code bytes).
__device__ __forceinline__ u32 ld_u32_a1(const u8* p) {
    return (u32)__ldg(p) | ((u32)__ldg(p + 1) << 8) | ((u32)__ldg(p + 2) << 16) | ((u32)__ldg(p + 3) << 24);
}
__device__ __forceinline__ float ld_f16_a2(const u8* p) { return f16_to_f32(__ldg(reinterpret_cast<const u16*>(p))); }
// NW words from a 2-, 4- or 16-byte aligned address (ALIGN).
template <int NW, int ALIGN>
__device__ __forceinline__ void ld_words(const u8* p, u32* w) {
    if (ALIGN >= 16) {
#pragma unroll
        for (int i = 0; i < NW / 4; i++) {
            uint4 v = __ldg(reinterpret_cast<const uint4*>(p) + i);
            w[4 * i] = v.x; w[4 * i + 1] = v.y; w[4 * i + 2] = v.z; w[4 * i + 3] = v.w;
        }
    } else if (ALIGN >= 4) {
#pragma unroll
        for (int i = 0; i < NW; i++) w[i] = __ldg(reinterpret_cast<const u32*>(p) + i);
    } else {
#pragma unroll
        for (int i = 0; i < NW; i++) w[i] = ld_u32_a2(p + 4 * i);
    }
}
__device__ __forceinline__ u32 byte_of(const u32* w, int i) { return (w[i >> 2] >> (8 * (i & 3))) & 0xffu; }

// Exact float of a small non-negative integer q < 2^23 without an I2F (two full-rate ops).
__device__ __forceinline__ float qf(u32 q) { return __int_as_float(0x4b000000u | q) - 8388608.0f; }
// Exact float of a signed byte given as its low 8 bits.
__device__ __forceinline__ float qf_i8(u32 b) { return __int_as_float(0x4b000000u | (b ^ 0x80u)) - 8388736.0f; }

template <bool EX> __device__ __forceinline__ float qmul(float a, float b) { return EX ? __fmul_rn(a, b) : a * b; }
// a * b + c, rounded like the reference (two roundings) when EX.
template <bool EX> __device__ __forceinline__ float qmad(float a, float b, float c) {
    return EX ? __fadd_rn(__fmul_rn(a, b), c) : fmaf(a, b, c);
}

// The 32-element formats by KIND (0: Q4_0, 1: Q5_0, 2: Q8_0, 3: Q4_1, 4: Q5_1): which fields a
// block has (MIN: a min, Q4_1 / Q5_1; QH: fifth bits, Q5_0 / Q5_1), and where the CUDA backend's
// packed layout puts them (QQP below).
template <int KIND>
struct PQ {
    static const bool MIN = KIND >= 3, QH = KIND == 1 || KIND == 4;
    static const int QB = KIND == 2 ? 32 : 16, MO = 16, HO = MIN ? 32 : 16;
    static const int QS = HO + (QH ? 32 : 0), BYTES = 8 * (QB + 2 + (MIN ? 2 : 0) + (QH ? 4 : 0));
};

// The 32 values of one block of a 32-element format from its fields, wherever they were read:
// scale d, min m (MIN), fifth-bit word qh (QH), code words q (4; Q8_0 8), in the reference's
// order (EX: ggml's formulas rounded step by step).
template <int KIND, bool EX>
__device__ __forceinline__ void q32_values(float d, float m, u32 qh, const u32* q, float* y) {
    if (KIND == 2) {
#pragma unroll
        for (int j = 0; j < 32; j++) y[j] = qmul<EX>(qf_i8(byte_of(q, j)), d);
        return;
    }
#pragma unroll
    for (int j = 0; j < 16; j++) {
        u32 v = byte_of(q, j), c0 = v & 15u, c1 = v >> 4;
        if (PQ<KIND>::QH) {
            c0 |= ((qh >> j) << 4) & 0x10u;
            c1 |= (qh >> (j + 12)) & 0x10u;
        }
        if (PQ<KIND>::MIN) {
            y[j] = qmad<EX>(qf(c0), d, m);
            y[j + 16] = qmad<EX>(qf(c1), d, m);
        } else {
            const float o = KIND == 1 ? 16.0f : 8.0f;
            y[j] = qmul<EX>(qf(c0) - o, d);
            y[j + 16] = qmul<EX>(qf(c1) - o, d);
        }
    }
}

struct QQ4_0 {
    static const int QK = 32, BYTES = 18, LANES = 1, RUNS = 1;
    static __device__ __forceinline__ u32 xoff(int, int) { return 0; }
    template <bool EX> static __device__ __forceinline__ void decode(const u8* b, int, float* y) {
        float d = ld_f16_a2(b);
        u32 q[4];
        ld_words<4, 2>(b + 2, q);
        q32_values<0, EX>(d, 0.0f, 0u, q, y);
    }
};

struct QQ4_1 {
    static const int QK = 32, BYTES = 20, LANES = 1, RUNS = 1;
    static __device__ __forceinline__ u32 xoff(int, int) { return 0; }
    template <bool EX> static __device__ __forceinline__ void decode(const u8* b, int, float* y) {
        u32 dm = __ldg(reinterpret_cast<const u32*>(b));
        u32 q[4];
        ld_words<4, 4>(b + 4, q);
        q32_values<3, EX>(f16_to_f32((u16)(dm & 0xffffu)), f16_to_f32((u16)(dm >> 16)), 0u, q, y);
    }
};

struct QQ5_0 {
    static const int QK = 32, BYTES = 22, LANES = 1, RUNS = 1;
    static __device__ __forceinline__ u32 xoff(int, int) { return 0; }
    template <bool EX> static __device__ __forceinline__ void decode(const u8* b, int, float* y) {
        float d = ld_f16_a2(b);
        u32 qh = ld_u32_a2(b + 2);
        u32 q[4];
        ld_words<4, 2>(b + 6, q);
        q32_values<1, EX>(d, 0.0f, qh, q, y);
    }
};

struct QQ5_1 {
    static const int QK = 32, BYTES = 24, LANES = 1, RUNS = 1;
    static __device__ __forceinline__ u32 xoff(int, int) { return 0; }
    template <bool EX> static __device__ __forceinline__ void decode(const u8* b, int, float* y) {
        uint2 hd = __ldg(reinterpret_cast<const uint2*>(b));
        u32 q[4];
        ld_words<4, 4>(b + 8, q);
        q32_values<4, EX>(f16_to_f32((u16)(hd.x & 0xffffu)), f16_to_f32((u16)(hd.x >> 16)), hd.y, q, y);
    }
};

struct QQ8_0 {
    static const int QK = 32, BYTES = 34, LANES = 1, RUNS = 1;
    static __device__ __forceinline__ u32 xoff(int, int) { return 0; }
    template <bool EX> static __device__ __forceinline__ void decode(const u8* b, int, float* y) {
        float d = ld_f16_a2(b);
        u32 q[8];
        ld_words<8, 2>(b + 2, q);
        q32_values<2, EX>(d, 0.0f, 0u, q, y);
    }
};

// The 32-element formats Q4_0, Q5_0, Q8_0, Q4_1 and Q5_1 as the CUDA backend stores matrices
// whose rows are whole 256-element super-blocks (src/backend/cuda/packed.rs, `<fmt>p`): 8
// consecutive GGML blocks of a row as one super-block of the same bytes, each field of the 8
// blocks together in the block's field order: their f16 scales (16 bytes), Q4_1 / Q5_1's f16
// mins (16 bytes), Q5_0 / Q5_1's fifth-bit words (32 bytes), then their codes (16 or 32 bytes a
// block), so every field is 16-byte aligned (the GGML blocks' 18 / 22 / 34 bytes allow only
// 2-byte loads, 20 / 24 only 4- / 8-byte ones). Same values: chunk c is GGML block 8 sb + c.
// Field offsets of block c (PQ above): scale 2c; min MO + 2c; qh HO + 4c; codes QS + QB c.
template <int KIND>
struct QQP {
    static const int QK = 256, BYTES = PQ<KIND>::BYTES, LANES = 8, RUNS = 1;
    static __device__ __forceinline__ u32 xoff(int c, int) { return 32 * c; }
    template <bool EX> static __device__ __forceinline__ void decode(const u8* b, int c, float* y) {
        float d = ld_f16_a2(b + 2 * c), m = PQ<KIND>::MIN ? ld_f16_a2(b + PQ<KIND>::MO + 2 * c) : 0.0f;
        u32 q[8];
        ld_words<PQ<KIND>::QB / 4, 16>(b + PQ<KIND>::QS + PQ<KIND>::QB * c, q);
        u32 qh = PQ<KIND>::QH ? __ldg(reinterpret_cast<const u32*>(b + PQ<KIND>::HO + 4 * c)) : 0u;
        q32_values<KIND, EX>(d, m, qh, q, y);
    }
};
typedef QQP<0> QQ4_0P;
typedef QQP<1> QQ5_0P;
typedef QQP<2> QQ8_0P;
typedef QQP<3> QQ4_1P;
typedef QQP<4> QQ5_1P;

// ggml's get_scale_min_k4 over the 12 scale bytes (as 3 words).
__device__ __forceinline__ void scale_min_k4(int j, const u32* s, u32& sc, u32& m) {
    if (j < 4) {
        sc = byte_of(s, j) & 63u;
        m = byte_of(s, j + 4) & 63u;
    } else {
        sc = (byte_of(s, j + 4) & 15u) | ((byte_of(s, j - 4) >> 6) << 4);
        m = (byte_of(s, j + 4) >> 4) | ((byte_of(s, j) >> 6) << 4);
    }
}

// Q4_K chunk g (0..3): elements 64g .. 64g + 64 (low nibbles of qs[32g..], then high nibbles).
struct QQ4_K {
    static const int QK = 256, BYTES = 144, LANES = 4, RUNS = 2;
    static __device__ __forceinline__ u32 xoff(int g, int r) { return 64 * g + 32 * r; }
    template <bool EX> static __device__ __forceinline__ void decode(const u8* b, int g, float* y) {
        uint4 h = __ldg(reinterpret_cast<const uint4*>(b));
        float d = f16_to_f32((u16)(h.x & 0xffffu)), dmin = f16_to_f32((u16)(h.x >> 16));
        u32 s[3] = {h.y, h.z, h.w};
        u32 sc, mn;
        scale_min_k4(2 * g, s, sc, mn);
        float d1 = qmul<EX>(d, qf(sc)), m1 = qmul<EX>(dmin, qf(mn));
        scale_min_k4(2 * g + 1, s, sc, mn);
        float d2 = qmul<EX>(d, qf(sc)), m2 = qmul<EX>(dmin, qf(mn));
        u32 q[8];
        ld_words<8, 16>(b + 16 + 32 * g, q);
#pragma unroll
        for (int l = 0; l < 32; l++) {
            u32 v = byte_of(q, l);
            y[l] = qmad<EX>(d1, qf(v & 15u), -m1);
            y[l + 32] = qmad<EX>(d2, qf(v >> 4), -m2);
        }
    }
};

// Q5_K chunk g: as Q4_K, the fifth bits in qh[l] bits 2g / 2g + 1.
struct QQ5_K {
    static const int QK = 256, BYTES = 176, LANES = 4, RUNS = 2;
    static __device__ __forceinline__ u32 xoff(int g, int r) { return 64 * g + 32 * r; }
    template <bool EX> static __device__ __forceinline__ void decode(const u8* b, int g, float* y) {
        uint4 h = __ldg(reinterpret_cast<const uint4*>(b));
        float d = f16_to_f32((u16)(h.x & 0xffffu)), dmin = f16_to_f32((u16)(h.x >> 16));
        u32 s[3] = {h.y, h.z, h.w};
        u32 sc, mn;
        scale_min_k4(2 * g, s, sc, mn);
        float d1 = qmul<EX>(d, qf(sc)), m1 = qmul<EX>(dmin, qf(mn));
        scale_min_k4(2 * g + 1, s, sc, mn);
        float d2 = qmul<EX>(d, qf(sc)), m2 = qmul<EX>(dmin, qf(mn));
        u32 qh[8], q[8];
        ld_words<8, 16>(b + 16, qh);
        ld_words<8, 16>(b + 48 + 32 * g, q);
#pragma unroll
        for (int l = 0; l < 32; l++) {
            u32 v = byte_of(q, l), hb = byte_of(qh, l) >> (2 * g);
            y[l] = qmad<EX>(d1, qf((v & 15u) + ((hb & 1u) << 4)), -m1);
            y[l + 32] = qmad<EX>(d2, qf((v >> 4) + ((hb & 2u) << 3)), -m2);
        }
    }
};

// Q6_K chunk t = 2n + j (half n of 128, j 0..1): run 0 = elements 128n + 32j + l (low nibbles of
// ql[64n + 32j + l], qh bits 2j), run 1 = 128n + 64 + 32j + l (high nibbles, qh bits 2j + 4).
struct QQ6_K {
    static const int QK = 256, BYTES = 210, LANES = 4, RUNS = 2;
    static __device__ __forceinline__ u32 xoff(int t, int r) { return 128 * (t >> 1) + 32 * (t & 1) + 64 * r; }
    template <bool EX> static __device__ __forceinline__ void decode(const u8* b, int t, float* y) {
        int n = t >> 1, j = t & 1;
        float d = ld_f16_a2(b + 208);
        u32 ql[8], qh[8];
        ld_words<8, 2>(b + 64 * n + 32 * j, ql);
        ld_words<8, 2>(b + 128 + 32 * n, qh);
        // scales sc[8n + is + 2j] (run 0) and sc[8n + is + 2j + 4] (run 1), is = l / 16.
        u32 sw01[2] = {ld_u32_a2(b + 192 + 8 * n), ld_u32_a2(b + 196 + 8 * n)};
        float ds[2][2];
#pragma unroll
        for (int r = 0; r < 2; r++)
#pragma unroll
            for (int is = 0; is < 2; is++) {
                int idx = is + 2 * j + 4 * r; // 0..7 within sc[8n..]
                u32 sb = (sw01[idx >> 2] >> (8 * (idx & 3))) & 0xffu;
                ds[r][is] = qmul<EX>(d, qf_i8(sb));
            }
#pragma unroll
        for (int l = 0; l < 32; l++) {
            u32 v = byte_of(ql, l), hb = byte_of(qh, l) >> (2 * j);
            float q0 = qf((v & 15u) | ((hb & 3u) << 4)) - 32.0f;
            float q1 = qf((v >> 4) | (((hb >> 4) & 3u) << 4)) - 32.0f;
            y[l] = qmul<EX>(ds[0][l >> 4], q0);
            y[l + 32] = qmul<EX>(ds[1][l >> 4], q1);
        }
    }
};

// e4m3 code (low 8 bits) as f32, exactly: its bits moved under f32's exponent give the value times
// 2^-120 for normals and subnormals alike; the multiply by 2^120 is exact.
__device__ __forceinline__ float e4m3_f32(u32 c) {
    u32 bits = ((c & 0x7fu) << 20) | ((c & 0x80u) << 24);
    return __int_as_float(bits) * __int_as_float(0x7b800000u); // 2^120
}

// ---- integer-dot helpers (the _m1 GEMVs of matmul_quant.cu, the MMQ GEMM of matmul_mmq.cu) ----

// Bytes b - o per byte of v (each byte b <= 127 and o <= 0x7f: no borrow crosses bytes), as the
// signed codes __dp4a and the s8 mma want.
__device__ __forceinline__ int sub_bytes(u32 v, u32 o) { return (int)(((v | 0x80808080u) - o) ^ 0x80808080u); }
// Bit j of v (j = 0..3) moved to bit 4 of byte j (the fifth bits of Q5_0 / Q5_1).
__device__ __forceinline__ u32 bit4_bytes(u32 v) {
    return ((v << 4) & 0x10u) | ((v << 11) & 0x1000u) | ((v << 18) & 0x100000u) | ((v << 25) & 0x10000000u);
}
const u32 LO4 = 0x0f0f0f0fu;
// Word i (0..3) of a packed 4-bit block's codes (QQP: Q4_0, Q5_0, Q4_1, Q5_1) as the bytes the
// dot takes: elements 4i .. 4i + 3 (lo) and 16 + 4i .. (hi), the fifth bits from the qh word,
// Q4_0 / Q5_0's offsets -8 / -16 applied (signed); Q4_1 / Q5_1's codes stay unsigned (< 32),
// their offset is the min term.
template <int KIND>
__device__ __forceinline__ void p4_codes(u32 q, u32 qh, int i, u32& lo, u32& hi) {
    lo = q & LO4;
    hi = (q >> 4) & LO4;
    if (PQ<KIND>::QH) {
        lo |= bit4_bytes(qh >> (4 * i));
        hi |= bit4_bytes(qh >> (4 * i + 16));
    }
    if (!PQ<KIND>::MIN) {
        const u32 off = KIND == 1 ? 0x10101010u : 0x08080808u;
        lo = (u32)sub_bytes(lo, off);
        hi = (u32)sub_bytes(hi, off);
    }
}
// Exact float of an int with |s| < 2^22 without an I2F (quarter rate on sm_90): two full-rate ops.
__device__ __forceinline__ float qf_s(int s) { return __int_as_float(0x4b400000 + s) - 12582912.0f; }
// The digit sums of a dot as one float in units of d: h + l / 254.
__device__ __forceinline__ float xsum(int h, int l) { return fmaf(qf_s(l), 1.0f / 254.0f, qf_s(h)); }

