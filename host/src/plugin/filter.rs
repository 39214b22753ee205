//! A `filter` plugin before correlation: one `filter-batch` call per batch of a tenant's
//! events, with only the fields the filter declared (`projection`), keep or drop
//! (with a reason) per event.
//!
//! A failed call (trap, fuel, memory, wrong number of verdicts) is bisected
//! (`call::bisect`) down to the events that fail alone: each of those is kept under
//! the `builtin` policy (the built-in behaviour is "no filter") and dropped under `drop` /
//! `fail`, and its failure is logged with plugin, tenant and that event, and counted. The other
//! events of the batch get the plugin's verdicts.

use std::sync::atomic::Ordering;

use super::call::{CallFailure, bisect};
use super::convert::describe;
use super::functions::log_failure;
use super::projection::ProjectedFilter;
pub use super::projection::Verdict;
use super::shadow::ShadowCalls;
use super::{FallbackPolicy, PluginHandle, PluginKind};
use super::{WrongKind, check_kind};
use crate::event::Event;

/// A `filter` plugin as one tenant uses it.
pub struct WasmFilter {
    call: ProjectedFilter,
    /// A candidate version compared on every batch ([`super::shadow`]), when one is set.
    shadow: Option<ShadowCalls<ProjectedFilter>>,
}

impl WasmFilter {
    /// Wraps `handle` (a `filter` plugin).
    ///
    /// # Errors
    /// [`WrongKind`] for a plugin of another kind.
    pub fn new(handle: PluginHandle) -> Result<Self, WrongKind> {
        check_kind(&handle, PluginKind::Filter)?;
        let shadow = ShadowCalls::for_filter(&handle);
        Ok(Self { call: ProjectedFilter::new(handle), shadow })
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
        if let Some(shadow) = &self.shadow {
            shadow.compare(events);
        }
        let failure = match self.try_filter(events) {
            Ok(verdicts) => return verdicts,
            Err(CallFailure::Unloaded) if !self.call.handle().slot().is_withdrawn() => {
                return vec![Verdict::Keep; events.len()];
            }
            // Quarantined, or pinned and removed: the fallback policy, without calling it (nor
            // counting failures).
            Err(CallFailure::Quarantined | CallFailure::Unloaded) => {
                return events.iter().map(|_| self.fall_back()).collect();
            }
            Err(failure) => failure,
        };
        let handle = self.call.handle();
        let first_failure = failure.clone();
        let mut systematic = 0;
        let verdicts = bisect(
            events,
            failure,
            &mut |part| self.try_filter(part),
            &mut |event, failure| {
                let error = self.call.error(describe(event), failure);
                log_failure(&error, handle.settings().fallback);
                self.fall_back()
            },
            &mut |_| {
                systematic += 1;
                self.fall_back()
            },
        );
        if systematic > 0 {
            tracing::warn!(
                plugin = handle.name(),
                events = systematic,
                "plugin keeps failing; the rest of the batch falls back without calling it"
            );
            self.call.keeps_failing(&first_failure);
        }
        verdicts
    }

    /// One call on `events`: a verdict per event, or why not.
    fn try_filter(&self, events: &[&Event]) -> Result<Vec<Verdict>, CallFailure> {
        self.call.call(events)
    }

    /// The fallback policy's verdict for an event the plugin failed on (counted).
    fn fall_back(&self) -> Verdict {
        let handle = self.call.handle();
        match handle.settings().fallback {
            FallbackPolicy::Builtin => {
                handle.stats().fallbacks.fetch_add(1, Ordering::Relaxed);
                Verdict::Keep
            }
            FallbackPolicy::Drop | FallbackPolicy::Fail => {
                handle.stats().drops.fetch_add(1, Ordering::Relaxed);
                Verdict::Drop(Some(format!("filter `{}` failed", handle.name())))
            }
        }
    }
}
