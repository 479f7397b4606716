//! `lserve bench`: prefill and decode latency over context lengths, dense vs sparse, on any
//! backend, with synthetic weights of a named shape generated on the device (no download).
//!
//! Decode is measured with the KV cache already holding `context` tokens: the pools, summaries
//! and rings are filled on the device with random data (`fill_random`, never zeros) instead of
//! running a prefill of that length, so a 128K point costs seconds. Each decode step is one
//! token through the whole model including the logits read-back (which is the sync point); the
//! reported time is the median over `repeats` steps after the warm-up: at least `warmup` steps
//! and at least `warmup_ms` after the first one (at most [`WARMUP_MAX_STEPS`]; the first step
//! compiles the pipelines, on a fresh H200 for over a second with the GPU idle), because a GPU that sat idle
//! while the host made the weights (quantized synthetic weights are made on the host: ~10 s for
//! Llama-3-8B) starts the decode at its idle clock. On the H200 the SM clock was 345 MHz when a
//! q4_k decode began and reached 1980 MHz only ~0.3 s later, so three warm-up steps and three
//! timed ones measured the idle clock: every kernel 3-4x slower, 33 ms a step against 9.5 ms
//! warm (docs/data/wq-h200-2026-12-02). Each row also shows the
//! bytes the step must read (weights + the KV the attention reads) and the floor those bytes imply
//! at `bandwidth_gbs`.
//!
//! Prefill (`prefill_tokens` > 0) is timed once per sparse mode: `prefill` with every head a
//! retrieval head, `prefill-sparse` with the synthetic streaming heads (`streaming_ratio`); the
//! median of up to three runs after one warm-up, per-kernel times with `profile`.

pub mod plot;

use serde::Serialize;

use crate::backend::collective::Collective;
use crate::backend::{Backend, DType, DeviceMemory, FillRandomParams};
use crate::engine::{Engine, EngineOptions, KvReads, Shards, StepHead, StepRow, build_engine_tp};
use crate::error::{Error, Result};
use crate::kv::HeadLayout;
use crate::model::config::ModelConfig;
use crate::model::llama::{Llama, Logits};
use crate::model::mix::WeightMix;
use crate::model::rope::RopeScaling;
use crate::sampling::{Sampler, SamplingParams};
use crate::sparse::Config;

/// A named model shape.
pub fn shape(name: &str) -> Result<ModelConfig> {
    let base = |vocab, hidden, inter, layers, heads, kv, theta: f32, ctx| ModelConfig {
        arch: "llama".into(),
        vocab_size: vocab,
        hidden_size: hidden,
        intermediate_size: inter,
        num_layers: layers,
        num_heads: heads,
        num_kv_heads: kv,
        head_dim: hidden / heads,
        rms_norm_eps: 1e-5,
        rope_theta: theta,
        rope_scaling: RopeScaling::None,
        max_position_embeddings: ctx,
        tie_word_embeddings: false,
        attention_bias: false,
        sliding_window: None,
        gemma: None,
        bos_token_id: None,
        eos_token_ids: vec![],
    };
    Ok(match name {
        "llama3-8b" => base(128256, 4096, 14336, 32, 32, 8, 500000.0, 131072),
        // 140 GB of bf16 weights: a tensor-parallel shape (`--tensor-parallel-size 2` and up).
        "llama3-70b" => base(128256, 8192, 28672, 80, 64, 8, 500000.0, 131072),
        "llama2-7b" => base(32000, 4096, 11008, 32, 32, 32, 10000.0, 4096),
        "qwen2.5-7b" => ModelConfig {
            arch: "qwen2".into(),
            attention_bias: true,
            ..base(152064, 3584, 18944, 28, 28, 4, 1e6, 32768)
        },
        "smollm2-135m" => ModelConfig { tie_word_embeddings: true, ..base(49152, 576, 1536, 30, 9, 3, 100000.0, 8192) },
        path if path.ends_with(".json") => {
            let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
            let v = serde_json::from_str(&text).map_err(|e| Error::Config(format!("{path}: {e}")))?;
            ModelConfig::from_hf_json(&v)?
        }
        other => {
            return Err(Error::InvalidArgument(format!(
                "unknown shape `{other}` (llama3-8b, llama3-70b, llama2-7b, qwen2.5-7b, smollm2-135m, or a config.json)"
            )));
        }
    })
}

