//! [`Bulk`]: the `_bulk` encoding of the batching HTTP sink ([`BatchEncoding`]): each call an
//! action line and a document line, a batch their concatenation (NDJSON), the answer's `items`
//! read one by one.

use hyper::StatusCode;
use serde_json::Value;

use super::Target;
use crate::event::Event;
use crate::sink::encoding::{Accepted, BatchEncoding, ItemFailure};
use crate::sink::retry::Verb;
use crate::sink::{SinkError, SinkPatch};

/// The `_bulk` encoding (see [`super`]).
#[derive(Debug, Clone)]
pub struct Bulk {
    target: Target,
    /// The index pattern's fields, parsed once (`Target::Index`).
    items: Vec<chrono::format::Item<'static>>,
    replace_dots: bool,
}

impl Bulk {
    /// Documents to `target`, with dots in keys replaced or not. An index pattern that does not
    /// parse (refused earlier, by [`super::ElasticsearchOptions::set`]) names the index as
    /// written.
    pub fn new(target: Target, replace_dots: bool) -> Self {
        let items = match &target {
            Target::Index(pattern) => chrono::format::StrftimeItems::new(pattern)
                .parse_to_owned()
                .unwrap_or_else(|_| vec![chrono::format::Item::OwnedLiteral(pattern.clone().into_boxed_str())]),
            Target::DataStream(_) => Vec::new(),
        };
        Self { target, items, replace_dots }
    }

    /// The document `_id` of a write of `event`: `UID:COUNT`, or `NAMESPACE/NAME:COUNT` for an
    /// event without a uid.
    pub fn document_id(event: &Event) -> String {
        let m = &event.metadata;
        if m.uid.is_empty() {
            format!("{}/{}:{}", m.namespace, m.name, event.count)
        } else {
            format!("{}:{}", m.uid, event.count)
        }
    }
}

/// `value` with the dots of every object key replaced with `_`, at every depth.
fn replace_dots(value: &mut Value) {
    match value {
        Value::Object(map) => {
            let entries = std::mem::take(map);
            for (key, mut v) in entries {
                replace_dots(&mut v);
                map.insert(key.replace('.', "_"), v);
            }
        }
        Value::Array(values) => values.iter_mut().for_each(replace_dots),
        _ => {}
    }
}

impl BatchEncoding for Bulk {
    fn kind(&self) -> &'static str {
        "elasticsearch"
    }

    fn content_type(&self) -> &'static str {
        "application/x-ndjson"
    }

    /// The action line and the document (the event as it stands after the call, with
    /// `@timestamp`), each ended by `\n`.
    fn encode(&self, _verb: Verb, event: &Event, _patch: SinkPatch<'_>) -> Result<Vec<u8>, SinkError> {
        let fail = |e: serde_json::Error| SinkError::RequestConstruction(format!("encoding the event: {e}"));
        let time = crate::sink::otlp::logs::event_time(event).copied().unwrap_or_else(chrono::Utc::now);
        let mut document = serde_json::to_value(event).map_err(fail)?;
        if self.replace_dots {
            replace_dots(&mut document);
        }
        if let Value::Object(map) = &mut document {
            map.insert("@timestamp".into(), crate::event::format_micro_time(&time).into());
        }
        let id = Self::document_id(event);
        let action = match &self.target {
            Target::Index(_) => {
                let index = time.format_with_items(self.items.iter()).to_string();
                serde_json::json!({ "index": { "_index": index, "_id": id } })
            }
            Target::DataStream(name) => serde_json::json!({ "create": { "_index": name, "_id": id } }),
        };
        let mut item = serde_json::to_vec(&action).map_err(fail)?;
        item.push(b'\n');
        serde_json::to_writer(&mut item, &document).map_err(fail)?;
        item.push(b'\n');
        Ok(item)
    }

    fn body(&self, items: &[&[u8]]) -> Result<Vec<u8>, SinkError> {
        Ok(items.concat())
    }

    /// `429` and `5xx`, as Elasticsearch's clients retry.
    fn retryable(&self, status: StatusCode) -> bool {
        status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error()
    }

    /// An error answer's `error.type: error.reason`, else the body as text.
    fn error_text(&self, answer: &[u8]) -> String {
        serde_json::from_slice::<Value>(answer)
            .ok()
            .and_then(|v| error_reason(&v["error"]))
            .unwrap_or_else(|| String::from_utf8_lossy(answer).into_owned())
    }

    /// The answer's `items`, one per action in order: `2xx` written; `409` to a `create` already
    /// there (written by an earlier attempt); `429` and `5xx` to send again; other statuses
    /// refused for good. `"errors": false` says all were written, without reading the items.
    fn accepted(&self, answer: &[u8]) -> Accepted {
        #[derive(serde::Deserialize)]
        struct Response {
            #[serde(default)]
            errors: bool,
            #[serde(default)]
            items: Vec<serde_json::Map<String, Value>>,
        }
        let Ok(response) = serde_json::from_slice::<Response>(answer) else {
            tracing::warn!(
                "elasticsearch _bulk answered 2xx with a body that is not a bulk response; taken as written"
            );
            return Accepted::default();
        };
        if !response.errors {
            return Accepted::default();
        }
        let failed = response
            .items
            .iter()
            .enumerate()
            .filter_map(|(index, item)| {
                let (op, result) = item.iter().next()?;
                let status = u16::try_from(result["status"].as_u64()?).ok()?;
                let done = (200..300).contains(&status) || (status == 409 && op == "create");
                (!done).then(|| ItemFailure {
                    index,
                    status,
                    reason: error_reason(&result["error"]).unwrap_or_default(),
                    retry: status == 429 || status >= 500,
                })
            })
            .collect();
        Accepted { failed, ..Accepted::default() }
    }

    /// A bulk answer names every item (about 50 bytes each when written, more for errors).
    fn max_answer_bytes(&self) -> usize {
        32 << 20
    }
}

