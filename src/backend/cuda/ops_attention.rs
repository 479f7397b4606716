//! Launches of the attention ops: `prefill_attention` (cuda/prefill_attention.cu),
//! `sparse_decode_attention` (cuda/sparse_decode_attention.cu, then
//! cuda/sparse_decode_attention_merge.cu when split) and `lambda_mass` (cuda/lambda_mass.cu).
//!
//! One launch covers both head kinds: the kernels read head_map per block and pick the retrieval
//! or the streaming pool (a block-uniform branch; no second pass as on wgpu).
//!
//! Split-KV decode: the split count comes from an upper bound of the longest key list (the page
//! table's length for retrieval heads, the Lambda window for streaming heads) at
//! [`KEYS_PER_SPLIT`] keys a split, capped so the grid stays near one wave of the kernel (the
//! blocks per SM the driver's occupancy calculator gives for the chosen kernel and its shared
//! memory on this GPU: the sm_80/sm_90 difference — 164 vs 228 KiB of shared memory per SM, 108
//! vs 132 SMs — enters here; longer splits amortise each block's setup and keep the merge small)
//! and at [`MAX_SPLITS`]; on the device a split takes at least 32 keys, so short lists (sparse
//! steps) leave the last splits empty (m = -inf, l = 0; the merge skips them). The length bound
//! is rounded up to a power of two so a replayed decode graph (graph.rs) stays valid while the
//! context grows. The partials live
//! in a scratch buffer shared by every layer (stream order keeps them apart).
//!
//! Decode kernels: KV f16 / bf16 / int8 / fp8 at head_dim 64 or 128 run the tensor-core kernel
//! (`sparse_decode_attention_mma_<kv>_d<D>`, 8 query heads a block, K/V read once into registers
//! for the whole GQA group; 8-bit KV its `_pf` build, the next tile's loads in flight); f32 KV and other head dims the SIMT cp.async kernel
//! (`sparse_decode_attention_<kv>_g<G>`, G = the group rounded up to a power of two, at most 8).
//! 8-bit KV: lambda_mass runs its scalar kernel, dequantizing as it stages.
//!
//! Prefill: a 16-bit KV cache runs the tensor-core kernel (`prefill_attention_mma_<kv>_d<D>[_pad]`,
//! mma.sync m16n8k16, D = 64/128/256 with head_dim zero-padded up to it; query tiles of 128 rows,
//! 32 a warp (64 and 16 at D = 256); grid (heads, tiles)) — on sm_90 at head_dim 128 the Hopper
//! kernel instead (`prefill_attention_wgmma_<kv>_d128`: wgmma, two warpgroups of 64 rows, 128-key
//! tiles; every head kind and block-sparse list as the mma.sync one; `_ws`, warp-specialized: a
//! producer warpgroup copies runs of 16 keys of a page as TMA boxes, two computing warpgroups take
//! turns at the tensor cores — unless `LSERVE_CUDA_PREFILL_WGMMA` is `0` (the mma.sync kernel),
//! `1` (the plain one: every thread copies with cp.async) or `3` (`_tma`: the plain one copying
//! by TMA)); an f32 KV cache keeps the scalar f32 kernel, the exact reference
//! (TF32 tensor cores would miss its tolerance); 8-bit KV at head_dim 64 / 128 / 256 runs the
//! tensor-core kernel too (`prefill_attention_mma_<int8|fp8>_d<D>`: codes multiplied as exact f16
//! values, K scales applied to the scores and V scales to P in f32), other head dims the scalar
//! kernel (codes dequantized as they are staged).
//!
//! Every launch goes through its typed binding (bindings.rs): the entry is picked from the
//! binding's table by dtype and variant, the arguments are named fields.

use super::bindings::{self as kern, Scratch, entry, entry_in};
use super::context::{Launch, bytes_for, err};
use super::{CudaBackend, CudaBuffer, need, need_act, need_kv};
use crate::backend::*;
use crate::error::Result;

const MAX_HEAD_DIM: usize = 256;
const KEYS_PER_SPLIT: usize = 128;
pub(crate) const MAX_SPLITS: usize = 256;
/// Query heads of one KV head per decode block (G in the kernel).
const DECODE_HEADS: usize = 8;
/// Query rows per prefill tile (PF_TQ in the kernel).
const PREFILL_ROWS: usize = 32;
/// Entries of a sparse block's page list in the prefill kernels' shared memory (PM_MAX_LIST).
const PREFILL_MAX_LIST: usize = 1024;