/// A named shape for synthetic weights behind a real tokenizer (`lserve serve --synthetic`): the
/// vocabulary becomes the tokenizer's `vocab` (every id the model can sample then detokenizes; for
/// Llama-3-8B the LM head shrinks from 128256 to the tokenizer's rows, about 4% of the weight
/// bytes), and the context becomes `context` when given (RoPE is unscaled, so any length works).
pub fn synthetic_shape(name: &str, vocab: usize, context: Option<usize>) -> Result<ModelConfig> {
    let mut cfg = shape(name)?;
    if vocab == 0 {
        return Err(Error::InvalidArgument("the tokenizer has an empty vocabulary".into()));
    }
    cfg.vocab_size = vocab;
    if let Some(ctx) = context {
        if ctx == 0 {
            return Err(Error::InvalidArgument("the synthetic context must be at least 1 token".into()));
        }
        cfg.max_position_embeddings = ctx;
        cfg.rope_scaling = RopeScaling::None;
    }
    Ok(cfg)
}

#[derive(Clone, Debug)]
pub struct BenchOptions {
    pub contexts: Vec<usize>,
    /// Sequences decoded together per step (each holding `context` tokens).
    pub batches: Vec<usize>,
    pub sparse: Vec<bool>,
    pub config: Config,
    pub streaming_ratio: f32,
    /// Warm-up: at least this many steps...
    pub warmup: usize,
    /// ... and at least this long (up to [`WARMUP_MAX_STEPS`] steps; module header).
    pub warmup_ms: u64,
    pub repeats: usize,
    pub prefill_tokens: usize,
    /// Tokens per prefill step (the engine's chunk; the streaming rings grow with it).
    pub prefill_chunk: usize,
    pub bandwidth_gbs: f64,
    /// What the synthetic weights are stored as (`--dtype`).
    pub dtype: WeightMix,
    pub seed: u32,
    /// Time each kernel with GPU timestamps during the measured steps (a separate pass would be
    /// cleaner; the timestamps add a sync per submission, so the wall times of profiled runs
    /// are slightly higher).
    pub profile: bool,
    /// How each decode step ends (what comes back to the host).
    pub head: DecodeHead,
}

/// Most warm-up steps a point runs to fill `BenchOptions::warmup_ms` (the cache reserves room for
/// them): 1000 steps of a 1 ms step.
pub const WARMUP_MAX_STEPS: usize = 1000;

/// Tokens a point's sequences grow by: the longest warm-up and the timed steps.
fn max_steps(o: &BenchOptions) -> usize {
    o.warmup.max(if o.warmup_ms > 0 { WARMUP_MAX_STEPS } else { 0 }) + o.repeats
}

/// The end of a timed decode step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DecodeHead {
    /// Read the logits rows back (`StepHead::Logits`).
    Logits,
    /// Greedy on the device, only the ids come back (`StepHead::Argmax`).
    Argmax,
    /// Sampled on the device with T 0.8, top-k 40, top-p 0.95, only the ids come back
    /// (`StepHead::Sample`).
    Sample,
}

