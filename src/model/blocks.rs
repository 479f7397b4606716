//! Block-sparse prefill: the step metadata and the per-layer selection (docs/sparse-attention.md,
//! "Block-sparse prefill").
//!
//! A prefill step's rows are cut into query blocks of [`PREFILL_BLOCK_ROWS`] per sequence
//! (numbered across the step in sequence order, as the kernels number them). A block whose first
//! position is below `prefill_dense_below`, or whose tail starts at page 0 or 1 (nothing to
//! choose), attends densely (`BLOCK_DENSE`). For every other block and each retrieval head of a
//! layer, the block's candidate pages `1..tail` are ranked on one "virtual sequence" per block
//! whose page list is the sequence's pages `1..=tail` (the last entry, the tail's first page, is
//! never picked), by the `[sparse] prefill_estimate`:
//! - antidiagonal (default): `antidiagonal_score` (XAttention's antidiagonal softmax mass of each
//!   candidate, from the block's rows of the rotated q and the cached keys) then `page_top_k`;
//! - mean_bound: the Quest bound of the block's MEAN query (`mean_rows`) against the pages'
//!   min/max summaries, by `page_select` itself.
//!
//! The block then reads page 0, the chosen pages and its tail ([`BlockPages`]).
//!
//! Invariants: the dense blocks' counts are uploaded once as `BLOCK_DENSE` and never written
//! (their `select_mask` is 0); the sparse blocks' counts and lists are rewritten by every layer's
//! `page_select` for that layer's retrieval heads. Counts are indexed `block * n_ret + r`, so
//! layers with different retrieval-head counts get their own buffers (`lists`).

use std::collections::HashMap;

use crate::backend::*;
use crate::error::Result;
use crate::kv::KvCache;
use crate::model::batch::{AttnSettings, SeqStep};
use crate::model::pool::BufferPool;
use crate::model::step::StepMeta;
use crate::sparse::PrefillEstimate;

/// One step's block metadata on the device.
pub struct PrefillBlocks<B: Backend> {
    /// Query blocks in the step.
    pub n_blocks: usize,
    /// `[n_blocks + 1]` row ranges of the blocks (for `mean_rows`).
    row_indptr: B::Buffer,
    /// `[n_blocks][4]`: q row, rows, first position, sequence ([`BlockRows::info`]).
    info: B::Buffer,
    /// Host copies of `info` and `v_page_indptr` ([`BlockRows::host`]).
    host_info: Vec<u32>,
    host_indptr: Vec<u32>,
    estimate: PrefillEstimate,
    /// The virtual sequences of `page_select`: `[n_blocks + 1]` and the pages `1..=tail` of each
    /// sparse block (none for a dense one).
    v_page_indptr: B::Buffer,
    v_page_table: B::Buffer,
    /// `[n_blocks]`: the tokens of each virtual row's pages (its `kv_len` for `page_select`, which
    /// reads it only for selection in logical units, never asked for here: `sel_unit` 0).
    v_kv_len: B::Buffer,
    /// `[n_blocks]`: block b's list slot (b), and whether page_select runs for it (sparse).
    seq_slot: B::Buffer,
    select_mask: B::Buffer,
    /// Entries of all virtual rows (`v_page_indptr[n_blocks]`).
    entries: usize,
    /// Which blocks attend densely (their counts start and stay BLOCK_DENSE).
    dense: Vec<bool>,
    /// Longest virtual row, a power of two.
    max_pages: usize,
    k_pages: usize,
    lists: HashMap<usize, (B::Buffer, B::Buffer)>,
}

/// Per-sequence inputs: (first position of the step's rows, rows, the sequence's page list).
pub struct BlockSeq<'a> {
    pub first: usize,
    pub rows: usize,
    pub pages: &'a [u32],
}

