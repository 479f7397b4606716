//! The weight, norm, elementwise and row ops against the CPU reference: embed and matmul (a
//! weight-dtype axis), rmsnorm, add_rmsnorm, add, silu_mul, gather_rows, mean_rows, argmax, fill_random, and
//! the partial writes of KV swap-in (write_at). Instantiated per backend by `parity_tests!` in
//! tests/backend_parity.rs.

use super::{
    TOL_ELEMENTWISE, TOL_QUANT, TOL_REDUCTION, close, close16, has_weights, out16_dtypes, pair, round_to, ulp16,
};
use lserve::backend::reference::weight_quant;
use lserve::backend::*;

/// A random `[n][k]` weight of `dtype` on both backends: quantized types as random blocks
/// (`weight_quant::random_weights`, seeded from the pair's printed seed) uploaded as the model
/// loader does (`upload_weight`: CUDA packs Q8_0 rows of whole 256-element super-blocks), float
/// types as values.
pub fn weights<B: Backend>(
    t: &mut super::Pair<'_, B>,
    dtype: DType,
    n: usize,
    k: usize,
    scale: f64,
) -> (B::Buffer, lserve::backend::cpu::CpuBuffer) {
    if !dtype.is_weight_quant() {
        return t.rand(dtype, n * k, scale);
    }
    let seed = (t.rng.next() * 1e9) as u64;
    let bytes = weight_quant::random_weights(dtype, n, k, seed).expect("whole blocks");
    let gpu = t.gpu.upload_weight(dtype, n, k, &bytes).unwrap();
    // What the backend stores comes back as the format's bytes (a packed layout unpacked; raw
    // ranges are whole words).
    let words = bytes.len() / 4 * 4;
    assert_eq!(t.gpu.download_raw(&gpu, 0, words).unwrap(), bytes[..words], "{dtype:?} [{n}][{k}] weight bytes");
    (gpu, t.cpu.upload_weight(dtype, n, k, &bytes).unwrap())
}

/// Elements per block of a weight type (1 for float and row-scaled types).
fn block_of(dtype: DType) -> usize {
    match dtype {
        DType::Ggml(t) => t.block_size(),
        _ => 1,
    }
}

pub fn test_embed<B: Backend>(gpu: &B, dtype: DType) {
    if !has_weights(gpu, dtype) {
        return;
    }
    let mut t = pair(gpu);
    // dims: three blocks (or 70 elements), and 512 (whole 256-element super-blocks: CUDA's packed
    // Q8_0 layout).
    let dims = [if block_of(dtype) > 1 { 3 * block_of(dtype) } else { 70 }, 512];
    for dim in dims {
        let (vocab, n) = (50, 13);
        let table = weights(&mut t, dtype, vocab, dim, 1.0);
        // A whole table (first 0), then the same table as the slice 100..150 of a larger
        // vocabulary (a tensor-parallel rank's): ids below, inside and above the slice.
        for first in [0u32, 100] {
            let ids: Vec<u32> = (0..n).map(|i| first + ((i * 7 + 3) % vocab) as u32).collect();
            let ids: Vec<u32> = ids.iter().enumerate().map(|(i, &id)| [id, 3, id + vocab as u32][i % 3]).collect();
            let ids = t.up_u32(&ids);
            let mut out = t.out(n * dim);
            let p = EmbedParams { n_tokens: n as u32, dim: dim as u32, vocab: vocab as u32, first };
            t.gpu.embed(&p, &table.0, &ids.0, &mut out.0).unwrap();
            t.cpu.embed(&p, &table.1, &ids.1, &mut out.1).unwrap();
            t.check(&format!("embed {dtype:?} dim {dim} first {first}"), &out, n * dim, 0.0);
            // Every third id lies above the slice and, with first 100, the id 3 below it: zeros.
            let cpu = t.cpu.download_f32(&out.1, 0, n * dim).unwrap();
            for (i, row) in cpu.chunks(dim).enumerate() {
                let outside = i % 3 == 2 || (first > 0 && i % 3 == 1);
                assert_eq!(outside, row.iter().all(|&x| x == 0.0), "embed row {i} first {first}");
            }
        }
    }
}

