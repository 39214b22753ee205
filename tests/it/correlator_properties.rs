//! Properties of the EventCorrelator over random streams: a written object's count never goes
//! down, nothing is skipped below the burst, nothing aggregates below `max_events`, and when
//! writes are acknowledged changes nothing.

use std::collections::{HashMap, HashSet};

use eventpipe::correlator::keys::{aggregate_by_reason, spam_key};
use eventpipe::correlator::{CorrelatorOptions, EventCorrelator, Occurrence, PendingState};
use eventpipe::event::{Event, EventSource, ObjectReference, Time};
use proptest::prelude::*;

/// One generated occurrence: which object, reason, message, and seconds since the previous one.
type Step = (u8, u8, u8, u16);

fn event(&(object, reason, message, _): &Step) -> Event {
    Event {
        involved_object: ObjectReference {
            kind: "Pod".into(),
            namespace: "ns".into(),
            name: format!("pod-{object}").into(),
            ..ObjectReference::default()
        },
        reason: format!("R{reason}").into(),
        message: format!("m{message}").into(),
        source: EventSource { component: "kubelet".into(), host: "node".into() },
        type_: "Warning".into(),
        count: 1,
        ..Event::default()
    }
}

/// Runs `steps` like a sink that always succeeds; returns (step, result event or None if skipped,
/// aggregated).
fn correlate(steps: &[Step], options: CorrelatorOptions) -> Vec<(Step, Option<Event>, bool)> {
    correlate_to(steps, options, Sink::Sequential(&[]))
}

/// How writes end.
enum Sink<'a> {
    /// client-go's loop: each write ends before the next event, with `UpdateState` unless the
    /// write's entry is `true` (it failed for good).
    Sequential(&'a [bool]),
    /// Write `i` ends `.0` events later, failing for good when `.1` is set.
    Late(&'a [(u8, bool)]),
}

/// One write in flight: due before the event of this index, whether it fails for good, what it
/// stored.
type InFlight = (usize, bool, PendingState, Event);

/// As [`correlate`], with writes ending as `sink` says.
fn correlate_to(steps: &[Step], options: CorrelatorOptions, sink: Sink<'_>) -> Vec<(Step, Option<Event>, bool)> {
    let mut correlator = EventCorrelator::new(options);
    let mut now: Time = "2025-01-01T00:00:00Z".parse().unwrap();
    let mut out = Vec::new();
    let mut in_flight: Vec<InFlight> = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        // Acknowledgements due now, in the order they fall due.
        in_flight.sort_by_key(|w| w.0);
        let due = in_flight.iter().take_while(|w| w.0 <= i).count();
        for (_, fails, pending, stored) in in_flight.drain(..due) {
            match fails {
                true => correlator.abandon_write(pending),
                false => correlator.complete_write(pending, &stored),
            }
        }
        // A real clock never reads the same instant twice; aggregate events are named after the
        // clock (`<object>.<UnixNano>`, as client-go), so two groups firing at one instant would
        // share a name that no server would let both create.
        now += chrono::Duration::seconds(i64::from(step.3)) + chrono::Duration::nanoseconds(1);
        let mut e = event(step);
        // Recorder-style: every occurrence gets its own name; repeats take the first one's.
        e.metadata.name = format!("{}.{i:x}", e.involved_object.name).into();
        e.first_timestamp = Some(now);
        e.last_timestamp = Some(now);
        let p = correlator
            .prepare(vec![Occurrence { event: Box::new(e), clock: Some(now), spam_filter_clock: Some(now) }])
            .pop()
            .unwrap();
        let aggregated = p.aggregated();
        let key = p.state_key();
        let r = correlator.finish(p);
        if let Some(e) = &r.event {
            match sink {
                Sink::Sequential(fails) if fails.get(i) == Some(&true) => {}
                Sink::Sequential(_) => correlator.update_state(e),
                Sink::Late(acks) => {
                    let (later, fails) = acks[i];
                    let pending = correlator.begin_write(e, key);
                    in_flight.push((i + 1 + usize::from(later), fails, pending, (**e).clone()));
                }
            }
        }
        out.push((*step, r.event.map(|e| *e), aggregated));
    }
    out
}

