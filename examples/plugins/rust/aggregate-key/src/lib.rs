//! `namespace-reason`: an aggregate-key function that groups similar events per namespace
//! instead of per object. The aggregate key is
//! `source.component|involvedObject.kind|involvedObject.namespace|type|reason`, the local key
//! the message (as client-go). So when many pods of one namespace report the same reason with
//! more than `max_events` (10) distinct messages within `max_interval_seconds` (600 s), the
//! rest are combined into one aggregate event — client-go's default only does that per object.
#![cfg_attr(target_arch = "wasm32", no_std)]

use eventpipe_guest::prelude::*;

eventpipe_guest::no_std_runtime!();
eventpipe_guest::export_aggregate_key!(NamespaceReason);

/// The key function (stateless).
#[derive(Default)]
struct NamespaceReason;

impl AggregateKey for NamespaceReason {
    /// What the two keys read: the host sends only these (the others arrive empty).
    fn key_fields(&self) -> Vec<KeyField> {
        use KeyField::*;
        vec![SourceComponent, Kind, Namespace, Type, Reason, Message]
    }

    fn aggregate_key(&self, e: &EventView<'_>, key: &mut KeyWriter<'_>) {
        let o = &e.involved_object;
        key.push_all(&[e.source.component, "|", o.kind, "|", o.namespace, "|", e.type_, "|", e.reason]);
    }
    // `local_key`: the default, the message.

    /// The local key is the message as it is, and the aggregate key does not read it: the host
    /// takes the message from each event itself and remembers aggregate keys without it.
    fn local_key_field(&self) -> Option<KeyField> {
        Some(KeyField::Message)
    }
}
