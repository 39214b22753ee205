//! The Kubernetes source and sink against an in-test HTTP server that speaks the API's wire
//! format (list, watch stream, create, strategic-merge patch, Status errors), through
//! `eventpipe run` as a process: the exact requests, and the written events equal to the
//! correlator's output.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// One request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    target: String,
    content_type: String,
    body: Vec<u8>,
}

impl Seen {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// An answer: status, extra headers, and either a body or a stream of lines (sent with pauses,
/// then the connection closes, as a watch that ends).
struct Answer {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
    stream: Option<(Vec<String>, Duration)>,
}

impl Answer {
    fn json(status: u16, body: Value) -> Self {
        Self { status, headers: Vec::new(), body: body.to_string().into_bytes(), stream: None }
    }

    fn status(code: u16, reason: &str, message: &str) -> Self {
        Self::json(
            code,
            json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":message,"reason":reason,"code":code}),
        )
    }

    fn watch(lines: Vec<Value>, then_wait: Duration) -> Self {
        Self {
            status: 200,
            headers: Vec::new(),
            body: Vec::new(),
            stream: Some((lines.iter().map(|l| l.to_string()).collect(), then_wait)),
        }
    }
}

type Handler = dyn Fn(&Seen) -> Answer + Send + Sync;

/// A fake API server on 127.0.0.1; every request is recorded.
struct FakeApi {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl FakeApi {
    fn start(handler: Box<Handler>) -> Self {
        Self::start_with(handler, None)
    }

    /// The same over TLS, serving `cert` (DER) with `key`: `https://127.0.0.1:PORT`.
    fn start_tls(handler: Box<Handler>, cert: &rcgen::Certificate, key: &rcgen::KeyPair) -> Self {
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(cert.der().to_vec())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .unwrap();
        Self::start_with(handler, Some(Arc::new(config)))
    }

    fn start_with(handler: Box<Handler>, tls: Option<Arc<rustls::ServerConfig>>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (handler, log) = (Arc::new(handler), seen.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming().map_while(Result::ok) {
                let (handler, log, tls) = (handler.clone(), log.clone(), tls.clone());
                std::thread::spawn(move || match tls {
                    // A failed handshake ends the connection before any request is seen.
                    Some(config) => {
                        let tls = rustls::ServerConnection::new(config).unwrap();
                        serve(rustls::StreamOwned::new(tls, conn), &*handler, &log)
                    }
                    None => serve(conn, &*handler, &log),
                });
            }
        });
        Self { url, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve(conn: impl Read + Write, handler: &Handler, log: &Mutex<Vec<Seen>>) {
    let mut reader = BufReader::new(conn);
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = request_line.split_whitespace();
        let (method, target) = (parts.next().unwrap_or("").to_string(), parts.next().unwrap_or("").to_string());
        let (mut length, mut content_type) = (0usize, String::new());
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).is_err() {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let (name, value) = line.split_once(':').unwrap();
            match name.to_ascii_lowercase().as_str() {
                "content-length" => length = value.trim().parse().unwrap(),
                "content-type" => content_type = value.trim().to_string(),
                _ => {}
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let request = Seen { method, target, content_type, body };
        log.lock().unwrap().push(request.clone());
        let answer = handler(&request);
        let reason = match answer.status {
            200 => "OK",
            201 => "Created",
            404 => "Not Found",
            409 => "Conflict",
            410 => "Gone",
            429 => "Too Many Requests",
            _ => "Error",
        };
        let out = reader.get_mut();
        let mut head = format!("HTTP/1.1 {} {reason}\r\nContent-Type: application/json\r\n", answer.status);
        for (name, value) in &answer.headers {
            head += &format!("{name}: {value}\r\n");
        }
        match answer.stream {
            None => {
                head += &format!("Content-Length: {}\r\n\r\n", answer.body.len());
                if out.write_all(head.as_bytes()).and_then(|()| out.write_all(&answer.body)).is_err() {
                    return;
                }
            }
            Some((lines, wait)) => {
                head += "Connection: close\r\n\r\n";
                let _ = out.write_all(head.as_bytes());
                for line in lines {
                    let _ = out.write_all(format!("{line}\n").as_bytes());
                    let _ = out.flush();
                    std::thread::sleep(Duration::from_millis(20));
                }
                std::thread::sleep(wait);
                return;
            }
        }
    }
}

fn event(name: &str, object: &str, reason: &str, message: &str, at: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": "ns"},
        "involvedObject": {"kind": "Pod", "namespace": "ns", "name": object, "uid": format!("uid-{object}"), "apiVersion": "v1"},
        "reason": reason, "message": message, "type": "Normal",
        "source": {"component": "kubelet", "host": "node-1"},
        "firstTimestamp": at, "lastTimestamp": at, "count": 1,
        "reportingComponent": "kubelet", "reportingInstance": "node-1"
    })
}

fn eventpipe() -> Command {
    Command::new(env!("CARGO_BIN_EXE_eventpipe"))
}

/// `eventpipe run` of `stream` (a JSON-lines file) into `--sink k8s` at `api`, as client-go's
/// loop writes (one partition, one write at a time, so the calls come in its order), with
/// `extra` flags: the JSON summary and stderr, once it exited successfully.
fn run_into_api(stream: &[Value], api: &FakeApi, extra: &[&str]) -> (Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, stream.iter().map(|e| format!("{e}\n")).collect::<String>()).unwrap();
    let out = eventpipe()
        .args(["run", "--summary-json", "--no-watch", "--sink=k8s", "--workers=1", "--max-in-flight=1"])
        .args(extra)
        .arg(format!("--source=jsonl:{}", input.display()))
        .arg(format!("--kube-server={}", api.url))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let summary = stderr.lines().rev().find_map(|l| serde_json::from_str(l).ok()).unwrap();
    (summary, stderr)
}

#[test]
fn the_kubernetes_sink_creates_patches_and_handles_status_errors_as_client_go() {
    let stream = [
        event("a.1", "a", "Pulled", "pulled image", "2025-01-01T00:00:00Z"),
        event("a.2", "a", "Pulled", "pulled image", "2025-01-01T00:00:01Z"),
        event("a.3", "a", "Pulled", "pulled image", "2025-01-01T00:00:02Z"),
        event("b.1", "b", "Started", "started", "2025-01-01T00:00:03Z"),
        event("c.1", "c", "Started", "started", "2025-01-01T00:00:04Z"),
        event("d.1", "d", "Started", "started", "2025-01-01T00:00:05Z"),
    ];
    // Per object: what the server answers to its requests, in order.
    /// (path suffix, status codes still to answer)
    type Script = Vec<(String, VecDeque<u16>)>;
    let script: Arc<Mutex<Script>> = Arc::new(Mutex::new(vec![
        ("/a".into(), VecDeque::from([201, 200, 404, 201])),
        ("/b".into(), VecDeque::from([409])),
        ("/c".into(), VecDeque::from([429, 201])),
        ("/d".into(), VecDeque::from([500])),
    ]));
    let rv = Arc::new(Mutex::new(0));
    let api = FakeApi::start(Box::new(move |req: &Seen| {
        let body = req.json();
        let object = if req.method == "PATCH" {
            // The patch body has no object: find it by the event name in the path.
            format!("/{}", req.target.rsplit('/').next().unwrap().split('.').next().unwrap())
        } else {
            format!("/{}", body["involvedObject"]["name"].as_str().unwrap_or(""))
        };
        let code = {
            let mut script = script.lock().unwrap();
            let entry = script.iter_mut().find(|(o, _)| *o == object).expect("a scripted object");
            entry.1.pop_front().expect("no more requests expected for this object")
        };
        let stored = |mut e: Value| {
            let mut n = rv.lock().unwrap();
            *n += 1;
            e["metadata"]["resourceVersion"] = json!(n.to_string());
            e
        };
        match code {
            201 => Answer::json(201, stored(body)),
            200 => {
                // A patch: the stored event with the patched fields (count, lastTimestamp, message).
                let mut e = stream_event_for(&object);
                for (k, v) in body.as_object().unwrap() {
                    e[k] = v.clone();
                }
                Answer::json(200, stored(e))
            }
            404 => Answer::status(404, "NotFound", "events \"a.1\" not found"),
            409 => Answer::status(409, "AlreadyExists", "events \"b.1\" already exists"),
            429 => {
                let mut a = Answer::status(429, "TooManyRequests", "slow down");
                a.headers.push(("Retry-After", "1".into()));
                a
            }
            _ => Answer::status(500, "InternalError", "etcd is sad"),
        }
    }));

    let (summary, stderr) = run_into_api(&stream, &api, &[]);

    // What the correlator decides for this stream (replay with the event's own time, as run).
    let results = crate::common::replay_with_event_clock(&stream, &[]);
    let typed = |e: &Value| {
        let mut e = e.clone();
        e["kind"] = json!("Event");
        e["apiVersion"] = json!("v1");
        e
    };
    let path = |e: &Value| format!("/api/v1/namespaces/ns/events/{}", e["metadata"]["name"].as_str().unwrap());
    let create = "/api/v1/namespaces/ns/events";
    let smp = "application/strategic-merge-patch+json";
    let seen = api.seen();
    let shape: Vec<(&str, &str, &str)> =
        seen.iter().map(|s| (s.method.as_str(), s.target.as_str(), s.content_type.as_str())).collect();
    let (a2, a3) = (path(&results[1]["event"]), path(&results[2]["event"]));
    assert_eq!(
        shape,
        vec![
            ("POST", create, "application/json"),
            ("PATCH", a2.as_str(), smp),
            ("PATCH", a3.as_str(), smp),
            ("POST", create, "application/json"), // 404 on the patch: create instead
            ("POST", create, "application/json"), // b: 409 AlreadyExists, dropped
            ("POST", create, "application/json"), // c: 429 with Retry-After …
            ("POST", create, "application/json"), // … retried
            ("POST", create, "application/json"), // d: 500, a StatusError: dropped
        ]
    );
    // Bodies: the correlator's events and patches, exactly.
    assert_eq!(seen[0].json(), typed(&results[0]["event"]));
    assert_eq!(seen[1].json(), results[1]["patch"]);
    assert_eq!(seen[2].json(), results[2]["patch"]);
    let mut recreated = typed(&results[2]["event"]);
    recreated["metadata"].as_object_mut().unwrap().remove("resourceVersion");
    let mut sent = seen[3].json();
    sent["metadata"].as_object_mut().unwrap().remove("resourceVersion");
    assert_eq!(sent, recreated, "after a 404 the event is created with its count");
    assert_eq!(seen[4].json(), typed(&results[3]["event"]));
    assert_eq!(seen[5].json(), seen[6].json());
    assert_eq!(seen[7].json(), typed(&results[5]["event"]));
    assert_eq!((summary["created"].as_u64(), summary["patched"].as_u64()), (Some(3), Some(1)), "{summary}");
    assert_eq!(summary["dropped"].as_u64(), Some(2), "{summary}");
    assert_eq!(summary["rejected"], json!({"AlreadyExists": 1, "InternalError": 1}), "{summary}");
    // client-go logs the 409 at V(5) only; here it is a (rate-limited) warning.
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("WARN") && l.contains("server rejected event") && l.contains("AlreadyExists")),
        "{stderr}"
    );
}

