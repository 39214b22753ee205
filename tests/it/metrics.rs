//! `GET /metrics`: scraped through the router and parsed as OpenMetrics text; families, labels
//! and values checked against known activity (real ingest requests and webhook deliveries, and
//! the router and plugin counters the run module hands over).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use eventpipe::metrics::{self, Metrics};
use eventpipe::pipeline::router::RouterStats;
use eventpipe::plugin::{CallFailure, PluginStatsSnapshot};
use eventpipe::sink::EventSink;
use eventpipe::sink::SinkStats;
use eventpipe::sink::webhook::{WebhookConfig, WebhookSink};
use eventpipe::source::http::{Ingest, IngestConfig};
use http_body_util::BodyExt;
use tower::ServiceExt;

/// One parsed sample: family type, and the value by sorted label set.
#[derive(Debug, Default)]
struct Scrape {
    types: BTreeMap<String, String>,
    samples: BTreeMap<String, BTreeMap<Vec<(String, String)>, f64>>,
}

impl Scrape {
    /// A strict-enough OpenMetrics text parser: `# TYPE`/`# HELP` lines, samples
    /// `name{k="v",…} value`, and the final `# EOF`.
    fn parse(text: &str) -> Scrape {
        let mut scrape = Scrape::default();
        let mut saw_eof = false;
        for line in text.lines() {
            assert!(!saw_eof, "content after # EOF: {line}");
            if line == "# EOF" {
                saw_eof = true;
                continue;
            }
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
                scrape.types.insert(name.to_string(), kind.to_string());
                continue;
            }
            if line.starts_with("# HELP ") || line.starts_with("# UNIT ") {
                continue;
            }
            assert!(!line.starts_with('#'), "unexpected comment {line}");
            let (series, value) = line.rsplit_once(' ').unwrap();
            let value: f64 = value.parse().unwrap_or_else(|_| panic!("bad value in {line}"));
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, parse_labels(rest.strip_suffix('}').unwrap())),
                None => (series, Vec::new()),
            };
            let histogram = ["_bucket", "_sum", "_count"]
                .iter()
                .filter_map(|suffix| name.strip_suffix(suffix))
                .find(|base| scrape.types.get(*base).is_some_and(|t| t == "histogram"));
            let family = histogram.unwrap_or_else(|| name.strip_suffix("_total").unwrap_or(name));
            assert!(scrape.types.contains_key(family), "sample before its # TYPE: {line}");
            if scrape.types[family] == "counter" {
                assert!(name.ends_with("_total"), "counter sample without _total: {line}");
            }
            scrape.samples.entry(name.to_string()).or_default().insert(labels, value);
        }
        assert!(saw_eof, "no # EOF");
        scrape
    }

    /// The sample's value, `None` when there is no such sample.
    fn find(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let mut key: Vec<(String, String)> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        key.sort();
        self.samples.get(name).and_then(|s| s.get(&key)).copied()
    }

    fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let mut key: Vec<(String, String)> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        key.sort();
        *self
            .samples
            .get(name)
            .and_then(|s| s.get(&key))
            .unwrap_or_else(|| panic!("no sample {name}{labels:?}; have {:?}", self.samples.get(name)))
    }
}

fn parse_labels(s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"").unwrap();
        let end = after.find('"').unwrap();
        out.push((key.to_string(), after[..end].to_string()));
        rest = after[end + 1..].trim_start_matches(',');
    }
    out.sort();
    out
}

async fn scrape(metrics: &Arc<Metrics>) -> Scrape {
    let request = Request::get("/metrics").body(Body::empty()).unwrap();
    let response = metrics::router(metrics.clone()).oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()[header::CONTENT_TYPE], metrics::CONTENT_TYPE);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Scrape::parse(std::str::from_utf8(&body).unwrap())
}

#[tokio::test]
async fn an_empty_registry_describes_every_family() {
    let metrics = Arc::new(Metrics::new());
    let s = scrape(&metrics).await;
    for family in [
        "eventpipe_events_in",
        "eventpipe_sink_writes",
        "eventpipe_spam_skipped",
        "eventpipe_aggregated",
        "eventpipe_filtered",
        "eventpipe_watcher_dropped",
        "eventpipe_sink_retries",
        "eventpipe_sink_failures",
        "eventpipe_plugin_calls",
        "eventpipe_plugin_fuel_consumed",
        "eventpipe_plugin_failures",
        "eventpipe_plugin_memo_hits",
        "eventpipe_plugin_memo_misses",
        "eventpipe_plugin_call_seconds",
        "eventpipe_plugin_swaps",
        "eventpipe_config_reloads",
    ] {
        assert_eq!(s.types.get(family).map(String::as_str), Some("counter"), "{family}");
    }
    assert_eq!(s.types["eventpipe_sink_queue_depth"], "gauge");
    assert_eq!(s.get("eventpipe_plugin_swaps_total", &[]), 0.0);
    for family in [
        "eventpipe_sink_write_duration_seconds",
        "eventpipe_sink_batch_size",
        "eventpipe_plugin_call_duration_seconds",
        "eventpipe_event_latency_seconds",
    ] {
        assert_eq!(s.types.get(family).map(String::as_str), Some("histogram"), "{family}");
    }
    assert_eq!(s.get("eventpipe_event_latency_seconds_count", &[]), 0.0);
    assert_eq!(s.get("eventpipe_event_latency_seconds_bucket", &[("le", "+Inf")]), 0.0);
}

