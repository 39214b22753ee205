//! The read API of `eventpipe run --serve` with real clients: `kube::runtime::watcher` (list,
//! watch, a restart of the client, a `410` after its resourceVersion left the window, field
//! selectors) and Debian's `kubectl` (`get events -A -o json`, `get events -w -o json`).
//!
//! Events go in through HTTP ingest (`POST /ingest`), through the default correlator (repeats
//! become patches with a growing `count`), into the watch cache; the clients read them from
//! `--serve`, behind the ingest bearer token.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Event as KubeEvent;
use kube::runtime::watcher;
use serde_json::{Value, json};

const TOKEN: &str = "watch-cache-test-token";

/// A running `eventpipe run --source http --serve`: its ingest and serve addresses.
struct Served {
    run: Child,
    ingest: String,
    serve: String,
    _dir: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.run.id().to_string()]).status();
        let _ = self.run.wait();
    }
}

/// Starts the run; `token`: with `$EVENTPIPE_INGEST_TOKEN` set (every request then needs it).
fn start(extra: &[&str], token: bool) -> Served {
    start_serving("127.0.0.1:0", extra, token)
}

/// [`start`] with the events API on `serve`.
fn start_serving(serve: &str, extra: &[&str], token: bool) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    let mut run = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(["run", "--source", "http:127.0.0.1:0", "--serve", serve, "--no-watch"])
        .arg("--sink")
        .arg(format!("jsonl:{}", out.display()))
        .args(extra)
        .env("EVENTPIPE_INGEST_TOKEN", if token { TOKEN } else { "" })
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = crate::common::stderr_lines(&mut run);
    let (mut ingest, mut serve) = (None, None);
    while ingest.is_none() || serve.is_none() {
        let line = lines.recv_timeout(Duration::from_secs(120)).expect("the run announces its addresses");
        if let Some((_, addr)) = line.split_once("HTTP ingest listening on ") {
            ingest = Some(addr.trim().to_string());
        }
        if let Some((_, rest)) = line.split_once("serving the events API on http://") {
            serve = Some(rest.split('/').next().unwrap().to_string());
        }
    }
    // Keep draining stderr so that the run never blocks on a full pipe.
    std::thread::spawn(move || while lines.recv().is_ok() {});
    Served { run, ingest: ingest.unwrap(), serve: serve.unwrap(), _dir: dir }
}

/// One occurrence of `object`'s `reason` in `ns`, recorded at `second` (the correlator reads
/// the event's own time).
fn occurrence(ns: &str, object: &str, reason: &str, type_: &str, second: u32) -> Value {
    let time = format!("2024-05-01T10:00:{second:02}Z");
    json!({
        "kind": "Event", "apiVersion": "v1",
        "metadata": {"name": format!("{object}.{second}"), "namespace": ns, "labels": {"app": object}},
        "involvedObject": {"kind": "Pod", "namespace": ns, "name": object},
        "reason": reason, "message": format!("{reason} of {object}"), "type": type_,
        "source": {"component": "kubelet", "host": "node-1"},
        "firstTimestamp": time, "lastTimestamp": time, "count": 1,
    })
}

