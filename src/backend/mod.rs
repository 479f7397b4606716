//! The Backend trait: the one interface the model, KV cache and engine are written against.
//!
//! Design (docs/architecture.md): a backend owns its buffers and whatever runs them (threads, a
//! CUDA stream, a wgpu queue). Ops take caller-owned outputs (destination passing) and one
//! `#[repr(C)]` parameter struct each — the structs in [`params`] are mirrored field for field in
//! `shaders/*.wgsl` and `cuda/*.cuh`. Ops enqueue and return in stream order; only `download_*`
//! and `sync` wait. Shapes are in elements and row-major; every op documents its layout.
//!
//! Invariants every implementation keeps:
//! - An op never reads an output before writing it (outputs may hold garbage; tests poison them).
//! - An op validates buffer lengths against its params and returns [`Error::Backend`] on mismatch
//!   instead of reading or writing out of bounds.
//! - Activations and logits are f32 (except where `caps().act16_from` allows 16-bit norm, FFN
//!   and prefill attention outputs feeding a matmul, and `matmul_out16_dtype` 16-bit q|k|v and
//!   gate|up outputs);
//!   weights use one of `caps().weight_dtypes`; the KV cache uses one of `caps().kv_dtypes`. The
//!   engine asks before planning, never by catching a failure.

pub mod collective;
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(any(feature = "cuda", feature = "wgpu"))]
pub(crate) mod env;
pub mod params;
pub mod probe;
pub mod reference;
#[cfg(feature = "wgpu")]
pub mod wgpu;

use crate::error::Result;
pub use params::*;
pub use reference::ggml_quant::GgmlType;

/// The op whose output x `Backend::matmul_prologue` computes in its loads (the norm before q|k|v
/// and gate|up, silu_mul before down).
pub enum Prologue<'a, B> {
    /// x = rmsnorm(src) * w, one row of k (`w` `[k]` f32).
    Rmsnorm { w: &'a B, eps: f32 },
    /// x = silu(src[.., ..k]) * src[.., k..2k].
    SiluMul,
}

/// A [`Prologue`] without its operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrologueKind {
    Rmsnorm,
    SiluMul,
}

impl<B> Clone for Prologue<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B> Copy for Prologue<'_, B> {}

impl<B> Prologue<'_, B> {
    pub fn kind(&self) -> PrologueKind {
        match self {
            Prologue::Rmsnorm { .. } => PrologueKind::Rmsnorm,
            Prologue::SiluMul => PrologueKind::SiluMul,
        }
    }
}

/// Element types a buffer can hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F16,
    BF16,
    U32,
    U8,
    /// 8-bit KV cache, symmetric int8 with one f32 scale per token and KV head (docs/kv-cache.md).
    I8,
    /// 8-bit KV cache, fp8 e4m3 with one power-of-two f32 scale per token and KV head.
    F8E4M3,
    /// A GGML block-quantized weight matrix `[n][k]`: the GGUF tensor's bytes as they are, each
    /// row `k / block_size` whole blocks ([`reference::ggml_quant`] defines the values). The
    /// buffer's len is in bytes.
    Ggml(GgmlType),
    /// 8-bit weights with one f32 scale per output row, made at load (`--quantize int8`):
    /// `[n][k]` i8 codes, then `[n]` f32 scales; w[r][c] = code * scale[r]. len in bytes.
    I8Row,
    /// fp8 e4m3 weights with one f32 scale per output row (`--quantize fp8`), the layout of
    /// [`DType::I8Row`] with e4m3 codes.
    F8Row,
    /// One row x `[k]` of a batch-1 matmul with integer-coded weights, as the two int8 digits per
    /// element that matmul multiplies (`Caps::act_x8_dtypes`; the values of
    /// [`reference::weight_quant::x8_blocks`], within a lo digit where rounding differs). Blocks of 32 elements, `nb = ceil(k / 32)`: the hi
    /// digits as `[9 nb]` i32 words (word `e` of block `b`, elements `32 b + 4 e .. + 4` one a byte,
    /// at `9 b + e`; word 8 of each block is a zero pad; elements past k are 0), the lo digits
    /// likewise, then `[nb]` pairs (d, f32 sum of the block's x) as f32: x = d (hi + lo / 254).
    /// len in bytes, [`x8_bytes`]`(k)` ([`reference::weight_quant::x8_encode`] writes it).
    X8,
}

/// Bytes of a [`DType::X8`] row of `k` elements: 80 per block of 32.
pub fn x8_bytes(k: usize) -> usize {
    80 * k.div_ceil(32)
}

