//! The LRU cache of the correlator's three caches (EventAggregator, EventLogger, SpamFilter),
//! keyed by [`Key`]: client-go's `golang-lru` `Cache` (`Add`, `Get`, `Peek`, eviction of the
//! least recently used entry when full), with the same recency order as the `lru` crate's
//! `LruCache`.
//!
//! The entries live in one slab (a `Vec` that never holds more than the capacity), linked in
//! recency order by `u32` indices, and the index is a `hashbrown::HashTable` of slab indices.
//! On the correlator's usual stream most events start a new group or logger entry in a full
//! cache, so most lookups miss and evict: with 4-byte index slots (a quarter of a linked-node
//! map's) and neighbours in one array, a miss and its eviction touch fewer cache lines, and
//! nothing is allocated per entry. Each eviction also reads the next entry to evict, so that
//! the next eviction does not wait on memory.

use hashbrown::HashTable;

use super::keys::Key;

/// No entry: the end of the recency list.
const NIL: u32 = u32::MAX;

/// A cache of at most `cap` values by [`Key`], evicting the least recently used; a `cap` of 0
/// keeps nothing.
pub(crate) struct KeyedLru<V> {
    /// Slab indices, by the low 64 bits of their key (a [`Key`] is a seeded digest already).
    index: HashTable<u32>,
    slots: Vec<Slot<V>>,
    /// The most recently used entry, and the least ([`NIL`] while empty).
    head: u32,
    tail: u32,
    cap: usize,
    /// With a `cap` of 0, the value [`get_or_insert_mut`](Self::get_or_insert_mut) last made:
    /// a caller may use it, and the next call replaces it.
    scratch: Option<V>,
}

struct Slot<V> {
    key: Key,
    /// The next more recently used entry, and the next less recently used one.
    newer: u32,
    older: u32,
    value: V,
}

impl<V> std::fmt::Debug for KeyedLru<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedLru").field("len", &self.len()).field("cap", &self.cap).finish()
    }
}

impl<V> KeyedLru<V> {
    /// An empty cache of at most `cap` entries (at most `u32::MAX - 1`: a larger `cap` is
    /// taken as that). Memory grows with the entries held. A `cap` of 0 keeps nothing, as
    /// client-go's groupcache `lru` with a negative maximum, which evicts every entry it adds.
    pub(crate) fn new(cap: usize) -> Self {
        let cap = cap.min(NIL as usize - 1);
        Self { index: HashTable::new(), slots: Vec::new(), head: NIL, tail: NIL, cap, scratch: None }
    }

    /// The capacity.
    pub(crate) fn cap(&self) -> usize {
        self.cap
    }

