//! The Splunk HTTP Event Collector sink (`--sink splunk:https://HOST:8088
//! [,sourcetype=NAME][,index=NAME][,source=NAME]`): every sink call (create, patch) becomes one
//! HEC event, posted to the JSON event endpoint `POST /services/collector/event` (added to a URL
//! without a path; HEC 1.0, as Splunk Enterprise 8.x / 9.x and Splunk Cloud serve it) with
//! `Authorization: Splunk <token>`.
//!
//! A batch is its events' JSON objects one after the other (HEC reads concatenated objects; the
//! sink puts a newline between them), each
//! `{"time":SECONDS.MILLIS,"host":…,"source":…,"sourcetype":…,"index":…,"event":{…}}`: the event as
//! JSON (as the JSON-lines sink writes it), its time (`lastTimestamp`, else `eventTime`, else
//! the creation time, else the time of the call), `host` the reporting node (`source.host`,
//! else `reportingInstance`; left out when neither is set), `source` (default `eventpipe`),
//! `sourcetype` (default [`DEFAULT_SOURCETYPE`], Splunk Connect for Kubernetes' name for
//! Events) and `index` (left out by default: the token's default index).
//!
//! # Answers
//! HEC answers `{"text":"…","code":N}` ([`HecEvents::error_text`] quotes both, and the
//! `invalid-event-number` when there is one). `429`, `500`, `502`, `503` (code 9, "Server is
//! busy") and `504` are retried (after `Retry-After`); any other status (`400` code 6 "Invalid
//! data format", `401` / `403` codes 2–4, a token that is missing, disabled or wrong, `400`
//! code 7 "Incorrect index") fails the batch for good.
//!
//! # Credentials
//! The HEC token from `SPLUNK_HEC_TOKEN` (or the file `SPLUNK_HEC_TOKEN_FILE` names), never the
//! command line ([`super::endpoint`]); the sink is not built without one. `ca_file=PATH` trusts
//! that CA bundle for `https` (Splunk's own self-signed CA, say) instead of the system's roots.

pub mod encoding;

use std::path::PathBuf;
use std::sync::Arc;

pub use encoding::HecEvents;

use super::endpoint::{self, CredentialError, Env};
use super::webhook::WebhookConfig;

/// The JSON event endpoint's path, added to a URL that has none.
pub const EVENT_PATH: &str = "/services/collector/event";

/// The `sourcetype` when none is given (Splunk Connect for Kubernetes' for Kubernetes Events).
pub const DEFAULT_SOURCETYPE: &str = "kube:events";

/// The `source` when none is given.
pub const DEFAULT_SOURCE: &str = "eventpipe";

/// The variable holding the HEC token (also as `*_FILE`).
pub const TOKEN_ENV: &str = "SPLUNK_HEC_TOKEN";

/// A `splunk:` sink's own options, after its URL.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SplunkOptions {
    /// `sourcetype=NAME`; `None`: [`DEFAULT_SOURCETYPE`].
    pub sourcetype: Option<String>,
    /// `index=NAME`; `None`: the token's default index.
    pub index: Option<String>,
    /// `source=NAME`; `None`: [`DEFAULT_SOURCE`].
    pub source: Option<String>,
    /// `ca_file=PATH`: the CA bundle trusted for `https`.
    pub ca_file: Option<PathBuf>,
}

/// The option names of a `splunk:` sink.
pub const OPTIONS: [&str; 4] = ["sourcetype", "index", "source", "ca_file"];

impl SplunkOptions {
    /// Takes `key=value` when `key` is one of [`OPTIONS`]: `None` when it is not, `Some(Err)`
    /// when the value is empty.
    pub fn set(&mut self, key: &str, value: &str) -> Option<Result<(), String>> {
        let slot = match key {
            "sourcetype" => &mut self.sourcetype,
            "index" => &mut self.index,
            "source" => &mut self.source,
            "ca_file" if !value.is_empty() => {
                self.ca_file = Some(value.into());
                return Some(Ok(()));
            }
            "ca_file" => return Some(Err("expected a file".into())),
            _ => return None,
        };
        if value.is_empty() {
            return Some(Err(format!("expected a {key} name")));
        }
        *slot = Some(value.into());
        Some(Ok(()))
    }
}

/// As given: `,sourcetype=…,index=…,source=…,ca_file=…` for those set.
impl std::fmt::Display for SplunkOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (key, value) in [("sourcetype", &self.sourcetype), ("index", &self.index), ("source", &self.source)] {
            if let Some(value) = value {
                write!(f, ",{key}={value}")?;
            }
        }
        if let Some(path) = &self.ca_file {
            write!(f, ",ca_file={}", path.display())?;
        }
        Ok(())
    }
}

/// A webhook configuration that posts HEC events to `url` ([`EVENT_PATH`] added when it has no
/// path), named `name`, with the token of `env` (see the [module docs](self)); tune it as a
/// webhook's and build it with [`super::webhook::WebhookSink::new`].
///
/// # Errors
/// [`CredentialError::Missing`] without a token; [`CredentialError`] when the token's file or the
/// CA file cannot be read.
pub fn config(
    name: impl Into<String>,
    url: &str,
    options: &SplunkOptions,
    env: Env<'_>,
) -> Result<WebhookConfig, CredentialError> {
    let token = endpoint::secret(env, TOKEN_ENV)?.ok_or_else(|| CredentialError::Missing(TOKEN_ENV.into()))?;
    let headers = vec![endpoint::authorization("Splunk", &token, TOKEN_ENV)?];
    let encoding = Arc::new(HecEvents::new(
        options.sourcetype.clone().unwrap_or_else(|| DEFAULT_SOURCETYPE.into()),
        options.source.clone().unwrap_or_else(|| DEFAULT_SOURCE.into()),
        options.index.clone(),
    ));
    endpoint::store_config(name, url, EVENT_PATH, encoding, headers, options.ca_file.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_required_and_sent_as_splunk_authorization() {
        let none = |_: &str| None;
        let error = config("s", "https://splunk:8088", &SplunkOptions::default(), &none).unwrap_err();
        assert_eq!(error.to_string(), "SPLUNK_HEC_TOKEN (or SPLUNK_HEC_TOKEN_FILE) is not set");
        let env = |name: &str| (name == TOKEN_ENV).then(|| "0b5e6f2a-hec".to_string());
        let config = config("s", "https://splunk:8088", &SplunkOptions::default(), &env).unwrap();
        assert_eq!(config.url, "https://splunk:8088/services/collector/event");
        assert_eq!(config.headers[0].1, "Splunk 0b5e6f2a-hec");
        let mut options = SplunkOptions::default();
        assert_eq!(options.set("index", "k8s"), Some(Ok(())));
        assert_eq!(options.set("sourcetype", "kube:objects:events"), Some(Ok(())));
        assert!(options.set("source", "").unwrap().is_err());
        assert_eq!(options.set("labels", "x"), None);
        assert_eq!(options.to_string(), ",sourcetype=kube:objects:events,index=k8s");
    }
}
