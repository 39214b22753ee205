//! `--sink` values and the config's `sinks` entries: where sink calls go, as `KIND:TARGET` text.

use std::path::PathBuf;

use super::concurrency::Concurrency;
use super::elasticsearch::ElasticsearchOptions;
use super::loki::LokiOptions;
use super::splunk::SplunkOptions;
use crate::delivery::DeliveryMode;
use crate::redact::RedactedUrl;

/// Where sink calls go: `jsonl:PATH`, `jsonl:-` (stdout), `plugin:NAME` / `plugin:FILE.wasm`
/// (a sink plugin, embedded or from a file, writing to stdout), `k8s` / `k8s:NAMESPACE` (the
/// Kubernetes Events API; with a namespace, events of other namespaces are refused as client-go's
/// namespaced sink does), `webhook:URL`, `otlp:URL` (OTLP/HTTP log records), the log stores
/// `loki:URL`, `elasticsearch:URL` and `splunk:URL`, or `metrics` (counters on `/metrics`).
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
    /// Loki's push API (`loki:http://HOST:3100[,labels=…,format=…]`, [`crate::sink::loki`]).
    Loki {
        /// The URL, shown redacted.
        url: RedactedUrl,
        /// The sink's own options.
        options: LokiOptions,
    },
    /// Elasticsearch's or OpenSearch's `_bulk` API
    /// (`elasticsearch:http://HOST:9200[,index=…|data_stream=…]`, [`crate::sink::elasticsearch`]).
    Elasticsearch {
        /// The URL, shown redacted.
        url: RedactedUrl,
        /// The sink's own options.
        options: ElasticsearchOptions,
    },
    /// Splunk's HTTP Event Collector (`splunk:https://HOST:8088[,sourcetype=…,index=…]`,
    /// [`crate::sink::splunk`]).
    Splunk {
        /// The URL, shown redacted.
        url: RedactedUrl,
        /// The sink's own options.
        options: SplunkOptions,
    },
    /// Event metrics: each call counted by tenant, type, involved object namespace and kind,
    /// and reason on `/metrics` (`metrics[,max_series=N][,workload=true][,cluster=true]`,
    /// [`crate::sink::event_metrics`]).
    Metrics {
        /// `max_series=N`: the series cap (≥ 1); `None`: the default (1000).
        max_series: Option<usize>,
        /// The enrichment's labels counted too ([`crate::sink::event_metrics::EnrichmentLabels`]).
        labels: crate::sink::event_metrics::EnrichmentLabels,
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
            SinkSpec::Loki { url, options } => write!(f, "loki:{url}{options}"),
            SinkSpec::Elasticsearch { url, options } => write!(f, "elasticsearch:{url}{options}"),
            SinkSpec::Splunk { url, options } => write!(f, "splunk:{url}{options}"),
            SinkSpec::Metrics { max_series, labels } => {
                f.write_str("metrics")?;
                if let Some(n) = max_series {
                    write!(f, ",max_series={n}")?;
                }
                if labels.workload {
                    f.write_str(",workload=true")?;
                }
                if labels.cluster {
                    f.write_str(",cluster=true")?;
                }
                Ok(())
            }
            SinkSpec::Nats(target) => target.fmt(f),
        }
    }
}

impl SinkSpec {
    /// Whether the sink is the webhook's batching HTTP sink ([`crate::sink::webhook`]): a
    /// webhook, OTLP or a log store; these take [`WebhookOptions`].
    pub fn is_batching(&self) -> bool {
        matches!(
            self,
            SinkSpec::Webhook(_)
                | SinkSpec::Otlp(_)
                | SinkSpec::Loki { .. }
                | SinkSpec::Elasticsearch { .. }
                | SinkSpec::Splunk { .. }
        )
    }

    /// The URL of a sink that posts to one (webhook, OTLP, log stores).
    pub fn http_url(&self) -> Option<&RedactedUrl> {
        match self {
            SinkSpec::Webhook(url)
            | SinkSpec::Otlp(url)
            | SinkSpec::Loki { url, .. }
            | SinkSpec::Elasticsearch { url, .. }
            | SinkSpec::Splunk { url, .. } => Some(url),
            _ => None,
        }
    }

