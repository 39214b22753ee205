//! EventCorrelator = EventAggregator → EventLogger → SpamFilter (client-go `tools/record`
//! `events_cache.go`, spec §3).
//!
//! One correlation runs in two steps so that key functions can be called in batches (a Wasm
//! plugin pays its call boundary once per batch, not once per event):
//!
//! 1. [`EventCorrelator::prepare`] takes a batch of [`Occurrence`]s, computes every aggregate
//!    key, runs the EventAggregator, builds aggregate events (combined messages in one batch)
//!    and computes every spam key. Nothing here depends on the EventLogger or SpamFilter state,
//!    so batching changes no outcome.
//! 2. [`EventCorrelator::finish`] runs one [`PreparedEvent`] through the EventLogger and the
//!    SpamFilter. Callers that write to a sink call [`EventCorrelator::update_state`] between
//!    two `finish` calls, exactly where client-go's `recordToSink` does.
//!
//! [`EventCorrelator::event_correlate`] does both for a single event, as client-go's
//! `EventCorrelate`.

pub mod aggregator;
pub mod keys;
pub mod logger;
mod lru_cache;
pub mod snapshot;
pub mod spam_filter;

use std::sync::Arc;

use serde::Serialize;

pub use aggregator::{AggregateDecision, EventAggregator, aggregate_event};
pub use keys::{
    AggregateKey, ByReason, EventAggregatorKeyFunc, EventAggregatorMessageFunc, EventSpamKeyFunc, Key, SimilarEvents,
    SourceObject, SourceObjectType,
};
pub use logger::{EventLogger, EventPatch, LastTimestampPatch, PendingState};
pub use spam_filter::SpamFilter;

use crate::clock::{self, SharedClock};
use crate::event::{Event, Time};
use keys::BuiltinKeys;

/// Events prepared together by the sink watcher and by `replay`: key functions (and Wasm plugins)
/// are called once per batch of this many events.
pub const PREPARE_BATCH_SIZE: usize = 256;

/// client-go `maxLruCacheEntries`: entries in each of the three LRU caches.
pub const MAX_LRU_CACHE_ENTRIES: usize = 4096;
/// client-go `defaultAggregateMaxEvents`: distinct messages in a window before aggregating.
pub const DEFAULT_AGGREGATE_MAX_EVENTS: i64 = 10;
/// client-go `defaultAggregateIntervalInSeconds`: the aggregation window, seconds.
pub const DEFAULT_AGGREGATE_INTERVAL_IN_SECONDS: i64 = 600;
/// client-go `defaultSpamBurst`: tokens per spam key.
pub const DEFAULT_SPAM_BURST: i64 = 25;
/// client-go `defaultSpamQPS`: token refill rate, tokens per second (one per 300 s), a Go `float32`.
pub const DEFAULT_SPAM_QPS: f32 = 1.0 / 300.0;

/// client-go `CorrelatorOptions`. A zero value (or `None`) means "use the default", as
/// client-go's `populateDefaults`; negative values are kept and behave as in client-go
/// (see each field).
#[derive(Clone, Default)]
pub struct CorrelatorOptions {
    /// Entries in each LRU cache (aggregator, logger, spam filter). 0 → 4096. Negative: the
    /// caches keep nothing, as client-go's groupcache `lru` with a negative maximum evicts each
    /// entry as it adds it (every event starts a new aggregation group, is no repeat and finds
    /// a new token bucket).
    pub lru_cache_size: i64,
    /// Spam filter bucket size, tokens. 0 → 25; negative filters every event.
    pub burst_size: i64,
    /// Spam filter refill rate, tokens per second (Go `float32`). 0 → 1/300; negative filters
    /// every event (a new bucket holds no tokens in the x/time/rate client-go v0.26 pins, and
    /// none come; see [`SpamFilter`]).
    pub qps: f32,
    /// Distinct local keys within the window that trigger aggregation. 0 → 10; negative never
    /// aggregates (Go converts it to a huge `uint`).
    pub max_events: i64,
    /// Aggregation window, seconds. 0 → 600. Negative: Go's `uint` → `time.Duration` round trip
    /// makes it a negative duration, so every event starts a fresh window.
    pub max_interval_in_seconds: i64,
    /// Aggregate-key function. `None` → [`ByReason`].
    pub key_func: Option<Arc<dyn EventAggregatorKeyFunc>>,
    /// Message combiner. `None` → [`SimilarEvents`].
    pub message_func: Option<Arc<dyn EventAggregatorMessageFunc>>,
    /// Spam key function. `None` → [`SourceObject`].
    pub spam_key_func: Option<Arc<dyn EventSpamKeyFunc>>,
    /// The aggregator's clock. `None` → the wall clock.
    pub clock: Option<SharedClock>,
    /// The spam filter's clock (client-go reads one clock twice per event). `None` → `clock`.
    pub spam_filter_clock: Option<SharedClock>,
}

