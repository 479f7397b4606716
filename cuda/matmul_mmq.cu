// matmul over integer-coded quantized weights for 2 <= m <= 64 rows of x (batched decode, short
// prefill chunks): the tensor-core "MMQ" GEMM (the idea of llama.cpp's mmq.cuh, our code). out[out_off
// + r * ldo + c] = x[r, :] . w[c, :] (+ bias[c]) for the GGML formats Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K
// Q5_K Q6_K and int8 rows (fp8 rows have no integer form: they keep matmul_quant.cu's paths).
//
// Two kernels per call (src/backend/cuda/ops_matmul.rs `matmul_mmq`):
//
// 1. matmul_quantize_x: x [m][k] f32 -> two int8 digits per element, blocks of 32 (x8_quantize4 in
//    common.cuh: x = d (hi + lo / 254), ~16 bits, exactly the m == 1 GEMV's digits, so a batch
//    multiplies x as precisely as a single row does and the parity tests compare against the CPU
//    with x snapped to that grid at TOL_REDUCTION, not a 16-bit-activation tolerance) into two
//    scratches laid out for the mma B fragments:
//      xq  [nkb][mp][4] uint4: block kb (elements 32 kb .. + 32) of x row r, for lane quad t the
//          words {hi[4t..4t+3], hi[16+4t..16+4t+3], lo[4t..4t+3], lo[16+4t..16+4t+3]}
//          (element i of a word in byte i): one 16-byte load gives a lane both digits' B fragments;
//      xds [nkb][mp] float2: (d, f32 sum of the block's x) — the sum is the exact one the min terms
//          (Q4_1, Q5_1, Q4_K, Q5_K) multiply.
//    mp = 8 NT rows (m rounded up to the entry's n-tiles), nkb = ceil(k / 32); padded rows and
//    elements past k are 0.
//
// 2. matmul_mmq_<fmt>_n<NT>: a block of 256 threads owns 32 weight rows (two 16-row m-tiles: the
//    weights are the M side of mma.m16n8k32.s8, output channels) and all m rows of x (NT = 1, 2, 4
//    or 8 n-tiles of 8 x rows; tiles past ceil(m / 8) multiply zero rows and are not stored). Its 8 warps split k: warp w takes
//    groups of Q::U consecutive load units (a 32-block, or a 256-weight K-quant super-block) w, w +
//    8, ...; each warp reads its share of the 32 rows' bytes exactly once, so every weight byte is
//    read once per call, and the warps' int32 tiles never meet until a deterministic shared-memory
//    sum over the 8 warps at the end (fixed order, no atomics).
//    Per unit, lane l (g = l / 4, t = l % 4) loads, for its rows g, g + 8, g + 16, g + 24 of the block,
//    the codes of elements 4t .. 4t + 3 and 16 + 4t .. 16 + 4t + 3 of each 32-element k-step, which
//    is exactly its A fragment (PTX ISA m16n8k32 .s8: a0 = row g, k 4t..; a1 = row g + 8, k 4t..;
//    a2 = row g, k 16 + 4t..; a3 = row g + 8, k 16 + 4t..), and the block / sub-block scales of its
//    rows, which are the rows of its accumulator elements (c0, c1 = row g, cols 2t, 2t + 1; c2, c3 =
//    row g + 8). The 32-element formats store element j and j + 16 in the low and high nibbles of
//    byte j, the K-quants sub-blocks 2i and 2i + 1 in the two nibbles of one 32-byte run, so each
//    lane's codes come from two (K-quants: one per two sub-blocks) 4-byte words of the row, unpacked
//    in registers: nibbles masked, fifth / sixth bits or'ed in, signed offsets (-8, -16, -32)
//    subtracted bytewise. Lanes read the loads of all U units of a group before the first mma
//    (in flight together), with the widest access each format's alignment allows (quant.cuh).
//    Per k-step and n-tile: two mma (hi and lo digit, fresh int32 accumulators: |sum| < 32 * 128 *
//    127 < 2^22, so qf_s converts exactly), then acc += d_w * (h + l / 254) * d_x (+ m_w * sum_x) in
//    f32. Q6_K's scales change every 16 elements: it takes two m16n8k16 per digit instead (a0 =
//    row g, k 4t..; a1 = row g + 8; b0 = k 4t..), the low words covering elements 0..15 and the
//    high words 16..31 of the k-step, each with its own scale.
//
// Why this shape (no measurements behind it; docs/backends.md): a block has to cover 32 rows so that
// the 4096-row matrices of an 8B model still make 128 blocks (one per SM) while each block re-reads
// the quantized x (2 bytes per element; from L2, 1.8x the Q4_K weight bytes at m = 16) as few times
// as possible; splitting k over the warps of the block, not over blocks, keeps the result
// deterministic and needs neither atomics nor a second pass. The weight loads are plain __ldg
// into registers (a whole group of units per warp in flight, 8 warps a block) rather than cp.async
// through shared memory: no value of a weight byte is shared between lanes, so staging would add a
// shared-memory round trip for nothing but wider global loads.

