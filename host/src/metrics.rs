//! Prometheus metrics: the host's counters, read at scrape time, in the OpenMetrics text format
//! (`prometheus-client`), served by `GET /metrics`.
//!
//! The host already counts everything (`RouterStats`, `PluginStats` per `PluginHandle`, the
//! plugin registry's swaps, the Broadcaster's drops, the ingest and webhook counters), so
//! nothing is counted twice: [`Metrics`] holds *sources* — closures that add their current
//! counters to a [`Snapshot`] — and every scrape calls them all and encodes the result. A
//! source adds (`+=`), so several sources may feed one series (e.g. two handles of one plugin
//! for one tenant). A series whose source goes away (a tenant removed by a config reload) may
//! go down: Prometheus treats that as a counter reset.
//!
//! # Families (OpenMetrics names; counters end in `_total`)
//!
//! | family | labels | from |
//! |---|---|---|
//! | `eventpipe_events_in_total` | `source` | events read / accepted per source |
//! | `eventpipe_events_routed_total` | `tenant` | `RouterStats.tenants[t].received` |
//! | `eventpipe_sink_writes_total` | `tenant`, `verb` (`create`, `patch`; `series_counted` with events.k8s.io recording) | `created`, `patched`, `series_counted` |
//! | `eventpipe_sink_write_failures_total` | `tenant`, `outcome` (`dropped`, `gave_up`, `cancelled`, `shed`) | `recordToSink` outcomes; `shed`: an at-most-once sink's full window |
//! | `eventpipe_record_retries_total` | `tenant` | `recordToSink` attempts beyond the first |
//! | `eventpipe_spam_skipped_total` | `tenant` | spam filter skips |
//! | `eventpipe_sink_rejected_total` | `reason` (`AlreadyExists`, `NotFound`, `NamespaceTerminating`, `NamespaceNotFound`, …; never a namespace) | writes the server rejected and `recordToSink` dropped |
//! | `eventpipe_aggregated_total` | `tenant` | events replaced by an aggregate |
//! | `eventpipe_filtered_total` | `tenant` | filter plugin drops |
//! | `eventpipe_rule_dropped_total` | `tenant`, `rule` | declarative `drop` / `keep` rule drops ([`crate::tenant::rules`]) |
//! | `eventpipe_spam_exempted_total` | `tenant` | events a `spam_exempt` rule let through the spam filter |
//! | `eventpipe_suppressed_summaries_total` | `tenant` | "N events suppressed" summaries sent ([`crate::pipeline::suppressed`]) |
//! | `eventpipe_shadow_compared_total`, `eventpipe_shadow_divergences_total` | `plugin` | shadow plugins ([`crate::plugin::shadow`]) |
//! | `eventpipe_watcher_dropped_total` | `watcher`, `reason` | Broadcaster queue drops |
//! | `eventpipe_sink_sent_total`, `_acked_total`, `_retries_total`, `_failures_total` | `sink` | webhook sinks |
//! | `eventpipe_sink_dropped_total` | `sink`, `reason` (`queue_full`) | webhook sinks, at-most-once |
//! | `eventpipe_sink_queue_depth`, `eventpipe_sink_queue_capacity` (gauges) | `sink` | webhook sinks, events |
//! | `eventpipe_plugin_calls_total`, `_events_total`, `_fuel_consumed_total`, `_fallbacks_total`, `_drops_total`, `_instances_total`, `_memo_hits_total`, `_memo_misses_total` | `plugin`, `tenant` | `PluginStats` |
//! | `eventpipe_plugin_call_seconds_total` | `plugin`, `tenant` | time inside plugin calls |
//! | `eventpipe_plugin_failures_total` | `plugin`, `tenant`, `reason` (`trap`, `out_of_fuel`, `memory_limit`, `garbage`, …) | `PluginStats` |
//! | `eventpipe_plugin_swaps_total`, `eventpipe_plugin_tier_ups_total`, `eventpipe_plugin_reloads_rejected_total` | — | plugin registry |
//! | `eventpipe_plugin_pin_mismatches_total` | — | plugin versions refused for a digest other than their pin (also among the rejected reloads) |
//! | `eventpipe_config_reloads_total` | `result` (`applied`, `rejected`) | tenant config reloads |
//! | `eventpipe_snapshots_total` | `outcome` (`stored`, `restored`, `refused`, `failed`) | correlator snapshots ([`crate::pipeline::scale`], a single host's state file) |
//! | `eventpipe_nats_published_total`, `eventpipe_nats_duplicates_total`, `eventpipe_nats_publish_retries_total` | — | the NATS publish tier |
//! | `eventpipe_ingest_requests_total` | — | HTTP ingest |
//! | `eventpipe_ingest_rejected_total` | `reason` | HTTP ingest error answers and bad documents |
//! | `eventpipe_watch_cache_resource_version`, `_objects`, `_window_changes`, `_watches` (gauges) | — | the watch cache ([`crate::watch_cache`]): its newest resourceVersion, events held, changes in the window, watches open |
//! | `eventpipe_watch_cache_changes_total`, `_deleted_total` | — / `reason` (`ttl`, `max_objects`) | changes made; events deleted for their TTL or the object bound |
//! | `eventpipe_watch_cache_watches_cut_off_total`, `_expired_requests_total` | — | watches cut off for a full queue; lists and watches answered `410 Expired` |

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::broadcaster::Broadcaster;
use crate::event::SharedEvent;
use crate::pipeline::router::RouterStats;
use crate::plugin::registry::PluginRegistry;
use crate::plugin::{CallFailure, PluginHandle, PluginStatsSnapshot};
use crate::sink::webhook::{WebhookSink, WebhookStats};
use crate::source::SourceStats;
use crate::source::http::IngestStats;
use crate::watch_cache::WatchCacheStats;