impl DType {
    /// Bytes per element (for the 8-bit KV types: per value; the scales come on top, see
    /// [`kv_pool_len`]).
    pub fn size(self) -> usize {
        match self {
            DType::F32 | DType::U32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::U8 | DType::I8 | DType::F8E4M3 => 1,
            DType::Ggml(_) | DType::I8Row | DType::F8Row | DType::X8 => 1,
        }
    }
    /// A quantized weight type (buffer len in bytes; `matmul` and `embed` dequantize it).
    pub fn is_weight_quant(self) -> bool {
        matches!(self, DType::Ggml(_) | DType::I8Row | DType::F8Row)
    }
    /// Bytes of an `[n][k]` weight matrix of this type; None if `k` is not a whole number of
    /// blocks (or the type holds no weights).
    pub fn weight_bytes(self, n: usize, k: usize) -> Option<usize> {
        match self {
            DType::F32 | DType::F16 | DType::BF16 => n.checked_mul(k)?.checked_mul(self.size()),
            DType::Ggml(t) => n.checked_mul(t.bytes_for(k).ok()?),
            DType::I8Row | DType::F8Row => n.checked_mul(k.checked_add(4)?),
            _ => None,
        }
    }
    /// The name of a weight type as flags spell it (`--dtype`, `--quantize`): f32, bf16, q4_k, int8, ...
    pub fn weight_name(self) -> String {
        match self {
            DType::Ggml(t) => t.name().to_ascii_lowercase(),
            DType::I8Row => "int8".into(),
            DType::F8Row => "fp8".into(),
            d => d.kv_name().into(),
        }
    }
    /// An 8-bit quantized KV type (values and per-token scales in one byte buffer).
    pub fn is_kv8(self) -> bool {
        matches!(self, DType::I8 | DType::F8E4M3)
    }
    /// The `--kv-dtype` / `kv_dtype` spelling of a KV type.
    pub fn kv_name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I8 => "int8",
            DType::F8E4M3 => "fp8",
            DType::U32 => "u32",
            DType::U8 => "u8",
            DType::X8 => "x8",
            DType::Ggml(_) | DType::I8Row | DType::F8Row => "weights",
        }
    }
}

/// Elements (bytes for the 8-bit types) of a KV pool buffer holding `rows` token rows of
/// `head_dim` values, rows grouped `page_size` to a (page, head) block. Float types: `rows *
/// head_dim`. 8-bit types: each block is `[page_size][head_dim]` value bytes followed by
/// `[page_size]` f32 scales, so `rows * (head_dim + 4)` (docs/kv-cache.md).
pub fn kv_pool_len(dtype: DType, rows: usize, head_dim: usize) -> usize {
    if dtype.is_kv8() { rows * (head_dim + 4) } else { rows * head_dim }
}

/// What a backend can do; checked by the engine before it plans work.
#[derive(Clone, Debug)]
pub struct Caps {
    pub name: &'static str,
    /// Human-readable adapter/device description.
    pub device: String,
    pub weight_dtypes: Vec<DType>,
    pub kv_dtypes: Vec<DType>,
    /// Largest single buffer in bytes.
    pub max_buffer_bytes: u64,
    /// Memory the backend can allocate from (device memory; host RAM for the CPU), in bytes.
    pub memory_bytes: u64,
    /// The activation precision of `matmul`: from this many rows of x on, a matmul with 16-bit
    /// weights first rounds x to the weights' dtype (round to nearest even) and multiplies in
    /// 16 bits with f32 accumulation, as tensor cores do; `None`: x is used in f32 at every m.
    /// (CUDA: from 2 rows — batched decode and prefill; the batch-1 GEMV reads x in f32. wgpu
    /// with cooperative matrices: from 2 rows, quantized weights too, with x and the dequantized
    /// weights in f16.)
    pub matmul_x16_from: Option<usize>,
    /// 16-bit activations: from this many rows on, `rmsnorm`, `add_rmsnorm`, `silu_mul` and
    /// `prefill_attention` may write an f16 or bf16 `out` (the f32 result rounded to nearest
    /// even), and `matmul` takes an
    /// x of its 16-bit weights' own dtype as it is: the values `matmul_x16_from`'s rounding would
    /// have made, without the rounding pass (never below `matmul_x16_from`). `None`: activations
    /// are f32 only. (CUDA: from 2 rows; the model uses it for prefill and batched decode.)
    pub act16_from: Option<usize>,
    /// Rows of x up to which a matmul with integer-coded quantized weights (the GGML formats and
    /// int8 rows; not fp8) multiplies x as two int8 digits per element in blocks of 32 (~16 bits:
    /// [`reference::weight_quant::x8_blocks`] gives the values used); 0: never.
    /// (CUDA: 64 — the batch-1 integer GEMV, then the MMQ tensor-core GEMM; wgpu with SUBGROUP: 1,
    /// the batch-1 decode GEMV.)
    pub matmul_x8_max_m: usize,
    /// Weight dtypes whose `matmul` at one row takes x as [`DType::X8`] (the digits it would
    /// otherwise make from an f32 x, so the same result without that pass), for the row lengths
    /// of [`Caps::x8_row_fits`]; for such a row `rmsnorm`, `add_rmsnorm`, `silu_mul` and
    /// `sparse_decode_attention` (one sequence, head_dim a multiple of 32) may write an X8 `out`
    /// (the digits of their f32 result). Empty: never. (CUDA: the formats whose batch-1 GEMV reads
    /// x's digits rather than quantizing x in each block, `ops_matmul::x8_dtypes`: the batch-1
    /// decode step's norms, attention and FFN activation; `LSERVE_CUDA_ACT_X8=0` turns it off.
    /// wgpu with SUBGROUP: every format of its `matmul_gemv_x8`, which then skips its pack pass.)
    pub act_x8_dtypes: Vec<DType>,
    /// The longest such row (0 where `act_x8_dtypes` is empty).
    pub act_x8_max_k: usize,
    /// What such a row's length must be a multiple of (CUDA 4: a word of digits; wgpu 32: whole
    /// blocks, its GEMV reads x a block at a time; 0 where `act_x8_dtypes` is empty).
    pub act_x8_k_multiple: usize,
}

