//! Collectives for tensor parallelism (docs/tensor-parallel.md): the ranks of one model, each
//! holding a shard of every weight and of the KV heads, combine their partial results with
//! `all_reduce_sum` (after the row-parallel o_proj and down_proj, and the vocab-parallel
//! embedding) and `all_gather` (the vocab-parallel LM head's logits).
//!
//! A [`Collective`] is one rank's handle on its group. Every rank of a group must call the same
//! collectives in the same order with the same lengths (the forward pass does: all ranks run the
//! same step). Buffers are f32 (activations and logits).
//!
//! [`HostCollective`] works with any backend: each rank downloads its buffer, the ranks meet at a
//! barrier, every rank sums the slots in rank order 0, 1, ... (so every rank gets bit-identical
//! results, and the same results run after run) and uploads the sum. It is the test oracle of the
//! sharded forward pass on the CPU backend and lets two ranks share one GPU; the NCCL collective
//! of the CUDA backend (`cuda::nccl`) is the fast path between GPUs.
//!
//! Invariant: a rank that fails before reaching a collective its peers wait in calls `abort`, so
//! they return an error instead of waiting forever; `reset` (once every rank has returned) makes
//! the group usable again.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::Backend;
use crate::error::{Error, Result};

/// One rank's handle on a group of `size` ranks (see the module header).
pub trait Collective<B: Backend>: Send + Sync {
    fn rank(&self) -> usize;
    fn size(&self) -> usize;
    /// `buf[..len]` (f32) becomes the sum over the ranks of their `buf[..len]`, on every rank.
    fn all_reduce_sum(&self, be: &B, buf: &mut B::Buffer, len: usize) -> Result<()>;
    /// `dst` `[size][len]` (f32): row r is rank r's `src[..len]`, on every rank.
    fn all_gather(&self, be: &B, src: &B::Buffer, len: usize, dst: &mut B::Buffer) -> Result<()>;
    /// Wake every rank waiting in a collective of this group with an error (this rank failed
    /// before reaching it); the group stays failed until `reset`.
    fn abort(&self) {}
    /// Make an aborted group usable again; call only when no rank is inside a collective.
    fn reset(&self) {}
    /// What carries the collectives (`host`, `nccl`), for reports.
    fn kind(&self) -> &'static str;
}

const ABORTED: &str = "another tensor-parallel rank failed during this step";

fn aborted() -> Error {
    Error::Backend { backend: "collective", msg: ABORTED.into() }
}

/// Whether `e` is the error a rank gets when a peer aborted the group (not the cause).
pub fn is_abort(e: &Error) -> bool {
    matches!(e, Error::Backend { backend: "collective", msg } if msg == ABORTED)
}

struct State {
    slots: Vec<Arc<Vec<f32>>>,
    arrived: usize,
    generation: u64,
    aborted: bool,
}

struct Group {
    size: usize,
    state: Mutex<State>,
    cv: Condvar,
}

