//! eventpipe's integration tests: one binary (linking wasmtime, kube and axum once), one module per theme.

mod common;

mod broadcaster_vectors;
mod correlator_properties;
mod correlator_vectors;
mod delivery;
mod docs;
mod events_v1_series_vectors;
mod example_plugins;
mod guest_sdk;
mod helm_chart;
mod hot_reload;
mod http_ingest;
mod kubernetes;
mod memo;
mod metrics;
mod nats;
mod new_plugin;
mod oci;
mod pins;
mod plugin_failures;
mod plugins_directory;
mod recorder_vectors;
mod redaction;
mod replay_cli;
mod router;
mod run_cli;
mod shadow;
mod shutdown;
mod sink_retry_vectors;
mod tenants;
mod top;
mod validate;
mod watch_cache;
mod watchers;
mod webhook_sink;
