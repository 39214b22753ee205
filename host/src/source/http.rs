//! HTTP ingest: events pushed over HTTP into eventpipe (axum 0.8, HTTP/1.1).
//!
//! # Routes
//!
//! | route | body | answer |
//! |---|---|---|
//! | `POST /api/v1/namespaces/{ns}/events` | one core/v1 Event, `application/json` | `201 Created`, the event as "stored" |
//! | `PATCH /api/v1/namespaces/{ns}/events/{name}` | a strategic-merge (or JSON merge) patch | `200`, the patched event; `404 NotFound` for an event not created here (see below) |
//! | `PUT /api/v1/namespaces/{ns}/events/{name}` | one core/v1 Event | `200`, the event; `404` as for a patch |
//! | `POST /ingest` | JSON lines, arrays, `EventList`s, watch envelopes (see [`super::decode`]) | `200` with `{"accepted": N, "non_events": K, "errors": [{"line": L, "error": "…"}]}` |
//!
//! The first two are the paths client-go's `EventSinkImpl` uses (`CreateWithEventNamespace`,
//! `PatchWithEventNamespace`, `UpdateWithEventNamespace`), so a Go component whose `rest.Config`
//! points at eventpipe records through it unchanged (with the default JSON content type; the
//! protobuf content type is answered `415`).
//!
//! **Create** answers like the apiserver: `201` with the event as stored — `kind: Event`,
//! `apiVersion: v1`, `metadata.namespace` set to `{ns}` when empty, `metadata.name` generated
//! from `generateName` (5 characters, as the apiserver's `SimpleNameGenerator`) when empty,
//! `uid` and `creationTimestamp` filled when missing. A body namespace that differs from the
//! path's is `400 BadRequest` ("the namespace of the provided object does not match the
//! namespace sent on the request", as the apiserver); a body that is not an Event, or another
//! `kind`/`apiVersion`, is `400`; no name and no `generateName` is `422 Invalid`, and so is an
//! event the apiserver's validation refuses ([`super::event_validation`]: e.g. an
//! `involvedObject.namespace` other than the event's, or an `eventTime` without
//! `reportingComponent`, `reportingInstance`, `action` or `reason`), with its causes. A create of
//! a name created here and still remembered (see below) is `409 AlreadyExists`, as the
//! apiserver answers a create of an existing name; client-go's `recordToSink` drops the event
//! on it (as on any `StatusError`), so a recorder ends as it would against the apiserver.
//!
//! **Request options** are checked first, as the apiserver's handlers do
//! ([`super::request_options`]): a `dryRun` other than `All`, a `fieldManager` over 128 bytes
//! or with a character that is not printable, a `fieldValidation` other than `Ignore`, `Warn`,
//! `Strict` is the `422 Invalid` of `CreateOptions` / `PatchOptions` / `UpdateOptions`.
//! `dryRun=All` is answered as the write would be, and nothing is queued or remembered.
//!
//! **Patch and update apply to the events created here.** The server remembers the events it
//! created (answered `201`), by namespace and name, in a bounded LRU cache
//! ([`IngestConfig::created_cache_entries`], default [`DEFAULT_CREATED_CACHE_ENTRIES`]). A
//! `PATCH` of one of them — client-go's `recordToSink` patches repeats with
//! `{"count":…,"lastTimestamp":…,"message":…}` as `application/strategic-merge-patch+json` — is
//! applied to the remembered event (a merge patch: the fields an Event patch touches are all
//! scalars), the result is answered `200` and goes on into the pipeline like any event, where
//! eventpipe's own correlator counts it. A `PUT` replaces the remembered event the same way.
//! Name and namespace always stay those of the URL. An event not created here (or no longer
//! remembered) is `404 NotFound`, as before: client-go's `recordEvent` treats a 404 on patch as
//! "the event is gone" and creates the full event instead (same name, updated `count`,
//! `lastTimestamp`, `message`; `resourceVersion` cleared), so it still arrives whole, at the
//! cost of one extra round trip.
//!
//! # Errors
//!
//! Every error body is a Kubernetes `Status` ([`ApiStatus`]):
//! `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"…","reason":"BadRequest","code":400}`,
//! with these reasons: `400 BadRequest` (malformed body, namespace mismatch, a batch in which
//! nothing could be decoded — one `details.causes` entry per bad line), `401 Unauthorized`
//! (with `WWW-Authenticate: Bearer`), `404 NotFound` (unknown path, patch/update of an event not
//! created here), `405 MethodNotAllowed`, `409 AlreadyExists` (a create of a name created
//! here), `413 RequestEntityTooLarge` (body over [`IngestConfig::max_body_bytes`]),
//! `415 UnsupportedMediaType`, `422 Invalid` (no name; bad request options),
//! `503 ServiceUnavailable` (queue full or closed).
//! A batch with some good and some bad documents is a partial success: `200`, the good events
//! accepted, the bad lines listed.
//!
//! # Back-pressure
//!
//! Accepted events go to a bounded [`tokio::sync::mpsc`] channel of [`Ingested`]. A request
//! waits up to [`IngestConfig::enqueue_timeout`] for room; then it is answered `503` with
//! `Retry-After: {retry_after_seconds}` and `details.retryAfterSeconds`. client-go's REST client
//! retries a 5xx carrying `Retry-After` by itself (up to 10 times), so a Go recorder rides out a
//! short stall. A batch is enqueued in chunks of the channel's capacity, each all-or-nothing:
//! a batch of at most that many events is accepted whole or not at all (retry it whole); for a
//! larger batch the `503` message says how many were accepted and the line to resume from.
//!
//! # Authentication
//!
//! With a token ([`IngestConfig::token`], usually from [`TOKEN_ENV`]) every request, on every
//! path but the probes (`GET` / `HEAD` of [`crate::health::PROBE_PATHS`], which a kubelet asks
//! without a token), needs `Authorization: Bearer <token>`, compared in constant time. Without
//! a token the server only binds loopback addresses: [`Ingest::bind`] and [`Ingest::serve`]
//! refuse any other address with [`IngestError::TokenRequired`]. The `Authorization`,
//! `Proxy-Authorization` and `Cookie` headers are never passed on with the events.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::Serialize;
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::api_status::json_response;
pub use super::api_status::{ApiStatus, StatusCause, StatusDetails};
use super::decode::{Decoded, Decoder};
use super::go_strings;
use crate::broadcaster::{Broadcaster, WatchEventType};
use crate::event::{Event, SharedEvent};

