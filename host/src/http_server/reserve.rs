//! The reserve: connections accepted over the cap, when every connection under it is serving a
//! request. A reserve connection answers one request: the probes (`GET` / `HEAD` of
//! [`crate::health::PROBE_PATHS`]) as the server always does, so a kubelet's probe is answered
//! however busy the server is; anything else with [`too_many_requests`], the kube-apiserver's
//! answer when its max-in-flight limit is reached, which client-go's REST client retries after
//! `Retry-After` (up to 10 times) without the recorder seeing a failure.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use super::ServerStats;
use super::api_status::{ApiStatus, StatusDetails};

/// `Retry-After` of the `429` (seconds): 1, as the kube-apiserver's max-in-flight filter.
pub const RETRY_AFTER_SECONDS: u32 = 1;

/// The longest a reserve connection waits for its request head: 2 s (or the server's header
/// timeout, when shorter). A probe or a create sends its head at once.
const RESERVE_HEAD_TIMEOUT: Duration = Duration::from_secs(2);

/// Body bytes of a refused request read before answering (64 KiB, within
/// [`RESERVE_HEAD_TIMEOUT`]): a small body left unread would make closing the connection
/// reset it, and the client could lose the `429` with it.
const DRAIN_BYTES: usize = 64 * 1024;

/// Reserve connections of a server capped at `max_connections`: half the cap, at least 16 and
/// at most 256 (a reserve connection lives for one quick answer: its slots turn over fast).
pub fn reserve_size(max_connections: usize) -> usize {
    (max_connections / 2).clamp(16, 256)
}

/// `429 TooManyRequests` with `Retry-After: 1` and the `Status` body the kube-apiserver
/// answers when its max-in-flight limit is reached (`details.retryAfterSeconds: 1`).
pub fn too_many_requests() -> Response {
    ApiStatus::failure(StatusCode::TOO_MANY_REQUESTS, "TooManyRequests", "Too many requests, please try again later.")
        .with_details(StatusDetails { retry_after_seconds: Some(RETRY_AFTER_SECONDS), ..StatusDetails::default() })
        .into_response()
}

/// The reserve of one server: its slots, and how its connections are served.
pub(super) struct Reserve {
    slots: Arc<Semaphore>,
    http: hyper::server::conn::http1::Builder,
}

impl Reserve {
    /// The reserve of a server capped at `max_connections` whose header timeout is
    /// `header_read_timeout`.
    pub fn new(max_connections: usize, header_read_timeout: Duration) -> Self {
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(header_read_timeout.min(RESERVE_HEAD_TIMEOUT))
            .keep_alive(false);
        Self { slots: Arc::new(Semaphore::new(reserve_size(max_connections))), http }
    }

    /// Takes a reserve slot for `stream` — when all are taken, waits for one to end: each
    /// lives at most [`RESERVE_HEAD_TIMEOUT`] plus one quick answer — and returns the task
    /// serving it until it is answered or `stop` fires.
    pub async fn serve(
        &self,
        stream: TcpStream,
        router: Router,
        stats: Arc<ServerStats>,
        stop: CancellationToken,
    ) -> impl Future<Output = ()> + Send + 'static {
        let permit = self.slots.clone().acquire_owned().await.expect("the reserve's semaphore is never closed");
        let service = hyper::service::service_fn(move |request| answer(router.clone(), stats.clone(), request));
        let serving = self.http.serve_connection(TokioIo::new(stream), service);
        async move {
            tokio::select! {
                _ = serving => {}
                () = stop.cancelled() => {}
            }
            drop(permit);
        }
    }
}

/// A probe through `router`; anything else [`too_many_requests`] (counted), once up to
/// [`DRAIN_BYTES`] of its body are read.
async fn answer(
    router: Router,
    stats: Arc<ServerStats>,
    request: hyper::Request<hyper::body::Incoming>,
) -> Result<Response, Infallible> {
    let probe = matches!(*request.method(), Method::GET | Method::HEAD)
        && crate::health::PROBE_PATHS.contains(&request.uri().path());
    if probe {
        return router.oneshot(request.map(axum::body::Body::new)).await;
    }
    let drain = http_body_util::Limited::new(request.into_body(), DRAIN_BYTES).collect();
    let _ = tokio::time::timeout(RESERVE_HEAD_TIMEOUT, drain).await;
    stats.max_connections.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(too_many_requests())
}
