//! Test fixture: a filter that misbehaves on demand, chosen by the event's reason — `Trap` (a
//! panic, which traps), `Loop` (never returns); it drops `Noise` and keeps any other
//! event.
#![cfg_attr(target_arch = "wasm32", no_std)]

use eventpipe_guest::prelude::*;

eventpipe_guest::no_std_runtime!();
eventpipe_guest::export_filter!(MisbehaveFilter);

/// The misbehaving filter.
#[derive(Default)]
struct MisbehaveFilter;

impl Filter for MisbehaveFilter {
    fn filter(&self, _tenant: &str, event: &Event) -> Verdict {
        match event.reason.as_str() {
            // A Rust panic is a Wasm trap (`unreachable`).
            "Trap" => panic!("misbehave-filter traps on purpose"),
            "Loop" => loop {
                core::hint::black_box(event);
            },
            "Noise" => Verdict::Drop(None),
            _ => Verdict::Keep,
        }
    }
}
