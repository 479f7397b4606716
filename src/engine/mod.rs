//! The engine: a model, its backend, its KV cache and its attention settings, and the loops the
//! CLI needs — generation (chunked prefill then token-by-token decode with page selection) and
//! scoring (per-token log-likelihood over windows, optionally through decode steps so sparse
//! decode attention is what gets measured).
//!
//! Every forward goes through the one step, `Engine::step_rows` (step.rs: reserve, plan, forward,
//! advance), which the serving loop (serve.rs) calls with its ragged batches too.
//!
//! Invariants: a sequence is admitted (slot + streaming ring) before its first forward, pages are
//! reserved before each forward, and everything is released when the request ends, whether it
//! ends well or with an error, so one failed request never leaks cache.

mod build;
mod step;

use std::time::Instant;

pub use build::{EngineOptions, build_engine, build_engine_tp, rank_layout};
pub use step::{StepHead, StepOut, StepRow};

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::kv::{KvCache, SeqPages, SwappedKv};
use crate::model::llama::{AttnSettings, Llama, Logits};
use crate::sampling::{Sampler, SamplingParams, log_prob};
use crate::sparse::SparseConfig;

/// Tokens per prefill step of a single-sequence engine (generate, score, bench, niah) unless
/// configured otherwise: a long prompt goes in few large steps, so one step's attention grid is
/// many waves deep and the short tiles of streaming heads free their SMs for the long rows of
/// retrieval heads (docs/benchmarks.md: 512-token steps left a 32K prefill's attention at 1.8x the
/// 8K-step time). The streaming ring holds sink + local + this many tokens, so serving, which holds
/// many sequences, sets its own smaller chunk (`lserve serve --prefill-chunk`).
pub const DEFAULT_PREFILL_CHUNK: usize = 8192;

/// Rows per prefill step when every row's logits are kept (scoring): bounds the logits buffer to
/// this many rows of the vocabulary.
pub const LOGITS_CHUNK: usize = 512;

/// Rank 0 of a tensor-parallel engine is the engine's own `backend`, `model` and `cache`; its
/// cache's allocator is the only one (page ids, rings and slots are the same on every rank).
pub struct Engine<B: Backend> {
    pub backend: B,
    pub model: Llama<B>,
    pub cache: KvCache<B>,
    pub attn: AttnSettings,
    pub sparse: SparseConfig,
    pub prefill_chunk: usize,
    /// Tensor-parallel ranks 1.. (empty without tensor parallelism; docs/tensor-parallel.md).
    pub ranks: Vec<Rank<B>>,
}

/// Each rank's backend and model, rank order (`build_engine_tp`'s input, `into_shards`' output).
pub type Shards<B> = Vec<(B, Llama<B>)>;

/// A tensor-parallel rank other than 0: its device, its model shard and its KV heads' storage.
/// Its cache's allocator is never used (rank 0's page ids index every rank's pools).
pub struct Rank<B: Backend> {
    pub backend: B,
    pub model: Llama<B>,
    pub cache: KvCache<B>,
}

#[derive(Clone, Debug)]
pub struct GenerateRequest {
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Generation stops at any of these unless `ignore_eos`.
    pub stop_ids: Vec<u32>,
    pub ignore_eos: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub enum FinishReason {
    Stop,
    Length,
}

/// KV tokens decode attention read, against what dense attention would have read.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct KvReads {
    pub read: u64,
    pub dense: u64,
}

impl KvReads {
    pub fn fraction(&self) -> f64 {
        if self.dense == 0 { 1.0 } else { self.read as f64 / self.dense as f64 }
    }
}

#[derive(Clone, Debug)]
pub struct GenerateOutput {
    pub tokens: Vec<u32>,
    pub finish: FinishReason,
    pub prefill_ms: f64,
    pub decode_ms: f64,
    pub kv_reads: KvReads,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ScoreOutput {
    pub tokens: usize,
    /// Tokens whose log-likelihood was summed (every token after the first).
    pub scored: usize,
    pub nll_sum: f64,
    pub kv_reads: KvReads,
}

impl ScoreOutput {
    pub fn mean_nll(&self) -> f64 {
        self.nll_sum / self.scored.max(1) as f64
    }
    pub fn perplexity(&self) -> f64 {
        self.mean_nll().exp()
    }
}

impl<B: Backend> Engine<B> {
    pub fn context_len(&self) -> usize {
        self.model.cfg.context_len()
    }

