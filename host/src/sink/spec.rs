//! `--sink` values and the config's `sinks` entries: where sink calls go, as `KIND:TARGET` text.

use std::path::PathBuf;

use crate::delivery::DeliveryMode;
use crate::redact::RedactedUrl;

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
    /// A webhook: batched JSON POSTs to this URL (`webhook:http://…` / `webhook:https://…`),
    /// shown redacted.
    Webhook(RedactedUrl),
    /// The publish tier of a scale-out ([`crate::pipeline::scale`]): each decoded event, after tenant
    /// routing and before correlation, published to a JetStream stream
    /// (`nats:nats://HOST:PORT[?stream=NAME&partitions=P…]`, [`crate::nats::NatsTarget`]).
    /// Only as the run's one `--sink`.
    Nats(Box<crate::nats::NatsTarget>),
}

/// As written, except that a URL's credentials are redacted ([`RedactedUrl`]): this is what
/// logs, errors and metric labels show. [`SinkSpec::identity`] is the full text.
impl std::fmt::Display for SinkSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SinkSpec::JsonLinesFile(p) => write!(f, "jsonl:{}", p.display()),
            SinkSpec::JsonLinesStdout => f.write_str("jsonl:-"),
            SinkSpec::Plugin(name) => write!(f, "plugin:{name}"),
            SinkSpec::Kubernetes(ns) if ns.is_empty() => f.write_str("k8s"),
            SinkSpec::Kubernetes(ns) => write!(f, "k8s:{ns}"),
            SinkSpec::Webhook(url) => write!(f, "webhook:{url}"),
            SinkSpec::Nats(target) => target.fmt(f),
        }
    }
}

impl SinkSpec {
    /// The spec as written, secrets included: what tells two sinks apart. Never log it.
    pub fn identity(&self) -> String {
        match self {
            SinkSpec::Webhook(url) => format!("webhook:{}", url.expose()),
            SinkSpec::Nats(target) => format!("nats:{}", target.url),
            other => other.to_string(),
        }
    }
}

/// A `--sink` value that is not one of the sink forms (shown redacted: it may hold a URL with
/// credentials).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "\"{0}{1}\": expected a sink: jsonl:PATH, jsonl:-, k8s, k8s:NAMESPACE, plugin:NAME, plugin:FILE.wasm, webhook:URL or nats:nats://HOST:PORT[?…], \
     optionally followed by ,delivery=at-most-once|wait|at-least-once"
)]
pub struct SinkSpecError(RedactedUrl, String);

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
                Ok(SinkSpec::Webhook(RedactedUrl::new(url)))
            }
            Some(("nats", target)) => {
                target.parse().map(|t| SinkSpec::Nats(Box::new(t))).map_err(|_| SinkSpecError(s.into(), String::new()))
            }
            _ => Err(SinkSpecError(s.into(), String::new())),
        }
    }
}

/// A sink as a tenant names it: where its calls go and, optionally, its own delivery mode
/// (`SPEC[,delivery=MODE]`, e.g. `webhook:https://hooks.example/e,delivery=at-most-once`), as
/// `--sink` and the config's `sinks` take it. Without a mode the sink follows the run's
/// `--delivery`.
///
/// What a mode means for one sink, in the tenant router:
/// - `at-least-once`: the at-least-once source position waits for this sink's acknowledgements;
/// - `wait`: a full window of writes in flight waits (back-pressure), but the saved position
///   does not wait for this sink;
/// - `at-most-once`: a full window drops the write (counted as `shed`) instead of waiting, and
///   the position does not wait for it; a webhook sink's own queue drops too when full.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkEntry {
    /// Where the calls go.
    pub spec: SinkSpec,
    /// Its delivery mode; `None`: the run's.
    pub delivery: Option<DeliveryMode>,
}

impl From<SinkSpec> for SinkEntry {
    fn from(spec: SinkSpec) -> Self {
        Self { spec, delivery: None }
    }
}

impl std::fmt::Display for SinkEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.delivery {
            Some(mode) => {
                let mode = clap::ValueEnum::to_possible_value(&mode).expect("no mode is skipped");
                write!(f, "{},delivery={}", self.spec, mode.get_name())
            }
            None => self.spec.fmt(f),
        }
    }
}

