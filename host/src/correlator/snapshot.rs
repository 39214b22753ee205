//! Correlator snapshots: an EventCorrelator's state — the three LRU caches in recency order and
//! the token buckets — as data, so that a restarted run or another worker continues where the
//! last one stopped (a repeat is patched with count 8 after 7, not created again with count 1).
//!
//! A [`PartitionSnapshot`] holds the state of every tenant of one partition, the key seed the
//! keys were hashed with ([`super::keys::key_seed`]), and the position it reflects (a JetStream
//! stream sequence, or the count of events a single-host run had finished). Its encoding
//! ([`PartitionSnapshot::encode`]) is versioned:
//!
//! ```text
//! b"EPCS"  u32 LE version (SNAPSHOT_VERSION)  postcard body
//! ```
//!
//! A snapshot is refused — the partition starts fresh, and the refusal is counted — when its
//! magic or version differ, when its key seed is not the process's, or when any tenant's
//! correlator settings (cache size, aggregation threshold and window, spam rate and burst, key
//! functions) differ from the run's: keys or counts taken under other rules would mean
//! something else ([`SnapshotRefused`]).
//!
//! Restoring pushes every entry in the order stored (least recently used first) into fresh
//! caches, which gives back each cache's recency order exactly; a token bucket keeps its tokens
//! and the instant of its last accepted event, so it decides as before.

use serde::{Deserialize, Serialize};

use super::EventCorrelator;
use super::keys::Key;
use crate::event::{ObjectReference, Time};

/// One SpamFilter token bucket: x/time/rate's `Limiter` state.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BucketState {
    /// Tokens left after the last accepted event.
    pub tokens: f64,
    /// When the last event was accepted (Go's zero time for a bucket that never accepted one).
    pub last: Instant,
}

/// The snapshot format's version: a snapshot of another version is refused. Version 2 added
/// the open "N suppressed" windows ([`TenantSnapshot::summaries`]); version 3 keeps a token
/// bucket as x/time/rate's float tokens and last instant ([`BucketState`]).
pub const SNAPSHOT_VERSION: u32 = 3;

/// The first bytes of an encoded snapshot.
pub const SNAPSHOT_MAGIC: &[u8; 4] = b"EPCS";

/// A time as seconds and nanoseconds since the Unix epoch (every `Time` round-trips, also
/// Go's zero time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instant {
    /// Seconds since the epoch.
    pub secs: i64,
    /// Nanoseconds within the second.
    pub nanos: u32,
}

impl From<Time> for Instant {
    fn from(t: Time) -> Self {
        Self { secs: t.timestamp(), nanos: t.timestamp_subsec_nanos() }
    }
}

impl Instant {
    pub(crate) fn time(self) -> Option<Time> {
        chrono::DateTime::from_timestamp(self.secs, self.nanos)
    }
}

/// The numbers a correlator's state means something under: a snapshot taken under others is
/// refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CorrelatorSettings {
    /// Entries per LRU cache.
    pub lru_cache_size: u64,
    /// Distinct local keys that aggregate (Go `uint`).
    pub max_events: u64,
    /// The aggregation window, nanoseconds.
    pub max_interval_nanos: i64,
    /// The spam filter's refill rate, tokens per second, as the bits of a Go `float32`.
    pub qps_bits: u32,
    /// The spam filter's burst, tokens.
    pub burst: i64,
    /// The key functions, as the tenant's rules name them (e.g. `by-reason similar-events
    /// source-object`): keys of other functions are other keys.
    pub key_functions: String,
}

/// One EventAggregator record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AggregatorEntry {
    /// The aggregate key.
    pub key: [u8; 16],
    /// Its local keys, in insertion order.
    pub local_keys: Vec<[u8; 16]>,
    /// When the last event of the group came.
    pub last_timestamp: Option<Instant>,
}