#[derive(Clone, Debug, Serialize)]
pub struct BenchRow {
    pub backend: String,
    pub shape: String,
    pub mode: String,
    pub context: usize,
    /// Sequences per decode step; times and bytes are per step (all sequences).
    pub batch: usize,
    /// KV cache storage (`--kv-dtype` spelling).
    pub kv_dtype: String,
    /// KV bytes one token occupies across all layers and KV heads (K+V, 8-bit scales included;
    /// page summaries and the streaming ring's fixed cost excluded).
    pub kv_bytes_per_token: u64,
    pub decode_ms: f64,
    pub decode_ms_min: f64,
    /// Mean over the measured steps: unlike the median it includes the page-selection steps
    /// (one in `selector_interval`).
    pub decode_ms_mean: f64,
    /// Weight bytes a step reads at least (`Llama::step_weight_bytes`: an untied embedding
    /// table counts only the batch's rows).
    pub weight_bytes: u64,
    pub kv_bytes_read: u64,
    pub floor_ms: f64,
    pub kv_read_fraction: f64,
    pub prefill_tokens: usize,
    pub prefill_ms: Option<f64>,
    /// Per op: (op, dispatches per step, GPU microseconds per step), from GPU timestamps over
    /// the measured steps (empty where the backend has no device clock).
    pub kernels: KernelTimes,
    /// Device memory the backend's allocator held at the end of the point, every rank's
    /// (`Backend::device_memory`; None where the backend does not report it).
    pub device_memory: Option<DeviceMemory>,
}

/// Per op: (op, dispatches per step, GPU microseconds per step).
pub type KernelTimes = Vec<(String, f64, f64)>;

/// Streaming heads for a synthetic model: every other KV head until `ratio` of them stream.
pub fn synthetic_layout(cfg: &ModelConfig, ratio: f32) -> HeadLayout {
    let total = cfg.num_layers * cfg.num_kv_heads;
    let n = ((total as f32) * ratio).round() as usize;
    let mut l = HeadLayout::all_retrieval(cfg.num_layers, cfg.num_kv_heads);
    for i in 0..n {
        let (layer, head) = (i % cfg.num_layers, (2 * (i / cfg.num_layers)) % cfg.num_kv_heads);
        let head = if l.streaming[layer][head] { (head + 1) % cfg.num_kv_heads } else { head };
        l.streaming[layer][head] = true;
    }
    l
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() { 0.0 } else { v[v.len() / 2] }
}

