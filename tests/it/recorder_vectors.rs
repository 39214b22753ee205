//! The `recorder`, `recorder_load` and `event_name` scenarios: EventRecorder → Broadcaster →
//! StartRecordingToSink (EventCorrelator + recordToSink) → a sink that behaves like client-go's
//! test sink (create stores by `getEventKey` and echoes; patch merges into the stored event).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use eventpipe::clock::{Clock, ManualClock};
use eventpipe::correlator::CorrelatorOptions;
use eventpipe::correlator::keys::event_key;
use eventpipe::event::{Event, EventSource, ObjectReference, Time};
use eventpipe::record::event_broadcaster::{
    EventBroadcaster, EventBroadcasterOptions, logging_line, structured_logging_fields,
};
use eventpipe::record::recorder::{RecordOutcome, generate_event_name, is_dns1123_subdomain};
use eventpipe::sink::{EventSink, RetryPolicy, SinkError, StatusError, Stored};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::common;

/// One call the sink received: verb, the event sent, the patch body, the sink's answer.
#[derive(Debug)]
struct Call {
    verb: &'static str,
    sent: Event,
    patch: Value,
    stored: Event,
}

/// client-go's `testEventSink` with `OnCreate`/`OnPatch` factories over a shared cache.
struct ServerLikeSink {
    store: Mutex<HashMap<String, Event>>,
    calls: mpsc::UnboundedSender<Call>,
}

#[async_trait]
impl EventSink for ServerLikeSink {
    async fn create(&self, event: &Event) -> Result<Stored, SinkError> {
        self.store.lock().unwrap().insert(event_key(event), event.clone());
        let _ =
            self.calls.send(Call { verb: "create", sent: event.clone(), patch: Value::Null, stored: event.clone() });
        Ok(Stored::copy(event.clone()))
    }

    async fn update(&self, _event: &Event) -> Result<Stored, SinkError> {
        unreachable!("recordToSink never updates")
    }

    async fn patch(&self, event: &Event, patch: &[u8]) -> Result<Stored, SinkError> {
        let patch: Value = serde_json::from_slice(patch).unwrap_or(Value::Null);
        let mut store = self.store.lock().unwrap();
        let Some(stored) = store.get_mut(&event_key(event)) else {
            return Err(SinkError::Status(StatusError {
                code: 404,
                reason: "NotFound".into(),
                ..StatusError::default()
            }));
        };
        let mut merged = serde_json::to_value(&*stored).unwrap();
        for (k, v) in patch.as_object().into_iter().flatten() {
            merged[k] = v.clone();
        }
        *stored = serde_json::from_value(merged).unwrap();
        let _ = self.calls.send(Call { verb: "patch", sent: event.clone(), patch, stored: stored.clone() });
        Ok(Stored::copy(stored.clone()))
    }
}

fn sink() -> (Arc<ServerLikeSink>, mpsc::UnboundedReceiver<Call>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (Arc::new(ServerLikeSink { store: Mutex::default(), calls: tx }), rx)
}

/// Go's `Sprintf` for the `%v` verbs the vectors use.
fn sprintf(format: &str, args: &[Value]) -> String {
    args.iter().fold(format.to_string(), |s, a| {
        let arg = a.as_str().map(str::to_string).unwrap_or_else(|| a.to_string());
        s.replacen("%v", &arg, 1)
    })
}

fn broadcaster() -> EventBroadcaster {
    broadcaster_with(|o| o)
}

fn broadcaster_with(functions: fn(CorrelatorOptions) -> CorrelatorOptions) -> EventBroadcaster {
    EventBroadcaster::new(EventBroadcasterOptions {
        retry: RetryPolicy { sleep_duration: Duration::ZERO, ..RetryPolicy::default() },
        correlator: functions(CorrelatorOptions::default()),
        ..EventBroadcasterOptions::default()
    })
}

