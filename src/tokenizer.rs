//! Text tokenizer: builds a `tokenizers::Tokenizer` from GGUF tokenizer metadata
//! (`tokenizer.ggml.*`) or from a Hugging Face model folder, and wraps it with the
//! BOS / EOS / stop-token rules an inference engine needs.
//!
//! GGUF construction follows llama.cpp's `llama-vocab.cpp` and HF's `convert_slow_tokenizer.py`:
//! * `gpt2` (byte-level BPE): vocab + `"a b"` merges, no unk, pre-tokenizer chosen from
//!   `tokenizer.ggml.pre` by [`pre_tokenizer_names`] (llama.cpp's regex table; regexes are
//!   applied in sequence, each as an `Isolated` split, followed by a regex-less `ByteLevel`),
//!   `ByteLevel` decoder. An unknown or missing `pre` falls back to the GPT-2 `ByteLevel`
//!   regex and records a message in [`TextTokenizer::warnings`].
//! * `llama` (SentencePiece BPE): merges derived from the vocab and scores exactly as HF's
//!   `generate_merges` (every split of a piece into two in-vocab pieces, ranked by the merged
//!   piece's score descending, then by left/right piece length descending, stable in vocab
//!   order), `byte_fallback`, `fuse_unk`; normalizer `Prepend("▁")` (when `add_space_prefix`,
//!   default true) + `Replace(" ", "▁")`; decoder `Replace("▁"," ")`, `ByteFallback`, `Fuse`,
//!   `Strip(' ', 1, 0)`.
//! * Token types 2 (unknown) and 3 (control) become special added tokens, 4 (user-defined, e.g.
//!   Qwen's `<think>`) non-special added tokens; all are matched on the raw text, so text such
//!   as `"<|im_start|>"` encodes to its single id. `decode(.., skip_special = true)` drops the
//!   special ones only.
//!
//! BOS rule (one place, [`TextTokenizer::encode`]): the inner tokenizer never adds special
//! tokens (`add_special_tokens = false`, no post-processor is consulted); BOS is prepended by
//! this wrapper when `add_bos` is set and the encoded text does not already start with BOS
//! (so a chat template that writes the BOS itself does not produce two). `add_bos` is:
//! * GGUF: `tokenizer.ggml.add_bos_token` when present; otherwise true for `llama` (SPM) and for
//!   the `gpt2` pre-tokenizers llama.cpp marks as BOS-adding (llama3 family, tekken,
//!   chameleon), false for the other `gpt2` vocabularies (SmolLM2: false).
//! * HF folder: `tokenizer_config.json` `add_bos_token` when present; otherwise true exactly
//!   when the `tokenizer.json` post-processor is (or contains) a `TemplateProcessing` whose
//!   single-sequence template starts with the BOS special token (Llama 3 style).
//!
//! Stop ids: eos, eot and generation_config `eos_token_id`s, deduplicated, in that order. For
//! GGUF without an eot id, the first control token named `<|eot_id|>`, `<|im_end|>`,
//! `<end_of_turn>`, `<|end|>`, `<|eom_id|>` or `<EOT>` is used as eot (llama.cpp's text-based
//! detection, restricted to unambiguous names).
//!
//! Decoding skips ids the vocabulary does not know (HF behaviour). Errors are values.

use std::collections::HashMap;
use std::fmt;
use std::ops::Deref;
use std::path::Path;

use serde_json::Value as Json;
use tokenizers::decoders::DecoderWrapper;
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::normalizers::{NormalizerWrapper, Prepend, Replace, Sequence as NormSequence};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence as PreSequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, SplitDelimiterBehavior, Tokenizer};

/// Tokenizer metadata as stored in GGUF (`tokenizer.ggml.*` keys).
#[derive(Clone, Debug, Default)]
pub struct GgufVocab {
    /// `tokenizer.ggml.model`: "gpt2" (byte-level BPE) or "llama" (SentencePiece BPE).
    pub model: String,
    /// `tokenizer.ggml.pre`: pre-tokenizer name (see [`pre_tokenizer_names`]).
    pub pre: Option<String>,
    pub tokens: Vec<String>,
    /// 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
    pub token_types: Vec<i32>,
    /// SentencePiece scores (may be empty for gpt2).
    pub scores: Vec<f32>,
    /// `"a b"` pairs (gpt2).
    pub merges: Vec<String>,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub unk: Option<u32>,
    pub pad: Option<u32>,
    pub add_bos: Option<bool>,
    pub add_eos: Option<bool>,
    pub add_space_prefix: Option<bool>,
}

