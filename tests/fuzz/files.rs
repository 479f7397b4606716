//! Model files: a tiny but complete llama GGUF and Hugging Face folder, mutated.

use std::path::Path;

use lserve::backend::cpu::CpuBackend;
use lserve::loader::gguf::GgufValue;
use lserve::loader::gguf::write::to_bytes;
use lserve::model::config::ModelConfig;
use lserve::model::llama::Llama;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::config;
use crate::common::tiny::{HfFiles, TOKENIZER, f32_bytes, gguf_base, gguf_parts, hf_config, write_hf};

/// Open the model at `path` and, if that succeeds, load its weights and use its tokenizer and
/// template: every stage must return, Ok or Err, without panicking. Returns the open result.
fn exercise(path: &Path) -> Result<(), String> {
    let m = lserve::loader::open(path).map_err(|e| e.to_string())?;
    let ids = m.tokenizer.encode("hello world").map_err(|e| e.0)?;
    let _ = m.tokenizer.decode(&ids, false);
    let msgs = [lserve::chat::ChatMessage { role: "user".into(), content: "hi".into() }];
    let _ = m.template.render_bounded(&msgs, true, m.tokenizer.byte_bound(m.config.context_len()));
    let be = CpuBackend::new();
    Llama::load(&be, &m.config, m.weights.as_ref(), |_, _| {}).map(|_| ()).map_err(|e| e.to_string())
}

fn write_and_open(dir: &Path, bytes: &[u8]) -> Result<(), String> {
    let p = dir.join("m.gguf");
    std::fs::write(&p, bytes).unwrap();
    exercise(&p)
}

// ---------------------------------------------------------------------------------------------
// Byte-level mutations.

#[derive(Clone, Debug)]
enum Mutation {
    /// XOR one byte.
    Xor(usize, u8),
    /// Write an integer of `width` bytes (little-endian) at a position.
    Put(usize, u64, u8),
    Truncate(usize),
    /// Copy `len` bytes from one place over another.
    Dup(usize, usize, usize),
}

fn extreme_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(u64::MAX),
        Just(u64::MAX - 31),
        Just(1 << 31),
        Just((1 << 31) - 1),
        Just(1 << 32),
        Just(1 << 40),
        Just(1 << 63),
        0u64..100_000,
        any::<u64>(),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<usize>(), 1u8..=255).prop_map(|(p, x)| Mutation::Xor(p, x)),
        4 => (any::<usize>(), extreme_u64(), prop_oneof![Just(1u8), Just(2), Just(4), Just(8)])
            .prop_map(|(p, v, w)| Mutation::Put(p, v, w)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
        1 => (any::<usize>(), any::<usize>(), 1usize..64).prop_map(|(a, b, n)| Mutation::Dup(a, b, n)),
    ]
}

fn apply(mut b: Vec<u8>, muts: &[Mutation]) -> Vec<u8> {
    for m in muts {
        if b.is_empty() {
            break;
        }
        let n = b.len();
        match *m {
            Mutation::Xor(p, x) => b[p % n] ^= x,
            Mutation::Put(p, v, w) => {
                let p = p % n;
                let w = (w as usize).min(n - p);
                b[p..p + w].copy_from_slice(&v.to_le_bytes()[..w]);
            }
            Mutation::Truncate(p) => b.truncate(p % n),
            Mutation::Dup(from, to, len) => {
                let (from, to) = (from % n, to % n);
                let len = len.min(n - from).min(n - to);
                let chunk = b[from..from + len].to_vec();
                b[to..to + len].copy_from_slice(&chunk);
            }
        }
    }
    b
}

/// Mutations aimed at the header and index (the first few KiB hold every count, length, type and
/// offset), where a mutation is most likely to reach a size computation.
fn header_mutation(header_len: usize) -> impl Strategy<Value = Mutation> {
    mutation().prop_map(move |m| match m {
        Mutation::Xor(p, x) => Mutation::Xor(p % header_len, x),
        Mutation::Put(p, v, w) => Mutation::Put(p % header_len, v, w),
        other => other,
    })
}

// ---------------------------------------------------------------------------------------------
// Metadata and tensor-index mutations (re-serialized, so offsets stay consistent).

