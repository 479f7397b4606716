//! Unified sparse attention on the CPU backend, against independent references:
//! - with a token budget covering the context, sparse decode (page selection running every step)
//!   equals dense decode bit for bit;
//! - streaming heads equal a naive float64 model with the Lambda mask (sink + local window), through
//!   chunked prefill and decode, with the streaming ring wrapping several times;
//! - `page_select` returns what a brute-force Quest selector computed from the raw keys returns;
//! - page summaries equal min/max recomputed from the raw keys after random appends;
//! - a row not flagged for selection keeps its previous selection;
//!
//! Each runs over several (physical, logical) page sizes. Random inputs, fresh seed each run.

mod common;

use common::naive::*;
use lserve::backend::cpu::{CpuBackend, CpuBuffer};
use lserve::backend::*;
use lserve::kv::{CacheShape, HeadLayout, KvCache, SeqPages};
use lserve::loader::MemWeights;
use lserve::model::llama::{Llama, Logits};
use lserve::sparse::{Config, HeadPattern, SelectUnit};

const PAGE_SIZES: [(usize, usize); 4] = [(16, 4), (16, 16), (32, 8), (64, 16)];

fn sparse_config(physical: usize, logical: usize) -> Config {
    let mut c = common::paged_config(physical, logical);
    c.sparse.enabled = true;
    c.sparse.streaming_ratio = 0.0;
    c.sparse.dense_below = 0;
    c.sparse.selector_interval = 1;
    c
}

/// Prefill `prefill` tokens in chunks of `chunk`, then decode the rest; logits of every row.
fn run(e: &mut lserve::engine::Engine<CpuBackend>, ids: &[u32], prefill: usize, chunk: usize) -> Vec<Vec<f32>> {
    common::step_logits(e, ids, prefill, chunk)
}

/// A random model with `max_positions` positions and `n_ids` random token ids (fresh seed).
fn random_model(max_positions: usize, n_ids: usize) -> (lserve::model::config::ModelConfig, MemWeights, Vec<u32>) {
    let mut rng = Rng(common::seed() | 1);
    let c = lserve::model::config::ModelConfig { max_position_embeddings: max_positions, ..base_config() };
    let w = random_weights(&c, &mut rng);
    let ids: Vec<u32> = (0..n_ids).map(|_| (rng.next() * c.vocab_size as f64) as u32).collect();
    (c, w, ids)
}

#[test]
fn budget_covering_the_context_equals_dense() {
    let (c, w, ids) = random_model(256, 150);
    for (ps, lp) in PAGE_SIZES {
        let load = || Llama::load(&CpuBackend::new(), &c, &w, |_, _| {}).unwrap();
        let mut dense = common::engine(load(), 256, common::paged_config(ps, lp), 40);
        let a = run(&mut dense, &ids, 40, 40);
        for unit in [SelectUnit::Physical, SelectUnit::Logical] {
            let mut cfg = sparse_config(ps, lp);
            (cfg.sparse.token_budget, cfg.sparse.select_unit) = (256, unit);
            let b = run(&mut common::engine(load(), 256, cfg, 40), &ids, 40, 40);
            assert_eq!(a, b, "pages {ps}/{lp}, {unit:?} units: sparse with a covering budget differs from dense");
        }
    }
}

/// Selection in logical-page units reads what selection over physical pages of the logical
/// page's size reads (the same candidates, budget, tails and scores), so a `ps/lp` cache with
/// `select_unit = "logical"` decodes exactly as an `lp/lp` cache does, with a budget well below
/// the context (selection at work); and differently from `ps/lp` with physical units.
#[test]
fn logical_units_decode_as_pages_of_their_size() {
    let (c, w, ids) = random_model(512, 400);
    let load = || Llama::load(&CpuBackend::new(), &c, &w, |_, _| {}).unwrap();
    for (ps, lp) in [(64, 16), (32, 16), (64, 32)] {
        let engine = |p: usize, l: usize, unit: SelectUnit| {
            let mut cfg = sparse_config(p, l);
            (cfg.sparse.token_budget, cfg.sparse.select_unit) = (96, unit);
            common::engine(load(), 512, cfg, 64)
        };
        let small = run(&mut engine(lp, lp, SelectUnit::Physical), &ids, 128, 64);
        let logical = run(&mut engine(ps, lp, SelectUnit::Logical), &ids, 128, 64);
        let physical = run(&mut engine(ps, lp, SelectUnit::Physical), &ids, 128, 64);
        assert_eq!(small, logical, "pages {ps}/{lp}: logical units differ from {lp}-token pages");
        assert_ne!(physical, logical, "pages {ps}/{lp}: the unit changed nothing (selection idle?)");
    }
}

