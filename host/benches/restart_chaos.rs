//! Restarts that change nothing: `eventpipe run --delivery at-least-once --state-file …` to a
//! webhook that takes 3 ms a request, killed with SIGKILL every 2 s and started again until the
//! input is done, against one uninterrupted run of the same input to another endpoint.
//!
//! Prints: the restarts it took; whether every object's final state at the endpoint (count,
//! message, firstTimestamp, lastTimestamp of its last write) equals the uninterrupted run's,
//! and how many differ; the writes repeated (duplicates: received beyond the uninterrupted
//! run's); and how far the saved position trails the acknowledgements — per event, the seconds
//! from the instant it joined the acknowledged prefix to the instant a saved position covered
//! it (p50 / p99 / max), from `/metrics` (`eventpipe_delivery_acknowledged_events`,
//! `eventpipe_delivery_saved_events`) sampled every 10 ms.
//!
//! ```sh
//! cargo bench -p eventpipe --bench restart_chaos
//! ```
//!
//! `EVENTPIPE_BENCH_INPUT` sets the JSON-lines input (default `examples/data/occurrences.jsonl`,
//! 13,860 events), `EVENTPIPE_BENCH_LATENCY_MS` the endpoint's latency (default 3),
//! `EVENTPIPE_BENCH_KILL_EVERY_MS` the time between kills (default 2000),
//! `EVENTPIPE_BENCH_MAX_RESTARTS` when to give up (default 100), `EVENTPIPE_BENCH_ARGS` more
//! `run` flags for both runs (e.g. `--lru-cache-size 1048576`), `EVENTPIPE_BIN` the binary
//! (default: the one `cargo bench` builds).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use serde_json::Value;

/// What one endpoint received: every item, in arrival order (recorded as it arrives, before
/// the answer: a receiver that processes a batch and then acknowledges it).
#[derive(Default)]
struct Endpoint {
    latency: Duration,
    items: Mutex<Vec<Value>>,
}

impl Endpoint {
    /// Each object's (`namespace/name`) final state: count, message and timestamps of its
    /// last write.
    fn final_state(&self) -> BTreeMap<String, [Value; 4]> {
        let mut state = BTreeMap::new();
        for item in self.items.lock().unwrap().iter() {
            let e = &item["event"];
            let key = format!("{}/{}", e["metadata"]["namespace"], e["metadata"]["name"]);
            state.insert(key, ["count", "message", "firstTimestamp", "lastTimestamp"].map(|f| e[f].clone()));
        }
        state
    }
}

async fn answer(State(endpoint): State<Arc<Endpoint>>, body: String) -> axum::http::StatusCode {
    let batch: Value = serde_json::from_str(&body).unwrap_or_default();
    endpoint.items.lock().unwrap().extend(batch["items"].as_array().cloned().unwrap_or_default());
    tokio::time::sleep(endpoint.latency).await;
    axum::http::StatusCode::OK
}

