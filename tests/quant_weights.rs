//! Quantized weights kept quantized on the device (docs/weights.md).
//!
//! - The CPU quantized `matmul` (fused dequant-dot for small m, dequantized tiles + GEMM above)
//!   against a brute-force f64 product over `weight_quant::dequantize_rows`, every weight type,
//!   odd shapes, a strided output (ldo/out_off) poisoned first: the rows/columns outside the
//!   output block must stay poisoned.
//! - The default model (SmolLM2 Q4_1 matrices, Q8_0 embedding = tied LM head) and Gemma 3 270M
//!   (Q4_K_M: mixed q/k Q5_0 + v Q8_0 layers, loaded as strided parts) natively quantized vs
//!   the dequantized path on the CPU: greedy ids equal (a divergence only at a near tie of the
//!   reference's top-2 logits, < 0.05), mean NLL within 0.1%, `weight_bytes` within 10% of the
//!   GGUF's tensor bytes. A backend that lacks the file's formats is skipped with a message.

mod common;

use lserve::backend::cpu::CpuBackend;
use lserve::backend::reference::weight_quant::{self, GGML_WEIGHT_TYPES};
use lserve::backend::{Backend, DType, GgmlType, MatmulParams};
use lserve::engine::{Engine, EngineOptions, build_engine};
use lserve::loader::{self, LoadedModel};
use lserve::model::llama::{Llama, Logits};
use lserve::model::weights::LoadOptions;

fn all_weight_types() -> Vec<DType> {
    let mut v: Vec<DType> = GGML_WEIGHT_TYPES.iter().map(|&t| DType::Ggml(t)).collect();
    v.extend([DType::I8Row, DType::F8Row]);
    v
}

fn block(dt: DType) -> usize {
    match dt {
        DType::Ggml(t) => t.block_size(),
        _ => 1,
    }
}

struct Rng(u64);
impl Rng {
    fn unit(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    }
}

