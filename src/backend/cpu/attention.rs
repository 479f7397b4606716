//! CPU reference for the attention-side ops: `rope_append_kv`, `prefill_attention`,
//! `sparse_decode_attention`. Written for obviousness: every query computes its scores over the
//! keys it may see, a two-pass softmax, and the weighted sum of values.
//!
//! Pool layout (HND): element (page, kv_head, token, d) of a layer's K or V pool sits at
//! `((page * n_kv_heads + kv_head) * page_size + token) * head_dim + d`. Logical page `j` of
//! sequence `s` is physical page `page_table[page_indptr[s] + j]` and holds positions
//! `j*page_size ..` up to `kv_len[s]`.

use rayon::prelude::*;

use super::{CpuBackend, CpuBuffer, err, f32s, f32s_mut, u32s};
use crate::backend::*;
use crate::error::Result;
use crate::model::rope::{RopeFreqs, rotate_half_in_place};

fn u(x: u32) -> usize {
    x as usize
}

pub fn rope_append_kv(
    p: &RopeAppendKvParams,
    qkv: &CpuBuffer,
    meta: &RopeAppendMeta<CpuBackend>,
    q: &mut CpuBuffer,
    kv: KvPoolsMut<CpuBackend>,
) -> Result<()> {
    let (n, nh, nkv, hd, ps) = (
        u(p.n_tokens),
        u(p.n_heads),
        u(p.n_kv_heads),
        u(p.head_dim),
        u(p.page_size),
    );
    let width = (nh + 2 * nkv) * hd;
    let qkv = f32s(qkv, n * width, "rope_append_kv qkv")?;
    let positions = u32s(meta.positions, n, "rope_append_kv positions")?;
    let slots = u32s(meta.slots, n, "rope_append_kv slots")?;
    let freqs = RopeFreqs {
        inv_freq: f32s(meta.inv_freq, hd / 2, "rope_append_kv inv_freq")?.to_vec(),
        attention_scaling: p.attention_scaling,
    };
    let pool_len = u(p.num_pages) * nkv * ps * hd;
    if slots.iter().any(|&s| u(s) >= u(p.num_pages) * ps) {
        return Err(err("rope_append_kv: a slot lies outside the KV pool"));
    }
    let q = f32s_mut(q, n * nh * hd, "rope_append_kv q")?;
    let kpool = f32s_mut(kv.k, pool_len, "rope_append_kv k pool")?;
    for t in 0..n {
        let row = &qkv[t * width..(t + 1) * width];
        for h in 0..nh {
            let dst = &mut q[(t * nh + h) * hd..(t * nh + h + 1) * hd];
            dst.copy_from_slice(&row[h * hd..(h + 1) * hd]);
            rotate_half_in_place(dst, positions[t], &freqs);
        }
        let (page, off) = (u(slots[t]) / ps, u(slots[t]) % ps);
        for h in 0..nkv {
            let at = ((page * nkv + h) * ps + off) * hd;
            let dst = &mut kpool[at..at + hd];
            dst.copy_from_slice(&row[(nh + h) * hd..(nh + h + 1) * hd]);
            rotate_half_in_place(dst, positions[t], &freqs);
        }
    }
    let vpool = f32s_mut(kv.v, pool_len, "rope_append_kv v pool")?;
    for t in 0..n {
        let row = &qkv[t * width..(t + 1) * width];
        let (page, off) = (u(slots[t]) / ps, u(slots[t]) % ps);
        for h in 0..nkv {
            let at = ((page * nkv + h) * ps + off) * hd;
            vpool[at..at + hd].copy_from_slice(&row[(nh + nkv + h) * hd..(nh + nkv + h + 1) * hd]);
        }
    }
    Ok(())
}

/// A run of consecutive tokens of one physical page: (physical page, first token, count).
type Span = (usize, usize, usize);

struct Pools<'a> {
    k: &'a [f32],
    v: &'a [f32],
    nkv: usize,
    ps: usize,
    hd: usize,
}

impl Pools<'_> {
    fn at(&self, page: usize, kvh: usize, tok: usize) -> usize {
        ((page * self.nkv + kvh) * self.ps + tok) * self.hd
    }
}

