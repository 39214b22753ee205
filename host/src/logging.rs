//! Logging setup: the `tracing` subscriber in human (`pretty`) or machine (`json`) form, to
//! stderr, filtered by `RUST_LOG` (default `warn`).

use std::str::FromStr;

use tracing_subscriber::EnvFilter;

/// Level filter used when `RUST_LOG` is unset or invalid.
pub const DEFAULT_FILTER: &str = "warn";

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event: time, level, target, message, fields.
    #[default]
    Pretty,
    /// One JSON object per line: `{"timestamp":…,"level":"INFO","fields":{"message":…,…},"target":…,"span":…,"spans":[…]}`
    /// (tracing-subscriber's JSON format), for log collectors.
    Json,
}

/// Why logging could not be set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoggingError {
    /// `--log-format` is neither `pretty` nor `json`.
    #[error("unknown log format {0:?}: expected pretty or json")]
    UnknownFormat(String),
    /// A global subscriber is already installed.
    #[error("a tracing subscriber is already installed: {0}")]
    AlreadySet(String),
}

impl FromStr for LogFormat {
    type Err = LoggingError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "pretty" => Ok(LogFormat::Pretty),
            "json" => Ok(LogFormat::Json),
            other => Err(LoggingError::UnknownFormat(other.into())),
        }
    }
}

impl std::fmt::Display for LogFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LogFormat::Pretty => "pretty",
            LogFormat::Json => "json",
        })
    }
}

/// The filter from `RUST_LOG`, else [`DEFAULT_FILTER`].
fn filter() -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER))
}

/// Installs the global subscriber writing `format` to stderr, filtered by `RUST_LOG` (default
/// `warn`), with colours only when stderr is a terminal. Replaces `main.rs`'s `init_logging()`: `try_init_logging(args.log_format)`.
///
/// # Errors
/// [`LoggingError::AlreadySet`] when a global subscriber is already installed.
pub fn try_init_logging(format: LogFormat) -> Result<(), LoggingError> {
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter())
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Pretty => builder.try_init(),
        LogFormat::Json => builder.json().with_current_span(true).with_span_list(true).try_init(),
    }
    .map_err(|e| LoggingError::AlreadySet(e.to_string()))
}

/// A subscriber writing `format` to `writer` (filtered by `RUST_LOG`, no colours), not installed: for
/// tests and for `tracing::subscriber::with_default`.
pub fn subscriber<W>(format: LogFormat, writer: W) -> Box<dyn tracing::Subscriber + Send + Sync>
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt().with_env_filter(filter()).with_writer(writer).with_ansi(false);
    match format {
        LogFormat::Pretty => Box::new(builder.finish()),
        LogFormat::Json => Box::new(builder.json().with_current_span(true).with_span_list(true).finish()),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'w> tracing_subscriber::fmt::MakeWriter<'w> for Buf {
        type Writer = Buf;
        fn make_writer(&'w self) -> Buf {
            self.clone()
        }
    }

    #[test]
    fn parses_formats() {
        assert_eq!("pretty".parse::<LogFormat>(), Ok(LogFormat::Pretty));
        assert_eq!("json".parse::<LogFormat>(), Ok(LogFormat::Json));
        assert_eq!("yaml".parse::<LogFormat>(), Err(LoggingError::UnknownFormat("yaml".into())));
        assert_eq!(LogFormat::Json.to_string(), "json");
    }

    #[test]
    fn json_lines_carry_level_message_and_fields() {
        let buf = Buf::default();
        tracing::subscriber::with_default(subscriber(LogFormat::Json, buf.clone()), || {
            tracing::warn!(tenant = "payments", count = 3, "sink slow");
        });
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let line: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(line["level"], "WARN");
        assert_eq!(line["fields"]["message"], "sink slow");
        assert_eq!(line["fields"]["tenant"], "payments");
        assert_eq!(line["fields"]["count"], 3);
    }

    #[test]
    fn pretty_lines_are_text() {
        let buf = Buf::default();
        tracing::subscriber::with_default(subscriber(LogFormat::Pretty, buf.clone()), || {
            tracing::error!(tenant = "payments", "sink down");
        });
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert!(text.contains("ERROR") && text.contains("sink down") && text.contains("tenant=\"payments\""), "{text}");
        assert!(serde_json::from_str::<serde_json::Value>(text.trim()).is_err());
    }
}
