//! The log-store sinks (`loki:`, `elasticsearch:`, `splunk:`) against a receiver implementing
//! the part of each API they use (`log_store_receiver.py`: Loki's push API in JSON and in
//! snappy-compressed protobuf decoded with a descriptor of Loki's `push.proto`, Elasticsearch's
//! `_bulk` with items answered `429` / `503` on their first attempt, Splunk HEC with its token
//! and a `503` "Server is busy"): the bundled stream's writes each arrive once. Without a Python
//! with `protobuf` and `cramjam` the CLI tests are skipped with a printed line (and fail under
//! `CI`, whose `.ci/run` installs them). Against in-process endpoints: a bulk answer's items
//! with mixed statuses (only the `429` / `5xx` ones sent again, a mapping error failing its write
//! for good), `429` with `Retry-After`, and `413` splitting a batch.

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use eventpipe::event::{Event, ObjectReference};
use eventpipe::sink::elasticsearch::{self, ElasticsearchOptions};
use eventpipe::sink::loki::{self, LokiOptions};
use eventpipe::sink::webhook::{WebhookConfig, WebhookSink};
use eventpipe::sink::{EventSink, SinkError};
use serde_json::{Value, json};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A Python with `protobuf` and `cramjam`: the virtualenv `.ci/run` makes, else `python3`.
fn python_or_skip() -> Option<PathBuf> {
    let venv = root().join("target/ci-venv/bin/python3");
    let found = [venv, PathBuf::from("python3")].into_iter().find(|python| {
        Command::new(python).args(["-c", "import google.protobuf, cramjam"]).output().is_ok_and(|o| o.status.success())
    });
    if found.is_none() {
        assert!(std::env::var_os("CI").is_none(), "protobuf and cramjam (PyPI) are not installed (CI installs them)");
        println!("skipped: no Python with protobuf and cramjam (pip install protobuf cramjam)");
    }
    found
}

/// The Python receiver of `kind`, writing what it receives to `out`; stopped (SIGTERM, so that
/// it writes its summary) when dropped.
struct Receiver {
    child: std::process::Child,
    port: String,
}

impl Receiver {
    fn start(python: &Path, kind: &str, out: &Path) -> Self {
        let mut child = Command::new(python)
            .arg(root().join("tests/it/log_store_receiver.py"))
            .args([kind.as_ref(), out.as_os_str()])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().strip_prefix("listening on ").expect("the receiver announces its port").to_string();
        Self { child, port }
    }

    fn stop(mut self) {
        self.terminate();
    }

    fn terminate(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let _ = self.child.wait();
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.terminate();
        }
    }
}

/// Runs the bundled stream through `sink` and a JSON-lines sink; returns the JSON-lines calls.
fn run_bundled_stream(sink: &str, env: &[(&str, &str)], dir: &Path) -> Vec<Value> {
    let calls = dir.join("calls.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(["run", "--no-watch", "--source"])
        .arg(format!("jsonl:{}", root().join("examples/data/occurrences.jsonl").display()))
        .arg(format!("--sink={sink}"))
        .arg(format!("--sink=jsonl:{}", calls.display()))
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    read_lines(&calls)
}

fn read_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The writes (event name and count) of the sink calls, with how often each was made.
fn writes(calls: &[Value]) -> BTreeMap<(String, i64), usize> {
    let mut writes = BTreeMap::new();
    for call in calls {
        let e = &call["event"];
        let key = (e["metadata"]["name"].as_str().unwrap().to_string(), e["count"].as_i64().unwrap_or(0));
        *writes.entry(key).or_default() += 1;
    }
    writes
}

/// What the receiver wrote: the records, and its summary.
fn received(path: &Path) -> (Vec<Value>, Value) {
    let mut lines = read_lines(path);
    let summary = lines.pop().expect("a summary line");
    (lines, summary["summary"].clone())
}

fn received_writes(records: &[Value]) -> BTreeMap<(String, i64), usize> {
    let mut writes = BTreeMap::new();
    for r in records {
        *writes.entry((r["name"].as_str().unwrap().to_string(), r["count"].as_i64().unwrap_or(0))).or_default() += 1;
    }
    writes
}

#[test]
fn the_bundled_streams_writes_reach_loki_once_each_as_json_and_as_protobuf() {
    let Some(python) = python_or_skip() else { return };
    for (format, options) in [("json", ""), ("protobuf", ",format=protobuf,structured_metadata=true")] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("received.jsonl");
        let receiver = Receiver::start(&python, "loki", &out);
        let calls = run_bundled_stream(&format!("loki:http://127.0.0.1:{}{options}", receiver.port), &[], dir.path());
        receiver.stop();
        let (records, summary) = received(&out);
        assert_eq!(calls.len(), 9793, "the bundled stream's writes");
        assert_eq!(summary["out_of_order"], 0, "{format}: every push had each stream's entries in time order");
        assert!(received_writes(&records) == writes(&calls), "{format}: the entries are not the writes, once each");
        let mut streams = BTreeSet::new();
        for r in &records {
            let (labels, event) = (&r["labels"], &r["event"]);
            let o = &event["involvedObject"];
            // The default labels, each from its field; an empty field is left out.
            for (label, value) in [("namespace", &o["namespace"]), ("kind", &o["kind"]), ("reason", &event["reason"])] {
                assert_eq!(
                    labels.get(label),
                    value.as_str().filter(|v| !v.is_empty()).map(Value::from).as_ref(),
                    "{r}"
                );
            }
            let time = event["lastTimestamp"].as_str().expect("the stream's events have a lastTimestamp");
            let seconds = chrono::DateTime::parse_from_rfc3339(time).unwrap().timestamp();
            // The line's lastTimestamp is written to the second (metav1.Time); the entry keeps ns.
            assert_eq!(
                r["ts"].as_i64().map(|ns| ns.div_euclid(1_000_000_000)),
                Some(seconds),
                "the entry's time is lastTimestamp"
            );
            if format == "protobuf" {
                assert_eq!(r["metadata"]["event_name"], event["metadata"]["name"], "structured metadata");
                assert_eq!(r["metadata"]["count"], event["count"].to_string());
            }
            streams.insert(labels.to_string());
        }
        assert!(streams.len() > 10, "a stream per label set ({} streams)", streams.len());
    }
}