impl std::fmt::Debug for CorrelatorOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CorrelatorOptions")
            .field("lru_cache_size", &self.lru_cache_size)
            .field("burst_size", &self.burst_size)
            .field("qps", &self.qps)
            .field("max_events", &self.max_events)
            .field("max_interval_in_seconds", &self.max_interval_in_seconds)
            .field("custom_key_func", &self.key_func.is_some())
            .field("custom_message_func", &self.message_func.is_some())
            .field("custom_spam_key_func", &self.spam_key_func.is_some())
            .finish()
    }
}

/// `v`, or `default` when `v` is its type's zero value (client-go's 0 → default option rule).
pub(crate) fn or_default<T: PartialEq + Default>(v: T, default: T) -> T {
    if v == T::default() { default } else { v }
}

/// An event to correlate, with the instants the aggregator and the spam filter should read
/// (`None`: read the correlator's clocks). Replays set both from their input lines.
///
/// The event is boxed (a core/v1 `Event` is 648 bytes): batches of occurrences move
/// pointers, and [`EventCorrelator::prepare`] keeps the same box for the [`PreparedEvent`].
#[derive(Debug, Clone, Default)]
pub struct Occurrence {
    /// The event as the recorder made it.
    pub event: Box<Event>,
    /// The aggregator's "now".
    pub clock: Option<Time>,
    /// The spam filter's "now" (defaults to `clock`, then to the spam filter's clock).
    pub spam_filter_clock: Option<Time>,
}

impl Occurrence {
    /// A recorded event replayed with its line's clocks: `clock`, else the event's own time
    /// ([`Event::occurred_at`]); the spam filter's, else the same.
    pub fn replayed(event: Event, clock: Option<Time>, spam_filter_clock: Option<Time>) -> Self {
        let clock = clock.or_else(|| event.occurred_at());
        Self { event: Box::new(event), clock, spam_filter_clock: spam_filter_clock.or(clock) }
    }
}

impl From<Event> for Occurrence {
    fn from(event: Event) -> Self {
        Self { event: Box::new(event), clock: None, spam_filter_clock: None }
    }
}

/// Which instant the correlator reads for an event (`--clock processing|event`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum CorrelationClock {
    /// The correlator's clock when the event is processed, as client-go.
    #[default]
    Processing,
    /// The event's own time ([`Event::occurred_at`]), falling back to the correlator's clock:
    /// deterministic when replaying recorded streams.
    #[value(name = "event")]
    EventTime,
}

impl CorrelationClock {
    /// `event` as an [`Occurrence`] whose clocks this choice sets: none (the correlator reads
    /// its own), or the instants its replay line gave ([`Event::recorded_clock`], as
    /// [`Occurrence::replayed`] reads them), else both from [`Event::occurred_at`].
    pub fn occurrence(self, event: Box<Event>) -> Occurrence {
        match self {
            CorrelationClock::Processing => Occurrence { event, clock: None, spam_filter_clock: None },
            CorrelationClock::EventTime => {
                let clock = event.recorded_clock.clock().or_else(|| event.occurred_at());
                let spam_filter_clock = event.recorded_clock.spam_filter_clock().or(clock);
                Occurrence { event, clock, spam_filter_clock }
            }
        }
    }
}

/// An event after the aggregator, waiting for the EventLogger and the SpamFilter.
///
/// The event keeps the [`Occurrence`]'s box: a batch moves through `prepare` and `finish` as
/// pointers.
#[derive(Debug, Clone)]
pub struct PreparedEvent {
    event: Box<Event>,
    logger_key: Key,
    spam_key: Key,
    spam_filter_clock: Option<Time>,
    aggregated: bool,
    dropped: bool,
    spam_exempt: bool,
}