impl Caps {
    /// A row of `k` elements may be a [`DType::X8`] activation: the backend writes and reads
    /// them (`act_x8_dtypes` not empty) and k is a multiple of `act_x8_k_multiple` up to
    /// `act_x8_max_k`.
    pub fn x8_row_fits(&self, k: usize) -> bool {
        !self.act_x8_dtypes.is_empty() && k.is_multiple_of(self.act_x8_k_multiple.max(1)) && k <= self.act_x8_max_k
    }
}

/// One layer's KV storage (docs/kv-cache.md).
/// - `k`, `v`: the retrieval pool, `[page][n_ret][page_size][head_dim]` (HND).
/// - `summary`: per logical page of the retrieval pool, channel-wise min and max of the rotated
///   keys, `[page][n_ret][page_size / logical_page][2][head_dim]` (index 0 = min, 1 = max).
/// - `sk`, `sv`: the streaming pool, `[str_page][n_str][page_size][head_dim]`; each sequence owns a
///   fixed ring of its pages (sink + recent tokens).
/// - `head_map`: `[n_kv_heads]` u32; `STREAMING_BIT | i` is streaming head i, else retrieval head i.
pub struct LayerKv<'a, B: Backend + ?Sized> {
    pub k: &'a B::Buffer,
    pub v: &'a B::Buffer,
    pub summary: &'a B::Buffer,
    pub sk: &'a B::Buffer,
    pub sv: &'a B::Buffer,
    pub head_map: &'a B::Buffer,
}

/// Mutable view of one layer's storage for appending.
pub struct LayerKvMut<'a, B: Backend + ?Sized> {
    pub k: &'a mut B::Buffer,
    pub v: &'a mut B::Buffer,
    pub summary: &'a mut B::Buffer,
    pub sk: &'a mut B::Buffer,
    pub sv: &'a mut B::Buffer,
    pub head_map: &'a B::Buffer,
}

/// `head_map` flag of a streaming head.
pub const STREAMING_BIT: u32 = 1 << 31;

/// Per-step metadata on the device describing which pages each sequence owns.
/// CSR: sequence `s` owns `page_table[page_indptr[s]..page_indptr[s+1]]` (physical retrieval pages
/// in logical order) and holds `kv_len[s]` tokens, the step's new tokens included. Its streaming
/// ring is `ring_table[s * ring_pages..]` (`ring_pages = ring_tokens / page_size`).
pub struct PagedMeta<'a, B: Backend + ?Sized> {
    pub page_indptr: &'a B::Buffer,
    pub page_table: &'a B::Buffer,
    pub kv_len: &'a B::Buffer,
    pub ring_table: &'a B::Buffer,
}

/// Inputs of `rope_append_kv` besides the activations.
pub struct RopeAppendMeta<'a, B: Backend + ?Sized> {
    /// `[n_tokens]` u32: absolute position of each token in its sequence.
    pub positions: &'a B::Buffer,
    /// `[n_tokens]` u32: retrieval-pool slot `page * page_size + offset` of each token.
    pub slots: &'a B::Buffer,
    /// `[n_tokens]` u32: streaming-pool slot of each token (its place in its sequence's ring).
    pub ring_slots: &'a B::Buffer,
    /// `[head_dim/2]` f32 inverse frequencies (all RoPE scalings fold into these).
    pub inv_freq: &'a B::Buffer,
}

/// Which retrieval pages each decode query reads. For batch row `s` in slot `seq_slot[s]` and
/// retrieval head `r`: the selected logical pages `selected[(slot * n_ret + r) * sel_stride..]`
/// (`counts[slot * n_ret + r]` of them, ascending, all below `tail_start[s]`), then every page from
/// `tail_start[s]` to the sequence's last. Dense decode: counts 0 and tail_start 0.
pub struct HeadPages<'a, B: Backend + ?Sized> {
    pub selected: &'a B::Buffer,
    pub counts: &'a B::Buffer,
    pub seq_slot: &'a B::Buffer,
    pub tail_start: &'a B::Buffer,
}

/// Query rows per block of block-sparse prefill: sequence `s`'s step rows are cut into blocks of
/// this many from its first row (the last block may be shorter); blocks are numbered across the
/// step in sequence order.
pub const PREFILL_BLOCK_ROWS: usize = 128;
/// `counts` entry of a block that attends densely (causal, as without `blocks`).
pub const BLOCK_DENSE: u32 = u32::MAX;

/// The first page of a prefill block's tail (read in full, causally masked), for a block whose
/// first query sits at position `first`: the page before the one holding `first` (saturating),
/// so every query sees at least `page_size` keys before it besides the selection.
pub fn block_tail_page(first: usize, page_size: usize) -> usize {
    first.saturating_sub(page_size) / page_size
}

/// Which pages each query block of a block-sparse prefill reads, per retrieval head `r`: for
/// block `b` with `c = counts[b * n_ret + r]`: `BLOCK_DENSE` means dense causal attention;
/// otherwise, with `t = block_tail_page(first position of b, page_size)`: page 0 when `t > 0`,
/// pages `selected[(b * n_ret + r) * sel_stride + i] + 1` for `i < c` (distinct, in `1..t`,
/// ascending: `page_select` over the block's pages `1..=t` writes them), and every position
/// from `t * page_size` up to the query (causal). `sel_stride` is `AttentionParams::sel_stride`.
pub struct BlockPages<'a, B: Backend + ?Sized> {
    pub selected: &'a B::Buffer,
    pub counts: &'a B::Buffer,
}

