//! `eventpipe run`: source → Broadcaster → tenant router watcher (filters → EventCorrelator per
//! tenant and sink → EventSink), with plugins and the tenant config hot-reloaded.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::broadcaster::FullChannelBehavior;
use crate::config::{Config, ConfigError};
use crate::delivery::{Acknowledgements, Committer, Delivery, Progress, SavedState};
use crate::k8s::KubeOptions;
use crate::metrics::Metrics;
use crate::pipeline::plan::{PlanError, TenantPlan, TenantRules};
use crate::pipeline::router::{PartitionKey, RouterOptions, RouterStats};
use crate::plugin::registry::{PluginRegistry, ReloadOutcome};
use crate::record::event_broadcaster::{EventBroadcaster, EventBroadcasterOptions};
use crate::reload::{Change, FileWatcher, WatchError};
use crate::sink::SinkSpec;
use crate::sink::set::SinkSet;
use crate::source::http::IngestCounters;
use crate::source::k8s::WatchOptions;
use crate::source::{SourceContext, SourceCounters, SourceError, SourceSpec, SourceStats};
use crate::tenant::DEFAULT_TENANT;
use crate::watchers::{PluginWatcher, WatcherSpec, WatcherStats};
use tokio_util::sync::CancellationToken;

/// What a run did: the source's side and the tenant router watcher's [`RouterStats`].
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct RunSummary {
    /// The source side: events read, bad lines, non-events.
    #[serde(flatten)]
    pub source: SourceStats,
    /// Events the Broadcaster's incoming queue dropped (only with `DropIfChannelFull`).
    pub dropped_incoming: u64,
    /// Plugin versions swapped in (or reverted) by hot reload during the run.
    pub plugin_swaps: u64,
    /// Plugin files and config versions refused during the run.
    pub rejected_reloads: u64,
    /// A plugin failed under the `fail` policy (the command exits with status 3).
    pub plugin_failed: bool,
    /// Events read but not finished when the run ended (the shutdown timeout passed first):
    /// never acknowledged, so at-least-once delivers them again.
    pub abandoned: u64,
    /// The sink side, in total and per tenant.
    #[serde(flatten)]
    pub sink: RouterStats,
    /// Per watcher plugin: events seen, failed and dropped.
    pub watchers: std::collections::BTreeMap<String, WatcherStats>,
    /// Per shadowed plugin: events compared, and on how many the candidate answered otherwise.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub shadows: std::collections::BTreeMap<String, crate::plugin::shadow::ShadowStats>,
    /// A NATS publisher's or worker's counts, or a single host's correlator snapshots
    /// ([`crate::pipeline::scale`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale: Option<crate::pipeline::scale::ScaleStats>,
}

impl RunSummary {
    /// Whether events were abandoned: not delivered because retries ran out (`gave_up`), a
    /// shutdown cancelled them (`cancelled`), or the shutdown timeout passed first (`abandoned`).
    /// Drops by a documented policy (the spam filter, filters, client-go's handling of a
    /// `StatusError`, an at-most-once queue or window) are not abandonment.
    pub fn abandoned_any(&self) -> bool {
        self.abandoned > 0 || self.sink.total.gave_up > 0 || self.sink.total.cancelled > 0
    }
}

impl std::fmt::Display for RunSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.sink.total;
        write!(
            f,
            "read {} events ({} bad lines, {} non-events); filtered {}; created {}, patched {}, skipped by spam \
             filter {}, aggregated {}; dropped by rules {}; sink dropped {}, gave up {}, retries {}, shed {}; incoming queue dropped {}; \
             {} tenant(s) with events, {} plugin swap(s), {} config reload(s), {} rejected reload(s); abandoned {}",
            self.source.read,
            self.source.bad_lines,
            self.source.non_events,
            s.filtered,
            s.created,
            s.patched,
            s.skipped,
            s.aggregated,
            s.dropped_by_rules,
            s.dropped,
            s.gave_up,
            s.retries,
            s.shed,
            self.dropped_incoming,
            self.sink.tenants.len(),
            self.plugin_swaps,
            self.sink.reloads,
            self.rejected_reloads,
            self.abandoned
        )
    }
}

