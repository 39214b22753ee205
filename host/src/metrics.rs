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
//! This module sits low in the layers: it knows the families (the table [`FAMILIES`]: name,
//! help, kind, the series always shown) and how to serve them, not whose counters they are.
//! Each counting module adds its own to a [`Snapshot`] (`Snapshot::add_router` beside
//! `RouterStats`, `Snapshot::add_webhook` beside the webhook sink, …), and each piece of the
//! running topology ([`crate::topology`]) registers its source.
//!
//! Histograms ([`histogram`]) come as `_bucket{le}`, `_sum` and `_count` series; durations in
//! seconds.
//!
//! # Families (OpenMetrics names; counters end in `_total`)
//!
//! | family | labels | from |
//! |---|---|---|
//! | `eventpipe_events_in_total` | `source` | events read / accepted per source |
//! | `eventpipe_source_last_progress_timestamp_seconds` (gauge) | `source` | a Kubernetes source: unix seconds of the last event or bookmark its watch delivered (or list it completed) |
//! | `eventpipe_source_watch_restarts_total` | `source`, `reason` (`stalled`, `expired`, `error`, `ended`) | a Kubernetes source's watch restarts ([`crate::source::k8s`]) |
//! | `eventpipe_events_routed_total` | `tenant` | `RouterStats.tenants[t].received` |
//! | `eventpipe_sink_writes_total` | `tenant`, `verb` (`create`, `patch`; `series_counted` with events.k8s.io recording) | `created`, `patched`, `series_counted` |
//! | `eventpipe_sink_outcomes_total` | `sink` (its spec; `watch-cache`), `outcome` (`create`, `patch`, `dropped`, `gave_up`, `cancelled`, `shed`) | per-sink write outcomes (the tenant families count each event once) |
//! | `eventpipe_sink_write_failures_total` | `tenant`, `outcome` (`dropped`, `gave_up`, `cancelled`, `shed`) | `recordToSink` outcomes; `shed`: an at-most-once sink's full window |
//! | `eventpipe_record_retries_total` | `tenant` | `recordToSink` attempts beyond the first |
//! | `eventpipe_spam_skipped_total` | `tenant` | spam filter skips |
//! | `eventpipe_sink_rejected_total` | `reason` (`AlreadyExists`, `NotFound`, `NamespaceTerminating`, `NamespaceNotFound`, …; never a namespace) | writes the server rejected and `recordToSink` dropped |
//! | `eventpipe_aggregated_total` | `tenant` | events replaced by an aggregate |
//! | `eventpipe_filtered_total` | `tenant` | filter plugin drops |
//! | `eventpipe_rule_dropped_total` | `tenant`, `rule` | declarative `drop` / `keep` rule drops ([`crate::tenant::rules`]) |
//! | `eventpipe_spam_exempted_total` | `tenant` | events a `spam_exempt` rule let through the spam filter |
//! | `eventpipe_suppressed_summaries_total` | `tenant` | "N events suppressed" summaries sent ([`crate::pipeline::suppressed`]) |
//! | `eventpipe_route_sent_total` | `route` | writes a route sent to its sinks ([`crate::pipeline::routes`]) |
//! | `eventpipe_route_held_back_total` | `route`, `reason` (`min_count`, `rate`) | writes a route selected but held back |
//! | `eventpipe_shadow_compared_total`, `eventpipe_shadow_divergences_total` | `plugin` | shadow plugins ([`crate::plugin::shadow`]) |
//! | `eventpipe_watcher_dropped_total` | `watcher`, `reason` | Broadcaster queue drops |
//! | `eventpipe_sink_sent_total`, `_acked_total`, `_retries_total`, `_failures_total` | `sink` | webhook sinks |
//! | `eventpipe_sink_partially_rejected_total` | `sink` | webhook and OTLP sinks: events an acknowledged batch refused (OTLP partial success) |
//! | `eventpipe_sink_render_errors_total` | `sink` | templated webhooks: events the template could not render (failed for good, logged with the event's name) |
//! | `eventpipe_sink_dropped_total` | `sink`, `reason` (`queue_full`) | webhook sinks, at-most-once |
//! | `eventpipe_sink_queue_depth`, `eventpipe_sink_queue_capacity` (gauges) | `sink` | webhook sinks, events |
//! | `eventpipe_sink_concurrency_limit`, `eventpipe_sink_requests_in_flight` (gauges) | `sink` | webhook sinks, requests |
//! | `eventpipe_events_total` | `tenant`, `type`, `involved_object_namespace`, `involved_object_kind`, `reason` | the opt-in `metrics` sink: sink writes of correlated events, capped ([`crate::sink::event_metrics`]) |
//! | `eventpipe_events_folded_total` | `tenant` | writes the cap counted under `other` |
//! | `eventpipe_plugin_calls_total`, `_events_total`, `_fuel_consumed_total`, `_fallbacks_total`, `_drops_total`, `_instances_total`, `_memo_hits_total`, `_memo_misses_total` | `plugin`, `tenant` | `PluginStats` |
//! | `eventpipe_plugin_call_seconds_total` | `plugin`, `tenant` | time inside plugin calls |
//! | `eventpipe_plugin_call_duration_seconds` (histogram) | `plugin`, `tenant` | each plugin call (a batch of events), seconds |
//! | `eventpipe_sink_write_duration_seconds` (histogram) | `sink` | each event's write to a sink (`recordToSink` with its retries), seconds |
//! | `eventpipe_sink_batch_size` (histogram) | `sink` | events per webhook batch |
//! | `eventpipe_event_latency_seconds` (histogram) | — | from the tenant router taking an event off the Broadcaster's queue to its acknowledgement, seconds |
//! | `eventpipe_plugin_quarantines_total`, `eventpipe_plugin_quarantined` (gauge) | `plugin`, `tenant` | circuit breaker ([`crate::plugin::breaker`]) |
//! | `eventpipe_plugin_failures_total` | `plugin`, `tenant`, `reason` (`trap`, `out_of_fuel`, `memory_limit`, `garbage`, …) | `PluginStats` |
//! | `eventpipe_plugin_swaps_total`, `eventpipe_plugin_tier_ups_total`, `eventpipe_plugin_reloads_rejected_total` | — | plugin registry |
//! | `eventpipe_plugin_pin_mismatches_total` | — | plugin versions refused for a digest other than their pin (also among the rejected reloads) |
//! | `eventpipe_config_reloads_total` | `result` (`applied`, `rejected`) | tenant config reloads |
//! | `eventpipe_snapshots_total` | `outcome` (`stored`, `restored`, `refused`, `failed`) | correlator snapshots ([`crate::pipeline::scale`], a single host's state file) |
//! | `eventpipe_nats_published_total`, `eventpipe_nats_duplicates_total`, `eventpipe_nats_publish_retries_total` | — | the NATS publish tier |
//! | `eventpipe_nats_worker_partitions` (gauge) | — | a NATS worker's partitions (workers only) |
//! | `eventpipe_ingest_requests_total` | — | HTTP ingest |
//! | `eventpipe_ingest_rejected_total` | `reason` | HTTP ingest error answers and bad documents |
//! | `eventpipe_http_refused_total` | `reason` (`max_connections`: answered `429`; `slow_head`, `slow_body`: shed) | every HTTP server of the run ([`crate::http_server`]) |
//! | `eventpipe_watch_cache_resource_version`, `_objects`, `_window_changes`, `_watches` (gauges) | — | the watch cache ([`crate::watch_cache`]): its newest resourceVersion, events held, changes in the window, watches open |
//! | `eventpipe_watch_cache_changes_total`, `_deleted_total` | — / `reason` (`ttl`, `max_objects`) | changes made; events deleted for their TTL or the object bound |
//! | `eventpipe_watch_cache_watches_cut_off_total`, `_expired_requests_total` | — | watches cut off for a full queue; lists and watches answered `410 Expired` |
//! | `eventpipe_ready` (gauge) | — | 1 while `GET /readyz` answers `200` ([`crate::health`]), else 0 |
//! | `eventpipe_leader` (gauge), `eventpipe_leader_transitions_total` | — | `--leader-elect`: 1 while this process holds the Lease; times it acquired it ([`crate::topology::leader`]) |

