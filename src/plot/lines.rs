//! Line chart layout and drawing (API in the parent module). Log axes are drawn as linear axes
//! over log2/log10 of the data with ticks chosen here, so tick positions and labels are exact
//! (powers of two print as 4k, 128k). Value labels are placed greedily: above the point, else
//! below, right, left, further above or below — the first spot that overlaps no marker and no
//! earlier label and stays inside the plot.

use plotters::coord::Shift;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{Axis, Chart, DrawResult, LineChart, Series, fmt_count, fmt_number, fmt_tick, font, palette, text_size};

const W: u32 = 900;
const H: u32 = 560;
const MARGIN: u32 = 16;
const TITLE: u32 = 22;
const SUBTITLE: u32 = 16;
const AXIS: u32 = 16;
const TICK: u32 = 14;
const VALUE: u32 = 13;
const LEGEND: u32 = 14;
const LEGEND_ROW: u32 = 22;
const LEGEND_SAMPLE: u32 = 34;

fn to_axis(axis: Axis, v: f64) -> Option<f64> {
    let t = match axis {
        Axis::Linear | Axis::LinearFit => v,
        Axis::Log2 if v > 0.0 => v.log2(),
        Axis::Log10 if v > 0.0 => v.log10(),
        _ => return None,
    };
    t.is_finite().then_some(t)
}

/// The 1-2-2.5-5 step nearest (by ratio) to `span / n`.
fn nice_step(span: f64, n: f64) -> f64 {
    let raw = (span / n).max(f64::MIN_POSITIVE);
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let off = |m: f64| (m / f).ln().abs();
    let m = [1.0, 2.0, 2.5, 5.0, 10.0].into_iter().min_by(|a, b| off(*a).total_cmp(&off(*b))).unwrap_or(1.0);
    m * mag
}

/// An axis in axis space: its range, tick positions and the linear tick step (for decimals).
/// As a plotters coordinate it maps linearly and offers exactly these ticks (no light lines).
#[derive(Clone)]
struct Ticks {
    lo: f64,
    hi: f64,
    at: Vec<f64>,
    step: f64,
}

impl Ranged for Ticks {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, (a, b): (i32, i32)) -> i32 {
        let t = if self.hi > self.lo { (v - self.lo) / (self.hi - self.lo) } else { 0.5 };
        a + ((b - a) as f64 * t).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() { vec![] } else { self.at.clone() }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }
}

fn linear_ticks(lo: f64, hi: f64) -> Ticks {
    let step = nice_step(hi - lo, 6.0);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step + 1e-9).floor() as i64;
    let at = (first..=last).map(|i| i as f64 * step).collect();
    Ticks { lo, hi, at, step }
}

fn x_ticks(axis: Axis, xs: &[f64]) -> Ticks {
    let (min, max) = min_max(xs).unwrap_or((0.0, 1.0));
    match axis {
        Axis::Linear | Axis::LinearFit => {
            let pad = if max > min { 0.05 * (max - min) } else { 1.0 };
            linear_ticks(min - pad, max + pad)
        }
        Axis::Log2 | Axis::Log10 => {
            let pad = if max > min { 0.35 } else { 1.0 };
            log_ticks(axis, min - pad, max + pad, xs)
        }
    }
}

fn y_ticks(axis: Axis, ys: &[f64]) -> Ticks {
    let (min, max) = min_max(ys).unwrap_or((0.0, 1.0));
    match axis {
        // Room above the top value for its label.
        Axis::Linear if min >= 0.0 => linear_ticks(0.0, if max > 0.0 { max * 1.15 } else { 1.0 }),
        Axis::Linear | Axis::LinearFit => {
            let pad = if max > min { 0.1 * (max - min) } else { 1.0 };
            linear_ticks(min - pad, max + pad + pad)
        }
        Axis::Log2 | Axis::Log10 => {
            let span = if max > min { max - min } else { 1.0 };
            log_ticks(axis, min - 0.08 * span, max + 0.18 * span, ys)
        }
    }
}

