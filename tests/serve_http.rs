//! The HTTP server in-process on the CPU with the default model, driven by concurrent raw
//! HTTP/1.1 clients: concurrent greedy completions equal sequential ones, SSE chunks add up to
//! the non-streamed text and end with [DONE], bad input gets OpenAI-style 4xx bodies and hurts
//! nobody else, a full queue answers 429, a client leaving mid-stream is cancelled and its pages
//! freed, the API key is enforced, /metrics and /health answer.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use lserve::backend::cpu::CpuBackend;
use lserve::engine::{EngineOptions, build_engine};
use lserve::loader::{self, LoadedModel};
use lserve::model::llama::Llama;
use lserve::sched::{PreemptMode, SchedConfig};
use lserve::server::{AppState, Metrics, ModelInfo, ServerOptions, engine_loop, serve_on};
use lserve::serving::{ServeEngine, ServeOptions};
use serde_json::{Value, json};

static MODEL: LazyLock<LoadedModel> = LazyLock::new(|| loader::open(&common::model_path()).expect("model opens"));

struct Server {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A server with `pages` KV pages of 16 tokens, up to `max_num_seqs` running and `max_inflight`
/// accepted requests.
fn start(pages: usize, max_num_seqs: usize, max_inflight: usize, api_key: Option<&str>) -> Server {
    start_with(pages, max_num_seqs, max_inflight, api_key, |_| {})
}

/// As [`start`], with the server options changed by `tweak` (limits, timeouts).
fn start_with(
    pages: usize,
    max_num_seqs: usize,
    max_inflight: usize,
    api_key: Option<&str>,
    tweak: impl FnOnce(&mut ServerOptions),
) -> Server {
    let be = CpuBackend::new();
    let llama = Llama::load(&be, &MODEL.config, MODEL.weights.as_ref(), |_, _| {}).expect("weights load");
    let mut config = common::paged_config(16, 16);
    // Exactly `pages` pages: K+V of 16 tokens and one min/max summary per layer and KV head (f32).
    let c = &MODEL.config;
    let page_bytes = c.num_layers * c.num_kv_heads * (2 * 16 * c.head_dim * 4 + 2 * c.head_dim * 4);
    config.cache.kv_memory = Some((pages * page_bytes).to_string());
    let opts = EngineOptions { config, max_tokens: 0, max_seqs: max_num_seqs, prefill_chunk: 64, layout: None };
    let engine = build_engine(be, llama, &opts).expect("engine");
    assert_eq!(engine.cache.shape.num_pages, pages);
    let sched = SchedConfig {
        max_num_seqs,
        max_batch_tokens: 128,
        prefill_chunk: 64,
        page_size: 16,
        preempt: PreemptMode::Swap,
    };
    let tok = Arc::new(MODEL.tokenizer.clone());
    let se = ServeEngine::new(engine, tok.clone(), ServeOptions { sched, swap_bytes: 1 << 30 }).expect("serve engine");
    let info = ModelInfo {
        name: "smollm2-135m".into(),
        tokenizer: tok,
        template: lserve::loader::open(&common::model_path()).unwrap().template,
        stop_ids: MODEL.stop_ids(),
        max_request_tokens: se.max_request_tokens(),
    };
    let metrics = Arc::new(Metrics::default());
    let (cmd_tx, cmd_rx) = tokio::sync::mpsc::unbounded_channel();
    let m2 = metrics.clone();
    std::thread::spawn(move || engine_loop(se, cmd_rx, m2));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    let mut sopts = ServerOptions {
        max_body_bytes: 64 << 10,
        ..ServerOptions::new(addr, api_key.map(str::to_string), max_inflight)
    };
    tweak(&mut sopts);
    let state = AppState::new(cmd_tx, info, metrics, sopts);
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async move {
            let l = tokio::net::TcpListener::from_std(listener).unwrap();
            serve_on(l, state, async move {
                let _ = stop_rx.await;
            })
            .await
            .unwrap();
        });
    });
    Server { addr, stop: Some(stop), thread: Some(thread) }
}

