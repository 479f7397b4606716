//! CPU reference for the KV-side ops: `rope_append_kv` (rotate, write to the retrieval pool or the
//! streaming ring, refresh page summaries) and `page_select` (Quest scores, optionally from boxes
//! shrunk toward their centres, ranked by `PAGE_RANK_MAX` or `PAGE_RANK_HEAD_NORM`, the first
//! page optionally pinned, top-k).
//!
//! Pool addressing (HND): token `t` of head `h` in page `p` of a pool holding `nh` heads starts at
//! `((p * nh + h) * page_size + t) * head_dim`. Summaries: logical page `l` of retrieval head `r` in
//! page `p` keeps min at `(((p * n_ret + r) * lpp + l) * 2) * head_dim` and max `head_dim` later.

use std::collections::BTreeMap;

use super::kvpool::{PoolMut, pool_mut};
use super::{CpuBackend, CpuBuffer, err, f32s, f32s_mut, u32s, u32s_mut};
use crate::backend::reference::rope::{RopeFreqs, rotate_half_in_place};
use crate::backend::*;
use crate::error::Result;

fn u(x: u32) -> usize {
    x as usize
}

/// Where each KV head of a layer lives: (streaming?, index within its kind).
pub fn head_kinds(head_map: &CpuBuffer, n_kv: usize, n_ret: usize, n_str: usize) -> Result<Vec<(bool, usize)>> {
    let map = u32s(head_map, n_kv, "head_map")?;
    let kinds: Vec<(bool, usize)> = map.iter().map(|&m| (m & STREAMING_BIT != 0, u(m & !STREAMING_BIT))).collect();
    let ok = kinds.iter().all(|&(s, i)| if s { i < n_str } else { i < n_ret });
    if !ok || kinds.iter().filter(|k| k.0).count() != n_str {
        return Err(err("head_map disagrees with n_ret/n_str"));
    }
    Ok(kinds)
}

/// Every slot inside its pool, and no two tokens of one call on one slot: on a GPU their writes
/// would race (the engine sizes the ring so a chunk never wraps onto itself).
fn check_slots(p: &RopeAppendKvParams, slots: &[u32], ring_slots: &[u32]) -> Result<()> {
    let (ps, n_ret, n_str) = (u(p.page_size), u(p.n_ret), u(p.n_str));
    if n_ret > 0 && slots.iter().any(|&s| u(s) >= u(p.num_pages) * ps) {
        return Err(err("rope_append_kv: a slot lies outside the retrieval pool"));
    }
    if n_str > 0 && ring_slots.iter().any(|&s| u(s) >= u(p.num_str_pages) * ps) {
        return Err(err("rope_append_kv: a ring slot lies outside the streaming pool"));
    }
    let distinct = |v: &[u32]| {
        let mut s = v.to_vec();
        s.sort_unstable();
        s.windows(2).all(|w| w[0] != w[1])
    };
    if (n_ret > 0 && !distinct(slots)) || (n_str > 0 && !distinct(ring_slots)) {
        return Err(err("rope_append_kv: two tokens of one call map to the same slot (chunk longer than the ring?)"));
    }
    Ok(())
}

