//! "N suppressed" summaries: client-go's spam filter drops silently; with
//! `suppressed_summary_seconds = N` a tenant gets, at the end of each window of N seconds in
//! which the spam filter skipped events about one object from one source, one event saying how
//! many were skipped and for which reasons.
//!
//! A window opens at the first skipped event of a subject (the involved object and the source:
//! what client-go's spam key is made of) and closes N seconds later by the correlator's clock
//! (the events' own time by default, the wall clock with `--clock processing`), or when the run
//! ends. The summary is a new event:
//!
//! - `reason` [`REASON`], `type` `Normal`, the skipped events' `involvedObject`, `source`,
//!   `reportingComponent` / `reportingInstance` and namespace;
//! - `message`: `41 events suppressed in the last 5m: BackOff ×38, Unhealthy ×3` (reasons by
//!   count, then name);
//! - `metadata.name`: `<involvedObject.name>.<hex unix nanos of the window's end>` (as client-go
//!   names events), `count` 1, `firstTimestamp` / `lastTimestamp` the first and last skipped
//!   event's time.
//!
//! Each summary is written as a create to the tenant's sinks, like any event, but is not
//! correlated itself (its own spam bucket is the empty one that caused it) and counts neither
//! as read nor as finished.
//!
//! Open windows are state like the correlator's: a snapshot carries them
//! ([`SuppressedSummaries::export`], [`crate::correlator::snapshot::SummaryWindow`]) and a
//! restore brings them back ([`SuppressedSummaries::import`]), so that after a restart the
//! summary still counts the events skipped before the snapshot, and counts once those
//! correlated again after it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::correlator::keys::Key;
use crate::correlator::snapshot::{Instant, SummaryWindow};
use crate::event::{Event, EventSource, ObjectMeta, ObjectReference, Time};

/// The reason of a summary event.
pub const REASON: &str = "EventsSuppressed";

/// What a window is about: the involved object and the source, as the summary names them.
#[derive(Debug, Clone)]
struct Subject {
    namespace: String,
    object: ObjectReference,
    source: EventSource,
    reporting_component: String,
    reporting_instance: String,
}

/// One open window.
#[derive(Debug)]
struct Window {
    subject: Subject,
    seconds: u64,
    first: Time,
    /// `first` + `seconds`: when the window closes.
    closes: Time,
    last: Time,
    total: u64,
    reasons: BTreeMap<String, u64>,
}

/// The open windows of one router partition, by tenant and a digest of the subject's fields
/// (an event skipped again costs a lookup, not a copy of its strings).
#[derive(Debug, Default)]
pub struct SuppressedSummaries {
    windows: HashMap<(Arc<str>, Key), Window>,
    /// When the earliest open window closes: [`due`](Self::due) before it costs nothing.
    next_due: Option<Time>,
}

