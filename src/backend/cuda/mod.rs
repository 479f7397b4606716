//! The CUDA backend: every op is a kernel in `cuda/<op>.cu` (the same stems as `shaders/*.wgsl`),
//! compiled by NVRTC for the device's architecture at start and cached on disk (kernels.rs),
//! launched through cudarc on one stream with the op's `#[repr(C)]` parameter struct (mirrored in
//! `cuda/params.cuh`). Prefill GEMMs go to cuBLAS; decode GEMVs are our own kernels.
//!
//! cudarc loads libcuda/libnvrtc/libcublas at run time, so this backend compiles everywhere and
//! [`CudaBackend::new`] on a machine without them returns an error value (no panic).
//!
//! Storage: f32 and u32 as-is; f16/bf16 two bytes per element (weights and KV); quantized weights
//! (GGML blocks, int8/fp8 rows with scales) as their bytes (`len` counts bytes). Activations,
//! logits and page summaries are f32. Each op checks its buffers against its params before
//! launching (like the CPU reference); what only the device knows (page tables, slots, selections)
//! is bounds-checked in the kernels, which skip what they cannot address.

pub mod bindings;
mod context;
mod graph;
pub mod kernels;
pub mod nccl;
mod ops_attention;
mod ops_basic;
mod ops_blocks;
mod ops_kv;
mod ops_matmul;
pub mod packed;
mod tma;

use cudarc::driver::DeviceRepr;

use crate::backend::env::{count_from_env, switch_from_env};
use crate::backend::*;
use crate::error::{Error, Result};
pub use context::driver_present;
use context::{Gpu, Mem, bytes_for, drv, err};
pub use graph::GraphStats;
pub use ops_attention::HopperPrefill;
pub use ops_matmul::MmvMode;

// SAFETY: plain #[repr(C)] structs of u32/f32 fields, mirrored in cuda/params.cuh (layout test).
unsafe impl DeviceRepr for EmbedParams {}
unsafe impl DeviceRepr for MatmulParams {}
unsafe impl DeviceRepr for RmsnormParams {}
unsafe impl DeviceRepr for AddParams {}
unsafe impl DeviceRepr for SiluMulParams {}
unsafe impl DeviceRepr for GatherRowsParams {}
unsafe impl DeviceRepr for MeanRowsParams {}
unsafe impl DeviceRepr for AntidiagonalParams {}
unsafe impl DeviceRepr for PageTopKParams {}
unsafe impl DeviceRepr for ArgmaxParams {}
unsafe impl DeviceRepr for SampleParams {}
unsafe impl DeviceRepr for RopeAppendKvParams {}
unsafe impl DeviceRepr for AttentionParams {}
unsafe impl DeviceRepr for PageSelectParams {}
unsafe impl DeviceRepr for LambdaMassParams {}
unsafe impl DeviceRepr for FillRandomParams {}
unsafe impl DeviceRepr for GeluTanhMulParams {}
unsafe impl DeviceRepr for HeadRmsnormParams {}
unsafe impl DeviceRepr for ScaleParams {}

/// A device buffer.
pub struct CudaBuffer {
    mem: Mem,
    pub dtype: DType,
    /// Elements (not bytes).
    pub len: usize,
    /// A 32-element-format matrix stored in packed super-blocks (packed.rs), read by the
    /// `<fmt>p` kernels.
    pub packed: bool,
}

impl CudaBuffer {
    pub(crate) fn ptr(&self) -> u64 {
        self.mem.ptr
    }
}

impl std::fmt::Debug for CudaBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaBuffer({:?} x {} @ {:#x})", self.dtype, self.len, self.mem.ptr)
    }
}