/// Long (about 100 lines): the point's phases (engine and filled cache, warm-up and timed steps,
/// the kernel profile, the row) share the engine, the sequences and the timings.
/// One (context, batch, mode) point on the ranks `shards` (one: no tensor parallelism); returns
/// the row and hands the shards back. Under tensor parallelism the weight bytes, KV bytes read
/// and floor are one rank's (the ranks stream their shares at once) and the backend column is
/// `<backend>-tp<N>`; the kernel times are rank 0's, collectives included (`all_reduce`).
fn point<B: Backend>(
    shards: Shards<B>,
    shape_name: &str,
    (context, batch): (usize, usize),
    sparse: bool,
    o: &BenchOptions,
) -> Result<(BenchRow, Shards<B>)> {
    let mut config = o.config.clone();
    config.sparse.enabled = sparse;
    config.sparse.dense_below = 0;
    let cfg = shards[0].1.cfg.clone();
    let layout = sparse.then(|| synthetic_layout(&cfg, o.streaming_ratio));
    let opts = EngineOptions { layout, max_seqs: batch, ..EngineOptions::new(config, context + max_steps(o) + 1) };
    let tp = shards.len();
    let weight_bytes = shards.iter().map(|(be, m)| m.step_weight_bytes(be, batch) as u64).max().unwrap_or(0);
    let backend = backend_label(&shards[0].0, tp);
    let mut e = build_engine_tp(shards, &opts)?;
    let mut seqs = vec![];
    for _ in 0..batch {
        let mut seq = e.cache.admit()?;
        e.cache.reserve(&mut seq, context)?;
        seq.len = context;
        seqs.push(seq);
    }
    fill_caches(&mut e, o.seed)?;
    let mut times = vec![];
    let mut sampler = Sampler::new(SamplingParams { temperature: 0.8, top_k: 40, top_p: 0.95, seed: o.seed as u64 });
    let mut reads = KvReads::default();
    let mut kernels = vec![];
    // Steps of the warm-up, once it is over (module header).
    let mut warm: Option<usize> = None;
    let warm_for = std::time::Duration::from_millis(o.warmup_ms);
    let max_warmup = o.warmup.max(WARMUP_MAX_STEPS);
    // When the first step ended (module header).
    let mut start = std::time::Instant::now();
    for i in 0.. {
        if i == 1 {
            start = std::time::Instant::now();
        }
        let long = i >= 1 && start.elapsed() >= warm_for;
        if warm.is_none() && i >= o.warmup && (long || i >= max_warmup || o.warmup_ms == 0) {
            warm = Some(i);
            if o.profile {
                set_profiling(&e, true)?;
            }
        }
        if warm.is_some_and(|w| i >= w + o.repeats) {
            break;
        }
        let t = std::time::Instant::now();
        let tokens: Vec<u32> = (0..batch).map(|b| ((i + b) % 1000) as u32 + 1).collect();
        let settings: Vec<[u32; 4]> = (0..batch).map(|_| sampler.device_settings()).collect();
        let head = match o.head {
            DecodeHead::Logits => StepHead::Logits(None),
            DecodeHead::Argmax => StepHead::Argmax,
            DecodeHead::Sample => StepHead::Sample(&settings),
        };
        let mut rows: Vec<StepRow> = seqs
            .iter_mut()
            .zip(&tokens)
            .map(|(seq, t)| StepRow { seq, tokens: std::slice::from_ref(t), logits: Logits::Last })
            .collect();
        drop(e.step_rows(&mut rows, head)?);
        if warm.is_some() {
            times.push(t.elapsed().as_secs_f64() * 1e3);
            seqs.iter().for_each(|seq| e.count_reads(seq, &mut reads));
        }
    }
    if o.profile {
        let n = o.repeats.max(1) as f64;
        e.backend.bind_thread()?;
        kernels =
            e.backend.take_profile().into_iter().map(|(op, calls, ns)| (op, calls as f64 / n, ns / n / 1e3)).collect();
        set_profiling(&e, false)?;
    }
    let device_memory = device_memory(&e);
    for seq in seqs.iter_mut() {
        e.cache.release(seq)?;
    }
    let kv_token_bytes = e.cache.shape.kv_bytes_per_token_head() as u64;
    let kv_bytes_read = reads.read / o.repeats.max(1) as u64 * kv_token_bytes / tp as u64;
    let floor_ms = (weight_bytes + kv_bytes_read) as f64 / (o.bandwidth_gbs * 1e9) * 1e3;
    let min = times.iter().copied().fold(f64::INFINITY, f64::min);
    let mean = times.iter().sum::<f64>() / times.len().max(1) as f64;
    let row = BenchRow {
        backend,
        shape: shape_name.to_string(),
        mode: if sparse { "sparse" } else { "dense" }.into(),
        context,
        batch,
        kv_dtype: e.cache.shape.kv_dtype.kv_name().into(),
        kv_bytes_per_token: kv_token_bytes * (cfg.num_layers * cfg.num_kv_heads) as u64,
        decode_ms: median(&mut times),
        decode_ms_min: min,
        decode_ms_mean: mean,
        weight_bytes,
        kv_bytes_read,
        floor_ms,
        kv_read_fraction: reads.fraction(),
        prefill_tokens: 0,
        prefill_ms: None,
        kernels,
        device_memory,
    };
    Ok((row, e.into_shards()))
}

/// Every rank's `Backend::device_memory`, summed; None if a rank does not report it.
fn device_memory<B: Backend>(e: &Engine<B>) -> Option<DeviceMemory> {
    let mut all = e.backend.device_memory()?;
    for r in &e.ranks {
        let m = r.backend.device_memory()?;
        all.buffers += m.buffers;
        all.reserved += m.reserved;
    }
    Some(all)
}

