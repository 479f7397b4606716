//! CUDA checks that need no GPU: `cuda/params.cuh` mirrors every parameter struct (names, order
//! and offsets, parsed from the header and compared with `all_param_layouts()`), every kernel
//! module compiles with NVRTC for sm_80, sm_90 and sm_90a (whenever libnvrtc is found; skipped otherwise,
//! unless LSERVE_REQUIRE_CUDA=1), every typed launch declaration (src/backend/cuda/bindings.rs)
//! agrees with its kernels' `extern "C" __global__` signatures parsed from `cuda/*.cu` (so a
//! wrong argument order fails here, without a GPU), the Hopper prefill kernels as ptxas builds them
//! neither spill nor have their wgmma serialized (whenever ptxas is found: scripts/cuda_tools.sh),
//! and `CudaBackend::new` on a machine without a driver returns a clear error instead of panicking.
#![cfg(feature = "cuda")]

use std::collections::{BTreeMap, BTreeSet};

use lserve::backend::cuda::bindings::{self, Elem, Role};
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
    for arch in ["compute_80", "compute_90", "compute_90a"] {
        let t = std::time::Instant::now();
        let done = kernels::compile(arch).unwrap_or_else(|e| panic!("{arch}: {e}"));
        assert_eq!(done.len(), kernels::SOURCES.len());
        eprintln!("{arch}: {} modules compiled in {:.1}s", done.len(), t.elapsed().as_secs_f64());
    }
}

/// ptxas (LSERVE_PTXAS, else `ptxas` on PATH; scripts/cuda_tools.sh installs one from PyPI)
/// that runs, or None.
fn ptxas() -> Option<std::path::PathBuf> {
    let p = std::env::var_os("LSERVE_PTXAS").map(std::path::PathBuf::from).unwrap_or_else(|| "ptxas".into());
    std::process::Command::new(&p).arg("--version").output().ok().filter(|o| o.status.success()).map(|_| p)
}

/// `ptxas -arch=sm_90a -v` over the PTX of module `stem`: its report (stderr and stdout).
fn ptxas_report(ptxas: &std::path::Path, stem: &str) -> String {
    let ptx = kernels::compile_one(stem, "compute_90a").unwrap_or_else(|e| panic!("{stem}: {e}"));
    let dir = std::env::temp_dir().join(format!("lserve-ptxas-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, bin) = (dir.join(format!("{stem}.ptx")), dir.join(format!("{stem}.cubin")));
    std::fs::write(&src, ptx).unwrap();
    let out = std::process::Command::new(ptxas)
        .args(["-arch=sm_90a", "-v"])
        .arg(&src)
        .arg("-o")
        .arg(&bin)
        .output()
        .expect("ptxas runs");
    let _ = std::fs::remove_dir_all(&dir);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stderr), String::from_utf8_lossy(&out.stdout));
    assert!(out.status.success(), "ptxas failed on {stem}:\n{text}");
    text
}

/// Per entry of a ptxas report: (spill store bytes, spill load bytes, wgmma serialized: C7518).
fn ptxas_entries(report: &str) -> BTreeMap<String, (u64, u64, bool)> {
    let mut out: BTreeMap<String, (u64, u64, bool)> = BTreeMap::new();
    let mut current: Option<String> = None;
    let quoted = |l: &str| l.rsplit('\'').nth(1).map(str::to_string);
    for line in report.lines() {
        if line.contains("(C7518)") {
            let f = quoted(line).expect("C7518 names its function");
            out.entry(f).or_default().2 = true;
        } else if let Some(f) = line.split("Function properties for ").nth(1) {
            current = Some(f.trim().to_string());
        } else if let (Some(f), true) = (&current, line.contains("bytes spill stores")) {
            let n = |what: &str| -> u64 {
                let before = line.split(what).next().unwrap_or("");
                before.rsplit(',').next().unwrap_or("").trim().parse().unwrap_or(u64::MAX)
            };
            let e = out.entry(f.clone()).or_default();
            (e.0, e.1) = (n(" bytes spill stores"), n(" bytes spill loads"));
            current = None;
        }
    }
    out
}