#define MMQ_WARPS 8

// ---- tensor-core steps ---------------------------------------------------------------------

__device__ __forceinline__ void mma_s8_k32(int* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_s8_k16(int* c, u32 a0, u32 a1, u32 b0) {
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a0), "r"(a1), "r"(b0));
}

// One weight row's share of a 32-element k-step for lane quad t: codes of elements 4t.. (lo) and
// 16 + 4t.. (hi) as signed bytes, the scale of each (d0 for lo, d1 for hi: equal but for Q6_K) and
// the min coefficient m (value = d code + m; 0 for the formats without one).
struct MFrag {
    u32 lo, hi;
    float d0, d1, m;
};

// Per format: U load units per group (about 70-210 bytes of a row; more made ptxas spill), S k-steps per unit, MIN: has
// a min term, K16: scales per 16 elements; units(k), row(w, r, k) the row's first byte,
// load(row, u, t, k) the unit's raw words for lane quad t, frag(raw, s) k-step s of the unit.
struct MMQ4_0 {
    static const int U = 4, S = 1;
    static const bool MIN = false, K16 = false;
    struct Raw { u32 q; float d; };
    static __device__ __forceinline__ u32 units(u32 k) { return k / 32; }
    static __device__ __forceinline__ const u8* row(const u8* w, u32 r, u32 k) { return w + (u64)r * (k / 32) * 18; }
    static __device__ __forceinline__ Raw load(const u8* row, u32 u, u32 t, u32) {
        const u8* b = row + (u64)u * 18;
        return Raw{ld_u32_a2(b + 2 + 4 * t), ld_f16_a2(b)};
    }
    static __device__ __forceinline__ MFrag frag(const Raw& r, int) {
        return MFrag{(u32)sub_bytes(r.q & LO4, 0x08080808u), (u32)sub_bytes((r.q >> 4) & LO4, 0x08080808u), r.d, r.d, 0.0f};
    }
};
struct MMQ4_1 {
    static const int U = 4, S = 1;
    static const bool MIN = true, K16 = false;
    struct Raw { u32 q, dm; };
    static __device__ __forceinline__ u32 units(u32 k) { return k / 32; }
    static __device__ __forceinline__ const u8* row(const u8* w, u32 r, u32 k) { return w + (u64)r * (k / 32) * 20; }
    static __device__ __forceinline__ Raw load(const u8* row, u32 u, u32 t, u32) {
        const u8* b = row + (u64)u * 20;
        return Raw{__ldg(reinterpret_cast<const u32*>(b + 4) + t), __ldg(reinterpret_cast<const u32*>(b))};
    }
    static __device__ __forceinline__ MFrag frag(const Raw& r, int) {
        float d = f16_to_f32((u16)(r.dm & 0xffffu));
        return MFrag{r.q & LO4, (r.q >> 4) & LO4, d, d, f16_to_f32((u16)(r.dm >> 16))};
    }
};
struct MMQ5_0 {
    static const int U = 4, S = 1;
    static const bool MIN = false, K16 = false;
    struct Raw { u32 q, qh; float d; };
    static __device__ __forceinline__ u32 units(u32 k) { return k / 32; }
    static __device__ __forceinline__ const u8* row(const u8* w, u32 r, u32 k) { return w + (u64)r * (k / 32) * 22; }
    static __device__ __forceinline__ Raw load(const u8* row, u32 u, u32 t, u32) {
        const u8* b = row + (u64)u * 22;
        u32 qh = ld_u32_a2(b + 2);
        // Only the fifth bits of this lane's elements (4t.. and 16 + 4t..) are kept, in bytes 0 / 2.
        return Raw{ld_u32_a2(b + 6 + 4 * t), qh >> (4 * t), ld_f16_a2(b)};
    }
    static __device__ __forceinline__ MFrag frag(const Raw& r, int) {
        u32 lo = (r.q & LO4) | bit4_bytes(r.qh), hi = ((r.q >> 4) & LO4) | bit4_bytes(r.qh >> 16);
        return MFrag{(u32)sub_bytes(lo, 0x10101010u), (u32)sub_bytes(hi, 0x10101010u), r.d, r.d, 0.0f};
    }
};
struct MMQ5_1 {
    static const int U = 4, S = 1;
    static const bool MIN = true, K16 = false;
    struct Raw { u32 q, qh, dm; };
    static __device__ __forceinline__ u32 units(u32 k) { return k / 32; }
    static __device__ __forceinline__ const u8* row(const u8* w, u32 r, u32 k) { return w + (u64)r * (k / 32) * 24; }
    static __device__ __forceinline__ Raw load(const u8* row, u32 u, u32 t, u32) {
        const u8* b = row + (u64)u * 24;
        uint2 hd = __ldg(reinterpret_cast<const uint2*>(b));
        return Raw{__ldg(reinterpret_cast<const u32*>(b + 8) + t), hd.y >> (4 * t), hd.x};
    }
    static __device__ __forceinline__ MFrag frag(const Raw& r, int) {
        u32 lo = (r.q & LO4) | bit4_bytes(r.qh), hi = ((r.q >> 4) & LO4) | bit4_bytes(r.qh >> 16);
        float d = f16_to_f32((u16)(r.dm & 0xffffu));
        return MFrag{lo, hi, d, d, f16_to_f32((u16)(r.dm >> 16))};
    }
};
struct MMQ8_0 {
    static const int U = 2, S = 1;
    static const bool MIN = false, K16 = false;
    struct Raw { u32 lo, hi; float d; };
    static __device__ __forceinline__ u32 units(u32 k) { return k / 32; }
    static __device__ __forceinline__ const u8* row(const u8* w, u32 r, u32 k) { return w + (u64)r * (k / 32) * 34; }
    static __device__ __forceinline__ Raw load(const u8* row, u32 u, u32 t, u32) {
        const u8* b = row + (u64)u * 34;
        return Raw{ld_u32_a2(b + 2 + 4 * t), ld_u32_a2(b + 18 + 4 * t), ld_f16_a2(b)};
    }
    static __device__ __forceinline__ MFrag frag(const Raw& r, int) { return MFrag{r.lo, r.hi, r.d, r.d, 0.0f}; }
};

