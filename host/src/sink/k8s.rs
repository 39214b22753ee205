//! The Kubernetes Events API as an [`EventSink`] (client-go's `EventSinkImpl` over the typed
//! core/v1 client, spec §2.5): create is `POST /api/v1/namespaces/{ns}/events`, update is `PUT
//! …/events/{name}`, patch is `PATCH …/events/{name}` with
//! `Content-Type: application/strategic-merge-patch+json` and the correlator's patch bytes.
//! `recordToSink` ([`crate::sink::write_event`]) drives it: patch for repeats, create after a
//! 404, client-go's retry classes. One divergence: an empty patch is written as a `PUT` of the
//! whole event (see [`KubernetesSink`]'s `patch`).
//!
//! As client-go's REST client, a `429` or `5xx` answer with a `Retry-After` header is retried
//! after that many seconds, up to [`MAX_RETRY_AFTER_RETRIES`] times, before it becomes the
//! call's error (which `recordToSink` then drops, as any `StatusError`).

use std::time::Duration;

use async_trait::async_trait;
use http::{Method, Request, header};
use kube::client::Body;

use super::{EventSink, SinkError, Stored};
use crate::event::Event;
use crate::k8s::{EventsApi, status_error};

/// client-go's REST client `maxRetries`: retries of one request that the server asked to
/// retry (`Retry-After` on `429` / `5xx`).
pub const MAX_RETRY_AFTER_RETRIES: u32 = 10;

/// The strategic-merge-patch content type client-go's event sink sends.
pub const STRATEGIC_MERGE_PATCH: &str = "application/strategic-merge-patch+json";

/// Writes events to a Kubernetes API server.
#[derive(Clone)]
pub struct KubernetesSink {
    client: kube::Client,
    namespace: String,
    api: EventsApi,
}

impl std::fmt::Debug for KubernetesSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubernetesSink").field("namespace", &self.namespace).finish_non_exhaustive()
    }
}

impl KubernetesSink {
    /// A sink over `client` for `namespace` (`""`: any namespace, each event going to its own
    /// `metadata.namespace`, as client-go's usual `Events("")`).
    pub fn new(client: kube::Client, namespace: impl Into<String>) -> Self {
        Self { client, namespace: namespace.into(), api: EventsApi::CoreV1 }
    }

    /// The same sink writing to `api` instead.
    pub fn with_api(self, api: EventsApi) -> Self {
        Self { api, ..self }
    }

    /// `/api/v1[/namespaces/{ns}]/events[/{name}]` (client-go `NamespaceIfScoped`), or
    /// `/apis/events.k8s.io/v1/…` for the events.k8s.io API.
    fn path(&self, event: &Event, with_name: bool) -> String {
        let ns = &event.metadata.namespace;
        let group = match self.api {
            EventsApi::CoreV1 => "/api/v1",
            EventsApi::EventsV1 => "/apis/events.k8s.io/v1",
        };
        let mut path =
            if ns.is_empty() { format!("{group}/events") } else { format!("{group}/namespaces/{ns}/events") };
        if with_name {
            path.push('/');
            path.push_str(&event.metadata.name);
        }
        path
    }

    /// client-go's typed sink refuses (with a plain error, which `recordToSink` retries) an
    /// event of another namespace than its own.
    fn check_namespace(&self, event: &Event) -> Result<(), SinkError> {
        if !self.namespace.is_empty() && event.metadata.namespace != self.namespace {
            return Err(SinkError::Transport(format!(
                "can't create an event with namespace '{}' in namespace '{}'",
                event.metadata.namespace, self.namespace
            )));
        }
        Ok(())
    }

    async fn call(&self, method: Method, path: String, content_type: &str, body: Vec<u8>) -> Result<Event, SinkError> {
        let mut retries = 0;
        loop {
            let request = Request::builder()
                .method(method.clone())
                .uri(&path)
                .header(header::CONTENT_TYPE, content_type)
                .header(header::ACCEPT, "application/json")
                .body(Body::from(body.clone()))
                .map_err(|e| SinkError::RequestConstruction(e.to_string()))?;
            let response = self.client.send(request).await.map_err(|e| SinkError::Transport(e.to_string()))?;
            let status = response.status();
            let retry_after = response
                .headers()
                .get(header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok());
            let bytes = response.into_body().collect_bytes().await.map_err(|e| SinkError::Transport(e.to_string()))?;
            if status.is_success() {
                let answer = match self.api {
                    EventsApi::CoreV1 => serde_json::from_slice(&bytes),
                    EventsApi::EventsV1 => serde_json::from_slice(&bytes).and_then(from_events_v1),
                };
                // client-go: an answer that is not the expected object is retried.
                return answer.map_err(|e| SinkError::Transport(format!("unexpected answer to {method} {path}: {e}")));
            }
            let retryable = status.as_u16() == 429 || status.is_server_error();
            match retry_after {
                Some(seconds) if retryable && retries < MAX_RETRY_AFTER_RETRIES => {
                    retries += 1;
                    tracing::debug!(%path, code = status.as_u16(), seconds, "server asked to retry");
                    tokio::time::sleep(Duration::from_secs(seconds)).await;
                }
                _ => return Err(SinkError::Status(status_error(status.as_u16(), &bytes))),
            }
        }
    }

