//! CUDA-graph replay of recorded launch sequences (the decode step).
//!
//! Between `Backend::graph_begin` and `graph_end` the backend does not launch: each kernel
//! launch is recorded as a [`Rec`] — function, grid, block, shared memory and the exact argument
//! bytes (parameter struct, device pointers, scalars). At `graph_end` the recorded list is looked
//! up in a small cache of instantiated graphs by hash and compared **exactly**: a graph is
//! replayed only when its launches are byte-identical to the ones asked for, so replay is
//! equivalent to launching them one by one (kernels read everything that changes from step to
//! step — token ids, positions, page tables, lengths, selections — from device buffers, never
//! from their arguments). A list that misses is launched one kernel at a time; a list that missed
//! recently ([`RECENT_MISSES`]) is captured into a graph (stream capture), instantiated, cached
//! (LRU, [`MAX_GRAPHS`]) and launched; a capture that fails (another thread's synchronising call
//! on the same context invalidates it) is dropped and the list runs eagerly. So a steady decode loop runs eagerly once, captures once
//! and replays from then on; a list seen once (a one-off batch shape) never pays for a capture.
//!
//! NCCL collectives (tensor parallelism: [`NcclRec`], nccl.rs) are recorded the same way, so a
//! captured tensor-parallel decode step holds its all-reduces and replays as one graph per rank.
//!
//! cuBLAS GEMMs are recorded in the list too ([`GemmRec`]; cuBLAS runs on the same stream with a
//! workspace set at start, so a capture records its kernels): the batched decode step, whose
//! projections are GEMMs, replays as one graph like the batch-1 step of GEMVs.
//!
//! Invariants: while recording, every other stream operation (allocation, copy, event,
//! synchronisation, scratch growth) first flushes the recorded launches (`Gpu::flush`), so stream
//! order is what the caller wrote. The caller must not free a buffer the recorded launches use
//! before `graph_end` (the model's step holds all its buffers until then). Profiling records
//! events around every launch, so it turns recording off. `CudaOptions::graph_replay = false` (or
//! `CudaBackend::set_graph_replay(false)`) turns replay off — every list launches eagerly — for
//! the bit-identity test (tests/cuda_e2e.rs) and graphs-off measurements.

use std::collections::VecDeque;

use cudarc::driver::sys;

/// Instantiated graphs kept (least recently used evicted).
pub const MAX_GRAPHS: usize = 16;
/// A miss whose hash is among this many recent misses is captured.
pub const RECENT_MISSES: usize = 4;

/// One recorded kernel launch, or (with `gemm`) one cuBLAS GEMM: both are stream work that a
/// graph capture records, so a decode step whose projections run on cuBLAS is still one list.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Rec {
    pub func: usize,
    pub grid: (u32, u32, u32),
    pub block: u32,
    pub smem: u32,
    pub params: Vec<u8>,
    pub ptrs: Vec<u64>,
    pub scalars: Vec<u32>,
    pub gemm: Option<GemmRec>,
    /// An NCCL collective (tensor parallelism, nccl.rs): stream work a capture records too, so
    /// a tensor-parallel decode step is still one graph.
    pub nccl: Option<NcclRec>,
}

/// An f32 NCCL collective on the stream: `all_reduce` sums `count` floats in place at `send`
/// (`recv == send`); `all_gather` stacks every rank's `count` floats from `send` at `recv`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct NcclRec {
    pub gather: bool,
    pub send: u64,
    pub recv: u64,
    pub count: usize,
    /// The `ncclComm_t` (an address; the communicator outlives the backend's use of it).
    pub comm: usize,
}

/// A 16-bit tensor-core GEMM: out[r * ldc + c] (f32) = x[r][:] . w[c][:] for r < m, c < n, x and w
/// both f16 or both bf16, f32 accumulation, those elements overwritten (others untouched), or
/// with `acc` added to (beta = 1). Pointers are device addresses (`out` already offset to the
/// first output element).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct GemmRec {
    pub m: i32,
    pub n: i32,
    pub k: i32,
    pub bf16: bool,
    /// out in the inputs' 16-bit dtype (`Backend::matmul_out16_dtype`), else f32.
    pub out16: bool,
    /// Leading dimension of out (elements between rows; n for a dense output).
    pub ldc: i32,
    pub w: u64,
    pub x: u64,
    pub out: u64,
    /// out += the product (cuBLAS beta = 1; `MatmulParams::accumulate`), else out = it.
    pub acc: bool,
    /// Independent products of the same shape (cuBLAS strided batched): product i reads
    /// `w + i * batch.w`, `x + i * batch.x` and writes `out + i * batch.out` (element strides).
    pub batch: GemmBatch,
}

