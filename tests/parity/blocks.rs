//! Block-sparse prefill's estimate ops against the CPU reference: `antidiagonal_score` (a KV
//! dtype x head_dim axis; the CPU reference itself checked against the f64 estimate of
//! src/eval/block_recall.rs, written from XAttention's definition) and `page_top_k` (ties, NaN,
//! masked rows, slots, a row longer than CUDA's shared-memory sort).

use super::{Pair, download_pool, has_kv, kv_pair_shape, mirror_pools, pair};
use lserve::backend::*;
use lserve::eval::block_recall::BlockView;
use lserve::kv::{CacheShape, HeadLayout};

/// GPU scores within this of the CPU's, relative to max(1, |cpu|): CUDA multiplies q and the
/// keys in bf16 (f16 for f16 KV) on tensor cores, ~2^-8 relative on each z of ~1.
const TOL_SCORE: f32 = 1e-2;

/// Blocks `[q_row, rows, first]` of one sequence of 400 tokens: a full block, a partial one (four
/// groups of 8 and 5 rows), a dense one (no candidates), one too short for a group of 8, and one
/// whose tail leaves a single candidate.
const BLOCKS: [[u32; 3]; 5] = [[0, 128, 200], [128, 37, 328], [165, 10, 60], [175, 5, 100], [180, 40, 50]];

pub fn test_antidiagonal_score<B: Backend>(gpu: &B, kvd: DType, hd: usize) {
    // Groups of 3 (and 8 at head_dim 64: two CUDA head chunks at head_dim 256 would need 3 or
    // more, tested by the group of 3 there).
    antidiagonal_case(gpu, kvd, hd, if hd == 64 { 8 } else { 3 }, &AdCase::SHORT);
}

/// GQA groups smaller than a CUDA CTA's head chunk (which then launches fewer warps than its
/// finalize has key groups: session 36's failed rewrite read rows no thread wrote) and odd ones.
pub fn test_antidiagonal_score_groups<B: Backend>(gpu: &B) {
    for (kvd, hd, group) in [
        (DType::BF16, 64, 1),
        (DType::BF16, 64, 3),
        (DType::F16, 64, 5),
        (DType::BF16, 128, 1),
        (DType::F16, 128, 2),
        (DType::BF16, 128, 6),
        (DType::BF16, 256, 1),
    ] {
        eprintln!("group {group}, head_dim {hd}, {kvd:?}");
        antidiagonal_case(gpu, kvd, hd, group, &AdCase::SHORT);
    }
}

/// A long prompt's step: 17 full blocks and a partial one of one sequence after 128 cached
/// tokens, a GQA group of 8 (so CUDA's GEMM path, at most 2048 rows of z a head per chunk, cuts
/// them into two chunks of different row lengths).
pub fn test_antidiagonal_score_chunks<B: Backend>(gpu: &B) {
    let blocks: Vec<[u32; 3]> = (0..18u32).map(|i| [128 * i, if i == 17 { 45 } else { 128 }, 128 + 128 * i]).collect();
    let case = AdCase { blocks: &blocks, num_pages: 160, n_tokens: 17 * 128 + 45, appends: (6, 400), ring_tokens: 512 };
    antidiagonal_case(gpu, DType::BF16, 64, 8, &case);
}

/// One `antidiagonal_score` case: blocks `[q_row, rows, first]` of one sequence (16-token pages)
/// whose KV holds `appends.0` calls of `appends.1` tokens.
struct AdCase<'a> {
    blocks: &'a [[u32; 3]],
    num_pages: usize,
    n_tokens: usize,
    appends: (usize, usize),
    ring_tokens: usize,
}

impl AdCase<'static> {
    const SHORT: AdCase<'static> =
        AdCase { blocks: &BLOCKS, num_pages: 40, n_tokens: 220, appends: (16, 25), ring_tokens: 32 };
}

