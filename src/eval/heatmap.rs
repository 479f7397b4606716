//! A small PNG heatmap writer for NIAH results: one panel per mode (dense, sparse) side by side,
//! rows = context lengths, columns = needle depths, cells coloured from red (0) to green (1),
//! grey where a cell was not run, labelled with a built-in 5x7 pixel font (no font files).

use std::path::Path;

use crate::error::{Error, Result};

/// One panel: a title and `[row][col]` accuracies in 0..=1.
pub struct Panel {
    pub title: String,
    pub cells: Vec<Vec<Option<f64>>>,
}

const CELL: usize = 40;
const MARGIN: usize = 60;
const GAP: usize = 40;
const SCALE: usize = 2;

/// 5x7 glyphs, one u8 per row (low 5 bits, MSB = leftmost pixel).
pub(crate) fn glyph(c: char) -> [u8; 7] {
    match c.to_ascii_lowercase() {
        '0' => [14, 17, 19, 21, 25, 17, 14],
        '1' => [4, 12, 4, 4, 4, 4, 14],
        '2' => [14, 17, 1, 2, 4, 8, 31],
        '3' => [30, 1, 1, 14, 1, 1, 30],
        '4' => [2, 6, 10, 18, 31, 2, 2],
        '5' => [31, 16, 30, 1, 1, 17, 14],
        '6' => [6, 8, 16, 30, 17, 17, 14],
        '7' => [31, 1, 2, 4, 8, 8, 8],
        '8' => [14, 17, 17, 14, 17, 17, 14],
        '9' => [14, 17, 17, 15, 1, 2, 12],
        'a' => [0, 0, 14, 1, 15, 17, 15],
        'b' => [16, 16, 22, 25, 17, 17, 30],
        'f' => [6, 9, 8, 28, 8, 8, 8],
        'm' => [0, 0, 26, 21, 21, 17, 17],
        'q' => [0, 0, 13, 19, 15, 1, 1],
        'v' => [0, 0, 17, 17, 17, 10, 4],
        'w' => [0, 0, 17, 17, 21, 21, 10],
        'c' => [0, 0, 14, 16, 16, 17, 14],
        'd' => [1, 1, 13, 19, 17, 17, 15],
        'e' => [0, 0, 14, 17, 31, 16, 14],
        'g' => [0, 15, 17, 17, 15, 1, 14],
        'h' => [16, 16, 22, 25, 17, 17, 17],
        'i' => [4, 0, 12, 4, 4, 4, 14],
        'k' => [16, 16, 18, 20, 24, 20, 18],
        'l' => [12, 4, 4, 4, 4, 4, 14],
        'n' => [0, 0, 22, 25, 17, 17, 17],
        'o' => [0, 0, 14, 17, 17, 17, 14],
        'p' => [0, 0, 30, 17, 30, 16, 16],
        'r' => [0, 0, 22, 25, 16, 16, 16],
        's' => [0, 0, 15, 16, 14, 1, 30],
        't' => [8, 8, 28, 8, 8, 9, 6],
        'u' => [0, 0, 17, 17, 17, 19, 13],
        'x' => [0, 0, 17, 10, 4, 10, 17],
        'y' => [0, 0, 17, 17, 15, 1, 14],
        '%' => [24, 25, 2, 4, 8, 19, 3],
        '.' => [0, 0, 0, 0, 0, 12, 12],
        ':' => [0, 12, 12, 0, 12, 12, 0],
        '-' => [0, 0, 0, 31, 0, 0, 0],
        '/' => [0, 1, 2, 4, 8, 16, 0],
        '(' => [2, 4, 8, 8, 8, 4, 2],
        ')' => [8, 4, 2, 2, 2, 4, 8],
        _ => [0; 7],
    }
}

/// An RGB raster with rectangles and 5x7-font text (also used by the bench plot).
pub(crate) struct Canvas {
    pub w: usize,
    pub h: usize,
    pub px: Vec<u8>,
}

