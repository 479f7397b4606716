//! Recording of the KV-side ops: `rope_append_kv` and `page_select` (CPU reference:
//! `backend/cpu/kvops.rs`, which these match element for element).
//!
//! Layouts (docs/kv-cache.md): retrieval pool k/v `[page][n_ret][page_size][head_dim]`, summary
//! `[page][n_ret][page_size / logical_page][2][head_dim]` (min, max), streaming pool sk/sv
//! `[str_page][n_str][page_size][head_dim]`; all f32.
//!
//! `rope_append_kv` is two dispatches (three for packed KV: f16, bf16, int8, fp8):
//! 1. `rope_append_kv`: one thread per (token, head, rotation pair) rotates q and k and writes k/v
//!    to the retrieval pool (`slots`) or the streaming ring (`ring_slots`) per `head_map`. For a
//!    packed KV dtype it runs with an identity layout instead (page_size 1, every head a retrieval
//!    head, slot t for token t) into two f32 staging buffers `[n_tokens][n_kv_heads][head_dim]`,
//!    and `rope_append_kv_pack` (one workgroup per token and KV head) stores the rows into the
//!    real pools: 16-bit values rounded to nearest even, 8-bit rows quantized as src/backend/reference/kv_quant.rs
//!    defines (so the rotation is the same code for every dtype). 16-bit pools with head_dim % 4
//!    == 0 take `rope_append_kv16` instead, one pass: a thread per (token, head, two rotation
//!    pairs) rotates and stores two whole u32 words of k and of v (the same rounding,
//!    shaders/kv_round16.wgsl; the same rotation text, shaders/rope_sincos.wgsl);
//! 2. `rope_append_kv_summary`: one workgroup per token; the workgroup of the token that wrote the
//!    largest offset of a logical page in this call recomputes that page's min/max over its tokens.
//!    It runs after 1 (wgpu orders dispatches), since threads of one dispatch cannot order writes.
//!    A call of one token on 16-bit pools skips it: `rope_append_kv16` folds that token into its
//!    page's summary itself (the same values, bit for bit: its header says why).
//!
//! `page_select` is two dispatches:
//! 1. `page_select`: one to 64 threads per (page-table entry, retrieval head), one per query head of
//!    the group, score the page into a scratch key buffer owned by the backend
//!    (`WgpuBackend::scratch`, grown on demand);
//! 2. `page_select_topk`: one workgroup per (sequence row, retrieval head) radix-selects the k-th
//!    largest key and writes the picks in ascending page order. Any page count and any k work.
//!
//! Values that live on the device (slots, head_map entries, page ids, sequence slots) cannot be
//! checked here without a round trip; the shaders skip out-of-range ones instead of writing out of
//! bounds (the CPU reference reports them as errors).

use super::context::err;
use super::ops_basic::{grid, rows_grid};
use super::pipelines as pl;
use super::{Scratch, WgpuBackend, WgpuBuffer, need, need_kv};
use crate::backend::*;
use crate::error::Result;

fn u(x: u32) -> usize {
    x as usize
}

pub fn rope_append_kv(
    be: &WgpuBackend,
    p: &RopeAppendKvParams,
    qkv: &WgpuBuffer,
    m: &RopeAppendMeta<WgpuBackend>,
    q: &mut WgpuBuffer,
    kv: LayerKvMut<WgpuBackend>,
) -> Result<()> {
    check_rope(p, qkv, m, q, &kv)?;
    let (n, nh, nkv, hd) = (u(p.n_tokens), u(p.n_heads), u(p.n_kv_heads), u(p.head_dim));
    let (n_ret, kt) = (u(p.n_ret), kv.k.dtype);
    if n == 0 || hd == 0 {
        return Ok(());
    }
    let threads = n * (nh + nkv) * hd.div_ceil(2);
    let mut kv = kv;
    // f32 pools: a thread per (token, head, rotation pair); 16-bit pools with head_dim % 4 == 0:
    // one pass too, a thread per two pairs, rounded and stored as it rotates (rope_append_kv16),
    // which also folds a single token into the page summary.
    let kv16 = matches!(kt, DType::F16 | DType::BF16) && hd.is_multiple_of(4);
    if kt == DType::F32 {
        let binds = pl::rope_append_kv::Binds {
            qkv,
            positions: m.positions,
            slots: m.slots,
            ring_slots: m.ring_slots,
            inv_freq: m.inv_freq,
            head_map: kv.head_map,
            q,
            k: &mut *kv.k,
            v: &mut *kv.v,
            sk: &mut *kv.sk,
            sv: &mut *kv.sv,
        };
        pl::rope_append_kv::dispatch(be.gpu(), None, p, binds, grid(be, threads))?;
    } else if kv16 {
        let binds = pl::rope_append_kv16::Binds {
            qkv,
            positions: m.positions,
            slots: m.slots,
            ring_slots: m.ring_slots,
            inv_freq: m.inv_freq,
            head_map: kv.head_map,
            q,
            k: &mut *kv.k,
            v: &mut *kv.v,
            sk: &mut *kv.sk,
            sv: &mut *kv.sv,
            summary: &mut *kv.summary,
        };
        pl::rope_append_kv16::dispatch(be.gpu(), Some(kt), p, binds, grid(be, n * (nh + nkv) * hd / 4))?;
        if n == 1 {
            return Ok(());
        }
    } else {
        append_packed(be, p, qkv, m, q, &mut kv, threads)?;
    }
    if n_ret == 0 {
        return Ok(());
    }
    let binds = pl::rope_append_kv_summary::Binds { slots: m.slots, k_pool: kv.k, summary: kv.summary };
    pl::rope_append_kv_summary::dispatch(be.gpu(), Some(kt), p, binds, rows_grid(be, n))
}

