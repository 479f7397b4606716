//! The CPU backend: f32 everywhere (the 8-bit KV types excepted: their pools hold the quantized
//! bytes that define those dtypes, `kvpool.rs`), plain loops parallelised with rayon. It is the reference the
//! GPU backends are tested against, so clarity wins over speed except in `matmul` (the `gemm`
//! crate for prefill, AVX2 GEMVs for decode; prefill is GEMM-bound and the test suite runs the real
//! model) and in attention (per KV head, one pass over the keys and values for the whole GQA group,
//! AVX2 kernels in `attn_ops.rs`; a decode batch otherwise spends its time there).
//!
//! Every op checks the lengths of its buffers against its params before touching them, so a
//! wrong call is an error, not an out-of-bounds panic. Ops run synchronously; `sync` is a no-op.

mod attention;
mod attn_ops;
mod blockscore;
mod kvops;
mod kvpool;
mod ops;
mod quant;

use crate::backend::*;
use crate::error::{Error, Result};

/// A host buffer.
#[derive(Clone, Debug)]
pub enum CpuBuffer {
    F32(Vec<f32>),
    U32(Vec<u32>),
    /// Bytes of a typed layout: an 8-bit KV pool (I8 or F8E4M3: codes and scales, layout of
    /// [`kv_pool_len`]) or a quantized weight matrix (`DType::is_weight_quant`, layout of
    /// [`reference::weight_quant`]).
    Bytes(DType, Vec<u8>),
}

pub struct CpuBackend {
    caps: Caps,
    /// `Backend::matmul_accumulates` (off by default; [`CpuBackend::with_fused_residual`]).
    fused_residual: bool,
}

impl Default for CpuBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl CpuBackend {
    pub fn new() -> Self {
        let threads = rayon::current_num_threads();
        CpuBackend {
            caps: Caps {
                name: "cpu",
                device: format!("host CPU, {threads} threads"),
                weight_dtypes: quant::weight_dtypes(),
                kv_dtypes: vec![DType::F32, DType::I8, DType::F8E4M3],
                max_buffer_bytes: u64::MAX,
                memory_bytes: host_memory_bytes(),
                matmul_x16_from: None,
                act16_from: None,
                matmul_x8_max_m: 0,
                act_x8_dtypes: vec![],
                act_x8_max_k: 0,
                act_x8_k_multiple: 0,
            },
            fused_residual: false,
        }
    }

    /// A CPU backend that asks the model to fold the residual add into o_proj and down
    /// (`Backend::matmul_accumulates`), as CUDA does for a prefill, and the norms and silu_mul
    /// into the matmuls after them (`Backend::matmul_prologue_fuses`), as CUDA does for a batch-1
    /// decode step: the fused layer loop then runs, and is tested, on the reference. Same values
    /// either way (one f32 add per element; the prologue is the op and then the matmul here).
    pub fn with_fused_residual(mut self, on: bool) -> Self {
        self.fused_residual = on;
        self
    }
}

/// MemAvailable from /proc/meminfo (Linux), else 8 GiB as a conservative guess.
fn host_memory_bytes() -> u64 {
    let kib = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines().find(|l| l.starts_with("MemAvailable:"))?.split_whitespace().nth(1)?.parse::<u64>().ok()
    });
    kib.map_or(8 << 30, |k| k * 1024)
}

pub(crate) fn err(msg: impl Into<String>) -> Error {
    Error::Backend { backend: "cpu", msg: msg.into() }
}

pub(crate) fn f32s<'a>(b: &'a CpuBuffer, need: usize, what: &str) -> Result<&'a [f32]> {
    match b {
        CpuBuffer::F32(v) if v.len() >= need => Ok(&v[..need]),
        CpuBuffer::F32(v) => Err(err(format!("{what}: {} f32 elements, op needs {need}", v.len()))),
        _ => Err(err(format!("{what}: expected an f32 buffer"))),
    }
}

