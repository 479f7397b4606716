//! The KV-side ops against the CPU reference, each with a KV-dtype axis: `rope_append_kv` (q, the
//! four pools and the page summaries; 8-bit pools bit for bit, with quantizer edge rows),
//! `matmul_rope_append_kv` (the q|k|v matmul with it),
//! `lambda_mass`, and the KV swap round trip (download_raw / write_raw_at). Instantiated per
//! backend by `parity_tests!` in tests/backend_parity.rs.

use super::elementwise::weights;
use super::{
    KvPair, Pair, TOL_ELEMENTWISE, TOL_REDUCTION, append, append_data, close, download_pool, download_raw_all, has_kv,
    has_weights, kv_pair, kv_tols, out16_dtypes, paged, pair,
};
use lserve::backend::reference::weight_quant;
use lserve::backend::*;

/// Rows `[head_dim]` that probe the 8-bit quantizers' edges: zeros; int8 ties (amax 127, values
/// k + 1/2); e4m3 ties (amax 448, midpoints 1.0625 and 1.1875, subnormal midpoint 3 * 2^-10);
/// a row below the 2^-100 zero threshold and one just above it; f32 subnormals beside a normal
/// amax; values that round up into the next binade (1.9375 with amax 448) and mixed signs.
fn crafted_rows(hd: usize) -> Vec<Vec<f32>> {
    let fill = |vals: &[f32]| (0..hd).map(|i| vals[i % vals.len()]).collect::<Vec<f32>>();
    let sub = f32::from_bits(0x0000_0321);
    vec![
        vec![0.0; hd],
        fill(&[127.0, 2.5, 3.5, -2.5, 0.5, -1.5, 126.5, -0.0]),
        fill(&[448.0, 1.0625, 1.1875, -1.0625, 3.0 * 2f32.powi(-10), 1.9375, -447.0, 0.0]),
        fill(&[1e-31, -2e-31, 3e-32]),
        fill(&[1e-29, -2e-29, 3e-30]),
        fill(&[1.0, sub, -sub, 1e-38, -0.75]),
        fill(&[-2.5e4, 1.0, 2.0, -7.0e-3, 2.0e4, 1e-5]),
    ]
}

/// qkv rows for `n` tokens whose v (and k) heads cycle through [`crafted_rows`]; q random.
fn crafted_qkv<B: Backend>(t: &mut Pair<B>, n: usize, nh: usize, n_kv: usize, hd: usize) -> Vec<f32> {
    let rows = crafted_rows(hd);
    let mut data = t.f32s(n * (nh + 2 * n_kv) * hd, 1.0);
    for tok in 0..n {
        for h in 0..2 * n_kv {
            let at = (tok * (nh + 2 * n_kv) + nh + h) * hd;
            data[at..at + hd].copy_from_slice(&rows[(tok + h) % rows.len()]);
        }
    }
    data
}

pub fn test_rope_append_kv<B: Backend>(gpu: &B, kvd: DType) {
    if !has_kv(gpu, kvd) {
        return;
    }
    let mut t = pair(gpu);
    // head_dim 18 for the 16-bit pools: wgpu stores them in one pass where head_dim % 4 == 0
    // (rope_append_kv16) and stages f32 rows otherwise; CUDA's several-token calls take one block
    // a token where head_dim / 2 divides 256 (16, 64: a thread loops over several heads at 64)
    // and a block per (token, head) otherwise (18).
    let hds: &[usize] = if matches!(kvd, DType::F16 | DType::BF16) { &[16, 18, 64] } else { &[16, 64] };
    for (ps, lp, hd) in [(16, 4), (32, 32)].into_iter().flat_map(|(ps, lp)| hds.iter().map(move |&hd| (ps, lp, hd))) {
        rope_case(&mut t, kvd, (ps, lp, hd), 6, DType::F32);
    }
    // qkv as a 16-bit GEMM wrote it (Backend::matmul_out16_dtype): the reference gets the same
    // values in f32.
    for qd in out16_dtypes(gpu) {
        for &hd in hds {
            rope_case(&mut t, kvd, (16, 4, hd), 6, qd);
        }
    }
}