/// The GPU (its general path, without host copies of the blocks, and with them: CUDA's GEMM path)
/// against the CPU reference, which is checked against the f64 estimate.
fn antidiagonal_case<B: Backend>(gpu: &B, kvd: DType, hd: usize, group: usize, case: &AdCase) {
    if !has_kv(gpu, kvd) {
        return;
    }
    let mut t = pair(gpu);
    // KV heads: retrieval, streaming, retrieval.
    let ps = 16;
    let nh = 3 * group;
    let shape = CacheShape {
        num_layers: 1,
        n_kv_heads: 3,
        head_dim: hd,
        page_size: ps,
        logical_page: 4,
        num_pages: case.num_pages,
        max_seqs: 2,
        ring_tokens: case.ring_tokens,
        sink: 4,
        sel_stride: 6,
        layout: HeadLayout { streaming: vec![vec![false, true, false]] },
        kv_dtype: DType::F32,
    };
    let mut kv = kv_pair_shape(&t, shape, kvd);
    for _ in 0..case.appends.0 {
        super::append(&mut t, &mut kv, case.appends.1, nh); // the ring never wraps within a call
    }
    if matches!(kvd, DType::F16 | DType::BF16) {
        mirror_pools(&t, &mut kv);
    }
    let n_tokens = case.n_tokens;
    let q = t.rand(DType::F32, n_tokens * nh * hd, 1.0);
    let (mut info, mut indptr) = (vec![], vec![0u32]);
    for (b, &[q_row, rows, first]) in case.blocks.iter().enumerate() {
        info.extend([q_row, rows, first, 0]);
        let entries =
            if b == 2 && case.blocks.len() == BLOCKS.len() { 0 } else { block_tail_page(first as usize, ps) as u32 };
        indptr.push(indptr[b] + entries);
    }
    let entries = *indptr.last().unwrap() as usize;
    let (info_b, indptr_b) = (t.up_u32(&info), t.up_u32(&indptr));
    let m = super::paged(&t, &kv.seq);
    let p = AntidiagonalParams {
        n_blocks: case.blocks.len() as u32,
        n_tokens: n_tokens as u32,
        num_seqs: 1,
        n_heads: nh as u32,
        n_kv_heads: 3,
        head_dim: hd as u32,
        page_size: ps as u32,
        num_pages: case.num_pages as u32,
        n_ret: 2,
        scale: 0.3,
        ..Default::default()
    };
    let mut got = vec![];
    for host in [None, Some((&info[..], &indptr[..]))] {
        let mut scores = t.out(entries * 2 + 3);
        let (g, c) = (&kv.gpu.layers[0], &kv.cpu.layers[0]);
        let mg = PagedMeta { page_indptr: &m[0].0, page_table: &m[1].0, kv_len: &m[2].0, ring_table: &m[3].0 };
        let mc = PagedMeta { page_indptr: &m[0].1, page_table: &m[1].1, kv_len: &m[2].1, ring_table: &m[3].1 };
        let (bg, bc) = (
            BlockRows { info: &info_b.0, page_indptr: &indptr_b.0, host },
            BlockRows { info: &info_b.1, page_indptr: &indptr_b.1, host },
        );
        t.gpu.antidiagonal_score(&p, &q.0, g.view(), &mg, &bg, &mut scores.0).unwrap();
        t.cpu.antidiagonal_score(&p, &q.1, c.view(), &mc, &bc, &mut scores.1).unwrap();
        eprintln!("antidiagonal_score, host copies {}", host.is_some());
        t.check("antidiagonal_score", &scores, entries * 2, TOL_SCORE);
        let g = t.gpu.download_f32(&scores.0, 0, entries * 2 + 3).unwrap();
        assert!(g[entries * 2..].iter().all(|x| x.is_nan()), "entries past the table are untouched");
        got = t.cpu.download_f32(&scores.1, 0, entries * 2 + 3).unwrap();
    }
    // A host copy that differs from the buffers is refused (by the CPU reference).
    let mut bad = info.clone();
    bad[2] += 8;
    let bc = BlockRows { info: &info_b.1, page_indptr: &indptr_b.1, host: Some((&bad[..], &indptr[..])) };
    let (c, mut sc) = (&kv.cpu.layers[0], t.cpu.alloc(DType::F32, entries * 2 + 3).unwrap());
    let mc = PagedMeta { page_indptr: &m[0].1, page_table: &m[1].1, kv_len: &m[2].1, ring_table: &m[3].1 };
    assert!(t.cpu.antidiagonal_score(&p, &q.1, c.view(), &mc, &bc, &mut sc).is_err());
    if !kvd.is_kv8() {
        check_against_block_recall(&t, &kv, &q.1, &got, &indptr, case.blocks, (nh, group, hd, ps));
    }
}

/// The CPU reference against `BlockView::antidiagonal_scores` (f64, keys read back in position
/// order) for every block with candidates and both retrieval heads; the tail's entry is 0.
#[allow(clippy::too_many_arguments)]
fn check_against_block_recall<B: Backend>(
    t: &Pair<B>,
    kv: &super::KvPair<B>,
    q: &<lserve::backend::cpu::CpuBackend as Backend>::Buffer,
    got: &[f32],
    indptr: &[u32],
    blocks: &[[u32; 3]],
    (nh, group, hd, ps): (usize, usize, usize, usize),
) {
    let pool = download_pool(&t.cpu, &kv.cpu.layers[0].k);
    let q = t.cpu.download_f32(q, 0, t.cpu.len(q)).unwrap();
    for (b, &[q_row, rows, first]) in blocks.iter().enumerate() {
        let (a, e) = (indptr[b] as usize, indptr[b + 1] as usize);
        if e < a + 2 {
            continue;
        }
        let (q_row, rows, first) = (q_row as usize, rows as usize, first as usize);
        for (r, kvh) in [(0usize, 0usize), (1, 2)] {
            let keys: Vec<f32> = (0..first + rows)
                .flat_map(|pos| {
                    let page = kv.seq.pages[pos / ps] as usize;
                    let at = ((page * 2 + r) * ps + pos % ps) * hd;
                    pool[at..at + hd].to_vec()
                })
                .collect();
            let qb: Vec<f32> = (0..rows)
                .flat_map(|i| {
                    let at = ((q_row + i) * nh + kvh * group) * hd;
                    q[at..at + group * hd].to_vec()
                })
                .collect();
            let v = BlockView {
                q: &qb,
                keys: &keys,
                rows,
                group,
                head_dim: hd,
                page_size: ps,
                logical_page: 4,
                scale: 0.3,
            };
            let want = v.antidiagonal_scores(e - a, ANTIDIAGONAL_STRIDE);
            for (j, w) in want.iter().enumerate() {
                let g = got[(a + j) * 2 + r];
                assert!(
                    (g as f64 - w).abs() <= 1e-4 * w.abs().max(1.0),
                    "block {b} head {r} candidate {j}: {g} vs {w}"
                );
            }
            assert_eq!(got[(e - 1) * 2 + r], 0.0, "block {b} head {r}: the tail's entry");
        }
    }
}

