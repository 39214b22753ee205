//! Real misbehaving `.wasm` plugins (built from `tests/plugins/`): each failure gets a clear
//! error naming plugin, kind, tenant and event, a metric, the configured fallback, and the host
//! keeps processing the following events. Also: files that are not plugins, a plugin of the
//! wrong world, and a user plugin overriding a default.

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use eventpipe::correlator::{ByReason, CorrelatorOptions, EventAggregatorKeyFunc, EventCorrelator, Occurrence};
use eventpipe::event::{Event, EventSource, ObjectReference};
use eventpipe::plugin::functions::WasmAggregateKeyFunc;
use eventpipe::plugin::{
    CallFailure, FallbackPolicy, Metering, PluginError, PluginHandle, PluginOrigin, PluginRuntime, PluginSettings,
};

use crate::common;

fn event(name: &str, reason: &str, host: &str, message: &str) -> Event {
    let t = "2025-01-01T00:00:00Z".parse().unwrap();
    Event {
        involved_object: ObjectReference {
            kind: "Pod".into(),
            namespace: "ns".into(),
            name: name.into(),
            ..ObjectReference::default()
        },
        reason: reason.into(),
        message: message.into(),
        source: EventSource { component: "kubelet".into(), host: host.into() },
        type_: "Warning".into(),
        count: 1,
        first_timestamp: Some(t),
        last_timestamp: Some(t),
        metadata: eventpipe::event::ObjectMeta {
            name: format!("{name}.1").into(),
            namespace: "ns".into(),
            ..Default::default()
        },
        ..Event::default()
    }
}

fn load(name: &str, settings: PluginSettings) -> PluginHandle {
    let runtime = PluginRuntime::new(Metering::Fuel).unwrap();
    let plugin = runtime.load_file(name, &common::fixture_plugin(name)).unwrap();
    PluginHandle::fixed(plugin, "default", settings)
}

/// Runs `f` with every log line of this thread captured; returns its result and the log.
fn capture_logs<R>(f: impl FnOnce() -> R) -> (R, String) {
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(move || writer.clone())
        .finish();
    let result = tracing::subscriber::with_default(subscriber, f);
    let log = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    (result, log)
}

#[test]
fn every_kind_of_failure_falls_back_to_client_go_with_a_clear_error_and_a_metric() {
    let plugin = load("misbehave", PluginSettings::default());
    let plugin = PluginHandle::new(plugin.slot().clone(), "tenant-a", PluginSettings::default());
    let cases = [
        ("Trap", "trapped: unreachable code reached", "failure=\"trap\""),
        ("Loop", "ran out of fuel (budget 2000000)", "failure=\"out_of_fuel\""),
        ("Hog", "memory limit exceeded: growing linear memory to", "failure=\"memory_limit\""),
        ("Panic", "trapped: unreachable code reached", "failure=\"trap\""),
        ("Empty", "returned garbage: empty aggregate key for event ns/bad-Empty.1", "failure=\"garbage\""),
    ];
    let key_fn = WasmAggregateKeyFunc::new(plugin.clone()).unwrap();
    for (reason, failure, label) in cases {
        let events = [
            event("ok-1", "Started", "n1", "m"),
            event(&format!("bad-{reason}"), reason, "n1", "m"),
            event("ok-2", "Pulled", "n2", "m"),
        ];
        let refs: Vec<&Event> = events.iter().collect();
        let before = plugin.stats().snapshot();
        let (keys, log) = capture_logs(|| {
            let mut keys = Vec::new();
            key_fn.aggregate_keys(&refs, &mut keys);
            keys
        });
        let after = plugin.stats().snapshot();
        let expected: Vec<_> = events.iter().map(|e| Some(ByReason.aggregate_key(e))).collect();
        assert_eq!(keys, expected, "{reason}: every event keyed as client-go would");
        let error = format!(
            "plugin `misbehave` (aggregate-key) for tenant `tenant-a` failed on event ns/bad-{reason}.1: {failure}"
        );
        assert!(log.contains(&error), "{reason}: expected «{error}» in:\n{log}");
        assert!(log.contains(label), "{reason}: metric label {label} in the log");
        assert!(after.failures > before.failures, "{reason}: failures counted");
        assert_eq!(after.fallbacks - before.fallbacks, 1, "{reason}: exactly the bad event fell back");
        if reason == "Panic" {
            assert!(
                log.contains("misbehave panics on purpose for bad-Panic"),
                "the guest's panic message is logged:\n{log}"
            );
        }
        // The next call works (a trapped instance is replaced), on an input the memo does not
        // have.
        let next = event(&format!("ok-after-{reason}"), "Pulled", "n2", "m");
        let calls = plugin.stats().snapshot().calls;
        let mut again = Vec::new();
        key_fn.aggregate_keys(&[&next], &mut again);
        assert_eq!(again, vec![Some(ByReason.aggregate_key(&next))]);
        assert_eq!(plugin.stats().snapshot().calls, calls + 1, "{reason}: the plugin was called");
    }
    assert!(
        plugin.stats().snapshot().instances >= 4,
        "fresh instances after the traps: {:?}",
        plugin.stats().snapshot()
    );
}