/// Why a run failed to start or finish (bad lines and sink errors never fail a run).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The source could not be opened or read.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// The metrics address could not be bound.
    #[error("metrics {addr}: {error}")]
    Metrics {
        /// The address.
        addr: std::net::SocketAddr,
        /// The I/O error.
        #[source]
        error: std::io::Error,
    },
    /// The config file is invalid (at start; later, a bad config is only reported).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The tenants' rules cannot be put together (a missing plugin, a sink that cannot open).
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// At-least-once delivery cannot work (no resumable source, a bad state file).
    #[error("delivery: {0}")]
    Delivery(String),
    /// A watch cache setting is out of range (a budget or bookmark interval that is not a
    /// positive number of seconds).
    #[error("{0}")]
    WatchCache(String),
    /// The Kubernetes API cannot be reached.
    #[error(transparent)]
    Kubernetes(#[from] crate::k8s::ConnectError),
    /// The plugins directory or config file cannot be watched.
    #[error(transparent)]
    Watch(#[from] WatchError),
    /// A sink could not be flushed.
    #[error("sink {spec}: {error}")]
    Sink {
        /// The sink.
        spec: String,
        /// The I/O error.
        #[source]
        error: std::io::Error,
    },
    /// A shadow plugin could not be set (a missing plugin, a candidate that does not load or is
    /// of another kind, a diffs file that cannot be created).
    #[error("shadow plugin {plugin}: {message}")]
    Shadow {
        /// The plugin name (or the diffs file).
        plugin: String,
        /// What is wrong.
        message: String,
    },
    /// A watcher plugin could not be attached.
    #[error("watcher plugin {plugin}: {message}")]
    WatcherPlugin {
        /// The plugin name or file, as given.
        plugin: String,
        /// What is wrong.
        message: String,
    },
    /// The sink watcher's task panicked or was cancelled.
    #[error("sink watcher failed: {0}")]
    Watcher(#[from] tokio::task::JoinError),
    /// NATS JetStream cannot be reached or set up ([`crate::pipeline::scale`]).
    #[error(transparent)]
    Nats(#[from] crate::nats::NatsError),
    /// The scale-out is given inconsistently (a `nats:` sink beside others, `--worker` without
    /// a `nats:` source, …).
    #[error("scale-out: {0}")]
    Scale(String),
}

/// How to run.
#[derive(Debug)]
pub struct RunOptions {
    /// Where events come from.
    pub source: SourceSpec,
    /// Queue length, full-channel behaviour, retry policy, correlation clock (its `correlator`
    /// field is not used: tenants' rules are).
    pub broadcaster: EventBroadcasterOptions,
    /// The rules the command line gives (the base of `[defaults]` and of every tenant).
    pub base: TenantRules,
    /// The tenant config file, if any.
    pub config: Option<PathBuf>,
    /// Plugins by name (embedded defaults + plugins directory).
    pub registry: Arc<PluginRegistry>,
    /// Watch the plugins directory and the config file and hot-reload them.
    pub watch: bool,
    /// How to reach the Kubernetes API (for a `k8s` source or sink).
    pub kube: KubeOptions,
    /// What a `k8s` source watches (its namespaces come from the source spec).
    pub kube_watch: WatchOptions,
    /// After SIGINT / SIGTERM (or `shutdown` firing), how long draining the Broadcaster and the
    /// sinks may take before pending sink retries are abandoned.
    pub shutdown_timeout: std::time::Duration,
    /// Fires to stop the run as a signal would (the run also listens for SIGINT and SIGTERM).
    pub shutdown: CancellationToken,
    /// How events are delivered (sets the Broadcaster's full-channel behaviour; at-least-once
    /// also saves and resumes the source position).
    pub delivery: Delivery,
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
    pub watch_cache: crate::watch_cache::WatchCacheSettings,
    /// A JSON-lines file source keeps reading as the file grows (as `tail -f`) until shutdown.
    pub follow: bool,
    /// Partitions of the tenant router, each on its own task (≥ 1).
    pub workers: usize,
    /// What an event's partition is computed from.
    pub partition_key: PartitionKey,
    /// Writes in flight per sink (≥ 1).
    pub max_in_flight: usize,
    /// Watcher plugins to attach to the Broadcaster (the config's `[[watchers]]` come after).
    pub watchers: Vec<WatcherSpec>,
    /// The Events API every `k8s` sink writes to (core/v1, or events.k8s.io series).
    pub events_api: crate::k8s::EventsApi,
    /// The source's live counters (events, bad lines, bytes read), counted into while the run
    /// goes: a caller may read them meanwhile (a progress bar, as `/metrics` does).
    pub source_counters: Arc<SourceCounters>,
    /// Shadow plugins of the command line: plugin name → candidate component (the config's
    /// `[shadow]` add more).
    pub shadows: Vec<(String, PathBuf)>,
    /// Where the first divergences of shadow plugins go (the config's `shadow_diffs` otherwise).
    pub shadow_diffs: Option<PathBuf>,
    /// How many divergences that file gets at most (the config's, else
    /// [`crate::plugin::shadow::DEFAULT_SHADOW_DIFFS_MAX`]).
    pub shadow_diffs_max: Option<u64>,
    /// With a `nats:` source: which partitions this worker takes (`None`: `0/1`, all).
    pub worker: Option<crate::pipeline::scale::WorkerIndex>,
    /// How often correlator state is snapshotted: a worker's partitions into the KV bucket, a
    /// single host's (at-least-once) into the state file; also at the end.
    pub snapshot_interval: std::time::Duration,
    /// Timeouts and connection cap of every HTTP server of the run (ingest, `--serve`,
    /// `--metrics`).
    pub http_limits: crate::http_server::ServerLimits,
}

/// Prints a line about what is live (stderr, always) and logs it.
fn announce(line: &str) {
    eprintln!("eventpipe: {line}");
    tracing::info!("{line}");
}

fn announce_plan(plan: &TenantPlan) {
    for line in plan.describe() {
        announce(&line);
    }
}

/// Runs the pipeline until the source ends, then shuts the Broadcaster down (draining it) and
/// waits for the sink watcher to finish. With `watch`, plugin files and the config are
/// hot-reloaded meanwhile (compiled and validated on a thread of their own).
///
/// # Errors
/// [`RunError`] when the config, a plugin rule or a sink is invalid at start, or the source or
/// a sink cannot be read or flushed.
pub async fn run(options: RunOptions) -> Result<RunSummary, RunError> {
    let RunOptions {
        source,
        broadcaster,
        base,
        config: config_path,
        registry,
        watch,
        kube,
        kube_watch,
        shutdown_timeout,
        shutdown,
        delivery,
        metrics: metrics_addr,
        serve: serve_addr,
        watch_cache: watch_cache_settings,
        follow,
        workers,
        partition_key,
        max_in_flight,
        watchers: watcher_specs,
        events_api,
        source_counters,
        shadows,
        shadow_diffs,
        shadow_diffs_max,
        worker,
        snapshot_interval,
        http_limits,
    } = options;
    // Scale-out: a `nats:` sink is the publish tier (alone), a `nats:` source the worker tier.
    let publish_to = base.sinks.iter().find_map(|s| match &s.spec {
        SinkSpec::Nats(target) => Some((**target).clone()),
        _ => None,
    });
    if publish_to.is_some() && base.sinks.len() > 1 {
        return Err(RunError::Scale("a nats: sink publishes every event; give it as the only --sink".into()));
    }
    let works_on = match &source {
        SourceSpec::Nats(target) => Some((**target).clone()),
        _ => None,
    };
    if worker.is_some() && works_on.is_none() {
        return Err(RunError::Scale("--worker needs a nats: source".into()));
    }
    if works_on.is_some() && matches!(delivery, Delivery::AtLeastOnce { .. }) {
        return Err(RunError::Scale(
            "a nats: source acknowledges JetStream after every sink acknowledged and the state was \
             snapshotted; --delivery at-least-once does not apply"
                .into(),
        ));
    }
    let scale_counters = Arc::new(crate::pipeline::scale::ScaleCounters::default());
    // A worker connects first: the process adopts the stream's key seed before any key is hashed.
    let connected = match &works_on {
        Some(target) => Some(crate::pipeline::scale::Connected::connect(target).await?),
        None => None,
    };
    let mut broadcaster = broadcaster;
    broadcaster.full_channel_behavior = match delivery {
        Delivery::AtMostOnce => FullChannelBehavior::DropIfChannelFull,
        Delivery::Wait | Delivery::AtLeastOnce { .. } => FullChannelBehavior::WaitIfChannelFull,
    };
    // At-least-once: where the last run stopped, and the progress this one makes.
    let source_name = source.to_string();
    let (progress, saved) = match &delivery {
        Delivery::AtLeastOnce { state_file } => {
            if source == SourceSpec::JsonLinesStdin {
                return Err(RunError::Delivery(
                    "at-least-once needs a file or k8s source (stdin cannot resume)".into(),
                ));
            }
            let saved = SavedState::load(state_file).map_err(|e| RunError::Delivery(e.to_string()))?;
            let saved = saved.filter(|s| s.source == source_name);
            if let Some(s) = &saved {
                announce(&format!(
                    "resuming {source_name} from {:?}, {} event version(s) known ({})",
                    s.position,
                    s.seen.len(),
                    state_file.display()
                ));
            }
            (Some(Arc::new(Progress::default())), saved)
        }
        _ => (None, None),
    };
    // A publisher derives message ids from the source's positions, at-least-once or not.
    let progress = progress.or_else(|| publish_to.as_ref().map(|_| Arc::new(Progress::default())));
    // A single host's correlator snapshot: restored, the source resuming from its position.
    let mut restore = Vec::new();
    let (resume, seen) = match saved {
        Some(s) => {
            let mut position = s.position;
            if let Some(correlator) = s.correlator {
                match decode_saved(&correlator, workers.max(1)) {
                    Ok(partitions) => {
                        announce(&format!(
                            "correlator state of {} partition(s) restored; resuming from its position {:?}",
                            partitions.len(),
                            correlator.position
                        ));
                        position = correlator.position;
                        restore = partitions;
                        scale_counters.restored();
                    }
                    Err(why) => {
                        scale_counters.refused();
                        announce(&format!("correlator snapshot in the state file refused, starting fresh: {why}"));
                    }
                }
            }
            (Some(position), s.seen)
        }
        None => (None, crate::delivery::SeenVersions::default()),
    };
    let mut kube_watch = kube_watch;
    if !seen.is_empty() {
        kube_watch.resume_seen = Some(seen.clone());
    }
    tokio::spawn(stop_on_signal(shutdown.clone()));
    // What the registry swapped before the run (the plugins directory replacing embedded
    // defaults) is not counted as the run's.
    let swaps_before = registry.swaps();
    let config = config_path.as_deref().map(Config::load).transpose()?;
    // One Kubernetes client for the source and every `k8s` sink, made when anything names one.
    let names_k8s =
        |rules: &crate::config::Rules| rules.sinks.iter().flatten().any(|s| s == "k8s" || s.starts_with("k8s:"));
    let needs_kube = matches!(source, SourceSpec::Kubernetes(_))
        || base.sinks.iter().any(|s| matches!(s.spec, SinkSpec::Kubernetes(_)))
        || config.as_ref().is_some_and(|c| names_k8s(&c.defaults) || c.tenants.iter().any(|t| names_k8s(&t.rules)));
    let client = if needs_kube { Some(crate::k8s::connect(&kube).await?) } else { None };
    set_shadows(&registry, shadows, shadow_diffs, shadow_diffs_max, config.as_ref())?;
    // The watch cache: on with `--serve` or a watcher of the results; every tenant writes to it.
    let results_watchers = watcher_specs
        .iter()
        .chain(config.iter().flat_map(|c| &c.watchers))
        .any(|w| w.on == crate::watchers::WatchOn::Results);
    let watch_cache_config = watch_cache_settings
        .or(config.as_ref().map(|c| c.watch_cache).unwrap_or_default())
        .resolve()
        .map_err(RunError::WatchCache)?;
    let watch_cache = (serve_addr.is_some() || results_watchers)
        .then(|| crate::watch_cache::WatchCache::new(watch_cache_config, crate::clock::system()));
    let mut sinks = SinkSet::new(client.clone(), progress.is_some()).with_events_api(events_api);
    if let Some(cache) = &watch_cache {
        let c = cache.config();
        announce(&format!(
            "watch cache on: every tenant's writes also go to it; window {} changes / {} s, at most {} events, \
             event TTL {} s",
            c.window_size,
            c.window_age.as_secs(),
            c.max_objects,
            c.event_ttl.as_secs()
        ));
        sinks = sinks.with_watch_cache(cache.clone());
    }
    let sinks = Arc::new(sinks);
    let plan = if publish_to.is_some() {
        // The publisher routes tenants only: their sinks are the workers'.
        TenantPlan::build_unopened(&TenantRules { sinks: Vec::new(), ..base.clone() }, config.as_ref(), &registry)?
    } else {
        TenantPlan::build(&base, config.as_ref(), &registry, &sinks)?
    };
    let (plans_tx, plans_rx) = tokio::sync::watch::channel(Arc::new(plan));
    let latest_plan = plans_tx.subscribe();
    let rejected_configs = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let watcher = if watch {
        let (tx, rx) = std::sync::mpsc::channel();
        let candidates: Vec<PathBuf> = registry.shadows().iter().map(|(_, s)| s.file().to_path_buf()).collect();
        let watcher = FileWatcher::start(registry.dir(), config_path.as_deref(), &candidates, move |c| {
            let _ = tx.send(c);
        })?;
        let reloader = Reloader {
            registry: registry.clone(),
            base: base.clone(),
            sinks: sinks.clone(),
            plans: plans_tx,
            rejected_configs: rejected_configs.clone(),
        };
        // Sinks opened by a reloaded config (a webhook's worker, an events.k8s.io series timer)
        // spawn their tasks on the run's runtime.
        let runtime = tokio::runtime::Handle::current();
        std::thread::Builder::new()
            .name("eventpipe-reload".into())
            .spawn(move || {
                let _runtime = runtime.enter();
                rx.into_iter().for_each(|change| reloader.apply(change))
            })
            .expect("spawning the reload thread");
        Some(watcher)
    } else {
        None
    };
    // Announced once the watch is running: a change made after these lines is seen.
    for (name, live) in registry.live() {
        match live {
            Some(p) => announce(&format!("{p} is live")),
            None => announce(&format!("plugin `{name}` is not loaded")),
        }
    }
    announce_plan(&latest_plan.borrow());

    let event_broadcaster = EventBroadcaster::new(broadcaster);
    let live = Arc::new(std::sync::Mutex::new(RouterStats::default()));
    let live_stats = live.clone();
    let committer = match (&delivery, &progress) {
        (Delivery::AtLeastOnce { state_file }, Some(progress)) => {
            Some(Arc::new(Committer::new(state_file.clone(), source_name.clone(), progress.clone(), seen)))
        }
        _ => None,
    };
    // A single host (at-least-once) snapshots its correlator state into the state file.
    let snapshots = match (&committer, &publish_to) {
        (Some(committer), None) => {
            let (committer, counters) = (committer.clone(), scale_counters.clone());
            let partitions = workers.max(1) as u32;
            Some(crate::pipeline::router::RouterSnapshots {
                interval: snapshot_interval,
                restore,
                taken: Arc::new(move |finished, states| {
                    let started = std::time::Instant::now();
                    let encoded: Vec<String> = states
                        .into_iter()
                        .enumerate()
                        .map(|(i, tenants)| {
                            use base64::Engine;
                            let snapshot = crate::correlator::snapshot::PartitionSnapshot {
                                key_seed: crate::correlator::keys::key_seed(),
                                partition: i as u32,
                                partitions,
                                sequence: finished,
                                taken_at_ms: chrono::Utc::now().timestamp_millis(),
                                tenants,
                            };
                            base64::engine::general_purpose::STANDARD.encode(snapshot.encode())
                        })
                        .collect();
                    counters.stored(encoded.iter().map(String::len).sum(), started.elapsed());
                    committer.snapshot_taken(finished, encoded);
                }),
                refused: Arc::new(std::sync::atomic::AtomicU64::new(0)),
            })
        }
        _ => None,
    };
    let refused_at_restore = snapshots.as_ref().map(|s| s.refused.clone());
    let router_options = RouterOptions {
        // A worker's partitions are its own (the Broadcaster's router stays idle).
        workers: if works_on.is_some() { 1 } else { workers.max(1) },
        partition_key,
        max_in_flight: max_in_flight.max(1),
        acks: Arc::new(Acknowledgements::new(progress.clone())),
        delivery: delivery.mode(),
        stats: live.clone(),
        snapshots,
        ..event_broadcaster.router_options()
    };
    let worker_router_options = router_options.clone();
    let router = match &publish_to {
        Some(target) => {
            let client = target.connect().await?;
            let js = async_nats::jetstream::new(client);
            let (_, partitions) = target.stream(&js, true).await?;
            announce(&format!(
                "publishing to {target}, {partitions} partitions, subjects {}.<tenant>.<partition>",
                target.prefix
            ));
            let watcher = event_broadcaster.broadcaster().watch().expect("a new broadcaster is running");
            let options = crate::pipeline::scale::PublishOptions {
                target: target.clone(),
                js,
                partitions,
                partition_key,
                window: max_in_flight.max(1),
                progress: progress.clone(),
                trim_progress: committer.is_none(),
                router: router_options,
                counters: scale_counters.clone(),
                source: source_name.clone(),
            };
            tokio::spawn(crate::pipeline::scale::publish(watcher, plans_rx, options))
        }
        None => event_broadcaster
            .start_recording_to_tenants(plans_rx, router_options)
            .expect("a new broadcaster is running"),
    };
    let watchers = attach_watchers(
        &event_broadcaster,
        watch_cache.as_ref(),
        &registry,
        watcher_specs.iter().chain(config.iter().flat_map(|c| &c.watchers)),
        &base,
    )?;
    let watcher_probes: Vec<_> = watchers.iter().map(|w| (w.handle.clone(), w.counters.clone())).collect();
    // Prometheus: every scrape reads the live counters (router, plugins of the current plan,
    // registry, Broadcaster, webhook sinks, the watch cache).
    let metrics = Arc::new(Metrics::new());
    // `/readyz`: ready once the source is started, not ready again from the shutdown on.
    let readiness = crate::health::Readiness::new();
    let served = || {
        let router = crate::metrics::router(metrics.clone()).merge(crate::health::router(readiness.clone()));
        match (&watch_cache, serve_addr) {
            (Some(cache), Some(_)) => router.merge(crate::watch_cache::api::router(cache.clone())),
            _ => router,
        }
    };
    let ingest_counters = Arc::new(IngestCounters::default());
    {
        let scale = scale_counters.clone();
        let http = matches!(source, SourceSpec::Http(_));
        let (source_counters, ingest_counters) = (source_counters.clone(), ingest_counters.clone());
        let (registry, plans, broadcaster, source, sinks, cache) = (
            registry.clone(),
            latest_plan.clone(),
            event_broadcaster.broadcaster().clone(),
            source.to_string(),
            sinks.clone(),
            watch_cache.clone(),
        );
        metrics.add_source(move |s| {
            if let Some(cache) = &cache {
                s.add_watch_cache(cache.stats());
            }
            for webhook in sinks.webhooks() {
                s.add_webhook(&webhook);
            }
            for handle in sinks.plugin_handles() {
                s.add_plugin(&handle);
            }
            let stats = live.lock().unwrap_or_else(|p| p.into_inner()).clone();
            s.add_events_in(&source, stats.total.received);
            s.add_source(&source, &source_counters.stats());
            if http {
                s.add_ingest(&source, &ingest_counters.stats());
            }
            s.add_router(&stats);
            s.add_scale(&scale.stats());
            s.add_registry(&registry);
            s.add_broadcaster(&broadcaster);
            for handle in plans.borrow().handles() {
                s.add_plugin(handle);
            }
            for (handle, counters) in &watcher_probes {
                s.add_plugin(handle);
                s.add_watcher_dropped(handle.name(), "queue_full", counters.snapshot().dropped);
            }
        });
    }
    // `--metrics` is served until the run returns (not only until the signal), so `/readyz`
    // answers `503` and `/metrics` the final counters while the pipeline drains.
    let metrics_stop = CancellationToken::new();
    let _stop_metrics_on_return = metrics_stop.clone().drop_guard();
    // Watches end when the shutdown begins (or the run returns): a server's graceful shutdown
    // waits for its requests, and a watch would never end by itself. An idle cache still
    // expires its events.
    if let Some(cache) = watch_cache.clone() {
        let (stop, shutdown) = (metrics_stop.clone(), shutdown.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = tick.tick() => cache.expire(),
                    () = stop.cancelled() => break cache.close(),
                    () = shutdown.cancelled() => break cache.close_streams(),
                }
            }
        });
    }
    // `--serve` on the HTTP source's own address (a fixed port): that server serves it all.
    let http_listen = match &source {
        SourceSpec::Http(listen) => Some(*listen),
        _ => None,
    };
    let serve_addr = serve_addr.filter(|addr| addr.port() == 0 || Some(*addr) != http_listen);
    for (addr, read_api) in metrics_addr.map(|a| (a, false)).into_iter().chain(serve_addr.map(|a| (a, true))) {
        let fail = |error: std::io::Error| RunError::Metrics { addr, error };
        // With the ingest token set, the server asks for it too; the read API beyond loopback
        // needs it, as HTTP ingest does.
        let token =
            crate::source::http::BearerToken::from_env().map_err(|e| fail(std::io::Error::other(e.to_string())))?;
        if read_api {
            crate::source::http::check_bind(addr, token.as_ref())
                .map_err(|e| fail(std::io::Error::other(e.to_string())))?;
        }
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(fail)?;
        let local = listener.local_addr().map_err(fail)?;
        if read_api {
            announce(&format!("serving the events API on http://{local}/api/v1/events (and /metrics)"));
        } else {
            announce(&format!("metrics on http://{local}/metrics"));
        }
        let app = if read_api {
            served()
        } else {
            crate::metrics::router(metrics.clone()).merge(crate::health::router(readiness.clone()))
        };
        let app = match token {
            Some(token) => crate::source::http::with_bearer(app, token),
            None => app,
        };
        let app = if read_api {
            app.fallback(crate::source::http::not_found)
                .method_not_allowed_fallback(crate::source::http::method_not_allowed)
        } else {
            app
        };
        let stop = metrics_stop.clone();
        tokio::spawn(async move {
            let _ = crate::http_server::serve(listener, app, http_limits, stop.cancelled_owned()).await;
        });
    }
    // Every COMMIT_INTERVAL: at-least-once saves the acknowledged position (flushing the sinks
    // first); otherwise the sinks are flushed, so their output shows while the run goes on.
    let periodic = {
        let (c, s, stop) = (committer.clone(), sinks.clone(), shutdown.child_token());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(COMMIT_INTERVAL) => {}
                }
                match &c {
                    Some(c) => commit(c, &s, false),
                    None => {
                        if let Err((spec, error)) = s.flush() {
                            tracing::error!(sink = spec, %error, "could not flush the sink");
                        }
                    }
                }
            }
        })
    };
    // What is left to finish once the source ends, whichever tier this run is.
    let finish = Finish {
        event_broadcaster,
        router,
        watchers,
        shutdown: shutdown.clone(),
        shutdown_timeout,
        live_stats,
        sinks,
        watcher,
        periodic,
        committer,
        registry,
        swaps_before,
        latest_plan: latest_plan.clone(),
        rejected_configs,
        scale: None,
        watch_cache: watch_cache.clone(),
    };
    if let (Some(connected), Some(target)) = (connected, &works_on) {
        // The worker tier: its partitions' consumers feed router partitions of their own.
        let worker = worker.unwrap_or(crate::pipeline::scale::WorkerIndex { index: 0, count: 1 });
        announce(&format!(
            "worker {}/{} of {target}: {} of {} partitions{}",
            worker.index,
            worker.count,
            worker.partitions(connected.partitions()).len(),
            connected.partitions(),
            if connected.pinned() { ", pinned clients (priority groups)" } else { "" }
        ));
        let options = crate::pipeline::scale::WorkerOptions {
            target: target.clone(),
            worker,
            snapshot_interval,
            router: worker_router_options,
            counters: source_counters.clone(),
            scale: scale_counters.clone(),
        };
        readiness.set(true);
        let stats = crate::pipeline::scale::run_worker(connected, latest_plan.clone(), options, shutdown.clone()).await;
        readiness.set(false);
        return finish_run(
            Ok(RunSummary { source: stats, ..RunSummary::default() }),
            Finish { scale: Some(scale_counters), ..finish },
        )
        .await;
    }
    let built = source.build(SourceContext {
        kube: client.clone(),
        watch: kube_watch,
        resume,
        progress: progress.clone(),
        follow,
        extra_routes: served(),
        counters: source_counters,
        ingest_counters,
        http_limits,
    });
    let summary = match built {
        Ok(source) => {
            readiness.set(true);
            let not_ready_at_shutdown = {
                let (readiness, shutdown) = (readiness.clone(), shutdown.clone());
                tokio::spawn(async move {
                    shutdown.cancelled().await;
                    readiness.set(false)
                })
            };
            // The source is a task of its own on the runtime's workers, not a future of the
            // thread blocking on `run`: its many short waits (for a chunk being decoded, for room
            // in the Broadcaster) then resume on a busy worker instead of waking a third thread.
            // On 2 cores that halved `run`'s context switches (0.956× the wall time, 21 pairs).
            let source = tokio::spawn(source.run(finish.event_broadcaster.broadcaster().clone(), shutdown.clone()));
            let ran = source.await.unwrap_or_else(|failed| std::panic::resume_unwind(failed.into_panic()));
            readiness.set(false);
            not_ready_at_shutdown.abort();
            ran.map(|source| RunSummary { source, ..RunSummary::default() }).map_err(RunError::from)
        }
        Err(error) => Err(RunError::from(error)),
    };
    let scale = (publish_to.is_some() || refused_at_restore.is_some()).then_some(scale_counters);
    if let (Some(scale), Some(refused)) = (&scale, &refused_at_restore) {
        for _ in 0..refused.load(std::sync::atomic::Ordering::Relaxed) {
            scale.refused();
        }
    }
    finish_run(summary, Finish { scale, ..finish }).await
}

