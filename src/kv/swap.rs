//! Swapping one sequence's KV between the device pools and host memory (preemption by swap,
//! docs/serving.md). A swap-out copies everything the sequence's attention depends on, through
//! the Backend's `download_*` calls: per layer its retrieval pages of K and V, their min/max page
//! summaries, its streaming ring (K and V) and its page-selection rows (selected pages and
//! counts, so reuse between selections continues exactly). A swap-in admits a fresh sequence
//! (slot, ring, pages), writes the copies into the new ids with `write_*_at`, and returns the
//! page table rewritten to them.
//!
//! Tensor parallelism: each rank swaps out its own KV heads; the copies are joined rank after
//! rank (`SwappedKv::append_rank`), rank 0's `swap_in` allocates and restores its part, and every
//! other rank restores its part at the same page ids (`restore_rank`).
//!
//! Invariants: `swap_out` changes nothing on the device or in the accounting (the caller releases
//! the sequence afterwards); `swap_in` is all or nothing (on failure nothing stays held); after a
//! swap-out and a swap-in the sequence's KV, summaries and selection are bit-identical: pools are
//! copied as raw bytes (`download_raw` / `write_raw_at`) whatever the KV dtype, so 16-bit values
//! and the 8-bit codes with their per-row scales come back exactly as stored.

use super::{KvCache, SeqPages};
use crate::backend::{Backend, DType, kv_pool_len};
use crate::error::{Error, Result};

/// One layer's copy: regions in the order of the sequence's pages / ring pages, as stored bytes.
#[derive(Clone, Debug, PartialEq)]
struct LayerCopy {
    k: Vec<u8>,
    v: Vec<u8>,
    summary: Vec<u8>,
    sk: Vec<u8>,
    sv: Vec<u8>,
    selected: Vec<u32>,
    counts: Vec<u32>,
}

/// A sequence's KV in host memory.
#[derive(Clone, Debug, PartialEq)]
pub struct SwappedKv {
    /// Tokens stored.
    pub len: usize,
    /// Retrieval pages held when swapped out.
    pub n_pages: usize,
    sel_tail: Option<u32>,
    steps_since_select: usize,
    layers: Vec<LayerCopy>,
}

impl SwappedKv {
    /// Host bytes this copy occupies.
    pub fn bytes(&self) -> usize {
        let l: usize = self
            .layers
            .iter()
            .map(|c| {
                c.k.len()
                    + c.v.len()
                    + c.summary.len()
                    + c.sk.len()
                    + c.sv.len()
                    + 4 * (c.selected.len() + c.counts.len())
            })
            .sum();
        l + std::mem::size_of::<Self>()
    }

    /// Append another tensor-parallel rank's copy of the same sequence (ranks in order).
    pub fn append_rank(&mut self, other: SwappedKv) {
        self.layers.extend(other.layers);
    }
}

impl SwappedKv {
    /// A copy holding `floats` f32 values of one layer's K (host-tier tests).
    #[cfg(test)]
    pub(crate) fn filler(floats: usize) -> Self {
        let layer = LayerCopy {
            k: vec![0; 4 * floats],
            v: vec![],
            summary: vec![],
            sk: vec![],
            sv: vec![],
            selected: vec![],
            counts: vec![],
        };
        SwappedKv { len: 0, n_pages: 0, sel_tail: None, steps_since_select: 0, layers: vec![layer] }
    }

    /// Every stored value as raw bits, layer by layer (for bit-exact comparisons).
    pub fn bits(&self) -> Vec<u32> {
        let mut out = vec![self.len as u32, self.n_pages as u32];
        for c in &self.layers {
            for v in [&c.k, &c.v, &c.summary, &c.sk, &c.sv] {
                out.push(v.len() as u32);
                out.extend(v.chunks(4).map(|w| w.iter().rev().fold(0u32, |a, &b| (a << 8) | b as u32)));
            }
            out.extend(&c.selected);
            out.extend(&c.counts);
        }
        out
    }
}

/// Runs of consecutive ids in `ids`: (first id, count), in order.
fn runs(ids: &[u32]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for &id in ids {
        match out.last_mut() {
            Some((first, n)) if *first + *n == id as usize => *n += 1,
            _ => out.push((id as usize, 1)),
        }
    }
    out
}

/// Download the regions of `ids` (each `per` bytes) from `buf`, in the order of `ids`.
fn gather<B: Backend>(be: &B, buf: &B::Buffer, ids: &[u32], per: usize) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(ids.len() * per);
    if per == 0 {
        return Ok(out);
    }
    for (first, n) in runs(ids) {
        out.extend(be.download_raw(buf, first * per, n * per)?);
    }
    Ok(out)
}

/// Write `data` (regions of `per` bytes in the order of `ids`) into `buf` at `ids`.
fn scatter<B: Backend>(be: &B, buf: &mut B::Buffer, ids: &[u32], per: usize, data: &[u8]) -> Result<()> {
    if per == 0 {
        return Ok(());
    }
    let mut at = 0;
    for (first, n) in runs(ids) {
        be.write_raw_at(buf, first * per, &data[at..at + n * per])?;
        at += n * per;
    }
    Ok(())
}

