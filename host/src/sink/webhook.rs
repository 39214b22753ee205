//! A webhook sink: sink calls batched into JSON `POST`s to an HTTP(S) endpoint.
//!
//! Each batch is one request, `Content-Type: application/json`:
//!
//! ```json
//! {"items":[{"verb":"create","event":{…},"patch":null},{"verb":"patch","event":{…},"patch":{…}}]}
//! ```
//!
//! — the items are the lines the JSON-lines sink writes, in call order. Every attempt of one batch
//! carries the same `X-Eventpipe-Batch-Id` (a UUID) so that a receiver can drop duplicates.
//!
//! What goes on the wire is the sink's [`BatchEncoding`] ([`WebhookConfig::encoding`]): these
//! JSON items by default ([`JsonItems`]); the OTLP logs sink ([`super::otlp`]) is this same sink
//! with OTLP/HTTP protobuf log records, its own retryable statuses and partial successes.
//!
//! # Queue and batching
//! Calls are queued (at most [`WebhookConfig::queue_capacity`] events, counting those being
//! delivered: the queue depth never exceeds it) and one batcher task takes them in order: a
//! batch closes at [`WebhookConfig::max_batch`] events, at [`WebhookConfig::max_batch_bytes`]
//! bytes of items, [`WebhookConfig::max_batch_delay`] after its first event, or once no event
//! arrived for [`WebhookConfig::batch_quiet`], whichever comes first.
//!
//! The quiet close matters because callers wait for acknowledgements: a write that waits for an
//! earlier one cannot join the batch that earlier one is in. Held open for the whole
//! `max_batch_delay`, every batch of such writes would cost that delay: 600 repeats of one
//! event, each a patch after the one before, took 60 s. Under load, events keep arriving and
//! batches still fill.
//!
//! # Concurrency
//! Several batches are in flight at once, each request holding a permit of a
//! [`Controller`] ([`WebhookConfig::concurrency`]): a fixed number, or by default a limit that
//! adapts to the endpoint as Vector's Adaptive Request Concurrency does
//! ([`super::concurrency`]). The batcher waits for a permit before it fills a batch, so batches
//! grow while every permit is taken. A retry takes a permit again; a batch waiting out its
//! back-off holds none.
//!
//! # Order
//! One object's writes (keyed by the event's namespace and name) reach the endpoint in call
//! order: a call whose object has a write in a batch still in flight is held until that batch
//! ended, then joins a later batch, in order; a call may join the batch being filled with its
//! object's earlier writes. So the sink [keeps order](EventSink::keeps_order) and the tenant
//! router hands it an event's next write before the earlier one is acknowledged. After a batch
//! fails for good with [`Delivery::AtLeastOnce`], the calls held behind it fail with its error
//! rather than overtake writes that are to be submitted again.
//!
//! # Delivery
//! - [`Delivery::AtLeastOnce`] (default): a call waits for room in the queue, then for its
//!   batch's acknowledgement — a `2xx` answer — and only then returns the event. So
//!   `EventSink::create`/`patch` returning `Ok` means "acknowledged", and client-go's
//!   `recordToSink` loop ([`super::retry`]) works unchanged on top: a batch that exhausts its
//!   attempts fails its calls with [`SinkError::Transport`] (retryable), so `recordToSink`
//!   submits them again. With `max_attempts: None` a batch is retried until acknowledged (or
//!   shutdown). [`WebhookSink::submit`] is the same without waiting: it returns an [`Ack`]
//!   future once the call is queued.
//! - [`Delivery::AtMostOnce`]: a call never waits: when the queue is full the event is dropped
//!   (counted in `dropped`, and the call fails with a `503 QueueFull` [`SinkError::Status`],
//!   which `recordToSink` does not retry); otherwise it returns as soon as the event is queued.
//!   A batch is retried only when it surely was not processed: connection failures, `429` and
//!   `503`; a timeout or another `5xx` loses it (counted in `failed`).
//!
//! # Retries
//! Transport errors, timeouts ([`WebhookConfig::request_timeout`] covers the whole exchange),
//! and the statuses the encoding calls retryable ([`BatchEncoding::retryable`]; JSON items:
//! `408`, `429` and `5xx`) are retried with exponential back-off and full jitter: before attempt
//! `n + 1`, a pause uniform in `[0, min(cap, base × 2^(n−1)))`, at least the server's
//! `Retry-After` (seconds or an HTTP-date; still capped at `cap`). Any other status (`3xx`, `4xx`) is permanent:
//! the batch's calls fail with a [`SinkError::Status`] carrying the code, which `recordToSink`
//! drops as it drops an apiserver rejection. A `2xx` answer acknowledges the whole batch; items
//! it says it refused ([`BatchEncoding::accepted`], OTLP's partial success) are counted in
//! `rejected` and logged, not retried. When the answer names failed items one by one
//! ([`Accepted::failed`], an Elasticsearch `_bulk` answer), the others are acknowledged, those
//! failed for good fail their calls with their own status, and only those worth another attempt
//! are sent again, after the back-off. A `413 Payload Too Large` halves the items per request
//! (down to one; an item too large alone fails with `413`, the rest go on). A batch the
//! encoding cannot make into a body ([`BatchEncoding::body`]: a batch template that fails to
//! render it) is not sent: its calls fail for good with
//! [`SinkError::RequestConstruction`], counted in `render_errors` and `failed`, and the other
//! batches go on.
//!
//! # Transport
//! hyper 1 through hyper-util's pooled client, TLS through rustls with the `ring` provider and
//! the system's root certificates (or a given `rustls::ClientConfig`) — the stack the Kubernetes
//! client already brings, so no second HTTP stack and no C toolchain.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::Request;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::concurrency::{AdaptiveSettings, Concurrency, Controller, Permit, Response};
pub use super::encoding::{Accepted, BatchEncoding, BatchRequest, ItemFailure, JsonItems};
use super::retry::Verb;
use super::{EventSink, SinkError, SinkPatch, StatusError, Stored};
use crate::event::Event;

/// Default queue capacity, events.
pub const DEFAULT_QUEUE_CAPACITY: usize = 8192;
/// Default largest batch, events.
pub const DEFAULT_MAX_BATCH: usize = 1000;
/// Default largest batch, bytes of its items' JSON (1 MiB).
pub const DEFAULT_MAX_BATCH_BYTES: usize = 1 << 20;
/// Default wait for a batch to fill after its first event.
pub const DEFAULT_MAX_BATCH_DELAY: Duration = Duration::from_millis(100);
/// Default quiet time (no event arriving) that closes a batch before its delay is up.
pub const DEFAULT_BATCH_QUIET: Duration = Duration::from_millis(1);
/// Default time allowed for one request (connect, send, answer and its body).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Header carrying the batch id, the same on every attempt.
pub const BATCH_ID_HEADER: &str = "x-eventpipe-batch-id";
/// Bytes of an error answer's body quoted in errors.
const ERROR_BODY_BYTES: usize = 512;