/// Error building or running a tokenizer.
#[derive(Debug)]
pub struct TokenizerError(pub String);

impl fmt::Display for TokenizerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tokenizer: {}", self.0)
    }
}

impl std::error::Error for TokenizerError {}

impl From<tokenizers::Error> for TokenizerError {
    fn from(e: tokenizers::Error) -> Self {
        TokenizerError(e.to_string())
    }
}

fn terr(context: &str, e: impl fmt::Display) -> TokenizerError {
    TokenizerError(format!("{context}: {e}"))
}

const TOKEN_UNKNOWN: i32 = 2;
const TOKEN_CONTROL: i32 = 3;
const TOKEN_USER_DEFINED: i32 = 4;

/// A ready tokenizer plus the model's BOS/EOS/stop conventions.
#[derive(Clone)]
pub struct TextTokenizer {
    inner: Tokenizer,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
    stop_ids: Vec<u32>,
    warnings: Vec<String>,
    /// Bytes of the longest token string (at least 1): no token stands for more text than this
    /// in byte-level BPE and SentencePiece, which [`TextTokenizer::byte_bound`] builds on.
    max_token_bytes: usize,
}

/// Longest GGUF token string accepted (real vocabularies stay below a few hundred bytes).
pub const MAX_TOKEN_BYTES: usize = 4096;
/// SentencePiece merges are derived from every split of every piece (quadratic in its length);
/// longer pieces are not split (none of a real vocabulary comes near).
const MAX_SPLIT_PIECE: usize = 256;

/// Largest tokenizer.json read (the biggest real ones are near 35 MB).
pub const MAX_TOKENIZER_JSON: u64 = 512 << 20;
/// Most tokens of a GGUF vocabulary (the model config's `MAX_VOCAB`, which the tokenizer layer
/// does not import; tests/hf_folder.rs checks they agree).
pub const MAX_GGUF_VOCAB: usize = 1 << 22;

fn longest_token(t: &Tokenizer) -> usize {
    t.get_vocab(true).keys().map(String::len).max().unwrap_or(1).max(1)
}

// ---------------------------------------------------------------------------------------------
// Pre-tokenizers (llama.cpp `llm_tokenizer_bpe` regex table; HF originals where llama.cpp
// rewrote `(?i:...)` or possessive forms for its own engine).

const GPT2_RE: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
const LLAMA3_RE: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_RE: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const SEED_CODER_RE: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+";
const BAILING_RE: &str =
    r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+";
const TEKKEN_RE: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const GPT4O_RE: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const PORO_RE: &str = r" ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{0964}\x{06D4}\x{060C})]+";
/// CJK ideographs, U+0800..U+4E00 and Hangul, as in llama.cpp's deepseek tables.
const DEEPSEEK_CJK_RE: &str = r"[\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+";
const DEEPSEEK_LLM_LETTERS_RE: &str = r"\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+";
const DEEPSEEK3_CJK_RE: &str = r"[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+";
const DEEPSEEK_LLM_PUNCT_RE: &str = r"\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+";
const DEEPSEEK3_RE: &str = r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##;

/// How a `gpt2` vocabulary splits text before BPE.
enum PreSpec {
    /// `ByteLevel` with its built-in GPT-2 regex.
    Gpt2,
    /// `Digits(individual)` then `ByteLevel` with the GPT-2 regex (llama.cpp's
    /// starcoder/smollm family; what the HF SmolLM2 tokenizer.json does).
    DigitsGpt2,
    /// llama.cpp regex list, each an `Isolated` split, then `ByteLevel(use_regex=false)`.
    Re(&'static [&'static str]),
}
use PreSpec::{DigitsGpt2, Gpt2, Re};

