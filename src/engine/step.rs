//! The engine's one step: every forward of the engine — generation, scoring, calibration, the
//! benchmarks and the serving loop's ragged batches — goes through [`Engine::step_rows`]:
//! reserve pages for each row's new tokens, plan each row's decode sparsity, run one forward
//! over all rows, advance each row's `len`.
//!
//! The decode rule lives here and only here: a step whose rows all bring exactly one token is a
//! decode step — it runs decode attention, and each row plans page selection (`plan_decode`:
//! select now, or reuse its last selection). Any other step runs prefill attention for every row
//! (dense for retrieval heads, the Lambda mask for streaming heads) and clears each row's
//! selection, so a row that decoded before re-selects at its next decode step. With
//! `pin_sink_page` on, `page_select` itself keeps each row's first page (`PageSelectParams::pin_first`).
//!
//! Tensor parallelism (docs/tensor-parallel.md): every rank runs the same forward over the same
//! `SeqStep`s — rank 0 on the calling thread, ranks 1.. on scoped threads, one per rank — and the
//! collectives inside the forward pass join them; rank 0's result is the step's. Reservation and
//! planning happen once, on rank 0's allocator, before the ranks start.
//!
//! Invariants: the step is all or nothing for `len` — reservations are idempotent (they cover
//! `len + n`), so a failed reservation or forward leaves every `len` as it was; only a successful
//! forward advances them. Callers that must isolate a failing row (the server) reserve each row
//! first with [`Engine::reserve`].

use super::{Engine, Rank};
use crate::backend::Backend;
use crate::backend::collective::is_abort;
use crate::error::{Error, Result};
use crate::kv::{KvCache, SeqPages};
use crate::model::llama::{AttnSettings, LayerHook, Llama, Logits, SeqStep};
use crate::sampling::{NO_LOGIT, NO_TOKEN};
use crate::sparse::{DecodePlan, plan_decode};

/// One sequence's part of a step: `tokens` appended at the end of `seq`.
pub struct StepRow<'a> {
    pub seq: &'a mut SeqPages,
    pub tokens: &'a [u32],
    /// Which of this row's positions produce logits (or a token, for the device heads).
    pub logits: Logits,
}

