//! Builds the pieces of a run from its [`RunOptions`], in the order they depend on each other,
//! and starts them; the source (or worker tier) is left for [`RunningTopology::run`].

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::delivery::Delivery;
use crate::pipeline::scale::{Connected, ScaleCounters};
use crate::source::http::IngestCounters;
use crate::watch_cache::resource_version::{HighWaterMark, sidecar_path};

use super::checkpoint::{Checkpointer, Restored};
use super::options::RunOptions;
use super::reloader::{Plans, set_shadows};
use super::servers::Servers;
use super::sinks::{Sinks, kubernetes_client};
use super::source::{Feed, SourceFeed};
use super::tier::{Tier, TierOptions};
use super::watchers::Watchers;
use super::{Role, RunError, RunningTopology};

/// Builds and starts every piece of a run but its feed: the role, the restored checkpoint,
/// the Kubernetes client, the sinks and watch cache, the tenant plan and its reloader, the
/// Broadcaster and its router, the watcher plugins, the metrics and servers, the periodic
/// checkpoint. Also fires `options.shutdown` on SIGINT or SIGTERM from now on.
///
/// # Errors
/// [`RunError`] when the options are inconsistent, or the config, a plugin rule, a sink, the
/// state file, the Kubernetes API, NATS or an address is not usable at start.
pub async fn build(options: RunOptions) -> Result<RunningTopology, RunError> {
    let RunOptions { source, kubernetes, delivery, scale, serving, plugins, limits, shutdown } = options;
    let role = Role::choose(&source.spec, &plugins.base.sinks, scale.worker, &delivery.mode)?;
    let scale_counters = Arc::new(ScaleCounters::default());
    // A worker connects first: the process adopts the stream's key seed before any key is hashed.
    let connected = match &role {
        Role::Worker { target, .. } => Some(Connected::connect(target).await?),
        _ => None,
    };
    // At-least-once: where the last run stopped, and the progress this one makes.
    let inherited = delivery.handover.as_ref().and_then(|h| h.inherited.as_ref());
    let restored = Restored::load(&delivery.mode, &source.spec, &role, scale.workers, &scale_counters, inherited)?;
    let mut kube_watch = kubernetes.watch;
    let stall_timeout = kube_watch.stall.timeout;
    if !restored.seen.is_empty() {
        kube_watch.resume_seen = Some(restored.seen.clone());
    }
    tokio::spawn(stop_on_signal(shutdown.clone()));
    // What the registry swapped before the run (the plugins directory replacing embedded
    // defaults) is not counted as the run's.
    let registry = plugins.registry;
    let swaps_before = registry.swaps();
    let config = plugins.config.as_deref().map(Config::load).transpose()?;
    let client = kubernetes_client(&source.spec, &plugins.base, config.as_ref(), &kubernetes.connection).await?;
    let enrich = kubernetes.enrich.or(config.as_ref().map(|c| c.enrich.clone()).unwrap_or_default());
    let enricher = enricher(&enrich, client.clone(), &kubernetes.connection).await?;
    set_shadows(&registry, plugins.shadows, plugins.shadow_diffs, plugins.shadow_diffs_max, config.as_ref())?;
    // The watcher plugins: the command line's and the config's, or else the plugins directory's.
    let watcher_specs = crate::watchers::attached_specs(
        plugins.watchers.iter().cloned().chain(config.iter().flat_map(|c| c.watchers.clone())).collect(),
        &registry,
    );
    let sinks = Sinks::build(
        client.clone(),
        restored.progress.is_some(),
        kubernetes.events_api,
        serving.serve.is_some(),
        serving.watch_cache,
        &watcher_specs,
        config.as_ref(),
        match &delivery.mode {
            Delivery::AtLeastOnce { state_file } => Some(HighWaterMark::new(sidecar_path(state_file))),
            _ => None,
        },
        delivery.handover.as_ref().is_some_and(|h| h.standby.is_some()),
    )?;
    let location = (plugins.config.as_deref(), config.as_ref());
    let attached: Vec<String> = watcher_specs.iter().map(crate::watchers::spec_plugin_name).collect();
    let mut plans =
        Plans::build(&role, &plugins.base, location, &registry, &sinks.set, (plugins.watch, attached), swaps_before)?;

    let Restored { progress, resume, seen, restore } = restored;
    let shared = delivery.handover.as_ref().map(|h| (h.saved.clone(), h.standby.clone()));
    let mut checkpointer =
        Checkpointer::build(&delivery.mode, &source.spec, progress.as_ref(), seen, sinks.set.clone(), shared);
    let snapshots =
        checkpointer.snapshots(&role, delivery.checkpoint_interval, restore, scale.workers, &scale_counters);
    let to_router = plans.to_router.take().expect("the plan's first receiver");
    let tier = Tier::start(
        delivery.broadcaster,
        to_router,
        TierOptions {
            role: &role,
            scale: &scale,
            max_in_flight: limits.max_in_flight,
            delivery: &delivery.mode,
            progress: progress.as_ref(),
            saves_position: checkpointer.saves_position(),
            snapshots,
            counters: &scale_counters,
            source: source.spec.to_string(),
            shutdown_timeout: limits.shutdown_timeout,
        },
    )
    .await?;
    let watchers = Watchers::attach(
        &tier.event_broadcaster,
        sinks.watch_cache.as_ref(),
        &registry,
        watcher_specs.iter(),
        &plugins.base,
    )?;
    let feed = match (connected, &role) {
        (Some(connected), Role::Worker { target, index }) => Feed::worker(
            connected,
            (target.clone(), *index),
            scale.snapshot_interval,
            tier.worker_router.clone(),
            source.counters.clone(),
            scale_counters.clone(),
        ),
        _ => Feed::Source(Box::new(SourceFeed {
            spec: source.spec.clone(),
            kube: client,
            watch: kube_watch,
            resume,
            progress,
            follow: source.follow,
            counters: source.counters.clone(),
            ingest_counters: Arc::new(IngestCounters::default()),
            http_limits: serving.http_limits,
            enricher: enricher.clone(),
        })),
    };
    // Prometheus: every piece registers its live counters, read at every scrape.
    let servers = Servers::build(sinks.watch_cache.clone(), serving.serve.is_some(), serving.http_limits);
    sinks.register(&servers.metrics);
    feed.register(&servers.metrics);
    if let Some(enricher) = &enricher {
        let counters = enricher.counters();
        servers.metrics.add_source(move |s| s.add_enrich(&counters));
    }
    tier.register(&servers.metrics, source.spec.to_string(), &scale_counters);
    tier.watch_acknowledgements(&servers.readiness, stall_timeout, shutdown.clone());
    plans.register(&servers.metrics);
    watchers.register(&servers.metrics);
    checkpointer.register(&servers.metrics);
    if let Some(leader) = &serving.leader {
        leader.register(&servers.metrics);
    }
    servers.start(serving.metrics, serving.serve, &source.spec, &shutdown).await?;
    checkpointer.start();
    Ok(RunningTopology {
        role,
        feed: Some(feed),
        tier,
        sinks,
        plans,
        watchers,
        checkpointer,
        servers,
        scale: scale_counters,
        shutdown,
        shutdown_timeout: limits.shutdown_timeout,
    })
}

/// Fires `shutdown` on SIGINT or SIGTERM.
pub(super) async fn stop_on_signal(shutdown: CancellationToken) {
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

/// The enricher of `settings` (`None` when enrichment is off), reading the cluster through
/// `client` (the source's and sinks'), else through a client of its own from `connection`; when
/// no cluster can be configured, only the cluster's name is attached (logged).
///
/// # Errors
/// [`RunError::Enrich`] when a glob does not compile.
async fn enricher(
    settings: &crate::k8s::enrich::EnrichSettings,
    client: Option<kube::Client>,
    connection: &crate::k8s::KubeOptions,
) -> Result<Option<Arc<crate::k8s::enrich::Enricher>>, RunError> {
    if !settings.enabled() {
        return Ok(None);
    }
    let client = match client {
        Some(client) => Some(client),
        None if settings.needs_cluster() => match crate::k8s::connect(connection).await {
            Ok(client) => Some(client),
            Err(e) => {
                tracing::warn!("enrichment: no Kubernetes API ({e}): only the cluster name is attached");
                None
            }
        },
        None => None,
    };
    let enricher = crate::k8s::enrich::Enricher::new(settings, client)?;
    Ok(Some(Arc::new(enricher)))
}
