//! End to end on the wgpu backend: greedy generation on the default model gives the same tokens
//! as the CPU backend — dense on three prompts for 16 tokens, sparse (streaming heads + page
//! selection engaged with a small sink/window/budget) on the longest prompt for 32 tokens, so
//! its context (67 tokens) exceeds the 48-token budget for the last 19 steps. (Lavapipe runs the
//! shaders on the CI machine's CPU: these are the slowest tests of the suite, sized to match.) With f32 weights the two backends differ
//! only in summation order, so the tokens must be identical; with the default weights (the GGUF's
//! Q4_1 / Q8_0 matrices kept native on both backends; wgpu's batch-1 GEMV multiplies them with x
//! to ~16 bits, `Caps::matmul_x8_max_m`) a divergence is accepted only where the CPU's two best
//! logits are within 0.05 of each other (a near tie), and the margin is printed.
#![cfg(feature = "wgpu")]

mod common;

use lserve::backend::Backend;
use lserve::backend::DType;
use lserve::backend::cpu::CpuBackend;
use lserve::engine::{Engine, EngineOptions, build_engine};
use lserve::loader::{self, LoadedModel};
use lserve::model::llama::{Llama, Logits};
use lserve::sparse::Config;

const DENSE_PROMPTS: [&str; 3] = ["d1_plain", "d2_chat", "d3_code"];
const DENSE_TOKENS: usize = 16;
const SPARSE_PROMPTS: [&str; 1] = ["d2_chat"];
const SPARSE_TOKENS: usize = 32;

fn sparse_config() -> Config {
    let mut c = common::paged_config(16, 4);
    c.sparse.enabled = true;
    c.sparse.streaming_ratio = 0.5;
    c.sparse.head_pattern = Some(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("patterns/smollm2-135m.toml"));
    c.sparse.sink_tokens = 4;
    c.sparse.local_tokens = 16;
    c.sparse.token_budget = 48;
    c.sparse.dense_below = 0;
    c
}

fn engine<B: Backend>(be: B, m: &LoadedModel, dtype: Option<DType>, config: Config) -> Engine<B> {
    let model = Llama::load_as(&be, &m.config, m.weights.as_ref(), dtype, |_, _| {}).unwrap();
    build_engine(be, model, &EngineOptions { config, max_tokens: 128, max_seqs: 1, prefill_chunk: 64, layout: None })
        .unwrap()
}

fn greedy<B: Backend>(e: &mut Engine<B>, prompt: &[u32], tokens: usize) -> Vec<u32> {
    common::generate_greedy(e, prompt, tokens).tokens
}

/// The CPU's top-2 logit margin after `prefix`.
fn margin(e: &mut Engine<CpuBackend>, prefix: &[u32]) -> f32 {
    let mut seq = e.cache.admit().unwrap();
    let logits = e.step(&mut seq, prefix, Logits::Last, None).unwrap();
    e.cache.release(&mut seq).unwrap();
    let mut v = logits.clone();
    v.sort_by(|a, b| b.total_cmp(a));
    v[0] - v[1]
}

/// The CPU's dense greedy tokens per prompt, computed once for both dense tests.
fn cpu_dense(m: &LoadedModel) -> &'static Vec<Vec<u32>> {
    static CPU: std::sync::OnceLock<Vec<Vec<u32>>> = std::sync::OnceLock::new();
    CPU.get_or_init(|| {
        let r = common::reference();
        let mut cpu = engine(CpuBackend::new(), m, None, Config::default());
        DENSE_PROMPTS.iter().map(|p| greedy(&mut cpu, &common::ids(&r["prompts"][p]["ids"]), DENSE_TOKENS)).collect()
    })
}

fn compare(label: &str, dtype: Option<DType>, config: Config, sparse: bool) {
    compare_with(label, dtype, (config.clone(), config), sparse);
}

/// [`compare`] with the CPU's config and wgpu's apart (a KV dtype the CPU does not store).
fn compare_with(label: &str, dtype: Option<DType>, (config, gpu_config): (Config, Config), sparse: bool) {
    let Some(gpu) = common::wgpu_backend() else { return };
    let m = loader::open(&common::model_path()).unwrap();
    let r = common::reference();
    let (prompts, tokens): (&[&str], usize) =
        if sparse { (&SPARSE_PROMPTS, SPARSE_TOKENS) } else { (&DENSE_PROMPTS, DENSE_TOKENS) };
    let mut cpu = engine(CpuBackend::new(), &m, None, config);
    let mut wg = engine(gpu, &m, dtype, gpu_config);
    for (k, p) in prompts.iter().enumerate() {
        let prompt = common::ids(&r["prompts"][p]["ids"]);
        let a = if sparse { greedy(&mut cpu, &prompt, tokens) } else { cpu_dense(&m)[k].clone() };
        let b = greedy(&mut wg, &prompt, tokens);
        if a == b {
            continue;
        }
        let i = a.iter().zip(&b).position(|(x, y)| x != y).unwrap();
        let prefix: Vec<u32> = prompt.iter().chain(&a[..i]).copied().collect();
        let gap = margin(&mut cpu, &prefix);
        eprintln!("{label} {p}: tokens diverge at {i} ({} vs {}), CPU top-2 margin {gap:.4}", a[i], b[i]);
        assert!(dtype == Some(DType::F16) || dtype.is_none(), "{label} {p}: f32 weights must agree exactly");
        assert!(gap < 0.05, "{label} {p}: divergence at {i} is not a near tie (margin {gap})");
    }
}

#[test]
fn dense_f32_weights_match_cpu() {
    compare("dense f32", Some(DType::F32), Config::default(), false);
}

#[test]
fn sparse_f32_weights_match_cpu() {
    compare("sparse f32", Some(DType::F32), sparse_config(), true);
}

#[test]
fn dense_f16_weights_match_cpu_up_to_near_ties() {
    compare("dense f16", None, Config::default(), false);
}

/// The default weights (native Q4_1 / Q8_0), sparse, with f16 KV on wgpu (the CPU, which stores
/// no 16-bit KV, keeps f32): wgpu's batch-1 steps then run q|k|v with the rotation and the KV
/// store, and gate|up with silu_mul, as one kernel each (`Backend::matmul_rope_append_kv`,
/// `Backend::matmul_silu_mul`).
#[test]
fn sparse_native_weights_f16_kv_match_cpu_up_to_near_ties() {
    let mut g = sparse_config();
    g.cache.kv_dtype = "f16".into();
    compare_with("sparse native f16 kv", None, (sparse_config(), g), true);
}
