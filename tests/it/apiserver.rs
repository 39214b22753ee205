//! `eventpipe run --sink k8s` against a real kube-apiserver (v1.19.0 on etcd, started by
//! [`crate::common::apiserver`]): what the server stores, checked through its REST API and
//! `kubectl`, for client-go's `tools/events` recording (`--events-api events.k8s.io`: creates,
//! series patches, the 409 and 404 paths) and for its `tools/record` recording (core/v1:
//! create, then strategic-merge patches of `count`).
//!
//! Each test works in its own namespace. Without the control plane's pieces (`../shared`,
//! etcd) the tests are skipped, or fail under `CI`.

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::common::apiserver::{ControlPlane, control_plane_or_skip};

/// One core/v1 event of Pod `object` in `ns`, as kubelet records it (with the reporting fields
/// a events.k8s.io recording takes as its controller and instance).
fn event(ns: &str, name: &str, object: &str, reason: &str, message: &str, at: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": ns},
        "involvedObject": {"kind": "Pod", "namespace": ns, "name": object, "uid": format!("uid-{object}"), "apiVersion": "v1"},
        "reason": reason, "message": message, "type": "Warning",
        "source": {"component": "kubelet", "host": "node-1"},
        "firstTimestamp": at, "lastTimestamp": at, "count": 1,
        "reportingComponent": "kubelet", "reportingInstance": "node-1"
    })
}

fn events_v1(ns: &str) -> String {
    format!("/apis/events.k8s.io/v1/namespaces/{ns}/events")
}

fn core_v1(ns: &str) -> String {
    format!("/api/v1/namespaces/{ns}/events")
}