/// Default largest request body, bytes (4 MiB, the decoder's longest line).
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 << 20;
/// Default address: loopback only, so no token is needed.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8080);
/// Default wait for room in the event queue before answering `503`.
pub const DEFAULT_ENQUEUE_TIMEOUT: Duration = Duration::from_secs(2);
/// Default number of created events remembered for later patches (client-go's own correlator
/// cache holds 4096).
pub const DEFAULT_CREATED_CACHE_ENTRIES: usize = 4096;
/// Environment variable holding the bearer token (see [`BearerToken::from_env`]).
pub const TOKEN_ENV: &str = "EVENTPIPE_INGEST_TOKEN";
/// `details.causes` entries listed at most in a `400` for a batch.
const MAX_CAUSES: usize = 100;
/// Media types `POST /ingest` accepts.
const INGEST_MEDIA_TYPES: &[&str] =
    &["application/json", "application/x-ndjson", "application/jsonl", "application/x-jsonlines", "text/plain"];
/// Headers never passed on with events.
const PRIVATE_HEADERS: &[header::HeaderName] = &[header::AUTHORIZATION, header::PROXY_AUTHORIZATION, header::COOKIE];

/// Why the ingest server cannot start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// A non-loopback address without a bearer token.
    #[error(
        "refusing to serve {server} on {addr} without a bearer token: set {TOKEN_ENV} (or the configured token), \
         or bind a loopback address such as 127.0.0.1"
    )]
    TokenRequired {
        /// The server, with the flag that asked for it ([`INGEST_SERVER`], [`EVENTS_API_SERVER`]).
        server: &'static str,
        /// The address asked for.
        addr: SocketAddr,
    },
    /// The token is empty or has characters a bearer token cannot carry.
    #[error("invalid ingest bearer token: {0}")]
    InvalidToken(&'static str),
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The server failed while running.
    #[error("HTTP ingest server: {0}")]
    Serve(#[source] std::io::Error),
}

/// A bearer token (RFC 6750 `b64token`: ASCII letters, digits and `-._~+/`, then `=` padding).
/// Its `Debug` output is redacted.
#[derive(Clone)]
pub struct BearerToken(Arc<[u8]>);

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerToken(<redacted>)")
    }
}

impl BearerToken {
    /// Checks and wraps `token`.
    ///
    /// # Errors
    /// [`IngestError::InvalidToken`] when it is empty or not a `b64token`.
    pub fn new(token: &str) -> Result<Self, IngestError> {
        if token.is_empty() {
            return Err(IngestError::InvalidToken("it is empty"));
        }
        let body = token.trim_end_matches('=');
        if body.is_empty() || !body.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b)) {
            return Err(IngestError::InvalidToken("only ASCII letters, digits, `-._~+/` and trailing `=` are allowed"));
        }
        Ok(Self(token.as_bytes().into()))
    }

    /// The token in [`TOKEN_ENV`], `None` when unset or empty.
    ///
    /// # Errors
    /// [`IngestError::InvalidToken`] when it is set but not a valid token.
    pub fn from_env() -> Result<Option<Self>, IngestError> {
        match std::env::var(TOKEN_ENV) {
            Ok(v) if !v.is_empty() => Self::new(&v).map(Some),
            _ => Ok(None),
        }
    }

    /// Whether `given` is this token; constant time in the contents (the length is not secret).
    pub fn matches(&self, given: &[u8]) -> bool {
        bool::from(self.0.as_ref().ct_eq(given))
    }
}

/// How the ingest server behaves.
#[derive(Debug, Clone)]
pub struct IngestConfig {
    /// Address to listen on (default [`DEFAULT_LISTEN`], `127.0.0.1:8080`).
    pub listen: SocketAddr,
    /// Bearer token every request must carry; required for a non-loopback `listen`.
    pub token: Option<BearerToken>,
    /// Largest request body, bytes (default 4 MiB); larger is `413`.
    pub max_body_bytes: usize,
    /// How long a request waits for room in the event queue before `503` (default 2 s).
    pub enqueue_timeout: Duration,
    /// `Retry-After` of a `503`, seconds (default 1).
    pub retry_after_seconds: u32,
    /// Events created through this server that a later `PATCH` / `PUT` can still find (default
    /// [`DEFAULT_CREATED_CACHE_ENTRIES`]; least recently used leave first; 0: every patch is
    /// `404`).
    pub created_cache_entries: usize,
    /// Header and body timeouts, connection cap ([`crate::http_server`]).
    pub server: crate::http_server::ServerLimits,
}

impl Default for IngestConfig {
    fn default() -> Self {
        Self {
            listen: DEFAULT_LISTEN,
            token: None,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            enqueue_timeout: DEFAULT_ENQUEUE_TIMEOUT,
            retry_after_seconds: 1,
            created_cache_entries: DEFAULT_CREATED_CACHE_ENTRIES,
            server: crate::http_server::ServerLimits::default(),
        }
    }
}

/// HTTP ingest, as [`IngestError::TokenRequired`] names it.
pub const INGEST_SERVER: &str = "HTTP ingest (--source http:ADDR)";
/// The read API of `run --serve`, as [`IngestError::TokenRequired`] names it.
pub const EVENTS_API_SERVER: &str = "the events API (--serve ADDR)";

/// Checks the rule "a non-loopback address needs a token" for `server` (named in the error with
/// its flag: [`INGEST_SERVER`], [`EVENTS_API_SERVER`]).
///
/// # Errors
/// [`IngestError::TokenRequired`] for a non-loopback `addr` without `token`.
pub fn check_bind(server: &'static str, addr: SocketAddr, token: Option<&BearerToken>) -> Result<(), IngestError> {
    if addr.ip().is_loopback() || token.is_some() { Ok(()) } else { Err(IngestError::TokenRequired { server, addr }) }
}

