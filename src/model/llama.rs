//! The Llama-family forward pass (Llama 2/3, Mistral, Qwen2, SmolLM), written once against the
//! [`Backend`] trait. It reads top to bottom: embed, then per layer
//! `rmsnorm -> qkv -> rope_append_kv -> attention -> o_proj -> add_rmsnorm -> gate_up -> silu_mul
//! -> down`, then the final norm and the LM head on the rows whose logits are wanted.
//!
//! Weights are fused at load: q|k|v into one `[qkv_dim][hidden]` matrix (and bias), gate|up into one
//! `[2*ffn][hidden]` matrix, so a decode step is four matmuls per layer. A step is a ragged batch of
//! sequences, each contributing a chunk of new tokens at the end of its cached context; a step
//! where every sequence brings exactly one token runs the decode attention op.

pub use super::batch::{AttnSettings, LayerHook, Logits, SeqStep};
use super::batch::{GraphRegion, Head};
use super::pool::BufferPool;
use super::step::StepMeta;
pub use super::weights::WeightSource;
use crate::backend::*;
use crate::error::{Error, Result};
use crate::kv::KvCache;
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
    /// Activation and step-metadata buffers reused across steps.
    pool: BufferPool<B>,
    /// Gemma 3 (`cfg.arch == "gemma3"`): the whole model lives here and every call is forwarded
    /// to it; the Llama fields above are then empty placeholders.
    gemma: Option<Box<super::gemma3::Gemma3<B>>>,
}

fn take<S: WeightSource + ?Sized>(src: &S, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
    let (data, got) = src.get(name)?.ok_or_else(|| Error::Format(format!("weight `{name}` is missing")))?;
    // The exact shape, not just the element count: a transposed weight must not load.
    if got != shape || data.len() != shape.iter().product::<usize>() {
        return Err(Error::Format(format!("weight `{name}` has shape {got:?}, expected {shape:?}")));
    }
    Ok(data)
}

impl<B: Backend> Llama<B> {
    /// Read, fuse and upload all weights. `progress` is called after each layer.
    pub fn load<S: WeightSource + ?Sized>(
        be: &B,
        cfg: &ModelConfig,
        src: &S,
        progress: impl FnMut(usize, usize),
    ) -> Result<Self> {
        Self::load_as(be, cfg, src, None, progress)
    }