pub struct CudaBackend {
    gpu: Gpu,
    caps: Caps,
    mmv: MmvMode,
    /// Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 matrices of whole super-blocks are stored packed (packed.rs;
    /// `LSERVE_CUDA_PACK`).
    pack: bool,
    /// Bytes of the f16 scratch a quantized GEMM at large m dequantizes weight rows into, one
    /// chunk of rows per cuBLAS GEMM (`LSERVE_CUDA_DEQUANT_MB`, default
    /// `ops_matmul::DEQUANT_SCRATCH_BYTES`).
    dequant_bytes: usize,
    /// The Hopper prefill kernel for 16-bit KV at head_dim 128 (`CudaOptions::hopper_prefill`);
    /// `None` reads `LSERVE_CUDA_PREFILL_WGMMA` per launch.
    hopper_prefill: Option<HopperPrefill>,
    /// cuBLAS GEMMs may write 16-bit outputs (`Backend::matmul_out16_dtype`; `LSERVE_CUDA_OUT16`,
    /// default on: off measures the f32 outputs beside it).
    out16: bool,
    /// Splits per (sequence, head chunk) of a decode attention launch, capped at this count
    /// instead of the wave (`LSERVE_CUDA_DECODE_SPLITS`, a measurement knob; `None`: the wave).
    decode_splits: Option<usize>,
    /// 8-bit KV decode takes the `_pf` tensor-core kernels (the next tile's loads in flight;
    /// `LSERVE_CUDA_DECODE_PF`, default on: off measures the plain kernel beside them). H200,
    /// Llama-3-8B, 128K dense int8: 8.60 vs 8.74 ms a step; sparse: equal (docs/benchmarks.md).
    decode_pf: bool,
    /// The most stages a bulk GEMV block has (`LSERVE_CUDA_MMV_STAGES`, a measurement knob,
    /// 1..=`ops_matmul::MMV_MAX_STAGES`; unset: that maximum).
    mmv_stages: usize,
    /// Calls of several tokens take `rope_append_kv_rows` (`LSERVE_CUDA_ROPE_ROWS`, default on:
    /// off measures the per-(token, head) kernel beside it).
    rope_rows: bool,
    /// `antidiagonal_score` by cuBLAS where the blocks allow (`LSERVE_CUDA_AD_GEMM`, default on:
    /// off measures the fused kernel beside it).
    ad_gemm: bool,
    /// o_proj and down add into the residual stream by cuBLAS beta = 1 where they are cuBLAS
    /// GEMMs (`Backend::matmul_accumulates`; `LSERVE_CUDA_FUSE_RESIDUAL`, default on: off measures
    /// add_rmsnorm beside it).
    fuse_residual: bool,
    /// A batch-1 decode step's GEMVs add o_proj and down into the residual stream and make their
    /// x from the norms and silu_mul in their loads (`Backend::matmul_prologue_fuses`;
    /// `CudaOptions::fuse_decode` / `LSERVE_CUDA_FUSE_DECODE`).
    fuse_decode: bool,
    /// The silu_mul prologue of down among them (`LSERVE_CUDA_FUSE_SILU`, default on: off keeps
    /// silu_mul a kernel of its own, the norms still folded).
    pub(crate) fuse_silu: bool,
}

/// Settings of a CUDA backend: the one place its configuration lives (docs/backends.md, CUDA).
/// Kernel choices are not settings: each op runs the one kernel measured best for its dtype and
/// shape (the measurements of the variants that were removed are in docs/benchmarks.md); `mmv`
/// is the exception while its two variants await measurement, and `hopper_prefill` names a
/// fallback or a measured variant so that the parity tests cover each.
#[derive(Clone, Debug)]
pub struct CudaOptions {
    /// Directory of the on-disk PTX cache (kernels.rs); `None` compiles every kernel at start
    /// and caches nothing. The CLI passes `<model cache>/cuda`.
    pub kernel_cache: Option<std::path::PathBuf>,
    /// Replay recorded decode steps as CUDA graphs (graph.rs; default true). Off, every recorded
    /// list launches kernel by kernel (the bit-identity test and graphs-off measurements).
    pub graph_replay: bool,
    /// Where the batch-1 quantized GEMV gets x's int8 digits ([`MmvMode`]); `None` reads
    /// `LSERVE_CUDA_MMV` once, at open (unset: [`MmvMode::Auto`], per weight format).
    pub mmv: Option<MmvMode>,
    /// Bytes of the f16 scratch a quantized GEMM dequantizes a chunk of weight rows into
    /// (`ops_matmul::dequant_rows`); `None` reads `LSERVE_CUDA_DEQUANT_MB` once, at open (unset:
    /// `ops_matmul::DEQUANT_SCRATCH_BYTES`).
    pub dequant_bytes: Option<usize>,
    /// Which kernel takes a 16-bit KV prefill at head_dim 128 on sm_90 ([`HopperPrefill`]);
    /// `None` reads `LSERVE_CUDA_PREFILL_WGMMA` per launch (unset: [`HopperPrefill::Ws`]).
    pub hopper_prefill: Option<HopperPrefill>,
    /// Fold a batch-1 decode step's norms and silu_mul into the GEMVs after them and its residual
    /// adds into o_proj's and down's (`Backend::matmul_prologue_fuses`); `None` reads
    /// `LSERVE_CUDA_FUSE_DECODE` once, at open (unset: [`FUSE_DECODE_DEFAULT`]).
    pub fuse_decode: Option<bool>,
}

/// Whether a batch-1 decode step runs fused where `LSERVE_CUDA_FUSE_DECODE` is unset.
pub const FUSE_DECODE_DEFAULT: bool = false;

