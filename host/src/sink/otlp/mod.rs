//! The OTLP logs sink (`--sink otlp:http(s)://HOST:PORT[/v1/logs]`): every sink call (create,
//! patch) becomes one OpenTelemetry log record, sent over OTLP/HTTP in binary protobuf
//! (`POST`, `Content-Type: application/x-protobuf`, an `ExportLogsServiceRequest`), to the
//! URL's path or, when it has none, [`DEFAULT_PATH`].
//!
//! The records are those of the OpenTelemetry Collector's `k8s_events` receiver, which emits one
//! per informer add or update of an Event ([`logs`]): a collector pipeline, or a backend's
//! dashboards, built for that receiver read eventpipe's records unchanged.
//!
//! The sink is the webhook's batching HTTP sink ([`WebhookSink`]: its queue, batches, adaptive
//! concurrency, back-off with `Retry-After`, delivery modes, per-object order and counters)
//! with the [`OtlpLogs`] encoding: one `ResourceLogs` per record, in call order, one request per
//! batch. As the OTLP/HTTP specification says, `429`, `502`, `503` and `504` are retried
//! (honouring `Retry-After`) and every other failure status (`400` among them) is not; a `2xx`
//! answer with a partial success (`rejected_log_records` > 0) acknowledges the batch, and the
//! refused records are counted (`eventpipe_sink_partially_rejected_total`) and logged with the
//! endpoint's message, not sent again.
//!
//! The protobuf messages are the official ones, from the `opentelemetry-proto` crate (prost
//! messages only: no gRPC).

pub mod logs;

use std::sync::Arc;

use hyper::StatusCode;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceResponse;
use prost::Message;
use prost::encoding::{WireType, encode_key, encode_varint};

use super::encoding::{Accepted, BatchEncoding};
use super::retry::Verb;
use super::webhook::WebhookConfig;
#[cfg(doc)]
use super::webhook::WebhookSink;
use super::{SinkError, SinkPatch};
use crate::event::Event;

/// The path records are posted to when the URL has none (OTLP/HTTP's default for logs).
pub const DEFAULT_PATH: &str = "/v1/logs";

/// `ExportLogsServiceRequest.resource_logs`' field number.
const RESOURCE_LOGS_FIELD: u32 = 1;

/// The OTLP/HTTP logs encoding: each call is one `ResourceLogs` ([`logs::resource_logs`]), a
/// batch is the `ExportLogsServiceRequest` holding them, in call order.
#[derive(Debug, Clone, Copy, Default)]
pub struct OtlpLogs;

impl BatchEncoding for OtlpLogs {
    fn kind(&self) -> &'static str {
        "otlp"
    }

    fn content_type(&self) -> &'static str {
        "application/x-protobuf"
    }

    /// The event as it stands after the call; the verb and patch are not part of the record
    /// (the receiver's records carry none either).
    fn encode(&self, _verb: Verb, event: &Event, _patch: SinkPatch<'_>) -> Result<Vec<u8>, SinkError> {
        let observed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        Ok(logs::resource_logs(event, observed).encode_to_vec())
    }

    /// The repeated `resource_logs` field, one encoded `ResourceLogs` after the other (what
    /// prost writes for the message holding them).
    fn body(&self, items: &[&[u8]]) -> Vec<u8> {
        let mut body = Vec::with_capacity(items.iter().map(|i| i.len() + 6).sum());
        for item in items {
            encode_key(RESOURCE_LOGS_FIELD, WireType::LengthDelimited, &mut body);
            encode_varint(item.len() as u64, &mut body);
            body.extend_from_slice(item);
        }
        body
    }

    /// OTLP/HTTP's retryable statuses: `429`, `502`, `503`, `504`.
    fn retryable(&self, status: StatusCode) -> bool {
        matches!(status.as_u16(), 429 | 502 | 503 | 504)
    }

    /// An OTLP/HTTP error answer is a protobuf `google.rpc.Status`: its message, or the body
    /// as text when it is not one.
    fn error_text(&self, answer: &[u8]) -> String {
        match RpcStatus::decode(answer) {
            Ok(status) if !status.message.is_empty() => status.message,
            _ => String::from_utf8_lossy(answer).into_owned(),
        }
    }

    /// The `ExportLogsServiceResponse`'s partial success; an answer that does not decode
    /// (an endpoint answering something else with `2xx`) refuses nothing.
    fn accepted(&self, answer: &[u8]) -> Accepted {
        let partial = ExportLogsServiceResponse::decode(answer).ok().and_then(|r| r.partial_success);
        partial.map_or_else(Accepted::default, |p| Accepted {
            rejected: u64::try_from(p.rejected_log_records).unwrap_or(0),
            message: p.error_message,
        })
    }
}

