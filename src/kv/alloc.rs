//! The page free list (DESIGN.md §4, STYLE.md 4): host-side accounting only.
//!
//! Invariants: a page is either free or in use, never both; `num_free() + in use = num_pages`;
//! `alloc` is all-or-nothing and hands out the lowest free ids first (tests assert exact ids);
//! releasing a page that is not in use is an error, not a silent double free.

use crate::error::{Error, Result};

/// The free list. Pages are handed out lowest id first, which keeps tests exact.
#[derive(Clone, Debug)]
pub struct PageAllocator {
    free: Vec<u32>,
    used: Vec<bool>,
}

impl PageAllocator {
    pub fn new(num_pages: usize) -> Self {
        PageAllocator { free: (0..num_pages as u32).rev().collect(), used: vec![false; num_pages] }
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
        if let Some(&p) = pages.iter().find(|&&p| !self.used.get(p as usize).copied().unwrap_or(false)) {
            return Err(Error::OutOfPages(format!("page {p} released twice or never allocated")));
        }
        pages.iter().for_each(|&p| self.used[p as usize] = false);
        self.free.extend(pages.iter().rev());
        self.free.sort_unstable_by(|a, b| b.cmp(a));
        Ok(())
    }
}