/// A prefill step's block metadata when the settings ask for block-sparse prefill
/// (`attn.prefill_k_pages > 0`) and a block qualifies; None for decode steps. The caller decides
/// which layers use it (Llama: every layer of a model without a window; Gemma 3: its global layers).
pub fn step_blocks<B: Backend>(
    be: &B,
    pool: &BufferPool<B>,
    cache: &KvCache<B>,
    attn: &AttnSettings,
    seqs: &[SeqStep],
    decode: bool,
) -> Result<Option<PrefillBlocks<B>>> {
    if decode || attn.prefill_k_pages == 0 {
        return Ok(None);
    }
    let bs: Vec<BlockSeq> =
        seqs.iter().map(|s| BlockSeq { first: s.cache.len, rows: s.tokens.len(), pages: &s.cache.pages }).collect();
    let ps = cache.shape.page_size;
    let (k, below, est) = (attn.prefill_k_pages, attn.prefill_dense_below, attn.prefill_estimate);
    PrefillBlocks::build(be, pool, &bs, ps, (k, below, est))
}

impl<B: Backend> PrefillBlocks<B> {
    /// The step's blocks, or `None` when every block attends densely.
    pub fn build(
        be: &B,
        pool: &BufferPool<B>,
        seqs: &[BlockSeq],
        page_size: usize,
        (k_pages, dense_below, estimate): (usize, usize, PrefillEstimate),
    ) -> Result<Option<Self>> {
        let (mut rows, mut vin, mut vtab, mut mask, mut dense) = (vec![0u32], vec![0u32], vec![], vec![], vec![]);
        let mut info = vec![];
        let mut row0 = 0usize;
        for (si, s) in seqs.iter().enumerate() {
            for b0 in (0..s.rows).step_by(PREFILL_BLOCK_ROWS) {
                let first = s.first + b0;
                let tail = block_tail_page(first, page_size);
                let is_dense = first < dense_below || tail < 2;
                if !is_dense {
                    vtab.extend_from_slice(&s.pages[1..=tail]);
                }
                vin.push(vtab.len() as u32);
                mask.push(u32::from(!is_dense));
                dense.push(is_dense);
                rows.push((row0 + (b0 + PREFILL_BLOCK_ROWS).min(s.rows)) as u32);
                let n = PREFILL_BLOCK_ROWS.min(s.rows - b0);
                info.extend([row0 + b0, n, first, si].map(|x| x as u32));
            }
            row0 += s.rows;
        }
        if dense.iter().all(|&d| d) {
            return Ok(None);
        }
        let n_blocks = dense.len();
        let max_pages = vin.windows(2).map(|w| (w[1] - w[0]) as usize).max().unwrap_or(1).next_power_of_two();
        let slots: Vec<u32> = (0..n_blocks as u32).collect();
        let vlen: Vec<u32> = vin.windows(2).map(|w| (w[1] - w[0]) * page_size as u32).collect();
        let entries = vtab.len();
        if vtab.is_empty() {
            vtab.push(0);
        }
        Ok(Some(PrefillBlocks {
            n_blocks,
            row_indptr: pool.upload_u32(be, &rows)?,
            info: pool.upload_u32(be, &info)?,
            estimate,
            v_page_indptr: pool.upload_u32(be, &vin)?,
            host_info: info,
            host_indptr: vin,
            v_page_table: pool.upload_u32(be, &vtab)?,
            v_kv_len: pool.upload_u32(be, &vlen)?,
            seq_slot: pool.upload_u32(be, &slots)?,
            select_mask: pool.upload_u32(be, &mask)?,
            entries,
            dense,
            max_pages,
            k_pages,
            lists: HashMap::new(),
        }))
    }