/// Powers of the base inside [lo, hi] (log2: every one, thinned to at most 12; log10: 1, 2, 5
/// times each); where fewer than two fall inside, the data values themselves.
fn log_ticks(axis: Axis, lo: f64, hi: f64, data: &[f64]) -> Ticks {
    let mut at: Vec<f64> = match axis {
        Axis::Log2 => {
            let all: Vec<f64> = (lo.ceil() as i64..=hi.floor() as i64).map(|e| e as f64).collect();
            let every = all.len().div_ceil(12).max(1);
            all.into_iter().step_by(every).collect()
        }
        _ => (lo.floor() as i64..=hi.ceil() as i64)
            .flat_map(|e| [1.0f64, 2.0, 5.0].map(|m| (m * 10f64.powi(e as i32)).log10()))
            .filter(|t| (lo..=hi).contains(t))
            .collect(),
    };
    if at.len() < 2 {
        at = data.to_vec();
        at.sort_by(f64::total_cmp);
        at.dedup();
    }
    Ticks { lo, hi, at, step: 1.0 }
}

fn min_max(v: &[f64]) -> Option<(f64, f64)> {
    let min = v.iter().copied().reduce(f64::min)?;
    Some((min, v.iter().copied().fold(min, f64::max)))
}

fn tick_label(axis: Axis, v: f64, step: f64) -> String {
    match axis {
        Axis::Linear | Axis::LinearFit => {
            // The fewest decimals that write the step exactly (2.5 -> 1, 0.25 -> 2, 5 -> 0).
            let exact = |d: &usize| {
                let s = step * 10f64.powi(*d as i32);
                (s - s.round()).abs() < 1e-6 * s.max(1.0)
            };
            let d = (0..6).find(exact).unwrap_or(6);
            format!("{:.*}", d, if v.abs() < step * 1e-6 { 0.0 } else { v })
        }
        Axis::Log2 => fmt_count(v.exp2()),
        Axis::Log10 => fmt_tick(10f64.powf(v)),
    }
}

impl LineChart {
    /// The drawable points of `s` in axis space, sorted by x.
    fn points(&self, s: &Series) -> Vec<(f64, f64)> {
        let mut p: Vec<(f64, f64)> =
            s.points.iter().filter_map(|&(x, y)| Some((to_axis(self.x_axis, x)?, to_axis(self.y_axis, y)?))).collect();
        p.sort_by(|a, b| a.0.total_cmp(&b.0));
        p
    }

    fn legend_width(&self) -> u32 {
        let names = self.series.iter().map(|s| text_size(&s.name, LEGEND).0).max().unwrap_or(0);
        if self.series.is_empty() { 0 } else { LEGEND_SAMPLE + 8 + names + 12 }
    }

    fn top(&self) -> u32 {
        MARGIN + TITLE + 6 + if self.subtitle.is_empty() { 0 } else { SUBTITLE + 8 } + 6
    }

    fn ticks(&self) -> (Ticks, Ticks) {
        let all: Vec<(f64, f64)> = self.series.iter().flat_map(|s| self.points(s)).collect();
        let xs: Vec<f64> = all.iter().map(|p| p.0).collect();
        let ys: Vec<f64> = all.iter().map(|p| p.1).collect();
        (x_ticks(self.x_axis, &xs), y_ticks(self.y_axis, &ys))
    }
}

impl LineChart {
    /// The picture's width and height in pixels (PNG pixels, SVG user units): 900 x 560 plus the
    /// legend's width, wider for a long title, taller for a long legend.
    pub fn size(&self) -> (u32, u32) {
        let heads = text_size(&self.title, TITLE).0.max(text_size(&self.subtitle, SUBTITLE).0);
        let rows = self.series.len() as u32 * LEGEND_ROW + 2 * MARGIN + self.top();
        ((W + self.legend_width()).max(heads + 2 * MARGIN), H.max(rows))
    }
}

