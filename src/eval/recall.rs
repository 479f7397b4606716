//! Selection-recall diagnostic (`lserve recall`): for sampled decode steps over long natural text,
//! the share of the true attention mass that page selection keeps, per layer, against an oracle
//! that picks the best pages of the same budget — so a weak bound (selection far below the
//! oracle) can be told from a small budget (the oracle itself low).
//!
//! At a sampled step every retrieval KV head's keys are read back and, per query head, the exact
//! softmax over all keys gives each physical page its mass. A selection keeps `k_pages` pages
//! (the newest page is always read and counted for every method) chosen by one of the [`Rank`]
//! methods from the Quest bound of each logical page `b_h(l) = sum_c max(q_c max_c, q_c min_c)`;
//! its recall is the mass of the pages it keeps, averaged over the group's query heads. The
//! oracle keeps the `k_pages` pages of largest group-summed mass (one list per KV head, as the
//! kernels read). [`Rank::Max`], [`Rank::HeadNorm`], [`Rank::MaxSink`] and [`Rank::HeadNormSink`]
//! are what `page_select` computes with `page_rank` max / head_norm and the sink pin off / on
//! (tested against the op; the op computes head_norm in log space, the same order).
//! [`Rank::Mean`] / [`Rank::MeanSink`] rank by each logical page's mean key instead of its bound
//! (a diagnostic of what a centroid summary would select; the op has none). [`Rank::MidSink`] and
//! [`Rank::ShrinkSink`] score the min/max boxes shrunk toward their centres (by 1, and by the
//! engine's `bound_shrink`): what `page_select` computes with that `bound_shrink` and the pin on.
//! "Page" here is the engine's selection unit: the physical page, or with `select_unit =
//! "logical"` the logical page (then each unit is scored on its own box, as `page_select` does).

use serde::Serialize;

use crate::backend::{Backend, LayerKv, PagedMeta, STREAMING_BIT};
use crate::engine::Engine;
use crate::error::Result;
use crate::model::config::ModelConfig;
use crate::model::llama::Logits;

/// How physical pages are ranked from the logical pages' bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Rank {
    /// max over the group's query heads and the page's logical pages (the `page_select` op).
    Max,
    /// per query head, log-sum-exp over the page's logical pages of `scale * bound` (an estimate
    /// of the page's softmax mass rather than of its largest score); max over the heads.
    Lse,
    /// per query head, softmax over pages of `scale * max_l bound` (each head's estimate
    /// normalized), summed over the group's heads: no head dominates by its score scale.
    HeadNorm,
    /// LSE per page, normalized per head, summed over heads.
    LseNorm,
    /// [`Rank::Max`] with the first page (the attention sink) always kept.
    MaxSink,
    /// [`Rank::HeadNorm`] with the first page always kept.
    HeadNormSink,
    /// [`Rank::Max`] over each logical page's mean key instead of its bound: `q . mean(k)` (an
    /// estimate of the page's typical score, where the bound is an upper limit of its largest).
    /// A diagnostic: `page_select` keeps no mean keys.
    Mean,
    /// [`Rank::Mean`] with the first page always kept.
    MeanSink,
    /// [`Rank::MaxSink`] over each logical page's mid-range key `(min + max) / 2` instead of its
    /// bound (the bound is `q . mid + |q| . (max - min) / 2`; this drops the spread term):
    /// `page_select` with `bound_shrink = 1` and the sink pinned.
    MidSink,
    /// [`Rank::MaxSink`] over the boxes shrunk by [`HeadView::shrink`] (`--bound-shrink`),
    /// `q . mid + (1 - shrink) |q| . (max - min) / 2`: `page_select` with that `bound_shrink` and
    /// the sink pinned (equal to [`Rank::MaxSink`] at shrink 0).
    ShrinkSink,
}

