//! A webhook endpoint for delivery tests: records every item of every batch it accepts as it
//! arrives (before answering, as a receiver that processes a batch and then acknowledges it),
//! answers `200` after a fixed latency or one drawn from a seeded sequence, refuses a seeded share
//! of the requests with `503` (recording nothing of them), and tells each object's final state
//! and its sequence of writes.
//!
//! It drops a batch it already recorded, as the webhook docs tell receivers to: an attempt that
//! carries an `X-Eventpipe-Batch-Id` it took before (the sink timed out waiting for the answer
//! and sent the batch again) is answered `200` and counted in [`Received::resent`], not recorded
//! twice. A restarted process sends its batches under new ids, so its repeats are recorded.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

/// How the endpoint answers.
#[derive(Debug, Clone, Copy, Default)]
pub struct Answers {
    /// Every request waits this long before its answer…
    pub latency: Duration,
    /// …or, when set, a latency drawn uniformly in `[0, max]` from the seeded sequence.
    pub random_latency: Option<(Duration, u64)>,
    /// The share of requests answered `503` (drawn from the same sequence), 0.0 to 1.0.
    pub refuse: f64,
    /// The first request it records waits this long more before its answer.
    pub slow_first: Duration,
}

/// What the endpoint received.
#[derive(Default)]
pub struct Received {
    answers: Answers,
    /// Requests so far: the position in the seeded sequence.
    requests: AtomicU64,
    /// Requests answered `503`.
    pub refused: AtomicU64,
    /// Every item (`{"verb","event","patch"}`), in arrival order.
    pub items: Mutex<Vec<Value>>,
    /// Items of the batches answered `200` (received and acknowledged).
    pub answered: AtomicU64,
    /// Attempts of a batch already recorded (same batch id), answered `200` and not recorded.
    pub resent: AtomicU64,
    /// The batch ids recorded.
    batch_ids: Mutex<std::collections::HashSet<String>>,
}

/// One object's (an Event's `namespace/name`) state at the receiver: its last write's count,
/// message, firstTimestamp and lastTimestamp.
pub type FinalState = BTreeMap<String, Value>;

/// An Event's `namespace/name`: the server object it is written to.
pub fn object_key(e: &Value) -> String {
    format!("{}/{}", e["metadata"]["namespace"].as_str().unwrap_or(""), e["metadata"]["name"].as_str().unwrap_or(""))
}

/// One write as [`Received::writes`] tells it: verb, count, message, reason and lastTimestamp.
pub fn write(verb: &Value, e: &Value) -> Value {
    Value::Array(vec![
        verb.clone(),
        e["count"].clone(),
        e["message"].clone(),
        e["reason"].clone(),
        e["lastTimestamp"].clone(),
    ])
}

impl Received {
    /// Each object's final state: the event of its last item.
    pub fn final_state(&self) -> FinalState {
        let mut state = FinalState::new();
        for item in self.items.lock().unwrap().iter() {
            let e = &item["event"];
            let fields = ["count", "message", "firstTimestamp", "lastTimestamp"].map(|f| e[f].clone());
            state.insert(object_key(e), Value::Array(fields.to_vec()));
        }
        state
    }

    /// Each object's (`namespace/name`) writes, in arrival order: verb, count, message, reason
    /// and lastTimestamp.
    pub fn writes(&self) -> BTreeMap<String, Vec<Value>> {
        let mut writes: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for item in self.items.lock().unwrap().iter() {
            let e = &item["event"];
            writes.entry(object_key(e)).or_default().push(write(&item["verb"], e));
        }
        writes
    }

    /// Items received so far.
    pub fn len(&self) -> usize {
        self.items.lock().unwrap().len()
    }
}

async fn hook(
    axum::extract::State(received): axum::extract::State<Arc<Received>>,
    headers: axum::http::HeaderMap,
    body: String,
) -> axum::http::StatusCode {
    let answers = received.answers;
    let request = received.requests.fetch_add(1, Ordering::SeqCst);
    let draw = |stream: u64| {
        (splitmix64(answers.random_latency.map_or(0, |r| r.1) ^ (request << 1 | stream)) >> 11) as f64
            / (1u64 << 53) as f64
    };
    let latency = match answers.random_latency {
        Some((max, _)) => max.mul_f64(draw(0)),
        None => answers.latency,
    };
    if draw(1) < answers.refuse {
        tokio::time::sleep(latency).await;
        received.refused.fetch_add(1, Ordering::SeqCst);
        return axum::http::StatusCode::SERVICE_UNAVAILABLE;
    }
    let id = headers.get("x-eventpipe-batch-id").and_then(|v| v.to_str().ok()).map(str::to_string);
    if let Some(id) = id
        && !received.batch_ids.lock().unwrap().insert(id)
    {
        received.resent.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(latency).await;
        return axum::http::StatusCode::OK;
    }
    let batch: Value = serde_json::from_str(&body).unwrap_or_default();
    let items = batch["items"].as_array().cloned().unwrap_or_default();
    let n = items.len() as u64;
    let first = {
        let mut recorded = received.items.lock().unwrap();
        let first = recorded.is_empty();
        recorded.extend(items);
        first
    };
    tokio::time::sleep(latency + if first { answers.slow_first } else { Duration::ZERO }).await;
    received.answered.fetch_add(n, Ordering::SeqCst);
    axum::http::StatusCode::OK
}

/// SplitMix64: the seeded sequence's numbers.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Starts an endpoint answering after `latency` on a runtime of its own (so that blocking test
/// code may drive child processes meanwhile); returns what it receives, its `…/hook` URL and
/// the runtime (the endpoint stops when it is dropped).
pub fn start(latency: Duration) -> (Arc<Received>, String, tokio::runtime::Runtime) {
    start_answering(Answers { latency, ..Answers::default() })
}

/// As [`start`], answering as `answers` says.
pub fn start_answering(answers: Answers) -> (Arc<Received>, String, tokio::runtime::Runtime) {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let received = Arc::new(Received { answers, ..Received::default() });
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let app = axum::Router::new().route("/hook", axum::routing::post(hook)).with_state(received.clone());
    runtime.spawn(async move { axum::serve(listener, app).await.unwrap() });
    (received, format!("http://{addr}/hook"), runtime)
}
