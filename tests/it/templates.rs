//! Templated webhooks (`template=`, `preset=`) through `eventpipe run` against receivers that
//! answer as the services document: Slack's incoming webhook (`200 ok`, `400 invalid_payload`,
//! `429` with `Retry-After`) and PagerDuty's Events API v2 (`202`, `400 invalid event`, `429`).
//! The bundled stream's writes each arrive once, as bodies the service accepts; a template
//! that fails on some events fails those (logged, counted) and delivers the others. A batch
//! template (`batch=true`) renders one body per batch with every write in it once; one that
//! fails on a batch fails that batch's writes (counted) and delivers the other batches. An
//! encoder plugin (`encoder=NAME`: the `slack` example) makes each batch's request: every write
//! arrives once, and a batch the plugin refuses fails alone.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use eventpipe::event::Event;
use eventpipe::sink::EventSink;
use eventpipe::sink::template::{BodyOptions, correlation_key};
use eventpipe::sink::webhook::WebhookSink;
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A receiver: answers `429` with `Retry-After: 1` to the first `throttle` requests, then
/// checks each body with `check` (`Err`: the service's `400` answer) and keeps the accepted ones.
struct Receiver {
    throttle: AtomicU64,
    throttled: AtomicU64,
    check: fn(&Value) -> Result<(), String>,
    accepted: Mutex<Vec<Value>>,
    invalid: Mutex<Vec<(String, String)>>,
    ok: fn() -> Response,
    bad: fn(String) -> Response,
}

async fn receive(State(r): State<Arc<Receiver>>, body: String) -> Response {
    if r.throttle.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
        r.throttled.fetch_add(1, Ordering::SeqCst);
        return (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "1")], "rate_limited").into_response();
    }
    let checked =
        serde_json::from_str::<Value>(&body).map_err(|e| e.to_string()).and_then(|v| (r.check)(&v).map(|()| v));
    match checked {
        Ok(v) => {
            r.accepted.lock().unwrap().push(v);
            (r.ok)()
        }
        Err(problem) => {
            r.invalid.lock().unwrap().push((problem.clone(), body));
            (r.bad)(problem)
        }
    }
}

