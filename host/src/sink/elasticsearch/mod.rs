//! The Elasticsearch / OpenSearch sink (`--sink elasticsearch:http(s)://HOST:9200
//! [,index=PATTERN|data_stream=NAME][,replace_dots=true]`): every sink call (create, patch)
//! becomes one document, written with the `_bulk` API (`POST /_bulk`, added to a URL without a
//! path; `Content-Type: application/x-ndjson`), as Elasticsearch 7.x / 8.x and OpenSearch 1.x /
//! 2.x take it.
//!
//! - `index=PATTERN` (default [`DEFAULT_INDEX`], `eventpipe-%Y.%m.%d`): an `index` action into
//!   the index the pattern names for the event's time (chrono's `strftime` fields, in UTC), as
//!   Logstash's and Fluent Bit's daily indices;
//! - `data_stream=NAME`: a `create` action into the data stream (data streams take `create`
//!   only); a `409` answer to it means the document is already there (an earlier attempt whose
//!   answer was lost), and counts as written.
//!
//! The document is the event as JSON (as the JSON-lines sink writes it) with `@timestamp`
//! (`lastTimestamp`, else `eventTime`, else the creation time, else the time of the call; RFC
//! 3339), which data streams require. Its `_id` is the event's `metadata.uid` (else
//! `NAMESPACE/NAME`) and its `count` (`UID:COUNT`): each write of an event is its own document,
//! and an attempt sent again overwrites (`index`) or finds (`create`) the one before instead of
//! adding a second.
//!
//! `replace_dots=true` replaces the dots in the document's keys with `_`
//! (`app.kubernetes.io/name` → `app_kubernetes_io/name`), as Fluent Bit's `Replace_Dots`: without
//! it Elasticsearch reads a dotted key as a path of objects, and a label `app` next to a label
//! `app.kubernetes.io/name` is a mapping conflict that refuses the document.
//!
//! # Answers
//! A `2xx` answer names each item's `status` ([`Bulk::accepted`]): items answered `429` or `5xx`
//! are sent again, alone, after the batch's back-off (the others are not repeated); items
//! answered another `4xx` (a mapping error, an invalid index name) fail for good, counted in
//! `eventpipe_sink_failures_total` and logged with Elasticsearch's `type: reason`. A whole answer
//! of `429` or `5xx` is retried (after `Retry-After`), any other fails the batch.
//!
//! # Credentials
//! From the environment, never the command line ([`super::endpoint`]):
//! `ELASTICSEARCH_API_KEY` (sent as `Authorization: ApiKey …`: the `encoded` value Elasticsearch
//! returns when the key is made), or `ELASTICSEARCH_USERNAME` and `ELASTICSEARCH_PASSWORD`
//! (Basic), each also as `*_FILE`. `ca_file=PATH` trusts that CA bundle for `https` (the
//! `http_ca.crt` an Elasticsearch 8 node makes) instead of the system's roots.

pub mod encoding;

use std::path::PathBuf;
use std::sync::Arc;

pub use encoding::Bulk;

use super::endpoint::{self, CredentialError, Env};
use super::webhook::WebhookConfig;

/// The bulk API's path, added to a URL that has none.
pub const BULK_PATH: &str = "/_bulk";

/// The index pattern when neither `index=` nor `data_stream=` is given.
pub const DEFAULT_INDEX: &str = "eventpipe-%Y.%m.%d";

/// Where documents go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `index=PATTERN`: `index` actions into the index the pattern names for the event's time.
    Index(String),
    /// `data_stream=NAME`: `create` actions into the data stream.
    DataStream(String),
}

/// An `elasticsearch:` sink's own options, after its URL.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ElasticsearchOptions {
    /// `index=` or `data_stream=`; `None`: `index=`[`DEFAULT_INDEX`].
    pub target: Option<Target>,
    /// `replace_dots=true|false`: dots in keys replaced with `_`.
    pub replace_dots: bool,
    /// `ca_file=PATH`: the CA bundle trusted for `https`.
    pub ca_file: Option<PathBuf>,
}

/// The option names of an `elasticsearch:` sink.
pub const OPTIONS: [&str; 4] = ["index", "data_stream", "replace_dots", "ca_file"];

/// Checks an index pattern: chrono `strftime` fields that parse.
fn pattern(value: &str) -> Result<String, String> {
    if value.is_empty() {
        return Err("expected an index name or pattern".into());
    }
    chrono::format::StrftimeItems::new(value)
        .parse()
        .map(|_| value.to_string())
        .map_err(|_| format!("`{value}` is not a strftime pattern (%Y, %m, %d, …)"))
}