fn u(x: u32) -> usize {
    x as usize
}

/// Checks shared by prefill and decode: head counts, geometry, pools and paged metadata.
fn check_common(p: &AttentionParams, kv: &LayerKv<CudaBackend>, meta: &PagedMeta<CudaBackend>, op: &str) -> Result<()> {
    let (ns, nkv, nh, hd, ps) = (u(p.num_seqs), u(p.n_kv_heads), u(p.n_heads), u(p.head_dim), u(p.page_size));
    let (n_ret, n_str) = (u(p.n_ret), u(p.n_str));
    if nkv == 0 || n_ret + n_str != nkv || !nh.is_multiple_of(nkv) {
        return Err(err(format!("{op}: bad head counts")));
    }
    if hd == 0 || hd > MAX_HEAD_DIM || !hd.is_multiple_of(8) || ps == 0 {
        return Err(err(format!("{op}: head_dim {hd} (a multiple of 8 up to {MAX_HEAD_DIM}) or page_size {ps}")));
    }
    if n_str > 0 && (p.ring_tokens <= p.sink || !p.ring_tokens.is_multiple_of(p.page_size)) {
        return Err(err(format!("{op}: the streaming ring is smaller than its sink")));
    }
    let rrows = u(p.num_pages) * n_ret * ps;
    let srows = u(p.num_str_pages) * n_str * ps;
    let kt = kv.k.dtype;
    need_kv(kv.k, rrows, hd, "k pool")?;
    need(kv.v, kt, kv_pool_len(kt, rrows, hd), "v pool")?;
    need(kv.sk, kt, kv_pool_len(kt, srows, hd), "streaming k pool")?;
    need(kv.sv, kt, kv_pool_len(kt, srows, hd), "streaming v pool")?;
    if kt.is_kv8() && !ps.is_multiple_of(4) {
        return Err(err(format!("{op}: 8-bit KV needs page_size % 4 == 0")));
    }
    need(kv.head_map, DType::U32, nkv, "head_map")?;
    let ring_pages = if n_str > 0 { u(p.ring_tokens) / ps } else { 0 };
    need(meta.page_indptr, DType::U32, ns + 1, "attention page_indptr")?;
    need(meta.page_table, DType::U32, 0, "attention page_table")?;
    need(meta.kv_len, DType::U32, ns, "attention kv_len")?;
    need(meta.ring_table, DType::U32, ns * ring_pages, "attention ring_table")
}

/// KV dtypes of the scalar prefill entries (`[dtype][log2 dims-per-thread - 2]`, 5 each).
const PREFILL_SCALAR_DTYPES: [DType; 3] = [DType::F32, DType::I8, DType::F8E4M3];
/// KV dtypes of the 8-bit tensor-core prefill entries (`[dtype][head_dim tier]`, 3 each).
const PREFILL_MMA8_DTYPES: [DType; 2] = [DType::I8, DType::F8E4M3];
/// KV dtypes of the tensor-core prefill entries (`[dtype][padded][head_dim tier]`, 6 each).
const PREFILL_MMA_DTYPES: [DType; 2] = [DType::F16, DType::BF16];

/// The tensor-core kernels' tile shape for a head_dim (the kernel's `PmShape`): (head_dim tier,
/// D = 64 << tier, query rows per block BQ, keys per tile BK) — D = 64, 128 or 256 the smallest
/// that holds head_dim, BQ = 128 and BK = 64 up to D = 128, else 64 and 32.
fn prefill_mma_shape(hd: usize) -> (usize, usize, usize, usize) {
    let tier = if hd <= 64 {
        0
    } else if hd <= 128 {
        1
    } else {
        2
    };
    let d = 64 << tier;
    let (bq, bk) = if d <= 128 { (128, 64) } else { (64, 32) };
    (tier, d, bq, bk)
}

/// The tensor-core kernel for a 16-bit KV dtype and head_dim (a multiple of 8 up to 256, padded
/// to D), its query rows per block and its dynamic shared memory: Q [BQ][D+8] plus two stages of
/// K and V [BK][D+8], 16-bit elements.
fn prefill_mma_kernel(kv: DType, hd: usize) -> Result<(&'static str, usize, usize)> {
    let (tier, d, bq, bk) = prefill_mma_shape(hd);
    // Entries per dtype: the three tiers at head_dim == D, then the three zero-padded ones.
    let variant = if hd == d { tier } else { 3 + tier };
    let name = entry_in(kern::prefill_attention_mma::ENTRIES, &PREFILL_MMA_DTYPES, kv, variant, 6)?;
    Ok((name, bq, (bq + 4 * bk) * (d + 8) * 2))
}

