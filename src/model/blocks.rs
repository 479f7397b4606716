//! Block-sparse prefill: the step metadata and the per-layer selection (docs/sparse-attention.md,
//! "Block-sparse prefill").
//!
//! A prefill step's rows are cut into query blocks of [`PREFILL_BLOCK_ROWS`] per sequence
//! (numbered across the step in sequence order, as the kernels number them). A block whose first
//! position is below `prefill_dense_below`, or whose tail starts at page 0 or 1 (nothing to
//! choose), attends densely (`BLOCK_DENSE`). For every other block and each retrieval head of a
//! layer, `page_select` ranks the block's candidate pages `1..tail` by the Quest bound of the
//! block's MEAN query (`mean_rows` over its rows of the rotated q) against the pages' min/max
//! summaries — the decode selection, run on one "virtual sequence" per block whose page list is
//! the sequence's pages `1..=tail` (page_select never picks a row's last page, here the tail's
//! first) — and the block then reads page 0, the chosen pages and its tail ([`BlockPages`]).
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

/// One step's block metadata on the device.
pub struct PrefillBlocks<B: Backend> {
    /// Query blocks in the step.
    pub n_blocks: usize,
    /// `[n_blocks + 1]` row ranges of the blocks (for `mean_rows`).
    row_indptr: B::Buffer,
    /// The virtual sequences of `page_select`: `[n_blocks + 1]` and the pages `1..=tail` of each
    /// sparse block (none for a dense one).
    v_page_indptr: B::Buffer,
    v_page_table: B::Buffer,
    /// `[n_blocks]`: block b's list slot (b), and whether page_select runs for it (sparse).
    seq_slot: B::Buffer,
    select_mask: B::Buffer,
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
    PrefillBlocks::build(be, pool, &bs, ps, attn.prefill_k_pages, attn.prefill_dense_below)
}

impl<B: Backend> PrefillBlocks<B> {
    /// The step's blocks, or `None` when every block attends densely.
    pub fn build(
        be: &B,
        pool: &BufferPool<B>,
        seqs: &[BlockSeq],
        page_size: usize,
        k_pages: usize,
        dense_below: usize,
    ) -> Result<Option<Self>> {
        let (mut rows, mut vin, mut vtab, mut mask, mut dense) = (vec![0u32], vec![0u32], vec![], vec![], vec![]);
        let mut row0 = 0usize;
        for s in seqs {
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
            }
            row0 += s.rows;
        }
        if dense.iter().all(|&d| d) {
            return Ok(None);
        }
        let n_blocks = dense.len();
        let max_pages = vin.windows(2).map(|w| (w[1] - w[0]) as usize).max().unwrap_or(1).next_power_of_two();
        let slots: Vec<u32> = (0..n_blocks as u32).collect();
        if vtab.is_empty() {
            vtab.push(0);
        }
        Ok(Some(PrefillBlocks {
            n_blocks,
            row_indptr: pool.upload_u32(be, &rows)?,
            v_page_indptr: pool.upload_u32(be, &vin)?,
            v_page_table: pool.upload_u32(be, &vtab)?,
            seq_slot: pool.upload_u32(be, &slots)?,
            select_mask: pool.upload_u32(be, &mask)?,
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
        let dim = (ap.n_heads * ap.head_dim) as usize;
        let mut qbar = pool.take(be, DType::F32, nb * dim)?;
        let mp = MeanRowsParams { n_out: nb as u32, dim: dim as u32, n_src: ap.n_tokens, _pad: 0 };
        be.mean_rows(&mp, q, &self.row_indptr, &mut qbar)?;
        if !self.lists.contains_key(&nret) {
            let init: Vec<u32> =
                self.dense.iter().flat_map(|&d| std::iter::repeat_n(if d { BLOCK_DENSE } else { 0 }, nret)).collect();
            let counts = be.upload_u32(&init)?;
            let selected = be.alloc(DType::U32, (nb * nret * k).max(1))?;
            self.lists.insert(nret, (selected, counts));
        }
        let (selected, counts) = self.lists.get_mut(&nret).expect("inserted above");
        let vap = AttentionParams { num_seqs: nb as u32, sel_stride: k as u32, ..*ap };
        let sp = PageSelectParams::new(&vap, logical_page as u32, k, self.max_pages);
        let vmeta = PagedMeta {
            page_indptr: &self.v_page_indptr,
            page_table: &self.v_page_table,
            kv_len: &m.kv_len,
            ring_table: &m.ring_table,
        };
        let out = SelectedMut { selected, counts };
        let r = be.page_select(&sp, &qbar, kv, &vmeta, &self.seq_slot, &self.select_mask, out);
        pool.put(qbar);
        r?;
        let (selected, counts) = &self.lists[&nret];
        Ok((AttentionParams { sel_stride: k as u32, ..*ap }, BlockPages { selected, counts }))
    }

    /// Give the pooled buffers back (the per-layout lists are freed).
    pub fn recycle(self, pool: &BufferPool<B>) {
        [self.row_indptr, self.v_page_indptr, self.v_page_table, self.seq_slot, self.select_mask]
            .into_iter()
            .for_each(|b| pool.put(b));
    }
}