/// The first event of `object` in the sink test's stream (what the fake server stored).
fn stream_event_for(object: &str) -> Value {
    let name = object.trim_start_matches('/');
    let mut e = event(&format!("{name}.1"), name, "Pulled", "pulled image", "2025-01-01T00:00:00Z");
    e["kind"] = json!("Event");
    e["apiVersion"] = json!("v1");
    e
}

fn watched(kind: &str, e: &Value, rv: &str) -> Value {
    let mut e = e.clone();
    e["kind"] = json!("Event");
    e["apiVersion"] = json!("v1");
    e["metadata"]["resourceVersion"] = json!(rv);
    e["metadata"]["uid"] = json!(format!("uid-{}", e["metadata"]["name"].as_str().unwrap()));
    json!({"type": kind, "object": e})
}

fn list(items: &[(&Value, &str)], rv: &str) -> Value {
    let items: Vec<Value> = items.iter().map(|(e, v)| watched("", e, v)["object"].clone()).collect();
    json!({"kind": "EventList", "apiVersion": "v1", "metadata": {"resourceVersion": rv}, "items": items})
}

#[test]
fn the_kubernetes_source_lists_watches_resumes_and_relists_on_410() {
    let old1 = event("old.1", "old", "Pulled", "old news", "2025-01-01T00:00:00Z");
    let old2 = event("old.2", "old", "Started", "old news", "2025-01-01T00:00:00Z");
    let e3 = event("new.3", "new", "Pulled", "pulling", "2025-01-01T00:01:00Z");
    let mut e3b = e3.clone();
    e3b["count"] = json!(2);
    e3b["lastTimestamp"] = json!("2025-01-01T00:01:05Z");
    let e4 = event("gap.4", "gap", "Killing", "missed during the gap", "2025-01-01T00:02:00Z");
    let e5 = event("late.5", "late", "Started", "after the relist", "2025-01-01T00:03:00Z");
    let bookmark = json!({"type": "BOOKMARK", "object": {"kind": "Event", "apiVersion": "v1", "metadata": {"resourceVersion": "110"}}});
    let gone = json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": "too old resource version: 110 (115)", "reason": "Expired", "code": 410}});

    let lists = Arc::new(Mutex::new(0));
    let watches = Arc::new(Mutex::new(0));
    let (l1, l2) = (list(&[(&old1, "10"), (&old2, "11")], "100"), {
        let mut l = list(&[(&old1, "10"), (&old2, "11"), (&e4, "111")], "120");
        // e3 as last seen by the watch (rv 102): not sent again.
        l["items"].as_array_mut().unwrap().push(watched("", &e3b, "102")["object"].clone());
        l
    });
    let watch1 = vec![watched("ADDED", &e3, "101"), watched("MODIFIED", &e3b, "102"), bookmark, gone];
    let watch2 = vec![watched("ADDED", &e5, "121")];
    let api = FakeApi::start(Box::new(move |req: &Seen| {
        if req.target.contains("watch=true") {
            let mut n = watches.lock().unwrap();
            *n += 1;
            match *n {
                1 => Answer::watch(watch1.clone(), Duration::ZERO),
                _ => Answer::watch(watch2.clone(), Duration::from_secs(60)),
            }
        } else {
            let mut n = lists.lock().unwrap();
            *n += 1;
            Answer::json(200, if *n == 1 { l1.clone() } else { l2.clone() })
        }
    }));

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    let mut child = eventpipe()
        .args(["run", "--summary-json", "--no-watch", "--source=k8s", "--clock=processing"])
        .args(["--metrics=127.0.0.1:0"])
        .arg(format!("--sink=jsonl:{}", out.display()))
        .arg(format!("--kube-server={}", api.url))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = crate::common::stderr_lines(&mut child);
    let metrics = crate::common::metrics_address(&lines);
    // Wait for the second watch (after the relist), give its event time to arrive, then stop
    // the process as Kubernetes would (SIGTERM): it drains and exits 0.
    let deadline = Instant::now() + Duration::from_secs(60);
    while api.seen().iter().filter(|s| s.target.contains("watch=true")).count() < 2 {
        assert!(Instant::now() < deadline, "no second watch: {:?}", api.seen());
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    // The watch's bookmark is counted while the source runs.
    let text = scrape(&metrics);
    assert!(text.contains("eventpipe_source_non_events_total{source=\"k8s\"} 1"), "{text}");
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let exit = child.wait().unwrap();
    let stderr = lines.try_iter().collect::<Vec<_>>().join("\n");
    assert!(exit.success(), "{stderr}");

    let targets: Vec<String> = api.seen().iter().map(|s| format!("{} {}", s.method, s.target)).collect();
    assert_eq!(
        targets,
        [
            "GET /api/v1/events?limit=500",
            "GET /api/v1/events?watch=true&resourceVersion=100&allowWatchBookmarks=true&timeoutSeconds=300",
            "GET /api/v1/events?limit=500",
            "GET /api/v1/events?watch=true&resourceVersion=120&allowWatchBookmarks=true&timeoutSeconds=300",
        ]
    );
    let calls: Vec<Value> =
        std::fs::read_to_string(&out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let objects: Vec<&str> = calls.iter().map(|c| c["event"]["involvedObject"]["name"].as_str().unwrap()).collect();
    // Not the events that were there at start; the watched ones; the one missed in the gap
    // (found by the relist); not e3 again; then the one after the relist.
    assert_eq!(objects, ["new", "new", "gap", "late"], "{stderr}");
}

#[test]
fn a_client_go_style_create_to_http_ingest_reaches_the_sink() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    let (mut child, _stderr, addr) = run_http_ingest(&format!("--sink=jsonl:{}", out.display()));
    // What client-go's EventSinkImpl sends for a new event.
    let e = event(
        "web-0.17cb5b99f8638000",
        "web-0",
        "BackOff",
        "Back-off restarting failed container",
        "2025-01-01T00:00:00Z",
    );
    let body = typed_body(&e);
    let mut conn = TcpStream::connect(&addr).unwrap();
    write!(
        conn,
        "POST /api/v1/namespaces/ns/events HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    // The same server answers Prometheus scrapes with the live counters.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut conn = TcpStream::connect(&addr).unwrap();
        write!(conn, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
        let mut scrape = String::new();
        conn.read_to_string(&mut scrape).unwrap();
        assert!(scrape.starts_with("HTTP/1.1 200"), "{scrape}");
        if scrape.contains("eventpipe_sink_writes_total{tenant=\"default\",verb=\"create\"} 1") {
            assert!(scrape.contains("eventpipe_plugin_calls_total{"), "{scrape}");
            break;
        }
        assert!(Instant::now() < deadline, "the create never showed in /metrics:\n{scrape}");
        std::thread::sleep(Duration::from_millis(100));
    }
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(child.wait().unwrap().success());
    let calls: Vec<Value> =
        std::fs::read_to_string(&out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["verb"], "create");
    assert_eq!(calls[0]["event"]["involvedObject"]["name"], "web-0");
    assert_eq!(calls[0]["event"]["message"], "Back-off restarting failed container");
}

/// `eventpipe run --source http:127.0.0.1:0 EXTRA`, once it listens: the process, its stderr
/// (past the listening line) and the address it listens on.
fn run_http_ingest(extra: &str) -> (std::process::Child, BufReader<std::process::ChildStderr>, String) {
    run_http_ingest_with(&[extra])
}

/// [`run_http_ingest`] with several extra arguments.
fn run_http_ingest_with(extra: &[&str]) -> (std::process::Child, BufReader<std::process::ChildStderr>, String) {
    let mut child = eventpipe()
        .args(["run", "--summary-json", "--no-watch", "--source=http:127.0.0.1:0"])
        .args(extra)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let addr = loop {
        let mut line = String::new();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "no listening line");
        if let Some(addr) = line.trim().strip_prefix("eventpipe: HTTP ingest listening on ") {
            break addr.to_string();
        }
    };
    (child, stderr, addr)
}

fn typed_body(e: &Value) -> String {
    let mut e = e.clone();
    e["kind"] = json!("Event");
    e["apiVersion"] = json!("v1");
    e.to_string()
}

#[test]
fn http_ingest_routes_events_to_the_tenant_their_request_header_names() {
    let dir = tempfile::tempdir().unwrap();
    let (payments, other) = (dir.path().join("payments.jsonl"), dir.path().join("other.jsonl"));
    let config = dir.path().join("tenants.toml");
    std::fs::write(
        &config,
        format!(
            "[defaults]\nsinks = [\"jsonl:{}\"]\n\n[[tenants]]\nname = \"payments\"\n\
             [tenants.match]\nheaders = {{ \"X-Eventpipe-Tenant\" = \"pay*\" }}\n\
             [tenants.rules]\nsinks = [\"jsonl:{}\"]\n",
            other.display(),
            payments.display()
        ),
    )
    .unwrap();
    let (mut child, mut stderr, addr) = run_http_ingest(&format!("--config={}", config.display()));
    let post = |object: &str, header: &str| {
        let body = event(&format!("{object}.1"), object, "BackOff", "Back-off", "2025-01-01T00:00:00Z").to_string();
        let mut conn = TcpStream::connect(&addr).unwrap();
        write!(
            conn,
            "POST /ingest HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-ndjson\r\n{header}\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut answer = String::new();
        conn.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 2"), "{answer}");
    };
    post("pay-0", "x-eventpipe-tenant: payments\r\n");
    post("none-0", "");
    post("pay-1", "X-EVENTPIPE-TENANT: payroll\r\n");
    post("shop-0", "x-eventpipe-tenant: shop\r\n");
    // Stop once all four went through the pipeline (SIGTERM drains what was accepted anyway).
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    assert!(child.wait().unwrap().success(), "{rest}");
    let objects = |path: &std::path::Path| -> Vec<String> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["event"]["involvedObject"]["name"].to_string())
            .collect()
    };
    assert_eq!(objects(&payments), ["\"pay-0\"", "\"pay-1\""], "{rest}");
    assert_eq!(objects(&other), ["\"none-0\"", "\"shop-0\""], "{rest}");
}

