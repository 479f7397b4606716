//! Gemma 3 270M (the `gemma3-270m` alias) on the CPU backend against float32 `transformers`
//! (tests/data/gemma3_ref.json and gemma3_*_last_logits.npy, made by scripts/make_gemma3_ref.py
//! with a SentencePiece tokenizer built from the GGUF and gguf-py's dequantizers): config, tokenizer
//! ids (BOS included), last-position logits within 1e-3, 16 greedy tokens identical, the mean NLL
//! of a 1,938-token text within 0.1% (prefilled in 512-token chunks, so the local layers' ring of
//! sink + 512 + chunk tokens wraps), and decode steps past the sliding window equal to the prefill.

mod common;

use std::sync::{LazyLock, Mutex};

use lserve::backend::cpu::CpuBackend;
use lserve::engine::{Engine, GenerateRequest};
use lserve::loader::{self, LoadedModel};
use lserve::model::llama::{Llama, Logits};
use lserve::sampling::SamplingParams;

static MODEL: LazyLock<LoadedModel> = LazyLock::new(|| loader::open(&common::gemma_path()).expect("model opens"));
static ENGINE: LazyLock<Mutex<Engine<CpuBackend>>> = LazyLock::new(|| {
    let be = CpuBackend::new();
    let llama = Llama::load(&be, &MODEL.config, MODEL.weights.as_ref(), |_, _| {}).expect("weights load");
    Mutex::new(common::engine(llama, 2560, lserve::sparse::Config::default(), 512))
});

const PROMPTS: [&str; 3] = ["g1_plain", "g2_story", "g3_code"];

#[test]
fn config_matches_the_model_card() {
    let c = &MODEL.config;
    assert_eq!(c.arch, "gemma3");
    assert_eq!((c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim), (18, 4, 1, 256));
    assert_eq!((c.hidden_size, c.intermediate_size, c.vocab_size), (640, 2048, 262144));
    assert_eq!((c.rope_theta, c.max_position_embeddings, c.tie_word_embeddings), (1e6, 32768, true));
    let g = c.gemma.as_ref().expect("gemma parameters");
    assert_eq!((g.sliding_window, g.local_rope_theta), (512, 10000.0));
    let global: Vec<usize> = (0..18).filter(|&l| !g.is_local(l)).collect();
    assert_eq!(global, [5, 11, 17]);
    assert_eq!(c.bos_token_id, Some(2));
}

#[test]
fn tokenizer_matches_sentencepiece() {
    let r = common::gemma_reference();
    for case in r["tokenizer"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let want = common::ids(&case["ids"]);
        let got = MODEL.tokenizer.encode_with(text, false).unwrap();
        assert_eq!(got, want, "ids of {text:?}");
        assert_eq!(MODEL.tokenizer.decode(&got, false).unwrap(), text, "round trip of {text:?}");
    }
    for p in PROMPTS.iter().chain(&["g4_long"]) {
        let v = &r["prompts"][p];
        let got = MODEL.tokenizer.encode(v["text"].as_str().unwrap()).unwrap();
        assert_eq!(got, common::ids(&v["ids"]), "{p}: ids with BOS");
    }
}

#[test]
fn last_logits_match_transformers() {
    let r = common::gemma_reference();
    let mut engine = ENGINE.lock().unwrap();
    for p in PROMPTS {
        let ids = common::ids(&r["prompts"][p]["ids"]);
        let want = common::read_npy_f32(&common::data(&format!("gemma3_{p}_last_logits.npy")));
        let mut seq = engine.cache.admit().unwrap();
        let got = engine.step(&mut seq, &ids, Logits::Last, None).unwrap();
        engine.cache.release(&mut seq).unwrap();
        assert_eq!(got.len(), want.len());
        let max_err = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        eprintln!("{p}: {} tokens, max |logit diff| = {max_err:.2e}", ids.len());
        assert!(max_err < 1e-3, "{p}: max |logit diff| {max_err} exceeds 1e-3");
        assert_eq!(lserve::sampling::argmax(&got), common::ids(&r["prompts"][p]["top5_ids"])[0], "{p}: top token");
    }
}

