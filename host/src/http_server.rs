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
//! - a **connection cap** ([`ServerLimits::max_connections`]). At the cap a new connection is
//!   still accepted, and the oldest connection that has not yet sent a complete request head
//!   is closed to make room (when every connection is serving a request, the new one is
//!   closed instead). Clients that send their request at once — probes, authorised ingest —
//!   are served however many slow connections are open; the slow ones are shed, oldest first.
//!   When the process runs out of file descriptors, accepting sheds the same way.
//!
//! Authentication ([`crate::source::http::with_bearer`]) is a layer in front of the handlers,
//! which read the body: a request without the token is refused before any of its body is read.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// Default of [`ServerLimits::header_read_timeout`] (`--http-header-timeout`): 10 s.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of [`ServerLimits::body_timeout`] (`--http-body-timeout`): 60 s, a 4 MiB body (the
/// ingest limit) at 70 KB/s.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(60);
/// Default of [`ServerLimits::max_connections`] (`--http-max-connections`): 512, half the
/// usual 1,024 file descriptors of a process.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;

/// The limits of one HTTP server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// Time to receive a complete request head, from the moment the connection waits for one
    /// (after it is accepted, or after the previous response: the idle keep-alive timeout).
    pub header_read_timeout: Duration,
    /// Time to receive a complete request body, from the moment its head was read.
    pub body_timeout: Duration,
    /// Open connections at most (at least 1); see the module documentation for what happens
    /// at the cap.
    pub max_connections: usize,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// One open connection, as the accept loop sees it.
#[derive(Debug, Default)]
struct Open {
    /// A complete request head arrived (its request reached the router): not shed any more.
    started: AtomicBool,
    /// Cancelled to close the connection at once.
    close: CancellationToken,
}

/// The open connections in accept order.
#[derive(Debug, Default)]
struct Connections(Mutex<VecDeque<Arc<Open>>>);

impl Connections {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Arc<Open>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Closes the oldest connection that has not sent a complete request head; false when
    /// there is none.
    fn shed_oldest_waiting(&self) -> bool {
        let mut open = self.lock();
        match open.iter().position(|c| !c.started.load(Ordering::Acquire)) {
            Some(at) => {
                let shed = open.remove(at).expect("found");
                shed.close.cancel();
                true
            }
            None => false,
        }
    }

    fn remove(&self, conn: &Arc<Open>) {
        self.lock().retain(|c| !Arc::ptr_eq(c, conn));
    }
}

/// Serves `router` on `listener` with `limits` until `shutdown` completes, then lets the
/// requests in flight finish (idle connections close at once) and returns.
///
/// # Errors
/// None so far: failed accepts (e.g. out of file descriptors) shed a waiting connection and
/// are retried; the `Result` is kept for the callers' error paths.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ServerLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let router = router.layer(tower_http::timeout::RequestBodyDeadlineLayer::new(limits.body_timeout));
    let max_connections = limits.max_connections.max(1);
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout).keep_alive(true);
    let connections = Arc::new(Connections::default());
    let stop = CancellationToken::new();
    let mut tasks = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Out of file descriptors (EMFILE / ENFILE) or a connection reset before it
                // was accepted: make room, and try again shortly.
                tracing::debug!(%error, "accept failed");
                connections.shed_oldest_waiting();
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        if connections.lock().len() >= max_connections && !connections.shed_oldest_waiting() {
            tracing::debug!(max_connections, "connection cap reached, every connection busy: new connection closed");
            continue;
        }
        let conn = Arc::new(Open::default());
        connections.lock().push_back(conn.clone());
        let service = {
            let (router, conn) = (router.clone(), conn.clone());
            hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                conn.started.store(true, Ordering::Release);
                router.clone().oneshot(request.map(axum::body::Body::new))
            })
        };
        let serving = http.serve_connection(TokioIo::new(stream), service);
        let (connections, stop) = (connections.clone(), stop.clone());
        tasks.spawn(async move {
            tokio::pin!(serving);
            tokio::select! {
                _ = serving.as_mut() => {}
                () = conn.close.cancelled() => {}
                () = stop.cancelled() => {
                    serving.as_mut().graceful_shutdown();
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
