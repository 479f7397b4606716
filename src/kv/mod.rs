//! Hierarchical paged KV cache (DESIGN.md §4, docs/kv-cache.md).
//!
//! Per layer:
//! - retrieval pool: K and V `[page][n_ret][page_size][head_dim]` (HND) for the layer's retrieval
//!   heads, shared by all sequences through per-sequence page tables;
//! - summaries: `[page][n_ret][page_size / logical_page][2][head_dim]`, the channel-wise min and max
//!   of the rotated keys of each logical page (Quest's page bound), kept by `rope_append_kv`;
//! - streaming pool: K and V `[str_page][n_str][page_size][head_dim]` for the streaming heads. Each
//!   sequence owns a fixed ring of `ring_tokens / page_size` of these pages: positions below `sink`
//!   stay put, later ones cycle through the rest ([`ring_index`]), so a streaming head's memory is
//!   constant however long the sequence grows.
//! - selection: `[slot][n_ret][sel_stride]` selected pages and `[slot][n_ret]` counts, written on
//!   the device by `page_select` and reused between selections.
//!
//! Invariants: every page, streaming page and slot is owned by at most one sequence; a failed
//! `admit`/`reserve` changes nothing; `release` returns everything a sequence held. The ring holds
//! `sink + local + chunk` tokens at least, so a prefill chunk never overwrites a key that one of
//! its own queries still needs.

pub mod alloc;
pub mod host;
pub mod swap;

pub use alloc::PageAllocator;
pub use host::HostTier;
pub use swap::SwappedKv;

use crate::backend::reference::kv_layout::head_map;
pub use crate::backend::reference::kv_layout::ring_index;
/// The 8-bit KV quantization (defined in the backend: the CPU reference stores these bytes).
pub use crate::backend::reference::kv_quant as quant;
use crate::backend::{Backend, DType, KvGeometry, LayerKv, LayerKvMut, SelectedMut, kv_pool_len};
use crate::error::{Error, Result};

/// Which KV heads of each layer are streaming heads.
#[derive(Clone, Debug, PartialEq)]
pub struct HeadLayout {
    /// `[layer][kv_head]`: true = streaming.
    pub streaming: Vec<Vec<bool>>,
}

impl HeadLayout {
    pub fn all_retrieval(num_layers: usize, n_kv: usize) -> Self {
        HeadLayout { streaming: vec![vec![false; n_kv]; num_layers] }
    }
    pub fn n_str(&self, layer: usize) -> usize {
        self.streaming[layer].iter().filter(|&&s| s).count()
    }
    pub fn n_ret(&self, layer: usize) -> usize {
        self.streaming[layer].len() - self.n_str(layer)
    }
    pub fn any_streaming(&self) -> bool {
        self.streaming.iter().flatten().any(|&s| s)
    }
    /// `head_map` of a layer: `STREAMING_BIT | i` for the i-th streaming head, else `i`.
    pub fn head_map(&self, layer: usize) -> Vec<u32> {
        head_map(&self.streaming[layer])
    }
}

/// Geometry of the cache.
#[derive(Clone, Debug, PartialEq)]
pub struct CacheShape {
    pub num_layers: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub page_size: usize,
    pub logical_page: usize,
    /// Retrieval pool pages (per layer).
    pub num_pages: usize,
    /// Sequences that can hold cache at once (slots and rings).
    pub max_seqs: usize,
    /// Tokens of streaming ring per sequence; a multiple of page_size (0 without streaming heads).
    pub ring_tokens: usize,
    /// Streaming tokens that never leave the ring.
    pub sink: usize,
    /// Selected pages kept per (slot, retrieval head).
    pub sel_stride: usize,
    pub layout: HeadLayout,
    pub kv_dtype: DType,
}

