//! `lserve serve`: load the model on the engine thread, then run the HTTP server on a tokio
//! runtime in this thread until ctrl-c / SIGTERM. With `--synthetic SHAPE` the weights are
//! generated on the device (`Llama::synthetic`) and only the tokenizer and chat template are read
//! from `--model`; the shape's vocabulary is the tokenizer's (`bench::synthetic_shape`).

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail};
use lserve::backend::Backend;
use lserve::engine::{EngineOptions, build_engine_tp};
use lserve::loader::{LoadedModel, WeightSource};
use lserve::model::config::ModelConfig;
use lserve::model::weights::LoadOptions;
use lserve::sched::{PreemptMode, SchedConfig};
use lserve::server::{AppState, Metrics, ModelInfo, ServerOptions, engine_loop};
use lserve::serving::{ServeEngine, ServeOptions};
use lserve::sparse::Config;
use lserve::sparse::config::parse_flag_bytes;

use super::run::{load_options, parse_device, resolve_config};
use super::tp::Ranks;
use super::{Preempt, ServeArgs};

const DEFAULT_KV_MEMORY: &str = "1GiB";
/// Seed of `--synthetic` weights (fixed, so two servers of one shape serve the same model).
const SYNTHETIC_SEED: u32 = 1;

fn bytes(flag: &str, s: &str) -> Result<usize> {
    let b = parse_flag_bytes(flag, s)?;
    usize::try_from(b).map_err(|_| anyhow!("--{flag} {s}: too large"))
}

/// Most sequence slots `serve` takes (`--max-num-seqs`): the KV cache's per-slot tables.
pub const MAX_NUM_SEQS: usize = 1 << 16;
/// Most open connections (`--max-connections`).
pub const MAX_CONNECTIONS: usize = 1 << 20;
/// Longest header / body timeout, seconds (one day).
pub const MAX_TIMEOUT_S: usize = 86_400;

/// `lserve serve`. Long (about 90 lines): the flags are checked and turned into the engine,
/// scheduler and server options one after another, each with its own error, then the model is
/// loaded and served; the steps share most of the values, so the sequence stays in one place.
pub fn serve(a: ServeArgs) -> Result<()> {
    let device = parse_device(&a.model.device)?;
    let dtype = load_options(&a.model)?;
    let mut config = resolve_config(a.sparse, &a.tuning)?;
    if config.cache.kv_memory.is_none() {
        // A server sizes its pool up front; 1 GiB unless --kv-memory / [cache] kv_memory says.
        config.cache.kv_memory = Some(DEFAULT_KV_MEMORY.into());
    }
    for (flag, v) in [
        ("max-num-seqs", a.max_num_seqs),
        ("max-num-batched-tokens", a.max_num_batched_tokens),
        ("prefill-chunk", a.prefill_chunk),
        ("max-connections", a.max_connections),
        ("header-timeout", a.header_timeout as usize),
        ("body-timeout", a.body_timeout as usize),
    ] {
        if v == 0 {
            bail!("--{flag} 0: must be at least 1");
        }
    }
    // Upper bounds: what sizes memory (sequence slots, chunks), tokio's semaphore, and deadlines
    // added to the clock (hyper panics in every connection on an Instant overflow).
    let positions = lserve::model::config::MAX_POSITIONS;
    for (flag, v, max) in [
        ("max-num-seqs", a.max_num_seqs, MAX_NUM_SEQS),
        ("max-num-batched-tokens", a.max_num_batched_tokens, positions),
        ("prefill-chunk", a.prefill_chunk, positions),
        ("max-connections", a.max_connections, MAX_CONNECTIONS),
        ("header-timeout", a.header_timeout as usize, MAX_TIMEOUT_S),
        ("body-timeout", a.body_timeout as usize, MAX_TIMEOUT_S),
    ] {
        if v > max {
            bail!("--{flag} {v}: must be at most {max}");
        }
    }
    let swap_bytes = bytes("swap-space", &a.swap_space)?;
    let max_body_bytes = bytes("max-body", &a.max_body)?;
    let addr: SocketAddr = (a.host.as_str(), a.port)
        .to_socket_addrs()
        .with_context(|| format!("--host {} --port {}", a.host, a.port))?
        .next()
        .ok_or_else(|| anyhow!("--host {}: no address", a.host))?;
    let m = super::run::open_model(&a.model)?;
    if a.synthetic.is_none() {
        // A shipped head pattern by model identity (not for synthetic weights: other shapes).
        super::run::resolve_pattern(&mut config, &m);
    }
    let stop_ids = m.stop_ids();
    let (name, cfg, weights) = match &a.synthetic {
        None => (model_name(&a.model.model, &m), m.config.clone(), Weights::File(m.weights)),
        Some(shape) => {
            let cfg = lserve::bench::synthetic_shape(shape, m.tokenizer.vocab_size(), a.synthetic_context)?;
            let name =
                format!("synthetic-{}", Path::new(shape).file_stem().map_or(shape.into(), |s| s.to_string_lossy()));
            (name, cfg, Weights::Synthetic)
        }
    };
    lserve::model::shard::shard_config(&cfg, a.tp.tensor_parallel_size)?;
    let name = a.served_model_name.clone().unwrap_or(name);
    let LoadedModel { tokenizer, template, .. } = m;
    let tokenizer = Arc::new(tokenizer);
    let sched = SchedConfig {
        max_num_seqs: a.max_num_seqs,
        max_batch_tokens: a.max_num_batched_tokens,
        prefill_chunk: a.prefill_chunk,
        page_size: config.cache.physical_page,
        preempt: if a.preempt == Preempt::Swap { PreemptMode::Swap } else { PreemptMode::Recompute },
    };
    let load =
        Load { cfg, weights, dtype, config, tokenizer: tokenizer.clone(), opts: ServeOptions { sched, swap_bytes } };
    let tp = a.tp.clone();
    let (cmd_tx, cmd_rx) = tokio::sync::mpsc::unbounded_channel();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<std::result::Result<usize, String>>();
    let metrics = Arc::new(Metrics::default());
    let m2 = metrics.clone();
    std::thread::Builder::new().name("lserve-engine".into()).spawn(move || {
        let r = (|| -> Result<()> {
            super::tp::on_ranks!(device, &tp, ranks => {
                let se = load.build(ranks)?;
                eprintln!("{}", se.engine.kv_report());
                let _ = ready_tx.send(Ok(se.max_request_tokens()));
                engine_loop(se, cmd_rx, m2);
                Ok(())
            })
        })();
        if let Err(e) = r {
            let _ = ready_tx.send(Err(format!("{e:#}")));
        }
    })?;
    let max_request_tokens = match ready_rx.recv() {
        Ok(Ok(n)) => n,
        Ok(Err(e)) => bail!(e),
        Err(_) => bail!("the engine thread stopped while loading"),
    };
    let info = ModelInfo { name, tokenizer, template, stop_ids, max_request_tokens };
    let api_key = a.api_key.or_else(|| std::env::var("LSERVE_API_KEY").ok()).filter(|k| !k.is_empty());
    let opts = ServerOptions {
        max_body_bytes,
        header_timeout: std::time::Duration::from_secs(a.header_timeout),
        body_timeout: std::time::Duration::from_secs(a.body_timeout),
        max_connections: a.max_connections,
        ..ServerOptions::new(addr, api_key, a.max_num_seqs.saturating_add(a.max_queue))
    };
    let state = AppState::new(cmd_tx, info, metrics, opts);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(lserve::server::run(state)).context("the HTTP server failed")?;
    Ok(())
}

