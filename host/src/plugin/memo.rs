//! Memoized answers of pure key plugins (aggregate key, message combiner, spam key).
//!
//! These plugins are pure by contract (`wit/README.md`): the same key fields give the same
//! answer. So a [`Memo`] remembers the answers of one plugin instance by a digest of exactly the
//! inputs the plugin received ([`key_fields_digest`]), and a batch goes to the plugin with only
//! the events the memo cannot answer, each distinct input once. Only answers the plugin gave are
//! remembered, never what a fallback policy gave after a failure.
//!
//! Answers belong to the plugin version that gave them: a memo holds the answers of one version
//! at a time and starts over when the slot serves another one (hot reload, revert, tier-up). A
//! plugin that keeps state opts out with `pure = false` in its `[plugins.NAME]` table
//! ([`PluginSettings::pure`](super::PluginSettings::pure)).
//!
//! A memo that does not pay (a hit rate under [`MEMO_MIN_HIT_RATE`] over
//! [`MEMO_PROBE_EVENTS`] lookups) stands aside for [`MEMO_BYPASS_BATCHES`] batches, then looks
//! again; each judgement in a row that it still does not pay doubles the time it stands aside,
//! up to [`MEMO_MAX_BYPASS_BATCHES`], so that on a stream that never repeats itself probing costs
//! next to nothing.
//!
//! A memo starts with [`MEMO_ENTRIES`] answers and grows with the stream's working set: each
//! set remembers the digests it evicted last (ghosts: as many as a [`MEMO_GROWTH`]-fold memo
//! would hold in its place besides what it holds), and a miss on one of them is one a larger
//! memo would have answered. When such misses make [`MEMO_GROW_RATE`] of a probe's lookups,
//! the memo grows [`MEMO_GROWTH`]-fold (its answers kept), up to [`MEMO_MAX_ENTRIES`]. On a
//! stream that never repeats an input no ghost is ever asked for again, and the memo stays at
//! its first size.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use lru::DefaultHasher;

use super::convert::{KeyFields, key_fields_digest};
use crate::correlator::keys::Key;
use crate::event::Event;

/// Answers a memo keeps per plugin instance (one key function or message combiner of one
/// tenant) at first: [`MEMO_WAYS`]-way set-associative, so a new answer evicts the least
/// recently used answer of its set. Allocated on the first answer remembered: 4096
/// aggregate-key answers (a 32-byte key pair, the 16-byte digest and the ghosts' share each,
/// 80 bytes) take 320 KiB. It grows up to [`MEMO_MAX_ENTRIES`] when evicted answers are asked
/// for again.
pub const MEMO_ENTRIES: usize = 4096;

/// The most answers a memo grows to unless its plugin's settings say otherwise
/// ([`PluginSettings::memo_max_entries`](super::PluginSettings::memo_max_entries)): 65,536
/// aggregate-key answers take 5 MiB, spam-key answers (one 16-byte key each) 4 MiB. Only a
/// stream whose inputs come back after [`MEMO_ENTRIES`] others makes a memo grow.
pub const MEMO_MAX_ENTRIES: usize = 65_536;

/// How many times larger a memo becomes when it grows (see [`MEMO_GROW_RATE`]).
pub const MEMO_GROWTH: usize = 4;

/// The share of a probe's lookups ([`MEMO_PROBE_EVENTS`]) that must be misses on an answer
/// among those its set evicted last (its ghosts) for the memo to grow [`MEMO_GROWTH`]-fold (up to
/// [`MEMO_MAX_ENTRIES`]): inputs that come back after the memo had to forget them.
pub const MEMO_GROW_RATE: f64 = 0.02;

/// Answers per set of a memo: an input's digest picks its set, where it evicts the least
/// recently used of these. A set is a few adjacent cache lines, so a lookup and the insertion
/// after a miss touch one place in memory (a linked LRU over 4096 entries costs several cache
/// misses per event once the event stream has pushed it out of the caches).
pub const MEMO_WAYS: usize = 2;

