//! The layer loop with the residual add folded into o_proj and down (`Backend::matmul_accumulates`:
//! CUDA's cuBLAS prefill GEMMs and batch-1 GEMVs) and the norms and silu_mul folded into the
//! matmuls after them (`Backend::matmul_prologue`: CUDA's batch-1 GEMVs) run on the CPU reference
//! (`CpuBackend::with_fused_residual`, whose prologue is the op and then the matmul): every
//! row's logits equal the plain loop's (add_rmsnorm) bit for bit — the same f32 add per element —
//! for a synthetic Llama with f32 and int8-row weights, dense and sparse (streaming heads, page
//! selection), over a prompt in two chunks and a few decode steps. Random tokens, seeded and
//! printed.

mod common;

use lserve::backend::DType;
use lserve::backend::cpu::CpuBackend;
use lserve::bench::{shape, synthetic_layout};
use lserve::engine::{Engine, EngineOptions, build_engine};
use lserve::model::config::ModelConfig;
use lserve::model::llama::{Llama, Logits};

fn engine(fused: bool, w: DType, sparse: bool) -> Engine<CpuBackend> {
    let be = CpuBackend::new().with_fused_residual(fused);
    let cfg = ModelConfig { num_layers: 3, vocab_size: 512, ..shape("smollm2-135m").unwrap() };
    let model = Llama::synthetic(&be, &cfg, Some(w), 11).unwrap();
    let mut config = common::paged_config(16, 4);
    config.cache.kv_dtype = "f32".into();
    if sparse {
        config.sparse.enabled = true;
        config.sparse.streaming_ratio = 0.0;
        config.sparse.sink_tokens = 4;
        config.sparse.local_tokens = 16;
        config.sparse.token_budget = 48;
        config.sparse.dense_below = 0;
    }
    let layout = sparse.then(|| synthetic_layout(&cfg, 0.5));
    let opts = EngineOptions { config, max_tokens: 256, max_seqs: 1, prefill_chunk: 64, layout };
    build_engine(be, model, &opts).unwrap()
}

/// Every row's logits of the prompt's two chunks, then of three single tokens.
fn logits(e: &mut Engine<CpuBackend>, prompt: &[u32]) -> Vec<f32> {
    let mut seq = e.cache.admit().unwrap();
    let mut all = e.step(&mut seq, &prompt[..70], Logits::All, None).unwrap();
    all.extend(e.step(&mut seq, &prompt[70..], Logits::All, None).unwrap());
    for t in [5, 300, 17] {
        all.extend(e.step(&mut seq, &[t], Logits::Last, None).unwrap());
    }
    e.cache.release(&mut seq).unwrap();
    all
}

#[test]
fn the_fused_residual_loop_equals_the_plain_one() {
    let seed = common::seed();
    let mut rng = common::naive::Rng(seed | 1);
    let prompt: Vec<u32> = (0..110).map(|_| (rng.next() * 512.0) as u32 % 512).collect();
    for w in [DType::F32, DType::I8Row] {
        for sparse in [false, true] {
            let plain = logits(&mut engine(false, w, sparse), &prompt);
            let fused = logits(&mut engine(true, w, sparse), &prompt);
            assert_eq!(plain.len(), fused.len());
            assert!(plain.iter().all(|x| x.is_finite()), "{w:?} sparse={sparse}: non-finite logits");
            if let Some(i) = (0..plain.len()).find(|&i| plain[i].to_bits() != fused[i].to_bits()) {
                panic!("{w:?} sparse={sparse} (seed {seed}): logit {i} is {} fused, {} plain", fused[i], plain[i]);
            }
        }
    }
}
