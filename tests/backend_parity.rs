//! Every backend op against the CPU reference: ONE test per op, named as the op (trait method =
//! `shaders/<op>.wgsl` = `cuda/<op>.cu` = test name), written once generic over the backend and
//! instantiated per backend by `parity_tests!` (tests/parity/macros.rs), with the KV / weight
//! dtype and head_dim as axes of the macro (`cuda::sparse_decode_attention::kv_bf16_hd128`; an
//! axis value the backend does not store is skipped with a message). Inputs are random (fresh
//! seed each run, printed), outputs are poisoned (NaN / 0xFFFFFFFF) before the op runs, and each
//! comparison has a named tolerance per dtype (`kv_tols`).
//!
//! This file holds the harness (the CPU/backend pair, the KV cache pair and its appends); the op
//! tests live in tests/parity/: elementwise.rs (embed, matmul, norms, elementwise, argmax,
//! fill_random, write_at), gemma_ops.rs, sample.rs, kv.rs (rope_append_kv, lambda_mass, KV swap)
//! attention.rs (prefill_attention, sparse_decode_attention, page_select) and blocks.rs
//! (antidiagonal_score, page_top_k).
//!
//! wgpu: runs on whatever adapter is found (Mesa's lavapipe in CI). Without an adapter the wgpu
//! tests are skipped, unless LSERVE_REQUIRE_WGPU=1, which makes them fail instead (CI sets it).
//! cuda: runs on CUDA device 0; skipped without one unless LSERVE_REQUIRE_CUDA=1 (scripts/gpu_run.sh).

mod common;
#[macro_use]
#[path = "parity/macros.rs"]
mod macros;
#[path = "parity/attention.rs"]
mod attention;
#[path = "parity/blocks.rs"]
mod blocks;
#[path = "parity/elementwise.rs"]
mod elementwise;
#[path = "parity/gemma_ops.rs"]
mod gemma_ops;
#[path = "parity/kv.rs"]
mod kv;
#[path = "parity/sample.rs"]
mod sample;

pub use attention::*;
pub use blocks::*;
use common::naive::Rng;
pub use elementwise::*;
pub use gemma_ops::*;
pub use kv::*;
use lserve::backend::cpu::CpuBackend;
use lserve::backend::*;
use lserve::kv::{CacheShape, HeadLayout, KvCache, SeqPages};
pub use sample::test_sample;

/// Max |a-b| allowed relative to max(1, |b|) per comparison kind.
const TOL_ELEMENTWISE: f32 = 1e-5;
const TOL_REDUCTION: f32 = 1e-4;
/// Quantized weights where the backend multiplies in 16 bits (x and the dequantized weights may
/// be rounded to bf16: ~2^-9 relative each, over a k-term dot product).
const TOL_QUANT: f32 = 2e-2;
pub const TOL_ATTENTION: f32 = 2e-4;
/// With a 16-bit KV cache on the backend (the CPU keeps f32): stored keys/values are rounded, so
/// pools compare within the dtype's rounding and attention outputs within its effect.
const TOL_KV_BF16: f32 = 4e-3;
const TOL_KV_F16: f32 = 5e-4;
const TOL_ATTENTION_KV_BF16: f32 = 3e-2;
const TOL_ATTENTION_KV_F16: f32 = 5e-3;
/// 8-bit KV (int8, fp8): the CPU stores the same dtype, so pools, scales and summaries compare
/// bit for bit; attention reads identical dequantized values and differs only by summation order
/// and where the scale multiplies.
const TOL_KV8: f32 = 0.0;
const TOL_ATTENTION_KV8: f32 = 5e-4;

/// (pool, attention) tolerances for a backend KV dtype.
pub fn kv_tols(kvd: DType) -> (f32, f32) {
    match kvd {
        DType::BF16 => (TOL_KV_BF16, TOL_ATTENTION_KV_BF16),
        DType::F16 => (TOL_KV_F16, TOL_ATTENTION_KV_F16),
        DType::I8 | DType::F8E4M3 => (TOL_KV8, TOL_ATTENTION_KV8),
        _ => (TOL_ELEMENTWISE, TOL_ATTENTION),
    }
}

