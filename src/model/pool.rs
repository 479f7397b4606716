//! A per-model pool of device buffers reused across steps: the activations and per-step metadata
//! of a forward pass are taken from it and returned at the end, so a steady decode loop allocates
//! nothing on the device (buffer creation is costly on GPU APIs). A taken buffer may be longer
//! than asked for; every op reads only the element counts its params give.
//!
//! Deterministic reuse: a take picks the smallest fit, ties by `Backend::buffer_id` (then by put
//! order), so which buffer a request gets depends on the set of free buffers, not on the order
//! they came back in: a step that takes the same sizes in the same order and returns them all
//! gets the same buffers every time — what lets a backend replay a decode step as a graph (its
//! kernel arguments, buffer addresses included, repeat exactly). New buffers are rounded up
//! to a power of two elements (up to 1M, then to 1M multiples) so growing metadata (a page
//! table gaining a page every page_size tokens) keeps its buffer for long stretches.

use std::cell::RefCell;

use crate::backend::{Backend, DType};
use crate::error::Result;

pub struct BufferPool<B: Backend> {
    free: RefCell<Vec<B::Buffer>>,
}

impl<B: Backend> Default for BufferPool<B> {
    fn default() -> Self {
        BufferPool { free: RefCell::new(Vec::new()) }
    }
}

impl<B: Backend> BufferPool<B> {
    /// The smallest free buffer of `dtype` holding at least `len` elements (and at most 4x as
    /// many, so small requests do not pin huge buffers; ties to the lowest `buffer_id`), else a
    /// new one.
    pub fn take(&self, be: &B, dtype: DType, len: usize) -> Result<B::Buffer> {
        let len = len.max(1);
        let mut free = self.free.borrow_mut();
        let best = free
            .iter()
            .enumerate()
            .filter(|(_, b)| be.dtype(b) == dtype && be.len(b) >= len && be.len(b) <= 4 * len)
            .min_by_key(|(_, b)| (be.len(b), be.buffer_id(b)))
            .map(|(i, _)| i);
        match best {
            Some(i) => Ok(free.remove(i)),
            None => be.alloc(dtype, alloc_len(len)),
        }
    }

    /// Give a buffer back (it becomes the last candidate among equal sizes).
    pub fn put(&self, b: B::Buffer) {
        self.free.borrow_mut().push(b);
    }

    /// A pooled u32 buffer holding `data` (at least one element).
    pub fn upload_u32(&self, be: &B, data: &[u32]) -> Result<B::Buffer> {
        let data = if data.is_empty() { &[0][..] } else { data };
        let mut b = self.take(be, DType::U32, data.len())?;
        be.write_u32(&mut b, data)?;
        Ok(b)
    }

    /// A pooled f32 buffer holding `data` (at least one element).
    pub fn upload_f32(&self, be: &B, data: &[f32]) -> Result<B::Buffer> {
        let data = if data.is_empty() { &[0.0][..] } else { data };
        let mut b = self.take(be, DType::F32, data.len())?;
        be.write_f32(&mut b, data)?;
        Ok(b)
    }
}

/// Elements to allocate for a request of `len`: the next power of two up to 1M elements, then
/// the next multiple of 1M (at most 2x and within the take rule's 4x either way).
fn alloc_len(len: usize) -> usize {
    const BIG: usize = 1 << 20;
    if len <= BIG { len.next_power_of_two() } else { len.div_ceil(BIG) * BIG }
}
