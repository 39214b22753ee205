//! The default plugins, built from `plugins/` by the build script and carried in the binary.
//! Together they reproduce client-go's EventCorrelator exactly.

/// `by-reason`: client-go `EventAggregatorByReasonFunc`.
pub const BY_REASON: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/by-reason.wasm"));
/// `similar-events`: client-go `EventAggregatorByReasonMessageFunc`.
pub const SIMILAR_EVENTS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/similar-events.wasm"));
/// `source-object`: client-go (v0.26) `getSpamKey`.
pub const SOURCE_OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/source-object.wasm"));
/// `jsonl`: a sink writing each create / patch as a JSON line.
pub const JSONL: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/jsonl.wasm"));
/// `log`: a watcher logging every event.
pub const LOG: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/log.wasm"));

/// Every embedded plugin as `(name, component bytes)`.
pub const ALL: [(&str, &[u8]); 5] = [
    ("by-reason", BY_REASON),
    ("similar-events", SIMILAR_EVENTS),
    ("source-object", SOURCE_OBJECT),
    ("jsonl", JSONL),
    ("log", LOG),
];
