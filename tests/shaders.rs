//! Every WGSL module, exactly as the wgpu backend assembles it, is validated by naga and
//! translated to SPIR-V 1.3 (Vulkan), MSL (Metal) and HLSL (DX12), failing on any error — how
//! Metal and DX12 users are protected without those machines. Also: the WGSL mirrors of the op
//! parameter structs have the same field names and byte offsets as the Rust structs, and every
//! typed dispatch declaration (src/backend/wgpu/pipelines.rs) names the module's bindings in
//! order with their access modes.
#![cfg(feature = "wgpu")]

use lserve::backend::params::all_param_layouts;
use lserve::backend::wgpu::shaders::{PARAMS, all_modules};
use naga::valid::{Capabilities, ValidationFlags, Validator};

fn parse(name: &str, src: &str) -> naga::Module {
    naga::front::wgsl::parse_str(src).unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(src)))
}

#[test]
fn every_module_validates_and_translates() {
    let modules = all_modules();
    assert!(modules.len() >= 14, "{} modules", modules.len());
    assert!(modules.iter().any(|m| m.needs_f16) && modules.iter().any(|m| m.needs_subgroup), "feature variants");
    for m in modules {
        let (name, src) = (m.name, m.source);
        let module = parse(&name, &src);
        // unpack2x16float/pack2x16float are core WGSL; naga gates them behind this capability,
        // which wgpu grants on every Vulkan, Metal and DX12 device (not on old GLES). Modules
        // get the feature capabilities only if they are meant for adapters with the feature, so
        // the plain modules are proven to need neither.
        let mut caps = Capabilities::SHADER_FLOAT16_IN_FLOAT32;
        if m.needs_f16 {
            caps |= Capabilities::SHADER_FLOAT16;
        }
        if m.needs_subgroup {
            caps |= Capabilities::SUBGROUP;
        }
        let info = Validator::new(ValidationFlags::all(), caps)
            .validate(&module)
            .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(&src)));
        let spv = naga::back::spv::Options { lang_version: (1, 3), ..Default::default() };
        naga::back::spv::write_vec(&module, &info, &spv, None).unwrap_or_else(|e| panic!("{name} SPIR-V: {e}"));
        let msl = naga::back::msl::Options::default();
        naga::back::msl::write_string(&module, &info, &msl, &naga::back::msl::PipelineOptions::default())
            .unwrap_or_else(|e| panic!("{name} MSL: {e}"));
        let mut hlsl = String::new();
        let (opts, popts) = (naga::back::hlsl::Options::default(), naga::back::hlsl::PipelineOptions::default());
        naga::back::hlsl::Writer::new(&mut hlsl, &opts, &popts)
            .write(&module, &info, None)
            .unwrap_or_else(|e| panic!("{name} HLSL: {e}"));
        assert!(module.entry_points.iter().any(|e| e.name == "main"), "{name}: no `main` entry point");
    }
}

#[test]
fn param_structs_match_rust_layouts() {
    let module = parse("params.wgsl", PARAMS);
    for (rust_name, fields) in all_param_layouts() {
        let ty = module
            .types
            .iter()
            .find(|(_, t)| t.name.as_deref() == Some(rust_name))
            .unwrap_or_else(|| panic!("params.wgsl lacks struct {rust_name}"));
        let naga::TypeInner::Struct { members, span } = &ty.1.inner else { panic!("{rust_name} is not a struct") };
        let wgsl: Vec<(&str, usize)> =
            members.iter().map(|m| (m.name.as_deref().unwrap_or(""), m.offset as usize)).collect();
        assert_eq!(wgsl, fields, "{rust_name}: WGSL fields/offsets differ from Rust");
        assert_eq!(*span as usize, fields.len() * 4, "{rust_name}: size");
    }
}

