//! The accuracy suite's tasks (`lserve accuracy`, `eval::accuracy`): how each sample's prompt is
//! built and how an answer is scored. Prompts are plain text for base models (no chat template):
//! a long context, a question, and the start of the answer for the model to complete greedily.
//!
//! - `ppl`: a window of long natural text; the last `score_tokens` tokens are scored by decode
//!   steps (so page selection and streaming heads act on every scored token). Metric: mean NLL.
//! - `niah`: one needle ("The special magic number is N.") at a seeded depth of filler text.
//! - `niah_multikey`: four needles with different keys (RULER's multi-key NIAH: the other three
//!   are distractors); the question names one key.
//! - `vt`: RULER-style variable tracking: a chain `VAR A = N`, `VAR B = VAR A`, ... spread through
//!   the filler; the model lists the variables that hold N. Score: share of the chain named.
//! - `cwe`: RULER-style common-word extraction: a numbered list of words where five words recur
//!   many times and the rest once; the model names the most common words. Score: share named.
//!
//! Every sample depends only on (task, length, index, seed), so every attention configuration
//! sees the same prompts. Generation scores are 0..=100 points.

use super::text::{TextRng, sentence};
use crate::error::{Error, Result};
use crate::tokenizer::TextTokenizer;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Task {
    Ppl,
    Niah,
    NiahMultikey,
    Vt,
    Cwe,
}

impl Task {
    pub const ALL: [Task; 5] = [Task::Ppl, Task::Niah, Task::NiahMultikey, Task::Vt, Task::Cwe];

    pub fn name(self) -> &'static str {
        match self {
            Task::Ppl => "ppl",
            Task::Niah => "niah",
            Task::NiahMultikey => "niah_multikey",
            Task::Vt => "vt",
            Task::Cwe => "cwe",
        }
    }

    /// "ppl,niah,..." or "all".
    pub fn parse_list(s: &str) -> Result<Vec<Task>> {
        if s.trim() == "all" {
            return Ok(Task::ALL.to_vec());
        }
        s.split(',')
            .map(|t| {
                Task::ALL.into_iter().find(|k| k.name() == t.trim()).ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "--tasks: unknown task `{t}` (ppl, niah, niah_multikey, vt, cwe, all)"
                    ))
                })
            })
            .collect()
    }

    /// Tokens generated for an answer.
    pub fn answer_tokens(self) -> usize {
        match self {
            Task::Ppl => 0,
            Task::Niah | Task::NiahMultikey => 12,
            Task::Vt => 24,
            Task::Cwe => 32,
        }
    }
}

/// One prompt and what a right answer contains.
#[derive(Clone, Debug)]
pub struct Sample {
    pub prompt: Vec<u32>,
    /// Strings the answer should contain (numbers, variable names, words).
    pub expect: Vec<String>,
}

fn enc(tok: &TextTokenizer, s: &str) -> Result<Vec<u32>> {
    tok.encode(s).map_err(|e| Error::Tokenizer(e.0))
}

/// Filler sentences of about `tokens` tokens.
fn filler(tok: &TextTokenizer, rng: &mut TextRng, tokens: usize) -> Result<Vec<String>> {
    let mut out = vec![];
    let mut n = 0;
    while n < tokens {
        let s = format!(" {}", sentence(rng));
        n += super::niah::nonempty(tok.encode_with(&s, false).map_err(|e| Error::Tokenizer(e.0))?.len())?;
        out.push(s);
    }
    Ok(out)
}

/// The intro, filler with `inserts` at their depths (0..=1), then `tail`; trimmed (dropping
/// filler from the end) to at most `length` tokens.
fn assemble(
    tok: &TextTokenizer,
    rng: &mut TextRng,
    length: usize,
    inserts: &[(f64, String)],
    tail: &str,
) -> Result<Vec<u32>> {
    let intro = "Read the following text carefully and answer the question at the end.\n\n";
    let fixed: usize =
        inserts.iter().map(|(_, s)| s.len() / 3).sum::<usize>() + enc(tok, tail)?.len() + enc(tok, intro)?.len() + 8;
    if fixed + 64 >= length {
        return Err(Error::InvalidArgument(format!("length {length} is too short for this task")));
    }
    let mut hay = filler(tok, rng, length - fixed)?;
    loop {
        let mut parts = hay.clone();
        let mut order: Vec<&(f64, String)> = inserts.iter().collect();
        order.sort_by(|a, b| b.0.total_cmp(&a.0));
        for (depth, s) in order {
            let at = ((hay.len() as f64) * depth).round() as usize;
            parts.insert(at.min(parts.len()), format!(" {s}"));
        }
        let ids = enc(tok, &(intro.to_string() + parts.concat().trim_start() + tail))?;
        if ids.len() <= length || hay.is_empty() {
            return Ok(ids);
        }
        let over = ids.len() - length;
        hay.truncate(hay.len().saturating_sub(over.div_ceil(20).max(1)));
    }
}