/// Which route an event came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IngestRoute {
    /// `POST /api/v1/namespaces/{ns}/events` (a client-go style create).
    Create,
    /// `PATCH /api/v1/namespaces/{ns}/events/{name}` of an event created here.
    Patch,
    /// `PUT /api/v1/namespaces/{ns}/events/{name}` of an event created here.
    Update,
    /// `POST /ingest`, from the document or list item starting at this 1-based line of the body.
    Batch {
        /// Line in the request body.
        line: u64,
    },
}

/// One event received over HTTP, with what tenant routing needs.
#[derive(Debug, Clone)]
pub struct Ingested {
    /// The event (for creates, as answered to the client).
    pub event: Event,
    /// The request's headers (names lowercase, values that are not UTF-8 left out, credentials
    /// removed), shared by every event of the request; [`Ingested::into_event`] attaches them to
    /// the event for the tenant router.
    pub headers: Arc<Vec<(String, String)>>,
    /// The route it came through.
    pub route: IngestRoute,
    /// The watch envelope's type when it came in one (`DELETED` events included: the caller
    /// decides).
    pub watch_type: Option<WatchEventType>,
}

impl Ingested {
    /// The event as it goes into the Broadcaster: with the request's headers as its
    /// [`Event::ingest_headers`], so that tenants can match on them (`match.headers`).
    pub fn into_event(self) -> Event {
        let mut event = self.event;
        event.ingest_headers = crate::event::IngestHeaders::new(self.headers);
        event
    }
}

/// Live counters of the ingest server, updated as requests are answered; read them with
/// [`IngestCounters::stats`] (or [`Ingest::stats`]). Share one as `Arc<IngestCounters>` to read
/// it while the server runs ([`Ingest::with_counters`]).
#[derive(Debug, Default)]
pub struct IngestCounters {
    requests: AtomicU64,
    by_status: std::sync::Mutex<std::collections::BTreeMap<u16, u64>>,
    accepted: AtomicU64,
    bad_documents: AtomicU64,
    non_events: AtomicU64,
    patch_not_found: AtomicU64,
    already_exists: AtomicU64,
    unauthorized: AtomicU64,
    too_large: AtomicU64,
    unsupported_media_type: AtomicU64,
    bad_requests: AtomicU64,
    queue_full: AtomicU64,
    /// The ingest server's refusals at its connection cap.
    http_server: Arc<crate::http_server::ServerStats>,
}

/// A copy of the ingest counters at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct IngestStats {
    /// Requests answered (every route, every status).
    pub requests: u64,
    /// Requests answered, per HTTP status code (`200`, `201`, `401`, `404`, `413`, `503`, …).
    pub by_status: std::collections::BTreeMap<u16, u64>,
    /// Events put on the queue.
    pub accepted: u64,
    /// Documents or lines of `/ingest` bodies that could not be decoded.
    pub bad_documents: u64,
    /// Watch bookmarks and `ERROR` envelopes seen (not events).
    pub non_events: u64,
    /// Patches and updates of events not created here (or forgotten) answered `404` (each
    /// followed by a create from client-go).
    pub patch_not_found: u64,
    /// Creates of a name created here before answered `409 AlreadyExists`.
    pub already_exists: u64,
    /// `401` answers.
    pub unauthorized: u64,
    /// `413` answers.
    pub too_large: u64,
    /// `415` answers.
    pub unsupported_media_type: u64,
    /// `400` and `422` answers.
    pub bad_requests: u64,
    /// `503` answers (queue full or closed).
    pub queue_full: u64,
}

impl IngestCounters {
    /// The ingest server's refusals at its connection cap (`eventpipe_http_refused_total`).
    pub fn http_server(&self) -> &crate::http_server::ServerStats {
        &self.http_server
    }

    /// The counters now.
    pub fn stats(&self) -> IngestStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        IngestStats {
            requests: get(&self.requests),
            by_status: self.by_status.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            accepted: get(&self.accepted),
            bad_documents: get(&self.bad_documents),
            non_events: get(&self.non_events),
            patch_not_found: get(&self.patch_not_found),
            already_exists: get(&self.already_exists),
            unauthorized: get(&self.unauthorized),
            too_large: get(&self.too_large),
            unsupported_media_type: get(&self.unsupported_media_type),
            bad_requests: get(&self.bad_requests),
            queue_full: get(&self.queue_full),
        }
    }

    /// Counts one answered request with its status.
    fn answered(&self, status: StatusCode) {
        bump(&self.requests);
        *self.by_status.lock().unwrap_or_else(|p| p.into_inner()).entry(status.as_u16()).or_default() += 1;
    }
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

struct Shared {
    config: IngestConfig,
    queue: IngestQueue,
    counters: Arc<IngestCounters>,
    /// The events created (and since patched) here, by `(namespace, name)`, newest kept; `None`
    /// when [`IngestConfig::created_cache_entries`] is 0.
    created: Option<std::sync::Mutex<lru::LruCache<(String, String), Event>>>,
}

/// Where accepted events go: the one bounded queue whose room is the back-pressure bound and
/// whose capacity is the all-or-nothing batch size.
#[derive(Clone)]
pub enum IngestQueue {
    /// Straight into the Broadcaster's incoming queue (`run`: no second queue in between).
    /// Events go in as `ADDED`, with the request's headers attached ([`Ingested::into_event`]).
    Broadcaster(Broadcaster<SharedEvent>),
    /// A channel of [`Ingested`], for a caller that routes events itself.
    Channel(mpsc::Sender<Ingested>),
}

impl From<Broadcaster<SharedEvent>> for IngestQueue {
    fn from(b: Broadcaster<SharedEvent>) -> Self {
        IngestQueue::Broadcaster(b)
    }
}

impl From<mpsc::Sender<Ingested>> for IngestQueue {
    fn from(tx: mpsc::Sender<Ingested>) -> Self {
        IngestQueue::Channel(tx)
    }
}

