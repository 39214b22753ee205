//! The Broadcaster and what watches it for the tenants: the tenant router watcher (a single
//! host, and idle on a worker, whose partitions are fed by the worker tier) or the publish
//! tier ([`crate::pipeline::scale::publish`]).

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::broadcaster::FullChannelBehavior;
use crate::delivery::{Acknowledgements, Delivery, Progress};
use crate::health::{Probe, Readiness};
use crate::metrics::Metrics;
use crate::pipeline::plan::TenantPlan;
use crate::pipeline::router::{RouterOptions, RouterSnapshots, RouterStats};
use crate::pipeline::scale::ScaleCounters;
use crate::record::event_broadcaster::{EventBroadcaster, EventBroadcasterOptions};

use super::options::ScaleOptions;
use super::{Role, RunError, announce};

/// What the tier is wired to.
pub(super) struct TierOptions<'a> {
    /// The process's role.
    pub role: &'a Role,
    /// Partitions and partition key.
    pub scale: &'a ScaleOptions,
    /// Writes in flight per sink (the publish tier's window).
    pub max_in_flight: usize,
    /// The delivery guarantee.
    pub delivery: &'a Delivery,
    /// The source's progress (at-least-once, the publish tier's message ids).
    pub progress: Option<&'a Arc<Progress>>,
    /// Whether a committer saves the positions (else the publish tier trims them itself).
    pub saves_position: bool,
    /// A single host's correlator snapshots.
    pub snapshots: Option<RouterSnapshots>,
    /// The publish tier's counts.
    pub counters: &'a Arc<ScaleCounters>,
    /// The source's name (the publish tier's message ids hash it).
    pub source: String,
    /// How long the publish tier goes on publishing again once the drain began (the end of the
    /// input, or a signal).
    pub shutdown_timeout: Duration,
}

/// The Broadcaster piece with its tenant router (or publish tier).
pub(super) struct Tier {
    /// The Broadcaster the source feeds.
    pub event_broadcaster: EventBroadcaster,
    /// The tenant router watcher (or the publisher): its stats once the Broadcaster drained.
    pub router: tokio::task::JoinHandle<RouterStats>,
    /// The router's live stats (read by `/metrics`, and by the summary when the shutdown
    /// timeout cuts the drain).
    pub live: Arc<Mutex<RouterStats>>,
    /// The router options a worker tier's partitions use.
    pub worker_router: RouterOptions,
    /// Partitions whose restored correlator state was refused (a single host's snapshots).
    pub refused_at_restore: Option<Arc<AtomicU64>>,
}