pub fn test_matmul<B: Backend>(gpu: &B, dtype: DType) {
    if !has_weights(gpu, dtype) {
        return;
    }
    if dtype.is_weight_quant() {
        return matmul_quantized(gpu, dtype);
    }
    let mut t = pair(gpu);
    // On wgpu (ops_matmul.rs picks the kernel from m): m <= 16 takes the GEMVs (for 16-bit weights
    // with k % 8 == 0 where SUBGROUP is available the subgroup ones: m == 1 one row per subgroup,
    // 2..=16 the batch kernel: 16 weight rows per workgroup, k strided in 64-word steps taken two
    // at a time, passes of 8 x rows, so n not a multiple of 16 (and below it), k of 1 to 513
    // words, m of one and two passes, full and partial; else matmul_gemv, one pass of up to 16 x
    // rows), 17..=96 the 32-row GEMM tiles, larger m the 128-row ones. On adapters with
    // cooperative matrices m <= 16 keeps the GEMVs, matmul_coop takes 17..=64 (64x64 tiles, k
    // steps of 32), and above matmul_coop_x16 + matmul_coop_128 (x to f16 rows of k rounded up
    // to 8; 128x128 tiles, double-buffered k steps of 32; tiles fully inside without bias stored
    // straight from the accumulators: 256x256 and the first tile of 384x136); k % 8 != 0 (33,
    // 2052) takes their element-by-element weight staging. Odd n (rows not a multiple of any
    // workgroup's 4 or 16, or a tile's 64), k with and without k % 8 == 0, odd word counts, k
    // shorter than one k step, multi-tile m, and long k (4096: the f16 operands' rounding over a
    // long sum).
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
        (8, 77, 264),
        (8, 45, 131),
        (9, 51, 520),
        (9, 37, 259),
        (16, 83, 1032),
        (16, 29, 262),
        (24, 71, 136),
        (24, 35, 13),
        (32, 99, 200),
        (32, 67, 257),
        (48, 131, 72),
        (48, 65, 150),
        (64, 93, 264),
        (64, 61, 99),
        (100, 75, 136),
        (100, 47, 131),
        (256, 133, 72),
        (256, 69, 137),
        (200, 70, 136),
        (200, 45, 131),
        (8, 40, 4096),
        (17, 33, 4096),
        (13, 45, 1544),
        (11, 19, 8),
        (7, 5, 2048),
        (4, 3, 4104),
        (256, 256, 520),
        (384, 136, 1024),
        (129, 130, 33),
        (160, 384, 2052),
    ];
    // Where the backend multiplies in 16 bits (Caps::matmul_x16_from), the reference gets x
    // rounded the same way, so the comparison stays one of summation order only.
    let x16_from = t.gpu.caps().matmul_x16_from;
    let act16_from = t.gpu.caps().act16_from;
    {
        for &(m, n, k) in &shapes {
            for bias in [false, true] {
                let xs = t.f32s(m * k, 1.0);
                let x = if act16_from.is_some_and(|r| m >= r) && dtype != DType::F32 && bias {
                    // x already in the weights' 16-bit dtype (Caps::act16_from), with a bias.
                    t.up(dtype, &xs)
                } else if dtype != DType::F32 && x16_from.is_some_and(|r| m >= r) {
                    let rounded = t.cpu.download_f32(&t.up(dtype, &xs).1, 0, m * k).unwrap();
                    (t.gpu.upload_f32(DType::F32, xs.clone()).unwrap(), t.cpu.upload_f32(DType::F32, rounded).unwrap())
                } else {
                    t.up(DType::F32, &xs)
                };
                let w = t.rand(dtype, n * k, 0.1);
                let b = t.rand(DType::F32, n, 1.0);
                let mut out = t.out(m * n);
                let p = MatmulParams::new(m, n, k, bias);
                t.gpu.matmul(&p, &x.0, &w.0, bias.then_some(&b.0), &mut out.0).unwrap();
                t.cpu.matmul(&p, &x.1, &w.1, bias.then_some(&b.1), &mut out.1).unwrap();
                let name = format!("matmul {dtype:?} {m}x{n}x{k} bias={bias}");
                t.check(&name, &out, m * n, TOL_REDUCTION);
                out16_case(&t, &name, &p, &x.0, &w.0, &out.1, m * n, TOL_REDUCTION);
                accumulate_case(&mut t, &name, &p, (&x, &w, bias.then_some(&b)), &out.1, m * n, TOL_REDUCTION);
            }
        }
    }
    matmul_strided(&mut t, dtype, TOL_REDUCTION);
    matmul_prologue_cases(&mut t, dtype);
}

/// `matmul_prologue` wherever the backend runs it as one kernel (`Backend::matmul_prologue_fuses`:
/// CUDA's batch-1 GEMVs), against the CPU's op and then its matmul: random src (gate | up for
/// silu_mul), norm weight, eps 0.25 (a wrong eps, or a sum of squares over part of the row,
/// shows), with and without bias, a strided output, and again with accumulate into random
/// values. Rows of whole 256-element super-blocks (every register GEMV's unit), Llama-3-8B's k
/// among them (4096, 14336), and odd k for a float GEMV's scalar path. The integer GEMVs
/// quantize the x the op made to two digits an element: the reference snaps the CPU op's output
/// to that grid before its matmul (as [`rand_x`] snaps x), so the dots must agree to summation
/// order (a digit the device's own rounding of the op puts one step away is ~2^-15 of its block).
fn matmul_prologue_cases<B: Backend>(t: &mut super::Pair<'_, B>, dtype: DType) {
    let ks: &[usize] = if dtype.is_weight_quant() { &[256, 1024, 4096, 14336] } else { &[64, 1024, 131, 4096] };
    let ns = [300, 37, 9, 64];
    for (i, &k) in ks.iter().enumerate() {
        for (j, kind) in [PrologueKind::Rmsnorm, PrologueKind::SiluMul].into_iter().enumerate() {
            let p = MatmulParams::new(1, ns[i], k, (i + j) % 2 == 0);
            prologue_case(t, dtype, &p, kind);
        }
    }
    let p = MatmulParams { ldo: 50, out_off: 3, ..MatmulParams::new(1, 41, 512, true) };
    prologue_case(t, dtype, &p, PrologueKind::Rmsnorm);
}

