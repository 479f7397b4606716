//! Tensor parallelism on the CPU backend (docs/tensor-parallel.md): N ranks on threads of this
//! process, each with its own CPU backend, model shard (`Llama::load_shard`) and KV heads, joined
//! by the host collective, against the unsharded engine and the naive float64 transformer.
//!
//! Tolerances: the sharded forward sums the row-parallel matmuls' partial dot products across
//! ranks (rank order, deterministic) where the unsharded one sums each dot product in one pass,
//! so logits differ by float32 reduction order only: |diff| < 1e-4 on logits of magnitude ~10
//! (measured ~1e-5 on the default model). Greedy ids must be identical except at a near tie:
//! a divergence is accepted only where the unsharded top-2 margin is below 1e-3 (the rule of
//! tests/cuda_e2e.rs), and the comparison stops there.

mod common;

use std::sync::LazyLock;

use lserve::backend::collective::HostCollective;
use lserve::backend::cpu::CpuBackend;
use lserve::backend::{LayerKv, PagedMeta};
use lserve::engine::{Engine, EngineOptions, GenerateRequest, build_engine, build_engine_tp};
use lserve::kv::{CacheShape, HeadLayout, KvCache};
use lserve::loader::{self, LoadedModel};
use lserve::model::config::ModelConfig;
use lserve::model::llama::{Llama, LoadOptions, Logits, WeightSource};
use lserve::sampling::SamplingParams;
use lserve::sparse::Config;

use common::naive::*;

static MODEL: LazyLock<LoadedModel> = LazyLock::new(|| loader::open(&common::model_path()).expect("model opens"));

/// An engine of `n` ranks (n = 1: the ordinary unsharded engine).
fn engine(cfg: &ModelConfig, src: &dyn WeightSource, n: usize, opts: &EngineOptions) -> Engine<CpuBackend> {
    if n == 1 {
        let be = CpuBackend::new();
        let model = Llama::load(&be, cfg, src, |_, _| {}).expect("weights load");
        return build_engine(be, model, opts).expect("engine builds");
    }
    let shards = load_shards((0..n).map(|_| CpuBackend::new()), HostCollective::group(n), cfg, src);
    build_engine_tp(shards, opts).expect("tensor-parallel engine builds")
}

/// Each backend's shard of the model, one rank each of `comms` (in order).
fn load_shards<B: lserve::backend::Backend>(
    backends: impl Iterator<Item = B>,
    comms: Vec<HostCollective>,
    cfg: &ModelConfig,
    src: &dyn WeightSource,
) -> Vec<(B, Llama<B>)> {
    backends
        .zip(comms)
        .map(|(be, comm)| {
            let m = Llama::load_shard(&be, cfg, src, &LoadOptions::default(), Box::new(comm), |_, _| {});
            (be, m.expect("shard loads"))
        })
        .collect()
}

fn opts(config: Config, max_tokens: usize, chunk: usize, layout: Option<HeadLayout>) -> EngineOptions {
    EngineOptions { config, max_tokens, max_seqs: 1, prefill_chunk: chunk, layout }
}

/// Every row's logits: the first half prefilled in chunks of `chunk`, then decode one token at a time.
fn all_logits(e: &mut Engine<CpuBackend>, ids: &[u32], chunk: usize) -> Vec<Vec<f32>> {
    common::step_logits(e, ids, ids.len() / 2, chunk)
}

fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// Small random models (GQA untied, qkv bias with tied embeddings): TP=2 against the naive
/// float64 model (the tolerance of tests/forward_reference.rs) and against TP=1 (within 5e-5:
/// f32 reduction order).
#[test]
fn small_models_tp2_match_naive_and_tp1() {
    let base = ModelConfig { vocab_size: 98, ..base_config() };
    let qwen = ModelConfig { arch: "qwen2".into(), attention_bias: true, tie_word_embeddings: true, ..base.clone() };
    for (name, c) in [("gqa untied", base), ("qwen2 bias tied", qwen)] {
        let mut rng = Rng(common::seed() | 1);
        let w = random_weights(&c, &mut rng);
        let ids: Vec<u32> = (0..37).map(|_| (rng.next() * c.vocab_size as f64) as u32).collect();
        let want = naive_logits(&c, &w, &ids);
        let o = opts(common::paged_config(16, 4), ids.len(), 5, None);
        let one = all_logits(&mut engine(&c, &w, 1, &o), &ids, 5);
        let two = all_logits(&mut engine(&c, &w, 2, &o), &ids, 5);
        assert_eq!(two.len(), ids.len());
        for (i, ((t, o), n)) in two.iter().zip(&one).zip(&want).enumerate() {
            let d = max_diff(t, n);
            assert!(d < 2e-4, "{name}: position {i}: TP=2 vs naive max |diff| {d}");
            // Only the f32 summation order differs (partial sums all-reduced); 1e-5 was exceeded
            // (1.1e-5) by one seed, a broken reduction is off by ~2.
            let d = max_abs(t, o);
            assert!(d < 5e-5, "{name}: position {i}: TP=2 vs TP=1 max |diff| {d}");
        }
    }
}

