//! The watcher plugins piece: each attached to the Broadcaster (its own queue) or to the
//! results in the watch cache; at shutdown, a short grace to finish their queues.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::metrics::Metrics;
use crate::pipeline::plan::TenantRules;
use crate::plugin::registry::PluginRegistry;
use crate::record::event_broadcaster::EventBroadcaster;
use crate::tenant::DEFAULT_TENANT;
use crate::watch_cache::WatchCache;
use crate::watchers::{PluginWatcher, WatchOn, WatcherCounters, WatcherSpec, WatcherStats};

use super::{RunError, announce};

/// How long watcher plugins may take to finish their queues once the pipeline has drained.
const WATCHER_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// The attached watcher plugins.
pub(super) struct Watchers {
    attached: Vec<PluginWatcher>,
}

impl Watchers {
    /// Attaches every watcher plugin of `specs` to the Broadcaster: a name is looked up in the
    /// registry (hot-swapped through its slot); a `FILE.wasm` is loaded under its stem. Each is
    /// called with the command line's plugin limits and its `[plugins.NAME]` config.
    ///
    /// # Errors
    /// [`RunError::WatcherPlugin`] for a plugin that is missing, refused or not a watcher.
    pub fn attach<'a>(
        broadcaster: &EventBroadcaster,
        cache: Option<&Arc<WatchCache>>,
        registry: &PluginRegistry,
        specs: impl Iterator<Item = &'a WatcherSpec>,
        base: &TenantRules,
    ) -> Result<Self, RunError> {
        let mut attached = Vec::new();
        for spec in specs {
            let fail = |message: String| RunError::WatcherPlugin { plugin: spec.plugin.clone(), message };
            let name = registry.name_or_load(&spec.plugin).map_err(fail)?;
            let handle = registry
                .handle(&name, crate::plugin::PluginKind::Watcher, DEFAULT_TENANT, base.settings_for(&name))
                .map_err(|e| fail(e.to_string()))?;
            let watcher = match (spec.on, cache) {
                (WatchOn::Results, Some(cache)) => {
                    let watcher =
                        crate::watchers::attach_results(cache, handle, spec).map_err(|e| fail(e.to_string()))?;
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
        Ok(Watchers { attached })
    }

    /// Registers every watcher plugin's calls and queue drops on `metrics`.
    pub fn register(&self, metrics: &Metrics) {
        let probes: Vec<_> = self.attached.iter().map(|w| (w.handle.clone(), w.counters.clone())).collect();
        metrics.add_source(move |s| {
            for (handle, counters) in &probes {
                s.add_plugin(handle);
                s.add_watcher_dropped(handle.name(), "queue_full", counters.snapshot().dropped);
            }
        });
    }

    /// Splits them into what the drain waits for and what the summary reads.
    pub fn into_parts(self) -> (Draining, Counted) {
        let (tasks, counted) =
            self.attached.into_iter().map(|w| (w.task, (w.handle.name().to_string(), w.counters))).unzip();
        (Draining(tasks), Counted(counted))
    }
}

/// The watcher plugins' tasks, ending once the Broadcaster drained into their queues.
pub(super) struct Draining(Vec<tokio::task::JoinHandle<()>>);

impl Draining {
    /// Watcher plugins observe; they get a short grace to finish their queues, then are cut
    /// off (a looping plugin must not hold the run).
    pub async fn finish(self) {
        let watchers = async {
            for task in self.0 {
                let _ = task.await;
            }
        };
        if tokio::time::timeout(WATCHER_GRACE, watchers).await.is_err() {
            tracing::warn!(grace_ms = WATCHER_GRACE.as_millis() as u64, "watcher plugins cut off at shutdown");
        }
    }
}

/// The watcher plugins' counts, by name.
pub(super) struct Counted(Vec<(String, Arc<WatcherCounters>)>);

impl Counted {
    /// Per watcher plugin: events seen, failed and dropped.
    pub fn stats(&self) -> BTreeMap<String, WatcherStats> {
        self.0.iter().map(|(name, c)| (name.clone(), c.snapshot())).collect()
    }
}