    /// The spec as written, secrets included: what tells two sinks apart. Never log it.
    pub fn identity(&self) -> String {
        match self {
            SinkSpec::Webhook(url) => format!("webhook:{}", url.expose()),
            SinkSpec::Otlp(url) => format!("otlp:{}", url.expose()),
            SinkSpec::Loki { url, options } => format!("loki:{}{options}", url.expose()),
            SinkSpec::Elasticsearch { url, options } => format!("elasticsearch:{}{options}", url.expose()),
            SinkSpec::Splunk { url, options } => format!("splunk:{}{options}", url.expose()),
            SinkSpec::Nats(target) => format!("nats:{}", target.url.expose()),
            other => other.to_string(),
        }
    }
}

/// The sink forms, for errors.
const FORMS: &str = "expected a sink: jsonl:PATH, jsonl:-, k8s, k8s:NAMESPACE, plugin:NAME, plugin:FILE.wasm, webhook:URL, \
     otlp:URL, loki:URL, elasticsearch:URL, splunk:URL, metrics or nats:nats://HOST:PORT[?…], optionally followed by \
     ,delivery=at-most-once|wait|at-least-once (and, for a webhook, otlp or log store, ,concurrency=adaptive|N ,max_batch=N \
     ,max_batch_bytes=N ,timeout=SECONDS; for a webhook, ,template=FILE|,preset=slack|teams|discord|google-chat|pagerduty|opsgenie|,encoder=NAME \
     ,batch=true (with template=) ,secret_env=VAR|,secret_file=PATH ,resolve_on=TYPE; for loki ,labels=F;F… ,format=json|protobuf \
     ,structured_metadata=true; for elasticsearch ,index=PATTERN|data_stream=NAME ,replace_dots=true; for splunk \
     ,sourcetype=NAME ,index=NAME ,source=NAME; for a log store ,ca_file=PATH; for metrics, ,max_series=N ,workload=true ,cluster=true)";

/// The sink kinds (what comes before the first `:`), for suggestions.
const KINDS: [&str; 10] =
    ["jsonl", "k8s", "plugin", "webhook", "otlp", "loki", "elasticsearch", "splunk", "metrics", "nats"];

/// A `--sink` value (or a config `sinks` entry) that is not one of the sink forms, with what is
/// wrong and, where one is close, what was probably meant. The value is shown redacted: it may
/// hold a URL with credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("\"{value}\": {problem}")]
pub struct SinkSpecError {
    value: RedactedUrl,
    problem: String,
}

impl SinkSpecError {
    fn new(value: &str, problem: impl Into<String>) -> Self {
        Self { value: value.into(), problem: problem.into() }
    }

    /// Not a sink form: the forms, and the closest kind when the kind looks mistyped.
    fn not_a_sink(value: &str) -> Self {
        let kind = value.split([':', ',']).next().unwrap_or_default();
        let problem = match kind {
            "http" | "https" => {
                format!("a URL alone (did you mean webhook:{} or otlp:…?); {FORMS}", RedactedUrl::new(value))
            }
            _ => match crate::suggest::closest(kind, KINDS) {
                Some(known) if known != kind => {
                    format!("unknown sink kind `{kind}` (did you mean `{known}:`?); {FORMS}")
                }
                _ => FORMS.to_string(),
            },
        };
        Self::new(value, problem)
    }
}

