//! The connection to a Kubernetes API server, shared by the Kubernetes source and sink: the
//! `kube` client configured like kubectl (an explicit kubeconfig, else `$KUBECONFIG` /
//! `~/.kube/config`, else the in-cluster service account), and the API's error shape
//! ([`StatusError`]).
//!
//! The client is kube's own service stack (base URI, kube's retry of 429 / 503 / 504, auth,
//! extra headers, connect / read / write timeouts) over a rustls connector whose certificate
//! verifier accepts what kubectl accepts ([`tls::KubectlServerVerifier`]). A request that
//! cannot reach the server fails with [`Unreachable`], which names the server and the reason —
//! for a TLS failure the rustls error, e.g. `cannot reach the Kubernetes API at
//! https://10.0.0.1:6443/: TLS: invalid peer certificate: UnknownIssuer` — and that line is
//! logged once (ERROR) until a request gets through or the reason changes.

pub mod enrich;
pub mod tls;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use hyper_util::client::legacy::connect::HttpConnector;
use kube::client::ConfigExt;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tower::{BoxError, ServiceBuilder};

/// How to reach the API server.
#[derive(Debug, Clone, Default)]
pub struct KubeOptions {
    /// A kubeconfig file; `None`: infer as kubectl does (`$KUBECONFIG`, `~/.kube/config`,
    /// in-cluster).
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context; `None`: its current context.
    pub context: Option<String>,
    /// The API server URL, overriding the kubeconfig's (tests, proxies); plain `http://`
    /// works.
    pub server: Option<String>,
}

/// Why no client could be made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The kubeconfig / in-cluster config could not be read.
    #[error("kubernetes config: {0}")]
    Config(String),
    /// The client could not be built from the config (TLS, auth plugin, …).
    #[error("kubernetes client: {0}")]
    Client(String),
}

/// A `kube` client for `options`.
///
/// # Errors
/// [`ConnectError`] when no config is found or it cannot be used.
pub async fn connect(options: &KubeOptions) -> Result<kube::Client, ConnectError> {
    let kube_options = KubeConfigOptions { context: options.context.clone(), ..KubeConfigOptions::default() };
    let mut config = match &options.kubeconfig {
        Some(path) => {
            let file =
                Kubeconfig::read_from(path).map_err(|e| ConnectError::Config(format!("{}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(file, &kube_options)
                .await
                .map_err(|e| ConnectError::Config(e.to_string()))?
        }
        None if options.context.is_some() => {
            kube::Config::from_kubeconfig(&kube_options).await.map_err(|e| ConnectError::Config(e.to_string()))?
        }
        None if options.server.is_some() => kube::Config::new("http://localhost".parse().expect("a URI")),
        None => kube::Config::infer().await.map_err(|e| ConnectError::Config(e.to_string()))?,
    };
    if let Some(server) = &options.server {
        config.cluster_url = server.parse().map_err(|e| {
            ConnectError::Config(format!("server {}: {e}", crate::redact::RedactedUrl::new(server.as_str())))
        })?;
    }
    client(config)
}

/// A `kube` client for `config`: kube's stack with [`tls::KubectlServerVerifier`] for the
/// kubeconfig's certificate authority and [`Unreachable`] errors. A config with a proxy gets
/// kube's own client (which refuses proxies: eventpipe builds kube without proxy support); an
/// in-cluster config (its CA file re-read as it rotates) and `insecure-skip-tls-verify` keep
/// kube's verifiers.
fn client(config: kube::Config) -> Result<kube::Client, ConnectError> {
    use hyper_util::rt::TokioExecutor;
    let fail = |e: kube::Error| ConnectError::Client(e.to_string());
    if config.proxy_url.is_some() {
        return kube::Client::try_from(config).map_err(fail);
    }
    let mut tls_config = config.rustls_client_config().map_err(fail)?;
    if let (Some(roots), false, None) = (&config.root_cert, config.accept_invalid_certs, &config.root_cert_file) {
        let verifier = tls::KubectlServerVerifier::new(roots).map_err(ConnectError::Client)?;
        tls_config.dangerous().set_certificate_verifier(Arc::new(verifier));
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let mut https = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls_config).https_or_http();
    if let Some(name) = &config.tls_server_name {
        let name = rustls::pki_types::ServerName::try_from(name.clone())
            .map_err(|e| ConnectError::Client(format!("tls-server-name {name:?}: {e}")))?;
        https = https.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name));
    }
    let mut connector = hyper_timeout::TimeoutConnector::new(https.enable_http1().wrap_connector(http));
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let http_client: hyper_util::client::legacy::Client<_, kube::client::Body> =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(connector);
    // Shown in errors and logs: credentials in the URL (user information, a token parameter) redacted.
    let server = crate::redact::RedactedUrl::new(config.cluster_url.to_string()).to_string();
    let reporter = Arc::new(UnreachableReporter { server, last: Mutex::new(None) });
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer().map_err(fail)?)
        .layer(config.extra_headers_layer().map_err(fail)?)
        .map_result(move |result| reporter.observe(result))
        .service(http_client);
    Ok(kube::Client::new(service, config.default_namespace))
}