/// An Elasticsearch error object as `type: reason` (with its `caused_by` reason when there is
/// one); a string error as it is.
fn error_reason(error: &Value) -> Option<String> {
    match error {
        Value::String(text) => Some(text.clone()),
        Value::Object(_) => {
            let mut text = format!("{}: {}", error["type"].as_str()?, error["reason"].as_str().unwrap_or(""));
            if let Some(cause) = error["caused_by"]["reason"].as_str() {
                text.push_str(&format!(" (caused by: {cause})"));
            }
            Some(text)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event() -> Event {
        let mut e = Event::default();
        e.metadata.name = "web.1".into();
        e.metadata.namespace = "shop".into();
        e.count = 3;
        e.last_timestamp = Some("2026-11-28T10:00:01Z".parse().unwrap());
        e
    }

    #[test]
    fn a_write_is_an_action_line_and_a_document_line() {
        let bulk = Bulk::new(Target::Index(super::super::DEFAULT_INDEX.into()), false);
        let item = bulk.encode(Verb::Patch, &event(), SinkPatch::Bytes(&[])).unwrap();
        let lines: Vec<Value> =
            item.split(|b| *b == b'\n').filter(|l| !l.is_empty()).map(|l| serde_json::from_slice(l).unwrap()).collect();
        assert_eq!(lines[0], serde_json::json!({"index": {"_index": "eventpipe-2026.11.28", "_id": "shop/web.1:3"}}));
        assert_eq!(lines[1]["@timestamp"], "2026-11-28T10:00:01.000000Z");
        assert_eq!(lines[1]["count"], 3);
        let stream = Bulk::new(Target::DataStream("logs-k8s-default".into()), false);
        let mut with_uid = event();
        with_uid.metadata.uid = "0c9b".into();
        let item = stream.encode(Verb::Create, &with_uid, SinkPatch::Bytes(&[])).unwrap();
        let action: Value = serde_json::from_slice(item.split(|b| *b == b'\n').next().unwrap()).unwrap();
        assert_eq!(action, serde_json::json!({"create": {"_index": "logs-k8s-default", "_id": "0c9b:3"}}));
    }

    #[test]
    fn dots_in_keys_are_replaced_when_asked() {
        let mut value =
            serde_json::json!({"labels": {"app.kubernetes.io/name": "web", "app": "w"}, "a.b": [{"c.d": 1}]});
        replace_dots(&mut value);
        assert_eq!(
            value,
            serde_json::json!({"labels": {"app_kubernetes_io/name": "web", "app": "w"}, "a_b": [{"c_d": 1}]})
        );
    }

    #[test]
    fn the_bulk_answer_names_the_items_to_retry_and_those_refused() {
        let bulk = Bulk::new(Target::DataStream("s".into()), false);
        let answer = serde_json::json!({
            "took": 3, "errors": true,
            "items": [
                {"create": {"_index": "s", "_id": "a", "status": 201}},
                {"create": {"_index": "s", "_id": "b", "status": 429,
                    "error": {"type": "es_rejected_execution_exception", "reason": "queue full"}}},
                {"create": {"_index": "s", "_id": "c", "status": 400,
                    "error": {"type": "mapper_parsing_exception", "reason": "failed to parse field [count]",
                              "caused_by": {"type": "number_format_exception", "reason": "For input string: \"x\""}}}},
                {"create": {"_index": "s", "_id": "d", "status": 409,
                    "error": {"type": "version_conflict_engine_exception", "reason": "document already exists"}}},
                {"create": {"_index": "s", "_id": "e", "status": 503, "error": {"type": "unavailable_shards_exception", "reason": "primary shard is not active"}}}
            ]
        });
        let accepted = bulk.accepted(&serde_json::to_vec(&answer).unwrap());
        let summary: Vec<(usize, u16, bool)> = accepted.failed.iter().map(|f| (f.index, f.status, f.retry)).collect();
        assert_eq!(summary, [(1, 429, true), (2, 400, false), (4, 503, true)], "409 to a create is written");
        assert_eq!(
            accepted.failed[1].reason,
            "mapper_parsing_exception: failed to parse field [count] (caused by: For input string: \"x\")"
        );
        assert_eq!(bulk.accepted(br#"{"errors":false,"items":[]}"#), Accepted::default());
        let error =
            br#"{"error":{"type":"security_exception","reason":"missing authentication credentials"},"status":401}"#;
        assert_eq!(bulk.error_text(error), "security_exception: missing authentication credentials");
    }
}
