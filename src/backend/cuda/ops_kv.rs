//! Launches of the KV-side ops: `rope_append_kv` (cuda/rope_append_kv.cu: a block per (token,
//! head), or per token for several tokens of 16-bit / f32 KV; then
//! cuda/rope_append_kv_summary.cu when the layer has retrieval heads and the call several tokens;
//! a one-token call folds its keys into the summaries itself) and `page_select`
//! (cuda/page_select.cu). The kernel headers give layouts and block mappings.
//!
//! Invariants: the four pools of a layer share one KV dtype (8-bit pools: codes + per-row scales,
//! `kv_pool_len`); slots, ring slots and page tables
//! live on the device and are bounds-checked by the kernels (an out-of-pool slot is skipped).
//! Slots of one call must be distinct (the trait's contract; two writers of one slot would race).

use super::bindings::{self as kern, Scratch, entry};
use super::context::{Gpu, Launch, err};
use super::{CudaBackend, CudaBuffer, need, need_act, need_kv};
use crate::backend::*;
use crate::error::Result;

fn u(x: u32) -> usize {
    x as usize
}

/// Threads of a block that runs cuda/page_select.cu's `select_row` (the radix top-k of
/// `page_select` and `page_top_k`).
pub(super) const SELECT_THREADS: u32 = 1024;

/// Whether a row of `np` u64 keys is copied into dynamic shared memory for `select_row`, beside
/// its own ~1.2 KiB (histogram, scan, state); longer rows are read from the scratch keys.
pub(super) fn select_keys_in_smem(g: &Gpu, np: usize) -> bool {
    np * 8 + 2048 <= g.smem_optin as usize
}

pub fn rope_append_kv(
    be: &CudaBackend,
    p: &RopeAppendKvParams,
    qkv: &CudaBuffer,
    meta: &RopeAppendMeta<CudaBackend>,
    q: &mut CudaBuffer,
    kv: LayerKvMut<CudaBackend>,
) -> Result<()> {
    let (n, nh, nkv, hd, ps) = (u(p.n_tokens), u(p.n_heads), u(p.n_kv_heads), u(p.head_dim), u(p.page_size));
    let (n_ret, n_str, lp) = (u(p.n_ret), u(p.n_str), u(p.logical_page));
    if n_ret + n_str != nkv || lp == 0 || ps == 0 || !ps.is_multiple_of(lp) || hd == 0 {
        return Err(err("rope_append_kv: bad head split, page size or logical page"));
    }
    // qkv f32, or 16-bit as a cuBLAS GEMM wrote it (Backend::matmul_out16_dtype): the kernel's qkv16.
    let qkv16 = need_act(qkv, n * (nh + 2 * nkv) * hd, "rope_append_kv qkv")?;
    need(meta.positions, DType::U32, n, "rope_append_kv positions")?;
    need(meta.slots, DType::U32, n, "rope_append_kv slots")?;
    need(meta.ring_slots, DType::U32, n, "rope_append_kv ring_slots")?;
    need(meta.inv_freq, DType::F32, hd / 2, "rope_append_kv inv_freq")?;
    need(kv.head_map, DType::U32, nkv, "head_map")?;
    need(q, DType::F32, n * nh * hd, "rope_append_kv q")?;
    let (rrows, srows) = (u(p.num_pages) * n_ret * ps, u(p.num_str_pages) * n_str * ps);
    let kt = kv.k.dtype;
    need_kv(kv.k, rrows, hd, "k pool")?;
    for (b, rows, what) in
        [(&*kv.v, rrows, "v pool"), (&*kv.sk, srows, "streaming k pool"), (&*kv.sv, srows, "streaming v pool")]
    {
        need(b, kt, kv_pool_len(kt, rows, hd), what)?;
    }
    if kt.is_kv8() && (hd > 256 || !ps.is_multiple_of(4)) {
        return Err(err("rope_append_kv: 8-bit KV needs head_dim <= 256 and page_size % 4 == 0"));
    }
    need(kv.summary, DType::F32, u(p.num_pages) * n_ret * (ps / lp) * 2 * hd, "summary")?;
    if n == 0 {
        return Ok(());
    }
    let g = be.gpu();
    // Several tokens of 16-bit or f32 KV: one block a token, a (token, pair)'s cos/sin once per
    // ROWS_THREADS / head_dim * 2 heads (`rope_append_kv_rows`); else a block per (token, head).
    let half = hd / 2;
    let rows = n > 1 && !kt.is_kv8() && hd.is_multiple_of(2) && ROWS_THREADS.is_multiple_of(half) && be.rope_rows();
    let (name, l) = if rows {
        let name = entry(&kern::rope_append_kv::ENTRIES[ROWS_FROM..], kt, 0, 1)?;
        (name, Launch::new((n as u32, 1, 1), ROWS_THREADS as u32))
    } else {
        (entry(kern::rope_append_kv::ENTRIES, kt, 0, 1)?, Launch::new((n as u32, (nh + nkv) as u32, 1), 64))
    };
    let args = kern::rope_append_kv::Args {
        qkv,
        positions: meta.positions,
        slots: meta.slots,
        ring_slots: meta.ring_slots,
        inv_freq: meta.inv_freq,
        head_map: kv.head_map,
        q,
        k: &mut *kv.k,
        v: kv.v,
        sk: kv.sk,
        sv: kv.sv,
        sum: &mut *kv.summary,
        qkv16,
    };
    kern::rope_append_kv::launch_variant(g, name, l, p, args)?;
    // One token: rope_append_kv folded its keys into the summaries (cuda/rope_append_kv.cu).
    if n_ret > 0 && n > 1 {
        let name = entry(kern::rope_append_kv_summary::ENTRIES, kt, 0, 1)?;
        let args = kern::rope_append_kv_summary::Args { s: meta.slots, k: kv.k, sum: kv.summary };
        kern::rope_append_kv_summary::launch_variant(g, name, Launch::new((n as u32, 1, 1), 256), p, args)?;
    }
    Ok(())
}

