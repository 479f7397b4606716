//! Argument parsing and the sub-commands. The library does the work; this module turns flags
//! into library calls, prints results, and maps errors to exit codes.

mod eval;
mod run;
mod serve;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(name = "lserve", version, about = "Long-context LLM inference with unified sparse attention")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Generate text from a prompt, streaming tokens as they are produced.
    Generate(GenerateArgs),
    /// Per-token negative log-likelihood and perplexity of a text file.
    Score(ScoreArgs),
    /// List the backends compiled in and the adapters/GPUs they find.
    Devices,
    /// Rank the KV heads by attention mass outside sink + local window; write a head pattern.
    Calibrate(CalibrateArgs),
    /// Needle-in-a-haystack sweep (context length x depth), dense vs sparse.
    Niah(NiahArgs),
    /// Prefill and decode latency vs context length, dense vs sparse, synthetic weights.
    Bench(BenchArgs),
    /// OpenAI-compatible HTTP server with continuous batching.
    Serve(ServeArgs),
    /// Write every WGSL module exactly as the wgpu backend assembles it, one file each.
    #[cfg(feature = "wgpu")]
    DumpShaders {
        #[arg(long)]
        out: PathBuf,
    },
}

#[derive(Args)]
pub struct CalibrateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Where to write the head pattern (TOML).
    #[arg(long)]
    pub out: PathBuf,
    /// Calibration documents (passkey retrieval over varied filler text).
    #[arg(long, default_value_t = 4)]
    pub docs: usize,
    /// Tokens per document (default: min(4096, the context length)).
    #[arg(long)]
    pub length: Option<usize>,
    #[arg(long, default_value_t = 128)]
    pub sink: usize,
    #[arg(long, default_value_t = 256)]
    pub local: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

