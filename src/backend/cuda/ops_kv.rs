//! Launches of the KV-side ops: `rope_append_kv` (cuda/rope_append_kv.cu, then
//! cuda/rope_append_kv_summary.cu when the layer has retrieval heads) and `page_select`
//! (cuda/page_select.cu). The kernel headers give layouts and block mappings.
//!
//! Invariants: the four pools of a layer share one KV dtype; slots, ring slots and page tables
//! live on the device and are bounds-checked by the kernels (an out-of-pool slot is skipped).
//! Slots of one call must be distinct (the trait's contract; two writers of one slot would race).

use super::context::{Launch, err};
use super::{CudaBackend, CudaBuffer, fidx, need, need_float};
use crate::backend::*;
use crate::error::Result;

fn u(x: u32) -> usize {
    x as usize
}

/// Block size of the page_select sort (its bitonic sort's threads).
const SELECT_THREADS: u32 = 1024;

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
    need(qkv, DType::F32, n * (nh + 2 * nkv) * hd, "rope_append_kv qkv")?;
    need(meta.positions, DType::U32, n, "rope_append_kv positions")?;
    need(meta.slots, DType::U32, n, "rope_append_kv slots")?;
    need(meta.ring_slots, DType::U32, n, "rope_append_kv ring_slots")?;
    need(meta.inv_freq, DType::F32, hd / 2, "rope_append_kv inv_freq")?;
    need(kv.head_map, DType::U32, nkv, "head_map")?;
    need(q, DType::F32, n * nh * hd, "rope_append_kv q")?;
    let (rlen, slen) = (u(p.num_pages) * n_ret * ps * hd, u(p.num_str_pages) * n_str * ps * hd);
    let kt = kv.k.dtype;
    need_float(kv.k, rlen, "k pool")?;
    for (b, len, what) in
        [(&*kv.v, rlen, "v pool"), (&*kv.sk, slen, "streaming k pool"), (&*kv.sv, slen, "streaming v pool")]
    {
        need(b, kt, len, what)?;
    }
    need(kv.summary, DType::F32, u(p.num_pages) * n_ret * (ps / lp) * 2 * hd, "summary")?;
    if n == 0 {
        return Ok(());
    }
    let g = be.gpu();
    let name = ["rope_append_kv_f32", "rope_append_kv_f16", "rope_append_kv_bf16"][fidx(kt)];
    let ptrs = [
        qkv.ptr(),
        meta.positions.ptr(),
        meta.slots.ptr(),
        meta.ring_slots.ptr(),
        meta.inv_freq.ptr(),
        kv.head_map.ptr(),
        q.ptr(),
        kv.k.ptr(),
        kv.v.ptr(),
        kv.sk.ptr(),
        kv.sv.ptr(),
    ];
    g.launch("rope_append_kv", name, Launch::new((n as u32, (nh + nkv) as u32, 1), 64), p, &ptrs, &[])?;
    if n_ret > 0 {
        let name =
            ["rope_append_kv_summary_f32", "rope_append_kv_summary_f16", "rope_append_kv_summary_bf16"][fidx(kt)];
        let ptrs = [meta.slots.ptr(), kv.k.ptr(), kv.summary.ptr()];
        g.launch("rope_append_kv_summary", name, Launch::new((n as u32, 1, 1), 256), p, &ptrs, &[])?;
    }
    Ok(())
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
    let ptl = meta.page_table.len;
    // Keys per row: a power of two covering the longest sequence's candidates.
    let longest = if p.max_seq_pages == 0 { ptl } else { u(p.max_seq_pages).min(ptl) };
    let np = longest.next_power_of_two().max(32);
    let g = be.gpu();
    let keys = g.scratch("page_select_keys", ns * nkv * np * 8)?;
    let l = Launch::new(((np / 8) as u32, nkv as u32, ns as u32), 256);
    let ptrs = [
        q.ptr(),
        kv.summary.ptr(),
        kv.head_map.ptr(),
        meta.page_indptr.ptr(),
        meta.page_table.ptr(),
        select_mask.ptr(),
        keys,
    ];
    g.launch("page_select", "page_select_score", l, p, &ptrs, &[np as u32, ptl as u32])?;
    // Rows whose keys fit in shared memory sort there; longer ones in place in the scratch.
    let in_smem = np * 8 <= g.smem_optin as usize;
    let (name, smem) = if in_smem { ("page_select", np * 8) } else { ("page_select_global", 0) };
    let l = Launch::new((nkv as u32, ns as u32, 1), SELECT_THREADS).smem(smem);
    let ptrs = [
        kv.head_map.ptr(),
        meta.page_indptr.ptr(),
        seq_slot.ptr(),
        select_mask.ptr(),
        keys,
        out.selected.ptr(),
        out.counts.ptr(),
    ];
    let scalars = [np as u32, ptl as u32, out.selected.len as u32, out.counts.len as u32];
    g.launch("page_select", name, l, p, &ptrs, &scalars)
}