impl Default for CudaOptions {
    fn default() -> Self {
        CudaOptions {
            kernel_cache: None,
            graph_replay: true,
            mmv: None,
            dequant_bytes: None,
            hopper_prefill: None,
            fuse_decode: None,
        }
    }
}

impl CudaBackend {
    /// Open CUDA device `ordinal` (see `lserve devices`) with default options (no kernel cache).
    pub fn new(ordinal: usize) -> Result<Self> {
        Self::with_options(ordinal, CudaOptions::default())
    }

    /// Open CUDA device `ordinal` and load the kernels.
    pub fn with_options(ordinal: usize, opts: CudaOptions) -> Result<Self> {
        let gpu = Gpu::open(ordinal, &opts)?;
        let mut caps = Caps {
            name: "cuda",
            device: format!(
                "{} (sm_{}{}, {} SMs, {} MiB, kernels {})",
                gpu.name,
                gpu.cc.0,
                gpu.cc.1,
                gpu.sm_count,
                gpu.total_mem >> 20,
                gpu.arch
            ),
            // The float types, then every quantized format (matmul_quant.cu, embed.cu).
            weight_dtypes: [DType::BF16, DType::F16, DType::F32].into_iter().chain(bindings::QUANT_DTYPES).collect(),
            kv_dtypes: vec![DType::BF16, DType::F16, DType::F32, DType::I8, DType::F8E4M3],
            // Kernels address pools with u32 element offsets.
            max_buffer_bytes: 1 << 32,
            memory_bytes: gpu.total_mem as u64,
            matmul_x16_from: Some(ops_matmul::X16_FROM_M),
            act16_from: Some(ops_matmul::X16_FROM_M),
            matmul_x8_max_m: ops_matmul::MMQ_MAX_M,
            act_x8_dtypes: vec![],
            act_x8_max_k: 0,
            act_x8_k_multiple: 0,
        };
        let mmv = match opts.mmv {
            Some(m) => m,
            None => MmvMode::from_env(gpu.sm_count)?,
        };
        // Knobs read at open (backend/env.rs). LSERVE_CUDA_PACK: off stores every 32-element-format
        // matrix in GGML blocks; on, those whose rows are whole 256-element super-blocks packed
        // (packed.rs). LSERVE_CUDA_ACT_X8: off keeps batch-1 activations in f32 (each integer GEMV
        // then quantizes its x itself, and the ops refuse X8 buffers); on, the norms, silu_mul and
        // the decode attention write the digits (Caps::act_x8_dtypes).
        let pack = switch_from_env("LSERVE_CUDA_PACK")?;
        if switch_from_env("LSERVE_CUDA_ACT_X8")? {
            caps.act_x8_dtypes = ops_matmul::x8_dtypes(mmv, pack);
            // x's digits fit the batch-1 GEMV's shared memory (ops_matmul::mmv_smem_bytes).
            caps.act_x8_max_k = gpu.smem_optin as usize / 80 * 32;
            caps.act_x8_k_multiple = 4;
        }
        let dequant_bytes = match opts.dequant_bytes {
            Some(b) => b.max(1),
            None => mib_from_env("LSERVE_CUDA_DEQUANT_MB", ops_matmul::DEQUANT_SCRATCH_BYTES)?,
        };
        let out16 = switch_from_env("LSERVE_CUDA_OUT16")?;
        let decode_splits = count_from_env("LSERVE_CUDA_DECODE_SPLITS", ops_attention::MAX_SPLITS)?;
        let decode_pf = switch_from_env("LSERVE_CUDA_DECODE_PF")?;
        let rope_rows = switch_from_env("LSERVE_CUDA_ROPE_ROWS")?;
        let ad_gemm = switch_from_env("LSERVE_CUDA_AD_GEMM")?;
        let fuse_residual = switch_from_env("LSERVE_CUDA_FUSE_RESIDUAL")?;
        let fuse_decode = match opts.fuse_decode {
            Some(on) => on,
            None if std::env::var_os("LSERVE_CUDA_FUSE_DECODE").is_none() => FUSE_DECODE_DEFAULT,
            None => switch_from_env("LSERVE_CUDA_FUSE_DECODE")?,
        };
        let fuse_silu = switch_from_env("LSERVE_CUDA_FUSE_SILU")?;
        let mmv_stages =
            count_from_env("LSERVE_CUDA_MMV_STAGES", ops_matmul::MMV_MAX_STAGES)?.unwrap_or(ops_matmul::MMV_MAX_STAGES);
        Ok(CudaBackend {
            gpu,
            caps,
            mmv,
            pack,
            dequant_bytes,
            hopper_prefill: opts.hopper_prefill,
            out16,
            decode_splits,
            decode_pf,
            mmv_stages,
            rope_rows,
            ad_gemm,
            fuse_residual,
            fuse_decode,
            fuse_silu,
        })
    }

