//! Unit tests of `tokenizer` (kept beside it so src/tokenizer.rs stays a readable size).

use super::*;

fn base(model: &str) -> GgufVocab {
    let (bos, eos, unk) = (Some(1), Some(2), Some(0));
    let model = model.to_string();
    GgufVocab { model, bos, eos, unk, ..Default::default() }
}

/// Byte-level vocab: 3 control tokens, the 256 byte characters, then merged pieces.
fn gpt2_vocab(pre: Option<&str>) -> GgufVocab {
    let merges = "h e|l l|he ll|hell o|Ġ w|o r|Ġw or|l d|Ġwor ld|1 2";
    let mut bytes: Vec<char> = ByteLevel::alphabet().into_iter().collect();
    bytes.sort();
    let mut v = base("gpt2");
    v.pre = pre.map(String::from);
    v.tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"].map(String::from).into();
    v.tokens.extend(bytes.iter().map(|c| c.to_string()));
    v.tokens.extend(merges.split('|').map(|m| m.replace(' ', "")));
    v.token_types = vec![1; v.tokens.len()];
    v.token_types[..3].fill(3);
    v.merges = merges.split('|').map(String::from).collect();
    v.tokens.push("<think>".into());
    v.token_types.push(4);
    v
}

/// SentencePiece vocab with scores; the 256 `<0xXX>` byte tokens are ids 3..259.
fn spm_vocab() -> GgufVocab {
    let mut v = base("llama");
    v.tokens = ["<unk>", "<s>", "</s>"].map(String::from).into();
    v.tokens.extend((0..256).map(|b| format!("<0x{b:02X}>")));
    v.token_types = vec![2, 3, 3];
    v.token_types.resize(v.tokens.len(), 6);
    v.scores = vec![0.0; v.tokens.len()];
    let pieces = "he ll ▁he llo ▁hello ▁w or ld orld ▁world ▁ h e l o w r d";
    for (i, p) in pieces.split(' ').enumerate() {
        v.tokens.push(p.to_string());
        v.token_types.push(1);
        v.scores.push(-(i as f32) - 1.0);
    }
    v
}

fn id(t: &TextTokenizer, s: &str) -> u32 {
    t.inner().token_to_id(s).unwrap_or(u32::MAX)
}

fn roundtrip(t: &TextTokenizer, text: &str) -> String {
    t.decode(&t.encode(text).unwrap(), true).unwrap()
}

#[test]
fn gpt2_encode_decode_and_specials() {
    let t = TextTokenizer::from_gguf(&gpt2_vocab(Some("smollm"))).unwrap();
    assert!(t.warnings().is_empty() && !t.add_bos());
    let (hello, world) = (id(&t, "hello"), id(&t, "Ġworld"));
    assert_eq!(t.encode("hello world").unwrap(), [hello, world]);
    let chat = "<|im_start|>user\nhello<|im_end|>";
    let ids = t.encode(chat).unwrap();
    assert_eq!((ids[0], &ids[ids.len() - 2..]), (1, &[hello, 2][..]));
    assert_eq!(t.decode(&ids, false).unwrap(), chat);
    assert_eq!(t.decode(&ids, true).unwrap(), "user\nhello");
    let think = t.encode("<think>hello").unwrap();
    assert_eq!(think, [id(&t, "<think>"), hello]);
    assert_eq!(t.decode(&think, true).unwrap(), "<think>hello");
    for text in ["naïve café — 東京 🚀", "x  42 and\n\n 7\t"] {
        assert_eq!(roundtrip(&t, text), text);
    }
    assert_eq!(t.bos_token(), Some((1, "<|im_start|>".to_string())));
    assert_eq!(t.eos_token(), Some((2, "<|im_end|>".to_string())));
    assert_eq!((t.stop_ids(), t.vocab_size()), (&[2][..], 3 + 256 + 10 + 1));
}

#[test]
fn gpt2_pre_tokenizers() {
    let smollm = TextTokenizer::from_gguf(&gpt2_vocab(Some("smollm"))).unwrap();
    let gpt2 = TextTokenizer::from_gguf(&gpt2_vocab(Some("gpt-2"))).unwrap();
    let (one, two) = (id(&smollm, "1"), id(&smollm, "2"));
    assert_eq!(smollm.encode("12").unwrap(), [one, two]);
    assert_eq!(gpt2.encode("12").unwrap(), [id(&gpt2, "12")]);
    for name in pre_tokenizer_names() {
        let t = TextTokenizer::from_gguf(&gpt2_vocab(Some(name))).unwrap();
        let text = "Hello, world! It's 2024\n\n  東京 x";
        assert_eq!(roundtrip(&t, text), text, "{name}");
    }
}

#[test]
fn gpt2_bos_rules_warnings_and_errors() {
    let t = TextTokenizer::from_gguf(&gpt2_vocab(Some("llama-bpe"))).unwrap();
    let hello = id(&t, "hello");
    assert_eq!(t.encode("hello").unwrap(), [1, hello]);
    assert_eq!(t.encode("<|im_start|>hello").unwrap(), [1, hello]); // not doubled
    assert_eq!(t.encode_with("hello", false).unwrap(), [hello]);
    let mut v = gpt2_vocab(Some("llama-bpe"));
    v.add_bos = Some(false);
    assert!(!TextTokenizer::from_gguf(&v).unwrap().add_bos());
    let unknown = TextTokenizer::from_gguf(&gpt2_vocab(Some("no-such-pre"))).unwrap();
    assert_eq!(unknown.warnings().len(), 1);
    assert_eq!(unknown.encode("hello").unwrap(), [hello]);
    let missing = TextTokenizer::from_gguf(&gpt2_vocab(None)).unwrap();
    assert_eq!(missing.warnings().len(), 1);
    v.model = "bert".into();
    assert!(TextTokenizer::from_gguf(&v).is_err());
    assert!(TextTokenizer::from_gguf(&GgufVocab::default()).is_err());
}

