//! Heatmap layout and drawing (API in the parent module). Everything is placed in pixels from the
//! data: cells are wide enough for their longest label or value, panels sit side by side with
//! the row ticks on the left of the first one, the colour bar and its ticks on the right.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{Chart, DrawResult, HeatmapData, font, text_size};

const MARGIN: u32 = 16;
const CELL_H: u32 = 44;
const MIN_CELL_W: u32 = 64;
const PANEL_GAP: u32 = 28;
const BAR_W: u32 = 22;
const MIN_BAR_H: u32 = 176;
const TITLE: u32 = 22;
const SUBTITLE: u32 = 16;
const AXIS: u32 = 16;
const TICK: u32 = 14;
const CELL_TEXT: u32 = 15;
const SCALE_TICKS: usize = 5;

struct Layout {
    nr: usize,
    nc: usize,
    cell_w: u32,
    /// x of the first panel's left edge and y of the grid's top edge.
    left: u32,
    top: u32,
    panel_w: u32,
    grid_h: u32,
    bar_x: u32,
    bar_h: u32,
    w: u32,
    h: u32,
}

impl HeatmapData {
    fn range(&self) -> (f64, f64) {
        let (lo, hi) = self.range;
        if lo.is_finite() && hi.is_finite() && hi > lo { (lo, hi) } else { (0.0, 1.0) }
    }

    fn scale_ticks(&self) -> Vec<f64> {
        let (lo, hi) = self.range();
        (0..SCALE_TICKS).map(|j| lo + (hi - lo) * j as f64 / (SCALE_TICKS - 1) as f64).collect()
    }

    fn layout(&self) -> Layout {
        let widest = |texts: &mut dyn Iterator<Item = String>, size| texts.map(|t| text_size(&t, size).0).max();
        let nr = self.panels.iter().map(|p| p.cells.len()).chain([self.y_ticks.len(), 1]).max().unwrap_or(1);
        let cols = self.panels.iter().flat_map(|p| p.cells.iter().map(Vec::len));
        let nc = cols.chain([self.x_ticks.len(), 1]).max().unwrap_or(1);
        let values = self.panels.iter().flat_map(|p| p.cells.iter().flatten().flatten());
        let value_w = widest(&mut values.map(|&v| self.cell_format.format(v)), CELL_TEXT).unwrap_or(0);
        let xtick_w = widest(&mut self.x_ticks.iter().cloned(), TICK).unwrap_or(0);
        let cell_w = (value_w.max(xtick_w) + 14).max(MIN_CELL_W);
        let ytick_w = widest(&mut self.y_ticks.iter().cloned(), TICK).unwrap_or(0);
        let left = MARGIN + AXIS + 12 + ytick_w + 8;
        let sub_h = if self.subtitle.is_empty() { 0 } else { SUBTITLE + 8 };
        let top = MARGIN + TITLE + 6 + sub_h + 12 + AXIS + 8;
        let np = self.panels.len().max(1) as u32;
        let panel_w = nc as u32 * cell_w;
        // Panel titles may be wider than their grid: widen the gap rather than overlap.
        let title_w = widest(&mut self.panels.iter().map(|p| p.title.clone()), AXIS).unwrap_or(0);
        let panel_w = panel_w.max(title_w.saturating_sub(PANEL_GAP / 2));
        let grid_h = nr as u32 * CELL_H;
        let bar_x = left + np * panel_w + (np - 1) * PANEL_GAP + 32;
        let scale_w =
            widest(&mut self.scale_ticks().into_iter().map(|v| self.cell_format.format(v)), TICK).unwrap_or(0);
        let right = bar_x + BAR_W + 10 + scale_w + 12 + AXIS + MARGIN;
        let heads = [text_size(&self.title, TITLE).0, text_size(&self.subtitle, SUBTITLE).0];
        let w = right.max(2 * MARGIN + heads[0].max(heads[1]));
        let bar_h = grid_h.max(MIN_BAR_H);
        let h = top + bar_h.max(grid_h + 10 + TICK + 12 + AXIS) + MARGIN;
        Layout { nr, nc, cell_w, left, top, panel_w, grid_h, bar_x, bar_h, w, h }
    }
}

fn cell_color(v: f64, (lo, hi): (f64, f64)) -> RGBColor {
    ViridisRGB::get_color_normalized(v.clamp(lo, hi), lo, hi)
}

/// Black on light cells, white on dark ones.
fn ink(c: RGBColor) -> RGBColor {
    let luma = 0.299 * c.0 as f64 + 0.587 * c.1 as f64 + 0.114 * c.2 as f64;
    if luma < 140.0 { WHITE } else { BLACK }
}

fn at(h: HPos, v: VPos, size: u32) -> TextStyle<'static> {
    font(size).pos(Pos::new(h, v))
}

fn px(x: u32, y: u32) -> (i32, i32) {
    (x as i32, y as i32)
}

