//! Launches of block-sparse prefill's estimate ops: `antidiagonal_score`
//! (cuda/antidiagonal_score.cu: a CTA per (KV head, query block), 16 warps of mma.sync tiles)
//! and `page_top_k` (cuda/page_select.cu: page_select's radix top-k over a score table's rows).
//! The kernel headers give layouts and block mappings.
//!
//! Invariants: block metadata, page tables and score rows live on the device and are
//! bounds-checked by the kernels (a block whose rows, pages or score row fall outside the buffers
//! is skipped); the host checks shapes and buffer types.

use super::bindings::{self as kern, Scratch, entry};
use super::context::{Launch, err};
use super::ops_kv::{SELECT_THREADS, select_keys_in_smem};
use super::{CudaBackend, CudaBuffer, need, need_kv};
use crate::backend::*;
use crate::error::Result;

fn u(x: u32) -> usize {
    x as usize
}

/// (entry variant, D, keys per tile, warps per head, heads per CTA) for head_dim `hd` (the
/// kernel's constants: IPW = 256 / D, WPH = 8 / IPW, HG = 16 / WPH).
fn antidiagonal_shape(hd: usize) -> Result<(usize, usize, usize, usize, usize)> {
    let (variant, d) = match hd {
        1..=64 => (0, 64),
        65..=128 => (1, 128),
        129..=256 => (2, 256),
        _ => return Err(err(format!("antidiagonal_score: head_dim {hd} is above 256"))),
    };
    let wph = 8 / (256 / d);
    Ok((variant, d, if d <= 128 { 128 } else { 64 }, wph, 16 / wph))
}

pub fn antidiagonal_score(
    be: &CudaBackend,
    p: &AntidiagonalParams,
    q: &CudaBuffer,
    kv: LayerKv<CudaBackend>,
    meta: &PagedMeta<CudaBackend>,
    blocks: &BlockRows<CudaBackend>,
    scores: &mut CudaBuffer,
) -> Result<()> {
    let (nb, ns, nh, nkv, hd, ps) =
        (u(p.n_blocks), u(p.num_seqs), u(p.n_heads), u(p.n_kv_heads), u(p.head_dim), u(p.page_size));
    p.check().map_err(err)?;
    let (variant, d, tk, wph, hg) = antidiagonal_shape(hd)?;
    need(q, DType::F32, u(p.n_tokens) * nh * hd, "antidiagonal_score q")?;
    need_kv(kv.k, u(p.num_pages) * u(p.n_ret) * ps, hd, "antidiagonal_score k pool")?;
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
    let name = entry(kern::antidiagonal_score::ENTRIES, kv.k.dtype, variant, 3)?;
    let heads = (nh / nkv).min(hg);
    let nkg = tk / ANTIDIAGONAL_STRIDE;
    // Key tiles [2][tk][d + 8] (16-bit), the partial sums [hg][wph][16][nkg], pz [hg * 16][nkg]
    // and csum [nkg] (f32): the kernel's layout.
    let smem = 2 * tk * (d + 8) * 2 + (hg * wph * 16 * nkg + hg * 16 * nkg + nkg) * 4;
    let l = Launch::new((nkv as u32, nb as u32, 1), (heads * wph * 32) as u32).smem(smem);
    let args = kern::antidiagonal_score::Args {
        q,
        k: kv.k,
        head_map: kv.head_map,
        page_indptr: meta.page_indptr,
        page_table: meta.page_table,
        kv_len: meta.kv_len,
        info: blocks.info,
        v_indptr: blocks.page_indptr,
        page_table_len: meta.page_table.len as u32,
        scores_len: scores.len as u32,
        scores,
    };
    kern::antidiagonal_score::launch_variant(be.gpu(), name, l, p, args)
}

pub fn page_top_k(
    be: &CudaBackend,
    p: &PageTopKParams,
    scores: &CudaBuffer,
    page_indptr: &CudaBuffer,
    seq_slot: &CudaBuffer,
    select_mask: &CudaBuffer,
    out: SelectedMut<CudaBackend>,
) -> Result<()> {
    let ns = u(p.num_seqs);
    if p.k_pages > p.sel_stride {
        return Err(err("page_top_k: k_pages > sel_stride"));
    }
    need(scores, DType::F32, 0, "page_top_k scores")?;
    need(page_indptr, DType::U32, ns + 1, "page_top_k page_indptr")?;
    need(seq_slot, DType::U32, ns, "page_top_k seq_slot")?;
    need(select_mask, DType::U32, ns, "page_top_k select_mask")?;
    need(out.selected, DType::U32, 0, "page_top_k selected")?;
    need(out.counts, DType::U32, 0, "page_top_k counts")?;
    if ns == 0 || p.n_ret == 0 {
        return Ok(());
    }
    // Keys per row: a power of two covering the longest row (the whole table when unknown).
    let longest = if p.max_seq_pages == 0 { scores.len / u(p.n_ret) } else { u(p.max_seq_pages) };
    let np = longest.next_power_of_two().max(32);
    let g = be.gpu();
    let (scores_len, selected_len, counts_len) = (scores.len as u32, out.selected.len as u32, out.counts.len as u32);
    let grid = (p.n_ret, ns as u32, 1);
    // The two sorts share every argument but the scratch keys (only the global one has them).
    macro_rules! top_k_args {
        ($binding:ident $(, $keys:ident)?) => {
            kern::$binding::Args {
                scores,
                page_indptr,
                seq_slot,
                select_mask,
                $(keys_io: $keys,)?
                selected: out.selected,
                counts: out.counts,
                np: np as u32,
                scores_len,
                selected_len,
                counts_len,
            }
        };
    }
    if select_keys_in_smem(g, np) {
        let l = Launch::new(grid, SELECT_THREADS).smem(np * 8);
        kern::page_top_k::launch(g, l, p, top_k_args!(page_top_k))
    } else {
        let keys = Scratch(g.scratch("page_top_k_keys", ns * u(p.n_ret) * np * 8)?);
        kern::page_top_k_global::launch(g, Launch::new(grid, SELECT_THREADS), p, top_k_args!(page_top_k_global, keys))
    }
}
