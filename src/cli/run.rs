//! The sub-commands' bodies.

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use lserve::backend::Backend;
use lserve::backend::DType;
use lserve::chat::ChatMessage;
use lserve::engine::{EngineOptions, GenerateRequest, build_engine, build_engine_tp};
use lserve::loader::{self, LoadedModel};
use lserve::model::llama::Llama;
use lserve::model::mix::WeightMix;
use lserve::model::weights::{LoadOptions, WeightMode};
use lserve::sampling::SamplingParams;
use lserve::sparse::{Config, PageRank, PrefillEstimate, SelectUnit};
use lserve::tokenizer::StreamDecoder;
use serde_json::json;

use super::tp::Ranks;
use super::{
    GenerateArgs, ModelArgs, OnOff, Output, PageRankArg, PrefillEstimateArg, QuantizeArg, ScoreArgs, SelectUnitArg,
    SparseArgs, VocabOnlyArgs, WeightsArg,
};

/// The backend a `--device` value names. `auto` takes CUDA device 0 when a CUDA driver and GPU are
/// present, else a GPU adapter through wgpu (not a CPU emulation such as lavapipe), else the CPU
/// backend. An explicit `cuda` on a machine without a driver fails with a clear error when the
/// backend opens, never silently replaced.
#[derive(Clone, Copy, Debug)]
pub enum Device {
    Cpu,
    #[cfg(feature = "wgpu")]
    Wgpu(Option<usize>),
    #[cfg(feature = "cuda")]
    Cuda(usize),
}

pub fn parse_device(s: &str) -> Result<Device> {
    let (kind, index) = s.split_once(':').map_or((s, None), |(k, i)| (k, Some(i)));
    let index = match index {
        Some(i) => Some(i.parse::<usize>().with_context(|| format!("--device {s}: `{i}` is not an adapter number"))?),
        None => None,
    };
    match kind {
        "cpu" if index.is_none() => Ok(Device::Cpu),
        "auto" if index.is_none() => Ok(auto_device()),
        #[cfg(feature = "wgpu")]
        "wgpu" => Ok(Device::Wgpu(index)),
        #[cfg(feature = "cuda")]
        "cuda" => Ok(Device::Cuda(index.unwrap_or(0))),
        #[cfg(not(feature = "cuda"))]
        "cuda" => bail!("--device {s}: this build has no CUDA backend (build with --features cuda)"),
        _ => bail!("--device {s}: expected auto, cpu, wgpu[:N] or cuda[:N]"),
    }
}

fn auto_device() -> Device {
    #[cfg(feature = "cuda")]
    if lserve::backend::probe::cuda_device_count() > 0 {
        return Device::Cuda(0);
    }
    #[cfg(feature = "wgpu")]
    if let Some(i) = lserve::backend::probe::first_gpu_adapter() {
        return Device::Wgpu(Some(i));
    }
    Device::Cpu
}

/// Run `$body` with `$be` bound to the backend `$dev` names (the body is instantiated per backend).
macro_rules! on_device {
    ($dev:expr, $be:ident => $body:expr) => {
        match $dev {
            $crate::cli::run::Device::Cpu => {
                let $be = lserve::backend::cpu::CpuBackend::new();
                $body
            }
            #[cfg(feature = "wgpu")]
            $crate::cli::run::Device::Wgpu(i) => {
                let $be = lserve::backend::wgpu::WgpuBackend::new(i)?;
                $body
            }
            #[cfg(feature = "cuda")]
            $crate::cli::run::Device::Cuda(i) => {
                let opts = lserve::backend::cuda::CudaOptions {
                    kernel_cache: Some(lserve::fetch::cache_dir().join("cuda")),
                    ..Default::default()
                };
                let $be = lserve::backend::cuda::CudaBackend::with_options(i, opts)?;
                $body
            }
        }
    };
}
pub(crate) use on_device;

/// `--dtype` of a model: the float type of the matrices held as floats.
pub fn parse_dtype(s: &str) -> Result<Option<DType>> {
    Ok(match s {
        "auto" => None,
        "f32" => Some(DType::F32),
        "f16" => Some(DType::F16),
        "bf16" => Some(DType::BF16),
        _ => bail!("--dtype {s}: expected auto, f32, f16 or bf16"),
    })
}

