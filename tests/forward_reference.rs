//! The engine's forward pass (CPU backend, paged KV cache, chunked prefill and decode) against a
//! naive float64 transformer written here from the Llama/Qwen2/Mistral definitions, on small random
//! models covering GQA, MQA, qkv bias, tied and untied embeddings, sliding windows and every RoPE
//! scaling. Weights are fresh random numbers each run (seed printed).

mod common;

use lserve::backend::cpu::CpuBackend;
use lserve::model::config::ModelConfig;
use lserve::model::llama::{Llama, Logits};
use lserve::model::rope::RopeScaling;

use common::naive::*;

/// Prefill `ids` in chunks of `chunk`, then feed the rest one token at a time; every row's
/// logits must match the naive model.
fn check(name: &str, c: &ModelConfig, n_tokens: usize, chunk: usize, page_size: usize) {
    let mut rng = Rng(common::seed() | 1);
    let w = random_weights(c, &mut rng);
    let ids: Vec<u32> = (0..n_tokens).map(|_| (rng.next() * c.vocab_size as f64) as u32).collect();
    let want = naive_logits(c, &w, &ids);
    let model = Llama::load(&CpuBackend::new(), c, &w, |_, _| {}).unwrap();
    let mut e = common::engine(model, n_tokens, common::paged_config(page_size, page_size / 4), chunk);
    let mut seq = e.cache.admit().unwrap();
    let prefill = n_tokens / 2;
    let mut rows: Vec<Vec<f32>> = vec![];
    let mut at = 0;
    while at < n_tokens {
        let len = if at < prefill { chunk.min(prefill - at) } else { 1 };
        let out = e.step(&mut seq, &ids[at..at + len], Logits::All, None).unwrap();
        rows.extend(out.chunks(c.vocab_size).map(<[f32]>::to_vec));
        at += len;
    }
    for (i, (got, want)) in rows.iter().zip(&want).enumerate() {
        let d = max_diff(got, want);
        assert!(d < 2e-4, "{name}: position {i}: max |diff| {d}");
    }
    e.cache.release(&mut seq).unwrap();
    assert_eq!(e.cache.alloc.num_free(), e.cache.alloc.num_pages());
}

#[test]
fn llama_gqa_untied() {
    check("llama gqa", &base_config(), 41, 7, 16);
}

#[test]
fn mqa_tied_embeddings() {
    let c = ModelConfig { num_kv_heads: 1, tie_word_embeddings: true, ..base_config() };
    check("mqa tied", &c, 39, 5, 32);
}

#[test]
fn qwen2_qkv_bias() {
    let c = ModelConfig { arch: "qwen2".into(), attention_bias: true, num_kv_heads: 4, ..base_config() };
    check("qwen2 bias", &c, 37, 3, 16);
}

#[test]
fn mistral_sliding_window() {
    let c = ModelConfig { arch: "mistral".into(), sliding_window: Some(5), ..base_config() };
    check("mistral window", &c, 43, 4, 16);
}

#[test]
fn rope_scalings() {
    let cases = [
        RopeScaling::Linear { factor: 4.0 },
        RopeScaling::Llama3 { factor: 8.0, low_freq_factor: 1.0, high_freq_factor: 4.0, original_max_position: 16 },
        RopeScaling::Yarn {
            factor: 4.0,
            original_max_position: 16,
            beta_fast: 32.0,
            beta_slow: 1.0,
            mscale: None,
            mscale_all_dim: None,
            attention_factor: None,
            truncate: true,
        },
    ];
    for s in cases {
        let c = ModelConfig { rope_scaling: s.clone(), ..base_config() };
        check(&format!("{s:?}"), &c, 40, 6, 16);
    }
}