/// The `Content-Type` of `GET /metrics` (OpenMetrics text 1.0.0, which Prometheus scrapes).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Why the metrics could not be encoded.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The text encoder failed.
    #[error("encoding the metrics: {0}")]
    Encode(#[from] std::fmt::Error),
}

/// Every counter at one scrape; sources add to it. Maps are keyed by label values.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Events in, by source (`jsonl`, `http`, `kubernetes`, …).
    pub events_in: BTreeMap<String, u64>,
    /// Input lines or documents that could not be decoded, by source.
    pub bad_input: BTreeMap<String, u64>,
    /// Input documents that are not events (watch bookmarks, `ERROR` envelopes), by source.
    pub non_events: BTreeMap<String, u64>,
    /// Events given to each tenant.
    pub routed: BTreeMap<String, u64>,
    /// Successful sink writes by (tenant, verb: `create` / `patch`).
    pub writes: BTreeMap<(String, String), u64>,
    /// `recordToSink` failures by (tenant, outcome: `dropped` / `gave_up` / `cancelled` / `shed`).
    pub write_failures: BTreeMap<(String, String), u64>,
    /// `recordToSink` retries by tenant.
    pub record_retries: BTreeMap<String, u64>,
    /// Spam-filter skips by tenant.
    pub spam_skipped: BTreeMap<String, u64>,
    /// Writes the server rejected and `recordToSink` dropped, by reason.
    pub rejected: BTreeMap<String, u64>,
    /// Aggregated events by tenant.
    pub aggregated: BTreeMap<String, u64>,
    /// Events dropped by filter plugins, by tenant.
    pub filtered: BTreeMap<String, u64>,
    /// Events dropped by declarative rules, by (tenant, rule).
    pub rule_dropped: BTreeMap<(String, String), u64>,
    /// Events a `spam_exempt` rule let through the spam filter, by tenant.
    pub spam_exempted: BTreeMap<String, u64>,
    /// "N suppressed" summary events, by tenant.
    pub suppressed_summaries: BTreeMap<String, u64>,
    /// Events a shadow plugin's candidate was compared on, by plugin.
    pub shadow_compared: BTreeMap<String, u64>,
    /// Events on which it answered otherwise than the serving version, by plugin.
    pub shadow_diverged: BTreeMap<String, u64>,
    /// Events dropped by Broadcaster queues, by (watcher, reason).
    pub watcher_dropped: BTreeMap<(String, String), u64>,
    /// Webhook (and other queued) sinks by name.
    pub sinks: BTreeMap<String, WebhookStats>,
    /// Plugin uses by (plugin, tenant).
    pub plugins: BTreeMap<(String, String), PluginStatsSnapshot>,
    /// Plugin versions swapped in (or reverted) by hot reload.
    pub plugin_swaps: u64,
    /// Hot-reloaded versions moved from the quick tier to their optimized build.
    pub plugin_tier_ups: u64,
    /// Plugin files refused by hot reload.
    pub plugin_reloads_rejected: u64,
    /// Plugin versions refused for a digest other than their pin.
    pub plugin_pin_mismatches: u64,
    /// Tenant config versions taken after the first.
    pub config_reloads_applied: u64,
    /// Tenant config versions refused.
    pub config_reloads_rejected: u64,
    /// HTTP ingest counters.
    pub ingest: Option<IngestStats>,
    /// The watch cache (`--serve`, or watcher plugins of the results), when the run has one.
    pub watch_cache: Option<WatchCacheStats>,
    /// Correlator snapshots by outcome (`stored`, `restored`, `refused`, `failed`).
    pub snapshots: BTreeMap<String, u64>,
    /// Events JetStream acknowledged (the NATS publish tier), of them duplicates by message id,
    /// and publications tried again.
    pub nats_published: u64,
    /// See [`nats_published`](Self::nats_published).
    pub nats_duplicates: u64,
    /// See [`nats_published`](Self::nats_published).
    pub nats_publish_retries: u64,
}