#[derive(Args)]
pub struct BenchArgs {
    /// Model shape: llama3-8b, llama2-7b, qwen2.5-7b, smollm2-135m, or a config.json path.
    #[arg(long, default_value = "llama3-8b")]
    pub shape: String,
    /// auto | cpu | wgpu[:N] | cuda[:N]
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Weight storage: auto | f32 | f16 | bf16.
    #[arg(long, default_value = "auto")]
    pub dtype: String,
    /// Context lengths for decode (k = 1024).
    #[arg(long, default_value = "4k,32k,128k")]
    pub contexts: String,
    /// Batch sizes: sequences decoded together per step, each holding the context.
    #[arg(long, default_value = "1")]
    pub batch: String,
    /// Which attention to measure.
    #[arg(long, value_enum, default_value = "both")]
    pub sparse: NiahMode,
    #[command(flatten)]
    pub tuning: SparseArgs,
    #[arg(long, default_value_t = 3)]
    pub warmup: usize,
    #[arg(long, default_value_t = 10)]
    pub repeats: usize,
    /// Also time a prefill of this many tokens (0 = skip).
    #[arg(long, default_value_t = 0)]
    pub prefill: usize,
    /// Time each kernel with GPU timestamps (wgpu) and print the hot kernels per point.
    #[arg(long)]
    pub profile: bool,
    /// How each decode step ends: logits (read the logits row back, as a logprobs client would),
    /// argmax (greedy on the device, ids only) or sample (sampling on the device, ids only:
    /// temperature 0.8, top-k 40, top-p 0.95). sample times batch 1 only.
    #[arg(long, value_enum, default_value = "logits")]
    pub head: lserve::bench::DecodeHead,
    /// Copy bandwidth in GB/s for the floor column (H200 measured: 4200).
    #[arg(long, default_value_t = 4200.0)]
    pub bandwidth_gbs: f64,
    /// Folder for bench.json, bench.csv and bench.png.
    #[arg(long)]
    pub out_dir: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
pub enum NiahMode {
    On,
    Off,
    Both,
}

#[derive(Args)]
pub struct NiahArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Which attention to evaluate.
    #[arg(long, value_enum, default_value = "both")]
    pub sparse: NiahMode,
    #[command(flatten)]
    pub tuning: SparseArgs,
    /// Context lengths (k = 1024 tokens); lengths beyond the context are clamped to it.
    #[arg(long, default_value = "1k,2k,4k,8k")]
    pub lengths: String,
    /// Needle depths in percent of the haystack.
    #[arg(long, default_value = "0,25,50,75,100")]
    pub depths: String,
    /// Folder for results.json and heatmap.png.
    #[arg(long)]
    pub out_dir: PathBuf,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

#[derive(Args, Clone)]
pub struct ModelArgs {
    /// A .gguf file, a Hugging Face model folder, or the alias `smollm2-135m` (fetched once).
    #[arg(long, short = 'm')]
    pub model: Option<String>,
    /// auto | cpu | wgpu[:N] | cuda[:N]
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Weight storage: auto (the backend's choice: f32 on the CPU, f16 on wgpu) | f32 | f16 | bf16.
    #[arg(long, default_value = "auto")]
    pub dtype: String,
}

#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

/// `--config FILE` and the flags that override it (DESIGN.md §5); `--sparse` itself is declared
/// by each command (on|off, or on|off|both for niah).
#[derive(Args, Clone, Default)]
pub struct SparseArgs {
    /// TOML file with [sparse] and [cache] sections.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Tokens each retrieval head reads per decode step.
    #[arg(long)]
    pub token_budget: Option<usize>,
    /// Fraction of KV heads that are streaming heads (needs --head-pattern).
    #[arg(long)]
    pub streaming_ratio: Option<f32>,
    /// Head pattern: `lserve calibrate` output (.toml) or DuoAttention full_attention_heads.tsv.
    #[arg(long)]
    pub head_pattern: Option<PathBuf>,
    /// Re-run page selection every C decode steps.
    #[arg(long)]
    pub selector_interval: Option<usize>,
    /// Contexts up to this many tokens skip page selection.
    #[arg(long)]
    pub dense_below: Option<usize>,
    /// Tokens per physical KV page (16..=1024).
    #[arg(long)]
    pub physical_page: Option<usize>,
    /// Tokens per logical page (selection unit; divides the physical page).
    #[arg(long)]
    pub logical_page: Option<usize>,
    /// KV cache size: bytes (2GiB, 512MiB) or a fraction of device memory (0.5).
    #[arg(long)]
    pub kv_memory: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
pub enum Output {
    Text,
    Json,
}

#[derive(Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Unified sparse attention (streaming heads + page selection).
    #[arg(long, value_enum)]
    pub sparse: Option<OnOff>,
    #[command(flatten)]
    pub tuning: SparseArgs,
    /// The prompt text.
    #[arg(long, short = 'p', conflicts_with = "prompt_file", required_unless_present = "prompt_file")]
    pub prompt: Option<String>,
    /// Read the prompt from a file.
    #[arg(long)]
    pub prompt_file: Option<PathBuf>,
    /// Wrap the prompt in the model's chat template as a user message.
    #[arg(long)]
    pub chat: bool,
    /// System message for --chat (otherwise the template's default, if it has one).
    #[arg(long, requires = "chat")]
    pub system: Option<String>,
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Keep the K most likely tokens (0 = off).
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    /// Nucleus sampling mass (1 = off).
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// RNG seed for sampling (random when omitted; reported in json output).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Keep generating past end-of-sequence tokens.
    #[arg(long)]
    pub ignore_eos: bool,
    #[arg(long, value_enum, default_value = "text")]
    pub output: Output,
}

#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
pub enum Preempt {
    Swap,
    Recompute,
}

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Unified sparse attention (streaming heads + page selection).
    #[arg(long, value_enum)]
    pub sparse: Option<OnOff>,
    #[command(flatten)]
    pub tuning: SparseArgs,
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Require `Authorization: Bearer KEY` on /v1/* (also read from LSERVE_API_KEY).
    #[arg(long)]
    pub api_key: Option<String>,
    /// The model name clients send (default: the model file's or folder's name).
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// Sequences in the running batch at most.
    #[arg(long, default_value_t = 64)]
    pub max_num_seqs: usize,
    /// Tokens per engine step (decode tokens + prefill chunks).
    #[arg(long, default_value_t = 512)]
    pub max_num_batched_tokens: usize,
    /// Tokens one sequence prefills per step at most.
    #[arg(long, default_value_t = 256)]
    pub prefill_chunk: usize,
    /// Requests queued beyond the running batch before new ones get 429.
    #[arg(long, default_value_t = 256)]
    pub max_queue: usize,
    /// What preemption does with a sequence's KV when pages run out.
    #[arg(long, value_enum, default_value = "swap")]
    pub preempt: Preempt,
    /// Host memory for swapped-out KV (bytes, e.g. 4GiB); a full tier falls back to recompute.
    #[arg(long, default_value = "4GiB")]
    pub swap_space: String,
    /// Largest request body accepted (bytes, e.g. 4MiB).
    #[arg(long, default_value = "4MiB")]
    pub max_body: String,
}

#[derive(Args)]
pub struct ScoreArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Unified sparse attention (streaming heads + page selection).
    #[arg(long, value_enum)]
    pub sparse: Option<OnOff>,
    #[command(flatten)]
    pub tuning: SparseArgs,
    /// Within each window, prefill this many tokens and feed the rest as decode steps (so sparse
    /// decode attention is measured). Default: the whole window by prefill when --sparse is off,
    /// 512 tokens when it is on.
    #[arg(long)]
    pub decode_after: Option<usize>,
    /// The text file to score.
    #[arg(long, short = 'f')]
    pub file: PathBuf,
    /// Window size in tokens (default: the model's context length).
    #[arg(long)]
    pub window: Option<usize>,
    /// Advance between windows (default: half the window).
    #[arg(long)]
    pub stride: Option<usize>,
    #[arg(long, value_enum, default_value = "text")]
    pub output: Output,
}

pub fn main() -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_env("LSERVE_LOG").unwrap_or_else(|_| "warn".into());
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Generate(a) => run::generate(a),
        Cmd::Score(a) => run::score(a),
        Cmd::Devices => run::devices(),
        Cmd::Calibrate(a) => eval::calibrate(a),
        Cmd::Niah(a) => eval::niah(a),
        Cmd::Bench(a) => eval::bench(a),
        Cmd::Serve(a) => serve::serve(a),
        #[cfg(feature = "wgpu")]
        Cmd::DumpShaders { out } => run::dump_shaders(&out),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
