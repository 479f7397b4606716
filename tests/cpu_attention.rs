//! The CPU reference's attention (`sparse_decode_attention`, `prefill_attention`) against a
//! brute-force model: for every query head, the positions it may see are decided one by one from
//! the op's definition (window, Lambda mask of streaming heads, selected pages below the tail plus
//! the tail), their keys and values are looked up through the page table / ring one position at a
//! time, and a dense softmax is computed in f64. Independent of the span walk, the GQA-shared
//! score kernel and the two-pass softmax of `src/backend/cpu/attention.rs`.
//!
//! Pools hold random rows (quantized for int8 / fp8; the reference reads the dequantized values,
//! the dtype's definition); page tables and rings are random permutations; selection lists are
//! random, sorted, with entries at or beyond the tail, and garbage past each count. Outputs are
//! poisoned with NaN first. Cases: GQA groups 1, 3, 4 and 6 (two score blocks), retrieval and
//! streaming heads mixed, head_dim with and without an 8-lane tail, sink off the page grid, the
//! ring wrapping many times, with and without a window, every CPU KV dtype (f32, int8, fp8; the
//! 16-bit types are GPU pool formats, held in f32 by the CPU reference).

mod common;

use common::naive::Rng;
use lserve::backend::cpu::{CpuBackend, CpuBuffer};
use lserve::backend::reference::kv_layout::head_map;
use lserve::backend::reference::kv_quant;
use lserve::backend::*;

/// f32 scores and sums against an f64 reference, outputs of magnitude ~1.
const TOL: f64 = 5e-6;

struct Case {
    streaming: Vec<bool>,
    group: usize,
    hd: usize,
    ps: usize,
    window: u32,
}

const SINK: usize = 5;
const LOCAL: usize = 21;
/// Ring capacity in tokens: sink + local + a 30-row prefill chunk fit; 300 tokens wrap it often.
const RING_TOKENS: usize = 64;
const LENS: [usize; 5] = [1, 37, 150, 300, 64];
const STRIDE: usize = 6;

fn cases() -> Vec<Case> {
    vec![
        Case { streaming: vec![false, true, false], group: 3, hd: 64, ps: 16, window: 0 },
        Case { streaming: vec![true, false], group: 4, hd: 36, ps: 16, window: 100 },
        Case { streaming: vec![false, true, false, true], group: 1, hd: 16, ps: 8, window: 0 },
        Case { streaming: vec![true, false], group: 6, hd: 24, ps: 32, window: 45 },
    ]
}

/// One layer's pools and metadata, with the dequantized values the reference reads.
struct Setup {
    p: AttentionParams,
    n_ret: usize,
    n_str: usize,
    /// Retrieval k, v and streaming k, v rows as stored (dequantized), `[row][hd]`.
    vals: [Vec<f32>; 4],
    bufs: [CpuBuffer; 4],
    head_map: CpuBuffer,
    summary: CpuBuffer,
    page_indptr: Vec<u32>,
    page_table: Vec<u32>,
    ring_table: Vec<u32>,
}

fn pool(rng: &mut Rng, kvd: DType, rows: usize, hd: usize, ps: usize) -> (Vec<f32>, CpuBuffer) {
    let mut x = rng.normal_vec(rows * hd, 1.0);
    if !kvd.is_kv8() {
        return (x.clone(), CpuBuffer::F32(x));
    }
    let mut bytes = vec![0u8; kv_pool_len(kvd, rows, hd)];
    for (r, row) in x.chunks_exact_mut(hd).enumerate() {
        let (c, s) = kv_quant::row_offsets(r, ps, hd);
        let scale = kv_quant::quantize_row(kvd, row, &mut bytes[c..c + hd]);
        bytes[s..s + 4].copy_from_slice(&scale.to_le_bytes());
        let codes = bytes[c..c + hd].to_vec();
        kv_quant::dequantize_row(kvd, &codes, scale, row);
    }
    (x, CpuBuffer::Bytes(kvd, bytes))
}

fn shuffled(rng: &mut Rng, n: usize) -> Vec<u32> {
    let mut v: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        v.swap(i, (rng.next() * (i + 1) as f64) as usize % (i + 1));
    }
    v
}