/// Kills the child on drop: a failed assertion leaves no `eventpipe run` behind.
struct Running(std::process::Child);

impl Running {
    fn spawn(command: &mut Command) -> Self {
        Self(command.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap())
    }

    /// SIGTERM (as Kubernetes stops a pod), then its exit status.
    fn terminate(&mut self) -> std::process::ExitStatus {
        Command::new("kill").args(["-TERM", &self.0.id().to_string()]).status().unwrap();
        self.0.wait().unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// TLS certificates for the fake API server, made with rcgen.
mod certs {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};

    /// A certificate, its key, and its PEM (what a kubeconfig's `certificate-authority-data`
    /// holds).
    pub struct Cert {
        pub cert: rcgen::Certificate,
        pub key: KeyPair,
        pub params: CertificateParams,
    }

    impl Cert {
        pub fn pem(&self) -> String {
            self.cert.pem()
        }
    }

    fn params(name: &str, ca: bool) -> CertificateParams {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(DnType::CommonName, name);
        if ca {
            p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        } else {
            p.subject_alt_names = vec![SanType::IpAddress([127, 0, 0, 1].into())];
        }
        p
    }

    /// A self-signed CA certificate (`CA:TRUE`, no SAN).
    pub fn ca(name: &str) -> Cert {
        let (params, key) = (params(name, true), KeyPair::generate().unwrap());
        Cert { cert: params.self_signed(&key).unwrap(), key, params }
    }

    /// A self-signed CA certificate (`CA:TRUE`) valid for 127.0.0.1: a serving certificate that
    /// is its own CA, as some single-node and test clusters have.
    pub fn self_signed_ca_for_localhost(name: &str) -> Cert {
        let mut params = params(name, true);
        params.subject_alt_names = vec![SanType::IpAddress([127, 0, 0, 1].into())];
        let key = KeyPair::generate().unwrap();
        Cert { cert: params.self_signed(&key).unwrap(), key, params }
    }

    /// A serving certificate for 127.0.0.1 issued by `ca`.
    pub fn leaf_for_localhost(ca: &Cert) -> Cert {
        let (params, key) = (params("apiserver", false), KeyPair::generate().unwrap());
        let issuer = Issuer::from_params(&ca.params, &ca.key);
        Cert { cert: params.signed_by(&key, &issuer).unwrap(), key, params }
    }
}

/// A kubeconfig for `server` trusting `ca_pem`, with a bearer token.
fn kubeconfig(dir: &std::path::Path, server: &str, ca_pem: &str) -> std::path::PathBuf {
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: test\n\
             clusters:\n- name: test\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n\
             users:\n- name: test\n  user:\n    token: t0ken\n\
             contexts:\n- name: test\n  context:\n    cluster: test\n    user: test\n"
        ),
    )
    .unwrap();
    path
}