/// The KV dtype the CPU reference stores opposite a backend's `kvd`: the same for the 8-bit
/// types (the CPU defines their bytes), else f32.
pub fn cpu_kv(kvd: DType) -> DType {
    if kvd.is_kv8() { kvd } else { DType::F32 }
}

/// Whether the backend stores KV in `kvd` (else the axis is skipped, with a message).
pub fn has_kv<B: Backend>(gpu: &B, kvd: DType) -> bool {
    let ok = gpu.caps().kv_dtypes.contains(&kvd);
    if !ok {
        eprintln!("skipped: {} stores no {kvd:?} KV", gpu.caps().name);
    }
    ok
}

/// Whether the backend stores weights in `dtype` (else the axis is skipped, with a message).
pub fn has_weights<B: Backend>(gpu: &B, dtype: DType) -> bool {
    let ok = gpu.caps().weight_dtypes.contains(&dtype);
    if !ok {
        eprintln!("skipped: {} stores no {dtype:?} weights", gpu.caps().name);
    }
    ok
}

pub fn close(name: &str, got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{name}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let err = (g - w).abs() / w.abs().max(1.0);
        assert!(err <= tol || (g.is_nan() && w.is_nan()), "{name}[{i}]: got {g}, want {w} (tol {tol})");
    }
}

pub struct Pair<'a, B: Backend> {
    pub gpu: &'a B,
    pub cpu: CpuBackend,
    pub rng: Rng,
}

impl<B: Backend> Pair<'_, B> {
    pub fn f32s(&mut self, n: usize, scale: f64) -> Vec<f32> {
        self.rng.normal_vec(n, scale)
    }
    /// The same f32 data on both backends (weights rounded to `dtype` first).
    pub fn up(&self, dtype: DType, data: &[f32]) -> (B::Buffer, <CpuBackend as Backend>::Buffer) {
        let rounded = round_to(dtype, data);
        (self.gpu.upload_f32(dtype, data.to_vec()).unwrap(), self.cpu.upload_f32(DType::F32, rounded).unwrap())
    }
    pub fn up_u32(&self, data: &[u32]) -> (B::Buffer, <CpuBackend as Backend>::Buffer) {
        (self.gpu.upload_u32(data).unwrap(), self.cpu.upload_u32(data).unwrap())
    }
    /// Random data (normal-ish, `scale`) uploaded to both.
    pub fn rand(&mut self, dtype: DType, n: usize, scale: f64) -> (B::Buffer, <CpuBackend as Backend>::Buffer) {
        let data = self.f32s(n, scale);
        self.up(dtype, &data)
    }
    /// Poisoned f32 outputs of `n` elements.
    pub fn out(&self, n: usize) -> (B::Buffer, <CpuBackend as Backend>::Buffer) {
        self.up(DType::F32, &vec![f32::NAN; n])
    }
    pub fn out_u32(&self, n: usize) -> (B::Buffer, <CpuBackend as Backend>::Buffer) {
        self.up_u32(&vec![u32::MAX; n])
    }
    pub fn check(&self, name: &str, b: &(B::Buffer, <CpuBackend as Backend>::Buffer), n: usize, tol: f32) {
        let got = self.gpu.download_f32(&b.0, 0, n).unwrap();
        let want = self.cpu.download_f32(&b.1, 0, n).unwrap();
        close(name, &got, &want, tol);
    }
    pub fn check_u32(&self, name: &str, b: &(B::Buffer, <CpuBackend as Backend>::Buffer), n: usize) {
        let got = self.gpu.download_u32(&b.0, 0, n).unwrap();
        let want = self.cpu.download_u32(&b.1, 0, n).unwrap();
        assert_eq!(got, want, "{name}");
    }
}

pub fn pair<B: Backend>(gpu: &B) -> Pair<'_, B> {
    Pair { gpu, cpu: CpuBackend::new(), rng: Rng(common::seed() | 1) }
}