/// Checks the URL of a `webhook:` or `otlp:` sink: an absolute `http://` or `https://` URL with a
/// host and a port of at most 65535 (parsed by the `url` crate). A mistyped scheme separator
/// (`http//h`, `http:/h`) is answered with the URL as probably meant, redacted.
fn http_url(url: &str) -> Result<(), String> {
    let problem = match url::Url::parse(url) {
        // The parser takes `http:h` and `http:/h` for `http://h`: a typo, refused.
        Ok(_) if !(url.starts_with("http://") || url.starts_with("https://")) => {
            "expected an http:// or https:// URL".into()
        }
        Ok(parsed) if !matches!(parsed.scheme(), "http" | "https") => {
            format!("expected an http:// or https:// URL, not {}://", parsed.scheme())
        }
        Ok(parsed) if parsed.host_str().is_none_or(str::is_empty) => "the URL has no host".into(),
        Ok(_) => return Ok(()),
        Err(e) => format!("not a URL: {e}"),
    };
    // `http//h`, `http:/h`, `https:h`: the scheme is there, its `://` is not.
    let meant = ["https", "http"].into_iter().find(|scheme| url.starts_with(scheme)).and_then(|scheme| {
        let meant = format!("{scheme}://{}", url[scheme.len()..].trim_start_matches([':', '/']));
        (meant != url && url::Url::parse(&meant).is_ok_and(|u| u.host_str().is_some())).then_some(meant)
    });
    Err(match meant {
        Some(meant) => format!("{problem}; did you mean {}?", RedactedUrl::new(meant)),
        None => problem,
    })
}

/// Checks a `k8s:NAMESPACE` namespace: a DNS-1123 label, as the API server requires.
fn namespace(ns: &str) -> Result<(), String> {
    let ok = ns.len() <= 63
        && ns.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !ns.starts_with('-')
        && !ns.ends_with('-');
    if ok { Ok(()) } else { Err(format!("namespace `{ns}`: expected a DNS label (a-z 0-9 -, at most 63)")) }
}

impl std::str::FromStr for SinkSpec {
    type Err = SinkSpecError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let fail = |problem: String| SinkSpecError::new(s, problem);
        match s.split_once(':') {
            _ if s == "k8s" => Ok(SinkSpec::Kubernetes(String::new())),
            Some(("k8s", ns)) if !ns.is_empty() => {
                namespace(ns).map(|()| SinkSpec::Kubernetes(ns.into())).map_err(fail)
            }
            Some(("jsonl", "-")) => Ok(SinkSpec::JsonLinesStdout),
            Some(("jsonl", path)) if !path.is_empty() => Ok(SinkSpec::JsonLinesFile(path.into())),
            Some(("plugin", name)) if !name.is_empty() => Ok(SinkSpec::Plugin(name.into())),
            Some(("webhook", url)) => http_url(url).map(|()| SinkSpec::Webhook(RedactedUrl::new(url))).map_err(fail),
            Some(("otlp", url)) => http_url(url).map(|()| SinkSpec::Otlp(RedactedUrl::new(url))).map_err(fail),
            Some(("loki", url)) => http_url(url)
                .map(|()| SinkSpec::Loki { url: RedactedUrl::new(url), options: LokiOptions::default() })
                .map_err(fail),
            Some(("elasticsearch", url)) => http_url(url)
                .map(|()| SinkSpec::Elasticsearch {
                    url: RedactedUrl::new(url),
                    options: ElasticsearchOptions::default(),
                })
                .map_err(fail),
            Some(("splunk", url)) => http_url(url)
                .map(|()| SinkSpec::Splunk { url: RedactedUrl::new(url), options: SplunkOptions::default() })
                .map_err(fail),
            None if s == "metrics" => Ok(SinkSpec::Metrics { max_series: None, labels: Default::default() }),
            Some(("nats", target)) => target
                .parse()
                .map(|t| SinkSpec::Nats(Box::new(t)))
                .map_err(|e: crate::nats::NatsTargetError| fail(e.to_string())),
            _ => Err(SinkSpecError::not_a_sink(s)),
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
    /// `timeout=SECONDS`: time allowed per request, answer included (> 0, at most a day; the
    /// default 10 s, [`crate::sink::webhook::DEFAULT_REQUEST_TIMEOUT`]).
    pub timeout: Option<std::time::Duration>,
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
            "timeout" => value
                .parse::<f64>()
                .ok()
                .filter(|s| *s > 0.0 && *s <= 86_400.0)
                .map(|s| self.timeout = Some(std::time::Duration::from_secs_f64(s)))
                .ok_or(()),
            _ => return None,
        })
    }
}

