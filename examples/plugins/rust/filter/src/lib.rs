//! `quiet-normal`: a filter that drops routine `Normal` events (by default the reasons
//! `Scheduled`, `Pulling`, `Pulled`, `Created` and `Started`: a pod starting up) before
//! correlation, so they never reach the sink or use up spam-filter tokens. `Warning` events and
//! other reasons are kept. Config key `reasons` (comma-separated) replaces the list.
#![cfg_attr(target_arch = "wasm32", no_std)]

use eventpipe_guest::prelude::*;

eventpipe_guest::no_std_runtime!();
eventpipe_guest::export_filter!(QuietNormal);

/// The reasons dropped when the config sets none.
const DEFAULT_REASONS: &str = "Scheduled,Pulling,Pulled,Created,Started";

/// The filter, with its reason list read from the config once per instance.
struct QuietNormal {
    reasons: Vec<String>,
}

impl Default for QuietNormal {
    fn default() -> Self {
        let list = config::get("reasons").unwrap_or_else(|| DEFAULT_REASONS.into());
        let reasons = list.split(',').map(str::trim).filter(|r| !r.is_empty()).map(String::from).collect();
        Self { reasons }
    }
}

impl Filter for QuietNormal {
    /// The fields `filter` reads: the host sends only these.
    fn fields(&self) -> Vec<EventField> {
        vec![EventField::Type, EventField::Reason]
    }

    fn filter(&self, tenant: &str, event: &Event) -> Verdict {
        if event.type_ == "Normal" && self.reasons.iter().any(|r| *r == event.reason) {
            if log::enabled(log::Level::Debug) {
                log::debug("dropping a routine event", &[("tenant", tenant), ("reason", &event.reason)]);
            }
            Verdict::Drop(Some(format!("routine Normal event: {}", event.reason)))
        } else {
            Verdict::Keep
        }
    }
}