impl Chart for LineChart {
    fn size(&self) -> (u32, u32) {
        LineChart::size(self)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        let (w, _) = self.size();
        let top_style = font(TITLE).pos(Pos::new(HPos::Left, VPos::Top));
        root.draw(&Text::new(self.title.clone(), (MARGIN as i32, MARGIN as i32), top_style))?;
        if !self.subtitle.is_empty() {
            let pos = (MARGIN as i32, (MARGIN + TITLE + 6) as i32);
            root.draw(&Text::new(self.subtitle.clone(), pos, font(SUBTITLE).pos(Pos::new(HPos::Left, VPos::Top))))?;
        }
        let body = root.margin(self.top(), MARGIN, MARGIN, MARGIN);
        let (plot, legend) = body.split_horizontally(w - 2 * MARGIN - self.legend_width());
        let (xt, yt) = self.ticks();
        let ytick_w = yt.at.iter().map(|&v| text_size(&tick_label(self.y_axis, v, yt.step), TICK).0).max();
        let mut cc = ChartBuilder::on(&plot)
            .margin_top(8)
            .margin_right(16)
            .x_label_area_size(52)
            .y_label_area_size(ytick_w.unwrap_or(0) + 40)
            .build_cartesian_2d(xt.clone(), yt.clone())?;
        let fx = |v: &f64| tick_label(self.x_axis, *v, xt.step);
        let fy = |v: &f64| tick_label(self.y_axis, *v, yt.step);
        cc.configure_mesh()
            .x_desc(self.x_label.clone())
            .y_desc(self.y_label.clone())
            .x_label_formatter(&fx)
            .y_label_formatter(&fy)
            .label_style(font(TICK))
            .axis_desc_style(font(AXIS))
            .bold_line_style(RGBColor(228, 228, 228))
            .draw()?;
        let mut placed = vec![];
        let mut ink = vec![];
        for s in &self.series {
            let pts = self.points(s);
            let px: Vec<(i32, i32)> = pts.iter().map(|p| cc.backend_coord(p)).collect();
            ink.extend(px.windows(2).flat_map(|w| samples(w[0], w[1])));
            let style = palette(s.color).stroke_width(2);
            if s.dashed {
                cc.draw_series(DashedLineSeries::new(pts.clone(), 9, 6, style))?;
            } else {
                cc.draw_series(LineSeries::new(pts.clone(), style))?;
            }
            if s.markers {
                cc.draw_series(pts.iter().map(|&p| Circle::new(p, 4, palette(s.color).filled())))?;
                placed.extend(pts.iter().map(|p| marker_box(cc.backend_coord(p))));
            }
        }
        let area = cc.plotting_area().get_pixel_range();
        for s in self.series.iter().filter(|s| s.label_values) {
            for p in self.points(s) {
                let value = fmt_number(axis_value(self.y_axis, p.1));
                let at = cc.backend_coord(&p);
                // Height: the font's ascent to descent (what `glyphs.rs` draws), not the estimate.
                let (tw, th) = (text_size(&value, VALUE).0 as i32, VALUE as i32 + 1);
                let b = place((at, tw, th), &placed, &ink, &area);
                placed.push(b);
                // A translucent white ground keeps the digits legible over grid and lines.
                root.draw(&Rectangle::new([(b.0 - 1, b.1), (b.2 + 1, b.3)], WHITE.mix(0.8).filled()))?;
                let color = palette(s.color);
                let style = font(VALUE).color(&color).pos(Pos::new(HPos::Left, VPos::Top));
                root.draw(&Text::new(value, (b.0, b.1), style))?;
            }
        }
        self.draw_legend(&legend)
    }
}

/// The y value a point in axis space stands for.
fn axis_value(axis: Axis, t: f64) -> f64 {
    match axis {
        Axis::Linear | Axis::LinearFit => t,
        Axis::Log2 => t.exp2(),
        Axis::Log10 => 10f64.powf(t),
    }
}

/// A box (x0, y0, x1, y1) in pixels.
type Boxed = (i32, i32, i32, i32);

fn marker_box((x, y): (i32, i32)) -> Boxed {
    (x - 5, y - 5, x + 5, y + 5)
}

fn overlaps(a: &Boxed, b: &Boxed) -> bool {
    a.0 < b.2 && b.0 < a.2 && a.1 < b.3 && b.1 < a.3
}

/// Pixels every 3 along the segment a-b (the line a label should not cover).
fn samples(a: (i32, i32), b: (i32, i32)) -> Vec<(i32, i32)> {
    let n = ((b.0 - a.0).abs().max((b.1 - a.1).abs()) / 3).max(1);
    (0..=n).map(|i| (a.0 + (b.0 - a.0) * i / n, a.1 + (b.1 - a.1) * i / n)).collect()
}

type PixelArea = (std::ops::Range<i32>, std::ops::Range<i32>);

