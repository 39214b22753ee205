//! [`RedactedUrl`]: a URL (or a `KIND:URL` target such as `webhook:https://…`) that may hold
//! credentials, shown only with them redacted; and [`RedactingParser`], the command-line parser
//! of values that may hold one.
//!
//! Sink and source targets are given on the command line and in the config, and shown in
//! errors, `validate` messages, `config show`, logs, metric labels and summaries. They all
//! format the target through this type, whose `Display` and `Debug` replace
//! - the user information, whole (`user:password@` → `REDACTED@`: a user name alone is often a
//!   token, as in `nats://TOKEN@host`), also in text that does not parse as a URL
//!   (`http//user:pw@host`, `kind:user:pw@host`): whatever stands between a `//` (else the
//!   `KIND:` prefix, else the start) and the last `@` after it;
//! - the value of every query (and fragment) parameter whose key looks like a secret: it
//!   contains `pass` (`password`, `passwd`), `pwd`, `token`, `jwt`, `secret`, `key`, `sig`
//!   (`signature`), `auth`, `credential` or `sess` (as in `PHPSESSID`), in any case
//!   (`?token=abc&x=1` → `?token=REDACTED&x=1`).
//!
//! The full text is only reachable through [`RedactedUrl::expose`], for the code that connects.
//!
//! # Divergence
//! The redaction works on the text, not on a parsed URL: it must hold for text that does not
//! parse, and it shows the rest as written (a URL parser would normalise it).

use std::fmt;
use std::marker::PhantomData;

/// What stands for a redacted secret.
pub const REDACTED: &str = "REDACTED";

/// Substrings of a query parameter's key (lowercased) that mark its value as secret.
pub const SECRET_KEYS: [&str; 10] =
    ["pass", "pwd", "token", "jwt", "secret", "key", "sig", "auth", "credential", "sess"];

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

/// Whether a parameter named `key` holds a secret ([`SECRET_KEYS`]).
pub fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    SECRET_KEYS.iter().any(|s| key.contains(s))
}

/// Where the user information of `text` may start: after each `//`, else after a `KIND:`
/// prefix (letters, digits, `+ - .`), else at 0.
fn authority_starts(text: &str) -> Vec<usize> {
    let starts: Vec<usize> = text.match_indices("//").map(|(at, _)| at + 2).collect();
    if !starts.is_empty() {
        return starts;
    }
    let kind = text
        .find(':')
        .filter(|&at| at > 0 && text[..at].chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)));
    vec![kind.map_or(0, |at| at + 1)]
}

/// `text` with its user information and secret parameters' values redacted.
fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let starts = authority_starts(text);
    out.push_str(&text[..starts[0]]);
    for (i, &start) in starts.iter().enumerate() {
        if i > 0 {
            out.push_str("//");
        }
        // Up to the next `//` (the next server of a list), the user information ends at the last `@`.
        let end = starts.get(i + 1).map_or(text.len(), |next| next - 2);
        let part = &text[start..end];
        let rest = match part.rfind('@') {
            Some(at) => {
                out.extend([REDACTED, "@"]);
                &part[at + 1..]
            }
            None => part,
        };
        redact_parameters(rest, &mut out);
    }
    out
}

/// Appends `rest` (host, path, `?query`, `#fragment`) with the secret parameters' values
/// redacted.
fn redact_parameters(rest: &str, out: &mut String) {
    let end = rest.find(['?', '#']).unwrap_or(rest.len());
    let (path, mut rest) = rest.split_at(end);
    out.push_str(path);
    while let Some(separator) = rest.chars().next() {
        out.push(separator);
        rest = &rest[1..];
        let end = rest.find(['&', '#', ';']).unwrap_or(rest.len());
        let (param, tail) = rest.split_at(end);
        match param.split_once('=') {
            Some((key, _)) if is_secret_key(key) => out.extend([key, "=", REDACTED]),
            _ => out.push_str(param),
        }
        rest = tail;
    }
}

/// The command-line parser of a value that may hold a URL with credentials (`--sink`,
/// `--source`): on an error it names the flag and gives `T`'s own error, which shows the value
/// redacted, instead of clap's `invalid value '…'`, which would echo it as given.
pub struct RedactingParser<T>(PhantomData<fn() -> T>);

impl<T> RedactingParser<T> {
    /// The parser of `T` values.
    pub const fn new() -> Self {
        Self(PhantomData)
    }
}

impl<T> Default for RedactingParser<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Clone for RedactingParser<T> {
    fn clone(&self) -> Self {
        Self::new()
    }
}

impl<T> clap::builder::TypedValueParser for RedactingParser<T>
where
    T: std::str::FromStr + Clone + Send + Sync + 'static,
    T::Err: fmt::Display,
{
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<T, clap::Error> {
        let flag = arg.map_or_else(|| "the value".to_string(), |a| format!("--{}", a.get_id()));
        let fail = |message: String| {
            clap::Error::raw(clap::error::ErrorKind::ValueValidation, format!("invalid value for {flag}: {message}\n"))
                .with_cmd(cmd)
        };
        let text = value.to_str().ok_or_else(|| fail("not UTF-8".into()))?;
        text.parse().map_err(|e: T::Err| fail(e.to_string()))
    }
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
            // Text that does not parse as a URL.
            ("webhook:http//a:pw@h/e", "webhook:http//REDACTED@h/e"),
            ("http:/a:pw@h", "http:REDACTED@h"),
            ("webhok:https://a:p/w#x@h/e", "webhok:https://REDACTED@h/e"),
            ("nats://u:p@a:4222,nats://TOKEN@b:4222", "nats://REDACTED@a:4222,nats://REDACTED@b:4222"),
            (
                "http://h//e?pass=p&jwt=j&Signature=s;x=1",
                "http://h//e?pass=REDACTED&jwt=REDACTED&Signature=REDACTED;x=1",
            ),
        ] {
            assert_eq!(RedactedUrl::new(given).to_string(), shown, "{given}");
        }
    }
}