    /// Select each sparse block's pages for one layer (`q` its rotated queries, `kv` its store)
    /// and return the lists for `prefill_attention` with the attention params to use.
    #[allow(clippy::too_many_arguments)]
    pub fn select<'s>(
        &'s mut self,
        be: &B,
        pool: &BufferPool<B>,
        m: &StepMeta<B>,
        ap: &AttentionParams,
        logical_page: usize,
        q: &B::Buffer,
        kv: LayerKv<B>,
    ) -> Result<(AttentionParams, BlockPages<'s, B>)> {
        let (nb, nret, k) = (self.n_blocks, ap.n_ret as usize, self.k_pages);
        // This layout's lists (made on first use) leave the map while the estimate writes them
        // (it reads the other fields).
        let (mut selected, mut counts) = match self.lists.remove(&nret) {
            Some(lists) => lists,
            None => {
                let init: Vec<u32> = self
                    .dense
                    .iter()
                    .flat_map(|&d| std::iter::repeat_n(if d { BLOCK_DENSE } else { 0 }, nret))
                    .collect();
                (be.alloc(DType::U32, (nb * nret * k).max(1))?, be.upload_u32(&init)?)
            }
        };
        let out = SelectedMut { selected: &mut selected, counts: &mut counts };
        let r = match self.estimate {
            PrefillEstimate::Antidiagonal => self.antidiagonal(be, pool, m, ap, q, kv, out),
            PrefillEstimate::MeanBound => self.mean_bound(be, pool, m, (ap, logical_page), q, kv, out),
        };
        self.lists.insert(nret, (selected, counts));
        r?;
        let (selected, counts) = &self.lists[&nret];
        Ok((AttentionParams { sel_stride: k as u32, sel_unit: 0, ..*ap }, BlockPages { selected, counts }))
    }

    /// `antidiagonal_score` over the step's blocks, then `page_top_k` into `out`.
    #[allow(clippy::too_many_arguments)]
    fn antidiagonal(
        &self,
        be: &B,
        pool: &BufferPool<B>,
        m: &StepMeta<B>,
        ap: &AttentionParams,
        q: &B::Buffer,
        kv: LayerKv<B>,
        out: SelectedMut<B>,
    ) -> Result<()> {
        let (nb, k) = (self.n_blocks, self.k_pages as u32);
        let mut scores = pool.take(be, DType::F32, (self.entries * ap.n_ret as usize).max(1))?;
        let rows = BlockRows {
            info: &self.info,
            page_indptr: &self.v_page_indptr,
            host: Some((&self.host_info, &self.host_indptr)),
        };
        let tp = PageTopKParams {
            num_seqs: nb as u32,
            n_ret: ap.n_ret,
            k_pages: k,
            sel_stride: k,
            max_seq_pages: self.max_pages as u32,
            ..Default::default()
        };
        let r = be
            .antidiagonal_score(&AntidiagonalParams::new(ap, nb), q, kv, &m.paged(), &rows, &mut scores)
            .and_then(|()| be.page_top_k(&tp, &scores, &self.v_page_indptr, &self.seq_slot, &self.select_mask, out));
        pool.put(scores);
        r
    }

    /// The blocks' mean queries (`mean_rows`), then `page_select` over the virtual sequences.
    #[allow(clippy::too_many_arguments)]
    fn mean_bound(
        &self,
        be: &B,
        pool: &BufferPool<B>,
        m: &StepMeta<B>,
        (ap, logical_page): (&AttentionParams, usize),
        q: &B::Buffer,
        kv: LayerKv<B>,
        out: SelectedMut<B>,
    ) -> Result<()> {
        let (nb, k) = (self.n_blocks, self.k_pages);
        let dim = (ap.n_heads * ap.head_dim) as usize;
        let mut qbar = pool.take(be, DType::F32, nb * dim)?;
        let mp = MeanRowsParams { n_out: nb as u32, dim: dim as u32, n_src: ap.n_tokens, _pad: 0 };
        let vap = AttentionParams { num_seqs: nb as u32, sel_stride: k as u32, sel_unit: 0, ..*ap };
        // The virtual rows list prefixes of their sequence's pages: the rows hint holds.
        let sp = PageSelectParams {
            rows_share_pages: 1,
            ..PageSelectParams::new(&vap, logical_page as u32, k, self.max_pages)
        };
        let vmeta = PagedMeta {
            page_indptr: &self.v_page_indptr,
            page_table: &self.v_page_table,
            kv_len: &self.v_kv_len,
            ring_table: &m.ring_table,
        };
        let r = be
            .mean_rows(&mp, q, &self.row_indptr, &mut qbar)
            .and_then(|()| be.page_select(&sp, &qbar, kv, &vmeta, &self.seq_slot, &self.select_mask, out));
        pool.put(qbar);
        r
    }

    /// Give the pooled buffers back (the per-layout lists are freed).
    pub fn recycle(self, pool: &BufferPool<B>) {
        [
            self.row_indptr,
            self.info,
            self.v_page_indptr,
            self.v_page_table,
            self.v_kv_len,
            self.seq_slot,
            self.select_mask,
        ]
        .into_iter()
        .for_each(|b| pool.put(b));
    }
}
