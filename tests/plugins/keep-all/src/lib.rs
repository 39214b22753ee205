//! Test fixture: a filter that keeps every event (a plugin of another world than the key
//! functions, for the wrong-kind checks).
#![cfg_attr(target_arch = "wasm32", no_std)]

use eventpipe_guest::prelude::*;

eventpipe_guest::no_std_runtime!();
eventpipe_guest::export_filter!(KeepAll);

/// Keeps everything.
#[derive(Default)]
struct KeepAll;

impl Filter for KeepAll {
    fn fields(&self) -> Vec<EventField> {
        Vec::new() // reads nothing: the host sends only the number of events
    }

    fn filter(&self, _tenant: &str, _event: &Event) -> Verdict {
        Verdict::Keep
    }
}
