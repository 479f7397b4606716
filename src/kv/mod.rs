//! Paged KV cache: per-layer K and V pools of fixed-size physical pages, a free list, and
//! per-sequence page tables.
//!
//! Layout per layer (HND, DESIGN.md §4): `[page][kv_head][token][head_dim]`, K and V in separate
//! pools, so one head's tokens of one page are contiguous. A sequence's tokens live in its pages in
//! logical order: position `p` is token `p % page_size` of page `table[p / page_size]`.
//!
//! Invariants: a page is either on the free list or owned by exactly one sequence; `num_free() +
//! pages owned = num_pages` at all times; allocation is all-or-nothing (a failed `reserve` leaves
//! the sequence and the free list unchanged) and returns an error the scheduler can act on.
//! The accounting here is host-side only; pools are backend buffers.

use crate::backend::{Backend, DType};
use crate::error::{Error, Result};

/// The free list. Pages are handed out lowest id first, which keeps tests exact.
#[derive(Clone, Debug)]
pub struct PageAllocator {
    free: Vec<u32>,
    used: Vec<bool>,
}

impl PageAllocator {
    pub fn new(num_pages: usize) -> Self {
        PageAllocator {
            free: (0..num_pages as u32).rev().collect(),
            used: vec![false; num_pages],
        }
    }
    pub fn num_pages(&self) -> usize {
        self.used.len()
    }
    pub fn num_free(&self) -> usize {
        self.free.len()
    }
    /// `n` pages, or None (and nothing taken) if fewer are free.
    pub fn alloc(&mut self, n: usize) -> Option<Vec<u32>> {
        if n > self.free.len() {
            return None;
        }
        let pages = self.free.split_off(self.free.len() - n);
        let pages: Vec<u32> = pages.into_iter().rev().collect();
        pages.iter().for_each(|&p| self.used[p as usize] = true);
        Some(pages)
    }
    /// Return pages to the free list; a page that is not in use is a logic error reported as Err.
    pub fn release(&mut self, pages: &[u32]) -> Result<()> {
        if let Some(&p) = pages
            .iter()
            .find(|&&p| !self.used.get(p as usize).copied().unwrap_or(false))
        {
            return Err(Error::OutOfPages(format!(
                "page {p} released twice or never allocated"
            )));
        }
        pages.iter().for_each(|&p| self.used[p as usize] = false);
        self.free.extend(pages.iter().rev());
        self.free.sort_unstable_by(|a, b| b.cmp(a));
        Ok(())
    }
}

/// One sequence's page table and length.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SeqPages {
    pub pages: Vec<u32>,
    /// Tokens stored.
    pub len: usize,
}

/// Geometry of the cache.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CacheShape {
    pub num_layers: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub page_size: usize,
    pub num_pages: usize,
}

impl CacheShape {
    /// Bytes of K+V for one page across all layers at `dtype`.
    pub fn page_bytes(&self, dtype: DType) -> usize {
        2 * self.num_layers * self.n_kv_heads * self.page_size * self.head_dim * dtype.size()
    }
}

pub struct KvCache<B: Backend> {
    pub shape: CacheShape,
    /// (K pool, V pool) per layer.
    pub layers: Vec<(B::Buffer, B::Buffer)>,
    pub alloc: PageAllocator,
}

impl<B: Backend> KvCache<B> {
    pub fn new(backend: &B, shape: CacheShape) -> Result<Self> {
        if shape.page_size == 0
            || shape.num_pages == 0
            || shape.num_pages > u32::MAX as usize / shape.page_size
        {
            return Err(Error::InvalidArgument(format!(
                "bad KV cache shape {shape:?}"
            )));
        }
        let dtype = backend.caps().kv_dtypes[0];
        let len = shape.num_pages * shape.n_kv_heads * shape.page_size * shape.head_dim;
        let layers = (0..shape.num_layers)
            .map(|_| Ok((backend.alloc(dtype, len)?, backend.alloc(dtype, len)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(KvCache {
            shape,
            layers,
            alloc: PageAllocator::new(shape.num_pages),
        })
    }

    /// Make room for `n` more tokens in `seq` (allocating pages as needed); all or nothing.
    pub fn reserve(&mut self, seq: &mut SeqPages, n: usize) -> Result<()> {
        let need = (seq.len + n)
            .div_ceil(self.shape.page_size)
            .saturating_sub(seq.pages.len());
        let got = self.alloc.alloc(need).ok_or_else(|| {
            Error::OutOfPages(format!(
                "{need} pages needed, {} free",
                self.alloc.num_free()
            ))
        })?;
        seq.pages.extend(got);
        Ok(())
    }

    /// Physical slots for positions `start..start+n` of `seq` (pages must be reserved).
    pub fn slots(&self, seq: &SeqPages, start: usize, n: usize) -> Vec<u32> {
        let ps = self.shape.page_size;
        (start..start + n)
            .map(|p| seq.pages[p / ps] * ps as u32 + (p % ps) as u32)
            .collect()
    }

    /// Give a finished sequence's pages back.
    pub fn release(&mut self, seq: &mut SeqPages) -> Result<()> {
        self.alloc.release(&seq.pages)?;
        *seq = SeqPages::default();
        Ok(())
    }
}
