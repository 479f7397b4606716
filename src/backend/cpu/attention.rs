//! CPU reference for the attention ops: `prefill_attention`, `sparse_decode_attention` and
//! `lambda_mass`.
//!
//! Visibility: a retrieval head sees positions `lo..=pos` (`lo` from the sliding window, else 0);
//! in decode only those on the pages [`HeadPages`] lists (selected pages below the tail, in list
//! order, then the tail). A streaming head sees the Lambda mask: positions `< sink` or within
//! `local` of the query, also clipped by the window, read through the ring.
//!
//! Decode, and prefill's streaming heads: one rayon task per (query row, KV head). The visible
//! positions become a list of [`Span`]s, runs of consecutive rows of one pool page (a retrieval
//! page clipped to the window; a ring page, cut where the ring wraps), so the page table is read
//! once per page. [`Ctx::attend_group`] then reads each key row once for all the query heads of
//! the GQA group (the `attn_ops` score kernel), does a two-pass softmax per head (f32 scores,
//! f64 sum), and reads each value row once for the group (`attn_ops` weighted sum, `w * v` added
//! in row order). Prefill's retrieval heads: dense causal tiles of up to 64 queries through two
//! GEMMs (`gemm` crate). `lambda_mass` reuses the tiles' scores.
//! Everything is f32 (8-bit pools are dequantized row by row, `kvpool.rs`): this is the
//! reference the GPU backends are compared with.

use rayon::prelude::*;

use super::attn_ops::{Kernels, kernels};
use super::kvops::head_kinds;
use super::kvpool::{PoolRef, pool};
use super::{CpuBackend, CpuBuffer, err, f32s, f32s_mut, u32s};
use crate::backend::reference::kv_layout::ring_index;
use crate::backend::*;
use crate::error::Result;

fn u(x: u32) -> usize {
    x as usize
}

/// K and V of one pool with `heads` heads per page (dequantized on read for 8-bit KV).
struct Pool<'a> {
    k: PoolRef<'a>,
    v: PoolRef<'a>,
    heads: usize,
}

impl<'a> Pool<'a> {
    fn k_or_v(&self, v: bool) -> &PoolRef<'a> {
        if v { &self.v } else { &self.k }
    }
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

/// A run of `n` consecutive token rows of one pool (one page of one head), from element offset
/// `at`.
#[derive(Clone, Copy)]
struct Span {
    streaming: bool,
    at: usize,
    n: usize,
}

/// Per-task scratch of [`Ctx::attend_group`], reused across the tasks a rayon worker runs.
#[derive(Default)]
struct Scratch {
    spans: Vec<Span>,
    /// `[head in group][row]`: scaled scores, then softmax weights.
    scores: Vec<f32>,
    /// Dequantized rows of one span (8-bit KV).
    rows: Vec<f32>,
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

