//! Routes and handlers: /v1/completions, /v1/chat/completions (JSON or SSE), /v1/models,
//! /health, /metrics; the Bearer-key check on /v1/*.
//!
//! A generation request goes: body bytes -> JSON (400 if malformed or not UTF-8) -> model name
//! (404) -> unsupported fields (400) -> prompt tokens (chat template for chat) -> length checks
//! against the context and the KV pool (400) -> in-flight budget (429) -> the engine (503 if it is
//! gone) -> events -> one JSON response, or SSE chunks ending with `data: [DONE]`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as Sse, KeepAlive};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::stream::{self, Stream, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use tokio::sync::oneshot;

use super::api::{ChatRequest, CompletionRequest, Prompt, Validated, parse_body, single_prompt};
use super::error::ApiError;
use super::{AppState, Command, InflightGuard};
use crate::engine::FinishReason;
use crate::serving::{Event, ServeRequest};

pub fn router(state: Arc<AppState>) -> Router {
    // route_layer: the last added runs first, so the key is checked before the body is read.
    let v1 = Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/models", get(models))
        .route_layer(middleware::from_fn_with_state(state.clone(), read_body))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth));
    Router::new()
        .merge(v1)
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(state.opts.max_body_bytes))
        .layer(middleware::map_response(json_errors))
        .with_state(state)
}

/// Read the whole body within `body_timeout` and `max_body_bytes` (408 / 413 otherwise), so a
/// slow or endless body cannot hold a handler; the handler then gets the buffered bytes.
async fn read_body(State(s): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let limit = s.opts.max_body_bytes;
    let too_large = || {
        ApiError::invalid(format!("the request body is larger than {limit} bytes"), None)
            .with_status(StatusCode::PAYLOAD_TOO_LARGE)
            .with_code("body_too_large")
    };
    let declared = req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return too_large().into_response();
    }
    let (parts, body) = req.into_parts();
    let read = async {
        let mut stream = body.into_data_stream();
        let mut buf = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| ApiError::invalid(format!("reading the request body: {e}"), None))?;
            if buf.len() + chunk.len() > limit {
                return Err(too_large());
            }
            buf.extend_from_slice(&chunk);
        }
        Ok(buf)
    };
    match tokio::time::timeout(s.opts.body_timeout, read).await {
        Err(_) => ApiError::invalid(
            format!("the request body did not arrive within {} s", s.opts.body_timeout.as_secs_f64()),
            None,
        )
        .with_status(StatusCode::REQUEST_TIMEOUT)
        .with_code("body_timeout")
        .into_response(),
        Ok(Err(e)) => e.into_response(),
        Ok(Ok(buf)) => next.run(Request::from_parts(parts, axum::body::Body::from(buf))).await,
    }
}

/// Every error status leaves with an OpenAI-style JSON body, also those axum produces itself
/// (405 with its `Allow` header, extractor rejections): a non-JSON error body becomes the
/// message of one.
async fn json_errors(res: Response) -> Response {
    let status = res.status();
    let is_json = res
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return res;
    }
    let (mut parts, body) = res.into_parts();
    let text = axum::body::to_bytes(body, 4096).await.ok().map(|b| String::from_utf8_lossy(&b).trim().to_string());
    let reason = status.canonical_reason().unwrap_or("error");
    let message = text.filter(|t| !t.is_empty()).unwrap_or_else(|| reason.to_string());
    let mut e = ApiError::invalid(message, None).with_status(status);
    if status.is_server_error() {
        e.kind = "server_error";
    }
    if status == StatusCode::METHOD_NOT_ALLOWED {
        e = e.with_code("method_not_allowed");
    }
    let mut out = e.into_response();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.remove(header::CONTENT_TYPE);
    out.headers_mut().extend(parts.headers);
    out
}

async fn auth(State(s): State<Arc<AppState>>, headers: HeaderMap, req: Request, next: Next) -> Response {
    if let Some(key) = &s.opts.api_key {
        let given =
            headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
        if given.map(str::trim) != Some(key.as_str()) {
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(req).await
}

async fn not_found() -> ApiError {
    ApiError::invalid("Not found", None).with_status(StatusCode::NOT_FOUND).with_code("not_found")
}

async fn health(State(s): State<Arc<AppState>>) -> Response {
    if s.engine.is_closed() {
        return ApiError::unavailable("the engine has stopped").into_response();
    }
    (StatusCode::OK, "ok").into_response()
}

async fn metrics(State(s): State<Arc<AppState>>) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], s.metrics.render()).into_response()
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

