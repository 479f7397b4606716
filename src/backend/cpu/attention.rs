//! CPU reference for the attention ops: `prefill_attention`, `sparse_decode_attention` and
//! `lambda_mass`. Written for obviousness: each query lists the positions it may see, fetches
//! their keys from the retrieval pool (via the page table) or the streaming ring, and does a
//! two-pass softmax over them in ascending position order.
//!
//! Visibility: a retrieval head sees positions `lo..=pos` (`lo` from the sliding window, else 0);
//! in decode only those on the pages [`HeadPages`] lists. A streaming head sees the Lambda mask:
//! positions `< sink` or within `local` of the query, also clipped by the window.

use rayon::prelude::*;

use super::kvops::head_kinds;
use super::{CpuBackend, CpuBuffer, err, f32s, f32s_mut, u32s};
use crate::backend::*;
use crate::error::Result;
use crate::kv::ring_index;

fn u(x: u32) -> usize {
    x as usize
}

/// K and V of one pool with `heads` heads per page.
struct Pool<'a> {
    k: &'a [f32],
    v: &'a [f32],
    heads: usize,
}

struct Ctx<'a> {
    ret: Pool<'a>,
    strm: Pool<'a>,
    kinds: Vec<(bool, usize)>,
    page_indptr: &'a [u32],
    page_table: &'a [u32],
    kv_len: &'a [u32],
    ring_table: &'a [u32],
    ps: usize,
    hd: usize,
    p: AttentionParams,
}

impl Ctx<'_> {
    /// Offset of position `pos` of sequence `s` for KV head `h` in its pool.
    fn at(&self, s: usize, h: usize, pos: usize) -> (bool, usize) {
        let (streaming, i) = self.kinds[h];
        let (ps, hd) = (self.ps, self.hd);
        if streaming {
            let r = ring_index(pos, u(self.p.sink), u(self.p.ring_tokens));
            let ring_pages = u(self.p.ring_tokens) / ps;
            let page = u(self.ring_table[s * ring_pages + r / ps]);
            (true, ((page * self.strm.heads + i) * ps + r % ps) * hd)
        } else {
            let page = u(self.page_table[u(self.page_indptr[s]) + pos / ps]);
            (false, ((page * self.ret.heads + i) * ps + pos % ps) * hd)
        }
    }

    fn window_lo(&self, pos: usize) -> usize {
        if self.p.window == 0 { 0 } else { (pos + 1).saturating_sub(u(self.p.window)) }
    }

    /// Positions a streaming head at query position `pos` sees (Lambda mask), ascending.
    fn lambda(&self, pos: usize) -> Vec<usize> {
        let (sink, local, lo) = (u(self.p.sink), u(self.p.local), self.window_lo(pos));
        let recent = (pos + 1).saturating_sub(local);
        (lo..sink.min(pos + 1)).chain(recent.max(sink).max(lo)..=pos).collect()
    }

    /// softmax(q . K^T * scale) . V over `positions` of sequence `s`, KV head `h`.
    fn attend(&self, q: &[f32], s: usize, h: usize, positions: &[usize], out: &mut [f32]) {
        let hd = self.hd;
        let offs: Vec<(bool, usize)> = positions.iter().map(|&pos| self.at(s, h, pos)).collect();
        let pool = |streaming: bool| if streaming { &self.strm } else { &self.ret };
        let mut scores: Vec<f32> =
            offs.iter().map(|&(st, at)| super::ops::dot(q, &pool(st).k[at..at + hd]) * self.p.scale).collect();
        out.fill(0.0);
        if scores.is_empty() {
            return;
        }
        let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0f64;
        scores.iter_mut().for_each(|x| {
            *x = (*x - max).exp();
            sum += *x as f64;
        });
        for (&(st, at), &w) in offs.iter().zip(&scores) {
            let w = (w as f64 / sum) as f32;
            out.iter_mut().zip(&pool(st).v[at..at + hd]).for_each(|(o, v)| *o += w * v);
        }
    }
}