pub mod histogram;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

pub use histogram::{Counts, Histogram};

/// The `Content-Type` of `GET /metrics` (OpenMetrics text 1.0.0, which Prometheus scrapes).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Why the metrics could not be encoded.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The text encoder failed.
    #[error("encoding the metrics: {0}")]
    Encode(#[from] std::fmt::Error),
}

/// What a family's samples are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A counter (its samples end in `_total`).
    Counter,
    /// A gauge (a value now).
    Gauge,
    /// A counter of nanoseconds, exposed in seconds.
    Nanoseconds,
    /// A histogram of nanoseconds ([`Counts`]), exposed in seconds.
    DurationHistogram,
    /// A histogram of sizes (items).
    SizeHistogram,
}

/// A label set of the table: (label, value) pairs.
pub type StaticLabels = &'static [(&'static str, &'static str)];

/// One family of the exposition.
#[derive(Debug)]
pub struct Family {
    /// Its OpenMetrics name (a counter's samples add `_total`).
    pub name: &'static str,
    /// Its `# HELP` text.
    pub help: &'static str,
    /// Counter, gauge or seconds.
    pub kind: Kind,
    /// The series shown even when nothing added to them (at 0).
    pub always: &'static [StaticLabels],
    /// Described only once something added to it (HTTP ingest, the watch cache: only runs that
    /// have them).
    pub when_present: bool,
}

const fn histogram(name: &'static str, help: &'static str, kind: Kind) -> Family {
    Family { name, help, kind, always: &[], when_present: false }
}

const fn counter(name: &'static str, help: &'static str) -> Family {
    Family { name, help, kind: Kind::Counter, always: &[], when_present: false }
}

