//! wgpu plumbing: adapter and device, the pipeline cache, the parameter arena, command
//! recording and read-back.
//!
//! Invariants: every op records into one open command encoder and one open compute pass (wgpu
//! orders the dispatches of a pass and inserts the barriers between them; a copy or a submit ends
//! the pass; when profiling, each dispatch gets its own pass carrying its timestamps);
//! a submission goes out every `SUBMIT_EVERY` dispatches (so the GPU works while the CPU records
//! the rest) and at a read-back or `sync`, so a decode step is a handful of submissions with no
//! CPU round trip between ops; after a wait has left the GPU idle (a step's read-back) the first
//! submission goes out after `WgpuOptions::first_submit` dispatches and each next one after twice
//! as many, up to `SUBMIT_EVERY`, so the GPU starts on a step's first ops while the CPU records
//! the rest. Each dispatch's parameters get
//! their own 256-byte slot of the uniform arena, staged in host memory and written with one
//! `queue.write_buffer` per submission (applied before its commands), and slots are reused only
//! after a submit.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use crate::backend::DType;
use crate::backend::env::{count_from_env, switch_from_env};
use crate::error::{Error, Result};

use super::shaders;

pub(crate) fn err(msg: impl Into<String>) -> Error {
    Error::Backend { backend: "wgpu", msg: msg.into() }
}

const ARENA_SLOTS: u64 = 512;
/// Dispatches per submission: the GPU starts on a step's first layers while the CPU records the
/// rest (recording a Llama-3-8B decode step takes about a millisecond and a half of CPU time).
const SUBMIT_EVERY: u64 = 64;
/// The most dispatches a submission takes: `SUBMIT_EVERY`, or the arena's slots if fewer.
const BATCH_MAX: u64 = if SUBMIT_EVERY < ARENA_SLOTS { SUBMIT_EVERY } else { ARENA_SLOTS };
/// Dispatches in the first submission after the GPU went idle (`WgpuOptions::first_submit`'s
/// default): a decode step's embed, norm, q|k|v GEMV and KV write. Recording a dispatch costs
/// the CPU ~5 us on the H200 machine (docs/benchmarks.md session 21), so with 64 the GPU sat idle
/// for the first ~0.3 ms of every step; the next submissions double (8, 16, 32, then 64), each
/// recorded while the GPU runs the one before. (H100, session 41: the Q4_K 32K step 5.31-5.34 ->
/// 5.08-5.12 ms with add_rmsnorm; level with the fused residual.)
pub const FIRST_SUBMIT: u64 = 4;
/// Dispatches timed per submission when profiling (two timestamps each).
const PROFILE_SLOTS: u32 = 1024;

pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    pub limits: wgpu::Limits,
    /// Features requested from the adapter (those it has, minus those the options turn off).
    pub features: wgpu::Features,
    /// Shader variants in use: native f16 conversion, subgroup reductions, the
    /// cooperative-matrix GEMMs ([`coop_supported`]).
    pub use_f16: bool,
    pub use_subgroup: bool,
    pub use_coop: bool,
    /// The runtime checks of the shader modules ([`ShaderChecks`]).
    pub checks: ShaderChecks,
    /// Ops whose dispatches are not recorded (`LSERVE_WGPU_SKIP_OPS`, a comma list of shader op
    /// names): for timing ablations of `lserve bench` only; their outputs are left as they were.
    skip_ops: Vec<String>,
    /// [`WgpuOptions::first_submit`].
    first_submit: u64,
    slot_size: u64,
    arena: wgpu::Buffer,
    state: RefCell<State>,
}

struct State {
    /// The open compute pass (not when profiling: then each dispatch gets its own pass for its
    /// timestamps). It must be dropped before the encoder records anything else or finishes.
    pass: Option<wgpu::ComputePass<'static>>,
    encoder: Option<wgpu::CommandEncoder>,
    next_slot: u64,
    /// Dispatches the current submission takes before it goes out: `first_submit` after a wait,
    /// doubling with each submission up to `SUBMIT_EVERY`.
    batch: u64,
    /// The parameter slots of the dispatches recorded since the last submission, written to the
    /// arena with one `write_buffer` just before that submission (queue writes land before the
    /// submission's commands run, so each dispatch still reads its own slot).
    params: Vec<u8>,
    pipelines: HashMap<String, Arc<wgpu::ComputePipeline>>,
    profiler: Option<Profiler>,
}