impl CacheShape {
    pub fn ring_pages(&self) -> usize {
        self.ring_tokens / self.page_size
    }
    /// Whether each sequence holds a streaming ring: `ring_tokens > 0`, which the engine sets
    /// exactly when the model has streaming heads. Under tensor parallelism a rank whose own KV
    /// heads all retrieve keeps rings too, so every rank's ring pages are the same ids (the
    /// allocation is rank 0's; docs/tensor-parallel.md).
    pub fn has_rings(&self) -> bool {
        self.ring_tokens > 0
    }
    fn ret_heads(&self) -> usize {
        (0..self.num_layers).map(|l| self.layout.n_ret(l)).sum()
    }
    fn str_heads(&self) -> usize {
        (0..self.num_layers).map(|l| self.layout.n_str(l)).sum()
    }
    /// Bytes of K+V (scales included for the 8-bit types) per token and KV head.
    pub fn kv_bytes_per_token_head(&self) -> usize {
        2 * kv_pool_len(self.kv_dtype, 1, self.head_dim) * self.kv_dtype.size()
    }
    /// Bytes of one retrieval page across all layers: K+V plus its f32 summaries.
    pub fn page_bytes(&self) -> usize {
        let kv = self.page_size * self.kv_bytes_per_token_head();
        let summary = 2 * (self.page_size / self.logical_page) * self.head_dim * 4;
        self.ret_heads() * (kv + summary)
    }
    /// Bytes of one sequence's streaming ring across all layers.
    pub fn ring_bytes(&self) -> usize {
        self.str_heads() * self.ring_tokens * self.kv_bytes_per_token_head()
    }
    /// Total bytes of the cache's pools.
    pub fn total_bytes(&self) -> usize {
        self.num_pages * self.page_bytes() + self.max_seqs * self.ring_bytes()
    }
    /// KV bytes one sequence of `tokens` tokens holds (retrieval pages + its ring).
    pub fn seq_bytes(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.page_size) * self.page_bytes() + self.ring_bytes()
    }

    fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidArgument(m));
        if !(16..=1024).contains(&self.page_size) {
            return bad(format!("physical page {} must be between 16 and 1024 tokens", self.page_size));
        }
        if self.logical_page == 0 || !self.page_size.is_multiple_of(self.logical_page) {
            return bad(format!("logical page {} must divide the physical page {}", self.logical_page, self.page_size));
        }
        if self.num_pages == 0 || self.max_seqs == 0 {
            return bad("the KV cache needs at least one page and one sequence".into());
        }
        if self.num_pages.checked_mul(self.page_size).is_none_or(|t| t as u64 > u32::MAX as u64) {
            return bad(format!("{} pages of {} tokens overflow 32-bit slots", self.num_pages, self.page_size));
        }
        if self.kv_dtype.is_kv8() && (!self.head_dim.is_multiple_of(16) || !self.page_size.is_multiple_of(4)) {
            return bad(format!(
                "8-bit KV needs head_dim a multiple of 16 and page_size a multiple of 4 (16-byte aligned rows), not {} / {}",
                self.head_dim, self.page_size
            ));
        }
        if (self.layout.any_streaming() || self.has_rings())
            && (!self.ring_tokens.is_multiple_of(self.page_size) || self.ring_tokens <= self.sink)
        {
            return bad(format!("ring of {} tokens cannot hold {} sink tokens", self.ring_tokens, self.sink));
        }
        Ok(())
    }
}

/// One sequence's hold on the cache.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SeqPages {
    /// Retrieval pages in logical order.
    pub pages: Vec<u32>,
    /// Tokens stored.
    pub len: usize,
    /// Streaming ring pages (empty without streaming heads).
    pub ring: Vec<u32>,
    /// Slot of this sequence in the per-slot selection buffers.
    pub slot: u32,
    /// Pages from this index on are read in full by decode (the selection's tail); None until a
    /// selection has run.
    pub sel_tail: Option<u32>,
    /// Decode steps since the last selection.
    pub steps_since_select: usize,
    /// Set by `admit`; a sequence that was never admitted (or already released) holds nothing.
    pub admitted: bool,
}

/// One layer's buffers.
pub struct LayerStore<B: Backend> {
    pub k: B::Buffer,
    pub v: B::Buffer,
    pub summary: B::Buffer,
    pub sk: B::Buffer,
    pub sv: B::Buffer,
    pub head_map: B::Buffer,
    pub selected: B::Buffer,
    pub counts: B::Buffer,
}

impl<B: Backend> LayerStore<B> {
    pub fn view(&self) -> LayerKv<'_, B> {
        LayerKv { k: &self.k, v: &self.v, summary: &self.summary, sk: &self.sk, sv: &self.sv, head_map: &self.head_map }
    }
    /// The read-only view and the selection outputs at once (what `page_select` takes).
    pub fn select_view(&mut self) -> (LayerKv<'_, B>, SelectedMut<'_, B>) {
        let kv = LayerKv {
            k: &self.k,
            v: &self.v,
            summary: &self.summary,
            sk: &self.sk,
            sv: &self.sv,
            head_map: &self.head_map,
        };
        (kv, SelectedMut { selected: &mut self.selected, counts: &mut self.counts })
    }

    pub fn view_mut(&mut self) -> LayerKvMut<'_, B> {
        LayerKvMut {
            k: &mut self.k,
            v: &mut self.v,
            summary: &mut self.summary,
            sk: &mut self.sk,
            sv: &mut self.sv,
            head_map: &self.head_map,
        }
    }
}

pub struct KvCache<B: Backend> {
    pub shape: CacheShape,
    pub layers: Vec<LayerStore<B>>,
    pub alloc: PageAllocator,
    pub str_alloc: PageAllocator,
    free_slots: Vec<u32>,
}

impl<B: Backend> KvCache<B> {
    /// Sequence slots not held by any sequence.
    pub fn free_slots(&self) -> usize {
        self.free_slots.len()
    }

