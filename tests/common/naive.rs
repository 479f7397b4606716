//! A naive float64 Llama-family transformer written from the model definitions, used as the
//! independent reference of the forward-pass tests, with an optional Lambda mask (sink + local
//! window) for streaming heads; and a naive Gemma 3 (HF's `1 + w` norms, per-head q/k norms,
//! local sliding-window layers with their own RoPE base).
#![allow(dead_code)]

use lserve::loader::MemWeights;
use lserve::model::config::ModelConfig;
use lserve::model::rope::RopeScaling;

/// Streaming heads for the reference: `[layer][kv_head]` flags, sink and local window.
pub struct Lambda<'a> {
    pub streaming: &'a [Vec<bool>],
    pub sink: usize,
    pub local: usize,
}

pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn normal_vec(&mut self, n: usize, scale: f64) -> Vec<f32> {
        (0..n).map(|_| ((self.next() + self.next() + self.next() - 1.5) * 2.0 * scale) as f32).collect()
    }
}

pub fn base_config() -> ModelConfig {
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
        gemma: None,
        bos_token_id: None,
        eos_token_ids: vec![],
    }
}

pub fn random_weights(c: &ModelConfig, rng: &mut Rng) -> MemWeights {
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

pub fn get<'a>(w: &'a MemWeights, name: &str) -> &'a [f32] {
    &w.tensors[name].0
}

/// y[n] = sum_k x[k] w[n][k] (+ b[n]), in f64.
pub fn linear(x: &[f64], w: &[f32], b: Option<&[f32]>, n: usize) -> Vec<f64> {
    let k = x.len();
    (0..n).map(|j| (0..k).map(|i| x[i] * w[j * k + i] as f64).sum::<f64>() + b.map_or(0.0, |b| b[j] as f64)).collect()
}

pub fn rmsnorm(x: &[f64], w: &[f32], eps: f64) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    x.iter().zip(w).map(|(v, w)| v / (ms + eps).sqrt() * *w as f64).collect()
}

