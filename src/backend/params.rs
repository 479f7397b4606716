//! Parameter structs of the backend ops, one per op, `#[repr(C)]` and plain old data so the same
//! bytes can be handed to a WGSL uniform or a CUDA kernel. Fields are u32/f32 only (WGSL has no
//! u64/usize) and each struct is padded to a multiple of 16 bytes (uniform buffer rules). The
//! WGSL and CUDA mirrors live in `shaders/` and `cuda/`; a test checks the layouts agree.

use bytemuck::{Pod, Zeroable};

macro_rules! params {
    ($($(#[$m:meta])* pub struct $name:ident { $($(#[$fm:meta])* pub $f:ident : $t:ty),* $(,)? })*) => {$(
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
        pub struct $name { $($(#[$fm])* pub $f: $t),* }
        const _: () = assert!(std::mem::size_of::<$name>() % 16 == 0);
    )*};
}

params! {
    pub struct EmbedParams { pub n_tokens: u32, pub dim: u32, pub vocab: u32, pub _pad: u32 }
    pub struct MatmulParams { pub m: u32, pub n: u32, pub k: u32, pub has_bias: u32 }
    pub struct RmsnormParams { pub rows: u32, pub dim: u32, pub eps: f32, pub _pad: u32 }
    pub struct AddParams { pub n: u32, pub _pad0: u32, pub _pad1: u32, pub _pad2: u32 }
    pub struct SiluMulParams { pub rows: u32, pub dim: u32, pub _pad0: u32, pub _pad1: u32 }
    pub struct GatherRowsParams { pub n_out: u32, pub dim: u32, pub n_src: u32, pub _pad: u32 }
    pub struct ArgmaxParams { pub rows: u32, pub n: u32, pub _pad0: u32, pub _pad1: u32 }
    pub struct RopeAppendKvParams {
        pub n_tokens: u32,
        pub n_heads: u32,
        pub n_kv_heads: u32,
        pub head_dim: u32,
        pub page_size: u32,
        /// Pages in the retrieval pool (slots must be below num_pages * page_size).
        pub num_pages: u32,
        /// Multiplier of cos/sin (YaRN attention factor; 1 otherwise).
        pub attention_scaling: f32,
        /// Tokens per logical page (divides page_size); min/max summaries are kept per logical page.
        pub logical_page: u32,
        /// Retrieval and streaming KV heads of this layer (n_ret + n_str = n_kv_heads).
        pub n_ret: u32,
        pub n_str: u32,
        /// Pages in the streaming pool.
        pub num_str_pages: u32,
        pub _pad: u32,
    }
    pub struct AttentionParams {
        pub num_seqs: u32,
        /// Query rows in the step.
        pub n_tokens: u32,
        pub n_heads: u32,
        pub n_kv_heads: u32,
        pub head_dim: u32,
        pub page_size: u32,
        pub num_pages: u32,
        /// Softmax scale, usually 1/sqrt(head_dim).
        pub scale: f32,
        /// Sliding window in tokens (a key at distance >= window is masked); 0 = none.
        pub window: u32,
        /// Lambda mask of streaming heads: the first `sink` tokens and the last `local` tokens.
        pub sink: u32,
        pub local: u32,
        /// Ring capacity per sequence in tokens (a multiple of page_size).
        pub ring_tokens: u32,
        pub n_ret: u32,
        pub n_str: u32,
        pub num_str_pages: u32,
        /// Entries per (slot, retrieval head) in the selected-page buffer.
        pub sel_stride: u32,
    }
    pub struct PageSelectParams {
        pub num_seqs: u32,
        pub n_heads: u32,
        pub n_kv_heads: u32,
        pub head_dim: u32,
        pub page_size: u32,
        pub logical_page: u32,
        pub num_pages: u32,
        pub n_ret: u32,
        /// Pages to select per (sequence, retrieval head), the newest page excluded.
        pub k_pages: u32,
        pub sel_stride: u32,
        pub _pad0: u32,
        pub _pad1: u32,
    }
    pub struct LambdaMassParams {
        pub n_tokens: u32,
        pub n_heads: u32,
        pub n_kv_heads: u32,
        pub head_dim: u32,
        pub page_size: u32,
        pub num_pages: u32,
        pub scale: f32,
        pub sink: u32,
        pub local: u32,
        pub _pad0: u32,
        pub _pad1: u32,
        pub _pad2: u32,
    }
}
