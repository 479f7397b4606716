//! The Llama-family forward pass (Llama 2/3, Mistral, Qwen2, SmolLM), written once against the
//! [`Backend`] trait. It reads top to bottom: embed, then per layer
//! `rmsnorm -> qkv -> rope_append_kv -> attention -> o_proj -> add_rmsnorm -> gate_up -> silu_mul
//! -> down`, then the final norm and the LM head on the rows whose logits are wanted.
//!
//! Weights are fused at load: q|k|v into one `[qkv_dim][hidden]` matrix (and bias), gate|up into one
//! `[2*ffn][hidden]` matrix, so a decode step is four matmuls per layer. A step is a ragged batch of
//! sequences, each contributing a chunk of new tokens at the end of its cached context; a step
//! where every sequence brings exactly one token runs the decode attention op.

use crate::backend::*;
use crate::error::{Error, Result};
use crate::kv::{KvCache, SeqPages};
use crate::loader::WeightSource;
use crate::model::config::ModelConfig;
use crate::model::rope::RopeConfig;

struct Layer<B: Backend> {
    attn_norm: B::Buffer,
    w_qkv: B::Buffer,
    b_qkv: Option<B::Buffer>,
    w_o: B::Buffer,
    ffn_norm: B::Buffer,
    w_gate_up: B::Buffer,
    w_down: B::Buffer,
}

pub struct Llama<B: Backend> {
    pub cfg: ModelConfig,
    rope: RopeConfig,
    /// Llama 3.1 GGUF frequency divisors (applied on top of `rope`).
    freq_factors: Option<Vec<f32>>,
    embed: B::Buffer,
    /// None when the embeddings are tied.
    lm_head: Option<B::Buffer>,
    norm: B::Buffer,
    layers: Vec<Layer<B>>,
}

/// One sequence's part of a step.
pub struct SeqStep<'a> {
    pub tokens: &'a [u32],
    /// Pages and length *before* this step; `reserve` must already cover the new tokens.
    pub cache: &'a SeqPages,
    /// Which of this chunk's rows need logits.
    pub logits: Logits,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Logits {
    None,
    Last,
    All,
}

fn take<S: WeightSource + ?Sized>(src: &S, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
    let (data, got) = src
        .get(name)?
        .ok_or_else(|| Error::Format(format!("weight `{name}` is missing")))?;
    let want: usize = shape.iter().product();
    if data.len() != want || got.iter().product::<usize>() != want {
        return Err(Error::Format(format!(
            "weight `{name}` has shape {got:?}, expected {shape:?}"
        )));
    }
    Ok(data)
}