/// Why a webhook sink cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// The URL is not an absolute `http` or `https` URL.
    #[error("webhook URL \"{url}\": {reason}")]
    Url {
        /// The URL as given (shown redacted).
        url: crate::redact::RedactedUrl,
        /// What is wrong with it.
        reason: String,
    },
    /// A setting is out of range.
    #[error("webhook {0}")]
    Config(&'static str),
    /// The system's root certificates could not be loaded for an `https` URL.
    #[error("webhook TLS: {0}")]
    Tls(String),
}

/// `uri` without its user information, and that information as an `Authorization: Basic`
/// header value (`user:password`, base64-encoded as RFC 7617 says).
///
/// # Errors
/// A URI that cannot be rebuilt without it.
/// Checks a webhook URL as [`WebhookSink::new`] does, without building the sink.
///
/// # Errors
/// [`WebhookError::Url`] for a URL that is not absolute `http`/`https` with a host, or whose
/// credentials cannot be used.
pub fn check_url(url: &str) -> Result<(), WebhookError> {
    parse_url(url).map(|_| ())
}

/// The URI without credentials, whether it is `https`, and the credentials as HTTP Basic
/// authentication (as curl does: they leave the URI, which the connection pool logs).
fn parse_url(url: &str) -> Result<(hyper::Uri, bool, Option<HeaderValue>), WebhookError> {
    let url_error = |reason: &str| WebhookError::Url { url: url.into(), reason: reason.into() };
    let uri: hyper::Uri = url.parse().map_err(|e: hyper::http::uri::InvalidUri| url_error(&e.to_string()))?;
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => return Err(url_error("expected an absolute http:// or https:// URL")),
    };
    if uri.host().is_none() {
        return Err(url_error("no host"));
    }
    let (uri, basic) = split_user_info(uri).map_err(|e| url_error(&e))?;
    Ok((uri, https, basic))
}

fn split_user_info(uri: hyper::Uri) -> Result<(hyper::Uri, Option<HeaderValue>), String> {
    let Some((user_info, host)) = uri.authority().and_then(|a| a.as_str().rsplit_once('@')) else {
        return Ok((uri, None));
    };
    use base64::Engine as _;
    let basic = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(user_info));
    let header = HeaderValue::from_str(&basic).map_err(|e| e.to_string())?;
    let host: hyper::http::uri::Authority = host.parse().map_err(|e: hyper::http::uri::InvalidUri| e.to_string())?;
    let mut parts = uri.into_parts();
    parts.authority = Some(host);
    let uri = hyper::Uri::from_parts(parts).map_err(|e| e.to_string())?;
    Ok((uri, Some(header)))
}

/// How deliveries are acknowledged and what a full queue does; see the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Delivery {
    /// Calls wait for room and for their batch's `2xx`.
    #[default]
    AtLeastOnce,
    /// Calls never wait; a full queue drops the event (counted).
    AtMostOnce,
}

/// Exponential back-off with full jitter between attempts of one batch.
#[derive(Clone)]
pub struct Backoff {
    /// Pause bound after the first failure (default 100 ms); doubles per failure.
    pub base: Duration,
    /// Largest pause bound (default 30 s).
    pub cap: Duration,
    /// Attempts per batch including the first (default `Some(10)`); `None`: until acknowledged.
    pub max_attempts: Option<u32>,
    /// A factor in `[0, 1)` (default `rand::random`); injectable so tests are deterministic.
    pub jitter: Arc<dyn Fn() -> f64 + Send + Sync>,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(30),
            max_attempts: Some(10),
            jitter: Arc::new(rand::random::<f64>),
        }
    }
}

impl std::fmt::Debug for Backoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backoff")
            .field("base", &self.base)
            .field("cap", &self.cap)
            .field("max_attempts", &self.max_attempts)
            .finish_non_exhaustive()
    }
}

impl Backoff {
    /// The pause after failed attempt `failures` (1-based): `jitter × min(cap, base × 2^(failures−1))`,
    /// raised to `retry_after` when the server sent one, and never above `cap`.
    pub fn delay(&self, failures: u32, retry_after: Option<Duration>) -> Duration {
        let exp = 2u32.saturating_pow(failures.saturating_sub(1).min(31));
        let bound = self.base.saturating_mul(exp).min(self.cap);
        let jittered = bound.mul_f64((self.jitter)().clamp(0.0, 1.0));
        jittered.max(retry_after.unwrap_or_default()).min(self.cap)
    }
}

/// How a webhook sink is built.
#[derive(Clone, Debug)]
pub struct WebhookConfig {
    /// Name for logs and metrics labels (e.g. the sink spec).
    pub name: String,
    /// Absolute `http://` or `https://` URL the batches are posted to.
    pub url: String,
    /// Sent as `Authorization: Bearer …` when set.
    pub bearer_token: Option<String>,
    /// The whole `Authorization` value (`GenieKey …` for Opsgenie) when set; takes precedence
    /// over `bearer_token` and the URL's credentials.
    pub authorization: Option<String>,
    /// Headers sent with every request besides `Content-Type` (a log store's credentials, a
    /// Loki tenant's `X-Scope-OrgID`); an `Authorization` here replaces `bearer_token` and the
    /// URL's credentials.
    pub headers: Vec<(hyper::header::HeaderName, HeaderValue)>,
    /// Events queued or in flight at most (default 8192).
    pub queue_capacity: usize,
    /// Events per batch at most (default 1000).
    pub max_batch: usize,
    /// Bytes per batch at most, counting its items' encodings (JSON, protobuf) and one byte
    /// between each two (a JSON item's comma) (default 1 MiB); a single larger item is sent alone.
    pub max_batch_bytes: usize,
    /// Requests in flight at once (default [`Concurrency::Adaptive`]).
    pub concurrency: Concurrency,
    /// Tuning of the adaptive concurrency controller.
    pub adaptive: AdaptiveSettings,
    /// Wait for a batch to fill after its first event (default 100 ms).
    pub max_batch_delay: Duration,
    /// A batch closes earlier once no event arrived for this long (default 1 ms): the callers
    /// still to come may be waiting for this very batch. Zero sends what is queued at once.
    pub batch_quiet: Duration,
    /// Time allowed per request, answer body included (default 10 s).
    pub request_timeout: Duration,
    /// Retries of a failed batch.
    pub backoff: Backoff,
    /// Acknowledgement and full-queue behaviour.
    pub delivery: Delivery,
    /// TLS settings for `https` (default: rustls + ring with the system's roots).
    pub tls: Option<rustls::ClientConfig>,
    /// What the requests carry (default [`JsonItems`]).
    pub encoding: Arc<dyn BatchEncoding>,
}