/// One EventLogger entry: what the next repeat of an event is patched with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoggerEntry {
    /// The event's cache key.
    pub key: [u8; 16],
    /// Its count so far.
    pub count: i32,
    /// Its firstTimestamp.
    pub first_timestamp: Option<Instant>,
    /// The event's name (what repeats are patched under).
    pub name: String,
    /// Its resourceVersion as the sink stored it.
    pub resource_version: String,
}

/// One EventCorrelator's state, every list least recently used first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CorrelatorState {
    /// What the state was taken under.
    pub settings: CorrelatorSettings,
    /// The EventAggregator's cache.
    pub aggregator: Vec<AggregatorEntry>,
    /// The EventLogger's cache.
    pub logger: Vec<LoggerEntry>,
    /// The SpamFilter's buckets.
    pub spam_filter: Vec<([u8; 16], BucketState)>,
}

/// One tenant's correlator state in a partition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TenantSnapshot {
    /// The tenant's name.
    pub tenant: String,
    /// Its correlator.
    pub state: CorrelatorState,
    /// Its open "N suppressed" windows ([`crate::pipeline::suppressed`]), soonest to close first: state
    /// like the correlator's, so that the events skipped before the snapshot are still counted
    /// in the summary written after a restart, and those correlated again after it are counted
    /// once.
    pub summaries: Vec<SummaryWindow>,
}

/// An `ObjectReference`'s fields as plain data (the event type omits empty fields when it
/// serialises, which a snapshot's positional encoding cannot have).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReferenceData {
    /// `kind`.
    pub kind: String,
    /// `namespace`.
    pub namespace: String,
    /// `name`.
    pub name: String,
    /// `uid`.
    pub uid: String,
    /// `apiVersion`.
    pub api_version: String,
    /// `resourceVersion`.
    pub resource_version: String,
    /// `fieldPath`.
    pub field_path: String,
}

impl From<&ObjectReference> for ReferenceData {
    fn from(o: &ObjectReference) -> Self {
        Self {
            kind: o.kind.to_string(),
            namespace: o.namespace.to_string(),
            name: o.name.to_string(),
            uid: o.uid.to_string(),
            api_version: o.api_version.to_string(),
            resource_version: o.resource_version.to_string(),
            field_path: o.field_path.to_string(),
        }
    }
}

impl From<ReferenceData> for ObjectReference {
    fn from(o: ReferenceData) -> Self {
        Self {
            kind: o.kind.into(),
            namespace: o.namespace.into(),
            name: o.name.into(),
            uid: o.uid.into(),
            api_version: o.api_version.into(),
            resource_version: o.resource_version.into(),
            field_path: o.field_path.into(),
        }
    }
}

/// One open "N suppressed" window of a tenant, as data ([`crate::pipeline::suppressed`] makes and reads
/// it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SummaryWindow {
    /// The digest of the window's subject (involved object and source).
    pub key: [u8; 16],
    /// The namespace the summary is written in.
    pub namespace: String,
    /// The involved object.
    pub object: ReferenceData,
    /// `source.component`.
    pub source_component: String,
    /// `source.host`.
    pub source_host: String,
    /// `reportingComponent` of the summary.
    pub reporting_component: String,
    /// `reportingInstance` of the summary.
    pub reporting_instance: String,
    /// The window's length, seconds.
    pub seconds: u64,
    /// The first skipped event's time.
    pub first: Instant,
    /// When the window closes.
    pub closes: Instant,
    /// The last skipped event's time.
    pub last: Instant,
    /// Events skipped in it.
    pub total: u64,
    /// Of them, per reason, by reason.
    pub reasons: Vec<(String, u64)>,
}

/// Every tenant's correlator state of one partition, and where in the input it stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionSnapshot {
    /// The key seed of the process that took it ([`super::keys::key_seed`]).
    pub key_seed: u64,
    /// The partition (a JetStream partition, or a router partition of a single-host run).
    pub partition: u32,
    /// Partitions there were (P for JetStream, `--workers` for a single host).
    pub partitions: u32,
    /// The position the state reflects: the last stream sequence correlated (JetStream), or
    /// the events finished (a single host); every event up to it was written by every sink.
    pub sequence: u64,
    /// When it was taken, unix milliseconds (for logs).
    pub taken_at_ms: i64,
    /// The tenants' states, in plan order.
    pub tenants: Vec<TenantSnapshot>,
}

