//! The running topology: owns the pieces once built, runs the feed (source or worker tier),
//! then shuts down in order — source → Broadcaster → router → sinks, then the checkpoint —
//! within the shutdown timeout, and produces the [`RunSummary`].

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::pipeline::router::RouterStats;
use crate::pipeline::scale::ScaleCounters;
use crate::source::SourceStats;
use crate::watchers::WatcherStats;

use super::RunError;
use super::checkpoint::Checkpointer;
use super::reloader::Plans;
use super::servers::Servers;
use super::sinks::Sinks;
use super::source::Feed;
use super::tier::Tier;
use super::watchers::Watchers;

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
    /// The sink side, in total and per tenant: `created` / `patched` count each event written
    /// once, however many sinks wrote it; the other write outcomes are summed over the sinks.
    /// Per sink under `sinks`; the watch cache's under `watch_cache`, not in the totals.
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
             filter {}, aggregated {} ({} already aggregated in the input); dropped by rules {}, by plugins {}; sink dropped {}, gave up {}, retries {}, shed {}; incoming queue dropped {}; \
             {} tenant(s) with events, {} plugin swap(s), {} config reload(s), {} rejected reload(s); abandoned {}",
            self.source.read,
            self.source.bad_lines,
            self.source.non_events,
            s.filtered,
            s.created,
            s.patched,
            s.skipped,
            s.aggregated,
            s.already_aggregated,
            s.dropped_by_rules,
            s.dropped_by_plugins,
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
        )?;
        // With several tenants, a line each (one tenant's figures are the totals above).
        if self.sink.tenants.len() > 1 {
            for (name, t) in &self.sink.tenants {
                write!(
                    f,
                    "\n  tenant `{name}`: received {}, filtered {}; created {}, patched {}, skipped by spam filter {}, \
                     aggregated {}; dropped by rules {}, by plugins {}; sink dropped {}, gave up {}",
                    t.received,
                    t.filtered,
                    t.created,
                    t.patched,
                    t.skipped,
                    t.aggregated,
                    t.dropped_by_rules,
                    t.dropped_by_plugins,
                    t.dropped,
                    t.gave_up
                )?;
            }
        }
        // Each sink's own writes, when there are several (one sink's are the totals above),
        // and the watch cache's, which the totals leave out.
        let several = self.sink.sinks.len() > 1;
        let sinks = self.sink.sinks.iter().filter(|_| several).map(|(label, s)| (format!("sink {label}"), s));
        for (name, s) in sinks.chain(self.sink.watch_cache.iter().map(|s| ("watch cache".to_string(), s))) {
            write!(
                f,
                "\n  {name}: created {}, patched {}; dropped {}, gave up {}, cancelled {}, retries {}, shed {}",
                s.created, s.patched, s.dropped, s.gave_up, s.cancelled, s.retries, s.shed
            )?;
        }
        Ok(())
    }
}

/// Every piece of a run, started and owning its order of shutdown.
pub struct RunningTopology {
    pub(super) role: super::Role,
    pub(super) feed: Option<Feed>,
    pub(super) tier: Tier,
    pub(super) sinks: Sinks,
    pub(super) plans: Plans,
    pub(super) watchers: Watchers,
    pub(super) checkpointer: Checkpointer,
    pub(super) servers: Servers,
    pub(super) scale: Arc<ScaleCounters>,
    pub(super) shutdown: CancellationToken,
    pub(super) shutdown_timeout: std::time::Duration,
}

impl std::fmt::Debug for RunningTopology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningTopology").field("role", &self.role).finish_non_exhaustive()
    }
}

