//! events.k8s.io recording (client-go `tools/events`, spec §5) on the sink side: the
//! isomorphic-event cache that decides create / series patch / count-only for each event, the
//! write with client-go's `attemptRecording` retries, and [`SeriesSink`], which puts both in
//! front of an events.k8s.io [`EventSink`] so that the tenant router can record through it.
//! The Broadcaster watcher that does the same for a recorder is [`crate::record::series`].

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::retry::{Tries, Verb, record_event};
use super::{EventSink, RetryPolicy, SinkError, SinkPatch, Stored, StoredEvent, WriteOutcome};
use crate::clock::SharedClock;
use crate::correlator::EventCorrelateResult;
use crate::event::{CompactString, Event, EventSeries, ObjectReference, Time, format_micro_time};

/// client-go `finishTime`: a series not observed for this long is closed (final patch, then
/// forgotten), and so is a singleton this old.
pub const FINISH_TIME: Duration = Duration::from_secs(6 * 60);
/// client-go `refreshTime`: every cached series is patched again this often (a heartbeat).
pub const REFRESH_TIME: Duration = Duration::from_secs(30 * 60);
/// client-go `wait.Jitter(sleepDuration, 0.25)`: each pause between tries is the sleep
/// duration plus up to this fraction of it.
pub const RETRY_JITTER_FACTOR: f64 = 0.25;

/// client-go `eventKey` (since k8s 1.27): what makes two events isomorphic. The note is not part
/// of it; `related` is the zero reference when the event has none.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IsomorphicKey {
    /// `type`.
    pub type_: CompactString,
    /// `action`.
    pub action: CompactString,
    /// `reason`.
    pub reason: CompactString,
    /// `reportingController`.
    pub reporting_controller: CompactString,
    /// `reportingInstance`.
    pub reporting_instance: CompactString,
    /// `regarding`, whole.
    pub regarding: ObjectReference,
    /// `related`, whole (zero when unset).
    pub related: ObjectReference,
}

impl IsomorphicKey {
    /// The key of `event` (client-go `getKey`).
    pub fn of(event: &Event) -> Self {
        Self {
            type_: event.type_.clone(),
            action: event.action.clone(),
            reason: event.reason.clone(),
            reporting_controller: event.reporting_component.clone(),
            reporting_instance: event.reporting_instance.clone(),
            regarding: event.involved_object.clone(),
            related: event.related.as_deref().cloned().unwrap_or_default(),
        }
    }
}

/// What to send for one recorded event ([`EventSeriesCache::observe`]).
#[derive(Debug, Clone, PartialEq)]
pub enum SeriesDecision {
    /// The first event of its key: create it.
    Create(Event),
    /// The second: the cached first event with a new series (count 2): patch it.
    Patch(Event),
    /// A later one: counted in the cached series; nothing is sent now.
    Counted,
}

/// The isomorphic-event cache of one events.k8s.io broadcaster (client-go
/// `eventBroadcasterImpl.eventCache`). Unbounded, as client-go's: entries leave it through
/// [`finish_series`](Self::finish_series).
#[derive(Debug, Default)]
pub struct EventSeriesCache {
    events: HashMap<IsomorphicKey, Event>,
}

