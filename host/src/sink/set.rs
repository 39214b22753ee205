//! The sinks of a run, built in one place from their specs (as Vector's `SinkConfig::build`):
//! [`SinkSet::open`] turns a [`SinkSpec`] into an [`EventSink`], sharing what is already open.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::event_metrics::{DEFAULT_MAX_SERIES, EventCounts, EventMetricsSink};
use super::jsonl::JsonLinesSink;
use super::k8s::KubernetesSink;
use super::plugin::PluginSink;
use super::series::SeriesSink;
use super::webhook::{WebhookConfig, WebhookSink};
use super::{EventSink, SinkEntry, SinkSpec};
use crate::delivery::DeliveryMode;
use crate::k8s::EventsApi;
use crate::plugin::registry::PluginRegistry;
use crate::plugin::sink::WasmSink;
use crate::plugin::{PluginHandle, PluginKind, PluginSettings};

/// A sink that could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("sink {spec}: {message}")]
pub struct SinkBuildError {
    /// The sink spec, as written.
    pub spec: String,
    /// What went wrong.
    pub message: String,
}

/// An opened sink, kept typed so it can be flushed at the end.
enum OpenSink {
    Jsonl(Arc<JsonLinesSink>),
    Plugin(Arc<PluginSink>),
    Kubernetes(Arc<KubernetesSink>),
    /// The events.k8s.io API, recording series.
    KubernetesSeries(Arc<SeriesSink>),
    /// A webhook or an OTLP logs sink (the same batching sink, another encoding).
    Webhook(Arc<WebhookSink>),
    /// A tenant's `metrics` sink.
    Metrics(Arc<EventMetricsSink>),
}

impl OpenSink {
    fn as_event_sink(&self) -> Arc<dyn EventSink> {
        match self {
            OpenSink::Jsonl(s) => s.clone(),
            OpenSink::Plugin(s) => s.clone(),
            OpenSink::Kubernetes(s) => s.clone(),
            OpenSink::KubernetesSeries(s) => s.clone(),
            OpenSink::Webhook(s) => s.clone(),
            OpenSink::Metrics(s) => s.clone(),
        }
    }

    fn flush(&self) -> std::io::Result<()> {
        match self {
            OpenSink::Jsonl(s) => s.flush(),
            OpenSink::Plugin(s) => s.flush(),
            // Every call of these returned only once the server acknowledged it.
            OpenSink::Kubernetes(_) | OpenSink::KubernetesSeries(_) | OpenSink::Webhook(_) => Ok(()),
            OpenSink::Metrics(_) => Ok(()),
        }
    }
}

/// The sinks of a run, opened once and shared: a JSON-lines file is opened (truncated) the first
/// time any tenant names it; a sink plugin gets one instance per tenant (it is called with the
/// tenant's limits); `k8s` sinks share the run's Kubernetes client. Config reloads reuse what is
/// open.
#[derive(Default)]
pub struct SinkSet {
    open: Mutex<HashMap<String, OpenSink>>,
    kube: Option<kube::Client>,
    events_api: EventsApi,
    append: bool,
    tap: Option<Arc<super::watch_cache::WatchCacheSink>>,
    /// The `metrics` sinks' table, made when the first is opened.
    event_counts: Mutex<Option<Arc<EventCounts>>>,
    /// A hot standby's: every sink is this one ([`standing_by`](Self::standing_by)).
    standby: Option<Arc<super::standby::StandbySink>>,
    /// The encoder plugins of the webhooks opened (`encoder=NAME`), for their metrics.
    encoders: Mutex<Vec<PluginHandle>>,
}

impl std::fmt::Debug for SinkSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        f.debug_struct("SinkSet").field("open", &open.keys().collect::<Vec<_>>()).finish()
    }
}

impl SinkSet {
    /// An empty set; `kube` is the client `k8s` sinks use (none: they cannot be opened);
    /// `append`: JSON-lines files are appended to instead of truncated (at-least-once: what was
    /// delivered before a restart stays).
    pub fn new(kube: Option<kube::Client>, append: bool) -> Self {
        Self {
            open: Mutex::default(),
            kube,
            events_api: EventsApi::CoreV1,
            append,
            tap: None,
            event_counts: Mutex::default(),
            encoders: Mutex::default(),
            standby: None,
        }
    }

    /// The same set for a hot standby (`run --leader-elect` while another replica leads): every
    /// sink named opens as the one [`StandbySink`](super::standby::StandbySink), which writes
    /// nothing; the real sinks are not opened (a file is not truncated, no connection made).
    /// The watch cache (`--serve`) is still written.
    pub fn standing_by(self) -> Self {
        Self { standby: Some(Arc::default()), ..self }
    }

    /// The same set, with every tenant's writes going to `cache` too: [`TenantPlan`] adds
    /// [`tap`](Self::tap) to the sinks of each tenant (`run --serve`).
    ///
    /// [`TenantPlan`]: crate::pipeline::plan::TenantPlan
    pub fn with_watch_cache(self, cache: Arc<crate::watch_cache::WatchCache>) -> Self {
        Self { tap: Some(Arc::new(super::watch_cache::WatchCacheSink(cache))), ..self }
    }