impl Group {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking rank poisons the lock; the state itself stays consistent (plain fields).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A barrier that an `abort` breaks.
    fn wait<'a>(&'a self, mut st: MutexGuard<'a, State>) -> Result<MutexGuard<'a, State>> {
        if st.aborted {
            return Err(aborted());
        }
        let generation = st.generation;
        st.arrived += 1;
        if st.arrived == self.size {
            st.arrived = 0;
            st.generation += 1;
            self.cv.notify_all();
            return Ok(st);
        }
        while st.generation == generation && !st.aborted {
            st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        if st.aborted { Err(aborted()) } else { Ok(st) }
    }

    /// Publish `data` as this rank's slot and return every rank's slot, in rank order, once all
    /// have published; a second barrier keeps the slots until every rank has read them.
    fn exchange(&self, rank: usize, data: Vec<f32>) -> Result<Vec<Arc<Vec<f32>>>> {
        let mut st = self.lock();
        st.slots[rank] = Arc::new(data);
        let st = self.wait(st)?;
        let all = st.slots.clone();
        drop(self.wait(st)?);
        Ok(all)
    }
}

/// The host-memory collective (module header): deterministic, any backend, ranks on threads of
/// one process.
pub struct HostCollective {
    rank: usize,
    group: Arc<Group>,
}

impl HostCollective {
    /// The handles of a new group of `size` ranks, rank order.
    pub fn group(size: usize) -> Vec<HostCollective> {
        let state =
            State { slots: (0..size).map(|_| Arc::new(vec![])).collect(), arrived: 0, generation: 0, aborted: false };
        let group = Arc::new(Group { size, state: Mutex::new(state), cv: Condvar::new() });
        (0..size).map(|rank| HostCollective { rank, group: group.clone() }).collect()
    }
}

impl<B: Backend> Collective<B> for HostCollective {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.group.size
    }
    fn all_reduce_sum(&self, be: &B, buf: &mut B::Buffer, len: usize) -> Result<()> {
        let all = self.group.exchange(self.rank, be.download_f32(buf, 0, len)?)?;
        let mut sum = all[0].as_ref().clone();
        for part in &all[1..] {
            sum.iter_mut().zip(part.iter()).for_each(|(s, x)| *s += x);
        }
        be.write_f32_at(buf, 0, &sum)
    }
    fn all_gather(&self, be: &B, src: &B::Buffer, len: usize, dst: &mut B::Buffer) -> Result<()> {
        let all = self.group.exchange(self.rank, be.download_f32(src, 0, len)?)?;
        let joined: Vec<f32> = all.iter().flat_map(|p| p.iter().copied()).collect();
        be.write_f32_at(dst, 0, &joined)
    }
    fn abort(&self) {
        self.group.lock().aborted = true;
        self.group.cv.notify_all();
    }
    fn reset(&self) {
        let mut st = self.group.lock();
        (st.aborted, st.arrived) = (false, 0);
    }
    fn kind(&self) -> &'static str {
        "host"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::DType;
    use crate::backend::cpu::CpuBackend;

    /// Each of `n` ranks on its own thread with its own CPU backend runs `f(rank, be, comm)`.
    fn on_ranks<T: Send>(n: usize, f: impl Fn(usize, &CpuBackend, &HostCollective) -> T + Sync) -> Vec<T> {
        let comms = HostCollective::group(n);
        std::thread::scope(|s| {
            let hs: Vec<_> = comms
                .iter()
                .enumerate()
                .map(|(r, c)| {
                    let f = &f;
                    s.spawn(move || f(r, &CpuBackend::new(), c))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn all_reduce_sums_in_rank_order_on_every_rank() {
        let data = |r: usize| -> Vec<f32> { (0..5).map(|i| (r * 10 + i) as f32 * 0.1 + 1e-7 * r as f32).collect() };
        let got = on_ranks(3, |r, be, c| {
            let mut b = be.upload_f32(DType::F32, data(r)).unwrap();
            c.all_reduce_sum(be, &mut b, 5).unwrap();
            // Twice, so the second round reuses the slots.
            c.all_reduce_sum(be, &mut b, 5).unwrap();
            be.download_f32(&b, 0, 5).unwrap()
        });
        let once: Vec<f32> = (0..5).map(|i| (data(0)[i] + data(1)[i]) + data(2)[i]).collect();
        let want: Vec<f32> = once.iter().map(|&x| (x + x) + x).collect();
        for g in &got {
            assert_eq!(g, &want);
        }
    }

    #[test]
    fn all_gather_stacks_rank_rows() {
        let got = on_ranks(4, |r, be, c| {
            let src = be.upload_f32(DType::F32, vec![r as f32; 3]).unwrap();
            let mut dst = be.alloc(DType::F32, 12).unwrap();
            c.all_gather(be, &src, 3, &mut dst).unwrap();
            be.download_f32(&dst, 0, 12).unwrap()
        });
        let want: Vec<f32> = (0..4).flat_map(|r| [r as f32; 3]).collect();
        assert!(got.iter().all(|g| g == &want));
    }

    #[test]
    fn abort_wakes_waiting_ranks() {
        let got = on_ranks(3, |r, be, c| {
            let mut b = be.upload_f32(DType::F32, vec![1.0; 2]).unwrap();
            let first = if r == 1 {
                <HostCollective as Collective<CpuBackend>>::abort(c);
                Err(aborted())
            } else {
                c.all_reduce_sum(be, &mut b, 2)
            };
            first.is_err()
        });
        assert_eq!(got, vec![true, true, true]);
    }
}