impl WebhookConfig {
    /// Defaults for `url`, named `name`.
    pub fn new(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            url: url.into(),
            bearer_token: None,
            authorization: None,
            headers: Vec::new(),
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            max_batch: DEFAULT_MAX_BATCH,
            max_batch_bytes: DEFAULT_MAX_BATCH_BYTES,
            concurrency: Concurrency::Adaptive,
            adaptive: AdaptiveSettings::default(),
            max_batch_delay: DEFAULT_MAX_BATCH_DELAY,
            batch_quiet: DEFAULT_BATCH_QUIET,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            backoff: Backoff::default(),
            delivery: Delivery::AtLeastOnce,
            tls: None,
            encoding: Arc::new(JsonItems),
        }
    }
}

/// Counters of one webhook sink, at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct WebhookStats {
    /// Events accepted into the queue.
    pub enqueued: u64,
    /// Events sent (counted once, on their batch's first attempt).
    pub sent: u64,
    /// Events acknowledged (`2xx`).
    pub acked: u64,
    /// Requests made (attempts of all batches).
    pub requests: u64,
    /// Attempts beyond the first of a batch.
    pub retries: u64,
    /// Events whose batch failed for good (attempts exhausted, permanent error, shutdown).
    pub failed: u64,
    /// Events refused because the queue was full ([`Delivery::AtMostOnce`]).
    pub dropped: u64,
    /// Calls the encoding could not encode (a template that failed to render an event, a
    /// patch that is not JSON: failed for good, never queued), and events of batches it could
    /// not make into a body (a batch template that failed to render them: failed for good,
    /// also counted in `failed`).
    pub render_errors: u64,
    /// Events in acknowledged batches that the endpoint said it refused (OTLP partial success:
    /// `rejected_log_records`); also counted in `acked`.
    pub rejected: u64,
    /// Events queued or in flight now (≤ `queue_capacity`).
    pub queue_depth: u64,
    /// The largest queue depth seen.
    pub max_queue_depth: u64,
    /// The configured capacity.
    pub queue_capacity: u64,
    /// Requests allowed in flight now (the adaptive controller's limit, or the fixed number).
    pub concurrency_limit: u64,
    /// Requests in flight now.
    pub requests_in_flight: u64,
}

#[derive(Debug, Default)]
struct Counters {
    enqueued: AtomicU64,
    sent: AtomicU64,
    acked: AtomicU64,
    requests: AtomicU64,
    retries: AtomicU64,
    failed: AtomicU64,
    dropped: AtomicU64,
    render_errors: AtomicU64,
    rejected: AtomicU64,
    max_queue_depth: AtomicU64,
    /// Events per batch sent (counted on its first attempt).
    batch_sizes: crate::metrics::histogram::HistogramOf<crate::metrics::histogram::Batches>,
}

/// A queued call: its encoding (JSON item, OTLP record), its object's key, its place in the queue, and who waits for the
/// outcome.
struct Item {
    encoded: Vec<u8>,
    key: u64,
    ack: Option<oneshot::Sender<Result<(), SinkError>>>,
    _slot: OwnedSemaphorePermit,
}

/// The acknowledgement of one queued call: resolves when its batch was acknowledged (`Ok`) or
/// failed for good.
///
/// # Errors
/// The batch's [`SinkError`]; [`SinkError::Transport`] when the sink shut down first.
pub struct Ack(oneshot::Receiver<Result<(), SinkError>>);

impl Future for Ack {
    type Output = Result<(), SinkError>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0)
            .poll(cx)
            .map(|r| r.unwrap_or_else(|_| Err(SinkError::Transport("webhook sink shut down before delivery".into()))))
    }
}

type HttpClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The webhook [`EventSink`]; see the [module docs](self). Needs a tokio runtime (it spawns
/// its worker task when built).
pub struct WebhookSink {
    name: String,
    encoding: Arc<dyn BatchEncoding>,
    delivery: Delivery,
    capacity: usize,
    slots: Arc<Semaphore>,
    /// Taken by a call while it waits for a slot and is queued (keeps the calls' order).
    turn: tokio::sync::Mutex<()>,
    tx: mpsc::UnboundedSender<Item>,
    counters: Arc<Counters>,
    controller: Arc<Controller>,
    closing: CancellationToken,
    abort: CancellationToken,
    worker: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for WebhookSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookSink").field("name", &self.name).field("stats", &self.stats()).finish_non_exhaustive()
    }
}

impl WebhookSink {
    /// Builds the sink and spawns its worker.
    ///
    /// # Errors
    /// [`WebhookError::Url`] for a URL that is not absolute `http`/`https`;
    /// [`WebhookError::Config`] for a zero capacity, batch size or timeout;
    /// [`WebhookError::Tls`] when an `https` URL is given no TLS config and the system's root
    /// certificates cannot be loaded.
    pub fn new(config: WebhookConfig) -> Result<Self, WebhookError> {
        let (uri, https, basic) = parse_url(&config.url)?;
        if config.queue_capacity == 0 || config.queue_capacity > Semaphore::MAX_PERMITS {
            return Err(WebhookError::Config("queue_capacity must be at least 1"));
        }
        if config.max_batch == 0 {
            return Err(WebhookError::Config("max_batch must be at least 1"));
        }
        if config.max_batch_bytes == 0 {
            return Err(WebhookError::Config("max_batch_bytes must be at least 1"));
        }
        if config.request_timeout.is_zero() {
            return Err(WebhookError::Config("request_timeout must be positive"));
        }
        let auth = match (&config.bearer_token, basic) {
            _ if config.authorization.is_some() => Some(
                HeaderValue::from_str(config.authorization.as_deref().unwrap_or_default())
                    .map_err(|_| WebhookError::Config("authorization has characters a header cannot carry"))?,
            ),
            (Some(t), _) => Some(
                HeaderValue::from_str(&format!("Bearer {t}"))
                    .map_err(|_| WebhookError::Config("bearer_token has characters a header cannot carry"))?,
            ),
            (None, basic) => basic,
        };
        let auth = if config.headers.iter().any(|(name, _)| name == AUTHORIZATION) { None } else { auth };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = hyper_rustls::HttpsConnectorBuilder::new();
        let builder = match config.tls.clone() {
            Some(tls) => builder.with_tls_config(tls),
            None if https => builder
                .with_provider_and_native_roots(provider)
                .map_err(|e| WebhookError::Tls(format!("cannot load the system's root certificates: {e}")))?,
            None => builder.with_tls_config(
                rustls::ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .map_err(|e| WebhookError::Tls(e.to_string()))?
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth(),
            ),
        };
        let connector = builder.https_or_http().enable_http1().build();
        let client: HttpClient = Client::builder(TokioExecutor::new()).build(connector);
        let (tx, rx) = mpsc::unbounded_channel();
        let counters = Arc::new(Counters::default());
        let closing = CancellationToken::new();
        let abort = CancellationToken::new();
        let controller = Controller::new(config.concurrency, config.adaptive);
        let shared = Arc::new(Shared {
            name: config.name.clone(),
            encoding: config.encoding.clone(),
            uri,
            auth,
            headers: config.headers,
            client,
            request_timeout: config.request_timeout,
            backoff: config.backoff,
            delivery: config.delivery,
            counters: counters.clone(),
            controller: controller.clone(),
            abort: abort.clone(),
        });
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        let worker = Worker {
            shared,
            max_batch: config.max_batch,
            max_batch_bytes: config.max_batch_bytes,
            max_batch_delay: config.max_batch_delay,
            batch_quiet: config.batch_quiet,
            closing: closing.clone(),
            in_flight: HashMap::new(),
            held: HashMap::new(),
            ready: VecDeque::new(),
            deliveries: 0,
            done_tx,
            done_rx,
            queue_closed: false,
        };
        let handle = tokio::spawn(worker.run(rx));
        Ok(Self {
            name: config.name,
            encoding: config.encoding,
            delivery: config.delivery,
            capacity: config.queue_capacity,
            slots: Arc::new(Semaphore::new(config.queue_capacity)),
            turn: tokio::sync::Mutex::new(()),
            tx,
            counters,
            controller,
            closing,
            abort,
            worker: Mutex::new(Some(handle)),
        })
    }