/// `POST /ingest` of `events` as JSON lines.
fn ingest(served: &Served, events: &[Value]) {
    let body: String = events.iter().map(|e| format!("{e}\n")).collect();
    let request = format!(
        "POST /ingest HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/x-ndjson\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let answer = http(&served.ingest, &request);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

fn http(addr: &str, request: &str) -> String {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

fn client(served: &Served) -> kube::Client {
    let mut config = kube::Config::new(format!("http://{}", served.serve).parse().unwrap());
    config.auth_info.token = Some(TOKEN.to_string().into());
    kube::Client::try_from(config).unwrap()
}

/// `name → count` of the events listed now.
async fn counts(api: &kube::Api<KubeEvent>) -> BTreeMap<String, i32> {
    let list = api.list(&Default::default()).await.unwrap();
    list.items.into_iter().map(|e| (e.metadata.name.unwrap(), e.count.unwrap_or(0))).collect()
}

async fn wait_for_counts(api: &kube::Api<KubeEvent>, want: &[(&str, i32)]) -> BTreeMap<String, i32> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = counts(api).await;
        if want.iter().all(|(name, n)| got.get(*name) == Some(n)) {
            return got;
        }
        assert!(Instant::now() < deadline, "never listed {want:?}; last {got:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What a watcher stream gave, step by step.
#[derive(Debug, Default)]
struct Seen {
    /// The state as the client holds it: name → count.
    state: BTreeMap<String, i32>,
    /// How many times the watcher listed from scratch (Init … InitDone).
    lists: usize,
    /// Errors with their codes.
    errors: Vec<String>,
}

impl Seen {
    fn take(&mut self, event: Result<watcher::Event<KubeEvent>, watcher::Error>) {
        let count = |e: &KubeEvent| (e.metadata.name.clone().unwrap(), e.count.unwrap_or(0));
        match event {
            Ok(watcher::Event::Init) => self.state.clear(),
            Ok(watcher::Event::InitApply(e) | watcher::Event::Apply(e)) => {
                let (name, n) = count(&e);
                self.state.insert(name, n);
            }
            Ok(watcher::Event::InitDone) => self.lists += 1,
            Ok(watcher::Event::Delete(e)) => {
                self.state.remove(&count(&e).0);
            }
            Err(error) => self.errors.push(error.to_string()),
        }
    }
}

/// Polls `stream` into `seen` until `done` holds (at most 30 s).
async fn until<S>(stream: &mut S, seen: &mut Seen, done: impl Fn(&Seen) -> bool)
where
    S: futures_util::Stream<Item = Result<watcher::Event<KubeEvent>, watcher::Error>> + Unpin,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !done(seen) {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(event)) => seen.take(event),
            Ok(None) => panic!("the watcher stream ended; seen {seen:?}"),
            Err(_) => panic!("timed out; seen {seen:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_runtime_watcher_lists_and_watches_through_a_restart_and_a_410() {
    let served = start(&["--watch-cache-size", "4"], true);
    ingest(
        &served,
        &[
            occurrence("shop", "web-0", "BackOff", "Warning", 1),
            occurrence("shop", "web-0", "BackOff", "Warning", 2),
            occurrence("shop", "db-0", "Pulled", "Normal", 3),
        ],
    );
    let client = client(&served);
    let all: kube::Api<KubeEvent> = kube::Api::all(client.clone());
    // The repeat is one event, patched to count 2: the aggregated stream, not the input.
    let listed = wait_for_counts(&all, &[("web-0.1", 2), ("db-0.3", 1)]).await;
    assert_eq!(listed.len(), 2, "{listed:?}");

    // A watcher with a server-side timeout of 1 s: it lists, then watches.
    let config = watcher::Config::default().timeout(1);
    let mut stream = watcher(all.clone(), config.clone()).boxed();
    let mut seen = Seen::default();
    until(&mut stream, &mut seen, |s| s.lists == 1).await;
    assert_eq!(seen.state, listed);
    ingest(&served, &[occurrence("shop", "web-0", "BackOff", "Warning", 4)]);
    until(&mut stream, &mut seen, |s| s.state.get("web-0.1") == Some(&3)).await;
    // Across the server's watch timeouts (1 s) it resumes from its resourceVersion: nothing is
    // listed again and nothing is missed.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    ingest(&served, &[occurrence("shop", "cache-0", "Started", "Normal", 5)]);
    until(&mut stream, &mut seen, |s| s.state.contains_key("cache-0.5")).await;
    assert_eq!((seen.lists, seen.errors.len()), (1, 0), "{seen:?}");

    // A restart of the client: a new watcher lists the state, with what changed meanwhile.
    drop(stream);
    ingest(&served, &[occurrence("shop", "web-0", "BackOff", "Warning", 6)]);
    // Ingest answers once the event is queued; the write to the cache follows.
    wait_for_counts(&all, &[("web-0.1", 4)]).await;
    let mut stream = watcher(all.clone(), config.clone()).boxed();
    let mut restarted = Seen::default();
    until(&mut stream, &mut restarted, |s| s.lists == 1).await;
    assert_eq!(restarted.state.get("web-0.1"), Some(&4), "{restarted:?}");
    assert_eq!(restarted.state.len(), 3);

    // A 410: the client stops reading; its watch times out on the server; meanwhile more
    // changes than the window holds (4) are made. When it reads again, it resumes at a
    // resourceVersion that left the window, gets `410 Expired`, lists again and has it all.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let burst: Vec<Value> =
        (10..16).map(|i| occurrence("other", &format!("job-{i}"), "Completed", "Normal", i)).collect();
    ingest(&served, &burst);
    wait_for_counts(&all, &[("job-15.15", 1)]).await;
    until(&mut stream, &mut restarted, |s| s.lists == 2).await;
    assert!(restarted.errors.iter().any(|e| e.contains("410") || e.contains("too old")), "{restarted:?}");
    assert_eq!(restarted.state.len(), 9, "{restarted:?}");
    assert_eq!(restarted.state.get("job-12.12"), Some(&1));

    // A field selector: a watcher of Warnings only, in one namespace.
    let shop: kube::Api<KubeEvent> = kube::Api::namespaced(client.clone(), "shop");
    let mut warnings = watcher(shop, config.fields("type=Warning")).boxed();
    let mut seen = Seen::default();
    until(&mut warnings, &mut seen, |s| s.lists == 1).await;
    assert_eq!(seen.state.keys().collect::<Vec<_>>(), ["web-0.1"]);
    ingest(
        &served,
        &[occurrence("shop", "web-0", "BackOff", "Warning", 20), occurrence("shop", "db-0", "Failed", "Warning", 21)],
    );
    until(&mut warnings, &mut seen, |s| s.state.len() == 2 && s.state.get("web-0.1") == Some(&5)).await;

    // The watch cache behind the server answered with its own resourceVersions.
    let event = kube::Api::<KubeEvent>::namespaced(client, "shop").get("web-0.1").await.unwrap();
    let rv: u64 = event.metadata.resource_version.unwrap().parse().unwrap();
    assert!(rv > 10, "{rv}");
}

/// The resourceVersion of a list of everything now.
async fn list_rv(api: &kube::Api<KubeEvent>) -> u64 {
    api.list(&Default::default()).await.unwrap().metadata.resource_version.unwrap().parse().unwrap()
}

/// A restarted `--serve` (at-least-once, with a state file) has resourceVersions above the old
/// process's, so a `kube::runtime::watcher` that reconnects with its old resourceVersion gets
/// `410`, lists again, and ends with exactly the new process's cache — here, where the old
/// process made more changes than the new one, it used to wait on bookmarks with its stale
/// store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_serve_continues_its_resource_versions_and_a_reconnecting_watcher_relists() {
    let state_dir = tempfile::tempdir().unwrap();
    let state = state_dir.path().join("state.json");
    let state_arg = state.to_str().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let serve = format!("127.0.0.1:{port}");
    let args = ["--delivery", "at-least-once", "--state-file", state_arg];

    let old = start_serving(&serve, &args, true);
    let jobs: Vec<Value> = (1..=6).map(|i| occurrence("ci", &format!("job-{i}"), "Completed", "Normal", i)).collect();
    ingest(&old, &jobs);
    let all: kube::Api<KubeEvent> = kube::Api::all(client(&old));
    wait_for_counts(&all, &[("job-6.6", 1), ("job-1.1", 1)]).await;
    let mut stream = watcher(all.clone(), watcher::Config::default().timeout(1)).boxed();
    let mut seen = Seen::default();
    until(&mut stream, &mut seen, |s| s.lists == 1 && s.state.len() == 6).await;
    let old_rv = list_rv(&all).await;
    drop(old);
    let mark: u64 = std::fs::read_to_string(format!("{state_arg}.resource-version")).unwrap().trim().parse().unwrap();
    assert!(mark >= old_rv, "the high-water mark {mark} covers {old_rv}");

    let new = start_serving(&serve, &args, true);
    let fresh = list_rv(&all).await;
    assert!(fresh > old_rv, "the new process starts above the old one: {fresh} vs {old_rv}");
    ingest(
        &new,
        &[occurrence("ci", "build-1", "Started", "Normal", 30), occurrence("ci", "build-2", "Started", "Normal", 31)],
    );
    let now = wait_for_counts(&all, &[("build-1.30", 1), ("build-2.31", 1)]).await;
    let event = kube::Api::<KubeEvent>::namespaced(client(&new), "ci").get("build-1.30").await.unwrap();
    assert!(event.metadata.resource_version.unwrap().parse::<u64>().unwrap() > old_rv);

    until(&mut stream, &mut seen, |s| s.lists == 2 && s.state == now).await;
    assert!(seen.errors.iter().any(|e| e.contains("410") || e.contains("too old")), "{seen:?}");
    assert_eq!(seen.state, counts(&all).await, "the watcher's store is the new process's cache");
}

/// A watch from a resourceVersion the cache does not have — ahead of its head, or from before
/// the process — is one `ERROR` event with the apiserver's `410 Expired` Status; a list ahead of
/// the head waits, then is the Cacher's `504` "Too large resource version"; a bad
/// `resourceVersionMatch` is the `422` of the ListOptions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unservable_resource_versions_get_the_apiservers_answers() {
    let served = start(&[], false);
    let body: String = [occurrence("a", "x", "Started", "Normal", 1)].iter().map(|e| format!("{e}\n")).collect();
    let answer = http(
        &served.ingest,
        &format!(
            "POST /ingest HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        ),
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let get = |path: &str| http(&served.serve, &format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
    let deadline = Instant::now() + Duration::from_secs(30);
    let head: u64 = loop {
        let list = get("/api/v1/events");
        let json: Value = serde_json::from_str(list.split("\r\n\r\n").nth(1).unwrap_or("")).unwrap_or(Value::Null);
        if json["items"].as_array().is_some_and(|i| i.len() == 1) {
            break json["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
        }
        assert!(Instant::now() < deadline, "{list}");
        std::thread::sleep(Duration::from_millis(50));
    };
    for rv in [head + 1000, 1] {
        let answer = get(&format!("/api/v1/events?watch=true&resourceVersion={rv}&timeoutSeconds=3"));
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        let line = answer.lines().find(|l| l.contains("\"type\"")).unwrap_or_else(|| panic!("no event: {answer}"));
        let event: Value = serde_json::from_str(line.trim()).unwrap();
        assert_eq!(event["type"], "ERROR", "{line}");
        assert_eq!(
            (event["object"]["code"].as_u64(), event["object"]["reason"].as_str()),
            (Some(410), Some("Expired"))
        );
        let message = event["object"]["message"].as_str().unwrap();
        assert!(message.starts_with(&format!("too old resource version: {rv} (")), "{message}");
    }
    let started = Instant::now();
    let answer = get(&format!("/api/v1/events?resourceVersion={}", head + 1000));
    assert!(started.elapsed() >= Duration::from_secs(3), "waits for the version first");
    assert!(answer.starts_with("HTTP/1.1 504"), "{answer}");
    let status: Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(status["reason"], "Timeout");
    assert_eq!(status["message"], format!("Timeout: Too large resource version: {}, current: {head}", head + 1000));
    assert_eq!(status["details"]["causes"][0]["reason"], "ResourceVersionTooLarge");
    assert_eq!(status["details"]["retryAfterSeconds"], 1);
    let answer = get("/api/v1/events?resourceVersion=5&resourceVersionMatch=Bogus");
    assert!(answer.starts_with("HTTP/1.1 422"), "{answer}");
    assert!(
        answer
            .contains(r#"ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Unsupported value: \"Bogus\""#),
        "{answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_api_pages_lists_refuses_bad_selectors_and_asks_for_the_token() {
    let served = start(&[], true);
    let events: Vec<Value> = (1..=5).map(|i| occurrence("shop", &format!("pod-{i}"), "Started", "Normal", i)).collect();
    ingest(&served, &events);
    let all: kube::Api<KubeEvent> = kube::Api::all(client(&served));
    wait_for_counts(&all, &[("pod-5.5", 1)]).await;

    let get = |path: &str, token: bool| {
        let auth = if token { format!("Authorization: Bearer {TOKEN}\r\n") } else { String::new() };
        let answer = http(&served.serve, &format!("GET {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n"));
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        (head.lines().next().unwrap().to_string(), body.to_string())
    };
    let (status, _) = get("/api/v1/events", false);
    assert!(status.contains("401"), "{status}");
    let (status, _) = get("/readyz", false);
    assert!(status.contains("200"), "the probes need no token: {status}");

    // Pages of 2: one consistent list at the first page's resourceVersion, whatever changes.
    let mut names = Vec::new();
    let mut path = "/api/v1/namespaces/shop/events?limit=2".to_string();
    let mut list_rv = None;
    loop {
        let (status, body) = get(&path, true);
        assert!(status.contains("200"), "{status} {body}");
        let page: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(page["kind"], "EventList");
        list_rv.get_or_insert_with(|| page["metadata"]["resourceVersion"].clone());
        assert_eq!(page["metadata"]["resourceVersion"], list_rv.clone().unwrap());
        names.extend(
            page["items"].as_array().unwrap().iter().map(|e| e["metadata"]["name"].as_str().unwrap().to_string()),
        );
        match page["metadata"]["continue"].as_str() {
            Some(token) => path = format!("/api/v1/namespaces/shop/events?limit=2&continue={token}"),
            None => break,
        }
        // A change between pages is not in this list.
        ingest(&served, &[occurrence("shop", "pod-0", "Started", "Normal", 59)]);
    }
    assert_eq!(names, ["pod-1.1", "pod-2.2", "pod-3.3", "pod-4.4", "pod-5.5"]);

    let (status, body) = get("/api/v1/events?fieldSelector=spec.nodeName%3Dx", true);
    assert!(status.contains("400") && body.contains("field label not supported: spec.nodeName"), "{status} {body}");
    let (status, body) = get("/api/v1/events?labelSelector=app%20in%20(pod-2,pod-3)", true);
    assert!(status.contains("200"), "{status}");
    let list: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), 2, "{list}");
    let (status, body) = get("/api/v1/namespaces/shop/events/nope", true);
    assert!(status.contains("404") && body.contains("\"reason\":\"NotFound\""), "{status} {body}");
    // A watch from pod-1.1's resourceVersion replays the changes after it (the router writes
    // different objects concurrently, so that is not "the first one"), as watch events, and
    // ends after its `timeoutSeconds`.
    let (_, body) = get("/api/v1/namespaces/shop/events", true);
    let list: Value = serde_json::from_str(&body).unwrap();
    let rv_of = |e: &Value| e["metadata"]["resourceVersion"].as_str().unwrap().parse::<u64>().unwrap();
    let items = list["items"].as_array().unwrap();
    let from = rv_of(items.iter().find(|e| e["metadata"]["name"] == "pod-1.1").unwrap());
    let (status, body) = get(&format!("/api/v1/events?watch=true&resourceVersion={from}&timeoutSeconds=1"), true);
    assert!(status.contains("200"), "{status}");
    let replayed: Vec<Value> =
        body.lines().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(replayed.iter().all(|e| rv_of(&e["object"]) > from && e["type"] != "ERROR"), "{body}");
    let later = items.iter().filter(|e| rv_of(e) > from).count();
    assert!(replayed.len() >= later, "every later change: {later} events, got {body}");
    assert!(!body.contains(r#""name":"pod-1.1""#), "its own change is not replayed: {body}");

    // `/metrics` reads the cache as the API serves it: its resourceVersion and events, the
    // changes made (at least one per event), the watches open.
    let (_, body) = get("/api/v1/events", true);
    let list: Value = serde_json::from_str(&body).unwrap();
    let (status, metrics) = get("/metrics", true);
    assert!(status.contains("200"), "{status}");
    let value = |name: &str| -> u64 {
        let line = metrics.lines().find(|l| l.split([' ', '{']).next() == Some(name));
        line.unwrap_or_else(|| panic!("{name} in {metrics}")).rsplit(' ').next().unwrap().parse().unwrap()
    };
    let items = list["items"].as_array().unwrap().len() as u64;
    assert_eq!(value("eventpipe_watch_cache_objects"), items);
    assert_eq!(value("eventpipe_watch_cache_resource_version").to_string(), list["metadata"]["resourceVersion"]);
    assert!(value("eventpipe_watch_cache_changes_total") >= items);
    assert!(value("eventpipe_watch_cache_watches") <= 1, "the watch above, if not yet closed: {metrics}");
    assert!(metrics.contains(r#"eventpipe_watch_cache_deleted_total{reason="ttl"} 0"#), "{metrics}");
}

/// A kubeconfig for `served` (plain HTTP, no credentials).
fn kubeconfig(served: &Served, dir: &std::path::Path) -> PathBuf {
    let path = dir.join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: eventpipe\n  cluster:\n    server: http://{}\n\
         users:\n- name: reader\n  user: {{}}\ncontexts:\n- name: eventpipe\n  context:\n    \
         cluster: eventpipe\n    user: reader\ncurrent-context: eventpipe\n",
        served.serve
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// The JSON documents `kubectl … -o json` prints one after the other, as they come.
fn json_documents(mut child: Child) -> (Child, std::sync::mpsc::Receiver<Value>) {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for document in serde_json::Deserializer::from_reader(stdout).into_iter::<Value>() {
            let Ok(document) = document else { break };
            if tx.send(document).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

#[test]
fn kubectl_gets_and_watches_the_correlated_events() {
    let Some(kubectl) = crate::common::kubectl_or_skip() else { return };
    // client-go's kubeconfig loading reads a user's credentials only for a TLS server, so
    // kubectl sends no token to `http://`: the server runs on loopback without one.
    let served = start(&[], false);
    ingest(
        &served,
        &[
            occurrence("shop", "web-0", "BackOff", "Warning", 1),
            occurrence("shop", "web-0", "BackOff", "Warning", 2),
            occurrence("ops", "node-check", "Ready", "Normal", 3),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig(&served, dir.path());
    let kubectl_cmd = || {
        let mut cmd = Command::new(&kubectl);
        cmd.arg("--kubeconfig").arg(&config).arg("--cache-dir").arg(dir.path().join("cache"));
        cmd.env("HOME", dir.path());
        cmd
    };

    // `kubectl get events -A -o json`: every event, aggregated (count 2), with its namespace.
    let deadline = Instant::now() + Duration::from_secs(30);
    let list = loop {
        let out = kubectl_cmd().args(["get", "events", "-A", "-o", "json"]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let list: Value = serde_json::from_slice(&out.stdout).unwrap();
        let count = |name: &str| {
            list["items"].as_array().unwrap().iter().find(|e| e["metadata"]["name"] == name).map(|e| e["count"].clone())
        };
        if count("web-0.1") == Some(json!(2)) && count("node-check.3").is_some() {
            break list;
        }
        assert!(Instant::now() < deadline, "kubectl never listed both: {list}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(list["items"].as_array().unwrap().len(), 2, "{list}");
    let web = list["items"].as_array().unwrap().iter().find(|e| e["metadata"]["name"] == "web-0.1").unwrap();
    assert_eq!((web["metadata"]["namespace"].as_str(), web["reason"].as_str()), (Some("shop"), Some("BackOff")));

    // `kubectl get events -w -o json` in one namespace: the current events, then each change.
    let watch = kubectl_cmd()
        .args(["get", "events", "-n", "shop", "-w", "-o", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (mut watch, documents) = json_documents(watch);
    let next = || documents.recv_timeout(Duration::from_secs(30)).expect("kubectl prints the next event");
    let first = next();
    assert_eq!((first["metadata"]["name"].as_str(), first["count"].as_i64()), (Some("web-0.1"), Some(2)), "{first}");
    ingest(
        &served,
        &[occurrence("ops", "node-check", "Ready", "Normal", 4), occurrence("shop", "web-0", "BackOff", "Warning", 5)],
    );
    let update = next();
    assert_eq!((update["metadata"]["name"].as_str(), update["count"].as_i64()), (Some("web-0.1"), Some(3)), "{update}");
    assert!(update["metadata"]["resourceVersion"].as_str().unwrap().parse::<u64>().unwrap() > 3);
    let _ = watch.kill();
    let _ = watch.wait();
}

/// One occurrence of `object`'s `reason` in `ns` (container `app`), recorded `ago` before now:
/// the ages kubectl prints come from the wall clock, as an apiserver's.
fn occurrence_ago(ns: &str, object: &str, reason: &str, type_: &str, ago: chrono::TimeDelta) -> Value {
    let time = (chrono::Utc::now() - ago).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    json!({
        "kind": "Event", "apiVersion": "v1",
        "metadata": {"name": format!("{object}.{}", ago.num_seconds()), "namespace": ns},
        "involvedObject": {"kind": "Pod", "namespace": ns, "name": object, "fieldPath": "spec.containers{app}"},
        "reason": reason, "message": format!("{reason} of {object}"), "type": type_,
        "source": {"component": "kubelet", "host": "node-1"},
        "firstTimestamp": time, "lastTimestamp": time, "count": 1,
    })
}

/// The columns of a line kubectl prints (cells are separated by at least two spaces).
fn columns(line: &str) -> Vec<String> {
    line.split("  ").map(str::trim).filter(|c| !c.is_empty()).map(String::from).collect()
}

/// `kubectl get events` prints the apiserver's columns from the Table `--serve` answers: LAST
/// SEEN, TYPE, REASON, OBJECT, MESSAGE (with `-A` NAMESPACE first), the wide ones with
/// `-o wide`, sorted with `--sort-by=.lastTimestamp`, and each change with `-w`.
#[test]
fn kubectl_prints_the_apiservers_event_columns() {
    let Some(kubectl) = crate::common::kubectl_or_skip() else { return };
    let served = start(&[], false);
    let hours = chrono::TimeDelta::hours;
    // `a-web` is listed first (by name) but was seen last: `--sort-by` puts it last.
    ingest(
        &served,
        &[
            occurrence_ago("shop", "z-db", "Pulled", "Normal", hours(40)),
            occurrence_ago("shop", "a-web", "BackOff", "Warning", hours(30)),
            occurrence_ago("shop", "a-web", "BackOff", "Warning", hours(20)),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig(&served, dir.path());
    let kubectl_cmd = || {
        let mut cmd = Command::new(&kubectl);
        cmd.arg("--kubeconfig").arg(&config).arg("--cache-dir").arg(dir.path().join("cache"));
        cmd.env("HOME", dir.path());
        cmd
    };
    let get = |args: &[&str]| -> Vec<Vec<String>> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = kubectl_cmd().arg("get").arg("events").args(args).output().unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let text = String::from_utf8(out.stdout).unwrap();
            let lines: Vec<Vec<String>> = text.lines().map(columns).collect();
            // Both events, the repeat aggregated (its Last Seen the second occurrence's).
            if lines.len() == 3 && text.contains("20h") {
                return lines;
            }
            assert!(Instant::now() < deadline, "kubectl never listed both: {text}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };

    let all = get(&["-A"]);
    assert_eq!(all[0], ["NAMESPACE", "LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]);
    assert_eq!(all[1], ["shop", "20h", "Warning", "BackOff", "pod/a-web", "BackOff of a-web"]);
    assert_eq!(all[2], ["shop", "40h", "Normal", "Pulled", "pod/z-db", "Pulled of z-db"]);

    let wide = get(&["-n", "shop", "-o", "wide"]);
    assert_eq!(
        wide[0],
        ["LAST SEEN", "TYPE", "REASON", "OBJECT", "SUBOBJECT", "SOURCE", "MESSAGE", "FIRST SEEN", "COUNT", "NAME"]
    );
    let wide_web = [
        "20h",
        "Warning",
        "BackOff",
        "pod/a-web",
        "spec.containers{app}",
        "kubelet, node-1",
        "BackOff of a-web",
        "30h",
        "2",
        "a-web.108000",
    ];
    assert_eq!(wide[1], wide_web);

    let sorted = get(&["-A", "--sort-by=.lastTimestamp"]);
    assert_eq!((sorted[1][4].as_str(), sorted[2][4].as_str()), ("pod/z-db", "pod/a-web"), "{sorted:?}");

    // `-w`: the header and the current rows, then each change as a row.
    let mut watch = kubectl_cmd()
        .args(["get", "events", "-n", "shop", "-w"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = {
        let stdout = watch.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)) {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        rx
    };
    let next = || columns(&lines.recv_timeout(Duration::from_secs(30)).expect("kubectl prints the next line"));
    assert_eq!(next(), ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]);
    assert_eq!(next(), ["20h", "Warning", "BackOff", "pod/a-web", "BackOff of a-web"]);
    assert_eq!(next(), ["40h", "Normal", "Pulled", "pod/z-db", "Pulled of z-db"]);
    ingest(&served, &[occurrence_ago("shop", "a-web", "BackOff", "Warning", hours(10))]);
    assert_eq!(next(), ["10h", "Warning", "BackOff", "pod/a-web", "BackOff of a-web"]);
    let _ = watch.kill();
    let _ = watch.wait();
}
