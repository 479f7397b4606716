//! CUDA plumbing: opening a device through cudarc (dynamic loading, so a machine without the
//! driver gets an error value, never a panic), the kernel modules (kernels.rs), typed launches
//! on one stream, cuBLAS, and the scratch buffers ops share.
//!
//! Invariants: everything runs in order on one non-default stream (`stream`); launches between
//! `graph_begin` and `graph_end` are recorded and replayed as CUDA graphs (graph.rs), and every
//! other stream operation flushes them first (`cu_stream()` is the only way to the raw stream for
//! copies and cuBLAS). cudarc's event
//! tracking is off (one stream needs none), so buffers are plain device pointers. Ops enqueue and
//! return; only read-backs and `sync` wait. Kernel functions are loaded from their module on first
//! use and kept. A scratch buffer is replaced only by a larger one; the old one is freed in stream
//! order, after the work that used it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaContext, CudaEvent, CudaFunction, CudaModule, CudaSlice, CudaStream, DeviceRepr};

use super::graph::{self, Cached, GemmRec, GraphStats, Graphs, NcclRec, Plan, Rec, SendGraph};

/// Bytes of cuBLAS workspace.
const BLAS_WORKSPACE: usize = 32 << 20;
use super::kernels;
use super::tma;
use crate::backend::DType;
use crate::error::{Error, Result};

pub(crate) fn err(msg: impl Into<String>) -> Error {
    Error::Backend { backend: "cuda", msg: msg.into() }
}

pub(crate) fn drv(what: &str) -> impl Fn(cudarc::driver::DriverError) -> Error + '_ {
    move |e| err(format!("{what}: {e:?}"))
}

/// A device allocation and what it holds.
pub struct Mem {
    pub slice: CudaSlice<u8>,
    pub ptr: u64,
}