/// The queue is closed (shutting down).
struct QueueClosed;

impl IngestQueue {
    fn capacity(&self) -> usize {
        match self {
            IngestQueue::Broadcaster(b) => b.incoming_capacity(),
            IngestQueue::Channel(tx) => tx.max_capacity(),
        }
        .max(1)
    }

    /// Enqueues all of `items` (at most [`capacity`](Self::capacity)) once there is room for all.
    /// Cancellation-safe: nothing is enqueued unless it completes.
    async fn push_all(&self, items: Vec<Ingested>) -> Result<(), QueueClosed> {
        match self {
            IngestQueue::Broadcaster(b) => {
                let events =
                    items.into_iter().map(|i| (WatchEventType::Added, crate::event::shared(i.into_event()))).collect();
                b.action_all(events).await.map_err(|_| QueueClosed)
            }
            IngestQueue::Channel(tx) => {
                let permits = tx.reserve_many(items.len()).await.map_err(|_| QueueClosed)?;
                for (permit, item) in permits.zip(items) {
                    permit.send(item);
                }
                Ok(())
            }
        }
    }
}

/// The HTTP ingest service: configuration, the queue events go to, and counters. Cheap to clone.
#[derive(Clone)]
pub struct Ingest {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Ingest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ingest").field("config", &self.shared.config).finish_non_exhaustive()
    }
}

impl Ingest {
    /// A service putting accepted events on `queue` (a Broadcaster or a channel).
    pub fn new(config: IngestConfig, queue: impl Into<IngestQueue>) -> Self {
        Self::with_counters(config, queue, Arc::default())
    }

    /// As [`new`](Self::new), counting into `counters` (which the caller may read while the
    /// server runs, e.g. at every `/metrics` scrape).
    pub fn with_counters(config: IngestConfig, queue: impl Into<IngestQueue>, counters: Arc<IngestCounters>) -> Self {
        let created = std::num::NonZeroUsize::new(config.created_cache_entries)
            .map(|n| std::sync::Mutex::new(lru::LruCache::new(n)));
        Self { shared: Arc::new(Shared { config, queue: queue.into(), counters, created }) }
    }

    /// The configuration.
    pub fn config(&self) -> &IngestConfig {
        &self.shared.config
    }

    /// The counters now.
    pub fn stats(&self) -> IngestStats {
        self.shared.counters.stats()
    }

    /// The ingest routes, a `404` fallback, and — when a token is configured — the bearer check
    /// in front of all of them.
    pub fn router(&self) -> Router {
        self.router_with(Router::new())
    }

    /// Like [`router`](Self::router), with `extra` routes (e.g. `crate::metrics::router`) merged
    /// in behind the same bearer check and fallback. `extra` must have no fallback of its own.
    pub fn router_with(&self, extra: Router) -> Router {
        let shared = self.shared.clone();
        let router = Router::new()
            .route("/api/v1/namespaces/{ns}/events", post(create))
            .route("/api/v1/namespaces/{ns}/events/{name}", axum::routing::patch(patch_or_update).put(patch_or_update))
            .route("/ingest", post(ingest))
            .with_state(shared.clone())
            .merge(extra)
            .fallback(not_found)
            .method_not_allowed_fallback(method_not_allowed);
        let counted = {
            let shared = shared.clone();
            axum::middleware::from_fn(move |req: Request, next: Next| {
                let counters = shared.counters.clone();
                async move {
                    let response = next.run(req).await;
                    counters.answered(response.status());
                    response
                }
            })
        };
        match shared.config.token.clone() {
            Some(token) => router
                .layer(axum::middleware::from_fn_with_state((token, Some(shared.counters.clone())), require_bearer)),
            None => router,
        }
        .layer(counted)
    }

    /// Binds [`IngestConfig::listen`].
    ///
    /// # Errors
    /// [`IngestError::TokenRequired`] for a non-loopback address without a token (checked before
    /// binding); [`IngestError::Bind`] when the address cannot be bound.
    pub async fn bind(&self) -> Result<TcpListener, IngestError> {
        let addr = self.shared.config.listen;
        check_bind(INGEST_SERVER, addr, self.shared.config.token.as_ref())?;
        TcpListener::bind(addr).await.map_err(|source| IngestError::Bind { addr, source })
    }

    /// Serves [`router_with(extra)`](Self::router_with) on `listener` until `shutdown`
    /// completes, then finishes the requests in flight; with [`IngestConfig::server`]'s limits
    /// ([`crate::http_server::serve`]).
    ///
    /// # Errors
    /// [`IngestError::TokenRequired`] when `listener` is on a non-loopback address and no token
    /// is configured; [`IngestError::Serve`] when serving fails.
    pub async fn serve(
        &self,
        listener: TcpListener,
        extra: Router,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), IngestError> {
        let addr = listener.local_addr().map_err(IngestError::Serve)?;
        check_bind(INGEST_SERVER, addr, self.shared.config.token.as_ref())?;
        tracing::info!(%addr, auth = self.shared.config.token.is_some(), "HTTP ingest listening");
        let stats = self.shared.counters.http_server.clone();
        crate::http_server::serve(listener, self.router_with(extra), self.shared.config.server, stats, shutdown)
            .await
            .map_err(IngestError::Serve)
    }
}

/// The HTTP source: an [`Ingest`] service writing into the Broadcaster.
#[derive(Debug)]
pub struct HttpSource {
    /// Address, token (filled from [`TOKEN_ENV`] when `None`), limits.
    pub config: IngestConfig,
    /// Routes served beside ingest, behind the same bearer check (e.g. `GET /metrics`).
    pub extra_routes: Router,
    /// Counted into while it serves.
    pub counters: Arc<IngestCounters>,
}

