//! Charts of the accuracy evaluations, built as [`crate::plot`] data:
//! - [`niah_heatmap`]: NIAH retrieval per (context length, needle depth), one panel per mode
//!   (dense, sparse) side by side, the score in every cell, the sparse settings in the title;
//! - [`perplexity_vs_budget`]: perplexity against the retrieval heads' token budget, one line
//!   per setting (e.g. streaming ratio), the dense perplexity as a dashed reference line.
//!
//! A cell's score is the fraction of its runs that retrieved the needle (so several needles per
//! cell average); cells with no run are drawn as "n/a", never as 0.

use std::path::Path;

use super::niah::NiahCell;
use crate::error::{Error, Result};
use crate::plot::{self, Axis, CellFormat, HeatmapData, HeatmapPanel, LineChart, Series};
use crate::sparse::Config;

/// The sparse settings that decide what sparse attention reads, in one line.
pub fn sparse_settings(c: &Config) -> String {
    let s = &c.sparse;
    let mut parts = vec![format!("token budget {}", s.token_budget)];
    if s.streaming_ratio > 0.0 {
        parts.push(format!(
            "streaming ratio {} (sink {} + local {})",
            plot::fmt_number(s.streaming_ratio as f64),
            s.sink_tokens,
            s.local_tokens
        ));
    }
    parts.push(format!("select every {} steps", s.selector_interval));
    parts.push(format!("pages {}/{}", c.cache.physical_page, c.cache.logical_page));
    if s.dense_below > 0 {
        parts.push(format!("dense below {}", s.dense_below));
    }
    if !s.dense_layers.is_empty() {
        parts.push(format!("dense layers {:?}", s.dense_layers));
    }
    parts.join(", ")
}

/// The NIAH heatmap of `cells` over `lengths` (rows) x `depths` (columns). `sparse` is the
/// configuration the sparse cells ran with (for the subtitle).
pub fn niah_heatmap(
    model: &str,
    cells: &[NiahCell],
    lengths: &[usize],
    depths: &[u32],
    sparse: Option<&Config>,
) -> HeatmapData {
    let modes: Vec<&str> = ["dense", "sparse"].into_iter().filter(|m| cells.iter().any(|c| c.mode == *m)).collect();
    let score = |mode: &str, l: usize, d: u32| {
        let runs: Vec<&NiahCell> = cells.iter().filter(|c| c.mode == mode && c.length == l && c.depth == d).collect();
        (!runs.is_empty()).then(|| runs.iter().filter(|c| c.correct).count() as f64 / runs.len() as f64)
    };
    let panels = modes
        .iter()
        .map(|&m| {
            let cells: Vec<Vec<Option<f64>>> =
                lengths.iter().map(|&l| depths.iter().map(|&d| score(m, l, d)).collect()).collect();
            let (ok, n) = cells_total(&cells);
            HeatmapPanel { title: format!("{m}: {ok:.0}/{n} retrieved"), cells }
        })
        .collect();
    let subtitle = match sparse {
        Some(c) if modes.contains(&"sparse") => format!("sparse: {}", sparse_settings(c)),
        _ => String::new(),
    };
    HeatmapData {
        title: format!("Needle in a haystack: {model}"),
        subtitle,
        x_label: "needle depth (% of the haystack)".into(),
        y_label: "context length (tokens)".into(),
        x_ticks: depths.iter().map(|d| format!("{d}%")).collect(),
        y_ticks: lengths.iter().map(|&l| plot::fmt_count(l as f64)).collect(),
        panels,
        range: (0.0, 1.0),
        scale_label: "needles retrieved".into(),
        cell_format: CellFormat::Percent,
    }
}

/// (sum of scores, cells run) of a panel.
fn cells_total(cells: &[Vec<Option<f64>>]) -> (f64, usize) {
    cells.iter().flatten().flatten().fold((0.0, 0), |(s, n), v| (s + v, n + 1))
}

/// One measured point of a perplexity sweep.
#[derive(Clone, Debug, PartialEq)]
pub struct PplPoint {
    /// The series it belongs to, e.g. "streaming ratio 0.5".
    pub setting: String,
    /// Tokens each retrieval head reads per decode step.
    pub budget: usize,
    pub perplexity: f64,
}

