//! CPU reference for block-sparse prefill's antidiagonal estimate (`antidiagonal_score`) and the
//! top-k over its score table (`page_top_k`); the contracts are the trait's.
//!
//! Per (block, retrieval KV head) the key groups a row group sees are scored in f32 (each of the
//! S dot products in f32, summed in f32 in order i = 0..S), the softmax and the per-page sums in
//! f64; scores are written as f32. `src/eval/block_recall.rs` computes the same estimate in f64
//! from keys read back, which the tests compare against.

use rayon::prelude::*;

use super::kvops::{best_k, head_kinds};
use super::kvpool::{PoolRef, pool};
use super::{CpuBackend, CpuBuffer, err, f32s, f32s_mut, u32s, u32s_mut};
use crate::backend::*;
use crate::error::Result;

fn u(x: u32) -> usize {
    x as usize
}

const S: usize = ANTIDIAGONAL_STRIDE;

/// One block as `BlockRows::info` gives it.
#[derive(Clone, Copy)]
struct Block {
    q_row: usize,
    rows: usize,
    first: usize,
    seq: usize,
    /// Entries of its virtual row (candidates + 1), and where they start.
    entries: usize,
    at: usize,
}

/// What every (block, head) task reads.
struct Inputs<'a> {
    q: &'a [f32],
    k: PoolRef<'a>,
    pages: Vec<&'a [u32]>,
    nh: usize,
    hd: usize,
    ps: usize,
    n_ret: usize,
    group: usize,
    scale: f32,
}

impl Inputs<'_> {
    /// The S keys of group `kg` of sequence `seq`, retrieval head `r`, `[S][hd]`.
    fn key_group<'s>(&'s self, seq: usize, r: usize, kg: usize, buf: &'s mut Vec<f32>) -> &'s [f32] {
        let (ps, hd) = (self.ps, self.hd);
        let pos = kg * S;
        let page = u(self.pages[seq][pos / ps]);
        self.k.rows(((page * self.n_ret + r) * ps + pos % ps) * hd, S, hd, buf)
    }

    /// Block `b`'s scores for retrieval head `r` of KV head `kvh`: one per entry of its row.
    fn block_scores(&self, b: &Block, kvh: usize, r: usize) -> Vec<f32> {
        let (hd, cand) = (self.hd, b.entries - 1);
        let mut score = vec![0f64; b.entries];
        let mut buf = vec![];
        let groups = b.rows / S;
        // z[kg] for every row group and head; keys read once per key group.
        let visible = |rg: usize| (b.first + rg * S) / S;
        let n_kg = if groups == 0 { 0 } else { visible(groups - 1) };
        let mut z = vec![0f32; groups * self.group * n_kg];
        for kg in 0..n_kg {
            let keys = self.key_group(b.seq, r, kg, &mut buf);
            for rg in (0..groups).filter(|&rg| kg < visible(rg)) {
                for g in 0..self.group {
                    let h = kvh * self.group + g;
                    let mut acc = 0f32;
                    for i in 0..S {
                        let row = b.q_row + rg * S + S - 1 - i;
                        let qv = &self.q[(row * self.nh + h) * hd..(row * self.nh + h + 1) * hd];
                        acc += qv.iter().zip(&keys[i * hd..(i + 1) * hd]).map(|(&x, &y)| x * y).sum::<f32>();
                    }
                    z[(rg * self.group + g) * n_kg + kg] = acc * (self.scale / S as f32);
                }
            }
        }
        for rg in 0..groups {
            for g in 0..self.group {
                let row = &z[(rg * self.group + g) * n_kg..][..visible(rg)];
                let m = row.iter().fold(f32::NEG_INFINITY, |a, &x| a.max(x)) as f64;
                let l: f64 = row.iter().map(|&x| (x as f64 - m).exp()).sum();
                for (kg, &x) in row.iter().enumerate() {
                    let page = kg * S / self.ps;
                    if (1..=cand).contains(&page) {
                        score[page - 1] += (x as f64 - m).exp() / l;
                    }
                }
            }
        }
        score.into_iter().map(|x| x as f32).collect()
    }
}

fn blocks_of(
    p: &AntidiagonalParams,
    info: &[u32],
    indptr: &[u32],
    kv_len: &[u32],
    pages: &[&[u32]],
) -> Result<Vec<Block>> {
    let mut out = vec![];
    for b in 0..u(p.n_blocks) {
        let [q_row, rows, first, seq] = [0, 1, 2, 3].map(|i| u(info[4 * b + i]));
        let (a, e) = (u(indptr[b]), u(indptr[b + 1]));
        if e < a {
            return Err(err("antidiagonal_score: block page_indptr must be non-decreasing"));
        }
        if e - a < 2 {
            continue;
        }
        if q_row + rows > u(p.n_tokens) || seq >= u(p.num_seqs) {
            return Err(err(format!("antidiagonal_score: block {b} lies outside q or the step's sequences")));
        }
        // The furthest key read: the last full row group's visible groups.
        let groups = rows / S;
        let end = if groups == 0 { 0 } else { (first + (groups - 1) * S) / S * S };
        if end > u(kv_len[seq]) || end.div_ceil(u(p.page_size)) > pages[seq].len() {
            return Err(err(format!("antidiagonal_score: block {b} reads keys past its sequence")));
        }
        out.push(Block { q_row, rows, first, seq, entries: e - a, at: a });
    }
    Ok(out)
}