    fn pool(&self, streaming: bool) -> &Pool<'_> {
        if streaming { &self.strm } else { &self.ret }
    }

    /// Spans of positions `a..b` of sequence `s` in streaming head `i`'s ring: a span ends at a
    /// ring page's end and where the ring wraps back to `sink`.
    fn ring_spans(&self, s: usize, i: usize, a: usize, b: usize, spans: &mut Vec<Span>) {
        let (ps, sink, ring) = (self.ps, u(self.p.sink), u(self.p.ring_tokens));
        let mut pos = a;
        while pos < b {
            let r = ring_index(pos, sink, ring);
            let n = (b - pos).min(ps - r % ps).min(ring - r);
            let page = u(self.ring_table[s * (ring / ps) + r / ps]);
            spans.push(Span { streaming: true, at: ((page * self.strm.heads + i) * ps + r % ps) * self.hd, n });
            pos += n;
        }
    }

    /// The Lambda mask of streaming head `i` for a query at `pos`: positions `< sink` and within
    /// `local` of the query, clipped by the window, ascending.
    fn lambda_spans(&self, s: usize, i: usize, pos: usize, spans: &mut Vec<Span>) {
        let (sink, local, lo) = (u(self.p.sink), u(self.p.local), self.window_lo(pos));
        let recent = (pos + 1).saturating_sub(local);
        self.ring_spans(s, i, lo, sink.min(pos + 1), spans);
        self.ring_spans(s, i, recent.max(sink).max(lo), pos + 1, spans);
    }

    /// Spans of retrieval head `i` of sequence `s` over the logical pages `pages` (in that
    /// order), each clipped to positions `lo..len`.
    fn page_spans(
        &self,
        s: usize,
        i: usize,
        pages: impl Iterator<Item = usize>,
        lo: usize,
        len: usize,
        spans: &mut Vec<Span>,
    ) {
        self.unit_spans(s, i, pages, self.ps, lo, len, spans)
    }

    /// The spans of units `units` of `unit` tokens (a divisor of the page size: unit j is positions
    /// `j * unit .. (j + 1) * unit`, within page `j * unit / ps`) of retrieval head `i` of
    /// sequence `s`, clipped to `lo..len`.
    #[allow(clippy::too_many_arguments)]
    fn unit_spans(
        &self,
        s: usize,
        i: usize,
        units: impl Iterator<Item = usize>,
        unit: usize,
        lo: usize,
        len: usize,
        spans: &mut Vec<Span>,
    ) {
        let ps = self.ps;
        for j in units {
            let (a, b) = ((j * unit).max(lo), ((j + 1) * unit).min(len));
            if a < b {
                let page = u(self.page_table[u(self.page_indptr[s]) + a / ps]);
                spans.push(Span {
                    streaming: false,
                    at: ((page * self.ret.heads + i) * ps + a % ps) * self.hd,
                    n: b - a,
                });
            }
        }
    }

    /// softmax(q_g . K^T * scale) . V for the query heads of one KV head (`q`, `out`:
    /// `[group][head_dim]`) over the rows of `sc.spans`, in span order. Each key and value row is
    /// read (dequantized) once for the whole group. Per head: the scores of `attn_ops`, a two-pass
    /// softmax in f32 with an f64 sum, and each output element summing `w * v` in row order.
    fn attend_group(&self, q: &[f32], sc: &mut Scratch, out: &mut [f32], kn: Kernels) {
        let (hd, group) = (self.hd, q.len() / self.hd);
        let Scratch { spans, scores, rows } = sc;
        let total: usize = spans.iter().map(|sp| sp.n).sum();
        out.fill(0.0);
        if total == 0 {
            return;
        }
        scores.resize(group * total, 0.0);
        // Each span's rows are requested while the previous span (or the softmax) computes.
        let ahead = |i: usize, v: bool| {
            if let Some(sp) = spans.get(i) {
                let pool = self.pool(sp.streaming);
                (pool.k_or_v(v).f32_rows(sp.at, sp.n, hd)).map(kn.prefetch);
            }
        };
        ahead(0, false);
        let mut off = 0;
        for (i, sp) in spans.iter().enumerate() {
            ahead(i + 1, false);
            let k = self.pool(sp.streaming).k.rows(sp.at, sp.n, hd, rows);
            (kn.scores)(q, k, hd, self.p.scale, &mut scores[off..], total);
            off += sp.n;
        }
        ahead(0, true);
        for w in scores.chunks_exact_mut(total) {
            let max = w.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0f64;
            w.iter_mut().for_each(|x| {
                *x = (*x - max).exp();
                sum += *x as f64;
            });
            w.iter_mut().for_each(|x| *x = (*x as f64 / sum) as f32);
        }
        let mut off = 0;
        for (i, sp) in spans.iter().enumerate() {
            ahead(i + 1, true);
            let v = self.pool(sp.streaming).v.rows(sp.at, sp.n, hd, rows);
            (kn.weighted_sum)(&scores[off..], total, v, hd, out);
            off += sp.n;
        }
    }
}

/// Query rows of one (sequence, KV head) tile: `(row in q/out, position)`, positions ascending.
struct Tile {
    s: usize,
    kvh: usize,
    rows: Vec<(usize, usize)>,
}

