//! The `lserve` binary end to end: successful runs on the default model checked against the
//! `transformers` reference, and bad input (files, flags, prompts) ending in a clear error and a
//! non-zero exit, never a panic.

mod common;

use std::process::{Command, Output};

use lserve::loader::gguf::GgufValue;
use lserve::loader::gguf::write::{TensorData, to_bytes};

fn lserve(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lserve")).args(args).output().expect("lserve runs")
}

fn model() -> String {
    common::model_path().to_string_lossy().into_owned()
}

/// Exits non-zero with `needle` in stderr and without a panic.
fn assert_fails(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "expected failure, got success; stderr: {err}");
    assert!(!err.contains("panicked"), "panic: {err}");
    assert!(err.contains(needle), "stderr lacks {needle:?}: {err}");
}

fn json_line(out: &Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(stdout.lines().last().expect("a line")).expect("json")
}

#[test]
fn generate_json_matches_reference_greedy() {
    let r = common::reference();
    let p = &r["prompts"]["d1_plain"];
    let out = lserve(&[
        "generate",
        "--model",
        &model(),
        "--prompt",
        p["text"].as_str().unwrap(),
        "--max-tokens",
        "24",
        "--ignore-eos",
        "--output",
        "json",
        "--device",
        "cpu",
    ]);
    let v = json_line(&out);
    assert_eq!(common::ids(&v["prompt_token_ids"]), common::ids(&p["ids"]));
    assert_eq!(common::ids(&v["token_ids"]), common::ids(&p["greedy24_ids"]));
    assert_eq!(v["text"].as_str().unwrap(), p["greedy24_text"].as_str().unwrap());
    assert!(v["prefill_ms"].as_f64().unwrap() > 0.0);
    assert!(v["decode_tokens_per_s"].as_f64().unwrap() > 0.0);
}

/// `--tensor-parallel-size 3` on the CPU (three ranks, host collective) gives the reference's
/// greedy ids, as one rank does (tests/tensor_parallel.rs has the tolerances); bad values fail.
#[test]
fn generate_tensor_parallel_on_cpu() {
    let r = common::reference();
    let p = &r["prompts"]["d1_plain"];
    let text = p["text"].as_str().unwrap();
    let m = model();
    let base = ["generate", "--model", &m, "--prompt", text, "--max-tokens", "24", "--ignore-eos", "--device", "cpu"];
    let run = |extra: &[&str]| lserve(&[&base[..], &["--output", "json"], extra].concat());
    let v = json_line(&run(&["--tensor-parallel-size", "3"]));
    assert_eq!(common::ids(&v["token_ids"]), common::ids(&p["greedy24_ids"]));
    assert_eq!((v["tensor_parallel_size"].as_u64(), v["tp_comm"].as_str()), (Some(3), Some("host")));
    let one = json_line(&run(&[]));
    assert_eq!((one["tensor_parallel_size"].as_u64(), one["tp_comm"].as_str()), (Some(1), Some("none")));
    assert_eq!(one["kv_cache_bytes"], v["kv_cache_bytes"], "the KV heads are split, not copied");
    assert_fails(&run(&["--tensor-parallel-size", "2"]), "does not divide the model's 9 attention heads");
    assert_fails(&run(&["--tensor-parallel-size", "0"]), "must be at least 1");
    assert_fails(&run(&["--tensor-parallel-size", "-3"]), "must not be negative");
    assert_fails(&run(&["--tensor-parallel-size", "3", "--tp-comm", "nccl"]), "--tp-comm nccl needs --device cuda");
    assert_fails(&run(&["--tensor-parallel-size", "3", "--tp-devices", "0,1,2"]), "CPU ranks have no device index");
}

/// `bench --tensor-parallel-size 3` on the CPU: synthetic shards on three ranks, the backend
/// column says so, and sparse decode reads less KV than dense.
#[test]
fn bench_tensor_parallel_on_cpu() {
    let args = [
        "bench",
        "--shape",
        "smollm2-135m",
        "--device",
        "cpu",
        "--contexts",
        "512",
        "--warmup",
        "1",
        "--warmup-ms",
        "0",
    ];
    let out = lserve(&[&args[..], &["--repeats", "1", "--tensor-parallel-size", "3"]].concat());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<&str> = text.lines().filter(|l| l.trim_start().starts_with("cpu-tp3")).collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert!(rows[1].contains("sparse") && !rows[1].contains("100.0%"), "{text}");
    let out = lserve(&[&args[..], &["--tensor-parallel-size", "2"]].concat());
    assert_fails(&out, "does not divide the model's 9 attention heads");
}

