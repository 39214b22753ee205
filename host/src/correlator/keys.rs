//! The key functions of client-go's `events_cache.go`, and the traits that make them injectable.
//!
//! Keys are plain string concatenations with **no separator**, exactly as client-go builds them,
//! so Go's collisions (`"ab"+"c"` vs `"a"+"bc"`) are reproduced bit for bit (spec §3.2). The
//! caches do not store the strings: they store a [`Key`], the 128-bit XXH3 digest of the
//! concatenated bytes, copied into a stack buffer or a reused one (nothing is allocated on the
//! hot path). When every key function is built in, the correlator builds an event's three keys
//! together (`BuiltinKeys`).
//!
//! Each function kind is a trait with a single-event method and a batch method. The batch
//! method's default loops over the single one; Wasm plugins override it to cross the component
//! boundary once per batch, which is what keeps a plugin call affordable per event.

use std::sync::OnceLock;

use xxhash_rust::xxh3::Xxh3;

use crate::event::Event;

/// A cache key: the 128-bit XXH3 digest of a key string (client-go's concatenation).
///
/// Equal strings give equal keys however they were split into parts, so Go's separator-less
/// collisions are kept. The seed is random per process, so input cannot be crafted to collide;
/// a correlator snapshot carries it, and a process restoring one adopts it first
/// ([`adopt_key_seed`]).
///
/// # Divergence
/// client-go compares the strings themselves; two different strings collide here with
/// probability about 2⁻¹²⁸ per pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(u128);

impl Key {
    /// The digest as 16 little-endian bytes (what a snapshot stores).
    pub fn to_bytes(self) -> [u8; 16] {
        self.0.to_le_bytes()
    }

    /// The key whose [`to_bytes`](Self::to_bytes) are `bytes`.
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        Key(u128::from_le_bytes(bytes))
    }
}

static SEED: OnceLock<u64> = OnceLock::new();

fn seed() -> u64 {
    *SEED.get_or_init(rand::random)
}

/// The process's key seed (chosen at random on first use unless [`adopt_key_seed`] set it):
/// what a correlator snapshot ([`super::snapshot`]) records, since its keys mean something only
/// under the seed they were hashed with.
pub fn key_seed() -> u64 {
    seed()
}

/// Makes `seed` the process's key seed, so that keys restored from a snapshot taken by another
/// process (a restarted run, another worker) match the keys of new events. Returns whether the
/// process's seed is now `seed`: `false` when a key was already hashed under another seed (the
/// snapshot cannot be used then).
pub fn adopt_key_seed(seed: u64) -> bool {
    *SEED.get_or_init(|| seed) == seed
}

/// The hasher of the correlator's sets of keys: a [`Key`] is a seeded digest already, uniformly
/// spread, so its low 64 bits are the hash (hashing it again only costs time).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only reached for types other than `Key` (which writes one u128): fold them in.
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(word)).wrapping_mul(0x517c_c1b7_2722_0a95);
        }
    }

    fn write_u128(&mut self, n: u128) {
        self.0 ^= n as u64;
    }
}

/// Builds [`KeyHasher`]s: the `S` of the correlator's hash sets of [`Key`]s (an aggregation
/// group's local keys once it holds many; the LRU caches index by [`Key::low_bits`] directly).
pub(crate) type BuildKeyHasher = std::hash::BuildHasherDefault<KeyHasher>;

impl Key {
    /// A key no string hashes to in practice; fills a slot until the real key is computed.
    pub(crate) const UNSET: Key = Key(0);

    /// The digest's low 64 bits: uniformly spread, for indexing a table by key.
    pub(crate) fn low_bits(self) -> u64 {
        self.0 as u64
    }

    /// The high 64 bits of the digest.
    pub(crate) fn high_bits(self) -> u64 {
        (self.0 >> 64) as u64
    }

    /// The key of one string.
    pub fn of(s: &str) -> Self {
        Self::of_bytes(s.as_bytes())
    }

