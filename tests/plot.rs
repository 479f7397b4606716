//! Charts (src/plot, src/bench/plot.rs, src/eval/charts.rs) rendered from fixed data: each PNG
//! decodes with the size the chart reports and carries its text and colours (drawn with the
//! embedded font); each SVG parses as XML with that size and holds every label as `<text>`.
//! The bench CSV readers are checked against hand-computed values and the files in docs/data,
//! and `lserve bench --plot-only` / `--compare` end to end, including bad files.

use std::path::{Path, PathBuf};
use std::process::Command;

use lserve::bench::BenchRow;
use lserve::bench::plot::{
    CompareRow, batch_chart, decode_chart, prefill_chart, read_bench_csv, read_compare, to_csv, write_plots,
};
use lserve::eval::charts::{PplPoint, niah_heatmap, perplexity_vs_budget, read_ppl_csv};
use lserve::eval::niah::NiahCell;
use lserve::plot::{self, Axis, CellFormat, HeatmapData, HeatmapPanel, LineChart, Series};

struct Png {
    w: u32,
    h: u32,
    rgb: Vec<u8>,
}

impl Png {
    fn read(path: &Path) -> Png {
        let dec = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
        let mut reader = dec.read_info().expect("a PNG header");
        let mut rgb = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut rgb).expect("PNG data");
        assert_eq!(info.color_type, png::ColorType::Rgb);
        rgb.truncate(info.buffer_size());
        Png { w: info.width, h: info.height, rgb }
    }

    fn count(&self, c: [u8; 3]) -> usize {
        self.rgb.chunks(3).filter(|p| *p == c).count()
    }

    /// Pixels in rows y0..y1 that are not white.
    fn inked(&self, y0: u32, y1: u32) -> usize {
        let row = self.w as usize * 3;
        self.rgb[y0 as usize * row..y1 as usize * row].chunks(3).filter(|p| *p != [255, 255, 255]).count()
    }
}

struct Svg {
    w: u32,
    h: u32,
    texts: Vec<String>,
    /// (stroke colour, points) of every polyline.
    lines: Vec<(String, usize)>,
    fills: Vec<String>,
}

impl Svg {
    fn read(path: &Path) -> Svg {
        let text = std::fs::read_to_string(path).unwrap();
        let doc = roxmltree::Document::parse(&text).expect("well-formed SVG");
        let root = doc.root_element();
        assert_eq!(root.tag_name().name(), "svg");
        let num = |a: &str| root.attribute(a).expect(a).parse::<u32>().unwrap();
        let nodes = || doc.descendants().filter(|n| n.is_element());
        let texts = nodes()
            .filter(|n| n.tag_name().name() == "text")
            .map(|n| n.text().unwrap_or("").trim().to_string())
            .collect();
        let lines = nodes()
            .filter(|n| n.tag_name().name() == "polyline")
            .map(|n| {
                let pts = n.attribute("points").unwrap_or("").split_whitespace().count();
                (n.attribute("stroke").unwrap_or("").to_string(), pts)
            })
            .collect();
        let fills = nodes().filter_map(|n| n.attribute("fill").map(str::to_string)).collect();
        Svg { w: num("width"), h: num("height"), texts, lines, fills }
    }

    fn has(&self, t: &str) -> bool {
        self.texts.iter().any(|x| x == t)
    }

    fn assert_texts(&self, want: &[&str]) {
        for t in want {
            assert!(self.has(t), "no <text>{t}</text> in {:?}", self.texts);
        }
    }
}

