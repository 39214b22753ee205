//! A `filter` plugin before correlation: one `filter-batch` call per batch of a tenant's
//! events, keep or drop (with a reason) per event.
//!
//! A failed call (trap, fuel, memory, wrong number of verdicts) keeps the batch's events under
//! the `builtin` policy (the built-in behaviour is "no filter") and drops them under `drop` /
//! `fail`; the failure is logged with plugin, tenant and event, and counted.

use std::sync::atomic::Ordering;

use super::bindings as wit;
use super::call::{CallFailure, Caller};
use super::convert::{describe, to_wit};
use super::functions::log_failure;
use super::{FallbackPolicy, PluginHandle, PluginKind};
use super::{WrongKind, check_kind};
use crate::event::Event;

type FilterBatch = Caller<(String, Vec<wit::Event>), (Vec<wit::Verdict>,)>;

/// A filter's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Pass the event on to correlation.
    Keep,
    /// Discard it, with the plugin's reason (if it gave one).
    Drop(Option<String>),
}

/// A `filter` plugin as one tenant uses it.
pub struct WasmFilter {
    call: FilterBatch,
}

impl WasmFilter {
    /// Wraps `handle` (a `filter` plugin).
    ///
    /// # Errors
    /// [`WrongKind`] for a plugin of another kind.
    pub fn new(handle: PluginHandle) -> Result<Self, WrongKind> {
        check_kind(&handle, PluginKind::Filter)?;
        Ok(Self { call: Caller::new(handle, PluginKind::Filter.batch_export(), None) })
    }

    /// The plugin as used here (name, tenant, counters).
    pub fn handle(&self) -> &PluginHandle {
        self.call.handle()
    }

    /// One verdict per event of `events`, in order.
    pub fn filter(&self, events: &[&Event]) -> Vec<Verdict> {
        if events.is_empty() {
            return Vec::new();
        }
        let handle = self.call.handle();
        let batch = events.iter().map(|e| to_wit(e)).collect();
        let failure = match self.call.call((handle.tenant().to_string(), batch), events.len()) {
            Ok(((verdicts,), _)) if verdicts.len() == events.len() => {
                return verdicts
                    .into_iter()
                    .map(|v| match v {
                        wit::Verdict::Keep => Verdict::Keep,
                        wit::Verdict::Drop(reason) => Verdict::Drop(reason),
                    })
                    .collect();
            }
            Ok(((verdicts,), _)) => {
                CallFailure::Garbage(format!("{} verdicts for {} events", verdicts.len(), events.len()))
            }
            Err(CallFailure::Unloaded) => return vec![Verdict::Keep; events.len()],
            Err(failure) => failure,
        };
        let error = self.call.error(format!("{} (first of a batch of {})", describe(events[0]), events.len()), failure);
        let policy = handle.settings().fallback;
        log_failure(&error, policy);
        match policy {
            FallbackPolicy::Builtin => {
                handle.stats().fallbacks.fetch_add(events.len() as u64, Ordering::Relaxed);
                vec![Verdict::Keep; events.len()]
            }
            FallbackPolicy::Drop | FallbackPolicy::Fail => {
                handle.stats().drops.fetch_add(events.len() as u64, Ordering::Relaxed);
                vec![Verdict::Drop(Some(format!("filter `{}` failed", handle.name()))); events.len()]
            }
        }
    }
}
