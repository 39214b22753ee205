//! HTTP ingest at production rate: `eventpipe run --source http:127.0.0.1:0 --sink jsonl:FILE`
//! fed as client-go recorders feed an API server, one event per `POST
//! /api/v1/namespaces/NS/events`, from 64 keep-alive connections (each sends its next request
//! when the last was answered), for a fixed time.
//!
//! Prints events/s (`201 Created` answers / seconds of sending), the p50 / p99 / max request
//! latency, and checks the run's summary after SIGTERM: events read = events accepted (every
//! `201`) = events written (created; each event names its own object, so none is aggregated or
//! skipped by the spam filter). Target: ≥ 20,000 events/s.
//!
//! ```sh
//! cargo bench -p eventpipe --bench ingest_rate
//! ```
//!
//! `EVENTPIPE_BENCH_SECONDS` sets the sending time (default 10), `EVENTPIPE_BENCH_CONNECTIONS`
//! the connections (default 64), `EVENTPIPE_BIN` the binary (default: the one `cargo bench`
//! builds; a debug build gives debug figures).

use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use serde::Deserialize;

/// Events per second to reach.
const TARGET: f64 = 20_000.0;

/// The counts of `run --summary-json` this bench checks.
#[derive(Deserialize)]
struct Summary {
    read: u64,
    created: u64,
    patched: u64,
}

/// What one connection did: its `201`s' latencies (µs) and any other answers.
#[derive(Default)]
struct Sent {
    latencies_us: Vec<u32>,
    other: u64,
}

/// A core/v1 Event as client-go's recorder creates it, for object `i` of connection `c`.
fn event(c: usize, i: u64) -> Vec<u8> {
    serde_json::json!({
        "kind": "Event", "apiVersion": "v1",
        "metadata": {"name": format!("pod-{c}-{i}.17f0a1b2c3d4e5f6"), "namespace": "bench"},
        "involvedObject": {"kind": "Pod", "namespace": "bench", "name": format!("pod-{c}-{i}"),
                           "uid": "0c6e4f7e-3b1a-4c8e-9b5e-2f2d7c9a1e11", "apiVersion": "v1",
                           "resourceVersion": "4242", "fieldPath": "spec.containers{app}"},
        "reason": "Pulled",
        "message": "Successfully pulled image \"registry.example/app:1.2.3\" in 1.2s",
        "source": {"component": "kubelet", "host": "node-1"},
        "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z",
        "count": 1, "type": "Normal", "reportingComponent": "kubelet", "reportingInstance": "node-1",
    })
    .to_string()
    .into_bytes()
}

/// One keep-alive connection posting events until `until`.
async fn connection(addr: std::net::SocketAddr, c: usize, until: Instant) -> Sent {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connects");
    stream.set_nodelay(true).unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.expect("handshake");
    tokio::spawn(conn);
    let mut sent = Sent::default();
    let mut i = 0u64;
    while Instant::now() < until {
        let request = Request::post("/api/v1/namespaces/bench/events")
            .header("host", addr.to_string())
            .header("content-type", "application/json")
            .header("user-agent", "kubelet/v1.31.0 (linux/amd64) kubernetes/abcdef0")
            .body(Full::new(Bytes::from(event(c, i))))
            .unwrap();
        i += 1;
        sender.ready().await.expect("the connection stays open");
        let started = Instant::now();
        let response = sender.send_request(request).await.expect("an answer");
        let status = response.status();
        response.into_body().collect().await.expect("a body");
        if status == hyper::StatusCode::CREATED {
            sent.latencies_us.push(started.elapsed().as_micros().min(u32::MAX as u128) as u32);
        } else {
            sent.other += 1;
        }
    }
    sent
}

fn main() {
    let env = |name: &str, default: u64| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let seconds = env("EVENTPIPE_BENCH_SECONDS", 10);
    let connections = env("EVENTPIPE_BENCH_CONNECTIONS", 64) as usize;
    let bin =
        std::env::var_os("EVENTPIPE_BIN").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_eventpipe")), PathBuf::from);
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let out = scratch.path().join("out.jsonl");
    let mut run = Command::new(&bin)
        .args(["run", "--summary-json", "--no-watch", "--source=http:127.0.0.1:0"])
        .arg(format!("--sink=jsonl:{}", out.display()))
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("eventpipe runs");
    let mut stderr = std::io::BufReader::new(run.stderr.take().unwrap());
    let mut line = String::new();
    let addr: std::net::SocketAddr = loop {
        line.clear();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "eventpipe ended before listening");
        if let Some((_, rest)) = line.split_once("HTTP ingest listening on ") {
            let rest = rest.trim().trim_start_matches("http://");
            break rest.split(|c: char| c.is_whitespace() || c == '/').next().unwrap().parse().expect("an address");
        }
    };
    let rest = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut text).unwrap();
        text
    });

    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    println!(
        "ingest_rate: {connections} keep-alive connections, one event per POST /api/v1/namespaces/bench/events, \
         {seconds} s, {}",
        bin.display()
    );
    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    let results: Vec<Sent> = runtime.block_on(async {
        let tasks: Vec<_> = (0..connections).map(|c| tokio::spawn(connection(addr, c, until))).collect();
        let mut results = Vec::new();
        for task in tasks {
            results.push(task.await.unwrap());
        }
        results
    });
    let wall = started.elapsed().as_secs_f64();
    let _ = Command::new("kill").args(["-TERM", &run.id().to_string()]).status();
    let status = run.wait().unwrap();
    let text = rest.join().unwrap();
    assert!(status.success(), "eventpipe failed ({status}):\n{text}");
    let summary: Summary = text
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no summary in:\n{text}"));

    let mut latencies: Vec<u32> = results.iter().flat_map(|r| r.latencies_us.iter().copied()).collect();
    latencies.sort_unstable();
    let accepted = latencies.len() as u64;
    let other: u64 = results.iter().map(|r| r.other).sum();
    let at = |q: f64| latencies.get(((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1)));
    let ms = |us: Option<&u32>| us.map_or(0.0, |&us| f64::from(us) / 1000.0);
    let rate = accepted as f64 / wall;
    println!(
        "  {accepted} events accepted (201) in {wall:.2} s: {rate:.0} events/s; latency p50 {:.2} ms, p99 {:.2} ms, \
         max {:.2} ms; {other} other answers",
        ms(at(0.50)),
        ms(at(0.99)),
        ms(latencies.last()),
    );
    println!(
        "  summary: read {}, created {}, patched {}: {}",
        summary.read,
        summary.created,
        summary.patched,
        if summary.read == accepted && summary.created == accepted { "accepted = processed" } else { "MISMATCH" }
    );
    assert_eq!(summary.read, accepted, "the run read every accepted event");
    assert_eq!(summary.created, accepted, "every accepted event was written");
    println!("target ≥ {TARGET:.0} events/s: {}", if rate >= TARGET { "met" } else { "MISSED" });
}