    /// Ranks of tensor parallelism (1 without).
    pub fn tp_size(&self) -> usize {
        1 + self.ranks.len()
    }

    /// Every rank's cache shape, rank order.
    pub fn rank_shapes(&self) -> impl Iterator<Item = &crate::kv::CacheShape> {
        std::iter::once(&self.cache.shape).chain(self.ranks.iter().map(|r| &r.cache.shape))
    }

    /// Bytes of every rank's KV cache.
    pub fn kv_cache_bytes(&self) -> usize {
        self.rank_shapes().map(|s| s.total_bytes()).sum()
    }

    /// Bytes of every rank's weights on its device.
    pub fn weight_bytes(&self) -> usize {
        self.model.weight_bytes(&self.backend)
            + self.ranks.iter().map(|r| r.model.weight_bytes(&r.backend)).sum::<usize>()
    }

    /// Device bytes per weight storage type over every rank (`Llama::weight_bytes_by_type`).
    pub fn weight_bytes_by_type(&self) -> std::collections::BTreeMap<String, usize> {
        let mut by = self.model.weight_bytes_by_type(&self.backend);
        for r in &self.ranks {
            for (k, v) in r.model.weight_bytes_by_type(&r.backend) {
                *by.entry(k).or_insert(0) += v;
            }
        }
        by
    }

    /// The ranks' backends and models, rank order (the engine's cache is dropped).
    pub fn into_shards(self) -> Shards<B> {
        let rest = self.ranks.into_iter().map(|r| (r.backend, r.model));
        std::iter::once((self.backend, self.model)).chain(rest).collect()
    }

    /// Copy `seq`'s KV on every rank to host memory (`KvCache::swap_out`, ranks appended).
    pub fn swap_out(&self, seq: &SeqPages) -> Result<SwappedKv> {
        let mut copy = self.cache.swap_out(&self.backend, seq)?;
        for r in &self.ranks {
            copy.append_rank(r.cache.swap_out(&r.backend, seq)?);
        }
        Ok(copy)
    }

    /// Admit a sequence holding `copy` (`swap_out`'s) on every rank: rank 0 allocates and
    /// restores, the others restore their heads at the same ids. All or nothing.
    pub fn swap_in(&mut self, copy: &SwappedKv) -> Result<SeqPages> {
        let mut seq = self.cache.swap_in(&self.backend, copy)?;
        for (i, r) in self.ranks.iter_mut().enumerate() {
            if let Err(e) = r.cache.restore_rank(&r.backend, &seq, copy, i + 1) {
                self.cache.release(&mut seq)?;
                return Err(e);
            }
        }
        Ok(seq)
    }

    /// Tokens one sequence can hold in this cache.
    pub fn capacity(&self) -> usize {
        self.cache.shape.num_pages * self.cache.shape.page_size
    }

    fn check_fits(&self, tokens: usize) -> Result<()> {
        let ctx = self.context_len();
        if tokens > ctx {
            return Err(Error::PromptTooLong { tokens, context: ctx });
        }
        if tokens > self.capacity() {
            return Err(Error::OutOfPages(format!(
                "{tokens} tokens need more than the {}-token KV cache",
                self.capacity()
            )));
        }
        Ok(())
    }

    /// One forward of `tokens` at the end of `seq` whose next token is sampled on the device with
    /// `sampler`'s settings and next draw (greedy samplers take the argmax).
    fn sample_next(&mut self, seq: &mut SeqPages, tokens: &[u32], sampler: &mut Sampler) -> Result<u32> {
        let settings = [sampler.device_settings()];
        self.step_rows(&mut [StepRow { seq, tokens, logits: Logits::Last }], StepHead::Sample(&settings))?.token()
    }

