// ---- the wgmma version (sm_90a; appended to prefill_attention.cu, one module) ----------------
//
// `prefill_attention_wgmma_<f16|bf16>_d128`: the contract of the tensor-core version above (same
// arguments, grid (heads, tiles), the same tile geometry PmTile / pm_tile, key ranges, list pages
// of block-sparse blocks, streaming rings and masks) with its two products on Hopper's warpgroup
// MMA, as FlashAttention-3 does, for 16-bit KV at head_dim 128. The host picks it on sm_90 (the
// module is compiled for compute_90a there; elsewhere the entries are empty and never launched).
//
// A block takes BQ = 128 query rows of one sequence and one head: 256 threads, two warpgroups of
// 64 rows. Key tiles of BK = 128 keys, aligned to multiples of BK in key position, are gathered by
// all 256 threads with 16-byte cp.async (one page-table lookup per key row, broadcast by shuffle)
// into two shared-memory stages; the next tile's copies are issued while this tile's S = Q K^T
// runs on the tensor cores. Per warpgroup and key tile: S (64 x 128, f32 in registers) by eight
// wgmma m64n128k16 with Q and K from shared memory (K-major descriptors); the mask on boundary
// tiles only (one branch per tile, selects inside) and the online softmax in registers (exp2
// domain, raw-score row max, so the scale must be positive; each thread owns two rows and reduces
// across its quad; the reference maximum moves lazily, PW_RESCALE_LOG2); P rounded to the KV type stays in registers as the A operand of O += P V,
// eight wgmma m64n128k16 with V from shared memory through an MN-major descriptor (the
// transposed-B mode, so V keeps its [key][dim] rows).
// Three variants (the host's LSERVE_CUDA_PREFILL_WGMMA picks): `_ws` (the default;
// warp-specialized, FlashAttention-3's schedule) — a producer warpgroup stages key tiles, by TMA
// where 16 keys are one run of a page, while the two others only compute (WS below); every
// thread stages them with cp.async (the plain one); or every warp stages its 16 rows by TMA
// (`_tma`). Measured at 32K on an H100: 557 / ~780 / 767 ms (docs/benchmarks.md session 27).
//
// Shared memory, from a 1024-byte aligned base: Q, K[2], V[2], each a 128-row x 128-dim 16-bit tile
// (32 KiB) in the 128-byte swizzle wgmma reads: two 64-dim halves [128 rows][128 bytes], 16 KiB
// apart, the 16-byte chunk c of row r stored at chunk c ^ (r % 8) of its 128-byte line (CUTLASS's
// Swizzle<3,4,3>). Descriptors (PTX "matrix descriptor", cute GmmaDescriptor): start address,
// leading byte offset (LBO), stride byte offset (SBO), all >> 4, layout 1 = 128-byte swizzle.
// K-major (Q rows, K rows): SBO = 1024 (8-row groups), LBO unused (1), a k16 step within a
// 64-dim half advances the start by 32 bytes, the next half by 16 KiB. MN-major (V): LBO = 16 KiB
// (the next 64 dims), SBO = 1024 (the next 8 keys), a k16 step (16 keys) advances 2048 bytes.
// Q's, K stage 0's and V stage 0's descriptors are built once (PwDesc); a step or a stage only
// adds to the low word, and the unmasked burst's loop has a copy per stage, so its 16 wgmma
// issue from loop invariants (session 29: 548 -> ~441 instructions a tile, attention -4%).
// Register fragments (PTX wgmma "register fragments"): warp w of a warpgroup owns rows 16 w ..
// 16 w + 15; thread (g = lane / 4, tq = lane % 4) holds accumulator element 4 j + e at row
// g + 8 (e >> 1), column 8 j + 2 tq + (e & 1), and A fragments as mma.sync m16n8k16's, so S's
// registers for keys 16 kk .. 16 kk + 15 repack as P's A operand without moving between lanes.

#define PW_THREADS 256  // the two computing warpgroups
#define PW_WS_THREADS (PW_THREADS + 128)  // and _ws's producer warpgroup
// _ws's registers per thread after setmaxnreg: the producer gives back exactly what the computing
// warpgroups take (a block starts with 65,536 / 384 = 168 a thread, rounded down to 8); the TMA
// producer spills below 72.
#define PW_WS_PRODUCER_REGS 72
#define PW_WS_CONSUMER_REGS 216
static_assert(128 * PW_WS_PRODUCER_REGS + PW_THREADS * PW_WS_CONSUMER_REGS == PW_WS_THREADS * 168,
              "setmaxnreg: the consumers take exactly the registers the producer frees");
