//! `--source` values: where events come from, as `KIND:TARGET` text.

use std::path::PathBuf;

/// Where events come from: `jsonl:PATH`, `jsonl:-` (stdin), or `k8s` / `k8s:NS[,NS…]` (a
/// Kubernetes API watch of all namespaces or the listed ones).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceSpec {
    /// JSON lines (or any shape the decoder accepts) from a file.
    JsonLinesFile(PathBuf),
    /// The same from standard input.
    JsonLinesStdin,
    /// A Kubernetes Events watch; empty: all namespaces.
    Kubernetes(Vec<String>),
    /// HTTP ingest on this address (`POST /api/v1/namespaces/{ns}/events`, `POST /ingest`,
    /// `GET /metrics`).
    Http(std::net::SocketAddr),
}

impl std::fmt::Display for SourceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SourceSpec::JsonLinesFile(p) => write!(f, "jsonl:{}", p.display()),
            SourceSpec::JsonLinesStdin => f.write_str("jsonl:-"),
            SourceSpec::Kubernetes(ns) if ns.is_empty() => f.write_str("k8s"),
            SourceSpec::Kubernetes(ns) => write!(f, "k8s:{}", ns.join(",")),
            SourceSpec::Http(addr) => write!(f, "http:{addr}"),
        }
    }
}

/// A `--source` value that is not one of the source forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?}: expected a source: jsonl:PATH, jsonl:-, k8s, k8s:NS[,NS…], http or http:ADDR")]
pub struct SourceSpecError(String);

impl std::str::FromStr for SourceSpec {
    type Err = SourceSpecError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once(':') {
            _ if s == "k8s" => Ok(SourceSpec::Kubernetes(Vec::new())),
            _ if s == "http" => Ok(SourceSpec::Http(([127, 0, 0, 1], 8080).into())),
            Some(("http", addr)) => addr.parse().map(SourceSpec::Http).map_err(|_| SourceSpecError(s.into())),
            Some(("k8s", namespaces)) if !namespaces.is_empty() => {
                Ok(SourceSpec::Kubernetes(namespaces.split(',').map(|n| n.trim().to_string()).collect()))
            }
            Some(("jsonl", "-")) => Ok(SourceSpec::JsonLinesStdin),
            Some(("jsonl", path)) if !path.is_empty() => Ok(SourceSpec::JsonLinesFile(path.into())),
            _ => Err(SourceSpecError(s.into())),
        }
    }
}
