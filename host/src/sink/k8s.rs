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

use super::{EventSink, SinkError};
use crate::event::Event;
use crate::k8s::status_error;

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
        Self { client, namespace: namespace.into() }
    }

    /// `/api/v1[/namespaces/{ns}]/events[/{name}]` (client-go `NamespaceIfScoped`).
    fn path(event: &Event, with_name: bool) -> String {
        let ns = &event.metadata.namespace;
        let mut path =
            if ns.is_empty() { "/api/v1/events".to_string() } else { format!("/api/v1/namespaces/{ns}/events") };
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
                return serde_json::from_slice(&bytes).map_err(|e| {
                    // client-go: an answer that is not the expected object is retried.
                    SinkError::Transport(format!("unexpected answer to {method} {path}: {e}"))
                });
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

    /// The event as sent: with its TypeMeta, as client-go's encoder writes it.
    fn body(event: &Event) -> Result<Vec<u8>, SinkError> {
        let mut typed = event.clone();
        typed.kind = "Event".into();
        typed.api_version = "v1".into();
        serde_json::to_vec(&typed).map_err(|e| SinkError::RequestConstruction(e.to_string()))
    }
}

#[async_trait]
impl EventSink for KubernetesSink {
    async fn create(&self, event: &Event) -> Result<Event, SinkError> {
        self.check_namespace(event)?;
        self.call(Method::POST, Self::path(event, false), "application/json", Self::body(event)?).await
    }

    async fn update(&self, event: &Event) -> Result<Event, SinkError> {
        self.check_namespace(event)?;
        self.call(Method::PUT, Self::path(event, true), "application/json", Self::body(event)?).await
    }

    /// An empty `patch` (client-go's for a count > 1 event its correlator never saw) is not
    /// sent: a real apiserver answers an empty strategic-merge patch `400 BadRequest` ("EOF")
    /// and the update is lost. The whole event is written instead with `PUT` and no
    /// `resourceVersion`, which creates it or replaces it (events allow create-on-update and
    /// unconditional update). A divergence from client-go, on purpose.
    async fn patch(&self, event: &Event, patch: &[u8]) -> Result<Event, SinkError> {
        self.check_namespace(event)?;
        if patch.is_empty() {
            let mut whole = event.clone();
            whole.metadata.resource_version.clear();
            return self.call(Method::PUT, Self::path(&whole, true), "application/json", Self::body(&whole)?).await;
        }
        self.call(Method::PATCH, Self::path(event, true), STRATEGIC_MERGE_PATCH, patch.to_vec()).await
    }
}
