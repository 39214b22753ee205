//! Where correlated events go: the [`EventSink`] trait (client-go `record.EventSink`), the
//! `recordToSink` retry loop ([`retry`]) and the built-in sinks: JSON lines ([`jsonl`]), the
//! Kubernetes API ([`k8s`], [`series`]), sink plugins ([`plugin`]), webhooks ([`webhook`]),
//! OTLP logs ([`otlp`], the webhook's batching with another [`encoding`]), the log stores Loki
//! ([`loki`]), Elasticsearch / OpenSearch ([`elasticsearch`]) and Splunk HEC ([`splunk`]) on the
//! same batching, and event counters ([`event_metrics`]); a hot standby's stand-in for all of
//! them ([`standby`]).

pub mod concurrency;
pub mod elasticsearch;
pub mod encoder;
pub mod encoding;
pub mod endpoint;
pub mod event_metrics;
pub mod jsonl;
pub mod k8s;
pub mod loki;
pub mod otlp;
pub mod plugin;
pub mod retry;
pub mod series;
pub mod set;
mod spec;
pub mod splunk;
pub mod standby;
mod stats;
pub mod template;
pub mod watch_cache;
pub mod webhook;

use async_trait::async_trait;

use crate::correlator::{EventCorrelateResult, EventPatch};
use crate::event::Event;

pub use crate::k8s::{CAUSE_NAMESPACE_TERMINATING, REASON_ALREADY_EXISTS, StatusError};
pub use retry::{RetryPolicy, WriteOutcome, deliver, write_event};
pub use spec::{SinkEntry, SinkSpec, SinkSpecError};
pub use stats::SinkStats;

/// What a sink call stored, for the correlator's `update_state`: the event as it was sent, or
/// the sink's own copy of it.
#[derive(Debug, Clone, PartialEq)]
pub enum Stored {
    /// The event exactly as sent: a sink that stores nothing of its own (JSON lines, webhook),
    /// as client-go's test sinks echo the event back. The caller keeps the event it sent; no
    /// copy is made.
    AsSent,
    /// The sink's copy: the API server's answer (with its name and resourceVersion), a plugin's
    /// or the watch cache's stored object.
    Copy(Box<Event>),
}

/// The body of a `recordToSink` patch: the EventLogger's patch as it computed it, or JSON bytes
/// made elsewhere (an events.k8s.io series patch; empty for client-go's empty body).
#[derive(Debug, Clone, Copy)]
pub enum SinkPatch<'a> {
    /// The EventLogger's patch (client-go `eventObserve`'s), not yet serialised.
    Observed(&'a EventPatch),
    /// A strategic-merge patch as JSON bytes (may be empty).
    Bytes(&'a [u8]),
}

impl Stored {
    /// The sink's own copy `event`.
    pub fn copy(event: Event) -> Self {
        Stored::Copy(Box::new(event))
    }
}

/// What a successful [`EventSink::write`] leaves for the correlator's `update_state`: the
/// event the sink stored, and whether it is the result's own event as sent.
#[derive(Debug, Clone, PartialEq)]
pub enum StoredEvent {
    /// The result's own box, sent as the correlator's `finish` returned it ([`Stored::AsSent`];
    /// a create clears its resourceVersion, which no correlator key reads): its client-go
    /// `getEventKey` is the one `prepare` computed
    /// ([`crate::correlator::PreparedEvent::state_key`]).
    AsSent(Box<Event>),
    /// The sink's own copy ([`Stored::Copy`]): the API server's answer, a plugin's or the watch
    /// cache's stored object.
    Copy(Box<Event>),
}

impl StoredEvent {
    /// The stored event.
    pub fn event(&self) -> &Event {
        match self {
            StoredEvent::AsSent(event) | StoredEvent::Copy(event) => event,
        }
    }
}

/// Why a sink call failed, in the classes client-go's `recordEvent` tells apart.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SinkError {
    /// The request could not be built (client-go `restclient.RequestConstructionError`): dropped.
    #[error("request construction error: {0}")]
    RequestConstruction(String),
    /// The server answered with a failure status (`errors.StatusError`): dropped, except that a
    /// 404 on patch falls back to create.
    #[error("server rejected the event: {} {} {}", .0.code, .0.reason, .0.message)]
    Status(StatusError),
    /// The server answered with something that is not an Event (`errors.UnexpectedObjectError`): retried.
    #[error("unexpected object in response: {0}")]
    UnexpectedObject(String),
    /// Anything else: transport errors, timeouts, a full queue downstream: retried.
    #[error("{0}")]
    Transport(String),
    /// The sink refused the event for good, for a reason it names (a sink plugin's `permanent`
    /// answer, an answer that is not one result per request, a call that trapped or ran out of
    /// fuel or memory): dropped, not retried, counted under `reason`.
    #[error("{message}")]
    Refused {
        /// Counted under this (`Permanent`, `PluginGarbage`, `PluginFailed`).
        reason: &'static str,
        /// What the sink said, with the plugin, tenant and event where it names them.
        message: String,
    },
}

