//! EventLogger: counts repeats and builds the patch (client-go `eventLogger.eventObserve` and
//! `updateState`, spec §3.4–3.5).
//!
//! # `UpdateState` with writes in flight
//! client-go's loop is sequential: `recordToSink` writes an event, then `UpdateState` stores the
//! server's copy (an LRU `Add`), before the next event is correlated. A sink with several writes
//! in flight acknowledges a write later, after other events were correlated; had the
//! acknowledgement made its entry the most recently used then, which entry a full cache evicts
//! would depend on when acknowledgements arrive. So `UpdateState` is split in two, and the cache
//! ends as client-go's sequential loop leaves it whatever the timing:
//!
//! 1. [`EventLogger::begin_write`], when the write is decided (right after the event is
//!    correlated, in correlation order): the `Add` of the event as it is sent, its recency and the
//!    eviction it causes included. For an event `eventObserve` just stored under the same key
//!    (every event but an aggregate one) this changes nothing but the entry's stamp; an aggregate
//!    event's copy goes in under its own `getEventKey` (spec §3.5), which can evict.
//! 2. [`EventLogger::complete_write`], at the acknowledgement: the sink's copy (name,
//!    resourceVersion, count, firstTimestamp) fills in the entry, in place, without touching
//!    recency — only if the entry is still the one `begin_write` stamped. An entry observed again
//!    since already holds what the copy would have given the later observation (a sink's copy
//!    differs from the event as sent only in its resourceVersion); an entry evicted since, or
//!    evicted and added again, would in client-go have taken the copy before its eviction.
//! 3. [`EventLogger::abandon_write`], for a write that failed for good: client-go stores
//!    nothing. An entry that `begin_write` added (an aggregate event's) is taken out again; the
//!    entry its addition evicted, if the cache was full, stays evicted — the one place where a
//!    write's outcome can still change the cache, and only for aggregate events whose writes fail
//!    every try.

use serde::ser::{Serialize, SerializeMap, Serializer};

use super::keys::{Key, event_cache_key};
use super::lru_cache::KeyedLru;
use crate::event::{CompactString, Event, Time, TimeText};

/// What the EventLogger remembers per key (client-go `eventLog`), with the stamp of the last
/// observation or decided write that stored it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct EventLog {
    count: i32,
    first_timestamp: Option<Time>,
    name: CompactString,
    resource_version: CompactString,
    stamp: u64,
}

impl EventLog {
    /// What to remember of `event` (stamp 0).
    fn of(event: &Event) -> Self {
        let m = &event.metadata;
        Self {
            count: event.count,
            first_timestamp: event.first_timestamp,
            name: m.name.clone(),
            resource_version: m.resource_version.clone(),
            stamp: 0,
        }
    }

    /// Takes `event`'s count, firstTimestamp, name and resourceVersion, copying the strings only
    /// when they changed.
    fn set(&mut self, event: &Event) {
        let m = &event.metadata;
        self.count = event.count;
        self.first_timestamp = event.first_timestamp;
        if self.name != m.name {
            self.name.clone_from(&m.name);
        }
        if self.resource_version != m.resource_version {
            self.resource_version.clone_from(&m.resource_version);
        }
    }
}

/// The strategic-merge patch client-go sends for a repeated event: the two-way merge patch
/// between the event with `count = 0`, `lastTimestamp = Unix epoch`, `message = ""` and the event
/// as observed. Serialises as a JSON object with sorted keys, e.g.
/// `{"count":2,"lastTimestamp":"2025-01-01T00:00:03Z","message":"…"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventPatch {
    /// The new count (absent when 0, which `omitempty` hides on both sides).
    pub count: i32,
    /// The new `lastTimestamp`.
    pub last_timestamp: LastTimestampPatch,
    /// The new message (absent when empty).
    pub message: String,
}

/// How `lastTimestamp` appears in an [`EventPatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LastTimestampPatch {
    /// The event's lastTimestamp is the Unix epoch to the second (the patch compares the two
    /// events' JSON, where `metav1.Time` has whole seconds): no difference, key absent.
    Unchanged,
    /// The event has no lastTimestamp: `"lastTimestamp": null`.
    Null,
    /// `"lastTimestamp": "<RFC 3339 seconds>"`.
    At(Time),
}

