//! The webhook sink against a local axum server that fails (500, connection refused, too slow)
//! for a while and then recovers: every event arrives at least once, the queue never holds more
//! than its capacity, the at-most-once mode drops (counted) instead of waiting, and client-go's
//! `recordToSink` loop runs on top unchanged.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use eventpipe::correlator::{CorrelatorOptions, EventCorrelator, Occurrence};
use eventpipe::event::{Event, ObjectMeta, ObjectReference};
use eventpipe::sink::concurrency::Concurrency;
use eventpipe::sink::retry::Verb;
use eventpipe::sink::webhook::{BATCH_ID_HEADER, Backoff, Delivery, WebhookConfig, WebhookSink};
use eventpipe::sink::{EventSink, RetryPolicy, SinkError, Stored, WriteOutcome, write_event};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// How the test server answers.
#[derive(Clone, Copy, Debug)]
enum Mode {
    Ok,
    Fail(StatusCode),
    /// Answer after this long (longer than the client's timeout).
    Slow(Duration),
    /// Hold the request until released.
    Hold,
}

#[derive(Default)]
struct Server {
    /// Answers for the next requests, then `Mode::Ok`.
    script: Mutex<Vec<Mode>>,
    /// Every mode from now on, overriding the script.
    always: Mutex<Option<Mode>>,
    release: tokio::sync::Notify,
    requests: AtomicU64,
    /// (verb, event name, patch) of every item of every acknowledged batch, in arrival order.
    received: Mutex<Vec<(String, String, Value)>>,
    batch_ids: Mutex<Vec<String>>,
}

async fn hook(State(server): State<Arc<Server>>, headers: HeaderMap, body: String) -> StatusCode {
    server.requests.fetch_add(1, Ordering::SeqCst);
    server.batch_ids.lock().unwrap().push(headers[BATCH_ID_HEADER].to_str().unwrap().to_string());
    let mode = match *server.always.lock().unwrap() {
        Some(mode) => mode,
        None => {
            let mut script = server.script.lock().unwrap();
            if script.is_empty() { Mode::Ok } else { script.remove(0) }
        }
    };
    match mode {
        Mode::Ok => {}
        Mode::Fail(code) => return code,
        Mode::Slow(d) => tokio::time::sleep(d).await,
        Mode::Hold => server.release.notified().await,
    }
    assert_eq!(headers["content-type"], "application/json");
    let batch: Value = serde_json::from_str(&body).unwrap();
    let mut received = server.received.lock().unwrap();
    for item in batch["items"].as_array().unwrap() {
        let name = item["event"]["metadata"]["name"].as_str().unwrap().to_string();
        received.push((item["verb"].as_str().unwrap().to_string(), name, item["patch"].clone()));
    }
    StatusCode::OK
}

async fn serve_on(listener: tokio::net::TcpListener, server: Arc<Server>) {
    let app = Router::new().route("/hook", axum::routing::post(hook)).with_state(server);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
}

async fn start(script: Vec<Mode>) -> (Arc<Server>, SocketAddr) {
    let server = Arc::new(Server { script: Mutex::new(script), ..Server::default() });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    serve_on(listener, server.clone()).await;
    (server, addr)
}

fn config(addr: SocketAddr) -> WebhookConfig {
    WebhookConfig {
        queue_capacity: 8,
        max_batch: 4,
        max_batch_delay: Duration::from_millis(5),
        request_timeout: Duration::from_secs(5),
        backoff: Backoff {
            base: Duration::from_millis(2),
            cap: Duration::from_millis(20),
            max_attempts: None,
            jitter: Arc::new(|| 0.5),
        },
        ..WebhookConfig::new("hook", format!("http://{addr}/hook"))
    }
}

fn event(name: &str) -> Event {
    Event {
        metadata: ObjectMeta { name: name.into(), namespace: "default".into(), ..ObjectMeta::default() },
        involved_object: ObjectReference { kind: "Pod".into(), name: "web".into(), ..ObjectReference::default() },
        reason: "Pulled".into(),
        message: "pulled".into(),
        count: 1,
        ..Event::default()
    }
}

