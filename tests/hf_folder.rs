//! Loading a Hugging Face model folder: config.json (Qwen2-style, with qkv bias and llama3 RoPE
//! scaling), weights in two safetensors shards with an index and mixed dtypes (F32, BF16, F16),
//! tokenizer.json, and the chat template from tokenizer_config.json. The folder is written with the
//! `safetensors` crate's own serializer; the loaded model must give exactly the logits of the same
//! weights handed over in memory.

mod common;

use std::collections::HashMap;

use lserve::backend::cpu::CpuBackend;
use lserve::chat::ChatMessage;
use lserve::loader::{self, MemWeights};
use lserve::model::llama::{Llama, Logits};
use lserve::model::rope::RopeScaling;
use safetensors::{Dtype, tensor::TensorView};

const CONFIG: &str = r#"{
  "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 32,
  "intermediate_size": 48, "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
  "vocab_size": 12, "rms_norm_eps": 1e-06, "rope_theta": 500000.0, "max_position_embeddings": 64,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 16, "rope_type": "llama3"},
  "tie_word_embeddings": false, "use_sliding_window": false, "sliding_window": 32,
  "bos_token_id": 0, "eos_token_id": [1, 2], "torch_dtype": "bfloat16"
}"#;

const TOKENIZER: &str = r#"{"version":"1.0","truncation":null,"padding":null,
 "added_tokens":[
  {"id":0,"content":"<s>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
  {"id":1,"content":"</s>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],
 "normalizer":null,"pre_tokenizer":{"type":"WhitespaceSplit"},"post_processor":null,"decoder":null,
 "model":{"type":"WordLevel","vocab":{"<s>":0,"</s>":1,"<unk>":2,"hello":3,"world":4,"the":5,"cat":6,"sat":7,
  "on":8,"mat":9,"<|user|>":10,"<|assistant|>":11},"unk_token":"<unk>"}}"#;

const TOKENIZER_CONFIG: &str = r#"{"add_bos_token": true, "bos_token": "<s>", "eos_token": {"content": "</s>"},
 "chat_template": "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|> {{ m.content }} {% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"}"#;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.6
    }
}

fn encode(dtype: Dtype, v: &[f32]) -> (Vec<u8>, Vec<f32>) {
    match dtype {
        Dtype::F32 => (v.iter().flat_map(|x| x.to_le_bytes()).collect(), v.to_vec()),
        Dtype::BF16 => {
            let h: Vec<half::bf16> = v.iter().map(|&x| half::bf16::from_f32(x)).collect();
            (h.iter().flat_map(|x| x.to_le_bytes()).collect(), h.iter().map(|x| x.to_f32()).collect())
        }
        _ => {
            let h: Vec<half::f16> = v.iter().map(|&x| half::f16::from_f32(x)).collect();
            (h.iter().flat_map(|x| x.to_le_bytes()).collect(), h.iter().map(|x| x.to_f32()).collect())
        }
    }
}

fn shapes(c: &lserve::model::config::ModelConfig) -> Vec<(String, Vec<usize>)> {
    let (h, f, nq, nkv) = (c.hidden_size, c.intermediate_size, c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim);
    let mut v = vec![
        ("model.embed_tokens.weight".to_string(), vec![c.vocab_size, h]),
        ("lm_head.weight".to_string(), vec![c.vocab_size, h]),
        ("model.norm.weight".to_string(), vec![h]),
    ];
    for i in 0..c.num_layers {
        for (n, s) in [
            ("input_layernorm.weight", vec![h]),
            ("post_attention_layernorm.weight", vec![h]),
            ("self_attn.q_proj.weight", vec![nq, h]),
            ("self_attn.q_proj.bias", vec![nq]),
            ("self_attn.k_proj.weight", vec![nkv, h]),
            ("self_attn.k_proj.bias", vec![nkv]),
            ("self_attn.v_proj.weight", vec![nkv, h]),
            ("self_attn.v_proj.bias", vec![nkv]),
            ("self_attn.o_proj.weight", vec![h, nq]),
            ("mlp.gate_proj.weight", vec![f, h]),
            ("mlp.up_proj.weight", vec![f, h]),
            ("mlp.down_proj.weight", vec![h, f]),
        ] {
            v.push((format!("model.layers.{i}.{n}"), s));
        }
    }
    v
}