fn context<'a>(p: &AttentionParams, kv: &'a LayerKv<CpuBackend>, meta: &'a PagedMeta<CpuBackend>) -> Result<Ctx<'a>> {
    let (ns, nkv, ps, hd) = (u(p.num_seqs), u(p.n_kv_heads), u(p.page_size), u(p.head_dim));
    let (n_ret, n_str) = (u(p.n_ret), u(p.n_str));
    if n_ret + n_str != nkv || !u(p.n_heads).is_multiple_of(nkv.max(1)) {
        return Err(err("attention: bad head counts"));
    }
    let kinds = head_kinds(kv.head_map, nkv, n_ret, n_str)?;
    let page_indptr = u32s(meta.page_indptr, ns + 1, "attention page_indptr")?;
    let page_table = u32s(meta.page_table, u(page_indptr[ns]), "attention page_table")?;
    let kv_len = u32s(meta.kv_len, ns, "attention kv_len")?;
    let ring_pages = if n_str > 0 { u(p.ring_tokens) / ps } else { 0 };
    let ring_table = u32s(meta.ring_table, ns * ring_pages, "attention ring_table")?;
    for s in 0..ns {
        let pages = u(page_indptr[s + 1]).checked_sub(u(page_indptr[s]));
        if pages.is_none_or(|n| n * ps < u(kv_len[s])) {
            return Err(err(format!("attention: sequence {s} holds {} tokens but too few pages", kv_len[s])));
        }
    }
    if page_table.iter().any(|&pg| pg >= p.num_pages) || ring_table.iter().any(|&pg| pg >= p.num_str_pages) {
        return Err(err("attention: a page id lies outside its pool"));
    }
    if n_str > 0 && (u(p.ring_tokens) <= u(p.sink) || !u(p.ring_tokens).is_multiple_of(ps)) {
        return Err(err("attention: the streaming ring is smaller than its sink"));
    }
    let rlen = u(p.num_pages) * n_ret * ps * hd;
    let slen = u(p.num_str_pages) * n_str * ps * hd;
    Ok(Ctx {
        ret: Pool { k: f32s(kv.k, rlen, "k pool")?, v: f32s(kv.v, rlen, "v pool")?, heads: n_ret },
        strm: Pool {
            k: f32s(kv.sk, slen, "streaming k pool")?,
            v: f32s(kv.sv, slen, "streaming v pool")?,
            heads: n_str,
        },
        kinds,
        page_indptr,
        page_table,
        kv_len,
        ring_table,
        ps,
        hd,
        p: *p,
    })
}

pub fn prefill_attention(
    p: &AttentionParams,
    q: &CpuBuffer,
    q_indptr: &CpuBuffer,
    kv: LayerKv<CpuBackend>,
    meta: &PagedMeta<CpuBackend>,
    out: &mut CpuBuffer,
) -> Result<()> {
    let (n, nh, hd) = (u(p.n_tokens), u(p.n_heads), u(p.head_dim));
    let ctx = context(p, &kv, meta)?;
    let group = nh / u(p.n_kv_heads);
    let q_indptr = u32s(q_indptr, u(p.num_seqs) + 1, "prefill_attention q_indptr")?;
    let mut seq_pos = vec![(usize::MAX, 0usize); n];
    for s in 0..u(p.num_seqs) {
        let (a, b) = (u(q_indptr[s]), u(q_indptr[s + 1]));
        if a > b || b > n || b - a > u(ctx.kv_len[s]) {
            return Err(err(format!("prefill_attention: bad query range {a}..{b} for sequence {s}")));
        }
        let first = u(ctx.kv_len[s]) - (b - a);
        if ctx.kinds.iter().any(|k| k.0) && b - a + u(p.local) + u(p.sink) > u(p.ring_tokens) {
            return Err(err("prefill_attention: the chunk is longer than the streaming ring allows"));
        }
        (a..b).for_each(|t| seq_pos[t] = (s, first + t - a));
    }
    if seq_pos.iter().any(|&(s, _)| s == usize::MAX) {
        return Err(err("prefill_attention: q_indptr does not cover every query row"));
    }
    let q = f32s(q, n * nh * hd, "prefill_attention q")?;
    let out = f32s_mut(out, n * nh * hd, "prefill_attention out")?;
    out.par_chunks_mut(hd).enumerate().for_each(|(i, o)| {
        let (t, h) = (i / nh, i % nh);
        let (s, pos) = seq_pos[t];
        let kvh = h / group;
        let positions: Vec<usize> =
            if ctx.kinds[kvh].0 { ctx.lambda(pos) } else { (ctx.window_lo(pos)..=pos).collect() };
        ctx.attend(&q[i * hd..(i + 1) * hd], s, kvh, &positions, o);
    });
    Ok(())
}

