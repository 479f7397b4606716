//! `lserve accuracy` (the accuracy suite, `lserve::eval::accuracy`) and `lserve recall` (the
//! selection-recall diagnostic, `lserve::eval::recall`).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use lserve::backend::Backend;
use lserve::engine::{Engine, EngineOptions, build_engine};
use lserve::eval::accuracy::{Budget, SuiteOptions, draw_charts, grid, parse_pages, run_suite, table_markdown};
use lserve::eval::block_recall::{BlockRecall, measure_blocks};
use lserve::eval::niah::parse_lengths;
use lserve::eval::recall::{LayerRecall, Rank, measure};
use lserve::eval::tasks::{Task, ppl_window};
use lserve::loader::LoadedModel;
use lserve::model::weights::LoadOptions;
use lserve::sparse::Config;

use super::run::{load_options, load_weights, on_device, open_model, parse_device, resolve_config};
use super::{AccuracyArgs, RecallArgs};

/// The default ppl corpus: Debian's license texts (natural English prose, ~50K tokens), in this
/// order; files that are missing are skipped.
const CORPUS: &[&str] = &[
    "GPL-3",
    "GPL-2",
    "LGPL-2.1",
    "GFDL-1.3",
    "MPL-2.0",
    "Apache-2.0",
    "Artistic",
    "CC0-1.0",
    "LGPL-3",
    "MPL-1.1",
    "GFDL-1.2",
    "GPL-1",
    "LGPL-2",
];

fn corpus_text(files: &[PathBuf]) -> Result<String> {
    let paths: Vec<PathBuf> = if files.is_empty() {
        CORPUS.iter().map(|f| Path::new("/usr/share/common-licenses").join(f)).filter(|p| p.exists()).collect()
    } else {
        files.to_vec()
    };
    let mut text = String::new();
    for p in &paths {
        text += &std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        text += "\n\n";
    }
    Ok(text)
}

fn corpus_ids(m: &LoadedModel, files: &[PathBuf]) -> Result<Vec<u32>> {
    let text = corpus_text(files)?;
    if text.trim().is_empty() {
        bail!("no ppl corpus: pass --text FILE (the default reads /usr/share/common-licenses)");
    }
    m.tokenizer.encode_with(&text, false).map_err(|e| anyhow::anyhow!("tokenizing the corpus: {}", e.0))
}

pub fn accuracy(a: AccuracyArgs) -> Result<()> {
    let device = parse_device(&a.model.device)?;
    let dtype = load_options(&a.model)?;
    let m = open_model(&a.model)?;
    let lengths = parse_lengths("--lengths", &a.lengths)?;
    fits_context(&lengths, m.config.context_len())?;
    at_least_one(&[("--samples", a.samples), ("--score-tokens", a.score_tokens)])?;
    let tasks = Task::parse_list(&a.tasks)?;
    let ratios: Vec<f32> = a
        .ratios
        .split(',')
        .map(|r| r.trim().parse::<f32>().ok().filter(|r| (0.0..=1.0).contains(r)))
        .collect::<Option<_>>()
        .context("--ratios: fractions between 0 and 1, like 0,0.25,0.5")?;
    let pages = parse_pages(&a.pages)?;
    let mut variants = grid(&Budget::parse_list(&a.budgets)?, &ratios, &pages, pages[0]);
    let mut base = resolve_config(None, &a.tuning)?;
    let logical = base.sparse.select_unit == lserve::sparse::SelectUnit::Logical;
    variants.iter_mut().for_each(|v| v.logical_units = logical);
    if ratios.iter().any(|&r| r > 0.0) && base.sparse.head_pattern.is_none() {
        // The model's shipped pattern (found by identity, as `--sparse on` finds it), else none.
        match lserve::sparse::pattern::shipped_pattern(&m.identity()) {
            Some((_, p)) => base.sparse.pattern = Some(p),
            None => bail!(
                "streaming ratios above 0 need --head-pattern: no head pattern ships for this model (run `lserve calibrate`)"
            ),
        }
    }
    let corpus = if tasks.contains(&Task::Ppl) { corpus_ids(&m, &a.text)? } else { vec![] };
    let o = SuiteOptions {
        tasks,
        lengths,
        samples: a.samples,
        variants,
        base,
        score_tokens: a.score_tokens,
        seed: a.seed,
        prefill_chunk: a.prefill_chunk.max(16),
    };
    std::fs::create_dir_all(&a.out_dir).with_context(|| format!("creating {}", a.out_dir.display()))?;
    eprintln!(
        "{} variants x {} lengths x {} tasks x {} samples",
        o.variants.len(),
        o.lengths.len(),
        o.tasks.len(),
        o.samples
    );
    let rows = on_device!(device, be => suite_on(be, &m, dtype, &corpus, &o))?;
    let json = serde_json::json!({"model": m.path.display().to_string(), "seed": a.seed, "rows": rows});
    let jpath = a.out_dir.join("accuracy.json");
    std::fs::write(&jpath, serde_json::to_string_pretty(&json)?)
        .with_context(|| format!("writing {}", jpath.display()))?;
    let table = table_markdown(&rows);
    std::fs::write(a.out_dir.join("accuracy.md"), &table)?;
    let charts = draw_charts(&a.out_dir, &rows)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{table}")?;
    for (i, v) in o.variants.iter().skip(1).enumerate() {
        writeln!(out, "v{}: {}", i + 1, v.label())?;
    }
    writeln!(out, "wrote {}, accuracy.md and {} chart(s) in {}", jpath.display(), charts.len(), a.out_dir.display())?;
    Ok(())
}