    /// Chunked prefill of `tokens` at the end of `seq` whose last chunk samples the next token on
    /// the device (`sample_next`).
    fn prefill_sample(&mut self, seq: &mut SeqPages, tokens: &[u32], sampler: &mut Sampler) -> Result<u32> {
        let chunk = self.prefill_chunk.max(1);
        let last = tokens.len().saturating_sub(1) / chunk * chunk;
        self.prefill(seq, &tokens[..last], chunk, Logits::None, &mut |_| {})?;
        self.sample_next(seq, &tokens[last..], sampler)
    }

    /// Prefill of `tokens` at the end of `seq` in steps of `chunk` tokens (at most the engine's
    /// `prefill_chunk`, which sized the streaming ring); `on_logits` sees each step's logits.
    fn prefill(
        &mut self,
        seq: &mut SeqPages,
        tokens: &[u32],
        chunk: usize,
        want: Logits,
        on_logits: &mut dyn FnMut(&[f32]),
    ) -> Result<()> {
        let chunk = chunk.clamp(1, self.prefill_chunk.max(1));
        let n_chunks = tokens.len().div_ceil(chunk);
        for (i, part) in tokens.chunks(chunk).enumerate() {
            let logits = match want {
                Logits::Last if i + 1 < n_chunks => Logits::None,
                w => w,
            };
            let out = self.step(seq, part, logits, None)?;
            on_logits(&out);
        }
        Ok(())
    }

    /// Add what a decode step at `seq` (after its step) read, per the plan it ran with.
    pub fn count_reads(&self, seq: &SeqPages, reads: &mut KvReads) {
        for s in self.rank_shapes() {
            self.count_rank_reads(s, seq, reads);
        }
    }

    /// `count_reads` for the KV heads of one rank's cache.
    fn count_rank_reads(&self, s: &crate::kv::CacheShape, seq: &SeqPages, reads: &mut KvReads) {
        let len = seq.len as u64;
        let lambda = len.min((self.attn.sink + self.attn.local) as u64);
        let ps = s.page_size as u64;
        let gemma = self.model.cfg.gemma.as_ref();
        for l in 0..s.num_layers {
            // Gemma 3's local layers read their window, sparse or dense alike.
            if let Some(g) = gemma.filter(|g| g.is_local(l)) {
                let w = len.min(g.sliding_window as u64) * s.n_kv_heads as u64;
                reads.read += w;
                reads.dense += w;
                continue;
            }
            let retrieval = match seq.sel_tail {
                Some(tail) if !self.attn.dense_layer[l] => {
                    // k_pages units, at most those below the tail (tails count units).
                    let unit = self.attn.unit(ps as usize) as u64;
                    let selected = (self.attn.k_pages as u64).min(tail as u64);
                    selected * unit + len.saturating_sub(tail as u64 * unit)
                }
                _ => len,
            };
            reads.read += s.layout.n_ret(l) as u64 * retrieval + s.layout.n_str(l) as u64 * lambda;
            reads.dense += s.n_kv_heads as u64 * len;
        }
    }

    /// Generate; `on_token` sees each token as it is sampled (for streaming).
    pub fn generate(
        &mut self,
        req: &GenerateRequest,
        on_token: &mut dyn FnMut(u32) -> Result<()>,
    ) -> Result<GenerateOutput> {
        if req.prompt.is_empty() {
            return Err(Error::InvalidArgument("the prompt is empty".into()));
        }
        req.sampling.validate().map_err(Error::InvalidArgument)?;
        let ctx = self.context_len();
        if req.prompt.len() > ctx {
            return Err(Error::PromptTooLong { tokens: req.prompt.len(), context: ctx });
        }
        let budget = req.max_tokens.min(ctx - req.prompt.len());
        self.check_fits(req.prompt.len() + budget)?;
        let mut seq = self.cache.admit()?;
        let result = self.generate_inner(req, budget, &mut seq, on_token);
        self.cache.release(&mut seq)?;
        result
    }