impl<B: Backend> Llama<B> {
    /// Read, fuse and upload all weights. `progress` is called after each layer.
    pub fn load<S: WeightSource + ?Sized>(
        be: &B,
        cfg: &ModelConfig,
        src: &S,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<Self> {
        let (h, hd, ffn) = (cfg.hidden_size, cfg.head_dim, cfg.intermediate_size);
        let dt = be.caps().weight_dtypes[0];
        let up = |v: Vec<f32>| be.upload_f32(dt, v);
        let upf = |v: Vec<f32>| be.upload_f32(DType::F32, v);
        let embed_data = take(src, "model.embed_tokens.weight", &[cfg.vocab_size, h])?;
        let lm_head = match src.get("lm_head.weight")? {
            Some(_) if !cfg.tie_word_embeddings => {
                Some(up(take(src, "lm_head.weight", &[cfg.vocab_size, h])?)?)
            }
            None if !cfg.tie_word_embeddings => {
                return Err(Error::Format("weight `lm_head.weight` is missing".into()));
            }
            _ => None,
        };
        let mut layers = Vec::with_capacity(cfg.num_layers);
        for i in 0..cfg.num_layers {
            let p = |s: &str| format!("model.layers.{i}.{s}");
            let (nq, nkv) = (cfg.num_heads * hd, cfg.num_kv_heads * hd);
            let mut w_qkv = take(src, &p("self_attn.q_proj.weight"), &[nq, h])?;
            w_qkv.extend(take(src, &p("self_attn.k_proj.weight"), &[nkv, h])?);
            w_qkv.extend(take(src, &p("self_attn.v_proj.weight"), &[nkv, h])?);
            let b_qkv = if cfg.attention_bias {
                let mut b = take(src, &p("self_attn.q_proj.bias"), &[nq])?;
                b.extend(take(src, &p("self_attn.k_proj.bias"), &[nkv])?);
                b.extend(take(src, &p("self_attn.v_proj.bias"), &[nkv])?);
                Some(upf(b)?)
            } else {
                None
            };
            let mut w_gate_up = take(src, &p("mlp.gate_proj.weight"), &[ffn, h])?;
            w_gate_up.extend(take(src, &p("mlp.up_proj.weight"), &[ffn, h])?);
            layers.push(Layer {
                attn_norm: upf(take(src, &p("input_layernorm.weight"), &[h])?)?,
                w_qkv: up(w_qkv)?,
                b_qkv,
                w_o: up(take(src, &p("self_attn.o_proj.weight"), &[h, nq])?)?,
                ffn_norm: upf(take(src, &p("post_attention_layernorm.weight"), &[h])?)?,
                w_gate_up: up(w_gate_up)?,
                w_down: up(take(src, &p("mlp.down_proj.weight"), &[h, ffn])?)?,
            });
            progress(i + 1, cfg.num_layers);
        }
        let freq_factors = src.rope_freq_factors()?;
        if freq_factors.as_ref().is_some_and(|f| f.len() != hd / 2) {
            return Err(Error::Format(
                "rope_freqs.weight has the wrong length".into(),
            ));
        }
        Ok(Llama {
            cfg: cfg.clone(),
            rope: cfg.rope(),
            freq_factors,
            embed: up(embed_data)?,
            lm_head,
            norm: upf(take(src, "model.norm.weight", &[h])?)?,
            layers,
        })
    }

    fn inv_freq(&self, seq_len: usize) -> (Vec<f32>, f32) {
        let f = self.rope.freqs(seq_len);
        let mut inv = f.inv_freq;
        if let Some(ff) = &self.freq_factors {
            inv.iter_mut().zip(ff).for_each(|(i, d)| *i /= d);
        }
        (inv, f.attention_scaling)
    }
}

/// Per-step device metadata, built on the host from the page tables.
struct StepMeta<B: Backend> {
    ids: B::Buffer,
    positions: B::Buffer,
    slots: B::Buffer,
    inv_freq: B::Buffer,
    q_indptr: B::Buffer,
    page_indptr: B::Buffer,
    page_table: B::Buffer,
    kv_len: B::Buffer,
    head_indptr: B::Buffer,
    head_pages: B::Buffer,
    logit_rows: B::Buffer,
    n_tokens: usize,
    n_logits: usize,
    attention_scaling: f32,
    decode: bool,
}

impl<B: Backend> Llama<B> {
    fn step_meta(&self, be: &B, cache: &KvCache<B>, seqs: &[SeqStep]) -> Result<StepMeta<B>> {
        let ps = cache.shape.page_size;
        let (mut ids, mut positions, mut slots, mut logit_rows) = (vec![], vec![], vec![], vec![]);
        let (mut q_indptr, mut page_indptr, mut page_table, mut kv_len) =
            (vec![0u32], vec![0u32], vec![], vec![]);
        let (mut head_indptr, mut head_pages) = (vec![0u32], vec![]);
        let mut max_len = 0;
        for s in seqs {
            let (start, n) = (s.cache.len, s.tokens.len());
            if n == 0 || (start + n).div_ceil(ps) > s.cache.pages.len() {
                return Err(Error::InvalidArgument(
                    "a step sequence is empty or lacks reserved pages".into(),
                ));
            }
            if start + n > self.cfg.context_len() {
                return Err(Error::PromptTooLong {
                    tokens: start + n,
                    context: self.cfg.context_len(),
                });
            }
            let row0 = ids.len() as u32;
            ids.extend_from_slice(s.tokens);
            positions.extend((start..start + n).map(|p| p as u32));
            slots.extend(cache.slots(s.cache, start, n));
            match s.logits {
                Logits::None => {}
                Logits::Last => logit_rows.push(row0 + n as u32 - 1),
                Logits::All => logit_rows.extend(row0..row0 + n as u32),
            }
            q_indptr.push(ids.len() as u32);
            let n_pages = (start + n).div_ceil(ps);
            page_table.extend_from_slice(&s.cache.pages[..n_pages]);
            page_indptr.push(page_table.len() as u32);
            kv_len.push((start + n) as u32);
            for _ in 0..self.cfg.num_kv_heads {
                head_pages.extend(0..n_pages as u32);
                head_indptr.push(head_pages.len() as u32);
            }
            max_len = max_len.max(start + n);
        }
        if let Some(bad) = ids.iter().find(|&&t| t as usize >= self.cfg.vocab_size) {
            return Err(Error::InvalidArgument(format!(
                "token id {bad} is outside the vocabulary"
            )));
        }
        let (inv, attention_scaling) = self.inv_freq(max_len);
        let up = |v: &[u32]| be.upload_u32(if v.is_empty() { &[0] } else { v });
        Ok(StepMeta {
            n_tokens: ids.len(),
            n_logits: logit_rows.len(),
            decode: seqs.iter().all(|s| s.tokens.len() == 1),
            ids: up(&ids)?,
            positions: up(&positions)?,
            slots: up(&slots)?,
            inv_freq: be.upload_f32(DType::F32, inv)?,
            q_indptr: up(&q_indptr)?,
            page_indptr: up(&page_indptr)?,
            page_table: up(&page_table)?,
            kv_len: up(&kv_len)?,
            head_indptr: up(&head_indptr)?,
            head_pages: up(&head_pages)?,
            logit_rows: up(&logit_rows)?,
            attention_scaling,
        })
    }

