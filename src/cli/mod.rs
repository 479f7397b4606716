//! Argument parsing and the sub-commands. The library does the work; this module turns flags
//! into library calls, prints results, and maps errors to exit codes.

mod accuracy;
mod eval;
mod run;
mod serve;
mod tp;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

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
    /// Accuracy suite: perplexity, NIAH, multi-key NIAH, variable tracking, common words, at
    /// several lengths, dense vs a grid of sparse configurations.
    Accuracy(AccuracyArgs),
    /// Selection recall: attention mass kept by page selection vs an oracle, per layer.
    Recall(RecallArgs),
    /// Prefill and decode latency vs context length, dense vs sparse, synthetic weights.
    Bench(BenchArgs),
    /// OpenAI-compatible HTTP server with continuous batching.
    Serve(ServeArgs),
    /// Write a GGUF model's metadata (tokenizer, chat template, config) without its tensors: a
    /// small file that `serve --synthetic --model FILE` takes on a machine without the model.
    VocabOnly(VocabOnlyArgs),
    /// Write every WGSL module exactly as the wgpu backend assembles it, one file each.
    #[cfg(feature = "wgpu")]
    DumpShaders {
        #[arg(long)]
        out: PathBuf,
    },
}

#[derive(Args)]
pub struct VocabOnlyArgs {
    /// A .gguf file or the alias `smollm2-135m` (fetched once).
    #[arg(long, short = 'm')]
    pub model: Option<String>,
    /// Where to write the vocab-only GGUF.
    #[arg(long)]
    pub out: PathBuf,
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
    /// Model shape: llama3-8b, llama3-70b, llama2-7b, qwen2.5-7b, smollm2-135m, or a config.json path.
    #[arg(long, default_value = "llama3-8b")]
    pub shape: String,
    /// auto | cpu | wgpu[:N] | cuda[:N]
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Weight storage: auto | f32 | f16 | bf16, or synthetic quantized weights of a type:
    /// q4_0 | q4_1 | q5_0 | q5_1 | q8_0 | q4_k | q5_k | q6_k | int8 | fp8, or q4_k_m (llama.cpp's
    /// Q4_K_M mix: Q4_K, with Q6_K for the output and for attn_v / ffn_down in half the layers);
    /// the floor column counts their bytes.
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
    #[command(flatten)]
    pub tp: TpArgs,
    #[arg(long, default_value_t = 3)]
    pub warmup: usize,
    /// Keep warming up (beyond --warmup steps, up to lserve::bench::WARMUP_MAX_STEPS) until the
    /// warm-up has run this long: a GPU left idle while the host made the weights starts the
    /// decode at its idle clock (an H200: 345 of 1980 MHz for ~0.3 s). 0: --warmup steps only.
    #[arg(long, default_value_t = 1000)]
    pub warmup_ms: u64,
    #[arg(long, default_value_t = 10)]
    pub repeats: usize,
    /// Also time a prefill of this many tokens (0 = skip).
    #[arg(long, default_value_t = 0)]
    pub prefill: usize,
    /// Tokens per prefill step when timing --prefill.
    #[arg(long, default_value_t = lserve::engine::DEFAULT_PREFILL_CHUNK)]
    pub prefill_chunk: usize,
    /// Time each kernel with GPU timestamps (wgpu) and print the hot kernels per point.
    #[arg(long)]
    pub profile: bool,
    /// How each decode step ends: logits (read the logits row back, as a logprobs client would),
    /// argmax (greedy on the device, ids only) or sample (sampling on the device, ids only:
    /// temperature 0.8, top-k 40, top-p 0.95), at any batch size.
    #[arg(long, value_enum, default_value = "logits")]
    pub head: lserve::bench::DecodeHead,
    /// Copy bandwidth in GB/s for the floor column (H200 measured: 4200).
    #[arg(long, default_value_t = 4200.0)]
    pub bandwidth_gbs: f64,
    /// Folder for bench.json, bench.csv and the charts (bench.png; bench-batch.png with several
    /// batch sizes, bench-prefill.png with --prefill).
    #[arg(long)]
    pub out_dir: Option<PathBuf>,
    /// Anchor runs drawn beside lserve's on the charts (PyTorch, llama.cpp, ...): a CSV with the
    /// columns label, context, ms_per_token and optionally batch, tokens_per_s, prefill_tokens,
    /// prefill_tokens_per_s, prefill_ms (docs/benchmarks.md).
    #[arg(long)]
    pub compare: Option<PathBuf>,
    /// Draw the charts from bench CSVs (comma-separated, e.g. one per backend) into --out-dir
    /// instead of running the benchmark.
    #[arg(long, value_delimiter = ',', requires = "out_dir")]
    pub plot_only: Vec<PathBuf>,
    /// Chart formats: png, svg, or png,svg for both.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "png")]
    pub plot_format: Vec<PlotFormat>,
}

