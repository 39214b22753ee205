//! At-least-once delivery across a crash: `eventpipe run` is killed with SIGKILL mid-stream and
//! started again with the same state file; every input event reaches the sink at least once.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common;

const EVENTS: usize = 60_000;

/// `n` JSON lines, each a first event (count 1) about an object of its own (`obj-I`).
fn one_object_events(n: usize) -> String {
    let mut text = String::new();
    for i in 0..n {
        let e = json!({
            "metadata": {"name": format!("obj-{i}.1"), "namespace": "d"},
            "involvedObject": {"kind": "Pod", "namespace": "d", "name": format!("obj-{i}")},
            "reason": "Started", "message": format!("m{i}"), "type": "Normal", "source": {"component": "test"},
            "lastTimestamp": "2025-01-01T00:00:00Z", "count": 1
        });
        text += &format!("{e}\n");
    }
    text
}

#[test]
fn a_sigkilled_run_resumes_from_its_state_file_without_losing_an_event() {
    let dir = tempfile::tempdir().unwrap();
    let (input, out, state) =
        (dir.path().join("in.jsonl"), dir.path().join("out.jsonl"), dir.path().join("state.json"));
    let text = one_object_events(EVENTS);
    std::fs::write(&input, &text).unwrap();
    let run = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_eventpipe"));
        c.args(["run", "--summary-json", "--no-watch", "--delivery=at-least-once"])
            .arg(format!("--state-file={}", state.display()))
            .arg(format!("--source=jsonl:{}", input.display()))
            .arg(format!("--sink=jsonl:{}", out.display()));
        c
    };

    let mut first = run().stderr(std::process::Stdio::null()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let saved = loop {
        if let Ok(bytes) = std::fs::read(&state)
            && let Ok(saved) = serde_json::from_slice::<Value>(&bytes)
            && saved["acknowledged"].as_u64().unwrap_or(0) > 1_000
        {
            break saved;
        }
        assert!(Instant::now() < deadline, "no position saved");
        std::thread::sleep(Duration::from_millis(20));
    };
    first.kill().unwrap(); // SIGKILL: no drain, no final save
    first.wait().unwrap();
    let offset = saved["position"]["file_offset"].as_u64().expect("a file offset");
    let killed_at = serde_json::from_slice::<Value>(&std::fs::read(&state).unwrap()).unwrap();
    let resumed_from = killed_at["position"]["file_offset"].as_u64().unwrap();
    assert!(offset > 0 && resumed_from < text.len() as u64, "killed mid-stream: {killed_at}");
    assert_eq!(text.as_bytes()[resumed_from as usize - 1], b'\n', "positions are line starts");

    let second = run().output().unwrap();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(second.status.success(), "{stderr}");
    assert!(stderr.contains("resuming jsonl:"), "{stderr}");
    let summary: Value = stderr.lines().rev().find_map(|l| serde_json::from_str(l).ok()).unwrap();
    let remaining = text[resumed_from as usize..].lines().count() as u64;
    assert_eq!(summary["read"].as_u64(), Some(remaining), "the second run starts at the saved position");

    let lines = std::fs::read_to_string(&out).unwrap();
    let written: Vec<Value> = lines.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let names: HashSet<&str> = written.iter().map(|c| c["event"]["involvedObject"]["name"].as_str().unwrap()).collect();
    let missing: Vec<usize> = (0..EVENTS).filter(|i| !names.contains(format!("obj-{i}").as_str())).collect();
    assert!(missing.is_empty(), "{} events lost, e.g. {:?}", missing.len(), &missing[..missing.len().min(5)]);
    let duplicates = written.len() - EVENTS;
    println!("{duplicates} duplicates after the crash (written after the last save, written again)");
}

