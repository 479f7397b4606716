//! `lserve accuracy`: the accuracy suite — every task of `eval::tasks` at every context length,
//! dense against sparse attention over a grid of token budgets (fixed, and LServe's policy
//! `min(4096, context / 32)`), streaming ratios and page geometries (physical/logical).
//!
//! One engine per (length, variant): the model's weights move from engine to engine, so a sweep
//! loads them once. Sparse variants set `dense_below = 0` so selection engages at every length
//! (else a context at or below the budget would be attended densely and exactly), keep the
//! configured sink/local/selector interval, and take their streaming heads from the head pattern
//! (needed for ratios above 0). Results are rows; [`table_markdown`] and [`draw_charts`] render
//! them (the charts through one function, so the drawing code can change in one place).

use std::path::Path;

use serde::Serialize;

use super::tasks::{Sample, Task, make_sample, ppl_window, score_answer};
use crate::backend::Backend;
use crate::engine::{Engine, EngineOptions, GenerateRequest, KvReads, build_engine};
use crate::error::{Error, Result};
use crate::model::llama::{Llama, Logits};
use crate::plot::{self, CellFormat, HeatmapData, HeatmapPanel};
use crate::sampling::{SamplingParams, log_prob};
use crate::sparse::Config;
use crate::tokenizer::TextTokenizer;

/// A budget: fixed tokens, or LServe's policy `min(4096, context / 32)`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum Budget {
    Fixed(usize),
    Policy,
}

impl Budget {
    pub fn tokens(self, context: usize) -> usize {
        match self {
            Budget::Fixed(t) => t,
            Budget::Policy => (context / 32).min(4096),
        }
    }
    /// "1024,2048,4096,policy".
    pub fn parse_list(s: &str) -> Result<Vec<Budget>> {
        s.split(',')
            .map(|t| match t.trim() {
                "policy" => Ok(Budget::Policy),
                n => n.parse().ok().filter(|&b: &usize| b > 0).map(Budget::Fixed).ok_or_else(|| {
                    Error::InvalidArgument(format!("--budgets: `{n}` is not a token count or `policy`"))
                }),
            })
            .collect()
    }
    pub fn label(self) -> String {
        match self {
            Budget::Fixed(t) => t.to_string(),
            Budget::Policy => "L/32".into(),
        }
    }
}

/// One attention configuration of the sweep; `budget: None` is dense.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Variant {
    pub budget: Option<Budget>,
    pub streaming_ratio: f32,
    pub physical_page: usize,
    pub logical_page: usize,
    /// Decode selects logical pages (`select_unit = "logical"`, from the base config); labelled
    /// where that differs from physical pages.
    pub logical_units: bool,
}

impl Variant {
    pub fn label(&self) -> String {
        match self.budget {
            None => "dense".into(),
            Some(b) => {
                let unit = if self.logical_units && self.physical_page != self.logical_page { " logical" } else { "" };
                format!("b{} s{} p{}/{}{unit}", b.label(), self.streaming_ratio, self.physical_page, self.logical_page)
            }
        }
    }

    /// The full config of this variant at `context` tokens, from `base` (sink, local, interval,
    /// head pattern, dense layers).
    pub fn config(&self, base: &Config, context: usize) -> Config {
        let mut c = base.clone();
        c.cache.physical_page = self.physical_page;
        c.cache.logical_page = self.logical_page;
        match self.budget {
            None => c.sparse.enabled = false,
            Some(b) => {
                c.sparse.enabled = true;
                c.sparse.token_budget = b.tokens(context).max(self.physical_page);
                c.sparse.streaming_ratio = self.streaming_ratio;
                c.sparse.dense_below = 0;
            }
        }
        c
    }
}

/// The cross product budgets x ratios x pages, after one dense variant.
pub fn grid(budgets: &[Budget], ratios: &[f32], pages: &[(usize, usize)], dense_pages: (usize, usize)) -> Vec<Variant> {
    let mut v =
        vec![Variant { budget: None, physical_page: dense_pages.0, logical_page: dense_pages.1, ..Variant::default() }];
    for &b in budgets {
        for &r in ratios {
            for &(p, l) in pages {
                v.push(Variant {
                    budget: Some(b),
                    streaming_ratio: r,
                    physical_page: p,
                    logical_page: l,
                    ..Variant::default()
                });
            }
        }
    }
    v
}

