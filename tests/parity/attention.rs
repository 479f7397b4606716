//! The attention ops against the CPU reference, with KV dtype x head_dim axes:
//! `prefill_attention` (head_dim 16: short chained chunks with windows and streaming heads; 72 or
//! 80, 128, 256: a ragged batch at the tensor-core kernel's scale), `sparse_decode_attention` and
//! `page_select` (one chained decode scenario, each test comparing its op), and `page_select`
//! at scale (`page_select::many`: up to a 40,000-page sequence) and over block-sparse prefill's
//! virtual rows (`page_select::rows`). Instantiated per backend by
//! `parity_tests!` in tests/backend_parity.rs.

use super::{
    KvPair, Pair, TOL_ATTENTION, TOL_ATTENTION_KV_F16, append, append_data, attn_params, close16, download_pool,
    download_u32_all, has_kv, kv_pair, kv_pair_shape, kv_tols, paged, pair, round_to,
};
use lserve::backend::cpu::CpuBackend;
use lserve::backend::*;
use lserve::kv::{CacheShape, HeadLayout};

/// Prefill's attention tolerance for a KV dtype: the KV dtype's (`kv_tols`), looser than decode's
/// TOL_ATTENTION for 16-bit KV even though the reference attends over the same stored values
/// ([`mirror_pools`]), because the tensor-core kernels round P (and Q) to the KV type; 8-bit KV,
/// which a backend may multiply on 16-bit tensor cores (CUDA at head_dim 64 / 128 / 256: the
/// codes exactly, but Q and P rounded to f16), takes f16's.
fn prefill_tol(kvd: DType) -> f32 {
    if kvd.is_kv8() { TOL_ATTENTION_KV_F16 } else { kv_tols(kvd).1 }
}

/// head_dim 16: three short chained cases (window, streaming heads); 64, 72 (8-bit: 80), 128,
/// 256: the long ragged batch of [`prefill_attention_long`].
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
        let tol = prefill_tol(kvd);
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
        t.gpu.prefill_attention(&p, &q.0, &qi.0, kv.gpu.layers[0].view(), &mg, None, &mut out.0).unwrap();
        t.cpu.prefill_attention(&p, &q.1, &qi.1, kv.cpu.layers[0].view(), &mc, None, &mut out.1).unwrap();
        let name = format!("prefill_attention window {window} kv {kvd:?}");
        t.check(&name, &out, n * nh * hd, tol);
        let run = |o: &mut B::Buffer| t.gpu.prefill_attention(&p, &q.0, &qi.0, kv.gpu.layers[0].view(), &mg, None, o);
        out16_case(&t, &name, run, &out.1, n * nh * hd, tol);
    }
}

/// The same call into f16 and bf16 outs where the backend writes them (`Caps::act16_from`): the
/// reference's f32 out rounded to each, within `tol` plus one unit in the last place; a
/// backend without 16-bit activations must refuse them.
fn out16_case<B: Backend>(
    t: &Pair<'_, B>,
    name: &str,
    run: impl Fn(&mut B::Buffer) -> lserve::error::Result<()>,
    want: &<CpuBackend as Backend>::Buffer,
    len: usize,
    tol: f32,
) {
    let want = t.cpu.download_f32(want, 0, len).unwrap();
    for d in [DType::F16, DType::BF16] {
        let Ok(mut o) = t.gpu.upload_f32(d, vec![f32::NAN; len]) else { continue };
        let r = run(&mut o);
        if t.gpu.caps().act16_from.is_none() {
            assert!(r.is_err(), "{name}: a {d:?} out without 16-bit activations");
            continue;
        }
        r.unwrap();
        close16(name, d, &t.gpu.download_f32(&o, 0, len).unwrap(), &want, tol);
    }
}