#[test]
fn spm_merges_follow_hf_order() {
    let tokens: Vec<String> = ["a", "b", "c", "ab", "bc", "abc"].map(String::from).into();
    let merges = spm_merges(&tokens, &[-5.0, -5.0, -5.0, -1.0, -1.0, -2.0]);
    let pairs: Vec<String> = merges.iter().map(|(a, b)| format!("{a}+{b}")).collect();
    assert_eq!(pairs, ["a+b", "b+c", "ab+c", "a+bc"]);
}

#[test]
fn spm_encode_decode_bos_and_bytes() {
    let t = TextTokenizer::from_gguf(&spm_vocab()).unwrap();
    let hello = id(&t, "▁hello");
    assert!(t.add_bos());
    let world = id(&t, "▁world");
    assert_eq!(t.encode("hello world").unwrap(), [1, hello, world]);
    assert_eq!(t.encode("<s>hello").unwrap(), [1, hello]);
    let ids = t.encode("hello\nworld").unwrap();
    assert_eq!(ids, [1, hello, 3 + 0x0A, id(&t, "w"), id(&t, "orld")]);
    assert_eq!(t.decode(&ids, true).unwrap(), "hello\nworld");
    assert_eq!(t.decode(&ids, false).unwrap(), "<s> hello\nworld");
    let ids = t.encode("東").unwrap();
    assert_eq!(ids, [1, id(&t, "▁"), 3 + 0xE6, 3 + 0x9D, 3 + 0xB1]);
    assert_eq!(t.decode(&ids, true).unwrap(), "東");
    assert_eq!(t.stop_ids(), &[2]);
    let mut v = spm_vocab();
    (v.add_space_prefix, v.add_bos) = (Some(false), Some(false));
    let t = TextTokenizer::from_gguf(&v).unwrap();
    assert_eq!(t.encode("hello").unwrap(), [id(&t, "he"), id(&t, "llo")]);
    assert_eq!(roundtrip(&t, " hello"), " hello");
}

#[test]
fn stream_decoder_holds_back_partial_characters() {
    let t = TextTokenizer::from_gguf(&spm_vocab()).unwrap();
    let mut s = StreamDecoder::new(&t);
    let ids = [1, 3 + 0xE6, 3 + 0x9D, 3 + 0xB1, id(&t, "▁hello")];
    let pieces: Vec<String> = ids.into_iter().map(|i| s.push(i).unwrap()).collect();
    assert_eq!(pieces, ["", "", "", "東", " hello"]);
    assert_eq!(s.finish().unwrap(), "");
    let mut s = StreamDecoder::new(&t);
    assert_eq!(s.push(3 + 0xE6).unwrap(), "");
    assert_eq!(s.finish().unwrap(), "\u{FFFD}");

    let g = TextTokenizer::from_gguf(&gpt2_vocab(Some("smollm"))).unwrap();
    let text = "<|im_start|>naïve café — 東京 🚀 hello world";
    let mut s = StreamDecoder::with_skip_special(&g, false);
    let mut out = String::new();
    for id in g.encode(text).unwrap() {
        let piece = s.push(id).unwrap();
        assert!(!piece.contains('\u{FFFD}'));
        out.push_str(&piece);
    }
    out.push_str(&s.finish().unwrap());
    assert_eq!(out, text);
}

#[test]
fn hf_dir_bos_rule_and_stop_ids() {
    let dir = std::env::temp_dir().join(format!("lserve-tok-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let t = TextTokenizer::from_gguf(&gpt2_vocab(Some("smollm"))).unwrap();
    let mut json = serde_json::to_value(t.inner()).unwrap();
    let (bos, seq) =
        (r#"{"SpecialToken": {"id": "<|im_start|>", "type_id": 0}}"#, r#"{"Sequence": {"id": "A", "type_id": 0}}"#);
    let pp = format!(
        r#"{{"type": "TemplateProcessing", "single": [{bos}, {seq}], "pair": [{seq}], "special_tokens": {{"<|im_start|>": {{"id": "<|im_start|>", "ids": [1], "tokens": ["<|im_start|>"]}}}}}}"#
    );
    json["post_processor"] = serde_json::from_str(&pp).unwrap();
    let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
    write("tokenizer.json", &json.to_string());
    let hf = TextTokenizer::from_hf_dir(&dir).unwrap();
    assert_eq!(hf.encode("hello").unwrap(), [1, id(&hf, "hello")]);
    write(
        "tokenizer_config.json",
        r#"{"add_bos_token": false, "bos_token": {"content": "<|im_start|>"}, "eos_token": "<|im_end|>"}"#,
    );
    write("generation_config.json", r#"{"eos_token_id": [2, 0]}"#);
    let hf = TextTokenizer::from_hf_dir(&dir).unwrap();
    assert_eq!(hf.encode("hello").unwrap(), [id(&hf, "hello")]);
    assert_eq!(hf.bos_token(), Some((1, "<|im_start|>".to_string())));
    assert_eq!(hf.stop_ids(), &[2, 0]);
    assert!(TextTokenizer::from_hf_dir(&dir.join("missing")).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}
