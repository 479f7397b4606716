//! The engine's forward pass (CPU backend, paged KV cache, chunked prefill and decode) against a
//! naive float64 transformer written here from the Llama/Qwen2/Mistral definitions, on small random
//! models covering GQA, MQA, qkv bias, tied and untied embeddings, sliding windows and every RoPE
//! scaling. Weights are fresh random numbers each run (seed printed).

mod common;

use lserve::backend::cpu::CpuBackend;
use lserve::loader::MemWeights;
use lserve::model::config::ModelConfig;
use lserve::model::llama::{Llama, Logits};
use lserve::model::rope::RopeScaling;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
    fn normal_vec(&mut self, n: usize, scale: f64) -> Vec<f32> {
        (0..n).map(|_| ((self.next() + self.next() + self.next() - 1.5) * 2.0 * scale) as f32).collect()
    }
}

fn base_config() -> ModelConfig {
    ModelConfig {
        arch: "llama".into(),
        vocab_size: 97,
        hidden_size: 64,
        intermediate_size: 96,
        num_layers: 2,
        num_heads: 4,
        num_kv_heads: 2,
        head_dim: 16,
        rms_norm_eps: 1e-5,
        rope_theta: 10000.0,
        rope_scaling: RopeScaling::None,
        max_position_embeddings: 64,
        tie_word_embeddings: false,
        attention_bias: false,
        sliding_window: None,
        bos_token_id: None,
        eos_token_ids: vec![],
    }
}

fn random_weights(c: &ModelConfig, rng: &mut Rng) -> MemWeights {
    let mut w = MemWeights::default();
    let (h, hd, f) = (c.hidden_size, c.head_dim, c.intermediate_size);
    let (nq, nkv) = (c.num_heads * hd, c.num_kv_heads * hd);
    w.insert("model.embed_tokens.weight", &[c.vocab_size, h], rng.normal_vec(c.vocab_size * h, 1.0));
    if !c.tie_word_embeddings {
        w.insert("lm_head.weight", &[c.vocab_size, h], rng.normal_vec(c.vocab_size * h, 0.2));
    }
    let norm = |rng: &mut Rng| rng.normal_vec(h, 0.2).iter().map(|x| 1.0 + x).collect::<Vec<f32>>();
    w.insert("model.norm.weight", &[h], norm(rng));
    for i in 0..c.num_layers {
        let p = |s: &str| format!("model.layers.{i}.{s}");
        let s = 1.0 / (h as f64).sqrt();
        w.insert(&p("input_layernorm.weight"), &[h], norm(rng));
        w.insert(&p("post_attention_layernorm.weight"), &[h], norm(rng));
        w.insert(&p("self_attn.q_proj.weight"), &[nq, h], rng.normal_vec(nq * h, s));
        w.insert(&p("self_attn.k_proj.weight"), &[nkv, h], rng.normal_vec(nkv * h, s));
        w.insert(&p("self_attn.v_proj.weight"), &[nkv, h], rng.normal_vec(nkv * h, s));
        w.insert(&p("self_attn.o_proj.weight"), &[h, nq], rng.normal_vec(h * nq, s));
        if c.attention_bias {
            w.insert(&p("self_attn.q_proj.bias"), &[nq], rng.normal_vec(nq, 0.5));
            w.insert(&p("self_attn.k_proj.bias"), &[nkv], rng.normal_vec(nkv, 0.5));
            w.insert(&p("self_attn.v_proj.bias"), &[nkv], rng.normal_vec(nkv, 0.5));
        }
        w.insert(&p("mlp.gate_proj.weight"), &[f, h], rng.normal_vec(f * h, s));
        w.insert(&p("mlp.up_proj.weight"), &[f, h], rng.normal_vec(f * h, s));
        w.insert(&p("mlp.down_proj.weight"), &[h, f], rng.normal_vec(h * f, 1.0 / (f as f64).sqrt()));
    }
    w
}

fn get<'a>(w: &'a MemWeights, name: &str) -> &'a [f32] {
    &w.tensors[name].0
}

/// y[n] = sum_k x[k] w[n][k] (+ b[n]), in f64.
fn linear(x: &[f64], w: &[f32], b: Option<&[f32]>, n: usize) -> Vec<f64> {
    let k = x.len();
    (0..n).map(|j| (0..k).map(|i| x[i] * w[j * k + i] as f64).sum::<f64>() + b.map_or(0.0, |b| b[j] as f64)).collect()
}

fn rmsnorm(x: &[f64], w: &[f32], eps: f64) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    x.iter().zip(w).map(|(v, w)| v / (ms + eps).sqrt() * *w as f64).collect()
}