/// A request that never got an answer: the connection to the API server (TCP or TLS) failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot reach the Kubernetes API at {server}: {reason}")]
pub struct Unreachable {
    /// The API server URL, credentials redacted ([`crate::redact::RedactedUrl`]).
    pub server: String,
    /// Why, from the error's source chain: `TLS: <the rustls error>` when the handshake failed,
    /// else the chain's messages, e.g. `tcp connect error: Connection refused (os error 111)`.
    pub reason: String,
    #[source]
    source: BoxError,
}

/// Turns connection failures into [`Unreachable`] and logs each once: again only after a
/// request got through or for another reason.
struct UnreachableReporter {
    server: String,
    /// The reason last logged; `None` after a success.
    last: Mutex<Option<String>>,
}

impl UnreachableReporter {
    fn observe<T>(&self, result: Result<T, hyper_util::client::legacy::Error>) -> Result<T, BoxError> {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        match result {
            Ok(response) => {
                *last = None;
                Ok(response)
            }
            Err(error) if error.is_connect() => {
                let reason = connect_reason(&error);
                let error = Unreachable { server: self.server.clone(), reason, source: Box::new(error) };
                if last.as_deref() != Some(error.reason.as_str()) {
                    tracing::error!("{error}");
                    *last = Some(error.reason.clone());
                }
                Err(Box::new(error))
            }
            Err(error) => Err(Box::new(error)),
        }
    }
}

/// Why a connection failed, from `error`'s source chain: `TLS: …` with the rustls error when
/// there is one (inside `std::io::Error`s too), else the messages of the chain below `error`
/// joined by `: `.
pub fn connect_reason(error: &(dyn std::error::Error + 'static)) -> String {
    if let Some(tls) = find_rustls_error(error) {
        return if tls::is_ca_used_as_end_entity(tls) {
            "TLS: invalid peer certificate: CaUsedAsEndEntity (the server's certificate is a CA certificate, \
             and not the configured certificate authority)"
                .to_string()
        } else {
            format!("TLS: {tls}")
        };
    }
    let mut parts: Vec<String> = Vec::new();
    let mut next = error.source();
    while let Some(e) = next {
        let text = e.to_string();
        if parts.last() != Some(&text) {
            parts.push(text);
        }
        next = e.source();
    }
    if parts.is_empty() { error.to_string() } else { parts.join(": ") }
}

fn find_rustls_error<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    if let Some(tls) = error.downcast_ref::<rustls::Error>() {
        return Some(tls);
    }
    // `io::Error::source` skips the error it wraps; look inside.
    let wrapped = error.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()).and_then(|inner| {
        let inner: &(dyn std::error::Error + 'static) = inner;
        find_rustls_error(inner)
    });
    wrapped.or_else(|| error.source().and_then(find_rustls_error))
}

/// A Kubernetes API status failure (`metav1.Status` in a `StatusError`): an HTTP code, a
/// machine-readable reason (`NotFound`, `AlreadyExists`, …) and the status causes' types.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StatusError {
    /// HTTP status code (0 when the server gave none).
    pub code: u16,
    /// `metav1.StatusReason`, e.g. `"NotFound"`.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// `details.causes[].type`, e.g. `"NamespaceTerminating"`.
    pub causes: Vec<String>,
}

