//! WGSL module assembly. WGSL has no include, so every module is built as
//! `params.wgsl + weight-format snippet + common.wgsl + <op>.wgsl`. The weight-format snippet
//! defines `load_w(i) -> f32` over a `w: array<u32>` binding for the weight dtype of the pipeline
//! (f32 bits, two f16 per word via `unpack2x16float`, or two bf16 per word by shifting), so no
//! shader extension is needed for 16-bit weights. Quantized weight dtypes (GGML blocks, I8Row,
//! F8Row) get shaders/quant_weights.wgsl and a `load_w` that decodes one element, or for the
//! subgroup GEMVs a `w8` that decodes a group of 8 (one sub-block: one scale), or for
//! `matmul_gemv_x8` the format's integer-dot slice `wx8` (shaders/quant_weights_x8*.wgsl: the
//! weights against int8 x). `lserve dump-shaders` writes these assembled
//! modules; a test validates each with naga and translates it to SPIR-V, MSL and HLSL.
//!
//! KV ops ([`Reads::Kv`]) get a KV snippet instead, one module per KV dtype (`<op>_<kv>`, e.g.
//! `sparse_decode_attention_int8`): the pool element types and an f32 accessor per pool binding,
//! so one shader source reads f32, f16, bf16, int8 and fp8 pools (docs/kv-cache.md).
//!
//! Feature variants: ops flagged in [`OPS`] need SUBGROUP (the caller picks them only on adapters
//! that have it and falls back to the plain op otherwise); f16-weight modules have a `_h` variant
//! whose weights binding is f16 storage converted by native f16 types (SHADER_F16, `enable f16;`;
//! naga 30 cannot bitcast u32 to vec2<f16>, gfx-rs/wgpu#8896, so the scalar `load_w` has none). Every module also exists
//! without either feature, so an adapter lacking both runs everything. The cooperative-matrix
//! GEMMs (`matmul_coop*`, [`Reads::Coop`]) and prefill attention (`prefill_attention_coop*`,
//! [`Reads::KvCoop`], 16-bit KV only) exist only with all three features (SHADER_F16,
//! SUBGROUP, EXPERIMENTAL_COOPERATIVE_MATRIX): the caller picks them only where the device
//! has them (context.rs `coop_supported`) and uses the kernels above otherwise.

use crate::backend::DType;

pub const PARAMS: &str = include_str!("../../../shaders/params.wgsl");
pub const COMMON: &str = include_str!("../../../shaders/common.wgsl");

/// How an op reads weights (which weight-format snippet its module gets).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reads {
    /// No weights.
    Nothing,
    /// `load_w(i) -> f32` over a `w: array<u32>` binding.
    Scalar,
    /// The weight binding itself (binding 2) and `w8(i) -> array<vec4<f32>, 2>`, the eight
    /// weights 8i..8i+7 of the flattened matrix (k % 8 == 0). 16-bit weights: one 16-byte word;
    /// with native f16 the binding is `array<mat2x4<f16>>` (f16 storage), else `array<vec4<u32>>`
    /// unpacked by bit operations. Quantized weights: `array<u32>`, one sub-block's group of 8
    /// decoded by `deq8_<fmt>` (no f32 variant: f32 weights use Scalar modules).
    Pairs,
    /// Quantized weights against int8 x (`matmul_gemv_x8`): the weight binding (binding 2,
    /// `array<vec4<u32>>`), shaders/quant_weights_x8.wgsl, `WX8_SLICE` (weights per slice) and
    /// `wx8(r, j, xb) -> f32` (slice j of row r times the x blocks from xb) of the format. Only
    /// formats with an integer form have these modules (no fp8, no float dtypes).
    X8,
    /// The cooperative-matrix GEMMs (`matmul_coop*`, 16-bit and quantized weights only): the
    /// module declares `w: array<u32>`; the snippet gives both `load_w(i) -> f32` and `w8(i)`
    /// over it (16-bit weights: four u32 words per group), `X_BF16` (x is rounded to bf16 first,
    /// for bf16 weights), `W_F16` (f16 weights: exact conversion) and shaders/coop_common.wgsl. The module starts with `enable f16;`
    /// and `enable wgpu_cooperative_matrix;` and needs the SHADER_F16, SUBGROUP and
    /// EXPERIMENTAL_COOPERATIVE_MATRIX features.
    Coop,
    /// The KV cache: the variant's dtype is the KV dtype, and the KV snippet ([`kv_snippet`])
    /// defines `KV_KIND`, the pool element types `KV_EL` / `KV_K4` and an accessor
    /// `kv_<pool>(i) -> f32` per pool binding the op reads; vector pools (`array<KV_K4>`: 16-byte
    /// words for f32 and the 16-bit dtypes, u32 for 8-bit) have `kv4_<pool>(i) -> vec4<f32>`
    /// (i % 4 == 0) and `kv8_<pool>(i) -> array<vec4<f32>, 2>` (i % 8 == 0: one 16-byte load
    /// for 16-bit pools), and no `kv_` where they are 16-bit.
    Kv,
    /// The cooperative-matrix prefill attention (`prefill_attention_coop*`): as [`Reads::Kv`] for
    /// the 16-bit KV dtypes only, whose snippet ([`kv_coop_snippet`]) binds the pools as 16-byte
    /// words (`KV_EL`: `mat2x4<f16>` for f16, `vec4<u32>` for bf16) and gives
    /// `kvh8_<pool>(i) -> mat2x4<f16>`, the 8 values i..i+7 (i % 8 == 0) as f16 (bf16 converted,
    /// saturated at +-65504). Needs the features of [`Reads::Coop`], which it enables.
    KvCoop,
}

