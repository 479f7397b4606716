//! The serving engine and scheduler on the CPU with the default model: exact page ids and
//! preemption order, swap-out/swap-in bit-identical KV, preempted-then-resumed greedy requests
//! equal to uninterrupted ones (swap and recompute), batched greedy equal to one-at-a-time,
//! ragged-batch logits equal to one-sequence-at-a-time steps (dense and sparse), cancellation,
//! stop strings and max_tokens.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use lserve::backend::cpu::CpuBackend;
use lserve::engine::serve::{Event, ServeEngine, ServeOptions, ServeRequest};
use lserve::engine::{Engine, EngineOptions, FinishReason, build_engine};
use lserve::kv::HeadLayout;
use lserve::loader::{self, LoadedModel};
use lserve::model::llama::Llama;
use lserve::sampling::SamplingParams;
use lserve::sched::{PreemptMode, SchedConfig, SeqId};
use lserve::sparse::{Config, HeadPattern};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

static MODEL: LazyLock<LoadedModel> = LazyLock::new(|| loader::open(&common::model_path()).expect("model opens"));

/// An engine with `pages_per_seq * max_seqs` pages of 16 tokens (dense unless `sparse`).
fn engine(pages_per_seq: usize, max_seqs: usize, sparse: bool) -> Engine<CpuBackend> {
    let be = CpuBackend::new();
    let llama = Llama::load(&be, &MODEL.config, MODEL.weights.as_ref(), |_, _| {}).expect("weights load");
    let mut config = common::paged_config(16, 16);
    let mut layout = None;
    if sparse {
        let s = &mut config.sparse;
        (s.enabled, s.token_budget, s.dense_below, s.selector_interval) = (true, 48, 32, 2);
        (s.sink_tokens, s.local_tokens) = (8, 16);
        let hp = HeadPattern::load(std::path::Path::new("patterns/smollm2-135m.toml")).expect("head pattern");
        layout = Some(hp.layout(30, 3, 0.5, &[]).expect("layout"));
    }
    let opts = EngineOptions { config, max_tokens: pages_per_seq * 16, max_seqs, prefill_chunk: 32, layout };
    build_engine(be, llama, &opts).expect("engine builds")
}

fn serve(e: Engine<CpuBackend>, max_num_seqs: usize, mode: PreemptMode, swap_bytes: usize) -> ServeEngine<CpuBackend> {
    let sched = SchedConfig { max_num_seqs, max_batch_tokens: 64, prefill_chunk: 32, page_size: 16, preempt: mode };
    let tok = Arc::new(MODEL.tokenizer.clone());
    ServeEngine::new(e, tok, ServeOptions { sched, swap_bytes }).expect("serve engine")
}

fn request(text: &str, max_tokens: usize) -> ServeRequest {
    let prompt = MODEL.tokenizer.encode(text).expect("encodes");
    ServeRequest { prompt, max_tokens, sampling: SamplingParams::greedy(), stop: vec![], stop_ids: vec![] }
}

const PROMPTS: [&str; 4] = [
    "The history of the printing press begins in",
    "Write a short poem about the sea and the wind:",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Three reasons why cats make good pets are",
];

#[derive(Debug, Default, PartialEq)]
struct Outcome {
    tokens: Vec<u32>,
    text: String,
    finish: Option<FinishReason>,
    error: Option<String>,
}

fn drain(rx: &mut UnboundedReceiver<Event>, out: &mut Outcome) {
    while let Ok(ev) = rx.try_recv() {
        match ev {
            Event::Delta { text, tokens } => {
                out.text.push_str(&text);
                out.tokens.extend(tokens);
            }
            Event::Done { finish, completion_tokens, .. } => {
                assert_eq!(completion_tokens, out.tokens.len());
                out.finish = Some(finish);
            }
            Event::Error(e) => out.error = Some(e),
        }
    }
}

/// Add the requests (ids 1..), run to completion, calling `each_step` after every step.
fn run(
    se: &mut ServeEngine<CpuBackend>,
    reqs: Vec<ServeRequest>,
    mut each_step: impl FnMut(&ServeEngine<CpuBackend>),
) -> Vec<Outcome> {
    let mut rxs = Vec::new();
    for (i, r) in reqs.into_iter().enumerate() {
        let (tx, rx) = unbounded_channel();
        se.add(i as SeqId + 1, r, tx).expect("request accepted");
        rxs.push(rx);
    }
    let mut outs: Vec<Outcome> = rxs.iter().map(|_| Outcome::default()).collect();
    let mut steps = 0;
    while se.has_work() {
        se.step().expect("step");
        each_step(se);
        steps += 1;
        assert!(steps < 10_000, "no progress");
    }
    for (rx, o) in rxs.iter_mut().zip(&mut outs) {
        drain(rx, o);
    }
    outs
}

