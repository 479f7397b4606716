//! The host tier for swapped-out sequences: host memory with a byte limit, least recently used
//! first out. When a new copy does not fit, the least recently inserted copies are evicted (their
//! sequences fall back to recompute); a copy larger than the whole limit is refused (its sequence
//! is recomputed instead).
//!
//! Invariants: `used() <= limit()` at all times; `used()` is the sum of the held copies' bytes;
//! a key is held at most once.

use super::swap::SwappedKv;

pub struct HostTier<K: PartialEq + Copy> {
    limit: usize,
    used: usize,
    /// Least recently used first.
    entries: Vec<(K, SwappedKv)>,
}

impl<K: PartialEq + Copy> HostTier<K> {
    pub fn new(limit_bytes: usize) -> Self {
        HostTier { limit: limit_bytes, used: 0, entries: Vec::new() }
    }
    pub fn limit(&self) -> usize {
        self.limit
    }
    pub fn used(&self) -> usize {
        self.used
    }
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    pub fn contains(&self, key: K) -> bool {
        self.entries.iter().any(|(k, _)| *k == key)
    }

    /// Hold `copy` under `key`, evicting least recently used copies until it fits; returns the
    /// evicted keys, or gives `copy` back when it is larger than the whole tier.
    pub fn insert(&mut self, key: K, copy: SwappedKv) -> Result<Vec<K>, SwappedKv> {
        let b = copy.bytes();
        if b > self.limit {
            return Err(copy);
        }
        self.remove(key);
        let mut evicted = Vec::new();
        while self.used + b > self.limit {
            let (k, c) = self.entries.remove(0);
            self.used -= c.bytes();
            evicted.push(k);
        }
        self.used += b;
        self.entries.push((key, copy));
        Ok(evicted)
    }

    /// Take the copy held under `key` out of the tier.
    pub fn remove(&mut self, key: K) -> Option<SwappedKv> {
        let i = self.entries.iter().position(|(k, _)| *k == key)?;
        let (_, c) = self.entries.remove(i);
        self.used -= c.bytes();
        Some(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_recently_inserted_copies_are_evicted_first() {
        let one = SwappedKv::filler(1000).bytes();
        let mut t = HostTier::new(2 * one + 10);
        assert_eq!(t.insert(1, SwappedKv::filler(1000)), Ok(vec![]));
        assert_eq!(t.insert(2, SwappedKv::filler(1000)), Ok(vec![]));
        assert_eq!(t.used(), 2 * one);
        assert_eq!(t.insert(3, SwappedKv::filler(1000)), Ok(vec![1]));
        assert!(!t.contains(1) && t.contains(2) && t.contains(3));
        assert!(t.remove(2).is_some());
        assert_eq!((t.len(), t.used()), (1, one));
        // Larger than the whole tier: refused, nothing evicted.
        assert!(t.insert(4, SwappedKv::filler(3000)).is_err());
        assert_eq!((t.len(), t.used()), (1, one));
        assert_eq!(t.insert(5, SwappedKv::filler(1000)), Ok(vec![]));
        assert!(t.used() <= t.limit());
    }
}
