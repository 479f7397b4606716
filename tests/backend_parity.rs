//! Every backend op against the CPU reference: ONE test per op, named as the op (trait method =
//! `shaders/<op>.wgsl` = `cuda/<op>.cu` = test name), written once generic over the backend and
//! instantiated per backend by `parity_tests!`, with the KV / weight dtype and head_dim as axes
//! of the macro (`cuda::sparse_decode_attention::kv_bf16_hd128`; an axis value the backend does not
//! store is skipped with a message). Inputs are random (fresh seed each run, printed), outputs are
//! poisoned (NaN / 0xFFFFFFFF) before the op runs, and each comparison has a named tolerance per
//! dtype (`kv_tols`).
//!
//! wgpu: runs on whatever adapter is found (Mesa's lavapipe in CI). Without an adapter the wgpu
//! tests are skipped, unless LSERVE_REQUIRE_WGPU=1, which makes them fail instead (CI sets it).
//! cuda: runs on CUDA device 0; skipped without one unless LSERVE_REQUIRE_CUDA=1 (scripts/gpu_run.sh).

mod common;
#[macro_use]
#[path = "parity/macros.rs"]
mod macros;
#[path = "parity/sample.rs"]
mod sample;

use common::naive::Rng;
use lserve::backend::cpu::CpuBackend;
use lserve::backend::*;
use lserve::kv::{CacheShape, HeadLayout, KvCache, SeqPages};
pub use sample::test_sample;

/// Max |a-b| allowed relative to max(1, |b|) per comparison kind.
const TOL_ELEMENTWISE: f32 = 1e-5;
const TOL_REDUCTION: f32 = 1e-4;
const TOL_ATTENTION: f32 = 2e-4;
/// With a 16-bit KV cache on the backend (the CPU keeps f32): stored keys/values are rounded, so
/// pools compare within the dtype's rounding and attention outputs within its effect.
const TOL_KV_BF16: f32 = 4e-3;
const TOL_KV_F16: f32 = 5e-4;
const TOL_ATTENTION_KV_BF16: f32 = 3e-2;
const TOL_ATTENTION_KV_F16: f32 = 5e-3;

/// (pool, attention) tolerances for a backend KV dtype.
fn kv_tols(kvd: DType) -> (f32, f32) {
    match kvd {
        DType::BF16 => (TOL_KV_BF16, TOL_ATTENTION_KV_BF16),
        DType::F16 => (TOL_KV_F16, TOL_ATTENTION_KV_F16),
        _ => (TOL_ELEMENTWISE, TOL_ATTENTION),
    }
}

/// Whether the backend stores KV in `kvd` (else the axis is skipped, with a message).
fn has_kv<B: Backend>(gpu: &B, kvd: DType) -> bool {
    let ok = gpu.caps().kv_dtypes.contains(&kvd);
    if !ok {
        eprintln!("skipped: {} stores no {kvd:?} KV", gpu.caps().name);
    }
    ok
}

