//! The `k8s` source's stall rule against the real kube-apiserver (v1.19.0 on etcd, started by
//! [`crate::common::apiserver`]), reached through a loopback TCP proxy that can stop forwarding
//! per connection ([`Proxy`]): a watch whose connection stays open but delivers nothing is
//! restarted from its position within `--stall-timeout` plus a check, and nothing created
//! meanwhile is lost; an API server that answers nothing fails `/readyz` (not `/healthz`) until
//! it answers again.
//!
//! The control plane is shared by every test of this binary, so it is never stopped (SIGSTOP)
//! here: the proxy's "everything frozen" mode stands for an unreachable server instead.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::apiserver::{ControlPlane, control_plane_or_skip};

/// One proxied connection: whether its server-to-client bytes are held back, and when it last
/// forwarded some.
struct Conn {
    frozen: AtomicBool,
    closed: AtomicBool,
    last_down: Mutex<Instant>,
}

/// A loopback TCP forwarder to the API server (TLS passes through untouched). It can freeze
/// one connection (the watch: the one that last carried bytes to the client right after a
/// watched event arrived) while new connections pass, or everything, new connections included.
pub(crate) struct Proxy {
    pub(crate) addr: String,
    conns: Arc<Mutex<Vec<Arc<Conn>>>>,
    freeze_new: Arc<AtomicBool>,
}

impl Proxy {
    pub(crate) fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let conns: Arc<Mutex<Vec<Arc<Conn>>>> = Arc::default();
        let freeze_new = Arc::new(AtomicBool::new(false));
        let (all, freeze) = (conns.clone(), freeze_new.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                let Ok(server) = TcpStream::connect(&upstream) else { continue };
                let conn = Arc::new(Conn {
                    frozen: AtomicBool::new(freeze.load(Ordering::SeqCst)),
                    closed: AtomicBool::new(false),
                    last_down: Mutex::new(Instant::now()),
                });
                all.lock().unwrap().push(conn.clone());
                let (client2, server2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let up = conn.clone();
                std::thread::spawn(move || pump(client2, server2, &up, false));
                std::thread::spawn(move || pump(server, client, &conn, true));
            }
        });
        Proxy { addr, conns, freeze_new }
    }

    /// Freezes the connection that most recently forwarded bytes to the client.
    fn freeze_latest(&self) {
        let conns = self.conns.lock().unwrap();
        let latest = conns
            .iter()
            .filter(|c| !c.closed.load(Ordering::SeqCst))
            .max_by_key(|c| *c.last_down.lock().unwrap())
            .expect("a connection");
        latest.frozen.store(true, Ordering::SeqCst);
    }

    /// Freezes every connection, and every new one until [`Self::thaw`].
    pub(crate) fn freeze_all(&self) {
        self.freeze_new.store(true, Ordering::SeqCst);
        for c in self.conns.lock().unwrap().iter() {
            c.frozen.store(true, Ordering::SeqCst);
        }
    }

    fn thaw(&self) {
        self.freeze_new.store(false, Ordering::SeqCst);
        for c in self.conns.lock().unwrap().iter() {
            c.frozen.store(false, Ordering::SeqCst);
        }
    }
}

/// Copies `from` to `to`; bytes read while the connection is frozen are held until it thaws
/// (both directions when frozen with [`Proxy::freeze_all`], only the one to the client else).
fn pump(mut from: TcpStream, mut to: TcpStream, conn: &Conn, down: bool) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        while conn.frozen.load(Ordering::SeqCst) && !conn.closed.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
        }
        if conn.closed.load(Ordering::SeqCst) || to.write_all(&buf[..n]).is_err() {
            break;
        }
        if down {
            *conn.last_down.lock().unwrap() = Instant::now();
        }
    }
    conn.closed.store(true, Ordering::SeqCst);
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}