fn hex(c: [u8; 3]) -> String {
    format!("#{:02X}{:02X}{:02X}", c[0], c[1], c[2])
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// Two panels, a cell not run, values at both ends of the scale and one in between.
fn heatmap_data() -> HeatmapData {
    HeatmapData {
        title: "Needle in a haystack: test model".into(),
        subtitle: "sparse: token budget 1024, streaming ratio 0.5".into(),
        x_label: "needle depth".into(),
        y_label: "context length".into(),
        x_ticks: vec!["0%".into(), "50%".into(), "100%".into()],
        y_ticks: vec!["1k".into(), "2k".into()],
        panels: vec![
            HeatmapPanel {
                title: "dense".into(),
                cells: vec![vec![Some(1.0), Some(1.0), Some(1.0)], vec![Some(1.0); 3]],
            },
            HeatmapPanel {
                title: "sparse".into(),
                cells: vec![vec![Some(0.0), Some(0.25), None], vec![Some(1.0), Some(0.0), Some(0.0)]],
            },
        ],
        range: (0.0, 1.0),
        scale_label: "retrieved".into(),
        cell_format: CellFormat::Percent,
    }
}

// Viridis at the ends of the scale (plotters' ViridisRGB), and the not-run grey.
const TOP: [u8; 3] = [254, 232, 37];
const BOTTOM: [u8; 3] = [68, 1, 84];
const NOT_RUN: [u8; 3] = [225, 225, 225];

#[test]
fn heatmap_png_has_its_size_cells_and_text() {
    let d = tmp();
    let data = heatmap_data();
    let path = d.path().join("h.png");
    plot::heatmap(&data, &path).unwrap();
    let png = Png::read(&path);
    assert_eq!((png.w, png.h), data.size());
    // A wider panel set makes a wider picture.
    let mut three = data.clone();
    three.panels.push(data.panels[1].clone());
    assert!(three.size().0 > data.size().0 + 3 * 60, "{:?} vs {:?}", three.size(), data.size());
    // A cell is 62 x 42 = 2604 pixels of its colour less its printed score (< 300 pixels): 7
    // at the top of the scale, 3 at the bottom (the colour bar adds a row of each), one not run.
    let (top, bottom, grey) = (png.count(TOP), png.count(BOTTOM), png.count(NOT_RUN));
    let cells = |n: usize| n * 2300..=n * 2604 + 100;
    assert!(cells(7).contains(&top), "top-colour pixels {top}");
    assert!(cells(3).contains(&bottom), "bottom-colour pixels {bottom}");
    assert!(cells(1).contains(&grey), "not-run pixels {grey}");
    // The title line is drawn (the embedded font renders without system fonts).
    assert!(png.inked(16, 36) > 200, "no title ink");
}

#[test]
fn heatmap_svg_names_axes_panels_and_scores() {
    let d = tmp();
    let data = heatmap_data();
    let path = d.path().join("h.svg");
    plot::heatmap(&data, &path).unwrap();
    let svg = Svg::read(&path);
    assert_eq!((svg.w, svg.h), data.size());
    svg.assert_texts(&[
        "Needle in a haystack: test model",
        "sparse: token budget 1024, streaming ratio 0.5",
        "needle depth",
        "context length",
        "dense",
        "sparse",
        "1k",
        "2k",
        "retrieved",
        "25%",
        "n/a",
    ]);
    // Every cell prints its score: 7 cells at 100%, 3 at 0% (+ the column tick under each panel
    // and the colour scale's tick).
    let count = |t: &str| svg.texts.iter().filter(|x| *x == t).count();
    assert_eq!(count("100%"), 7 + 2 + 1, "{:?}", svg.texts);
    assert_eq!(count("0%"), 3 + 2 + 1);
    assert_eq!(count("n/a"), 1);
    assert!(svg.fills.contains(&hex(TOP)) && svg.fills.contains(&hex(BOTTOM)));
}

fn line_chart() -> LineChart {
    let ctx = [4096.0, 32768.0, 131072.0];
    LineChart {
        title: "Decode latency vs context".into(),
        subtitle: "test data".into(),
        x_label: "context (tokens)".into(),
        y_label: "ms per decode step".into(),
        x_axis: Axis::Log2,
        y_axis: Axis::Linear,
        series: vec![
            Series {
                name: "cuda dense".into(),
                points: ctx.iter().copied().zip([6.0721, 8.969, 19.2732]).collect(),
                color: 0,
                markers: true,
                label_values: true,
                ..Default::default()
            },
            Series {
                name: "cuda sparse".into(),
                points: ctx.iter().copied().zip([5.9181, 5.9206, 5.7997]).collect(),
                color: 1,
                markers: true,
                label_values: true,
                ..Default::default()
            },
            Series {
                name: "floor, cuda dense".into(),
                points: ctx.iter().copied().zip([3.9522, 4.8469, 7.9148]).collect(),
                color: 0,
                dashed: true,
                ..Default::default()
            },
        ],
    }
}

#[test]
fn line_chart_png_and_svg() {
    let d = tmp();
    let chart = line_chart();
    let p = d.path().join("l.png");
    plot::lines(&chart, &p).unwrap();
    let png = Png::read(&p);
    assert_eq!((png.w, png.h), chart.size());
    assert!(png.w >= 900 && png.h >= 560);
    assert!(png.count([31, 119, 180]) > 300, "the first series' colour is drawn");
    assert!(png.count([255, 127, 14]) > 300, "the second series' colour is drawn");
    assert!(png.inked(16, 36) > 200, "no title ink");
    let s = d.path().join("l.svg");
    plot::lines(&chart, &s).unwrap();
    let svg = Svg::read(&s);
    assert_eq!((svg.w, svg.h), chart.size());
    svg.assert_texts(&[
        "Decode latency vs context",
        "context (tokens)",
        "ms per decode step",
        "4k",
        "32k",
        "128k",
        "cuda dense",
        "cuda sparse",
        "floor, cuda dense",
        // every measured value, none of the floor's
        "6.07",
        "8.97",
        "19.3",
        "5.92",
        "5.80",
    ]);
    assert!(!svg.has("3.95") && !svg.has("7.91"), "the floor is not labelled");
    // The y axis starts at 0 and ticks are round numbers.
    svg.assert_texts(&["0", "5", "10", "15", "20"]);
    // Solid series are one polyline each; the dashed floor is many short ones.
    let blue: Vec<usize> = svg.lines.iter().filter(|l| l.0 == hex([31, 119, 180])).map(|l| l.1).collect();
    assert!(blue.contains(&3), "solid dense line through 3 points: {blue:?}");
    assert!(blue.iter().filter(|&&n| n == 2).count() >= 10, "dashes: {blue:?}");
}

#[test]
fn log_axes_skip_points_they_cannot_show() {
    let d = tmp();
    let mut chart = line_chart();
    chart.y_axis = Axis::Log10;
    chart.series[0].points.push((0.0, 1.0));
    chart.series[0].points.push((8192.0, -1.0));
    let s = d.path().join("l.svg");
    plot::lines(&chart, &s).unwrap();
    let svg = Svg::read(&s);
    let blue = svg.lines.iter().filter(|l| l.0 == hex([31, 119, 180])).map(|l| l.1).max();
    assert_eq!(blue, Some(3), "x = 0 and y < 0 left out");
    svg.assert_texts(&["5", "10", "20"]);
    // An empty chart still draws (axes, no lines), and a bad extension is an error.
    plot::lines(&LineChart::default(), &d.path().join("e.png")).unwrap();
    assert!(plot::lines(&chart, &d.path().join("l.gif")).is_err());
    assert!(plot::heatmap(&heatmap_data(), &d.path().join("no/such/dir/h.png")).is_err());
}

fn row(backend: &str, mode: &str, context: usize, batch: usize, ms: f64, floor: f64) -> BenchRow {
    BenchRow {
        backend: backend.into(),
        shape: "llama3-8b".into(),
        mode: mode.into(),
        context,
        batch,
        kv_dtype: "bf16".into(),
        kv_bytes_per_token: 131072,
        decode_ms: ms,
        decode_ms_min: ms * 0.99,
        decode_ms_mean: ms * 1.01,
        weight_bytes: 16061054976,
        kv_bytes_read: 537985024,
        floor_ms: floor,
        kv_read_fraction: 0.5,
        prefill_tokens: 0,
        prefill_ms: None,
        kernels: vec![],
        device_memory: None,
    }
}

fn prefill_row(mode: &str, tokens: usize, ms: f64) -> BenchRow {
    BenchRow { prefill_tokens: tokens, prefill_ms: Some(ms), ..row("cuda", mode, tokens, 1, 0.0, 0.0) }
}

fn anchor(label: &str, context: usize, batch: usize, ms: f64) -> CompareRow {
    CompareRow {
        label: label.into(),
        context: Some(context),
        batch,
        ms_per_token: Some(ms),
        prefill_tokens: None,
        prefill_tokens_per_s: None,
    }
}

#[test]
fn bench_decode_chart_has_series_floors_and_anchors() {
    let rows = vec![
        prefill_row("prefill", 4096, 270.387),
        row("cuda", "dense", 4096, 1, 6.0721, 3.9522),
        row("cuda", "sparse", 4096, 1, 5.9181, 3.8931),
        row("cuda", "dense", 131072, 1, 19.2732, 7.9148),
        row("cuda", "sparse", 131072, 1, 5.7997, 3.8931),
    ];
    let cmp = vec![anchor("PyTorch dense step", 4096, 1, 5.72), anchor("PyTorch dense step", 131072, 1, 9.64)];
    let c = decode_chart(&rows, &cmp).unwrap();
    let names: Vec<&str> = c.series.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["cuda dense", "cuda sparse", "PyTorch dense step", "floor, cuda dense", "floor, cuda sparse"]);
    assert_eq!(c.series[0].points, vec![(4096.0, 6.0721), (131072.0, 19.2732)]);
    assert_eq!(c.series[3].points, vec![(4096.0, 3.9522), (131072.0, 7.9148)]);
    assert!(c.series[3].dashed && !c.series[3].label_values && c.series[0].label_values);
    assert_eq!((c.series[3].color, c.series[4].color), (c.series[0].color, c.series[1].color));
    assert_eq!(c.x_axis, Axis::Log2);
    assert!(batch_chart(&rows, &cmp).unwrap().is_none(), "one batch size: no batch chart");
    let p = prefill_chart(&rows, &[]).unwrap().expect("prefill ran");
    assert_eq!(p.series.len(), 1);
    let (x, y) = p.series[0].points[0];
    assert_eq!(x, 4096.0);
    assert!((y - 4096.0 / 0.270387).abs() < 1e-6, "tokens/s {y}");
    // The same point twice (two runs of one backend) is refused.
    let mut twice = rows.clone();
    twice.push(row("cuda", "dense", 4096, 1, 6.5, 3.9522));
    let e = decode_chart(&twice, &[]).unwrap_err().to_string();
    assert!(e.contains("cuda dense") && e.contains("4k"), "{e}");
}

