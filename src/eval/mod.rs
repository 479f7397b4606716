//! Long-context evaluation: generated filler text, head calibration, needle-in-a-haystack, the
//! accuracy suite (`accuracy`, `tasks`), the selection-recall diagnostic (`recall`), and the
//! charts of their results.
pub mod accuracy;
pub mod block_recall;
pub mod calibrate;
pub mod charts;
pub mod niah;
pub mod recall;
pub mod tasks;
pub mod text;

use crate::backend::Backend;
use crate::engine::Engine;
use crate::error::Result;
use crate::kv::SeqPages;
use crate::model::llama::Logits;

/// Ready `seq` for the last `decode` tokens of `ids` to be predicted one decode step each (the
/// accuracy suite's ppl task, the recall probe): prefill `ids[..split - 1]` in the engine's chunks
/// and return `split = max(1, len - decode)`, the first position a decode step predicts. The
/// caller then feeds `ids[p - 1]` as the step predicting `ids[p]`, for p in `split..len`, so every
/// token enters the cache once (until 2026-12-06 both callers prefilled `ids[..split]` and fed
/// token `split - 1` again).
pub fn prefill_for_decode<B: Backend>(
    e: &mut Engine<B>,
    seq: &mut SeqPages,
    ids: &[u32],
    decode: usize,
) -> Result<usize> {
    let split = ids.len().saturating_sub(decode).max(1);
    for part in ids[..split - 1].chunks(e.prefill_chunk.max(1)) {
        e.step(seq, part, Logits::None, None)?;
    }
    Ok(split)
}