/// The KV dtypes shaders can store (f16/bf16 two per u32 word, int8/fp8 four per word plus a
/// scale word per row: docs/kv-cache.md).
pub const KV_DTYPES: [DType; 5] = [DType::F32, DType::F16, DType::BF16, DType::I8, DType::F8E4M3];

/// Pool bindings each KV op reads: (binding name, declared as `array<KV_K4>`).
fn kv_pools(op: &str) -> &'static [(&'static str, bool)] {
    match op {
        "sparse_decode_attention" => &[("k_pool", true), ("v_pool", false)],
        "prefill_attention" => &[("k_pool", false), ("v_pool", false)],
        "lambda_mass" | "rope_append_kv_summary" => &[("k_pool", false)],
        "antidiagonal_score" => &[("k_pool", true)],
        _ => &[],
    }
}

/// The KV snippet of `op` for KV dtype `d`: element types, accessors that return f32 values
/// (16-bit unpacked; 8-bit codes times their row's scale, one multiply, so every backend reads
/// the same values) at float-pool element offset `i` (= row * head_dim + dim; 8-bit pools map
/// it to the row's block, see src/backend/reference/kv_quant.rs). Reads `p.head_dim` and `p.page_size`.
fn kv_snippet(op: &str, d: DType) -> Option<String> {
    let kind = match d {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::BF16 => 2,
        DType::I8 => 3,
        DType::F8E4M3 => 4,
        _ => return None,
    };
    let mut out = format!("const KV_KIND: u32 = {kind}u;\n");
    out += match d {
        DType::F32 => "alias KV_EL = f32;\nalias KV_K4 = vec4<f32>;\n",
        // 16-bit vector pools are 16-byte words (8 values): kv8 is one load.
        DType::F16 | DType::BF16 => "alias KV_EL = u32;\nalias KV_K4 = vec4<u32>;\n",
        _ => "alias KV_EL = u32;\nalias KV_K4 = u32;\n",
    };
    if d.is_kv8() {
        out += concat!(
            "fn kv8_code_byte(i: u32) -> u32 { let hd = p.head_dim; let ps = p.page_size; let r = i / hd; ",
            "return (r / ps) * ps * (hd + 4u) + (r % ps) * hd + i % hd; }\n",
            "fn kv8_scale_word(i: u32) -> u32 { let hd = p.head_dim; let ps = p.page_size; let r = i / hd; ",
            "return ((r / ps) * ps * (hd + 4u) + ps * hd + 4u * (r % ps)) / 4u; }\n",
        );
        if d == DType::I8 {
            out += "fn kv8_val(b: u32) -> f32 { return f32(bitcast<i32>(b << 24u) >> 24u); }\n";
        } else {
            out += concat!(
                "fn kv8_val(b: u32) -> f32 { let e = (b >> 3u) & 15u; let m = b & 7u; ",
                "let v = select(bitcast<f32>(((e + 120u) << 23u) | (m << 20u)), f32(m) * 0.001953125, e == 0u); ",
                "return select(v, -v, (b & 0x80u) != 0u); }\n",
            );
        }
        out += "fn kv8_val4(w: u32) -> vec4<f32> { return vec4(kv8_val(w & 0xffu), kv8_val((w >> 8u) & 0xffu), kv8_val((w >> 16u) & 0xffu), kv8_val(w >> 24u)); }\n";
    }
    for &(n, vec4) in kv_pools(op) {
        out += &match (d, vec4) {
            (DType::F32, true) => format!(
                "fn kv4_{n}(i: u32) -> vec4<f32> {{ return {n}[i / 4u]; }}\nfn kv_{n}(i: u32) -> f32 {{ return {n}[i / 4u][i % 4u]; }}\n"
            ),
            (DType::F32, false) => format!("fn kv_{n}(i: u32) -> f32 {{ return {n}[i]; }}\n"),
            // kv4 (i % 4 == 0) takes half a word; kv8 needs i % 8 == 0 (the whole word).
            (DType::F16, true) => format!(
                "fn kv4_{n}(i: u32) -> vec4<f32> {{ let w = {n}[i >> 3u]; let h = select(w.xy, w.zw, (i & 4u) != 0u); \
                 return vec4(unpack2x16float(h.x), unpack2x16float(h.y)); }}\n\
                 fn kv8_{n}(i: u32) -> array<vec4<f32>, 2> {{ let w = {n}[i >> 3u]; \
                 return array(vec4(unpack2x16float(w.x), unpack2x16float(w.y)), vec4(unpack2x16float(w.z), unpack2x16float(w.w))); }}\n"
            ),
            (DType::BF16, true) => format!(
                "fn kv_bf4_{n}(a: u32, b: u32) -> vec4<f32> {{ return bitcast<vec4<f32>>(vec4(a << 16u, a & 0xffff0000u, b << 16u, b & 0xffff0000u)); }}\n\
                 fn kv4_{n}(i: u32) -> vec4<f32> {{ let w = {n}[i >> 3u]; let h = select(w.xy, w.zw, (i & 4u) != 0u); return kv_bf4_{n}(h.x, h.y); }}\n\
                 fn kv8_{n}(i: u32) -> array<vec4<f32>, 2> {{ let w = {n}[i >> 3u]; return array(kv_bf4_{n}(w.x, w.y), kv_bf4_{n}(w.z, w.w)); }}\n"
            ),
            (DType::F16, _) => format!(
                "fn kv_{n}(i: u32) -> f32 {{ return unpack2x16float({n}[i >> 1u])[i & 1u]; }}\n\
                 fn kv4_{n}(i: u32) -> vec4<f32> {{ return vec4(unpack2x16float({n}[i >> 1u]), unpack2x16float({n}[(i >> 1u) + 1u])); }}\n"
            ),
            (DType::BF16, _) => format!(
                "fn kv_{n}(i: u32) -> f32 {{ let w = {n}[i >> 1u]; return bitcast<f32>(select(w << 16u, w & 0xffff0000u, (i & 1u) == 1u)); }}\n\
                 fn kv4_{n}(i: u32) -> vec4<f32> {{ let a = {n}[i >> 1u]; let b = {n}[(i >> 1u) + 1u]; \
                 return bitcast<vec4<f32>>(vec4(a << 16u, a & 0xffff0000u, b << 16u, b & 0xffff0000u)); }}\n"
            ),
            _ => format!(
                "fn kv_{n}(i: u32) -> f32 {{ let c = kv8_code_byte(i); \
                 return kv8_val(({n}[c >> 2u] >> ((c & 3u) * 8u)) & 0xffu) * bitcast<f32>({n}[kv8_scale_word(i)]); }}\n\
                 fn kv4_{n}(i: u32) -> vec4<f32> {{ return kv8_val4({n}[kv8_code_byte(i) >> 2u]) * bitcast<f32>({n}[kv8_scale_word(i)]); }}\n"
            ),
        };
        // Vector pools of the other dtypes: kv8 is two kv4 (sparse_decode_attention, the one op
        // with a vector pool, takes its kv8 path for 16-bit pools only; the others need the name).
        if vec4 && !matches!(d, DType::F16 | DType::BF16) {
            out += &format!(
                "fn kv8_{n}(i: u32) -> array<vec4<f32>, 2> {{ return array(kv4_{n}(i), kv4_{n}(i + 4u)); }}\n"
            );
        }
    }
    Some(out)
}