#[test]
fn dynamic_ntk_one_shot_prefill() {
    // Dynamic NTK rescales with the sequence length, so compare one prefill of the whole text,
    // which runs past the 16 trained positions (the context is 16 * factor = 32).
    let c = ModelConfig {
        rope_scaling: RopeScaling::DynamicNtk { factor: 2.0 },
        max_position_embeddings: 16,
        ..base_config()
    };
    assert_eq!(c.context_len(), 32);
    let mut rng = Rng(common::seed() | 1);
    let w = random_weights(&c, &mut rng);
    let ids: Vec<u32> = (0..40).map(|_| (rng.next() * c.vocab_size as f64) as u32).collect();
    let model = Llama::load(&CpuBackend::new(), &c, &w, |_, _| {}).unwrap();
    let mut e = common::engine(model, 64, common::paged_config(16, 8), 64);
    let mut seq = e.cache.admit().unwrap();
    let err = e.step(&mut seq, &ids, Logits::All, None);
    assert!(matches!(err, Err(lserve::Error::PromptTooLong { .. })), "{:?}", err.err());
    assert_eq!(seq.len, 0, "a failed step stores nothing");
    let ids = &ids[..30];
    let want = naive_logits(&c, &w, ids);
    let out = e.step(&mut seq, ids, Logits::All, None).unwrap();
    for (i, row) in out.chunks(c.vocab_size).enumerate() {
        assert!(max_diff(row, &want[i]) < 2e-4, "position {i}");
    }
}

/// The accuracy suite's perplexity (`lserve accuracy --tasks ppl`, dense): the mean NLL of the
/// last `score` tokens, each predicted by a decode step, equals the naive model's mean of
/// -log softmax(logits at p - 1)[ids[p]] over the same tokens. Feeding any token twice (the bug
/// fixed on 2026-12-06) shifts the positions and fails this.
#[test]
fn accuracy_ppl_scores_each_token_once() {
    let c = base_config();
    let mut rng = Rng(common::seed() | 1);
    let w = random_weights(&c, &mut rng);
    let ids: Vec<u32> = (0..37).map(|_| (rng.next() * c.vocab_size as f64) as u32).collect();
    let want_logits = naive_logits(&c, &w, &ids);
    let nll = |p: usize| {
        let row = &want_logits[p - 1];
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        m + row.iter().map(|x| (x - m).exp()).sum::<f64>().ln() - row[ids[p] as usize]
    };
    for score in [1, 12, 36, 50] {
        let model = Llama::load(&CpuBackend::new(), &c, &w, |_, _| {}).unwrap();
        let mut e = common::engine(model, ids.len(), common::paged_config(16, 4), 5);
        let (got, _) = lserve::eval::accuracy::ppl_sample(&mut e, &ids, score).unwrap();
        let first = ids.len().saturating_sub(score).max(1);
        let want = (first..ids.len()).map(nll).sum::<f64>() / (ids.len() - first) as f64;
        assert!((got - want).abs() < 1e-4 * want.abs().max(1.0), "score {score}: {got} vs naive {want}");
        assert_eq!(e.cache.alloc.num_free(), e.cache.alloc.num_pages(), "pages released");
    }
}

/// The bench's floor bytes (`Llama::step_weight_bytes`): an untied embedding table counts only
/// the batch's rows, a tied one (the LM head) whole; every other weight counts once. Expected
/// sizes from the config (f32 on the CPU).
#[test]
fn step_weight_bytes_counts_what_a_step_reads() {
    let mut rng = Rng(common::seed() | 1);
    for tied in [false, true] {
        let c = ModelConfig { tie_word_embeddings: tied, ..base_config() };
        let w = random_weights(&c, &mut rng);
        let be = CpuBackend::new();
        let model = Llama::load(&be, &c, &w, |_, _| {}).unwrap();
        let (h, v, f) = (c.hidden_size, c.vocab_size, c.intermediate_size);
        let qkv = (c.num_heads + 2 * c.num_kv_heads) * c.head_dim * h;
        let layer = 2 * h + qkv + c.num_heads * c.head_dim * h + 2 * f * h + f * h;
        let all = 4 * (v * h + if tied { 0 } else { v * h } + h + c.num_layers * layer);
        assert_eq!(model.weight_bytes(&be), all, "tied {tied}");
        for batch in [1, 3, 500] {
            let want = if tied { all } else { all - 4 * v * h + 4 * h * batch.min(v) };
            assert_eq!(model.step_weight_bytes(&be, batch), want, "tied {tied}, batch {batch}");
        }
    }
}