/// Greedy ids of `prompt` (24 tokens), the last prefill logits and the fraction of KV decode read.
fn greedy(e: &mut Engine<CpuBackend>, prompt: &[u32]) -> (Vec<u32>, Vec<f32>, f64) {
    let mut seq = e.cache.admit().unwrap();
    let logits = e.step(&mut seq, prompt, Logits::Last, None).unwrap();
    e.cache.release(&mut seq).unwrap();
    let out = common::generate_greedy(e, prompt, 24);
    assert_eq!(e.cache.alloc.num_free(), e.cache.alloc.num_pages(), "pages released");
    (out.tokens, logits, out.kv_reads.fraction())
}

/// Top-2 margin of the unsharded engine's logits after `prompt` + `done`.
fn margin(e: &mut Engine<CpuBackend>, prompt: &[u32], done: &[u32]) -> f32 {
    let mut seq = e.cache.admit().unwrap();
    let ids: Vec<u32> = prompt.iter().chain(done).copied().collect();
    let l = e.step(&mut seq, &ids, Logits::Last, None).unwrap();
    e.cache.release(&mut seq).unwrap();
    let mut s = l.clone();
    s.sort_by(|a, b| b.total_cmp(a));
    s[0] - s[1]
}

/// The reference prompts, the long one cut to its first 300 tokens.
fn prompts() -> Vec<(&'static str, Vec<u32>)> {
    let r = common::reference();
    let mut v: Vec<_> = ["d1_plain", "d2_chat", "d3_code", "d4_long"]
        .into_iter()
        .map(|p| (p, common::ids(&r["prompts"][p]["ids"])))
        .collect();
    v[3].1.truncate(300);
    v
}

/// Greedy ids of TP=3 equal TP=1's up to a near tie; last logits within the stated tolerance;
/// the same KV read fraction (every rank's heads counted), which must be at most `max_read`.
fn compare_greedy(config: Config, layout: Option<HeadLayout>, what: &str, max_read: f64) {
    let m = &*MODEL;
    let o = opts(config, 1536, 512, layout);
    let mut one = engine(&m.config, m.weights.as_ref(), 1, &o);
    let mut three = engine(&m.config, m.weights.as_ref(), 3, &o);
    assert_eq!(three.tp_size(), 3);
    for (p, prompt) in prompts() {
        let (want, want_logits, want_read) = greedy(&mut one, &prompt);
        let (got, got_logits, got_read) = greedy(&mut three, &prompt);
        let d = max_abs(&got_logits, &want_logits);
        eprintln!(
            "{what} {p}: {} prompt tokens, TP=3 vs TP=1 last logits max |diff| {d:.2e}, KV read {got_read:.3}",
            prompt.len()
        );
        assert_eq!(got_read, want_read, "{what} {p}: KV read fraction");
        if p == "d4_long" {
            assert!(got_read <= max_read, "{what} {p}: KV read fraction {got_read} (sparsity did not act)");
        }
        assert!(d < 1e-4, "{what} {p}: last logits max |diff| {d}");
        if let Some(i) = got.iter().zip(&want).position(|(a, b)| a != b) {
            let gap = margin(&mut one, &prompt, &want[..i]);
            assert!(gap < 1e-3, "{what} {p}: TP=3 diverges at token {i} where the top-2 margin is {gap}");
            eprintln!("{what} {p}: near tie at token {i} (margin {gap:.1e})");
        }
    }
}

/// The default model (9 query / 3 KV heads, FFN 1536, vocabulary 49152, Q4_1 blocks): TP=3,
/// one KV head per rank, dense attention.
#[test]
fn smollm2_tp3_dense_matches_tp1() {
    compare_greedy(Config::default(), None, "dense", 1.0);
}

/// Sparse attention with streaming heads on some ranks only (rank 0 has none in odd layers, rank
/// 2 none at all) and a budget small enough that page selection acts on the 300-token prompt
/// (4 of 20 pages): each rank selects pages for its own heads.
#[test]
fn smollm2_tp3_sparse_matches_tp1() {
    let mut c = common::paged_config(16, 4);
    let s = &mut c.sparse;
    (s.enabled, s.token_budget, s.dense_below, s.selector_interval) = (true, 64, 32, 2);
    (s.sink_tokens, s.local_tokens) = (16, 32);
    let layout = HeadLayout { streaming: (0..30).map(|l| vec![l % 2 == 0, l % 2 == 1, false]).collect() };
    compare_greedy(c, Some(layout), "sparse", 0.6);
}

