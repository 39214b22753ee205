//! Test fixture and example: a filter that drops events whose reason is listed in its config
//! (`reasons = "Pulled,Created"` under `[plugins.drop-reasons]` in the tenant config).
#![cfg_attr(target_arch = "wasm32", no_std)]

extern crate alloc;

use alloc::format;
use eventpipe_guest::prelude::*;

eventpipe_guest::no_std_runtime!();
eventpipe_guest::export_filter!(DropReasons);

/// Drops the configured reasons, keeps the rest.
#[derive(Default)]
struct DropReasons;

impl Filter for DropReasons {
    fn filter(&self, _tenant: &str, event: &Event) -> Verdict {
        let reasons = eventpipe_guest::config::get("reasons").unwrap_or_default();
        if reasons.split(',').any(|r| r.trim() == event.reason) {
            Verdict::Drop(Some(format!("reason {} is configured as noise", event.reason)))
        } else {
            Verdict::Keep
        }
    }
}
