//! [`RunOptions`]: how to run, grouped by concern. The command line (`eventpipe run`) fills
//! them from its flags; the config file's own keys fill the gaps where a group says so.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::delivery::Delivery;
use crate::k8s::{EventsApi, KubeOptions};
use crate::pipeline::plan::TenantRules;
use crate::pipeline::router::PartitionKey;
use crate::pipeline::scale::WorkerIndex;
use crate::plugin::registry::PluginRegistry;
use crate::record::event_broadcaster::EventBroadcasterOptions;
use crate::source::k8s::WatchOptions;
use crate::source::{SourceCounters, SourceSpec};
use crate::watch_cache::WatchCacheSettings;
use crate::watchers::WatcherSpec;

/// How to run: one group per concern.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Where events come from.
    pub source: SourceOptions,
    /// How to reach the Kubernetes API (a `k8s` source or sink) and which Events API to use.
    pub kubernetes: KubernetesOptions,
    /// How events are delivered: the Broadcaster's queue and the delivery guarantee.
    pub delivery: DeliveryOptions,
    /// The tenant router's partitions, the NATS worker tier, correlator snapshots.
    pub scale: ScaleOptions,
    /// What is served over HTTP beside a source: `/metrics`, the probes, the read API.
    pub serving: ServingOptions,
    /// The tenants' rules, the config file, plugins, watcher plugins, shadows.
    pub plugins: PluginOptions,
    /// Bounds on writes in flight and on the shutdown.
    pub limits: LimitOptions,
    /// Fires to stop the run as a signal would (the run also listens for SIGINT and SIGTERM).
    pub shutdown: CancellationToken,
}

/// Where events come from.
#[derive(Debug, Clone)]
pub struct SourceOptions {
    /// The source.
    pub spec: SourceSpec,
    /// A JSON-lines file source keeps reading as the file grows (as `tail -f`) until shutdown.
    pub follow: bool,
    /// The source's live counters (events, bad lines, bytes read), counted into while the run
    /// goes: a caller may read them meanwhile (a progress bar, as `/metrics` does).
    pub counters: Arc<SourceCounters>,
}

/// The Kubernetes API: one client for the source and every `k8s` sink.
#[derive(Debug, Clone)]
pub struct KubernetesOptions {
    /// How to reach the API (kubeconfig, context, server).
    pub connection: KubeOptions,
    /// What a `k8s` source watches (its namespaces come from the source spec).
    pub watch: WatchOptions,
    /// The Events API every `k8s` sink writes to (core/v1, or events.k8s.io series).
    pub events_api: EventsApi,
    /// Enrichment, from the flags (over the config's `[enrich]`).
    pub enrich: crate::k8s::enrich::EnrichSettings,
}

/// How events are delivered.
#[derive(Debug, Clone)]
pub struct DeliveryOptions {
    /// The guarantee (sets the Broadcaster's full-channel behaviour; at-least-once also saves
    /// and resumes the source position).
    pub mode: Delivery,
    /// At-least-once: how often a position is marked, with the correlator state of the events
    /// before it, to save once they are acknowledged (also every
    /// [`crate::delivery::CHECKPOINT_EVERY_EVENTS`] events). Default
    /// [`crate::delivery::DEFAULT_CHECKPOINT_INTERVAL`].
    pub checkpoint_interval: Duration,
    /// Queue length, retry policy, correlation clock (its full-channel behaviour comes from
    /// [`mode`](Self::mode); its `correlator` field is not used: tenants' rules are).
    pub broadcaster: EventBroadcasterOptions,
    /// `--leader-elect`: the saved position passed from leader to leader through the Lease
    /// (`None`: not elected).
    pub handover: Option<Handover>,
}

/// At-least-once under `--leader-elect`: the saved position passes from one leader to the next
/// through their Lease ([`crate::topology::leader`]).
#[derive(Debug, Clone, Default)]
pub struct Handover {
    /// Told every position this run saves; the elector records it in the Lease.
    pub saved: Arc<crate::delivery::SavedPosition>,
    /// The position the previous leader recorded, read as this run acquired the Lease: the
    /// source resumes from it, with a fresh correlator, unless the state file's position is
    /// as new (this replica led last).
    pub inherited: Option<crate::delivery::HandedOver>,
    /// `Some`: this run is a hot standby — it reads and correlates as the leader does, but its
    /// sinks write nothing ([`crate::sink::set::SinkSet::standing_by`]) and it saves no
    /// position past the one this holds: the leader's, as last read from the Lease.
    pub standby: Option<Arc<crate::delivery::SavedPosition>>,
}