/// Whether the backend stores weights in `dtype` (else the axis is skipped, with a message).
fn has_weights<B: Backend>(gpu: &B, dtype: DType) -> bool {
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
        let rounded: Vec<f32> = match dtype {
            DType::F16 => data.iter().map(|&x| half::f16::from_f32(x).to_f32()).collect(),
            DType::BF16 => data.iter().map(|&x| half::bf16::from_f32(x).to_f32()).collect(),
            _ => data.to_vec(),
        };
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

pub fn test_embed<B: Backend>(gpu: &B, dtype: DType) {
    if !has_weights(gpu, dtype) {
        return;
    }
    let mut t = pair(gpu);
    {
        let (vocab, dim, n) = (50, 70, 13);
        let table = t.rand(dtype, vocab * dim, 1.0);
        let ids: Vec<u32> = (0..n).map(|i| ((i * 7 + 3) % vocab) as u32).collect();
        let ids = t.up_u32(&ids);
        let mut out = t.out(n * dim);
        let p = EmbedParams { n_tokens: n as u32, dim: dim as u32, vocab: vocab as u32, _pad: 0 };
        t.gpu.embed(&p, &table.0, &ids.0, &mut out.0).unwrap();
        t.cpu.embed(&p, &table.1, &ids.1, &mut out.1).unwrap();
        t.check(&format!("embed {dtype:?}"), &out, n * dim, 0.0);
    }
}

pub fn test_matmul<B: Backend>(gpu: &B, dtype: DType) {
    if !has_weights(gpu, dtype) {
        return;
    }
    let mut t = pair(gpu);
    // k % 8 == 0 with m <= 16 takes the subgroup GEMV for 16-bit weights where available: single
    // and multi-chunk x rows, odd word counts, rows not a multiple of the workgroup's 8.
    let shapes = [
        (1, 300, 1024),
        (5, 33, 2056),
        (16, 20, 136),
        (1, 300, 129),
        (2, 64, 576),
        (3, 96, 64),
        (6, 50, 130),
        (12, 70, 258),
        (17, 40, 64),
        (37, 100, 64),
        (130, 70, 200),
        (64, 128, 128),
    ];
    // Where the backend multiplies in 16 bits (Caps::matmul_x16_from), the reference gets x
    // rounded the same way, so the comparison stays one of summation order only.
    let x16_from = t.gpu.caps().matmul_x16_from;
    {
        for &(m, n, k) in &shapes {
            for bias in [false, true] {
                let xs = t.f32s(m * k, 1.0);
                let x = if dtype != DType::F32 && x16_from.is_some_and(|r| m >= r) {
                    let rounded = t.cpu.download_f32(&t.up(dtype, &xs).1, 0, m * k).unwrap();
                    (t.gpu.upload_f32(DType::F32, xs.clone()).unwrap(), t.cpu.upload_f32(DType::F32, rounded).unwrap())
                } else {
                    t.up(DType::F32, &xs)
                };
                let w = t.rand(dtype, n * k, 0.1);
                let b = t.rand(DType::F32, n, 1.0);
                let mut out = t.out(m * n);
                let p = MatmulParams { m: m as u32, n: n as u32, k: k as u32, has_bias: bias as u32 };
                t.gpu.matmul(&p, &x.0, &w.0, bias.then_some(&b.0), &mut out.0).unwrap();
                t.cpu.matmul(&p, &x.1, &w.1, bias.then_some(&b.1), &mut out.1).unwrap();
                t.check(&format!("matmul {dtype:?} {m}x{n}x{k} bias={bias}"), &out, m * n, TOL_REDUCTION);
            }
        }
    }
}

pub fn test_rmsnorm<B: Backend>(gpu: &B) {
    let mut t = pair(gpu);
    let (rows, dim) = (5, 576);
    let x = t.rand(DType::F32, rows * dim, 2.0);
    let w = t.rand(DType::F32, dim, 1.0);
    let p = RmsnormParams { rows: rows as u32, dim: dim as u32, eps: 1e-5, _pad: 0 };
    let mut out = t.out(rows * dim);
    t.gpu.rmsnorm(&p, &x.0, &w.0, &mut out.0).unwrap();
    t.cpu.rmsnorm(&p, &x.1, &w.1, &mut out.1).unwrap();
    t.check("rmsnorm", &out, rows * dim, TOL_REDUCTION);
}

pub fn test_add_rmsnorm<B: Backend>(gpu: &B) {
    let mut t = pair(gpu);
    let (rows, dim) = (5, 576);
    let x = t.rand(DType::F32, rows * dim, 2.0);
    let w = t.rand(DType::F32, dim, 1.0);
    let p = RmsnormParams { rows: rows as u32, dim: dim as u32, eps: 1e-5, _pad: 0 };
    let mut res = t.rand(DType::F32, rows * dim, 1.0);
    let mut out = t.out(rows * dim);
    t.gpu.add_rmsnorm(&p, &mut res.0, &x.0, &w.0, &mut out.0).unwrap();
    t.cpu.add_rmsnorm(&p, &mut res.1, &x.1, &w.1, &mut out.1).unwrap();
    t.check("add_rmsnorm out", &out, rows * dim, TOL_REDUCTION);
    t.check("add_rmsnorm residual", &res, rows * dim, TOL_ELEMENTWISE);
}

pub fn test_add<B: Backend>(gpu: &B) {
    let mut t = pair(gpu);
    let n = 1000;
    let mut a = t.rand(DType::F32, n, 1.0);
    let b = t.rand(DType::F32, n, 1.0);
    let p = AddParams { n: n as u32, ..Default::default() };
    t.gpu.add(&p, &mut a.0, &b.0).unwrap();
    t.cpu.add(&p, &mut a.1, &b.1).unwrap();
    t.check("add", &a, n, TOL_ELEMENTWISE);
}

pub fn test_silu_mul<B: Backend>(gpu: &B) {
    let mut t = pair(gpu);
    let (rows, dim) = (7, 300);
    let gu = t.rand(DType::F32, rows * 2 * dim, 3.0);
    let mut out = t.out(rows * dim);
    let p = SiluMulParams { rows: rows as u32, dim: dim as u32, ..Default::default() };
    t.gpu.silu_mul(&p, &gu.0, &mut out.0).unwrap();
    t.cpu.silu_mul(&p, &gu.1, &mut out.1).unwrap();
    t.check("silu_mul", &out, rows * dim, TOL_ELEMENTWISE);
}

pub fn test_gather_rows<B: Backend>(gpu: &B) {
    let mut t = pair(gpu);
    let src = t.rand(DType::F32, 20 * 33, 1.0);
    let rows = t.up_u32(&[19, 0, 7, 7, 3]);
    let mut out = t.out(5 * 33);
    let p = GatherRowsParams { n_out: 5, dim: 33, n_src: 20, _pad: 0 };
    t.gpu.gather_rows(&p, &src.0, &rows.0, &mut out.0).unwrap();
    t.cpu.gather_rows(&p, &src.1, &rows.1, &mut out.1).unwrap();
    t.check("gather_rows", &out, 5 * 33, 0.0);
}

pub fn test_argmax<B: Backend>(gpu: &B) {
    let mut t = pair(gpu);
    let (rows, n) = (4, 5000);
    let mut x = t.f32s(rows * n, 1.0);
    x[n + 10] = 9.0; // a tie in row 1: the lower index wins
    x[n + 4000] = 9.0;
    x[2 * n + 4999] = 7.0; // the last element
    let x = t.up(DType::F32, &x);
    let mut out = t.out_u32(rows);
    let p = ArgmaxParams { rows: rows as u32, n: n as u32, ..Default::default() };
    t.gpu.argmax(&p, &x.0, &mut out.0).unwrap();
    t.cpu.argmax(&p, &x.1, &mut out.1).unwrap();
    t.check_u32("argmax", &out, rows);
    assert_eq!(t.gpu.download_u32(&out.0, 0, rows).unwrap()[1..3], [10, 4999]);
}

/// A one-layer KV cache on both backends with the same layout, and the same admitted sequence.
pub struct KvPair<B: Backend> {
    pub gpu: KvCache<B>,
    pub cpu: KvCache<CpuBackend>,
    pub seq: SeqPages,
}

/// The backend's cache stores `kvd`; the CPU's f32.
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
    let mut cpu = KvCache::new(&t.cpu, CacheShape { kv_dtype: DType::F32, ..shape }).unwrap();
    let _ = (gpu.admit().unwrap(), cpu.admit().unwrap()); // slot 0 taken by another sequence
    let seq = gpu.admit().unwrap();
    assert_eq!(seq, cpu.admit().unwrap());
    KvPair { gpu, cpu, seq }
}