// Sizes are powers of two, so that a digest's low bits pick its set.
const _: () = assert!(MEMO_ENTRIES.is_power_of_two() && MEMO_GROWTH.is_power_of_two());
const _: () = assert!(MEMO_MAX_ENTRIES.is_power_of_two() && MEMO_MAX_ENTRIES >= MEMO_ENTRIES);

/// Events looked up before a memo judges whether it pays: at a hit rate under
/// [`MEMO_MIN_HIT_RATE`] over that many lookups, it stands aside for [`MEMO_BYPASS_BATCHES`]
/// batches (the plugin is called on every event, as with `pure = false`), then looks again. On a
/// stream that rarely repeats itself, a lookup and the insertion after a miss cost more than the
/// calls they save.
pub const MEMO_PROBE_EVENTS: u64 = 4096;
/// The hit rate under which a memo stands aside (see [`MEMO_PROBE_EVENTS`]).
pub const MEMO_MIN_HIT_RATE: f64 = 0.05;
/// Up to this hit rate, a memo also stands aside when it measured over the probe that its
/// lookups took longer than the plugin calls its hits saved (at the call time per event it
/// measured meanwhile): a plugin as cheap as the default `by-reason` needs some 25 % of hits
/// before remembering pays, one that takes microseconds an event pays from a few percent.
/// Above it, a memo always stays.
pub const MEMO_MEASURED_HIT_RATE: f64 = 0.5;
/// Batches a memo stands aside for before it looks again, after its first judgement that it
/// does not pay; doubled for each further such judgement in a row, up to
/// [`MEMO_MAX_BYPASS_BATCHES`]. A judgement that it pays starts over from here.
pub const MEMO_BYPASS_BATCHES: u32 = 64;
/// Most batches a memo stands aside for (64 × 2⁴: about 260,000 events in batches of 256).
pub const MEMO_MAX_BYPASS_BATCHES: u32 = 1024;

// A set remembers only its most recently used way: with two ways, the other one is the least
// recently used.
const _: () = assert!(MEMO_WAYS == 2);
// The doubling has room: the second time a memo stands aside is twice the first.
const _: () = assert!(MEMO_MAX_BYPASS_BATCHES >= 2 * MEMO_BYPASS_BATCHES);

/// One event's value as a batch call gave it.
pub(crate) enum Answer<T> {
    /// The plugin's answer, from the version numbered `version`: what a memo remembers.
    Plugin {
        /// The decoded answer.
        value: T,
        /// [`Plugin::version`](super::Plugin::version) of the version that answered.
        version: u64,
    },
    /// The built-in function's value because the plugin is unloaded (not a failure).
    Builtin(T),
    /// What the fallback policy gave after a failure: the built-in value (counted as a fallback)
    /// or `None`, the event dropped (counted as a drop).
    Policy(Option<T>),
}

impl<T> Answer<T> {
    /// The value the correlator gets (`None`: drop the event).
    pub(crate) fn into_value(self) -> Option<T> {
        match self {
            Answer::Plugin { value, .. } | Answer::Builtin(value) => Some(value),
            Answer::Policy(value) => value,
        }
    }
}

/// The answers of one plugin instance's current version, by [`key_fields_digest`].
pub(crate) struct Memo<T> {
    state: Mutex<State<T>>,
    /// Lookups and hits since the last judgement, and batches left to stand aside for.
    probed: AtomicU64,
    probe_hits: AtomicU64,
    /// Misses since the last judgement on a digest among those their set evicted last.
    probe_ghosts: AtomicU64,
    bypass: AtomicU32,
    /// Batches the next judgement that the memo does not pay stands it aside for.
    next_bypass: AtomicU32,
    /// Nanoseconds spent looking up since the last judgement.
    lookup_nanos: AtomicU64,
    /// Events sent to the plugin since the last judgement, and the nanoseconds those calls
    /// took (looked up or not).
    called: AtomicU64,
    call_nanos: AtomicU64,
}