fn add<K: Ord>(map: &mut BTreeMap<K, u64>, key: K, n: u64) {
    *map.entry(key).or_default() += n;
}

impl Snapshot {
    /// Adds a scale-out's counters ([`crate::pipeline::scale::ScaleStats`]): snapshots by outcome and the
    /// publish tier's publications.
    pub fn add_scale(&mut self, s: &crate::pipeline::scale::ScaleStats) {
        for (outcome, n) in [
            ("stored", s.snapshots),
            ("restored", s.snapshots_restored),
            ("refused", s.snapshots_refused),
            ("failed", s.snapshot_failures),
        ] {
            add(&mut self.snapshots, outcome.to_string(), n);
        }
        self.nats_published += s.published;
        self.nats_duplicates += s.duplicates;
        self.nats_publish_retries += s.publish_retries;
    }

    /// Adds the tenant router watcher's counters: per tenant routed, writes by verb, failures
    /// by outcome, retries, spam skips, aggregations, filter-plugin drops and spam exemptions;
    /// drops per declarative rule; `reloads` as applied config reloads.
    pub fn add_router(&mut self, stats: &RouterStats) {
        for (tenant, s) in &stats.tenants {
            add(&mut self.routed, tenant.clone(), s.received);
            add(&mut self.writes, (tenant.clone(), "create".into()), s.created);
            add(&mut self.writes, (tenant.clone(), "patch".into()), s.patched);
            if s.series_counted > 0 {
                add(&mut self.writes, (tenant.clone(), "series_counted".into()), s.series_counted);
            }
            add(&mut self.write_failures, (tenant.clone(), "dropped".into()), s.dropped);
            add(&mut self.write_failures, (tenant.clone(), "gave_up".into()), s.gave_up);
            add(&mut self.write_failures, (tenant.clone(), "cancelled".into()), s.cancelled);
            add(&mut self.write_failures, (tenant.clone(), "shed".into()), s.shed);
            add(&mut self.record_retries, tenant.clone(), s.retries);
            add(&mut self.spam_skipped, tenant.clone(), s.skipped);
            add(&mut self.aggregated, tenant.clone(), s.aggregated);
            add(&mut self.filtered, tenant.clone(), s.filtered);
            add(&mut self.spam_exempted, tenant.clone(), s.spam_exempted);
            add(&mut self.suppressed_summaries, tenant.clone(), s.suppressed_summaries);
        }
        for (tenant, rules) in &stats.dropped_by_rule {
            for (rule, n) in rules {
                add(&mut self.rule_dropped, (tenant.clone(), rule.clone()), *n);
            }
        }
        for (reason, n) in &stats.rejected {
            add(&mut self.rejected, reason.clone(), *n);
        }
        self.config_reloads_applied += stats.reloads;
    }

    /// Adds one plugin use (its name, tenant and counters).
    pub fn add_plugin(&mut self, handle: &PluginHandle) {
        self.add_plugin_stats(handle.name(), handle.tenant(), &handle.stats().snapshot());
    }

