//! Test fixture and example: a filter that drops events whose reason is listed in its config
//! (`reasons = "Pulled,Created"` under `[plugins.drop-reasons]` in the tenant config).
#![cfg_attr(target_arch = "wasm32", no_std)]

extern crate alloc;

use alloc::format;
use alloc::vec;
use eventpipe_guest::prelude::*;

eventpipe_guest::no_std_runtime!();
eventpipe_guest::export_filter!(DropReasons);

/// Drops the configured reasons, keeps the rest.
/// The config: `reasons` (comma-separated) and, optionally, `label` (`key=value`).
#[derive(Default)]
struct DropReasons;

/// The `label` config entry as `(key, value)`.
fn label() -> Option<(String, String)> {
    let entry = eventpipe_guest::config::get("label")?;
    let (key, value) = entry.split_once('=')?;
    Some((key.into(), value.into()))
}

impl Filter for DropReasons {
    fn fields(&self) -> Vec<EventField> {
        let mut fields = vec![EventField::Reason];
        if let Some((key, _)) = label() {
            fields.push(EventField::Label(key));
        }
        fields
    }

    fn filter(&self, _tenant: &str, event: &Event) -> Verdict {
        let reasons = eventpipe_guest::config::get("reasons").unwrap_or_default();
        if reasons.split(',').any(|r| r.trim() == event.reason) {
            return Verdict::Drop(Some(format!("reason {} is configured as noise", event.reason)));
        }
        if let Some((key, value)) = label() {
            if event.metadata.labels.iter().any(|(k, v)| *k == key && *v == value) {
                return Verdict::Drop(Some(format!("label {key}={value}")));
            }
        }
        Verdict::Keep
    }
}
