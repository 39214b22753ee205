//! `by-reason`: the default aggregate-key plugin, client-go `EventAggregatorByReasonFunc`.
//!
//! Aggregate key: `source.component, source.host, involvedObject.{kind, namespace, name, uid,
//! apiVersion}, type, reason, reportingComponent, reportingInstance`, concatenated; local key:
//! the message.
#![cfg_attr(target_arch = "wasm32", no_std)]

eventpipe_guest::no_std_runtime!();
eventpipe_guest::export_aggregate_key!(eventpipe_guest::defaults::ByReason);
