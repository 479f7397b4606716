//! Prints the KV memory one sequence needs, dense vs with streaming heads, for a model shape and
//! the default cache geometry (docs/kv-cache.md). Usage:
//!   cargo run --release --example kv_memory -- LAYERS KV_HEADS HEAD_DIM TOKENS DTYPE_BYTES
use lserve::backend::DType;
use lserve::kv::{CacheShape, HeadLayout};

fn main() {
    let a: Vec<usize> = std::env::args().skip(1).map(|s| s.parse().expect("numbers")).collect();
    let [layers, kv, hd, tokens, bytes] = a[..] else {
        eprintln!("usage: kv_memory LAYERS KV_HEADS HEAD_DIM TOKENS DTYPE_BYTES");
        std::process::exit(2);
    };
    let dtype = if bytes == 4 { DType::F32 } else { DType::BF16 };
    for ratio in [0.0, 0.25, 0.5, 0.75] {
        let n_str = ((layers * kv) as f64 * ratio).round() as usize;
        let mut layout = HeadLayout::all_retrieval(layers, kv);
        for i in 0..n_str {
            layout.streaming[i % layers][i / layers] = true;
        }
        let ring = if n_str > 0 { (128 + 256 + 512usize).div_ceil(64) * 64 } else { 0 };
        let shape = CacheShape {
            num_layers: layers,
            n_kv_heads: kv,
            head_dim: hd,
            page_size: 64,
            logical_page: 16,
            num_pages: tokens.div_ceil(64),
            max_seqs: 1,
            ring_tokens: ring,
            sink: 128,
            sel_stride: 63,
            layout,
            kv_dtype: dtype,
        };
        let b = shape.seq_bytes(tokens);
        println!(
            "streaming ratio {ratio:.2}: {:.1} MiB per {tokens}-token sequence ({} B/token)",
            b as f64 / (1 << 20) as f64,
            b / tokens
        );
    }
}