const fn gauge(name: &'static str, help: &'static str) -> Family {
    Family { name, help, kind: Kind::Gauge, always: &[], when_present: false }
}

/// A counter with one series and no labels, shown at 0 until counted.
const fn single(name: &'static str, help: &'static str) -> Family {
    Family { always: &[&[]], ..counter(name, help) }
}

/// A family of the HTTP ingest or the watch cache: described only when the run has one.
const fn present(family: Family) -> Family {
    Family { when_present: true, ..family }
}

/// `eventpipe_events_in` (`source`).
pub const EVENTS_IN: Family = counter("eventpipe_events_in", "Events read or accepted, per source.");
/// `eventpipe_source_bad_input` (`source`).
pub const BAD_INPUT: Family =
    counter("eventpipe_source_bad_input", "Input lines or documents that could not be decoded, per source.");
/// `eventpipe_source_last_progress_timestamp_seconds` (`source`; a gauge, Kubernetes sources).
pub const SOURCE_LAST_PROGRESS: Family = present(gauge(
    "eventpipe_source_last_progress_timestamp_seconds",
    "Unix time (whole seconds) of the last event or bookmark the Kubernetes watch delivered, or list it completed.",
));
/// `eventpipe_source_watch_restarts` (`source`, `reason`: `stalled`, `expired`, `error`,
/// `ended`; Kubernetes sources).
pub const SOURCE_WATCH_RESTARTS: Family = present(counter(
    "eventpipe_source_watch_restarts",
    "Kubernetes watch restarts, per reason: stalled (delivered nothing while the server moved on), \
     expired (410 Gone: listed again), error (a failed request, after back-off), ended (the server closed the stream).",
));
/// `eventpipe_source_non_events` (`source`).
pub const NON_EVENTS: Family = counter(
    "eventpipe_source_non_events",
    "Input documents that are not events (watch bookmarks, ERROR envelopes), per source.",
);
/// `eventpipe_events_routed` (`tenant`).
pub const ROUTED: Family = counter("eventpipe_events_routed", "Events given to each tenant.");
/// `eventpipe_sink_writes` (`tenant`, `verb`).
pub const SINK_WRITES: Family = counter(
    "eventpipe_sink_writes",
    "Events written, by sink call verb (create, patch), per tenant: once per event, however many sinks wrote it.",
);
/// `eventpipe_sink_outcomes` (`sink`, `outcome`).
pub const SINK_OUTCOMES: Family = counter(
    "eventpipe_sink_outcomes",
    "Sink write outcomes, per sink (its spec) and outcome; the tenant families count each event once.",
);
/// `eventpipe_sink_write_failures` (`tenant`, `outcome`).
pub const WRITE_FAILURES: Family = counter(
    "eventpipe_sink_write_failures",
    "Events recordToSink gave up on, by outcome (dropped, gave_up, cancelled, shed), per tenant.",
);
/// `eventpipe_record_retries` (`tenant`).
pub const RECORD_RETRIES: Family =
    counter("eventpipe_record_retries", "recordToSink attempts beyond the first, per tenant.");
/// `eventpipe_sink_rejected` (`reason`).
pub const SINK_REJECTED: Family = counter(
    "eventpipe_sink_rejected",
    "Writes the server rejected and recordToSink dropped, per reason (AlreadyExists, NotFound, NamespaceTerminating, …).",
);
/// `eventpipe_spam_skipped` (`tenant`).
pub const SPAM_SKIPPED: Family = counter("eventpipe_spam_skipped", "Events skipped by the spam filter, per tenant.");
/// `eventpipe_aggregated` (`tenant`).
pub const AGGREGATED: Family = counter("eventpipe_aggregated", "Events replaced by an aggregate event, per tenant.");
/// `eventpipe_already_aggregated` (`tenant`).
pub const ALREADY_AGGREGATED: Family = counter(
    "eventpipe_already_aggregated",
    "Events received already aggregated (message `(combined from similar events): …`), per tenant.",
);
/// `eventpipe_filtered` (`tenant`).
pub const FILTERED: Family = counter("eventpipe_filtered", "Events dropped by filter plugins, per tenant.");
/// `eventpipe_rule_dropped` (`tenant`, `rule`).
pub const RULE_DROPPED: Family =
    counter("eventpipe_rule_dropped", "Events dropped by declarative drop / keep rules, per tenant and rule.");
/// `eventpipe_spam_exempted` (`tenant`).
pub const SPAM_EXEMPTED: Family =
    counter("eventpipe_spam_exempted", "Events a spam_exempt rule let through the spam filter, per tenant.");
/// `eventpipe_suppressed_summaries` (`tenant`).
pub const SUPPRESSED_SUMMARIES: Family =
    counter("eventpipe_suppressed_summaries", "\"N events suppressed\" summary events sent, per tenant.");
/// `eventpipe_route_sent` (`route`).
pub const ROUTE_SENT: Family =
    counter("eventpipe_route_sent", "Correlated writes a route sent to its sinks, per route (once per write).");