fn check_call(ctx: &str, call: &Call, step: &Value) {
    let (expect, derived) = (&step["expect"], &step["expect_derived"]);
    assert_eq!(call.verb, expect["sink_call"], "{ctx}: verb");
    let sent = serde_json::to_value(&call.sent).unwrap();
    assert_eq!(sent["count"], expect["count"], "{ctx}: count");
    let name = call.sent.metadata.name.as_str();
    assert!(name.starts_with(expect["name_prefix"].as_str().unwrap()), "{ctx}: name prefix");
    assert_eq!(name, derived["name"], "{ctx}: name");
    assert_eq!(
        call.sent.first_timestamp == call.sent.last_timestamp,
        expect["first_equals_last"].as_bool().unwrap(),
        "{ctx}: first == last"
    );
    common::json_matches(&expect["event"], &sent, true, "event").unwrap_or_else(|e| panic!("{ctx}: {e}"));
    assert_eq!(call.sent.reporting_component.as_str(), derived["reportingComponent"], "{ctx}: reportingComponent");
    assert_eq!(call.sent.reporting_instance.as_str(), derived["reportingInstance"], "{ctx}: reportingInstance");
    assert_eq!(call.patch, derived["patch"], "{ctx}: patch");
    if let Some(line) = expect["log_StartLogging"].as_str() {
        assert_eq!(logging_line(&call.sent), line, "{ctx}: StartLogging line");
    }
    if let Some(line) = expect["log_StartStructuredLogging"].as_str() {
        // klog's text rendering of the same key/value pairs.
        let pairs: Vec<String> = structured_logging_fields(&call.sent)
            .iter()
            .map(|(k, v)| format!("{k}={}", Value::from(v.as_str())))
            .collect();
        assert_eq!(format!("INFO Event occurred {}\n", pairs.join(" ")), line, "{ctx}: StartStructuredLogging line");
    }
    let stored = serde_json::to_value(&call.stored).unwrap();
    common::json_matches(&derived["server_event_firstTimestamp"], &stored["firstTimestamp"], false, "first").unwrap();
    common::json_matches(&derived["server_event_lastTimestamp"], &stored["lastTimestamp"], false, "last").unwrap();
}

#[tokio::test]
async fn recorder_scenarios_match_client_go() {
    let scenarios = common::scenarios("recorder");
    assert_eq!(scenarios.len(), 3);
    for ((path, functions), scenario) in
        common::correlator_paths().into_iter().flat_map(|p| scenarios.iter().map(move |s| (p, s)))
    {
        let name = &format!("{} [{path}]", scenario["name"].as_str().unwrap());
        let start: Time = scenario["options"]["recorder_clock"]["start"].as_str().unwrap().parse().unwrap();
        let clock = ManualClock::new(start);
        let source: EventSource = serde_json::from_value(scenario["options"]["recorder_source"].clone()).unwrap();
        let events = broadcaster_with(functions);
        let recorder = events.new_recorder(source, clock.clone());
        let (mut current_sink, mut calls) = sink();
        let mut watcher = events.start_recording_to_sink(current_sink.clone()).unwrap();
        for (i, step) in scenario["steps"].as_array().unwrap().iter().enumerate() {
            let ctx = format!("{name} step {i}");
            if step.get("control").is_some() {
                // A fresh sink watcher with a fresh correlator and a fresh server cache.
                watcher.abort();
                (current_sink, calls) = sink();
                watcher = events.start_recording_to_sink(current_sink.clone()).unwrap();
                continue;
            }
            clock.advance(Duration::from_secs(1));
            assert_eq!(clock.now(), step["clock"].as_str().unwrap().parse::<Time>().unwrap(), "{ctx}: clock");
            let record = &step["record"];
            let object: ObjectReference = serde_json::from_value(record["object"].clone()).unwrap();
            let message = sprintf(record["messageFmt"].as_str().unwrap(), record["args"].as_array().unwrap());
            let outcome = recorder.event(
                &object,
                record["eventtype"].as_str().unwrap(),
                record["reason"].as_str().unwrap(),
                &message,
            );
            assert_eq!(outcome, RecordOutcome::Queued, "{ctx}");
            let call = tokio::time::timeout(Duration::from_secs(10), calls.recv()).await.expect("sink call").unwrap();
            check_call(&ctx, &call, step);
        }
        events.shutdown().await;
        let _ = watcher.await;
    }
}

