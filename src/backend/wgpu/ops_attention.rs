//! Recording of the attention ops: `prefill_attention` (shaders/prefill_attention.wgsl),
//! `sparse_decode_attention` (shaders/sparse_decode_attention.wgsl, then
//! shaders/sparse_decode_attention_merge.wgsl when split) and `lambda_mass`
//! (shaders/lambda_mass.wgsl). The shader headers describe layouts and workgroup mappings.
//!
//! Invariants: buffers are checked with `need` against the same element counts as the CPU
//! reference before anything is recorded; what lives only on the device (page tables, selections,
//! q_indptr) is bounds-checked in the shaders, which skip a key or row they cannot address
//! instead of reading or writing out of bounds. head_dim is at most [`MAX_HEAD_DIM`] (the
//! workgroup-memory tiles are sized for it).
//!
//! Prefill kernels: `prefill_attention_coop_d<64|128>` (cooperative matrices, [`coop_prefill`]
//! says when: 16-bit KV, head_dim 64 or 128, no block lists, an adapter with the tensor-core
//! kernels; `LSERVE_WGPU_PREFILL_COOP=0` turns it off), else the scalar `prefill_attention`.
//!
//! Decode kernels: `sparse_decode_attention_kv16` ([`kv16_decode`] says when: 16-bit KV, head_dim
//! 16/32/64/128, an adapter that binds 16 storage buffers; `LSERVE_WGPU_DECODE_KV16=0` turns it
//! off) binds both kinds' pools and takes both head kinds in one dispatch, its chunk loop
//! instantiated once per kind (shaders.rs), so it keeps the loads-back-to-back property below
//! without a pass per kind; else the general `sparse_decode_attention`, a pass per kind.
//!
//! Head kinds: each attention op records one pass per kind present, binding that kind's pool
//! (retrieval k/v, or streaming sk/sv with `n_ret = 0` in its params, which is how the shaders
//! tell the passes apart); a workgroup of the other kind's head returns at once. So no shader
//! branches to pick a pool, and its loads stay back to back (a branch between a load and its use
//! can serialise them on some drivers).
//!
//! Split-KV decode: the split count comes from an upper bound of the longest key list (the page
//! table's length for retrieval heads, the Lambda window for streaming heads) at
//! [`PAGES_PER_SPLIT`] pages a split, capped so the grid stays near [`target_workgroups`] and at
//! [`MAX_SPLITS`]; on the device a split takes at least one chunk (128 keys; 64 in the kv16
//! kernel), so short lists
//! leave the last splits empty (they report m = -inf, l = 0 and the merge skips them). The
//! partials scratch (4-word header + `[num_seqs][n_heads][n_splits][head_dim + 2]` f32) is cached
//! per thread for the latest device ([`scratch`]): grown on demand, never shrunk, shared by all
//! layers (wgpu orders the dispatches). With one split the kernel writes `out` directly and no
//! merge is recorded.

use super::context::err;
use super::ops_basic::rows_grid;
use super::pipelines as pl;
use super::{WgpuBackend, WgpuBuffer, need, need_kv};
use crate::backend::*;
use crate::error::Result;

/// Largest head_dim the attention shaders take.
const MAX_HEAD_DIM: usize = 256;
/// Query heads of one KV head handled by one decode workgroup (`GMAX` in the shader).
const DECODE_HEADS: usize = 8;
/// Pages of key list each decode split aims to cover.
const PAGES_PER_SPLIT: usize = 8;
/// Most splits per (sequence, KV head); the merge kernel takes up to 256.
const MAX_SPLITS: usize = 128;
/// Splitting stops once the decode grid has about this many workgroups: 1024, or
/// `LSERVE_WGPU_DECODE_WORKGROUPS` (a number from 64 to 65536) for measuring others on a GPU (a
/// batch of 8 sequences x 8 KV heads at the default gets 16 splits of a 4096-key list, two
/// 128-key chunks each; 2048 gives one chunk per workgroup).
fn target_workgroups() -> usize {
    static TARGET: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *TARGET.get_or_init(|| {
        std::env::var("LSERVE_WGPU_DECODE_WORKGROUPS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|n| (64..=65536).contains(n))
            .unwrap_or(1024)
    })
}

fn u(x: u32) -> usize {
    x as usize
}

/// Query rows per workgroup of `prefill_attention_coop` (`BR` there).
const COOP_TILE_ROWS: usize = 64;

/// Query rows per prefill tile (mirrors `tile_rows` in prefill_attention.wgsl).
fn tile_rows(head_dim: usize) -> usize {
    if head_dim <= 64 {
        32
    } else if head_dim <= 128 {
        16
    } else {
        8
    }
}

/// Workgroup memory of `prefill_attention_coop_d128` (the larger of the two: 44,592 bytes, the
/// shader header adds it up), rounded up: adapters with less take the scalar kernel.
const PREFILL_COOP_BYTES: u32 = 44 * 1024 + 512;

/// Whether 16-bit-KV prefill may take the cooperative-matrix kernel where it applies: yes unless
/// `LSERVE_WGPU_PREFILL_COOP=0` (for comparing the two kernels in one build).
fn prefill_coop_allowed() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("LSERVE_WGPU_PREFILL_COOP").as_deref() != Ok("0"))
}