impl PreparedEvent {
    /// Lets the event through the spam filter whatever its bucket holds (a `spam_exempt`
    /// rule, [`crate::tenant::rules`]); it takes no token. The EventLogger still counts it.
    pub fn exempt_from_spam_filter(&mut self) {
        self.spam_exempt = true;
    }

    /// The spam filter's "now" for this event, when the occurrence carries one (else the
    /// spam filter reads its own clock).
    pub fn clock(&self) -> Option<Time> {
        self.spam_filter_clock
    }

    /// Whether [`exempt_from_spam_filter`](Self::exempt_from_spam_filter) was called.
    pub fn spam_exempt(&self) -> bool {
        self.spam_exempt
    }

    /// Whether the aggregator replaced the event by an aggregate event.
    pub fn aggregated(&self) -> bool {
        self.aggregated
    }

    /// The key that `update_state` needs for this event once it is written as it is (a sink
    /// that stores nothing of its own, [`crate::sink::Stored::AsSent`]): client-go
    /// `getEventKey` of the written event. It is the key the EventLogger observes the event
    /// under, already computed by `prepare`, unless the aggregator replaced the event: the
    /// aggregate event's `getEventKey` contains the combined message (spec §3.5), so `None`.
    /// Give it to [`EventCorrelator::update_state_keyed`].
    pub fn state_key(&self) -> Option<Key> {
        (!self.aggregated && !self.dropped).then_some(self.logger_key)
    }

    /// Whether a key function dropped the event (see [`EventCorrelator::prepare`]).
    pub fn dropped(&self) -> bool {
        self.dropped
    }
}

/// client-go `EventCorrelateResult`: the event to write (or `None` when skipped), the patch to
/// send when it is a repeat, and whether the spam filter skipped it. Serialises as
/// `{"skip": bool, "event": Event|null, "patch": object|null}` (the replay output line).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventCorrelateResult {
    /// The spam filter dropped the event; `event` and `patch` are `None`.
    pub skip: bool,
    /// The event as observed (count, name, firstTimestamp rewritten for repeats), in the box
    /// it came in.
    pub event: Option<Box<Event>>,
    /// The strategic-merge patch for a repeat (`count > 1`), `None` for a first occurrence.
    pub patch: Option<EventPatch>,
}

/// Running totals of one correlator, for summaries and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CorrelatorStats {
    /// Events correlated.
    pub events: u64,
    /// Events the aggregator replaced by an aggregate event.
    pub aggregated: u64,
    /// Events the spam filter skipped.
    pub skipped: u64,
    /// Events a key function dropped (plugin failure under a `drop` or `fail` policy).
    pub dropped: u64,
}

/// client-go `EventCorrelator`: one per sink watcher, owned by that watcher's task.
pub struct EventCorrelator {
    aggregator: EventAggregator,
    logger: EventLogger,
    spam_filter: SpamFilter,
    key_func: Arc<dyn EventAggregatorKeyFunc>,
    message_func: Arc<dyn EventAggregatorMessageFunc>,
    spam_key_func: Arc<dyn EventSpamKeyFunc>,
    clock: SharedClock,
    spam_filter_clock: SharedClock,
    /// Every key function is built in ([`ByReason`], [`SourceObject`]): `prepare` builds the
    /// keys together ([`keys::BuiltinKeys`]) in `key_buffer`.
    builtin_keys: bool,
    key_buffer: Vec<u8>,
    stats: CorrelatorStats,
}

impl std::fmt::Debug for EventCorrelator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventCorrelator").field("stats", &self.stats).finish_non_exhaustive()
    }
}

