//! `lserve bench` charts and the CSV files behind them (format in docs/benchmarks.md):
//! - `bench.png`: decode ms per step vs context (log2 axis), one series per backend x mode x
//!   batch with its values printed, each series' bandwidth floor as a dashed line in its colour;
//! - `bench-batch.png` (when two or more batch sizes ran): tokens/s of all sequences vs batch,
//!   one series per backend x mode x context;
//! - `bench-prefill.png` (when prefill ran): prefill tokens/s vs prompt length.
//!
//! Anchor runs (PyTorch, llama.cpp, ...) come from a `--compare` CSV ([`read_compare`]) and are
//! drawn on the same axes with markers. Bench CSVs are read back by their header
//! ([`read_bench_csv`]), so files written before a column was added (no `batch`, no
//! `decode_ms_mean`) still plot. Two rows for the same point of the same series are an error,
//! not a silent overwrite.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::BenchRow;
use crate::error::{Error, Result};
use crate::plot::{self, Axis, LineChart, Series};

/// One row of a `--compare` CSV: a decode point (`context` + `ms_per_token` or `tokens_per_s`)
/// and/or a prefill point (`prefill_tokens` + `prefill_tokens_per_s` or `prefill_ms`).
#[derive(Clone, Debug, PartialEq)]
pub struct CompareRow {
    pub label: String,
    pub context: Option<usize>,
    pub batch: usize,
    /// Per decode step (all `batch` sequences).
    pub ms_per_token: Option<f64>,
    pub prefill_tokens: Option<usize>,
    pub prefill_tokens_per_s: Option<f64>,
}

/// A CSV read into rows of named cells; errors name the file and line.
struct Table {
    path: PathBuf,
    header: HashMap<String, usize>,
    rows: Vec<(u64, csv::StringRecord)>,
}

impl Table {
    fn read(path: &Path, required: &[&str]) -> Result<Table> {
        let bad = |m: String| Error::InvalidArgument(format!("{}: {m}", path.display()));
        let mut r = csv::ReaderBuilder::new()
            .trim(csv::Trim::All)
            .comment(Some(b'#'))
            .from_path(path)
            .map_err(|e| bad(e.to_string()))?;
        let header: HashMap<String, usize> = r
            .headers()
            .map_err(|e| bad(e.to_string()))?
            .iter()
            .enumerate()
            .map(|(i, h)| (h.to_ascii_lowercase(), i))
            .collect();
        if let Some(missing) = required.iter().find(|c| !header.contains_key(**c)) {
            return Err(bad(format!("no `{missing}` column (needs {})", required.join(", "))));
        }
        let mut rows = vec![];
        for rec in r.records() {
            let rec = rec.map_err(|e| bad(e.to_string()))?;
            rows.push((rec.position().map_or(0, |p| p.line()), rec));
        }
        Ok(Table { path: path.to_path_buf(), header, rows })
    }

    fn err(&self, line: u64, m: String) -> Error {
        Error::InvalidArgument(format!("{} line {line}: {m}", self.path.display()))
    }

    /// The cell of `col` in row `i`, `None` when the column is absent or the cell empty.
    fn cell<'a>(&'a self, i: usize, col: &str) -> Option<&'a str> {
        let idx = *self.header.get(col)?;
        self.rows[i].1.get(idx).filter(|s| !s.is_empty())
    }

    fn num<T: std::str::FromStr>(&self, i: usize, col: &str) -> Result<Option<T>> {
        self.cell(i, col)
            .map(|s| s.parse::<T>().map_err(|_| self.err(self.rows[i].0, format!("{col} `{s}` is not a number"))))
            .transpose()
    }

    fn positive(&self, i: usize, col: &str) -> Result<Option<f64>> {
        match self.num::<f64>(i, col)? {
            Some(v) if !(v.is_finite() && v > 0.0) => Err(self.err(self.rows[i].0, format!("{col} {v} must be > 0"))),
            v => Ok(v),
        }
    }
}