#[test]
fn a_followed_file_source_picks_up_lines_appended_later_and_its_sink_shows_them_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (input, out) = (dir.path().join("in.jsonl"), dir.path().join("out.jsonl"));
    let line = |i: usize| {
        format!(
            "{}\n",
            json!({"metadata": {"name": format!("f-{i}.1"), "namespace": "d"},
                "involvedObject": {"kind": "Pod", "namespace": "d", "name": format!("f-{i}")},
                "reason": "Started", "message": "m", "type": "Normal", "source": {"component": "test"},
                "lastTimestamp": "2025-01-01T00:00:00Z", "count": 1})
        )
    };
    std::fs::write(&input, line(0)).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(["run", "--summary-json", "--no-watch", "--follow"])
        .arg(format!("--source=jsonl:{}", input.display()))
        .arg(format!("--sink=jsonl:{}", out.display()))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the run is up (on a fresh machine, compiling the plugins takes a while).
    let rx = common::stderr_lines(&mut child);
    let mut seen = Vec::new();
    while !seen.iter().any(|l: &String| l.contains("tenant `default`")) {
        seen.push(rx.recv_timeout(Duration::from_secs(120)).expect("the run starts"));
    }
    std::thread::sleep(Duration::from_millis(500));
    // Appended later, the second line in two writes (a writer caught mid-line).
    let mut f = std::fs::OpenOptions::new().append(true).open(&input).unwrap();
    let second = line(1);
    use std::io::Write;
    f.write_all(&second.as_bytes()[..20]).unwrap();
    f.flush().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    f.write_all(&second.as_bytes()[20..]).unwrap();
    f.write_all(line(2).as_bytes()).unwrap();
    f.flush().unwrap();
    std::thread::sleep(Duration::from_secs(2));
    // The sink's output shows while the run goes on, in whole lines (flushed every 200 ms).
    let shown = std::fs::read_to_string(&out).unwrap();
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    let status = child.wait().unwrap();
    seen.extend(rx.iter());
    let stderr = seen.join("\n");
    assert!(status.success(), "{stderr}");
    let summary: Value = stderr.lines().rev().find_map(|l| serde_json::from_str(l).ok()).unwrap();
    assert_eq!((summary["read"].as_u64(), summary["bad_lines"].as_u64()), (Some(3), Some(0)), "{stderr}");
    assert_eq!(std::fs::read_to_string(&out).unwrap().lines().count(), 3);
    assert_eq!((shown.lines().count(), shown.ends_with('\n')), (3, true), "shown while running: {shown:?}");
}