#[test]
fn streaming_heads_equal_the_lambda_mask_reference() {
    let seed = common::seed();
    let mut rng = Rng(seed | 1);
    let c = lserve::model::config::ModelConfig { max_position_embeddings: 256, ..base_config() };
    let w = random_weights(&c, &mut rng);
    let ids: Vec<u32> = (0..150).map(|_| (rng.next() * c.vocab_size as f64) as u32).collect();
    let dir = tempfile::tempdir().unwrap();
    let pattern = dir.path().join("p.toml");
    let scores: Vec<Vec<f64>> = (0..c.num_layers).map(|_| (0..c.num_kv_heads).map(|_| rng.next()).collect()).collect();
    let hp = HeadPattern { model: "test".into(), sink_tokens: 4, local_tokens: 8, scores };
    std::fs::write(&pattern, hp.to_toml()).unwrap();
    for (ps, lp) in PAGE_SIZES {
        let mut cfg = sparse_config(ps, lp);
        cfg.sparse.streaming_ratio = 0.5;
        cfg.sparse.head_pattern = Some(pattern.clone());
        cfg.sparse.sink_tokens = 4;
        cfg.sparse.local_tokens = 8;
        cfg.sparse.token_budget = 256;
        let layout = hp.layout(c.num_layers, c.num_kv_heads, 0.5, &[]).unwrap();
        assert!(layout.any_streaming() && layout.streaming.iter().flatten().any(|s| !s));
        let model = Llama::load(&CpuBackend::new(), &c, &w, |_, _| {}).unwrap();
        let mut e = common::engine(model, 256, cfg, 5);
        assert!(e.cache.shape.ring_tokens + 40 < ids.len(), "the ring must wrap in this test");
        let got = run(&mut e, &ids, 75, 5);
        let want = naive_logits_lambda(&c, &w, &ids, Some(&Lambda { streaming: &layout.streaming, sink: 4, local: 8 }));
        for (i, (g, wnt)) in got.iter().zip(&want).enumerate() {
            let d = max_diff(g, wnt);
            assert!(d < 2e-4, "pages {ps}/{lp}, position {i}: max |diff| {d}");
        }
    }
}

/// A cache of one layer with the given head split, plus one admitted sequence.
fn one_layer_cache(
    be: &CpuBackend,
    n_kv: usize,
    streaming: Vec<bool>,
    ps: usize,
    lp: usize,
    hd: usize,
) -> (KvCache<CpuBackend>, SeqPages) {
    let shape = CacheShape {
        num_layers: 1,
        n_kv_heads: n_kv,
        head_dim: hd,
        page_size: ps,
        logical_page: lp,
        num_pages: 64,
        max_seqs: 2,
        ring_tokens: if streaming.iter().any(|&s| s) { 2 * ps } else { 0 },
        sink: 4,
        sel_stride: 8,
        layout: HeadLayout { streaming: vec![streaming] },
        kv_dtype: DType::F32,
    };
    let mut cache = KvCache::new(be, shape).unwrap();
    let _other = cache.admit().unwrap(); // slot 0 belongs to someone else
    let seq = cache.admit().unwrap();
    (cache, seq)
}

/// Append `n` tokens with random q/k/v; identity RoPE (inv_freq 0) so stored keys equal the
/// inputs. Returns the k rows `[n][n_kv][hd]`.
fn append(
    be: &CpuBackend,
    cache: &mut KvCache<CpuBackend>,
    seq: &mut SeqPages,
    n: usize,
    nh: usize,
    rng: &mut Rng,
) -> Vec<f32> {
    append_planted(be, cache, seq, n, nh, rng, 0..0)
}