#[tokio::test]
async fn counters_follow_known_activity() {
    let metrics = Arc::new(Metrics::new());

    // Real ingest: two good creates, one bad body.
    let (tx, _rx) = tokio::sync::mpsc::channel(16);
    let ingest = Ingest::new(IngestConfig::default(), tx);
    let router = ingest.router();
    let event = r#"{"metadata":{"name":"a.1"},"involvedObject":{"kind":"Pod","namespace":"ns","name":"a"}}"#;
    let other = r#"{"metadata":{"name":"a.2"},"involvedObject":{"kind":"Pod","namespace":"ns","name":"a"}}"#;
    for body in [event, other, "{nope"] {
        let req = Request::post("/api/v1/namespaces/ns/events")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body))
            .unwrap();
        router.clone().oneshot(req).await.unwrap();
    }
    let i = ingest.clone();
    metrics.add_source(move |s| s.add_ingest("http", &i.stats()));

    // A real webhook delivery (to a server that acknowledges).
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().route("/", axum::routing::post(|| async { StatusCode::NO_CONTENT }));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let sink = Arc::new(
        WebhookSink::new(WebhookConfig {
            queue_capacity: 32,
            max_batch_delay: Duration::from_millis(1),
            ..WebhookConfig::new("audit-hook", format!("http://{addr}/"))
        })
        .unwrap(),
    );
    let e: eventpipe::event::Event = serde_json::from_str(event).unwrap();
    sink.create(&e).await.unwrap();
    sink.patch(&e, b"{}").await.unwrap();
    let w = sink.clone();
    metrics.add_source(move |s| s.add_webhook(&w));

    // What the run module hands over: router stats, plugin counters, reloads, drops.
    let mut router_stats = RouterStats { reloads: 2, ..RouterStats::default() };
    router_stats.dropped_by_rule.entry("payments".into()).or_default().insert("pulls".into(), 9);
    router_stats.tenants.insert(
        "payments".into(),
        SinkStats {
            received: 10,
            created: 3,
            patched: 2,
            skipped: 1,
            aggregated: 4,
            dropped: 1,
            retries: 5,
            filtered: 4,
            ..SinkStats::default()
        },
    );
    router_stats.tenants.insert("default".into(), SinkStats { received: 7, created: 7, ..SinkStats::default() });
    let mut failures = [0; CallFailure::LABELS.len()];
    failures[CallFailure::LABELS.iter().position(|l| *l == "out_of_fuel").unwrap()] = 2;
    failures[CallFailure::LABELS.iter().position(|l| *l == "trap").unwrap()] = 1;
    let plugin = PluginStatsSnapshot {
        calls: 12,
        events: 300,
        fuel_consumed: 860_000,
        failures: 3,
        failures_by_reason: failures,
        fallbacks: 3,
        drops: 0,
        instances: 4,
        memo_hits: 700,
        memo_misses: 300,
        call_nanos: 1_500_000_000,
        quarantines: 1,
        quarantined: 1,
    };
    metrics.add_source(move |s| {
        s.add_router(&router_stats);
        s.add_events_in("jsonl", 17);
        // Two handles of one plugin for one tenant add up.
        s.add_plugin_stats("by-reason", "payments", &plugin);
        s.add_plugin_stats("by-reason", "payments", &plugin);
        s.add_watcher_dropped("tenant-router", "queue_full", 6);
        s.add(&metrics::CONFIG_RELOADS, &[("result", "rejected")], 1);
    });

    let s = scrape(&metrics).await;
    assert_eq!(s.get("eventpipe_ingest_accepted_total", &[]), 2.0);
    assert_eq!(s.get("eventpipe_events_in_total", &[("source", "jsonl")]), 17.0);
    assert_eq!(s.get("eventpipe_ingest_requests_total", &[("code", "201")]), 2.0);
    assert_eq!(s.get("eventpipe_ingest_requests_total", &[("code", "400")]), 1.0);
    assert_eq!(s.get("eventpipe_ingest_rejected_total", &[("reason", "bad_request")]), 1.0);
    assert_eq!(s.get("eventpipe_ingest_rejected_total", &[("reason", "unauthorized")]), 0.0);

    assert_eq!(s.get("eventpipe_events_routed_total", &[("tenant", "payments")]), 10.0);
    assert_eq!(s.get("eventpipe_sink_writes_total", &[("tenant", "payments"), ("verb", "create")]), 3.0);
    assert_eq!(s.get("eventpipe_sink_writes_total", &[("tenant", "payments"), ("verb", "patch")]), 2.0);
    assert_eq!(s.get("eventpipe_sink_writes_total", &[("tenant", "default"), ("verb", "create")]), 7.0);
    assert_eq!(s.get("eventpipe_sink_write_failures_total", &[("tenant", "payments"), ("outcome", "dropped")]), 1.0);
    assert_eq!(s.get("eventpipe_record_retries_total", &[("tenant", "payments")]), 5.0);
    assert_eq!(s.get("eventpipe_spam_skipped_total", &[("tenant", "payments")]), 1.0);
    assert_eq!(s.get("eventpipe_aggregated_total", &[("tenant", "payments")]), 4.0);
    assert_eq!(s.get("eventpipe_filtered_total", &[("tenant", "payments")]), 4.0);
    assert_eq!(s.get("eventpipe_filtered_total", &[("tenant", "default")]), 0.0);
    assert_eq!(s.get("eventpipe_rule_dropped_total", &[("tenant", "payments"), ("rule", "pulls")]), 9.0);
    assert_eq!(
        s.get("eventpipe_watcher_dropped_total", &[("watcher", "tenant-router"), ("reason", "queue_full")]),
        6.0
    );
    assert_eq!(s.get("eventpipe_config_reloads_total", &[("result", "applied")]), 2.0);
    assert_eq!(s.get("eventpipe_config_reloads_total", &[("result", "rejected")]), 1.0);

    let hook = [("sink", "audit-hook")];
    assert_eq!(s.get("eventpipe_sink_sent_total", &hook), 2.0);
    assert_eq!(s.get("eventpipe_sink_acked_total", &hook), 2.0);
    assert_eq!(s.get("eventpipe_sink_retries_total", &hook), 0.0);
    assert_eq!(s.get("eventpipe_sink_failures_total", &hook), 0.0);
    assert_eq!(s.get("eventpipe_sink_dropped_total", &[("sink", "audit-hook"), ("reason", "queue_full")]), 0.0);
    assert_eq!(s.get("eventpipe_sink_queue_depth", &hook), 0.0);
    assert_eq!(s.get("eventpipe_sink_queue_capacity", &hook), 32.0);
    assert!(s.get("eventpipe_sink_concurrency_limit", &hook) >= 1.0, "adaptive, from 1");
    assert_eq!(s.get("eventpipe_sink_requests_in_flight", &hook), 0.0);

    let p = [("plugin", "by-reason"), ("tenant", "payments")];
    assert_eq!(s.get("eventpipe_plugin_calls_total", &p), 24.0);
    assert_eq!(s.get("eventpipe_plugin_fuel_consumed_total", &p), 1_720_000.0);
    assert_eq!(s.get("eventpipe_plugin_instances_total", &p), 8.0);
    assert_eq!(s.get("eventpipe_plugin_memo_hits_total", &p), 1400.0);
    assert_eq!(s.get("eventpipe_plugin_memo_misses_total", &p), 600.0);
    assert_eq!(s.get("eventpipe_plugin_call_seconds_total", &p), 3.0, "nanoseconds inside calls, as seconds");
    assert_eq!(s.get("eventpipe_plugin_quarantines_total", &p), 2.0, "quarantines add up");
    assert_eq!(s.get("eventpipe_plugin_quarantined", &p), 1.0, "a gauge: quarantined or not");
    let reason = |r| [("plugin", "by-reason"), ("tenant", "payments"), ("reason", r)];
    assert_eq!(s.get("eventpipe_plugin_failures_total", &reason("out_of_fuel")), 4.0);
    assert_eq!(s.get("eventpipe_plugin_failures_total", &reason("trap")), 2.0);
    assert_eq!(s.get("eventpipe_plugin_failures_total", &reason("memory_limit")), 0.0);
    assert_eq!(s.get("eventpipe_plugin_failures_total", &reason("garbage")), 0.0);

    // The next scrape reads the counters again (no caching, no double counting).
    let again = scrape(&metrics).await;
    assert_eq!(again.get("eventpipe_plugin_calls_total", &p), 24.0);
    assert_eq!(again.get("eventpipe_ingest_requests_total", &[("code", "201")]), 2.0);
}