fn prologue_case<B: Backend>(t: &mut super::Pair<'_, B>, dtype: DType, p: &MatmulParams, kind: PrologueKind) {
    let (n, k) = (p.n as usize, p.k as usize);
    let w = weights(t, dtype, n, k, 0.1);
    if !t.gpu.matmul_prologue_fuses(p, &w.0, kind) {
        return;
    }
    let src_len = if kind == PrologueKind::SiluMul { 2 * k } else { k };
    let src = t.rand(DType::F32, src_len, 2.0);
    let nw = t.rand(DType::F32, k, 1.0);
    let b = t.rand(DType::F32, n, 1.0);
    let bias = (p.has_bias != 0).then_some(&b);
    // The reference's x: the CPU's op, snapped to the two-digit grid for the integer GEMVs.
    let mut xo = t.cpu.alloc(DType::F32, k).unwrap();
    match kind {
        PrologueKind::Rmsnorm => {
            t.cpu.rmsnorm(&RmsnormParams { rows: 1, dim: k as u32, eps: 0.25, _pad: 0 }, &src.1, &nw.1, &mut xo)
        }
        PrologueKind::SiluMul => {
            t.cpu.silu_mul(&SiluMulParams { rows: 1, dim: k as u32, ..Default::default() }, &src.1, &mut xo)
        }
    }
    .unwrap();
    let xv = t.cpu.download_f32(&xo, 0, k).unwrap();
    let x8 = dtype.is_weight_quant() && dtype != DType::F8Row;
    let xr = t.cpu.upload_f32(DType::F32, if x8 { weight_quant::x8_blocks(&xv, k) } else { xv }).unwrap();
    let name =
        format!("matmul_prologue {kind:?} {dtype:?} 1x{n}x{k} bias={} ldo={} off={}", p.has_bias, p.ldo, p.out_off);
    let len = p.out_len() + 9;
    for acc in [false, true] {
        let pa = MatmulParams { accumulate: acc as u32, ..*p };
        let mut out = if acc { t.rand(DType::F32, len, 1.0) } else { t.out(len) };
        let pro = match kind {
            PrologueKind::Rmsnorm => Prologue::Rmsnorm { w: &nw.0, eps: 0.25 },
            PrologueKind::SiluMul => Prologue::SiluMul,
        };
        t.gpu.matmul_prologue(&pa, pro, &src.0, &w.0, bias.map(|b| &b.0), &mut out.0).unwrap();
        t.cpu.matmul(&pa, &xr, &w.1, bias.map(|b| &b.1), &mut out.1).unwrap();
        t.check(&format!("{name} accumulate={acc}"), &out, len, TOL_REDUCTION);
    }
}

/// A strided output (ldo > n, out_off > 0) at a GEMV and a GEMM row count: the result lands in its
/// column block and every other element keeps its poison (NaN on both sides).
fn matmul_strided<B: Backend>(t: &mut super::Pair<'_, B>, dtype: DType, tol: f32) {
    let k = 2 * block_of(dtype).max(64);
    // The last case, a whole 128x128 tile without bias at 16-byte aligned rows, is stored by
    // wgpu's matmul_coop_128 straight from its accumulators (with the row stride ldo).
    let cases = [
        (1, 37, 50, 5, true),
        (3, 37, 50, 5, true),
        (12, 37, 50, 5, true),
        (40, 37, 50, 5, true),
        (128, 128, 136, 4, false),
    ];
    for (m, n, ldo, off, bias) in cases {
        let p = MatmulParams { ldo, out_off: off, ..MatmulParams::new(m, n, k, bias) };
        if dtype.is_weight_quant() {
            quant_case(t, dtype, &p);
            continue;
        }
        let x = t.rand(DType::F32, m * k, 1.0);
        let w = weights(t, dtype, n, k, 0.1);
        let b = t.rand(DType::F32, n, 1.0);
        let len = p.out_len() + 9;
        let mut out = t.out(len);
        let b = bias.then_some(&b);
        t.gpu.matmul(&p, &x.0, &w.0, b.map(|b| &b.0), &mut out.0).unwrap();
        t.cpu.matmul(&p, &x.1, &w.1, b.map(|b| &b.1), &mut out.1).unwrap();
        let x16 = t.gpu.caps().matmul_x16_from.is_some_and(|r| m >= r) && dtype != DType::F32;
        let name = format!("matmul {dtype:?} strided {m}x{n}x{k} ldo={ldo} off={off}");
        let tol = if x16 { TOL_QUANT } else { tol };
        t.check(&name, &out, len, tol);
        out16_case(t, &name, &p, &x.0, &w.0, &out.1, len, tol);
        accumulate_case(t, &name, &p, (&x, &w, b), &out.1, len, tol);
    }
}

/// The same matmul into a 16-bit out where the backend writes one for these weights and rows
/// (`Backend::matmul_out16_dtype`): the reference's f32 result `want` (NaN poison outside the
/// written elements) rounded to that dtype, within `tol` plus one unit in its last place; with a
/// bias (added in f32) such an out is refused.
#[allow(clippy::too_many_arguments)]
fn out16_case<B: Backend>(
    t: &super::Pair<'_, B>,
    name: &str,
    p: &MatmulParams,
    x: &B::Buffer,
    w: &B::Buffer,
    want: &lserve::backend::cpu::CpuBuffer,
    len: usize,
    tol: f32,
) {
    let Some(d) = t.gpu.matmul_out16_dtype(w, p.m as usize) else { return };
    let mut o = t.gpu.upload_f32(d, vec![f32::NAN; len]).unwrap();
    if p.has_bias != 0 {
        let b = t.gpu.upload_f32(DType::F32, vec![0.0; p.n as usize]).unwrap();
        assert!(t.gpu.matmul(p, x, w, Some(&b), &mut o).is_err(), "{name}: a {d:?} out with a bias");
        return;
    }
    t.gpu.matmul(p, x, w, None, &mut o).unwrap();
    let want = t.cpu.download_f32(want, 0, len).unwrap();
    close16(name, d, &t.gpu.download_f32(&o, 0, len).unwrap(), &want, tol);
}

/// A matmul's buffers on both backends: x, w and the bias.
type MatmulBufs<'a, B> = (&'a Bufs<B>, &'a Bufs<B>, Option<&'a Bufs<B>>);
type Bufs<B> = (<B as Backend>::Buffer, lserve::backend::cpu::CpuBuffer);