    /// The key of a string given as its UTF-8 bytes (as plugins return keys); equal to
    /// [`Key::of`] of the same string.
    pub fn of_bytes(bytes: &[u8]) -> Self {
        Key(xxhash_rust::xxh3::xxh3_128_with_seed(bytes, seed()))
    }

    /// The key of the concatenation of `parts` (no separator), without allocating: parts are
    /// copied into a stack buffer sized to them and hashed at once; a key longer than the
    /// largest buffer is hashed incrementally (XXH3 gives the same digest either way).
    pub fn of_parts<const N: usize>(parts: [&str; N]) -> Self {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        // The buffer is zeroed before use: a small one for the usual key, a larger one for
        // long messages.
        if len <= 128 {
            Self::of_parts_in::<128, N>(parts)
        } else if len <= 512 {
            Self::of_parts_in::<512, N>(parts)
        } else {
            let mut h = Xxh3::with_seed(seed());
            parts.iter().for_each(|p| h.update(p.as_bytes()));
            Key(h.digest128())
        }
    }

    /// [`of_parts`](Self::of_parts) in a buffer of `B` bytes (the parts fit).
    fn of_parts_in<const B: usize, const N: usize>(parts: [&str; N]) -> Self {
        let mut buf = [0u8; B];
        let mut len = 0;
        for p in parts {
            buf[len..len + p.len()].copy_from_slice(p.as_bytes());
            len += p.len();
        }
        Self::of_bytes(&buf[..len])
    }
}

/// What an aggregate-key function returns: the group an event belongs to, and its identity
/// within that group (client-go `EventAggregatorKeyFunc`'s `(aggregateKey, localKey)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AggregateKey {
    /// Events with equal aggregate keys are "similar" and may be combined.
    pub aggregate: Key,
    /// Distinct local keys within a group are counted towards `max_events`.
    pub local: Key,
}

impl AggregateKey {
    /// The key of a string pair, as a key function written with strings returns it.
    pub fn of(aggregate: &str, local: &str) -> Self {
        Self { aggregate: Key::of(aggregate), local: Key::of(local) }
    }
}

/// Groups similar events (client-go `EventAggregatorKeyFunc`). Default: [`ByReason`].
///
/// Must be a pure function of the event: the EventCorrelator may call it in batches, ahead of
/// the events' turn.
pub trait EventAggregatorKeyFunc: Send + Sync {
    /// The `(aggregate, local)` key of one event.
    fn aggregate_key(&self, event: &Event) -> AggregateKey;

    /// The keys of a batch, in order: `out` receives exactly `events.len()` entries; `None`
    /// drops that event before correlation (a plugin failed and its fallback policy says so).
    fn aggregate_keys(&self, events: &[&Event], out: &mut Vec<Option<AggregateKey>>) {
        out.extend(events.iter().map(|e| Some(self.aggregate_key(e))));
    }
}

/// Builds the message of a combined event (client-go `EventAggregatorMessageFunc`).
/// Default: [`SimilarEvents`].
pub trait EventAggregatorMessageFunc: Send + Sync {
    /// The combined message for the event that triggered aggregation.
    fn aggregate_message(&self, event: &Event) -> String;

    /// The messages of a batch, in order: `out` receives exactly `events.len()` entries; `None`
    /// drops that (aggregated) event.
    fn aggregate_messages(&self, events: &[&Event], out: &mut Vec<Option<String>>) {
        out.extend(events.iter().map(|e| Some(self.aggregate_message(e))));
    }
}

/// The token-bucket key of the SpamFilter (client-go `EventSpamKeyFunc`). Default: [`SourceObject`].
///
/// # Divergence
/// client-go calls it on the event *after* the EventLogger rewrote `metadata.name`,
/// `metadata.resourceVersion`, `firstTimestamp` and `count`; eventpipe calls it on the event
/// before those bookkeeping rewrites (so it can be batched). A key function that reads only the
/// event's identity (source, involvedObject, type, reason, message, reporting fields, as every
/// client-go key function does) gives identical results.
pub trait EventSpamKeyFunc: Send + Sync {
    /// The spam key of one event.
    fn spam_key(&self, event: &Event) -> Key;

