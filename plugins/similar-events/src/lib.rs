//! `similar-events`: the default message combiner, client-go
//! `EventAggregatorByReasonMessageFunc`: `"(combined from similar events): " + message`.
#![cfg_attr(target_arch = "wasm32", no_std)]

eventpipe_guest::no_std_runtime!();
eventpipe_guest::export_message_combiner!(eventpipe_guest::defaults::SimilarEvents);