/// GPU timestamps around every dispatch, summed per op (only when profiling is on).
struct Profiler {
    queries: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    /// Op of each timed dispatch of the current submission.
    pending: Vec<&'static str>,
    /// op -> (dispatches, nanoseconds).
    totals: HashMap<&'static str, (u64, f64)>,
}

/// Which optional adapter features lserve may use (each only when the adapter has it). Turning
/// one off runs the fallback shaders, as on an adapter without the feature.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WgpuOptions {
    pub f16: bool,
    pub subgroup: bool,
    /// The tensor-core GEMMs (`matmul_coop*`, EXPERIMENTAL_COOPERATIVE_MATRIX); they also need
    /// `f16` and `subgroup`.
    pub coop: bool,
    /// The runtime checks wgpu adds to the shaders ([`ShaderChecks`]).
    pub checks: ShaderChecks,
    /// A batch-1 step's o_proj and down add into the residual stream in their GEMVs' stores
    /// (`Backend::matmul_accumulates` at one row), so each add_rmsnorm after them is an rmsnorm
    /// (`LSERVE_WGPU_FUSE_RESIDUAL`, an on/off switch, on by default; off keeps add_rmsnorm, for
    /// measuring).
    pub fuse_residual: bool,
    /// A batch-1 step's q|k|v GEMV runs rope_append_kv16 in its epilogue
    /// (`Backend::matmul_rope_append_kv`, ops_fused.rs; `LSERVE_WGPU_FUSE_ROPE`, an on/off switch,
    /// on by default; off dispatches the rotation separately, for measuring).
    pub fuse_rope: bool,
    /// A batch-1 step's gate|up GEMV runs silu_mul_x8 in its epilogue (`Backend::matmul_silu_mul`,
    /// ops_fused.rs; `LSERVE_WGPU_FUSE_SILU`, an on/off switch, on by default; off dispatches
    /// silu_mul separately, for measuring).
    pub fuse_silu: bool,
    /// Dispatches in the first submission after a wait ([`FIRST_SUBMIT`] by default;
    /// `LSERVE_WGPU_FIRST_SUBMIT`, 1..=64: 64 is one submission every 64 dispatches throughout,
    /// as before session 41).
    pub first_submit: u64,
}

impl Default for WgpuOptions {
    fn default() -> Self {
        WgpuOptions {
            f16: true,
            subgroup: true,
            coop: true,
            checks: ShaderChecks::Off,
            fuse_residual: true,
            fuse_rope: true,
            fuse_silu: true,
            first_submit: FIRST_SUBMIT,
        }
    }
}

const NO_FEATURES: WgpuOptions = WgpuOptions {
    f16: false,
    subgroup: false,
    coop: false,
    checks: ShaderChecks::Off,
    fuse_residual: true,
    fuse_rope: true,
    fuse_silu: true,
    first_submit: FIRST_SUBMIT,
};

/// The checks wgpu (naga) writes into every shader module unless told otherwise: each index into
/// an array clamped to its length (workgroup and private arrays; storage buffers too where the
/// driver lacks robustBufferAccess2), every integer division guarded against zero and overflow,
/// every loop bounded by an extra counter. lserve's shaders index only within the lengths their
/// op validated on the host (the parity tests poison the output elements a kernel must not touch
/// and check them), divide by constants or by parameters the host validated, and loop over
/// counts the host bounds; so by default the modules are created without these checks
/// (`create_shader_module_trusted`, as llama.cpp's Vulkan backend turns pipeline robustness
/// off). On the H200 (docs/benchmarks.md, session 20) that took a 4K Llama-3-8B prefill from
/// 1,119-1,199 to 552-555 ms and a 32K q4_k decode step from 7.4-7.9 to 6.3-6.5 ms; turning off
/// the index clamps alone gained nothing. (The CUDA kernels have none of these checks either.) Storage-buffer robustness that a Vulkan driver provides
/// itself (robustBufferAccess2, which wgpu enables where present) stays on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShaderChecks {
    /// wgpu's checks (`LSERVE_WGPU_CHECKS=1`: for debugging a shader).
    On,
    /// None (the default; `LSERVE_WGPU_CHECKS=0`).
    Off,
}

impl ShaderChecks {
    fn runtime(self) -> wgpu::ShaderRuntimeChecks {
        match self {
            ShaderChecks::On => wgpu::ShaderRuntimeChecks::checked(),
            ShaderChecks::Off => wgpu::ShaderRuntimeChecks::unchecked(),
        }
    }