/// Creates `n` events concurrently through `EventSink::create`; each call returns once acked.
async fn create_all(sink: &Arc<WebhookSink>, n: usize) {
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let sink = sink.clone();
        tasks.spawn(async move {
            let e = event(&format!("e.{i}"));
            let stored = sink.create(&e).await.expect("acknowledged");
            assert_eq!(stored, Stored::AsSent, "the webhook stores the event as sent");
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
}

fn names(server: &Server) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    for (_, name, _) in server.received.lock().unwrap().iter() {
        *seen.entry(name.clone()).or_default() += 1;
    }
    seen
}

fn assert_all_arrived(server: &Server, n: usize) {
    let seen = names(server);
    for i in 0..n {
        assert!(seen.contains_key(&format!("e.{i}")), "e.{i} never arrived: {seen:?}");
    }
    assert_eq!(seen.len(), n);
}

#[tokio::test]
async fn server_errors_then_recovery_every_event_arrives_and_the_queue_stays_bounded() {
    let fail = Mode::Fail(StatusCode::INTERNAL_SERVER_ERROR);
    let (server, addr) = start(vec![fail, Mode::Fail(StatusCode::SERVICE_UNAVAILABLE), fail, fail]).await;
    let sink = Arc::new(WebhookSink::new(config(addr)).unwrap());
    create_all(&sink, 60).await;
    assert_all_arrived(&server, 60);
    let stats = sink.stats();
    assert_eq!((stats.acked, stats.failed, stats.enqueued, stats.sent), (60, 0, 60, 60));
    assert!(stats.retries >= 4, "{stats:?}");
    assert_eq!(stats.requests, server.requests.load(Ordering::SeqCst));
    assert!(stats.max_queue_depth <= 8, "the queue never exceeds its capacity: {stats:?}");
    assert_eq!(stats.max_queue_depth, 8, "60 concurrent callers fill it: {stats:?}");
    assert_eq!(stats.queue_depth, 0);
    // Every request of a retried batch carried the same id: fewer ids than requests.
    let ids = server.batch_ids.lock().unwrap().clone();
    let distinct: std::collections::BTreeSet<&String> = ids.iter().collect();
    assert!(distinct.len() < ids.len(), "{ids:?}");
}

#[tokio::test]
async fn connection_refused_then_the_server_comes_up() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let sink = Arc::new(WebhookSink::new(config(addr)).unwrap());
    let calls = tokio::spawn({
        let sink = sink.clone();
        async move { create_all(&sink, 20).await }
    });
    while sink.stats().retries < 3 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let server = Arc::new(Server::default());
    serve_on(tokio::net::TcpListener::bind(addr).await.unwrap(), server.clone()).await;
    calls.await.unwrap();
    assert_all_arrived(&server, 20);
    let stats = sink.stats();
    assert_eq!((stats.acked, stats.failed), (20, 0));
    assert!(stats.max_queue_depth <= 8);
}

#[tokio::test]
async fn timeouts_are_retried_and_every_event_arrives_at_least_once() {
    let slow = Mode::Slow(Duration::from_millis(300));
    let (server, addr) = start(vec![slow, slow]).await;
    let sink = Arc::new(
        WebhookSink::new(WebhookConfig { request_timeout: Duration::from_millis(50), ..config(addr) }).unwrap(),
    );
    create_all(&sink, 12).await;
    assert_all_arrived(&server, 12);
    let stats = sink.stats();
    assert_eq!((stats.acked, stats.failed), (12, 0));
    assert!(stats.retries >= 2, "{stats:?}");
}

