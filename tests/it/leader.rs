//! `eventpipe run --leader-elect` against the real kube-apiserver (v1.19.0 on etcd, started by
//! [`crate::common::apiserver`]): two candidates on one `coordination.k8s.io/v1` Lease, one
//! leads (runs the pipeline), the other waits; a SIGTERMed leader releases the Lease and the
//! other takes over at its next retry; a SIGKILLed one is taken over once its Lease expires by
//! the candidate's clock; a leader cut off from the API server (the freezing proxy of
//! [`crate::stall`]) exits before its Lease can expire; and the chaos test: two at-least-once
//! replicas whose leader is SIGKILLed every 20 s, under a steady rate of Events, end with what
//! one uninterrupted run writes.
//!
//! Terms of these tests: LeaseDuration 6 s, RenewDeadline 4 s, RetryPeriod 1 s (a candidate
//! retries every 1 to 2.2 s); the chaos test's: 4 s, 3 s and 1 s.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::apiserver::{ControlPlane, control_plane_or_skip};
use crate::common::recording_webhook::{self, Received};
use crate::stall::{Proxy, create_event, upstream};

const LEASE_DURATION: Duration = Duration::from_secs(6);
const RENEW_DEADLINE: Duration = Duration::from_secs(4);
/// RetryPeriod × (1 + JitterFactor): the longest pause between a candidate's tries.
const LONGEST_RETRY: Duration = Duration::from_millis(2200);

/// How to start one `eventpipe run --no-watch --source k8s:NS`: elected or not, into a
/// JSON-lines file of its own or a webhook, with more arguments.
struct Launch<'a> {
    plane: &'a ControlPlane,
    server: &'a str,
    ns: &'a str,
    /// `POD_NAME` and `--leader-elect` on the Lease `NS/eventpipe` with these terms
    /// (LeaseDuration, RenewDeadline, RetryPeriod); `None`: no election.
    elect: Option<(&'a str, [Duration; 3])>,
    /// `--sink webhook:URL` instead of the JSON-lines file.
    webhook: Option<&'a str>,
    args: Vec<String>,
}

impl<'a> Launch<'a> {
    fn new(plane: &'a ControlPlane, server: &'a str, ns: &'a str) -> Self {
        Launch { plane, server, ns, elect: None, webhook: None, args: Vec::new() }
    }

    /// Elected, as candidate `name` (`POD_NAME`), with these terms.
    fn elect(mut self, name: &'a str, lease_duration: Duration, renew_deadline: Duration, retry: Duration) -> Self {
        self.elect = Some((name, [lease_duration, renew_deadline, retry]));
        self
    }

    fn webhook(mut self, url: &'a str) -> Self {
        self.webhook = Some(url);
        self
    }

    fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    fn start(self) -> Candidate {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.jsonl");
        let sink = match self.webhook {
            Some(url) => format!("--sink=webhook:{url}"),
            None => format!("--sink=jsonl:{}", out.display()),
        };
        let mut command = Command::new(env!("CARGO_BIN_EXE_eventpipe"));
        command
            .args(["run", "--no-watch"])
            .arg(format!("--source=k8s:{}", self.ns))
            .arg(sink)
            .arg(format!("--kubeconfig={}", self.plane.kubeconfig.display()))
            .arg(format!("--kube-server=https://{}", self.server))
            .args(&self.args);
        if let Some((name, [lease_duration, renew_deadline, retry])) = self.elect {
            command
                .arg("--leader-elect")
                .arg(format!("--leader-elect-lease={}/eventpipe", self.ns))
                .arg(format!("--leader-elect-lease-duration={}", lease_duration.as_secs_f64()))
                .arg(format!("--leader-elect-renew-deadline={}", renew_deadline.as_secs_f64()))
                .arg(format!("--leader-elect-retry-period={}", retry.as_secs_f64()))
                .env("POD_NAME", name);
        }
        let mut child = command.stderr(Stdio::piped()).spawn().unwrap();
        let lines = crate::common::stderr_lines(&mut child);
        let log: Arc<Mutex<Vec<String>>> = Arc::default();
        let keep = log.clone();
        std::thread::spawn(move || {
            while let Ok(line) = lines.recv() {
                keep.lock().unwrap().push(line);
            }
        });
        Candidate { child, out, log, _dir: dir }
    }
}

