//! Test fixture: a watcher plugin that misbehaves on demand, chosen by an event's reason —
//! `Trap` (an `unreachable` instruction) or `Loop` (never returns); it ignores other events.
#![cfg_attr(target_arch = "wasm32", no_std)]

use eventpipe_guest::prelude::*;

eventpipe_guest::no_std_runtime!();
eventpipe_guest::export_watcher!(Stall);

/// The misbehaving watcher.
#[derive(Default)]
struct Stall;

impl Watcher for Stall {
    fn watch(&self, event: &Event) {
        match event.reason.as_str() {
            "Trap" => trap(),
            "Loop" => loop {
                core::hint::black_box(event);
            },
            _ => {}
        }
    }
}

#[cfg(target_arch = "wasm32")]
fn trap() -> ! {
    core::arch::wasm32::unreachable()
}

#[cfg(not(target_arch = "wasm32"))]
fn trap() -> ! {
    panic!("trap")
}
