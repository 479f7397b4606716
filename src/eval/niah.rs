//! `lserve niah`: needle in a haystack (context length x needle depth), dense vs sparse.
//!
//! Each cell builds a haystack of generated, varied sentences (`eval::text`) of about the cell's
//! length in tokens, puts a needle with a random seven-digit number at the cell's depth (0% = the
//! start, 100% = just before the question), asks for the number through the model's chat
//! template, decodes greedily, and scores exact retrieval: the answer contains the number's
//! digits. The haystack and number depend only on (seed, length, depth), so dense and sparse runs
//! see the same prompts.

use serde::Serialize;

use super::text::{TextRng, sentence};
use crate::backend::Backend;
use crate::chat::{ChatMessage, ChatTemplate};
use crate::engine::{Engine, GenerateRequest};
use crate::error::{Error, Result};
use crate::sampling::SamplingParams;
use crate::tokenizer::TextTokenizer;

/// Answer tokens generated per cell.
pub const ANSWER_TOKENS: usize = 32;

#[derive(Clone, Debug, Serialize)]
pub struct NiahCell {
    pub mode: String,
    pub length: usize,
    pub depth: u32,
    pub prompt_tokens: usize,
    pub needle: String,
    pub answer: String,
    pub correct: bool,
    pub kv_read_fraction: f64,
}

/// "1k,2k,4k,8k" (k = 1024) or plain positive counts; errors name `flag`.
pub fn parse_lengths(flag: &str, s: &str) -> Result<Vec<usize>> {
    s.split(',')
        .map(|t| {
            let t = t.trim().to_ascii_lowercase();
            let (num, mult) = t.strip_suffix('k').map_or((t.as_str(), 1), |n| (n, 1024));
            num.parse::<usize>()
                .ok()
                .filter(|&n| n > 0)
                .and_then(|n| n.checked_mul(mult))
                .ok_or_else(|| Error::InvalidArgument(format!("{flag}: `{t}` is not a positive count like 4k or 4096")))
        })
        .collect()
}

/// `n` tokens of a filler sentence, an error when 0: a tokenizer that encodes plain English to
/// nothing would leave the document builders looping forever.
pub fn nonempty(n: usize) -> Result<usize> {
    if n == 0 {
        return Err(Error::Tokenizer("the tokenizer encodes filler text to no tokens".into()));
    }
    Ok(n)
}

/// "0,25,50,75,100" (percent).
pub fn parse_depths(s: &str) -> Result<Vec<u32>> {
    s.split(',')
        .map(|t| {
            t.trim()
                .trim_end_matches('%')
                .parse::<u32>()
                .ok()
                .filter(|&d| d <= 100)
                .ok_or_else(|| Error::InvalidArgument(format!("--depths: `{t}` is not a percentage 0..100")))
        })
        .collect()
}

/// The prompt of one cell and its needle number; about `length` tokens in all.
pub fn cell_prompt(
    tok: &TextTokenizer,
    template: &ChatTemplate,
    length: usize,
    depth: u32,
    seed: u64,
) -> Result<(Vec<u32>, String)> {
    let mut rng = TextRng::new(seed ^ (length as u64) << 20 ^ depth as u64);
    let number = (1_000_000 + rng.below(9_000_000)).to_string();
    let needle = format!(" The special magic number is {number}.");
    let head = "Below is a long text. Somewhere in it is a special magic number. Remember it.\n\n";
    let question = "\n\nWhat is the special magic number mentioned in the text above? Answer with the number only.";
    let render = |hay: &str| -> Result<Vec<u32>> {
        let msg = ChatMessage { role: "user".into(), content: format!("{head}{hay}{question}") };
        let text = template.render(&[msg], true).map_err(|e| Error::Template(e.0))?;
        tok.encode(&text).map_err(|e| Error::Tokenizer(e.0))
    };
    let overhead = render(&needle)?.len();
    if overhead >= length {
        return Err(Error::InvalidArgument(format!("length {length} is too short for a NIAH prompt")));
    }
    let mut sentences = vec![];
    let mut n = 0;
    while n + overhead < length {
        let s = format!(" {}", sentence(&mut rng));
        n += nonempty(tok.encode(&s).map_err(|e| Error::Tokenizer(e.0))?.len())?;
        sentences.push(s);
    }
    // Sentence lengths add up to a little more than the joined text; trim to fit.
    loop {
        let at = (sentences.len() * depth as usize + 50) / 100;
        let mut hay = sentences.clone();
        hay.insert(at.min(hay.len()), needle.clone());
        let ids = render(&hay.concat())?;
        if ids.len() <= length || sentences.is_empty() {
            return Ok((ids, number));
        }
        sentences.pop();
    }
}

/// Run one prompt greedily (stopping at `stop_ids`) and score it.
pub fn run_cell<B: Backend>(
    e: &mut Engine<B>,
    tok: &TextTokenizer,
    stop_ids: &[u32],
    prompt: Vec<u32>,
    number: &str,
) -> Result<(String, bool, f64)> {
    let req = GenerateRequest {
        prompt,
        max_tokens: ANSWER_TOKENS,
        sampling: SamplingParams::greedy(),
        stop_ids: stop_ids.to_vec(),
        ignore_eos: false,
    };
    let out = e.generate(&req, &mut |_| Ok(()))?;
    let answer = tok.decode(&out.tokens, true).map_err(|e| Error::Tokenizer(e.0))?;
    let digits: String = answer.chars().filter(char::is_ascii_digit).collect();
    Ok((answer.trim().to_string(), digits.contains(number), out.kv_reads.fraction()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_grids() {
        assert_eq!(parse_lengths("--lengths", "1k, 2K,4096").unwrap(), vec![1024, 2048, 4096]);
        assert!(parse_lengths("--lengths", "1k,x").is_err() && parse_lengths("--lengths", "0").is_err());
        // A count whose k-multiple overflows is an error, not a wrapped length.
        assert!(parse_lengths("--contexts", "18014398509481984k").is_err());
        assert!(nonempty(0).is_err() && nonempty(3).unwrap() == 3);
        let e = parse_lengths("--batch", "0").unwrap_err().to_string();
        assert!(e.contains("--batch") && e.contains("`0`"), "{e}");
        assert_eq!(parse_depths("0,25,100%").unwrap(), vec![0, 25, 100]);
        assert!(parse_depths("101").is_err());
    }
}
