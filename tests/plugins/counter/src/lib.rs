//! Test fixture: an impure message combiner that keeps state. Each answer carries how many
//! messages this instance combined before (`[call:N] message`), so a test sees whether the host
//! called it or answered from its memo. Only correct with `pure = false` in its config.
#![cfg_attr(target_arch = "wasm32", no_std)]

extern crate alloc;

use core::sync::atomic::{AtomicU32, Ordering};

use alloc::format;
use eventpipe_guest::prelude::*;

eventpipe_guest::no_std_runtime!();
eventpipe_guest::export_message_combiner!(Counter);

/// Messages combined by this instance so far.
static CALLS: AtomicU32 = AtomicU32::new(0);

/// Prefixes the message with the number of messages combined before it.
#[derive(Default)]
struct Counter;

impl MessageCombiner for Counter {
    fn combine_message(&self, event: &EventView<'_>, message: &mut KeyWriter<'_>) {
        let n = CALLS.fetch_add(1, Ordering::Relaxed);
        message.push_all(&[&format!("[call:{n}] "), event.message]);
    }
}