struct State<T> {
    /// The version whose answers `answers` holds (`None` before the first batch).
    version: Option<u64>,
    answers: Table<T>,
}

/// A bounded map from digests to answers, [`MEMO_WAYS`]-way set-associative.
struct Table<T> {
    /// `entries / MEMO_WAYS` sets once the first answer is remembered; empty before.
    sets: Vec<Set<T>>,
    /// The answers it holds when allocated: [`MEMO_ENTRIES`] (or `max`, if smaller), grown up
    /// to `max`.
    entries: usize,
    /// The most answers it grows to: a power of two, at least [`MEMO_WAYS`].
    max: usize,
}

struct Set<T> {
    ways: [Option<(Key, T)>; MEMO_WAYS],
    /// The way used most recently.
    recent: usize,
    /// 32 bits of each digest this set evicted last, newest first (0: none): ghosts, to tell a
    /// miss a larger memo would have answered. (A false match only makes the memo grow sooner.)
    evicted: [u32; GHOSTS],
}

/// Ghosts per set: what a [`MEMO_GROWTH`]-fold memo holds beyond the set's own ways.
const GHOSTS: usize = MEMO_WAYS * (MEMO_GROWTH - 1);

impl<T> Set<T> {
    fn way_of(&self, key: &Key) -> Option<usize> {
        self.ways.iter().position(|w| w.as_ref().is_some_and(|(k, _)| k == key))
    }
}

/// The ghost of `key` in [`Set::evicted`] (never 0).
fn ghost(key: &Key) -> u32 {
    (key.high_bits() >> 32) as u32 | 1
}

impl<T> Table<T> {
    /// An empty table that grows up to `max` answers, rounded down to a power of two (at least
    /// [`MEMO_WAYS`]).
    fn new(max: usize) -> Self {
        let max = 1 << max.max(MEMO_WAYS).ilog2();
        Self { sets: Vec::new(), entries: MEMO_ENTRIES.min(max), max }
    }

    fn set(&mut self, key: &Key) -> Option<&mut Set<T>> {
        let index = key.low_bits() as usize & (self.sets.len().wrapping_sub(1));
        self.sets.get_mut(index)
    }

    /// Whether `key`, not held, is among the digests its set evicted last.
    fn was_evicted(&mut self, key: &Key) -> bool {
        let ghost = ghost(key);
        self.set(key).is_some_and(|set| set.evicted.contains(&ghost))
    }

    /// Holds [`MEMO_GROWTH`] times as many answers (at most its `max`), keeping those it has;
    /// `false` if it is at its largest.
    fn grow(&mut self) -> bool {
        if self.entries >= self.max {
            return false;
        }
        self.entries = (self.entries * MEMO_GROWTH).min(self.max);
        let old = std::mem::take(&mut self.sets);
        for set in old {
            // The less recently used way first, so each set's recency carries over.
            let Set { mut ways, recent, .. } = set;
            for way in [(recent + 1) % MEMO_WAYS, recent] {
                if let Some((key, value)) = ways[way].take() {
                    self.put(key, value);
                }
            }
        }
        true
    }

    fn get(&mut self, key: &Key) -> Option<&T> {
        let set = self.set(key)?;
        let way = set.way_of(key)?;
        set.recent = way;
        set.ways[way].as_ref().map(|(_, value)| value)
    }

