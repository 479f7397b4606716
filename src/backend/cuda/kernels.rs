//! The CUDA kernel sources (`cuda/*.cu`, one file per op stem, as `shaders/*.wgsl`; the quantized
//! matmul in `matmul_quant.cu` and `matmul_mmq.cu`) and their compilation: NVRTC compiles
//! `params.cuh + common.cuh (+ quant.cuh for the modules reading quantized weights) + <stem>.cu` to PTX for the device's
//! architecture at start, in parallel, and caches the PTX on disk under
//! `<kernel_cache>/<stem>-<hash>-<arch>.ptx` (`CudaOptions::kernel_cache`; the CLI passes
//! `<model cache>/cuda`), the hash covering the assembled source, the arch and
//! the NVRTC version, so an edited kernel or another toolkit never reuses a stale entry.
//!
//! Compilation needs only libnvrtc, no GPU: [`compile`] is what the kernel-compile test runs for
//! sm_80 and sm_90 on machines without a device.

use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::error::{Error, Result};

pub const PARAMS_CUH: &str = include_str!("../../../cuda/params.cuh");
pub const COMMON_CUH: &str = include_str!("../../../cuda/common.cuh");
/// The quantized weight formats in registers (after common.cuh, only in [`QUANT_STEMS`]).
pub const QUANT_CUH: &str = include_str!("../../../cuda/quant.cuh");
/// The modules that read quantized weights.
const QUANT_STEMS: &[&str] = &["embed", "matmul_quant", "matmul_mmq"];

macro_rules! sources {
    ($($stem:literal $(+ $part:literal)*),* $(,)?) => {
        /// (stem, source) of every kernel module; a module may continue in further files
        /// (`stem + "part"`: `cuda/<part>.cu` appended to `cuda/<stem>.cu`).
        pub const SOURCES: &[(&str, &str)] = &[$(($stem, concat!(
            include_str!(concat!("../../../cuda/", $stem, ".cu"))
            $(, "\n", include_str!(concat!("../../../cuda/", $part, ".cu")))*
        ))),*];
    };
}
sources!(
    "embed",
    "matmul",
    "matmul_quant",
    "matmul_mmq",
    "rmsnorm",
    "add_rmsnorm",
    "add",
    "silu_mul",
    "gelu_tanh_mul",
    "head_rmsnorm",
    "scale",
    "gather_rows",
    "mean_rows",
    "argmax",
    "sample",
    "fill_random",
    "rope_append_kv",
    "rope_append_kv_summary",
    "page_select",
    "antidiagonal_score" + "antidiagonal_score_gemm",
    "sparse_decode_attention",
    "sparse_decode_attention_merge",
    "prefill_attention" + "prefill_attention_wgmma",
    "lambda_mass",
);

fn err(msg: impl Into<String>) -> Error {
    Error::Backend { backend: "cuda", msg: msg.into() }
}

/// The full source NVRTC sees for `stem`.
pub fn assembled(stem: &str) -> Result<String> {
    let src = SOURCES.iter().find(|s| s.0 == stem).ok_or_else(|| err(format!("no kernel module `{stem}`")))?.1;
    let quant = if QUANT_STEMS.contains(&stem) { QUANT_CUH } else { "" };
    Ok(format!("{PARAMS_CUH}\n{COMMON_CUH}\n{quant}\n// ---- {stem}.cu\n{src}"))
}

/// NVRTC's version, or an error when libnvrtc cannot be loaded.
pub fn nvrtc_version() -> Result<(i32, i32)> {
    // SAFETY: only tries to dlopen the library; cudarc's loader panics later if it is missing.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(err(
            "NVRTC (libnvrtc.so) was not found; it compiles the CUDA kernels at start. Install the CUDA toolkit's \
             NVRTC (or `pip install nvidia-cuda-nvrtc-cu12`) and put its lib directory on LD_LIBRARY_PATH",
        ));
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: plain out-parameters; the library is present (checked above).
    let rc = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    if rc != cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(err(format!("nvrtcVersion failed: {rc:?}")));
    }
    Ok((major, minor))
}