/// Prefill at the tensor-core kernels' scale: head_dim 128, 64, 72 (padded to 128; 8-bit KV,
/// which needs head_dim % 16 == 0, takes 80 in its place) and 256, one retrieval and one
/// streaming KV head, a ragged batch of two sequences (a 140-row chunk after a 300-token prefix,
/// and a 100-row first chunk), so query tiles start off the 64-key tile grid, span several key
/// tiles, and the streaming head (sink 8, local 70) skips whole tiles between its sink and its
/// band; with and without a window. GQA groups of 2 query heads per KV head, at head_dim 128
/// also 4 (Llama 3's, and the CUDA Hopper kernel's shape); with 16-bit KV at head_dim 64 / 128
/// (wgpu's cooperative-matrix kernel) 2, 4 and 3 (64-row tiles cut a token's heads apart), for
/// f16 with the chunk's keys at 2.5x the norm of the prefix's (so a later key tile's max exceeds
/// a row's running max by more than that kernel's lazy-rescale threshold, and O is rescaled;
/// f16 only: with such peaked rows, P rounded to bf16's 8 bits by the tensor-core kernels is
/// what bf16's tolerance would then measure). 16-bit KV: the reference attends over the
/// backend's stored keys and values ([`mirror_pools`]).
fn prefill_attention_long<B: Backend>(gpu: &B, kvd: DType, hd: usize) {
    let coop = matches!(kvd, DType::F16 | DType::BF16) && (hd == 64 || hd == 128);
    // GQA 2; at head_dim 128 (Llama's, and the CUDA Hopper kernel's) also GQA 4.
    let groups = if coop {
        vec![2, 4, 3]
    } else if hd == 128 {
        vec![2, 4]
    } else {
        vec![2]
    };
    for group in groups {
        prefill_attention_long_group(gpu, kvd, hd, 2 * group, coop && kvd == DType::F16);
    }
}

/// [`prefill_attention_long`] with `nh` query heads over its 2 KV heads (`loud`: the first
/// sequence's chunk with 2.5x keys).
fn prefill_attention_long_group<B: Backend>(gpu: &B, kvd: DType, hd: usize, nh: usize, loud: bool) {
    let mut t = pair(gpu);
    let (ps, sink, local) = (16, 8, 70);
    {
        let tol = prefill_tol(kvd);
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
        let width = (nh + 4) * hd; // q, 2 KV heads' k, then their v
        let mut data = t.f32s(140 * width, 1.0);
        let kx = if loud { 2.5 } else { 1.0 };
        data.chunks_mut(width).for_each(|row| row[nh * hd..(nh + 2) * hd].iter_mut().for_each(|x| *x *= kx));
        let qa = append_data(&mut t, &mut kv, 140, nh, &data);
        let seq_a = kv.seq.clone();
        kv.seq = kv.gpu.admit().unwrap();
        assert_eq!(kv.seq, kv.cpu.admit().unwrap());
        let qb = append(&mut t, &mut kv, 100, nh);
        if matches!(kvd, DType::F16 | DType::BF16) {
            mirror_pools(&t, &mut kv);
        }
        let seqs = [&seq_a, &kv.seq];
        let row = nh * hd;
        // Both backends get the reference's queries, rounded to a 16-bit KV type as the
        // tensor-core kernels round them, so the comparison is of P's rounding and summation
        // order (with the loud keys, q's own rounding alone moved outputs past the tolerance for
        // some seeds, equally in all three CUDA kernels).
        let q_ref =
            [t.cpu.download_f32(&qa.1, 0, 140 * row).unwrap(), t.cpu.download_f32(&qb.1, 0, 100 * row).unwrap()]
                .concat();
        let q = t.up(DType::F32, &round_to(kvd, &q_ref));
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
            t.gpu.prefill_attention(&p, &q.0, &qi.0, kv.gpu.layers[0].view(), &mg, None, &mut out.0).unwrap();
            t.cpu.prefill_attention(&p, &q.1, &qi.1, kv.cpu.layers[0].view(), &mc, None, &mut out.1).unwrap();
            let name = format!("prefill_attention_long hd {hd} heads {nh} window {window} keys x{kx} kv {kvd:?}");
            t.check(&name, &out, 240 * row, tol);
            let run =
                |o: &mut B::Buffer| t.gpu.prefill_attention(&p, &q.0, &qi.0, kv.gpu.layers[0].view(), &mg, None, o);
            out16_case(&t, &name, run, &out.1, 240 * row, tol);
        }
        // Block-sparse: blocks A0 (first 300, tail page 17), A1 (first 428, tail 25), B0 (first
        // 0, tail 0); lists with entries at or past the tail (skipped), out of order, garbage
        // past the count; a dense block; a sparse block with an empty list.
        let sel = [
            [0, 3, 7, 15, 16, 40], // A0: 16 + 1 is not below 17
            [2, 24, 5, 23, 1, 9],  // A1: 24 + 1 is not below 25
            [0, 1, 2, 3, 4, 5],    // B0
        ];
        let selected: Vec<u32> = sel.iter().flatten().copied().collect();
        for counts in [[5, 4, BLOCK_DENSE], [0, BLOCK_DENSE, 3], [6, 6, 0]] {
            let p = AttentionParams {
                num_seqs: 2,
                sink: sink as u32,
                local,
                scale: 1.0 / (hd as f32).sqrt(),
                sel_stride: 6,
                ..attn_params(&kv, 240, nh, 0)
            };
            let (se, co) = (t.up_u32(&selected), t.up_u32(&counts));
            let bg = BlockPages { selected: &se.0, counts: &co.0 };
            let bc = BlockPages { selected: &se.1, counts: &co.1 };
            let mut out = t.out(240 * row);
            t.gpu.prefill_attention(&p, &q.0, &qi.0, kv.gpu.layers[0].view(), &mg, Some(&bg), &mut out.0).unwrap();
            t.cpu.prefill_attention(&p, &q.1, &qi.1, kv.cpu.layers[0].view(), &mc, Some(&bc), &mut out.1).unwrap();
            let name = format!("block-sparse prefill hd {hd} heads {nh} counts {counts:?} kv {kvd:?}");
            t.check(&name, &out, 240 * row, tol);
            let run = |o: &mut B::Buffer| {
                t.gpu.prefill_attention(&p, &q.0, &qi.0, kv.gpu.layers[0].view(), &mg, Some(&bg), o)
            };
            out16_case(&t, &name, run, &out.1, 240 * row, tol);
        }
    }
}

