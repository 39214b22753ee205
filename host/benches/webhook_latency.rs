//! The webhook sink against an endpoint that answers every batch after a fixed latency
//! (default 200 ms, as a SaaS or chat endpoint does): `eventpipe run --source
//! jsonl:examples/data/occurrences.jsonl --sink webhook:URL,…` on the bundled stream (13,860
//! events, 9,793 sink writes), in one run of each setting:
//!
//! - `concurrency=1,max_batch=100`: one request at a time with the batch limit of before;
//! - `concurrency=1`: one request at a time, default batches;
//! - the default (`concurrency=adaptive`).
//!
//! For each: events/s = sink writes the endpoint received / wall seconds of the process (target
//! ≥ 5,000 for the default), requests, the average batch, and the most requests the endpoint
//! held at once (the concurrency the sink reached). The endpoint must receive exactly the
//! writes the run's summary reports (created + patched).
//!
//! ```sh
//! cargo bench -p eventpipe --bench webhook_latency
//! ```
//!
//! `EVENTPIPE_BENCH_LATENCY_MS` sets the latency (default 200); `EVENTPIPE_BIN` the binary
//! (default: the one `cargo bench` builds).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use serde::Deserialize;

/// Events per second the default setting must reach against the 200 ms endpoint.
const TARGET: f64 = 5_000.0;

/// What the endpoint saw.
#[derive(Default)]
struct Endpoint {
    latency: Duration,
    items: AtomicU64,
    requests: AtomicU64,
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
}

impl Endpoint {
    fn reset(&self) {
        for counter in [&self.items, &self.requests, &self.in_flight, &self.max_in_flight] {
            counter.store(0, Ordering::SeqCst);
        }
    }
}

#[derive(Deserialize)]
struct Batch {
    items: Vec<serde::de::IgnoredAny>,
}

async fn answer(State(endpoint): State<Arc<Endpoint>>, body: Bytes) -> StatusCode {
    let now = endpoint.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    endpoint.max_in_flight.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(endpoint.latency).await;
    let batch: Batch = serde_json::from_slice(&body).expect("a batch");
    endpoint.items.fetch_add(batch.items.len() as u64, Ordering::SeqCst);
    endpoint.requests.fetch_add(1, Ordering::SeqCst);
    endpoint.in_flight.fetch_sub(1, Ordering::SeqCst);
    StatusCode::OK
}

/// The counts of `run --summary-json` this bench needs.
#[derive(Deserialize)]
struct Summary {
    read: u64,
    created: u64,
    patched: u64,
}

fn main() {
    let latency_ms: u64 = std::env::var("EVENTPIPE_BENCH_LATENCY_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(200);
    let bin =
        std::env::var_os("EVENTPIPE_BIN").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_eventpipe")), PathBuf::from);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let stream = root.join("examples/data/occurrences.jsonl");
    let scratch = tempfile::tempdir().expect("a temporary directory");

    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let endpoint = Arc::new(Endpoint { latency: Duration::from_millis(latency_ms), ..Endpoint::default() });
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().route("/hook", post(answer)).with_state(endpoint.clone());
    runtime.spawn(async move { axum::serve(listener, app).await.unwrap() });

    println!("webhook_latency: examples/data/occurrences.jsonl against an endpoint answering after {latency_ms} ms");
    let mut default_rate = 0.0;
    for (label, options) in [
        ("concurrency=1,max_batch=100", ",concurrency=1,max_batch=100"),
        ("concurrency=1", ",concurrency=1"),
        ("adaptive (default)", ""),
    ] {
        endpoint.reset();
        let started = Instant::now();
        let out = Command::new(&bin)
            .args(["run", "--summary-json"])
            .arg(format!("--source=jsonl:{}", stream.display()))
            .arg(format!("--sink=webhook:http://{addr}/hook{options}"))
            .current_dir(scratch.path())
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .expect("eventpipe runs");
        let wall = started.elapsed().as_secs_f64();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "eventpipe failed ({}):\n{stderr}", out.status);
        let summary: Summary = stderr
            .lines()
            .rev()
            .find_map(|l| serde_json::from_str(l).ok())
            .unwrap_or_else(|| panic!("no summary in:\n{stderr}"));
        let items = endpoint.items.load(Ordering::SeqCst);
        let requests = endpoint.requests.load(Ordering::SeqCst);
        assert_eq!(items, summary.created + summary.patched, "the endpoint received every write once");
        let rate = items as f64 / wall;
        println!(
            "  {label:<28} {items} writes of {} events in {wall:.2} s: {rate:.0} events/s; {requests} requests, \
             {:.1} per batch, at most {} in flight",
            summary.read,
            items as f64 / requests.max(1) as f64,
            endpoint.max_in_flight.load(Ordering::SeqCst),
        );
        if options.is_empty() {
            default_rate = rate;
        }
    }
    if latency_ms == 200 {
        println!("target ≥ {TARGET:.0} events/s: {}", if default_rate >= TARGET { "met" } else { "MISSED" });
    }
}
