//! The Gemma 3 (text) forward pass, written against the [`Backend`] trait with the ops the Llama
//! family uses plus three of its own (`scale`, `head_rmsnorm`, `gelu_tanh_mul`). It reads top to
//! bottom: embed and scale by `sqrt(hidden)`, then per layer
//! `rmsnorm -> qkv -> q/k head_rmsnorm -> rope_append_kv -> attention -> o_proj -> rmsnorm (post)
//! -> add_rmsnorm (pre-FFN) -> gate_up -> gelu_tanh_mul -> down -> rmsnorm (post)`, then the final
//! norm and the tied LM head.
//!
//! Invariants:
//! - Every RMSNorm weight is held as `1 + w` (HF's Gemma RMSNorm multiplies by `1 + w`; the
//!   weight source always yields the HF `w`, see `loader`), so the plain `rmsnorm` ops apply.
//! - q|k|v are fused into one matrix as in Llama; `head_rmsnorm` normalizes the q heads and the k
//!   heads of each fused row in place (weights `[n_heads + n_kv_heads][head_dim]`), v untouched.
//! - Local (sliding-window) layers keep every KV head in the cache's streaming ring
//!   ([`local_layout`]): attention params `sink = the ring's sink, local = window = W` make the
//!   Lambda mask exactly the window `q - k < W`, so the ring (sink + W + chunk tokens) is all a
//!   local layer stores, on every backend, whatever the context. They use their own RoPE base.
//! - Global layers are ordinary layers: the head pattern's streaming heads and page selection
//!   apply to them only (local layers have no retrieval heads, so nothing is selected there).
//!
//! [`Llama`](super::llama::Llama) dispatches here when `cfg.arch == "gemma3"`, so the engine,
//! server and tools drive both families through one type.

use super::batch::{AttnSettings, GraphRegion, Head, LayerHook, SeqStep};
use super::pool::BufferPool;
use super::step::StepMeta;
use crate::backend::*;
use crate::error::{Error, Result};
use crate::kv::{HeadLayout, KvCache};
use crate::model::config::{GemmaParams, ModelConfig};
use crate::model::linear::{Linear, WeightLoader, take};
use crate::model::rope::{RopeConfig, RopeScaling};
use crate::model::weights::WeightSource;

struct Layer<B: Backend> {
    attn_norm: B::Buffer,
    /// q|k|v; in parts where the file's types differ (Q4_K_M: q/k Q5_0, v Q8_0 in some layers).
    w_qkv: Linear<B>,
    /// `[n_heads + n_kv_heads][head_dim]`: q_norm repeated per query head, then k_norm per KV head.
    qk_norm: B::Buffer,
    w_o: Linear<B>,
    post_attn_norm: B::Buffer,
    pre_ffn_norm: B::Buffer,
    w_gate_up: Linear<B>,
    w_down: Linear<B>,
    post_ffn_norm: B::Buffer,
    local: bool,
}

pub struct Gemma3<B: Backend> {
    cfg: ModelConfig,
    g: GemmaParams,
    rope_global: RopeConfig,
    rope_local: RopeConfig,
    /// The embedding table, also the (tied) LM head, in the file's type where the backend has it.
    embed: B::Buffer,
    norm: B::Buffer,
    layers: Vec<Layer<B>>,
    pool: BufferPool<B>,
}

/// An HF Gemma norm weight `w` as the `1 + w` the rmsnorm ops multiply by.
fn plus_one(mut w: Vec<f32>) -> Vec<f32> {
    w.iter_mut().for_each(|x| *x += 1.0);
    w
}

/// The cache layout Gemma 3 needs: every KV head of a local layer streams (lives in the ring);
/// a global layer keeps what the head pattern gave it.
pub fn local_layout(cfg: &ModelConfig, mut layout: HeadLayout) -> HeadLayout {
    if let Some(g) = &cfg.gemma {
        for (l, heads) in layout.streaming.iter_mut().enumerate() {
            if g.is_local(l) {
                heads.iter_mut().for_each(|s| *s = true);
            }
        }
    }
    layout
}

/// Tokens of sliding window the streaming ring must hold beyond its sink (0 without one).
pub fn ring_window(cfg: &ModelConfig) -> usize {
    cfg.gemma.as_ref().map_or(0, |g| g.sliding_window)
}