/// 16-bit KV: the CPU reference's (f32) pools get the values the backend stored (exact in f32),
/// so that a comparison measures the attention kernel, not the pools' rounding of keys (which
/// `rope_append_kv`'s own parity checks). With peaked attention (loud keys) the f16 rounding of
/// the keys alone moved some outputs by ~0.005 (seed 1796288944820207446).
pub fn mirror_pools<B: Backend>(t: &Pair<B>, kv: &mut KvPair<B>) {
    let (g, c) = (&kv.gpu.layers[0], &mut kv.cpu.layers[0]);
    for (gb, cb) in [(&g.k, &mut c.k), (&g.v, &mut c.v), (&g.sk, &mut c.sk), (&g.sv, &mut c.sv)] {
        t.cpu.write_f32(cb, &download_pool(t.gpu, gb)).unwrap();
    }
}

/// head_dim axis: 16 (half of a 32-dim K block in the wgpu kernel), 72 (two blocks and a partial
/// third; 64 for 8-bit KV, which needs head_dim % 16 == 0) and 128, Llama's head size (a dim pair
/// per thread, two key groups in the cp.async kernel), for each KV dtype.
/// GQA groups of 2, and at head_dim 64 / 128 also 4 and 8 query heads per KV head (the CUDA
/// tensor-core kernel's 8 columns, partly and fully used).
pub fn test_sparse_decode_attention<B: Backend>(gpu: &B, kvd: DType, hd: usize) {
    if has_kv(gpu, kvd) {
        let groups: &[usize] = if hd == 64 || hd == 128 { &[2, 4, 8] } else { &[2] };
        for &g in groups {
            decode_and_select(gpu, kvd, hd, 3 * g, Check::Decode);
        }
    }
}