/// The tensor-core kernel for 8-bit KV at head_dim 64, 128 or 256 (head_dim == D), its query rows
/// per block and its dynamic shared memory: Q [BQ][D+8] and one stage of K and V [BK][D+8] as
/// f16, two stages of raw K and V codes [BK][D] and their row scales [BK] (f32).
fn prefill_mma8_kernel(kv: DType, hd: usize) -> Result<(&'static str, usize, usize)> {
    let (tier, d, bq, bk) = prefill_mma_shape(hd);
    let name = entry_in(kern::prefill_attention_mma8::ENTRIES, &PREFILL_MMA8_DTYPES, kv, tier, 3)?;
    Ok((name, bq, (bq + 2 * bk) * (d + 8) * 2 + 4 * bk * d + 16 * bk))
}

/// Query rows per block of the Hopper prefill kernel (`prefill_attention_wgmma_<kv>_d128`).
const PREFILL_WGMMA_ROWS: usize = 128;
/// Its dynamic shared memory: Q, two stages of K and V, each a 128 x 128 tile of 16-bit elements,
/// and 1 KiB to align them to the 1024 bytes of the 128-byte swizzle's pattern.
const PREFILL_WGMMA_SMEM: usize = 5 * 128 * 128 * 2 + 1024;
/// Its threads: two warpgroups, and for `_ws` a producer warpgroup.
fn prefill_wgmma_threads(variant: HopperPrefill) -> u32 {
    if variant == HopperPrefill::Ws { 384 } else { 256 }
}

/// The kernel that takes a 16-bit KV prefill at head_dim 128 on an sm_90 device: the Hopper
/// kernels (cuda/prefill_attention_wgmma.cu), or `Mma`, the mma.sync kernel every other device
/// runs (`CudaOptions::hopper_prefill`, `LSERVE_CUDA_PREFILL_WGMMA`: 0 Mma, 1 Plain, 2 Ws, 3 Tma).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HopperPrefill {
    /// The mma.sync kernel (prefill_attention.cu).
    Mma,
    /// Every thread stages key tiles (cp.async); also the fallback where tensor maps fail.
    Plain,
    /// `_ws`: a producer warpgroup stages them (TMA boxes, cp.async off the runs).
    Ws,
    /// `_tma`: the plain kernel, copying runs of 16 keys of one page by TMA.
    Tma,
}

/// Which Hopper kernel (wgmma, cuda/prefill_attention_wgmma.cu) takes a 16-bit KV prefill, if
/// any: on sm_90 (its modules are compiled for compute_90a) at head_dim 128, `_ws` (measured 557
/// ms of attention at 32K against `_tma`'s 767 and the plain kernel's ~780, docs/benchmarks.md
/// session 27) unless `CudaOptions::hopper_prefill` or else `LSERVE_CUDA_PREFILL_WGMMA` says
/// otherwise — `0` sends it to the mma.sync kernel, `1` picks the plain one, `3` `_tma`; the
/// variable is read per launch, so one process can compare them.
fn prefill_wgmma(be: &CudaBackend, hd: usize) -> Option<HopperPrefill> {
    if hd != 128 || be.gpu().arch != "compute_90a" {
        return None;
    }
    let chosen = be.hopper_prefill().unwrap_or_else(|| match std::env::var("LSERVE_CUDA_PREFILL_WGMMA").as_deref() {
        Ok("0") => HopperPrefill::Mma,
        Ok("1") => HopperPrefill::Plain,
        Ok("3") => HopperPrefill::Tma,
        _ => HopperPrefill::Ws,
    });
    (chosen != HopperPrefill::Mma).then_some(chosen)
}

