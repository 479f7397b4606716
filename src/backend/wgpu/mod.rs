//! The wgpu backend: every op is a WGSL compute shader (`shaders/<op>.wgsl`), run through wgpu on
//! Vulkan, Metal or DX12 — and on Mesa's lavapipe (a CPU Vulkan driver) in CI.
//!
//! Buffers are plain storage buffers; f16/bf16 weights and KV are packed two per u32 and 8-bit KV
//! four per u32 (plus a scale word per row), so no shader extension is needed to read them.
//! Quantized weights (GGML blocks, I8Row, F8Row) are their bytes as they are, len in bytes, read
//! as u32 words by shaders/quant_weights.wgsl.
//! Activations and logits are f32.
//! Ops only record commands (`context::Gpu`); `download_*` and `sync` submit and wait. Each op
//! checks its buffers against its params before recording, like the CPU reference.

mod context;
mod ops_attention;
mod ops_basic;
mod ops_blocks;
mod ops_fused;
mod ops_kv;
mod ops_matmul;
pub mod pipelines;
pub mod shaders;
mod x8;

use std::cell::RefCell;
use std::sync::Arc;

use crate::backend::*;
use crate::error::Result;
use context::{Gpu, err};
pub use context::{ShaderChecks, WgpuOptions, has_coop_f16_f32};

/// The slots of [`WgpuBackend::scratch_in`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum Scratch {
    /// The decode attention's split partials, the GEMV's x digits, the GEMM's f16 x.
    Main,
    /// `rope_append_kv`'s staged rows for packed pools (k, v) and the unused streaming bindings
    /// of its identity pass.
    StagedK,
    StagedV,
    SpareK,
    SpareV,
}

impl Scratch {
    const COUNT: usize = 5;
}

/// A device buffer and what it holds.
#[derive(Clone, Debug)]
pub struct WgpuBuffer {
    pub buf: Arc<::wgpu::Buffer>,
    pub dtype: DType,
    /// Elements (not bytes).
    pub len: usize,
}

fn bytes_for(dtype: DType, len: usize) -> u64 {
    match dtype {
        DType::F16 | DType::BF16 => (len.div_ceil(2) * 4) as u64,
        DType::U8 | DType::I8 | DType::F8E4M3 => (len.div_ceil(4) * 4) as u64,
        d => (len * d.size()) as u64,
    }
}

pub struct WgpuBackend {
    gpu: Gpu,
    caps: Caps,
    /// Scratch space of multi-dispatch ops by slot ([`Scratch`]), each grown on demand and never
    /// shrunk. One op's dispatches finish before the next op's start (wgpu orders the dispatches
    /// of a pass, with barriers between them) and recorded dispatches keep a replaced buffer
    /// alive, so one buffer a slot serves every call.
    scratch: RefCell<[Option<WgpuBuffer>; Scratch::COUNT]>,
    /// `[0, 1, 2, ...]` as u32 ([`WgpuBackend::iota`]), grown on demand.
    iota: RefCell<Option<WgpuBuffer>>,
    /// [`WgpuOptions::fuse_residual`]: the batch-1 GEMVs take `accumulate`.
    fuse_residual: bool,
    /// [`WgpuOptions::fuse_rope`]: `matmul_rope_append_kv` is one dispatch where it can be.
    fuse_rope: bool,
    /// [`WgpuOptions::fuse_silu`]: `matmul_silu_mul` is one dispatch where it can be.
    fuse_silu: bool,
}

impl WgpuBackend {
    /// Open adapter `index` (see `lserve devices`), or the first, with the optional features
    /// `LSERVE_WGPU_FEATURES` allows (all by default).
    pub fn new(index: Option<usize>) -> Result<Self> {
        Self::with_options(index, WgpuOptions::from_env()?)
    }