/// As `append`, with channel 0 of KV head 0 set to 50 for the tokens in `plant`.
fn append_planted(
    be: &CpuBackend,
    cache: &mut KvCache<CpuBackend>,
    seq: &mut SeqPages,
    n: usize,
    nh: usize,
    rng: &mut Rng,
    plant: std::ops::Range<usize>,
) -> Vec<f32> {
    let s = cache.shape.clone();
    let (n_kv, hd) = (s.n_kv_heads, s.head_dim);
    cache.reserve(seq, n).unwrap();
    let width = (nh + 2 * n_kv) * hd;
    let mut qkv = rng.normal_vec(n * width, 0.1);
    plant.for_each(|t| qkv[t * width + nh * hd] = 50.0);
    let keys: Vec<f32> = (0..n).flat_map(|t| qkv[t * width + nh * hd..t * width + (nh + n_kv) * hd].to_vec()).collect();
    let meta_bufs = (
        be.upload_u32(&(seq.len..seq.len + n).map(|p| p as u32).collect::<Vec<_>>()).unwrap(),
        be.upload_u32(&cache.slots(seq, seq.len, n)).unwrap(),
        be.upload_u32(&cache.ring_slots(seq, seq.len, n)).unwrap(),
        be.upload_f32(DType::F32, vec![0.0; hd / 2]).unwrap(),
    );
    let meta = RopeAppendMeta {
        positions: &meta_bufs.0,
        slots: &meta_bufs.1,
        ring_slots: &meta_bufs.2,
        inv_freq: &meta_bufs.3,
    };
    let p = RopeAppendKvParams::new(&cache.geometry(0), n, nh, 1.0);
    let mut q = CpuBuffer::F32(vec![f32::NAN; n * nh * hd]);
    be.rope_append_kv(&p, &be.upload_f32(DType::F32, qkv).unwrap(), &meta, &mut q, cache.layers[0].view_mut()).unwrap();
    seq.len += n;
    keys
}

fn as_f32(b: &CpuBuffer) -> &[f32] {
    match b {
        CpuBuffer::F32(v) => v,
        _ => panic!("f32 buffer expected"),
    }
}

fn as_u32(b: &CpuBuffer) -> &[u32] {
    match b {
        CpuBuffer::U32(v) => v,
        _ => panic!("u32 buffer expected"),
    }
}

#[test]
fn summaries_equal_minmax_recomputed_from_scratch() {
    let mut rng = Rng(common::seed() | 1);
    let be = CpuBackend::new();
    for (ps, lp) in PAGE_SIZES {
        let (n_kv, hd, nh) = (3, 8, 6);
        let streaming = vec![false, true, false];
        let (mut cache, mut seq) = one_layer_cache(&be, n_kv, streaming.clone(), ps, lp, hd);
        let mut keys = vec![];
        for _ in 0..12 {
            let n = 1 + (rng.next() * 20.0) as usize;
            keys.extend(append(&be, &mut cache, &mut seq, n, nh, &mut rng));
            // Every logical page holding tokens: min/max over its tokens, per retrieval head.
            let summary = as_f32(&cache.layers[0].summary);
            let lpp = ps / lp;
            for lpage in 0..seq.len.div_ceil(lp) {
                let (page, l) = (seq.pages[lpage * lp / ps] as usize, (lpage * lp % ps) / lp);
                let toks = lpage * lp..((lpage + 1) * lp).min(seq.len);
                for (r, h) in (0..n_kv).filter(|&h| !streaming[h]).enumerate() {
                    let at = (((page * 2 + r) * lpp + l) * 2) * hd;
                    for ch in 0..hd {
                        let vals = toks.clone().map(|t| keys[(t * n_kv + h) * hd + ch]);
                        let (mn, mx) = vals.fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), v| (a.min(v), b.max(v)));
                        assert_eq!(
                            (summary[at + ch], summary[at + hd + ch]),
                            (mn, mx),
                            "pages {ps}/{lp} lpage {lpage}"
                        );
                    }
                }
            }
        }
    }
}