    /// Adds plugin counters under (`plugin`, `tenant`).
    pub fn add_plugin_stats(&mut self, plugin: &str, tenant: &str, s: &PluginStatsSnapshot) {
        let e = self.plugins.entry((plugin.into(), tenant.into())).or_default();
        e.calls += s.calls;
        e.events += s.events;
        e.fuel_consumed += s.fuel_consumed;
        e.failures += s.failures;
        for (sum, n) in e.failures_by_reason.iter_mut().zip(s.failures_by_reason) {
            *sum += n;
        }
        e.fallbacks += s.fallbacks;
        e.drops += s.drops;
        e.instances += s.instances;
        e.memo_hits += s.memo_hits;
        e.memo_misses += s.memo_misses;
        e.call_nanos += s.call_nanos;
    }

    /// Adds the registry's swaps and refused files.
    pub fn add_registry(&mut self, registry: &PluginRegistry) {
        self.plugin_swaps += registry.swaps();
        self.plugin_tier_ups += registry.tier_ups();
        self.plugin_reloads_rejected += registry.rejected();
        self.plugin_pin_mismatches += registry.pin_mismatches();
        for (name, shadow) in registry.shadows() {
            let stats = shadow.stats();
            add(&mut self.shadow_compared, name.clone(), stats.compared);
            add(&mut self.shadow_diverged, name, stats.diverged);
        }
    }

    /// Adds the Broadcaster's incoming-queue drops (watcher `incoming`, reason `queue_full`).
    pub fn add_broadcaster(&mut self, broadcaster: &Broadcaster<SharedEvent>) {
        self.add_watcher_dropped("incoming", "queue_full", broadcaster.incoming_dropped());
    }

    /// Adds `n` events dropped by `watcher` for `reason`.
    pub fn add_watcher_dropped(&mut self, watcher: &str, reason: &str, n: u64) {
        add(&mut self.watcher_dropped, (watcher.into(), reason.into()), n);
    }

    /// Adds HTTP ingest's counters (`source`: the source's name, e.g. `http:127.0.0.1:8080`);
    /// its bad documents and non-events also go under [`bad_input`](Self::bad_input) and
    /// [`non_events`](Self::non_events) for `source`. Its accepted events are counted in
    /// `events_in` by whoever counts the Broadcaster's input, not here.
    pub fn add_ingest(&mut self, source: &str, stats: &IngestStats) {
        add(&mut self.bad_input, source.into(), stats.bad_documents);
        add(&mut self.non_events, source.into(), stats.non_events);
        let sum = self.ingest.get_or_insert_with(IngestStats::default);
        sum.requests += stats.requests;
        for (code, n) in &stats.by_status {
            add(&mut sum.by_status, *code, *n);
        }
        sum.accepted += stats.accepted;
        sum.bad_documents += stats.bad_documents;
        sum.non_events += stats.non_events;
        sum.patch_not_found += stats.patch_not_found;
        sum.unauthorized += stats.unauthorized;
        sum.too_large += stats.too_large;
        sum.unsupported_media_type += stats.unsupported_media_type;
        sum.bad_requests += stats.bad_requests;
        sum.queue_full += stats.queue_full;
    }

    /// Adds a JSON-lines or Kubernetes source's bad lines and non-events under `source`.
    pub fn add_source(&mut self, source: &str, stats: &SourceStats) {
        add(&mut self.bad_input, source.into(), stats.bad_lines);
        add(&mut self.non_events, source.into(), stats.non_events);
    }

    /// Adds a webhook sink's counters under its name.
    pub fn add_webhook(&mut self, sink: &WebhookSink) {
        self.add_sink_stats(sink.name(), &sink.stats());
    }

    /// Adds queued-sink counters under `name`.
    pub fn add_sink_stats(&mut self, name: &str, s: &WebhookStats) {
        let e = self.sinks.entry(name.into()).or_default();
        e.enqueued += s.enqueued;
        e.sent += s.sent;
        e.acked += s.acked;
        e.requests += s.requests;
        e.retries += s.retries;
        e.failed += s.failed;
        e.dropped += s.dropped;
        e.queue_depth += s.queue_depth;
        e.max_queue_depth = e.max_queue_depth.max(s.max_queue_depth);
        e.queue_capacity += s.queue_capacity;
    }