impl Ctx<'_> {
    /// Keys and values of positions `lo..hi` of sequence `s`, KV head `h`, gathered contiguously.
    fn gather(&self, s: usize, h: usize, lo: usize, hi: usize) -> (Vec<f32>, Vec<f32>) {
        let hd = self.hd;
        let (mut k, mut v) = (Vec::with_capacity((hi - lo) * hd), Vec::with_capacity((hi - lo) * hd));
        let mut buf = Vec::new();
        for pos in lo..hi {
            let (st, at) = self.at(s, h, pos);
            let pool = if st { &self.strm } else { &self.ret };
            k.extend_from_slice(pool.k.row(at, hd, &mut buf));
            v.extend_from_slice(pool.v.row(at, hd, &mut buf));
        }
        (k, v)
    }

    /// Scaled scores of a tile's queries (all query heads of the KV head) over keys `lo..hi`,
    /// `[head_in_group][row][key]`, with -inf where causality or the window masks a key.
    fn tile_scores(&self, q: &[f32], t: &Tile, group: usize, lo: usize, k: &[f32]) -> Vec<f32> {
        let (hd, nh) = (self.hd, group * u(self.p.n_kv_heads));
        let (nr, nk) = (t.rows.len(), k.len() / hd);
        let mut qm = Vec::with_capacity(group * nr * hd);
        for g in 0..group {
            for &(row, _) in &t.rows {
                let h = t.kvh * group + g;
                qm.extend_from_slice(&q[(row * nh + h) * hd..(row * nh + h + 1) * hd]);
            }
        }
        let mut sc = vec![0f32; group * nr * nk];
        super::ops::gemm_nt(&qm, k, &mut sc, group * nr, nk, hd);
        for (i, row) in sc.chunks_mut(nk).enumerate() {
            let pos = t.rows[i % nr].1;
            let wlo = self.window_lo(pos);
            for (j, x) in row.iter_mut().enumerate() {
                let kp = lo + j;
                *x = if kp > pos || kp < wlo { f32::NEG_INFINITY } else { *x * self.p.scale };
            }
        }
        sc
    }
}

/// Softmax of each row in place (rows of -inf only become zeros).
fn softmax_rows(sc: &mut [f32], n: usize) {
    for row in sc.chunks_mut(n.max(1)) {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if max == f32::NEG_INFINITY {
            row.fill(0.0);
            continue;
        }
        let mut sum = 0f64;
        row.iter_mut().for_each(|x| {
            *x = (*x - max).exp();
            sum += *x as f64;
        });
        let inv = (1.0 / sum) as f32;
        row.iter_mut().for_each(|x| *x *= inv);
    }
}

/// Dense causal attention of one retrieval-head tile via two GEMMs; returns `[group][row][hd]`.
fn tile_attention(ctx: &Ctx, q: &[f32], t: &Tile, group: usize) -> Vec<f32> {
    let lo = ctx.window_lo(t.rows[0].1);
    let hi = t.rows.last().map_or(lo, |r| r.1 + 1);
    let (k, v) = ctx.gather(t.s, t.kvh, lo, hi);
    let mut p = ctx.tile_scores(q, t, group, lo, &k);
    softmax_rows(&mut p, hi - lo);
    let mut o = vec![0f32; group * t.rows.len() * ctx.hd];
    super::ops::gemm_nn(&p, &v, &mut o, group * t.rows.len(), ctx.hd, hi - lo);
    o
}

/// Split each sequence's query rows into tiles of up to `TILE` positions per KV head.
fn tiles(seq_pos: &[(usize, usize)], n_kv: usize) -> Vec<Tile> {
    const TILE: usize = 64;
    let mut out = vec![];
    let mut start = 0;
    while start < seq_pos.len() {
        let s = seq_pos[start].0;
        let end = (start..seq_pos.len()).find(|&i| seq_pos[i].0 != s || i - start == TILE).unwrap_or(seq_pos.len());
        for kvh in 0..n_kv {
            out.push(Tile { s, kvh, rows: (start..end).map(|r| (r, seq_pos[r].1)).collect() });
        }
        start = end;
    }
    out
}