pub(crate) fn f32s_mut<'a>(b: &'a mut CpuBuffer, need: usize, what: &str) -> Result<&'a mut [f32]> {
    match b {
        CpuBuffer::F32(v) => {
            let have = v.len();
            v.get_mut(..need).ok_or_else(|| err(format!("{what}: {have} f32 elements, op needs {need}")))
        }
        _ => Err(err(format!("{what}: expected an f32 buffer"))),
    }
}

pub(crate) fn u32s_mut<'a>(b: &'a mut CpuBuffer, need: usize, what: &str) -> Result<&'a mut [u32]> {
    match b {
        CpuBuffer::U32(v) if v.len() >= need => Ok(v),
        _ => Err(err(format!("{what}: a u32 buffer of at least {need} elements is needed"))),
    }
}

pub(crate) fn u32s<'a>(b: &'a CpuBuffer, need: usize, what: &str) -> Result<&'a [u32]> {
    match b {
        CpuBuffer::U32(v) if v.len() >= need => Ok(&v[..need]),
        CpuBuffer::U32(v) => Err(err(format!("{what}: {} u32 elements, op needs {need}", v.len()))),
        _ => Err(err(format!("{what}: expected a u32 buffer"))),
    }
}

fn u(x: u32) -> usize {
    x as usize
}

/// Plain number types whose all-zero bit pattern is the value 0.
trait ZeroBits: Copy {}
impl ZeroBits for f32 {}
impl ZeroBits for u32 {}
impl ZeroBits for u8 {}

/// `len` zeros, lazily committed like `vec![0; len]` (calloc), but an allocation the system
/// refuses is an error rather than an abort of the process (a buffer sized from a hostile
/// config or flag).
fn zeroed<T: ZeroBits>(len: usize) -> Result<Vec<T>> {
    let layout = std::alloc::Layout::array::<T>(len)
        .map_err(|_| err(format!("a buffer of {len} elements overflows the address space")))?;
    if layout.size() == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: the layout has a non-zero size; `T: ZeroBits` makes zeroed memory valid values.
    let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<T>();
    if p.is_null() {
        return Err(err(format!("cannot allocate a {} byte buffer", layout.size())));
    }
    // SAFETY: p was allocated by the global allocator with the layout of `len` T's, all initialized.
    Ok(unsafe { Vec::from_raw_parts(p, len, len) })
}

impl Backend for CpuBackend {
    type Buffer = CpuBuffer;

    fn caps(&self) -> &Caps {
        &self.caps
    }

    fn alloc(&self, dtype: DType, len: usize) -> Result<CpuBuffer> {
        match dtype {
            DType::F32 => Ok(CpuBuffer::F32(zeroed(len)?)),
            DType::U32 => Ok(CpuBuffer::U32(zeroed(len)?)),
            d if d.is_kv8() || d.is_weight_quant() => Ok(CpuBuffer::Bytes(d, zeroed(len)?)),
            d => Err(err(format!("{d:?} buffers are not supported on the CPU backend"))),
        }
    }

    fn upload_f32(&self, dtype: DType, data: Vec<f32>) -> Result<CpuBuffer> {
        match dtype {
            DType::F32 => Ok(CpuBuffer::F32(data)),
            d => Err(err(format!("{d:?} weights are not supported on the CPU backend"))),
        }
    }

    fn upload_u32(&self, data: &[u32]) -> Result<CpuBuffer> {
        Ok(CpuBuffer::U32(data.to_vec()))
    }

    fn write_f32_at(&self, dst: &mut CpuBuffer, offset: usize, data: &[f32]) -> Result<()> {
        f32s_mut(dst, offset + data.len(), "write_f32_at")?[offset..].copy_from_slice(data);
        Ok(())
    }

    fn write_u32_at(&self, dst: &mut CpuBuffer, offset: usize, data: &[u32]) -> Result<()> {
        match dst {
            CpuBuffer::U32(v) if v.len() >= offset + data.len() => {
                v[offset..offset + data.len()].copy_from_slice(data);
                Ok(())
            }
            _ => Err(err("write_u32_at: destination is not a large enough u32 buffer")),
        }
    }