/// Brute-force Quest selection from raw keys: top `k` of the `unit`-token units (unit j: tokens
/// `j * unit .. (j + 1) * unit`) below the one holding the last token, by the max over the group's
/// query heads and the unit's logical pages of sum_c max(q_c*max_c, q_c*min_c).
fn brute_force(
    keys: &[f32],
    q: &[f32],
    kvh: usize,
    (len, unit): (usize, usize),
    k: usize,
    d: (usize, usize, usize, usize, usize),
) -> Vec<u32> {
    let (n_kv, hd, nh, _, lp) = d;
    let group = nh / n_kv;
    let mut scored: Vec<(f64, u32)> = (0..len.div_ceil(unit) - 1)
        .map(|j| {
            let mut best = f64::NEG_INFINITY;
            for l0 in (j * unit..(j + 1) * unit).step_by(lp) {
                for qh in kvh * group..(kvh + 1) * group {
                    let score: f64 = (0..hd)
                        .map(|c| {
                            let vals = (l0..l0 + lp).map(|t| keys[(t * n_kv + kvh) * hd + c] as f64);
                            let (mn, mx) =
                                vals.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(v), b.max(v)));
                            let qc = q[qh * hd + c] as f64;
                            (qc * mx).max(qc * mn)
                        })
                        .sum();
                    best = best.max(score);
                }
            }
            (best, j as u32)
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut keep: Vec<u32> = scored.iter().take(k).map(|x| x.1).collect();
    keep.sort_unstable();
    keep
}

#[test]
fn page_select_matches_brute_force() {
    let mut rng = Rng(common::seed() | 1);
    let be = CpuBackend::new();
    for (ps, lp) in PAGE_SIZES {
        let (n_kv, hd, nh) = (3, 8, 6);
        let streaming = vec![false, false, true];
        let (mut cache, mut seq) = one_layer_cache(&be, n_kv, streaming.clone(), ps, lp, hd);
        // Appended in chunks shorter than the streaming ring (one call must not wrap it).
        let mut keys = vec![];
        for n in [ps, ps, ps, ps, ps, ps, ps, ps, ps, 5] {
            keys.extend(append(&be, &mut cache, &mut seq, n, nh, &mut rng));
        }
        let q = rng.normal_vec(nh * hd, 1.0);
        let paged_bufs = (
            be.upload_u32(&[0, seq.pages.len() as u32]).unwrap(),
            be.upload_u32(&seq.pages).unwrap(),
            be.upload_u32(&[seq.len as u32]).unwrap(),
            be.upload_u32(&seq.ring).unwrap(),
        );
        let meta = PagedMeta {
            page_indptr: &paged_bufs.0,
            page_table: &paged_bufs.1,
            kv_len: &paged_bufs.2,
            ring_table: &paged_bufs.3,
        };
        let (slot, mask_on, mask_off) =
            (be.upload_u32(&[seq.slot]).unwrap(), be.upload_u32(&[1]).unwrap(), be.upload_u32(&[0]).unwrap());
        let qb = be.upload_f32(DType::F32, q.clone()).unwrap();
        let store = &mut cache.layers[0];
        // Selection units: the physical page (0 and ps alike), the logical page, two of them.
        for unit in [0, ps, lp, 2 * lp].into_iter().filter(|&x| ps.is_multiple_of(x.max(1))) {
            let k = if unit == 0 || unit == ps { 4 } else { 7 };
            let p = PageSelectParams {
                num_seqs: 1,
                n_heads: nh as u32,
                n_kv_heads: n_kv as u32,
                head_dim: hd as u32,
                page_size: ps as u32,
                logical_page: lp as u32,
                num_pages: cache.shape.num_pages as u32,
                n_ret: 2,
                k_pages: k as u32,
                sel_stride: 8,
                sel_unit: unit as u32,
                ..Default::default()
            };
            store.selected = CpuBuffer::U32(vec![u32::MAX; 2 * 2 * 8]); // poisoned
            let (kv, out) = store.select_view();
            be.page_select(&p, &qb, kv, &meta, &slot, &mask_on, out).unwrap();
            let (sel, counts) = (as_u32(&store.selected).to_vec(), as_u32(&store.counts).to_vec());
            let un = if unit == 0 { ps } else { unit };
            for (r, h) in (0..n_kv).filter(|&h| !streaming[h]).enumerate() {
                let want = brute_force(&keys, &q, h, (seq.len, un), k, (n_kv, hd, nh, ps, lp));
                let base = (seq.slot as usize * 2 + r) * 8;
                assert_eq!(counts[seq.slot as usize * 2 + r] as usize, k);
                assert_eq!(&sel[base..base + k], &want[..], "pages {ps}/{lp}, unit {unit}, head {h}");
            }
            assert!(sel[..16].iter().all(|&x| x == u32::MAX), "slot 0 (another sequence) untouched");
            // A row not flagged keeps its selection even when the query changes.
            let q2 = be.upload_f32(DType::F32, rng.normal_vec(nh * hd, 1.0)).unwrap();
            let (kv, out) = store.select_view();
            be.page_select(&p, &q2, kv, &meta, &slot, &mask_off, out).unwrap();
            assert_eq!(as_u32(&store.selected), &sel[..]);
        }
    }
}

