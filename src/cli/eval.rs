//! `lserve calibrate` and `lserve niah`.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result, bail};
use lserve::backend::Backend;
use lserve::bench::BenchRow;
use lserve::bench::plot::CompareRow;
use lserve::engine::{EngineOptions, build_engine};
use lserve::eval::calibrate::{CalibrateOptions, calibrate as run_calibration};
use lserve::eval::charts::niah_heatmap;
use lserve::eval::niah::{ANSWER_TOKENS, NiahCell, cell_prompt, parse_depths, parse_lengths, run_cell};
use lserve::loader::LoadedModel;
use lserve::model::llama::Llama;
use lserve::model::weights::LoadOptions;
use lserve::sparse::Config;

use super::run::{
    load_options, load_weights, on_device, open_model, parse_device, parse_weight_dtype, resolve_config,
    resolve_pattern,
};
use super::{BenchArgs, CalibrateArgs, NiahArgs, NiahMode, OnOff};

pub fn calibrate(a: CalibrateArgs) -> Result<()> {
    let device = parse_device(&a.model.device)?;
    let dtype = load_options(&a.model)?;
    let m = open_model(&a.model)?;
    let length = a.length.unwrap_or(4096).min(m.config.context_len());
    if a.docs == 0 {
        bail!("--docs must be at least 1");
    }
    on_device!(device, be => calibrate_on(be, &a, &m, dtype, length))
}

fn calibrate_on<B: Backend>(
    be: B,
    a: &CalibrateArgs,
    m: &LoadedModel,
    dtype: LoadOptions,
    length: usize,
) -> Result<()> {
    let model = load_weights(&be, m, dtype)?;
    let mut engine = build_engine(be, model, &EngineOptions::new(Config::default(), length))?;
    let opts = CalibrateOptions { docs: a.docs, length, sink: a.sink, local: a.local, seed: a.seed };
    eprintln!("calibrating on {} passkey documents of {} tokens (sink {}, local {})", a.docs, length, a.sink, a.local);
    let mut pattern = run_calibration(&mut engine, &m.tokenizer, &opts)?;
    pattern.model = m.path.display().to_string();
    std::fs::write(&a.out, pattern.to_toml()).with_context(|| format!("writing {}", a.out.display()))?;
    for (l, row) in pattern.scores.iter().enumerate() {
        let cells: Vec<String> = row.iter().map(|s| format!("{s:.3}")).collect();
        println!("layer {l:>3}: {}", cells.join(" "));
    }
    println!("wrote {}", a.out.display());
    Ok(())
}

pub fn niah(a: NiahArgs) -> Result<()> {
    let device = parse_device(&a.model.device)?;
    let dtype = load_options(&a.model)?;
    let m = open_model(&a.model)?;
    let ctx = m.config.context_len();
    let mut lengths = parse_lengths("--lengths", &a.lengths)?;
    lengths.iter_mut().for_each(|l| *l = (*l).min(ctx.saturating_sub(ANSWER_TOKENS)));
    lengths.dedup();
    let depths = parse_depths(&a.depths)?;
    let modes: Vec<OnOff> = match a.sparse {
        NiahMode::On => vec![OnOff::On],
        NiahMode::Off => vec![OnOff::Off],
        NiahMode::Both => vec![OnOff::Off, OnOff::On],
    };
    let mut configs = modes.iter().map(|&mode| resolve_config(Some(mode), &a.tuning)).collect::<Result<Vec<_>>>()?;
    configs.iter_mut().for_each(|c| resolve_pattern(c, &m));
    std::fs::create_dir_all(&a.out_dir).with_context(|| format!("creating {}", a.out_dir.display()))?;
    let max_len = *lengths.iter().max().unwrap_or(&1) + ANSWER_TOKENS;
    let grid = Grid { lengths, depths, modes, configs, max_len };
    let cells = on_device!(device, be => niah_on(be, &a, &m, dtype, &grid))?;
    let sparse = grid.modes.iter().position(|&mode| mode == OnOff::On).map(|i| &grid.configs[i]);
    let name = m.path.file_name().map_or_else(|| m.path.display().to_string(), |f| f.to_string_lossy().into_owned());
    report(&a, &grid.lengths, &grid.depths, &cells)?;
    let ppath = a.out_dir.join("heatmap.png");
    lserve::plot::heatmap(&niah_heatmap(&name, &cells, &grid.lengths, &grid.depths, sparse), &ppath)?;
    println!("wrote {}", ppath.display());
    Ok(())
}