/// As given: `,concurrency=…,max_batch=…,max_batch_bytes=…,timeout=…` for those set.
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
        if let Some(t) = self.timeout {
            write!(f, ",timeout={}", t.as_secs_f64())?;
        }
        Ok(())
    }
}

/// A sink as a tenant names it: where its calls go, optionally its own delivery mode
/// (`SPEC[,delivery=MODE]`, e.g. `webhook:https://hooks.example/e,delivery=at-most-once`), and
/// for a webhook its options ([`WebhookOptions`]), as `--sink` and the config's `sinks` take it.
/// The `,key=value` options follow the spec in any order; an unknown option, or one the sink
/// does not take, is an error (with the option probably meant), never part of the spec before
/// it, so a comma of a URL is written `%2C`. Without a mode the sink follows the run's
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
    /// A webhook's or OTLP sink's options (always empty for other sinks).
    pub webhook: WebhookOptions,
    /// A webhook's body template and its secret ([`super::template`]).
    pub body: super::template::BodyOptions,
}

impl From<SinkSpec> for SinkEntry {
    fn from(spec: SinkSpec) -> Self {
        Self { spec, delivery: None, webhook: WebhookOptions::default(), body: Default::default() }
    }
}

impl std::fmt::Display for SinkEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}{}", self.spec, self.webhook, self.body)?;
        if let Some(mode) = self.delivery {
            let mode = clap::ValueEnum::to_possible_value(&mode).expect("no mode is skipped");
            write!(f, ",delivery={}", mode.get_name())?;
        }
        Ok(())
    }
}

/// The options every sink takes.
const COMMON_OPTIONS: [&str; 1] = ["delivery"];
/// The options of webhook and OTLP sinks, besides [`COMMON_OPTIONS`].
const WEBHOOK_OPTIONS: [&str; 4] = ["concurrency", "max_batch", "max_batch_bytes", "timeout"];
/// The options of the metrics sink, besides [`COMMON_OPTIONS`].
const METRICS_OPTIONS: [&str; 3] = ["max_series", "workload", "cluster"];
/// The log stores' own options, besides [`COMMON_OPTIONS`] and [`WEBHOOK_OPTIONS`]: Loki's,
/// Elasticsearch's and Splunk's ([`crate::sink::loki::OPTIONS`] and the others).
const LOG_STORE_OPTIONS: [&str; 9] = [
    "labels",
    "format",
    "structured_metadata",
    "ca_file",
    "index",
    "data_stream",
    "replace_dots",
    "sourcetype",
    "source",
];

