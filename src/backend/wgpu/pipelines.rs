//! Typed dispatches: one declaration per compute pipeline (`shaders/<op>.wgsl`) — its `#[repr(C)]`
//! parameter struct (binding 0, a uniform) and its storage buffers by their WGSL names in binding
//! order (1, 2, ...), each read-only or read-write. The macro turns each into a module with a
//! `Binds` struct (one named field per binding; read-write ones borrowed mutably) and a `dispatch`
//! function, so op code names every binding and never lists buffers by position. Pipelines that
//! share one binding list (the matmul kernels) are declared once with their variants, each named
//! by a constant (`matmul::GEMV`), and dispatched with `dispatch_variant`.
//!
//! `tests/shaders.rs` (`every_pipeline_matches_its_wgsl_bindings`) parses every assembled module
//! with naga and checks each declaration against its global bindings: the uniform's struct, then
//! every storage binding's index, name and access mode. A wrong order fails there.

use super::WgpuBuffer;
use super::context::{Bind, Gpu};
use crate::backend::*;
use crate::error::Result;

/// Access of a storage binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// `var<storage, read>`.
    Read,
    /// `var<storage, read_write>`.
    ReadWrite,
}

/// One declaration, as the binding test reads it.
pub struct Pipeline {
    /// The shader ops (`shaders/<op>.wgsl`) with this binding list: the declaration's own op
    /// first, then its variants.
    pub ops: &'static [&'static str],
    pub params: &'static str,
    /// Storage bindings 1, 2, ... in order.
    pub binds: &'static [(&'static str, Access)],
}