/// Every weight type by its flag name: the float types, the GGML block types every backend's
/// kernels cover (q4_0 ... q6_k), int8 and fp8.
pub fn weight_types() -> Vec<DType> {
    let mut v = vec![DType::F32, DType::F16, DType::BF16, DType::I8Row, DType::F8Row];
    v.extend(lserve::backend::reference::weight_quant::GGML_WEIGHT_TYPES.iter().map(|&t| DType::Ggml(t)));
    v
}

/// `bench --dtype`: any weight type (synthetic weights are made in it), or `q4_k_m` (llama.cpp's
/// Q4_K_M mix of Q4_K and Q6_K, `lserve::model::mix`).
pub fn parse_weight_dtype(s: &str) -> Result<WeightMix> {
    let uniform = weight_types().into_iter().map(WeightMix::Uniform);
    let all: Vec<WeightMix> = [WeightMix::Auto, WeightMix::Q4KM].into_iter().chain(uniform).collect();
    match all.iter().find(|m| m.name() == s) {
        Some(&m) => Ok(m),
        None => {
            let names: Vec<String> = all.iter().map(|m| m.name()).collect();
            bail!("--dtype {s}: expected one of {}", names.join(", "))
        }
    }
}

/// `--dtype`, `--weights` and `--quantize` of a model command.
pub fn load_options(a: &ModelArgs) -> Result<LoadOptions> {
    let weights = match a.weights {
        WeightsArg::Native => WeightMode::Native,
        WeightsArg::Dequant => WeightMode::Dequant,
    };
    let quantize = a.quantize.map(|q| match q {
        QuantizeArg::Int8 => DType::I8Row,
        QuantizeArg::Fp8 => DType::F8Row,
    });
    Ok(LoadOptions { dtype: parse_dtype(&a.dtype)?, weights, quantize })
}

/// The TOML file (if any) with the flags applied on top, validated.
pub fn resolve_config(sparse: Option<OnOff>, a: &SparseArgs) -> Result<Config> {
    let mut c = match &a.config {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    };
    let s = &mut c.sparse;
    if let Some(v) = sparse {
        s.enabled = v == OnOff::On;
    }
    s.token_budget = a.token_budget.unwrap_or(s.token_budget);
    s.streaming_ratio = a.streaming_ratio.unwrap_or(s.streaming_ratio);
    s.selector_interval = a.selector_interval.unwrap_or(s.selector_interval);
    s.dense_below = a.dense_below.unwrap_or(s.dense_below);
    if let Some(v) = a.pin_sink_page {
        s.pin_sink_page = v == OnOff::On;
    }
    s.prefill_budget = a.prefill_budget.unwrap_or(s.prefill_budget);
    s.prefill_dense_below = a.prefill_dense_below.unwrap_or(s.prefill_dense_below);
    s.bound_shrink = a.bound_shrink.unwrap_or(s.bound_shrink);
    if let Some(v) = a.prefill_estimate {
        s.prefill_estimate = match v {
            PrefillEstimateArg::Antidiagonal => PrefillEstimate::Antidiagonal,
            PrefillEstimateArg::MeanBound => PrefillEstimate::MeanBound,
        };
    }
    if let Some(v) = a.select_unit {
        s.select_unit = match v {
            SelectUnitArg::Physical => SelectUnit::Physical,
            SelectUnitArg::Logical => SelectUnit::Logical,
        };
    }
    if let Some(v) = a.page_rank {
        s.page_rank = match v {
            PageRankArg::Max => PageRank::Max,
            PageRankArg::HeadNorm => PageRank::HeadNorm,
        };
    }
    if a.head_pattern.is_some() {
        s.head_pattern = a.head_pattern.clone();
    }
    c.cache.physical_page = a.physical_page.unwrap_or(c.cache.physical_page);
    c.cache.logical_page = a.logical_page.unwrap_or(c.cache.logical_page);
    if let Some(m) = &a.kv_memory {
        lserve::sparse::config::parse_size(m, true).map_err(|e| anyhow::anyhow!("--kv-memory {m}: {e}"))?;
        c.cache.kv_memory = Some(m.clone());
    }
    if let Some(d) = &a.kv_dtype {
        c.cache.kv_dtype = d.clone();
    }
    c.validate()?;
    Ok(c)
}

pub fn open_model(args: &ModelArgs) -> Result<LoadedModel> {
    let path = lserve::fetch::resolve_model(args.model.as_deref())?;
    Ok(loader::open(&path)?)
}