impl Canvas {
    pub(crate) fn new(w: usize, h: usize) -> Self {
        Canvas { w, h, px: vec![255; w * h * 3] }
    }

    pub(crate) fn save(&self, path: &Path) -> Result<()> {
        let file = std::fs::File::create(path).map_err(|e| Error::io(path, e))?;
        let mut enc = png::Encoder::new(std::io::BufWriter::new(file), self.w as u32, self.h as u32);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let io = |e: png::EncodingError| Error::io(path, std::io::Error::other(e.to_string()));
        enc.write_header().map_err(io)?.write_image_data(&self.px).map_err(io)?;
        Ok(())
    }

    pub(crate) fn rect(&mut self, x: usize, y: usize, w: usize, h: usize, rgb: [u8; 3]) {
        for yy in y..(y + h).min(self.h) {
            for xx in x..(x + w).min(self.w) {
                self.px[(yy * self.w + xx) * 3..][..3].copy_from_slice(&rgb);
            }
        }
    }
    pub(crate) fn text(&mut self, x: usize, y: usize, s: &str) {
        for (i, c) in s.chars().enumerate() {
            for (row, bits) in glyph(c).iter().enumerate() {
                for col in 0..5 {
                    if bits & (1 << (4 - col)) != 0 {
                        self.rect(x + (i * 6 + col) * SCALE, y + row * SCALE, SCALE, SCALE, [0, 0, 0]);
                    }
                }
            }
        }
    }
}

fn color(v: Option<f64>) -> [u8; 3] {
    match v {
        None => [200, 200, 200],
        Some(a) => {
            let a = a.clamp(0.0, 1.0);
            [(220.0 * (1.0 - a) + 30.0 * a) as u8, (50.0 * (1.0 - a) + 180.0 * a) as u8, 60]
        }
    }
}

/// Write the panels to `path`. `rows`/`cols` label the grid (e.g. "4k", "50%").
pub fn write_heatmap(path: &Path, panels: &[Panel], rows: &[String], cols: &[String]) -> Result<()> {
    let (nr, nc) = (rows.len(), cols.len());
    let pw = nc * CELL;
    let w = MARGIN + panels.len() * (pw + GAP);
    let h = MARGIN + nr * CELL + 40;
    let mut cv = Canvas::new(w, h);
    for (k, panel) in panels.iter().enumerate() {
        let x0 = MARGIN + k * (pw + GAP);
        cv.text(x0, 10, &panel.title);
        for (c, label) in cols.iter().enumerate() {
            cv.text(x0 + c * CELL + 4, MARGIN + nr * CELL + 8, label);
        }
        for (r, row_label) in rows.iter().enumerate() {
            if k == 0 {
                cv.text(4, MARGIN + r * CELL + CELL / 2 - 7, row_label);
            }
            for c in 0..nc {
                let v = panel.cells.get(r).and_then(|row| row.get(c)).copied().flatten();
                cv.rect(x0 + c * CELL + 1, MARGIN + r * CELL + 1, CELL - 2, CELL - 2, color(v));
            }
        }
    }
    cv.text(MARGIN, MARGIN - 20, "length x depth");
    cv.save(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_decodable_png() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("h.png");
        let panels = [
            Panel { title: "dense".into(), cells: vec![vec![Some(1.0), Some(0.0)], vec![None, Some(0.5)]] },
            Panel { title: "sparse".into(), cells: vec![vec![Some(1.0), Some(1.0)], vec![Some(0.0), None]] },
        ];
        write_heatmap(&p, &panels, &["1k".into(), "2k".into()], &["0%".into(), "100%".into()]).unwrap();
        let dec = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&p).unwrap()));
        let reader = dec.read_info().unwrap();
        assert_eq!(reader.info().width as usize, MARGIN + 2 * (2 * CELL + GAP));
    }
}