struct Reply {
    status: u16,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
    /// The `data:` payloads of an SSE body.
    fn sse(&self) -> Vec<String> {
        self.body.lines().filter_map(|l| l.strip_prefix("data: ")).map(str::to_string).collect()
    }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(nl) = b.windows(2).position(|w| w == b"\r\n") else { return out };
        let n = usize::from_str_radix(std::str::from_utf8(&b[..nl]).unwrap().trim(), 16).unwrap_or(0);
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&b[nl + 2..nl + 2 + n]);
        b = &b[nl + 2 + n + 2..];
    }
}

fn raw(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let mut req =
        format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).unwrap();
    let split = buf.windows(4).position(|w| w == b"\r\n\r\n").expect("header end");
    let head = String::from_utf8_lossy(&buf[..split]).to_string();
    let mut body = buf[split + 4..].to_vec();
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    Reply { status, body: String::from_utf8(body).unwrap() }
}

fn post(addr: SocketAddr, path: &str, body: &Value) -> Reply {
    raw(addr, "POST", path, &[("Content-Type", "application/json")], body.to_string().as_bytes())
}

const PROMPTS: [&str; 8] = [
    "The history of the printing press begins in",
    "Write a short poem about the sea:",
    "def add(a, b):",
    "Three reasons why cats make good pets are",
    "The capital of Japan is",
    "Once upon a time, in a small village,",
    "Water boils at",
    "The best way to learn a language is",
];

fn completion(addr: SocketAddr, prompt: &str, stream: bool) -> Reply {
    post(
        addr,
        "/v1/completions",
        &json!({"model": "smollm2-135m", "prompt": prompt, "max_tokens": 10, "temperature": 0, "stream": stream}),
    )
}