pub fn load_weights<B: Backend>(be: &B, m: &LoadedModel, opts: LoadOptions) -> Result<Llama<B>> {
    let bar = ProgressBar::new(m.config.num_layers as u64);
    bar.set_style(ProgressStyle::with_template("loading {msg} [{bar:30}] {pos}/{len} layers").expect("valid template"));
    bar.set_message(m.path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default());
    let model = Llama::load_with(be, &m.config, m.weights.as_ref(), &opts, |i, _| bar.set_position(i as u64));
    bar.finish_and_clear();
    let model = model?;
    warn_if_nothing_quantized(&opts, &model.weight_bytes_by_type(be));
    Ok(model)
}

/// `--quantize` applies to matrices held as floats; a file whose matrices are all quantized
/// already keeps them as they are (`--weights native`), so the flag changed nothing: say so.
fn warn_if_nothing_quantized(opts: &LoadOptions, by_type: &std::collections::BTreeMap<String, usize>) {
    if let Some(q) = opts.quantize
        && !by_type.contains_key(&q.weight_name())
    {
        tracing::warn!(
            "--quantize {q}: every matrix of this model is quantized in the file and kept as it is, so none was \
             quantized (add --weights dequant to quantize the dequantized values instead)",
            q = q.weight_name()
        );
    }
}

/// Every rank's model (`tp::load`) with `load_weights`'s progress bar (rank 0's layers).
pub fn load_ranks<B: Backend>(
    ranks: Ranks<B>,
    m: &LoadedModel,
    opts: LoadOptions,
) -> Result<lserve::engine::Shards<B>> {
    let bar = ProgressBar::new(m.config.num_layers as u64);
    bar.set_style(ProgressStyle::with_template("loading {msg} [{bar:30}] {pos}/{len} layers").expect("valid template"));
    bar.set_message(m.path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default());
    let shards = super::tp::load(ranks, &m.config, m.weights.as_ref(), &opts, &|i, _| bar.set_position(i as u64));
    bar.finish_and_clear();
    let shards = shards?;
    if let Some((be, model)) = shards.first() {
        warn_if_nothing_quantized(&opts, &model.weight_bytes_by_type(be));
    }
    Ok(shards)
}

/// `--sparse on` without `--head-pattern`: the shipped pattern for this model (by identity), or
/// no streaming heads and a one-line notice on stderr.
pub fn resolve_pattern(c: &mut Config, m: &LoadedModel) {
    let s = &c.sparse;
    if !s.enabled || s.streaming_ratio == 0.0 || s.head_pattern.is_some() {
        return;
    }
    if let Some(note) = lserve::sparse::pattern::resolve_pattern(&mut c.sparse, &m.identity()) {
        eprintln!("{note}");
    }
}

/// The prompt text, refused before it is tokenized (or, for --chat, before the template has
/// rendered all of it) when it is far longer than the context could hold.
fn prompt_text(a: &GenerateArgs, m: &LoadedModel) -> Result<String> {
    let ctx = m.config.context_len();
    let limit = m.tokenizer.byte_bound(ctx);
    let too_long =
        |what: &str| anyhow::anyhow!("{what} is over {limit} bytes, far more than the context of {ctx} tokens holds");
    let raw = match (&a.prompt, &a.prompt_file) {
        (Some(p), _) => p.clone(),
        (None, Some(f)) => {
            let len = std::fs::metadata(f).with_context(|| format!("reading --prompt-file {}", f.display()))?.len();
            if len > limit as u64 {
                return Err(too_long(&format!("--prompt-file {}", f.display())));
            }
            std::fs::read_to_string(f).with_context(|| format!("reading --prompt-file {}", f.display()))?
        }
        (None, None) => bail!("give --prompt or --prompt-file"),
    };
    if !a.chat {
        if raw.len() > limit {
            return Err(too_long("the prompt"));
        }
        return Ok(raw);
    }
    let mut msgs = Vec::new();
    if let Some(s) = &a.system {
        msgs.push(ChatMessage { role: "system".into(), content: s.clone() });
    }
    msgs.push(ChatMessage { role: "user".into(), content: raw });
    let text = m.template.render_bounded(&msgs, true, limit).map_err(|e| lserve::Error::Template(e.0))?;
    text.ok_or_else(|| too_long("the prompt rendered by the chat template"))
}

