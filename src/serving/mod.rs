//! The serving core, above the engine and the scheduler (docs/architecture.md, "Layers"): it
//! executes the scheduler's plans (src/sched) on an [`Engine`] — admissions, swap-outs to the
//! host tier and swap-ins from it, drops for recompute, one ragged forward per step — then
//! samples, detokenizes, applies stop conditions and sends each request's events over its
//! channel. The HTTP layer (src/server) sits on top and only validates, tokenizes and forwards.
//!
//! Invariants: the scheduler decides and this module carries out (it never second-guesses a
//! plan, it only reports what could not be done: a lost swap becomes a recompute); a request that
//! ends for any reason (finished, cancelled, failed) releases its pages, ring, slot and host copy
//! in the same step; a failure of one request is reported to that request only, except a failed
//! forward, which fails the requests of that step and nobody else. A request whose client went
//! away (its event receiver dropped) is cancelled at the start of the next step.
//!
//! A scheduled batch is one engine step, `Engine::step_rows` (src/engine/step.rs), the same step
//! generation and scoring run: its decode rule (all rows single tokens: decode attention with page
//! selection; otherwise prefill attention for every row, and decode rows re-select at their next
//! pure decode step) is the engine's, not re-implemented here.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::mpsc::UnboundedSender;

use crate::backend::Backend;
use crate::engine::{Engine, FinishReason, StepHead, StepRow};
use crate::error::{Error, Result};
use crate::kv::{HostTier, SeqPages};
use crate::model::llama::Logits;
use crate::sampling::{NO_LOGIT, NO_TOKEN, Sampler, SamplingParams};
use crate::sched::{CacheView, Chunk, Plan, PreemptMode, SchedConfig, Scheduler, SeqId};
use crate::tokenizer::{StreamDecoder, TextTokenizer};

/// One completion request, tokenized and validated.
#[derive(Clone, Debug)]
pub struct ServeRequest {
    pub prompt: Vec<u32>,
    /// Generated tokens at most (>= 1).
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Generation stops before any of these strings (not included in the output).
    pub stop: Vec<String>,
    /// Generation stops after any of these tokens (the model's end tokens unless ignore_eos).
    pub stop_ids: Vec<u32>,
}

/// What a request's client receives, in order: deltas, then exactly one `Done` or `Error`.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// New text (possibly empty while a partial character or stop string is held back) and the
    /// tokens sampled since the last event.
    Delta {
        text: String,
        tokens: Vec<u32>,
    },
    Done {
        finish: FinishReason,
        prompt_tokens: usize,
        completion_tokens: usize,
    },
    Error(String),
}

pub type EventTx = UnboundedSender<Event>;

#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub sched: SchedConfig,
    /// Byte limit of the host tier that swapped-out sequences go to.
    pub swap_bytes: usize,
}

/// Counters and gauges for /metrics, updated every step.
#[derive(Clone, Debug, Default)]
pub struct ServeStats {
    pub running: usize,
    /// The most sequences that were running (holding KV on the device) at once, since start.
    pub peak_running: usize,
    pub waiting: usize,
    pub swapped: usize,
    pub pages_used: usize,
    pub pages_total: usize,
    pub host_bytes: usize,
    pub prompt_tokens: u64,
    pub generation_tokens: u64,
    pub preemptions_swap: u64,
    pub preemptions_recompute: u64,
    pub steps: u64,
    pub finished: u64,
    pub cancelled: u64,
}

struct Live {
    req: ServeRequest,
    /// Prompt + generated.
    tokens: Vec<u32>,
    seq: SeqPages,
    sampler: Sampler,
    dec: StreamDecoder<Arc<TextTokenizer>>,
    /// Generated text decoded so far (truncated at a stop string) and how much of it was sent.
    text: String,
    sent: usize,
    /// Tokens sampled since the last event.
    pending: Vec<u32>,
    tx: EventTx,
}

impl Live {
    fn generated(&self) -> usize {
        self.tokens.len() - self.req.prompt.len()
    }
}

pub struct ServeEngine<B: Backend> {
    pub engine: Engine<B>,
    sched: Scheduler,
    tier: HostTier<SeqId>,
    live: HashMap<SeqId, Live>,
    tok: Arc<TextTokenizer>,
    pub stats: ServeStats,
}

