//! The HTTP request path: OpenAI JSON bodies through `parse_body` and validation, and raw
//! HTTP/1.1 bytes through hyper and the router over an in-memory connection (a stand-in engine
//! thread answers every accepted request with one token).

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use lserve::chat::ChatTemplate;
use lserve::engine::FinishReason;
use lserve::server::api::{ChatRequest, CompletionRequest, parse_body, single_prompt};
use lserve::server::{AppState, Command, Metrics, ModelInfo, ServerOptions};
use lserve::serving::Event;
use lserve::tokenizer::{GgufVocab, TextTokenizer};
use proptest::prelude::*;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::config;

fn tokenizer() -> TextTokenizer {
    let (tokens, merges) = super::files_vocab();
    let mut types = vec![1; tokens.len()];
    types[..3].fill(3);
    let v = GgufVocab {
        model: "gpt2".into(),
        tokens,
        token_types: types,
        merges,
        bos: Some(0),
        eos: Some(2),
        ..Default::default()
    };
    TextTokenizer::from_gguf(&v).unwrap()
}

// ---------------------------------------------------------------------------------------------
// JSON bodies.

const FIELDS: &[&str] = &[
    "model",
    "prompt",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "n",
    "stream",
    "stream_options",
    "stop",
    "stop_token_ids",
    "ignore_eos",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "logit_bias",
    "logprobs",
    "best_of",
    "echo",
    "suffix",
    "tools",
    "response_format",
    "top_logprobs",
    "add_generation_prompt",
];

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        prop_oneof![Just(0i64), Just(1), Just(-1), Just(i64::MAX), Just(i64::MIN), any::<i64>()].prop_map(Value::from),
        prop_oneof![
            Just(1e9f64),
            Just(2.0),
            Just(1e-9),
            Just(-0.5),
            Just(1e308),
            any::<f64>().prop_filter("finite", |x| x.is_finite())
        ]
        .prop_map(Value::from),
        "[a-z <>|\u{e9}]{0,10}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            proptest::collection::vec(("[a-z]{1,8}", inner), 0..3)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            Just(json!([{"role": "user", "content": "hi"}])),
            Just(json!([{"role": "user", "content": [{"type": "image_url"}]}])),
        ]
    })
}

fn body() -> impl Strategy<Value = Value> {
    proptest::collection::vec((proptest::sample::select(FIELDS), json_value()), 0..6).prop_map(|kv| {
        let mut o = serde_json::Map::new();
        o.insert("prompt".into(), json!("hello"));
        o.insert("messages".into(), json!([{"role": "user", "content": "hello"}]));
        for (k, v) in kv {
            o.insert(k.to_string(), v);
        }
        Value::Object(o)
    })
}

