//! How `run` ends: a SIGTERM bounds the drain by `--shutdown-timeout` even when it arrives after
//! the source ended, and the exit status says when events were abandoned.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The first `n` events of the bundled stream, in a file of `dir`.
fn events_file(dir: &Path, n: usize) -> PathBuf {
    let text =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/data/occurrences.jsonl"))
            .unwrap();
    let path = dir.join("events.jsonl");
    let mut file = std::fs::File::create(&path).unwrap();
    for line in text.lines().take(n) {
        writeln!(file, "{line}").unwrap();
    }
    path
}

fn start(args: &[String]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(["run", "--summary-json", "--no-watch"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for `child` (at most `limit`); returns its exit code, its JSON summary and how long it
/// took.
fn finish(child: Child, limit: Duration) -> (Option<i32>, Value, Duration) {
    let started = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    let out = rx.recv_timeout(limit).expect("eventpipe ended in time").unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    let summary = stderr.lines().rev().find_map(|l| serde_json::from_str(l).ok()).unwrap_or_else(|| panic!("{stderr}"));
    (out.status.code(), summary, started.elapsed())
}

/// A local HTTP receiver on a free port; each connection goes to `serve` on a thread of its own.
fn receiver(serve: fn(std::net::TcpStream)) -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            std::thread::spawn(move || serve(stream));
        }
    });
    addr
}

#[test]
fn sigterm_during_a_sink_outage_after_the_source_ended_stops_within_the_shutdown_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let source = events_file(dir.path(), 300);
    // A webhook receiver that accepts connections and never answers: every batch hangs.
    let addr = receiver(|stream| {
        std::thread::sleep(Duration::from_secs(600));
        drop(stream);
    });
    let run = start(&[
        format!("--source=jsonl:{}", source.display()),
        format!("--sink=webhook:http://{addr}/events"),
        "--shutdown-timeout=1".into(),
    ]);
    // The file is read at once; the run is then draining into the hung sink.
    std::thread::sleep(Duration::from_millis(1500));
    let term = Command::new("kill").args(["-TERM", &run.id().to_string()]).status().unwrap();
    assert!(term.success());
    let (code, summary, took) = finish(run, Duration::from_secs(30));
    assert!(took < Duration::from_secs(1 + 2), "ended {took:?} after SIGTERM");
    assert_eq!(code, Some(4), "events were abandoned: {summary}");
    assert_eq!(summary["read"], 300, "{summary}");
    assert!(summary["received"].as_u64() > Some(0), "the summary counts what the router did: {summary}");
    let written = summary["created"].as_u64().unwrap() + summary["patched"].as_u64().unwrap();
    assert_eq!(written, 0, "{summary}");
    assert_eq!(
        summary["abandoned"].as_u64().unwrap() + summary["finished"].as_u64().unwrap(),
        300,
        "every event read is finished or abandoned: {summary}"
    );
}

#[test]
fn a_run_whose_sink_was_never_reachable_exits_4_and_one_that_delivered_everything_0() {
    let dir = tempfile::tempdir().unwrap();
    let source = events_file(dir.path(), 20);
    // Nothing listens on port 1: every attempt fails; at the end of the file the shutdown
    // cancels the retries (client-go: one more attempt per event after Shutdown).
    let unreachable = start(&[
        format!("--source=jsonl:{}", source.display()),
        "--sink=k8s".into(),
        "--kube-server=http://127.0.0.1:1".into(),
    ]);
    let (code, summary, _) = finish(unreachable, Duration::from_secs(60));
    assert_eq!(code, Some(4), "{summary}");
    assert!(summary["cancelled"].as_u64() > Some(0), "{summary}");
    assert_eq!(summary["created"], 0, "{summary}");

    let delivered = start(&[format!("--source=jsonl:{}", source.display()), "--sink=jsonl:-".into()]);
    let (code, summary, _) = finish(delivered, Duration::from_secs(60));
    assert_eq!(code, Some(0), "{summary}");
    assert_eq!((summary["abandoned"].as_u64(), summary["finished"].as_u64()), (Some(0), Some(20)), "{summary}");
}

