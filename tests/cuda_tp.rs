//! Tensor parallelism on the CUDA backend (docs/tensor-parallel.md). Skipped without a CUDA
//! device unless LSERVE_REQUIRE_CUDA=1; the NCCL test needs two GPUs and libnccl (skipped with a
//! message otherwise, unless LSERVE_REQUIRE_NCCL=1).
//!
//! - One rank built through the tensor-parallel constructor is today's path: bit-identical logits.
//! - Ranks sharing GPU 0 through the host collective (a model file, TP=3: `$LSERVE_TEST_MODEL`,
//!   else the default model when it is in the cache, else skipped — scripts/tp_gpu.sh points it
//!   at the random GGUF of `examples/tp_model.rs`; an in-memory random model with even head
//!   counts, TP=2) give TP=1's greedy ids up to a near tie (TP=1 top-2 margin below 2e-3: the
//!   sharded forward only sums the row-parallel partial products in another order), with an f32
//!   KV cache. Nothing here reads tests/data, so the binary runs from any directory.
//! - Two GPUs joined by NCCL (graph capture on: the decode steps replay with the all-reduces in
//!   their graphs) equal TP=1 the same way, and equal the host collective on the same shards bit
//!   for bit (two ranks: every element is a + b either way).
#![cfg(feature = "cuda")]

mod common;

use std::sync::LazyLock;

use lserve::backend::Backend;
use lserve::backend::collective::{Collective, HostCollective};
use lserve::backend::cuda::CudaBackend;
use lserve::backend::cuda::nccl::{NcclCollective, nccl_present};
use lserve::engine::{Engine, EngineOptions, build_engine, build_engine_tp};
use lserve::loader::{self, LoadedModel};
use lserve::model::config::ModelConfig;
use lserve::model::llama::{Llama, LoadOptions, Logits, WeightSource};

use common::naive::{Rng, random_weights};

/// The model file of the TP=3 test: `$LSERVE_TEST_MODEL`, else the cached default model (never
/// fetched: GPU machines have no network), else None.
static MODEL: LazyLock<Option<LoadedModel>> = LazyLock::new(|| {
    let path = match std::env::var_os("LSERVE_TEST_MODEL") {
        Some(p) => std::path::PathBuf::from(p),
        None => lserve::fetch::alias_path(lserve::fetch::DEFAULT_MODEL).filter(|p| p.exists())?,
    };
    Some(loader::open(&path).expect("the model file opens"))
});

fn opts() -> EngineOptions {
    let mut c = common::paged_config(16, 4);
    c.cache.kv_dtype = "f32".into();
    EngineOptions { config: c, max_tokens: 512, max_seqs: 1, prefill_chunk: 64, layout: None }
}

/// CUDA device `device` with the on-disk kernel cache (as `common::cuda_backend`).
fn open(device: usize) -> CudaBackend {
    let opts = lserve::backend::cuda::CudaOptions {
        kernel_cache: Some(lserve::fetch::cache_dir().join("cuda")),
        ..Default::default()
    };
    CudaBackend::with_options(device, opts).expect("CUDA device opens")
}

/// An engine over `backends` joined by `comms` (none: one rank, the whole model).
fn engine(
    cfg: &ModelConfig,
    src: &dyn WeightSource,
    backends: Vec<CudaBackend>,
    comms: Vec<Box<dyn Collective<CudaBackend>>>,
) -> Engine<CudaBackend> {
    if comms.is_empty() {
        let be = backends.into_iter().next().unwrap();
        let m = Llama::load(&be, cfg, src, |_, _| {}).unwrap();
        return build_engine(be, m, &opts()).unwrap();
    }
    let shards = backends
        .into_iter()
        .zip(comms)
        .map(|(be, comm)| {
            be.bind_thread().unwrap();
            let m = Llama::load_shard(&be, cfg, src, &LoadOptions::default(), comm, |_, _| {}).unwrap();
            (be, m)
        })
        .collect();
    build_engine_tp(shards, &opts()).unwrap()
}

fn host(n: usize) -> Vec<Box<dyn Collective<CudaBackend>>> {
    HostCollective::group(n).into_iter().map(|c| Box::new(c) as Box<dyn Collective<CudaBackend>>).collect()
}

fn greedy(e: &mut Engine<CudaBackend>, prompt: &[u32]) -> Vec<u32> {
    common::generate_greedy(e, prompt, 24).tokens
}

fn last_logits(e: &mut Engine<CudaBackend>, ids: &[u32]) -> Vec<f32> {
    let mut seq = e.cache.admit().unwrap();
    let l = e.step(&mut seq, ids, Logits::Last, None).unwrap();
    e.cache.release(&mut seq).unwrap();
    l
}

/// `got` equals `want` (TP=1's ids) up to a near tie of `one` (the TP=1 engine).
fn same_up_to_near_tie(one: &mut Engine<CudaBackend>, prompt: &[u32], want: &[u32], got: &[u32], what: &str) {
    let Some(i) = want.iter().zip(got).position(|(a, b)| a != b) else { return };
    let ids: Vec<u32> = prompt.iter().chain(&want[..i]).copied().collect();
    let mut l = last_logits(one, &ids);
    l.sort_by(|a, b| b.total_cmp(a));
    let gap = l[0] - l[1];
    eprintln!("{what}: diverges at token {i}, TP=1 top-2 margin {gap:.1e}");
    assert!(gap < 2e-3, "{what}: divergence at token {i} is not a near tie (margin {gap})");
}