impl SuppressedSummaries {
    /// Whether no window is open.
    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }

    /// Counts `event`, skipped by `tenant`'s spam filter at `now`, in its subject's window
    /// (opening one of `seconds` if there is none).
    pub fn record(&mut self, tenant: &Arc<str>, seconds: u64, event: &Event, now: Time) {
        let (o, s) = (&event.involved_object, &event.source);
        let fields =
            [&event.metadata.namespace, &o.kind, &o.namespace, &o.name, &o.uid, &o.api_version, &s.component, &s.host];
        let [a, b, c, d, e, f, g, h] = fields.map(|f| f.as_str());
        let key = Key::of_parts([a, "\0", b, "\0", c, "\0", d, "\0", e, "\0", f, "\0", g, "\0", h, "\0"]);
        let window = self.windows.entry((tenant.clone(), key)).or_insert_with(|| {
            let closes = now + chrono::Duration::seconds(seconds as i64);
            self.next_due = Some(self.next_due.map_or(closes, |t| t.min(closes)));
            Window {
                subject: Subject {
                    namespace: event.metadata.namespace.to_string(),
                    object: o.clone(),
                    source: s.clone(),
                    reporting_component: event.reporting_component.to_string(),
                    reporting_instance: event.reporting_instance.to_string(),
                },
                seconds,
                first: now,
                closes,
                last: now,
                total: 0,
                reasons: BTreeMap::new(),
            }
        });
        window.last = window.last.max(now);
        window.total += 1;
        match window.reasons.get_mut(event.reason.as_str()) {
            Some(n) => *n += 1,
            None => {
                window.reasons.insert(event.reason.to_string(), 1);
            }
        }
    }

    /// The summaries of the windows closed by `now` (opened `seconds` or more before it), with
    /// their tenants, oldest first; those windows are forgotten.
    pub fn due(&mut self, now: Time) -> Vec<(Arc<str>, Event)> {
        if self.next_due.is_none_or(|t| now < t) {
            return Vec::new();
        }
        let closed: Vec<(Arc<str>, Key)> =
            self.windows.iter().filter(|(_, w)| now >= w.closes).map(|(k, _)| k.clone()).collect();
        let mut out: Vec<(Arc<str>, Event)> =
            closed.into_iter().filter_map(|k| self.windows.remove(&k).map(|w| (k.0, summary(w)))).collect();
        out.sort_by(|a, b| (a.1.first_timestamp, &a.1.metadata.name).cmp(&(b.1.first_timestamp, &b.1.metadata.name)));
        self.next_due = self.windows.values().map(|w| w.closes).min();
        out
    }

    /// Every open window's summary (the run ends), oldest first.
    pub fn flush(&mut self) -> Vec<(Arc<str>, Event)> {
        self.due(Time::MAX_UTC)
    }

    /// `tenant`'s open windows as data, soonest to close first (for a snapshot).
    pub fn export(&self, tenant: &str) -> Vec<SummaryWindow> {
        let mut out: Vec<SummaryWindow> = self
            .windows
            .iter()
            .filter(|((t, _), _)| &**t == tenant)
            .map(|((_, key), w)| SummaryWindow {
                key: key.to_bytes(),
                namespace: w.subject.namespace.clone(),
                object: (&w.subject.object).into(),
                source_component: w.subject.source.component.to_string(),
                source_host: w.subject.source.host.to_string(),
                reporting_component: w.subject.reporting_component.clone(),
                reporting_instance: w.subject.reporting_instance.clone(),
                seconds: w.seconds,
                first: w.first.into(),
                closes: w.closes.into(),
                last: w.last.into(),
                total: w.total,
                reasons: w.reasons.iter().map(|(r, n)| (r.clone(), *n)).collect(),
            })
            .collect();
        out.sort_by_key(|a| (a.closes.secs, a.closes.nanos, a.key));
        out
    }

    /// Opens `tenant`'s windows from a snapshot ([`export`](Self::export)'s data); a window
    /// whose times are out of range is left out.
    pub fn import(&mut self, tenant: &Arc<str>, windows: Vec<SummaryWindow>) {
        let time = |i: Instant| i.time();
        for w in windows {
            let (Some(first), Some(closes), Some(last)) = (time(w.first), time(w.closes), time(w.last)) else {
                continue;
            };
            let window = Window {
                subject: Subject {
                    namespace: w.namespace,
                    object: w.object.into(),
                    source: EventSource { component: w.source_component.into(), host: w.source_host.into() },
                    reporting_component: w.reporting_component,
                    reporting_instance: w.reporting_instance,
                },
                seconds: w.seconds,
                first,
                closes,
                last,
                total: w.total,
                reasons: w.reasons.into_iter().collect(),
            };
            self.next_due = Some(self.next_due.map_or(closes, |t| t.min(closes)));
            self.windows.insert((tenant.clone(), Key::from_bytes(w.key)), window);
        }
    }
}