    fn put(&mut self, key: Key, value: T) {
        if self.sets.is_empty() {
            self.sets = (0..self.entries / MEMO_WAYS)
                .map(|_| Set { ways: std::array::from_fn(|_| None), recent: 0, evicted: [0; GHOSTS] })
                .collect();
        }
        let set = self.set(&key).expect("allocated above");
        // The key's own way (an answer remembered meanwhile), else a free one, else the one
        // used least recently.
        let way = set
            .way_of(&key)
            .or_else(|| set.ways.iter().position(Option::is_none))
            .unwrap_or((set.recent + 1) % MEMO_WAYS);
        if let Some((evicted, _)) = set.ways[way].replace((key, value))
            && evicted != key
        {
            set.evicted.copy_within(..GHOSTS - 1, 1);
            set.evicted[0] = ghost(&evicted);
        }
        set.recent = way;
    }

    /// Forgets every answer; the size it grew to stays (the next version sees the same stream).
    fn clear(&mut self) {
        self.sets = Vec::new();
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.sets.iter().flat_map(|s| &s.ways).filter(|w| w.is_some()).count()
    }
}

/// A batch looked up in a [`Memo`]: the values it had, and the inputs left for the plugin.
pub(crate) struct Lookup<'e, T> {
    /// Per event, in order: its remembered value, or the index of its input in `misses`.
    slots: Vec<Slot<T>>,
    /// The distinct inputs the memo had no answer for, in the order first seen.
    misses: Vec<&'e Event>,
    /// Their digests.
    miss_keys: Vec<Key>,
}

enum Slot<T> {
    Hit(T),
    Miss(usize),
}

impl<T: Clone> Memo<T> {
    /// An empty memo of [`MEMO_ENTRIES`] answers that grows up to `max_entries` (rounded down to
    /// a power of two; [`MEMO_MAX_ENTRIES`] by default, see
    /// [`PluginSettings::memo_max_entries`](super::PluginSettings::memo_max_entries)).
    pub(crate) fn new(max_entries: usize) -> Self {
        Self {
            state: Mutex::new(State { version: None, answers: Table::new(max_entries) }),
            probed: AtomicU64::new(0),
            probe_hits: AtomicU64::new(0),
            probe_ghosts: AtomicU64::new(0),
            bypass: AtomicU32::new(0),
            next_bypass: AtomicU32::new(MEMO_BYPASS_BATCHES),
            lookup_nanos: AtomicU64::new(0),
            called: AtomicU64::new(0),
            call_nanos: AtomicU64::new(0),
        }
    }