/// An API server with no events that holds every watch open.
fn quiet_api_handler() -> Box<Handler> {
    Box::new(|req: &Seen| {
        if req.target.contains("watch=true") {
            Answer::watch(Vec::new(), Duration::from_secs(60))
        } else {
            Answer::json(200, list(&[], "1"))
        }
    })
}

/// `eventpipe run --source k8s` with `kubeconfig` until `done` holds for the stderr lines so far
/// and the requests the server saw (at most 30 s); then SIGTERM. Its stderr lines.
fn watch_with_kubeconfig(
    kubeconfig: &std::path::Path,
    api: &FakeApi,
    done: impl Fn(&[String], &[Seen]) -> bool,
) -> Vec<String> {
    let mut child = Running::spawn(
        eventpipe()
            .args(["run", "--no-watch", "--source=k8s", "--sink=jsonl:-"])
            .arg(format!("--kubeconfig={}", kubeconfig.display())),
    );
    let lines = crate::common::stderr_lines(&mut child.0);
    let mut stderr = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done(&stderr, &api.seen()) {
        assert!(Instant::now() < deadline, "timed out; stderr:\n{}", stderr.join("\n"));
        if let Ok(line) = lines.recv_timeout(Duration::from_millis(50)) {
            stderr.push(line);
        }
    }
    let status = child.terminate();
    stderr.extend(lines.iter());
    assert!(status.success(), "{}", stderr.join("\n"));
    stderr
}

fn watched_over_tls(seen: &[Seen]) -> bool {
    seen.iter().any(|s| s.target.contains("watch=true"))
}

#[test]
fn tls_with_a_leaf_issued_by_the_kubeconfig_ca_works() {
    let ca = certs::ca("cluster CA");
    let leaf = certs::leaf_for_localhost(&ca);
    let api = FakeApi::start_tls(quiet_api_handler(), &leaf.cert, &leaf.key);
    let dir = tempfile::tempdir().unwrap();
    let stderr =
        watch_with_kubeconfig(&kubeconfig(dir.path(), &api.url, &ca.pem()), &api, |_, seen| watched_over_tls(seen));
    assert_eq!(api.seen()[0].target, "/api/v1/events?limit=500");
    assert!(!stderr.iter().any(|l| l.contains("cannot reach")), "{}", stderr.join("\n"));
}

/// As kubectl (Go's crypto/x509): a serving certificate that is a CA certificate (`CA:TRUE`) is
/// accepted when it is exactly the kubeconfig's certificate authority.
#[test]
fn tls_with_a_self_signed_ca_serving_certificate_that_is_the_kubeconfig_ca_works() {
    let serving = certs::self_signed_ca_for_localhost("single-node cluster");
    let api = FakeApi::start_tls(quiet_api_handler(), &serving.cert, &serving.key);
    let dir = tempfile::tempdir().unwrap();
    let stderr = watch_with_kubeconfig(&kubeconfig(dir.path(), &api.url, &serving.pem()), &api, |_, seen| {
        watched_over_tls(seen)
    });
    assert_eq!(api.seen()[0].target, "/api/v1/events?limit=500");
    assert!(!stderr.iter().any(|l| l.contains("cannot reach")), "{}", stderr.join("\n"));
}