/// The cooperative-matrix prefill kernel for this call, if it takes it: an adapter with the
/// cooperative-matrix kernels (`WgpuBackend::has_coop`) and the workgroup memory, f16 or bf16 KV,
/// head_dim 64 or 128, no block lists (block-sparse prefill stays on the scalar kernel).
fn coop_prefill(be: &WgpuBackend, p: &AttentionParams, kv: DType, blocks: bool) -> Option<&'static str> {
    let fits = be.gpu().limits.max_compute_workgroup_storage_size >= PREFILL_COOP_BYTES;
    if !prefill_coop_allowed() || !be.has_coop() || !fits || blocks || !matches!(kv, DType::F16 | DType::BF16) {
        return None;
    }
    match p.head_dim {
        128 => Some(pl::prefill_attention_coop_d128::OP),
        64 => Some(pl::prefill_attention_coop_d128::D64),
        _ => None,
    }
}

/// Checks shared by prefill and decode: head counts, geometry, pools and paged metadata.
fn check_common(p: &AttentionParams, kv: &LayerKv<WgpuBackend>, meta: &PagedMeta<WgpuBackend>, op: &str) -> Result<()> {
    let (ns, nkv, nh, hd, ps) = (u(p.num_seqs), u(p.n_kv_heads), u(p.n_heads), u(p.head_dim), u(p.page_size));
    let (n_ret, n_str) = (u(p.n_ret), u(p.n_str));
    if nkv == 0 || n_ret + n_str != nkv || !nh.is_multiple_of(nkv) {
        return Err(err(format!("{op}: bad head counts")));
    }
    if hd == 0 || hd > MAX_HEAD_DIM || ps == 0 {
        return Err(err(format!("{op}: head_dim {hd} (1..={MAX_HEAD_DIM}) or page_size {ps} unsupported")));
    }
    if n_str > 0 && (p.ring_tokens <= p.sink || !p.ring_tokens.is_multiple_of(p.page_size)) {
        return Err(err(format!("{op}: the streaming ring is smaller than its sink")));
    }
    let (rrows, srows) = (u(p.num_pages) * n_ret * ps, u(p.num_str_pages) * n_str * ps);
    let kt = kv.k.dtype;
    need_kv(kv.k, kt, rrows, hd, "k pool")?;
    need_kv(kv.v, kt, rrows, hd, "v pool")?;
    need_kv(kv.sk, kt, srows, hd, "streaming k pool")?;
    need_kv(kv.sv, kt, srows, hd, "streaming v pool")?;
    need(kv.head_map, DType::U32, nkv, "head_map")?;
    let ring_pages = if n_str > 0 { u(p.ring_tokens) / ps } else { 0 };
    need(meta.page_indptr, DType::U32, ns + 1, "attention page_indptr")?;
    need(meta.page_table, DType::U32, 0, "attention page_table")?;
    need(meta.kv_len, DType::U32, ns, "attention kv_len")?;
    need(meta.ring_table, DType::U32, ns * ring_pages, "attention ring_table")
}