    /// Counts `events` sent to the plugin in a call (or the calls that answered one batch)
    /// that took `took`: what a hit saves, for the next judgement.
    pub(crate) fn called(&self, events: usize, took: std::time::Duration) {
        self.called.fetch_add(events as u64, Ordering::Relaxed);
        self.call_nanos.fetch_add(took.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Whether this batch skips the memo: it stands aside after a low hit rate
    /// ([`MEMO_PROBE_EVENTS`]); each call counts one batch of the time it stands aside.
    pub(crate) fn stands_aside(&self) -> bool {
        self.bypass.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| left.checked_sub(1)).is_ok()
    }

    /// Counts a lookup of `looked` events with `hits` hits that took `took`; after
    /// [`MEMO_PROBE_EVENTS`], judges the memo. It grows when misses on evicted answers made
    /// [`MEMO_GROW_RATE`] of the lookups (and stays, to learn what it answers at its new
    /// size); else it pays unless under [`MEMO_MIN_HIT_RATE`], or under
    /// [`MEMO_MEASURED_HIT_RATE`] when the lookups took longer than the calls the hits saved
    /// (at the time per event the calls took meanwhile).
    pub(crate) fn observe(&self, looked: usize, hits: usize, took: std::time::Duration) {
        let probed = self.probed.fetch_add(looked as u64, Ordering::Relaxed) + looked as u64;
        let hits = self.probe_hits.fetch_add(hits as u64, Ordering::Relaxed) + hits as u64;
        let lookup_nanos =
            self.lookup_nanos.fetch_add(took.as_nanos() as u64, Ordering::Relaxed) + took.as_nanos() as u64;
        if probed < MEMO_PROBE_EVENTS {
            return;
        }
        let (called, call_nanos) = (self.called.swap(0, Ordering::Relaxed), self.call_nanos.swap(0, Ordering::Relaxed));
        let ghosts = self.probe_ghosts.swap(0, Ordering::Relaxed);
        for counter in [&self.probed, &self.probe_hits, &self.lookup_nanos] {
            counter.store(0, Ordering::Relaxed);
        }
        let rate = hits as f64 / probed as f64;
        let saved = hits as f64 * call_nanos as f64 / called.max(1) as f64;
        let grew = ghosts as f64 >= MEMO_GROW_RATE * probed as f64 && self.state().answers.grow();
        let pays = grew
            || rate >= MEMO_MIN_HIT_RATE
                && (rate >= MEMO_MEASURED_HIT_RATE || called == 0 || saved >= lookup_nanos as f64);
        if pays {
            self.next_bypass.store(MEMO_BYPASS_BATCHES, Ordering::Relaxed);
        } else {
            let batches = self.next_bypass.load(Ordering::Relaxed);
            self.bypass.store(batches, Ordering::Relaxed);
            self.next_bypass.store((batches * 2).min(MEMO_MAX_BYPASS_BATCHES), Ordering::Relaxed);
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Looks `events` up among the answers of plugin version `version` (the slot's current one;
    /// the answers of any other version are forgotten first), which reads the key fields
    /// `fields`: events that differ only in fields it does not read share an answer. An input
    /// seen earlier in the same batch is a hit too: it goes to the plugin once.
    pub(crate) fn lookup<'e>(&self, version: u64, fields: KeyFields, events: &[&'e Event]) -> Lookup<'e, T> {
        let mut buf = Vec::new();
        let keys: Vec<Key> = events.iter().map(|e| key_fields_digest(e, fields, &mut buf)).collect();
        let mut lookup = Lookup { slots: Vec::with_capacity(events.len()), misses: Vec::new(), miss_keys: Vec::new() };
        let mut pending: HashMap<Key, usize, DefaultHasher> =
            HashMap::with_capacity_and_hasher(events.len(), DefaultHasher::default());
        let mut state = self.state();
        if state.version != Some(version) {
            state.answers.clear();
            state.version = Some(version);
        }
        let mut ghosts = 0;
        for (event, key) in events.iter().zip(keys) {
            if let Some(value) = state.answers.get(&key) {
                lookup.slots.push(Slot::Hit(value.clone()));
                continue;
            }
            let index = *pending.entry(key).or_insert_with(|| {
                ghosts += u64::from(state.answers.was_evicted(&key));
                lookup.misses.push(event);
                lookup.miss_keys.push(key);
                lookup.miss_keys.len() - 1
            });
            lookup.slots.push(Slot::Miss(index));
        }
        drop(state);
        self.probe_ghosts.fetch_add(ghosts, Ordering::Relaxed);
        lookup
    }

    /// Remembers the plugin's answers to `lookup`'s misses (`answers[i]` for `misses()[i]`)
    /// that the version this memo now holds gave.
    pub(crate) fn remember(&self, lookup: &Lookup<'_, T>, answers: &[Answer<T>]) {
        let mut state = self.state();
        for (key, answer) in lookup.miss_keys.iter().zip(answers) {
            if let Answer::Plugin { value, version } = answer
                && state.version == Some(*version)
            {
                state.answers.put(*key, value.clone());
            }
        }
    }
}

impl<'e, T: Clone> Lookup<'e, T> {
    /// The distinct inputs the plugin has to answer, in order.
    pub(crate) fn misses(&self) -> &[&'e Event] {
        &self.misses
    }

    /// Events answered without the plugin: memo hits and repeats of an input earlier in the
    /// batch.
    pub(crate) fn hits(&self) -> usize {
        self.slots.len() - self.misses.len()
    }