/// `eventpipe_route_held_back` (`route`, `reason`).
pub const ROUTE_HELD_BACK: Family = counter(
    "eventpipe_route_held_back",
    "Correlated writes a route selected but held back, per route and reason (min_count, rate).",
);
/// `eventpipe_shadow_compared` (`plugin`).
pub const SHADOW_COMPARED: Family =
    counter("eventpipe_shadow_compared", "Events a shadow plugin's candidate was compared on, per plugin.");
/// `eventpipe_shadow_divergences` (`plugin`).
pub const SHADOW_DIVERGENCES: Family = counter(
    "eventpipe_shadow_divergences",
    "Events on which a shadow plugin's candidate answered otherwise than the serving version, per plugin.",
);
/// `eventpipe_watcher_dropped` (`watcher`, `reason`).
pub const WATCHER_DROPPED: Family =
    counter("eventpipe_watcher_dropped", "Events dropped by Broadcaster queues, per watcher and reason.");
/// `eventpipe_sink_sent` (`sink`).
pub const SINK_SENT: Family = counter("eventpipe_sink_sent", "Events sent by queued sinks (once per event).");
/// `eventpipe_sink_acked` (`sink`).
pub const SINK_ACKED: Family = counter("eventpipe_sink_acked", "Events acknowledged by the sink's endpoint.");
/// `eventpipe_sink_retries` (`sink`).
pub const SINK_RETRIES: Family = counter("eventpipe_sink_retries", "Sink requests beyond the first of a batch.");
/// `eventpipe_sink_failures` (`sink`).
pub const SINK_FAILURES: Family = counter("eventpipe_sink_failures", "Events whose batch failed for good.");
/// `eventpipe_sink_partially_rejected` (`sink`).
pub const SINK_PARTIAL_REJECTED: Family = counter(
    "eventpipe_sink_partially_rejected",
    "Events in batches the endpoint acknowledged but said it refused (OTLP partial success), not retried.",
);
/// `eventpipe_sink_render_errors` (`sink`).
pub const SINK_RENDER_ERRORS: Family = counter(
    "eventpipe_sink_render_errors",
    "Events a templated webhook could not render (a template error, a body that is not JSON); each failed for good.",
);
/// `eventpipe_sink_dropped` (`sink`, `reason`).
pub const SINK_DROPPED: Family = counter("eventpipe_sink_dropped", "Events a sink refused, per reason.");
/// `eventpipe_sink_queue_depth` (`sink`).
pub const SINK_QUEUE_DEPTH: Family = gauge("eventpipe_sink_queue_depth", "Events queued or in flight in a sink, now.");
/// `eventpipe_sink_queue_capacity` (`sink`).
pub const SINK_QUEUE_CAPACITY: Family = gauge("eventpipe_sink_queue_capacity", "A sink's queue capacity, events.");
/// `eventpipe_sink_concurrency_limit` (`sink`).
pub const SINK_CONCURRENCY_LIMIT: Family = gauge(
    "eventpipe_sink_concurrency_limit",
    "Requests a sink may have in flight now (the adaptive concurrency limit).",
);
/// `eventpipe_sink_requests_in_flight` (`sink`).
pub const SINK_REQUESTS_IN_FLIGHT: Family =
    gauge("eventpipe_sink_requests_in_flight", "Requests a sink has in flight now.");
/// `eventpipe_events` (`tenant`, `type`, `involved_object_namespace`, `involved_object_kind`,
/// `reason`): the `metrics` sink's counts ([`crate::sink::event_metrics`]).
pub const EVENTS: Family = present(counter(
    "eventpipe_events",
    "Sink writes (create, patch) of correlated events, per tenant, type, involved object namespace and kind, and \
     reason; series past the cap are counted under \"other\".",
));
/// `eventpipe_events_folded` (`tenant`).
pub const EVENTS_FOLDED: Family = present(counter(
    "eventpipe_events_folded",
    "Sink writes counted under the \"other\" series of eventpipe_events_total because its series cap was reached.",
));
/// `eventpipe_plugin_calls` (`plugin`, `tenant`).
pub const PLUGIN_CALLS: Family = counter("eventpipe_plugin_calls", "Calls into a plugin.");
/// `eventpipe_plugin_events` (`plugin`, `tenant`).
pub const PLUGIN_EVENTS: Family = counter("eventpipe_plugin_events", "Events passed to a plugin.");
/// `eventpipe_plugin_fuel_consumed` (`plugin`, `tenant`).
pub const PLUGIN_FUEL: Family = counter("eventpipe_plugin_fuel_consumed", "Fuel consumed by successful plugin calls.");
/// `eventpipe_plugin_call_seconds` (`plugin`, `tenant`).
pub const PLUGIN_CALL_SECONDS: Family = Family {
    kind: Kind::Nanoseconds,
    ..counter("eventpipe_plugin_call_seconds", "Time inside plugin calls (lowering, running, lifting), seconds.")
};
/// `eventpipe_plugin_failures` (`plugin`, `tenant`, `reason`).
pub const PLUGIN_FAILURES: Family = counter("eventpipe_plugin_failures", "Failed plugin calls, per reason.");
/// `eventpipe_plugin_fallbacks` (`plugin`, `tenant`).
pub const PLUGIN_FALLBACKS: Family =
    counter("eventpipe_plugin_fallbacks", "Events handled by the built-in function after a plugin failure.");
