//! Per-step device metadata, built on the host from the sequences' page tables and sparse plans,
//! uploaded once per step and shared by every layer: token ids, positions, retrieval and ring
//! slots, CSR page tables, ring tables, selection slots, masks and tails, and which rows need
//! logits. Also the op parameter structs derived from it and the cache geometry.

use crate::backend::*;
use crate::error::{Error, Result};
use crate::kv::KvCache;
use crate::model::batch::{AttnSettings, Logits, SeqStep};
use crate::model::config::ModelConfig;
use crate::model::pool::BufferPool;

pub struct StepMeta<B: Backend> {
    pub ids: B::Buffer,
    pub positions: B::Buffer,
    pub slots: B::Buffer,
    pub ring_slots: B::Buffer,
    pub inv_freq: B::Buffer,
    pub q_indptr: B::Buffer,
    pub page_indptr: B::Buffer,
    pub page_table: B::Buffer,
    pub kv_len: B::Buffer,
    pub ring_table: B::Buffer,
    pub seq_slot: B::Buffer,
    pub select_mask: B::Buffer,
    pub tail_start: B::Buffer,
    pub zeros: B::Buffer,
    pub logit_rows: B::Buffer,
    pub n_tokens: usize,
    pub n_logits: usize,
    pub num_seqs: usize,
    /// The most pages one sequence of the step holds, rounded up to a power of two.
    pub max_seq_pages: usize,
    pub n_heads: usize,
    pub decode: bool,
    pub any_select: bool,
}

#[derive(Default)]
struct Host {
    ids: Vec<u32>,
    positions: Vec<u32>,
    slots: Vec<u32>,
    ring_slots: Vec<u32>,
    logit_rows: Vec<u32>,
    q_indptr: Vec<u32>,
    page_indptr: Vec<u32>,
    page_table: Vec<u32>,
    kv_len: Vec<u32>,
    ring_table: Vec<u32>,
    seq_slot: Vec<u32>,
    select_mask: Vec<u32>,
    tail_start: Vec<u32>,
}

impl<B: Backend> StepMeta<B> {
    pub fn build(
        be: &B,
        pool: &BufferPool<B>,
        cache: &KvCache<B>,
        seqs: &[SeqStep],
        cfg: &ModelConfig,
        n_heads: usize,
        inv_freq: Vec<f32>,
    ) -> Result<Self> {
        let ps = cache.shape.page_size;
        let mut h = Host { q_indptr: vec![0], page_indptr: vec![0], ..Host::default() };
        let ring_pages = if cache.shape.has_rings() { cache.shape.ring_pages() } else { 0 };
        for s in seqs {
            let (start, n) = (s.cache.len, s.tokens.len());
            if n == 0 || (start + n).div_ceil(ps) > s.cache.pages.len() {
                return Err(Error::InvalidArgument("a step sequence is empty or lacks reserved pages".into()));
            }
            if start + n > cfg.context_len() {
                return Err(Error::PromptTooLong { tokens: start + n, context: cfg.context_len() });
            }
            if s.cache.ring.len() != ring_pages || !s.cache.admitted {
                return Err(Error::InvalidArgument("a step sequence was not admitted to the cache".into()));
            }
            let row0 = h.ids.len() as u32;
            h.ids.extend_from_slice(s.tokens);
            h.positions.extend((start..start + n).map(|p| p as u32));
            h.slots.extend(cache.slots(s.cache, start, n));
            h.ring_slots.extend(cache.ring_slots(s.cache, start, n));
            match s.logits {
                Logits::None => {}
                Logits::Last => h.logit_rows.push(row0 + n as u32 - 1),
                Logits::All => h.logit_rows.extend(row0..row0 + n as u32),
            }
            h.q_indptr.push(h.ids.len() as u32);
            h.page_table.extend_from_slice(&s.cache.pages[..(start + n).div_ceil(ps)]);
            h.page_indptr.push(h.page_table.len() as u32);
            h.kv_len.push((start + n) as u32);
            h.ring_table.extend_from_slice(&s.cache.ring);
            h.seq_slot.push(s.cache.slot);
            h.select_mask.push(s.plan.select as u32);
            h.tail_start.push(s.plan.tail_start);
        }
        if let Some(bad) = h.ids.iter().find(|&&t| t as usize >= cfg.vocab_size) {
            return Err(Error::InvalidArgument(format!("token id {bad} is outside the vocabulary")));
        }
        let up = |v: &[u32]| pool.upload_u32(be, v);
        Ok(StepMeta {
            n_tokens: h.ids.len(),
            n_logits: h.logit_rows.len(),
            num_seqs: seqs.len(),
            // A power of two, so the op's arguments (a graph replay's frozen bytes) change only
            // when the longest sequence doubles.
            max_seq_pages: h
                .page_indptr
                .windows(2)
                .map(|w| (w[1] - w[0]) as usize)
                .max()
                .unwrap_or(0)
                .next_power_of_two(),
            n_heads,
            decode: seqs.iter().all(|s| s.tokens.len() == 1),
            any_select: h.select_mask.iter().any(|&m| m != 0),
            ids: up(&h.ids)?,
            positions: up(&h.positions)?,
            slots: up(&h.slots)?,
            ring_slots: up(&h.ring_slots)?,
            inv_freq: pool.upload_f32(be, &inv_freq)?,
            q_indptr: up(&h.q_indptr)?,
            page_indptr: up(&h.page_indptr)?,
            page_table: up(&h.page_table)?,
            kv_len: up(&h.kv_len)?,
            ring_table: up(&h.ring_table)?,
            seq_slot: up(&h.seq_slot)?,
            select_mask: up(&h.select_mask)?,
            tail_start: up(&h.tail_start)?,
            zeros: up(&vec![0; seqs.len()])?,
            logit_rows: up(&h.logit_rows)?,
        })
    }

