//! Test fixture and example: client-go's `EventAggregatorByReasonFunc` without `source.host`,
//! so similar events about one object aggregate even when different nodes report them.
#![cfg_attr(target_arch = "wasm32", no_std)]

use eventpipe_guest::prelude::*;

eventpipe_guest::no_std_runtime!();
eventpipe_guest::export_aggregate_key!(IgnoreHost);

/// The aggregate key of `by-reason` with the reporting host left out.
#[derive(Default)]
struct IgnoreHost;

impl AggregateKey for IgnoreHost {
    /// Every key field `by-reason` reads but `source.host`.
    fn key_fields(&self) -> Vec<KeyField> {
        use KeyField::*;
        vec![SourceComponent, Kind, Namespace, Name, Uid, ApiVersion, Type, Reason, Message]
            .into_iter()
            .chain([ReportingComponent, ReportingInstance])
            .collect()
    }

    fn aggregate_key(&self, e: &EventView<'_>, key: &mut KeyWriter<'_>) {
        let o = &e.involved_object;
        key.push_all(&[e.source.component, o.kind, o.namespace, o.name, o.uid, o.api_version, e.type_, e.reason]);
        key.push_all(&[e.reporting_component, e.reporting_instance]);
    }

    /// The local key is the default's, the message, which the aggregate key does not read.
    fn local_key_field(&self) -> Option<KeyField> {
        Some(KeyField::Message)
    }
}