// The packed 32-element formats (quant.cuh QQP): a unit is half a super-block (GGML blocks 4h ..
// 4h + 3 of super-block u / 2, h = u % 2: k-steps s = 0..3), its four f16 scales (and mins) one
// 8-byte load each, the four fifth-bit words one 16-byte load (each shifted to the lane quad's
// bits as MMQ5_0 does), and each k-step's codes aligned words (4-bit: one word holds elements
// 4t.. in its low and 16 + 4t.. in its high nibbles; Q8_0: two words), as the GGML-block
// readers above take them from 2- or 4-byte-aligned blocks.
template <int KIND>
struct MMQP {
    static const int U = 1, S = 4;
    static const bool MIN = PQ<KIND>::MIN, K16 = false;
    struct Raw { uint2 d, m; u32 q[8]; u32 qh[4]; };
    static __device__ __forceinline__ u32 units(u32 k) { return k / 128; }
    static __device__ __forceinline__ const u8* row(const u8* w, u32 r, u32 k) { return w + (u64)r * (k / 256) * PQ<KIND>::BYTES; }
    static __device__ __forceinline__ Raw load(const u8* row, u32 u, u32 t, u32) {
        const u8* b = row + (u64)(u / 2) * PQ<KIND>::BYTES;
        const u32 h = u % 2;
        Raw r;
        r.d = __ldg(reinterpret_cast<const uint2*>(b + 8 * h));
        r.m = MIN ? __ldg(reinterpret_cast<const uint2*>(b + PQ<KIND>::MO + 8 * h)) : make_uint2(0u, 0u);
        const u32* q = reinterpret_cast<const u32*>(b + PQ<KIND>::QS + 4 * PQ<KIND>::QB * h);
#pragma unroll
        for (int s = 0; s < 4; s++) {
            r.q[2 * s] = __ldg(q + PQ<KIND>::QB / 4 * s + t);
            r.q[2 * s + 1] = KIND == 2 ? __ldg(q + 8 * s + 4 + t) : 0u;
            r.qh[s] = 0u;
        }
        if (PQ<KIND>::QH) {
            uint4 hw = __ldg(reinterpret_cast<const uint4*>(b + PQ<KIND>::HO + 16 * h));
            r.qh[0] = hw.x >> (4 * t); r.qh[1] = hw.y >> (4 * t); r.qh[2] = hw.z >> (4 * t); r.qh[3] = hw.w >> (4 * t);
        }
        return r;
    }
    static __device__ __forceinline__ MFrag frag(const Raw& r, int s) {
        const u32 sh = 16 * (s & 1);
        float d = f16_to_f32((u16)(((s < 2 ? r.d.x : r.d.y) >> sh) & 0xffffu));
        float m = MIN ? f16_to_f32((u16)(((s < 2 ? r.m.x : r.m.y) >> sh) & 0xffffu)) : 0.0f;
        if (KIND == 2) return MFrag{r.q[2 * s], r.q[2 * s + 1], d, d, 0.0f};
        u32 lo, hi;
        p4_codes<KIND>(r.q[2 * s], r.qh[s], 0, lo, hi);
        return MFrag{lo, hi, d, d, m};
    }
};
typedef MMQP<0> MMQ4_0P;
typedef MMQP<1> MMQ5_0P;
typedef MMQP<2> MMQ8_0P;
typedef MMQP<3> MMQ4_1P;
typedef MMQP<4> MMQ5_1P;