#[test]
fn concurrent_clients_get_the_sequential_answers_and_streams_add_up() {
    let srv = start(256, 8, 64, None);
    let want: Vec<String> = PROMPTS
        .iter()
        .map(|p| completion(srv.addr, p, false).json()["choices"][0]["text"].as_str().unwrap().to_string())
        .collect();
    let addr = srv.addr;
    let handles: Vec<_> = PROMPTS
        .iter()
        .enumerate()
        .map(|(i, p)| std::thread::spawn(move || (i, completion(addr, p, i % 2 == 1))))
        .collect();
    for h in handles {
        let (i, r) = h.join().unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        if i % 2 == 0 {
            let v = r.json();
            assert_eq!(v["choices"][0]["text"], want[i].as_str());
            assert_eq!(v["usage"]["completion_tokens"], 10);
            assert_eq!(v["choices"][0]["finish_reason"], "length");
        } else {
            let data = r.sse();
            assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
            let chunks: Vec<Value> = data[..data.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect();
            let text: String = chunks.iter().map(|c| c["choices"][0]["text"].as_str().unwrap_or("")).collect();
            assert_eq!(text, want[i]);
            assert_eq!(chunks.last().unwrap()["choices"][0]["finish_reason"], "length");
            assert!(chunks.iter().all(|c| c["object"] == "text_completion"));
        }
    }
    // Chat, streamed and not, agree; usage comes last when asked for.
    let chat = |stream: bool| {
        post(
            addr,
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "Name a color."}],
            "max_completion_tokens": 8, "temperature": 0, "stream": stream, "stream_options": {"include_usage": true}}),
        )
    };
    let whole = chat(false).json();
    let content = whole["choices"][0]["message"]["content"].as_str().unwrap().to_string();
    assert_eq!(whole["object"], "chat.completion");
    let data = chat(true).sse();
    let chunks: Vec<Value> = data[..data.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String = chunks.iter().filter_map(|c| c["choices"].get(0)?["delta"]["content"].as_str()).collect();
    assert_eq!(text, content);
    let usage = &chunks.last().unwrap()["usage"];
    assert_eq!(usage, &whole["usage"]);
    assert_eq!(chunks.last().unwrap()["choices"], json!([]));
    // Metrics saw all of it. A stream's last event can reach the client before the engine thread
    // has retired the request from its running batch, so the gauges are polled until they settle
    // (at most 10 s; they never settled to other values in any run).
    let want = [
        "lserve_num_requests_running 0",
        "lserve_num_requests_waiting 0",
        "lserve_kv_cache_usage_percent 0",
        "lserve_time_to_first_token_seconds_count 18",
        "lserve_inter_token_latency_seconds_bucket",
        "lserve_generation_tokens_total 176",
        "lserve_request_success_total{finished_reason=\"length\"} 18",
    ];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let m = loop {
        let m = raw(addr, "GET", "/metrics", &[], b"").body;
        if want.iter().all(|w| m.contains(w)) || std::time::Instant::now() > deadline {
            break m;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    for name in want {
        assert!(m.contains(name), "{name} missing in\n{m}");
    }
    assert_eq!(raw(addr, "GET", "/health", &[], b"").status, 200);
}

/// Long (about 85 lines): one server, a table of bad requests each with its expected error, then
/// a good request to show nothing was hurt.
#[test]
fn bad_input_gets_openai_errors_and_hurts_nobody() {
    let srv = start(64, 4, 16, None);
    let addr = srv.addr;
    // A healthy request runs alongside all the bad ones.
    let good = std::thread::spawn(move || completion(addr, PROMPTS[0], true));
    let long_prompt = "word ".repeat(2000);
    let cases: Vec<(&str, Vec<u8>, u16, Option<&str>)> = vec![
        ("/v1/completions", b"{\"prompt\": ".to_vec(), 400, None),
        ("/v1/completions", b"[1, 2]".to_vec(), 400, None),
        ("/v1/completions", b"{\"prompt\": \"\xff\xfe\"}".to_vec(), 400, None),
        ("/v1/completions", json!({"model": "gpt-9", "prompt": "x"}).to_string().into_bytes(), 404, Some("model")),
        ("/v1/completions", json!({"prompt": "x", "max_tokens": -1}).to_string().into_bytes(), 400, Some("max_tokens")),
        (
            "/v1/completions",
            json!({"prompt": "x", "max_tokens": 1u64 << 40}).to_string().into_bytes(),
            400,
            Some("max_tokens"),
        ),
        (
            "/v1/completions",
            json!({"prompt": long_prompt, "max_tokens": 4}).to_string().into_bytes(),
            400,
            Some("prompt"),
        ),
        ("/v1/completions", json!({"prompt": "x", "n": 3}).to_string().into_bytes(), 400, Some("n")),
        ("/v1/completions", json!({"prompt": "x", "logprobs": 5}).to_string().into_bytes(), 400, Some("logprobs")),
        ("/v1/completions", json!({"prompt": [1, 2, 999999]}).to_string().into_bytes(), 400, Some("prompt")),
        (
            "/v1/completions",
            json!({"prompt": "x", "temperature": -2}).to_string().into_bytes(),
            400,
            Some("temperature"),
        ),
        ("/v1/chat/completions", json!({"messages": []}).to_string().into_bytes(), 400, Some("messages")),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "wizard", "content": "x"}]}).to_string().into_bytes(),
            400,
            Some("messages[0]"),
        ),
        ("/v1/chat/completions", json!({"messages": "hi"}).to_string().into_bytes(), 400, Some("messages")),
        ("/v1/completions", vec![b' '; 100 << 10], 413, None),
        ("/v1/nothing", b"{}".to_vec(), 404, None),
        // OpenAI's documented ranges, and wrong types, name the field.
        (
            "/v1/completions",
            json!({"prompt": "x", "temperature": 1e9}).to_string().into_bytes(),
            400,
            Some("temperature"),
        ),
        ("/v1/completions", json!({"prompt": "x", "top_p": 1.5}).to_string().into_bytes(), 400, Some("top_p")),
        ("/v1/completions", json!({"prompt": "x", "top_k": 1u64 << 40}).to_string().into_bytes(), 400, Some("top_k")),
        (
            "/v1/completions",
            json!({"prompt": "x", "temperature": "hot"}).to_string().into_bytes(),
            400,
            Some("temperature"),
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": "many"}).to_string().into_bytes(),
            400,
            Some("max_tokens"),
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "word ".repeat(10_000)}]}).to_string().into_bytes(),
            400,
            Some("messages"),
        ),
    ];
    for (path, body, status, param) in cases {
        let r = raw(addr, "POST", path, &[("Content-Type", "application/json")], &body);
        assert_eq!(r.status, status, "{path} {}: {}", String::from_utf8_lossy(&body[..body.len().min(60)]), r.body);
        let e = r.json();
        assert!(e["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{e}");
        if status != 404 || param.is_some() {
            assert!(e["error"]["type"].is_string(), "{e}");
        }
        assert_eq!(e["error"]["param"].as_str(), param, "{e}");
    }
    let r = good.join().unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.sse().last().map(String::as_str), Some("[DONE]"));
}