/// The backend column: the backend's name, `-tp<N>` under tensor parallelism.
fn backend_label<B: Backend>(be: &B, tp: usize) -> String {
    match tp {
        1 => be.caps().name.to_string(),
        n => format!("{}-tp{n}", be.caps().name),
    }
}

/// Profiling on or off on every rank (each with its device current).
fn set_profiling<B: Backend>(e: &Engine<B>, on: bool) -> Result<()> {
    for be in std::iter::once(&e.backend).chain(e.ranks.iter().map(|r| &r.backend)) {
        be.bind_thread()?;
        be.set_profiling(on)?;
    }
    e.backend.bind_thread()
}

/// `fill_cache` on every rank's cache.
fn fill_caches<B: Backend>(e: &mut Engine<B>, seed: u32) -> Result<()> {
    for r in e.ranks.iter_mut() {
        r.backend.bind_thread()?;
        fill_cache(&r.backend, &mut r.cache, seed)?;
    }
    e.backend.bind_thread()?;
    fill_cache(&e.backend, &mut e.cache, seed)
}

/// Fill every pool, summary and ring of the cache with random values on the device. 8-bit pools
/// are filled as f32 words (random code bytes, and scales that are random f32 values in [-1, 1)
/// or pieces of them): the timing does not depend on the values.
fn fill_cache<B: Backend>(be: &B, cache: &mut crate::kv::KvCache<B>, seed: u32) -> Result<()> {
    for (l, store) in cache.layers.iter_mut().enumerate() {
        for (j, b) in
            [&mut store.k, &mut store.v, &mut store.summary, &mut store.sk, &mut store.sv].into_iter().enumerate()
        {
            let kv8 = be.dtype(b).is_kv8();
            let n = if kv8 { be.len(b) / 4 } else { be.len(b) } as u32;
            let dtype = match be.dtype(b) {
                DType::F16 => 1,
                DType::BF16 => 2,
                _ => 0,
            };
            let p = FillRandomParams {
                n,
                seed: seed ^ (l * 8 + j) as u32,
                scale: 1.0,
                offset: 0.0,
                dtype,
                ..Default::default()
            };
            be.fill_random(&p, b)?;
        }
    }
    be.sync()
}

