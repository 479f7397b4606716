//! Draws perplexity vs token budget from `scripts/measure_sparse.sh`'s `ppl.csv` (one line per
//! streaming ratio, values printed, the dense perplexity as a dashed line), written as PNG or SVG
//! by the output's extension (docs/sparse-attention.md). Usage:
//!   cargo run --release --example plot_ppl -- OUT/ppl.csv ppl.png ["TITLE" ["SUBTITLE"]]
use std::path::Path;
use std::process::ExitCode;

use lserve::eval::charts::{perplexity_vs_budget, read_ppl_csv};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [csv, out, rest @ ..] = &args[..] else {
        eprintln!("usage: plot_ppl PPL.csv OUT.png|OUT.svg [TITLE [SUBTITLE]]");
        return ExitCode::from(2);
    };
    let title = rest.first().map_or("Perplexity vs token budget, dense vs sparse", String::as_str);
    let subtitle = rest.get(1).map_or("one line per streaming ratio; dashed: dense attention", String::as_str);
    let drawn = read_ppl_csv(Path::new(csv)).and_then(|(points, dense)| {
        lserve::plot::lines(&perplexity_vs_budget(title, subtitle, &points, dense), Path::new(out))
    });
    match drawn {
        Ok(()) => {
            println!("wrote {out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
