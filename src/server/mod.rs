//! The OpenAI-compatible HTTP server (axum + tokio), docs/serving.md.
//!
//! Threads: the engine runs on its own OS thread ([`engine_loop`]) and owns the backend, the
//! model, the KV cache and the scheduler; the HTTP side runs on a tokio runtime and never touches
//! them. They talk through channels: a request is a [`Command::Add`] on an unbounded mpsc channel
//! (bounded in effect by the in-flight limit checked before sending), its tokens come back on the
//! request's own mpsc channel. Dropping that receiver — a client that disconnects drops its
//! handler or its SSE stream — cancels the request at the engine's next step, which frees its
//! pages.
//!
//! Invariants: no handler panics on input (every failure is an [`ApiError`]); the number of
//! accepted, unfinished requests never exceeds `max_inflight` (more get 429); once the engine
//! thread is gone every request gets 503.

pub mod api;
pub mod error;
pub mod metrics;
mod routes;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio::sync::oneshot;

use crate::backend::Backend;
use crate::chat::ChatTemplate;
use crate::sched::SeqId;
use crate::serving::{EventTx, ServeEngine, ServeRequest};
use crate::tokenizer::TextTokenizer;
pub use metrics::Metrics;

/// A message to the engine thread.
pub enum Command {
    /// Queue a request; the reply says whether the engine accepted it.
    Add { id: SeqId, req: ServeRequest, events: EventTx, reply: oneshot::Sender<Result<(), String>> },
}

/// What the HTTP side knows about the model (read-only, shared by all handlers).
pub struct ModelInfo {
    /// The name clients use in `model`.
    pub name: String,
    pub tokenizer: Arc<TextTokenizer>,
    pub template: ChatTemplate,
    /// The model's end tokens (not used with `ignore_eos`).
    pub stop_ids: Vec<u32>,
    /// Prompt + completion tokens one request may hold (context, and the whole KV pool).
    pub max_request_tokens: usize,
}

#[derive(Clone, Debug)]
pub struct ServerOptions {
    pub addr: SocketAddr,
    pub api_key: Option<String>,
    /// Accepted, unfinished requests at most (running + queued); more are answered 429.
    pub max_inflight: usize,
    /// Largest request body in bytes (413 beyond).
    pub max_body_bytes: usize,
}

pub struct AppState {
    pub engine: UnboundedSender<Command>,
    pub model: ModelInfo,
    pub metrics: Arc<Metrics>,
    pub opts: ServerOptions,
    inflight: AtomicUsize,
    next_id: AtomicU64,
    started: Instant,
}

impl AppState {
    pub fn new(engine: UnboundedSender<Command>, model: ModelInfo, metrics: Arc<Metrics>, opts: ServerOptions) -> Self {
        AppState {
            engine,
            model,
            metrics,
            opts,
            inflight: AtomicUsize::new(0),
            next_id: AtomicU64::new(1),
            started: Instant::now(),
        }
    }

    fn next_id(&self) -> SeqId {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// A seed for requests that give none: different per request and per server start.
    fn fresh_seed(&self, id: SeqId) -> u64 {
        let t = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        t ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ self.started.elapsed().as_nanos() as u64
    }
}

/// Holds one unit of the in-flight budget until dropped (when the response or stream ends).
pub struct InflightGuard(Arc<AppState>);

impl InflightGuard {
    fn try_new(state: &Arc<AppState>) -> Option<Self> {
        let max = state.opts.max_inflight;
        state.inflight.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1)).ok()?;
        Some(InflightGuard(state.clone()))
    }
}

impl Drop for InflightGuard {
    fn drop(&mut self) {
        self.0.inflight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The engine thread's loop: take commands, step while there is work, publish stats. Returns
/// when every command sender is gone and no work is left.
pub fn engine_loop<B: Backend>(mut se: ServeEngine<B>, mut rx: UnboundedReceiver<Command>, metrics: Arc<Metrics>) {
    let mut open = true;
    loop {
        if !se.has_work() {
            if !open {
                return;
            }
            match rx.blocking_recv() {
                Some(c) => handle(&mut se, c),
                None => return,
            }
        }
        loop {
            match rx.try_recv() {
                Ok(c) => handle(&mut se, c),
                Err(tokio::sync::mpsc::error::TryRecvError::Empty) => break,
                Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => {
                    open = false;
                    break;
                }
            }
        }
        if se.has_work()
            && let Err(e) = se.step()
        {
            tracing::error!("engine step: {e}");
        }
        metrics.set_stats(se.stats.clone());
    }
}

fn handle<B: Backend>(se: &mut ServeEngine<B>, c: Command) {
    match c {
        Command::Add { id, req, events, reply } => {
            let r = se.add(id, req, events).map_err(|e| e.to_string());
            let _ = reply.send(r);
        }
    }
}

/// Serve until ctrl-c / SIGTERM.
pub async fn run(state: AppState) -> std::io::Result<()> {
    let addr = state.opts.addr;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    eprintln!("lserve: serving `{}` on http://{}", state.model.name, listener.local_addr()?);
    serve_on(listener, state, shutdown_signal()).await
}

/// Serve on `listener` until `shutdown` completes (tests pass their own).
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = routes::router(Arc::new(state));
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}