/// The same matmul with `accumulate` (out += the product) into an out of random values, the same
/// on both backends, wherever the backend takes it (it must where `Backend::matmul_accumulates`
/// says so; CUDA takes it on every cuBLAS GEMM, asking for it only from `ACC_FROM_M` rows):
/// against the CPU's, which is checked first against its own product `want` (NaN poison outside
/// the written elements) added to those values, exactly.
#[allow(clippy::too_many_arguments)]
fn accumulate_case<B: Backend>(
    t: &mut super::Pair<'_, B>,
    name: &str,
    p: &MatmulParams,
    (x, w, bias): MatmulBufs<'_, B>,
    want: &lserve::backend::cpu::CpuBuffer,
    len: usize,
    tol: f32,
) {
    let pa = MatmulParams { accumulate: 1, ..*p };
    let base = t.f32s(len, 1.0);
    let mut out = t.up(DType::F32, &base);
    let r = t.gpu.matmul(&pa, &x.0, &w.0, bias.map(|b| &b.0), &mut out.0);
    if r.is_err() {
        assert!(
            !t.gpu.matmul_accumulates(&w.0, p.m as usize),
            "{name}: accumulate refused where the backend asks for it"
        );
        return;
    }
    t.cpu.matmul(&pa, &x.1, &w.1, bias.map(|b| &b.1), &mut out.1).unwrap();
    let prod = t.cpu.download_f32(want, 0, len).unwrap();
    let sum: Vec<f32> = base.iter().zip(&prod).map(|(&a, &b)| if b.is_nan() { a } else { a + b }).collect();
    let cpu = t.cpu.download_f32(&out.1, 0, len).unwrap();
    assert!(cpu.iter().zip(&sum).all(|(a, b)| a.to_bits() == b.to_bits()), "{name}: the CPU's accumulate");
    t.check(&format!("{name} accumulate"), &out, len, tol);
}

/// Quantized weights: random blocks (odd n; k a few whole blocks, and one long row), every GEMV
/// and GEMM row count the backends distinguish, against the CPU's dequantize-then-multiply
/// ([`check_quant`] for the tolerances), then the edges of the batch-1 kernels
/// ([`matmul_quantized_m1`]) and a strided output.
fn matmul_quantized<B: Backend>(gpu: &B, dtype: DType) {
    let mut t = pair(gpu);
    let bs = block_of(dtype).max(32);
    // Row-scaled types take any k: one odd k among them (byte-assembled words, a short x block).
    let odd = if block_of(dtype) == 1 { 5 } else { 0 };
    // 1280: 40 blocks of 32 (a 2-byte-aligned block row whose length is a multiple of 16 bytes).
    let ks = [bs, 2 * bs, 3 * bs + odd, 9 * bs, 1280usize.div_ceil(bs) * bs, 4096usize.div_ceil(bs) * bs];
    // CUDA: 1 the integer GEMV; 2..=64 the MMQ GEMM (n-tile variants 1 | 2 | 4 | 8 of 8 x rows, partial
    // tiles); 65, 130 and 200 the dequantize + cuBLAS path. wgpu with cooperative matrices: 2..=16
    // the GEMVs, 17..=64 matmul_coop, above matmul_coop_128 (200: a whole 128-row tile and a
    // partial one).
    let ms = [1, 2, 3, 5, 8, 9, 16, 17, 32, 33, 37, 48, 64, 65, 130, 200];
    let ns = [1, 31, 64, 97, 300];
    for (i, &m) in ms.iter().enumerate() {
        for (j, &k) in ks.iter().enumerate() {
            let n = ns[(i + 2 * j) % ns.len()];
            let p = MatmulParams::new(m, n, k, (i + j) % 2 == 1);
            quant_case(&mut t, dtype, &p);
        }
    }
    matmul_quantized_m1(&mut t, dtype);
    matmul_strided(&mut t, dtype, TOL_REDUCTION);
    matmul_prologue_cases(&mut t, dtype);
}

/// Batch-1 edges (wgpu: matmul_gemv_x8, 8 weight rows per workgroup, lanes striding over
/// 32/64/128-weight slices two at a time): one block per row (k = 32 for the 32-weight formats),
/// slice counts that are not a multiple of any subgroup's stride, rows not a multiple of 8 (a
/// workgroup with one row), rows starting at odd 16-bit offsets (odd block counts of the 18, 22,
/// 34 and 210-byte blocks), with and without bias, and a strided output (ldo > n, out_off > 0).
fn matmul_quantized_m1<B: Backend>(t: &mut super::Pair<'_, B>, dtype: DType) {
    let bs = block_of(dtype).max(32);
    for (n, blocks, bias) in [(1, 1, true), (7, 1, false), (9, 3, true), (17, 5, false), (8, 37, true), (33, 67, false)]
    {
        quant_case(t, dtype, &MatmulParams::new(1, n, blocks * bs, bias));
    }
    for (n, blocks, ldo, off) in [(9, 3, 20, 7), (41, 7, 50, 3)] {
        quant_case(t, dtype, &MatmulParams { ldo, out_off: off, ..MatmulParams::new(1, n, blocks * bs, true) });
    }
    // Rows of whole 256-element super-blocks (CUDA stores Q8_0 packed there: one super-block, an
    // odd count, k past the register GEMV's 16384 elements, a strided output) at every kernel's
    // row count (the GEMV, the MMQ GEMM's n-tiles, the dequantize + GEMM path).
    if bs == 32 {
        for (m, n, k, bias) in [
            (1, 5, 256, true),
            (1, 37, 768, false),
            (1, 9, 16640, true),
            (2, 33, 256, false),
            (37, 19, 1792, true),
            (130, 7, 512, false),
        ] {
            quant_case(t, dtype, &MatmulParams::new(m, n, k, bias));
        }
        quant_case(t, dtype, &MatmulParams { ldo: 50, out_off: 3, ..MatmulParams::new(1, 41, 512, true) });
    }
}

/// Random x `[m][k]` for a matmul with `dtype` weights; where the backend multiplies x as two
/// int8 digits per element (`Caps::matmul_x8_max_m`; CUDA's and wgpu's batch-1 GEMVs), x is
/// snapped to that grid first (`weight_quant::x8_blocks`), so the integer dot must equal the
/// CPU's f32 product within TOL_REDUCTION (a wrong code, scale or block offset cannot hide in
/// the quantization error).
fn rand_x<B: Backend>(
    t: &mut super::Pair<'_, B>,
    dtype: DType,
    m: usize,
    k: usize,
) -> (B::Buffer, lserve::backend::cpu::CpuBuffer) {
    let x = t.f32s(m * k, 1.0);
    let x8 = dtype.is_weight_quant() && dtype != DType::F8Row && m <= t.gpu.caps().matmul_x8_max_m;
    t.up(DType::F32, &if x8 { weight_quant::x8_blocks(&x, k) } else { x })
}