impl Rank {
    pub const ALL: [Rank; 10] = [
        Rank::Max,
        Rank::Lse,
        Rank::HeadNorm,
        Rank::LseNorm,
        Rank::MaxSink,
        Rank::HeadNormSink,
        Rank::Mean,
        Rank::MeanSink,
        Rank::MidSink,
        Rank::ShrinkSink,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Rank::Max => "max",
            Rank::Lse => "lse",
            Rank::HeadNorm => "head_norm",
            Rank::LseNorm => "lse_norm",
            Rank::MaxSink => "max+sink",
            Rank::HeadNormSink => "hnorm+sink",
            Rank::Mean => "mean",
            Rank::MeanSink => "mean+sink",
            Rank::MidSink => "mid+sink",
            Rank::ShrinkSink => "shrink+sink",
        }
    }
}

/// Mean recall per layer over the sampled (step, KV head) pairs.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LayerRecall {
    pub layer: usize,
    pub samples: usize,
    /// In the order of [`Rank::ALL`].
    pub recall: Vec<f64>,
    pub oracle: f64,
}

/// One KV head's view at a decode step: the query heads of its group and its keys.
pub struct HeadView<'a> {
    /// `[group][head_dim]`.
    pub q: &'a [f32],
    /// `[tokens][head_dim]`.
    pub keys: &'a [f32],
    pub head_dim: usize,
    pub page_size: usize,
    pub logical_page: usize,
    pub scale: f32,
    /// [`Rank::ShrinkSink`]'s box shrink, in [0, 1] (`PageSelectParams::bound_shrink`).
    pub shrink: f32,
}

fn lse(xs: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = xs.collect();
    let m = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if m == f64::NEG_INFINITY { m } else { m + v.iter().map(|x| (x - m).exp()).sum::<f64>().ln() }
}

pub(crate) fn softmax(v: &[f64]) -> Vec<f64> {
    let m = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = v.iter().map(|x| (x - m).exp()).collect();
    let s: f64 = e.iter().sum();
    e.into_iter().map(|x| x / s).collect()
}

/// The `k` best of `scores` (ties to the lower index), ascending.
pub fn top_k(scores: &[f64], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..scores.len()).collect();
    idx.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    idx.truncate(k);
    idx.sort_unstable();
    idx
}

