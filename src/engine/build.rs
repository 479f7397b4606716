//! Building an engine from a loaded model and the TOML/flag configuration: resolve the head
//! pattern into a head layout, size the KV cache (from `kv_memory` or from what the caller needs),
//! and derive the attention settings.

use super::{DEFAULT_PREFILL_CHUNK, Engine};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::kv::{CacheShape, HeadLayout, KvCache};
use crate::model::config::ModelConfig;
use crate::model::llama::{AttnSettings, Llama};
use crate::sparse::{Config, HeadPattern, KvMemory, k_pages};

#[derive(Clone, Debug)]
pub struct EngineOptions {
    pub config: Config,
    /// Longest sequence the cache must hold when `kv_memory` is not set.
    pub max_tokens: usize,
    pub max_seqs: usize,
    pub prefill_chunk: usize,
    /// Use this head layout instead of the one the config's head pattern gives (benchmarks).
    pub layout: Option<HeadLayout>,
}

impl EngineOptions {
    /// One sequence of at most `max_tokens`, prefilled in steps of [`DEFAULT_PREFILL_CHUNK`]
    /// tokens (fewer when the sequence is shorter, so its streaming ring is no larger than it).
    pub fn new(config: Config, max_tokens: usize) -> Self {
        let prefill_chunk = DEFAULT_PREFILL_CHUNK.min(max_tokens.max(1));
        EngineOptions { config, max_tokens, max_seqs: 1, prefill_chunk, layout: None }
    }
}

/// The head layout the configuration asks for: all retrieval unless sparse attention is on with a
/// streaming ratio above 0 (which needs a head pattern).
pub fn head_layout(cfg: &ModelConfig, c: &Config) -> Result<HeadLayout> {
    let s = &c.sparse;
    if let Some(&l) = s.dense_layers.iter().find(|&&l| l >= cfg.num_layers) {
        return Err(Error::Config(format!("dense_layers names layer {l}, the model has {}", cfg.num_layers)));
    }
    if !s.enabled || s.streaming_ratio == 0.0 {
        return Ok(HeadLayout::all_retrieval(cfg.num_layers, cfg.num_kv_heads));
    }
    let pattern = match (&s.head_pattern, &s.pattern) {
        (Some(path), _) => HeadPattern::load(path)?,
        (None, Some(p)) => p.clone(),
        (None, None) => {
            return Err(Error::Config(
                "a streaming ratio above 0 needs a head pattern: run `lserve calibrate --out FILE` and pass --head-pattern FILE (or --streaming-ratio 0)".into(),
            ));
        }
    };
    // Gemma 3's local layers always stream (their sliding window); the ratio applies to the
    // global layers' heads.
    let mut excluded = s.dense_layers.clone();
    if let Some(g) = &cfg.gemma {
        excluded.extend((0..cfg.num_layers).filter(|&l| g.is_local(l)));
    }
    pattern.layout(cfg.num_layers, cfg.num_kv_heads, s.streaming_ratio, &excluded)
}

pub fn build_engine<B: Backend>(be: B, model: Llama<B>, opts: &EngineOptions) -> Result<Engine<B>> {
    let c = &opts.config;
    c.validate()?;
    let cfg = model.cfg.clone();
    let layout = match &opts.layout {
        Some(l) => l.clone(),
        None => head_layout(&cfg, c)?,
    };
    // Gemma 3's sliding-window layers keep all their KV heads in the streaming ring.
    let layout = crate::model::gemma3::local_layout(&cfg, layout);
    let s = &c.sparse;
    let ps = c.cache.physical_page;
    let attn = AttnSettings {
        sink: s.sink_tokens,
        local: s.local_tokens,
        k_pages: k_pages(s.token_budget, ps),
        page_rank: s.page_rank,
        pin_sink_page: s.pin_sink_page,
        dense_layer: (0..cfg.num_layers).map(|l| !s.enabled || s.dense_layers.contains(&l)).collect(),
        window: cfg.sliding_window.unwrap_or(0),
        // Block-sparse prefill needs page selection's summaries (sparse on); a Llama-family model
        // with a model-wide window skips it, Gemma 3 applies it to its global layers.
        prefill_k_pages: if s.enabled { s.prefill_budget / ps } else { 0 },
        prefill_dense_below: s.prefill_dense_below,
    };
    let ring_tokens = if layout.any_streaming() {
        let local = s.local_tokens.max(crate::model::gemma3::ring_window(&cfg));
        (s.sink_tokens + local + opts.prefill_chunk).div_ceil(ps) * ps
    } else {
        0
    };
    let kv_dtype = match c.kv_dtype()? {
        Some(d) => d,
        None => be.caps().kv_dtypes[0],
    };
    let mut shape = CacheShape {
        num_layers: cfg.num_layers,
        n_kv_heads: cfg.num_kv_heads,
        head_dim: cfg.head_dim,
        page_size: ps,
        logical_page: c.cache.logical_page,
        num_pages: 1,
        max_seqs: opts.max_seqs.max(1),
        ring_tokens,
        sink: s.sink_tokens,
        sel_stride: attn.k_pages.max(1),
        layout,
        kv_dtype,
    };
    shape.num_pages = match c.kv_memory()? {
        None => opts.max_tokens.max(1).div_ceil(ps) * shape.max_seqs,
        Some(m) => {
            let budget = match m {
                KvMemory::Bytes(b) => b,
                KvMemory::Fraction(f) => (be.caps().memory_bytes as f64 * f) as u64,
            };
            let rings = (shape.max_seqs * shape.ring_bytes()) as u64;
            let pages = budget.saturating_sub(rings) / shape.page_bytes().max(1) as u64;
            if pages == 0 {
                return Err(Error::Config(format!("kv_memory of {budget} bytes does not hold one page")));
            }
            pages as usize
        }
    };
    let cache = KvCache::new(&be, shape)?;
    Ok(Engine { backend: be, model, cache, attn, sparse: s.clone(), prefill_chunk: opts.prefill_chunk })
}

impl<B: Backend> Engine<B> {
    /// One line describing the cache: pages, bytes, and per-sequence cost dense vs as configured.
    pub fn kv_report(&self) -> String {
        let s = &self.cache.shape;
        let mib = |b: usize| b as f64 / (1 << 20) as f64;
        format!(
            "KV cache: {} pages x {} tokens ({:.1} MiB) + {} streaming ring(s) of {} tokens ({:.1} MiB); {} of {} KV heads stream",
            s.num_pages,
            s.page_size,
            mib(s.num_pages * s.page_bytes()),
            s.max_seqs,
            s.ring_tokens,
            mib(s.max_seqs * s.ring_bytes()),
            s.layout.streaming.iter().flatten().filter(|&&x| x).count(),
            s.num_layers * s.n_kv_heads,
        )
    }
}