#[test]
fn cpu_quantized_matmul_matches_brute_force() {
    let be = CpuBackend::new();
    let seed = common::seed();
    let mut rng = Rng(seed | 1);
    let mut checked = 0;
    for dt in all_weight_types() {
        if !be.caps().weight_dtypes.contains(&dt) {
            eprintln!("cpu lacks {dt:?}: skipped");
            continue;
        }
        let b = block(dt);
        for (m, n, blocks) in [(1, 1, 1), (1, 37, 3), (3, 129, 2), (8, 61, 5), (9, 33, 1), (17, 300, 2)] {
            let k = if b == 1 { 37 * blocks } else { b * blocks };
            let w = weight_quant::random_weights(dt, n, k, seed ^ (n * k) as u64).unwrap();
            let mut wf = vec![0f32; n * k];
            weight_quant::dequantize_rows(dt, &w, n, k, 0, &mut wf).unwrap();
            let x: Vec<f32> = (0..m * k).map(|_| rng.unit() * 2.0).collect();
            let bias: Vec<f32> = (0..n).map(|_| rng.unit()).collect();
            let (ldo, off) = (n + 5, 3);
            let p = MatmulParams { ldo: ldo as u32, out_off: off as u32, ..MatmulParams::new(m, n, k, true) };
            let mut out = be.upload_f32(DType::F32, vec![f32::NAN; p.out_len() + 4]).unwrap();
            let (xb, wb) = (be.upload_f32(DType::F32, x.clone()).unwrap(), be.upload_weight(dt, n, k, &w).unwrap());
            let bb = be.upload_f32(DType::F32, bias.clone()).unwrap();
            be.matmul(&p, &xb, &wb, Some(&bb), &mut out).unwrap();
            let got = be.download_f32(&out, 0, p.out_len() + 4).unwrap();
            for (i, g) in got.iter().enumerate() {
                let inside = i >= off && (i - off) % ldo < n && (i - off) / ldo < m;
                if !inside {
                    assert!(g.is_nan(), "{dt:?} m{m} n{n} k{k}: element {i} outside the output was written");
                    continue;
                }
                let (r, c) = ((i - off) / ldo, (i - off) % ldo);
                let (mut want, mut mag) = (bias[c] as f64, bias[c].abs() as f64);
                for j in 0..k {
                    let t = x[r * k + j] as f64 * wf[c * k + j] as f64;
                    want += t;
                    mag += t.abs();
                }
                let tol = 1e-6 * mag + 1e-6;
                assert!(
                    (*g as f64 - want).abs() <= tol,
                    "{dt:?} m{m} n{n} k{k} [{r}][{c}]: {g} vs brute force {want} (tol {tol:.2e}, seed {seed})"
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 60, "only {checked} cases ran");
}

fn engine<B: Backend>(be: B, m: &LoadedModel, opts: LoadOptions, chunk: usize) -> Engine<B> {
    let model = Llama::load_with(&be, &m.config, m.weights.as_ref(), &opts, |_, _| {}).unwrap();
    let opts = EngineOptions { max_seqs: 1, prefill_chunk: chunk, ..EngineOptions::new(Default::default(), 2048) };
    build_engine(be, model, &opts).unwrap()
}

fn greedy<B: Backend>(e: &mut Engine<B>, prompt: &[u32], n: usize) -> Vec<u32> {
    common::generate_greedy(e, prompt, n).tokens
}

/// The reference's top-2 logit margin after `prefix`.
fn margin<B: Backend>(e: &mut Engine<B>, prefix: &[u32]) -> f32 {
    let mut seq = e.cache.admit().unwrap();
    let mut v = e.step(&mut seq, prefix, Logits::Last, None).unwrap();
    e.cache.release(&mut seq).unwrap();
    v.sort_by(|a, b| b.total_cmp(a));
    v[0] - v[1]
}

/// The file's quantized types the model needs natively; None (with a message) if `be` lacks one.
fn has_formats<B: Backend>(be: &B, need: &[GgmlType]) -> bool {
    let missing: Vec<_> = need.iter().filter(|&&t| !be.caps().weight_dtypes.contains(&DType::Ggml(t))).collect();
    if !missing.is_empty() {
        eprintln!("{} backend lacks {missing:?} weights: native-quantized e2e skipped", be.caps().name);
    }
    missing.is_empty()
}

/// Native on `be` vs dequantized f32 on the CPU: device bytes, greedy ids, mean NLL.
fn native_vs_dequant<B: Backend>(be: B, path: &std::path::Path, prompts: &[Vec<u32>], text: &[u32], tokens: usize) {
    let m = loader::open(path).unwrap();
    let g = loader::gguf::GgufFile::open(path).unwrap();
    let file_bytes = loader::gguf_tensor_bytes(&g) as f64;
    let name = be.caps().name;
    let mut native = engine(be, &m, LoadOptions::default(), 512);
    let mut deq = engine(CpuBackend::new(), &m, LoadOptions::dequant(Some(DType::F32)), 512);
    let nb = native.model.weight_bytes(&native.backend) as f64;
    let by = native.model.weight_bytes_by_type(&native.backend);
    eprintln!("{name}: device weight bytes {nb} ({by:?}) vs GGUF tensor bytes {file_bytes}");
    assert!((nb - file_bytes).abs() / file_bytes < 0.10, "{nb} device bytes vs {file_bytes} in the file");
    let db = deq.model.weight_bytes(&deq.backend) as f64;
    assert!(db > 3.0 * nb, "the dequantized path holds f32 ({db} bytes)");
    for (i, prompt) in prompts.iter().enumerate() {
        let (a, b) = (greedy(&mut deq, prompt, tokens), greedy(&mut native, prompt, tokens));
        if a == b {
            continue;
        }
        let at = a.iter().zip(&b).position(|(x, y)| x != y).unwrap();
        let prefix: Vec<u32> = prompt.iter().chain(&a[..at]).copied().collect();
        let gap = margin(&mut deq, &prefix);
        eprintln!("{name} prompt {i}: diverges at token {at} ({} vs {}), top-2 margin {gap:.4}", a[at], b[at]);
        assert!(gap < 0.05, "{name} prompt {i}: divergence at {at} is not a near tie (margin {gap})");
    }
    let n = text.len();
    let (sn, sd) = (native.score(text, n, n, n - 24).unwrap(), deq.score(text, n, n, n - 24).unwrap());
    let (a, b) = (sn.mean_nll(), sd.mean_nll());
    eprintln!("{name}: mean NLL native {a:.6} vs dequantized {b:.6} over {n} tokens");
    assert!((a - b).abs() / b < 1e-3, "mean NLL {a} vs {b}");
}

fn smollm2_inputs() -> (Vec<Vec<u32>>, Vec<u32>) {
    let r = common::reference();
    let prompts = ["d1_plain", "d2_chat", "d3_code"].iter().map(|p| common::ids(&r["prompts"][p]["ids"])).collect();
    (prompts, common::ids(&r["prompts"]["d4_long"]["ids"]))
}

#[test]
fn smollm2_native_quantized_matches_dequantized_cpu() {
    let be = CpuBackend::new();
    if !has_formats(&be, &[GgmlType::Q4_1, GgmlType::Q8_0]) {
        return;
    }
    let (prompts, text) = smollm2_inputs();
    native_vs_dequant(be, &common::model_path(), &prompts, &text, 24);
}

/// On wgpu (lavapipe in CI runs the shaders on the CPU) the same checks on a smaller workload:
/// two prompts for 12 tokens, NLL over the first 256 tokens of the long text.
#[cfg(feature = "wgpu")]
#[test]
fn smollm2_native_quantized_matches_dequantized_wgpu() {
    let Some(be) = common::wgpu_backend() else { return };
    if !has_formats(&be, &[GgmlType::Q4_1, GgmlType::Q8_0]) {
        return;
    }
    let (prompts, text) = smollm2_inputs();
    native_vs_dequant(be, &common::model_path(), &prompts[1..], &text[..256], 12);
}

#[cfg(feature = "cuda")]
#[test]
fn smollm2_native_quantized_matches_dequantized_cuda() {
    let Some(be) = common::cuda_backend() else { return };
    if !has_formats(&be, &[GgmlType::Q4_1, GgmlType::Q8_0]) {
        return;
    }
    let (prompts, text) = smollm2_inputs();
    native_vs_dequant(be, &common::model_path(), &prompts, &text, 24);
}

#[test]
fn gemma3_native_quantized_matches_dequantized_cpu() {
    let be = CpuBackend::new();
    let m = loader::open(&common::gemma_path()).unwrap();
    // The mixed layers load as parts: q/k in one buffer, v in another.
    let model = Llama::load(&be, &m.config, m.weights.as_ref(), |_, _| {}).unwrap();
    let parts = model.qkv_dtypes(&be);
    eprintln!("gemma q|k|v storage per layer: {parts:?}");
    assert!(parts.iter().any(|p| p.len() > 1), "the Q4_K_M file has layers with mixed q/k/v types");
    assert!(parts.iter().flatten().all(|d| d.is_weight_quant()), "every q|k|v part stays quantized");
    drop(model);
    let r = common::gemma_reference();
    let prompts: Vec<Vec<u32>> = ["g1_plain", "g3_code"].iter().map(|p| common::ids(&r["prompts"][p]["ids"])).collect();
    let long = common::ids(&r["prompts"]["g4_long"]["ids"]);
    native_vs_dequant(be, &common::gemma_path(), &prompts, &long[..512], 12);
}

/// A small Llama shape whose rows are whole K-quant super-blocks (8 layers: Q4_K_M's Q6_K layers
/// are 0, 3, 6 and 7).
fn k_shape() -> lserve::model::config::ModelConfig {
    let mut c = lserve::bench::synthetic_shape("smollm2-135m", 300, Some(256)).unwrap();
    (c.hidden_size, c.intermediate_size, c.num_layers) = (256, 512, 8);
    (c.num_heads, c.num_kv_heads, c.head_dim) = (4, 2, 64);
    c.tie_word_embeddings = false;
    c
}

/// `bench --dtype q4_k_m`: synthetic weights in llama.cpp's Q4_K_M mix. Their device bytes equal
/// the recipe's count from the shapes (Q4_K 144 and Q6_K 210 bytes per 256 weights; Q6_K for the
/// output and, in layers 0, 3, 6, 7, for attn_v and ffn_down), and a decode step on wgpu (when an
/// adapter exists) gives the CPU's logits: the same host-made blocks on both.
#[test]
fn q4_k_m_synthetic_mix() {
    use lserve::model::mix::WeightMix;
    let c = k_shape();
    let (h, f, v, hd) = (c.hidden_size, c.intermediate_size, c.vocab_size, c.head_dim);
    let (q4, q6) = (|n: usize, k: usize| n * k / 256 * 144, |n: usize, k: usize| n * k / 256 * 210);
    let mut want = q4(v, h) + q6(v, h) + 4 * h;
    for i in 0..c.num_layers {
        let more = [0, 3, 6, 7].contains(&i);
        let (nq, nkv) = (c.num_heads * hd, c.num_kv_heads * hd);
        let t = |n: usize, k: usize| if more { q6(n, k) } else { q4(n, k) };
        want += q4(nq + nkv, h) + t(nkv, h) + q4(h, nq) + q4(2 * f, h) + t(h, f) + 2 * 4 * h;
    }
    let cpu = CpuBackend::new();
    let m = Llama::synthetic(&cpu, &c, WeightMix::Q4KM, 5).unwrap();
    assert_eq!(m.weight_bytes(&cpu), want);
    let q6_bytes = q6(v, h) + 4 * (q6(c.num_kv_heads * hd, h) + q6(h, f));
    assert_eq!(m.weight_bytes_by_type(&cpu).get("q6_k"), Some(&q6_bytes), "the Q6_K share");
    fn logits<B: Backend>(e: &mut Engine<B>) -> Vec<f32> {
        let ids = [3u32, 77, 150, 299, 8];
        let mut seq = e.cache.admit().unwrap();
        e.step(&mut seq, &ids[..4], Logits::None, None).unwrap();
        let out = e.step(&mut seq, &ids[4..], Logits::Last, None).unwrap();
        e.cache.release(&mut seq).unwrap();
        out
    }
    let opts = || EngineOptions::new(common::paged_config(16, 4), 16);
    let want_logits = logits(&mut build_engine(cpu, m, &opts()).unwrap());
    assert!(want_logits.iter().all(|x| x.is_finite()));
    #[cfg(feature = "wgpu")]
    if let Some(be) = common::wgpu_backend()
        && has_formats(&be, &[GgmlType::Q4_K, GgmlType::Q6_K])
    {
        let m = Llama::synthetic(&be, &c, WeightMix::Q4KM, 5).unwrap();
        let got = logits(&mut build_engine(be, m, &opts()).unwrap());
        let d = got.iter().zip(&want_logits).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        let scale = want_logits.iter().map(|x| x.abs()).fold(0f32, f32::max);
        assert!(d <= 2e-2 * scale.max(1.0), "wgpu vs CPU logits: max |diff| {d} (scale {scale})");
    }
}