    fn download_raw(&self, src: &CpuBuffer, offset: usize, len: usize) -> Result<Vec<u8>> {
        let bytes: &[u8] = match src {
            CpuBuffer::F32(v) => bytemuck::cast_slice(v.as_slice()),
            CpuBuffer::U32(v) => bytemuck::cast_slice(v.as_slice()),
            CpuBuffer::Bytes(_, v) => v.as_slice(),
        };
        bytes.get(offset..offset + len).map(|b| b.to_vec()).ok_or_else(|| err("download_raw: range outside the buffer"))
    }

    fn write_raw_at(&self, dst: &mut CpuBuffer, offset: usize, data: &[u8]) -> Result<()> {
        let bytes: &mut [u8] = match dst {
            CpuBuffer::F32(v) => bytemuck::cast_slice_mut(v.as_mut_slice()),
            CpuBuffer::U32(v) => bytemuck::cast_slice_mut(v.as_mut_slice()),
            CpuBuffer::Bytes(_, v) => v.as_mut_slice(),
        };
        let n = data.len();
        bytes
            .get_mut(offset..offset + n)
            .ok_or_else(|| err("write_raw_at: range outside the buffer"))?
            .copy_from_slice(data);
        Ok(())
    }

    fn download_f32(&self, src: &CpuBuffer, offset: usize, len: usize) -> Result<Vec<f32>> {
        Ok(f32s(src, offset + len, "download_f32")?[offset..].to_vec())
    }

    fn download_u32(&self, src: &CpuBuffer, offset: usize, len: usize) -> Result<Vec<u32>> {
        Ok(u32s(src, offset + len, "download_u32")?[offset..].to_vec())
    }

    fn sync(&self) -> Result<()> {
        Ok(())
    }

    fn len(&self, b: &CpuBuffer) -> usize {
        match b {
            CpuBuffer::F32(v) => v.len(),
            CpuBuffer::U32(v) => v.len(),
            CpuBuffer::Bytes(_, v) => v.len(),
        }
    }

    fn dtype(&self, b: &CpuBuffer) -> DType {
        match b {
            CpuBuffer::F32(_) => DType::F32,
            CpuBuffer::U32(_) => DType::U32,
            CpuBuffer::Bytes(d, _) => *d,
        }
    }

    fn embed(&self, p: &EmbedParams, table: &CpuBuffer, ids: &CpuBuffer, out: &mut CpuBuffer) -> Result<()> {
        let (n, d) = (u(p.n_tokens), u(p.dim));
        if let CpuBuffer::Bytes(dt, bytes) = table {
            return quant::embed(*dt, bytes, p, u32s(ids, n, "embed ids")?, f32s_mut(out, n * d, "embed out")?);
        }
        let table = f32s(table, u(p.vocab) * d, "embed table")?;
        let ids = u32s(ids, n, "embed ids")?;
        let out = f32s_mut(out, n * d, "embed out")?;
        for (row, &id) in out.chunks_exact_mut(d).zip(ids) {
            // Ids outside the table's slice (another rank's rows) give zeros.
            match u(id.wrapping_sub(p.first)) {
                r if r < u(p.vocab) => row.copy_from_slice(&table[r * d..(r + 1) * d]),
                _ => row.fill(0.0),
            }
        }
        Ok(())
    }

    fn matmul_accumulates(&self, _w: &CpuBuffer, _m: usize) -> bool {
        self.fused_residual
    }

    /// `matmul_prologue` is the trait's composition here (the op, then `matmul`: the reference);
    /// it says so where made `with_fused_residual`, so the fused layer loop runs on the CPU.
    fn matmul_prologue_fuses(&self, _p: &MatmulParams, _w: &CpuBuffer, _kind: PrologueKind) -> bool {
        self.fused_residual
    }