/// `rope_append_kv`'s checks of its operands (shared by `matmul_rope_append_kv`, ops_fused.rs).
pub fn check_rope(
    p: &RopeAppendKvParams,
    qkv: &WgpuBuffer,
    m: &RopeAppendMeta<WgpuBackend>,
    q: &WgpuBuffer,
    kv: &LayerKvMut<WgpuBackend>,
) -> Result<()> {
    let (n, nh, nkv, hd, ps) = (u(p.n_tokens), u(p.n_heads), u(p.n_kv_heads), u(p.head_dim), u(p.page_size));
    let (n_ret, n_str, lp) = (u(p.n_ret), u(p.n_str), u(p.logical_page));
    if n_ret + n_str != nkv || lp == 0 || ps % lp != 0 {
        return Err(err("rope_append_kv: bad head split or logical page"));
    }
    need(qkv, DType::F32, n * (nh + 2 * nkv) * hd, "rope_append_kv qkv")?;
    need(m.positions, DType::U32, n, "rope_append_kv positions")?;
    need(m.slots, DType::U32, n, "rope_append_kv slots")?;
    need(m.ring_slots, DType::U32, n, "rope_append_kv ring_slots")?;
    need(m.inv_freq, DType::F32, hd / 2, "rope_append_kv inv_freq")?;
    need(kv.head_map, DType::U32, nkv, "rope_append_kv head_map")?;
    need(q, DType::F32, n * nh * hd, "rope_append_kv q")?;
    let (rrows, srows, kt) = (u(p.num_pages) * n_ret * ps, u(p.num_str_pages) * n_str * ps, kv.k.dtype);
    need_kv(kv.k, kt, rrows, hd, "k pool")?;
    need_kv(kv.v, kt, rrows, hd, "v pool")?;
    need_kv(kv.sk, kt, srows, hd, "streaming k pool")?;
    need_kv(kv.sv, kt, srows, hd, "streaming v pool")?;
    if kt != DType::F32 && (!hd.is_multiple_of(2) || (kt.is_kv8() && !ps.is_multiple_of(4))) {
        return Err(err("rope_append_kv: packed KV needs an even head_dim (8-bit: page_size % 4 == 0)"));
    }
    need(kv.summary, DType::F32, u(p.num_pages) * n_ret * (ps / lp) * 2 * hd, "summary")
}

/// Pass 1 for a packed KV dtype: rotate into f32 staging rows through the identity layout, then
/// `rope_append_kv_pack` stores them into the pools (see the module docs).
fn append_packed(
    be: &WgpuBackend,
    p: &RopeAppendKvParams,
    qkv: &WgpuBuffer,
    m: &RopeAppendMeta<WgpuBackend>,
    q: &mut WgpuBuffer,
    kv: &mut LayerKvMut<WgpuBackend>,
    threads: usize,
) -> Result<()> {
    let (n, nkv, hd, kt) = (u(p.n_tokens), u(p.n_kv_heads), u(p.head_dim), kv.k.dtype);
    // Scratch slots of their own, reused every call (no allocation, no zero-fill per layer).
    let mut staged_k = be.scratch_in(Scratch::StagedK, n * nkv * hd)?;
    let mut staged_v = be.scratch_in(Scratch::StagedV, n * nkv * hd)?;
    // Bound where the identity layout never writes (no streaming heads); two buffers, so no
    // writable binding aliases another.
    let (mut spare_k, mut spare_v) = (be.scratch_in(Scratch::SpareK, 1)?, be.scratch_in(Scratch::SpareV, 1)?);
    let ids = be.iota(n.max(nkv))?;
    let identity = RopeAppendKvParams {
        page_size: 1,
        num_pages: p.n_tokens,
        logical_page: 1,
        n_ret: p.n_kv_heads,
        n_str: 0,
        num_str_pages: 0,
        ..*p
    };
    let binds = pl::rope_append_kv::Binds {
        qkv,
        positions: m.positions,
        slots: &ids,
        ring_slots: &ids,
        inv_freq: m.inv_freq,
        head_map: &ids,
        q,
        k: &mut staged_k,
        v: &mut staged_v,
        sk: &mut spare_k,
        sv: &mut spare_v,
    };
    pl::rope_append_kv::dispatch(be.gpu(), None, &identity, binds, grid(be, threads))?;
    let binds = pl::rope_append_kv_pack::Binds {
        staged_k: &staged_k,
        staged_v: &staged_v,
        slots: m.slots,
        ring_slots: m.ring_slots,
        head_map: kv.head_map,
        k: &mut *kv.k,
        v: &mut *kv.v,
        sk: &mut *kv.sk,
        sv: &mut *kv.sv,
    };
    pl::rope_append_kv_pack::dispatch(be.gpu(), Some(kt), p, binds, rows_grid(be, n * nkv))
}

