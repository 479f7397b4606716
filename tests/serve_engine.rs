//! The serving engine and scheduler on the CPU with the default model: exact page ids and
//! preemption order, swap-out/swap-in bit-identical KV, preempted-then-resumed greedy requests
//! equal to uninterrupted ones (swap and recompute), batched greedy equal to one-at-a-time,
//! ragged-batch logits equal to one-sequence-at-a-time steps (dense and sparse), cancellation,
//! stop strings and max_tokens.

mod common;

use std::sync::{Arc, LazyLock};

use lserve::backend::cpu::CpuBackend;
use lserve::engine::{Engine, EngineOptions, FinishReason, StepHead, StepRow, build_engine};
use lserve::loader::{self, LoadedModel};
use lserve::model::llama::Llama;
use lserve::sampling::SamplingParams;
use lserve::sched::{PreemptMode, SchedConfig, SeqId};
use lserve::serving::{Event, ServeEngine, ServeOptions, ServeRequest};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

static MODEL: LazyLock<LoadedModel> = LazyLock::new(|| loader::open(&common::model_path()).expect("model opens"));

/// Engine options: `pages_per_seq * max_seqs` pages of 16 tokens, prefill chunks of 32, dense, or
/// sparse with streaming heads (small sink/local) and page selection above 32 tokens.
fn options(pages_per_seq: usize, max_seqs: usize, sparse: bool) -> EngineOptions {
    let mut config = common::paged_config(16, 16);
    if sparse {
        let s = &mut config.sparse;
        (s.enabled, s.token_budget, s.dense_below, s.selector_interval) = (true, 48, 32, 2);
        (s.sink_tokens, s.local_tokens, s.streaming_ratio) = (8, 16, 0.5);
        s.head_pattern = Some(std::path::PathBuf::from("patterns/smollm2-135m.toml"));
    }
    EngineOptions { config, max_tokens: pages_per_seq * 16, max_seqs, prefill_chunk: 32, layout: None }
}

fn engine(pages_per_seq: usize, max_seqs: usize, sparse: bool) -> Engine<CpuBackend> {
    let be = CpuBackend::new();
    let llama = Llama::load(&be, &MODEL.config, MODEL.weights.as_ref(), |_, _| {}).expect("weights load");
    build_engine(be, llama, &options(pages_per_seq, max_seqs, sparse)).expect("engine builds")
}

/// One decode step of `seq` choosing its next token greedily on the device.
fn greedy_step<B: lserve::backend::Backend>(e: &mut Engine<B>, seq: &mut lserve::kv::SeqPages, t: u32) -> u32 {
    let mut rows = [StepRow { seq, tokens: &[t], logits: lserve::model::llama::Logits::Last }];
    e.step_rows(&mut rows, StepHead::Argmax).and_then(|o| o.token()).unwrap()
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
    sequential_on(reqs, false)
}