fn gguf_value() -> impl Strategy<Value = GgufValue> {
    prop_oneof![
        extreme_u64().prop_map(GgufValue::U64),
        extreme_u64().prop_map(|v| GgufValue::U32(v as u32)),
        any::<i32>().prop_map(GgufValue::I32),
        prop_oneof![Just(i64::MIN), Just(-1i64), any::<i64>()].prop_map(GgufValue::I64),
        prop_oneof![Just(f32::NAN), Just(f32::INFINITY), Just(-1.0f32), Just(0.0), Just(1e38), any::<f32>()]
            .prop_map(GgufValue::F32),
        prop_oneof![Just(1e300f64), Just(f64::NEG_INFINITY), any::<f64>()].prop_map(GgufValue::F64),
        "[a-z{}%<>|. ]{0,12}".prop_map(GgufValue::String),
        any::<bool>().prop_map(GgufValue::Bool),
        proptest::collection::vec(any::<u8>(), 0..4)
            .prop_map(|v| GgufValue::Array(v.into_iter().map(GgufValue::U8).collect())),
    ]
}

#[derive(Clone, Debug)]
enum Semantic {
    /// Replace the value of metadata entry `i`.
    Meta(usize, GgufValue),
    /// Drop metadata entry `i`.
    DropMeta(usize),
    /// Set dimension `d` of tensor `t`.
    Dim(usize, usize, u64),
    /// Change the type id of tensor `t` (data left as it was).
    Type(usize, u32),
    /// Drop tensor `t`.
    DropTensor(usize),
}

fn semantic() -> impl Strategy<Value = Semantic> {
    prop_oneof![
        4 => (any::<usize>(), gguf_value()).prop_map(|(i, v)| Semantic::Meta(i, v)),
        1 => any::<usize>().prop_map(Semantic::DropMeta),
        2 => (any::<usize>(), 0usize..2, extreme_u64()).prop_map(|(t, d, v)| Semantic::Dim(t, d, v)),
        2 => (any::<usize>(), 0u32..40).prop_map(|(t, ty)| Semantic::Type(t, ty)),
        1 => any::<usize>().prop_map(Semantic::DropTensor),
    ]
}

fn apply_semantic(muts: &[Semantic]) -> Vec<u8> {
    let (mut meta, mut tensors) = gguf_parts();
    for m in muts {
        match m {
            Semantic::Meta(i, v) => {
                let n = meta.len();
                meta[i % n].1 = v.clone();
            }
            Semantic::DropMeta(i) if !meta.is_empty() => {
                let n = meta.len();
                meta.remove(i % n);
            }
            Semantic::Dim(t, d, v) if !tensors.is_empty() => {
                let n = tensors.len();
                let dims = &mut tensors[t % n].dims;
                let k = d % dims.len();
                dims[k] = *v;
            }
            Semantic::Type(t, ty) if !tensors.is_empty() => {
                let n = tensors.len();
                tensors[t % n].ty_id = *ty;
            }
            Semantic::DropTensor(t) if !tensors.is_empty() => {
                let n = tensors.len();
                tensors.remove(t % n);
            }
            _ => {}
        }
    }
    to_bytes(&meta, &tensors)
}

#[test]
fn the_base_models_load() {
    let dir = tempfile::tempdir().unwrap();
    write_and_open(dir.path(), &gguf_base()).expect("the fuzz base GGUF loads");
    write_hf(dir.path(), &HfFiles::base());
    exercise(dir.path()).expect("the fuzz base HF folder loads");
}

proptest! {
    #![proptest_config(config(1500))]

    #[test]
    fn gguf_byte_mutations_never_panic(muts in proptest::collection::vec(mutation(), 1..5)) {
        let dir = tempfile::tempdir().unwrap();
        let _ = write_and_open(dir.path(), &apply(gguf_base(), &muts));
    }

    #[test]
    fn gguf_header_mutations_never_panic(muts in proptest::collection::vec(header_mutation(6000), 1..4)) {
        let dir = tempfile::tempdir().unwrap();
        let _ = write_and_open(dir.path(), &apply(gguf_base(), &muts));
    }

    #[test]
    fn gguf_metadata_and_index_mutations_never_panic(muts in proptest::collection::vec(semantic(), 1..4)) {
        let dir = tempfile::tempdir().unwrap();
        let _ = write_and_open(dir.path(), &apply_semantic(&muts));
    }
}

// ---------------------------------------------------------------------------------------------
// Named hostile cases: each must be an error that says what is wrong.

fn with_meta(key: &str, v: GgufValue) -> Vec<u8> {
    let (mut meta, t) = gguf_parts();
    meta.iter_mut().find(|(k, _)| k == key).unwrap().1 = v;
    to_bytes(&meta, &t)
}

fn expect_err(dir: &Path, bytes: &[u8], needle: &str) {
    let e = write_and_open(dir, bytes).expect_err("a hostile file loaded");
    assert!(e.contains(needle), "error lacks {needle:?}: {e}");
}