/// The fields of `google.rpc.Status` (google/rpc/status.proto) an error answer is read for;
/// `opentelemetry-proto` does not carry that message.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    /// `code`: a gRPC status code.
    #[prost(int32, tag = "1")]
    code: i32,
    /// `message`: the developer-facing error message.
    #[prost(string, tag = "2")]
    message: String,
}

/// `url` with [`DEFAULT_PATH`] when it has no path or only `/` (`http://collector:4318` →
/// `http://collector:4318/v1/logs`); otherwise as given.
pub fn endpoint(url: &str) -> String {
    let Ok(uri) = url.parse::<hyper::Uri>() else { return url.into() };
    if uri.path() != "/" {
        return url.into();
    }
    let query = uri.query().map(|q| format!("?{q}")).unwrap_or_default();
    let mut parts = uri.into_parts();
    parts.path_and_query = format!("{DEFAULT_PATH}{query}").parse().ok();
    hyper::Uri::from_parts(parts).map_or_else(|_| url.into(), |u| u.to_string())
}

/// A webhook configuration that sends OTLP log records to `url` ([`endpoint`]), named `name`;
/// tune it as a webhook's (batch sizes, concurrency, delivery, back-off) and build the sink with
/// [`WebhookSink::new`] (which fails as it says: a URL that is not absolute `http`/`https`, a
/// setting out of range, missing root certificates).
pub fn config(name: impl Into<String>, url: &str) -> WebhookConfig {
    WebhookConfig { encoding: Arc::new(OtlpLogs), ..WebhookConfig::new(name, endpoint(url)) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::logs::v1::{ExportLogsPartialSuccess, ExportLogsServiceRequest};

    #[test]
    fn the_default_path_is_added_only_when_there_is_none() {
        assert_eq!(endpoint("http://127.0.0.1:4318"), "http://127.0.0.1:4318/v1/logs");
        assert_eq!(endpoint("https://c.example:4318?x=1"), "https://c.example:4318/v1/logs?x=1");
        assert_eq!(endpoint("http://c:4318/otlp/v1/logs"), "http://c:4318/otlp/v1/logs");
    }

    #[test]
    fn a_batch_body_is_an_export_request_of_the_items_in_order() {
        let events: Vec<Event> = (0..3)
            .map(|i| {
                let mut e = Event::default();
                e.metadata.name = format!("e.{i}").into();
                e
            })
            .collect();
        let items: Vec<Vec<u8>> =
            events.iter().map(|e| OtlpLogs.encode(Verb::Create, e, SinkPatch::Bytes(&[])).unwrap()).collect();
        let refs: Vec<&[u8]> = items.iter().map(Vec::as_slice).collect();
        let request = ExportLogsServiceRequest::decode(OtlpLogs.body(&refs).as_slice()).unwrap();
        let names: Vec<String> = request
            .resource_logs
            .iter()
            .map(|r| {
                let record = &r.scope_logs[0].log_records[0];
                let name = record.attributes.iter().find(|kv| kv.key == "k8s.event.name").unwrap();
                format!("{:?}", name.value.as_ref().unwrap().value.as_ref().unwrap())
            })
            .collect();
        assert_eq!(names.len(), 3);
        assert!(names[2].contains("e.2"), "{names:?}");
    }

    #[test]
    fn a_partial_success_names_the_rejected_records() {
        let answer = ExportLogsServiceResponse {
            partial_success: Some(ExportLogsPartialSuccess {
                rejected_log_records: 2,
                error_message: "too old".into(),
            }),
        }
        .encode_to_vec();
        assert_eq!(OtlpLogs.accepted(&answer), Accepted { rejected: 2, message: "too old".into() });
        assert_eq!(OtlpLogs.accepted(b""), Accepted::default());
        assert!(OtlpLogs.retryable(StatusCode::SERVICE_UNAVAILABLE) && !OtlpLogs.retryable(StatusCode::BAD_REQUEST));
        assert!(!OtlpLogs.retryable(StatusCode::INTERNAL_SERVER_ERROR));
        let status = RpcStatus { code: 3, message: "invalid severity".into() }.encode_to_vec();
        assert_eq!(OtlpLogs.error_text(&status), "invalid severity");
        assert_eq!(OtlpLogs.error_text(b"plain text"), "plain text");
    }
}