/// One geometry of [`test_rope_append_kv`], qkv given to the backend in `qd`.
fn rope_case<B: Backend>(t: &mut Pair<'_, B>, kvd: DType, (ps, lp, hd): (usize, usize, usize), nh: usize, qd: DType) {
    let mut kv = kv_pair(t, vec![false, true, false], (ps, lp, hd), kvd);
    kv.qkv_dtype = qd;
    // The ring holds 32 tokens, 4 of them sink: chunks of up to 28 never wrap onto themselves.
    // Single tokens (wgpu's 16-bit pools and every CUDA pool fold those into the summary in the same pass) at
    // positions 22, 23 and 49 (inside logical pages) and 64 (the first of a logical and of a
    // physical page in both geometries).
    for n in [5, 17, 1, 1, 25, 1, 14, 1, 28] {
        let q = append(t, &mut kv, n, nh);
        t.check("rope_append_kv q", &q, n * nh * hd, TOL_ELEMENTWISE);
    }
    // Quantizer edge cases (zero, tie, tiny, subnormal and huge rows) into both pools, from an
    // f32 qkv (16 bits would round them away). Stored unrotated on every dtype: a huge pair
    // rotated by sin/cos one ulp apart across backends cancels to a value whose relative error
    // says nothing about the storage.
    if qd == DType::F32 {
        let data = crafted_qkv(t, 14, nh, 3, hd);
        let rotated = std::mem::replace(&mut kv.rope_identity, true);
        append_data(t, &mut kv, 14, nh, &data);
        kv.rope_identity = rotated;
    }
    check_kv(t, "rope_append_kv", &kv, kvd, (ps, lp, hd));
    if kvd.is_kv8() && qd == DType::F32 {
        rope_kv8_near(t, kvd, (ps, lp, hd), nh);
    }
}

/// `matmul_rope_append_kv` (wgpu: one kernel, `matmul_gemv_x8_rope`, where the pools are 16-bit
/// and head_dim % 8 == 0; every other backend and case: the two ops) one token a call, on
/// quantized q|k|v weights (Q4_K, Q8_0; with and without bias) at head_dim 16, 64 (fused on wgpu)
/// and 12 (not), after a prefix the plain op appended. Each call is checked in two independent
/// halves: the backend's qkv against the CPU's matmul (x snapped to the two-digit grid, so the
/// integer dots must agree to summation order), and its q, pools and page summaries against the
/// CPU's `rope_append_kv` of the backend's own qkv (so a rounding of qkv that differs by an ulp
/// cannot flip a 16-bit store and make the comparison flaky). Positions cross logical and
/// physical page starts and the streaming ring's wrap.
pub fn test_matmul_rope_append_kv<B: Backend>(gpu: &B, kvd: DType) {
    if !has_kv(gpu, kvd) {
        return;
    }
    let mut t = pair(gpu);
    for (wd, k) in [(DType::Ggml(GgmlType::Q4_K), 256), (DType::Ggml(GgmlType::Q8_0), 96)] {
        if !has_weights(gpu, wd) {
            continue;
        }
        for geom in [(16, 4, 16), (32, 32, 64), (16, 4, 12)] {
            matmul_rope_case(&mut t, kvd, (wd, k), geom);
        }
    }
}

fn matmul_rope_case<B: Backend>(
    t: &mut Pair<'_, B>,
    kvd: DType,
    (wd, k): (DType, usize),
    (ps, lp, hd): (usize, usize, usize),
) {
    let nh = 6;
    let mut kv = kv_pair(t, vec![false, true, false], (ps, lp, hd), kvd);
    let n = (nh + 6) * hd;
    let w = weights(t, wd, n, k, 0.1);
    let bias = t.rand(DType::F32, n, 1.0);
    append(t, &mut kv, 5, nh);
    let r = RopeAppendKvParams::new(&kv.gpu.geometry(0), 1, nh, 1.25);
    let fused = t.gpu.matmul_rope_fuses(&MatmulParams::new(1, n, k, false), &w.0, &r, kvd);
    eprintln!("matmul_rope_append_kv {wd:?} k {k} ps {ps} lp {lp} hd {hd} {kvd:?}: fused {fused}");
    let inv: Vec<f32> = (0..hd / 2).map(|i| 10000f32.powf(-2.0 * i as f32 / hd as f32)).collect();
    let inv = t.up(DType::F32, &inv);
    for step in 0..2 * ps + 3 {
        let p = MatmulParams::new(1, n, k, step % 2 == 0);
        let xv = t.f32s(k, 1.0);
        let x = t.up(DType::F32, &weight_quant::x8_blocks(&xv, k));
        kv.gpu.reserve(&mut kv.seq, 1).unwrap();
        let at = kv.seq.len;
        let pos = t.up_u32(&[at as u32]);
        let slots = t.up_u32(&kv.gpu.slots(&kv.seq, at, 1));
        let ring = t.up_u32(&kv.gpu.ring_slots(&kv.seq, at, 1));
        let mg = RopeAppendMeta { positions: &pos.0, slots: &slots.0, ring_slots: &ring.0, inv_freq: &inv.0 };
        let mc = RopeAppendMeta { positions: &pos.1, slots: &slots.1, ring_slots: &ring.1, inv_freq: &inv.1 };
        let (mut qkv, mut q) = (t.out(n), t.out(nh * hd));
        let b = (p.has_bias != 0).then_some(&bias);
        let kvg = kv.gpu.layers[0].view_mut();
        t.gpu.matmul_rope_append_kv(&p, &x.0, &w.0, b.map(|b| &b.0), &mut qkv.0, &r, &mg, &mut q.0, kvg).unwrap();
        t.cpu.matmul(&p, &x.1, &w.1, b.map(|b| &b.1), &mut qkv.1).unwrap();
        let name = format!("matmul_rope_append_kv {wd:?} hd {hd} step {step}");
        t.check(&format!("{name} qkv"), &qkv, n, TOL_REDUCTION);
        let got = t.gpu.download_f32(&qkv.0, 0, n).unwrap();
        let qkv_ref = t.cpu.upload_f32(DType::F32, got).unwrap();
        t.cpu.rope_append_kv(&r, &qkv_ref, &mc, &mut q.1, kv.cpu.layers[0].view_mut()).unwrap();
        t.check(&format!("{name} q"), &q, nh * hd, TOL_ELEMENTWISE);
        kv.seq.len += 1;
    }
    check_kv(t, "matmul_rope_append_kv", &kv, kvd, (ps, lp, hd));
}