#[test]
fn a_plugin_failing_on_every_event_is_not_called_for_the_rest_of_the_batch() {
    let plugin = load("misbehave", PluginSettings::default());
    let key_fn = WasmAggregateKeyFunc::new(plugin.clone()).unwrap();
    let events: Vec<Event> = (0..50).map(|i| event(&format!("p{i}"), "Loop", "n", "m")).collect();
    let refs: Vec<&Event> = events.iter().collect();
    let (keys, log) = capture_logs(|| {
        let mut keys = Vec::new();
        key_fn.aggregate_keys(&refs, &mut keys);
        keys
    });
    assert!(keys.iter().zip(&events).all(|(k, e)| *k == Some(ByReason.aggregate_key(e))));
    let stats = plugin.stats().snapshot();
    // The batch of 50, then its first three events alone: three single events failed with no
    // call succeeding.
    assert_eq!(stats.calls, 4, "probed, then cut off: {stats:?}");
    assert_eq!(stats.fallbacks, 50);
    assert!(log.contains("plugin keeps failing; the rest of the batch falls back without calling it"), "{log}");
}

/// The circuit breaker: a plugin running out of fuel on every event is quarantined once a
/// batch's bisection found it failing on every event it tried, then not called until its
/// backoff (1 s) passes; a failed trial quarantines it again; a new version lifts the quarantine.
#[test]
fn a_plugin_failing_on_every_event_is_quarantined_until_a_new_version() {
    let plugin = load("misbehave", PluginSettings::default());
    let key_fn = WasmAggregateKeyFunc::new(plugin.clone()).unwrap();
    let looping: Vec<Event> = (0..50).map(|i| event(&format!("p{i}"), "Loop", "n", "m")).collect();
    let good: Vec<Event> = (0..50).map(|i| event(&format!("g{i}"), "Started", "n", "m")).collect();
    let keys = |events: &[Event]| {
        let refs: Vec<&Event> = events.iter().collect();
        let mut keys = Vec::new();
        let ((), log) = capture_logs(|| key_fn.aggregate_keys(&refs, &mut keys));
        assert!(keys.iter().zip(events).all(|(k, e)| *k == Some(ByReason.aggregate_key(e))), "the fallback's keys");
        log
    };
    let quarantined = |log: &str| log.matches("plugin quarantined: its fallback is used without calling it").count();
    // First batch: its first 3 events failed alone with no call succeeding (4 calls):
    // quarantined. The second batch falls back without a call.
    let log = keys(&looping) + &keys(&looping);
    let stats = plugin.snapshot();
    assert_eq!((stats.calls, stats.quarantines, stats.quarantined), (4, 1, 1), "{stats:?}");
    assert_eq!(quarantined(&log), 1, "logged once:\n{log}");
    // Quarantined: nothing is called, good events or not; nothing is logged.
    let log = keys(&looping) + &keys(&good);
    let now = plugin.snapshot();
    assert_eq!((now.calls, now.failures, now.fallbacks - stats.fallbacks), (4, stats.failures, 100), "{now:?}");
    assert!(!log.contains("WARN"), "{log}");
    // After the 1 s backoff one trial call is made; it fails: quarantined again.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let log = keys(&looping);
    let now = plugin.snapshot();
    assert_eq!((now.calls, now.quarantines, now.quarantined), (5, 2, 1), "{now:?}");
    assert_eq!(quarantined(&log), 1, "{log}");
    // A new version (a hot reload's swap) lifts it at once.
    let runtime = PluginRuntime::new(Metering::Fuel).unwrap();
    let next = runtime.load_file("misbehave", &common::fixture_plugin("misbehave")).unwrap();
    plugin.slot().swap(Some(next)).unwrap();
    assert_eq!(plugin.snapshot().quarantined, 0);
    keys(&good);
    let now = plugin.snapshot();
    assert_eq!((now.calls, now.quarantined), (6, 0), "the new version is called: {now:?}");
}

