//! Page pressure at long context, end to end on the CPU: five 32K-128K-token requests served
//! together from a KV pool that cannot hold them all (16-token pages), so the scheduler preempts
//! — by swap to the host tier, or by dropping and recomputing — and every request's greedy output
//! must equal what it produces served alone.
//!
//! The model is a tiny synthetic Llama (2 layers, hidden 64, GQA 4/2, head_dim 16) with a
//! 128K context and a 256-token sliding window, behind the default model's tokenizer: the window
//! keeps the CPU reference's prefill attention linear in the length (dense attention over 128K
//! tokens would take minutes), while the KV pool still holds every token of every sequence, so
//! the page tables, the page pressure and the swapped bytes are those of 128K-token sequences.
//! What the window hides: KV older than 256 tokens cannot change an output, so a swap that lost
//! only early pages would pass here (the bit-exact swap round trip in tests/serve_engine.rs covers
//! every page).

mod common;

use std::sync::{Arc, LazyLock};

use lserve::backend::cpu::CpuBackend;
use lserve::engine::{EngineOptions, FinishReason, build_engine};
use lserve::loader::{self, LoadedModel};
use lserve::model::config::ModelConfig;
use lserve::model::llama::Llama;
use lserve::sampling::SamplingParams;
use lserve::sched::{PreemptMode, SchedConfig, SeqId};
use lserve::serving::{Event, ServeEngine, ServeOptions, ServeRequest, ServeStats};
use tokio::sync::mpsc::unbounded_channel;

static MODEL: LazyLock<LoadedModel> = LazyLock::new(|| loader::open(&common::model_path()).expect("model opens"));

const PAGE: usize = 16;
const CHUNK: usize = 2048;
const MAX_TOKENS: usize = 6;
/// Pages in the pool: the longest request (128K tokens, 8192 pages) fits alone. The scheduler
/// admits a request when all its tokens fit in the pages free at that moment, so the first two
/// (64K + 80K), admitted together, outgrow the pool while they prefill and one is preempted; the
/// later ones meet the resumed one and preempt again.
const POOL_PAGES: usize = 8_300;

fn tiny() -> ModelConfig {
    ModelConfig {
        vocab_size: MODEL.tokenizer.vocab_size(),
        hidden_size: 64,
        intermediate_size: 128,
        num_layers: 2,
        num_heads: 4,
        num_kv_heads: 2,
        head_dim: 16,
        max_position_embeddings: 131_072,
        sliding_window: Some(256),
        ..lserve::bench::shape("smollm2-135m").expect("named shape")
    }
}

/// A serving engine over the tiny model with exactly `pages` KV pages and `max_num_seqs` slots.
fn serve(pages: usize, max_num_seqs: usize, mode: PreemptMode, swap_bytes: usize) -> ServeEngine<CpuBackend> {
    let be = CpuBackend::new();
    let cfg = tiny();
    let llama = Llama::synthetic(&be, &cfg, None, 12).expect("synthetic weights");
    let mut config = common::paged_config(PAGE, PAGE);
    // K and V of 16 tokens and one min/max summary per layer and KV head, f32.
    let page_bytes = cfg.num_layers * cfg.num_kv_heads * (2 * PAGE * cfg.head_dim * 4 + 2 * cfg.head_dim * 4);
    config.cache.kv_memory = Some((pages * page_bytes).to_string());
    let opts = EngineOptions { config, max_tokens: 0, max_seqs: max_num_seqs, prefill_chunk: CHUNK, layout: None };
    let engine = build_engine(be, llama, &opts).expect("engine");
    assert_eq!(engine.cache.shape.num_pages, pages);
    let sched =
        SchedConfig { max_num_seqs, max_batch_tokens: 2 * CHUNK, prefill_chunk: CHUNK, page_size: PAGE, preempt: mode };
    let tok = Arc::new(MODEL.tokenizer.clone());
    ServeEngine::new(engine, tok, ServeOptions { sched, swap_bytes }).expect("serve engine")
}