#[allow(clippy::too_many_arguments)]
pub fn prefill_attention(
    be: &WgpuBackend,
    p: &AttentionParams,
    q: &WgpuBuffer,
    q_indptr: &WgpuBuffer,
    kv: LayerKv<WgpuBackend>,
    meta: &PagedMeta<WgpuBackend>,
    blocks: Option<&BlockPages<WgpuBackend>>,
    out: &mut WgpuBuffer,
) -> Result<()> {
    check_common(p, &kv, meta, "prefill_attention")?;
    let (n, ns, nh, hd, nkv) = (u(p.n_tokens), u(p.num_seqs), u(p.n_heads), u(p.head_dim), u(p.n_kv_heads));
    need(q, DType::F32, n * nh * hd, "prefill_attention q")?;
    need(q_indptr, DType::U32, ns + 1, "prefill_attention q_indptr")?;
    need(out, DType::F32, n * nh * hd, "prefill_attention out")?;
    if n == 0 || ns == 0 {
        return Ok(());
    }
    // Block lists: the shader tells "none" by sel_stride 0 (it reads sel_stride for nothing else).
    let (blk_sel, blk_cnt, stride) = match blocks {
        Some(b) => {
            if p.window != 0 || p.sel_stride == 0 {
                return Err(err("prefill_attention: block-sparse prefill needs window 0 and sel_stride > 0"));
            }
            need(b.counts, DType::U32, 1, "prefill_attention block counts")?;
            need(b.selected, DType::U32, 1, "prefill_attention block selected")?;
            (b.selected, b.counts, p.sel_stride)
        }
        None => (q_indptr, q_indptr, 0),
    };
    if let Some(op) = coop_prefill(be, p, kv.k.dtype, blocks.is_some()) {
        // 64-row tiles, never straddling sequences: at most one partial tile per sequence.
        let (x, y, _) = rows_grid(be, (n * (nh / nkv)).div_ceil(COOP_TILE_ROWS) + ns);
        for (pp, k_pool, v_pool) in passes(p, &kv) {
            let binds = pl::prefill_attention_coop_d128::Binds {
                q,
                q_indptr,
                k_pool,
                v_pool,
                head_map: kv.head_map,
                page_indptr: meta.page_indptr,
                page_table: meta.page_table,
                kv_len: meta.kv_len,
                ring_table: meta.ring_table,
                out: &mut *out,
            };
            let groups = (x, y, nkv as u32);
            pl::prefill_attention_coop_d128::dispatch_variant(be.gpu(), op, Some(kv.k.dtype), &pp, binds, groups)?;
        }
        return Ok(());
    }
    // Tiles never straddle sequences: at most one partial tile per sequence.
    let tiles = (n * (nh / nkv)).div_ceil(tile_rows(hd)) + ns;
    let (x, y, _) = rows_grid(be, tiles);
    for (mut pp, k_pool, v_pool) in passes(p, &kv) {
        pp.sel_stride = stride;
        let binds = pl::prefill_attention::Binds {
            q,
            q_indptr,
            k_pool,
            v_pool,
            head_map: kv.head_map,
            page_indptr: meta.page_indptr,
            page_table: meta.page_table,
            kv_len: meta.kv_len,
            ring_table: meta.ring_table,
            out: &mut *out,
            blk_sel,
            blk_cnt,
        };
        pl::prefill_attention::dispatch(be.gpu(), Some(kv.k.dtype), &pp, binds, (x, y, nkv as u32))?;
    }
    Ok(())
}

/// One pass per head kind present: (params, K pool, V pool). The streaming pass is recorded with
/// `n_ret = 0`, which is how the shaders tell the passes apart.
fn passes<'a>(
    p: &AttentionParams,
    kv: &LayerKv<'a, WgpuBackend>,
) -> Vec<(AttentionParams, &'a WgpuBuffer, &'a WgpuBuffer)> {
    let mut out = vec![];
    if p.n_ret > 0 {
        out.push((*p, kv.k, kv.v));
    }
    if p.n_str > 0 {
        out.push((AttentionParams { n_ret: 0, ..*p }, kv.sk, kv.sv));
    }
    out
}

/// Splits per (sequence, KV head) of a decode step (see the module docs).
fn decode_splits(p: &AttentionParams, page_table_len: usize, head_chunks: usize) -> usize {
    let ps = u(p.page_size);
    let ret = if p.n_ret > 0 { page_table_len } else { 0 };
    let strm = if p.n_str > 0 { u(p.sink + p.local).div_ceil(ps) + 1 } else { 0 };
    let by_len = ret.max(strm).div_ceil(PAGES_PER_SPLIT);
    let by_grid = target_workgroups().div_ceil(u(p.num_seqs) * u(p.n_kv_heads) * head_chunks);
    by_len.min(by_grid).clamp(1, MAX_SPLITS)
}