    /// The sink's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The counters now.
    pub fn stats(&self) -> WebhookStats {
        let c = &self.counters;
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        WebhookStats {
            enqueued: get(&c.enqueued),
            sent: get(&c.sent),
            acked: get(&c.acked),
            requests: get(&c.requests),
            retries: get(&c.retries),
            failed: get(&c.failed),
            dropped: get(&c.dropped),
            render_errors: get(&c.render_errors),
            rejected: get(&c.rejected),
            queue_depth: (self.capacity - self.slots.available_permits()) as u64,
            max_queue_depth: get(&c.max_queue_depth),
            queue_capacity: self.capacity as u64,
            concurrency_limit: self.controller.limit() as u64,
            requests_in_flight: self.controller.in_flight() as u64,
        }
    }

    /// Events per batch sent so far (each batch counted once, on its first attempt).
    pub fn batch_sizes(&self) -> crate::metrics::Counts {
        self.counters.batch_sizes.counts()
    }

    /// Queues one call (`patch` empty for none) and returns its acknowledgement without waiting
    /// for it (the "enqueue, then ack" API). With [`Delivery::AtLeastOnce`] this waits for room
    /// in the queue; with [`Delivery::AtMostOnce`] it never waits. Dropping the [`Ack`] does not
    /// cancel the delivery.
    ///
    /// # Errors
    /// [`SinkError::RequestConstruction`] when the patch is not JSON; [`SinkError::Transport`]
    /// after [`shutdown`](Self::shutdown); [`SinkError::Status`] `503 QueueFull` when an
    /// [`Delivery::AtMostOnce`] queue is full (the event is dropped and counted).
    pub async fn submit(&self, verb: Verb, event: &Event, patch: &[u8]) -> Result<Ack, SinkError> {
        self.enqueue(verb, event, SinkPatch::Bytes(patch)).await
    }

    /// [`submit`](Self::submit) with the patch in the form it has.
    async fn enqueue(&self, verb: Verb, event: &Event, patch: SinkPatch<'_>) -> Result<Ack, SinkError> {
        let encoded = self.encoding.encode(verb, event, patch).inspect_err(|_| {
            self.counters.render_errors.fetch_add(1, Ordering::Relaxed);
        })?;
        let kind = self.encoding.kind();
        let shut = || SinkError::Transport(format!("{kind} {} is shut down", self.name));
        if self.closing.is_cancelled() {
            return Err(shut());
        }
        // One object's writes must reach the queue in the order they were made, whatever order
        // their futures are polled in (the tenant router starts each with one poll, which the
        // runtime's cooperative budget may answer `Pending` before any await is ready, then
        // polls them in any order). So a call takes a free slot synchronously, in its first
        // poll, when no call is waiting for one; otherwise calls wait one at a time, in the
        // order they came (the lock is fair).
        let mut turn = None;
        let slot = match self.delivery {
            Delivery::AtLeastOnce => {
                match self.turn.try_lock().ok().and_then(|_| self.slots.clone().try_acquire_owned().ok()) {
                    Some(slot) => slot,
                    None => {
                        let acquire = async {
                            let held = self.turn.lock().await;
                            (self.slots.clone().acquire_owned().await, held)
                        };
                        tokio::select! {
                            (slot, held) = acquire => {
                                turn = Some(held);
                                slot.map_err(|_| shut())?
                            }
                            _ = self.closing.cancelled() => return Err(shut()),
                        }
                    }
                }
            }
            Delivery::AtMostOnce => match self.slots.clone().try_acquire_owned() {
                Ok(slot) => slot,
                Err(tokio::sync::TryAcquireError::Closed) => return Err(shut()),
                Err(tokio::sync::TryAcquireError::NoPermits) => {
                    self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                    return Err(SinkError::Status(StatusError {
                        code: 503,
                        reason: "QueueFull".into(),
                        message: format!(
                            "{kind} {} queue is full ({} events): event dropped",
                            self.name, self.capacity
                        ),
                        causes: Vec::new(),
                    }));
                }
            },
        };
        let depth = (self.capacity - self.slots.available_permits()) as u64;
        self.counters.max_queue_depth.fetch_max(depth, Ordering::Relaxed);
        let (ack_tx, ack_rx) = oneshot::channel();
        let key = self.encoding.order_key(event);
        self.tx.send(Item { encoded, key, ack: Some(ack_tx), _slot: slot }).map_err(|_| shut())?;
        drop(turn);
        self.counters.enqueued.fetch_add(1, Ordering::Relaxed);
        Ok(Ack(ack_rx))
    }

    async fn call(&self, verb: Verb, event: &Event, patch: SinkPatch<'_>) -> Result<Stored, SinkError> {
        let ack = self.enqueue(verb, event, patch).await?;
        if self.delivery == Delivery::AtLeastOnce {
            ack.await?;
        }
        Ok(Stored::AsSent)
    }

    /// Stops taking calls, delivers what is queued (retrying as configured) for at most `grace`,
    /// then fails what is left, and waits for the worker to end. Returns the final counters.
    /// Calling it again only returns the counters.
    pub async fn shutdown(&self, grace: Duration) -> WebhookStats {
        self.closing.cancel();
        let worker = self.worker.lock().await.take();
        if let Some(mut worker) = worker {
            tokio::select! {
                _ = &mut worker => {}
                _ = tokio::time::sleep(grace) => {
                    self.abort.cancel();
                    let _ = worker.await;
                }
            }
        }
        self.stats()
    }
}

/// Dropping the sink without [`shutdown`](WebhookSink::shutdown) abandons what is still queued
/// or being retried: it is failed without another attempt (its [`Ack`]s resolve with an error)
/// and the worker ends. Call `shutdown` first to drain.
impl Drop for WebhookSink {
    fn drop(&mut self) {
        self.closing.cancel();
        self.abort.cancel();
    }
}