/// Where a `w` x `h` label of the point at `(x, y)` goes, among a ring of candidates (above,
/// below, right, left, the diagonals, then farther out) inside the plot: the first that covers
/// no marker or earlier label (`placed`) and the fewest line pixels (`ink`); failing that, the
/// one that covers the fewest boxes.
fn place(((x, y), w, h): ((i32, i32), i32, i32), placed: &[Boxed], ink: &[(i32, i32)], area: &PixelArea) -> Boxed {
    let mut spots = vec![];
    for k in 0..3 {
        let (g, v) = (8 + k * (h + 2), k * (h + 2));
        spots.extend([
            (x - w / 2, y - g - h),
            (x - w / 2, y + g),
            (x + g, y - h / 2 - v),
            (x - g - w, y - h / 2 - v),
            (x + 6 + v, y - 6 - h - v),
            (x + 6 + v, y + 6 + v),
            (x - 6 - w - v, y - 6 - h - v),
            (x - 6 - w - v, y + 6 + v),
        ]);
    }
    let boxes: Vec<Boxed> = spots.into_iter().map(|(bx, by)| (bx, by, bx + w, by + h)).collect();
    let inside = |b: &Boxed| b.0 >= area.0.start && b.2 <= area.0.end && b.1 >= area.1.start && b.3 <= area.1.end;
    let hits = |b: &Boxed| placed.iter().filter(|p| overlaps(b, p)).count();
    let covered = |b: &Boxed| ink.iter().filter(|p| p.0 >= b.0 && p.0 < b.2 && p.1 >= b.1 && p.1 < b.3).count();
    let cost = |b: &Boxed| 1_000_000 * hits(b) + covered(b);
    // min_by_key keeps the first of equal costs: the nearer candidate wins ties.
    boxes.iter().filter(|b| inside(b)).min_by_key(|b| cost(b)).copied().unwrap_or(boxes[0])
}

impl LineChart {
    fn draw_legend<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        for (i, s) in self.series.iter().enumerate() {
            let y = 16 + (i as u32 * LEGEND_ROW) as i32;
            let (x0, x1) = (8, 8 + LEGEND_SAMPLE as i32);
            let style = palette(s.color).stroke_width(2);
            if s.dashed {
                for k in 0..3 {
                    let a = x0 + k * 13;
                    area.draw(&PathElement::new(vec![(a, y), ((a + 8).min(x1), y)], style))?;
                }
            } else {
                area.draw(&PathElement::new(vec![(x0, y), (x1, y)], style))?;
            }
            if s.markers {
                area.draw(&Circle::new(((x0 + x1) / 2, y), 4, palette(s.color).filled()))?;
            }
            let text = font(LEGEND).pos(Pos::new(HPos::Left, VPos::Center));
            area.draw(&Text::new(s.name.clone(), (x1 + 8, y), text))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round() {
        let t = linear_ticks(0.0, 37.7);
        assert_eq!(t.at, vec![0.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 35.0]);
        assert_eq!(tick_label(Axis::Linear, 35.0, t.step), "35");
        assert_eq!(tick_label(Axis::Linear, 0.5, 0.25), "0.50");
        assert_eq!(tick_label(Axis::Linear, 7.5, 2.5), "7.5");
        let t = log_ticks(Axis::Log2, 11.65, 18.35, &[12.0, 18.0]);
        assert_eq!(t.at, (12..=18).map(f64::from).collect::<Vec<_>>());
        assert_eq!(tick_label(Axis::Log2, 17.0, 1.0), "128k");
        // One point that is no power of two: the tick is the point itself.
        let t = log_ticks(Axis::Log2, 700f64.log2() - 0.3, 700f64.log2() + 0.3, &[700f64.log2()]);
        assert_eq!(tick_label(Axis::Log2, t.at[0], 1.0), "700");
        let t = log_ticks(Axis::Log10, 2.9, 4.6, &[]);
        let labels: Vec<String> = t.at.iter().map(|&v| tick_label(Axis::Log10, v, 1.0)).collect();
        assert_eq!(labels, ["1000", "2000", "5000", "10000", "20000"]);
    }

    #[test]
    fn labels_avoid_each_other() {
        let area = (0..500, 0..500);
        let a = place(((100, 100), 30, 12), &[], &[], &area);
        assert_eq!(a, (85, 80, 115, 92), "above the point when free");
        let b = place(((100, 104), 30, 12), &[a], &[], &area);
        assert!(!overlaps(&a, &b), "{a:?} {b:?}");
        // At the top edge the label goes below the point.
        let c = place(((100, 5), 30, 12), &[], &[], &area);
        assert!(c.1 > 5, "{c:?}");
        // A line through the spot above pushes the label elsewhere.
        let line = samples((60, 86), (140, 86));
        let d = place(((100, 100), 30, 12), &[], &line, &area);
        assert!(!line.iter().any(|p| p.0 >= d.0 && p.0 < d.2 && p.1 >= d.1 && p.1 < d.3), "{d:?}");
    }
}
