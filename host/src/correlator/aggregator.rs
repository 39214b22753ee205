//! EventAggregator: combines similar events (client-go `EventAggregator.EventAggregate`, spec §3.3).

use indexmap::IndexSet;
use smallvec::SmallVec;

use super::keys::{AggregateKey, BuildKeyHasher, Key};
use super::lru_cache::KeyedLru;
use crate::clock::go_unix_nano;
use crate::event::{Event, ObjectMeta, Time, event_name};

/// Local keys a group keeps in its own record, searched linearly, before they move to an
/// indexed set. Most groups see one or a few distinct messages before they are evicted or
/// their window ends; four keep a record (and its LRU node) within two cache lines, where room
/// for client-go's default `maxEvents` (10) made every node four (the three caches then
/// outgrow a core's cache: 2–5 % slower on the synthetic and the real streams, in pairs).
const INLINE_LOCAL_KEYS: usize = 4;

/// The distinct local keys of a group, in insertion order (the order decides
/// [`EventAggregator`]'s PopAny).
///
/// Up to [`INLINE_LOCAL_KEYS`] they sit in the record itself: a group costs no allocation of
/// its own and one place in memory, which is what a busy aggregator touches for every event. A
/// group that collects more (the ones that aggregate, at client-go's default `maxEvents`)
/// moves them to an [`IndexSet`] for the rest of its life: one allocation per such group. Keys
/// are seeded digests already, so the set hashes them as the LRU caches do, by their low bits.
#[derive(Debug)]
enum LocalKeys {
    Inline(SmallVec<[Key; INLINE_LOCAL_KEYS]>),
    Indexed(IndexSet<Key, BuildKeyHasher>),
}

impl Default for LocalKeys {
    fn default() -> Self {
        LocalKeys::Inline(SmallVec::new())
    }
}

impl LocalKeys {
    fn len(&self) -> usize {
        match self {
            LocalKeys::Inline(keys) => keys.len(),
            LocalKeys::Indexed(keys) => keys.len(),
        }
    }

    fn clear(&mut self) {
        match self {
            LocalKeys::Inline(keys) => keys.clear(),
            LocalKeys::Indexed(keys) => keys.clear(),
        }
    }

    /// Adds `key` unless it is there already.
    fn insert(&mut self, key: Key) {
        match self {
            LocalKeys::Inline(keys) if keys.contains(&key) => {}
            LocalKeys::Inline(keys) if keys.len() < INLINE_LOCAL_KEYS => keys.push(key),
            LocalKeys::Inline(keys) => {
                let mut indexed: IndexSet<Key, BuildKeyHasher> = keys.drain(..).collect();
                indexed.insert(key);
                *self = LocalKeys::Indexed(indexed);
            }
            LocalKeys::Indexed(keys) => {
                keys.insert(key);
            }
        }
    }

    /// Removes the oldest inserted key.
    fn pop_oldest(&mut self) {
        match self {
            LocalKeys::Inline(keys) => {
                keys.remove(0);
            }
            LocalKeys::Indexed(keys) => {
                keys.shift_remove_index(0);
            }
        }
    }

    fn iter(&self) -> impl Iterator<Item = Key> + '_ {
        let (inline, indexed) = match self {
            LocalKeys::Inline(keys) => (Some(keys.iter()), None),
            LocalKeys::Indexed(keys) => (None, Some(keys.iter())),
        };
        inline.into_iter().flatten().chain(indexed.into_iter().flatten()).copied()
    }
}

/// One aggregation group: the distinct local keys seen in the current window and the time of
/// the last similar event (client-go `aggregateRecord`).
#[derive(Debug, Default)]
struct AggregateRecord {
    local_keys: LocalKeys,
    /// When the last similar event was seen; `None` (Go's zero time) for a new group.
    last_timestamp: Option<Time>,
}

impl AggregateRecord {
    /// Records `local` at `now` and tells whether the event is aggregated (the body of
    /// client-go `EventAggregate` for one record).
    fn observe(&mut self, local: Key, now: Time, max_events: u64, max_interval_nanos: i64) -> bool {
        let expired = match self.last_timestamp {
            None => true,
            Some(last) => elapsed_nanos(now, last) > max_interval_nanos,
        };
        if expired {
            self.local_keys.clear();
        }
        self.local_keys.insert(local);
        self.last_timestamp = Some(now);
        if (self.local_keys.len() as u64) < max_events {
            return false;
        }
        // PopAny, made deterministic: drop the oldest inserted local key.
        self.local_keys.pop_oldest();
        true
    }
}

/// What the aggregator decided for one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AggregateDecision {
    /// Fewer than `max_events` distinct local keys in the window: keep the event as it is; the
    /// EventLogger keys it by client-go `getEventKey`.
    Original,
    /// The group reached `max_events` distinct local keys in the window: replace the event by
    /// an aggregate event (see [`aggregate_event`]) that the EventLogger keys by this aggregate key.
    Aggregate(Key),
}

