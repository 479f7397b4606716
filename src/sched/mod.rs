//! The serving scheduler (continuous batching, docs/serving.md): decides, before every engine
//! step, which sequences run, how many tokens each brings, which are admitted, resumed or
//! preempted. It sees counts only — free pages, free slots, each sequence's token and page counts —
//! and never touches device memory: the engine executes its [`Plan`] (STYLE.md 4).
//!
//! A step is built in three passes under a token budget (`max_batch_tokens`; chunked prefill:
//! one sequence brings at most `prefill_chunk` tokens):
//! 1. running sequences, oldest admission first: a decoding sequence brings its one new token, a
//!    prefilling one its next chunk. When the pages it needs are not free, the most recently
//!    admitted running sequence is preempted (possibly itself) until they are: swapped to host
//!    memory (`PreemptMode::Swap`; the engine may fall back to recompute) or dropped to be
//!    recomputed from its tokens (`PreemptMode::Recompute`).
//! 2. if nothing was preempted this step, queued sequences in arrival order (FCFS: the first that
//!    does not fit stops the pass, nobody overtakes it): a swapped one is resumed (all its pages
//!    back plus its chunk's growth), a waiting one admitted (its first chunk's pages). Either is
//!    taken only when the pages of all its known tokens plus the next one are free, so a resumed
//!    sequence is not preempted again chunk after chunk.
//!
//! Invariants: a sequence is in exactly one state; running sequences never exceed
//! `max_num_seqs` nor the free slots; the pages a plan allocates never exceed the free pages the
//! view reported (after the preemptions it frees); the step's tokens never exceed the budget; a
//! preempted sequence keeps its arrival order, so it is resumed before anything that came later.

use std::collections::HashMap;

pub type SeqId = u64;

/// What to do with the KV of a preempted sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreemptMode {
    /// Copy it to the host tier and restore it on resume.
    Swap,
    /// Drop it and prefill prompt + generated tokens again on resume.
    Recompute,
}

#[derive(Clone, Debug)]
pub struct SchedConfig {
    /// Sequences running at once.
    pub max_num_seqs: usize,
    /// Tokens per step (decode tokens + prefill chunks).
    pub max_batch_tokens: usize,
    /// Tokens one sequence brings per step at most.
    pub prefill_chunk: usize,
    /// Tokens per KV page.
    pub page_size: usize,
    pub preempt: PreemptMode,
}

/// The cache as the scheduler sees it at the start of a step.
#[derive(Clone, Copy, Debug)]
pub struct CacheView {
    pub free_pages: usize,
    pub free_slots: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Queued with no KV (new, or preempted for recompute).
    Waiting,
    Running,
    /// Preempted; its KV is in the host tier.
    Swapped,
}

#[derive(Clone, Debug)]
struct Entry {
    arrival: u64,
    status: Status,
    /// Tokens known: prompt + generated.
    tokens: usize,
    /// Tokens whose KV is stored (on the device, or in the host tier when swapped).
    computed: usize,
    /// Pages held (or held before the swap-out).
    pages: usize,
}

/// One sequence's part of a step: tokens `start..start + n` of its known tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    pub id: SeqId,
    pub start: usize,
    pub n: usize,
    /// The chunk ends at the last known token, so its last row's logits give the next token.
    pub sample: bool,
}

/// The scheduler's decisions for one step, executed in this order: preemptions, swap-ins,
/// admissions, then the batch.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub preempt: Vec<(SeqId, PreemptMode)>,
    pub swap_in: Vec<SeqId>,
    pub admit: Vec<SeqId>,
    pub batch: Vec<Chunk>,
}

pub struct Scheduler {
    cfg: SchedConfig,
    seqs: HashMap<SeqId, Entry>,
    /// Running, in admission order (the last is the next preemption victim).
    running: Vec<SeqId>,
    /// Waiting and swapped, in arrival order.
    queue: Vec<SeqId>,
    next_arrival: u64,
}

impl Scheduler {
    pub fn new(cfg: SchedConfig) -> Self {
        Scheduler { cfg, seqs: HashMap::new(), running: Vec::new(), queue: Vec::new(), next_arrival: 0 }
    }

    pub fn config(&self) -> &SchedConfig {
        &self.cfg
    }