    pub(crate) fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// Replay recorded decode steps as CUDA graphs (initially `CudaOptions::graph_replay`).
    pub fn set_graph_replay(&self, on: bool) {
        self.gpu.set_graph_replay(on)
    }

    /// The Hopper prefill kernel chosen at open (`CudaOptions::hopper_prefill`), if any.
    pub(crate) fn hopper_prefill(&self) -> Option<HopperPrefill> {
        self.hopper_prefill
    }

    /// The decode attention's split cap read at open (`LSERVE_CUDA_DECODE_SPLITS`), if set.
    pub(crate) fn decode_splits(&self) -> Option<usize> {
        self.decode_splits
    }

    /// Whether 8-bit KV decode takes the `_pf` kernels (`LSERVE_CUDA_DECODE_PF` at open).
    pub(crate) fn decode_pf(&self) -> bool {
        self.decode_pf
    }

    /// The bulk GEMVs' stage cap read at open (`LSERVE_CUDA_MMV_STAGES`, else the maximum).
    pub(crate) fn mmv_stages(&self) -> usize {
        self.mmv_stages
    }

    /// Whether `antidiagonal_score` takes its GEMM path where the blocks allow
    /// (`LSERVE_CUDA_AD_GEMM` at open; ops_blocks.rs).
    pub(crate) fn ad_gemm(&self) -> bool {
        self.ad_gemm
    }

    /// Whether calls of several tokens take `rope_append_kv_rows` (`LSERVE_CUDA_ROPE_ROWS`).
    pub(crate) fn rope_rows(&self) -> bool {
        self.rope_rows
    }

    /// The batch-1 quantized GEMV's mode (`CudaOptions::mmv`, else `LSERVE_CUDA_MMV` at open).
    pub fn mmv(&self) -> MmvMode {
        self.mmv
    }

    /// Whether Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 matrices of whole 256-element super-blocks are stored packed
    /// (packed.rs).
    pub fn packs(&self) -> bool {
        self.pack
    }

    /// What CUDA-graph replay of recorded steps did so far (graph.rs).
    pub fn graph_stats(&self) -> GraphStats {
        self.gpu.graph_stats()
    }

    fn upload_bytes(&self, dtype: DType, len: usize, bytes: &[u8]) -> Result<CudaBuffer> {
        let b = self.alloc(dtype, len)?;
        // SAFETY: the allocation holds at least bytes.len() bytes; pageable host memory is
        // staged before the call returns.
        unsafe { cudarc::driver::result::memcpy_htod_async(b.ptr(), bytes, self.gpu.cu_stream()?) }
            .map_err(drv("upload"))?;
        Ok(b)
    }

    fn write_bytes(&self, dst: &CudaBuffer, bytes: &[u8]) -> Result<()> {
        self.write_bytes_at(dst, 0, bytes)
    }

    fn write_bytes_at(&self, dst: &CudaBuffer, offset_bytes: usize, bytes: &[u8]) -> Result<()> {
        // SAFETY: callers checked that dst holds offset_bytes + bytes.len() bytes.
        unsafe {
            cudarc::driver::result::memcpy_htod_async(dst.ptr() + offset_bytes as u64, bytes, self.gpu.cu_stream()?)
        }
        .map_err(drv("write"))
    }

    fn read_bytes(&self, src: &CudaBuffer, offset_bytes: usize, n_bytes: usize) -> Result<Vec<u8>> {
        let mut out = vec![0u8; n_bytes];
        // SAFETY: callers checked the range lies inside src; the stream is synchronised before
        // `out` is read or dropped.
        unsafe {
            cudarc::driver::result::memcpy_dtoh_async(&mut out, src.ptr() + offset_bytes as u64, self.gpu.cu_stream()?)
        }
        .map_err(drv("download"))?;
        self.gpu.sync()?;
        Ok(out)
    }
}

/// A size in MiB read at open (`LSERVE_CUDA_DEQUANT_MB`: the quantized GEMM's dequantization
/// scratch, a measurement knob), `default` bytes when unset; 1..=65536 MiB.
fn mib_from_env(name: &str, default: usize) -> Result<usize> {
    match std::env::var(name).as_deref().map(str::trim) {
        Err(_) | Ok("") => Ok(default),
        Ok(v) => match v.parse::<usize>() {
            Ok(mb @ 1..=65536) => Ok(mb << 20),
            _ => Err(Error::InvalidArgument(format!("{name}: `{v}` is not a size in MiB from 1 to 65536"))),
        },
    }
}