    /// Adds `n` events read from `source`.
    pub fn add_events_in(&mut self, source: &str, n: u64) {
        add(&mut self.events_in, source.into(), n);
    }

    /// Sets the watch cache's state and counts (a run has one cache at most).
    pub fn add_watch_cache(&mut self, stats: WatchCacheStats) {
        self.watch_cache = Some(stats);
    }
}

type Source = Box<dyn Fn(&mut Snapshot) + Send + Sync>;

#[derive(Default)]
struct Sources(RwLock<Vec<Source>>);

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.0.read().unwrap_or_else(|p| p.into_inner()).len();
        f.debug_struct("Sources").field("count", &n).finish()
    }
}

impl Sources {
    fn snapshot(&self) -> Snapshot {
        let mut snapshot = Snapshot::default();
        for source in self.0.read().unwrap_or_else(|p| p.into_inner()).iter() {
            source(&mut snapshot);
        }
        snapshot
    }
}

/// The metrics registry: sources registered by the run, read at every scrape. Share it as
/// `Arc<Metrics>`; sources may be added at any time.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    sources: Arc<Sources>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// An empty registry (every family is still described).
    pub fn new() -> Self {
        let sources = Arc::new(Sources::default());
        let mut registry = Registry::default();
        registry.register_collector(Box::new(SnapshotCollector(sources.clone())));
        Self { registry, sources }
    }

    /// Registers a source: called at every scrape to add its counters, e.g.
    /// `metrics.add_source(move |s| s.add_webhook(&sink))`. It must be quick and not block.
    pub fn add_source(&self, source: impl Fn(&mut Snapshot) + Send + Sync + 'static) {
        self.sources.0.write().unwrap_or_else(|p| p.into_inner()).push(Box::new(source));
    }

    /// What a scrape would read now.
    pub fn snapshot(&self) -> Snapshot {
        self.sources.snapshot()
    }

    /// The OpenMetrics text of every family, ending in `# EOF`.
    ///
    /// # Errors
    /// [`MetricsError::Encode`] if the encoder fails (it does not when writing to a `String`).
    pub fn encode(&self) -> Result<String, MetricsError> {
        let mut out = String::with_capacity(8 << 10);
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// A router with `GET /metrics` (merge it into the ingest router, or serve it alone).
pub fn router(metrics: Arc<Metrics>) -> Router {
    Router::new().route("/metrics", axum::routing::get(handler)).with_state(metrics)
}

/// `GET /metrics`: `200` with [`CONTENT_TYPE`], or `500` when encoding fails.
pub async fn handler(State(metrics): State<Arc<Metrics>>) -> Response {
    match metrics.encode() {
        Ok(text) => {
            (StatusCode::OK, [(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE))], text).into_response()
        }
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

#[derive(Debug)]
struct SnapshotCollector(Arc<Sources>);

/// Writes one family: its descriptor, then one sample per entry.
fn family<'a, L: prometheus_client::encoding::EncodeLabelSet + 'a>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    metric_type: MetricType,
    samples: impl IntoIterator<Item = (L, u64)>,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, metric_type)?;
    for (labels, value) in samples {
        let encoder = family.encode_family(&labels)?;
        match metric_type {
            MetricType::Gauge => ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX)).encode(encoder)?,
            _ => ConstCounter::new(value).encode(encoder)?,
        }
    }
    Ok(())
}

fn per<'a>(map: &'a BTreeMap<String, u64>, key: &'static str) -> Vec<([(&'static str, &'a str); 1], u64)> {
    map.iter().map(|(k, v)| (l1(key, k), *v)).collect()
}

fn per2<'a>(
    map: &'a BTreeMap<(String, String), u64>,
    k1: &'static str,
    k2: &'static str,
) -> Vec<([(&'static str, &'a str); 2], u64)> {
    map.iter().map(|((a, b), v)| (l2(k1, a, k2, b), *v)).collect()
}

fn l1<'a>(k: &'static str, v: &'a str) -> [(&'static str, &'a str); 1] {
    [(k, v)]
}

fn l2<'a>(k1: &'static str, v1: &'a str, k2: &'static str, v2: &'a str) -> [(&'static str, &'a str); 2] {
    [(k1, v1), (k2, v2)]
}