/// The selection of the chained decode scenario, per KV dtype and head_dim.
pub fn test_page_select<B: Backend>(gpu: &B, kvd: DType, hd: usize) {
    if has_kv(gpu, kvd) {
        decode_and_select(gpu, kvd, hd, 6, Check::Select);
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
/// (only the counts are compared then); f32 and 8-bit KV (the CPU keeps the same 8-bit cache:
/// bit-identical summaries) must select the same pages. The decode check always copies the CPU's
/// selection to the backend first, so it compares attention alone. Each selection unit
/// (`sel_unit`): 0 (the 16-token physical page), 4 (the logical page) and 8 (two of them).
fn decode_and_select<B: Backend>(gpu: &B, kvd: DType, hd: usize, nh: usize, check: Check) {
    for unit in [0, 4, 8] {
        decode_and_select_unit(gpu, kvd, hd, nh, check, unit);
    }
}

fn decode_and_select_unit<B: Backend>(gpu: &B, kvd: DType, hd: usize, nh: usize, check: Check, unit: u32) {
    let mut t = pair(gpu);
    let (ps, lp) = (16, 4);
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
    let ap = AttentionParams { sel_unit: unit, ..attn_params(&kv, 1, nh, 0) };
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
        sel_unit: unit,
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
            assert_eq!(gc, cc, "page_select counts, unit {unit}");
            // f32 and 8-bit KV: identical summaries on both sides, so identical selections.
            if kvd == DType::F32 || kvd.is_kv8() {
                for r in 0..2 {
                    let k = cc[r] as usize;
                    assert_eq!(gs[r * 6..r * 6 + k], cs[r * 6..r * 6 + k], "page_select head {r}, unit {unit}");
                }
            }
            return;
        }
        let (sel, cnt) = (download_u32_all(&t.cpu, &c.selected), download_u32_all(&t.cpu, &c.counts));
        t.gpu.write_u32(&mut g.selected, &sel).unwrap();
        t.gpu.write_u32(&mut g.counts, &cnt).unwrap();
    }
    // 16-bit KV: the CPU reference attends over the values the backend stored (exact in f32), so
    // the comparison measures the kernel, not the pools' rounding (rope_append_kv checks that);
    // a backend computing in ~f32 then agrees within TOL_ATTENTION.
    let tol = if matches!(kvd, DType::F16 | DType::BF16) {
        mirror_pools(&t, &mut kv);
        TOL_ATTENTION
    } else {
        tol
    };
    // Tails count units: none, the newest page's first, the fourth.
    let upp = if unit == 0 { 1 } else { ps / unit as usize };
    for tail in [0u32, ((kv.seq.pages.len() - 1) * upp) as u32, 3] {
        let tl = t.up_u32(&[tail]);
        let (g, c) = (&kv.gpu.layers[0], &kv.cpu.layers[0]);
        let hg = HeadPages { selected: &g.selected, counts: &g.counts, seq_slot: &slot.0, tail_start: &tl.0 };
        let hc = HeadPages { selected: &c.selected, counts: &c.counts, seq_slot: &slot.1, tail_start: &tl.1 };
        let mut out = t.out(nh * hd);
        t.gpu.sparse_decode_attention(&ap, &q.0, g.view(), &mg, &hg, &mut out.0).unwrap();
        t.cpu.sparse_decode_attention(&ap, &q.1, c.view(), &mc, &hc, &mut out.1).unwrap();
        let name = format!("sparse_decode_attention tail {tail} unit {unit} kv {kvd:?} hd {hd} nh {nh}");
        t.check(&name, &out, nh * hd, tol);
        // The same row as x8 digits where the backend writes them (one sequence, head_dim a
        // multiple of 32): against the reference's result snapped to the grid.
        if let Some(mut out8) = super::x8_out(&t, nh * hd).filter(|_| hd.is_multiple_of(32)) {
            t.gpu.sparse_decode_attention(&ap, &q.0, g.view(), &mg, &hg, &mut out8.0).unwrap();
            t.cpu.sparse_decode_attention(&ap, &q.1, c.view(), &mc, &hc, &mut out8.1).unwrap();
            super::check_x8(&t, &format!("{name} out X8"), &out8, nh * hd, tol);
        }
    }
}

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
    let kv = [&summary, &pool, &spool, &head_map];
    select_both(&t, &p, kv, [&ip, &tab, &kvl, &ring], &q, [&slot, &mask], (&mut sel, &mut cnt));
    t.check_u32("page_select counts", &cnt, 4 * n_ret);
    let want = t.cpu.download_u32(&cnt.1, 0, 4 * n_ret).unwrap();
    // Slots 0..3 hold sequences 1 (the long one), 3 (299 pages), 0 (1) and 2 (not selecting).
    assert_eq!(want[..3 * n_ret], counts, "k, capped by the candidates");
    assert_eq!(want[3 * n_ret..], [u32::MAX; 2], "the row not selecting is untouched");
    t.check_u32("page_select selected", &sel, 4 * n_ret * sel_stride);
}

/// A buffer on the tested backend and its copy on the CPU reference.
type Both<B> = (<B as Backend>::Buffer, <CpuBackend as Backend>::Buffer);