/// client-go `TestLotsOfEvents`: 1000 concurrent events, the sink fails each one's first four
/// creates; all are created and logged, none dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lots_of_events_are_all_written_despite_failures() {
    let scenario = &common::scenarios("recorder_load")[0];
    let step = &scenario["steps"][0];
    let n = step["generate"]["n"].as_u64().unwrap() as usize;
    let fail_first = step["sink"]["create"]["fail_first_n_attempts_per_message"].as_u64().unwrap();

    struct FlakySink(Mutex<HashMap<String, u64>>);
    #[async_trait]
    impl EventSink for FlakySink {
        async fn create(&self, e: &Event) -> Result<Stored, SinkError> {
            let mut attempts = self.0.lock().unwrap();
            let a = attempts.entry(e.message.to_string()).or_default();
            *a += 1;
            if *a <= 4 { Err(SinkError::Transport("fake error".into())) } else { Ok(Stored::AsSent) }
        }
        async fn update(&self, _e: &Event) -> Result<Stored, SinkError> {
            Ok(Stored::AsSent)
        }
        async fn patch(&self, _e: &Event, _: &[u8]) -> Result<Stored, SinkError> {
            Ok(Stored::AsSent)
        }
    }
    assert_eq!(fail_first, 4);
    let events = broadcaster();
    let flaky = Arc::new(FlakySink(Mutex::default()));
    let recording = events.start_recording_to_sink(flaky.clone()).unwrap();
    let logged = Arc::new(Mutex::new(0usize));
    let counter = logged.clone();
    let logging = events.start_event_watcher(move |_| *counter.lock().unwrap() += 1).unwrap();
    let recorder = events.new_recorder(
        EventSource { component: "eventTest".into(), host: Default::default() },
        ManualClock::new(Time::default()),
    );
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let recorder = recorder.clone();
            tokio::spawn(async move {
                let object = ObjectReference {
                    kind: "Pod".into(),
                    name: format!("foo-{i}").into(),
                    namespace: "baz".into(),
                    uid: "bar".into(),
                    api_version: "version".into(),
                    ..ObjectReference::default()
                };
                recorder.eventf(&object, "Normal", &format!("Reason-{i}"), format_args!("{i}"))
            })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap(), RecordOutcome::Queued);
    }
    // As upstream, wait for every event to be created before shutting down (shutdown cancels
    // pending retries).
    let all_created = async {
        while flaky.0.lock().unwrap().values().filter(|&&a| a > 4).count() < n {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), all_created).await.expect("all events created");
    events.shutdown().await;
    let stats = recording.await.unwrap();
    logging.await.unwrap();
    assert_eq!(stats.created, n as u64, "{stats:?}");
    assert_eq!((stats.dropped, stats.gave_up), (0, 0));
    assert_eq!(*logged.lock().unwrap(), n);
    let attempts = flaky.0.lock().unwrap();
    assert_eq!(attempts.len(), n);
    assert!(attempts.values().all(|&a| a >= 5), "every event took at least 5 attempts");
}

#[test]
fn event_names_match_client_go() {
    for scenario in common::scenarios("event_name") {
        let default_nanos = scenario["options"]["unixNano"].as_i64().unwrap();
        for step in scenario["steps"].as_array().unwrap() {
            let nanos = step["unixNano"].as_i64().unwrap_or(default_nanos);
            let name = generate_event_name(step["refName"].as_str().unwrap(), nanos);
            for expect in [&step["expect"], &step["expect_derived"]] {
                if let Some(want) = expect["name"].as_str() {
                    assert_eq!(name, want);
                }
                if expect["valid_dns1123_subdomain"] == true {
                    assert!(is_dns1123_subdomain(&name), "{name}");
                }
                if expect["is_random_uuid_v4"] == true {
                    let uuid = uuid::Uuid::parse_str(&name).expect("a UUID");
                    assert_eq!(uuid.get_version_num(), 4, "{name}");
                }
            }
        }
    }
}

#[tokio::test]
async fn unsupported_type_is_dropped_and_events_after_shutdown_are_refused() {
    let events = broadcaster();
    let recorder = events.new_recorder(EventSource::default(), ManualClock::new(Time::default()));
    let object = ObjectReference { name: "p".into(), ..ObjectReference::default() };
    assert_eq!(recorder.event(&object, "normal", "R", "m"), RecordOutcome::UnsupportedType);
    events.shutdown().await;
    assert_eq!(recorder.event(&object, "Normal", "R", "m"), RecordOutcome::Stopped);
}