/// Stride of block-sparse prefill's antidiagonal estimate (`antidiagonal_score`): rows and keys
/// go in groups of this many (XAttention's stride 8, the one measured in docs/sparse-attention.md).
pub const ANTIDIAGONAL_STRIDE: usize = 8;

/// A block-sparse prefill step's query blocks as the estimate ops read them: `info[b]` is
/// `[q_row, rows, first, seq]` (block b's first row in q, its rows, the position of that row,
/// its sequence in the step's [`PagedMeta`]); block b's candidates are the entries
/// `page_indptr[b]..page_indptr[b + 1]` less the last (the virtual row of pages `1..=tail` that
/// `page_select` ranks; empty for a dense block), entry j being the sequence's page j + 1.
pub struct BlockRows<'a, B: Backend + ?Sized> {
    pub info: &'a B::Buffer,
    pub page_indptr: &'a B::Buffer,
    /// Host copies of `info` and `page_indptr` where the caller has them (the same values; the
    /// CPU backend checks): a backend may size its launches from them (CUDA's antidiagonal GEMM
    /// path). `None` is always valid.
    pub host: Option<(&'a [u32], &'a [u32])>,
}

/// Output of `page_select`: the `selected` and `counts` buffers of [`HeadPages`].
pub struct SelectedMut<'a, B: Backend + ?Sized> {
    pub selected: &'a mut B::Buffer,
    pub counts: &'a mut B::Buffer,
}

pub trait Backend: Send {
    type Buffer: Send;

    fn caps(&self) -> &Caps;