    pub fn new(be: &B, shape: CacheShape) -> Result<Self> {
        shape.validate()?;
        if !be.caps().kv_dtypes.contains(&shape.kv_dtype) {
            return Err(Error::InvalidArgument(format!(
                "KV dtype {:?} is not supported by the {} backend (supported: {:?})",
                shape.kv_dtype,
                be.caps().name,
                be.caps().kv_dtypes
            )));
        }
        let (ps, hd) = (shape.page_size, shape.head_dim);
        let num_str_pages = shape.max_seqs * shape.ring_pages();
        let mut layers = Vec::with_capacity(shape.num_layers);
        for l in 0..shape.num_layers {
            let (n_ret, n_str) = (shape.layout.n_ret(l), shape.layout.n_str(l));
            let a = |dt: DType, n: usize| be.alloc(dt, n.max(1));
            let ret = kv_pool_len(shape.kv_dtype, shape.num_pages * n_ret * ps, hd);
            let strm = kv_pool_len(shape.kv_dtype, num_str_pages * n_str * ps, hd);
            layers.push(LayerStore {
                k: a(shape.kv_dtype, ret)?,
                v: a(shape.kv_dtype, ret)?,
                summary: a(DType::F32, shape.num_pages * n_ret * (ps / shape.logical_page) * 2 * hd)?,
                sk: a(shape.kv_dtype, strm)?,
                sv: a(shape.kv_dtype, strm)?,
                head_map: be.upload_u32(&shape.layout.head_map(l))?,
                selected: a(DType::U32, shape.max_seqs * n_ret * shape.sel_stride)?,
                counts: be.upload_u32(&vec![0; (shape.max_seqs * n_ret).max(1)])?,
            });
        }
        Ok(KvCache {
            alloc: PageAllocator::new(shape.num_pages),
            str_alloc: PageAllocator::new(num_str_pages),
            free_slots: (0..shape.max_seqs as u32).rev().collect(),
            layers,
            shape,
        })
    }

    pub fn num_str_pages(&self) -> usize {
        self.str_alloc.num_pages()
    }

    /// The pool geometry of `layer`, from which the ops' parameter structs are built
    /// (`crate::backend::params`).
    pub fn geometry(&self, layer: usize) -> KvGeometry {
        let s = &self.shape;
        KvGeometry {
            n_kv_heads: s.n_kv_heads as u32,
            head_dim: s.head_dim as u32,
            page_size: s.page_size as u32,
            num_pages: s.num_pages as u32,
            logical_page: s.logical_page as u32,
            n_ret: s.layout.n_ret(layer) as u32,
            n_str: s.layout.n_str(layer) as u32,
            num_str_pages: self.num_str_pages() as u32,
            ring_tokens: s.ring_tokens as u32,
            sel_stride: s.sel_stride as u32,
        }
    }

    /// Take a slot and a streaming ring for a new sequence; all or nothing.
    pub fn admit(&mut self) -> Result<SeqPages> {
        let slot = self.free_slots.pop().ok_or_else(|| Error::OutOfPages("no free sequence slot".into()))?;
        let ring_pages = if self.shape.has_rings() { self.shape.ring_pages() } else { 0 };
        let Some(ring) = self.str_alloc.alloc(ring_pages) else {
            self.free_slots.push(slot);
            return Err(Error::OutOfPages("no free streaming ring".into()));
        };
        Ok(SeqPages { slot, ring, admitted: true, ..SeqPages::default() })
    }

    /// Make room for `n` more tokens in `seq` (allocating pages as needed); all or nothing.
    pub fn reserve(&mut self, seq: &mut SeqPages, n: usize) -> Result<()> {
        let need = (seq.len + n).div_ceil(self.shape.page_size).saturating_sub(seq.pages.len());
        let got = self
            .alloc
            .alloc(need)
            .ok_or_else(|| Error::OutOfPages(format!("{need} pages needed, {} free", self.alloc.num_free())))?;
        seq.pages.extend(got);
        Ok(())
    }

    /// Retrieval-pool slots for positions `start..start+n` of `seq` (pages must be reserved).
    pub fn slots(&self, seq: &SeqPages, start: usize, n: usize) -> Vec<u32> {
        let ps = self.shape.page_size;
        (start..start + n).map(|p| seq.pages[p / ps] * ps as u32 + (p % ps) as u32).collect()
    }

    /// Streaming-pool slots for positions `start..start+n` (0 when the model has no streaming heads).
    pub fn ring_slots(&self, seq: &SeqPages, start: usize, n: usize) -> Vec<u32> {
        if seq.ring.is_empty() {
            return vec![0; n];
        }
        let ps = self.shape.page_size;
        (start..start + n)
            .map(|p| {
                let r = ring_index(p, self.shape.sink, self.shape.ring_tokens);
                seq.ring[r / ps] * ps as u32 + (r % ps) as u32
            })
            .collect()
    }

    /// Give a finished sequence's pages, ring and slot back.
    pub fn release(&mut self, seq: &mut SeqPages) -> Result<()> {
        self.alloc.release(&seq.pages)?;
        self.str_alloc.release(&seq.ring)?;
        if seq.admitted {
            self.free_slots.push(seq.slot);
            self.free_slots.sort_unstable_by(|a, b| b.cmp(a));
        }
        *seq = SeqPages::default();
        Ok(())
    }
}