/// Threads of a `rope_append_kv_rows` block (one token).
const ROWS_THREADS: usize = 256;
/// Where the `rope_append_kv_rows` entries start in the `rope_append_kv` binding's table.
const ROWS_FROM: usize = 5;

/// `page_select_score_rows`'s tile (cuda/page_select.cu): rows, logical pages, threads, and the
/// most query heads a KV head may have.
const PSR_ROWS: usize = 32;
const PSR_COLS: usize = 64;
const PSR_THREADS: u32 = (PSR_ROWS * PSR_COLS / 8) as u32;
const PSR_GMAX: usize = 8;

/// Whether pass 1 runs as `page_select_score_rows`: the caller says the rows share their page
/// lists, there are rows enough to tile, the ranking is the max, the units whole pages, the
/// group small enough for its accumulators, the logical pages a divisor of the tile, and q and
/// the summaries readable by 16-byte loads (head_dim % 4 == 0, 16-byte aligned buffers).
fn rows_kernel(
    p: &PageSelectParams,
    head_norm: bool,
    upp: usize,
    lpp: usize,
    q: &CudaBuffer,
    sum: &CudaBuffer,
) -> bool {
    let group = (p.n_heads / p.n_kv_heads) as usize;
    let aligned = p.head_dim.is_multiple_of(4) && q.ptr().is_multiple_of(16) && sum.ptr().is_multiple_of(16);
    p.rows_share_pages != 0
        && p.num_seqs >= 2
        && !head_norm
        && upp == 1
        && group <= PSR_GMAX
        && PSR_COLS.is_multiple_of(lpp)
        && aligned
}

