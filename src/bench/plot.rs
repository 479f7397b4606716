//! `bench.png`: decode ms per step as grouped bars, one group per (context, batch), dense and
//! sparse side by side, with each point's bandwidth floor drawn as a black line across its bar
//! (so the gap between bar top and line is the distance from the floor). Drawn with the NIAH
//! heatmap's canvas (no plotting dependency).

use std::path::Path;

use super::BenchRow;
use crate::error::Result;
use crate::eval::heatmap::Canvas;

const BAR: usize = 28;
const GAP: usize = 24;
const LEFT: usize = 110;
const TOP: usize = 50;
const PLOT_H: usize = 300;

fn k(n: usize) -> String {
    if n >= 1024 && n.is_multiple_of(1024) { format!("{}k", n / 1024) } else { n.to_string() }
}

/// Write the decode rows of `rows` (prefill rows are skipped) to `path`.
pub fn write_plot(path: &Path, rows: &[BenchRow]) -> Result<()> {
    let decode: Vec<&BenchRow> = rows.iter().filter(|r| !r.mode.starts_with("prefill")).collect();
    let mut groups: Vec<(usize, usize)> = vec![];
    for r in &decode {
        if !groups.contains(&(r.context, r.batch)) {
            groups.push((r.context, r.batch));
        }
    }
    let top = decode.iter().map(|r| r.decode_ms.max(r.floor_ms)).fold(0.0f64, f64::max).max(1e-3) * 1.1;
    let gw = 2 * BAR + GAP;
    let (backend, shape) = decode.first().map_or(("", ""), |r| (r.backend.as_str(), r.shape.as_str()));
    let title = format!("{backend} {shape}: decode ms per step (bar) and floor (line)");
    // The 5x7 font is drawn at scale 2: 12 pixels per character.
    let (w, h) = ((LEFT + groups.len().max(1) * gw + 20).max(20 + 12 * title.len()), TOP + PLOT_H + 60);
    let mut cv = Canvas::new(w, h);
    cv.text(10, 10, &title);
    cv.text(10, TOP - 6, &format!("{top:.1} ms"));
    cv.text(10, TOP + PLOT_H - 14, "0");
    cv.rect(LEFT - 4, TOP, 2, PLOT_H, [0, 0, 0]);
    cv.rect(LEFT - 4, TOP + PLOT_H, w - LEFT, 2, [0, 0, 0]);
    let y = |ms: f64| TOP + PLOT_H - ((ms / top) * PLOT_H as f64).round().clamp(0.0, PLOT_H as f64) as usize;
    for (gi, &(ctx, batch)) in groups.iter().enumerate() {
        let x0 = LEFT + gi * gw;
        for (bi, mode) in ["dense", "sparse"].into_iter().enumerate() {
            let Some(r) = decode.iter().find(|r| r.context == ctx && r.batch == batch && r.mode == mode) else {
                continue;
            };
            let x = x0 + bi * BAR;
            let color = if mode == "dense" { [200, 80, 70] } else { [60, 160, 90] };
            let yt = y(r.decode_ms);
            cv.rect(x + 2, yt, BAR - 4, TOP + PLOT_H - yt, color);
            cv.rect(x, y(r.floor_ms), BAR, 2, [0, 0, 0]);
        }
        let label = if batch > 1 { format!("{} b{batch}", k(ctx)) } else { k(ctx) };
        cv.text(x0, TOP + PLOT_H + 10, &label);
    }
    cv.text(LEFT, TOP + PLOT_H + 36, "red: dense  green: sparse");
    cv.save(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(mode: &str, context: usize, ms: f64) -> BenchRow {
        BenchRow {
            backend: "cpu".into(),
            shape: "t".into(),
            mode: mode.into(),
            context,
            batch: 1,
            kv_dtype: "f32".into(),
            kv_bytes_per_token: 0,
            decode_ms: ms,
            decode_ms_min: ms,
            decode_ms_mean: ms,
            weight_bytes: 0,
            kv_bytes_read: 0,
            floor_ms: ms / 2.0,
            kv_read_fraction: 1.0,
            prefill_tokens: 0,
            prefill_ms: None,
            kernels: vec![],
        }
    }

    #[test]
    fn writes_a_decodable_png() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bench.png");
        let rows = [row("dense", 4096, 6.0), row("sparse", 4096, 5.0), row("dense", 131072, 19.0)];
        write_plot(&p, &rows).unwrap();
        let dec = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&p).unwrap()));
        let info = dec.read_info().unwrap().info().clone();
        assert!(info.width as usize >= LEFT + 2 * (2 * BAR + GAP) + 20);
    }
}