#[test]
fn chat_uses_the_template_and_stops_at_eos() {
    let r = common::reference();
    let p = &r["prompts"]["d2_chat"];
    let out = lserve(&[
        "generate",
        "--model",
        &model(),
        "--chat",
        "--prompt",
        "Name three primary colors.",
        "--output",
        "json",
    ]);
    let v = json_line(&out);
    assert_eq!(common::ids(&v["prompt_token_ids"]), common::ids(&p["ids"]));
    // The reference's greedy ids for this prompt were made with the <|im_end|> tokens masked
    // (see tests/smollm2.rs), so check a sensible answer that ends at EOS instead.
    let tokens = common::ids(&v["token_ids"]);
    assert_eq!(tokens.last(), Some(&2), "ends with <|im_end|>");
    let text = v["text"].as_str().unwrap().to_lowercase();
    assert!(["red", "blue", "yellow"].iter().all(|c| text.contains(c)), "{text}");
    assert_eq!(v["finish_reason"], "stop");
}

#[test]
fn text_output_streams_the_continuation() {
    let out = lserve(&[
        "generate",
        "--model",
        &model(),
        "--prompt",
        "Octopuses are remarkable animals because",
        "--max-tokens",
        "12",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with(" they have a unique ability"), "{text}");
}

#[test]
fn seeded_sampling_is_reproducible() {
    let run = |seed: &str| {
        let out = lserve(&[
            "generate",
            "--model",
            &model(),
            "--prompt",
            "Once upon a time",
            "--max-tokens",
            "16",
            "--temperature",
            "0.9",
            "--top-k",
            "40",
            "--top-p",
            "0.95",
            "--seed",
            seed,
            "--ignore-eos",
            "--output",
            "json",
        ]);
        common::ids(&json_line(&out)["token_ids"])
    };
    let a = run("11");
    assert_eq!(a, run("11"));
    assert_eq!(a.len(), 16);
}

#[test]
fn score_matches_reference_nll() {
    let r = common::reference();
    let p = &r["prompts"]["d4_long"];
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("doc.txt");
    std::fs::write(&f, p["text"].as_str().unwrap()).unwrap();
    let out = lserve(&["score", "--model", &model(), "--file", f.to_str().unwrap(), "--output", "json"]);
    let v = json_line(&out);
    assert_eq!(v["tokens"].as_u64().unwrap(), p["tokens"].as_u64().unwrap());
    let (got, want) = (v["mean_nll"].as_f64().unwrap(), p["mean_nll"].as_f64().unwrap());
    assert!((got - want).abs() < 1e-4, "{got} vs {want}");
    assert!((v["perplexity"].as_f64().unwrap() - want.exp()).abs() < 1e-3);
}

#[test]
fn devices_lists_the_cpu() {
    let out = lserve(&["devices"]);
    assert!(out.status.success());
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("cpu:") && s.contains("wgpu:") && s.contains("cuda:"), "{s}");
}

#[test]
fn missing_and_truncated_model_files() {
    assert_fails(&lserve(&["generate", "--model", "/nonexistent/x.gguf", "-p", "hi"]), "no such file");
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("cut.gguf");
    let bytes = std::fs::read(common::model_path()).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    assert_fails(&lserve(&["generate", "--model", cut.to_str().unwrap(), "-p", "hi"]), "truncated");
    let junk = dir.path().join("junk.gguf");
    std::fs::write(&junk, b"not a model at all").unwrap();
    assert_fails(&lserve(&["generate", "--model", junk.to_str().unwrap(), "-p", "hi"]), "bad magic");
    let empty_dir = dir.path().join("empty");
    std::fs::create_dir(&empty_dir).unwrap();
    assert_fails(&lserve(&["generate", "--model", empty_dir.to_str().unwrap(), "-p", "hi"]), "config.json");
}