impl ElasticsearchOptions {
    /// Takes `key=value` when `key` is one of [`OPTIONS`]: `None` when it is not, `Some(Err)`
    /// with what is wrong when the value is not valid (or `index` and `data_stream` are both
    /// given).
    pub fn set(&mut self, key: &str, value: &str) -> Option<Result<(), String>> {
        let both = "index and data_stream are exclusive".to_string();
        Some(match key {
            "index" if self.target.is_some() => Err(both),
            "index" => pattern(value).map(|p| self.target = Some(Target::Index(p))),
            "data_stream" if self.target.is_some() => Err(both),
            "data_stream" if value.is_empty() => Err("expected a data stream name".into()),
            "data_stream" => {
                self.target = Some(Target::DataStream(value.into()));
                Ok(())
            }
            "replace_dots" => super::loki::flag(value).map(|on| self.replace_dots = on),
            "ca_file" if !value.is_empty() => {
                self.ca_file = Some(value.into());
                Ok(())
            }
            "ca_file" => Err("expected a file".into()),
            _ => return None,
        })
    }

    /// Where documents go.
    pub fn target(&self) -> Target {
        self.target.clone().unwrap_or_else(|| Target::Index(DEFAULT_INDEX.into()))
    }
}

/// As given: `,index=…` or `,data_stream=…`, `,replace_dots=true`, `,ca_file=…` for those set.
impl std::fmt::Display for ElasticsearchOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.target {
            Some(Target::Index(p)) => write!(f, ",index={p}")?,
            Some(Target::DataStream(n)) => write!(f, ",data_stream={n}")?,
            None => {}
        }
        if self.replace_dots {
            f.write_str(",replace_dots=true")?;
        }
        if let Some(path) = &self.ca_file {
            write!(f, ",ca_file={}", path.display())?;
        }
        Ok(())
    }
}

/// A webhook configuration that writes to Elasticsearch or OpenSearch at `url` ([`BULK_PATH`]
/// added when it has no path), named `name`, with the credentials of `env` (see the
/// [module docs](self)); tune it as a webhook's and build it with
/// [`super::webhook::WebhookSink::new`].
///
/// # Errors
/// [`CredentialError`] when a credential file or the CA file cannot be read, or only one of a
/// user and password is set.
pub fn config(
    name: impl Into<String>,
    url: &str,
    options: &ElasticsearchOptions,
    env: Env<'_>,
) -> Result<WebhookConfig, CredentialError> {
    let users = ("ELASTICSEARCH_USERNAME", "ELASTICSEARCH_PASSWORD");
    let headers = endpoint::token_or_user_password(env, "ApiKey", "ELASTICSEARCH_API_KEY", users)?;
    let encoding = Arc::new(Bulk::new(options.target(), options.replace_dots));
    endpoint::store_config(name, url, BULK_PATH, encoding, headers.into_iter().collect(), options.ca_file.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_parsed_and_shown_as_given() {
        let mut options = ElasticsearchOptions::default();
        assert_eq!(options.target(), Target::Index(DEFAULT_INDEX.into()));
        assert_eq!(options.set("index", "k8s-events-%Y.%m"), Some(Ok(())));
        assert_eq!(options.set("replace_dots", "true"), Some(Ok(())));
        assert_eq!(options.to_string(), ",index=k8s-events-%Y.%m,replace_dots=true");
        assert!(options.set("data_stream", "logs-k8s-default").unwrap().unwrap_err().contains("exclusive"));
        let mut bad = ElasticsearchOptions::default();
        assert!(bad.set("index", "events-%Q").unwrap().is_err());
        assert!(bad.set("replace_dots", "yes").unwrap().is_err());
        assert_eq!(bad.set("labels", "x"), None);
    }

    #[test]
    fn an_api_key_wins_over_a_user_and_password() {
        let env = |name: &str| match name {
            "ELASTICSEARCH_API_KEY" => Some("VnVhQ2ZHY0JDZGJrUW0tZTVhT3g6dWkybHAyYXhUTm1zeWFrdzl0dk5udw==".to_string()),
            "ELASTICSEARCH_USERNAME" => Some("elastic".to_string()),
            "ELASTICSEARCH_PASSWORD" => Some("changeme".to_string()),
            _ => None,
        };
        let config = config("es", "https://es:9200", &ElasticsearchOptions::default(), &env).unwrap();
        assert_eq!(config.url, "https://es:9200/_bulk");
        assert_eq!(config.headers.len(), 1);
        assert!(config.headers[0].1.to_str().unwrap().starts_with("ApiKey VnVh"));
    }
}