/// Why a snapshot was not used: the partition starts fresh. Each says what differs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotRefused {
    /// Not a snapshot at all.
    #[error("not a correlator snapshot (bad magic or truncated)")]
    NotASnapshot,
    /// Another format version.
    #[error("snapshot format version {found}, this eventpipe reads version {expected}")]
    Version {
        /// The snapshot's version.
        found: u32,
        /// [`SNAPSHOT_VERSION`].
        expected: u32,
    },
    /// The body does not decode.
    #[error("snapshot does not decode: {0}")]
    Corrupt(String),
    /// Keys hashed under another seed (the process already hashed keys under its own).
    #[error("snapshot keys were hashed with seed {snapshot:#x}, this process uses {process:#x}")]
    KeySeed {
        /// The snapshot's seed.
        snapshot: u64,
        /// The process's.
        process: u64,
    },
    /// Another partitioning.
    #[error(
        "snapshot is of partition {partition} of {partitions}, expected {expected_partition} of {expected_partitions}"
    )]
    Partition {
        /// The snapshot's partition.
        partition: u32,
        /// Of how many.
        partitions: u32,
        /// This run's.
        expected_partition: u32,
        /// Of how many.
        expected_partitions: u32,
    },
    /// A tenant's correlator options differ.
    #[error("tenant `{tenant}`: snapshot taken with correlator options {snapshot:?}, this run has {run:?}")]
    Options {
        /// The tenant.
        tenant: String,
        /// The snapshot's settings.
        snapshot: Box<CorrelatorSettings>,
        /// The run's.
        run: Box<CorrelatorSettings>,
    },
}

impl PartitionSnapshot {
    /// `MAGIC`, the version, then the postcard body.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.tenants.len() * 1024);
        out.extend_from_slice(SNAPSHOT_MAGIC);
        out.extend_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
        postcard::to_io(self, &mut out).expect("a snapshot serialises into memory");
        out
    }

    /// Decodes what [`encode`](Self::encode) wrote.
    ///
    /// # Errors
    /// [`SnapshotRefused::NotASnapshot`], [`SnapshotRefused::Version`] or
    /// [`SnapshotRefused::Corrupt`].
    pub fn decode(bytes: &[u8]) -> Result<Self, SnapshotRefused> {
        if bytes.len() < 8 || &bytes[..4] != SNAPSHOT_MAGIC {
            return Err(SnapshotRefused::NotASnapshot);
        }
        let version = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes"));
        if version != SNAPSHOT_VERSION {
            return Err(SnapshotRefused::Version { found: version, expected: SNAPSHOT_VERSION });
        }
        postcard::from_bytes(&bytes[8..]).map_err(|e| SnapshotRefused::Corrupt(e.to_string()))
    }

    /// Whether this snapshot can be restored into partition `partition` of `partitions` by
    /// this process: same partitioning, and the process's key seed is (or becomes, if no key
    /// was hashed yet) the snapshot's.
    ///
    /// # Errors
    /// [`SnapshotRefused::Partition`] or [`SnapshotRefused::KeySeed`].
    pub fn check(&self, partition: u32, partitions: u32) -> Result<(), SnapshotRefused> {
        if (self.partition, self.partitions) != (partition, partitions) {
            return Err(SnapshotRefused::Partition {
                partition: self.partition,
                partitions: self.partitions,
                expected_partition: partition,
                expected_partitions: partitions,
            });
        }
        if !super::keys::adopt_key_seed(self.key_seed) {
            return Err(SnapshotRefused::KeySeed { snapshot: self.key_seed, process: super::keys::key_seed() });
        }
        Ok(())
    }
}