/// `eventpipe run --source k8s:NS` through `proxy` into a JSON-lines sink, with a 3 s stall
/// timeout checked every second; its metrics address.
struct Run {
    child: Child,
    metrics: String,
    out: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Run {
    fn start(plane: &ControlPlane, proxy: &Proxy, ns: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.jsonl");
        let mut child = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
            .args(["run", "--no-watch", "--metrics=127.0.0.1:0", "--stall-timeout=3", "--stall-check-interval=1"])
            .arg("--replay-existing")
            .arg(format!("--source=k8s:{ns}"))
            .arg(format!("--sink=jsonl:{}", out.display()))
            .arg(format!("--kubeconfig={}", plane.kubeconfig.display()))
            .arg(format!("--kube-server=https://{}", proxy.addr))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let metrics = crate::common::metrics_address_draining(&mut child);
        Run { child, metrics, out, _dir: dir }
    }

    /// `GET path` from the metrics server: status and body.
    fn get(&self, path: &str) -> (u16, String) {
        let mut conn = TcpStream::connect(&self.metrics).unwrap();
        write!(conn, "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", self.metrics).unwrap();
        let mut answer = String::new();
        conn.read_to_string(&mut answer).unwrap();
        let status = answer.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
        (status, body)
    }

    /// The value of the sample `name` with (at least) `labels` (`key="value"` each).
    fn sample(&self, name: &str, labels: &[&str]) -> Option<f64> {
        let (_, body) = self.get("/metrics");
        body.lines().find_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let rest = series.strip_prefix(name)?.strip_prefix('{')?;
            labels.iter().all(|label| rest.contains(label)).then(|| value.parse().ok())?
        })
    }

    /// The involved objects' names of the sink's calls, in order (one per call).
    fn sink_objects(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|call| call["event"]["involvedObject"]["name"].as_str().map(str::to_string))
            .collect()
    }

    /// Waits up to `limit` until the sink has a call for every object in `names`; how long it
    /// took.
    fn wait_for_names(&self, names: &[String], limit: Duration) -> Duration {
        let start = Instant::now();
        loop {
            let seen = self.sink_objects();
            let missing: Vec<&String> = names.iter().filter(|n| !seen.contains(n)).collect();
            if missing.is_empty() {
                return start.elapsed();
            }
            assert!(start.elapsed() < limit, "not in the sink after {limit:?}: {missing:?}; there: {seen:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Polls `path` until it answers `status`; how long it took.
    fn wait_for_status(&self, path: &str, status: u16, limit: Duration) -> (Duration, String) {
        let start = Instant::now();
        loop {
            let (got, body) = self.get(path);
            if got == status {
                return (start.elapsed(), body);
            }
            assert!(start.elapsed() < limit, "{path} still answers {got} {body:?} after {limit:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn create_event(plane: &ControlPlane, ns: &str, name: &str) {
    let at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let body = json!({
        "metadata": {"name": name, "namespace": ns},
        "involvedObject": {"kind": "Pod", "namespace": ns, "name": name, "uid": format!("uid-{name}"), "apiVersion": "v1"},
        "reason": "Stalled", "message": format!("event {name}"), "type": "Warning",
        "source": {"component": "kubelet", "host": "node-1"},
        "firstTimestamp": at, "lastTimestamp": at, "count": 1,
    });
    let (code, answer) = plane.request("POST", &format!("/api/v1/namespaces/{ns}/events"), Some(&body));
    assert_eq!(code, 201, "creating {name}: {answer}");
}

/// Waits until the run's watch delivers: `before` (created at once, sent on from the first
/// list or the watch: `--replay-existing`), then `watched`, created once `before` arrived, which
/// only the watch can bring. The watch's connection is then the one that last carried bytes to
/// eventpipe (a stall check lists only after a second without them).
fn watching(plane: &ControlPlane, run: &Run, ns: &str) {
    create_event(plane, ns, "before");
    run.wait_for_names(&["before".into()], Duration::from_secs(60));
    create_event(plane, ns, "watched");
    run.wait_for_names(&["watched".into()], Duration::from_secs(20));
}

pub(crate) fn upstream(plane: &ControlPlane) -> String {
    plane.url.trim_start_matches("https://").trim_end_matches('/').to_string()
}

/// The watch's connection stops forwarding (new connections still pass): within the stall
/// timeout (3 s) and a check or two, the watch is restarted from its position
/// (`eventpipe_source_watch_restarts_total{reason="stalled"}`), every event created while it
/// was stalled reaches the sink, and both probes answer `200` (one restart healed it).
#[test]
fn a_stalled_watch_is_restarted_from_its_position_and_loses_nothing() {
    let Some(plane) = control_plane_or_skip() else { return };
    let ns = plane.namespace("stall");
    let proxy = Proxy::start(upstream(plane));
    let run = Run::start(plane, &proxy, &ns);
    let source = format!("source=\"k8s:{ns}\"");
    let stalled = |run: &Run| run.sample("eventpipe_source_watch_restarts_total", &[&source, "reason=\"stalled\""]);

    watching(plane, &run, &ns);
    assert_eq!(stalled(&run), Some(0.0), "no stall yet");
    let progress = run.sample("eventpipe_source_last_progress_timestamp_seconds", &[&source]).unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    assert!((now - progress).abs() < 30.0, "the watch delivered just now: {progress}");

    proxy.freeze_latest();
    let frozen_at = Instant::now();
    let during: Vec<String> = (0..5).map(|i| format!("during-{i}")).collect();
    for name in &during {
        create_event(plane, &ns, name);
    }
    // Without the stall rule the frozen watch would deliver nothing until kube's read timeout
    // (295 s).
    run.wait_for_names(&during, Duration::from_secs(20));
    let recovered = frozen_at.elapsed();
    println!("events created while the watch was stalled arrived {recovered:?} after the freeze");
    assert!(recovered < Duration::from_secs(10), "recovered after {recovered:?}");
    assert!(recovered >= Duration::from_secs(2), "too fast for a stall timeout of 3 s: {recovered:?}");
    assert_eq!(stalled(&run), Some(1.0));

    // Nothing twice: the restart resumed from the position, not from a list.
    let mut seen = run.sink_objects();
    seen.sort();
    let mut expected: Vec<String> = during.iter().cloned().chain(["before".into(), "watched".into()]).collect();
    expected.sort();
    assert_eq!(seen, expected, "each event once");
    assert_eq!(run.get("/healthz").0, 200);
    assert_eq!(run.get("/readyz").0, 200);
}

/// Every connection stops forwarding, new ones too (an API server that answers nothing):
/// `/readyz` answers `503` with the reason once the stall timeout has passed, `/healthz` stays
/// `200`; once the proxy forwards again both answer `200`.
#[test]
fn an_unreachable_api_server_fails_readyz_not_healthz() {
    let Some(plane) = control_plane_or_skip() else { return };
    let ns = plane.namespace("unreachable");
    let proxy = Proxy::start(upstream(plane));
    let run = Run::start(plane, &proxy, &ns);
    watching(plane, &run, &ns);
    assert_eq!(run.get("/readyz").0, 200);

    proxy.freeze_all();
    let (took, body) = run.wait_for_status("/readyz", 503, Duration::from_secs(20));
    println!("/readyz failed {took:?} after the API server stopped answering: {body}");
    assert!(body.contains("no answer from the Kubernetes API server"), "{body}");
    assert!(took >= Duration::from_secs(3), "before the stall timeout: {took:?}");
    assert_eq!(run.get("/healthz"), (200, "ok".into()), "a restart would not help");

    proxy.thaw();
    let (took, _) = run.wait_for_status("/readyz", 200, Duration::from_secs(20));
    println!("/readyz answered 200 {took:?} after the API server answered again");
    assert_eq!(run.get("/healthz").0, 200);
    // The watch carries on: an event created now arrives.
    create_event(plane, &ns, "after");
    run.wait_for_names(&["after".into()], Duration::from_secs(20));
}

/// A source that has not synced (no list or watch answered yet, as client-go's `HasSynced`) is
/// not ready: `/readyz` answers `503 … not synced yet` while the API server answers nothing from
/// the start, and `200` once it answers.
#[test]
fn a_source_that_has_not_synced_is_not_ready() {
    let Some(plane) = control_plane_or_skip() else { return };
    let ns = plane.namespace("unsynced");
    let proxy = Proxy::start(upstream(plane));
    proxy.freeze_all();
    let run = Run::start(plane, &proxy, &ns);
    // `503 not ready` while the pipeline starts, then the source's reason.
    let start = Instant::now();
    loop {
        let (status, body) = run.get("/readyz");
        assert_eq!(status, 503, "{body}");
        if body.contains("not synced yet") {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{body}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(run.get("/healthz"), (200, "ok".into()), "a restart would not help");
    assert_eq!(run.sample("eventpipe_ready", &[]), Some(0.0), "the readiness gauge");
    proxy.thaw();
    run.wait_for_status("/readyz", 200, Duration::from_secs(20));
    assert_eq!(run.sample("eventpipe_ready", &[]), Some(1.0), "the readiness gauge");
    create_event(plane, &ns, "after");
    run.wait_for_names(&["after".into()], Duration::from_secs(20));
}
