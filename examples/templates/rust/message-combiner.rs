//! {{name}}: a message combiner, the message of the event that replaces similar events once
//! aggregation triggers. This one is client-go's default with another prefix.
#![cfg_attr(target_arch = "wasm32", no_std)]

use eventpipe_guest::prelude::*;

eventpipe_guest::no_std_runtime!();
eventpipe_guest::export_message_combiner!(Combiner);

/// The combiner (stateless).
#[derive(Default)]
struct Combiner;

impl MessageCombiner for Combiner {
    /// What `combine_message` reads (the host sends only these).
    fn key_fields(&self) -> Vec<KeyField> {
        vec![KeyField::Reason, KeyField::Message]
    }

    fn combine_message(&self, event: &EventView<'_>, message: &mut KeyWriter<'_>) {
        message.push_all(&["(similar ", event.reason, " events): ", event.message]);
    }
}