    /// The keys of a batch, in order: `out` receives exactly `events.len()` entries; `None`
    /// drops that event.
    fn spam_keys(&self, events: &[&Event], out: &mut Vec<Option<Key>>) {
        out.extend(events.iter().map(|e| Some(self.spam_key(e))));
    }
}

/// An aggregate-key function written as a closure returning client-go's `(aggregateKey, localKey)`.
impl<F: Fn(&Event) -> (String, String) + Send + Sync> EventAggregatorKeyFunc for F {
    fn aggregate_key(&self, event: &Event) -> AggregateKey {
        let (aggregate, local) = self(event);
        AggregateKey::of(&aggregate, &local)
    }
}

/// A spam-key function written as a closure returning the key string.
impl<F: Fn(&Event) -> String + Send + Sync> EventSpamKeyFunc for F {
    fn spam_key(&self, event: &Event) -> Key {
        Key::of(&self(event))
    }
}

/// A message function given as a closure (a newtype, because `Fn(&Event) -> String` already
/// implements [`EventSpamKeyFunc`]).
pub struct MessageFn<F>(pub F);

impl<F: Fn(&Event) -> String + Send + Sync> EventAggregatorMessageFunc for MessageFn<F> {
    fn aggregate_message(&self, event: &Event) -> String {
        (self.0)(event)
    }
}

/// Prefix of combined messages (client-go `EventAggregatorByReasonMessageFunc`, since k8s 1.8).
pub const COMBINED_MESSAGE_PREFIX: &str = "(combined from similar events): ";

fn concat<'a>(parts: impl IntoIterator<Item = &'a str> + Clone) -> String {
    let mut key = String::with_capacity(parts.clone().into_iter().map(str::len).sum());
    for p in parts {
        key.push_str(p);
    }
    key
}

/// `source.component, source.host, io.kind, io.namespace, io.name, io.uid, io.apiVersion`: the
/// head that client-go's spam key and aggregate key share.
fn source_and_object(e: &Event) -> [&str; 7] {
    let io = &e.involved_object;
    [&e.source.component, &e.source.host, &io.kind, &io.namespace, &io.name, &io.uid, &io.api_version]
}

fn event_key_parts(e: &Event) -> [&str; 11] {
    let io = &e.involved_object;
    let [component, host, kind, namespace, name, uid, api_version] = source_and_object(e);
    [component, host, kind, namespace, name, &io.field_path, uid, api_version, &e.type_, &e.reason, &e.message]
}

fn aggregate_by_reason_parts(e: &Event) -> [&str; 11] {
    let [component, host, kind, namespace, name, uid, api_version] = source_and_object(e);
    [
        component,
        host,
        kind,
        namespace,
        name,
        uid,
        api_version,
        &e.type_,
        &e.reason,
        &e.reporting_component,
        &e.reporting_instance,
    ]
}

/// client-go `getEventKey`: the EventLogger's key for non-aggregated events and `UpdateState`.
///
/// `source.component, source.host, io.kind, io.namespace, io.name, io.fieldPath, io.uid,
/// io.apiVersion, type, reason, message`, concatenated.
pub fn event_key(e: &Event) -> String {
    concat(event_key_parts(e))
}

/// The [`Key`] of [`event_key`], computed without building the string.
pub fn event_cache_key(e: &Event) -> Key {
    Key::of_parts(event_key_parts(e))
}

/// client-go `getSpamKey` as of v0.26 (the behaviour eventpipe's default reproduces):
/// `source.component, source.host, io.kind, io.namespace, io.name, io.uid, io.apiVersion`,
/// concatenated. Normal and Warning events of one object share a bucket.
pub fn spam_key(e: &Event) -> String {
    concat(source_and_object(e))
}

/// client-go `getSpamKey` since k8s 1.32: [`spam_key`] followed by `type`, so Normal and Warning
/// events of one object have separate buckets.
pub fn spam_key_with_type(e: &Event) -> String {
    concat(source_and_object(e).into_iter().chain([e.type_.as_str()]))
}