/// softmax(q . K^T * scale) . V over the tokens in `spans`, written to `out`.
fn attend(q: &[f32], pools: &Pools, kvh: usize, spans: &[Span], scale: f32, out: &mut [f32]) {
    let hd = pools.hd;
    let mut scores = Vec::new();
    for &(page, first, count) in spans {
        for t in first..first + count {
            let at = pools.at(page, kvh, t);
            scores.push(super::ops::dot(q, &pools.k[at..at + hd]) * scale);
        }
    }
    out.iter_mut().for_each(|o| *o = 0.0);
    if scores.is_empty() {
        return;
    }
    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f64;
    scores.iter_mut().for_each(|s| {
        *s = (*s - max).exp();
        sum += *s as f64;
    });
    let mut i = 0;
    for &(page, first, count) in spans {
        for t in first..first + count {
            let at = pools.at(page, kvh, t);
            let w = (scores[i] as f64 / sum) as f32;
            out.iter_mut()
                .zip(&pools.v[at..at + hd])
                .for_each(|(o, v)| *o += w * v);
            i += 1;
        }
    }
}

struct SeqTables<'a> {
    page_indptr: &'a [u32],
    page_table: &'a [u32],
    kv_len: &'a [u32],
}

impl SeqTables<'_> {
    /// Spans covering positions `lo..hi` of sequence `s`, restricted to logical pages `pages`.
    fn spans(
        &self,
        s: usize,
        ps: usize,
        lo: usize,
        hi: usize,
        pages: impl Iterator<Item = usize>,
    ) -> Vec<Span> {
        let base = u(self.page_indptr[s]);
        pages
            .filter_map(|j| {
                let (a, b) = ((j * ps).max(lo), ((j + 1) * ps).min(hi));
                (a < b).then(|| (u(self.page_table[base + j]), a - j * ps, b - a))
            })
            .collect()
    }
}

fn read_meta<'a>(p: &AttentionParams, meta: &'a PagedMeta<CpuBackend>) -> Result<SeqTables<'a>> {
    let ns = u(p.num_seqs);
    let page_indptr = u32s(meta.page_indptr, ns + 1, "attention page_indptr")?;
    let page_table = u32s(meta.page_table, u(page_indptr[ns]), "attention page_table")?;
    let kv_len = u32s(meta.kv_len, ns, "attention kv_len")?;
    let ps = u(p.page_size);
    for s in 0..ns {
        let pages = u(page_indptr[s + 1]).checked_sub(u(page_indptr[s]));
        if pages.is_none_or(|n| n * ps < u(kv_len[s])) {
            return Err(err(format!(
                "attention: sequence {s} holds {} tokens but too few pages",
                kv_len[s]
            )));
        }
    }
    if page_table.iter().any(|&pg| pg >= p.num_pages) {
        return Err(err("attention: a page id lies outside the pool"));
    }
    Ok(SeqTables {
        page_indptr,
        page_table,
        kv_len,
    })
}

fn pools<'a>(p: &AttentionParams, kv: &'a KvPools<CpuBackend>) -> Result<Pools<'a>> {
    let (nkv, ps, hd) = (u(p.n_kv_heads), u(p.page_size), u(p.head_dim));
    let len = u(p.num_pages) * nkv * ps * hd;
    Ok(Pools {
        k: f32s(kv.k, len, "attention k pool")?,
        v: f32s(kv.v, len, "attention v pool")?,
        nkv,
        ps,
        hd,
    })
}

fn window_lo(p: &AttentionParams, pos: usize) -> usize {
    if p.window == 0 {
        0
    } else {
        (pos + 1).saturating_sub(u(p.window))
    }
}