#[allow(clippy::too_many_arguments)]
pub fn page_select(
    be: &CudaBackend,
    p: &PageSelectParams,
    q: &CudaBuffer,
    kv: LayerKv<CudaBackend>,
    meta: &PagedMeta<CudaBackend>,
    seq_slot: &CudaBuffer,
    select_mask: &CudaBuffer,
    out: SelectedMut<CudaBackend>,
) -> Result<()> {
    let (ns, nh, nkv, hd, ps, lp) =
        (u(p.num_seqs), u(p.n_heads), u(p.n_kv_heads), u(p.head_dim), u(p.page_size), u(p.logical_page));
    if lp == 0 || ps == 0 || !ps.is_multiple_of(lp) || p.k_pages > p.sel_stride || nkv == 0 || !nh.is_multiple_of(nkv) {
        return Err(err("page_select: bad logical page, head counts or k_pages > sel_stride"));
    }
    need(q, DType::F32, ns * nh * hd, "page_select q")?;
    need(kv.summary, DType::F32, u(p.num_pages) * u(p.n_ret) * (ps / lp) * 2 * hd, "page_select summary")?;
    need(kv.head_map, DType::U32, nkv, "head_map")?;
    need(meta.page_indptr, DType::U32, ns + 1, "page_select page_indptr")?;
    need(meta.page_table, DType::U32, 0, "page_select page_table")?;
    need(meta.kv_len, DType::U32, ns, "page_select kv_len")?;
    need(seq_slot, DType::U32, ns, "page_select seq_slot")?;
    need(select_mask, DType::U32, ns, "page_select select_mask")?;
    need(out.selected, DType::U32, 0, "page_select selected")?;
    need(out.counts, DType::U32, 0, "page_select counts")?;
    if ns == 0 || p.n_ret == 0 {
        return Ok(());
    }
    if hd > 256 {
        return Err(err("page_select: head_dim above 256 is not supported"));
    }
    let hn = p.checked_rank().map_err(err)?;
    let upp = ps / u(p.checked_unit().map_err(err)?);
    let ptl = meta.page_table.len;
    // Keys per row: a power of two covering the longest sequence's candidates (units).
    let longest = if p.max_seq_pages == 0 { ptl } else { u(p.max_seq_pages).min(ptl) };
    let np = (longest * upp).next_power_of_two().max(32);
    let g = be.gpu();
    let keys = Scratch(g.scratch("page_select_keys", ns * nkv * np * 8)?);
    // head_norm: one f32 bound per (sequence, query head, candidate).
    let heads = if hn { Scratch(g.scratch("page_select_heads", ns * nh * np * 4)?) } else { Scratch::NONE };
    let lpp = ps / lp;
    let rows = rows_kernel(p, hn, upp, lpp, q, kv.summary);
    let l = if rows {
        Launch::new(((np * lpp).div_ceil(PSR_COLS) as u32, nkv as u32, ns.div_ceil(PSR_ROWS) as u32), PSR_THREADS)
    } else {
        Launch::new(((np / 8) as u32, nkv as u32, ns as u32), 256)
    };
    let name = kern::page_select_score::ENTRIES[rows as usize];
    let args = kern::page_select_score::Args {
        q,
        summary: kv.summary,
        head_map: kv.head_map,
        page_indptr: meta.page_indptr,
        page_table: meta.page_table,
        kv_len: meta.kv_len,
        select_mask,
        keys,
        heads,
        np: np as u32,
        page_table_len: ptl as u32,
    };
    kern::page_select_score::launch_variant(g, name, l, p, args)?;
    if hn {
        let args = kern::page_select_norm::Args {
            head_map: kv.head_map,
            page_indptr: meta.page_indptr,
            kv_len: meta.kv_len,
            select_mask,
            heads,
            keys,
            np: np as u32,
            page_table_len: ptl as u32,
        };
        kern::page_select_norm::launch(g, Launch::new((nkv as u32, ns as u32, 1), 256), p, args)?;
    }
    let (selected_len, counts_len) = (out.selected.len as u32, out.counts.len as u32);
    // The two sorts share every argument but the keys' (read in the first, sorted in place in
    // the second).
    macro_rules! sort_args {
        ($binding:ident, $keys:ident) => {
            kern::$binding::Args {
                head_map: kv.head_map,
                page_indptr: meta.page_indptr,
                kv_len: meta.kv_len,
                seq_slot,
                select_mask,
                $keys: keys,
                selected: out.selected,
                counts: out.counts,
                np: np as u32,
                page_table_len: ptl as u32,
                selected_len,
                counts_len,
            }
        };
    }
    if select_keys_in_smem(g, np) {
        let l = Launch::new((nkv as u32, ns as u32, 1), SELECT_THREADS).smem(np * 8);
        kern::page_select::launch(g, l, p, sort_args!(page_select, keys_in))
    } else {
        let l = Launch::new((nkv as u32, ns as u32, 1), SELECT_THREADS);
        kern::page_select_global::launch(g, l, p, sort_args!(page_select_global, keys_io))
    }
}