/// Each request alone on a roomy engine.
fn sequential(reqs: &[ServeRequest]) -> Vec<Outcome> {
    let mut se = serve(engine(16, 1, false), 1, PreemptMode::Swap, 1 << 30);
    reqs.iter().flat_map(|r| run(&mut se, vec![r.clone()], |_| {})).collect()
}

#[test]
fn batched_greedy_equals_one_at_a_time() {
    let reqs: Vec<ServeRequest> = PROMPTS.iter().map(|p| request(p, 12)).collect();
    let want = sequential(&reqs);
    let mut se = serve(engine(16, 4, false), 4, PreemptMode::Swap, 1 << 30);
    let mut max_running = 0;
    let got = run(&mut se, reqs, |se| max_running = max_running.max(se.scheduler().running().len()));
    assert_eq!(max_running, 4, "the requests ran together");
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.error, None);
        assert_eq!(g.tokens, w.tokens);
        assert_eq!(g.text, MODEL.tokenizer.decode(&g.tokens, true).unwrap());
        assert_eq!(g.finish, Some(FinishReason::Length));
    }
}

fn preemption_requests() -> Vec<ServeRequest> {
    let tail = MODEL.tokenizer.encode(" and then, after a long while, the story went on").unwrap();
    let mut reqs = vec![request(PROMPTS[0], 40), request(PROMPTS[1], 40)];
    for r in &mut reqs {
        r.prompt.truncate(8);
        r.prompt.extend(&tail);
        r.prompt.truncate(20);
        assert_eq!(r.prompt.len(), 20);
    }
    reqs
}

/// Two requests of 20-token prompts and 40 new tokens in 6 pages of 16: each needs 4 pages at
/// the end, so the second is preempted when both reach 48 tokens, and resumed when the first
/// ends. Returns the outcomes, the distinct page tables seen after each step, and the engine.
fn preemption_run(mode: PreemptMode, swap_bytes: usize) -> (Vec<Outcome>, Vec<Vec<Vec<u32>>>, ServeEngine<CpuBackend>) {
    let mut se = serve(engine(3, 2, false), 2, mode, swap_bytes);
    let mut pages: Vec<Vec<Vec<u32>>> = Vec::new();
    let outs = run(&mut se, preemption_requests(), |se| {
        let p = vec![se.pages_of(1), se.pages_of(2)];
        if pages.last() != Some(&p) {
            pages.push(p);
        }
    });
    for (i, o) in outs.iter().enumerate() {
        assert_eq!(o.error, None, "request {}", i + 1);
        assert_eq!((o.tokens.len(), o.finish.clone()), (40, Some(FinishReason::Length)));
    }
    assert_eq!(se.stats.pages_used, 0, "everything released");
    (outs, pages, se)
}

fn tokens(outs: &[Outcome]) -> Vec<Vec<u32>> {
    outs.iter().map(|o| o.tokens.clone()).collect()
}

#[test]
fn preempted_then_resumed_by_swap_equals_uninterrupted() {
    let (got, pages, se) = preemption_run(PreemptMode::Swap, 1 << 30);
    // Both prefill into the lowest pages and grow into 4 and 5 in the same step; at 48 tokens
    // both need a 4th page: 2 (the most recently admitted) is swapped out and 1 takes the lowest
    // freed page; 2 comes back into the lowest pages the step after 1 has finished.
    let expect: Vec<Vec<Vec<u32>>> = vec![
        vec![vec![0, 1], vec![2, 3]],
        vec![vec![0, 1, 4], vec![2, 3, 5]],
        vec![vec![0, 1, 4, 2], vec![]],
        vec![vec![], vec![]],
        // Swapped in with 48 tokens (3 pages) and one more for its next token, in one step.
        vec![vec![], vec![0, 1, 2, 3]],
        vec![vec![], vec![]],
    ];
    assert_eq!(pages, expect);
    assert_eq!((se.stats.preemptions_swap, se.stats.preemptions_recompute), (1, 0));
    assert_eq!(tokens(&got), tokens(&sequential(&preemption_requests())));
}

#[test]
fn preempted_then_recomputed_equals_uninterrupted() {
    let (got, _, se) = preemption_run(PreemptMode::Recompute, 1 << 30);
    assert_eq!((se.stats.preemptions_swap, se.stats.preemptions_recompute), (0, 1));
    assert_eq!(tokens(&got), tokens(&sequential(&preemption_requests())));
}

#[test]
fn a_full_host_tier_falls_back_to_recompute() {
    let (got, _, se) = preemption_run(PreemptMode::Swap, 1024);
    assert_eq!((se.stats.preemptions_swap, se.stats.preemptions_recompute), (0, 1));
    assert_eq!(tokens(&got), tokens(&sequential(&preemption_requests())));
}