pub fn rope_append_kv(
    p: &RopeAppendKvParams,
    qkv: &CpuBuffer,
    meta: &RopeAppendMeta<CpuBackend>,
    q: &mut CpuBuffer,
    kv: LayerKvMut<CpuBackend>,
) -> Result<()> {
    let (n, nh, nkv, hd, ps) = (u(p.n_tokens), u(p.n_heads), u(p.n_kv_heads), u(p.head_dim), u(p.page_size));
    let (n_ret, n_str, lp) = (u(p.n_ret), u(p.n_str), u(p.logical_page));
    if n_ret + n_str != nkv || lp == 0 || ps % lp != 0 {
        return Err(err("rope_append_kv: bad head split or logical page"));
    }
    let kinds = head_kinds(kv.head_map, nkv, n_ret, n_str)?;
    let width = (nh + 2 * nkv) * hd;
    let qkv = f32s(qkv, n * width, "rope_append_kv qkv")?;
    let positions = u32s(meta.positions, n, "rope_append_kv positions")?;
    let slots = u32s(meta.slots, n, "rope_append_kv slots")?;
    let ring_slots = u32s(meta.ring_slots, n, "rope_append_kv ring_slots")?;
    check_slots(p, slots, ring_slots)?;
    let freqs = RopeFreqs {
        inv_freq: f32s(meta.inv_freq, hd / 2, "rope_append_kv inv_freq")?.to_vec(),
        attention_scaling: p.attention_scaling,
    };
    let q = f32s_mut(q, n * nh * hd, "rope_append_kv q")?;
    let (rrows, srows) = (u(p.num_pages) * n_ret * ps, u(p.num_str_pages) * n_str * ps);
    let (mut k, mut v) = (pool_mut(kv.k, rrows, ps, hd, "k pool")?, pool_mut(kv.v, rrows, ps, hd, "v pool")?);
    let mut sk = pool_mut(kv.sk, srows, ps, hd, "streaming k pool")?;
    let mut sv = pool_mut(kv.sv, srows, ps, hd, "streaming v pool")?;
    // (page, logical page) -> last offset written in it by this call.
    let mut touched: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    let mut krow = vec![0f32; hd];
    for t in 0..n {
        let row = &qkv[t * width..(t + 1) * width];
        for h in 0..nh {
            let dst = &mut q[(t * nh + h) * hd..(t * nh + h + 1) * hd];
            dst.copy_from_slice(&row[h * hd..(h + 1) * hd]);
            rotate_half_in_place(dst, positions[t], &freqs);
        }
        for (h, &(streaming, i)) in kinds.iter().enumerate() {
            let (slot, heads, kd, vd): (usize, usize, &mut PoolMut, &mut PoolMut) = if streaming {
                (u(ring_slots[t]), n_str, &mut sk, &mut sv)
            } else {
                (u(slots[t]), n_ret, &mut k, &mut v)
            };
            let at = (((slot / ps) * heads + i) * ps + slot % ps) * hd;
            krow.copy_from_slice(&row[(nh + h) * hd..(nh + h + 1) * hd]);
            rotate_half_in_place(&mut krow, positions[t], &freqs);
            kd.store(at, &krow);
            vd.store(at, &row[(nh + nkv + h) * hd..(nh + nkv + h + 1) * hd]);
        }
        if n_ret > 0 {
            let (page, off) = (u(slots[t]) / ps, u(slots[t]) % ps);
            let e = touched.entry((page, off / lp)).or_insert(off);
            *e = (*e).max(off);
        }
    }
    // Summaries are min/max over the keys as stored (dequantized for the 8-bit types), so Quest
    // stays an upper bound of the q.k that attention computes.
    let summary = f32s_mut(kv.summary, u(p.num_pages) * n_ret * (ps / lp) * 2 * hd, "summary")?;
    let mut buf = Vec::new();
    for (&(page, l), &last) in &touched {
        for r in 0..n_ret {
            let s_at = (((page * n_ret + r) * (ps / lp) + l) * 2) * hd;
            let (mins, maxs) = summary[s_at..s_at + 2 * hd].split_at_mut(hd);
            mins.fill(f32::INFINITY);
            maxs.fill(f32::NEG_INFINITY);
            for off in l * lp..=last {
                let kr = k.row(((page * n_ret + r) * ps + off) * hd, hd, &mut buf);
                for c in 0..hd {
                    mins[c] = mins[c].min(kr[c]);
                    maxs[c] = maxs[c].max(kr[c]);
                }
            }
        }
    }
    Ok(())
}

