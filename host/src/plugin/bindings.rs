//! The one `bindgen!` of eventpipe: the host-side types and import traits of `wit/` (world
//! `host`). Plugin exports are looked up by name per kind (see [`super::PluginKind`]).
#![allow(missing_docs, reason = "generated code; the WIT documents it")]

wasmtime::component::bindgen!({
    path: "../wit",
    world: "host",
});

pub use self::eventpipe::plugin::types::{
    AggregateKeyPair, EncodedRequest, EncoderWrite, EnrichmentField, Event, EventField, EventSeries, EventSource,
    ObjectMeta, ObjectReference, PackedStrings, PatchRequest, SinkError, SinkRequest, Verdict,
};
pub use self::eventpipe::plugin::{config, log, output};