/// [`GemmRec::batch`]: how many products and their element strides (w, x, out).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct GemmBatch {
    pub count: i32,
    pub w: i64,
    pub x: i64,
    pub out: i64,
}

impl GemmBatch {
    /// One product (a plain GEMM).
    pub const ONE: GemmBatch = GemmBatch { count: 1, w: 0, x: 0, out: 0 };
}

impl Rec {
    pub fn cu_function(&self) -> sys::CUfunction {
        self.func as sys::CUfunction
    }

    /// A library call in the launch list (a cuBLAS GEMM or an NCCL collective): no kernel of ours.
    pub fn library(gemm: Option<GemmRec>, nccl: Option<NcclRec>) -> Rec {
        Rec { func: 0, grid: (1, 1, 1), block: 0, smem: 0, params: vec![], ptrs: vec![], scalars: vec![], gemm, nccl }
    }
}

/// Counters of what `graph_end` did, for benchmarks and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphStats {
    /// Lists replayed from a cached graph.
    pub replays: u64,
    /// Lists captured into a new graph (then launched as that graph).
    pub captures: u64,
    /// Captures that failed (another thread's synchronising call on the same context can
    /// invalidate a capture); those lists ran eagerly instead.
    pub failed_captures: u64,
    /// Lists launched kernel by kernel (first sight, or replay turned off).
    pub eager: u64,
    /// Kernel launches the replays stood for.
    pub replayed_launches: u64,
}

pub struct Cached {
    pub hash: u64,
    pub recs: Vec<Rec>,
    pub graph: SendGraph,
    pub last_used: u64,
}

/// A captured graph that may move to another thread with its backend (a tensor-parallel rank's
/// backend runs its steps on a scoped thread). cudarc leaves `CudaGraph` !Send because it holds
/// raw driver handles; CUDA graph and graph-exec handles are not tied to a thread, only to their
/// context, which `Backend::bind_thread` makes current before the rank's thread uses them.
pub struct SendGraph(pub cudarc::driver::CudaGraph);

// SAFETY: see the type's comment: the handles are used by one thread at a time (the backend is
// not Sync) with their context current; the driver allows that from any thread.
unsafe impl Send for SendGraph {}

/// Recording state and the graph cache (owned by `Gpu`, behind a RefCell).
#[derive(Default)]
pub struct Graphs {
    pub recording: bool,
    pub pending: Vec<Rec>,
    pub cache: Vec<Cached>,
    pub recent_misses: VecDeque<u64>,
    pub stats: GraphStats,
    pub clock: u64,
}

/// What to do with a recorded list.
pub enum Plan {
    Replay(usize),
    Capture,
    Eager,
}

impl Graphs {
    /// Decide for the list `recs` (hash `h`) and update the counters and recent misses.
    pub fn plan(&mut self, recs: &[Rec], h: u64, replay_on: bool) -> Plan {
        self.clock += 1;
        if !replay_on {
            self.stats.eager += 1;
            return Plan::Eager;
        }
        if let Some(i) = self.cache.iter().position(|c| c.hash == h && c.recs == recs) {
            self.cache[i].last_used = self.clock;
            self.stats.replays += 1;
            self.stats.replayed_launches += recs.len() as u64;
            return Plan::Replay(i);
        }
        if self.recent_misses.contains(&h) {
            self.recent_misses.retain(|&m| m != h);
            return Plan::Capture;
        }
        if self.recent_misses.len() == RECENT_MISSES {
            self.recent_misses.pop_front();
        }
        self.recent_misses.push_back(h);
        self.stats.eager += 1;
        Plan::Eager
    }

    /// Cache a new graph, evicting the least recently used one when full; returns its index.
    pub fn insert(&mut self, c: Cached) -> usize {
        if self.cache.len() == MAX_GRAPHS
            && let Some(i) = self.cache.iter().enumerate().min_by_key(|(_, c)| c.last_used).map(|(i, _)| i)
        {
            self.cache.swap_remove(i);
        }
        self.stats.captures += 1;
        self.cache.push(Cached { last_used: self.clock, ..c });
        self.cache.len() - 1
    }
}

/// Hash of a launch list.
pub fn hash(recs: &[Rec]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut s = std::collections::hash_map::DefaultHasher::new();
    recs.hash(&mut s);
    s.finish()
}