impl Collector for SnapshotCollector {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use MetricType::{Counter, Gauge};
        let s = self.0.snapshot();
        family(
            &mut e,
            "eventpipe_events_in",
            "Events read or accepted, per source.",
            Counter,
            per(&s.events_in, "source"),
        )?;
        family(
            &mut e,
            "eventpipe_source_bad_input",
            "Input lines or documents that could not be decoded, per source.",
            Counter,
            per(&s.bad_input, "source"),
        )?;
        family(
            &mut e,
            "eventpipe_source_non_events",
            "Input documents that are not events (watch bookmarks, ERROR envelopes), per source.",
            Counter,
            per(&s.non_events, "source"),
        )?;
        family(&mut e, "eventpipe_events_routed", "Events given to each tenant.", Counter, per(&s.routed, "tenant"))?;
        family(
            &mut e,
            "eventpipe_sink_writes",
            "Events written by sink call verb (create, patch), per tenant.",
            Counter,
            per2(&s.writes, "tenant", "verb"),
        )?;
        family(
            &mut e,
            "eventpipe_sink_write_failures",
            "Events recordToSink gave up on, by outcome (dropped, gave_up, cancelled, shed), per tenant.",
            Counter,
            per2(&s.write_failures, "tenant", "outcome"),
        )?;
        family(
            &mut e,
            "eventpipe_record_retries",
            "recordToSink attempts beyond the first, per tenant.",
            Counter,
            per(&s.record_retries, "tenant"),
        )?;
        family(
            &mut e,
            "eventpipe_sink_rejected",
            "Writes the server rejected and recordToSink dropped, per reason (AlreadyExists, NotFound, NamespaceTerminating, …).",
            Counter,
            per(&s.rejected, "reason"),
        )?;
        family(
            &mut e,
            "eventpipe_spam_skipped",
            "Events skipped by the spam filter, per tenant.",
            Counter,
            per(&s.spam_skipped, "tenant"),
        )?;
        family(
            &mut e,
            "eventpipe_aggregated",
            "Events replaced by an aggregate event, per tenant.",
            Counter,
            per(&s.aggregated, "tenant"),
        )?;
        family(
            &mut e,
            "eventpipe_filtered",
            "Events dropped by filter plugins, per tenant.",
            Counter,
            per(&s.filtered, "tenant"),
        )?;
        family(
            &mut e,
            "eventpipe_rule_dropped",
            "Events dropped by declarative drop / keep rules, per tenant and rule.",
            Counter,
            per2(&s.rule_dropped, "tenant", "rule"),
        )?;
        family(
            &mut e,
            "eventpipe_spam_exempted",
            "Events a spam_exempt rule let through the spam filter, per tenant.",
            Counter,
            per(&s.spam_exempted, "tenant"),
        )?;
        family(
            &mut e,
            "eventpipe_suppressed_summaries",
            "\"N events suppressed\" summary events sent, per tenant.",
            Counter,
            per(&s.suppressed_summaries, "tenant"),
        )?;
        family(
            &mut e,
            "eventpipe_shadow_compared",
            "Events a shadow plugin's candidate was compared on, per plugin.",
            Counter,
            per(&s.shadow_compared, "plugin"),
        )?;
        family(
            &mut e,
            "eventpipe_shadow_divergences",
            "Events on which a shadow plugin's candidate answered otherwise than the serving version, per plugin.",
            Counter,
            per(&s.shadow_diverged, "plugin"),
        )?;
        family(
            &mut e,
            "eventpipe_watcher_dropped",
            "Events dropped by Broadcaster queues, per watcher and reason.",
            Counter,
            per2(&s.watcher_dropped, "watcher", "reason"),
        )?;