fn steps(objects: u8, reasons: u8, messages: u8, max_gap: u16) -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec((0..objects, 0..reasons, 0..messages, 0..=max_gap), 1..400)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, ..ProptestConfig::default() })]

    /// The count written for an event name (one server object) strictly increases.
    #[test]
    fn count_never_decreases_for_a_key(steps in steps(4, 3, 12, 900), burst in 1i64..40, max_events in 1i64..12) {
        let options = CorrelatorOptions { burst_size: burst, max_events, ..CorrelatorOptions::default() };
        let mut last: HashMap<String, i32> = HashMap::new();
        for (_, e, _) in correlate(&steps, options) {
            let Some(e) = e else { continue };
            if let Some(prev) = last.insert(e.metadata.name.to_string(), e.count) {
                prop_assert!(e.count > prev, "{} went from {prev} to {}", e.metadata.name, e.count);
            }
        }
    }

    /// No event is skipped while its spam key has been seen at most `burst` times.
    #[test]
    fn skip_never_happens_below_burst(steps in steps(6, 4, 8, 5), burst in 1i64..30) {
        let options = CorrelatorOptions { burst_size: burst, max_events: -1, ..CorrelatorOptions::default() };
        let mut seen: HashMap<String, i64> = HashMap::new();
        for (step, e, _) in correlate(&steps, options) {
            let n = seen.entry(spam_key(&event(&step))).or_default();
            *n += 1;
            if *n <= burst {
                prop_assert!(e.is_some(), "occurrence {n} of a key skipped with burst {burst}");
            }
        }
    }

    /// No event aggregates while its group has fewer than `max_events` distinct messages in all.
    #[test]
    fn aggregation_never_fires_below_max_events(steps in steps(3, 3, 20, 60), max_events in 2i64..15) {
        let options = CorrelatorOptions { max_events, burst_size: 1_000_000, ..CorrelatorOptions::default() };
        let mut distinct: HashMap<String, HashSet<String>> = HashMap::new();
        for (step, _, aggregated) in correlate(&steps, options) {
            let (aggregate, local) = aggregate_by_reason(&event(&step));
            let messages = distinct.entry(aggregate).or_default();
            messages.insert(local);
            if (messages.len() as i64) < max_events {
                prop_assert!(!aggregated, "aggregated with {} distinct messages < {max_events}", messages.len());
            }
        }
    }

    /// However late each write is acknowledged, and with writes failing for good, the results
    /// are those of client-go's sequential loop (`recordToSink` → `UpdateState` before the next
    /// event) with the same failures, also while objects outnumber the LRU caches many times
    /// over (evictions) and with aggregation (whose `UpdateState` adds an entry of its own).
    /// The one exception the logger documents, an aggregate event's write failing for good,
    /// is left out: those writes succeed here.
    #[test]
    fn acknowledgement_timing_never_changes_the_output(
        steps in steps(24, 3, 14, 30),
        acks in prop::collection::vec((0u8..40, prop::bool::weighted(0.1)), 400),
        lru_cache_size in 2i64..12,
        max_events in 2i64..6,
    ) {
        let options = || CorrelatorOptions { lru_cache_size, max_events, burst_size: 6, ..CorrelatorOptions::default() };
        // Aggregate events' writes never fail (the documented exception).
        let plain = correlate(&steps, options());
        let acks: Vec<(u8, bool)> = acks.iter().zip(&plain).map(|(&(later, fails), (_, _, agg))| (later, fails && !agg)).collect();
        let fails: Vec<bool> = acks.iter().map(|a| a.1).collect();
        let expected = correlate_to(&steps, options(), Sink::Sequential(&fails));
        let actual = correlate_to(&steps, options(), Sink::Late(&acks));
        prop_assert_eq!(actual, expected);
    }
}