/// One quantized matmul (x from [`rand_x`], random blocks and bias; poisoned output of
/// `p.out_len()` + 9) on both backends: within TOL_REDUCTION of the CPU's product (also where x is
/// snapped to the two-digit grid: the integer dots must be exact), TOL_QUANT from `matmul_x16_from`
/// rows otherwise (the backend may round x and the dequantized weights to 16 bits).
fn quant_case<B: Backend>(t: &mut super::Pair<'_, B>, dtype: DType, p: &MatmulParams) {
    let (m, n, k) = (p.m as usize, p.n as usize, p.k as usize);
    let x = rand_x(t, dtype, m, k);
    let w = weights(t, dtype, n, k, 0.1);
    let b = t.rand(DType::F32, n, 1.0);
    let len = p.out_len() + 9;
    let mut out = t.out(len);
    let bias = (p.has_bias != 0).then_some(&b);
    t.gpu.matmul(p, &x.0, &w.0, bias.map(|b| &b.0), &mut out.0).unwrap();
    t.cpu.matmul(p, &x.1, &w.1, bias.map(|b| &b.1), &mut out.1).unwrap();
    let name = format!("matmul {dtype:?} {m}x{n}x{k} bias={} ldo={} off={}", p.has_bias, p.ldo, p.out_off);
    let x8 = dtype != DType::F8Row && m <= t.gpu.caps().matmul_x8_max_m;
    let x16 = t.gpu.caps().matmul_x16_from.is_some_and(|r| m >= r) && !x8;
    t.check(&name, &out, len, if x16 { TOL_QUANT } else { TOL_REDUCTION });
    out16_case(t, &name, p, &x.0, &w.0, &out.1, len, if x16 { TOL_QUANT } else { TOL_REDUCTION });
    accumulate_case(t, &name, p, (&x, &w, bias), &out.1, len, if x16 { TOL_QUANT } else { TOL_REDUCTION });
    // The same x already in the 16-bit dtype the backend multiplies (`weight_x16_dtype`: CUDA's
    // dequantize + f16 GEMM path, the rows a prefill's norms and silu_mul write in f16): the
    // operands the GEMM would have rounded itself, so the f32 x's output bit for bit.
    if let Some(d) = t.gpu.weight_x16_dtype(&w.0, m) {
        let xv = t.cpu.download_f32(&x.1, 0, m * k).unwrap();
        let x16 = t.gpu.upload_f32(d, xv).unwrap();
        let mut o16 = t.out(len);
        t.gpu.matmul(p, &x16, &w.0, bias.map(|b| &b.0), &mut o16.0).unwrap();
        let want = t.gpu.download_f32(&out.0, 0, len).unwrap();
        close(&format!("{name} x {d:?}"), &t.gpu.download_f32(&o16.0, 0, len).unwrap(), &want, 0.0);
    }
    // The same x as its digits (DType::X8, `weight_quant::x8_encode`) where the backend takes
    // them: the same product as the reference's.
    let c = t.gpu.caps();
    if m == 1 && c.act_x8_dtypes.contains(&dtype) && c.x8_row_fits(k) {
        let xv = t.cpu.download_f32(&x.1, 0, k).unwrap();
        let xq = t.gpu.upload_raw(DType::X8, &weight_quant::x8_encode(&xv)).unwrap();
        let mut out8 = t.out(len);
        t.gpu.matmul(p, &xq, &w.0, bias.map(|b| &b.0), &mut out8.0).unwrap();
        let want = t.cpu.download_f32(&out.1, 0, len).unwrap();
        close(&format!("{name} x X8"), &t.gpu.download_f32(&out8.0, 0, len).unwrap(), &want, TOL_REDUCTION);
        // An X8 x is one row: two rows of it are refused, not read past the row.
        let p2 = MatmulParams { m: 2, ..*p };
        assert!(t.gpu.matmul(&p2, &xq, &w.0, bias.map(|b| &b.0), &mut out8.0).is_err(), "{name}: X8 x at m = 2");
    }
}

/// Row shapes of the norm tests. wgpu (shaders/row_norm.wgsl) holds rows up to 8192 floats in
/// registers in chunks of 1024 with a partial last chunk: 37 and 1000 (less than one chunk, odd),
/// 576 and 640 (SmolLM2, Gemma 3), 4096 and 8192 (whole chunks, the last row that is held), 5000
/// (a partial chunk after whole ones); 8193 and 9000 take the loop for wider rows (as on CUDA's
/// scalar path, for rows not a multiple of 4, which holds 8192: 1024 threads of 8).
/// On CUDA rows of a multiple of 4 take the 16-byte path (4 float4 held a thread): 20000 takes its
/// loop for wider rows; from 1024 rows a launch has 256 threads a row, so 1030 x 4100 takes that
/// loop there too.
const NORM_SHAPES: [(usize, usize); 11] = [
    (3, 37),
    (2, 1000),
    (5, 576),
    (8, 640),
    (2, 4096),
    (3, 5000),
    (2, 8192),
    (2, 8193),
    (3, 9000),
    (2, 20000),
    (1030, 4100),
];

