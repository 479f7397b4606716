//! CUDA checks that need no GPU: `cuda/params.cuh` mirrors every parameter struct (names, order
//! and offsets, parsed from the header and compared with `all_param_layouts()`), every kernel
//! module compiles with NVRTC for sm_80 and sm_90 (whenever libnvrtc is found; skipped otherwise,
//! unless LSERVE_REQUIRE_CUDA=1), and `CudaBackend::new` on a machine without a driver returns a
//! clear error instead of panicking.
#![cfg(feature = "cuda")]

use lserve::backend::cuda::{CudaBackend, driver_present, kernels};
use lserve::backend::params::all_param_layouts;

/// (struct, [(field, offset)]) parsed from the header: every field is a 4-byte u32/float.
fn header_layouts() -> Vec<(String, Vec<(String, usize)>)> {
    let text = kernels::PARAMS_CUH;
    let mut out = vec![];
    let mut rest = text;
    while let Some(at) = rest.find("struct ") {
        rest = &rest[at + 7..];
        let name = rest.split_whitespace().next().unwrap().to_string();
        let body = &rest[rest.find('{').unwrap() + 1..rest.find('}').unwrap()];
        let fields: Vec<(String, usize)> = body
            .split(';')
            .filter_map(|f| {
                let mut w = f.split_whitespace();
                let ty = w.next()?;
                assert!(ty == "u32" || ty == "float", "{name}: field type {ty} is not 4 bytes");
                w.next().map(|n| n.to_string())
            })
            .enumerate()
            .map(|(i, n)| (n, 4 * i))
            .collect();
        out.push((name, fields));
        rest = &rest[rest.find('}').unwrap()..];
    }
    out
}

#[test]
fn params_cuh_mirrors_every_param_struct() {
    let header = header_layouts();
    let rust = all_param_layouts();
    assert_eq!(header.len(), rust.len(), "struct count");
    for (name, fields) in rust {
        let (_, h) = header.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("{name} missing in params.cuh"));
        let want: Vec<(String, usize)> = fields.iter().map(|(f, o)| (f.to_string(), *o)).collect();
        assert_eq!(h, &want, "{name}: params.cuh disagrees with src/backend/params.rs");
    }
}

fn require() -> bool {
    std::env::var("LSERVE_REQUIRE_CUDA").is_ok_and(|v| v == "1")
}

#[test]
fn every_kernel_compiles_for_sm80_and_sm90() {
    if let Err(e) = kernels::nvrtc_version() {
        assert!(!require(), "NVRTC required: {e}");
        eprintln!("skipping the NVRTC compile test: {e}");
        return;
    }
    for arch in ["compute_80", "compute_90"] {
        let t = std::time::Instant::now();
        let done = kernels::compile(arch).unwrap_or_else(|e| panic!("{arch}: {e}"));
        assert_eq!(done.len(), kernels::SOURCES.len());
        eprintln!("{arch}: {} modules compiled in {:.1}s", done.len(), t.elapsed().as_secs_f64());
    }
}

#[test]
fn no_driver_is_a_clear_error() {
    if driver_present() {
        eprintln!("a CUDA driver is present; the no-driver path is not testable here");
        return;
    }
    let e = CudaBackend::new(0).err().expect("no driver must be an error");
    let msg = e.to_string();
    assert!(msg.contains("no CUDA driver"), "unclear message: {msg}");
}