#[test]
fn a_full_queue_answers_429_and_the_api_key_is_enforced() {
    let srv = start(64, 1, 2, Some("sekret"));
    let addr = srv.addr;
    let body = json!({"prompt": "Count to ten:", "max_tokens": 24, "temperature": 0}).to_string();
    let r = raw(addr, "POST", "/v1/completions", &[], body.as_bytes());
    assert_eq!((r.status, r.json()["error"]["code"].as_str()), (401, Some("invalid_api_key")));
    let r = raw(addr, "GET", "/v1/models", &[("Authorization", "Bearer wrong")], b"");
    assert_eq!(r.status, 401);
    let r = raw(addr, "GET", "/v1/models", &[("Authorization", "Bearer sekret")], b"");
    assert_eq!(r.json()["data"][0]["id"], "smollm2-135m");
    assert_eq!(raw(addr, "GET", "/health", &[], b"").status, 200, "health needs no key");
    let handles: Vec<_> = (0..6)
        .map(|_| {
            let b = body.clone();
            std::thread::spawn(move || {
                raw(addr, "POST", "/v1/completions", &[("Authorization", "Bearer sekret")], b.as_bytes())
            })
        })
        .collect();
    let statuses: Vec<u16> = handles.into_iter().map(|h| h.join().unwrap().status).collect();
    assert!(statuses.iter().all(|&s| s == 200 || s == 429), "{statuses:?}");
    assert!(statuses.iter().filter(|&&s| s == 200).count() >= 2, "{statuses:?}");
    assert!(statuses.contains(&429), "{statuses:?}");
}

