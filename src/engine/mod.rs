//! The engine: a model, its backend and its KV cache, and the two loops the CLI needs —
//! generation (chunked prefill then token-by-token decode) and scoring (per-token log-likelihood
//! over windows of the context size).
//!
//! Invariants: a sequence's pages are reserved before each forward and released when the request
//! ends, whether it ends well or with an error, so one failed request never leaks cache.

use std::time::Instant;

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::kv::{CacheShape, KvCache, SeqPages};
use crate::model::llama::{Llama, Logits, SeqStep};
use crate::sampling::{Sampler, SamplingParams, log_prob};

/// Tokens per prefill chunk unless configured otherwise.
pub const DEFAULT_PREFILL_CHUNK: usize = 512;
pub const DEFAULT_PAGE_SIZE: usize = 64;

pub struct Engine<B: Backend> {
    pub backend: B,
    pub model: Llama<B>,
    pub cache: KvCache<B>,
    pub prefill_chunk: usize,
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

#[derive(Clone, Debug)]
pub struct GenerateOutput {
    pub tokens: Vec<u32>,
    pub finish: FinishReason,
    pub prefill_ms: f64,
    pub decode_ms: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ScoreOutput {
    pub tokens: usize,
    /// Tokens whose log-likelihood was summed (every token after the first).
    pub scored: usize,
    pub nll_sum: f64,
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
    /// A cache big enough for one sequence of `max_tokens` tokens.
    pub fn new(backend: B, model: Llama<B>, max_tokens: usize, page_size: usize) -> Result<Self> {
        let c = &model.cfg;
        let shape = CacheShape {
            num_layers: c.num_layers,
            n_kv_heads: c.num_kv_heads,
            head_dim: c.head_dim,
            page_size,
            num_pages: max_tokens.max(1).div_ceil(page_size),
        };
        let cache = KvCache::new(&backend, shape)?;
        Ok(Engine {
            backend,
            model,
            cache,
            prefill_chunk: DEFAULT_PREFILL_CHUNK,
        })
    }

    pub fn context_len(&self) -> usize {
        self.model.cfg.context_len()
    }

    /// Run `tokens` through the model at the end of `seq`, in chunks; returns the logits the
    /// `want` policy asks for, concatenated over chunks.
    fn prefill(&mut self, seq: &mut SeqPages, tokens: &[u32], want: Logits) -> Result<Vec<f32>> {
        let mut out = Vec::new();
        let chunk = self.prefill_chunk.max(1);
        let n_chunks = tokens.len().div_ceil(chunk);
        for (i, part) in tokens.chunks(chunk).enumerate() {
            self.cache.reserve(seq, part.len())?;
            let logits = match want {
                Logits::Last if i + 1 < n_chunks => Logits::None,
                w => w,
            };
            let step = [SeqStep {
                tokens: part,
                cache: seq,
                logits,
            }];
            out.extend(self.model.forward(&self.backend, &mut self.cache, &step)?);
            seq.len += part.len();
        }
        Ok(out)
    }

    fn check_fits(&self, tokens: usize) -> Result<()> {
        let ctx = self.context_len();
        if tokens > ctx {
            return Err(Error::PromptTooLong {
                tokens,
                context: ctx,
            });
        }
        let cap = self.cache.shape.num_pages * self.cache.shape.page_size;
        if tokens > cap {
            return Err(Error::OutOfPages(format!(
                "{tokens} tokens need more than the {cap}-token cache"
            )));
        }
        Ok(())
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
            return Err(Error::PromptTooLong {
                tokens: req.prompt.len(),
                context: ctx,
            });
        }
        let budget = req.max_tokens.min(ctx - req.prompt.len());
        self.check_fits(req.prompt.len() + budget)?;
        let mut seq = SeqPages::default();
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
        let mut sampler = Sampler::new(req.sampling.clone());
        let t0 = Instant::now();
        let mut logits = self.prefill(seq, &req.prompt, Logits::Last)?;
        let prefill_ms = t0.elapsed().as_secs_f64() * 1e3;
        let t1 = Instant::now();
        let mut tokens = Vec::new();
        let mut finish = FinishReason::Length;
        while tokens.len() < budget {
            let next = sampler.sample(&logits).map_err(Error::InvalidArgument)?;
            tokens.push(next);
            on_token(next)?;
            if !req.ignore_eos && req.stop_ids.contains(&next) {
                finish = FinishReason::Stop;
                break;
            }
            if tokens.len() == budget {
                break;
            }
            logits = self.prefill(seq, &[next], Logits::Last)?;
        }
        let decode_ms = t1.elapsed().as_secs_f64() * 1e3;
        Ok(GenerateOutput {
            tokens,
            finish,
            prefill_ms,
            decode_ms,
        })
    }

    /// Mean negative log-likelihood of every token after the first. Texts longer than the
    /// context are scored in windows of `window` tokens advancing by `stride`: each window after
    /// the first scores only its last `stride` tokens, which therefore see `window - stride`
    /// tokens of context (the Hugging Face perplexity recipe).
    pub fn score(&mut self, ids: &[u32], window: usize, stride: usize) -> Result<ScoreOutput> {
        if ids.len() < 2 {
            return Err(Error::InvalidArgument(
                "scoring needs at least two tokens".into(),
            ));
        }
        if window < 2 || stride == 0 || stride > window {
            return Err(Error::InvalidArgument(format!(
                "bad window {window} / stride {stride}"
            )));
        }
        self.check_fits(window.min(ids.len()))?;
        let vocab = self.model.cfg.vocab_size;
        let (mut nll_sum, mut scored, mut start, mut done) = (0f64, 0usize, 0usize, 1usize);
        loop {
            let end = (start + window).min(ids.len());
            let mut seq = SeqPages::default();
            let logits = self.prefill(&mut seq, &ids[start..end], Logits::All);
            self.cache.release(&mut seq)?;
            let logits = logits?;
            // Target t is predicted by the logits of position t - 1.
            for t in done.max(start + 1)..end {
                let row = &logits[(t - 1 - start) * vocab..(t - start) * vocab];
                nll_sum -= log_prob(row, ids[t]);
                scored += 1;
            }
            done = end;
            if end == ids.len() {
                break;
            }
            start = (end + stride).min(ids.len()).saturating_sub(window);
        }
        Ok(ScoreOutput {
            tokens: ids.len(),
            scored,
            nll_sum,
        })
    }
}
