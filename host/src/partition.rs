//! The partition function: which partition of the tenant router an event belongs to. The same
//! function serves partitions across cores (`run --workers`) and, later, across hosts.

use crate::event::Event;

/// What the partition of an event is computed from. Every client-go key (aggregate, logger,
/// spam) contains the event's source and involved object, so partitioning by them keeps every
/// key's events together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum PartitionKey {
    /// `source.component`, `source.host` and the involved object's kind, namespace, name, UID
    /// and apiVersion (client-go `getSpamKey`'s fields).
    #[default]
    SourceObject,
    /// The event's namespace: for key plugins that group events of several objects of one
    /// namespace together.
    Namespace,
}

impl PartitionKey {
    /// The partition of `event` among `partitions` (≥ 1): a 64-bit xxh3 of the key's fields,
    /// modulo `partitions`. The same function on every host (NATS subjects use it too).
    pub fn partition(self, event: &Event, partitions: usize) -> usize {
        if partitions <= 1 {
            return 0;
        }
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        let mut field = |s: &str| {
            h.update(s.as_bytes());
            h.update(&[0xff]);
        };
        match self {
            PartitionKey::SourceObject => {
                let o = &event.involved_object;
                for s in [
                    &event.source.component,
                    &event.source.host,
                    &o.kind,
                    &o.namespace,
                    &o.name,
                    &o.uid,
                    &o.api_version,
                ] {
                    field(s);
                }
            }
            PartitionKey::Namespace => field(if event.metadata.namespace.is_empty() {
                &event.involved_object.namespace
            } else {
                &event.metadata.namespace
            }),
        }
        (h.digest() % partitions as u64) as usize
    }
}