pub fn generate(a: GenerateArgs) -> Result<()> {
    let device = parse_device(&a.model.device)?;
    let dtype = load_options(&a.model)?;
    let mut config = resolve_config(a.sparse, &a.tuning)?;
    if a.max_tokens == 0 {
        bail!("--max-tokens 0: must be at least 1");
    }
    let seed =
        a.seed.unwrap_or_else(|| SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64));
    let sampling = SamplingParams { temperature: a.temperature, top_k: a.top_k, top_p: a.top_p, seed };
    sampling.validate().map_err(|e| anyhow::anyhow!("bad sampling flags: {e}"))?;
    let m = open_model(&a.model)?;
    // A size the model cannot be split by fails before any device opens.
    lserve::model::shard::shard_config(&m.config, a.tp.tensor_parallel_size)?;
    resolve_pattern(&mut config, &m);
    let text = prompt_text(&a, &m)?;
    let prompt = m.tokenizer.encode(&text).map_err(|e| lserve::Error::Tokenizer(e.0))?;
    let ctx = m.config.context_len();
    if prompt.len() > ctx {
        return Err(lserve::Error::PromptTooLong { tokens: prompt.len(), context: ctx }.into());
    }
    super::tp::on_ranks!(device, &a.tp, ranks => generate_on(ranks, &a, &m, Run { config, dtype, prompt, sampling, seed }))
}

/// What `generate` resolved before choosing a backend.
struct Run {
    config: Config,
    dtype: LoadOptions,
    prompt: Vec<u32>,
    sampling: SamplingParams,
    seed: u64,
}

fn generate_on<B: Backend>(ranks: Ranks<B>, a: &GenerateArgs, m: &LoadedModel, r: Run) -> Result<()> {
    let Run { config, dtype, prompt, sampling, seed } = r;
    let ctx = m.config.context_len();
    let (device, tp_comm) = (ranks.describe(), ranks.comm_kind());
    let shards = load_ranks(ranks, m, dtype)?;
    let cap = prompt.len().saturating_add(a.max_tokens).min(ctx);
    let mut engine = build_engine_tp(shards, &EngineOptions::new(config, cap))?;
    if a.output == Output::Text {
        eprintln!("{}", engine.kv_report());
    }
    let req = GenerateRequest {
        prompt: prompt.clone(),
        max_tokens: a.max_tokens,
        sampling,
        stop_ids: m.stop_ids(),
        ignore_eos: a.ignore_eos,
    };
    let mut dec = StreamDecoder::new(&m.tokenizer);
    let mut stdout = std::io::stdout().lock();
    let stream = a.output == Output::Text;
    let out = engine.generate(&req, &mut |id| {
        if stream {
            let piece = dec.push(id).map_err(|e| lserve::Error::Tokenizer(e.0))?;
            write!(stdout, "{piece}").and_then(|_| stdout.flush()).map_err(|e| lserve::Error::io("<stdout>", e))?;
        }
        Ok(())
    })?;
    let text = m.tokenizer.decode(&out.tokens, false).map_err(|e| lserve::Error::Tokenizer(e.0))?;
    let decode_steps = out.tokens.len().saturating_sub(1);
    let tps = if out.decode_ms > 0.0 { decode_steps as f64 / (out.decode_ms / 1e3) } else { 0.0 };
    if stream {
        writeln!(stdout, "{}", dec.finish().map_err(|e| lserve::Error::Tokenizer(e.0))?)?;
        eprintln!(
            "[{} prompt tokens, prefill {:.0} ms; {} tokens at {:.1} tok/s; {}]",
            prompt.len(),
            out.prefill_ms,
            out.tokens.len(),
            tps,
            device
        );
    } else {
        let v = json!({
            "model": m.path.display().to_string(), "device": device, "seed": seed,
            "prompt_token_ids": prompt, "token_ids": out.tokens, "text": text,
            "finish_reason": match out.finish { lserve::engine::FinishReason::Stop => "stop", _ => "length" },
            "prompt_tokens": prompt.len(), "completion_tokens": out.tokens.len(),
            "prefill_ms": out.prefill_ms, "decode_ms": out.decode_ms, "decode_tokens_per_s": tps,
            "sparse": engine.sparse.enabled, "kv_read_fraction": out.kv_reads.fraction(),
            "kv_cache_bytes": engine.kv_cache_bytes(),
            "device_weight_bytes": engine.weight_bytes(),
            "weight_bytes_by_type": engine.weight_bytes_by_type(),
            "tensor_parallel_size": engine.tp_size(), "tp_comm": tp_comm,
        });
        writeln!(stdout, "{v}")?;
    }
    Ok(())
}