/// Open "N suppressed" windows are part of the correlator snapshot: a run that follows its
/// input, is killed with SIGKILL while a window is open, and is resumed from its state file over
/// the rest of the input writes one summary, counting every event the spam filter skipped in
/// the whole input once (before snapshots carried windows, the first run's count was lost).
#[test]
fn a_sigkilled_run_keeps_counting_its_open_suppressed_windows() {
    const BEFORE: usize = 3_000;
    const AFTER: usize = 2_000;
    let dir = tempfile::tempdir().unwrap();
    let (input, out, state, config) = (
        dir.path().join("in.jsonl"),
        dir.path().join("out.jsonl"),
        dir.path().join("state.json"),
        dir.path().join("eventpipe.toml"),
    );
    // One token per object, never refilled at one instant: every event after the first is
    // skipped, into one window that stays open until the run ends.
    std::fs::write(&config, "[defaults]\nburst = 1\nsuppressed_summary_seconds = 86400\n").unwrap();
    let lines = |range: std::ops::Range<usize>| -> String {
        range
            .map(|i| {
                let e = json!({
                    "metadata": {"name": format!("web-0.{i:x}"), "namespace": "d"},
                    "involvedObject": {"kind": "Pod", "namespace": "d", "name": "web-0", "uid": "u-1"},
                    "reason": if i % 3 == 0 { "Unhealthy" } else { "BackOff" }, "message": format!("m{i}"),
                    "type": "Warning", "source": {"component": "kubelet", "host": "node-1"},
                    "firstTimestamp": "2025-01-01T00:00:00Z", "lastTimestamp": "2025-01-01T00:00:00Z", "count": 1
                });
                format!("{e}\n")
            })
            .collect()
    };
    std::fs::write(&input, lines(0..BEFORE)).unwrap();
    let run = |follow: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_eventpipe"));
        c.args(["run", "--summary-json", "--no-watch", "--delivery=at-least-once", "--snapshot-interval=0.2"])
            .args(follow.then_some("--follow"))
            .arg(format!("--config={}", config.display()))
            .arg(format!("--state-file={}", state.display()))
            .arg(format!("--source=jsonl:{}", input.display()))
            .arg(format!("--sink=jsonl:{}", out.display()));
        c
    };

    // The first run reads all there is and waits for more; once a snapshot reflects every
    // line, it is killed.
    let mut first = run(true).stderr(std::process::Stdio::null()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(bytes) = std::fs::read(&state)
            && let Ok(saved) = serde_json::from_slice::<Value>(&bytes)
            && saved["correlator"]["position"]["file_offset"].as_u64() == Some(std::fs::metadata(&input).unwrap().len())
        {
            break;
        }
        assert!(Instant::now() < deadline, "no snapshot of the whole input saved");
        std::thread::sleep(Duration::from_millis(20));
    }
    first.kill().unwrap(); // SIGKILL: the open window is never summarised by this run
    first.wait().unwrap();
    let summaries = |text: &str| -> Vec<Value> {
        text.lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|c| c["event"]["reason"] == "EventsSuppressed")
            .map(|c| c["event"].clone())
            .collect()
    };
    assert!(summaries(&std::fs::read_to_string(&out).unwrap()).is_empty(), "the window was still open");

    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(&input)
        .unwrap()
        .write_all(lines(BEFORE..BEFORE + AFTER).as_bytes())
        .unwrap();
    let second = run(false).output().unwrap();
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(second.status.success(), "{stderr}");
    let summary: Value = stderr.lines().rev().find_map(|l| serde_json::from_str(l).ok()).unwrap();
    assert_eq!(summary["read"].as_u64(), Some(AFTER as u64), "resumed after the snapshot: {summary}");

    let written = summaries(&std::fs::read_to_string(&out).unwrap());
    assert_eq!(written.len(), 1, "{written:?}");
    let skipped = BEFORE + AFTER - 1;
    let unhealthy = (0..BEFORE + AFTER).filter(|i| i % 3 == 0).count() - 1; // event 0 was written
    assert_eq!(
        written[0]["message"],
        format!(
            "{skipped} events suppressed in the last 24h: BackOff ×{}, Unhealthy ×{unhealthy}",
            skipped - unhealthy
        )
    );
}

/// Crash-exact output: `eventpipe run --delivery at-least-once` over the bundled stream to a
/// slow webhook, killed with SIGKILL three times (each time soon after its saved position
/// moved) and started again until the input is done, leaves every object at the receiver in
/// the state an uninterrupted run leaves it (count, message, timestamps): each restart restores
/// the correlator state saved with its position. The saved position advances between kills.
#[test]
fn sigkilled_runs_end_with_every_objects_state_of_an_uninterrupted_run() {
    use common::recording_webhook;
    const KILLS: usize = 3;
    let dir = tempfile::tempdir().unwrap();
    let input = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/data/occurrences.jsonl"));
    let run = |url: &str, state: &Path| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_eventpipe"));
        c.args(["run", "--summary-json", "--no-watch", "--delivery=at-least-once", "--workers=2"])
            .args(["--checkpoint-interval=0.2", "--shutdown-timeout=5"])
            .arg(format!("--state-file={}", state.display()))
            .arg(format!("--source=jsonl:{}", input.display()))
            .arg(format!("--sink=webhook:{url},concurrency=2,max_batch=50"))
            .current_dir(dir.path())
            .stdout(Stdio::null());
        c
    };
    let latency = Duration::from_millis(5);
    let (uninterrupted, url, _endpoint) = recording_webhook::start(latency);
    let out = run(&url, &dir.path().join("once.json")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let expected = uninterrupted.final_state();

    let (received, url, _endpoint) = recording_webhook::start(latency);
    let state = dir.path().join("state.json");
    let saved_at = || -> u64 {
        std::fs::read(&state)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .and_then(|s| s["position"]["file_offset"].as_u64())
            .unwrap_or(0)
    };
    let mut positions = vec![0];
    let mut stderr = String::new();
    loop {
        let log = dir.path().join(format!("run-{}.log", positions.len()));
        let mut child = run(&url, &state).stderr(std::fs::File::create(&log).unwrap()).spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(120);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if positions.len() <= KILLS && saved_at() > *positions.last().unwrap() {
                std::thread::sleep(Duration::from_millis(150)); // acknowledged, not saved yet
                child.kill().unwrap(); // SIGKILL
                child.wait().unwrap();
                positions.push(saved_at());
                break None;
            }
            assert!(Instant::now() < deadline, "no position saved after {positions:?}");
            std::thread::sleep(Duration::from_millis(5));
        };
        stderr += &std::fs::read_to_string(&log).unwrap();
        if let Some(status) = status {
            assert!(status.success(), "{stderr}");
            break;
        }
    }
    assert_eq!(positions.len(), KILLS + 1, "killed mid-stream each time: {positions:?}\n{stderr}");
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "the saved position advanced: {positions:?}");
    assert_eq!(stderr.matches("correlator state of 2 partition(s) restored").count(), KILLS, "{stderr}");

    let actual = received.final_state();
    let differ: Vec<_> = expected.iter().filter(|(k, v)| actual.get(*k) != Some(v)).take(5).collect();
    assert!(
        differ.is_empty() && actual.len() == expected.len(),
        "{} of {} objects differ from the uninterrupted run, e.g. {differ:?}; saved positions {positions:?}",
        expected.iter().filter(|(k, v)| actual.get(*k) != Some(v)).count(),
        expected.len()
    );
    let duplicates = received.len() - uninterrupted.len();
    println!("{KILLS} kills, positions {positions:?}: {duplicates} writes repeated");
}