/// A wrong CA fails every request, and the log says why — the rustls error — in one ERROR line
/// (the watch's retries do not repeat it).
#[test]
fn tls_with_the_wrong_ca_fails_with_the_tls_reason_logged_once() {
    let cases = [
        (certs::leaf_for_localhost(&certs::ca("cluster CA")), "TLS: invalid peer certificate: UnknownIssuer"),
        (
            certs::self_signed_ca_for_localhost("single-node cluster"),
            "TLS: invalid peer certificate: CaUsedAsEndEntity (the server's certificate is a CA certificate, and not the configured certificate authority)",
        ),
    ];
    for (serving, reason) in cases {
        let api = FakeApi::start_tls(quiet_api_handler(), &serving.cert, &serving.key);
        let dir = tempfile::tempdir().unwrap();
        let config = kubeconfig(dir.path(), &api.url, &certs::ca("another CA").pem());
        // Until the watch failed twice (the first try and one after its back-off).
        let stderr = watch_with_kubeconfig(&config, &api, |stderr, _| {
            stderr.iter().filter(|l| l.contains("watch failed; backing off")).count() >= 2
        });
        assert!(api.seen().is_empty(), "no request got through: {:?}", api.seen());
        let line = format!("cannot reach the Kubernetes API at {}/: {reason}", api.url);
        let errors: Vec<&String> = stderr.iter().filter(|l| l.contains("ERROR")).collect();
        assert_eq!(errors.len(), 1, "{}", stderr.join("\n"));
        assert!(errors[0].ends_with(&line), "{}\nwanted: {line}", errors[0]);
    }
}

/// `GET /metrics` from `addr` (host:port), the body.
fn scrape(addr: &str) -> String {
    let mut conn = TcpStream::connect(addr).unwrap();
    write!(conn, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    answer
}

/// As client-go, a create in a namespace that does not exist (`404 namespaces "x" not found`)
/// is dropped; unlike client-go's error line per event, each missing namespace is warned about
/// once, its count is given at the end of the run, and the drops are counted in `/metrics` under
/// one reason.
#[test]
fn writes_to_a_missing_namespace_are_dropped_warned_once_per_namespace_and_counted() {
    let in_ns = |e: Value, ns: &str| {
        let mut e = e;
        e["metadata"]["namespace"] = json!(ns);
        e["involvedObject"]["namespace"] = json!(ns);
        e
    };
    let stream = [
        in_ns(event("a.1", "a", "Started", "started", "2025-01-01T00:00:00Z"), "ns"),
        in_ns(event("g1.1", "g1", "Started", "started", "2025-01-01T00:00:01Z"), "gone"),
        in_ns(event("g2.1", "g2", "Started", "started", "2025-01-01T00:00:02Z"), "gone"),
        in_ns(event("h.1", "h", "Started", "started", "2025-01-01T00:00:03Z"), "gone2"),
        in_ns(event("g3.1", "g3", "Started", "started", "2025-01-01T00:00:04Z"), "gone"),
        in_ns(event("b.1", "b", "Started", "started", "2025-01-01T00:00:05Z"), "ns"),
    ];
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, stream.iter().map(|e| format!("{e}\n")).collect::<String>()).unwrap();
    let api = FakeApi::start(Box::new(|req: &Seen| {
        let ns = req.target.trim_start_matches("/api/v1/namespaces/").split('/').next().unwrap().to_string();
        if ns == "ns" {
            let mut e = req.json();
            e["metadata"]["resourceVersion"] = json!("1");
            Answer::json(201, e)
        } else {
            // The apiserver's NamespaceLifecycle admission answer.
            let mut a = Answer::status(404, "NotFound", &format!("namespaces \"{ns}\" not found"));
            a.body = json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
                "message": format!("namespaces \"{ns}\" not found"), "reason":"NotFound",
                "details":{"name": ns, "kind":"namespaces"}, "code":404})
            .to_string()
            .into_bytes();
            a
        }
    }));

    let mut child = Running::spawn(
        eventpipe()
            .args(["run", "--summary-json", "--no-watch", "--follow", "--metrics=127.0.0.1:0", "--sink=k8s"])
            .args(["--workers=1", "--max-in-flight=1"])
            .arg(format!("--source=jsonl:{}", input.display()))
            .arg(format!("--kube-server={}", api.url)),
    );
    let lines = crate::common::stderr_lines(&mut child.0);
    let mut stderr = Vec::new();
    let metrics = loop {
        let line = lines.recv_timeout(Duration::from_secs(120)).expect("the run announces its metrics address");
        stderr.push(line.clone());
        if let Some((_, rest)) = line.split_once("metrics on http://") {
            break rest.trim_end_matches("/metrics").to_string();
        }
    };
    let counted = "eventpipe_sink_rejected_total{reason=\"NamespaceNotFound\"} 4";
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut text = scrape(&metrics);
    while !text.contains(counted) {
        assert!(Instant::now() < deadline, "never {counted}:\n{text}");
        std::thread::sleep(Duration::from_millis(100));
        text = scrape(&metrics);
    }
    let status = child.terminate();
    stderr.extend(lines.iter());
    let all = stderr.join("\n");
    assert!(status.success(), "{all}");

    // Dropped, not retried: one POST per event.
    assert_eq!(api.seen().len(), 6, "{:?}", api.seen());
    let summary: Value = stderr.iter().rev().find_map(|l| serde_json::from_str(l).ok()).unwrap();
    assert_eq!((summary["created"].as_u64(), summary["dropped"].as_u64()), (Some(2), Some(4)), "{summary}");
    assert_eq!(summary["rejected"], json!({"NamespaceNotFound": 4}), "{summary}");
    assert_eq!(summary["missing_namespaces"], json!({"gone": 3, "gone2": 1}), "{summary}");
    // Warned once per namespace at the first drop, then its count at the end; no error line per
    // event.
    let warned = |ns: &str, text: &str| {
        stderr
            .iter()
            .filter(|l| l.contains("WARN") && l.contains(&format!("namespace=\"{ns}\"")) && l.contains(text))
            .count()
    };
    assert_eq!(warned("gone", "its events are dropped"), 1, "{all}");
    assert_eq!(warned("gone2", "its events are dropped"), 1, "{all}");
    assert_eq!(warned("gone", "3 event write(s) dropped for it in this run"), 1, "{all}");
    assert_eq!(warned("gone2", "1 event write(s) dropped for it in this run"), 1, "{all}");
    assert!(!all.contains("ERROR"), "{all}");
}

/// The state file's saved resourceVersion, if the file exists.
fn saved_resource_version(state: &std::path::Path) -> Option<String> {
    let text = std::fs::read_to_string(state).ok()?;
    let state: Value = serde_json::from_str(&text).unwrap();
    Some(state["position"]["resource_version"].as_str().expect("a resourceVersion position").to_string())
}

/// `eventpipe run --source k8s --delivery at-least-once` against `api` until `done` holds for
/// the requests it saw (at most 30 s), then SIGTERM: the objects of the events it wrote.
fn run_at_least_once(
    api: &FakeApi,
    state: &std::path::Path,
    out: &std::path::Path,
    done: impl Fn() -> bool,
) -> Vec<String> {
    run_at_least_once_from("k8s", api, state, out, done)
}