/// `tokenizer.ggml.pre` names (space-separated) with (pre-tokenizer, BPE `ignore_merges`, BOS
/// added by default), grouped as llama.cpp's `llama_vocab::impl::load` groups them.
#[rustfmt::skip]
const PRE_GROUPS: &[(&str, PreSpec, bool, bool)] = &[
    ("default gpt-2 phi-2 jina-es jina-de gigachat jina-v1-en jina-v2-es jina-v2-de jina-v2-code \
      roberta-bpe a.x-4.0 mellum mpt olmo jais trillion granite-docling exaone4", Gpt2, false, false),
    ("llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2", Re(&[LLAMA3_RE]), true, true),
    ("dbrx smaug-bpe glm4 chatglm-bpe", Re(&[LLAMA3_RE]), false, false),
    ("deepseek-llm", Re(&[r"[\r\n]", DEEPSEEK_LLM_LETTERS_RE, DEEPSEEK_LLM_PUNCT_RE, r"\s+$",
                          DEEPSEEK_CJK_RE, r"\p{N}+"]), false, false),
    ("deepseek-coder", Re(&[r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", DEEPSEEK_CJK_RE, r"\p{N}"]), false, false),
    ("deepseek-v3 hunyuan-dense", Re(&[r"\p{N}{1,3}", DEEPSEEK3_CJK_RE, DEEPSEEK3_RE]), false, false),
    ("falcon", Re(&[r"[\p{P}\$\+<=>\^~\|`]+", GPT2_RE, r"[0-9][0-9][0-9]"]), false, false),
    ("starcoder refact command-r smollm codeshell exaone minerva-7b", DigitsGpt2, false, false),
    ("qwen2 deepseek-r1-qwen kormo stablelm2 megrez hunyuan grok-2", Re(&[QWEN2_RE]), false, false),
    ("poro-chat bloom gpt3-finnish", Re(&[PORO_RE]), false, false),
    ("viking", Re(&[PORO_RE, r"\p{N}"]), false, false),
    ("tekken", Re(&[TEKKEN_RE]), true, true),
    ("chameleon", Re(&[r"<sentinel:[0-9]+>", r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", r"([\t\n]|    |  )",
                       r"\p{N}", r"[\p{P}!-/:-@\[-`{-~]", GPT2_RE]), false, true),
    ("gpt-4o llama4 minimax-m2", Re(&[GPT4O_RE]), false, false),
    ("seed-coder", Re(&[SEED_CODER_RE]), false, false),
    ("bailingmoe bailingmoe2 llada-moe", Re(&[BAILING_RE]), false, false),
];

/// Every `tokenizer.ggml.pre` value [`TextTokenizer::from_gguf`] understands.
pub fn pre_tokenizer_names() -> Vec<&'static str> {
    PRE_GROUPS.iter().flat_map(|g| g.0.split_whitespace()).collect()
}

/// (pre-tokenizer, ignore_merges, add_bos default) for a known name.
fn lookup_pre(name: &str) -> Option<(&'static PreSpec, bool, bool)> {
    PRE_GROUPS
        .iter()
        .find(|g| g.0.split_whitespace().any(|n| n == name))
        .map(|(_, spec, ignore, bos)| (spec, *ignore, *bos))
}

fn build_pre_tokenizer(spec: &PreSpec) -> Result<PreTokenizerWrapper, TokenizerError> {
    let byte_level = |use_regex| ByteLevel::new(false, false, use_regex);
    Ok(match spec {
        Gpt2 => byte_level(true).into(),
        DigitsGpt2 => PreSequence::new(vec![Digits::new(true).into(), byte_level(true).into()]).into(),
        Re(regexes) => {
            let mut steps: Vec<PreTokenizerWrapper> = Vec::with_capacity(regexes.len() + 1);
            for re in regexes.iter() {
                let split = Split::new(SplitPattern::Regex((*re).to_string()), SplitDelimiterBehavior::Isolated, false)
                    .map_err(|e| terr(&format!("pre-tokenizer regex {re:?}"), e))?;
                steps.push(split.into());
            }
            steps.push(byte_level(false).into());
            PreSequence::new(steps).into()
        }
    })
}

// ---------------------------------------------------------------------------------------------
// GGUF construction

impl TextTokenizer {
    /// Build from GGUF tokenizer metadata (`model` "gpt2" or "llama").
    pub fn from_gguf(v: &GgufVocab) -> Result<Self, TokenizerError> {
        if v.tokens.is_empty() {
            return Err(TokenizerError("GGUF vocabulary has no tokens".into()));
        }
        if v.tokens.len() > MAX_GGUF_VOCAB {
            return Err(TokenizerError(format!(
                "GGUF vocabulary of {} tokens is larger than lserve accepts ({MAX_GGUF_VOCAB})",
                v.tokens.len()
            )));
        }
        if let Some((i, t)) = v.tokens.iter().enumerate().find(|(_, t)| t.len() > MAX_TOKEN_BYTES) {
            return Err(TokenizerError(format!("GGUF token {i} is {} bytes long: a corrupt vocabulary?", t.len())));
        }
        let tokens = gguf_token_texts(&v.tokens);
        let mut warnings = Vec::new();
        let (mut inner, default_add_bos) = match v.model.as_str() {
            "gpt2" => build_gpt2(v, &tokens, &mut warnings)?,
            "llama" => (build_spm(v, &tokens)?, true),
            other => {
                return Err(TokenizerError(format!(
                    "unsupported GGUF tokenizer model {other:?} (expected \"gpt2\" or \"llama\")"
                )));
            }
        };
        add_special_tokens(&mut inner, &tokens, &v.token_types);
        let id_ok = |id: Option<u32>| id.filter(|&i| (i as usize) < tokens.len());
        let eot = id_ok(v.eot).or_else(|| detect_eot(&tokens, &v.token_types));
        let (bos, eos) = (id_ok(v.bos), id_ok(v.eos));
        Ok(Self {
            bos,
            eos,
            add_bos: v.add_bos.unwrap_or(default_add_bos),
            stop_ids: dedup([eos, eot].into_iter().flatten()),
            warnings,
            max_token_bytes: longest_token(&inner),
            inner,
        })
    }
}

/// Token texts with llama.cpp's replacement for empty entries (`[EMPTY_i]`).
fn gguf_token_texts(tokens: &[String]) -> Vec<String> {
    let text = |(i, t): (usize, &String)| match t.is_empty() {
        true => format!("[EMPTY_{i}]"),
        false => t.clone(),
    };
    tokens.iter().enumerate().map(text).collect()
}

fn make_vocab(tokens: &[String]) -> Vocab {
    let mut vocab = Vocab::with_capacity(tokens.len());
    for (i, t) in tokens.iter().enumerate() {
        vocab.insert(t.clone(), i as u32); // later duplicates win, as in HF and llama.cpp
    }
    vocab
}

fn build_gpt2(
    v: &GgufVocab,
    tokens: &[String],
    warnings: &mut Vec<String>,
) -> Result<(Tokenizer, bool), TokenizerError> {
    let (spec, ignore_merges, add_bos) = match v.pre.as_deref().map(|n| (n, lookup_pre(n))) {
        Some((_, Some(found))) => found,
        other => {
            let what = match other {
                Some((name, _)) => format!("unknown tokenizer.ggml.pre {name:?}"),
                None => "missing tokenizer.ggml.pre".to_string(),
            };
            warnings.push(format!("{what}; using the GPT-2 byte-level pre-tokenizer"));
            (&Gpt2, false, false)
        }
    };
    let vocab = make_vocab(tokens);
    let in_vocab = |a: &str, b: &str| [a, b, &format!("{a}{b}")].iter().all(|t| vocab.contains_key(*t));
    let merges: Vec<(String, String)> = (v.merges.iter())
        .filter_map(|m| m.split_once(' ').filter(|(a, b)| in_vocab(a, b)))
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    if merges.len() < v.merges.len() {
        let n = v.merges.len() - merges.len();
        warnings.push(format!("skipped {n} GGUF merges not made of vocabulary tokens"));
    }
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .ignore_merges(ignore_merges)
        .build()
        .map_err(|e| terr("building byte-level BPE", e))?;
    let mut tk = Tokenizer::new(bpe);
    tk.with_pre_tokenizer(Some(build_pre_tokenizer(spec)?));
    tk.with_decoder(Some(ByteLevel::default()));
    Ok((tk, add_bos))
}

fn build_spm(v: &GgufVocab, tokens: &[String]) -> Result<Tokenizer, TokenizerError> {
    let merges = spm_merges(tokens, &v.scores);
    let mut builder = BPE::builder().vocab_and_merges(make_vocab(tokens), merges).byte_fallback(true).fuse_unk(true);
    if let Some(unk) = v.unk.and_then(|u| tokens.get(u as usize)) {
        builder = builder.unk_token(unk.clone());
    }
    let bpe = builder.build().map_err(|e| terr("building SentencePiece BPE", e))?;
    let add_prefix = v.add_space_prefix.unwrap_or(true);
    let mut norm: Vec<NormalizerWrapper> = Vec::new();
    if add_prefix {
        norm.push(Prepend::new("▁".into()).into());
    }
    norm.push(Replace::new(" ", "▁")?.into());
    let mut dec: Vec<DecoderWrapper> =
        vec![Replace::new("▁", " ")?.into(), ByteFallback::new().into(), Fuse::new().into()];
    if add_prefix {
        dec.push(Strip::new(' ', 1, 0).into());
    }
    let mut tk = Tokenizer::new(bpe);
    tk.with_normalizer(Some(NormSequence::new(norm)));
    tk.with_decoder(Some(DecoderSequence::new(dec)));
    Ok(tk)
}

/// HF `generate_merges(vocab, vocab_scores)`: for each piece (first-occurrence order), every
/// split into two in-vocab pieces, sorted within the piece by (left id, right id); then a stable
/// sort by (score, left chars, right chars) descending. Missing scores count as 0.
fn spm_merges(tokens: &[String], scores: &[f32]) -> Vec<(String, String)> {
    let mut ids: HashMap<&str, u32> = HashMap::with_capacity(tokens.len());
    let mut score_of: HashMap<&str, f32> = HashMap::with_capacity(tokens.len());
    let mut order: Vec<&str> = Vec::with_capacity(tokens.len());
    for (i, t) in tokens.iter().enumerate() {
        if ids.insert(t.as_str(), i as u32).is_none() {
            order.push(t.as_str());
        }
        score_of.insert(t.as_str(), scores.get(i).copied().unwrap_or(0.0));
    }
    // (left, right, score, left chars, right chars)
    let mut all: Vec<(&str, &str, f32, usize, usize)> = Vec::new();
    for piece in order.into_iter().filter(|p| p.len() <= MAX_SPLIT_PIECE) {
        let score = score_of.get(piece).copied().unwrap_or(0.0);
        let mut local: Vec<(u32, u32, &str, &str)> = Vec::new();
        for (pos, _) in piece.char_indices().skip(1) {
            let (l, r) = piece.split_at(pos);
            if let (Some(&li), Some(&ri)) = (ids.get(l), ids.get(r)) {
                local.push((li, ri, l, r));
            }
        }
        local.sort_by_key(|&(li, ri, _, _)| (li, ri));
        all.extend(local.into_iter().map(|(_, _, l, r)| (l, r, score, l.chars().count(), r.chars().count())));
    }
    all.sort_by(|a, b| b.2.total_cmp(&a.2).then(b.3.cmp(&a.3)).then(b.4.cmp(&a.4)));
    all.into_iter().map(|(l, r, ..)| (l.to_string(), r.to_string())).collect()
}

/// Control and unknown tokens become special added tokens; user-defined ones become non-special
/// added tokens (kept by `decode(.., skip_special = true)`, as llama.cpp always renders them).
/// Both are matched on the raw text, so each encodes to its single id.
fn add_special_tokens(tk: &mut Tokenizer, tokens: &[String], types: &[i32]) {
    let mut special = Vec::new();
    let mut user = Vec::new();
    for (s, t) in tokens.iter().zip(types.iter()) {
        match *t {
            TOKEN_UNKNOWN | TOKEN_CONTROL => special.push(AddedToken::from(s.clone(), true)),
            TOKEN_USER_DEFINED => user.push(AddedToken::from(s.clone(), false).normalized(false)),
            _ => {}
        }
    }
    tk.add_special_tokens(&special);
    tk.add_tokens(&user);
}

fn detect_eot(tokens: &[String], types: &[i32]) -> Option<u32> {
    let names = "<|eot_id|> <|im_end|> <end_of_turn> <|end|> <|eom_id|> <EOT>";
    names.split(' ').find_map(|name| {
        tokens
            .iter()
            .enumerate()
            .find_map(|(i, t)| (t == name && types.get(i) == Some(&TOKEN_CONTROL)).then_some(i as u32))
    })
}

fn dedup(ids: impl IntoIterator<Item = u32>) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::new();
    for id in ids {
        if !out.contains(&id) {
            out.push(id);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Hugging Face folder

fn read_json(path: &Path) -> Result<Option<Json>, TokenizerError> {
    let err = |e: &dyn fmt::Display| terr(&path.display().to_string(), e);
    match crate::error::read_text_file(path, crate::error::MAX_SIDE_FILE) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(err(&e)),
        Ok(text) => serde_json::from_str(&text).map(Some).map_err(|e| err(&e)),
    }
}

/// `"<s>"` or `{"content": "<s>", ...}`.
fn token_string(v: Option<&Json>) -> Option<String> {
    match v? {
        Json::String(s) => Some(s.clone()),
        Json::Object(o) => o.get("content").and_then(Json::as_str).map(str::to_string),
        _ => None,
    }
}

/// Int or list of ints.
fn id_list(v: Option<&Json>) -> Vec<u32> {
    match v {
        Some(Json::Array(a)) => a.iter().filter_map(json_u32).collect(),
        Some(other) => json_u32(other).into_iter().collect(),
        None => Vec::new(),
    }
}

fn json_u32(v: &Json) -> Option<u32> {
    v.as_u64().and_then(|x| u32::try_from(x).ok())
}

/// The token a `TemplateProcessing` post-processor puts first in single-sequence mode
/// (searching inside `Sequence` post-processors too).
fn template_leading_special(pp: &Json) -> Option<String> {
    match pp.get("type")?.as_str()? {
        "TemplateProcessing" => Some(pp.pointer("/single/0/SpecialToken/id")?.as_str()?.into()),
        "Sequence" => pp["processors"].as_array()?.iter().find_map(template_leading_special),
        _ => None,
    }
}

impl TextTokenizer {
    /// `tokenizer.json`, plus `tokenizer_config.json` (add_bos_token, bos_token, eos_token as
    /// string or `{content}`), plus `generation_config.json` `eos_token_id` (int or list).
    pub fn from_hf_dir(dir: &Path) -> Result<Self, TokenizerError> {
        let tj = dir.join("tokenizer.json");
        let text =
            crate::error::read_text_file(&tj, MAX_TOKENIZER_JSON).map_err(|e| terr(&tj.display().to_string(), e))?;
        // The tokenizers crate is not ours to audit: a panic inside it on a malformed file becomes
        // an error here instead of ending the process.
        let parsed = std::panic::catch_unwind(|| text.parse::<Tokenizer>())
            .map_err(|_| TokenizerError(format!("{}: the tokenizers crate failed on this file", tj.display())))?;
        let inner = parsed.map_err(|e| terr(&tj.display().to_string(), e))?;
        let cfg = read_json(&dir.join("tokenizer_config.json"))?.unwrap_or(Json::Null);
        let gen_cfg = read_json(&dir.join("generation_config.json"))?.unwrap_or(Json::Null);
        let id_of = |s: Option<String>| s.and_then(|s| inner.token_to_id(&s));
        let gen_eos = id_list(gen_cfg.get("eos_token_id"));
        let mut bos =
            id_of(token_string(cfg.get("bos_token"))).or_else(|| gen_cfg.get("bos_token_id").and_then(json_u32));
        let eos = id_of(token_string(cfg.get("eos_token"))).or_else(|| gen_eos.first().copied());
        let add_bos = match cfg.get("add_bos_token").and_then(Json::as_bool) {
            Some(b) => b,
            None => {
                let pp = inner.get_post_processor().and_then(|p| serde_json::to_value(p).ok());
                let lead = pp.as_ref().and_then(template_leading_special);
                match lead.and_then(|t| inner.token_to_id(&t)) {
                    Some(id) if bos.is_none() || bos == Some(id) => {
                        bos = Some(id);
                        true
                    }
                    _ => false,
                }
            }
        };
        let stop_ids = dedup(eos.into_iter().chain(gen_eos));
        let max_token_bytes = longest_token(&inner);
        Ok(Self { inner, bos, eos, add_bos, stop_ids, warnings: Vec::new(), max_token_bytes })
    }
}

// ---------------------------------------------------------------------------------------------
// Encoding / decoding

impl TextTokenizer {
    /// Encode text; special tokens written in the text (e.g. `"<|im_start|>"`) are single ids.
    /// BOS is prepended when the model's config says so (see the module docs).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        self.encode_with(text, self.add_bos)
    }

    /// Encode with an explicit BOS choice (BOS is still not doubled if the text starts with it).
    pub fn encode_with(&self, text: &str, add_bos: bool) -> Result<Vec<u32>, TokenizerError> {
        let enc = self.inner.encode_fast(text, false)?;
        let ids = enc.get_ids();
        match self.bos {
            Some(bos) if add_bos && ids.first() != Some(&bos) => {
                let mut out = Vec::with_capacity(ids.len() + 1);
                out.push(bos);
                out.extend_from_slice(ids);
                Ok(out)
            }
            _ => Ok(ids.to_vec()),
        }
    }

    /// Bytes of text beyond which a prompt is refused without tokenizing it, for a limit of
    /// `max_tokens` tokens: twice what `max_tokens` of the longest token could cover, plus 4 KiB.
    /// Text that long cannot fit unless the tokenizer drops most of it (a whitespace-splitting
    /// word-level vocabulary), so prompts are bounded before the tokenizer allocates per token.
    pub fn byte_bound(&self, max_tokens: usize) -> usize {
        max_tokens.saturating_mul(self.max_token_bytes).saturating_mul(2).saturating_add(4096)
    }

    /// Decode ids to text; `skip_special` drops special (added) tokens such as BOS/EOS.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String, TokenizerError> {
        Ok(self.inner.decode(ids, skip_special)?)
    }

    fn token_pair(&self, id: Option<u32>) -> Option<(u32, String)> {
        let id = id?;
        self.inner.id_to_token(id).map(|t| (id, t))
    }

    pub fn bos_token(&self) -> Option<(u32, String)> {
        self.token_pair(self.bos)
    }

    pub fn eos_token(&self) -> Option<(u32, String)> {
        self.token_pair(self.eos)
    }

    /// Whether [`encode`](Self::encode) prepends BOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Ids that end generation: eos, eot, generation_config eos ids (deduplicated).
    pub fn stop_ids(&self) -> &[u32] {
        &self.stop_ids
    }

    /// Vocabulary size including added tokens.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// Non-fatal problems met while building (e.g. an unknown `tokenizer.ggml.pre`).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }
}

/// Incremental detokenizer for streaming (vLLM-style prefix/read offsets): push ids one at a
/// time and get the newly completed text. Text is held back while the decoded tail ends in
/// U+FFFD (an incomplete UTF-8 sequence), so a character is never split; [`finish`] flushes
/// whatever is left. Special tokens are skipped unless built with [`with_skip_special`].
///
/// [`finish`]: StreamDecoder::finish
/// [`with_skip_special`]: StreamDecoder::with_skip_special
pub struct StreamDecoder<T: Deref<Target = TextTokenizer>> {
    tok: T,
    ids: Vec<u32>,
    /// Start of the context window decoded with each step (kept for leading-space handling).
    prefix: usize,
    /// End of the ids whose text has already been emitted.
    read: usize,
    skip_special: bool,
}

impl<T: Deref<Target = TextTokenizer>> StreamDecoder<T> {
    /// `t` is `&TextTokenizer` or an owning handle such as `Arc<TextTokenizer>` (the server keeps
    /// one decoder per request).
    pub fn new(t: T) -> Self {
        Self::with_skip_special(t, true)
    }

    pub fn with_skip_special(t: T, skip_special: bool) -> Self {
        Self { tok: t, ids: Vec::new(), prefix: 0, read: 0, skip_special }
    }

    /// Add one id; returns the text it completes (possibly empty).
    pub fn push(&mut self, id: u32) -> Result<String, TokenizerError> {
        self.ids.push(id);
        self.step(false)
    }

    /// Flush the remaining text (incomplete characters come out as U+FFFD).
    pub fn finish(&mut self) -> Result<String, TokenizerError> {
        self.step(true)
    }

    fn step(&mut self, flush: bool) -> Result<String, TokenizerError> {
        let (tok, skip) = (&*self.tok, self.skip_special);
        let seen = tok.decode(&self.ids[self.prefix..self.read], skip)?;
        let full = tok.decode(&self.ids[self.prefix..], skip)?;
        if full.len() <= seen.len() || (!flush && full.ends_with('\u{FFFD}')) {
            if flush {
                self.reset_window();
            }
            return Ok(String::new());
        }
        let new_text = match full.get(seen.len()..) {
            Some(tail) if full.starts_with(&seen) => tail.to_string(),
            _ => {
                // Decoder rewrote the prefix: emit from the first differing character.
                let common = seen.chars().zip(full.chars()).take_while(|(a, b)| a == b);
                let n: usize = common.map(|(a, _)| a.len_utf8()).sum();
                full[n..].to_string()
            }
        };
        self.prefix = self.read;
        self.read = self.ids.len();
        if flush {
            self.reset_window();
        }
        // Drop ids that can no longer influence output.
        if self.prefix > 0 {
            self.ids.drain(..self.prefix);
            self.read -= self.prefix;
            self.prefix = 0;
        }
        Ok(new_text)
    }

    fn reset_window(&mut self) {
        self.ids.clear();
        self.prefix = 0;
        self.read = 0;
    }
}

#[cfg(test)]
mod tests;