/// The source of the batched subgroup GEMV variants (their constants are prepended in [`OPS`]).
macro_rules! gemv_batch_src {
    () => {
        include_str!("../../../shaders/matmul_gemv_subgroup_batch.wgsl")
    };
}

/// The body the row norms share (`rmsnorm`, `add_rmsnorm`, `head_rmsnorm`: each op's shader
/// declares its bindings and the hooks the body calls).
macro_rules! norm_body {
    () => {
        include_str!("../../../shaders/row_norm.wgsl")
    };
}

/// The quantizer of x8 digits (shaders/x8_store.wgsl: `x8_store`, over the module's `x8_put`),
/// part of `matmul_gemv_x8_pack` and of the ops that write a [`DType::X8`] out.
macro_rules! x8_store {
    () => {
        include_str!("../../../shaders/x8_store.wgsl")
    };
}

/// `matmul_gemv_x8_rope` for one 16-bit KV type (`KV_KIND` 1 = f16, 2 = bf16): the GEMV row of
/// shaders/gemv_x8_row.wgsl, the rotation and stores of shaders/rope16_quad.wgsl (rope_append_kv16's).
macro_rules! gemv_rope_src {
    ($kind:literal) => {
        concat!(
            "const KV_KIND: u32 = ",
            $kind,
            ";\n",
            include_str!("../../../shaders/matmul_gemv_x8_rope.wgsl"),
            include_str!("../../../shaders/gemv_x8_row.wgsl"),
            include_str!("../../../shaders/rope16_quad.wgsl"),
            include_str!("../../../shaders/rope_sincos.wgsl"),
            include_str!("../../../shaders/kv_round16.wgsl")
        )
    };
}

/// The row norms (`rmsnorm`, `add_rmsnorm`, `head_rmsnorm`): the op's hooks, the workgroup sum
/// and the f32 body (shaders/row_norm.wgsl); `_x8` (`rmsnorm_x8`, `add_rmsnorm_x8`): the same
/// hooks with the X8 body (shaders/row_norm_x8.wgsl) and the quantizer.
macro_rules! norm_src {
    ($op:literal) => {
        concat!(
            include_str!(concat!("../../../shaders/", $op, ".wgsl")),
            include_str!("../../../shaders/row_sum.wgsl"),
            norm_body!()
        )
    };
    ($op:literal, x8) => {
        concat!(
            include_str!(concat!("../../../shaders/", $op, ".wgsl")),
            include_str!("../../../shaders/row_sum.wgsl"),
            include_str!("../../../shaders/row_norm_x8.wgsl"),
            x8_store!()
        )
    };
}

/// A pass of `page_select` (shaders/<name>.wgsl) with the row-candidate helpers it shares.
macro_rules! select_src {
    ($name:literal) => {
        concat!(
            include_str!(concat!("../../../shaders/", $name, ".wgsl")),
            include_str!("../../../shaders/select_units.wgsl")
        )
    };
}

/// `sparse_decode_attention_merge` and its `_x8` variant (`X8_OUT`).
macro_rules! merge_src {
    ($x8:literal) => {
        concat!(
            "const X8_OUT: bool = ",
            $x8,
            ";\n",
            include_str!("../../../shaders/sparse_decode_attention_merge.wgsl"),
            x8_store!()
        )
    };
}