fn serve(runtime: &tokio::runtime::Runtime, latency: Duration) -> (Arc<Endpoint>, String) {
    let endpoint = Arc::new(Endpoint { latency, ..Endpoint::default() });
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let app = Router::new().route("/hook", post(answer)).with_state(endpoint.clone());
    runtime.spawn(async move { axum::serve(listener, app).await.unwrap() });
    (endpoint, url)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `eventpipe_delivery_acknowledged_events` and `eventpipe_delivery_saved_events` from the
/// exposition at `port` (`None` while it does not answer).
fn progress(port: u16) -> Option<(u64, u64)> {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ok()?;
    let mut text = String::new();
    conn.read_to_string(&mut text).ok()?;
    let value = |name: &str| {
        let line = text.lines().find(|l| l.split([' ', '{']).next() == Some(name))?;
        line.rsplit(' ').next()?.parse().ok()
    };
    Some((value("eventpipe_delivery_acknowledged_events_total")?, value("eventpipe_delivery_saved_events_total")?))
}

/// Per event, seconds from joining the acknowledged prefix to being covered by a saved
/// position, from samples `(seconds, acknowledged, saved)` of one run.
fn lags(samples: &[(f64, u64, u64)], out: &mut Vec<f64>) {
    let (mut saved_before, mut first_acked) = (0, 0);
    for &(t, _, saved) in samples {
        for event in saved_before + 1..=saved {
            // Both counts only grow: the first sample acknowledging `event` moves forward.
            while samples.get(first_acked).is_some_and(|s| s.1 < event) {
                first_acked += 1;
            }
            out.push(t - samples.get(first_acked).map_or(t, |s| s.0));
        }
        saved_before = saved_before.max(saved);
    }
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted.get(((sorted.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(f64::NAN)
}

fn run(bin: &Path, input: &Path, url: &str, state: &Path, port: u16, dir: &Path) -> Command {
    let mut c = Command::new(bin);
    c.args(["run", "--summary-json", "--no-watch", "--delivery=at-least-once"])
        .arg(format!("--state-file={}", state.display()))
        .arg(format!("--source=jsonl:{}", input.display()))
        .arg(format!("--sink=webhook:{url}"))
        .arg(format!("--metrics=127.0.0.1:{port}"))
        .args(std::env::var("EVENTPIPE_BENCH_ARGS").unwrap_or_default().split_whitespace())
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let input = std::env::var_os("EVENTPIPE_BENCH_INPUT")
        .map_or_else(|| root.join("examples/data/occurrences.jsonl"), PathBuf::from);
    let latency = Duration::from_millis(env_or("EVENTPIPE_BENCH_LATENCY_MS", 3));
    let kill_every = Duration::from_millis(env_or("EVENTPIPE_BENCH_KILL_EVERY_MS", 2000));
    let max_restarts: usize = env_or("EVENTPIPE_BENCH_MAX_RESTARTS", 100);
    let bin =
        std::env::var_os("EVENTPIPE_BIN").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_eventpipe")), PathBuf::from);
    let scratch = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    println!(
        "restart_chaos: {} against a webhook taking {} ms a request, SIGKILL every {:.1} s",
        input.display(),
        latency.as_millis(),
        kill_every.as_secs_f64()
    );

    let (once, url) = serve(&runtime, latency);
    let started = Instant::now();
    let status =
        run(&bin, &input, &url, &scratch.path().join("once.json"), free_port(), scratch.path()).status().unwrap();
    assert!(status.success(), "the uninterrupted run failed: {status}");
    let (wall, writes) = (started.elapsed().as_secs_f64(), once.items.lock().unwrap().len());
    println!("  uninterrupted: {wall:.2} s, {writes} writes, {} objects", once.final_state().len());

    let (chaos, url) = serve(&runtime, latency);
    let state = scratch.path().join("state.json");
    let (mut restarts, mut all_lags, mut saved_offsets) = (0, Vec::new(), Vec::new());
    let started = Instant::now();
    let finished = loop {
        let port = free_port();
        let mut child = run(&bin, &input, &url, &state, port, scratch.path()).spawn().unwrap();
        let begun = Instant::now();
        let mut samples = Vec::new();
        let exited = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if begun.elapsed() >= kill_every {
                child.kill().unwrap(); // SIGKILL
                child.wait().unwrap();
                break None;
            }
            if let Some((acked, saved)) = progress(port) {
                samples.push((begun.elapsed().as_secs_f64(), acked, saved));
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        lags(&samples, &mut all_lags);
        let offset = std::fs::read(&state)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .and_then(|s| s["position"]["file_offset"].as_u64())
            .unwrap_or(0);
        saved_offsets.push(offset);
        match exited {
            Some(status) => break status.success(),
            None if restarts >= max_restarts => break false,
            None => restarts += 1,
        }
    };
    let size = std::fs::metadata(&input).unwrap().len().max(1);
    let shown: Vec<String> = saved_offsets.iter().map(|o| format!("{:.1}%", *o as f64 * 100.0 / size as f64)).collect();
    println!(
        "  chaos: {} after {restarts} restart(s), {:.2} s; saved position after each run: {}",
        if finished { "finished" } else { "NOT FINISHED" },
        started.elapsed().as_secs_f64(),
        shown.join(" ")
    );
    let (expected, actual) = (once.final_state(), chaos.final_state());
    let differ = expected.iter().filter(|(k, v)| actual.get(*k) != Some(v)).count();
    let extra = actual.keys().filter(|k| !expected.contains_key(*k)).count();
    let (once_writes, chaos_writes) = (once.items.lock().unwrap().len(), chaos.items.lock().unwrap().len());
    println!(
        "  final state: {} of {} objects equal the uninterrupted run's ({differ} differ, {extra} extra); \
         {chaos_writes} writes received, {} repeated",
        expected.len() - differ,
        expected.len(),
        chaos_writes as i64 - once_writes as i64
    );
    for (key, want) in expected.iter().filter(|(k, v)| actual.get(*k) != Some(v)).take(3) {
        println!("    e.g. {key}: {want:?} uninterrupted, {:?} here", actual.get(key));
        for (label, endpoint) in [("uninterrupted", &once), ("here", &chaos)] {
            let writes: Vec<String> = endpoint
                .items
                .lock()
                .unwrap()
                .iter()
                .filter(|i| {
                    format!("{}/{}", i["event"]["metadata"]["namespace"], i["event"]["metadata"]["name"]) == *key
                })
                .map(|i| format!("{} {}", i["verb"].as_str().unwrap_or(""), i["event"]["count"]))
                .collect();
            println!("      {label}: {}", writes.join(", "));
        }
    }
    all_lags.sort_by(f64::total_cmp);
    println!(
        "  saved position behind the acknowledgements, per event: p50 {:.2} s, p99 {:.2} s, max {:.2} s ({} events saved)",
        quantile(&all_lags, 0.5),
        quantile(&all_lags, 0.99),
        all_lags.last().copied().unwrap_or(f64::NAN),
        all_lags.len()
    );
}
