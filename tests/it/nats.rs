//! Scale-out on NATS JetStream, against a real `nats-server -js` each test starts on a free
//! loopback port with a store of its own (and stops): a stream published once and correlated
//! by 3 workers gives, per event name, the single-host run's sink calls; a worker killed with
//! SIGKILL, or the server restarted, mid-stream loses no sink call and keeps every count; a
//! single-host run stopped between two occurrences of an event patches the next one with the
//! next count. Without `nats-server` on `PATH` the tests are skipped with a printed line; with
//! `CI` set they fail (`.ci/run` installs it).

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The caches are large enough that nothing is evicted, on one host or in a partition: the
/// output is then the same however the stream is partitioned.
const LRU: &str = "--lru-cache-size=1048576";

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_eventpipe")
}

fn bundled_stream() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/data/occurrences.jsonl")
}

/// A `nats-server` with JetStream on a free loopback port, stopped when dropped.
struct NatsServer {
    child: Child,
    port: u16,
    store: PathBuf,
    /// `nats-server` flags besides the port and store (e.g. `--user U --pass P`).
    flags: Vec<String>,
    _dir: tempfile::TempDir,
}

/// Whether `nats-server` is on `PATH` (printed when not; a failure under `CI`).
fn nats_server_installed(test: &str) -> bool {
    if Command::new("nats-server").arg("--version").output().is_err() {
        assert!(std::env::var_os("CI").is_none(), "{test}: nats-server is not on PATH (CI installs it)");
        println!("{test}: skipped, nats-server is not on PATH");
        return false;
    }
    true
}