/// A one-layer KV cache on both backends with the same layout, and the same admitted sequence.
pub struct KvPair<B: Backend> {
    pub gpu: KvCache<B>,
    pub cpu: KvCache<CpuBackend>,
    pub seq: SeqPages,
    /// Append with zero inverse frequencies (RoPE the identity times attention_scaling, exact on
    /// every backend), so that 8-bit pools, whose codes jump where a rotated key differs by one
    /// ulp between backends' sin/cos, can be compared bit for bit.
    pub rope_identity: bool,
    /// The dtype qkv goes to the backend's rope_append_kv in: f32, or a 16-bit one of
    /// [`out16_dtypes`] (the reference gets the same values in f32).
    pub qkv_dtype: DType,
}

/// The backend's cache stores `kvd`; the CPU's [`cpu_kv`] of it.
pub fn kv_pair<B: Backend>(
    t: &Pair<B>,
    streaming: Vec<bool>,
    (ps, lp, hd): (usize, usize, usize),
    kvd: DType,
) -> KvPair<B> {
    let shape = CacheShape {
        num_layers: 1,
        n_kv_heads: streaming.len(),
        head_dim: hd,
        page_size: ps,
        logical_page: lp,
        num_pages: 24,
        max_seqs: 2,
        ring_tokens: if streaming.iter().any(|&s| s) { 2 * ps } else { 0 },
        sink: 4,
        sel_stride: 6,
        layout: HeadLayout { streaming: vec![streaming] },
        kv_dtype: DType::F32,
    };
    kv_pair_shape(t, shape, kvd)
}

/// A cache pair of any (one-layer) shape; slot 0 is taken by another sequence, `seq` is slot 1.
pub fn kv_pair_shape<B: Backend>(t: &Pair<B>, shape: CacheShape, kvd: DType) -> KvPair<B> {
    let mut gpu = KvCache::new(t.gpu, CacheShape { kv_dtype: kvd, ..shape.clone() }).unwrap();
    let mut cpu = KvCache::new(&t.cpu, CacheShape { kv_dtype: cpu_kv(kvd), ..shape }).unwrap();
    let _ = (gpu.admit().unwrap(), cpu.admit().unwrap()); // slot 0 taken by another sequence
    let seq = gpu.admit().unwrap();
    assert_eq!(seq, cpu.admit().unwrap());
    KvPair { gpu, cpu, seq, rope_identity: kvd.is_kv8(), qkv_dtype: DType::F32 }
}

/// Append `n` tokens with random qkv and RoPE at their positions on both backends; returns the
/// rotated q of the step on both.
pub fn append<B: Backend>(
    t: &mut Pair<B>,
    kv: &mut KvPair<B>,
    n: usize,
    nh: usize,
) -> (B::Buffer, <CpuBackend as Backend>::Buffer) {
    let width = (nh + 2 * kv.gpu.shape.n_kv_heads) * kv.gpu.shape.head_dim;
    let data = t.f32s(n * width, 1.0);
    append_data(t, kv, n, nh, &data)
}

/// [`append`] of the given qkv rows `[n][(nh + 2 n_kv) head_dim]`.
pub fn append_data<B: Backend>(
    t: &mut Pair<B>,
    kv: &mut KvPair<B>,
    n: usize,
    nh: usize,
    data: &[f32],
) -> (B::Buffer, <CpuBackend as Backend>::Buffer) {
    let s = kv.gpu.shape.clone();
    let (n_kv, hd) = (s.n_kv_heads, s.head_dim);
    kv.gpu.reserve(&mut kv.seq, n).unwrap();
    let mut seq_cpu = kv.seq.clone();
    seq_cpu.pages.clear();
    seq_cpu.len = 0;
    assert_eq!(data.len(), n * (nh + 2 * n_kv) * hd);
    let qkv = t.up(kv.qkv_dtype, data);
    let pos: Vec<u32> = (kv.seq.len..kv.seq.len + n).map(|p| p as u32).collect();
    let inv: Vec<f32> =
        (0..hd / 2).map(|i| if kv.rope_identity { 0.0 } else { 10000f32.powf(-2.0 * i as f32 / hd as f32) }).collect();
    let bufs = (
        t.up_u32(&pos),
        t.up_u32(&kv.gpu.slots(&kv.seq, kv.seq.len, n)),
        t.up_u32(&kv.gpu.ring_slots(&kv.seq, kv.seq.len, n)),
        t.up(DType::F32, &inv),
    );
    let p = RopeAppendKvParams::new(&kv.gpu.geometry(0), n, nh, 1.25);
    let mut q = t.out(n * nh * hd);
    let mg = RopeAppendMeta { positions: &bufs.0.0, slots: &bufs.1.0, ring_slots: &bufs.2.0, inv_freq: &bufs.3.0 };
    let mc = RopeAppendMeta { positions: &bufs.0.1, slots: &bufs.1.1, ring_slots: &bufs.2.1, inv_freq: &bufs.3.1 };
    t.gpu.rope_append_kv(&p, &qkv.0, &mg, &mut q.0, kv.gpu.layers[0].view_mut()).unwrap();
    t.cpu.rope_append_kv(&p, &qkv.1, &mc, &mut q.1, kv.cpu.layers[0].view_mut()).unwrap();
    kv.seq.len += n;
    q
}

