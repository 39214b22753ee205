//! The sink side's shared parts: one Kubernetes client (for the source and every `k8s` sink),
//! the watch cache every tenant also writes to, and the [`SinkSet`] that opens and shares the
//! tenants' sinks.

use std::sync::Arc;

use crate::config::Config;
use crate::k8s::{EventsApi, KubeOptions};
use crate::metrics::Metrics;
use crate::pipeline::plan::TenantRules;
use crate::sink::SinkSpec;
use crate::sink::set::SinkSet;
use crate::source::SourceSpec;
use crate::watch_cache::resource_version::HighWaterMark;
use crate::watch_cache::{WatchCache, WatchCacheSettings};
use crate::watchers::{WatchOn, WatcherSpec};

use super::{RunError, announce};

/// One Kubernetes client for the source and every `k8s` sink, made when the source, the
/// command line's sinks or the config name one.
///
/// # Errors
/// [`RunError::Kubernetes`] when the API cannot be reached.
pub(super) async fn kubernetes_client(
    source: &SourceSpec,
    base: &TenantRules,
    config: Option<&Config>,
    kube: &KubeOptions,
) -> Result<Option<kube::Client>, RunError> {
    let k8s = |s: &String| s == "k8s" || s.starts_with("k8s:");
    let routes_k8s = |routes: &[crate::config::RouteConfig]| routes.iter().flat_map(|r| &r.route.sinks).any(k8s);
    let names_k8s = |rules: &crate::config::Rules| {
        rules.sinks.iter().flatten().any(k8s) || rules.routes.as_deref().is_some_and(routes_k8s)
    };
    let needs_kube = matches!(source, SourceSpec::Kubernetes(_))
        || base.sinks.iter().any(|s| matches!(s.spec, SinkSpec::Kubernetes(_)))
        || config.is_some_and(|c| {
            names_k8s(&c.defaults) || c.tenants.iter().any(|t| names_k8s(&t.rules)) || routes_k8s(&c.routes)
        });
    Ok(if needs_kube { Some(crate::k8s::connect(kube).await?) } else { None })
}

/// The sinks piece: the tenants' sinks, opened once and shared, and the watch cache.
pub(super) struct Sinks {
    /// Every sink opened (by the plan and its reloads).
    pub set: Arc<SinkSet>,
    /// The watch cache: on with `--serve` or a watcher plugin of the results.
    pub watch_cache: Option<Arc<WatchCache>>,
}

impl Sinks {
    /// The watch cache (on with `serve` or a watcher of the results among `watchers` and the
    /// config's; bounds from `settings`, then the config's `[watch_cache]`, then the defaults)
    /// and a sink set writing through `client` to `events_api`; `append`: file sinks append
    /// (a resumed at-least-once run). The cache's resourceVersions continue above an earlier
    /// run's ([`WatchCache::continuing`]), with the high-water mark kept in `mark` (at-least-once:
    /// beside the state file). `standby`: a hot standby's set, whose sinks write nothing
    /// ([`SinkSet::standing_by`]).
    ///
    /// # Errors
    /// [`RunError::WatchCache`] for a watch cache setting out of range.
    pub fn build(
        client: Option<kube::Client>,
        append: bool,
        events_api: EventsApi,
        serve: bool,
        settings: WatchCacheSettings,
        watchers: &[WatcherSpec],
        config: Option<&Config>,
        mark: Option<HighWaterMark>,
        standby: bool,
    ) -> Result<Self, RunError> {
        let results_watchers =
            watchers.iter().chain(config.iter().flat_map(|c| &c.watchers)).any(|w| w.on == WatchOn::Results);
        let watch_cache_config =
            settings.or(config.map(|c| c.watch_cache).unwrap_or_default()).resolve().map_err(RunError::WatchCache)?;
        let watch_cache = (serve || results_watchers)
            .then(|| WatchCache::continuing(watch_cache_config, crate::clock::system(), mark));
        let mut set = SinkSet::new(client, append).with_events_api(events_api);
        if standby {
            set = set.standing_by();
        }
        if let Some(cache) = &watch_cache {
            let c = cache.config();
            announce(&format!(
                "watch cache on: every tenant's writes also go to it; window {} changes / {} s, at most {} events, \
                 event TTL {} s; resourceVersions from {}",
                c.window_size,
                c.window_age.as_secs(),
                c.max_objects,
                c.event_ttl.as_secs(),
                cache.resource_version() + 1
            ));
            set = set.with_watch_cache(cache.clone());
        }
        Ok(Sinks { set: Arc::new(set), watch_cache })
    }

    /// Registers the counters of the sinks (webhook and OTLP queues, sink plugins, the
    /// `metrics` sinks' event counts) and of the watch cache on `metrics`.
    pub fn register(&self, metrics: &Metrics) {
        let (sinks, cache) = (self.set.clone(), self.watch_cache.clone());
        metrics.add_source(move |s| {
            if let Some(cache) = &cache {
                s.add_watch_cache(cache.stats());
            }
            for webhook in sinks.webhooks() {
                s.add_webhook(&webhook);
            }
            if let Some(counts) = sinks.event_counts() {
                s.add_event_counts(&counts);
            }
            for handle in sinks.plugin_handles() {
                s.add_plugin(&handle);
            }
        });
    }
}