/// `b` holds at least `n` elements of `dtype`.
pub(crate) fn need(b: &CudaBuffer, dtype: DType, n: usize, what: &str) -> Result<()> {
    if b.dtype != dtype {
        return Err(err(format!("{what}: expected a {dtype:?} buffer, got {:?}", b.dtype)));
    }
    if b.len < n {
        return Err(err(format!("{what}: {} elements, op needs {n}", b.len)));
    }
    Ok(())
}

/// `b` is an activation of at least `n` elements in f32 or 16 bits (a cuBLAS GEMM's 16-bit out,
/// an attention's 16-bit out): the kernels' code for its dtype, 0 f32, 1 f16, 2 bf16
/// (`QkvRow` and `attn_store1/2` in the .cu files).
pub(crate) fn need_act(b: &CudaBuffer, n: usize, what: &str) -> Result<u32> {
    let code = match b.dtype {
        DType::F16 => 1,
        DType::BF16 => 2,
        _ => 0,
    };
    need(b, if code == 0 { DType::F32 } else { b.dtype }, n, what)?;
    Ok(code)
}

/// `b` holds at least `n` elements of a float type (weights or KV).
pub(crate) fn need_float(b: &CudaBuffer, n: usize, what: &str) -> Result<()> {
    if !matches!(b.dtype, DType::F32 | DType::F16 | DType::BF16) || b.len < n {
        return Err(err(format!("{what}: {:?} x {} is not a float buffer of {n} elements", b.dtype, b.len)));
    }
    Ok(())
}

/// `b` is a quantized `[n][k]` weight (`DType::is_weight_quant`: its len counts bytes) with k a
/// whole number of the format's blocks.
pub(crate) fn need_weights(b: &CudaBuffer, n: usize, k: usize, what: &str) -> Result<()> {
    if !b.dtype.is_weight_quant() {
        return Err(err(format!("{what}: {:?} is not a quantized weight dtype", b.dtype)));
    }
    if b.packed && !k.is_multiple_of(256) {
        return Err(err(format!(
            "{what}: a packed {:?} matrix has rows of whole 256-element super-blocks, not k = {k}",
            b.dtype
        )));
    }
    match b.dtype.weight_bytes(n, k) {
        None => Err(err(format!("{what}: k = {k} is not a whole number of {:?} blocks", b.dtype))),
        Some(need) if b.len < need => {
            Err(err(format!("{what}: {} bytes, a [{n}][{k}] {:?} matrix needs {need}", b.len, b.dtype)))
        }
        Some(_) => Ok(()),
    }
}

/// A raw byte range inside `b`.
fn raw_range(b: &CudaBuffer, offset: usize, len: usize, what: &str) -> Result<()> {
    let size = context::bytes_for(b.dtype, b.len);
    if offset + len > size {
        return Err(err(format!("{what}: bytes {offset}..{} of a {size}-byte buffer", offset + len)));
    }
    Ok(())
}

/// `b` is a KV pool (a float or 8-bit KV dtype) of at least `rows` token rows of `hd`.
pub(crate) fn need_kv(b: &CudaBuffer, rows: usize, hd: usize, what: &str) -> Result<()> {
    let n = kv_pool_len(b.dtype, rows, hd);
    if !matches!(b.dtype, DType::F32 | DType::F16 | DType::BF16 | DType::I8 | DType::F8E4M3) || b.len < n {
        return Err(err(format!("{what}: {:?} x {} is not a KV pool of {rows} rows of {hd}", b.dtype, b.len)));
    }
    if b.dtype.is_kv8() && !hd.is_multiple_of(16) {
        return Err(err(format!("{what}: 8-bit KV needs head_dim % 16 == 0, not {hd}")));
    }
    Ok(())
}

impl Backend for CudaBackend {
    type Buffer = CudaBuffer;

    fn caps(&self) -> &Caps {
        &self.caps
    }

    fn alloc(&self, dtype: DType, len: usize) -> Result<CudaBuffer> {
        Ok(CudaBuffer { mem: self.gpu.alloc_bytes(bytes_for(dtype, len))?, dtype, len, packed: false })
    }

    fn upload_f32(&self, dtype: DType, data: Vec<f32>) -> Result<CudaBuffer> {
        match dtype {
            DType::F32 => self.upload_bytes(dtype, data.len(), bytemuck::cast_slice(&data)),
            DType::F16 => {
                let h: Vec<u16> = data.iter().map(|&x| half::f16::from_f32(x).to_bits()).collect();
                self.upload_bytes(dtype, data.len(), bytemuck::cast_slice(&h))
            }
            DType::BF16 => {
                let h: Vec<u16> = data.iter().map(|&x| half::bf16::from_f32(x).to_bits()).collect();
                self.upload_bytes(dtype, data.len(), bytemuck::cast_slice(&h))
            }
            d => Err(err(format!("cannot upload f32 data as {d:?}"))),
        }
    }