#[test]
fn unknown_architecture_and_tensor_type() {
    let dir = tempfile::tempdir().unwrap();
    let meta = vec![("general.architecture".to_string(), GgufValue::String("gptneox".into()))];
    let f = dir.path().join("neox.gguf");
    std::fs::write(&f, to_bytes(&meta, &[])).unwrap();
    assert_fails(
        &lserve(&["generate", "--model", f.to_str().unwrap(), "-p", "hi"]),
        "unsupported model architecture `gptneox`",
    );
    // A tensor stored as IQ2_XXS (type 16), which lserve cannot dequantize: 256 elements, 66 bytes.
    let t = TensorData { name: "token_embd.weight".into(), dims: vec![256], ty_id: 16, bytes: vec![0; 66] };
    let g = lserve::loader::gguf::GgufFile::open(&{
        let p = dir.path().join("iq.gguf");
        std::fs::write(&p, to_bytes(&[], &[t])).unwrap();
        p
    })
    .unwrap();
    let e = g.tensor_f32("token_embd.weight").unwrap_err().to_string();
    assert!(e.contains("IQ2_XXS") && e.contains("cannot dequantize"), "{e}");
}

#[test]
fn bad_flags_are_refused() {
    let m = model();
    assert_fails(&lserve(&["generate", "--model", &m, "-p", "hi", "--temperature=-1"]), "temperature");
    assert_fails(&lserve(&["generate", "--model", &m, "-p", "hi", "--top-p", "0"]), "top_p");
    assert_fails(&lserve(&["generate", "--model", &m, "-p", "hi", "--device", "tpu"]), "--device tpu");
    assert_fails(&lserve(&["generate", "--model", &m, "-p", "hi", "--device", "cuda:x"]), "not an adapter number");
    #[cfg(feature = "cuda")]
    if !lserve::backend::cuda::driver_present() {
        // No driver here: --device cuda is a clear error, not a panic.
        assert_fails(&lserve(&["generate", "--model", &m, "-p", "hi", "--device", "cuda"]), "no CUDA driver");
        assert_fails(&lserve(&["bench", "--device", "cuda", "--shape", "smollm2-135m"]), "no CUDA driver");
    }
    assert_fails(&lserve(&["bench", "--device", "cpu", "--head", "nucleus"]), "invalid value");
    let out = lserve(&["generate", "--model", &m]);
    assert_eq!(out.status.code(), Some(2), "clap usage error");
    #[cfg(feature = "wgpu")]
    {
        let out = Command::new(env!("CARGO_BIN_EXE_lserve"))
            .args(["generate", "--model", &m, "-p", "hi", "--device", "wgpu"])
            .env("LSERVE_WGPU_FEATURES", "f16,bogus")
            .output()
            .unwrap();
        assert_fails(&out, "unknown feature `bogus`");
        let out = Command::new(env!("CARGO_BIN_EXE_lserve"))
            .args(["generate", "--model", &m, "-p", "hi", "--device", "wgpu"])
            .env("LSERVE_WGPU_NO_COOP", "yes")
            .output()
            .unwrap();
        assert_fails(&out, "LSERVE_WGPU_NO_COOP: `yes` is not 1 or 0");
    }
    let out = lserve(&["generate", "--model", &m, "-p", "hi", "--max-tokens", "-3"]);
    assert_eq!(out.status.code(), Some(2));
    assert_fails(&lserve(&["score", "--model", &m, "--file", "/nonexistent.txt"]), "reading --file");
    for v in ["1.5", "-0.5", "nan"] {
        let out = lserve(&["generate", "--model", &m, "-p", "hi", "--sparse", "on", &format!("--bound-shrink={v}")]);
        assert_fails(&out, "bound_shrink");
    }
    // Counts of zero are refused, each naming its flag (not clamped to 1, nor run as an empty sweep).
    assert_fails(&lserve(&["bench", "--device", "cpu", "--shape", "smollm2-135m", "--batch", "1,0"]), "--batch: `0`");
    assert_fails(
        &lserve(&["bench", "--device", "cpu", "--shape", "smollm2-135m", "--contexts", "0"]),
        "--contexts: `0`",
    );
    let acc = ["accuracy", "--model", &m, "--lengths", "1k", "--ratios", "0", "--out-dir", "/tmp/never"];
    assert_fails(&lserve(&[&acc[..], &["--samples", "0"]].concat()), "--samples must be at least 1");
    // A length below a task's answer once wrapped around and built a filler without end.
    let short =
        ["accuracy", "--model", &m, "--lengths", "10", "--ratios", "0", "--tasks", "niah", "--out-dir", "/tmp/never"];
    assert_fails(&lserve(&short), "length 10 is too short for niah");
    assert_fails(&lserve(&[&acc[..4], &["9k"], &acc[5..]].concat()), "--lengths: 9216 tokens do not fit");
    assert_fails(&lserve(&["recall", "--model", &m, "--lengths", "9k"]), "--lengths: 9216 tokens do not fit");
    assert_fails(&lserve(&["recall", "--model", &m, "--lengths", "1k", "--steps", "0"]), "--steps must be at least 1");
    assert_fails(&lserve(&["recall", "--model", &m, "--lengths", "1k", "--every", "0"]), "--every must be at least 1");
    // Sizes without an upper bound used to allocate without end, overflow or panic inside tokio
    // or hyper; each is now refused naming its flag (or the config key) before the model loads.
    let serve = ["serve", "--model", &m, "--port", "0"];
    for (flag, v, needle) in [
        ("--max-connections", "2305843009213693952", "--max-connections 2305843009213693952: must be at most"),
        ("--header-timeout", "9223372036854775807", "--header-timeout 9223372036854775807: must be at most"),
        ("--body-timeout", "86401", "--body-timeout 86401: must be at most 86400"),
        ("--max-num-seqs", "4294967296", "--max-num-seqs 4294967296: must be at most"),
        ("--prefill-chunk", "1125899906842624", "--prefill-chunk 1125899906842624: must be at most"),
    ] {
        assert_fails(&lserve(&[&serve[..], &[flag, v]].concat()), needle);
    }
    assert_fails(
        &lserve(&["generate", "--model", &m, "-p", "hi", "--token-budget", "1000000000000000"]),
        "token_budget 1000000000000000 must not exceed",
    );
    let huge_ring = std::env::temp_dir().join(format!("lserve-huge-ring-{}.toml", std::process::id()));
    std::fs::write(&huge_ring, "[sparse]\nsink_tokens = 1000000000000\n").unwrap();
    assert_fails(
        &lserve(&["generate", "--model", &m, "-p", "hi", "--config", huge_ring.to_str().unwrap()]),
        "sink_tokens 1000000000000 + local_tokens",
    );
    let _ = std::fs::remove_file(&huge_ring);
    // The bench builds its own head layout: a named pattern of a real model does not stop it.
    let pat = concat!(env!("CARGO_MANIFEST_DIR"), "/patterns/gemma3-270m.toml");
    let mut args: Vec<&str> =
        "bench --device cpu --shape smollm2-135m --contexts 1k --repeats 1 --sparse both".split(' ').collect();
    args.extend(["--head-pattern", pat]);
    let out = lserve(&args);
    assert!(out.status.success(), "bench with --head-pattern: {}", String::from_utf8_lossy(&out.stderr));
    // An io error names its cause once.
    let out = lserve(&["bench", "--device", "cpu", "--shape", "/nonexistent.json"]);
    assert_fails(&out, "/nonexistent.json");
    assert_eq!(String::from_utf8_lossy(&out.stderr).matches("os error 2").count(), 1);
}