pub fn download_u32_all<B: Backend>(be: &B, b: &B::Buffer) -> Vec<u32> {
    be.download_u32(b, 0, be.len(b)).unwrap()
}

pub fn download_pool<B: Backend>(be: &B, b: &B::Buffer) -> Vec<f32> {
    be.download_f32(b, 0, be.len(b)).unwrap()
}

pub fn download_raw_all<B: Backend>(be: &B, b: &B::Buffer) -> Vec<u8> {
    be.download_raw(b, 0, be.len(b) * be.dtype(b).size()).unwrap()
}

/// Device copies of the sequence's page metadata on both backends.
pub fn paged<B: Backend>(t: &Pair<B>, seq: &SeqPages) -> [(B::Buffer, <CpuBackend as Backend>::Buffer); 4] {
    [
        t.up_u32(&[0, seq.pages.len() as u32]),
        t.up_u32(&seq.pages),
        t.up_u32(&[seq.len as u32]),
        t.up_u32(if seq.ring.is_empty() { &[0] } else { &seq.ring }),
    ]
}

pub fn attn_params<B: Backend>(kv: &KvPair<B>, n_tokens: usize, nh: usize, window: u32) -> AttentionParams {
    let s = &kv.gpu.shape;
    AttentionParams {
        num_seqs: 1,
        n_tokens: n_tokens as u32,
        n_heads: nh as u32,
        n_kv_heads: s.n_kv_heads as u32,
        head_dim: s.head_dim as u32,
        page_size: s.page_size as u32,
        num_pages: s.num_pages as u32,
        scale: 0.3,
        window,
        sink: 4,
        local: 7,
        ring_tokens: s.ring_tokens as u32,
        n_ret: s.layout.n_ret(0) as u32,
        n_str: s.layout.n_str(0) as u32,
        num_str_pages: kv.gpu.num_str_pages() as u32,
        sel_stride: s.sel_stride as u32,
        ..Default::default()
    }
}

/// The 16-bit dtypes the backend's matmul writes for some weights at a prefill's row count
/// (`Backend::matmul_out16_dtype`: weights of the dtype itself), which its silu_mul and
/// rope_append_kv then take as input.
pub fn out16_dtypes<B: Backend>(gpu: &B) -> Vec<DType> {
    [DType::F16, DType::BF16]
        .into_iter()
        .filter(|&d| gpu.upload_f32(d, vec![0.0; 64]).is_ok_and(|w| gpu.matmul_out16_dtype(&w, 128) == Some(d)))
        .collect()
}

/// One unit in the last place of a 16-bit `dtype`, relative: bf16 keeps 8 significant bits (a
/// unit is 2^-7 of the value at most), f16 11 (2^-10).
pub fn ulp16(dtype: DType) -> f32 {
    if dtype == DType::BF16 { 2f32.powi(-7) } else { 2f32.powi(-10) }
}

/// A backend's 16-bit out `got` against the reference's f32 values `want` rounded to `dtype`,
/// within `tol` plus one unit in the last place (a sum in another order may round the other way).
pub fn close16(name: &str, dtype: DType, got: &[f32], want: &[f32], tol: f32) {
    close(&format!("{name} out {dtype:?}"), got, &round_to(dtype, want), tol + ulp16(dtype));
}