    fn matmul(
        &self,
        p: &MatmulParams,
        x: &CpuBuffer,
        w: &CpuBuffer,
        bias: Option<&CpuBuffer>,
        out: &mut CpuBuffer,
    ) -> Result<()> {
        let (m, n, k) = (u(p.m), u(p.n), u(p.k));
        let x = f32s(x, m * k, "matmul x")?;
        let bias = match (p.has_bias, bias) {
            (0, _) => None,
            (_, Some(b)) => Some(f32s(b, n, "matmul bias")?),
            (_, None) => return Err(err("matmul: has_bias set but no bias buffer given")),
        };
        if u(p.ldo) < n {
            return Err(err(format!("matmul: ldo {} < n {n}", p.ldo)));
        }
        let out = f32s_mut(out, p.out_len(), "matmul out")?;
        if m == 0 || n == 0 {
            return Ok(());
        }
        // The product in place where it can go there (a dense out, or quantized weights, whose
        // kernels take ldo and out_off), else densely first, then copied or added.
        let product = |p: &MatmulParams, out: &mut [f32]| -> Result<()> {
            if let CpuBuffer::Bytes(dt, bytes) = w {
                return quant::matmul(p, x, *dt, bytes, bias, out);
            }
            ops::matmul(x, f32s(w, n * k, "matmul w")?, bias, out, m, n, k);
            Ok(())
        };
        if p.accumulate == 0 && (p.is_dense() || matches!(w, CpuBuffer::Bytes(..))) {
            return product(p, out);
        }
        let mut dense = vec![0.0; m * n];
        product(&MatmulParams { ldo: p.n, out_off: 0, accumulate: 0, ..*p }, &mut dense)?;
        let (ldo, off) = (u(p.ldo), u(p.out_off));
        for (r, row) in dense.chunks_exact(n).enumerate() {
            let o = &mut out[off + r * ldo..off + r * ldo + n];
            if p.accumulate != 0 {
                o.iter_mut().zip(row).for_each(|(a, b)| *a += b);
            } else {
                o.copy_from_slice(row);
            }
        }
        Ok(())
    }

    fn rmsnorm(&self, p: &RmsnormParams, x: &CpuBuffer, w: &CpuBuffer, out: &mut CpuBuffer) -> Result<()> {
        let (r, d) = (u(p.rows), u(p.dim));
        let x = f32s(x, r * d, "rmsnorm x")?;
        let w = f32s(w, d, "rmsnorm w")?;
        ops::rmsnorm(x, w, f32s_mut(out, r * d, "rmsnorm out")?, d, p.eps);
        Ok(())
    }

    fn add_rmsnorm(
        &self,
        p: &RmsnormParams,
        residual: &mut CpuBuffer,
        x: &CpuBuffer,
        w: &CpuBuffer,
        out: &mut CpuBuffer,
    ) -> Result<()> {
        let (r, d) = (u(p.rows), u(p.dim));
        let x = f32s(x, r * d, "add_rmsnorm x")?;
        let w = f32s(w, d, "add_rmsnorm w")?;
        let res = f32s_mut(residual, r * d, "add_rmsnorm residual")?;
        res.iter_mut().zip(x).for_each(|(a, b)| *a += b);
        ops::rmsnorm(res, w, f32s_mut(out, r * d, "add_rmsnorm out")?, d, p.eps);
        Ok(())
    }

    fn add(&self, p: &AddParams, a: &mut CpuBuffer, b: &CpuBuffer) -> Result<()> {
        let b = f32s(b, u(p.n), "add b")?;
        f32s_mut(a, u(p.n), "add a")?.iter_mut().zip(b).for_each(|(a, b)| *a += b);
        Ok(())
    }

    fn silu_mul(&self, p: &SiluMulParams, gate_up: &CpuBuffer, out: &mut CpuBuffer) -> Result<()> {
        let (r, d) = (u(p.rows), u(p.dim));
        let gu = f32s(gate_up, r * 2 * d, "silu_mul gate_up")?;
        let out = f32s_mut(out, r * d, "silu_mul out")?;
        for (o, row) in out.chunks_exact_mut(d).zip(gu.chunks_exact(2 * d)) {
            let (g, up) = row.split_at(d);
            for ((o, &g), &up) in o.iter_mut().zip(g).zip(up) {
                *o = g / (1.0 + (-g).exp()) * up;
            }
        }
        Ok(())
    }

