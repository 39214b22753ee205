//! `--sink` values and the config's `sinks` entries: where sink calls go, as `KIND:TARGET` text.

use std::path::PathBuf;

use super::concurrency::Concurrency;
use crate::delivery::DeliveryMode;
use crate::redact::RedactedUrl;

/// Where sink calls go: `jsonl:PATH`, `jsonl:-` (stdout), `plugin:NAME` / `plugin:FILE.wasm`
/// (a sink plugin, embedded or from a file, writing to stdout), `k8s` / `k8s:NAMESPACE` (the
/// Kubernetes Events API; with a namespace, events of other namespaces are refused as client-go's
/// namespaced sink does), `webhook:URL`, `otlp:URL` (OTLP/HTTP log records) or `metrics`
/// (counters on `/metrics`).
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
    /// OTLP/HTTP logs: one log record per call, batched protobuf POSTs to this URL
    /// (`otlp:http://HOST:PORT[/v1/logs]`, [`crate::sink::otlp`]), shown redacted.
    Otlp(RedactedUrl),
    /// Event metrics: each call counted by tenant, type, involved object namespace and kind,
    /// and reason on `/metrics` (`metrics[,max_series=N]`, [`crate::sink::event_metrics`]).
    Metrics {
        /// `max_series=N`: the series cap (≥ 1); `None`: the default (1000).
        max_series: Option<usize>,
    },
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
            SinkSpec::Otlp(url) => write!(f, "otlp:{url}"),
            SinkSpec::Metrics { max_series: None } => f.write_str("metrics"),
            SinkSpec::Metrics { max_series: Some(n) } => write!(f, "metrics,max_series={n}"),
            SinkSpec::Nats(target) => target.fmt(f),
        }
    }
}

impl SinkSpec {
    /// The spec as written, secrets included: what tells two sinks apart. Never log it.
    pub fn identity(&self) -> String {
        match self {
            SinkSpec::Webhook(url) => format!("webhook:{}", url.expose()),
            SinkSpec::Otlp(url) => format!("otlp:{}", url.expose()),
            SinkSpec::Nats(target) => format!("nats:{}", target.url),
            other => other.to_string(),
        }
    }
}

/// A `--sink` value that is not one of the sink forms (shown redacted: it may hold a URL with
/// credentials).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "\"{0}{1}\": expected a sink: jsonl:PATH, jsonl:-, k8s, k8s:NAMESPACE, plugin:NAME, plugin:FILE.wasm, webhook:URL, otlp:URL, metrics or \
     nats:nats://HOST:PORT[?…], optionally followed by ,delivery=at-most-once|wait|at-least-once (and, for a webhook or \
     otlp, ,concurrency=adaptive|N ,max_batch=N ,max_batch_bytes=N; for metrics, ,max_series=N)"
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
            Some(("otlp", url)) if url.starts_with("http://") || url.starts_with("https://") => {
                Ok(SinkSpec::Otlp(RedactedUrl::new(url)))
            }
            None if s == "metrics" => Ok(SinkSpec::Metrics { max_series: None }),
            Some(("nats", target)) => {
                target.parse().map(|t| SinkSpec::Nats(Box::new(t))).map_err(|_| SinkSpecError(s.into(), String::new()))
            }
            _ => Err(SinkSpecError(s.into(), String::new())),
        }
    }
}

/// A webhook's (or an OTLP sink's) own options, given after its URL
/// (`webhook:URL,concurrency=8,max_batch_bytes=65536`); `None`: the default
/// ([`crate::sink::webhook::WebhookConfig::new`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WebhookOptions {
    /// `concurrency=adaptive|N`: requests in flight ([`Concurrency`]).
    pub concurrency: Option<Concurrency>,
    /// `max_batch=N`: events per batch at most (≥ 1).
    pub max_batch: Option<usize>,
    /// `max_batch_bytes=N`: bytes per batch at most (≥ 1).
    pub max_batch_bytes: Option<usize>,
}

impl WebhookOptions {
    /// Whether no option is given.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Takes `key=value` when `key` is one of the options; `None` when it is not one of them,
    /// `Some(Err)` when its value is not valid.
    fn set(&mut self, key: &str, value: &str) -> Option<Result<(), ()>> {
        let count = |v: &str| v.parse::<usize>().ok().filter(|n| *n > 0).ok_or(());
        Some(match key {
            "concurrency" => value.parse().map(|c| self.concurrency = Some(c)).map_err(|_| ()),
            "max_batch" => count(value).map(|n| self.max_batch = Some(n)),
            "max_batch_bytes" => count(value).map(|n| self.max_batch_bytes = Some(n)),
            _ => return None,
        })
    }
}

/// As given: `,concurrency=…,max_batch=…,max_batch_bytes=…` for those set.
impl std::fmt::Display for WebhookOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(c) = self.concurrency {
            write!(f, ",concurrency={c}")?;
        }
        if let Some(n) = self.max_batch {
            write!(f, ",max_batch={n}")?;
        }
        if let Some(n) = self.max_batch_bytes {
            write!(f, ",max_batch_bytes={n}")?;
        }
        Ok(())
    }
}