/// `eventpipe_plugin_drops` (`plugin`, `tenant`).
pub const PLUGIN_DROPS: Family = counter("eventpipe_plugin_drops", "Events dropped after a plugin failure.");
/// `eventpipe_plugin_instances` (`plugin`, `tenant`).
pub const PLUGIN_INSTANCES: Family = counter("eventpipe_plugin_instances", "Plugin instances created.");
/// `eventpipe_plugin_memo_hits` (`plugin`, `tenant`).
pub const PLUGIN_MEMO_HITS: Family =
    counter("eventpipe_plugin_memo_hits", "Events a pure key plugin's memo answered without calling it.");
/// `eventpipe_plugin_memo_misses` (`plugin`, `tenant`).
pub const PLUGIN_MEMO_MISSES: Family =
    counter("eventpipe_plugin_memo_misses", "Events a pure key plugin's memo passed to the plugin.");
/// `eventpipe_plugin_quarantines` (`plugin`, `tenant`).
pub const PLUGIN_QUARANTINES: Family = counter(
    "eventpipe_plugin_quarantines",
    "Times the plugin's circuit breaker quarantined it after repeated failures.",
);
/// `eventpipe_plugin_quarantined` (`plugin`, `tenant`).
pub const PLUGIN_QUARANTINED: Family = gauge(
    "eventpipe_plugin_quarantined",
    "1 while the plugin is quarantined (its fallback used without calling it), else 0.",
);
/// `eventpipe_plugin_call_duration_seconds` (`plugin`, `tenant`): a histogram.
pub const PLUGIN_CALL_DURATION: Family = histogram(
    "eventpipe_plugin_call_duration_seconds",
    "Plugin calls (one call takes a batch of events: lowering, running, lifting), seconds.",
    Kind::DurationHistogram,
);
/// `eventpipe_sink_write_duration_seconds` (`sink`): a histogram.
pub const SINK_WRITE_DURATION: Family = histogram(
    "eventpipe_sink_write_duration_seconds",
    "Sink writes of one event (recordToSink with its retries, until it ended), per sink, seconds.",
    Kind::DurationHistogram,
);
/// `eventpipe_sink_batch_size` (`sink`): a histogram.
pub const SINK_BATCH_SIZE: Family = histogram(
    "eventpipe_sink_batch_size",
    "Events per batch a batching sink (webhook) sent, per sink.",
    Kind::SizeHistogram,
);
/// `eventpipe_event_latency_seconds`: a histogram.
pub const EVENT_LATENCY: Family = Family {
    always: &[&[]],
    ..histogram(
        "eventpipe_event_latency_seconds",
        "Events from the tenant router taking them off the Broadcaster's queue to acknowledged (every at-least-once write ended, or nothing to write), seconds.",
        Kind::DurationHistogram,
    )
};
/// `eventpipe_snapshots` (`outcome`).
pub const SNAPSHOTS: Family = counter(
    "eventpipe_snapshots",
    "Correlator snapshots stored, restored, refused (other version, seed, partitioning or options: started fresh) and failed.",
);
/// `eventpipe_delivery_acknowledged_events`.
pub const DELIVERY_ACKNOWLEDGED: Family = single(
    "eventpipe_delivery_acknowledged_events",
    "Events of this run in the acknowledged prefix (at-least-once: every sink acknowledged them and every event before).",
);
/// `eventpipe_delivery_saved_events`.
pub const DELIVERY_SAVED: Family = single(
    "eventpipe_delivery_saved_events",
    "Events of this run the position saved in the state file covers (at-least-once).",
);
/// `eventpipe_nats_published`.
pub const NATS_PUBLISHED: Family =
    single("eventpipe_nats_published", "Events JetStream acknowledged (NATS publish tier).");
/// `eventpipe_nats_duplicates`.
pub const NATS_DUPLICATES: Family =
    single("eventpipe_nats_duplicates", "Published events JetStream recognised as duplicates by Nats-Msg-Id.");
/// `eventpipe_nats_publish_retries`.
pub const NATS_PUBLISH_RETRIES: Family =
    single("eventpipe_nats_publish_retries", "Publications to JetStream tried again.");
/// `eventpipe_nats_worker_partitions` (a gauge, workers only).
pub const NATS_WORKER_PARTITIONS: Family = present(gauge(
    "eventpipe_nats_worker_partitions",
    "Partitions of the stream this worker consumes (0: more workers than partitions, the worker idles).",
));
/// `eventpipe_plugin_swaps`.
pub const PLUGIN_SWAPS: Family =
    single("eventpipe_plugin_swaps", "Plugin versions swapped in or reverted by hot reload.");