/// Append `n` tokens with random qkv and RoPE at their positions on both backends; returns the
/// rotated q of the step on both.
pub fn append<B: Backend>(
    t: &mut Pair<B>,
    kv: &mut KvPair<B>,
    n: usize,
    nh: usize,
) -> (B::Buffer, <CpuBackend as Backend>::Buffer) {
    let s = kv.gpu.shape.clone();
    let (n_kv, hd) = (s.n_kv_heads, s.head_dim);
    kv.gpu.reserve(&mut kv.seq, n).unwrap();
    let mut seq_cpu = kv.seq.clone();
    seq_cpu.pages.clear();
    seq_cpu.len = 0;
    let width = (nh + 2 * n_kv) * hd;
    let qkv = t.rand(DType::F32, n * width, 1.0);
    let pos: Vec<u32> = (kv.seq.len..kv.seq.len + n).map(|p| p as u32).collect();
    let inv: Vec<f32> = (0..hd / 2).map(|i| 10000f32.powf(-2.0 * i as f32 / hd as f32)).collect();
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

fn download_u32_all<B: Backend>(be: &B, b: &B::Buffer) -> Vec<u32> {
    be.download_u32(b, 0, be.len(b)).unwrap()
}

fn download_pool<B: Backend>(be: &B, b: &B::Buffer) -> Vec<f32> {
    be.download_f32(b, 0, be.len(b)).unwrap()
}

pub fn test_rope_append_kv<B: Backend>(gpu: &B, kvd: DType) {
    if !has_kv(gpu, kvd) {
        return;
    }
    let mut t = pair(gpu);
    for (ps, lp) in [(16, 4), (32, 32)] {
        let (nh, hd) = (6, 16);
        let (tol_pool, _) = kv_tols(kvd);
        let mut kv = kv_pair(&t, vec![false, true, false], (ps, lp, hd), kvd);
        // The ring holds 32 tokens, 4 of them sink: chunks of up to 28 never wrap onto themselves.
        for n in [5, 17, 1, 25, 28] {
            let q = append(&mut t, &mut kv, n, nh);
            t.check("rope_append_kv q", &q, n * nh * hd, TOL_ELEMENTWISE);
        }
        let (g, c) = (&kv.gpu.layers[0], &kv.cpu.layers[0]);
        for (name, gb, cb) in [("k", &g.k, &c.k), ("v", &g.v, &c.v), ("sk", &g.sk, &c.sk), ("sv", &g.sv, &c.sv)] {
            close(
                &format!("rope_append_kv {name} pool ({kvd:?})"),
                &download_pool(t.gpu, gb),
                &download_pool(&t.cpu, cb),
                tol_pool,
            );
        }
        // Summaries of logical pages that hold tokens (the rest are never read).
        let (gs, cs) = (download_pool(t.gpu, &g.summary), download_pool(&t.cpu, &c.summary));
        let (lpp, hd2) = (ps / lp, 2 * hd);
        for lpage in 0..kv.seq.len.div_ceil(lp) {
            let page = kv.seq.pages[lpage * lp / ps] as usize;
            for r in 0..2 {
                let at = ((page * 2 + r) * lpp + (lpage * lp % ps) / lp) * hd2;
                close("rope_append_kv summary", &gs[at..at + hd2], &cs[at..at + hd2], tol_pool);
            }
        }
    }
}

/// Device copies of the sequence's page metadata on both backends.
fn paged<B: Backend>(t: &Pair<B>, seq: &SeqPages) -> [(B::Buffer, <CpuBackend as Backend>::Buffer); 4] {
    [
        t.up_u32(&[0, seq.pages.len() as u32]),
        t.up_u32(&seq.pages),
        t.up_u32(&[seq.len as u32]),
        t.up_u32(if seq.ring.is_empty() { &[0] } else { &seq.ring }),
    ]
}

fn attn_params<B: Backend>(kv: &KvPair<B>, n_tokens: usize, nh: usize, window: u32) -> AttentionParams {
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
    }
}