#[test]
fn hostile_gguf_cases_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    expect_err(d, &with_meta("llama.block_count", GgufValue::U32((1 << 31) - 1)), "num_layers");
    expect_err(d, &with_meta("llama.block_count", GgufValue::U32(3)), "model.layers.2");
    expect_err(d, &with_meta("llama.embedding_length", GgufValue::U64(1 << 40)), "hidden_size");
    expect_err(d, &with_meta("llama.rope.freq_base", GgufValue::String("x".into())), "rope.freq_base");
    expect_err(d, &with_meta("llama.rope.freq_base", GgufValue::F64(1e40)), "rope.freq_base");
    expect_err(d, &with_meta("llama.context_length", GgufValue::I32(-1)), "context_length");
    // A tensor's type changed to one of another byte size: its data no longer fits its slot.
    let (m, mut t) = gguf_parts();
    t[0].ty_id = 1; // F32 -> F16, same bytes
    expect_err(d, &to_bytes(&m, &t), "does not match the data");
    let (m, mut t) = gguf_parts();
    let last = t.len() - 1;
    t[last].ty_id = 1; // the last tensor: caught by the bytes left over
    expect_err(d, &to_bytes(&m, &t), "does not match the data");
    // A transposed matrix with the same element count.
    let (m, mut t) = gguf_parts();
    let q = t.iter_mut().find(|x| x.name == "blk.0.ffn_down.weight").unwrap();
    q.dims.reverse();
    expect_err(d, &to_bytes(&m, &t), "shape");
    // A tensor offset near 2^64: data_start + offset must not wrap into the header.
    let mut b = gguf_base();
    let name = b"output_norm.weight";
    let at = b.windows(name.len()).position(|w| w == name).unwrap() + name.len();
    let off_at = at + 4 + 8 + 4; // n_dims u32, one dim u64, type u32
    b[off_at..off_at + 8].copy_from_slice(&(u64::MAX - 63).to_le_bytes());
    expect_err(d, &b, "offset");
}

// ---------------------------------------------------------------------------------------------
// Hugging Face folders.

/// A JSON value of any kind, with the extremes that broke parsers before.
fn json_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        extreme_u64().prop_map(Value::from),
        prop_oneof![Just(-1i64), Just(i64::MIN), any::<i64>()].prop_map(Value::from),
        prop_oneof![Just(1e40f64), Just(-1e-300), Just(0.5), any::<f64>().prop_filter("finite", |x| x.is_finite())]
            .prop_map(Value::from),
        "[a-zA-Z0-9 .]{0,8}".prop_map(Value::from),
        Just(json!([])),
        Just(json!({})),
        Just(json!([1, "x", null])),
        Just(json!({"type": "yarn", "factor": "big"})),
    ]
}

/// Replace (or add) key `k` of a JSON object with a value; nested one level into objects.
fn mutate_json(bytes: &[u8], edits: &[(String, Value)]) -> Vec<u8> {
    let Ok(Value::Object(mut o)) = serde_json::from_slice::<Value>(bytes) else { return bytes.to_vec() };
    for (k, v) in edits {
        o.insert(k.clone(), v.clone());
    }
    Value::Object(o).to_string().into_bytes()
}

const CONFIG_KEYS: &[&str] = &[
    "architectures",
    "model_type",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_hidden_layers",
    "num_key_value_heads",
    "vocab_size",
    "rms_norm_eps",
    "rope_theta",
    "max_position_embeddings",
    "tie_word_embeddings",
    "bos_token_id",
    "eos_token_id",
    "head_dim",
    "rope_scaling",
    "sliding_window",
    "use_sliding_window",
    "attention_bias",
    "partial_rotary_factor",
];

fn config_edit() -> impl Strategy<Value = (String, Value)> {
    (proptest::sample::select(CONFIG_KEYS), json_value()).prop_map(|(k, v)| (k.to_string(), v))
}

#[derive(Clone, Debug)]
enum HfMutation {
    Config(Vec<(String, Value)>),
    ConfigBytes(Vec<Mutation>),
    /// Mutations in the safetensors header (its first 8 + header-length bytes).
    WeightsHeader(Vec<Mutation>),
    Weights(Vec<Mutation>),
    Tokenizer(Vec<Mutation>),
}

fn hf_mutation() -> impl Strategy<Value = HfMutation> {
    let muts = || proptest::collection::vec(mutation(), 1..4);
    prop_oneof![
        3 => proptest::collection::vec(config_edit(), 1..3).prop_map(HfMutation::Config),
        1 => muts().prop_map(HfMutation::ConfigBytes),
        3 => proptest::collection::vec(header_mutation(600), 1..4).prop_map(HfMutation::WeightsHeader),
        1 => muts().prop_map(HfMutation::Weights),
        2 => muts().prop_map(HfMutation::Tokenizer),
    ]
}

