//! What one forward step is made of, shared by the forward pass (llama.rs) and its per-step
//! metadata (step.rs): each sequence's chunk ([`SeqStep`]), which rows need logits ([`Logits`]),
//! the engine's static attention settings ([`AttnSettings`]), the per-layer hook calibration
//! uses ([`LayerHook`]), what the step's end produces ([`Head`]) and the graph region a decode
//! step records into ([`GraphRegion`]); llama.rs and gemma3.rs share the last two.

use crate::backend::{Backend, LayerKv, PagedMeta};
use crate::error::Result;
use crate::kv::SeqPages;
use crate::model::config::ModelConfig;
use crate::sparse::DecodePlan;

/// One sequence's part of a step.
pub struct SeqStep<'a> {
    pub tokens: &'a [u32],
    /// Pages and length *before* this step; `reserve` must already cover the new tokens.
    pub cache: &'a SeqPages,
    /// Which of this chunk's rows need logits.
    pub logits: Logits,
    /// Decode only: whether to re-select pages and where the read-in-full tail starts.
    pub plan: DecodePlan,
}

/// Static attention settings of an engine (the sparse config resolved against the model).
#[derive(Clone, Debug, PartialEq)]
pub struct AttnSettings {
    /// Lambda mask of streaming heads.
    pub sink: usize,
    pub local: usize,
    /// Pages `page_select` keeps per retrieval head (the newest excluded).
    pub k_pages: usize,
    /// How `page_select` ranks pages.
    pub page_rank: crate::sparse::PageRank,
    /// `PageSelectParams::bound_shrink`: logical pages' boxes shrunk toward their centres.
    pub bound_shrink: f32,
    /// `page_select` always keeps each sequence's first page (the attention sink).
    pub pin_sink_page: bool,
    /// Decode selection's unit (`AttentionParams::sel_unit`): 0, the physical page; or a
    /// logical page's tokens. `k_pages` and decode tails count these units.
    pub sel_unit: usize,
    /// `[layer]`: never select pages in this layer.
    pub dense_layer: Vec<bool>,
    /// Model sliding window in tokens (Mistral v0.1); 0 = none.
    pub window: usize,
    /// Block-sparse prefill: pages `page_select` keeps per query block and retrieval head (page 0
    /// and the block's tail come besides); 0 = dense prefill.
    pub prefill_k_pages: usize,
    /// Query blocks whose first position is below this attend densely.
    pub prefill_dense_below: usize,
    /// How a query block's pages are ranked.
    pub prefill_estimate: crate::sparse::PrefillEstimate,
}

impl AttnSettings {
    /// The selection unit in tokens for pages of `page_size`.
    pub fn unit(&self, page_size: usize) -> usize {
        if self.sel_unit == 0 { page_size } else { self.sel_unit }
    }

    /// Dense attention for `cfg` (no streaming heads, no selection).
    pub fn dense(cfg: &ModelConfig) -> Self {
        AttnSettings {
            sink: 0,
            local: 1,
            k_pages: 0,
            page_rank: crate::sparse::PageRank::Max,
            bound_shrink: 0.0,
            pin_sink_page: false,
            sel_unit: 0,
            dense_layer: vec![true; cfg.num_layers],
            window: cfg.sliding_window.unwrap_or(0),
            prefill_k_pages: 0,
            prefill_dense_below: 0,
            prefill_estimate: crate::sparse::PrefillEstimate::Antidiagonal,
        }
    }
}

/// Called after each layer's attention with (backend, layer, rotated q, the layer's KV, the step's
/// page metadata); calibration measures attention mass through it.
pub type LayerHook<'a, B> =
    &'a mut dyn FnMut(&B, usize, &<B as Backend>::Buffer, LayerKv<B>, &PagedMeta<B>) -> Result<()>;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Logits {
    None,
    Last,
    All,
}

/// What the end of a forward produces: the logits, or token ids chosen on the device.
#[derive(Clone, Copy)]
pub(crate) enum Head<'a> {
    Logits,
    Argmax,
    Sample(&'a [[u32; 4]]),
}

/// A backend graph region (`Backend::graph_begin`) ended on every path: `finish` runs what was
/// recorded; dropping it unfinished (an op failed halfway) discards the recorded ops.
pub(crate) struct GraphRegion<'a, B: Backend> {
    be: &'a B,
    open: bool,
}

impl<'a, B: Backend> GraphRegion<'a, B> {
    pub(crate) fn begin(be: &'a B, on: bool) -> Self {
        if on {
            be.graph_begin();
        }
        GraphRegion { be, open: on }
    }

    pub(crate) fn finish(mut self) -> Result<()> {
        self.open = false;
        self.be.graph_end(true)
    }
}

impl<B: Backend> Drop for GraphRegion<'_, B> {
    fn drop(&mut self) {
        if self.open {
            let _ = self.be.graph_end(false);
        }
    }
}
