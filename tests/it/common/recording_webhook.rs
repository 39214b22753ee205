//! A webhook endpoint for delivery tests: records every item of every batch as it arrives
//! (before answering, as a receiver that processes a batch and then acknowledges it), answers
//! `200` after a fixed latency, and tells each object's final state.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

/// What the endpoint received.
#[derive(Default)]
pub struct Received {
    latency: Duration,
    /// Every item (`{"verb","event","patch"}`), in arrival order.
    pub items: Mutex<Vec<Value>>,
    /// Items of the batches answered `200` (received and acknowledged).
    pub answered: AtomicU64,
}

/// One object's (an Event's `namespace/name`) state at the receiver: its last write's count,
/// message, firstTimestamp and lastTimestamp.
pub type FinalState = BTreeMap<String, Value>;

impl Received {
    /// Each object's final state: the event of its last item.
    pub fn final_state(&self) -> FinalState {
        let mut state = FinalState::new();
        for item in self.items.lock().unwrap().iter() {
            let e = &item["event"];
            let key = format!(
                "{}/{}",
                e["metadata"]["namespace"].as_str().unwrap_or(""),
                e["metadata"]["name"].as_str().unwrap_or("")
            );
            let fields = ["count", "message", "firstTimestamp", "lastTimestamp"].map(|f| e[f].clone());
            state.insert(key, Value::Array(fields.to_vec()));
        }
        state
    }

    /// Items received so far.
    pub fn len(&self) -> usize {
        self.items.lock().unwrap().len()
    }
}

async fn hook(
    axum::extract::State(received): axum::extract::State<Arc<Received>>,
    body: String,
) -> axum::http::StatusCode {
    let batch: Value = serde_json::from_str(&body).unwrap_or_default();
    let items = batch["items"].as_array().cloned().unwrap_or_default();
    let n = items.len() as u64;
    received.items.lock().unwrap().extend(items);
    tokio::time::sleep(received.latency).await;
    received.answered.fetch_add(n, Ordering::SeqCst);
    axum::http::StatusCode::OK
}

/// Starts an endpoint answering after `latency` on a runtime of its own (so that blocking test
/// code may drive child processes meanwhile); returns what it receives, its `…/hook` URL and
/// the runtime (the endpoint stops when it is dropped).
pub fn start(latency: Duration) -> (Arc<Received>, String, tokio::runtime::Runtime) {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let received = Arc::new(Received { latency, ..Received::default() });
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let app = axum::Router::new().route("/hook", axum::routing::post(hook)).with_state(received.clone());
    runtime.spawn(async move { axum::serve(listener, app).await.unwrap() });
    (received, format!("http://{addr}/hook"), runtime)
}