pub fn test_rmsnorm<B: Backend>(gpu: &B) {
    let mut t = pair(gpu);
    for (rows, dim) in NORM_SHAPES {
        let x = t.rand(DType::F32, rows * dim, 2.0);
        let w = t.rand(DType::F32, dim, 1.0);
        let p = RmsnormParams { rows: rows as u32, dim: dim as u32, eps: 1e-5, _pad: 0 };
        for dt in act_dtypes(gpu) {
            let mut out = out_as(&t, dt, rows * dim);
            t.gpu.rmsnorm(&p, &x.0, &w.0, &mut out.0).unwrap();
            t.cpu.rmsnorm(&p, &x.1, &w.1, &mut out.1).unwrap();
            check_act(&t, &format!("rmsnorm {rows}x{dim} out {dt:?}"), &out, rows * dim, dt, TOL_REDUCTION);
        }
    }
    for dim in X8_DIMS {
        let x = t.rand(DType::F32, dim, 2.0);
        let w = t.rand(DType::F32, dim, 1.0);
        let p = RmsnormParams { rows: 1, dim: dim as u32, eps: 1e-5, _pad: 0 };
        let Some(mut out) = x8_out(&t, dim) else { continue };
        t.gpu.rmsnorm(&p, &x.0, &w.0, &mut out.0).unwrap();
        t.cpu.rmsnorm(&p, &x.1, &w.1, &mut out.1).unwrap();
        check_x8(&t, &format!("rmsnorm 1x{dim} out X8"), &out, dim, TOL_REDUCTION);
    }
    // An X8 out holds one row of a length the backend takes (`Caps::x8_row_fits`): two rows, or
    // a length it does not take, are refused.
    if !gpu.caps().act_x8_dtypes.is_empty() {
        for (rows, dim) in [(2usize, 64usize), (1, 36), (1, 6)] {
            if rows == 1 && gpu.caps().x8_row_fits(dim) {
                continue;
            }
            let x = t.rand(DType::F32, rows * dim, 2.0);
            let w = t.rand(DType::F32, dim, 1.0);
            let p = RmsnormParams { rows: rows as u32, dim: dim as u32, eps: 1e-5, _pad: 0 };
            let mut out = t.gpu.upload_raw(DType::X8, &vec![0xff; x8_bytes(rows * dim)]).unwrap();
            assert!(t.gpu.rmsnorm(&p, &x.0, &w.0, &mut out).is_err(), "rmsnorm {rows}x{dim}: X8 out not refused");
        }
    }
}

pub fn test_add_rmsnorm<B: Backend>(gpu: &B) {
    let mut t = pair(gpu);
    for (rows, dim) in NORM_SHAPES {
        let x = t.rand(DType::F32, rows * dim, 2.0);
        let w = t.rand(DType::F32, dim, 1.0);
        let p = RmsnormParams { rows: rows as u32, dim: dim as u32, eps: 1e-5, _pad: 0 };
        for dt in act_dtypes(gpu) {
            let mut res = t.rand(DType::F32, rows * dim, 1.0);
            let mut out = out_as(&t, dt, rows * dim);
            t.gpu.add_rmsnorm(&p, &mut res.0, &x.0, &w.0, &mut out.0).unwrap();
            t.cpu.add_rmsnorm(&p, &mut res.1, &x.1, &w.1, &mut out.1).unwrap();
            check_act(&t, &format!("add_rmsnorm {rows}x{dim} out {dt:?}"), &out, rows * dim, dt, TOL_REDUCTION);
            t.check(&format!("add_rmsnorm {rows}x{dim} residual"), &res, rows * dim, TOL_ELEMENTWISE);
        }
    }
    for dim in X8_DIMS {
        let x = t.rand(DType::F32, dim, 2.0);
        let w = t.rand(DType::F32, dim, 1.0);
        let p = RmsnormParams { rows: 1, dim: dim as u32, eps: 1e-5, _pad: 0 };
        let mut res = t.rand(DType::F32, dim, 1.0);
        let Some(mut out) = x8_out(&t, dim) else { continue };
        t.gpu.add_rmsnorm(&p, &mut res.0, &x.0, &w.0, &mut out.0).unwrap();
        t.cpu.add_rmsnorm(&p, &mut res.1, &x.1, &w.1, &mut out.1).unwrap();
        check_x8(&t, &format!("add_rmsnorm 1x{dim} out X8"), &out, dim, TOL_REDUCTION);
        t.check(&format!("add_rmsnorm 1x{dim} residual (X8 out)"), &res, dim, TOL_ELEMENTWISE);
    }
}

/// Row lengths of the one-row X8 outs (`Caps::act_x8_dtypes`; those `Caps::x8_row_fits` takes:
/// wgpu takes whole blocks only): a block and a partial one (36),
/// SmolLM2's and Gemma 3's rows, Llama's, a partial last block (5000), and 20000 (CUDA: past
/// the 4 float4 a thread holds, the loop for wider rows).
const X8_DIMS: [usize; 6] = [36, 576, 640, 4096, 5000, 20000];

/// A poisoned one-row X8 out (0xff bytes: digits -1, d and sums NaN) on the backend and an f32
/// one on the reference, where the backend writes X8 activations of `dim`; else None.
pub fn x8_out<B: Backend>(t: &super::Pair<'_, B>, dim: usize) -> Option<(B::Buffer, lserve::backend::cpu::CpuBuffer)> {
    let c = t.gpu.caps();
    if !c.x8_row_fits(dim) {
        return None;
    }
    let gpu = t.gpu.upload_raw(DType::X8, &vec![0xff; x8_bytes(dim)]).unwrap();
    Some((gpu, t.cpu.upload_f32(DType::F32, vec![f32::NAN; dim]).unwrap()))
}