impl EventPatch {
    /// The patch for `observed`, as client-go's `CreateTwoWayMergePatch(old, new)`.
    pub fn for_event(observed: &Event) -> Self {
        let last_timestamp = match observed.last_timestamp {
            None => LastTimestampPatch::Null,
            // Compared as marshalled: `metav1.Time` writes whole seconds, so 00:00:00.5 is the epoch.
            Some(t) if t.timestamp() == 0 => LastTimestampPatch::Unchanged,
            Some(t) => LastTimestampPatch::At(t),
        };
        Self { count: observed.count, last_timestamp, message: observed.message.to_string() }
    }

    /// The patch body as JSON bytes (the `application/strategic-merge-patch+json` payload).
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a patch of a count, a time and a string always serialises")
    }
}

impl Serialize for EventPatch {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        if self.count != 0 {
            m.serialize_entry("count", &self.count)?;
        }
        match self.last_timestamp {
            LastTimestampPatch::Unchanged => {}
            LastTimestampPatch::Null => m.serialize_entry("lastTimestamp", &())?,
            LastTimestampPatch::At(t) => m.serialize_entry("lastTimestamp", TimeText::seconds(&t).as_str())?,
        }
        if !self.message.is_empty() {
            m.serialize_entry("message", &self.message)?;
        }
        m.end()
    }
}

/// The EventLogger: an LRU of what was last sent per event key.
#[derive(Debug)]
pub struct EventLogger {
    cache: KeyedLru<EventLog>,
    /// This logger among all of the process's (a [`PendingState`] of another is ignored).
    id: u64,
    /// The last stamp given to an entry.
    stamp: u64,
}

/// A write decided but not yet acknowledged: the EventLogger entry its `UpdateState` goes to
/// ([`EventLogger::begin_write`]), to hand to [`EventLogger::complete_write`] with the sink's copy
/// or to [`EventLogger::abandon_write`] when the write fails for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingState {
    logger: u64,
    key: Key,
    stamp: u64,
    /// `begin_write` added the entry (it was not in the cache).
    added: bool,
}