#define PW_TILE (128u * 128u * 2u)  // bytes of one 128-row, 128-dim 16-bit tile
// The softmax's reference maximum moves only when a tile's row maximum exceeds it by more than
// this (log2 units: P <= 256), as FlashAttention-4 does, so the output's rescale runs on few tiles.
#define PW_RESCALE_LOG2 8.0f

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// Byte offset of 16-byte chunk c (0..15) of row r (0..127) in a swizzled tile.
__device__ __forceinline__ u32 pw_swz(u32 r, u32 c) {
    return (c >> 3) * (128u * 128u) + r * 128u + (((c & 7u) ^ (r & 7u)) << 4);
}

// A wgmma matrix descriptor (shared address, LBO and SBO in bytes, 128-byte swizzle) as its two
// 32-bit halves: `lo` holds the address (>> 4, bits 0-13) and LBO, `hi` SBO and the layout. A step
// of `b` bytes within a tile is `lo + b / 16` (shared addresses stay below 256 KiB, so the
// address field never carries into LBO's), one uniform add where the whole descriptor was five
// vector instructions and two moves into uniform registers per wgmma (the hot loop's SASS).
struct PwDesc {
    u32 lo, hi;
};
__device__ __forceinline__ PwDesc pw_desc(u32 addr, u32 lbo, u32 sbo) {
    return {((addr & 0x3ffffu) >> 4) | ((lbo >> 4) << 16), (sbo >> 4) | (1u << 30)};
}

__device__ __forceinline__ void pw_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void pw_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// Until at most N of this warpgroup's committed wgmma groups are pending.
template <int N> __device__ __forceinline__ void pw_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Generic-proxy shared writes (cp.async, st.shared) made visible to wgmma's async proxy.
__device__ __forceinline__ void pw_fence_proxy() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// An arrive-on the mbarrier once every cp.async this thread issued so far has landed (.noinc: the
// arrival counts against the barrier's expected count).
__device__ __forceinline__ void pw_mb_arrive_cp_async(u32 a) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(a) : "memory");
}
// `_tma`: a 2D box of the tensor map at coordinates (c0, c1), 128-byte swizzled by the map,
// copied into shared memory, completing on the mbarrier (cp.async.bulk.tensor: TMA; its bytes
// expected on the barrier first, mb_expect_tx).
__device__ __forceinline__ void pw_tma_2d(u32 dst, u64 tmap, u32 c0, u32 c1, u32 bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
        ::"r"(dst), "l"(tmap), "r"(c0), "r"(c1), "r"(bar) : "memory");
}
// Named barriers 1.. among the two computing warpgroups (256 threads): wait for the other's
// arrival, or arrive without waiting.
__device__ __forceinline__ void pw_bar_sync(u32 id) { asm volatile("bar.sync %0, 256;" ::"r"(id) : "memory"); }
__device__ __forceinline__ void pw_bar_arrive(u32 id) { asm volatile("bar.arrive %0, 256;" ::"r"(id) : "memory"); }
// The warpgroup's register budget moved down (producer) or up (computing warpgroups).
template <u32 N> __device__ __forceinline__ void pw_setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}
template <u32 N> __device__ __forceinline__ void pw_setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}
// x from lane 0, which ptxas then treats as warp-uniform (uniform registers and datapath); in asm,
// because NVVM folds a __shfl_sync of a value it deems uniform (a loop counter, say) into the
// value itself, and ptxas then sees no shuffle.
__device__ __forceinline__ u32 pw_uniform(u32 x) {
    u32 r;
    asm volatile("shfl.sync.idx.b32 %0, %1, 0, 0x1f, 0xffffffff;" : "=r"(r) : "r"(x));
    return r;
}
// Pins accumulator registers at this point (no read or write moves across an async wgmma).
template <int N> __device__ __forceinline__ void pw_pin(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}
// The same for A fragments an async wgmma may still read.
template <int N> __device__ __forceinline__ void pw_pin(u32 (&a)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) asm volatile("" : "+r"(a[i][j])::"memory");
}

#define PW_D64 \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define PW_OUT64 \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

// d (64 x 128 f32) (+)= A (64 x 16, smem descriptor, K-major) * B (16 x 128, smem descriptor,
// K-major): ss; the same with A from registers and B MN-major (transposed): rs.
#define PW_MMA(KT, TY) \
    __device__ __forceinline__ void pw_mma_ss(KT, float (&d)[64], PwDesc da, PwDesc db, int acc) { \
        asm volatile("{\n.reg .pred p;\n.reg .b64 da, db;\nsetp.ne.b32 p, %68, 0;\n" \
                     "mov.b64 da, {%64, %65};\nmov.b64 db, {%66, %67};\n" \
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " {" PW_D64 "}, da, db, p, 1, 1, 0, 0;\n}\n" \
                     : PW_OUT64 \
                     : "r"(da.lo), "r"(da.hi), "r"(db.lo), "r"(db.hi), "r"(acc)); \
    } \
    __device__ __forceinline__ void pw_mma_rs(KT, float (&d)[64], const u32 (&a)[4], PwDesc db) { \
        asm volatile("{\n.reg .pred p;\n.reg .b64 db;\nsetp.ne.b32 p, %70, 0;\n" \
                     "mov.b64 db, {%68, %69};\n" \
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " {" PW_D64 "}, {%64, %65, %66, %67}, db, p, 1, 1, 1;\n}\n" \
                     : PW_OUT64 \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(db.lo), "r"(db.hi), "r"(1)); \
    }