/// Whether `sparse_decode_attention_kv16` may run where it applies: yes unless
/// `LSERVE_WGPU_DECODE_KV16=0` (for comparing the two kernels in one build).
fn kv16_allowed() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("LSERVE_WGPU_DECODE_KV16").as_deref() != Ok("0"))
}

/// Storage buffers `sparse_decode_attention_kv16` binds.
const KV16_BUFFERS: u32 = 16;

/// Whether this decode can take `sparse_decode_attention_kv16`: 16-bit pools, head_dim 16, 32,
/// 64 or 128 (whole 16-byte words a half row, a power of two of them), an adapter that binds its
/// 16 storage buffers.
fn kv16_decode(be: &WgpuBackend, p: &AttentionParams, kv: DType) -> bool {
    matches!(kv, DType::F16 | DType::BF16)
        && matches!(p.head_dim, 16 | 32 | 64 | 128)
        && be.gpu().limits.max_storage_buffers_per_shader_stage >= KV16_BUFFERS
}

/// What a test may force in `decode`: the split count, the kernel (`Some(true)`:
/// `sparse_decode_attention_kv16` where it applies; `None`: [`kv16_allowed`]).
#[derive(Clone, Copy, Default)]
struct DecodeForce {
    splits: Option<usize>,
    kv16: Option<bool>,
}

pub fn sparse_decode_attention(
    be: &WgpuBackend,
    p: &AttentionParams,
    q: &WgpuBuffer,
    kv: LayerKv<WgpuBackend>,
    meta: &PagedMeta<WgpuBackend>,
    pages: &HeadPages<WgpuBackend>,
    out: &mut WgpuBuffer,
) -> Result<()> {
    p.check_unit().map_err(err)?;
    decode(be, p, q, kv, meta, pages, out, DecodeForce::default())
}