/// A logical page's score (`PageSelectParams::bound_shrink`): with `shrink == 0` the Quest upper
/// bound of q.k, `sum_c max(q_c * max_c, q_c * min_c)`; otherwise the box shrunk toward its
/// centre, `sum_c q_c * mid_c + |q_c| * ((1 - shrink) * half_c)` with `mid_c = (max_c + min_c) *
/// 0.5` and `half_c = (max_c - min_c) * 0.5`. Sums run over c in order.
pub fn page_score(q: &[f32], min: &[f32], max: &[f32], shrink: f32) -> f32 {
    let terms = q.iter().zip(min.iter().zip(max));
    if shrink == 0.0 {
        return terms.map(|(&q, (&lo, &hi))| (q * hi).max(q * lo)).sum();
    }
    let w = 1.0 - shrink;
    terms.map(|(&q, (&lo, &hi))| q * ((hi + lo) * 0.5) + q.abs() * (w * ((hi - lo) * 0.5))).sum()
}

/// `PAGE_RANK_HEAD_NORM` scores of the candidates from `m[g][j]` (query head g's max bound over
/// candidate j's logical pages), in f32 as the kernels compute it: per head, `d = max(scale *
/// (m - M_g), -1e30)` and `x = d - ln(sum_j exp(d))`; per candidate, `ln(sum_g exp(x_g))` taken
/// as `mx + ln(sum_g exp(x_g - mx))`. Sums run in index order.
pub fn head_norm_scores(m: &[Vec<f32>], scale: f32) -> Vec<f32> {
    const LIM: f32 = 1e30;
    let n = m.first().map_or(0, |r| r.len());
    let x: Vec<Vec<f32>> = m
        .iter()
        .map(|row| {
            let top = row.iter().fold(-LIM, |a, &v| a.max(v.clamp(-LIM, LIM)));
            let d: Vec<f32> = row.iter().map(|&v| (scale * (v.clamp(-LIM, LIM) - top)).max(-LIM)).collect();
            let lz = d.iter().map(|&v| v.exp()).sum::<f32>().ln();
            d.into_iter().map(|v| v - lz).collect()
        })
        .collect();
    (0..n)
        .map(|j| {
            let mx = x.iter().map(|r| r[j]).fold(f32::NEG_INFINITY, f32::max);
            mx + x.iter().map(|r| (r[j] - mx).exp()).sum::<f32>().ln()
        })
        .collect()
}

/// The `k` best of `scores` by (score desc in `f32::total_cmp` order, index asc), their indices
/// ascending: the top-k both page selections (`page_select`, `page_top_k`) write.
pub fn best_k(scores: &[f32], k: usize) -> Vec<u32> {
    let mut order: Vec<u32> = (0..scores.len() as u32).collect();
    order.sort_by(|&i, &j| scores[j as usize].total_cmp(&scores[i as usize]).then(i.cmp(&j)));
    order.truncate(k);
    order.sort_unstable();
    order
}

/// Candidates of a row with `n_pages` page-table entries and `kv_len` tokens: with `sel_unit` 0,
/// every page but the newest; otherwise the units below the one holding position `kv_len - 1`
/// (and within the table).
pub fn select_candidates(p: &PageSelectParams, n_pages: usize, kv_len: usize) -> usize {
    if p.sel_unit == 0 {
        return n_pages.saturating_sub(1);
    }
    let (unit, upp) = (u(p.sel_unit), u(p.page_size / p.sel_unit));
    (n_pages * upp).min(kv_len.div_ceil(unit)).saturating_sub(1)
}

