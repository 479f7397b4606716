//! Charts for the docs and for users' reports: score heatmaps ([`heatmap`]) and line charts
//! ([`lines`]), drawn with `plotters` and written as PNG or SVG by the output path's extension.
//!
//! The API is two data structs and two functions; callers (bench, niah, the accuracy suite)
//! build the data, this module owns every pixel decision:
//! - [`heatmap`]`(&HeatmapData, path)`: one or more panels of `[row][col]` scores side by side,
//!   sharing the row/column ticks and one colour scale (viridis, drawn as a bar with ticks), the
//!   score printed in every cell, "n/a" on grey where a cell was not run.
//! - [`lines`]`(&LineChart, path)`: series of (x, y) points on linear, log2 or log10 axes, solid
//!   or dashed, optionally with each point's value printed beside it (placed so that labels do not
//!   overlap one another or the markers), with the legend outside the plot area.
//!
//! Invariants:
//! - Text is drawn with DejaVu Sans compiled into the binary (`fonts/DejaVuSans.ttf`, licence in
//!   `fonts/LICENSE-DejaVu.txt`), registered once with plotters' ab_glyph registry as
//!   "sans-serif" (text sizes for layout) and rasterised for PNG by `glyphs.rs` (plotters'
//!   own ab_glyph drawing misplaces glyphs): PNG text never depends on system fonts. SVG keeps
//!   text as `<text>` elements (font-family sans-serif), so labels stay selectable and
//!   searchable.
//! - A chart's size in pixels is a function of its data only ([`HeatmapData::size`],
//!   [`LineChart::size`]): the same data gives the same picture, PNG and SVG alike.
//! - Drawing never panics on data: points that a log axis cannot show (x or y <= 0) and
//!   non-finite values are left out; an unknown extension or a failed write is an `Error`.

mod glyphs;
mod heatmap;
mod lines;

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

use crate::error::{Error, Result};

pub(crate) const FONT: &[u8] = include_bytes!("fonts/DejaVuSans.ttf");
/// The family every text style here uses (the name the embedded font is registered under).
pub(crate) const FAMILY: &str = "sans-serif";

/// A grid of scores: `panels` side by side with shared axes and one colour scale.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HeatmapData {
    pub title: String,
    /// A second title line (e.g. the sparse settings); empty for none.
    pub subtitle: String,
    /// Axis names, e.g. "needle depth" (columns) and "context length" (rows).
    pub x_label: String,
    pub y_label: String,
    /// One label per column, left to right.
    pub x_ticks: Vec<String>,
    /// One label per row, top to bottom.
    pub y_ticks: Vec<String>,
    pub panels: Vec<HeatmapPanel>,
    /// The values at the two ends of the colour scale; values outside are clamped to it.
    pub range: (f64, f64),
    /// The colour bar's name, e.g. "retrieved".
    pub scale_label: String,
    pub cell_format: CellFormat,
}

/// One panel of a heatmap: a title ("dense", "sparse") and `[row][col]` values (`None` = not
/// run). Missing rows or columns count as not run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HeatmapPanel {
    pub title: String,
    pub cells: Vec<Vec<Option<f64>>>,
}

/// How a value is printed in a cell and on the colour bar.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum CellFormat {
    /// A fraction as a percentage: 0.85 -> "85%".
    #[default]
    Percent,
    /// A plain number with this many decimals.
    Decimals(usize),
}

impl CellFormat {
    pub fn format(self, v: f64) -> String {
        match self {
            CellFormat::Percent => format!("{:.0}%", 100.0 * v),
            CellFormat::Decimals(d) => format!("{v:.d$}"),
        }
    }
}

/// A line chart: `series` over one pair of axes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LineChart {
    pub title: String,
    /// A second title line; empty for none.
    pub subtitle: String,
    pub x_label: String,
    pub y_label: String,
    pub x_axis: Axis,
    pub y_axis: Axis,
    pub series: Vec<Series>,
}

/// How an axis maps values. Log2 ticks sit at powers of two and print token counts as
/// 1k = 1024 (so 131072 reads "128k"); log10 ticks at 1, 2 and 5 times powers of ten.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Axis {
    /// Linear; as a y axis it starts at 0 when every value is positive (latencies compare
    /// from zero).
    #[default]
    Linear,
    /// Linear over the data's range only (perplexities, accuracies near each other).
    LinearFit,
    Log2,
    Log10,
}

/// One line of a [`LineChart`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Series {
    /// The legend entry.
    pub name: String,
    /// (x, y) points; drawn in x order.
    pub points: Vec<(f64, f64)>,
    /// Index into the chart palette (10 colours, wrapping), so related series (a measurement
    /// and its floor) can share a colour.
    pub color: usize,
    pub dashed: bool,
    /// Draw a marker at every point.
    pub markers: bool,
    /// Print each point's y value beside it.
    pub label_values: bool,
}

/// Draw `data` to `path` (`.png` or `.svg`).
pub fn heatmap(data: &HeatmapData, path: &Path) -> Result<()> {
    render(data, path)
}

/// Draw `chart` to `path` (`.png` or `.svg`).
pub fn lines(chart: &LineChart, path: &Path) -> Result<()> {
    render(chart, path)
}

/// Tableau 10: distinct hues that survive greyscale printing reasonably.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