#[test]
fn bench_batch_chart_in_tokens_per_second() {
    let rows: Vec<BenchRow> =
        [(1, 6.0), (4, 8.0), (16, 20.0)].iter().map(|&(b, ms)| row("cuda", "sparse", 32768, b, ms, 3.9)).collect();
    let cmp = vec![anchor("vLLM", 32768, 1, 6.5), anchor("vLLM", 32768, 16, 30.0), anchor("single", 32768, 1, 9.0)];
    let c = batch_chart(&rows, &cmp).unwrap().expect("three batch sizes");
    let names: Vec<&str> = c.series.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["cuda sparse at 32k", "vLLM at 32k"], "an anchor with one batch size is left out");
    let tps: Vec<f64> = c.series[0].points.iter().map(|p| p.1).collect();
    assert_eq!(tps, [1000.0 / 6.0, 4000.0 / 8.0, 16000.0 / 20.0]);
    assert_eq!(c.series[1].points, vec![(1.0, 1000.0 / 6.5), (16.0, 16000.0 / 30.0)]);
    assert_ne!(c.series[1].color, c.series[0].color);
    // With several batch sizes the decode chart names them.
    let d = decode_chart(&rows, &[]).unwrap();
    assert_eq!(d.series[0].name, "cuda sparse batch 1");
    let dir = tmp();
    let files = write_plots(dir.path(), &["png", "svg"], &rows, &cmp).unwrap();
    let names: Vec<String> = files.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(names, ["bench.png", "bench.svg", "bench-batch.png", "bench-batch.svg"]);
    let svg = Svg::read(&dir.path().join("bench-batch.svg"));
    svg.assert_texts(&["Decode throughput vs batch size", "tokens/s", "1", "4", "16", "167", "500", "800"]);
}

