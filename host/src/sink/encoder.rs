//! Webhook bodies from an `encoder` plugin: `webhook:URL,encoder=NAME`. The plugin turns each
//! batch of writes into the request (body, `Content-Type`, headers); the webhook's one delivery
//! does the rest (queue, batching, adaptive concurrency, retries with `Retry-After`, `413`
//! halving, per-object order, delivery modes, metrics). The plugin is hot-reloaded and
//! fuel-limited as every plugin, and has no network.
//!
//! Each write is kept as the webhook's item (`{"verb","event","enrichment","patch"}`, the JSON
//! lines sink's line) until its batch is made: then the items are read back and handed to the
//! plugin as `encoder-write`s. A batch the plugin cannot encode (its `err`, a trap, fuel, a
//! header that is not valid HTTP) fails its writes for good, counted as render errors and
//! logged with the plugin, tenant and the events' names; the other batches go on.

use std::sync::Arc;

use bytes::Bytes;
use hyper::StatusCode;
use hyper::header::{HeaderName, HeaderValue};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::encoding::{BatchEncoding, BatchRequest, JsonItems};
use super::retry::Verb;
use super::webhook::{BATCH_ID_HEADER, WebhookConfig};
use super::{SinkError, SinkPatch};
use crate::event::Event;
use crate::plugin::PluginHandle;
use crate::plugin::encoder::{WasmEncoder, Write};

/// Headers the sink sets itself; an encoder's are dropped.
const HOST_HEADERS: [&str; 5] = ["content-type", "content-length", "host", "authorization", BATCH_ID_HEADER];

/// The encoding of a webhook whose requests an `encoder` plugin makes.
pub struct PluginEncoding {
    encoder: WasmEncoder,
}

impl std::fmt::Debug for PluginEncoding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginEncoding").field("plugin", &self.encoder.handle().name()).finish()
    }
}

/// A webhook item read back: what [`JsonItems`] wrote.
#[derive(Deserialize)]
struct Item {
    verb: Verb,
    event: Event,
    #[serde(default)]
    enrichment: Option<Box<RawValue>>,
    #[serde(default)]
    patch: Option<Box<RawValue>>,
}

impl PluginEncoding {
    /// The encoding of `handle` (an `encoder` plugin, as one tenant's webhook uses it).
    ///
    /// # Errors
    /// The plugin is of another kind.
    pub fn new(handle: PluginHandle) -> Result<Self, String> {
        Ok(Self { encoder: WasmEncoder::new(handle).map_err(|e| e.to_string())? })
    }

    /// The plugin as used here.
    pub fn handle(&self) -> &PluginHandle {
        self.encoder.handle()
    }

    fn fail(&self, items: &[Item], error: String) -> SinkError {
        let names: Vec<String> =
            items.iter().take(5).map(|i| format!("{}/{}", i.event.metadata.namespace, i.event.metadata.name)).collect();
        tracing::warn!(
            plugin = self.handle().name(),
            tenant = %self.handle().tenant(),
            writes = items.len(),
            events = %names.join(", "),
            %error,
            "encoder failed on a batch; its writes fail"
        );
        SinkError::RequestConstruction(format!("encoder {}: {error}", self.handle().name()))
    }
}

impl BatchEncoding for PluginEncoding {
    fn kind(&self) -> &'static str {
        "webhook"
    }

    fn content_type(&self) -> &'static str {
        "application/json"
    }

    fn encode(&self, verb: Verb, event: &Event, patch: SinkPatch<'_>) -> Result<Vec<u8>, SinkError> {
        JsonItems.encode(verb, event, patch)
    }

    fn body(&self, items: &[&[u8]]) -> Result<Vec<u8>, SinkError> {
        self.request(items).map(|r| r.body.to_vec())
    }

    fn request(&self, items: &[&[u8]]) -> Result<BatchRequest, SinkError> {
        let items: Vec<Item> = items
            .iter()
            .map(|i| serde_json::from_slice(i))
            .collect::<Result<_, _>>()
            .map_err(|e| SinkError::RequestConstruction(format!("reading a queued write back: {e}")))?;
        let writes: Vec<Write<'_>> = items
            .iter()
            .map(|i| Write {
                event: &i.event,
                patch: match i.verb {
                    Verb::Create => None,
                    Verb::Patch => Some(i.patch.as_deref().map_or(&b""[..], |p| p.get().as_bytes())),
                },
                enrichment: i.enrichment.as_deref().map_or("", RawValue::get),
            })
            .collect();
        let request = self.encoder.encode(&writes).map_err(|e| self.fail(&items, e.to_string()))?;
        let content_type = if request.content_type.is_empty() { "application/json" } else { &request.content_type };
        let content_type = HeaderValue::from_str(content_type)
            .map_err(|_| self.fail(&items, format!("content type {content_type:?} is not a header value")))?;
        let mut headers = Vec::with_capacity(request.headers.len());
        for (name, value) in &request.headers {
            if HOST_HEADERS.iter().any(|h| name.eq_ignore_ascii_case(h)) {
                continue;
            }
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| self.fail(&items, format!("{name:?} is not a header name")))?;
            let value = HeaderValue::from_str(value)
                .map_err(|_| self.fail(&items, format!("the value of {name} is not a header value")))?;
            headers.push((name, value));
        }
        Ok(BatchRequest { body: Bytes::from(request.body), content_type, headers: Arc::from(headers) })
    }

    fn retryable(&self, status: StatusCode) -> bool {
        JsonItems.retryable(status)
    }
}

/// A webhook config whose requests `handle` (an `encoder` plugin) makes: named `name`, posting
/// to `url`, with the webhook's batching.
///
/// # Errors
/// The plugin is not an encoder.
pub fn config(name: String, url: &str, handle: PluginHandle) -> Result<WebhookConfig, String> {
    let mut config = WebhookConfig::new(name, url);
    config.encoding = Arc::new(PluginEncoding::new(handle)?);
    Ok(config)
}
