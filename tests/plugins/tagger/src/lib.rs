//! Test fixture for hot reload: a message combiner that prefixes each message with the tag
//! compiled into it (`[tag:NNN] message`). Tests make new versions of the component by
//! rewriting the three digits of [`TAG`] in the `.wasm` bytes, so every version's output shows
//! which version produced it.
#![cfg_attr(target_arch = "wasm32", no_std)]

use eventpipe_guest::prelude::*;

eventpipe_guest::no_std_runtime!();
eventpipe_guest::export_message_combiner!(Tagger);

/// The marker the tests look for in the component bytes; the last three characters are the
/// version.
static TAG: &str = "eventpipe-test-tag:000";

/// Prefixes the message with the version.
#[derive(Default)]
struct Tagger;

impl MessageCombiner for Tagger {
    fn combine_message(&self, event: &EventView<'_>, message: &mut KeyWriter<'_>) {
        let tag = core::hint::black_box(TAG);
        message.push_all(&["[tag:", &tag[tag.len() - 3..], "] ", event.message]);
    }
}
