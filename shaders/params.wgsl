// Parameter structs of the backend ops, mirrored field for field from src/backend/params.rs
// (a test compares the offsets naga computes here with the Rust ones). Prepended to every module.

struct EmbedParams { n_tokens: u32, dim: u32, vocab: u32, first: u32 }
struct MatmulParams { m: u32, n: u32, k: u32, has_bias: u32, ldo: u32, out_off: u32, accumulate: u32, _pad1: u32 }
struct RmsnormParams { rows: u32, dim: u32, eps: f32, _pad: u32 }
struct AddParams { n: u32, _pad0: u32, _pad1: u32, _pad2: u32 }
struct SiluMulParams { rows: u32, dim: u32, _pad0: u32, _pad1: u32 }
struct GeluTanhMulParams { rows: u32, dim: u32, _pad0: u32, _pad1: u32 }
struct HeadRmsnormParams { rows: u32, n_heads: u32, head_dim: u32, row_stride: u32, eps: f32, _pad0: u32, _pad1: u32, _pad2: u32 }
struct ScaleParams { n: u32, scale: f32, _pad0: u32, _pad1: u32 }
struct GatherRowsParams { n_out: u32, dim: u32, n_src: u32, _pad: u32 }
struct MeanRowsParams { n_out: u32, dim: u32, n_src: u32, _pad: u32 }
struct ArgmaxParams { rows: u32, n: u32, _pad0: u32, _pad1: u32 }
struct SampleParams { rows: u32, n: u32, _pad0: u32, _pad1: u32 }
struct RopeAppendKvParams {
    n_tokens: u32, n_heads: u32, n_kv_heads: u32, head_dim: u32,
    page_size: u32, num_pages: u32, attention_scaling: f32, logical_page: u32,
    n_ret: u32, n_str: u32, num_str_pages: u32, _pad: u32,
}
// matmul_gemv_x8_rope: MatmulParams' fields, then RopeAppendKvParams'.
struct MatmulRopeParams {
    m: u32, n: u32, k: u32, has_bias: u32, ldo: u32, out_off: u32, accumulate: u32, _pad1: u32,
    n_tokens: u32, n_heads: u32, n_kv_heads: u32, head_dim: u32,
    page_size: u32, num_pages: u32, attention_scaling: f32, logical_page: u32,
    n_ret: u32, n_str: u32, num_str_pages: u32, _pad: u32,
}
struct AttentionParams {
    num_seqs: u32, n_tokens: u32, n_heads: u32, n_kv_heads: u32,
    head_dim: u32, page_size: u32, num_pages: u32, scale: f32,
    window: u32, sink: u32, local: u32, ring_tokens: u32,
    n_ret: u32, n_str: u32, num_str_pages: u32, sel_stride: u32,
    sel_unit: u32, _pad0: u32, _pad1: u32, _pad2: u32,
}
struct PageSelectParams {
    num_seqs: u32, n_heads: u32, n_kv_heads: u32, head_dim: u32,
    page_size: u32, logical_page: u32, num_pages: u32, n_ret: u32,
    k_pages: u32, sel_stride: u32, max_seq_pages: u32, rank: u32,
    pin_first: u32, scale: f32, bound_shrink: f32, sel_unit: u32,
    rows_share_pages: u32, _pad0: u32, _pad1: u32, _pad2: u32,
}
struct AntidiagonalParams {
    n_blocks: u32, n_tokens: u32, num_seqs: u32, n_heads: u32,
    n_kv_heads: u32, head_dim: u32, page_size: u32, num_pages: u32,
    n_ret: u32, scale: f32, _pad0: u32, _pad1: u32,
}
struct PageTopKParams {
    num_seqs: u32, n_ret: u32, k_pages: u32, sel_stride: u32,
    max_seq_pages: u32, _pad0: u32, _pad1: u32, _pad2: u32,
}
struct LambdaMassParams {
    n_tokens: u32, n_heads: u32, n_kv_heads: u32, head_dim: u32,
    page_size: u32, num_pages: u32, scale: f32, sink: u32,
    local: u32, _pad0: u32, _pad1: u32, _pad2: u32,
}
struct FillRandomParams {
    n: u32, seed: u32, scale: f32, offset: f32,
    dtype: u32, _pad0: u32, _pad1: u32, _pad2: u32,
}