async fn models(State(s): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({"object": "list", "data": [{
        "id": s.model.name, "object": "model", "created": now_secs(), "owned_by": "lserve",
        "max_model_len": s.model.max_request_tokens,
    }]}))
}

fn parse<T: serde::de::DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
    fillers: &[(&str, Value)],
) -> Result<T, ApiError> {
    let bytes = body.map_err(|r| ApiError::invalid(r.body_text(), None).with_status(r.status()))?;
    parse_body(&bytes, fillers)
}

fn check_model(s: &AppState, model: &Option<String>) -> Result<(), ApiError> {
    match model {
        Some(m) if m != &s.model.name => Err(ApiError::model_not_found(m)),
        _ => Ok(()),
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Completion,
    Chat,
}

/// What a response needs besides the events.
struct Ctx {
    kind: Kind,
    id: String,
    created: u64,
    model: String,
    prompt_tokens: usize,
    include_usage: bool,
}

impl Ctx {
    fn object(&self, chunk: bool) -> &'static str {
        match (self.kind, chunk) {
            (Kind::Completion, _) => "text_completion",
            (Kind::Chat, false) => "chat.completion",
            (Kind::Chat, true) => "chat.completion.chunk",
        }
    }
    fn usage(&self, completion: usize) -> Value {
        json!({"prompt_tokens": self.prompt_tokens, "completion_tokens": completion,
               "total_tokens": self.prompt_tokens + completion})
    }
    fn choice(&self, text: Option<&str>, finish: Option<&str>, role: bool) -> Value {
        match self.kind {
            Kind::Completion => {
                json!({"index": 0, "text": text.unwrap_or(""), "logprobs": null, "finish_reason": finish})
            }
            Kind::Chat => {
                let mut delta = serde_json::Map::new();
                if role {
                    delta.insert("role".into(), json!("assistant"));
                }
                if let Some(t) = text {
                    delta.insert("content".into(), json!(t));
                }
                json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish})
            }
        }
    }
    fn chunk(&self, choices: Vec<Value>, usage: Option<Value>) -> Value {
        let mut v = json!({"id": self.id, "object": self.object(true), "created": self.created, "model": self.model,
                           "choices": choices});
        if self.include_usage {
            v["usage"] = usage.unwrap_or(Value::Null);
        }
        v
    }
}

fn finish_str(f: &FinishReason) -> &'static str {
    match f {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
    }
}