    /// `LSERVE_WGPU_CHECKS`: `1` / `on`, `0` / `off` (unset: off); anything else is an error.
    pub fn parse(v: Option<&str>) -> Result<Self> {
        match v {
            None | Some("") | Some("0") | Some("off") => Ok(ShaderChecks::Off),
            Some("1") | Some("on") => Ok(ShaderChecks::On),
            Some(other) => Err(Error::InvalidArgument(format!("LSERVE_WGPU_CHECKS: `{other}` is not 1 or 0"))),
        }
    }
}

impl WgpuOptions {
    /// From `LSERVE_WGPU_FEATURES`: a comma list of `f16`, `subgroup`, `coop`, or `all` (the
    /// default) / `none`; an unknown word is an error. Then `LSERVE_WGPU_NO_COOP=1` turns `coop`
    /// off (any other value than `1` or `0` is an error), `LSERVE_WGPU_CHECKS` sets
    /// [`ShaderChecks`], `LSERVE_WGPU_FUSE_RESIDUAL` (on/off) `fuse_residual`,
    /// `LSERVE_WGPU_FUSE_ROPE` (on/off) `fuse_rope`, `LSERVE_WGPU_FUSE_SILU` (on/off) `fuse_silu` and
    /// `LSERVE_WGPU_FIRST_SUBMIT` (1..=64) `first_submit` (backend/env.rs).
    pub fn from_env() -> Result<Self> {
        let mut o = match std::env::var("LSERVE_WGPU_FEATURES") {
            Ok(v) => Self::parse(&v)?,
            Err(_) => Self::default(),
        };
        match std::env::var("LSERVE_WGPU_NO_COOP").as_deref() {
            Err(_) | Ok("0") | Ok("") => {}
            Ok("1") => o.coop = false,
            Ok(other) => {
                return Err(Error::InvalidArgument(format!("LSERVE_WGPU_NO_COOP: `{other}` is not 1 or 0")));
            }
        }
        o.checks = ShaderChecks::parse(std::env::var("LSERVE_WGPU_CHECKS").ok().as_deref())?;
        o.fuse_residual = switch_from_env("LSERVE_WGPU_FUSE_RESIDUAL")?;
        o.fuse_rope = switch_from_env("LSERVE_WGPU_FUSE_ROPE")?;
        o.fuse_silu = switch_from_env("LSERVE_WGPU_FUSE_SILU")?;
        if let Some(n) = count_from_env("LSERVE_WGPU_FIRST_SUBMIT", BATCH_MAX as usize)? {
            o.first_submit = n as u64;
        }
        Ok(o)
    }

    pub fn parse(list: &str) -> Result<Self> {
        let mut o = NO_FEATURES;
        for w in list.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match w {
                "all" => o = WgpuOptions::default(),
                "none" => o = NO_FEATURES,
                "f16" => o.f16 = true,
                "subgroup" => o.subgroup = true,
                "coop" => o.coop = true,
                other => {
                    return Err(Error::InvalidArgument(format!(
                        "LSERVE_WGPU_FEATURES: unknown feature `{other}` (use f16, subgroup, coop, all or none)"
                    )));
                }
            }
        }
        Ok(o)
    }
}

/// `LSERVE_WGPU_SKIP_OPS` (measurement only: a step without these ops computes wrong values; the
/// difference of two `lserve bench` times is what the ops cost in the unprofiled step, launch and
/// barrier included). Announced on stderr, so no result is taken for a real one.
fn skip_ops_from_env() -> Vec<String> {
    let ops: Vec<String> = std::env::var("LSERVE_WGPU_SKIP_OPS")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|o| !o.is_empty())
        .map(String::from)
        .collect();
    if !ops.is_empty() {
        eprintln!("LSERVE_WGPU_SKIP_OPS: not recording {ops:?}: results are wrong (timing ablation only)");
    }
    ops
}

/// Workgroup memory an adapter needs for the cooperative-matrix GEMMs: 22 KiB (`matmul_coop`
/// itself declares 14 KiB; 22 was the need of a since-removed decode kernel, kept so that the
/// adapters which take these kernels stay the same). `matmul_coop_128` (44 KiB) runs only where
/// the adapter has that much (`ops_matmul::coop128_fits`), else `matmul_coop` serves its rows.
const COOP_WORKGROUP_BYTES: u32 = 22 * 1024;