    fn gelu_tanh_mul(&self, p: &GeluTanhMulParams, gate_up: &CpuBuffer, out: &mut CpuBuffer) -> Result<()> {
        let (r, d) = (u(p.rows), u(p.dim));
        let gu = f32s(gate_up, r * 2 * d, "gelu_tanh_mul gate_up")?;
        let out = f32s_mut(out, r * d, "gelu_tanh_mul out")?;
        for (o, row) in out.chunks_exact_mut(d).zip(gu.chunks_exact(2 * d)) {
            let (g, up) = row.split_at(d);
            for ((o, &g), &up) in o.iter_mut().zip(g).zip(up) {
                let t = (0.797_884_6_f32 * (g + 0.044715 * g * g * g)).tanh();
                *o = 0.5 * g * (1.0 + t) * up;
            }
        }
        Ok(())
    }

    fn head_rmsnorm(&self, p: &HeadRmsnormParams, x: &mut CpuBuffer, w: &CpuBuffer) -> Result<()> {
        let (r, nh, hd, stride) = (u(p.rows), u(p.n_heads), u(p.head_dim), u(p.row_stride));
        if nh * hd > stride {
            return Err(err("head_rmsnorm: the heads do not fit in a row"));
        }
        let w = f32s(w, nh * hd, "head_rmsnorm w")?;
        let x = f32s_mut(x, r * stride, "head_rmsnorm x")?;
        for row in x.chunks_exact_mut(stride.max(1)).take(r) {
            for (seg, wh) in row[..nh * hd].chunks_exact_mut(hd.max(1)).zip(w.chunks_exact(hd.max(1))) {
                let v = seg.to_vec();
                ops::rmsnorm(&v, wh, seg, hd, p.eps);
            }
        }
        Ok(())
    }

    fn scale(&self, p: &ScaleParams, x: &mut CpuBuffer) -> Result<()> {
        f32s_mut(x, u(p.n), "scale x")?.iter_mut().for_each(|v| *v *= p.scale);
        Ok(())
    }

    fn gather_rows(&self, p: &GatherRowsParams, src: &CpuBuffer, rows: &CpuBuffer, out: &mut CpuBuffer) -> Result<()> {
        let (n, d) = (u(p.n_out), u(p.dim));
        let src = f32s(src, u(p.n_src) * d, "gather_rows src")?;
        let rows = u32s(rows, n, "gather_rows rows")?;
        if rows.iter().any(|&r| r >= p.n_src) {
            return Err(err("gather_rows: row index out of range"));
        }
        let out = f32s_mut(out, n * d, "gather_rows out")?;
        for (o, &r) in out.chunks_exact_mut(d).zip(rows) {
            o.copy_from_slice(&src[u(r) * d..(u(r) + 1) * d]);
        }
        Ok(())
    }

    fn mean_rows(&self, p: &MeanRowsParams, src: &CpuBuffer, indptr: &CpuBuffer, out: &mut CpuBuffer) -> Result<()> {
        let (n, d) = (u(p.n_out), u(p.dim));
        let src = f32s(src, u(p.n_src) * d, "mean_rows src")?;
        let ip = u32s(indptr, n + 1, "mean_rows indptr")?;
        if ip.windows(2).any(|w| w[0] > w[1]) || ip[n] > p.n_src {
            return Err(err("mean_rows: indptr must be non-decreasing and at most n_src"));
        }
        let out = f32s_mut(out, n * d, "mean_rows out")?;
        for (i, o) in out.chunks_exact_mut(d).enumerate() {
            let (a, b) = (u(ip[i]), u(ip[i + 1]));
            o.fill(0.0);
            for row in src[a * d..b * d].chunks_exact(d) {
                o.iter_mut().zip(row).for_each(|(o, &x)| *o += x);
            }
            if b > a {
                o.iter_mut().for_each(|o| *o /= (b - a) as f32);
            }
        }
        Ok(())
    }

    fn rope_append_kv(
        &self,
        p: &RopeAppendKvParams,
        qkv: &CpuBuffer,
        meta: &RopeAppendMeta<Self>,
        q: &mut CpuBuffer,
        kv: LayerKvMut<Self>,
    ) -> Result<()> {
        kvops::rope_append_kv(p, qkv, meta, q, kv)
    }

