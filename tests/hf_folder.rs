//! Loading a Hugging Face model folder: config.json, weights in two safetensors shards with an
//! index and mixed dtypes (F32, BF16, F16), tokenizer.json, and the chat template from
//! tokenizer_config.json. The folder is written with the `safetensors` crate's own serializer; the
//! loaded model must give exactly the logits of the same weights handed over in memory. Two
//! architectures: Qwen2-style (qkv bias, llama3 RoPE scaling) and Gemma 3 (`Gemma3ForCausalLM`:
//! BF16 norm weights stored as HF's `w`, applied as `1 + w`, which the folder path must not shift
//! as the GGUF path does; also checked against the naive f64 Gemma 3 of tests/common).

mod common;

use std::collections::HashMap;
use std::path::Path;

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

/// Writes `tensors` (name, shape, values) into `dir` as two safetensors shards with an index,
/// tensor `i` in shard `i % 2` stored as `dtype(i, name)`, and returns them as the files hold them
/// (rounded to their dtype), in memory.
fn write_shards(
    dir: &Path,
    tensors: Vec<(String, Vec<usize>, Vec<f32>)>,
    dtype: impl Fn(usize, &str) -> Dtype,
) -> MemWeights {
    let mut mem = MemWeights::default();
    type Shard = Vec<(String, Dtype, Vec<u8>, Vec<usize>)>;
    let mut shards: [Shard; 2] = [vec![], vec![]];
    for (i, (name, shape, raw)) in tensors.into_iter().enumerate() {
        let dt = dtype(i, &name);
        let (bytes, rounded) = encode(dt, &raw);
        mem.insert(&name, &shape, rounded);
        shards[i % 2].push((name, dt, bytes, shape));
    }
    let mut weight_map = HashMap::new();
    for (k, shard) in shards.iter().enumerate() {
        let file = format!("model-{:05}-of-00002.safetensors", k + 1);
        let views: Vec<(String, TensorView)> =
            shard.iter().map(|(n, dt, b, s)| (n.clone(), TensorView::new(*dt, s.clone(), b).unwrap())).collect();
        safetensors::serialize_to_file(views, None, &dir.join(&file)).unwrap();
        shard.iter().for_each(|(n, ..)| {
            weight_map.insert(n.clone(), file.clone());
        });
    }
    let index = serde_json::json!({"metadata": {"total_size": 0}, "weight_map": weight_map});
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
    mem
}

/// A model folder's text files in `d` (config.json, tokenizer.json, tokenizer_config.json), and
/// the config as lserve reads it.
fn write_folder(d: &Path, config: &str, tokenizer: &str, tokenizer_config: &str) -> lserve::model::config::ModelConfig {
    std::fs::write(d.join("config.json"), config).unwrap();
    std::fs::write(d.join("tokenizer.json"), tokenizer).unwrap();
    std::fs::write(d.join("tokenizer_config.json"), tokenizer_config).unwrap();
    lserve::model::config::ModelConfig::from_hf_json(&serde_json::from_str(config).unwrap()).unwrap()
}

#[test]
fn hf_folder_loads_like_memory_weights() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cfg = write_folder(d, CONFIG, TOKENIZER, TOKENIZER_CONFIG);
    assert_eq!(cfg.arch, "qwen2");
    assert!(cfg.attention_bias && !cfg.tie_word_embeddings && cfg.sliding_window.is_none());
    assert_eq!(cfg.eos_token_ids, vec![1, 2]);
    assert!(matches!(cfg.rope_scaling, RopeScaling::Llama3 { .. }));

    let mut rng = Rng(common::seed() | 1);
    let tensors = shapes(&cfg)
        .into_iter()
        .map(|(name, shape)| {
            let raw = (0..shape.iter().product()).map(|_| rng.next()).collect();
            (name, shape, raw)
        })
        .collect();
    let dtypes = [Dtype::F32, Dtype::BF16, Dtype::F16];
    let mem = write_shards(d, tensors, |i, _| dtypes[i % 3]);

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

