//! WGSL module assembly. WGSL has no include, so every module is built as
//! `params.wgsl + weight-format snippet + common.wgsl + <op>.wgsl`. The weight-format snippet
//! defines `load_w(i) -> f32` over a `w: array<u32>` binding for the weight dtype of the pipeline
//! (f32 bits, two f16 per word via `unpack2x16float`, or two bf16 per word by shifting), so no
//! shader extension is needed for 16-bit weights. `lserve dump-shaders` writes these assembled
//! modules; a test validates each with naga and translates it to SPIR-V, MSL and HLSL.

use crate::backend::DType;

pub const PARAMS: &str = include_str!("../../../shaders/params.wgsl");
pub const COMMON: &str = include_str!("../../../shaders/common.wgsl");

/// (op stem, source, reads weights).
pub const OPS: &[(&str, &str, bool)] = &[
    ("embed", include_str!("../../../shaders/embed.wgsl"), true),
    ("matmul", include_str!("../../../shaders/matmul.wgsl"), true),
    ("matmul_gemv", include_str!("../../../shaders/matmul_gemv.wgsl"), true),
    ("rmsnorm", include_str!("../../../shaders/rmsnorm.wgsl"), false),
    ("add_rmsnorm", include_str!("../../../shaders/add_rmsnorm.wgsl"), false),
    ("add", include_str!("../../../shaders/add.wgsl"), false),
    ("silu_mul", include_str!("../../../shaders/silu_mul.wgsl"), false),
    ("gather_rows", include_str!("../../../shaders/gather_rows.wgsl"), false),
    ("argmax", include_str!("../../../shaders/argmax.wgsl"), false),
    ("rope_append_kv", include_str!("../../../shaders/rope_append_kv.wgsl"), false),
    ("rope_append_kv_summary", include_str!("../../../shaders/rope_append_kv_summary.wgsl"), false),
    ("prefill_attention", include_str!("../../../shaders/prefill_attention.wgsl"), false),
    ("sparse_decode_attention", include_str!("../../../shaders/sparse_decode_attention.wgsl"), false),
    ("sparse_decode_attention_merge", include_str!("../../../shaders/sparse_decode_attention_merge.wgsl"), false),
    ("page_select", include_str!("../../../shaders/page_select.wgsl"), false),
    ("page_select_topk", include_str!("../../../shaders/page_select_topk.wgsl"), false),
    ("lambda_mass", include_str!("../../../shaders/lambda_mass.wgsl"), false),
    ("fill_random", include_str!("../../../shaders/fill_random.wgsl"), false),
];

/// The weight dtypes shaders can read.
pub const WEIGHT_DTYPES: [DType; 3] = [DType::F16, DType::BF16, DType::F32];

fn weight_snippet(dtype: DType) -> &'static str {
    match dtype {
        DType::F16 => {
            "fn load_w(i: u32) -> f32 { let p = unpack2x16float(w[i >> 1u]); return select(p.x, p.y, (i & 1u) == 1u); }\n"
        }
        DType::BF16 => {
            "fn load_w(i: u32) -> f32 { let v = w[i >> 1u]; return bitcast<f32>(select(v << 16u, v & 0xffff0000u, (i & 1u) == 1u)); }\n"
        }
        _ => "fn load_w(i: u32) -> f32 { return bitcast<f32>(w[i]); }\n",
    }
}

/// Name of a pipeline: the op stem, plus the weight dtype for ops that read weights.
pub fn module_name(op: &str, weights: Option<DType>) -> String {
    match weights {
        Some(d) => format!("{op}_{}", format!("{d:?}").to_lowercase()),
        None => op.to_string(),
    }
}

/// The assembled source of one module.
pub fn assemble(op: &str, weights: Option<DType>) -> Option<String> {
    let (_, src, reads_w) = OPS.iter().find(|(name, _, _)| *name == op)?;
    let snippet = match (reads_w, weights) {
        (true, Some(d)) => weight_snippet(d),
        (true, None) => return None,
        (false, _) => "",
    };
    Some(format!("{PARAMS}\n{snippet}\n{COMMON}\n{src}"))
}

/// Every module the backend can build: (name, source).
pub fn all_modules() -> Vec<(String, String)> {
    OPS.iter()
        .flat_map(|&(op, _, reads_w)| {
            let variants: Vec<Option<DType>> =
                if reads_w { WEIGHT_DTYPES.iter().map(|&d| Some(d)).collect() } else { vec![None] };
            variants.into_iter().map(move |v| (module_name(op, v), assemble(op, v).expect("known op")))
        })
        .collect()
}