/// head_dim 16: three short chained cases (window, streaming heads); 72, 128, 256: the long
/// ragged batch of [`prefill_attention_long`].
pub fn test_prefill_attention<B: Backend>(gpu: &B, kvd: DType, hd: usize) {
    if !has_kv(gpu, kvd) {
        return;
    }
    if hd != 16 {
        return prefill_attention_long(gpu, kvd, hd);
    }
    let mut t = pair(gpu);
    let cases = [(0, vec![false, true, false]), (9, vec![false, false, false]), (0, vec![true, true, true])];
    for (window, streaming) in cases {
        let nh = 6;
        let (_, tol) = kv_tols(kvd);
        let mut kv = kv_pair(&t, streaming, (16, 4, hd), kvd);
        append(&mut t, &mut kv, 20, nh);
        let n = 13; // a second chunk attends over the first and itself
        let q = append(&mut t, &mut kv, n, nh);
        let m = paged(&t, &kv.seq);
        let qi = t.up_u32(&[0, n as u32]);
        let p = attn_params(&kv, n, nh, window);
        let mut out = t.out(n * nh * hd);
        let mg = PagedMeta { page_indptr: &m[0].0, page_table: &m[1].0, kv_len: &m[2].0, ring_table: &m[3].0 };
        let mc = PagedMeta { page_indptr: &m[0].1, page_table: &m[1].1, kv_len: &m[2].1, ring_table: &m[3].1 };
        t.gpu.prefill_attention(&p, &q.0, &qi.0, kv.gpu.layers[0].view(), &mg, &mut out.0).unwrap();
        t.cpu.prefill_attention(&p, &q.1, &qi.1, kv.cpu.layers[0].view(), &mc, &mut out.1).unwrap();
        t.check(&format!("prefill_attention window {window} kv {kvd:?}"), &out, n * nh * hd, tol);
    }
}