/// A failed input is not memoized: it goes to the plugin again next time, while the inputs the
/// plugin answered are memo hits. An input repeated in a batch goes to the plugin once, and each
/// repeat of a failed one is counted like the first (a fallback, or a drop).
#[test]
fn failures_are_not_memoized_and_their_repeats_count_as_fallbacks() {
    for (fallback, expected_value) in [(FallbackPolicy::Builtin, true), (FallbackPolicy::Drop, false)] {
        let plugin = load("misbehave", PluginSettings { fallback, ..PluginSettings::default() });
        let key_fn = WasmAggregateKeyFunc::new(plugin.clone()).unwrap();
        let (ok, bad) = (event("ok", "Started", "n", "m"), event("bad", "Trap", "n", "m"));
        let keys = |events: &[&Event]| {
            let mut keys = Vec::new();
            capture_logs(|| key_fn.aggregate_keys(events, &mut keys));
            keys
        };
        let want = |e: &Event| Some(ByReason.aggregate_key(e)).filter(|_| expected_value || e.reason != "Trap");
        assert_eq!(keys(&[&ok, &bad, &ok, &bad]), [want(&ok), want(&bad), want(&ok), want(&bad)], "{fallback:?}");
        let first = plugin.stats().snapshot();
        // [ok, bad] fails, then [ok] answers and [bad] fails alone.
        assert_eq!((first.calls, first.events, first.failures), (3, 4, 1), "{fallback:?}: {first:?}");
        assert_eq!((first.memo_hits, first.memo_misses), (2, 2), "{fallback:?}: {first:?}");
        assert_eq!(first.fallbacks + first.drops, 2, "{fallback:?}: both `bad` events fell back: {first:?}");

        assert_eq!(keys(&[&bad, &ok]), [want(&bad), want(&ok)], "{fallback:?}");
        let second = plugin.stats().snapshot();
        assert_eq!((second.calls - first.calls, second.events - first.events), (1, 1), "{fallback:?}: only `bad`");
        assert_eq!(second.failures - first.failures, 1, "{fallback:?}");
        assert_eq!(second.memo_hits - first.memo_hits, 1, "{fallback:?}: `ok` from the memo");
    }
}

/// 256 events of which those at `bad` fail (`reason`), the rest are `good`.
fn batch_with_failures(bad: &[usize], reason: &str, good: &str) -> Vec<Event> {
    (0..256).map(|i| event(&format!("p{i}"), if bad.contains(&i) { reason } else { good }, "n", "m")).collect()
}

/// Failing events: spread out, and three in a row (which made the whole rest of a batch fall
/// back before failures were bisected).
const BAD: [usize; 6] = [3, 77, 78, 79, 200, 255];

#[test]
fn a_key_function_failing_on_n_events_of_a_batch_drops_exactly_those_n() {
    for reason in ["Trap", "Loop"] {
        let plugin = load("misbehave", PluginSettings { fallback: FallbackPolicy::Drop, ..PluginSettings::default() });
        let key_fn = WasmAggregateKeyFunc::new(plugin.clone()).unwrap();
        let events = batch_with_failures(&BAD, reason, "Started");
        let refs: Vec<&Event> = events.iter().collect();
        let (keys, log) = capture_logs(|| {
            let mut keys = Vec::new();
            key_fn.aggregate_keys(&refs, &mut keys);
            keys
        });
        let dropped: Vec<usize> = keys.iter().enumerate().filter(|(_, k)| k.is_none()).map(|(i, _)| i).collect();
        assert_eq!(dropped, BAD, "{reason}: only the failing events are dropped");
        for i in (0..256).filter(|i| !BAD.contains(i)) {
            assert_eq!(keys[i], Some(ByReason.aggregate_key(&events[i])), "{reason}: event {i} keyed by the plugin");
        }
        let stats = plugin.stats().snapshot();
        assert_eq!((stats.drops, stats.failures), (6, 6), "{reason}: counted once per failing event: {stats:?}");
        for i in BAD {
            assert!(log.contains(&format!("failed on event ns/p{i}.1")), "{reason}: the error names event {i}:\n{log}");
        }
        assert!(!log.contains("first of a batch"), "{log}");
    }
}