fn setup(rng: &mut Rng, c: &Case, kvd: DType) -> Setup {
    let (hd, ps, ns) = (c.hd, c.ps, LENS.len());
    let n_str = c.streaming.iter().filter(|&&s| s).count();
    let n_ret = c.streaming.len() - n_str;
    // Each sequence gets one spare page beyond its length (allowed: pages >= tokens).
    let need: usize = LENS.iter().map(|l| l.div_ceil(ps) + 1).sum();
    let num_pages = need + 3;
    let num_str_pages = ns * RING_TOKENS / ps + 2;
    let (rp, sp) = (shuffled(rng, num_pages), shuffled(rng, num_str_pages));
    let mut page_indptr = vec![0u32];
    for l in LENS {
        page_indptr.push(page_indptr.last().unwrap() + (l.div_ceil(ps) + 1) as u32);
    }
    let page_table = rp[..need].to_vec();
    let ring_table = sp[..ns * RING_TOKENS / ps].to_vec();
    let (rrows, srows) = (num_pages * n_ret * ps, num_str_pages * n_str * ps);
    let (k, kb) = pool(rng, kvd, rrows, hd, ps);
    let (v, vb) = pool(rng, kvd, rrows, hd, ps);
    let (sk, skb) = pool(rng, kvd, srows, hd, ps);
    let (sv, svb) = pool(rng, kvd, srows, hd, ps);
    let nkv = c.streaming.len();
    let p = AttentionParams {
        num_seqs: ns as u32,
        n_tokens: ns as u32,
        n_heads: (nkv * c.group) as u32,
        n_kv_heads: nkv as u32,
        head_dim: hd as u32,
        page_size: ps as u32,
        num_pages: num_pages as u32,
        scale: 1.0 / (hd as f32).sqrt(),
        window: c.window,
        sink: SINK as u32,
        local: LOCAL as u32,
        ring_tokens: RING_TOKENS as u32,
        n_ret: n_ret as u32,
        n_str: n_str as u32,
        num_str_pages: num_str_pages as u32,
        sel_stride: STRIDE as u32,
        ..Default::default()
    };
    Setup {
        p,
        n_ret,
        n_str,
        vals: [k, v, sk, sv],
        bufs: [kb, vb, skb, svb],
        head_map: CpuBuffer::U32(head_map(&c.streaming)),
        summary: CpuBuffer::F32(vec![0.0; 1]),
        page_indptr,
        page_table,
        ring_table,
    }
}

impl Setup {
    /// Row of position `pos` of sequence `s` for KV head `kvh` (index `i` in its kind).
    fn row(&self, s: usize, streaming: bool, i: usize, pos: usize) -> usize {
        let ps = self.p.page_size as usize;
        if streaming {
            let ring = self.p.ring_tokens as usize;
            let r = if pos < SINK { pos } else { SINK + (pos - SINK) % (ring - SINK) };
            let page = self.ring_table[s * (ring / ps) + r / ps] as usize;
            (page * self.n_str + i) * ps + r % ps
        } else {
            let page = self.page_table[self.page_indptr[s] as usize + pos / ps] as usize;
            (page * self.n_ret + i) * ps + pos % ps
        }
    }

    /// Dense softmax attention of one query head over the positions `visible` admits, in f64.
    fn reference(
        &self,
        q: &[f32],
        s: usize,
        streaming: bool,
        i: usize,
        visible: impl Fn(usize) -> bool,
        pos: usize,
    ) -> Vec<f64> {
        let hd = self.p.head_dim as usize;
        let (kv, vv) = if streaming { (&self.vals[2], &self.vals[3]) } else { (&self.vals[0], &self.vals[1]) };
        let seen: Vec<usize> = (0..=pos).filter(|&t| visible(t)).map(|t| self.row(s, streaming, i, t)).collect();
        let mut out = vec![0f64; hd];
        if seen.is_empty() {
            return out;
        }
        let scores: Vec<f64> = seen
            .iter()
            .map(|&r| (0..hd).map(|d| q[d] as f64 * kv[r * hd + d] as f64).sum::<f64>() * self.p.scale as f64)
            .collect();
        let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = scores.iter().map(|x| (x - max).exp()).collect();
        let sum: f64 = e.iter().sum();
        for (&r, w) in seen.iter().zip(&e) {
            for d in 0..hd {
                out[d] += w / sum * vv[r * hd + d] as f64;
            }
        }
        out
    }

    fn layer(&self) -> LayerKv<'_, CpuBackend> {
        let [k, v, sk, sv] = &self.bufs;
        LayerKv { k, v, summary: &self.summary, sk, sv, head_map: &self.head_map }
    }

    fn window_ok(&self, t: usize, pos: usize) -> bool {
        self.p.window == 0 || t + self.p.window as usize > pos
    }

    fn lambda_ok(&self, t: usize, pos: usize) -> bool {
        t < SINK || t + LOCAL > pos
    }
}