#[tokio::test]
async fn exhausted_attempts_fail_retryably_and_4xx_fails_for_good() {
    let (server, addr) = start(Vec::new()).await;
    *server.always.lock().unwrap() = Some(Mode::Fail(StatusCode::BAD_GATEWAY));
    let mut cfg = config(addr);
    cfg.backoff.max_attempts = Some(3);
    let sink = WebhookSink::new(cfg.clone()).unwrap();
    let err = sink.create(&event("e.0")).await.unwrap_err();
    assert!(matches!(&err, SinkError::Transport(m) if m.contains("after 3 attempt(s)") && m.contains("502")), "{err}");
    assert!(err.is_retryable());
    assert_eq!((sink.stats().requests, sink.stats().retries, sink.stats().failed), (3, 2, 1));

    *server.always.lock().unwrap() = Some(Mode::Fail(StatusCode::UNPROCESSABLE_ENTITY));
    let sink = WebhookSink::new(cfg).unwrap();
    let err = sink.patch(&event("e.1"), br#"{"count":2}"#).await.unwrap_err();
    match &err {
        SinkError::Status(s) => assert_eq!((s.code, s.reason.as_str()), (422, "UnprocessableEntity")),
        other => panic!("{other}"),
    }
    assert!(!err.is_retryable());
    assert_eq!((sink.stats().requests, sink.stats().retries), (1, 0));
}

#[tokio::test]
async fn at_most_once_drops_when_full_and_counts_it() {
    let (server, addr) = start(Vec::new()).await;
    *server.always.lock().unwrap() = Some(Mode::Hold);
    let cfg = WebhookConfig { queue_capacity: 2, max_batch: 1, delivery: Delivery::AtMostOnce, ..config(addr) };
    let sink = WebhookSink::new(cfg).unwrap();
    let mut dropped = 0;
    for i in 0..10 {
        match sink.create(&event(&format!("e.{i}"))).await {
            Ok(_) => {}
            Err(SinkError::Status(s)) if s.code == 503 && s.reason == "QueueFull" => dropped += 1,
            Err(other) => panic!("{other}"),
        }
    }
    let stats = sink.stats();
    assert_eq!((dropped, stats.dropped, stats.enqueued), (8, 8, 2), "{stats:?}");
    assert_eq!(stats.max_queue_depth, 2);
    *server.always.lock().unwrap() = Some(Mode::Ok);
    server.release.notify_one();
    let stats = sink.shutdown(Duration::from_secs(30)).await;
    assert_eq!((stats.acked, stats.queue_depth), (2, 0), "{stats:?}");
    let arrived: Vec<String> = names(&server).into_keys().collect();
    assert_eq!(arrived, ["e.0", "e.1"]);
}

#[tokio::test]
async fn submit_returns_an_ack_and_shutdown_drains_the_queue() {
    let (server, addr) = start(vec![Mode::Fail(StatusCode::INTERNAL_SERVER_ERROR)]).await;
    let sink = WebhookSink::new(config(addr)).unwrap();
    let mut acks = Vec::new();
    for i in 0..6 {
        acks.push(sink.submit(Verb::Create, &event(&format!("e.{i}")), &[]).await.unwrap());
    }
    let stats = sink.shutdown(Duration::from_secs(30)).await;
    assert_eq!((stats.acked, stats.failed, stats.queue_depth), (6, 0, 0), "{stats:?}");
    for ack in acks {
        ack.await.unwrap();
    }
    assert_all_arrived(&server, 6);
    let err = sink.create(&event("late")).await.unwrap_err();
    assert!(matches!(err, SinkError::Transport(ref m) if m.contains("shut down")), "{err}");
}

#[tokio::test]
async fn shutdown_grace_fails_what_cannot_be_delivered() {
    let (server, addr) = start(Vec::new()).await;
    *server.always.lock().unwrap() = Some(Mode::Fail(StatusCode::INTERNAL_SERVER_ERROR));
    let sink = WebhookSink::new(config(addr)).unwrap();
    let ack = sink.submit(Verb::Create, &event("e.0"), &[]).await.unwrap();
    let stats = sink.shutdown(Duration::from_millis(50)).await;
    assert_eq!((stats.acked, stats.failed, stats.queue_depth), (0, 1, 0), "{stats:?}");
    assert!(matches!(ack.await, Err(SinkError::Transport(_))));
}

#[tokio::test]
async fn dropping_the_sink_abandons_its_queue() {
    let (server, addr) = start(Vec::new()).await;
    *server.always.lock().unwrap() = Some(Mode::Fail(StatusCode::INTERNAL_SERVER_ERROR));
    let sink = WebhookSink::new(config(addr)).unwrap();
    let ack = sink.submit(Verb::Create, &event("e.0"), &[]).await.unwrap();
    drop(sink);
    assert!(matches!(ack.await, Err(SinkError::Transport(_))));
}

/// client-go's `recordToSink` on top of the webhook: the first occurrence is a create, the repeat
/// a patch carrying the strategic-merge body, each written once its batch is acknowledged.
#[tokio::test]
async fn record_to_sink_runs_unchanged_on_top() {
    let (server, addr) = start(vec![Mode::Fail(StatusCode::SERVICE_UNAVAILABLE)]).await;
    let sink = WebhookSink::new(config(addr)).unwrap();
    let mut correlator = EventCorrelator::new(CorrelatorOptions::default());
    let policy = RetryPolicy { sleep_duration: Duration::from_millis(1), ..RetryPolicy::default() };
    let cancel = CancellationToken::new();
    let mut outcomes = Vec::new();
    for _ in 0..2 {
        let prepared = correlator.prepare(vec![Occurrence::from(event("web.1"))]);
        let result = correlator.finish(prepared.into_iter().next().unwrap());
        outcomes.push(write_event(&sink, &mut correlator, result, &policy, &cancel).await);
    }
    assert_eq!(
        outcomes,
        [
            WriteOutcome::Written { verb: Verb::Create, attempts: 1 },
            WriteOutcome::Written { verb: Verb::Patch, attempts: 1 }
        ]
    );
    let received = server.received.lock().unwrap().clone();
    let verbs: Vec<&str> = received.iter().map(|(v, _, _)| v.as_str()).collect();
    assert_eq!(verbs, ["create", "patch"]);
    assert!(received[0].2.is_null());
    assert_eq!(received[1].2["count"], 2, "{:?}", received[1].2);
}

#[test]
fn bad_configs_are_refused() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let _guard = rt.enter();
    for url in ["ftp://x/hook", "/relative", "not a url"] {
        assert!(WebhookSink::new(WebhookConfig::new("w", url)).is_err(), "{url}");
    }
    let zero = WebhookConfig { queue_capacity: 0, ..WebhookConfig::new("w", "http://127.0.0.1:1/") };
    assert!(WebhookSink::new(zero).is_err());
}

