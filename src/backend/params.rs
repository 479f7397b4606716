//! Parameter structs of the backend ops, one per op, `#[repr(C)]` and plain old data so the same
//! bytes can be handed to a WGSL uniform or a CUDA kernel. Fields are u32/f32 only (WGSL has no
//! u64/usize) and each struct is padded to a multiple of 16 bytes (uniform buffer rules). The
//! WGSL and CUDA mirrors live in `shaders/` and `cuda/`; a test checks the layouts agree.

use bytemuck::{Pod, Zeroable};

/// Field names and byte offsets of a parameter struct, for the layout tests against the WGSL
/// and CUDA mirrors.
pub trait ParamLayout {
    const NAME: &'static str;
    fn fields() -> Vec<(&'static str, usize)>;
}

macro_rules! params {
    ($($(#[$m:meta])* pub struct $name:ident { $($(#[$fm:meta])* pub $f:ident : $t:ty),* $(,)? })*) => {$(
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
        pub struct $name { $($(#[$fm])* pub $f: $t),* }
        const _: () = assert!(std::mem::size_of::<$name>() % 16 == 0);
        impl ParamLayout for $name {
            const NAME: &'static str = stringify!($name);
            fn fields() -> Vec<(&'static str, usize)> {
                vec![$((stringify!($f), std::mem::offset_of!($name, $f))),*]
            }
        }
    )*};
}

/// Every parameter struct's name and fields.
pub fn all_param_layouts() -> Vec<(&'static str, Vec<(&'static str, usize)>)> {
    fn one<P: ParamLayout>() -> (&'static str, Vec<(&'static str, usize)>) {
        (P::NAME, P::fields())
    }
    vec![
        one::<EmbedParams>(),
        one::<MatmulParams>(),
        one::<RmsnormParams>(),
        one::<AddParams>(),
        one::<SiluMulParams>(),
        one::<GatherRowsParams>(),
        one::<MeanRowsParams>(),
        one::<ArgmaxParams>(),
        one::<SampleParams>(),
        one::<RopeAppendKvParams>(),
        one::<MatmulRopeParams>(),
        one::<AttentionParams>(),
        one::<PageSelectParams>(),
        one::<LambdaMassParams>(),
        one::<AntidiagonalParams>(),
        one::<PageTopKParams>(),
        one::<FillRandomParams>(),
        one::<GeluTanhMulParams>(),
        one::<HeadRmsnormParams>(),
        one::<ScaleParams>(),
    ]
}

params! {
    /// `embed`: the table holds ids `first .. first + vocab` (a rank's vocabulary slice under tensor
    /// parallelism; 0 and the whole vocabulary otherwise); other ids give a zero row.
    pub struct EmbedParams { pub n_tokens: u32, pub dim: u32, pub vocab: u32, pub first: u32 }
    /// `matmul`: out `[m]` rows of `ldo` floats, the result in columns `out_off % ldo ..+ n`
    /// starting at element `out_off` (see [`MatmulParams::new`] for the plain `[m][n]` case).
    pub struct MatmulParams {
        pub m: u32,
        pub n: u32,
        pub k: u32,
        pub has_bias: u32,
        pub ldo: u32,
        pub out_off: u32,
        /// 1: out += the product (`Backend::matmul_accumulates`), instead of out = it.
        pub accumulate: u32,
        pub _pad1: u32,
    }
    pub struct RmsnormParams { pub rows: u32, pub dim: u32, pub eps: f32, pub _pad: u32 }
    pub struct AddParams { pub n: u32, pub _pad0: u32, pub _pad1: u32, pub _pad2: u32 }
    pub struct SiluMulParams { pub rows: u32, pub dim: u32, pub _pad0: u32, pub _pad1: u32 }
    /// `gelu_tanh_mul` (Gemma's gated FFN): gate_up `[rows][2*dim]` -> out `[rows][dim]`.
    pub struct GeluTanhMulParams { pub rows: u32, pub dim: u32, pub _pad0: u32, pub _pad1: u32 }
    /// `head_rmsnorm` (Gemma's q/k norm), in place: in each of `rows` rows of `row_stride` floats,
    /// the first `n_heads` segments of `head_dim` floats are RMS-normalized and scaled by their
    /// weight row `w[head][head_dim]`; the rest of the row is left alone.
    pub struct HeadRmsnormParams {
        pub rows: u32,
        pub n_heads: u32,
        pub head_dim: u32,
        pub row_stride: u32,
        pub eps: f32,
        pub _pad0: u32,
        pub _pad1: u32,
        pub _pad2: u32,
    }
    /// `scale`, in place: x[i] *= scale for i < n (Gemma's embedding scale).
    pub struct ScaleParams { pub n: u32, pub scale: f32, pub _pad0: u32, pub _pad1: u32 }
    pub struct GatherRowsParams { pub n_out: u32, pub dim: u32, pub n_src: u32, pub _pad: u32 }
    /// `mean_rows`: out `[n_out][dim]`, row i the mean of src rows `indptr[i]..indptr[i+1]` of `[n_src][dim]`.
    pub struct MeanRowsParams { pub n_out: u32, pub dim: u32, pub n_src: u32, pub _pad: u32 }
    pub struct ArgmaxParams { pub rows: u32, pub n: u32, pub _pad0: u32, pub _pad1: u32 }
    /// `sample`: logits `[rows][n]`; the per-row settings are a buffer (they change every step,
    /// and a replayed CUDA graph freezes kernel arguments).
    pub struct SampleParams { pub rows: u32, pub n: u32, pub _pad0: u32, pub _pad1: u32 }
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
    /// `Backend::matmul_rope_append_kv` in one kernel (wgpu's `matmul_gemv_x8_rope`): the
    /// matmul's fields, then `rope_append_kv`'s ([`MatmulRopeParams::new`]).
    pub struct MatmulRopeParams {
        pub m: u32,
        pub n: u32,
        pub k: u32,
        pub has_bias: u32,
        pub ldo: u32,
        pub out_off: u32,
        pub accumulate: u32,
        pub _pad1: u32,
        pub n_tokens: u32,
        pub n_heads: u32,
        pub n_kv_heads: u32,
        pub head_dim: u32,
        pub page_size: u32,
        pub num_pages: u32,
        pub attention_scaling: f32,
        pub logical_page: u32,
        pub n_ret: u32,
        pub n_str: u32,
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
        /// Tokens of a retrieval head's decode key list per selected entry (the selection unit):
        /// 0 or page_size, physical pages; a divisor of page_size, that many tokens (logical-page
        /// selection: entry j covers positions j * sel_unit .. (j + 1) * sel_unit). See
        /// [`AttentionParams::unit`].
        pub sel_unit: u32,
        pub _pad0: u32,
        pub _pad1: u32,
        pub _pad2: u32,
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
        /// At least the most pages any sequence of the step holds (the engine passes that count
        /// rounded up to a power of two; 0: unknown, backends then assume the whole page table).
        /// Sizes per-row work (the CUDA sort), never bounds memory accesses.
        pub max_seq_pages: u32,
        /// How pages are ranked: [`PAGE_RANK_MAX`] or [`PAGE_RANK_HEAD_NORM`].
        pub rank: u32,
        /// Nonzero: candidate 0 (the sequence's first page, the attention sink) is always kept.
        pub pin_first: u32,
        /// [`PAGE_RANK_HEAD_NORM`]'s softmax scale (the attention score scale); finite and > 0.
        pub scale: f32,
        /// In [0, 1]: each logical page's min/max box shrinks toward its centre by this fraction
        /// before it is scored, so a page scores `sum_c q_c mid_c + (1 - bound_shrink) |q_c|
        /// half_c` (mid = (max + min) / 2, half = (max - min) / 2). 0: the Quest bound itself,
        /// computed as `sum_c max(q_c max_c, q_c min_c)`; 1: the box's mid-point key.
        pub bound_shrink: f32,
        /// The selection unit in tokens, as [`AttentionParams::sel_unit`] (0: page_size): a
        /// candidate is a unit, scored as the max over its logical pages; `k_pages` counts units.
        /// A multiple of logical_page that divides page_size.
        pub sel_unit: u32,
        /// Nonzero: a hint that rows which both hold candidate j hold the same page there (the
        /// virtual rows of block-sparse prefill: one per query block, each listing a prefix of
        /// its sequence's pages), so a backend may score a tile of rows against one copy of each
        /// page (CUDA: `page_select_score_rows`). With or without it, and where it does not hold,
        /// the scores are the same up to the order of their f32 sums (a near tie may pick the
        /// other page).
        pub rows_share_pages: u32,
        pub _pad0: u32,
        pub _pad1: u32,
        pub _pad2: u32,
    }
    /// `antidiagonal_score` (block-sparse prefill's estimate, XAttention's antidiagonal at stride
    /// [`ANTIDIAGONAL_STRIDE`]): `n_blocks` query blocks over q `[n_tokens][n_heads][head_dim]`,
    /// keys read from the retrieval pool through the step's page table (`num_seqs` sequences).
    pub struct AntidiagonalParams {
        pub n_blocks: u32,
        pub n_tokens: u32,
        pub num_seqs: u32,
        pub n_heads: u32,
        pub n_kv_heads: u32,
        pub head_dim: u32,
        pub page_size: u32,
        pub num_pages: u32,
        pub n_ret: u32,
        /// The attention score scale (the estimate multiplies by scale / stride).
        pub scale: f32,
        pub _pad0: u32,
        pub _pad1: u32,
    }
    /// `page_top_k`: rows `num_seqs` x `n_ret` of a CSR score table (`page_indptr`), the best
    /// `k_pages` candidates of each written to `selected` rows of `sel_stride` entries.
    pub struct PageTopKParams {
        pub num_seqs: u32,
        pub n_ret: u32,
        pub k_pages: u32,
        pub sel_stride: u32,
        /// At least the most entries any row holds (a power of two), as
        /// [`PageSelectParams::max_seq_pages`]; sizes per-row work, never bounds accesses.
        pub max_seq_pages: u32,
        pub _pad0: u32,
        pub _pad1: u32,
        pub _pad2: u32,
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
    /// Deterministic pseudo-random fill (synthetic weights and benchmark data).
    pub struct FillRandomParams {
        /// Elements to write.
        pub n: u32,
        pub seed: u32,
        /// value = offset + scale * u, u uniform in [-1, 1).
        pub scale: f32,
        pub offset: f32,
        /// Element type of the buffer: 0 = f32, 1 = f16, 2 = bf16 (16-bit values packed in pairs).
        pub dtype: u32,
        pub _pad0: u32,
        pub _pad1: u32,
        pub _pad2: u32,
    }
}

/// The value `fill_random` writes at element `i`: a PCG hash of `i` and the seed mapped to
/// [-1, 1) with exact f32 arithmetic (so every backend produces the same bits before the final
/// `offset + scale * u`).
pub fn fill_random_value(seed: u32, i: u32, scale: f32, offset: f32) -> f32 {
    let mut h = i.wrapping_mul(747_796_405).wrapping_add(2_891_336_453) ^ seed.wrapping_mul(0x9E37_79B9);
    h = ((h >> ((h >> 28) + 4)) ^ h).wrapping_mul(277_803_737);
    h = (h >> 22) ^ h;
    let u = (h >> 8) as f32 * (1.0 / 8_388_608.0) - 1.0;
    offset + scale * u
}

/// The pool geometry of one layer of a KV cache, as the ops see it (docs/kv-cache.md): what the
/// cache reports (`KvCache::geometry`) and the parameter builders below read, so the cache never
/// builds an op's parameter struct itself.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct KvGeometry {
    pub n_kv_heads: u32,
    pub head_dim: u32,
    pub page_size: u32,
    /// Pages in the retrieval pool.
    pub num_pages: u32,
    /// Tokens per logical page (divides page_size).
    pub logical_page: u32,
    /// Retrieval and streaming KV heads of this layer (n_ret + n_str = n_kv_heads).
    pub n_ret: u32,
    pub n_str: u32,
    /// Pages in the streaming pool.
    pub num_str_pages: u32,
    /// Ring capacity per sequence in tokens.
    pub ring_tokens: u32,
    /// Entries per (slot, retrieval head) in the selected-page buffer.
    pub sel_stride: u32,
}

impl MatmulParams {
    /// out `[m][n]` densely (ldo = n, offset 0).
    pub fn new(m: usize, n: usize, k: usize, has_bias: bool) -> Self {
        MatmulParams {
            m: m as u32,
            n: n as u32,
            k: k as u32,
            has_bias: has_bias as u32,
            ldo: n as u32,
            ..Default::default()
        }
    }
    /// Elements out must hold: `out_off + (m - 1) * ldo + n` (0 when m or n is 0).
    pub fn out_len(&self) -> usize {
        if self.m == 0 || self.n == 0 {
            return 0;
        }
        self.out_off as usize + (self.m as usize - 1) * self.ldo as usize + self.n as usize
    }
    /// The plain `[m][n]` layout (what the kernels without a stride handle).
    pub fn is_dense(&self) -> bool {
        self.ldo == self.n && self.out_off == 0
    }
}

impl ArgmaxParams {
    /// Blocks (workgroups) a row's first argmax pass takes on the GPUs: one per 8,192 elements, at
    /// most 256 (cuda/argmax.cu, shaders/argmax_part.wgsl compute the same).
    pub fn parts(&self) -> usize {
        (self.n as usize).div_ceil(8192).clamp(1, 256)
    }
}

impl RopeAppendKvParams {
    /// `rope_append_kv` parameters for `n_tokens` tokens of `n_heads` query heads into a layer.
    pub fn new(g: &KvGeometry, n_tokens: usize, n_heads: usize, attention_scaling: f32) -> Self {
        RopeAppendKvParams {
            n_tokens: n_tokens as u32,
            n_heads: n_heads as u32,
            n_kv_heads: g.n_kv_heads,
            head_dim: g.head_dim,
            page_size: g.page_size,
            num_pages: g.num_pages,
            attention_scaling,
            logical_page: g.logical_page,
            n_ret: g.n_ret,
            n_str: g.n_str,
            num_str_pages: g.num_str_pages,
            _pad: 0,
        }
    }
}

impl MatmulRopeParams {
    /// The two ops' parameters in one struct.
    pub fn new(m: &MatmulParams, r: &RopeAppendKvParams) -> Self {
        MatmulRopeParams {
            m: m.m,
            n: m.n,
            k: m.k,
            has_bias: m.has_bias,
            ldo: m.ldo,
            out_off: m.out_off,
            accumulate: m.accumulate,
            _pad1: 0,
            n_tokens: r.n_tokens,
            n_heads: r.n_heads,
            n_kv_heads: r.n_kv_heads,
            head_dim: r.head_dim,
            page_size: r.page_size,
            num_pages: r.num_pages,
            attention_scaling: r.attention_scaling,
            logical_page: r.logical_page,
            n_ret: r.n_ret,
            n_str: r.n_str,
            num_str_pages: r.num_str_pages,
            _pad: 0,
        }
    }
}

/// The step's side of [`AttentionParams`]: batch shape and masks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionStep {
    pub num_seqs: usize,
    /// Query rows in the step.
    pub n_tokens: usize,
    pub n_heads: usize,
    /// Sliding window in tokens; 0 = none.
    pub window: usize,
    /// Lambda mask of streaming heads.
    pub sink: usize,
    pub local: usize,
}

impl AttentionParams {
    /// Attention parameters of a step over a layer, softmax scale `1/sqrt(head_dim)`.
    pub fn new(g: &KvGeometry, s: &AttentionStep) -> Self {
        AttentionParams {
            num_seqs: s.num_seqs as u32,
            n_tokens: s.n_tokens as u32,
            n_heads: s.n_heads as u32,
            n_kv_heads: g.n_kv_heads,
            head_dim: g.head_dim,
            page_size: g.page_size,
            num_pages: g.num_pages,
            scale: 1.0 / (g.head_dim as f32).sqrt(),
            window: s.window as u32,
            sink: s.sink as u32,
            local: s.local as u32,
            ring_tokens: g.ring_tokens,
            n_ret: g.n_ret,
            n_str: g.n_str,
            num_str_pages: g.num_str_pages,
            sel_stride: g.sel_stride,
            ..Default::default()
        }
    }

    /// The selection unit in tokens: `sel_unit`, or page_size when it is 0.
    pub fn unit(&self) -> u32 {
        if self.sel_unit == 0 { self.page_size } else { self.sel_unit }
    }

    /// Why the selection unit is invalid for decode (it must divide page_size), if it is.
    pub fn check_unit(&self) -> std::result::Result<(), &'static str> {
        let u = self.unit();
        if u == 0 || !self.page_size.is_multiple_of(u) {
            return Err("sparse_decode_attention: sel_unit must divide page_size");
        }
        Ok(())
    }
}

impl PageSelectParams {
    /// `page_select` parameters matching a decode step's attention parameters, keeping
    /// `k_pages` pages (at most `sel_stride`) per (sequence, retrieval head); `max_seq_pages` is
    /// the longest sequence's page count in the step.
    pub fn new(ap: &AttentionParams, logical_page: u32, k_pages: usize, max_seq_pages: usize) -> Self {
        PageSelectParams {
            num_seqs: ap.num_seqs,
            n_heads: ap.n_heads,
            n_kv_heads: ap.n_kv_heads,
            head_dim: ap.head_dim,
            page_size: ap.page_size,
            logical_page,
            num_pages: ap.num_pages,
            n_ret: ap.n_ret,
            k_pages: k_pages.min(ap.sel_stride as usize) as u32,
            sel_stride: ap.sel_stride,
            max_seq_pages: max_seq_pages as u32,
            rank: PAGE_RANK_MAX,
            pin_first: 0,
            scale: ap.scale,
            bound_shrink: 0.0,
            sel_unit: ap.sel_unit,
            rows_share_pages: 0,
            _pad0: 0,
            _pad1: 0,
            _pad2: 0,
        }
    }