    pub fn with_options(index: Option<usize>, opts: WgpuOptions) -> Result<Self> {
        let (fuse_residual, fuse_rope, fuse_silu) = (opts.fuse_residual, opts.fuse_rope, opts.fuse_silu);
        let gpu = Gpu::open(index, opts)?;
        let info = &gpu.info;
        let caps = Caps {
            name: "wgpu",
            device: format!("{} ({:?}, {:?}, {})", info.name, info.backend, info.device_type, info.driver),
            weight_dtypes: shaders::WEIGHT_DTYPES.to_vec(),
            kv_dtypes: shaders::KV_DTYPES.to_vec(),
            max_buffer_bytes: gpu.limits.max_storage_buffer_binding_size,
            memory_bytes: gpu.limits.max_buffer_size.min(u64::MAX / 2),
            // The tensor-core GEMMs (ops_matmul.rs) round x to f16 (bf16 first for bf16 weights).
            matmul_x16_from: gpu.use_coop.then_some(ops_matmul::COOP_FROM_M),
            act16_from: None,
            // The two-digit-x batch-1 GEMV (ops_matmul.rs) needs SUBGROUP.
            matmul_x8_max_m: usize::from(gpu.use_subgroup),
            // With SUBGROUP the batch-1 GEMV takes x as digits the norms, silu_mul and the decode
            // merge wrote (no pack pass), for rows of whole blocks.
            act_x8_dtypes: if gpu.use_subgroup {
                shaders::WEIGHT_DTYPES.into_iter().filter(|&d| shaders::has_x8(d)).collect()
            } else {
                vec![]
            },
            act_x8_max_k: if gpu.use_subgroup { u32::MAX as usize / 4 } else { 0 },
            act_x8_k_multiple: 32,
        };
        Ok(WgpuBackend {
            gpu,
            caps,
            scratch: RefCell::new(Default::default()),
            iota: RefCell::new(None),
            fuse_residual,
            fuse_rope,
            fuse_silu,
        })
    }

    /// Whether the native-f16 shader variants are in use (SHADER_F16 present and allowed).
    pub fn has_f16(&self) -> bool {
        self.gpu.use_f16
    }

    /// Whether the subgroup shader variants are in use (SUBGROUP present and allowed).
    pub fn has_subgroup(&self) -> bool {
        self.gpu.use_subgroup
    }

    /// Whether the cooperative-matrix GEMMs are in use (`context::coop_supported`, allowed by
    /// the options).
    pub fn has_coop(&self) -> bool {
        self.gpu.use_coop
    }

    /// A scratch buffer of at least `words` 32-bit words (contents undefined; typed f32, the
    /// shaders bind it as they need): [`Scratch::Main`].
    pub(crate) fn scratch(&self, words: usize) -> Result<WgpuBuffer> {
        self.scratch_in(Scratch::Main, words)
    }

    /// The scratch buffer of `slot`, at least `words` 32-bit words (contents undefined). One
    /// buffer a slot, reused by every op that takes it (wgpu orders the dispatches), so an op
    /// needing several at once takes distinct slots; a new buffer would cost an allocation and,
    /// on the device, wgpu's zero-fill before its first use.
    pub(crate) fn scratch_in(&self, slot: Scratch, words: usize) -> Result<WgpuBuffer> {
        let mut s = self.scratch.borrow_mut();
        let s = &mut s[slot as usize];
        if let Some(b) = s.as_ref().filter(|b| b.len >= words) {
            return Ok(b.clone());
        }
        let b = self.alloc(DType::F32, words.max(1 << 16).next_power_of_two())?;
        *s = Some(b.clone());
        Ok(b)
    }

    /// A u32 buffer holding at least `[0, 1, ..., len - 1]` (an identity map), uploaded once and
    /// grown on demand.
    pub(crate) fn iota(&self, len: usize) -> Result<WgpuBuffer> {
        let mut s = self.iota.borrow_mut();
        if let Some(b) = s.as_ref().filter(|b| b.len >= len) {
            return Ok(b.clone());
        }
        let n = len.max(1024).next_power_of_two();
        let b = self.upload_u32(&(0..n as u32).collect::<Vec<u32>>())?;
        *s = Some(b.clone());
        Ok(b)
    }

