//! Liveness and readiness probes, served beside `GET /metrics` (on `--metrics ADDR` and on the
//! HTTP ingest server):
//!
//! | path | answer |
//! |---|---|
//! | `GET /healthz` | `200 ok` while no piece reports a problem a process restart would cure (a Kubernetes watch that stalled again right after being restarted); else `503` with one `unhealthy: SUBJECT: REASON` line per problem |
//! | `GET /readyz` | `200 ok` once the pipeline runs (plan built, source started) and no piece reports a problem a restart would not cure (a Kubernetes source not synced yet, the API server unreachable, sinks acknowledging nothing while writes wait); `503 not ready` before that and from the moment a shutdown begins; `503` with one `not ready: SUBJECT: REASON` line per problem otherwise |
//!
//! Both answer `text/plain` and need no bearer token, even where `/metrics` does: a kubelet
//! probe cannot send one, and the answers carry nothing but the state (see
//! [`crate::source::http::with_bearer`], which lets [`PROBE_PATHS`] through).
//!
//! The split follows the kubelet's remedies: a failing liveness probe restarts the container, a
//! failing readiness probe only takes the pod out of its Services' endpoints. A problem goes to
//! `/healthz` only when a restart is what heals it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

/// The liveness path.
pub const HEALTHZ: &str = "/healthz";

/// The readiness path.
pub const READYZ: &str = "/readyz";

/// The paths answered without a bearer token.
pub const PROBE_PATHS: [&str; 2] = [HEALTHZ, READYZ];

/// Which probe a problem fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// `/healthz`: the process should be restarted.
    Liveness,
    /// `/readyz`: the process cannot do its work now, and a restart would not help.
    Readiness,
}

/// What the probes answer from: one state shared by the run (which sets and clears it) and
/// every server answering `GET /healthz` and `GET /readyz`. Clones share the state. Starts not
/// ready and without problems.
///
/// Besides the started flag ([`set`](Self::set)), pieces of the run report problems by
/// subject ([`report`](Self::report)): the Kubernetes source per watch path, the sinks.
#[derive(Debug, Clone, Default)]
pub struct Readiness {
    started: Arc<AtomicBool>,
    problems: Arc<Mutex<Problems>>,
}

#[derive(Debug, Default)]
struct Problems {
    liveness: BTreeMap<String, String>,
    readiness: BTreeMap<String, String>,
}

impl Problems {
    fn of(&mut self, probe: Probe) -> &mut BTreeMap<String, String> {
        match probe {
            Probe::Liveness => &mut self.liveness,
            Probe::Readiness => &mut self.readiness,
        }
    }
}

impl Readiness {
    /// A state that is not ready yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Marks the pipeline started (`true`: `/readyz` answers `200` unless a problem is
    /// reported) or not (`503 not ready`).
    pub fn set(&self, ready: bool) {
        self.started.store(ready, Ordering::Release);
    }

    /// Whether `/readyz` answers `200` now.
    pub fn is_ready(&self) -> bool {
        self.started.load(Ordering::Acquire) && self.lock().readiness.is_empty()
    }

    /// Whether `/healthz` answers `200` now.
    pub fn is_live(&self) -> bool {
        self.lock().liveness.is_empty()
    }

    /// Reports `problem` of `subject` (e.g. `k8s source /api/v1/events`) on `probe`, replacing
    /// the subject's earlier one; `None` clears it.
    pub fn report(&self, probe: Probe, subject: &str, problem: Option<String>) {
        let mut problems = self.lock();
        let map = problems.of(probe);
        match problem {
            Some(problem) => {
                if map.get(subject) != Some(&problem) {
                    tracing::warn!(subject, %problem, probe = ?probe, "probe fails");
                    map.insert(subject.to_string(), problem);
                }
            }
            None => {
                if map.remove(subject).is_some() {
                    tracing::info!(subject, probe = ?probe, "probe problem cleared");
                }
            }
        }
    }

    /// As [`report`](Self::report) of a readiness `problem` every run passes through at its
    /// start (a source not synced yet): logged at debug level, not as a warning.
    pub fn report_pending(&self, subject: &str, problem: String) {
        let mut problems = self.lock();
        let map = problems.of(Probe::Readiness);
        if map.get(subject) != Some(&problem) {
            tracing::debug!(subject, %problem, "not ready yet");
            map.insert(subject.to_string(), problem);
        }
    }

    /// The problems reported on `probe`, as `SUBJECT: REASON` lines.
    pub fn problems(&self, probe: Probe) -> Vec<String> {
        self.lock().of(probe).iter().map(|(subject, problem)| format!("{subject}: {problem}")).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Problems> {
        self.problems.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The routes `GET /healthz` and `GET /readyz` (`HEAD` too), answering from `readiness`. No
/// fallback, so it can be merged into another router.
pub fn router(readiness: Readiness) -> Router {
    Router::new().route(HEALTHZ, get(healthz)).route(READYZ, get(readyz)).with_state(readiness)
}

/// `200 ok` without liveness problems, else `503` with them.
async fn healthz(State(readiness): State<Readiness>) -> (StatusCode, String) {
    answer(readiness.problems(Probe::Liveness), "unhealthy")
}

/// `200 ok` when started and without readiness problems, else `503 not ready` (with them).
async fn readyz(State(readiness): State<Readiness>) -> (StatusCode, String) {
    if !readiness.started.load(Ordering::Acquire) {
        return (StatusCode::SERVICE_UNAVAILABLE, "not ready".into());
    }
    answer(readiness.problems(Probe::Readiness), "not ready")
}

fn answer(problems: Vec<String>, prefix: &str) -> (StatusCode, String) {
    if problems.is_empty() {
        return (StatusCode::OK, "ok".into());
    }
    let lines: Vec<String> = problems.iter().map(|p| format!("{prefix}: {p}")).collect();
    (StatusCode::SERVICE_UNAVAILABLE, lines.join("\n") + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_fail_their_probe_only_until_cleared() {
        let r = Readiness::new();
        r.set(true);
        assert!(r.is_ready() && r.is_live());
        r.report(Probe::Readiness, "k8s source /api/v1/events", Some("cannot reach the API server for 5 s".into()));
        assert!(!r.is_ready() && r.is_live());
        assert_eq!(r.problems(Probe::Readiness), ["k8s source /api/v1/events: cannot reach the API server for 5 s"]);
        r.report(Probe::Liveness, "k8s source /api/v1/events", Some("stalled again".into()));
        assert!(!r.is_live());
        r.report(Probe::Readiness, "k8s source /api/v1/events", None);
        r.report(Probe::Liveness, "k8s source /api/v1/events", None);
        assert!(r.is_ready() && r.is_live());
    }
}