/// How a step ends: what comes back to the host.
pub enum StepHead<'a, B: Backend> {
    /// The logits rows, `[rows][vocab]` in step order; `hook` sees every layer's attention inputs.
    Logits(Option<LayerHook<'a, B>>),
    /// The argmax of each logits row, taken on the device.
    Argmax,
    /// Each logits row sampled on the device with its settings (`Sampler::device_settings`, one
    /// per logits row in step order; greedy settings are the argmax). `NO_TOKEN` marks a row
    /// without finite logits.
    Sample(&'a [[u32; 4]]),
}

/// What a step returned.
#[derive(Debug)]
pub enum StepOut {
    Logits(Vec<f32>),
    Ids(Vec<u32>),
}

impl StepOut {
    pub fn logits(self) -> Result<Vec<f32>> {
        match self {
            StepOut::Logits(l) => Ok(l),
            StepOut::Ids(_) => Err(Error::InvalidArgument("the step returned token ids, not logits".into())),
        }
    }
    pub fn ids(self) -> Result<Vec<u32>> {
        match self {
            StepOut::Ids(i) => Ok(i),
            StepOut::Logits(_) => Err(Error::InvalidArgument("the step returned logits, not token ids".into())),
        }
    }
    /// The one token a one-row step chose (an error for `NO_TOKEN`).
    pub fn token(self) -> Result<u32> {
        match self.ids()?.first() {
            Some(&NO_TOKEN) => Err(Error::InvalidArgument(NO_LOGIT.into())),
            Some(&t) => Ok(t),
            None => Err(Error::InvalidArgument("no token came back".into())),
        }
    }
}

impl<B: Backend> Engine<B> {
    /// Reserve pages for `n` more tokens of `seq` (idempotent until `seq.len` advances).
    pub fn reserve(&mut self, seq: &mut SeqPages, n: usize) -> Result<()> {
        self.cache.reserve(seq, n)
    }

    /// The step: reserve, plan, one forward over all rows, advance (module header).
    pub fn step_rows(&mut self, rows: &mut [StepRow<'_>], head: StepHead<'_, B>) -> Result<StepOut> {
        if rows.is_empty() || rows.iter().any(|r| r.tokens.is_empty()) {
            return Err(Error::InvalidArgument("a step needs rows, each with at least one token".into()));
        }
        for r in rows.iter_mut() {
            self.cache.reserve(r.seq, r.tokens.len())?;
        }
        let decode = rows.iter().all(|r| r.tokens.len() == 1);
        let unit = self.attn.unit(self.cache.shape.page_size);
        let plans: Vec<DecodePlan> = rows
            .iter_mut()
            .map(|r| {
                if decode {
                    let kv_len = r.seq.len + 1;
                    plan_decode(&self.sparse, r.seq, kv_len, unit)
                } else {
                    r.seq.sel_tail = None;
                    DecodePlan { select: false, tail_start: 0 }
                }
            })
            .collect();
        let steps: Vec<SeqStep> = rows
            .iter()
            .zip(plans)
            .map(|(r, plan)| SeqStep { tokens: r.tokens, cache: &*r.seq, logits: r.logits, plan })
            .collect();
        let out = match head {
            StepHead::Logits(hook) if self.ranks.is_empty() => {
                StepOut::Logits(self.model.forward(&self.backend, &mut self.cache, &self.attn, &steps, hook)?)
            }
            StepHead::Logits(Some(_)) => {
                return Err(Error::InvalidArgument(
                    "per-layer hooks (calibration, recall probes) do not run with tensor parallelism".into(),
                ));
            }
            StepHead::Logits(None) => self.forward_ranks(&steps, Ends::Logits)?,
            StepHead::Argmax => self.forward_ranks(&steps, Ends::Argmax)?,
            StepHead::Sample(settings) => self.forward_ranks(&steps, Ends::Sample(settings))?,
        };
        drop(steps);
        rows.iter_mut().for_each(|r| r.seq.len += r.tokens.len());
        Ok(out)
    }

    /// `step_rows` for one sequence ending with logits (the common case of tests and scoring).
    pub fn step(
        &mut self,
        seq: &mut SeqPages,
        tokens: &[u32],
        logits: Logits,
        hook: Option<LayerHook<B>>,
    ) -> Result<Vec<f32>> {
        self.step_rows(&mut [StepRow { seq, tokens, logits }], StepHead::Logits(hook))?.logits()
    }
}

/// How a forward ends, without a hook (what every rank's thread gets).
#[derive(Clone, Copy)]
enum Ends<'a> {
    Logits,
    Argmax,
    Sample(&'a [[u32; 4]]),
}

/// One rank's forward on the calling thread with its device current. A failure (an error or a
/// panic, which becomes an error) aborts the rank's group first, so its peers never wait forever
/// in a collective this rank will not reach.
fn rank_forward<B: Backend>(
    model: &Llama<B>,
    be: &B,
    cache: &mut KvCache<B>,
    attn: &AttnSettings,
    steps: &[SeqStep],
    ends: Ends,
) -> Result<StepOut> {
    let run = std::panic::AssertUnwindSafe(|| {
        be.bind_thread()?;
        Ok(match ends {
            Ends::Logits => StepOut::Logits(model.forward(be, cache, attn, steps, None)?),
            Ends::Argmax => StepOut::Ids(model.forward_argmax(be, cache, attn, steps)?),
            Ends::Sample(s) => StepOut::Ids(model.forward_sample(be, cache, attn, steps, s)?),
        })
    });
    let r = std::panic::catch_unwind(run).unwrap_or_else(|_| {
        Err(Error::Backend { backend: "tensor-parallel", msg: "a rank panicked during the step".into() })
    });
    if r.is_err() {
        model.collective().into_iter().for_each(|c| c.abort());
    }
    r
}

impl<B: Backend> Engine<B> {
    /// One forward on every rank (module header): rank 0 here, the others on scoped threads
    /// (`rank_forward`). The error returned is the first one that is not a peer's abort.
    fn forward_ranks(&mut self, steps: &[SeqStep], ends: Ends) -> Result<StepOut> {
        let attn = &self.attn;
        let (model, be, cache) = (&self.model, &self.backend, &mut self.cache);
        let (first, rest) = std::thread::scope(|s| {
            let workers: Vec<_> = self
                .ranks
                .iter_mut()
                .map(|rk: &mut Rank<B>| {
                    s.spawn(move || rank_forward(&rk.model, &rk.backend, &mut rk.cache, attn, steps, ends))
                })
                .collect();
            let first = rank_forward(model, be, cache, attn, steps, ends);
            let rest: Vec<Result<StepOut>> =
                workers.into_iter().map(|w| w.join().expect("rank_forward catches its panics")).collect();
            (first, rest)
        });
        let mut errors: Vec<Error> = rest.into_iter().filter_map(|r| r.err()).collect();
        let out = match first {
            Ok(out) if errors.is_empty() => return Ok(out),
            Ok(_) => None,
            Err(e) => Some(e),
        };
        errors.splice(0..0, out);
        // Every rank has returned: the group may be used again.
        self.model.collective().into_iter().for_each(|c| c.reset());
        let i = errors.iter().position(|e| !is_abort(e)).unwrap_or(0);
        Err(errors.swap_remove(i))
    }
}
