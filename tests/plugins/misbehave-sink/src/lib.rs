//! Test fixture: a sink that misbehaves on demand, chosen by the event's reason — `Permanent`
//! (a `permanent` error), `Retryable` (a `retryable` error), `Garbage` (no result for the
//! request), `Trap` (a panic, which traps); any other event is stored and echoed back.
#![cfg_attr(target_arch = "wasm32", no_std)]

use eventpipe_guest::prelude::*;

eventpipe_guest::no_std_runtime!();
eventpipe_guest::export_sink!(MisbehaveSink);

/// The misbehaving sink.
#[derive(Default)]
struct MisbehaveSink;

impl Sink for MisbehaveSink {
    fn deliver(&self, _tenant: &str, request: SinkRequest) -> Result<Event, SinkError> {
        let event = request.into_event();
        match event.reason.as_str() {
            "Permanent" => Err(SinkError::Permanent("misbehave-sink refuses this for good".into())),
            "Retryable" => Err(SinkError::Retryable("misbehave-sink: try again later".into())),
            // A Rust panic is a Wasm trap (`unreachable`).
            "Trap" => panic!("misbehave-sink traps on purpose"),
            _ => Ok(event),
        }
    }

    fn deliver_batch(&self, tenant: &str, requests: Vec<SinkRequest>) -> Vec<Result<Event, SinkError>> {
        if requests.iter().any(|r| r.event().reason == "Garbage") {
            return Vec::new();
        }
        requests.into_iter().map(|r| self.deliver(tenant, r)).collect()
    }
}