/// Prefill time of `tokens` tokens (chunked as the engine does), median of `repeats`; `sparse`
/// runs it with the synthetic streaming heads (their Lambda-masked prefill attention).
fn prefill<B: Backend>(
    shards: Shards<B>,
    tokens: usize,
    sparse: bool,
    o: &BenchOptions,
) -> Result<(f64, KernelTimes, Option<DeviceMemory>, Shards<B>)> {
    let mut config = o.config.clone();
    config.sparse.enabled = sparse;
    let layout = sparse.then(|| synthetic_layout(&shards[0].1.cfg, o.streaming_ratio));
    let opts = EngineOptions { layout, prefill_chunk: o.prefill_chunk.max(1), ..EngineOptions::new(config, tokens) };
    let mut e = build_engine_tp(shards, &opts)?;
    let ids: Vec<u32> = (0..tokens).map(|i| (i % 1000) as u32 + 1).collect();
    let mut times = vec![];
    let runs = 1 + o.repeats.min(3);
    for i in 0..runs {
        if i == 1 && o.profile {
            set_profiling(&e, true)?;
        }
        let mut seq = e.cache.admit()?;
        let t = std::time::Instant::now();
        for chunk in ids.chunks(e.prefill_chunk) {
            e.step(&mut seq, chunk, Logits::None, None)?;
        }
        for be in e.ranks.iter().map(|r| &r.backend) {
            be.sync()?;
        }
        e.backend.sync()?;
        if i > 0 {
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        e.cache.release(&mut seq)?;
    }
    let mut kernels = vec![];
    if o.profile && runs > 1 {
        let n = (runs - 1) as f64;
        e.backend.bind_thread()?;
        kernels =
            e.backend.take_profile().into_iter().map(|(op, calls, ns)| (op, calls as f64 / n, ns / n / 1e3)).collect();
        set_profiling(&e, false)?;
    }
    let memory = device_memory(&e);
    Ok((median(&mut times), kernels, memory, e.into_shards()))
}

/// Run the whole sweep for one shape on `be`.
pub fn run<B: Backend>(be: B, shape_name: &str, o: &BenchOptions, log: impl FnMut(&BenchRow)) -> Result<Vec<BenchRow>> {
    run_tp(vec![be], vec![], shape_name, o, log)
}

/// `run` over tensor-parallel ranks: `backends` in rank order joined by `comms` (one each; none
/// for a single rank), each holding its shard of the synthetic weights (`Llama::synthetic_shard`).
pub fn run_tp<B: Backend>(
    backends: Vec<B>,
    comms: Vec<Box<dyn Collective<B>>>,
    shape_name: &str,
    o: &BenchOptions,
    mut log: impl FnMut(&BenchRow),
) -> Result<Vec<BenchRow>> {
    let mut cfg = shape(shape_name)?;
    let max_ctx = o.contexts.iter().copied().max().unwrap_or(0) + max_steps(o) + 1;
    cfg.max_position_embeddings = cfg.max_position_embeddings.max(max_ctx).max(o.prefill_tokens);
    let tp = backends.len();
    let kv = match o.config.kv_dtype()? {
        Some(d) => d,
        None => backends[0].caps().kv_dtypes[0],
    };
    let mut shards = Vec::with_capacity(tp);
    if comms.is_empty() {
        let be = backends.into_iter().next().ok_or_else(|| Error::InvalidArgument("no backend".into()))?;
        let model = Llama::synthetic(&be, &cfg, o.dtype, o.seed)?;
        shards.push((be, model));
    } else {
        for (be, comm) in backends.into_iter().zip(comms) {
            be.bind_thread()?;
            let model = Llama::synthetic_shard(&be, &cfg, o.dtype, o.seed, comm)?;
            shards.push((be, model));
        }
    }
    let (kv_dtype, kv_bytes_per_token) = (
        kv.kv_name().to_string(),
        (2 * crate::backend::kv_pool_len(kv, 1, cfg.head_dim) * kv.size() * cfg.num_layers * cfg.num_kv_heads) as u64,
    );
    let mut rows = vec![];
    for &sparse in o.sparse.iter().filter(|_| o.prefill_tokens > 0) {
        let (ms, kernels, device_memory, s) = prefill(shards, o.prefill_tokens, sparse, o)?;
        shards = s;
        let row = BenchRow {
            backend: backend_label(&shards[0].0, tp),
            shape: shape_name.into(),
            mode: if sparse { "prefill-sparse" } else { "prefill" }.into(),
            context: o.prefill_tokens,
            batch: 1,
            kv_dtype: kv_dtype.clone(),
            kv_bytes_per_token,
            decode_ms: 0.0,
            decode_ms_min: 0.0,
            decode_ms_mean: 0.0,
            weight_bytes: 0,
            kv_bytes_read: 0,
            floor_ms: 0.0,
            kv_read_fraction: 1.0,
            prefill_tokens: o.prefill_tokens,
            prefill_ms: Some(ms),
            kernels,
            device_memory,
        };
        log(&row);
        rows.push(row);
    }
    let batches = if o.batches.is_empty() { vec![1] } else { o.batches.clone() };
    for &ctx in &o.contexts {
        for &batch in &batches {
            for &sparse in &o.sparse {
                let (row, s) = point(shards, shape_name, (ctx, batch.max(1)), sparse, o)?;
                shards = s;
                log(&row);
                rows.push(row);
            }
        }
    }
    Ok(rows)
}