struct Grid {
    lengths: Vec<usize>,
    depths: Vec<u32>,
    modes: Vec<OnOff>,
    configs: Vec<Config>,
    max_len: usize,
}

fn niah_on<B: Backend>(be: B, a: &NiahArgs, m: &LoadedModel, dtype: LoadOptions, g: &Grid) -> Result<Vec<NiahCell>> {
    let (lengths, depths, max_len) = (&g.lengths, &g.depths, g.max_len);
    let mut parts = Some((be, None));
    let mut cells: Vec<NiahCell> = vec![];
    let stop_ids = m.stop_ids();
    for (mode, config) in g.modes.iter().zip(g.configs.clone()) {
        let name = if *mode == OnOff::On { "sparse" } else { "dense" };
        let (be, weights): (B, Option<Llama<B>>) = parts.take().expect("backend returned after each mode");
        let weights = match weights {
            Some(w) => w,
            None => load_weights(&be, m, dtype)?,
        };
        let mut engine = build_engine(be, weights, &EngineOptions::new(config, max_len))?;
        for &length in lengths {
            for &depth in depths {
                let (prompt, number) = cell_prompt(&m.tokenizer, &m.template, length, depth, a.seed)?;
                let prompt_tokens = prompt.len();
                let (answer, correct, frac) = run_cell(&mut engine, &m.tokenizer, &stop_ids, prompt, &number)?;
                eprintln!(
                    "{name:>6} {length:>6} tokens, depth {depth:>3}%: {} ({answer:?})",
                    if correct { "ok" } else { "miss" }
                );
                cells.push(NiahCell {
                    mode: name.into(),
                    length,
                    depth,
                    prompt_tokens,
                    needle: number,
                    answer,
                    correct,
                    kv_read_fraction: frac,
                });
            }
        }
        parts = Some((engine.backend, Some(engine.model)));
    }
    Ok(cells)
}

fn report(a: &NiahArgs, lengths: &[usize], depths: &[u32], cells: &[NiahCell]) -> Result<()> {
    let modes: Vec<&str> = ["dense", "sparse"].into_iter().filter(|m| cells.iter().any(|c| c.mode == *m)).collect();
    let find = |mode: &str, l: usize, d: u32| cells.iter().find(|c| c.mode == mode && c.length == l && c.depth == d);
    let mut out = std::io::stdout().lock();
    write!(out, "{:>8}", "length")?;
    for d in depths {
        write!(out, " {:>9}", format!("{d}%"))?;
    }
    writeln!(out, "   ({})", modes.join(" / "))?;
    for &l in lengths {
        write!(out, "{l:>8}")?;
        for &d in depths {
            let marks: Vec<&str> = modes
                .iter()
                .map(|m| match find(m, l, d) {
                    Some(c) if c.correct => "ok",
                    Some(_) => "--",
                    None => "..",
                })
                .collect();
            write!(out, " {:>9}", marks.join("/"))?;
        }
        writeln!(out)?;
    }
    for m in &modes {
        let (ok, n) = cells.iter().filter(|c| c.mode == *m).fold((0, 0), |(o, n), c| (o + c.correct as usize, n + 1));
        writeln!(out, "{m}: {ok}/{n} retrieved ({:.1}%)", 100.0 * ok as f64 / n.max(1) as f64)?;
    }
    let json = serde_json::json!({"lengths": lengths, "depths": depths, "seed": a.seed, "cells": cells});
    let jpath = a.out_dir.join("results.json");
    std::fs::write(&jpath, serde_json::to_string_pretty(&json)?)
        .with_context(|| format!("writing {}", jpath.display()))?;
    writeln!(out, "wrote {}", jpath.display())?;
    Ok(())
}