/// Perplexity vs token budget (log2 axis), one line per setting in order of first appearance,
/// values printed; `dense` draws the dense perplexity as a dashed line across the budgets.
pub fn perplexity_vs_budget(title: &str, subtitle: &str, points: &[PplPoint], dense: Option<f64>) -> LineChart {
    let mut series: Vec<Series> = vec![];
    for p in points {
        let i = match series.iter().position(|s| s.name == p.setting) {
            Some(i) => i,
            None => {
                let color = series.len();
                series.push(Series {
                    name: p.setting.clone(),
                    color,
                    markers: true,
                    label_values: true,
                    ..Default::default()
                });
                color
            }
        };
        series[i].points.push((p.budget as f64, p.perplexity));
    }
    let (lo, hi) = points.iter().fold((usize::MAX, 0), |(lo, hi), p| (lo.min(p.budget), hi.max(p.budget)));
    if let Some(d) = dense.filter(|_| !points.is_empty()) {
        let color = series.len();
        let name = format!("dense ({})", plot::fmt_number(d));
        series.push(Series {
            name,
            points: vec![(lo as f64, d), (hi as f64, d)],
            color,
            dashed: true,
            ..Default::default()
        });
    }
    LineChart {
        title: title.into(),
        subtitle: subtitle.into(),
        x_label: "token budget (tokens per retrieval head per decode step)".into(),
        y_label: "perplexity".into(),
        x_axis: Axis::Log2,
        y_axis: Axis::LinearFit,
        series,
    }
}

/// Read `scripts/measure_sparse.sh`'s `ppl.csv` (config, streaming_ratio, token_budget, ...,
/// perplexity): the `dense` row is the reference, every `sparse` row a point of the series
/// "streaming ratio R".
pub fn read_ppl_csv(path: &Path) -> Result<(Vec<PplPoint>, Option<f64>)> {
    let bad = |m: String| Error::InvalidArgument(format!("{}: {m}", path.display()));
    let mut r = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .comment(Some(b'#'))
        .from_path(path)
        .map_err(|e| bad(e.to_string()))?;
    let header = r.headers().map_err(|e| bad(e.to_string()))?.clone();
    let col = |name: &str| header.iter().position(|h| h == name).ok_or_else(|| bad(format!("no `{name}` column")));
    let (config, ratio, budget, ppl) =
        (col("config")?, col("streaming_ratio")?, col("token_budget")?, col("perplexity")?);
    let (mut points, mut dense) = (vec![], None);
    for rec in r.records() {
        let rec = rec.map_err(|e| bad(e.to_string()))?;
        let line = rec.position().map_or(0, |p| p.line());
        let get = |i: usize| rec.get(i).unwrap_or("");
        let perplexity: f64 =
            get(ppl).parse().map_err(|_| bad(format!("line {line}: perplexity `{}` is not a number", get(ppl))))?;
        if get(config) == "dense" {
            dense = Some(perplexity);
            continue;
        }
        let budget: usize = get(budget)
            .parse()
            .map_err(|_| bad(format!("line {line}: token_budget `{}` is not a number", get(budget))))?;
        points.push(PplPoint { setting: format!("streaming ratio {}", get(ratio)), budget, perplexity });
    }
    Ok((points, dense))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(mode: &str, length: usize, depth: u32, correct: bool) -> NiahCell {
        NiahCell {
            mode: mode.into(),
            length,
            depth,
            prompt_tokens: length,
            needle: "1234567".into(),
            answer: String::new(),
            correct,
            kv_read_fraction: 1.0,
        }
    }

    #[test]
    fn niah_scores_cells_and_marks_missing_ones() {
        let cells = [
            cell("dense", 1024, 0, true),
            cell("dense", 1024, 50, false),
            cell("sparse", 1024, 0, true),
            cell("sparse", 1024, 0, false),
        ];
        let mut c = Config::default();
        c.sparse.token_budget = 1024;
        let h = niah_heatmap("m.gguf", &cells, &[1024, 2048], &[0, 50], Some(&c));
        assert_eq!(h.panels.len(), 2);
        assert_eq!(h.panels[0].cells, vec![vec![Some(1.0), Some(0.0)], vec![None, None]]);
        assert_eq!(h.panels[1].cells[0], vec![Some(0.5), None]);
        assert_eq!(h.panels[0].title, "dense: 1/2 retrieved");
        assert_eq!(h.y_ticks, ["1k", "2k"]);
        assert!(h.subtitle.contains("token budget 1024"), "{}", h.subtitle);
    }

    #[test]
    fn ppl_series_per_setting_and_a_dense_line() {
        let p = |s: &str, budget, perplexity| PplPoint { setting: s.into(), budget, perplexity };
        let pts = [p("a", 256, 27.0), p("a", 1024, 19.5), p("b", 256, 25.8), p("b", 512, 21.9)];
        let c = perplexity_vs_budget("t", "", &pts, Some(18.14));
        let names: Vec<&str> = c.series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "dense (18.1)"]);
        assert_eq!(c.series[2].points, vec![(256.0, 18.14), (1024.0, 18.14)]);
        assert!(c.series[2].dashed && !c.series[0].dashed);
    }
}