    fn upload_u32(&self, data: &[u32]) -> Result<CudaBuffer> {
        self.upload_bytes(DType::U32, data.len(), bytemuck::cast_slice(data))
    }

    /// f32 buffers only (`write_f32_at` also converts into 16-bit ones).
    fn write_f32(&self, dst: &mut CudaBuffer, data: &[f32]) -> Result<()> {
        need(dst, DType::F32, data.len(), "write_f32")?;
        self.write_bytes(dst, bytemuck::cast_slice(data))
    }

    /// Into a float buffer of any dtype, converted on the host (f32 -> f16/bf16 rounds; values
    /// read from such a buffer come back bit for bit, which is what KV swap-in relies on).
    fn write_f32_at(&self, dst: &mut CudaBuffer, offset: usize, data: &[f32]) -> Result<()> {
        need_float(dst, offset + data.len(), "write_f32_at")?;
        let at = offset * dst.dtype.size();
        match dst.dtype {
            DType::F16 => {
                let h: Vec<u16> = data.iter().map(|&x| half::f16::from_f32(x).to_bits()).collect();
                self.write_bytes_at(dst, at, bytemuck::cast_slice(&h))
            }
            DType::BF16 => {
                let h: Vec<u16> = data.iter().map(|&x| half::bf16::from_f32(x).to_bits()).collect();
                self.write_bytes_at(dst, at, bytemuck::cast_slice(&h))
            }
            _ => self.write_bytes_at(dst, at, bytemuck::cast_slice(data)),
        }
    }

    fn write_u32_at(&self, dst: &mut CudaBuffer, offset: usize, data: &[u32]) -> Result<()> {
        need(dst, DType::U32, offset + data.len(), "write_u32_at")?;
        self.write_bytes_at(dst, offset * 4, bytemuck::cast_slice(data))
    }

    /// A packed weight comes back as its GGML bytes (the whole buffer unpacked, then the range).
    fn download_raw(&self, src: &CudaBuffer, offset: usize, len: usize) -> Result<Vec<u8>> {
        raw_range(src, offset, len, "download_raw")?;
        if src.packed {
            let all = packed::unpack(src.dtype, &self.read_bytes(src, 0, src.len)?);
            return Ok(all[offset..offset + len].to_vec());
        }
        self.read_bytes(src, offset, len)
    }

    fn write_raw_at(&self, dst: &mut CudaBuffer, offset: usize, data: &[u8]) -> Result<()> {
        raw_range(dst, offset, data.len(), "write_raw_at")?;
        if dst.packed {
            return Err(err("write_raw_at: a packed weight is written whole (upload_weight), not in ranges"));
        }
        self.write_bytes_at(dst, offset, data)
    }

    /// `ops_matmul::x16_dtype`: the 16-bit weights' own dtype, and f16 for quantized weights on
    /// the dequantize + cuBLAS path.
    fn weight_x16_dtype(&self, w: &CudaBuffer, m: usize) -> Option<DType> {
        ops_matmul::x16_dtype(w.dtype, m)
    }
    /// Where the matmul is a cuBLAS GEMM (`ops_matmul::x16_dtype`), its C in the 16-bit type.
    fn matmul_out16_dtype(&self, w: &CudaBuffer, m: usize) -> Option<DType> {
        ops_matmul::x16_dtype(w.dtype, m).filter(|_| self.out16)
    }
    /// Where the matmul is a cuBLAS GEMM (`ops_matmul::x16_dtype`) of a prefill's rows
    /// (`ops_matmul::ACC_FROM_M`): beta = 1 reads the residual in the GEMM's epilogue, in place of
    /// add_rmsnorm's separate read of the product. (`matmul` itself takes accumulate on any
    /// cuBLAS GEMM.)
    fn matmul_accumulates(&self, w: &CudaBuffer, m: usize) -> bool {
        let gemm = m >= ops_matmul::ACC_FROM_M && ops_matmul::x16_dtype(w.dtype, m).is_some();
        // Every batch-1 GEMV adds into out in its store (the prologues then read the residual).
        (gemm && self.fuse_residual) || (m == 1 && self.fuse_decode)
    }
    fn matmul_prologue_fuses(&self, p: &MatmulParams, w: &CudaBuffer, kind: PrologueKind) -> bool {
        self.fuse_decode && ops_matmul::prologue_fuses(self, p, w, kind)
    }
    /// The listed dtypes (`Caps::act_x8_dtypes`), but a matrix of a format that packs takes X8 only
    /// where it is stored packed: its GGML-block GEMV quantizes x in every block, faster than
    /// reading the digits (`ops_matmul::x8_dtypes`).
    fn weight_takes_x8(&self, w: &CudaBuffer, k: usize) -> bool {
        let c = &self.caps;
        let listed = c.x8_row_fits(k) && c.act_x8_dtypes.contains(&w.dtype);
        listed && (w.packed || !(self.pack && packed::PACKED_DTYPES.contains(&w.dtype)))
    }