#[test]
fn a_client_leaving_mid_stream_is_cancelled_and_its_pages_freed() {
    let srv = start(64, 4, 16, None);
    let addr = srv.addr;
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let body = json!({"prompt": "Once upon a time, a dragon", "max_tokens": 400, "temperature": 0, "stream": true,
                      "ignore_eos": true})
    .to_string();
    let req = format!("POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n{body}", body.len());
    s.write_all(req.as_bytes()).unwrap();
    let mut buf = [0u8; 2048];
    let mut got = String::new();
    while got.matches("data: ").count() < 3 {
        let n = s.read(&mut buf).expect("stream chunks arrive");
        assert!(n > 0, "stream ended early: {got}");
        got.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    drop(s);
    let metric = |name: &str| -> f64 {
        let m = raw(addr, "GET", "/metrics", &[], b"").body;
        m.lines().find_map(|l| l.strip_prefix(&format!("{name} "))).unwrap().parse().unwrap()
    };
    let t = Instant::now();
    while metric("lserve_requests_cancelled_total") < 1.0 {
        assert!(t.elapsed() < Duration::from_secs(60), "not cancelled");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(metric("lserve_kv_cache_pages_used"), 0.0);
    assert!(metric("lserve_generation_tokens_total") < 400.0);
    // The server carries on.
    assert_eq!(completion(addr, PROMPTS[4], false).status, 200);
}

#[test]
fn many_clients_under_page_pressure_all_finish_with_the_sequential_answers() {
    // 20 pages of 16 tokens for 16 running sequences that each grow to ~35 tokens: the scheduler
    // has to preempt (swap) and resume, and every request still gets its sequential answer.
    let srv = start(20, 16, 256, None);
    let addr = srv.addr;
    let prompts: Vec<String> = (0..32).map(|i| format!("Fact {i}: the number {} is", i * 13 + 1)).collect();
    let ask = move |p: &str| {
        let r = post(
            addr,
            "/v1/completions",
            &json!({"prompt": p, "max_tokens": 24, "temperature": 0, "ignore_eos": true}),
        );
        assert_eq!(r.status, 200, "{}", r.body);
        r.json()["choices"][0]["text"].as_str().unwrap().to_string()
    };
    let want: Vec<String> = prompts.iter().map(|p| ask(p)).collect();
    let handles: Vec<_> = prompts.iter().cloned().map(|p| std::thread::spawn(move || ask(&p))).collect();
    let got: Vec<String> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(got, want);
    // A finished request's pages are freed by the engine thread after its last chunk is sent:
    // poll the gauge (bounded) instead of reading it once.
    let t = Instant::now();
    let mut m = raw(addr, "GET", "/metrics", &[], b"").body;
    while !m.contains("lserve_kv_cache_pages_used 0\n") && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
        m = raw(addr, "GET", "/metrics", &[], b"").body;
    }
    let swaps: f64 =
        m.lines().find_map(|l| l.strip_prefix("lserve_preemptions_total{mode=\"swap\"} ")).unwrap().parse().unwrap();
    assert!(swaps > 0.0, "no preemption happened:\n{m}");
    assert!(m.contains("lserve_kv_cache_pages_used 0\n"), "pages still held:\n{m}");
    assert!(m.contains("lserve_request_success_total{finished_reason=\"length\"} 64"), "{m}");
}

#[test]
fn every_error_has_a_json_body_and_connections_are_limited() {
    let srv = start_with(64, 2, 8, None, |o| {
        o.max_connections = 2;
        o.header_timeout = Duration::from_secs(2);
    });
    let addr = srv.addr;
    // 405 from the router itself carries a JSON body and the Allow header.
    let r = raw(addr, "DELETE", "/v1/completions", &[], b"");
    assert_eq!(r.status, 405);
    assert_eq!(r.json()["error"]["code"], "method_not_allowed", "{}", r.body);
    // Two idle connections take both slots: a third client waits...
    let idle: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    let waiting = std::thread::spawn(move || raw(addr, "GET", "/health", &[], b""));
    std::thread::sleep(Duration::from_millis(800));
    assert!(!waiting.is_finished(), "served past the connection limit");
    // ...until the header timeout (2 s) drops the idle ones and frees their slots.
    let r = waiting.join().unwrap();
    assert_eq!(r.status, 200);
    let waited = t0.elapsed();
    assert!(waited >= Duration::from_millis(1000) && waited < Duration::from_secs(10), "{waited:?}");
    for mut c in idle {
        let mut buf = [0u8; 64];
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        // Closed by the server: EOF (or a reset), not a timeout.
        let r = c.read(&mut buf);
        assert!(matches!(r, Ok(0)) || r.as_ref().is_err_and(|e| e.kind() != std::io::ErrorKind::WouldBlock), "{r:?}");
    }
}