#[test]
fn the_bundled_streams_writes_reach_elasticsearch_once_each_retried_items_not_duplicated() {
    let Some(python) = python_or_skip() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("received.jsonl");
    let receiver = Receiver::start(&python, "elasticsearch", &out);
    let started = Instant::now();
    let calls = run_bundled_stream(
        &format!("elasticsearch:http://127.0.0.1:{},data_stream=logs-kubernetes.events-default", receiver.port),
        &[("ELASTICSEARCH_USERNAME", "elastic"), ("ELASTICSEARCH_PASSWORD", "changeme")],
        dir.path(),
    );
    let took = started.elapsed();
    receiver.stop();
    let (records, summary) = received(&out);
    assert_eq!(calls.len(), 9793);
    assert_eq!(summary["whole_refusals"], 1, "the first request was answered 429 as a whole");
    assert!(summary["retried_items"].as_u64().unwrap() > 1000, "items answered 429 / 503: {summary}");
    assert_eq!(summary["duplicates"], 0, "an item written is never sent again");
    let ids: BTreeSet<&str> = records.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), records.len(), "one document per _id");
    assert!(received_writes(&records) == writes(&calls), "the documents are not the writes, once each");
    for r in &records {
        assert_eq!((r["op"].as_str(), r["index"].as_str()), (Some("create"), Some("logs-kubernetes.events-default")));
        assert!(r["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')), "@timestamp: {r}");
    }
    println!("elasticsearch: {} documents in {took:?}, {summary}", records.len());
}

#[test]
fn the_bundled_streams_writes_reach_splunk_hec_once_each_with_the_token_from_a_file() {
    let Some(python) = python_or_skip() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("received.jsonl");
    let token = dir.path().join("hec-token");
    std::fs::write(&token, "test-token\n").unwrap();
    let receiver = Receiver::start(&python, "splunk", &out);
    let calls = run_bundled_stream(
        &format!("splunk:http://127.0.0.1:{},index=kubernetes", receiver.port),
        &[("SPLUNK_HEC_TOKEN_FILE", token.to_str().unwrap())],
        dir.path(),
    );
    receiver.stop();
    let (records, summary) = received(&out);
    assert_eq!(summary["whole_refusals"], 1, "the first request was answered 503 and retried");
    assert!(received_writes(&records) == writes(&calls), "the HEC events are not the writes, once each");
    for r in &records {
        assert_eq!((r["sourcetype"].as_str(), r["source"].as_str()), (Some("kube:events"), Some("eventpipe")));
        assert_eq!(r["index"], "kubernetes");
        assert!(r["time"].as_f64().unwrap() > 1.5e9, "{r}");
    }

    // A wrong token: HEC's 403 code 4, quoted, and the run goes on (the writes fail for good).
    let receiver = Receiver::start(&python, "splunk", &out);
    let wrong = dir.path().join("wrong-token");
    std::fs::write(&wrong, "not-the-token").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(["run", "--no-watch", "--source"])
        .arg(format!("jsonl:{}", root().join("examples/data/occurrences.jsonl").display()))
        .arg(format!("--sink=splunk:http://127.0.0.1:{}", receiver.port))
        .env("SPLUNK_HEC_TOKEN_FILE", &wrong)
        .output()
        .unwrap();
    receiver.stop();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("Invalid token (HEC code 4)"), "{stderr}");
    assert!(!stderr.contains("not-the-token"), "the token is never shown");

    // No token at all: the sink is not built, with what is missing.
    let output = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(["run", "--no-watch", "--source", "jsonl:-", "--sink=splunk:http://127.0.0.1:9"])
        .env_remove("SPLUNK_HEC_TOKEN")
        .env_remove("SPLUNK_HEC_TOKEN_FILE")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("SPLUNK_HEC_TOKEN (or SPLUNK_HEC_TOKEN_FILE) is not set"),
        "{stderr}"
    );
}