impl<B: Backend> ServeEngine<B> {
    pub fn new(engine: Engine<B>, tok: Arc<TextTokenizer>, opts: ServeOptions) -> Result<Self> {
        let mut sc = opts.sched;
        if sc.max_num_seqs == 0 || sc.max_batch_tokens == 0 {
            return Err(Error::Config("max_num_seqs and the step token budget must be at least 1".into()));
        }
        sc.page_size = engine.cache.shape.page_size;
        sc.prefill_chunk = sc.prefill_chunk.clamp(1, engine.prefill_chunk.max(1));
        sc.max_num_seqs = sc.max_num_seqs.min(engine.cache.shape.max_seqs);
        let stats = ServeStats { pages_total: engine.cache.shape.num_pages, ..Default::default() };
        Ok(ServeEngine {
            engine,
            sched: Scheduler::new(sc),
            tier: HostTier::new(opts.swap_bytes),
            live: HashMap::new(),
            tok,
            stats,
        })
    }

    pub fn scheduler(&self) -> &Scheduler {
        &self.sched
    }
    pub fn has_work(&self) -> bool {
        !self.live.is_empty()
    }
    /// The KV pages `id` holds now (empty when queued or unknown).
    pub fn pages_of(&self, id: SeqId) -> Vec<u32> {
        self.live.get(&id).map(|l| l.seq.pages.clone()).unwrap_or_default()
    }
    /// Tokens one request may hold at most: the model's context and the whole KV pool.
    pub fn max_request_tokens(&self) -> usize {
        self.engine.context_len().min(self.engine.capacity())
    }

    /// Queue a request; a request that can never run is refused here.
    pub fn add(&mut self, id: SeqId, req: ServeRequest, tx: EventTx) -> Result<()> {
        if req.prompt.is_empty() {
            return Err(Error::InvalidArgument("the prompt is empty".into()));
        }
        if req.max_tokens == 0 {
            return Err(Error::InvalidArgument("max_tokens must be at least 1".into()));
        }
        if self.live.contains_key(&id) {
            return Err(Error::InvalidArgument(format!("request {id} is already queued")));
        }
        req.sampling.validate().map_err(Error::InvalidArgument)?;
        let vocab = self.engine.model.cfg.vocab_size;
        if let Some(t) = req.prompt.iter().find(|&&t| t as usize >= vocab) {
            return Err(Error::InvalidArgument(format!("token id {t} is outside the vocabulary")));
        }
        let total = req.prompt.len() + req.max_tokens;
        if total > self.max_request_tokens() {
            return Err(Error::PromptTooLong { tokens: total, context: self.max_request_tokens() });
        }
        self.sched.add(id, req.prompt.len());
        self.stats.prompt_tokens += req.prompt.len() as u64;
        let live = Live {
            tokens: req.prompt.clone(),
            sampler: Sampler::new(req.sampling.clone()),
            seq: SeqPages::default(),
            dec: StreamDecoder::new(self.tok.clone()),
            text: String::new(),
            sent: 0,
            pending: vec![],
            req,
            tx,
        };
        self.live.insert(id, live);
        self.refresh_stats();
        Ok(())
    }

    /// Cancel `id` (client gone): everything it holds is released.
    pub fn cancel(&mut self, id: SeqId) {
        if self.end(id).is_some() {
            self.stats.cancelled += 1;
        }
    }

    /// Forget `id` everywhere and release its cache; returns its state.
    fn end(&mut self, id: SeqId) -> Option<Live> {
        let mut live = self.live.remove(&id)?;
        self.sched.remove(id);
        self.tier.remove(id);
        if let Err(e) = self.engine.cache.release(&mut live.seq) {
            tracing::error!("releasing request {id}: {e}");
        }
        Some(live)
    }

    fn fail(&mut self, id: SeqId, msg: String) {
        if let Some(l) = self.end(id) {
            let _ = l.tx.send(Event::Error(msg));
        }
    }

    /// One engine step: cancel requests whose clients left, schedule, execute, sample, stream.
    pub fn step(&mut self) -> Result<()> {
        let gone: Vec<SeqId> = self.live.iter().filter(|(_, l)| l.tx.is_closed()).map(|(&id, _)| id).collect();
        gone.into_iter().for_each(|id| self.cancel(id));
        let cache = &self.engine.cache;
        let view = CacheView { free_pages: cache.alloc.num_free(), free_slots: cache.free_slots() };
        let plan = self.sched.schedule(view);
        self.stats.peak_running = self.stats.peak_running.max(self.sched.running().len());
        self.execute_moves(&plan);
        let batch: Vec<Chunk> = plan.batch.iter().filter(|c| self.live.contains_key(&c.id)).copied().collect();
        if !batch.is_empty() {
            self.run_batch(&batch);
            self.stats.steps += 1;
        }
        self.refresh_stats();
        Ok(())
    }