    /// The watch cache's sink, which every tenant writes to besides its own sinks, if the set
    /// has one ([`with_watch_cache`](Self::with_watch_cache)).
    pub fn tap(&self) -> Option<Arc<dyn EventSink>> {
        self.tap.clone().map(|t| t as Arc<dyn EventSink>)
    }

    /// The same set, with `k8s` sinks writing to `api` (events.k8s.io: recorded as series, see
    /// [`SeriesSink`]).
    pub fn with_events_api(self, api: EventsApi) -> Self {
        Self { events_api: api, ..self }
    }

    /// The sink `entry` names for `tenant`, opened now or shared with an earlier call (a sink
    /// plugin is one instance per tenant, called with `settings(plugin name)`; a webhook with
    /// `delivery=at-most-once` is one of its own whose queue drops when full). This is the one
    /// place where sinks are built.
    ///
    /// # Errors
    /// [`SinkBuildError`] when the sink cannot be opened (a file, a webhook URL, no Kubernetes
    /// connection, a plugin that is missing or not a sink).
    pub fn open(
        &self,
        entry: &SinkEntry,
        tenant: &str,
        settings: &dyn Fn(&str) -> PluginSettings,
        registry: &PluginRegistry,
    ) -> Result<Arc<dyn EventSink>, SinkBuildError> {
        let spec = &entry.spec;
        let at_most_once = entry.delivery == Some(DeliveryMode::AtMostOnce);
        let key = match spec {
            SinkSpec::Plugin(name) => format!("{spec}@{tenant}:{name}"),
            // A templated webhook renders the tenant's name: one per tenant.
            SinkSpec::Webhook(_) if entry.body.source.is_some() => {
                format!("{}{}{}@{tenant}{:?}", spec.identity(), entry.webhook, entry.body, entry.delivery)
            }
            _ if spec.is_batching() && at_most_once => {
                format!("{}{},delivery=at-most-once", spec.identity(), entry.webhook)
            }
            _ if spec.is_batching() => format!("{}{}", spec.identity(), entry.webhook),
            SinkSpec::Metrics { .. } => format!("metrics@{tenant}"),
            _ => spec.identity(),
        };
        if let Some(standby) = &self.standby {
            return Ok(standby.clone());
        }
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = open.get(&key) {
            return Ok(s.as_event_sink());
        }
        let fail = |message: String| SinkBuildError { spec: spec.to_string(), message };
        let sink = match spec {
            SinkSpec::JsonLinesStdout => OpenSink::Jsonl(Arc::new(JsonLinesSink::new(Box::new(std::io::stdout())))),
            SinkSpec::JsonLinesFile(path) => {
                let file = if self.append {
                    JsonLinesSink::open_append(path).map(|(file, torn)| {
                        if torn > 0 {
                            tracing::warn!(sink = %spec, bytes = torn, "cut a torn last line (an interrupted write)");
                        }
                        file
                    })
                } else {
                    std::fs::File::create(path)
                }
                .map_err(|e| fail(super::jsonl::writable(path).err().unwrap_or_else(|| e.to_string())))?;
                OpenSink::Jsonl(Arc::new(JsonLinesSink::new(Box::new(file))))
            }
            SinkSpec::Webhook(_)
            | SinkSpec::Otlp(_)
            | SinkSpec::Loki { .. }
            | SinkSpec::Elasticsearch { .. }
            | SinkSpec::Splunk { .. } => {
                let mut config = match spec {
                    SinkSpec::Webhook(url) if let Some(encoder) = entry.body.encoder() => {
                        let handle = registry
                            .handle(encoder, PluginKind::Encoder, tenant, settings(encoder))
                            .map_err(|e| fail(e.to_string()))?;
                        self.encoders.lock().unwrap_or_else(|p| p.into_inner()).push(handle.clone());
                        super::encoder::config(format!("{spec}{}", entry.body), url.expose(), handle).map_err(fail)?
                    }
                    SinkSpec::Webhook(url) if entry.body.source.is_some() => {
                        let name = format!("{spec}{}", entry.body);
                        super::template::config(name, url.expose(), tenant, &entry.body).map_err(fail)?
                    }
                    _ => batching_config(spec, &super::endpoint::process_env).map_err(fail)?,
                };
                let options = entry.webhook;
                config.concurrency = options.concurrency.unwrap_or(config.concurrency);
                config.max_batch = options.max_batch.unwrap_or(config.max_batch);
                if entry.body.renders_each_write() {
                    // One rendered body per request.
                    config.max_batch = 1;
                }
                config.max_batch_bytes = options.max_batch_bytes.unwrap_or(config.max_batch_bytes);
                config.request_timeout = options.timeout.unwrap_or(config.request_timeout);
                if at_most_once {
                    config.delivery = super::webhook::Delivery::AtMostOnce;
                }
                OpenSink::Webhook(Arc::new(WebhookSink::new(config).map_err(|e| fail(e.to_string()))?))
            }
            SinkSpec::Metrics { max_series, labels } => {
                let counts = self
                    .event_counts
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert_with(|| EventCounts::with_labels(max_series.unwrap_or(DEFAULT_MAX_SERIES), *labels))
                    .clone();
                OpenSink::Metrics(Arc::new(EventMetricsSink::new(tenant, counts)))
            }
            SinkSpec::Kubernetes(namespace) => {
                let client = self.kube.clone().ok_or_else(|| fail("no Kubernetes connection".into()))?;
                let api = KubernetesSink::new(client, namespace.clone()).with_api(self.events_api);
                match self.events_api {
                    EventsApi::CoreV1 => OpenSink::Kubernetes(Arc::new(api)),
                    EventsApi::EventsV1 => {
                        OpenSink::KubernetesSeries(SeriesSink::start(Arc::new(api), crate::clock::system()))
                    }
                }
            }
            SinkSpec::Nats(_) => {
                return Err(fail(
                    "a nats: sink publishes decoded events (the publish tier), not sink calls: give it as the run's \
                     only --sink, not in a tenant's sinks"
                        .into(),
                ));
            }
            SinkSpec::Plugin(name) => {
                let handle = if name.ends_with(".wasm") {
                    let path = PathBuf::from(name);
                    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
                    let plugin = registry.runtime().load_file(&stem, &path).map_err(|e| fail(e.to_string()))?;
                    PluginHandle::fixed(plugin, tenant, settings(&stem))
                } else {
                    registry.handle(name, PluginKind::Sink, tenant, settings(name)).map_err(|e| fail(e.to_string()))?
                };
                OpenSink::Plugin(Arc::new(PluginSink(
                    WasmSink::new(handle, Box::new(std::io::stdout())).map_err(|e| fail(e.to_string()))?,
                )))
            }
        };
        let shared = sink.as_event_sink();
        open.insert(key, sink);
        Ok(shared)
    }