// Q4_K / Q5_K: k-step s (0..7) of a super-block is sub-block s, elements 32 s .. 32 s + 31: the low
// (s even) or high (s odd) nibbles of code bytes 32 (s / 2) .. + 32, Q5_K's fifth bits bit s of
// qh[0 .. 32]; scale d * sc_s, min -dmin * m_s (ggml's get_scale_min_k4). Lane quad t keeps the
// words at code bytes 32 i + 4t and 32 i + 16 + 4t (i = 0..3) and, for Q5_K, qh bytes 4t.. / 16 + 4t...
template <bool Q5>
struct MMQK {
    static const int U = 1, S = 8, BYTES = Q5 ? 176 : 144, QS = Q5 ? 48 : 16;
    static const bool MIN = true, K16 = false;
    struct Raw { uint4 h; u32 q[8]; u32 qh[2]; };
    static __device__ __forceinline__ u32 units(u32 k) { return k / 256; }
    static __device__ __forceinline__ const u8* row(const u8* w, u32 r, u32 k) { return w + (u64)r * (k / 256) * BYTES; }
    static __device__ __forceinline__ Raw load(const u8* row, u32 u, u32 t, u32) {
        const u8* b = row + (u64)u * BYTES;
        Raw r;
        r.h = __ldg(reinterpret_cast<const uint4*>(b));
        const u32* q = reinterpret_cast<const u32*>(b + QS);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            r.q[2 * i] = __ldg(q + 8 * i + t);
            r.q[2 * i + 1] = __ldg(q + 8 * i + 4 + t);
        }
        if (Q5) {
            const u32* qh = reinterpret_cast<const u32*>(b + 16);
            r.qh[0] = __ldg(qh + t);
            r.qh[1] = __ldg(qh + 4 + t);
        } else {
            r.qh[0] = r.qh[1] = 0;
        }
        return r;
    }
    static __device__ __forceinline__ MFrag frag(const Raw& r, int s) {
        u32 sh = 4 * (s & 1), i = s >> 1;
        u32 lo = (r.q[2 * i] >> sh) & LO4, hi = (r.q[2 * i + 1] >> sh) & LO4;
        if (Q5) {
            lo |= ((r.qh[0] >> s) & 0x01010101u) << 4;
            hi |= ((r.qh[1] >> s) & 0x01010101u) << 4;
        }
        u32 sw[3] = {r.h.y, r.h.z, r.h.w}, sc, mn;
        scale_min_k4(s, sw, sc, mn);
        float d = qf(sc) * f16_to_f32((u16)(r.h.x & 0xffffu));
        return MFrag{lo, hi, d, d, -(qf(mn) * f16_to_f32((u16)(r.h.x >> 16)))};
    }
};
typedef MMQK<false> MMQ4_K;
typedef MMQK<true> MMQ5_K;