/// The typed dispatch declarations (src/backend/wgpu/pipelines.rs) against the bindings naga
/// reads from every assembled module of the op: binding 0 the params uniform of the declared
/// struct, then each storage binding's index, name and access mode in declaration order.
#[test]
fn every_pipeline_matches_its_wgsl_bindings() {
    use lserve::backend::wgpu::pipelines::{ALL, Access};
    use lserve::backend::wgpu::shaders::{OPS, WEIGHT_DTYPES};
    let modules = all_modules();
    // Module name suffixes of weight and KV variants: `_<weight dtype>` / `_<kv dtype>`.
    let suffixes: Vec<String> = WEIGHT_DTYPES
        .iter()
        .map(|d| format!("_{}", d.weight_name()))
        .chain(["_int8".to_string(), "_fp8".to_string()])
        .collect();
    let mut bad = vec![];
    for (op, ..) in OPS {
        if ALL.iter().filter(|p| p.ops.contains(op)).count() != 1 {
            bad.push(format!("shader {op} has no pipeline declaration, or more than one"));
        }
    }
    // Every (declaration, op) pair with the op's modules: its own name, or `<op>_<dtype>[_h]` for
    // weight and KV variants.
    let pairs = ALL.iter().flat_map(|p| p.ops.iter().map(move |op| (p, *op)));
    for (p, op) in pairs {
        let mine: Vec<_> = modules
            .iter()
            .filter(|m| {
                m.name == op
                    || suffixes.iter().any(|d| m.name.strip_prefix(op).is_some_and(|r| r.starts_with(d.as_str())))
            })
            .collect();
        if mine.is_empty() {
            bad.push(format!("{op}: no shader module"));
        }
        for m in mine {
            let module = parse(&m.name, &m.source);
            let mut got: Vec<(u32, String, String)> = vec![];
            for (_, g) in module.global_variables.iter() {
                let Some(b) = &g.binding else { continue };
                if b.group != 0 {
                    bad.push(format!("{}: binding in group {}", m.name, b.group));
                }
                let kind = match g.space {
                    naga::AddressSpace::Uniform => {
                        format!("uniform {}", module.types[g.ty].name.clone().unwrap_or_default())
                    }
                    naga::AddressSpace::Storage { access } if access.contains(naga::StorageAccess::STORE) => {
                        "read_write".into()
                    }
                    naga::AddressSpace::Storage { .. } => "read".into(),
                    other => format!("{other:?}"),
                };
                got.push((b.binding, g.name.clone().unwrap_or_default(), kind));
            }
            got.sort();
            let mut want = vec![(0, "p".to_string(), format!("uniform {}", p.params))];
            for (i, (name, acc)) in p.binds.iter().enumerate() {
                let kind = if *acc == Access::ReadWrite { "read_write" } else { "read" };
                want.push((i as u32 + 1, name.to_string(), kind.to_string()));
            }
            if got != want {
                bad.push(format!("{}: WGSL bindings {got:?}\n    declared {want:?}", m.name));
            }
        }
    }
    assert!(bad.is_empty(), "pipelines vs shaders/*.wgsl:\n  {}", bad.join("\n  "));
}

/// Every GGML type the backends must support has its shader modules (each op that reads weights
/// gets one per weight dtype), and so do the row-scaled 8-bit types; `matmul_gemv_x8` has one
/// for each but fp8.
#[test]
fn every_quantized_weight_dtype_has_modules() {
    use lserve::backend::DType;
    use lserve::backend::reference::weight_quant::GGML_WEIGHT_TYPES;
    use lserve::backend::wgpu::shaders::WEIGHT_DTYPES;
    let modules = all_modules();
    let wanted = GGML_WEIGHT_TYPES.iter().map(|&t| DType::Ggml(t)).chain([DType::I8Row, DType::F8Row]);
    for d in wanted {
        assert!(WEIGHT_DTYPES.contains(&d), "{d:?} missing from WEIGHT_DTYPES");
        for op in ["embed", "matmul", "matmul_m32", "matmul_gemv", "matmul_gemv_subgroup", "matmul_gemv_subgroup_batch"]
        {
            let name = format!("{op}_{}", d.weight_name());
            assert!(modules.iter().any(|m| m.name == name), "no module {name}");
        }
        // The int8-x GEMV: every format with an integer form (fp8 codes are not integers).
        let name = format!("matmul_gemv_x8_{}", d.weight_name());
        assert_eq!(modules.iter().any(|m| m.name == name), d != DType::F8Row, "module {name}");
    }
}