impl HeadView<'_> {
    fn tokens(&self) -> usize {
        self.keys.len() / self.head_dim
    }

    /// `[group][logical page]` Quest bounds over the keys (each logical page's min/max).
    pub fn bounds(&self) -> Vec<Vec<f64>> {
        self.shrunk_bounds(0.0)
    }

    /// `[group][logical page]` scores of the boxes shrunk toward their centres by `shrink`,
    /// `sum_c q_c mid_c + (1 - shrink) |q_c| (max_c - min_c) / 2` in f64: the Quest bound at 0
    /// (then summed in the bound's own form, `max(q_c max_c, q_c min_c)`), the mid-range key at 1.
    pub fn shrunk_bounds(&self, shrink: f32) -> Vec<Vec<f64>> {
        self.score_boxes(&self.boxes(), shrink)
    }

    /// Each logical page's channel-wise (min, max) over the keys.
    fn boxes(&self) -> Vec<(Vec<f32>, Vec<f32>)> {
        let (hd, lp, t) = (self.head_dim, self.logical_page, self.tokens());
        let mut mm = vec![(vec![f32::INFINITY; hd], vec![f32::NEG_INFINITY; hd]); t.div_ceil(lp)];
        for (pos, k) in self.keys.chunks_exact(hd).enumerate() {
            let (lo, hi) = &mut mm[pos / lp];
            for c in 0..hd {
                lo[c] = lo[c].min(k[c]);
                hi[c] = hi[c].max(k[c]);
            }
        }
        mm
    }

    /// [`HeadView::shrunk_bounds`] of boxes already computed by [`HeadView::boxes`].
    fn score_boxes(&self, mm: &[(Vec<f32>, Vec<f32>)], shrink: f32) -> Vec<Vec<f64>> {
        let hd = self.head_dim;
        self.q
            .chunks_exact(hd)
            .map(|q| {
                let term = |c: usize, lo: &[f32], hi: &[f32]| -> f64 {
                    if shrink == 0.0 {
                        return (q[c] * hi[c]).max(q[c] * lo[c]) as f64;
                    }
                    let (l, h, qc) = (lo[c] as f64, hi[c] as f64, q[c] as f64);
                    qc * (h + l) / 2.0 + (1.0 - shrink as f64) * qc.abs() * (h - l) / 2.0
                };
                mm.iter().map(|(lo, hi)| (0..hd).map(|c| term(c, lo, hi)).sum()).collect()
            })
            .collect()
    }

    /// `[group][logical page]` scores of each logical page's mean key, `q . mean(k)`.
    pub fn mean_scores(&self) -> Vec<Vec<f64>> {
        let (hd, lp, t) = (self.head_dim, self.logical_page, self.tokens());
        let mut sum = vec![vec![0f64; hd]; t.div_ceil(lp)];
        for (pos, k) in self.keys.chunks_exact(hd).enumerate() {
            sum[pos / lp].iter_mut().zip(k).for_each(|(s, &x)| *s += x as f64);
        }
        let n = |l: usize| ((l + 1) * lp).min(t) - l * lp;
        self.q
            .chunks_exact(hd)
            .map(|q| {
                let dot = |m: &[f64]| q.iter().zip(m).map(|(&a, b)| a as f64 * b).sum::<f64>();
                sum.iter().enumerate().map(|(l, m)| dot(m) / n(l) as f64).collect()
            })
            .collect()
    }

    /// `[group][physical page]` exact softmax mass of each page.
    pub fn page_mass(&self) -> Vec<Vec<f64>> {
        let (hd, ps, t) = (self.head_dim, self.page_size, self.tokens());
        self.q
            .chunks_exact(hd)
            .map(|q| {
                let z: Vec<f64> = self
                    .keys
                    .chunks_exact(hd)
                    .map(|k| (q.iter().zip(k).map(|(a, b)| a * b).sum::<f32>() * self.scale) as f64)
                    .collect();
                let p = softmax(&z);
                let mut m = vec![0f64; t.div_ceil(ps)];
                p.iter().enumerate().for_each(|(pos, x)| m[pos / ps] += x);
                m
            })
            .collect()
    }

    /// Scores of physical pages `0..n_pages-1` (the newest excluded) under `rank`.
    pub fn rank_scores(&self, rank: Rank, bounds: &[Vec<f64>]) -> Vec<f64> {
        let per = self.page_size / self.logical_page;
        let n = self.tokens().div_ceil(self.page_size).saturating_sub(1);
        let s = self.scale as f64;
        let page = |b: &[f64], p: usize, f: &dyn Fn(&[f64]) -> f64| f(&b[p * per..((p + 1) * per).min(b.len())]);
        let max = |x: &[f64]| x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let lsef = |x: &[f64]| lse(x.iter().map(|v| v * s));
        let per_head = |f: &dyn Fn(&[f64]) -> f64| -> Vec<Vec<f64>> {
            bounds.iter().map(|b| (0..n).map(|p| page(b, p, f)).collect()).collect()
        };
        let combine_max = |h: Vec<Vec<f64>>| -> Vec<f64> {
            (0..n).map(|p| h.iter().map(|r| r[p]).fold(f64::NEG_INFINITY, f64::max)).collect()
        };
        let combine_norm = |h: Vec<Vec<f64>>, mult: f64| -> Vec<f64> {
            let normed: Vec<Vec<f64>> =
                h.iter().map(|r| softmax(&r.iter().map(|x| x * mult).collect::<Vec<_>>())).collect();
            (0..n).map(|p| normed.iter().map(|r| r[p]).sum()).collect()
        };
        let pin = |mut v: Vec<f64>| {
            if let Some(x) = v.first_mut() {
                *x = f64::INFINITY;
            }
            v
        };
        match rank {
            Rank::Max => combine_max(per_head(&max)),
            Rank::Lse => combine_max(per_head(&lsef)),
            Rank::HeadNorm => combine_norm(per_head(&max), s),
            Rank::LseNorm => combine_norm(per_head(&lsef), 1.0),
            Rank::MaxSink => pin(combine_max(per_head(&max))),
            Rank::HeadNormSink => pin(combine_norm(per_head(&max), s)),
            // `bounds` holds the mean / mid-range / shrunk-box scores for these (`recall` passes them).
            Rank::Mean => combine_max(per_head(&max)),
            Rank::MeanSink | Rank::MidSink | Rank::ShrinkSink => pin(combine_max(per_head(&max))),
        }
    }

    /// (recall of each rank in [`Rank::ALL`] order, oracle recall) with `k` selected pages.
    pub fn recall(&self, k: usize) -> (Vec<f64>, f64) {
        let mass = self.page_mass();
        let n = mass[0].len();
        let newest = n - 1;
        let k = k.min(newest);
        let kept = |pages: &[usize]| -> f64 {
            let per_head: Vec<f64> =
                mass.iter().map(|m| pages.iter().map(|&p| m[p]).sum::<f64>() + m[newest]).collect();
            per_head.iter().sum::<f64>() / per_head.len() as f64
        };
        // The boxes once, scored three ways (the bound, the centre key, the run's shrink).
        let boxes = self.boxes();
        let (bounds, means) = (self.score_boxes(&boxes, 0.0), self.mean_scores());
        let (mid, shrunk) = (self.score_boxes(&boxes, 1.0), self.score_boxes(&boxes, self.shrink));
        let recalls = Rank::ALL
            .iter()
            .map(|&r| {
                let per_page = match r {
                    Rank::Mean | Rank::MeanSink => &means,
                    Rank::MidSink => &mid,
                    Rank::ShrinkSink => &shrunk,
                    _ => &bounds,
                };
                kept(&top_k(&self.rank_scores(r, per_page), k))
            })
            .collect();
        let group_mass: Vec<f64> = (0..newest).map(|p| mass.iter().map(|m| m[p]).sum()).collect();
        (recalls, kept(&top_k(&group_mass, k)))
    }
}