// Q6_K: k-step s (0..7) = elements 32 s .. + 32 = half n = s / 4, quarter i = s % 4 of ggml's
// dequantize_row_q6_K: low (i < 2) or high nibbles of ql[64 n + 32 (i % 2) + l], bits 2i, 2i + 1 of
// qh[32 n + l], minus 32, scale sc[8 n + 2 i + l / 16] (l = 0..31: the lo word, l < 16, takes the
// first, the hi word the second). Blocks are 2-byte aligned: u16 pairs.
struct MMQ6_K {
    static const int U = 1, S = 8;
    static const bool MIN = false, K16 = true;
    struct Raw { u32 ql[8], qh[4], sc[4]; float d; };
    static __device__ __forceinline__ u32 units(u32 k) { return k / 256; }
    static __device__ __forceinline__ const u8* row(const u8* w, u32 r, u32 k) { return w + (u64)r * (k / 256) * 210; }
    static __device__ __forceinline__ Raw load(const u8* row, u32 u, u32 t, u32) {
        const u8* b = row + (u64)u * 210;
        Raw r;
#pragma unroll
        for (int n = 0; n < 2; n++) {
#pragma unroll
            for (int j = 0; j < 2; j++) {
                r.ql[4 * n + 2 * j] = ld_u32_a2(b + 64 * n + 32 * j + 4 * t);
                r.ql[4 * n + 2 * j + 1] = ld_u32_a2(b + 64 * n + 32 * j + 16 + 4 * t);
            }
            r.qh[2 * n] = ld_u32_a2(b + 128 + 32 * n + 4 * t);
            r.qh[2 * n + 1] = ld_u32_a2(b + 128 + 32 * n + 16 + 4 * t);
        }
#pragma unroll
        for (int i = 0; i < 4; i++) r.sc[i] = ld_u32_a2(b + 192 + 4 * i);
        r.d = ld_f16_a2(b + 208);
        return r;
    }
    static __device__ __forceinline__ MFrag frag(const Raw& r, int s) {
        int n = s >> 2, i = s & 3, j = i & 1;
        u32 sh = 4 * (i >> 1);
        u32 lo = ((r.ql[4 * n + 2 * j] >> sh) & LO4) | (((r.qh[2 * n] >> (2 * i)) & 0x03030303u) << 4);
        u32 hi = ((r.ql[4 * n + 2 * j + 1] >> sh) & LO4) | (((r.qh[2 * n + 1] >> (2 * i)) & 0x03030303u) << 4);
        float d0 = r.d * qf_i8(byte_of(r.sc, 8 * n + 2 * i)), d1 = r.d * qf_i8(byte_of(r.sc, 8 * n + 2 * i + 1));
        return MFrag{(u32)sub_bytes(lo, 0x20202020u), (u32)sub_bytes(hi, 0x20202020u), d0, d1, 0.0f};
    }
};