/// `lserve bench`. Long (about 85 lines): the plot-only shortcut, then the flags checked, the
/// sweep run and its CSV and charts written, in that order; the values flow straight through.
pub fn bench(a: BenchArgs) -> Result<()> {
    let compare = match &a.compare {
        Some(p) => lserve::bench::plot::read_compare(p)?,
        None => vec![],
    };
    let exts: Vec<&str> = a.plot_format.iter().map(|f| f.ext()).collect();
    if let (false, Some(dir)) = (a.plot_only.is_empty(), &a.out_dir) {
        let mut rows = vec![];
        for p in &a.plot_only {
            rows.extend(lserve::bench::plot::read_bench_csv(p)?);
        }
        return write_charts(dir, &exts, &rows, &compare);
    }
    let device = parse_device(&a.device)?;
    let dtype = parse_weight_dtype(&a.dtype)?;
    let mut config = resolve_config(None, &a.tuning)?;
    // The bench uses its own synthetic head layout: a named pattern (a real model's) is not read.
    config.sparse.streaming_ratio = 0.0;
    config.sparse.head_pattern = None;
    if a.prefill_chunk == 0 {
        bail!("--prefill-chunk must be at least 1");
    }
    let o = lserve::bench::BenchOptions {
        contexts: parse_lengths("--contexts", &a.contexts)?,
        batches: parse_lengths("--batch", &a.batch)?,
        sparse: match a.sparse {
            NiahMode::On => vec![true],
            NiahMode::Off => vec![false],
            NiahMode::Both => vec![false, true],
        },
        config,
        // Sparse mode streams this fraction of KV heads (a synthetic pattern: every other head).
        streaming_ratio: a.tuning.streaming_ratio.unwrap_or(0.5),
        warmup: a.warmup,
        warmup_ms: a.warmup_ms,
        repeats: a.repeats.max(1),
        prefill_tokens: a.prefill,
        prefill_chunk: a.prefill_chunk,
        bandwidth_gbs: a.bandwidth_gbs,
        dtype,
        seed: 7,
        profile: a.profile,
        head: a.head,
    };
    println!(
        "{:>8} {:>7} {:>8} {:>5} {:>5} {:>8} {:>10} {:>9} {:>10} {:>9} {:>7} {:>11} {:>10}",
        "backend",
        "mode",
        "context",
        "batch",
        "kv",
        "kv B/tok",
        "ms/step",
        "mean ms",
        "floor ms",
        "of floor",
        "kv read",
        "prefill ms",
        "prefill t/s"
    );
    let log = |r: &BenchRow| {
        let pct = if r.decode_ms > 0.0 { 100.0 * r.floor_ms / r.decode_ms } else { 0.0 };
        println!(
            "{:>8} {:>7} {:>8} {:>5} {:>5} {:>8} {:>10.3} {:>9.3} {:>10.3} {:>8.1}% {:>6.1}% {:>11} {:>10}",
            r.backend,
            r.mode,
            r.context,
            r.batch,
            r.kv_dtype,
            r.kv_bytes_per_token,
            r.decode_ms,
            r.decode_ms_mean,
            r.floor_ms,
            pct,
            100.0 * r.kv_read_fraction,
            r.prefill_ms.map_or(String::new(), |m| format!("{m:.1}")),
            // Prefill tokens per second (the prompt's tokens over its wall time).
            r.prefill_ms
                .filter(|&m| m > 0.0)
                .map_or(String::new(), |m| format!("{:.0}", r.prefill_tokens as f64 * 1e3 / m))
        );
        if let Some(m) = r.device_memory {
            let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
            println!(
                "{:>18} device memory: buffers {:.1} MiB, reserved {:.1} MiB",
                "",
                mib(m.buffers),
                mib(m.reserved)
            );
        }
        // The hot kernels, and the tensor-parallel collectives wherever they rank.
        let shown = r.kernels.iter().enumerate().filter(|(i, k)| *i < 8 || k.0.starts_with("all_"));
        for (_, (op, calls, us)) in shown {
            println!("{:>18} {:>42} {:>6.0} calls {:>10.1} us/step", "", op, calls, us);
        }
    };
    let rows = super::tp::on_ranks!(device, &a.tp, ranks => lserve::bench::run_tp(ranks.backends, ranks.comms, &a.shape, &o, log))?;
    if let Some(dir) = &a.out_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::write(dir.join("bench.json"), serde_json::to_string_pretty(&rows)?)?;
        std::fs::write(dir.join("bench.csv"), lserve::bench::plot::to_csv(&rows))?;
        println!("wrote {}/bench.json and bench.csv", dir.display());
        write_charts(dir, &exts, &rows, &compare)?;
    }
    Ok(())
}

fn write_charts(dir: &Path, exts: &[&str], rows: &[BenchRow], compare: &[CompareRow]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for path in lserve::bench::plot::write_plots(dir, exts, rows, compare)? {
        println!("wrote {}", path.display());
    }
    Ok(())
}
