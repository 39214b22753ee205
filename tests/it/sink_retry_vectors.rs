//! The `sink_retry` scenarios (client-go `TestWriteEventError`, `TestCancelEvent`,
//! `TestUpdateExpiredEvent` and derived ones): `recordToSink`'s create / patch / retry policy,
//! driven through [`write_event`] with a scripted sink on tokio's paused clock.

use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use eventpipe::correlator::{CorrelatorOptions, EventCorrelator};
use eventpipe::event::Event;
use eventpipe::sink::{EventSink, RetryPolicy, SinkError, StatusError, Stored, WriteOutcome, write_event};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::common;

/// Turns a vector's error description into the matching [`SinkError`] class.
fn error_from(desc: &str) -> SinkError {
    if desc.starts_with("RequestConstructionError") {
        SinkError::RequestConstruction(desc.into())
    } else if desc.starts_with("UnexpectedObjectError") {
        SinkError::UnexpectedObject(desc.into())
    } else if let Some(rest) = desc.strip_prefix("StatusError") {
        let word_after = |w: &str| rest.split_whitespace().skip_while(|x| *x != w).nth(1).map(str::to_string);
        SinkError::Status(StatusError {
            code: word_after("code").and_then(|c| c.parse().ok()).unwrap_or(0),
            reason: word_after("reason").unwrap_or_default(),
            message: desc.into(),
            causes: rest
                .contains("NamespaceTerminating")
                .then(|| "NamespaceTerminating".to_string())
                .into_iter()
                .collect(),
        })
    } else {
        SinkError::Transport(desc.into())
    }
}

/// How one verb of the scripted sink behaves.
#[derive(Default)]
struct Script {
    error: Option<String>,
    fail_first: u64,
}

impl Script {
    fn from(v: &Value) -> Self {
        let fail_first = if v["always"] == true { u64::MAX } else { v["fail_first_n_attempts"].as_u64().unwrap_or(0) };
        Self { error: v["error"].as_str().map(str::to_string), fail_first }
    }

    fn answer(&self, call_no: u64) -> Result<Stored, SinkError> {
        match &self.error {
            Some(desc) if call_no <= self.fail_first => Err(error_from(desc)),
            _ => Ok(Stored::AsSent),
        }
    }
}

#[derive(Default)]
struct Calls {
    creates: u64,
    patches: u64,
    created_resource_version: Option<String>,
    patch_body: Option<Vec<u8>>,
}

struct ScriptedSink {
    create: Script,
    patch: Script,
    calls: Mutex<Calls>,
}

#[async_trait]
impl EventSink for ScriptedSink {
    async fn create(&self, event: &Event) -> Result<Stored, SinkError> {
        let n = {
            let mut c = self.calls.lock().unwrap();
            c.creates += 1;
            c.created_resource_version = Some(event.metadata.resource_version.to_string());
            c.creates
        };
        self.create.answer(n)
    }

    async fn update(&self, _event: &Event) -> Result<Stored, SinkError> {
        unreachable!("recordToSink never updates")
    }

    async fn patch(&self, _event: &Event, patch: &[u8]) -> Result<Stored, SinkError> {
        let n = {
            let mut c = self.calls.lock().unwrap();
            c.patches += 1;
            c.patch_body = Some(patch.to_vec());
            c.patches
        };
        self.patch.answer(n)
    }
}

fn attempts(outcome: &WriteOutcome) -> u32 {
    match outcome {
        WriteOutcome::Written { attempts, .. }
        | WriteOutcome::Dropped { attempts, .. }
        | WriteOutcome::GaveUp { attempts, .. }
        | WriteOutcome::Cancelled { attempts, .. } => *attempts,
        WriteOutcome::Skipped | WriteOutcome::SeriesCounted => 0,
    }
}

#[tokio::test(start_paused = true)]
async fn sink_retry_scenarios_match_client_go() {
    let scenarios = common::scenarios("sink_retry");
    assert_eq!(scenarios.len(), 11);
    for ((path, functions), scenario) in
        common::correlator_paths().into_iter().flat_map(|p| scenarios.iter().map(move |s| (p, s)))
    {
        let name = &format!("{} [{path}]", scenario["name"].as_str().unwrap());
        let options = &scenario["options"];
        let sleep: u64 = options["sleepDuration"].as_str().unwrap().trim_end_matches('s').parse().unwrap();
        let policy = RetryPolicy { sleep_duration: Duration::from_secs(sleep), ..RetryPolicy::default() };
        let cancel = CancellationToken::new();
        if options["cancelationCtx"].as_str().is_some_and(|c| c.contains("cancelled")) {
            cancel.cancel();
        }
        for step in scenario["steps"].as_array().unwrap() {
            let sink = ScriptedSink {
                create: Script::from(&step["sink"]["create"]),
                patch: Script::from(&step["sink"]["patch"]),
                calls: Mutex::default(),
            };
            let event: Event = serde_json::from_value(step["event"].clone()).unwrap();
            let mut correlator = EventCorrelator::new(functions(CorrelatorOptions::default()));
            let result = correlator.event_correlate(event);
            let outcome = write_event(&sink, &mut correlator, result, &policy, &cancel).await;
            let calls = sink.calls.lock().unwrap();
            for expect in [&step["expect"], &step["expect_derived"]] {
                if let Some(n) = expect["attempts"].as_u64() {
                    assert_eq!(u64::from(attempts(&outcome)), n, "{name}: attempts ({outcome:?})");
                }
                if let Some(n) = expect["create_calls"].as_u64() {
                    assert_eq!(calls.creates, n, "{name}: create calls");
                }
                if let Some(n) = expect["patch_calls"].as_u64() {
                    assert_eq!(calls.patches, n, "{name}: patch calls");
                }
                if expect["create_called"] == true {
                    assert!(calls.creates > 0, "{name}: create called");
                }
                if let Some(rv) = expect["created_event_resourceVersion"].as_str() {
                    assert_eq!(calls.created_resource_version.as_deref(), Some(rv), "{name}: created resourceVersion");
                }
                if expect.get("patch_body").is_some_and(Value::is_null) {
                    assert_eq!(calls.patch_body.as_deref(), Some(&b""[..]), "{name}: empty patch body");
                }
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn retries_sleep_jittered_first_then_full_duration() {
    let sink = ScriptedSink {
        create: Script { error: Some("transport".into()), fail_first: 3 },
        patch: Script::default(),
        calls: Mutex::default(),
    };
    let policy = RetryPolicy { jitter: std::sync::Arc::new(|| 0.25), ..RetryPolicy::default() };
    let mut correlator = EventCorrelator::new(CorrelatorOptions::default());
    let result = correlator.event_correlate(Event { count: 1, ..Event::default() });
    let start = tokio::time::Instant::now();
    let outcome = write_event(&sink, &mut correlator, result, &policy, &CancellationToken::new()).await;
    assert!(matches!(outcome, WriteOutcome::Written { attempts: 4, .. }), "{outcome:?}");
    // 2.5 s (10 s × 0.25) after the first failure, then 10 s twice.
    assert_eq!(start.elapsed(), Duration::from_millis(22_500));
}