/// [`run_at_least_once`] with `--source=SOURCE`.
fn run_at_least_once_from(
    source: &str,
    api: &FakeApi,
    state: &std::path::Path,
    out: &std::path::Path,
    done: impl Fn() -> bool,
) -> Vec<String> {
    let mut child = Running::spawn(
        eventpipe()
            .args([
                "run",
                "--no-watch",
                &format!("--source={source}"),
                "--delivery=at-least-once",
                "--clock=processing",
                "--workers=1",
            ])
            .arg(format!("--state-file={}", state.display()))
            .arg(format!("--sink=jsonl:{}", out.display()))
            .arg(format!("--kube-server={}", api.url)),
    );
    let lines = crate::common::stderr_lines(&mut child.0);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(
            Instant::now() < deadline,
            "timed out: {:?}\n{}",
            api.seen(),
            lines.try_iter().collect::<Vec<_>>().join("\n")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = child.terminate();
    let stderr: Vec<String> = lines.iter().collect();
    assert!(status.success(), "{}", stderr.join("\n"));
    std::fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["event"]["involvedObject"]["name"].as_str().unwrap().to_string()
        })
        .collect()
}

/// A fake API server whose watches answer `410 Gone` except from `fresh` (which stays open), and
/// whose lists answer `listed`.
fn api_after_expiry(listed: Value, fresh: &'static str) -> FakeApi {
    FakeApi::start(Box::new(move |req: &Seen| {
        if !req.target.contains("watch=true") {
            Answer::json(200, listed.clone())
        } else if req.target.contains(&format!("resourceVersion={fresh}&")) {
            Answer::watch(Vec::new(), Duration::from_secs(60))
        } else {
            Answer::status(410, "Expired", "too old resource version")
        }
    }))
}

/// The case: with at-least-once delivery, a restart whose saved resourceVersion has
/// expired (`410` on resume) re-lists and sends only the events that changed or appeared while
/// it was stopped — not every event in the cluster — and the state file keeps a real position
/// (never `""`) and the versions it delivered, so the next restart re-sends nothing either.
#[test]
fn a_restart_after_the_resource_version_expired_sends_only_what_changed() {
    let at = |i: u32| format!("2025-01-01T00:0{i}:00Z");
    let e: Vec<Value> =
        (1..=7).map(|i| event(&format!("o{i}.1"), &format!("o{i}"), "Started", "started", &at(i))).collect();
    let changed = |e: &Value| {
        let mut e = e.clone();
        e["count"] = json!(2);
        e["lastTimestamp"] = json!("2025-01-01T00:09:00Z");
        e
    };
    let (e2b, e3b) = (changed(&e[1]), changed(&e[2]));
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");

    // Run 1: five events in the cluster (not sent: no --replay-existing), then two changes.
    let l1 = list(&[(&e[0], "10"), (&e[1], "11"), (&e[2], "12"), (&e[3], "13"), (&e[4], "14")], "100");
    let watch1 = vec![watched("ADDED", &e[5], "101"), watched("MODIFIED", &e3b, "102")];
    let api = FakeApi::start(Box::new(move |req: &Seen| {
        if req.target.contains("watch=true") {
            Answer::watch(watch1.clone(), Duration::from_secs(60))
        } else {
            Answer::json(200, l1.clone())
        }
    }));
    let out1 = dir.path().join("out1.jsonl");
    let sent = run_at_least_once(&api, &state, &out1, || saved_resource_version(&state).as_deref() == Some("102"));
    assert_eq!(sent, ["o6", "o3"]);

    // Stopped meanwhile: o2 changed, o7 appeared, and resourceVersion 102 expired.
    let l2 = list(
        &[(&e[0], "10"), (&e2b, "160"), (&e3b, "102"), (&e[3], "13"), (&e[4], "14"), (&e[5], "101"), (&e[6], "150")],
        "200",
    );
    let api = api_after_expiry(l2.clone(), "200");
    let out2 = dir.path().join("out2.jsonl");
    let sent = run_at_least_once(&api, &state, &out2, || {
        api.seen().iter().any(|s| s.target.contains("resourceVersion=200&"))
            && saved_resource_version(&state).as_deref() != Some("102")
    });
    assert_eq!(sent, ["o2", "o7"], "only what changed while stopped");
    assert_eq!(saved_resource_version(&state).as_deref(), Some("200"), "the list's, once its last event is delivered");
    let targets: Vec<String> = api.seen().iter().map(|s| s.target.clone()).collect();
    assert_eq!(
        targets[..3],
        [
            "/api/v1/events?watch=true&resourceVersion=102&allowWatchBookmarks=true&timeoutSeconds=300",
            "/api/v1/events?limit=500",
            "/api/v1/events?watch=true&resourceVersion=200&allowWatchBookmarks=true&timeoutSeconds=300",
        ]
    );

    // Again, with 200 expired too: nothing changed, nothing is sent, the position stays.
    let mut l3 = l2;
    l3["metadata"]["resourceVersion"] = json!("300");
    let api = api_after_expiry(l3, "300");
    let out3 = dir.path().join("out3.jsonl");
    let sent =
        run_at_least_once(&api, &state, &out3, || api.seen().iter().any(|s| s.target.contains("resourceVersion=300&")));
    assert!(sent.is_empty(), "{sent:?}");
    assert_eq!(saved_resource_version(&state).as_deref(), Some("200"));
}

/// With several namespaces no single resourceVersion applies, so each namespace lists again at
/// a restart; the versions saved in the state file make those lists send what changed or
/// appeared while stopped (before, such a restart sent nothing from its lists: a gap).
#[test]
fn a_restart_watching_several_namespaces_sends_what_changed_in_each() {
    let in_ns = |name: &str, ns: &str, at: &str| {
        let mut e = event(&format!("{name}.1"), name, "Started", "started", at);
        e["metadata"]["namespace"] = json!(ns);
        e["involvedObject"]["namespace"] = json!(ns);
        e
    };
    let (a1, a2, a3) = (
        in_ns("a1", "a", "2025-01-01T00:01:00Z"),
        in_ns("a2", "a", "2025-01-01T00:02:00Z"),
        in_ns("a3", "a", "2025-01-01T00:03:00Z"),
    );
    let b1 = in_ns("b1", "b", "2025-01-01T00:01:00Z");
    let mut b1b = b1.clone();
    b1b["count"] = json!(2);
    let api_with = |a: Value, b: Value, watch_a: Vec<Value>| {
        FakeApi::start(Box::new(move |req: &Seen| {
            let in_a = req.target.starts_with("/api/v1/namespaces/a/");
            if req.target.contains("watch=true") {
                Answer::watch(if in_a { watch_a.clone() } else { Vec::new() }, Duration::from_secs(60))
            } else {
                Answer::json(200, if in_a { a.clone() } else { b.clone() })
            }
        }))
    };
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let api = api_with(list(&[(&a1, "10")], "100"), list(&[(&b1, "20")], "200"), vec![watched("ADDED", &a2, "101")]);
    let out1 = dir.path().join("out1.jsonl");
    let sent = run_at_least_once_from("k8s:a,b", &api, &state, &out1, || saved_resource_version(&state).is_some());
    assert_eq!(sent, ["a2"]);

    let api =
        api_with(list(&[(&a1, "10"), (&a2, "101"), (&a3, "150")], "300"), list(&[(&b1b, "250")], "400"), Vec::new());
    let out2 = dir.path().join("out2.jsonl");
    let mut sent = run_at_least_once_from("k8s:a,b", &api, &state, &out2, || {
        api.seen().iter().filter(|s| s.target.contains("watch=true")).count() == 2
    });
    sent.sort();
    assert_eq!(sent, ["a3", "b1"], "a1 and a2 were delivered or there before");
}

