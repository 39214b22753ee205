//! Unit tests of the watch cache: resume inside the window, 410 beyond it, slow watchers cut off
//! while the others keep their pace, filter transitions, TTL and the object bound, and lists
//! at a past resourceVersion.

use std::time::Duration;

use super::*;
use crate::clock::ManualClock;

fn event(ns: &str, name: &str, reason: &str) -> Event {
    let mut e = Event::default();
    e.metadata.namespace = ns.into();
    e.metadata.name = name.into();
    e.involved_object.kind = "Pod".into();
    e.involved_object.namespace = ns.into();
    e.involved_object.name = name.split('.').next().unwrap_or(name).into();
    e.reason = reason.into();
    e.type_ = "Normal".into();
    e.count = 1;
    e
}

fn config(window: usize) -> WatchCacheConfig {
    WatchCacheConfig { window_size: window, ..WatchCacheConfig::default() }
}

fn cache(window: usize) -> Arc<WatchCache> {
    WatchCache::new(config(window), crate::clock::system())
}

fn count_patch(n: i32) -> Vec<u8> {
    format!(r#"{{"count":{n}}}"#).into_bytes()
}

/// (type, name, resourceVersion, count) of what a watcher was sent.
fn seen(events: &[Served]) -> Vec<(WatchEventType, String, u64, i32)> {
    events
        .iter()
        .map(|s| (s.type_, s.object.event.metadata.name.to_string(), s.object.rv, s.object.event.count))
        .collect()
}

fn everything() -> Predicate {
    Predicate::default()
}

#[test]
fn a_resume_inside_the_window_replays_exactly_the_missed_changes() {
    let cache = cache(100);
    cache.create(&event("a", "x.1", "Started")).unwrap(); // rv 1
    cache.create(&event("a", "y.1", "Started")).unwrap(); // rv 2
    let (_, mut watcher) = cache.cursor(Start::Now, everything()).unwrap();
    cache.patch("a", "x.1", &count_patch(2)).unwrap(); // rv 3
    let got = watcher.poll(10).unwrap();
    assert_eq!(seen(&got), [(WatchEventType::Modified, "x.1".into(), 3, 2)]);
    let stopped_at = watcher.resource_version();
    assert_eq!(stopped_at, 3);
    drop(watcher);

    // While it is away: a patch, a create and another patch.
    cache.patch("a", "y.1", &count_patch(2)).unwrap(); // rv 4
    cache.create(&event("b", "z.1", "Pulled")).unwrap(); // rv 5
    cache.patch("a", "x.1", &count_patch(3)).unwrap(); // rv 6

    let (initial, mut resumed) = cache.cursor(Start::After(stopped_at), everything()).unwrap();
    assert!(initial.is_empty(), "a resume sends no initial state");
    let got = resumed.poll(100).unwrap();
    assert_eq!(
        seen(&got),
        [
            (WatchEventType::Modified, "y.1".into(), 4, 2),
            (WatchEventType::Added, "z.1".into(), 5, 1),
            (WatchEventType::Modified, "x.1".into(), 6, 3),
        ],
        "exactly the missed changes, in order, none twice"
    );
    assert!(resumed.poll(100).unwrap().is_empty(), "then nothing until a new change");
    cache.patch("b", "z.1", &count_patch(2)).unwrap(); // rv 7
    assert_eq!(seen(&resumed.poll(100).unwrap()), [(WatchEventType::Modified, "z.1".into(), 7, 2)]);

    // The stored objects carry their resourceVersion on the wire.
    let x = cache.get("a", "x.1").unwrap();
    let json: serde_json::Value = serde_json::from_slice(&x.json()).unwrap();
    assert_eq!((json["metadata"]["resourceVersion"].as_str(), json["count"].as_i64()), (Some("6"), Some(3)));
}

#[test]
fn a_resource_version_beyond_the_window_is_too_old() {
    let cache = cache(3);
    for i in 0..5 {
        cache.create(&event("a", &format!("e.{i}"), "Started")).unwrap();
    }
    // Window: changes 3, 4, 5; a reader must have seen 2 or later.
    assert!(cache.cursor(Start::After(2), everything()).is_ok());
    let err = cache.cursor(Start::After(1), everything()).unwrap_err();
    assert_eq!(err, TooOld { asked: 1, oldest: 2 });
    assert_eq!(err.to_string(), "too old resource version: 1 (oldest retained: 2)");
    assert!(cache.list(&everything(), Some(1)).is_err(), "an exact list there is too old as well");

    // A watcher that falls behind by more than the window gets the same answer when it reads.
    let (_, mut slow) = cache.cursor(Start::Now, everything()).unwrap();
    for i in 5..9 {
        cache.create(&event("a", &format!("e.{i}"), "Started")).unwrap();
    }
    assert_eq!(slow.poll(10).unwrap_err(), TooOld { asked: 5, oldest: 6 });
    assert_eq!(cache.stats().too_old, 3);
}

#[test]
fn filters_turn_changes_into_added_modified_and_deleted() {
    let cache = cache(100);
    let warnings = Predicate { fields: FieldSelector::parse("type=Warning").unwrap(), ..Predicate::default() };
    let labelled = Predicate { labels: LabelSelector::parse("team=pay").unwrap(), ..Predicate::default() };
    let (_, mut w) = cache.cursor(Start::Now, warnings).unwrap();
    let (_, mut l) = cache.cursor(Start::Now, labelled).unwrap();
    let (_, mut all) = cache.cursor(Start::Now, everything()).unwrap();

    cache.create(&event("a", "x.1", "BackOff")).unwrap(); // rv 1: Normal, no labels
    cache.patch("a", "x.1", br#"{"type":"Warning","count":2}"#).unwrap(); // rv 2: starts matching
    cache.patch("a", "x.1", br#"{"count":3}"#).unwrap(); // rv 3: still matching
    cache.patch("a", "x.1", br#"{"type":"Normal","count":4}"#).unwrap(); // rv 4: stops matching
    cache.patch("a", "x.1", br#"{"metadata":{"labels":{"team":"pay"}},"count":5}"#).unwrap(); // rv 5

    let got = w.poll(100).unwrap();
    assert_eq!(
        seen(&got),
        [
            (WatchEventType::Added, "x.1".into(), 2, 2),
            (WatchEventType::Modified, "x.1".into(), 3, 3),
            // The version it last matched, with the change's resourceVersion (as the apiserver).
            (WatchEventType::Deleted, "x.1".into(), 4, 3),
        ]
    );
    assert_eq!(got[2].object.event.type_, "Warning", "DELETED carries the last matching state");
    assert_eq!(w.resource_version(), 5, "the filtered-out change still moves it on");
    assert_eq!(seen(&l.poll(100).unwrap()), [(WatchEventType::Added, "x.1".into(), 5, 5)]);
    let types: Vec<_> = all.poll(100).unwrap().iter().map(|s| s.type_).collect();
    assert_eq!(
        types,
        [
            WatchEventType::Added,
            WatchEventType::Modified,
            WatchEventType::Modified,
            WatchEventType::Modified,
            WatchEventType::Modified
        ]
    );

    // A namespace predicate never sees other namespaces' events.
    let (_, mut b) =
        cache.cursor(Start::Now, Predicate { namespace: Some("b".into()), ..Predicate::default() }).unwrap();
    cache.create(&event("a", "y.1", "Pulled")).unwrap();
    cache.create(&event("b", "y.1", "Pulled")).unwrap();
    let got = b.poll(10).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].object.event.metadata.namespace, "b");
}

#[test]
fn a_watch_of_the_state_starts_with_added_for_every_selected_event() {
    let cache = cache(100);
    cache.create(&event("a", "x.1", "BackOff")).unwrap();
    cache.create(&event("a", "y.1", "Pulled")).unwrap();
    cache.create(&event("b", "z.1", "BackOff")).unwrap();
    let backoff = Predicate { fields: FieldSelector::parse("reason=BackOff").unwrap(), ..Predicate::default() };
    let (initial, mut cursor) = cache.cursor(Start::State, backoff).unwrap();
    assert_eq!(
        seen(&initial),
        [(WatchEventType::Added, "x.1".into(), 1, 1), (WatchEventType::Added, "z.1".into(), 3, 1)]
    );
    assert_eq!(cursor.resource_version(), 3);
    assert!(cursor.poll(10).unwrap().is_empty());
}

#[test]
fn events_leave_by_ttl_and_by_the_object_bound_as_deleted_changes() {
    let clock = ManualClock::new(chrono::DateTime::from_timestamp(1_700_000_000, 0).unwrap());
    let config = WatchCacheConfig {
        max_objects: 2,
        event_ttl: Duration::from_secs(60),
        window_age: Duration::from_secs(3600),
        ..WatchCacheConfig::default()
    };
    let cache = WatchCache::new(config, clock.clone());
    let (_, mut all) = cache.cursor(Start::Now, everything()).unwrap();
    cache.create(&event("a", "x.1", "A")).unwrap(); // rv 1
    clock.advance(Duration::from_secs(30));
    cache.create(&event("a", "y.1", "B")).unwrap(); // rv 2
    cache.patch("a", "x.1", &count_patch(2)).unwrap(); // rv 3: x is now the most recent
    cache.create(&event("a", "z.1", "C")).unwrap(); // rv 4, then y (least recently changed) is deleted: rv 5
    assert_eq!(cache.stats().evicted, 1);
    let got = seen(&all.poll(100).unwrap());
    assert_eq!(got.last(), Some(&(WatchEventType::Deleted, "y.1".into(), 5, 1)));
    assert!(cache.get("a", "y.1").is_none());

    clock.advance(Duration::from_secs(61));
    cache.expire(); // x (changed at 30 s) and z (30 s) are past their 60 s TTL
    let got = seen(&all.poll(100).unwrap());
    assert_eq!(got, [(WatchEventType::Deleted, "x.1".into(), 6, 2), (WatchEventType::Deleted, "z.1".into(), 7, 1)]);
    let stats = cache.stats();
    assert_eq!((stats.objects, stats.expired_ttl, stats.resource_version), (0, 2, 7));
}

#[test]
fn a_list_at_a_past_resource_version_is_the_state_then() {
    let cache = cache(100);
    cache.create(&event("a", "x.1", "A")).unwrap(); // 1
    cache.create(&event("a", "y.1", "B")).unwrap(); // 2
    let (rv, then) = cache.list(&everything(), None).unwrap();
    assert_eq!(rv, 2);
    cache.patch("a", "x.1", &count_patch(2)).unwrap(); // 3
    cache.create(&event("a", "w.1", "C")).unwrap(); // 4
    let (rv, past) = cache.list(&everything(), Some(2)).unwrap();
    assert_eq!(rv, 2);
    let names = |v: &[Arc<Version>]| v.iter().map(|v| (v.event.metadata.name.to_string(), v.rv)).collect::<Vec<_>>();
    assert_eq!(names(&past), names(&then));
    assert_eq!(names(&past), [("x.1".to_string(), 1), ("y.1".to_string(), 2)]);
    let (_, now) = cache.list(&everything(), None).unwrap();
    assert_eq!(names(&now), [("w.1".to_string(), 4), ("x.1".to_string(), 3), ("y.1".to_string(), 2)]);
}

#[test]
fn apiserver_answers_for_duplicates_and_unknown_patches() {
    let cache = cache(10);
    cache.create(&event("a", "x.1", "A")).unwrap();
    assert_eq!(cache.create(&event("a", "x.1", "A")), Err(WriteError::AlreadyExists("x.1".into())));
    assert_eq!(cache.patch("a", "nope", b"{}"), Err(WriteError::NotFound("nope".into())));
    assert!(matches!(cache.patch("a", "x.1", b"[1]"), Err(WriteError::BadPatch(_))));
    assert!(matches!(cache.patch("a", "x.1", br#"{"count":"many"}"#), Err(WriteError::BadPatch(_))));
    let patched = cache.patch("a", "x.1", br#"{"metadata":{"name":"other"},"message":"m"}"#).unwrap();
    assert_eq!((patched.metadata.name.as_str(), patched.message.as_str()), ("x.1", "m"), "the name stays");
    let replaced = cache.update(&event("a", "x.1", "Z"));
    assert_eq!((replaced.reason.as_str(), replaced.metadata.resource_version.as_str()), ("Z", "3"));
}

#[tokio::test]
async fn a_slow_watcher_is_cut_off_after_its_budget_while_the_others_keep_their_pace() {
    let config = WatchCacheConfig { watcher_queue: 4, watcher_budget: Duration::from_secs(1), ..config(1000) };
    let cache = WatchCache::new(config, crate::clock::system());
    let mut slow = cache.stream(Start::Now, everything(), false, false).unwrap();
    let fast: Vec<_> = (0..3).map(|_| cache.stream(Start::Now, everything(), false, false).unwrap()).collect();
    let readers: Vec<_> = fast
        .into_iter()
        .map(|mut stream| {
            tokio::spawn(async move {
                let mut rvs = Vec::new();
                while rvs.len() < 50 {
                    match stream.recv().await {
                        Some(Frame::Event(s)) => rvs.push(s.object.rv),
                        other => panic!("unexpected {other:?}"),
                    }
                }
                (rvs, tokio::time::Instant::now())
            })
        })
        .collect();
    let started = tokio::time::Instant::now();
    for i in 0..50 {
        cache.create(&event("a", &format!("e.{i}"), "A")).unwrap();
        tokio::task::yield_now().await;
    }
    for reader in readers {
        let (rvs, done) = tokio::time::timeout(Duration::from_secs(10), reader).await.unwrap().unwrap();
        assert_eq!(rvs, (1..=50).collect::<Vec<u64>>(), "every change, in order");
        assert!(done - started < Duration::from_secs(1), "the fast watchers never waited for the slow one");
    }
    // The slow watcher never read: after the budget its watch ends, with the reason.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let end = slow.end().expect("cut off");
    let End::CutOff { rv, behind, .. } = end.clone() else { panic!("{end:?}") };
    assert!(end.to_string().contains("stayed full for 1s"), "{end}");
    assert_eq!(cache.stats().cut_off, 1);
    // What it had queued still arrives, then the stream ends; it resumes where it stopped.
    let mut got = Vec::new();
    while let Some(frame) = slow.recv().await {
        let Frame::Event(s) = frame else { panic!("{frame:?}") };
        got.push(s.object.rv);
    }
    assert_eq!(got.last(), Some(&rv), "the last rv queued is the one to resume from");
    assert_eq!(behind, 50 - rv);
    let (_, mut resumed) = cache.cursor(Start::After(rv), everything()).unwrap();
    let rest: Vec<u64> = resumed.poll(1000).unwrap().iter().map(|s| s.object.rv).collect();
    assert_eq!(rest, (rv + 1..=50).collect::<Vec<u64>>(), "the window holds the rest");
}

#[tokio::test]
async fn a_stream_sends_bookmarks_and_the_initial_events_end() {
    let config = WatchCacheConfig { bookmark_interval: Duration::from_millis(50), ..config(100) };
    let cache = WatchCache::new(config, crate::clock::system());
    cache.create(&event("a", "x.1", "A")).unwrap();
    let mut stream = cache.stream(Start::State, everything(), true, true).unwrap();
    assert!(matches!(stream.recv().await, Some(Frame::Event(s)) if s.type_ == WatchEventType::Added));
    assert!(matches!(stream.recv().await, Some(Frame::Bookmark { rv: 1, initial_events_end: true })));
    assert!(matches!(stream.recv().await, Some(Frame::Bookmark { rv: 1, initial_events_end: false })));
    cache.close();
    while stream.recv().await.is_some() {}
    assert_eq!(stream.end(), Some(End::Closed));
}

/// The flags win over the config's `[watch_cache]`, which wins over the defaults; 0 for the
/// window or a queue counts as 1; a budget or bookmark interval must be positive.
#[test]
fn settings_take_the_flags_then_the_config_then_the_defaults() {
    let flags = WatchCacheSettings { size: Some(5), budget_seconds: Some(2.5), ..WatchCacheSettings::default() };
    let config = WatchCacheSettings {
        size: Some(50),
        event_ttl_seconds: Some(120),
        queue_length: Some(0),
        ..WatchCacheSettings::default()
    };
    let c = flags.or(config).resolve().unwrap();
    assert_eq!(
        (c.window_size, c.event_ttl, c.watcher_budget),
        (5, Duration::from_secs(120), Duration::from_millis(2500))
    );
    assert_eq!(c.watcher_queue, 1, "0 counts as 1");
    assert_eq!(
        (c.window_age, c.max_objects, c.bookmark_interval),
        (DEFAULT_WINDOW_AGE, DEFAULT_MAX_OBJECTS, DEFAULT_BOOKMARK_INTERVAL)
    );
    assert_eq!(WatchCacheSettings::default().resolve().unwrap(), WatchCacheConfig::default());
    let bad = WatchCacheSettings { bookmark_interval_seconds: Some(0.0), ..WatchCacheSettings::default() };
    let error = bad.resolve().unwrap_err();
    assert!(error.contains("--watch-bookmark-interval") && error.contains("positive number of seconds"), "{error}");
}

#[test]
fn a_continuing_cache_starts_above_the_clock_and_the_saved_mark_and_keeps_the_mark_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let mark = resource_version::HighWaterMark::new(dir.path().join("state.json.resource-version"));
    let clock = crate::clock::system();
    // No mark yet: the time floor (microseconds since the epoch), saved with a reserve.
    let first = WatchCache::continuing(config(10), clock.clone(), Some(mark.clone()));
    let floor = first.resource_version();
    assert!(floor > 1_700_000_000_000_000, "{floor}");
    assert_eq!(mark.load().unwrap(), Some(floor + 1 + resource_version::RESERVE));
    let stored = first.create(&event("a", "x.1", "A")).unwrap();
    assert_eq!(stored.metadata.resource_version.parse::<u64>().unwrap(), floor + 1);

    // A mark far ahead of the clock (a clock stepped back): the next process starts above it.
    let ahead = floor + (1 << 40);
    mark.store(ahead).unwrap();
    let second = WatchCache::continuing(config(10), clock.clone(), Some(mark.clone()));
    assert_eq!(second.resource_version(), ahead);
    second.create(&event("a", "x.1", "A")).unwrap();
    assert_eq!(second.resource_version(), ahead + 1);
    assert_eq!(mark.load().unwrap(), Some(ahead + 1 + resource_version::RESERVE));
    // A version of the first process is older than anything the second has: 410.
    assert!(matches!(second.cursor(Start::After(floor + 1), Predicate::default()), Err(TooOld { .. })));

    // A mark that cannot be read is ignored: the clock alone.
    std::fs::write(mark.path(), "garbage").unwrap();
    let third = WatchCache::continuing(config(10), clock, Some(mark.clone()));
    assert!(third.resource_version() >= floor && third.resource_version() < ahead);
}

#[test]
fn a_watch_from_ahead_of_the_head_is_too_old_at_once() {
    let cache = cache(10);
    cache.create(&event("a", "x.1", "A")).unwrap();
    cache.create(&event("a", "x.2", "A")).unwrap();
    assert!(cache.cursor(Start::After(2), Predicate::default()).is_ok(), "at the head: fine");
    let refused = cache.cursor(Start::After(3), Predicate::default()).unwrap_err();
    assert_eq!(refused, TooOld { asked: 3, oldest: 0 });
    assert_eq!(refused.to_string(), "too old resource version: 3 (oldest retained: 0)");
    assert_eq!(cache.stats().too_old, 1);
}