/// The four pools of `kv`'s layer (8-bit: bit for bit) and the page summaries of its logical
/// pages that hold tokens, backend against reference.
fn check_kv<B: Backend>(t: &Pair<'_, B>, op: &str, kv: &KvPair<B>, kvd: DType, (ps, lp, hd): (usize, usize, usize)) {
    let (tol_pool, _) = kv_tols(kvd);
    let (g, c) = (&kv.gpu.layers[0], &kv.cpu.layers[0]);
    for (name, gb, cb) in [("k", &g.k, &c.k), ("v", &g.v, &c.v), ("sk", &g.sk, &c.sk), ("sv", &g.sv, &c.sv)] {
        if kvd.is_kv8() {
            let (gr, cr) = (download_raw_all(t.gpu, gb), download_raw_all(&t.cpu, cb));
            assert_eq!(gr.len(), cr.len(), "{name} pool size ({kvd:?})");
            // e4m3 codes 0x00 and 0x80 are both zero: a negative f32 subnormal (the crafted rows
            // hold some) rounds to -0 on the CPU, while a GPU that flushes subnormals to zero
            // (NVIDIA's Vulkan driver) may lose its sign in the identity rotation.
            let zeros = |i: usize| kvd == DType::F8E4M3 && i % (ps * (hd + 4)) < ps * hd && (gr[i] | cr[i]) == 0x80;
            if let Some(i) = (0..gr.len()).find(|&i| gr[i] != cr[i] && !zeros(i)) {
                panic!("{op} {name} pool ({kvd:?}): byte {i} is {:#04x}, want {:#04x}", gr[i], cr[i]);
            }
            continue;
        }
        close(&format!("{op} {name} pool ({kvd:?})"), &download_pool(t.gpu, gb), &download_pool(&t.cpu, cb), tol_pool);
    }
    // Summaries of logical pages that hold tokens (the rest are never read).
    let (gs, cs) = (download_pool(t.gpu, &g.summary), download_pool(&t.cpu, &c.summary));
    let (lpp, hd2) = (ps / lp, 2 * hd);
    for lpage in 0..kv.seq.len.div_ceil(lp) {
        let page = kv.seq.pages[lpage * lp / ps] as usize;
        for r in 0..2 {
            let at = ((page * 2 + r) * lpp + (lpage * lp % ps) / lp) * hd2;
            close(&format!("{op} summary ({kvd:?})"), &gs[at..at + hd2], &cs[at..at + hd2], tol_pool);
        }
    }
}