impl std::str::FromStr for SinkEntry {
    type Err = SinkSpecError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.rsplit_once(",delivery=") {
            Some((spec, mode)) => Ok(Self {
                spec: spec.parse()?,
                delivery: Some(
                    <DeliveryMode as clap::ValueEnum>::from_str(mode, false)
                        .map_err(|_| SinkSpecError(spec.into(), format!(",delivery={mode}")))?,
                ),
            }),
            None => Ok(Self { spec: s.parse()?, delivery: None }),
        }
    }
}

/// Parses `--sink` values for clap without clap's own "invalid value '…'" message, which
/// would show the value as given, credentials included: the error shows it redacted.
#[derive(Debug, Clone, Copy, Default)]
pub struct SinkEntryParser;

impl clap::builder::TypedValueParser for SinkEntryParser {
    type Value = SinkEntry;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<SinkEntry, clap::Error> {
        let flag = arg.map_or_else(|| "--sink".to_string(), |a| format!("--{}", a.get_id()));
        let fail = |message: String| {
            clap::Error::raw(clap::error::ErrorKind::ValueValidation, format!("invalid value for {flag}: {message}\n"))
                .with_cmd(cmd)
        };
        let text = value.to_str().ok_or_else(|| fail("not UTF-8".into()))?;
        text.parse().map_err(|e: SinkSpecError| fail(e.to_string()))
    }
}

impl clap::builder::ValueParserFactory for SinkEntry {
    type Parser = SinkEntryParser;
    fn value_parser() -> SinkEntryParser {
        SinkEntryParser
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_secrets_are_redacted_in_what_is_shown_but_not_in_the_identity() {
        let spec: SinkSpec = "webhook:https://bob:s3cret@hooks.example:8443/e/v1?token=abc&x=1#frag".parse().unwrap();
        assert_eq!(spec.to_string(), "webhook:https://REDACTED@hooks.example:8443/e/v1?token=REDACTED&x=1#frag");
        assert!(spec.identity().contains("bob:s3cret@") && spec.identity().contains("token=abc"));
        assert!(!format!("{spec:?}").contains("s3cret") && !format!("{spec:?}").contains("abc"), "{spec:?}");
        let jsonl: SinkSpec = "jsonl:out.jsonl".parse().unwrap();
        assert_eq!(jsonl.to_string(), jsonl.identity());
    }

    #[test]
    fn a_sink_entry_is_a_spec_with_an_optional_delivery_mode() {
        let e: SinkEntry = "webhook:http://h/x?a=1,delivery=at-most-once".parse().unwrap();
        assert_eq!(e.spec, SinkSpec::Webhook("http://h/x?a=1".into()));
        assert_eq!(e.delivery, Some(DeliveryMode::AtMostOnce));
        let e: SinkEntry = "webhook:http://h/x?key=1,delivery=at-most-once".parse().unwrap();
        assert_eq!(e.to_string(), "webhook:http://h/x?key=REDACTED,delivery=at-most-once", "shown redacted");
        let plain: SinkEntry = "jsonl:-".parse().unwrap();
        assert_eq!((plain.spec, plain.delivery), (SinkSpec::JsonLinesStdout, None));
        let err = "jsonl:-,delivery=sometimes".parse::<SinkEntry>().unwrap_err().to_string();
        assert!(err.contains("delivery=at-most-once|wait|at-least-once"), "{err}");
        // Whatever is wrong, what the error shows of the value is redacted.
        for bad in [
            "webhook:http://alice:S3cr3tPw@h/e?token=TOK,delivery=bogus",
            "ftp://user:pw@h/x",
            "webhook:ftp://user:pw@h/x",
            "nats:nats://user:pw@h:4222?token=TOK&stream=",
        ] {
            let err = bad.parse::<SinkEntry>().unwrap_err().to_string();
            assert!(
                err.contains("REDACTED") && !err.contains("S3cr3tPw") && !err.contains("TOK") && !err.contains(":pw@"),
                "{err}"
            );
        }
    }
}