#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
pub enum PlotFormat {
    Png,
    Svg,
}

impl PlotFormat {
    pub fn ext(self) -> &'static str {
        match self {
            PlotFormat::Png => "png",
            PlotFormat::Svg => "svg",
        }
    }
}

#[derive(Args)]
pub struct AccuracyArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// sink/local/selector interval/head pattern/dense layers for the sparse variants.
    #[command(flatten)]
    pub tuning: SparseArgs,
    /// ppl, niah, niah_multikey, vt, cwe, or all.
    #[arg(long, default_value = "all")]
    pub tasks: String,
    /// Context lengths (k = 1024 tokens).
    #[arg(long, default_value = "4k")]
    pub lengths: String,
    /// Samples per (task, length).
    #[arg(long, default_value_t = 4)]
    pub samples: usize,
    /// Token budgets; `policy` = LServe's min(4096, context / 32).
    #[arg(long, default_value = "1024,2048,4096,policy")]
    pub budgets: String,
    /// Streaming ratios (of the global layers' KV heads for Gemma 3).
    #[arg(long, default_value = "0,0.25,0.5")]
    pub ratios: String,
    /// Page geometries physical/logical.
    #[arg(long, default_value = "16/16,64/16,64/64")]
    pub pages: String,
    /// Tokens of each ppl window scored by decode steps.
    #[arg(long, default_value_t = 128)]
    pub score_tokens: usize,
    /// Text files for ppl (default: /usr/share/common-licenses/*).
    #[arg(long)]
    pub text: Vec<PathBuf>,
    #[arg(long, default_value_t = 1024)]
    pub prefill_chunk: usize,
    /// Folder for accuracy.json, accuracy.md and the charts.
    #[arg(long)]
    pub out_dir: PathBuf,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

#[derive(Args)]
pub struct RecallArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub tuning: SparseArgs,
    /// Context lengths (k = 1024 tokens).
    #[arg(long, default_value = "4k")]
    pub lengths: String,
    #[arg(long, default_value = "1024")]
    pub budgets: String,
    #[arg(long, default_value = "16/16,64/16,64/64")]
    pub pages: String,
    /// Decode steps after the prefill.
    #[arg(long, default_value_t = 32)]
    pub steps: usize,
    /// Measure every N-th decode step.
    #[arg(long, default_value_t = 4)]
    pub every: usize,
    /// Text files (default: /usr/share/common-licenses/*).
    #[arg(long)]
    pub text: Vec<PathBuf>,
    /// Write the per-layer results as JSON here.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Measure block-sparse prefill's block estimators instead (`lserve::eval::block_recall`):
    /// the last N query blocks of 128 rows of each window, `--budgets` as the prefill budget.
    #[arg(long)]
    pub prefill_blocks: Option<usize>,
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
    /// Storage of the matrices held as floats: auto (the backend's choice: f32 on the CPU, f16 on
    /// wgpu) | f32 | f16 | bf16.
    #[arg(long, default_value = "auto")]
    pub dtype: String,
    /// native: the file's quantized matrices (GGUF Q4_K, Q8_0, ...) stay quantized on the device
    /// where the backend computes with their type (else they are dequantized, with a warning);
    /// dequant: every matrix is dequantized at load (docs/weights.md).
    #[arg(long, value_enum, default_value = "native")]
    pub weights: WeightsArg,
    /// Quantize the matrices held as floats at load: int8 or fp8 (e4m3), one scale per output row.
    #[arg(long, value_enum)]
    pub quantize: Option<QuantizeArg>,
}