impl HttpSource {
    /// Serves until `shutdown`, then finishes the requests in flight (what they accepted goes
    /// in). `read` counts the events accepted.
    ///
    /// # Errors
    /// [`super::SourceError`] for a bad token, a non-loopback address without a token, or an
    /// address that cannot be bound.
    pub async fn run(
        self,
        to: Broadcaster<SharedEvent>,
        shutdown: tokio_util::sync::CancellationToken,
    ) -> Result<super::SourceStats, super::SourceError> {
        let name = format!("http:{}", self.config.listen);
        let fail = |e: &dyn std::fmt::Display| super::SourceError {
            source: name.clone(),
            error: std::io::Error::other(e.to_string()),
        };
        let mut config = self.config;
        if config.token.is_none() {
            config.token = BearerToken::from_env().map_err(|e| fail(&e))?;
        }
        let ingest = Ingest::with_counters(config, to, self.counters);
        let listener = ingest.bind().await.map_err(|e| fail(&e))?;
        let addr = listener.local_addr().map_err(|e| fail(&e))?;
        eprintln!("eventpipe: HTTP ingest listening on {addr}");
        ingest.serve(listener, self.extra_routes, shutdown.cancelled_owned()).await.map_err(|e| fail(&e))?;
        let stats = ingest.stats();
        Ok(super::SourceStats { read: stats.accepted, bad_lines: stats.bad_documents, non_events: stats.non_events })
    }
}

type SharedState = Arc<Shared>;

/// `router` with every request checked for `Authorization: Bearer <token>` (compared in
/// constant time; `401` with a `WWW-Authenticate` challenge and a `Status` body otherwise), as
/// the ingest server checks its token. `run` puts `--metrics` behind the ingest token this way.
/// The probes ([`crate::health::PROBE_PATHS`]: `GET` / `HEAD /healthz`, `/readyz`) need no token,
/// here and on the ingest server: a kubelet cannot send one.
pub fn with_bearer(router: Router, token: BearerToken) -> Router {
    router.layer(axum::middleware::from_fn_with_state((token, None), require_bearer))
}

async fn require_bearer(
    State((token, counters)): State<(BearerToken, Option<Arc<IngestCounters>>)>,
    req: Request,
    next: Next,
) -> Response {
    let probe = matches!(*req.method(), Method::GET | Method::HEAD);
    if probe && crate::health::PROBE_PATHS.contains(&req.uri().path()) {
        return next.run(req).await;
    }
    let given = req.headers().get(header::AUTHORIZATION).map(|v| v.as_bytes());
    let bearer = given.and_then(|v| {
        let (scheme, rest) = v.split_at_checked(7)?;
        scheme.eq_ignore_ascii_case(b"bearer ").then(|| rest.trim_ascii())
    });
    let (message, challenge) = match bearer {
        Some(t) if token.matches(t) => return next.run(req).await,
        Some(_) => ("invalid bearer token", r#"Bearer realm="eventpipe", error="invalid_token""#),
        None => ("a bearer token is required (Authorization: Bearer <token>)", r#"Bearer realm="eventpipe""#),
    };
    if let Some(counters) = counters {
        bump(&counters.unauthorized);
    }
    let mut response = ApiStatus::failure(StatusCode::UNAUTHORIZED, "Unauthorized", message).into_response();
    response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(challenge));
    response
}

/// `404 NotFound` as a `Status` naming the path: the fallback of the ingest server and of the
/// `--serve` server.
pub async fn not_found(req: Request) -> ApiStatus {
    ApiStatus::failure(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!("the server could not find the requested resource {}", req.uri().path()),
    )
}

/// `405 MethodNotAllowed` as a `Status`: the method fallback of the ingest server and of the
/// `--serve` server.
pub async fn method_not_allowed(req: Request) -> ApiStatus {
    ApiStatus::failure(
        StatusCode::METHOD_NOT_ALLOWED,
        "MethodNotAllowed",
        format!(
            "the server does not allow this method on the requested resource: {} {}",
            req.method(),
            req.uri().path()
        ),
    )
}

/// The media type of `headers`' `Content-Type`, lowercased, without parameters.
fn media_type(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    Some(value.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
}

fn check_media_type(shared: &Shared, headers: &HeaderMap, accepted: &[&str]) -> Result<(), Box<ApiStatus>> {
    match media_type(headers) {
        Some(m) if accepted.contains(&m.as_str()) => Ok(()),
        given => {
            bump(&shared.counters.unsupported_media_type);
            Err(Box::new(ApiStatus::failure(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "UnsupportedMediaType",
                format!(
                    "the body of the request was in an unknown format ({}) - accepted media types include: {}",
                    given.as_deref().unwrap_or("no Content-Type"),
                    accepted.join(", ")
                ),
            )))
        }
    }
}

fn bad_request(shared: &Shared, message: impl Into<String>) -> ApiStatus {
    bump(&shared.counters.bad_requests);
    ApiStatus::failure(StatusCode::BAD_REQUEST, "BadRequest", message)
}

async fn read_body(shared: &Shared, headers: &HeaderMap, body: Body) -> Result<Bytes, ApiStatus> {
    let limit = shared.config.max_body_bytes;
    let too_large = || {
        bump(&shared.counters.too_large);
        ApiStatus::failure(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLarge",
            format!("the request body is larger than the limit of {limit} bytes"),
        )
    };
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        if std::error::Error::source(&e).is_some_and(|s| s.is::<http_body_util::LengthLimitError>()) {
            too_large()
        } else {
            bad_request(shared, format!("reading the request body: {e}"))
        }
    })
}

/// The headers passed on with events.
fn forwarded_headers(headers: &HeaderMap) -> Arc<Vec<(String, String)>> {
    Arc::new(
        headers
            .iter()
            .filter(|(name, _)| !PRIVATE_HEADERS.contains(name))
            .filter_map(|(name, value)| Some((name.as_str().to_string(), value.to_str().ok()?.to_string())))
            .collect(),
    )
}

fn queue_unavailable(shared: &Shared, message: String) -> ApiStatus {
    bump(&shared.counters.queue_full);
    let retry = shared.config.retry_after_seconds;
    ApiStatus::failure(StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable", message)
        .with_details(StatusDetails { retry_after_seconds: Some(retry), ..StatusDetails::default() })
}

/// The apiserver's `SimpleNameGenerator`: 5 random characters from a vowel-free alphabet.
fn generate_name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5).map(|_| char::from(ALPHABET[rand::random_range(0..ALPHABET.len())])).collect()
}