fn suite_on<B: Backend>(
    be: B,
    m: &LoadedModel,
    dtype: LoadOptions,
    corpus: &[u32],
    o: &SuiteOptions,
) -> Result<Vec<lserve::eval::accuracy::Row>> {
    let model = load_weights(&be, m, dtype)?;
    let t0 = std::time::Instant::now();
    let mut log = |r: &lserve::eval::accuracy::Row| {
        eprintln!(
            "[{:>6.0}s] {:>13} {:>6} {:<24} {:>9.4}  kv read {:>5.1}%",
            t0.elapsed().as_secs_f64(),
            r.task.name(),
            r.length,
            r.label,
            r.score,
            100.0 * r.kv_read_fraction
        )
    };
    let (rows, _, _) = run_suite(be, model, &m.tokenizer, corpus, o, &mut log)?;
    Ok(rows)
}

/// Every length must fit the model's context: a sample is at most `length` tokens, prompt and
/// answer together.
fn fits_context(lengths: &[usize], ctx: usize) -> Result<()> {
    match lengths.iter().find(|&&l| l > ctx) {
        Some(l) => bail!("--lengths: {l} tokens do not fit the model's {ctx}-token context"),
        None => Ok(()),
    }
}

pub fn recall(a: RecallArgs) -> Result<()> {
    let device = parse_device(&a.model.device)?;
    let dtype = load_options(&a.model)?;
    let m = open_model(&a.model)?;
    let lengths = parse_lengths("--lengths", &a.lengths)?;
    fits_context(&lengths, m.config.context_len())?;
    at_least_one(&[("--steps", a.steps), ("--every", a.every)])?;
    let pages = parse_pages(&a.pages)?;
    let budgets = Budget::parse_list(&a.budgets)?;
    let corpus = corpus_ids(&m, &a.text)?;
    let probe = Probe { m: &m, dtype, corpus: &corpus, a: &a, lengths: &lengths, pages: &pages, budgets: &budgets };
    if let Some(n) = a.prefill_blocks {
        at_least_one(&[("--prefill-blocks", n)])?;
        let rows = on_device!(device, be => block_recall_on(be, &probe, n))?;
        return print_block_recall(&rows, a.out.as_deref());
    }
    let rows = on_device!(device, be => recall_on(be, &probe))?;
    let mut out = std::io::stdout().lock();
    let names: Vec<&str> = Rank::ALL.iter().map(|r| r.name()).collect();
    writeln!(
        out,
        "{:>6} {:>6} {:>7} {:>5} {:>7}{} {:>7}",
        "length",
        "budget",
        "pages",
        "layer",
        "samples",
        names.iter().map(|n| format!(" {n:>10}")).collect::<String>(),
        "oracle"
    )?;
    for (len, budget, (p, l), layers) in &rows {
        for r in layers {
            let cells: String = r.recall.iter().map(|x| format!(" {x:>10.4}")).collect();
            writeln!(
                out,
                "{len:>6} {budget:>6} {:>7} {:>5} {:>7}{cells} {:>7.4}",
                format!("{p}/{l}"),
                r.layer,
                r.samples,
                r.oracle
            )?;
        }
    }
    write_rows_json(&mut out, a.out.as_deref(), "budget", &rows)
}

/// `--out`: the rows (length, budget, pages, per-layer results) as JSON, the budget under `key`.
fn write_rows_json<T: serde::Serialize>(
    out: &mut impl Write,
    path: Option<&Path>,
    key: &str,
    rows: &[ProbeRow<T>],
) -> Result<()> {
    let Some(path) = path else { return Ok(()) };
    let json: Vec<_> = rows
        .iter()
        .map(|(len, b, (p, l), layers)| serde_json::json!({"length": len, key: b, "pages": format!("{p}/{l}"), "layers": layers}))
        .collect();
    std::fs::write(path, serde_json::to_string_pretty(&json)?)
        .with_context(|| format!("writing {}", path.display()))?;
    writeln!(out, "wrote {}", path.display())?;
    Ok(())
}

/// A probe's row: length, budget, pages, per-layer results.
type ProbeRow<T> = (usize, usize, (usize, usize), Vec<T>);
type RecallRow = ProbeRow<LayerRecall>;
type BlockRow = ProbeRow<BlockRecall>;