/// The model and cache geometry a probe reads keys with.
#[derive(Clone, Copy, Debug)]
pub struct ProbeShape {
    pub n_heads: usize,
    pub n_kv: usize,
    pub head_dim: usize,
    pub page_size: usize,
    pub logical_page: usize,
    /// The selection unit in tokens (the page, or a logical page: `select_unit`); the probe's
    /// "pages" are these units.
    pub unit: usize,
}

/// Accumulates [`LayerRecall`]s from decode-step hooks.
pub struct RecallProbe {
    pub layers: Vec<LayerRecall>,
    k_pages: usize,
    scale: f32,
    shrink: f32,
}

impl RecallProbe {
    /// `shrink`: [`Rank::ShrinkSink`]'s box shrink.
    pub fn new(num_layers: usize, k_pages: usize, scale: f32, shrink: f32) -> Self {
        let layers = (0..num_layers)
            .map(|layer| LayerRecall { layer, recall: vec![0.0; Rank::ALL.len()], ..Default::default() })
            .collect();
        RecallProbe { layers, k_pages, scale, shrink }
    }

    /// Measure one layer of a one-sequence decode step (called from the layer hook).
    #[allow(clippy::too_many_arguments)]
    pub fn observe<B: Backend>(
        &mut self,
        be: &B,
        layer: usize,
        q: &B::Buffer,
        kv: &LayerKv<B>,
        meta: &PagedMeta<B>,
        shape: ProbeShape,
        n_ret: usize,
    ) -> Result<()> {
        let (n_heads, n_kv, hd) = (shape.n_heads, shape.n_kv, shape.head_dim);
        let (ps, lp) = (shape.page_size, shape.logical_page);
        if n_ret == 0 {
            return Ok(());
        }
        let t = be.download_u32(meta.kv_len, 0, 1)?[0] as usize;
        let n_pages = t.div_ceil(ps);
        if t.div_ceil(shape.unit) < 2 {
            return Ok(());
        }
        let table = be.download_u32(meta.page_table, 0, n_pages)?;
        let head_map = be.download_u32(kv.head_map, 0, n_kv)?;
        let qs = be.download_f32(q, 0, n_heads * hd)?;
        let group = n_heads / n_kv;
        for (kvh, &m) in head_map.iter().enumerate() {
            if m & STREAMING_BIT != 0 {
                continue;
            }
            let keys = read_keys(be, kv, &table, (t, ps, hd), (n_ret, m as usize))?;
            let view = HeadView {
                q: &qs[kvh * group * hd..(kvh + 1) * group * hd],
                keys: &keys,
                head_dim: hd,
                page_size: shape.unit,
                logical_page: lp,
                scale: self.scale,
                shrink: self.shrink,
            };
            let (rec, oracle) = view.recall(self.k_pages);
            let l = &mut self.layers[layer];
            l.samples += 1;
            l.recall.iter_mut().zip(&rec).for_each(|(a, b)| *a += b);
            l.oracle += oracle;
        }
        Ok(())
    }

