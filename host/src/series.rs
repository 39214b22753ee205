//! EventSeries: how client-go's events.k8s.io/v1 recorder (`tools/events`, spec §5) counts
//! repeats. Where `tools/record` correlates (aggregation, count, spam filter), `tools/events`
//! keeps one cache per broadcaster, keyed by an [`IsomorphicKey`] that leaves the note out:
//!
//! - the first event of a key is created;
//! - the second starts a series on the *cached* event (`series = {count: 2, lastObservedTime:
//!   now}`) and patches it;
//! - later ones only bump the cached series; the server hears of them through
//!   [`EventSeriesCache::refresh_existing_series`] (every [`REFRESH_TIME`]) and
//!   [`EventSeriesCache::finish_series`] (every [`FINISH_TIME`]).
//!
//! Events are core/v1-shaped [`Event`]s carrying the events.k8s.io fields: `involved_object` is
//! `regarding`, `message` the note, `reporting_component` the reportingController.
//!
//! Writes go through [`record_series_event`], client-go's `attemptRecording`: a patch for a series
//! (create when it is gone), a create otherwise, retried like `tools/record` except that
//! `AlreadyExists` on a series is retried too, and every pause is `Jitter(10 s, 0.25)`.
//! [`start_recording_series_to_sink`] puts it together as a Broadcaster watcher, client-go's
//! events.k8s.io `StartRecordingToSink`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use crate::broadcaster::{Broadcaster, BroadcasterError};
use crate::clock::SharedClock;
use crate::event::{Event, EventSeries, ObjectMeta, ObjectReference, Time, format_micro_time};
use crate::recorder::generate_event_name;
use crate::sink::SinkStats;
use crate::sink::retry::{Tries, Verb, record_event};
use crate::sink::{EventSink, RetryPolicy, SinkError, WriteOutcome};

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
    pub type_: String,
    /// `action`.
    pub action: String,
    /// `reason`.
    pub reason: String,
    /// `reportingController`.
    pub reporting_controller: String,
    /// `reportingInstance`.
    pub reporting_instance: String,
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
            related: event.related.clone().unwrap_or_default(),
        }
    }
}

/// What the reporting controller puts in every event it records (client-go `NewRecorder`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeriesEventSource {
    /// `reportingController`, e.g. `"kubernetes.io/kubelet"`.
    pub reporting_controller: String,
    /// `reportingInstance`; client-go sets `<controller>-<hostname>`.
    pub reporting_instance: String,
}