/// `data` rounded to a 16-bit `dtype` (nearest even) and back; other dtypes leave it as it is.
pub fn round_to(dtype: DType, data: &[f32]) -> Vec<f32> {
    match dtype {
        DType::F16 => data.iter().map(|&x| half::f16::from_f32(x).to_f32()).collect(),
        DType::BF16 => data.iter().map(|&x| half::bf16::from_f32(x).to_f32()).collect(),
        _ => data.to_vec(),
    }
}

// The CPU against itself checks the harness (poisoning, comparisons) on every machine.
parity_tests!(cpu, Some(lserve::backend::cpu::CpuBackend::new()));

// wgpu with the optional features it finds (SHADER_F16, SUBGROUP: lavapipe and NVIDIA have both),
// and with both turned off: the path of adapters that lack them.
#[cfg(feature = "wgpu")]
parity_tests!(wgpu, crate::common::wgpu_backend());
#[cfg(feature = "wgpu")]
parity_tests!(wgpu_plain, crate::common::wgpu_backend_with(lserve::backend::wgpu::WgpuOptions::parse("none").unwrap()));

#[cfg(feature = "cuda")]
parity_tests!(cuda, crate::common::cuda_backend());

/// Every kernel that can take a 16-bit KV prefill at head_dim 128 on an sm_90 device, whatever
/// LSERVE_CUDA_PREFILL_WGMMA says (`cuda::prefill_attention` runs the default, `_ws`): the plain
/// wgmma kernel (also the fallback where the driver cannot make tensor maps), `_tma` and the
/// mma.sync kernel. Elsewhere each runs the mma.sync kernel.
#[cfg(feature = "cuda")]
fn cuda_prefill(k: lserve::backend::cuda::HopperPrefill) -> Option<lserve::backend::cuda::CudaBackend> {
    crate::common::cuda_backend_with(lserve::backend::cuda::CudaOptions {
        hopper_prefill: Some(k),
        ..Default::default()
    })
}
#[cfg(feature = "cuda")]
prefill_attention_tests!(cuda_prefill_plain, crate::cuda_prefill(lserve::backend::cuda::HopperPrefill::Plain));
#[cfg(feature = "cuda")]
prefill_attention_tests!(cuda_prefill_tma, crate::cuda_prefill(lserve::backend::cuda::HopperPrefill::Tma));
#[cfg(feature = "cuda")]
prefill_attention_tests!(cuda_prefill_mma, crate::cuda_prefill(lserve::backend::cuda::HopperPrefill::Mma));
#[cfg(feature = "cuda")]
prefill_attention_tests!(cuda_prefill_ws, crate::cuda_prefill(lserve::backend::cuda::HopperPrefill::Ws));

/// The dequantize + cuBLAS path (m > 64) in chunks of whole 128-row tiles (a 16 KiB scratch;
/// `ops_matmul::dequant_rows`): the tests' 300-row matrices take chunks of 128, 128 and 44 (256
/// and 44 at k = 32), each its own dequantization span and GEMM writing its column block of out.
#[cfg(feature = "cuda")]
fn cuda_dequant_chunks() -> Option<lserve::backend::cuda::CudaBackend> {
    let opts = lserve::backend::cuda::CudaOptions { dequant_bytes: Some(16 << 10), ..Default::default() };
    crate::common::cuda_backend_with(opts)
}
#[cfg(feature = "cuda")]
matmul_quant_tests!(cuda_dequant_chunks, crate::cuda_dequant_chunks());