// int8 rows ([n][k] codes, then [n] f32 scales): units of 32 codes; the row's scale multiplies the
// sum at the end (row_scale). Rows are 4-byte aligned when k % 4 == 0 (word loads; words past k are
// 0), else byte loads.
struct MMQI8 {
    static const int U = 4, S = 1;
    static const bool MIN = false, K16 = false;
    struct Raw { u32 lo, hi; };
    static __device__ __forceinline__ u32 units(u32 k) { return (k + 31) / 32; }
    static __device__ __forceinline__ const u8* row(const u8* w, u32 r, u32 k) { return w + (u64)r * k; }
    static __device__ __forceinline__ u32 word(const u8* row, u32 e, u32 k) {
        if ((k & 3u) == 0u) return e < k ? __ldg(reinterpret_cast<const u32*>(row + e)) : 0u;
        u32 v = 0;
#pragma unroll
        for (u32 i = 0; i < 4; i++)
            if (e + i < k) v |= (u32)__ldg(row + e + i) << (8 * i);
        return v;
    }
    static __device__ __forceinline__ Raw load(const u8* row, u32 u, u32 t, u32 k) {
        return Raw{word(row, 32 * u + 4 * t, k), word(row, 32 * u + 16 + 4 * t, k)};
    }
    static __device__ __forceinline__ MFrag frag(const Raw& r, int) { return MFrag{r.lo, r.hi, 1.0f, 1.0f, 0.0f}; }
};

template <class Q> __device__ __forceinline__ float row_scale(const MatmulParams&, const u8*, u32) { return 1.0f; }
template <> __device__ __forceinline__ float row_scale<MMQI8>(const MatmulParams& p, const u8* w, u32 r) {
    return __uint_as_float(ld_u32_a1(w + (u64)p.n * p.k + 4ull * r));
}

// ---- x -> int8 digits ------------------------------------------------------------------------

// Rows of the x scratches: m rounded up to the entry's n-tiles (8 x 1, 2, 4 or 8; ops_matmul.rs
// mmq_tiles), so the GEMM reads every tile of its entry without a bounds branch.
__device__ __forceinline__ u32 mmq_rows(u32 m) {
    u32 t = (m + 7u) / 8u;
    return 8u * (t <= 1u ? 1u : t <= 2u ? 2u : t <= 4u ? 4u : 8u);
}

// 8 lanes per (x block kb, row r) pair, pair index kb * mp + r; lane e of the 8 quantizes elements
// 4e .. 4e + 3 (e < 4: quad t = e, first word; else t = e - 4, second word).
extern "C" __global__ void matmul_quantize_x(MatmulParams p, const float* x, u32* xq, float* xds) {
    const u32 mp = mmq_rows(p.m), nkb = (p.k + 31u) / 32u;
    const u64 gid = (u64)blockIdx.x * blockDim.x + threadIdx.x, pair = gid >> 3;
    const u32 e = (u32)(gid & 7u);
    const bool live = pair < (u64)nkb * mp;
    const u32 kb = live ? (u32)(pair / mp) : 0u, r = live ? (u32)(pair % mp) : 0u, c0 = 32u * kb + 4u * e;
    float v[4];
    if (live && r < p.m && (p.k & 3u) == 0u && c0 < p.k) {
        float4 a = __ldg(reinterpret_cast<const float4*>(x + (u64)r * p.k + c0));
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    } else {
#pragma unroll
        for (u32 i = 0; i < 4; i++) v[i] = live && r < p.m && c0 + i < p.k ? __ldg(x + (u64)r * p.k + c0 + i) : 0.0f;
    }
    u32 hi, lo;
    float d, sum;
    x8_quantize4(v, hi, lo, d, sum);
    if (live) {
        u32* dst = xq + (pair * 4u + (e & 3u)) * 4u;
        dst[e >> 2] = hi;
        dst[2u + (e >> 2)] = lo;
        if (e == 0u) reinterpret_cast<float2*>(xds)[pair] = make_float2(d, sum);
    }
}

// ---- the GEMM --------------------------------------------------------------------------------

// The x side of one k-step, every n-tile: lane (g, t)'s digit words of x row 8j + g, and (d, sum) of
// x rows 8j + 2t, 8j + 2t + 1 (its accumulator columns).
template <int NT>
struct XFrag {
    uint4 q[NT];
    float4 ds[NT];
};
template <int NT>
__device__ __forceinline__ void x_load(XFrag<NT>& x, const uint4* xq, const float4* xds, u32 kb, u32 g, u32 t) {
#pragma unroll
    for (int j = 0; j < NT; j++) {
        const u64 base = (u64)kb * (8u * NT) + 8u * j;
        x.q[j] = __ldg(xq + (base + g) * 4u + t);
        x.ds[j] = __ldg(xds + (base + 2u * t) / 2u);
    }
}