/// Whether the adapter's cooperative-matrix configurations include the one the `matmul_coop*`
/// shaders use: 16x16x16, f16 A and B, f32 C, subgroup scope (wgpu lists only subgroup-scoped
/// ones). An f16 -> f16 configuration is not used: accumulating k products in f16 loses about
/// 11 bits x log2(k) of the sum, far outside the matmul parity tolerance.
pub fn has_coop_f16_f32(props: &[wgpu::CooperativeMatrixProperties]) -> bool {
    use wgpu::CooperativeScalarType as T;
    props.iter().any(|c| (c.m_size, c.n_size, c.k_size) == (16, 16, 16) && c.ab_type == T::F16 && c.cr_type == T::F32)
}

/// Whether the `matmul_coop*` shaders can run on `adapter` with `features` (those about to be
/// requested): the adapter has EXPERIMENTAL_COOPERATIVE_MATRIX with the 16x16x16 f16 -> f32
/// configuration ([`has_coop_f16_f32`]); SHADER_F16 and SUBGROUP are requested (the shaders use
/// f16 staging and the subgroup_id builtin); every subgroup has 32 invocations (a workgroup of
/// 128 threads is exactly the shaders' 4 subgroups: NVIDIA; AMD and Intel may use other sizes);
/// the workgroup memory fits.
fn coop_supported(
    adapter: &wgpu::Adapter,
    info: &wgpu::AdapterInfo,
    limits: &wgpu::Limits,
    features: wgpu::Features,
) -> bool {
    adapter.features().contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX)
        && features.contains(wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP)
        && (info.subgroup_min_size, info.subgroup_max_size) == (32, 32)
        && limits.max_compute_workgroup_storage_size >= COOP_WORKGROUP_BYTES
        && limits.max_compute_invocations_per_workgroup >= 128
        && has_coop_f16_f32(&adapter.cooperative_matrix_properties())
}

/// One storage binding of a dispatch.
pub struct Bind<'a>(pub &'a wgpu::Buffer);

impl Gpu {
    /// Open adapter `index` (in enumeration order) or the first one.
    pub fn open(index: Option<usize>, opts: WgpuOptions) -> Result<Gpu> {
        let instance = crate::backend::probe::wgpu_instance();
        let adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
        if adapters.is_empty() {
            return Err(err(
                "no wgpu adapter found (install a Vulkan, Metal or DX12 driver; Mesa's lavapipe works on any CPU)",
            ));
        }
        let i = index.unwrap_or(0);
        let adapter = adapters
            .into_iter()
            .nth(i)
            .ok_or_else(|| err(format!("adapter {i} does not exist (see `lserve devices`)")))?;
        let mut wanted = wgpu::Features::TIMESTAMP_QUERY;
        if opts.f16 {
            wanted |= wgpu::Features::SHADER_F16;
        }
        if opts.subgroup {
            wanted |= wgpu::Features::SUBGROUP;
        }
        let mut features = adapter.features() & wanted;
        let limits = adapter.limits();
        let info = adapter.get_info();
        let coop = opts.coop && coop_supported(&adapter, &info, &limits, features);
        let experimental = if coop {
            features |= wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
            // SAFETY: the token only acknowledges that wgpu's experimental features may have
            // bugs; the one requested (EXPERIMENTAL_COOPERATIVE_MATRIX) is used only by the
            // `matmul_coop*` shaders, which the parity tests compare with the CPU reference,
            // and LSERVE_WGPU_NO_COOP=1 leaves it off.
            unsafe { wgpu::ExperimentalFeatures::enabled() }
        } else {
            wgpu::ExperimentalFeatures::disabled()
        };
        let desc = wgpu::DeviceDescriptor {
            label: Some("lserve"),
            required_features: features,
            required_limits: limits.clone(),
            experimental_features: experimental,
            // Sub-allocated device-memory blocks of 4-8 MiB: every larger buffer (weights, KV
            // pools, summaries: allocated once, at load) gets its own allocation of its own size.
            // Performance's 128-256 MiB blocks (and MemoryUsage's 8-64) leave each block's tail
            // unused: an 8B Q4_K_M at 8K peaked at 6,369 MiB with Performance, 6,301 with
            // MemoryUsage, 6,195 with these (H100, docs/benchmarks.md session 26), memory a
            // laptop GPU does not have.
            memory_hints: wgpu::MemoryHints::Manual { suballocated_device_memory_block_size: (4 << 20)..(8 << 20) },
            trace: wgpu::Trace::Off,
        };
        let (device, queue) =
            pollster::block_on(adapter.request_device(&desc)).map_err(|e| err(format!("request_device: {e}")))?;
        let slot_size = (limits.min_uniform_buffer_offset_alignment as u64).max(256);
        let arena = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("params arena"),
            size: slot_size * ARENA_SLOTS,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let first_submit = opts.first_submit.clamp(1, BATCH_MAX);
        Ok(Gpu {
            device,
            queue,
            info,
            limits,
            features,
            use_f16: features.contains(wgpu::Features::SHADER_F16),
            use_subgroup: features.contains(wgpu::Features::SUBGROUP),
            use_coop: coop,
            checks: opts.checks,
            skip_ops: skip_ops_from_env(),
            first_submit,
            slot_size,
            arena,
            state: RefCell::new(State {
                pass: None,
                encoder: None,
                next_slot: 0,
                batch: first_submit,
                params: vec![0; (slot_size * BATCH_MAX) as usize],
                pipelines: HashMap::new(),
                profiler: None,
            }),
        })
    }

