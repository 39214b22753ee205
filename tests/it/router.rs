//! The tenant router's per-sink delivery modes, on the library: a stalled `at-most-once` sink
//! sheds its writes instead of holding the others back, and the acknowledged prefix (what
//! at-least-once saves) waits only for the `at-least-once` sinks.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use eventpipe::broadcaster::{Broadcaster, FullChannelBehavior, WatchEventType};
use eventpipe::correlator::{CorrelationClock, CorrelatorOptions};
use eventpipe::delivery::{Acknowledgements, DeliveryMode, Progress};
use eventpipe::event::{Event, SharedEvent};
use eventpipe::pipeline::plan::{PlannedTenant, TenantPlan, TenantSink};
use eventpipe::pipeline::router::{RouterOptions, RouterStats, record_to_tenants};
use eventpipe::sink::{EventSink, SinkError, Stored};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// Answers every call at once and counts it.
#[derive(Default)]
struct CountingSink(AtomicU64);

#[async_trait]
impl EventSink for CountingSink {
    async fn create(&self, _event: &Event) -> Result<Stored, SinkError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(Stored::AsSent)
    }
    async fn update(&self, event: &Event) -> Result<Stored, SinkError> {
        self.create(event).await
    }
    async fn patch(&self, event: &Event, _patch: &[u8]) -> Result<Stored, SinkError> {
        self.create(event).await
    }
}

/// Holds every call until released (a stalled endpoint), counting the calls that started.
#[derive(Default)]
struct StalledSink {
    started: AtomicU64,
    release: Notify,
}

#[async_trait]
impl EventSink for StalledSink {
    async fn create(&self, _event: &Event) -> Result<Stored, SinkError> {
        self.started.fetch_add(1, Ordering::SeqCst);
        self.release.notified().await;
        Ok(Stored::AsSent)
    }
    async fn update(&self, event: &Event) -> Result<Stored, SinkError> {
        self.create(event).await
    }
    async fn patch(&self, event: &Event, _patch: &[u8]) -> Result<Stored, SinkError> {
        self.create(event).await
    }
}

/// Event `i`: its own object, so nothing aggregates, and the spam filter's burst is not reached.
fn event(i: usize) -> Event {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("pod-{i}.1"), "namespace": "ns"},
        "involvedObject": {"kind": "Pod", "namespace": "ns", "name": format!("pod-{i}"), "uid": format!("u{i}")},
        "reason": "Started", "message": "started", "type": "Normal", "count": 1,
        "source": {"component": "kubelet"},
        "lastTimestamp": "2024-01-01T00:00:00Z"
    }))
    .unwrap()
}

/// A tenant router over one tenant with `sinks`, acknowledging to a progress of its own; events
/// go in through the returned Broadcaster.
fn start(
    sinks: Vec<TenantSink>,
    options: RouterOptions,
) -> (Broadcaster<SharedEvent>, JoinHandle<RouterStats>, Arc<Progress>) {
    let tenant = PlannedTenant::fixed_sinks("default", CorrelatorOptions::default(), sinks);
    let (plans_tx, plans) = tokio::sync::watch::channel(Arc::new(TenantPlan::single(tenant)));
    let progress = Arc::new(Progress::default());
    let options = RouterOptions {
        clock: CorrelationClock::EventTime,
        acks: Arc::new(Acknowledgements::new(Some(progress.clone()))),
        ..options
    };
    let broadcaster = Broadcaster::new(1000, FullChannelBehavior::WaitIfChannelFull);
    let watcher = broadcaster.watch().unwrap();
    let router = tokio::spawn(async move {
        let _plans = plans_tx; // the plan stays current for the whole run
        record_to_tenants(watcher, plans, options).await
    });
    (broadcaster, router, progress)
}

#[tokio::test]
async fn a_stalled_at_most_once_sink_sheds_and_never_holds_back_the_acknowledged_prefix() {
    const EVENTS: usize = 50;
    const WINDOW: usize = 2;
    let (fast, stalled) = (Arc::new(CountingSink::default()), Arc::new(StalledSink::default()));
    let sinks = vec![
        TenantSink { sink: stalled.clone(), delivery: Some(DeliveryMode::AtMostOnce) },
        TenantSink { sink: fast.clone(), delivery: None },
    ];
    let options = RouterOptions { max_in_flight: WINDOW, delivery: DeliveryMode::AtLeastOnce, ..Default::default() };
    let (broadcaster, router, progress) = start(sinks, options);
    for i in 0..EVENTS {
        broadcaster.action(WatchEventType::Added, eventpipe::event::shared(event(i))).await.unwrap();
    }
    // Every event reaches the at-least-once sink and is acknowledged although the stalled sink
    // never answers.
    tokio::time::timeout(Duration::from_secs(10), async {
        while progress.finished_count() < EVENTS as u64 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the acknowledged prefix reaches every event");
    assert_eq!(fast.0.load(Ordering::SeqCst), EVENTS as u64);
    assert_eq!(stalled.started.load(Ordering::SeqCst), WINDOW as u64, "a full window starts nothing more");

    stalled.release.notify_waiters();
    broadcaster.shutdown().await;
    let stats = tokio::time::timeout(Duration::from_secs(10), router).await.expect("the router ends").unwrap();
    assert_eq!(stats.total.shed, (EVENTS - WINDOW) as u64, "{stats:?}");
    // The totals count each event once, as decided; each sink's writes are its own.
    assert_eq!(stats.total.created, EVENTS as u64, "{stats:?}");
    assert_eq!(stats.sinks["sink 0"].created, WINDOW as u64, "{stats:?}");
    assert_eq!(stats.sinks["sink 1"].created, EVENTS as u64, "{stats:?}");
}

#[tokio::test]
async fn an_at_least_once_sink_holds_the_prefix_until_it_answers() {
    let (fast, stalled) = (Arc::new(CountingSink::default()), Arc::new(StalledSink::default()));
    let sinks = vec![
        TenantSink { sink: stalled.clone(), delivery: Some(DeliveryMode::AtLeastOnce) },
        TenantSink { sink: fast.clone(), delivery: Some(DeliveryMode::Wait) },
    ];
    let (broadcaster, router, progress) =
        start(sinks, RouterOptions { delivery: DeliveryMode::Wait, ..Default::default() });
    for i in 0..10 {
        broadcaster.action(WatchEventType::Added, eventpipe::event::shared(event(i))).await.unwrap();
    }
    tokio::time::timeout(Duration::from_secs(10), async {
        while fast.0.load(Ordering::SeqCst) < 10 || stalled.started.load(Ordering::SeqCst) < 10 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("both sinks get every event");
    assert_eq!(progress.finished_count(), 0, "the at-least-once sink acknowledged nothing yet");
    // Release until every held call has answered (a call may start after a notification).
    let released = async {
        loop {
            stalled.release.notify_waiters();
            if progress.finished_count() == 10 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), released).await.expect("acknowledged once it answered");
    broadcaster.shutdown().await;
    router.await.unwrap();
}