#[test]
fn a_filter_failing_on_n_events_of_a_batch_drops_exactly_those_n() {
    use eventpipe::plugin::filter::{Verdict, WasmFilter};
    let plugin =
        load("misbehave-filter", PluginSettings { fallback: FallbackPolicy::Drop, ..PluginSettings::default() });
    let filter = WasmFilter::new(plugin.clone()).unwrap();
    let mut events = batch_with_failures(&BAD, "Trap", "Started");
    events[10].reason = "Noise".into(); // dropped by the plugin's own verdict
    let refs: Vec<&Event> = events.iter().collect();
    let (verdicts, log) = capture_logs(|| filter.filter(&refs));
    let failed: Vec<usize> = verdicts
        .iter()
        .enumerate()
        .filter(|(_, v)| matches!(v, Verdict::Drop(Some(r)) if r.contains("failed")))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(failed, BAD, "only the failing events take the fallback");
    assert_eq!(verdicts[10], Verdict::Drop(None), "the plugin's own verdicts stand");
    assert_eq!(verdicts.iter().filter(|v| **v == Verdict::Keep).count(), 256 - BAD.len() - 1);
    let stats = plugin.stats().snapshot();
    assert_eq!((stats.drops, stats.failures), (6, 6), "{stats:?}");
    assert!(log.contains("failed on event ns/p200.1"), "{log}");
}

#[test]
fn drop_policy_drops_only_the_failing_event_and_the_correlator_counts_it() {
    let plugin = load("misbehave", PluginSettings { fallback: FallbackPolicy::Drop, ..PluginSettings::default() });
    let options = CorrelatorOptions {
        key_func: Some(Arc::new(WasmAggregateKeyFunc::new(plugin.clone()).unwrap())),
        ..CorrelatorOptions::default()
    };
    let mut correlator = EventCorrelator::new(options);
    let events = vec![event("a", "Started", "n", "m"), event("b", "Trap", "n", "m"), event("c", "Started", "n", "m")];
    let prepared = correlator.prepare(events.into_iter().map(Occurrence::from).collect());
    let results: Vec<_> = prepared.into_iter().map(|p| correlator.finish(p)).collect();
    assert_eq!(results.iter().map(|r| r.skip).collect::<Vec<_>>(), [false, true, false]);
    assert_eq!(correlator.stats().dropped, 1);
    assert_eq!(plugin.stats().snapshot().drops, 1);
}

#[test]
fn files_that_are_not_working_plugins_are_refused_with_the_reason() {
    let runtime = PluginRuntime::new(Metering::Fuel).unwrap();
    let err = runtime.load("notes", b"this is not wasm", PluginOrigin::File("test.wasm".into())).unwrap_err();
    assert!(matches!(err, PluginError::Compile { .. }), "{err}");
    assert!(err.to_string().starts_with("plugin `notes`: not a valid WebAssembly component"), "{err}");

    let whole = std::fs::read(common::fixture_plugin("ignore-host")).unwrap();
    let half = &whole[..whole.len() / 2];
    let err = runtime.load("half-written", half, PluginOrigin::File("test.wasm".into())).unwrap_err();
    assert!(matches!(err, PluginError::Compile { .. }), "a half-written file: {err}");

    let core_module = b"\0asm\x01\0\0\0";
    let err = runtime.load("core", core_module, PluginOrigin::File("test.wasm".into())).unwrap_err();
    assert!(err.to_string().contains("plugin `core`"), "{err}");
}

#[test]
fn a_plugin_of_another_world_is_refused_for_a_key_function() {
    let filter = load("keep-all", PluginSettings::default());
    let err = WasmAggregateKeyFunc::new(filter).err().expect("a filter is not an aggregate-key function");
    assert_eq!(err.to_string(), "plugin `keep-all` is a filter plugin, not an aggregate-key plugin");
}