fn apply_hf(m: &HfMutation) -> HfFiles {
    let mut f = HfFiles::base();
    match m {
        HfMutation::Config(edits) => f.config = mutate_json(&f.config, edits),
        HfMutation::ConfigBytes(muts) => f.config = apply(f.config, muts),
        HfMutation::WeightsHeader(muts) | HfMutation::Weights(muts) => f.weights = apply(f.weights, muts),
        HfMutation::Tokenizer(muts) => f.tokenizer = apply(f.tokenizer, muts),
    }
    f
}

proptest! {
    #![proptest_config(config(1500))]

    #[test]
    fn hf_folder_mutations_never_panic(m in hf_mutation()) {
        let dir = tempfile::tempdir().unwrap();
        write_hf(dir.path(), &apply_hf(&m));
        let _ = exercise(dir.path());
    }

    /// config.json alone: a wrong-typed value is an error naming its key; whatever parses is valid.
    #[test]
    fn config_json_is_type_checked(edits in proptest::collection::vec(config_edit(), 1..4)) {
        let mut v = hf_config();
        for (k, x) in &edits {
            v[k.as_str()] = x.clone();
        }
        match ModelConfig::from_hf_json(&v) {
            Ok(c) => {
                c.validate().unwrap();
                prop_assert!(c.rms_norm_eps.is_finite() && c.rope_theta.is_finite());
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
        // A string where a number belongs always names the key.
        let numeric = ["hidden_size", "num_hidden_layers", "rms_norm_eps", "rope_theta", "head_dim", "vocab_size",
                       "max_position_embeddings", "intermediate_size", "num_key_value_heads"];
        for k in numeric {
            let mut w = hf_config();
            w[k] = json!("x");
            let e = ModelConfig::from_hf_json(&w).unwrap_err().to_string();
            prop_assert!(e.contains(k), "{k}: {e}");
        }
    }

    /// tokenizer.json alone: mutated JSON values inside the model section.
    #[test]
    fn tokenizer_json_mutations_never_panic(muts in proptest::collection::vec(mutation(), 1..6), text in "[a-z <>|/]{0,24}") {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tokenizer.json"), apply(TOKENIZER.as_bytes().to_vec(), &muts)).unwrap();
        if let Ok(t) = lserve::tokenizer::TextTokenizer::from_hf_dir(dir.path())
            && let Ok(ids) = t.encode(&text)
        {
            let _ = t.decode(&ids, true);
        }
    }
}

#[test]
fn hostile_hf_cases_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let case = |edits: Vec<(&str, Value)>, needle: &str| {
        let mut f = HfFiles::base();
        f.config = mutate_json(&f.config, &edits.into_iter().map(|(k, v)| (k.to_string(), v)).collect::<Vec<_>>());
        write_hf(d, &f);
        let e = exercise(d).expect_err("a hostile folder loaded");
        assert!(e.contains(needle), "error lacks {needle:?}: {e}");
    };
    case(vec![("num_hidden_layers", json!(1u64 << 40))], "num_layers");
    case(vec![("num_hidden_layers", json!(3))], "model.layers.2");
    case(vec![("rms_norm_eps", json!("x"))], "rms_norm_eps");
    case(vec![("rope_theta", json!("x"))], "rope_theta");
    case(vec![("rope_theta", json!(1e40))], "rope_theta");
    case(vec![("head_dim", json!(-4))], "head_dim");
    case(vec![("max_position_embeddings", json!(-1))], "max_position_embeddings");
    case(vec![("tie_word_embeddings", json!("yes"))], "tie_word_embeddings");
    // Transposed weights with the right element count: safetensors shapes are checked against
    // the config, not only their sizes.
    use safetensors::{Dtype, tensor::TensorView};
    let cfg = ModelConfig::from_hf_json(&hf_config()).unwrap();
    let tensors: Vec<(String, Vec<usize>, Vec<u8>)> = cfg
        .expected_tensors()
        .into_iter()
        .map(|(name, mut shape)| {
            if name.ends_with("mlp.down_proj.weight") {
                shape.reverse();
            }
            let n: usize = shape.iter().product();
            (name, shape, f32_bytes(n as u64, 3))
        })
        .collect();
    let views: Vec<(String, TensorView)> =
        tensors.iter().map(|(n, s, b)| (n.clone(), TensorView::new(Dtype::F32, s.clone(), b).unwrap())).collect();
    let mut f = HfFiles::base();
    f.weights = safetensors::tensor::serialize(views, None).unwrap();
    write_hf(d, &f);
    let e = exercise(d).expect_err("transposed weights loaded");
    assert!(e.contains("down_proj") && e.contains("shape"), "{e}");
}