/// `POST /api/v1/namespaces/{ns}/events`.
async fn create(
    State(shared): State<SharedState>,
    Path(ns): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match create_inner(&shared, ns, query.as_deref(), headers, body).await {
        Ok(r) | Err(r) => r,
    }
}

/// The write options of `query` (`kind`: `CreateOptions`, `PatchOptions`, `UpdateOptions`):
/// whether it is a dry run, or the apiserver's `422` (counted as a bad request).
fn write_options(shared: &Shared, kind: &str, query: Option<&str>) -> Result<bool, Response> {
    super::request_options::write_options(kind, &super::request_options::query_pairs(query)).map_err(|status| {
        bump(&shared.counters.bad_requests);
        status.into_response()
    })
}

async fn create_inner(
    shared: &Shared,
    ns: String,
    query: Option<&str>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, Response> {
    let fail = |s: ApiStatus| s.into_response();
    let dry_run = write_options(shared, "CreateOptions", query)?;
    check_media_type(shared, &headers, &["application/json"]).map_err(|s| fail(*s))?;
    let bytes = read_body(shared, &headers, body).await.map_err(fail)?;
    let mut event: Event = go_strings::from_slice(&bytes)
        .map_err(|e| fail(bad_request(shared, format!("the body is not a core/v1 Event: {e}"))))?;
    if !event.kind.is_empty() && event.kind != "Event" {
        return Err(fail(bad_request(shared, format!("the kind in the data ({}) is not Event", event.kind))));
    }
    if !event.api_version.is_empty() && event.api_version != "v1" {
        return Err(fail(bad_request(
            shared,
            format!("the API version in the data ({}) does not match the expected API version (v1)", event.api_version),
        )));
    }
    if event.metadata.namespace.is_empty() {
        event.metadata.namespace = ns.into();
    } else if event.metadata.namespace != ns {
        return Err(fail(bad_request(
            shared,
            "the namespace of the provided object does not match the namespace sent on the request",
        )));
    }
    if event.metadata.name.is_empty() {
        if event.metadata.generate_name.is_empty() {
            bump(&shared.counters.bad_requests);
            let status = ApiStatus::failure(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                "Event \"\" is invalid: metadata.name: Required value: name or generateName is required",
            )
            .with_details(StatusDetails {
                kind: "Event".into(),
                causes: vec![StatusCause {
                    reason: "FieldValueRequired".into(),
                    message: "Required value: name or generateName is required".into(),
                    field: "metadata.name".into(),
                }],
                ..StatusDetails::default()
            });
            return Err(fail(status));
        }
        event.metadata.name = format!("{}{}", event.metadata.generate_name, generate_name_suffix()).into();
    }
    event.kind = "Event".into();
    event.api_version = "v1".into();
    if event.metadata.uid.is_empty() {
        event.metadata.uid = uuid::Uuid::new_v4().to_string().into();
    }
    event.metadata.creation_timestamp.get_or_insert_with(chrono::Utc::now);
    check_valid(shared, &event)?;
    enqueue_one(shared, event, &headers, IngestRoute::Create, StatusCode::CREATED, dry_run).await
}

/// The apiserver's `422 Invalid` ([`super::event_validation`]) for an event it would not store
/// (counted as a bad request).
fn check_valid(shared: &Shared, event: &Event) -> Result<(), Response> {
    let errors = super::event_validation::validate(event);
    if errors.is_empty() {
        return Ok(());
    }
    bump(&shared.counters.bad_requests);
    Err(super::event_validation::invalid(&event.metadata.name, &errors).into_response())
}

/// Puts one event of a create, patch or update on the queue and answers `code` with it; once
/// it is accepted, it is remembered as created (for later patches). A create of a name
/// remembered is `409 AlreadyExists`, as the apiserver answers (client-go's `recordToSink`
/// drops the event, as it would there). A `dry_run` is answered the same, and neither queued
/// nor remembered.
async fn enqueue_one(
    shared: &Shared,
    event: Event,
    headers: &HeaderMap,
    route: IngestRoute,
    code: StatusCode,
    dry_run: bool,
) -> Result<Response, Response> {
    let fail = |s: ApiStatus| s.into_response();
    let answer = json_response(code, &event);
    let key = (event.metadata.namespace.to_string(), event.metadata.name.to_string());
    let remembered = event.clone();
    if route == IngestRoute::Create
        && let Some(created) = &shared.created
    {
        let mut created = created.lock().unwrap_or_else(|p| p.into_inner());
        if created.contains(&key) {
            drop(created);
            bump(&shared.counters.already_exists);
            let name = key.1;
            return Err(fail(
                ApiStatus::failure(StatusCode::CONFLICT, "AlreadyExists", format!("events \"{name}\" already exists"))
                    .with_details(StatusDetails { name, kind: "events".into(), ..StatusDetails::default() }),
            ));
        }
        if !dry_run {
            // Reserved now, so that a second create of the name racing this one is refused.
            created.put(key.clone(), remembered.clone());
        }
    }
    if dry_run {
        return Ok(answer);
    }
    let item = Ingested { event, headers: forwarded_headers(headers), route, watch_type: None };
    let forget = || {
        if route == IngestRoute::Create
            && let Some(created) = &shared.created
        {
            created.lock().unwrap_or_else(|p| p.into_inner()).pop(&key);
        }
    };
    match tokio::time::timeout(shared.config.enqueue_timeout, shared.queue.push_all(vec![item])).await {
        Ok(Ok(())) => {
            bump(&shared.counters.accepted);
            if let Some(created) = &shared.created {
                created.lock().unwrap_or_else(|p| p.into_inner()).put(key.clone(), remembered);
            }
            Ok(answer)
        }
        Ok(Err(_)) => {
            forget();
            Err(fail(queue_unavailable(shared, "the event queue is closed (shutting down)".into())))
        }
        Err(_) => {
            forget();
            Err(fail(queue_unavailable(
                shared,
                format!("the event queue stayed full for {:?}; retry later", shared.config.enqueue_timeout),
            )))
        }
    }
}

/// Media types a `PATCH` of an event may have: client-go's strategic-merge patch, and the JSON
/// merge patch (the same result for an Event, whose patched fields are all scalars).
const PATCH_MEDIA_TYPES: &[&str] = &["application/strategic-merge-patch+json", "application/merge-patch+json"];

/// `PATCH` / `PUT /api/v1/namespaces/{ns}/events/{name}` of an event this server created (and
/// still remembers): the patch is applied to the remembered event (or the body replaces it),
/// and the result goes on as an update, answered `200`. Any other event is `404 NotFound`, and
/// client-go creates it instead (see the module docs).
async fn patch_or_update(
    State(shared): State<SharedState>,
    method: axum::http::Method,
    Path((ns, name)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match patch_or_update_inner(&shared, method, (ns, name), query.as_deref(), headers, body).await {
        Ok(r) | Err(r) => r,
    }
}

async fn patch_or_update_inner(
    shared: &Shared,
    method: axum::http::Method,
    key: (String, String),
    query: Option<&str>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, Response> {
    let fail = |s: ApiStatus| s.into_response();
    let patching = method == axum::http::Method::PATCH;
    let dry_run = write_options(shared, if patching { "PatchOptions" } else { "UpdateOptions" }, query)?;
    let accepted: &[&str] = if patching { PATCH_MEDIA_TYPES } else { &["application/json"] };
    check_media_type(shared, &headers, accepted).map_err(|s| fail(*s))?;
    let bytes = read_body(shared, &headers, body).await.map_err(fail)?;
    let known = shared.created.as_ref().and_then(|c| c.lock().unwrap_or_else(|p| p.into_inner()).get(&key).cloned());
    let Some(known) = known else {
        bump(&shared.counters.patch_not_found);
        let (_, name) = key;
        return Err(fail(
            ApiStatus::failure(StatusCode::NOT_FOUND, "NotFound", format!("events \"{name}\" not found"))
                .with_details(StatusDetails { name, kind: "events".into(), ..StatusDetails::default() }),
        ));
    };
    let mut event = if patching {
        let patch: serde_json::Value = go_strings::from_slice(&bytes)
            .map_err(|e| fail(bad_request(shared, format!("the patch is not JSON: {e}"))))?;
        if !patch.is_object() {
            return Err(fail(bad_request(shared, "the patch is not a JSON object")));
        }
        let mut merged = serde_json::to_value(&known).expect("an event always serialises");
        crate::event::merge_patch(&mut merged, patch);
        serde_json::from_value::<Event>(merged)
            .map_err(|e| fail(bad_request(shared, format!("the patched event is not a core/v1 Event: {e}"))))?
    } else {
        let mut event: Event = go_strings::from_slice(&bytes)
            .map_err(|e| fail(bad_request(shared, format!("the body is not a core/v1 Event: {e}"))))?;
        if !event.metadata.name.is_empty() && event.metadata.name != key.1 {
            return Err(fail(bad_request(
                shared,
                format!(
                    "the name of the object ({}) does not match the name on the URL ({})",
                    event.metadata.name, key.1
                ),
            )));
        }
        if !event.metadata.namespace.is_empty() && event.metadata.namespace != key.0 {
            return Err(fail(bad_request(
                shared,
                "the namespace of the provided object does not match the namespace sent on the request",
            )));
        }
        event.metadata.uid = known.metadata.uid.clone();
        event.metadata.creation_timestamp = known.metadata.creation_timestamp;
        event
    };
    // What identifies the stored object stays as it was.
    (event.metadata.namespace, event.metadata.name) = (key.0.into(), key.1.into());
    event.kind = "Event".into();
    event.api_version = "v1".into();
    check_valid(shared, &event)?;
    let route = if patching { IngestRoute::Patch } else { IngestRoute::Update };
    enqueue_one(shared, event, &headers, route, StatusCode::OK, dry_run).await
}

/// One bad line of an `/ingest` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct LineError {
    /// 1-based line where the bad document starts.
    pub line: u64,
    /// What is wrong.
    pub error: String,
}

/// The `200` answer of `POST /ingest`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct IngestReport {
    /// Events put on the queue.
    pub accepted: u64,
    /// Watch bookmarks and `ERROR` envelopes (not events; not forwarded).
    pub non_events: u64,
    /// Documents that could not be decoded.
    pub errors: Vec<LineError>,
}

/// Decodes a `POST /ingest` body: JSON lines, watch envelopes, a JSON array or a `List` —
/// what [`Decoder`] accepts — into the events it holds (each with `headers` attached, in body
/// order) and a report of the documents that are not events or could not be decoded (one
/// [`LineError`] each, with its 1-based line; `accepted` is left 0 for the caller). Never panics,
/// whatever the bytes.
///
/// # Errors
/// The body is not UTF-8 (the error gives the offset of the first bad byte).
pub fn decode_ingest_body(
    body: &[u8],
    headers: Arc<Vec<(String, String)>>,
) -> Result<(Vec<Ingested>, IngestReport), std::str::Utf8Error> {
    let text = std::str::from_utf8(body)?;
    let mut decoder = Decoder::new();
    let mut events = Vec::new();
    let mut report = IngestReport { accepted: 0, non_events: 0, errors: Vec::new() };
    let mut take = |item: Result<Decoded, super::decode::DecodeError>| match item {
        Ok(Decoded::Event { event, watch_type, line, .. }) => {
            events.push(Ingested { event, headers: headers.clone(), route: IngestRoute::Batch { line }, watch_type })
        }
        Ok(_) => report.non_events += 1,
        Err(e) => report.errors.push(LineError { line: e.line, error: e.message }),
    };
    for line in text.split('\n') {
        decoder.push_line(line, &mut take);
    }
    if let Some(e) = decoder.finish() {
        take(Err(e));
    }
    Ok((events, report))
}

/// `POST /ingest`.
async fn ingest(State(shared): State<SharedState>, headers: HeaderMap, body: Body) -> Response {
    match ingest_inner(&shared, headers, body).await {
        Ok(report) => json_response(StatusCode::OK, &report),
        Err(status) => status.into_response(),
    }
}

async fn ingest_inner(shared: &Shared, headers: HeaderMap, body: Body) -> Result<IngestReport, ApiStatus> {
    check_media_type(shared, &headers, INGEST_MEDIA_TYPES).map_err(|s| *s)?;
    let bytes = read_body(shared, &headers, body).await?;
    let (events, mut report) = decode_ingest_body(&bytes, forwarded_headers(&headers))
        .map_err(|e| bad_request(shared, format!("the body is not UTF-8 (at byte {})", e.valid_up_to())))?;
    let counters = &shared.counters;
    counters.bad_documents.fetch_add(report.errors.len() as u64, Ordering::Relaxed);
    counters.non_events.fetch_add(report.non_events, Ordering::Relaxed);
    if events.is_empty() && !report.errors.is_empty() {
        let n = report.errors.len();
        let first = &report.errors[0];
        let causes = report
            .errors
            .iter()
            .take(MAX_CAUSES)
            .map(|e| StatusCause {
                reason: "FieldValueInvalid".into(),
                message: e.error.clone(),
                field: format!("line {}", e.line),
            })
            .collect();
        return Err(bad_request(
            shared,
            format!("no event could be decoded: {n} bad document(s); first at line {}: {}", first.line, first.error),
        )
        .with_details(StatusDetails { causes, ..StatusDetails::default() }));
    }
    if events.is_empty() && report.non_events == 0 {
        return Err(bad_request(shared, "the body holds no events"));
    }
    let total = events.len();
    let deadline = tokio::time::Instant::now() + shared.config.enqueue_timeout;
    let chunk = shared.queue.capacity();
    let mut rest = events;
    while !rest.is_empty() {
        let tail = rest.split_off(chunk.min(rest.len()));
        let batch = std::mem::replace(&mut rest, tail);
        let first_line = match batch[0].route {
            IngestRoute::Batch { line } => line,
            IngestRoute::Create | IngestRoute::Patch | IngestRoute::Update => 0,
        };
        let n = batch.len() as u64;
        match tokio::time::timeout_at(deadline, shared.queue.push_all(batch)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => {
                return Err(queue_unavailable(
                    shared,
                    format!(
                        "the event queue is closed (shutting down): accepted {} of {total} events; the rest, from \
                         line {first_line}, were not",
                        report.accepted
                    ),
                ));
            }
            Err(_) => {
                return Err(queue_unavailable(
                    shared,
                    format!(
                        "the event queue stayed full for {:?}: accepted {} of {total} events; retry from line \
                         {first_line}",
                        shared.config.enqueue_timeout, report.accepted
                    ),
                ));
            }
        }
        report.accepted += n;
        counters.accepted.fetch_add(n, Ordering::Relaxed);
    }
    Ok(report)
}

impl crate::metrics::Snapshot {
    /// Adds HTTP ingest's counters (`source`: the source's name, e.g. `http:127.0.0.1:8080`):
    /// requests per status code, events accepted, error answers and bad documents per reason;
    /// its bad documents and non-events also go under the source's bad input and non-events.
    /// Its accepted events are counted in `eventpipe_events_in` by whoever counts the
    /// Broadcaster's input, not here.
    pub fn add_ingest(&mut self, source: &str, stats: &IngestStats) {
        use crate::metrics::{BAD_INPUT, INGEST_ACCEPTED, INGEST_REJECTED, INGEST_REQUESTS, NON_EVENTS};
        self.add(&BAD_INPUT, &[("source", source)], stats.bad_documents);
        self.add(&NON_EVENTS, &[("source", source)], stats.non_events);
        self.present(&INGEST_REQUESTS);
        for (code, n) in &stats.by_status {
            self.add(&INGEST_REQUESTS, &[("code", &code.to_string())], *n);
        }
        self.add(&INGEST_ACCEPTED, &[], stats.accepted);
        for (reason, n) in [
            ("unauthorized", stats.unauthorized),
            ("too_large", stats.too_large),
            ("unsupported_media_type", stats.unsupported_media_type),
            ("bad_request", stats.bad_requests),
            ("queue_full", stats.queue_full),
            ("bad_document", stats.bad_documents),
            ("already_exists", stats.already_exists),
        ] {
            self.add(&INGEST_REJECTED, &[("reason", reason)], n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_binds_need_no_token_others_do() {
        let token = BearerToken::new("abc").unwrap();
        for (addr, ok_without) in [
            ("127.0.0.1:80", true),
            ("[::1]:80", true),
            ("127.8.9.1:80", true),
            ("0.0.0.0:80", false),
            ("[::]:80", false),
            ("10.0.0.1:80", false),
        ] {
            let addr: SocketAddr = addr.parse().unwrap();
            assert_eq!(check_bind(INGEST_SERVER, addr, None).is_ok(), ok_without, "{addr}");
            assert!(check_bind(INGEST_SERVER, addr, Some(&token)).is_ok(), "{addr}");
        }
    }

    #[test]
    fn tokens_are_checked_and_compared_exactly() {
        let token = BearerToken::new("abc.DEF-123~+/==").unwrap();
        assert!(token.matches(b"abc.DEF-123~+/=="));
        assert!(!token.matches(b"abc.DEF-123~+/="));
        assert!(!token.matches(b"abc.DEF-123~+/==x"));
        assert!(!token.matches(b""));
        for bad in ["", "===", "a b", "tok\u{e9}n", "a\"b"] {
            assert!(BearerToken::new(bad).is_err(), "{bad:?}");
        }
        assert_eq!(format!("{token:?}"), "BearerToken(<redacted>)");
    }

    #[test]
    fn media_types_ignore_parameters_and_case() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("Application/JSON; charset=utf-8"));
        assert_eq!(media_type(&headers).as_deref(), Some("application/json"));
        assert_eq!(media_type(&HeaderMap::new()), None);
    }
}