fn check(what: &str, got: &[f32], want: &[f64]) -> f64 {
    let mut worst = 0f64;
    for (d, (&g, &w)) in got.iter().zip(want).enumerate() {
        let e = (g as f64 - w).abs();
        assert!(e <= TOL, "{what} dim {d}: got {g}, want {w} (|diff| {e:e} > {TOL:e})");
        worst = worst.max(e);
    }
    worst
}

/// Random selection lists: per (slot, retrieval head) a count, that many sorted distinct units of
/// `upp` a page (some at or beyond the tail or the sequence's end), then garbage up to the
/// stride. Tails count units too.
struct Selection {
    slots: Vec<u32>,
    tails: Vec<u32>,
    selected: Vec<u32>,
    counts: Vec<u32>,
}

fn selection(rng: &mut Rng, st: &Setup, upp: usize) -> Selection {
    let (ns, n_ret, ps) = (LENS.len(), st.n_ret, st.p.page_size as usize);
    let max_slots = ns + 2;
    let slots: Vec<u32> = shuffled(rng, max_slots)[..ns].to_vec();
    let (mut selected, mut counts) = (vec![0u32; max_slots * n_ret * STRIDE], vec![0u32; max_slots * n_ret]);
    let mut tails = vec![];
    for (s, len) in LENS.iter().enumerate() {
        let n_units = len.div_ceil(ps) * upp;
        // Tail: anywhere from 0 (dense) to past the last unit (no tail), each with some odds.
        let tail = match (rng.next() * 4.0) as usize {
            0 => 0,
            1 => n_units + 1,
            _ => (rng.next() * (n_units + 1) as f64) as usize,
        };
        tails.push(tail as u32);
        for r in 0..n_ret {
            let at = slots[s] as usize * n_ret + r;
            let n = n_units + 2 * upp;
            let mut pick: Vec<u32> = shuffled(rng, n)[..STRIDE.min(n)].to_vec();
            let c = (rng.next() * (pick.len() + 1) as f64) as usize;
            pick[..c].sort_unstable();
            counts[at] = c as u32;
            selected[at * STRIDE..at * STRIDE + pick.len()].copy_from_slice(&pick);
        }
    }
    Selection { slots, tails, selected, counts }
}

/// `sparse_decode_attention` with selection units of `unit` tokens (0: the page).
fn decode_case(rng: &mut Rng, c: &Case, kvd: DType, unit: usize) -> f64 {
    let mut st = setup(rng, c, kvd);
    st.p.sel_unit = unit as u32;
    let un = if unit == 0 { c.ps } else { unit };
    let sel = selection(rng, &st, c.ps / un);
    let (ns, nh, hd) = (LENS.len(), st.p.n_heads as usize, c.hd);
    let q = rng.normal_vec(ns * nh * hd, 1.0);
    let cpu = CpuBackend::new();
    let u = |v: &[u32]| CpuBuffer::U32(v.to_vec());
    let kv_len: Vec<u32> = LENS.iter().map(|&l| l as u32).collect();
    let (pi, pt, kl, rt) = (u(&st.page_indptr), u(&st.page_table), u(&kv_len), u(&st.ring_table));
    let meta = PagedMeta { page_indptr: &pi, page_table: &pt, kv_len: &kl, ring_table: &rt };
    let (sl, tl, se, co) = (u(&sel.slots), u(&sel.tails), u(&sel.selected), u(&sel.counts));
    let pages = HeadPages { selected: &se, counts: &co, seq_slot: &sl, tail_start: &tl };
    let mut out = CpuBuffer::F32(vec![f32::NAN; ns * nh * hd]);
    cpu.sparse_decode_attention(&st.p, &CpuBuffer::F32(q.clone()), st.layer(), &meta, &pages, &mut out).unwrap();
    let out = cpu.download_f32(&out, 0, ns * nh * hd).unwrap();
    let kinds = kinds(&c.streaming);
    let mut worst = 0f64;
    for (s, &len) in LENS.iter().enumerate() {
        let pos = len - 1;
        for h in 0..nh {
            let (streaming, i) = kinds[h / c.group];
            let at = (s * nh + h) * hd;
            let visible = |t: usize| {
                st.window_ok(t, pos)
                    && if streaming {
                        st.lambda_ok(t, pos)
                    } else {
                        let (j, base) = (t / un, (sel.slots[s] as usize * st.n_ret + i) * STRIDE);
                        let n = sel.counts[sel.slots[s] as usize * st.n_ret + i] as usize;
                        j >= sel.tails[s] as usize || sel.selected[base..base + n].contains(&(j as u32))
                    }
            };
            let want = st.reference(&q[at..at + hd], s, streaming, i, visible, pos);
            let what =
                format!("decode {kvd:?} group {} hd {hd} window {} unit {unit} seq {s} head {h}", c.group, c.window);
            worst = worst.max(check(&what, &out[at..at + hd], &want));
        }
    }
    worst
}