    /// The event as sent: with its TypeMeta, as client-go's encoder writes it; for the
    /// events.k8s.io API, converted by [`to_events_v1`].
    fn body(&self, event: &Event) -> Result<Vec<u8>, SinkError> {
        let construction = |e: serde_json::Error| SinkError::RequestConstruction(e.to_string());
        match self.api {
            EventsApi::CoreV1 => {
                let mut typed = event.clone();
                typed.kind = "Event".into();
                typed.api_version = "v1".into();
                serde_json::to_vec(&typed).map_err(construction)
            }
            EventsApi::EventsV1 => serde_json::to_vec(&to_events_v1(event, chrono::Utc::now())).map_err(construction),
        }
    }
}

#[async_trait]
impl EventSink for KubernetesSink {
    async fn create(&self, event: &Event) -> Result<Stored, SinkError> {
        self.check_namespace(event)?;
        self.call(Method::POST, self.path(event, false), "application/json", self.body(event)?).await.map(Stored::copy)
    }

    async fn update(&self, event: &Event) -> Result<Stored, SinkError> {
        self.check_namespace(event)?;
        self.call(Method::PUT, self.path(event, true), "application/json", self.body(event)?).await.map(Stored::copy)
    }

    /// An empty `patch` (client-go's for a count > 1 event its correlator never saw) is not
    /// sent: a real apiserver answers an empty strategic-merge patch `400 BadRequest` ("EOF")
    /// and the update is lost. The whole event is written instead with `PUT` and no
    /// `resourceVersion` and no `uid`, which creates it or replaces it (events allow
    /// create-on-update and unconditional update). Neither may stay: the apiserver takes a
    /// `uid` in a `PUT` body as a precondition (`rest.defaultUpdatedObjectInfo.Preconditions`)
    /// and a `resourceVersion` as optimistic concurrency, and the event's are not this
    /// server's — HTTP ingest assigns its own `uid`, another cluster's events carry theirs —
    /// so it would answer `409 Conflict` ("Precondition failed: UID in precondition") and the
    /// update would be lost. A divergence from client-go, on purpose.
    async fn patch(&self, event: &Event, patch: &[u8]) -> Result<Stored, SinkError> {
        self.check_namespace(event)?;
        let stored = if patch.is_empty() {
            let mut whole = event.clone();
            whole.metadata.resource_version.clear();
            whole.metadata.uid.clear();
            self.call(Method::PUT, self.path(&whole, true), "application/json", self.body(&whole)?).await
        } else {
            self.call(Method::PATCH, self.path(event, true), STRATEGIC_MERGE_PATCH, patch.to_vec()).await
        };
        stored.map(Stored::copy)
    }
}

/// A core/v1-shaped event as the events.k8s.io/v1 Event client-go's `tools/events` recorder
/// would write for it (the inverse of the apiserver's `Convert_core_Event_To_v1_Event`, with
/// what events.k8s.io validation requires of a create filled in):
///
/// - `involvedObject` → `regarding`, `message` → `note`, `reportingComponent` →
///   `reportingController`; `related`, `action`, `type`, `series`, `metadata` as they are;
/// - `eventTime`: the event's, else its `firstTimestamp`, else `lastTimestamp`, else `now`;
/// - `reportingController`: else `source.component`, else `eventpipe`;
///   `reportingInstance`: else `source.host`, else the controller;
/// - `action`: else the `reason` (events recorded through core/v1 have none);
/// - the deprecated fields (`deprecatedSource`, `deprecatedFirstTimestamp`,
///   `deprecatedLastTimestamp`, `deprecatedCount`) are left out: an events.k8s.io create must
///   not set them;
/// - `note` is cut to [`NOTE_LENGTH_LIMIT`] bytes, `reportingInstance` and `action` to
///   [`REPORTING_INSTANCE_LENGTH_LIMIT`] (at a character boundary): the apiserver's
///   events.k8s.io validation refuses longer ones (`422 Invalid`), where core/v1 took them.
pub fn to_events_v1(event: &Event, now: crate::event::Time) -> serde_json::Value {
    use serde_json::{Value, json};
    let first_set = |values: &[&str]| values.iter().find(|v| !v.is_empty()).map(|v| v.to_string());
    let controller =
        first_set(&[&event.reporting_component, &event.source.component]).unwrap_or_else(|| "eventpipe".to_string());
    let instance = first_set(&[&event.reporting_instance, &event.source.host]).unwrap_or_else(|| controller.clone());
    let action = first_set(&[&event.action, &event.reason]).unwrap_or_default();
    let event_time = event.event_time.or(event.first_timestamp).or(event.last_timestamp).unwrap_or(now);
    let mut metadata = serde_json::to_value(&event.metadata).unwrap_or(Value::Null);
    if let Some(m) = metadata.as_object_mut() {
        m.remove("creationTimestamp");
    }
    let mut out = json!({
        "kind": "Event",
        "apiVersion": "events.k8s.io/v1",
        "metadata": metadata,
        "eventTime": crate::event::format_micro_time(&event_time),
        "reportingController": controller,
        "reportingInstance": cut(&instance, REPORTING_INSTANCE_LENGTH_LIMIT),
        "action": cut(&action, ACTION_LENGTH_LIMIT),
        "reason": event.reason,
        "regarding": event.involved_object,
        "note": cut(&event.message, NOTE_LENGTH_LIMIT),
        "type": event.type_,
    });
    if let Some(series) = &event.series {
        out["series"] = json!({
            "count": series.count,
            "lastObservedTime": series.last_observed_time.as_ref().map(crate::event::format_micro_time),
        });
    }
    if let Some(related) = &event.related {
        out["related"] = serde_json::to_value(related).unwrap_or(Value::Null);
    }
    out
}