    pub fn create_buffer(&self, bytes: u64, label: &str) -> Result<wgpu::Buffer> {
        // 16-byte multiples, so any buffer can also be bound as an array of 16-byte words.
        let size = bytes.max(16).div_ceil(16) * 16;
        if size > self.limits.max_storage_buffer_binding_size || size > self.limits.max_buffer_size {
            return Err(err(format!(
                "a {label} buffer of {size} bytes exceeds this adapter's storage binding limit of {} bytes",
                self.limits.max_storage_buffer_binding_size
            )));
        }
        Ok(self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        }))
    }

    fn pipeline(&self, op: &str, weights: Option<DType>) -> Result<Arc<wgpu::ComputePipeline>> {
        if shaders::needs_subgroup(op) && !self.use_subgroup {
            return Err(err(format!("{op} needs the SUBGROUP feature")));
        }
        if shaders::needs_coop(op) && !self.use_coop {
            return Err(err(format!("{op} needs the EXPERIMENTAL_COOPERATIVE_MATRIX feature")));
        }
        let weights = shaders::Variant { weights, native_f16: self.use_f16 };
        let name = shaders::module_name(op, weights);
        if let Some(p) = self.state.borrow().pipelines.get(&name) {
            return Ok(p.clone());
        }
        let src = shaders::assemble(op, weights).ok_or_else(|| err(format!("no shader for {name}")))?;
        let desc = wgpu::ShaderModuleDescriptor { label: Some(&name), source: wgpu::ShaderSource::Wgsl(src.into()) };
        // SAFETY: see ShaderChecks: every shader indexes within the lengths its op validated on
        // the host, divides by constants or validated parameters, and loops over bounded counts.
        let module = unsafe { self.device.create_shader_module_trusted(desc, self.checks.runtime()) };
        let p = Arc::new(self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(&name),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        }));
        self.state.borrow_mut().pipelines.insert(name, p.clone());
        Ok(p)
    }

    /// Start timing every dispatch with GPU timestamps (needs TIMESTAMP_QUERY), or stop.
    pub fn set_profiling(&self, on: bool) -> Result<()> {
        self.submit();
        let mut st = self.state.borrow_mut();
        if !on {
            st.profiler = None;
            return Ok(());
        }
        if !self.features.contains(wgpu::Features::TIMESTAMP_QUERY) {
            return Err(err("this adapter has no timestamp queries"));
        }
        let queries = self.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("profile"),
            ty: wgpu::QueryType::Timestamp,
            count: 2 * PROFILE_SLOTS,
        });
        let resolve = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("profile resolve"),
            size: 16 * PROFILE_SLOTS as u64,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        st.profiler = Some(Profiler { queries, resolve, pending: vec![], totals: HashMap::new() });
        Ok(())
    }

    /// (op, dispatches, total GPU nanoseconds) since profiling started or was last taken.
    pub fn take_profile(&self) -> Vec<(String, u64, f64)> {
        self.submit();
        let mut st = self.state.borrow_mut();
        let Some(p) = st.profiler.as_mut() else { return vec![] };
        let mut v: Vec<(String, u64, f64)> = p.totals.drain().map(|(k, (n, ns))| (k.to_string(), n, ns)).collect();
        v.sort_by(|a, b| b.2.total_cmp(&a.2));
        v
    }

    /// Read the timestamps of the submission just made and add them to the totals.
    fn collect_profile(&self) {
        let (bytes, names) = {
            let mut st = self.state.borrow_mut();
            let Some(p) = st.profiler.as_mut() else { return };
            if p.pending.is_empty() {
                return;
            }
            let n = p.pending.len() as u32;
            let size = 16 * n as u64;
            let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("profile read-back"),
                size,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let mut enc = self.device.create_command_encoder(&Default::default());
            enc.resolve_query_set(&p.queries, 0..2 * n, &p.resolve, 0);
            enc.copy_buffer_to_buffer(&p.resolve, 0, &staging, 0, size);
            self.queue.submit([enc.finish()]);
            (staging, std::mem::take(&mut p.pending))
        };
        let (tx, rx) = std::sync::mpsc::channel();
        bytes.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        if self.wait().is_err() || !matches!(rx.recv(), Ok(Ok(()))) {
            return;
        }
        let Ok(view) = bytes.get_mapped_range(..) else { return };
        let ticks: Vec<u64> = bytemuck::pod_collect_to_vec(&view);
        drop(view);
        let period = self.queue.get_timestamp_period() as f64;
        let mut st = self.state.borrow_mut();
        if let Some(p) = st.profiler.as_mut() {
            for (i, name) in names.iter().enumerate() {
                let ns = ticks[2 * i + 1].saturating_sub(ticks[2 * i]) as f64 * period;
                let e = p.totals.entry(name).or_insert((0, 0.0));
                e.0 += 1;
                e.1 += ns;
            }
        }
    }

    /// Record one dispatch of `op` with `params` at binding 0 and `binds` at 1, 2, ...
    pub fn dispatch(
        &self,
        op: &'static str,
        weights: Option<DType>,
        params: &[u8],
        binds: &[Bind],
        groups: (u32, u32, u32),
    ) -> Result<()> {
        if groups.0 == 0 || groups.1 == 0 || groups.2 == 0 || self.skip_ops.iter().any(|o| o == op) {
            return Ok(());
        }
        let max = self.limits.max_compute_workgroups_per_dimension;
        if groups.0 > max || groups.1 > max || groups.2 > max {
            return Err(err(format!("{op}: {groups:?} workgroups exceed the adapter's {max} per dimension")));
        }
        if params.len() as u64 > self.slot_size {
            return Err(err(format!(
                "{op}: {} bytes of parameters exceed a {}-byte slot",
                params.len(),
                self.slot_size
            )));
        }
        let pipeline = self.pipeline(op, weights)?;
        if self.state.borrow().next_slot >= self.state.borrow().batch {
            self.submit();
            let mut st = self.state.borrow_mut();
            st.batch = (2 * st.batch).min(BATCH_MAX);
        }
        let offset = {
            let mut st = self.state.borrow_mut();
            let o = st.next_slot * self.slot_size;
            st.next_slot += 1;
            st.params[o as usize..o as usize + params.len()].copy_from_slice(params);
            o
        };
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: &self.arena,
                offset,
                size: wgpu::BufferSize::new(params.len() as u64),
            }),
        }];
        for (i, b) in binds.iter().enumerate() {
            entries.push(wgpu::BindGroupEntry { binding: i as u32 + 1, resource: b.0.as_entire_binding() });
        }
        let bg = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(op),
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        });
        if self.state.borrow().profiler.as_ref().is_some_and(|p| p.pending.len() as u32 == PROFILE_SLOTS) {
            self.submit();
        }
        let mut st = self.state.borrow_mut();
        let State { pass, encoder, profiler, .. } = &mut *st;
        let enc = encoder.get_or_insert_with(|| self.device.create_command_encoder(&Default::default()));
        if let Some(p) = profiler.as_mut() {
            let i = 2 * p.pending.len() as u32;
            p.pending.push(op);
            let timestamp_writes = Some(wgpu::ComputePassTimestampWrites {
                query_set: &p.queries,
                beginning_of_pass_write_index: Some(i),
                end_of_pass_write_index: Some(i + 1),
            });
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some(op), timestamp_writes });
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &bg, &[]);
            pass.dispatch_workgroups(groups.0, groups.1, groups.2);
            return Ok(());
        }
        let pass = pass.get_or_insert_with(|| {
            enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("step"), timestamp_writes: None })
                .forget_lifetime()
        });
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bg, &[]);
        pass.dispatch_workgroups(groups.0, groups.1, groups.2);
        Ok(())
    }

    /// Submit whatever has been recorded.
    pub fn submit(&self) {
        {
            let mut st = self.state.borrow_mut();
            st.pass = None; // ends the pass
            let used = (st.next_slot * self.slot_size) as usize;
            if used > 0 {
                self.queue.write_buffer(&self.arena, 0, &st.params[..used]);
            }
            if let Some(enc) = st.encoder.take() {
                self.queue.submit([enc.finish()]);
            }
            st.next_slot = 0;
        }
        self.collect_profile();
    }

    /// Record a buffer-to-buffer copy.
    pub fn copy(&self, src: &wgpu::Buffer, src_off: u64, dst: &wgpu::Buffer, dst_off: u64, bytes: u64) {
        let mut st = self.state.borrow_mut();
        st.pass = None; // a copy is recorded outside compute passes
        let enc = st.encoder.get_or_insert_with(|| self.device.create_command_encoder(&Default::default()));
        enc.copy_buffer_to_buffer(src, src_off, dst, dst_off, bytes);
    }

    /// Submit, wait, and read `bytes` bytes of `src` from `offset` (both multiples of 4).
    pub fn read(&self, src: &wgpu::Buffer, offset: u64, bytes: u64) -> Result<Vec<u8>> {
        let size = bytes.max(4).div_ceil(4) * 4;
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("read-back"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        self.copy(src, offset, &staging, 0, size);
        self.submit();
        let (tx, rx) = std::sync::mpsc::channel();
        staging.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        self.wait()?;
        rx.recv().map_err(|_| err("map callback lost"))?.map_err(|e| err(format!("map_async: {e}")))?;
        let data = staging.get_mapped_range(..).map_err(|e| err(format!("mapped range: {e}")))?.to_vec();
        staging.unmap();
        Ok(data[..bytes as usize].to_vec())
    }

    /// Wait for everything submitted; the GPU is then idle, so the next submission goes out
    /// after `first_submit` dispatches.
    pub fn wait(&self) -> Result<()> {
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| err(format!("poll: {e}")))?;
        self.state.borrow_mut().batch = self.first_submit;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::env::parse_count;

    #[test]
    fn feature_lists_parse() {
        let all = WgpuOptions::default();
        assert_eq!(WgpuOptions::parse("all").unwrap(), all);
        assert_eq!(WgpuOptions::parse("none").unwrap(), NO_FEATURES);
        assert_eq!(WgpuOptions::parse("f16, subgroup").unwrap(), WgpuOptions { coop: false, ..all });
        assert_eq!(WgpuOptions::parse("coop").unwrap(), WgpuOptions { coop: true, ..NO_FEATURES });
        assert!(WgpuOptions::parse("f16,tensor").is_err());
        assert_eq!(ShaderChecks::parse(None).unwrap(), ShaderChecks::Off);
        assert_eq!(ShaderChecks::parse(Some("0")).unwrap(), ShaderChecks::Off);
        assert_eq!(ShaderChecks::parse(Some("1")).unwrap(), ShaderChecks::On);
        assert_eq!(ShaderChecks::parse(Some("on")).unwrap(), ShaderChecks::On);
        assert!(ShaderChecks::parse(Some("bounds")).is_err());
        let first = |v| parse_count("LSERVE_WGPU_FIRST_SUBMIT", Some(v), BATCH_MAX as usize);
        assert_eq!(first("4").unwrap(), Some(4));
        assert_eq!(first("64").unwrap(), Some(64));
        assert!(first("0").is_err() && first("65").is_err() && first("x").is_err());
    }

    #[test]
    fn coop_configuration_is_16x16x16_f16_to_f32() {
        use wgpu::CooperativeScalarType as T;
        let c = |m, ab, cr| wgpu::CooperativeMatrixProperties {
            m_size: m,
            n_size: m,
            k_size: m,
            ab_type: ab,
            cr_type: cr,
            saturating_accumulation: false,
        };
        assert!(has_coop_f16_f32(&[c(8, T::F32, T::F32), c(16, T::F16, T::F32)]));
        assert!(!has_coop_f16_f32(&[c(16, T::F16, T::F16), c(8, T::F16, T::F32)]));
        assert!(!has_coop_f16_f32(&[]));
    }
}