/// What a run has left to finish once its source ended.
struct Finish {
    event_broadcaster: EventBroadcaster,
    router: tokio::task::JoinHandle<RouterStats>,
    watchers: Vec<PluginWatcher>,
    shutdown: CancellationToken,
    shutdown_timeout: std::time::Duration,
    live_stats: Arc<std::sync::Mutex<RouterStats>>,
    sinks: Arc<SinkSet>,
    watcher: Option<FileWatcher>,
    periodic: tokio::task::JoinHandle<()>,
    committer: Option<Arc<Committer>>,
    registry: Arc<PluginRegistry>,
    swaps_before: u64,
    latest_plan: tokio::sync::watch::Receiver<Arc<TenantPlan>>,
    rejected_configs: Arc<std::sync::atomic::AtomicU64>,
    scale: Option<Arc<crate::pipeline::scale::ScaleCounters>>,
    /// Closed once every result is in it, so its watchers take what is left and end.
    watch_cache: Option<Arc<crate::watch_cache::WatchCache>>,
}

/// The source has ended (or was stopped): drains the Broadcaster into the watchers and lets
/// the sinks finish, within the shutdown timeout once a shutdown was asked for; saves the
/// last position and fills in the summary.
async fn finish_run(mut summary: Result<RunSummary, RunError>, f: Finish) -> Result<RunSummary, RunError> {
    let Finish {
        event_broadcaster,
        router,
        watchers,
        shutdown,
        shutdown_timeout,
        live_stats,
        sinks,
        watcher,
        periodic,
        committer,
        registry,
        swaps_before,
        latest_plan,
        rejected_configs,
        scale,
        watch_cache,
    } = f;
    let (watcher_tasks, watcher_stats): (Vec<_>, Vec<_>) =
        watchers.into_iter().map(|w| (w.task, (w.handle.name().to_string(), w.counters))).unzip();
    let drain = async {
        event_broadcaster.shutdown().await;
        let stats = router.await;
        // Every result is in the watch cache: its watchers take what is left, then end.
        if let Some(cache) = &watch_cache {
            cache.close();
        }
        // Watcher plugins observe; they get a short grace to finish their queues, then are cut
        // off (a looping plugin must not hold the run).
        let watchers = async {
            for task in watcher_tasks {
                let _ = task.await;
            }
        };
        if tokio::time::timeout(WATCHER_GRACE, watchers).await.is_err() {
            tracing::warn!(grace_ms = WATCHER_GRACE.as_millis() as u64, "watcher plugins cut off at shutdown");
        }
        stats
    };
    // A shutdown asked for before or during the drain bounds it: `shutdown_timeout` after the
    // signal, what is not finished is abandoned (counted, and left unacknowledged).
    let deadline = async {
        shutdown.cancelled().await;
        tokio::time::sleep(shutdown_timeout).await;
    };
    let router_stats = tokio::select! {
        stats = drain => stats?,
        () = deadline => {
            tracing::warn!(
                timeout_ms = shutdown_timeout.as_millis() as u64,
                "shutdown timeout: what is not delivered yet is abandoned"
            );
            live_stats.lock().unwrap_or_else(|p| p.into_inner()).clone()
        }
    };
    // events.k8s.io series get their final patch (bounded as the drain is).
    if tokio::time::timeout(shutdown_timeout, sinks.close()).await.is_err() {
        tracing::warn!("shutdown timeout: open event series were not all written");
    }
    drop(watcher);
    periodic.abort();
    if let Some(committer) = committer {
        commit(&committer, &sinks, true); // what the drain finished
    }
    sinks.flush().map_err(|(spec, error)| RunError::Sink { spec, error })?;
    // Each missing namespace was warned about at its first drop; here is how many it cost.
    for (namespace, dropped) in &router_stats.missing_namespaces {
        tracing::warn!(namespace, dropped, "namespace not found: {dropped} event write(s) dropped for it in this run");
    }
    if let Ok(s) = summary.as_mut() {
        s.abandoned = s.source.read.saturating_sub(router_stats.finished);
        s.sink = router_stats;
        s.dropped_incoming = event_broadcaster.broadcaster().incoming_dropped();
        s.plugin_swaps = registry.swaps() - swaps_before;
        s.plugin_failed = latest_plan.borrow().failed();
        s.rejected_reloads = registry.rejected() + rejected_configs.load(std::sync::atomic::Ordering::Relaxed);
        s.watchers = watcher_stats.iter().map(|(name, c)| (name.clone(), c.snapshot())).collect();
        s.shadows = registry.shadows().into_iter().map(|(name, shadow)| (name, shadow.stats())).collect();
        s.scale = scale.map(|c| c.stats());
    }
    summary
}

