//! The HTTP servers piece: `GET /metrics` and the probes (`--metrics`), the Kubernetes read
//! API of the watch cache beside them (`--serve`), the readiness they answer from, and the
//! watch cache's expiry. Served until the run returns (not only until the signal), so `/readyz`
//! answers `503` and `/metrics` the final counters while the pipeline drains.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio_util::sync::{CancellationToken, DropGuard};

use crate::health::Readiness;
use crate::metrics::Metrics;
use crate::source::SourceSpec;
use crate::watch_cache::WatchCache;

use super::{RunError, announce};

/// The servers, their metrics registry and readiness.
pub(super) struct Servers {
    /// The registry every piece registers its counters on.
    pub metrics: Arc<Metrics>,
    /// `/readyz`: ready once the source is started, not ready again from the shutdown on.
    pub readiness: Readiness,
    watch_cache: Option<Arc<WatchCache>>,
    /// Whether the read API is served (`--serve`).
    read_api: bool,
    /// Timeouts and connection cap of each server.
    limits: crate::http_server::ServerLimits,
    /// The refusals of these servers (registered on `metrics`).
    http_stats: Arc<crate::http_server::ServerStats>,
    /// Fires when the run returns: the servers end, the watch cache closes.
    stop: CancellationToken,
    _stop_on_return: DropGuard,
}

impl Servers {
    /// An empty registry and a readiness that is not ready; `read_api`: `--serve` is given.
    pub fn build(
        watch_cache: Option<Arc<WatchCache>>,
        read_api: bool,
        limits: crate::http_server::ServerLimits,
    ) -> Self {
        let stop = CancellationToken::new();
        let (metrics, http_stats) = (Arc::new(Metrics::new()), Arc::new(crate::http_server::ServerStats::default()));
        let stats = http_stats.clone();
        metrics.add_source(move |s| s.add_http_server(&stats));
        let readiness = Readiness::new();
        let ready = readiness.clone();
        metrics.add_source(move |s| s.set(&crate::metrics::READY, &[], u64::from(ready.is_ready())));
        Servers {
            metrics,
            http_stats,
            readiness,
            watch_cache,
            read_api,
            limits,
            _stop_on_return: stop.clone().drop_guard(),
            stop,
        }
    }

    /// `/metrics`, the probes and (with `--serve` and the watch cache) the read API: what every
    /// server of the run serves, an HTTP source's too.
    pub fn routes(&self) -> axum::Router {
        let router = crate::metrics::router(self.metrics.clone()).merge(crate::health::router(self.readiness.clone()));
        match (&self.watch_cache, self.read_api) {
            (Some(cache), true) => router.merge(crate::watch_cache::api::router(cache.clone())),
            _ => router,
        }
    }

    /// Starts the watch cache's expiry and the servers of `metrics` and `serve` (the latter
    /// not when it is the HTTP `source`'s own fixed address: that server serves it all).
    ///
    /// # Errors
    /// [`RunError::Listen`] when an address cannot be bound, or a read API beyond loopback
    /// lacks the ingest token.
    pub async fn start(
        &self,
        metrics: Option<SocketAddr>,
        serve: Option<SocketAddr>,
        source: &SourceSpec,
        shutdown: &CancellationToken,
    ) -> Result<(), RunError> {
        // Watches end when the shutdown begins (or the run returns): a server's graceful
        // shutdown waits for its requests, and a watch would never end by itself. An idle cache
        // still expires its events.
        if let Some(cache) = self.watch_cache.clone() {
            let (stop, shutdown) = (self.stop.clone(), shutdown.clone());
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
                loop {
                    tokio::select! {
                        _ = tick.tick() => cache.expire(),
                        () = stop.cancelled() => break cache.close(),
                        () = shutdown.cancelled() => break cache.close_streams(),
                    }
                }
            });
        }
        let http_listen = match source {
            SourceSpec::Http(listen) => Some(*listen),
            _ => None,
        };
        let serve = serve.filter(|addr| addr.port() == 0 || Some(*addr) != http_listen);
        for (addr, read_api) in metrics.map(|a| (a, false)).into_iter().chain(serve.map(|a| (a, true))) {
            self.serve(addr, read_api).await?;
        }
        Ok(())
    }

    /// Binds `addr` and serves `/metrics` and the probes on it, and the read API too with
    /// `read_api`.
    async fn serve(&self, addr: SocketAddr, read_api: bool) -> Result<(), RunError> {
        let flag = if read_api { "--serve" } else { "--metrics" };
        let fail = |error: std::io::Error| RunError::Listen { flag, addr, error };
        // With the ingest token set, the server asks for it too; the read API beyond loopback
        // needs it, as HTTP ingest does.
        let token =
            crate::source::http::BearerToken::from_env().map_err(|e| fail(std::io::Error::other(e.to_string())))?;
        if read_api {
            crate::source::http::check_bind(crate::source::http::EVENTS_API_SERVER, addr, token.as_ref())
                .map_err(|e| fail(std::io::Error::other(e.to_string())))?;
        }
        let listener = bind(addr).await.map_err(fail)?;
        let local = listener.local_addr().map_err(fail)?;
        if read_api {
            announce(&format!("serving the events API on http://{local}/api/v1/events (and /metrics)"));
        } else {
            announce(&format!("metrics on http://{local}/metrics"));
        }
        let app = if read_api {
            self.routes()
        } else {
            crate::metrics::router(self.metrics.clone()).merge(crate::health::router(self.readiness.clone()))
        };
        let app = match token {
            Some(token) => crate::source::http::with_bearer(app, token),
            None => app,
        };
        let app = if read_api {
            app.fallback(crate::source::http::not_found)
                .method_not_allowed_fallback(crate::source::http::method_not_allowed)
        } else {
            app
        };
        let (stop, limits, stats) = (self.stop.clone(), self.limits, self.http_stats.clone());
        tokio::spawn(async move {
            let _ = crate::http_server::serve(listener, app, limits, stats, stop.cancelled_owned()).await;
        });
        Ok(())
    }
}

/// How long a bind waits for its address to be let go: a hot standby's servers end as the
/// leading run starts on the same addresses (`run --leader-elect`).
const BIND_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Binds `addr`, trying again every 50 ms for up to [`BIND_WAIT`] while it is in use.
async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let start = std::time::Instant::now();
    loop {
        match tokio::net::TcpListener::bind(addr).await {
            Err(error) if error.kind() == std::io::ErrorKind::AddrInUse && start.elapsed() < BIND_WAIT => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            bound => return bound,
        }
    }
}