/// Prefill at the tensor-core kernel's scale: head_dim 128, 72 (padded to 128) and 256, one
/// retrieval and one streaming KV head (two query heads each), a ragged batch of two sequences
/// (a 140-row chunk after a 300-token prefix, and a 100-row first chunk), so query tiles start
/// off the 64-key tile grid, span several key tiles, and the streaming head (sink 8, local 70)
/// skips whole tiles between its sink and its band; with and without a window.
fn prefill_attention_long<B: Backend>(gpu: &B, kvd: DType, hd: usize) {
    let mut t = pair(gpu);
    let (nh, ps, sink, local) = (4, 16, 8, 70);
    {
        let (_, tol) = kv_tols(kvd);
        let shape = CacheShape {
            num_layers: 1,
            n_kv_heads: 2,
            head_dim: hd,
            page_size: ps,
            logical_page: 4,
            num_pages: 48,
            max_seqs: 3,
            ring_tokens: 16 * ps, // holds sink + local + a 150-token chunk
            sink,
            sel_stride: 6,
            layout: HeadLayout { streaming: vec![vec![false, true]] },
            kv_dtype: DType::F32,
        };
        let mut kv = kv_pair_shape(&t, shape, kvd);
        append(&mut t, &mut kv, 150, nh);
        append(&mut t, &mut kv, 150, nh);
        let qa = append(&mut t, &mut kv, 140, nh);
        let seq_a = kv.seq.clone();
        kv.seq = kv.gpu.admit().unwrap();
        assert_eq!(kv.seq, kv.cpu.admit().unwrap());
        let qb = append(&mut t, &mut kv, 100, nh);
        let seqs = [&seq_a, &kv.seq];
        let row = nh * hd;
        let q = (
            concat_f32(t.gpu, &qa.0, 140 * row, &qb.0, 100 * row),
            concat_f32(&t.cpu, &qa.1, 140 * row, &qb.1, 100 * row),
        );
        let pages: Vec<u32> = seqs.iter().flat_map(|s| s.pages.iter().copied()).collect();
        let ring: Vec<u32> = seqs.iter().flat_map(|s| s.ring.iter().copied()).collect();
        let m = [
            t.up_u32(&[0, seq_a.pages.len() as u32, pages.len() as u32]),
            t.up_u32(&pages),
            t.up_u32(&[seq_a.len as u32, kv.seq.len as u32]),
            t.up_u32(&ring),
        ];
        let qi = t.up_u32(&[0, 140, 240]);
        let mg = PagedMeta { page_indptr: &m[0].0, page_table: &m[1].0, kv_len: &m[2].0, ring_table: &m[3].0 };
        let mc = PagedMeta { page_indptr: &m[0].1, page_table: &m[1].1, kv_len: &m[2].1, ring_table: &m[3].1 };
        for window in [0, 100] {
            let p = AttentionParams {
                num_seqs: 2,
                sink: sink as u32,
                local,
                scale: 1.0 / (hd as f32).sqrt(),
                ..attn_params(&kv, 240, nh, window)
            };
            let mut out = t.out(240 * row);
            t.gpu.prefill_attention(&p, &q.0, &qi.0, kv.gpu.layers[0].view(), &mg, &mut out.0).unwrap();
            t.cpu.prefill_attention(&p, &q.1, &qi.1, kv.cpu.layers[0].view(), &mc, &mut out.1).unwrap();
            t.check(&format!("prefill_attention_long hd {hd} window {window} kv {kvd:?}"), &out, 240 * row, tol);
        }
    }
}

/// A new f32 buffer holding the first `na` elements of `a`, then the first `nb` of `b`.
fn concat_f32<B: Backend>(be: &B, a: &B::Buffer, na: usize, b: &B::Buffer, nb: usize) -> B::Buffer {
    let v = [be.download_f32(a, 0, na).unwrap(), be.download_f32(b, 0, nb).unwrap()].concat();
    be.upload_f32(DType::F32, v).unwrap()
}

/// head_dim axis: 16 (half of a 32-dim K block in the wgpu kernel), 72 (two blocks and a partial
/// third) and 128, Llama's head size (a dim pair per thread, two key groups in the cp.async
/// kernel), for each KV dtype.
pub fn test_sparse_decode_attention<B: Backend>(gpu: &B, kvd: DType, hd: usize) {
    if has_kv(gpu, kvd) {
        decode_and_select(gpu, kvd, hd, Check::Decode);
    }
}

/// The selection of the chained decode scenario, per KV dtype and head_dim.
pub fn test_page_select<B: Backend>(gpu: &B, kvd: DType, hd: usize) {
    if has_kv(gpu, kvd) {
        decode_and_select(gpu, kvd, hd, Check::Select);
    }
}

/// Which op of the chained decode scenario a test compares (the other one still runs: page_select
/// is decode's setup).
#[derive(Clone, Copy, PartialEq)]
enum Check {
    Select,
    Decode,
}