impl EventSeriesCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// client-go `recordToSink`'s bookkeeping for one event observed at `now`.
    pub fn observe(&mut self, event: Event, now: Time) -> SeriesDecision {
        let key = IsomorphicKey::of(&event);
        let Some(cached) = self.events.get_mut(&key) else {
            self.events.insert(key, event.clone());
            return SeriesDecision::Create(event);
        };
        match &mut cached.series {
            Some(series) => {
                series.count = series.count.wrapping_add(1);
                series.last_observed_time = Some(now);
                SeriesDecision::Counted
            }
            None => {
                cached.series = Some(Box::new(EventSeries { count: 2, last_observed_time: Some(now) }));
                SeriesDecision::Patch(cached.clone())
            }
        }
    }

    /// The cached event of `key`.
    pub fn get(&self, key: &IsomorphicKey) -> Option<&Event> {
        self.events.get(key)
    }

    /// Cached events (series and singletons).
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// client-go `finishSeries`, run every [`FINISH_TIME`]: a series last observed more than
    /// [`FINISH_TIME`] before `now` gets one final write (no retries) and leaves the cache unless
    /// that write failed with a retryable error; a singleton whose `eventTime` is that old
    /// leaves without a call.
    pub async fn finish_series(&mut self, sink: &dyn EventSink, now: Time) {
        let horizon = now - FINISH_TIME;
        let mut finished = Vec::new();
        for (key, event) in &mut self.events {
            let done = match &event.series {
                // A final write; the series stays only if that write may still succeed later.
                Some(series) if series.last_observed_time.is_none_or(|t| t < horizon) => {
                    !attempt(sink, event).await.is_err_and(|e| is_retryable(&e, true))
                }
                Some(_) => false,
                None => event.event_time.is_none_or(|t| t < horizon),
            };
            if done {
                finished.push(key.clone());
            }
        }
        for key in finished {
            self.events.remove(&key);
        }
    }

    /// client-go `refreshExistingEventSeries`, run every [`REFRESH_TIME`]: writes every cached
    /// series once (no retries); where the write succeeds, the server's copy replaces the
    /// cached event. Failed writes leave the entry as it was.
    pub async fn refresh_existing_series(&mut self, sink: &dyn EventSink) {
        for event in self.events.values_mut() {
            if event.series.is_some()
                && let Ok((Stored::Copy(server_event), _)) = attempt(sink, event).await
            {
                *event = *server_event;
            }
        }
    }
}

/// The strategic-merge patch of a series event (client-go `createPatchBytesForSeries`: the
/// two-way diff of the event without and with its series), e.g.
/// `{"series":{"count":2,"lastObservedTime":"2025-01-01T00:00:03.000000Z"}}`.
pub fn series_patch(event: &Event) -> Vec<u8> {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Series {
        count: i32,
        last_observed_time: Option<String>,
    }
    #[derive(Serialize)]
    struct Patch {
        series: Option<Series>,
    }
    let series = event
        .series
        .as_ref()
        .map(|s| Series { count: s.count, last_observed_time: s.last_observed_time.as_ref().map(format_micro_time) });
    serde_json::to_vec(&Patch { series }).expect("a count and a time always serialise")
}

/// Whether client-go's events.k8s.io `recordEvent` tries again after `error`: as `tools/record`,
/// and `AlreadyExists` too when the event is a series.
fn is_retryable(error: &SinkError, series: bool) -> bool {
    match error {
        SinkError::Status(s) if series => s.reason == crate::sink::REASON_ALREADY_EXISTS,
        _ => error.is_retryable(),
    }
}

/// One attempt (client-go events.k8s.io `recordEvent`): patch a series (create when it is gone,
/// with `resourceVersion` cleared on `event` itself, as client-go), create anything else.
async fn attempt(sink: &dyn EventSink, event: &mut Event) -> Result<(Stored, Verb), SinkError> {
    let series = event.series.is_some();
    let patch = if series { series_patch(event) } else { Vec::new() };
    record_event(sink, event, SinkPatch::Bytes(&patch), series).await
}

/// client-go events.k8s.io `attemptRecording`: writes `event` (a [`SeriesDecision`]'s event) to
/// `sink`, retrying retryable failures up to `policy.max_tries` attempts with pauses of
/// `policy.sleep_duration × (1 + 0.25 × jitter)`, until `cancel`. The server's copy is not fed
/// back into the cache (client-go keeps server-side changes out of its aggregation).
pub async fn record_series_event(
    sink: &dyn EventSink,
    mut event: Event,
    policy: &RetryPolicy,
    cancel: &CancellationToken,
) -> WriteOutcome {
    let series = event.series.is_some();
    let mut tries = Tries::new(policy);
    loop {
        let error = match attempt(sink, &mut event).await {
            Ok((_, verb)) => return tries.written(verb),
            Err(error) => error,
        };
        let retryable = is_retryable(&error, series);
        let pause = |_| policy.sleep_duration.mul_f64(1.0 + RETRY_JITTER_FACTOR * (policy.jitter)().clamp(0.0, 1.0));
        if let Some(outcome) = tries.after_failure(&event, error, retryable, pause, cancel).await {
            return outcome;
        }
    }
}

