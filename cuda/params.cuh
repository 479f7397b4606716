// Parameter structs of the backend ops, mirrored field for field from src/backend/params.rs
// (tests/cuda.rs parses this file and compares every offset with the Rust layout). Every field
// is a 4-byte u32/f32, so offsets are 4 x the field index. Prepended to every kernel module.
typedef unsigned int u32;

struct EmbedParams { u32 n_tokens; u32 dim; u32 vocab; u32 first; };
struct MatmulParams { u32 m; u32 n; u32 k; u32 has_bias; u32 ldo; u32 out_off; u32 accumulate; u32 _pad1; };
struct RmsnormParams { u32 rows; u32 dim; float eps; u32 _pad; };
struct AddParams { u32 n; u32 _pad0; u32 _pad1; u32 _pad2; };
struct SiluMulParams { u32 rows; u32 dim; u32 _pad0; u32 _pad1; };
struct GeluTanhMulParams { u32 rows; u32 dim; u32 _pad0; u32 _pad1; };
struct HeadRmsnormParams { u32 rows; u32 n_heads; u32 head_dim; u32 row_stride; float eps; u32 _pad0; u32 _pad1; u32 _pad2; };
struct ScaleParams { u32 n; float scale; u32 _pad0; u32 _pad1; };
struct GatherRowsParams { u32 n_out; u32 dim; u32 n_src; u32 _pad; };
struct MeanRowsParams { u32 n_out; u32 dim; u32 n_src; u32 _pad; };
struct ArgmaxParams { u32 rows; u32 n; u32 _pad0; u32 _pad1; };
struct SampleParams { u32 rows; u32 n; u32 _pad0; u32 _pad1; };
struct RopeAppendKvParams {
    u32 n_tokens; u32 n_heads; u32 n_kv_heads; u32 head_dim;
    u32 page_size; u32 num_pages; float attention_scaling; u32 logical_page;
    u32 n_ret; u32 n_str; u32 num_str_pages; u32 _pad;
};
// wgpu's matmul_gemv_x8_rope (MatmulParams' fields, then RopeAppendKvParams'); no CUDA kernel
// takes it (CUDA runs Backend::matmul_rope_append_kv as its two ops): mirrored, as all of them are.
struct MatmulRopeParams {
    u32 m; u32 n; u32 k; u32 has_bias; u32 ldo; u32 out_off; u32 accumulate; u32 _pad1;
    u32 n_tokens; u32 n_heads; u32 n_kv_heads; u32 head_dim;
    u32 page_size; u32 num_pages; float attention_scaling; u32 logical_page;
    u32 n_ret; u32 n_str; u32 num_str_pages; u32 _pad;
};
struct AttentionParams {
    u32 num_seqs; u32 n_tokens; u32 n_heads; u32 n_kv_heads;
    u32 head_dim; u32 page_size; u32 num_pages; float scale;
    u32 window; u32 sink; u32 local; u32 ring_tokens;
    u32 n_ret; u32 n_str; u32 num_str_pages; u32 sel_stride;
    u32 sel_unit; u32 _pad0; u32 _pad1; u32 _pad2;
};
struct PageSelectParams {
    u32 num_seqs; u32 n_heads; u32 n_kv_heads; u32 head_dim;
    u32 page_size; u32 logical_page; u32 num_pages; u32 n_ret;
    u32 k_pages; u32 sel_stride; u32 max_seq_pages; u32 rank;
    u32 pin_first; float scale; float bound_shrink; u32 sel_unit;
    u32 rows_share_pages; u32 _pad0; u32 _pad1; u32 _pad2;
};
struct AntidiagonalParams {
    u32 n_blocks; u32 n_tokens; u32 num_seqs; u32 n_heads;
    u32 n_kv_heads; u32 head_dim; u32 page_size; u32 num_pages;
    u32 n_ret; float scale; u32 _pad0; u32 _pad1;
};
struct PageTopKParams {
    u32 num_seqs; u32 n_ret; u32 k_pages; u32 sel_stride;
    u32 max_seq_pages; u32 _pad0; u32 _pad1; u32 _pad2;
};
struct LambdaMassParams {
    u32 n_tokens; u32 n_heads; u32 n_kv_heads; u32 head_dim;
    u32 page_size; u32 num_pages; float scale; u32 sink;
    u32 local; u32 _pad0; u32 _pad1; u32 _pad2;
};
struct FillRandomParams {
    u32 n; u32 seed; float scale; float offset;
    u32 dtype; u32 _pad0; u32 _pad1; u32 _pad2;
};