/// `5m`, `1h`, `90s`.
fn human(seconds: u64) -> String {
    match seconds {
        s if s >= 3600 && s % 3600 == 0 => format!("{}h", s / 3600),
        s if s >= 60 && s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

fn summary(window: Window) -> Event {
    let (subject, end) = (window.subject, window.closes);
    let mut reasons: Vec<(&String, &u64)> = window.reasons.iter().collect();
    reasons.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let by_reason: Vec<String> = reasons.iter().map(|(r, n)| format!("{r} ×{n}")).collect();
    let message = format!(
        "{} event{} suppressed in the last {}: {}",
        window.total,
        if window.total == 1 { "" } else { "s" },
        human(window.seconds),
        by_reason.join(", ")
    );
    let name = crate::event::generate_event_name(&subject.object.name, crate::clock::go_unix_nano(end));
    Event {
        kind: "Event".into(),
        api_version: "v1".into(),
        metadata: ObjectMeta { name: name.into(), namespace: subject.namespace.into(), ..ObjectMeta::default() },
        involved_object: subject.object,
        reason: REASON.into(),
        message: message.into(),
        source: subject.source,
        first_timestamp: Some(window.first),
        last_timestamp: Some(window.last),
        count: 1,
        type_: crate::event::EVENT_TYPE_NORMAL.into(),
        reporting_component: subject.reporting_component.into(),
        reporting_instance: subject.reporting_instance.into(),
        ..Event::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(object: &str, reason: &str) -> Event {
        let mut e = Event::default();
        e.metadata.namespace = "ns".into();
        e.involved_object = ObjectReference { kind: "Pod".into(), name: object.into(), ..ObjectReference::default() };
        e.source.component = "kubelet".into();
        e.reason = reason.into();
        e
    }

    fn at(s: &str) -> Time {
        s.parse().unwrap()
    }

    #[test]
    fn a_window_closes_after_its_seconds_with_counts_by_reason() {
        let tenant: Arc<str> = "t".into();
        let mut s = SuppressedSummaries::default();
        for (i, reason) in ["BackOff", "Unhealthy", "BackOff", "BackOff"].iter().enumerate() {
            s.record(
                &tenant,
                300,
                &event("web-0", reason),
                at("2025-01-01T00:00:00Z") + chrono::Duration::seconds(i as i64),
            );
        }
        s.record(&tenant, 300, &event("web-1", "BackOff"), at("2025-01-01T00:02:00Z"));
        assert!(s.due(at("2025-01-01T00:04:59Z")).is_empty(), "no window is 5 minutes old yet");
        let due = s.due(at("2025-01-01T00:05:00Z"));
        assert_eq!(due.len(), 1);
        let (t, e) = &due[0];
        assert_eq!((&**t, e.involved_object.name.as_str(), e.reason.as_str()), ("t", "web-0", REASON));
        assert_eq!(e.message, "4 events suppressed in the last 5m: BackOff ×3, Unhealthy ×1");
        assert_eq!(
            (e.first_timestamp, e.last_timestamp),
            (Some(at("2025-01-01T00:00:00Z")), Some(at("2025-01-01T00:00:03Z")))
        );
        assert!(e.metadata.name.starts_with("web-0."), "{}", e.metadata.name);
        assert_eq!((e.count, e.type_.as_str(), e.metadata.namespace.as_str()), (1, "Normal", "ns"));
        let rest = s.flush();
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].1.message, "1 event suppressed in the last 5m: BackOff ×1");
        assert!(s.is_empty());
        assert_eq!((human(90), human(3600), human(120)), ("90s".to_string(), "1h".to_string(), "2m".to_string()));
    }

    /// A snapshot's windows (encoded and decoded as a snapshot) open again where they were: a
    /// restarted partition goes on counting into them, and the summaries are what one run
    /// without the restart writes.
    #[test]
    fn windows_survive_a_snapshot_and_go_on_counting() {
        use crate::correlator::snapshot::{PartitionSnapshot, TenantSnapshot};
        let (t, other): (Arc<str>, Arc<str>) = ("t".into(), "other".into());
        let mut event = event("web-0", "BackOff");
        event.involved_object.uid = "u-1".into();
        event.source.host = "node-1".into();
        event.reporting_component = "kubelet".into();
        let record = |s: &mut SuppressedSummaries, reason: &str, at_: &str| {
            let mut e = event.clone();
            e.reason = reason.into();
            s.record(&t, 300, &e, at(at_));
        };
        let mut whole = SuppressedSummaries::default();
        let mut before = SuppressedSummaries::default();
        for s in [&mut whole, &mut before] {
            record(s, "BackOff", "2025-01-01T00:00:00Z");
            record(s, "Unhealthy", "2025-01-01T00:01:00Z");
            s.record(&other, 60, &event, at("2025-01-01T00:00:30Z"));
        }
        let state = before.export("t");
        assert_eq!(state.len(), 1, "only the tenant's own windows");
        let snapshot = PartitionSnapshot {
            key_seed: crate::correlator::keys::key_seed(),
            partition: 0,
            partitions: 1,
            sequence: 3,
            taken_at_ms: 0,
            tenants: vec![TenantSnapshot {
                tenant: "t".into(),
                state: crate::correlator::EventCorrelator::new(Default::default()).snapshot("k"),
                summaries: state,
            }],
        };
        let decoded = PartitionSnapshot::decode(&snapshot.encode()).unwrap();
        let mut after = SuppressedSummaries::default();
        after.import(&t, decoded.tenants.into_iter().next().unwrap().summaries);
        for s in [&mut whole, &mut after] {
            record(s, "BackOff", "2025-01-01T00:02:00Z");
        }
        let summaries = |s: &mut SuppressedSummaries| -> Vec<Event> {
            s.due(at("2025-01-01T00:05:00Z")).into_iter().filter(|(n, _)| n == &t).map(|(_, e)| e).collect()
        };
        let (expected, got) = (summaries(&mut whole), summaries(&mut after));
        assert_eq!(expected.len(), 1);
        assert_eq!(expected[0].message, "3 events suppressed in the last 5m: BackOff ×2, Unhealthy ×1");
        assert_eq!(got, expected);
        assert!(after.is_empty());
    }
}
