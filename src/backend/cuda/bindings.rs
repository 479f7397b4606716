//! Typed launches: one declaration per kernel signature of `cuda/*.cu` — its module stem, its
//! entry points (the `extern "C" __global__` names that share the signature: dtype and tile
//! variants), its `#[repr(C)]` parameter struct and its arguments in the `.cu` order, each with
//! its role (read, written, optional, scratch, scalar) and element type. The macro turns each into
//! a module with an `Args` struct (one named field per kernel argument) and a `launch` function,
//! so op code names every argument and never builds an argument list or a kernel name itself.
//!
//! `tests/cuda.rs` (`every_binding_matches_its_cu_signature`) parses the `.cu` sources (macros
//! expanded) and checks every declaration against every entry's signature: parameter count,
//! order, names, element types and constness. A wrong order fails there, without a GPU.
//!
//! Invariants: in every declaration the pointer arguments come before the `u32` scalars (the
//! order the launcher passes them in; the test checks it); a `launch` refuses an entry that is not
//! one of its declaration's, and `launch` (no entry named) refuses a kernel that has variants.

use super::CudaBuffer;
use super::context::{Gpu, Launch};
use crate::backend::*;
use crate::error::Result;

/// How a kernel argument is passed (what `Args` holds for it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `const T*`: a buffer the kernel reads.
    In,
    /// `T*`: a buffer the kernel writes (and may read).
    Out,
    /// `const T*` that may be absent (null).
    OptIn,
    /// `const T*` / `T*` into a scratch allocation (`Gpu::scratch`; 0 = none).
    ScratchIn,
    ScratchOut,
    /// `u32` by value.
    U32,
}

/// Element type of a pointer argument as the `.cu` declares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    F32,
    U32,
    U64,
    /// The storage dtype of the entry (KV or weights: a template parameter or its instance).
    Store,
    /// `void*` (fill_random: any float dtype).
    Any,
    /// Not a pointer (`u32` scalars).
    Scalar,
}

/// One declaration, as the signature test reads it.
pub struct Binding {
    pub name: &'static str,
    pub stem: &'static str,
    pub params: &'static str,
    pub entries: &'static [&'static str],
    pub args: &'static [(&'static str, Role, Elem)],
}

/// A device pointer into a scratch allocation (`Gpu::scratch`), or none (0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scratch(pub u64);

impl Scratch {
    pub const NONE: Scratch = Scratch(0);
}

