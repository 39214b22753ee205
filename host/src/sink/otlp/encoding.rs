//! [`OtlpLogs`]: the OTLP/HTTP logs encoding of the batching HTTP sink ([`BatchEncoding`]):
//! calls as `ResourceLogs`, batches as an `ExportLogsServiceRequest`, OTLP/HTTP's retryable
//! statuses, partial successes and `google.rpc.Status` error answers.

use hyper::StatusCode;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceResponse;
use prost::Message;
use prost::encoding::{WireType, encode_key, encode_varint};

use super::logs;
use crate::event::Event;
use crate::sink::encoding::{Accepted, BatchEncoding};
use crate::sink::retry::Verb;
use crate::sink::{SinkError, SinkPatch};

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
    fn body(&self, items: &[&[u8]]) -> Result<Vec<u8>, SinkError> {
        let mut body = Vec::with_capacity(items.iter().map(|i| i.len() + 6).sum());
        for item in items {
            encode_key(RESOURCE_LOGS_FIELD, WireType::LengthDelimited, &mut body);
            encode_varint(item.len() as u64, &mut body);
            body.extend_from_slice(item);
        }
        Ok(body)
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
            ..Accepted::default()
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

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::logs::v1::{ExportLogsPartialSuccess, ExportLogsServiceRequest};

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
        let request = ExportLogsServiceRequest::decode(OtlpLogs.body(&refs).unwrap().as_slice()).unwrap();
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
        assert_eq!(OtlpLogs.accepted(&answer), Accepted { rejected: 2, message: "too old".into(), failed: Vec::new() });
        assert_eq!(OtlpLogs.accepted(b""), Accepted::default());
        assert!(OtlpLogs.retryable(StatusCode::SERVICE_UNAVAILABLE) && !OtlpLogs.retryable(StatusCode::BAD_REQUEST));
        assert!(!OtlpLogs.retryable(StatusCode::INTERNAL_SERVER_ERROR));
        let status = RpcStatus { code: 3, message: "invalid severity".into() }.encode_to_vec();
        assert_eq!(OtlpLogs.error_text(&status), "invalid severity");
        assert_eq!(OtlpLogs.error_text(b"plain text"), "plain text");
    }
}