/// 8-bit KV with a real rotation: V (copied, never rotated) is stored bit for bit; K codes may
/// differ where a rotated value differs by an ulp across the backends' sin/cos and lies next to a
/// rounding boundary: every code within one step of the CPU's, at most 1% of them off, scales
/// within 1e-6 (an amax one ulp off).
fn rope_kv8_near<B: Backend>(t: &mut Pair<B>, kvd: DType, (ps, lp, hd): (usize, usize, usize), nh: usize) {
    let mut kv = kv_pair(t, vec![false, true, false], (ps, lp, hd), kvd);
    kv.rope_identity = false;
    for n in [13, 25] {
        append(t, &mut kv, n, nh);
    }
    let (g, c) = (&kv.gpu.layers[0], &kv.cpu.layers[0]);
    for (name, gb, cb) in [("v", &g.v, &c.v), ("sv", &g.sv, &c.sv)] {
        assert!(download_raw_all(t.gpu, gb) == download_raw_all(&t.cpu, cb), "{name} pool ({kvd:?}) not bit-exact");
    }
    for (name, gb, cb) in [("k", &g.k, &c.k), ("sk", &g.sk, &c.sk)] {
        let (gr, cr) = (download_raw_all(t.gpu, gb), download_raw_all(&t.cpu, cb));
        let (mut off, mut n) = (0usize, 0usize);
        for blk in 0..gr.len() / (ps * (hd + 4)) {
            let base = blk * ps * (hd + 4);
            for i in base..base + ps * hd {
                let (a, b) = (gr[i], cr[i]);
                let step = if kvd == DType::I8 {
                    (a as i8 as i32 - b as i8 as i32).abs()
                } else if a >> 7 == b >> 7 {
                    ((a & 0x7f) as i32 - (b & 0x7f) as i32).abs()
                } else {
                    ((a & 0x7f) as i32 + (b & 0x7f) as i32).abs() // -0 / +0 neighbours
                };
                assert!(step <= 1, "{name} pool ({kvd:?}) byte {i}: {a:#04x} vs {b:#04x}");
                off += (a != b) as usize;
                n += 1;
            }
            for r in 0..ps {
                let at = base + ps * hd + 4 * r;
                let (x, y) = (
                    f32::from_le_bytes(gr[at..at + 4].try_into().unwrap()),
                    f32::from_le_bytes(cr[at..at + 4].try_into().unwrap()),
                );
                assert!((x - y).abs() <= 1e-6 * y.abs(), "{name} scale ({kvd:?}) row {r} of block {blk}: {x} vs {y}");
            }
        }
        eprintln!("{name} pool ({kvd:?}), real RoPE: {off} of {n} codes one step off the CPU's");
        assert!(off * 100 <= n, "{name} pool ({kvd:?}): {off} of {n} codes differ");
    }
}

pub fn test_lambda_mass<B: Backend>(gpu: &B, kvd: DType) {
    if !has_kv(gpu, kvd) {
        return;
    }
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

/// KV swap through `download_raw` / `write_raw_at` for every KV dtype the backend stores: a
/// sequence's copy, swapped in at other pages and slot and copied out again, is bit-identical;
/// with 8-bit KV the copy (codes, scales, summaries, ring, selection) also equals the CPU
/// reference's bit for bit. Raw writes at an offset leave the rest of the buffer untouched.
pub fn test_swap_round_trip<B: Backend>(gpu: &B, kvd: DType) {
    if !has_kv(gpu, kvd) {
        return;
    }
    let mut t = pair(gpu);
    {
        let (nh, hd) = (6, 16);
        let mut kv = kv_pair(&t, vec![false, true, false], (16, 4, hd), kvd);
        for n in [20, 20, 13] {
            append(&mut t, &mut kv, n, nh);
        }
        let n_sel = t.gpu.len(&kv.gpu.layers[0].selected);
        let sel: Vec<u32> = (0..n_sel as u32).map(|i| i * 7 % 5).collect();
        t.gpu.write_u32(&mut kv.gpu.layers[0].selected, &sel).unwrap();
        t.cpu.write_u32(&mut kv.cpu.layers[0].selected, &sel).unwrap();
        let copy = kv.gpu.swap_out(t.gpu, &kv.seq).unwrap();
        if kvd.is_kv8() {
            let want = kv.cpu.swap_out(&t.cpu, &kv.seq).unwrap();
            assert!(copy.bits() == want.bits(), "swap-out copy ({kvd:?}) differs from the CPU reference's");
        }
        let mut seq = kv.seq.clone();
        kv.gpu.release(&mut seq).unwrap();
        let held = kv.gpu.alloc.alloc(3).unwrap(); // the lowest pages go elsewhere
        let back = kv.gpu.swap_in(t.gpu, &copy).unwrap();
        kv.gpu.alloc.release(&held).unwrap();
        assert_ne!(back.pages, kv.seq.pages, "swapped in at other pages");
        let again = kv.gpu.swap_out(t.gpu, &back).unwrap();
        assert!(again.bits() == copy.bits(), "swap round trip ({kvd:?}) not bit-identical");
        assert_eq!(again.len, 53);

        // Raw write at an offset into a pool of this dtype.
        let mut b = t.gpu.alloc(kvd, 256).unwrap();
        let patch: Vec<u8> = (0..24u32).map(|i| (i * 37 + 5) as u8).collect();
        t.gpu.write_raw_at(&mut b, 40, &patch).unwrap();
        let got = t.gpu.download_raw(&b, 0, 256 * kvd.size()).unwrap();
        let mut want = vec![0u8; 256 * kvd.size()];
        want[40..64].copy_from_slice(&patch);
        assert_eq!(got, want, "write_raw_at ({kvd:?})");
    }
}