#[async_trait]
impl EventSink for WebhookSink {
    fn keeps_order(&self) -> bool {
        true
    }

    fn max_in_flight(&self) -> Option<usize> {
        Some(self.capacity)
    }

    async fn create(&self, event: &Event) -> Result<Stored, SinkError> {
        self.call(Verb::Create, event, SinkPatch::Bytes(&[])).await
    }

    async fn update(&self, _event: &Event) -> Result<Stored, SinkError> {
        Err(SinkError::RequestConstruction(format!("the {} sink sends creates and patches only", self.encoding.kind())))
    }

    async fn patch(&self, event: &Event, patch: &[u8]) -> Result<Stored, SinkError> {
        self.patch_observed(event, SinkPatch::Bytes(patch)).await
    }

    /// The EventLogger's patch is serialised into the batch item itself (no JSON bytes made,
    /// then checked and copied).
    async fn patch_observed(&self, event: &Event, patch: SinkPatch<'_>) -> Result<Stored, SinkError> {
        self.call(Verb::Patch, event, patch).await
    }
}

/// How one attempt ended.
enum Attempt {
    Acked(Accepted),
    /// Worth another attempt; `safe`: the server surely did not process the batch.
    Retry {
        error: String,
        safe: bool,
        retry_after: Option<Duration>,
        /// `429` or `503`: the endpoint asks for fewer requests.
        back_pressure: bool,
    },
    Permanent(StatusError),
}

/// What every batch delivery needs, shared by the batcher and the delivery tasks.
struct Shared {
    name: String,
    encoding: Arc<dyn BatchEncoding>,
    uri: hyper::Uri,
    auth: Option<HeaderValue>,
    headers: Vec<(hyper::header::HeaderName, HeaderValue)>,
    client: HttpClient,
    request_timeout: Duration,
    backoff: Backoff,
    delivery: Delivery,
    counters: Arc<Counters>,
    controller: Arc<Controller>,
    abort: CancellationToken,
}

/// A batch delivery that ended: the object keys it held and whether it failed for good.
struct Finished {
    keys: Vec<u64>,
    failed: Option<SinkError>,
}

/// A batch being filled.
#[derive(Default)]
struct Batch {
    items: Vec<Item>,
    bytes: usize,
}

/// What [`Worker::next`] found.
enum Next {
    Item(Item),
    /// Nothing arrived before the deadline, or the sink is closing and nothing is queued.
    Idle,
    /// Nothing more will come: closing (or dropped) with nothing queued, held or in flight.
    End,
}

/// The batcher: takes calls in order, fills batches, and starts each batch's delivery once the
/// controller gives a permit, keeping each object's writes in order (see the module docs).
struct Worker {
    shared: Arc<Shared>,
    max_batch: usize,
    max_batch_bytes: usize,
    max_batch_delay: Duration,
    batch_quiet: Duration,
    closing: CancellationToken,
    /// Sent batches not yet finished, per object key.
    in_flight: HashMap<u64, usize>,
    /// Calls waiting for their object's batch in flight to finish, in call order.
    held: HashMap<u64, VecDeque<Item>>,
    /// Calls released from `held` (or cut off a full batch), taken before the queue.
    ready: VecDeque<Item>,
    deliveries: usize,
    done_tx: mpsc::UnboundedSender<Finished>,
    done_rx: mpsc::UnboundedReceiver<Finished>,
    queue_closed: bool,
}

impl Worker {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Item>) {
        loop {
            let first = loop {
                match self.next(&mut rx, None).await {
                    Next::Item(item) => {
                        if let Some(item) = self.admit(item) {
                            break item;
                        }
                    }
                    Next::Idle => {}
                    Next::End => return,
                }
            };
            let permit = self.permit().await;
            let batch = self.fill(first, &mut rx).await;
            let mut keys: Vec<u64> = batch.items.iter().map(|i| i.key).collect();
            keys.sort_unstable();
            keys.dedup();
            for key in &keys {
                *self.in_flight.entry(*key).or_default() += 1;
            }
            self.deliveries += 1;
            let shared = self.shared.clone();
            let done = self.done_tx.clone();
            tokio::spawn(async move {
                let failed = deliver(&shared, batch.items, permit).await;
                let _ = done.send(Finished { keys, failed });
            });
        }
    }

    /// Waits for a request permit, accounting for finished deliveries meanwhile.
    async fn permit(&mut self) -> Permit {
        let controller = self.shared.controller.clone();
        let acquire = controller.acquire();
        tokio::pin!(acquire);
        loop {
            tokio::select! {
                biased;
                Some(finished) = self.done_rx.recv() => self.finished(finished),
                permit = &mut acquire => return permit,
            }
        }
    }

    /// The next call: one released from `held` first, then the queue; accounts for finished
    /// deliveries while it waits, until `until` (none: for good).
    async fn next(&mut self, rx: &mut mpsc::UnboundedReceiver<Item>, until: Option<tokio::time::Instant>) -> Next {
        loop {
            if let Some(item) = self.ready.pop_front() {
                return Next::Item(item);
            }
            match rx.try_recv() {
                Ok(item) => return Next::Item(item),
                Err(mpsc::error::TryRecvError::Disconnected) => self.queue_closed = true,
                Err(mpsc::error::TryRecvError::Empty) => {}
            }
            let closing = self.closing.is_cancelled() || self.queue_closed;
            if closing && until.is_some() {
                return Next::Idle;
            }
            if closing && self.deliveries == 0 && self.held.is_empty() {
                return Next::End;
            }
            let sleep = tokio::time::sleep_until(until.unwrap_or_else(tokio::time::Instant::now));
            tokio::select! {
                biased;
                Some(finished) = self.done_rx.recv() => self.finished(finished),
                item = rx.recv(), if !closing => match item {
                    Some(item) => return Next::Item(item),
                    None => self.queue_closed = true,
                },
                _ = sleep, if until.is_some() => return Next::Idle,
                _ = self.closing.cancelled(), if !closing => {}
            }
        }
    }

    /// `item` when it may join the batch being filled; `None` when it was held because a batch
    /// in flight (or a call held before it) carries a write of the same object.
    fn admit(&mut self, item: Item) -> Option<Item> {
        if self.in_flight.contains_key(&item.key) || self.held.contains_key(&item.key) {
            self.held.entry(item.key).or_default().push_back(item);
            return None;
        }
        Some(item)
    }

    /// A delivery ended: its objects' held calls are released in order; after a batch failed
    /// for good with [`Delivery::AtLeastOnce`] they fail with it instead, since the failed
    /// writes are to be submitted again and must not be overtaken.
    fn finished(&mut self, finished: Finished) {
        self.deliveries -= 1;
        for key in finished.keys {
            let Some(count) = self.in_flight.get_mut(&key) else { continue };
            *count -= 1;
            if *count > 0 {
                continue;
            }
            self.in_flight.remove(&key);
            let Some(held) = self.held.remove(&key) else { continue };
            match &finished.failed {
                Some(error) if self.shared.delivery == Delivery::AtLeastOnce => {
                    self.shared.counters.failed.fetch_add(held.len() as u64, Ordering::Relaxed);
                    for item in held {
                        if let Some(ack) = item.ack {
                            let _ = ack.send(Err(error.clone()));
                        }
                    }
                }
                _ => self.ready.extend(held),
            }
        }
    }

    /// Fills a batch from `first` until it holds `max_batch` calls or `max_batch_bytes` of them,
    /// `max_batch_delay` has passed, or no call arrived for `batch_quiet`; once closing, only
    /// what is queued.
    async fn fill(&mut self, first: Item, rx: &mut mpsc::UnboundedReceiver<Item>) -> Batch {
        let deadline = tokio::time::Instant::now() + self.max_batch_delay;
        let mut batch = Batch { bytes: first.encoded.len(), items: vec![first] };
        while batch.items.len() < self.max_batch && batch.bytes < self.max_batch_bytes {
            let quiet = (tokio::time::Instant::now() + self.batch_quiet).min(deadline);
            let item = match self.next(rx, Some(quiet)).await {
                Next::Item(item) => item,
                Next::Idle | Next::End => break,
            };
            let Some(item) = self.admit(item) else { continue };
            if batch.bytes + 1 + item.encoded.len() > self.max_batch_bytes {
                self.ready.push_front(item); // the first of the next batch
                break;
            }
            batch.bytes += 1 + item.encoded.len();
            batch.items.push(item);
        }
        batch
    }
}