pub fn page_select(
    p: &PageSelectParams,
    q: &CpuBuffer,
    kv: LayerKv<CpuBackend>,
    meta: &PagedMeta<CpuBackend>,
    seq_slot: &CpuBuffer,
    select_mask: &CpuBuffer,
    out: SelectedMut<CpuBackend>,
) -> Result<()> {
    let (ns, nh, nkv, hd, ps, lp) =
        (u(p.num_seqs), u(p.n_heads), u(p.n_kv_heads), u(p.head_dim), u(p.page_size), u(p.logical_page));
    let (n_ret, k_sel, stride) = (u(p.n_ret), u(p.k_pages), u(p.sel_stride));
    if lp == 0 || ps % lp != 0 || k_sel > stride {
        return Err(err("page_select: bad logical page or k_pages > sel_stride"));
    }
    let unit = u(p.checked_unit().map_err(err)?);
    // Logical pages a physical page holds, units a page holds, logical pages a unit holds.
    let (lpp, upp, lpu) = (ps / lp, ps / unit, unit / lp);
    let kinds = head_kinds(kv.head_map, nkv, n_ret, nkv - n_ret.min(nkv))?;
    let q = f32s(q, ns * nh * hd, "page_select q")?;
    let page_indptr = u32s(meta.page_indptr, ns + 1, "page_select page_indptr")?;
    let page_table = u32s(meta.page_table, u(page_indptr[ns]), "page_select page_table")?;
    let kv_len = u32s(meta.kv_len, ns, "page_select kv_len")?;
    let slots = u32s(seq_slot, ns, "page_select seq_slot")?;
    let mask = u32s(select_mask, ns, "page_select select_mask")?;
    let summary = f32s(kv.summary, u(p.num_pages) * n_ret * lpp * 2 * hd, "page_select summary")?;
    if page_table.iter().any(|&pg| pg >= p.num_pages) {
        return Err(err("page_select: a page id lies outside the pool"));
    }
    let max_slot = slots.iter().map(|&s| u(s) + 1).max().unwrap_or(0);
    let selected = u32s_mut(out.selected, max_slot * n_ret * stride, "page_select selected")?;
    let counts = u32s_mut(out.counts, max_slot * n_ret, "page_select counts")?;
    let head_norm = p.checked_rank().map_err(err)?;
    let group = nh / nkv;
    for s in (0..ns).filter(|&s| mask[s] != 0) {
        let pages = &page_table[u(page_indptr[s])..u(page_indptr[s + 1])];
        // Candidate j: unit j % upp of page j / upp; the newest page (sel_unit 0) or the newest
        // unit is never one.
        let n = select_candidates(p, pages.len(), u(kv_len[s]));
        let candidates: Vec<(usize, usize)> = (0..n).map(|j| (u(pages[j / upp]), j % upp)).collect();
        for (h, &(streaming, r)) in kinds.iter().enumerate() {
            if streaming {
                continue;
            }
            // [group][candidate]: max over the page's logical pages of each query head's bound.
            let per_head: Vec<Vec<f32>> = (h * group..(h + 1) * group)
                .map(|qh| {
                    let qv = &q[(s * nh + qh) * hd..(s * nh + qh + 1) * hd];
                    let bound = |page: usize, l: usize| {
                        let at = (((page * n_ret + r) * lpp + l) * 2) * hd;
                        page_score(qv, &summary[at..at + hd], &summary[at + hd..at + 2 * hd], p.bound_shrink)
                    };
                    candidates
                        .iter()
                        .map(|&(pg, x)| {
                            (x * lpu..(x + 1) * lpu).map(|l| bound(pg, l)).fold(f32::NEG_INFINITY, f32::max)
                        })
                        .collect()
                })
                .collect();
            let mut scores = if head_norm {
                head_norm_scores(&per_head, p.scale)
            } else {
                (0..candidates.len()).map(|j| per_head.iter().map(|m| m[j]).fold(f32::NEG_INFINITY, f32::max)).collect()
            };
            if p.pin_first != 0
                && let Some(x) = scores.first_mut()
            {
                *x = f32::INFINITY;
            }
            let keep = best_k(&scores, k_sel);
            let base = (u(slots[s]) * n_ret + r) * stride;
            selected[base..base + keep.len()].copy_from_slice(&keep);
            counts[u(slots[s]) * n_ret + r] = keep.len() as u32;
        }
    }
    Ok(())
}