fn prefill_case(rng: &mut Rng, c: &Case, kvd: DType) -> f64 {
    let st = setup(rng, c, kvd);
    let (nh, hd) = (st.p.n_heads as usize, c.hd);
    // The last up to 30 positions of each sequence are the chunk (sink + local + 30 fit the ring).
    let rows: Vec<usize> = LENS.iter().map(|&l| l.min(30)).collect();
    let n: usize = rows.iter().sum();
    let mut q_indptr = vec![0u32];
    rows.iter().for_each(|&r| q_indptr.push(q_indptr.last().unwrap() + r as u32));
    let q = rng.normal_vec(n * nh * hd, 1.0);
    let cpu = CpuBackend::new();
    let u = |v: &[u32]| CpuBuffer::U32(v.to_vec());
    let kv_len: Vec<u32> = LENS.iter().map(|&l| l as u32).collect();
    let (pi, pt, kl, rt) = (u(&st.page_indptr), u(&st.page_table), u(&kv_len), u(&st.ring_table));
    let meta = PagedMeta { page_indptr: &pi, page_table: &pt, kv_len: &kl, ring_table: &rt };
    let p = AttentionParams { n_tokens: n as u32, ..st.p };
    let mut out = CpuBuffer::F32(vec![f32::NAN; n * nh * hd]);
    cpu.prefill_attention(&p, &CpuBuffer::F32(q.clone()), &u(&q_indptr), st.layer(), &meta, None, &mut out).unwrap();
    let out = cpu.download_f32(&out, 0, n * nh * hd).unwrap();
    let kinds = kinds(&c.streaming);
    let mut worst = 0f64;
    for (s, &len) in LENS.iter().enumerate() {
        for row in q_indptr[s] as usize..q_indptr[s + 1] as usize {
            let pos = len - rows[s] + row - q_indptr[s] as usize;
            for h in 0..nh {
                let (streaming, i) = kinds[h / c.group];
                let at = (row * nh + h) * hd;
                let visible = |t: usize| st.window_ok(t, pos) && (!streaming || st.lambda_ok(t, pos));
                let want = st.reference(&q[at..at + hd], s, streaming, i, visible, pos);
                let what = format!("prefill {kvd:?} group {} hd {hd} window {} pos {pos} head {h}", c.group, c.window);
                worst = worst.max(check(&what, &out[at..at + hd], &want));
            }
        }
    }
    worst
}

