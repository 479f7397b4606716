//! `sample` against the CPU reference (`lserve::sampling::sample_row`), instantiated per backend
//! by `parity_tests!` in tests/backend_parity.rs.
//!
//! Random logits (the harness's fresh seed) of vocabularies 7, 1000 and 50_000; every call carries
//! rows of many settings at once (greedy, T 0.7/1.0/1.5, top_k 0/1/40, top_p 1.0/0.9/0.5) over
//! rows of several kinds (plain, peaky, quantized so that the top-k and nucleus boundaries fall
//! inside exact ties, ±0 ties, NaN and -inf entries), plus a row of only NaN/-inf (NO_TOKEN) and
//! one with +inf logits; the output is poisoned first. Float sums differ between backends (the
//! device sums f32 weights in another order), so a device may differ from the CPU exactly at a
//! boundary: each case asks the reference whether it is robust — the same token for u ± 2e-5,
//! top_p · (1 ± 2e-5) and T · (1 ± 1e-6), ten times and more the f32 rounding of the device's
//! sums and weights — and robust cases must be equal, non-robust ones must give a token between
//! the lowest and highest ids those perturbations give, and almost all cases must be robust (the flattest rows, 50_000
//! tokens at T 1.5 without top-k/top-p, have tokens of probability ~1e-4, so some of those are
//! not). A descending-order draw or a tie cut toward higher ids changes most robust cases.

use super::pair;
use lserve::backend::*;
use lserve::sampling::{NO_TOKEN, RowSampling, sample_row};

const SETTINGS: &[(f32, u32, f32)] = &[
    (0.0, 0, 1.0),
    (0.7, 0, 1.0),
    (1.0, 0, 1.0),
    (1.5, 0, 1.0),
    (1.0, 1, 1.0),
    (1.0, 40, 1.0),
    (0.7, 40, 0.9),
    (1.0, 0, 0.9),
    (1.5, 0, 0.5),
    (1.0, 40, 0.5),
    (0.7, 0, 0.5),
    (1.5, 40, 0.9),
];
const ROW_KINDS: usize = 5;
/// Fewest robust cases accepted, as a fraction of all.
const MIN_ROBUST: f64 = 0.85;

/// A row of `n` logits of kind `kind` (see the module docs).
fn make_row(rng: &mut crate::common::naive::Rng, kind: usize, n: usize) -> Vec<f32> {
    let mut x = rng.normal_vec(n, 2.0);
    match kind {
        1 => x.iter_mut().for_each(|v| *v *= 3.0),
        // Few distinct values: ties at the top, at the k-th value and across the nucleus edge.
        2 => x.iter_mut().for_each(|v| *v = (*v * 2.0).round() / 2.0),
        3 => x.iter_mut().for_each(|v| *v = if v.abs() < 0.3 { if *v < 0.0 { -0.0 } else { 0.0 } } else { v.round() }),
        4 => {
            for v in x.iter_mut() {
                let r = rng.next();
                *v = if r < 0.1 {
                    f32::NAN
                } else if r < 0.2 {
                    f32::NEG_INFINITY
                } else {
                    *v
                };
            }
        }
        _ => {}
    }
    x
}

/// The tokens the reference gives for `s`, `u` and their perturbations (the nominal first).
fn reference_tokens(row: &[f32], s: &RowSampling, u: f32) -> Vec<u32> {
    let mut cases = vec![(*s, u), (*s, (u - 2e-5).max(0.0)), (*s, (u + 2e-5).min(0.999_999))];
    if s.top_p < 1.0 {
        for f in [1.0 - 2e-5, 1.0 + 2e-5] {
            cases.push((RowSampling { top_p: (s.top_p * f).min(0.999_999), ..*s }, u));
        }
    }
    if s.temperature > 0.0 {
        for f in [1.0 - 1e-6, 1.0 + 1e-6] {
            cases.push((RowSampling { temperature: s.temperature * f, ..*s }, u));
        }
    }
    cases.iter().map(|(s, u)| sample_row(row, s, *u)).collect()
}

pub fn test_sample<B: Backend>(gpu: &B) {
    let mut t = pair(gpu);
    let (mut cases, mut robust, mut moved) = (0usize, 0usize, 0usize);
    for n in [7usize, 1000, 50_000] {
        let mut rows: Vec<(Vec<f32>, RowSampling)> = vec![];
        for kind in 0..ROW_KINDS {
            for &(temperature, top_k, top_p) in SETTINGS {
                rows.push((make_row(&mut t.rng, kind, n), RowSampling { temperature, top_k, top_p }));
            }
        }
        let mut none = vec![f32::NAN; n];
        none.iter_mut().step_by(2).for_each(|v| *v = f32::NEG_INFINITY);
        rows.push((none, RowSampling { temperature: 1.0, top_k: 0, top_p: 0.9 }));
        let mut inf = make_row(&mut t.rng, 0, n);
        inf[n / 3] = f32::INFINITY;
        inf[n - 1] = f32::INFINITY;
        rows.push((inf, RowSampling { temperature: 1.0, top_k: 40, top_p: 1.0 }));

        let us: Vec<f32> = rows.iter().map(|_| t.rng.next() as f32 * 0.999).collect();
        let logits: Vec<f32> = rows.iter().flat_map(|r| r.0.iter().copied()).collect();
        let words: Vec<u32> = rows.iter().zip(&us).flat_map(|((_, s), &u)| s.words(u)).collect();
        let (x, set) = (t.up(DType::F32, &logits), t.up_u32(&words));
        let mut out = t.up_u32(&vec![0xDEAD_BEEF; rows.len()]);
        let p = SampleParams { rows: rows.len() as u32, n: n as u32, ..Default::default() };
        t.gpu.sample(&p, &x.0, &set.0, &mut out.0).unwrap();
        t.cpu.sample(&p, &x.1, &set.1, &mut out.1).unwrap();
        let got = t.gpu.download_u32(&out.0, 0, rows.len()).unwrap();
        let want = t.cpu.download_u32(&out.1, 0, rows.len()).unwrap();
        for (i, ((row, s), &u)) in rows.iter().zip(&us).enumerate() {
            let refs = reference_tokens(row, s, u);
            assert_eq!(want[i], refs[0], "the CPU op is sample_row");
            let what = format!("sample n={n} row {i} {s:?} u={u}: got {}, reference {refs:?}", got[i]);
            cases += 1;
            if refs.iter().all(|&r| r == refs[0]) {
                robust += 1;
                assert_eq!(got[i], refs[0], "{what}");
            } else {
                // The id-order draw is monotone in u, so a token drawn from inside the perturbed
                // window lies between the ids the perturbations give.
                let (lo, hi) = (refs.iter().min().unwrap(), refs.iter().max().unwrap());
                assert!((lo..=hi).contains(&&got[i]), "{what}");
                moved += (got[i] != refs[0]) as usize;
            }
        }
        assert_eq!(got[rows.len() - 2], NO_TOKEN, "a row without numbers");
        assert!([n as u32 / 3, n as u32 - 1].contains(&got[rows.len() - 1]), "+inf rows take all the mass");
        // Greedy rows are the argmax of the row.
        for (i, (row, s)) in rows.iter().enumerate().filter(|(_, r)| r.1.temperature == 0.0) {
            assert_eq!(got[i], lserve::sampling::argmax(row), "greedy row {i} ({s:?})");
        }
    }
    let frac = robust as f64 / cases as f64;
    eprintln!("sample: {robust} of {cases} cases robust ({:.1}%), {moved} boundary cases moved", 100.0 * frac);
    assert!(frac >= MIN_ROBUST, "only {robust} of {cases} cases are robust");
}