    pub(crate) fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// The 16-bit elements of the words covering `offset..offset + len` of an f16/bf16 buffer,
    /// as f32, and the index of element `offset` among them.
    fn read_16(&self, b: &WgpuBuffer, offset: usize, len: usize) -> Result<(Vec<f32>, usize)> {
        need(b, b.dtype, offset + len, "16-bit read")?;
        let (w0, w1) = (offset / 2, (offset + len).div_ceil(2));
        let bytes = self.gpu.read(&b.buf, w0 as u64 * 4, (w1 - w0) as u64 * 4)?;
        let vals = bytes
            .chunks_exact(2)
            .map(|c| {
                let h = [c[0], c[1]];
                if b.dtype == DType::F16 {
                    half::f16::from_le_bytes(h).to_f32()
                } else {
                    half::bf16::from_le_bytes(h).to_f32()
                }
            })
            .collect();
        Ok((vals, offset - 2 * w0))
    }

    /// `write_f32_at` into an f16/bf16 buffer: the covering words are read, patched (values
    /// rounded to nearest even) and written back, so neighbours keep their bits.
    fn write_16_at(&self, dst: &WgpuBuffer, offset: usize, data: &[f32]) -> Result<()> {
        let (mut vals, first) = self.read_16(dst, offset, data.len())?;
        vals[first..first + data.len()].copy_from_slice(data);
        let halves: Vec<u16> = vals
            .iter()
            .map(|&x| {
                if dst.dtype == DType::F16 {
                    half::f16::from_f32(x).to_bits()
                } else {
                    half::bf16::from_f32(x).to_bits()
                }
            })
            .collect();
        self.gpu.submit();
        self.gpu.queue.write_buffer(&dst.buf, (offset / 2) as u64 * 4, bytemuck::cast_slice(&halves));
        Ok(())
    }
}

/// `b` holds at least `n` elements of `dtype`.
pub(crate) fn need(b: &WgpuBuffer, dtype: DType, n: usize, what: &str) -> Result<()> {
    if b.dtype != dtype {
        return Err(err(format!("{what}: expected a {dtype:?} buffer, got {:?}", b.dtype)));
    }
    if b.len < n {
        return Err(err(format!("{what}: {} elements, op needs {n}", b.len)));
    }
    Ok(())
}

/// `b` is a KV pool of `dtype` (one of [`shaders::KV_DTYPES`]) holding `rows` token rows of `hd`
/// (8-bit pools: codes and row scales, [`kv_pool_len`]; they need `hd % 16 == 0`).
pub(crate) fn need_kv(b: &WgpuBuffer, dtype: DType, rows: usize, hd: usize, what: &str) -> Result<()> {
    if !shaders::KV_DTYPES.contains(&dtype) {
        return Err(err(format!("{what}: {dtype:?} is not a KV dtype")));
    }
    if dtype.is_kv8() && !hd.is_multiple_of(16) {
        return Err(err(format!("{what}: 8-bit KV needs head_dim % 16 == 0, not {hd}")));
    }
    need(b, dtype, kv_pool_len(dtype, rows, hd), what)
}

/// `b` holds a `[rows][cols]` weight matrix of a dtype the shaders read: a float buffer of at
/// least rows * cols elements, or a quantized one of exactly `DType::weight_bytes` bytes.
pub(crate) fn need_weights(b: &WgpuBuffer, rows: usize, cols: usize, what: &str) -> Result<()> {
    if !shaders::WEIGHT_DTYPES.contains(&b.dtype) {
        return Err(err(format!("{what}: {:?} is not a weight dtype of this backend", b.dtype)));
    }
    if b.dtype.is_weight_quant() {
        return match b.dtype.weight_bytes(rows, cols) {
            Some(n) if n == b.len => Ok(()),
            Some(n) => Err(err(format!("{what}: {} bytes, a [{rows}][{cols}] {:?} matrix has {n}", b.len, b.dtype))),
            None => Err(err(format!("{what}: {cols} columns are not a whole number of {:?} blocks", b.dtype))),
        };
    }
    let n = rows * cols;
    if b.len < n {
        return Err(err(format!("{what}: {:?} x {} is not a weight buffer of {n} elements", b.dtype, b.len)));
    }
    Ok(())
}