/// With a 16-bit backend KV the page summaries differ by rounding, so the selections may too
/// (only the counts are compared then); the decode check always copies the CPU's selection to the
/// backend first, so it compares attention alone.
fn decode_and_select<B: Backend>(gpu: &B, kvd: DType, hd: usize, check: Check) {
    let mut t = pair(gpu);
    let (nh, ps, lp) = (6, 16, 4);
    let (_, tol) = kv_tols(kvd);
    let mut kv = kv_pair(&t, vec![false, true, false], (ps, lp, hd), kvd);
    for _ in 0..8 {
        append(&mut t, &mut kv, 20, nh); // the 32-token ring wraps across calls, never within one
    }
    let q = append(&mut t, &mut kv, 1, nh);
    let m = paged(&t, &kv.seq);
    let mg = PagedMeta { page_indptr: &m[0].0, page_table: &m[1].0, kv_len: &m[2].0, ring_table: &m[3].0 };
    let mc = PagedMeta { page_indptr: &m[0].1, page_table: &m[1].1, kv_len: &m[2].1, ring_table: &m[3].1 };
    let slot = t.up_u32(&[kv.seq.slot]);
    let mask = t.up_u32(&[1]);
    let ap = attn_params(&kv, 1, nh, 0);
    let sp = PageSelectParams {
        num_seqs: 1,
        n_heads: nh as u32,
        n_kv_heads: 3,
        head_dim: hd as u32,
        page_size: ps as u32,
        logical_page: lp as u32,
        num_pages: kv.gpu.shape.num_pages as u32,
        n_ret: 2,
        k_pages: 4,
        sel_stride: 6,
        ..Default::default()
    };
    {
        let (g, c) = (&mut kv.gpu.layers[0], &mut kv.cpu.layers[0]);
        let ((kvg, outg), (kvc, outc)) = (g.select_view(), c.select_view());
        t.gpu.page_select(&sp, &q.0, kvg, &mg, &slot.0, &mask.0, outg).unwrap();
        t.cpu.page_select(&sp, &q.1, kvc, &mc, &slot.1, &mask.1, outc).unwrap();
        let base = kv.seq.slot as usize * 2;
        let (gs, cs) = (
            t.gpu.download_u32(&g.selected, base * 6, 12).unwrap(),
            t.cpu.download_u32(&c.selected, base * 6, 12).unwrap(),
        );
        let (gc, cc) =
            (t.gpu.download_u32(&g.counts, base, 2).unwrap(), t.cpu.download_u32(&c.counts, base, 2).unwrap());
        if check == Check::Select {
            assert_eq!(gc, cc, "page_select counts");
            if kvd == DType::F32 {
                for r in 0..2 {
                    let k = cc[r] as usize;
                    assert_eq!(gs[r * 6..r * 6 + k], cs[r * 6..r * 6 + k], "page_select head {r}");
                }
            }
            return;
        }
        let (sel, cnt) = (download_u32_all(&t.cpu, &c.selected), download_u32_all(&t.cpu, &c.counts));
        t.gpu.write_u32(&mut g.selected, &sel).unwrap();
        t.gpu.write_u32(&mut g.counts, &cnt).unwrap();
    }
    for tail in [0u32, (kv.seq.pages.len() - 1) as u32, 3] {
        let tl = t.up_u32(&[tail]);
        let (g, c) = (&kv.gpu.layers[0], &kv.cpu.layers[0]);
        let hg = HeadPages { selected: &g.selected, counts: &g.counts, seq_slot: &slot.0, tail_start: &tl.0 };
        let hc = HeadPages { selected: &c.selected, counts: &c.counts, seq_slot: &slot.1, tail_start: &tl.1 };
        let mut out = t.out(nh * hd);
        t.gpu.sparse_decode_attention(&ap, &q.0, g.view(), &mg, &hg, &mut out.0).unwrap();
        t.cpu.sparse_decode_attention(&ap, &q.1, c.view(), &mc, &hc, &mut out.1).unwrap();
        t.check(&format!("sparse_decode_attention tail {tail} kv {kvd:?}"), &out, nh * hd, tol);
    }
}

pub fn test_lambda_mass<B: Backend>(gpu: &B, kvd: DType) {
    if has_kv(gpu, kvd) {
        lambda_mass(gpu, kvd);
    }
}