/// `eventpipe_plugin_tier_ups`.
pub const PLUGIN_TIER_UPS: Family = single(
    "eventpipe_plugin_tier_ups",
    "Hot-reloaded plugin versions moved from the quick tier to their optimized build.",
);
/// `eventpipe_plugin_reloads_rejected`.
pub const PLUGIN_RELOADS_REJECTED: Family =
    single("eventpipe_plugin_reloads_rejected", "Plugin files refused by hot reload.");
/// `eventpipe_plugin_pin_mismatches`.
pub const PLUGIN_PIN_MISMATCHES: Family =
    single("eventpipe_plugin_pin_mismatches", "Plugin versions refused because their SHA-256 digest is not their pin.");
/// `eventpipe_config_reloads` (`result`: `applied`, `rejected`).
pub const CONFIG_RELOADS: Family = Family {
    always: &[&[("result", "applied")], &[("result", "rejected")]],
    ..counter("eventpipe_config_reloads", "Tenant config versions applied or rejected.")
};
/// `eventpipe_ingest_requests` (`code`).
pub const INGEST_REQUESTS: Family =
    present(counter("eventpipe_ingest_requests", "HTTP ingest requests answered, per status code."));
/// `eventpipe_ingest_accepted`.
pub const INGEST_ACCEPTED: Family =
    present(single("eventpipe_ingest_accepted", "Events HTTP ingest put on the Broadcaster's queue."));
/// `eventpipe_ingest_rejected` (`reason`).
pub const INGEST_REJECTED: Family =
    present(counter("eventpipe_ingest_rejected", "HTTP ingest error answers and bad documents, per reason."));
/// `eventpipe_http_refused` (`reason`: `max_connections`, `slow_head`, `slow_body`).
pub const HTTP_REFUSED: Family = present(counter(
    "eventpipe_http_refused",
    "HTTP requests answered 429 at the connection cap (max_connections) and connections shed to make room: \
     no complete request head yet (slow_head), a request body below the minimum rate (slow_body).",
));
/// `eventpipe_watch_cache_resource_version`.
pub const WATCH_CACHE_RESOURCE_VERSION: Family =
    present(gauge("eventpipe_watch_cache_resource_version", "The watch cache's newest resourceVersion."));
/// `eventpipe_watch_cache_objects`.
pub const WATCH_CACHE_OBJECTS: Family =
    present(gauge("eventpipe_watch_cache_objects", "Events the watch cache holds."));
/// `eventpipe_watch_cache_window_changes`.
pub const WATCH_CACHE_WINDOW: Family =
    present(gauge("eventpipe_watch_cache_window_changes", "Changes in the watch cache's window."));
/// `eventpipe_watch_cache_watches`.
pub const WATCH_CACHE_WATCHES: Family =
    present(gauge("eventpipe_watch_cache_watches", "Watches of the watch cache open now."));
/// `eventpipe_watch_cache_changes`.
pub const WATCH_CACHE_CHANGES: Family = present(counter(
    "eventpipe_watch_cache_changes",
    "Changes made in the watch cache (creates, patches, updates, deletions).",
));
/// `eventpipe_watch_cache_deleted` (`reason`: `ttl`, `max_objects`).
pub const WATCH_CACHE_DELETED: Family =
    present(counter("eventpipe_watch_cache_deleted", "Events the watch cache deleted, per reason (ttl, max_objects)."));
/// `eventpipe_watch_cache_watches_cut_off`.
pub const WATCH_CACHE_CUT_OFF: Family = present(counter(
    "eventpipe_watch_cache_watches_cut_off",
    "Watches cut off because their queue stayed full for the budget.",
));
/// `eventpipe_watch_cache_expired_requests`.
pub const WATCH_CACHE_EXPIRED: Family = present(counter(
    "eventpipe_watch_cache_expired_requests",
    "Lists and watches answered 410 Expired (their resourceVersion left the window).",
));

/// `eventpipe_ready` (a gauge, 0 or 1, no labels): what `/readyz` answers.
pub const READY: Family = gauge(
    "eventpipe_ready",
    "1 while /readyz answers 200 (the pipeline runs and no piece reports a readiness problem), else 0.",
);
/// `eventpipe_leader` (a gauge, 0 or 1; runs with `--leader-elect`).
pub const LEADER: Family = present(gauge(
    "eventpipe_leader",
    "1 while this process holds the leader election Lease, else 0 (--leader-elect).",
));
/// `eventpipe_leader_transitions` (runs with `--leader-elect`).
pub const LEADER_TRANSITIONS: Family = present(counter(
    "eventpipe_leader_transitions",
    "Times this process acquired the leader election Lease (--leader-elect).",
));
/// `eventpipe_enrich_gets` (no labels): GETs of single objects by enrichment (cache misses).
pub const ENRICH_GETS: Family = present(counter(
    "eventpipe_enrich_gets",
    "GETs of single objects by enrichment: objects newer than their kind's watch, or pushed out of its store.",
));
/// `eventpipe_enrich_enriched` (no labels): events that got an enrichment.
pub const ENRICH_ENRICHED: Family = present(counter("eventpipe_enrich_enriched", "Events that got an enrichment."));
/// `eventpipe_enrich_unresolved` (`reason`, `kind`): lookups that found nothing.
pub const ENRICH_UNRESOLVED: Family = present(counter(
    "eventpipe_enrich_unresolved",
    "Enrichment lookups that found nothing, by reason (not_found, forbidden, unknown_kind, timeout, error) and kind.",
));