#[test]
fn bench_csv_round_trip_and_old_files() {
    let dir = tmp();
    let mut rows = vec![prefill_row("prefill-sparse", 4096, 265.397), row("wgpu", "dense", 32768, 2, 15.4995, 5.8698)];
    rows[1].kv_read_fraction = 0.0675;
    let p = dir.path().join("b.csv");
    std::fs::write(&p, to_csv(&rows)).unwrap();
    let back = read_bench_csv(&p).unwrap();
    assert_eq!(back.len(), 2);
    for (a, b) in rows.iter().zip(&back) {
        assert_eq!(
            (&a.backend, &a.shape, &a.mode, a.context, a.batch),
            (&b.backend, &b.shape, &b.mode, b.context, b.batch)
        );
        assert_eq!(
            (a.weight_bytes, a.kv_bytes_read, a.prefill_tokens),
            (b.weight_bytes, b.kv_bytes_read, b.prefill_tokens)
        );
        for (x, y) in [(a.decode_ms, b.decode_ms), (a.decode_ms_mean, b.decode_ms_mean), (a.floor_ms, b.floor_ms)] {
            assert!((x - y).abs() < 1e-4, "{x} vs {y}");
        }
        assert_eq!(a.prefill_ms.map(|m| (m * 1e3).round()), b.prefill_ms.map(|m| (m * 1e3).round()));
    }
    assert_eq!(back[1].kv_read_fraction, 0.0675);
    // The first H200 CSVs have no batch / decode_ms_mean columns.
    let old = read_bench_csv(&docs("data/bench-h200-wgpu-llama3-8b-2026-11-29-session2.csv")).unwrap();
    let d = old.iter().find(|r| r.mode == "dense" && r.context == 4096).unwrap();
    assert_eq!((d.batch, d.decode_ms, d.decode_ms_mean), (1, 11.5136, 11.5136));
    let pre = old.iter().find(|r| r.mode == "prefill").unwrap();
    assert_eq!((pre.prefill_tokens, pre.prefill_ms), (4096, Some(4248.363)));
    // Missing columns and bad numbers are errors that name the file and line.
    std::fs::write(&p, "backend,mode,context\ncuda,dense,4096\n").unwrap();
    assert!(read_bench_csv(&p).unwrap_err().to_string().contains("no `decode_ms` column"));
    std::fs::write(&p, "backend,mode,context,decode_ms\ncuda,dense,4096,6.1\ncuda,dense,8k,7\n").unwrap();
    let e = read_bench_csv(&p).unwrap_err().to_string();
    assert!(e.contains("line 3") && e.contains("`8k`"), "{e}");
}

