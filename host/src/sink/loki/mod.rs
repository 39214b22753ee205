//! The Loki sink (`--sink loki:http(s)://HOST:PORT[,labels=F;F…][,format=json|protobuf]
//! [,structured_metadata=true]`): every sink call (create, patch) becomes one log entry pushed
//! to Loki's push API, `POST /loki/api/v1/push` (added to a URL without a path), as Loki 2.x and
//! 3.x take it:
//!
//! - `format=json` (default): `Content-Type: application/json`,
//!   `{"streams":[{"stream":{LABEL:VALUE…},"values":[["<ns>","<line>"(,{METADATA})]…]}]}`;
//! - `format=protobuf`: `Content-Type: application/x-protobuf`, a `logproto.PushRequest`
//!   ([`push`]) compressed with snappy's block format, as Promtail sends.
//!
//! A stream per label set: the labels are the event fields `labels=` names ([`LabelField`];
//! by default [`DEFAULT_LABELS`]: `namespace`, `kind`, `reason`, `type` and, with enrichment,
//! `cluster`, all of few values, as Loki wants labels), a field with no value left out, and `job="eventpipe"` when none has one
//! (Loki refuses a stream without labels). The line is the event as JSON (as the JSON-lines sink
//! writes it); the entry's time is `lastTimestamp`, else `eventTime`, else the creation time (the
//! OTLP sink's choice), else the time of the call, in ns. With `structured_metadata=true` the
//! fields of many values ride along as structured metadata (Loki 2.9+): `event_name`,
//! `event_uid`, `object_name`, `object_uid`, `count`.
//!
//! # Order
//! Loki before 2.4 (and later ones with `unordered_writes: false`) refuses an entry older than
//! the last one of its stream ("entry out of order"). So the sink keeps each **stream's** writes
//! in call order, not only each object's: the delivery's order key ([`LokiPush::order_key`]) is
//! the label set, and a write whose stream has a batch in flight waits for it; within a push a
//! stream's entries are sorted by time (stably). Entries of one stream in later pushes can still
//! be older than earlier ones when events arrive late (a `lastTimestamp` older than one already
//! sent): Loki 2.4+ takes them within its window (`max_chunk_age / 2`, 1 h by default), older
//! servers answer `400` and those entries are dropped (counted as failed), as Promtail's are. The
//! labels must be fields an event object keeps across its writes (all of the defaults are), so
//! that an object's writes stay in one stream and in order.
//!
//! # Answers
//! `2xx` acknowledges the push; `429` and `5xx` are retried (after `Retry-After`), as Promtail
//! does; any other status (`400`: out of order, too old, a line too long, a rate limit per
//! stream) fails the batch for good.
//!
//! # Credentials
//! From the environment, never the command line ([`super::endpoint`]): `LOKI_USERNAME` and
//! `LOKI_PASSWORD` (Basic, Grafana Cloud's user id and token), or `LOKI_BEARER_TOKEN`, each also
//! as `*_FILE`; `LOKI_TENANT_ID` is sent as `X-Scope-OrgID` (multi-tenant Loki). `ca_file=PATH`
//! trusts that CA bundle for `https` instead of the system's roots.

pub mod encoding;
pub mod push;

use std::path::PathBuf;
use std::sync::Arc;

pub use encoding::LokiPush;
use hyper::header::{HeaderName, HeaderValue};

use super::endpoint::{self, CredentialError, Env};
use super::webhook::WebhookConfig;
use crate::event::Event;

/// The push API's path, added to a URL that has none.
pub const PUSH_PATH: &str = "/loki/api/v1/push";

/// The labels when `labels=` is not given: few values each, as Loki's label best practices ask.
pub const DEFAULT_LABELS: [LabelField; 5] =
    [LabelField::Namespace, LabelField::Kind, LabelField::Reason, LabelField::Type, LabelField::Cluster];

/// The label set when no configured field has a value.
pub const FALLBACK_LABEL: (&str, &str) = ("job", "eventpipe");