/// A raw byte range inside `b`, 4-byte aligned (wgpu's copy alignment).
fn raw_range(b: &WgpuBuffer, offset: usize, len: usize, what: &str) -> Result<()> {
    if !offset.is_multiple_of(4) || !len.is_multiple_of(4) || (offset + len) as u64 > bytes_for(b.dtype, b.len) {
        return Err(err(format!(
            "{what}: bytes {offset}..{} of a {}-byte buffer (4-aligned)",
            offset + len,
            bytes_for(b.dtype, b.len)
        )));
    }
    Ok(())
}

/// An X8 transfer covers one whole row from the buffer's start: offset 0, whole blocks of 80
/// bytes (the two layouts place every part by the row's block count).
fn x8_whole(offset: usize, len: usize, what: &str) -> Result<()> {
    if offset != 0 || !len.is_multiple_of(80) {
        return Err(err(format!(
            "{what}: an X8 row is moved whole from byte 0 in blocks of 80, not {offset}..{}",
            offset + len
        )));
    }
    Ok(())
}

fn pack16(data: &[f32], f: impl Fn(f32) -> u16) -> Vec<u32> {
    data.chunks(2).map(|c| f(c[0]) as u32 | (c.get(1).map_or(0, |&x| f(x)) as u32) << 16).collect()
}

impl Backend for WgpuBackend {
    type Buffer = WgpuBuffer;

    fn caps(&self) -> &Caps {
        &self.caps
    }

    fn alloc(&self, dtype: DType, len: usize) -> Result<WgpuBuffer> {
        let buf = self.gpu.create_buffer(bytes_for(dtype, len), "alloc")?;
        Ok(WgpuBuffer { buf: Arc::new(buf), dtype, len })
    }

    fn upload_f32(&self, dtype: DType, data: Vec<f32>) -> Result<WgpuBuffer> {
        let words: Vec<u32> = match dtype {
            DType::F32 => data.iter().map(|x| x.to_bits()).collect(),
            DType::F16 => pack16(&data, |x| half::f16::from_f32(x).to_bits()),
            DType::BF16 => pack16(&data, |x| half::bf16::from_f32(x).to_bits()),
            d => return Err(err(format!("cannot upload f32 data as {d:?}"))),
        };
        let b = self.alloc(dtype, data.len())?;
        self.gpu.queue.write_buffer(&b.buf, 0, bytemuck::cast_slice(&words));
        Ok(b)
    }

    /// Quantized weights' byte lengths need not be multiples of 4 (a Q4_0 block is 18 bytes):
    /// the buffer (16-byte padded) gets the bytes and zero padding in one write.
    /// X8 rows are converted to the device layout (x8.rs).
    fn upload_raw(&self, dtype: DType, data: &[u8]) -> Result<WgpuBuffer> {
        if dtype == DType::X8 {
            x8_whole(0, data.len(), "upload_raw")?;
        }
        let b = self.alloc(dtype, data.len())?;
        let mut padded = if dtype == DType::X8 { x8::to_device(data) } else { data.to_vec() };
        padded.resize(data.len().div_ceil(4) * 4, 0);
        self.gpu.submit();
        self.gpu.queue.write_buffer(&b.buf, 0, &padded);
        Ok(b)
    }

    fn upload_u32(&self, data: &[u32]) -> Result<WgpuBuffer> {
        let b = self.alloc(DType::U32, data.len())?;
        self.gpu.queue.write_buffer(&b.buf, 0, bytemuck::cast_slice(data));
        Ok(b)
    }

    fn write_f32_at(&self, dst: &mut WgpuBuffer, offset: usize, data: &[f32]) -> Result<()> {
        if matches!(dst.dtype, DType::F16 | DType::BF16) {
            return self.write_16_at(dst, offset, data);
        }
        need(dst, DType::F32, offset + data.len(), "write_f32_at")?;
        // Ordered after everything recorded so far: submit first, then stage the write.
        self.gpu.submit();
        self.gpu.queue.write_buffer(&dst.buf, offset as u64 * 4, bytemuck::cast_slice(data));
        Ok(())
    }

