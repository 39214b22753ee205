//! `--sink` values and the config's `sinks` entries: where sink calls go, as `KIND:TARGET` text.

use std::path::PathBuf;

/// Where sink calls go: `jsonl:PATH`, `jsonl:-` (stdout), `plugin:NAME` / `plugin:FILE.wasm`
/// (a sink plugin, embedded or from a file, writing to stdout), or `k8s` / `k8s:NAMESPACE` (the
/// Kubernetes Events API; with a namespace, events of other namespaces are refused as client-go's
/// namespaced sink does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkSpec {
    /// One JSON line per sink call, to a file (created or truncated).
    JsonLinesFile(PathBuf),
    /// The same to standard output.
    JsonLinesStdout,
    /// A sink plugin: an embedded one by name (`jsonl`) or a component file.
    Plugin(String),
    /// The Kubernetes Events API; `""`: every event to its own namespace.
    Kubernetes(String),
    /// A webhook: batched JSON POSTs to this URL (`webhook:http://…` / `webhook:https://…`).
    Webhook(String),
}

impl std::fmt::Display for SinkSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SinkSpec::JsonLinesFile(p) => write!(f, "jsonl:{}", p.display()),
            SinkSpec::JsonLinesStdout => f.write_str("jsonl:-"),
            SinkSpec::Plugin(name) => write!(f, "plugin:{name}"),
            SinkSpec::Kubernetes(ns) if ns.is_empty() => f.write_str("k8s"),
            SinkSpec::Kubernetes(ns) => write!(f, "k8s:{ns}"),
            SinkSpec::Webhook(url) => write!(f, "webhook:{url}"),
        }
    }
}

/// A `--sink` value that is not one of the sink forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?}: expected a sink: jsonl:PATH, jsonl:-, k8s, k8s:NAMESPACE, plugin:NAME, plugin:FILE.wasm or webhook:URL"
)]
pub struct SinkSpecError(String);

impl std::str::FromStr for SinkSpec {
    type Err = SinkSpecError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once(':') {
            _ if s == "k8s" => Ok(SinkSpec::Kubernetes(String::new())),
            Some(("k8s", ns)) if !ns.is_empty() => Ok(SinkSpec::Kubernetes(ns.into())),
            Some(("jsonl", "-")) => Ok(SinkSpec::JsonLinesStdout),
            Some(("jsonl", path)) if !path.is_empty() => Ok(SinkSpec::JsonLinesFile(path.into())),
            Some(("plugin", name)) if !name.is_empty() => Ok(SinkSpec::Plugin(name.into())),
            Some(("webhook", url)) if url.starts_with("http://") || url.starts_with("https://") => {
                Ok(SinkSpec::Webhook(url.into()))
            }
            _ => Err(SinkSpecError(s.into())),
        }
    }
}