#[test]
fn sigterm_ends_a_run_whose_stdin_stays_open() {
    let mut run = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(["run", "--summary-json", "--no-watch", "--source=jsonl:-", "--sink=jsonl:-", "--shutdown-timeout=1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = run.stdin.take(); // held open, never written
    std::thread::sleep(Duration::from_millis(1000));
    assert!(Command::new("kill").args(["-TERM", &run.id().to_string()]).status().unwrap().success());
    let (code, summary, took) = finish(run, Duration::from_secs(30));
    drop(stdin);
    assert!(took < Duration::from_secs(1 + 2), "ended {took:?} after SIGTERM");
    assert_eq!((code, summary["read"].as_u64()), (Some(0), Some(0)), "{summary}");
}

#[test]
fn webhook_credentials_never_reach_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let source = events_file(dir.path(), 20);
    // A receiver answering every request 503, so the sink logs its failures.
    let addr = receiver(|mut stream| {
        use std::io::Read;
        let mut buf = [0u8; 65536];
        while let Ok(n) = stream.read(&mut buf) {
            let answer = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n";
            if n == 0 || stream.write_all(answer).is_err() {
                break;
            }
        }
    });
    // Every log line, debug included.
    let run = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(["run", "--summary-json", "--no-watch", "--shutdown-timeout=1", "--log-format=json"])
        .arg(format!("--source=jsonl:{}", source.display()))
        .arg(format!("--sink=webhook:http://alice:s3cret-pw@{addr}/events?token=t0ken-value"))
        .env("RUST_LOG", "debug")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    assert!(Command::new("kill").args(["-TERM", &run.id().to_string()]).status().unwrap().success());
    let out = run.wait_with_output().unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("webhook batch failed, retrying"), "the sink's failures are logged: {stderr}");
    assert!(stderr.contains("webhook:http://REDACTED@"), "the sink is named, redacted: {stderr}");
    for secret in ["s3cret-pw", "t0ken-value", "alice"] {
        assert!(!stderr.contains(secret), "{secret} in the log:\n{stderr}");
    }
}

/// After the shutdown timeout, the summary counts what completed: every write the endpoint
/// acknowledged is a create or patch (at most the one request in flight when the timeout passed
/// is not), and only the events really not finished are abandoned.
#[test]
fn after_a_shutdown_timeout_the_summary_counts_the_writes_that_completed() {
    use crate::common::recording_webhook;
    const MAX_BATCH: u64 = 20;
    let dir = tempfile::tempdir().unwrap();
    let input = events_file(dir.path(), usize::MAX);
    let (received, url, _endpoint) = recording_webhook::start(Duration::from_millis(30));
    let child = start(&[
        format!("--source=jsonl:{}", input.display()),
        format!("--sink=webhook:{url},concurrency=1,max_batch={MAX_BATCH}"),
        "--workers=1".into(),
        "--shutdown-timeout=1".into(),
    ]);
    let deadline = Instant::now() + Duration::from_secs(120);
    while received.len() < 200 {
        assert!(Instant::now() < deadline, "nothing written");
        std::thread::sleep(Duration::from_millis(10));
    }
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    let (_, summary, _) = finish(child, Duration::from_secs(60));
    let answered = received.answered.load(std::sync::atomic::Ordering::SeqCst);
    let written = summary["created"].as_u64().unwrap() + summary["patched"].as_u64().unwrap();
    assert!(
        written <= answered && answered - written <= MAX_BATCH,
        "the endpoint acknowledged {answered} writes, the summary counts {written}: {summary}"
    );
    let (read, finished, abandoned) = (
        summary["read"].as_u64().unwrap(),
        summary["finished"].as_u64().unwrap(),
        summary["abandoned"].as_u64().unwrap(),
    );
    assert!(abandoned > 0 && read == finished + abandoned, "{summary}");
}

/// The shutdown timeout counts from the signal, also while the source still hands what it read
/// to a full Broadcaster: `--max-in-flight 1` (client-go's one write at a time) to an endpoint
/// answering in 200 ms keeps the incoming queue full; after SIGTERM the run ends within the
/// timeout (it took about 90 s when the source's last hand-over was not bounded), and every write
/// the endpoint acknowledged is in the summary, reported write by write (not batch by batch).
#[test]
fn sigterm_while_the_source_waits_for_room_stops_within_the_shutdown_timeout() {
    use crate::common::recording_webhook;
    let dir = tempfile::tempdir().unwrap();
    let input = events_file(dir.path(), usize::MAX);
    let (received, url, _endpoint) = recording_webhook::start(Duration::from_millis(200));
    let child = start(&[
        format!("--source=jsonl:{}", input.display()),
        format!("--sink=webhook:{url}"),
        "--workers=1".into(),
        "--max-in-flight=1".into(),
        "--shutdown-timeout=1".into(),
    ]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while received.len() < 5 {
        assert!(Instant::now() < deadline, "nothing written");
        std::thread::sleep(Duration::from_millis(10));
    }
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    let (code, summary, took) = finish(child, Duration::from_secs(120));
    assert!(took < Duration::from_secs(1 + 3), "ended {took:?} after SIGTERM: {summary}");
    assert_eq!(code, Some(4), "events were abandoned: {summary}");
    let answered = received.answered.load(std::sync::atomic::Ordering::SeqCst);
    let written = summary["created"].as_u64().unwrap() + summary["patched"].as_u64().unwrap();
    assert!(
        written >= 5 && written <= answered && answered - written <= 1,
        "acknowledged {answered}, counted {written}: {summary}"
    );
    let (read, finished, abandoned) = (
        summary["read"].as_u64().unwrap(),
        summary["finished"].as_u64().unwrap(),
        summary["abandoned"].as_u64().unwrap(),
    );
    assert!(read < 13_860 && read == finished + abandoned, "the rest of the file was not read: {summary}");
}
