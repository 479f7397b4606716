//! The reference of the rotation in `rope_append_kv`: rotate-half RoPE of one head vector at one
//! position with precomputed inverse frequencies. The frequency tables of every scaling variant
//! are model configuration (`crate::model::rope` builds a [`RopeFreqs`]); the op only sees the
//! numbers (`inv_freq` `[head_dim / 2]` and `attention_scaling`).
//!
//! Invariants: `inv_freq[i]` belongs to the pair `(i, i + head_dim / 2)`; the angle is
//! `(pos as f32) * inv_freq[i]` in `f32` (as HF does) and cos/sin are multiplied by
//! `attention_scaling` (YaRN only, else 1).

/// The per-pair inverse frequencies and the cos/sin multiplier for one forward pass.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeFreqs {
    /// `head_dim / 2` entries.
    pub inv_freq: Vec<f32>,
    pub attention_scaling: f32,
}

/// x[i], x[i+d/2] <- x[i]*c - x[i+d/2]*s, x[i+d/2]*c + x[i]*s.
///
/// With `n = min(inv_freq.len(), x.len() / 2)` the first `2n` entries are rotated
/// as pairs `(i, i + n)`; in the normal case `x.len() == 2 * inv_freq.len()` this
/// is exactly the formula above, and a longer `x` keeps its tail (HF partial-rotary
/// semantics).
pub fn rotate_half_in_place(x: &mut [f32], pos: u32, f: &RopeFreqs) {
    let n = f.inv_freq.len().min(x.len() / 2);
    let p = pos as f32;
    let (lo, hi) = x[..2 * n].split_at_mut(n);
    for ((a, b), &inv) in lo.iter_mut().zip(hi.iter_mut()).zip(&f.inv_freq) {
        let angle = p * inv;
        let c = angle.cos() * f.attention_scaling;
        let s = angle.sin() * f.attention_scaling;
        let (x0, x1) = (*a, *b);
        *a = x0 * c - x1 * s;
        *b = x1 * c + x0 * s;
    }
}
