//! A tiny but complete llama model (hidden 8, 2 heads of 4 over 1 KV head, ffn 16, 2 layers,
//! byte-level BPE) as GGUF parts and as a Hugging Face folder: the base that tests mutate.
#![allow(dead_code)]

use std::path::Path;

use lserve::loader::gguf::GgufValue;
use lserve::loader::gguf::write::{TensorData, to_bytes};
use lserve::model::config::ModelConfig;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// The base model: hidden 8, 2 heads of 4 over 1 KV head, ffn 16, 2 layers, byte-level BPE.

const H: u64 = 8;
const FFN: u64 = 16;
const NKV: u64 = 4;

/// GPT-2's byte-to-character table (`bytes_to_unicode`).
pub fn byte_chars() -> Vec<String> {
    let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
    let mut n = 0;
    (0..256u32)
        .map(|b| {
            let c = if printable(b) {
                b
            } else {
                n += 1;
                255 + n
            };
            char::from_u32(c).unwrap().to_string()
        })
        .collect()
}

pub fn vocab() -> (Vec<String>, Vec<String>) {
    let merges: Vec<String> = ["h e", "l l", "he ll", "hell o", "Ġ w", "o r"].map(String::from).into();
    let mut tokens: Vec<String> = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"].map(String::from).into();
    tokens.extend(byte_chars());
    tokens.extend(merges.iter().map(|m| m.replace(' ', "")));
    (tokens, merges)
}

pub fn f32_bytes(n: u64, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    (0..n)
        .flat_map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.5).to_le_bytes()
        })
        .collect()
}

fn f16_bytes(n: u64, seed: u64) -> Vec<u8> {
    f32_bytes(n, seed)
        .chunks_exact(4)
        .flat_map(|c| half::f16::from_f32(f32::from_le_bytes([c[0], c[1], c[2], c[3]])).to_le_bytes())
        .collect()
}

/// Q8_0 blocks: an f16 scale and 32 int8 codes per 32 values.
fn q8_bytes(n: u64) -> Vec<u8> {
    (0..n / 32)
        .flat_map(|b| [vec![0x00, 0x2c], (0..32).map(|i| ((i * 7 + b) % 255) as u8).collect()].concat())
        .collect()
}

fn tensor(name: &str, dims: &[u64], ty_id: u32, bytes: Vec<u8>) -> TensorData {
    TensorData { name: name.into(), dims: dims.to_vec(), ty_id, bytes }
}

pub fn gguf_parts() -> (Vec<(String, GgufValue)>, Vec<TensorData>) {
    let (tokens, merges) = vocab();
    let v = tokens.len() as u64;
    let s = |x: &str| GgufValue::String(x.into());
    let mut types = vec![GgufValue::I32(1); tokens.len()];
    types[..3].fill(GgufValue::I32(3));
    let meta: Vec<(String, GgufValue)> = vec![
        ("general.architecture".into(), s("llama")),
        ("general.name".into(), s("fuzz-tiny")),
        ("llama.block_count".into(), GgufValue::U32(2)),
        ("llama.context_length".into(), GgufValue::U32(64)),
        ("llama.embedding_length".into(), GgufValue::U32(H as u32)),
        ("llama.feed_forward_length".into(), GgufValue::U32(FFN as u32)),
        ("llama.attention.head_count".into(), GgufValue::U32(2)),
        ("llama.attention.head_count_kv".into(), GgufValue::U32(1)),
        ("llama.attention.layer_norm_rms_epsilon".into(), GgufValue::F32(1e-5)),
        ("llama.rope.freq_base".into(), GgufValue::F32(10000.0)),
        ("tokenizer.ggml.model".into(), s("gpt2")),
        ("tokenizer.ggml.tokens".into(), GgufValue::Array(tokens.iter().map(|t| s(t)).collect())),
        ("tokenizer.ggml.token_type".into(), GgufValue::Array(types)),
        ("tokenizer.ggml.merges".into(), GgufValue::Array(merges.iter().map(|m| s(m)).collect())),
        ("tokenizer.ggml.bos_token_id".into(), GgufValue::U32(0)),
        ("tokenizer.ggml.eos_token_id".into(), GgufValue::U32(2)),
        (
            "tokenizer.chat_template".into(),
            s("{% for m in messages %}<|im_start|>{{ m.role }} {{ m.content }}<|im_end|>{% endfor %}"),
        ),
    ];
    let mut t = vec![
        tensor("token_embd.weight", &[H, v], 0, f32_bytes(H * v, 1)),
        tensor("output_norm.weight", &[H], 0, f32_bytes(H, 2)),
    ];
    for l in 0..2u64 {
        let n = |x: &str| format!("blk.{l}.{x}");
        t.push(tensor(&n("attn_norm.weight"), &[H], 0, f32_bytes(H, 3 + l)));
        t.push(tensor(&n("ffn_norm.weight"), &[H], 0, f32_bytes(H, 5 + l)));
        t.push(tensor(&n("attn_q.weight"), &[H, H], 0, f32_bytes(H * H, 7 + l)));
        t.push(tensor(&n("attn_k.weight"), &[H, NKV], 0, f32_bytes(H * NKV, 9 + l)));
        t.push(tensor(&n("attn_v.weight"), &[H, NKV], 1, f16_bytes(H * NKV, 11 + l)));
        t.push(tensor(&n("attn_output.weight"), &[H, H], 0, f32_bytes(H * H, 13 + l)));
        t.push(tensor(&n("ffn_gate.weight"), &[H, FFN], 8, q8_bytes(H * FFN)));
        t.push(tensor(&n("ffn_up.weight"), &[H, FFN], 8, q8_bytes(H * FFN)));
        t.push(tensor(&n("ffn_down.weight"), &[FFN, H], 0, f32_bytes(H * FFN, 15 + l)));
    }
    (meta, t)
}