/// Sends one batch until acknowledged, failed for good, or aborted; each attempt holds a permit
/// of the controller (`permit` for the first). Answers the batch's calls and returns the error
/// it failed with, if it did.
///
/// Items an acknowledging answer names as failed ([`Accepted::failed`]) are answered at once
/// when they failed for good; those to retry are sent again after the back-off (as one more
/// attempt of the batch), the others are not repeated. A `413 Payload Too Large` answer halves
/// the items sent per request and sends the first half at once (the rest follow, in order, in
/// requests of that size); an item the endpoint finds too large alone fails for good with `413`
/// and the rest go on.
async fn deliver(shared: &Shared, batch: Vec<Item>, permit: Permit) -> Option<SinkError> {
    let n = batch.len() as u64;
    let mut pending = batch;
    // Items sent per request: all of them, until a `413`.
    let mut limit = pending.len();
    let body_of = |items: &[Item], limit: usize| {
        let items: Vec<&[u8]> = items.iter().take(limit).map(|i| i.encoded.as_slice()).collect();
        shared.encoding.request(&items)
    };
    // The body of the next attempt; `None`: to be made again from `pending` (after a `413` or
    // an answer naming failed items).
    let mut body = match body_of(&pending, limit) {
        Ok(body) => Some(body),
        Err(error) => return shared.unrendered(pending, error),
    };
    let kind = shared.encoding.kind();
    let id = uuid::Uuid::new_v4().to_string();
    shared.counters.sent.fetch_add(n, Ordering::Relaxed);
    shared.counters.batch_sizes.observe(n);
    let mut attempts = 0u32;
    let mut permit = Some(permit);
    let shut = |detail: String| {
        Err(SinkError::Transport(format!(
            "{kind} {}: shut down before the batch was acknowledged{detail}",
            shared.name
        )))
    };
    let outcome = loop {
        attempts += 1;
        limit = limit.clamp(1, pending.len().max(1));
        let request = match body.clone().map_or_else(|| body_of(&pending, limit), Ok) {
            Ok(request) => request,
            Err(error) => return shared.unrendered(pending, error),
        };
        body = Some(request.clone());
        let mut held = match permit.take() {
            Some(p) => p,
            None => tokio::select! {
                biased;
                _ = shared.abort.cancelled() => break shut(String::new()),
                p = shared.controller.acquire() => p,
            },
        };
        shared.counters.requests.fetch_add(1, Ordering::Relaxed);
        if attempts > 1 {
            shared.counters.retries.fetch_add(1, Ordering::Relaxed);
        }
        held.start();
        let attempt = tokio::select! {
            biased;
            _ = shared.abort.cancelled() => break shut(String::new()),
            a = shared.attempt(request, &id) => a,
        };
        let (error, safe, retry_after) = match attempt {
            Attempt::Acked(accepted) => {
                let back_pressure = accepted.failed.iter().any(|f| f.retry && f.status == 429);
                held.done(if back_pressure { Response::BackPressure } else { Response::Answered });
                if accepted.rejected > 0 {
                    shared.counters.rejected.fetch_add(accepted.rejected, Ordering::Relaxed);
                    tracing::warn!(
                        sink = %shared.name, events = n, rejected = accepted.rejected, message = %accepted.message,
                        "{kind} endpoint accepted the batch but refused some of it (partial success; not retried)"
                    );
                }
                let rest = pending.split_off(limit.min(pending.len()));
                match shared.settle_items(std::mem::take(&mut pending), &accepted.failed) {
                    None => {
                        pending = rest;
                        if pending.is_empty() {
                            break Ok(());
                        }
                        // The next items (after a `413`), in a request of their own.
                        attempts = 0;
                        body = None;
                        continue;
                    }
                    Some((mut again, error)) => {
                        again.extend(rest);
                        pending = again;
                        body = None;
                        // The endpoint said it did not take them: safe to send again.
                        (error, true, None)
                    }
                }
            }
            Attempt::Permanent(status) if status.code == 413 && limit > 1 => {
                held.done(Response::Answered);
                limit /= 2;
                tracing::debug!(sink = %shared.name, limit, "{kind} request too large, sending fewer items per request");
                body = None;
                continue;
            }
            Attempt::Permanent(status) if status.code == 413 && pending.len() > 1 => {
                held.done(Response::Answered);
                let rest = pending.split_off(1);
                tracing::warn!(sink = %shared.name, "{kind} endpoint refused an item as too large (413; not retried)");
                shared.counters.failed.fetch_add(1, Ordering::Relaxed);
                for item in std::mem::replace(&mut pending, rest) {
                    if let Some(ack) = item.ack {
                        let _ = ack.send(Err(SinkError::Status(status.clone())));
                    }
                }
                attempts = 0;
                body = None;
                continue;
            }
            Attempt::Permanent(status) => {
                held.done(Response::Answered);
                break Err(SinkError::Status(status));
            }
            Attempt::Retry { error, safe, retry_after, back_pressure } => {
                held.done(if back_pressure { Response::BackPressure } else { Response::Failed });
                (error, safe, retry_after)
            }
        };
        let exhausted = shared.backoff.max_attempts.is_some_and(|max| attempts >= max);
        if exhausted || (shared.delivery == Delivery::AtMostOnce && !safe) {
            break Err(SinkError::Transport(format!(
                "{kind} {}: {} of a batch of {n} not acknowledged after {attempts} attempt(s): {error}",
                shared.name,
                pending.len()
            )));
        }
        tracing::debug!(sink = %shared.name, attempts, %error, "{kind} batch failed, retrying");
        tokio::select! {
            biased;
            _ = shared.abort.cancelled() => break shut(format!(" ({error})")),
            _ = tokio::time::sleep(shared.backoff.delay(attempts, retry_after)) => {}
        }
    };
    let left = pending.len() as u64;
    match &outcome {
        Ok(()) => {
            shared.counters.acked.fetch_add(left, Ordering::Relaxed);
        }
        Err(error) => {
            shared.counters.failed.fetch_add(left, Ordering::Relaxed);
            tracing::warn!(sink = %shared.name, events = left, attempts, %error, "{kind} batch failed");
        }
    }
    for item in pending {
        if let Some(ack) = item.ack {
            let _ = ack.send(outcome.clone());
        }
    }
    outcome.err()
}

