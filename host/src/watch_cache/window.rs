//! A bounded window of recent items numbered by a sequence that only grows: the part of the
//! apiserver's Cacher that lets a watcher resume (`watchCache`'s cyclic buffer of
//! `watchCacheEvent`s with their resourceVersions, `getAllEventsSince`).
//!
//! Every [`Window::push`] gives its item the next sequence number (1, 2, 3, …, never reused)
//! and keeps it until the window holds more than `capacity` items or the item is older than
//! `max_age`; then the oldest go first. [`Window::since`] answers "every item after sequence
//! `n`" exactly — or, when an item after `n` is gone already, [`TooOld`] (the apiserver's
//! `410 Gone` / "too old resource version"): a reader never gets a silent gap.
//!
//! The window knows nothing of watchers or of time sources: callers pass "now" (an instant of
//! [`crate::clock`]), so tests and replays drive ages. Items are usually `Arc`s, so a read copies
//! pointers, not items. Used by [`crate::watch_cache`] (the resourceVersions of the correlated
//! events eventpipe serves).

use std::collections::VecDeque;
use std::time::Duration;

use chrono::{DateTime, Utc};

/// A sequence number that left the window: some item after it was evicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("too old resource version: {asked} (oldest retained: {oldest})")]
pub struct TooOld {
    /// The sequence number asked for.
    pub asked: u64,
    /// The oldest sequence number a reader may still start after (`oldest item − 1`).
    pub oldest: u64,
}

/// A bounded window of items numbered 1, 2, 3, … in push order (see the module docs).
///
/// Memory: at most `capacity` items plus a `VecDeque`'s slack; items older than `max_age` are
/// dropped at the next [`push`](Self::push) or [`expire`](Self::expire).
#[derive(Debug, Clone)]
pub struct Window<T> {
    items: VecDeque<(DateTime<Utc>, T)>,
    /// Sequence number of `items[0]` (when empty: of the next push).
    first: u64,
    capacity: usize,
    max_age: Option<Duration>,
}

impl<T> Window<T> {
    /// An empty window holding at most `capacity` items (at least 1), each for at most
    /// `max_age` (`None`: no age limit). The first push gets sequence number 1.
    pub fn new(capacity: usize, max_age: Option<Duration>) -> Self {
        Self::starting_after(0, capacity, max_age)
    }

    /// As [`new`](Self::new), but the first push gets `last + 1`: a window that continues a
    /// numbering (a reader at `last` or later is inside it).
    pub fn starting_after(last: u64, capacity: usize, max_age: Option<Duration>) -> Self {
        let capacity = capacity.max(1);
        Self { items: VecDeque::with_capacity(capacity.min(4096)), first: last + 1, capacity, max_age }
    }

    /// Appends `item`, observed at `now`, and returns its sequence number; then drops what is
    /// over the capacity or older than `max_age` (never the item just pushed).
    pub fn push(&mut self, item: T, now: DateTime<Utc>) -> u64 {
        let seq = self.head() + 1;
        self.items.push_back((now, item));
        while self.items.len() > self.capacity {
            self.pop_front();
        }
        self.expire(now);
        seq
    }

    /// Drops the items older than `max_age` at `now` (never the newest one: a window always
    /// remembers its head so that a reader at the head stays valid). Returns how many went.
    pub fn expire(&mut self, now: DateTime<Utc>) -> usize {
        let Some(max_age) = self.max_age.and_then(|a| chrono::Duration::from_std(a).ok()) else {
            return 0;
        };
        let mut dropped = 0;
        while self.items.len() > 1 && self.items.front().is_some_and(|(at, _)| *at + max_age < now) {
            self.pop_front();
            dropped += 1;
        }
        dropped
    }

    fn pop_front(&mut self) {
        if self.items.pop_front().is_some() {
            self.first += 1;
        }
    }

    /// The sequence number of the newest item (0 before the first push).
    pub fn head(&self) -> u64 {
        self.first + self.items.len() as u64 - 1
    }

    /// The oldest sequence number a reader may start after: `since(n)` succeeds for every
    /// `n >= oldest()` (it is `head()` when the window is empty).
    pub fn oldest(&self) -> u64 {
        self.first - 1
    }