/// Rows (entries): 0, 1 (no candidate), 3, 40 with ties and a NaN, 9 not selecting, and 40,000
/// (longer than CUDA's shared-memory sort); slots permuted; 2 retrieval heads.
pub fn test_page_top_k<B: Backend>(gpu: &B) {
    let mut t = pair(gpu);
    let lens = [0usize, 1, 3, 40, 9, 40_000];
    let (n_ret, k, stride) = (2usize, 8u32, 10usize);
    let mut indptr = vec![0u32];
    for l in lens {
        indptr.push(indptr.last().unwrap() + l as u32);
    }
    let n = *indptr.last().unwrap() as usize * n_ret;
    // Scores on a coarse grid (many ties), one NaN, one -inf.
    let mut scores: Vec<f32> = t.f32s(n, 1.0).into_iter().map(|x| (x * 4.0).round() / 4.0).collect();
    let row3 = indptr[3] as usize * n_ret;
    scores[row3 + 5] = f32::NAN;
    scores[row3 + 8] = f32::NEG_INFINITY;
    let s = t.up(DType::F32, &scores);
    let slots = [5u32, 0, 3, 1, 2, 4];
    let (ip, slot, mask) = (t.up_u32(&indptr), t.up_u32(&slots), t.up_u32(&[1, 1, 1, 1, 0, 1]));
    let mut sel = t.out_u32(lens.len() * n_ret * stride);
    let mut cnt = t.out_u32(lens.len() * n_ret);
    let p = PageTopKParams {
        num_seqs: lens.len() as u32,
        n_ret: n_ret as u32,
        k_pages: k,
        sel_stride: stride as u32,
        max_seq_pages: 65536,
        ..Default::default()
    };
    t.gpu
        .page_top_k(&p, &s.0, &ip.0, &slot.0, &mask.0, SelectedMut { selected: &mut sel.0, counts: &mut cnt.0 })
        .unwrap();
    t.cpu
        .page_top_k(&p, &s.1, &ip.1, &slot.1, &mask.1, SelectedMut { selected: &mut sel.1, counts: &mut cnt.1 })
        .unwrap();
    t.check_u32("page_top_k counts", &cnt, lens.len() * n_ret);
    let counts = t.cpu.download_u32(&cnt.1, 0, lens.len() * n_ret).unwrap();
    // By slot: rows 1 (slot 0), 3 (1), 4 (2: not selecting), 2 (3), 5 (4), 0 (5).
    assert_eq!(counts, [0, 0, 8, 8, u32::MAX, u32::MAX, 2, 2, 8, 8, 0, 0], "k capped by the candidates");
    let n_sel = lens.len() * n_ret * stride;
    let (g, c) = (t.gpu.download_u32(&sel.0, 0, n_sel).unwrap(), t.cpu.download_u32(&sel.1, 0, n_sel).unwrap());
    for (i, &n) in counts.iter().enumerate().filter(|(_, n)| **n != u32::MAX) {
        let (gs, cs) = (&g[i * stride..][..n as usize], &c[i * stride..][..n as usize]);
        assert_eq!(gs, cs, "page_top_k selected of (slot, head) {i}");
        assert!(cs.windows(2).all(|w| w[0] < w[1]), "ascending");
    }
    // Row 3, head 0 by brute force: the 8 best by (score desc, index asc), NaN lowest.
    let key = |j: usize| {
        let x = scores[row3 + j * n_ret];
        if x.is_nan() { f32::NEG_INFINITY } else { x }
    };
    let mut order: Vec<usize> = (0..39).collect();
    order.sort_by(|&a, &b| key(b).total_cmp(&key(a)).then(a.cmp(&b)));
    let mut want: Vec<u32> = order[..8].iter().map(|&j| j as u32).collect();
    want.sort_unstable();
    assert_eq!(&c[2 * stride..2 * stride + 8], &want[..], "row 3 head 0 (slot 1)");
}
