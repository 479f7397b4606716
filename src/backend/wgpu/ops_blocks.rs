//! Recording of block-sparse prefill's estimate ops (CPU reference: src/backend/cpu/blockscore.rs):
//! `antidiagonal_score` (shaders/antidiagonal_score.wgsl, a workgroup per (query block, KV head),
//! any KV dtype through the KV snippet) and `page_top_k`, two dispatches: `page_top_k` turns the
//! score table into sort keys in the scratch, then `page_select_topk` (page_select's radix
//! select) picks each row's best, with rank max over an identity head map (retrieval head r is
//! KV head r), since the table has page_select's key layout.

use super::context::err;
use super::ops_basic::{grid, rows_grid};
use super::pipelines as pl;
use super::{WgpuBackend, WgpuBuffer, need, need_kv};
use crate::backend::*;
use crate::error::Result;

fn u(x: u32) -> usize {
    x as usize
}

/// Rows of a block's score one workgroup keeps statistics for (the shader's MAX_ROWS).
const MAX_ROWS: usize = 1024;

pub fn antidiagonal_score(
    be: &WgpuBackend,
    p: &AntidiagonalParams,
    q: &WgpuBuffer,
    kv: LayerKv<WgpuBackend>,
    meta: &PagedMeta<WgpuBackend>,
    blocks: &BlockRows<WgpuBackend>,
    scores: &mut WgpuBuffer,
) -> Result<()> {
    let (nb, ns, nh, nkv, hd, ps) =
        (u(p.n_blocks), u(p.num_seqs), u(p.n_heads), u(p.n_kv_heads), u(p.head_dim), u(p.page_size));
    p.check().map_err(err)?;
    if !hd.is_multiple_of(4) {
        return Err(err(format!(
            "antidiagonal_score: head_dim {hd} is not a multiple of 4 (wgpu reads 16-byte vectors)"
        )));
    }
    if nh / nkv * 16 > MAX_ROWS {
        return Err(err(format!(
            "antidiagonal_score: a KV head's group of {} query heads is above {}",
            nh / nkv,
            MAX_ROWS / 16
        )));
    }
    let kt = kv.k.dtype;
    need(q, DType::F32, u(p.n_tokens) * nh * hd, "antidiagonal_score q")?;
    need_kv(kv.k, kt, u(p.num_pages) * u(p.n_ret) * ps, hd, "antidiagonal_score k pool")?;
    need(kv.head_map, DType::U32, nkv, "antidiagonal_score head_map")?;
    need(meta.page_indptr, DType::U32, ns + 1, "antidiagonal_score page_indptr")?;
    need(meta.page_table, DType::U32, 0, "antidiagonal_score page_table")?;
    need(meta.kv_len, DType::U32, ns, "antidiagonal_score kv_len")?;
    need(blocks.info, DType::U32, nb * 4, "antidiagonal_score blocks")?;
    need(blocks.page_indptr, DType::U32, nb + 1, "antidiagonal_score block page_indptr")?;
    need(scores, DType::F32, 0, "antidiagonal_score scores")?;
    if nb == 0 || p.n_ret == 0 {
        return Ok(());
    }
    let binds = pl::antidiagonal_score::Binds {
        q,
        k_pool: kv.k,
        head_map: kv.head_map,
        page_indptr: meta.page_indptr,
        page_table: meta.page_table,
        kv_len: meta.kv_len,
        info: blocks.info,
        v_indptr: blocks.page_indptr,
        scores,
    };
    pl::antidiagonal_score::dispatch(be.gpu(), Some(kt), p, binds, rows_grid(be, nb * nkv))
}

pub fn page_top_k(
    be: &WgpuBackend,
    p: &PageTopKParams,
    scores: &WgpuBuffer,
    page_indptr: &WgpuBuffer,
    seq_slot: &WgpuBuffer,
    select_mask: &WgpuBuffer,
    out: SelectedMut<WgpuBackend>,
) -> Result<()> {
    let (ns, n_ret) = (u(p.num_seqs), u(p.n_ret));
    if p.k_pages > p.sel_stride {
        return Err(err("page_top_k: k_pages > sel_stride"));
    }
    need(scores, DType::F32, 0, "page_top_k scores")?;
    need(page_indptr, DType::U32, ns + 1, "page_top_k page_indptr")?;
    need(seq_slot, DType::U32, ns, "page_top_k seq_slot")?;
    need(select_mask, DType::U32, ns, "page_top_k select_mask")?;
    // Slots are on the device: the shader skips rows whose slot lies past these buffers.
    need(out.selected, DType::U32, 0, "page_top_k selected")?;
    need(out.counts, DType::U32, 0, "page_top_k counts")?;
    if ns == 0 || n_ret == 0 {
        return Ok(());
    }
    let mut keys = be.scratch(scores.len)?;
    pl::page_top_k::dispatch(
        be.gpu(),
        None,
        p,
        pl::page_top_k::Binds { scores, keys: &mut keys },
        grid(be, scores.len),
    )?;
    let heads = be.iota(n_ret)?;
    let sp = PageSelectParams {
        num_seqs: p.num_seqs,
        n_heads: p.n_ret,
        n_kv_heads: p.n_ret,
        n_ret: p.n_ret,
        k_pages: p.k_pages,
        sel_stride: p.sel_stride,
        max_seq_pages: p.max_seq_pages,
        rank: PAGE_RANK_MAX,
        ..Default::default()
    };
    // sel_unit 0: the pass reads no kv_len (page_indptr stands in for the binding).
    let binds = pl::page_select_topk::Binds {
        keys: &keys,
        head_map: &heads,
        page_indptr,
        kv_len: page_indptr,
        seq_slot,
        select_mask,
        selected: out.selected,
        counts: out.counts,
    };
    pl::page_select_topk::dispatch(be.gpu(), None, &sp, binds, rows_grid(be, ns * n_ret))
}