impl<B: Backend> KvCache<B> {
    /// Bytes per page of the retrieval pool, summaries and streaming pool, and u32 elements per
    /// slot of the selection buffers, in `layer`.
    fn region_sizes(&self, layer: usize) -> [usize; 4] {
        let s = &self.shape;
        let (n_ret, n_str) = (s.layout.n_ret(layer), s.layout.n_str(layer));
        let pool = |heads: usize| kv_pool_len(s.kv_dtype, heads * s.page_size, s.head_dim) * s.kv_dtype.size();
        let summary = n_ret * (s.page_size / s.logical_page) * 2 * s.head_dim * DType::F32.size();
        [pool(n_ret), summary, pool(n_str), n_ret * s.sel_stride]
    }

    /// Copy `seq`'s KV to host memory. Nothing on the device or in the accounting changes.
    pub fn swap_out(&self, be: &B, seq: &SeqPages) -> Result<SwappedKv> {
        let mut layers = Vec::with_capacity(self.layers.len());
        let slot = seq.slot as usize;
        for (l, st) in self.layers.iter().enumerate() {
            let [kv, summ, ring, sel] = self.region_sizes(l);
            let n_ret = self.shape.layout.n_ret(l);
            layers.push(LayerCopy {
                k: gather(be, &st.k, &seq.pages, kv)?,
                v: gather(be, &st.v, &seq.pages, kv)?,
                summary: gather(be, &st.summary, &seq.pages, summ)?,
                sk: gather(be, &st.sk, &seq.ring, ring)?,
                sv: gather(be, &st.sv, &seq.ring, ring)?,
                selected: if sel > 0 { be.download_u32(&st.selected, slot * sel, sel)? } else { vec![] },
                counts: if n_ret > 0 { be.download_u32(&st.counts, slot * n_ret, n_ret)? } else { vec![] },
            });
        }
        Ok(SwappedKv {
            len: seq.len,
            n_pages: seq.pages.len(),
            sel_tail: seq.sel_tail,
            steps_since_select: seq.steps_since_select,
            layers,
        })
    }

    /// Admit a new sequence holding `copy`: a slot, a ring and `copy.n_pages` fresh pages with
    /// the copied contents. All or nothing.
    pub fn swap_in(&mut self, be: &B, copy: &SwappedKv) -> Result<SeqPages> {
        let mut seq = self.admit()?;
        let r =
            self.reserve(&mut seq, copy.n_pages * self.shape.page_size).and_then(|_| self.restore(be, &seq, copy, 0));
        if let Err(e) = r {
            self.release(&mut seq)?;
            return Err(e);
        }
        seq.len = copy.len;
        seq.sel_tail = copy.sel_tail;
        seq.steps_since_select = copy.steps_since_select;
        Ok(seq)
    }

    /// Write tensor-parallel rank `rank`'s part of `copy` (every rank's `swap_out`, appended in
    /// rank order) into this rank's storage at `seq`'s pages, ring and slot, which rank 0's
    /// `swap_in` allocated.
    pub fn restore_rank(&mut self, be: &B, seq: &SeqPages, copy: &SwappedKv, rank: usize) -> Result<()> {
        self.restore(be, seq, copy, rank * self.layers.len())
    }

    /// Write the layers `first..` of `copy` into this cache's layers at `seq`'s ids.
    fn restore(&mut self, be: &B, seq: &SeqPages, copy: &SwappedKv, first: usize) -> Result<()> {
        if copy.layers.len() < first + self.layers.len() {
            return Err(Error::InvalidArgument("the swapped KV has no copy for this rank's layers".into()));
        }
        let slot = seq.slot as usize;
        for l in 0..self.layers.len() {
            let [kv, summ, ring, sel] = self.region_sizes(l);
            let n_ret = self.shape.layout.n_ret(l);
            let (c, st) = (&copy.layers[first + l], &mut self.layers[l]);
            scatter(be, &mut st.k, &seq.pages, kv, &c.k)?;
            scatter(be, &mut st.v, &seq.pages, kv, &c.v)?;
            scatter(be, &mut st.summary, &seq.pages, summ, &c.summary)?;
            scatter(be, &mut st.sk, &seq.ring, ring, &c.sk)?;
            scatter(be, &mut st.sv, &seq.ring, ring, &c.sv)?;
            if sel > 0 {
                be.write_u32_at(&mut st.selected, slot * sel, &c.selected)?;
            }
            if n_ret > 0 {
                be.write_u32_at(&mut st.counts, slot * n_ret, &c.counts)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::runs;

    #[test]
    fn runs_group_consecutive_ids() {
        assert_eq!(runs(&[3, 4, 5, 9, 1, 2]), vec![(3, 3), (9, 1), (1, 2)]);
        assert!(runs(&[]).is_empty());
    }
}