impl SinkError {
    /// Whether `recordToSink` tries again after this error (client-go: only unexpected objects
    /// and non-API errors are retried).
    pub fn is_retryable(&self) -> bool {
        matches!(self, SinkError::UnexpectedObject(_) | SinkError::Transport(_))
    }
}

/// client-go `record.EventSink`: where events are written. Each call returns what the sink
/// stored ([`Stored`]: the event as sent, or for the Kubernetes API the server's copy with its
/// name and resourceVersion), which the correlator remembers with `update_state`.
///
/// # Errors
/// Every method returns a [`SinkError`] whose class decides the retry policy.
#[async_trait]
pub trait EventSink: Send + Sync {
    /// Creates the event (`POST /api/v1/namespaces/{ns}/events`).
    async fn create(&self, event: &Event) -> Result<Stored, SinkError>;
    /// Replaces the event (`PUT …/events/{name}`); unused by `recordToSink`, kept for parity.
    async fn update(&self, event: &Event) -> Result<Stored, SinkError>;
    /// Applies a strategic-merge patch (`PATCH …/events/{name}`,
    /// `application/strategic-merge-patch+json`) to the event named `event.metadata.name`.
    /// `patch` may be empty: client-go sends an empty body for a count > 1 event it never saw.
    async fn patch(&self, event: &Event, patch: &[u8]) -> Result<Stored, SinkError>;

    /// [`patch`](Self::patch) as `recordToSink` calls it ([`deliver`]), with the patch in the
    /// form it has. By default a [`SinkPatch::Observed`] patch is serialised to JSON and given
    /// to `patch`; a sink that embeds the patch in JSON of its own (the JSON-lines and webhook
    /// sinks) serialises it in place instead, without checking bytes it made itself.
    ///
    /// # Errors
    /// As [`patch`](Self::patch); [`SinkError::RequestConstruction`] when
    /// [`SinkPatch::Bytes`] are not JSON, for the sinks that embed them.
    async fn patch_observed(&self, event: &Event, patch: SinkPatch<'_>) -> Result<Stored, SinkError> {
        match patch {
            SinkPatch::Observed(p) => self.patch(event, &p.to_json()).await,
            SinkPatch::Bytes(bytes) => self.patch(event, bytes).await,
        }
    }

    /// Whether the sink delivers one event's writes in the order they were called, even while
    /// earlier ones are still in flight (the webhook sink: [`webhook`]). The tenant router then
    /// starts an event's next write without waiting for the one before to end, so that one
    /// event's repeats share requests; other sinks (default `false`) get them one at a time.
    fn keeps_order(&self) -> bool {
        false
    }

    /// Writes in flight this sink bounds by itself (the webhook sink's queue capacity), when it
    /// does; the tenant router's window for it is then at least this many.
    fn max_in_flight(&self) -> Option<usize> {
        None
    }

    /// Writes one correlated result and returns how that ended, with the event as the sink
    /// stored it on success (for `update_state`: [`StoredEvent`]). By default client-go
    /// `recordToSink` ([`deliver`]): patch when count > 1, create otherwise, retried per `policy`
    /// until `cancel`. A sink that records in its own way (events.k8s.io series,
    /// [`series::SeriesSink`]) replaces it.
    async fn write(
        &self,
        result: EventCorrelateResult,
        policy: &RetryPolicy,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> (WriteOutcome, Option<StoredEvent>) {
        deliver(self, result, policy, cancel).await
    }
}