    /// The `metrics` sinks' table, once one was opened (for `/metrics`).
    pub fn event_counts(&self) -> Option<Arc<EventCounts>> {
        self.event_counts.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The webhook and OTLP sinks opened so far (for their metrics).
    pub fn webhooks(&self) -> Vec<Arc<WebhookSink>> {
        self.each(|s| match s {
            OpenSink::Webhook(w) => Some(w.clone()),
            _ => None,
        })
    }

    /// What `pick` takes from each open sink.
    fn each<T>(&self, pick: impl Fn(&OpenSink) -> Option<T>) -> Vec<T> {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.values().filter_map(pick).collect()
    }

    /// The plugin handles of the sink plugins opened so far (for their `eventpipe_plugin_*`
    /// series).
    pub fn plugin_handles(&self) -> Vec<PluginHandle> {
        let mut handles = self.each(|s| match s {
            OpenSink::Plugin(p) => Some(p.0.handle().clone()),
            _ => None,
        });
        handles.extend(self.encoders.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned());
        handles
    }

    /// Ends what sinks keep open at the end of a run: every events.k8s.io series gets its final
    /// patch ([`SeriesSink::finish_all`]).
    pub async fn close(&self) {
        let series = self.each(|s| match s {
            OpenSink::KubernetesSeries(s) => Some(s.clone()),
            _ => None,
        });
        for sink in series {
            sink.finish_all().await;
        }
    }

    /// Flushes every open sink.
    ///
    /// # Errors
    /// The first flush error, with its sink.
    pub fn flush(&self) -> Result<(), (String, std::io::Error)> {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        for (key, sink) in open.iter() {
            sink.flush().map_err(|e| (key.clone(), e))?;
        }
        Ok(())
    }
}

/// The batching HTTP sink configuration of a `webhook:`, `otlp:` or log-store spec, named as the
/// spec shows, the log stores' credentials read through `env`.
///
/// # Errors
/// What is wrong with the log store's credentials or CA file; a spec of another kind.
pub fn batching_config(spec: &SinkSpec, env: super::endpoint::Env<'_>) -> Result<WebhookConfig, String> {
    let name = spec.to_string();
    match spec {
        SinkSpec::Webhook(url) => Ok(WebhookConfig::new(name, url.expose())),
        SinkSpec::Otlp(url) => Ok(super::otlp::config(name, url.expose())),
        SinkSpec::Loki { url, options } => super::loki::config(name, url.expose(), options, env),
        SinkSpec::Elasticsearch { url, options } => super::elasticsearch::config(name, url.expose(), options, env),
        SinkSpec::Splunk { url, options } => super::splunk::config(name, url.expose(), options, env),
        _ => return Err(format!("{spec} is not a batching HTTP sink")),
    }
    .map_err(|e| e.to_string())
}