fn docs(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs").join(rel)
}

#[test]
fn compare_csv_rows_and_errors() {
    let dir = tmp();
    let p = dir.path().join("c.csv");
    std::fs::write(
        &p,
        "# anchors\nlabel,context,batch,ms_per_token,tokens_per_s,prefill_tokens,prefill_tokens_per_s,prefill_ms,extra\n\
         PyTorch,4096,,5.72,,,,,x\n\
         \"vLLM, bf16\",32768,8,,400,,,,\n\
         PyTorch prefill,,,,,4096,40157,,\n\
         llama.cpp prefill,,,,,8192,,500,\n",
    )
    .unwrap();
    let rows = read_compare(&p).unwrap();
    assert_eq!(rows.len(), 4);
    assert_eq!(rows[0], anchor("PyTorch", 4096, 1, 5.72));
    assert_eq!((rows[1].label.as_str(), rows[1].batch, rows[1].ms_per_token), ("vLLM, bf16", 8, Some(20.0)));
    assert_eq!(
        (rows[2].context, rows[2].prefill_tokens, rows[2].prefill_tokens_per_s),
        (None, Some(4096), Some(40157.0))
    );
    assert_eq!(rows[3].prefill_tokens_per_s, Some(16384.0));
    // The anchors file in docs/ reads, and so does torch_decode_bench.py's CSV layout.
    assert!(read_compare(&docs("data/anchors-h200-llama3-8b.csv")).unwrap().len() >= 6);
    std::fs::write(
        &p,
        "label,shape,context,ms_per_token,attention_ms,floor_ms\nPyTorch dense step,llama3-8b,4096,5.7,0.05,3.9\n",
    )
    .unwrap();
    assert_eq!(read_compare(&p).unwrap(), vec![anchor("PyTorch dense step", 4096, 1, 5.7)]);
    for (text, needle) in [
        ("context,ms_per_token\n4096,5\n", "no `label` column"),
        ("label,context\nx,4096\n", "line 2: needs context + ms_per_token"),
        ("label,context,ms_per_token\nx,4096,-1\n", "ms_per_token -1 must be > 0"),
        ("label,context,ms_per_token\nx,4k,5\n", "context `4k` is not a number"),
        ("label,context,ms_per_token\nx,4096,5,7\n", "found record with 4 fields"),
    ] {
        std::fs::write(&p, text).unwrap();
        let e = read_compare(&p).unwrap_err().to_string();
        assert!(e.contains(needle), "{text:?}: {e}");
    }
    assert!(read_compare(&dir.path().join("missing.csv")).is_err());
}