pub struct Gpu {
    /// Bound to the calling thread before raw driver calls (`bind`).
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub blas: CudaBlas,
    /// cuBLAS's workspace (set on the handle at start).
    _blas_ws: CudaSlice<u8>,
    pub cc: (i32, i32),
    pub arch: &'static str,
    pub name: String,
    pub total_mem: usize,
    pub sm_count: u32,
    pub smem_optin: u32,
    modules: HashMap<&'static str, Arc<CudaModule>>,
    funcs: RefCell<HashMap<&'static str, CudaFunction>>,
    /// The dynamic shared memory each kernel may take (its max-dynamic-shared-size attribute, above
    /// 48 KiB): only ever raised, because launches run after they are recorded (a step's list,
    /// graph.rs), so a later, smaller request must not lower what an earlier launch still needs.
    smem_attr: RefCell<HashMap<&'static str, u32>>,
    /// Occupancy (blocks per SM) per (kernel, block size, dynamic shared memory).
    occupancy: RefCell<HashMap<(&'static str, u32, u32), u32>>,
    /// Named scratch buffers (decode partials, GEMM operand halves), grown on demand.
    scratch: RefCell<HashMap<&'static str, Mem>>,
    /// Per-op GPU times while profiling is on (`Backend::set_profiling`).
    profile: RefCell<Option<Profile>>,
    /// Launch recording and the graph cache (graph.rs).
    graphs: RefCell<Graphs>,
    /// Whether recorded lists may be replayed as graphs (else they always launch eagerly).
    replay: std::cell::Cell<bool>,
    /// TMA tensor maps in device memory, per set of KV pools (tma.rs).
    tmaps: RefCell<HashMap<[tma::Pool; tma::SET], Mem>>,
}

/// Events around every launch (recorded on the stream), folded into per-op totals at each sync.
#[derive(Default)]
struct Profile {
    pending: Vec<(&'static str, CudaEvent, CudaEvent)>,
    totals: HashMap<&'static str, (u64, f64)>,
}

/// Whether the CUDA driver library can be loaded at all.
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen libcuda.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

impl Gpu {
    pub fn open(ordinal: usize, opts: &super::CudaOptions) -> Result<Gpu> {
        if !driver_present() {
            return Err(err(
                "no CUDA driver found (libcuda.so could not be loaded); use --device wgpu or --device cpu on this machine",
            ));
        }
        let count = CudaContext::device_count().map_err(drv("cuDeviceGetCount (is an NVIDIA GPU present?)"))?;
        if ordinal >= count as usize {
            return Err(err(format!("cuda:{ordinal} does not exist: this machine has {count} CUDA device(s)")));
        }
        kernels::nvrtc_version()?;
        // SAFETY: only tries to dlopen libcublas.
        if !unsafe { cudarc::cublas::sys::is_culib_present() } {
            return Err(err(
                "cuBLAS (libcublas.so) was not found; put the CUDA toolkit's lib directory on LD_LIBRARY_PATH",
            ));
        }
        let ctx = CudaContext::new(ordinal).map_err(drv("creating the CUDA context"))?;
        // SAFETY: called before any buffer or stream exists; all work goes to one stream.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(drv("creating a stream"))?;
        let blas = CudaBlas::new(stream.clone()).map_err(|e| err(format!("cuBLAS init: {e:?}")))?;
        // An explicit workspace: cuBLAS then allocates nothing per call, which graph capture of a
        // step's GEMMs requires (32 MiB: NVIDIA's recommendation for Hopper).
        let blas_ws = unsafe { stream.alloc::<u8>(BLAS_WORKSPACE) }.map_err(drv("cuBLAS workspace"))?;
        {
            use cudarc::driver::DevicePtr;
            let (ptr, _rec) = blas_ws.device_ptr(&stream);
            // SAFETY: the workspace lives as long as the handle (both owned by Gpu).
            let rc =
                unsafe { cudarc::cublas::sys::cublasSetWorkspace_v2(*blas.handle(), ptr as *mut _, BLAS_WORKSPACE) };
            if rc != cudarc::cublas::sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                return Err(err(format!("cublasSetWorkspace: {rc:?}")));
            }
            // GEMMs with a 16-bit C (Backend::matmul_out16_dtype) reduce split-K partials in f32,
            // not in C's type (the default math mode's reduced-precision reduction put a 160 x 384
            // x 2052 bf16 output 9 units in the last place off the f32 result, H100 2026-12-06).
            // The value 16 is CUBLAS_DEFAULT_MATH | this flag.
            use cudarc::cublas::sys::cublasMath_t::CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION as NO_REDUCED;
            // SAFETY: a valid handle; the mode is a plain flag value.
            let rc = unsafe { cudarc::cublas::sys::cublasSetMathMode(*blas.handle(), NO_REDUCED) };
            if rc != cudarc::cublas::sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                return Err(err(format!("cublasSetMathMode: {rc:?}")));
            }
        }
        let cc = ctx.compute_capability().map_err(drv("compute capability"))?;
        let arch = kernels::arch_name(cc);
        let attr = |a| ctx.attribute(a).map_err(drv("device attribute"));
        use cudarc::driver::sys::CUdevice_attribute as A;
        let sm_count = attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
        let smem_optin = attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)? as u32;
        let mut modules = HashMap::new();
        for (stem, ptx, _cached) in kernels::load_all(arch, opts.kernel_cache.as_deref())? {
            let m = ctx.load_module(cudarc::nvrtc::Ptx::from_src(ptx)).map_err(drv(stem))?;
            modules.insert(stem, m);
        }
        Ok(Gpu {
            name: ctx.name().unwrap_or_default(),
            total_mem: ctx.total_mem().unwrap_or(0),
            ctx,
            stream,
            blas,
            _blas_ws: blas_ws,
            cc,
            arch,
            sm_count,
            smem_optin,
            modules,
            funcs: RefCell::new(HashMap::new()),
            smem_attr: RefCell::new(HashMap::new()),
            occupancy: RefCell::new(HashMap::new()),
            scratch: RefCell::new(HashMap::new()),
            profile: RefCell::new(None),
            graphs: RefCell::new(Graphs::default()),
            replay: std::cell::Cell::new(opts.graph_replay),
            tmaps: RefCell::new(HashMap::new()),
        })
    }

    pub fn alloc_bytes(&self, bytes: usize) -> Result<Mem> {
        self.flush()?;
        // SAFETY: the memory is uninitialised; every op writes its outputs before reading them.
        let slice = unsafe { self.stream.alloc::<u8>(bytes.max(16)) }
            .map_err(|e| err(format!("allocating {bytes} bytes on the device: {e:?}")))?;
        let ptr = {
            use cudarc::driver::DevicePtr;
            slice.device_ptr(&self.stream).0
        };
        // Zeroed like wgpu buffers, so nothing ever reads a previous allocation's data (the KV
        // pools' unwritten slots compare equal to the CPU reference's zeros).
        // SAFETY: ptr..ptr+len is this allocation.
        unsafe { cudarc::driver::result::memset_d8_async(ptr, 0, slice.len(), self.stream.cu_stream()) }
            .map_err(drv("zeroing an allocation"))?;
        Ok(Mem { slice, ptr })
    }

    /// Kernel `name` of module `stem`.
    pub fn func(&self, stem: &'static str, name: &'static str) -> Result<CudaFunction> {
        if let Some(f) = self.funcs.borrow().get(name) {
            return Ok(f.clone());
        }
        let m = self.modules.get(stem).ok_or_else(|| err(format!("kernel module {stem} not loaded")))?;
        let f = m.load_function(name).map_err(drv(name))?;
        self.funcs.borrow_mut().insert(name, f.clone());
        Ok(f)
    }

    /// Let kernel `name` take `smem` bytes of dynamic shared memory: without the attribute a
    /// kernel may take 48 KiB less its static shared memory; above that the attribute is set,
    /// and never lowered (see `smem_attr`).
    fn allow_smem(&self, f: &CudaFunction, name: &'static str, smem: u32) -> Result<()> {
        let mut attr = self.smem_attr.borrow_mut();
        let set = match attr.get(name) {
            Some(&v) => v,
            None => {
                let stat = f.shared_size_bytes().map_err(drv(name))?.max(0) as u32;
                *attr.entry(name).or_insert((48 * 1024u32).saturating_sub(stat))
            }
        };
        if smem > set {
            use cudarc::driver::sys::CUfunction_attribute as FA;
            f.set_attribute(FA::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem as i32).map_err(drv(name))?;
            attr.insert(name, smem);
        }
        Ok(())
    }

    /// Resident blocks per SM of kernel `stem::name` at `block` threads and `smem` bytes of
    /// dynamic shared memory (the driver's occupancy calculator: registers, shared memory per SM
    /// and block limits of this GPU — 164 KiB on sm_80, 228 KiB on sm_90), cached; at least 1.
    pub fn blocks_per_sm(&self, stem: &'static str, name: &'static str, block: u32, smem: u32) -> Result<u32> {
        if let Some(&n) = self.occupancy.borrow().get(&(name, block, smem)) {
            return Ok(n);
        }
        let f = self.func(stem, name)?;
        self.allow_smem(&f, name, smem)?;
        let n = f.occupancy_max_active_blocks_per_multiprocessor(block, smem as usize, None).map_err(drv(name))?.max(1);
        self.occupancy.borrow_mut().insert((name, block, smem), n);
        Ok(n)
    }

    /// Launch `stem::name` with the parameter struct, then device pointers, then u32 scalars
    /// (the argument order every kernel in cuda/ declares).
    pub fn launch<P: DeviceRepr>(
        &self,
        stem: &'static str,
        name: &'static str,
        l: Launch,
        p: &P,
        ptrs: &[u64],
        scalars: &[u32],
    ) -> Result<()> {
        if l.grid.0 == 0 || l.grid.1 == 0 || l.grid.2 == 0 {
            return Ok(());
        }
        let f = self.func(stem, name)?;
        if l.smem > self.smem_optin {
            return Err(err(format!(
                "{name}: needs {} bytes of shared memory, the device has {}",
                l.smem, self.smem_optin
            )));
        }
        if l.smem > 0 {
            self.allow_smem(&f, name, l.smem)?;
        }
        let rec = Rec {
            func: f.cu_function() as usize,
            grid: l.grid,
            block: l.block,
            smem: l.smem,
            // SAFETY: P is a plain #[repr(C)] struct of 4-byte fields (DeviceRepr); its bytes are
            // the kernel's first argument.
            params: unsafe { std::slice::from_raw_parts(p as *const P as *const u8, std::mem::size_of::<P>()) }
                .to_vec(),
            ptrs: ptrs.to_vec(),
            scalars: scalars.to_vec(),
            gemm: None,
            nccl: None,
        };
        // Profiled per entry, not per module: a module's kernels (matmul_quant's x quantization
        // and its GEMVs, the prefill attention variants) are timed apart.
        self.submit(name, rec)
    }

    /// Record `rec` into the current list while recording, else run it now (timed as `op`).
    fn submit(&self, op: &'static str, rec: Rec) -> Result<()> {
        {
            let mut g = self.graphs.borrow_mut();
            if g.recording {
                g.pending.push(rec);
                return Ok(());
            }
        }
        self.bind()?;
        self.timed(op, || self.launch_rec(&rec))
    }

    /// Enqueue a 16-bit cuBLAS GEMM (recorded into the current list while recording, so it is
    /// part of the step's graph).
    pub fn gemm16(&self, g: GemmRec) -> Result<()> {
        self.gemm16_as("matmul_cublas", g)
    }

    /// [`Gpu::gemm16`] profiled as `op` (a GEMM inside another op's launches).
    pub fn gemm16_as(&self, op: &'static str, g: GemmRec) -> Result<()> {
        if g.m <= 0 || g.n <= 0 || g.k <= 0 || g.batch.count <= 0 {
            return Ok(());
        }
        self.submit(op, Rec::library(Some(g), None))
    }

    /// Enqueue an NCCL collective (recorded into the current list while recording, so it is
    /// part of the step's graph; timed as `op` when profiling).
    pub fn collective(&self, op: &'static str, n: NcclRec) -> Result<()> {
        self.submit(op, Rec::library(None, Some(n)))
    }

    fn run_gemm(&self, g: &GemmRec) -> Result<()> {
        use cudarc::cublas::sys as blas;
        let one = 1f32;
        // beta: 1 adds the product to out (GemmRec::acc), 0 overwrites it.
        let beta = if g.acc { 1f32 } else { 0f32 };
        let (tn, nn) = (blas::cublasOperation_t::CUBLAS_OP_T, blas::cublasOperation_t::CUBLAS_OP_N);
        let ty = if g.bf16 { blas::cudaDataType::CUDA_R_16BF } else { blas::cudaDataType::CUDA_R_16F };
        // Row-major out[m][n] = x . w^T is column-major out^T (n x m) = W^T(n x k) . x^T (k x m).
        let cty = if g.out16 { ty } else { blas::cudaDataType::CUDA_R_32F };
        // SAFETY: the caller (ops_matmul) checked that w holds n*k, x m*k 16-bit elements and out
        // (m-1)*ldc + n elements (f32, or 16-bit with out16) from g.out; the handle runs on this
        // stream.
        if g.batch.count > 1 {
            // SAFETY: as above, for each of the batch's products at its strides (checked by the
            // caller against its scratch sizes).
            return unsafe {
                cudarc::cublas::result::gemm_strided_batched_ex(
                    *self.blas.handle(),
                    tn,
                    nn,
                    g.n,
                    g.m,
                    g.k,
                    &one as *const f32 as *const _,
                    g.w as *const _,
                    ty,
                    g.k,
                    g.batch.w,
                    g.x as *const _,
                    ty,
                    g.k,
                    g.batch.x,
                    &beta as *const f32 as *const _,
                    g.out as *mut _,
                    cty,
                    g.ldc,
                    g.batch.out,
                    g.batch.count,
                    blas::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    blas::cublasGemmAlgo_t::CUBLAS_GEMM_DFALT,
                )
            }
            .map_err(|e| err(format!("cuBLAS batched GEMM {} x {}x{}x{}: {e:?}", g.batch.count, g.m, g.n, g.k)));
        }
        unsafe {
            cudarc::cublas::result::gemm_ex(
                *self.blas.handle(),
                tn,
                nn,
                g.n,
                g.m,
                g.k,
                &one as *const f32 as *const _,
                g.w as *const _,
                ty,
                g.k,
                g.x as *const _,
                ty,
                g.k,
                &beta as *const f32 as *const _,
                g.out as *mut _,
                cty,
                g.ldc,
                blas::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                blas::cublasGemmAlgo_t::CUBLAS_GEMM_DFALT,
            )
        }
        .map_err(|e| err(format!("cuBLAS GEMM {}x{}x{}: {e:?}", g.m, g.n, g.k)))
    }

    /// Launch one recorded kernel (or GEMM) on the stream (or into the graph being captured).
    fn launch_rec(&self, r: &Rec) -> Result<()> {
        if let Some(g) = &r.gemm {
            return self.run_gemm(g);
        }
        if let Some(n) = &r.nccl {
            return self.run_nccl(n);
        }
        let mut args: Vec<*mut std::ffi::c_void> = Vec::with_capacity(1 + r.ptrs.len() + r.scalars.len());
        args.push(r.params.as_ptr() as *mut _);
        args.extend(r.ptrs.iter().map(|x| x as *const u64 as *mut _));
        args.extend(r.scalars.iter().map(|x| x as *const u32 as *mut _));
        // SAFETY: the argument list matches the kernel's signature (param struct bytes, pointers,
        // u32 scalars, checked by the parity tests), every pointer was validated by the op against
        // the element counts its params imply, and `args` (and `r`) outlive the call.
        unsafe {
            cudarc::driver::result::launch_kernel(
                r.cu_function(),
                r.grid,
                (r.block, 1, 1),
                r.smem,
                self.stream.cu_stream(),
                &mut args,
            )
        }
        .map_err(drv("launch"))
    }

    /// Start recording launches (no-op while profiling: profiling times every launch).
    pub fn graph_begin(&self) {
        if self.profile.borrow().is_some() {
            return;
        }
        let mut g = self.graphs.borrow_mut();
        g.pending.clear();
        g.recording = true;
    }

    /// Stop recording; run the recorded launches (`run`) — replayed from a cached graph when an
    /// identical list was captured, else captured or launched eagerly (graph.rs) — or drop them.
    pub fn graph_end(&self, run: bool) -> Result<()> {
        let recs = {
            let mut g = self.graphs.borrow_mut();
            g.recording = false;
            std::mem::take(&mut g.pending)
        };
        if run { self.run_list(recs) } else { Ok(()) }
    }

    /// Run the launches recorded so far and keep recording (another stream operation follows).
    pub fn flush(&self) -> Result<()> {
        let recs = {
            let mut g = self.graphs.borrow_mut();
            if g.pending.is_empty() {
                return Ok(());
            }
            std::mem::take(&mut g.pending)
        };
        self.run_list(recs)
    }

    fn run_list(&self, recs: Vec<Rec>) -> Result<()> {
        if recs.is_empty() {
            return Ok(());
        }
        self.bind()?;
        let h = graph::hash(&recs);
        let plan = self.graphs.borrow_mut().plan(&recs, h, self.replay.get());
        match plan {
            Plan::Replay(i) => self.graphs.borrow().cache[i].graph.0.launch().map_err(drv("graph launch")),
            Plan::Eager => recs.iter().try_for_each(|r| self.launch_rec(r)),
            Plan::Capture => {
                use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
                self.stream
                    .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
                    .map_err(drv("begin graph capture"))?;
                let launched = recs.iter().try_for_each(|r| self.launch_rec(r));
                let captured = self.stream.end_capture(CUgraphInstantiate_flags(0));
                if let (Ok(()), Ok(Some(graph))) = (launched, captured) {
                    graph.launch().map_err(drv("graph launch"))?;
                    self.graphs.borrow_mut().insert(Cached { hash: h, recs, graph: SendGraph(graph), last_used: 0 });
                    return Ok(());
                }
                // Nothing captured ran: run the list eagerly (a real launch error surfaces here).
                self.graphs.borrow_mut().stats.failed_captures += 1;
                recs.iter().try_for_each(|r| self.launch_rec(r))
            }
        }
    }

    /// Turn graph replay on or off (recorded lists then always launch eagerly).
    pub fn set_graph_replay(&self, on: bool) {
        self.replay.set(on);
    }

    /// What graph replay did so far.
    pub fn graph_stats(&self) -> GraphStats {
        self.graphs.borrow().stats
    }

    /// The raw stream for a copy or a library call, after flushing recorded launches.
    pub fn cu_stream(&self) -> Result<cudarc::driver::sys::CUstream> {
        self.flush()?;
        self.bind()?;
        Ok(self.stream.cu_stream())
    }

    /// Make this device's context current on the calling thread (one `cuCtxGetCurrent` when it
    /// already is): the raw driver calls (copies, launches, cuBLAS, NCCL) need it, and a
    /// tensor-parallel engine touches every rank's backend from its own thread too.
    pub fn bind(&self) -> Result<()> {
        self.ctx.bind_to_thread().map_err(drv("binding the CUDA context to this thread"))
    }

    /// Run `f` (which enqueues work), timed as op `op` when profiling (a kernel entry's name, or
    /// `matmul_cublas` / a collective's name).
    pub fn timed<T>(&self, op: &'static str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        self.flush()?;
        if self.profile.borrow().is_none() {
            return f();
        }
        let ev =
            || self.ctx.new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(drv("event"));
        let (a, b) = (ev()?, ev()?);
        a.record(&self.stream).map_err(drv("event record"))?;
        let r = f()?;
        b.record(&self.stream).map_err(drv("event record"))?;
        if let Some(p) = self.profile.borrow_mut().as_mut() {
            p.pending.push((op, a, b));
        }
        Ok(r)
    }

    pub fn set_profiling(&self, on: bool) -> Result<()> {
        self.sync()?;
        self.graphs.borrow_mut().recording = false;
        *self.profile.borrow_mut() = on.then(Profile::default);
        Ok(())
    }

    /// (op, launches, GPU nanoseconds) since profiling started or was last taken.
    pub fn take_profile(&self) -> Vec<(String, u64, f64)> {
        if self.sync().is_err() {
            return vec![];
        }
        let mut p = self.profile.borrow_mut();
        let Some(p) = p.as_mut() else { return vec![] };
        let mut out: Vec<(String, u64, f64)> =
            std::mem::take(&mut p.totals).into_iter().map(|(k, (n, ns))| (k.to_string(), n, ns)).collect();
        out.sort_by(|a, b| b.2.total_cmp(&a.2));
        out
    }

    /// Device address of the TMA tensor maps of `pools` (rows of `cols` 16-bit elements; tma.rs),
    /// encoded and uploaded on first use, in stream order before any launch that reads them.
    pub fn tensor_maps(&self, pools: [tma::Pool; tma::SET], cols: usize) -> Result<u64> {
        if let Some(m) = self.tmaps.borrow().get(&pools) {
            return Ok(m.ptr);
        }
        let bytes = tma::encode_set(&pools, cols)?;
        let mem = self.alloc_bytes(bytes.len())?;
        // SAFETY: the allocation holds bytes.len() bytes; pageable host memory is staged before
        // the call returns.
        unsafe { cudarc::driver::result::memcpy_htod_async(mem.ptr, &bytes, self.cu_stream()?) }
            .map_err(drv("uploading tensor maps"))?;
        let ptr = mem.ptr;
        self.tmaps.borrow_mut().insert(pools, mem);
        Ok(ptr)
    }

    /// Device pointer of scratch buffer `key` with at least `bytes` bytes.
    pub fn scratch(&self, key: &'static str, bytes: usize) -> Result<u64> {
        let mut s = self.scratch.borrow_mut();
        if let Some(m) = s.get(key)
            && m.slice.len() >= bytes
        {
            return Ok(m.ptr);
        }
        let m = self.alloc_bytes(bytes.next_power_of_two())?; // flushes: the old one may be in use
        let ptr = m.ptr;
        s.insert(key, m);
        Ok(ptr)
    }

    pub fn sync(&self) -> Result<()> {
        self.flush()?;
        self.stream.synchronize().map_err(drv("stream synchronize"))?;
        if let Some(p) = self.profile.borrow_mut().as_mut() {
            for (op, a, b) in p.pending.drain(..) {
                let ms = a.elapsed_ms(&b).map_err(drv("event elapsed"))?;
                let e = p.totals.entry(op).or_insert((0, 0.0));
                e.0 += 1;
                e.1 += ms as f64 * 1e6;
            }
        }
        Ok(())
    }
}

/// Grid, block size and dynamic shared memory of a launch.
#[derive(Clone, Copy, Debug)]
pub struct Launch {
    pub grid: (u32, u32, u32),
    pub block: u32,
    pub smem: u32,
}

impl Launch {
    pub fn new(grid: (u32, u32, u32), block: u32) -> Self {
        Launch { grid, block, smem: 0 }
    }
    /// A 1-D grid-stride launch over `n` elements.
    pub fn elems(n: usize) -> Self {
        Launch::new((n.div_ceil(256).clamp(1, 65535 * 8) as u32, 1, 1), 256)
    }
    pub fn smem(self, bytes: usize) -> Self {
        Launch { smem: bytes as u32, ..self }
    }
}

/// Bytes a buffer of `len` elements of `dtype` occupies on the device.
pub fn bytes_for(dtype: DType, len: usize) -> usize {
    len * dtype.size()
}