#[test]
fn planted_page_is_selected() {
    // Keys of page 3 point along q; every other key is small noise. Quest must pick page 3.
    let mut rng = Rng(common::seed() | 1);
    let be = CpuBackend::new();
    let (n_kv, hd, nh, ps, lp) = (1, 8, 2, 16, 4);
    let (mut cache, mut seq) = one_layer_cache(&be, n_kv, vec![false], ps, lp, hd);
    let keys = append_planted(&be, &mut cache, &mut seq, 8 * ps, nh, &mut rng, 3 * ps..4 * ps);
    let q: Vec<f32> = (0..nh * hd).map(|i| if i % hd == 0 { 5.0 } else { 0.0 }).collect();
    assert_eq!(brute_force(&keys, &q, 0, (seq.len, ps), 1, (n_kv, hd, nh, ps, lp)), vec![3]);
    let bufs = (
        be.upload_u32(&[0, seq.pages.len() as u32]).unwrap(),
        be.upload_u32(&seq.pages).unwrap(),
        be.upload_u32(&[seq.len as u32]).unwrap(),
        be.upload_u32(&[0]).unwrap(),
        be.upload_u32(&[seq.slot]).unwrap(),
        be.upload_u32(&[1]).unwrap(),
        be.upload_f32(DType::F32, q).unwrap(),
    );
    let meta = PagedMeta { page_indptr: &bufs.0, page_table: &bufs.1, kv_len: &bufs.2, ring_table: &bufs.3 };
    let p = PageSelectParams {
        num_seqs: 1,
        n_heads: nh as u32,
        n_kv_heads: 1,
        head_dim: hd as u32,
        page_size: ps as u32,
        logical_page: lp as u32,
        num_pages: cache.shape.num_pages as u32,
        n_ret: 1,
        k_pages: 1,
        sel_stride: 8,
        ..Default::default()
    };
    let store = &mut cache.layers[0];
    let (kv, out) = store.select_view();
    be.page_select(&p, &bufs.6, kv, &meta, &bufs.4, &bufs.5, out).unwrap();
    let at = seq.slot as usize * 8;
    assert_eq!(as_u32(&store.selected)[at], 3);
}

#[test]
fn lambda_mass_matches_brute_force() {
    let mut rng = Rng(common::seed() | 1);
    let be = CpuBackend::new();
    let (n_kv, hd, nh, ps, lp) = (2, 8, 4, 16, 4);
    let (mut cache, mut seq) = one_layer_cache(&be, n_kv, vec![false, false], ps, lp, hd);
    let keys = append(&be, &mut cache, &mut seq, 100, nh, &mut rng);
    let n = 30; // queries at positions 70..100
    let q: Vec<f32> = rng.normal_vec(n * nh * hd, 3.0);
    let (sink, local) = (5usize, 20usize);
    let bufs = (
        be.upload_u32(&[0, seq.pages.len() as u32]).unwrap(),
        be.upload_u32(&seq.pages).unwrap(),
        be.upload_u32(&[seq.len as u32]).unwrap(),
        be.upload_u32(&[0]).unwrap(),
        be.upload_f32(DType::F32, q.clone()).unwrap(),
    );
    let meta = PagedMeta { page_indptr: &bufs.0, page_table: &bufs.1, kv_len: &bufs.2, ring_table: &bufs.3 };
    let p = LambdaMassParams {
        n_tokens: n as u32,
        n_heads: nh as u32,
        n_kv_heads: n_kv as u32,
        head_dim: hd as u32,
        page_size: ps as u32,
        num_pages: cache.shape.num_pages as u32,
        scale: 0.5,
        sink: sink as u32,
        local: local as u32,
        ..Default::default()
    };
    let mut out = CpuBuffer::F32(vec![f32::NAN; n * nh]);
    be.lambda_mass(&p, &bufs.4, cache.layers[0].view(), &meta, &mut out).unwrap();
    let got = as_f32(&out);
    for t in 0..n {
        let pos = 70 + t;
        for h in 0..nh {
            let kvh = h / (nh / n_kv);
            let s: Vec<f64> = (0..=pos)
                .map(|j| {
                    (0..hd)
                        .map(|c| q[(t * nh + h) * hd + c] as f64 * keys[(j * n_kv + kvh) * hd + c] as f64)
                        .sum::<f64>()
                        * 0.5
                })
                .collect();
            let m = s.iter().cloned().fold(f64::MIN, f64::max);
            let z: f64 = s.iter().map(|x| (x - m).exp()).sum();
            let outside: f64 = (sink..pos + 1 - local).map(|j| (s[j] - m).exp()).sum::<f64>() / z;
            assert!((got[t * nh + h] as f64 - outside).abs() < 1e-5, "t {t} h {h}: {} vs {outside}", got[t * nh + h]);
        }
    }
}

