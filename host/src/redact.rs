//! [`RedactedUrl`]: a URL (or a `KIND:URL` target such as `webhook:https://…`) that may hold
//! credentials, shown only with them redacted.
//!
//! Sink and source targets are given on the command line and in the config, and shown in
//! errors, `validate` messages, logs, metric labels and summaries. They all format the target
//! through this type, whose `Display` and `Debug` replace
//! - the user information, whole (`user:password@` → `REDACTED@`: a user name alone is often a
//!   token, as in `nats://TOKEN@host`);
//! - the value of every query (and fragment) parameter whose key looks like a secret: it
//!   contains `token`, `password`, `passwd`, `pwd`, `secret`, `key`, `sig`, `auth`,
//!   `credential` or `sess` (as in `PHPSESSID`), in any case (`?token=abc&x=1` → `?token=REDACTED&x=1`).
//!
//! The full text is only reachable through [`RedactedUrl::expose`], for the code that connects.

use std::fmt;

/// What stands for a redacted secret.
pub const REDACTED: &str = "REDACTED";

/// Substrings of a query parameter's key (lowercased) that mark its value as secret.
const SECRET_KEYS: [&str; 10] =
    ["token", "password", "passwd", "pwd", "secret", "key", "sig", "auth", "credential", "sess"];

/// A URL or `KIND:URL` target holding credentials; see the module documentation.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RedactedUrl(String);

impl RedactedUrl {
    /// Wraps `url` (any text: it need not parse as a URL).
    pub fn new(url: impl Into<String>) -> Self {
        Self(url.into())
    }

    /// The text as given, secrets included: for connecting and for telling two targets apart.
    /// Never log or show it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<&str> for RedactedUrl {
    fn from(url: &str) -> Self {
        Self::new(url)
    }
}

impl From<String> for RedactedUrl {
    fn from(url: String) -> Self {
        Self::new(url)
    }
}

impl fmt::Display for RedactedUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact(&self.0))
    }
}

impl fmt::Debug for RedactedUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RedactedUrl({:?})", redact(&self.0))
    }
}

fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    SECRET_KEYS.iter().any(|s| key.contains(s))
}

/// `text` with its user information and secret parameters' values redacted.
fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    // After `scheme://`, or for text without one (`KIND:user:pw@host`) after `KIND:`.
    let head_end = match text.find("://") {
        Some(at) => at + 3,
        None => text.find(':').filter(|&at| text.find('@').is_some_and(|a| at < a)).map_or(0, |at| at + 1),
    };
    let (head, rest) = text.split_at(head_end);
    out.push_str(head);
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, rest) = rest.split_at(end);
    match authority.rsplit_once('@') {
        Some((_, host)) => out.extend([REDACTED, "@", host]),
        None => out.push_str(authority),
    }
    // The path as it is, then `?query` and `#fragment` parameter by parameter.
    let end = rest.find(['?', '#']).unwrap_or(rest.len());
    let (path, mut rest) = rest.split_at(end);
    out.push_str(path);
    while let Some(separator) = rest.chars().next() {
        out.push(separator);
        rest = &rest[1..];
        let end = rest.find(['&', '#']).unwrap_or(rest.len());
        let (param, tail) = rest.split_at(end);
        match param.split_once('=') {
            Some((key, _)) if is_secret_key(key) => out.extend([key, "=", REDACTED]),
            _ => out.push_str(param),
        }
        rest = tail;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_and_secret_parameters_are_redacted_in_display_and_debug() {
        let url = RedactedUrl::new("webhook:http://alice:S3cr3tPw@h:8443/e/v1?token=TOK&x=1&API_Key=k#access_token=f");
        let shown = "webhook:http://REDACTED@h:8443/e/v1?token=REDACTED&x=1&API_Key=REDACTED#access_token=REDACTED";
        assert_eq!(url.to_string(), shown);
        assert_eq!(format!("{url:?}"), format!("RedactedUrl({shown:?})"));
        assert!(url.expose().contains("S3cr3tPw") && url.expose().contains("token=TOK"));
        for (given, shown) in [
            ("ftp://user:pw@h/x", "ftp://REDACTED@h/x"),
            ("nats://s3cr3t@127.0.0.1:4222", "nats://REDACTED@127.0.0.1:4222"),
            (
                "https://h/e?sig=a%2Fb&password=p&access_token=t&secret=s&se=2030",
                "https://h/e?sig=REDACTED&password=REDACTED&access_token=REDACTED&secret=REDACTED&se=2030",
            ),
            ("http://127.0.0.1:9/x?a=1", "http://127.0.0.1:9/x?a=1"),
            ("jsonl:out.jsonl", "jsonl:out.jsonl"),
            ("kafka:u:p@h?token=t,delivery=x", "kafka:REDACTED@h?token=REDACTED"),
        ] {
            assert_eq!(RedactedUrl::new(given).to_string(), shown, "{given}");
        }
    }
}
