//! The default plugins, built from `plugins/` by the build script and carried in the binary.
//! Together they reproduce client-go's EventCorrelator exactly.

use std::sync::Arc;

use super::functions::{WasmAggregateKeyFunc, WasmMessageFunc, WasmSpamKeyFunc};
use super::{Plugin, PluginError, PluginRuntime, PluginSettings};
use crate::correlator::CorrelatorOptions;

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

/// The three correlator plugins, loaded.
#[derive(Debug, Clone)]
pub struct CorrelatorPlugins {
    /// The aggregate-key plugin.
    pub aggregate_key: Arc<Plugin>,
    /// The message combiner.
    pub message_combiner: Arc<Plugin>,
    /// The spam-key plugin.
    pub spam_key: Arc<Plugin>,
}

impl CorrelatorPlugins {
    /// Compiles the embedded `by-reason`, `similar-events` and `source-object` with `settings`.
    ///
    /// # Errors
    /// [`PluginError`] if an embedded component fails to load (a broken build).
    pub fn defaults(runtime: &PluginRuntime, settings: &PluginSettings) -> Result<Self, PluginError> {
        Ok(Self {
            aggregate_key: runtime.load("by-reason", BY_REASON, settings.clone())?,
            message_combiner: runtime.load("similar-events", SIMILAR_EVENTS, settings.clone())?,
            spam_key: runtime.load("source-object", SOURCE_OBJECT, settings.clone())?,
        })
    }

    /// `options` with these plugins as its key, message and spam-key functions, for `tenant`.
    ///
    /// # Errors
    /// [`super::functions::WrongKind`] when a plugin is not of the kind its slot needs.
    pub fn apply(
        &self,
        options: CorrelatorOptions,
        tenant: &str,
    ) -> Result<CorrelatorOptions, super::functions::WrongKind> {
        Ok(CorrelatorOptions {
            key_func: Some(Arc::new(WasmAggregateKeyFunc::new(self.aggregate_key.clone(), tenant)?)),
            message_func: Some(Arc::new(WasmMessageFunc::new(self.message_combiner.clone(), tenant)?)),
            spam_key_func: Some(Arc::new(WasmSpamKeyFunc::new(self.spam_key.clone(), tenant)?)),
            ..options
        })
    }
}