pub fn antidiagonal_score(
    p: &AntidiagonalParams,
    q: &CpuBuffer,
    kv: LayerKv<CpuBackend>,
    meta: &PagedMeta<CpuBackend>,
    blocks: &BlockRows<CpuBackend>,
    scores: &mut CpuBuffer,
) -> Result<()> {
    let (nb, ns, nh, nkv, hd, ps) =
        (u(p.n_blocks), u(p.num_seqs), u(p.n_heads), u(p.n_kv_heads), u(p.head_dim), u(p.page_size));
    let n_ret = u(p.n_ret);
    p.check().map_err(err)?;
    let kinds = head_kinds(kv.head_map, nkv, n_ret, nkv - n_ret)?;
    let info = u32s(blocks.info, nb * 4, "antidiagonal_score blocks")?;
    let indptr = u32s(blocks.page_indptr, nb + 1, "antidiagonal_score block page_indptr")?;
    if let Some((hi, hp)) = blocks.host
        && (hi.get(..nb * 4) != Some(info) || hp.get(..nb + 1) != Some(indptr))
    {
        return Err(err("antidiagonal_score: the blocks' host copies differ from their buffers"));
    }
    let page_indptr = u32s(meta.page_indptr, ns + 1, "antidiagonal_score page_indptr")?;
    let table = u32s(meta.page_table, u(page_indptr[ns]), "antidiagonal_score page_table")?;
    let kv_len = u32s(meta.kv_len, ns, "antidiagonal_score kv_len")?;
    if page_indptr.windows(2).any(|w| w[1] < w[0]) || table.iter().any(|&pg| pg >= p.num_pages) {
        return Err(err("antidiagonal_score: bad page table"));
    }
    let pages: Vec<&[u32]> = (0..ns).map(|s| &table[u(page_indptr[s])..u(page_indptr[s + 1])]).collect();
    let list = blocks_of(p, info, indptr, kv_len, &pages)?;
    let inp = Inputs {
        q: f32s(q, u(p.n_tokens) * nh * hd, "antidiagonal_score q")?,
        k: pool(kv.k, u(p.num_pages) * n_ret * ps, ps, hd, "antidiagonal_score k pool")?,
        pages,
        nh,
        hd,
        ps,
        n_ret,
        group: nh / nkv,
        scale: p.scale,
    };
    let out = f32s_mut(scores, u(indptr[nb]) * n_ret, "antidiagonal_score scores")?;
    let tasks: Vec<(Block, usize, usize)> = list
        .iter()
        .flat_map(|b| kinds.iter().enumerate().filter(|(_, k)| !k.0).map(move |(kvh, k)| (*b, kvh, k.1)))
        .collect();
    let done: Vec<(Block, usize, Vec<f32>)> =
        tasks.into_par_iter().map(|(b, kvh, r)| (b, r, inp.block_scores(&b, kvh, r))).collect();
    for (b, r, sc) in done {
        for (j, x) in sc.into_iter().enumerate() {
            out[(b.at + j) * n_ret + r] = x;
        }
    }
    Ok(())
}

pub fn page_top_k(
    p: &PageTopKParams,
    scores: &CpuBuffer,
    page_indptr: &CpuBuffer,
    seq_slot: &CpuBuffer,
    select_mask: &CpuBuffer,
    out: SelectedMut<CpuBackend>,
) -> Result<()> {
    let (ns, n_ret, k_sel, stride) = (u(p.num_seqs), u(p.n_ret), u(p.k_pages), u(p.sel_stride));
    if k_sel > stride {
        return Err(err("page_top_k: k_pages > sel_stride"));
    }
    let indptr = u32s(page_indptr, ns + 1, "page_top_k page_indptr")?;
    if indptr.windows(2).any(|w| w[1] < w[0]) {
        return Err(err("page_top_k: page_indptr must be non-decreasing"));
    }
    let scores = f32s(scores, u(indptr[ns]) * n_ret, "page_top_k scores")?;
    let slots = u32s(seq_slot, ns, "page_top_k seq_slot")?;
    let mask = u32s(select_mask, ns, "page_top_k select_mask")?;
    let max_slot = (0..ns).filter(|&s| mask[s] != 0).map(|s| u(slots[s]) + 1).max().unwrap_or(0);
    let selected = u32s_mut(out.selected, max_slot * n_ret * stride, "page_top_k selected")?;
    let counts = u32s_mut(out.counts, max_slot * n_ret, "page_top_k counts")?;
    for s in (0..ns).filter(|&s| mask[s] != 0) {
        let (a, e) = (u(indptr[s]), u(indptr[s + 1]));
        for r in 0..n_ret {
            // Candidates: the row's entries less the last; NaN ranks lowest.
            let row: Vec<f32> = (a..e.saturating_sub(1).max(a))
                .map(|j| scores[j * n_ret + r])
                .map(|x| if x.is_nan() { f32::NEG_INFINITY } else { x })
                .collect();
            let keep = best_k(&row, k_sel);
            let base = (u(slots[s]) * n_ret + r) * stride;
            selected[base..base + keep.len()].copy_from_slice(&keep);
            counts[u(slots[s]) * n_ret + r] = keep.len() as u32;
        }
    }
    Ok(())
}