/// The KV snippet of the cooperative-matrix prefill ([`Reads::KvCoop`]) for KV dtype `d` (None
/// for the dtypes it does not take).
fn kv_coop_snippet(d: DType) -> Option<String> {
    let s = match d {
        DType::F16 => concat!(
            "alias KV_EL = mat2x4<f16>;\n",
            "fn kvh8_k_pool(i: u32) -> mat2x4<f16> { return k_pool[i >> 3u]; }\n",
            "fn kvh8_v_pool(i: u32) -> mat2x4<f16> { return v_pool[i >> 3u]; }\n",
        ),
        DType::BF16 => concat!(
            "alias KV_EL = vec4<u32>;\n",
            "fn kv_bf_h2(w: u32) -> vec2<f16> { return vec2<f16>(clamp(bitcast<vec2<f32>>(vec2(w << 16u, w & 0xffff0000u)), ",
            "vec2<f32>(-65504.0), vec2<f32>(65504.0))); }\n",
            "fn kv_bf_h8(w: vec4<u32>) -> mat2x4<f16> { return mat2x4<f16>(vec4<f16>(kv_bf_h2(w.x), kv_bf_h2(w.y)), ",
            "vec4<f16>(kv_bf_h2(w.z), kv_bf_h2(w.w))); }\n",
            "fn kvh8_k_pool(i: u32) -> mat2x4<f16> { return kv_bf_h8(k_pool[i >> 3u]); }\n",
            "fn kvh8_v_pool(i: u32) -> mat2x4<f16> { return kv_bf_h8(v_pool[i >> 3u]); }\n",
        ),
        _ => return None,
    };
    Some(s.to_string())
}

