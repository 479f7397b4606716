//! Shared test helpers: the default model (fetched on first use, as the CLI does), the committed
//! `transformers` reference outputs, and a .npy reader.
#![allow(dead_code)]

pub mod naive;
pub mod tiny;

use std::path::{Path, PathBuf};

pub fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

/// The SmolLM2-135M GGUF: `$LSERVE_TEST_MODEL`, else the cached alias (fetched if missing).
pub fn model_path() -> PathBuf {
    if let Some(p) = std::env::var_os("LSERVE_TEST_MODEL") {
        return PathBuf::from(p);
    }
    lserve::fetch::resolve_model(None).expect("the default model could not be fetched (see .ci/run)")
}

/// The Gemma 3 270M GGUF: `$LSERVE_TEST_GEMMA`, else the cached `gemma3-270m` alias (fetched if
/// missing).
pub fn gemma_path() -> PathBuf {
    if let Some(p) = std::env::var_os("LSERVE_TEST_GEMMA") {
        return PathBuf::from(p);
    }
    lserve::fetch::resolve_model(Some("gemma3-270m")).expect("the gemma3-270m model could not be fetched")
}

/// tests/data/gemma3_ref.json (scripts/make_gemma3_ref.py).
pub fn gemma_reference() -> serde_json::Value {
    let text = std::fs::read_to_string(data("gemma3_ref.json")).expect("gemma3 reference json");
    serde_json::from_str(&text).expect("gemma3 reference json parses")
}

pub fn reference() -> serde_json::Value {
    let text = std::fs::read_to_string(data("smollm2_ref.json")).expect("reference json");
    serde_json::from_str(&text).expect("reference json parses")
}

pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().expect("id array").iter().map(|x| x.as_u64().expect("id") as u32).collect()
}

/// A float32 little-endian 1-D .npy file (format version 1.0).
pub fn read_npy_f32(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).expect("npy file");
    assert_eq!(&bytes[..6], b"\x93NUMPY", "not a .npy file");
    assert_eq!(bytes[6], 1, "npy version 1 expected");
    let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    let header = std::str::from_utf8(&bytes[10..10 + header_len]).expect("ascii header");
    assert!(header.contains("'<f4'") && header.contains("False"), "float32 C-order expected: {header}");
    bytes[10 + header_len..].chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// A seed fresh each run, printed so a failure can be replayed with LSERVE_TEST_SEED.
pub fn seed() -> u64 {
    let s = std::env::var("LSERVE_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    });
    eprintln!("test seed: {s} (replay with LSERVE_TEST_SEED={s})");
    s
}

/// An engine for `model` with the given config, sized for `max_tokens`.
pub fn engine(
    model: lserve::model::llama::Llama<lserve::backend::cpu::CpuBackend>,
    max_tokens: usize,
    config: lserve::sparse::Config,
    prefill_chunk: usize,
) -> lserve::engine::Engine<lserve::backend::cpu::CpuBackend> {
    let opts = lserve::engine::EngineOptions { config, max_tokens, max_seqs: 1, prefill_chunk, layout: None };
    lserve::engine::build_engine(lserve::backend::cpu::CpuBackend::new(), model, &opts).expect("engine builds")
}

/// The default config with a given page geometry.
pub fn paged_config(physical: usize, logical: usize) -> lserve::sparse::Config {
    let mut c = lserve::sparse::Config::default();
    c.cache.physical_page = physical;
    c.cache.logical_page = logical;
    c
}

/// The wgpu backend on the first adapter; None (skip) when there is none, unless
/// LSERVE_REQUIRE_WGPU=1, which turns a missing adapter into a failure.
#[cfg(feature = "wgpu")]
pub fn wgpu_backend() -> Option<lserve::backend::wgpu::WgpuBackend> {
    wgpu_backend_with(lserve::backend::wgpu::WgpuOptions::from_env().expect("LSERVE_WGPU_FEATURES"))
}

/// As [`wgpu_backend`], with the optional features `opts` allows.
#[cfg(feature = "wgpu")]
pub fn wgpu_backend_with(opts: lserve::backend::wgpu::WgpuOptions) -> Option<lserve::backend::wgpu::WgpuBackend> {
    match lserve::backend::wgpu::WgpuBackend::with_options(None, opts) {
        Ok(b) => Some(b),
        Err(e) if std::env::var("LSERVE_REQUIRE_WGPU").is_ok_and(|v| v == "1") => panic!("wgpu required: {e}"),
        Err(e) => {
            eprintln!("skipping wgpu tests: {e}");
            None
        }
    }
}

/// The CUDA backend on device 0; None (skip) when there is no usable device, unless
/// LSERVE_REQUIRE_CUDA=1, which turns a missing device into a failure (the GPU run sets it).
#[cfg(feature = "cuda")]
pub fn cuda_backend() -> Option<lserve::backend::cuda::CudaBackend> {
    cuda_backend_mmv(None)
}

/// [`cuda_backend`] opened with the batch-1 GEMV mode `mmv` (None: `LSERVE_CUDA_MMV`, default
/// `auto`); its `Caps::act_x8_dtypes` follow that mode.
pub fn cuda_backend_mmv(mmv: Option<lserve::backend::cuda::MmvMode>) -> Option<lserve::backend::cuda::CudaBackend> {
    cuda_backend_with(lserve::backend::cuda::CudaOptions { mmv, ..Default::default() })
}

/// [`cuda_backend`] opened with `opts` (the kernel cache added).
pub fn cuda_backend_with(opts: lserve::backend::cuda::CudaOptions) -> Option<lserve::backend::cuda::CudaBackend> {
    let opts =
        lserve::backend::cuda::CudaOptions { kernel_cache: Some(lserve::fetch::cache_dir().join("cuda")), ..opts };
    match lserve::backend::cuda::CudaBackend::with_options(0, opts) {
        Ok(b) => Some(b),
        Err(e) if std::env::var("LSERVE_REQUIRE_CUDA").is_ok_and(|v| v == "1") => panic!("CUDA required: {e}"),
        Err(e) => {
            eprintln!("skipping CUDA tests: {e}");
            None
        }
    }
}

/// `n` greedy tokens after `prompt` (end-of-sequence ignored), by `Engine::generate`.
pub fn generate_greedy<B: lserve::backend::Backend>(
    e: &mut lserve::engine::Engine<B>,
    prompt: &[u32],
    n: usize,
) -> lserve::engine::GenerateOutput {
    let req = lserve::engine::GenerateRequest {
        prompt: prompt.to_vec(),
        max_tokens: n,
        sampling: lserve::sampling::SamplingParams::greedy(),
        stop_ids: vec![],
        ignore_eos: true,
    };
    e.generate(&req, &mut |_| Ok(())).unwrap()
}

/// Every row's logits of `ids`: the first `prefill` tokens in steps of `chunk`, then one token a
/// step (decode); the sequence is released after.
pub fn step_logits<B: lserve::backend::Backend>(
    e: &mut lserve::engine::Engine<B>,
    ids: &[u32],
    prefill: usize,
    chunk: usize,
) -> Vec<Vec<f32>> {
    let vocab = e.model.cfg.vocab_size;
    let mut seq = e.cache.admit().unwrap();
    let mut rows = vec![];
    let mut at = 0;
    while at < ids.len() {
        let len = if at < prefill { chunk.min(prefill - at) } else { 1 };
        let out = e.step(&mut seq, &ids[at..at + len], lserve::model::llama::Logits::All, None).unwrap();
        rows.extend(out.chunks(vocab).map(<[f32]>::to_vec));
        at += len;
    }
    e.cache.release(&mut seq).unwrap();
    rows
}