const KEYS: &[&str] = &[
    "amber-falcon",
    "silver-otter",
    "quiet-meadow",
    "copper-kettle",
    "northern-lantern",
    "velvet-harbor",
    "crimson-orchard",
    "hollow-reed",
    "granite-sparrow",
    "misty-bridge",
    "golden-anchor",
    "rusty-compass",
];
const VARS: &[&str] = &["QXJ", "MRV", "TZK", "BWL", "HNP", "DCF", "YGS", "LKE", "PVA", "ZOU", "FEQ", "WIT"];
const WORDS: &[&str] = &[
    "apple", "river", "candle", "mirror", "pepper", "ladder", "cotton", "violin", "garden", "helmet", "marble",
    "pencil", "rocket", "saddle", "tunnel", "wallet", "basket", "carpet", "donkey", "engine", "forest", "guitar",
    "hammer", "island", "jacket", "kitten", "lemon", "magnet", "needle", "orange", "parrot", "quilt", "rabbit",
    "silver", "tomato", "umbrella", "valley", "window", "yogurt", "zipper", "anchor", "button", "castle", "dragon",
    "feather", "glove", "harbor", "icicle", "jungle", "kettle", "lantern", "meadow", "napkin", "oyster", "pillow",
    "quarry", "ribbon", "shovel", "teapot", "velvet", "walnut", "barrel", "cactus", "dolphin", "falcon", "goblet",
    "hazel",
];

fn number(rng: &mut TextRng) -> String {
    (1_000_000 + rng.below(9_000_000)).to_string()
}