#[test]
fn prompt_longer_than_context_and_unscoreable_files() {
    let dir = tempfile::tempdir().unwrap();
    let long = dir.path().join("long.txt");
    std::fs::write(&long, "word ".repeat(9000)).unwrap();
    assert_fails(
        &lserve(&["generate", "--model", &model(), "--prompt-file", long.to_str().unwrap()]),
        "context holds 8192",
    );
    let empty = dir.path().join("empty.txt");
    std::fs::write(&empty, "").unwrap();
    assert_fails(&lserve(&["score", "--model", &model(), "--file", empty.to_str().unwrap()]), "at least two tokens");
    let bin = dir.path().join("bin.txt");
    std::fs::write(&bin, [0xff, 0xfe, 0x00, 0x80]).unwrap();
    assert_fails(&lserve(&["score", "--model", &model(), "--file", bin.to_str().unwrap()]), "not UTF-8");
    assert_fails(
        &lserve(&["score", "--model", &model(), "--file", long.to_str().unwrap(), "--window", "1"]),
        "--window 1",
    );
}

#[test]
fn sparse_flags_config_and_errors() {
    let m = model();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, "[sparse]\ntoken_budgte = 4\n").unwrap();
    assert_fails(&lserve(&["generate", "--model", &m, "-p", "hi", "--config", cfg.to_str().unwrap()]), "unknown field");
    assert_fails(&lserve(&["generate", "--model", &m, "-p", "hi", "--logical-page", "24"]), "must divide");
    assert_fails(&lserve(&["generate", "--model", &m, "-p", "hi", "--physical-page", "8"]), "between 16 and 1024");
    assert_fails(&lserve(&["generate", "--model", &m, "-p", "hi", "--kv-memory", "lots"]), "--kv-memory lots");
    assert_fails(&lserve(&["generate", "--model", &m, "-p", "hi", "--kv-memory", "1KiB"]), "does not hold one page");
    let pat = dir.path().join("bad.tsv");
    std::fs::write(&pat, "0.1\t0.2\n").unwrap();
    let args = ["generate", "--model", &m, "-p", "hi", "--sparse", "on", "--streaming-ratio", "0.5", "--head-pattern"];
    assert_fails(
        &lserve(&[&args[..], &[pat.to_str().unwrap()]].concat()),
        "1x2 (layers x KV heads) but the model has 30x3",
    );
    // A named pattern is checked even where it would go unused (dense; streaming ratio 0).
    let dense = ["generate", "--model", &m, "-p", "hi", "--max-tokens", "1", "--head-pattern", pat.to_str().unwrap()];
    assert_fails(&lserve(&dense), "1x2 (layers x KV heads) but the model has 30x3");
    let junk = dir.path().join("junk.toml");
    std::fs::write(&junk, "root:x:0:0:root:/root:/bin/bash\n").unwrap();
    let ratio0 = ["generate", "--model", &m, "-p", "hi", "--sparse", "on", "--streaming-ratio", "0", "--head-pattern"];
    assert_fails(&lserve(&[&ratio0[..], &[junk.to_str().unwrap()]].concat()), "junk.toml");
    // With a config file that turns sparse on and a budget covering the context, greedy output is
    // the dense output (page selection runs and keeps every page).
    std::fs::write(&cfg, "[sparse]\nenabled = true\nstreaming_ratio = 0.0\ndense_below = 0\nselector_interval = 1\ntoken_budget = 8192\n[cache]\nphysical_page = 16\nlogical_page = 8\n").unwrap();
    let r = common::reference();
    let p = &r["prompts"]["d3_code"];
    let out = lserve(&[
        "generate",
        "--model",
        &m,
        "--config",
        cfg.to_str().unwrap(),
        "--prompt",
        p["text"].as_str().unwrap(),
        "--max-tokens",
        "24",
        "--ignore-eos",
        "--output",
        "json",
    ]);
    let v = json_line(&out);
    assert_eq!(v["sparse"], true);
    assert_eq!(common::ids(&v["token_ids"]), common::ids(&p["greedy24_ids"]));
}