pub(crate) fn palette(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// A chart that knows its size and how to draw itself on any plotters backend.
pub(crate) trait Chart {
    fn size(&self) -> (u32, u32);
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB>;
}

pub(crate) type DrawResult<DB> = std::result::Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Format {
    Png,
    Svg,
}

fn format_of(path: &Path) -> Result<Format> {
    match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
        Some("png") => Ok(Format::Png),
        Some("svg") => Ok(Format::Svg),
        _ => Err(Error::InvalidArgument(format!("{}: a chart is written as .png or .svg", path.display()))),
    }
}

/// Register the embedded font once; every later call sees the first result.
fn register_font() -> Result<()> {
    static DONE: OnceLock<bool> = OnceLock::new();
    let ok = *DONE.get_or_init(|| plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_ok());
    if ok { Ok(()) } else { Err(Error::InvalidArgument("the embedded chart font did not parse".into())) }
}

/// A text style in the embedded font.
pub(crate) fn font(size: u32) -> TextStyle<'static> {
    TextStyle::from((FAMILY, size).into_font())
}

/// Width and height of `text` in the embedded font at `size` pixels (0 when it cannot be measured).
pub(crate) fn text_size(text: &str, size: u32) -> (u32, u32) {
    if register_font().is_err() {
        return (0, 0);
    }
    (FAMILY, size).into_font().box_size(text).unwrap_or((0, 0))
}

fn render<C: Chart>(chart: &C, path: &Path) -> Result<()> {
    let format = format_of(path)?;
    register_font()?;
    let (w, h) = chart.size();
    let drawn = |e: String| Error::io(path, std::io::Error::other(format!("drawing the chart: {e}")));
    match format {
        Format::Svg => {
            let mut svg = String::new();
            {
                let root = SVGBackend::with_string(&mut svg, (w, h)).into_drawing_area();
                root.fill(&WHITE).map_err(|e| drawn(e.to_string()))?;
                chart.draw(&root).map_err(|e| drawn(e.to_string()))?;
                root.present().map_err(|e| drawn(e.to_string()))?;
            }
            std::fs::write(path, svg).map_err(|e| Error::io(path, e))
        }
        Format::Png => {
            let mut rgb = vec![255u8; w as usize * h as usize * 3];
            {
                let root = glyphs::Glyphs(BitMapBackend::with_buffer(&mut rgb, (w, h))).into_drawing_area();
                root.fill(&WHITE).map_err(|e| drawn(e.to_string()))?;
                chart.draw(&root).map_err(|e| drawn(e.to_string()))?;
                root.present().map_err(|e| drawn(e.to_string()))?;
            }
            write_png(path, w, h, &rgb)
        }
    }
}

fn write_png(path: &Path, w: u32, h: u32, rgb: &[u8]) -> Result<()> {
    let file = std::fs::File::create(path).map_err(|e| Error::io(path, e))?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let io = |e: png::EncodingError| Error::io(path, std::io::Error::other(e.to_string()));
    let mut writer = enc.write_header().map_err(io)?;
    writer.write_image_data(rgb).map_err(io)?;
    writer.finish().map_err(io)
}

/// A count as the docs write it: 1k = 1024 when it divides evenly, 1M = 1024k.
pub fn fmt_count(n: f64) -> String {
    let r = n.round();
    if (n - r).abs() > 1e-9 || r < 0.0 {
        return fmt_number(n);
    }
    let r = r as u64;
    if r < 1024 {
        r.to_string()
    } else if r.is_multiple_of(1 << 20) {
        format!("{}M", r >> 20)
    } else if r.is_multiple_of(1024) {
        format!("{}k", r >> 10)
    } else {
        r.to_string()
    }
}

/// A tick value of a log10 axis (1, 2 or 5 times a power of ten) in the fewest digits.
pub(crate) fn fmt_tick(v: f64) -> String {
    if v >= 1.0 {
        format!("{v:.0}")
    } else {
        let d = (-v.log10()).ceil().max(1.0) as usize;
        format!("{v:.d$}")
    }
}

/// A measured value with three significant digits at most (6.07, 19.3, 270, 12345).
pub fn fmt_number(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_counts_and_values() {
        assert_eq!(fmt_count(131072.0), "128k");
        assert_eq!(fmt_count(4.0 * 1048576.0), "4M");
        assert_eq!(fmt_count(8160.0), "8160");
        assert_eq!(fmt_count(16.0), "16");
        assert_eq!(fmt_count(2.5), "2.50");
        assert_eq!((fmt_tick(20.0), fmt_tick(0.05), fmt_tick(0.2)), ("20".into(), "0.05".into(), "0.2".into()));
        assert_eq!(fmt_number(6.0721), "6.07");
        assert_eq!(fmt_number(19.2732), "19.3");
        assert_eq!(fmt_number(270.387), "270");
        assert_eq!(CellFormat::Percent.format(0.85), "85%");
        assert_eq!(CellFormat::Decimals(2).format(18.137), "18.14");
    }

    #[test]
    fn refuses_unknown_extensions() {
        let e = lines(&LineChart::default(), Path::new("/tmp/chart.jpg")).unwrap_err();
        assert!(e.to_string().contains(".png or .svg"), "{e}");
    }
}