    fn prefill_attention(
        &self,
        p: &AttentionParams,
        q: &CpuBuffer,
        q_indptr: &CpuBuffer,
        kv: LayerKv<Self>,
        meta: &PagedMeta<Self>,
        blocks: Option<&BlockPages<Self>>,
        out: &mut CpuBuffer,
    ) -> Result<()> {
        attention::prefill_attention(p, q, q_indptr, kv, meta, blocks, out)
    }

    fn sparse_decode_attention(
        &self,
        p: &AttentionParams,
        q: &CpuBuffer,
        kv: LayerKv<Self>,
        meta: &PagedMeta<Self>,
        pages: &HeadPages<Self>,
        out: &mut CpuBuffer,
    ) -> Result<()> {
        attention::sparse_decode_attention(p, q, kv, meta, pages, out)
    }

    fn page_select(
        &self,
        p: &PageSelectParams,
        q: &CpuBuffer,
        kv: LayerKv<Self>,
        meta: &PagedMeta<Self>,
        seq_slot: &CpuBuffer,
        select_mask: &CpuBuffer,
        out: SelectedMut<Self>,
    ) -> Result<()> {
        kvops::page_select(p, q, kv, meta, seq_slot, select_mask, out)
    }

    fn antidiagonal_score(
        &self,
        p: &AntidiagonalParams,
        q: &CpuBuffer,
        kv: LayerKv<Self>,
        meta: &PagedMeta<Self>,
        blocks: &BlockRows<Self>,
        scores: &mut CpuBuffer,
    ) -> Result<()> {
        blockscore::antidiagonal_score(p, q, kv, meta, blocks, scores)
    }

    fn page_top_k(
        &self,
        p: &PageTopKParams,
        scores: &CpuBuffer,
        page_indptr: &CpuBuffer,
        seq_slot: &CpuBuffer,
        select_mask: &CpuBuffer,
        out: SelectedMut<Self>,
    ) -> Result<()> {
        blockscore::page_top_k(p, scores, page_indptr, seq_slot, select_mask, out)
    }

    fn lambda_mass(
        &self,
        p: &LambdaMassParams,
        q: &CpuBuffer,
        kv: LayerKv<Self>,
        meta: &PagedMeta<Self>,
        out: &mut CpuBuffer,
    ) -> Result<()> {
        attention::lambda_mass(p, q, kv, meta, out)
    }

    fn fill_random(&self, p: &FillRandomParams, out: &mut CpuBuffer) -> Result<()> {
        if p.dtype != 0 {
            return Err(err("fill_random: the CPU backend stores f32 only"));
        }
        if let CpuBuffer::Bytes(_, bytes) = out {
            // An 8-bit KV pool is filled as f32 words (benchmark data).
            let n = u(p.n);
            if bytes.len() < 4 * n {
                return Err(err("fill_random: the 8-bit pool is smaller than n f32 words"));
            }
            for (i, w) in bytes[..4 * n].chunks_exact_mut(4).enumerate() {
                w.copy_from_slice(&fill_random_value(p.seed, i as u32, p.scale, p.offset).to_le_bytes());
            }
            return Ok(());
        }
        let out = f32s_mut(out, u(p.n), "fill_random out")?;
        for (i, o) in out.iter_mut().enumerate() {
            *o = fill_random_value(p.seed, i as u32, p.scale, p.offset);
        }
        Ok(())
    }

    fn argmax(&self, p: &ArgmaxParams, x: &CpuBuffer, out: &mut CpuBuffer) -> Result<()> {
        let (r, n) = (u(p.rows), u(p.n));
        let x = f32s(x, r * n, "argmax x")?;
        let out = match out {
            CpuBuffer::U32(v) if v.len() >= r => &mut v[..r],
            _ => return Err(err("argmax: out must be a u32 buffer of `rows` elements")),
        };
        for (o, row) in out.iter_mut().zip(x.chunks_exact(n.max(1))) {
            *o = crate::backend::reference::sample::argmax(row);
        }
        Ok(())
    }