#[test]
fn niah_and_perplexity_charts_render() {
    let cell = |mode: &str, length, depth, correct| NiahCell {
        mode: mode.into(),
        length,
        depth,
        prompt_tokens: length,
        needle: "7".into(),
        answer: "7".into(),
        correct,
        kv_read_fraction: 1.0,
    };
    let cells = [cell("dense", 1024, 0, true), cell("dense", 8160, 100, false), cell("sparse", 1024, 0, false)];
    let mut cfg = lserve::sparse::Config::default();
    cfg.sparse.token_budget = 1024;
    let h = niah_heatmap("smollm2.gguf", &cells, &[1024, 8160], &[0, 100], Some(&cfg));
    let dir = tmp();
    let p = dir.path().join("n.svg");
    plot::heatmap(&h, &p).unwrap();
    let svg = Svg::read(&p);
    svg.assert_texts(&[
        "Needle in a haystack: smollm2.gguf",
        "1k",
        "8160",
        "0%",
        "100%",
        "n/a",
        "dense: 1/2 retrieved",
    ]);
    assert!(svg.texts.iter().any(|t| t.starts_with("sparse: token budget 1024")), "{:?}", svg.texts);
    let (points, dense) = read_ppl_csv(&docs("data/ppl-smollm2-135m-2026-11-29.csv")).unwrap();
    assert_eq!(points.len(), 9);
    assert_eq!(dense, Some(18.14));
    assert_eq!(points[0], PplPoint { setting: "streaming ratio 0".into(), budget: 256, perplexity: 27.18 });
    let c = perplexity_vs_budget("Perplexity vs token budget", "", &points, dense);
    assert_eq!(c.series.len(), 4);
    let p = dir.path().join("ppl.svg");
    plot::lines(&c, &p).unwrap();
    let svg = Svg::read(&p);
    svg.assert_texts(&["streaming ratio 0.25", "dense (18.1)", "256", "512", "1k", "27.2", "19.5"]);
    plot::lines(&c, &dir.path().join("ppl.png")).unwrap();
    assert_eq!(Png::read(&dir.path().join("ppl.png")).w, c.size().0);
}

fn lserve(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_lserve")).args(args).output().expect("lserve runs")
}

#[test]
fn plot_only_draws_the_docs_csvs() {
    let dir = tmp();
    let out = dir.path().join("charts");
    let files = [
        docs("data/bench-h200-cuda-llama3-8b-graphs-2026-11-29.csv"),
        docs("data/bench-h200-wgpu-llama3-8b-2026-11-29-session2.csv"),
    ];
    let list = files.iter().map(|p| p.to_string_lossy().into_owned()).collect::<Vec<_>>().join(",");
    let compare = docs("data/anchors-h200-llama3-8b.csv");
    let o = lserve(&[
        "bench",
        "--plot-only",
        &list,
        "--compare",
        compare.to_str().unwrap(),
        "--out-dir",
        out.to_str().unwrap(),
        "--plot-format",
        "png,svg",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for f in ["bench.png", "bench.svg", "bench-prefill.png", "bench-prefill.svg"] {
        assert!(out.join(f).exists(), "{f}");
    }
    assert!(!out.join("bench-batch.png").exists(), "batch 1 only");
    let svg = Svg::read(&out.join("bench.svg"));
    svg.assert_texts(&["cuda dense", "cuda sparse", "wgpu dense", "wgpu sparse", "floor, cuda dense", "256k", "32.7"]);
    assert!(svg.texts.iter().any(|t| t.starts_with("PyTorch")), "{:?}", svg.texts);
    let png = Png::read(&out.join("bench.png"));
    assert!(png.w >= 900 && png.h >= 560);
    // Bad input: a clear error, no panic; --plot-only needs --out-dir (a usage error).
    let bad = dir.path().join("bad.csv");
    std::fs::write(&bad, "label,context\nx,1\n").unwrap();
    let o = lserve(&["bench", "--plot-only", &list, "--compare", bad.to_str().unwrap(), "--out-dir", "/tmp/x"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("needs context") && !err.contains("panicked"), "{err}");
    assert_eq!(lserve(&["bench", "--plot-only", &list]).status.code(), Some(2));
    let o = lserve(&["bench", "--plot-only", "/nonexistent.csv", "--out-dir", "/tmp/x"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("/nonexistent.csv"));
}

#[test]
fn bench_run_writes_every_chart() {
    let dir = tmp();
    let out = dir.path().join("b");
    let o = lserve(&[
        "bench",
        "--device",
        "cpu",
        "--shape",
        "smollm2-135m",
        "--contexts",
        "64,256",
        "--batch",
        "1,2",
        "--sparse",
        "off",
        "--warmup",
        "0",
        "--repeats",
        "1",
        "--prefill",
        "64",
        "--out-dir",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for f in ["bench.csv", "bench.json", "bench.png", "bench-batch.png", "bench-prefill.png"] {
        assert!(out.join(f).exists(), "{f}");
    }
    // The CSV the run wrote re-plots to the same picture size.
    let rows = read_bench_csv(&out.join("bench.csv")).unwrap();
    assert_eq!(rows.len(), 1 + 2 * 2);
    let chart = decode_chart(&rows, &[]).unwrap();
    assert_eq!(Png::read(&out.join("bench.png")).w, chart.size().0);
}