/// A tiny `Gemma3ForCausalLM` config.json in the shape transformers writes (270M / 1B): 6 layers,
/// layer 5 global, the others local with an 8-token window and their own RoPE base.
const GEMMA_CONFIG: &str = r#"{
  "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "vocab_size": 512,
  "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 6, "num_attention_heads": 4,
  "num_key_value_heads": 1, "head_dim": 32, "hidden_activation": "gelu_pytorch_tanh",
  "max_position_embeddings": 4096, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "rope_local_base_freq": 10000.0, "rope_scaling": null, "query_pre_attn_scalar": 32,
  "sliding_window": 8, "sliding_window_pattern": 6,
  "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention",
                  "sliding_attention", "full_attention"],
  "attention_bias": false, "attention_dropout": 0.0, "attn_logit_softcapping": null,
  "final_logit_softcapping": null, "bos_token_id": 2, "eos_token_id": [1, 106], "pad_token_id": 0,
  "torch_dtype": "bfloat16", "use_cache": true
}"#;

const GEMMA_TOKENIZER: &str = r#"{"version":"1.0","truncation":null,"padding":null,
 "added_tokens":[
  {"id":0,"content":"<pad>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
  {"id":1,"content":"<eos>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
  {"id":2,"content":"<bos>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
  {"id":106,"content":"<start_of_turn>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},
  {"id":107,"content":"<end_of_turn>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],
 "normalizer":null,"pre_tokenizer":{"type":"WhitespaceSplit"},"post_processor":null,"decoder":null,
 "model":{"type":"WordLevel","vocab":{"<pad>":0,"<eos>":1,"<bos>":2,"<unk>":3,"hello":4,"the":5,"cat":6,
  "sat":7,"on":8,"mat":9,"<start_of_turn>":106,"<end_of_turn>":107},"unk_token":"<unk>"}}"#;

/// Gemma 3's chat template, trimmed to its text path: the system turn is folded into the first
/// user turn, `assistant` is spoken as `model`.
const GEMMA_TOKENIZER_CONFIG: &str = r#"{"add_bos_token": true, "add_eos_token": false, "bos_token": "<bos>",
 "eos_token": "<eos>", "pad_token": "<pad>",
 "chat_template": "{{ bos_token }}{%- if messages[0]['role'] == 'system' -%}{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}{%- set loop_messages = messages[1:] -%}{%- else -%}{%- set first_user_prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}{%- for message in loop_messages -%}{%- if message['role'] == 'assistant' -%}{%- set role = 'model' -%}{%- else -%}{%- set role = message['role'] -%}{%- endif -%}{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') }}{{ message['content'] | trim }}{{ '<end_of_turn>\n' }}{%- endfor -%}{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"}"#;

/// Random Gemma 3 weights under HF names (tied embeddings, so no `lm_head`), norm weights `w`
/// around 0 as in HF checkpoints (the forward multiplies by `1 + w`).
fn gemma_tensors(c: &lserve::model::config::ModelConfig, seed: u64) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let mut rng = common::naive::Rng(seed | 1);
    let (h, hd, f) = (c.hidden_size, c.head_dim, c.intermediate_size);
    let (nq, nkv) = (c.num_heads * hd, c.num_kv_heads * hd);
    let mut out = vec![];
    let mut put = |name: String, shape: Vec<usize>, scale: f64| {
        let v = rng.normal_vec(shape.iter().product(), scale);
        out.push((name, shape, v));
    };
    put("model.embed_tokens.weight".into(), vec![c.vocab_size, h], 1.0);
    put("model.norm.weight".into(), vec![h], 0.3);
    for l in 0..c.num_layers {
        let p = |s: &str| format!("model.layers.{l}.{s}");
        for (n, shape) in [
            ("self_attn.q_proj.weight", [nq, h]),
            ("self_attn.k_proj.weight", [nkv, h]),
            ("self_attn.v_proj.weight", [nkv, h]),
            ("self_attn.o_proj.weight", [h, nq]),
            ("mlp.gate_proj.weight", [f, h]),
            ("mlp.up_proj.weight", [f, h]),
            ("mlp.down_proj.weight", [h, f]),
        ] {
            put(p(n), shape.to_vec(), 1.0 / (shape[1] as f64).sqrt());
        }
        for n in
            ["input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"]
        {
            put(p(&format!("{n}.weight")), vec![h], 0.3);
        }
        put(p("self_attn.q_norm.weight"), vec![hd], 0.3);
        put(p("self_attn.k_norm.weight"), vec![hd], 0.3);
    }
    out
}

/// A Gemma 3 folder (norm weights and the embedding = tied head in BF16, as the checkpoints ship
/// them; the other matrices F32/BF16/F16) gives bit for bit the logits of the same weights in
/// memory: the folder path hands the model HF's `w` unchanged, as the in-memory path does (the
/// GGUF path undoes llama.cpp's stored `1 + w`, see loader::GgufWeights). Both agree with the
/// naive f64 Gemma 3, which applies `1 + w` itself, so a norm read with the wrong convention or
/// under the wrong name fails either the exact or the naive check. 40 tokens in one step: the
/// local layers' 8-token window binds.
#[test]
fn hf_gemma3_folder_loads_like_memory_weights() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cfg = write_folder(d, GEMMA_CONFIG, GEMMA_TOKENIZER, GEMMA_TOKENIZER_CONFIG);
    assert_eq!(cfg.arch, "gemma3");
    assert!(cfg.tie_word_embeddings && !cfg.attention_bias);
    assert_eq!((cfg.bos_token_id, cfg.eos_token_ids.clone()), (Some(2), vec![1, 106]));
    let g = cfg.gemma.clone().expect("Gemma parameters");
    assert_eq!((g.sliding_window, g.local_rope_theta, g.query_pre_attn_scalar), (8, 10000.0, 32.0));
    assert_eq!((0..6).filter(|&l| !g.is_local(l)).collect::<Vec<_>>(), [5]);

    let seed = common::seed();
    let mem = write_shards(d, gemma_tensors(&cfg, seed), |i, name| {
        if name.contains("norm") || name.contains("embed") {
            Dtype::BF16
        } else {
            [Dtype::F32, Dtype::BF16, Dtype::F16][i % 3]
        }
    });
    let q_norm = &mem.tensors["model.layers.0.self_attn.q_norm.weight"].0;
    assert!(q_norm.iter().all(|x| half::bf16::from_f32(*x).to_f32() == *x), "norms are held bf16-rounded");

    let loaded = loader::open(d).unwrap();
    assert_eq!(loaded.config, cfg);
    let ids = loaded.tokenizer.encode("hello the cat sat on the mat").unwrap();
    assert_eq!(ids, vec![2, 4, 5, 6, 7, 8, 5, 9], "BOS prepended per tokenizer_config");
    assert_eq!(loaded.stop_ids(), vec![1, 106]);
    let chat = [
        ChatMessage { role: "system".into(), content: "be brief".into() },
        ChatMessage { role: "user".into(), content: " hello ".into() },
        ChatMessage { role: "assistant".into(), content: "the cat".into() },
        ChatMessage { role: "user".into(), content: "sat".into() },
    ];
    let prompt = loaded.template.render(&chat, true).unwrap();
    let want = "<bos><start_of_turn>user\nbe brief\n\nhello<end_of_turn>\n<start_of_turn>model\nthe cat<end_of_turn>\n\
                <start_of_turn>user\nsat<end_of_turn>\n<start_of_turn>model\n";
    assert_eq!(prompt, want);

    let mut rng = common::naive::Rng(seed ^ 0x6e33);
    let ids: Vec<u32> = (0..40).map(|_| (rng.next() * cfg.vocab_size as f64) as u32).collect();
    let be = CpuBackend::new();
    let run = |m: Llama<CpuBackend>| {
        let mut e = common::engine(m, 64, common::paged_config(16, 4), 64);
        let mut seq = e.cache.admit().unwrap();
        e.step(&mut seq, &ids, Logits::All, None).unwrap()
    };
    let from_files = run(Llama::load(&be, &cfg, loaded.weights.as_ref(), |_, _| {}).unwrap());
    let from_mem = run(Llama::load(&be, &cfg, &mem, |_, _| {}).unwrap());
    assert_eq!(from_files.len(), ids.len() * cfg.vocab_size);
    assert_eq!(from_files, from_mem, "the folder's Gemma weights differ from the ones written");

    let naive = common::naive::naive_gemma_logits(&cfg, &mem, &ids);
    let scale = naive.iter().flatten().fold(0f64, |m, x| m.max(x.abs()));
    let err = from_files
        .chunks_exact(cfg.vocab_size)
        .zip(&naive)
        .map(|(a, b)| common::naive::max_diff(a, b))
        .fold(0.0, f64::max);
    eprintln!("seed {seed}: max |logit diff| folder vs naive f64 {err:.2e} (max |logit| {scale:.1})");
    assert!(err < 1e-5 * scale.max(1.0), "folder vs naive Gemma 3: {err}");
}

/// The tokenizer layer's bound on a GGUF vocabulary is the model config's (it cannot import it).
#[test]
fn tokenizer_vocab_bound_is_the_models() {
    assert_eq!(lserve::tokenizer::MAX_GGUF_VOCAB, lserve::model::config::MAX_VOCAB);
}
