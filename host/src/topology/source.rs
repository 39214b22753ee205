//! The feed piece: what puts events in: the source task (into the Broadcaster), or on a
//! worker, the worker tier's consumers of its partitions (into router partitions of their own).

use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::broadcaster::{Broadcaster, FullChannelBehavior, WatchEventType};
use crate::delivery::{Position, Progress};
use crate::event::SharedEvent;
use crate::health::Readiness;
use crate::k8s::enrich::Enricher;
use crate::metrics::Metrics;
use crate::pipeline::plan::TenantPlan;
use crate::pipeline::router::RouterOptions;
use crate::pipeline::scale::{Connected, ScaleCounters, WorkerIndex, WorkerOptions};
use crate::source::http::IngestCounters;
use crate::source::k8s::WatchOptions;
use crate::source::{Source, SourceContext, SourceCounters, SourceError, SourceSpec, SourceStats};

use super::{RunError, announce};

/// A source and how to build it.
pub(super) struct SourceFeed {
    /// The source.
    pub spec: SourceSpec,
    /// The Kubernetes client (a `k8s` source).
    pub kube: Option<kube::Client>,
    /// What a `k8s` source watches.
    pub watch: WatchOptions,
    /// Where it resumes.
    pub resume: Option<Position>,
    /// The progress it records (at-least-once, the publish tier).
    pub progress: Option<Arc<Progress>>,
    /// A JSON-lines file is followed.
    pub follow: bool,
    /// Its counters.
    pub counters: Arc<SourceCounters>,
    /// HTTP ingest's counters.
    pub ingest_counters: Arc<IngestCounters>,
    /// Timeouts and connection cap of HTTP ingest's server.
    pub http_limits: crate::http_server::ServerLimits,
    /// Enrichment (`[enrich]`, `--enrich-*`): the source's events are enriched on their way
    /// into the Broadcaster.
    pub enricher: Option<Arc<Enricher>>,
}

/// The worker tier in place of a source.
pub(super) struct WorkerFeed {
    /// Connected to its stream.
    pub connected: Connected,
    /// The router options of its partitions.
    pub options: WorkerOptions,
}

/// What feeds the pipeline.
pub(super) enum Feed {
    /// A source into the Broadcaster.
    Source(Box<SourceFeed>),
    /// The worker tier's partitions.
    Worker(Box<WorkerFeed>),
}

impl Feed {
    /// The worker tier, connected to its stream (`index` of the workers), feeding router
    /// partitions with `router`'s options and counting into `counters` and `scale`.
    pub fn worker(
        connected: Connected,
        (target, index): (crate::nats::NatsTarget, WorkerIndex),
        snapshot_interval: std::time::Duration,
        router: RouterOptions,
        counters: Arc<SourceCounters>,
        scale: Arc<ScaleCounters>,
    ) -> Self {
        Feed::Worker(Box::new(WorkerFeed {
            connected,
            options: WorkerOptions { target, worker: index, snapshot_interval, router, counters, scale },
        }))
    }

    /// Registers the source's counters (bad input and non-events, HTTP ingest's requests, a
    /// Kubernetes watch's progress and restarts) on `metrics`.
    pub fn register(&self, metrics: &Metrics) {
        let (name, counters, ingest, watch) = match self {
            Feed::Source(s) => (
                s.spec.to_string(),
                s.counters.clone(),
                matches!(s.spec, SourceSpec::Http(_)).then(|| s.ingest_counters.clone()),
                matches!(s.spec, SourceSpec::Kubernetes(_)),
            ),
            Feed::Worker(w) => (w.options.target.to_string(), w.options.counters.clone(), None, false),
        };
        metrics.add_source(move |s| {
            s.add_source(&name, &counters.stats());
            if watch {
                s.add_watch(&name, &counters);
            }
            if let Some(ingest) = &ingest {
                s.add_ingest(&name, &ingest.stats());
                s.add_http_server(ingest.http_server());
            }
        });
    }