fn lambda_mass<B: Backend>(gpu: &B, kvd: DType) {
    let mut t = pair(gpu);
    let (nh, hd) = (6, 16);
    let (_, tol) = kv_tols(kvd);
    let mut kv = kv_pair(&t, vec![false, false, false], (16, 4, hd), kvd);
    append(&mut t, &mut kv, 60, nh);
    let n = 25;
    let q = append(&mut t, &mut kv, n, nh);
    let m = paged(&t, &kv.seq);
    let mg = PagedMeta { page_indptr: &m[0].0, page_table: &m[1].0, kv_len: &m[2].0, ring_table: &m[3].0 };
    let mc = PagedMeta { page_indptr: &m[0].1, page_table: &m[1].1, kv_len: &m[2].1, ring_table: &m[3].1 };
    let p = LambdaMassParams {
        n_tokens: n as u32,
        n_heads: nh as u32,
        n_kv_heads: 3,
        head_dim: hd as u32,
        page_size: 16,
        num_pages: kv.gpu.shape.num_pages as u32,
        scale: 0.3,
        sink: 4,
        local: 10,
        ..Default::default()
    };
    let mut out = t.out(n * nh);
    t.gpu.lambda_mass(&p, &q.0, kv.gpu.layers[0].view(), &mg, &mut out.0).unwrap();
    t.cpu.lambda_mass(&p, &q.1, kv.cpu.layers[0].view(), &mc, &mut out.1).unwrap();
    t.check(&format!("lambda_mass kv {kvd:?}"), &out, n * nh, tol);
}

// The CPU against itself checks the harness (poisoning, comparisons) on every machine.
parity_tests!(cpu, Some(lserve::backend::cpu::CpuBackend::new()));

// wgpu with the optional features it finds (SHADER_F16, SUBGROUP: lavapipe and NVIDIA have both),
// and with both turned off: the path of adapters that lack them.
#[cfg(feature = "wgpu")]
parity_tests!(wgpu, crate::common::wgpu_backend());
#[cfg(feature = "wgpu")]
parity_tests!(wgpu_plain, crate::common::wgpu_backend_with(lserve::backend::wgpu::WgpuOptions::parse("none").unwrap()));

/// page_select at scale: four sequences (1, 700, 2000 and 299 pages of a shuffled pool), one not
/// selecting, k above 256 and above some rows' candidate counts, and many exactly tied scores
/// (copied summaries), so ranking, tie order (lower index first) and row routing are all checked.
/// Run twice: without the longest-sequence hint (`max_seq_pages` 0), and with one 40,000-page
/// sequence and the hint set, which is longer than CUDA's shared-memory sort holds (its
/// global-memory path).
pub fn test_page_select_many<B: Backend>(gpu: &B) {
    page_select_case(gpu, 3000, [1, 700, 2000, 299], 0, [300, 300, 298, 298, 0, 0]);
    page_select_case(gpu, 42000, [1, 40000, 1500, 299], 40000, [300, 300, 298, 298, 0, 0]);
}

fn page_select_case<B: Backend>(gpu: &B, num_pages: usize, lens: [usize; 4], max_seq_pages: u32, counts: [u32; 6]) {
    let mut t = pair(gpu);
    let (nh, n_kv, n_ret, hd, ps, lp) = (6, 3, 2usize, 8, 16, 8);
    let lpp = ps / lp;
    let per_page = n_ret * lpp * 2 * hd;
    let mut summary = t.f32s(num_pages * per_page, 1.0);
    for pg in (0..num_pages).step_by(3) {
        // Every third page ties with page 7 or page 11 (both heads, all logical pages).
        let src = if pg % 2 == 0 { 7 } else { 11 };
        let copy = summary[src * per_page..(src + 1) * per_page].to_vec();
        summary[pg * per_page..(pg + 1) * per_page].copy_from_slice(&copy);
    }
    let mut perm: Vec<u32> = (0..num_pages as u32).collect();
    for i in (1..perm.len()).rev() {
        perm.swap(i, (t.rng.next() * (i + 1) as f64) as usize % (i + 1));
    }
    let mut indptr = vec![0u32];
    for l in lens {
        indptr.push(indptr.last().unwrap() + l as u32);
    }
    let (k_pages, sel_stride, slots) = (300u32, 320usize, [2u32, 0, 3, 1]);
    let summary = t.up(DType::F32, &summary);
    let pool = t.rand(DType::F32, num_pages * n_ret * ps * hd, 1.0);
    let spool = t.rand(DType::F32, ps * hd, 1.0);
    let head_map = t.up_u32(&[0, STREAMING_BIT, 1]);
    let (ip, tab, kvl, ring) = (t.up_u32(&indptr), t.up_u32(&perm), t.up_u32(&[0; 4]), t.up_u32(&[0; 4]));
    let q = t.rand(DType::F32, lens.len() * nh * hd, 1.0);
    let (slot, mask) = (t.up_u32(&slots), t.up_u32(&[1, 1, 0, 1]));
    let mut sel = t.out_u32(4 * n_ret * sel_stride);
    let mut cnt = t.out_u32(4 * n_ret);
    let p = PageSelectParams {
        num_seqs: lens.len() as u32,
        n_heads: nh as u32,
        n_kv_heads: n_kv as u32,
        head_dim: hd as u32,
        page_size: ps as u32,
        logical_page: lp as u32,
        num_pages: num_pages as u32,
        n_ret: n_ret as u32,
        k_pages,
        sel_stride: sel_stride as u32,
        max_seq_pages,
        ..Default::default()
    };
    let kvg =
        LayerKv { k: &pool.0, v: &pool.0, summary: &summary.0, sk: &spool.0, sv: &spool.0, head_map: &head_map.0 };
    let kvc =
        LayerKv { k: &pool.1, v: &pool.1, summary: &summary.1, sk: &spool.1, sv: &spool.1, head_map: &head_map.1 };
    let mg = PagedMeta { page_indptr: &ip.0, page_table: &tab.0, kv_len: &kvl.0, ring_table: &ring.0 };
    let mc = PagedMeta { page_indptr: &ip.1, page_table: &tab.1, kv_len: &kvl.1, ring_table: &ring.1 };
    t.gpu
        .page_select(&p, &q.0, kvg, &mg, &slot.0, &mask.0, SelectedMut { selected: &mut sel.0, counts: &mut cnt.0 })
        .unwrap();
    t.cpu
        .page_select(&p, &q.1, kvc, &mc, &slot.1, &mask.1, SelectedMut { selected: &mut sel.1, counts: &mut cnt.1 })
        .unwrap();
    t.check_u32("page_select counts", &cnt, 4 * n_ret);
    let want = t.cpu.download_u32(&cnt.1, 0, 4 * n_ret).unwrap();
    // Slots 0..3 hold sequences 1 (the long one), 3 (299 pages), 0 (1) and 2 (not selecting).
    assert_eq!(want[..3 * n_ret], counts, "k, capped by the candidates");
    assert_eq!(want[3 * n_ret..], [u32::MAX; 2], "the row not selecting is untouched");
    t.check_u32("page_select selected", &sel, 4 * n_ret * sel_stride);
}