/// (op stem, source, weight access, needs the SUBGROUP feature; [`Reads::Coop`] and
/// [`Reads::KvCoop`] ops also need SHADER_F16 and EXPERIMENTAL_COOPERATIVE_MATRIX).
pub const OPS: &[(&str, &str, Reads, bool)] = &[
    ("embed", include_str!("../../../shaders/embed.wgsl"), Reads::Scalar, false),
    ("matmul", include_str!("../../../shaders/matmul.wgsl"), Reads::Scalar, false),
    ("matmul_m32", include_str!("../../../shaders/matmul_m32.wgsl"), Reads::Scalar, false),
    ("matmul_gemv", include_str!("../../../shaders/matmul_gemv.wgsl"), Reads::Scalar, false),
    ("matmul_gemv_subgroup", include_str!("../../../shaders/matmul_gemv_subgroup.wgsl"), Reads::Pairs, true),
    // One source, two variants (ops_matmul.rs `gemv_batch`; the constants are described in the
    // shader's header): `_cu1` for m >= 5, the plain kernel for 2..=4.
    (
        "matmul_gemv_subgroup_batch",
        concat!(
            "const NR: u32 = 4u;\nconst KS: u32 = 8u;\nconst CLAMP: bool = false;\nconst U: u32 = 2u;\n",
            gemv_batch_src!()
        ),
        Reads::Pairs,
        true,
    ),
    (
        "matmul_gemv_subgroup_batch_cu1",
        concat!(
            "const NR: u32 = 4u;\nconst KS: u32 = 8u;\nconst CLAMP: bool = true;\nconst U: u32 = 1u;\n",
            gemv_batch_src!()
        ),
        Reads::Pairs,
        true,
    ),
    // The tensor-core GEMMs; matmul_coop stages x from f32, with its loader (shaders/coop_x.wgsl).
    (
        "matmul_coop",
        concat!(include_str!("../../../shaders/coop_x.wgsl"), include_str!("../../../shaders/matmul_coop.wgsl")),
        Reads::Coop,
        true,
    ),
    (
        "matmul_coop_128",
        concat!(
            "const NSG: u32 = 8u;\nconst BK: u32 = 64u;\nconst STAGES: u32 = 1u;\n",
            "const SX_LEN: u32 = 2304u;\nconst SW_LEN: u32 = 2304u;\n",
            include_str!("../../../shaders/matmul_coop_128.wgsl")
        ),
        Reads::Coop,
        true,
    ),
    // Pass 1 of matmul_coop_128, x to f16 once (to bf16 first for bf16 weights: the `_bf16`
    // variant); f32 arithmetic and pack2x16float only, so no feature is needed.
    (
        "matmul_coop_x16",
        concat!(
            "const X_BF16: bool = false;\n",
            include_str!("../../../shaders/coop_round.wgsl"),
            include_str!("../../../shaders/matmul_coop_x16.wgsl")
        ),
        Reads::Nothing,
        false,
    ),
    (
        "matmul_coop_x16_bf16",
        concat!(
            "const X_BF16: bool = true;\n",
            include_str!("../../../shaders/coop_round.wgsl"),
            include_str!("../../../shaders/matmul_coop_x16.wgsl")
        ),
        Reads::Nothing,
        false,
    ),
    (
        "matmul_gemv_x8",
        concat!(
            include_str!("../../../shaders/matmul_gemv_x8.wgsl"),
            include_str!("../../../shaders/gemv_x8_row.wgsl")
        ),
        Reads::X8,
        true,
    ),
    // The q|k|v GEMV with rope_append_kv16 in its epilogue, per 16-bit KV type (ops_fused.rs).
    ("matmul_gemv_x8_rope", gemv_rope_src!("1u"), Reads::X8, true),
    ("matmul_gemv_x8_rope_bf16", gemv_rope_src!("2u"), Reads::X8, true),
    // The gate|up GEMV with silu_mul_x8 in its epilogue (ops_fused.rs).
    (
        "matmul_gemv_x8_silu_mul",
        concat!(
            include_str!("../../../shaders/matmul_gemv_x8_silu_mul.wgsl"),
            include_str!("../../../shaders/gemv_x8_row.wgsl"),
            x8_store!()
        ),
        Reads::X8,
        true,
    ),
    (
        "matmul_gemv_x8_pack",
        concat!(include_str!("../../../shaders/matmul_gemv_x8_pack.wgsl"), x8_store!()),
        Reads::Nothing,
        false,
    ),
    ("rmsnorm", norm_src!("rmsnorm"), Reads::Nothing, false),
    ("rmsnorm_x8", norm_src!("rmsnorm", x8), Reads::Nothing, false),
    ("add_rmsnorm", norm_src!("add_rmsnorm"), Reads::Nothing, false),
    ("add_rmsnorm_x8", norm_src!("add_rmsnorm", x8), Reads::Nothing, false),
    ("add", include_str!("../../../shaders/add.wgsl"), Reads::Nothing, false),
    ("silu_mul", include_str!("../../../shaders/silu_mul.wgsl"), Reads::Nothing, false),
    ("silu_mul_x8", concat!(include_str!("../../../shaders/silu_mul_x8.wgsl"), x8_store!()), Reads::Nothing, false),
    ("gelu_tanh_mul", include_str!("../../../shaders/gelu_tanh_mul.wgsl"), Reads::Nothing, false),
    ("head_rmsnorm", norm_src!("head_rmsnorm"), Reads::Nothing, false),
    ("scale", include_str!("../../../shaders/scale.wgsl"), Reads::Nothing, false),
    ("gather_rows", include_str!("../../../shaders/gather_rows.wgsl"), Reads::Nothing, false),
    ("mean_rows", include_str!("../../../shaders/mean_rows.wgsl"), Reads::Nothing, false),
    (
        "argmax_part",
        concat!(include_str!("../../../shaders/argmax_best.wgsl"), include_str!("../../../shaders/argmax_part.wgsl")),
        Reads::Nothing,
        false,
    ),
    (
        "argmax",
        concat!(include_str!("../../../shaders/argmax_best.wgsl"), include_str!("../../../shaders/argmax.wgsl")),
        Reads::Nothing,
        false,
    ),
    ("sample", include_str!("../../../shaders/sample.wgsl"), Reads::Nothing, false),
    (
        "rope_append_kv",
        concat!(
            include_str!("../../../shaders/rope_append_kv.wgsl"),
            include_str!("../../../shaders/rope_sincos.wgsl")
        ),
        Reads::Nothing,
        false,
    ),
    // rope_append_kv in one pass for the 16-bit pools (modules for f16 and bf16 only).
    (
        "rope_append_kv16",
        concat!(
            include_str!("../../../shaders/rope_append_kv16.wgsl"),
            include_str!("../../../shaders/rope16_quad.wgsl"),
            include_str!("../../../shaders/rope_sincos.wgsl"),
            include_str!("../../../shaders/kv_round16.wgsl")
        ),
        Reads::Kv,
        false,
    ),
    (
        "rope_append_kv_pack",
        concat!(
            include_str!("../../../shaders/rope_append_kv_pack.wgsl"),
            include_str!("../../../shaders/kv_round16.wgsl")
        ),
        Reads::Kv,
        false,
    ),
    ("rope_append_kv_summary", include_str!("../../../shaders/rope_append_kv_summary.wgsl"), Reads::Kv, false),
    ("prefill_attention", include_str!("../../../shaders/prefill_attention.wgsl"), Reads::Kv, false),
    // One source, two head dims (ops_attention.rs `coop_prefill`).
    (
        "prefill_attention_coop_d128",
        concat!("const HD: u32 = 128u;\n", include_str!("../../../shaders/prefill_attention_coop.wgsl")),
        Reads::KvCoop,
        true,
    ),
    (
        "prefill_attention_coop_d64",
        concat!("const HD: u32 = 64u;\n", include_str!("../../../shaders/prefill_attention_coop.wgsl")),
        Reads::KvCoop,
        true,
    ),
    (
        "sparse_decode_attention",
        concat!(
            include_str!("../../../shaders/sparse_decode_attention.wgsl"),
            include_str!("../../../shaders/decode_key_list.wgsl")
        ),
        Reads::Kv,
        false,
    ),
    // The latency-bound variant for 16-bit pools (modules for f16 and bf16 only); `assemble`
    // appends its chunk loop once per head kind ([`kv16_runs`]).
    (
        "sparse_decode_attention_kv16",
        concat!(
            include_str!("../../../shaders/sparse_decode_attention_kv16.wgsl"),
            include_str!("../../../shaders/decode_key_list.wgsl")
        ),
        Reads::Kv,
        false,
    ),
    ("sparse_decode_attention_merge", merge_src!("false"), Reads::Nothing, false),
    ("sparse_decode_attention_merge_x8", merge_src!("true"), Reads::Nothing, false),
    ("page_select", select_src!("page_select"), Reads::Nothing, false),
    ("page_select_norm", select_src!("page_select_norm"), Reads::Nothing, false),
    ("page_select_topk", select_src!("page_select_topk"), Reads::Nothing, false),
    ("lambda_mass", include_str!("../../../shaders/lambda_mass.wgsl"), Reads::Kv, false),
    ("antidiagonal_score", include_str!("../../../shaders/antidiagonal_score.wgsl"), Reads::Kv, false),
    ("page_top_k", include_str!("../../../shaders/page_top_k.wgsl"), Reads::Nothing, false),
    ("fill_random", include_str!("../../../shaders/fill_random.wgsl"), Reads::Nothing, false),
];

