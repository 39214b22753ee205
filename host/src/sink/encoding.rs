//! What a batching HTTP sink ([`super::webhook::WebhookSink`]) puts on the wire: how one sink
//! call becomes an item, how a batch of items becomes a request body, which answers are worth
//! another attempt, and what a `2xx` answer says about items the endpoint refused.
//!
//! Two encodings share the webhook's queue, batching, adaptive concurrency, retries and
//! delivery modes: [`JsonItems`] (the webhook's `{"items":[…]}`) and
//! [`super::otlp::OtlpLogs`] (OTLP/HTTP log records in protobuf).

use hyper::StatusCode;

use super::jsonl::SinkCall;
use super::retry::Verb;
use super::{SinkError, SinkPatch};
use crate::event::Event;

/// A `2xx` answer's word on the batch: how many of its items the endpoint refused and why
/// (OTLP's partial success).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Accepted {
    /// Items the endpoint refused for good (not retried: OTLP/HTTP says a partial success is
    /// not to be sent again).
    pub rejected: u64,
    /// The endpoint's message about them (may be empty).
    pub message: String,
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
    fn body(&self, items: &[&[u8]]) -> Vec<u8>;

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

    fn body(&self, items: &[&[u8]]) -> Vec<u8> {
        let mut body = Vec::with_capacity(items.iter().map(|i| i.len() + 1).sum::<usize>() + 12);
        body.extend_from_slice(b"{\"items\":[");
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                body.push(b',');
            }
            body.extend_from_slice(item);
        }
        body.extend_from_slice(b"]}");
        body
    }

    fn retryable(&self, status: StatusCode) -> bool {
        status == StatusCode::REQUEST_TIMEOUT || status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error()
    }
}