macro_rules! field_ty {
    (In) => { &'a CudaBuffer };
    (Out) => { &'a mut CudaBuffer };
    (OptIn) => { Option<&'a CudaBuffer> };
    (ScratchIn) => { Scratch };
    (ScratchOut) => { Scratch };
    (U32) => { u32 };
}

macro_rules! push_arg {
    (In, $v:expr, $ptrs:ident, $scalars:ident) => {
        $ptrs.push($v.ptr())
    };
    (Out, $v:expr, $ptrs:ident, $scalars:ident) => {
        $ptrs.push($v.ptr())
    };
    (OptIn, $v:expr, $ptrs:ident, $scalars:ident) => {
        $ptrs.push($v.map_or(0, |b| b.ptr()))
    };
    (ScratchIn, $v:expr, $ptrs:ident, $scalars:ident) => {
        $ptrs.push($v.0)
    };
    (ScratchOut, $v:expr, $ptrs:ident, $scalars:ident) => {
        $ptrs.push($v.0)
    };
    (U32, $v:expr, $ptrs:ident, $scalars:ident) => {
        $scalars.push($v)
    };
}

macro_rules! kernels {
    ($(
        $(#[$doc:meta])*
        $name:ident: $stem:literal ($params:ident) [$($entry:literal),+ $(,)?]
        { $($arg:ident: $role:ident $elem:ident),+ $(,)? }
    )+) => {
        $(
            $(#[$doc])*
            pub mod $name {
                use super::*;
                /// The `cuda/<stem>.cu` module.
                pub const STEM: &str = $stem;
                /// Entry points with this signature.
                pub const ENTRIES: &[&str] = &[$($entry),+];
                /// The kernel's arguments after the parameter struct, by their `.cu` names.
                pub struct Args<'a> {
                    $(pub $arg: field_ty!($role),)+
                }
                /// Launch the kernel's only entry with `p` and `a` (an error for a kernel with
                /// variants: those pick one with [`launch_variant`]).
                pub fn launch(gpu: &Gpu, l: Launch, p: &$params, a: Args<'_>) -> Result<()> {
                    match ENTRIES {
                        [only] => launch_variant(gpu, only, l, p, a),
                        _ => Err(super::super::context::err(format!("{} has variants: pick one", stringify!($name)))),
                    }
                }
                /// Launch `entry` (one of [`ENTRIES`]) with `p` and `a`.
                pub fn launch_variant(gpu: &Gpu, entry: &'static str, l: Launch, p: &$params, a: Args<'_>) -> Result<()> {
                    if !ENTRIES.contains(&entry) {
                        return Err(super::super::context::err(format!("{entry} is not an entry of {STEM}.cu `{}`", stringify!($name))));
                    }
                    let mut ptrs: Vec<u64> = Vec::with_capacity(24);
                    #[allow(unused_mut)] // kernels without u32 scalars
                    let mut scalars: Vec<u32> = Vec::with_capacity(4);
                    $(push_arg!($role, a.$arg, ptrs, scalars);)+
                    gpu.launch(STEM, entry, l, p, &ptrs, &scalars)
                }
            }
        )+
        /// Every declaration (the signature test walks these).
        pub const ALL: &[Binding] = &[$(Binding {
            name: stringify!($name),
            stem: $stem,
            params: stringify!($params),
            entries: $name::ENTRIES,
            args: &[$((stringify!($arg), Role::$role, Elem::$elem)),+],
        }),+];
    };
}

kernels! {
    /// `[embed_dtypes()]`: float tables, then the quantized formats (bytes), then the packed
    /// formats ([`entry_w`]).
    embed: "embed" (EmbedParams) [
        "embed_f32", "embed_f16", "embed_bf16", "embed_q4_0", "embed_q4_1", "embed_q5_0", "embed_q5_1",
        "embed_q8_0", "embed_q4_k", "embed_q5_k", "embed_q6_k", "embed_int8", "embed_fp8", "embed_q4_0p", "embed_q4_1p",
        "embed_q5_0p", "embed_q5_1p", "embed_q8_0p",
    ]
    { t: In Store, ids: In U32, out: Out F32 }

    /// `[out dtype: ACT_DTYPES]`.
    rmsnorm: "rmsnorm" (RmsnormParams) ["rmsnorm_f32", "rmsnorm_f16", "rmsnorm_bf16", "rmsnorm_x8"]
    { x: In F32, w: In F32, out: Out Store }

    /// `[out dtype: ACT_DTYPES]`.
    add_rmsnorm: "add_rmsnorm" (RmsnormParams) ["add_rmsnorm_f32", "add_rmsnorm_f16", "add_rmsnorm_bf16", "add_rmsnorm_x8"]
    { res: Out F32, x: In F32, w: In F32, out: Out Store }

    add: "add" (AddParams) ["add"]
    { a: Out F32, b: In F32 }

    /// `[out dtype: ACT_DTYPES]`.
    silu_mul: "silu_mul" (SiluMulParams) ["silu_mul_f32", "silu_mul_f16", "silu_mul_bf16", "silu_mul_x8"]
    { gu: In F32, out: Out Store }

    /// gate_up as a GEMM wrote it (`Backend::matmul_out16_dtype`), out the same dtype: `[f16, bf16]`.
    /// Then the same with 8 columns a thread (16-byte accesses): `[f16, bf16]`.
    silu_mul_in16: "silu_mul" (SiluMulParams) ["silu_mul_f16_in", "silu_mul_bf16_in", "silu_mul_f16_in8", "silu_mul_bf16_in8"]
    { gu: In Store, out: Out Store }

    gelu_tanh_mul: "gelu_tanh_mul" (GeluTanhMulParams) ["gelu_tanh_mul"]
    { gu: In F32, out: Out F32 }

    /// RMS norm of each head's slice of a row, in place.
    head_rmsnorm: "head_rmsnorm" (HeadRmsnormParams) ["head_rmsnorm"]
    { x: Out F32, w: In F32 }

    scale: "scale" (ScaleParams) ["scale"]
    { x: Out F32 }

    gather_rows: "gather_rows" (GatherRowsParams) ["gather_rows"]
    { src: In F32, rows: In U32, out: Out F32 }

    mean_rows: "mean_rows" (MeanRowsParams) ["mean_rows"]
    { src: In F32, indptr: In U32, out: Out F32 }

    /// argmax's first pass: each block's best (value, index) of its span of a row.
    argmax_part: "argmax" (ArgmaxParams) ["argmax_part"]
    { x: In F32, part: ScratchOut U32 }

    /// argmax's second pass: a row's best over its parts.
    argmax: "argmax" (ArgmaxParams) ["argmax"]
    { part: ScratchIn U32, out: Out U32, parts: U32 Scalar }

    sample: "sample" (SampleParams) ["sample"]
    { x: In F32, settings: In U32, out: Out U32 }

    fill_random: "fill_random" (FillRandomParams) ["fill_random"]
    { out: Out Any }

    /// Batch-1 decode GEMV `[weight dtype][plain | _vec (k % 8 == 0, 16-byte loads)]`.
    matmul_gemv: "matmul" (MatmulParams) [
        "matmul_gemv_f32", "matmul_gemv_f32_vec", "matmul_gemv_f16", "matmul_gemv_f16_vec",
        "matmul_gemv_bf16", "matmul_gemv_bf16_vec",
    ]
    { x: In F32, w: In Store, b: OptIn F32, o: Out F32 }

    /// Quantized-weight GEMV `[QUANT_DTYPES, PACKED_DTYPES][up to 1 | up to 16 rows of x]`
    /// (matmul_quant.cu; [`entry_w`]).
    matmul_gemv_quant: "matmul_quant" (MatmulParams) [
        "matmul_gemv_q4_0_m1", "matmul_gemv_q4_0_m16", "matmul_gemv_q4_1_m1", "matmul_gemv_q4_1_m16",
        "matmul_gemv_q5_0_m1", "matmul_gemv_q5_0_m16", "matmul_gemv_q5_1_m1", "matmul_gemv_q5_1_m16",
        "matmul_gemv_q8_0_m1", "matmul_gemv_q8_0_m16", "matmul_gemv_q4_k_m1", "matmul_gemv_q4_k_m16",
        "matmul_gemv_q5_k_m1", "matmul_gemv_q5_k_m16", "matmul_gemv_q6_k_m1", "matmul_gemv_q6_k_m16",
        "matmul_gemv_int8_m1", "matmul_gemv_int8_m16", "matmul_gemv_fp8_m1", "matmul_gemv_fp8_m16",
        "matmul_gemv_q4_0p_m1", "matmul_gemv_q4_0p_m16", "matmul_gemv_q4_1p_m1", "matmul_gemv_q4_1p_m16",
        "matmul_gemv_q5_0p_m1", "matmul_gemv_q5_0p_m16", "matmul_gemv_q5_1p_m1", "matmul_gemv_q5_1p_m16",
        "matmul_gemv_q8_0p_m1", "matmul_gemv_q8_0p_m16",
    ]
    { x: In F32, w: In Store, b: OptIn F32, o: Out F32 }

    /// The batch-1 integer-dot GEMV reading x's digits from `matmul_quantize_x_m1`'s scratch
    /// (`MmvMode::Pre`) `[MMQ_DTYPES, PACKED_DTYPES]`.
    matmul_gemv_quant_pre: "matmul_quant" (MatmulParams) [
        "matmul_gemv_q4_0_m1_pre", "matmul_gemv_q4_1_m1_pre", "matmul_gemv_q5_0_m1_pre",
        "matmul_gemv_q5_1_m1_pre", "matmul_gemv_q8_0_m1_pre", "matmul_gemv_q4_k_m1_pre",
        "matmul_gemv_q5_k_m1_pre", "matmul_gemv_q6_k_m1_pre", "matmul_gemv_int8_m1_pre",
        "matmul_gemv_q4_0p_m1_pre", "matmul_gemv_q4_1p_m1_pre", "matmul_gemv_q5_0p_m1_pre",
        "matmul_gemv_q5_1p_m1_pre", "matmul_gemv_q8_0p_m1_pre",
    ]
    { xq: ScratchIn U32, w: In Store, b: OptIn F32, o: Out F32 }

    /// The batch-1 K-quant GEMV holding x's digits (from `matmul_quantize_x_m1`'s scratch) in
    /// registers (`MmvMode::Reg`) `[REG_DTYPES: Q4_K | Q5_K | int8 rows, PACKED_DTYPES]`.
    matmul_gemv_quant_reg: "matmul_quant" (MatmulParams) [
        "matmul_gemv_q4_k_m1_reg", "matmul_gemv_q5_k_m1_reg", "matmul_gemv_int8_m1_reg", "matmul_gemv_q4_0p_m1_reg",
        "matmul_gemv_q4_1p_m1_reg", "matmul_gemv_q5_0p_m1_reg", "matmul_gemv_q5_1p_m1_reg", "matmul_gemv_q8_0p_m1_reg",
    ]
    { xq: ScratchIn U32, w: In Store, b: OptIn F32, o: Out F32 }

    /// The same with x quantized by the lanes from f32 (`MmvMode::Reg` with `lanes_quantize`)
    /// `[REG_DTYPES, PACKED_DTYPES]`, made from its producer's operands by `xop` (0 none, 1
    /// rmsnorm with weight `xw`, 2 silu_mul; `eps` the f32's bits: `Backend::matmul_prologue`).
    matmul_gemv_quant_regf: "matmul_quant" (MatmulParams) [
        "matmul_gemv_q4_k_m1_regf", "matmul_gemv_q5_k_m1_regf", "matmul_gemv_int8_m1_regf", "matmul_gemv_q4_0p_m1_regf",
        "matmul_gemv_q4_1p_m1_regf", "matmul_gemv_q5_0p_m1_regf", "matmul_gemv_q5_1p_m1_regf",
        "matmul_gemv_q8_0p_m1_regf",
    ]
    { x: In F32, xw: OptIn F32, w: In Store, b: OptIn F32, o: Out F32, xop: U32 Scalar, eps: U32 Scalar }

    /// The register GEMVs with their weight rows streamed into shared memory by bulk copies
    /// (sm_90, `MmvMode::Reg` with `bulk`; `stages` shared-memory stages of four rows)
    /// `[REG_DTYPES, PACKED_DTYPES]`: x's digits from a scratch (`_bulk`) or quantized by the
    /// lanes (`_bulkf`).
    matmul_gemv_quant_bulk: "matmul_quant" (MatmulParams) [
        "matmul_gemv_q4_k_m1_bulk", "matmul_gemv_q5_k_m1_bulk", "matmul_gemv_int8_m1_bulk", "matmul_gemv_q4_0p_m1_bulk",
        "matmul_gemv_q4_1p_m1_bulk", "matmul_gemv_q5_0p_m1_bulk", "matmul_gemv_q5_1p_m1_bulk", "matmul_gemv_q8_0p_m1_bulk",
    ]
    { xq: ScratchIn U32, w: In Store, b: OptIn F32, o: Out F32, stages: U32 Scalar }

    /// The same with x quantized by the lanes from f32 `[REG_DTYPES, PACKED_DTYPES]` (and `xop`
    /// as `_regf`'s).
    matmul_gemv_quant_bulkf: "matmul_quant" (MatmulParams) [
        "matmul_gemv_q4_k_m1_bulkf", "matmul_gemv_q5_k_m1_bulkf", "matmul_gemv_int8_m1_bulkf",
        "matmul_gemv_q4_0p_m1_bulkf", "matmul_gemv_q4_1p_m1_bulkf", "matmul_gemv_q5_0p_m1_bulkf",
        "matmul_gemv_q5_1p_m1_bulkf", "matmul_gemv_q8_0p_m1_bulkf",
    ]
    { x: In F32, xw: OptIn F32, w: In Store, b: OptIn F32, o: Out F32, stages: U32 Scalar, xop: U32 Scalar, eps: U32 Scalar }

    /// x (one row) as the batch-1 GEMV's two int8 digit planes and (d, sum), in the layout of its
    /// shared memory, into a scratch (`MmvMode::Pre`).
    matmul_quantize_x_m1: "matmul_quant" (MatmulParams) ["matmul_quantize_x_m1"]
    { x: In F32, xq: ScratchOut U32 }

    /// Quantized weight rows `row0 .. row0 + p.n` as f16 into a scratch `[QUANT_DTYPES, PACKED_DTYPES]` (the
    /// GEMM path; `n_total`: the matrix's rows).
    matmul_dequant: "matmul_quant" (MatmulParams) [
        "matmul_dequant_q4_0", "matmul_dequant_q4_1", "matmul_dequant_q5_0", "matmul_dequant_q5_1",
        "matmul_dequant_q8_0", "matmul_dequant_q4_k", "matmul_dequant_q5_k", "matmul_dequant_q6_k",
        "matmul_dequant_int8", "matmul_dequant_fp8", "matmul_dequant_q4_0p",
        "matmul_dequant_q4_1p", "matmul_dequant_q5_0p", "matmul_dequant_q5_1p", "matmul_dequant_q8_0p",
    ]
    { w: In Store, w16: ScratchOut Store, row0: U32 Scalar, n_total: U32 Scalar }

    /// The tensor-core quantized GEMM for 2..=64 rows of x `[MMQ_DTYPES, PACKED_DTYPES][n-tiles 1 | 2 | 4 | 8]`
    /// (matmul_mmq.cu; x as int8 digits from `matmul_quantize_x`).
    matmul_mmq: "matmul_mmq" (MatmulParams) [
        "matmul_mmq_q4_0_n1", "matmul_mmq_q4_0_n2", "matmul_mmq_q4_0_n4", "matmul_mmq_q4_0_n8",
        "matmul_mmq_q4_1_n1", "matmul_mmq_q4_1_n2", "matmul_mmq_q4_1_n4", "matmul_mmq_q4_1_n8",
        "matmul_mmq_q5_0_n1", "matmul_mmq_q5_0_n2", "matmul_mmq_q5_0_n4", "matmul_mmq_q5_0_n8",
        "matmul_mmq_q5_1_n1", "matmul_mmq_q5_1_n2", "matmul_mmq_q5_1_n4", "matmul_mmq_q5_1_n8",
        "matmul_mmq_q8_0_n1", "matmul_mmq_q8_0_n2", "matmul_mmq_q8_0_n4", "matmul_mmq_q8_0_n8",
        "matmul_mmq_q4_k_n1", "matmul_mmq_q4_k_n2", "matmul_mmq_q4_k_n4", "matmul_mmq_q4_k_n8",
        "matmul_mmq_q5_k_n1", "matmul_mmq_q5_k_n2", "matmul_mmq_q5_k_n4", "matmul_mmq_q5_k_n8",
        "matmul_mmq_q6_k_n1", "matmul_mmq_q6_k_n2", "matmul_mmq_q6_k_n4", "matmul_mmq_q6_k_n8",
        "matmul_mmq_int8_n1", "matmul_mmq_int8_n2", "matmul_mmq_int8_n4", "matmul_mmq_int8_n8",
        "matmul_mmq_q4_0p_n1", "matmul_mmq_q4_0p_n2", "matmul_mmq_q4_0p_n4", "matmul_mmq_q4_0p_n8",
        "matmul_mmq_q4_1p_n1", "matmul_mmq_q4_1p_n2", "matmul_mmq_q4_1p_n4", "matmul_mmq_q4_1p_n8",
        "matmul_mmq_q5_0p_n1", "matmul_mmq_q5_0p_n2", "matmul_mmq_q5_0p_n4", "matmul_mmq_q5_0p_n8",
        "matmul_mmq_q5_1p_n1", "matmul_mmq_q5_1p_n2", "matmul_mmq_q5_1p_n4", "matmul_mmq_q5_1p_n8",
        "matmul_mmq_q8_0p_n1", "matmul_mmq_q8_0p_n2", "matmul_mmq_q8_0p_n4", "matmul_mmq_q8_0p_n8",
    ]
    { xq: ScratchIn U32, xds: ScratchIn F32, w: In Store, b: OptIn F32, o: Out F32 }

    /// x as two int8 digits per element, blocks of 32, in the MMQ GEMM's B-fragment layout.
    matmul_quantize_x: "matmul_mmq" (MatmulParams) ["matmul_quantize_x"]
    { x: In F32, xq: ScratchOut U32, xds: ScratchOut F32 }

    /// out += bias per column (after a cuBLAS GEMM).
    matmul_bias: "matmul" (MatmulParams) ["matmul_bias"]
    { bias: In F32, out: Out F32 }

    /// x rounded to the weights' 16-bit dtype for the one-GEMM path `[f16, bf16]`.
    matmul_round_x: "matmul" (MatmulParams) ["matmul_round_x_f16", "matmul_round_x_bf16"]
    { x: In F32, x16: ScratchOut Store }

    /// `[kv dtype]`, then `rope_append_kv_rows_[f32, f16, bf16]` (several tokens, one block a
    /// token; `sum` unused); the 8-bit entries take the pools as bytes (codes + row scales). A
    /// one-token call folds its keys into the page summaries (`sum`); others leave them to
    /// `rope_append_kv_summary`.
    rope_append_kv: "rope_append_kv" (RopeAppendKvParams) [
        "rope_append_kv_f32", "rope_append_kv_f16", "rope_append_kv_bf16", "rope_append_kv_int8",
        "rope_append_kv_fp8", "rope_append_kv_rows_f32", "rope_append_kv_rows_f16", "rope_append_kv_rows_bf16",
    ]
    {
        qkv: In Any, positions: In U32, slots: In U32, ring_slots: In U32, inv_freq: In F32, head_map: In U32,
        q: Out F32, k: Out Store, v: Out Store, sk: Out Store, sv: Out Store, sum: Out F32, qkv16: U32 Scalar,
    }

    rope_append_kv_summary: "rope_append_kv_summary" (RopeAppendKvParams) [
        "rope_append_kv_summary_f32", "rope_append_kv_summary_f16", "rope_append_kv_summary_bf16",
        "rope_append_kv_summary_int8", "rope_append_kv_summary_fp8",
    ]
    { s: In U32, k: In Store, sum: Out F32 }

    /// Pass 1 of `page_select`: packed (score, page) keys per (sequence, KV head); with
    /// `PAGE_RANK_HEAD_NORM` each query head's bound into `heads` instead. `_rows`: tiles of rows
    /// that share their page lists (`PageSelectParams::rows_share_pages`; the same keys).
    page_select_score: "page_select" (PageSelectParams) ["page_select_score", "page_select_score_rows"]
    {
        q: In F32, summary: In F32, head_map: In U32, page_indptr: In U32, page_table: In U32, kv_len: In U32,
        select_mask: In U32, keys: ScratchOut U64, heads: ScratchOut F32, np: U32 Scalar,
        page_table_len: U32 Scalar,
    }

    /// `PAGE_RANK_HEAD_NORM` between passes 1 and 2: per-head bounds normalized and combined
    /// into the keys.
    page_select_norm: "page_select" (PageSelectParams) ["page_select_norm"]
    {
        head_map: In U32, page_indptr: In U32, kv_len: In U32, select_mask: In U32, heads: ScratchOut F32,
        keys: ScratchOut U64,
        np: U32 Scalar, page_table_len: U32 Scalar,
    }

    /// Pass 2 of `page_select`: top-k of the keys, ascending page ids (rows that fit sort in
    /// shared memory).
    page_select: "page_select" (PageSelectParams) ["page_select"]
    {
        head_map: In U32, page_indptr: In U32, kv_len: In U32, seq_slot: In U32, select_mask: In U32,
        keys_in: ScratchIn U64,
        selected: Out U32, counts: Out U32, np: U32 Scalar, page_table_len: U32 Scalar, selected_len: U32 Scalar,
        counts_len: U32 Scalar,
    }

    /// Pass 2 for rows too long for shared memory: sorts the keys in place in the scratch.
    page_select_global: "page_select" (PageSelectParams) ["page_select_global"]
    {
        head_map: In U32, page_indptr: In U32, kv_len: In U32, seq_slot: In U32, select_mask: In U32,
        keys_io: ScratchOut U64,
        selected: Out U32, counts: Out U32, np: U32 Scalar, page_table_len: U32 Scalar, selected_len: U32 Scalar,
        counts_len: U32 Scalar,
    }

    /// `page_top_k`: a score table's rows sorted in shared memory.
    page_top_k: "page_select" (PageTopKParams) ["page_top_k"]
    {
        scores: In F32, page_indptr: In U32, seq_slot: In U32, select_mask: In U32, selected: Out U32,
        counts: Out U32, np: U32 Scalar, scores_len: U32 Scalar, selected_len: U32 Scalar, counts_len: U32 Scalar,
    }

    /// `page_top_k` for rows too long for shared memory: sorted in place in the scratch.
    page_top_k_global: "page_select" (PageTopKParams) ["page_top_k_global"]
    {
        scores: In F32, page_indptr: In U32, seq_slot: In U32, select_mask: In U32, keys_io: ScratchOut U64,
        selected: Out U32, counts: Out U32, np: U32 Scalar, scores_len: U32 Scalar, selected_len: U32 Scalar,
        counts_len: U32 Scalar,
    }

    /// Block-sparse prefill's antidiagonal estimate `[STORE_DTYPES][d64 | d128 | d256]`.
    antidiagonal_score: "antidiagonal_score" (AntidiagonalParams) [
        "antidiagonal_score_f32_d64", "antidiagonal_score_f32_d128", "antidiagonal_score_f32_d256",
        "antidiagonal_score_f16_d64", "antidiagonal_score_f16_d128", "antidiagonal_score_f16_d256",
        "antidiagonal_score_bf16_d64", "antidiagonal_score_bf16_d128", "antidiagonal_score_bf16_d256",
        "antidiagonal_score_int8_d64", "antidiagonal_score_int8_d128", "antidiagonal_score_int8_d256",
        "antidiagonal_score_fp8_d64", "antidiagonal_score_fp8_d128", "antidiagonal_score_fp8_d256",
    ]
    {
        q: In F32, k: In Store, head_map: In U32, page_indptr: In U32, page_table: In U32, kv_len: In U32,
        info: In U32, v_indptr: In U32, scores: Out F32, page_table_len: U32 Scalar, scores_len: U32 Scalar,
    }

    /// `antidiagonal_score`'s GEMM path (cuda/antidiagonal_score_gemm.cu): the blocks' rows of q
    /// in the products' 16-bit type `[f16, bf16]`.
    antidiagonal_pack_q: "antidiagonal_score" (AntidiagonalParams) ["antidiagonal_pack_q_f16", "antidiagonal_pack_q_bf16"]
    { q: In F32, head_map: In U32, info: In U32, qs: ScratchOut Store, b0: U32 Scalar, nbc: U32 Scalar }

    /// The GEMM path's keys in position order `[STORE_DTYPES]` (out: f16 for f16 KV, else bf16).
    antidiagonal_pack_k: "antidiagonal_score" (AntidiagonalParams) [
        "antidiagonal_pack_k_f32", "antidiagonal_pack_k_f16", "antidiagonal_pack_k_bf16", "antidiagonal_pack_k_int8",
        "antidiagonal_pack_k_fp8",
    ]
    {
        k: In Store, head_map: In U32, page_indptr: In U32, page_table: In U32, kv_len: In U32, ks: ScratchOut Store,
        seq: U32 Scalar, n_pos: U32 Scalar, page_table_len: U32 Scalar,
    }

    /// The GEMM path's reductions of the products z, in this order: `antidiagonal_row_stats`
    /// (each row's maximum and inverse sum into stats; zeroes the blocks' score rows), then
    /// `antidiagonal_block_sums` (the softmax shares summed by page; reads stats).
    antidiagonal_sums: "antidiagonal_score" (AntidiagonalParams) ["antidiagonal_row_stats", "antidiagonal_block_sums"]
    {
        head_map: In U32, page_indptr: In U32, kv_len: In U32, info: In U32, v_indptr: In U32, z: ScratchIn F32,
        stats: ScratchOut F32, scores: Out F32, b0: U32 Scalar, nbc: U32 Scalar, ldz: U32 Scalar,
        seq_one: U32 Scalar, page_table_len: U32 Scalar, scores_len: U32 Scalar,
    }

    /// The scalar prefill `[f32 | int8 | fp8 KV][log2 dims-per-thread - 2]` (f32: the exact
    /// reference; 8-bit: codes dequantized as they are staged). Every prefill kernel writes out in
    /// f32 (out16 0) or rounded to f16 (1) / bf16 (2) (`Caps::act16_from`).
    prefill_attention: "prefill_attention" (AttentionParams) [
        "prefill_attention_f32_d4", "prefill_attention_f32_d8", "prefill_attention_f32_d16",
        "prefill_attention_f32_d32", "prefill_attention_f32_d64",
        "prefill_attention_int8_d4", "prefill_attention_int8_d8", "prefill_attention_int8_d16",
        "prefill_attention_int8_d32", "prefill_attention_int8_d64",
        "prefill_attention_fp8_d4", "prefill_attention_fp8_d8", "prefill_attention_fp8_d16",
        "prefill_attention_fp8_d32", "prefill_attention_fp8_d64",
    ]
    {
        q: In F32, q_indptr: In U32, k: In Store, v: In Store, sk: In Store, sv: In Store, head_map: In U32,
        page_indptr: In U32, page_table: In U32, kv_len: In U32, ring_table: In U32, out: Out Any,
        blk_sel: In U32, blk_cnt: In U32, ptl: U32 Scalar, rtl: U32 Scalar, bsl: U32 Scalar, bcl: U32 Scalar,
        out16: U32 Scalar,
    }

    /// The tensor-core prefill `[f16 | bf16 KV][head_dim tier 64 | 128 | 256, then the same tiers
    /// zero-padded for a smaller head_dim]` (same arguments).
    prefill_attention_mma: "prefill_attention" (AttentionParams) [
        "prefill_attention_mma_f16_d64", "prefill_attention_mma_f16_d128", "prefill_attention_mma_f16_d256",
        "prefill_attention_mma_f16_d64_pad", "prefill_attention_mma_f16_d128_pad",
        "prefill_attention_mma_f16_d256_pad",
        "prefill_attention_mma_bf16_d64", "prefill_attention_mma_bf16_d128", "prefill_attention_mma_bf16_d256",
        "prefill_attention_mma_bf16_d64_pad", "prefill_attention_mma_bf16_d128_pad",
        "prefill_attention_mma_bf16_d256_pad",
    ]
    {
        q: In F32, q_indptr: In U32, k: In Store, v: In Store, sk: In Store, sv: In Store, head_map: In U32,
        page_indptr: In U32, page_table: In U32, kv_len: In U32, ring_table: In U32, out: Out Any,
        blk_sel: In U32, blk_cnt: In U32, ptl: U32 Scalar, rtl: U32 Scalar, bsl: U32 Scalar, bcl: U32 Scalar,
        out16: U32 Scalar,
    }

    /// The Hopper (sm_90a, wgmma) prefill `[f16 | bf16 KV]` at head_dim 128, every thread
    /// staging key tiles with cp.async (same arguments).
    prefill_attention_wgmma: "prefill_attention" (AttentionParams) [
        "prefill_attention_wgmma_f16_d128", "prefill_attention_wgmma_bf16_d128",
    ]
    {
        q: In F32, q_indptr: In U32, k: In Store, v: In Store, sk: In Store, sv: In Store, head_map: In U32,
        page_indptr: In U32, page_table: In U32, kv_len: In U32, ring_table: In U32, out: Out Any,
        blk_sel: In U32, blk_cnt: In U32, ptl: U32 Scalar, rtl: U32 Scalar, bsl: U32 Scalar, bcl: U32 Scalar,
        out16: U32 Scalar,
    }

    /// The Hopper prefill with TMA page loads `[f16 | bf16 KV][every thread stages | a producer
    /// warpgroup stages (`_ws`)]` at head_dim 128: tmaps holds the four pools' tensor maps (tma.rs).
    prefill_attention_wgmma_tma: "prefill_attention" (AttentionParams) [
        "prefill_attention_wgmma_f16_d128_tma", "prefill_attention_wgmma_f16_d128_ws",
        "prefill_attention_wgmma_bf16_d128_tma", "prefill_attention_wgmma_bf16_d128_ws",
    ]
    {
        q: In F32, q_indptr: In U32, k: In Store, v: In Store, sk: In Store, sv: In Store, head_map: In U32,
        page_indptr: In U32, page_table: In U32, kv_len: In U32, ring_table: In U32, out: Out Any,
        blk_sel: In U32, blk_cnt: In U32, tmaps: ScratchIn U64, ptl: U32 Scalar, rtl: U32 Scalar, bsl: U32 Scalar,
        bcl: U32 Scalar, out16: U32 Scalar,
    }

    /// The tensor-core prefill over 8-bit KV `[int8 | fp8][head_dim 64 | 128 | 256]`, head_dim
    /// == D only (same arguments).
    prefill_attention_mma8: "prefill_attention" (AttentionParams) [
        "prefill_attention_mma_int8_d64", "prefill_attention_mma_int8_d128", "prefill_attention_mma_int8_d256",
        "prefill_attention_mma_fp8_d64", "prefill_attention_mma_fp8_d128", "prefill_attention_mma_fp8_d256",
    ]
    {
        q: In F32, q_indptr: In U32, k: In Store, v: In Store, sk: In Store, sv: In Store, head_map: In U32,
        page_indptr: In U32, page_table: In U32, kv_len: In U32, ring_table: In U32, out: Out Any,
        blk_sel: In U32, blk_cnt: In U32, ptl: U32 Scalar, rtl: U32 Scalar, bsl: U32 Scalar, bcl: U32 Scalar,
        out16: U32 Scalar,
    }

    /// `[kv dtype][log2 G]` (G query heads of one KV head per block).
    sparse_decode_attention: "sparse_decode_attention" (AttentionParams) [
        "sparse_decode_attention_f32_g1", "sparse_decode_attention_f32_g2",
        "sparse_decode_attention_f32_g4", "sparse_decode_attention_f32_g8",
        "sparse_decode_attention_f16_g1", "sparse_decode_attention_f16_g2",
        "sparse_decode_attention_f16_g4", "sparse_decode_attention_f16_g8",
        "sparse_decode_attention_bf16_g1", "sparse_decode_attention_bf16_g2",
        "sparse_decode_attention_bf16_g4", "sparse_decode_attention_bf16_g8",
        "sparse_decode_attention_int8_g1", "sparse_decode_attention_int8_g2",
        "sparse_decode_attention_int8_g4", "sparse_decode_attention_int8_g8",
        "sparse_decode_attention_fp8_g1", "sparse_decode_attention_fp8_g2",
        "sparse_decode_attention_fp8_g4", "sparse_decode_attention_fp8_g8",
    ]
    {
        q: In F32, k: In Store, v: In Store, sk: In Store, sv: In Store, head_map: In U32, page_indptr: In U32,
        page_table: In U32, kv_len: In U32, ring_table: In U32, selected: In U32, counts: In U32,
        seq_slot: In U32, tail_start: In U32, out: Out F32, part: ScratchOut F32,
        ptl: U32 Scalar, rtl: U32 Scalar, sl: U32 Scalar, cl: U32 Scalar,
    }

    /// The tensor-core decode `[f16 | bf16 | int8 | fp8 KV][head_dim 64 | 128]` (8 query heads a
    /// block; same arguments), then its 8-bit `_pf` builds `[int8 | fp8][64 | 128]` (the next
    /// tile's loads in flight; ops_attention.rs `DECODE_PF_FROM`).
    sparse_decode_attention_mma: "sparse_decode_attention" (AttentionParams) [
        "sparse_decode_attention_mma_f16_d64", "sparse_decode_attention_mma_f16_d128",
        "sparse_decode_attention_mma_bf16_d64", "sparse_decode_attention_mma_bf16_d128",
        "sparse_decode_attention_mma_int8_d64", "sparse_decode_attention_mma_int8_d128",
        "sparse_decode_attention_mma_fp8_d64", "sparse_decode_attention_mma_fp8_d128",
        "sparse_decode_attention_mma_pf_int8_d64", "sparse_decode_attention_mma_pf_int8_d128",
        "sparse_decode_attention_mma_pf_fp8_d64", "sparse_decode_attention_mma_pf_fp8_d128",
    ]
    {
        q: In F32, k: In Store, v: In Store, sk: In Store, sv: In Store, head_map: In U32, page_indptr: In U32,
        page_table: In U32, kv_len: In U32, ring_table: In U32, selected: In U32, counts: In U32,
        seq_slot: In U32, tail_start: In U32, out: Out F32, part: ScratchOut F32,
        ptl: U32 Scalar, rtl: U32 Scalar, sl: U32 Scalar, cl: U32 Scalar,
    }

    /// `[out: f32 | one row of x8 digits (DType::X8)]`.
    sparse_decode_attention_merge: "sparse_decode_attention_merge" (AttentionParams)
        ["sparse_decode_attention_merge", "sparse_decode_attention_merge_x8"]
    { part: ScratchIn F32, out: Out Store, n_splits: U32 Scalar }

    lambda_mass: "lambda_mass" (LambdaMassParams) [
        "lambda_mass_f32", "lambda_mass_f16", "lambda_mass_bf16", "lambda_mass_int8", "lambda_mass_fp8",
    ]
    {
        q: In F32, k: In Store, head_map: In U32, page_indptr: In U32, page_table: In U32, kv_len: In U32,
        out: Out F32, ptl: U32 Scalar,
    }
}

/// The storage dtypes in the order of the standard entry tables: `[f32, f16, bf16, int8, fp8]`
/// (a table may stop early: weights have no 8-bit entries).
pub const STORE_DTYPES: [DType; 5] = [DType::F32, DType::F16, DType::BF16, DType::I8, DType::F8E4M3];

/// The quantized weight dtypes in the order of the quantized entry tables (`matmul_gemv_quant`,
/// `matmul_dequant`, the tail of `embed`).
pub const QUANT_DTYPES: [DType; 10] = crate::backend::reference::weight_quant::QUANT_WEIGHT_DTYPES;

/// The weight dtypes of the MMQ GEMM's entry table (`matmul_mmq`): [`QUANT_DTYPES`] without fp8,
/// which has no integer codes.
pub const MMQ_DTYPES: [DType; 9] = {
    let mut out = [DType::I8Row; 9];
    let mut i = 0;
    while i < 9 {
        out[i] = QUANT_DTYPES[i];
        i += 1;
    }
    out
};

/// The weight dtypes of `matmul_gemv_quant_reg`'s entries.
pub const REG_DTYPES: [DType; 3] = [
    DType::Ggml(crate::backend::reference::ggml_quant::GgmlType::Q4_K),
    DType::Ggml(crate::backend::reference::ggml_quant::GgmlType::Q5_K),
    DType::I8Row,
];

/// The table dtypes of `embed`'s entries: f32, f16, bf16, then [`QUANT_DTYPES`].
pub fn embed_dtypes() -> Vec<DType> {
    let mut v = vec![DType::F32, DType::F16, DType::BF16];
    v.extend(QUANT_DTYPES);
    v
}

/// The out dtypes of the activation ops (rmsnorm, add_rmsnorm, silu_mul), in entry order: f32,
/// the 16-bit types (`Caps::act16_from`), one row of x8 digits (`Caps::act_x8_dtypes`).
pub const ACT_DTYPES: [DType; 4] = [DType::F32, DType::F16, DType::BF16, DType::X8];

/// The entry of a kernel whose entries are `[dtype][variant]` in [`STORE_DTYPES`] order with
/// `per` variants per dtype.
pub fn entry(entries: &'static [&'static str], d: DType, variant: usize, per: usize) -> Result<&'static str> {
    entry_in(entries, &STORE_DTYPES, d, variant, per)
}

/// The entry for weight buffer `w` of a kernel whose entries are `[dtype][variant]` over `dtypes`
/// followed by `[PACKED_DTYPES][variant]` for packed buffers (`CudaBuffer::packed`, packed.rs).
pub fn entry_w(
    entries: &'static [&'static str],
    dtypes: &[DType],
    w: &CudaBuffer,
    variant: usize,
    per: usize,
) -> Result<&'static str> {
    if !w.packed {
        return entry_in(entries, dtypes, w.dtype, variant, per);
    }
    let tail = entries.get(dtypes.len() * per..).unwrap_or_default();
    entry_in(tail, &super::packed::PACKED_DTYPES, w.dtype, variant, per)
}

/// The entry of a kernel whose entries are `[dtype][variant]` over `dtypes` (in that order) with
/// `per` variants per dtype; an error for a dtype or variant the table does not have.
pub fn entry_in(
    entries: &'static [&'static str],
    dtypes: &[DType],
    d: DType,
    variant: usize,
    per: usize,
) -> Result<&'static str> {
    let Some(di) = dtypes.iter().position(|&x| x == d) else {
        return Err(super::context::err(format!("no kernel variant for {d:?} storage")));
    };
    let i = di * per + variant;
    if variant >= per || i >= entries.len() {
        return Err(super::context::err(format!("no kernel variant {variant} for {d:?}")));
    }
    Ok(entries[i])
}
