//! `eventpipe run --leader-elect` against the real kube-apiserver (v1.19.0 on etcd, started by
//! [`crate::common::apiserver`]): two candidates on one `coordination.k8s.io/v1` Lease, one
//! leads (runs the pipeline), the other waits; a SIGTERMed leader releases the Lease and the
//! other takes over at its next retry; a SIGKILLed one is taken over once its Lease expires by
//! the candidate's clock; a leader cut off from the API server (the freezing proxy of
//! [`crate::stall`]) exits before its Lease can expire.
//!
//! Terms of these tests: LeaseDuration 6 s, RenewDeadline 4 s, RetryPeriod 1 s (a candidate
//! retries every 1 to 2.2 s).

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::apiserver::{ControlPlane, control_plane_or_skip};
use crate::stall::{Proxy, create_event, upstream};

const LEASE_DURATION: Duration = Duration::from_secs(6);
const RENEW_DEADLINE: Duration = Duration::from_secs(4);
/// RetryPeriod × (1 + JitterFactor): the longest pause between a candidate's tries.
const LONGEST_RETRY: Duration = Duration::from_millis(2200);

/// One `eventpipe run --source k8s:NS --sink jsonl:… --leader-elect` with `POD_NAME` = `name`.
struct Candidate {
    child: Child,
    out: std::path::PathBuf,
    log: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

impl Candidate {
    fn start(plane: &ControlPlane, server: &str, ns: &str, name: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.jsonl");
        let mut child = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
            .args(["run", "--no-watch", "--replay-existing", "--leader-elect"])
            .arg(format!("--source=k8s:{ns}"))
            .arg(format!("--sink=jsonl:{}", out.display()))
            .arg(format!("--kubeconfig={}", plane.kubeconfig.display()))
            .arg(format!("--kube-server=https://{server}"))
            .arg(format!("--leader-elect-lease={ns}/eventpipe"))
            .arg(format!("--leader-elect-lease-duration={}", LEASE_DURATION.as_secs_f64()))
            .arg(format!("--leader-elect-renew-deadline={}", RENEW_DEADLINE.as_secs_f64()))
            .arg("--leader-elect-retry-period=1")
            .env("POD_NAME", name)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
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
    assert!(sigkill + Duration::from_millis(500) >= LEASE_DURATION, "taken over before the Lease expired: {sigkill:?}");
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