// One k-step for the lane's four rows f[0..4] (rows g, g + 8 of m-tile 0, then of m-tile 1).
template <class Q, int NT>
__device__ __forceinline__ void mmq_step(float (&acc)[2][NT][4], const MFrag* f, const XFrag<NT>& x) {
#pragma unroll
    for (int j = 0; j < NT; j++) {
        const uint4 xv = x.q[j];
        const float4 xd = x.ds[j];
#pragma unroll
        for (int mt = 0; mt < 2; mt++) {
            const MFrag& a = f[2 * mt];
            const MFrag& b = f[2 * mt + 1];
            float v[4];
            if (Q::K16) {
                int h0[4] = {0, 0, 0, 0}, l0[4] = {0, 0, 0, 0}, h1[4] = {0, 0, 0, 0}, l1[4] = {0, 0, 0, 0};
                mma_s8_k16(h0, a.lo, b.lo, xv.x);
                mma_s8_k16(l0, a.lo, b.lo, xv.z);
                mma_s8_k16(h1, a.hi, b.hi, xv.y);
                mma_s8_k16(l1, a.hi, b.hi, xv.w);
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    const MFrag& r = c < 2 ? a : b;
                    v[c] = fmaf(r.d0, xsum(h0[c], l0[c]), r.d1 * xsum(h1[c], l1[c]));
                }
            } else {
                int h[4] = {0, 0, 0, 0}, l[4] = {0, 0, 0, 0};
                mma_s8_k32(h, a.lo, b.lo, a.hi, b.hi, xv.x, xv.y);
                mma_s8_k32(l, a.lo, b.lo, a.hi, b.hi, xv.z, xv.w);
#pragma unroll
                for (int c = 0; c < 4; c++) v[c] = (c < 2 ? a : b).d0 * xsum(h[c], l[c]);
            }
#pragma unroll
            for (int c = 0; c < 4; c++) {
                float& o = acc[mt][j][c];
                o = fmaf(v[c], (c & 1) ? xd.z : xd.x, o);
                if (Q::MIN) o = fmaf((c < 2 ? a : b).m, (c & 1) ? xd.w : xd.y, o);
            }
        }
    }
}