/// The EventAggregator: an LRU of aggregation groups (their distinct local keys and last
/// timestamp) keyed by aggregate key.
///
/// # Divergence
/// When a group holds `max_events` distinct local keys, client-go removes a *random* one
/// (`PopAny` on a Go map). eventpipe removes the **oldest inserted** local key, so output is
/// deterministic: after an aggregation the group keeps the `max_events - 1` most recently
/// *first-seen* messages, and a repeat of an older message aggregates again.
#[derive(Debug)]
pub struct EventAggregator {
    cache: KeyedLru<AggregateRecord>,
    max_events: u64,
    /// `maxIntervalInSeconds` as Go turns it into a `time.Duration` (may be negative; see
    /// [`super::CorrelatorOptions::max_interval_in_seconds`]).
    max_interval_nanos: i64,
}

impl EventAggregator {
    /// An aggregator with an LRU of `cache_size` groups (0: keeps none, every event starts a
    /// new group, as client-go with a negative `LRUCacheSize`).
    ///
    /// `max_events` and `max_interval_in_seconds` are taken as client-go takes them: converted
    /// to `uint` (a negative `max_events` wraps to a huge value, so nothing aggregates), and the
    /// interval converted back to a `time.Duration` of seconds with Go's wrapping arithmetic.
    pub fn new(cache_size: usize, max_events: i64, max_interval_in_seconds: i64) -> Self {
        Self {
            cache: KeyedLru::new(cache_size),
            max_events: max_events as u64,
            max_interval_nanos: max_interval_in_seconds.wrapping_mul(1_000_000_000),
        }
    }

    /// Records `key` at `now` and decides whether the event is aggregated
    /// (client-go `EventAggregate` minus building the aggregate event).
    ///
    /// The group's window slides: a similar event more than `max_interval` after the previous
    /// one (strictly greater) starts a fresh group.
    pub fn aggregate(&mut self, key: AggregateKey, now: Time) -> AggregateDecision {
        let AggregateKey { aggregate, local } = key;
        let (max_events, max_interval_nanos) = (self.max_events, self.max_interval_nanos);
        // A new group starts empty; when the cache is full the least recently used group is
        // evicted (client-go's LRU `Add`) and its entry's memory reused for this one.
        let record = self.cache.get_or_insert_mut(aggregate, AggregateRecord::default);
        let aggregated = record.observe(local, now, max_events, max_interval_nanos);
        if aggregated { AggregateDecision::Aggregate(aggregate) } else { AggregateDecision::Original }
    }

    /// Every record, least recently used first: the aggregate key, its local keys in
    /// insertion order and its last timestamp (what a snapshot stores,
    /// [`super::snapshot`]).
    pub fn entries(&self) -> impl Iterator<Item = (Key, impl Iterator<Item = Key> + '_, Option<Time>)> + '_ {
        self.cache.iter_oldest_first().map(|(k, r)| (k, r.local_keys.iter(), r.last_timestamp))
    }

    /// Puts a record back as the most recently used (a snapshot restored in order, least recent
    /// first, gives back the cache's recency order).
    pub fn restore(&mut self, key: Key, local_keys: impl IntoIterator<Item = Key>, last_timestamp: Option<Time>) {
        let mut record = AggregateRecord { local_keys: LocalKeys::default(), last_timestamp };
        local_keys.into_iter().for_each(|k| record.local_keys.insert(k));
        self.cache.put(key, record);
    }

    /// The cache's capacity, the distinct-message threshold (Go `uint`) and the window in
    /// nanoseconds: the numbers a snapshot must have been taken under.
    pub fn settings(&self) -> (usize, u64, i64) {
        (self.cache.cap(), self.max_events, self.max_interval_nanos)
    }

    /// Number of groups cached.
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    /// Whether no group is cached.
    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }
}

/// `now - last` in nanoseconds, saturating like Go's `Time.Sub`.
fn elapsed_nanos(now: Time, last: Time) -> i64 {
    (now - last).num_nanoseconds().unwrap_or(if now > last { i64::MAX } else { i64::MIN })
}