    /// The selection unit in tokens (`sel_unit`, or page_size when it is 0), or why it is
    /// invalid: it must be a multiple of logical_page (> 0) and divide page_size.
    pub fn checked_unit(&self) -> std::result::Result<u32, &'static str> {
        let u = if self.sel_unit == 0 { self.page_size } else { self.sel_unit };
        let lp = self.logical_page;
        if lp == 0 || u == 0 || !self.page_size.is_multiple_of(u) || !u.is_multiple_of(lp) {
            return Err("page_select: logical_page must divide sel_unit, and sel_unit page_size");
        }
        Ok(u)
    }

    /// Whether the ranking is [`PAGE_RANK_HEAD_NORM`] (false: [`PAGE_RANK_MAX`]), or why the
    /// ranking fields are invalid: an unknown rank, head_norm without a finite scale > 0, or a
    /// `bound_shrink` outside [0, 1]. Every backend's `page_select` checks this first.
    pub fn checked_rank(&self) -> std::result::Result<bool, &'static str> {
        if !(0.0..=1.0).contains(&self.bound_shrink) {
            return Err("page_select: bound_shrink must lie in [0, 1]");
        }
        match self.rank {
            PAGE_RANK_MAX => Ok(false),
            PAGE_RANK_HEAD_NORM if self.scale.is_finite() && self.scale > 0.0 => Ok(true),
            _ => Err("page_select: unknown rank, or head_norm without a finite scale > 0"),
        }
    }
}