    /// Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 matrices whose rows are whole 256-element super-blocks are
    /// stored packed (packed.rs).
    fn upload_weight(&self, dtype: DType, rows: usize, k: usize, data: &[u8]) -> Result<CudaBuffer> {
        if !packed::packs(dtype, k, self.pack) {
            return self.upload_raw(dtype, data);
        }
        if dtype.weight_bytes(rows, k) != Some(data.len()) {
            return Err(err(format!("upload_weight: {} bytes are not a [{rows}][{k}] {dtype:?} matrix", data.len())));
        }
        let mut b = self.upload_bytes(dtype, data.len(), &packed::pack(dtype, data))?;
        b.packed = true;
        Ok(b)
    }

    /// f16/bf16 buffers are converted to f32 on the host.
    fn download_f32(&self, src: &CudaBuffer, offset: usize, len: usize) -> Result<Vec<f32>> {
        need_float(src, offset + len, "download_f32")?;
        let size = src.dtype.size();
        let bytes = self.read_bytes(src, offset * size, len * size)?;
        Ok(match src.dtype {
            DType::F16 => bytes.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
            DType::BF16 => bytes.chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
            _ => bytemuck::pod_collect_to_vec(&bytes),
        })
    }

    fn download_u32(&self, src: &CudaBuffer, offset: usize, len: usize) -> Result<Vec<u32>> {
        need(src, DType::U32, offset + len, "download_u32")?;
        Ok(bytemuck::pod_collect_to_vec(&self.read_bytes(src, offset * 4, len * 4)?))
    }

    fn sync(&self) -> Result<()> {
        self.gpu.sync()
    }

    fn graph_begin(&self) {
        self.gpu.graph_begin()
    }

    fn bind_thread(&self) -> Result<()> {
        self.gpu.bind()
    }

    fn graph_end(&self, run: bool) -> Result<()> {
        self.gpu.graph_end(run)
    }

    fn len(&self, b: &CudaBuffer) -> usize {
        b.len
    }

    fn dtype(&self, b: &CudaBuffer) -> DType {
        b.dtype
    }

    fn buffer_id(&self, b: &CudaBuffer) -> u64 {
        b.ptr()
    }

    fn embed(&self, p: &EmbedParams, table: &CudaBuffer, ids: &CudaBuffer, out: &mut CudaBuffer) -> Result<()> {
        ops_basic::embed(self, p, table, ids, out)
    }

    fn matmul(
        &self,
        p: &MatmulParams,
        x: &CudaBuffer,
        w: &CudaBuffer,
        bias: Option<&CudaBuffer>,
        out: &mut CudaBuffer,
    ) -> Result<()> {
        ops_matmul::matmul(self, p, x, w, bias, out)
    }

    fn matmul_prologue(
        &self,
        p: &MatmulParams,
        pro: Prologue<'_, CudaBuffer>,
        src: &CudaBuffer,
        w: &CudaBuffer,
        bias: Option<&CudaBuffer>,
        out: &mut CudaBuffer,
    ) -> Result<()> {
        ops_matmul::matmul_prologue(self, p, pro, src, w, bias, out)
    }

    fn rmsnorm(&self, p: &RmsnormParams, x: &CudaBuffer, w: &CudaBuffer, out: &mut CudaBuffer) -> Result<()> {
        ops_basic::rmsnorm(self, p, None, x, w, out)
    }

    fn add_rmsnorm(
        &self,
        p: &RmsnormParams,
        residual: &mut CudaBuffer,
        x: &CudaBuffer,
        w: &CudaBuffer,
        out: &mut CudaBuffer,
    ) -> Result<()> {
        ops_basic::rmsnorm(self, p, Some(residual), x, w, out)
    }

    fn add(&self, p: &AddParams, a: &mut CudaBuffer, b: &CudaBuffer) -> Result<()> {
        ops_basic::add(self, p, a, b)
    }

    fn silu_mul(&self, p: &SiluMulParams, gate_up: &CudaBuffer, out: &mut CudaBuffer) -> Result<()> {
        ops_basic::silu_mul(self, p, gate_up, out)
    }

