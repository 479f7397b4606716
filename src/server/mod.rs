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
//!
//! Connections (docs/serving.md, "Limits"): HTTP/1.1 served by hyper directly so its header-read
//! timeout applies (a client that sends half a header is dropped after `header_timeout`); a
//! request body must arrive within `body_timeout` (408 otherwise); at most `max_connections` are
//! open at once — beyond that new connections wait in the listen backlog until one closes.

pub mod api;
pub mod error;
pub mod metrics;
mod routes;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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
    /// A request's head (request line and headers) must arrive within this.
    pub header_timeout: Duration,
    /// A request's body must arrive within this after its head (408 beyond).
    pub body_timeout: Duration,
    /// Open connections at most; more wait in the listen backlog.
    pub max_connections: usize,
}

impl ServerOptions {
    pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(30);
    pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(60);
    pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

    /// Options with the default limits (4 MiB bodies, the timeouts and connection limit above).
    pub fn new(addr: SocketAddr, api_key: Option<String>, max_inflight: usize) -> Self {
        ServerOptions {
            addr,
            api_key,
            max_inflight,
            max_body_bytes: 4 << 20,
            header_timeout: Self::DEFAULT_HEADER_TIMEOUT,
            body_timeout: Self::DEFAULT_BODY_TIMEOUT,
            max_connections: Self::DEFAULT_MAX_CONNECTIONS,
        }
    }
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

/// Serve on `listener` until `shutdown` completes (tests pass their own), then let the open
/// connections finish.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (header_timeout, max_conns) = (state.opts.header_timeout, state.opts.max_connections.max(1));
    let app = routes::router(Arc::new(state));
    let slots = Arc::new(tokio::sync::Semaphore::new(max_conns));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // Take a connection slot first: at the limit, new connections wait in the backlog.
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let conn = graceful.watch(connection(stream, app.clone(), header_timeout));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!("connection: {e}");
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// The router serving `state` (tests drive it over in-memory connections with [`connection`]).
pub fn app(state: AppState) -> axum::Router {
    routes::router(Arc::new(state))
}

/// One HTTP/1.1 connection on `io` served by `app`, as [`serve_on`] runs it for each socket:
/// hyper's header-read timeout armed with tokio's timer.
pub fn connection<IO>(
    io: IO,
    app: axum::Router,
    header_timeout: Duration,
) -> hyper::server::conn::http1::Connection<
    hyper_util::rt::TokioIo<IO>,
    hyper_util::service::TowerToHyperService<axum::Router>,
>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_timeout)
        // A client that half-closes after its request (shutdown(SHUT_WR)) still gets its answer.
        .half_close(true)
        .serve_connection(hyper_util::rt::TokioIo::new(io), hyper_util::service::TowerToHyperService::new(app))
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