/// Partitions and the NATS scale-out ([`crate::pipeline::scale`]).
#[derive(Debug, Clone)]
pub struct ScaleOptions {
    /// Partitions of the tenant router, each on its own task (≥ 1).
    pub workers: usize,
    /// What an event's partition is computed from.
    pub partition_key: PartitionKey,
    /// With a `nats:` source: which partitions this worker takes (`None`: `0/1`, all).
    pub worker: Option<WorkerIndex>,
    /// How often a worker's correlator state is snapshotted into the object store; also at the
    /// end. (A single host's snapshots go with its positions:
    /// [`DeliveryOptions::checkpoint_interval`].)
    pub snapshot_interval: Duration,
}

/// HTTP serving beside the source.
#[derive(Debug, Clone)]
pub struct ServingOptions {
    /// Serve Prometheus `GET /metrics` and the probes on this address (an HTTP source serves
    /// them too); with [`serve`](Self::serve) unset, no read API.
    pub metrics: Option<std::net::SocketAddr>,
    /// Serve the Kubernetes read API of the watch cache ([`crate::watch_cache::api`]) beside
    /// `/metrics` and the probes on this address (an HTTP source serves it too; the same
    /// address as the HTTP source: only that server). Turns the watch cache on. A non-loopback
    /// address needs the ingest bearer token.
    pub serve: Option<std::net::SocketAddr>,
    /// Bounds and timings of the watch cache (used when it is on: `serve`, or a watcher of the
    /// results) as given on the command line; the config's `[watch_cache]` fills the gaps, the
    /// defaults the rest.
    pub watch_cache: WatchCacheSettings,
    /// Timeouts and connection cap of every HTTP server of the run (ingest, `--serve`,
    /// `--metrics`).
    pub http_limits: crate::http_server::ServerLimits,
    /// With `--leader-elect`: the leadership shown on `/metrics`
    /// (`eventpipe_leader`, `eventpipe_leader_transitions_total`).
    pub leader: Option<Arc<crate::topology::leader::LeaderStatus>>,
}

/// The tenants' rules and the plugins.
#[derive(Debug, Clone)]
pub struct PluginOptions {
    /// The rules the command line gives (the base of `[defaults]` and of every tenant).
    pub base: TenantRules,
    /// The tenant config file, if any.
    pub config: Option<PathBuf>,
    /// Plugins by name (embedded defaults + plugins directory).
    pub registry: Arc<PluginRegistry>,
    /// Watch the plugins directory and the config file and hot-reload them.
    pub watch: bool,
    /// Watcher plugins to attach to the Broadcaster (the config's `[[watchers]]` come after).
    pub watchers: Vec<WatcherSpec>,
    /// Shadow plugins of the command line: plugin name → candidate component (the config's
    /// `[shadow]` add more).
    pub shadows: Vec<(String, PathBuf)>,
    /// Where the first divergences of shadow plugins go (the config's `shadow_diffs` otherwise).
    pub shadow_diffs: Option<PathBuf>,
    /// How many divergences that file gets at most (the config's, else
    /// [`crate::plugin::shadow::DEFAULT_SHADOW_DIFFS_MAX`]).
    pub shadow_diffs_max: Option<u64>,
}

/// Bounds.
#[derive(Debug, Clone)]
pub struct LimitOptions {
    /// Writes in flight per sink (≥ 1).
    pub max_in_flight: usize,
    /// After SIGINT / SIGTERM (or [`RunOptions::shutdown`] firing), how long draining the
    /// Broadcaster and the sinks may take before pending sink retries are abandoned.
    pub shutdown_timeout: Duration,
}

/// The one precedence of a setting given in several places: the command line's value, else
/// the config file's, else the built-in default.
pub fn precedence<T>(command_line: Option<T>, config: Option<T>, default: T) -> T {
    command_line.or(config).unwrap_or(default)
}
