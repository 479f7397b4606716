//! Exact scheduling decisions on hand-built situations (no model, no device).

use super::*;

fn sched(max_num_seqs: usize, budget: usize, chunk: usize, mode: PreemptMode) -> Scheduler {
    Scheduler::new(SchedConfig {
        max_num_seqs,
        max_batch_tokens: budget,
        prefill_chunk: chunk,
        page_size: 4,
        preempt: mode,
    })
}

/// Run a plan as the engine would: every chunk computed, sampled chunks add a token.
fn run(s: &mut Scheduler, plan: &Plan) {
    for c in &plan.batch {
        s.on_computed(c.id, c.n);
        if c.sample {
            s.on_token(c.id);
        }
    }
}

fn chunks(p: &Plan) -> Vec<(SeqId, usize, usize, bool)> {
    p.batch.iter().map(|c| (c.id, c.start, c.n, c.sample)).collect()
}

#[test]
fn chunked_prefill_under_the_token_budget() {
    let mut s = sched(8, 10, 6, PreemptMode::Swap);
    s.add(1, 9);
    s.add(2, 3);
    let view = CacheView { free_pages: 100, free_slots: 8 };
    let p = s.schedule(view);
    assert_eq!(p.admit, vec![1, 2]);
    assert_eq!(chunks(&p), vec![(1, 0, 6, false), (2, 0, 3, true)]);
    run(&mut s, &p);
    let p = s.schedule(view);
    assert!(p.admit.is_empty());
    // 1 finishes its prompt (3 tokens), 2 decodes one token.
    assert_eq!(chunks(&p), vec![(1, 6, 3, true), (2, 3, 1, true)]);
    run(&mut s, &p);
    let p = s.schedule(view);
    assert_eq!(chunks(&p), vec![(1, 9, 1, true), (2, 4, 1, true)]);
}

#[test]
fn budget_and_max_num_seqs_hold_back_arrivals_in_order() {
    let mut s = sched(2, 8, 8, PreemptMode::Swap);
    s.add(1, 5);
    s.add(2, 5);
    s.add(3, 1);
    let view = CacheView { free_pages: 100, free_slots: 8 };
    let p = s.schedule(view);
    // 2 gets only 3 of its 5 tokens (budget); 3 does not overtake it (FCFS) and max_num_seqs is 2.
    assert_eq!(chunks(&p), vec![(1, 0, 5, true), (2, 0, 3, false)]);
    assert_eq!(s.queued(), &[3]);
    run(&mut s, &p);
    s.remove(1);
    let p = s.schedule(view);
    assert_eq!(chunks(&p), vec![(2, 3, 2, true), (3, 0, 1, true)]);
}

#[test]
fn admission_waits_for_pages_and_slots() {
    let mut s = sched(8, 64, 64, PreemptMode::Swap);
    s.add(1, 9); // 3 pages of 4
    s.add(2, 2);
    let p = s.schedule(CacheView { free_pages: 2, free_slots: 8 });
    assert!(p.batch.is_empty() && p.admit.is_empty(), "{p:?}");
    let p = s.schedule(CacheView { free_pages: 3, free_slots: 1 });
    assert_eq!(p.admit, vec![1]);
    assert_eq!(s.queued(), &[2]);
}

#[test]
fn preemption_takes_the_most_recently_admitted_first() {
    let mut s = sched(8, 64, 64, PreemptMode::Swap);
    for id in 1..=3 {
        s.add(id, 4); // one full page each
    }
    // Admission wants room for the prompt and the next token (2 pages), then takes 1.
    let p = s.schedule(CacheView { free_pages: 4, free_slots: 8 });
    assert_eq!(p.admit, vec![1, 2, 3]);
    run(&mut s, &p);
    // Every sequence now needs a second page and none is free: 3 goes (its page lets 1 grow),
    // then 2 needs one and is itself the newest, so it goes too.
    let p = s.schedule(CacheView { free_pages: 0, free_slots: 5 });
    assert_eq!(p.preempt, vec![(3, PreemptMode::Swap), (2, PreemptMode::Swap)]);
    assert_eq!(chunks(&p), vec![(1, 4, 1, true)]);
    assert_eq!(s.status(3), Some(Status::Swapped));
    assert_eq!(s.queued(), &[2, 3]);
    run(&mut s, &p);
    // Resuming 2 needs its page + 1 for its next token; 3 must not overtake it.
    let p = s.schedule(CacheView { free_pages: 1, free_slots: 7 });
    assert!(p.preempt.is_empty() && p.swap_in.is_empty());
    assert_eq!(chunks(&p), vec![(1, 5, 1, true)]);
    let p = s.schedule(CacheView { free_pages: 3, free_slots: 7 });
    assert_eq!(p.swap_in, vec![2]);
    assert_eq!(chunks(&p), vec![(1, 5, 1, true), (2, 4, 1, true)]);
    assert_eq!(s.queued(), &[3]);
}

#[test]
fn a_sequence_preempts_itself_when_it_is_the_newest() {
    let mut s = sched(8, 64, 64, PreemptMode::Recompute);
    s.add(1, 4);
    s.add(2, 4);
    let p = s.schedule(CacheView { free_pages: 3, free_slots: 8 });
    assert_eq!(p.admit, vec![1, 2]);
    run(&mut s, &p);
    s.remove(1); // 1 finished but its page is not counted free yet (the view says 0)
    let p = s.schedule(CacheView { free_pages: 0, free_slots: 8 });
    assert_eq!(p.preempt, vec![(2, PreemptMode::Recompute)]);
    assert!(p.batch.is_empty());
    // Recompute: all 5 known tokens (4 prompt + 1 generated) are prefilled again.
    assert_eq!(s.status(2), Some(Status::Waiting));
    let p = s.schedule(CacheView { free_pages: 2, free_slots: 8 });
    assert_eq!(p.admit, vec![2]);
    assert_eq!(chunks(&p), vec![(2, 0, 5, true)]);
}

#[test]
fn preempted_sequences_keep_their_place_before_later_arrivals() {
    let mut s = sched(8, 64, 64, PreemptMode::Swap);
    s.add(1, 4);
    s.add(2, 4);
    let p = s.schedule(CacheView { free_pages: 3, free_slots: 8 });
    assert_eq!(p.admit, vec![1, 2]);
    run(&mut s, &p);
    s.add(3, 1);
    let p = s.schedule(CacheView { free_pages: 1, free_slots: 6 });
    assert_eq!(p.preempt, vec![(2, PreemptMode::Swap)]);
    assert_eq!(s.queued(), &[2, 3]);
    run(&mut s, &p);
    // A lost swap turns into recompute but keeps the place.
    s.swap_lost(2);
    assert_eq!(s.status(2), Some(Status::Waiting));
    let p = s.schedule(CacheView { free_pages: 2, free_slots: 7 });
    assert_eq!(p.admit, vec![2]);
    assert_eq!(chunks(&p)[1], (2, 0, 5, true));
    assert_eq!(s.queued(), &[3]);
}