    fn sample(&self, p: &SampleParams, logits: &CpuBuffer, settings: &CpuBuffer, out: &mut CpuBuffer) -> Result<()> {
        use crate::backend::reference::sample::{RowSampling, SampleScratch, sample_row_with};
        let (r, n) = (u(p.rows), u(p.n));
        let x = f32s(logits, r * n, "sample logits")?;
        let settings = match settings {
            CpuBuffer::U32(v) if v.len() >= 4 * r => &v[..4 * r],
            _ => return Err(err("sample: settings must be a u32 buffer of 4 x `rows` elements")),
        };
        let out = match out {
            CpuBuffer::U32(v) if v.len() >= r => &mut v[..r],
            _ => return Err(err("sample: out must be a u32 buffer of `rows` elements")),
        };
        let mut scratch = SampleScratch::default();
        for (i, o) in out.iter_mut().enumerate() {
            let w = [settings[4 * i], settings[4 * i + 1], settings[4 * i + 2], settings[4 * i + 3]];
            let (s, u) = RowSampling::from_words(w);
            *o = sample_row_with(&mut scratch, &x[i * n..(i + 1) * n], &s, u);
        }
        Ok(())
    }
}

#[cfg(test)]
mod alloc_tests {
    use super::*;

    /// An allocation the system refuses is an error, not an abort; small ones are zeros.
    #[test]
    fn alloc_refusal_is_an_error() {
        assert!(zeroed::<f32>(1 << 60).is_err());
        assert!(zeroed::<u8>(usize::MAX).is_err());
        assert_eq!(zeroed::<u32>(3).unwrap(), vec![0, 0, 0]);
        assert!(zeroed::<f32>(0).unwrap().is_empty());
    }
}

#[cfg(test)]
mod accumulate_tests {
    use super::*;

    /// `MatmulParams::accumulate` adds the product to what out held, exactly the plain product
    /// plus those values (the one f32 add), and leaves every other element alone: a dense and a
    /// strided out, f32 and quantized (int8 row) weights, with and without bias.
    #[test]
    fn accumulate_is_the_product_plus_out() {
        let be = CpuBackend::new();
        let mut seed = 0x9e37_79b9u32;
        let mut rnd = |n: usize| -> Vec<f32> {
            (0..n)
                .map(|_| {
                    seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
                })
                .collect()
        };
        let (m, n, k) = (5, 7, 64);
        let x = be.upload_f32(DType::F32, rnd(m * k)).unwrap();
        let wf = rnd(n * k);
        let b = be.upload_f32(DType::F32, rnd(n)).unwrap();
        // int8 rows: n x k codes, then n f32 scales.
        let mut q: Vec<u8> = wf.iter().map(|v| ((v * 250.0) as i8) as u8).collect();
        q.extend(rnd(n).iter().flat_map(|s| (s.abs() + 0.01).to_le_bytes()));
        let ws = [be.upload_f32(DType::F32, wf).unwrap(), be.upload_weight(DType::I8Row, n, k, &q).unwrap()];
        for w in &ws {
            for (ldo, off, bias) in [(n, 0, false), (n, 0, true), (11, 3, true)] {
                let p = MatmulParams { ldo: ldo as u32, out_off: off as u32, ..MatmulParams::new(m, n, k, bias) };
                let len = p.out_len() + 2;
                let base = rnd(len);
                let mut plain = be.upload_f32(DType::F32, vec![f32::NAN; len]).unwrap();
                be.matmul(&p, &x, w, bias.then_some(&b), &mut plain).unwrap();
                let mut acc = be.upload_f32(DType::F32, base.clone()).unwrap();
                let pa = MatmulParams { accumulate: 1, ..p };
                be.matmul(&pa, &x, w, bias.then_some(&b), &mut acc).unwrap();
                let (plain, acc) = (be.download_f32(&plain, 0, len).unwrap(), be.download_f32(&acc, 0, len).unwrap());
                for i in 0..len {
                    let want = if plain[i].is_nan() { base[i] } else { base[i] + plain[i] };
                    assert_eq!(acc[i].to_bits(), want.to_bits(), "element {i} (ldo {ldo}, {:?})", be.dtype(w));
                }
            }
        }
    }
}
