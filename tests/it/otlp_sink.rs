//! The OTLP logs sink (`--sink otlp:URL`): the bundled stream's writes arrive as log records at
//! a receiver that decodes them with the OpenTelemetry protobuf definitions (Python's
//! `opentelemetry-proto`, `otlp_receiver.py`; without it the test is skipped with a printed
//! line, and fails under `CI`, whose `.ci/run` installs it), one per write, named as the
//! Collector's `k8s_events` receiver names them; and, against an in-process endpoint decoding
//! with the Rust crate, `503` is retried after its `Retry-After`, `400` is not, and a partial
//! success is counted.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use eventpipe::event::{Event, ObjectReference};
use eventpipe::metrics::{SINK_PARTIAL_REJECTED, Snapshot};
use eventpipe::sink::otlp;
use eventpipe::sink::webhook::WebhookSink;
use eventpipe::sink::{EventSink, SinkError};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use prost::Message;
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A Python with `opentelemetry-proto`: the virtualenv `.ci/run` makes, else `python3`.
fn python_with_otlp_protos() -> Option<PathBuf> {
    let venv = root().join("target/ci-venv/bin/python3");
    let candidates = [venv, PathBuf::from("python3")];
    candidates.into_iter().find(|python| {
        Command::new(python)
            .args(["-c", "import opentelemetry.proto.collector.logs.v1.logs_service_pb2"])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// The Python receiver, killed when dropped.
struct Receiver(std::process::Child);

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_bundled_streams_writes_arrive_as_one_log_record_each_with_the_k8s_events_receivers_attributes() {
    let Some(python) = python_with_otlp_protos() else {
        assert!(std::env::var_os("CI").is_none(), "opentelemetry-proto (PyPI) is not installed (CI installs it)");
        println!("skipped: no Python with opentelemetry-proto (pip install opentelemetry-proto)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("records.jsonl");
    let mut child = Command::new(python)
        .arg(root().join("tests/it/otlp_receiver.py"))
        .arg(&records)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let receiver = Receiver(child);
    let port = line.trim().strip_prefix("listening on ").expect("the receiver announces its port").to_string();
    let calls = dir.path().join("calls.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(["run", "--no-watch", "--source"])
        .arg(format!("jsonl:{}", root().join("examples/data/occurrences.jsonl").display()))
        .arg(format!("--sink=otlp:http://127.0.0.1:{port}"))
        .arg(format!("--sink=jsonl:{}", calls.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    drop(receiver);

    let read = |path: &Path| -> Vec<Value> {
        std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    };
    let (records, calls) = (read(&records), read(&calls));
    assert_eq!(calls.len(), 9793, "the bundled stream's writes");
    assert_eq!(records.len(), 9793, "one log record per write");

    // The same writes: the multiset of what each record says equals that of the sink calls'
    // events (Go's omitempty leaves empty strings out of the calls' JSON).
    let text = |v: &Value| v.as_str().unwrap_or("").to_string();
    let severity = |type_: &str| match type_ {
        "Normal" => (9, "Normal".to_string()),
        "Warning" => (13, "Warning".to_string()),
        _ => (0, String::new()), // no severity, as the receiver does
    };
    type Write = (String, i64, String, String, String, String, String, (i64, String));
    let mut expected: BTreeMap<Write, usize> = BTreeMap::new();
    for call in &calls {
        let (e, o) = (&call["event"], &call["event"]["involvedObject"]);
        let write = (
            text(&e["metadata"]["name"]),
            e["count"].as_i64().unwrap_or(0),
            text(&e["reason"]),
            text(&o["namespace"]),
            text(&o["kind"]),
            text(&o["name"]),
            text(&e["message"]),
            severity(&text(&e["type"])),
        );
        *expected.entry(write).or_default() += 1;
    }
    let mut got: BTreeMap<Write, usize> = BTreeMap::new();
    let mut warnings = 0;
    for r in &records {
        let (a, res) = (&r["attributes"], &r["resource"]);
        for key in ["k8s.event.reason", "k8s.event.action", "k8s.event.start_time", "k8s.event.name", "k8s.event.uid"] {
            assert!(a[key].is_string(), "{key} in {r}");
        }
        for key in [
            "k8s.object.kind",
            "k8s.object.name",
            "k8s.object.uid",
            "k8s.object.fieldpath",
            "k8s.object.api_version",
            "k8s.object.resource_version",
            "k8s.node.name",
        ] {
            assert!(res[key].is_string(), "{key} in {r}");
        }
        let number = r["severity_number"].as_i64().unwrap();
        warnings += usize::from(number == 13);
        let write = (
            text(&a["k8s.event.name"]),
            a["k8s.event.count"].as_i64().unwrap_or(0),
            text(&a["k8s.event.reason"]),
            text(&a["k8s.namespace.name"]),
            text(&res["k8s.object.kind"]),
            text(&res["k8s.object.name"]),
            text(&r["body"]),
            (number, text(&r["severity_text"])),
        );
        *got.entry(write).or_default() += 1;
        assert!(r["time_unix_nano"].as_u64().unwrap() > 0 && r["observed_time_unix_nano"].as_u64().unwrap() > 0);
        assert_eq!(r["scope"], "eventpipe");
    }
    assert!(got == expected, "the records are not the writes");
    assert!(warnings > 0, "the stream has Warning events");
}

/// How the in-process endpoint answers, in turn; then `200`.
#[derive(Default)]
struct Endpoint {
    script: Mutex<Vec<axum::response::Response>>,
    requests: Mutex<Vec<(Instant, usize)>>,
    records: AtomicUsize,
}

async fn logs(State(endpoint): State<Arc<Endpoint>>, headers: HeaderMap, body: Bytes) -> axum::response::Response {
    assert_eq!(headers["content-type"], "application/x-protobuf");
    let request = ExportLogsServiceRequest::decode(body).expect("an ExportLogsServiceRequest");
    let n: usize = request.resource_logs.iter().flat_map(|r| &r.scope_logs).map(|s| s.log_records.len()).sum();
    endpoint.requests.lock().unwrap().push((Instant::now(), n));
    let answer = {
        let mut script = endpoint.script.lock().unwrap();
        (!script.is_empty()).then(|| script.remove(0))
    };
    match answer {
        Some(answer) => answer,
        None => {
            endpoint.records.fetch_add(n, Ordering::SeqCst);
            (StatusCode::OK, ExportLogsServiceResponse::default().encode_to_vec()).into_response()
        }
    }
}

async fn start(script: Vec<axum::response::Response>) -> (Arc<Endpoint>, String) {
    let endpoint = Arc::new(Endpoint { script: Mutex::new(script), ..Endpoint::default() });
    let app = axum::Router::new().route("/v1/logs", axum::routing::post(logs)).with_state(endpoint.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (endpoint, url)
}

fn otlp_sink(url: &str) -> WebhookSink {
    let mut config = otlp::config("otlp-test", url);
    config.backoff = crate::common::quick_backoff();
    WebhookSink::new(config).unwrap()
}

fn event(name: &str) -> Event {
    let mut e = Event::default();
    e.metadata.name = name.into();
    e.involved_object = ObjectReference { kind: "Pod".into(), name: "web".into(), ..ObjectReference::default() };
    e.type_ = "Normal".into();
    e
}

#[tokio::test]
async fn a_503_is_retried_after_its_retry_after_and_a_400_is_not() {
    let unavailable = (StatusCode::SERVICE_UNAVAILABLE, [("retry-after", "1")], "busy").into_response();
    let (endpoint, url) = start(vec![unavailable]).await;
    let sink = otlp_sink(&url);
    sink.create(&event("e.1")).await.expect("acknowledged after the retry");
    {
        let requests = endpoint.requests.lock().unwrap();
        assert_eq!(requests.len(), 2, "the 503, then the retry");
        let waited = requests[1].0 - requests[0].0;
        assert!(waited >= Duration::from_millis(950), "Retry-After: 1 honoured (waited {waited:?})");
    }
    assert_eq!((endpoint.records.load(Ordering::SeqCst), sink.stats().retries), (1, 1));

    let (endpoint, url) = start(vec![(StatusCode::BAD_REQUEST, "bad").into_response()]).await;
    let sink = otlp_sink(&url);
    match sink.create(&event("e.2")).await {
        Err(SinkError::Status(status)) => assert_eq!(status.code, 400),
        other => panic!("a 400 fails the write for good: {other:?}"),
    }
    assert_eq!(endpoint.requests.lock().unwrap().len(), 1, "not retried");
    assert_eq!(sink.stats().failed, 1);
}

#[tokio::test]
async fn a_partial_success_acknowledges_the_batch_and_counts_the_rejected_records() {
    let partial = ExportLogsServiceResponse {
        partial_success: Some(ExportLogsPartialSuccess {
            rejected_log_records: 1,
            error_message: "one record too old".into(),
        }),
    };
    let answer = (StatusCode::OK, partial.encode_to_vec()).into_response();
    let (endpoint, url) = start(vec![answer]).await;
    let sink = otlp_sink(&url);
    sink.create(&event("e.1")).await.expect("a partial success acknowledges");
    let stats = sink.stats();
    assert_eq!((stats.acked, stats.rejected, stats.retries), (1, 1, 0), "counted, not retried");
    assert_eq!(endpoint.requests.lock().unwrap().len(), 1);
    let mut snapshot = Snapshot::default();
    snapshot.add_webhook(&sink);
    assert_eq!(snapshot.get(&SINK_PARTIAL_REJECTED, &[("sink", "otlp-test")]), Some(1));
}
