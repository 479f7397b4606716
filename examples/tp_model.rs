//! Writes a small random-weight Llama GGUF for tensor-parallel checks on machines without a model
//! download (scripts/tp_gpu.sh): the tokenizer and chat template of a GGUF given (a vocab-only
//! file from `lserve vocab-only` is enough), 2 layers, hidden 768, 12 query / 6 KV heads (head_dim
//! 64), FFN 1536, tied embeddings; the embedding random Q4_0 blocks and the layers' matrices
//! random Q8_0 blocks (Q8_0's random codes are centred; Q4_0's share a mean that would swamp the
//! layers' outputs, while on the tied table it shifts every logit alike): about 33 MB with
//! SmolLM2's 49152-token vocabulary. Heads, KV heads, FFN and vocabulary divide by 2 and by 3, so
//! TP=2 and TP=3 both shard it. Deterministic: the same file every run.
//! Usage:
//!   cargo run --release --example tp_model -- VOCAB.gguf OUT.gguf
use lserve::backend::reference::weight_quant;
use lserve::backend::{DType, GgmlType};
use lserve::loader::gguf::write::{TensorData, to_bytes};
use lserve::loader::gguf::{GgufFile, GgufValue};

const LAYERS: u32 = 2;
const HIDDEN: u64 = 768;
const FFN: u64 = 1536;
const HEADS: u32 = 12;
const KV_HEADS: u32 = 6;

/// A random matrix of `rows` x `cols` in GGML type `t` (GGUF dims are [cols, rows]).
fn random(name: &str, t: GgmlType, rows: u64, cols: u64, seed: u64) -> TensorData {
    let bytes = weight_quant::random_weights(DType::Ggml(t), rows as usize, cols as usize, seed)
        .expect("cols are whole blocks");
    let ty_id = if t == GgmlType::Q4_0 { 2 } else { 8 };
    TensorData { name: name.into(), dims: vec![cols, rows], ty_id, bytes }
}

fn q8(name: &str, rows: u64, cols: u64, seed: u64) -> TensorData {
    random(name, GgmlType::Q8_0, rows, cols, seed)
}

/// An f32 norm weight near 1.
fn norm(name: &str, seed: u64) -> TensorData {
    let v: Vec<u8> = (0..HIDDEN)
        .flat_map(|i| (1.0f32 + ((i * 7919 + seed * 104729) % 201) as f32 / 1000.0 - 0.1).to_le_bytes())
        .collect();
    TensorData { name: name.into(), dims: vec![HIDDEN], ty_id: 0, bytes: v }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [vocab_file, out] = &args[..] else {
        eprintln!("usage: tp_model VOCAB.gguf OUT.gguf");
        std::process::exit(2);
    };
    let g = GgufFile::open(std::path::Path::new(vocab_file)).expect("the vocabulary GGUF opens");
    let vocab = match g.metadata.get("tokenizer.ggml.tokens") {
        Some(GgufValue::Array(t)) => t.len() as u64,
        _ => panic!("{vocab_file} has no tokenizer.ggml.tokens"),
    };
    let keep = |k: &str| k.starts_with("tokenizer.") || k == "general.alignment";
    let mut meta: Vec<(String, GgufValue)> =
        g.metadata.iter().filter(|(k, _)| keep(k)).map(|(k, v)| (k.clone(), v.clone())).collect();
    let s = |x: &str| GgufValue::String(x.into());
    meta.extend([
        ("general.architecture".into(), s("llama")),
        ("general.name".into(), s("tp-test-random")),
        ("llama.block_count".into(), GgufValue::U32(LAYERS)),
        ("llama.context_length".into(), GgufValue::U32(8192)),
        ("llama.embedding_length".into(), GgufValue::U32(HIDDEN as u32)),
        ("llama.feed_forward_length".into(), GgufValue::U32(FFN as u32)),
        ("llama.attention.head_count".into(), GgufValue::U32(HEADS)),
        ("llama.attention.head_count_kv".into(), GgufValue::U32(KV_HEADS)),
        ("llama.attention.layer_norm_rms_epsilon".into(), GgufValue::F32(1e-5)),
        ("llama.rope.freq_base".into(), GgufValue::F32(100000.0)),
    ]);
    let kv = HIDDEN / HEADS as u64 * KV_HEADS as u64;
    let mut t = vec![random("token_embd.weight", GgmlType::Q4_0, vocab, HIDDEN, 1), norm("output_norm.weight", 2)];
    for l in 0..LAYERS as u64 {
        let n = |x: &str| format!("blk.{l}.{x}");
        let seed = 100 * (l + 1);
        t.push(norm(&n("attn_norm.weight"), seed));
        t.push(norm(&n("ffn_norm.weight"), seed + 1));
        t.push(q8(&n("attn_q.weight"), HIDDEN, HIDDEN, seed + 2));
        t.push(q8(&n("attn_k.weight"), kv, HIDDEN, seed + 3));
        t.push(q8(&n("attn_v.weight"), kv, HIDDEN, seed + 4));
        t.push(q8(&n("attn_output.weight"), HIDDEN, HIDDEN, seed + 5));
        t.push(q8(&n("ffn_gate.weight"), FFN, HIDDEN, seed + 6));
        t.push(q8(&n("ffn_up.weight"), FFN, HIDDEN, seed + 7));
        t.push(q8(&n("ffn_down.weight"), HIDDEN, FFN, seed + 8));
    }
    let bytes = to_bytes(&meta, &t);
    std::fs::write(out, &bytes).expect("the output file is written");
    let reopened = lserve::loader::open(std::path::Path::new(out)).expect("the written model loads");
    println!(
        "wrote {out} ({} bytes): {} layers, {}/{} heads, hidden {}, ffn {}, vocab {}",
        bytes.len(),
        reopened.config.num_layers,
        reopened.config.num_heads,
        reopened.config.num_kv_heads,
        reopened.config.hidden_size,
        reopened.config.intermediate_size,
        reopened.config.vocab_size
    );
}