/// `eventpipe` with `args`, `input` on stdin; returns (status, stdout, stderr).
fn eventpipe(args: &[&str], input: &str) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

fn replay_lines(events: &[Event]) -> String {
    events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let clock = format!("2025-01-01T00:00:{:02}Z", i % 60);
            serde_json::json!({ "clock": clock, "event": e }).to_string() + "\n"
        })
        .collect()
}

#[test]
fn replay_survives_a_misbehaving_plugin_and_fail_policy_sets_the_exit_status() {
    let plugin = common::fixture_plugin("misbehave");
    let plugin = plugin.to_str().unwrap();
    let mut events = Vec::new();
    for (i, reason) in ["Trap", "Loop", "Panic", "Hog", "Empty"].iter().enumerate() {
        events.push(event(&format!("good{i}"), "Started", "n", "m"));
        events.push(event(&format!("bad{i}"), reason, "n", "m"));
    }
    let input = replay_lines(&events);
    let (code, with_plugin, log) = eventpipe(&["replay", "--aggregate-key-plugin", plugin], &input);
    assert_eq!(code, 0, "{log}");
    let (_, builtin, _) = eventpipe(&["replay", "--builtin"], &input);
    assert_eq!(with_plugin, builtin, "fallback to the built-in function: same results");
    assert_eq!(
        log.matches("plugin `misbehave` (aggregate-key) for tenant `default` failed on event").count(),
        5,
        "{log}"
    );

    let (code, _, log) = eventpipe(&["replay", "--aggregate-key-plugin", plugin, "--plugin-fallback", "fail"], &input);
    assert_eq!(code, 3, "fail policy: {log}");
}

/// A user aggregate-key plugin that ignores `source.host` (`docs/plugins.md`): ten distinct
/// messages about one pod from two nodes aggregate with it, and not with the default.
#[test]
fn a_user_plugin_overrides_the_default_key_function() {
    let events: Vec<Event> = (0..10)
        .map(|i| {
            event(
                "web-0",
                "FailedMount",
                if i % 2 == 0 { "node-a" } else { "node-b" },
                &format!("volume vol-{i} not found"),
            )
        })
        .collect();
    let input = replay_lines(&events);
    let count_combined = |out: &str| out.matches("(combined from similar events)").count();

    let (code, default_out, log) = eventpipe(&["replay"], &input);
    assert_eq!(code, 0, "{log}");
    assert_eq!(count_combined(&default_out), 0, "by-reason: 5 messages per node, below max events");

    let plugin = common::fixture_plugin("ignore-host");
    let (code, override_out, log) = eventpipe(&["replay", "--aggregate-key-plugin", plugin.to_str().unwrap()], &input);
    assert_eq!(code, 0, "{log}");
    let last: serde_json::Value = serde_json::from_str(override_out.lines().last().unwrap()).unwrap();
    assert_eq!(
        last["event"]["message"], "(combined from similar events): volume vol-9 not found",
        "the 10th distinct message aggregates"
    );
    assert_eq!(count_combined(&override_out), 1);
}