/// A backend's X8 row, decoded as `DType::X8` lays it out (`weight_quant::x8_decode`), against
/// the reference's f32 result snapped to the same grid (`x8_blocks`): within `tol` of the f32
/// values plus about one lo digit of the block (max|x| / 32258: the two f32 results may sit on
/// either side of a rounding edge). Each block's sum (the min terms of Q4_K / Q5_K / Q5_1 read
/// it) within `tol` of the reference's f32 sum per element; the pad words zero.
pub fn check_x8<B: Backend>(
    t: &super::Pair<'_, B>,
    name: &str,
    out: &(B::Buffer, lserve::backend::cpu::CpuBuffer),
    dim: usize,
    tol: f32,
) {
    let raw = t.gpu.download_raw(&out.0, 0, x8_bytes(dim)).unwrap();
    let got = weight_quant::x8_decode(&raw, dim).unwrap();
    let want_f32 = t.cpu.download_f32(&out.1, 0, dim).unwrap();
    let want = weight_quant::x8_blocks(&want_f32, dim);
    let nb = dim.div_ceil(32);
    for b in 0..nb {
        let blk = 32 * b..(32 * b + 32).min(dim);
        let amax = want_f32[blk.clone()].iter().fold(0f32, |a, v| a.max(v.abs()));
        for e in blk.clone() {
            let lim = tol * want_f32[e].abs().max(1.0) + 2.02 * amax / 64516.0;
            assert!((got[e] - want[e]).abs() <= lim, "{name}[{e}]: got {}, want {} (tol {lim})", got[e], want[e]);
        }
        let at = 72 * nb + 8 * b + 4;
        let sum = f32::from_le_bytes(raw[at..at + 4].try_into().unwrap());
        let want_sum: f32 = want_f32[blk.clone()].iter().sum();
        let lim = tol * want_f32[blk.clone()].iter().map(|v| v.abs().max(1.0)).sum::<f32>();
        assert!((sum - want_sum).abs() <= lim, "{name}: block {b} sum {sum}, want {want_sum} (tol {lim})");
        for plane in [0, 36 * nb] {
            let at = plane + 4 * (9 * b + 8);
            assert_eq!(raw[at..at + 4], [0; 4], "{name}: pad word of block {b} at byte {at}");
        }
    }
}

/// The out dtypes an activation op (rmsnorm, add_rmsnorm, silu_mul) is tested with: f32, and
/// f16/bf16 where the backend writes 16-bit activations (`Caps::act16_from`).
fn act_dtypes<B: Backend>(gpu: &B) -> Vec<DType> {
    match gpu.caps().act16_from {
        Some(_) => vec![DType::F32, DType::F16, DType::BF16],
        None => vec![DType::F32],
    }
}

/// Poisoned outputs of `n` elements: `dtype` on the backend, f32 on the reference.
fn out_as<B: Backend>(t: &super::Pair<'_, B>, dtype: DType, n: usize) -> (B::Buffer, lserve::backend::cpu::CpuBuffer) {
    (t.gpu.upload_f32(dtype, vec![f32::NAN; n]).unwrap(), t.cpu.upload_f32(DType::F32, vec![f32::NAN; n]).unwrap())
}

/// A backend output of `dtype` against the reference's f32 result rounded to `dtype` (to nearest
/// even, as the backend must): within one unit in the last place of the 16-bit type, since the
/// backend's f32 value may sit on the other side of a rounding boundary; f32 within `tol`.
fn check_act<B: Backend>(
    t: &super::Pair<'_, B>,
    name: &str,
    out: &(B::Buffer, lserve::backend::cpu::CpuBuffer),
    n: usize,
    dtype: DType,
    tol: f32,
) {
    let got = t.gpu.download_f32(&out.0, 0, n).unwrap();
    let want = t.cpu.download_f32(&out.1, 0, n).unwrap();
    // 16 bits: within one unit in the last place of the rounded reference (ulp16), f32 within tol.
    let (want, tol) = match dtype {
        DType::BF16 | DType::F16 => (round_to(dtype, &want), ulp16(dtype)),
        _ => (want, tol),
    };
    close(name, &got, &want, tol);
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
    // dim 300: float4 rows; 301: the scalar path; 296 and 2056: 16-bit rows of 8-column words
    // (CUDA's `_in8`; 2056: two blocks along the row).
    for (rows, dim) in [(7, 300), (3, 301), (5, 296), (3, 2056)] {
        let gu = t.rand(DType::F32, rows * 2 * dim, 3.0);
        let p = SiluMulParams { rows: rows as u32, dim: dim as u32, ..Default::default() };
        for dt in act_dtypes(gpu) {
            let mut out = out_as(&t, dt, rows * dim);
            t.gpu.silu_mul(&p, &gu.0, &mut out.0).unwrap();
            t.cpu.silu_mul(&p, &gu.1, &mut out.1).unwrap();
            check_act(&t, &format!("silu_mul {rows}x{dim} {dt:?}"), &out, rows * dim, dt, TOL_ELEMENTWISE);
        }
        // gate_up as a 16-bit GEMM wrote it (Backend::matmul_out16_dtype), out that dtype too:
        // the reference gets the same values in f32.
        for dt in out16_dtypes(gpu) {
            let g16 = t.up(dt, &t.cpu.download_f32(&gu.1, 0, rows * 2 * dim).unwrap());
            let mut out = out_as(&t, dt, rows * dim);
            t.gpu.silu_mul(&p, &g16.0, &mut out.0).unwrap();
            t.cpu.silu_mul(&p, &g16.1, &mut out.1).unwrap();
            check_act(&t, &format!("silu_mul {rows}x{dim} {dt:?} in"), &out, rows * dim, dt, TOL_ELEMENTWISE);
        }
    }
    for dim in X8_DIMS {
        let gu = t.rand(DType::F32, 2 * dim, 3.0);
        let p = SiluMulParams { rows: 1, dim: dim as u32, ..Default::default() };
        let Some(mut out) = x8_out(&t, dim) else { continue };
        t.gpu.silu_mul(&p, &gu.0, &mut out.0).unwrap();
        t.cpu.silu_mul(&p, &gu.1, &mut out.1).unwrap();
        check_x8(&t, &format!("silu_mul 1x{dim} X8"), &out, dim, TOL_ELEMENTWISE);
    }
}