    fn pages_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.cfg.page_size)
    }

    /// Queue a new sequence of `prompt_len` tokens.
    pub fn add(&mut self, id: SeqId, prompt_len: usize) {
        let arrival = self.next_arrival;
        self.next_arrival += 1;
        self.seqs.insert(id, Entry { arrival, status: Status::Waiting, tokens: prompt_len, computed: 0, pages: 0 });
        self.queue.push(id);
    }

    pub fn status(&self, id: SeqId) -> Option<Status> {
        self.seqs.get(&id).map(|e| e.status)
    }
    pub fn running(&self) -> &[SeqId] {
        &self.running
    }
    /// Waiting and swapped sequences in arrival order.
    pub fn queued(&self) -> &[SeqId] {
        &self.queue
    }
    pub fn num_swapped(&self) -> usize {
        self.queue.iter().filter(|id| self.status(**id) == Some(Status::Swapped)).count()
    }
    pub fn is_empty(&self) -> bool {
        self.seqs.is_empty()
    }

    /// The step ran: `id`'s KV now holds `n` more tokens.
    pub fn on_computed(&mut self, id: SeqId, n: usize) {
        if let Some(e) = self.seqs.get_mut(&id) {
            e.computed += n;
        }
    }
    /// `id` sampled one more token.
    pub fn on_token(&mut self, id: SeqId) {
        if let Some(e) = self.seqs.get_mut(&id) {
            e.tokens += 1;
        }
    }
    /// The engine could not swap `id` out (host tier full, or evicted from it later): its KV is
    /// gone, so it is recomputed when resumed.
    pub fn swap_lost(&mut self, id: SeqId) {
        if let Some(e) = self.seqs.get_mut(&id)
            && e.status == Status::Swapped
        {
            e.status = Status::Waiting;
            e.computed = 0;
            e.pages = 0;
        }
    }
    /// Forget `id` (finished, cancelled or failed), whatever its state.
    pub fn remove(&mut self, id: SeqId) {
        self.seqs.remove(&id);
        self.running.retain(|&r| r != id);
        self.queue.retain(|&q| q != id);
    }

    /// Decide the next step.
    pub fn schedule(&mut self, view: CacheView) -> Plan {
        let mut plan = Plan::default();
        let mut free = view.free_pages;
        let mut slots = view.free_slots;
        let mut budget = self.cfg.max_batch_tokens;
        self.schedule_running(&mut plan, &mut free, &mut slots, &mut budget);
        if plan.preempt.is_empty() {
            self.schedule_queued(&mut plan, &mut free, &mut slots, &mut budget);
        }
        plan
    }

    /// Tokens `id` brings this step within `budget`.
    fn chunk_len(&self, e: &Entry, budget: usize) -> usize {
        (e.tokens - e.computed).min(self.cfg.prefill_chunk).min(budget)
    }

    fn schedule_running(&mut self, plan: &mut Plan, free: &mut usize, slots: &mut usize, budget: &mut usize) {
        let mut i = 0;
        while i < self.running.len() {
            let id = self.running[i];
            let e = &self.seqs[&id];
            let n = self.chunk_len(e, *budget);
            if n == 0 {
                i += 1;
                continue;
            }
            let need = self.pages_for(e.computed + n) - e.pages;
            let mut preempted_self = false;
            while need > *free {
                let victim = self.running.pop().expect("the sequence being scheduled is running");
                *free += self.preempt(victim, plan);
                *slots += 1;
                if victim == id {
                    preempted_self = true;
                    break;
                }
            }
            if preempted_self {
                break;
            }
            *free -= need;
            *budget -= n;
            let e = self.seqs.get_mut(&id).expect("running sequence has an entry");
            e.pages += need;
            plan.batch.push(Chunk { id, start: e.computed, n, sample: e.computed + n == e.tokens });
            i += 1;
        }
    }

    /// Move a running sequence back to the queue (in arrival order); returns the pages it frees.
    fn preempt(&mut self, id: SeqId, plan: &mut Plan) -> usize {
        let mode = self.cfg.preempt;
        let e = self.seqs.get_mut(&id).expect("victim has an entry");
        let freed = e.pages;
        match mode {
            PreemptMode::Swap => e.status = Status::Swapped,
            PreemptMode::Recompute => {
                e.status = Status::Waiting;
                e.computed = 0;
                e.pages = 0;
            }
        }
        let arrival = e.arrival;
        let at = self.queue.iter().position(|q| self.seqs[q].arrival > arrival).unwrap_or(self.queue.len());
        self.queue.insert(at, id);
        plan.preempt.push((id, mode));
        freed
    }

    fn schedule_queued(&mut self, plan: &mut Plan, free: &mut usize, slots: &mut usize, budget: &mut usize) {
        while let Some(&id) = self.queue.first() {
            if self.running.len() >= self.cfg.max_num_seqs || *slots == 0 {
                break;
            }
            let e = &self.seqs[&id];
            let n = self.chunk_len(e, *budget);
            if n == 0 {
                break;
            }
            let need = self.pages_for(e.computed + n);
            // Admit only when all its known tokens and the next one fit (the chunk alone would
            // let a resumed sequence be preempted again chunk after chunk).
            if self.pages_for(e.tokens + 1).max(need) > *free {
                break;
            }
            *free -= need;
            *slots -= 1;
            *budget -= n;
            let e = self.seqs.get_mut(&id).expect("queued sequence has an entry");
            match e.status {
                Status::Swapped => plan.swap_in.push(id),
                _ => plan.admit.push(id),
            }
            e.status = Status::Running;
            e.pages = need;
            plan.batch.push(Chunk { id, start: e.computed, n, sample: e.computed + n == e.tokens });
            self.queue.remove(0);
            self.running.push(id);
        }
    }
}

#[cfg(test)]
mod tests;