    /// How many items the window holds.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the window holds no item.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The most items it holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The item with sequence number `seq`, if the window still holds it.
    pub fn get(&self, seq: u64) -> Option<&T> {
        let i = seq.checked_sub(self.first)?;
        self.items.get(usize::try_from(i).ok()?).map(|(_, item)| item)
    }

    /// When the item `seq` was pushed, if the window still holds it.
    pub fn pushed_at(&self, seq: u64) -> Option<DateTime<Utc>> {
        let i = seq.checked_sub(self.first)?;
        self.items.get(usize::try_from(i).ok()?).map(|(at, _)| *at)
    }

    /// Every item after sequence number `after`, oldest first, with its number: exactly the
    /// items a reader that has seen everything up to `after` has missed. `after >= head()`
    /// gives nothing (a reader ahead of the window waits for later pushes).
    ///
    /// # Errors
    /// [`TooOld`] when an item after `after` has been evicted (`after < oldest()`).
    pub fn since(&self, after: u64) -> Result<impl DoubleEndedIterator<Item = (u64, &T)> + '_, TooOld> {
        if after < self.oldest() {
            return Err(TooOld { asked: after, oldest: self.oldest() });
        }
        let skip = usize::try_from(after - self.oldest()).unwrap_or(usize::MAX).min(self.items.len());
        let first = self.first;
        Ok(self.items.range(skip..).enumerate().map(move |(i, (_, item))| (first + (skip + i) as u64, item)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + secs, 0).unwrap()
    }

    #[test]
    fn numbers_grow_from_one_and_since_gives_exactly_what_came_after() {
        let mut w = Window::new(3, None);
        assert_eq!((w.head(), w.oldest()), (0, 0));
        assert_eq!(w.since(0).unwrap().count(), 0, "an empty window: nothing missed");
        for (i, c) in ['a', 'b', 'c', 'd', 'e'].into_iter().enumerate() {
            assert_eq!(w.push(c, t(0)), i as u64 + 1);
        }
        assert_eq!((w.head(), w.oldest(), w.len()), (5, 2, 3));
        let got: Vec<_> = w.since(2).unwrap().map(|(n, c)| (n, *c)).collect();
        assert_eq!(got, [(3, 'c'), (4, 'd'), (5, 'e')]);
        assert_eq!(w.since(4).unwrap().map(|(n, _)| n).collect::<Vec<_>>(), [5]);
        assert_eq!(w.since(5).unwrap().count(), 0);
        assert_eq!(w.since(9).unwrap().count(), 0, "ahead of the head: nothing yet");
        assert_eq!(w.since(1).err(), Some(TooOld { asked: 1, oldest: 2 }), "item 2 is gone");
        assert_eq!((w.get(3), w.get(2), w.get(6)), (Some(&'c'), None, None));
        assert_eq!(w.since(2).unwrap().next_back().map(|(n, _)| n), Some(5));
    }

    #[test]
    fn items_older_than_the_age_go_but_the_head_stays() {
        let mut w = Window::new(100, Some(Duration::from_secs(10)));
        w.push(1, t(0));
        w.push(2, t(5));
        w.push(3, t(12));
        assert_eq!(w.oldest(), 1, "item 1 (12 s old) went at the push");
        assert_eq!(w.expire(t(16)), 1, "item 2 is 11 s old");
        assert_eq!(w.expire(t(1000)), 0, "the head is kept, however old");
        assert_eq!((w.head(), w.oldest(), w.len()), (3, 2, 1));
        assert!(w.since(2).unwrap().eq([(3, &3)]));
        assert!(w.since(1).is_err());
        assert_eq!(w.pushed_at(3), Some(t(12)));
    }

    #[test]
    fn a_window_can_continue_a_numbering() {
        let mut w = Window::starting_after(41, 2, None);
        assert_eq!((w.head(), w.oldest()), (41, 41));
        assert!(w.since(41).unwrap().next().is_none());
        assert!(w.since(40).is_err());
        assert_eq!(w.push("x", t(0)), 42);
    }
}