/// Cause type the apiserver sets when the event's namespace is being deleted
/// (`v1.NamespaceTerminatingCause`).
pub const CAUSE_NAMESPACE_TERMINATING: &str = "NamespaceTerminating";
/// Status reason of a create that hit an existing object (`metav1.StatusReasonAlreadyExists`).
pub const REASON_ALREADY_EXISTS: &str = "AlreadyExists";

impl StatusError {
    /// Whether this is a 404, the only failure of a patch that falls back to create.
    pub fn is_not_found(&self) -> bool {
        self.code == 404
    }

    /// client-go logs these at V(5) instead of as errors: the event already exists, or its
    /// namespace is terminating.
    pub fn is_expected(&self) -> bool {
        self.reason == REASON_ALREADY_EXISTS || self.causes.iter().any(|c| c == CAUSE_NAMESPACE_TERMINATING)
    }

    /// The namespace named by a `404 NotFound` whose message is the apiserver's
    /// `namespaces "NAME" not found` (apimachinery's `NewNotFound` for the `namespaces`
    /// resource, which the `NamespaceLifecycle` admission plugin answers to a create in a
    /// namespace that does not exist); `None` for any other error.
    pub fn missing_namespace(&self) -> Option<&str> {
        if self.code != 404 || !(self.reason.is_empty() || self.reason == "NotFound") {
            return None;
        }
        let name = self.message.strip_prefix("namespaces \"")?.strip_suffix("\" not found")?;
        (!name.is_empty() && !name.contains('"')).then_some(name)
    }
}

/// A non-2xx answer of the API server as client-go's `StatusError`: the `Status` body when
/// there is one, else the HTTP code with the body text as message.
pub fn status_error(code: u16, body: &[u8]) -> StatusError {
    #[derive(serde::Deserialize)]
    struct Status {
        #[serde(default)]
        reason: String,
        #[serde(default)]
        message: String,
        #[serde(default)]
        code: u16,
        #[serde(default)]
        details: Option<Details>,
    }
    #[derive(serde::Deserialize)]
    struct Details {
        #[serde(default)]
        causes: Vec<Cause>,
    }
    #[derive(serde::Deserialize)]
    struct Cause {
        #[serde(default)]
        reason: String,
    }
    match serde_json::from_slice::<Status>(body) {
        Ok(s) => StatusError {
            code: if s.code == 0 { code } else { s.code },
            reason: s.reason,
            message: s.message,
            causes: s.details.map(|d| d.causes.into_iter().map(|c| c.reason).collect()).unwrap_or_default(),
        },
        Err(_) => StatusError {
            code,
            reason: String::new(),
            message: String::from_utf8_lossy(body).trim().to_string(),
            causes: Vec::new(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_bodies_become_status_errors() {
        let body = br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"events \"x\" is forbidden: unable to create new content in namespace t because it is being terminated","reason":"Forbidden","details":{"name":"x","kind":"events","causes":[{"reason":"NamespaceTerminating","message":"namespace t is being terminated","field":"metadata.namespace"}]},"code":403}"#;
        let e = status_error(403, body);
        assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
        assert_eq!(e.causes, ["NamespaceTerminating"]);
        let body = br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"namespaces \"gone\" not found","reason":"NotFound","details":{"name":"gone","kind":"namespaces"},"code":404}"#;
        assert_eq!(status_error(404, body).missing_namespace(), Some("gone"));
        let body = br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"events \"x.1\" not found","reason":"NotFound","details":{"name":"x.1","kind":"events"},"code":404}"#;
        assert_eq!(status_error(404, body).missing_namespace(), None, "a missing event, not a namespace");
        let e = status_error(502, b"<html>bad gateway</html>");
        assert_eq!((e.code, e.reason.as_str(), e.message.as_str()), (502, "", "<html>bad gateway</html>"));
    }
}

/// Which Events API the `k8s` source watches and `k8s` sinks write to
/// (`--events-api core|events.k8s.io`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, clap::ValueEnum)]
pub enum EventsApi {
    /// core/v1 `/api/v1/events`, as client-go `tools/record`.
    #[default]
    #[value(name = "core")]
    CoreV1,
    /// `/apis/events.k8s.io/v1/events`, as client-go `tools/events`: watched events are
    /// converted to core/v1 as the apiserver converts them; written events are converted to
    /// events.k8s.io/v1 and recorded as series (`crate::sink::series::SeriesSink`).
    #[value(name = "events.k8s.io")]
    EventsV1,
}