/// The batch-1 quantized GEMV in each mode whatever LSERVE_CUDA_MMV says (`cuda::matmul` takes
/// the default, `MmvMode::Auto`, which picks one per weight format): x quantized in every block
/// (`cuda_mmv_inblock`); x quantized once per call (`MmvMode::Pre`) on the in-block grid (one row
/// group per warp), and
/// on a grid capped at 2 blocks (`cuda_mmv_pre_loop`), where the warps loop over row groups of
/// the format's most rows per warp (2 for Q4_K / Q5_K, 4 for int8 rows) with partial last
/// groups: the multi-row path the test's small n never reach on the in-block grid of a large GPU.
#[cfg(feature = "cuda")]
fn cuda_mmv(mode: lserve::backend::cuda::MmvMode) -> Option<lserve::backend::cuda::CudaBackend> {
    crate::common::cuda_backend_mmv(Some(mode))
}
#[cfg(feature = "cuda")]
matmul_quant_tests!(cuda_mmv_inblock, crate::cuda_mmv(lserve::backend::cuda::MmvMode::InBlock));
#[cfg(feature = "cuda")]
matmul_quant_tests!(cuda_mmv_pre, crate::cuda_mmv(lserve::backend::cuda::MmvMode::Pre { max_grid: 0 }));
#[cfg(feature = "cuda")]
matmul_quant_tests!(cuda_mmv_pre_loop, crate::cuda_mmv(lserve::backend::cuda::MmvMode::Pre { max_grid: 2 }));
// x in registers (`MmvMode::Reg`: Q4_K, Q5_K and int8 rows where k allows, the other formats as
// `Pre`), x from the scratch or quantized by the lanes: on the default grid (one row group of 4
// per block at the tests' n), and on a grid of 2 blocks, whose warps loop over up to 38 row
// groups with a partial last one.
#[cfg(feature = "cuda")]
fn cuda_mmv_reg(max_grid: u32, lanes_quantize: bool) -> Option<lserve::backend::cuda::CudaBackend> {
    crate::cuda_mmv(lserve::backend::cuda::MmvMode::Reg { max_grid, lanes_quantize, bulk: false })
}
// The same with the rows streamed into shared memory by bulk copies (`bulk`, sm_90; elsewhere it
// runs the register kernels): on the default grid, and on 2 blocks, whose producer refills every
// stage several times (up to 38 groups over at most 8 stages).
#[cfg(feature = "cuda")]
fn cuda_mmv_bulk(max_grid: u32, lanes_quantize: bool) -> Option<lserve::backend::cuda::CudaBackend> {
    crate::cuda_mmv(lserve::backend::cuda::MmvMode::Reg { max_grid, lanes_quantize, bulk: true })
}
// The batch-1 decode step fused (`CudaOptions::fuse_decode`, whatever its default): every
// quantized matmul test with `matmul_prologue`'s cases on (`elementwise::matmul_prologue_cases`).
#[cfg(feature = "cuda")]
fn cuda_fuse_decode() -> Option<lserve::backend::cuda::CudaBackend> {
    crate::common::cuda_backend_with(lserve::backend::cuda::CudaOptions {
        fuse_decode: Some(true),
        ..Default::default()
    })
}
#[cfg(feature = "cuda")]
matmul_quant_tests!(cuda_fuse_decode, crate::cuda_fuse_decode());
#[cfg(feature = "cuda")]
matmul_quant_tests!(cuda_mmv_bulk, crate::cuda_mmv_bulk(0, false));
#[cfg(feature = "cuda")]
matmul_quant_tests!(cuda_mmv_bulk_loop, crate::cuda_mmv_bulk(2, false));
#[cfg(feature = "cuda")]
matmul_quant_tests!(cuda_mmv_bulkf, crate::cuda_mmv_bulk(0, true));
#[cfg(feature = "cuda")]
matmul_quant_tests!(cuda_mmv_bulkf_loop, crate::cuda_mmv_bulk(2, true));
#[cfg(feature = "cuda")]
matmul_quant_tests!(cuda_mmv_reg, crate::cuda_mmv_reg(0, false));
#[cfg(feature = "cuda")]
matmul_quant_tests!(cuda_mmv_reg_loop, crate::cuda_mmv_reg(2, false));
#[cfg(feature = "cuda")]
matmul_quant_tests!(cuda_mmv_regf, crate::cuda_mmv_reg(0, true));
#[cfg(feature = "cuda")]
matmul_quant_tests!(cuda_mmv_regf_loop, crate::cuda_mmv_reg(2, true));