/// The single-host correlator snapshot of a state file, per router partition (each checked:
/// format version, key seed — adopted by the process —, and `workers` partitions).
///
/// # Errors
/// Why it cannot be used (the run then starts fresh from the saved position).
fn decode_saved(
    saved: &crate::delivery::SavedCorrelator,
    workers: usize,
) -> Result<Vec<Vec<crate::correlator::snapshot::TenantSnapshot>>, String> {
    use base64::Engine;
    if saved.partitions.len() != workers {
        return Err(format!(
            "it holds {} router partition(s), this run has --workers {workers}",
            saved.partitions.len()
        ));
    }
    saved
        .partitions
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let bytes = base64::engine::general_purpose::STANDARD.decode(text).map_err(|e| e.to_string())?;
            let snapshot = crate::correlator::snapshot::PartitionSnapshot::decode(&bytes).map_err(|e| e.to_string())?;
            snapshot.check(i as u32, workers as u32).map_err(|e| e.to_string())?;
            Ok(snapshot.tenants)
        })
        .collect()
}

/// Sets the shadow plugins of the command line and of the config ([`crate::plugin::shadow`]),
/// all writing their first divergences to one diffs file.
///
/// # Errors
/// [`RunError::Shadow`] for a plugin that is missing, a candidate that does not load or is of
/// another kind, or a diffs file that cannot be created.
fn set_shadows(
    registry: &PluginRegistry,
    shadows: Vec<(String, PathBuf)>,
    diffs: Option<PathBuf>,
    max: Option<u64>,
    config: Option<&Config>,
) -> Result<(), RunError> {
    let all: Vec<(String, PathBuf)> =
        shadows.into_iter().chain(config.iter().flat_map(|c| c.shadows.clone())).collect();
    if all.is_empty() {
        return Ok(());
    }
    let diffs = diffs.or_else(|| config.and_then(|c| c.shadow_diffs.clone()));
    let max = max
        .or_else(|| config.and_then(|c| c.shadow_diffs_max))
        .unwrap_or(crate::plugin::shadow::DEFAULT_SHADOW_DIFFS_MAX);
    let out: Option<Box<dyn std::io::Write + Send>> = match &diffs {
        Some(path) => Some(Box::new(std::io::BufWriter::new(std::fs::File::create(path).map_err(|e| {
            RunError::Shadow { plugin: path.display().to_string(), message: format!("diffs file: {e}") }
        })?))),
        None => None,
    };
    let log = crate::plugin::shadow::ShadowLog::new(out, max);
    for (name, file) in all {
        let shadow = registry
            .set_shadow(&name, &file, log.clone())
            .map_err(|message| RunError::Shadow { plugin: name.clone(), message })?;
        announce(&format!(
            "shadow: {} runs beside plugin `{name}`; divergences {}",
            file.display(),
            match &diffs {
                Some(path) => format!("counted, the first {max} written to {}", path.display()),
                None => "counted".to_string(),
            }
        ));
        drop(shadow);
    }
    Ok(())
}