/// Every family, in the order of the exposition.
pub const FAMILIES: &[&Family] = &[
    &EVENTS_IN,
    &ENRICH_GETS,
    &ENRICH_ENRICHED,
    &ENRICH_UNRESOLVED,
    &BAD_INPUT,
    &NON_EVENTS,
    &SOURCE_LAST_PROGRESS,
    &SOURCE_WATCH_RESTARTS,
    &ROUTED,
    &SINK_WRITES,
    &SINK_OUTCOMES,
    &WRITE_FAILURES,
    &RECORD_RETRIES,
    &SINK_REJECTED,
    &SPAM_SKIPPED,
    &AGGREGATED,
    &ALREADY_AGGREGATED,
    &FILTERED,
    &RULE_DROPPED,
    &SPAM_EXEMPTED,
    &SUPPRESSED_SUMMARIES,
    &ROUTE_SENT,
    &ROUTE_HELD_BACK,
    &SHADOW_COMPARED,
    &SHADOW_DIVERGENCES,
    &WATCHER_DROPPED,
    &SINK_SENT,
    &SINK_ACKED,
    &SINK_RETRIES,
    &SINK_FAILURES,
    &SINK_PARTIAL_REJECTED,
    &SINK_RENDER_ERRORS,
    &SINK_DROPPED,
    &SINK_QUEUE_DEPTH,
    &SINK_QUEUE_CAPACITY,
    &SINK_CONCURRENCY_LIMIT,
    &SINK_REQUESTS_IN_FLIGHT,
    &EVENTS,
    &EVENTS_FOLDED,
    &PLUGIN_CALLS,
    &PLUGIN_EVENTS,
    &PLUGIN_FUEL,
    &PLUGIN_CALL_SECONDS,
    &PLUGIN_FAILURES,
    &PLUGIN_FALLBACKS,
    &PLUGIN_DROPS,
    &PLUGIN_INSTANCES,
    &PLUGIN_MEMO_HITS,
    &PLUGIN_MEMO_MISSES,
    &PLUGIN_QUARANTINES,
    &PLUGIN_QUARANTINED,
    &PLUGIN_CALL_DURATION,
    &SINK_WRITE_DURATION,
    &SINK_BATCH_SIZE,
    &EVENT_LATENCY,
    &SNAPSHOTS,
    &DELIVERY_ACKNOWLEDGED,
    &DELIVERY_SAVED,
    &NATS_PUBLISHED,
    &NATS_DUPLICATES,
    &NATS_PUBLISH_RETRIES,
    &NATS_WORKER_PARTITIONS,
    &PLUGIN_SWAPS,
    &PLUGIN_TIER_UPS,
    &PLUGIN_RELOADS_REJECTED,
    &PLUGIN_PIN_MISMATCHES,
    &CONFIG_RELOADS,
    &INGEST_REQUESTS,
    &INGEST_ACCEPTED,
    &INGEST_REJECTED,
    &HTTP_REFUSED,
    &WATCH_CACHE_RESOURCE_VERSION,
    &WATCH_CACHE_OBJECTS,
    &WATCH_CACHE_WINDOW,
    &WATCH_CACHE_WATCHES,
    &WATCH_CACHE_CHANGES,
    &WATCH_CACHE_DELETED,
    &WATCH_CACHE_CUT_OFF,
    &WATCH_CACHE_EXPIRED,
    &READY,
    &LEADER,
    &LEADER_TRANSITIONS,
];

/// A series' labels, in the family's label order.
type Labels = Vec<(&'static str, String)>;

/// Every counter at one scrape; sources add to it: per family name, the value of each series.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    families: BTreeMap<&'static str, BTreeMap<Labels, u64>>,
    histograms: BTreeMap<&'static str, BTreeMap<Labels, Counts>>,
}