    /// Preemptions, swap-ins and admissions of a plan.
    fn execute_moves(&mut self, plan: &Plan) {
        for &(id, mode) in &plan.preempt {
            self.preempt(id, mode);
        }
        for &id in &plan.swap_in {
            let r = match self.tier.remove(id) {
                Some(copy) => self.engine.swap_in(&copy),
                None => Err(Error::InvalidArgument("swapped KV is missing from the host tier".into())),
            };
            match r {
                Ok(seq) => self.live.get_mut(&id).expect("scheduled request is live").seq = seq,
                Err(e) => self.fail(id, format!("resuming after preemption: {e}")),
            }
        }
        for &id in &plan.admit {
            match self.engine.cache.admit() {
                Ok(seq) => self.live.get_mut(&id).expect("scheduled request is live").seq = seq,
                Err(e) => self.fail(id, format!("admission: {e}")),
            }
        }
    }

    fn preempt(&mut self, id: SeqId, mode: PreemptMode) {
        let Some(live) = self.live.get_mut(&id) else { return };
        let mut seq = std::mem::take(&mut live.seq);
        let mut swapped = false;
        if mode == PreemptMode::Swap {
            match self.engine.swap_out(&seq) {
                Ok(copy) => match self.tier.insert(id, copy) {
                    Ok(evicted) => {
                        swapped = true;
                        evicted.into_iter().for_each(|e| self.sched.swap_lost(e));
                    }
                    Err(_) => tracing::info!("request {id}: host tier too small, recompute instead"),
                },
                Err(e) => tracing::warn!("request {id}: swap-out failed ({e}), recompute instead"),
            }
        }
        if swapped {
            self.stats.preemptions_swap += 1;
        } else {
            self.sched.swap_lost(id);
            self.stats.preemptions_recompute += 1;
        }
        if let Err(e) = self.engine.cache.release(&mut seq) {
            self.fail(id, format!("preemption: {e}"));
        }
    }

    /// Reserve each request's pages (a failed reservation fails that request alone), run the
    /// batch as one engine step (`Engine::step_rows`: its plan and decode rule are the engine's),
    /// then stream the rows that sampled a token.
    fn run_batch(&mut self, batch: &[Chunk]) {
        let mut ok = Vec::with_capacity(batch.len());
        for c in batch {
            let live = self.live.get_mut(&c.id).expect("scheduled request is live");
            if let Err(e) = self.engine.reserve(&mut live.seq, c.n) {
                let msg = format!("KV reservation: {e}");
                self.fail(c.id, msg);
                continue;
            }
            ok.push(*c);
        }
        if ok.is_empty() {
            return;
        }
        // One `sample` op picks every wanted token on the device (greedy rows are its argmax), each
        // with its request's settings and next draw; only the ids come back.
        let mut settings = Vec::with_capacity(ok.len());
        for c in ok.iter().filter(|c| c.sample) {
            settings.push(self.live.get_mut(&c.id).expect("batch request is live").sampler.device_settings());
        }
        // The step advances the sequences: they leave their requests for it and come back after.
        let mut seqs: Vec<SeqPages> = ok
            .iter()
            .map(|c| std::mem::take(&mut self.live.get_mut(&c.id).expect("batch request is live").seq))
            .collect();
        let live = &self.live;
        let mut rows: Vec<StepRow> = ok
            .iter()
            .zip(seqs.iter_mut())
            .map(|(c, seq)| StepRow {
                seq,
                tokens: &live[&c.id].tokens[c.start..c.start + c.n],
                logits: if c.sample { Logits::Last } else { Logits::None },
            })
            .collect();
        let out = self.engine.step_rows(&mut rows, StepHead::Sample(&settings)).and_then(|o| o.ids());
        drop(rows);
        for (c, seq) in ok.iter().zip(seqs) {
            self.live.get_mut(&c.id).expect("batch request is live").seq = seq;
        }
        match out {
            Ok(ids) => self.after_forward(&ok, ids),
            Err(e) => {
                for c in &ok {
                    self.fail(c.id, format!("engine step failed: {e}"));
                }
            }
        }
    }

