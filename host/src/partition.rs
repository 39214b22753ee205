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
    /// each followed by a 0xff byte, modulo `partitions`. The same function on every host (NATS
    /// subjects use it too). The fields are hashed in one call over their concatenation, built
    /// in a stack buffer when it fits: the same value as xxh3's streaming hasher gives, without
    /// its set-up and buffering (~10 ms of `run`'s CPU on the 176k-event stream).
    pub fn partition(self, event: &Event, partitions: usize) -> usize {
        if partitions <= 1 {
            return 0;
        }
        let hash = match self {
            PartitionKey::SourceObject => {
                let o = &event.involved_object;
                hash_fields([
                    &event.source.component,
                    &event.source.host,
                    &o.kind,
                    &o.namespace,
                    &o.name,
                    &o.uid,
                    &o.api_version,
                ])
            }
            PartitionKey::Namespace => hash_fields([if event.metadata.namespace.is_empty() {
                &event.involved_object.namespace
            } else {
                &event.metadata.namespace
            }]),
        };
        (hash % partitions as u64) as usize
    }
}

/// xxh3-64 of `fields` back to back, each followed by 0xff: over one stack buffer while they
/// fit in [`INLINE_BYTES`] (one length pass, then plain copies), else streamed.
fn hash_fields<const N: usize>(fields: [&str; N]) -> u64 {
    let len: usize = fields.iter().map(|f| f.len() + 1).sum();
    if len <= INLINE_BYTES {
        let mut buf = [0u8; INLINE_BYTES];
        let mut at = 0;
        for field in fields {
            let end = at + field.len();
            buf[at..end].copy_from_slice(field.as_bytes());
            buf[end] = 0xff;
            at = end + 1;
        }
        return xxhash_rust::xxh3::xxh3_64(&buf[..at]);
    }
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for field in fields {
        h.update(field.as_bytes());
        h.update(&[0xff]);
    }
    h.digest()
}

/// The largest concatenation [`hash_fields`] builds on the stack (an event's source and
/// involved object take ~100 bytes).
const INLINE_BYTES: usize = 256;

#[cfg(test)]
mod tests {
    use super::*;

    /// The partition function is the streaming xxh3 of the fields, each followed by 0xff (a
    /// function other hosts compute too): pinned here, short keys and long ones alike.
    #[test]
    fn the_partition_is_xxh3_of_the_fields_each_followed_by_0xff() {
        let streaming = |fields: &[&str]| {
            let mut h = xxhash_rust::xxh3::Xxh3::new();
            for f in fields {
                h.update(f.as_bytes());
                h.update(&[0xff]);
            }
            h.digest()
        };
        for name in ["web-0".to_string(), "x".repeat(600)] {
            let mut e = Event::default();
            e.source.component = "kubelet".into();
            e.source.host = "node-1".into();
            e.involved_object.kind = "Pod".into();
            e.involved_object.namespace = "shop".into();
            e.involved_object.name = name.clone().into();
            e.involved_object.uid = "u-1".into();
            e.involved_object.api_version = "v1".into();
            let expected = streaming(&["kubelet", "node-1", "Pod", "shop", &name, "u-1", "v1"]);
            for partitions in [2, 7, 16] {
                assert_eq!(
                    PartitionKey::SourceObject.partition(&e, partitions),
                    (expected % partitions as u64) as usize
                );
            }
            e.metadata.namespace = "ns".into();
            assert_eq!(PartitionKey::Namespace.partition(&e, 5), (streaming(&["ns"]) % 5) as usize);
        }
    }
}