impl RunningTopology {
    /// Runs the feed until the source ends (or the shutdown), then drains the pipeline in order
    /// and fills in the summary. A source that fails still lets what it fed drain.
    ///
    /// # Errors
    /// [`RunError`] when the source cannot be read, the router watcher failed or a sink cannot
    /// be flushed.
    pub async fn run(mut self) -> Result<RunSummary, RunError> {
        let routes = self.servers.routes();
        let feed = self.feed.take().expect("a topology runs once");
        // The shutdown timeout counts from the signal: it bounds the source's last hand-over
        // (what it read, waiting for room in the Broadcaster) and the drain together.
        let expired = CancellationToken::new();
        let expiry = tokio::spawn({
            let (shutdown, expired, timeout) = (self.shutdown.clone(), expired.clone(), self.shutdown_timeout);
            async move {
                shutdown.cancelled().await;
                tokio::time::sleep(timeout).await;
                expired.cancel();
            }
        });
        let fed = feed
            .run(
                self.tier.event_broadcaster.broadcaster(),
                self.plans.latest.clone(),
                (routes, &self.servers.readiness),
                (&self.shutdown, &expired),
            )
            .await;
        let summary = fed.map(|source| RunSummary { source, ..RunSummary::default() });
        // A worker's or publisher's counts, or a single host's restored snapshots.
        let scale = if self.role.works() {
            Some(self.scale.clone())
        } else {
            (self.role.publishes() || self.tier.refused_at_restore.is_some()).then(|| self.scale.clone())
        };
        if let (Some(scale), Some(refused)) = (&scale, &self.tier.refused_at_restore) {
            for _ in 0..refused.load(std::sync::atomic::Ordering::Relaxed) {
                scale.refused();
            }
        }
        let ended = self.shut_down(summary, scale, &expired).await;
        expiry.abort();
        ended
    }

    /// The feed has ended (or was stopped): drains the Broadcaster into the watchers and lets
    /// the sinks finish until `expired` (the shutdown timeout after a shutdown was asked for);
    /// saves the last position and fills in the summary.
    async fn shut_down(
        self,
        mut summary: Result<RunSummary, RunError>,
        scale: Option<Arc<ScaleCounters>>,
        expired: &CancellationToken,
    ) -> Result<RunSummary, RunError> {
        let RunningTopology { tier, sinks, mut plans, watchers, checkpointer, servers, shutdown_timeout, .. } = self;
        let (draining, counted) = watchers.into_parts();
        let Tier { event_broadcaster, router, live, .. } = tier;
        let watch_cache = sinks.watch_cache.clone();
        let drain = async {
            event_broadcaster.shutdown().await;
            let stats = router.await;
            // Every result is in the watch cache: its watchers take what is left, then end.
            if let Some(cache) = &watch_cache {
                cache.close();
            }
            draining.finish().await;
            stats
        };
        // A shutdown asked for before or during the drain bounds it: `shutdown_timeout` after
        // the signal, what is not finished is abandoned (counted, and left unacknowledged).
        let router_stats: RouterStats = tokio::select! {
            stats = drain => stats?,
            () = expired.cancelled() => {
                tracing::warn!(
                    timeout_ms = shutdown_timeout.as_millis() as u64,
                    "shutdown timeout: what is not delivered yet is abandoned"
                );
                live.lock().unwrap_or_else(|p| p.into_inner()).clone()
            }
        };
        // events.k8s.io series get their final patch (bounded as the drain is).
        if tokio::time::timeout(shutdown_timeout, sinks.set.close()).await.is_err() {
            tracing::warn!("shutdown timeout: open event series were not all written");
        }
        plans.stop_watching();
        checkpointer.finish()?;
        // Each missing namespace was warned about at its first drop; here is how many it cost.
        for (namespace, dropped) in &router_stats.missing_namespaces {
            tracing::warn!(
                namespace,
                dropped,
                "namespace not found: {dropped} event write(s) dropped for it in this run"
            );
        }
        if let Ok(s) = summary.as_mut() {
            s.abandoned = s.source.read.saturating_sub(router_stats.finished);
            s.sink = router_stats;
            s.sink.dropped_by_plugin = plans.latest.borrow().plugin_drops();
            s.dropped_incoming = event_broadcaster.broadcaster().incoming_dropped();
            s.plugin_swaps = plans.swaps();
            s.plugin_failed = plans.latest.borrow().failed();
            s.rejected_reloads = plans.rejected();
            s.watchers = counted.stats();
            s.shadows = plans.shadows();
            s.scale = scale.map(|c| c.stats());
        }
        drop(servers);
        summary
    }
}
