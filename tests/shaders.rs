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
        if m.needs_coop {
            caps |= Capabilities::COOPERATIVE_MATRIX;
        }
        let info = Validator::new(ValidationFlags::all(), caps)
            .validate(&module)
            .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(&src)));
        let spv = naga::back::spv::Options { lang_version: (1, 3), ..Default::default() };
        naga::back::spv::write_vec(&module, &info, &spv, None).unwrap_or_else(|e| panic!("{name} SPIR-V: {e}"));
        if m.needs_coop {
            // Vulkan only (16x16 fragments): tests::coop_modules_translate_to_spirv checks them further.
            continue;
        }
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

/// The cooperative-matrix kernels — the GEMMs (`matmul_coop`, `matmul_coop_128`): one module per
/// 16-bit and quantized weight dtype (none for f32 weights); the prefill attention
/// (`prefill_attention_coop_d64`, `_d128`): one per 16-bit KV dtype — each of which validates
/// only with the COOPERATIVE_MATRIX capability (so the extension is really used) and translates to SPIR-V
/// declaring `CooperativeMatrixKHR` (capability 6022) and the SPV_KHR_cooperative_matrix
/// extension, with the A/B fragments f16 and the accumulator f32. lavapipe has no cooperative
/// matrices, so this is as far as CI can take them; the parity tests run them on GPUs that do.
#[test]
fn coop_modules_translate_to_spirv() {
    use lserve::backend::DType;
    use lserve::backend::wgpu::shaders::{KV_DTYPES, Variant, WEIGHT_DTYPES, assemble, module_name};
    let weights: Vec<DType> = WEIGHT_DTYPES.iter().copied().filter(|&d| d != DType::F32).collect();
    let kv16 = vec![DType::F16, DType::BF16];
    for (op, dtypes) in [
        ("matmul_coop", &weights),
        ("matmul_coop_128", &weights),
        ("prefill_attention_coop_d128", &kv16),
        ("prefill_attention_coop_d64", &kv16),
    ] {
        assert!(assemble(op, Variant::weights(DType::F32)).is_none(), "{op}: no f32 module");
        if op.starts_with("prefill") {
            for d in KV_DTYPES.iter().filter(|d| !kv16.contains(d)) {
                assert!(assemble(op, Variant::weights(*d)).is_none(), "{op}: no {d:?} KV module");
            }
        }
        for &d in dtypes {
            let name = module_name(op, Variant::weights(d));
            let src = assemble(op, Variant::weights(d)).unwrap_or_else(|| panic!("{name}: no module"));
            assert!(src.starts_with("enable f16;\nenable wgpu_cooperative_matrix;\n"), "{name}: enables");
            let module = parse(&name, &src);
            let base = Capabilities::SHADER_FLOAT16_IN_FLOAT32 | Capabilities::SHADER_FLOAT16 | Capabilities::SUBGROUP;
            assert!(
                Validator::new(ValidationFlags::all(), base).validate(&module).is_err(),
                "{name}: validates without COOPERATIVE_MATRIX"
            );
            let info = Validator::new(ValidationFlags::all(), base | Capabilities::COOPERATIVE_MATRIX)
                .validate(&module)
                .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(&src)));
            let spv = naga::back::spv::Options { lang_version: (1, 3), ..Default::default() };
            let words =
                naga::back::spv::write_vec(&module, &info, &spv, None).unwrap_or_else(|e| panic!("{name} SPIR-V: {e}"));
            // OpCapability (opcode 17, 2 words) CooperativeMatrixKHR (6022).
            assert!(
                words.windows(2).any(|w| w == [(2 << 16) | 17, 6022]),
                "{name}: no CooperativeMatrixKHR capability"
            );
            // OpTypeCooperativeMatrixKHR (4456: result, component type, scope, rows, columns, use)
            // of 16x16 f16 (OpTypeFloat 22 of width 16) for uses A (0) and B (1), f32 for C (2).
            let (mut insts, mut i) = (vec![], 5);
            while i < words.len() {
                let n = (words[i] >> 16) as usize;
                assert!(n > 0, "{name}: malformed SPIR-V");
                insts.push(&words[i..i + n]);
                i += n;
            }
            let float_of = |id: u32| insts.iter().find(|w| w[0] & 0xffff == 22 && w[1] == id).map(|w| w[2]);
            let constant = |id: u32| insts.iter().find(|w| w[0] & 0xffff == 43 && w[2] == id).map(|w| w[3]);
            let mut frags: Vec<_> = insts
                .iter()
                .filter(|w| w[0] & 0xffff == 4456)
                .map(|w| (float_of(w[2]), constant(w[4]), constant(w[5]), constant(w[6])))
                .collect();
            frags.sort();
            let want = [
                (Some(16), Some(16), Some(16), Some(0)),
                (Some(16), Some(16), Some(16), Some(1)),
                (Some(32), Some(16), Some(16), Some(2)),
            ];
            assert_eq!(frags, want, "{name}: fragment types (width, rows, columns, use)");
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            assert!(
                bytes.windows(26).any(|w| w == b"SPV_KHR_cooperative_matrix"),
                "{name}: no SPV_KHR_cooperative_matrix extension"
            );
        }
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