/// The drain after a signal saves the acknowledged position while a batch backs off: a run to
/// a slow webhook is sent SIGTERM early, so that its drain delivers most of what it read; the
/// webhook then goes down (every request answered `503`), the drain's batch backs off, and the
/// process is killed with SIGKILL before its `--shutdown-timeout` passed (as the kubelet does
/// when the grace period ends first). Started again with the webhook up, it writes again only
/// what followed the newest mark the acknowledged prefix reached, not every write the drain
/// delivered (when positions were saved only until the signal, all of them came again). One
/// object per event and one batch in flight: writes are acknowledged in input order. Every
/// object reaches the receiver.
#[test]
fn a_drain_during_a_sink_outage_saves_the_position_acknowledged_before_it() {
    use common::recording_webhook::{self, object_key};
    use std::sync::atomic::Ordering;
    const EVENTS: usize = 20_000;
    // SIGTERM once this many writes are acknowledged, the outage once this many are.
    const TERM_AFTER: usize = 1_000;
    const OUTAGE_AFTER: usize = 5_000;
    let dir = tempfile::tempdir().unwrap();
    let (input, state) = (dir.path().join("in.jsonl"), dir.path().join("state.json"));
    let text = one_object_events(EVENTS);
    std::fs::write(&input, &text).unwrap();
    let run = |url: &str| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_eventpipe"));
        c.args(["run", "--summary-json", "--no-watch", "--delivery=at-least-once", "--shutdown-timeout=60"])
            .arg(format!("--state-file={}", state.display()))
            .arg(format!("--source=jsonl:{}", input.display()))
            .arg(format!("--sink=webhook:{url},concurrency=1,max_batch=50"))
            .stdout(Stdio::null());
        c
    };

    let (first, url, _outage) = outage_webhook(Duration::from_millis(10), OUTAGE_AFTER);
    let log = dir.path().join("first.log");
    let mut child = run(&url).stderr(std::fs::File::create(&log).unwrap()).spawn().unwrap();
    let stderr = || std::fs::read_to_string(&log).unwrap();
    let wait_for = |what: &str, done: &dyn Fn() -> bool, child: &mut std::process::Child| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done() {
            assert!(child.try_wait().unwrap().is_none(), "the run ended before {what}: {}", stderr());
            assert!(Instant::now() < deadline, "no {what}: {}", stderr());
            std::thread::sleep(Duration::from_millis(2));
        }
    };
    wait_for("write acknowledged", &|| first.len() >= TERM_AFTER, &mut child);
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    let at_signal = first.len();
    wait_for("outage", &|| first.refused.load(Ordering::SeqCst) > 0, &mut child);
    // The drain's batch backs off; a position is saved at least once a checkpoint interval.
    std::thread::sleep(eventpipe::delivery::DEFAULT_CHECKPOINT_INTERVAL * 3);
    assert!(child.try_wait().unwrap().is_none(), "still draining: {}", stderr());
    child.kill().unwrap(); // SIGKILL before the shutdown timeout
    child.wait().unwrap();
    let acknowledged = first.len();
    assert!(acknowledged >= OUTAGE_AFTER && at_signal < OUTAGE_AFTER, "{at_signal} at the signal, {acknowledged}");

    let (second, url, _endpoint) = recording_webhook::start(Duration::ZERO);
    let out = run(&url).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");

    let objects = |r: &recording_webhook::Received| -> Vec<String> {
        r.items.lock().unwrap().iter().map(|item| object_key(&item["event"])).collect()
    };
    let (before, after) = (objects(&first), objects(&second));
    let acknowledged_before: HashSet<&String> = before.iter().collect();
    let again = after.iter().filter(|o| acknowledged_before.contains(o)).count() as u64;
    // What followed the newest mark the acknowledged prefix reached: the router marks a
    // position once CHECKPOINT_EVERY_EVENTS events were numbered since the last, checking after
    // each batch of at most PREPARE_BATCH_SIZE.
    let bound = eventpipe::delivery::CHECKPOINT_EVERY_EVENTS + eventpipe::correlator::PREPARE_BATCH_SIZE as u64;
    println!(
        "{at_signal} writes acknowledged at SIGTERM, {acknowledged} before the outage; \
         {again} received again after the restart (bound {bound})"
    );
    assert!(
        again <= bound,
        "{again} of the {acknowledged} writes acknowledged before the outage ({at_signal} before the signal) \
         were sent again after the restart, more than {bound}"
    );
    assert!(stderr.contains("resuming jsonl:"), "{stderr}");
    // An uninterrupted run writes each object once: every one arrived.
    let all: HashSet<&String> = before.iter().chain(&after).collect();
    let missing: Vec<usize> = (0..EVENTS).filter(|i| !all.contains(&format!("d/obj-{i}.1"))).collect();
    assert!(missing.is_empty(), "{} objects never written, e.g. {:?}", missing.len(), &missing[..missing.len().min(5)]);
    assert_eq!(before.len() + after.len(), EVENTS + again as usize, "no object written twice but those");
}