#[test]
fn greedy_continuations_match_transformers() {
    let r = common::gemma_reference();
    let mut engine = ENGINE.lock().unwrap();
    for p in PROMPTS {
        let want = common::ids(&r["prompts"][p]["greedy_ids"]);
        let req = GenerateRequest {
            prompt: common::ids(&r["prompts"][p]["ids"]),
            max_tokens: want.len(),
            sampling: SamplingParams::greedy(),
            stop_ids: vec![],
            ignore_eos: true,
        };
        let out = engine.generate(&req, &mut |_| Ok(())).unwrap();
        assert_eq!(out.tokens, want, "{p}: greedy tokens");
    }
}

/// Prefill `ids` in 512-token chunks with every row's logits; returns the summed NLL of each next
/// token and the logits rows `keep` (the full `[rows][vocab]` would be 2 GB).
fn prefill_nll(engine: &mut Engine<CpuBackend>, ids: &[u32], keep: std::ops::Range<usize>) -> (f64, Vec<f32>) {
    let vocab = MODEL.config.vocab_size;
    let mut seq = engine.cache.admit().unwrap();
    let (mut nll, mut kept) = (0f64, vec![]);
    for (c, chunk) in ids.chunks(512).enumerate() {
        let logits = engine.step(&mut seq, chunk, Logits::All, None).unwrap();
        for (j, row) in logits.chunks_exact(vocab).enumerate() {
            let i = c * 512 + j;
            if i + 1 < ids.len() {
                nll -= log_softmax_at(row, ids[i + 1] as usize);
            }
            if keep.contains(&i) {
                kept.extend_from_slice(row);
            }
        }
    }
    engine.cache.release(&mut seq).unwrap();
    (nll, kept)
}

fn log_softmax_at(row: &[f32], t: usize) -> f64 {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = max + row.iter().map(|&x| (x as f64 - max).exp()).sum::<f64>().ln();
    row[t] as f64 - lse
}

#[test]
fn long_text_nll_and_decode_past_the_window() {
    let r = common::gemma_reference();
    let v = &r["prompts"]["g4_long"];
    let ids = common::ids(&v["ids"]);
    let want = v["mean_nll"].as_f64().unwrap();
    let vocab = MODEL.config.vocab_size;
    let mut engine = ENGINE.lock().unwrap();
    let (start, n) = (1200, 30);
    let (nll, kept) = prefill_nll(&mut engine, &ids, start..start + n);
    let mean = nll / (ids.len() - 1) as f64;
    eprintln!("mean nll {mean} vs transformers {want} over {} tokens", ids.len());
    assert!((mean - want).abs() / want < 1e-3, "mean nll {mean} vs {want}");
    // Decode steps 1200..1230: the local layers' window (512) and the ring (1152 tokens) have
    // long wrapped; each step's logits must equal the prefill's at that position.
    let mut seq = engine.cache.admit().unwrap();
    for chunk in ids[..start].chunks(512) {
        engine.step(&mut seq, chunk, Logits::None, None).unwrap();
    }
    let mut worst = 0f32;
    for i in start..start + n {
        let got = engine.step(&mut seq, &ids[i..i + 1], Logits::Last, None).unwrap();
        let want = &kept[(i - start) * vocab..(i - start + 1) * vocab];
        worst = worst.max(got.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max));
    }
    engine.cache.release(&mut seq).unwrap();
    eprintln!("decode vs prefill past the window: max |logit diff| = {worst:.2e}");
    assert!(worst < 1e-3, "decode vs prefill {worst}");
}