    /// Entries held.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether no entry is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    fn find(&self, key: &Key) -> Option<u32> {
        let slots = &self.slots;
        self.index.find(key.low_bits(), |&i| slots[i as usize].key == *key).copied()
    }

    /// `key`'s value without changing its recency (`golang-lru` `Peek`).
    pub(crate) fn peek(&self, key: &Key) -> Option<&V> {
        self.find(key).map(|i| &self.slots[i as usize].value)
    }

    /// `key`'s value, to change, without changing its recency.
    pub(crate) fn peek_mut(&mut self, key: &Key) -> Option<&mut V> {
        self.find(key).map(|i| &mut self.slots[i as usize].value)
    }

    /// Takes `key`'s entry out (`golang-lru` `Remove`); the other entries keep their recency
    /// order. The slab stays dense: its last slot moves into the freed one.
    pub(crate) fn remove(&mut self, key: &Key) -> Option<V> {
        let i = self.find(key)?;
        let entry = self.index.find_entry(key.low_bits(), |&j| j == i);
        entry.unwrap_or_else(|_| unreachable!("found above")).remove();
        self.unlink(i);
        let last = (self.slots.len() - 1) as u32;
        if i != last {
            // The last slot moves to `i`: its index entry and its neighbours follow it.
            let moved = self.slots[last as usize].key;
            let entry = self.index.find_mut(moved.low_bits(), |&j| j == last);
            *entry.unwrap_or_else(|| unreachable!("every slot is indexed")) = i;
            let (newer, older) = (self.slots[last as usize].newer, self.slots[last as usize].older);
            match newer {
                NIL => self.head = i,
                n => self.slots[n as usize].older = i,
            }
            match older {
                NIL => self.tail = i,
                o => self.slots[o as usize].newer = i,
            }
        }
        Some(self.slots.swap_remove(i as usize).value)
    }

    /// `key`'s value, made the most recently used; when absent, `make()`'s value is inserted
    /// first, in the place of the least recently used entry when the cache is full (that
    /// entry's value is dropped). One index lookup when present.
    pub(crate) fn get_or_insert_mut(&mut self, key: Key, make: impl FnOnce() -> V) -> &mut V {
        if self.cap == 0 {
            // Added and evicted at once: the caller works on a value no lookup finds.
            return self.scratch.insert(make());
        }
        let i = match self.find(&key) {
            Some(i) => {
                self.make_newest(i);
                i
            }
            None => self.insert_absent(key, make()),
        };
        &mut self.slots[i as usize].value
    }

    /// Sets `key`'s value and makes it the most recently used (`golang-lru` `Add`), evicting
    /// the least recently used entry when `key` is new and the cache is full.
    pub(crate) fn put(&mut self, key: Key, value: V) {
        let mut value = Some(value);
        let held = self.get_or_insert_mut(key, || value.take().expect("made once"));
        if let Some(value) = value {
            *held = value;
        }
    }

    /// Inserts `key` (absent) as the most recently used; returns its slot.
    fn insert_absent(&mut self, key: Key, value: V) -> u32 {
        let i = if self.slots.len() < self.cap {
            let i = self.slots.len() as u32;
            if self.slots.len() == self.slots.capacity() {
                // Doubling, but never past the capacity: a cache of 5,000 holds 5,000 slots.
                let more = self.slots.len().max(4).min(self.cap - self.slots.len());
                self.slots.reserve_exact(more);
            }
            self.slots.push(Slot { key, newer: NIL, older: NIL, value });
            i
        } else {
            // Full: the least recently used entry's slot takes the new one.
            let i = self.tail;
            let evicted = self.slots[i as usize].key;
            let entry = self.index.find_entry(evicted.low_bits(), |&j| j == i);
            entry.unwrap_or_else(|_| unreachable!("every slot is indexed")).remove();
            self.unlink(i);
            let slot = &mut self.slots[i as usize];
            slot.key = key;
            slot.value = value;
            i
        };
        let slots = &self.slots;
        self.index.insert_unique(key.low_bits(), i, |&j| slots[j as usize].key.low_bits());
        self.link_newest(i);
        if self.slots.len() == self.cap {
            self.warm_next_victim();
        }
        i
    }

    /// Reads the next entry to evict (the cache is full) and its index slot now, so that the
    /// next eviction finds them in the processor's caches. On a stream that evicts on most
    /// events, the least recently used entry was last touched thousands of events ago, and
    /// loading it at the eviction stalls there; these plain loads stall nothing, since nothing
    /// uses their values until the next eviction.
    fn warm_next_victim(&self) {
        if let Some(slot) = self.slots.get(self.tail as usize) {
            let key = std::hint::black_box(slot.key);
            std::hint::black_box(self.index.find(key.low_bits(), |&j| j == self.tail));
        }
    }

    /// Moves slot `i` (linked) to the most recently used end.
    fn make_newest(&mut self, i: u32) {
        if self.head != i {
            self.unlink(i);
            self.link_newest(i);
        }
    }

    /// Takes slot `i` out of the recency list.
    fn unlink(&mut self, i: u32) {
        let (newer, older) = {
            let slot = &self.slots[i as usize];
            (slot.newer, slot.older)
        };
        match newer {
            NIL => self.head = older,
            n => self.slots[n as usize].older = older,
        }
        match older {
            NIL => self.tail = newer,
            o => self.slots[o as usize].newer = newer,
        }
    }

    /// Puts slot `i` (unlinked) at the most recently used end.
    fn link_newest(&mut self, i: u32) {
        let old_head = self.head;
        {
            let slot = &mut self.slots[i as usize];
            slot.newer = NIL;
            slot.older = old_head;
        }
        match old_head {
            NIL => self.tail = i,
            h => self.slots[h as usize].newer = i,
        }
        self.head = i;
    }

    /// Every entry, least recently used first (the order a snapshot stores, so that putting
    /// them back in turn restores the recency order).
    pub(crate) fn iter_oldest_first(&self) -> impl Iterator<Item = (Key, &V)> + '_ {
        let mut at = self.tail;
        std::iter::from_fn(move || {
            let slot = self.slots.get(at as usize)?;
            at = slot.newer;
            Some((slot.key, &slot.value))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        GetOrInsert(u8, u32),
        Put(u8, u32),
        Peek(u8),
        Remove(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..24, any::<u32>()).prop_map(|(k, v)| Op::GetOrInsert(k, v)),
            (0u8..24, any::<u32>()).prop_map(|(k, v)| Op::Put(k, v)),
            (0u8..24).prop_map(Op::Peek),
            (0u8..24).prop_map(Op::Remove),
        ]
    }

    proptest! {
        /// After every operation the cache holds the same entries, in the same recency order,
        /// as the `lru` crate's `LruCache` given the same operations (what it replaced), and
        /// every answer is the same.
        #[test]
        fn behaves_as_the_lru_crate(cap in 1usize..10, ops in proptest::collection::vec(op(), 0..200)) {
            let mut ours = KeyedLru::new(cap);
            let mut theirs = lru::LruCache::new(std::num::NonZeroUsize::new(cap).unwrap());
            let key = |k: u8| Key::of(&format!("key-{k}"));
            for op in ops {
                match op {
                    Op::GetOrInsert(k, v) => {
                        let a = *ours.get_or_insert_mut(key(k), || v);
                        let b = *theirs.get_or_insert_mut(key(k), || v);
                        prop_assert_eq!(a, b);
                        *ours.get_or_insert_mut(key(k), || unreachable!()) += 1;
                        *theirs.get_or_insert_mut(key(k), || unreachable!()) += 1;
                    }
                    Op::Put(k, v) => {
                        ours.put(key(k), v);
                        theirs.push(key(k), v);
                    }
                    Op::Peek(k) => prop_assert_eq!(ours.peek(&key(k)), theirs.peek(&key(k))),
                    Op::Remove(k) => prop_assert_eq!(ours.remove(&key(k)), theirs.pop(&key(k))),
                }
                let a: Vec<(Key, u32)> = ours.iter_oldest_first().map(|(k, v)| (k, *v)).collect();
                let b: Vec<(Key, u32)> = theirs.iter().rev().map(|(k, v)| (*k, *v)).collect();
                prop_assert_eq!(a, b);
                prop_assert_eq!(ours.len(), theirs.len());
            }
        }
    }

    /// A full cache evicts the least recently used entry, and a lookup (not a peek) makes an
    /// entry the most recently used. The slab never holds more slots than the capacity.
    #[test]
    fn evicts_the_least_recently_used() {
        let mut cache = KeyedLru::new(2);
        let (a, b, c) = (Key::of("a"), Key::of("b"), Key::of("c"));
        cache.put(a, 1);
        cache.put(b, 2);
        assert_eq!(cache.peek(&a), Some(&1)); // a peek leaves a the oldest
        cache.put(c, 3);
        assert_eq!(cache.peek(&a), None);
        cache.get_or_insert_mut(b, || 0); // b is now the newest
        cache.put(a, 4);
        assert_eq!(cache.iter_oldest_first().map(|(k, v)| (k, *v)).collect::<Vec<_>>(), [(b, 2), (a, 4)]);
        assert_eq!(cache.len(), 2);
        let mut large = KeyedLru::new(5000);
        (0..6000).for_each(|i| large.put(Key::of(&i.to_string()), i));
        assert_eq!((large.len(), large.slots.capacity()), (5000, 5000));
        assert_eq!(large.peek(&Key::of("999")), None);
        assert_eq!(large.peek(&Key::of("1000")), Some(&1000));
    }

    /// A capacity of 0 keeps nothing (Go's groupcache `lru` with a negative maximum evicts
    /// what it adds): every lookup makes a new value, which the caller may change.
    #[test]
    fn a_capacity_of_zero_keeps_nothing() {
        let mut cache = KeyedLru::new(0);
        *cache.get_or_insert_mut(Key::of("a"), || 1) += 10;
        assert_eq!(*cache.get_or_insert_mut(Key::of("a"), || 2), 2, "made anew");
        cache.put(Key::of("b"), 3);
        assert_eq!((cache.peek(&Key::of("a")), cache.peek(&Key::of("b")), cache.len()), (None, None, 0));
        assert_eq!(cache.iter_oldest_first().count(), 0);
    }
}