/// A `Retry-After` value: delay-seconds or an HTTP-date (RFC 9110 §10.2.3), as a wait from
/// `now`; a date in the past is no wait.
fn parse_retry_after(value: &str, now: chrono::DateTime<chrono::Utc>) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let date = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    Some((date.with_timezone(&chrono::Utc) - now).to_std().unwrap_or_default())
}

impl Shared {
    /// Fails `items` for good with `error`, the encoding's: their batch could not be made into
    /// a body (a batch template that failed to render it; the encoding logged which events).
    /// Counted in `render_errors` and `failed`. Returns no error, so the writes of the same
    /// objects held behind the batch go on: the failed ones are not submitted again
    /// ([`SinkError::RequestConstruction`]), so nothing can overtake them.
    fn unrendered(&self, items: Vec<Item>, error: SinkError) -> Option<SinkError> {
        let n = items.len() as u64;
        self.counters.render_errors.fetch_add(n, Ordering::Relaxed);
        self.counters.failed.fetch_add(n, Ordering::Relaxed);
        for item in items {
            if let Some(ack) = item.ack {
                let _ = ack.send(Err(error.clone()));
            }
        }
        None
    }

    /// Answers the items of an acknowledged batch by what the answer said of each (`failed`,
    /// by place, ascending): acknowledged, or failed for good (counted, logged with the
    /// endpoint's reason, the call failed with a [`SinkError::Status`] of the item's status).
    /// Returns the items to send again, in order, with what to say of them; `None` when there
    /// are none.
    fn settle_items(&self, items: Vec<Item>, failed: &[ItemFailure]) -> Option<(Vec<Item>, String)> {
        let kind = self.encoding.kind();
        let mut failures = failed.iter().peekable();
        let mut again = Vec::new();
        let (mut acked, mut refused) = (0u64, 0u64);
        let mut first_retry: Option<&ItemFailure> = None;
        for (index, mut item) in items.into_iter().enumerate() {
            while failures.peek().is_some_and(|f| f.index < index) {
                failures.next();
            }
            let failure = failures.peek().filter(|f| f.index == index).copied();
            let answer = match failure {
                None => {
                    acked += 1;
                    Ok(())
                }
                Some(f) if f.retry => {
                    first_retry.get_or_insert(f);
                    again.push(item);
                    continue;
                }
                Some(f) => {
                    refused += 1;
                    tracing::warn!(
                        sink = %self.name, status = f.status, reason = %f.reason,
                        "{kind} endpoint refused an item of the batch (not retried)"
                    );
                    Err(SinkError::Status(StatusError {
                        code: f.status,
                        reason: hyper::StatusCode::from_u16(f.status)
                            .ok()
                            .and_then(|s| s.canonical_reason())
                            .unwrap_or("Refused")
                            .replace(' ', ""),
                        message: format!("{kind} {} refused the item: {}", self.name, f.reason),
                        causes: Vec::new(),
                    }))
                }
            };
            if let Some(ack) = item.ack.take() {
                let _ = ack.send(answer);
            }
        }
        self.counters.acked.fetch_add(acked, Ordering::Relaxed);
        self.counters.failed.fetch_add(refused, Ordering::Relaxed);
        let first = first_retry?;
        let error = format!("{} item(s) to send again, the first {}: {}", again.len(), first.status, first.reason);
        Some((again, error))
    }

    async fn attempt(&self, batch: BatchRequest, id: &str) -> Attempt {
        let mut request =
            Request::post(self.uri.clone()).header(CONTENT_TYPE, batch.content_type).header(BATCH_ID_HEADER, id);
        if let Some(auth) = &self.auth {
            request = request.header(AUTHORIZATION, auth.clone());
        }
        for (name, value) in self.headers.iter().chain(batch.headers.iter()) {
            request = request.header(name, value);
        }
        let request = match request.body(Full::new(batch.body)) {
            Ok(r) => r,
            Err(e) => {
                return Attempt::Permanent(StatusError {
                    code: 0,
                    reason: "BadRequest".into(),
                    message: e.to_string(),
                    causes: Vec::new(),
                });
            }
        };
        let exchange = async {
            let response = self.client.request(request).await?;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, self.encoding.max_answer_bytes())
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            Ok::<_, hyper_util::client::legacy::Error>((parts, body))
        };
        let (parts, answer) = match tokio::time::timeout(self.request_timeout, exchange).await {
            Err(_) => {
                return Attempt::Retry {
                    error: format!("no answer within {:?}", self.request_timeout),
                    safe: false,
                    retry_after: None,
                    back_pressure: false,
                };
            }
            Ok(Err(e)) => {
                let error = std::iter::successors(Some(&e as &dyn std::error::Error), |e| e.source())
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(": ");
                return Attempt::Retry { error, safe: e.is_connect(), retry_after: None, back_pressure: false };
            }
            Ok(Ok(answer)) => answer,
        };
        let status = parts.status;
        if status.is_success() {
            return Attempt::Acked(self.encoding.accepted(&answer));
        }
        let text = self.encoding.error_text(&answer);
        let text = text.get(..text.floor_char_boundary(ERROR_BODY_BYTES)).unwrap_or(&text);
        let error = format!("{status}: {text}");
        let code = status.as_u16();
        if self.encoding.retryable(status) {
            let retry_after =
                parts.headers.get(RETRY_AFTER).and_then(|v| parse_retry_after(v.to_str().ok()?, chrono::Utc::now()));
            let back_pressure = code == 429 || code == 503;
            return Attempt::Retry { error, safe: back_pressure, retry_after, back_pressure };
        }
        Attempt::Permanent(StatusError {
            code,
            reason: status.canonical_reason().unwrap_or("").replace(' ', ""),
            message: format!("{} {} answered {error}", self.encoding.kind(), self.name),
            causes: Vec::new(),
        })
    }
}