async fn start(receiver: Receiver) -> (Arc<Receiver>, SocketAddr) {
    let receiver = Arc::new(receiver);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().fallback(axum::routing::post(receive)).with_state(receiver.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (receiver, addr)
}

/// Slack's documented answers: `200 ok`, `400 invalid_payload`.
fn slack(throttle: u64) -> Receiver {
    Receiver {
        throttle: AtomicU64::new(throttle),
        throttled: AtomicU64::new(0),
        check: slack_message,
        accepted: Mutex::default(),
        invalid: Mutex::default(),
        ok: || (StatusCode::OK, "ok").into_response(),
        bad: |_| (StatusCode::BAD_REQUEST, "invalid_payload").into_response(),
    }
}

/// A Slack incoming-webhook message with Block Kit blocks: a `text` fallback, at most 50
/// blocks, section text objects (`mrkdwn`/`plain_text`) of 1–3000 characters, context blocks of
/// 1–10 elements.
fn slack_message(m: &Value) -> Result<(), String> {
    let chars = |v: &Value| v.as_str().map(|s| s.chars().count());
    let text_object = |t: &Value, max: usize| -> Result<(), String> {
        if !matches!(t["type"].as_str(), Some("mrkdwn" | "plain_text")) {
            return Err(format!("text object type {}", t["type"]));
        }
        match chars(&t["text"]) {
            Some(n) if (1..=max).contains(&n) => Ok(()),
            n => Err(format!("text of {n:?} characters")),
        }
    };
    if chars(&m["text"]).is_none_or(|n| n == 0) {
        return Err("no text fallback".into());
    }
    let blocks = m["blocks"].as_array().ok_or("no blocks")?;
    if blocks.is_empty() || blocks.len() > 50 {
        return Err(format!("{} blocks", blocks.len()));
    }
    for b in blocks {
        match b["type"].as_str() {
            Some("section") => text_object(&b["text"], 3000)?,
            Some("context") => {
                let elements = b["elements"].as_array().ok_or("context without elements")?;
                if elements.is_empty() || elements.len() > 10 {
                    return Err(format!("context of {} elements", elements.len()));
                }
                for e in elements {
                    text_object(e, 2000)?;
                }
            }
            other => return Err(format!("block type {other:?}")),
        }
    }
    Ok(())
}

/// PagerDuty Events API v2's documented answers: `202` with `{"status":"success",…}`, `400`
/// with `{"status":"invalid event",…}`.
fn pagerduty(throttle: u64) -> Receiver {
    Receiver {
        throttle: AtomicU64::new(throttle),
        throttled: AtomicU64::new(0),
        check: pagerduty_event,
        accepted: Mutex::default(),
        invalid: Mutex::default(),
        ok: || {
            let body = serde_json::json!({"status": "success", "message": "Event processed"});
            (StatusCode::ACCEPTED, [("content-type", "application/json")], body.to_string()).into_response()
        },
        bad: |problem| {
            let body = serde_json::json!({"status": "invalid event", "message": "Event object is invalid", "errors": [problem]});
            (StatusCode::BAD_REQUEST, [("content-type", "application/json")], body.to_string()).into_response()
        },
    }
}

/// A PagerDuty Events API v2 event: `routing_key` (32 characters), `event_action`
/// (`trigger`/`acknowledge`/`resolve`), `dedup_key` of at most 255 characters (required for
/// `acknowledge` and `resolve`), and for `trigger` a `payload` with `summary` (1–1024
/// characters), `source` and `severity` (`critical`/`error`/`warning`/`info`).
fn pagerduty_event(e: &Value) -> Result<(), String> {
    if e["routing_key"].as_str().map(str::len) != Some(32) {
        return Err("routing_key: expected 32 characters".into());
    }
    let dedup = e["dedup_key"].as_str();
    if dedup.is_some_and(|k| k.is_empty() || k.chars().count() > 255) {
        return Err("dedup_key: 1 to 255 characters".into());
    }
    match e["event_action"].as_str() {
        Some("trigger") => {
            let p = &e["payload"];
            if p["summary"].as_str().is_none_or(|s| s.is_empty() || s.chars().count() > 1024) {
                return Err("payload.summary: 1 to 1024 characters".into());
            }
            if p["source"].as_str().is_none_or(str::is_empty) {
                return Err("payload.source is required".into());
            }
            if !matches!(p["severity"].as_str(), Some("critical" | "error" | "warning" | "info")) {
                return Err(format!("payload.severity {}", p["severity"]));
            }
            if let Some(t) = p.get("timestamp") {
                chrono::DateTime::parse_from_rfc3339(t.as_str().unwrap_or_default())
                    .map_err(|e| format!("payload.timestamp: {e}"))?;
            }
            Ok(())
        }
        Some("acknowledge" | "resolve") if dedup.is_some() => Ok(()),
        other => Err(format!("event_action {other:?}")),
    }
}

/// Runs the bundled stream into `sink` and a JSON-lines sink; returns the JSON-lines sink's
/// calls and the run's stderr.
async fn run(sink: String, env: &[(&str, &str)], source: Option<&Path>) -> (Vec<Value>, String) {
    run_with(sink, env, source, Vec::new()).await
}

/// As [`run`], with more arguments.
async fn run_with(
    sink: String,
    env: &[(&str, &str)],
    source: Option<&Path>,
    extra: Vec<String>,
) -> (Vec<Value>, String) {
    let dir = tempfile::tempdir().unwrap();
    let calls = dir.path().join("calls.jsonl");
    let source = source.map_or_else(|| root().join("examples/data/occurrences.jsonl"), Path::to_path_buf);
    let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let calls_path = calls.clone();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_eventpipe"))
            .args(["run", "--no-watch"])
            .arg(format!("--source=jsonl:{}", source.display()))
            .arg(format!("--sink={sink}"))
            .arg(format!("--sink=jsonl:{}", calls_path.display()))
            .args(extra)
            .envs(env)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let calls = std::fs::read_to_string(&calls).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    (calls, stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bundled_stream_through_the_slack_preset_arrives_once_per_write_as_valid_block_kit() {
    let (receiver, addr) = start(slack(3)).await;
    let (calls, _) = run(format!("webhook:http://{addr}/services/T0/B0/X,preset=slack"), &[], None).await;
    assert_eq!(calls.len(), 9793, "the bundled stream's writes");
    assert!(receiver.invalid.lock().unwrap().is_empty(), "{:?}", &receiver.invalid.lock().unwrap()[..1]);
    assert_eq!(receiver.throttled.load(Ordering::SeqCst), 3, "the 429s were answered and waited out");
    let accepted = receiver.accepted.lock().unwrap();
    // The same writes: (count, message) of each message's context and section equal the calls'.
    let mut expected: BTreeMap<(String, String), usize> = BTreeMap::new();
    for c in &calls {
        let e = &c["event"];
        let message: String = e["message"].as_str().unwrap_or("").chars().take(200).collect();
        *expected.entry((format!("count {} ·", e["count"]), message)).or_default() += 1;
    }
    let mut got: BTreeMap<(String, String), usize> = BTreeMap::new();
    for m in accepted.iter() {
        let context = m["blocks"][1]["elements"][0]["text"].as_str().unwrap();
        let count = context.split(" · ").next().unwrap().to_string() + " ·";
        let section = m["blocks"][0]["text"]["text"].as_str().unwrap();
        let message: String = section.split_once('\n').unwrap().1.chars().take(200).collect();
        *got.entry((count, message)).or_default() += 1;
    }
    assert_eq!(accepted.len(), calls.len(), "one message per write");
    assert_eq!(got, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pagerduty_dedup_keys_are_stable_across_an_events_repeats_and_normal_events_resolve() {
    let (receiver, addr) = start(pagerduty(2)).await;
    let routing_key = "R0UT1NGKEY0123456789abcdefABCDEF";
    let (calls, stderr) = run(
        format!("webhook:http://{addr}/v2/enqueue,preset=pagerduty,resolve_on=Normal"),
        &[("EVENTPIPE_PAGERDUTY_ROUTING_KEY", routing_key)],
        None,
    )
    .await;
    assert!(!stderr.contains(routing_key), "the routing key is never logged");
    assert!(receiver.invalid.lock().unwrap().is_empty(), "{:?}", &receiver.invalid.lock().unwrap()[..1]);
    assert_eq!(receiver.throttled.load(Ordering::SeqCst), 2);
    let accepted = receiver.accepted.lock().unwrap();
    assert_eq!(accepted.len(), calls.len(), "one event per write");
    assert!(accepted.iter().all(|e| e["routing_key"] == routing_key));

    // Each write's (dedup_key, count, action) is that of the call's event, its key computed
    // from the event itself.
    let mut expected: BTreeMap<(String, i64, &str), usize> = BTreeMap::new();
    for c in &calls {
        let event: Event = serde_json::from_value(c["event"].clone()).unwrap();
        let action = if event.type_ == "Normal" { "resolve" } else { "trigger" };
        let key = correlation_key(&event);
        *expected.entry((key, i64::from(event.count), action)).or_default() += 1;
    }
    let mut got: BTreeMap<(String, i64, &str), usize> = BTreeMap::new();
    for e in accepted.iter() {
        let action = if e["event_action"] == "resolve" { "resolve" } else { "trigger" };
        let count = e["payload"]["custom_details"]["count"].as_i64().unwrap();
        *got.entry((e["dedup_key"].as_str().unwrap().to_string(), count, action)).or_default() += 1;
    }
    assert_eq!(got, expected);
    let repeated = calls.iter().filter(|c| c["verb"] == "patch").count();
    let keys: BTreeSet<&str> = accepted.iter().map(|e| e["dedup_key"].as_str().unwrap()).collect();
    assert!(repeated > 0 && keys.len() < calls.len() - repeated, "{} keys for {} writes", keys.len(), calls.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_failing_on_some_events_fails_those_and_delivers_the_others() {
    // Any JSON is accepted: some events have no message, which Slack would refuse as a fallback.
    let (receiver, addr) = start(Receiver { check: |_| Ok(()), ..slack(0) }).await;
    let dir = tempfile::tempdir().unwrap();
    let template = dir.path().join("body.json.j2");
    // `strftime` raises on a reason (not a time): every repeat (count > 1) fails to render.
    std::fs::write(
        &template,
        r#"{"text": {{ message | tojson }}, "blocks": [{"type": "section", "text": {"type": "plain_text", "text": {% if count > 1 %}{{ reason | strftime | tojson }}{% else %}{{ (reason ~ " " ~ count) | tojson }}{% endif %}}}]}"#,
    )
    .unwrap();
    let (calls, stderr) = run(format!("webhook:http://{addr}/hook,template={}", template.display()), &[], None).await;
    let repeats: Vec<&Value> = calls.iter().filter(|c| c["event"]["count"].as_i64() > Some(1)).collect();
    let firsts = calls.len() - repeats.len();
    assert!(!repeats.is_empty() && firsts > 0);
    assert_eq!(receiver.accepted.lock().unwrap().len(), firsts, "the events that rendered were delivered");
    assert!(receiver.invalid.lock().unwrap().is_empty());
    let failures: Vec<&str> = stderr.lines().filter(|l| l.contains("the template failed to render")).collect();
    assert_eq!(failures.len(), repeats.len(), "one error per failed event");
    let name = repeats[0]["event"]["metadata"]["name"].as_str().unwrap();
    assert!(failures.iter().any(|l| l.contains(name) && l.contains("strftime")), "{}", failures[0]);
}

#[tokio::test]
async fn render_errors_are_counted_per_event_and_the_sink_goes_on() {
    let (receiver, addr) = start(Receiver { check: |_| Ok(()), ..slack(0) }).await;
    let dir = tempfile::tempdir().unwrap();
    let template = dir.path().join("t.j2");
    std::fs::write(
        &template,
        r#"{"text": {{ event.metadata.name | tojson }}, "at": {{ last_timestamp | strftime | tojson }}}"#,
    )
    .unwrap();
    let mut options = BodyOptions::default();
    options.set("template", template.to_str().unwrap()).unwrap().unwrap();
    let config =
        eventpipe::sink::template::config("t".into(), &format!("http://{addr}/hook"), "team-a", &options).unwrap();
    let sink = Arc::new(WebhookSink::new(config).unwrap());
    for i in 0..10 {
        let mut e = Event::default();
        e.metadata.name = format!("e{i}").into();
        e.count = 1;
        // Every third event has no lastTimestamp: `strftime` raises on it.
        if i % 3 != 0 {
            e.last_timestamp = Some(chrono::Utc::now());
        }
        let result = sink.create(&e).await;
        assert_eq!(result.is_ok(), i % 3 != 0, "{i}: {result:?}");
    }
    let stats = sink.shutdown(std::time::Duration::from_secs(5)).await;
    assert_eq!((stats.render_errors, stats.acked), (4, 6));
    let names: Vec<String> =
        receiver.accepted.lock().unwrap().iter().map(|v| v["text"].as_str().unwrap().to_string()).collect();
    assert_eq!(names, ["e1", "e2", "e4", "e5", "e7", "e8"]);
    let metrics = eventpipe::metrics::Metrics::new();
    metrics.add_source(move |s| s.add_webhook(&sink));
    let text = metrics.encode().unwrap();
    assert!(text.contains("eventpipe_sink_render_errors_total{sink=\"t\"} 4"), "{text}");
}

/// A batch template listing each write of the batch as `[verb, namespace/name, count, tenant]`.
const BATCH_TEMPLATE: &str = r#"{"tenant": {{ tenant | tojson }}, "size": {{ items | length }}, "writes": [
{%- for item in items %}[{{ item.verb | tojson }}, {{ (item.event.metadata.namespace ~ "/" ~ item.event.metadata.name) | tojson }}, {{ item.count }}, {{ item.tenant | tojson }}]{{ "," if not loop.last }}{% endfor -%}
]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_template_renders_one_body_per_batch_with_every_write_once() {
    let (receiver, addr) =
        start(Receiver { check: |v| v["writes"].as_array().map(|_| ()).ok_or("no writes".into()), ..slack(0) }).await;
    let dir = tempfile::tempdir().unwrap();
    let template = dir.path().join("batch.json.j2");
    std::fs::write(&template, BATCH_TEMPLATE).unwrap();
    let sink = format!("webhook:http://{addr}/hook,template={},batch=true,max_batch=500", template.display());
    let (calls, _) = run(sink, &[], None).await;
    assert_eq!(calls.len(), 9793, "the bundled stream's writes");
    assert!(receiver.invalid.lock().unwrap().is_empty());
    let accepted = receiver.accepted.lock().unwrap();
    let mut expected: BTreeMap<(String, String, i64), usize> = BTreeMap::new();
    for c in &calls {
        let e = &c["event"];
        let name = format!(
            "{}/{}",
            e["metadata"]["namespace"].as_str().unwrap_or(""),
            e["metadata"]["name"].as_str().unwrap()
        );
        *expected.entry((c["verb"].as_str().unwrap().into(), name, e["count"].as_i64().unwrap())).or_default() += 1;
    }
    let mut got: BTreeMap<(String, String, i64), usize> = BTreeMap::new();
    for body in accepted.iter() {
        let writes = body["writes"].as_array().unwrap();
        assert_eq!(body["size"].as_u64(), Some(writes.len() as u64));
        assert!((1..=500).contains(&writes.len()), "a batch of {} writes", writes.len());
        assert_eq!(body["tenant"], "default");
        for w in writes {
            assert_eq!(w[3], "default", "each item is a write's context, with its tenant");
            let key = (w[0].as_str().unwrap().to_string(), w[1].as_str().unwrap().to_string(), w[2].as_i64().unwrap());
            *got.entry(key).or_default() += 1;
        }
    }
    assert_eq!(got, expected, "every write once");
    assert!(accepted.len() < calls.len() / 2, "{} bodies for {} writes: one per batch", accepted.len(), calls.len());

    // `validate` compiles a batch template: a syntax error names the file and line.
    let broken = dir.path().join("broken.json.j2");
    std::fs::write(&broken, "{\"writes\": [\n{% for item in items %}{{ item.verb }\n{% endfor %}]}").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(["validate", "--source=jsonl:-"])
        .arg(format!("--sink=webhook:http://{addr}/hook,template={},batch=true", broken.display()))
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success() && printed.contains("broken.json.j2") && printed.contains("line 2"), "{printed}");
}

#[tokio::test]
async fn a_batch_template_failing_on_a_batch_fails_its_writes_and_delivers_the_other_batches() {
    let (receiver, addr) = start(Receiver { check: |_| Ok(()), ..slack(0) }).await;
    let dir = tempfile::tempdir().unwrap();
    let template = dir.path().join("batch.j2");
    // `strftime` raises on a reason (not a time): a batch with a `Bad` event fails to render.
    std::fs::write(
        &template,
        r#"{"names": [{% for item in items %}{{ item.event.metadata.name | tojson }}{% if item.reason == "Bad" %}{{ item.reason | strftime }}{% endif %}{{ "," if not loop.last }}{% endfor %}]}"#,
    )
    .unwrap();
    let mut options = BodyOptions::default();
    options.set("template", template.to_str().unwrap()).unwrap().unwrap();
    options.set("batch", "true").unwrap().unwrap();
    let mut config =
        eventpipe::sink::template::config("t".into(), &format!("http://{addr}/hook"), "team-a", &options).unwrap();
    config.max_batch = 5;
    let sink = Arc::new(WebhookSink::new(config).unwrap());
    // Queued together (this runtime runs the sink's batcher only once the test awaits): four
    // batches of five, in order; the second holds the `Bad` event.
    let mut acks = Vec::new();
    for i in 0..20 {
        let mut e = Event::default();
        e.metadata.name = format!("e{i:02}").into();
        e.count = 1;
        e.reason = if i == 7 { "Bad" } else { "Pulled" }.into();
        acks.push(sink.submit(eventpipe::sink::retry::Verb::Create, &e, &[]).await.unwrap());
    }
    for (i, ack) in acks.into_iter().enumerate() {
        let result = ack.await;
        match i {
            5..10 => assert!(
                matches!(&result, Err(eventpipe::sink::SinkError::RequestConstruction(e)) if e.contains("strftime")),
                "{i}: {result:?}"
            ),
            _ => assert!(result.is_ok(), "{i}: {result:?}"),
        }
    }
    let stats = sink.shutdown(std::time::Duration::from_secs(5)).await;
    assert_eq!((stats.render_errors, stats.failed, stats.acked, stats.requests), (5, 5, 15, 3));
    let bodies: Vec<Value> = receiver.accepted.lock().unwrap().iter().map(|v| v["names"].clone()).collect();
    let name = |i: usize| Value::from(format!("e{i:02}"));
    let batch = |from: usize| Value::Array((from..from + 5).map(name).collect());
    assert_eq!(bodies, [batch(0), batch(10), batch(15)], "the other batches, each once");
    let metrics = eventpipe::metrics::Metrics::new();
    metrics.add_source(move |s| s.add_webhook(&sink));
    let text = metrics.encode().unwrap();
    assert!(text.contains("eventpipe_sink_render_errors_total{sink=\"t\"} 5"), "{text}");
}

/// A plugins directory under `dir` holding the Rust `slack` encoder example.
fn slack_encoder(dir: &Path) -> PathBuf {
    let built = crate::example_plugins::build_rust();
    let slack = built.iter().find(|b| b.name == "slack").expect("the slack example");
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::copy(&slack.file, plugins.join("slack.wasm")).unwrap();
    plugins
}

/// The `slack` encoder's line for a call's event.
fn slack_line(e: &Value) -> String {
    let text = |k: &str| e[k].as_str().unwrap_or("").to_string();
    let o = &e["involvedObject"];
    let (ns, name) = (o["namespace"].as_str().unwrap_or(""), o["name"].as_str().unwrap_or(""));
    let object = if ns.is_empty() { name.to_string() } else { format!("{ns}/{name}") };
    let count = e["count"].as_i64().unwrap_or(0);
    let repeat = if count > 1 { format!(" (x{count})") } else { String::new() };
    let icon = if text("type") == "Warning" { ":warning:" } else { ":information_source:" };
    let kind = o["kind"].as_str().unwrap_or("");
    format!("{icon} *{}* {kind} {object}{repeat}: {}", text("reason"), text("message"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bundled_stream_through_the_slack_encoder_arrives_once_per_write_in_block_kit_messages() {
    let (receiver, addr) = start(slack(3)).await;
    let dir = tempfile::tempdir().unwrap();
    let plugins = slack_encoder(dir.path());
    let (calls, _) = run_with(
        format!("webhook:http://{addr}/services/T0/B0/X,encoder=slack,max_batch=50"),
        &[],
        None,
        vec![format!("--plugins={}", plugins.display())],
    )
    .await;
    assert_eq!(calls.len(), 9793, "the bundled stream's writes");
    assert!(receiver.invalid.lock().unwrap().is_empty(), "{:?}", &receiver.invalid.lock().unwrap()[..1]);
    assert_eq!(receiver.throttled.load(Ordering::SeqCst), 3, "the 429s were answered and waited out");
    // Every write's line is one section of one message, once.
    let mut expected: BTreeMap<String, usize> = BTreeMap::new();
    for c in &calls {
        *expected.entry(slack_line(&c["event"]).chars().take(3000).collect()).or_default() += 1;
    }
    let mut got: BTreeMap<String, usize> = BTreeMap::new();
    let accepted = receiver.accepted.lock().unwrap();
    for m in accepted.iter() {
        let blocks = m["blocks"].as_array().unwrap();
        assert_eq!(m["text"].as_str().unwrap().lines().count(), blocks.len(), "a text line per section");
        for b in blocks {
            *got.entry(b["text"]["text"].as_str().unwrap().to_string()).or_default() += 1;
        }
    }
    assert_eq!(got, expected);
    assert!(accepted.len() < calls.len(), "writes share messages: {} for {}", accepted.len(), calls.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_the_encoder_refuses_fails_alone_and_the_others_are_delivered() {
    let (receiver, addr) = start(slack(0)).await;
    let dir = tempfile::tempdir().unwrap();
    let plugins = slack_encoder(dir.path());
    // `min_type = "Warning"`: the encoder refuses a batch without a Warning; one write per batch.
    let config = dir.path().join("eventpipe.toml");
    std::fs::write(&config, "[plugins.slack]\nmin_type = \"Warning\"\n").unwrap();
    let (calls, stderr) = run_with(
        format!("webhook:http://{addr}/hook,encoder=slack,max_batch=1"),
        &[],
        None,
        vec![format!("--plugins={}", plugins.display()), format!("--config={}", config.display())],
    )
    .await;
    let warnings = calls.iter().filter(|c| c["event"]["type"] == "Warning").count();
    assert!(warnings > 0 && warnings < calls.len());
    assert!(receiver.invalid.lock().unwrap().is_empty());
    assert_eq!(receiver.accepted.lock().unwrap().len(), warnings, "each Warning write was delivered");
    let refused: Vec<&str> = stderr.lines().filter(|l| l.contains("encoder failed on a batch")).collect();
    assert_eq!(refused.len(), calls.len() - warnings, "one error per refused write");
    assert!(refused[0].contains("min_type") && refused[0].contains("slack"), "{}", refused[0]);
}