/// Tensor parallelism (docs/tensor-parallel.md): one model over several devices, each rank on a
/// thread of this process.
#[derive(Args, Clone, Debug)]
pub struct TpArgs {
    /// Ranks of tensor parallelism: attention heads, KV heads, FFN and vocabulary are split over
    /// this many devices (cuda: GPUs N, N+1, ... from --device cuda:N; cpu: CPU backends).
    #[arg(long, default_value_t = 1)]
    pub tensor_parallel_size: usize,
    /// How the ranks combine partial results: auto (NCCL between distinct CUDA GPUs, else the
    /// host), nccl, or host (through host memory: any backend, ranks may share a device).
    #[arg(long, value_enum, default_value = "auto")]
    pub tp_comm: TpComm,
    /// The device index of each rank, comma-separated (default: consecutive from --device's);
    /// `--tp-devices 0,0 --tp-comm host` runs two ranks on GPU 0.
    #[arg(long, value_delimiter = ',')]
    pub tp_devices: Option<Vec<usize>>,
}

#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
pub enum TpComm {
    Auto,
    Nccl,
    Host,
}

#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
pub enum WeightsArg {
    Native,
    Dequant,
}

#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
pub enum QuantizeArg {
    Int8,
    Fp8,
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
    /// KV cache size: a size with a unit (2GiB, 512MiB, 1.5GB; a plain number is bytes) or a
    /// share of device memory (50%).
    #[arg(long)]
    pub kv_memory: Option<String>,
    /// KV cache storage: auto | f32 | f16 | bf16 | int8 | fp8 (e4m3), docs/kv-cache.md.
    #[arg(long)]
    pub kv_dtype: Option<String>,
    /// Always select each retrieval head's first page (the attention sink).
    #[arg(long, value_enum)]
    pub pin_sink_page: Option<OnOff>,
    /// Block-sparse prefill: tokens each 128-row query block of a retrieval head reads besides
    /// page 0 and its tail (0 = off; needs --sparse on).
    #[arg(long)]
    pub prefill_budget: Option<usize>,
    /// Query blocks starting before this position attend densely in a block-sparse prefill.
    #[arg(long)]
    pub prefill_dense_below: Option<usize>,
    /// How block-sparse prefill ranks a query block's pages: antidiagonal (XAttention's
    /// antidiagonal scoring, stride 8) or mean_bound (the Quest bound of the block's mean query).
    #[arg(long, value_enum)]
    pub prefill_estimate: Option<PrefillEstimateArg>,
    /// How page selection ranks pages: max (over the query heads' Quest bounds) or head_norm
    /// (each query head's bounds normalized by a softmax over pages, summed over the group).
    #[arg(long, value_enum)]
    pub page_rank: Option<PageRankArg>,
    /// Shrink each logical page's min/max box toward its centre by this fraction (0..1) before
    /// page selection scores it (0: the Quest bound).
    #[arg(long)]
    pub bound_shrink: Option<f32>,
    /// What decode page selection keeps and attention reads: physical (whole physical pages,
    /// ranked by their logical pages) or logical (logical pages inside them).
    #[arg(long, value_enum)]
    pub select_unit: Option<SelectUnitArg>,
}

#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
pub enum SelectUnitArg {
    Physical,
    Logical,
}