        let sink =
            |f: fn(&WebhookStats) -> u64| s.sinks.iter().map(move |(n, st)| (l1("sink", n), f(st))).collect::<Vec<_>>();
        family(
            &mut e,
            "eventpipe_sink_sent",
            "Events sent by queued sinks (once per event).",
            Counter,
            sink(|s| s.sent),
        )?;
        family(
            &mut e,
            "eventpipe_sink_acked",
            "Events acknowledged by the sink's endpoint.",
            Counter,
            sink(|s| s.acked),
        )?;
        family(
            &mut e,
            "eventpipe_sink_retries",
            "Sink requests beyond the first of a batch.",
            Counter,
            sink(|s| s.retries),
        )?;
        family(&mut e, "eventpipe_sink_failures", "Events whose batch failed for good.", Counter, sink(|s| s.failed))?;
        let dropped =
            s.sinks.iter().map(|(n, st)| (l2("sink", n, "reason", "queue_full"), st.dropped)).collect::<Vec<_>>();
        family(&mut e, "eventpipe_sink_dropped", "Events a sink refused, per reason.", Counter, dropped)?;
        family(
            &mut e,
            "eventpipe_sink_queue_depth",
            "Events queued or in flight in a sink, now.",
            Gauge,
            sink(|s| s.queue_depth),
        )?;
        family(
            &mut e,
            "eventpipe_sink_queue_capacity",
            "A sink's queue capacity, events.",
            Gauge,
            sink(|s| s.queue_capacity),
        )?;

        let plugin = |f: fn(&PluginStatsSnapshot) -> u64| {
            s.plugins.iter().map(move |((p, t), st)| (l2("plugin", p, "tenant", t), f(st))).collect::<Vec<_>>()
        };
        family(&mut e, "eventpipe_plugin_calls", "Calls into a plugin.", Counter, plugin(|s| s.calls))?;
        family(&mut e, "eventpipe_plugin_events", "Events passed to a plugin.", Counter, plugin(|s| s.events))?;
        family(
            &mut e,
            "eventpipe_plugin_fuel_consumed",
            "Fuel consumed by successful plugin calls.",
            Counter,
            plugin(|s| s.fuel_consumed),
        )?;
        {
            let mut family = e.encode_descriptor(
                "eventpipe_plugin_call_seconds",
                "Time inside plugin calls (lowering, running, lifting), seconds.",
                None,
                Counter,
            )?;
            for ((p, t), st) in &s.plugins {
                let labels = l2("plugin", p, "tenant", t);
                ConstCounter::new(st.call_nanos as f64 / 1e9).encode(family.encode_family(&labels)?)?;
            }
        }
        let failures = s.plugins.iter().flat_map(|((p, t), st)| {
            CallFailure::LABELS
                .iter()
                .zip(st.failures_by_reason)
                .map(move |(reason, n)| ([("plugin", p.as_str()), ("tenant", t.as_str()), ("reason", *reason)], n))
        });
        family(&mut e, "eventpipe_plugin_failures", "Failed plugin calls, per reason.", Counter, failures)?;
        family(
            &mut e,
            "eventpipe_plugin_fallbacks",
            "Events handled by the built-in function after a plugin failure.",
            Counter,
            plugin(|s| s.fallbacks),
        )?;
        family(
            &mut e,
            "eventpipe_plugin_drops",
            "Events dropped after a plugin failure.",
            Counter,
            plugin(|s| s.drops),
        )?;
        family(&mut e, "eventpipe_plugin_instances", "Plugin instances created.", Counter, plugin(|s| s.instances))?;
        family(
            &mut e,
            "eventpipe_plugin_memo_hits",
            "Events a pure key plugin's memo answered without calling it.",
            Counter,
            plugin(|s| s.memo_hits),
        )?;
        family(
            &mut e,
            "eventpipe_plugin_memo_misses",
            "Events a pure key plugin's memo passed to the plugin.",
            Counter,
            plugin(|s| s.memo_misses),
        )?;