/// A webhook endpoint that answers `200` after `latency`, recording each batch's items, until
/// it recorded `outage_after` items; from then on it answers every request `503` (counted in
/// `Received::refused`, recording nothing). Returns what it received, its URL and the runtime
/// it runs on (it stops when that is dropped).
fn outage_webhook(
    latency: Duration,
    outage_after: usize,
) -> (std::sync::Arc<common::recording_webhook::Received>, String, tokio::runtime::Runtime) {
    use common::recording_webhook::Received;
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    async fn hook(
        axum::extract::State((received, outage_after, latency)): axum::extract::State<(Arc<Received>, usize, Duration)>,
        body: String,
    ) -> axum::http::StatusCode {
        if received.len() >= outage_after {
            tokio::time::sleep(latency).await;
            received.refused.fetch_add(1, Ordering::SeqCst);
            return axum::http::StatusCode::SERVICE_UNAVAILABLE;
        }
        let batch: Value = serde_json::from_str(&body).unwrap_or_default();
        let items = batch["items"].as_array().cloned().unwrap_or_default();
        let n = items.len() as u64;
        received.items.lock().unwrap().extend(items);
        tokio::time::sleep(latency).await;
        received.answered.fetch_add(n, Ordering::SeqCst);
        axum::http::StatusCode::OK
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let received = Arc::new(Received::default());
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let app = axum::Router::new().route("/hook", axum::routing::post(hook)).with_state((
        received.clone(),
        outage_after,
        latency,
    ));
    runtime.spawn(async move { axum::serve(listener, app).await.unwrap() });
    (received, url, runtime)
}