impl EventCorrelator {
    /// The numbers this correlator runs under, with `key_functions` naming its key functions.
    pub fn settings(&self, key_functions: &str) -> CorrelatorSettings {
        let (lru_cache_size, max_events, max_interval_nanos) = self.aggregator.settings();
        let (_, qps_bits, burst) = self.spam_filter.settings();
        CorrelatorSettings {
            lru_cache_size: lru_cache_size as u64,
            max_events,
            max_interval_nanos,
            qps_bits,
            burst,
            key_functions: key_functions.to_string(),
        }
    }

    /// The state of the three caches, least recently used first, under [`settings`](Self::settings).
    pub fn snapshot(&self, key_functions: &str) -> CorrelatorState {
        let aggregator = self
            .aggregator
            .entries()
            .map(|(key, locals, last)| AggregatorEntry {
                key: key.to_bytes(),
                local_keys: locals.map(Key::to_bytes).collect(),
                last_timestamp: last.map(Instant::from),
            })
            .collect();
        let logger = self
            .logger
            .entries()
            .map(|(key, count, first, name, rv)| LoggerEntry {
                key: key.to_bytes(),
                count,
                first_timestamp: first.map(Instant::from),
                name: name.to_string(),
                resource_version: rv.to_string(),
            })
            .collect();
        let spam_filter = self
            .spam_filter
            .entries()
            .map(|(key, tokens, last)| (key.to_bytes(), BucketState { tokens, last: Instant::from(last) }))
            .collect();
        CorrelatorState { settings: self.settings(key_functions), aggregator, logger, spam_filter }
    }