    /// A buffer of `len` elements; contents unspecified.
    fn alloc(&self, dtype: DType, len: usize) -> Result<Self::Buffer>;
    /// Upload f32 data converted to `dtype` (a float type).
    fn upload_f32(&self, dtype: DType, data: Vec<f32>) -> Result<Self::Buffer>;
    fn upload_u32(&self, data: &[u32]) -> Result<Self::Buffer>;
    /// A buffer of `dtype` holding `data` as it is (quantized weights: len = bytes).
    fn upload_raw(&self, dtype: DType, data: &[u8]) -> Result<Self::Buffer> {
        let mut b = self.alloc(dtype, data.len())?;
        self.write_raw_at(&mut b, 0, data)?;
        Ok(b)
    }
    /// A quantized `[rows][k]` weight matrix of `dtype` from its bytes as the format defines them
    /// (GGML blocks, row-scaled codes): what the model loader and the synthetic weights upload.
    /// A backend may store it in another layout of the same bytes for its kernels (CUDA: Q8_0
    /// rows of whole 256-element super-blocks, src/backend/cuda/packed.rs); `download_raw` still
    /// returns these bytes. The default stores them as they are.
    fn upload_weight(&self, dtype: DType, rows: usize, k: usize, data: &[u8]) -> Result<Self::Buffer> {
        let _ = (rows, k);
        self.upload_raw(dtype, data)
    }
    /// Whether `matmul` with weight `w` (rows of k) takes x as one row of x8 digits
    /// (`DType::X8`) where the model may hand it them: w's dtype is in `Caps::act_x8_dtypes` and k
    /// fits (`Caps::x8_row_fits`). A backend may narrow it per buffer (CUDA: Q4_0 / Q4_1 / Q5_0 /
    /// Q5_1 / Q8_0 only where the matrix is stored packed).
    fn weight_takes_x8(&self, w: &Self::Buffer, k: usize) -> bool {
        let c = self.caps();
        c.x8_row_fits(k) && c.act_x8_dtypes.contains(&self.dtype(w))
    }
    /// The 16-bit dtype `matmul` takes an x of `m` rows in for weights `w`, as it is (the values
    /// its own rounding would have made; `Caps::act16_from`): f16 / bf16 weights their own dtype
    /// from `act16_from` rows on. A backend may add others (CUDA: quantized weights f16 from the
    /// rows where it dequantizes them to f16 for a cuBLAS GEMM). None: an f32 x.
    fn weight_x16_dtype(&self, w: &Self::Buffer, m: usize) -> Option<DType> {
        let d = self.dtype(w);
        (self.caps().act16_from.is_some_and(|from| m >= from) && matches!(d, DType::F16 | DType::BF16)).then_some(d)
    }
    /// The 16-bit dtype `matmul` may write an `m`-row out in for weights `w` (no bias): the f32
    /// result rounded to nearest even, as a tensor-core GEMM's epilogue does; `silu_mul` then
    /// takes a gate_up, and `rope_append_kv` a qkv, of that dtype (and `silu_mul` writes its out
    /// in it). None (the default): out is f32. (CUDA: where the matmul is a cuBLAS GEMM, the
    /// dtype of `weight_x16_dtype`; the model uses it for the q|k|v and gate|up outputs of a
    /// prefill, which are rounded to 16 bits after RoPE / silu anyway.)
    fn matmul_out16_dtype(&self, w: &Self::Buffer, m: usize) -> Option<DType> {
        let _ = (w, m);
        None
    }
    /// Whether the model should fold a residual add into `matmul` over weights `w` at `m` rows
    /// (`MatmulParams::accumulate`: out += the product, into an f32 out; `matmul` must take it
    /// where this is true): o_proj and down then accumulate into the residual stream, whose next
    /// norm is a plain `rmsnorm`. Default false. A backend may take accumulate where it does not
    /// ask for it, and refuses it with an error where it cannot. (CPU: `matmul` takes it
    /// everywhere, as the reference, and asks for it only when made `with_fused_residual`, which
    /// runs the fused layer loop in tests; it saves no traffic there.
    /// CUDA: wherever the matmul is a cuBLAS GEMM, whose beta = 1 reads the residual in its
    /// epilogue, asked for from a prefill's row counts; and every batch-1 GEMV, which adds in its
    /// store, asked for at one row with `CudaOptions::fuse_decode`. wgpu: every GEMV at one row
    /// adds in its store, asked for at one row unless `LSERVE_WGPU_FUSE_RESIDUAL=0`; refused at
    /// more rows.)
    fn matmul_accumulates(&self, w: &Self::Buffer, m: usize) -> bool {
        let _ = (w, m);
        false
    }
    /// Whether `matmul_prologue` with `kind` over weights `w` at `p`'s shape is one kernel (x
    /// never written), so the model should call it instead of the op and `matmul`. Default false.
    /// A backend that records graphs takes `matmul_prologue` only where this is true. (CPU: where
    /// made `with_fused_residual`, to run the fused layer loop in tests; CUDA: at one row, the
    /// register GEMVs of the integer-coded formats, which quantize x in their lanes.)
    fn matmul_prologue_fuses(&self, p: &MatmulParams, w: &Self::Buffer, kind: PrologueKind) -> bool {
        let _ = (p, w, kind);
        false
    }
    /// Overwrite elements `offset..offset + data.len()` of an f32 buffer (KV swap-in).
    fn write_f32_at(&self, dst: &mut Self::Buffer, offset: usize, data: &[f32]) -> Result<()>;
    /// Overwrite elements `offset..offset + data.len()` of a u32 buffer.
    fn write_u32_at(&self, dst: &mut Self::Buffer, offset: usize, data: &[u32]) -> Result<()>;
    /// Overwrite the first `data.len()` elements of a u32 buffer.
    fn write_u32(&self, dst: &mut Self::Buffer, data: &[u32]) -> Result<()> {
        self.write_u32_at(dst, 0, data)
    }
    /// Overwrite the first `data.len()` elements of an f32 buffer.
    fn write_f32(&self, dst: &mut Self::Buffer, data: &[f32]) -> Result<()> {
        self.write_f32_at(dst, 0, data)
    }
    /// Read `len` bytes from byte `offset` of any buffer, as stored (KV swap-out of every KV
    /// dtype, bit-exact; waits for queued work). `offset` and `len` must be multiples of 4.
    fn download_raw(&self, src: &Self::Buffer, offset: usize, len: usize) -> Result<Vec<u8>>;
    /// Overwrite bytes `offset..offset + data.len()` of any buffer with `data` as stored (KV
    /// swap-in). `offset` and `data.len()` must be multiples of 4.
    fn write_raw_at(&self, dst: &mut Self::Buffer, offset: usize, data: &[u8]) -> Result<()>;
    /// Read `len` elements from `offset` as f32 (waits for queued work).
    fn download_f32(&self, src: &Self::Buffer, offset: usize, len: usize) -> Result<Vec<f32>>;
    fn download_u32(&self, src: &Self::Buffer, offset: usize, len: usize) -> Result<Vec<u32>>;
    /// Wait for all queued work.
    fn sync(&self) -> Result<()>;
    /// Begin a replayable region: until [`Backend::graph_end`] the backend may record the ops it
    /// is given instead of running them, and run the whole list at the end as one device graph
    /// (CUDA graphs: docs/backends.md). Results are as if every op ran in order. Inside a region
    /// the caller must not free a buffer an op in it uses; reads, writes and allocations are
    /// allowed (they run what was recorded first). Default: ops simply run.
    fn graph_begin(&self) {}
    /// Make this backend's device current on the calling thread (a tensor-parallel rank runs
    /// its step on a thread of its own; CUDA binds its context). Default: nothing to do.
    fn bind_thread(&self) -> Result<()> {
        Ok(())
    }
    /// End the region: `run` = run what was recorded (replaying a cached graph when an identical
    /// op list was captured before), else drop it (the region's ops then never run — the caller
    /// failed halfway and discards the step).
    fn graph_end(&self, _run: bool) -> Result<()> {
        Ok(())
    }
    fn len(&self, b: &Self::Buffer) -> usize;
    fn dtype(&self, b: &Self::Buffer) -> DType;
    /// A stable identity of the buffer (its device address on CUDA), which buffer pools use to
    /// choose among equal free buffers by identity rather than by history, so a repeated step gets
    /// the very same buffers (graph replay needs that). 0 where it does not matter.
    fn buffer_id(&self, _b: &Self::Buffer) -> u64 {
        0
    }
    /// Device memory the backend's allocator holds: live buffers and the memory blocks they sit
    /// in (wgpu; what a memory budget is charged beyond the driver's own context). None where the
    /// backend does not know (CPU, CUDA).
    fn device_memory(&self) -> Option<DeviceMemory> {
        None
    }