/// What a fake API server with storage holds: object path (`…/events/NAME`) → the object as
/// stored (with `resourceVersion` and `uid`).
type Store = Arc<Mutex<std::collections::BTreeMap<String, Value>>>;

/// A handler that stores what it is sent, as the apiserver does for events of any API group:
/// `POST` on a collection creates (`409 AlreadyExists` when the name is taken; the server's own
/// `uid`, whatever the body says), `PATCH` merges a JSON object into the stored one (`404` when
/// missing; an empty body is `400`, "EOF", as a real apiserver answers an empty
/// strategic-merge patch), `PUT` creates or replaces — with a `uid` or `resourceVersion` in the
/// body taken as preconditions (`409 Conflict` unless they are the stored object's), as the
/// apiserver's update handler does.
fn storing_handler(store: Store) -> Box<Handler> {
    fn merge(target: &mut Value, patch: &Value) {
        match (target.as_object_mut(), patch.as_object()) {
            (Some(t), Some(p)) => {
                for (k, v) in p {
                    if v.is_null() {
                        t.remove(k);
                    } else {
                        merge(t.entry(k.clone()).or_insert(Value::Null), v);
                    }
                }
            }
            _ => *target = patch.clone(),
        }
    }
    let rv = Arc::new(Mutex::new(0u64));
    Box::new(move |req: &Seen| {
        let path = req.target.split('?').next().unwrap().to_string();
        let mut store = store.lock().unwrap();
        // `uid`: the stored object's (an update), or `None`: a new one (a create).
        let stamp =
            |store: &mut std::collections::BTreeMap<String, Value>, mut e: Value, key: &str, uid: Option<Value>| {
                let mut n = rv.lock().unwrap();
                *n += 1;
                e["metadata"]["resourceVersion"] = json!(n.to_string());
                e["metadata"]["uid"] = uid.unwrap_or_else(|| json!(format!("uid-{n}")));
                store.insert(key.to_string(), e.clone());
                e
            };
        match req.method.as_str() {
            "POST" => {
                let body = req.json();
                let name = body["metadata"]["name"].as_str().unwrap_or_default().to_string();
                let key = format!("{path}/{name}");
                if store.contains_key(&key) {
                    return Answer::status(409, "AlreadyExists", &format!("events \"{name}\" already exists"));
                }
                Answer::json(201, stamp(&mut store, body, &key, None))
            }
            "PATCH" if req.body.is_empty() => Answer::status(400, "BadRequest", "EOF"),
            "PATCH" => match store.get(&path).cloned() {
                None => Answer::status(404, "NotFound", "events not found"),
                Some(mut stored) => {
                    let uid = stored["metadata"]["uid"].clone();
                    merge(&mut stored, &req.json());
                    Answer::json(200, stamp(&mut store, stored, &path, Some(uid)))
                }
            },
            "PUT" => {
                let body = req.json();
                let stored = store.get(&path);
                let held = |field: &str| stored.and_then(|s| s["metadata"][field].as_str()).unwrap_or("").to_string();
                let given = |field: &str| body["metadata"][field].as_str().unwrap_or("").to_string();
                if !given("uid").is_empty() && given("uid") != held("uid") {
                    let message = format!(
                        "Operation cannot be fulfilled on events \"{}\": Precondition failed: UID in precondition: {}, UID in object meta: {}",
                        given("name"),
                        given("uid"),
                        held("uid")
                    );
                    return Answer::status(409, "Conflict", &message);
                }
                if !given("resourceVersion").is_empty() && given("resourceVersion") != held("resourceVersion") {
                    return Answer::status(409, "Conflict", "the object has been modified");
                }
                let (code, uid) = match stored {
                    Some(s) => (200, Some(s["metadata"]["uid"].clone())),
                    None => (201, None),
                };
                Answer::json(code, stamp(&mut store, body, &path, uid))
            }
            _ => Answer::status(405, "MethodNotAllowed", "no"),
        }
    })
}

/// The fields of each stored event that client-go's calls decide, by object path.
fn stored_events(store: &Store) -> std::collections::BTreeMap<String, Value> {
    let fields = ["involvedObject", "reason", "message", "source", "type", "count", "firstTimestamp", "lastTimestamp"];
    store
        .lock()
        .unwrap()
        .iter()
        .map(|(path, e)| (path.clone(), fields.iter().map(|f| (f.to_string(), e[*f].clone())).collect()))
        .collect()
}