/// `page_select` with `p` on both backends: KV `[summary, K/V pool, streaming pool, head_map]`,
/// paging `[page_indptr, page_table, kv_len, ring_table]`, `[seq_slot, select_mask]`, into
/// (selected, counts).
#[allow(clippy::type_complexity)]
fn select_both<B: Backend>(
    t: &Pair<'_, B>,
    p: &PageSelectParams,
    [summary, pool, spool, head_map]: [&Both<B>; 4],
    [ip, tab, kvl, ring]: [&Both<B>; 4],
    q: &Both<B>,
    [slot, mask]: [&Both<B>; 2],
    (sel, cnt): (&mut Both<B>, &mut Both<B>),
) {
    let kvg =
        LayerKv { k: &pool.0, v: &pool.0, summary: &summary.0, sk: &spool.0, sv: &spool.0, head_map: &head_map.0 };
    let kvc =
        LayerKv { k: &pool.1, v: &pool.1, summary: &summary.1, sk: &spool.1, sv: &spool.1, head_map: &head_map.1 };
    let mg = PagedMeta { page_indptr: &ip.0, page_table: &tab.0, kv_len: &kvl.0, ring_table: &ring.0 };
    let mc = PagedMeta { page_indptr: &ip.1, page_table: &tab.1, kv_len: &kvl.1, ring_table: &ring.1 };
    t.gpu
        .page_select(p, &q.0, kvg, &mg, &slot.0, &mask.0, SelectedMut { selected: &mut sel.0, counts: &mut cnt.0 })
        .unwrap();
    t.cpu
        .page_select(p, &q.1, kvc, &mc, &slot.1, &mask.1, SelectedMut { selected: &mut sel.1, counts: &mut cnt.1 })
        .unwrap();
}

/// page_select over block-sparse prefill's virtual rows (`rows_share_pages`, CUDA's
/// `page_select_score_rows`): 70 rows, each listing a prefix `1..=tail` of one of two sequences'
/// pages (300 and 120 pages of a shuffled pool; rows 0-39 the first, 40-69 the second, so a
/// tile of 16 or 32 rows straddles them), three rows not selecting, one without candidates;
/// logical pages of 16 and 4 tokens (1 and 4 a page), the bound and a shrunk box, the sink pin
/// off and on, head_dim 72 (a partial chunk) and 128, a GQA group of 4: the same counts and
/// picks as the CPU reference, which ignores the hint.
pub fn test_page_select_rows<B: Backend>(gpu: &B) {
    for (hd, lp, shrink, pin) in [(72, 16, 0.0, 0), (128, 4, 0.0, 1), (128, 16, 0.5, 1), (72, 4, 0.25, 0)] {
        page_select_rows_case(gpu, hd, lp, shrink, pin);
    }
}

fn page_select_rows_case<B: Backend>(gpu: &B, hd: usize, lp: usize, shrink: f32, pin: u32) {
    let mut t = pair(gpu);
    let (n_kv, n_ret, group, ps, num_pages) = (3usize, 2usize, 4usize, 16usize, 500usize);
    let (nh, lpp) = (n_kv * group, ps / lp);
    let summary = t.f32s(num_pages * n_ret * lpp * 2 * hd, 1.0);
    let mut perm: Vec<u32> = (0..num_pages as u32).collect();
    for i in (1..perm.len()).rev() {
        perm.swap(i, (t.rng.next() * (i + 1) as f64) as usize % (i + 1));
    }
    let (seq_a, seq_b) = (&perm[..300], &perm[300..420]);
    let rows = 70;
    let (mut indptr, mut table) = (vec![0u32], vec![]);
    for i in 0..rows {
        let (pages, tail) = if i < 40 { (seq_a, (5 + 7 * i).min(299)) } else { (seq_b, (3 + 4 * (i - 40)).min(119)) };
        let tail = if i == 17 { 1 } else { tail }; // a single entry: no candidates
        table.extend_from_slice(&pages[1..=tail]);
        indptr.push(table.len() as u32);
    }
    let mask: Vec<u32> = (0..rows).map(|i| u32::from(![5, 38, 61].contains(&i))).collect();
    let slots: Vec<u32> = (0..rows as u32).collect();
    let (k_pages, sel_stride) = (20u32, 24usize);
    let summary = t.up(DType::F32, &summary);
    let pool = t.rand(DType::F32, num_pages * n_ret * ps * hd, 1.0);
    let spool = t.rand(DType::F32, ps * hd, 1.0);
    let head_map = t.up_u32(&[0, STREAMING_BIT, 1]);
    let (ip, tab) = (t.up_u32(&indptr), t.up_u32(&table));
    let (kvl, ring) = (t.up_u32(&vec![0; rows]), t.up_u32(&vec![0; rows]));
    let q = t.rand(DType::F32, rows * nh * hd, 1.0);
    let (slot, maskb) = (t.up_u32(&slots), t.up_u32(&mask));
    let mut sel = t.out_u32(rows * n_ret * sel_stride);
    let mut cnt = t.out_u32(rows * n_ret);
    let max_seq_pages = (indptr.windows(2).map(|w| w[1] - w[0]).max().unwrap() as usize).next_power_of_two() as u32;
    let p = PageSelectParams {
        num_seqs: rows as u32,
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
        pin_first: pin,
        bound_shrink: shrink,
        rows_share_pages: 1,
        ..Default::default()
    };
    let kv = [&summary, &pool, &spool, &head_map];
    select_both(&t, &p, kv, [&ip, &tab, &kvl, &ring], &q, [&slot, &maskb], (&mut sel, &mut cnt));
    let what = format!("page_select rows (hd {hd}, logical page {lp}, shrink {shrink}, pin {pin})");
    t.check_u32(&format!("{what} counts"), &cnt, rows * n_ret);
    let want = t.cpu.download_u32(&cnt.1, 0, rows * n_ret).unwrap();
    assert_eq!(want[17 * n_ret..18 * n_ret], [0, 0], "{what}: the row without candidates");
    assert_eq!(want[5 * n_ret..6 * n_ret], [u32::MAX; 2], "{what}: a row not selecting is untouched");
    t.check_u32(&format!("{what} selected"), &sel, rows * n_ret * sel_stride);
}