impl<B: Backend> Gemma3<B> {
    pub fn load<S: WeightSource + ?Sized>(
        be: &B,
        cfg: &ModelConfig,
        ld: &WeightLoader<B, S>,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<Self> {
        let g = cfg.gemma.clone().ok_or_else(|| Error::Config("a gemma3 model needs its Gemma parameters".into()))?;
        if !cfg.tie_word_embeddings || cfg.attention_bias {
            return Err(Error::Config("Gemma 3 has tied embeddings and no attention bias".into()));
        }
        let (h, hd, ffn) = (cfg.hidden_size, cfg.head_dim, cfg.intermediate_size);
        let (nq, nkv) = (cfg.num_heads * hd, cfg.num_kv_heads * hd);
        let src = ld.source();
        let upf = |v: Vec<f32>| be.upload_f32(DType::F32, v);
        let norm = |name: &str, n: usize| upf(plus_one(take(src, name, &[n])?));
        let mut layers = Vec::with_capacity(cfg.num_layers);
        for i in 0..cfg.num_layers {
            let p = |s: &str| format!("model.layers.{i}.{s}");
            let (q, k, v) = (p("self_attn.q_proj.weight"), p("self_attn.k_proj.weight"), p("self_attn.v_proj.weight"));
            let (gate, up) = (p("mlp.gate_proj.weight"), p("mlp.up_proj.weight"));
            let qn = plus_one(take(src, &p("self_attn.q_norm.weight"), &[hd])?);
            let kn = plus_one(take(src, &p("self_attn.k_norm.weight"), &[hd])?);
            let mut qk = qn.repeat(cfg.num_heads);
            qk.extend(kn.repeat(cfg.num_kv_heads));
            layers.push(Layer {
                attn_norm: norm(&p("input_layernorm.weight"), h)?,
                w_qkv: ld.linear(&[(&q, nq), (&k, nkv), (&v, nkv)], h, None)?,
                qk_norm: upf(qk)?,
                w_o: ld.linear(&[(&p("self_attn.o_proj.weight"), h)], nq, None)?,
                post_attn_norm: norm(&p("post_attention_layernorm.weight"), h)?,
                pre_ffn_norm: norm(&p("pre_feedforward_layernorm.weight"), h)?,
                w_gate_up: ld.linear(&[(&gate, ffn), (&up, ffn)], h, None)?,
                w_down: ld.linear(&[(&p("mlp.down_proj.weight"), h)], ffn, None)?,
                post_ffn_norm: norm(&p("post_feedforward_layernorm.weight"), h)?,
                local: g.is_local(i),
            });
            progress(i + 1, cfg.num_layers);
        }
        let rope_global = cfg.rope();
        let rope_local = RopeConfig { theta: g.local_rope_theta, scaling: RopeScaling::None, ..cfg.rope() };
        Ok(Gemma3 {
            cfg: cfg.clone(),
            g,
            rope_global,
            rope_local,
            embed: ld.table("model.embed_tokens.weight", cfg.vocab_size, h)?,
            norm: norm("model.norm.weight", h)?,
            layers,
            pool: BufferPool::default(),
        })
    }

    pub fn weight_bytes(&self, be: &B) -> usize {
        self.weight_bytes_by_type(be).values().sum()
    }

    /// Device bytes per weight storage type (see `Llama::weight_bytes_by_type`).
    pub fn weight_bytes_by_type(&self, be: &B) -> std::collections::BTreeMap<String, usize> {
        let mut by = std::collections::BTreeMap::new();
        let mut add =
            |b: &B::Buffer| *by.entry(be.dtype(b).weight_name()).or_insert(0) += be.len(b) * be.dtype(b).size();
        add(&self.embed);
        add(&self.norm);
        for l in &self.layers {
            [&l.attn_norm, &l.qk_norm, &l.post_attn_norm, &l.pre_ffn_norm, &l.post_ffn_norm]
                .into_iter()
                .for_each(&mut add);
            [&l.w_qkv, &l.w_o, &l.w_gate_up, &l.w_down].into_iter().flat_map(|w| w.buffers()).for_each(&mut add);
        }
        by
    }

    /// The storage types of each layer's q|k|v parts (tests: mixed-type files load in parts).
    pub fn qkv_dtypes(&self, be: &B) -> Vec<Vec<DType>> {
        self.layers.iter().map(|l| l.w_qkv.dtypes(be)).collect()
    }

    /// Attention parameters of layer `i`: Gemma's score scale; a local layer's window.
    fn layer_attention(&self, m: &StepMeta<B>, cache: &KvCache<B>, i: usize, attn: &AttnSettings) -> AttentionParams {
        let mut ap = m.attention_params(cache, i, attn);
        ap.scale = 1.0 / self.g.query_pre_attn_scalar.sqrt();
        if self.layers[i].local {
            let w = self.g.sliding_window as u32;
            (ap.local, ap.window) = (w, w);
        }
        ap
    }

    /// One step of every layer, in Gemma 3's op order. Long (about 115 lines) for the reason
    /// `Llama::forward_inner` is: the body is the model, one op after another over shared
    /// activation buffers inside one graph region.
    pub(super) fn forward_inner(
        &self,
        be: &B,
        cache: &mut KvCache<B>,
        attn: &AttnSettings,
        seqs: &[SeqStep],
        mut hook: Option<LayerHook<B>>,
        want: Head,
    ) -> Result<(Vec<f32>, Vec<u32>)> {
        let c = &self.cfg;
        let max_len = seqs.iter().map(|s| s.cache.len + s.tokens.len()).max().unwrap_or(0);
        let (fg, fl) = (self.rope_global.freqs(max_len), self.rope_local.freqs(max_len));
        let pool = &self.pool;
        let m = StepMeta::build(be, pool, cache, seqs, c, c.num_heads, fg.inv_freq)?;
        let inv_local = pool.upload_f32(be, &fl.inv_freq)?;
        let (n, h, hd) = (m.n_tokens, c.hidden_size, c.head_dim);
        let (nq, ffn) = (c.num_heads * hd, c.intermediate_size);
        let a = |len: usize| pool.take(be, DType::F32, len);
        let (mut x, mut xn, mut qkv, mut q) = (a(n * h)?, a(n * h)?, a(n * c.qkv_dim())?, a(n * nq)?);
        let (mut attn_out, mut o, mut o2) = (a(n * nq)?, a(n * h)?, a(n * h)?);
        let (mut gu, mut act) = (a(n * 2 * ffn)?, a(n * ffn)?);
        let norm = RmsnormParams { rows: n as u32, dim: h as u32, eps: c.rms_norm_eps, _pad: 0 };
        let mm = |m: usize, n: usize, k: usize| MatmulParams::new(m, n, k, false);
        let qk = HeadRmsnormParams {
            rows: n as u32,
            n_heads: (c.num_heads + c.num_kv_heads) as u32,
            head_dim: hd as u32,
            row_stride: c.qkv_dim() as u32,
            eps: c.rms_norm_eps,
            ..Default::default()
        };
        let settings = match want {
            Head::Sample(s) if m.n_logits > 0 => Some(upload_settings(be, pool, s, m.n_logits)?),
            _ => None,
        };
        // Block-sparse prefill (docs/sparse-attention.md) acts on the global layers only: the
        // local layers' window is already their whole key list.
        let mut blocks = super::blocks::step_blocks(be, pool, cache, attn, seqs, m.decode)?;
        let region = GraphRegion::begin(be, m.decode && hook.is_none());
        let ep = EmbedParams { n_tokens: n as u32, dim: h as u32, vocab: c.vocab_size as u32, first: 0 };
        be.embed(&ep, &self.embed, &m.ids, &mut x)?;
        // HF casts sqrt(hidden) to the activation dtype (f32 here) before multiplying.
        be.scale(&ScaleParams { n: (n * h) as u32, scale: (h as f32).sqrt(), ..Default::default() }, &mut x)?;
        let paged = m.paged();
        let lp = cache.shape.logical_page;
        for (i, l) in self.layers.iter().enumerate() {
            if i == 0 {
                be.rmsnorm(&norm, &x, &l.attn_norm, &mut xn)?;
            } else {
                be.add_rmsnorm(&norm, &mut x, &o2, &l.attn_norm, &mut xn)?;
            }
            l.w_qkv.matmul(be, n, &xn, &mut qkv)?;
            be.head_rmsnorm(&qk, &mut qkv, &l.qk_norm)?;
            let (scaling, inv) =
                if l.local { (fl.attention_scaling, &inv_local) } else { (fg.attention_scaling, &m.inv_freq) };
            let rmeta = RopeAppendMeta { inv_freq: inv, ..m.rope_meta() };
            let rp = m.rope_params(cache, i, scaling);
            be.rope_append_kv(&rp, &qkv, &rmeta, &mut q, cache.layers[i].view_mut())?;
            let ap = self.layer_attention(&m, cache, i, attn);
            let sp = m.select_params(cache, &ap, attn);
            let store = &mut cache.layers[i];
            if m.decode {
                if !attn.dense_layer[i] && m.any_select && ap.n_ret > 0 {
                    let (kv, out) = store.select_view();
                    be.page_select(&sp, &q, kv, &paged, &m.seq_slot, &m.select_mask, out)?;
                }
                let tail = if attn.dense_layer[i] { &m.zeros } else { &m.tail_start };
                let hp = HeadPages {
                    selected: &store.selected,
                    counts: &store.counts,
                    seq_slot: &m.seq_slot,
                    tail_start: tail,
                };
                be.sparse_decode_attention(&ap, &q, store.view(), &paged, &hp, &mut attn_out)?;
            } else if let Some(b) = blocks.as_mut().filter(|_| !l.local && !attn.dense_layer[i] && ap.n_ret > 0) {
                let (bap, lists) = b.select(be, pool, &m, &ap, lp, &q, store.view())?;
                be.prefill_attention(&bap, &q, &m.q_indptr, store.view(), &paged, Some(&lists), &mut attn_out)?;
            } else {
                be.prefill_attention(&ap, &q, &m.q_indptr, store.view(), &paged, None, &mut attn_out)?;
            }
            if let Some(hook) = hook.as_mut() {
                hook(be, i, &q, store.view(), &paged)?;
            }
            l.w_o.matmul(be, n, &attn_out, &mut o)?;
            be.rmsnorm(&norm, &o, &l.post_attn_norm, &mut o2)?;
            be.add_rmsnorm(&norm, &mut x, &o2, &l.pre_ffn_norm, &mut xn)?;
            l.w_gate_up.matmul(be, n, &xn, &mut gu)?;
            be.gelu_tanh_mul(
                &GeluTanhMulParams { rows: n as u32, dim: ffn as u32, ..Default::default() },
                &gu,
                &mut act,
            )?;
            l.w_down.matmul(be, n, &act, &mut o)?;
            be.rmsnorm(&norm, &o, &l.post_ffn_norm, &mut o2)?;
        }
        let nl = m.n_logits;
        let (mut out, mut ids) = (vec![], vec![]);
        if nl > 0 {
            be.add_rmsnorm(&norm, &mut x, &o2, &self.norm, &mut xn)?;
            let mut sel = a(nl * h)?;
            let gp = GatherRowsParams { n_out: nl as u32, dim: h as u32, n_src: n as u32, _pad: 0 };
            be.gather_rows(&gp, &xn, &m.logit_rows, &mut sel)?;
            let mut logits = a(nl * c.vocab_size)?;
            be.matmul(&mm(nl, c.vocab_size, h), &sel, &self.embed, None, &mut logits)?;
            let mut best = pool.take(be, DType::U32, nl)?;
            let r = match want {
                Head::Logits => be.download_f32(&logits, 0, nl * c.vocab_size).map(|v| out = v),
                Head::Argmax => {
                    let ap = ArgmaxParams { rows: nl as u32, n: c.vocab_size as u32, ..Default::default() };
                    be.argmax(&ap, &logits, &mut best).and_then(|_| be.download_u32(&best, 0, nl)).map(|v| ids = v)
                }
                Head::Sample(_) => {
                    let set = settings.as_ref().expect("uploaded above for Head::Sample");
                    let sp = SampleParams { rows: nl as u32, n: c.vocab_size as u32, ..Default::default() };
                    be.sample(&sp, &logits, set, &mut best).and_then(|_| be.download_u32(&best, 0, nl)).map(|v| ids = v)
                }
            };
            [sel, logits, best].into_iter().for_each(|b| pool.put(b));
            r?;
        }
        region.finish()?;
        [x, xn, qkv, q, attn_out, o, o2, gu, act, inv_local].into_iter().chain(settings).for_each(|b| pool.put(b));
        m.recycle(pool);
        blocks.into_iter().for_each(|b| b.recycle(pool));
        Ok((out, ids))
    }
}

/// The `[rows][4]` sampling settings of a step with `nl` logits rows, on the device.
fn upload_settings<B: Backend>(be: &B, pool: &BufferPool<B>, settings: &[[u32; 4]], nl: usize) -> Result<B::Buffer> {
    if settings.len() != nl {
        return Err(Error::InvalidArgument(format!(
            "sampling settings for {} rows, the step has {nl} logits rows",
            settings.len()
        )));
    }
    let words: Vec<u32> = settings.iter().flatten().copied().collect();
    pool.upload_u32(be, &words)
}
