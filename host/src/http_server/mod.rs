//! Serving an axum [`Router`] with limits a hostile client cannot exhaust: what HTTP ingest,
//! `run --serve` and `run --metrics` all go through ([`serve`]).
//!
//! Every connection is an HTTP/1 connection of hyper's own server (`http1::Builder`, timed by
//! hyper-util's `TokioTimer`), with:
//! - a **header read timeout** ([`ServerLimits::header_read_timeout`]): a request head not
//!   complete within it closes the connection. hyper starts it whenever the connection waits
//!   for a head, so it is also the **idle keep-alive timeout** between requests;
//! - a **body deadline** ([`ServerLimits::body_timeout`], tower-http's
//!   `RequestBodyDeadlineLayer`): a request body not complete within it fails (a client
//!   sending one byte a second cannot hold a handler);
//! - a **minimum body rate** ([`ServerLimits::min_body_rate`]): a request body that, 2 s or
//!   more after its handler asked for it, has sent less than that many bytes per second since
//!   is *slow*, and is shed before its deadline whenever the cap is near (see below);
//! - a **connection cap** ([`ServerLimits::max_connections`]). At the cap a new connection is
//!   still accepted, and room is made for it by shedding the oldest connection that has not yet
//!   sent a complete request head, else the slow body furthest behind its rate: a shed
//!   connection is answered `429` with `Retry-After: 1` before it is closed ([`answer_shed`]). When every
//!   connection is serving a request, the new connection is served from a small reserve
//!   ([`reserve`]): `/healthz` and `/readyz` are answered there as usual, and every other
//!   request gets `429 TooManyRequests` with `Retry-After: 1`, the kube-apiserver's
//!   max-in-flight answer, which client-go retries. When the reserve is full too, the server
//!   accepts nothing until a reserve connection ends (new clients wait in the listen backlog,
//!   never closed unanswered). Every second while the open connections are at 90 % of the cap
//!   or more, every slow body is shed. Clients that send their request at once — probes,
//!   authorised ingest — are served however many slow connections are open; the slow ones are
//!   shed. When the process runs out of file descriptors, accepting sheds the same way.
//!   Each refusal is counted ([`ServerStats`], `eventpipe_http_refused_total{reason}`).
//!
//! Authentication ([`crate::source::http::with_bearer`]) is a layer in front of the handlers,
//! which read the body: a request without the token is refused before any of its body is read.

pub mod api_status;
mod connections;
pub mod reserve;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use connections::{Connections, Shed};

/// Default of [`ServerLimits::header_read_timeout`] (`--http-header-timeout`): 10 s.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of [`ServerLimits::body_timeout`] (`--http-body-timeout`): 60 s, a 4 MiB body (the
/// ingest limit) at 70 KB/s.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(60);
/// Default of [`ServerLimits::max_connections`] (`--http-max-connections`): 512, half the
/// usual 1,024 file descriptors of a process.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
/// Default of [`ServerLimits::min_body_rate`] (`--http-min-body-rate`): 1,024 bytes per second
/// (1 KiB/s; a client-go Event of about 1 KB is sent in one packet).
pub const DEFAULT_MIN_BODY_RATE: u64 = 1024;

/// Share of the cap from which slow bodies are shed every second: 90 %.
const NEAR_CAP_PERCENT: usize = 90;

/// The limits of one HTTP server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// Time to receive a complete request head, from the moment the connection waits for one
    /// (after it is accepted, or after the previous response: the idle keep-alive timeout).
    pub header_read_timeout: Duration,
    /// Time to receive a complete request body, from the moment its head was read.
    pub body_timeout: Duration,
    /// Open connections at most (at least 1), besides the reserve
    /// ([`reserve::reserve_size`]); see the module documentation for what happens at the cap.
    pub max_connections: usize,
    /// Bytes per second a request body must average from the moment its handler asks for it
    /// (checked from 2 s after that) not to be shed when the cap is near; 0 sheds no body for
    /// its rate.
    pub min_body_rate: u64,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            min_body_rate: DEFAULT_MIN_BODY_RATE,
        }
    }
}

/// The longest a shed connection is given to take its answer and end: 1 s.
const SHED_ANSWER_TIMEOUT: Duration = Duration::from_secs(1);

/// Request bytes of a shed connection read after its answer (64 KiB at most, within
/// [`SHED_ANSWER_TIMEOUT`]): closing with unread bytes would reset the connection, and the client
/// could lose the answer with it.
const SHED_DRAIN_BYTES: usize = 64 * 1024;

