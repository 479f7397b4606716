//! NCCL collectives between the CUDA devices of one process (tensor parallelism,
//! docs/tensor-parallel.md): one communicator per rank, made together by `ncclCommInitAll` over
//! the ranks' device ordinals, each collective enqueued on its rank's stream.
//!
//! A collective is a recorded stream operation like a kernel launch or a cuBLAS GEMM
//! (`graph::NcclRec`): inside a decode step's graph region it joins the recorded list and a
//! capture puts it in the step's CUDA graph (NCCL supports stream capture since 2.9), so a
//! tensor-parallel decode step is one graph replay per rank. A list is captured only after it
//! ran eagerly once (graph.rs), so NCCL's lazy connection setup happens outside any capture.
//! While profiling, each collective is timed as its own op (`all_reduce`, `all_gather`), which
//! includes the time a rank waits for its peers.
//!
//! libnccl is loaded at run time (cudarc's dynamic loading): `nccl_present` is checked before
//! any call, so a machine without NCCL gets a clear error, never a missing-symbol panic. cudarc
//! looks for `libnccl.so` (and `.so.12`, `.so.11`, ...), not the `libnccl.so.2` NCCL installs:
//! scripts/cuda_env.sh links one to the other. Only NCCL 2.x symbols every release has are used
//! (ncclCommInitAll, ncclAllReduce, ncclAllGather, ncclCommAbort).
//! NCCL needs a distinct GPU per rank; ranks sharing a GPU use the host collective
//! (`backend::collective::HostCollective`). `abort` cannot interrupt a collective already on the
//! device: a rank that fails mid-step leaves the others' NCCL kernels waiting, which is why every
//! rank validates the same inputs before the first collective of a step.

use cudarc::nccl::{result, sys};

use super::context::{Gpu, err};
use super::graph::NcclRec;
use super::{CudaBackend, CudaBuffer, need};
use crate::backend::DType;
use crate::backend::collective::Collective;
use crate::error::Result;

/// Whether libnccl can be loaded.
pub fn nccl_present() -> bool {
    // SAFETY: only tries to dlopen libnccl.
    unsafe { sys::is_culib_present() }
}

/// One rank's NCCL communicator (an opaque handle NCCL lets any thread use with the rank's
/// device current; calls on one communicator come from one thread at a time: its rank's).
struct Comm(sys::ncclComm_t);

// SAFETY: see `Comm`: the handle is used by its rank's thread only, one call at a time.
unsafe impl Send for Comm {}
// SAFETY: as above; `&Comm` is only read (the handle value) by the thread running its rank.
unsafe impl Sync for Comm {}

impl Drop for Comm {
    fn drop(&mut self) {
        // Abort rather than destroy: it never waits for peers, whatever state they are in.
        // SAFETY: the handle came from ncclCommInitAll and is dropped once.
        let _ = unsafe { result::comm_abort(self.0) };
    }
}

/// One rank's handle on an NCCL group.
pub struct NcclCollective {
    rank: usize,
    size: usize,
    comm: Comm,
}

impl NcclCollective {
    /// The communicators of the ranks whose backends are `ranks` (rank order), one distinct GPU
    /// each.
    pub fn group(ranks: &[&CudaBackend]) -> Result<Vec<NcclCollective>> {
        if !nccl_present() {
            return Err(err(
                "NCCL was not found: cudarc loads libnccl.so (or libnccl.so.12 ...), not the libnccl.so.2 that NCCL installs: link libnccl.so to it on the library path (scripts/cuda_env.sh does), or use --tp-comm host",
            ));
        }
        let devs: Vec<i32> = ranks.iter().map(|b| b.gpu().ctx.ordinal() as i32).collect();
        if let Some(d) = devs.iter().find(|&&d| devs.iter().filter(|&&e| e == d).count() > 1) {
            return Err(err(format!(
                "NCCL needs a GPU per rank; several ranks are on GPU {d} (use --tp-comm host to share a GPU)"
            )));
        }
        let mut comms = vec![std::ptr::null_mut(); devs.len()];
        // SAFETY: `comms` has room for one handle per device in `devs`.
        unsafe { result::comm_init_all(comms.as_mut_ptr(), devs.len() as i32, devs.as_ptr()) }
            .map_err(|e| err(format!("ncclCommInitAll over GPUs {devs:?}: {e:?}")))?;
        let size = comms.len();
        Ok(comms.into_iter().enumerate().map(|(rank, c)| NcclCollective { rank, size, comm: Comm(c) }).collect())
    }

    fn rec(&self, gather: bool, send: u64, recv: u64, count: usize) -> NcclRec {
        NcclRec { gather, send, recv, count, comm: self.comm.0 as usize }
    }
}

impl Collective<CudaBackend> for NcclCollective {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn all_reduce_sum(&self, be: &CudaBackend, buf: &mut CudaBuffer, len: usize) -> Result<()> {
        need(buf, DType::F32, len, "all_reduce buf")?;
        be.gpu().collective("all_reduce", self.rec(false, buf.ptr(), buf.ptr(), len))
    }
    fn all_gather(&self, be: &CudaBackend, src: &CudaBuffer, len: usize, dst: &mut CudaBuffer) -> Result<()> {
        need(src, DType::F32, len, "all_gather src")?;
        need(dst, DType::F32, len * self.size, "all_gather dst")?;
        be.gpu().collective("all_gather", self.rec(true, src.ptr(), dst.ptr(), len))
    }
    fn kind(&self) -> &'static str {
        "nccl"
    }
}

impl Gpu {
    /// Enqueue a recorded collective on the stream (or into the graph being captured).
    pub(super) fn run_nccl(&self, n: &NcclRec) -> Result<()> {
        let (f32_, comm) = (sys::ncclDataType_t::ncclFloat32, n.comm as sys::ncclComm_t);
        let stream = self.stream.cu_stream() as sys::cudaStream_t;
        // SAFETY: the pointers were checked against `count` (and `size * count` for the gather's
        // output) when the collective was enqueued, and the buffers outlive the step; `comm` is
        // this rank's live communicator on this device.
        let r = unsafe {
            if n.gather {
                result::all_gather(n.send as *const _, n.recv as *mut _, n.count, f32_, comm, stream)
            } else {
                let sum = sys::ncclRedOp_t::ncclSum;
                result::all_reduce(n.send as *const _, n.recv as *mut _, n.count, f32_, sum, comm, stream)
            }
        };
        r.map(|_| ()).map_err(|e| err(format!("NCCL {}: {e:?}", if n.gather { "all_gather" } else { "all_reduce" })))
    }
}