/// `GET /metrics` of a running `eventpipe` at `addr`, as text.
fn scrape_process(addr: &str) -> String {
    scrape_process_with(addr, "")
}

/// As [`scrape_process`], with `headers` (each line ended by `\r\n`) in the request.
fn scrape_process_with(addr: &str, headers: &str) -> String {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    write!(conn, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n{headers}Connection: close\r\n\r\n").unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    answer
}

/// Starts `eventpipe run` with `args` and returns it with the address it announced on stderr
/// for `marker` (`metrics on http://` or `HTTP ingest listening on `).
fn spawn_run(args: &[String], marker: &str) -> (std::process::Child, String) {
    spawn_run_with(args, marker, &[])
}

/// As [`spawn_run`], with `env` set.
fn spawn_run_with(args: &[String], marker: &str, env: &[(&str, &str)]) -> (std::process::Child, String) {
    let mut run = std::process::Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .arg("run")
        .args(args)
        .envs(env.iter().copied())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let rx = crate::common::stderr_lines(&mut run);
    let addr = loop {
        let line = rx.recv_timeout(Duration::from_secs(120)).expect("the run announces its address");
        if let Some((_, rest)) = line.split_once(marker) {
            break rest.trim().trim_end_matches("/metrics").to_string();
        }
    };
    (run, addr)
}

/// Scrapes `addr` until `done` holds for the parsed text (at most ~10 s), then returns it.
async fn scrape_until(addr: &str, done: impl Fn(&Scrape) -> bool) -> Scrape {
    let mut text = String::new();
    for _ in 0..100 {
        text = tokio::task::spawn_blocking({
            let addr = addr.to_string();
            move || scrape_process(&addr)
        })
        .await
        .unwrap();
        let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        let scrape = Scrape::parse(&dechunk(body));
        if done(&scrape) {
            return scrape;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the scrape never met the condition:\n{text}");
}

/// An HTTP/1.1 body without its chunked framing, when it has one.
fn dechunk(body: &str) -> String {
    if body.starts_with("# ") {
        return body.to_string();
    }
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else { break };
        if n == 0 || tail.len() < n {
            break;
        }
        out.push_str(&tail[..n]);
        rest = tail[n..].trim_start_matches("\r\n");
    }
    out
}

fn stop(mut run: std::process::Child) {
    let _ = std::process::Command::new("kill").args(["-TERM", &run.id().to_string()]).status();
    let _ = run.wait();
}

/// `eventpipe run --follow` of the bundled stream's first `events` lines (copied into `dir`)
/// with `--metrics`, into a webhook that answers 200: the running process, its metrics
/// address, the webhook's address and the requests it has answered.
async fn spawn_webhook_run(
    dir: &std::path::Path,
    events: usize,
) -> (std::process::Child, String, std::net::SocketAddr, Arc<std::sync::atomic::AtomicU64>) {
    use std::sync::atomic::{AtomicU64, Ordering};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = listener.local_addr().unwrap();
    let requests = Arc::new(AtomicU64::new(0));
    let counted = requests.clone();
    let app = axum::Router::new().route(
        "/",
        axum::routing::post(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            async { StatusCode::OK }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let source = dir.join("events.jsonl");
    let stream =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/data/occurrences.jsonl")).unwrap();
    std::fs::write(&source, stream.lines().take(events).collect::<Vec<_>>().join("\n") + "\n").unwrap();
    let (run, metrics_addr) = spawn_run(
        &[
            "--no-watch".into(),
            "--follow".into(),
            "--metrics=127.0.0.1:0".into(),
            format!("--source=jsonl:{}", source.display()),
            format!("--sink=webhook:http://{hook}/"),
        ],
        "metrics on http://",
    );
    (run, metrics_addr, hook, requests)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_exposes_its_webhook_sinks_on_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let (run, metrics_addr, hook, _) = spawn_webhook_run(dir.path(), 50).await;
    let sink = [("sink", format!("webhook:http://{hook}/"))];
    let sink: Vec<(&str, &str)> = sink.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let s = scrape_until(&metrics_addr, |s| s.find("eventpipe_sink_acked_total", &sink).is_some_and(|n| n > 0.0)).await;
    stop(run);
    assert_eq!(s.types["eventpipe_sink_queue_capacity"], "gauge");
    assert!(s.get("eventpipe_sink_queue_capacity", &sink) > 0.0);
    assert_eq!(s.types["eventpipe_sink_concurrency_limit"], "gauge");
    assert!(s.get("eventpipe_sink_concurrency_limit", &sink) >= 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_counts_bad_input_lines_and_non_events_while_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("events.jsonl");
    let stream =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/data/occurrences.jsonl")).unwrap();
    let mut lines: Vec<String> = stream.lines().take(5).map(String::from).collect();
    lines.insert(1, "not json at all".into());
    lines.insert(3, r#"{"broken": tru}"#.into());
    lines.push(r#"{"type":"BOOKMARK","object":{"kind":"Event","metadata":{"resourceVersion":"12"}}}"#.into());
    lines.push("\u{1}garbage".into());
    std::fs::write(&source, lines.join("\n") + "\n").unwrap();
    let label = format!("jsonl:{}", source.display());
    let (run, metrics_addr) = spawn_run(
        &[
            "--no-watch".into(),
            "--follow".into(),
            "--metrics=127.0.0.1:0".into(),
            format!("--source={label}"),
            format!("--sink=jsonl:{}", dir.path().join("out.jsonl").display()),
        ],
        "metrics on http://",
    );
    let source = [("source", label.as_str())];
    // The run follows the file and has not ended: these are live counters.
    let s =
        scrape_until(&metrics_addr, |s| s.find("eventpipe_events_in_total", &source).is_some_and(|n| n >= 5.0)).await;
    stop(run);
    assert_eq!(s.get("eventpipe_source_bad_input_total", &source), 3.0);
    assert_eq!(s.get("eventpipe_source_non_events_total", &source), 1.0);
    assert_eq!(s.get("eventpipe_events_in_total", &source), 5.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_with_http_ingest_counts_requests_by_status() {
    let dir = tempfile::tempdir().unwrap();
    let (run, ingest_addr) = spawn_run(
        &[
            "--no-watch".into(),
            "--source=http:127.0.0.1:0".into(),
            format!("--sink=jsonl:{}", dir.path().join("out.jsonl").display()),
        ],
        "HTTP ingest listening on ",
    );
    let addr = ingest_addr.clone();
    let post = move |content_type: &str, body: &str| {
        use std::io::{Read, Write};
        let mut conn = std::net::TcpStream::connect(&addr).unwrap();
        write!(
            conn,
            "POST /ingest HTTP/1.1\r\nHost: {addr}\r\nContent-Type: {content_type}\r\nContent-Length: \
             {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut answer = String::new();
        conn.read_to_string(&mut answer).unwrap();
        answer.split_whitespace().nth(1).unwrap_or_default().to_string()
    };
    let event =
        r#"{"metadata":{"name":"a.1","namespace":"ns"},"involvedObject":{"kind":"Pod","name":"a"},"reason":"R"}"#;
    let statuses = tokio::task::spawn_blocking(move || {
        [
            post("application/json", &format!("{event}\n{{bad\n{event}\n")),
            post("application/json", "{bad"),
            post("application/xml", event),
        ]
    })
    .await
    .unwrap();
    assert_eq!(statuses, ["200", "400", "415"]);
    let s =
        scrape_until(&ingest_addr, |s| s.find("eventpipe_ingest_accepted_total", &[]).is_some_and(|n| n >= 2.0)).await;
    stop(run);
    assert_eq!(s.get("eventpipe_ingest_requests_total", &[("code", "200")]), 1.0);
    assert_eq!(s.get("eventpipe_ingest_requests_total", &[("code", "400")]), 1.0);
    assert_eq!(s.get("eventpipe_ingest_requests_total", &[("code", "415")]), 1.0);
    assert_eq!(s.get("eventpipe_ingest_rejected_total", &[("reason", "bad_document")]), 2.0);
    assert_eq!(s.get("eventpipe_source_bad_input_total", &[("source", "http:127.0.0.1:0")]), 2.0);
}

/// A sink plugin that refuses some events: each is dropped at once (no retry sleeps), counted
/// per reason, and the plugin has its `eventpipe_plugin_*` series like the other plugins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_exposes_its_sink_plugins_and_their_refusals_on_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("events.jsonl");
    let lines: Vec<String> = ["Started", "Permanent", "Pulled", "Garbage", "Trap", "Killing"]
        .iter()
        .enumerate()
        .map(|(i, reason)| {
            serde_json::json!({
                "metadata": {"name": format!("p{i}.1"), "namespace": "ns"},
                "involvedObject": {"kind": "Pod", "name": format!("p{i}"), "namespace": "ns"},
                "reason": reason, "message": "m", "source": {"component": "c"},
            })
            .to_string()
        })
        .collect();
    std::fs::write(&source, lines.join("\n") + "\n").unwrap();
    let plugin = crate::common::fixture_plugin("misbehave-sink");
    let (run, metrics_addr) = spawn_run(
        &[
            "--no-watch".into(),
            "--follow".into(),
            "--metrics=127.0.0.1:0".into(),
            format!("--source=jsonl:{}", source.display()),
            format!("--sink=plugin:{}", plugin.display()),
        ],
        "metrics on http://",
    );
    let dropped = [("tenant", "default"), ("outcome", "dropped")];
    // Three refusals, dropped within the scrape's ~10 s: no 12 × 10 s retries.
    let s = scrape_until(&metrics_addr, |s| s.find("eventpipe_sink_write_failures_total", &dropped) == Some(3.0)).await;
    stop(run);
    assert_eq!(s.get("eventpipe_sink_writes_total", &[("tenant", "default"), ("verb", "create")]), 3.0);
    for reason in ["Permanent", "PluginGarbage", "PluginFailed"] {
        assert_eq!(s.get("eventpipe_sink_rejected_total", &[("reason", reason)]), 1.0, "{reason}");
    }
    let p = |reason| [("plugin", "misbehave_sink"), ("tenant", "default"), ("reason", reason)];
    assert_eq!(s.get("eventpipe_plugin_failures_total", &p("trap")), 1.0);
    assert_eq!(s.get("eventpipe_plugin_failures_total", &p("garbage")), 1.0);
    assert_eq!(s.get("eventpipe_record_retries_total", &[("tenant", "default")]), 0.0);
    // Every plugin call is timed in the histogram.
    let plugin = [("plugin", "misbehave_sink"), ("tenant", "default")];
    let calls = s.get("eventpipe_plugin_calls_total", &plugin);
    assert!(calls >= 6.0, "{calls}");
    assert_histogram(&s, "eventpipe_plugin_call_duration_seconds", &plugin, calls);
}

/// Checks histogram `name`'s series with `labels`: `count` observations, cumulative buckets
/// ending in `+Inf` at the count, a sum that is not negative.
fn assert_histogram(s: &Scrape, name: &str, labels: &[(&str, &str)], count: f64) {
    assert_eq!(s.get(&format!("{name}_count"), labels), count, "{name}{labels:?}");
    assert!(s.get(&format!("{name}_sum"), labels) >= 0.0);
    let mut key: Vec<(String, String)> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    key.sort();
    let mut buckets: Vec<(f64, f64)> = s.samples[&format!("{name}_bucket")]
        .iter()
        .filter_map(|(l, v)| {
            let (le, rest): (Vec<_>, Vec<_>) = l.iter().cloned().partition(|(k, _)| k == "le");
            (rest == key).then(|| (le[0].1.parse::<f64>().unwrap(), *v))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert!(buckets.len() > 2, "{name}: {buckets:?}");
    assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "{name}: buckets not cumulative: {buckets:?}");
    assert_eq!(buckets.last().unwrap(), &(f64::INFINITY, count), "{name}: +Inf is the count");
}

/// A run writing 50 events to a webhook: the sink-write histogram counts every write of the
/// sink, the batch-size histogram every request the endpoint answered (summing to the events
/// sent), and the end-to-end histogram every event routed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_exposes_histograms_that_count_what_happened() {
    use std::sync::atomic::Ordering;
    let dir = tempfile::tempdir().unwrap();
    let (run, metrics_addr, hook, requests) = spawn_webhook_run(dir.path(), 50).await;
    let name = format!("webhook:http://{hook}/");
    let sink = [("sink", name.as_str())];
    let routed = [("tenant", "default")];
    let s = scrape_until(&metrics_addr, |s| {
        s.find("eventpipe_events_routed_total", &routed) == Some(50.0)
            && s.find("eventpipe_event_latency_seconds_count", &[]) == Some(50.0)
            && s.find("eventpipe_sink_acked_total", &sink).is_some_and(|n| n > 0.0)
            && s.find("eventpipe_sink_acked_total", &sink) == s.find("eventpipe_sink_sent_total", &sink)
    })
    .await;
    stop(run);
    let writes: f64 = ["create", "patch", "dropped", "gave_up", "cancelled"]
        .iter()
        .map(|outcome| s.get("eventpipe_sink_outcomes_total", &[("sink", name.as_str()), ("outcome", outcome)]))
        .sum();
    assert!(writes > 0.0);
    assert_histogram(&s, "eventpipe_sink_write_duration_seconds", &sink, writes);
    assert_histogram(&s, "eventpipe_sink_batch_size", &sink, requests.load(Ordering::SeqCst) as f64);
    assert_eq!(s.get("eventpipe_sink_batch_size_sum", &sink), s.get("eventpipe_sink_sent_total", &sink));
    assert_histogram(&s, "eventpipe_event_latency_seconds", &[], 50.0);
    assert_eq!(s.types["eventpipe_sink_write_duration_seconds"], "histogram");
}

/// `eventpipe run --follow` of an empty file with `--metrics` and the ingest token set: the
/// running process and its metrics address.
fn spawn_idle_run_with_token(dir: &std::path::Path) -> (std::process::Child, String) {
    let source = dir.join("events.jsonl");
    std::fs::write(&source, "").unwrap();
    spawn_run_with(
        &[
            "--no-watch".into(),
            "--follow".into(),
            "--metrics=127.0.0.1:0".into(),
            format!("--source=jsonl:{}", source.display()),
            "--sink=jsonl:/dev/null".into(),
        ],
        "metrics on http://",
        &[("EVENTPIPE_INGEST_TOKEN", "s3cret-token")],
    )
}

/// `--metrics` is unauthenticated unless the ingest token is set; then it asks for it.
#[test]
fn metrics_ask_for_the_ingest_token_when_one_is_set() {
    let dir = tempfile::tempdir().unwrap();
    let (run, addr) = spawn_idle_run_with_token(dir.path());
    let status = |text: String| text.split_whitespace().nth(1).unwrap_or_default().to_string();
    let without = status(scrape_process(&addr));
    let wrong = status(scrape_process_with(&addr, "Authorization: Bearer nope\r\n"));
    let right = status(scrape_process_with(&addr, "Authorization: Bearer s3cret-token\r\n"));
    stop(run);
    assert_eq!((without.as_str(), wrong.as_str(), right.as_str()), ("401", "401", "200"));
}

/// `GET path` of a running `eventpipe` at `addr`, with `headers` (each line ended by `\r\n`):
/// the status code and the body.
fn get_process(addr: &str, path: &str, headers: &str) -> (String, String) {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    write!(conn, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}Connection: close\r\n\r\n").unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    let status = answer.split_whitespace().nth(1).unwrap_or_default().to_string();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let body =
        if head.to_ascii_lowercase().contains("transfer-encoding: chunked") { dechunk(body) } else { body.into() };
    (status, body.trim().to_string())
}

/// `GET path` until it answers `status` (at most ~10 s); panics with the last answer otherwise.
fn get_until(addr: &str, path: &str, status: &str) -> String {
    let mut last = (String::new(), String::new());
    for _ in 0..100 {
        last = get_process(addr, path, "");
        if last.0 == status {
            return last.1;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{path} never answered {status}: {last:?}");
}

/// `/healthz` and `/readyz` sit beside `/metrics`, and need no token even when `/metrics` does
/// (a kubelet probe cannot send one).
#[test]
fn probes_answer_without_the_token_that_metrics_ask_for() {
    let dir = tempfile::tempdir().unwrap();
    let (run, addr) = spawn_idle_run_with_token(dir.path());
    let ready = get_until(&addr, "/readyz", "200");
    let healthz = get_process(&addr, "/healthz", "");
    let metrics = get_process(&addr, "/metrics", "").0;
    let with_token = get_process(&addr, "/readyz", "Authorization: Bearer s3cret-token\r\n").0;
    stop(run);
    assert_eq!(ready, "ok");
    assert_eq!(healthz, ("200".to_string(), "ok".to_string()));
    assert_eq!(metrics, "401");
    assert_eq!(with_token, "200");
}

/// On the HTTP ingest server too: the probes answer without the token every other path needs.
#[test]
fn the_ingest_server_answers_probes_without_its_token() {
    let dir = tempfile::tempdir().unwrap();
    let (run, addr) = spawn_run_with(
        &[
            "--no-watch".into(),
            "--source=http:127.0.0.1:0".into(),
            format!("--sink=jsonl:{}", dir.path().join("out.jsonl").display()),
        ],
        "HTTP ingest listening on ",
        &[("EVENTPIPE_INGEST_TOKEN", "s3cret-token")],
    );
    let ready = get_until(&addr, "/readyz", "200");
    let healthz = get_process(&addr, "/healthz", "").0;
    let metrics = get_process(&addr, "/metrics", "").0;
    let metrics_with_token = get_process(&addr, "/metrics", "Authorization: Bearer s3cret-token\r\n").0;
    let unknown = get_process(&addr, "/healthz/x", "").0;
    stop(run);
    assert_eq!(ready, "ok");
    assert_eq!((healthz.as_str(), metrics.as_str(), metrics_with_token.as_str()), ("200", "401", "200"));
    assert_eq!(unknown, "401", "only the probe paths themselves are open");
}

/// From SIGTERM on, `/readyz` answers `503` while the pipeline drains (here: a webhook that never
/// answers holds the drain for `--shutdown-timeout`); `/healthz` still answers `200`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_answers_503_while_a_shutdown_drains() {
    // A webhook that accepts connections and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = listener.local_addr().unwrap();
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::channel::<()>(1);
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = listener.accept().await {
            held.push(conn);
            let _ = seen_tx.try_send(());
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("events.jsonl");
    let stream =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/data/occurrences.jsonl")).unwrap();
    std::fs::write(&source, stream.lines().take(3).collect::<Vec<_>>().join("\n") + "\n").unwrap();
    let (mut run, addr) = spawn_run(
        &[
            "--no-watch".into(),
            "--follow".into(),
            "--shutdown-timeout=5".into(),
            "--metrics=127.0.0.1:0".into(),
            format!("--source=jsonl:{}", source.display()),
            format!("--sink=webhook:http://{hook}/"),
        ],
        "metrics on http://",
    );
    let probe = |path: &'static str, status: &'static str| {
        let addr = addr.clone();
        tokio::task::spawn_blocking(move || get_until(&addr, path, status))
    };
    probe("/readyz", "200").await.unwrap();
    // A write is in flight (the webhook holds it), then SIGTERM.
    tokio::time::timeout(Duration::from_secs(30), seen_rx.recv()).await.expect("the webhook is called");
    let _ = std::process::Command::new("kill").args(["-TERM", &run.id().to_string()]).status();
    let draining = probe("/readyz", "503").await.unwrap();
    let alive = probe("/healthz", "200").await.unwrap();
    let still_running = run.try_wait().unwrap().is_none();
    let _ = run.wait();
    assert_eq!((draining.as_str(), alive.as_str()), ("not ready", "ok"));
    assert!(still_running, "the run was still draining when /readyz answered 503");
}

/// The probe routes alone: `/readyz` follows the flag, `/healthz` always answers.
#[tokio::test]
async fn readyz_follows_the_readiness_flag_and_healthz_always_answers() {
    use eventpipe::health::{HEALTHZ, READYZ, Readiness, router};
    async fn get(router: &axum::Router, path: &str) -> (StatusCode, String) {
        let response = router.clone().oneshot(Request::get(path).body(Body::empty()).unwrap()).await.unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }
    let readiness = Readiness::new();
    let router = router(readiness.clone());
    assert_eq!(get(&router, HEALTHZ).await, (StatusCode::OK, "ok".into()));
    assert_eq!(get(&router, READYZ).await, (StatusCode::SERVICE_UNAVAILABLE, "not ready".into()));
    readiness.set(true);
    assert!(readiness.is_ready());
    assert_eq!(get(&router, READYZ).await, (StatusCode::OK, "ok".into()));
    readiness.set(false);
    assert_eq!(get(&router, READYZ).await.0, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(get(&router, HEALTHZ).await.0, StatusCode::OK);
    let head = router.clone().oneshot(Request::head(HEALTHZ).body(Body::empty()).unwrap()).await.unwrap();
    assert_eq!(head.status(), StatusCode::OK);
}

/// A small stream for the `metrics` sink: four objects in three namespaces, one event twice
/// (its repeat is a patch): five writes.
fn small_stream(dir: &std::path::Path) -> std::path::PathBuf {
    let event = |name: &str, ns: &str, kind: &str, object: &str, reason: &str, type_: &str| {
        serde_json::json!({
            "metadata": {"name": name, "namespace": ns},
            "involvedObject": {"kind": kind, "namespace": ns, "name": object},
            "reason": reason, "message": format!("{reason} {object}"), "type": type_, "count": 1,
            "source": {"component": "kubelet"},
            "firstTimestamp": "2026-11-27T14:00:00Z", "lastTimestamp": "2026-11-27T14:00:00Z",
        })
        .to_string()
    };
    let lines = [
        event("web-1.a", "shop", "Pod", "web-1", "Pulled", "Normal"),
        event("web-1.a", "shop", "Pod", "web-1", "Pulled", "Normal"),
        event("web-2.b", "shop", "Pod", "web-2", "BackOff", "Warning"),
        event("api.c", "web", "Deployment", "api", "ScalingReplicaSet", "Normal"),
        event("n1.d", "kube-system", "Node", "n1", "NodeReady", "Normal"),
    ];
    let path = dir.join("small.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

/// `eventpipe_events_total` series of `s`, by (type, namespace, kind, reason), summed over tenants.
fn event_series(s: &Scrape) -> BTreeMap<[String; 4], f64> {
    let mut out = BTreeMap::new();
    for (labels, n) in s.samples.get("eventpipe_events_total").into_iter().flatten() {
        let label = |k: &str| labels.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone()).unwrap();
        let key = [label("type"), label("involved_object_namespace"), label("involved_object_kind"), label("reason")];
        *out.entry(key).or_default() += n;
    }
    out
}

async fn run_small_stream_with(sink: &str) -> Scrape {
    let dir = tempfile::tempdir().unwrap();
    let source = small_stream(dir.path());
    let (run, metrics_addr) = spawn_run(
        &[
            "--no-watch".into(),
            "--follow".into(),
            "--metrics=127.0.0.1:0".into(),
            format!("--source=jsonl:{}", source.display()),
            format!("--sink={sink}"),
        ],
        "metrics on http://",
    );
    let s = scrape_until(&metrics_addr, |s| event_series(s).values().sum::<f64>() >= 5.0).await;
    stop(run);
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_sink_counts_each_write_by_type_namespace_kind_and_reason() {
    let s = run_small_stream_with("metrics").await;
    let key = |t: &str, ns: &str, kind: &str, reason: &str| [t.into(), ns.into(), kind.into(), reason.into()];
    let expected = BTreeMap::from([
        (key("Normal", "shop", "Pod", "Pulled"), 2.0),
        (key("Warning", "shop", "Pod", "BackOff"), 1.0),
        (key("Normal", "web", "Deployment", "ScalingReplicaSet"), 1.0),
        (key("Normal", "kube-system", "Node", "NodeReady"), 1.0),
    ]);
    assert_eq!(event_series(&s), expected, "one per write: the repeat's patch counted too");
    let tenants: Vec<&String> = s.samples["eventpipe_events_total"]
        .keys()
        .flat_map(|labels| labels.iter().filter(|(k, _)| k == "tenant").map(|(_, v)| v))
        .collect();
    assert!(!tenants.is_empty() && !tenants[0].is_empty(), "series carry their tenant");
    assert_eq!(s.get("eventpipe_events_folded_total", &[("tenant", tenants[0])]), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_sinks_series_cap_folds_new_label_sets_into_other_and_counts_them() {
    let s = run_small_stream_with("metrics,max_series=2").await;
    let series = event_series(&s);
    let other: [String; 4] = ["other".into(), "other".into(), "other".into(), "other".into()];
    let folded = series.get(&other).copied().unwrap_or(0.0);
    assert_eq!(series.len(), 3, "two label sets and other: {series:?}");
    assert_eq!(series.values().sum::<f64>(), 5.0, "every write counted once");
    assert!(folded >= 1.0, "{series:?}");
    let folded_total: f64 = s.samples["eventpipe_events_folded_total"].values().sum();
    assert_eq!(folded_total, folded, "what the cap folded is counted");
}