/// The virtual architecture NVRTC targets for compute capability (major, minor): sm_90 as
/// `compute_90a`, whose wgmma instructions the Hopper prefill kernel needs (PTX for 90a runs only
/// on compute capability 9.0, which is what it is picked for).
pub fn arch_name(cc: (i32, i32)) -> &'static str {
    match cc {
        (8, 0) => "compute_80",
        (8, 6) => "compute_86",
        (8, 7) => "compute_87",
        (8, 9) => "compute_89",
        (9, 0) => "compute_90a",
        (10, 0) => "compute_100",
        (12, 0) => "compute_120",
        (m, n) => Box::leak(format!("compute_{m}{n}").into_boxed_str()),
    }
}

/// FNV-1a, 64 bit: a hash that stays the same across Rust releases (unlike `DefaultHasher`).
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in *p {
            h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
        h = (h ^ 0xff).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn cache_path(dir: &Path, stem: &str, src: &str, arch: &str, nvrtc: (i32, i32)) -> PathBuf {
    let ver = format!("{}.{}", nvrtc.0, nvrtc.1);
    let h = fnv1a(&[src.as_bytes(), arch.as_bytes(), ver.as_bytes()]);
    dir.join(format!("{stem}-{h:016x}-{arch}.ptx"))
}

/// Compile one module to PTX text (no cache).
pub fn compile_one(stem: &str, arch: &'static str) -> Result<String> {
    let src = assembled(stem)?;
    // LSERVE_SM stays a number (90 for compute_90a).
    let sm = arch.trim_start_matches("compute_").trim_end_matches('a');
    let opts = cudarc::nvrtc::CompileOptions {
        arch: Some(arch),
        options: vec![format!("-DLSERVE_SM={sm}"), "--std=c++17".into()],
        name: Some(format!("{stem}.cu")),
        ..Default::default()
    };
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(&src, opts).map_err(|e| match e {
        cudarc::nvrtc::CompileError::CompileError { log, .. } => {
            err(format!("{stem}.cu does not compile:\n{}", log.to_string_lossy()))
        }
        e => err(format!("{stem}.cu: {e:?}")),
    })?;
    Ok(ptx.to_src())
}

/// PTX of every module for `arch`, from the disk cache in `cache_dir` where present, else
/// compiled (in parallel) and cached there (`None`: compiled, never cached). Returns
/// (stem, ptx, from_cache).
pub fn load_all(arch: &'static str, cache_dir: Option<&Path>) -> Result<Vec<(&'static str, String, bool)>> {
    let nvrtc = nvrtc_version()?;
    SOURCES
        .par_iter()
        .map(|&(stem, _)| {
            let Some(dir) = cache_dir else { return Ok((stem, compile_one(stem, arch)?, false)) };
            let src = assembled(stem)?;
            let path = cache_path(dir, stem, &src, arch, nvrtc);
            if let Ok(ptx) = std::fs::read_to_string(&path) {
                return Ok((stem, ptx, true));
            }
            let ptx = compile_one(stem, arch)?;
            // A failed cache write only costs a recompile next time.
            if let Some(dir) = path.parent()
                && std::fs::create_dir_all(dir).is_ok()
            {
                let tmp = path.with_extension(format!("tmp{}", std::process::id()));
                if std::fs::write(&tmp, &ptx).is_ok() {
                    let _ = std::fs::rename(&tmp, &path);
                }
            }
            Ok((stem, ptx, false))
        })
        .collect()
}

/// Compile every module for `arch` without touching the cache (the kernel-compile test).
pub fn compile(arch: &'static str) -> Result<Vec<(&'static str, usize)>> {
    nvrtc_version()?;
    SOURCES.par_iter().map(|&(stem, _)| Ok((stem, compile_one(stem, arch)?.len()))).collect()
}