impl Tier {
    /// The Broadcaster (waiting when its queue is full unless `delivery` is at-most-once) and
    /// its router: the tenant router watcher on `plans`, or the publish tier's publisher.
    ///
    /// # Errors
    /// [`RunError::Nats`] when the publish tier's stream cannot be reached.
    pub async fn start(
        broadcaster: EventBroadcasterOptions,
        plans: watch::Receiver<Arc<TenantPlan>>,
        o: TierOptions<'_>,
    ) -> Result<Self, RunError> {
        let broadcaster = EventBroadcasterOptions {
            full_channel_behavior: match o.delivery {
                Delivery::AtMostOnce => FullChannelBehavior::DropIfChannelFull,
                Delivery::Wait | Delivery::AtLeastOnce { .. } => FullChannelBehavior::WaitIfChannelFull,
            },
            ..broadcaster
        };
        let event_broadcaster = EventBroadcaster::new(broadcaster);
        let live = Arc::new(Mutex::new(RouterStats::default()));
        let refused_at_restore = o.snapshots.as_ref().map(|s| s.refused.clone());
        let router_options = RouterOptions {
            // A worker's partitions are its own (the Broadcaster's router stays idle).
            workers: if o.role.works() { 1 } else { o.scale.workers.max(1) },
            partition_key: o.scale.partition_key,
            max_in_flight: o.max_in_flight.max(1),
            acks: Arc::new(Acknowledgements::new(o.progress.cloned())),
            delivery: o.delivery.mode(),
            stats: live.clone(),
            snapshots: o.snapshots,
            ..event_broadcaster.router_options()
        };
        let worker_router = router_options.clone();
        let router = match o.role {
            Role::Publisher { target } => {
                let client = target.connect().await?;
                let js = async_nats::jetstream::new(client);
                let (stream, partitions) = target.stream(&js, true).await?;
                let last_sequence = Some(stream.cached_info().state.last_sequence);
                announce(&format!(
                    "publishing to {target}, {partitions} partitions, subjects {}.<tenant>.<partition>",
                    target.prefix
                ));
                let watcher = event_broadcaster.broadcaster().watch().expect("a new broadcaster is running");
                // The drain cancels the EventBroadcaster's sink retries at once (client-go
                // `Shutdown`); JetStream's acknowledgements are awaited, and failed
                // publications sent again, for the shutdown timeout after it.
                let router_options =
                    RouterOptions { cancel: after(&router_options.cancel, o.shutdown_timeout), ..router_options };
                let options = crate::pipeline::scale::PublishOptions {
                    target: target.clone(),
                    js,
                    partitions,
                    partition_key: o.scale.partition_key,
                    window: o.max_in_flight.max(1),
                    progress: o.progress.cloned(),
                    trim_progress: !o.saves_position,
                    router: router_options,
                    counters: o.counters.clone(),
                    source: o.source,
                    last_sequence,
                };
                tokio::spawn(crate::pipeline::scale::publish(watcher, plans, options))
            }
            Role::SingleHost | Role::Worker { .. } => event_broadcaster
                .start_recording_to_tenants(plans, router_options)
                .expect("a new broadcaster is running"),
        };
        Ok(Tier { event_broadcaster, router, live, worker_router, refused_at_restore })
    }

    /// Fails `/readyz` (on `readiness`) while the sinks acknowledge nothing for `timeout` with
    /// writes waiting ([`Acknowledgements::unacknowledged_for`]), checked every quarter of it,
    /// until `shutdown`; a zero `timeout` checks nothing. A restart would not help (the sinks'
    /// endpoints are down or slow), so `/healthz` is left alone.
    pub fn watch_acknowledgements(&self, readiness: &Readiness, timeout: Duration, shutdown: CancellationToken) {
        if timeout.is_zero() {
            return;
        }
        let (acks, readiness) = (self.worker_router.acks.clone(), readiness.clone());
        tokio::spawn(async move {
            let mut checks = tokio::time::interval(timeout / 4);
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = checks.tick() => {}
                }
                let problem = acks.unacknowledged_for().filter(|waited| *waited >= timeout).map(|waited| {
                    format!(
                        "no write acknowledged for {:.0} s while {} events wait (--stall-timeout)",
                        waited.as_secs_f64(),
                        acks.pending()
                    )
                });
                readiness.report(Probe::Readiness, "sinks", problem);
            }
            readiness.report(Probe::Readiness, "sinks", None);
        });
    }

    /// Registers the router's counters (events in, per tenant; labelled with the `source`'s
    /// name), the events' latency to acknowledgement, the Broadcaster's drops and the scale-out's `counters` on `metrics`.
    pub fn register(&self, metrics: &Metrics, source: String, counters: &Arc<ScaleCounters>) {
        let (live, broadcaster, scale, acks) = (
            self.live.clone(),
            self.event_broadcaster.broadcaster().clone(),
            counters.clone(),
            self.worker_router.acks.clone(),
        );
        metrics.add_source(move |s| {
            let stats = live.lock().unwrap_or_else(|p| p.into_inner()).clone();
            s.add_events_in(&source, stats.total.received);
            s.add_router(&stats);
            s.add_acknowledgements(&acks);
            s.add_scale(&scale.stats());
            s.add_worker_partitions(&scale);
            s.add_broadcaster(&broadcaster);
        });
    }
}

/// A token cancelled `delay` after `token` is.
fn after(token: &CancellationToken, delay: Duration) -> CancellationToken {
    let (token, delayed) = (token.clone(), CancellationToken::new());
    let fire = delayed.clone();
    tokio::spawn(async move {
        token.cancelled().await;
        tokio::time::sleep(delay).await;
        fire.cancel();
    });
    delayed
}
