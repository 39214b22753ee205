//! [`LokiPush`]: the Loki push encoding of the batching HTTP sink ([`BatchEncoding`]): each
//! call one entry of its label set's stream, a batch one push of those streams (JSON, or a
//! snappy-compressed protobuf `PushRequest`), a stream's entries sorted by time.

use std::hash::{Hash, Hasher};

use hyper::StatusCode;
use indexmap::IndexMap;
use prost::Message;
use serde::{Deserialize, Serialize};

use super::push::{EntryAdapter, LabelPairAdapter, PushRequest, StreamAdapter, Timestamp};
use super::{FALLBACK_LABEL, LabelField, LokiFormat};
use crate::event::Event;
use crate::sink::encoding::BatchEncoding;
use crate::sink::retry::Verb;
use crate::sink::{SinkError, SinkPatch};

/// The Loki push encoding (see [`super`]).
#[derive(Debug, Clone)]
pub struct LokiPush {
    labels: Vec<LabelField>,
    format: LokiFormat,
    structured_metadata: bool,
}

/// One queued entry, as the batch's items carry it (JSON) until the push is built.
#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    /// The stream's labels, sorted by name.
    labels: Vec<(String, String)>,
    /// ns since the Unix epoch.
    ts: i64,
    line: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    metadata: Vec<(String, String)>,
}

impl LokiPush {
    /// Entries labelled with `labels`, pushed as `format`, with structured metadata or not.
    pub fn new(labels: Vec<LabelField>, format: LokiFormat, structured_metadata: bool) -> Self {
        Self { labels, format, structured_metadata }
    }

    /// The stream labels of `event`, sorted by name: the configured fields that have a value,
    /// else [`FALLBACK_LABEL`].
    pub fn stream_labels(&self, event: &Event) -> Vec<(String, String)> {
        let mut labels: Vec<(String, String)> = self
            .labels
            .iter()
            .filter_map(|f| {
                let value = f.value(event);
                (!value.is_empty()).then(|| (f.name().to_string(), value.to_string()))
            })
            .collect();
        if labels.is_empty() {
            labels.push((FALLBACK_LABEL.0.into(), FALLBACK_LABEL.1.into()));
        }
        labels.sort();
        labels.dedup_by(|a, b| a.0 == b.0);
        labels
    }

    /// The entries of a batch, grouped into streams in the order each stream first appears,
    /// each stream's entries sorted by time (stably: equal times keep call order).
    fn streams(items: &[&[u8]]) -> IndexMap<Vec<(String, String)>, Vec<Entry>> {
        let mut streams: IndexMap<Vec<(String, String)>, Vec<Entry>> = IndexMap::new();
        for item in items {
            // Items are made by `encode` just before: they always read back.
            let Ok(mut entry) = serde_json::from_slice::<Entry>(item) else { continue };
            let labels = std::mem::take(&mut entry.labels);
            streams.entry(labels).or_default().push(entry);
        }
        for entries in streams.values_mut() {
            entries.sort_by_key(|e| e.ts);
        }
        streams
    }
}

/// A label set in Prometheus' text form, as `StreamAdapter.labels` carries it:
/// `{namespace="shop", reason="BackOff"}`, values escaped as Go's `strconv.Quote` does for `\`,
/// `"` and newlines.
pub fn label_text(labels: &[(String, String)]) -> String {
    let pairs: Vec<String> = labels
        .iter()
        .map(|(name, value)| {
            let escaped = value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
            format!("{name}=\"{escaped}\"")
        })
        .collect();
    format!("{{{}}}", pairs.join(", "))
}