/// Read an anchor CSV for `--compare` (columns in docs/benchmarks.md; unknown columns ignored).
pub fn read_compare(path: &Path) -> Result<Vec<CompareRow>> {
    let t = Table::read(path, &["label"])?;
    let mut out = vec![];
    for (i, &(line, _)) in t.rows.iter().enumerate() {
        let label = t.cell(i, "label").ok_or_else(|| t.err(line, "empty label".into()))?.to_string();
        let batch = t.num::<usize>(i, "batch")?.unwrap_or(1);
        if batch == 0 {
            return Err(t.err(line, "batch must be at least 1".into()));
        }
        let context = t.num::<usize>(i, "context")?.filter(|&c| c > 0);
        let ms = match (t.positive(i, "ms_per_token")?, t.positive(i, "tokens_per_s")?) {
            (Some(ms), _) => Some(ms),
            (None, Some(tps)) => Some(batch as f64 * 1e3 / tps),
            (None, None) => None,
        };
        let prefill_tokens = t.num::<usize>(i, "prefill_tokens")?.filter(|&n| n > 0);
        let prefill_tps = match (t.positive(i, "prefill_tokens_per_s")?, t.positive(i, "prefill_ms")?, prefill_tokens) {
            (Some(tps), _, _) => Some(tps),
            (None, Some(ms), Some(n)) => Some(n as f64 / (ms / 1e3)),
            _ => None,
        };
        let decode = context.is_some() && ms.is_some();
        let prefill = prefill_tokens.is_some() && prefill_tps.is_some();
        if !decode && !prefill {
            return Err(t.err(
                line,
                "needs context + ms_per_token (or tokens_per_s), or prefill_tokens + prefill_tokens_per_s (or prefill_ms)"
                    .into(),
            ));
        }
        out.push(CompareRow {
            label,
            context: context.filter(|_| decode),
            batch,
            ms_per_token: ms.filter(|_| decode),
            prefill_tokens: prefill_tokens.filter(|_| prefill),
            prefill_tokens_per_s: prefill_tps.filter(|_| prefill),
        });
    }
    Ok(out)
}

/// The bench CSV columns, in order.
pub const CSV_HEADER: &str = "backend,shape,mode,context,batch,kv_dtype,kv_bytes_per_token,decode_ms,decode_ms_min,decode_ms_mean,weight_bytes,kv_bytes_read,floor_ms,kv_read_fraction,prefill_tokens,prefill_ms,device_memory_buffers,device_memory_reserved";

/// `rows` as the bench CSV (`bench.csv`).
pub fn to_csv(rows: &[BenchRow]) -> String {
    let mut csv = format!("{CSV_HEADER}\n");
    for r in rows {
        csv += &format!(
            "{},{},{},{},{},{},{},{:.4},{:.4},{:.4},{},{},{:.4},{:.4},{},{},{},{}\n",
            r.backend,
            r.shape,
            r.mode,
            r.context,
            r.batch,
            r.kv_dtype,
            r.kv_bytes_per_token,
            r.decode_ms,
            r.decode_ms_min,
            r.decode_ms_mean,
            r.weight_bytes,
            r.kv_bytes_read,
            r.floor_ms,
            r.kv_read_fraction,
            r.prefill_tokens,
            r.prefill_ms.map_or(String::new(), |m| format!("{m:.3}")),
            r.device_memory.map_or(String::new(), |m| m.buffers.to_string()),
            r.device_memory.map_or(String::new(), |m| m.reserved.to_string())
        );
    }
    csv
}

/// Read a bench CSV back (any version: columns are found by name; `batch` defaults to 1, the
/// min/mean to the median).
pub fn read_bench_csv(path: &Path) -> Result<Vec<BenchRow>> {
    let t = Table::read(path, &["backend", "mode", "context", "decode_ms"])?;
    let mut rows = vec![];
    for i in 0..t.rows.len() {
        let text = |c: &str| t.cell(i, c).unwrap_or("").to_string();
        let decode_ms = t.num::<f64>(i, "decode_ms")?.unwrap_or(0.0);
        rows.push(BenchRow {
            backend: text("backend"),
            shape: text("shape"),
            mode: text("mode"),
            context: t.num(i, "context")?.unwrap_or(0),
            batch: t.num(i, "batch")?.unwrap_or(1).max(1),
            kv_dtype: text("kv_dtype"),
            kv_bytes_per_token: t.num(i, "kv_bytes_per_token")?.unwrap_or(0),
            decode_ms,
            decode_ms_min: t.num(i, "decode_ms_min")?.unwrap_or(decode_ms),
            decode_ms_mean: t.num(i, "decode_ms_mean")?.unwrap_or(decode_ms),
            weight_bytes: t.num(i, "weight_bytes")?.unwrap_or(0),
            kv_bytes_read: t.num(i, "kv_bytes_read")?.unwrap_or(0),
            floor_ms: t.num(i, "floor_ms")?.unwrap_or(0.0),
            kv_read_fraction: t.num(i, "kv_read_fraction")?.unwrap_or(1.0),
            prefill_tokens: t.num(i, "prefill_tokens")?.unwrap_or(0),
            prefill_ms: t.num(i, "prefill_ms")?,
            kernels: vec![],
            device_memory: match (t.num(i, "device_memory_buffers")?, t.num(i, "device_memory_reserved")?) {
                (Some(buffers), Some(reserved)) => Some(crate::backend::DeviceMemory { buffers, reserved }),
                _ => None,
            },
        });
    }
    Ok(rows)
}