    /// Puts `state` into this correlator's caches (meant for a fresh one: entries already
    /// there stay, less recent than the restored ones).
    ///
    /// # Errors
    /// [`SnapshotRefused::Options`] (naming `tenant`) when `state` was taken under other
    /// settings; nothing is restored then.
    pub fn restore(
        &mut self,
        tenant: &str,
        key_functions: &str,
        state: CorrelatorState,
    ) -> Result<(), SnapshotRefused> {
        let run = self.settings(key_functions);
        if state.settings != run {
            return Err(SnapshotRefused::Options {
                tenant: tenant.to_string(),
                snapshot: Box::new(state.settings),
                run: Box::new(run),
            });
        }
        for e in state.aggregator {
            self.aggregator.restore(
                Key::from_bytes(e.key),
                e.local_keys.into_iter().map(Key::from_bytes),
                e.last_timestamp.and_then(Instant::time),
            );
        }
        for e in state.logger {
            self.logger.restore(
                Key::from_bytes(e.key),
                e.count,
                e.first_timestamp.and_then(Instant::time),
                e.name,
                e.resource_version,
            );
        }
        // A bucket whose instant no `Time` has is left out: the next event finds a new one.
        for (key, bucket) in state.spam_filter {
            if let Some(last) = bucket.last.time() {
                self.spam_filter.restore(Key::from_bytes(key), bucket.tokens, last);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::correlator::{CorrelatorOptions, Occurrence};
    use crate::event::Event;

    fn event(object: &str, reason: &str, message: &str, secs: i64) -> Occurrence {
        let mut e = Event { reason: reason.into(), message: message.into(), count: 1, ..Event::default() };
        e.metadata.namespace = "ns".into();
        e.metadata.name = format!("{object}.{secs:x}").into();
        e.involved_object.kind = "Pod".into();
        e.involved_object.namespace = "ns".into();
        e.involved_object.name = object.into();
        e.source.component = "kubelet".into();
        let at = chrono::DateTime::from_timestamp(1_700_000_000 + secs, 0).unwrap();
        e.first_timestamp = Some(at);
        e.last_timestamp = Some(at);
        Occurrence::replayed(e, None, None)
    }

    fn options(size: i64) -> CorrelatorOptions {
        CorrelatorOptions { lru_cache_size: size, burst_size: 3, ..CorrelatorOptions::default() }
    }

    fn run(c: &mut EventCorrelator, batch: Vec<Occurrence>) -> Vec<(bool, i32, Option<String>)> {
        c.prepare(batch)
            .into_iter()
            .map(|p| {
                let r = c.finish(p);
                if let Some(e) = &r.event {
                    c.update_state(e);
                }
                (r.skip, r.event.as_ref().map_or(0, |e| e.count), r.event.map(|e| e.metadata.name.to_string()))
            })
            .collect()
    }

    /// A stream correlated in one go gives the same results as the same stream cut in two, the
    /// second half correlated by a new correlator restored from a snapshot of the first
    /// (encoded and decoded): counts continue, buckets keep their tokens, LRU order is kept
    /// (a small cache evicts the same entries).
    #[test]
    fn a_restored_correlator_continues_exactly() {
        let stream: Vec<Occurrence> = (0..120)
            .map(|i| {
                event(
                    &format!("pod-{}", i % 7),
                    if i % 3 == 0 { "BackOff" } else { "Pulled" },
                    &format!("m{}", i % 11),
                    i,
                )
            })
            .collect();
        let mut whole = EventCorrelator::new(options(5));
        let expected = run(&mut whole, stream.clone());
        for cut in [1, 37, 60, 119] {
            let mut first = EventCorrelator::new(options(5));
            let mut got = run(&mut first, stream[..cut].to_vec());
            let snapshot = PartitionSnapshot {
                key_seed: crate::correlator::keys::key_seed(),
                partition: 0,
                partitions: 1,
                sequence: cut as u64,
                taken_at_ms: 0,
                tenants: vec![TenantSnapshot {
                    tenant: "default".into(),
                    state: first.snapshot("k"),
                    summaries: Vec::new(),
                }],
            };
            let decoded = PartitionSnapshot::decode(&snapshot.encode()).unwrap();
            assert_eq!(decoded, snapshot);
            decoded.check(0, 1).unwrap();
            let mut second = EventCorrelator::new(options(5));
            let state = decoded.tenants.into_iter().next().unwrap().state;
            second.restore("default", "k", state).unwrap();
            got.extend(run(&mut second, stream[cut..].to_vec()));
            assert_eq!(got, expected, "cut at {cut}");
        }
    }

    #[test]
    fn other_options_versions_and_partitions_are_refused() {
        let c = EventCorrelator::new(options(5));
        let mut other = EventCorrelator::new(options(6));
        let refused = other.restore("t", "k", c.snapshot("k")).unwrap_err();
        assert!(refused.to_string().contains("tenant `t`: snapshot taken with correlator options"), "{refused}");
        let mut same = EventCorrelator::new(options(5));
        assert!(matches!(same.restore("t", "other-keys", c.snapshot("k")), Err(SnapshotRefused::Options { .. })));
        let snapshot = PartitionSnapshot {
            key_seed: crate::correlator::keys::key_seed(),
            partition: 2,
            partitions: 16,
            sequence: 9,
            taken_at_ms: 0,
            tenants: vec![],
        };
        let mut bytes = snapshot.encode();
        assert!(matches!(snapshot.check(2, 8), Err(SnapshotRefused::Partition { .. })));
        bytes[4] = 9;
        assert_eq!(
            PartitionSnapshot::decode(&bytes).unwrap_err().to_string(),
            "snapshot format version 9, this eventpipe reads version 3"
        );
        bytes[4] = 2;
        assert!(
            matches!(PartitionSnapshot::decode(&bytes), Err(SnapshotRefused::Version { found: 2, .. })),
            "version 2 kept token buckets in another form"
        );
        assert_eq!(PartitionSnapshot::decode(b"{}").unwrap_err(), SnapshotRefused::NotASnapshot);
        let seeded = PartitionSnapshot { key_seed: crate::correlator::keys::key_seed() ^ 1, ..snapshot };
        assert!(matches!(seeded.check(2, 16), Err(SnapshotRefused::KeySeed { .. })));
    }

    #[test]
    fn go_zero_time_round_trips() {
        let zero: Time = "0001-01-01T00:00:00Z".parse().unwrap();
        assert_eq!(Instant::from(zero).time(), Some(zero));
    }
}
