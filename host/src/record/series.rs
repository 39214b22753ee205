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

use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use crate::broadcaster::{Broadcaster, BroadcasterError};
use crate::clock::SharedClock;
use crate::event::generate_event_name;
use crate::event::{Event, ObjectMeta, ObjectReference, SharedEvent, Time};
use crate::sink::SinkStats;
use crate::sink::{EventSink, RetryPolicy};

pub use crate::sink::series::{
    EventSeriesCache, FINISH_TIME, IsomorphicKey, REFRESH_TIME, RETRY_JITTER_FACTOR, SeriesDecision, SeriesSink,
    record_series_event, series_patch,
};

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
                name: generate_event_name(&regarding.name, crate::clock::go_unix_nano(now)).into(),
                namespace: namespace.into(),
                ..ObjectMeta::default()
            },
            involved_object: regarding.clone(),
            related: related.cloned().map(Box::new),
            type_: type_.into(),
            reason: reason.into(),
            action: action.into(),
            message: note.into(),
            event_time: Some(now),
            reporting_component: self.reporting_controller.as_str().into(),
            reporting_instance: self.reporting_instance.as_str().into(),
            ..Event::default()
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
    broadcaster: &Broadcaster<SharedEvent>,
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
                    let event = match cache.observe(*std::sync::Arc::unwrap_or_clone(next.object), clock.now()) {
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
    use crate::event::EventSeries;

    fn event(note: &str) -> Event {
        let source = SeriesEventSource { reporting_controller: "c".into(), reporting_instance: "c-h".into() };
        let regarding = ObjectReference { kind: "Pod".into(), name: "p".into(), ..ObjectReference::default() };
        source.make_event(&regarding, None, "Normal", "R", "A", note.into(), "2025-01-01T00:00:00Z".parse().unwrap())
    }

    #[test]
    fn the_key_ignores_the_note_but_not_related_or_action() {
        assert_eq!(IsomorphicKey::of(&event("one")), IsomorphicKey::of(&event("two")));
        let mut other = event("one");
        other.related = Some(Box::new(ObjectReference { name: "q".into(), ..ObjectReference::default() }));
        assert_ne!(IsomorphicKey::of(&event("one")), IsomorphicKey::of(&other));
        other = event("one");
        other.action = "B".into();
        assert_ne!(IsomorphicKey::of(&event("one")), IsomorphicKey::of(&other));
        assert_eq!(event("one").metadata.namespace, "default", "an object without namespace → default");
    }

    #[test]
    fn series_patch_is_the_series_alone_with_microseconds() {
        let mut e = event("n");
        e.series = Some(Box::new(EventSeries {
            count: 3,
            last_observed_time: Some("2025-01-01T00:00:03.7Z".parse().unwrap()),
        }));
        assert_eq!(
            String::from_utf8(series_patch(&e)).unwrap(),
            r#"{"series":{"count":3,"lastObservedTime":"2025-01-01T00:00:03.700000Z"}}"#
        );
    }
}