/// `text` as a `,key=value` option: `key` is a lowercase name (`a-z`, `0-9`, `_`, starting with a
/// letter). A URL's own `,a=b` then reads as an option: a comma in a URL is written `%2C`.
fn option(text: &str) -> Option<(&str, &str)> {
    let (key, value) = text.split_once('=')?;
    let mut chars = key.chars();
    (chars.next()?.is_ascii_lowercase() && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
        .then_some((key, value))
}

impl std::str::FromStr for SinkEntry {
    type Err = SinkSpecError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // The error shows the value redacted, and of an option its key only.
        let invalid = |key: &str| SinkSpecError::new(s, format!("invalid value of option `{key}`; {FORMS}"));
        let mut rest = s;
        let mut delivery = None;
        let mut webhook = WebhookOptions::default();
        let mut body = super::template::BodyOptions::default();
        let mut max_series = None;
        let mut metric_labels = crate::sink::event_metrics::EnrichmentLabels::default();
        let mut given = Vec::new();
        // A log store's own options, taken once the spec is known.
        let mut own_options = Vec::new();
        // Options are taken from the end while they are `key=value`.
        while let Some((head, text)) = rest.rsplit_once(',') {
            let Some((key, value)) = option(text) else { break };
            if key == "delivery" {
                delivery = Some(<DeliveryMode as clap::ValueEnum>::from_str(value, false).map_err(|_| invalid(key))?);
            } else if key == "max_series" {
                max_series = Some(value.parse::<usize>().ok().filter(|n| *n > 0).ok_or_else(|| invalid(key))?);
            } else if key == "workload" || key == "cluster" {
                let on = value.parse::<bool>().map_err(|_| invalid(key))?;
                *(if key == "workload" { &mut metric_labels.workload } else { &mut metric_labels.cluster }) = on;
            } else if let Some(set) = body.set(key, value) {
                set.map_err(|problem| SinkSpecError::new(s, problem))?;
            } else {
                match webhook.set(key, value) {
                    None if LOG_STORE_OPTIONS.contains(&key) => {
                        own_options.push((key, value));
                        rest = head;
                        continue;
                    }
                    None => {
                        let known = COMMON_OPTIONS
                            .iter()
                            .chain(&WEBHOOK_OPTIONS)
                            .chain(&METRICS_OPTIONS)
                            .chain(&super::template::OPTIONS)
                            .chain(&LOG_STORE_OPTIONS);
                        let hint = match crate::suggest::closest(key, known.copied()) {
                            Some(meant) => format!("did you mean `{meant}`?"),
                            None => "a comma in a URL is written %2C".into(),
                        };
                        return Err(SinkSpecError::new(s, format!("unknown option `{key}` ({hint}); {FORMS}")));
                    }
                    Some(Ok(())) => {}
                    Some(Err(())) => return Err(invalid(key)),
                }
            }
            given.push(key);
            rest = head;
        }
        let mut spec: SinkSpec = rest.parse()?;
        // Taken in the order written (they were collected from the end).
        for (key, value) in own_options.into_iter().rev() {
            let taken = match &mut spec {
                SinkSpec::Loki { options, .. } => options.set(key, value),
                SinkSpec::Elasticsearch { options, .. } => options.set(key, value),
                SinkSpec::Splunk { options, .. } => options.set(key, value),
                _ => None,
            };
            match taken {
                Some(Ok(())) => {}
                Some(Err(problem)) => return Err(SinkSpecError::new(s, format!("option `{key}`: {problem}"))),
                None => given.push(key),
            }
        }
        let own: Vec<&str> = match spec {
            SinkSpec::Webhook(_) => [&WEBHOOK_OPTIONS[..], &super::template::OPTIONS].concat(),
            SinkSpec::Otlp(_) => WEBHOOK_OPTIONS.to_vec(),
            SinkSpec::Loki { .. } => [&WEBHOOK_OPTIONS[..], &super::loki::OPTIONS].concat(),
            SinkSpec::Elasticsearch { .. } => [&WEBHOOK_OPTIONS[..], &super::elasticsearch::OPTIONS].concat(),
            SinkSpec::Splunk { .. } => [&WEBHOOK_OPTIONS[..], &super::splunk::OPTIONS].concat(),
            SinkSpec::Metrics { .. } => METRICS_OPTIONS.to_vec(),
            _ => Vec::new(),
        };
        if let Some(key) = given.iter().find(|k| !COMMON_OPTIONS.contains(k) && !own.contains(k)) {
            let kind = rest.split([':', ',']).next().unwrap_or_default();
            let takes = COMMON_OPTIONS.iter().chain(&own).copied().collect::<Vec<_>>().join(", ");
            return Err(SinkSpecError::new(s, format!("a {kind} sink has no option `{key}` (it takes {takes})")));
        }
        if let SinkSpec::Metrics { max_series: cap, labels } = &mut spec {
            *cap = max_series.or(*cap);
            *labels = metric_labels;
        }
        body.check().map_err(|problem| SinkSpecError::new(s, problem))?;
        if body.source.is_none() && !body.is_empty() {
            return Err(SinkSpecError::new(s, "secret_env, secret_file and resolve_on go with template= or preset="));
        }
        Ok(Self { spec, delivery, webhook, body })
    }
}