    /// out[i, :] = table[ids[i], :] as f32. table `[vocab][dim]`, ids `[n_tokens]` u32, out `[n_tokens][dim]`.
    fn embed(&self, p: &EmbedParams, table: &Self::Buffer, ids: &Self::Buffer, out: &mut Self::Buffer) -> Result<()>;
    /// out[out_off + r * ldo + c] = x[r, :] . w[c, :] (+ bias[c]) for r < m, c < n; f32
    /// accumulation; other elements of out are left alone (a fused output's column block can be
    /// written by one matmul per weight part). w `[n][k]` of any type in `caps().weight_dtypes`.
    /// With `p.accumulate` = 1 (only where [`Backend::matmul_accumulates`], or on the CPU) those
    /// elements become out + the product instead, out f32.
    fn matmul(
        &self,
        p: &MatmulParams,
        x: &Self::Buffer,
        w: &Self::Buffer,
        bias: Option<&Self::Buffer>,
        out: &mut Self::Buffer,
    ) -> Result<()>;
    /// `matmul` of an x made from `src` by `pro` (the op that would have written x, folded into
    /// the matmul's loads of x; `Backend::matmul_prologue_fuses` says where it is one kernel):
    /// `Prologue::Rmsnorm` x = rmsnorm(src) * w (`src` `[m][k]` f32), `Prologue::SiluMul` x =
    /// silu(gate) * up (`src` `[m][2k]` f32, gate | up). Everything else (`p`, bias, out,
    /// accumulate) as `matmul`. The default runs the op into a new buffer, then `matmul` (the
    /// reference; a backend that records graphs must override it, as the buffer is dropped
    /// before the region ends).
    fn matmul_prologue(
        &self,
        p: &MatmulParams,
        pro: Prologue<'_, Self::Buffer>,
        src: &Self::Buffer,
        w: &Self::Buffer,
        bias: Option<&Self::Buffer>,
        out: &mut Self::Buffer,
    ) -> Result<()> {
        let (m, k) = (p.m as usize, p.k as usize);
        let mut x = self.alloc(DType::F32, m * k)?;
        match pro {
            Prologue::Rmsnorm { w: nw, eps } => {
                self.rmsnorm(&RmsnormParams { rows: p.m, dim: p.k, eps, _pad: 0 }, src, nw, &mut x)?
            }
            Prologue::SiluMul => {
                self.silu_mul(&SiluMulParams { rows: p.m, dim: p.k, ..Default::default() }, src, &mut x)?
            }
        }
        self.matmul(p, &x, w, bias, out)
    }
    /// Whether `matmul_rope_append_kv` of `p` over weights `w` with `r` into pools of dtype `kv`
    /// is one kernel, so the model should call it instead of `matmul` and `rope_append_kv`.
    /// Default false. (wgpu: a batch-1 step's q|k|v GEMV on weights with an integer form into
    /// 16-bit pools, head_dim % 8 == 0: `matmul_gemv_x8_rope`.)
    fn matmul_rope_fuses(&self, p: &MatmulParams, w: &Self::Buffer, r: &RopeAppendKvParams, kv: DType) -> bool {
        let _ = (p, w, r, kv);
        false
    }
    /// `matmul` of x into qkv (`p`, `w`, `bias`), then `rope_append_kv` of that qkv (`r`,
    /// `meta`, `q`, `kv`): every buffer ends as the two ops leave it (qkv unrotated). The default
    /// runs the two ops; `matmul_rope_fuses` says where a backend makes them one kernel.
    #[allow(clippy::too_many_arguments)]
    fn matmul_rope_append_kv(
        &self,
        p: &MatmulParams,
        x: &Self::Buffer,
        w: &Self::Buffer,
        bias: Option<&Self::Buffer>,
        qkv: &mut Self::Buffer,
        r: &RopeAppendKvParams,
        meta: &RopeAppendMeta<Self>,
        q: &mut Self::Buffer,
        kv: LayerKvMut<Self>,
    ) -> Result<()> {
        self.matmul(p, x, w, bias, qkv)?;
        self.rope_append_kv(r, qkv, meta, q, kv)
    }
    /// Whether `matmul_silu_mul` of `p` over weights `w` into an act of dtype `act` is one
    /// kernel, so the model should call it instead of `matmul` and `silu_mul`. Default false.
    /// (wgpu: a batch-1 step's gate|up GEMV on weights with an integer form into an X8 act:
    /// `matmul_gemv_x8_silu_mul`.)
    fn matmul_silu_mul_fuses(&self, p: &MatmulParams, w: &Self::Buffer, act: DType) -> bool {
        let _ = (p, w, act);
        false
    }
    /// `matmul` of x into gate_up (`p`, `w`, `bias`; n = 2 dim, gate | up), then `silu_mul` of
    /// it into act (`[m][dim]`, a dtype `silu_mul` writes): both buffers end as the two ops leave
    /// them. The default runs the two ops; `matmul_silu_mul_fuses` says where a backend makes
    /// them one kernel.
    fn matmul_silu_mul(
        &self,
        p: &MatmulParams,
        x: &Self::Buffer,
        w: &Self::Buffer,
        bias: Option<&Self::Buffer>,
        gate_up: &mut Self::Buffer,
        act: &mut Self::Buffer,
    ) -> Result<()> {
        self.matmul(p, x, w, bias, gate_up)?;
        self.silu_mul(&SiluMulParams { rows: p.m, dim: p.n / 2, ..Default::default() }, gate_up, act)
    }
    /// out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w. `[rows][dim]`.
    fn rmsnorm(&self, p: &RmsnormParams, x: &Self::Buffer, w: &Self::Buffer, out: &mut Self::Buffer) -> Result<()>;
    /// residual += x, then out = rmsnorm(residual) * w (the pre-norm block boundary, fused).
    fn add_rmsnorm(
        &self,
        p: &RmsnormParams,
        residual: &mut Self::Buffer,
        x: &Self::Buffer,
        w: &Self::Buffer,
        out: &mut Self::Buffer,
    ) -> Result<()>;
    /// a[i] += b[i] for i < n.
    fn add(&self, p: &AddParams, a: &mut Self::Buffer, b: &Self::Buffer) -> Result<()>;
    /// gate_up `[rows][2*dim]` (gate | up) -> out `[rows][dim]` = silu(gate) * up. gate_up f32, or
    /// the 16-bit dtype of [`Backend::matmul_out16_dtype`] with out in that dtype too.
    fn silu_mul(&self, p: &SiluMulParams, gate_up: &Self::Buffer, out: &mut Self::Buffer) -> Result<()>;
    /// gate_up `[rows][2*dim]` (gate | up) -> out `[rows][dim]` = gelu_tanh(gate) * up, with
    /// gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) (Gemma's FFN).
    fn gelu_tanh_mul(&self, p: &GeluTanhMulParams, gate_up: &Self::Buffer, out: &mut Self::Buffer) -> Result<()>;
    /// In place: in each of `rows` rows of `row_stride` floats, segment `h < n_heads` (floats
    /// `h*head_dim..(h+1)*head_dim`) becomes rmsnorm(segment) * w[h] (Gemma's q/k norm on the fused
    /// qkv rows). w `[n_heads][head_dim]` f32.
    fn head_rmsnorm(&self, p: &HeadRmsnormParams, x: &mut Self::Buffer, w: &Self::Buffer) -> Result<()>;
    /// In place: x[i] *= scale for i < n.
    fn scale(&self, p: &ScaleParams, x: &mut Self::Buffer) -> Result<()>;
    /// out[i, :] = src[rows[i], :]; `[n_out][dim]` f32.
    fn gather_rows(
        &self,
        p: &GatherRowsParams,
        src: &Self::Buffer,
        rows: &Self::Buffer,
        out: &mut Self::Buffer,
    ) -> Result<()>;
    /// out[i, :] = mean of src rows `indptr[i]..indptr[i+1]` (summed in row order in f32, then
    /// divided by the count; an empty range gives zeros). src `[n_src][dim]`, indptr `[n_out + 1]`
    /// (non-decreasing, at most n_src), out `[n_out][dim]` f32.
    fn mean_rows(
        &self,
        p: &MeanRowsParams,
        src: &Self::Buffer,
        indptr: &Self::Buffer,
        out: &mut Self::Buffer,
    ) -> Result<()>;
    /// qkv `[n_tokens][(n_heads + 2 n_kv_heads) head_dim]` (f32, or the 16-bit dtype of
    /// [`Backend::matmul_out16_dtype`]) -> q `[n_tokens][n_heads][head_dim]`
    /// rotated (rotate-half RoPE at each token's position); each KV head's rotated k and its v go
    /// to the retrieval pool (`slots`) or the streaming ring (`ring_slots`) per `head_map`, and the
    /// min/max summary of every touched logical page is made equal to the min/max over the tokens
    /// it holds (positions are appended in order, so those are offsets up to the last written).
    /// The tokens of one call must have distinct slots and distinct ring slots (a chunk must not
    /// wrap around the streaming ring); the CPU reference refuses a call that breaks this.
    fn rope_append_kv(
        &self,
        p: &RopeAppendKvParams,
        qkv: &Self::Buffer,
        meta: &RopeAppendMeta<Self>,
        q: &mut Self::Buffer,
        kv: LayerKvMut<Self>,
    ) -> Result<()>;
    /// Causal attention of each sequence's new tokens over its cached context (prefix and chunk,
    /// already appended). q/out `[n_tokens][n_heads][head_dim]`; sequence `s`'s queries are rows
    /// `q_indptr[s]..q_indptr[s+1]` at the last positions of its `kv_len[s]` tokens. Retrieval heads
    /// see every earlier token (within `window` if set); streaming heads the Lambda mask: keys
    /// `k <= q` with `k < sink` or `q - k < local`. With `blocks` (block-sparse prefill, window 0
    /// only), a retrieval head's queries in a sparse block read only that block's pages
    /// ([`BlockPages`]). q is f32; out f32, or f16 / bf16 where `caps().act16_from` is set (the f32
    /// result rounded to nearest even).
    #[allow(clippy::too_many_arguments)]
    fn prefill_attention(
        &self,
        p: &AttentionParams,
        q: &Self::Buffer,
        q_indptr: &Self::Buffer,
        kv: LayerKv<Self>,
        meta: &PagedMeta<Self>,
        blocks: Option<&BlockPages<Self>>,
        out: &mut Self::Buffer,
    ) -> Result<()>;
    /// One query per sequence (at position kv_len-1): retrieval heads read only the pages
    /// [`HeadPages`] lists, streaming heads the Lambda mask over their ring. q/out
    /// `[num_seqs][n_heads][head_dim]` f32; out may be one sequence's row as [`DType::X8`] where
    /// `Caps::act_x8_dtypes` allows (head_dim a multiple of 32).
    fn sparse_decode_attention(
        &self,
        p: &AttentionParams,
        q: &Self::Buffer,
        kv: LayerKv<Self>,
        meta: &PagedMeta<Self>,
        pages: &HeadPages<Self>,
        out: &mut Self::Buffer,
    ) -> Result<()>;
    /// Quest page selection for the decode queries q `[num_seqs][n_heads][head_dim]` of the rows
    /// with `select_mask[s] != 0`: for each retrieval head, score each logical page of pages
    /// `0..n_pages-1` (the newest page is excluded: attention always reads it) as
    /// `sum_c max(q_c * max_c, q_c * min_c)` (or from the box shrunk by `p.bound_shrink`, see
    /// [`PageSelectParams`]), take the max over the KV head's query heads and over a physical
    /// page's logical pages (`p.rank`: or the head-normalized sum), and write the `k_pages` best
    /// physical pages (ties to the lower index) in ascending order to the row's slot
    /// (`seq_slot`). Rows not selected keep their previous selection.
    #[allow(clippy::too_many_arguments)]
    fn page_select(
        &self,
        p: &PageSelectParams,
        q: &Self::Buffer,
        kv: LayerKv<Self>,
        meta: &PagedMeta<Self>,
        seq_slot: &Self::Buffer,
        select_mask: &Self::Buffer,
        out: SelectedMut<Self>,
    ) -> Result<()>;
    /// Block-sparse prefill's antidiagonal estimate (XAttention, stride `S` =
    /// [`ANTIDIAGONAL_STRIDE`]). For each block b of `blocks` with candidates and each retrieval
    /// KV head (`head_map` r), for each full group of S rows `r0 = 0, S, ..` (r0 + S <= rows) and
    /// each query head g of the KV head's group: key group `kg` (positions `S kg .. S kg + S`) for
    /// every `kg < (first + r0) / S` scores
    /// `z = scale / S * sum_{i<S} q[q_row + r0 + S - 1 - i][g] . k[S kg + i]`, and a softmax over
    /// those z adds each key group's weight to the score of its page's candidate (page
    /// `S kg / page_size`, candidate `page - 1` when that is below the row's candidate count).
    /// scores f32 `[(page_indptr[b] + j) * n_ret + r]`: every entry of a block with candidates is
    /// written (its last, the tail's, 0); other entries are untouched. `page_size` a multiple of S.
    #[allow(clippy::too_many_arguments)]
    fn antidiagonal_score(
        &self,
        p: &AntidiagonalParams,
        q: &Self::Buffer,
        kv: LayerKv<Self>,
        meta: &PagedMeta<Self>,
        blocks: &BlockRows<Self>,
        scores: &mut Self::Buffer,
    ) -> Result<()>;
    /// The `k_pages` best candidates of each (row s with `select_mask[s] != 0`, retrieval head r)
    /// of a score table laid out as `antidiagonal_score` writes it (f32
    /// `[(page_indptr[s] + j) * n_ret + r]`, candidates j below the row's entries less one):
    /// `min(k_pages, candidates)` of them by (score desc, j asc; NaN lowest), written ascending to
    /// `selected[(seq_slot[s] * n_ret + r) * sel_stride..]`, their number to
    /// `counts[seq_slot[s] * n_ret + r]`. Rows not selected keep their previous selection.
    fn page_top_k(
        &self,
        p: &PageTopKParams,
        scores: &Self::Buffer,
        page_indptr: &Self::Buffer,
        seq_slot: &Self::Buffer,
        select_mask: &Self::Buffer,
        out: SelectedMut<Self>,
    ) -> Result<()>;
    /// Calibration: for one sequence whose `n_tokens` queries are its last positions, the softmax
    /// mass each query head puts outside the Lambda mask (sink + local), using the retrieval pool
    /// for every head (calibration runs dense). out `[n_tokens][n_heads]`.
    fn lambda_mass(
        &self,
        p: &LambdaMassParams,
        q: &Self::Buffer,
        kv: LayerKv<Self>,
        meta: &PagedMeta<Self>,
        out: &mut Self::Buffer,
    ) -> Result<()>;
    /// Fill the first `n` elements with [`params::fill_random_value`] (f32 buffers, or f16/bf16
    /// weight buffers on backends that store them).
    fn fill_random(&self, p: &FillRandomParams, out: &mut Self::Buffer) -> Result<()>;
    /// Time every op on the device from now on (GPU timestamps), or stop. Backends without a
    /// device clock return an error.
    fn set_profiling(&self, _on: bool) -> Result<()> {
        Err(crate::error::Error::Backend { backend: "profiling", msg: "not supported by this backend".into() })
    }
    /// (op, calls, total nanoseconds) measured since profiling started or was last taken.
    fn take_profile(&self) -> Vec<(String, u64, f64)> {
        vec![]
    }
    /// out[r] = index of the max of row r (lowest index on ties). `[rows][n]` -> `[rows]` u32.
    fn argmax(&self, p: &ArgmaxParams, x: &Self::Buffer, out: &mut Self::Buffer) -> Result<()>;
    /// out[r] = a token drawn from row r of `logits` `[rows][n]` f32 with row r's `settings`
    /// `[rows][4]` u32 (temperature f32 bits, top_k, top_p f32 bits, the draw u in [0, 1) f32
    /// bits; `RowSampling::words`), by the algorithm of [`reference::sample::sample_row`]:
    /// temperature 0 is argmax, else top-k, then the nucleus, then inverse CDF in ascending id
    /// order. A row with no logit above -inf gets `NO_TOKEN` (u32::MAX). `[rows]` u32 out.
    fn sample(
        &self,
        p: &SampleParams,
        logits: &Self::Buffer,
        settings: &Self::Buffer,
        out: &mut Self::Buffer,
    ) -> Result<()>;
}

/// Device memory an allocator reports (`Backend::device_memory`), bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct DeviceMemory {
    /// The live buffers' sizes.
    pub buffers: u64,
    /// The memory blocks the allocator obtained from the driver to hold them (at least `buffers`).
    pub reserved: u64,
}