fn is_prefill(r: &BenchRow) -> bool {
    r.mode.starts_with("prefill")
}

/// Series keyed by name in order of first appearance, refusing a second value at the same x.
#[derive(Default)]
struct Builder {
    series: Vec<Series>,
}

impl Builder {
    fn add(&mut self, name: String, color: usize, (x, y): (f64, f64)) -> Result<()> {
        let i = match self.series.iter().position(|s| s.name == name) {
            Some(i) => i,
            None => {
                let s = Series { name, color, markers: true, label_values: true, ..Default::default() };
                self.series.push(s);
                self.series.len() - 1
            }
        };
        let s = &mut self.series[i];
        if s.points.iter().any(|p| p.0 == x) {
            return Err(Error::InvalidArgument(format!(
                "two rows for `{}` at {}: plot one run per backend and mode",
                s.name,
                plot::fmt_count(x)
            )));
        }
        s.points.push((x, y));
        Ok(())
    }

    /// The colour the next new series gets.
    fn next_color(&self) -> usize {
        self.series.iter().map(|s| s.color + 1).max().unwrap_or(0)
    }

    fn color_of(&mut self, name: &str) -> usize {
        self.series.iter().find(|s| s.name == name).map_or_else(|| self.next_color(), |s| s.color)
    }
}

fn shapes(rows: &[BenchRow]) -> String {
    let mut v: Vec<&str> = vec![];
    for r in rows.iter().filter(|r| !r.shape.is_empty()) {
        if !v.contains(&r.shape.as_str()) {
            v.push(&r.shape);
        }
    }
    if v.is_empty() { "synthetic weights".into() } else { format!("{} shape, synthetic weights", v.join(", ")) }
}

fn batches(rows: &[BenchRow]) -> Vec<usize> {
    let mut b: Vec<usize> = rows.iter().filter(|r| !is_prefill(r)).map(|r| r.batch).collect();
    b.sort_unstable();
    b.dedup();
    b
}

/// Decode ms per step vs context, with floors and anchors.
pub fn decode_chart(rows: &[BenchRow], compare: &[CompareRow]) -> Result<LineChart> {
    let multi_batch = batches(rows).len() > 1;
    let name = |r: &BenchRow| {
        if multi_batch {
            format!("{} {} batch {}", r.backend, r.mode, r.batch)
        } else {
            format!("{} {}", r.backend, r.mode)
        }
    };
    let mut b = Builder::default();
    for r in rows.iter().filter(|r| !is_prefill(r) && r.decode_ms > 0.0) {
        let n = name(r);
        let c = b.color_of(&n);
        b.add(n, c, (r.context as f64, r.decode_ms))?;
    }
    let mut floors = Builder::default();
    for r in rows.iter().filter(|r| !is_prefill(r) && r.floor_ms > 0.0) {
        let n = name(r);
        let color = b.color_of(&n);
        floors.add(format!("floor, {n}"), color, (r.context as f64, r.floor_ms))?;
    }
    for c in compare {
        if let (Some(ctx), Some(ms)) = (c.context, c.ms_per_token) {
            let n = if c.batch > 1 { format!("{} batch {}", c.label, c.batch) } else { c.label.clone() };
            let color = b.color_of(&n);
            b.add(n, color, (ctx as f64, ms))?;
        }
    }
    let mut series = b.series;
    series.extend(floors.series.into_iter().map(|s| Series { dashed: true, markers: false, label_values: false, ..s }));
    Ok(LineChart {
        title: "Decode latency vs context".into(),
        subtitle: format!(
            "{}; median ms per decode step (one token for every sequence); dashed: bandwidth floor",
            shapes(rows)
        ),
        x_label: "context (tokens, k = 1024)".into(),
        y_label: "ms per decode step".into(),
        x_axis: Axis::Log2,
        y_axis: Axis::Linear,
        series,
    })
}