PW_MMA(bf16_t, "bf16")
PW_MMA(f16_t, "f16")

// Long (about 200 lines) on purpose, as prefill_mma_impl: the phases share registers and shared
// memory and read in the order they run (as lambdas, so the two schedules below read alike).
//
// Without WS all 256 threads stage the next key tile (a warp's table lookups a tile ahead) while
// the tensor cores run this tile's S, and one block barrier per tile guards the two stages. With WS
// (as FlashAttention-3 splits producer and consumers) a third warpgroup stages every tile with few
// registers (setmaxnreg: 72 for it, 216 for the two computing warpgroups) and the others only
// compute: K and V stages each have an mbarrier `full` (TMA boxes' bytes, and the producer's
// threads arriving as their cp.async copies land, cp.async.mbarrier.arrive) and `empty` (each
// computing warp arrives once S, or P V, finished reading it); a burst issues S(ti) and P V(ti -
// 1) together, the two warpgroups take turns at the tensor cores (named barriers), and the softmax
// of an unmasked tile ti overlaps P V(ti - 1) (a boundary tile's waits for it: its mask is a
// branch, and no branch may sit between a wgmma and its wait).
template <typename KT, bool WS, bool TMA>
__device__ void prefill_wgmma_impl(AttentionParams p, const float* q, const u32* q_indptr, const KT* k, const KT* v,
                                   const KT* sk, const KT* sv, const u32* head_map, const u32* page_indptr,
                                   const u32* page_table, const u32* kv_len, const u32* ring_table, void* out,
                                   u32 page_table_len, u32 ring_table_len, const u32* blk_sel, const u32* blk_cnt,
                                   u32 bsl, u32 bcl, const u64* tmaps, u32 out16) {
    constexpr u32 D = 128, BQ = 128, BK = 128;
    constexpr u32 CH = D / 8;                    // 16-byte chunks per row
    constexpr u32 WR = 32 / CH;                  // rows a warp copies per pass
    constexpr u32 RP = PW_THREADS / CH;          // rows the block copies per pass
    constexpr u32 NP = BK * CH / PW_THREADS;     // passes per tile
    static_assert(WR * NP <= 32, "a warp's rows of a tile must fit its lanes");
    extern __shared__ __align__(16) unsigned char pw_smem[];
    // Q at 0, K of tile ti at (1 + ti % 2) PW_TILE, V of tile ti at (3 + ti % 2) PW_TILE, from a
    // 1024-aligned base.
    const u32 raw_addr = smem_addr(pw_smem);
    const u32 base = (raw_addr + 1023u) & ~1023u;
    unsigned char* sm = pw_smem + (base - raw_addr);

    __shared__ PmTile t;
    __shared__ bool live;
    __shared__ u32 lst[PM_MAX_LIST];  // a sparse block's list pages (pm_block_list)
    if (threadIdx.x == 0) live = pm_tile<BQ>(p, q_indptr, kv_len, head_map, blk_cnt, bsl, bcl, t);
    __syncthreads();
    if (!live) return;
    if (t.sparse && threadIdx.x < 32) pm_block_list(p, blk_sel, t, lst);
    __syncthreads();
    const u32 nh = p.n_heads, h = blockIdx.x;
    const u32 tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, tq = lane % 4;
    const KT* kpool = t.streaming ? sk : k;
    const KT* vpool = t.streaming ? sv : v;

    // Key tiles as prefill_mma_impl visits them (pm_key_tiles); the keys of each as pm_key_at finds
    // them, in its two phases (pm_key_page, key_row_offset) so that a tile's table loads are
    // issued a whole tile before its copies need them.
    const PmKeyTiles tiles = pm_key_tiles(t, BK);
    const u32 n_tiles = tiles.n;
    __shared__ u32 pt[2];  // the sequence's page-table span [pt[0], pt[1])
    if (tid == 0) table_span(page_indptr, t.s, page_table_len, pt);

    // Q rows, rounded to KT, swizzled; rows past the tile are zero.
    for (u32 i = tid; i < BQ * CH && tid < PW_THREADS; i += PW_THREADS) {
        const u32 r = i / CH, c = i % CH;
        uint4 w = make_uint4(0, 0, 0, 0);
        if (r < t.nr) {
            const float4* src = reinterpret_cast<const float4*>(q + ((u64)(t.r0 + r) * nh + h) * D + 8 * c);
            const float4 a = src[0], b = src[1];
            w = make_uint4(mma_pack<KT>(a.x, a.y), mma_pack<KT>(a.z, a.w), mma_pack<KT>(b.x, b.y),
                           mma_pack<KT>(b.z, b.w));
        }
        *reinterpret_cast<uint4*>(sm + pw_swz(r, c)) = w;
    }
    __syncthreads();  // pt

    auto key_page = [&](u32 ti, u32 j, u32& row) {
        return pm_key_page(p, t, tiles, lst, ti, j, pt[0], pt[1], page_table, ring_table, ring_table_len, row);
    };
    auto key_off = [&](u32 pg, u32 row) { return key_row_offset(p, t.streaming, t.hi, pg, row); };

    // The copies: lane l < WR * NP of each warp finds the key of the warp's row l % WR + RP * (l /
    // WR) (+ warp * WR); in pass n every lane copies chunk c of row r0 + RP n, its offset taken by
    // shuffle. RP is a multiple of 8, so the swizzle's row phase is the same in every pass and pass
    // n's chunk lies RP * 128 n bytes after pass 0's. Keys outside the visible ranges are zero-filled.
    //
    // _tma: warp w stages rows 16 w .. 16 w + 15, lane l < 16 finding row 16 w + l. When those 16
    // keys are one run of a page (every key visible, consecutive pool rows), lane 0 copies them as
    // four TMA boxes (K and V, two 64-dim halves each: the map's 128-byte swizzle is the tile's);
    // any other warp copies its rows with cp.async (pass n: rows 16 w + 2 n + lane / 16), zero
    // filling keys outside the visible ranges as above. Either way the tile lands on the stage's
    // mbarrier `full`: the box bytes (expect_tx) and every thread's cp.async (arrive.noinc).
    static_assert(RP % 8 == 0, "a pass must keep the swizzle's row phase");
    const u32 c = lane % CH, o0 = pw_swz(warp * WR + lane / CH, c);
    // _tma: this block's pools' tensor maps (K, V; the streaming pools' two after them).
    const u64 tmk = TMA ? (u64)(tmaps + (t.streaming ? 32 : 0)) : 0ull, tmv = tmk + 128u;
    // The stages' mbarriers. _tma: full[0..1] (both of a tile's K and V). WS: K and V apart (K's
    // stage is free once S read it, V's once P V did): fullK[0..1], fullV[0..1], emptyK[0..1],
    // emptyV[0..1].
    __shared__ __align__(8) u64 bars[8];
    const u32 bar = smem_addr(bars);
    const u32 full_k = bar, full_v = bar + 16, empty_k = bar + 32, empty_v = bar + 48;
    u32 npg = NONE_U32, nrow = 0;  // this lane's key of the next tile to stage (phase 1 done)
    auto lookup = [&](u32 ti) {
        npg = NONE_U32;
        if (TMA ? lane < 16 : lane < WR * NP) {
            const u32 j = TMA ? 16 * warp + lane : warp * WR + lane % WR + RP * (lane / WR);
            if (ti < n_tiles) npg = key_page(ti, j, nrow);
        }
    };
    auto stage = [&](u32 ti) {
        const u32 kd = base + (1 + ti % 2) * PW_TILE, vd = base + (3 + ti % 2) * PW_TILE;
        const u32 mine = key_off(npg, nrow);
        if constexpr (TMA) {
            const u32 fb = full_k + 8 * (ti % 2);
            const u32 first = __shfl_sync(0xffffffffu, mine, 0);
            const bool run = lane >= 16 || (mine != NONE_U32 && first != NONE_U32 && mine == first + lane * D);
            if (__all_sync(0xffffffffu, run)) {
                if (lane == 0) {
                    mb_expect_tx(fb, 4u * 16u * 128u);  // four boxes of 16 rows x 128 bytes
                    const u32 r0 = 16u * warp * 128u, row = mine / D;
                    pw_tma_2d(kd + r0, tmk, 0, row, fb);
                    pw_tma_2d(kd + r0 + 128u * 128u, tmk, 64, row, fb);
                    pw_tma_2d(vd + r0, tmv, 0, row, fb);
                    pw_tma_2d(vd + r0 + 128u * 128u, tmv, 64, row, fb);
                }
            } else {
#pragma unroll
                for (u32 n = 0; n < 8; n++) {
                    const u32 r = 16 * warp + 2 * n + lane / 16;
                    const u32 off = __shfl_sync(0xffffffffu, mine, 2 * n + lane / 16);
                    const bool ok = off != NONE_U32;
                    const u32 at = ok ? off + 8 * c : 0u;
                    cp_async16z(kd + pw_swz(r, c), kpool + at, ok);
                    cp_async16z(vd + pw_swz(r, c), vpool + at, ok);
                }
            }
            pw_mb_arrive_cp_async(fb);
        } else {
#pragma unroll
            for (u32 n = 0; n < NP; n++) {
                const u32 off = __shfl_sync(0xffffffffu, mine, lane / CH + WR * n);
                const bool ok = off != NONE_U32;
                const u32 at = ok ? off + 8 * c : 0u;
                cp_async16z(kd + o0 + n * RP * 128u, kpool + at, ok);
                cp_async16z(vd + o0 + n * RP * 128u, vpool + at, ok);
            }
            cp_async_commit();
        }
        lookup(ti + 1);  // a tile before its copies
    };
    if (WS && tid == 0) {
        for (u32 i = 0; i < 2; i++) {
            mb_init(full_k + 8 * i, 128);  // the producer's threads, as their copies land
            mb_init(full_v + 8 * i, 128);
            mb_init(empty_k + 8 * i, 8);  // the computing warps
            mb_init(empty_v + 8 * i, 8);
        }
    }
    if (!WS && TMA && tid == 0) {
        for (u32 i = 0; i < 2; i++) mb_init(full_k + 8 * i, PW_THREADS);  // every thread's arrival
        fence_mb_init();
    }
    if (!WS) lookup(0);
    if (!WS && !TMA && n_tiles > 0) stage(0);
    pw_fence_proxy();  // Q's stores (and the barriers' init) before any wgmma and any wait
    __syncthreads();
    if (!WS && TMA && n_tiles > 0) stage(0);
    if (WS && warp >= PW_THREADS / 32) {
        // The producer, with few registers (the computing warpgroups take the rest): K(ti) into
        // K stage ti % 2 once S(ti - 2) released it, V(ti) likewise after P V(ti - 2); each
        // thread's copies arrive on the stage's full barrier as they land (cp.async.mbarrier), so
        // the producer never waits on its own copies. Its warp pw copies rows 32 pw .. 32 pw + 31:
        // lane l finds row 32 pw + l; when half-warp h's 16 keys are one run of the pool, its lane
        // 0 copies them as two TMA boxes (the bytes expected on the full barrier before its own
        // arrival), else pass i copies chunk c of row 32 pw + 16 h + i with cp.async.
        pw_setmaxnreg_dec<PW_WS_PRODUCER_REGS>();
        const u32 pw = warp - PW_THREADS / 32, hw = lane / 16;
        const u64 tmk = (u64)(tmaps + (t.streaming ? 32 : 0));
        for (u32 ti = 0; ti < n_tiles; ti++) {
            u32 row;
            const u32 pg = key_page(ti, 32 * pw + lane, row), mine = key_off(pg, row);
            const u32 first = __shfl_sync(0xffffffffu, mine, lane & 16u);
            const bool run = mine != NONE_U32 && first != NONE_U32 && mine == first + (lane % 16) * D;
            const bool bulk = ((__ballot_sync(0xffffffffu, run) >> (lane & 16u)) & 0xffffu) == 0xffffu;
            const u32 s = ti % 2, ph = (ti / 2 + 1) % 2;  // the phase tile ti - 2 completed
#pragma unroll
            for (u32 kv = 0; kv < 2; kv++) {
                if (ti >= 2) mb_wait((kv ? empty_v : empty_k) + 8 * s, ph);
                const u32 dst = base + ((kv ? 3 : 1) + s) * PW_TILE;
                const u32 fb = (kv ? full_v : full_k) + 8 * s;
                if (bulk) {
                    if (lane % 16 == 0) {
                        mb_expect_tx(fb, 2u * 16u * 128u);
                        const u32 d0 = dst + (32 * pw + 16 * hw) * 128u;
                        pw_tma_2d(d0, tmk + 128u * kv, 0, mine / D, fb);
                        pw_tma_2d(d0 + 128u * 128u, tmk + 128u * kv, 64, mine / D, fb);
                    }
                } else {
                    const KT* pool = kv ? vpool : kpool;
#pragma unroll
                    for (u32 i = 0; i < 16; i++) {
                        const u32 off = __shfl_sync(0xffffu << (16 * hw), mine, 16 * hw + i);
                        const bool ok = off != NONE_U32;
                        cp_async16z(dst + pw_swz(32 * pw + 16 * hw + i, c), pool + (ok ? off + 8 * c : 0u), ok);
                    }
                }
                pw_mb_arrive_cp_async(fb);
            }
        }
        cp_async_commit();
        cp_async_wait<0>();  // no copy outlives the block
        return;
    }

    if constexpr (WS) pw_setmaxnreg_inc<PW_WS_CONSUMER_REGS>();
    // This thread's rows of the block: r_lo and r_lo + 8 (warpgroup wg owns rows 64 wg ..).
    // wg by shuffle from lane 0: the compiler then knows it is warp-uniform (as CUTLASS's
    // canonical_warp_group_idx), so the descriptors below live in uniform registers.
    const u32 wg = pw_uniform(warp / 4), r_lo = 64 * wg + 16 * (warp % 4) + g;
    // Descriptors of Q (this warpgroup's rows), K stage 0 and V stage 0 (K-major with 8-row
    // groups 1024 bytes apart; V MN-major, its next 64 dims 16 KiB on); stage 1 is PW_TILE on.
    const PwDesc dq = pw_desc(base + 64u * 128u * wg, 16, 1024), dk = pw_desc(base + PW_TILE, 16, 1024),
                 dv = pw_desc(base + 3 * PW_TILE, 128u * 128u, 1024);
    const u32 wlo_hi = max(window_lo(t.p_hi, p.window), t.klo);
    const float qscale = p.scale * 1.4426950408889634f;
    float acc[64], sc[64];
#pragma unroll
    for (int i = 0; i < 64; i++) acc[i] = sc[i] = 0.0f;
    float m[2] = {-LS_INF, -LS_INF}, l[2] = {0.0f, 0.0f};
    u32 pa[BK / 16][4];  // P as A fragments
#pragma unroll
    for (u32 kk = 0; kk < BK / 16; kk++) pa[kk][0] = pa[kk][1] = pa[kk][2] = pa[kk][3] = 0u;

    // S = Q K(ti)^T into sc, issued and committed: k16 step kk reads dims 16 kk.. (32 bytes into a
    // 64-dim half, halves 16 KiB apart).
    auto issue_s = [&](u32 st) {
        const u32 klo = dk.lo + st * (PW_TILE / 16);
#pragma unroll
        for (u32 kk = 0; kk < D / 16; kk++) {
            const u32 off = ((kk / 4) * (128u * 128u) + (kk % 4) * 32u) / 16;
            pw_mma_ss(KT{}, sc, {dq.lo + off, dq.hi}, {klo + off, dk.hi}, kk > 0 ? 1 : 0);
        }
        pw_commit();
    };
    // O += P V(ti), issued and committed: P's registers for keys 16 kk.. are the A fragment of k16
    // step kk; V's step starts 16 rows (2048 bytes) further.
    auto issue_pv = [&](u32 st) {
        const u32 vlo = dv.lo + st * (PW_TILE / 16);
#pragma unroll
        for (u32 kk = 0; kk < BK / 16; kk++) pw_mma_rs(KT{}, acc, pa[kk], {vlo + kk * (2048u / 16), dv.hi});
        pw_commit();
    };
    // Tile ti's mask (boundary tiles only) and online softmax on raw scores (qscale > 0): sc becomes
    // P (f32), m and l move on, corr is the factor the output must be rescaled by.
    // Tile ti needs no mask: every key visible to every row of the block.
    auto tile_full = [&](u32 ti) {
        const u32 k0 = tiles.k0(ti);
        return ti < tiles.nvt ? k0 + BK <= t.nv
                              : k0 + BK - 1 <= t.p_lo && k0 >= wlo_hi &&
                                    (!t.streaming || k0 + BK <= p.sink || t.p_hi - k0 < p.local);
    };
    // Tile ti's softmax. m[r] is the row's running reference maximum (see PW_RESCALE_LOG2).
    auto softmax = [&](u32 ti, float (&corr)[2], bool may_mask = true) {
        const u32 k0 = tiles.k0(ti);
        const bool virt = ti < tiles.nvt;
        // The mask: one branch per tile, selects inside (pm_mask).
        if (may_mask && !tile_full(ti)) pm_mask<BK / 8>(p, t, virt, k0, tq, t.p_lo + r_lo, sc);
        float mx[2] = {-LS_INF, -LS_INF};
#pragma unroll
        for (u32 j = 0; j < BK / 8; j++) {
#pragma unroll
            for (u32 e = 0; e < 4; e++) {
                mx[e >> 1] = fmaxf(mx[e >> 1], sc[4 * j + e]);
            }
        }
#pragma unroll
        for (u32 r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            // Lazy rescaling (FlashAttention-4's): m moves only where the tile's maximum passes it
            // by more than PW_RESCALE_LOG2, so P = exp2(s - m) stays <= 2^PW_RESCALE_LOG2 (bf16 /
            // f16 and the f32 sums hold that) and most tiles leave corr at 1 and skip the output's
            // rescale; the result is the same up to rounding (O and l carry the same factor).
            const float mt = mx[r] * qscale;
            const float mn = mt > m[r] + PW_RESCALE_LOG2 ? mt : m[r];
            // A row that has seen no key yet keeps m = -inf; 0 stands in so no inf - inf appears.
            const float mu = mn == -LS_INF ? 0.0f : mn;
            corr[r] = pm_exp2(m[r] - mu);
            m[r] = mn;
            l[r] *= corr[r];
#pragma unroll
            for (u32 j = 0; j < BK / 8; j++) {
                sc[4 * j + 2 * r] = pm_exp2(fmaf(sc[4 * j + 2 * r], qscale, -mu));
                sc[4 * j + 2 * r + 1] = pm_exp2(fmaf(sc[4 * j + 2 * r + 1], qscale, -mu));
                l[r] += sc[4 * j + 2 * r] + sc[4 * j + 2 * r + 1];
            }
        }
    };
    // The output rescale (skipped when no row of the warp saw a new maximum), then P rounded to KT
    // into its A fragments.
    auto rescale_pack = [&](const float (&corr)[2]) {
        if (__any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) {
#pragma unroll
            for (u32 n = 0; n < D / 8; n++) {
                acc[4 * n] *= corr[0];
                acc[4 * n + 1] *= corr[0];
                acc[4 * n + 2] *= corr[1];
                acc[4 * n + 3] *= corr[1];
            }
        }
#pragma unroll
        for (u32 kk = 0; kk < BK / 16; kk++) {
#pragma unroll
            for (u32 i = 0; i < 4; i++) pa[kk][i] = mma_pack<KT>(sc[8 * kk + 2 * i], sc[8 * kk + 2 * i + 1]);
        }
    };

    if constexpr (WS) {
        // FlashAttention-3's schedule: a burst issues S(ti) and O += P V(ti - 1) together, and the
        // two warpgroups take turns at the tensor cores (named barriers 1 and 2: a warpgroup's
        // burst waits for the other's previous one to be issued), so one's softmax runs while the
        // other's products do. The output's rescale by tile ti's max waits for P V(ti - 1).
        const u32 other = 1 - wg;
        auto release = [&](u32 e) {
            __syncwarp();
            if (lane == 0) mb_arrive(e);
        };
        // A burst: wait for K(ti) if `ks` and V(ti - 1) if `vs`, then take the turn (the products
        // are issued unconditionally by the callers: a wgmma under a branch is serialized). st is
        // ti % 2: K(ti)'s stage, and 1 - st V(ti - 1)'s.
        auto burst_begin = [&](u32 ti, u32 st, bool ks, bool vs) {
            if (ks) mb_wait(full_k + 8 * st, (ti / 2) % 2);
            if (vs) mb_wait(full_v + 8 * (1 - st), ((ti - 1) / 2) % 2);
            pw_fence_proxy();  // the producer's copies (generic proxy) before wgmma reads them
            pw_bar_sync(1 + wg);
            pw_pin(sc);
            pw_pin(acc);
            pw_pin(pa);
            pw_fence();
        };
        if (n_tiles > 0) {
            float corr[2];
            if (wg == 1) pw_bar_arrive(1);  // warpgroup 0 goes first
            burst_begin(0, 0, true, false);
            issue_s(0u);
            pw_bar_arrive(1 + other);
            pw_wait<0>();
            pw_pin(sc);
            release(empty_k);
            softmax(0, corr);
            rescale_pack(corr);
            // A burst over an unmasked tile runs its softmax while P V(ti - 1) does; a boundary
            // tile's burst waits for both products before its masked softmax. Runs of unmasked
            // tiles and the branch between the two are decided where no wgmma is in flight (a
            // branch between a wgmma and its wait makes ptxas serialize them all, C7518).
            auto burst_issue = [&](u32 ti, u32 st) {
                burst_begin(ti, st, true, true);
                issue_s(st);
                issue_pv(1 - st);
                pw_bar_arrive(1 + other);
            };
            auto burst_full = [&](u32 ti, u32 st) {
                burst_issue(ti, st);
                pw_wait<1>();
                pw_pin(sc);
                release(empty_k + 8 * st);
                softmax(ti, corr, false);
                // The softmax done here, not sunk past the wait below (it is what overlaps P V):
                // ptxas hoists a wgmma wait to the top of its basic block, so a branch on the
                // softmax's sums (never taken: they are not negative) ends the block here.
                pw_pin(sc);
                pw_pin(corr);
                pw_pin(l);
                if (l[0] + l[1] < 0.0f) __trap();
                pw_wait<0>();
                pw_pin(acc);
                pw_pin(pa);  // P V(ti - 1) no longer reads them
                release(empty_v + 8 * (1 - st));
                rescale_pack(corr);
            };
            auto burst_masked = [&](u32 ti) {
                const u32 st = ti % 2;
                burst_issue(ti, st);
                pw_wait<0>();
                pw_pin(sc);
                pw_pin(acc);
                pw_pin(pa);
                release(empty_k + 8 * st);
                release(empty_v + 8 * (1 - st));
                softmax(ti, corr);
                rescale_pack(corr);
            };
            u32 ti = 1;
            while (ti < n_tiles) {
                if (tile_full(ti)) {
                    do {
                        // The stage a compile-time constant in each copy: its descriptors
                        // are then loop invariants in uniform registers, and the 16 wgmma
                        // issue back to back (a runtime stage cost ~4 instructions a wgmma).
                        if (ti % 2 == 0) {
                            burst_full(ti, 0u);
                        } else {
                            burst_full(ti, 1u);
                        }
                        ti++;
                    } while (ti < n_tiles && tile_full(ti));
                } else {
                    burst_masked(ti);
                    ti++;
                }
            }
            burst_begin(n_tiles, n_tiles % 2, false, true);
            issue_pv((n_tiles - 1) % 2);
            if (wg == 0) pw_bar_arrive(2);  // warpgroup 1's last burst has no successor
            pw_wait<0>();
            pw_pin(acc);
        }
    } else {
        for (u32 ti = 0; ti < n_tiles; ti++) {
            // Tile ti landed (every thread's copies; _tma: and its boxes), visible to the async
            // proxy, for every warp; and every warpgroup is done with tile ti - 1, whose stages tile
            // ti + 1 refills.
            if constexpr (TMA) {
                mb_wait(full_k + 8 * (ti % 2), (ti / 2) % 2);
            } else {
                cp_async_wait<0>();
            }
            pw_fence_proxy();
            __syncthreads();
            pw_pin(sc);
            pw_fence();
            issue_s(ti % 2);
            // The next tile's copies go out while the tensor cores work.
            if (ti + 1 < n_tiles) stage(ti + 1);
            pw_wait<0>();
            pw_pin(sc);
            float corr[2];
            softmax(ti, corr);
            rescale_pack(corr);
            pw_pin(acc);
            pw_fence();
            issue_pv(ti % 2);
            pw_wait<0>();
            pw_pin(acc);
        }
    }

#pragma unroll
    for (u32 r = 0; r < 2; r++) {
        float s = l[r];
        s += __shfl_xor_sync(0xffffffffu, s, 1);
        s += __shfl_xor_sync(0xffffffffu, s, 2);
        const float inv = s > 0.0f ? 1.0f / s : 0.0f;
        const u32 row = r_lo + 8 * r;
        if (row >= t.nr) continue;
        const u64 o = ((u64)(t.r0 + row) * nh + h) * D + 2 * tq;
#pragma unroll
        for (u32 n = 0; n < D / 8; n++)
            attn_store2(out, o + 8 * n, acc[4 * n + 2 * r] * inv, acc[4 * n + 2 * r + 1] * inv, out16);
    }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define PW_BODY(KT, WS, TMA, TMAPS) \
    prefill_wgmma_impl<KT, WS, TMA>(p, q, q_indptr, k, v, sk, sv, head_map, page_indptr, page_table, kv_len, ring_table, \
                                    out, ptl, rtl, blk_sel, blk_cnt, bsl, bcl, TMAPS, out16);
#else
#define PW_BODY(KT, WS, TMA, TMAPS)
#endif
// The plain kernel: every thread stages key tiles with cp.async.
#define PW(name, KT) \
    extern "C" __global__ void __launch_bounds__(PW_THREADS, 1) name( \
        AttentionParams p, const float* q, const u32* q_indptr, const KT* k, const KT* v, const KT* sk, const KT* sv, \
        const u32* head_map, const u32* page_indptr, const u32* page_table, const u32* kv_len, const u32* ring_table, \
        void* out, const u32* blk_sel, const u32* blk_cnt, u32 ptl, u32 rtl, u32 bsl, u32 bcl, u32 out16) { \
        PW_BODY(KT, false, false, nullptr) \
    }
// The TMA entries: `_tma` (WS false: the plain kernel, each warp's 16 keys as boxes) and `_ws`
// (a producer warpgroup stages the key tiles, WS above). tmaps: four CUtensorMaps (128 bytes each,
// src/backend/cuda/tma.rs: the K, V, streaming K and streaming V pools as [rows][128] 16-bit
// elements, boxes of 64 x 16 in the 128-byte swizzle) in global memory.
#define PWT(name, KT, WS) \
    extern "C" __global__ void __launch_bounds__(WS ? PW_WS_THREADS : PW_THREADS, 1) name( \
        AttentionParams p, const float* q, const u32* q_indptr, const KT* k, const KT* v, const KT* sk, const KT* sv, \
        const u32* head_map, const u32* page_indptr, const u32* page_table, const u32* kv_len, const u32* ring_table, \
        void* out, const u32* blk_sel, const u32* blk_cnt, const u64* tmaps, u32 ptl, u32 rtl, u32 bsl, u32 bcl, u32 out16) { \
        PW_BODY(KT, WS, true, tmaps) \
    }
PW(prefill_attention_wgmma_f16_d128, f16_t)
PW(prefill_attention_wgmma_bf16_d128, bf16_t)
PWT(prefill_attention_wgmma_f16_d128_tma, f16_t, false)
PWT(prefill_attention_wgmma_f16_d128_ws, f16_t, true)
PWT(prefill_attention_wgmma_bf16_d128_tma, bf16_t, false)
PWT(prefill_attention_wgmma_bf16_d128_ws, bf16_t, true)