    fn generate_inner(
        &mut self,
        req: &GenerateRequest,
        budget: usize,
        seq: &mut SeqPages,
        on_token: &mut dyn FnMut(u32) -> Result<()>,
    ) -> Result<GenerateOutput> {
        // Every token is sampled on the device; only ids come back (greedy is the op's argmax).
        let mut sampler = Sampler::new(req.sampling.clone());
        let t0 = Instant::now();
        let mut next = self.prefill_sample(seq, &req.prompt, &mut sampler)?;
        let prefill_ms = t0.elapsed().as_secs_f64() * 1e3;
        let t1 = Instant::now();
        let (mut tokens, mut finish, mut kv_reads) = (Vec::new(), FinishReason::Length, KvReads::default());
        while tokens.len() < budget {
            tokens.push(next);
            on_token(next)?;
            if !req.ignore_eos && req.stop_ids.contains(&next) {
                finish = FinishReason::Stop;
                break;
            }
            if tokens.len() == budget {
                break;
            }
            next = self.sample_next(seq, &[next], &mut sampler)?;
            self.count_reads(seq, &mut kv_reads);
        }
        let decode_ms = t1.elapsed().as_secs_f64() * 1e3;
        Ok(GenerateOutput { tokens, finish, prefill_ms, decode_ms, kv_reads })
    }

    /// Mean negative log-likelihood of every token after the first. Texts longer than `window`
    /// are scored in windows advancing by `stride`: each window after the first scores only its
    /// new tokens, which see `window - stride` tokens of context (the Hugging Face recipe). Within
    /// a window the first `decode_after` tokens are prefilled and the rest fed one at a time as
    /// decode steps, so that sparse decode attention (page selection, streaming heads) is what
    /// the score measures; `decode_after >= window` scores by prefill alone.
    pub fn score(&mut self, ids: &[u32], window: usize, stride: usize, decode_after: usize) -> Result<ScoreOutput> {
        if ids.len() < 2 {
            return Err(Error::InvalidArgument("scoring needs at least two tokens".into()));
        }
        if window < 2 || stride == 0 || stride > window {
            return Err(Error::InvalidArgument(format!("bad window {window} / stride {stride}")));
        }
        self.check_fits(window.min(ids.len()))?;
        let mut out = ScoreOutput { tokens: ids.len(), scored: 0, nll_sum: 0.0, kv_reads: KvReads::default() };
        let (mut start, mut done) = (0usize, 1usize);
        loop {
            let end = (start + window).min(ids.len());
            let mut seq = self.cache.admit()?;
            let r = self.score_window(&mut seq, &ids[start..end], done.max(start + 1) - start, decode_after, &mut out);
            self.cache.release(&mut seq)?;
            r?;
            done = end;
            if end == ids.len() {
                break;
            }
            start = (end + stride).min(ids.len()).saturating_sub(window);
        }
        Ok(out)
    }

    /// Score targets `first_target..` of one window (indices within `ids`).
    fn score_window(
        &mut self,
        seq: &mut SeqPages,
        ids: &[u32],
        first_target: usize,
        decode_after: usize,
        out: &mut ScoreOutput,
    ) -> Result<()> {
        let vocab = self.model.cfg.vocab_size;
        let split = decode_after.clamp(1, ids.len());
        // Logits row at position p predicts ids[p + 1].
        let add = |out: &mut ScoreOutput, p: usize, row: &[f32]| {
            if p + 1 >= first_target && p + 1 < ids.len() {
                out.nll_sum -= log_prob(row, ids[p + 1]);
                out.scored += 1;
            }
        };
        let mut pos = 0;
        self.prefill(seq, &ids[..split], LOGITS_CHUNK, Logits::All, &mut |logits| {
            for row in logits.chunks(vocab) {
                add(out, pos, row);
                pos += 1;
            }
        })?;
        for p in split..ids.len() - 1 {
            let row = self.step(seq, &ids[p..p + 1], Logits::Last, None)?;
            self.count_reads(seq, &mut out.kv_reads);
            add(out, p, &row);
        }
        Ok(())
    }
}