/// Prompts of 7, 40 and 200 ids below `vocab` (fixed).
fn prompts(vocab: usize) -> Vec<Vec<u32>> {
    let mut rng = Rng(3);
    [7, 40, 200].iter().map(|&n| (0..n).map(|_| (rng.next() * vocab as f64) as u32 % vocab as u32).collect()).collect()
}

#[test]
fn one_rank_through_the_tp_constructor_is_todays_path() {
    if common::cuda_backend().is_none() {
        return;
    }
    let (cfg, w) = random_model();
    let mut a = engine(&cfg, &w, vec![open(0)], vec![]);
    let be = open(0);
    let model = Llama::load(&be, &cfg, &w, |_, _| {}).unwrap();
    let mut b = build_engine_tp(vec![(be, model)], &opts()).unwrap();
    assert_eq!(b.tp_size(), 1);
    for p in prompts(cfg.vocab_size) {
        assert_eq!(last_logits(&mut a, &p), last_logits(&mut b, &p));
        assert_eq!(greedy(&mut a, &p), greedy(&mut b, &p));
    }
}

#[test]
fn model_file_tp3_on_one_gpu_matches_tp1() {
    if common::cuda_backend().is_none() {
        return;
    }
    let Some(m) = &*MODEL else {
        eprintln!("skipping: no model file (set LSERVE_TEST_MODEL)");
        return;
    };
    let mut one = engine(&m.config, m.weights.as_ref(), vec![open(0)], vec![]);
    let mut three = engine(&m.config, m.weights.as_ref(), (0..3).map(|_| open(0)).collect(), host(3));
    for p in prompts(m.config.vocab_size) {
        let (want, got) = (greedy(&mut one, &p), greedy(&mut three, &p));
        eprintln!("TP=1 {want:?}\nTP=3 {got:?}");
        same_up_to_near_tie(&mut one, &p, &want, &got, "model file TP=3 host");
    }
}

/// A random model with SmolLM2's head_dim and even head counts (8 query, 4 KV heads).
fn random_model() -> (ModelConfig, lserve::loader::MemWeights) {
    let cfg = ModelConfig {
        num_layers: 4,
        vocab_size: 2048,
        num_heads: 8,
        num_kv_heads: 4,
        ..lserve::bench::shape("smollm2-135m").unwrap()
    };
    let w = random_weights(&cfg, &mut Rng(11));
    (cfg, w)
}

fn random_prompts() -> Vec<Vec<u32>> {
    let mut rng = Rng(5);
    [9, 150, 300].iter().map(|&n| (0..n).map(|_| (rng.next() * 2048.0) as u32 % 2048).collect()).collect()
}

#[test]
fn random_model_tp2_on_one_gpu_matches_tp1() {
    if common::cuda_backend().is_none() {
        return;
    }
    let (cfg, w) = random_model();
    let mut one = engine(&cfg, &w, vec![open(0)], vec![]);
    let mut two = engine(&cfg, &w, vec![open(0), open(0)], host(2));
    for p in random_prompts() {
        let (want, got) = (greedy(&mut one, &p), greedy(&mut two, &p));
        same_up_to_near_tie(&mut one, &p, &want, &got, "random TP=2 host");
    }
}

#[test]
fn random_model_tp2_over_nccl_matches_tp1_and_the_host_collective() {
    if common::cuda_backend().is_none() {
        return;
    }
    let required = std::env::var("LSERVE_REQUIRE_NCCL").is_ok_and(|v| v == "1");
    let gpus = lserve::backend::probe::cuda_device_count();
    if gpus < 2 || !nccl_present() {
        assert!(!required, "NCCL test required: {gpus} GPU(s), libnccl present: {}", nccl_present());
        eprintln!("skipping the NCCL test: {gpus} GPU(s), libnccl present: {}", nccl_present());
        return;
    }
    let (cfg, w) = random_model();
    let mut one = engine(&cfg, &w, vec![open(0)], vec![]);
    let (a, b) = (open(0), open(1));
    let comms = NcclCollective::group(&[&a, &b]).unwrap();
    let comms = comms.into_iter().map(|c| Box::new(c) as Box<dyn Collective<CudaBackend>>).collect();
    let mut nccl = engine(&cfg, &w, vec![a, b], comms);
    let mut hosted = engine(&cfg, &w, vec![open(0), open(1)], host(2));
    for p in random_prompts() {
        let want = greedy(&mut one, &p);
        let got = greedy(&mut nccl, &p);
        same_up_to_near_tie(&mut one, &p, &want, &got, "random TP=2 NCCL");
        assert_eq!(last_logits(&mut nccl, &p), last_logits(&mut hosted, &p), "NCCL vs host, same shards");
        assert_eq!(got, greedy(&mut hosted, &p));
    }
}