    fn write_u32_at(&self, dst: &mut WgpuBuffer, offset: usize, data: &[u32]) -> Result<()> {
        need(dst, DType::U32, offset + data.len(), "write_u32_at")?;
        self.gpu.submit();
        self.gpu.queue.write_buffer(&dst.buf, offset as u64 * 4, bytemuck::cast_slice(data));
        Ok(())
    }

    /// An X8 row comes back in the trait's layout (x8.rs): read whole from its start, `len` =
    /// x8_bytes(k) for a row of k (the device layout places its parts by the row's block count,
    /// not by the buffer's length, which a pooled buffer may exceed).
    fn download_raw(&self, src: &WgpuBuffer, offset: usize, len: usize) -> Result<Vec<u8>> {
        raw_range(src, offset, len, "download_raw")?;
        if src.dtype == DType::X8 {
            x8_whole(offset, len, "download_raw")?;
            return Ok(x8::from_device(&self.gpu.read(&src.buf, 0, len as u64)?));
        }
        self.gpu.read(&src.buf, offset as u64, len as u64)
    }

    /// An X8 row is written whole from the buffer's start (as `download_raw` reads it).
    fn write_raw_at(&self, dst: &mut WgpuBuffer, offset: usize, data: &[u8]) -> Result<()> {
        raw_range(dst, offset, data.len(), "write_raw_at")?;
        if dst.dtype == DType::X8 {
            x8_whole(offset, data.len(), "write_raw_at")?;
            self.gpu.submit();
            self.gpu.queue.write_buffer(&dst.buf, 0, &x8::to_device(data));
            return Ok(());
        }
        self.gpu.submit();
        self.gpu.queue.write_buffer(&dst.buf, offset as u64, data);
        Ok(())
    }

    /// f16/bf16 buffers (weights, KV pools) are converted to f32 on the host.
    fn download_f32(&self, src: &WgpuBuffer, offset: usize, len: usize) -> Result<Vec<f32>> {
        if matches!(src.dtype, DType::F16 | DType::BF16) {
            let (vals, first) = self.read_16(src, offset, len)?;
            return Ok(vals[first..first + len].to_vec());
        }
        need(src, DType::F32, offset + len, "download_f32")?;
        let bytes = self.gpu.read(&src.buf, offset as u64 * 4, len as u64 * 4)?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }

    fn download_u32(&self, src: &WgpuBuffer, offset: usize, len: usize) -> Result<Vec<u32>> {
        need(src, DType::U32, offset + len, "download_u32")?;
        let bytes = self.gpu.read(&src.buf, offset as u64 * 4, len as u64 * 4)?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }

    fn sync(&self) -> Result<()> {
        self.gpu.submit();
        self.gpu.wait()
    }

    fn len(&self, b: &WgpuBuffer) -> usize {
        b.len
    }

    fn dtype(&self, b: &WgpuBuffer) -> DType {
        b.dtype
    }

    fn embed(&self, p: &EmbedParams, table: &WgpuBuffer, ids: &WgpuBuffer, out: &mut WgpuBuffer) -> Result<()> {
        ops_basic::embed(self, p, table, ids, out)
    }

    fn matmul(
        &self,
        p: &MatmulParams,
        x: &WgpuBuffer,
        w: &WgpuBuffer,
        bias: Option<&WgpuBuffer>,
        out: &mut WgpuBuffer,
    ) -> Result<()> {
        ops_matmul::matmul(self, p, x, w, bias, out)
    }

    /// At one row (a batch-1 decode step): every GEMV adds into out in its store where
    /// [`WgpuOptions::fuse_residual`] (the default), so o_proj and down write the residual
    /// stream and the norms after them read it (`rmsnorm_x8` then runs a workgroup per 1,024
    /// elements; add_rmsnorm_x8 is one workgroup). `matmul` takes accumulate at one row whatever
    /// this says.
    fn matmul_accumulates(&self, _w: &WgpuBuffer, m: usize) -> bool {
        m == 1 && self.fuse_residual
    }