#[test]
fn plugins_check_reports_kind_fuel_and_memory_or_the_reason() {
    let good = common::fixture_plugin("keep-all");
    let (code, out, err) = eventpipe(&["plugins", "check", good.to_str().unwrap()], "");
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("keep_all: filter plugin"), "{out}");
    assert!(out.contains("fuel used: ") && out.contains("peak memory: "), "{out}");

    // A key plugin that declares its key fields: the check says which it reads.
    let key = common::fixture_plugin("ignore-host");
    let (code, out, err) = eventpipe(&["plugins", "check", key.to_str().unwrap()], "");
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("ignore_host: aggregate-key plugin"), "{out}");
    assert!(
        out.contains(
            "(reads source-component, involved-object-kind, involved-object-namespace, involved-object-name, \
             involved-object-uid, involved-object-api-version, type, reason, reporting-component, \
             reporting-instance; local key: message)"
        ),
        "{out}"
    );
    assert!(!out.contains(r#", "" (reads"#), "the local key shown is the sample event's message: {out}");

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.wasm");
    std::fs::write(&bad, b"garbage").unwrap();
    let (code, _, err) = eventpipe(&["plugins", "check", bad.to_str().unwrap()], "");
    assert_eq!(code, 1);
    assert!(err.contains("plugin `bad`: not a valid WebAssembly component"), "{err}");
}

/// A sink plugin's `permanent` answer, its garbage answer (no result for the request) and a
/// trap drop the event at the first attempt, each under its own reason; only `retryable`
/// follows client-go's retry policy.
#[tokio::test]
async fn a_failing_sink_plugin_is_retried_only_when_it_says_retryable() {
    use eventpipe::correlator::EventCorrelateResult;
    use eventpipe::plugin::sink::WasmSink;
    use eventpipe::sink::plugin::PluginSink;
    use eventpipe::sink::retry::{RetryPolicy, WriteOutcome, deliver, rejection_reason};

    let handle = load("misbehave-sink", PluginSettings::default());
    let sink = PluginSink(WasmSink::new(handle.clone(), Box::new(std::io::sink())).unwrap());
    let policy =
        RetryPolicy { max_tries: 12, sleep_duration: std::time::Duration::from_millis(1), jitter: Arc::new(|| 0.0) };
    let cancel = tokio_util::sync::CancellationToken::new();
    let mut outcomes = Vec::new();
    for reason in ["Started", "Permanent", "Garbage", "Trap", "Retryable", "Pulled"] {
        let result =
            EventCorrelateResult { skip: false, event: Some(Box::new(event(reason, reason, "n", "m"))), patch: None };
        let (outcome, _) = deliver(&sink, result, &policy, &cancel).await;
        outcomes.push(match outcome {
            WriteOutcome::Written { attempts, .. } => format!("written after {attempts}"),
            WriteOutcome::Dropped { error, attempts } => {
                format!("dropped after {attempts}: {}", rejection_reason(&error))
            }
            WriteOutcome::GaveUp { attempts, .. } => format!("gave up after {attempts}"),
            other => format!("{other:?}"),
        });
    }
    assert_eq!(
        outcomes,
        [
            "written after 1",
            "dropped after 1: Permanent",
            "dropped after 1: PluginGarbage",
            "dropped after 1: PluginFailed",
            "gave up after 12",
            "written after 1",
        ]
    );
    // The plugin's own counters (its eventpipe_plugin_* series): one trap, one garbage answer.
    let stats = handle.stats().snapshot();
    let reason = |r| stats.failures_by_reason[CallFailure::LABELS.iter().position(|l| *l == r).unwrap()];
    assert_eq!((reason("trap"), reason("garbage"), stats.failures), (1, 1, 2));
    assert_eq!(stats.calls, 1 + 1 + 1 + 1 + 12 + 1);
}

/// `run --plugin-fallback drop` with a key function failing on 100 of 1000 events: the summary
/// counts them as drops by that plugin and policy, not as spam-filter skips.
#[test]
fn run_counts_fallback_drops_as_drops_by_plugin_not_as_skips() {
    let plugin = common::fixture_plugin("misbehave");
    let dir = tempfile::tempdir().unwrap();
    let sink = dir.path().join("out.jsonl");
    // One failing event in ten: never three failures in a row, which would make the plugin's
    // failure systematic for the rest of its batch (then good events are dropped too).
    let events: Vec<Event> =
        (0..1000).map(|i| event(&format!("p{i}"), if i % 10 == 0 { "Trap" } else { "Started" }, "n", "m")).collect();
    let input: String = events.iter().map(|e| serde_json::to_string(e).unwrap() + "\n").collect();
    let (code, _, log) = eventpipe(
        &[
            "run",
            "--source=jsonl:-",
            "--summary-json",
            "--no-watch",
            "--workers=1",
            &format!("--sink=jsonl:{}", sink.display()),
            &format!("--aggregate-key-plugin={}", plugin.display()),
            "--plugin-fallback=drop",
        ],
        &input,
    );
    assert_eq!(code, 0, "{log}");
    let summary: serde_json::Value = log.lines().rev().find_map(|l| serde_json::from_str(l).ok()).unwrap();
    assert_eq!(summary["dropped_by_plugins"], 100, "{summary}");
    assert_eq!(summary["skipped"], 0, "{summary}");
    assert_eq!(summary["dropped_by_plugin"]["misbehave"]["drop"], 100, "{summary}");
    assert_eq!(std::fs::read_to_string(&sink).unwrap().lines().count(), 900, "the other 900 are written");
}