    /// Every event's value, in order, into `out`: hits from the memo, misses from `answers`
    /// (one per [`misses`](Self::misses) entry). A repeat of an input that took the fallback
    /// policy gets the same value and is passed to `repeat_policy` (to be counted like the
    /// first).
    pub(crate) fn finish(
        self,
        answers: Vec<Answer<T>>,
        out: &mut Vec<Option<T>>,
        mut repeat_policy: impl FnMut(&Option<T>),
    ) {
        let answers: Vec<(bool, Option<T>)> =
            answers.into_iter().map(|a| (matches!(a, Answer::Policy(_)), a.into_value())).collect();
        // Misses are numbered in the order first seen, so an index below `seen` is a repeat.
        let mut seen = 0;
        for slot in self.slots {
            out.push(match slot {
                Slot::Hit(value) => Some(value),
                Slot::Miss(i) => {
                    let (policy, value) = &answers[i];
                    if i < seen && *policy {
                        repeat_policy(value);
                    }
                    seen = seen.max(i + 1);
                    value.clone()
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(reason: &str, message: &str) -> Event {
        Event { reason: reason.into(), message: message.into(), ..Event::default() }
    }

    fn plugin(value: u32, version: u64) -> Answer<u32> {
        Answer::Plugin { value, version }
    }

    #[test]
    fn repeats_are_answered_once_and_hits_come_from_the_memo_in_order() {
        let memo = Memo::new(MEMO_MAX_ENTRIES);
        let (a, b) = (event("A", "m"), event("B", "m"));
        let lookup = memo.lookup(1, KeyFields::ALL, &[&a, &b, &a]);
        assert_eq!((lookup.misses().len(), lookup.hits()), (2, 1), "`a` goes to the plugin once");
        let answers = vec![plugin(10, 1), plugin(20, 1)];
        memo.remember(&lookup, &answers);
        let mut out = Vec::new();
        lookup.finish(answers, &mut out, |_| panic!("no policy answer"));
        assert_eq!(out, [Some(10), Some(20), Some(10)]);

        let lookup = memo.lookup(1, KeyFields::ALL, &[&b, &a]);
        assert_eq!((lookup.misses().len(), lookup.hits()), (0, 2));
        let mut out = Vec::new();
        lookup.finish(Vec::new(), &mut out, |_| {});
        assert_eq!(out, [Some(20), Some(10)]);
    }

    #[test]
    fn another_version_starts_over_and_only_answers_of_the_current_version_are_kept() {
        let memo = Memo::new(MEMO_MAX_ENTRIES);
        let a = event("A", "m");
        let lookup = memo.lookup(1, KeyFields::ALL, &[&a]);
        memo.remember(&lookup, &[plugin(10, 1)]);
        assert_eq!(memo.lookup(1, KeyFields::ALL, &[&a]).hits(), 1);
        let lookup = memo.lookup(2, KeyFields::ALL, &[&a]);
        assert_eq!(lookup.hits(), 0, "version 2 does not see version 1's answers");
        // The call ran on version 3 (swapped in meanwhile): not remembered for version 2.
        memo.remember(&lookup, &[plugin(30, 3)]);
        assert_eq!(memo.lookup(2, KeyFields::ALL, &[&a]).hits(), 0);
    }

    #[test]
    fn fallback_values_are_not_remembered_and_their_repeats_are_reported() {
        let memo = Memo::new(MEMO_MAX_ENTRIES);
        let (a, b) = (event("A", "m"), event("B", "m"));
        let lookup = memo.lookup(1, KeyFields::ALL, &[&a, &a, &b, &a]);
        let answers = vec![Answer::Policy(None), Answer::Builtin(7)];
        memo.remember(&lookup, &answers);
        let (mut out, mut repeats) = (Vec::new(), 0);
        lookup.finish(answers, &mut out, |v| {
            assert_eq!(*v, None);
            repeats += 1;
        });
        assert_eq!(out, [None, None, Some(7), None]);
        assert_eq!(repeats, 2);
        assert_eq!(memo.lookup(1, KeyFields::ALL, &[&a, &b]).hits(), 0, "neither was the plugin's answer");
    }

    /// Between the minimum and the measured hit rate, the memo stays only while its hits save
    /// more call time than its lookups take; above it, it stays whatever they cost; under the
    /// minimum it stands aside whatever calls cost.
    #[test]
    fn a_memo_stays_only_where_its_hits_save_more_than_its_lookups_take() {
        let ns = std::time::Duration::from_nanos;
        let probe = MEMO_PROBE_EVENTS;
        let judged = |hit_rate: f64, lookup_ns: u64, call_ns: u64| {
            let memo: Memo<u32> = Memo::new(MEMO_MAX_ENTRIES);
            let hits = (hit_rate * probe as f64) as u64;
            memo.called((probe - hits) as usize, ns((probe - hits) * call_ns));
            memo.observe(probe as usize, hits as usize, ns(probe * lookup_ns));
            !memo.stands_aside()
        };
        assert!(!judged(0.25, 40, 100), "a quarter of the calls save 25 ns an event, lookups take 40");
        assert!(judged(0.25, 40, 1_000), "a quarter of 1 µs calls saves more than the lookups take");
        assert!(judged(0.6, 400, 100), "above the measured hit rate the memo stays");
        assert!(!judged(0.02, 1, 100_000), "under the minimum it stands aside");
        let no_call: Memo<u32> = Memo::new(MEMO_MAX_ENTRIES);
        no_call.observe(probe as usize, (probe / 4) as usize, ns(probe * 1_000));
        assert!(!no_call.stands_aside(), "without a measured call, the hit rate alone judges");
    }

    /// Runs `memo` over `inputs` as a key function does, `passes` times, each pass in another
    /// order (`inputs.len()` a power of two), in batches of 256: lookup, an answer for each
    /// miss, remember, observe. Returns the last pass's hit rate.
    fn run_passes(memo: &Memo<u32>, inputs: &[Event], passes: usize) -> f64 {
        assert!(inputs.len().is_power_of_two());
        let mut rate = 0.0;
        for pass in 0..passes {
            let step = 2 * (pass * 7919 + 2654435761) + 1; // odd: a permutation of the indices
            let order: Vec<&Event> = (0..inputs.len()).map(|i| &inputs[i * step % inputs.len()]).collect();
            let (mut looked, mut hits) = (0, 0);
            for batch in order.chunks(256) {
                let lookup = memo.lookup(1, KeyFields::ALL, batch);
                let answers: Vec<Answer<u32>> = lookup.misses().iter().map(|_| plugin(1, 1)).collect();
                memo.remember(&lookup, &answers);
                memo.observe(batch.len(), lookup.hits(), std::time::Duration::ZERO);
                (looked, hits) = (looked + batch.len(), hits + lookup.hits());
            }
            rate = hits as f64 / looked as f64;
        }
        rate
    }

    fn entries(memo: &Memo<u32>) -> usize {
        memo.state().answers.entries
    }

    #[test]
    fn a_memo_grows_when_inputs_it_evicted_come_back() {
        let memo = Memo::new(MEMO_MAX_ENTRIES);
        let inputs: Vec<Event> = (0..2 * MEMO_ENTRIES).map(|i| event("R", &i.to_string())).collect();
        let before = run_passes(&memo, &inputs, 1);
        assert_eq!(before, 0.0, "the first pass sees every input for the first time");
        let after = run_passes(&memo, &inputs, 3);
        assert!(entries(&memo) > MEMO_ENTRIES, "grew to {} answers", entries(&memo));
        assert!(after > 0.9, "{:.1}% of the repeated inputs answered after growing", 100.0 * after);
        // A new version starts over, at the grown size.
        let grown = entries(&memo);
        assert_eq!(memo.lookup(2, KeyFields::ALL, &[&inputs[0]]).hits(), 0);
        assert_eq!(entries(&memo), grown);

        // Growing keeps every answer it held.
        let mut table = Table::new(MEMO_MAX_ENTRIES);
        let keys: Vec<Key> = (0..MEMO_ENTRIES / 2).map(|i| Key::of(&i.to_string())).collect();
        keys.iter().enumerate().for_each(|(i, k)| table.put(*k, i));
        let held = table.len();
        assert!(table.grow());
        assert_eq!(table.len(), held, "growing keeps every answer");
        for (i, k) in keys.iter().enumerate() {
            if let Some(value) = table.get(k) {
                assert_eq!(*value, i);
            }
        }
    }

    #[test]
    fn a_memo_does_not_grow_on_inputs_that_never_come_back_nor_past_its_largest_size() {
        let memo = Memo::new(MEMO_MAX_ENTRIES);
        let inputs: Vec<Event> = (0..8 * MEMO_ENTRIES).map(|i| event("R", &i.to_string())).collect();
        assert_eq!(run_passes(&memo, &inputs, 1), 0.0);
        assert_eq!(entries(&memo), MEMO_ENTRIES, "no input came back: the memo keeps its first size");

        let mut table: Table<u32> = Table::new(MEMO_MAX_ENTRIES);
        let mut sizes = vec![table.entries];
        while table.grow() {
            sizes.push(table.entries);
        }
        assert_eq!(sizes.last(), Some(&MEMO_MAX_ENTRIES), "grew {sizes:?}");
        assert!(sizes.windows(2).all(|w| w[1] == w[0] * MEMO_GROWTH), "{sizes:?}");

        // A configured largest size, rounded down to a power of two; under the first size, the
        // memo starts there.
        let mut table: Table<u32> = Table::new(3 * MEMO_ENTRIES);
        assert!(table.grow() && !table.grow());
        assert_eq!(table.entries, 2 * MEMO_ENTRIES);
        let table: Table<u32> = Table::new(100);
        assert_eq!((table.entries, table.max), (64, 64));
        assert_eq!(Table::<u32>::new(0).max, MEMO_WAYS);
    }

    #[test]
    fn the_memo_is_bounded_and_keeps_what_was_used_last() {
        let memo = Memo::new(MEMO_MAX_ENTRIES);
        let events: Vec<Event> = (0..4 * MEMO_ENTRIES).map(|i| event("R", &i.to_string())).collect();
        let refs: Vec<&Event> = events.iter().collect();
        let lookup = memo.lookup(1, KeyFields::ALL, &refs);
        let answers: Vec<Answer<u32>> = (0..refs.len()).map(|i| plugin(i as u32, 1)).collect();
        memo.remember(&lookup, &answers);
        let kept = memo.state().answers.len();
        assert!(kept <= MEMO_ENTRIES && kept > MEMO_ENTRIES / 2, "{kept} answers kept");
        let last = &refs[refs.len() - 1..];
        assert_eq!(memo.lookup(1, KeyFields::ALL, last).hits(), 1, "the answer remembered last is kept");

        // Within a set, the answer used last survives a new one.
        let mut table = Table::new(MEMO_MAX_ENTRIES);
        let set = |k: &Key| k.low_bits() % (MEMO_ENTRIES / MEMO_WAYS) as u64;
        let mut same_set = (0..).map(|i: u32| Key::of(&i.to_string())).filter(|k| set(k) == 0);
        let [a, b, c] = std::array::from_fn(|_| same_set.next().expect("keys of set 0"));
        table.put(a, 1);
        table.put(b, 2);
        assert_eq!(table.get(&a), Some(&1));
        table.put(c, 3);
        assert_eq!(table.get(&b), None, "`b` was used least recently");
        assert_eq!(table.get(&a), Some(&1));
        assert_eq!(table.get(&c), Some(&3));
    }
}
