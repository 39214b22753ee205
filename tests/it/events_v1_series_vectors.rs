//! The `events_v1_series` scenarios (client-go `tools/events` `TestEventSeriesf`,
//! `TestFinishSeries`, `TestRefreshExistingEventSeries`): isomorphic events become a series,
//! and the finish and refresh passes, driven through [`EventSeriesCache`] and
//! [`record_series_event`] with a recording sink.

use std::sync::Mutex;

use async_trait::async_trait;
use chrono::SubsecRound;
use eventpipe::event::{Event, ObjectReference, Time};
use eventpipe::record::series::{
    EventSeriesCache, IsomorphicKey, SeriesDecision, SeriesEventSource, record_series_event,
};
use eventpipe::sink::{EventSink, RetryPolicy, SinkError, Stored, WriteOutcome};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::common;

/// One sink call: the verb, the event's reporting controller and name, and the patch body.
#[derive(Debug, Clone, PartialEq)]
struct Call {
    verb: &'static str,
    controller: String,
    name: String,
    patch: Option<Value>,
}

/// Records every call; patches fail with `patch_error` when set.
#[derive(Default)]
struct RecordingSink {
    calls: Mutex<Vec<Call>>,
    patch_error: Option<SinkError>,
}

impl RecordingSink {
    fn take(&self) -> Vec<Call> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }

    fn record(&self, verb: &'static str, event: &Event, patch: Option<&[u8]>) {
        self.calls.lock().unwrap().push(Call {
            verb,
            controller: event.reporting_component.to_string(),
            name: event.metadata.name.to_string(),
            patch: patch.map(|p| serde_json::from_slice(p).expect("the patch is JSON")),
        });
    }
}

#[async_trait]
impl EventSink for RecordingSink {
    async fn create(&self, event: &Event) -> Result<Stored, SinkError> {
        self.record("create", event, None);
        Ok(Stored::AsSent)
    }

    async fn update(&self, event: &Event) -> Result<Stored, SinkError> {
        self.record("update", event, None);
        Ok(Stored::AsSent)
    }

    async fn patch(&self, event: &Event, patch: &[u8]) -> Result<Stored, SinkError> {
        self.record("patch", event, Some(patch));
        match &self.patch_error {
            Some(e) => Err(e.clone()),
            None => Ok(Stored::AsSent),
        }
    }
}

fn now() -> Time {
    "2025-03-01T12:00:00.123456789Z".parse().unwrap()
}

fn minutes(m: i64) -> chrono::Duration {
    chrono::Duration::minutes(m)
}

fn reference(v: &Value) -> ObjectReference {
    serde_json::from_value(v.clone()).expect("an ObjectReference")
}

/// Whether `s` is a metav1.MicroTime on the wire: RFC 3339, six decimals, UTC.
fn is_rfc3339_micro(s: &str) -> bool {
    s.len() == 27 && s.ends_with('Z') && s.as_bytes()[19] == b'.' && chrono::DateTime::parse_from_rfc3339(s).is_ok()
}

