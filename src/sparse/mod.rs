//! LServe's unified sparse attention, host side (docs/sparse-attention.md): the configuration,
//! head patterns (which KV heads stream), and the per-step plan of which sequences re-run page
//! selection. The math itself runs in the backend ops `page_select`, `sparse_decode_attention` and
//! `prefill_attention`.

pub mod config;
pub mod pattern;

pub use config::{CacheConfig, Config, KvMemory, PageRank, PrefillEstimate, SelectUnit, SparseConfig};
pub use pattern::HeadPattern;

use crate::kv::SeqPages;

/// Selection units (`unit` tokens: the physical page, or a logical page under
/// `select_unit = "logical"`) `page_select` keeps per retrieval head, the newest unit excluded
/// (attention always reads the units from the selection's tail on).
pub fn k_pages(token_budget: usize, unit: usize) -> usize {
    (token_budget / unit.max(1)).saturating_sub(1)
}

/// What one decode step does for one sequence.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DecodePlan {
    /// Run page selection now.
    pub select: bool,
    /// First page read in full (0 = dense: no selection applies).
    pub tail_start: u32,
}

/// Decide, before a decode step that brings `seq` to `kv_len` tokens, whether it selects pages and
/// where its tail starts; updates the sequence's selection bookkeeping.
/// `unit` is the selection unit in tokens (`AttnSettings::unit`); tails count units.
pub fn plan_decode(cfg: &SparseConfig, seq: &mut SeqPages, kv_len: usize, unit: usize) -> DecodePlan {
    let n_pages = kv_len.div_ceil(unit) as u32;
    if !cfg.enabled || kv_len <= cfg.dense_below {
        seq.sel_tail = None;
        return DecodePlan { select: false, tail_start: 0 };
    }
    let due = seq.sel_tail.is_none() || seq.steps_since_select >= cfg.selector_interval;
    if due {
        seq.sel_tail = Some(n_pages - 1);
        seq.steps_since_select = 1;
        DecodePlan { select: true, tail_start: n_pages - 1 }
    } else {
        seq.steps_since_select += 1;
        DecodePlan { select: false, tail_start: seq.sel_tail.unwrap_or(0) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuse_interval_is_honoured() {
        let cfg = SparseConfig {
            enabled: true,
            token_budget: 128,
            dense_below: 0,
            selector_interval: 3,
            ..Default::default()
        };
        let mut seq = SeqPages::default();
        let plans: Vec<DecodePlan> = (300..308).map(|len| plan_decode(&cfg, &mut seq, len, 64)).collect();
        let selects: Vec<bool> = plans.iter().map(|p| p.select).collect();
        assert_eq!(selects, [true, false, false, true, false, false, true, false]);
        assert!(plans.iter().all(|p| p.tail_start == 4), "{plans:?}");
    }

    #[test]
    fn dense_when_short_or_budget_covers() {
        let cfg = SparseConfig { enabled: true, token_budget: 4096, dense_below: 100, ..Default::default() };
        let mut seq = SeqPages::default();
        assert_eq!(plan_decode(&cfg, &mut seq, 50, 64), DecodePlan { select: false, tail_start: 0 });
        // Above dense_below selection runs even when the budget covers the context (it then
        // selects every page, which tests check equals dense attention).
        assert!(plan_decode(&cfg, &mut seq, 4000, 64).select);
        let off = SparseConfig { enabled: false, ..cfg };
        assert_eq!(plan_decode(&off, &mut seq, 50_000, 64).tail_start, 0);
    }
}