/// The default served name: the alias as given, else the file stem or folder name.
fn model_name(arg: &Option<String>, m: &LoadedModel) -> String {
    match arg {
        None => lserve::fetch::DEFAULT_MODEL.to_string(),
        Some(a) if lserve::fetch::alias_path(a).is_some() => a.clone(),
        Some(_) => m.path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into()),
    }
}

/// Where the served weights come from.
enum Weights {
    File(Box<dyn WeightSource>),
    /// Generated on the device from a fixed seed (`--synthetic`).
    Synthetic,
}

/// Everything the engine thread needs to build the serving engine.
struct Load {
    cfg: ModelConfig,
    weights: Weights,
    dtype: LoadOptions,
    config: Config,
    tokenizer: Arc<lserve::tokenizer::TextTokenizer>,
    opts: ServeOptions,
}

impl Load {
    /// The serving engine over the tensor-parallel `ranks` (one rank: no tensor parallelism).
    fn build<B: Backend>(self, ranks: Ranks<B>) -> Result<ServeEngine<B>> {
        let synthetic = matches!(self.weights, Weights::Synthetic);
        let shards = match self.weights {
            Weights::File(w) => super::tp::load(ranks, &self.cfg, w.as_ref(), &self.dtype, &|_, _| {})?,
            Weights::Synthetic => {
                super::tp::synthetic(ranks, &self.cfg, self.dtype.quantize.or(self.dtype.dtype), SYNTHETIC_SEED)?
            }
        };
        let max_seqs = self.opts.sched.max_num_seqs;
        // Synthetic weights have no calibrated head pattern: with --sparse on and no
        // --head-pattern, the bench's synthetic one (every other KV head, `streaming_ratio` of them).
        let s = &self.config.sparse;
        let layout = (synthetic && s.enabled && s.head_pattern.is_none())
            .then(|| lserve::bench::synthetic_layout(&self.cfg, s.streaming_ratio));
        let eopts = EngineOptions {
            config: self.config,
            max_tokens: self.cfg.context_len(),
            max_seqs,
            prefill_chunk: self.opts.sched.prefill_chunk,
            layout,
        };
        let engine = build_engine_tp(shards, &eopts)?;
        Ok(ServeEngine::new(engine, self.tokenizer, self.opts)?)
    }
}