#[test]
fn bad_tensor_parallel_sizes_are_refused() {
    let m = &*MODEL;
    let o = opts(Config::default(), 64, 64, None);
    let comm = HostCollective::group(2).into_iter().next().unwrap();
    let be = CpuBackend::new();
    let e = Llama::load_shard(&be, &m.config, m.weights.as_ref(), &LoadOptions::default(), Box::new(comm), |_, _| {});
    let msg = e.err().expect("TP=2 of 9 heads is refused").to_string();
    assert!(msg.contains("does not divide the model's 9 attention heads"), "{msg}");
    // Shards of a group of 3 given as a group of 2 ranks.
    let shards =
        load_shards((0..2).map(|_| CpuBackend::new()), HostCollective::group(3), &m.config, m.weights.as_ref());
    let msg = build_engine_tp(shards, &o).err().expect("mismatched ranks are refused").to_string();
    assert!(msg.contains("are not ranks 0..2"), "{msg}");
}

/// Calibration's per-layer hook cannot see other ranks' heads: refused, and the engine (its
/// collective) still works after the refusal.
#[test]
fn layer_hooks_are_refused_under_tp() {
    let c = ModelConfig { vocab_size: 98, ..base_config() };
    let w = random_weights(&c, &mut Rng(7));
    let mut e = engine(&c, &w, 2, &opts(common::paged_config(16, 4), 16, 8, None));
    let mut seq = e.cache.admit().unwrap();
    let mut hook = |_: &CpuBackend,
                    _: usize,
                    _: &lserve::backend::cpu::CpuBuffer,
                    _: LayerKv<CpuBackend>,
                    _: &PagedMeta<CpuBackend>| Ok(());
    let err = e.step(&mut seq, &[1, 2, 3], Logits::Last, Some(&mut hook)).unwrap_err().to_string();
    assert!(err.contains("do not run with tensor parallelism"), "{err}");
    assert_eq!(e.step(&mut seq, &[1, 2, 3], Logits::Last, None).unwrap().len(), 98);
    // An id outside the vocabulary fails on every rank before any collective, then the next
    // step runs.
    assert!(e.step(&mut seq, &[500], Logits::Last, None).is_err());
    assert_eq!(e.step(&mut seq, &[4], Logits::Last, None).unwrap().len(), 98);
}

/// Three wgpu ranks on one adapter (host collective) give the unsharded CPU engine's greedy ids,
/// up to a near tie. Skipped without an adapter unless LSERVE_REQUIRE_WGPU=1.
#[cfg(feature = "wgpu")]
#[test]
fn wgpu_tp3_on_one_adapter_matches_cpu() {
    let Some(first) = common::wgpu_backend() else { return };
    let m = &*MODEL;
    let o = opts(Config::default(), 256, 256, None);
    let mut cpu = engine(&m.config, m.weights.as_ref(), 1, &o);
    let backends = std::iter::once(first).chain((0..2).map(|_| common::wgpu_backend().unwrap()));
    let shards = load_shards(backends, HostCollective::group(3), &m.config, m.weights.as_ref());
    let mut gpu = build_engine_tp(shards, &o).expect("engine builds");
    let prompt = &prompts()[0].1;
    let req = GenerateRequest {
        prompt: prompt.clone(),
        max_tokens: 12,
        sampling: SamplingParams::greedy(),
        stop_ids: vec![],
        ignore_eos: true,
    };
    let want = cpu.generate(&req, &mut |_| Ok(())).unwrap().tokens;
    let got = gpu.generate(&req, &mut |_| Ok(())).unwrap().tokens;
    if let Some(i) = got.iter().zip(&want).position(|(a, b)| a != b) {
        let gap = margin(&mut cpu, prompt, &want[..i]);
        assert!(gap < 1e-2, "wgpu TP=3 diverges at token {i} where the top-2 margin is {gap}");
    }
}

/// Rank 1 fails inside the forward (its cache swapped for one page too small, so its KV append
/// is out of bounds) while rank 0 waits in a collective: the step fails with rank 1's error, not
/// the abort rank 0 saw, and once the cache is put back the same group runs the next step.
#[test]
fn a_rank_failing_mid_step_fails_the_step_and_the_group_recovers() {
    let c = ModelConfig { vocab_size: 98, ..base_config() };
    let w = random_weights(&c, &mut Rng(9));
    let mut e = engine(&c, &w, 2, &opts(common::paged_config(16, 4), 64, 64, None));
    let small = CacheShape { num_pages: 1, ..e.ranks[0].cache.shape.clone() };
    let small = KvCache::new(&e.ranks[0].backend, small).unwrap();
    let good = std::mem::replace(&mut e.ranks[0].cache, small);
    let mut seq = e.cache.admit().unwrap();
    let ids: Vec<u32> = (0..40).collect();
    let err = e.step(&mut seq, &ids, Logits::Last, None).unwrap_err().to_string();
    eprintln!("{err}");
    assert!(!err.contains("another tensor-parallel rank failed"), "the cause, not the abort: {err}");
    assert_eq!(seq.len, 0, "a failed step advances nothing");
    e.ranks[0].cache = good;
    let want = all_logits(&mut engine(&c, &w, 1, &opts(common::paged_config(16, 4), 64, 64, None)), &ids[..1], 1);
    let got = e.step(&mut seq, &ids[..1], Logits::Last, None).unwrap();
    assert!(max_abs(&got, &want[0]) < 1e-5);
}
