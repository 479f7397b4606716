//! `lserve serve`: load the model on the engine thread, then run the HTTP server on a tokio
//! runtime in this thread until ctrl-c / SIGTERM.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail};
use lserve::backend::{Backend, DType};
use lserve::engine::{EngineOptions, build_engine};
use lserve::loader::{LoadedModel, WeightSource};
use lserve::model::config::ModelConfig;
use lserve::sched::{PreemptMode, SchedConfig};
use lserve::server::{AppState, Metrics, ModelInfo, ServerOptions, engine_loop};
use lserve::serving::{ServeEngine, ServeOptions};
use lserve::sparse::config::parse_memory;
use lserve::sparse::{Config, KvMemory};

use super::run::{on_device, parse_device, parse_dtype, resolve_config};
use super::{Preempt, ServeArgs};

const DEFAULT_KV_MEMORY: &str = "1GiB";

fn bytes(flag: &str, s: &str) -> Result<usize> {
    match parse_memory(s)? {
        KvMemory::Bytes(b) => Ok(b as usize),
        KvMemory::Fraction(_) => bail!("--{flag} {s}: give a size in bytes (e.g. 4GiB)"),
    }
}

pub fn serve(a: ServeArgs) -> Result<()> {
    let device = parse_device(&a.model.device)?;
    let dtype = parse_dtype(&a.model.dtype)?;
    let mut config = resolve_config(a.sparse, &a.tuning)?;
    if config.cache.kv_memory.is_none() {
        // A server sizes its pool up front; 1 GiB unless --kv-memory / [cache] kv_memory says.
        config.cache.kv_memory = Some(DEFAULT_KV_MEMORY.into());
    }
    if a.max_num_seqs == 0 || a.max_num_batched_tokens == 0 || a.prefill_chunk == 0 {
        bail!("--max-num-seqs, --max-num-batched-tokens and --prefill-chunk must be at least 1");
    }
    let swap_bytes = bytes("swap-space", &a.swap_space)?;
    let max_body_bytes = bytes("max-body", &a.max_body)?;
    let addr: SocketAddr = (a.host.as_str(), a.port)
        .to_socket_addrs()
        .with_context(|| format!("--host {} --port {}", a.host, a.port))?
        .next()
        .ok_or_else(|| anyhow!("--host {}: no address", a.host))?;
    let m = super::run::open_model(&a.model)?;
    let name = a.served_model_name.clone().unwrap_or_else(|| model_name(&a.model.model, &m));
    let stop_ids = m.stop_ids();
    let LoadedModel { config: cfg, tokenizer, template, weights, .. } = m;
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
    let (cmd_tx, cmd_rx) = tokio::sync::mpsc::unbounded_channel();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<std::result::Result<usize, String>>();
    let metrics = Arc::new(Metrics::default());
    let m2 = metrics.clone();
    std::thread::Builder::new().name("lserve-engine".into()).spawn(move || {
        let r = (|| -> Result<()> {
            on_device!(device, be => {
                let se = load.build(be)?;
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
    let opts = ServerOptions {
        addr,
        api_key: a.api_key.or_else(|| std::env::var("LSERVE_API_KEY").ok()).filter(|k| !k.is_empty()),
        max_inflight: a.max_num_seqs + a.max_queue,
        max_body_bytes,
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

/// Everything the engine thread needs to build the serving engine.
struct Load {
    cfg: ModelConfig,
    weights: Box<dyn WeightSource>,
    dtype: Option<DType>,
    config: Config,
    tokenizer: Arc<lserve::tokenizer::TextTokenizer>,
    opts: ServeOptions,
}

impl Load {
    fn build<B: Backend>(self, be: B) -> Result<ServeEngine<B>> {
        let model = lserve::model::llama::Llama::load_as(&be, &self.cfg, self.weights.as_ref(), self.dtype, |_, _| {})?;
        drop(self.weights);
        let max_seqs = self.opts.sched.max_num_seqs;
        let eopts = EngineOptions {
            config: self.config,
            max_tokens: self.cfg.context_len(),
            max_seqs,
            prefill_chunk: self.opts.sched.prefill_chunk,
            layout: None,
        };
        let engine = build_engine(be, model, &eopts)?;
        Ok(ServeEngine::new(engine, self.tokenizer, self.opts)?)
    }
}