/// Attaches every watcher plugin of `specs` to the Broadcaster: a name is looked up in the
/// registry (hot-swapped through its slot); a `FILE.wasm` is loaded under its stem. Each is
/// called with the command line's plugin limits and its `[plugins.NAME]` config.
///
/// # Errors
/// [`RunError::Watcher`] for a plugin that is missing, refused or not a watcher.
fn attach_watchers<'a>(
    broadcaster: &EventBroadcaster,
    cache: Option<&Arc<crate::watch_cache::WatchCache>>,
    registry: &PluginRegistry,
    specs: impl Iterator<Item = &'a WatcherSpec>,
    base: &TenantRules,
) -> Result<Vec<PluginWatcher>, RunError> {
    let mut attached = Vec::new();
    for spec in specs {
        let fail = |message: String| RunError::WatcherPlugin { plugin: spec.plugin.clone(), message };
        let name = registry.name_or_load(&spec.plugin).map_err(fail)?;
        let handle = registry
            .handle(&name, crate::plugin::PluginKind::Watcher, DEFAULT_TENANT, base.settings_for(&name))
            .map_err(|e| fail(e.to_string()))?;
        let watcher = match (spec.on, cache) {
            (crate::watchers::WatchOn::Results, Some(cache)) => {
                let watcher = crate::watchers::attach_results(cache, handle, spec).map_err(|e| fail(e.to_string()))?;
                announce(&format!(
                    "watcher plugin `{name}` attached to the results (from resourceVersion {})",
                    watcher.counters.snapshot().resource_version
                ));
                watcher
            }
            _ => {
                let watcher = crate::watchers::attach(broadcaster.broadcaster(), handle, spec)
                    .map_err(|e| fail(e.to_string()))?;
                announce(&format!(
                    "watcher plugin `{name}` attached (queue {}, {:?})",
                    spec.queue_length, spec.full_channel_behavior
                ));
                watcher
            }
        };
        attached.push(watcher);
    }
    Ok(attached)
}