/// The Hopper prefill attention kernels (`prefill_attention_wgmma_*`, sm_90a) as ptxas builds
/// them: no register spills, and no wgmma serialized by ptxas (C7518: "wgmma.mma_async
/// instructions are serialized due to ... divergent path" — what a branch between a wgmma and
/// its wait does, docs/backends.md; every product then waits for the one before). Needs NVRTC
/// and ptxas, no GPU (skipped without them).
#[test]
fn hopper_prefill_kernels_neither_spill_nor_serialize_wgmma() {
    let (Ok(_), Some(ptxas)) = (kernels::nvrtc_version(), ptxas()) else {
        eprintln!("skipping the ptxas check: NVRTC or ptxas not found (scripts/cuda_tools.sh)");
        return;
    };
    let entries = ptxas_entries(&ptxas_report(&ptxas, "prefill_attention"));
    // Every Hopper entry: the cp.async kernel's declaration and the TMA one's (`_tma`, `_ws`).
    let declared: Vec<&str> = bindings::ALL
        .iter()
        .filter(|b| b.name.starts_with("prefill_attention_wgmma"))
        .flat_map(|b| b.entries.iter().copied())
        .collect();
    assert!(declared.iter().any(|f| f.ends_with("_ws")), "the default `_ws` entries are checked: {declared:?}");
    for f in &declared {
        let &(stores, loads, serialized) = entries.get(*f).unwrap_or_else(|| panic!("{f} not in ptxas's report"));
        eprintln!("{f}: spill stores {stores}, loads {loads}, wgmma serialized {serialized}");
        assert!(!serialized, "{f}: ptxas serializes its wgmma (C7518)");
        assert_eq!((stores, loads), (0, 0), "{f}: spills");
    }
}