/// An events.k8s.io sink that records as client-go's `tools/events` broadcaster does, for the
/// tenant router: each written result is observed in one isomorphic-event cache
/// ([`EventSeriesCache::observe`], at `clock.now()`) and then created, series-patched (with
/// [`record_series_event`]'s retries) or only counted ([`WriteOutcome::SeriesCounted`]). A
/// task started with the sink runs [`EventSeriesCache::finish_series`] every [`FINISH_TIME`]
/// and [`EventSeriesCache::refresh_existing_series`] every [`REFRESH_TIME`] while the sink
/// lives; [`SeriesSink::finish_all`] gives every open series its final patch at the end of a
/// run (client-go loses what was counted since the last patch when its process exits).
///
/// The correlator's patch (for core/v1) is not used; its skip is (a spam-filtered event is
/// not recorded).
pub struct SeriesSink {
    /// The events.k8s.io API (create, patch).
    inner: Arc<dyn EventSink>,
    /// Locked across the finish and refresh writes, as client-go holds its cache mutex.
    cache: tokio::sync::Mutex<EventSeriesCache>,
    clock: SharedClock,
}

impl std::fmt::Debug for SeriesSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeriesSink").finish_non_exhaustive()
    }
}

impl SeriesSink {
    /// The sink over `inner` (an events.k8s.io API sink), with its finish / refresh task
    /// spawned on the current tokio runtime (it ends once the sink is dropped).
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn start(inner: Arc<dyn EventSink>, clock: SharedClock) -> Arc<Self> {
        let sink = Arc::new(Self { inner, cache: tokio::sync::Mutex::new(EventSeriesCache::new()), clock });
        tokio::spawn(Self::timers(Arc::downgrade(&sink)));
        sink
    }

    async fn timers(sink: Weak<Self>) {
        let start = tokio::time::Instant::now();
        let mut finish = tokio::time::interval_at(start + FINISH_TIME, FINISH_TIME);
        let mut refresh = tokio::time::interval_at(start + REFRESH_TIME, REFRESH_TIME);
        finish.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let finishing = tokio::select! {
                _ = finish.tick() => true,
                _ = refresh.tick() => false,
            };
            let Some(sink) = sink.upgrade() else { return };
            let mut cache = sink.cache.lock().await;
            if finishing {
                cache.finish_series(&*sink.inner, sink.clock.now()).await;
            } else {
                cache.refresh_existing_series(&*sink.inner).await;
            }
        }
    }

    /// Writes every open series once more (no retries) and empties the cache: the end of a run.
    pub async fn finish_all(&self) {
        let mut cache = self.cache.lock().await;
        cache.refresh_existing_series(&*self.inner).await;
        *cache = EventSeriesCache::new();
    }

    /// Events cached now (series and singletons).
    pub async fn cached(&self) -> usize {
        self.cache.lock().await.len()
    }
}

#[async_trait]
impl EventSink for SeriesSink {
    async fn create(&self, event: &Event) -> Result<Stored, SinkError> {
        self.inner.create(event).await
    }

    async fn update(&self, event: &Event) -> Result<Stored, SinkError> {
        self.inner.update(event).await
    }

    async fn patch(&self, event: &Event, patch: &[u8]) -> Result<Stored, SinkError> {
        self.inner.patch(event, patch).await
    }

    async fn patch_observed(&self, event: &Event, patch: SinkPatch<'_>) -> Result<Stored, SinkError> {
        self.inner.patch_observed(event, patch).await
    }