/// Applies file changes on the reload thread: plugins through the registry, the config by
/// building a new plan and handing it to the router watcher.
struct Reloader {
    registry: Arc<PluginRegistry>,
    base: TenantRules,
    sinks: Arc<SinkSet>,
    plans: tokio::sync::watch::Sender<Arc<TenantPlan>>,
    rejected_configs: Arc<std::sync::atomic::AtomicU64>,
}

impl Reloader {
    fn apply(&self, change: Change) {
        match change {
            Change::Plugin(path) => {
                let outcome = self.registry.hot_reload_file(&path, |p| announce(&format!("{p} is live")));
                report_reload("", &path, &outcome);
            }
            Change::Shadow(path) => {
                for outcome in self.registry.reload_shadow_file(&path) {
                    report_reload("shadow candidate: ", &path, &outcome);
                }
            }
            Change::Config(path) => {
                let plan = Config::load(&path).map_err(|e| e.to_string()).and_then(|c| {
                    TenantPlan::build(&self.base, Some(&c), &self.registry, &self.sinks).map_err(|e| e.to_string())
                });
                match plan {
                    Ok(plan) => {
                        announce(&format!("config {} reloaded", path.display()));
                        announce_plan(&plan);
                        let _ = self.plans.send(Arc::new(plan));
                    }
                    Err(error) => {
                        self.rejected_configs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        eprintln!("eventpipe: config rejected, previous config kept: {error}");
                        tracing::info!(%error, "config rejected, previous config kept");
                    }
                }
            }
        }
    }
}