fn labels(pairs: &[(&'static str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (*k, (*v).to_string())).collect()
}

impl Snapshot {
    /// Adds `n` to `family`'s series with `labels` (its labels in the family's order).
    pub fn add(&mut self, family: &Family, labels_: &[(&'static str, &str)], n: u64) {
        *self.families.entry(family.name).or_default().entry(labels(labels_)).or_default() += n;
    }

    /// Sets `family`'s series with `labels` to `n` (a gauge or count of the run's one watch
    /// cache).
    pub fn set(&mut self, family: &Family, labels_: &[(&'static str, &str)], n: u64) {
        self.families.entry(family.name).or_default().insert(labels(labels_), n);
    }

    /// Marks `family` as present (described) even without a series.
    pub fn present(&mut self, family: &Family) {
        self.families.entry(family.name).or_default();
    }

    /// The value of `family`'s series with `labels`, if anything added to it.
    pub fn get(&self, family: &Family, labels_: &[(&'static str, &str)]) -> Option<u64> {
        self.families.get(family.name).and_then(|series| series.get(&labels(labels_))).copied()
    }

    /// Adds `counts` to histogram `family`'s series with `labels`.
    pub fn add_histogram(&mut self, family: &Family, labels_: &[(&'static str, &str)], counts: &Counts) {
        self.histograms.entry(family.name).or_default().entry(labels(labels_)).or_default().add(counts);
    }

    /// The counts of histogram `family`'s series with `labels`, if anything added to it.
    pub fn histogram(&self, family: &Family, labels_: &[(&'static str, &str)]) -> Option<&Counts> {
        self.histograms.get(family.name).and_then(|series| series.get(&labels(labels_)))
    }

    /// Adds `n` events read from `source`.
    pub fn add_events_in(&mut self, source: &str, n: u64) {
        self.add(&EVENTS_IN, &[("source", source)], n);
    }

    /// Adds `n` events dropped by `watcher` for `reason`.
    pub fn add_watcher_dropped(&mut self, watcher: &str, reason: &str, n: u64) {
        self.add(&WATCHER_DROPPED, &[("watcher", watcher), ("reason", reason)], n);
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

/// Writes one family: its descriptor, then its series (those always shown, at 0 when nothing
/// added to them, and every other one added).
fn encode_family(
    encoder: &mut DescriptorEncoder,
    family: &Family,
    added: Option<&BTreeMap<Labels, u64>>,
) -> Result<(), std::fmt::Error> {
    let metric_type = match family.kind {
        Kind::Gauge => MetricType::Gauge,
        Kind::Counter | Kind::Nanoseconds => MetricType::Counter,
        Kind::DurationHistogram | Kind::SizeHistogram => MetricType::Histogram,
    };
    let mut series: BTreeMap<Labels, u64> = family.always.iter().map(|l| (labels(l), 0)).collect();
    for (l, n) in added.into_iter().flatten() {
        *series.entry(l.clone()).or_default() += n;
    }
    let mut descriptor = encoder.encode_descriptor(family.name, family.help, None, metric_type)?;
    for (labels, value) in &series {
        let encoder = descriptor.encode_family(labels)?;
        match family.kind {
            Kind::Gauge => ConstGauge::new(i64::try_from(*value).unwrap_or(i64::MAX)).encode(encoder)?,
            Kind::Counter => ConstCounter::new(*value).encode(encoder)?,
            Kind::Nanoseconds => ConstCounter::new(*value as f64 / 1e9).encode(encoder)?,
            Kind::DurationHistogram | Kind::SizeHistogram => unreachable!("histograms are encoded apart"),
        }
    }
    Ok(())
}

/// Histogram counts as the encoder takes them (`scale`: 1e-9 for seconds from nanoseconds).
struct ConstHistogram<'a> {
    counts: &'a Counts,
    scale: f64,
}

impl EncodeMetric for ConstHistogram<'_> {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let sum = self.counts.sum() as f64 * self.scale;
        encoder.encode_histogram::<NoLabelSet>(sum, self.counts.count(), &self.counts.buckets(self.scale), None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// Writes one histogram family: its descriptor, then its series (those always shown, empty
/// with the bounds of `empty` when nothing added to them).
fn encode_histogram_family(
    encoder: &mut DescriptorEncoder,
    family: &Family,
    added: Option<&BTreeMap<Labels, Counts>>,
) -> Result<(), std::fmt::Error> {
    let (scale, empty) = match family.kind {
        Kind::SizeHistogram => (1.0, histogram::BATCH_BOUNDS),
        _ => (1e-9, histogram::WRITE_BOUNDS),
    };
    let mut series: BTreeMap<Labels, Counts> = family.always.iter().map(|l| (labels(l), Counts::new(empty))).collect();
    for (l, counts) in added.into_iter().flatten() {
        match series.get_mut(l) {
            Some(mine) if mine.is_empty() => *mine = counts.clone(),
            Some(mine) => mine.add(counts),
            None => {
                series.insert(l.clone(), counts.clone());
            }
        }
    }
    let mut descriptor = encoder.encode_descriptor(family.name, family.help, None, MetricType::Histogram)?;
    for (labels, counts) in &series {
        ConstHistogram { counts, scale }.encode(descriptor.encode_family(labels)?)?;
    }
    Ok(())
}

impl Collector for SnapshotCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let snapshot = self.0.snapshot();
        for family in FAMILIES {
            if matches!(family.kind, Kind::DurationHistogram | Kind::SizeHistogram) {
                let added = snapshot.histograms.get(family.name);
                if !(family.when_present && added.is_none()) {
                    encode_histogram_family(&mut encoder, family, added)?;
                }
                continue;
            }
            let added = snapshot.families.get(family.name);
            if family.when_present && added.is_none() {
                continue;
            }
            encode_family(&mut encoder, family, added)?;
        }
        Ok(())
    }
}