    /// Observes the event in the series cache and writes what that decides (see the type's
    /// docs). Nothing is returned for `update_state`: the server's series copy is not the
    /// correlator's core/v1 event.
    async fn write(
        &self,
        result: EventCorrelateResult,
        policy: &RetryPolicy,
        cancel: &CancellationToken,
    ) -> (WriteOutcome, Option<StoredEvent>) {
        let EventCorrelateResult { skip, event, .. } = result;
        let Some(event) = event.filter(|_| !skip) else {
            return (WriteOutcome::Skipped, None);
        };
        let decision = self.cache.lock().await.observe(*event, self.clock.now());
        match decision {
            SeriesDecision::Create(event) | SeriesDecision::Patch(event) => {
                (record_series_event(&*self.inner, event, policy, cancel).await, None)
            }
            SeriesDecision::Counted => (WriteOutcome::SeriesCounted, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::event::ObjectMeta;

    /// Records every call; answers each with the event it was given.
    #[derive(Default)]
    struct Recording(std::sync::Mutex<Vec<(&'static str, String, Vec<u8>)>>);

    #[async_trait]
    impl EventSink for Recording {
        async fn create(&self, event: &Event) -> Result<Stored, SinkError> {
            self.0.lock().unwrap().push(("create", event.metadata.name.to_string(), Vec::new()));
            Ok(Stored::AsSent)
        }
        async fn update(&self, _event: &Event) -> Result<Stored, SinkError> {
            Ok(Stored::AsSent)
        }
        async fn patch(&self, event: &Event, patch: &[u8]) -> Result<Stored, SinkError> {
            self.0.lock().unwrap().push(("patch", event.metadata.name.to_string(), patch.to_vec()));
            Ok(Stored::AsSent)
        }
    }

    fn result(name: &str) -> EventCorrelateResult {
        let event = Event {
            metadata: ObjectMeta { name: name.into(), namespace: "ns".into(), ..ObjectMeta::default() },
            involved_object: ObjectReference { kind: "Pod".into(), name: "p".into(), ..ObjectReference::default() },
            reason: "BackOff".into(),
            type_: "Warning".into(),
            ..Event::default()
        };
        EventCorrelateResult { skip: false, event: Some(Box::new(event)), patch: None }
    }

    #[tokio::test(start_paused = true)]
    async fn a_series_is_finished_six_minutes_after_its_last_occurrence() {
        let inner = Arc::new(Recording::default());
        let clock = ManualClock::new("2025-01-01T00:00:00Z".parse().unwrap());
        let sink = SeriesSink::start(inner.clone(), clock.clone());
        let (policy, cancel) = (RetryPolicy::default(), CancellationToken::new());
        let mut outcomes = Vec::new();
        for name in ["p.1", "p.2", "p.3"] {
            outcomes.push(sink.write(result(name), &policy, &cancel).await.0);
        }
        assert!(matches!(outcomes[0], WriteOutcome::Written { verb: Verb::Create, .. }), "{outcomes:?}");
        assert!(matches!(outcomes[1], WriteOutcome::Written { verb: Verb::Patch, .. }), "{outcomes:?}");
        assert_eq!(outcomes[2], WriteOutcome::SeriesCounted);
        let skipped = EventCorrelateResult { skip: true, ..result("p.4") };
        assert_eq!(sink.write(skipped, &policy, &cancel).await.0, WriteOutcome::Skipped);
        assert_eq!(inner.0.lock().unwrap().len(), 2, "the third occurrence is only counted");

        // The first finish tick: the series was observed less than FINISH_TIME ago, it stays.
        tokio::time::sleep(FINISH_TIME + Duration::from_secs(1)).await;
        let calls = inner.0.lock().unwrap().len();
        assert_eq!((calls, sink.cached().await), (2, 1));
        // Past FINISH_TIME since the last occurrence: the final patch carries count 3, and the
        // series leaves the cache.
        clock.advance(FINISH_TIME + Duration::from_secs(2));
        tokio::time::sleep(FINISH_TIME).await;
        let calls = inner.0.lock().unwrap().clone();
        assert_eq!(calls.len(), 3, "{calls:?}");
        let (verb, name, patch) = &calls[2];
        assert_eq!((*verb, name.as_str()), ("patch", "p.1"), "the cached first event is patched");
        let patch: serde_json::Value = serde_json::from_slice(patch).unwrap();
        assert_eq!(patch["series"]["count"], 3);
        assert_eq!(sink.cached().await, 0);
    }

    #[tokio::test]
    async fn finish_all_sends_every_open_series_once() {
        let inner = Arc::new(Recording::default());
        let sink = SeriesSink::start(inner.clone(), crate::clock::system());
        let (policy, cancel) = (RetryPolicy::default(), CancellationToken::new());
        for name in ["p.1", "p.2", "p.3", "p.4"] {
            sink.write(result(name), &policy, &cancel).await;
        }
        sink.finish_all().await;
        let calls = inner.0.lock().unwrap().clone();
        assert_eq!(calls.iter().map(|c| c.0).collect::<Vec<_>>(), ["create", "patch", "patch"]);
        let last: serde_json::Value = serde_json::from_slice(&calls[2].2).unwrap();
        assert_eq!(last["series"]["count"], 4);
        assert_eq!(sink.cached().await, 0);
    }
}