/// `--sink` values are parsed without clap's "invalid value '…'" message, which would show the
/// value as given, credentials included ([`crate::redact::RedactingParser`]).
impl clap::builder::ValueParserFactory for SinkEntry {
    type Parser = crate::redact::RedactingParser<SinkEntry>;
    fn value_parser() -> Self::Parser {
        crate::redact::RedactingParser::new()
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
            "webhook:http://h/x?a=1%2Cb=2,max_batch_bytes=65536,delivery=wait,concurrency=8".parse().unwrap();
        assert_eq!(e.spec, SinkSpec::Webhook("http://h/x?a=1%2Cb=2".into()), "a comma in the URL is %2C");
        assert_eq!(e.delivery, Some(DeliveryMode::Wait));
        assert_eq!(
            e.webhook,
            WebhookOptions {
                concurrency: Some(Concurrency::Fixed(8)),
                max_batch: None,
                max_batch_bytes: Some(65536),
                timeout: None
            }
        );
        assert_eq!(
            e.to_string(),
            "webhook:http://h/x?a=1%2Cb=2,concurrency=8,max_batch_bytes=65536,delivery=wait",
            "options in a fixed order; parameters that are not secrets shown as given"
        );
        let timed: SinkEntry = "webhook:http://h/x,timeout=2.5".parse().unwrap();
        assert_eq!(timed.webhook.timeout, Some(std::time::Duration::from_millis(2500)));
        assert_eq!(timed.to_string(), "webhook:http://h/x,timeout=2.5");
        for refused in ["0", "-1", "nan", "1e9", "soon"] {
            assert!(format!("webhook:http://h/x,timeout={refused}").parse::<SinkEntry>().is_err(), "timeout={refused}");
        }
        let adaptive: SinkEntry = "webhook:https://h/e,concurrency=adaptive,max_batch=50".parse().unwrap();
        assert_eq!((adaptive.webhook.concurrency, adaptive.webhook.max_batch), (Some(Concurrency::Adaptive), Some(50)));
        let otlp: SinkEntry = "otlp:http://c:4318,max_batch=100,delivery=at-most-once".parse().unwrap();
        assert_eq!(otlp.spec, SinkSpec::Otlp("http://c:4318".into()));
        assert_eq!((otlp.webhook.max_batch, otlp.delivery), (Some(100), Some(DeliveryMode::AtMostOnce)));
        let metrics: SinkEntry = "metrics,max_series=50".parse().unwrap();
        assert_eq!(metrics.spec, SinkSpec::Metrics { max_series: Some(50), labels: Default::default() });
        let labelled: SinkEntry = "metrics,workload=true,cluster=true,max_series=9".parse().unwrap();
        assert_eq!(labelled.to_string(), "metrics,max_series=9,workload=true,cluster=true");
        assert!("metrics,workload=yes".parse::<SinkEntry>().is_err());
        assert!("jsonl:-,workload=true".parse::<SinkEntry>().is_err(), "a metrics sink's option only");
        assert_eq!(metrics.to_string(), "metrics,max_series=50");
        assert_eq!(
            "metrics".parse::<SinkSpec>().unwrap(),
            SinkSpec::Metrics { max_series: None, labels: Default::default() }
        );
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

    #[test]
    fn a_log_store_entry_takes_its_own_options_and_the_webhooks() {
        use crate::sink::elasticsearch::Target;
        use crate::sink::loki::{LabelField, LokiFormat};
        let text = "loki:http://l:3100,labels=namespace;reason,format=protobuf,max_batch=500";
        let e: SinkEntry = text.parse().unwrap();
        let SinkSpec::Loki { url, options } = &e.spec else { panic!("{e:?}") };
        assert_eq!(url.expose(), "http://l:3100");
        assert_eq!(
            (options.format, options.label_fields()),
            (LokiFormat::Protobuf, vec![LabelField::Namespace, LabelField::Reason])
        );
        assert_eq!(e.webhook.max_batch, Some(500));
        assert_eq!(e.to_string(), text);
        assert_eq!(e.to_string().parse::<SinkEntry>().unwrap(), e, "what is shown reads back");
        let es: SinkEntry =
            "elasticsearch:https://es:9200,data_stream=logs-k8s-default,replace_dots=true".parse().unwrap();
        let SinkSpec::Elasticsearch { options, .. } = &es.spec else { panic!("{es:?}") };
        assert_eq!((options.target(), options.replace_dots), (Target::DataStream("logs-k8s-default".into()), true));
        let splunk: SinkEntry = "splunk:https://s:8088,sourcetype=kube:events,index=k8s,delivery=wait".parse().unwrap();
        assert_eq!(splunk.to_string(), "splunk:https://s:8088,sourcetype=kube:events,index=k8s,delivery=wait");
        let err = |text: &str| text.parse::<SinkEntry>().unwrap_err().to_string();
        for (bad, says) in [
            ("loki:http://l:3100,index=x", "a loki sink has no option `index`"),
            ("elasticsearch:http://e:9200,index=a,data_stream=b", "index and data_stream are exclusive"),
            ("elasticsearch:http://e:9200,index=ev-%Q", "not a strftime pattern"),
            ("loki:http://l:3100,labels=uid", "unknown label field `uid`"),
            ("loki:http://l:3100,formt=json", "did you mean `format`?"),
            ("jsonl:-,labels=namespace", "a jsonl sink has no option `labels`"),
            ("splunk:ftp://s", "expected an http:// or https:// URL"),
            ("lokki:http://l:3100", "did you mean `loki:`?"),
        ] {
            let message = err(bad);
            assert!(message.contains(says), "{bad}: {message}");
        }
    }

    #[test]
    fn typos_are_refused_with_what_was_probably_meant() {
        let err = |text: &str| text.parse::<SinkEntry>().unwrap_err().to_string();
        for (typo, says) in [
            // An unknown option is not folded into the URL, path or name before it.
            ("webhook:http://h/e,max_bach=5", "unknown option `max_bach` (did you mean `max_batch`?)"),
            ("otlp:http://c:4318,concurency=4", "did you mean `concurrency`?"),
            ("jsonl:out.jsonl,delivry=wait", "did you mean `delivery`?"),
            ("k8s:default,max_series=3", "a k8s sink has no option `max_series`"),
            ("metrics,max_serie=3", "did you mean `max_series`?"),
            ("nats:nats://h:4222?stream=S,max_batch=3", "a nats sink has no option `max_batch`"),
            ("plugin:stdout,x=1", "unknown option `x` (a comma in a URL is written %2C)"),
            ("webhook:http://h/x?a=1,b=2", "unknown option `b`"),
            // URLs and ports.
            ("otlp:http://c:99999", "invalid port number"),
            ("webhook:https://h:65536/e", "not a URL: invalid port number"),
            ("webhook:http//h/e", "did you mean http://h/e?"),
            ("webhook:http:h/e", "did you mean http://h/e?"),
            ("webhook:https:/h/e", "did you mean https://h/e?"),
            ("webhook:ftp://h/e", "expected an http:// or https:// URL"),
            ("nats:nats://h:70000", "not a server URL"),
            ("k8s:Not_A_Namespace", "expected a DNS label"),
            // Kinds.
            ("webhok:http://h/e", "unknown sink kind `webhok` (did you mean `webhook:`?)"),
            ("jsnol:-", "did you mean `jsonl:`?"),
            ("http://h/e", "did you mean webhook:http://h/e or otlp:…?"),
        ] {
            let message = err(typo);
            assert!(message.contains(says), "{typo}: {message}");
        }
        assert!("webhook:http://h:65535/e".parse::<SinkEntry>().is_ok());
        assert!(!err("webhook:https://h:65536/e").contains("did you mean"), "nothing else was meant");
    }
}