/// The event client-go emits in place of an aggregated one (spec §3.3 step 7):
/// name `<io.name>.<hex(now unix nanos)>` (no DNS validation), the original's namespace,
/// involvedObject, type, reason and source; `message` from the message function; `count` 1;
/// `firstTimestamp == lastTimestamp == now` (the aggregator's clock); nothing else.
pub fn aggregate_event(original: &Event, message: String, now: Time) -> Event {
    Event {
        metadata: ObjectMeta {
            name: event_name(&original.involved_object.name, go_unix_nano(now)).into(),
            namespace: original.metadata.namespace.clone(),
            ..ObjectMeta::default()
        },
        involved_object: original.involved_object.clone(),
        reason: original.reason.clone(),
        message: message.into(),
        source: original.source.clone(),
        first_timestamp: Some(now),
        last_timestamp: Some(now),
        count: 1,
        type_: original.type_.clone(),
        // Beside the event, not part of it: the aggregate is about the same object.
        enrichment: original.enrichment.clone(),
        ..Event::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(local: &str) -> AggregateKey {
        AggregateKey::of("group", local)
    }

    fn group() -> Key {
        Key::of("group")
    }

    fn at(secs: i64) -> Time {
        chrono::DateTime::from_timestamp(1_700_000_000 + secs, 0).unwrap()
    }

    #[test]
    fn tenth_distinct_message_in_window_aggregates_and_pops_the_oldest() {
        let mut a = EventAggregator::new(16, 10, 600);
        for i in 0..9 {
            assert_eq!(a.aggregate(key(&format!("m{i}")), at(i)), AggregateDecision::Original);
        }
        assert_eq!(a.aggregate(key("m9"), at(9)), AggregateDecision::Aggregate(group()));
        // m0 was popped (oldest insertion): seeing it again refills the set to 10.
        assert_eq!(a.aggregate(key("m0"), at(10)), AggregateDecision::Aggregate(group()));
        // m9 is still in the set: a repeat does not aggregate.
        assert_eq!(a.aggregate(key("m9"), at(11)), AggregateDecision::Original);
    }

    #[test]
    fn a_group_past_the_inline_keys_keeps_insertion_order() {
        let max = INLINE_LOCAL_KEYS as i64 + 5;
        let mut a = EventAggregator::new(16, max, 600);
        for i in 0..max - 1 {
            assert_eq!(a.aggregate(key(&format!("m{i}")), at(i)), AggregateDecision::Original);
            assert_eq!(a.aggregate(key("m0"), at(i)), AggregateDecision::Original, "a repeat is not a new key");
        }
        assert_eq!(a.aggregate(key("last"), at(100)), AggregateDecision::Aggregate(group()));
        // As with inline keys: m0, the oldest, was popped; m1 is still there.
        assert_eq!(a.aggregate(key("m0"), at(101)), AggregateDecision::Aggregate(group()));
        assert_eq!(a.aggregate(key("m1"), at(102)), AggregateDecision::Aggregate(group()), "m1 popped by m0's return");
        assert_eq!(a.aggregate(key("last"), at(103)), AggregateDecision::Original);
        let (_, keys, _) = a.entries().next().unwrap();
        assert_eq!(keys.count(), max as usize - 1);
        // A fresh window starts the group over, still in order.
        assert_eq!(a.aggregate(key("m5"), at(2000)), AggregateDecision::Original);
        let (_, keys, _) = a.entries().next().unwrap();
        assert_eq!(keys.collect::<Vec<_>>(), vec![Key::of("m5")]);
    }

    #[test]
    fn window_resets_only_when_gap_is_strictly_greater_than_interval() {
        let mut a = EventAggregator::new(4, 2, 600);
        assert_eq!(a.aggregate(key("a"), at(0)), AggregateDecision::Original);
        assert_eq!(
            a.aggregate(key("b"), at(600)),
            AggregateDecision::Aggregate(group()),
            "gap == interval keeps the window"
        );
        assert_eq!(a.aggregate(key("c"), at(1201)), AggregateDecision::Original, "gap > interval resets");
    }

    #[test]
    fn negative_max_events_never_aggregates_as_go_uint_wrap() {
        let mut a = EventAggregator::new(4, -1, 600);
        for i in 0..50 {
            assert_eq!(a.aggregate(key(&i.to_string()), at(i)), AggregateDecision::Original);
        }
    }

    #[test]
    fn aggregate_event_has_only_the_fields_client_go_sets() {
        let mut e =
            Event { reason: "R".into(), message: "m".into(), reporting_component: "rc".into(), ..Event::default() };
        e.involved_object.name = "pod".into();
        e.metadata.namespace = "ns".into();
        e.metadata.annotations.insert("a".into(), "b".into());
        let now = chrono::DateTime::from_timestamp_nanos(105_999_103_295_324_396);
        let agg = aggregate_event(&e, "combined".into(), now);
        assert_eq!(agg.metadata.name, "pod.178959f726d80ec");
        assert_eq!(agg.metadata.namespace, "ns");
        assert!(agg.metadata.annotations.is_empty());
        assert_eq!((agg.count, agg.message.as_str()), (1, "combined"));
        assert_eq!(agg.reporting_component, "");
        assert_eq!((agg.first_timestamp, agg.last_timestamp), (Some(now), Some(now)));
        // Before 1970 and outside Go's int64 nanoseconds, the name is what Go's
        // `fmt.Sprintf("%v.%x", name, now.UnixNano())` prints: a signed hex of the wrapped value.
        let before: Time = "1969-12-31T23:59:59.5Z".parse().unwrap();
        assert_eq!(aggregate_event(&e, "c".into(), before).metadata.name, "pod.-1dcd6500");
        let zero: Time = "0001-01-01T00:00:00Z".parse().unwrap();
        assert_eq!(aggregate_event(&e, "c".into(), zero).metadata.name, "pod.-5e4dfc14c2e60000");
    }
}