fn context<'a>(p: &AttentionParams, kv: &'a LayerKv<CpuBackend>, meta: &'a PagedMeta<CpuBackend>) -> Result<Ctx<'a>> {
    let (ns, nkv, ps, hd) = (u(p.num_seqs), u(p.n_kv_heads), u(p.page_size), u(p.head_dim));
    let (n_ret, n_str) = (u(p.n_ret), u(p.n_str));
    if nkv == 0 || p.n_heads == 0 || n_ret + n_str != nkv || !u(p.n_heads).is_multiple_of(nkv) {
        return Err(err("attention: bad head counts"));
    }
    if ps == 0 || hd == 0 {
        return Err(err("attention: page_size and head_dim must be positive"));
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
    let rrows = u(p.num_pages) * n_ret * ps;
    let srows = u(p.num_str_pages) * n_str * ps;
    Ok(Ctx {
        ret: Pool { k: pool(kv.k, rrows, ps, hd, "k pool")?, v: pool(kv.v, rrows, ps, hd, "v pool")?, heads: n_ret },
        strm: Pool {
            k: pool(kv.sk, srows, ps, hd, "streaming k pool")?,
            v: pool(kv.sv, srows, ps, hd, "streaming v pool")?,
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

/// A block-sparse prefill's page lists on the host: per row its block, per block its first
/// position; `pages(row, r)` is `None` for a dense block.
struct Blocks<'a> {
    row_block: Vec<usize>,
    first: Vec<usize>,
    selected: &'a [u32],
    counts: &'a [u32],
    n_ret: usize,
    stride: usize,
}

impl Blocks<'_> {
    fn new<'a>(
        p: &AttentionParams,
        q_indptr: &[u32],
        kv_len: &[u32],
        b: &'a BlockPages<CpuBackend>,
    ) -> Result<Blocks<'a>> {
        if p.window != 0 {
            return Err(err("prefill_attention: block-sparse prefill needs window 0"));
        }
        let (mut row_block, mut first) = (vec![], vec![]);
        for s in 0..u(p.num_seqs) {
            let (a, e) = (u(q_indptr[s]), u(q_indptr[s + 1]));
            let start = u(kv_len[s]) - (e - a);
            for r in a..e {
                if (r - a) % PREFILL_BLOCK_ROWS == 0 {
                    first.push(start + r - a);
                }
                row_block.push(first.len() - 1);
            }
        }
        let (n_ret, stride) = (u(p.n_ret), u(p.sel_stride));
        let nb = first.len();
        let counts = u32s(b.counts, nb * n_ret, "prefill_attention block counts")?;
        let selected = u32s(b.selected, nb * n_ret * stride, "prefill_attention block selected")?;
        if counts.iter().any(|&c| c != BLOCK_DENSE && u(c) > stride) {
            return Err(err("prefill_attention: a block count exceeds sel_stride"));
        }
        Ok(Blocks { row_block, first, selected, counts, n_ret, stride })
    }

    /// The logical pages a query row of retrieval head `r` reads besides its tail, and the tail's
    /// first page; `None` for a dense block. Entries outside `1..tail` are skipped.
    fn pages(&self, row: usize, r: usize, ps: usize) -> Option<(Vec<usize>, usize)> {
        let b = self.row_block[row];
        let c = self.counts[b * self.n_ret + r];
        if c == BLOCK_DENSE {
            return None;
        }
        let t = block_tail_page(self.first[b], ps);
        let base = (b * self.n_ret + r) * self.stride;
        let sel = self.selected[base..base + u(c)].iter().map(|&j| u(j) + 1).filter(|&j| j < t);
        Some(((0..t.min(1)).chain(sel).collect(), t))
    }
}

#[allow(clippy::too_many_arguments)]
pub fn prefill_attention(
    p: &AttentionParams,
    q: &CpuBuffer,
    q_indptr: &CpuBuffer,
    kv: LayerKv<CpuBackend>,
    meta: &PagedMeta<CpuBackend>,
    blocks: Option<&BlockPages<CpuBackend>>,
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
    let blocks = blocks.map(|b| Blocks::new(p, q_indptr, ctx.kv_len, b)).transpose()?;
    // Whether retrieval KV head kvh reads row `row` through a block's page list.
    let sparse = |row: usize, kvh: usize| match (&blocks, ctx.kinds[kvh]) {
        (Some(b), (false, r)) => b.counts[b.row_block[row] * b.n_ret + r] != BLOCK_DENSE,
        _ => false,
    };
    let q = f32s(q, n * nh * hd, "prefill_attention q")?;
    let out = f32s_mut(out, n * nh * hd, "prefill_attention out")?;
    // Retrieval heads: dense causal tiles through GEMM (tiles lie inside one block), or per query
    // over the block's pages. Streaming heads: per query, Lambda mask.
    let all = tiles(&seq_pos, u(p.n_kv_heads));
    let done: Vec<(Tile, Vec<f32>)> = all
        .into_par_iter()
        .filter(|t| !ctx.kinds[t.kvh].0 && !sparse(t.rows[0].0, t.kvh))
        .map(|t| {
            let o = tile_attention(&ctx, q, &t, group);
            (t, o)
        })
        .collect();
    for (t, o) in done {
        for g in 0..group {
            for (i, &(row, _)) in t.rows.iter().enumerate() {
                let h = t.kvh * group + g;
                out[(row * nh + h) * hd..(row * nh + h + 1) * hd]
                    .copy_from_slice(&o[(g * t.rows.len() + i) * hd..(g * t.rows.len() + i + 1) * hd]);
            }
        }
    }
    // One task per (query row, streaming KV head): the group's query heads are adjacent in q/out.
    let (nkv, kn) = (u(p.n_kv_heads), kernels());
    out.par_chunks_mut(group * hd).enumerate().for_each_init(Scratch::default, |sc, (i, o)| {
        let ((s, pos), kvh) = (seq_pos[i / nkv], i % nkv);
        sc.spans.clear();
        match (ctx.kinds[kvh], &blocks) {
            ((true, si), _) => ctx.lambda_spans(s, si, pos, &mut sc.spans),
            ((false, r), Some(b)) => match b.pages(i / nkv, r, ctx.ps) {
                Some((pages, t)) => {
                    let tail = t..pos / ctx.ps + 1;
                    ctx.page_spans(s, r, pages.into_iter().chain(tail), 0, pos + 1, &mut sc.spans);
                }
                None => return,
            },
            _ => return,
        }
        ctx.attend_group(&q[i * group * hd..(i + 1) * group * hd], sc, o, kn);
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
    p.check_unit().map_err(err)?;
    let unit = u(p.unit());
    let ctx = context(p, &kv, meta)?;
    let slots = u32s(pages.seq_slot, ns, "decode seq_slot")?;
    let tail = u32s(pages.tail_start, ns, "decode tail_start")?;
    let max_slot = slots.iter().map(|&s| u(s) + 1).max().unwrap_or(0);
    let selected = u32s(pages.selected, max_slot * n_ret * stride, "decode selected")?;
    let counts = u32s(pages.counts, max_slot * n_ret, "decode counts")?;
    let q = f32s(q, ns * nh * hd, "sparse_decode_attention q")?;
    let out = f32s_mut(out, ns * nh * hd, "sparse_decode_attention out")?;
    let (nkv, kn) = (u(p.n_kv_heads), kernels());
    let group = nh / nkv;
    // One task per (sequence, KV head): the group's query heads are adjacent in q and out.
    out.par_chunks_mut(group * hd).enumerate().for_each_init(Scratch::default, |sc, (i, o)| {
        let (s, kvh) = (i / nkv, i % nkv);
        let len = u(ctx.kv_len[s]);
        sc.spans.clear();
        match ctx.kinds[kvh] {
            // An empty sequence has no query position: it sees nothing (zeros).
            _ if len == 0 => {}
            (true, si) => ctx.lambda_spans(s, si, len - 1, &mut sc.spans),
            (false, r) => {
                // Selected units below the tail (in list order), then the tail's units
                // (tail_start counts units: pages when sel_unit is 0).
                let (n_pages, upp) = (len.div_ceil(ps), ps / unit);
                let tail = u(tail[s]).min(n_pages * upp);
                let base = (u(slots[s]) * n_ret + r) * stride;
                let c = u(counts[u(slots[s]) * n_ret + r]).min(stride);
                let sel = selected[base..base + c].iter().map(|&j| u(j)).filter(|&j| j < tail);
                let lo = ctx.window_lo(len - 1);
                ctx.unit_spans(s, r, sel.chain(tail..n_pages * upp), unit, lo, len, &mut sc.spans);
            }
        }
        ctx.attend_group(&q[i * group * hd..(i + 1) * group * hd], sc, o, kn);
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
    let seq_pos: Vec<(usize, usize)> = (0..n).map(|t| (0, len - n + t)).collect();
    let (sink, local) = (u(p.sink), u(p.local));
    let done: Vec<(Tile, Vec<f32>)> = tiles(&seq_pos, u(p.n_kv_heads))
        .into_par_iter()
        .map(|t| {
            let hi = t.rows.last().map_or(0, |r| r.1 + 1);
            let (k, _) = ctx.gather(0, t.kvh, 0, hi);
            let mut sc = ctx.tile_scores(q, &t, group, 0, &k);
            softmax_rows(&mut sc, hi);
            let nr = t.rows.len();
            let mass = sc
                .chunks(hi.max(1))
                .enumerate()
                .map(|(i, row)| {
                    let pos = t.rows[i % nr].1;
                    let outside = sink..(pos + 1).saturating_sub(local);
                    row[outside.start.min(row.len())..outside.end.max(outside.start).min(row.len())]
                        .iter()
                        .map(|&x| x as f64)
                        .sum::<f64>() as f32
                })
                .collect();
            (t, mass)
        })
        .collect();
    for (t, mass) in done {
        for g in 0..group {
            for (i, &(row, _)) in t.rows.iter().enumerate() {
                out[row * nh + t.kvh * group + g] = mass[g * t.rows.len() + i];
            }
        }
    }
    Ok(())
}