/// Answers a connection shed to make room, whatever it had sent, with
/// [`reserve::too_many_requests`] (`429` with `Retry-After: 1`, the kube-apiserver's
/// max-in-flight answer) and `Connection: close`, then closes it: a client that was merely slow
/// to send its request (a CPU-starved one) retries, as client-go does, rather than seeing its
/// connection closed unanswered. No request was answered on it yet: a connection is shed only
/// before its first request head, or while a request body is behind its rate.
async fn answer_shed(mut io: tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    static ANSWER: tokio::sync::OnceCell<Vec<u8>> = tokio::sync::OnceCell::const_new();
    let answer = ANSWER
        .get_or_init(|| async {
            let response = reserve::too_many_requests();
            let mut bytes = format!("HTTP/1.1 {}\r\n", response.status()).into_bytes();
            for (name, value) in response.headers() {
                bytes.extend_from_slice(name.as_str().as_bytes());
                bytes.extend_from_slice(b": ");
                bytes.extend_from_slice(value.as_bytes());
                bytes.extend_from_slice(b"\r\n");
            }
            let body = http_body_util::BodyExt::collect(response.into_body())
                .await
                .map(|b| b.to_bytes().to_vec())
                .unwrap_or_default();
            bytes.extend_from_slice(format!("content-length: {}\r\nconnection: close\r\n\r\n", body.len()).as_bytes());
            bytes.extend_from_slice(&body);
            bytes
        })
        .await;
    let _ = tokio::time::timeout(SHED_ANSWER_TIMEOUT, async {
        io.write_all(answer).await?;
        io.shutdown().await?;
        let (mut buf, mut left) = ([0u8; 4096], SHED_DRAIN_BYTES);
        while left > 0 {
            match io.read(&mut buf).await? {
                0 => break,
                n => left = left.saturating_sub(n),
            }
        }
        Ok::<_, std::io::Error>(())
    })
    .await;
}

/// Connections one server refused or shed, per reason (`eventpipe_http_refused_total`).
/// Shared by the servers it is given to; read at every scrape.
#[derive(Debug, Default)]
pub struct ServerStats {
    max_connections: AtomicU64,
    slow_head: AtomicU64,
    slow_body: AtomicU64,
}

impl ServerStats {
    /// `(reason, count)`: `max_connections` (requests answered `429` at the cap), `slow_head`
    /// (connections closed before a complete request head to make room), `slow_body`
    /// (connections closed for a body below the minimum rate).
    pub fn refused(&self) -> [(&'static str, u64); 3] {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        [
            ("max_connections", get(&self.max_connections)),
            ("slow_head", get(&self.slow_head)),
            ("slow_body", get(&self.slow_body)),
        ]
    }

    fn count(&self, shed: Shed, n: u64) {
        let counter = match shed {
            Shed::SlowHead => &self.slow_head,
            Shed::SlowBody => &self.slow_body,
        };
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

impl crate::metrics::Snapshot {
    /// Adds an HTTP server's refusals ([`ServerStats::refused`]) to
    /// `eventpipe_http_refused_total{reason}`.
    pub fn add_http_server(&mut self, stats: &ServerStats) {
        for (reason, n) in stats.refused() {
            self.add(&crate::metrics::HTTP_REFUSED, &[("reason", reason)], n);
        }
    }
}

/// Serves `router` on `listener` with `limits` until `shutdown` completes, then lets the
/// requests in flight finish (idle connections close at once) and returns. Refusals are
/// counted in `stats`.
///
/// # Errors
/// None so far: failed accepts (e.g. out of file descriptors) shed a waiting connection and
/// are retried; the `Result` is kept for the callers' error paths.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ServerLimits,
    stats: Arc<ServerStats>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let router = router.layer(tower_http::timeout::RequestBodyDeadlineLayer::new(limits.body_timeout));
    let max_connections = limits.max_connections.max(1);
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout).keep_alive(true);
    let connections = Arc::new(Connections::new());
    let reserve = reserve::Reserve::new(max_connections, limits.header_read_timeout);
    let shed_one = |connections: &Connections| match connections.shed_one(limits.min_body_rate) {
        Some(shed) => {
            stats.count(shed, 1);
            true
        }
        None => false,
    };
    let mut sweep = tokio::time::interval(Duration::from_secs(1));
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let stop = CancellationToken::new();
    let mut tasks = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
            _ = sweep.tick(), if limits.min_body_rate > 0 => {
                if connections.len() * 100 >= max_connections * NEAR_CAP_PERCENT {
                    stats.count(Shed::SlowBody, connections.shed_slow_bodies(limits.min_body_rate));
                }
                continue;
            }
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Out of file descriptors (EMFILE / ENFILE) or a connection reset before it
                // was accepted: make room, and try again shortly.
                tracing::debug!(%error, "accept failed");
                shed_one(&connections);
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        if connections.len() >= max_connections && !shed_one(&connections) {
            tracing::debug!(max_connections, "connection cap reached, every connection busy: served from the reserve");
            let serving = tokio::select! {
                () = &mut shutdown => break,
                serving = reserve.serve(stream, router.clone(), stats.clone(), stop.clone()) => serving,
            };
            tasks.spawn(serving);
            continue;
        }
        let conn = connections.add();
        let service = {
            let (router, conn, connections) = (router.clone(), conn.clone(), connections.clone());
            hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                let request = request.map(|body| axum::body::Body::new(connections.request(&conn, body)));
                let (answer, conn) = (router.clone().oneshot(request), conn.clone());
                async move {
                    let response = answer.await;
                    conn.answered();
                    response
                }
            })
        };
        let mut serving = http.serve_connection(TokioIo::new(stream), service);
        let (connections, stop) = (connections.clone(), stop.clone());
        tasks.spawn(async move {
            tokio::select! {
                _ = &mut serving => {}
                // Shed to make room: answered, never closed bare (a client-go recorder then
                // retries after `Retry-After` instead of failing the write).
                () = conn.close.cancelled() => answer_shed(serving.into_parts().io.into_inner()).await,
                () = stop.cancelled() => {
                    std::pin::Pin::new(&mut serving).graceful_shutdown();
                    let _ = serving.await;
                }
            }
            connections.remove(&conn);
        });
    }
    drop(listener);
    stop.cancel();
    while tasks.join_next().await.is_some() {}
    Ok(())
}
