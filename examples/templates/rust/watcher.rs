//! {{name}}: a watcher sees every event before correlation. This one logs each Warning
//! through the host's `log` import.
#![cfg_attr(target_arch = "wasm32", no_std)]

use eventpipe_guest::prelude::*;

eventpipe_guest::no_std_runtime!();
eventpipe_guest::export_watcher!(Warnings);

/// The watcher (stateless).
#[derive(Default)]
struct Warnings;

impl Watcher for Warnings {
    fn watch(&self, event: &Event) {
        if event.type_ == "Warning" && log::enabled(log::Level::Info) {
            let o = &event.involved_object;
            let object = format!("{}/{}", o.namespace, o.name);
            log::info(&event.message, &[("reason", &event.reason), ("object", &object)]);
        }
    }
}