    /// Means over the samples of each layer that had any.
    pub fn finish(mut self) -> Vec<LayerRecall> {
        self.layers.retain(|l| l.samples > 0);
        for l in &mut self.layers {
            l.recall.iter_mut().for_each(|x| *x /= l.samples as f64);
            l.oracle /= l.samples as f64;
        }
        self.layers
    }
}

/// The first `t` keys of retrieval head `r` (of `n_ret`) read back from the pool through the
/// sequence's page `table`, `[t][head_dim]` (f32 pools).
pub(crate) fn read_keys<B: Backend>(
    be: &B,
    kv: &LayerKv<B>,
    table: &[u32],
    (t, ps, hd): (usize, usize, usize),
    (n_ret, r): (usize, usize),
) -> Result<Vec<f32>> {
    let mut keys = Vec::with_capacity(t * hd);
    for (i, &page) in table.iter().enumerate() {
        let valid = (t - i * ps).min(ps);
        keys.extend(be.download_f32(kv.k, ((page as usize * n_ret + r) * ps) * hd, valid * hd)?);
    }
    Ok(keys)
}

/// The models' attention score scale: `query_pre_attn_scalar^-0.5` for Gemma 3, else
/// `head_dim^-0.5`.
pub(crate) fn score_scale(c: &ModelConfig) -> f32 {
    c.gemma.as_ref().map_or(c.head_dim as f32, |g| g.query_pre_attn_scalar).sqrt().recip()
}

/// Decode steps predicting the last `steps` tokens of `ids` ([`super::prefill_for_decode`]: each
/// token enters the cache once), measuring every `every`-th.
pub fn measure<B: Backend>(e: &mut Engine<B>, ids: &[u32], steps: usize, every: usize) -> Result<Vec<LayerRecall>> {
    let c = e.model.cfg.clone();
    let s = e.cache.shape.clone();
    let scale = score_scale(&c);
    let mut probe = RecallProbe::new(c.num_layers, e.attn.k_pages, scale, e.attn.bound_shrink);
    let mut seq = e.cache.admit()?;
    let r = (|| -> Result<()> {
        let split = super::prefill_for_decode(e, &mut seq, ids, steps)?;
        for (i, p) in (split..ids.len()).enumerate() {
            if i % every.max(1) != 0 {
                e.step(&mut seq, &ids[p - 1..p], Logits::None, None)?;
                continue;
            }
            let shape = ProbeShape {
                n_heads: c.num_heads,
                n_kv: c.num_kv_heads,
                head_dim: c.head_dim,
                page_size: s.page_size,
                logical_page: s.logical_page,
                unit: e.attn.unit(s.page_size),
            };
            let layout = s.layout.clone();
            let mut failed = Ok(());
            let mut hook =
                |be: &B, layer: usize, q: &B::Buffer, kv: LayerKv<'_, B>, meta: &PagedMeta<'_, B>| -> Result<()> {
                    if failed.is_ok() {
                        failed = probe.observe(be, layer, q, &kv, meta, shape, layout.n_ret(layer));
                    }
                    Ok(())
                };
            e.step(&mut seq, &ids[p - 1..p], Logits::None, Some(&mut hook))?;
            failed?;
        }
        Ok(())
    })();
    e.cache.release(&mut seq)?;
    r?;
    Ok(probe.finish())
}
