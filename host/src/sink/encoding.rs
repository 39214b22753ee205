//! What a batching HTTP sink ([`super::webhook::WebhookSink`]) puts on the wire: how one sink
//! call becomes an item, how a batch of items becomes a request body, which answers are worth
//! another attempt, and what a `2xx` answer says about items the endpoint refused.
//!
//! The encodings share the webhook's queue, batching, adaptive concurrency, retries and
//! delivery modes: [`JsonItems`] (the webhook's `{"items":[…]}`),
//! [`super::otlp::OtlpLogs`] (OTLP/HTTP log records in protobuf), and the log stores'
//! [`super::loki::LokiPush`], [`super::elasticsearch::Bulk`] and [`super::splunk::HecEvents`].

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use bytes::Bytes;
use hyper::StatusCode;
use hyper::header::{HeaderName, HeaderValue};

use super::jsonl::SinkCall;
use super::retry::Verb;
use super::{SinkError, SinkPatch};
use crate::event::Event;

/// A `2xx` answer's word on the batch: how many of its items the endpoint refused and why
/// (OTLP's partial success), or which items failed, one by one (an Elasticsearch `_bulk`
/// answer's `items`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Accepted {
    /// Items the endpoint refused for good, counted only: which ones it does not say (not
    /// retried: OTLP/HTTP says a partial success is not to be sent again).
    pub rejected: u64,
    /// The endpoint's message about them (may be empty).
    pub message: String,
    /// Items that failed, by their place in the batch as sent (0-based, ascending): those marked
    /// [`ItemFailure::retry`] are sent again (alone, in a smaller batch, after the batch's
    /// back-off), the others fail their calls for good. Items not named here are acknowledged.
    pub failed: Vec<ItemFailure>,
}

/// One item of an acknowledged batch that the endpoint did not take (a `_bulk` item whose
/// `status` is not `2xx`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemFailure {
    /// The item's place in the batch as sent (0-based).
    pub index: usize,
    /// The item's HTTP status (`429`, `400`, …).
    pub status: u16,
    /// What the endpoint said about it (`mapper_parsing_exception: failed to parse …`).
    pub reason: String,
    /// Whether it is worth another attempt (`429`, `5xx`).
    pub retry: bool,
}

/// The key that keeps one object's writes in order: a hash of the event's namespace and name
/// (two objects of one hash are merely kept in order with each other).
pub fn object_key(event: &Event) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    event.metadata.namespace.hash(&mut hasher);
    event.metadata.name.hash(&mut hasher);
    hasher.finish()
}

/// A batch's request as an encoding makes it ([`BatchEncoding::request`]): the body, its
/// `Content-Type`, and further headers (after the sink's own; an encoder plugin may give some).
#[derive(Debug, Clone)]
pub struct BatchRequest {
    /// The body.
    pub body: Bytes,
    /// The `Content-Type` header.
    pub content_type: HeaderValue,
    /// More headers, sent after the sink's configured ones.
    pub headers: Arc<[(HeaderName, HeaderValue)]>,
}

/// How a batching HTTP sink encodes its calls and reads its answers.
pub trait BatchEncoding: std::fmt::Debug + Send + Sync + 'static {
    /// What the sink is called in logs and errors (`webhook`, `otlp`).
    fn kind(&self) -> &'static str;

    /// The request's `Content-Type`.
    fn content_type(&self) -> &'static str;

    /// One call (`verb` on `event`, with its `patch`) as an item of a batch.
    ///
    /// # Errors
    /// [`SinkError::RequestConstruction`] when the call cannot be encoded (a patch that is not
    /// JSON, for the encodings that embed it).
    fn encode(&self, verb: Verb, event: &Event, patch: SinkPatch<'_>) -> Result<Vec<u8>, SinkError>;

    /// The request body of a batch of items, in call order.
    ///
    /// # Errors
    /// [`SinkError::RequestConstruction`] when the batch cannot be made into a body (a batch
    /// template that fails to render it, [`super::template`]): the delivery fails the batch's
    /// calls for good with it, counts them (`render_errors`, `failed`), and goes on with the
    /// other batches. The encoding logs what failed, with the events' names.
    fn body(&self, items: &[&[u8]]) -> Result<Vec<u8>, SinkError>;

    /// The request of a batch of items, in call order: by default [`body`](Self::body) with
    /// [`content_type`](Self::content_type) and no other header. An encoding whose headers
    /// depend on the batch (an encoder plugin's answer) makes its own.
    ///
    /// # Errors
    /// As [`body`](Self::body).
    fn request(&self, items: &[&[u8]]) -> Result<BatchRequest, SinkError> {
        Ok(BatchRequest {
            body: Bytes::from(self.body(items)?),
            content_type: HeaderValue::from_static(self.content_type()),
            headers: Arc::from([]),
        })
    }

    /// Whether an answer with this (non-`2xx`) status is worth another attempt; any other
    /// fails the batch for good.
    fn retryable(&self, status: StatusCode) -> bool;

    /// What an error answer's body says, for errors and logs (by default the body as text;
    /// cut to 512 bytes by the caller).
    fn error_text(&self, answer: &[u8]) -> String {
        String::from_utf8_lossy(answer).into_owned()
    }

    /// What the body of a `2xx` answer says about refused items (nothing by default).
    fn accepted(&self, _answer: &[u8]) -> Accepted {
        Accepted::default()
    }

    /// The key whose writes the delivery keeps in call order ([`object_key`] by default: one
    /// object's writes). A write whose key has a batch in flight waits for it to end. Loki keeps
    /// a stream's entries in order instead ([`super::loki`]); the key must be the same for all of
    /// one object's writes, so that the object's order is kept too.
    fn order_key(&self, event: &Event) -> u64 {
        object_key(event)
    }

    /// The largest answer body read, bytes (64 KiB by default); a longer one is read as empty.
    /// An Elasticsearch `_bulk` answer names every item, so it takes more.
    fn max_answer_bytes(&self) -> usize {
        64 << 10
    }
}

/// The webhook's encoding: each call is the JSON-lines sink's line
/// (`{"verb":…,"event":…,"patch":…}`), a batch is `{"items":[…]}` (`application/json`);
/// `408`, `429` and `5xx` are retried.
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonItems;

impl BatchEncoding for JsonItems {
    fn kind(&self) -> &'static str {
        "webhook"
    }

    fn content_type(&self) -> &'static str {
        "application/json"
    }

    fn encode(&self, verb: Verb, event: &Event, patch: SinkPatch<'_>) -> Result<Vec<u8>, SinkError> {
        let call = SinkCall::with(verb, event, patch)?;
        serde_json::to_vec(&call).map_err(|e| SinkError::RequestConstruction(format!("encoding the event: {e}")))
    }

    fn body(&self, items: &[&[u8]]) -> Result<Vec<u8>, SinkError> {
        let mut body = Vec::with_capacity(items.iter().map(|i| i.len() + 1).sum::<usize>() + 12);
        body.extend_from_slice(b"{\"items\":[");
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                body.push(b',');
            }
            body.extend_from_slice(item);
        }
        body.extend_from_slice(b"]}");
        Ok(body)
    }

    fn retryable(&self, status: StatusCode) -> bool {
        status == StatusCode::REQUEST_TIMEOUT || status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error()
    }
}