/// Tells what a hot reload of `path` did (`what`: a prefix naming what was reloaded): a new
/// version (or a revert) as an `eventpipe:` line, a refusal once on stderr and in the log at
/// info like those lines (at the default level not printed twice); nothing when nothing changed.
fn report_reload(what: &str, path: &Path, outcome: &ReloadOutcome) {
    match outcome {
        ReloadOutcome::Live(_) | ReloadOutcome::Reverted { .. } => announce(&format!("{what}{outcome}")),
        ReloadOutcome::Rejected { .. } => {
            eprintln!("eventpipe: {what}{outcome}");
            tracing::info!(path = %path.display(), "{what}{outcome}");
        }
        ReloadOutcome::Unchanged { .. } | ReloadOutcome::StillRejected { .. } | ReloadOutcome::Ignored => {}
    }
}

/// How long watcher plugins may take to finish their queues once the pipeline has drained.
const WATCHER_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// How often at-least-once saves the source position, and other runs flush their sinks.
const COMMIT_INTERVAL: std::time::Duration = crate::sink::jsonl::FLUSH_INTERVAL;

/// Flushes the sinks and saves the newest finished position (`now`: even if a large state file
/// was written very recently); errors are logged (the next commit tries again).
fn commit(committer: &Committer, sinks: &SinkSet, now: bool) {
    let flush = || sinks.flush().map_err(|(spec, e)| format!("flushing sink {spec}: {e}"));
    if let Err(error) = committer.commit(flush, now) {
        tracing::error!(%error, "could not save the source position");
    }
}

/// Fires `shutdown` on SIGINT or SIGTERM.
async fn stop_on_signal(shutdown: CancellationToken) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) else {
            return;
        };
        tokio::select! {
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = shutdown.cancelled() => return,
        }
    }
    #[cfg(not(unix))]
    {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = shutdown.cancelled() => return,
        }
    }
    shutdown.cancel();
}
