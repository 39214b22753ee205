//! `--source` values: where events come from, as `KIND:TARGET` text.

use std::path::PathBuf;
use std::sync::Arc;

use super::http::{HttpSource, IngestConfig, IngestCounters};
use super::jsonl::JsonLinesSource;
use super::k8s::{KubernetesSource, WatchOptions};
use super::{Source, SourceCounters, SourceError};
use crate::delivery::{Position, Progress};
use crate::redact::RedactedUrl;

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
    /// The worker tier of a scale-out: the partitions `p mod N = I` of a JetStream stream
    /// (`nats:nats://HOST:PORT[?stream=NAME…]` with `run --worker I/N`), run by
    /// [`crate::pipeline::scale`], not built here.
    Nats(Box<crate::nats::NatsTarget>),
}

impl std::fmt::Display for SourceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SourceSpec::JsonLinesFile(p) => write!(f, "jsonl:{}", p.display()),
            SourceSpec::JsonLinesStdin => f.write_str("jsonl:-"),
            SourceSpec::Kubernetes(ns) if ns.is_empty() => f.write_str("k8s"),
            SourceSpec::Kubernetes(ns) => write!(f, "k8s:{}", ns.join(",")),
            SourceSpec::Http(addr) => write!(f, "http:{addr}"),
            SourceSpec::Nats(target) => target.fmt(f),
        }
    }
}

/// The source forms, for errors.
const FORMS: &str =
    "expected a source: jsonl:PATH, jsonl:-, k8s, k8s:NS[,NS…], http, http:ADDR or nats:nats://HOST:PORT[?…]";

/// A `--source` value that is not one of the source forms, with what is wrong and, where one is
/// close, what was probably meant. The value is shown redacted: it may hold a URL with
/// credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("\"{value}\": {problem}")]
pub struct SourceSpecError {
    value: RedactedUrl,
    problem: String,
}

impl std::str::FromStr for SourceSpec {
    type Err = SourceSpecError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let fail = |problem: String| SourceSpecError { value: s.into(), problem };
        match s.split_once(':') {
            _ if s == "k8s" => Ok(SourceSpec::Kubernetes(Vec::new())),
            _ if s == "http" => Ok(SourceSpec::Http(([127, 0, 0, 1], 8080).into())),
            Some(("http", addr)) => addr.parse().map(SourceSpec::Http).map_err(|e| {
                fail(format!("http:ADDR: not an IP:PORT address ({e}), the address HTTP ingest listens on"))
            }),
            Some(("k8s", namespaces)) if !namespaces.is_empty() => {
                Ok(SourceSpec::Kubernetes(namespaces.split(',').map(|n| n.trim().to_string()).collect()))
            }
            Some(("nats", target)) => target
                .parse()
                .map(|t| SourceSpec::Nats(Box::new(t)))
                .map_err(|e: crate::nats::NatsTargetError| fail(e.to_string())),
            Some(("jsonl", "-")) => Ok(SourceSpec::JsonLinesStdin),
            Some(("jsonl", path)) if !path.is_empty() => Ok(SourceSpec::JsonLinesFile(path.into())),
            _ => {
                let kind = s.split(':').next().unwrap_or_default();
                Err(fail(match crate::suggest::closest(kind, ["jsonl", "k8s", "http", "nats"]) {
                    Some(known) if known != kind => {
                        format!("unknown source kind `{kind}` (did you mean `{known}:`?); {FORMS}")
                    }
                    _ => FORMS.into(),
                }))
            }
        }
    }
}

/// `--source` values are parsed without clap's "invalid value '…'" message, which would show the
/// value as given, credentials included ([`crate::redact::RedactingParser`]).
impl clap::builder::ValueParserFactory for SourceSpec {
    type Parser = crate::redact::RedactingParser<SourceSpec>;
    fn value_parser() -> Self::Parser {
        crate::redact::RedactingParser::new()
    }
}

/// What building a source takes besides its spec.
#[derive(Default)]
pub struct SourceContext {
    /// The Kubernetes client (needed by `k8s`).
    pub kube: Option<kube::Client>,
    /// What a `k8s` source watches (its namespaces come from the spec).
    pub watch: WatchOptions,
    /// Where the previous run stopped (at-least-once).
    pub resume: Option<Position>,
    /// Records the position after each event (at-least-once).
    pub progress: Option<Arc<Progress>>,
    /// A JSON-lines file is followed as it grows.
    pub follow: bool,
    /// Routes an HTTP source serves beside ingest (e.g. `GET /metrics`).
    pub extra_routes: axum::Router,
    /// Counted into while a JSON-lines source runs (lines read, bad, not events).
    pub counters: Arc<SourceCounters>,
    /// Counted into while an HTTP source runs (requests by status, documents).
    pub ingest_counters: Arc<IngestCounters>,
    /// The HTTP source's timeouts and connection cap.
    pub http_limits: crate::http_server::ServerLimits,
}

impl SourceSpec {
    /// The source this spec names, in the manner of Vector's `SourceConfig::build`.
    ///
    /// # Errors
    /// [`SourceError`] for a `k8s` source without a client.
    pub fn build(&self, cx: SourceContext) -> Result<Source, SourceError> {
        Ok(match self {
            SourceSpec::JsonLinesFile(path) => Source::JsonLines(JsonLinesSource {
                path: Some(path.clone()),
                start: match cx.resume {
                    Some(Position::FileOffset(offset)) => offset,
                    _ => 0,
                },
                progress: cx.progress,
                follow: cx.follow,
                counters: cx.counters,
            }),
            SourceSpec::JsonLinesStdin => Source::JsonLines(JsonLinesSource {
                path: None,
                start: 0,
                progress: None,
                follow: false,
                counters: cx.counters,
            }),
            SourceSpec::Kubernetes(namespaces) => {
                let client = cx.kube.ok_or_else(|| SourceError {
                    source: self.to_string(),
                    error: std::io::Error::other("no Kubernetes connection"),
                })?;
                let resume_from = match cx.resume {
                    Some(Position::ResourceVersion(rv)) => Some(rv),
                    _ => None,
                };
                let options = WatchOptions {
                    namespaces: namespaces.clone(),
                    resume_from,
                    progress: cx.progress,
                    counters: cx.counters,
                    ..cx.watch
                };
                Source::Kubernetes(KubernetesSource::new(client, options))
            }
            SourceSpec::Nats(_) => {
                return Err(SourceError {
                    source: self.to_string(),
                    error: std::io::Error::other("a nats: source runs as a worker (run --worker I/N)"),
                });
            }
            SourceSpec::Http(addr) => Source::Http(HttpSource {
                config: IngestConfig { listen: *addr, server: cx.http_limits, ..IngestConfig::default() },
                extra_routes: cx.extra_routes,
                counters: cx.ingest_counters,
            }),
        })
    }
}