pub fn score(a: ScoreArgs) -> Result<()> {
    let device = parse_device(&a.model.device)?;
    let dtype = load_options(&a.model)?;
    let mut config = resolve_config(a.sparse, &a.tuning)?;
    let bytes = std::fs::read(&a.file).with_context(|| format!("reading --file {}", a.file.display()))?;
    let text = String::from_utf8(bytes).map_err(|e| anyhow::anyhow!("{}: not UTF-8 text ({e})", a.file.display()))?;
    let m = open_model(&a.model)?;
    resolve_pattern(&mut config, &m);
    let ids = m.tokenizer.encode(&text).map_err(|e| lserve::Error::Tokenizer(e.0))?;
    if ids.len() < 2 {
        bail!("{}: needs at least two tokens to score, has {}", a.file.display(), ids.len());
    }
    let ctx = m.config.context_len();
    let window = a.window.unwrap_or(ctx);
    if window < 2 || window > ctx {
        bail!("--window {window}: must be between 2 and the context length {ctx}");
    }
    let stride = a.stride.unwrap_or(window / 2);
    if stride == 0 || stride > window {
        bail!("--stride {stride}: must be between 1 and the window {window}");
    }
    on_device!(device, be => score_on(be, &a, &m, config, dtype, &ids, window, stride))
}

#[allow(clippy::too_many_arguments)]
fn score_on<B: Backend>(
    be: B,
    a: &ScoreArgs,
    m: &LoadedModel,
    config: Config,
    dtype: LoadOptions,
    ids: &[u32],
    window: usize,
    stride: usize,
) -> Result<()> {
    let model = load_weights(&be, m, dtype)?;
    let decode_after = a.decode_after.unwrap_or(if config.sparse.enabled { 512 } else { window });
    let mut engine = build_engine(be, model, &EngineOptions::new(config, window.min(ids.len())))?;
    if a.output == Output::Text {
        eprintln!("{}", engine.kv_report());
    }
    let s = engine.score(ids, window, stride, decode_after)?;
    match a.output {
        Output::Text => println!(
            "tokens: {}\nscored: {}\nmean_nll: {:.6}\nperplexity: {:.4}",
            s.tokens,
            s.scored,
            s.mean_nll(),
            s.perplexity()
        ),
        Output::Json => println!(
            "{}",
            json!({"tokens": s.tokens, "scored": s.scored, "mean_nll": s.mean_nll(), "perplexity": s.perplexity(),
                   "window": window, "stride": stride, "decode_after": decode_after,
                   "sparse": engine.sparse.enabled, "kv_read_fraction": s.kv_reads.fraction()})
        ),
    }
    Ok(())
}

/// `lserve vocab-only`: the model's metadata in a GGUF without tensors, checked by reopening it
/// (its tokenizer must have the model's vocabulary).
pub fn vocab_only(a: VocabOnlyArgs) -> Result<()> {
    let path = lserve::fetch::resolve_model(a.model.as_deref())?;
    if path.is_dir() {
        bail!(
            "--model {}: vocab-only takes a .gguf file (a Hugging Face folder's tokenizer files are small already)",
            path.display()
        );
    }
    let g = loader::gguf::GgufFile::open(&path)?;
    let meta: Vec<_> = g.metadata.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let bytes = loader::gguf::write::to_bytes(&meta, &[]);
    std::fs::write(&a.out, &bytes).with_context(|| format!("writing {}", a.out.display()))?;
    let (full, small) = (loader::open(&path)?, loader::open(&a.out)?);
    if small.tokenizer.vocab_size() != full.tokenizer.vocab_size() || small.config != full.config {
        bail!("{}: the vocab-only file does not reproduce the model's tokenizer and config", a.out.display());
    }
    println!(
        "wrote {} ({} bytes, vocabulary {}; no tensors)",
        a.out.display(),
        bytes.len(),
        small.tokenizer.vocab_size()
    );
    Ok(())
}

pub fn devices() -> Result<()> {
    for (name, lines) in lserve::backend::probe::probe_all() {
        println!("{name}:");
        for l in lines {
            println!("  {l}");
        }
    }
    Ok(())
}

#[cfg(feature = "wgpu")]
pub fn dump_shaders(out: &std::path::Path) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let modules = lserve::backend::wgpu::shaders::all_modules();
    for m in &modules {
        let path = out.join(format!("{}.wgsl", m.name));
        std::fs::write(&path, &m.source).with_context(|| format!("writing {}", path.display()))?;
    }
    println!("wrote {} modules to {}", modules.len(), out.display());
    Ok(())
}
