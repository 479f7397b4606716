//! `lserve calibrate`: find the streaming heads of a model (DESIGN.md §5).
//!
//! The tool builds its own calibration documents — passkey retrieval over varied filler text: a
//! five-digit key stated at a random depth, asked for at the end — runs them through the model
//! with dense attention, and for every layer and KV head measures the softmax mass that the
//! head's query heads put outside the Lambda mask (the first `sink` tokens and the last `local`),
//! averaged over every query far enough from the start to have any key outside it. Heads whose
//! mass is lowest lose least when restricted to sink + local: they become the streaming heads.

use super::text::{TextRng, sentence};
use crate::backend::{Backend, DType, LambdaMassParams, LayerKv, PagedMeta};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::kv::HeadLayout;
use crate::model::llama::Logits;
use crate::sparse::HeadPattern;
use crate::tokenizer::TextTokenizer;

#[derive(Clone, Debug)]
pub struct CalibrateOptions {
    pub docs: usize,
    /// Tokens per document.
    pub length: usize,
    pub sink: usize,
    pub local: usize,
    pub seed: u64,
}

/// A passkey document of about `length` tokens (never more).
pub fn passkey_document(tok: &TextTokenizer, length: usize, rng: &mut TextRng) -> Result<(Vec<u32>, String)> {
    let key = 10_000 + rng.below(90_000);
    let needle = format!(" The pass key is {key}. Remember it. {key} is the pass key.");
    let question = " What is the pass key? The pass key is";
    let enc = |s: &str| tok.encode(s).map_err(|e| Error::Tokenizer(e.0));
    let fixed = enc(&needle)?.len() + enc(question)?.len() + 8;
    let mut sentences = vec![];
    let mut n = 0;
    while n + fixed < length {
        let s = format!(" {}", sentence(rng));
        n += super::niah::nonempty(enc(&s)?.len())?;
        sentences.push(s);
    }
    sentences.pop();
    let at = rng.below(sentences.len() + 1);
    sentences.insert(at, needle);
    let text = sentences.concat() + question;
    let mut ids = enc(&text)?;
    ids.truncate(length);
    Ok((ids, key.to_string()))
}

/// Measure every KV head; the engine must run dense (no streaming heads, no selection).
pub fn calibrate<B: Backend>(e: &mut Engine<B>, tok: &TextTokenizer, o: &CalibrateOptions) -> Result<HeadPattern> {
    let c = e.model.cfg.clone();
    // Dense: no streaming heads beyond Gemma 3's local layers, which always keep only their
    // window and are not measured (they have no retrieval pool; patterns apply to global layers).
    let dense = crate::model::gemma3::local_layout(&c, HeadLayout::all_retrieval(c.num_layers, c.num_kv_heads));
    if e.cache.shape.layout != dense {
        return Err(Error::InvalidArgument("calibration needs an engine without streaming heads".into()));
    }
    let measured: Vec<bool> = (0..c.num_layers).map(|l| dense.n_ret(l) > 0).collect();
    let scale = c.gemma.as_ref().map_or(c.head_dim as f32, |g| g.query_pre_attn_scalar).sqrt().recip();
    if o.length <= o.sink.saturating_add(o.local) || o.docs == 0 {
        return Err(Error::InvalidArgument(format!(
            "calibration needs documents longer than sink {} + local {} tokens (got {} docs of {})",
            o.sink, o.local, o.docs, o.length
        )));
    }
    let (ps, num_pages) = (e.cache.shape.page_size, e.cache.shape.num_pages);
    let group = c.num_heads / c.num_kv_heads;
    // [layer][kv_head] sum of per-query masses, and the number of queries summed.
    let mut sums = vec![vec![0f64; c.num_kv_heads]; c.num_layers];
    let mut counted = 0usize;
    let mut rng = TextRng::new(o.seed);
    for _ in 0..o.docs {
        let (ids, _) = passkey_document(tok, o.length, &mut rng)?;
        let mut seq = e.cache.admit()?;
        let mut start = 0;
        let mut result = Ok(());
        for part in ids.chunks(e.prefill_chunk.max(1)) {
            let n = part.len();
            // Rows of this chunk at positions >= sink + local have keys outside the mask.
            let first = (o.sink + o.local).saturating_sub(start).min(n);
            let mut hook =
                |be: &B, layer: usize, q: &B::Buffer, kv: LayerKv<'_, B>, meta: &PagedMeta<'_, B>| -> Result<()> {
                    if !measured[layer] {
                        return Ok(());
                    }
                    let p = LambdaMassParams {
                        n_tokens: n as u32,
                        n_heads: c.num_heads as u32,
                        n_kv_heads: c.num_kv_heads as u32,
                        head_dim: c.head_dim as u32,
                        page_size: ps as u32,
                        num_pages: num_pages as u32,
                        scale,
                        sink: o.sink as u32,
                        local: o.local as u32,
                        ..Default::default()
                    };
                    let mut out = be.alloc(DType::F32, n * c.num_heads)?;
                    be.lambda_mass(&p, q, kv, meta, &mut out)?;
                    let mass = be.download_f32(&out, 0, n * c.num_heads)?;
                    for row in mass.chunks(c.num_heads).skip(first) {
                        for (h, m) in row.iter().enumerate() {
                            sums[layer][h / group] += *m as f64 / group as f64;
                        }
                    }
                    Ok(())
                };
            result = e.step(&mut seq, part, Logits::None, Some(&mut hook)).map(|_| ());
            if result.is_err() {
                break;
            }
            counted += n - first;
            start += n;
        }
        e.cache.release(&mut seq)?;
        result?;
    }
    let scores = sums.iter().map(|row| row.iter().map(|s| s / counted.max(1) as f64).collect()).collect();
    Ok(HeadPattern { model: String::new(), sink_tokens: o.sink, local_tokens: o.local, scores })
}