/// The sample `index` of a generation task at `length` tokens.
pub fn make_sample(tok: &TextTokenizer, task: Task, length: usize, index: usize, seed: u64) -> Result<Sample> {
    let mut rng = TextRng::new(seed ^ (length as u64) << 24 ^ (index as u64) << 8 ^ task as u64);
    match task {
        Task::Ppl => Err(Error::InvalidArgument("ppl samples come from the corpus".into())),
        Task::Niah => {
            let n = number(&mut rng);
            let depth = rng.below(101) as f64 / 100.0;
            let tail = "\n\nQuestion: What is the special magic number mentioned in the text above?\nAnswer: The special magic number is";
            let ids = assemble(tok, &mut rng, length, &[(depth, format!("The special magic number is {n}."))], tail)?;
            Ok(Sample { prompt: ids, expect: vec![n] })
        }
        Task::NiahMultikey => {
            let mut keys: Vec<&str> = vec![];
            while keys.len() < 4 {
                let k = rng.pick(KEYS);
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
            let nums: Vec<String> = keys.iter().map(|_| number(&mut rng)).collect();
            let inserts: Vec<(f64, String)> = keys
                .iter()
                .zip(&nums)
                .map(|(k, n)| (rng.below(101) as f64 / 100.0, format!("The special magic number for {k} is {n}.")))
                .collect();
            let target = rng.below(4);
            let tail = format!(
                "\n\nQuestion: What is the special magic number for {}?\nAnswer: The special magic number for {} is",
                keys[target], keys[target]
            );
            let ids = assemble(tok, &mut rng, length, &inserts, &tail)?;
            Ok(Sample { prompt: ids, expect: vec![nums[target].clone()] })
        }
        Task::Vt => {
            let n = (10_000 + rng.below(90_000)).to_string();
            let mut names: Vec<&str> = vec![];
            while names.len() < 4 {
                let v = rng.pick(VARS);
                if !names.contains(&v) {
                    names.push(v);
                }
            }
            let mut inserts = vec![(0.05, format!("VAR {} = {n}.", names[0]))];
            for i in 1..names.len() {
                inserts.push((
                    0.05 + 0.9 * i as f64 / names.len() as f64,
                    format!("VAR {} = VAR {}.", names[i], names[i - 1]),
                ));
            }
            let tail = format!(
                "\n\nQuestion: Find all variables that are assigned the value {n} in the text above.\nAnswer: The variables assigned the value {n} are:"
            );
            let ids = assemble(tok, &mut rng, length, &inserts, &tail)?;
            Ok(Sample { prompt: ids, expect: names.iter().map(|s| s.to_string()).collect() })
        }
        Task::Cwe => cwe_sample(tok, &mut rng, length),
    }
}

fn cwe_sample(tok: &TextTokenizer, rng: &mut TextRng, length: usize) -> Result<Sample> {
    let mut common: Vec<&str> = vec![];
    while common.len() < 5 {
        let w = rng.pick(WORDS);
        if !common.contains(&w) {
            common.push(w);
        }
    }
    let rare: Vec<&str> = WORDS.iter().copied().filter(|w| !common.contains(w)).collect();
    let tail = "\n\nQuestion: What are the 5 most common words in the numbered list above?\nAnswer: The 5 most common words in the list are:";
    let budget = length.saturating_sub(enc(tok, tail)?.len() + 40);
    // Each entry is about 4 tokens; the common words fill a third of the list.
    let entries = budget / 4;
    if entries < 30 {
        return Err(Error::InvalidArgument(format!("length {length} is too short for cwe")));
    }
    let mut list: Vec<&str> =
        (0..entries).map(|i| if i % 3 == 0 { common[(i / 3) % 5] } else { rng.pick(&rare) }).collect();
    for i in (1..list.len()).rev() {
        list.swap(i, rng.below(i + 1));
    }
    loop {
        let body: String = list.iter().enumerate().map(|(i, w)| format!("{}. {w}\n", i + 1)).collect();
        let ids = enc(tok, &format!("Below is a numbered list of words.\n\n{body}{tail}"))?;
        if ids.len() <= length || list.len() < 30 {
            return Ok(Sample { prompt: ids, expect: common.iter().map(|s| s.to_string()).collect() });
        }
        let over = (ids.len() - length).div_ceil(4).max(1);
        list.truncate(list.len() - over.min(list.len()));
    }
}

/// Points (0..=100) an answer earns: NIAH tasks need the number's digits; vt and cwe earn the
/// share of expected names/words the answer contains (as whole words, case-insensitive).
pub fn score_answer(task: Task, answer: &str, expect: &[String]) -> f64 {
    match task {
        Task::Niah | Task::NiahMultikey => {
            let digits: String = answer.chars().filter(char::is_ascii_digit).collect();
            100.0 * expect.iter().all(|n| digits.contains(n.as_str())) as u8 as f64
        }
        Task::Vt | Task::Cwe => {
            let words: Vec<String> =
                answer.split(|c: char| !c.is_alphanumeric()).map(|w| w.to_ascii_lowercase()).collect();
            let hit = expect.iter().filter(|e| words.contains(&e.to_ascii_lowercase())).count();
            100.0 * hit as f64 / expect.len().max(1) as f64
        }
        Task::Ppl => 0.0,
    }
}

/// A window of `length` tokens of the corpus for ppl sample `index` (windows start at spread
/// offsets; a corpus shorter than `length` is an error).
pub fn ppl_window(corpus: &[u32], bos: Option<u32>, length: usize, index: usize) -> Result<Vec<u32>> {
    let body = length - bos.is_some() as usize;
    if corpus.len() < body {
        return Err(Error::InvalidArgument(format!(
            "the ppl corpus has {} tokens, fewer than the {length} asked for",
            corpus.len()
        )));
    }
    let span = corpus.len() - body;
    let start = if span == 0 { 0 } else { (index * 7919 * 64) % (span + 1) };
    Ok(bos.into_iter().chain(corpus[start..start + body].iter().copied()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores() {
        let e = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(score_answer(Task::Niah, " 1234567.", &e(&["1234567"])), 100.0);
        assert_eq!(score_answer(Task::Niah, " 123 4567", &e(&["1234567"])), 100.0);
        assert_eq!(score_answer(Task::Niah, " 1234568", &e(&["1234567"])), 0.0);
        assert_eq!(score_answer(Task::Vt, " QXJ, MRV and tzk", &e(&["QXJ", "MRV", "TZK", "BWL"])), 75.0);
        assert_eq!(score_answer(Task::Cwe, " apples, river", &e(&["apple", "river"])), 50.0);
        assert!(Task::parse_list("ppl,vt").unwrap() == vec![Task::Ppl, Task::Vt]);
        assert!(Task::parse_list("ppl,x").is_err());
        assert_eq!(Task::parse_list("all").unwrap().len(), 5);
    }

    #[test]
    fn ppl_windows() {
        let corpus: Vec<u32> = (0..1000).collect();
        let w = ppl_window(&corpus, Some(2), 100, 3).unwrap();
        assert_eq!((w.len(), w[0]), (100, 2));
        assert!(w[1..].windows(2).all(|p| p[1] == p[0] + 1));
        assert!(ppl_window(&corpus, None, 2000, 0).is_err());
    }
}
