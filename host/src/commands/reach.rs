//! What `eventpipe validate` checks of the servers a run would use: the Kubernetes config
//! (present and parseable, always), and with `--connect` each server reached — the Kubernetes
//! API server (`GET /version`), NATS servers (a client connection, credentials included),
//! webhook and OTLP hosts (a TCP connection to the URL's host and port). Each check is bounded
//! by [`REACH_TIMEOUT`].

use std::time::Duration;

use crate::k8s::KubeOptions;
use crate::nats::NatsTarget;

/// How long one server has to answer `validate --connect`: 5 s.
pub const REACH_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs `check` on a runtime of its own (validate is synchronous), bounded by
/// [`REACH_TIMEOUT`]: `Err` says what failed, or `no answer within 5 s`.
fn bounded<F: Future<Output = Result<(), String>>>(check: F) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting a runtime: {e}"))?;
    runtime.block_on(async {
        tokio::time::timeout(REACH_TIMEOUT, check)
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {} s", REACH_TIMEOUT.as_secs())))
    })
}

/// The Kubernetes client `run` would make for `options` (a kubeconfig, or the in-cluster
/// service account, found and parseable, with what it names readable); with `connect`, also
/// the API server's `GET /version`.
///
/// # Errors
/// What `run` would fail with (`kubernetes config: …`), or why the server did not answer.
pub fn kubernetes(options: &KubeOptions, connect: bool) -> Result<(), String> {
    bounded(async {
        let client = crate::k8s::connect(options).await.map_err(|e| e.to_string())?;
        if connect {
            let version = client.apiserver_version().await.map_err(|e| format!("GET /version: {e}"))?;
            tracing::debug!(version = %version.git_version, "the Kubernetes API server answered");
        }
        Ok(())
    })
}

/// A client connection to one of `target`'s servers, with the credentials `run` would use.
///
/// # Errors
/// Why no server took the connection.
pub fn nats(target: &NatsTarget) -> Result<(), String> {
    bounded(async { target.connect().await.map(drop).map_err(|e| e.to_string()) })
}

/// A TCP connection to `url`'s host and port (80 / 443 by default): the host resolves and
/// listens.
///
/// # Errors
/// A URL without a host, a name that does not resolve, or a refused connection.
pub fn http_host(url: &str) -> Result<(), String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("{e}"))?;
    let host = uri.host().ok_or("no host")?.trim_start_matches('[').trim_end_matches(']').to_string();
    let port = uri.port_u16().unwrap_or(if uri.scheme_str() == Some("https") { 443 } else { 80 });
    bounded(async move {
        tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .map(drop)
            .map_err(|e| format!("cannot connect to {host}:{port}: {e}"))
    })
}