/// "16/16,64/16,64/64".
pub fn parse_pages(s: &str) -> Result<Vec<(usize, usize)>> {
    s.split(',')
        .map(|t| {
            let (p, l) = t.trim().split_once('/').unwrap_or((t.trim(), t.trim()));
            match (p.parse::<usize>(), l.parse::<usize>()) {
                (Ok(p), Ok(l)) if l > 0 && p % l == 0 => Ok((p, l)),
                _ => Err(Error::InvalidArgument(format!("--pages: `{t}` is not physical/logical like 64/16"))),
            }
        })
        .collect()
}

#[derive(Clone, Debug)]
pub struct SuiteOptions {
    pub tasks: Vec<Task>,
    pub lengths: Vec<usize>,
    pub samples: usize,
    pub variants: Vec<Variant>,
    pub base: Config,
    /// Tokens of each ppl window scored by decode steps.
    pub score_tokens: usize,
    pub seed: u64,
    pub prefill_chunk: usize,
}

/// One (task, length, variant) cell: the mean over its samples.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub task: Task,
    pub length: usize,
    pub variant: Variant,
    pub label: String,
    pub budget_tokens: Option<usize>,
    pub samples: usize,
    /// Mean NLL (ppl) or points 0..=100 (the other tasks).
    pub score: f64,
    pub per_sample: Vec<f64>,
    pub kv_read_fraction: f64,
}

/// Run the sweep. `corpus` (token ids, no BOS) feeds the ppl task; `on_row` sees each row as it
/// completes. The engine's backend and weights come back in the result.
pub fn run_suite<B: Backend>(
    be: B,
    model: Llama<B>,
    tok: &TextTokenizer,
    corpus: &[u32],
    o: &SuiteOptions,
    on_row: &mut dyn FnMut(&Row),
) -> Result<(Vec<Row>, B, Llama<B>)> {
    let mut parts = Some((be, model));
    let mut rows = vec![];
    for &length in &o.lengths {
        let samples = build_samples(tok, corpus, o, length)?;
        for v in &o.variants {
            let (be, model) = parts.take().expect("returned after each variant");
            // A ppl window is `length` tokens; a task's prompt is `length - answer` tokens and its
            // answer the rest, so `length` tokens hold every sample (32K fits a 32K model).
            let mut opts = EngineOptions::new(v.config(&o.base, length), length.max(1));
            opts.prefill_chunk = o.prefill_chunk;
            let mut e = build_engine(be, model, &opts)?;
            let result = run_variant(&mut e, tok, o, length, v, &samples, on_row);
            parts = Some((e.backend, e.model));
            rows.extend(result?);
        }
    }
    let (be, model) = parts.expect("returned");
    Ok((rows, be, model))
}

fn build_samples(
    tok: &TextTokenizer,
    corpus: &[u32],
    o: &SuiteOptions,
    length: usize,
) -> Result<Vec<(Task, Vec<Sample>)>> {
    let bos = tok.bos_token().map(|(id, _)| id).filter(|_| tok.add_bos());
    o.tasks
        .iter()
        .map(|&t| {
            let s = (0..o.samples)
                .map(|i| match t {
                    Task::Ppl => Ok(Sample { prompt: ppl_window(corpus, bos, length, i)?, expect: vec![] }),
                    _ => match length.checked_sub(t.answer_tokens()) {
                        Some(prompt) => make_sample(tok, t, prompt, i, o.seed),
                        None => Err(Error::InvalidArgument(format!("length {length} is too short for {}", t.name()))),
                    },
                })
                .collect::<Result<Vec<_>>>()?;
            Ok((t, s))
        })
        .collect()
}