/// Rotate-half RoPE by the definition: pairs (i, i + d/2) rotated by pos * inv_freq[i].
pub fn rope(x: &mut [f64], pos: usize, inv: &[f32], scaling: f32) {
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
pub fn naive_logits(c: &ModelConfig, w: &MemWeights, ids: &[u32]) -> Vec<Vec<f64>> {
    naive_logits_lambda(c, w, ids, None)
}

/// Logits of every position; streaming heads (if any) see only the Lambda mask.
pub fn naive_logits_lambda(c: &ModelConfig, w: &MemWeights, ids: &[u32], lambda: Option<&Lambda>) -> Vec<Vec<f64>> {
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
                let visible: Vec<usize> = (lo..=i)
                    .filter(|&j| match lambda {
                        Some(lm) if lm.streaming[l][kvh] => j < lm.sink || i - j < lm.local,
                        _ => true,
                    })
                    .collect();
                let scores: Vec<f64> = visible
                    .iter()
                    .map(|&j| {
                        (0..hd).map(|d| qs[i][hh * hd + d] * ks[j][kvh * hd + d]).sum::<f64>() / (hd as f64).sqrt()
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::MIN, f64::max);
                let z: f64 = scores.iter().map(|s| (s - m).exp()).sum();
                for (&j, s) in visible.iter().zip(&scores) {
                    for d in 0..hd {
                        attn[hh * hd + d] += (s - m).exp() / z * vs[j][kvh * hd + d];
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

pub fn max_diff(a: &[f32], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (*x as f64 - y).abs()).fold(0.0, f64::max)
}

/// Gemma's RMSNorm as HF writes it: the weight `w` multiplies as `1 + w`.
pub fn gemma_rmsnorm(x: &[f64], w: &[f32], eps: f64) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    x.iter().zip(w).map(|(v, w)| v / (ms + eps).sqrt() * (1.0 + *w as f64)).collect()
}

fn gelu_tanh(x: f64) -> f64 {
    0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
}

/// Causal GQA attention of every position, scores scaled by `scale`; a query sees the keys with
/// `q - k < window` (`usize::MAX`: all of them).
fn attend(
    c: &ModelConfig,
    qs: &[Vec<f64>],
    ks: &[Vec<f64>],
    vs: &[Vec<f64>],
    scale: f64,
    window: usize,
) -> Vec<Vec<f64>> {
    let (hd, nh, nkv) = (c.head_dim, c.num_heads, c.num_kv_heads);
    (0..qs.len())
        .map(|i| {
            let mut out = vec![0f64; nh * hd];
            for hh in 0..nh {
                let kvh = hh / (nh / nkv);
                let keys = (i + 1).saturating_sub(window)..=i;
                let dot = |j: usize| (0..hd).map(|d| qs[i][hh * hd + d] * ks[j][kvh * hd + d]).sum::<f64>() * scale;
                let scores: Vec<f64> = keys.clone().map(dot).collect();
                let m = scores.iter().cloned().fold(f64::MIN, f64::max);
                let z: f64 = scores.iter().map(|s| (s - m).exp()).sum();
                for (j, s) in keys.zip(&scores) {
                    (0..hd).for_each(|d| out[hh * hd + d] += (s - m).exp() / z * vs[j][kvh * hd + d]);
                }
            }
            out
        })
        .collect()
}

/// Logits of every position of a Gemma 3 text model (HF `Gemma3ForCausalLM`) from scratch in
/// f64: embeddings scaled by sqrt(hidden); per layer input norm, q/k/v, per-head q/k norms, RoPE
/// (the local layers with their own base and a sliding window), post-attention norm, residual,
/// pre-FFN norm, GELU-tanh(gate) * up, down, post-FFN norm, residual; final norm; the tied head.
/// Every norm weight is the HF `w`, applied as `1 + w`.
pub fn naive_gemma_logits(c: &ModelConfig, w: &MemWeights, ids: &[u32]) -> Vec<Vec<f64>> {
    let g = c.gemma.as_ref().expect("a Gemma 3 config");
    let (h, hd, nh, nkv) = (c.hidden_size, c.head_dim, c.num_heads, c.num_kv_heads);
    let eps = c.rms_norm_eps as f64;
    let global = c.rope().freqs(ids.len());
    let local = lserve::model::rope::RopeConfig { theta: g.local_rope_theta, scaling: RopeScaling::None, ..c.rope() }
        .freqs(ids.len());
    let emb = get(w, "model.embed_tokens.weight");
    let mut xs: Vec<Vec<f64>> = ids
        .iter()
        .map(|&t| emb[t as usize * h..][..h].iter().map(|&v| v as f64 * (h as f32).sqrt() as f64).collect())
        .collect();
    for l in 0..c.num_layers {
        let p = |s: &str| format!("model.layers.{l}.{s}");
        let n = |s: &str, x: &[f64]| gemma_rmsnorm(x, get(w, &p(&format!("{s}.weight"))), eps);
        let (f, window) = if g.is_local(l) { (&local, g.sliding_window) } else { (&global, usize::MAX) };
        let (mut qs, mut ks, mut vs) = (vec![], vec![], vec![]);
        for (pos, x) in xs.iter().enumerate() {
            let xn = n("input_layernorm", x);
            let mut q = linear(&xn, get(w, &p("self_attn.q_proj.weight")), None, nh * hd);
            let mut k = linear(&xn, get(w, &p("self_attn.k_proj.weight")), None, nkv * hd);
            for (v, norm) in [(&mut q, "self_attn.q_norm"), (&mut k, "self_attn.k_norm")] {
                for head in v.chunks_mut(hd) {
                    let normed = n(norm, head);
                    head.copy_from_slice(&normed);
                    rope(head, pos, &f.inv_freq, f.attention_scaling);
                }
            }
            qs.push(q);
            ks.push(k);
            vs.push(linear(&xn, get(w, &p("self_attn.v_proj.weight")), None, nkv * hd));
        }
        let attn = attend(c, &qs, &ks, &vs, 1.0 / (g.query_pre_attn_scalar as f64).sqrt(), window);
        for (x, a) in xs.iter_mut().zip(&attn) {
            let o = n("post_attention_layernorm", &linear(a, get(w, &p("self_attn.o_proj.weight")), None, h));
            x.iter_mut().zip(&o).for_each(|(a, b)| *a += b);
            let xn = n("pre_feedforward_layernorm", x);
            let gate = linear(&xn, get(w, &p("mlp.gate_proj.weight")), None, c.intermediate_size);
            let up = linear(&xn, get(w, &p("mlp.up_proj.weight")), None, c.intermediate_size);
            let act: Vec<f64> = gate.iter().zip(&up).map(|(g, u)| gelu_tanh(*g) * u).collect();
            let d = n("post_feedforward_layernorm", &linear(&act, get(w, &p("mlp.down_proj.weight")), None, h));
            x.iter_mut().zip(&d).for_each(|(a, b)| *a += b);
        }
    }
    let norm = get(w, "model.norm.weight");
    xs.iter().map(|x| linear(&gemma_rmsnorm(x, norm, eps), emb, None, c.vocab_size)).collect()
}