/// The recall diagnostic's `Rank::Max`, `HeadNorm`, `MaxSink` and `HeadNormSink` are exactly what
/// `page_select` keeps with `rank` max / head_norm (the probe's scale) and `pin_first` off / on,
/// and `MidSink` / `ShrinkSink` what it keeps with `bound_shrink` 1 / 0.5 and the pin on (so its
/// recall numbers describe the engine's selection; the probe scores in f64, the op in f32); the
/// query heads' scales differ so max and head_norm disagree somewhere, and the shrink changes
/// some selection (both asserted); the oracle bounds every ranking; a budget
/// covering every page recalls all the mass.
#[test]
fn recall_probe_ranks_like_page_select() {
    use lserve::eval::recall::{HeadView, Rank, top_k};
    let mut rng = Rng(common::seed() | 1);
    let be = CpuBackend::new();
    let (mut disagreements, mut shrink_changes) = (0, 0);
    for _ in 0..4 {
        for (ps, lp) in PAGE_SIZES {
            let (hd, nh) = (8, 4);
            let (mut cache, mut seq) = one_layer_cache(&be, 1, vec![false], ps, lp, hd);
            let mut keys = vec![];
            for _ in 0..9 {
                keys.extend(append(&be, &mut cache, &mut seq, ps, nh, &mut rng));
            }
            keys.extend(append(&be, &mut cache, &mut seq, 3, nh, &mut rng));
            // Query head g at scale 0.3 * 3^g: one head's bounds dwarf the others'.
            let q: Vec<f32> = rng
                .normal_vec(nh * hd, 1.0)
                .iter()
                .enumerate()
                .map(|(i, x)| x * 0.3 * 3f32.powi((i / hd) as i32))
                .collect();
            let k = 4;
            let bufs = (
                be.upload_u32(&[0, seq.pages.len() as u32]).unwrap(),
                be.upload_u32(&seq.pages).unwrap(),
                be.upload_u32(&[seq.len as u32]).unwrap(),
                be.upload_u32(&seq.ring).unwrap(),
            );
            let meta = PagedMeta { page_indptr: &bufs.0, page_table: &bufs.1, kv_len: &bufs.2, ring_table: &bufs.3 };
            let p = PageSelectParams {
                num_seqs: 1,
                n_heads: nh as u32,
                n_kv_heads: 1,
                head_dim: hd as u32,
                page_size: ps as u32,
                logical_page: lp as u32,
                num_pages: cache.shape.num_pages as u32,
                n_ret: 1,
                k_pages: k as u32,
                sel_stride: 8,
                ..Default::default()
            };
            let (slot, mask) = (be.upload_u32(&[seq.slot]).unwrap(), be.upload_u32(&[1]).unwrap());
            let qb = be.upload_f32(DType::F32, q.clone()).unwrap();
            let store = &mut cache.layers[0];
            let view = HeadView {
                q: &q,
                keys: &keys,
                head_dim: hd,
                page_size: ps,
                logical_page: lp,
                scale: 0.35,
                shrink: 0.5,
            };
            let mut lists = vec![];
            for (rank, pin, shrink, probe) in [
                (PAGE_RANK_MAX, 0, 0.0, Rank::Max),
                (PAGE_RANK_HEAD_NORM, 0, 0.0, Rank::HeadNorm),
                (PAGE_RANK_MAX, 1, 0.0, Rank::MaxSink),
                (PAGE_RANK_HEAD_NORM, 1, 0.0, Rank::HeadNormSink),
                (PAGE_RANK_MAX, 1, 1.0, Rank::MidSink),
                (PAGE_RANK_MAX, 1, 0.5, Rank::ShrinkSink),
            ] {
                store.selected = CpuBuffer::U32(vec![u32::MAX; as_u32(&store.selected).len()]); // poisoned
                let p = PageSelectParams { rank, pin_first: pin, scale: 0.35, bound_shrink: shrink, ..p };
                let (kv, out) = store.select_view();
                be.page_select(&p, &qb, kv, &meta, &slot, &mask, out).unwrap();
                let base = seq.slot as usize * 8;
                let got: Vec<usize> = as_u32(&store.selected)[base..base + k].iter().map(|&x| x as usize).collect();
                let scores = view.rank_scores(probe, &view.shrunk_bounds(shrink));
                assert_eq!(top_k(&scores, k), got, "{} pages {ps}/{lp}", probe.name());
                lists.push(got);
            }
            disagreements += (lists[0] != lists[1]) as usize;
            shrink_changes += (lists[2] != lists[5]) as usize;
            let (recalls, oracle) = view.recall(k);
            assert!(recalls.iter().all(|&r| r <= oracle + 1e-9 && r > 0.0), "{recalls:?} vs oracle {oracle}");
            let (all, oracle_all) = view.recall(100);
            assert!(all.iter().chain([&oracle_all]).all(|&r| (r - 1.0).abs() < 1e-9), "full budget: {all:?}");
        }
    }
    eprintln!("cases where max and head_norm select differently: {disagreements} of 16");
    assert!(disagreements > 0, "max and head_norm never disagree: head_norm is not exercised");
    eprintln!("cases where bound_shrink 0.5 changes the pinned max selection: {shrink_changes} of 16");
    assert!(shrink_changes > 0, "bound_shrink never changes a selection: it is not exercised");
}