fn run_variant<B: Backend>(
    e: &mut Engine<B>,
    tok: &TextTokenizer,
    o: &SuiteOptions,
    length: usize,
    v: &Variant,
    samples: &[(Task, Vec<Sample>)],
    on_row: &mut dyn FnMut(&Row),
) -> Result<Vec<Row>> {
    let mut rows = vec![];
    for (task, list) in samples {
        let (mut scores, mut reads) = (vec![], KvReads::default());
        for s in list {
            let (score, r) = match task {
                Task::Ppl => ppl_sample(e, &s.prompt, o.score_tokens)?,
                _ => gen_sample(e, tok, *task, s)?,
            };
            scores.push(score);
            reads.read += r.read;
            reads.dense += r.dense;
        }
        let row = Row {
            task: *task,
            length,
            variant: v.clone(),
            label: v.label(),
            budget_tokens: v.budget.map(|b| b.tokens(length).max(v.physical_page)),
            samples: scores.len(),
            score: scores.iter().sum::<f64>() / scores.len().max(1) as f64,
            per_sample: scores,
            kv_read_fraction: reads.fraction(),
        };
        on_row(&row);
        rows.push(row);
    }
    Ok(rows)
}

/// Mean NLL of the last `score` tokens of `ids` (all but the first when `score` >= its length),
/// each predicted by a decode step ([`super::prefill_for_decode`]: each token enters the cache
/// once; tests/forward_reference.rs checks this against a naive model).
pub fn ppl_sample<B: Backend>(e: &mut Engine<B>, ids: &[u32], score: usize) -> Result<(f64, KvReads)> {
    let mut seq = e.cache.admit()?;
    let r = (|| -> Result<(f64, KvReads)> {
        let split = super::prefill_for_decode(e, &mut seq, ids, score)?;
        let (mut nll, mut n, mut reads) = (0f64, 0usize, KvReads::default());
        for p in split..ids.len() {
            let row = e.step(&mut seq, &ids[p - 1..p], Logits::Last, None)?;
            e.count_reads(&seq, &mut reads);
            nll -= log_prob(&row, ids[p]);
            n += 1;
        }
        Ok((nll / n.max(1) as f64, reads))
    })();
    e.cache.release(&mut seq)?;
    r
}

fn gen_sample<B: Backend>(e: &mut Engine<B>, tok: &TextTokenizer, task: Task, s: &Sample) -> Result<(f64, KvReads)> {
    let req = GenerateRequest {
        prompt: s.prompt.clone(),
        max_tokens: task.answer_tokens(),
        sampling: SamplingParams::greedy(),
        stop_ids: vec![],
        ignore_eos: true,
    };
    let out = e.generate(&req, &mut |_| Ok(()))?;
    let answer = tok.decode(&out.tokens, true).map_err(|e| Error::Tokenizer(e.0))?;
    // Answers stop at the first line break (the model may go on with another question).
    let first = answer.trim_start().split('\n').next().unwrap_or("");
    Ok((score_answer(task, first, &s.expect), out.kv_reads))
}

/// Markdown tables, one per task: rows = variants, columns = lengths; ppl cells show the mean
/// NLL and its change against dense at the same length, generation tasks points (and the change).
pub fn table_markdown(rows: &[Row]) -> String {
    let mut out = String::new();
    let tasks = unique_tasks(rows);
    let mut lengths: Vec<usize> = rows.iter().map(|r| r.length).collect();
    lengths.sort_unstable();
    lengths.dedup();
    for task in tasks {
        let mut labels: Vec<String> = vec![];
        for r in rows.iter().filter(|r| r.task == task) {
            if !labels.contains(&r.label) {
                labels.push(r.label.clone());
            }
        }
        let unit = if task == Task::Ppl { "mean NLL (vs dense)" } else { "points (vs dense)" };
        out += &format!("\n**{}** — {unit}\n\n| variant |", task.name());
        lengths.iter().for_each(|l| out += &format!(" {} |", length_label(*l)));
        out += "\n|---|";
        lengths.iter().for_each(|_| out += "---|");
        out += "\n";
        for label in &labels {
            out += &format!("| {label} |");
            for &l in &lengths {
                let get = |lab: &str| rows.iter().find(|r| r.task == task && r.length == l && r.label == lab);
                out += &match (get(label), get("dense")) {
                    (Some(r), _) if r.label == "dense" => format!(" {} |", fmt_score(task, r.score)),
                    (Some(r), Some(d)) if task == Task::Ppl => {
                        format!(" {:.4} ({:+.2}%) |", r.score, 100.0 * (r.score - d.score) / d.score)
                    }
                    (Some(r), Some(d)) => format!(" {:.1} ({:+.1}) |", r.score, r.score - d.score),
                    (Some(r), None) => format!(" {} |", fmt_score(task, r.score)),
                    (None, _) => " — |".into(),
                };
            }
            out += "\n";
        }
    }
    out
}