/// A receiver that processes each batch after a random pause (0–`max_pause_ms` ms), recording
/// every item's (object, sequence number) once the batch is processed, and how many requests it
/// held at once at most. While `throttled` lasts, it answers `429` with `Retry-After` instead
/// (seconds, or an HTTP-date every other time) and records nothing.
#[derive(Default)]
struct Ordered {
    max_pause_ms: u64,
    throttled: AtomicU64,
    processed: Mutex<Vec<(String, u64)>>,
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
    /// When each attempt of each batch id arrived, and whether it was throttled.
    attempts: Mutex<BTreeMap<String, Vec<(std::time::Instant, bool)>>>,
}

async fn ordered_hook(
    State(server): State<Arc<Ordered>>,
    headers: HeaderMap,
    body: String,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let id = headers[BATCH_ID_HEADER].to_str().unwrap().to_string();
    let throttle = server.throttled.load(Ordering::SeqCst);
    let throttled = throttle > 0
        && server.throttled.compare_exchange(throttle, throttle - 1, Ordering::SeqCst, Ordering::SeqCst).is_ok();
    server.attempts.lock().unwrap().entry(id).or_default().push((std::time::Instant::now(), throttled));
    if throttled {
        let retry_after = if throttle % 2 == 0 {
            "1".to_string()
        } else {
            // An HTTP-date 2 s ahead: a wait of 1 to 2 s at the date's one-second precision.
            (chrono::Utc::now() + chrono::Duration::seconds(2)).format("%a, %d %b %Y %H:%M:%S GMT").to_string()
        };
        return (StatusCode::TOO_MANY_REQUESTS, [("retry-after", retry_after)]).into_response();
    }
    let now = server.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    server.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let pause = rand::random_range(0..=server.max_pause_ms);
    tokio::time::sleep(Duration::from_millis(pause)).await;
    let batch: Value = serde_json::from_str(&body).unwrap();
    {
        let mut processed = server.processed.lock().unwrap();
        for item in batch["items"].as_array().unwrap() {
            let name = item["event"]["metadata"]["name"].as_str().unwrap().to_string();
            processed.push((name, item["event"]["message"].as_str().unwrap().parse().unwrap()));
        }
    }
    server.in_flight.fetch_sub(1, Ordering::SeqCst);
    StatusCode::OK.into_response()
}