impl EventCorrelator {
    /// client-go `NewEventCorrelatorWithOptions`: defaults filled in for zero fields.
    pub fn new(options: CorrelatorOptions) -> Self {
        // A negative size keeps nothing (a cache of capacity 0), as in client-go.
        let size = usize::try_from(or_default(options.lru_cache_size, MAX_LRU_CACHE_ENTRIES as i64)).unwrap_or(0);
        let clock = options.clock.unwrap_or_else(clock::system);
        let builtin_keys = options.key_func.is_none() && options.spam_key_func.is_none();
        Self {
            aggregator: EventAggregator::new(
                size,
                or_default(options.max_events, DEFAULT_AGGREGATE_MAX_EVENTS),
                or_default(options.max_interval_in_seconds, DEFAULT_AGGREGATE_INTERVAL_IN_SECONDS),
            ),
            logger: EventLogger::new(size),
            spam_filter: SpamFilter::new(
                size,
                or_default(options.qps, DEFAULT_SPAM_QPS),
                or_default(options.burst_size, DEFAULT_SPAM_BURST),
            ),
            key_func: options.key_func.unwrap_or_else(|| Arc::new(ByReason)),
            message_func: options.message_func.unwrap_or_else(|| Arc::new(SimilarEvents)),
            spam_key_func: options.spam_key_func.unwrap_or_else(|| Arc::new(SourceObject)),
            spam_filter_clock: options.spam_filter_clock.unwrap_or_else(|| clock.clone()),
            clock,
            builtin_keys,
            key_buffer: Vec::new(),
            stats: CorrelatorStats::default(),
        }
    }

    /// client-go `EventCorrelate` for one event, reading the correlator's clocks.
    pub fn event_correlate(&mut self, event: Event) -> EventCorrelateResult {
        let prepared = self.prepare(vec![Occurrence::from(event)]).pop().expect("one in, one out");
        self.finish(prepared)
    }

    /// Step 1 for a batch: aggregate keys, aggregation decisions, combined messages and spam keys,
    /// each key function called once for the whole batch. Returns one [`PreparedEvent`] per
    /// occurrence, in order; pass each to [`finish`](Self::finish) in that order.
    ///
    /// An event a key function drops (`None`: a plugin failed under a `drop` policy) skips the
    /// rest of correlation; `finish` reports it as skipped and counts it in
    /// [`CorrelatorStats::dropped`].
    pub fn prepare(&mut self, batch: Vec<Occurrence>) -> Vec<PreparedEvent> {
        // With every key function built in, the three keys of each event are built together;
        // else each function is called once for the whole batch.
        let builtin: Option<Vec<BuiltinKeys>> = self.builtin_keys.then(|| {
            let buffer = &mut self.key_buffer;
            batch.iter().map(|o| BuiltinKeys::of(&o.event, buffer)).collect()
        });
        let mut keys = Vec::with_capacity(batch.len());
        match &builtin {
            Some(builtin) => keys.extend(builtin.iter().map(|k| Some(k.aggregate))),
            None => self.key_func.aggregate_keys(&batch.iter().map(|o| &*o.event).collect::<Vec<_>>(), &mut keys),
        }
        keys.resize(batch.len(), None); // a short answer drops the rest rather than misaligning

        // The aggregator, in order, on the borrowed events. Aggregated events are built once
        // their messages are known.
        let mut aggregated: Vec<(usize, Time)> = Vec::new();
        let mut decisions: Vec<(Key, bool, bool)> = Vec::with_capacity(batch.len());
        for (i, (occurrence, key)) in batch.iter().zip(keys).enumerate() {
            let now = occurrence.clock.unwrap_or_else(|| self.clock.now());
            decisions.push(match key.map(|k| self.aggregator.aggregate(k, now)) {
                None => (Key::UNSET, false, true),
                Some(AggregateDecision::Original) => {
                    let event_key = builtin.as_ref().map(|b| b[i].event);
                    (event_key.unwrap_or_else(|| keys::event_cache_key(&occurrence.event)), false, false)
                }
                Some(AggregateDecision::Aggregate(aggregate_key)) => {
                    aggregated.push((i, now));
                    (aggregate_key, true, false)
                }
            });
        }
        // Then the events are moved into their boxes.
        let mut prepared: Vec<PreparedEvent> = Vec::with_capacity(batch.len());
        let mut decisions = decisions.into_iter();
        for occurrence in batch {
            let (logger_key, aggregated, dropped) = decisions.next().expect("one decision per event");
            prepared.push(PreparedEvent {
                spam_filter_clock: occurrence.spam_filter_clock.or(occurrence.clock),
                event: occurrence.event,
                logger_key,
                spam_key: Key::UNSET, // set below, once aggregate events are built
                aggregated,
                dropped,
                spam_exempt: false,
            });
        }
        self.build_aggregate_events(&mut prepared, &aggregated);

        // An aggregate event has its original's source and involved object, so the built-in
        // spam key of the original is its own.
        let mut spam_keys = Vec::with_capacity(prepared.len());
        match builtin {
            Some(builtin) => spam_keys.extend(builtin.iter().map(|k| Some(k.spam))),
            None => {
                self.spam_key_func.spam_keys(&prepared.iter().map(|p| &*p.event).collect::<Vec<_>>(), &mut spam_keys)
            }
        }
        spam_keys.resize(prepared.len(), None);
        for (p, k) in prepared.iter_mut().zip(spam_keys) {
            match k {
                Some(k) => p.spam_key = k,
                None => p.dropped = true,
            }
        }
        prepared
    }