    /// Feeds the pipeline until the source ends or `shutdown`: ready meanwhile. A source
    /// serves `routes` too when it is an HTTP server. After `shutdown` a source still hands
    /// what it read to the Broadcaster, until `expired` (the shutdown timeout): then it is
    /// stopped, and what it had not handed over is not read (never acknowledged, so read again
    /// by the next run at least once).
    ///
    /// # Errors
    /// [`RunError::Source`] when the source cannot be opened or read.
    pub async fn run(
        self,
        broadcaster: &Broadcaster<SharedEvent>,
        plans: watch::Receiver<Arc<TenantPlan>>,
        (routes, readiness): (axum::Router, &Readiness),
        (shutdown, expired): (&CancellationToken, &CancellationToken),
    ) -> Result<SourceStats, RunError> {
        match self {
            Feed::Worker(worker) => {
                let WorkerFeed { connected, options } = *worker;
                announce(&format!(
                    "worker {}/{} of {}: {} of {} partitions{}",
                    options.worker.index,
                    options.worker.count,
                    options.target,
                    options.worker.partitions(connected.partitions()).len(),
                    connected.partitions(),
                    if connected.pinned() { ", pinned clients (priority groups)" } else { "" }
                ));
                readiness.set(true);
                let stats = crate::pipeline::scale::run_worker(connected, plans, options, shutdown.clone()).await;
                readiness.set(false);
                Ok(stats)
            }
            Feed::Source(s) => {
                let s = *s;
                let counters = s.counters.clone();
                let source = s.spec.build(SourceContext {
                    kube: s.kube,
                    watch: WatchOptions { health: readiness.clone(), ..s.watch },
                    resume: s.resume,
                    progress: s.progress,
                    follow: s.follow,
                    extra_routes: routes,
                    counters: s.counters,
                    ingest_counters: s.ingest_counters,
                    http_limits: s.http_limits,
                })?;
                readiness.set(true);
                let not_ready_at_shutdown = {
                    let (readiness, shutdown) = (readiness.clone(), shutdown.clone());
                    tokio::spawn(async move {
                        shutdown.cancelled().await;
                        readiness.set(false)
                    })
                };
                // The source is a task of its own on the runtime's workers, not a future of the
                // thread blocking on `run`: its many short waits (for a chunk being decoded, for
                // room in the Broadcaster) then resume on a busy worker instead of waking a third
                // thread. On 2 cores that halved `run`'s context switches (0.956× the wall time,
                // 21 pairs).
                let source = match s.enricher {
                    None => tokio::spawn(source.run(broadcaster.clone(), shutdown.clone())),
                    Some(enricher) => {
                        tokio::spawn(run_enriched(source, broadcaster.clone(), enricher, shutdown.clone()))
                    }
                };
                let mut source = source;
                let ran = tokio::select! {
                    ran = &mut source => ran.unwrap_or_else(|failed| std::panic::resume_unwind(failed.into_panic())),
                    () = expired.cancelled() => {
                        source.abort();
                        tracing::warn!(
                            source = %s.spec,
                            "shutdown timeout: the source stopped before handing over all it read; the rest is not read"
                        );
                        Ok(counters.stats())
                    }
                };
                readiness.set(false);
                not_ready_at_shutdown.abort();
                Ok(ran?)
            }
        }
    }
}

/// Events enriched at once: their lookups wait together (for a kind's first list, a GET), so
/// that a cold start costs one wait per batch, not one per event.
const ENRICH_BATCH: usize = 256;

/// Runs `source` into a Broadcaster of its own (as long a queue as `to`'s, waiting when full)
/// and forwards its events into `to` in their order, each with its enrichment attached
/// ([`Enricher::enrich`]: within the enricher's wait). The source's all-or-nothing batches (HTTP
/// ingest) are accepted as they would be by `to`.
async fn run_enriched(
    source: Source,
    to: Broadcaster<SharedEvent>,
    enricher: Arc<Enricher>,
    shutdown: CancellationToken,
) -> Result<SourceStats, SourceError> {
    let before =
        Broadcaster::<SharedEvent>::new_long_queue(to.incoming_capacity(), FullChannelBehavior::WaitIfChannelFull);
    let mut events = before.watch().expect("a new Broadcaster takes watchers");
    let forward = tokio::spawn(async move {
        while let Some(batch) = events.recv_batch(ENRICH_BATCH).await {
            let found = futures_util::future::join_all(batch.iter().map(|e| enricher.enrich(e))).await;
            let batch = batch
                .into_iter()
                .zip(found)
                .map(|(event, found)| {
                    let event = match found {
                        None => event,
                        Some(enrichment) => {
                            // The only holder after the Broadcaster handed it over: no copy.
                            let mut event = Arc::unwrap_or_clone(event);
                            event.enrichment = crate::event::enrichment::Enriched::new(enrichment);
                            Arc::new(event)
                        }
                    };
                    (WatchEventType::Added, event)
                })
                .collect();
            if to.action_many(batch).await.is_err() {
                return;
            }
        }
    });
    let ran = source.run(before.clone(), shutdown).await;
    before.shutdown().await;
    forward.await.unwrap_or_else(|failed| std::panic::resume_unwind(failed.into_panic()));
    ran
}