#[allow(clippy::too_many_arguments)]
pub fn prefill_attention(
    be: &CudaBackend,
    p: &AttentionParams,
    q: &CudaBuffer,
    q_indptr: &CudaBuffer,
    kv: LayerKv<CudaBackend>,
    meta: &PagedMeta<CudaBackend>,
    blocks: Option<&BlockPages<CudaBackend>>,
    out: &mut CudaBuffer,
) -> Result<()> {
    check_common(p, &kv, meta, "prefill_attention")?;
    let (n, ns, nh, hd) = (u(p.n_tokens), u(p.num_seqs), u(p.n_heads), u(p.head_dim));
    need(q, DType::F32, n * nh * hd, "prefill_attention q")?;
    need(q_indptr, DType::U32, ns + 1, "prefill_attention q_indptr")?;
    // out: f32, or rounded to f16 / bf16 (Caps::act16_from: the o projection's x as it is).
    let out16 = need_act(out, n * nh * hd, "prefill_attention out")?;
    if n == 0 || ns == 0 {
        return Ok(());
    }
    // Block-sparse prefill: the list length is bounded by the kernels' shared list
    // (PREFILL_MAX_LIST); the kernels bound every read by the buffers' lengths (a block past
    // them attends densely).
    let (blk_sel, blk_cnt, bsl, bcl) = match blocks {
        Some(b) => {
            if p.window != 0 || u(p.sel_stride) >= PREFILL_MAX_LIST {
                return Err(err(format!(
                    "prefill_attention: block-sparse prefill needs window 0 and sel_stride < {PREFILL_MAX_LIST}"
                )));
            }
            need(b.counts, DType::U32, 0, "prefill_attention block counts")?;
            need(b.selected, DType::U32, 0, "prefill_attention block selected")?;
            (b.selected, b.counts, b.selected.len as u32, b.counts.len as u32)
        }
        None => (q_indptr, q_indptr, 0, 0),
    };
    // The scalar and the tensor-core kernels share one argument list (two declarations).
    macro_rules! args {
        ($binding:ident $(, $extra:ident)?) => {
            kern::$binding::Args {
                $($extra,)?
                q,
                q_indptr,
                k: kv.k,
                v: kv.v,
                sk: kv.sk,
                sv: kv.sv,
                head_map: kv.head_map,
                page_indptr: meta.page_indptr,
                page_table: meta.page_table,
                kv_len: meta.kv_len,
                ring_table: meta.ring_table,
                out,
                ptl: meta.page_table.len as u32,
                rtl: meta.ring_table.len as u32,
                blk_sel,
                blk_cnt,
                bsl,
                bcl,
                out16,
            }
        };
    }
    let mma8 = kv.k.dtype.is_kv8() && matches!(hd, 64 | 128 | 256);
    let mma16 = matches!(kv.k.dtype, DType::F16 | DType::BF16);
    // The tensor-core kernels take the row max on raw scores, which needs a positive scale.
    if (mma8 || mma16) && (p.scale.is_nan() || p.scale <= 0.0) {
        return Err(err(format!("prefill_attention: scale {} (must be positive)", p.scale)));
    }
    if mma8 {
        let (name, rows, smem) = prefill_mma8_kernel(kv.k.dtype, hd)?;
        let l = Launch::new((nh as u32, (n / rows + ns) as u32, 1), 128).smem(smem);
        return kern::prefill_attention_mma8::launch_variant(be.gpu(), name, l, p, args!(prefill_attention_mma8));
    }
    if let Some(variant) = prefill_wgmma(be, hd).filter(|_| mma16) {
        let tiles = n / PREFILL_WGMMA_ROWS + ns;
        let launch = |v| Launch::new((nh as u32, tiles as u32, 1), prefill_wgmma_threads(v)).smem(PREFILL_WGMMA_SMEM);
        // `_tma` and `_ws` need the pools' tensor maps; where the driver cannot make them, the
        // plain kernel (the same tiles, copied with cp.async) runs instead.
        let pools = || [kv.k, kv.v, kv.sk, kv.sv].map(|b| (b.ptr(), bytes_for(b.dtype, b.len)));
        let maps = (variant != HopperPrefill::Plain).then(|| be.gpu().tensor_maps(pools(), hd).ok()).flatten();
        if let Some(tmaps) = maps.map(Scratch) {
            let ws = usize::from(variant == HopperPrefill::Ws);
            let name = entry_in(kern::prefill_attention_wgmma_tma::ENTRIES, &PREFILL_MMA_DTYPES, kv.k.dtype, ws, 2)?;
            let args = args!(prefill_attention_wgmma_tma, tmaps);
            return kern::prefill_attention_wgmma_tma::launch_variant(be.gpu(), name, launch(variant), p, args);
        }
        let name = entry_in(kern::prefill_attention_wgmma::ENTRIES, &PREFILL_MMA_DTYPES, kv.k.dtype, 0, 1)?;
        let l = launch(HopperPrefill::Plain);
        return kern::prefill_attention_wgmma::launch_variant(be.gpu(), name, l, p, args!(prefill_attention_wgmma));
    }
    if mma16 {
        let (name, rows, smem) = prefill_mma_kernel(kv.k.dtype, hd)?;
        let tiles = n / rows + ns;
        let l = Launch::new((nh as u32, tiles as u32, 1), 128).smem(smem);
        return kern::prefill_attention_mma::launch_variant(be.gpu(), name, l, p, args!(prefill_attention_mma));
    }
    // Dims per thread: head_dim <= 4 * DPT, DPT in 4..=64 (entries d4 .. d64).
    let dpt = hd.div_ceil(4).next_power_of_two().max(4);
    let name = entry_in(
        kern::prefill_attention::ENTRIES,
        &PREFILL_SCALAR_DTYPES,
        kv.k.dtype,
        dpt.trailing_zeros() as usize - 2,
        5,
    )?;
    let tk = 32.min(4096 / hd);
    let l = Launch::new(((n / PREFILL_ROWS + ns) as u32, nh as u32, 1), 128).smem(2 * tk * hd * 4);
    kern::prefill_attention::launch_variant(be.gpu(), name, l, p, args!(prefill_attention))
}