impl SeriesEventSource {
    /// The event client-go's events.k8s.io recorder (`recorderImpl.makeEvent`) makes at `now`:
    /// name from `regarding.name` and `now`, namespace `regarding.namespace` or `default`,
    /// `eventTime = now`, no series, count, source or first/last timestamps.
    #[allow(clippy::too_many_arguments, reason = "client-go Eventf's own parameter list")]
    pub fn make_event(
        &self,
        regarding: &ObjectReference,
        related: Option<&ObjectReference>,
        type_: &str,
        reason: &str,
        action: &str,
        note: String,
        now: Time,
    ) -> Event {
        let namespace = if regarding.namespace.is_empty() { "default" } else { &regarding.namespace };
        Event {
            metadata: ObjectMeta {
                name: generate_event_name(&regarding.name, crate::clock::to_unix_nanos(now)),
                namespace: namespace.to_string(),
                ..ObjectMeta::default()
            },
            involved_object: regarding.clone(),
            related: related.cloned(),
            type_: type_.to_string(),
            reason: reason.to_string(),
            action: action.to_string(),
            message: note,
            event_time: Some(now),
            reporting_component: self.reporting_controller.clone(),
            reporting_instance: self.reporting_instance.clone(),
            ..Event::default()
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
                cached.series = Some(EventSeries { count: 2, last_observed_time: Some(now) });
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
                && let Ok((server_event, _)) = attempt(sink, event).await
            {
                *event = server_event;
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
async fn attempt(sink: &dyn EventSink, event: &mut Event) -> Result<(Event, Verb), SinkError> {
    let series = event.series.is_some();
    let patch = if series { series_patch(event) } else { Vec::new() };
    record_event(sink, event, &patch, series).await
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

/// What a series watcher ([`start_recording_series_to_sink`]) did, returned when its task ends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SeriesStats {
    /// Events received from the Broadcaster.
    pub received: u64,
    /// Events only counted in a cached series (nothing sent for them then).
    pub counted: u64,
    /// How the creates and series patches of received events ended (`skipped` stays 0).
    pub writes: SinkStats,
}

/// client-go events.k8s.io `StartRecordingToSinkWithContext`: a watcher on `broadcaster` whose
/// task keeps the isomorphic-event cache. Each event is observed at `clock.now()` in arrival
/// order; what it needs sent is written by a task of its own (client-go: a goroutine per event)
/// with [`record_series_event`]. Every [`FINISH_TIME`] the task runs
/// [`EventSeriesCache::finish_series`], every [`REFRESH_TIME`]
/// [`EventSeriesCache::refresh_existing_series`] (both at once on start, as `wait.Until`); events
/// wait meanwhile, as they wait for client-go's cache mutex. The task ends when the watcher
/// closes or `cancel` fires (pending retries are cancelled too) and returns its [`SeriesStats`].
///
/// # Errors
/// [`BroadcasterError::Stopped`] after the Broadcaster shut down.
pub fn start_recording_series_to_sink(
    broadcaster: &Broadcaster<Event>,
    sink: Arc<dyn EventSink>,
    policy: RetryPolicy,
    clock: SharedClock,
    cancel: CancellationToken,
) -> Result<JoinHandle<SeriesStats>, BroadcasterError> {
    let mut watcher = broadcaster.watch()?;
    Ok(tokio::spawn(async move {
        let mut cache = EventSeriesCache::new();
        let mut stats = SeriesStats::default();
        let mut writes = tokio::task::JoinSet::new();
        let mut finish = tokio::time::interval(FINISH_TIME);
        let mut refresh = tokio::time::interval(REFRESH_TIME);
        finish.set_missed_tick_behavior(MissedTickBehavior::Delay);
        refresh.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => break,
                _ = finish.tick() => cache.finish_series(&*sink, clock.now()).await,
                _ = refresh.tick() => cache.refresh_existing_series(&*sink).await,
                Some(done) = writes.join_next(), if !writes.is_empty() => {
                    if let Ok(outcome) = done {
                        stats.writes.count(&outcome);
                    }
                }
                next = watcher.recv() => {
                    let Some(next) = next else { break };
                    stats.received += 1;
                    let event = match cache.observe(next.object, clock.now()) {
                        SeriesDecision::Create(event) | SeriesDecision::Patch(event) => event,
                        SeriesDecision::Counted => {
                            stats.counted += 1;
                            continue;
                        }
                    };
                    let (sink, policy, cancel) = (sink.clone(), policy.clone(), cancel.clone());
                    writes.spawn(async move { record_series_event(&*sink, event, &policy, &cancel).await });
                }
            }
        }
        watcher.stop();
        while let Some(done) = writes.join_next().await {
            if let Ok(outcome) = done {
                stats.writes.count(&outcome);
            }
        }
        stats
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(note: &str) -> Event {
        let source = SeriesEventSource { reporting_controller: "c".into(), reporting_instance: "c-h".into() };
        let regarding = ObjectReference { kind: "Pod".into(), name: "p".into(), ..ObjectReference::default() };
        source.make_event(&regarding, None, "Normal", "R", "A", note.into(), "2025-01-01T00:00:00Z".parse().unwrap())
    }

    #[test]
    fn the_key_ignores_the_note_but_not_related_or_action() {
        assert_eq!(IsomorphicKey::of(&event("one")), IsomorphicKey::of(&event("two")));
        let mut other = event("one");
        other.related = Some(ObjectReference { name: "q".into(), ..ObjectReference::default() });
        assert_ne!(IsomorphicKey::of(&event("one")), IsomorphicKey::of(&other));
        other = event("one");
        other.action = "B".into();
        assert_ne!(IsomorphicKey::of(&event("one")), IsomorphicKey::of(&other));
        assert_eq!(event("one").metadata.namespace, "default", "an object without namespace → default");
    }

    #[test]
    fn series_patch_is_the_series_alone_with_microseconds() {
        let mut e = event("n");
        e.series = Some(EventSeries { count: 3, last_observed_time: Some("2025-01-01T00:00:03.7Z".parse().unwrap()) });
        assert_eq!(
            String::from_utf8(series_patch(&e)).unwrap(),
            r#"{"series":{"count":3,"lastObservedTime":"2025-01-01T00:00:03.700000Z"}}"#
        );
    }
}
