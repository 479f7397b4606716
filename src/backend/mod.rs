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
//! - Activations and logits are f32; weights use one of `caps().weight_dtypes`; the KV cache uses
//!   one of `caps().kv_dtypes`. The engine asks before planning, never by catching a failure.

pub mod cpu;
pub mod params;
pub mod probe;

use crate::error::Result;
pub use params::*;

/// Element types a buffer can hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F16,
    BF16,
    U32,
    U8,
}

impl DType {
    pub fn size(self) -> usize {
        match self {
            DType::F32 | DType::U32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::U8 => 1,
        }
    }
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
}

/// The paged KV pools of one layer, `[page][kv_head][token][head_dim]` each (HND).
pub struct KvPools<'a, B: Backend + ?Sized> {
    pub k: &'a B::Buffer,
    pub v: &'a B::Buffer,
}

/// Mutable view of one layer's pools for appending.
pub struct KvPoolsMut<'a, B: Backend + ?Sized> {
    pub k: &'a mut B::Buffer,
    pub v: &'a mut B::Buffer,
}

/// Per-step metadata on the device describing which pages each sequence owns.
/// CSR: sequence `s` owns `page_table[page_indptr[s]..page_indptr[s+1]]` (physical page ids in
/// logical order) and holds `kv_len[s]` tokens, the step's new tokens included.
pub struct PagedMeta<'a, B: Backend + ?Sized> {
    pub page_indptr: &'a B::Buffer,
    pub page_table: &'a B::Buffer,
    pub kv_len: &'a B::Buffer,
}

/// Inputs of `rope_append_kv` besides the activations.
pub struct RopeAppendMeta<'a, B: Backend + ?Sized> {
    /// `[n_tokens]` u32: absolute position of each token in its sequence.
    pub positions: &'a B::Buffer,
    /// `[n_tokens]` u32: physical slot `page * page_size + offset` the token's k/v go to.
    pub slots: &'a B::Buffer,
    /// `[head_dim/2]` f32 inverse frequencies (all RoPE scalings fold into these).
    pub inv_freq: &'a B::Buffer,
}

/// Inputs of `sparse_decode_attention` besides q and the pools: which logical pages each
/// (sequence, KV head) reads. Entry `head_pages[head_indptr[s*n_kv_heads+h]..]` are logical page
/// indices into sequence `s`'s page table. Dense decode lists every page.
pub struct HeadPages<'a, B: Backend + ?Sized> {
    pub head_indptr: &'a B::Buffer,
    pub head_pages: &'a B::Buffer,
}

pub trait Backend {
    type Buffer: Send;

    fn caps(&self) -> &Caps;

    /// A buffer of `len` elements; contents unspecified.
    fn alloc(&self, dtype: DType, len: usize) -> Result<Self::Buffer>;
    /// Upload f32 data converted to `dtype` (a float type).
    fn upload_f32(&self, dtype: DType, data: Vec<f32>) -> Result<Self::Buffer>;
    fn upload_u32(&self, data: &[u32]) -> Result<Self::Buffer>;
    /// Overwrite the first `data.len()` elements of a u32 buffer.
    fn write_u32(&self, dst: &mut Self::Buffer, data: &[u32]) -> Result<()>;
    /// Overwrite the first `data.len()` elements of an f32 buffer.
    fn write_f32(&self, dst: &mut Self::Buffer, data: &[f32]) -> Result<()>;
    /// Read `len` elements from `offset` as f32 (waits for queued work).
    fn download_f32(&self, src: &Self::Buffer, offset: usize, len: usize) -> Result<Vec<f32>>;
    fn download_u32(&self, src: &Self::Buffer, offset: usize, len: usize) -> Result<Vec<u32>>;
    /// Wait for all queued work.
    fn sync(&self) -> Result<()>;
    fn len(&self, b: &Self::Buffer) -> usize;
    fn dtype(&self, b: &Self::Buffer) -> DType;

    /// out[i, :] = table[ids[i], :] as f32. table `[vocab][dim]`, ids `[n_tokens]` u32, out `[n_tokens][dim]`.
    fn embed(
        &self,
        p: &EmbedParams,
        table: &Self::Buffer,
        ids: &Self::Buffer,
        out: &mut Self::Buffer,
    ) -> Result<()>;
    /// out[m, n] = x[m, k] . w[n, k]^T (+ bias[n]); f32 accumulation.
    fn matmul(
        &self,
        p: &MatmulParams,
        x: &Self::Buffer,
        w: &Self::Buffer,
        bias: Option<&Self::Buffer>,
        out: &mut Self::Buffer,
    ) -> Result<()>;
    /// out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w. `[rows][dim]`.
    fn rmsnorm(
        &self,
        p: &RmsnormParams,
        x: &Self::Buffer,
        w: &Self::Buffer,
        out: &mut Self::Buffer,
    ) -> Result<()>;
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
    /// gate_up `[rows][2*dim]` (gate | up) -> out `[rows][dim]` = silu(gate) * up.
    fn silu_mul(
        &self,
        p: &SiluMulParams,
        gate_up: &Self::Buffer,
        out: &mut Self::Buffer,
    ) -> Result<()>;
    /// out[i, :] = src[rows[i], :]; `[n_out][dim]` f32.
    fn gather_rows(
        &self,
        p: &GatherRowsParams,
        src: &Self::Buffer,
        rows: &Self::Buffer,
        out: &mut Self::Buffer,
    ) -> Result<()>;
    /// qkv `[n_tokens][(n_heads + 2 n_kv_heads) head_dim]` -> q `[n_tokens][n_heads][head_dim]`
    /// rotated (rotate-half RoPE at each token's position), k rotated and v written to their slots
    /// in the pools.
    fn rope_append_kv(
        &self,
        p: &RopeAppendKvParams,
        qkv: &Self::Buffer,
        meta: &RopeAppendMeta<Self>,
        q: &mut Self::Buffer,
        kv: KvPoolsMut<Self>,
    ) -> Result<()>;
    /// Causal attention of each sequence's new tokens over its whole cached context (prefix and
    /// chunk, already appended). q/out `[n_tokens][n_heads][head_dim]`; sequence `s`'s queries are
    /// rows `q_indptr[s]..q_indptr[s+1]` and sit at the last positions of its `kv_len[s]` tokens.
    fn prefill_attention(
        &self,
        p: &AttentionParams,
        q: &Self::Buffer,
        q_indptr: &Self::Buffer,
        kv: KvPools<Self>,
        meta: &PagedMeta<Self>,
        out: &mut Self::Buffer,
    ) -> Result<()>;
    /// One query token per sequence (at position kv_len-1) attending only over the logical pages
    /// listed for its KV head. q/out `[num_seqs][n_heads][head_dim]`.
    fn sparse_decode_attention(
        &self,
        p: &AttentionParams,
        q: &Self::Buffer,
        kv: KvPools<Self>,
        meta: &PagedMeta<Self>,
        pages: &HeadPages<Self>,
        out: &mut Self::Buffer,
    ) -> Result<()>;
    /// out[r] = index of the max of row r (lowest index on ties). `[rows][n]` -> `[rows]` u32.
    fn argmax(&self, p: &ArgmaxParams, x: &Self::Buffer, out: &mut Self::Buffer) -> Result<()>;
}