/// A free loopback port.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Waits until `port` on loopback accepts connections.
fn wait_listening(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nats-server did not listen on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl NatsServer {
    /// Starts one; `None` (printed) when `nats-server` is not installed, a failure under `CI`.
    fn start(test: &str) -> Option<Self> {
        Self::start_with(test, &[])
    }

    /// As [`start`](Self::start), with more `nats-server` flags.
    fn start_with(test: &str, flags: &[&str]) -> Option<Self> {
        if !nats_server_installed(test) {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let store = dir.path().join("js");
        let flags: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
        let child = Self::spawn(port, &store, &flags);
        Some(Self { child, port, store, flags, _dir: dir })
    }

    fn spawn(port: u16, store: &Path, flags: &[String]) -> Child {
        let child = Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(store)
            .args(flags)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting nats-server");
        wait_listening(port);
        child
    }

    /// Stops it (SIGKILL) and starts it again on the same port and store.
    fn restart(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        self.child = Self::spawn(self.port, &self.store, &self.flags);
    }
}

/// Where `nats:` targets reach JetStream: a server or a cluster.
trait Nats {
    /// A `nats:` target with `query`.
    fn url(&self, query: &str) -> String;
}

impl Nats for NatsServer {
    fn url(&self, query: &str) -> String {
        format!("nats:nats://127.0.0.1:{}?{query}", self.port)
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A child process killed when dropped (a failing test leaves none behind).
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `eventpipe run` with `args`, output (stderr) to `log`.
fn run(args: &[String], log: &Path) -> Proc {
    Proc(
        Command::new(bin())
            .args(["run", "--no-watch", "--summary-json"])
            .args(args)
            .env("RUST_LOG", "info,eventpipe::pipeline::scale=debug,eventpipe::nats=debug")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap(),
    )
}

/// SIGTERM, then the exit (a drained run exits 0).
fn stop(mut child: Proc) {
    let _ = Command::new("kill").args(["-TERM", &child.0.id().to_string()]).status();
    let status = child.0.wait().unwrap();
    assert!(status.success(), "{status}");
}

/// Waits for the exit.
fn wait(mut child: Proc) -> std::process::ExitStatus {
    child.0.wait().unwrap()
}

/// Waits for the exit, for up to `secs` (then the process is killed and the test fails).
fn wait_within(mut child: Proc, secs: u64) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "the process did not end within {secs} s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The sink lines of files (absent files are empty; a last line still being written is left
/// out).
fn lines(files: &[PathBuf]) -> Vec<Value> {
    files
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|t| {
            let whole = t.rfind('\n').map_or("", |end| &t[..end]);
            whole.lines().filter(|l| !l.is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect::<Vec<_>>()
        })
        .collect()
}

/// Sink calls per event, in order: by event name, source and involved object (the stream's
/// recorder-style names repeat — a scheduler's and a kubelet's event about one pod in the same
/// nanosecond, two objects of one name — and those are different partitions, whose calls may
/// interleave).
fn by_name(lines: &[Value]) -> BTreeMap<String, Vec<Value>> {
    let mut out: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for l in lines {
        let (e, o) = (&l["event"], &l["event"]["involvedObject"]);
        let key = format!(
            "{} {} {} {} {} {} {}",
            e["metadata"]["name"],
            e["source"]["component"],
            e["source"]["host"],
            o["kind"],
            o["namespace"],
            o["name"],
            o["uid"]
        );
        out.entry(key).or_default().push(l.clone());
    }
    out
}

/// The final count of every event (by name and source, as [`by_name`]).
fn final_counts(lines: &[Value]) -> BTreeMap<String, i64> {
    by_name(lines)
        .into_iter()
        .map(|(key, calls)| (key, calls.iter().map(|l| l["event"]["count"].as_i64().unwrap_or(0)).max().unwrap_or(0)))
        .collect()
}

/// The single-host run over `input`: its sink calls.
fn single_host(input: &Path, dir: &Path) -> Vec<Value> {
    let out = dir.join("single.jsonl");
    let status = Command::new(bin())
        .args(["run", "--no-watch", "--workers=1", LRU])
        .arg(format!("--source=jsonl:{}", input.display()))
        .arg(format!("--sink=jsonl:{}", out.display()))
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    lines(&[out])
}

fn publish(server: &impl Nats, input: &Path, query: &str, dir: &Path) -> Proc {
    run(
        &[format!("--source=jsonl:{}", input.display()), format!("--sink={}", server.url(query))],
        &dir.join("publisher.log"),
    )
}

fn worker(server: &impl Nats, i: u32, n: u32, out: &Path, query: &str, dir: &Path) -> Proc {
    run(
        &[
            format!("--source={}", server.url(query)),
            format!("--worker={i}/{n}"),
            format!("--sink=jsonl:{}", out.display()),
            "--snapshot-interval=0.5".into(),
            LRU.into(),
        ],
        &dir.join(format!("{}.log", out.file_name().unwrap().to_string_lossy())),
    )
}

/// Waits until `done` holds for the lines of `files` (polled), or panics after `secs`.
fn wait_for(files: &[PathBuf], secs: u64, what: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let got = lines(files);
        if done(&got) {
            return got;
        }
        if Instant::now() >= deadline {
            panic!("{what}: {} lines after {secs} s\n{}", got.len(), log_tails(files));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The last lines of every `.log` file beside `files`: what each process said before a wait
/// gave up.
fn log_tails(files: &[PathBuf]) -> String {
    let Some(dir) = files.first().and_then(|f| f.parent()) else { return String::new() };
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "log")).collect())
        .unwrap_or_default();
    logs.sort();
    logs.iter()
        .map(|log| {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect();
            format!(
                "--- {} (last {} lines)\n{}\n",
                log.file_name().unwrap().to_string_lossy(),
                tail.len(),
                tail.join("\n")
            )
        })
        .collect()
}

/// Every event name's calls as a multiset-free sequence, compared as sets and final counts.
fn assert_covers(expected: &[Value], got: &[Value], what: &str) -> usize {
    let seen: HashSet<String> = got.iter().map(Value::to_string).collect();
    let missing: Vec<&Value> = expected.iter().filter(|l| !seen.contains(&l.to_string())).collect();
    assert!(missing.is_empty(), "{what}: {} sink calls missing, e.g. {}", missing.len(), missing[0]);
    assert_eq!(final_counts(got), final_counts(expected), "{what}: final counts");
    got.len() - expected.len()
}

#[test]
fn three_workers_give_the_single_host_sink_calls_per_event_name() {
    let Some(server) = NatsServer::start("three_workers") else { return };
    let dir = tempfile::tempdir().unwrap();
    // The bundled stream, then the vendored conformance streams, published once (one stream).
    let input = dir.path().join("in.jsonl");
    let mut text = std::fs::read_to_string(bundled_stream()).unwrap();
    for name in ["burst30", "reasons12", "refill", "spaced11min"] {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../tests/fixtures/replay/{name}.in.jsonl"));
        text += &std::fs::read_to_string(path).unwrap();
    }
    // The shared conformance suite's real-event stream (176k events), when it sits beside the
    // repository (as for tests/it/replay_cli.rs).
    let real = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/conformance/replay-real/real-expanded.in.jsonl.gz");
    match std::fs::File::open(&real) {
        Ok(file) => {
            use std::io::Read;
            flate2::read::GzDecoder::new(file).read_to_string(&mut text).unwrap();
        }
        Err(_) => println!("shared conformance suite not beside the repository: its real-event stream not published"),
    }
    std::fs::write(&input, &text).unwrap();
    let expected = single_host(&input, dir.path());
    let started = Instant::now();
    let publisher = publish(&server, &input, "partitions=16", dir.path());
    let status = wait(publisher);
    assert!(status.success(), "{}", std::fs::read_to_string(dir.path().join("publisher.log")).unwrap());
    let published = started.elapsed();
    let outs: Vec<PathBuf> = (0..3).map(|i| dir.path().join(format!("w{i}.jsonl"))).collect();
    let started = Instant::now();
    let workers: Vec<Proc> = (0..3).map(|i| worker(&server, i, 3, &outs[i as usize], "", dir.path())).collect();
    wait_for(&outs, 300, "3 workers", |l| l.len() >= expected.len());
    let worked = started.elapsed();
    workers.into_iter().for_each(stop);
    let got = lines(&outs);
    println!(
        "{} events published in {published:?}, {} sink calls by 3 workers in {worked:?}",
        text.lines().count(),
        got.len()
    );
    assert_eq!(got.len(), expected.len(), "no duplicates without failures");
    assert_eq!(by_name(&got), by_name(&expected), "per event name, the same sink calls in the same order");
}

/// The first `n` lines of the bundled stream in two halves (the failover tests need only enough
/// to fail over mid-stream: 6,000 of its 13,860 lines), and the whole slice.
fn halves(dir: &Path, n: usize) -> (PathBuf, PathBuf, PathBuf) {
    let text = std::fs::read_to_string(bundled_stream()).unwrap();
    let lines: Vec<&str> = text.lines().take(n).collect();
    let write = |name: &str, part: &[&str]| {
        let path = dir.join(name);
        std::fs::write(&path, part.iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
        path
    };
    (write("first.jsonl", &lines[..n / 2]), write("second.jsonl", &lines[n / 2..]), write("slice.jsonl", &lines))
}

/// Workers here snapshot every 2 s, so that a failure lands between two snapshots.
fn failover_worker(server: &impl Nats, i: u32, out: &Path, dir: &Path) -> Proc {
    let query = "partitions=6&ack_wait=4&priority_timeout=4";
    run(
        &[
            format!("--source={}", server.url(query)),
            format!("--worker={i}/3"),
            format!("--sink=jsonl:{}", out.display()),
            "--snapshot-interval=2".into(),
            LRU.into(),
        ],
        &dir.join(format!("{}.log", out.file_name().unwrap().to_string_lossy())),
    )
}

#[test]
fn a_worker_killed_mid_stream_and_restarted_loses_nothing_and_keeps_counts() {
    let Some(server) = NatsServer::start("worker_failover") else { return };
    let dir = tempfile::tempdir().unwrap();
    let (first, second, slice) = halves(dir.path(), 6000);
    let expected = single_host(&slice, dir.path());
    let outs: Vec<PathBuf> = (0..4).map(|i| dir.path().join(format!("w{i}.jsonl"))).collect();
    let mut workers: Vec<Proc> = (0..3).map(|i| failover_worker(&server, i, &outs[i as usize], dir.path())).collect();
    assert!(wait(publish(&server, &first, "partitions=6", dir.path())).success());
    // Worker 1 has written calls of the first half: SIGKILL, no drain, no last snapshot,
    // nothing acknowledged since its last snapshot.
    wait_for(&outs[1..2], 120, "worker 1 writing", |l| l.len() >= 300);
    let mut killed = workers.remove(1);
    killed.0.kill().unwrap();
    killed.0.wait().unwrap();
    let before_kill = lines(&outs[1..2]).len();
    workers.push(failover_worker(&server, 1, &outs[3], dir.path()));
    assert!(wait(publish(&server, &second, "partitions=6", dir.path())).success());
    wait_for(&outs, 300, "after the restart", |l| final_counts(l) == final_counts(&expected));
    workers.into_iter().for_each(stop);
    let got = lines(&outs);
    let duplicates = assert_covers(&expected, &got, "worker killed");
    println!("worker 1 killed after {before_kill} sink calls; {duplicates} sink calls written twice");
    // What is written twice is what the killed worker wrote after its last snapshot (2 s).
    assert!(duplicates <= before_kill, "{duplicates} duplicates, {before_kill} calls before the kill");
}

#[test]
fn a_nats_server_restarted_mid_stream_loses_nothing_and_keeps_counts() {
    let Some(mut server) = NatsServer::start("server_restart") else { return };
    let dir = tempfile::tempdir().unwrap();
    let (first, second, slice) = halves(dir.path(), 6000);
    let expected = single_host(&slice, dir.path());
    let outs: Vec<PathBuf> = (0..3).map(|i| dir.path().join(format!("w{i}.jsonl"))).collect();
    let workers: Vec<Proc> = (0..3).map(|i| failover_worker(&server, i, &outs[i as usize], dir.path())).collect();
    assert!(wait(publish(&server, &first, "partitions=6", dir.path())).success());
    wait_for(&outs, 120, "workers writing", |l| l.len() >= 1000);
    // SIGKILL and start again on the same store: the workers reconnect by themselves.
    server.restart();
    assert!(wait(publish(&server, &second, "partitions=6", dir.path())).success());
    wait_for(&outs, 300, "after the server restart", |l| final_counts(l) == final_counts(&expected));
    workers.into_iter().for_each(stop);
    let got = lines(&outs);
    let duplicates = assert_covers(&expected, &got, "server restarted");
    println!("{duplicates} sink calls written twice across the server restart ({} in all)", got.len());
    assert!(duplicates < expected.len() / 2, "{duplicates} duplicates");
}

#[test]
fn a_single_host_run_stopped_between_occurrences_patches_with_the_next_count() {
    let dir = tempfile::tempdir().unwrap();
    let (input, out, state) =
        (dir.path().join("in.jsonl"), dir.path().join("out.jsonl"), dir.path().join("state.json"));
    let occurrence = |i: u32| {
        format!(
            "{}\n",
            serde_json::json!({
                "metadata": {"name": format!("web-0.{i:x}"), "namespace": "shop"},
                "involvedObject": {"kind": "Pod", "namespace": "shop", "name": "web-0", "uid": "u-1"},
                "reason": "BackOff", "message": "Back-off restarting failed container", "type": "Warning",
                "source": {"component": "kubelet", "host": "node-1"},
                "firstTimestamp": format!("2025-01-01T00:00:{i:02}Z"), "lastTimestamp": format!("2025-01-01T00:00:{i:02}Z"),
                "count": 1
            })
        )
    };
    std::fs::write(&input, (1..=7).map(occurrence).collect::<String>()).unwrap();
    let start = || {
        run(
            &[
                format!("--source=jsonl:{}", input.display()),
                format!("--sink=jsonl:{}", out.display()),
                "--follow".into(),
                "--delivery=at-least-once".into(),
                format!("--state-file={}", state.display()),
            ],
            &dir.path().join("run.log"),
        )
    };
    let first = start();
    wait_for(std::slice::from_ref(&out), 60, "7 occurrences", |l| l.len() == 7);
    stop(first);
    let saved: Value = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
    assert!(saved["correlator"]["partitions"].is_array(), "the state file holds the correlator: {saved}");
    // The 8th occurrence comes while the run is stopped.
    std::fs::write(&input, (1..=8).map(occurrence).collect::<String>()).unwrap();
    let second = start();
    let got = wait_for(std::slice::from_ref(&out), 60, "the 8th occurrence", |l| l.len() == 8);
    stop(second);
    let last = &got[7];
    assert_eq!(last["verb"], "patch", "{last}");
    assert_eq!(last["event"]["count"], 8, "{last}");
    assert_eq!(last["event"]["metadata"]["name"], "web-0.1", "patched under the first occurrence's name");
    let log = std::fs::read_to_string(dir.path().join("run.log")).unwrap();
    assert!(log.contains("partition(s) restored"), "{log}");
}

/// A partition snapshot larger than the server's `max_payload` (1 MiB) is stored and read back
/// whole (the object store chunks it; a KV value of that size is refused), and a snapshot an
/// earlier version kept in the KV bucket is still read.
#[test]
fn snapshots_larger_than_max_payload_are_stored_and_kv_snapshots_are_still_read() {
    use eventpipe::nats::NatsTarget;
    use rand::Rng;
    let Some(server) = NatsServer::start("snapshots_larger_than_max_payload") else { return };
    let target: NatsTarget = format!("nats://127.0.0.1:{}?stream=SNAP", server.port).parse().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let js = async_nats::jetstream::new(target.connect().await.unwrap());
        let kv = target.bucket(&js).await.unwrap();
        // Incompressible, as a snapshot's 128-bit keys are: 3 MiB after deflating.
        let mut big = vec![0u8; 3 << 20];
        rand::rng().fill_bytes(&mut big);
        assert!(kv.put("too-big", big.clone().into()).await.is_err(), "a KV value is bounded by max_payload");
        kv.put("eventpipe-7", b"an earlier version's snapshot".to_vec().into()).await.unwrap();

        let snapshots = target.snapshots(&js, kv).await.unwrap();
        snapshots.put("eventpipe-3", &big).await.unwrap();
        assert!(snapshots.get("eventpipe-3").await.unwrap() == Some(big.clone()), "read back whole");
        let smaller = &big[..1000];
        snapshots.put("eventpipe-3", smaller).await.unwrap();
        assert_eq!(snapshots.get("eventpipe-3").await.unwrap().as_deref(), Some(smaller), "replaced");
        assert_eq!(
            snapshots.get("eventpipe-7").await.unwrap().as_deref(),
            Some(&b"an earlier version's snapshot"[..]),
            "the KV bucket is read when the object store has none"
        );
        assert_eq!(snapshots.get("eventpipe-9").await.unwrap(), None);
    });
}

/// A publisher whose input ends while JetStream answers nothing (the server SIGSTOPped past
/// the client's acknowledgement timeout): once the server answers again, every event is
/// published and the run ends with status 0 — the end of the input does not abandon the
/// publications it still retries (it goes on for `--shutdown-timeout`).
#[test]
fn a_publisher_whose_input_ends_while_jetstream_is_unresponsive_publishes_everything() {
    let Some(server) = NatsServer::start("input_ends_while_unresponsive") else { return };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("publisher.log");
    let mut publisher = Proc(
        Command::new(bin())
            .args(["run", "--no-watch", "--summary-json", "--source=jsonl:-"])
            .arg(format!("--sink={}", server.url("partitions=2")))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&log).unwrap().contains("publishing to") {
        assert!(Instant::now() < deadline, "{}", std::fs::read_to_string(&log).unwrap());
        std::thread::sleep(Duration::from_millis(50));
    }
    let signal = |name: &str| {
        assert!(Command::new("kill").args([name, &server.child.id().to_string()]).status().unwrap().success());
    };
    signal("-STOP");
    let text = std::fs::read_to_string(bundled_stream()).unwrap();
    let input: String = text.lines().take(50).map(|l| format!("{l}\n")).collect();
    let mut stdin = publisher.0.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).unwrap();
    drop(stdin);
    // Past the client's acknowledgement timeout (5 s): every publication failed once.
    std::thread::sleep(Duration::from_secs(7));
    signal("-CONT");
    let status = publisher.0.wait().unwrap();
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{status}: {log}");
    let summary: Value = log.lines().rev().find_map(|l| serde_json::from_str(l).ok()).expect("a summary");
    assert_eq!(summary["scale"]["published"], 50, "{summary}");
    assert_eq!((summary["abandoned"].as_u64(), summary["cancelled"].as_u64()), (Some(0), Some(0)), "{summary}");
    assert!(summary["scale"]["publish_retries"].as_u64() > Some(0), "the acknowledgements timed out: {summary}\n{log}");
}

/// Three `nats-server -js` on free loopback ports, routed into one JetStream cluster, each with
/// a store of its own; stopped when dropped.
struct NatsCluster {
    nodes: Vec<Option<Child>>,
    ports: Vec<u16>,
    _dir: tempfile::TempDir,
}

impl NatsCluster {
    /// Starts the three; `None` (printed) when `nats-server` is not installed.
    fn start(test: &str) -> Option<Self> {
        if !nats_server_installed(test) {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let routes: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let all_routes: Vec<String> = routes.iter().map(|r| format!("nats://127.0.0.1:{r}")).collect();
        let nodes = (0..3)
            .map(|i| {
                let child = Command::new("nats-server")
                    .args(["-js", "-a", "127.0.0.1", "-p", &ports[i].to_string(), "-n", &format!("n{i}")])
                    .args(["--cluster_name", "eventpipe-test", "--cluster", &all_routes[i], "--routes"])
                    .arg(all_routes.join(","))
                    .arg("-sd")
                    .arg(dir.path().join(format!("js{i}")))
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("starting nats-server");
                Some(child)
            })
            .collect();
        ports.iter().for_each(|p| wait_listening(*p));
        let cluster = Self { nodes, ports, _dir: dir };
        cluster.wait_for_meta_leader();
        Some(cluster)
    }

    /// Waits (up to 60 s) until the cluster has elected its JetStream meta leader, which
    /// answers account info: a stream made before then may stay without a leader on a loaded
    /// machine.
    fn wait_for_meta_leader(&self) {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let deadline = Instant::now() + Duration::from_secs(60);
            let client = async_nats::connect(format!("nats://127.0.0.1:{}", self.ports[0])).await.unwrap();
            let js = async_nats::jetstream::new(client);
            while let Err(error) = js.query_account().await {
                assert!(Instant::now() < deadline, "the cluster elected no JetStream meta leader in 60 s: {error}");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        });
    }

    /// A runtime, the target with `query` on a running node, and JetStream through it.
    fn jetstream(
        &self,
        query: &str,
    ) -> (tokio::runtime::Runtime, eventpipe::nats::NatsTarget, async_nats::jetstream::Context) {
        let running = (0..self.nodes.len()).find(|i| self.nodes[*i].is_some()).expect("a running node");
        let target = format!("nats://127.0.0.1:{}?{query}", self.ports[running]);
        let target: eventpipe::nats::NatsTarget = target.parse().unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let js = rt.block_on(async { async_nats::jetstream::new(target.connect().await.unwrap()) });
        (rt, target, js)
    }

    /// The node that leads the stream of the target with `query`.
    fn leading(&self, query: &str) -> usize {
        let (rt, target, js) = self.jetstream(query);
        let leader = rt.block_on(async {
            let mut stream = js.get_stream(&target.stream).await.unwrap();
            stream.info().await.unwrap().cluster.as_ref().and_then(|c| c.leader.clone())
        });
        let leader = leader.expect("the stream has a leader");
        (0..self.nodes.len()).find(|i| leader == format!("n{i}")).expect("a leader among the nodes")
    }

    /// Moves the leadership of the stream of the target with `query` off node `i` (asking its
    /// leader to step down until another node leads it, for up to 60 s).
    fn lead_elsewhere(&self, query: &str, i: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.leading(query) == i {
            assert!(Instant::now() < deadline, "node n{i} still leads the stream after 60 s of step-downs");
            let (rt, target, js) = self.jetstream(query);
            rt.block_on(async {
                let subject = format!("STREAM.LEADER.STEPDOWN.{}", target.stream);
                let _: Result<Value, _> = js.request(subject, &serde_json::json!({})).await;
            });
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    /// SIGKILLs node `i`.
    fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }
}

impl Nats for NatsCluster {
    fn url(&self, query: &str) -> String {
        let servers: Vec<String> = self.ports.iter().map(|p| format!("nats://127.0.0.1:{p}")).collect();
        format!("nats:{}?{query}", servers.join(","))
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
    }
}

/// A worker of 2 on the cluster, replicas 3, snapshotting every 2 s.
fn cluster_worker(cluster: &NatsCluster, i: u32, out: &Path, dir: &Path) -> Proc {
    run(
        &[
            format!("--source={}", cluster.url("partitions=6&replicas=3")),
            format!("--worker={i}/2"),
            format!("--sink=jsonl:{}", out.display()),
            "--snapshot-interval=2".into(),
            LRU.into(),
        ],
        &dir.join(format!("{}.log", out.file_name().unwrap().to_string_lossy())),
    )
}

/// Waits until `log` has a line containing `what`.
fn wait_log(log: &Path, what: &str, secs: u64) {
    let started = Instant::now();
    loop {
        if std::fs::read_to_string(log).is_ok_and(|t| t.contains(what)) {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(secs), "{}: no {what:?} after {secs} s", log.display());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// On a 3-node cluster with replicas 3, a publisher and 2 workers run the bundled stream while
/// one worker is SIGKILLed and restarted and then the node leading the stream is SIGKILLed
/// while the rest is published: every object ends with the single run's final state, every
/// single-run sink call is written, and the restarted worker takes its partitions back within
/// 10 s of connecting (the dead one's pin lapses after `priority_timeout`, 5 s).
#[test]
fn a_cluster_node_and_a_worker_killed_mid_stream_lose_nothing() {
    let Some(mut cluster) = NatsCluster::start("cluster_failover") else { return };
    let dir = tempfile::tempdir().unwrap();
    let (first, second, slice) = halves(dir.path(), 4000);
    let expected = single_host(&slice, dir.path());
    let outs: Vec<PathBuf> = (0..3).map(|i| dir.path().join(format!("w{i}.jsonl"))).collect();
    let mut workers: Vec<Proc> = (0..2).map(|i| cluster_worker(&cluster, i, &outs[i as usize], dir.path())).collect();
    let published = wait(publish(&cluster, &first, "partitions=6&replicas=3", dir.path()));
    assert!(published.success(), "{}", std::fs::read_to_string(dir.path().join("publisher.log")).unwrap());
    wait_for(&outs[1..2], 120, "worker 1 writing", |l| l.len() >= 200);
    // Worker 1 goes, and is restarted at once, then (while the second half is published) a
    // node goes: the stream and the buckets keep a quorum of 2.
    let mut killed = workers.remove(1);
    killed.0.kill().unwrap();
    killed.0.wait().unwrap();
    workers.push(cluster_worker(&cluster, 1, &outs[2], dir.path()));
    let publisher = publish(&cluster, &second, "partitions=6&replicas=3", dir.path());
    wait_log(&dir.path().join("w2.jsonl.log"), "worker 1/2 of", 120);
    let connected = Instant::now();
    wait_for(&outs[2..3], 60, "the restarted worker writing", |l| !l.is_empty());
    let resumed = connected.elapsed();
    assert!(
        resumed < Duration::from_secs(10),
        "the restarted worker took {resumed:?} to take its partitions: {}",
        std::fs::read_to_string(dir.path().join("w2.jsonl.log")).unwrap()
    );
    // The node that leads the stream: a publication lost while a new leader is elected must
    // not be stored after later ones of the publisher's window (each expects the one before it
    // as the stream's last).
    let node = cluster.leading("partitions=6&replicas=3");
    cluster.kill(node);
    assert!(wait(publisher).success(), "{}", std::fs::read_to_string(dir.path().join("publisher.log")).unwrap());
    let want = final_counts(&expected);
    let deadline = Instant::now() + Duration::from_secs(300);
    while final_counts(&lines(&outs)) != want {
        if Instant::now() >= deadline {
            let got = final_counts(&lines(&outs));
            let differ: Vec<String> = want
                .iter()
                .filter(|(k, v)| got.get(*k) != Some(v))
                .take(12)
                .map(|(k, v)| {
                    let files: Vec<String> = outs
                        .iter()
                        .filter(|f| {
                            std::fs::read_to_string(f)
                                .is_ok_and(|t| t.contains(&format!("\"name\":{}", k.split(' ').next().unwrap())))
                        })
                        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
                        .collect();
                    format!("{k}: count {v} expected, {:?} written, in {files:?}", got.get(k))
                })
                .collect();
            panic!(
                "after the failures: {} objects differ, e.g.\n{}\n{}",
                want.iter().filter(|(k, v)| got.get(*k) != Some(v)).count(),
                differ.join("\n"),
                log_tails(&outs)
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    workers.into_iter().for_each(stop);
    let got = lines(&outs);
    let duplicates = assert_covers(&expected, &got, "node and worker killed");
    println!(
        "node {node} and worker 1 killed; the restarted worker wrote {resumed:?} after connecting; {duplicates} sink calls written twice"
    );
}

/// Going from 2 workers to 3 and back to 2 (each change: every worker stopped with SIGTERM,
/// then the new set started with its new `--worker I/N`) moves every partition with its
/// snapshot: per event, the sink calls are exactly the single run's, none written twice.
#[test]
fn rebalancing_from_2_to_3_workers_and_back_keeps_the_output_exact() {
    let Some(server) = NatsServer::start("rebalancing") else { return };
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(bundled_stream()).unwrap();
    let all: Vec<&str> = text.lines().take(4500).collect();
    let mut outs: Vec<PathBuf> = Vec::new();
    for (step, n) in [2u32, 3, 2].into_iter().enumerate() {
        let part = dir.path().join(format!("part{step}.jsonl"));
        std::fs::write(&part, all[step * 1500..(step + 1) * 1500].iter().map(|l| format!("{l}\n")).collect::<String>())
            .unwrap();
        let upto = dir.path().join(format!("upto{step}.jsonl"));
        std::fs::write(&upto, all[..(step + 1) * 1500].iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
        let expected = single_host(&upto, dir.path());
        let step_outs: Vec<PathBuf> = (0..n).map(|i| dir.path().join(format!("s{step}w{i}.jsonl"))).collect();
        let workers: Vec<Proc> =
            (0..n).map(|i| worker(&server, i, n, &step_outs[i as usize], "partitions=6", dir.path())).collect();
        outs.extend(step_outs);
        assert!(wait(publish(&server, &part, "partitions=6", dir.path())).success());
        wait_for(&outs, 120, &format!("{n} workers"), |l| final_counts(l) == final_counts(&expected));
        workers.into_iter().for_each(stop);
        let got = lines(&outs);
        assert_eq!(got.len(), expected.len(), "{n} workers: no sink call written twice");
        assert_eq!(by_name(&got), by_name(&expected), "{n} workers: per event, the single run's sink calls");
    }
}

/// How a publisher is fed in [`node_killed_while_publishing`].
#[derive(Debug, Clone, Copy)]
enum Feed {
    /// `--source jsonl:-`, through a pipe.
    Stdin,
    /// `--source http:…`, `POST /ingest` of 100 lines at a time.
    HttpIngest,
}

/// Which node [`node_killed_while_publishing`] SIGKILLs.
#[derive(Debug, Clone, Copy)]
enum Killed {
    /// The node leading the stream (the publisher is given every node).
    StreamLeader,
    /// The node the publisher is connected to, once another leads the stream (its leader is
    /// moved off it if needed): the client reconnects to another node within milliseconds, the
    /// stream's leader lives, and what was in flight on the dead connection is lost.
    PublishersServer,
}

/// A publisher fed by `feed` on a 3-node cluster (replicas 3) with 2 workers; a third of the
/// way through, the node `killed` says is SIGKILLed. The merged worker output equals a single
/// run: a source without positions gives every message an id, and every message expects the
/// stream's last sequence to be its predecessor's, so publications sent again after a loss are
/// neither stored twice nor out of order.
fn node_killed_while_publishing(feed: Feed, killed: Killed) {
    let Some(mut cluster) = NatsCluster::start(&format!("node_killed_{feed:?}_{killed:?}")) else { return };
    let dir = tempfile::tempdir().unwrap();
    let (_, _, slice) = halves(dir.path(), 4000);
    let expected = single_host(&slice, dir.path());
    let text = std::fs::read_to_string(&slice).unwrap();
    let input: Vec<&str> = text.lines().collect();
    let outs: Vec<PathBuf> = (0..2).map(|i| dir.path().join(format!("w{i}.jsonl"))).collect();
    let workers: Vec<Proc> = (0..2).map(|i| cluster_worker(&cluster, i, &outs[i as usize], dir.path())).collect();
    let query = "partitions=6&replicas=3";
    let log = dir.path().join("publisher.log");
    let source = match feed {
        Feed::Stdin => "jsonl:-".to_string(),
        Feed::HttpIngest => "http:127.0.0.1:0".to_string(),
    };
    let mut publisher = Proc(
        Command::new(bin())
            // A SIGTERM may come while the stream still elects its leader: the publisher goes on
            // publishing for the shutdown timeout, here longer than a loaded machine's election.
            .args(["run", "--no-watch", "--summary-json", "--shutdown-timeout=120", &format!("--source={source}")])
            .arg(format!("--sink={}", cluster.url(query)))
            .env("EVENTPIPE_INGEST_TOKEN", "")
            // The client's "connected successfully server=PORT" names the publisher's node.
            .env("RUST_LOG", "info")
            .stdin(match feed {
                Feed::Stdin => Stdio::piped(),
                Feed::HttpIngest => Stdio::null(),
            })
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let mut stdin = publisher.0.stdin.take();
    let ingest = match feed {
        Feed::Stdin => None,
        Feed::HttpIngest => {
            wait_log(&log, "HTTP ingest listening on ", 60);
            let text = std::fs::read_to_string(&log).unwrap();
            let at = text.split("HTTP ingest listening on ").nth(1).unwrap();
            Some(at.split_whitespace().next().unwrap().to_string())
        }
    };
    let mut send = |part: &[&str]| match (&mut stdin, &ingest) {
        (Some(stdin), _) => {
            use std::io::Write;
            stdin.write_all(part.iter().map(|l| format!("{l}\n")).collect::<String>().as_bytes()).unwrap();
            stdin.flush().unwrap();
        }
        (None, Some(addr)) => {
            for chunk in part.chunks(100) {
                let body: String = chunk.iter().map(|l| format!("{l}\n")).collect();
                // A publisher waiting on the stream sheds with 503 / 429 and `Retry-After`,
                // which a client retries (as client-go's recorder does).
                let mut response = post(addr, "/ingest", &body);
                for _ in 0..120 {
                    if !(response.starts_with("HTTP/1.1 503") || response.starts_with("HTTP/1.1 429")) {
                        break;
                    }
                    std::thread::sleep(Duration::from_secs(1));
                    response = post(addr, "/ingest", &body);
                }
                assert!(response.starts_with("HTTP/1.1 200"), "{response}");
            }
        }
        (None, None) => unreachable!(),
    };
    let third = input.len() / 3;
    send(&input[..third]);
    wait_for(&outs, 120, "the workers writing", |l| l.len() >= 200);
    let node = match killed {
        Killed::StreamLeader => cluster.leading(query),
        Killed::PublishersServer => {
            let text = std::fs::read_to_string(&log).unwrap();
            let at = text.split("connected successfully server=").last().unwrap();
            let port: u16 = at.split_whitespace().next().unwrap().parse().unwrap();
            let node = cluster.ports.iter().position(|p| *p == port).unwrap();
            cluster.lead_elsewhere(query, node);
            node
        }
    };
    match killed {
        Killed::StreamLeader => {
            cluster.kill(node);
            send(&input[third..]);
        }
        // Killed while publications are in flight: the rest is fed from a thread meanwhile.
        Killed::PublishersServer => {
            use std::io::Write;
            let mut pipe = stdin.take().expect("fed through standard input");
            let rest: Vec<String> = input[third..].iter().map(|l| format!("{l}\n")).collect();
            let feeder = std::thread::spawn(move || {
                for chunk in rest.chunks(100) {
                    pipe.write_all(chunk.concat().as_bytes()).unwrap();
                    pipe.flush().unwrap();
                    std::thread::sleep(Duration::from_millis(20));
                }
            });
            std::thread::sleep(Duration::from_millis(150));
            cluster.kill(node);
            feeder.join().unwrap();
        }
    }
    match feed {
        Feed::Stdin => {
            drop(stdin.take());
            assert!(wait(publisher).success(), "{}", std::fs::read_to_string(&log).unwrap());
        }
        // SIGTERM: the ingest stops, what it took is published, then the run ends.
        Feed::HttpIngest => stop(publisher),
    }
    wait_for(&outs, 300, "after the leader was killed", |l| final_counts(l) == final_counts(&expected));
    workers.into_iter().for_each(stop);
    let got = lines(&outs);
    let duplicates = assert_covers(&expected, &got, &format!("{feed:?}, {killed:?} killed"));
    assert_eq!(by_name(&got).len(), by_name(&expected).len(), "every object, none more");
    let summary: Value = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .expect("the publisher's summary");
    println!(
        "{feed:?}: {killed:?} (node {node}) killed mid-publication; {} publications sent again; {duplicates} sink \
         calls written twice",
        summary["scale"]["publish_retries"]
    );
}

#[test]
fn a_stream_leader_killed_while_stdin_is_published_loses_and_reorders_nothing() {
    node_killed_while_publishing(Feed::Stdin, Killed::StreamLeader);
}

#[test]
fn a_stream_leader_killed_while_http_ingest_is_published_loses_and_reorders_nothing() {
    node_killed_while_publishing(Feed::HttpIngest, Killed::StreamLeader);
}

#[test]
fn the_publishers_server_killed_while_stdin_is_published_loses_and_reorders_nothing() {
    node_killed_while_publishing(Feed::Stdin, Killed::PublishersServer);
}

/// `POST PATH` of `body` (JSON lines) to the HTTP server at `addr`; the whole response.
fn post(addr: &str, path: &str, body: &str) -> String {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    write!(
        conn,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-ndjson\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    conn.read_to_string(&mut response).unwrap();
    response
}

/// A server's `nats:` targets with credentials in the URL (`USER:PASSWORD@` or `TOKEN@`).
struct WithCredentials<'a>(&'a NatsServer, &'a str);

impl Nats for WithCredentials<'_> {
    fn url(&self, query: &str) -> String {
        format!("nats:nats://{}@127.0.0.1:{}?{query}", self.1, self.0.port)
    }
}

/// Publishes the bundled stream's first events to `server` and works them with one worker, both
/// at `RUST_LOG=trace` and with no `NATS_*` variable: both connect with the URL's credentials
/// (which the server requires), and neither log shows `secret`.
fn publish_and_work_with_url_credentials(server: &impl Nats, secret: &str, dir: &Path) {
    let input = dir.join("in.jsonl");
    let stream = std::fs::read_to_string(bundled_stream()).unwrap();
    std::fs::write(&input, stream.lines().take(200).collect::<Vec<_>>().join("\n") + "\n").unwrap();
    let spawn = |args: &[String], log: &str| {
        let mut command = Command::new(bin());
        command.args(["run", "--no-watch"]).args(args).env("RUST_LOG", "trace");
        for name in ["NATS_TOKEN", "NATS_USER", "NATS_PASSWORD"] {
            command.env_remove(name);
        }
        Proc(command.stdout(Stdio::null()).stderr(std::fs::File::create(dir.join(log)).unwrap()).spawn().unwrap())
    };
    let logs = |names: &[&str]| names.iter().map(|n| std::fs::read_to_string(dir.join(n)).unwrap()).collect::<String>();
    let publisher = spawn(
        &[format!("--source=jsonl:{}", input.display()), format!("--sink={}", server.url("stream=CREDS&partitions=2"))],
        "publisher.log",
    );
    let status = wait(publisher);
    assert!(
        status.success(),
        "the publisher connects with the URL's credentials: {status}\n{}",
        logs(&["publisher.log"])
    );
    let out = dir.join("worker.jsonl");
    let worker = spawn(
        &[
            format!("--source={}", server.url("stream=CREDS")),
            "--worker=0/1".into(),
            format!("--sink=jsonl:{}", out.display()),
        ],
        "worker.log",
    );
    wait_for(std::slice::from_ref(&out), 60, "the worker's sink calls", |l| !l.is_empty());
    stop(worker);
    let printed = logs(&["publisher.log", "worker.log"]);
    assert!(printed.contains("TRACE") || printed.contains("DEBUG"), "the logs are at trace level");
    assert!(!printed.contains(secret), "`{secret}` logged");
}

#[test]
fn a_user_and_password_in_the_url_authenticate_publisher_and_worker() {
    let Some(server) = NatsServer::start_with("user_password_in_url", &["--user", "alice", "--pass", "SEKnatsPw7"])
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    publish_and_work_with_url_credentials(&WithCredentials(&server, "alice:SEKnatsPw7"), "SEKnatsPw7", dir.path());
}

#[test]
fn a_token_in_the_url_authenticates_publisher_and_worker() {
    let Some(server) = NatsServer::start_with("token_in_url", &["--auth", "SEKnatsTok7"]) else { return };
    let dir = tempfile::tempdir().unwrap();
    publish_and_work_with_url_credentials(&WithCredentials(&server, "SEKnatsTok7"), "SEKnatsTok7", dir.path());
}

/// The publish tier carries each event's enrichment to the workers (`Eventpipe-Enrichment`):
/// with `--cluster-name` on the publisher only (no cluster to read: only the cluster's name is
/// attached), every worker line carries it, as a single host's would.
#[test]
fn the_publishers_enrichment_reaches_the_workers_lines() {
    let Some(server) = NatsServer::start("enrichment_carried") else { return };
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let text: String =
        std::fs::read_to_string(bundled_stream()).unwrap().lines().take(500).map(|l| l.to_owned() + "\n").collect();
    std::fs::write(&input, &text).unwrap();
    let publisher = run(
        &[
            format!("--source=jsonl:{}", input.display()),
            format!("--sink={}", server.url("partitions=2")),
            "--cluster-name=prod-eu".into(),
        ],
        &dir.path().join("publisher.log"),
    );
    let status = wait(publisher);
    assert!(status.success(), "{}", std::fs::read_to_string(dir.path().join("publisher.log")).unwrap());
    let out = dir.path().join("w0.jsonl");
    let w = worker(&server, 0, 1, &out, "", dir.path());
    let got = wait_for(std::slice::from_ref(&out), 120, "the worker", |l| l.len() >= 10);
    stop(w);
    assert!(
        got.iter().all(|l| l["enrichment"] == serde_json::json!({"cluster": "prod-eu"})),
        "{:?}",
        got.iter().find(|l| l["enrichment"] != serde_json::json!({"cluster": "prod-eu"}))
    );
}

impl NatsCluster {
    /// The node leading each of `partitions`' consumers of the target with `query` (`None`: no
    /// consumer yet, or no leader).
    fn consumer_leaders(&self, query: &str, partitions: &[u32]) -> Vec<Option<usize>> {
        let (rt, target, js) = self.jetstream(query);
        rt.block_on(async {
            let stream = js.get_stream(&target.stream).await.unwrap();
            let mut leaders = Vec::new();
            for p in partitions {
                let consumer = stream
                    .get_consumer::<async_nats::jetstream::consumer::pull::Config>(&format!("{}-{p}", target.durable))
                    .await;
                let leader = match consumer {
                    Ok(mut c) => c.info().await.ok().and_then(|i| i.cluster.as_ref().and_then(|c| c.leader.clone())),
                    Err(_) => None,
                };
                leaders.push(leader.and_then(|l| (0..self.nodes.len()).find(|i| l == format!("n{i}"))));
            }
            leaders
        })
    }
}

impl NatsCluster {
    /// Waits (up to 60 s) until the events stream and the workers' buckets of the target with
    /// `query` each have a leader and every other replica current: from then on, a node lost
    /// leaves a quorum that is caught up.
    fn wait_replicas_current(&self, query: &str) {
        let (rt, target, js) = self.jetstream(query);
        rt.block_on(async {
            let deadline = Instant::now() + Duration::from_secs(60);
            for name in [target.stream.clone(), format!("KV_{}", target.bucket), format!("OBJ_{}", target.bucket)] {
                loop {
                    let cluster = match js.get_stream(&name).await {
                        Ok(mut stream) => stream.info().await.ok().and_then(|i| i.cluster.clone()),
                        Err(_) => None,
                    };
                    let current = cluster.is_some_and(|c| {
                        c.leader.is_some()
                            && c.replicas.len() + 1 >= self.nodes.len()
                            && c.replicas.iter().all(|r| r.current)
                    });
                    if current {
                        break;
                    }
                    assert!(Instant::now() < deadline, "{name}: its replicas are not current after 60 s");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
        });
    }
}

/// How many lines of the `.log` files in `dir` contain `what`.
fn log_lines_with(dir: &Path, what: &str) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .map(|p| std::fs::read_to_string(p).unwrap_or_default().lines().filter(|l| l.contains(what)).count())
        .sum()
}

/// How soon a worker restarted beside a dead node writes again (the bound): nats-server
/// elects the successors of the leaders the node held (the stream's, the buckets', the
/// consumers') 4–9 s after it died; a worker's requests overlap (one every 250 ms), so it
/// reaches each new leader within about 250 ms of its election, and every partition waits for
/// its own at once.
const RESUME_BOUND: Duration = Duration::from_secs(10);

/// A Kubernetes node dying takes a NATS node and a worker with it. On a 3-node cluster
/// (replicas 3), after every partition stored a snapshot and while worker 1 writes the second
/// half, worker 1 and the node leading most of its partitions' consumers are SIGKILLed at the
/// same moment; worker 1 is restarted at once. The restarted worker writes within
/// [`RESUME_BOUND`] of being started (elections are waited for by every partition at once),
/// it restores its snapshots instead of starting fresh, no worker fails to store a snapshot
/// (the buckets have the stream's replicas: 2 of 3 is a quorum), and every object ends with the
/// single run's state. `EVENTPIPE_FAILOVER_RUNS` (default 1) repeats it on fresh clusters.
#[test]
fn a_node_and_a_worker_killed_together_resume_soon_and_store_every_snapshot() {
    let runs: usize = std::env::var("EVENTPIPE_FAILOVER_RUNS").ok().and_then(|n| n.parse().ok()).unwrap_or(1);
    let query = "partitions=6&replicas=3";
    for run in 1..=runs {
        let Some(mut cluster) = NatsCluster::start("node_and_worker_killed") else { return };
        let dir = tempfile::tempdir().unwrap();
        let (first, second, slice) = halves(dir.path(), 4000);
        let expected = single_host(&slice, dir.path());
        let outs: Vec<PathBuf> = (0..3).map(|i| dir.path().join(format!("w{i}.jsonl"))).collect();
        let mut workers: Vec<Proc> =
            (0..2).map(|i| cluster_worker(&cluster, i, &outs[i as usize], dir.path())).collect();
        let published = wait_within(publish(&cluster, &first, query, dir.path()), 300);
        assert!(published.success(), "{}", std::fs::read_to_string(dir.path().join("publisher.log")).unwrap());
        wait_for(&outs[1..2], 120, "worker 1 writing", |l| l.len() >= 200);
        // Every partition of worker 1 stored a snapshot, so that a fresh start would show.
        let mine: Vec<u32> = (0..6).filter(|p| p % 2 == 1).collect();
        let log1 = dir.path().join("w1.jsonl.log");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !mine.iter().all(|p| {
            std::fs::read_to_string(&log1)
                .unwrap_or_default()
                .lines()
                .any(|l| l.contains("correlator snapshot stored") && l.contains(&format!("partition={p}")))
        }) {
            assert!(Instant::now() < deadline, "worker 1 stored no snapshot of some partition:\n{}", log_tails(&outs));
            std::thread::sleep(Duration::from_millis(200));
        }
        cluster.wait_replicas_current(query);
        let leaders = cluster.consumer_leaders(query, &mine);
        let node = (0..3).max_by_key(|n| leaders.iter().filter(|l| **l == Some(*n)).count()).unwrap();
        let led = leaders.iter().filter(|l| **l == Some(node)).count();
        // Worker 1 is killed while it writes the second half, between two snapshots.
        let written = lines(&outs[1..2]).len();
        let publisher = publish(&cluster, &second, query, dir.path());
        wait_for(&outs[1..2], 120, "worker 1 writing the second half", |l| l.len() >= written + 50);
        let mut killed = workers.remove(1);
        killed.0.kill().unwrap();
        cluster.kill(node);
        killed.0.wait().unwrap();
        let restarted = Instant::now();
        workers.push(cluster_worker(&cluster, 1, &outs[2], dir.path()));
        let deadline = Instant::now() + Duration::from_secs(120);
        while lines(&outs[2..3]).is_empty() {
            assert!(Instant::now() < deadline, "run {run}: the restarted worker wrote nothing:\n{}", log_tails(&outs));
            std::thread::sleep(Duration::from_millis(100));
        }
        let resumed = restarted.elapsed();
        assert!(
            resumed < RESUME_BOUND,
            "run {run}: the restarted worker wrote {resumed:?} after it was started:\n{}",
            std::fs::read_to_string(dir.path().join("w2.jsonl.log")).unwrap()
        );
        assert!(
            wait_within(publisher, 300).success(),
            "{}",
            std::fs::read_to_string(dir.path().join("publisher.log")).unwrap()
        );
        wait_for(&outs, 300, "after the node and the worker were killed", |l| {
            final_counts(l) == final_counts(&expected)
        });
        workers.into_iter().for_each(stop);
        let failed_stores = log_lines_with(dir.path(), "cannot store the correlator snapshot");
        let fresh = log_lines_with(dir.path(), "starting fresh");
        let log2 = std::fs::read_to_string(dir.path().join("w2.jsonl.log")).unwrap();
        let restored = mine
            .iter()
            .filter(|p| {
                log2.lines().any(|l| {
                    l.contains(&format!("partition {p} of 6 from sequence")) && !l.contains("from sequence 1 ")
                })
            })
            .count();
        let got = lines(&outs);
        let duplicates = assert_covers(&expected, &got, "node and worker killed together");
        assert_eq!(by_name(&got).len(), by_name(&expected).len(), "every object, none more");
        println!(
            "run {run}: node n{node} (leading {led} of worker 1's {} consumers) and worker 1 killed together; \
             the restarted worker wrote {resumed:.1?} after it was started, {restored} of its partitions from \
             a snapshot; {failed_stores} snapshot stores failed; {duplicates} sink calls written twice",
            mine.len()
        );
        assert_eq!(failed_stores, 0, "run {run}: snapshot stores failed:\n{}", log_tails(&outs));
        assert_eq!(fresh, 0, "run {run}: a partition started fresh:\n{}", log_tails(&outs));
        assert_eq!(
            restored,
            mine.len(),
            "run {run}: every partition restored from its snapshot:\n{}",
            log_tails(&outs)
        );
    }
}

/// Two publishers (reading standard input, fed in turns, so their publications interleave)
/// share one stream of 3 replicas on a 3-node cluster. Their order checks are refused by the
/// other's writes: they expect the stream's last sequence (`Nats-Expected-Last-Sequence`,
/// checked before a message is stored), not the last message id (`Nats-Expected-Last-Msg-Id`,
/// which nats-server checks only when a replica applies the message: a refusal there stopped
/// every replica, the stream had no leader and both publishers waited for ever). Both end
/// (status 0), at least one suspended its check on seeing the other, and the stream holds
/// every event of both, with a leader.
#[test]
fn two_publishers_sharing_a_replicated_stream_keep_it_writable() {
    let Some(cluster) = NatsCluster::start("two_publishers") else { return };
    let dir = tempfile::tempdir().unwrap();
    let query = "partitions=4&replicas=3";
    let mut publishers: Vec<(Proc, PathBuf)> = (0..2)
        .map(|i| {
            let log = dir.path().join(format!("publisher{i}.log"));
            let child = Command::new(bin())
                .args(["run", "--no-watch", "--summary-json", "--source=jsonl:-"])
                .arg(format!("--sink={}", cluster.url(query)))
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .unwrap();
            (Proc(child), log)
        })
        .collect();
    for (_, log) in &publishers {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !std::fs::read_to_string(log).unwrap().contains("publishing to") {
            assert!(Instant::now() < deadline, "{}", std::fs::read_to_string(log).unwrap());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let text = std::fs::read_to_string(bundled_stream()).unwrap();
    let events: Vec<&str> = text.lines().take(4000).collect();
    let mut stdins: Vec<_> = publishers.iter_mut().map(|(p, _)| p.0.stdin.take().unwrap()).collect();
    for (turn, chunk) in events.chunks(50).enumerate() {
        let input: String = chunk.iter().map(|l| format!("{l}\n")).collect();
        stdins[turn % 2].write_all(input.as_bytes()).unwrap();
        stdins[turn % 2].flush().unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(stdins);
    let mut suspended = 0;
    for (publisher, log) in publishers {
        let status = wait_within(publisher, 120);
        let log = std::fs::read_to_string(&log).unwrap();
        assert!(status.success(), "{status}: {log}");
        suspended += usize::from(log.contains("another publisher writes to the stream"));
    }
    assert!(suspended > 0, "a publisher saw the other's writes and suspended its order check");
    let (rt, target, js) = cluster.jetstream(query);
    let (messages, leader) = rt.block_on(async {
        let mut stream = js.get_stream(&target.stream).await.unwrap();
        let info = stream.info().await.unwrap();
        (info.state.messages, info.cluster.as_ref().and_then(|c| c.leader.clone()))
    });
    assert_eq!(messages, events.len() as u64, "every event of both publishers, once");
    assert!(leader.is_some(), "the stream has a leader");
}