async fn completions(State(s): State<Arc<AppState>>, body: Result<Bytes, BytesRejection>) -> Response {
    match completions_inner(s, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn completions_inner(s: Arc<AppState>, body: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let req: CompletionRequest = parse(body, &[("prompt", json!(""))])?;
    check_model(&s, &req.common.model)?;
    req.check_unsupported()?;
    let id = s.next_id();
    let v = req.common.validate(req.common.max_tokens, s.fresh_seed(id), s.model.tokenizer.vocab_size())?;
    let prompt = match single_prompt(req.prompt)? {
        Prompt::Text(t) => {
            if t.len() > s.model.tokenizer.byte_bound(s.model.max_request_tokens) {
                return Err(too_long(&s, "prompt"));
            }
            s.model.tokenizer.encode(&t).map_err(|e| ApiError::invalid(e.0, Some("prompt")))?
        }
        Prompt::Ids(ids) => ids,
    };
    generate(s, id, prompt, v, Kind::Completion).await
}

async fn chat(State(s): State<Arc<AppState>>, body: Result<Bytes, BytesRejection>) -> Response {
    match chat_inner(s, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn chat_inner(s: Arc<AppState>, body: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let req: ChatRequest = parse(body, &[("messages", json!([]))])?;
    check_model(&s, &req.common.model)?;
    req.check_unsupported()?;
    let id = s.next_id();
    let max_tokens = req.max_completion_tokens.or(req.common.max_tokens);
    let v = req.common.validate(max_tokens, s.fresh_seed(id), s.model.tokenizer.vocab_size())?;
    let msgs = req.messages()?;
    let limit = s.model.tokenizer.byte_bound(s.model.max_request_tokens);
    let text = s
        .model
        .template
        .render_bounded(&msgs, req.add_generation_prompt.unwrap_or(true), limit)
        .map_err(|e| ApiError::invalid(e.0, Some("messages")))?
        .ok_or_else(|| too_long(&s, "messages"))?;
    let prompt = s.model.tokenizer.encode(&text).map_err(|e| ApiError::invalid(e.0, Some("messages")))?;
    generate(s, id, prompt, v, Kind::Chat).await
}

/// A prompt refused by its size in bytes, before the tokenizer (or the template) went through it.
fn too_long(s: &AppState, param: &str) -> ApiError {
    let limit = s.model.max_request_tokens;
    ApiError::invalid(
        format!("This model's maximum context length is {limit} tokens. However, your prompt is far longer."),
        Some(param),
    )
    .with_code("context_length_exceeded")
}

/// Check lengths, take an in-flight unit, hand the request to the engine, answer.
async fn generate(s: Arc<AppState>, id: u64, prompt: Vec<u32>, v: Validated, kind: Kind) -> Result<Response, ApiError> {
    let param = if kind == Kind::Chat { "messages" } else { "prompt" };
    let (p, limit) = (prompt.len(), s.model.max_request_tokens);
    if p == 0 {
        return Err(ApiError::invalid("the prompt is empty", Some(param)));
    }
    if p >= limit {
        let msg =
            format!("This model's maximum context length is {limit} tokens. However, your prompt has {p} tokens.");
        return Err(ApiError::invalid(msg, Some(param)).with_code("context_length_exceeded"));
    }
    let max_tokens = v.max_tokens.unwrap_or(limit - p);
    if max_tokens > limit - p {
        let msg = format!(
            "This model's maximum context length is {limit} tokens. However, you requested {} tokens ({p} in the \
             prompt, {max_tokens} for the completion). Please reduce the prompt or max_tokens.",
            p.saturating_add(max_tokens)
        );
        return Err(ApiError::invalid(msg, Some("max_tokens")).with_code("context_length_exceeded"));
    }
    let Some(guard) = InflightGuard::try_new(&s) else {
        s.metrics.rejected();
        return Err(ApiError::overloaded(format!(
            "the server is at its limit of {} requests in flight; retry later",
            s.opts.max_inflight
        )));
    };
    let mut stop_ids = if v.ignore_eos { vec![] } else { s.model.stop_ids.clone() };
    stop_ids.extend(&v.stop_token_ids);
    let req = ServeRequest { prompt, max_tokens, sampling: v.sampling.clone(), stop: v.stop.clone(), stop_ids };
    let (tx, rx) = unbounded_channel();
    let (rtx, rrx) = oneshot::channel();
    let gone = || ApiError::unavailable("the engine has stopped");
    s.engine.send(Command::Add { id, req, events: tx, reply: rtx }).map_err(|_| gone())?;
    rrx.await.map_err(|_| gone())?.map_err(|e| ApiError::invalid(e, Some(param)))?;
    let prefix = if kind == Kind::Chat { "chatcmpl" } else { "cmpl" };
    let ctx = Ctx {
        kind,
        id: format!("{prefix}-{:08x}{id:x}", v.sampling.seed as u32),
        created: now_secs(),
        model: s.model.name.clone(),
        prompt_tokens: p,
        include_usage: v.include_usage,
    };
    let timer = Timer { start: Instant::now(), last: None, state: s.clone() };
    if v.stream {
        let sse = axum::response::Sse::new(event_stream(rx, ctx, timer, guard)).keep_alive(KeepAlive::default());
        Ok(sse.into_response())
    } else {
        let r = collect(rx, &ctx, timer).await;
        drop(guard);
        r.map(|v| Json(v).into_response())
    }
}

/// Time to first token and inter-token latency, observed as tokens reach the client.
struct Timer {
    start: Instant,
    last: Option<Instant>,
    state: Arc<AppState>,
}

impl Timer {
    fn tokens(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        let now = Instant::now();
        match self.last {
            None => {
                self.state.metrics.ttft((now - self.start).as_secs_f64());
                if n > 1 {
                    self.state.metrics.itl(0.0, n - 1);
                }
            }
            Some(t) => self.state.metrics.itl((now - t).as_secs_f64(), n),
        }
        self.last = Some(now);
    }
    fn done(&self, finish: &FinishReason) {
        self.state.metrics.finished(self.start.elapsed().as_secs_f64(), *finish == FinishReason::Stop);
    }
}

async fn collect(mut rx: UnboundedReceiver<Event>, ctx: &Ctx, mut timer: Timer) -> Result<Value, ApiError> {
    let mut text = String::new();
    loop {
        match rx.recv().await {
            Some(Event::Delta { text: t, tokens }) => {
                timer.tokens(tokens.len());
                text.push_str(&t);
            }
            Some(Event::Done { finish, completion_tokens, .. }) => {
                timer.done(&finish);
                let f = finish_str(&finish);
                let choice = match ctx.kind {
                    Kind::Completion => json!({"index": 0, "text": text, "logprobs": null, "finish_reason": f}),
                    Kind::Chat => json!({"index": 0, "message": {"role": "assistant", "content": text},
                                         "logprobs": null, "finish_reason": f}),
                };
                return Ok(json!({"id": ctx.id, "object": ctx.object(false), "created": ctx.created,
                                 "model": ctx.model, "choices": [choice], "usage": ctx.usage(completion_tokens)}));
            }
            Some(Event::Error(e)) => {
                timer.state.metrics.failed();
                return Err(ApiError::internal(e));
            }
            None => {
                timer.state.metrics.failed();
                return Err(ApiError::unavailable("the engine stopped before the request finished"));
            }
        }
    }
}

struct StreamState {
    rx: UnboundedReceiver<Event>,
    ctx: Ctx,
    timer: Timer,
    /// Chat: the first chunk carries the role.
    first: bool,
    done: bool,
    _guard: InflightGuard,
}

fn data(v: &Value) -> Result<Sse, Infallible> {
    Ok(Sse::default().data(v.to_string()))
}

/// SSE chunks in the OpenAI format; dropping the stream (client gone) drops the receiver, which
/// cancels the request.
fn event_stream(
    rx: UnboundedReceiver<Event>,
    ctx: Ctx,
    timer: Timer,
    guard: InflightGuard,
) -> impl Stream<Item = Result<Sse, Infallible>> {
    let st = StreamState { rx, ctx, timer, first: true, done: false, _guard: guard };
    stream::unfold(st, |mut st| async move {
        if st.done {
            return None;
        }
        let out = next_chunks(&mut st).await;
        Some((stream::iter(out), st))
    })
    .flatten()
}

async fn next_chunks(st: &mut StreamState) -> Vec<Result<Sse, Infallible>> {
    let ctx = &st.ctx;
    let mut out = Vec::new();
    if st.first && ctx.kind == Kind::Chat {
        out.push(data(&ctx.chunk(vec![ctx.choice(Some(""), None, true)], None)));
    }
    st.first = false;
    match st.rx.recv().await {
        Some(Event::Delta { text, tokens }) => {
            st.timer.tokens(tokens.len());
            if !text.is_empty() {
                out.push(data(&ctx.chunk(vec![ctx.choice(Some(&text), None, false)], None)));
            }
        }
        Some(Event::Done { finish, completion_tokens, .. }) => {
            st.timer.done(&finish);
            let text = if ctx.kind == Kind::Completion { Some("") } else { None };
            out.push(data(&ctx.chunk(vec![ctx.choice(text, Some(finish_str(&finish)), false)], None)));
            if ctx.include_usage {
                out.push(data(&ctx.chunk(vec![], Some(ctx.usage(completion_tokens)))));
            }
            out.push(Ok(Sse::default().data("[DONE]")));
            st.done = true;
        }
        Some(Event::Error(e)) => {
            st.timer.state.metrics.failed();
            out.push(data(&ApiError::internal(e).body()));
            out.push(Ok(Sse::default().data("[DONE]")));
            st.done = true;
        }
        None => {
            st.timer.state.metrics.failed();
            out.push(data(&ApiError::unavailable("the engine stopped before the request finished").body()));
            out.push(Ok(Sse::default().data("[DONE]")));
            st.done = true;
        }
    }
    out
}