#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
pub enum PageRankArg {
    Max,
    #[value(name = "head_norm")]
    HeadNorm,
}

#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
pub enum PrefillEstimateArg {
    Antidiagonal,
    #[value(name = "mean_bound")]
    MeanBound,
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
    #[command(flatten)]
    pub tp: TpArgs,
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
    /// Tokens to generate at most (1 or more).
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
    #[command(flatten)]
    pub tp: TpArgs,
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
    /// Host memory for swapped-out KV (a size: 4GiB, 512MiB; a plain number is bytes); a full tier
    /// falls back to recompute.
    #[arg(long, default_value = "4GiB")]
    pub swap_space: String,
    /// Largest request body accepted (a size: 4MiB, 64KiB; a plain number is bytes).
    #[arg(long, default_value = "4MiB")]
    pub max_body: String,
    /// Seconds a client has to send a request's line and headers before the connection closes.
    #[arg(long, default_value_t = 30)]
    pub header_timeout: u64,
    /// Seconds a client has to send a request's body (408 after that).
    #[arg(long, default_value_t = 60)]
    pub body_timeout: u64,
    /// Open connections at most; more wait (in the listen backlog) until one closes.
    #[arg(long, default_value_t = 1024)]
    pub max_connections: usize,
    /// Serve synthetic weights of a model shape (llama3-8b, llama2-7b, qwen2.5-7b, smollm2-135m or
    /// a config.json), generated on the device: no weight file is read. The tokenizer and chat
    /// template come from --model (default smollm2-135m) and the shape's vocabulary is set to
    /// the tokenizer's, so every sampled id detokenizes. For load tests; the text is noise.
    #[arg(long)]
    pub synthetic: Option<String>,
    /// Context length of the --synthetic model (default: the shape's own).
    #[arg(long, requires = "synthetic")]
    pub synthetic_context: Option<usize>,
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
    lserve::backend::probe::quiet_vulkan_env();
    let matches = plain_numbers(Cli::command()).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let result = match cli.cmd {
        Cmd::Generate(a) => run::generate(a),
        Cmd::Score(a) => run::score(a),
        Cmd::Devices => run::devices(),
        Cmd::Calibrate(a) => eval::calibrate(a),
        Cmd::Niah(a) => eval::niah(a),
        Cmd::Accuracy(a) => accuracy::accuracy(a),
        Cmd::Recall(a) => accuracy::recall(a),
        Cmd::Bench(a) => eval::bench(a),
        Cmd::Serve(a) => serve::serve(a),
        Cmd::VocabOnly(a) => run::vocab_only(a),
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

/// Every flag that takes a value accepts a leading `-` (so `--max-tokens -5` reaches its parser
/// instead of being read as an unknown flag `-5`), and whole-number flags say plainly what they
/// want: "must be a whole number, 0 or more" rather than "invalid digit found in string".
fn plain_numbers(cmd: clap::Command) -> clap::Command {
    use std::any::TypeId;
    cmd.mut_args(|a| {
        if !a.get_action().takes_values() {
            return a;
        }
        let a = a.allow_negative_numbers(true);
        let t = a.get_value_parser().type_id();
        if t == TypeId::of::<usize>() {
            a.value_parser(whole::<usize>)
        } else if t == TypeId::of::<u64>() {
            a.value_parser(whole::<u64>)
        } else if t == TypeId::of::<u16>() {
            a.value_parser(whole::<u16>)
        } else {
            a
        }
    })
    .mut_subcommands(plain_numbers)
}

fn whole<T: std::str::FromStr>(s: &str) -> Result<T, String> {
    let t = s.trim();
    if t.starts_with('-') && t.len() > 1 {
        return Err("must not be negative".into());
    }
    t.parse::<T>().map_err(|_| {
        if t.bytes().all(|b| b.is_ascii_digit()) && !t.is_empty() {
            "too large".to_string()
        } else {
            "must be a whole number (0, 1, 2, ...)".to_string()
        }
    })
}