    /// As `load`, storing weights as `dtype` (None: the backend's first choice).
    pub fn load_as<S: WeightSource + ?Sized>(
        be: &B,
        cfg: &ModelConfig,
        src: &S,
        dtype: Option<DType>,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<Self> {
        let (h, hd) = (cfg.hidden_size, cfg.head_dim);
        let dt = dtype.unwrap_or(be.caps().weight_dtypes[0]);
        if !be.caps().weight_dtypes.contains(&dt) {
            return Err(Error::InvalidArgument(format!(
                "{dt:?} weights are not supported by the {} backend (supported: {:?})",
                be.caps().name,
                be.caps().weight_dtypes
            )));
        }
        if cfg.arch == "gemma3" {
            let g = super::gemma3::Gemma3::load(be, cfg, src, dt, progress)?;
            return Ok(Llama {
                cfg: cfg.clone(),
                rope: cfg.rope(),
                freq_factors: None,
                embed: be.alloc(DType::F32, 1)?,
                lm_head: None,
                norm: be.alloc(DType::F32, 1)?,
                layers: vec![],
                pool: BufferPool::default(),
                gemma: Some(Box::new(g)),
            });
        }
        let up = |v: Vec<f32>| be.upload_f32(dt, v);
        let upf = |v: Vec<f32>| be.upload_f32(DType::F32, v);
        let embed_data = take(src, "model.embed_tokens.weight", &[cfg.vocab_size, h])?;
        let lm_head = match src.get("lm_head.weight")? {
            Some(_) if !cfg.tie_word_embeddings => Some(up(take(src, "lm_head.weight", &[cfg.vocab_size, h])?)?),
            None if !cfg.tie_word_embeddings => {
                return Err(Error::Format("weight `lm_head.weight` is missing".into()));
            }
            _ => None,
        };
        let mut layers = Vec::with_capacity(cfg.num_layers);
        for i in 0..cfg.num_layers {
            layers.push(Self::load_layer(be, cfg, src, i, dt)?);
            progress(i + 1, cfg.num_layers);
        }
        let freq_factors = src.rope_freq_factors()?;
        if freq_factors.as_ref().is_some_and(|f| f.len() != hd / 2) {
            return Err(Error::Format("rope_freqs.weight has the wrong length".into()));
        }
        Ok(Llama {
            cfg: cfg.clone(),
            rope: cfg.rope(),
            freq_factors,
            embed: up(embed_data)?,
            lm_head,
            norm: upf(take(src, "model.norm.weight", &[h])?)?,
            layers,
            pool: BufferPool::default(),
            gemma: None,
        })
    }

    /// Layer `i`'s weights, fused (q/k/v into one matrix, gate/up into one) and uploaded.
    fn load_layer<S: WeightSource + ?Sized>(
        be: &B,
        cfg: &ModelConfig,
        src: &S,
        i: usize,
        dt: DType,
    ) -> Result<Layer<B>> {
        let (h, hd, ffn) = (cfg.hidden_size, cfg.head_dim, cfg.intermediate_size);
        let up = |v: Vec<f32>| be.upload_f32(dt, v);
        let upf = |v: Vec<f32>| be.upload_f32(DType::F32, v);
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
        Ok(Layer {
            attn_norm: upf(take(src, &p("input_layernorm.weight"), &[h])?)?,
            w_qkv: up(w_qkv)?,
            b_qkv,
            w_o: up(take(src, &p("self_attn.o_proj.weight"), &[h, nq])?)?,
            ffn_norm: upf(take(src, &p("post_attention_layernorm.weight"), &[h])?)?,
            w_gate_up: up(w_gate_up)?,
            w_down: up(take(src, &p("mlp.down_proj.weight"), &[h, ffn])?)?,
        })
    }

    /// Synthetic weights for benchmarks: every tensor filled on the device by `fill_random` from
    /// `seed` (no download, no host copy). Matrices are uniform with variance 1/fan_in, norms
    /// near 1, so activations stay finite through the layers.
    pub fn synthetic(be: &B, cfg: &ModelConfig, dtype: Option<DType>, seed: u32) -> Result<Self> {
        if cfg.gemma.is_some() {
            return Err(Error::InvalidArgument("synthetic weights are made for Llama-family shapes only".into()));
        }
        let dt = dtype.unwrap_or(be.caps().weight_dtypes[0]);
        let code = match dt {
            DType::F32 => 0,
            DType::F16 => 1,
            DType::BF16 => 2,
            d => return Err(Error::InvalidArgument(format!("synthetic weights cannot be {d:?}"))),
        };
        let mut next = seed;
        let mut fill = |dtype: DType, code: u32, n: usize, scale: f32, offset: f32| -> Result<B::Buffer> {
            let mut b = be.alloc(dtype, n)?;
            next = next.wrapping_add(1);
            let p = FillRandomParams { n: n as u32, seed: next, scale, offset, dtype: code, ..Default::default() };
            be.fill_random(&p, &mut b)?;
            Ok(b)
        };
        let (h, hd, ffn) = (cfg.hidden_size, cfg.head_dim, cfg.intermediate_size);
        let mat = |k: usize| (3.0 / k as f32).sqrt();
        let embed = fill(dt, code, cfg.vocab_size * h, 1.0, 0.0)?;
        let lm_head =
            if cfg.tie_word_embeddings { None } else { Some(fill(dt, code, cfg.vocab_size * h, mat(h), 0.0)?) };
        let norm = fill(DType::F32, 0, h, 0.1, 1.0)?;
        let mut layers = Vec::with_capacity(cfg.num_layers);
        for _ in 0..cfg.num_layers {
            layers.push(Layer {
                attn_norm: fill(DType::F32, 0, h, 0.1, 1.0)?,
                w_qkv: fill(dt, code, cfg.qkv_dim() * h, mat(h), 0.0)?,
                b_qkv: if cfg.attention_bias { Some(fill(DType::F32, 0, cfg.qkv_dim(), 0.1, 0.0)?) } else { None },
                w_o: fill(dt, code, h * cfg.num_heads * hd, mat(cfg.num_heads * hd), 0.0)?,
                ffn_norm: fill(DType::F32, 0, h, 0.1, 1.0)?,
                w_gate_up: fill(dt, code, 2 * ffn * h, mat(h), 0.0)?,
                w_down: fill(dt, code, h * ffn, mat(ffn), 0.0)?,
            });
        }
        Ok(Llama {
            cfg: cfg.clone(),
            rope: cfg.rope(),
            freq_factors: None,
            embed,
            lm_head,
            norm,
            layers,
            pool: BufferPool::default(),
            gemma: None,
        })
    }

    /// Bytes of all weights as stored (what a decode step streams at least once).
    pub fn weight_bytes(&self, be: &B) -> usize {
        if let Some(g) = &self.gemma {
            return g.weight_bytes(be);
        }
        let size = |b: &B::Buffer| {
            let d = be.dtype(b);
            be.len(b) * d.size()
        };
        let mut total = size(&self.embed) + self.lm_head.as_ref().map_or(0, size) + size(&self.norm);
        for l in &self.layers {
            total += size(&l.attn_norm) + size(&l.w_qkv) + l.b_qkv.as_ref().map_or(0, size);
            total += size(&l.w_o) + size(&l.ffn_norm) + size(&l.w_gate_up) + size(&l.w_down);
        }
        total
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

impl<B: Backend> Llama<B> {
    /// Run one step: append the new tokens of every sequence to the cache and return the logits
    /// of the requested rows, `[rows][vocab]` in step order. The caller then advances each
    /// sequence's `len` by its token count.
    pub fn forward(
        &self,
        be: &B,
        cache: &mut KvCache<B>,
        attn: &AttnSettings,
        seqs: &[SeqStep],
        hook: Option<LayerHook<B>>,
    ) -> Result<Vec<f32>> {
        Ok(self.forward_inner(be, cache, attn, seqs, hook, Head::Logits)?.0)
    }

    /// As `forward`, but the argmax of each requested row is taken on the device and only the
    /// token ids come back (greedy decoding without reading the logits).
    pub fn forward_argmax(
        &self,
        be: &B,
        cache: &mut KvCache<B>,
        attn: &AttnSettings,
        seqs: &[SeqStep],
    ) -> Result<Vec<u32>> {
        Ok(self.forward_inner(be, cache, attn, seqs, None, Head::Argmax)?.1)
    }

    /// As `forward`, but each requested row is sampled on the device (the `sample` op) with its
    /// settings `[rows][4]` (`RowSampling::words`, one per requested row in step order; greedy
    /// rows are argmax), and only the token ids come back (`NO_TOKEN` for a row without finite
    /// logits).
    pub fn forward_sample(
        &self,
        be: &B,
        cache: &mut KvCache<B>,
        attn: &AttnSettings,
        seqs: &[SeqStep],
        settings: &[[u32; 4]],
    ) -> Result<Vec<u32>> {
        Ok(self.forward_inner(be, cache, attn, seqs, None, Head::Sample(settings))?.1)
    }

    /// One step of every layer, in the model's op order. Long (about 110 lines) on purpose: the
    /// body is the model itself, one op after another over activation buffers shared by every
    /// layer and held inside one graph region, and reads top to bottom like the architecture;
    /// split per layer it would pass a dozen buffers around for nothing.
    fn forward_inner(
        &self,
        be: &B,
        cache: &mut KvCache<B>,
        attn: &AttnSettings,
        seqs: &[SeqStep],
        mut hook: Option<LayerHook<B>>,
        want: Head,
    ) -> Result<(Vec<f32>, Vec<u32>)> {
        if let Some(g) = &self.gemma {
            return g.forward_inner(be, cache, attn, seqs, hook, want);
        }
        let t_record = std::time::Instant::now();
        let c = &self.cfg;
        let (inv, attention_scaling) =
            self.inv_freq(seqs.iter().map(|s| s.cache.len + s.tokens.len()).max().unwrap_or(0));
        let pool = &self.pool;
        let m = StepMeta::build(be, pool, cache, seqs, c, inv)?;
        let (n, h, hd) = (m.n_tokens, c.hidden_size, c.head_dim);
        let (nq, ffn) = (c.num_heads * hd, c.intermediate_size);
        let a = |len: usize| pool.take(be, DType::F32, len);
        let (mut x, mut xn, mut qkv, mut q) = (a(n * h)?, a(n * h)?, a(n * c.qkv_dim())?, a(n * nq)?);
        let (mut attn_out, mut o, mut gu, mut act) = (a(n * nq)?, a(n * h)?, a(n * 2 * ffn)?, a(n * ffn)?);
        let norm = RmsnormParams { rows: n as u32, dim: h as u32, eps: c.rms_norm_eps, _pad: 0 };
        let mm = MatmulParams::new;
        let ep = EmbedParams { n_tokens: n as u32, dim: h as u32, vocab: c.vocab_size as u32, _pad: 0 };
        // Sampling settings go up before the graph region: a write inside it would cut the
        // step's recorded launches in two.
        let settings = match want {
            Head::Sample(s) if m.n_logits > 0 => Some(self.upload_settings(be, s, m.n_logits)?),
            _ => None,
        };
        // A decode step's launches are the same every step (all that changes lives in StepMeta's
        // buffers), so the backend may replay them as one graph; prefill shapes vary.
        let region = GraphRegion::begin(be, m.decode && hook.is_none());
        be.embed(&ep, &self.embed, &m.ids, &mut x)?;
        let paged = m.paged();
        let rmeta = m.rope_meta();
        for (i, l) in self.layers.iter().enumerate() {
            if i == 0 {
                be.rmsnorm(&norm, &x, &l.attn_norm, &mut xn)?;
            } else {
                be.add_rmsnorm(&norm, &mut x, &o, &l.attn_norm, &mut xn)?;
            }
            be.matmul(&mm(n, c.qkv_dim(), h, l.b_qkv.is_some()), &xn, &l.w_qkv, l.b_qkv.as_ref(), &mut qkv)?;
            let rp = m.rope_params(cache, i, attention_scaling);
            be.rope_append_kv(&rp, &qkv, &rmeta, &mut q, cache.layers[i].view_mut())?;
            let ap = m.attention_params(cache, i, attn);
            let sp = m.select_params(cache, &ap, attn.k_pages);
            let store = &mut cache.layers[i];
            if m.decode {
                let select = !attn.dense_layer[i] && m.any_select && ap.n_ret > 0;
                if select {
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
            } else {
                be.prefill_attention(&ap, &q, &m.q_indptr, store.view(), &paged, &mut attn_out)?;
            }
            if let Some(hook) = hook.as_mut() {
                hook(be, i, &q, store.view(), &paged)?;
            }
            be.matmul(&mm(n, h, nq, false), &attn_out, &l.w_o, None, &mut o)?;
            be.add_rmsnorm(&norm, &mut x, &o, &l.ffn_norm, &mut xn)?;
            be.matmul(&mm(n, 2 * ffn, h, false), &xn, &l.w_gate_up, None, &mut gu)?;
            be.silu_mul(&SiluMulParams { rows: n as u32, dim: ffn as u32, ..Default::default() }, &gu, &mut act)?;
            be.matmul(&mm(n, h, ffn, false), &act, &l.w_down, None, &mut o)?;
        }
        let nl = m.n_logits;
        tracing::trace!(record_us = t_record.elapsed().as_micros() as u64, "step recorded");
        let (mut out, mut ids) = (vec![], vec![]);
        if nl > 0 {
            be.add_rmsnorm(&norm, &mut x, &o, &self.norm, &mut xn)?;
            let mut sel = a(nl * h)?;
            let gp = GatherRowsParams { n_out: nl as u32, dim: h as u32, n_src: n as u32, _pad: 0 };
            be.gather_rows(&gp, &xn, &m.logit_rows, &mut sel)?;
            let mut logits = a(nl * c.vocab_size)?;
            let head = self.lm_head.as_ref().unwrap_or(&self.embed);
            be.matmul(&mm(nl, c.vocab_size, h, false), &sel, head, None, &mut logits)?;
            match want {
                Head::Logits => out = be.download_f32(&logits, 0, nl * c.vocab_size)?,
                Head::Argmax => {
                    let mut best = pool.take(be, DType::U32, nl)?;
                    let ap = ArgmaxParams { rows: nl as u32, n: c.vocab_size as u32, ..Default::default() };
                    be.argmax(&ap, &logits, &mut best)?;
                    ids = be.download_u32(&best, 0, nl)?;
                    pool.put(best);
                }
                Head::Sample(_) => {
                    let set = settings.as_ref().expect("uploaded above for Head::Sample");
                    ids = self.sample_rows(be, &logits, set, nl)?;
                }
            }
            pool.put(sel);
            pool.put(logits);
        }
        region.finish()?;
        [x, xn, qkv, q, attn_out, o, gu, act].into_iter().chain(settings).for_each(|b| pool.put(b));
        m.recycle(pool);
        Ok((out, ids))
    }

    /// The `[rows][4]` sampling settings of a step with `nl` logits rows, on the device.
    fn upload_settings(&self, be: &B, settings: &[[u32; 4]], nl: usize) -> Result<B::Buffer> {
        if settings.len() != nl {
            return Err(Error::InvalidArgument(format!(
                "sampling settings for {} rows, the step has {nl} logits rows",
                settings.len()
            )));
        }
        let words: Vec<u32> = settings.iter().flatten().copied().collect();
        self.pool.upload_u32(be, &words)
    }

    /// The `sample` op over `nl` rows of logits with the uploaded settings; downloads only the ids.
    fn sample_rows(&self, be: &B, logits: &B::Buffer, settings: &B::Buffer, nl: usize) -> Result<Vec<u32>> {
        let mut ids = self.pool.take(be, DType::U32, nl)?;
        let sp = SampleParams { rows: nl as u32, n: self.cfg.vocab_size as u32, ..Default::default() };
        let r = be.sample(&sp, logits, settings, &mut ids).and_then(|_| be.download_u32(&ids, 0, nl));
        self.pool.put(ids);
        r
    }
}
