//! Fuzz-style property tests: thousands of mutated model files and requests per run, each handed
//! to the real parser in-process, asserting it never panics, never aborts (an abort ends the
//! whole test binary, which fails the run) and answers a bad input with an error value.
//!
//! Targets: the GGUF reader and loader (byte flips, extreme integers spliced over fields, metadata
//! values swapped for other types and extremes, tensor types and shapes changed under their
//! data), the Hugging Face folder loader (config.json, model.safetensors, tokenizer.json), the
//! config.json parser on its own, and the HTTP request path (OpenAI JSON bodies through
//! `parse_body` + validation, raw HTTP/1.1 bytes through hyper and the router on an in-memory
//! connection). Named regression cases from the hostile-input report must be errors.
//!
//! Cases per target: the defaults below keep the binary well under a minute in CI;
//! `LSERVE_FUZZ_CASES=N` runs N per target (e.g. 200000 for a long local run). proptest prints
//! the failing input and its seed.

mod common;

#[path = "fuzz/files.rs"]
mod files;
#[path = "fuzz/http.rs"]
mod http;

fn cases(default: u32) -> u32 {
    std::env::var("LSERVE_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn config(default: u32) -> proptest::test_runner::Config {
    proptest::test_runner::Config {
        cases: cases(default),
        failure_persistence: None,
        max_shrink_iters: 256,
        ..Default::default()
    }
}

fn files_vocab() -> (Vec<String>, Vec<String>) {
    common::tiny::vocab()
}