#[test]
fn ptxas_report_parser_reads_spills_and_c7518() {
    let report = "ptxas info    : (C7518) Potential Performance Loss: wgmma.mma_async instructions are serialized due to program dependence on compiler-inserted WG.DP in divergent path in the function 'k_a'
ptxas info    : Compiling entry function 'k_a' for 'sm_90a'
ptxas info    : Function properties for k_a
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 207 registers, used 1 barriers, 4256 bytes smem
ptxas info    : Function properties for k_b
    96 bytes stack frame, 140 bytes spill stores, 144 bytes spill loads
";
    let e = ptxas_entries(report);
    assert_eq!(e["k_a"], (0, 0, true));
    assert_eq!(e["k_b"], (140, 144, false));
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

// ---- typed launches against the .cu signatures ------------------------------------------------

/// One kernel parameter as a `.cu` file declares it: (type words without `const`/`__restrict__`,
/// const?, pointer?, name).
#[derive(Clone, Debug, PartialEq)]
struct CuParam {
    ty: String,
    is_const: bool,
    pointer: bool,
    name: String,
}

/// `.cu` source without comments, line continuations joined.
fn cu_clean(src: &str) -> String {
    let mut out = String::new();
    let mut rest = src;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("//") {
            rest = r.find('\n').map_or("", |i| &r[i..]);
        } else if let Some(r) = rest.strip_prefix("/*") {
            rest = r.find("*/").map_or("", |i| &r[i + 2..]);
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out.replace("\\\n", " ")
}

/// Split `s` (the text after an opening parenthesis) at top-level commas up to the matching `)`;
/// returns the parts and the text after the `)`.
fn cu_args(s: &str) -> (Vec<String>, &str) {
    let (mut depth, mut parts, mut cur) = (0, vec![], String::new());
    for (i, c) in s.char_indices() {
        match c {
            '(' | '<' => depth += 1,
            ')' if depth == 0 => {
                if !cur.trim().is_empty() {
                    parts.push(cur.trim().to_string());
                }
                return (parts, &s[i + 1..]);
            }
            ')' | '>' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(cur.trim().to_string());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    (parts, "")
}

fn cu_param(s: &str) -> CuParam {
    let s = s.replace('*', " * ");
    let words: Vec<&str> = s.split_whitespace().filter(|w| *w != "__restrict__").collect();
    let name = words.last().copied().unwrap_or_default().to_string();
    let body = &words[..words.len().saturating_sub(1)];
    CuParam {
        is_const: body.contains(&"const"),
        pointer: body.contains(&"*"),
        ty: body.iter().filter(|w| **w != "const" && **w != "*").copied().collect::<Vec<_>>().join(" "),
        name,
    }
}

/// Every `extern "C" __global__` signature in `text`: entry name -> parameters.
fn cu_signatures_in(text: &str, out: &mut BTreeMap<String, Vec<CuParam>>) {
    let mut rest = text;
    while let Some(i) = rest.find("extern \"C\"") {
        rest = &rest[i + 10..];
        let Some(v) = rest.find("void") else { break };
        let mut after = rest[v + 4..].trim_start();
        if let Some(r) = after.strip_prefix("__launch_bounds__") {
            let (_, r) = cu_args(r.trim_start().strip_prefix('(').unwrap_or(r));
            after = r.trim_start();
        }
        let Some(open) = after.find('(') else { break };
        let name = after[..open].trim().to_string();
        let (params, r) = cu_args(&after[open + 1..]);
        out.insert(name, params.iter().map(|p| cu_param(p)).collect());
        rest = r;
    }
}

/// Replace identifier `from` by `to` in `body` (whole words) and paste `##` concatenations.
fn cu_subst(body: &str, from: &str, to: &str) -> String {
    let mut out = String::new();
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        out.push_str(if word == from { to } else { word.as_str() });
        word.clear();
    };
    for c in body.chars() {
        if c.is_alphanumeric() || c == '_' {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// Kernel signatures of a `.cu` source, macro-generated ones expanded.
fn cu_signatures(src: &str) -> BTreeMap<String, Vec<CuParam>> {
    let text = cu_clean(src);
    let mut macros: Vec<(String, Vec<String>, String)> = vec![];
    let mut plain = String::new();
    for line in text.lines() {
        let t = line.trim_start();
        if let Some(d) = t.strip_prefix("#define ") {
            if let Some(open) = d.find('(')
                && d.contains("__global__")
                && !d[..open].contains(' ')
            {
                let (params, body) = cu_args(&d[open + 1..]);
                macros.push((d[..open].to_string(), params, body.to_string()));
            }
            continue;
        }
        plain.push_str(line);
        plain.push('\n');
    }
    let mut out = BTreeMap::new();
    cu_signatures_in(&plain, &mut out);
    for line in plain.lines() {
        for (name, params, body) in &macros {
            let Some(r) = line.trim_start().strip_prefix(name.as_str()).and_then(|r| r.strip_prefix('(')) else {
                continue;
            };
            let (args, _) = cu_args(r);
            let mut b = body.clone();
            for (p, a) in params.iter().zip(&args) {
                b = cu_subst(&b, p, a);
            }
            let b = b.replace(" ## ", "").replace("##", "");
            cu_signatures_in(&b, &mut out);
        }
    }
    out
}

/// Whether a declared argument agrees with the `.cu` parameter.
fn arg_matches(role: Role, elem: Elem, p: &CuParam) -> Result<(), String> {
    let want_ptr = role != Role::U32;
    if p.pointer != want_ptr {
        return Err(format!("declared {role:?}, the .cu has {}a pointer", if p.pointer { "" } else { "not " }));
    }
    let want_const = matches!(role, Role::In | Role::OptIn | Role::ScratchIn);
    if want_ptr && p.is_const != want_const {
        return Err(format!("declared {role:?}, the .cu pointer is {}const", if p.is_const { "" } else { "not " }));
    }
    let ok = match elem {
        Elem::F32 => p.ty == "float",
        Elem::U32 | Elem::Scalar => p.ty == "u32",
        Elem::U64 => p.ty == "u64",
        Elem::Any => p.ty == "void",
        Elem::Store => !["u32", "u64", "void"].contains(&p.ty.as_str()),
    };
    if ok { Ok(()) } else { Err(format!("declared element {elem:?}, the .cu type is `{}`", p.ty)) }
}

#[test]
fn every_binding_matches_its_cu_signature() {
    let mut sigs: BTreeMap<String, (String, Vec<CuParam>)> = BTreeMap::new();
    for &(stem, src) in kernels::SOURCES {
        for (entry, params) in cu_signatures(src) {
            sigs.insert(entry, (stem.to_string(), params));
        }
    }
    assert!(sigs.len() > 50, "the .cu parser found only {} kernels", sigs.len());
    let mut bad = vec![];
    let mut bound = BTreeSet::new();
    for b in bindings::ALL {
        let first_scalar = b.args.iter().position(|a| a.1 == Role::U32).unwrap_or(b.args.len());
        if b.args[first_scalar..].iter().any(|a| a.1 != Role::U32) {
            bad.push(format!("{}: a pointer follows a u32 scalar (the launcher passes pointers first)", b.name));
        }
        for &entry in b.entries {
            bound.insert(entry);
            let Some((stem, params)) = sigs.get(entry) else {
                bad.push(format!("{}: entry {entry} is not an extern \"C\" __global__ of cuda/*.cu", b.name));
                continue;
            };
            if stem != b.stem {
                bad.push(format!("{}: {entry} lives in {stem}.cu, declared in {}.cu", b.name, b.stem));
            }
            if params.len() != b.args.len() + 1 {
                bad.push(format!(
                    "{}: {entry} takes {} parameters, declared {}",
                    b.name,
                    params.len(),
                    b.args.len() + 1
                ));
                continue;
            }
            if params[0].ty != b.params || params[0].pointer {
                bad.push(format!("{entry}: first parameter `{}`, declared {} by value", params[0].ty, b.params));
            }
            for (i, ((name, role, elem), p)) in b.args.iter().zip(&params[1..]).enumerate() {
                if *name != p.name {
                    bad.push(format!("{entry}: argument {} is `{}` in the .cu, declared `{name}`", i + 1, p.name));
                }
                if let Err(e) = arg_matches(*role, *elem, p) {
                    bad.push(format!("{entry}: argument `{name}`: {e}"));
                }
            }
        }
    }
    // Every kernel of cuda/ has a binding (no launch outside the declarations).
    for entry in sigs.keys() {
        if !bound.contains(entry.as_str()) {
            bad.push(format!("kernel {entry} has no binding in src/backend/cuda/bindings.rs"));
        }
    }
    assert!(bad.is_empty(), "bindings vs cuda/*.cu:\n  {}", bad.join("\n  "));
}

#[test]
fn the_cu_parser_reads_macros_and_sees_a_swapped_argument() {
    let src = "// c\n#define K(name, T) \\\n  extern \"C\" __global__ void __launch_bounds__(128) name##_x( \\\n \
               AddParams p, const T* __restrict__ a, float* out, u32 n) { f<T>(p, a, out, n); }\n\
               K(add_f16, f16_t)\nextern \"C\" __global__ void plain(AddParams p, void* out) {}\n";
    let s = cu_signatures(src);
    assert_eq!(s.keys().collect::<Vec<_>>(), vec!["add_f16_x", "plain"]);
    let a = &s["add_f16_x"];
    assert_eq!(a.len(), 4);
    assert_eq!(a[1], CuParam { ty: "f16_t".into(), is_const: true, pointer: true, name: "a".into() });
    assert!(arg_matches(Role::In, Elem::Store, &a[1]).is_ok());
    assert!(arg_matches(Role::Out, Elem::F32, &a[1]).is_err(), "const pointer declared as written");
    assert!(arg_matches(Role::In, Elem::F32, &a[2]).is_err(), "written pointer declared as read");
    assert!(arg_matches(Role::U32, Elem::Scalar, &a[3]).is_ok());
    assert!(arg_matches(Role::In, Elem::U32, &a[3]).is_err());
    assert!(arg_matches(Role::Out, Elem::Any, &s["plain"][1]).is_ok());
}

/// The quantized entry tables are indexed by `QUANT_DTYPES` (ops pick `[dtype][variant]` by
/// position): each entry must name its table's dtype, and the GGML part must be exactly the
/// formats every backend supports, in caps order; each table ends with its packed Q8_0 entries
/// (`bindings::entry_w`, src/backend/cuda/packed.rs).
#[test]
fn quant_entry_tables_follow_quant_dtypes() {
    use lserve::backend::DType;
    use lserve::backend::reference::weight_quant::GGML_WEIGHT_TYPES;
    let q = bindings::QUANT_DTYPES;
    let ggml: Vec<DType> = GGML_WEIGHT_TYPES.iter().map(|&t| DType::Ggml(t)).collect();
    assert_eq!(&q[..8], &ggml[..]);
    assert_eq!(&q[8..], &[DType::I8Row, DType::F8Row]);
    for (i, d) in q.iter().enumerate() {
        let f = d.weight_name();
        assert_eq!(bindings::matmul_gemv_quant::ENTRIES[2 * i], format!("matmul_gemv_{f}_m1"));
        assert_eq!(bindings::matmul_gemv_quant::ENTRIES[2 * i + 1], format!("matmul_gemv_{f}_m16"));
        assert_eq!(bindings::matmul_dequant::ENTRIES[i], format!("matmul_dequant_{f}"));
    }
    // The MMQ GEMM: [QUANT_DTYPES without fp8][n-tiles 1 | 2 | 4 | 8]; the batch-1 GEMV with x
    // quantized once (MmvMode::Pre): [QUANT_DTYPES without fp8].
    assert_eq!(&bindings::MMQ_DTYPES[..], &q[..9]);
    // Each table's tail: [PACKED_DTYPES][variant], named <fmt>p.
    let (n, pk) = (q.len(), lserve::backend::cuda::packed::PACKED_DTYPES);
    let np = pk.len();
    assert_eq!(bindings::matmul_gemv_quant_pre::ENTRIES.len(), 9 + np);
    assert_eq!(bindings::matmul_gemv_quant::ENTRIES.len(), 2 * (n + np));
    assert_eq!(bindings::matmul_dequant::ENTRIES.len(), n + np);
    assert_eq!(bindings::matmul_mmq::ENTRIES.len(), 4 * (9 + np));
    for (i, d) in pk.iter().enumerate() {
        let f = format!("{}p", d.weight_name());
        assert_eq!(bindings::matmul_gemv_quant_pre::ENTRIES[9 + i], format!("matmul_gemv_{f}_m1_pre"));
        assert_eq!(bindings::matmul_gemv_quant::ENTRIES[2 * (n + i)], format!("matmul_gemv_{f}_m1"));
        assert_eq!(bindings::matmul_gemv_quant::ENTRIES[2 * (n + i) + 1], format!("matmul_gemv_{f}_m16"));
        assert_eq!(bindings::matmul_dequant::ENTRIES[n + i], format!("matmul_dequant_{f}"));
        for (v, nt) in [1, 2, 4, 8].into_iter().enumerate() {
            assert_eq!(bindings::matmul_mmq::ENTRIES[4 * (9 + i) + v], format!("matmul_mmq_{f}_n{nt}"));
        }
    }
    for (i, d) in bindings::MMQ_DTYPES.iter().enumerate() {
        assert_eq!(bindings::matmul_gemv_quant_pre::ENTRIES[i], format!("matmul_gemv_{}_m1_pre", d.weight_name()));
        for (v, nt) in [1, 2, 4, 8].into_iter().enumerate() {
            assert_eq!(bindings::matmul_mmq::ENTRIES[4 * i + v], format!("matmul_mmq_{}_n{nt}", d.weight_name()));
        }
    }
    // The batch-1 GEMV with x in registers (MmvMode::Reg): [REG_DTYPES], x from the scratch
    // (_reg) or quantized by the lanes (_regf).
    let r = bindings::REG_DTYPES.len();
    assert_eq!(r + np, bindings::matmul_gemv_quant_reg::ENTRIES.len());
    assert_eq!(r + np, bindings::matmul_gemv_quant_regf::ENTRIES.len());
    for (i, d) in pk.iter().enumerate() {
        let f = format!("{}p", d.weight_name());
        assert_eq!(bindings::matmul_gemv_quant_reg::ENTRIES[r + i], format!("matmul_gemv_{f}_m1_reg"));
        assert_eq!(bindings::matmul_gemv_quant_regf::ENTRIES[r + i], format!("matmul_gemv_{f}_m1_regf"));
    }
    for (i, d) in bindings::REG_DTYPES.iter().enumerate() {
        assert_eq!(bindings::matmul_gemv_quant_reg::ENTRIES[i], format!("matmul_gemv_{}_m1_reg", d.weight_name()));
        assert_eq!(bindings::matmul_gemv_quant_regf::ENTRIES[i], format!("matmul_gemv_{}_m1_regf", d.weight_name()));
    }
    let e = bindings::embed_dtypes();
    assert_eq!(e.len() + np, bindings::embed::ENTRIES.len());
    for (i, d) in pk.iter().enumerate() {
        assert_eq!(bindings::embed::ENTRIES[e.len() + i], format!("embed_{}p", d.weight_name()));
    }
    for (d, name) in e.iter().zip(&bindings::embed::ENTRIES[..e.len()]) {
        assert_eq!(*name, format!("embed_{}", d.weight_name()));
    }
}

/// `LSERVE_CUDA_MMV`'s values: per format by default (`auto`), `inblock`, `pre` on the in-block
/// grid, `pre:N` at most N blocks per SM; anything else is an error.
#[test]
fn mmv_mode_parses_its_values() {
    use lserve::backend::cuda::MmvMode;
    assert_eq!(MmvMode::default(), MmvMode::Auto);
    assert_eq!(MmvMode::parse("", 132), Ok(MmvMode::Auto));
    assert_eq!(MmvMode::parse("auto", 132), Ok(MmvMode::Auto));
    assert_eq!(MmvMode::parse("inblock", 132), Ok(MmvMode::InBlock));
    assert_eq!(MmvMode::parse("pre", 132), Ok(MmvMode::Pre { max_grid: 0 }));
    assert_eq!(MmvMode::parse("pre:8", 132), Ok(MmvMode::Pre { max_grid: 1056 }));
    assert_eq!(MmvMode::parse("reg", 132), Ok(MmvMode::Reg { max_grid: 0, lanes_quantize: false, bulk: false }));
    assert_eq!(MmvMode::parse("reg:2", 132), Ok(MmvMode::Reg { max_grid: 264, lanes_quantize: false, bulk: false }));
    assert_eq!(MmvMode::parse("regf", 132), Ok(MmvMode::Reg { max_grid: 0, lanes_quantize: true, bulk: false }));
    assert_eq!(MmvMode::parse("regf:3", 132), Ok(MmvMode::Reg { max_grid: 396, lanes_quantize: true, bulk: false }));
    assert_eq!(MmvMode::parse("bulk", 132), Ok(MmvMode::Reg { max_grid: 0, lanes_quantize: false, bulk: true }));
    assert_eq!(MmvMode::parse("bulkf", 132), Ok(MmvMode::Reg { max_grid: 0, lanes_quantize: true, bulk: true }));
    assert_eq!(MmvMode::parse("bulk:4", 132), Ok(MmvMode::Reg { max_grid: 528, lanes_quantize: false, bulk: true }));
    for bad in
        ["pre:0", "pre:", "pre:x", "global", "PRE", "reg:0", "reg:", "reg:pre:1", "regf:0", "regx", "bulk:0", "bulkf:"]
    {
        assert!(MmvMode::parse(bad, 132).is_err(), "{bad}");
    }
    // Auto: x quantized once (or in registers, below) for the formats where that measured faster,
    // in-block for the rest; shapes the register kernels decline take x quantized once.
    use lserve::backend::DType;
    use lserve::backend::reference::ggml_quant::GgmlType;
    assert_eq!(MmvMode::Auto.pre_grid(DType::Ggml(GgmlType::Q4_K)), Some(0));
    assert_eq!(MmvMode::Auto.pre_grid(DType::I8Row), Some(0));
    // Auto: int8 rows, Q4_K and Q5_K take x in registers (int8 quantized by the lanes), Q6_K x once.
    assert_eq!(MmvMode::Auto.for_dtype(DType::I8Row), MmvMode::Reg { max_grid: 0, lanes_quantize: true, bulk: true });
    assert_eq!(
        MmvMode::Auto.for_dtype(DType::Ggml(GgmlType::Q5_K)),
        MmvMode::Reg { max_grid: 0, lanes_quantize: false, bulk: false }
    );
    assert_eq!(
        MmvMode::Auto.for_dtype(DType::Ggml(GgmlType::Q4_K)),
        MmvMode::Reg { max_grid: 0, lanes_quantize: false, bulk: false }
    );
    assert_eq!(MmvMode::Auto.for_dtype(DType::Ggml(GgmlType::Q6_K)), MmvMode::Pre { max_grid: 0 });
    assert_eq!(MmvMode::Auto.for_dtype(DType::Ggml(GgmlType::Q8_0)), MmvMode::InBlock);
    assert_eq!(MmvMode::InBlock.for_dtype(DType::I8Row), MmvMode::InBlock);
    assert_eq!(MmvMode::Auto.pre_grid(DType::Ggml(GgmlType::Q8_0)), None);
    assert_eq!(MmvMode::Auto.pre_grid(DType::Ggml(GgmlType::Q4_1)), None);
    assert_eq!(MmvMode::InBlock.pre_grid(DType::Ggml(GgmlType::Q4_K)), None);
    assert_eq!(MmvMode::Pre { max_grid: 7 }.pre_grid(DType::Ggml(GgmlType::Q8_0)), Some(7));
    // Reg: the formats without a register kernel take x quantized once.
    assert_eq!(
        MmvMode::Reg { max_grid: 5, lanes_quantize: true, bulk: false }.pre_grid(DType::Ggml(GgmlType::Q6_K)),
        Some(0)
    );
}