impl HeatmapData {
    /// The picture's width and height in pixels (PNG pixels, SVG user units).
    pub fn size(&self) -> (u32, u32) {
        let l = self.layout();
        (l.w, l.h)
    }
}

impl Chart for HeatmapData {
    fn size(&self) -> (u32, u32) {
        HeatmapData::size(self)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        let l = self.layout();
        root.draw(&Text::new(self.title.clone(), px(MARGIN, MARGIN), at(HPos::Left, VPos::Top, TITLE)))?;
        if !self.subtitle.is_empty() {
            let y = MARGIN + TITLE + 6;
            root.draw(&Text::new(self.subtitle.clone(), px(MARGIN, y), at(HPos::Left, VPos::Top, SUBTITLE)))?;
        }
        let range = self.range();
        for (k, panel) in self.panels.iter().enumerate() {
            let x0 = l.left + k as u32 * (l.panel_w + PANEL_GAP);
            let grid_w = l.nc as u32 * l.cell_w;
            let cx = x0 + grid_w / 2;
            root.draw(&Text::new(panel.title.clone(), px(cx, l.top - 8), at(HPos::Center, VPos::Bottom, AXIS)))?;
            for r in 0..l.nr {
                for c in 0..l.nc {
                    let v = panel.cells.get(r).and_then(|row| row.get(c)).copied().flatten().filter(|v| v.is_finite());
                    let (x, y) = (x0 + c as u32 * l.cell_w, l.top + r as u32 * CELL_H);
                    let fill = v.map_or(RGBColor(225, 225, 225), |v| cell_color(v, range));
                    let rect = [px(x + 1, y + 1), px(x + l.cell_w - 1, y + CELL_H - 1)];
                    root.draw(&Rectangle::new(rect, fill.filled()))?;
                    let (text, color) = v.map_or(("n/a".to_string(), RGBColor(110, 110, 110)), |v| {
                        (self.cell_format.format(v), ink(fill))
                    });
                    let centre = px(x + l.cell_w / 2, y + CELL_H / 2);
                    root.draw(&Text::new(text, centre, at(HPos::Center, VPos::Center, CELL_TEXT).color(&color)))?;
                }
            }
            let ty = l.top + l.grid_h + 10;
            for (c, label) in self.x_ticks.iter().enumerate() {
                let x = x0 + c as u32 * l.cell_w + l.cell_w / 2;
                root.draw(&Text::new(label.clone(), px(x, ty), at(HPos::Center, VPos::Top, TICK)))?;
            }
            let ay = ty + TICK + 12;
            root.draw(&Text::new(self.x_label.clone(), px(cx, ay), at(HPos::Center, VPos::Top, AXIS)))?;
        }
        for (r, label) in self.y_ticks.iter().enumerate() {
            let y = l.top + r as u32 * CELL_H + CELL_H / 2;
            root.draw(&Text::new(label.clone(), px(l.left - 8, y), at(HPos::Right, VPos::Center, TICK)))?;
        }
        let ylabel = at(HPos::Center, VPos::Center, AXIS).transform(FontTransform::Rotate270);
        root.draw(&Text::new(self.y_label.clone(), px(MARGIN + AXIS / 2, l.top + l.grid_h / 2), ylabel))?;
        self.draw_scale(root, &l)
    }
}

impl HeatmapData {
    /// The colour bar: a gradient from the top of the range (top) to the bottom, ticks and name.
    fn draw_scale<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, l: &Layout) -> DrawResult<DB> {
        let (lo, hi) = self.range();
        let (x, y0, h) = (l.bar_x, l.top, l.bar_h);
        for i in 0..h {
            let v = hi - (hi - lo) * i as f64 / (h - 1).max(1) as f64;
            root.draw(&Rectangle::new([px(x, y0 + i), px(x + BAR_W, y0 + i + 1)], cell_color(v, (lo, hi)).filled()))?;
        }
        root.draw(&Rectangle::new([px(x, y0), px(x + BAR_W, y0 + h)], BLACK.stroke_width(1)))?;
        for v in self.scale_ticks() {
            let y = y0 + ((hi - v) / (hi - lo) * (h - 1) as f64).round() as u32;
            root.draw(&PathElement::new(vec![px(x + BAR_W, y), px(x + BAR_W + 5, y)], BLACK.stroke_width(1)))?;
            let label = self.cell_format.format(v);
            root.draw(&Text::new(label, px(x + BAR_W + 8, y), at(HPos::Left, VPos::Center, TICK)))?;
        }
        let scale_w =
            self.scale_ticks().into_iter().map(|v| text_size(&self.cell_format.format(v), TICK).0).max().unwrap_or(0);
        let lx = x + BAR_W + 10 + scale_w + 12 + AXIS / 2;
        let style = at(HPos::Center, VPos::Center, AXIS).transform(FontTransform::Rotate270);
        root.draw(&Text::new(self.scale_label.clone(), px(lx, y0 + h / 2), style))?;
        Ok(())
    }
}