// The warp's k loop is straight-line code per group of U units (no branch between a load and its
// use, so the compiler may hoist): units past the row's end (the last group) load the last unit
// and count with zero scales; the x fragments of step q + 1 load while step q multiplies (for NT
// <= 4; at NT = 8 the registers go to the accumulators).
template <class Q, int NT>
__device__ __forceinline__ void mmq_impl(const MatmulParams& p, const u32* xq, const float* xds, const u8* w,
                                         const float* bias, float* out) {
    __shared__ float red[MMQ_WARPS][32][9]; // per warp: [row of the block][x row of the n-tile] (+1 pad)
    const u32 lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const u32 g = lane >> 2, t = lane & 3u, row0 = blockIdx.x * 32u;
    const uint4* xq4 = reinterpret_cast<const uint4*>(xq);
    const float4* xds4 = reinterpret_cast<const float4*>(xds);
    // Rows past n read row n - 1 (never stored).
    const u8* rows[4];
#pragma unroll
    for (int i = 0; i < 4; i++) rows[i] = Q::row(w, min(row0 + 8u * i + g, p.n - 1u), p.k);
    float acc[2][NT][4];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[mt][j][c] = 0.0f;
    const u32 nu = Q::units(p.k);
    const int STEPS = Q::U * Q::S;
    const bool PF = NT <= 4;
    for (u32 u0 = warp * Q::U; u0 < nu; u0 += nw * Q::U) {
        typename Q::Raw raw[Q::U][4];
#pragma unroll
        for (int uu = 0; uu < Q::U; uu++)
#pragma unroll
            for (int i = 0; i < 4; i++) raw[uu][i] = Q::load(rows[i], min(u0 + uu, nu - 1u), t, p.k);
        XFrag<NT> xf[2];
        if (PF) x_load<NT>(xf[0], xq4, xds4, min(u0, nu - 1u) * Q::S, g, t);
#pragma unroll
        for (int q = 0; q < STEPS; q++) {
            const int uu = q / Q::S, s = q % Q::S;
            const u32 u = u0 + uu;
            XFrag<NT>& xc = xf[PF ? (q & 1) : 0];
            if (PF && q + 1 < STEPS) {
                const u32 un = u0 + (q + 1) / Q::S;
                x_load<NT>(xf[(q + 1) & 1], xq4, xds4, min(un, nu - 1u) * Q::S + (q + 1) % Q::S, g, t);
            }
            if (!PF) x_load<NT>(xc, xq4, xds4, min(u, nu - 1u) * Q::S + s, g, t);
            const bool valid = u < nu;
            MFrag f[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                f[i] = Q::frag(raw[uu][i], s);
                f[i].d0 = valid ? f[i].d0 : 0.0f;
                f[i].d1 = valid ? f[i].d1 : 0.0f;
                f[i].m = valid ? f[i].m : 0.0f;
            }
            mmq_step<Q, NT>(acc, f, xc);
        }
    }
    // The warps' partial tiles, one n-tile at a time, summed in warp order (deterministic).
    const u32 tiles = (p.m + 7u) / 8u;
#pragma unroll
    for (int j = 0; j < NT; j++) {
        if ((u32)j >= tiles) break;
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int c = 0; c < 4; c++) red[warp][16 * mt + 8 * (c >> 1) + g][2 * t + (c & 1)] = acc[mt][j][c];
        __syncthreads();
        for (u32 e = threadIdx.x; e < 256u; e += blockDim.x) {
            const u32 rl = e & 31u, cl = e >> 5, r = row0 + rl, c = 8u * j + cl;
            if (r < p.n && c < p.m) {
                float s = 0.0f;
                for (u32 v = 0; v < nw; v++) s += red[v][rl][cl];
                out[p.out_off + (u64)c * p.ldo + r] = s * row_scale<Q>(p, w, r) + (p.has_bias ? bias[r] : 0.0f);
            }
        }
        __syncthreads();
    }
}

#define MMQ(fmt, Q) \
    extern "C" __global__ void __launch_bounds__(256) matmul_mmq_##fmt##_n1(MatmulParams p, const u32* xq, const float* xds, const u8* w, const float* b, float* o) { mmq_impl<Q, 1>(p, xq, xds, w, b, o); } \
    extern "C" __global__ void __launch_bounds__(256) matmul_mmq_##fmt##_n2(MatmulParams p, const u32* xq, const float* xds, const u8* w, const float* b, float* o) { mmq_impl<Q, 2>(p, xq, xds, w, b, o); } \
    extern "C" __global__ void __launch_bounds__(256) matmul_mmq_##fmt##_n4(MatmulParams p, const u32* xq, const float* xds, const u8* w, const float* b, float* o) { mmq_impl<Q, 4>(p, xq, xds, w, b, o); } \
    extern "C" __global__ void __launch_bounds__(256) matmul_mmq_##fmt##_n8(MatmulParams p, const u32* xq, const float* xds, const u8* w, const float* b, float* o) { mmq_impl<Q, 8>(p, xq, xds, w, b, o); }
MMQ(q4_0, MMQ4_0)
MMQ(q4_1, MMQ4_1)
MMQ(q5_0, MMQ5_0)
MMQ(q5_1, MMQ5_1)
MMQ(q8_0, MMQ8_0)
MMQ(q4_k, MMQ4_K)
MMQ(q5_k, MMQ5_K)
MMQ(q6_k, MMQ6_K)
MMQ(int8, MMQI8)
MMQ(q4_0p, MMQ4_0P)
MMQ(q5_0p, MMQ5_0P)
MMQ(q8_0p, MMQ8_0P)
MMQ(q4_1p, MMQ4_1P)
MMQ(q5_1p, MMQ5_1P)