/// An in-process endpoint answering from a script, then `ok`; it keeps every request's body.
#[derive(Default)]
struct Endpoint {
    script: Mutex<Vec<axum::response::Response>>,
    requests: Mutex<Vec<(Instant, Bytes)>>,
    ok: Mutex<Option<Box<dyn Fn(&[u8]) -> axum::response::Response + Send + Sync>>>,
}

async fn answer(State(endpoint): State<Arc<Endpoint>>, _headers: HeaderMap, body: Bytes) -> axum::response::Response {
    endpoint.requests.lock().unwrap().push((Instant::now(), body.clone()));
    let scripted = {
        let mut script = endpoint.script.lock().unwrap();
        (!script.is_empty()).then(|| script.remove(0))
    };
    match scripted {
        Some(answer) => answer,
        None => match endpoint.ok.lock().unwrap().as_ref() {
            Some(ok) => ok(&body),
            None => StatusCode::NO_CONTENT.into_response(),
        },
    }
}

async fn start(path: &str, script: Vec<axum::response::Response>) -> (Arc<Endpoint>, String) {
    let endpoint = Arc::new(Endpoint { script: Mutex::new(script), ..Endpoint::default() });
    let app = axum::Router::new().route(path, axum::routing::post(answer)).with_state(endpoint.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (endpoint, url)
}

fn quick(mut config: WebhookConfig) -> WebhookSink {
    config.backoff = crate::common::quick_backoff();
    WebhookSink::new(config).unwrap()
}

fn event(name: &str) -> Event {
    let mut e = Event::default();
    e.metadata.name = name.into();
    e.metadata.namespace = "shop".into();
    e.involved_object = ObjectReference {
        kind: "Pod".into(),
        name: "web".into(),
        namespace: "shop".into(),
        ..ObjectReference::default()
    };
    e.reason = "BackOff".into();
    e.count = 1;
    e.last_timestamp = Some("2026-11-28T10:00:00Z".parse().unwrap());
    e
}

/// The `_id`s of a bulk body, in order.
fn bulk_ids(body: &[u8]) -> Vec<String> {
    let text = std::str::from_utf8(body).unwrap();
    text.lines()
        .step_by(2)
        .map(|action| {
            let action: Value = serde_json::from_str(action).unwrap();
            action.as_object().unwrap().values().next().unwrap()["_id"].as_str().unwrap().to_string()
        })
        .collect()
}

#[tokio::test]
async fn a_bulk_answer_with_mixed_item_statuses_sends_again_only_the_429_and_5xx_items() {
    let no_env = |_: &str| None;
    let (endpoint, url) = start("/_bulk", Vec::new()).await;
    // Items answered by their name: `e.retry` 429 on its first attempt, `e.broken` a mapping
    // error, `e.gone` 503 first; everything else 201.
    let seen = Arc::new(Mutex::new(BTreeSet::<String>::new()));
    *endpoint.ok.lock().unwrap() = Some(Box::new(move |body: &[u8]| {
        let mut seen = seen.lock().unwrap();
        let items: Vec<Value> = bulk_ids(body)
            .into_iter()
            .map(|id| {
                let first = seen.insert(id.clone());
                let status = match () {
                    _ if id.contains("e.retry") && first => 429,
                    _ if id.contains("e.gone") && first => 503,
                    _ if id.contains("e.broken") => 400,
                    _ => 201,
                };
                let mut item = json!({"_index": "eventpipe-2026.11.28", "_id": id, "status": status});
                if status == 400 {
                    item["error"] =
                        json!({"type": "mapper_parsing_exception", "reason": "failed to parse field [count]"});
                }
                json!({ "index": item })
            })
            .collect();
        let errors = items.iter().any(|i| i["index"]["status"] != 201);
        let answer = json!({"took": 1, "errors": errors, "items": items});
        (StatusCode::OK, [("content-type", "application/json")], answer.to_string()).into_response()
    }));
    let config = elasticsearch::config("es-test", &url, &ElasticsearchOptions::default(), &no_env).unwrap();
    let sink = quick(WebhookConfig {
        max_batch_delay: Duration::from_millis(200),
        batch_quiet: Duration::from_millis(50),
        ..config
    });
    let names = ["e.ok1", "e.retry", "e.broken", "e.gone", "e.ok2"];
    let results = futures_util::future::join_all(names.iter().map(|n| {
        let e = event(n);
        let sink = &sink;
        async move { sink.create(&e).await }
    }))
    .await;
    for (name, result) in names.iter().zip(&results) {
        match (*name, result) {
            ("e.broken", Err(SinkError::Status(status))) => {
                assert_eq!(status.code, 400);
                assert!(
                    status.message.contains("mapper_parsing_exception: failed to parse field [count]"),
                    "{status:?}"
                );
            }
            (_, Ok(_)) if *name != "e.broken" => {}
            (name, other) => panic!("{name}: {other:?}"),
        }
    }
    let requests = endpoint.requests.lock().unwrap();
    assert_eq!(requests.len(), 2, "one batch, then one retry");
    assert_eq!(bulk_ids(&requests[0].1).len(), 5);
    assert_eq!(bulk_ids(&requests[1].1), ["shop/e.retry:1", "shop/e.gone:1"], "only the 429 and 503 items again");
    let stats = sink.stats();
    assert_eq!((stats.acked, stats.failed, stats.retries), (4, 1, 1));
}

#[tokio::test]
async fn a_429_is_retried_after_its_retry_after_and_a_413_splits_the_batch() {
    let no_env = |_: &str| None;
    let busy = (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "1")], "Ingestion rate limit exceeded").into_response();
    let (endpoint, url) = start("/loki/api/v1/push", vec![busy]).await;
    let sink = quick(loki::config("loki-test", &url, &LokiOptions::default(), &no_env).unwrap());
    sink.create(&event("e.1")).await.expect("pushed after the retry");
    {
        let requests = endpoint.requests.lock().unwrap();
        assert_eq!(requests.len(), 2);
        let waited = requests[1].0 - requests[0].0;
        assert!(waited >= Duration::from_millis(950), "Retry-After: 1 honoured (waited {waited:?})");
    }

    // A batch of four too large for the endpoint: halved until it fits, each item sent once.
    let too_large = || (StatusCode::PAYLOAD_TOO_LARGE, "request entity too large").into_response();
    let (endpoint, url) = start("/loki/api/v1/push", vec![too_large(), too_large()]).await;
    let config = loki::config("loki-test", &url, &LokiOptions::default(), &no_env).unwrap();
    let sink = quick(WebhookConfig {
        max_batch_delay: Duration::from_millis(200),
        batch_quiet: Duration::from_millis(50),
        ..config
    });
    let names = ["a", "b", "c", "d"];
    let results = futures_util::future::join_all(names.iter().map(|n| {
        let mut e = event(n);
        e.reason = (*n).into(); // a stream each, so that one batch holds them all
        let sink = &sink;
        async move { sink.create(&e).await }
    }))
    .await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let sizes: Vec<usize> = endpoint
        .requests
        .lock()
        .unwrap()
        .iter()
        .map(|(_, body)| {
            let push: Value = serde_json::from_slice(body).unwrap();
            push["streams"].as_array().unwrap().iter().map(|s| s["values"].as_array().unwrap().len()).sum()
        })
        .collect();
    assert_eq!(sizes, [4, 2, 1, 1, 1, 1], "4 refused, 2 refused, then one per request");
    assert_eq!(sink.stats().acked, 4);

    // One item too large alone fails with 413; the others go on.
    let (endpoint, url) = start("/loki/api/v1/push", vec![too_large(), too_large()]).await;
    let config = loki::config("loki-test", &url, &LokiOptions::default(), &no_env).unwrap();
    let sink = quick(WebhookConfig {
        max_batch_delay: Duration::from_millis(200),
        batch_quiet: Duration::from_millis(50),
        ..config
    });
    let results = futures_util::future::join_all(["x", "y"].iter().map(|n| {
        let mut e = event(n);
        e.reason = (*n).into();
        let sink = &sink;
        async move { sink.create(&e).await }
    }))
    .await;
    assert!(matches!(&results[0], Err(SinkError::Status(s)) if s.code == 413), "{results:?}");
    assert!(results[1].is_ok(), "{results:?}");
    assert_eq!(endpoint.requests.lock().unwrap().len(), 3);
    assert_eq!((sink.stats().acked, sink.stats().failed), (1, 1));
}