/// The KV dtypes of the tensor-core decode kernels, in their entry table's order.
const DECODE_MMA_DTYPES: [DType; 4] = [DType::F16, DType::BF16, DType::I8, DType::F8E4M3];

/// The tensor-core decode kernel for this KV dtype, head_dim and page size, if there is one
/// (16-bit and 8-bit KV at head_dim 64 or 128; 8-bit pools need an even page size so 8-byte
/// code loads stay aligned); 8-bit KV takes its `_pf` build (the next tile's loads in flight)
/// unless `pf` is off (`CudaBackend::decode_pf`). Its blocks take 8 query heads.
fn decode_mma_kernel(kv: DType, hd: usize, ps: usize, pf: bool) -> Option<&'static str> {
    let col = match hd {
        64 => 0,
        128 => 1,
        _ => return None,
    };
    if kv.is_kv8() && !ps.is_multiple_of(2) {
        return None;
    }
    let entries = kern::sparse_decode_attention_mma::ENTRIES;
    if kv.is_kv8() && pf {
        return entry_in(&entries[DECODE_PF_FROM..], &DECODE_PF_DTYPES, kv, col, 2).ok();
    }
    entry_in(entries, &DECODE_MMA_DTYPES, kv, col, 2).ok()
}

/// The `_pf` entries of `sparse_decode_attention_mma` start after the plain ones ([dtype][col]).
const DECODE_PF_FROM: usize = 2 * DECODE_MMA_DTYPES.len();
const DECODE_PF_DTYPES: [DType; 2] = [DType::I8, DType::F8E4M3];

/// Dynamic shared memory of the cp.async decode kernel (its layout: K/V stages [2][2][ck][row],
/// valid [2][ck], scores [G][ck], q [G][hd], acc [G][hd], for 8-bit KV also the K and V row
/// scales [2][2][ck]; ck as `sd2_chunk`).
fn decode_smem(hd: usize, kv: DType, g: usize) -> usize {
    let row = hd * kv.size();
    let ck = (8192 / row).clamp(8, 64) & !7;
    let scales = if kv.is_kv8() { 4 * ck * 4 } else { 0 };
    4 * ck * row + 2 * ck * 4 + g * ck * 4 + 2 * g * hd * 4 + scales
}

/// Splits per (sequence, KV head chunk) of a decode step (see the module docs).
fn decode_splits(
    p: &AttentionParams,
    page_table_len: usize,
    head_chunks: usize,
    wave: usize,
    cap: Option<usize>,
) -> usize {
    let ps = u(p.page_size);
    let ret = if p.n_ret > 0 { page_table_len * ps } else { 0 };
    let strm = if p.n_str > 0 { u(p.sink + p.local) + ps } else { 0 };
    // Rounded up to a power of two: the grid (a graph replay's frozen argument) changes only
    // when the context doubles, not every KEYS_PER_SPLIT keys; surplus splits are empty.
    let by_len = ret.max(strm).div_ceil(KEYS_PER_SPLIT).next_power_of_two();
    let per_split = u(p.num_seqs) * u(p.n_kv_heads) * head_chunks;
    // `cap` (CudaBackend::decode_splits, for measuring grids in one run) replaces the wave.
    let by_grid = cap.unwrap_or_else(|| splits_for_wave(wave, per_split, p.n_str > 0));
    by_len.min(by_grid).clamp(1, MAX_SPLITS)
}

