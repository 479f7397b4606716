//! Prints the KV memory one sequence needs, dense vs with streaming heads, for a model shape and
//! the default cache geometry, per KV dtype, with the bytes one token takes (docs/kv-cache.md).
//! Usage:
//!   cargo run --release --example kv_memory -- LAYERS KV_HEADS HEAD_DIM TOKENS [DTYPE ...]
//! DTYPE: f32 | f16 | bf16 | int8 | fp8 (default: all of them).
use lserve::backend::DType;
use lserve::kv::{CacheShape, HeadLayout};

fn dtype(name: &str) -> Option<DType> {
    [DType::F32, DType::F16, DType::BF16, DType::I8, DType::F8E4M3].into_iter().find(|d| d.kv_name() == name)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let nums: Option<Vec<usize>> = args.iter().take(4).map(|s| s.parse().ok()).collect();
    let dtypes: Option<Vec<DType>> = args.iter().skip(4).map(|s| dtype(s)).collect();
    let (Some(nums), Some(mut dtypes)) = (nums, dtypes) else {
        eprintln!("usage: kv_memory LAYERS KV_HEADS HEAD_DIM TOKENS [f32|f16|bf16|int8|fp8 ...]");
        std::process::exit(2);
    };
    let [layers, kv, hd, tokens] = nums[..] else {
        eprintln!("usage: kv_memory LAYERS KV_HEADS HEAD_DIM TOKENS [f32|f16|bf16|int8|fp8 ...]");
        std::process::exit(2);
    };
    if dtypes.is_empty() {
        dtypes = vec![DType::F32, DType::F16, DType::BF16, DType::I8, DType::F8E4M3];
    }
    let bf16_token = 2 * hd * 2 * layers * kv;
    for dtype in dtypes {
        let mut line = String::new();
        let mut token_bytes = 0;
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
            token_bytes = shape.kv_bytes_per_token_head() * layers * kv;
            let b = shape.seq_bytes(tokens) as f64;
            let (v, unit) =
                if b >= (1u64 << 30) as f64 { (b / (1u64 << 30) as f64, "GiB") } else { (b / (1 << 20) as f64, "MiB") };
            line += &format!(" | ratio {ratio:.2}: {v:.1} {unit}");
        }
        println!(
            "{:>5}: {token_bytes} B/token K+V ({:.3}x bf16){line}",
            dtype.kv_name(),
            token_bytes as f64 / bf16_token as f64
        );
    }
}