/// Rotate-half RoPE by the definition: pairs (i, i + d/2) rotated by pos * inv_freq[i].
fn rope(x: &mut [f64], pos: usize, inv: &[f32], scaling: f32) {
    let half = x.len() / 2;
    for i in 0..half {
        let ang = (pos as f32 * inv[i]) as f64; // HF computes the angle in f32
        let (c, s) = (ang.cos() * scaling as f64, ang.sin() * scaling as f64);
        let (a, b) = (x[i], x[i + half]);
        x[i] = a * c - b * s;
        x[i + half] = b * c + a * s;
    }
}

/// Logits of every position, computed from scratch in f64.
fn naive_logits(c: &ModelConfig, w: &MemWeights, ids: &[u32]) -> Vec<Vec<f64>> {
    let (h, hd, nh, nkv) = (c.hidden_size, c.head_dim, c.num_heads, c.num_kv_heads);
    let eps = c.rms_norm_eps as f64;
    let freqs = c.rope().freqs(ids.len());
    let emb = get(w, "model.embed_tokens.weight");
    let mut xs: Vec<Vec<f64>> =
        ids.iter().map(|&t| emb[t as usize * h..][..h].iter().map(|&v| v as f64).collect()).collect();
    for l in 0..c.num_layers {
        let p = |s: &str| format!("model.layers.{l}.{s}");
        let bias = |s: &str| c.attention_bias.then(|| get(w, &p(s)));
        let (mut qs, mut ks, mut vs) = (vec![], vec![], vec![]);
        for (pos, x) in xs.iter().enumerate() {
            let xn = rmsnorm(x, get(w, &p("input_layernorm.weight")), eps);
            let mut q = linear(&xn, get(w, &p("self_attn.q_proj.weight")), bias("self_attn.q_proj.bias"), nh * hd);
            let mut k = linear(&xn, get(w, &p("self_attn.k_proj.weight")), bias("self_attn.k_proj.bias"), nkv * hd);
            q.chunks_mut(hd).for_each(|hq| rope(hq, pos, &freqs.inv_freq, freqs.attention_scaling));
            k.chunks_mut(hd).for_each(|hk| rope(hk, pos, &freqs.inv_freq, freqs.attention_scaling));
            qs.push(q);
            ks.push(k);
            vs.push(linear(&xn, get(w, &p("self_attn.v_proj.weight")), bias("self_attn.v_proj.bias"), nkv * hd));
        }
        for (i, x) in xs.iter_mut().enumerate() {
            let mut attn = vec![0f64; nh * hd];
            for hh in 0..nh {
                let kvh = hh / (nh / nkv);
                let lo = c.sliding_window.map_or(0, |wnd| (i + 1).saturating_sub(wnd));
                let scores: Vec<f64> = (lo..=i)
                    .map(|j| {
                        (0..hd).map(|d| qs[i][hh * hd + d] * ks[j][kvh * hd + d]).sum::<f64>() / (hd as f64).sqrt()
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::MIN, f64::max);
                let z: f64 = scores.iter().map(|s| (s - m).exp()).sum();
                for (jj, s) in scores.iter().enumerate() {
                    for d in 0..hd {
                        attn[hh * hd + d] += (s - m).exp() / z * vs[lo + jj][kvh * hd + d];
                    }
                }
            }
            let o = linear(&attn, get(w, &p("self_attn.o_proj.weight")), None, h);
            x.iter_mut().zip(&o).for_each(|(a, b)| *a += b);
            let xn = rmsnorm(x, get(w, &p("post_attention_layernorm.weight")), eps);
            let g = linear(&xn, get(w, &p("mlp.gate_proj.weight")), None, c.intermediate_size);
            let u = linear(&xn, get(w, &p("mlp.up_proj.weight")), None, c.intermediate_size);
            let act: Vec<f64> = g.iter().zip(&u).map(|(g, u)| g / (1.0 + (-g).exp()) * u).collect();
            let d = linear(&act, get(w, &p("mlp.down_proj.weight")), None, h);
            x.iter_mut().zip(&d).for_each(|(a, b)| *a += b);
        }
    }
    let head = if c.tie_word_embeddings { emb } else { get(w, "lm_head.weight") };
    xs.iter().map(|x| linear(&rmsnorm(x, get(w, "model.norm.weight"), eps), head, None, c.vocab_size)).collect()
}

fn max_diff(a: &[f32], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (*x as f64 - y).abs()).fold(0.0, f64::max)
}

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