proptest! {
    #![proptest_config(config(3000))]

    /// Every body gets a parsed request or a 4xx error with a message; a refusal names a field
    /// whenever the fault is in one.
    #[test]
    fn request_bodies_validate_or_name_the_problem(b in body()) {
        let bytes = b.to_string().into_bytes();
        let check = |e: lserve::server::error::ApiError| {
            assert!(e.status.is_client_error() && !e.message.is_empty(), "{e:?}");
        };
        match parse_body::<CompletionRequest>(&bytes, &[("prompt", json!(""))]) {
            Err(e) => check(e),
            Ok(r) => {
                if let Err(e) = r.check_unsupported() { check(e) }
                match r.common.validate(r.common.max_tokens, 1, 300) {
                    Err(e) => {
                        prop_assert!(e.param.is_some(), "{}", e.message);
                        check(e);
                    }
                    Ok(v) => {
                        let s = v.sampling;
                        prop_assert!((0.0..=2.0).contains(&s.temperature) && s.top_p > 0.0 && s.top_p <= 1.0 && s.top_k <= 300);
                        prop_assert!(v.stop.len() <= 4 && v.max_tokens != Some(0));
                    }
                }
                if let Err(e) = single_prompt(r.prompt) { check(e) }
            }
        }
        match parse_body::<ChatRequest>(&bytes, &[("messages", json!([]))]) {
            Err(e) => check(e),
            Ok(r) => {
                if let Err(e) = r.check_unsupported() { check(e) }
                if let Err(e) = r.messages() { check(e) }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Raw HTTP over an in-memory connection.

/// The router with a stand-in engine: every request gets one token "hello" and finishes.
fn app() -> axum::Router {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Command>();
    std::thread::spawn(move || {
        while let Some(Command::Add { events, reply, .. }) = rx.blocking_recv() {
            let _ = reply.send(Ok(()));
            let _ = events.send(Event::Delta { text: "hello".into(), tokens: vec![3] });
            let _ = events.send(Event::Done { finish: FinishReason::Length, prompt_tokens: 1, completion_tokens: 1 });
        }
    });
    let tok = Arc::new(tokenizer());
    let template = ChatTemplate::new(lserve::chat::CHATML_TEMPLATE, None, None).unwrap();
    let info = ModelInfo { name: "tiny".into(), tokenizer: tok, template, stop_ids: vec![2], max_request_tokens: 64 };
    let mut opts = ServerOptions::new("127.0.0.1:0".parse().unwrap(), Some("k".into()), 8);
    opts.max_body_bytes = 4096;
    opts.body_timeout = Duration::from_millis(500);
    lserve::server::app(AppState::new(tx, info, Arc::new(Metrics::default()), opts))
}

static RT: LazyLock<tokio::runtime::Runtime> =
    LazyLock::new(|| tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap());
static APP: LazyLock<axum::Router> = LazyLock::new(app);

/// Send `req` on a fresh in-memory connection, close the write side, read what comes back.
fn exchange(req: Vec<u8>) -> Vec<u8> {
    let app = APP.clone();
    RT.block_on(async move {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let conn = lserve::server::connection(server, app, Duration::from_millis(500));
        let serve = tokio::spawn(conn);
        let _ = client.write_all(&req).await;
        let _ = client.shutdown().await;
        let mut out = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut out)).await;
        assert!(read.is_ok(), "no answer within 10 s to {:?}", String::from_utf8_lossy(&req));
        let joined = serve.await;
        assert!(!matches!(&joined, Err(e) if e.is_panic()), "the connection task panicked");
        out
    })
}

/// Each response on the connection: status, whether it had a JSON content type, and its body.
fn responses(raw: &[u8]) -> Vec<(u16, bool, Vec<u8>)> {
    let mut out = Vec::new();
    let mut rest = raw;
    while let Some(end) = rest.windows(4).position(|w| w == b"\r\n\r\n") {
        let head = String::from_utf8_lossy(&rest[..end]).to_ascii_lowercase();
        let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let json = head.contains("content-type: application/json");
        let len: Option<usize> =
            head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse().ok());
        let body_start = end + 4;
        let (body, next) = match len {
            Some(n) if body_start + n <= rest.len() => (rest[body_start..body_start + n].to_vec(), body_start + n),
            _ => (rest[body_start..].to_vec(), rest.len()),
        };
        out.push((status, json, body));
        rest = &rest[next..];
    }
    out
}

fn request_line() -> impl Strategy<Value = String> {
    let method = prop_oneof![
        proptest::sample::select(&["POST", "GET", "PUT", "DELETE", "OPTIONS", "PO ST"][..]).prop_map(String::from),
        "[A-Z]{1,8}",
    ];
    let path = prop_oneof![
        Just("/v1/completions".to_string()),
        Just("/v1/chat/completions".to_string()),
        Just("/v1/models".to_string()),
        Just("/health".to_string()),
        Just("/metrics".to_string()),
        "/[a-z0-9/%?&=.]{0,20}",
    ];
    let version = prop_oneof![Just("HTTP/1.1"), Just("HTTP/1.0"), Just("HTTP/2"), Just("HTTP/9.9")];
    (method, path, version).prop_map(|(m, p, v)| format!("{m} {p} {v}"))
}

fn headers() -> impl Strategy<Value = Vec<String>> {
    let h = prop_oneof![
        Just("Authorization: Bearer k".to_string()),
        Just("Authorization: Bearer wrong".to_string()),
        Just("Content-Type: application/json".to_string()),
        Just("Content-Type: text/plain".to_string()),
        Just("Transfer-Encoding: chunked".to_string()),
        Just("Transfer-Encoding: gzip, chunked".to_string()),
        Just("Content-Length: 99999999999999999999".to_string()),
        Just("Content-Length: -1".to_string()),
        Just("Expect: 100-continue".to_string()),
        Just("Connection: close".to_string()),
        Just("Host: x".to_string()),
        "[A-Za-z-]{1,12}: [ -~]{0,20}",
        "[ -~]{0,30}",
    ];
    proptest::collection::vec(h, 0..6)
}

fn http_body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(br#"{"prompt": "hello", "max_tokens": 1}"#.to_vec()),
        Just(br#"{"messages": [{"role": "user", "content": "hi"}], "stream": true}"#.to_vec()),
        Just(b"5\r\n{\"pro\r\n0\r\n\r\n".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..200),
        Just(vec![b'{'; 5000]),
    ]
}

fn raw_request() -> impl Strategy<Value = Vec<u8>> {
    (
        request_line(),
        headers(),
        http_body(),
        any::<bool>(),
        proptest::collection::vec((any::<usize>(), any::<u8>()), 0..3),
    )
        .prop_map(|(line, hs, body, with_len, flips)| {
            let mut r = format!("{line}\r\nHost: t\r\n");
            for h in hs {
                r.push_str(&h);
                r.push_str("\r\n");
            }
            if with_len {
                r.push_str(&format!("Content-Length: {}\r\n", body.len()));
            }
            r.push_str("\r\n");
            let mut b = r.into_bytes();
            b.extend(body);
            let n = b.len();
            for (p, x) in flips {
                b[p % n] ^= x | 1;
            }
            b
        })
}

proptest! {
    #![proptest_config(config(600))]

    /// Whatever arrives, the connection answers (or closes) without a panic, and every error
    /// response lserve produces carries an OpenAI JSON error body. Responses hyper writes itself
    /// for unparsable HTTP (before any routing) have no body; they are allowed only as 400, 414,
    /// 431, 501 or 505 with nothing after the head.
    #[test]
    fn raw_http_never_panics_and_errors_are_json(req in raw_request()) {
        let raw = exchange(req);
        for (status, json, body) in responses(&raw) {
            if status >= 400 {
                if json {
                    let v: Value = serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{status} body not JSON ({e})"));
                    prop_assert!(v["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
                } else {
                    prop_assert!([400, 414, 431, 501, 505].contains(&status) && body.is_empty(),
                        "{status} without a JSON body: {:?}", String::from_utf8_lossy(&body));
                }
            }
        }
    }
}

#[test]
fn method_not_allowed_and_timeouts_answer_json() {
    let r = responses(&exchange(b"PUT /v1/models HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer k\r\n\r\n".to_vec()));
    assert_eq!(r[0].0, 405);
    assert!(r[0].1, "405 has a JSON body");
    let v: Value = serde_json::from_slice(&r[0].2).unwrap();
    assert_eq!(v["error"]["code"], "method_not_allowed");
    // A body that never finishes: 408 within the body timeout (500 ms here).
    let t0 = std::time::Instant::now();
    let app = APP.clone();
    let out = RT.block_on(async {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        tokio::spawn(lserve::server::connection(server, app, Duration::from_secs(5)));
        let head =
            "POST /v1/completions HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer k\r\nContent-Length: 100\r\n\r\n{\"pro";
        client.write_all(head.as_bytes()).await.unwrap();
        let mut buf = vec![0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(5), client.read(&mut buf)).await.unwrap().unwrap();
        buf.truncate(n);
        buf
    });
    let r = responses(&out);
    assert_eq!(r[0].0, 408, "{}", String::from_utf8_lossy(&out));
    assert!(t0.elapsed() < Duration::from_secs(4));
    // Half a header: the connection is closed after the header timeout (500 ms here).
    let t0 = std::time::Instant::now();
    let app = APP.clone();
    RT.block_on(async {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let conn = tokio::spawn(lserve::server::connection(server, app, Duration::from_millis(500)));
        client.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nX-Half: ").await.unwrap();
        let mut buf = Vec::new();
        let r = tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut buf)).await;
        assert!(r.is_ok(), "the connection stayed open past the header timeout");
        let _ = conn.await;
    });
    assert!(t0.elapsed() < Duration::from_secs(4));
}