#[cfg(feature = "cuda")]
parity_tests!(cuda, crate::common::cuda_backend());

/// `write_f32_at` / `write_u32_at` (KV swap-in) into buffers of every KV dtype the backend stores:
/// the rest of the buffer untouched, the patch rounded to the dtype only.
pub fn test_write_at<B: Backend>(gpu: &B) {
    let mut t = pair(gpu);
    let round = |d: DType, x: f32| match d {
        DType::F16 => half::f16::from_f32(x).to_f32(),
        DType::BF16 => half::bf16::from_f32(x).to_f32(),
        _ => x,
    };
    for d in gpu.caps().kv_dtypes.clone() {
        let (base, patch) = (t.f32s(101, 1.0), t.f32s(17, 1.0));
        let mut b = gpu.upload_f32(d, base.clone()).unwrap();
        gpu.write_f32_at(&mut b, 41, &patch).unwrap();
        let mut want: Vec<f32> = base.iter().map(|&x| round(d, x)).collect();
        for (i, &x) in patch.iter().enumerate() {
            want[41 + i] = round(d, x);
        }
        close(&format!("write_f32_at {d:?}"), &gpu.download_f32(&b, 0, 101).unwrap(), &want, 0.0);
    }
    let mut u = gpu.upload_u32(&(0..50).collect::<Vec<u32>>()).unwrap();
    gpu.write_u32_at(&mut u, 7, &[900, 901, 902]).unwrap();
    let want: Vec<u32> = (0..50).map(|i| if (7..10).contains(&i) { 893 + i } else { i }).collect();
    assert_eq!(gpu.download_u32(&u, 0, 50).unwrap(), want, "write_u32_at");
}

pub fn test_fill_random<B: Backend>(gpu: &B) {
    let t = pair(gpu);
    let n = 1001;
    let mut out = t.out(n);
    let p = FillRandomParams { n: n as u32, seed: 12345, scale: 0.5, offset: 0.25, dtype: 0, ..Default::default() };
    t.gpu.fill_random(&p, &mut out.0).unwrap();
    t.cpu.fill_random(&p, &mut out.1).unwrap();
    t.check("fill_random", &out, n, 1e-6);
    let v = t.cpu.download_f32(&out.1, 0, n).unwrap();
    assert!(v.iter().all(|x| (-0.25..0.75).contains(x)), "range");
    let mean = v.iter().sum::<f32>() / n as f32;
    assert!((mean - 0.25).abs() < 0.05, "mean {mean}");
}