/// One `eventpipe run --source k8s:NS` ([`Launch`]); killed when dropped.
struct Candidate {
    child: Child,
    /// The JSON-lines sink's file (empty with a webhook sink).
    out: std::path::PathBuf,
    log: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

impl Candidate {
    /// `--replay-existing --leader-elect` into a JSON-lines file with `POD_NAME` = `name` and
    /// the terms of these tests.
    fn start(plane: &ControlPlane, server: &str, ns: &str, name: &str) -> Self {
        Launch::new(plane, server, ns)
            .elect(name, LEASE_DURATION, RENEW_DEADLINE, Duration::from_secs(1))
            .arg("--replay-existing")
            .start()
    }

    fn logged(&self, needle: &str) -> bool {
        self.log.lock().unwrap().iter().any(|l| l.contains(needle))
    }

    /// The involved objects' names of the sink's calls.
    fn sink_objects(&self) -> Vec<String> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|call| call["event"]["involvedObject"]["name"].as_str().map(str::to_string))
            .collect()
    }

    /// Sends `signal` (`TERM`, `KILL`, …) with kill(1).
    fn signal(&self, signal: &str) {
        let status = Command::new("kill").arg(format!("-{signal}")).arg(self.child.id().to_string()).status().unwrap();
        assert!(status.success(), "kill -{signal}");
    }

    /// Waits up to `limit` for the process to exit: its status.
    fn wait_exit(&mut self, limit: Duration) -> std::process::ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(start.elapsed() < limit, "still running after {limit:?}: {:?}", self.log.lock().unwrap());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Candidate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Lease's `spec` (`null` before it exists).
fn lease(plane: &ControlPlane, ns: &str) -> serde_json::Value {
    let (code, answer) =
        plane.request("GET", &format!("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/eventpipe"), None);
    if code == 200 { answer["spec"].clone() } else { serde_json::Value::Null }
}