impl AntidiagonalParams {
    /// The estimate's parameters for `n_blocks` query blocks of a prefill step with attention
    /// parameters `ap` (its rows, sequences, heads, pages and score scale).
    pub fn new(ap: &AttentionParams, n_blocks: usize) -> Self {
        AntidiagonalParams {
            n_blocks: n_blocks as u32,
            n_tokens: ap.n_tokens,
            num_seqs: ap.num_seqs,
            n_heads: ap.n_heads,
            n_kv_heads: ap.n_kv_heads,
            head_dim: ap.head_dim,
            page_size: ap.page_size,
            num_pages: ap.num_pages,
            n_ret: ap.n_ret,
            scale: ap.scale,
            _pad0: 0,
            _pad1: 0,
        }
    }

    /// Why the geometry is invalid, if it is: no KV heads or head dim, more retrieval heads than
    /// KV heads, query heads not a multiple of the KV heads, or a page size that is not a
    /// multiple of the stride (key groups would straddle pages). Every backend checks this first.
    pub fn check(&self) -> std::result::Result<(), &'static str> {
        let (nkv, ps) = (self.n_kv_heads, self.page_size);
        if nkv == 0 || self.head_dim == 0 || self.n_ret > nkv || !self.n_heads.is_multiple_of(nkv) {
            return Err("antidiagonal_score: bad head counts");
        }
        if ps == 0 || !(ps as usize).is_multiple_of(super::ANTIDIAGONAL_STRIDE) {
            return Err("antidiagonal_score: page_size must be a multiple of the stride (8)");
        }
        Ok(())
    }
}

/// `page_select` ranking: a page's score is the max over the KV head's query heads and the page's
/// logical pages of the Quest bound `b = sum_c max(q_c * max_c, q_c * min_c)`.
pub const PAGE_RANK_MAX: u32 = 0;
/// `page_select` ranking: per query head `g`, `m_g(j) = max_l b` over candidate `j`'s logical
/// pages, normalized by a softmax over the candidates, `P_g(j) = exp(scale * m_g(j)) / Z_g`; the
/// page scores `sum_g P_g(j)`. Computed in log space, `log sum_g exp(x_g(j))` with
/// `x_g(j) = max(scale * (m_g(j) - M_g), -1e30) - log Z_g` (`M_g` the max over candidates,
/// `Z_g = sum_j exp(max(scale * (m_g(j) - M_g), -1e30))`, `m_g` clamped to +-1e30 with NaN bounds
/// skipped as in max), so no page's score underflows to a tie and no infinity enters the math.
pub const PAGE_RANK_HEAD_NORM: u32 = 1;