fn sequential_on(reqs: &[ServeRequest], sparse: bool) -> Vec<Outcome> {
    let mut se = serve(engine(16, 1, sparse), 1, PreemptMode::Swap, 1 << 30);
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
fn preemption_run(
    mode: PreemptMode,
    swap_bytes: usize,
    sparse: bool,
) -> (Vec<Outcome>, Vec<Vec<Vec<u32>>>, ServeEngine<CpuBackend>) {
    let mut se = serve(engine(3, 2, sparse), 2, mode, swap_bytes);
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
    let (got, pages, se) = preemption_run(PreemptMode::Swap, 1 << 30, false);
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
fn sparse_preempted_then_resumed_by_swap_equals_uninterrupted() {
    // Streaming rings, page summaries and the selection state travel with the swap, so page
    // selection resumes exactly where it was.
    let (got, _, se) = preemption_run(PreemptMode::Swap, 1 << 30, true);
    assert_eq!(se.stats.preemptions_swap, 1);
    assert_eq!(tokens(&got), tokens(&sequential_on(&preemption_requests(), true)));
}

/// Three tensor-parallel ranks (host collective) serving the preemption scenario: the swap
/// copies and restores every rank's KV heads (`Engine::swap_out` / `swap_in`), and the tokens
/// equal the unsharded engine's uninterrupted ones, dense and sparse.
#[test]
fn tensor_parallel_swap_preemption_equals_uninterrupted() {
    for sparse in [false, true] {
        let shards = lserve::backend::collective::HostCollective::group(3)
            .into_iter()
            .map(|comm| {
                let be = CpuBackend::new();
                let opts = lserve::model::weights::LoadOptions::default();
                let m = Llama::load_shard(&be, &MODEL.config, MODEL.weights.as_ref(), &opts, Box::new(comm), |_, _| {});
                (be, m.expect("shard loads"))
            })
            .collect();
        let e = lserve::engine::build_engine_tp(shards, &options(3, 2, sparse)).expect("engine builds");
        let mut se = serve(e, 2, PreemptMode::Swap, 1 << 30);
        let outs = run(&mut se, preemption_requests(), |_| {});
        for (i, o) in outs.iter().enumerate() {
            assert_eq!(o.error, None, "request {}", i + 1);
            assert_eq!(o.tokens.len(), 40);
        }
        assert_eq!((se.stats.preemptions_swap, se.stats.preemptions_recompute), (1, 0), "sparse {sparse}");
        assert_eq!(tokens(&outs), tokens(&sequential_on(&preemption_requests(), sparse)), "sparse {sparse}");
    }
}

#[test]
fn preempted_then_recomputed_equals_uninterrupted() {
    let (got, _, se) = preemption_run(PreemptMode::Recompute, 1 << 30, false);
    assert_eq!((se.stats.preemptions_swap, se.stats.preemptions_recompute), (0, 1));
    assert_eq!(tokens(&got), tokens(&sequential(&preemption_requests())));
}

#[test]
fn a_full_host_tier_falls_back_to_recompute() {
    let (got, _, se) = preemption_run(PreemptMode::Swap, 1024, false);
    assert_eq!((se.stats.preemptions_swap, se.stats.preemptions_recompute), (0, 1));
    assert_eq!(tokens(&got), tokens(&sequential(&preemption_requests())));
}

#[test]
fn a_client_that_leaves_is_cancelled_and_frees_its_pages() {
    let reqs: Vec<ServeRequest> = PROMPTS[..2].iter().map(|p| request(p, 24)).collect();
    let want = sequential(&reqs[1..]);
    let mut se = serve(engine(16, 2, false), 2, PreemptMode::Swap, 1 << 30);
    let (tx1, rx1) = unbounded_channel();
    let (tx2, mut rx2) = unbounded_channel();
    se.add(1, reqs[0].clone(), tx1).unwrap();
    se.add(2, reqs[1].clone(), tx2).unwrap();
    for _ in 0..3 {
        se.step().unwrap();
    }
    assert!(!se.pages_of(1).is_empty());
    drop(rx1);
    se.step().unwrap();
    assert!(se.pages_of(1).is_empty());
    assert_eq!(se.stats.cancelled, 1);
    assert_eq!(se.stats.pages_used, se.pages_of(2).len());
    while se.has_work() {
        se.step().unwrap();
    }
    let mut out = Outcome::default();
    drain(&mut rx2, &mut out);
    assert_eq!(out.tokens, want[0].tokens);
    assert_eq!(se.stats.pages_used, 0);
}

#[test]
fn stop_strings_stop_ids_and_max_tokens() {
    let base = sequential(&[request(PROMPTS[3], 16)]).remove(0);
    assert_eq!(base.finish, Some(FinishReason::Length));
    // A stop string from the middle of the greedy text: the output ends right before it.
    let chars: Vec<char> = base.text.chars().collect();
    let stop: String = chars[chars.len() / 2..chars.len() / 2 + 3].iter().collect();
    let cut = base.text.find(&stop).unwrap();
    let mut r = request(PROMPTS[3], 16);
    r.stop = vec!["no such text".into(), stop.clone()];
    let got = sequential(&[r]).remove(0);
    assert_eq!((got.text.as_str(), got.finish), (&base.text[..cut], Some(FinishReason::Stop)), "stop {stop:?}");
    // A stop token: generation ends with it.
    let mut r = request(PROMPTS[3], 16);
    r.stop_ids = vec![base.tokens[5]];
    let got = sequential(&[r]).remove(0);
    let first = base.tokens.iter().position(|&t| t == base.tokens[5]).unwrap();
    assert_eq!((got.tokens.as_slice(), got.finish), (&base.tokens[..=first], Some(FinishReason::Stop)));
    // max_tokens 1: one token, length.
    let got = sequential(&[request(PROMPTS[3], 1)]).remove(0);
    assert_eq!((got.tokens.as_slice(), got.finish), (&base.tokens[..1], Some(FinishReason::Length)));
}

#[test]
fn seeded_sampling_is_per_request_and_reproducible_in_a_batch() {
    let sampled = |seed: u64| {
        let mut r = request(PROMPTS[1], 12);
        r.sampling = SamplingParams { temperature: 0.9, top_k: 40, top_p: 0.95, seed };
        r
    };
    let alone: Vec<Outcome> = sequential(&[sampled(7), sampled(8)]);
    assert_ne!(alone[0].tokens, alone[1].tokens, "different seeds, different samples");
    // The same requests batched with each other and a greedy one draw the same tokens.
    let mut se = serve(engine(16, 3, false), 3, PreemptMode::Swap, 1 << 30);
    let got = run(&mut se, vec![sampled(8), request(PROMPTS[0], 12), sampled(7)], |_| {});
    assert_eq!((&got[2].tokens, &got[0].tokens), (&alone[0].tokens, &alone[1].tokens));
}

#[test]
fn requests_that_can_never_run_are_refused() {
    let mut se = serve(engine(4, 2, false), 2, PreemptMode::Swap, 0);
    let (tx, _rx) = unbounded_channel();
    assert!(se.add(1, request(PROMPTS[0], 0), tx.clone()).is_err(), "max_tokens 0");
    assert!(se.add(2, request(PROMPTS[0], 200), tx.clone()).is_err(), "more than the whole cache");
    let mut r = request(PROMPTS[0], 4);
    r.prompt.push(1 << 20);
    assert!(se.add(3, r, tx.clone()).is_err(), "token outside the vocabulary");
    let mut r = request(PROMPTS[0], 4);
    r.sampling.top_p = 0.0;
    assert!(se.add(4, r, tx.clone()).is_err(), "bad sampling");
    assert!(se.add(5, request("", 4), tx).is_err(), "empty prompt");
    assert!(!se.has_work());
}

// ---- Ragged batches: batched-step logits against one sequence at a time ----

mod ragged {
    use super::*;
    use lserve::backend::Backend;
    use lserve::kv::SeqPages;
    use lserve::model::llama::{Logits, SeqStep};
    use lserve::sparse::{DecodePlan, plan_decode};

    /// Token streams of three sequences of different lengths (prompt + continuation).
    pub fn streams() -> Vec<Vec<u32>> {
        let text = "In the beginning the universe was created. This has made a lot of people very angry and \
                    been widely regarded as a bad move. Many races believe that it was created by some sort \
                    of god, though the Jatravartid people of Viltvodle VI believe that the entire universe \
                    was in fact sneezed out of the nose of a being called the Great Green Arkleseizure. \
                    The Jatravartids, who live in perpetual fear of the time they call The Coming of The \
                    Great White Handkerchief, are small blue creatures with more than fifty arms each, who \
                    are therefore unique in being the only race in history to have invented the aerosol \
                    deodorant before the wheel.";
        let ids = MODEL.tokenizer.encode(text).unwrap();
        assert!(ids.len() > 110, "{}", ids.len());
        vec![ids[..96].to_vec(), ids[3..60].to_vec(), ids[10..86].to_vec()]
    }

    /// Prefill in chunks of different lengths, one step mixing a prefill chunk with decode
    /// tokens, then pure decode steps (page selection runs in these when sparse).
    pub fn script() -> Vec<Vec<(usize, usize)>> {
        let mut s =
            vec![vec![(0, 32), (1, 32), (2, 32)], vec![(0, 32), (1, 13), (2, 32)], vec![(0, 24), (1, 1), (2, 6)]];
        s.extend((0..4).map(|_| vec![(0, 1), (1, 1), (2, 1)]));
        s
    }

    /// Run `script` over `streams`, one forward per step (`batched`) or one per sequence; returns
    /// the last-row logits of every entry in script order.
    pub fn run_script<B: Backend>(e: &mut Engine<B>, batched: bool) -> Vec<Vec<f32>> {
        let streams = streams();
        let mut seqs: Vec<SeqPages> = streams.iter().map(|_| e.cache.admit().unwrap()).collect();
        let ps = e.cache.shape.page_size;
        let vocab = e.model.cfg.vocab_size;
        let mut out = Vec::new();
        for step in script() {
            let decode = step.iter().all(|&(_, n)| n == 1);
            let mut plans = Vec::new();
            for &(i, n) in &step {
                e.cache.reserve(&mut seqs[i], n).unwrap();
                let s = &mut seqs[i];
                plans.push(if decode {
                    let kv_len = s.len + 1;
                    plan_decode(&e.sparse, s, kv_len, ps)
                } else {
                    s.sel_tail = None;
                    DecodePlan { select: false, tail_start: 0 }
                });
            }
            let entries: Vec<SeqStep> = step
                .iter()
                .zip(&plans)
                .map(|(&(i, n), &plan)| {
                    let s = &seqs[i];
                    SeqStep { tokens: &streams[i][s.len..s.len + n], cache: s, logits: Logits::Last, plan }
                })
                .collect();
            let groups: Vec<&[SeqStep]> = if batched { vec![&entries[..]] } else { entries.chunks(1).collect() };
            for g in groups {
                let logits = e.model.forward(&e.backend, &mut e.cache, &e.attn, g, None).unwrap();
                out.extend(logits.chunks(vocab).map(|r| r.to_vec()));
            }
            drop(entries);
            for &(i, n) in &step {
                seqs[i].len += n;
            }
        }
        for mut s in seqs {
            e.cache.release(&mut s).unwrap();
        }
        out
    }

    pub fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
        assert_eq!(a.len(), b.len());
        a.iter().zip(b).flat_map(|(x, y)| x.iter().zip(y).map(|(p, q)| (p - q).abs())).fold(0.0, f32::max)
    }

    pub fn check(sparse: bool) {
        let mut e = engine(8, 3, sparse);
        let batched = run_script(&mut e, true);
        let single = run_script(&mut e, false);
        let d = max_diff(&batched, &single);
        eprintln!("sparse={sparse}: batched vs one at a time, max |diff| = {d:e}");
        assert!(d < 1e-3, "{d}");
        assert_eq!(batched.len(), 3 * 7);
    }
}

#[test]
fn ragged_batch_equals_one_sequence_at_a_time_dense() {
    ragged::check(false);
}

#[test]
fn ragged_batch_equals_one_sequence_at_a_time_sparse() {
    ragged::check(true);
    // Sparse attention really is on: its logits differ from dense ones on the decode steps.
    let s = ragged::run_script(&mut engine(8, 3, true), true);
    let d = ragged::run_script(&mut engine(8, 3, false), true);
    assert!(ragged::max_diff(&s[9..], &d[9..]) > 1e-2, "sparse and dense agree: selection never ran?");
}

#[cfg(feature = "wgpu")]
#[test]
fn ragged_batch_on_wgpu_equals_cpu_dense_and_sparse() {
    let Some(_) = common::wgpu_backend() else { return };
    // One thread per backend: the wgpu backend keeps a per-thread decode scratch keyed by device,
    // which a second device in the same thread can mistake for its own.
    for sparse in [false, true] {
        std::thread::spawn(move || {
            let want = ragged::run_script(&mut engine(8, 3, sparse), true);
            let be = common::wgpu_backend().unwrap();
            let f32w = Some(lserve::backend::DType::F32);
            let llama = Llama::load_as(&be, &MODEL.config, MODEL.weights.as_ref(), f32w, |_, _| {}).unwrap();
            let mut e = build_engine(be, llama, &options(8, 3, sparse)).unwrap();
            let got = ragged::run_script(&mut e, true);
            let d = ragged::max_diff(&got, &want);
            eprintln!("sparse={sparse}: wgpu vs cpu, max |diff| = {d:e}");
            assert!(d < 1e-2, "{d}");
            // Swap-out/in through the wgpu backend's download / write-at-offset calls.
            let mut seq = e.cache.admit().unwrap();
            let prompt = &ragged::streams()[0];
            for chunk in prompt.chunks(32) {
                e.step(&mut seq, chunk, lserve::model::llama::Logits::None, None).unwrap();
            }
            let mut t = prompt[prompt.len() - 1];
            for _ in 0..3 {
                t = greedy_step(&mut e, &mut seq, t);
            }
            let (mut seq, copy, again) = swap_round_trip(&mut e, seq);
            assert_eq!(again.bits(), copy.bits(), "wgpu swap bit-identical");
            e.cache.release(&mut seq).unwrap();
        })
        .join()
        .unwrap();
    }
}

#[test]
fn swap_out_then_in_is_bit_identical_and_decodes_identically() {
    let streams = ragged::streams();
    let prompt = &streams[0];
    let mut a = engine(8, 3, true); // swapped
    let mut b = engine(8, 3, true); // never swapped
    let (mut sa, mut sb) = (a.cache.admit().unwrap(), b.cache.admit().unwrap());
    let mut next = 0;
    for e in [(&mut a, &mut sa), (&mut b, &mut sb)] {
        let (eng, seq) = e;
        for chunk in prompt.chunks(32) {
            eng.step(seq, chunk, lserve::model::llama::Logits::None, None).unwrap();
        }
        next = prompt[prompt.len() - 1];
        for _ in 0..3 {
            next = greedy_step(eng, seq, next);
        }
    }
    let (mut sa, copy, again) = swap_round_trip(&mut a, sa);
    assert_eq!(again.bits(), copy.bits(), "KV, summaries, ring and selection bit-identical");
    assert!(copy.bytes() > 0);
    let (mut ta, mut tb) = (next, next);
    for _ in 0..6 {
        let la = a.step(&mut sa, &[ta], lserve::model::llama::Logits::Last, None).unwrap();
        let lb = b.step(&mut sb, &[tb], lserve::model::llama::Logits::Last, None).unwrap();
        assert!(la.iter().zip(&lb).all(|(x, y)| x.to_bits() == y.to_bits()), "logits bit-identical");
        (ta, tb) = (lserve::sampling::argmax(&la), lserve::sampling::argmax(&lb));
    }
}

/// Swap `seq` out, release it, let another sequence take the lowest pages and the slot, swap the
/// copy back in (elsewhere) and copy it out again: (the resumed sequence, first copy, second copy).
fn swap_round_trip<B: lserve::backend::Backend>(
    e: &mut Engine<B>,
    mut seq: lserve::kv::SeqPages,
) -> (lserve::kv::SeqPages, lserve::kv::SwappedKv, lserve::kv::SwappedKv) {
    let copy = e.cache.swap_out(&e.backend, &seq).unwrap();
    let old_pages = seq.pages.clone();
    e.cache.release(&mut seq).unwrap();
    let mut other = e.cache.admit().unwrap();
    e.cache.reserve(&mut other, 40).unwrap();
    let back = e.cache.swap_in(&e.backend, &copy).unwrap();
    assert_ne!(back.pages, old_pages);
    assert_ne!(back.slot, other.slot);
    assert_eq!(back.len, copy.len);
    let again = e.cache.swap_out(&e.backend, &back).unwrap();
    e.cache.release(&mut other).unwrap();
    assert!(copy.bytes() > 0);
    (back, copy, again)
}
