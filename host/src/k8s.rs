//! The connection to a Kubernetes API server, shared by the Kubernetes source and sink: the
//! `kube` client configured like kubectl (an explicit kubeconfig, else `$KUBECONFIG` /
//! `~/.kube/config`, else the in-cluster service account), and the API's error shape
//! ([`StatusError`]).

use std::path::PathBuf;

use kube::config::{KubeConfigOptions, Kubeconfig};

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
        config.cluster_url = server.parse().map_err(|e| ConnectError::Config(format!("server {server:?}: {e}")))?;
    }
    kube::Client::try_from(config).map_err(|e| ConnectError::Client(e.to_string()))
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
        let e = status_error(502, b"<html>bad gateway</html>");
        assert_eq!((e.code, e.reason.as_str(), e.message.as_str()), (502, "", "<html>bad gateway</html>"));
    }
}