/// client-go `EventAggregatorByReasonFunc`: aggregate key = `source.component, source.host,
/// io.kind, io.namespace, io.name, io.uid, io.apiVersion, type, reason, reportingComponent,
/// reportingInstance` (reporting fields since k8s 1.20); local key = `message`.
pub fn aggregate_by_reason(e: &Event) -> (String, String) {
    (concat(aggregate_by_reason_parts(e)), e.message.to_string())
}

/// client-go `EventAggregatorByReasonMessageFunc`: `"(combined from similar events): " + message`.
pub fn aggregate_by_reason_message(e: &Event) -> String {
    concat([COMBINED_MESSAGE_PREFIX, &e.message])
}

/// The keys the correlator needs for one event when every key function is built in: the
/// [`ByReason`] aggregate key, the [`SourceObject`] spam key and the EventLogger's
/// [`event_cache_key`], each the same [`Key`] as those functions give.
///
/// The three strings share their head (`source.component, source.host, io.kind, io.namespace,
/// io.name`; the spam key is a prefix of the aggregate key), so they are built together in one
/// reused buffer: each field is read and copied once or twice rather than three times, and no
/// buffer is zeroed (about half of what computing keys cost the built-in correlator).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BuiltinKeys {
    /// [`ByReason`]'s `(aggregate, local)` key.
    pub aggregate: AggregateKey,
    /// [`SourceObject`]'s spam key.
    pub spam: Key,
    /// [`event_cache_key`]: client-go `getEventKey`.
    pub event: Key,
}

impl BuiltinKeys {
    /// The three keys of `e`; `buf` is scratch space, reused from event to event.
    pub(crate) fn of(e: &Event, buf: &mut Vec<u8>) -> Self {
        let [component, host, kind, namespace, name, uid, api_version] = source_and_object(e);
        let (type_, reason) = (e.type_.as_str(), e.reason.as_str());
        buf.clear();
        for part in [component, host, kind, namespace, name] {
            buf.extend_from_slice(part.as_bytes());
        }
        let head = buf.len();
        for part in [uid, api_version] {
            buf.extend_from_slice(part.as_bytes());
        }
        let spam = Key::of_bytes(buf);
        for part in [type_, reason, &e.reporting_component, &e.reporting_instance] {
            buf.extend_from_slice(part.as_bytes());
        }
        let aggregate = AggregateKey { aggregate: Key::of_bytes(buf), local: Key::of(&e.message) };
        buf.truncate(head);
        for part in [&e.involved_object.field_path, uid, api_version, type_, reason, &e.message] {
            buf.extend_from_slice(part.as_bytes());
        }
        Self { aggregate, spam, event: Key::of_bytes(buf) }
    }
}

/// The built-in aggregate-key function, client-go `EventAggregatorByReasonFunc` (plugin `by-reason`).
#[derive(Debug, Clone, Copy, Default)]
pub struct ByReason;

impl EventAggregatorKeyFunc for ByReason {
    fn aggregate_key(&self, event: &Event) -> AggregateKey {
        AggregateKey { aggregate: Key::of_parts(aggregate_by_reason_parts(event)), local: Key::of(&event.message) }
    }
}

/// The built-in message combiner, client-go `EventAggregatorByReasonMessageFunc`
/// (plugin `similar-events`).
#[derive(Debug, Clone, Copy, Default)]
pub struct SimilarEvents;

impl EventAggregatorMessageFunc for SimilarEvents {
    fn aggregate_message(&self, event: &Event) -> String {
        aggregate_by_reason_message(event)
    }
}

/// The built-in spam key, client-go v0.26 `getSpamKey` (plugin `source-object`): one bucket per
/// source + involved object.
#[derive(Debug, Clone, Copy, Default)]
pub struct SourceObject;

impl EventSpamKeyFunc for SourceObject {
    fn spam_key(&self, event: &Event) -> Key {
        Key::of_parts(source_and_object(event))
    }
}