/// What `lserve recall` measures over: the model, its windows and the grid.
struct Probe<'a> {
    m: &'a LoadedModel,
    dtype: LoadOptions,
    corpus: &'a [u32],
    a: &'a RecallArgs,
    lengths: &'a [usize],
    pages: &'a [(usize, usize)],
    budgets: &'a [Budget],
}

/// The probes' engine: pages `p/l`, page selection alone (no streaming heads, no dense layers)
/// with a decode budget of `budget` tokens.
fn probe_config(base: &Config, (p, l): (usize, usize), budget: usize) -> Config {
    let mut c = base.clone();
    (c.cache.physical_page, c.cache.logical_page) = (p, l);
    c.sparse.enabled = true;
    c.sparse.streaming_ratio = 0.0;
    c.sparse.dense_below = 0;
    c.sparse.token_budget = budget;
    c
}

/// Build one probe engine per (length, pages, decode budget from `budgets(len, p)`) in turn
/// ([`probe_config`]) and hand it the length's window to `run`.
fn probe_engines<B: Backend>(
    be: B,
    pr: &Probe,
    budgets: impl Fn(usize, usize) -> Vec<usize>,
    mut run: impl FnMut(&mut Engine<B>, &[u32], usize, (usize, usize)) -> Result<()>,
) -> Result<()> {
    let m = pr.m;
    let model = load_weights(&be, m, pr.dtype)?;
    let mut parts = Some((be, model));
    let base = resolve_config(None, &pr.a.tuning)?;
    let bos = m.tokenizer.bos_token().map(|(id, _)| id).filter(|_| m.tokenizer.add_bos());
    for &len in pr.lengths {
        let ids = ppl_window(pr.corpus, bos, len, 0)?;
        for &(p, l) in pr.pages {
            for budget in budgets(len, p) {
                let (be, model) = parts.take().expect("returned after each run");
                let mut e = build_engine(be, model, &EngineOptions::new(probe_config(&base, (p, l), budget), len))?;
                let r = run(&mut e, &ids, len, (p, l));
                parts = Some((e.backend, e.model));
                r?;
            }
        }
    }
    Ok(())
}

fn recall_on<B: Backend>(be: B, pr: &Probe) -> Result<Vec<RecallRow>> {
    let mut rows = vec![];
    let per_engine = |len: usize, p: usize| pr.budgets.iter().map(|b| b.tokens(len).max(p)).collect();
    probe_engines(be, pr, per_engine, |e, ids, len, (p, l)| {
        let layers = measure(e, ids, pr.a.steps, pr.a.every)?;
        let budget = (e.attn.k_pages + 1) * e.attn.unit(p);
        eprintln!("{len} tokens, pages {p}/{l}, budget {budget}: {} layers measured", layers.len());
        rows.push((len, budget, (p, l), layers));
        Ok(())
    })?;
    Ok(rows)
}

/// `lserve recall --prefill-blocks N`: every page selected (dense rows), each budget's k pages
/// chosen per block by each estimator.
fn block_recall_on<B: Backend>(be: B, pr: &Probe, blocks: usize) -> Result<Vec<BlockRow>> {
    let mut rows = vec![];
    let every_page = |len: usize, p: usize| vec![len.next_multiple_of(p) + p];
    probe_engines(be, pr, every_page, |e, ids, len, (p, l)| {
        let ks: Vec<usize> = pr.budgets.iter().map(|b| (b.tokens(len) / p).max(1)).collect();
        for (k, layers) in ks.iter().zip(measure_blocks(e, ids, blocks, &ks)?) {
            eprintln!("{len} tokens, pages {p}/{l}, prefill budget {}: {} layers measured", k * p, layers.len());
            rows.push((len, k * p, (p, l), layers));
        }
        Ok(())
    })?;
    Ok(rows)
}

fn print_block_recall(rows: &[BlockRow], out_path: Option<&Path>) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{:>6} {:>6} {:>7} {:>5} {:>7} {:>10} {:>12} {:>7} {:>7}",
        "length", "budget", "pages", "layer", "samples", "mean_bound", "antidiagonal", "oracle", "fixed"
    )?;
    for (len, budget, (p, l), layers) in rows {
        for r in layers {
            writeln!(
                out,
                "{len:>6} {budget:>6} {:>7} {:>5} {:>7} {:>10.4} {:>12.4} {:>7.4} {:>7.4}",
                format!("{p}/{l}"),
                r.layer,
                r.samples,
                r.recall[0],
                r.recall[1],
                r.oracle,
                r.fixed
            )?;
        }
    }
    write_rows_json(&mut out, out_path, "prefill_budget", rows)
}

/// Each (flag, value) must be at least 1 (a count of samples, tokens or steps).
fn at_least_one(flags: &[(&str, usize)]) -> Result<()> {
    match flags.iter().find(|(_, v)| *v == 0) {
        Some((flag, _)) => bail!("{flag} must be at least 1"),
        None => Ok(()),
    }
}
