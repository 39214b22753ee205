//! [`HecEvents`]: the Splunk HEC encoding of the batching HTTP sink ([`BatchEncoding`]): each
//! call one HEC event object, a batch those objects one per line, HEC's `{"text","code"}`
//! answers quoted.

use hyper::StatusCode;
use serde_json::Value;

use crate::event::Event;
use crate::sink::encoding::BatchEncoding;
use crate::sink::retry::Verb;
use crate::sink::{SinkError, SinkPatch};

/// The HEC event encoding (see [`super`]).
#[derive(Debug, Clone)]
pub struct HecEvents {
    sourcetype: String,
    source: String,
    index: Option<String>,
}

impl HecEvents {
    /// Events of `sourcetype` from `source`, into `index` (none: the token's default).
    pub fn new(sourcetype: String, source: String, index: Option<String>) -> Self {
        Self { sourcetype, source, index }
    }
}

impl BatchEncoding for HecEvents {
    fn kind(&self) -> &'static str {
        "splunk"
    }

    fn content_type(&self) -> &'static str {
        "application/json"
    }

    /// The HEC event of the event as it stands after the call; `time` in seconds with
    /// milliseconds (HEC's epoch format).
    fn encode(&self, _verb: Verb, event: &Event, _patch: SinkPatch<'_>) -> Result<Vec<u8>, SinkError> {
        let time = crate::sink::otlp::logs::event_time(event).copied().unwrap_or_else(chrono::Utc::now);
        let seconds =
            serde_json::Number::from_f64(time.timestamp_millis() as f64 / 1000.0).map_or(Value::Null, Value::Number);
        let host = if event.source.host.is_empty() { &event.reporting_instance } else { &event.source.host };
        let mut object = serde_json::Map::new();
        object.insert("time".into(), seconds);
        if !host.is_empty() {
            object.insert("host".into(), host.as_str().into());
        }
        object.insert("source".into(), self.source.clone().into());
        object.insert("sourcetype".into(), self.sourcetype.clone().into());
        if let Some(index) = &self.index {
            object.insert("index".into(), index.clone().into());
        }
        let event = serde_json::to_value(event)
            .map_err(|e| SinkError::RequestConstruction(format!("encoding the event: {e}")))?;
        object.insert("event".into(), event);
        serde_json::to_vec(&object).map_err(|e| SinkError::RequestConstruction(format!("encoding the event: {e}")))
    }

    fn body(&self, items: &[&[u8]]) -> Result<Vec<u8>, SinkError> {
        Ok(items.join(&b'\n'))
    }

    /// `429`, `500` (code 8, internal error), `502`, `503` (code 9, server busy), `504`.
    fn retryable(&self, status: StatusCode) -> bool {
        matches!(status.as_u16(), 429 | 500 | 502 | 503 | 504)
    }

    /// HEC's answer `{"text":"Invalid token","code":4}` as `Invalid token (HEC code 4)`, with
    /// `invalid-event-number` when given; else the body as text.
    fn error_text(&self, answer: &[u8]) -> String {
        let Ok(value) = serde_json::from_slice::<Value>(answer) else {
            return String::from_utf8_lossy(answer).into_owned();
        };
        let (Some(text), Some(code)) = (value["text"].as_str(), value["code"].as_i64()) else {
            return String::from_utf8_lossy(answer).into_owned();
        };
        match value["invalid-event-number"].as_i64() {
            Some(n) => format!("{text} (HEC code {code}, event {n} of the batch)"),
            None => format!("{text} (HEC code {code})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_hec_objects_one_per_line() {
        let hec = HecEvents::new("kube:events".into(), "eventpipe".into(), Some("k8s".into()));
        let mut event = Event::default();
        event.metadata.name = "web.1".into();
        event.source.host = "node-a".into();
        event.last_timestamp = Some("2026-11-28T10:00:01.250Z".parse().unwrap());
        let item = hec.encode(Verb::Create, &event, SinkPatch::Bytes(&[])).unwrap();
        let body = hec.body(&[&item, &item]).unwrap();
        let lines: Vec<Value> = body.split(|b| *b == b'\n').map(|l| serde_json::from_slice(l).unwrap()).collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["time"], 1_795_860_001.25);
        assert_eq!((lines[0]["host"].as_str(), lines[0]["index"].as_str()), (Some("node-a"), Some("k8s")));
        assert_eq!(lines[0]["sourcetype"], "kube:events");
        assert_eq!(lines[0]["event"]["metadata"]["name"], "web.1");
        assert_eq!(hec.error_text(br#"{"text":"Invalid token","code":4}"#), "Invalid token (HEC code 4)");
        assert_eq!(
            hec.error_text(br#"{"text":"Invalid data format","code":6,"invalid-event-number":2}"#),
            "Invalid data format (HEC code 6, event 2 of the batch)"
        );
        assert!(hec.retryable(StatusCode::SERVICE_UNAVAILABLE) && !hec.retryable(StatusCode::BAD_REQUEST));
    }
}