/// A small random Gemma 3 (6 layers, layer 5 global, window 16, vocab 512) under HF names.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn tiny_gemma(seed: u64) -> (lserve::model::config::ModelConfig, lserve::loader::MemWeights) {
    let v = serde_json::json!({
        "architectures": ["Gemma3ForCausalLM"], "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 32,
        "rms_norm_eps": 1e-6, "max_position_embeddings": 4096, "sliding_window": 16, "query_pre_attn_scalar": 32,
        "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0
    });
    let c = lserve::model::config::ModelConfig::from_hf_json(&v).unwrap();
    let mut rng = common::naive::Rng(seed | 1);
    let mut w = lserve::loader::MemWeights::default();
    let (h, hd, f) = (64, 32, 128);
    let mut put = |name: &str, shape: &[usize], scale: f64| {
        let n = shape.iter().product();
        w.insert(name, shape, rng.normal_vec(n, scale));
    };
    put("model.embed_tokens.weight", &[512, h], 1.0);
    put("model.norm.weight", &[h], 0.3);
    for l in 0..6 {
        let p = |s: &str| format!("model.layers.{l}.{s}");
        for (n, shape) in [
            ("self_attn.q_proj.weight", [4 * hd, h]),
            ("self_attn.k_proj.weight", [hd, h]),
            ("self_attn.v_proj.weight", [hd, h]),
            ("self_attn.o_proj.weight", [h, 4 * hd]),
            ("mlp.gate_proj.weight", [f, h]),
            ("mlp.up_proj.weight", [f, h]),
            ("mlp.down_proj.weight", [h, f]),
        ] {
            put(&p(n), &shape, 1.0 / (shape[1] as f64).sqrt());
        }
        for n in
            ["input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"]
        {
            put(&p(&format!("{n}.weight")), &[h], 0.3);
        }
        put(&p("self_attn.q_norm.weight"), &[hd], 0.3);
        put(&p("self_attn.k_norm.weight"), &[hd], 0.3);
    }
    (c, w)
}

#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn tiny_engine_with<B: lserve::backend::Backend>(
    be: B,
    c: &lserve::model::config::ModelConfig,
    w: &lserve::loader::MemWeights,
    dtype: Option<lserve::backend::DType>,
    config: lserve::sparse::Config,
) -> Engine<B> {
    tiny_engine_chunk(be, c, w, dtype, config, 16)
}

/// The same with steps of up to `prefill_chunk` rows (the local layers' ring holds one).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn tiny_engine_chunk<B: lserve::backend::Backend>(
    be: B,
    c: &lserve::model::config::ModelConfig,
    w: &lserve::loader::MemWeights,
    dtype: Option<lserve::backend::DType>,
    mut config: lserve::sparse::Config,
    prefill_chunk: usize,
) -> Engine<B> {
    let model = Llama::load_as(&be, c, w, dtype, |_, _| {}).unwrap();
    (config.sparse.sink_tokens, config.sparse.local_tokens) = (4, 8);
    config.cache.physical_page = 16;
    config.cache.logical_page = 16;
    let opts = lserve::engine::EngineOptions { config, max_tokens: 200, max_seqs: 1, prefill_chunk, layout: None };
    lserve::engine::build_engine(be, model, &opts).unwrap()
}

/// Gemma 3's forward pass on the wgpu backend (lavapipe in CI) against the CPU, on a small random
/// Gemma 3 (the real model's 262,144 x 640 embedding exceeds lavapipe's 128 MiB storage binding,
/// which the wgpu backend refuses with a clear error): 150 tokens prefilled in 16-token chunks,
/// so the local layers' ring (sink 4 + window 16 + chunk 16 = 48 tokens) wraps three times, then
/// 10 decode steps; every logits row within 1e-3 with f32 weights and f32 KV. The CPU path itself
/// is the one tested against transformers above.
#[cfg(feature = "wgpu")]
#[test]
fn wgpu_gemma_matches_cpu_past_the_window() {
    if let Some(gpu) = common::wgpu_backend() {
        gpu_gemma_matches_cpu(gpu, "wgpu");
    }
}

/// The same on CUDA (f32 weights and KV; skipped without a device unless LSERVE_REQUIRE_CUDA=1):
/// the local layers' ring, the QK norms, the post norms and GELU-tanh FFN through CUDA's kernels.
#[cfg(feature = "cuda")]
#[test]
fn cuda_gemma_matches_cpu_past_the_window() {
    if let Some(gpu) = common::cuda_backend() {
        gpu_gemma_matches_cpu(gpu, "cuda");
    }
}