/// Block-sparse prefill (`BlockPages`): the chunk rows of each sequence form one block; each
/// (block, retrieval head) gets a random list (entries anywhere in 0..pages + 2, so some are at
/// or past the tail and must be skipped, in random order, garbage past the count) or BLOCK_DENSE.
/// A retrieval query then sees, causally: page 0 when the tail starts past it, pages j + 1 of
/// the valid entries j, and every position from the tail page on.
fn block_prefill_case(rng: &mut Rng, c: &Case, kvd: DType) -> f64 {
    let st = setup(rng, c, kvd);
    let (nh, hd, ps, n_ret) = (st.p.n_heads as usize, c.hd, c.ps, st.n_ret);
    let rows: Vec<usize> = LENS.iter().map(|&l| l.min(30)).collect();
    let n: usize = rows.iter().sum();
    let mut q_indptr = vec![0u32];
    rows.iter().for_each(|&r| q_indptr.push(q_indptr.last().unwrap() + r as u32));
    let (mut selected, mut counts) = (vec![u32::MAX; LENS.len() * n_ret * STRIDE], vec![0u32; LENS.len() * n_ret]);
    for (b, len) in LENS.iter().enumerate() {
        for r in 0..n_ret {
            let at = b * n_ret + r;
            if rng.next() < 0.2 {
                counts[at] = BLOCK_DENSE;
                continue;
            }
            let pick = shuffled(rng, len.div_ceil(ps) + 2);
            let k = pick.len().min(STRIDE);
            let cnt = (rng.next() * (k + 1) as f64) as usize;
            counts[at] = cnt as u32;
            selected[at * STRIDE..at * STRIDE + k].copy_from_slice(&pick[..k]);
        }
    }
    let q = rng.normal_vec(n * nh * hd, 1.0);
    let cpu = CpuBackend::new();
    let u = |v: &[u32]| CpuBuffer::U32(v.to_vec());
    let kv_len: Vec<u32> = LENS.iter().map(|&l| l as u32).collect();
    let (pi, pt, kl, rt) = (u(&st.page_indptr), u(&st.page_table), u(&kv_len), u(&st.ring_table));
    let meta = PagedMeta { page_indptr: &pi, page_table: &pt, kv_len: &kl, ring_table: &rt };
    let (se, co) = (u(&selected), u(&counts));
    let blocks = BlockPages { selected: &se, counts: &co };
    let p = AttentionParams { n_tokens: n as u32, sel_stride: STRIDE as u32, ..st.p };
    let mut out = CpuBuffer::F32(vec![f32::NAN; n * nh * hd]);
    let qb = CpuBuffer::F32(q.clone());
    cpu.prefill_attention(&p, &qb, &u(&q_indptr), st.layer(), &meta, Some(&blocks), &mut out).unwrap();
    let out = cpu.download_f32(&out, 0, n * nh * hd).unwrap();
    let kinds = kinds(&c.streaming);
    let mut worst = 0f64;
    for (s, &len) in LENS.iter().enumerate() {
        let first = len - rows[s];
        let tail = block_tail_page(first, ps);
        for row in q_indptr[s] as usize..q_indptr[s + 1] as usize {
            let pos = first + row - q_indptr[s] as usize;
            for h in 0..nh {
                let (streaming, i) = kinds[h / c.group];
                let at = (row * nh + h) * hd;
                let list = |t: usize| {
                    let (j, base, cnt) = (t / ps, (s * n_ret + i) * STRIDE, counts[s * n_ret + i] as usize);
                    let valid = selected[base..base + cnt].iter().any(|&e| (e as usize) + 1 == j && j < tail);
                    t >= tail * ps || (j == 0 && tail > 0) || valid
                };
                let visible = |t: usize| {
                    t <= pos
                        && if streaming {
                            st.lambda_ok(t, pos)
                        } else {
                            counts[s * n_ret + i] == BLOCK_DENSE || list(t)
                        }
                };
                let want = st.reference(&q[at..at + hd], s, streaming, i, visible, pos);
                let what = format!("block prefill {kvd:?} group {} hd {hd} pos {pos} head {h}", c.group);
                worst = worst.max(check(&what, &out[at..at + hd], &want));
            }
        }
    }
    worst
}

/// (streaming?, index within its kind) of each KV head.
fn kinds(streaming: &[bool]) -> Vec<(bool, usize)> {
    let (mut r, mut s) = (0, 0);
    streaming
        .iter()
        .map(|&st| {
            let c = if st { &mut s } else { &mut r };
            *c += 1;
            (st, *c - 1)
        })
        .collect()
}

#[test]
fn sparse_decode_attention_matches_brute_force() {
    let mut rng = Rng(common::seed() | 1);
    for c in cases() {
        for kvd in [DType::F32, DType::I8, DType::F8E4M3] {
            // Selection units: the page, and a quarter of it (logical-page selection).
            for unit in [0, c.ps / 4] {
                let worst = decode_case(&mut rng, &c, kvd, unit);
                eprintln!("decode {kvd:?} group {} hd {} unit {unit}: max |diff| {worst:e}", c.group, c.hd);
            }
        }
    }
}

#[test]
fn prefill_attention_matches_brute_force() {
    let mut rng = Rng(common::seed() | 1);
    for c in cases() {
        for kvd in [DType::F32, DType::I8, DType::F8E4M3] {
            let worst = prefill_case(&mut rng, &c, kvd);
            eprintln!("prefill {kvd:?} group {} hd {}: max |diff| {worst:e}", c.group, c.hd);
        }
    }
}

#[test]
fn block_sparse_prefill_attention_matches_brute_force() {
    let mut rng = Rng(common::seed() | 1);
    for c in cases().into_iter().filter(|c| c.window == 0) {
        for kvd in [DType::F32, DType::I8, DType::F8E4M3] {
            let worst = block_prefill_case(&mut rng, &c, kvd);
            eprintln!("block prefill {kvd:?} group {} hd {}: max |diff| {worst:e}", c.group, c.hd);
        }
    }
}