    fn build_aggregate_events(&self, prepared: &mut [PreparedEvent], aggregated: &[(usize, Time)]) {
        if aggregated.is_empty() {
            return;
        }
        let mut messages = Vec::with_capacity(aggregated.len());
        let originals: Vec<&Event> = aggregated.iter().map(|&(i, _)| &*prepared[i].event).collect();
        self.message_func.aggregate_messages(&originals, &mut messages);
        messages.resize(aggregated.len(), None);
        for (&(i, now), message) in aggregated.iter().zip(messages) {
            match message {
                Some(message) => *prepared[i].event = aggregate_event(&prepared[i].event, message, now),
                None => prepared[i].dropped = true,
            }
        }
    }

    /// Step 2 for one event: the EventLogger (count, name, firstTimestamp, patch), then the
    /// SpamFilter on the observed event. A skipped event still counts in the aggregator window
    /// and the logger cache, as in client-go.
    pub fn finish(&mut self, prepared: PreparedEvent) -> EventCorrelateResult {
        self.finish_noting_skip(prepared, |_| {})
    }

    /// As [`finish`](Self::finish), handing the event the SpamFilter skipped (as the logger
    /// observed it) to `skipped` before it is dropped: what "N suppressed" summaries count,
    /// without copying every event in case it is skipped.
    pub fn finish_noting_skip(
        &mut self,
        prepared: PreparedEvent,
        skipped: impl FnOnce(&Event),
    ) -> EventCorrelateResult {
        const SKIP: EventCorrelateResult = EventCorrelateResult { skip: true, event: None, patch: None };
        let PreparedEvent { mut event, logger_key, spam_key, spam_filter_clock, aggregated, dropped, spam_exempt } =
            prepared;
        self.stats.events += 1;
        if dropped {
            self.stats.dropped += 1;
            return SKIP;
        }
        self.stats.aggregated += u64::from(aggregated);
        let patch = self.logger.observe(&mut event, logger_key);
        let now = spam_filter_clock.unwrap_or_else(|| self.spam_filter_clock.now());
        if !spam_exempt && self.spam_filter.filter(spam_key, now) {
            self.stats.skipped += 1;
            skipped(&event);
            return SKIP;
        }
        EventCorrelateResult { skip: false, event: Some(event), patch }
    }

    /// client-go `UpdateState`: remember the sink's copy of a written event (its name,
    /// resourceVersion, count, firstTimestamp) so the next repeat patches it.
    pub fn update_state(&mut self, event: &Event) {
        self.logger.update_state(event);
    }

    /// [`update_state`](Self::update_state) for an event written exactly as `finish` returned
    /// it, with the key [`PreparedEvent::state_key`] gave for it (`None`: computed here, as
    /// `update_state` does). A key of another event would update that event's entry.
    pub fn update_state_keyed(&mut self, event: &Event, key: Option<Key>) {
        self.logger.update_state_keyed(event, key);
    }

    /// client-go `UpdateState`'s first half for a write decided after `finish` returned
    /// `written` (see [`logger`]'s module docs): the EventLogger's `Add` of the event as sent,
    /// in correlation order. `key` as for [`update_state_keyed`](Self::update_state_keyed).
    /// Hand the answer to [`complete_write`](Self::complete_write) with the sink's copy when the
    /// write succeeds, or to [`abandon_write`](Self::abandon_write) when it fails for good.
    pub fn begin_write(&mut self, written: &Event, key: Option<Key>) -> PendingState {
        self.logger.begin_write(written, key)
    }

    /// `UpdateState`'s second half, at the acknowledgement: the sink's copy fills in the entry
    /// [`begin_write`](Self::begin_write) stamped, unless it was observed or evicted since.
    pub fn complete_write(&mut self, pending: PendingState, stored: &Event) {
        self.logger.complete_write(pending, stored);
    }