#[allow(clippy::too_many_arguments)]
fn decode(
    be: &WgpuBackend,
    p: &AttentionParams,
    q: &WgpuBuffer,
    kv: LayerKv<WgpuBackend>,
    meta: &PagedMeta<WgpuBackend>,
    pages: &HeadPages<WgpuBackend>,
    out: &mut WgpuBuffer,
    force: DecodeForce,
) -> Result<()> {
    check_common(p, &kv, meta, "sparse_decode_attention")?;
    let (ns, nh, hd, nkv) = (u(p.num_seqs), u(p.n_heads), u(p.head_dim), u(p.n_kv_heads));
    if hd % 4 != 0 {
        return Err(err(format!(
            "sparse_decode_attention: head_dim {hd} is not a multiple of 4 (wgpu reads K and V 4 values a load)"
        )));
    }
    need(q, DType::F32, ns * nh * hd, "sparse_decode_attention q")?;
    // An X8 out (one sequence's row as x8 digits, Caps::act_x8_dtypes) is written by the merge,
    // which then always runs.
    let x8 = out.dtype == DType::X8;
    if x8 && (ns != 1 || hd % 32 != 0) {
        return Err(err(format!(
            "sparse_decode_attention: an X8 out is one sequence with head_dim a multiple of 32, not {ns} x {nh} x {hd}"
        )));
    }
    if x8 {
        super::ops_basic::need_act(be, out, 1, nh * hd, "sparse_decode_attention out")?;
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
    let kv16 = force.kv16.unwrap_or_else(kv16_allowed) && kv16_decode(be, p, kv.k.dtype);
    let head_chunks = (nh / nkv).div_ceil(if kv16 { super::shaders::kv16_heads() } else { DECODE_HEADS });
    let splits =
        force.splits.unwrap_or_else(|| decode_splits(p, meta.page_table.len, head_chunks)).clamp(1, MAX_SPLITS);
    let splits = if x8 { splits.max(2) } else { splits };
    let mut part = be.scratch(if splits > 1 { 4 + ns * nh * splits * (hd + 2) } else { 1 })?;
    let groups = (splits as u32, (nkv * head_chunks) as u32, ns as u32);
    if kv16 {
        let binds = pl::sparse_decode_attention_kv16::Binds {
            q,
            k_pool: kv.k,
            v_pool: kv.v,
            sk_pool: kv.sk,
            sv_pool: kv.sv,
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
            part: &mut part,
        };
        pl::sparse_decode_attention_kv16::dispatch(be.gpu(), Some(kv.k.dtype), p, binds, groups)?;
    } else {
        decode_passes(be, p, q, &kv, meta, pages, (&mut *out, &mut part), groups)?;
    }
    if splits > 1 {
        let binds = pl::sparse_decode_attention_merge::Binds { part: &part, out };
        let op = if x8 { pl::sparse_decode_attention_merge::X8 } else { pl::sparse_decode_attention_merge::OP };
        pl::sparse_decode_attention_merge::dispatch_variant(be.gpu(), op, None, p, binds, rows_grid(be, ns * nh))?;
    }
    Ok(())
}

/// The general decode kernel: one pass per head kind present (see the module docs).
#[allow(clippy::too_many_arguments)]
fn decode_passes(
    be: &WgpuBackend,
    p: &AttentionParams,
    q: &WgpuBuffer,
    kv: &LayerKv<WgpuBackend>,
    meta: &PagedMeta<WgpuBackend>,
    pages: &HeadPages<WgpuBackend>,
    (out, part): (&mut WgpuBuffer, &mut WgpuBuffer),
    groups: (u32, u32, u32),
) -> Result<()> {
    for (pp, k_pool, v_pool) in passes(p, kv) {
        let binds = pl::sparse_decode_attention::Binds {
            q,
            k_pool,
            v_pool,
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
            part: &mut *part,
        };
        pl::sparse_decode_attention::dispatch(be.gpu(), Some(kv.k.dtype), &pp, binds, groups)?;
    }
    Ok(())
}

pub fn lambda_mass(
    be: &WgpuBackend,
    p: &LambdaMassParams,
    q: &WgpuBuffer,
    kv: LayerKv<WgpuBackend>,
    meta: &PagedMeta<WgpuBackend>,
    out: &mut WgpuBuffer,
) -> Result<()> {
    let (n, nh, nkv, hd, ps) = (u(p.n_tokens), u(p.n_heads), u(p.n_kv_heads), u(p.head_dim), u(p.page_size));
    if nkv == 0 || !nh.is_multiple_of(nkv) {
        return Err(err("lambda_mass: bad head counts"));
    }
    if hd == 0 || hd > MAX_HEAD_DIM || ps == 0 {
        return Err(err(format!("lambda_mass: head_dim {hd} (1..={MAX_HEAD_DIM}) or page_size {ps} unsupported")));
    }
    let (rows, kt) = (u(p.num_pages) * nkv * ps, kv.k.dtype);
    need_kv(kv.k, kt, rows, hd, "k pool")?;
    need_kv(kv.v, kt, rows, hd, "v pool")?;
    need_kv(kv.sk, kt, 0, hd, "streaming k pool")?;
    need_kv(kv.sv, kt, 0, hd, "streaming v pool")?;
    need(kv.head_map, DType::U32, nkv, "head_map")?;
    need(meta.page_indptr, DType::U32, 2, "lambda_mass page_indptr")?;
    need(meta.page_table, DType::U32, 0, "lambda_mass page_table")?;
    need(meta.kv_len, DType::U32, 1, "lambda_mass kv_len")?;
    need(meta.ring_table, DType::U32, 0, "lambda_mass ring_table")?;
    need(q, DType::F32, n * nh * hd, "lambda_mass q")?;
    need(out, DType::F32, n * nh, "lambda_mass out")?;
    let binds = pl::lambda_mass::Binds {
        q,
        k_pool: kv.k,
        head_map: kv.head_map,
        page_indptr: meta.page_indptr,
        page_table: meta.page_table,
        kv_len: meta.kv_len,
        out,
    };
    pl::lambda_mass::dispatch(be.gpu(), Some(kt), p, binds, rows_grid(be, n * nh))
}

#[cfg(test)]
mod tests {
    //! The attention ops against the CPU reference on pools filled with the same random data
    //! (independent of `rope_append_kv`; tests/backend_parity.rs covers the chained path): head
    //! dims 16..256, GQA groups (also above one decode workgroup's 8 heads), several sequences,
    //! windows, streaming heads, one and several decode splits (also forced: one split of a long
    //! list, splits of several chunks), both decode kernels.
    use super::*;
    use crate::backend::cpu::{CpuBackend, CpuBuffer};

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u32 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (self.0 >> 33) as u32
        }
        fn vec(&mut self, n: usize) -> Vec<f32> {
            (0..n).map(|_| self.next() as f32 / (1u64 << 30) as f32 - 1.0).collect()
        }
        fn perm(&mut self, n: usize) -> Vec<u32> {
            let mut v: Vec<u32> = (0..n as u32).collect();
            (1..n).rev().for_each(|i| v.swap(i, self.next() as usize % (i + 1)));
            v
        }
    }

    fn gpu() -> Option<WgpuBackend> {
        match WgpuBackend::new(None) {
            Ok(b) => Some(b),
            Err(e) if std::env::var("LSERVE_REQUIRE_WGPU").is_ok_and(|v| v == "1") => panic!("wgpu required: {e}"),
            Err(_) => None,
        }
    }

    /// Both backends, and uploads of the same data to each.
    struct Pair(WgpuBackend, CpuBackend);
    impl Pair {
        fn f32s(&self, x: &[f32]) -> (WgpuBuffer, CpuBuffer) {
            (self.0.upload_f32(DType::F32, x.to_vec()).unwrap(), self.1.upload_f32(DType::F32, x.to_vec()).unwrap())
        }
        /// x stored as `kv` on the GPU, and the values it holds there (rounded) as f32 on the CPU.
        fn pool(&self, kv: DType, x: Vec<f32>) -> (WgpuBuffer, CpuBuffer) {
            let n = x.len();
            let g = self.0.upload_f32(kv, x).unwrap();
            let held = self.0.download_f32(&g, 0, n).unwrap();
            (g, self.1.upload_f32(DType::F32, held).unwrap())
        }
        fn u32s(&self, x: &[u32]) -> (WgpuBuffer, CpuBuffer) {
            (self.0.upload_u32(x).unwrap(), self.1.upload_u32(x).unwrap())
        }
        fn check(&self, name: &str, out: &(WgpuBuffer, CpuBuffer)) {
            let (got, want) = (
                self.0.download_f32(&out.0, 0, out.0.len).unwrap(),
                self.1.download_f32(&out.1, 0, out.0.len).unwrap(),
            );
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!((g - w).abs() / w.abs().max(1.0) <= 2e-4, "{name}[{i}]: got {g}, want {w}");
            }
        }
    }

    /// One layer's shape: head_dim, query heads per KV head, which KV heads stream, the
    /// sequences' lengths, the window, the KV dtype of the GPU pools.
    struct Shape<'a> {
        hd: usize,
        group: usize,
        streaming: &'a [bool],
        lens: &'a [u32],
        window: u32,
        kv: DType,
    }

    /// Params and device state of one layer: pools k, v, sk, sv (of `s.kv` on the GPU), then
    /// head_map, page_indptr, page_table, kv_len, ring_table; sequences own shuffled pages and
    /// rings.
    fn layer(t: &Pair, rng: &mut Rng, s: &Shape) -> (AttentionParams, Vec<(WgpuBuffer, CpuBuffer)>, Vec<u32>) {
        let Shape { hd, group, streaming, lens, window, kv } = *s;
        let (ps, num_pages, ring_tokens, nkv) = (16usize, 48usize, 64u32, streaming.len());
        let n_str = streaming.iter().filter(|&&s| s).count();
        let head_map = crate::backend::reference::kv_layout::head_map(streaming);
        let perm = rng.perm(num_pages);
        let (mut indptr, mut table) = (vec![0u32], vec![]);
        for &l in lens {
            table.extend_from_slice(&perm[table.len()..table.len() + (l as usize).div_ceil(ps)]);
            indptr.push(table.len() as u32);
        }
        let num_str_pages = lens.len() * ring_tokens as usize / ps;
        let p = AttentionParams {
            num_seqs: lens.len() as u32,
            n_heads: (nkv * group) as u32,
            n_kv_heads: nkv as u32,
            head_dim: hd as u32,
            page_size: ps as u32,
            num_pages: num_pages as u32,
            scale: 2.8 / (hd as f32).sqrt(),
            window,
            sink: 4,
            local: 7,
            ring_tokens,
            n_ret: (nkv - n_str) as u32,
            n_str: n_str as u32,
            num_str_pages: num_str_pages as u32,
            sel_stride: 6,
            ..Default::default()
        };
        let (rlen, slen) = ((num_pages * (nkv - n_str) * ps * hd).max(1), (num_str_pages * n_str * ps * hd).max(1));
        let mut bufs: Vec<_> = [rlen, rlen, slen, slen].iter().map(|&n| t.pool(kv, rng.vec(n))).collect();
        for v in [head_map, indptr, table.clone(), lens.to_vec(), rng.perm(num_str_pages)] {
            bufs.push(t.u32s(&v));
        }
        (p, bufs, table)
    }

    type Views<'a, B> = (LayerKv<'a, B>, PagedMeta<'a, B>);
    fn views(b: &[(WgpuBuffer, CpuBuffer)]) -> (Views<'_, WgpuBackend>, Views<'_, CpuBackend>) {
        (
            (
                LayerKv { k: &b[0].0, v: &b[1].0, summary: &b[0].0, sk: &b[2].0, sv: &b[3].0, head_map: &b[4].0 },
                PagedMeta { page_indptr: &b[5].0, page_table: &b[6].0, kv_len: &b[7].0, ring_table: &b[8].0 },
            ),
            (
                LayerKv { k: &b[0].1, v: &b[1].1, summary: &b[0].1, sk: &b[2].1, sv: &b[3].1, head_map: &b[4].1 },
                PagedMeta { page_indptr: &b[5].1, page_table: &b[6].1, kv_len: &b[7].1, ring_table: &b[8].1 },
            ),
        )
    }

    #[test]
    fn prefill_matches_cpu() {
        let Some(g) = gpu() else { return };
        let (t, mut rng) = (Pair(g, CpuBackend::new()), Rng(7));
        for (hd, group, window, streaming) in [
            (16, 2, 0, vec![false, true, false]),
            (64, 3, 9, vec![true, false, true]),
            (128, 2, 0, vec![false, true]),
            (96, 1, 0, vec![true, false]),
            (256, 2, 20, vec![false, true]),
            (32, 10, 0, vec![false, true]),
        ] {
            // Three sequences: a second chunk, a whole prompt, one token.
            let shape = Shape { hd, group, streaming: &streaming, lens: &[50, 30, 1], window, kv: DType::F32 };
            let (mut p, b, _) = layer(&t, &mut rng, &shape);
            p.n_tokens = 44;
            let (q, qi) = (t.f32s(&rng.vec(44 * p.n_heads as usize * hd)), t.u32s(&[0, 13, 43, 44]));
            let mut out = t.f32s(&vec![f32::NAN; q.0.len]);
            let ((kg, mg), (kc, mc)) = views(&b);
            t.0.prefill_attention(&p, &q.0, &qi.0, kg, &mg, None, &mut out.0).unwrap();
            t.1.prefill_attention(&p, &q.1, &qi.1, kc, &mc, None, &mut out.1).unwrap();
            t.check(&format!("prefill hd {hd} group {group}"), &out);
        }
    }

    #[test]
    fn decode_matches_cpu() {
        let Some(g) = gpu() else { return };
        let (t, mut rng) = (Pair(g, CpuBackend::new()), Rng(11));
        // 16-bit pools: K read 8 values per 16-byte load (head_dim % 8 == 0), or half words
        // (head_dim % 8 == 4: 20, 36).
        for (hd, group, window, streaming, lens, kv) in [
            (16, 2, 0, vec![false, true, false], vec![151, 40], DType::F32),
            (128, 4, 0, vec![false, true], vec![151, 40], DType::F32),
            (64, 10, 30, vec![false, true], vec![100], DType::F32),
            (256, 1, 0, vec![true, false], vec![40], DType::F32),
            (32, 3, 0, vec![false, false], vec![700], DType::F32),
            (20, 2, 0, vec![false, true], vec![151, 40], DType::F32),
            (128, 4, 0, vec![false, true], vec![151, 40], DType::F16),
            (36, 3, 0, vec![false, true], vec![300, 17], DType::F16),
            (72, 2, 0, vec![true, false], vec![151], DType::BF16),
            (20, 5, 0, vec![false, false], vec![200], DType::BF16),
            // sparse_decode_attention_kv16 as well (16-bit pools, head_dim 16/32/64/128): heads
            // 4-7 of a group (5, 8), two head chunks (10), a window.
            (16, 2, 0, vec![false, true, false], vec![151, 40], DType::F16),
            (32, 5, 30, vec![false, true], vec![300, 17], DType::BF16),
            (64, 10, 0, vec![true, false], vec![700], DType::F16),
            (128, 8, 0, vec![false, true], vec![151, 40], DType::BF16),
        ] {
            let shape = Shape { hd, group, streaming: &streaming, lens: &lens, window, kv };
            let (p, b, table) = layer(&t, &mut rng, &shape);
            let (ns, n_ret) = (lens.len(), p.n_ret as usize);
            let q = t.f32s(&rng.vec(ns * p.n_heads as usize * hd));
            // Slots reversed; selections: 4 ascending random pages, some at or above the tail.
            let slots: Vec<u32> = (0..ns as u32).rev().collect();
            let (mut selected, mut counts) = (vec![0u32; ns * n_ret * 6], vec![0u32; ns * n_ret]);
            for (s, &slot) in slots.iter().enumerate() {
                let np = table.len().min((lens[s] as usize).div_ceil(16));
                for r in 0..n_ret {
                    let mut pick = rng.perm(np)[..np.min(4)].to_vec();
                    pick.sort();
                    let at = slot as usize * n_ret + r;
                    selected[at * 6..at * 6 + pick.len()].copy_from_slice(&pick);
                    counts[at] = pick.len() as u32;
                }
            }
            let (sel, cnt, sl) = (t.u32s(&selected), t.u32s(&counts), t.u32s(&slots));
            for tail in [0u32, 3, 1000] {
                let tl = t.u32s(&vec![tail; ns]);
                let hg = HeadPages { selected: &sel.0, counts: &cnt.0, seq_slot: &sl.0, tail_start: &tl.0 };
                let hc = HeadPages { selected: &sel.1, counts: &cnt.1, seq_slot: &sl.1, tail_start: &tl.1 };
                // The op's own split count, then one split and two (several chunks each).
                // Both kernels where the kv16 one applies.
                let kernels: &[bool] = if kv16_decode(&t.0, &p, kv) { &[false, true] } else { &[false] };
                for (&kv16, splits) in kernels.iter().flat_map(|k| [None, Some(1), Some(2)].map(|s| (k, s))) {
                    let mut out = t.f32s(&vec![f32::NAN; q.0.len]);
                    let ((kg, mg), (kc, mc)) = views(&b);
                    let force = DecodeForce { splits, kv16: Some(kv16) };
                    decode(&t.0, &p, &q.0, kg, &mg, &hg, &mut out.0, force).unwrap();
                    t.1.sparse_decode_attention(&p, &q.1, kc, &mc, &hc, &mut out.1).unwrap();
                    let name =
                        format!("decode hd {hd} group {group} tail {tail} kv {kv:?} splits {splits:?} kv16 {kv16}");
                    t.check(&name, &out);
                }
            }
        }
    }

    #[test]
    fn lambda_mass_matches_cpu() {
        let Some(g) = gpu() else { return };
        let (t, mut rng) = (Pair(g, CpuBackend::new()), Rng(5));
        for (hd, group, len, n) in [(16, 2, 85u32, 25u32), (128, 3, 300, 7), (64, 1, 5, 5)] {
            let shape = Shape { hd, group, streaming: &[false, false, false], lens: &[len], window: 0, kv: DType::F32 };
            let (ap, b, _) = layer(&t, &mut rng, &shape);
            let p = LambdaMassParams {
                n_tokens: n,
                n_heads: ap.n_heads,
                n_kv_heads: ap.n_kv_heads,
                head_dim: ap.head_dim,
                page_size: ap.page_size,
                num_pages: ap.num_pages,
                scale: ap.scale,
                sink: 4,
                local: 10,
                ..Default::default()
            };
            let q = t.f32s(&rng.vec((n * p.n_heads) as usize * hd));
            let mut out = t.f32s(&vec![f32::NAN; (n * p.n_heads) as usize]);
            let ((kg, mg), (kc, mc)) = views(&b);
            t.0.lambda_mass(&p, &q.0, kg, &mg, &mut out.0).unwrap();
            t.1.lambda_mass(&p, &q.1, kc, &mc, &mut out.1).unwrap();
            t.check(&format!("lambda_mass hd {hd}"), &out);
        }
    }
}