    /// A batch-1 step's q|k|v GEMV on weights with an integer form into 16-bit pools
    /// (ops_fused.rs `fuses`): `matmul_gemv_x8_rope`, rope_append_kv16 in its epilogue.
    fn matmul_rope_fuses(&self, p: &MatmulParams, w: &WgpuBuffer, r: &RopeAppendKvParams, kv: DType) -> bool {
        ops_fused::fuses(self, p, w, r, kv)
    }

    /// A batch-1 step's gate|up GEMV on weights with an integer form into an X8 act
    /// (ops_fused.rs `silu_fuses`): `matmul_gemv_x8_silu_mul`, silu_mul_x8 in its epilogue.
    fn matmul_silu_mul_fuses(&self, p: &MatmulParams, w: &WgpuBuffer, act: DType) -> bool {
        ops_fused::silu_fuses(self, p, w, act)
    }

    fn matmul_silu_mul(
        &self,
        p: &MatmulParams,
        x: &WgpuBuffer,
        w: &WgpuBuffer,
        bias: Option<&WgpuBuffer>,
        gate_up: &mut WgpuBuffer,
        act: &mut WgpuBuffer,
    ) -> Result<()> {
        ops_fused::matmul_silu_mul(self, p, x, w, bias, gate_up, act)
    }

    fn matmul_rope_append_kv(
        &self,
        p: &MatmulParams,
        x: &WgpuBuffer,
        w: &WgpuBuffer,
        bias: Option<&WgpuBuffer>,
        qkv: &mut WgpuBuffer,
        r: &RopeAppendKvParams,
        meta: &RopeAppendMeta<Self>,
        q: &mut WgpuBuffer,
        kv: LayerKvMut<Self>,
    ) -> Result<()> {
        ops_fused::matmul_rope_append_kv(self, p, x, w, bias, qkv, r, meta, q, kv)
    }

    fn rmsnorm(&self, p: &RmsnormParams, x: &WgpuBuffer, w: &WgpuBuffer, out: &mut WgpuBuffer) -> Result<()> {
        ops_basic::rmsnorm(self, p, None, x, w, out)
    }

    fn add_rmsnorm(
        &self,
        p: &RmsnormParams,
        residual: &mut WgpuBuffer,
        x: &WgpuBuffer,
        w: &WgpuBuffer,
        out: &mut WgpuBuffer,
    ) -> Result<()> {
        ops_basic::rmsnorm(self, p, Some(residual), x, w, out)
    }

    fn add(&self, p: &AddParams, a: &mut WgpuBuffer, b: &WgpuBuffer) -> Result<()> {
        ops_basic::add(self, p, a, b)
    }

    fn silu_mul(&self, p: &SiluMulParams, gate_up: &WgpuBuffer, out: &mut WgpuBuffer) -> Result<()> {
        ops_basic::silu_mul(self, p, gate_up, out)
    }

    fn gelu_tanh_mul(&self, p: &GeluTanhMulParams, gate_up: &WgpuBuffer, out: &mut WgpuBuffer) -> Result<()> {
        ops_basic::gelu_tanh_mul(self, p, gate_up, out)
    }

    fn head_rmsnorm(&self, p: &HeadRmsnormParams, x: &mut WgpuBuffer, w: &WgpuBuffer) -> Result<()> {
        ops_basic::head_rmsnorm(self, p, x, w)
    }

    fn scale(&self, p: &ScaleParams, x: &mut WgpuBuffer) -> Result<()> {
        ops_basic::scale(self, p, x)
    }

    fn gather_rows(
        &self,
        p: &GatherRowsParams,
        src: &WgpuBuffer,
        rows: &WgpuBuffer,
        out: &mut WgpuBuffer,
    ) -> Result<()> {
        ops_basic::gather_rows(self, p, src, rows, out)
    }

    fn mean_rows(&self, p: &MeanRowsParams, src: &WgpuBuffer, indptr: &WgpuBuffer, out: &mut WgpuBuffer) -> Result<()> {
        ops_basic::mean_rows(self, p, src, indptr, out)
    }