impl crate::metrics::Snapshot {
    /// Adds a webhook sink's counters under its name, and its batch sizes.
    pub fn add_webhook(&mut self, sink: &WebhookSink) {
        self.add_sink_stats(sink.name(), &sink.stats());
        self.add_histogram(&crate::metrics::SINK_BATCH_SIZE, &[("sink", sink.name())], &sink.batch_sizes());
    }

    /// Adds queued-sink counters under `name`: events sent, acknowledged, retried, failed,
    /// dropped for a full queue, refused in an acknowledged batch; the queue's depth and capacity, the concurrency limit and the
    /// requests in flight (gauges, summed).
    pub fn add_sink_stats(&mut self, name: &str, s: &WebhookStats) {
        use crate::metrics::{
            SINK_ACKED, SINK_CONCURRENCY_LIMIT, SINK_DROPPED, SINK_FAILURES, SINK_PARTIAL_REJECTED,
            SINK_QUEUE_CAPACITY, SINK_QUEUE_DEPTH, SINK_REQUESTS_IN_FLIGHT, SINK_RETRIES, SINK_SENT,
        };
        for (family, n) in [
            (&SINK_SENT, s.sent),
            (&SINK_ACKED, s.acked),
            (&SINK_RETRIES, s.retries),
            (&SINK_FAILURES, s.failed),
            (&SINK_PARTIAL_REJECTED, s.rejected),
            (&SINK_QUEUE_DEPTH, s.queue_depth),
            (&SINK_QUEUE_CAPACITY, s.queue_capacity),
            (&SINK_CONCURRENCY_LIMIT, s.concurrency_limit),
            (&SINK_REQUESTS_IN_FLIGHT, s.requests_in_flight),
        ] {
            self.add(family, &[("sink", name)], n);
        }
        self.add(&SINK_DROPPED, &[("sink", name), ("reason", "queue_full")], s.dropped);
        self.add(&crate::metrics::SINK_RENDER_ERRORS, &[("sink", name)], s.render_errors);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_the_url_become_basic_authentication_and_leave_the_uri() {
        let uri: hyper::Uri = "https://alice:s3cret@hooks.example:8443/e?token=t".parse().unwrap();
        let (uri, auth) = split_user_info(uri).unwrap();
        assert_eq!(uri.to_string(), "https://hooks.example:8443/e?token=t");
        // base64("alice:s3cret")
        assert_eq!(auth.unwrap(), "Basic YWxpY2U6czNjcmV0");
        let (plain, none) = split_user_info("http://h/x".parse().unwrap()).unwrap();
        assert_eq!((plain.to_string().as_str(), none), ("http://h/x", None));
    }

    /// A receiver answering `200` to every request; returns its URL and its request count.
    async fn acknowledging_receiver() -> (String, Arc<AtomicU64>) {
        let requests = Arc::new(AtomicU64::new(0));
        let counted = requests.clone();
        let app = axum::Router::new().route(
            "/",
            axum::routing::post(move || {
                counted.fetch_add(1, Ordering::SeqCst);
                async { hyper::StatusCode::OK }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (url, requests)
    }

    fn event(name: &str) -> Event {
        let mut event = Event::default();
        event.metadata.name = name.into();
        event
    }

    #[tokio::test]
    async fn a_write_waiting_for_the_previous_acknowledgement_does_not_wait_out_the_batch_delay() {
        let (url, requests) = acknowledging_receiver().await;
        let config = WebhookConfig { max_batch_delay: Duration::from_secs(60), ..WebhookConfig::new("w", url) };
        let sink = WebhookSink::new(config).unwrap();
        // One event's create, then its patches: each call waits for the one before.
        let writes = async {
            sink.create(&event("e.1")).await.unwrap();
            for _ in 0..3 {
                sink.patch(&event("e.1"), b"{}").await.unwrap();
            }
        };
        tokio::time::timeout(Duration::from_secs(10), writes).await.expect("no batch waited out its delay");
        assert_eq!(requests.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn calls_queued_together_go_in_one_batch() {
        let (url, requests) = acknowledging_receiver().await;
        let sink = WebhookSink::new(WebhookConfig::new("w", url)).unwrap();
        let mut acks = Vec::new();
        for i in 0..20 {
            acks.push(sink.submit(Verb::Create, &event(&format!("e.{i}")), &[]).await.unwrap());
        }
        for ack in acks {
            ack.await.unwrap();
        }
        assert_eq!((requests.load(Ordering::SeqCst), sink.stats().acked), (1, 20));
    }

    #[test]
    fn retry_after_is_seconds_or_an_http_date() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-11-27T14:00:00Z").unwrap().to_utc();
        assert_eq!(parse_retry_after(" 120 ", now), Some(Duration::from_secs(120)));
        assert_eq!(parse_retry_after("Fri, 27 Nov 2026 14:00:30 GMT", now), Some(Duration::from_secs(30)));
        assert_eq!(parse_retry_after("Fri, 27 Nov 2026 13:00:00 GMT", now), Some(Duration::ZERO), "in the past");
        assert_eq!(parse_retry_after("soon", now), None);
    }

    #[tokio::test]
    async fn batches_close_at_max_batch_bytes() {
        let (url, requests) = acknowledging_receiver().await;
        let one = JsonItems.encode(Verb::Create, &event("e.00"), SinkPatch::Bytes(&[])).unwrap().len();
        // Room for three items and the commas between them, not four.
        let config = WebhookConfig { max_batch_bytes: 4 * one + 2, ..WebhookConfig::new("w", url) };
        let sink = WebhookSink::new(config).unwrap();
        let mut acks = Vec::new();
        for i in 0..12 {
            acks.push(sink.submit(Verb::Create, &event(&format!("e.{i:02}")), &[]).await.unwrap());
        }
        for ack in acks {
            ack.await.unwrap();
        }
        assert_eq!((requests.load(Ordering::SeqCst), sink.stats().acked), (4, 12));
    }

    #[test]
    fn backoff_is_exponential_capped_jittered_and_honours_retry_after() {
        let backoff = Backoff {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(1),
            max_attempts: None,
            jitter: Arc::new(|| 0.5),
        };
        let ms = |failures, retry_after| backoff.delay(failures, retry_after).as_millis();
        assert_eq!([ms(1, None), ms(2, None), ms(3, None), ms(4, None)], [50, 100, 200, 400]);
        assert_eq!(ms(5, None), 500, "bound capped at 1 s, then jittered");
        assert_eq!(ms(80, None), 500, "no overflow");
        assert_eq!(ms(1, Some(Duration::from_millis(300))), 300, "at least Retry-After");
        assert_eq!(ms(1, Some(Duration::from_secs(60))), 1000, "Retry-After is capped too");
        let none = Backoff { jitter: Arc::new(|| 0.0), ..backoff.clone() };
        assert_eq!(none.delay(3, None), Duration::ZERO, "full jitter reaches zero");
    }
}
