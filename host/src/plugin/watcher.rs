//! A `watcher` plugin: one `watch-batch` call per batch of broadcast events.
//!
//! A watcher cannot change or stop events, so a failed call (trap, fuel, memory) only costs its
//! own work: it is counted and returned to the caller as an error naming plugin and event.

use super::bindings as wit;
use super::call::{CallCost, Caller};
use super::convert::{describe, to_wit};
use super::{PluginCallError, PluginHandle, PluginKind};
use super::{WrongKind, check_kind};
use crate::event::Event;

type WatchBatch = Caller<(Vec<wit::Event>,), ()>;

/// A `watcher` plugin as one user holds it.
pub struct WasmWatcher {
    call: WatchBatch,
}

impl WasmWatcher {
    /// Wraps `handle` (a `watcher` plugin).
    ///
    /// # Errors
    /// [`WrongKind`] for a plugin of another kind.
    pub fn new(handle: PluginHandle) -> Result<Self, WrongKind> {
        check_kind(&handle, PluginKind::Watcher)?;
        Ok(Self { call: Caller::new(handle, PluginKind::Watcher.batch_export(), None) })
    }

    /// The plugin as used here (name, tenant, counters).
    pub fn handle(&self) -> &PluginHandle {
        self.call.handle()
    }

    /// Hands `events` to the plugin in one call; returns the call's fuel and peak memory.
    ///
    /// # Errors
    /// [`PluginCallError`] naming plugin, kind, tenant and the batch's first event when the call
    /// fails (trap, fuel, memory limit); the instance is replaced for the next call.
    pub fn watch(&self, events: &[&Event]) -> Result<CallCost, PluginCallError> {
        if events.is_empty() {
            return Ok(CallCost::default());
        }
        let batch = events.iter().map(|e| to_wit(e)).collect();
        self.call.call((batch,), events.len()).map(|((), cost)| cost).map_err(|failure| {
            self.call.error(format!("{} (first of a batch of {})", describe(events[0]), events.len()), failure)
        })
    }
}