    /// Give every buffer back to the pool.
    pub fn recycle(self, pool: &BufferPool<B>) {
        let bufs = [
            self.ids,
            self.positions,
            self.slots,
            self.ring_slots,
            self.inv_freq,
            self.q_indptr,
            self.page_indptr,
            self.page_table,
            self.kv_len,
            self.ring_table,
            self.seq_slot,
            self.select_mask,
            self.tail_start,
            self.zeros,
            self.logit_rows,
        ];
        bufs.into_iter().for_each(|b| pool.put(b));
    }

    pub fn paged(&self) -> PagedMeta<'_, B> {
        PagedMeta {
            page_indptr: &self.page_indptr,
            page_table: &self.page_table,
            kv_len: &self.kv_len,
            ring_table: &self.ring_table,
        }
    }

    pub fn rope_meta(&self) -> RopeAppendMeta<'_, B> {
        RopeAppendMeta {
            positions: &self.positions,
            slots: &self.slots,
            ring_slots: &self.ring_slots,
            inv_freq: &self.inv_freq,
        }
    }

    pub fn rope_params(&self, cache: &KvCache<B>, layer: usize, attention_scaling: f32) -> RopeAppendKvParams {
        RopeAppendKvParams::new(&cache.geometry(layer), self.n_tokens, self.n_heads, attention_scaling)
    }

    pub fn attention_params(&self, cache: &KvCache<B>, layer: usize, attn: &AttnSettings) -> AttentionParams {
        let step = AttentionStep {
            num_seqs: self.num_seqs,
            n_tokens: self.n_tokens,
            n_heads: self.n_heads,
            window: attn.window,
            sink: attn.sink,
            local: attn.local,
        };
        let ap = AttentionParams::new(&cache.geometry(layer), &step);
        // Only decode's key lists come in selection units; prefill's block lists are pages.
        AttentionParams { sel_unit: if self.decode { attn.sel_unit as u32 } else { 0 }, ..ap }
    }

    /// `page_select` parameters of a layer whose attention runs with `ap`: `attn`'s budget,
    /// ranking, box shrink and sink pin; the head_norm scale is the layer's attention score scale.
    pub fn select_params(&self, cache: &KvCache<B>, ap: &AttentionParams, attn: &AttnSettings) -> PageSelectParams {
        PageSelectParams {
            rank: attn.page_rank.code(),
            pin_first: attn.pin_sink_page as u32,
            bound_shrink: attn.bound_shrink,
            ..PageSelectParams::new(ap, cache.shape.logical_page as u32, attn.k_pages, self.max_seq_pages)
        }
    }
}