/// Waits up to `limit` until the Lease's holder is candidate `name` (`name_<suffix>`); how long
/// it took.
fn wait_holder(plane: &ControlPlane, ns: &str, name: &str, limit: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let spec = lease(plane, ns);
        if spec["holderIdentity"].as_str().is_some_and(|h| h.starts_with(&format!("{name}_"))) {
            return start.elapsed();
        }
        assert!(start.elapsed() < limit, "{name} does not hold the Lease after {limit:?}: {spec}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn wait_for_object(candidate: &Candidate, name: &str, limit: Duration) {
    let start = Instant::now();
    while !candidate.sink_objects().iter().any(|n| n == name) {
        assert!(start.elapsed() < limit, "{name} not written after {limit:?}: {:?}", candidate.sink_objects());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Two candidates: the first leads and writes, the second waits and writes nothing; SIGTERM
/// on the leader releases the Lease (exit 0) and the other leads within a retry; SIGKILL on
/// the new leader hands over once its Lease expires (LeaseDuration and a retry).
#[test]
fn one_candidate_leads_and_a_stopped_or_killed_leader_is_taken_over() {
    let Some(plane) = control_plane_or_skip() else { return };
    let ns = plane.namespace("leader");
    let server = upstream(plane);
    let mut a = Candidate::start(plane, &server, &ns, "a");
    wait_holder(plane, &ns, "a", Duration::from_secs(60));
    let b = Candidate::start(plane, &server, &ns, "b");
    create_event(plane, &ns, "first");
    wait_for_object(&a, "first", Duration::from_secs(30));
    // b has had several tries meanwhile: still a candidate, writing nothing.
    std::thread::sleep(LONGEST_RETRY * 2);
    wait_holder(plane, &ns, "a", Duration::ZERO);
    assert!(b.sink_objects().is_empty(), "a candidate wrote: {:?}", b.sink_objects());
    assert!(!b.logged("acquired the Lease"));
    let transitions = lease(plane, &ns)["leaseTransitions"].as_i64().unwrap();

    a.signal("TERM");
    let sigterm = wait_holder(plane, &ns, "b", LONGEST_RETRY + Duration::from_secs(3));
    let status = a.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "the stopped leader exited with {status}");
    assert!(a.logged("released the Lease"), "{:?}", a.log.lock().unwrap());
    assert_eq!(lease(plane, &ns)["leaseTransitions"].as_i64().unwrap(), transitions + 1);
    create_event(plane, &ns, "second");
    wait_for_object(&b, "second", Duration::from_secs(30));

    let _a = Candidate::start(plane, &server, &ns, "a");
    std::thread::sleep(LONGEST_RETRY * 2);
    wait_holder(plane, &ns, "b", Duration::ZERO);
    let mut b = b;
    b.signal("KILL");
    let sigkill = wait_holder(plane, &ns, "a", LEASE_DURATION + LONGEST_RETRY + Duration::from_secs(3));
    b.wait_exit(Duration::from_secs(5));
    // The candidate counts LeaseDuration from the last renewal it saw, and the leader renews
    // every RetryPeriod: up to 1 s before the kill.
    assert!(
        sigkill + Duration::from_millis(1200) >= LEASE_DURATION,
        "taken over before the Lease expired: {sigkill:?}"
    );
    eprintln!(
        "leader takeover (lease {LEASE_DURATION:?}, retry 1 s): after SIGTERM {sigterm:?}, after SIGKILL {sigkill:?}"
    );
}

/// The leader reaches the API server through a proxy that then stops forwarding: it cannot
/// renew, and exits (status 1, "lost the Lease") within RenewDeadline and a retry — before the
/// Lease expires for the others (LeaseDuration after its last renewal); then another candidate
/// takes over.
#[test]
fn a_leader_cut_off_from_the_api_server_steps_down_before_its_lease_expires() {
    let Some(plane) = control_plane_or_skip() else { return };
    let ns = plane.namespace("leader-cut");
    let proxy = Proxy::start(upstream(plane));
    let mut a = Candidate::start(plane, &proxy.addr, &ns, "a");
    wait_holder(plane, &ns, "a", Duration::from_secs(60));
    // The last renewal that got through: the Lease expires LeaseDuration after it.
    let renewed = lease(plane, &ns)["renewTime"].clone();
    let mut last_renewal = Instant::now();
    loop {
        let now = lease(plane, &ns)["renewTime"].clone();
        if now != renewed {
            last_renewal = Instant::now();
            break;
        }
        assert!(last_renewal.elapsed() < Duration::from_secs(10), "the leader does not renew");
        std::thread::sleep(Duration::from_millis(20));
    }
    proxy.freeze_all();
    let status = a.wait_exit(LEASE_DURATION + Duration::from_secs(5));
    let stepped_down = last_renewal.elapsed();
    assert_eq!(status.code(), Some(1), "{:?}", a.log.lock().unwrap());
    assert!(a.logged("lost the Lease"), "{:?}", a.log.lock().unwrap());
    assert!(stepped_down < LEASE_DURATION, "stepped down {stepped_down:?} after its last renewal");
    let b = Candidate::start(plane, &upstream(plane), &ns, "b");
    wait_holder(plane, &ns, "b", LEASE_DURATION + LONGEST_RETRY + Duration::from_secs(10));
    drop(b);
    eprintln!("leader cut off: exited {stepped_down:?} after its last renewal (lease {LEASE_DURATION:?})");
}

/// The chaos test's terms: LeaseDuration 4 s, RenewDeadline 3 s, RetryPeriod 1 s.
const CHAOS_LEASE_DURATION: Duration = Duration::from_secs(4);
const CHAOS_RENEW_DEADLINE: Duration = Duration::from_secs(3);
const CHAOS_RETRY: Duration = Duration::from_secs(1);
/// `--checkpoint-interval` of the elected replicas.
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);
/// Events created per second.
const RATE: u32 = 20;
/// What a loaded 2-core machine may add to a takeover.
const SLACK: Duration = Duration::from_secs(3);
/// The rounds, each at its offset from the start of the steady creation: five SIGKILLs 20 s
/// apart, then two SIGTERMs; the creation stops at [`CREATION_ENDS`].
const ROUNDS: [(&str, u64); 7] =
    [("KILL", 20), ("KILL", 40), ("KILL", 60), ("KILL", 80), ("KILL", 100), ("TERM", 120), ("TERM", 132)];
const CREATION_ENDS: Duration = Duration::from_secs(144);

/// A kube client of the control plane's kubeconfig on a runtime of its own, kept across
/// requests (one connection, not one per request as [`ControlPlane::request`]).
struct Api {
    runtime: tokio::runtime::Runtime,
    client: kube::Client,
}

impl Api {
    fn new(plane: &ControlPlane) -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let options = eventpipe::k8s::KubeOptions { kubeconfig: Some(plane.kubeconfig.clone()), ..Default::default() };
        let client = runtime.block_on(eventpipe::k8s::connect(&options)).unwrap();
        Api { runtime, client }
    }

    /// `METHOD path` with `body` as JSON: the status code and the answer.
    fn request(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        self.runtime.block_on(async {
            let request = http::Request::builder()
                .method(method)
                .uri(path)
                .header(http::header::ACCEPT, "application/json")
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(kube::client::Body::from(body.map(|b| b.to_string().into_bytes()).unwrap_or_default()))
                .unwrap();
            let response = self.client.send(request).await.unwrap();
            let code = response.status().as_u16();
            let bytes = response.into_body().collect_bytes().await.unwrap();
            (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
        })
    }

    /// The Lease's `holderIdentity` (`""` when it has none or does not exist yet).
    fn holder(&self, ns: &str) -> String {
        let (code, answer) =
            self.request("GET", &format!("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/eventpipe"), None);
        if code != 200 {
            return String::new();
        }
        answer["spec"]["holderIdentity"].as_str().unwrap_or_default().to_string()
    }

    /// Creates the Event `name` about a Pod of the same name (of its own: its count stays 1, it
    /// is never aggregated with another, and its source+object bucket never runs dry).
    fn create_event(&self, ns: &str, name: &str) {
        let at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let body = serde_json::json!({
            "metadata": {"name": name, "namespace": ns},
            "involvedObject": {"kind": "Pod", "namespace": ns, "name": name, "uid": format!("uid-{name}"), "apiVersion": "v1"},
            "reason": "Chaos", "message": format!("event {name}"), "type": "Normal",
            "source": {"component": "kubelet", "host": "node-1"},
            "firstTimestamp": at, "lastTimestamp": at, "count": 1,
        });
        let (code, answer) = self.request("POST", &format!("/api/v1/namespaces/{ns}/events"), Some(&body));
        assert_eq!(code, 201, "creating {name}: {answer}");
    }
}

fn chaos_name(i: usize) -> String {
    format!("chaos-{i:05}")
}

fn chaos_index(item: &Value) -> Option<usize> {
    item["event"]["metadata"]["name"].as_str()?.strip_prefix("chaos-")?.parse().ok()
}

/// Creates `chaos-00000`, `chaos-00001`, … at [`RATE`] a second (on schedule: a late one is
/// followed at once by the next) until stopped.
struct Creator {
    created: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Creator {
    fn start(plane: &'static ControlPlane, ns: &str) -> Self {
        let (created, stop) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
        let (count, stopped, ns) = (created.clone(), stop.clone(), ns.to_string());
        let thread = std::thread::spawn(move || {
            let api = Api::new(plane);
            let start = Instant::now();
            for i in 0.. {
                if stopped.load(Ordering::SeqCst) {
                    break;
                }
                let due = start + Duration::from_secs(1) * i / RATE;
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
                api.create_event(&ns, &chaos_name(i as usize));
                count.store(i as usize + 1, Ordering::SeqCst);
            }
        });
        Creator { created, stop, thread: Some(thread) }
    }

    /// Events created so far: `chaos-00000` up to this index, excluded.
    fn created(&self) -> usize {
        self.created.load(Ordering::SeqCst)
    }

    /// Stops the creation: how many were created.
    fn stop(&mut self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take()
            && let Err(panic) = thread.join()
        {
            std::panic::resume_unwind(panic);
        }
        self.created()
    }
}

impl Drop for Creator {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Each `chaos-*` Event's final state at a receiver (its last write): count, message, reason
/// and involvedObject.
fn final_states(received: &Received) -> BTreeMap<usize, Value> {
    let mut states = BTreeMap::new();
    for item in received.items.lock().unwrap().iter() {
        if let Some(i) = chaos_index(item) {
            let e = &item["event"];
            states.insert(i, serde_json::json!([e["count"], e["message"], e["reason"], e["involvedObject"]]));
        }
    }
    states
}

/// Repeats at a receiver: each `chaos-*` Event's writes of a count it was already written with,
/// by index.
fn repeats(received: &Received) -> BTreeMap<usize, usize> {
    let mut writes: BTreeMap<(usize, String), usize> = BTreeMap::new();
    for item in received.items.lock().unwrap().iter() {
        if let Some(i) = chaos_index(item) {
            *writes.entry((i, item["event"]["count"].to_string())).or_default() += 1;
        }
    }
    let mut repeats = BTreeMap::new();
    for ((i, _), n) in writes {
        if n > 1 {
            *repeats.entry(i).or_default() += n - 1;
        }
    }
    repeats
}

/// `indices` (ascending) as runs: `chaos-00010..=chaos-00042 (33), chaos-00100`.
fn runs(indices: impl IntoIterator<Item = usize>) -> String {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for i in indices {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == i => *end = i,
            _ => runs.push((i, i)),
        }
    }
    let text: Vec<String> = runs
        .iter()
        .map(
            |&(a, b)| {
                if a == b { chaos_name(a) } else { format!("{}..={} ({})", chaos_name(a), chaos_name(b), b - a + 1) }
            },
        )
        .collect();
    text.join(", ")
}

/// Waits up to `limit` until `received` has a write of every `chaos-*` Event below `total`;
/// the indices still missing.
fn wait_for_all(received: &Received, total: usize, limit: Duration) -> Vec<usize> {
    let start = Instant::now();
    loop {
        let states = final_states(received);
        let missing: Vec<usize> = (0..total).filter(|i| !states.contains_key(i)).collect();
        if missing.is_empty() || start.elapsed() >= limit {
            return missing;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits (up to 30 s) until `received` got nothing for `quiet`.
fn wait_quiet(received: &Received, quiet: Duration) {
    let start = Instant::now();
    let (mut len, mut since) = (received.len(), Instant::now());
    while since.elapsed() < quiet && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(100));
        if received.len() != len {
            (len, since) = (received.len(), Instant::now());
        }
    }
}

/// One takeover: the signal, the replica it stopped and the one that took over, and the times
/// from the signal to the Lease's new holder and to the new leader's first write of an Event
/// created after the old leader ended.
struct Takeover {
    signal: &'static str,
    from: String,
    to: String,
    /// The first Event created after the old leader ended.
    after: usize,
    holder: Duration,
    first_write: Duration,
}

/// `(p50, max)` of `times` (nearest rank).
fn p50_max(times: &[Duration]) -> (Duration, Duration) {
    let mut sorted = times.to_vec();
    sorted.sort();
    (sorted[sorted.len().div_ceil(2) - 1], sorted[sorted.len() - 1])
}

/// Chaos (issue #56): two elected replicas (A and B, at-least-once, a state file each) write
/// Events created at a steady 20 a second to one webhook receiver; a third replica, without
/// election and never disturbed, writes them to another: the uninterrupted run. Every 20 s the
/// leader (the Lease's holder) is SIGKILLed and restarted at once as a candidate with its state
/// file, as a Deployment restarts a container, five times; then it is SIGTERMed (it drains,
/// releases the Lease and exits 0) and restarted, twice. Each Event's final state at the pair's
/// receiver (count, message, reason, involvedObject of its last write) equals the
/// uninterrupted run's, none is missing, and the repeats stay within what the saved positions
/// explain. A SIGKILLed leader is taken over once its Lease expires (LeaseDuration and up to
/// two retries), a SIGTERMed one at the next retry.
#[test]
fn a_leader_killed_every_20_s_under_a_steady_event_rate_loses_no_event() {
    let Some(plane) = control_plane_or_skip() else { return };
    let ns = plane.namespace("leader-chaos");
    let server = upstream(plane);
    let api = Api::new(plane);
    let (reference, reference_url, _reference_runtime) = recording_webhook::start(Duration::ZERO);
    let (pair, pair_url, _pair_runtime) = recording_webhook::start(Duration::ZERO);
    let states = tempfile::tempdir().unwrap();
    let names = ["A", "B"];
    let launch = |who: usize| {
        Launch::new(plane, &server, &ns)
            .elect(names[who], CHAOS_LEASE_DURATION, CHAOS_RENEW_DEADLINE, CHAOS_RETRY)
            .webhook(&pair_url)
            .arg("--delivery=at-least-once")
            .arg(format!("--state-file={}", states.path().join(format!("{}.state", names[who])).display()))
            .arg(format!("--checkpoint-interval={}", CHECKPOINT_INTERVAL.as_secs_f64()))
            .start()
    };
    let _uninterrupted = Launch::new(plane, &server, &ns).webhook(&reference_url).start();
    let mut replicas = [launch(0), launch(1)];
    // Every process's log, told when the test fails.
    let mut logs = vec![replicas[0].log.clone(), replicas[1].log.clone()];

    // Every replica sends only what comes after its first list: warm-up Events until the
    // uninterrupted run and the leader both wrote one.
    let start = Instant::now();
    for n in 0.. {
        if reference.len() > 0 && pair.len() > 0 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(90), "no replica writes: {:?}", replicas[0].log.lock().unwrap());
        api.create_event(&ns, &format!("warm-up-{n}"));
        std::thread::sleep(Duration::from_millis(250));
    }

    let mut creator = Creator::start(plane, &ns);
    let creating = Instant::now();
    let start = Instant::now();
    while !pair.items.lock().unwrap().iter().any(|item| chaos_index(item).is_some()) {
        assert!(start.elapsed() < Duration::from_secs(30), "the leader writes none of the steady Events");
        std::thread::sleep(Duration::from_millis(50));
    }

    let mut takeovers: Vec<Takeover> = Vec::new();
    let mut problems: Vec<String> = Vec::new();
    for (signal, at) in ROUNDS {
        std::thread::sleep((creating + Duration::from_secs(at)).saturating_duration_since(Instant::now()));
        let old = api.holder(&ns);
        let who = match old.split_once('_') {
            Some(("A", _)) => 0,
            Some(("B", _)) => 1,
            _ => panic!("no replica holds the Lease before the SIG{signal}: {old:?}"),
        };
        let mut cursor = pair.len();
        let signalled = Instant::now();
        replicas[who].signal(signal);
        // The first Event created after the old leader ended: only the new leader writes it.
        let mut after = None;
        if signal == "KILL" {
            replicas[who].wait_exit(Duration::from_secs(5));
            after = Some(creator.created() + 1);
            replicas[who] = launch(who);
            logs.push(replicas[who].log.clone());
        }
        let (mut holder, mut first_write) = (None, None);
        while holder.is_none() || first_write.is_none() {
            if holder.is_none() {
                let now = api.holder(&ns);
                if !now.is_empty() && now != old {
                    holder = Some((signalled.elapsed(), now));
                }
            }
            if after.is_none()
                && let Some(status) = replicas[who].child.try_wait().unwrap()
            {
                after = Some(creator.created() + 1);
                if !status.success() {
                    problems.push(format!("{old} exited with {status} after SIGTERM"));
                }
                if !replicas[who].logged("released the Lease") {
                    problems.push(format!("{old} did not release the Lease after SIGTERM"));
                }
                replicas[who] = launch(who);
                logs.push(replicas[who].log.clone());
            }
            if let Some(after) = after
                && first_write.is_none()
            {
                let items = pair.items.lock().unwrap();
                if items[cursor..].iter().any(|item| chaos_index(item).is_some_and(|i| i >= after)) {
                    first_write = Some(signalled.elapsed());
                }
                cursor = items.len();
            }
            assert!(
                signalled.elapsed() < Duration::from_secs(60),
                "SIG{signal} of {old}: after 60 s, new holder {holder:?}, first write {first_write:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let ((holder, to), first_write) = (holder.unwrap(), first_write.unwrap());
        eprintln!(
            "SIG{signal} {old} at {:?} ({} created): {to} holds the Lease after {holder:?}, writes {} and later from {first_write:?}",
            creating.elapsed(),
            after.unwrap() - 1,
            chaos_name(after.unwrap()),
        );
        takeovers.push(Takeover { signal, from: old, to, after: after.unwrap(), holder, first_write });
    }

    std::thread::sleep((creating + CREATION_ENDS).saturating_duration_since(Instant::now()));
    let total = creator.stop();
    let rate = total as f64 / creating.elapsed().as_secs_f64();
    eprintln!("created {total} Events in {:?} ({rate:.1}/s)", creating.elapsed());

    // Quiesced: the uninterrupted run wrote every Event, the pair had up to 30 s more.
    let reference_missing = wait_for_all(&reference, total, Duration::from_secs(60));
    let pair_missing = wait_for_all(&pair, total, Duration::from_secs(30));
    wait_quiet(&pair, Duration::from_secs(2));
    wait_quiet(&reference, Duration::from_secs(2));

    for signal in ["KILL", "TERM"] {
        let of: Vec<&Takeover> = takeovers.iter().filter(|t| t.signal == signal).collect();
        let holder: Vec<Duration> = of.iter().map(|t| t.holder).collect();
        let written: Vec<Duration> = of.iter().map(|t| t.first_write).collect();
        let ((h50, hmax), (w50, wmax)) = (p50_max(&holder), p50_max(&written));
        eprintln!(
            "takeover after SIG{signal} (lease {CHAOS_LEASE_DURATION:?}, retry {CHAOS_RETRY:?}): new holder {holder:?}, \
             p50 {h50:?}, max {hmax:?}; first new write {written:?}, p50 {w50:?}, max {wmax:?}"
        );
    }
    for t in &takeovers {
        if t.to.split('_').next() == t.from.split('_').next() {
            eprintln!("SIG{} of {}: the restarted replica took over ({})", t.signal, t.from, t.to);
        }
    }

    if !reference_missing.is_empty() {
        problems.push(format!("the uninterrupted run misses {}", runs(reference_missing)));
    }
    if !pair_missing.is_empty() {
        let kills: Vec<String> =
            takeovers.iter().map(|t| format!("SIG{} from {}", t.signal, chaos_name(t.after))).collect();
        problems.push(format!("missing after the takeovers ({}): {}", kills.join(", "), runs(pair_missing)));
    }
    let (expected, got) = (final_states(&reference), final_states(&pair));
    let differ: Vec<usize> = (0..total).filter(|i| got.contains_key(i) && expected.get(i) != got.get(i)).collect();
    if let Some(&first) = differ.first() {
        problems.push(format!(
            "final states differ for {}; first: uninterrupted {} pair {}",
            runs(differ.iter().copied()),
            expected[&first],
            got[&first]
        ));
    }
    let counts: Vec<&Value> = expected.values().filter(|s| s[0] != 1).collect();
    if !counts.is_empty() {
        problems.push(format!("the uninterrupted run wrote counts other than 1: {counts:?}"));
    }
    let repeated = repeats(&pair);
    let repeat_total: usize = repeated.values().sum();
    let reference_repeats: usize = repeats(&reference).values().sum();
    eprintln!(
        "repeats: {repeat_total} writes of an Event with a count it already had, of {} Events: {}; the uninterrupted \
         run's: {reference_repeats}; resent batches dropped by the receivers: pair {}, uninterrupted {}",
        repeated.len(),
        runs(repeated.keys().copied()),
        pair.resent.load(Ordering::SeqCst),
        reference.resent.load(Ordering::SeqCst),
    );
    // What a new leader writes again is what the old one wrote after the position it recorded
    // in the Lease: that position lags its last write by the acknowledgement, up to a
    // checkpoint interval (the save) and a RetryPeriod (the renewal that records it), and the
    // standby's own snapshot lags it by up to a quarter interval. Twice a checkpoint interval
    // and twice a RetryPeriod of Events per takeover bounds that with room for late saves and
    // renewals on a loaded machine (a SIGTERMed leader records its last position as it
    // releases, so its takeovers add about none).
    let per_takeover = (RATE as f64 * (CHECKPOINT_INTERVAL * 2 + CHAOS_RETRY * 2).as_secs_f64()) as usize;
    let bound = per_takeover * takeovers.len();
    if repeat_total >= bound {
        problems.push(format!("{repeat_total} repeats, not fewer than {bound} ({per_takeover} per takeover)"));
    }
    if reference_repeats > 0 {
        problems.push(format!("the uninterrupted run repeated {reference_repeats} writes"));
    }

    let kill_limit = CHAOS_LEASE_DURATION + CHAOS_RETRY.mul_f64(2.2) * 2 + SLACK;
    let term_limit = CHAOS_RETRY.mul_f64(2.2) + SLACK;
    for t in &takeovers {
        let limit = if t.signal == "KILL" { kill_limit } else { term_limit };
        if t.holder > limit {
            problems.push(format!("SIG{} of {}: taken over after {:?}, over {limit:?}", t.signal, t.from, t.holder));
        }
        // The candidate counts LeaseDuration from the last renewal it saw, at most a RetryPeriod
        // before the kill.
        if t.signal == "KILL" && t.holder + CHAOS_RETRY + Duration::from_millis(200) < CHAOS_LEASE_DURATION {
            problems.push(format!("SIGKILL of {}: taken over after {:?}, before its Lease expired", t.from, t.holder));
        }
    }
    if !problems.is_empty() {
        for (n, log) in logs.iter().enumerate() {
            for line in log.lock().unwrap().iter() {
                if (line.contains("leader election") || line.contains("WARN") || line.contains("ERROR"))
                    && !line.contains("not synced yet")
                {
                    eprintln!("replica process {n}: {line}");
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Each output Event's final `count` in JSON-lines `files` (the last write per
/// `metadata.name`), in order of the files.
fn final_counts(files: &[&std::path::Path]) -> BTreeMap<String, i64> {
    let mut counts = BTreeMap::new();
    for file in files {
        for line in std::fs::read_to_string(file).unwrap_or_default().lines() {
            let Ok(call) = serde_json::from_str::<Value>(line) else { continue };
            let event = &call["event"];
            if let (Some(name), Some(count)) = (event["metadata"]["name"].as_str(), event["count"].as_i64()) {
                counts.insert(name.to_string(), count);
            }
        }
    }
    counts
}

/// The hot standby's correlator state is the leader's: Events repeating about three Pods (the
/// same reason and message, so the correlator counts them into one output Event each) are
/// created while the leader writes; the leader is SIGKILLed halfway and the standby takes over
/// from its own state file. The counts go on from the old leader's — each output Event ends at
/// 20, as an uninterrupted run's — where a standby with a fresh correlator would count the
/// second half from 1 again.
#[test]
fn a_hot_standby_takes_over_with_the_leaders_counts() {
    const OBJECTS: usize = 3;
    const REPEATS: usize = 20;
    let Some(plane) = control_plane_or_skip() else { return };
    let ns = plane.namespace("hot-standby");
    let server = upstream(plane);
    let state = tempfile::tempdir().unwrap();
    let elected = |name: &'static str| {
        Launch::new(plane, &server, &ns)
            .elect(name, CHAOS_LEASE_DURATION, CHAOS_RENEW_DEADLINE, CHAOS_RETRY)
            .arg("--delivery=at-least-once")
            .arg(format!("--state-file={}", state.path().join(name).display()))
            .arg(format!("--checkpoint-interval={}", CHECKPOINT_INTERVAL.as_secs_f64()))
            .start()
    };
    let reference = Launch::new(plane, &server, &ns).start();
    let mut a = elected("a");
    wait_holder(plane, &ns, "a", Duration::from_secs(60));
    let b = elected("b");
    create_event(plane, &ns, "first");
    wait_for_object(&a, "first", Duration::from_secs(30));
    wait_for_object(&reference, "first", Duration::from_secs(30));
    let start = Instant::now();
    while !b.logged("a hot standby") {
        assert!(start.elapsed() < Duration::from_secs(30), "b is no hot standby: {:?}", b.log.lock().unwrap());
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(2)); // b has listed and watches

    let api = Api::new(plane);
    let repeat = |i: usize| {
        let at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let pod = format!("repeating-{}", i % OBJECTS);
        let body = serde_json::json!({
            "metadata": {"name": format!("repeat-{i:03}"), "namespace": &ns},
            "involvedObject": {"kind": "Pod", "namespace": &ns, "name": &pod, "uid": format!("uid-{pod}"), "apiVersion": "v1"},
            "reason": "BackOff", "message": "Back-off restarting failed container", "type": "Warning",
            "source": {"component": "kubelet", "host": "node-1"},
            "firstTimestamp": at, "lastTimestamp": at, "count": 1,
        });
        let (code, answer) = api.request("POST", &format!("/api/v1/namespaces/{ns}/events"), Some(&body));
        assert_eq!(code, 201, "{answer}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let half = OBJECTS * REPEATS / 2;
    (0..half).for_each(repeat);
    // The leader writes the first half; it dies with its last seconds maybe not recorded.
    let expected_half = half as i64 / OBJECTS as i64;
    let start = Instant::now();
    while final_counts(&[&a.out]).values().filter(|&&c| c == expected_half).count() < OBJECTS {
        assert!(start.elapsed() < Duration::from_secs(30), "a wrote {:?}", final_counts(&[&a.out]));
        std::thread::sleep(Duration::from_millis(50));
    }
    a.signal("KILL");
    a.wait_exit(Duration::from_secs(5));
    (half..OBJECTS * REPEATS).for_each(repeat);
    wait_holder(plane, &ns, "b", CHAOS_LEASE_DURATION + SLACK);

    let done = |counts: &BTreeMap<String, i64>| counts.values().filter(|&&c| c == REPEATS as i64).count() == OBJECTS;
    let start = Instant::now();
    while !done(&final_counts(&[&reference.out])) || !done(&final_counts(&[&a.out, &b.out])) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "reference {:?}, pair {:?}; b's log: {:?}",
            final_counts(&[&reference.out]),
            final_counts(&[&a.out, &b.out]),
            b.log.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(b.logged("the hot standby saved"), "b led from its own state: {:?}", b.log.lock().unwrap());
    assert_eq!(final_counts(&[&a.out, &b.out]), final_counts(&[&reference.out]), "every output Event's final count");
    // b wrote the second half itself, counting on from a's counts.
    let b_counts = final_counts(&[&b.out]);
    assert!(b_counts.values().filter(|&&c| c == REPEATS as i64).count() == OBJECTS, "b's last writes: {b_counts:?}");
}