#[test]
fn hf_folder_loads_like_memory_weights() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("config.json"), CONFIG).unwrap();
    std::fs::write(d.join("tokenizer.json"), TOKENIZER).unwrap();
    std::fs::write(d.join("tokenizer_config.json"), TOKENIZER_CONFIG).unwrap();
    let cfg = lserve::model::config::ModelConfig::from_hf_json(&serde_json::from_str(CONFIG).unwrap()).unwrap();
    assert_eq!(cfg.arch, "qwen2");
    assert!(cfg.attention_bias && !cfg.tie_word_embeddings && cfg.sliding_window.is_none());
    assert_eq!(cfg.eos_token_ids, vec![1, 2]);
    assert!(matches!(cfg.rope_scaling, RopeScaling::Llama3 { .. }));

    let mut rng = Rng(common::seed() | 1);
    let mut mem = MemWeights::default();
    type Shard = Vec<(String, Dtype, Vec<u8>, Vec<usize>)>;
    let mut shards: [Shard; 2] = [vec![], vec![]];
    let dtypes = [Dtype::F32, Dtype::BF16, Dtype::F16];
    for (i, (name, shape)) in shapes(&cfg).into_iter().enumerate() {
        let n: usize = shape.iter().product();
        let raw: Vec<f32> = (0..n).map(|_| rng.next()).collect();
        let dt = dtypes[i % 3];
        let (bytes, rounded) = encode(dt, &raw);
        mem.insert(&name, &shape, rounded);
        shards[i % 2].push((name, dt, bytes, shape));
    }
    let mut weight_map = HashMap::new();
    for (k, shard) in shards.iter().enumerate() {
        let file = format!("model-{:05}-of-00002.safetensors", k + 1);
        let views: Vec<(String, TensorView)> =
            shard.iter().map(|(n, dt, b, s)| (n.clone(), TensorView::new(*dt, s.clone(), b).unwrap())).collect();
        safetensors::serialize_to_file(views, None, &d.join(&file)).unwrap();
        shard.iter().for_each(|(n, ..)| {
            weight_map.insert(n.clone(), file.clone());
        });
    }
    let index = serde_json::json!({"metadata": {"total_size": 0}, "weight_map": weight_map});
    std::fs::write(d.join("model.safetensors.index.json"), index.to_string()).unwrap();

    let loaded = loader::open(d).unwrap();
    assert_eq!(loaded.config, cfg);
    let ids = loaded.tokenizer.encode("hello the cat sat on the mat").unwrap();
    assert_eq!(ids, vec![0, 3, 5, 6, 7, 8, 5, 9], "BOS prepended per tokenizer_config");
    let prompt =
        loaded.template.render(&[ChatMessage { role: "user".into(), content: "hello world".into() }], true).unwrap();
    assert_eq!(prompt, "<s><|user|> hello world <|assistant|>");

    let be = CpuBackend::new();
    let from_files = Llama::load(&be, &cfg, loaded.weights.as_ref(), |_, _| {}).unwrap();
    let from_mem = Llama::load(&be, &cfg, &mem, |_, _| {}).unwrap();
    let run = |m: Llama<CpuBackend>| {
        let mut e = common::engine(m, 64, common::paged_config(16, 4), 64);
        let mut seq = e.cache.admit().unwrap();
        e.step(&mut seq, &ids, Logits::All, None).unwrap()
    };
    let (a, b) = (run(from_files), run(from_mem));
    assert_eq!(a.len(), ids.len() * cfg.vocab_size);
    assert_eq!(a, b, "the folder's weights differ from the ones written");

    // A shard that is missing from disk is a clear error.
    std::fs::remove_file(d.join("model-00002-of-00002.safetensors")).unwrap();
    let e = loader::open(d).err().expect("missing shard must fail").to_string();
    assert!(e.contains("model-00002-of-00002.safetensors"), "{e}");
}

/// The tokenizer layer's bound on a GGUF vocabulary is the model config's (it cannot import it).
#[test]
fn tokenizer_vocab_bound_is_the_models() {
    assert_eq!(lserve::tokenizer::MAX_GGUF_VOCAB, lserve::model::config::MAX_VOCAB);
}