    fn after_forward(&mut self, batch: &[Chunk], ids: Vec<u32>) {
        let mut row = 0;
        for c in batch {
            self.sched.on_computed(c.id, c.n);
            if !c.sample {
                continue;
            }
            let token = match ids.get(row) {
                Some(&NO_TOKEN) => Err(NO_LOGIT.to_string()),
                Some(&t) => Ok(t),
                None => Err("no token came back".to_string()),
            };
            row += 1;
            match token {
                Ok(t) => self.on_token(c.id, t),
                Err(e) => self.fail(c.id, format!("sampling: {e}")),
            }
        }
    }

    /// Append a sampled token, stream what it completes, and finish the request if it is done.
    fn on_token(&mut self, id: SeqId, t: u32) {
        self.sched.on_token(id);
        self.stats.generation_tokens += 1;
        let live = self.live.get_mut(&id).expect("sampled request is live");
        live.tokens.push(t);
        live.pending.push(t);
        let mut finish = None;
        match live.dec.push(t) {
            Ok(piece) => live.text.push_str(&piece),
            Err(e) => {
                let msg = format!("detokenizing: {}", e.0);
                self.fail(id, msg);
                return;
            }
        }
        if let Some(at) = find_stop(&live.text, live.sent, &live.req.stop) {
            live.text.truncate(at);
            finish = Some((FinishReason::Stop, true));
        } else if live.req.stop_ids.contains(&t) {
            finish = Some((FinishReason::Stop, false));
        } else if live.generated() >= live.req.max_tokens {
            finish = Some((FinishReason::Length, false));
        }
        match finish {
            None => {
                let hold = live.req.stop.iter().map(|s| s.len()).max().unwrap_or(1).saturating_sub(1);
                let end = floor_char(&live.text, live.text.len().saturating_sub(hold).max(live.sent));
                send_delta(live, end);
            }
            Some((f, at_stop_string)) => self.finish(id, f, at_stop_string),
        }
    }

    /// End `id` with `finish`: flush the detokenizer (unless the text was cut at a stop string),
    /// send the rest of the text and `Done`.
    fn finish(&mut self, id: SeqId, finish: FinishReason, at_stop_string: bool) {
        let Some(mut live) = self.end(id) else { return };
        if !at_stop_string {
            if let Ok(rest) = live.dec.finish() {
                live.text.push_str(&rest);
            }
            if let Some(at) = find_stop(&live.text, live.sent, &live.req.stop) {
                live.text.truncate(at);
            }
        }
        let end = live.text.len();
        send_delta(&mut live, end);
        let done = Event::Done { finish, prompt_tokens: live.req.prompt.len(), completion_tokens: live.generated() };
        let _ = live.tx.send(done);
        self.stats.finished += 1;
    }

    fn refresh_stats(&mut self) {
        let s = &mut self.stats;
        s.running = self.sched.running().len();
        s.swapped = self.sched.num_swapped();
        s.waiting = self.sched.queued().len() - s.swapped;
        s.pages_used = s.pages_total - self.engine.cache.alloc.num_free();
        s.host_bytes = self.tier.used();
    }
}

/// Send the text up to byte `end` not yet sent, with the pending tokens (nothing if both empty).
fn send_delta(live: &mut Live, end: usize) {
    let end = end.max(live.sent);
    if end == live.sent && live.pending.is_empty() {
        return;
    }
    let text = live.text[live.sent..end].to_string();
    live.sent = end;
    let tokens = std::mem::take(&mut live.pending);
    let _ = live.tx.send(Event::Delta { text, tokens });
}

/// The largest char boundary of `s` at or below `i`.
fn floor_char(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Byte offset of the earliest stop string in `text` that ends after `sent - longest stop` (text
/// before that was already checked), if any.
fn find_stop(text: &str, sent: usize, stops: &[String]) -> Option<usize> {
    let longest = stops.iter().map(|s| s.len()).max()?;
    let from = floor_char(text, sent.saturating_sub(longest));
    stops.iter().filter(|s| !s.is_empty()).filter_map(|s| text[from..].find(s.as_str()).map(|i| from + i)).min()
}

#[cfg(test)]
mod tests {
    use super::{find_stop, floor_char};

    #[test]
    fn stop_strings_are_found_across_deltas() {
        let stops = vec!["END".to_string(), "\n\n".to_string()];
        assert_eq!(find_stop("abc EN", 0, &stops), None);
        assert_eq!(find_stop("abc END more", 4, &stops), Some(4));
        assert_eq!(find_stop("a\n\nb END", 0, &stops), Some(1));
        assert_eq!(find_stop("anything", 0, &[]), None);
        assert_eq!(floor_char("aé", 2), 1);
    }
}