    fn rope_append_kv(
        &self,
        p: &RopeAppendKvParams,
        qkv: &WgpuBuffer,
        meta: &RopeAppendMeta<Self>,
        q: &mut WgpuBuffer,
        kv: LayerKvMut<Self>,
    ) -> Result<()> {
        ops_kv::rope_append_kv(self, p, qkv, meta, q, kv)
    }

    fn prefill_attention(
        &self,
        p: &AttentionParams,
        q: &WgpuBuffer,
        q_indptr: &WgpuBuffer,
        kv: LayerKv<Self>,
        meta: &PagedMeta<Self>,
        blocks: Option<&BlockPages<Self>>,
        out: &mut WgpuBuffer,
    ) -> Result<()> {
        ops_attention::prefill_attention(self, p, q, q_indptr, kv, meta, blocks, out)
    }

    fn sparse_decode_attention(
        &self,
        p: &AttentionParams,
        q: &WgpuBuffer,
        kv: LayerKv<Self>,
        meta: &PagedMeta<Self>,
        pages: &HeadPages<Self>,
        out: &mut WgpuBuffer,
    ) -> Result<()> {
        ops_attention::sparse_decode_attention(self, p, q, kv, meta, pages, out)
    }

    fn page_select(
        &self,
        p: &PageSelectParams,
        q: &WgpuBuffer,
        kv: LayerKv<Self>,
        meta: &PagedMeta<Self>,
        seq_slot: &WgpuBuffer,
        select_mask: &WgpuBuffer,
        out: SelectedMut<Self>,
    ) -> Result<()> {
        ops_kv::page_select(self, p, q, kv, meta, seq_slot, select_mask, out)
    }

    fn antidiagonal_score(
        &self,
        p: &AntidiagonalParams,
        q: &WgpuBuffer,
        kv: LayerKv<Self>,
        meta: &PagedMeta<Self>,
        blocks: &BlockRows<Self>,
        scores: &mut WgpuBuffer,
    ) -> Result<()> {
        ops_blocks::antidiagonal_score(self, p, q, kv, meta, blocks, scores)
    }

    fn page_top_k(
        &self,
        p: &PageTopKParams,
        scores: &WgpuBuffer,
        page_indptr: &WgpuBuffer,
        seq_slot: &WgpuBuffer,
        select_mask: &WgpuBuffer,
        out: SelectedMut<Self>,
    ) -> Result<()> {
        ops_blocks::page_top_k(self, p, scores, page_indptr, seq_slot, select_mask, out)
    }

    fn lambda_mass(
        &self,
        p: &LambdaMassParams,
        q: &WgpuBuffer,
        kv: LayerKv<Self>,
        meta: &PagedMeta<Self>,
        out: &mut WgpuBuffer,
    ) -> Result<()> {
        ops_attention::lambda_mass(self, p, q, kv, meta, out)
    }

    fn set_profiling(&self, on: bool) -> Result<()> {
        self.gpu.set_profiling(on)
    }

    fn take_profile(&self) -> Vec<(String, u64, f64)> {
        self.gpu.take_profile()
    }

    fn device_memory(&self) -> Option<DeviceMemory> {
        let r = self.gpu.device.generate_allocator_report()?;
        Some(DeviceMemory { buffers: r.total_allocated_bytes, reserved: r.total_reserved_bytes })
    }

    fn fill_random(&self, p: &FillRandomParams, out: &mut WgpuBuffer) -> Result<()> {
        ops_basic::fill_random(self, p, out)
    }

    fn argmax(&self, p: &ArgmaxParams, x: &WgpuBuffer, out: &mut WgpuBuffer) -> Result<()> {
        ops_basic::argmax(self, p, x, out)
    }
    fn sample(&self, p: &SampleParams, logits: &WgpuBuffer, settings: &WgpuBuffer, out: &mut WgpuBuffer) -> Result<()> {
        ops_basic::sample(self, p, logits, settings, out)
    }
}