/// Gives every EventLogger of the process its own id.
static LOGGER_IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl EventLogger {
    /// A logger with an LRU of `cache_size` entries (0: keeps none, no event is a repeat, as
    /// client-go with a negative `LRUCacheSize`).
    pub fn new(cache_size: usize) -> Self {
        let id = LOGGER_IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self { cache: KeyedLru::new(cache_size), id, stamp: 0 }
    }

    fn next_stamp(&mut self) -> u64 {
        self.stamp += 1;
        self.stamp
    }

    /// client-go `eventObserve`: if `key` was seen with a count other than 0 (Go keeps it as a
    /// `uint`, so a negative count is a large one, and `int32(count) + 1` wraps back to the next
    /// value), rewrite `event` as the next occurrence of that earlier event (its name,
    /// resourceVersion and firstTimestamp, count + 1; lastTimestamp and message stay the incoming
    /// ones) and return the patch; otherwise keep the event's own count and return no patch.
    /// Either way, remember the result under `key`.
    pub fn observe(&mut self, event: &mut Event, key: Key) -> Option<EventPatch> {
        let stamp = self.next_stamp();
        let (last, new) = self.entry(key, event);
        last.stamp = stamp;
        if new {
            return None;
        }
        if last.count != 0 {
            event.metadata.name.clone_from(&last.name);
            event.metadata.resource_version.clone_from(&last.resource_version);
            event.first_timestamp = last.first_timestamp;
            event.count = last.count.wrapping_add(1);
            // The entry takes the new count; its name, resourceVersion and firstTimestamp are
            // what the event just took from it.
            last.count = event.count;
            return Some(EventPatch::for_event(event));
        }
        last.set(event);
        None
    }

    /// client-go `updateState`: remember the sink's copy of an event under its `getEventKey`, so
    /// the next repeat patches the server object by its real name and resourceVersion.
    ///
    /// For aggregate events this key differs from the aggregate key `observe` used (it contains
    /// the combined message): client-go's mismatch, reproduced (spec §3.5).
    pub fn update_state(&mut self, event: &Event) {
        self.begin_write(event, None);
    }

    /// [`update_state`](Self::update_state) with `event`'s key when the caller knows it
    /// (`None`: computed here).
    pub fn update_state_keyed(&mut self, event: &Event, key: Option<Key>) {
        self.begin_write(event, key);
    }

    /// The first half of `updateState` for a write of `written` just decided (see the module
    /// docs): its LRU `Add`, in correlation order, of `written` as it is sent, under `key`
    /// (`written`'s `getEventKey`; `None`: computed here). Returns what the write's
    /// acknowledgement hands to [`complete_write`](Self::complete_write), or its failure to
    /// [`abandon_write`](Self::abandon_write). With nothing more, this is `updateState` of a
    /// sink that stores the event as sent.
    pub fn begin_write(&mut self, written: &Event, key: Option<Key>) -> PendingState {
        let key = key.unwrap_or_else(|| event_cache_key(written));
        let stamp = self.next_stamp();
        let (slot, added) = self.entry(key, written);
        if !added {
            slot.set(written);
        }
        slot.stamp = stamp;
        PendingState { logger: self.id, key, stamp, added }
    }

    /// The second half of `updateState`, at the write's acknowledgement: the sink's copy
    /// `stored` (its count, firstTimestamp, name and resourceVersion) fills in the entry
    /// `begin_write` stamped, without changing its recency; nothing when that entry was observed
    /// again, evicted or replaced since (or `pending` is another logger's).
    pub fn complete_write(&mut self, pending: PendingState, stored: &Event) {
        if pending.logger != self.id {
            return;
        }
        if let Some(slot) = self.cache.peek_mut(&pending.key).filter(|slot| slot.stamp == pending.stamp) {
            slot.set(stored);
        }
    }

    /// A write `begin_write` decided failed for good: client-go would not have stored it. An
    /// entry `begin_write` added, unchanged since, is taken out again.
    pub fn abandon_write(&mut self, pending: PendingState) {
        if pending.logger != self.id || !pending.added {
            return;
        }
        if self.cache.peek(&pending.key).is_some_and(|slot| slot.stamp == pending.stamp) {
            self.cache.remove(&pending.key);
        }
    }

    /// The entry for `key`, made the most recently used, and whether it is new: a new entry
    /// remembers `event` (evicting the least recently used one when the cache is full). One
    /// lookup either way.
    fn entry(&mut self, key: Key, event: &Event) -> (&mut EventLog, bool) {
        let mut new = false;
        let log = self.cache.get_or_insert_mut(key, || {
            new = true;
            EventLog::of(event)
        });
        (log, new)
    }

    /// Every entry, least recently used first: key, count, firstTimestamp, name and
    /// resourceVersion (what a snapshot stores, [`super::snapshot`]).
    pub fn entries(&self) -> impl Iterator<Item = (Key, i32, Option<Time>, &str, &str)> + '_ {
        self.cache
            .iter_oldest_first()
            .map(|(k, l)| (k, l.count, l.first_timestamp, l.name.as_str(), l.resource_version.as_str()))
    }

    /// Puts an entry back as the most recently used (restored in order, least recent first,
    /// the cache's recency order comes back).
    pub fn restore(
        &mut self,
        key: Key,
        count: i32,
        first_timestamp: Option<Time>,
        name: String,
        resource_version: String,
    ) {
        self.cache.put(
            key,
            EventLog { count, first_timestamp, name: name.into(), resource_version: resource_version.into(), stamp: 0 },
        );
    }

    /// The cache's capacity.
    pub fn capacity(&self) -> usize {
        self.cache.cap()
    }

    /// The count remembered for `key` without touching recency (for tests and diagnostics).
    pub fn cached_count(&self, key: Key) -> Option<i32> {
        self.cache.peek(&key).map(|l| l.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_serialises_like_go_two_way_merge_patch() {
        let t: Time = "2025-01-01T00:00:03.7Z".parse().unwrap();
        let p = EventPatch { count: 2, last_timestamp: LastTimestampPatch::At(t), message: "m".into() };
        assert_eq!(
            String::from_utf8(p.to_json()).unwrap(),
            r#"{"count":2,"lastTimestamp":"2025-01-01T00:00:03Z","message":"m"}"#
        );
        let p = EventPatch { count: 3, last_timestamp: LastTimestampPatch::Null, message: String::new() };
        assert_eq!(String::from_utf8(p.to_json()).unwrap(), r#"{"count":3,"lastTimestamp":null}"#);
        let epoch = chrono::DateTime::from_timestamp(0, 0).unwrap();
        let e = Event { count: 4, last_timestamp: Some(epoch), ..Event::default() };
        assert_eq!(String::from_utf8(EventPatch::for_event(&e).to_json()).unwrap(), r#"{"count":4}"#);
        // Go compares the JSON of the two events, where a time has whole seconds: half a second
        // after the epoch is the epoch; a second after it, or half a second before it, is not.
        for (at, expected) in [
            ("1970-01-01T00:00:00.5Z", r#"{"count":4}"#),
            ("1970-01-01T00:00:01Z", r#"{"count":4,"lastTimestamp":"1970-01-01T00:00:01Z"}"#),
            ("1969-12-31T23:59:59.5Z", r#"{"count":4,"lastTimestamp":"1969-12-31T23:59:59Z"}"#),
        ] {
            let e = Event { count: 4, last_timestamp: Some(at.parse().unwrap()), ..Event::default() };
            assert_eq!(String::from_utf8(EventPatch::for_event(&e).to_json()).unwrap(), expected, "{at}");
        }
    }

    #[test]
    fn repeat_takes_name_first_timestamp_and_next_count_from_the_cache() {
        let mut logger = EventLogger::new(8);
        let t1: Time = "2025-01-01T00:00:01Z".parse().unwrap();
        let t2: Time = "2025-01-01T00:00:02Z".parse().unwrap();
        let mut first = Event {
            count: 1,
            first_timestamp: Some(t1),
            last_timestamp: Some(t1),
            message: "m".into(),
            ..Event::default()
        };
        first.metadata.name = "pod.1".into();
        assert_eq!(logger.observe(&mut first, Key::of("k")), None);
        let mut second = Event {
            count: 1,
            first_timestamp: Some(t2),
            last_timestamp: Some(t2),
            message: "m".into(),
            ..Event::default()
        };
        second.metadata.name = "pod.2".into();
        let patch = logger.observe(&mut second, Key::of("k")).expect("a repeat is patched");
        assert_eq!((second.metadata.name.as_str(), second.count, second.first_timestamp), ("pod.1", 2, Some(t1)));
        assert_eq!(patch.count, 2);
        assert_eq!(logger.cached_count(Key::of("k")), Some(2));
    }

    #[test]
    fn zero_count_entries_never_turn_into_patches() {
        let mut logger = EventLogger::new(8);
        for _ in 0..3 {
            let mut e = Event::default();
            assert_eq!(logger.observe(&mut e, Key::of("k")), None);
            assert_eq!(e.count, 0);
        }
    }

    /// Go remembers `uint(event.Count)`: a negative count is a huge one, so the next repeat
    /// patches, with `int32(count) + 1`: -3 → -2, and -1 → 0, whose entry then counts as new.
    #[test]
    fn a_negative_count_is_a_previous_observation_as_a_go_uint() {
        let mut logger = EventLogger::new(8);
        let event = |count| Event { count, message: "m".into(), ..Event::default() };
        let mut first = event(-3);
        assert_eq!(logger.observe(&mut first, Key::of("k")), None);
        let mut second = event(1);
        let patch = logger.observe(&mut second, Key::of("k")).expect("a repeat of a count of -3");
        assert_eq!((second.count, patch.count), (-2, -2));
        let mut third = event(-1);
        assert_eq!(logger.observe(&mut third, Key::of("other")), None);
        let mut fourth = event(1);
        let patch = logger.observe(&mut fourth, Key::of("other")).expect("a repeat of a count of -1");
        assert_eq!(fourth.count, 0);
        assert_eq!(String::from_utf8(patch.to_json()).unwrap(), r#"{"lastTimestamp":null,"message":"m"}"#);
        let mut fifth = event(1);
        assert_eq!(logger.observe(&mut fifth, Key::of("other")), None, "a count of 0 is no observation");
        assert_eq!(fifth.count, 1);
    }
}