/// One HTTP/1.1 request on a new connection: the status code and the body (read by its
/// `Content-Length`: the fake API server keeps connections open).
fn http_call(addr: &str, method: &str, path: &str, content_type: &str, body: &str) -> (u16, String) {
    let mut conn = TcpStream::connect(addr).unwrap();
    write!(
        conn,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: {content_type}\r\nAccept: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut reader = BufReader::new(conn);
    let mut status = String::new();
    reader.read_line(&mut status).unwrap();
    let code = status.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let mut length = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line.trim_end().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    (code, String::from_utf8_lossy(&body).into_owned())
}

/// A client-go recorder's calls (`recordToSink`: create, then strategic-merge patches of
/// `count`, `lastTimestamp`, `message` for repeats; an aggregate event's update with a new
/// message; an event with count > 1 never seen, patched (404) then created; a create of a name
/// that exists) sent through `--source http` with `--sink k8s` get the answers the API server
/// gives and leave it with the same events as the same calls sent straight to it. eventpipe
/// answers the patches itself (no 404 round trip), never sends an empty patch, and never sends
/// the `uid` its ingest assigned as a precondition of the whole-event `PUT`.
#[test]
fn a_client_go_recorder_writing_through_http_ingest_leaves_the_same_events_as_writing_directly() {
    let events = "/api/v1/namespaces/ns/events";
    let smp = "application/strategic-merge-patch+json";
    let a = event("a.1", "a", "BackOff", "Back-off restarting failed container", "2025-01-01T00:00:00Z");
    let b = event("b.1", "b", "Pulled", "pulled image", "2025-01-01T00:00:01Z");
    let c = event("c.1", "c", "Unhealthy", "(combined from similar events): probe failed 1", "2025-01-01T00:00:02Z");
    let mut d = event("d.1", "d", "Started", "started", "2025-01-01T00:00:03Z");
    d["count"] = json!(4);
    d["lastTimestamp"] = json!("2025-01-01T00:00:09Z");
    let repeat = |count: i32, at: &str, message: &str| {
        json!({"count": count, "lastTimestamp": at, "message": message}).to_string()
    };
    let calls: Vec<(&str, String, &str, String)> = vec![
        ("POST", events.into(), "application/json", typed_body(&a)),
        (
            "PATCH",
            format!("{events}/a.1"),
            smp,
            repeat(2, "2025-01-01T00:00:05Z", "Back-off restarting failed container"),
        ),
        ("POST", events.into(), "application/json", typed_body(&b)),
        (
            "PATCH",
            format!("{events}/a.1"),
            smp,
            repeat(3, "2025-01-01T00:00:10Z", "Back-off restarting failed container"),
        ),
        ("POST", events.into(), "application/json", typed_body(&c)),
        (
            "PATCH",
            format!("{events}/c.1"),
            smp,
            repeat(2, "2025-01-01T00:00:12Z", "(combined from similar events): probe failed 2"),
        ),
        ("PATCH", format!("{events}/d.1"), smp, repeat(4, "2025-01-01T00:00:09Z", "started")),
        ("POST", events.into(), "application/json", typed_body(&d)),
        ("POST", events.into(), "application/json", typed_body(&a)),
    ];

    // Straight to the API server.
    let direct: Store = Arc::default();
    let api = FakeApi::start(storing_handler(direct.clone()));
    let addr = api.url.trim_start_matches("http://").to_string();
    let codes: Vec<u16> = calls
        .iter()
        .map(|(method, path, content_type, body)| http_call(&addr, method, path, content_type, body).0)
        .collect();
    assert_eq!(codes, [201, 200, 201, 200, 201, 200, 404, 201, 409]);

    // Through eventpipe.
    let through: Store = Arc::default();
    let api = FakeApi::start(storing_handler(through.clone()));
    let (child, _stderr, ingest) =
        run_http_ingest_with(&["--sink=k8s", &format!("--kube-server={}", api.url), "--workers=1"]);
    let mut child = Running(child);
    for ((method, path, content_type, body), direct_code) in calls.iter().zip(&codes) {
        let (code, answer) = http_call(&ingest, method, path, content_type, body);
        assert_eq!(code, *direct_code, "{method} {path} through ingest: {answer}");
    }
    assert!(child.terminate().success());

    assert_eq!(stored_events(&through), stored_events(&direct));
    let seen = api.seen();
    assert!(seen.iter().all(|s| s.method != "PATCH" || !s.body.is_empty()), "no empty patch is sent: {seen:?}");
    // The unseen count > 1 events (c's new message, d) were written whole, not patched empty.
    // (Writes of different events may be in flight together: their order is free.)
    let mut puts: Vec<&str> = seen.iter().filter(|s| s.method == "PUT").map(|s| s.target.as_str()).collect();
    puts.sort_unstable();
    assert_eq!(puts, [format!("{events}/c.1"), format!("{events}/d.1")]);
}

/// `--sink k8s --events-api events.k8s.io` records as client-go's `tools/events`: the first
/// event of an isomorphic key is created as an events.k8s.io/v1 Event, the second starts a
/// series (a strategic-merge patch of `series` alone), later ones are only counted, and the
/// end of the run sends each open series' final count.
#[test]
fn events_k8s_io_recording_creates_then_patches_series() {
    let stream = [
        event("a.1", "a", "BackOff", "Back-off restarting failed container", "2025-01-01T00:00:00Z"),
        event("a.2", "a", "BackOff", "Back-off restarting failed container", "2025-01-01T00:00:10Z"),
        event("a.3", "a", "BackOff", "Back-off restarting failed container", "2025-01-01T00:00:20Z"),
        event("a.4", "a", "BackOff", "Back-off restarting failed container", "2025-01-01T00:00:30Z"),
        event("b.1", "b", "Pulled", "pulled image", "2025-01-01T00:00:40Z"),
    ];
    let store: Store = Arc::default();
    let api = FakeApi::start(storing_handler(store.clone()));
    let (summary, _) = run_into_api(&stream, &api, &["--events-api=events.k8s.io"]);
    assert_eq!(
        (summary["created"].as_u64(), summary["patched"].as_u64(), summary["series_counted"].as_u64()),
        (Some(2), Some(1), Some(2)),
        "{summary}"
    );

    let collection = "/apis/events.k8s.io/v1/namespaces/ns/events";
    let seen = api.seen();
    let shape: Vec<(&str, &str)> = seen.iter().map(|s| (s.method.as_str(), s.target.as_str())).collect();
    let a = format!("{collection}/a.1");
    assert_eq!(
        shape,
        [("POST", collection), ("PATCH", a.as_str()), ("POST", collection), ("PATCH", a.as_str())],
        "create a, start its series, create b, the series' final count at the end"
    );
    assert!(
        seen.iter().filter(|s| s.method == "PATCH").all(|s| s.content_type == "application/strategic-merge-patch+json")
    );
    let created = seen[0].json();
    assert_eq!(created["apiVersion"], "events.k8s.io/v1");
    assert_eq!(created["regarding"], stream[0]["involvedObject"]);
    assert_eq!(created["note"], "Back-off restarting failed container");
    assert_eq!(
        (created["reportingController"].as_str(), created["reportingInstance"].as_str()),
        (Some("kubelet"), Some("node-1"))
    );
    assert_eq!(created["action"], "BackOff", "an event recorded through core/v1 has no action: its reason stands in");
    assert_eq!(created["eventTime"], "2025-01-01T00:00:00.000000Z");
    for deprecated in [
        "deprecatedSource",
        "deprecatedFirstTimestamp",
        "deprecatedLastTimestamp",
        "deprecatedCount",
        "source",
        "count",
        "involvedObject",
        "message",
    ] {
        assert!(created.get(deprecated).is_none(), "{deprecated} must be unset on an events.k8s.io create: {created}");
    }
    let (second, last) = (seen[1].json(), seen[3].json());
    assert_eq!(second.as_object().unwrap().keys().collect::<Vec<_>>(), ["series"], "{second}");
    assert_eq!((second["series"]["count"].as_i64(), last["series"]["count"].as_i64()), (Some(2), Some(4)));
    assert!(last["series"]["lastObservedTime"].as_str().is_some_and(|t| t.ends_with('Z') && t.contains('.')), "{last}");
    let stored = store.lock().unwrap();
    assert_eq!(stored[&a]["series"]["count"], 4);
    assert!(stored[&format!("{collection}/b.1")].get("series").is_none(), "a singleton has no series");
}