    fn gelu_tanh_mul(&self, p: &GeluTanhMulParams, gate_up: &CudaBuffer, out: &mut CudaBuffer) -> Result<()> {
        ops_basic::gelu_tanh_mul(self, p, gate_up, out)
    }

    fn head_rmsnorm(&self, p: &HeadRmsnormParams, x: &mut CudaBuffer, w: &CudaBuffer) -> Result<()> {
        ops_basic::head_rmsnorm(self, p, x, w)
    }

    fn scale(&self, p: &ScaleParams, x: &mut CudaBuffer) -> Result<()> {
        ops_basic::scale(self, p, x)
    }

    fn gather_rows(
        &self,
        p: &GatherRowsParams,
        src: &CudaBuffer,
        rows: &CudaBuffer,
        out: &mut CudaBuffer,
    ) -> Result<()> {
        ops_basic::gather_rows(self, p, src, rows, out)
    }

    fn mean_rows(&self, p: &MeanRowsParams, src: &CudaBuffer, indptr: &CudaBuffer, out: &mut CudaBuffer) -> Result<()> {
        ops_basic::mean_rows(self, p, src, indptr, out)
    }

    fn rope_append_kv(
        &self,
        p: &RopeAppendKvParams,
        qkv: &CudaBuffer,
        meta: &RopeAppendMeta<Self>,
        q: &mut CudaBuffer,
        kv: LayerKvMut<Self>,
    ) -> Result<()> {
        ops_kv::rope_append_kv(self, p, qkv, meta, q, kv)
    }

    fn prefill_attention(
        &self,
        p: &AttentionParams,
        q: &CudaBuffer,
        q_indptr: &CudaBuffer,
        kv: LayerKv<Self>,
        meta: &PagedMeta<Self>,
        blocks: Option<&BlockPages<Self>>,
        out: &mut CudaBuffer,
    ) -> Result<()> {
        ops_attention::prefill_attention(self, p, q, q_indptr, kv, meta, blocks, out)
    }

    fn sparse_decode_attention(
        &self,
        p: &AttentionParams,
        q: &CudaBuffer,
        kv: LayerKv<Self>,
        meta: &PagedMeta<Self>,
        pages: &HeadPages<Self>,
        out: &mut CudaBuffer,
    ) -> Result<()> {
        ops_attention::sparse_decode_attention(self, p, q, kv, meta, pages, out)
    }

    fn page_select(
        &self,
        p: &PageSelectParams,
        q: &CudaBuffer,
        kv: LayerKv<Self>,
        meta: &PagedMeta<Self>,
        seq_slot: &CudaBuffer,
        select_mask: &CudaBuffer,
        out: SelectedMut<Self>,
    ) -> Result<()> {
        ops_kv::page_select(self, p, q, kv, meta, seq_slot, select_mask, out)
    }

    fn antidiagonal_score(
        &self,
        p: &AntidiagonalParams,
        q: &CudaBuffer,
        kv: LayerKv<Self>,
        meta: &PagedMeta<Self>,
        blocks: &BlockRows<Self>,
        scores: &mut CudaBuffer,
    ) -> Result<()> {
        ops_blocks::antidiagonal_score(self, p, q, kv, meta, blocks, scores)
    }

    fn page_top_k(
        &self,
        p: &PageTopKParams,
        scores: &CudaBuffer,
        page_indptr: &CudaBuffer,
        seq_slot: &CudaBuffer,
        select_mask: &CudaBuffer,
        out: SelectedMut<Self>,
    ) -> Result<()> {
        ops_blocks::page_top_k(self, p, scores, page_indptr, seq_slot, select_mask, out)
    }

    fn lambda_mass(
        &self,
        p: &LambdaMassParams,
        q: &CudaBuffer,
        kv: LayerKv<Self>,
        meta: &PagedMeta<Self>,
        out: &mut CudaBuffer,
    ) -> Result<()> {
        ops_attention::lambda_mass(self, p, q, kv, meta, out)
    }

    fn fill_random(&self, p: &FillRandomParams, out: &mut CudaBuffer) -> Result<()> {
        ops_basic::fill_random(self, p, out)
    }

    fn set_profiling(&self, on: bool) -> Result<()> {
        self.gpu.set_profiling(on)
    }

    fn take_profile(&self) -> Vec<(String, u64, f64)> {
        self.gpu.take_profile()
    }

    fn argmax(&self, p: &ArgmaxParams, x: &CudaBuffer, out: &mut CudaBuffer) -> Result<()> {
        ops_basic::argmax(self, p, x, out)
    }
    fn sample(&self, p: &SampleParams, logits: &CudaBuffer, settings: &CudaBuffer, out: &mut CudaBuffer) -> Result<()> {
        ops_basic::sample(self, p, logits, settings, out)
    }
}
