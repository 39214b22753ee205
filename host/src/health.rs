//! Liveness and readiness probes, served beside `GET /metrics` (on `--metrics ADDR` and on the
//! HTTP ingest server):
//!
//! | path | answer |
//! |---|---|
//! | `GET /healthz` | `200 ok` whenever the server answers at all (the process serves) |
//! | `GET /readyz` | `200 ok` once the pipeline runs (plan built, source started); `503 not ready` before that and from the moment a shutdown begins |
//!
//! Both answer `text/plain` and need no bearer token, even where `/metrics` does: a kubelet
//! probe cannot send one, and the answers carry nothing but the state (see
//! [`crate::source::http::with_bearer`], which lets [`PROBE_PATHS`] through).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

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

/// Whether the pipeline is ready: one flag shared by the run (which sets and clears it) and
/// every server answering `GET /readyz`. Clones share the flag. Starts not ready.
#[derive(Debug, Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// A flag that is not ready yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Marks the pipeline ready (`true`: `/readyz` answers `200`) or not (`503`).
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Release);
    }

    /// Whether `/readyz` answers `200` now.
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// The routes `GET /healthz` and `GET /readyz` (`HEAD` too), answering from `readiness`. No
/// fallback, so it can be merged into another router.
pub fn router(readiness: Readiness) -> Router {
    Router::new().route(HEALTHZ, get(|| async { "ok" })).route(READYZ, get(readyz)).with_state(readiness)
}

/// `200 ok` when ready, else `503 not ready`.
async fn readyz(State(readiness): State<Readiness>) -> (StatusCode, &'static str) {
    if readiness.is_ready() { (StatusCode::OK, "ok") } else { (StatusCode::SERVICE_UNAVAILABLE, "not ready") }
}