/// A sink as a tenant names it: where its calls go, optionally its own delivery mode
/// (`SPEC[,delivery=MODE]`, e.g. `webhook:https://hooks.example/e,delivery=at-most-once`), and
/// for a webhook its options ([`WebhookOptions`]), as `--sink` and the config's `sinks` take it.
/// The `,key=value` options follow the spec in any order. Without a mode the sink follows the
/// run's `--delivery`.
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
    /// A webhook's or OTLP sink's options (always empty for other sinks).
    pub webhook: WebhookOptions,
}

impl From<SinkSpec> for SinkEntry {
    fn from(spec: SinkSpec) -> Self {
        Self { spec, delivery: None, webhook: WebhookOptions::default() }
    }
}

impl std::fmt::Display for SinkEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.spec, self.webhook)?;
        if let Some(mode) = self.delivery {
            let mode = clap::ValueEnum::to_possible_value(&mode).expect("no mode is skipped");
            write!(f, ",delivery={}", mode.get_name())?;
        }
        Ok(())
    }
}

impl std::str::FromStr for SinkEntry {
    type Err = SinkSpecError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // The error shows the spec redacted and the option that is wrong as given.
        let error = |head: &str, option: &str| SinkSpecError(head.into(), format!(",{option}"));
        let mut rest = s;
        let mut delivery = None;
        let mut webhook = WebhookOptions::default();
        let mut max_series = None;
        // Options are taken from the end while they are `key=value` with a known key, so a URL
        // whose query holds commas keeps them.
        while let Some((head, option)) = rest.rsplit_once(',') {
            let Some((key, value)) = option.split_once('=') else { break };
            if key == "delivery" {
                let mode =
                    <DeliveryMode as clap::ValueEnum>::from_str(value, false).map_err(|_| error(head, option))?;
                delivery = Some(mode);
            } else if key == "max_series" {
                let n = value.parse::<usize>().ok().filter(|n| *n > 0).ok_or_else(|| error(head, option))?;
                max_series = Some(n);
            } else {
                match webhook.set(key, value) {
                    None => break,
                    Some(Ok(())) => {}
                    Some(Err(())) => return Err(error(head, option)),
                }
            }
            rest = head;
        }
        let mut spec: SinkSpec = rest.parse()?;
        if !webhook.is_empty() && !matches!(spec, SinkSpec::Webhook(_) | SinkSpec::Otlp(_)) {
            return Err(SinkSpecError(rest.into(), webhook.to_string()));
        }
        if let Some(n) = max_series {
            match &mut spec {
                SinkSpec::Metrics { max_series } => *max_series = Some(n),
                _ => return Err(SinkSpecError(rest.into(), format!(",max_series={n}"))),
            }
        }
        Ok(Self { spec, delivery, webhook })
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

    #[test]
    fn a_webhook_entry_takes_its_options_in_any_order() {
        let e: SinkEntry =
            "webhook:http://h/x?a=1,b=2,max_batch_bytes=65536,delivery=wait,concurrency=8".parse().unwrap();
        assert_eq!(e.spec, SinkSpec::Webhook("http://h/x?a=1,b=2".into()), "an unknown key stays in the URL");
        assert_eq!(e.delivery, Some(DeliveryMode::Wait));
        assert_eq!(
            e.webhook,
            WebhookOptions { concurrency: Some(Concurrency::Fixed(8)), max_batch: None, max_batch_bytes: Some(65536) }
        );
        assert_eq!(
            e.to_string(),
            "webhook:http://h/x?a=1,b=2,concurrency=8,max_batch_bytes=65536,delivery=wait",
            "options in a fixed order; parameters that are not secrets shown as given"
        );
        let adaptive: SinkEntry = "webhook:https://h/e,concurrency=adaptive,max_batch=50".parse().unwrap();
        assert_eq!((adaptive.webhook.concurrency, adaptive.webhook.max_batch), (Some(Concurrency::Adaptive), Some(50)));
        let otlp: SinkEntry = "otlp:http://c:4318,max_batch=100,delivery=at-most-once".parse().unwrap();
        assert_eq!(otlp.spec, SinkSpec::Otlp("http://c:4318".into()));
        assert_eq!((otlp.webhook.max_batch, otlp.delivery), (Some(100), Some(DeliveryMode::AtMostOnce)));
        let metrics: SinkEntry = "metrics,max_series=50".parse().unwrap();
        assert_eq!(metrics.spec, SinkSpec::Metrics { max_series: Some(50) });
        assert_eq!(metrics.to_string(), "metrics,max_series=50");
        assert_eq!("metrics".parse::<SinkSpec>().unwrap(), SinkSpec::Metrics { max_series: None });
        for bad in [
            "webhook:http://h/e,concurrency=0",
            "webhook:http://h/e,max_batch=x",
            "jsonl:-,concurrency=4",
            "metrics,max_series=0",
            "jsonl:-,max_series=5",
            "metrics,max_batch=5",
            "otlp:grpc://c:4317",
        ] {
            assert!(bad.parse::<SinkEntry>().is_err(), "{bad}");
        }
    }
}