pub fn prefill_attention(
    p: &AttentionParams,
    q: &CpuBuffer,
    q_indptr: &CpuBuffer,
    kv: KvPools<CpuBackend>,
    meta: &PagedMeta<CpuBackend>,
    out: &mut CpuBuffer,
) -> Result<()> {
    let (n, nh, hd, ps) = (u(p.n_tokens), u(p.n_heads), u(p.head_dim), u(p.page_size));
    let group = nh / u(p.n_kv_heads).max(1);
    let tables = read_meta(p, meta)?;
    let q_indptr = u32s(q_indptr, u(p.num_seqs) + 1, "prefill_attention q_indptr")?;
    // Token t belongs to sequence seq_of[t] and sits at position pos_of[t].
    let mut seq_pos = vec![(usize::MAX, 0usize); n];
    for s in 0..u(p.num_seqs) {
        let (a, b) = (u(q_indptr[s]), u(q_indptr[s + 1]));
        if a > b || b > n || b - a > u(tables.kv_len[s]) {
            return Err(err(format!(
                "prefill_attention: bad query range {a}..{b} for sequence {s}"
            )));
        }
        let first = u(tables.kv_len[s]) - (b - a);
        (a..b).for_each(|t| seq_pos[t] = (s, first + t - a));
    }
    if seq_pos.iter().any(|&(s, _)| s == usize::MAX) {
        return Err(err(
            "prefill_attention: q_indptr does not cover every query row",
        ));
    }
    let pools = pools(p, &kv)?;
    let q = f32s(q, n * nh * hd, "prefill_attention q")?;
    let out = f32s_mut(out, n * nh * hd, "prefill_attention out")?;
    out.par_chunks_mut(hd).enumerate().for_each(|(i, o)| {
        let (t, h) = (i / nh, i % nh);
        let (s, pos) = seq_pos[t];
        let lo = window_lo(p, pos);
        let spans = tables.spans(s, ps, lo, pos + 1, lo / ps..pos / ps + 1);
        attend(
            &q[i * hd..(i + 1) * hd],
            &pools,
            h / group,
            &spans,
            p.scale,
            o,
        );
    });
    Ok(())
}

pub fn sparse_decode_attention(
    p: &AttentionParams,
    q: &CpuBuffer,
    kv: KvPools<CpuBackend>,
    meta: &PagedMeta<CpuBackend>,
    pages: &HeadPages<CpuBackend>,
    out: &mut CpuBuffer,
) -> Result<()> {
    let (ns, nh, nkv, hd, ps) = (
        u(p.num_seqs),
        u(p.n_heads),
        u(p.n_kv_heads),
        u(p.head_dim),
        u(p.page_size),
    );
    let tables = read_meta(p, meta)?;
    let head_indptr = u32s(
        pages.head_indptr,
        ns * nkv + 1,
        "sparse_decode_attention head_indptr",
    )?;
    let head_pages = u32s(
        pages.head_pages,
        u(head_indptr[ns * nkv]),
        "sparse_decode_attention head_pages",
    )?;
    for s in 0..ns {
        let n_pages = u(tables.page_indptr[s + 1] - tables.page_indptr[s]);
        for h in 0..nkv {
            let (a, b) = (u(head_indptr[s * nkv + h]), u(head_indptr[s * nkv + h + 1]));
            if a > b || head_pages[a..b].iter().any(|&j| u(j) >= n_pages) {
                return Err(err(format!(
                    "sparse_decode_attention: bad page list for sequence {s} head {h}"
                )));
            }
        }
    }
    let pools = pools(p, &kv)?;
    let q = f32s(q, ns * nh * hd, "sparse_decode_attention q")?;
    let out = f32s_mut(out, ns * nh * hd, "sparse_decode_attention out")?;
    let group = nh / nkv.max(1);
    out.par_chunks_mut(hd).enumerate().for_each(|(i, o)| {
        let (s, h) = (i / nh, i % nh);
        let kvh = h / group;
        let len = u(tables.kv_len[s]);
        let list = &head_pages[u(head_indptr[s * nkv + kvh])..u(head_indptr[s * nkv + kvh + 1])];
        let lo = window_lo(p, len.saturating_sub(1));
        let spans = tables.spans(s, ps, lo, len, list.iter().map(|&j| u(j)));
        attend(&q[i * hd..(i + 1) * hd], &pools, kvh, &spans, p.scale, o);
    });
    Ok(())
}
