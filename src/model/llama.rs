//! The Llama-family forward pass (Llama 2/3, Mistral, Qwen2, SmolLM), written once against the
//! [`Backend`] trait. It reads top to bottom: embed, then per layer
//! `rmsnorm -> qkv -> rope_append_kv -> attention -> o_proj -> add_rmsnorm -> gate_up -> silu_mul
//! -> down`, then the final norm and the LM head on the rows whose logits are wanted. Where the
//! backend folds the residual add into o_proj and down (`Backend::matmul_accumulates`: CUDA's
//! cuBLAS GEMMs and batch-1 GEMVs, wgpu's batch-1 GEMVs), those two accumulate into the residual stream and each
//! add_rmsnorm is an rmsnorm; where it also folds the norms and silu_mul into the matmuls after
//! them (`Backend::matmul_prologue`: CUDA's batch-1 GEMVs) a layer is qkv(norm) -> rope_append_kv
//! -> attention -> o_proj (+= x) -> gate_up(norm) -> down(silu_mul) (+= x). Where it makes qkv
//! and rope_append_kv one kernel (`Backend::matmul_rope_append_kv`: wgpu's batch-1 GEMV into
//! 16-bit pools) the model calls that instead of the two, and likewise gate_up and silu_mul
//! (`Backend::matmul_silu_mul`: wgpu's batch-1 GEMV into x8 digits).
//!
//! Weights are fused at load: q|k|v into one `[qkv_dim][hidden]` matrix (and bias), gate|up into one
//! `[2*ffn][hidden]` matrix, so a decode step is four matmuls per layer (more where a file's
//! parts have different quantized types: `model::linear`, docs/weights.md). A step is a ragged batch of
//! sequences, each contributing a chunk of new tokens at the end of its cached context; a step
//! where every sequence brings exactly one token runs the decode attention op.

pub use super::batch::{AttnSettings, LayerHook, Logits, SeqStep};
use super::batch::{GraphRegion, Head};
use super::blocks::PrefillBlocks;
use super::linear::{Linear, WeightLoader};
use super::mix::{Tensor, WeightMix};
use super::pool::BufferPool;
use super::shard::{ShardSpec, ShardedSource, shard_config};
use super::step::StepMeta;
pub use super::weights::{LoadOptions, WeightMode, WeightSource};
use crate::backend::collective::Collective;
use crate::backend::reference::weight_quant;
use crate::backend::*;
use crate::error::{Error, Result};
use crate::kv::KvCache;
use crate::model::config::ModelConfig;
use crate::model::rope::RopeConfig;

struct Layer<B: Backend> {
    attn_norm: B::Buffer,
    /// q|k|v (and their bias), `[qkv_dim][hidden]`.
    w_qkv: Linear<B>,
    w_o: Linear<B>,
    ffn_norm: B::Buffer,
    /// gate|up, `[2*ffn][hidden]`.
    w_gate_up: Linear<B>,
    w_down: Linear<B>,
}

pub struct Llama<B: Backend> {
    pub cfg: ModelConfig,
    rope: RopeConfig,
    /// Llama 3.1 GGUF frequency divisors (applied on top of `rope`).
    freq_factors: Option<Vec<f32>>,
    embed: B::Buffer,
    /// None when the embeddings are tied (the LM head is then `embed`, of whatever type it has).
    lm_head: Option<Linear<B>>,
    norm: B::Buffer,
    layers: Vec<Layer<B>>,
    /// Activation and step-metadata buffers reused across steps.
    pool: BufferPool<B>,
    /// Gemma 3 (`cfg.arch == "gemma3"`): the whole model lives here and every call is forwarded
    /// to it; the Llama fields above are then empty placeholders.
    gemma: Option<Box<super::gemma3::Gemma3<B>>>,
    /// Tensor parallelism: this model is one rank's shard (model::shard); None: the whole model.
    tp: Option<Tp<B>>,
}

/// One tensor-parallel rank's view: its group and its shard's shapes.
struct Tp<B: Backend> {
    comm: Box<dyn Collective<B>>,
    /// The shard's shapes (`shard_config`): heads, KV heads, FFN width and vocabulary divided.
    /// `Llama::cfg` stays the whole model's.
    local: ModelConfig,
}

impl<B: Backend> Llama<B> {
    /// Read, fuse and upload all weights, keeping the file's quantized matrices quantized where
    /// the backend computes with their type (`LoadOptions::default()`). `progress` is called
    /// after each layer.
    pub fn load<S: WeightSource + ?Sized>(
        be: &B,
        cfg: &ModelConfig,
        src: &S,
        progress: impl FnMut(usize, usize),
    ) -> Result<Self> {
        Self::load_with(be, cfg, src, &LoadOptions::default(), progress)
    }

