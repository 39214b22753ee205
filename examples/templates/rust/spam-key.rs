//! {{name}}: a spam key function: events with equal keys share one token bucket. This one is
//! client-go's v0.26 `getSpamKey` plus the reason (one bucket per object and reason).
#![cfg_attr(target_arch = "wasm32", no_std)]

use eventpipe_guest::prelude::*;

eventpipe_guest::no_std_runtime!();
eventpipe_guest::export_spam_key!(PerReason);

/// The key function (stateless).
#[derive(Default)]
struct PerReason;

impl SpamKey for PerReason {
    /// What `spam_key` reads: the host sends only these and remembers keys by them, so the
    /// message (left out) may change without costing a call.
    fn key_fields(&self) -> Vec<KeyField> {
        use KeyField::*;
        vec![SourceComponent, SourceHost, Kind, Namespace, Name, Uid, ApiVersion, Reason]
    }

    fn spam_key(&self, event: &EventView<'_>, key: &mut KeyWriter<'_>) {
        defaults::spam_key(event, key); // client-go getSpamKey
        key.push_str(event.reason);
    }
}