#[allow(clippy::too_many_arguments)]
pub fn page_select(
    be: &WgpuBackend,
    p: &PageSelectParams,
    q: &WgpuBuffer,
    kv: LayerKv<WgpuBackend>,
    m: &PagedMeta<WgpuBackend>,
    seq_slot: &WgpuBuffer,
    select_mask: &WgpuBuffer,
    out: SelectedMut<WgpuBackend>,
) -> Result<()> {
    let (ns, nh, nkv, hd, ps, lp) =
        (u(p.num_seqs), u(p.n_heads), u(p.n_kv_heads), u(p.head_dim), u(p.page_size), u(p.logical_page));
    let n_ret = u(p.n_ret);
    if lp == 0 || ps % lp != 0 || p.k_pages > p.sel_stride {
        return Err(err("page_select: bad logical page or k_pages > sel_stride"));
    }
    if nkv == 0 || n_ret > nkv || hd == 0 {
        return Err(err("page_select: bad head counts"));
    }
    if hd % 4 != 0 {
        return Err(err(format!("page_select: head_dim {hd} is not a multiple of 4 (wgpu reads 16-byte vectors)")));
    }
    need(q, DType::F32, ns * nh * hd, "page_select q")?;
    need(kv.summary, DType::F32, u(p.num_pages) * n_ret * (ps / lp) * 2 * hd, "page_select summary")?;
    need(kv.head_map, DType::U32, nkv, "page_select head_map")?;
    need(m.page_indptr, DType::U32, ns + 1, "page_select page_indptr")?;
    need(m.page_table, DType::U32, 0, "page_select page_table")?;
    need(m.kv_len, DType::U32, ns, "page_select kv_len")?;
    need(seq_slot, DType::U32, ns, "page_select seq_slot")?;
    need(select_mask, DType::U32, ns, "page_select select_mask")?;
    // Slots are on the device: the shader skips rows whose slot lies past these buffers.
    need(out.selected, DType::U32, 0, "page_select selected")?;
    need(out.counts, DType::U32, 0, "page_select counts")?;
    if ns == 0 || n_ret == 0 {
        return Ok(());
    }
    let norm = p.checked_rank().map_err(err)?;
    // Keys per selection unit: upp of them a page-table entry.
    let upp = ps / u(p.checked_unit().map_err(err)?);
    let entries = m.page_table.len * upp;
    // head_norm: one key per (unit entry, retrieval head, query head), combined in place.
    let width = if norm { nh / nkv.max(1) } else { 1 };
    if entries * n_ret * width > u32::MAX as usize {
        return Err(err("page_select: page table too large for 32-bit indexing"));
    }
    let mut keys = be.scratch(entries * n_ret * width)?;
    let binds = pl::page_select::Binds {
        q,
        summary: kv.summary,
        head_map: kv.head_map,
        page_indptr: m.page_indptr,
        page_table: m.page_table,
        kv_len: m.kv_len,
        select_mask,
        keys: &mut keys,
    };
    let per_wg = 256 / (nh / nkv).clamp(1, 64); // items per workgroup, as in the shader
    pl::page_select::dispatch(be.gpu(), None, p, binds, rows_grid(be, (entries * n_ret).div_ceil(per_wg)))?;
    if norm {
        let binds = pl::page_select_norm::Binds {
            head_map: kv.head_map,
            page_indptr: m.page_indptr,
            kv_len: m.kv_len,
            select_mask,
            keys: &mut keys,
        };
        pl::page_select_norm::dispatch(be.gpu(), None, p, binds, rows_grid(be, ns * n_ret))?;
    }
    let binds = pl::page_select_topk::Binds {
        keys: &keys,
        head_map: kv.head_map,
        page_indptr: m.page_indptr,
        kv_len: m.kv_len,
        seq_slot,
        select_mask,
        selected: out.selected,
        counts: out.counts,
    };
    pl::page_select_topk::dispatch(be.gpu(), None, p, binds, rows_grid(be, ns * n_ret))
}
