//! Building an engine from a loaded model and the TOML/flag configuration: resolve the head
//! pattern into a head layout, size the KV cache (from `kv_memory` or from what the caller needs),
//! and derive the attention settings.

use super::{DEFAULT_PREFILL_CHUNK, Engine, Rank, Shards};
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
/// streaming ratio above 0 (which needs a head pattern). A head-pattern file that is named is
/// read and checked even where it goes unused (dense, or ratio 0), so a bad file is an error
/// rather than silently ignored.
pub fn head_layout(cfg: &ModelConfig, c: &Config) -> Result<HeadLayout> {
    let s = &c.sparse;
    if let Some(&l) = s.dense_layers.iter().find(|&&l| l >= cfg.num_layers) {
        return Err(Error::Config(format!("dense_layers names layer {l}, the model has {}", cfg.num_layers)));
    }
    let named = s.head_pattern.as_deref().map(HeadPattern::load).transpose()?;
    if let Some(p) = &named {
        p.check_shape(cfg.num_layers, cfg.num_kv_heads)?;
    }
    if !s.enabled || s.streaming_ratio == 0.0 {
        return Ok(HeadLayout::all_retrieval(cfg.num_layers, cfg.num_kv_heads));
    }
    let pattern = match (named, &s.pattern) {
        (Some(p), _) => p,
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
    build_engine_tp(vec![(be, model)], opts)
}

/// An engine over tensor-parallel ranks (`Llama::load_shard`, rank order; one rank is
/// `build_engine`). Every rank's cache has the same pages, rings and slots and its own KV heads
/// (`rank_layout`); with `kv_memory` every rank's budget is its own device's, and all take the
/// fewest pages any rank's budget holds.
pub fn build_engine_tp<B: Backend>(shards: Shards<B>, opts: &EngineOptions) -> Result<Engine<B>> {
    let n = shards.len();
    let Some((be, model)) = shards.first() else {
        return Err(Error::InvalidArgument("an engine needs at least one rank".into()));
    };
    if shards.iter().enumerate().any(|(r, (_, m))| m.tp_rank() != (r, n) || (n > 1 && m.cfg != model.cfg)) {
        return Err(Error::InvalidArgument(format!("the {n} model shards are not ranks 0..{n} of one model")));
    }
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
    let unit = s.select_unit.tokens(&c.cache);
    let attn = AttnSettings {
        sink: s.sink_tokens,
        local: s.local_tokens,
        k_pages: k_pages(s.token_budget, unit),
        sel_unit: if unit == ps { 0 } else { unit },
        page_rank: s.page_rank,
        bound_shrink: s.bound_shrink,
        pin_sink_page: s.pin_sink_page,
        dense_layer: (0..cfg.num_layers).map(|l| !s.enabled || s.dense_layers.contains(&l)).collect(),
        window: cfg.sliding_window.unwrap_or(0),
        // Block-sparse prefill needs page selection's summaries (sparse on); a Llama-family model
        // with a model-wide window skips it, Gemma 3 applies it to its global layers.
        prefill_k_pages: if s.enabled { s.prefill_budget / ps } else { 0 },
        prefill_dense_below: s.prefill_dense_below,
        prefill_estimate: s.prefill_estimate,
    };
    // Rings exist when any head of the whole model streams, on every rank alike.
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
    let shape = CacheShape {
        num_layers: cfg.num_layers,
        n_kv_heads: cfg.num_kv_heads / n,
        head_dim: cfg.head_dim,
        page_size: ps,
        logical_page: c.cache.logical_page,
        num_pages: 1,
        max_seqs: opts.max_seqs.max(1),
        ring_tokens,
        sink: s.sink_tokens,
        sel_stride: attn.k_pages.max(1),
        layout: layout.clone(),
        kv_dtype,
    };
    let shapes: Vec<CacheShape> =
        (0..n).map(|r| CacheShape { layout: rank_layout(&layout, r, n), ..shape.clone() }).collect();
    let mut num_pages = usize::MAX;
    for ((be, _), sh) in shards.iter().zip(&shapes) {
        num_pages = num_pages.min(pages_for(be, c, sh, opts.max_tokens)?);
    }
    let mut ranks = Vec::with_capacity(n);
    for ((be, model), sh) in shards.into_iter().zip(shapes) {
        let cache = KvCache::new(&be, CacheShape { num_pages, ..sh })?;
        ranks.push(Rank { backend: be, model, cache });
    }
    let Rank { backend, model, cache } = ranks.remove(0);
    Ok(Engine { backend, model, cache, attn, sparse: s.clone(), prefill_chunk: opts.prefill_chunk, ranks })
}

/// Rank `r` of `n`'s slice of a head layout: KV heads `[r·Hkv/n, (r+1)·Hkv/n)` of every layer.
pub fn rank_layout(layout: &HeadLayout, r: usize, n: usize) -> HeadLayout {
    let streaming = layout
        .streaming
        .iter()
        .map(|heads| {
            let per = heads.len() / n;
            heads[r * per..(r + 1) * per].to_vec()
        })
        .collect();
    HeadLayout { streaming }
}

/// Retrieval pages of a cache of `shape`: from `kv_memory` (of `be`'s device) when set, else
/// enough for `max_seqs` sequences of `max_tokens`.
fn pages_for<B: Backend>(be: &B, c: &Config, shape: &CacheShape, max_tokens: usize) -> Result<usize> {
    let ps = shape.page_size;
    Ok(match c.kv_memory()? {
        None => max_tokens.max(1).div_ceil(ps) * shape.max_seqs,
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
    })
}

impl<B: Backend> Engine<B> {
    /// One line describing the cache: pages, bytes (every rank's), streaming heads.
    pub fn kv_report(&self) -> String {
        let s = &self.cache.shape;
        let mib = |b: usize| b as f64 / (1 << 20) as f64;
        let (mut pages, mut rings, mut streaming, mut heads) = (0, 0, 0, 0);
        for r in self.rank_shapes() {
            pages += r.num_pages * r.page_bytes();
            rings += r.max_seqs * r.ring_bytes();
            streaming += r.layout.streaming.iter().flatten().filter(|&&x| x).count();
            heads += r.num_layers * r.n_kv_heads;
        }
        let tp = match self.tp_size() {
            1 => String::new(),
            n => format!(" over {n} tensor-parallel ranks"),
        };
        format!(
            "KV cache: {} pages x {} tokens ({:.1} MiB) + {} streaming ring(s) of {} tokens ({:.1} MiB); {streaming} of {heads} KV heads stream{tp}",
            s.num_pages,
            s.page_size,
            mib(pages),
            s.max_seqs,
            s.ring_tokens,
            mib(rings),
        )
    }
}