/// `path`'s answer once `done` holds for it (`None` while the object does not exist yet),
/// polled for up to 60 s.
fn wait_for(plane: &ControlPlane, path: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (code, answer) = plane.request("GET", path, None);
        if code == 200 && done(&answer) {
            return answer;
        }
        assert!(Instant::now() < deadline, "{what}: never happened; GET {path} answers {code} {answer}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn micro_time(v: &Value) -> DateTime<Utc> {
    let s = v.as_str().unwrap_or_else(|| panic!("not a time: {v}"));
    DateTime::parse_from_rfc3339(s).unwrap_or_else(|e| panic!("{s}: {e}")).with_timezone(&Utc)
}

/// A running `eventpipe run --source http --sink k8s` writing to `plane`: events go in through
/// `POST /ingest`, one write at a time (`--workers 1 --max-in-flight 1`), so they reach the
/// server in the order they were ingested.
struct Run {
    child: Option<Child>,
    ingest: String,
    stderr: Arc<Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Run {
    fn start(plane: &ControlPlane, extra: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
            .args(["run", "--source=http:127.0.0.1:0", "--no-watch", "--sink=k8s", "--summary-json"])
            .args(["--workers=1", "--max-in-flight=1"])
            .arg(format!("--kubeconfig={}", plane.kubeconfig.display()))
            .args(extra)
            .env("EVENTPIPE_INGEST_TOKEN", "")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = crate::common::stderr_lines(&mut child);
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let ingest = loop {
            let line = lines
                .recv_timeout(Duration::from_secs(120))
                .unwrap_or_else(|_| panic!("no ingest address announced: {:?}", stderr.lock().unwrap()));
            let addr = line.split_once("HTTP ingest listening on ").map(|(_, addr)| addr.trim().to_string());
            stderr.lock().unwrap().push(line);
            if let Some(addr) = addr {
                break addr;
            }
        };
        let collected = stderr.clone();
        let reader = std::thread::spawn(move || {
            while let Ok(line) = lines.recv() {
                collected.lock().unwrap().push(line);
            }
        });
        Self { child: Some(child), ingest, stderr, reader: Some(reader) }
    }

    /// `POST /ingest` of `events` (JSON lines).
    fn ingest(&self, events: &[Value]) {
        use std::io::{Read, Write};
        let body: String = events.iter().map(|e| format!("{e}\n")).collect();
        let request = format!(
            "POST /ingest HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        );
        let mut stream = std::net::TcpStream::connect(&self.ingest).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }

    /// SIGTERM (the run drains and writes what it still has), then its JSON summary and stderr.
    fn finish(mut self) -> (Value, String) {
        let mut child = self.child.take().unwrap();
        let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        let status = child.wait().unwrap();
        self.reader.take().unwrap().join().unwrap();
        let stderr = self.stderr.lock().unwrap().join("\n");
        assert!(status.success(), "{status}: {stderr}");
        let summary = stderr.lines().rev().find_map(|l| serde_json::from_str(l).ok()).expect("a JSON summary");
        (summary, stderr)
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `eventpipe run` of `stream` from a JSON-lines file into `plane` with `extra` flags, one write
/// at a time: its JSON summary and stderr once it has exited successfully.
fn run_file(plane: &ControlPlane, stream: &[Value], extra: &[&str]) -> (Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, stream.iter().map(|e| format!("{e}\n")).collect::<String>()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(["run", "--summary-json", "--no-watch", "--sink=k8s", "--workers=1", "--max-in-flight=1"])
        .arg(format!("--source=jsonl:{}", input.display()))
        .arg(format!("--kubeconfig={}", plane.kubeconfig.display()))
        .args(extra)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let summary = stderr.lines().rev().find_map(|l| serde_json::from_str(l).ok()).expect("a JSON summary");
    (summary, stderr)
}

fn counts(summary: &Value) -> [Option<u64>; 3] {
    ["created", "patched", "series_counted"].map(|k| summary[k].as_u64())
}

/// Occurrence `n` of one isomorphic key (object `a`, BackOff), 10 s apart.
fn back_off(ns: &str, n: u32) -> Value {
    let at = format!("2025-01-01T00:00:{:02}Z", n * 10);
    event(ns, &format!("a.{n}"), "a", "BackOff", "Back-off restarting failed container", &at)
}

/// client-go's `tools/events` on a real server, one occurrence at a time: the first event of an
/// isomorphic key is created as an events.k8s.io/v1 Event (no series, the deprecated fields
/// unset), the second patches `series` onto it (count 2, `lastObservedTime` the time it was
/// observed), later ones are only counted (the server's copy does not change), and the end of
/// the run sends the series' final count.
#[test]
fn events_k8s_io_series_are_created_patched_and_finished_on_the_real_apiserver() {
    let Some(plane) = control_plane_or_skip() else { return };
    let ns = plane.namespace("series");
    let a = |n: u32| back_off(&ns, n);
    let run = Run::start(plane, &["--events-api=events.k8s.io"]);
    let a1 = format!("{}/a.1", events_v1(&ns));

    run.ingest(&[a(1)]);
    let created = wait_for(plane, &a1, "a.1 created", |_| true);
    assert_eq!(created["apiVersion"], "events.k8s.io/v1");
    assert!(created.get("series").is_none(), "a first occurrence has no series: {created}");
    assert_eq!(created["eventTime"], "2025-01-01T00:00:10.000000Z", "the event's first timestamp: {created}");
    assert_eq!(
        [&created["reportingController"], &created["reportingInstance"], &created["action"], &created["reason"]],
        ["kubelet", "node-1", "BackOff", "BackOff"]
    );
    assert_eq!(created["regarding"], a(1)["involvedObject"]);
    assert_eq!(
        (&created["note"], &created["type"]),
        (&json!("Back-off restarting failed container"), &json!("Warning"))
    );
    // The deprecated fields as client-go's tools/events leaves them (unset), in the server's
    // serialisation: `deprecatedSource` is a struct (`{}`), the timestamps `null`, the count
    // omitted.
    assert_eq!(created["deprecatedSource"], json!({}), "{created}");
    assert_eq!(
        (&created["deprecatedFirstTimestamp"], &created["deprecatedLastTimestamp"]),
        (&Value::Null, &Value::Null)
    );
    assert!(created.get("deprecatedCount").is_none(), "{created}");

    let before_second = Utc::now();
    run.ingest(&[a(2)]);
    let second = wait_for(plane, &a1, "the series started", |e| e["series"]["count"] == 2);
    let observed = micro_time(&second["series"]["lastObservedTime"]);
    assert!(
        observed >= before_second - chrono::TimeDelta::milliseconds(1) && observed <= Utc::now(),
        "lastObservedTime is when the occurrence was observed (the wall clock, as client-go): {second}"
    );
    assert_eq!(second["metadata"]["uid"], created["metadata"]["uid"], "patched, not created again");

    // The third and fourth occurrences are only counted: once b.1 (written after them, one
    // write at a time) is on the server, a.1 is still as the second occurrence left it.
    let before_fourth = Utc::now();
    run.ingest(&[a(3), a(4), event(&ns, "b.1", "b", "Pulled", "pulled image", "2025-01-01T00:01:00Z")]);
    let b1 = format!("{}/b.1", events_v1(&ns));
    let b = wait_for(plane, &b1, "b.1 created", |_| true);
    assert!(b.get("series").is_none(), "a singleton has no series: {b}");
    assert_eq!(plane.get(&a1)["metadata"]["resourceVersion"], second["metadata"]["resourceVersion"]);

    let (summary, _) = run.finish();
    assert_eq!(counts(&summary), [Some(2), Some(1), Some(2)], "{summary}");
    let last = plane.get(&a1);
    assert_eq!(last["series"]["count"], 4, "the final count, sent at the end of the run: {last}");
    let last_observed = micro_time(&last["series"]["lastObservedTime"]);
    assert!(last_observed >= before_fourth && last_observed > observed, "{last}");
    assert!(
        last["series"]["lastObservedTime"].as_str().unwrap().len() == "2025-01-01T00:00:00.000000Z".len(),
        "a MicroTime: {last}"
    );
    let list = plane.get(&events_v1(&ns));
    let names: Vec<&str> =
        list["items"].as_array().unwrap().iter().map(|e| e["metadata"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["a.1", "b.1"], "one event per isomorphic key");
}

/// The core/v1 view of events.k8s.io series (the apiserver converts between the two): through
/// `kubectl get events -o json`, `series` is there with its count and `count` is not
/// (`deprecatedCount` was never set); the reporting fields, `action` and `eventTime` carry
/// over; `source` is empty and the first / last timestamps are null. `kubectl get events -o
/// wide` prints the server's table: COUNT is `series.count + 1` for a series in v1.19.0 (its
/// printer dates from when client-go started a series at count 1) and 1 for a singleton.
#[test]
fn kubectl_shows_the_core_v1_view_of_events_k8s_io_series() {
    let Some(plane) = control_plane_or_skip() else { return };
    let Some(kubectl) = crate::common::kubectl_or_skip() else { return };
    let ns = plane.namespace("kubectl");
    let at = |s: u32| format!("2025-01-01T00:00:{s:02}Z");
    let stream = [
        event(&ns, "a.1", "a", "BackOff", "Back-off restarting failed container", &at(0)),
        event(&ns, "a.2", "a", "BackOff", "Back-off restarting failed container", &at(10)),
        event(&ns, "a.3", "a", "BackOff", "Back-off restarting failed container", &at(20)),
        event(&ns, "b.1", "b", "Pulled", "pulled image", &at(30)),
    ];
    let (summary, _) = run_file(plane, &stream, &["--events-api=events.k8s.io"]);
    assert_eq!(counts(&summary), [Some(2), Some(1), Some(1)], "{summary}");

    let kubectl_get = |output: &str| {
        let out = Command::new(&kubectl)
            .arg(format!("--kubeconfig={}", plane.kubeconfig.display()))
            .args(["get", "events", "-n", &ns, "-o", output])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let list: Value = serde_json::from_str(&kubectl_get("json")).unwrap();
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{list}");
    let (a, b) = (&items[0], &items[1]);
    assert_eq!((a["metadata"]["name"].as_str(), b["metadata"]["name"].as_str()), (Some("a.1"), Some("b.1")));
    assert_eq!((a["apiVersion"].as_str(), a["kind"].as_str()), (Some("v1"), Some("Event")));
    assert_eq!(a["series"]["count"], 3, "{a}");
    assert!(a["series"]["lastObservedTime"].is_string(), "{a}");
    assert!(a.get("count").is_none() && b.get("count").is_none(), "count stays unset: {list}");
    assert!(b.get("series").is_none(), "{b}");
    assert_eq!(
        [&a["reportingComponent"], &a["reportingInstance"], &a["action"], &a["eventTime"]],
        ["kubelet", "node-1", "BackOff", "2025-01-01T00:00:00.000000Z"]
    );
    assert_eq!((&a["involvedObject"], &a["message"]), (&stream[0]["involvedObject"], &stream[0]["message"]));
    assert_eq!(
        (&a["source"], &a["firstTimestamp"], &a["lastTimestamp"]),
        (&json!({}), &Value::Null, &Value::Null),
        "the deprecated fields were not set: {a}"
    );

    let wide = kubectl_get("wide");
    let rows: Vec<Vec<&str>> =
        wide.lines().map(|l| l.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect()).collect();
    let header = &rows[0];
    let column = |name: &str| header.iter().position(|c| *c == name).unwrap_or_else(|| panic!("{name}: {wide}"));
    let (count, name, source) = (column("COUNT"), column("NAME"), column("SOURCE"));
    let by_name: std::collections::BTreeMap<&str, (&str, &str)> =
        rows[1..].iter().map(|r| (r[name - 1], (r[count - 1], r[source - 1]))).collect();
    // (SUBOBJECT is empty, so every cell after it sits one column to the left.)
    assert_eq!(by_name["a.1"], ("4", "kubelet, node-1"), "{wide}");
    assert_eq!(by_name["b.1"], ("1", "kubelet, node-1"), "{wide}");
}

/// An events.k8s.io create of a name the server already has is answered `409 AlreadyExists`:
/// client-go's `tools/events` drops the event (a singleton is not retried) and the server's
/// event stays as it was; the run goes on with the next one.
#[test]
fn an_events_k8s_io_create_of_an_existing_name_is_dropped() {
    let Some(plane) = control_plane_or_skip() else { return };
    let ns = plane.namespace("conflict");
    let existing = json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "x.1", "namespace": ns},
        "eventTime": "2024-12-31T00:00:00.000000Z",
        "reportingController": "other-controller", "reportingInstance": "other-1",
        "action": "Sync", "reason": "Synced", "type": "Normal", "note": "written first",
        "regarding": {"kind": "Pod", "namespace": ns, "name": "x"},
    });
    let (code, before) = plane.request("POST", &events_v1(&ns), Some(&existing));
    assert_eq!(code, 201, "{before}");

    let stream = [
        event(&ns, "x.1", "x", "BackOff", "Back-off restarting failed container", "2025-01-01T00:00:00Z"),
        event(&ns, "y.1", "y", "Pulled", "pulled image", "2025-01-01T00:00:01Z"),
    ];
    let (summary, stderr) = run_file(plane, &stream, &["--events-api=events.k8s.io"]);
    assert_eq!(counts(&summary), [Some(1), Some(0), Some(0)], "{summary}");
    assert_eq!((summary["dropped"].as_u64(), summary["gave_up"].as_u64()), (Some(1), Some(0)), "{summary}");
    assert_eq!(summary["rejected"], json!({"AlreadyExists": 1}), "{summary}");
    assert!(stderr.lines().any(|l| l.contains("server rejected event") && l.contains("AlreadyExists")), "{stderr}");

    let after = plane.get(&format!("{}/x.1", events_v1(&ns)));
    assert_eq!(after["metadata"]["resourceVersion"], before["metadata"]["resourceVersion"], "{after}");
    assert_eq!((&after["note"], &after["reportingController"]), (&json!("written first"), &json!("other-controller")));
    plane.get(&format!("{}/y.1", events_v1(&ns)));
}

/// A series patch of an event deleted from the server is answered `404 NotFound`: client-go's
/// `tools/events` then creates the event anew, with its series (count 2), under the same name.
#[test]
fn an_events_k8s_io_series_patch_of_a_deleted_event_creates_it_again() {
    let Some(plane) = control_plane_or_skip() else { return };
    let ns = plane.namespace("recreate");
    let a = |n: u32| back_off(&ns, n);
    let run = Run::start(plane, &["--events-api=events.k8s.io"]);
    let a1 = format!("{}/a.1", events_v1(&ns));
    run.ingest(&[a(1)]);
    let first = wait_for(plane, &a1, "a.1 created", |_| true);
    let (code, answer) = plane.request("DELETE", &a1, None);
    assert_eq!(code, 200, "{answer}");
    assert_eq!(plane.request("GET", &a1, None).0, 404);

    run.ingest(&[a(2)]);
    let again = wait_for(plane, &a1, "a.1 created again", |_| true);
    assert_ne!(again["metadata"]["uid"], first["metadata"]["uid"], "a new object: {again}");
    assert_eq!(again["series"]["count"], 2, "created with its series: {again}");
    for field in ["eventTime", "reportingController", "reportingInstance", "action", "reason", "regarding", "note"] {
        assert_eq!(again[field], first[field], "{field}");
    }

    let (summary, stderr) = run.finish();
    assert_eq!(counts(&summary), [Some(2), Some(0), Some(0)], "the 404 and the create after it: {summary}");
    assert_eq!(summary["dropped"].as_u64(), Some(0), "{summary}\n{stderr}");
    assert_eq!(plane.get(&a1)["series"]["count"], 2);
}

/// client-go's `tools/record` on a real server (`--sink k8s`, core/v1): the first event is
/// created under its own name, repeats are strategic-merge patches of that event's `count`,
/// `lastTimestamp` and `message`; an event that arrives with count > 1 and is unknown to the
/// correlator (from another cluster, with that cluster's `uid` and `resourceVersion`) is
/// written whole, and neither its `uid` nor its `resourceVersion` reaches the server as a
/// precondition (the server would refuse both: `409 Conflict`).
#[test]
fn core_v1_events_are_created_then_patched_on_the_real_apiserver() {
    let Some(plane) = control_plane_or_skip() else { return };
    let ns = plane.namespace("corev1");
    let at = |s: u32| format!("2025-01-01T00:00:{s:02}Z");
    let foreign = |mut e: Value| {
        e["metadata"]["uid"] = json!("3f1e0c1a-0000-4000-8000-000000000001");
        e["metadata"]["resourceVersion"] = json!("987654");
        e
    };
    let mut c = foreign(event(&ns, "c.1", "c", "Unhealthy", "Readiness probe failed", &at(5)));
    c["count"] = json!(5);
    c["lastTimestamp"] = json!(at(25));
    let stream = [
        foreign(event(&ns, "a.1", "a", "BackOff", "Back-off restarting failed container", &at(0))),
        event(&ns, "a.2", "a", "BackOff", "Back-off restarting failed container", &at(10)),
        event(&ns, "a.3", "a", "BackOff", "Back-off restarting failed container", &at(20)),
        c,
    ];
    let (summary, stderr) = run_file(plane, &stream, &[]);
    assert_eq!(summary["dropped"].as_u64(), Some(0), "{summary}\n{stderr}");
    assert_eq!(summary["rejected"], json!({}), "{summary}");
    assert_eq!((summary["created"].as_u64(), summary["patched"].as_u64()), (Some(1), Some(3)), "{summary}");

    let list = plane.get(&core_v1(&ns));
    let items = list["items"].as_array().unwrap();
    let names: Vec<&str> = items.iter().map(|e| e["metadata"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["a.1", "c.1"], "repeats are written to the first event's name: {list}");
    let (a, c) = (&items[0], &items[1]);
    assert_eq!(a["count"], 3, "{a}");
    assert_eq!((&a["firstTimestamp"], &a["lastTimestamp"]), (&json!(at(0)), &json!(at(20))), "{a}");
    assert_eq!((&a["message"], &a["source"]), (&stream[0]["message"], &stream[0]["source"]));
    assert_ne!(a["metadata"]["uid"], stream[0]["metadata"]["uid"], "the server's own uid");
    assert_eq!(c["count"], 5, "{c}");
    assert_eq!((&c["firstTimestamp"], &c["lastTimestamp"]), (&json!(at(5)), &json!(at(25))), "{c}");
    assert_ne!(c["metadata"]["uid"], stream[3]["metadata"]["uid"], "the server's own uid");
    assert_ne!(c["metadata"]["resourceVersion"], "987654");
}

/// `validate --connect` reaches the real API server with the kubeconfig `run` would use.
#[test]
fn validate_connect_reaches_the_real_apiserver() {
    let Some(plane) = control_plane_or_skip() else { return };
    let out = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(["validate", "--connect", "--sink=k8s", "--source=k8s"])
        .arg(format!("--kubeconfig={}", plane.kubeconfig.display()))
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("every server reached"), "{stdout}");
}

/// `POST /api/v1/namespaces/{ns}/events` of `body` to HTTP ingest (in process): the status
/// code and the answer.
fn ingest_create(ns: &str, body: &Value) -> (u16, Value) {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let (tx, _rx) = tokio::sync::mpsc::channel(64);
        let ingest = eventpipe::source::http::Ingest::new(eventpipe::source::http::IngestConfig::default(), tx);
        let request = axum::http::Request::builder()
            .method("POST")
            .uri(core_v1(ns))
            .header("content-type", "application/json")
            .body(axum::body::Body::from(body.to_string()))
            .unwrap();
        let response = ingest.router().oneshot(request).await.unwrap();
        let code = response.status().as_u16();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    })
}

/// Events the apiserver refuses (and some it stores), created through the real apiserver and
/// through HTTP ingest: the same status code, and for a refusal the same `422 Invalid` —
/// message, and `details.causes` (type, field, message) in the same order.
#[test]
fn ingest_refuses_what_the_apiserver_refuses_with_the_same_causes() {
    let Some(plane) = control_plane_or_skip() else { return };
    let ns = plane.namespace("validation");
    let at = "2025-01-01T00:00:00.000000Z";
    let mut cases = vec![
        ("no involvedObject, no reason", json!({"metadata": {"name": "bare"}, "message": "m"})),
        (
            "another namespace's object",
            json!({"metadata": {"name": "other"}, "involvedObject": {"kind": "Pod", "namespace": "elsewhere", "name": "p"}, "reason": "R"}),
        ),
        (
            "an eventTime and nothing else",
            json!({"metadata": {"name": "new"}, "involvedObject": {"namespace": ns}, "eventTime": at}),
        ),
        (
            "bad reporting fields",
            json!({
                "metadata": {"name": "reporting"}, "involvedObject": {"namespace": ns}, "eventTime": at,
                "reportingComponent": "-bad/x/y", "reportingInstance": "i".repeat(129), "action": "a".repeat(129),
                "reason": "r".repeat(129), "message": "m".repeat(1025)
            }),
        ),
        (
            "a qualified controller",
            json!({
                "metadata": {"name": "qualified"}, "involvedObject": {"namespace": ns}, "eventTime": at,
                "reportingComponent": "example.com/my-controller", "reportingInstance": "i-1", "action": "Act", "reason": "Why"
            }),
        ),
        (
            "a bad controller prefix",
            json!({
                "metadata": {"name": "prefix"}, "involvedObject": {"namespace": ns}, "eventTime": at,
                "reportingComponent": "Example_com/ok", "reportingInstance": "i-1", "action": "Act", "reason": "Why"
            }),
        ),
        (
            "a name with a percent sign",
            json!({"metadata": {"name": "a%b"}, "involvedObject": {"namespace": ns}, "reason": "R"}),
        ),
        (
            "a kubelet event",
            json!({"metadata": {"name": "good"}, "involvedObject": {"kind": "Pod", "namespace": ns, "name": "p"}, "reason": "R"}),
        ),
    ];
    cases.push((
        "no name",
        json!({"metadata": {"generateName": "gen-"}, "involvedObject": {"namespace": ns}, "eventTime": at}),
    ));
    let mut refused = 0;
    for (what, body) in &cases {
        let (code, apiserver) = plane.request("POST", &core_v1(&ns), Some(body));
        let (ours, ingest) = ingest_create(&ns, body);
        assert_eq!(ours, code, "{what}: the apiserver answers {code} {apiserver}, ingest {ours} {ingest}");
        if code != 422 {
            continue;
        }
        refused += 1;
        // A generated name (`generateName` and 5 random characters) is the one difference.
        let name = |v: &Value| v["details"]["name"].as_str().unwrap_or_default().to_string();
        let (theirs_name, ours_name) = (name(&apiserver), name(&ingest));
        assert_eq!(ours_name.len(), theirs_name.len(), "{what}: {ours_name} / {theirs_name}");
        for key in ["reason", "message"] {
            let ours = ingest[key].to_string().replace(&ours_name, &theirs_name);
            assert_eq!(ours, apiserver[key].to_string(), "{what}: {key}");
        }
        assert_eq!(ingest["details"]["kind"], apiserver["details"]["kind"], "{what}");
        assert_eq!(ingest["details"]["causes"], apiserver["details"]["causes"], "{what}: causes");
    }
    assert_eq!(refused, 7, "the cases the apiserver refuses");
}