    /// As `load` with `Some(dtype)`: every matrix dequantized and stored as `dtype` (a float
    /// type); None is `load`.
    pub fn load_as<S: WeightSource + ?Sized>(
        be: &B,
        cfg: &ModelConfig,
        src: &S,
        dtype: Option<DType>,
        progress: impl FnMut(usize, usize),
    ) -> Result<Self> {
        let opts = if dtype.is_some() { LoadOptions::dequant(dtype) } else { LoadOptions::default() };
        Self::load_with(be, cfg, src, &opts, progress)
    }

    /// Read, fuse and upload all weights as `opts` says (docs/weights.md).
    pub fn load_with<S: WeightSource + ?Sized>(
        be: &B,
        cfg: &ModelConfig,
        src: &S,
        opts: &LoadOptions,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<Self> {
        let (h, hd) = (cfg.hidden_size, cfg.head_dim);
        let ld = WeightLoader::new(be, src, *opts)?;
        if cfg.arch == "gemma3" {
            let g = super::gemma3::Gemma3::load(be, cfg, &ld, progress)?;
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
                tp: None,
            });
        }
        let embed = ld.table("model.embed_tokens.weight", cfg.vocab_size, h)?;
        let lm_head = match src.shape("lm_head.weight")? {
            Some(_) if !cfg.tie_word_embeddings => Some(ld.linear(&[("lm_head.weight", cfg.vocab_size)], h, None)?),
            None if !cfg.tie_word_embeddings => {
                return Err(Error::Format("weight `lm_head.weight` is missing".into()));
            }
            _ => None,
        };
        let mut layers = Vec::with_capacity(cfg.num_layers);
        for i in 0..cfg.num_layers {
            layers.push(Self::load_layer(cfg, &ld, i)?);
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
            embed,
            lm_head,
            norm: ld.vector("model.norm.weight", h)?,
            layers,
            pool: BufferPool::default(),
            gemma: None,
            tp: None,
        })
    }

    /// Rank `comm.rank()` of `comm.size()`'s shard of the model (model::shard), loaded as
    /// `load_with` loads a whole one; its forward passes meet the other ranks' in `comm`.
    pub fn load_shard<S: WeightSource + ?Sized>(
        be: &B,
        cfg: &ModelConfig,
        src: &S,
        opts: &LoadOptions,
        comm: Box<dyn Collective<B>>,
        progress: impl FnMut(usize, usize),
    ) -> Result<Self> {
        let spec = ShardSpec { rank: comm.rank(), size: comm.size() };
        let local = shard_config(cfg, spec.size)?;
        let model = Self::load_with(be, &local, &ShardedSource { inner: src, spec }, opts, progress)?;
        Ok(model.into_shard(cfg, local, comm))
    }

    /// A rank's shard of synthetic weights: the shard's shapes filled from `seed` and the rank
    /// (random values either way; a sharded and a whole synthetic model differ).
    pub fn synthetic_shard(
        be: &B,
        cfg: &ModelConfig,
        weights: impl Into<WeightMix>,
        seed: u32,
        comm: Box<dyn Collective<B>>,
    ) -> Result<Self> {
        let local = shard_config(cfg, comm.size())?;
        let model =
            Self::synthetic(be, &local, weights, seed.wrapping_add(0x9e37_79b9u32.wrapping_mul(comm.rank() as u32)))?;
        Ok(model.into_shard(cfg, local, comm))
    }

    fn into_shard(mut self, cfg: &ModelConfig, local: ModelConfig, comm: Box<dyn Collective<B>>) -> Self {
        self.cfg = cfg.clone();
        self.tp = Some(Tp { comm, local });
        self
    }

    /// This model's shapes: the shard's under tensor parallelism, else the whole model's.
    pub fn shard_cfg(&self) -> &ModelConfig {
        self.tp.as_ref().map_or(&self.cfg, |t| &t.local)
    }

    /// (rank, size) of tensor parallelism; (0, 1) for a whole model.
    pub fn tp_rank(&self) -> (usize, usize) {
        self.tp.as_ref().map_or((0, 1), |t| (t.comm.rank(), t.comm.size()))
    }

    /// The collective of a sharded model (None for a whole one).
    pub fn collective(&self) -> Option<&dyn Collective<B>> {
        self.tp.as_ref().map(|t| t.comm.as_ref())
    }

    /// Sum a partial result over the ranks (nothing for a whole model).
    fn all_reduce(&self, be: &B, buf: &mut B::Buffer, len: usize) -> Result<()> {
        match &self.tp {
            Some(t) => t.comm.all_reduce_sum(be, buf, len),
            None => Ok(()),
        }
    }

    /// Layer `i`'s weights, fused (q/k/v into one matrix, gate/up into one) and uploaded.
    fn load_layer<S: WeightSource + ?Sized>(cfg: &ModelConfig, ld: &WeightLoader<B, S>, i: usize) -> Result<Layer<B>> {
        let (h, hd, ffn) = (cfg.hidden_size, cfg.head_dim, cfg.intermediate_size);
        let p = |s: &str| format!("model.layers.{i}.{s}");
        let (nq, nkv) = (cfg.num_heads * hd, cfg.num_kv_heads * hd);
        let (q, k, v) = (p("self_attn.q_proj.weight"), p("self_attn.k_proj.weight"), p("self_attn.v_proj.weight"));
        let biases = [p("self_attn.q_proj.bias"), p("self_attn.k_proj.bias"), p("self_attn.v_proj.bias")];
        let biases: Vec<&str> = biases.iter().map(String::as_str).collect();
        let bias = cfg.attention_bias.then_some(biases.as_slice());
        let (gate, up) = (p("mlp.gate_proj.weight"), p("mlp.up_proj.weight"));
        Ok(Layer {
            attn_norm: ld.vector(&p("input_layernorm.weight"), h)?,
            w_qkv: ld.linear(&[(&q, nq), (&k, nkv), (&v, nkv)], h, bias)?,
            w_o: ld.linear(&[(&p("self_attn.o_proj.weight"), h)], nq, None)?,
            ffn_norm: ld.vector(&p("post_attention_layernorm.weight"), h)?,
            w_gate_up: ld.linear(&[(&gate, ffn), (&up, ffn)], h, None)?,
            w_down: ld.linear(&[(&p("mlp.down_proj.weight"), h)], ffn, None)?,
        })
    }

    /// Synthetic weights for benchmarks. Float types: every tensor filled on the device by
    /// `fill_random` from `seed` (no download, no host copy); matrices uniform with variance
    /// 1/fan_in, norms near 1, so activations stay finite through the layers. A quantized weight
    /// type (`DType::is_weight_quant`: q4_k, q8_0, int8, ...): every matrix, the embedding table
    /// included, is `weight_quant::random_weights` of that type made on the host and uploaded
    /// as it is (k must be a whole number of the type's blocks).
    pub fn synthetic(be: &B, cfg: &ModelConfig, weights: impl Into<WeightMix>, seed: u32) -> Result<Self> {
        if cfg.gemma.is_some() {
            return Err(Error::InvalidArgument("synthetic weights are made for Llama-family shapes only".into()));
        }
        let mix = weights.into();
        let auto = be.caps().weight_dtypes[0];
        for dt in mix.types(auto) {
            if !be.caps().weight_dtypes.contains(&dt) {
                return Err(Error::InvalidArgument(format!(
                    "{} weights are not supported by the {} backend",
                    dt.weight_name(),
                    be.caps().name
                )));
            }
            if !(dt.is_weight_quant() || matches!(dt, DType::F32 | DType::F16 | DType::BF16)) {
                return Err(Error::InvalidArgument(format!("synthetic weights cannot be {dt:?}")));
            }
        }
        let mut next = seed;
        let mut fill = |dtype: DType, n: usize, k: usize, scale: f32, offset: f32| -> Result<B::Buffer> {
            next = next.wrapping_add(1);
            if dtype.is_weight_quant() {
                let bytes = weight_quant::random_weights(dtype, n, k, next as u64).ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "synthetic {} weights: a row of {k} is not a whole number of its blocks",
                        dtype.weight_name()
                    ))
                })?;
                return be.upload_weight(dtype, n, k, &bytes);
            }
            let code = match dtype {
                DType::F16 => 1,
                DType::BF16 => 2,
                _ => 0,
            };
            let mut b = be.alloc(dtype, n * k)?;
            let p =
                FillRandomParams { n: (n * k) as u32, seed: next, scale, offset, dtype: code, ..Default::default() };
            be.fill_random(&p, &mut b)?;
            Ok(b)
        };
        let (h, hd, ffn, v) = (cfg.hidden_size, cfg.head_dim, cfg.intermediate_size, cfg.vocab_size);
        let (nq, nkv, qkv, nl) = (cfg.num_heads * hd, cfg.num_kv_heads * hd, cfg.qkv_dim(), cfg.num_layers);
        let ty = |t: Tensor, layer: usize| mix.matrix(auto, t, layer, nl);
        let mat = |k: usize| (3.0 / k as f32).sqrt();
        let tied = cfg.tie_word_embeddings;
        let embed = fill(ty(if tied { Tensor::Output } else { Tensor::Embed }, 0), v, h, 1.0, 0.0)?;
        let lm_head =
            if tied { None } else { Some(Linear::single(fill(ty(Tensor::Output, 0), v, h, mat(h), 0.0)?, None, v, h)) };
        let norm = fill(DType::F32, 1, h, 0.1, 1.0)?;
        let mut layers = Vec::with_capacity(nl);
        for i in 0..nl {
            // q | k | v as one part, or two where v is stored in another type (Q4_K_M).
            let (tq, tv) = (ty(Tensor::AttnQ, i), ty(Tensor::AttnV, i));
            debug_assert_eq!(tq, ty(Tensor::AttnK, i), "q and k share a type in every mix");
            let b = if cfg.attention_bias { Some(fill(DType::F32, 1, qkv, 0.1, 0.0)?) } else { None };
            let w_qkv = if tq == tv || b.is_some() {
                Linear::single(fill(tq, qkv, h, mat(h), 0.0)?, b, qkv, h)
            } else {
                let qk = fill(tq, nq + nkv, h, mat(h), 0.0)?;
                Linear::stacked(vec![(qk, nq + nkv), (fill(tv, nkv, h, mat(h), 0.0)?, nkv)], h)
            };
            layers.push(Layer {
                attn_norm: fill(DType::F32, 1, h, 0.1, 1.0)?,
                w_qkv,
                w_o: Linear::single(fill(ty(Tensor::AttnO, i), h, nq, mat(nq), 0.0)?, None, h, nq),
                ffn_norm: fill(DType::F32, 1, h, 0.1, 1.0)?,
                w_gate_up: Linear::single(fill(ty(Tensor::FfnGateUp, i), 2 * ffn, h, mat(h), 0.0)?, None, 2 * ffn, h),
                w_down: Linear::single(fill(ty(Tensor::FfnDown, i), h, ffn, mat(ffn), 0.0)?, None, h, ffn),
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
            tp: None,
        })
    }

    /// Bytes of all weights as stored on the device (what a decode step streams at least once):
    /// quantized matrices count their blocks' bytes.
    pub fn weight_bytes(&self, be: &B) -> usize {
        if let Some(g) = &self.gemma {
            return g.weight_bytes(be);
        }
        let size = |b: &B::Buffer| be.len(b) * be.dtype(b).size();
        let mut total = size(&self.embed) + self.lm_head.as_ref().map_or(0, |l| l.bytes(be)) + size(&self.norm);
        for l in &self.layers {
            total += size(&l.attn_norm) + l.w_qkv.bytes(be) + l.w_o.bytes(be);
            total += size(&l.ffn_norm) + l.w_gate_up.bytes(be) + l.w_down.bytes(be);
        }
        total
    }

    /// Weight bytes one decode step of `batch` sequences reads at least (the bench's floor):
    /// every matrix and norm, and of an untied embedding table only the batch's rows (a tied
    /// table is the LM head and read whole).
    pub fn step_weight_bytes(&self, be: &B, batch: usize) -> usize {
        let all = self.weight_bytes(be);
        if self.gemma.is_some() || self.lm_head.is_none() {
            return all;
        }
        let table = be.len(&self.embed) * be.dtype(&self.embed).size();
        let rows = self.shard_cfg().vocab_size.max(1);
        all - table + (table / rows) * batch.min(rows)
    }

    /// Device bytes per weight storage type (`weight_name` spelling: q4_1, q8_0, f32, ...),
    /// vectors included; what `generate --output json` reports.
    pub fn weight_bytes_by_type(&self, be: &B) -> std::collections::BTreeMap<String, usize> {
        if let Some(g) = &self.gemma {
            return g.weight_bytes_by_type(be);
        }
        let mut by = std::collections::BTreeMap::new();
        let mut add =
            |b: &B::Buffer| *by.entry(be.dtype(b).weight_name()).or_insert(0) += be.len(b) * be.dtype(b).size();
        add(&self.embed);
        add(&self.norm);
        self.lm_head.iter().flat_map(|l| l.buffers()).for_each(&mut add);
        for l in &self.layers {
            [&l.attn_norm, &l.ffn_norm].into_iter().for_each(&mut add);
            [&l.w_qkv, &l.w_o, &l.w_gate_up, &l.w_down].into_iter().flat_map(|l| l.buffers()).for_each(&mut add);
        }
        by
    }

    /// The storage types of each layer's q|k|v parts (one entry per buffer: more than one where
    /// the file's q, k and v types differ).
    pub fn qkv_dtypes(&self, be: &B) -> Vec<Vec<DType>> {
        match &self.gemma {
            Some(g) => g.qkv_dtypes(be),
            None => self.layers.iter().map(|l| l.w_qkv.dtypes(be)).collect(),
        }
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
        // The shard's shapes (the whole model's without tensor parallelism); `self.cfg` is the
        // whole model's (ids are checked against its vocabulary).
        let c = self.shard_cfg();
        let (rank, ranks) = self.tp_rank();
        let (inv, attention_scaling) =
            self.inv_freq(seqs.iter().map(|s| s.cache.len + s.tokens.len()).max().unwrap_or(0));
        let pool = &self.pool;
        let m = StepMeta::build(be, pool, cache, seqs, &self.cfg, c.num_heads, inv)?;
        let mut blocks = self.prefill_blocks(be, cache, attn, seqs, m.decode)?;
        let (n, h, hd) = (m.n_tokens, c.hidden_size, c.head_dim);
        let (nq, ffn) = (c.num_heads * hd, c.intermediate_size);
        let a = |len: usize| pool.take(be, DType::F32, len);
        // The norms and silu_mul write their matmuls' x in 16 bits or as x8 digits where the
        // backend takes it.
        let (xn_dt, attn_dt, act_dt) = self.act_dtypes(be, n, m.decode);
        let (qkv_dt, gu_dt) = self.out_dtypes(be, n, m.decode, act_dt);
        let (mut x, mut xn, mut qkv, mut q) = (
            a(n * h)?,
            pool.take(be, xn_dt, act_len(xn_dt, n, h))?,
            pool.take(be, qkv_dt, n * c.qkv_dim())?,
            a(n * nq)?,
        );
        let (mut attn_out, mut o, mut gu) =
            (pool.take(be, attn_dt, act_len(attn_dt, n, nq))?, a(n * h)?, pool.take(be, gu_dt, n * 2 * ffn)?);
        let mut act = pool.take(be, act_dt, act_len(act_dt, n, ffn))?;
        let norm = RmsnormParams { rows: n as u32, dim: h as u32, eps: c.rms_norm_eps, _pad: 0 };
        let first = (rank * c.vocab_size) as u32;
        let ep = EmbedParams { n_tokens: n as u32, dim: h as u32, vocab: c.vocab_size as u32, first };
        // Sampling settings (and the LM head's reorder under tensor parallelism) go up before the
        // graph region: a write inside it would cut the step's recorded launches in two.
        let settings = match want {
            Head::Sample(s) if m.n_logits > 0 => Some(self.upload_settings(be, s, m.n_logits)?),
            _ => None,
        };
        let reorder = match m.n_logits {
            nl if nl > 0 && ranks > 1 => Some(pool.upload_u32(be, &gathered_order(nl, ranks))?),
            _ => None,
        };
        // A decode step's launches are the same every step (all that changes lives in StepMeta's
        // buffers), so the backend may replay them as one graph; prefill shapes vary.
        let region = GraphRegion::begin(be, m.decode && hook.is_none());
        be.embed(&ep, &self.embed, &m.ids, &mut x)?;
        self.all_reduce(be, &mut x, n * h)?;
        let paged = m.paged();
        let rmeta = m.rope_meta();
        let lp = cache.shape.logical_page;
        // o_proj and down add into the residual x themselves where every layer's GEMMs take it
        // (cuBLAS beta = 1; not under tensor parallelism, whose partial products are summed by
        // the all-reduce first): each norm is then a plain rmsnorm of x.
        let fuse = ranks == 1 && self.layers.iter().all(|l| l.w_o.accumulates(be, n) && l.w_down.accumulates(be, n));
        // A branch's projection: added into x (fused), or into o, which the next norm adds.
        let project = |lin: &Linear<B>, input: &B::Buffer, x: &mut B::Buffer, o: &mut B::Buffer| -> Result<()> {
            if fuse {
                return lin.matmul_add(be, n, input, x);
            }
            lin.matmul(be, n, input, o)?;
            self.all_reduce(be, o, n * h)
        };
        // The norm after a branch: of x (fused), or of x + o.
        let renorm = |x: &mut B::Buffer, o: &B::Buffer, w: &B::Buffer, out: &mut B::Buffer| -> Result<()> {
            if fuse { be.rmsnorm(&norm, x, w, out) } else { be.add_rmsnorm(&norm, x, o, w, out) }
        };
        // On top of that, the norms and silu_mul fold into the matmuls after them where every
        // layer's take it (`Backend::matmul_prologue_fuses`: CUDA's batch-1 GEMVs): the norm reads
        // x as the projections left it, silu_mul gate|up as its matmul wrote it.
        let pro_norm = fuse
            && self.layers.iter().all(|l| {
                l.w_qkv.prologue_fuses(be, n, PrologueKind::Rmsnorm)
                    && l.w_gate_up.prologue_fuses(be, n, PrologueKind::Rmsnorm)
            });
        let pro_silu = fuse && self.layers.iter().all(|l| l.w_down.prologue_fuses(be, n, PrologueKind::SiluMul));
        // A block's norm into xn: of x alone (layer 0's attention norm, `first`), or after a branch.
        let norm_into = |x: &mut B::Buffer, o: &B::Buffer, w: &B::Buffer, xn: &mut B::Buffer, first: bool| {
            if first { be.rmsnorm(&norm, x, w, xn) } else { renorm(x, o, w, xn) }
        };
        // A block's norm and the matmul after it: one matmul_prologue, or the norm into xn
        // (layer 0's attention norm: of x alone) and the matmul of xn.
        let norm_matmul = |lin: &Linear<B>,
                           x: &mut B::Buffer,
                           o: &B::Buffer,
                           w: &B::Buffer,
                           xn: &mut B::Buffer,
                           out: &mut B::Buffer,
                           first: bool|
         -> Result<()> {
            if pro_norm {
                return lin.matmul_prologue(be, n, Prologue::Rmsnorm { w, eps: c.rms_norm_eps }, x, out, false);
            }
            norm_into(x, o, w, xn, first)?;
            lin.matmul(be, n, xn, out)
        };
        for (i, l) in self.layers.iter().enumerate() {
            let rp = m.rope_params(cache, i, attention_scaling);
            // q|k|v and its rotation into the cache: one kernel where the backend makes them one
            // (`Backend::matmul_rope_fuses`: wgpu's batch-1 GEMV into 16-bit pools), after the
            // norm; else the matmul (with the norm folded in where pro_norm) and the op.
            if !pro_norm && l.w_qkv.rope_fuses(be, n, &rp, cache.shape.kv_dtype) {
                norm_into(&mut x, &o, &l.attn_norm, &mut xn, i == 0)?;
                l.w_qkv.matmul_rope(be, n, &xn, &mut qkv, &rp, &rmeta, &mut q, cache.layers[i].view_mut())?;
            } else {
                norm_matmul(&l.w_qkv, &mut x, &o, &l.attn_norm, &mut xn, &mut qkv, i == 0)?;
                be.rope_append_kv(&rp, &qkv, &rmeta, &mut q, cache.layers[i].view_mut())?;
            }
            let ap = m.attention_params(cache, i, attn);
            let sp = m.select_params(cache, &ap, attn);
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
            } else if let Some(b) = blocks.as_mut().filter(|_| !attn.dense_layer[i] && ap.n_ret > 0) {
                let (bap, lists) = b.select(be, pool, &m, &ap, lp, &q, store.view())?;
                be.prefill_attention(&bap, &q, &m.q_indptr, store.view(), &paged, Some(&lists), &mut attn_out)?;
            } else {
                be.prefill_attention(&ap, &q, &m.q_indptr, store.view(), &paged, None, &mut attn_out)?;
            }
            if let Some(hook) = hook.as_mut() {
                hook(be, i, &q, store.view(), &paged)?;
            }
            project(&l.w_o, &attn_out, &mut x, &mut o)?;
            // gate|up and silu_mul: one kernel where the backend makes them one
            // (`Backend::matmul_silu_mul_fuses`: wgpu's batch-1 GEMV into X8 digits), after the
            // norm; else the matmul (with the norm folded in where pro_norm) and, unless down
            // takes it as its prologue, the op.
            let glu = !pro_norm && !pro_silu && l.w_gate_up.silu_fuses(be, n, be.dtype(&act));
            if glu {
                norm_into(&mut x, &o, &l.ffn_norm, &mut xn, false)?;
                l.w_gate_up.matmul_silu(be, n, &xn, &mut gu, &mut act)?;
            } else {
                norm_matmul(&l.w_gate_up, &mut x, &o, &l.ffn_norm, &mut xn, &mut gu, false)?;
            }
            if pro_silu {
                l.w_down.matmul_prologue(be, n, Prologue::SiluMul, &gu, &mut x, true)?;
            } else {
                if !glu {
                    let sp = SiluMulParams { rows: n as u32, dim: ffn as u32, ..Default::default() };
                    be.silu_mul(&sp, &gu, &mut act)?;
                }
                project(&l.w_down, &act, &mut x, &mut o)?;
            }
        }
        let nl = m.n_logits;
        tracing::trace!(record_us = t_record.elapsed().as_micros() as u64, "step recorded");
        let (mut out, mut ids) = (vec![], vec![]);
        if nl > 0 {
            // The LM head's rows are gathered from an f32 norm output.
            let mut xf = if xn_dt == DType::F32 { None } else { Some(a(n * h)?) };
            let fin = match xf.as_mut() {
                Some(b) => b,
                None => &mut xn,
            };
            renorm(&mut x, &o, &self.norm, fin)?;
            let mut sel = a(nl * h)?;
            let gp = GatherRowsParams { n_out: nl as u32, dim: h as u32, n_src: n as u32, _pad: 0 };
            be.gather_rows(&gp, fin, &m.logit_rows, &mut sel)?;
            let logits = self.lm_head_logits(be, &sel, nl, reorder.as_ref())?;
            let vocab = self.cfg.vocab_size;
            match want {
                // Every rank holds the whole logits; rank 0's come back.
                _ if rank > 0 => {}
                Head::Logits => out = be.download_f32(&logits, 0, nl * vocab)?,
                Head::Argmax => {
                    let mut best = pool.take(be, DType::U32, nl)?;
                    let ap = ArgmaxParams { rows: nl as u32, n: vocab as u32, ..Default::default() };
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
            xf.into_iter().for_each(|b| pool.put(b));
        }
        region.finish()?;
        [x, xn, qkv, q, attn_out, o, gu, act].into_iter().chain(settings).chain(reorder).for_each(|b| pool.put(b));
        m.recycle(pool);
        blocks.into_iter().for_each(|b| b.recycle(pool));
        Ok((out, ids))
    }

    /// The dtypes of a step's norm output (the x of q|k|v and gate|up), attention output (the x
    /// of o) and silu_mul's output (the x of down) at `n` rows: the weights' 16-bit dtype where
    /// every layer's matrices take it (`Linear::x16_dtype`; the attention's only where it is
    /// `prefill_attention`, not in a decode step of several rows), at one row x8
    /// digits where they all take those (`Linear::takes_x8`; attention only in a decode step, with
    /// head_dim a multiple of 32), else f32. Either is what the matmul would have made of the f32
    /// activations (the attention's at short contexts within an f32 rounding: its X8 row always
    /// comes from the split merge, which normalizes as acc * (1 / l) where one split's kernel
    /// divides).
    fn act_dtypes(&self, be: &B, n: usize, decode: bool) -> (DType, DType, DType) {
        let ls = &self.layers;
        if n == 1 {
            let x8 = |ok: bool| if ok { DType::X8 } else { DType::F32 };
            let attn = decode && self.shard_cfg().head_dim.is_multiple_of(32) && ls.iter().all(|l| l.w_o.takes_x8(be));
            return (
                x8(ls.iter().all(|l| l.w_qkv.takes_x8(be) && l.w_gate_up.takes_x8(be))),
                x8(attn),
                x8(ls.iter().all(|l| l.w_down.takes_x8(be))),
            );
        }
        if be.caps().act16_from.is_none_or(|from| n < from) {
            return (DType::F32, DType::F32, DType::F32);
        }
        let x16 = |l: &Linear<B>| l.x16_dtype(be, n);
        let xn = common_dtype(ls.iter().flat_map(|l| [&l.w_qkv, &l.w_gate_up]), x16);
        // prefill_attention writes o's x in 16 bits too; the decode attention keeps f32.
        let attn = if decode { DType::F32 } else { common_dtype(ls.iter().map(|l| &l.w_o), x16) };
        (xn, attn, common_dtype(ls.iter().map(|l| &l.w_down), x16))
    }

    /// The dtypes of a prefill's q|k|v and gate|up matmul outputs: 16 bits where every layer's
    /// matrix may write them so (`Linear::out16_dtype`) — q, k and v are rounded to the KV dtype
    /// after RoPE anyway, silu(gate) * up to the down projection's x — and gate|up only where
    /// silu_mul's out (`act`) is that dtype too; else f32. Decode steps keep f32.
    fn out_dtypes(&self, be: &B, n: usize, decode: bool, act: DType) -> (DType, DType) {
        if decode {
            return (DType::F32, DType::F32);
        }
        let (ls, out16) = (&self.layers, |l: &Linear<B>| l.out16_dtype(be, n));
        let qkv = common_dtype(ls.iter().map(|l| &l.w_qkv), out16);
        let gu = common_dtype(ls.iter().map(|l| &l.w_gate_up), out16);
        (qkv, if gu == act { gu } else { DType::F32 })
    }

    /// The logits `[nl][vocab]` of the `nl` normed rows `sel`. Under tensor parallelism each rank
    /// computes its vocabulary slice `[nl][V/N]`, the all-gather stacks the slices `[N][nl][V/N]`,
    /// and `gather_rows` with `reorder` (`gathered_order`) puts them in `[nl][V]` order.
    fn lm_head_logits(&self, be: &B, sel: &B::Buffer, nl: usize, reorder: Option<&B::Buffer>) -> Result<B::Buffer> {
        let (c, h, pool) = (self.shard_cfg(), self.cfg.hidden_size, &self.pool);
        let mut part = pool.take(be, DType::F32, nl * c.vocab_size)?;
        match &self.lm_head {
            Some(head) => head.matmul(be, nl, sel, &mut part)?,
            None => be.matmul(&MatmulParams::new(nl, c.vocab_size, h, false), sel, &self.embed, None, &mut part)?,
        }
        let (Some(t), Some(order)) = (&self.tp, reorder) else { return Ok(part) };
        let n = t.comm.size();
        let mut stacked = pool.take(be, DType::F32, n * nl * c.vocab_size)?;
        t.comm.all_gather(be, &part, nl * c.vocab_size, &mut stacked)?;
        let mut logits = pool.take(be, DType::F32, nl * self.cfg.vocab_size)?;
        let gp = GatherRowsParams { n_out: (n * nl) as u32, dim: c.vocab_size as u32, n_src: (n * nl) as u32, _pad: 0 };
        be.gather_rows(&gp, &stacked, order, &mut logits)?;
        pool.put(part);
        pool.put(stacked);
        Ok(logits)
    }

    /// A prefill step's block-sparse metadata, when the settings ask for it and a block qualifies
    /// (never with a model-wide window: its layers read only the window anyway).
    fn prefill_blocks(
        &self,
        be: &B,
        cache: &KvCache<B>,
        attn: &AttnSettings,
        seqs: &[SeqStep],
        decode: bool,
    ) -> Result<Option<PrefillBlocks<B>>> {
        if attn.window != 0 {
            return Ok(None);
        }
        super::blocks::step_blocks(be, &self.pool, cache, attn, seqs, decode)
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

/// Length of an activation buffer of `n` rows of `k` in dtype `d`: elements, or an X8 row's bytes.
fn act_len(d: DType, n: usize, k: usize) -> usize {
    if d == DType::X8 { x8_bytes(k) } else { n * k }
}

/// The one 16-bit dtype `f` gives every matrix of `ls` (`Linear::x16_dtype`: the x of `n` rows,
/// `Linear::out16_dtype`: the out), else f32.
fn common_dtype<'a, B: Backend + 'a>(
    mut ls: impl Iterator<Item = &'a Linear<B>>,
    f: impl Fn(&Linear<B>) -> Option<DType>,
) -> DType {
    match ls.next().and_then(&f) {
        Some(d) if ls.all(|l| f(l) == Some(d)) => d,
        _ => DType::F32,
    }
}

/// `gather_rows` indices that turn the all-gathered logits `[ranks][nl][V/N]`, viewed as `ranks·nl`
/// rows of `V/N`, into `[nl][V]`: output row `r·ranks + k` (row r's slice k) is source row `k·nl + r`.
fn gathered_order(nl: usize, ranks: usize) -> Vec<u32> {
    (0..nl).flat_map(|r| (0..ranks).map(move |k| (k * nl + r) as u32)).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn gathered_order_interleaves_rank_slices() {
        // 2 rows, 3 ranks: [rank][row] -> [row][rank].
        assert_eq!(super::gathered_order(2, 3), [0, 2, 4, 1, 3, 5]);
    }
}