/// The decoders of the quantized weight formats (`deq1_<fmt>`, `deq8_<fmt>`), part of every module
/// of a quantized weight dtype.
pub const QUANT_WEIGHTS: &str = include_str!("../../../shaders/quant_weights.wgsl");

/// The f16 rounding and staging helpers of the cooperative-matrix GEMMs (`round_f16`, `to_f16`,
/// `w_group`, `w_group16`; the f32-x GEMMs add shaders/coop_x.wgsl's `x_group`).
pub const COOP_COMMON: &str =
    concat!(include_str!("../../../shaders/coop_round.wgsl"), include_str!("../../../shaders/coop_common.wgsl"));

/// The int8-x slice functions of the quantized weight formats (`wx8_<fmt>`, `WX8_SLICE_<FMT>`),
/// part of the `matmul_gemv_x8` modules (weights bound as 16-byte words).
pub const QUANT_WEIGHTS_X8: &str = include_str!("../../../shaders/quant_weights_x8.wgsl");

/// Whether `matmul_gemv_x8` has a module for weight dtype `d` (the quantized formats with an
/// integer form: every GGML type and int8 rows; fp8 codes are not integers).
pub fn has_x8(d: DType) -> bool {
    d.is_weight_quant() && d != DType::F8Row && WEIGHT_DTYPES.contains(&d)
}

/// The weight dtypes shaders can read: the float types, the eight GGML block types of
/// [`GGML_WEIGHT_TYPES`](crate::backend::reference::weight_quant::GGML_WEIGHT_TYPES) and the
/// row-scaled 8-bit types.
pub const WEIGHT_DTYPES: [DType; 13] = {
    let quant = crate::backend::reference::weight_quant::QUANT_WEIGHT_DTYPES;
    let mut out = [DType::F32; 13];
    (out[0], out[1]) = (DType::F16, DType::BF16);
    let mut i = 0;
    while i < quant.len() {
        out[3 + i] = quant[i];
        i += 1;
    }
    out
};

/// The snippet of a quantized weight dtype: the format decoders, then `load_w(i)` (element i of
/// the `[w_rows()][w_cols()]` matrix, decoded alone) for Scalar modules, or the weight binding
/// and `w8(i)` (8-element group i = row * cols / 8 + j) for Pairs modules.
fn quant_snippet(reads: Reads, d: DType) -> Option<String> {
    if !d.is_weight_quant() || !WEIGHT_DTYPES.contains(&d) {
        return None;
    }
    let f = d.weight_name();
    Some(match reads {
        Reads::Scalar => format!(
            "{QUANT_WEIGHTS}\nfn load_w(i: u32) -> f32 {{ let k = w_cols(); let r = i / k; return deq1_{f}(r, i - r * k); }}\n"
        ),
        Reads::Pairs => format!(
            "@group(0) @binding(2) var<storage, read> w: array<u32>;\n{QUANT_WEIGHTS}\n\
             fn w8(i: u32) -> array<vec4<f32>, 2> {{ let g = w_cols() / 8u; let r = i / g; return deq8_{f}(r, i - r * g); }}\n"
        ),
        Reads::Coop => format!(
            "@group(0) @binding(2) var<storage, read> w: array<u32>;\n\
             {QUANT_WEIGHTS}\nconst X_BF16: bool = false;\nconst W_F16: bool = false;\n\
             fn load_w(i: u32) -> f32 {{ let k = w_cols(); let r = i / k; return deq1_{f}(r, i - r * k); }}\n\
             fn w8(i: u32) -> array<vec4<f32>, 2> {{ let g = w_cols() / 8u; let r = i / g; return deq8_{f}(r, i - r * g); }}\n\
             fn wh8(i: u32) -> mat2x4<f16> {{ let v = w8(i); return mat2x4<f16>(w16x4(v[0]), w16x4(v[1])); }}\n\
             {COOP_COMMON}\n"
        ),
        Reads::X8 if has_x8(d) => format!(
            "@group(0) @binding(2) var<storage, read> w: array<vec4<u32>>;\n{QUANT_WEIGHTS_X8}\n\
             const WX8_SLICE: u32 = WX8_SLICE_{F};\n\
             fn wx8(r: u32, j: u32, xb: u32) -> f32 {{ return wx8_{f}(r, j, xb); }}\n",
            F = f.to_uppercase()
        ),
        _ => return None,
    })
}

/// Which pipeline of an op: the weight dtype it reads (the KV dtype for [`Reads::Kv`] ops) and
/// whether f16 weights are converted with native f16 types (the SHADER_F16 feature) instead of
/// `unpack2x16float`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Variant {
    pub weights: Option<DType>,
    pub native_f16: bool,
}

impl Variant {
    pub fn weights(d: DType) -> Self {
        Variant { weights: Some(d), native_f16: false }
    }
    /// Whether the module uses the f16 extension (only f16 weights have a native variant).
    fn uses_f16(self) -> bool {
        self.native_f16 && self.weights == Some(DType::F16)
    }
    /// The variant `reads` actually has (only Pairs modules load f16 natively).
    fn for_reads(self, reads: Reads) -> Self {
        Variant { native_f16: self.native_f16 && reads == Reads::Pairs, ..self }
    }
}