impl BatchEncoding for LokiPush {
    fn kind(&self) -> &'static str {
        "loki"
    }

    fn content_type(&self) -> &'static str {
        match self.format {
            LokiFormat::Json => "application/json",
            LokiFormat::Protobuf => "application/x-protobuf",
        }
    }

    /// The entry of the event as it stands after the call (the line is the event as JSON);
    /// the verb and patch are not part of it.
    fn encode(&self, _verb: Verb, event: &Event, _patch: SinkPatch<'_>) -> Result<Vec<u8>, SinkError> {
        let line = serde_json::to_string(event)
            .map_err(|e| SinkError::RequestConstruction(format!("encoding the event: {e}")))?;
        let ts = crate::sink::otlp::logs::event_time(event)
            .and_then(|t| t.timestamp_nanos_opt())
            .unwrap_or_else(|| chrono::Utc::now().timestamp_nanos_opt().unwrap_or(0));
        let metadata = if self.structured_metadata {
            let o = &event.involved_object;
            [
                ("event_name", event.metadata.name.as_str()),
                ("event_uid", event.metadata.uid.as_str()),
                ("object_name", o.name.as_str()),
                ("object_uid", o.uid.as_str()),
            ]
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .chain((event.count != 0).then(|| ("count".to_string(), event.count.to_string())))
            .collect()
        } else {
            Vec::new()
        };
        let entry = Entry { labels: self.stream_labels(event), ts, line, metadata };
        serde_json::to_vec(&entry).map_err(|e| SinkError::RequestConstruction(format!("encoding the entry: {e}")))
    }

    fn body(&self, items: &[&[u8]]) -> Result<Vec<u8>, SinkError> {
        let streams = Self::streams(items);
        match self.format {
            LokiFormat::Json => {
                let streams: Vec<serde_json::Value> = streams
                    .into_iter()
                    .map(|(labels, entries)| {
                        let stream: serde_json::Map<String, serde_json::Value> =
                            labels.into_iter().map(|(k, v)| (k, v.into())).collect();
                        let values: Vec<serde_json::Value> = entries
                            .into_iter()
                            .map(|e| {
                                let mut value = vec![e.ts.to_string().into(), e.line.into()];
                                if !e.metadata.is_empty() {
                                    let metadata: serde_json::Map<String, serde_json::Value> =
                                        e.metadata.into_iter().map(|(k, v)| (k, v.into())).collect();
                                    value.push(metadata.into());
                                }
                                serde_json::Value::Array(value)
                            })
                            .collect();
                        serde_json::json!({ "stream": stream, "values": values })
                    })
                    .collect();
                serde_json::to_vec(&serde_json::json!({ "streams": streams }))
                    .map_err(|e| SinkError::RequestConstruction(format!("encoding the push: {e}")))
            }
            LokiFormat::Protobuf => {
                let request = PushRequest {
                    streams: streams
                        .into_iter()
                        .map(|(labels, entries)| StreamAdapter {
                            labels: label_text(&labels),
                            entries: entries
                                .into_iter()
                                .map(|e| EntryAdapter {
                                    timestamp: Some(Timestamp {
                                        seconds: e.ts.div_euclid(1_000_000_000),
                                        nanos: e.ts.rem_euclid(1_000_000_000) as i32,
                                    }),
                                    line: e.line,
                                    structured_metadata: e
                                        .metadata
                                        .into_iter()
                                        .map(|(name, value)| LabelPairAdapter { name, value })
                                        .collect(),
                                })
                                .collect(),
                            hash: 0,
                        })
                        .collect(),
                };
                // The block format, as Loki's distributor reads it (`snappy.Decode`).
                snap::raw::Encoder::new()
                    .compress_vec(&request.encode_to_vec())
                    .map_err(|e| SinkError::RequestConstruction(format!("compressing the push: {e}")))
            }
        }
    }

    /// Promtail's: `429` and `5xx` are retried; other statuses are not.
    fn retryable(&self, status: StatusCode) -> bool {
        status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error()
    }

    /// The stream's label set: a stream's entries reach Loki in call order (see [`super`]).
    fn order_key(&self, event: &Event) -> u64 {
        let mut hasher = std::hash::DefaultHasher::new();
        self.stream_labels(event).hash(&mut hasher);
        hasher.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(namespace: &str, reason: &str, last: &str) -> Event {
        let mut e = Event::default();
        e.metadata.name = format!("web.{reason}").into();
        e.involved_object.namespace = namespace.into();
        e.involved_object.kind = "Pod".into();
        e.reason = reason.into();
        e.type_ = "Normal".into();
        e.count = 2;
        e.last_timestamp = Some(last.parse().unwrap());
        e
    }

    fn items(push: &LokiPush, events: &[Event]) -> Vec<Vec<u8>> {
        events.iter().map(|e| push.encode(Verb::Create, e, SinkPatch::Bytes(&[])).unwrap()).collect()
    }

    #[test]
    fn a_json_push_has_a_stream_per_label_set_with_its_entries_in_time_order() {
        let push = LokiPush::new(super::super::DEFAULT_LABELS.to_vec(), LokiFormat::Json, true);
        let events = [
            event("shop", "Pulled", "2026-11-28T10:00:02Z"),
            event("shop", "BackOff", "2026-11-28T10:00:01Z"),
            event("shop", "Pulled", "2026-11-28T10:00:01Z"),
        ];
        let items = items(&push, &events);
        let refs: Vec<&[u8]> = items.iter().map(Vec::as_slice).collect();
        let body: serde_json::Value = serde_json::from_slice(&push.body(&refs).unwrap()).unwrap();
        let streams = body["streams"].as_array().unwrap();
        assert_eq!(streams.len(), 2);
        assert_eq!(
            streams[0]["stream"],
            serde_json::json!({"namespace": "shop", "kind": "Pod", "reason": "Pulled", "type": "Normal"})
        );
        let values = streams[0]["values"].as_array().unwrap();
        assert_eq!(values[0][0], "1795860001000000000", "sorted by time, in ns as a string");
        assert_eq!(values[1][0], "1795860002000000000");
        let line: Event = serde_json::from_str(values[0][1].as_str().unwrap()).unwrap();
        assert_eq!(line.reason, "Pulled");
        assert_eq!(values[0][2], serde_json::json!({"event_name": "web.Pulled", "count": "2"}));
        assert_ne!(push.order_key(&events[0]), push.order_key(&events[1]), "a key per stream");
        assert_eq!(push.order_key(&events[0]), push.order_key(&events[2]));
    }

    #[test]
    fn the_enrichments_cluster_labels_the_stream_by_default() {
        let push = LokiPush::new(super::super::DEFAULT_LABELS.to_vec(), LokiFormat::Json, false);
        let mut enriched = event("shop", "Pulled", "2026-11-28T10:00:02Z");
        enriched.enrichment =
            crate::event::enrichment::Enriched::new(std::sync::Arc::new(crate::event::enrichment::Enrichment {
                cluster: Some("prod-eu".into()),
                ..Default::default()
            }));
        let plain = event("shop", "Pulled", "2026-11-28T10:00:02Z");
        let cluster = |e: &Event| push.stream_labels(e).into_iter().find(|(k, _)| k == "cluster").map(|(_, v)| v);
        assert_eq!(cluster(&enriched).as_deref(), Some("prod-eu"));
        assert_eq!(cluster(&plain), None, "no enrichment: no cluster label");
        assert_ne!(push.order_key(&enriched), push.order_key(&plain), "a stream per cluster");
    }

    #[test]
    fn a_protobuf_push_is_a_snappy_compressed_push_request() {
        let push = LokiPush::new(vec![LabelField::Namespace, LabelField::Reason], LokiFormat::Protobuf, false);
        let mut quoted = event("shop", "Back\"Off", "2026-11-28T10:00:01.5Z");
        quoted.involved_object.namespace = "".into();
        let items = items(&push, &[event("shop", "Pulled", "2026-11-28T10:00:01Z"), quoted]);
        let refs: Vec<&[u8]> = items.iter().map(Vec::as_slice).collect();
        let raw = snap::raw::Decoder::new().decompress_vec(&push.body(&refs).unwrap()).unwrap();
        let request = PushRequest::decode(raw.as_slice()).unwrap();
        assert_eq!(request.streams[0].labels, r#"{namespace="shop", reason="Pulled"}"#);
        assert_eq!(request.streams[1].labels, r#"{reason="Back\"Off"}"#, "an empty field is left out");
        let ts = request.streams[1].entries[0].timestamp.unwrap();
        assert_eq!((ts.seconds, ts.nanos), (1_795_860_001, 500_000_000));
        let none = LokiPush::new(vec![LabelField::Action], LokiFormat::Json, false);
        assert_eq!(none.stream_labels(&Event::default()), [("job".to_string(), "eventpipe".to_string())]);
    }
}