/// Prompts of 32K to 128K tokens (random ids from `seed`).
fn requests(seed: u64) -> Vec<ServeRequest> {
    let lens = [64 * 1024, 80 * 1024, 32 * 1024, 40 * 1024, 128 * 1024 - MAX_TOKENS];
    let mut state = seed | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    lens.iter()
        .map(|&n| ServeRequest {
            prompt: (0..n).map(|_| 1000 + (next() % 29_000) as u32).collect(),
            max_tokens: MAX_TOKENS,
            sampling: SamplingParams::greedy(),
            stop: vec![],
            stop_ids: vec![],
        })
        .collect()
}

/// Serve `reqs` together to completion; returns each one's tokens and the final stats.
fn run(se: &mut ServeEngine<CpuBackend>, reqs: &[ServeRequest]) -> (Vec<Vec<u32>>, ServeStats) {
    let mut rxs = vec![];
    for (i, r) in reqs.iter().enumerate() {
        let (tx, rx) = unbounded_channel();
        se.add(i as SeqId + 1, r.clone(), tx).expect("request accepted");
        rxs.push(rx);
    }
    let mut steps = 0;
    while se.has_work() {
        se.step().expect("step");
        steps += 1;
        assert!(steps < 100_000, "no progress");
    }
    let outs = rxs
        .iter_mut()
        .map(|rx| {
            let (mut tokens, mut done) = (vec![], None);
            while let Ok(ev) = rx.try_recv() {
                match ev {
                    Event::Delta { tokens: t, .. } => tokens.extend(t),
                    Event::Done { finish, .. } => done = Some(finish),
                    Event::Error(e) => panic!("request failed: {e}"),
                }
            }
            assert_eq!(done, Some(FinishReason::Length));
            assert_eq!(tokens.len(), MAX_TOKENS);
            tokens
        })
        .collect();
    (outs, se.stats.clone())
}

/// Each request served alone (one slot, the same pool size).
fn alone(reqs: &[ServeRequest]) -> Vec<Vec<u32>> {
    let mut se = serve(POOL_PAGES, 1, PreemptMode::Swap, 0);
    let outs: Vec<Vec<u32>> = reqs.iter().flat_map(|r| run(&mut se, std::slice::from_ref(r)).0).collect();
    assert_eq!(se.stats.preemptions_swap + se.stats.preemptions_recompute, 0, "alone means no preemption");
    // The outputs depend on the prompt (a model that ignored its input would make this test moot).
    assert!(outs.windows(2).any(|w| w[0] != w[1]), "every request produced the same tokens: {outs:?}");
    outs
}

/// The requests (from a fresh printed seed) and their outputs served alone, shared by the tests.
static ALONE: LazyLock<(Vec<ServeRequest>, Vec<Vec<u32>>)> = LazyLock::new(|| {
    let reqs = requests(common::seed());
    let outs = alone(&reqs);
    (reqs, outs)
});

fn pressured(mode: PreemptMode) {
    let (reqs, want) = &*ALONE;
    let mut se = serve(POOL_PAGES, 5, mode, 1 << 30);
    let (got, stats) = run(&mut se, reqs);
    eprintln!(
        "{mode:?}: {} swap / {} recompute preemptions, {} steps, peak running {}",
        stats.preemptions_swap, stats.preemptions_recompute, stats.steps, stats.peak_running
    );
    match mode {
        PreemptMode::Swap => assert!(stats.preemptions_swap > 0, "no swap happened: {stats:?}"),
        PreemptMode::Recompute => assert!(stats.preemptions_recompute > 0, "no recompute happened: {stats:?}"),
    }
    assert!(stats.peak_running >= 2, "the requests never ran together: {stats:?}");
    assert_eq!(&got, want, "outputs under page pressure differ from each request served alone");
    assert_eq!(se.engine.cache.alloc.num_free(), POOL_PAGES, "pages leaked");
}

#[test]
fn long_sequences_swapped_under_page_pressure_equal_alone() {
    pressured(PreemptMode::Swap);
}

#[test]
fn long_sequences_recomputed_under_page_pressure_equal_alone() {
    pressured(PreemptMode::Recompute);
}