macro_rules! bind_ty {
    (read) => { &'a WgpuBuffer };
    (read_write) => { &'a mut WgpuBuffer };
}

macro_rules! access {
    (read) => {
        Access::Read
    };
    (read_write) => {
        Access::ReadWrite
    };
}

macro_rules! pipelines {
    ($(
        $(#[$doc:meta])*
        $op:ident ($params:ident) $([$($vconst:ident = $variant:ident),+ $(,)?])?
        { $($bind:ident: $acc:ident),+ $(,)? }
    )+) => {
        $(
            $(#[$doc])*
            pub mod $op {
                use super::*;
                /// The op stem (`shaders/<op>.wgsl`).
                pub const OP: &str = stringify!($op);
                $($(
                    /// A variant with the same bindings (`shaders/<variant>.wgsl`).
                    pub const $vconst: &str = stringify!($variant);
                )+)?
                /// The op and its variants.
                pub const OPS: &[&str] = &[OP $($(, $vconst)+)?];
                /// Storage bindings 1, 2, ... by their WGSL names.
                pub struct Binds<'a> {
                    $(pub $bind: bind_ty!($acc),)+
                }
                /// Record one dispatch of the pipeline for `weights` (ops that read weights).
                pub fn dispatch(
                    gpu: &Gpu,
                    weights: Option<DType>,
                    p: &$params,
                    b: Binds<'_>,
                    groups: (u32, u32, u32),
                ) -> Result<()> {
                    dispatch_variant(gpu, OP, weights, p, b, groups)
                }
                /// Record one dispatch of `op` (one of [`OPS`]).
                pub fn dispatch_variant(
                    gpu: &Gpu,
                    op: &'static str,
                    weights: Option<DType>,
                    p: &$params,
                    b: Binds<'_>,
                    groups: (u32, u32, u32),
                ) -> Result<()> {
                    if !OPS.contains(&op) {
                        return Err(super::super::context::err(format!("{op} is not a variant of `{OP}`")));
                    }
                    gpu.dispatch(op, weights, bytemuck::bytes_of(p), &[$(Bind(&b.$bind.buf)),+], groups)
                }
            }
        )+
        /// Every declaration (the binding test walks these).
        pub const ALL: &[Pipeline] = &[$(Pipeline {
            ops: $op::OPS,
            params: stringify!($params),
            binds: &[$((stringify!($bind), access!($acc))),+],
        }),+];
    };
}

pipelines! {
    embed(EmbedParams) { w: read, ids: read, out: read_write }
    /// The GEMM (128-row tiles) and its variants, one binding list (ops_matmul.rs picks one).
    matmul(MatmulParams) [
        M32 = matmul_m32,
        GEMV = matmul_gemv,
        GEMV_SUBGROUP = matmul_gemv_subgroup,
        GEMV_SUBGROUP_BATCH = matmul_gemv_subgroup_batch,
        GEMV_SUBGROUP_BATCH_CU1 = matmul_gemv_subgroup_batch_cu1,
        COOP = matmul_coop,
    ]
    { x: read, w: read, bias: read, out: read_write }
    /// The 128x128-tile tensor-core GEMM (pass 2): x as f16 from `matmul_coop_x16` (ops_matmul.rs).
    matmul_coop_128(MatmulParams) { xh: read, w: read, bias: read, out: read_write }
    /// Pass 1 of `matmul_coop_128`: x to f16 (the `_bf16` variant rounds to bf16 first).
    matmul_coop_x16(MatmulParams) [X16_BF16 = matmul_coop_x16_bf16] { x: read, xh: read_write }
    /// The batch-1 GEMV on quantized weights with two-digit int8 x (pass 2; ops_matmul.rs).
    matmul_gemv_x8(MatmulParams) { xq: read, w: read, bias: read, out: read_write }
    /// `matmul_gemv_x8` of q|k|v with `rope_append_kv16` in its epilogue (ops_fused.rs): f16
    /// pools; the `_bf16` variant bf16 pools.
    matmul_gemv_x8_rope(MatmulRopeParams) [BF16 = matmul_gemv_x8_rope_bf16] {
        xq: read, w: read, bias: read, out: read_write, positions: read, slots: read, ring_slots: read,
        inv_freq: read, head_map: read, q: read_write, k: read_write, v: read_write, sk: read_write,
        sv: read_write, summary: read_write,
    }
    /// `matmul_gemv_x8` of gate|up with `silu_mul_x8` in its epilogue (ops_fused.rs).
    matmul_gemv_x8_silu_mul(MatmulParams) { xq: read, w: read, bias: read, out: read_write, act: read_write }
    /// Pass 1 of `matmul_gemv_x8`: x to int8 blocks of 32.
    matmul_gemv_x8_pack(MatmulParams) { x: read, xq: read_write }
    /// The row norms; `_x8`: one row's out as x8 digits (DType::X8).
    rmsnorm(RmsnormParams) [X8 = rmsnorm_x8] { x: read, wn: read, out: read_write }
    add_rmsnorm(RmsnormParams) [X8 = add_rmsnorm_x8] { residual: read_write, x: read, wn: read, out: read_write }
    add(AddParams) { a: read_write, b: read }
    silu_mul(SiluMulParams) [X8 = silu_mul_x8] { gate_up: read, out: read_write }
    gelu_tanh_mul(GeluTanhMulParams) { gate_up: read, out: read_write }
    head_rmsnorm(HeadRmsnormParams) { x: read_write, wn: read }
    scale(ScaleParams) { x: read_write }
    gather_rows(GatherRowsParams) { src: read, rows: read, out: read_write }
    mean_rows(MeanRowsParams) { src: read, indptr: read, out: read_write }
    /// argmax's first pass (each workgroup's best of its span of a row) and its second.
    argmax_part(ArgmaxParams) { x: read, part: read_write }
    argmax(ArgmaxParams) { part: read, out: read_write }
    sample(SampleParams) { x: read, settings: read, out: read_write }
    fill_random(FillRandomParams) { out: read_write }
    rope_append_kv(RopeAppendKvParams) {
        qkv: read, positions: read, slots: read, ring_slots: read, inv_freq: read, head_map: read,
        q: read_write, k: read_write, v: read_write, sk: read_write, sv: read_write,
    }
    /// The same in one pass for 16-bit pools (head_dim % 4 == 0; ops_kv.rs), which also folds a
    /// single token's keys into the page summary.
    rope_append_kv16(RopeAppendKvParams) {
        qkv: read, positions: read, slots: read, ring_slots: read, inv_freq: read, head_map: read,
        q: read_write, k: read_write, v: read_write, sk: read_write, sv: read_write, summary: read_write,
    }
    /// The store pass of a packed KV dtype (f32 staging rows into the pools).
    rope_append_kv_pack(RopeAppendKvParams) {
        staged_k: read, staged_v: read, slots: read, ring_slots: read, head_map: read,
        k: read_write, v: read_write, sk: read_write, sv: read_write,
    }
    rope_append_kv_summary(RopeAppendKvParams) { slots: read, k_pool: read, summary: read_write }
    /// Pass 1 of `page_select`: packed (score, page) keys.
    page_select(PageSelectParams) {
        q: read, summary: read, head_map: read, page_indptr: read, page_table: read, kv_len: read,
        select_mask: read, keys: read_write,
    }
    /// Between passes 1 and 2 of `page_select` with `PAGE_RANK_HEAD_NORM`: the per-query-head
    /// keys normalized and combined into one key per (candidate, retrieval head), in place.
    page_select_norm(PageSelectParams) {
        head_map: read, page_indptr: read, kv_len: read, select_mask: read, keys: read_write,
    }
    /// Pass 2 of `page_select`: top-k of the keys per (sequence, retrieval head).
    page_select_topk(PageSelectParams) {
        keys: read, head_map: read, page_indptr: read, kv_len: read, seq_slot: read, select_mask: read,
        selected: read_write, counts: read_write,
    }
    /// Block-sparse prefill's antidiagonal estimate, per (query block, KV head).
    antidiagonal_score(AntidiagonalParams) {
        q: read, k_pool: read, head_map: read, page_indptr: read, page_table: read, kv_len: read, info: read,
        v_indptr: read, scores: read_write,
    }
    /// Pass 1 of `page_top_k`: the score table as sort keys (pass 2 is `page_select_topk`).
    page_top_k(PageTopKParams) { scores: read, keys: read_write }
    prefill_attention(AttentionParams) {
        q: read, q_indptr: read, k_pool: read, v_pool: read, head_map: read, page_indptr: read,
        page_table: read, kv_len: read, ring_table: read, out: read_write, blk_sel: read, blk_cnt: read,
    }
    /// The cooperative-matrix prefill (16-bit KV, head_dim 128, and its head_dim-64 variant;
    /// ops_attention.rs `coop_prefill`): no block lists.
    prefill_attention_coop_d128(AttentionParams) [D64 = prefill_attention_coop_d64] {
        q: read, q_indptr: read, k_pool: read, v_pool: read, head_map: read, page_indptr: read,
        page_table: read, kv_len: read, ring_table: read, out: read_write,
    }
    /// Split-KV decode attention (ops_attention.rs).
    sparse_decode_attention(AttentionParams) {
        q: read, k_pool: read, v_pool: read, head_map: read, page_indptr: read, page_table: read,
        kv_len: read, ring_table: read, selected: read, counts: read, seq_slot: read, tail_start: read,
        out: read_write, part: read_write,
    }
    /// The same for 16-bit pools and head_dim 16/32/64/128, both head kinds in one dispatch
    /// (ops_attention.rs `kv16_decode`).
    sparse_decode_attention_kv16(AttentionParams) {
        q: read, k_pool: read, v_pool: read, sk_pool: read, sv_pool: read, head_map: read,
        page_indptr: read, page_table: read, kv_len: read, ring_table: read, selected: read,
        counts: read, seq_slot: read, tail_start: read, out: read_write, part: read_write,
    }
    sparse_decode_attention_merge(AttentionParams) [X8 = sparse_decode_attention_merge_x8] { part: read, out: read_write }
    lambda_mass(LambdaMassParams) {
        q: read, k_pool: read, head_map: read, page_indptr: read, page_table: read, kv_len: read,
        out: read_write,
    }
}