/// client-go ≥ 1.32 `getSpamKey`: one bucket per source + involved object + type.
#[derive(Debug, Clone, Copy, Default)]
pub struct SourceObjectType;

impl EventSpamKeyFunc for SourceObjectType {
    fn spam_key(&self, event: &Event) -> Key {
        let [component, host, kind, namespace, name, uid, api_version] = source_and_object(event);
        Key::of_parts([component, host, kind, namespace, name, uid, api_version, &event.type_])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_of_parts_is_the_key_of_the_concatenation_as_in_go() {
        assert_eq!(Key::of_parts(["ab", "c"]), Key::of("abc"));
        assert_eq!(Key::of_parts(["ab", "c"]), Key::of_parts(["a", "bc"]), "Go's separator-less collision");
        assert_ne!(Key::of("abc"), Key::of("abd"));
        assert_eq!(Key::of_bytes(b"abc"), Key::of("abc"), "plugins' byte keys hash like strings");
        for n in [126, 127, 300, 510, 511, 700] {
            let long = "x".repeat(n);
            assert_eq!(
                Key::of_parts(["ab", &long, "c"]),
                Key::of(&format!("ab{long}c")),
                "{n}: either buffer, or none"
            );
        }
    }

    #[test]
    fn the_caches_hash_a_key_by_its_low_bits() {
        use std::hash::BuildHasher;
        for k in [Key::of("a"), Key::of("b"), Key::UNSET] {
            assert_eq!(BuildKeyHasher::default().hash_one(k), k.low_bits());
        }
        let (a, b) = (BuildKeyHasher::default().hash_one("ab"), BuildKeyHasher::default().hash_one("ba"));
        assert_ne!(a, b, "other types are folded in, not dropped");
    }

    #[test]
    fn built_ins_hash_exactly_the_strings_client_go_builds() {
        let mut e = Event { reason: "R".into(), message: "m".into(), type_: "Normal".into(), ..Event::default() };
        e.involved_object.name = "pod".into();
        e.involved_object.field_path = "spec.containers{c}".into();
        e.reporting_component = "rc".into();
        let (aggregate, local) = aggregate_by_reason(&e);
        assert_eq!(ByReason.aggregate_key(&e), AggregateKey::of(&aggregate, &local));
        assert_eq!(SourceObject.spam_key(&e), Key::of(&spam_key(&e)));
        assert_eq!(SourceObjectType.spam_key(&e), Key::of(&spam_key_with_type(&e)));
        assert_eq!(event_cache_key(&e), Key::of(&event_key(&e)));
    }

    /// The keys built together are the keys the three functions give one by one, whichever
    /// fields are empty or long (the buffer grows past any first size and is reused).
    #[test]
    fn builtin_keys_built_together_equal_each_function() {
        let mut buf = Vec::new();
        let long = "m".repeat(700);
        for (i, message) in ["", "short", long.as_str()].into_iter().enumerate() {
            let mut e =
                Event { reason: "R".into(), message: message.into(), type_: "Warning".into(), ..Event::default() };
            e.source.component = "kubelet".into();
            e.source.host = if i == 1 { "" } else { "node-1" }.into();
            e.involved_object.kind = "Pod".into();
            e.involved_object.namespace = "ns".into();
            e.involved_object.name = "web-0".into();
            e.involved_object.uid = "0b7e".into();
            e.involved_object.api_version = "v1".into();
            e.involved_object.field_path = if i == 2 { "spec.containers{app}" } else { "" }.into();
            e.reporting_component = if i == 0 { "rc" } else { "" }.into();
            e.reporting_instance = "ri".into();
            let keys = BuiltinKeys::of(&e, &mut buf);
            assert_eq!(keys.aggregate, ByReason.aggregate_key(&e), "event {i}");
            assert_eq!(keys.spam, SourceObject.spam_key(&e), "event {i}");
            assert_eq!(keys.event, event_cache_key(&e), "event {i}");
        }
    }
}