#[tokio::test(start_paused = true)]
async fn isomorphic_events_become_one_series() {
    let scenario =
        &common::scenarios("events_v1_series").into_iter().find(|s| s["name"] == "TestEventSeriesf").unwrap();
    let options = &scenario["options"];
    let source = SeriesEventSource {
        reporting_controller: options["reportingController"].as_str().unwrap().into(),
        reporting_instance: options["reportingInstance"].as_str().unwrap().into(),
    };
    let sink = RecordingSink::default();
    let mut cache = EventSeriesCache::new();
    let first = scenario["steps"][0]["record"].clone();
    let mut first_key = None;
    for (i, step) in scenario["steps"].as_array().unwrap().iter().enumerate() {
        // Steps after the first describe themselves relative to it.
        let mut record = if step["record"].is_object() { step["record"].clone() } else { first.clone() };
        if step["record"].as_str().is_some_and(|d| d.contains("action \"stopped\"")) {
            record["action"] = "stopped".into();
        }
        let at = now() + chrono::Duration::seconds(i as i64);
        let event = source.make_event(
            &reference(&record["regarding"]),
            Some(&reference(&record["related"])),
            record["type"].as_str().unwrap(),
            record["reason"].as_str().unwrap(),
            record["action"].as_str().unwrap(),
            record["note"].as_str().unwrap().to_string(),
            at,
        );
        assert_eq!(event.event_time, Some(at), "step {i}: eventTime is the recording time");
        assert!(event.metadata.name.starts_with("foo."), "step {i}: {}", event.metadata.name);
        first_key.get_or_insert_with(|| IsomorphicKey::of(&event));
        let to_send = match cache.observe(event, at) {
            SeriesDecision::Create(e) | SeriesDecision::Patch(e) => Some(e),
            SeriesDecision::Counted => None,
        };
        if let Some(e) = &to_send {
            let outcome =
                record_series_event(&sink, e.clone(), &RetryPolicy::default(), &CancellationToken::new()).await;
            assert!(matches!(outcome, WriteOutcome::Written { attempts: 1, .. }), "step {i}: {outcome:?}");
        }
        let calls = sink.take();
        let expect = &step["expect"];
        match expect["sink_call"].as_str() {
            None => assert!(calls.is_empty(), "step {i}: no call expected, got {calls:?}"),
            Some(verb) => {
                assert_eq!(calls.iter().map(|c| c.verb).collect::<Vec<_>>(), [verb], "step {i}");
                let sent = to_send.as_ref().unwrap();
                if expect.get("series").is_some_and(Value::is_null) {
                    assert_eq!(sent.series, None, "step {i}");
                }
                if let Some(count) = expect["series_count"].as_i64() {
                    assert_eq!(sent.series.as_ref().map(|s| i64::from(s.count)), Some(count), "step {i}");
                    let prefix = expect["name_prefix"].as_str().unwrap();
                    assert!(calls[0].name.starts_with(prefix), "step {i}: patched {}", calls[0].name);
                    assert!(sent.event_time.is_some(), "step {i}: eventTime set");
                    // The patch: exactly {"series":{"count":N,"lastObservedTime":"<RFC3339Micro>"}}.
                    let patch = calls[0].patch.as_ref().unwrap();
                    let shape = &step["expect_derived"]["patch_shape"]["series"];
                    assert_eq!(patch.as_object().unwrap().len(), 1, "step {i}: {patch}");
                    assert_eq!(patch["series"]["count"], shape["count"], "step {i}");
                    let observed = patch["series"]["lastObservedTime"].as_str().unwrap();
                    assert!(is_rfc3339_micro(observed), "step {i}: {observed}");
                    assert_eq!(observed.parse::<Time>().unwrap().timestamp_micros(), at.timestamp_micros());
                }
            }
        }
        if let Some(count) = expect["cached_series_count"].as_i64() {
            let cached = cache.get(first_key.as_ref().unwrap()).unwrap();
            assert_eq!(cached.series.as_ref().map(|s| i64::from(s.count)), Some(count), "step {i}");
            assert_eq!(cached.series.as_ref().unwrap().last_observed_time, Some(at), "step {i}");
        }
    }
}

/// The event of a vector's cache entry: reported by `controller` (the entry's
/// `reportingController`, or its id), about Pod baz/foo, made at `at`. Entries with different
/// controllers are not isomorphic; the note does not matter.
fn entry_event(controller: &str, at: Time) -> Event {
    let regarding =
        ObjectReference { kind: "Pod".into(), namespace: "baz".into(), name: "foo".into(), ..Default::default() };
    SeriesEventSource { reporting_controller: controller.into(), reporting_instance: "eventTest-host".into() }
        .make_event(&regarding, None, "Normal", "test", "started", "note".into(), at)
}