/// Splits that fit `per_split` blocks a split to a wave of `wave` blocks. Without streaming heads
/// every block is equally long and a second wave of a few blocks would double the time: rounded
/// down. With them, rounded up (their blocks are short, so a grid a little over one wave keeps
/// the GPU fuller than one a little under it: measured at batch 16 / 32), unless rounding down
/// already fills 98% of the wave: then the few blocks past it only wait (H100, 8B 32K sparse
/// batch 1: 49 splits of 8 blocks for a wave of 396, 397 us of decode attention a step against
/// 429 for 50; docs/benchmarks.md session 32).
fn splits_for_wave(wave: usize, per_split: usize, streaming: bool) -> usize {
    let down = (wave / per_split).max(1);
    if streaming && down * per_split * 50 < wave * 49 { wave.div_ceil(per_split) } else { down }
}

pub fn sparse_decode_attention(
    be: &CudaBackend,
    p: &AttentionParams,
    q: &CudaBuffer,
    kv: LayerKv<CudaBackend>,
    meta: &PagedMeta<CudaBackend>,
    pages: &HeadPages<CudaBackend>,
    out: &mut CudaBuffer,
) -> Result<()> {
    check_common(p, &kv, meta, "sparse_decode_attention")?;
    p.check_unit().map_err(err)?;
    let (ns, nh, hd, nkv) = (u(p.num_seqs), u(p.n_heads), u(p.head_dim), u(p.n_kv_heads));
    need(q, DType::F32, ns * nh * hd, "sparse_decode_attention q")?;
    // An X8 out (one sequence's row as x8 digits, Caps::act_x8_dtypes) is written by the merge,
    // which then always runs (at least 2 splits; the kernels never write `out` when split).
    let x8 = out.dtype == DType::X8;
    if x8 {
        let k = nh * hd;
        if ns != 1 || !hd.is_multiple_of(32) || !be.caps().x8_row_fits(k) {
            return Err(err(format!(
                "sparse_decode_attention: an X8 out is one sequence with head_dim a multiple of 32 and n_heads * head_dim up to {}, not {ns} x {nh} x {hd}",
                be.caps().act_x8_max_k
            )));
        }
        need(out, DType::X8, x8_bytes(k), "sparse_decode_attention out")?;
    } else {
        need(out, DType::F32, ns * nh * hd, "sparse_decode_attention out")?;
    }
    need(pages.seq_slot, DType::U32, ns, "decode seq_slot")?;
    need(pages.tail_start, DType::U32, ns, "decode tail_start")?;
    need(pages.selected, DType::U32, 0, "decode selected")?;
    need(pages.counts, DType::U32, 0, "decode counts")?;
    if ns == 0 {
        return Ok(());
    }
    let group = nh / nkv;
    let (mma, name, smem, head_chunks) = match decode_mma_kernel(kv.k.dtype, hd, u(p.page_size), be.decode_pf()) {
        Some(name) => (true, name, 0, group.div_ceil(DECODE_HEADS)),
        None => {
            let g = group.min(DECODE_HEADS).next_power_of_two();
            // SIMT entries [kv dtype][log2 G].
            let name = entry(kern::sparse_decode_attention::ENTRIES, kv.k.dtype, g.trailing_zeros() as usize, 4)?;
            (false, name, decode_smem(hd, kv.k.dtype, g), group.div_ceil(g))
        }
    };
    let gpu = be.gpu();
    let stem = kern::sparse_decode_attention::STEM;
    let wave = (gpu.sm_count * gpu.blocks_per_sm(stem, name, 128, smem as u32)?) as usize;
    let splits = decode_splits(p, meta.page_table.len, head_chunks, wave, be.decode_splits()).max(1 + usize::from(x8));
    let part =
        if splits > 1 { Scratch(gpu.scratch("decode_part", ns * nh * splits * (hd + 2) * 4)?) } else { Scratch::NONE };
    let l = Launch::new((splits as u32, (nkv * head_chunks) as u32, ns as u32), 128).smem(smem);
    // The SIMT and the tensor-core kernels share one argument list (two declarations).
    macro_rules! args {
        ($binding:ident) => {
            kern::$binding::Args {
                q,
                k: kv.k,
                v: kv.v,
                sk: kv.sk,
                sv: kv.sv,
                head_map: kv.head_map,
                page_indptr: meta.page_indptr,
                page_table: meta.page_table,
                kv_len: meta.kv_len,
                ring_table: meta.ring_table,
                selected: pages.selected,
                counts: pages.counts,
                seq_slot: pages.seq_slot,
                tail_start: pages.tail_start,
                out: &mut *out,
                part,
                ptl: meta.page_table.len as u32,
                rtl: meta.ring_table.len as u32,
                sl: pages.selected.len as u32,
                cl: pages.counts.len as u32,
            }
        };
    }
    if mma {
        kern::sparse_decode_attention_mma::launch_variant(gpu, name, l, p, args!(sparse_decode_attention_mma))?;
    } else {
        kern::sparse_decode_attention::launch_variant(gpu, name, l, p, args!(sparse_decode_attention))?;
    }
    if splits > 1 {
        let l = Launch::new(((ns * nh) as u32, hd.div_ceil(32) as u32, 1), 256);
        let args = kern::sparse_decode_attention_merge::Args { part, out, n_splits: splits as u32 };
        let name = kern::sparse_decode_attention_merge::ENTRIES[usize::from(x8)];
        kern::sparse_decode_attention_merge::launch_variant(gpu, name, l, p, args)?;
    }
    Ok(())
}

