//! Test fixture: an aggregate-key plugin that misbehaves on demand, chosen by the event's
//! reason — `Trap` (an `unreachable` instruction), `Loop` (never returns), `Hog` (allocates
//! 512 MiB), `Panic` (a Rust panic), `Empty` (an empty aggregate key); any other reason gets
//! client-go's `EventAggregatorByReasonFunc`.
#![cfg_attr(target_arch = "wasm32", no_std)]

use eventpipe_guest::prelude::*;

eventpipe_guest::no_std_runtime!();
eventpipe_guest::export_aggregate_key!(Misbehave);

/// The misbehaving key function.
#[derive(Default)]
struct Misbehave;

impl AggregateKey for Misbehave {
    fn aggregate_key(&self, event: &EventView<'_>, key: &mut KeyWriter<'_>) {
        match event.reason {
            "Trap" => trap(),
            "Loop" => loop {
                core::hint::black_box(&key);
            },
            "Hog" => {
                let hog: Vec<u8> = vec![1; 512 << 20];
                key.push_str(&format!("{}", core::hint::black_box(hog).len()));
            }
            "Panic" => panic!("misbehave panics on purpose for {}", event.involved_object.name),
            "Empty" => {}
            _ => defaults::aggregate_by_reason(event, key),
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