/// A cache holding what a vector's `cache` lists, built through `observe` as client-go's would
/// be: a series entry is its event observed `count` times, last at `lastObservedTime`.
fn cache_of(entries: &Value) -> EventSeriesCache {
    let at = |v: &Value| match v.as_str().unwrap() {
        "now" => now(),
        "now-9m" => now() - minutes(9),
        other => panic!("unknown instant {other}"),
    };
    let mut cache = EventSeriesCache::new();
    for entry in entries.as_array().unwrap() {
        let controller = entry["reportingController"].as_str().or(entry["id"].as_str()).unwrap();
        let created = entry.get("eventTime").map_or(now() - minutes(10), at);
        let event = entry_event(controller, created);
        let observations = entry["series"]["count"].as_i64().unwrap_or(1);
        let last = entry["series"].get("lastObservedTime").map_or(created, at);
        for _ in 0..observations {
            cache.observe(event.clone(), last);
        }
    }
    cache
}

#[tokio::test]
async fn finish_series_closes_old_series_and_keeps_fresh_singletons() {
    let scenario =
        &common::scenarios("events_v1_series").into_iter().find(|s| s["name"] == "TestFinishSeries").unwrap();
    assert_eq!(scenario["options"]["finishTime"], "6m");
    for step in scenario["steps"].as_array().unwrap() {
        assert_eq!(step["op"], "finishSeries");
        let mut cache = cache_of(&step["cache"]);
        let sink = RecordingSink::default();
        cache.finish_series(&sink, now()).await;
        let calls = sink.take();
        let expected = step["expect"]["sink_calls"].as_array().unwrap();
        assert_eq!(calls.len(), expected.len(), "{calls:?}");
        for (call, want) in calls.iter().zip(expected) {
            assert_eq!(call.verb, want["call"].as_str().unwrap());
            assert_eq!(call.controller, want["id"].as_str().unwrap());
            // The final patch keeps the last observation (9 minutes ago).
            let observed = call.patch.as_ref().unwrap()["series"]["lastObservedTime"].as_str().unwrap();
            assert_eq!(observed.parse::<Time>().unwrap(), (now() - minutes(9)).trunc_subsecs(6));
        }
        assert_eq!(cache.len() as u64, step["expect"]["cache_size_after"].as_u64().unwrap());
        for kept in step["expect_derived"]["cache_keeps"].as_array().unwrap() {
            let entry = step["cache"].as_array().unwrap().iter().find(|e| e["id"] == *kept).unwrap();
            let controller = entry["reportingController"].as_str().or(kept.as_str()).unwrap();
            assert!(contains_controller(&cache, controller), "{kept} should stay cached");
        }
    }
}

fn contains_controller(cache: &EventSeriesCache, controller: &str) -> bool {
    cache.get(&IsomorphicKey::of(&entry_event(controller, now()))).is_some()
}

#[tokio::test]
async fn refresh_patches_every_series_and_keeps_it_even_when_the_patch_fails() {
    let scenario = &common::scenarios("events_v1_series")
        .into_iter()
        .find(|s| s["name"] == "TestRefreshExistingEventSeries")
        .unwrap();
    assert_eq!(scenario["options"]["refreshTime"], "30m");
    for step in scenario["steps"].as_array().unwrap() {
        assert_eq!(step["op"], "refreshExistingEventSeries");
        let mut cache = cache_of(&step["cache"]);
        let patch_error = match step["sink"]["patch"].as_str().unwrap() {
            "RequestConstructionError" => Some(SinkError::RequestConstruction("bad request".into())),
            _ => None,
        };
        let sink = RecordingSink { patch_error, ..RecordingSink::default() };
        cache.refresh_existing_series(&sink).await;
        let calls = sink.take();
        let expected = step["expect"]["sink_calls"].as_array().unwrap();
        assert_eq!(
            calls.iter().map(|c| c.verb).collect::<Vec<_>>(),
            expected.iter().map(|c| c["call"].as_str().unwrap()).collect::<Vec<_>>()
        );
        assert_eq!(cache.len() as u64, step["expect"]["cache_size_after"].as_u64().unwrap());
        assert_eq!(contains_controller(&cache, "series"), step["expect"]["cache_entry_present"] == true);
    }
}