async fn start_ordered(server: Ordered) -> (Arc<Ordered>, SocketAddr) {
    let server = Arc::new(server);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().route("/hook", axum::routing::post(ordered_hook)).with_state(server.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (server, addr)
}

/// Submits `writes` writes spread over `objects` objects, round robin, without waiting for any
/// acknowledgement (so one object's later writes are queued while its earlier ones are in
/// flight); returns once every write is acknowledged.
async fn submit_spread(sink: &WebhookSink, objects: u64, writes: u64) {
    let mut acks = Vec::new();
    for i in 0..writes {
        let mut e = event(&format!("o.{}", i % objects));
        e.message = (i / objects).to_string().into();
        acks.push(sink.submit(Verb::Patch, &e, b"{}").await.unwrap());
    }
    for ack in acks {
        ack.await.expect("acknowledged");
    }
}

/// Per object, the sequence numbers in the order the receiver processed them.
fn per_object(server: &Ordered) -> BTreeMap<String, Vec<u64>> {
    let mut seen: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (name, seq) in server.processed.lock().unwrap().iter() {
        seen.entry(name.clone()).or_default().push(*seq);
    }
    seen
}

#[tokio::test]
async fn an_objects_later_write_never_overtakes_its_earlier_one_with_batches_in_flight_together() {
    let (server, addr) = start_ordered(Ordered { max_pause_ms: 30, ..Ordered::default() }).await;
    let cfg = WebhookConfig {
        queue_capacity: 4096,
        max_batch: 3,
        concurrency: Concurrency::Fixed(16),
        batch_quiet: Duration::ZERO,
        ..config(addr)
    };
    let sink = WebhookSink::new(cfg).unwrap();
    submit_spread(&sink, 24, 1200).await;
    let seen = per_object(&server);
    assert_eq!(seen.len(), 24);
    for (object, seqs) in &seen {
        assert_eq!(*seqs, (0..50).collect::<Vec<_>>(), "{object}: processed out of order or not exactly once");
    }
    let together = server.max_in_flight.load(Ordering::SeqCst);
    assert!(together > 1, "batches were in flight together ({together} at most)");
    assert!(together <= 16, "never more than the concurrency: {together}");
    let stats = sink.stats();
    assert_eq!((stats.acked, stats.failed, stats.concurrency_limit), (1200, 0, 16), "{stats:?}");
}

#[tokio::test]
async fn adaptive_concurrency_rises_against_a_steady_endpoint() {
    let (server, addr) = start_ordered(Ordered { max_pause_ms: 0, ..Ordered::default() }).await;
    let cfg = WebhookConfig { queue_capacity: 8192, max_batch: 5, batch_quiet: Duration::ZERO, ..config(addr) };
    assert_eq!(cfg.concurrency, Concurrency::Adaptive, "the default");
    let sink = WebhookSink::new(cfg).unwrap();
    assert_eq!(sink.stats().concurrency_limit, 1, "it starts at one request");
    submit_spread(&sink, 4000, 4000).await;
    let stats = sink.stats();
    assert!(stats.concurrency_limit > 2, "{stats:?}");
    assert!(server.max_in_flight.load(Ordering::SeqCst) > 1);
    assert_eq!((stats.acked, stats.requests_in_flight), (4000, 0), "{stats:?}");
    assert_eq!(per_object(&server).len(), 4000);
}

#[tokio::test]
async fn a_429_storm_loses_nothing_and_retry_after_is_waited_out() {
    let (server, addr) =
        start_ordered(Ordered { max_pause_ms: 5, throttled: AtomicU64::new(12), ..Ordered::default() }).await;
    let mut cfg = WebhookConfig {
        queue_capacity: 4096,
        max_batch: 10,
        concurrency: Concurrency::Adaptive,
        batch_quiet: Duration::ZERO,
        ..config(addr)
    };
    cfg.backoff.cap = Duration::from_secs(5);
    cfg.backoff.max_attempts = Some(10);
    let sink = WebhookSink::new(cfg).unwrap();
    submit_spread(&sink, 40, 400).await;
    // Every write arrived exactly once, in order per object: no throttled batch was processed.
    let seen = per_object(&server);
    assert_eq!(seen.len(), 40);
    for (object, seqs) in &seen {
        assert_eq!(*seqs, (0..10).collect::<Vec<_>>(), "{object}");
    }
    let stats = sink.stats();
    assert_eq!((stats.acked, stats.failed), (400, 0), "{stats:?}");
    assert!(stats.retries >= 12, "{stats:?}");
    // A throttled batch's next attempt came after its Retry-After (at least 1 s).
    let attempts = server.attempts.lock().unwrap();
    let mut waited = 0;
    for tries in attempts.values() {
        for pair in tries.windows(2) {
            if pair[0].1 {
                let gap = pair[1].0 - pair[0].0;
                assert!(gap >= Duration::from_millis(950), "retried {gap:?} after a 429");
                waited += 1;
            }
        }
    }
    assert!(waited >= 1, "some throttled batch was retried");
}

/// Through `eventpipe run`: one event repeated 20 times (its create, then 19 patches) to an
/// endpoint that answers after 100 ms. The tenant router hands the webhook an event's next write
/// before the earlier one is acknowledged, so the repeats share requests instead of costing
/// one round trip each, and they still arrive in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_events_writes_share_requests_and_stay_in_order_through_run() {
    let (server, addr) = start(Vec::new()).await;
    *server.always.lock().unwrap() = Some(Mode::Slow(Duration::from_millis(100)));
    let dir = tempfile::tempdir().unwrap();
    let stream =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/data/occurrences.jsonl")).unwrap();
    let line = stream.lines().next().unwrap();
    let source = dir.path().join("events.jsonl");
    std::fs::write(&source, format!("{line}\n").repeat(20)).unwrap();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_eventpipe"))
            .args(["run", "--no-watch"])
            .arg(format!("--source=jsonl:{}", source.display()))
            .arg(format!("--sink=webhook:http://{addr}/hook"))
            .current_dir(dir.path())
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let received = server.received.lock().unwrap().clone();
    let verbs: Vec<&str> = received.iter().map(|(v, _, _)| v.as_str()).collect();
    assert_eq!(verbs.len(), 20, "{verbs:?}");
    assert_eq!(verbs[0], "create");
    assert!(verbs[1..].iter().all(|v| *v == "patch"), "{verbs:?}");
    let counts: Vec<u64> = received[1..].iter().map(|(_, _, patch)| patch["count"].as_u64().unwrap()).collect();
    assert_eq!(counts, (2..=20).collect::<Vec<_>>(), "the patches arrived in order");
    let requests = server.requests.load(Ordering::SeqCst);
    assert!(requests <= 6, "20 writes of one event in {requests} requests (one each when the router waits)");
}