fn weight_snippet(reads: Reads, v: Variant) -> Option<String> {
    let d = v.weights?;
    if d.is_weight_quant() {
        return quant_snippet(reads, d);
    }
    let s: &str = match (reads, d, v.uses_f16()) {
        (Reads::Scalar, DType::F16, _) => {
            "fn load_w(i: u32) -> f32 { let p = unpack2x16float(w[i >> 1u]); return select(p.x, p.y, (i & 1u) == 1u); }\n"
        }
        (Reads::Scalar, DType::BF16, _) => {
            "fn load_w(i: u32) -> f32 { let v = w[i >> 1u]; return bitcast<f32>(select(v << 16u, v & 0xffff0000u, (i & 1u) == 1u)); }\n"
        }
        (Reads::Scalar, _, _) => "fn load_w(i: u32) -> f32 { return bitcast<f32>(w[i]); }\n",
        // Pairs modules get their weight binding (binding 2) from the snippet, as 16-byte words.
        (Reads::Pairs, DType::F16, false) => concat!(
            "@group(0) @binding(2) var<storage, read> w: array<vec4<u32>>;\n",
            "fn w8(i: u32) -> array<vec4<f32>, 2> { let q = w[i]; return array<vec4<f32>, 2>(",
            "vec4<f32>(unpack2x16float(q.x), unpack2x16float(q.y)), vec4<f32>(unpack2x16float(q.z), unpack2x16float(q.w))); }\n"
        ),
        (Reads::Pairs, DType::F16, true) => concat!(
            "@group(0) @binding(2) var<storage, read> w: array<mat2x4<f16>>;\n",
            "fn w8(i: u32) -> array<vec4<f32>, 2> { let q = w[i]; return array<vec4<f32>, 2>(vec4<f32>(q[0]), vec4<f32>(q[1])); }\n"
        ),
        (Reads::Pairs, DType::BF16, _) => concat!(
            "@group(0) @binding(2) var<storage, read> w: array<vec4<u32>>;\n",
            "fn bf2(v: u32) -> vec2<f32> { return vec2<f32>(bitcast<f32>(v << 16u), bitcast<f32>(v & 0xffff0000u)); }\n",
            "fn w8(i: u32) -> array<vec4<f32>, 2> { let q = w[i]; return array<vec4<f32>, 2>(",
            "vec4<f32>(bf2(q.x), bf2(q.y)), vec4<f32>(bf2(q.z), bf2(q.w))); }\n"
        ),
        (Reads::Coop, DType::F16, _) => {
            // f16 weights as 16-byte words of 8 native f16 (SHADER_F16 storage): wh8 hands them
            // to the GEMM as stored.
            return Some(format!(
                "@group(0) @binding(2) var<storage, read> w: array<mat2x4<f16>>;\n\
                 const X_BF16: bool = false;\nconst W_F16: bool = true;\n\
                 fn load_w(i: u32) -> f32 {{ return f32(w[i / 8u][(i / 4u) % 2u][i % 4u]); }}\n\
                 fn w8(i: u32) -> array<vec4<f32>, 2> {{ let q = w[i]; return array<vec4<f32>, 2>(vec4<f32>(q[0]), vec4<f32>(q[1])); }}\n\
                 fn wh8(i: u32) -> mat2x4<f16> {{ return w[i]; }}\n\
                 {COOP_COMMON}\n"
            ));
        }
        (Reads::Coop, DType::BF16, _) => {
            return Some(format!(
                "@group(0) @binding(2) var<storage, read> w: array<u32>;\n\
                 const X_BF16: bool = true;\nconst W_F16: bool = false;\n\
                 fn load_w(i: u32) -> f32 {{ let v = w[i >> 1u]; return bitcast<f32>(select(v << 16u, v & 0xffff0000u, (i & 1u) == 1u)); }}\n\
                 fn bf2(v: u32) -> vec2<f32> {{ return vec2<f32>(bitcast<f32>(v << 16u), bitcast<f32>(v & 0xffff0000u)); }}\n\
                 fn w8(i: u32) -> array<vec4<f32>, 2> {{ let b = 4u * i; return array<vec4<f32>, 2>(\
                 vec4<f32>(bf2(w[b]), bf2(w[b + 1u])), vec4<f32>(bf2(w[b + 2u]), bf2(w[b + 3u]))); }}\n\
                 fn wh8(i: u32) -> mat2x4<f16> {{ let v = w8(i); return mat2x4<f16>(w16x4(v[0]), w16x4(v[1])); }}\n\
                 {COOP_COMMON}\n"
            ));
        }
        _ => return None,
    };
    Some(s.to_string())
}

/// Name of a pipeline: the op stem, plus the weight dtype for ops that read weights, plus `_h` for
/// native f16 conversion.
pub fn module_name(op: &str, v: Variant) -> String {
    let v = OPS.iter().find(|(name, ..)| *name == op).map_or(v, |&(_, _, r, _)| v.for_reads(r));
    let kv = OPS.iter().any(|&(name, _, r, _)| name == op && matches!(r, Reads::Kv | Reads::KvCoop));
    match v.weights {
        Some(d) if kv => format!("{op}_{}", d.kv_name()),
        Some(d) => format!("{op}_{}{}", d.weight_name(), if v.uses_f16() { "_h" } else { "" }),
        None => op.to_string(),
    }
}

/// Whether `op` needs the SUBGROUP feature.
pub fn needs_subgroup(op: &str) -> bool {
    OPS.iter().any(|&(name, _, _, sg)| name == op && sg)
}