        family(
            &mut e,
            "eventpipe_snapshots",
            "Correlator snapshots stored, restored, refused (other version, seed, partitioning or options: started fresh) and failed.",
            Counter,
            per(&s.snapshots, "outcome"),
        )?;
        family(
            &mut e,
            "eventpipe_nats_published",
            "Events JetStream acknowledged (NATS publish tier).",
            Counter,
            [(NoLabels, s.nats_published)],
        )?;
        family(
            &mut e,
            "eventpipe_nats_duplicates",
            "Published events JetStream recognised as duplicates by Nats-Msg-Id.",
            Counter,
            [(NoLabels, s.nats_duplicates)],
        )?;
        family(
            &mut e,
            "eventpipe_nats_publish_retries",
            "Publications to JetStream tried again.",
            Counter,
            [(NoLabels, s.nats_publish_retries)],
        )?;
        family(
            &mut e,
            "eventpipe_plugin_swaps",
            "Plugin versions swapped in or reverted by hot reload.",
            Counter,
            [(NoLabels, s.plugin_swaps)],
        )?;
        family(
            &mut e,
            "eventpipe_plugin_tier_ups",
            "Hot-reloaded plugin versions moved from the quick tier to their optimized build.",
            Counter,
            [(NoLabels, s.plugin_tier_ups)],
        )?;
        family(
            &mut e,
            "eventpipe_plugin_reloads_rejected",
            "Plugin files refused by hot reload.",
            Counter,
            [(NoLabels, s.plugin_reloads_rejected)],
        )?;
        family(
            &mut e,
            "eventpipe_plugin_pin_mismatches",
            "Plugin versions refused because their SHA-256 digest is not their pin.",
            Counter,
            [(NoLabels, s.plugin_pin_mismatches)],
        )?;
        family(
            &mut e,
            "eventpipe_config_reloads",
            "Tenant config versions applied or rejected.",
            Counter,
            [
                (l1("result", "applied"), s.config_reloads_applied),
                (l1("result", "rejected"), s.config_reloads_rejected),
            ],
        )?;
        if let Some(i) = s.ingest {
            let codes: Vec<String> = i.by_status.keys().map(u16::to_string).collect();
            family(
                &mut e,
                "eventpipe_ingest_requests",
                "HTTP ingest requests answered, per status code.",
                Counter,
                codes.iter().zip(i.by_status.values()).map(|(code, n)| (l1("code", code), *n)),
            )?;
            family(
                &mut e,
                "eventpipe_ingest_accepted",
                "Events HTTP ingest put on the Broadcaster's queue.",
                Counter,
                [(NoLabels, i.accepted)],
            )?;
            let rejected = [
                ("unauthorized", i.unauthorized),
                ("too_large", i.too_large),
                ("unsupported_media_type", i.unsupported_media_type),
                ("bad_request", i.bad_requests),
                ("queue_full", i.queue_full),
                ("bad_document", i.bad_documents),
            ];
            family(
                &mut e,
                "eventpipe_ingest_rejected",
                "HTTP ingest error answers and bad documents, per reason.",
                Counter,
                rejected.map(|(r, n)| (l1("reason", r), n)),
            )?;
        }
        if let Some(c) = s.watch_cache {
            let gauges = [
                (
                    "eventpipe_watch_cache_resource_version",
                    "The watch cache's newest resourceVersion.",
                    c.resource_version,
                ),
                ("eventpipe_watch_cache_objects", "Events the watch cache holds.", c.objects as u64),
                ("eventpipe_watch_cache_window_changes", "Changes in the watch cache's window.", c.window as u64),
                ("eventpipe_watch_cache_watches", "Watches of the watch cache open now.", c.watchers),
            ];
            for (name, help, value) in gauges {
                family(&mut e, name, help, Gauge, [(NoLabels, value)])?;
            }
            family(
                &mut e,
                "eventpipe_watch_cache_changes",
                "Changes made in the watch cache (creates, patches, updates, deletions).",
                Counter,
                [(NoLabels, c.changes)],
            )?;
            family(
                &mut e,
                "eventpipe_watch_cache_deleted",
                "Events the watch cache deleted, per reason (ttl, max_objects).",
                Counter,
                [(l1("reason", "ttl"), c.expired_ttl), (l1("reason", "max_objects"), c.evicted)],
            )?;
            family(
                &mut e,
                "eventpipe_watch_cache_watches_cut_off",
                "Watches cut off because their queue stayed full for the budget.",
                Counter,
                [(NoLabels, c.cut_off)],
            )?;
            family(
                &mut e,
                "eventpipe_watch_cache_expired_requests",
                "Lists and watches answered 410 Expired (their resourceVersion left the window).",
                Counter,
                [(NoLabels, c.too_old)],
            )?;
        }
        Ok(())
    }
}

/// The empty label set.
#[derive(Debug, Clone, Copy)]
struct NoLabels;

impl prometheus_client::encoding::EncodeLabelSet for NoLabels {
    fn encode(&self, _encoder: &mut prometheus_client::encoding::LabelSetEncoder) -> Result<(), std::fmt::Error> {
        Ok(())
    }
}