/// An event field a Loki label takes its value from; the label is named as the field is here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LabelField {
    /// `namespace`: `involvedObject.namespace`.
    Namespace,
    /// `kind`: `involvedObject.kind`.
    Kind,
    /// `name`: `involvedObject.name` (many values: better as structured metadata).
    Name,
    /// `reason`.
    Reason,
    /// `type` (`Normal`, `Warning`).
    Type,
    /// `action`.
    Action,
    /// `component`: `source.component`, else `reportingComponent`.
    Component,
    /// `host`: `source.host`, else `reportingInstance`.
    Host,
    /// `cluster`: the enrichment's cluster name (`[enrich] cluster`, `--cluster-name`).
    Cluster,
}

impl LabelField {
    /// Every field, in the order [`Self::name`]s are listed in errors.
    pub const ALL: [LabelField; 9] = [
        LabelField::Namespace,
        LabelField::Kind,
        LabelField::Name,
        LabelField::Reason,
        LabelField::Type,
        LabelField::Action,
        LabelField::Component,
        LabelField::Host,
        LabelField::Cluster,
    ];

    /// The label's (and option's) name.
    pub fn name(self) -> &'static str {
        match self {
            LabelField::Namespace => "namespace",
            LabelField::Kind => "kind",
            LabelField::Name => "name",
            LabelField::Reason => "reason",
            LabelField::Type => "type",
            LabelField::Action => "action",
            LabelField::Component => "component",
            LabelField::Host => "host",
            LabelField::Cluster => "cluster",
        }
    }

    /// The field's value in `event` (empty: none).
    pub fn value(self, event: &Event) -> &str {
        match self {
            LabelField::Namespace => &event.involved_object.namespace,
            LabelField::Kind => &event.involved_object.kind,
            LabelField::Name => &event.involved_object.name,
            LabelField::Reason => &event.reason,
            LabelField::Type => &event.type_,
            LabelField::Action => &event.action,
            LabelField::Component if event.source.component.is_empty() => &event.reporting_component,
            LabelField::Component => &event.source.component,
            LabelField::Host if event.source.host.is_empty() => &event.reporting_instance,
            LabelField::Host => &event.source.host,
            LabelField::Cluster => event.enrichment.get().and_then(|e| e.cluster.as_deref()).unwrap_or_default(),
        }
    }
}

/// The push's encoding (`format=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LokiFormat {
    /// `json`: `application/json`.
    #[default]
    Json,
    /// `protobuf`: a snappy-compressed `PushRequest`, `application/x-protobuf`.
    Protobuf,
}

/// A `loki:` sink's own options, after its URL.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LokiOptions {
    /// `labels=F;F…`: the label fields; `None`: [`DEFAULT_LABELS`].
    pub labels: Option<Vec<LabelField>>,
    /// `format=json|protobuf`.
    pub format: LokiFormat,
    /// `structured_metadata=true|false`: event and object names and uids, and the count, as
    /// structured metadata.
    pub structured_metadata: bool,
    /// `ca_file=PATH`: the CA bundle trusted for `https`.
    pub ca_file: Option<PathBuf>,
}

/// The option names of a `loki:` sink.
pub const OPTIONS: [&str; 4] = ["labels", "format", "structured_metadata", "ca_file"];

/// `true` / `false` of an option.
pub(crate) fn flag(value: &str) -> Result<bool, String> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(format!("expected true or false, not `{value}`")),
    }
}

impl LokiOptions {
    /// Takes `key=value` when `key` is one of [`OPTIONS`]: `None` when it is not, `Some(Err)`
    /// with what is wrong when the value is not valid.
    pub fn set(&mut self, key: &str, value: &str) -> Option<Result<(), String>> {
        Some(match key {
            "labels" => value
                .split(';')
                .map(|name| {
                    LabelField::ALL.into_iter().find(|f| f.name() == name).ok_or_else(|| {
                        let names: Vec<&str> = LabelField::ALL.iter().map(|f| f.name()).collect();
                        format!("unknown label field `{name}` (known: {})", names.join(", "))
                    })
                })
                .collect::<Result<Vec<_>, _>>()
                .map(|fields| self.labels = Some(fields)),
            "format" => match value {
                "json" => {
                    self.format = LokiFormat::Json;
                    Ok(())
                }
                "protobuf" => {
                    self.format = LokiFormat::Protobuf;
                    Ok(())
                }
                _ => Err(format!("expected json or protobuf, not `{value}`")),
            },
            "structured_metadata" => flag(value).map(|on| self.structured_metadata = on),
            "ca_file" if !value.is_empty() => {
                self.ca_file = Some(value.into());
                Ok(())
            }
            "ca_file" => Err("expected a file".into()),
            _ => return None,
        })
    }