/// The apiserver's longest events.k8s.io `note`, bytes (`NoteLengthLimit`).
pub const NOTE_LENGTH_LIMIT: usize = 1024;
/// The apiserver's longest events.k8s.io `reportingInstance`, bytes
/// (`ReportingInstanceLengthLimit`).
pub const REPORTING_INSTANCE_LENGTH_LIMIT: usize = 128;
/// The apiserver's longest events.k8s.io `action`, bytes (`ActionLengthLimit`).
pub const ACTION_LENGTH_LIMIT: usize = 128;

/// `s` cut to at most `limit` bytes, at a character boundary.
fn cut(s: &str, limit: usize) -> &str {
    if s.len() <= limit {
        return s;
    }
    let mut end = limit;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// An events.k8s.io/v1 Event (an API server's answer) as the core/v1-shaped [`Event`], as the
/// apiserver's `Convert_v1_Event_To_core_Event`: `regarding` → `involvedObject`, `note` →
/// `message`, `reportingController` → `reportingComponent`, the `deprecated*` fields → `source`,
/// `firstTimestamp`, `lastTimestamp`, `count`.
///
/// # Errors
/// The value is not an event of that shape.
pub fn from_events_v1(mut value: serde_json::Value) -> Result<Event, serde_json::Error> {
    if let Some(object) = value.as_object_mut() {
        for (from, to) in [
            ("regarding", "involvedObject"),
            ("note", "message"),
            ("reportingController", "reportingComponent"),
            ("deprecatedSource", "source"),
            ("deprecatedFirstTimestamp", "firstTimestamp"),
            ("deprecatedLastTimestamp", "lastTimestamp"),
            ("deprecatedCount", "count"),
        ] {
            if let Some(v) = object.remove(from) {
                object.insert(to.to_string(), v);
            }
        }
        object.insert("apiVersion".into(), serde_json::Value::from("v1"));
    }
    serde_json::from_value(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_events_v1_body_fits_the_apiservers_limits_and_converts_back() {
        let mut event: Event = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p.1", "namespace": "ns", "resourceVersion": "7"},
            "involvedObject": {"kind": "Pod", "namespace": "ns", "name": "p"},
            "reason": "Failed", "message": "é".repeat(600), "type": "Warning",
            "source": {"component": "kubelet", "host": "h".repeat(200)},
            "firstTimestamp": "2025-01-01T00:00:01Z", "lastTimestamp": "2025-01-01T00:00:09Z", "count": 3
        }))
        .unwrap();
        let wire = to_events_v1(&event, "2030-01-01T00:00:00Z".parse().unwrap());
        assert_eq!(wire["note"].as_str().unwrap().len(), 1024, "600 two-byte characters cut to 512");
        assert_eq!(wire["reportingInstance"].as_str().unwrap().len(), 128);
        assert_eq!(wire["eventTime"], "2025-01-01T00:00:01.000000Z", "the first timestamp, not now");
        assert_eq!(wire["metadata"]["resourceVersion"], "7");
        let back = from_events_v1(wire).unwrap();
        assert_eq!(
            (back.involved_object, back.reporting_component.as_str()),
            (event.involved_object.clone(), "kubelet")
        );
        assert_eq!((back.count, back.first_timestamp), (0, None), "the deprecated fields were not sent");
        event.first_timestamp = None;
        event.last_timestamp = None;
        let now = "2030-01-01T00:00:00Z".parse().unwrap();
        assert_eq!(to_events_v1(&event, now)["eventTime"], "2030-01-01T00:00:00.000000Z", "no time at all: now");
    }
}
