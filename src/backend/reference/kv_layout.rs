//! Addressing conventions of the KV ops (docs/kv-cache.md): the streaming ring and the
//! `head_map` encoding. The cache (`crate::kv`) allocates by them; the ops read by them.
//!
//! Invariants: [`ring_index`] keeps positions below `sink` in place and cycles the rest through
//! `ring_tokens - sink` places (`ring_tokens > sink`); [`head_map`] numbers retrieval and
//! streaming heads separately, in KV-head order, streaming ones flagged with [`STREAMING_BIT`].

use crate::backend::STREAMING_BIT;

/// Place of position `pos` in a ring of `ring_tokens` whose first `sink` tokens never move.
pub fn ring_index(pos: usize, sink: usize, ring_tokens: usize) -> usize {
    if pos < sink { pos } else { sink + (pos - sink) % (ring_tokens - sink) }
}

/// `head_map` of a layer whose KV head `h` is streaming iff `streaming[h]`: `STREAMING_BIT | i`
/// for the i-th streaming head, else `i` for the i-th retrieval head.
pub fn head_map(streaming: &[bool]) -> Vec<u32> {
    let (mut r, mut s) = (0u32, 0u32);
    streaming
        .iter()
        .map(|&st| {
            let v = if st { STREAMING_BIT | s } else { r };
            if st {
                s += 1
            } else {
                r += 1
            }
            v
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_keeps_the_sink_and_cycles_the_rest() {
        let got: Vec<usize> = (0..10).map(|p| ring_index(p, 2, 6)).collect();
        assert_eq!(got, vec![0, 1, 2, 3, 4, 5, 2, 3, 4, 5]);
        assert_eq!(ring_index(5, 0, 4), 1);
    }

    #[test]
    fn head_map_numbers_each_kind_in_order() {
        let b = STREAMING_BIT;
        assert_eq!(head_map(&[false, true, false, true, true]), vec![0, b, 1, b | 1, b | 2]);
        assert_eq!(head_map(&[]), Vec::<u32>::new());
    }
}