/// Tokens/s (all sequences) vs batch size, when two or more batch sizes ran.
pub fn batch_chart(rows: &[BenchRow], compare: &[CompareRow]) -> Result<Option<LineChart>> {
    if batches(rows).len() < 2 {
        return Ok(None);
    }
    let mut b = Builder::default();
    for r in rows.iter().filter(|r| !is_prefill(r) && r.decode_ms > 0.0) {
        let n = format!("{} {} at {}", r.backend, r.mode, plot::fmt_count(r.context as f64));
        let c = b.color_of(&n);
        b.add(n, c, (r.batch as f64, r.batch as f64 * 1e3 / r.decode_ms))?;
    }
    // Anchors with two or more batch sizes at one context.
    let mut anchors = Builder::default();
    for c in compare {
        if let (Some(ctx), Some(ms)) = (c.context, c.ms_per_token) {
            let n = format!("{} at {}", c.label, plot::fmt_count(ctx as f64));
            anchors.add(n, 0, (c.batch as f64, c.batch as f64 * 1e3 / ms))?;
        }
    }
    let first = b.next_color();
    let mut series = b.series;
    let multi = anchors.series.into_iter().filter(|s| s.points.len() > 1);
    series.extend(multi.enumerate().map(|(i, s)| Series { color: first + i, ..s }));
    Ok(Some(LineChart {
        title: "Decode throughput vs batch size".into(),
        subtitle: format!("{}; tokens per second summed over the batch", shapes(rows)),
        x_label: "sequences per decode step".into(),
        y_label: "tokens/s".into(),
        x_axis: Axis::Log2,
        y_axis: Axis::Linear,
        series,
    }))
}

/// Prefill tokens/s vs prompt length, when prefill ran.
pub fn prefill_chart(rows: &[BenchRow], compare: &[CompareRow]) -> Result<Option<LineChart>> {
    let pre: Vec<&BenchRow> = rows
        .iter()
        .filter(|r| is_prefill(r) && r.prefill_tokens > 0 && r.prefill_ms.is_some_and(|m| m > 0.0))
        .collect();
    if pre.is_empty() {
        return Ok(None);
    }
    let mut b = Builder::default();
    for r in pre {
        let mode = if r.mode == "prefill-sparse" { "sparse" } else { "dense" };
        let n = format!("{} {mode} prefill", r.backend);
        let c = b.color_of(&n);
        let ms = r.prefill_ms.unwrap_or(1.0);
        b.add(n, c, (r.prefill_tokens as f64, r.prefill_tokens as f64 / (ms / 1e3)))?;
    }
    for c in compare {
        if let (Some(n), Some(tps)) = (c.prefill_tokens, c.prefill_tokens_per_s) {
            let color = b.color_of(&c.label);
            b.add(c.label.clone(), color, (n as f64, tps))?;
        }
    }
    Ok(Some(LineChart {
        title: "Prefill throughput vs prompt length".into(),
        subtitle: format!("{}; one sequence, the engine's prefill chunks", shapes(rows)),
        x_label: "prompt (tokens, k = 1024)".into(),
        y_label: "prefill tokens/s".into(),
        x_axis: Axis::Log2,
        y_axis: Axis::Linear,
        series: b.series,
    }))
}

/// Write every chart that `rows` have data for into `dir`, once per extension in `exts`
/// ("png", "svg"): `bench`, `bench-batch`, `bench-prefill`. Returns the files written.
pub fn write_plots(dir: &Path, exts: &[&str], rows: &[BenchRow], compare: &[CompareRow]) -> Result<Vec<PathBuf>> {
    let mut charts = vec![("bench", decode_chart(rows, compare)?)];
    if let Some(c) = batch_chart(rows, compare)? {
        charts.push(("bench-batch", c));
    }
    if let Some(c) = prefill_chart(rows, compare)? {
        charts.push(("bench-prefill", c));
    }
    charts.retain(|(_, c)| !c.series.is_empty());
    if charts.is_empty() {
        return Err(Error::InvalidArgument("no decode or prefill rows to plot".into()));
    }
    let mut written = vec![];
    for (stem, chart) in &charts {
        for ext in exts {
            let path = dir.join(format!("{stem}.{ext}"));
            plot::lines(chart, &path)?;
            written.push(path);
        }
    }
    Ok(written)
}