/// An independent f64 score of every candidate of one (row, retrieval head): per query head the
/// max over the page's logical pages of the Quest bound (with `shrink` > 0 of the box shrunk
/// toward its centre, `q . mid + (1 - shrink) |q| . half`), combined by max (`PAGE_RANK_MAX`) or
/// as `ln sum_g softmax_j(scale * m_g(j))` (`PAGE_RANK_HEAD_NORM`, whose order is the sum's).
fn rank_scores_f64(
    summary: &[f32],
    q: &[f32],
    pages: &[u32],
    dims: [usize; 5],
    (rank, scale, shrink): (u32, f64, f64),
) -> Vec<f64> {
    let [n_ret, lpp, hd, group, r] = dims;
    let m: Vec<Vec<f64>> = q
        .chunks_exact(hd)
        .take(group)
        .map(|qg| {
            let bound = |page: usize, l: usize| -> f64 {
                let at = (((page * n_ret + r) * lpp + l) * 2) * hd;
                (0..hd)
                    .map(|c| {
                        let (q, lo, hi) = (qg[c] as f64, summary[at + c] as f64, summary[at + hd + c] as f64);
                        // The bound's own form at 0: the random summaries need not have lo <= hi.
                        if shrink == 0.0 {
                            return (q * hi).max(q * lo);
                        }
                        q * (hi + lo) / 2.0 + (1.0 - shrink) * q.abs() * (hi - lo) / 2.0
                    })
                    .sum()
            };
            pages.iter().map(|&pg| (0..lpp).map(|l| bound(pg as usize, l)).fold(f64::NEG_INFINITY, f64::max)).collect()
        })
        .collect();
    let n = pages.len();
    if rank == PAGE_RANK_MAX {
        return (0..n).map(|j| m.iter().map(|h| h[j]).fold(f64::NEG_INFINITY, f64::max)).collect();
    }
    let norm: Vec<Vec<f64>> = m
        .iter()
        .map(|h| {
            let top = h.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = h.iter().map(|x| (scale * (x - top)).exp()).collect();
            let z: f64 = e.iter().sum();
            e.into_iter().map(|x| x / z).collect()
        })
        .collect();
    (0..n).map(|j| norm.iter().map(|h| h[j]).sum::<f64>().ln()).collect()
}