pub fn gguf_base() -> Vec<u8> {
    let (m, t) = gguf_parts();
    to_bytes(&m, &t)
}

pub const TOKENIZER: &str = r#"{"version":"1.0","truncation":null,"padding":null,
 "added_tokens":[{"id":0,"content":"<s>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
  {"id":1,"content":"</s>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],
 "normalizer":null,"pre_tokenizer":{"type":"WhitespaceSplit"},"post_processor":null,"decoder":null,
 "model":{"type":"WordLevel","vocab":{"<s>":0,"</s>":1,"<unk>":2,"hello":3,"world":4,"the":5,"cat":6,"sat":7,
  "on":8,"mat":9,"<|user|>":10,"<|assistant|>":11},"unk_token":"<unk>"}}"#;

pub fn hf_config() -> Value {
    json!({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8,
           "intermediate_size": 16, "num_attention_heads": 2, "num_hidden_layers": 2, "num_key_value_heads": 1,
           "vocab_size": 12, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 64,
           "tie_word_embeddings": true, "bos_token_id": 0, "eos_token_id": 1, "head_dim": 4})
}

pub fn safetensors_bytes() -> Vec<u8> {
    use safetensors::{Dtype, tensor::TensorView};
    let cfg = ModelConfig::from_hf_json(&hf_config()).unwrap();
    let tensors: Vec<(String, Vec<usize>, Vec<u8>)> = cfg
        .expected_tensors()
        .into_iter()
        .enumerate()
        .map(|(i, (name, shape))| {
            let n: usize = shape.iter().product();
            (name, shape, f32_bytes(n as u64, i as u64 + 1))
        })
        .collect();
    let views: Vec<(String, TensorView)> =
        tensors.iter().map(|(n, s, b)| (n.clone(), TensorView::new(Dtype::F32, s.clone(), b).unwrap())).collect();
    safetensors::tensor::serialize(views, None).unwrap()
}

#[derive(Clone, Debug)]
pub struct HfFiles {
    pub config: Vec<u8>,
    pub weights: Vec<u8>,
    pub tokenizer: Vec<u8>,
}

impl HfFiles {
    pub fn base() -> Self {
        HfFiles {
            config: hf_config().to_string().into_bytes(),
            weights: safetensors_bytes(),
            tokenizer: TOKENIZER.as_bytes().to_vec(),
        }
    }
}

pub fn write_hf(dir: &Path, f: &HfFiles) {
    std::fs::write(dir.join("config.json"), &f.config).unwrap();
    std::fs::write(dir.join("model.safetensors"), &f.weights).unwrap();
    std::fs::write(dir.join("tokenizer.json"), &f.tokenizer).unwrap();
    let tc = r#"{"bos_token": "<s>", "eos_token": "</s>", "chat_template": "{% for m in messages %}<|{{ m.role }}|> {{ m.content }} {% endfor %}"}"#;
    std::fs::write(dir.join("tokenizer_config.json"), tc).unwrap();
}