    /// A write [`begin_write`](Self::begin_write) decided failed for good: what it added is
    /// taken out again, as client-go's `UpdateState` never ran.
    pub fn abandon_write(&mut self, pending: PendingState) {
        self.logger.abandon_write(pending);
    }

    /// Totals so far.
    pub fn stats(&self) -> CorrelatorStats {
        self.stats
    }

    /// The EventLogger (for diagnostics and tests).
    pub fn logger(&self) -> &EventLogger {
        &self.logger
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn occurrence(i: i64, message: &str, resource_version: &str) -> Occurrence {
        let at: Time = "2025-01-01T00:00:00Z".parse::<Time>().unwrap() + chrono::Duration::seconds(i);
        let mut event = Event { reason: "BackOff".into(), message: message.into(), count: 1, ..Event::default() };
        event.source.component = "kubelet".into();
        event.involved_object.kind = "Pod".into();
        event.involved_object.name = "web-0".into();
        event.metadata.name = format!("web-0.{i}").into();
        event.metadata.resource_version = resource_version.into();
        event.first_timestamp = Some(at);
        event.last_timestamp = Some(at);
        Occurrence { event: Box::new(event), clock: Some(at), spam_filter_clock: Some(at) }
    }

    /// A negative `LRUCacheSize` makes client-go's caches keep nothing (groupcache's `lru`
    /// evicts what it adds when its maximum is negative): no event is a repeat, none is
    /// rate-limited (each finds a new, full bucket), and each starts its own aggregation group,
    /// so only `max_events` 1 aggregates, every event.
    #[test]
    fn a_negative_lru_cache_size_keeps_nothing_as_in_go() {
        let stream = || (0..40).map(|i| occurrence(i, "same", "7")).collect::<Vec<_>>();
        let mut c = EventCorrelator::new(CorrelatorOptions { lru_cache_size: -1, ..CorrelatorOptions::default() });
        for p in c.prepare(stream()) {
            let r = c.finish(p);
            let event = r.event.as_deref().expect("never skipped, though 40 > the burst of 25");
            assert_eq!((event.count, r.patch.is_none()), (1, true), "never a repeat");
            c.update_state(event);
        }
        let options = CorrelatorOptions { lru_cache_size: -1, max_events: 1, ..CorrelatorOptions::default() };
        let mut c = EventCorrelator::new(options);
        assert!(c.prepare(stream()).iter().all(PreparedEvent::aggregated));
    }

    /// `state_key` is client-go `getEventKey` of the event as `finish` returns it, except for an
    /// aggregate event (`None`: its key holds the combined message), and `update_state_keyed`
    /// leaves the EventLogger exactly as `update_state` does (a cleared resourceVersion included).
    #[test]
    fn the_state_key_is_the_written_events_key_unless_it_was_aggregated() {
        let options = CorrelatorOptions { max_events: 3, ..CorrelatorOptions::default() };
        let (mut keyed, mut plain) = (EventCorrelator::new(options.clone()), EventCorrelator::new(options));
        let messages = ["a", "b", "a", "c", "d", "a", "e"];
        let stream = || messages.iter().enumerate().map(|(i, m)| occurrence(i as i64, m, "7")).collect::<Vec<_>>();
        let mut aggregated = 0;
        for p in keyed.prepare(stream()) {
            let key = p.state_key();
            let was_aggregated = p.aggregated();
            let mut written = keyed.finish(p).event.expect("no event is skipped");
            written.metadata.resource_version.clear(); // as a create sends it
            if was_aggregated {
                aggregated += 1;
                assert_eq!(key, None, "an aggregate event's key is computed when it is written");
            } else {
                assert_eq!(key, Some(keys::event_cache_key(&written)));
            }
            keyed.update_state_keyed(&written, key);
        }
        for p in plain.prepare(stream()) {
            let mut written = plain.finish(p).event.expect("no event is skipped");
            written.metadata.resource_version.clear();
            plain.update_state(&written);
        }
        assert!(aggregated > 0, "the stream aggregates");
        let entries = |c: &EventCorrelator| {
            c.logger()
                .entries()
                .map(|(k, n, t, name, rv)| (k, n, t, name.to_string(), rv.to_string()))
                .collect::<Vec<_>>()
        };
        assert_eq!(entries(&keyed), entries(&plain));
    }
}