/// `sel` (ascending, `k` long) is a top-k of `scores` up to `tol`: no kept page scores below the
/// k-th best by more than tol, no dropped page above it by more than tol.
fn assert_top_k(name: &str, scores: &[f64], sel: &[u32], k: usize, pinned: bool, tol: f64) {
    assert_eq!(sel.len(), k, "{name}: count");
    assert!(sel.windows(2).all(|w| w[0] < w[1]), "{name}: not ascending: {sel:?}");
    let mut s = scores.to_vec();
    if pinned && !s.is_empty() {
        s[0] = f64::INFINITY;
        assert!(sel.contains(&0), "{name}: the pinned page 0 is missing");
    }
    if k == 0 {
        return;
    }
    let mut sorted = s.clone();
    sorted.sort_by(|a, b| b.total_cmp(a));
    let kth = sorted[k - 1];
    let tol = tol * (1.0 + kth.abs().min(1e6));
    for (j, &x) in s.iter().enumerate() {
        let kept = sel.contains(&(j as u32));
        assert!(!kept || x >= kth - tol, "{name}: page {j} kept with {x} < k-th {kth}");
        assert!(kept || x <= kth + tol, "{name}: page {j} dropped with {x} > k-th {kth}");
    }
}

/// Both rankings (`rank` max and head_norm), each with and without the pinned first page, and
/// `bound_shrink` 0.5 / 1 beside the bound itself, on random seeded summaries where the query
/// heads' scales differ (so the rankings disagree, and the shrink changes selections: both
/// asserted), three selecting rows of 1, 300 and 700 pages and one not selecting, a streaming
/// head between two retrieval heads. Max of the bound: the backend selects exactly the CPU's
/// pages. head_norm (exp/log and the sums' order are the backend's own) and shrunk boxes (a GPU
/// may fuse the shrunk term's multiply-adds): both the backend's and the CPU's lists are a top-k
/// of an independent f64 score up to 1e-4 relative, and their counts agree.
pub fn test_page_select_ranks<B: Backend>(gpu: &B) {
    let mut t = pair(gpu);
    let (nh, n_kv, n_ret, hd, ps, lp, num_pages) = (12, 3, 2usize, 16, 16, 4, 1100);
    let (group, lpp) = (nh / n_kv, ps / lp);
    let summary_h = t.f32s(num_pages * n_ret * lpp * 2 * hd, 1.0);
    // Query head g of each group at scale 0.25 * 2^g: one head's bounds dwarf the others'.
    let mut q_h = t.f32s(4 * nh * hd, 1.0);
    for (i, x) in q_h.iter_mut().enumerate() {
        *x *= 0.25 * (1 << ((i / hd) % group)) as f32;
    }
    let mut perm: Vec<u32> = (0..num_pages as u32).collect();
    for i in (1..perm.len()).rev() {
        perm.swap(i, (t.rng.next() * (i + 1) as f64) as usize % (i + 1));
    }
    let lens = [300usize, 1, 90, 700];
    let mut indptr = vec![0u32];
    for l in lens {
        indptr.push(indptr.last().unwrap() + l as u32);
    }
    let (k_pages, sel_stride, slots, mask) = (24u32, 32usize, [2u32, 0, 3, 1], [1u32, 1, 0, 1]);
    let (summary, q) = (t.up(DType::F32, &summary_h), t.up(DType::F32, &q_h));
    let pool = t.rand(DType::F32, num_pages * n_ret * ps * hd, 1.0);
    let spool = t.rand(DType::F32, ps * hd, 1.0);
    let head_map = t.up_u32(&[0, STREAMING_BIT, 1]);
    let (ip, tab, kvl, ring) = (t.up_u32(&indptr), t.up_u32(&perm), t.up_u32(&[0; 4]), t.up_u32(&[0; 4]));
    let (slot, maskb) = (t.up_u32(&slots), t.up_u32(&mask));
    let mut cpu_lists: Vec<Vec<Vec<u32>>> = vec![];
    let cases = [
        (PAGE_RANK_MAX, 0, 0.0),
        (PAGE_RANK_HEAD_NORM, 0, 0.0),
        (PAGE_RANK_MAX, 1, 0.0),
        (PAGE_RANK_HEAD_NORM, 1, 0.0),
        (PAGE_RANK_MAX, 1, 0.5),
        (PAGE_RANK_HEAD_NORM, 1, 0.5),
        (PAGE_RANK_MAX, 0, 1.0),
    ];
    for (rank, pin, shrink) in cases {
        let p = PageSelectParams {
            num_seqs: 4,
            n_heads: nh as u32,
            n_kv_heads: n_kv as u32,
            head_dim: hd as u32,
            page_size: ps as u32,
            logical_page: lp as u32,
            num_pages: num_pages as u32,
            n_ret: n_ret as u32,
            k_pages,
            sel_stride: sel_stride as u32,
            rank,
            pin_first: pin,
            scale: 0.6,
            bound_shrink: shrink,
            ..Default::default()
        };
        let (mut sel, mut cnt) = (t.out_u32(4 * n_ret * sel_stride), t.out_u32(4 * n_ret));
        let kvg =
            LayerKv { k: &pool.0, v: &pool.0, summary: &summary.0, sk: &spool.0, sv: &spool.0, head_map: &head_map.0 };
        let kvc =
            LayerKv { k: &pool.1, v: &pool.1, summary: &summary.1, sk: &spool.1, sv: &spool.1, head_map: &head_map.1 };
        let mg = PagedMeta { page_indptr: &ip.0, page_table: &tab.0, kv_len: &kvl.0, ring_table: &ring.0 };
        let mc = PagedMeta { page_indptr: &ip.1, page_table: &tab.1, kv_len: &kvl.1, ring_table: &ring.1 };
        let out = SelectedMut { selected: &mut sel.0, counts: &mut cnt.0 };
        t.gpu.page_select(&p, &q.0, kvg, &mg, &slot.0, &maskb.0, out).unwrap();
        let out = SelectedMut { selected: &mut sel.1, counts: &mut cnt.1 };
        t.cpu.page_select(&p, &q.1, kvc, &mc, &slot.1, &maskb.1, out).unwrap();
        let name = format!("page_select rank {rank} pin {pin} shrink {shrink}");
        t.check_u32(&format!("{name} counts"), &cnt, 4 * n_ret);
        if rank == PAGE_RANK_MAX && shrink == 0.0 {
            t.check_u32(&format!("{name} selected"), &sel, 4 * n_ret * sel_stride);
        }
        let (gs, cs) = (download_u32_all(t.gpu, &sel.0), download_u32_all(&t.cpu, &sel.1));
        let counts = download_u32_all(&t.cpu, &cnt.1);
        let mut lists = vec![];
        let mut differ = 0;
        for s in (0..4).filter(|&s| mask[s] != 0) {
            let pages = &perm[indptr[s] as usize..indptr[s + 1] as usize];
            let cand = &pages[..pages.len() - 1];
            for r in 0..n_ret {
                let kvh = if r == 0 { 0 } else { 2 };
                let row = slots[s] as usize * n_ret + r;
                let k = counts[row] as usize;
                assert_eq!(k, cand.len().min(k_pages as usize), "{name}: row {s} head {r} count");
                let qs = &q_h[(s * nh + kvh * group) * hd..];
                let scores =
                    rank_scores_f64(&summary_h, qs, cand, [n_ret, lpp, hd, group, r], (rank, 0.6, shrink as f64));
                let (g, c) = (&gs[row * sel_stride..][..k], &cs[row * sel_stride..][..k]);
                assert_top_k(&format!("{name} cpu row {s} head {r}"), &scores, c, k, pin != 0, 1e-4);
                assert_top_k(&format!("{name} backend row {s} head {r}"), &scores, g, k, pin != 0, 1e-4);
                differ += g.iter().filter(|x| !c.contains(x)).count();
                lists.push(c.to_vec());
            }
        }
        eprintln!("{name}: {differ} backend pages differ from the CPU's (near-ties)");
        cpu_lists.push(lists);
    }
    let disagree = |a: &[Vec<u32>], b: &[Vec<u32>]| a.iter().zip(b).filter(|(x, y)| x != y).count();
    let (unpinned, pinned) = (disagree(&cpu_lists[0], &cpu_lists[1]), disagree(&cpu_lists[2], &cpu_lists[3]));
    eprintln!("rows where max and head_norm select differently: {unpinned} unpinned, {pinned} pinned");
    assert!(unpinned > 0 && pinned > 0, "the rankings never disagree: head_norm is not exercised");
    let shrunk = [
        disagree(&cpu_lists[2], &cpu_lists[4]),
        disagree(&cpu_lists[3], &cpu_lists[5]),
        disagree(&cpu_lists[0], &cpu_lists[6]),
    ];
    eprintln!("rows where the shrunk boxes select differently from the bound: {shrunk:?}");
    assert!(shrunk.iter().all(|&d| d > 0), "bound_shrink never changes a selection: it is not exercised");
}