/// Whether `op` is a cooperative-matrix kernel ([`Reads::Coop`], [`Reads::KvCoop`]: needs
/// SHADER_F16 and EXPERIMENTAL_COOPERATIVE_MATRIX too).
pub fn needs_coop(op: &str) -> bool {
    OPS.iter().any(|&(name, _, r, _)| name == op && matches!(r, Reads::Coop | Reads::KvCoop))
}

/// The assembled source of one module (None for an unknown op or a variant it lacks).
pub fn assemble(op: &str, v: Variant) -> Option<String> {
    let &(_, src, reads, _) = OPS.iter().find(|(name, ..)| *name == op)?;
    let v = v.for_reads(reads);
    let snippet = match reads {
        Reads::Nothing if v.weights.is_none() => String::new(),
        Reads::Nothing => return None,
        // The store pass exists for the packed KV dtypes only.
        Reads::Kv if op == "rope_append_kv_pack" && v.weights == Some(DType::F32) => return None,
        Reads::Kv
            if matches!(op, "rope_append_kv16" | "sparse_decode_attention_kv16")
                && !matches!(v.weights, Some(DType::F16 | DType::BF16)) =>
        {
            return None;
        }
        Reads::Kv => kv_snippet(op, v.weights?)?,
        Reads::KvCoop => kv_coop_snippet(v.weights?)?,
        r => weight_snippet(r, v)?,
    };
    let enable = match (reads, v.uses_f16()) {
        (Reads::Coop | Reads::KvCoop, _) => "enable f16;\nenable wgpu_cooperative_matrix;\n",
        (_, true) => "enable f16;\n",
        _ => "",
    };
    let runs = if op == "sparse_decode_attention_kv16" { kv16_runs() } else { String::new() };
    let cut = if op == "sparse_decode_attention_kv16" {
        format!("const CUT: u32 = {}u;\nconst GMAX: u32 = {}u;\n", kv16_cut(), kv16_heads())
    } else {
        String::new()
    };
    let src = format!("{cut}{src}");
    Some(format!("{enable}{PARAMS}\n{snippet}\n{COMMON}\n{src}{runs}"))
}

/// One module the backend can build, and the adapter features it needs.
pub struct Module {
    pub name: String,
    pub source: String,
    pub needs_f16: bool,
    pub needs_subgroup: bool,
    /// A cooperative-matrix module (`enable wgpu_cooperative_matrix;`): Vulkan only (16x16
    /// fragments; naga's MSL and HLSL writers have none), with SHADER_F16 and SUBGROUP.
    pub needs_coop: bool,
}

/// Every module the backend can build.
pub fn all_modules() -> Vec<Module> {
    let mut out = vec![];
    for &(op, _, reads, subgroup) in OPS {
        let variants: Vec<Variant> = match reads {
            Reads::Nothing => vec![Variant::default()],
            Reads::Kv | Reads::KvCoop => KV_DTYPES.iter().map(|&d| Variant::weights(d)).collect(),
            _ => WEIGHT_DTYPES
                .iter()
                .flat_map(|&d| [Variant::weights(d), Variant { weights: Some(d), native_f16: true }])
                .filter(|v| !v.native_f16 || v.for_reads(reads).uses_f16())
                .collect(),
        };
        for v in variants {
            if let Some(source) = assemble(op, v) {
                let needs_coop = matches!(reads, Reads::Coop | Reads::KvCoop);
                let needs_f16 = needs_coop || v.for_reads(reads).uses_f16();
                out.push(Module { name: module_name(op, v), source, needs_f16, needs_subgroup: subgroup, needs_coop });
            }
        }
    }
    out
}

/// The chunk loop of `sparse_decode_attention_kv16` (shaders/sparse_decode_attention_kv16_run.wgsl)
/// once per head kind: `run_ret` over the retrieval pools, `run_str` over the streaming ones.
fn kv16_runs() -> String {
    let src = include_str!("../../../shaders/sparse_decode_attention_kv16_run.wgsl");
    [("ret", "k_pool", "v_pool"), ("str", "sk_pool", "sv_pool")]
        .iter()
        .map(|(kind, k, v)| format!("\n{}", src.replace("KIND", kind).replace("K_POOL", k).replace("V_POOL", v)))
        .collect()
}

/// `LSERVE_WGPU_KV16_CUT` (1..=5; any other value or none: 0): where `sparse_decode_attention_kv16`
/// ends early, for timing its phases (measurement only: the results are wrong; announced on
/// stderr; the shader's header lists the phases).
fn kv16_cut() -> u32 {
    static CUT: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *CUT.get_or_init(|| {
        let n = std::env::var("LSERVE_WGPU_KV16_CUT").ok().and_then(|v| v.parse().ok()).filter(|n| (1..=5).contains(n));
        if let Some(n) = n {
            eprintln!("LSERVE_WGPU_KV16_CUT={n}: sparse_decode_attention_kv16 ends early: results are wrong (timing ablation only)");
        }
        n.unwrap_or(0)
    })
}

/// Query heads of one KV head a `sparse_decode_attention_kv16` workgroup takes (`GMAX` in the
/// shader): 4 (larger GQA groups take more workgroups, which re-read K/V from L2), or 8 with
/// `LSERVE_WGPU_KV16_GMAX=8` for measuring. 4 measured faster on the H200 (docs/benchmarks.md,
/// session 22: the P.V accumulators of heads 4-7 and their stores fold away).
pub fn kv16_heads() -> usize {
    static G: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *G.get_or_init(|| if std::env::var("LSERVE_WGPU_KV16_GMAX").as_deref() == Ok("8") { 8 } else { 4 })
}