/// `matmul_silu_mul` (wgpu: one kernel, `matmul_gemv_x8_silu_mul`, into an X8 act; every other
/// backend and case: the two ops) at one row on quantized gate|up weights (Q4_K, Q8_0; dims 32,
/// 96 and 1,056, i.e. 1, 3 and 33 blocks of act; with and without bias), into an X8 act where the
/// backend writes them and into an f32 one. Each call is checked in two independent halves:
/// gate_up against the CPU's matmul (x snapped to the two-digit grid, so the integer dots must
/// agree to summation order), and act against the CPU's `silu_mul` of the backend's own gate_up.
pub fn test_matmul_silu_mul<B: Backend>(gpu: &B) {
    let mut t = pair(gpu);
    for (wd, k) in [(DType::Ggml(GgmlType::Q4_K), 256), (DType::Ggml(GgmlType::Q8_0), 96)] {
        if !has_weights(gpu, wd) {
            continue;
        }
        for (dim, bias) in [(32, true), (96, false), (1056, true)] {
            let (n, sp) = (2 * dim, SiluMulParams { rows: 1, dim: dim as u32, ..Default::default() });
            let p = MatmulParams::new(1, n, k, bias);
            let w = weights(&mut t, wd, n, k, 0.1);
            let b = t.rand(DType::F32, n, 1.0);
            let xv = t.f32s(k, 1.0);
            let x = t.up(DType::F32, &weight_quant::x8_blocks(&xv, k));
            let acts: Vec<_> = x8_out(&t, dim).into_iter().chain([t.out(dim)]).collect();
            for mut act in acts {
                let ad = gpu.dtype(&act.0);
                let fused = gpu.matmul_silu_mul_fuses(&p, &w.0, ad);
                let name = format!("matmul_silu_mul {wd:?} k {k} dim {dim} bias {bias} act {ad:?} (fused {fused})");
                eprintln!("{name}");
                let mut gu = t.out(n);
                let bb = bias.then_some(&b);
                t.gpu.matmul_silu_mul(&p, &x.0, &w.0, bb.map(|b| &b.0), &mut gu.0, &mut act.0).unwrap();
                t.cpu.matmul(&p, &x.1, &w.1, bb.map(|b| &b.1), &mut gu.1).unwrap();
                t.check(&format!("{name} gate_up"), &gu, n, TOL_REDUCTION);
                let got = t.gpu.download_f32(&gu.0, 0, n).unwrap();
                let gu_ref = t.cpu.upload_f32(DType::F32, got).unwrap();
                t.cpu.silu_mul(&sp, &gu_ref, &mut act.1).unwrap();
                if ad == DType::X8 {
                    check_x8(&t, &name, &act, dim, TOL_ELEMENTWISE);
                } else {
                    t.check(&name, &act, dim, TOL_ELEMENTWISE);
                }
            }
        }
    }
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

/// Row blocks of uneven lengths (a 128-row block, an empty range, a 1-row one, the rest).
pub fn test_mean_rows<B: Backend>(gpu: &B) {
    let mut t = pair(gpu);
    let (n_src, dim) = (300, 70);
    let src = t.rand(DType::F32, n_src * dim, 1.0);
    let indptr = t.up_u32(&[0, 128, 128, 129, 300]);
    let mut out = t.out(4 * dim);
    let p = MeanRowsParams { n_out: 4, dim: dim as u32, n_src: n_src as u32, _pad: 0 };
    t.gpu.mean_rows(&p, &src.0, &indptr.0, &mut out.0).unwrap();
    t.cpu.mean_rows(&p, &src.1, &indptr.1, &mut out.1).unwrap();
    t.check("mean_rows", &out, 4 * dim, TOL_ELEMENTWISE);
}

pub fn test_argmax<B: Backend>(gpu: &B) {
    let mut t = pair(gpu);
    // Short rows, and rows long enough that CUDA splits them over several blocks (8K elements a
    // block): ties across blocks, NaN skipped, a row of NaN only.
    for (rows, n) in [(4, 5000), (5, 40_000)] {
        let mut x = t.f32s(rows * n, 1.0);
        x[n + 10] = 9.0; // a tie in row 1: the lower index wins
        x[n + n - 1000] = 9.0;
        x[2 * n + n - 1] = 7.0; // the last element
        x[3 * n] = f32::NAN;
        x[3 * n + 1] = f32::NAN;
        if rows > 4 {
            x[4 * n..5 * n].fill(f32::NAN); // no number: 0
            x[3 * n + 9000] = f32::INFINITY;
            x[3 * n + 20_000] = f32::INFINITY;
        }
        let x = t.up(DType::F32, &x);
        let mut out = t.out_u32(rows);
        let p = ArgmaxParams { rows: rows as u32, n: n as u32, ..Default::default() };
        t.gpu.argmax(&p, &x.0, &mut out.0).unwrap();
        t.cpu.argmax(&p, &x.1, &mut out.1).unwrap();
        t.check_u32("argmax", &out, rows);
        let got = t.gpu.download_u32(&out.0, 0, rows).unwrap();
        assert_eq!(got[1..3], [10, n as u32 - 1], "rows {rows} x {n}");
        if rows > 4 {
            assert_eq!(got[3..5], [9000, 0], "rows {rows} x {n}");
        }
    }
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

/// `write_f32_at` / `write_u32_at` (KV swap-in) into buffers of every KV dtype the backend stores:
/// the rest of the buffer untouched, the patch rounded to the dtype only.
pub fn test_write_at<B: Backend>(gpu: &B) {
    let mut t = pair(gpu);
    let round = |d: DType, x: f32| match d {
        DType::F16 => half::f16::from_f32(x).to_f32(),
        DType::BF16 => half::bf16::from_f32(x).to_f32(),
        _ => x,
    };
    for d in gpu.caps().kv_dtypes.clone().into_iter().filter(|d| !d.is_kv8()) {
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