#[tokio::test(start_paused = true)]
async fn a_series_patch_that_hits_already_exists_is_retried() {
    // client-go retries AlreadyExists for a series (and drops it for a single event).
    let sink = RecordingSink {
        patch_error: Some(SinkError::Status(eventpipe::sink::StatusError {
            code: 409,
            reason: eventpipe::sink::REASON_ALREADY_EXISTS.into(),
            ..Default::default()
        })),
        ..RecordingSink::default()
    };
    let mut cache = EventSeriesCache::new();
    let source = SeriesEventSource { reporting_controller: "c".into(), reporting_instance: "c-host".into() };
    let regarding = ObjectReference { name: "foo".into(), ..Default::default() };
    let event = source.make_event(&regarding, None, "Normal", "r", "a", "n".into(), now());
    cache.observe(event.clone(), now());
    let SeriesDecision::Patch(series) = cache.observe(event, now()) else { panic!("the second event starts a series") };
    let policy = RetryPolicy { jitter: std::sync::Arc::new(|| 0.5), ..RetryPolicy::default() };
    let started = tokio::time::Instant::now();
    let outcome = record_series_event(&sink, series, &policy, &CancellationToken::new()).await;
    assert!(matches!(outcome, WriteOutcome::GaveUp { attempts: 12, .. }), "{outcome:?}");
    assert_eq!(sink.take().len(), 12);
    // Eleven pauses of Jitter(10 s, 0.25) at jitter 0.5: 11 × 11.25 s.
    assert_eq!(started.elapsed(), std::time::Duration::from_millis(11 * 11_250));
}

/// The wall clock of a paused tokio runtime: `start` plus the tokio time elapsed since made.
#[derive(Debug)]
struct TokioClock {
    start: Time,
    base: tokio::time::Instant,
}

impl eventpipe::clock::Clock for TokioClock {
    fn now(&self) -> Time {
        self.start + chrono::Duration::from_std(self.base.elapsed()).unwrap()
    }
}

#[tokio::test(start_paused = true)]
async fn the_series_watcher_creates_patches_counts_then_closes_an_idle_series() {
    use eventpipe::broadcaster::{Broadcaster, FullChannelBehavior, WatchEventType};
    use eventpipe::record::series::start_recording_series_to_sink;
    use std::sync::Arc;
    use std::time::Duration;

    let broadcaster = Broadcaster::new_long_queue(100, FullChannelBehavior::WaitIfChannelFull);
    let sink = Arc::new(RecordingSink::default());
    let clock = Arc::new(TokioClock { start: now(), base: tokio::time::Instant::now() });
    let cancel = CancellationToken::new();
    let task = start_recording_series_to_sink(
        &broadcaster,
        sink.clone(),
        RetryPolicy::default(),
        clock.clone(),
        cancel.clone(),
    )
    .unwrap();
    let source = SeriesEventSource { reporting_controller: "c".into(), reporting_instance: "c-host".into() };
    let regarding =
        ObjectReference { kind: "Pod".into(), namespace: "ns".into(), name: "foo".into(), ..Default::default() };
    for i in 0..5 {
        let event = source.make_event(&regarding, None, "Normal", "BackOff", "Restart", format!("try {i}"), now());
        broadcaster.action(WatchEventType::Added, eventpipe::event::shared(event)).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let calls = sink.take();
    assert_eq!(calls.iter().map(|c| c.verb).collect::<Vec<_>>(), ["create", "patch"]);
    assert_eq!(calls[1].patch.as_ref().unwrap()["series"]["count"], 2);
    // The finish pass at 6 minutes finds the series observed exactly 6 minutes ago: not idle
    // for more than 6 minutes yet. The pass at 12 minutes closes it with a final patch.
    tokio::time::sleep(Duration::from_secs(6 * 60)).await;
    assert_eq!(sink.take(), []);
    tokio::time::sleep(Duration::from_secs(6 * 60)).await;
    let calls = sink.take();
    assert_eq!(calls.iter().map(|c| c.verb).collect::<Vec<_>>(), ["patch"]);
    assert_eq!(calls[0].patch.as_ref().unwrap()["series"]["count"], 5);
    cancel.cancel();
    let stats = task.await.unwrap();
    assert_eq!((stats.received, stats.counted, stats.writes.created, stats.writes.patched), (5, 3, 1, 1));
}
