//! `log`: a watcher that logs each event through the host's logging, as client-go's
//! `StartStructuredLogging`: message `Event occurred`, fields `object` (`namespace/name`, or
//! `name` for cluster-scoped objects), `field_path`, `kind`, `api_version`, `type`, `reason`,
//! `message`.
//!
//! Config: `level` = `trace` | `debug` | `info` (default) | `warn` | `error`. When the host
//! would not emit that level, events are skipped without formatting anything.
#![cfg_attr(target_arch = "wasm32", no_std)]

use eventpipe_guest::log::Level;
use eventpipe_guest::prelude::*;

eventpipe_guest::no_std_runtime!();
eventpipe_guest::export_watcher!(EventLog);

/// The watcher: the level it logs at.
#[derive(Debug)]
pub struct EventLog {
    level: Level,
}

impl Default for EventLog {
    fn default() -> Self {
        let level = match config::get("level") {
            None => Level::Info,
            Some(name) => Level::parse(&name).unwrap_or_else(|| {
                log::warn(
                    "unknown log level in config; using info",
                    &[("level", &name)],
                );
                Level::Info
            }),
        };
        Self { level }
    }
}

impl Watcher for EventLog {
    fn watch(&self, event: &Event) {
        self.watch_batch(core::slice::from_ref(event));
    }

    fn watch_batch(&self, events: &[Event]) {
        if !log::enabled(self.level) {
            return;
        }
        for e in events {
            let io = &e.involved_object;
            let object = if io.namespace.is_empty() {
                io.name.clone()
            } else {
                format!("{}/{}", io.namespace, io.name)
            };
            log::log(
                self.level,
                "Event occurred",
                &[
                    ("object", &object),
                    ("field_path", &io.field_path),
                    ("kind", &io.kind),
                    ("api_version", &io.api_version),
                    ("type", &e.type_),
                    ("reason", &e.reason),
                    ("message", &e.message),
                ],
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_to_info_and_tolerates_any_event() {
        let w = EventLog::default();
        assert_eq!(w.level, Level::Info);
        w.watch(&Event::default());
        w.watch_batch(&[Event::default(), Event::default()]);
    }
}