    /// Run one step: append the new tokens of every sequence to the cache and return the logits
    /// of the requested rows, `[rows][vocab]` in step order. The caller then advances each
    /// sequence's `len` by its token count.
    pub fn forward(&self, be: &B, cache: &mut KvCache<B>, seqs: &[SeqStep]) -> Result<Vec<f32>> {
        let c = &self.cfg;
        let m = self.step_meta(be, cache, seqs)?;
        let (n, h, hd) = (m.n_tokens, c.hidden_size, c.head_dim);
        let (nq, ffn) = (c.num_heads * hd, c.intermediate_size);
        let a = |len: usize| be.alloc(DType::F32, len.max(1));
        let (mut x, mut xn, mut qkv, mut q) =
            (a(n * h)?, a(n * h)?, a(n * c.qkv_dim())?, a(n * nq)?);
        let (mut attn, mut o, mut gu, mut act) =
            (a(n * nq)?, a(n * h)?, a(n * 2 * ffn)?, a(n * ffn)?);
        let norm = RmsnormParams {
            rows: n as u32,
            dim: h as u32,
            eps: c.rms_norm_eps,
            _pad: 0,
        };
        let mm = |m: usize, n: usize, k: usize, bias: bool| MatmulParams {
            m: m as u32,
            n: n as u32,
            k: k as u32,
            has_bias: bias as u32,
        };
        let ep = EmbedParams {
            n_tokens: n as u32,
            dim: h as u32,
            vocab: c.vocab_size as u32,
            _pad: 0,
        };
        be.embed(&ep, &self.embed, &m.ids, &mut x)?;
        let shape = cache.shape;
        let rp = RopeAppendKvParams {
            n_tokens: n as u32,
            n_heads: c.num_heads as u32,
            n_kv_heads: c.num_kv_heads as u32,
            head_dim: hd as u32,
            page_size: shape.page_size as u32,
            num_pages: shape.num_pages as u32,
            attention_scaling: m.attention_scaling,
            _pad: 0,
        };
        let ap = AttentionParams {
            num_seqs: seqs.len() as u32,
            n_tokens: n as u32,
            n_heads: c.num_heads as u32,
            n_kv_heads: c.num_kv_heads as u32,
            head_dim: hd as u32,
            page_size: shape.page_size as u32,
            num_pages: shape.num_pages as u32,
            scale: 1.0 / (hd as f32).sqrt(),
            window: c.sliding_window.unwrap_or(0) as u32,
            ..Default::default()
        };
        let paged = PagedMeta {
            page_indptr: &m.page_indptr,
            page_table: &m.page_table,
            kv_len: &m.kv_len,
        };
        let rmeta = RopeAppendMeta {
            positions: &m.positions,
            slots: &m.slots,
            inv_freq: &m.inv_freq,
        };
        for (i, l) in self.layers.iter().enumerate() {
            if i == 0 {
                be.rmsnorm(&norm, &x, &l.attn_norm, &mut xn)?;
            } else {
                be.add_rmsnorm(&norm, &mut x, &o, &l.attn_norm, &mut xn)?;
            }
            be.matmul(
                &mm(n, c.qkv_dim(), h, l.b_qkv.is_some()),
                &xn,
                &l.w_qkv,
                l.b_qkv.as_ref(),
                &mut qkv,
            )?;
            let (kp, vp) = &mut cache.layers[i];
            be.rope_append_kv(&rp, &qkv, &rmeta, &mut q, KvPoolsMut { k: kp, v: vp })?;
            let pools = KvPools { k: &*kp, v: &*vp };
            if m.decode {
                let hp = HeadPages {
                    head_indptr: &m.head_indptr,
                    head_pages: &m.head_pages,
                };
                be.sparse_decode_attention(&ap, &q, pools, &paged, &hp, &mut attn)?;
            } else {
                be.prefill_attention(&ap, &q, &m.q_indptr, pools, &paged, &mut attn)?;
            }
            be.matmul(&mm(n, h, nq, false), &attn, &l.w_o, None, &mut o)?;
            be.add_rmsnorm(&norm, &mut x, &o, &l.ffn_norm, &mut xn)?;
            be.matmul(&mm(n, 2 * ffn, h, false), &xn, &l.w_gate_up, None, &mut gu)?;
            be.silu_mul(
                &SiluMulParams {
                    rows: n as u32,
                    dim: ffn as u32,
                    ..Default::default()
                },
                &gu,
                &mut act,
            )?;
            be.matmul(&mm(n, h, ffn, false), &act, &l.w_down, None, &mut o)?;
        }
        if m.n_logits == 0 {
            return Ok(vec![]);
        }
        be.add_rmsnorm(&norm, &mut x, &o, &self.norm, &mut xn)?;
        let nl = m.n_logits;
        let mut sel = a(nl * h)?;
        let gp = GatherRowsParams {
            n_out: nl as u32,
            dim: h as u32,
            n_src: n as u32,
            _pad: 0,
        };
        be.gather_rows(&gp, &xn, &m.logit_rows, &mut sel)?;
        let mut logits = a(nl * c.vocab_size)?;
        let head = self.lm_head.as_ref().unwrap_or(&self.embed);
        be.matmul(
            &mm(nl, c.vocab_size, h, false),
            &sel,
            head,
            None,
            &mut logits,
        )?;
        be.download_f32(&logits, 0, nl * c.vocab_size)
    }
}