/// The tasks of `rows` in first-seen order.
fn unique_tasks(rows: &[Row]) -> Vec<Task> {
    let mut tasks: Vec<Task> = vec![];
    for r in rows {
        if !tasks.contains(&r.task) {
            tasks.push(r.task);
        }
    }
    tasks
}

fn fmt_score(task: Task, s: f64) -> String {
    if task == Task::Ppl { format!("{s:.4}") } else { format!("{s:.1}") }
}

pub fn length_label(l: usize) -> String {
    if l.is_multiple_of(1024) { format!("{}k", l / 1024) } else { l.to_string() }
}

/// The suite's charts, one PNG per task in `dir`: a heatmap with rows = lengths and columns =
/// sparse variants. Generation tasks colour the points (0..100) of each cell; ppl colours
/// `1 - 10 x` the relative NLL increase over dense (so +0% is green and +10% or worse red).
/// All chart drawing of the suite goes through this one function.
pub fn draw_charts(dir: &Path, rows: &[Row]) -> Result<Vec<std::path::PathBuf>> {
    let mut lengths: Vec<usize> = rows.iter().map(|r| r.length).collect();
    lengths.sort_unstable();
    lengths.dedup();
    let mut written = vec![];
    let tasks = unique_tasks(rows);
    for task in tasks {
        let mut labels: Vec<String> = vec![];
        for r in rows.iter().filter(|r| r.task == task && r.label != "dense") {
            if !labels.contains(&r.label) {
                labels.push(r.label.clone());
            }
        }
        let cell = |l: usize, lab: &str| -> Option<f64> {
            let r = rows.iter().find(|r| r.task == task && r.length == l && r.label == lab)?;
            if task == Task::Ppl {
                let d = rows.iter().find(|r| r.task == task && r.length == l && r.label == "dense")?;
                Some((1.0 - 10.0 * (r.score - d.score) / d.score).clamp(0.0, 1.0))
            } else {
                Some(r.score / 100.0)
            }
        };
        let mut panels = vec![];
        if task != Task::Ppl {
            let cells = lengths.iter().map(|&l| vec![cell(l, "dense")]).collect();
            panels.push(HeatmapPanel { title: "dense".into(), cells });
        }
        let cells = lengths.iter().map(|&l| labels.iter().map(|lab| cell(l, lab)).collect()).collect();
        panels.push(HeatmapPanel { title: format!("{} sparse", task.name()), cells });
        let rl: Vec<String> = lengths.iter().map(|&l| length_label(l)).collect();
        let cols: Vec<String> = (1..=labels.len()).map(|i| format!("v{i}")).collect();
        let path = dir.join(format!("accuracy-{}.png", task.name()));
        // The dense panel has one column; pad it to the sparse panel's width for one grid.
        for p in panels.iter_mut() {
            p.cells.iter_mut().for_each(|row| row.resize(cols.len().max(1), None));
        }
        let data = HeatmapData {
            title: format!("Accuracy suite: {}", task.name()),
            subtitle: format!(
                "columns: {}",
                labels.iter().enumerate().map(|(i, l)| format!("v{} = {l}", i + 1)).collect::<Vec<_>>().join("; ")
            ),
            x_label: "sparse setting".into(),
            y_label: "context length (tokens)".into(),
            x_ticks: cols,
            y_ticks: rl,
            panels,
            range: (0.0, 1.0),
            scale_label: if task == Task::Ppl { "1 - 10 x relative NLL increase".into() } else { "score".into() },
            cell_format: CellFormat::Percent,
        };
        plot::heatmap(&data, &path)?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variant_labels_name_logical_units_where_they_differ() {
        let mut v = grid(&[Budget::Fixed(4096)], &[0.0], &[(64, 16), (16, 16)], (64, 16));
        let labels = |v: &[Variant]| v.iter().map(Variant::label).collect::<Vec<_>>();
        assert_eq!(labels(&v), ["dense", "b4096 s0 p64/16", "b4096 s0 p16/16"]);
        v.iter_mut().for_each(|x| x.logical_units = true);
        assert_eq!(labels(&v), ["dense", "b4096 s0 p64/16 logical", "b4096 s0 p16/16"]);
    }
}