#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn gpu_gemma_matches_cpu<G: lserve::backend::Backend>(gpu: G, name: &str) {
    use lserve::backend::{Backend, DType};
    let seed = common::seed();
    let (c, w) = tiny_gemma(seed);
    let mut rng = common::naive::Rng(seed ^ 0x5eed);
    let ids: Vec<u32> = (0..160).map(|_| (rng.next() * 511.0) as u32).collect();
    let f32w = gpu.caps().weight_dtypes.contains(&DType::F32).then_some(DType::F32);
    fn run<B: Backend>(e: &mut Engine<B>, ids: &[u32]) -> Vec<Vec<f32>> {
        let mut seq = e.cache.admit().unwrap();
        let mut rows = vec![];
        for chunk in ids[..150].chunks(16) {
            rows.push(e.step(&mut seq, chunk, Logits::All, None).unwrap());
        }
        for t in 150..160 {
            rows.push(e.step(&mut seq, &ids[t..t + 1], Logits::Last, None).unwrap());
        }
        rows
    }
    let mut config = lserve::sparse::Config::default();
    if gpu.caps().kv_dtypes.contains(&DType::F32) {
        config.cache.kv_dtype = "f32".into();
    }
    let got = run(&mut tiny_engine_with(gpu, &c, &w, f32w, config.clone()), &ids);
    let want = run(&mut tiny_engine_with(CpuBackend::new(), &c, &w, None, config), &ids);
    assert_rows_close(&got, &want, f32w.is_some(), &format!("{name} vs cpu (seed {seed})"));
}

/// Every logits row within 1e-3 (f32 weights) or 3e-2 (16-bit weights) of the reference's.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn assert_rows_close(got: &[Vec<f32>], want: &[Vec<f32>], f32w: bool, what: &str) {
    let tol = if f32w { 1e-3 } else { 3e-2 };
    assert_eq!(got.len(), want.len(), "{what}: rows");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let err = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(err < tol, "step {i}: max |logit diff| {what} {err} (tolerance {tol})");
    }
}

/// Block-sparse prefill through a GPU backend's kernels against the CPU (f32 weights and KV where
/// the backend has them), with either estimate: 150 tokens in 16-token steps and in one step,
/// blocks sparse from position 32 on the global layer, logits of every row within 1e-3. wgpu (f32 all
/// through) keeps two pages a block, so its selection must agree with the CPU's; CUDA multiplies
/// the estimate in bf16 on tensor cores, where a near tie may pick another page, so it keeps
/// every candidate (its scores are compared by the `antidiagonal_score` parity test instead).
#[cfg(feature = "wgpu")]
#[test]
fn wgpu_block_sparse_prefill_matches_cpu() {
    if let Some(gpu) = common::wgpu_backend() {
        gpu_block_sparse_matches_cpu(gpu, "wgpu", 32);
    }
}

#[cfg(feature = "cuda")]
#[test]
fn cuda_block_sparse_prefill_matches_cpu() {
    if let Some(gpu) = common::cuda_backend() {
        gpu_block_sparse_matches_cpu(gpu, "cuda", 16 * 16);
    }
}

#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn gpu_block_sparse_matches_cpu<G: lserve::backend::Backend>(mut gpu: G, name: &str, budget: usize) {
    use lserve::backend::{Backend, DType};
    use lserve::sparse::PrefillEstimate;
    let seed = common::seed();
    let (c, w) = tiny_gemma(seed);
    let mut rng = common::naive::Rng(seed ^ 0xad1a);
    let ids: Vec<u32> = (0..150).map(|_| (rng.next() * 511.0) as u32).collect();
    let caps = gpu.caps().clone();
    let f32w = caps.weight_dtypes.contains(&DType::F32).then_some(DType::F32);
    fn run<B: Backend>(e: &mut Engine<B>, ids: &[u32], chunk: usize) -> Vec<Vec<f32>> {
        let mut seq = e.cache.admit().unwrap();
        ids.chunks(chunk).map(|rows| e.step(&mut seq, rows, Logits::All, None).unwrap()).collect()
    }
    // 16-row steps (one query block each) and the whole prompt in one step (ten blocks: the
    // mean bound's virtual rows outnumber the step's sequences), with either estimate.
    for (est, chunk) in [
        (PrefillEstimate::Antidiagonal, 16),
        (PrefillEstimate::MeanBound, 16),
        (PrefillEstimate::Antidiagonal, 150),
        (PrefillEstimate::MeanBound, 150),
    ] {
        let mut config = lserve::sparse::Config::default();
        config.sparse.enabled = true;
        config.sparse.streaming_ratio = 0.0;
        config.sparse.dense_below = 1 << 20;
        config.sparse.prefill_budget = budget;
        config.sparse.prefill_dense_below = 32;
        config.sparse.prefill_estimate = est;
        if caps.kv_dtypes.contains(&DType::F32) {
            config.cache.kv_dtype = "f32".into();
        }
        // The one backend goes through every engine (each takes it, and gives it back after).
        let mut e = tiny_engine_chunk(gpu, &c, &w, f32w, config.clone(), chunk);
        let got = run(&mut e, &ids, chunk);
        gpu = e.backend;
        let want = run(&mut tiny_engine_chunk(CpuBackend::new(), &c, &w, None, config, chunk), &ids, chunk);
        let what = format!("{name} vs cpu (seed {seed}, budget {budget}, {}, {chunk}-row steps)", est.name());
        assert_rows_close(&got, &want, f32w.is_some(), &what);
    }
}