pub fn lambda_mass(
    be: &CudaBackend,
    p: &LambdaMassParams,
    q: &CudaBuffer,
    kv: LayerKv<CudaBackend>,
    meta: &PagedMeta<CudaBackend>,
    out: &mut CudaBuffer,
) -> Result<()> {
    let (n, nh, nkv, hd, ps) = (u(p.n_tokens), u(p.n_heads), u(p.n_kv_heads), u(p.head_dim), u(p.page_size));
    if nkv == 0 || !nh.is_multiple_of(nkv) || ps == 0 {
        return Err(err("lambda_mass: bad head counts or page size"));
    }
    need(q, DType::F32, n * nh * hd, "lambda_mass q")?;
    need_kv(kv.k, u(p.num_pages) * nkv * ps, hd, "lambda_mass k pool")?;
    need(kv.head_map, DType::U32, nkv, "head_map")?;
    need(meta.page_indptr, DType::U32, 2, "lambda_mass page_indptr")?;
    need(meta.page_table, DType::U32, 0, "lambda_mass page_table")?;
    need(meta.kv_len, DType::U32, 1, "lambda_mass kv_len")?;
    need(out, DType::F32, n * nh, "lambda_mass out")?;
    let name = entry(kern::lambda_mass::ENTRIES, kv.k.dtype, 0, 1)?;
    let l = Launch::new((n as u32, nh as u32, 1), 256);
    let args = kern::lambda_mass::Args {
        q,
        k: kv.k,
        head_map: kv.head_map,
        page_indptr: meta.page_indptr,
        page_table: meta.page_table,
        kv_len: meta.kv_len,
        out,
        ptl: meta.page_table.len as u32,
    };
    kern::lambda_mass::launch_variant(be.gpu(), name, l, p, args)
}

#[cfg(test)]
mod tests {
    use super::splits_for_wave;

    /// A wave of 396 blocks (an H100: 132 SMs, 3 blocks each): batch 1 with 8 KV heads rounds down
    /// to 49 (392 blocks, 99% of it) with or without streaming heads; batch 16 (128 blocks a
    /// split) rounds up to 4 with streaming heads, down to 3 without; batch 32 likewise 2 / 1.
    #[test]
    fn splits_fill_one_wave() {
        for (per_split, streaming, want) in [
            (8, true, 49),
            (8, false, 49),
            (128, true, 4),
            (128, false, 3),
            (256, true, 2),
            (256, false, 1),
            (500, false, 1),
        ] {
            assert_eq!(splits_for_wave(396, per_split, streaming), want, "{per_split} {streaming}");
        }
    }
}