pub fn sparse_decode_attention(
    p: &AttentionParams,
    q: &CpuBuffer,
    kv: LayerKv<CpuBackend>,
    meta: &PagedMeta<CpuBackend>,
    pages: &HeadPages<CpuBackend>,
    out: &mut CpuBuffer,
) -> Result<()> {
    let (ns, nh, hd, ps) = (u(p.num_seqs), u(p.n_heads), u(p.head_dim), u(p.page_size));
    let (n_ret, stride) = (u(p.n_ret), u(p.sel_stride));
    let ctx = context(p, &kv, meta)?;
    let slots = u32s(pages.seq_slot, ns, "decode seq_slot")?;
    let tail = u32s(pages.tail_start, ns, "decode tail_start")?;
    let max_slot = slots.iter().map(|&s| u(s) + 1).max().unwrap_or(0);
    let selected = u32s(pages.selected, max_slot * n_ret * stride, "decode selected")?;
    let counts = u32s(pages.counts, max_slot * n_ret, "decode counts")?;
    // Retrieval pages each (sequence, retrieval head) reads: selected (below the tail), then the tail.
    let mut lists: Vec<Vec<usize>> = Vec::with_capacity(ns * n_ret);
    for s in 0..ns {
        let n_pages = u(ctx.kv_len[s]).div_ceil(ps);
        for r in 0..n_ret {
            let c = u(counts[u(slots[s]) * n_ret + r]).min(stride);
            let base = (u(slots[s]) * n_ret + r) * stride;
            let sel = selected[base..base + c].iter().map(|&j| u(j)).filter(|&j| j < u(tail[s]));
            lists.push(sel.chain(u(tail[s]).min(n_pages)..n_pages).collect());
        }
    }
    let q = f32s(q, ns * nh * hd, "sparse_decode_attention q")?;
    let out = f32s_mut(out, ns * nh * hd, "sparse_decode_attention out")?;
    let group = nh / u(p.n_kv_heads);
    out.par_chunks_mut(hd).enumerate().for_each(|(i, o)| {
        let (s, h) = (i / nh, i % nh);
        let kvh = h / group;
        let len = u(ctx.kv_len[s]);
        let pos = len - 1;
        let positions: Vec<usize> = match ctx.kinds[kvh] {
            (true, _) => ctx.lambda(pos),
            (false, r) => {
                let lo = ctx.window_lo(pos);
                lists[s * n_ret + r].iter().flat_map(|&j| (j * ps).max(lo)..((j + 1) * ps).min(len)).collect()
            }
        };
        ctx.attend(&q[i * hd..(i + 1) * hd], s, kvh, &positions, o);
    });
    Ok(())
}

pub fn lambda_mass(
    p: &LambdaMassParams,
    q: &CpuBuffer,
    kv: LayerKv<CpuBackend>,
    meta: &PagedMeta<CpuBackend>,
    out: &mut CpuBuffer,
) -> Result<()> {
    let ap = AttentionParams {
        num_seqs: 1,
        n_tokens: p.n_tokens,
        n_heads: p.n_heads,
        n_kv_heads: p.n_kv_heads,
        head_dim: p.head_dim,
        page_size: p.page_size,
        num_pages: p.num_pages,
        scale: p.scale,
        n_ret: p.n_kv_heads,
        ..Default::default()
    };
    let ctx = context(&ap, &kv, meta)?;
    let (n, nh, hd) = (u(p.n_tokens), u(p.n_heads), u(p.head_dim));
    let len = u(ctx.kv_len[0]);
    if n > len {
        return Err(err("lambda_mass: more queries than tokens"));
    }
    let q = f32s(q, n * nh * hd, "lambda_mass q")?;
    let out = f32s_mut(out, n * nh, "lambda_mass out")?;
    let group = nh / u(p.n_kv_heads);
    out.par_iter_mut().enumerate().for_each(|(i, o)| {
        let (t, h) = (i / nh, i % nh);
        let pos = len - n + t;
        let qv = &q[i * hd..(i + 1) * hd];
        let scores: Vec<f32> = (0..=pos)
            .map(|k| {
                let (_, at) = ctx.at(0, h / group, k);
                super::ops::dot(qv, &ctx.ret.k[at..at + hd]) * p.scale
            })
            .collect();
        let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let w: Vec<f64> = scores.iter().map(|&x| ((x - max) as f64).exp()).collect();
        let total: f64 = w.iter().sum();
        let outside: f64 = (u(p.sink)..(pos + 1).saturating_sub(u(p.local))).map(|k| w[k]).sum();
        *o = (outside / total) as f32;
    });
    Ok(())
}