/// Block-sparse prefill on Gemma 3 acts on its global layer (layer 5 of the tiny model; the
/// local layers read their window): 150 tokens prefilled in 16-token steps with blocks sparse
/// from position 32 (`prefill_dense_below`). With a budget of every page the selection takes
/// all candidate pages and the last logits equal dense prefill's (summation order aside); with
/// two pages (the least the config takes) the late blocks skip keys, so the logits move (the path
/// is live) — and not through the local layers: the same budget with the global layer dense
/// changes nothing. Both estimates (antidiagonal, the default, and the mean-query bound).
#[cfg(feature = "wgpu")]
#[test]
fn block_sparse_prefill_acts_on_the_global_layers() {
    let seed = common::seed();
    let (c, w) = tiny_gemma(seed);
    let mut rng = common::naive::Rng(seed ^ 0xb10c);
    let ids: Vec<u32> = (0..150).map(|_| (rng.next() * 511.0) as u32).collect();
    use lserve::sparse::PrefillEstimate;
    let last_in = |chunk: usize, budget: Option<usize>, dense_layers: Vec<usize>, est: PrefillEstimate| -> Vec<f32> {
        let mut config = lserve::sparse::Config::default();
        if let Some(b) = budget {
            config.sparse.enabled = true;
            config.sparse.streaming_ratio = 0.0;
            config.sparse.dense_below = 1 << 20; // decode (none here) stays dense
            config.sparse.prefill_budget = b;
            config.sparse.prefill_dense_below = 32;
            config.sparse.dense_layers = dense_layers;
            config.sparse.prefill_estimate = est;
        }
        let mut e = tiny_engine_chunk(CpuBackend::new(), &c, &w, None, config, chunk);
        let mut seq = e.cache.admit().unwrap();
        let mut out = vec![];
        for rows in ids.chunks(chunk) {
            out = e.step(&mut seq, rows, Logits::Last, None).unwrap();
        }
        out
    };
    let last =
        |budget: Option<usize>, dense_layers: Vec<usize>, est: PrefillEstimate| last_in(16, budget, dense_layers, est);
    let diff = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
    let dense = last(None, vec![], PrefillEstimate::Antidiagonal);
    for est in [PrefillEstimate::Antidiagonal, PrefillEstimate::MeanBound] {
        let all_pages = last(Some(16 * 16), vec![], est);
        let two_pages = last(Some(32), vec![], est);
        let global_dense = last(Some(32), vec![5], est);
        eprintln!(
            "seed {seed}, {}: all pages {:.2e}, two pages {:.2e}, two pages with layer 5 dense {:.2e}",
            est.name(),
            diff(&all_pages, &dense),
            diff(&two_pages, &dense),
            diff(&global_dense, &dense)
        );
        assert!(diff(&all_pages, &dense) < 1e-4, "every page selected must equal dense prefill");
        assert!(diff(&two_pages, &dense) > 1e-3, "a two-page budget must change the global layer's attention");
        assert!(diff(&global_dense, &dense) < 1e-4, "with the global layer dense nothing is sparse");
        assert!(two_pages.iter().all(|x| x.is_finite()));
        // The whole prompt in one step: two query blocks, so page_select's virtual rows outnumber
        // the step's sequences (their kv_len is the blocks' own; session 35's unit selection
        // made the mean bound ask for one per row).
        let one_step = last_in(150, Some(16 * 16), vec![], est);
        let one_step_dense = last_in(150, None, vec![], est);
        assert!(diff(&one_step, &one_step_dense) < 1e-4, "{}: one step, every page", est.name());
        assert!(diff(&last_in(150, Some(32), vec![], est), &one_step_dense) > 1e-3, "{}", est.name());
    }
}
