//! Structured logging into the host's `tracing` (WIT interface `eventpipe:plugin/log`).
//!
//! ```
//! use eventpipe_guest::log;
//! log::info("cache warmed", &[("entries", "42")]);
//! ```
//!
//! The host adds the plugin name and, when there is one, the tenant. Off wasm32 (native unit
//! tests) records are discarded and [`enabled`] is `false`.

use alloc::vec::Vec;

#[cfg(target_arch = "wasm32")]
use crate::bindings::plugin::eventpipe::plugin::log as host;
pub use crate::bindings::plugin::eventpipe::plugin::log::{Field, Level};

/// Whether a record at `level` would be emitted: check it before building costly messages.
pub fn enabled(level: Level) -> bool {
    #[cfg(target_arch = "wasm32")]
    {
        host::enabled(level)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = level;
        false
    }
}

/// Emits one record with `(key, value)` fields, in order. Keys should be `snake_case`.
/// Up to 16 fields are passed without allocating.
pub fn log<'a>(level: Level, message: &str, fields: &[(&'a str, &'a str)]) {
    const STACK_FIELDS: usize = 16;
    fn field<'a>(&(key, value): &(&'a str, &'a str)) -> Field<'a> {
        Field { key, value }
    }
    if fields.len() <= STACK_FIELDS {
        let mut buf: [Field<'a>; STACK_FIELDS] = core::array::from_fn(|_| Field { key: "", value: "" });
        for (slot, f) in buf.iter_mut().zip(fields) {
            *slot = field(f);
        }
        log_fields(level, message, &buf[..fields.len()]);
    } else {
        log_fields(level, message, &fields.iter().map(field).collect::<Vec<_>>());
    }
}

/// Emits one record with fields already in the WIT shape.
pub fn log_fields(level: Level, message: &str, fields: &[Field<'_>]) {
    #[cfg(target_arch = "wasm32")]
    host::log(level, message, fields);
    #[cfg(not(target_arch = "wasm32"))]
    let _ = (level, message, fields);
}

/// [`log`] at [`Level::Trace`].
pub fn trace(message: &str, fields: &[(&str, &str)]) {
    log(Level::Trace, message, fields);
}

/// [`log`] at [`Level::Debug`].
pub fn debug(message: &str, fields: &[(&str, &str)]) {
    log(Level::Debug, message, fields);
}

/// [`log`] at [`Level::Info`].
pub fn info(message: &str, fields: &[(&str, &str)]) {
    log(Level::Info, message, fields);
}

/// [`log`] at [`Level::Warn`].
pub fn warn(message: &str, fields: &[(&str, &str)]) {
    log(Level::Warn, message, fields);
}

/// [`log`] at [`Level::Error`].
pub fn error(message: &str, fields: &[(&str, &str)]) {
    log(Level::Error, message, fields);
}

impl Level {
    /// Parses `trace`, `debug`, `info`, `warn`/`warning` or `error` (ASCII case-insensitive),
    /// e.g. from [`crate::config`]; `None` for anything else.
    pub fn parse(s: &str) -> Option<Level> {
        [
            ("trace", Level::Trace),
            ("debug", Level::Debug),
            ("info", Level::Info),
            ("warn", Level::Warn),
            ("warning", Level::Warn),
            ("error", Level::Error),
        ]
        .into_iter()
        .find_map(|(name, level)| s.eq_ignore_ascii_case(name).then_some(level))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse() {
        assert_eq!(Level::parse("INFO"), Some(Level::Info));
        assert_eq!(Level::parse("warning"), Some(Level::Warn));
        assert_eq!(Level::parse("verbose"), None);
    }

    #[test]
    fn native_logging_is_inert() {
        let many: Vec<(&str, &str)> = (0..20).map(|_| ("k", "v")).collect();
        log(Level::Error, "m", &many);
        info("m", &[("a", "b")]);
        assert!(!enabled(Level::Error));
    }
}