    /// The label fields in use.
    pub fn label_fields(&self) -> Vec<LabelField> {
        self.labels.clone().unwrap_or_else(|| DEFAULT_LABELS.to_vec())
    }
}

/// As given: `,labels=…,format=…,structured_metadata=true,ca_file=…` for those set.
impl std::fmt::Display for LokiOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(labels) = &self.labels {
            let names: Vec<&str> = labels.iter().map(|l| l.name()).collect();
            write!(f, ",labels={}", names.join(";"))?;
        }
        if self.format == LokiFormat::Protobuf {
            f.write_str(",format=protobuf")?;
        }
        if self.structured_metadata {
            f.write_str(",structured_metadata=true")?;
        }
        if let Some(path) = &self.ca_file {
            write!(f, ",ca_file={}", path.display())?;
        }
        Ok(())
    }
}

/// A webhook configuration that pushes to Loki at `url` ([`PUSH_PATH`] added when it has no
/// path), named `name`, with the credentials of `env` (see the [module docs](self)); tune it as a
/// webhook's and build it with [`super::webhook::WebhookSink::new`].
///
/// # Errors
/// [`CredentialError`] when a credential file or the CA file cannot be read.
pub fn config(
    name: impl Into<String>,
    url: &str,
    options: &LokiOptions,
    env: Env<'_>,
) -> Result<WebhookConfig, CredentialError> {
    let users = ("LOKI_USERNAME", "LOKI_PASSWORD");
    let mut headers: Vec<(HeaderName, HeaderValue)> =
        endpoint::token_or_user_password(env, "Bearer", "LOKI_BEARER_TOKEN", users)?.into_iter().collect();
    if let Some(tenant) = endpoint::secret(env, "LOKI_TENANT_ID")? {
        let value = HeaderValue::from_str(&tenant).map_err(|_| CredentialError::Header("LOKI_TENANT_ID".into()))?;
        headers.push((HeaderName::from_static("x-scope-orgid"), value));
    }
    let encoding = Arc::new(LokiPush::new(options.label_fields(), options.format, options.structured_metadata));
    endpoint::store_config(name, url, PUSH_PATH, encoding, headers, options.ca_file.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_parsed_and_shown_as_given() {
        let mut options = LokiOptions::default();
        assert_eq!(options.set("labels", "namespace;reason;host"), Some(Ok(())));
        assert_eq!(options.set("format", "protobuf"), Some(Ok(())));
        assert_eq!(options.set("structured_metadata", "true"), Some(Ok(())));
        assert_eq!(options.to_string(), ",labels=namespace;reason;host,format=protobuf,structured_metadata=true");
        assert_eq!(options.label_fields(), [LabelField::Namespace, LabelField::Reason, LabelField::Host]);
        assert!(options.set("labels", "namespace;uid").unwrap().unwrap_err().contains("unknown label field `uid`"));
        assert!(options.set("format", "xml").unwrap().is_err());
        assert_eq!(options.set("index", "x"), None);
        assert_eq!(LokiOptions::default().label_fields(), DEFAULT_LABELS);
    }

    #[test]
    fn credentials_come_from_the_environment() {
        let env = |name: &str| match name {
            "LOKI_USERNAME" => Some("1234".to_string()),
            "LOKI_PASSWORD" => Some("glc_token".to_string()),
            "LOKI_TENANT_ID" => Some("team-a".to_string()),
            _ => None,
        };
        let config = config("loki", "http://loki:3100", &LokiOptions::default(), &env).unwrap();
        assert_eq!(config.url, "http://loki:3100/loki/api/v1/push");
        assert_eq!(config.headers[0], (hyper::header::AUTHORIZATION, endpoint::basic("1234", "glc_token")));
        assert_eq!(config.headers[1].1, "team-a");
        let bearer = |name: &str| (name == "LOKI_BEARER_TOKEN").then(|| "t0k".to_string());
        let with_token = super::config("loki", "http://loki:3100/", &LokiOptions::default(), &bearer).unwrap();
        assert_eq!(with_token.headers[0].1, "Bearer t0k");
    }
}