/// `pin_sink_page`: after a selecting decode step every retrieval head of every layer has the
/// sequence's first page among its selected pages (a small budget, random model, so without
/// pinning some heads drop it), the list still holds `k_pages` ascending pages, and with pinning
/// off the same run selects page 0 in fewer heads.
#[test]
fn pinned_sink_page_is_always_selected() {
    let mut rng = Rng(common::seed() | 1);
    let c = lserve::model::config::ModelConfig { max_position_embeddings: 512, ..base_config() };
    let w = random_weights(&c, &mut rng);
    let ids: Vec<u32> = (0..300).map(|_| (rng.next() * c.vocab_size as f64) as u32).collect();
    let mut with_page0 = [0usize; 2];
    for (i, pin) in [false, true].into_iter().enumerate() {
        let mut cfg = sparse_config(16, 4);
        cfg.sparse.token_budget = 48; // 2 selected pages + the newest
        cfg.sparse.pin_sink_page = pin;
        let model = Llama::load(&CpuBackend::new(), &c, &w, |_, _| {}).unwrap();
        let mut e = common::engine(model, 512, cfg, 64);
        let mut seq = e.cache.admit().unwrap();
        e.step(&mut seq, &ids[..256], Logits::None, None).unwrap();
        for t in 256..260 {
            e.step(&mut seq, &ids[t..t + 1], Logits::Last, None).unwrap();
        }
        let k = e.attn.k_pages;
        let page0 = seq.pages[0];
        for l in 0..c.num_layers {
            let n_ret = e.cache.shape.layout.n_ret(l);
            let sel = as_u32(&e.cache.layers[l].selected).to_vec();
            let counts = as_u32(&e.cache.layers[l].counts).to_vec();
            for r in 0..n_ret {
                let ci = seq.slot as usize * n_ret + r;
                let list = &sel[ci * e.cache.shape.sel_stride..][..counts[ci] as usize];
                assert_eq!(list.len(), k);
                assert!(list.windows(2).all(|p| p[0] < p[1]), "ascending: {list:?}");
                // Selected entries are logical page indices of the sequence; page 0 is index 0.
                with_page0[i] += list.contains(&0) as usize;
                if pin {
                    assert!(list.contains(&0), "layer {l} head {r}: {list:?} lacks the sink page ({page0})");
                }
            }
        }
        e.cache.release(&mut seq).unwrap();
    }
    eprintln!("heads selecting page 0: pin off {}, pin on {}", with_page0[0], with_page0[1]);
    assert!(with_page0[0] < with_page0[1], "pinning changed nothing: {with_page0:?}");
}
