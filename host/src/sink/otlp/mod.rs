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

pub mod encoding;
pub mod logs;

use std::sync::Arc;

pub use encoding::OtlpLogs;

use super::webhook::WebhookConfig;
#[cfg(doc)]
use super::webhook::WebhookSink;

/// The path records are posted to when the URL has none (OTLP/HTTP's default for logs).
pub const DEFAULT_PATH: &str = "/v1/logs";

/// `url` with [`DEFAULT_PATH`] when it has no path or only `/` (`http://collector:4318` →
/// `http://collector:4318/v1/logs`); otherwise as given.
pub fn endpoint(url: &str) -> String {
    super::endpoint::with_default_path(url, DEFAULT_PATH)
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

    #[test]
    fn the_default_path_is_added_only_when_there_is_none() {
        assert_eq!(endpoint("http://127.0.0.1:4318"), "http://127.0.0.1:4318/v1/logs");
        assert_eq!(endpoint("https://c.example:4318?x=1"), "https://c.example:4318/v1/logs?x=1");
        assert_eq!(endpoint("http://c:4318/otlp/v1/logs"), "http://c:4318/otlp/v1/logs");
    }
}