#[test]
fn calibrate_then_niah_with_the_pattern() {
    let dir = tempfile::tempdir().unwrap();
    let pat = dir.path().join("heads.toml");
    let out =
        lserve(&["calibrate", "--model", &model(), "--out", pat.to_str().unwrap(), "--docs", "1", "--length", "600"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let p = lserve::sparse::HeadPattern::load(&pat).unwrap();
    assert_eq!((p.scores.len(), p.scores[0].len()), (30, 3));
    assert!(p.scores.iter().flatten().all(|&s| (0.0..=1.0).contains(&s)));
    assert!(p.scores.iter().flatten().any(|&s| s > 0.01), "some head looks beyond its window");
    let nd = dir.path().join("niah");
    let out = lserve(&[
        "niah",
        "--model",
        &model(),
        "--lengths",
        "700",
        "--depths",
        "0,100",
        "--sparse",
        "both",
        "--out-dir",
        nd.to_str().unwrap(),
        "--head-pattern",
        pat.to_str().unwrap(),
        "--streaming-ratio",
        "0.5",
        "--token-budget",
        "256",
        "--dense-below",
        "0",
        "--physical-page",
        "32",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("dense:") && stdout.contains("sparse:"), "{stdout}");
    let res: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(nd.join("results.json")).unwrap()).unwrap();
    let cells = res["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 4);
    for c in cells {
        assert!(c["prompt_tokens"].as_u64().unwrap() <= 700);
        let frac = c["kv_read_fraction"].as_f64().unwrap();
        if c["mode"] == "sparse" {
            assert!(frac < 0.9, "sparse decode should read less KV: {frac}");
        } else {
            assert_eq!(frac, 1.0);
        }
    }
    // The dense model retrieves a needle at the end of a short haystack.
    assert!(cells.iter().any(|c| c["mode"] == "dense" && c["correct"] == true), "{cells:?}");
    let png = std::fs::read(nd.join("heatmap.png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    assert_fails(&lserve(&["niah", "--model", &model(), "--lengths", "1x", "--out-dir", "/tmp/x"]), "--lengths");
}

#[test]
fn serve_refuses_bad_settings_before_listening() {
    let m = model();
    let out = lserve(&["serve", "--model", &m, "--device", "cpu", "--max-num-seqs", "0"]);
    assert_fails(&out, "--max-num-seqs");
    let out = lserve(&["serve", "--model", &m, "--device", "cpu", "--swap-space", "lots"]);
    assert_fails(&out, "lots");
    let out = lserve(&["serve", "--model", &m, "--device", "cpu", "--tensor-parallel-size", "2", "--port", "0"]);
    assert_fails(&out, "does not divide the model's 9 attention heads");
    let out = lserve(&["serve", "--model", &m, "--device", "cpu", "--port", "99999"]);
    assert_eq!(out.status.code(), Some(2), "clap rejects the port");
    let out = lserve(&["serve", "--model", &m, "--device", "cpu", "--kv-memory", "1KiB", "--port", "0"]);
    assert_fails(&out, "kv_memory");
    // A port already in use is an error, not a hang or a panic.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    let out = lserve(&["serve", "--model", &m, "--device", "cpu", "--kv-memory", "64MiB", "--port", &port]);
    assert_fails(&out, "error");
}

/// `lserve` run from `dir` (not the repository), so nothing can be found by relative path.
fn lserve_in(dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lserve")).current_dir(dir).args(args).output().expect("lserve runs")
}

#[test]
fn sparse_on_works_out_of_the_box() {
    let dir = tempfile::tempdir().unwrap();
    // The default model: the shipped pattern is found by model identity from any directory.
    let out = lserve_in(
        dir.path(),
        &["generate", "--sparse", "on", "--prompt", "Hello", "--max-tokens", "4", "--device", "cpu"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("45 of 90 KV heads stream"), "the shipped pattern (ratio 0.5) was not used: {err}");
    assert!(!err.contains("note:"), "{err}");
    // The identity, not the path: the same model under another name still matches...
    let copy = dir.path().join("renamed.gguf");
    std::fs::copy(common::model_path(), &copy).unwrap();
    let loaded = lserve::loader::open(&copy).unwrap();
    assert!(lserve::sparse::pattern::shipped_pattern(&loaded.identity()).is_some(), "{:?}", loaded.identity());
    // ...and a model with other shapes gets no streaming heads and one notice line, not an error.
    let tiny = dir.path().join("tiny.gguf");
    std::fs::write(&tiny, common::tiny::gguf_base()).unwrap();
    let t = tiny.to_str().unwrap();
    let out = lserve_in(dir.path(), &["generate", "--model", t, "--sparse", "on", "-p", "hello", "--max-tokens", "2"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(err.matches("no head pattern ships").count(), 1, "{err}");
    assert!(err.contains("0 of 2 KV heads stream"), "{err}");
    let out = lserve_in(
        dir.path(),
        &["niah", "--sparse", "both", "--lengths", "300", "--depths", "50", "--out-dir", "n", "--device", "cpu"],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // `lserve accuracy` with streaming heads takes the shipped pattern too, and names the missing
    // one for a model without.
    let acc = ["accuracy", "--tasks", "niah", "--lengths", "300", "--samples", "1", "--budgets", "128"];
    let out = lserve_in(dir.path(), &[&acc[..], &["--ratios", "0.5", "--out-dir", "a", "--device", "cpu"]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = std::fs::read_to_string(dir.path().join("a/accuracy.md")).unwrap();
    assert!(table.contains("s0.5"), "{table}");
    let tiny_acc = ["accuracy", "--model", t, "--tasks", "ppl", "--lengths", "32", "--ratios", "0.5", "--out-dir", "a"];
    let out = lserve_in(dir.path(), &tiny_acc);
    assert_fails(&out, "no head pattern ships for this model");
}

#[test]
fn sizes_numbers_and_limits_are_plain() {
    let m = model();
    let run_gen =
        |extra: &[&str]| lserve(&[&["generate", "--model", &m, "-p", "hi", "--device", "cpu"][..], extra].concat());
    let out = run_gen(&["--kv-memory", "1.5"]);
    assert_fails(&out, "--kv-memory 1.5");
    assert_fails(&out, "must be whole");
    assert_fails(&run_gen(&["--kv-memory", "1"]), "does not hold one page"); // one byte, not all of memory
    assert_fails(&run_gen(&["--kv-memory", "-5"]), "--kv-memory -5: must not be negative");
    assert_fails(&run_gen(&["--kv-memory", "150%"]), "at most 100%");
    let out = run_gen(&["--kv-memory", "0.5%", "--max-tokens", "1"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_fails(&run_gen(&["--max-tokens", "0"]), "--max-tokens 0");
    let out = run_gen(&["--max-tokens", "-5"]);
    assert_eq!(out.status.code(), Some(2));
    assert_fails(&out, "must not be negative");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("unexpected argument"));
    assert_fails(&run_gen(&["--top-k", "x"]), "must be a whole number");
    assert_fails(&run_gen(&["--sparse", "on", "--token-budget", "0"]), "token_budget 0");
    let serve =
        |extra: &[&str]| lserve(&[&["serve", "--model", &m, "--device", "cpu", "--port", "0"][..], extra].concat());
    for (flag, v) in [("--max-body", "50%"), ("--swap-space", "lots"), ("--max-body", "-5"), ("--swap-space", "1.5")] {
        let out = serve(&[flag, v]);
        assert_fails(&out, &format!("{flag} {v}"));
        assert!(!String::from_utf8_lossy(&out.stderr).contains("kv memory"), "{flag}");
    }
    assert_fails(&serve(&["--max-connections", "0"]), "--max-connections 0");
    assert_fails(&serve(&["--header-timeout", "-1"]), "must not be negative");
}

#[test]
fn hostile_model_files_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (mut meta, t) = common::tiny::gguf_parts();
    meta.iter_mut().find(|(k, _)| k == "llama.block_count").unwrap().1 = GgufValue::U32((1 << 31) - 5);
    let f = dir.path().join("layers.gguf");
    std::fs::write(&f, to_bytes(&meta, &t)).unwrap();
    let out = lserve(&["generate", "--model", f.to_str().unwrap(), "-p", "hi"]);
    assert_eq!(out.status.code(), Some(1), "an error exit, not an abort (134)");
    assert_fails(&out, "num_layers");
    // config.json with 2^40 layers and a wrong-typed value.
    let hf = dir.path().join("hf");
    std::fs::create_dir(&hf).unwrap();
    let mut files = common::tiny::HfFiles::base();
    let mut cfg = common::tiny::hf_config();
    cfg["num_hidden_layers"] = serde_json::json!(1u64 << 40);
    files.config = cfg.to_string().into_bytes();
    common::tiny::write_hf(&hf, &files);
    let out = lserve(&["generate", "--model", hf.to_str().unwrap(), "-p", "hello"]);
    assert_eq!(out.status.code(), Some(1));
    assert_fails(&out, "num_layers");
    cfg["num_hidden_layers"] = serde_json::json!(2);
    cfg["rope_theta"] = serde_json::json!("x");
    files.config = cfg.to_string().into_bytes();
    common::tiny::write_hf(&hf, &files);
    assert_fails(&lserve(&["generate", "--model", hf.to_str().unwrap(), "-p", "hello"]), "`rope_theta` must be");
    // A prompt far past the context is refused before it is tokenized or templated.
    let big = dir.path().join("big.txt");
    std::fs::write(&big, "word ".repeat(2_000_000)).unwrap();
    let b = big.to_str().unwrap();
    assert_fails(&lserve(&["generate", "--model", &model(), "--prompt-file", b]), "far more than the context");
    assert_fails(
        &lserve(&["generate", "--model", &model(), "--chat", "--prompt-file", b]),
        "far more than the context",
    );
}

/// The Vulkan loader's probing prints nothing on a headless machine (no XDG_RUNTIME_DIR).
#[cfg(feature = "wgpu")]
#[test]
fn devices_prints_no_vulkan_noise() {
    let run = |nodevice: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_lserve"));
        c.arg("devices").env_remove("XDG_RUNTIME_DIR").env_remove("WAYLAND_DISPLAY");
        match nodevice {
            Some(v) => c.env("NODEVICE_SELECT", v),
            None => c.env_remove("NODEVICE_SELECT"),
        };
        c.output().unwrap()
    };
    let out = run(None);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("XDG_RUNTIME_DIR") && !err.contains("error"), "stray stderr: {err}");
    // The mechanism: with Mesa's device-select layer forced on, the noise is there (where that
    // layer is installed), so the check above can fail.
    if std::path::Path::new("/usr/share/vulkan/implicit_layer.d/VkLayer_MESA_device_select.json").exists() {
        let err = String::from_utf8_lossy(&run(Some("0")).stderr).to_string();
        eprintln!("with NODEVICE_SELECT=0: {err}");
    }
}

/// One HTTP/1.1 request to 127.0.0.1:`port` (Connection: close); returns (status, body).
fn http(port: u16, method: &str, path: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connects");
    s.set_read_timeout(Some(std::time::Duration::from_secs(120))).unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let status = resp.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = resp.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_string();
    (status, body)
}

/// Kills the spawned server however the test ends.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `vocab-only` writes the model's metadata without tensors (small, same tokenizer), and `serve
/// --synthetic` serves synthetic weights of a named shape behind that tokenizer, with the context
/// `--synthetic-context` gives (beyond the shape's 8K) and every sampled id detokenizable.
#[test]
fn vocab_only_file_serves_synthetic_weights() {
    let dir = tempfile::tempdir().unwrap();
    let vocab = dir.path().join("vocab.gguf");
    let out = lserve(&["vocab-only", "--model", &model(), "--out", vocab.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let size = std::fs::metadata(&vocab).unwrap().len();
    assert!(size < 4 << 20, "a vocab-only file is small: {size} bytes");
    let g = lserve::loader::gguf::GgufFile::open(&vocab).unwrap();
    assert!(g.tensors.is_empty());
    let (full, small) = (lserve::loader::open(&common::model_path()).unwrap(), lserve::loader::open(&vocab).unwrap());
    let text = "Tokenizers agree: naïve café, 42 tokens\n\tand more.";
    assert_eq!(small.tokenizer.encode(text).unwrap(), full.tokenizer.encode(text).unwrap());
    // Its weights are absent: generating from it is a clear error.
    assert_fails(&lserve(&["generate", "--model", vocab.to_str().unwrap(), "-p", "hi", "--device", "cpu"]), "missing");

    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let args = ["serve", "--device", "cpu", "--synthetic", "smollm2-135m", "--synthetic-context", "20000"];
    let child = Command::new(env!("CARGO_BIN_EXE_lserve"))
        .args(args)
        .args(["--model", vocab.to_str().unwrap(), "--kv-memory", "1GiB", "--port", &port.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("serve starts");
    let _guard = Child(child);
    let t0 = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(t0.elapsed().as_secs() < 120, "the server did not come up");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let (status, body) = http(port, "GET", "/v1/models", "");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["data"][0]["id"], "synthetic-smollm2-135m");
    assert_eq!(v["data"][0]["max_model_len"], 20000);
    let req = r#"{"model":"synthetic-smollm2-135m","prompt":"Once upon a time","max_tokens":5,"temperature":0,"ignore_eos":true}"#;
    let (status, body) = http(port, "POST", "/v1/completions", req);
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["usage"]["completion_tokens"], 5, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert!(v["choices"][0]["text"].is_string());
    let (_, metrics) = http(port, "GET", "/metrics", "");
    assert!(metrics.contains("lserve_num_requests_running_peak 1"), "{metrics}");

    assert_fails(
        &lserve(&["serve", "--device", "cpu", "--synthetic", "gpt-9", "--port", "0"]),
        "unknown shape `gpt-9`",
    );
    let out = lserve(&["serve", "--device", "cpu", "--synthetic-context", "9000"]);
    assert_eq!(out.status.code(), Some(2), "--synthetic-context needs --synthetic");
    assert_fails(&lserve(&["vocab-only", "--model", "/nonexistent.gguf", "--out", "/tmp/x.gguf"]), "no such file");
}

/// `--quantize int8` on a file whose matrices are all quantized (the default model: Q4_1 / Q8_0,
/// kept native) changes nothing, and says so; with `--weights dequant` it quantizes and does not.
#[test]
fn quantize_on_a_quantized_file_warns() {
    let m = model();
    let base = ["generate", "--model", &m, "-p", "hi", "--max-tokens", "1", "--quantize", "int8"];
    let out = lserve(&base);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("none was quantized"), "no warning: {err}");
    let out = lserve(&[&base[..], &["--weights", "dequant"]].concat());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("none was quantized"), "warned with --weights dequant: {err}");
}
