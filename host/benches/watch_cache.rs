//! The watch cache: changes per second through the window to 100 watchers, and memory at the
//! configured bound.
//!
//! `cargo bench -p eventpipe --bench watch_cache` uses the bundled real events
//! (`examples/data/occurrences.jsonl`, 13,860 occurrences): each is created, then patched
//! (`count` 2, 3, …) pass after pass, as the tenant router writes repeats.
//!
//! 1. **Throughput**: one writer thread makes every change (create / patch, as the sink does);
//!    N HTTP-style watches ([`WatchCache::stream`]: a task per watcher, a queue of 100 frames
//!    each) take every change and touch its JSON (made once per version, shared by all). The
//!    figure is changes per second from the first write until the last watcher has the last
//!    change, and deliveries per second (changes × watchers). With 0 watchers it is the
//!    writer's own cost.
//! 2. **Memory at the bound**: the default bounds (10,000 events, 10,000 changes), filled past
//!    both, every version held serialised (as after serving it): resident memory before and
//!    after, per version held.
//! 3. **The resourceVersion high-water mark** (`<state-file>.resource-version`): one durable
//!    write of it (temporary file, fsync, rename, fsync of the directory), and the writer alone
//!    with the mark kept ([`WatchCache::continuing`]: one write per
//!    [`resource_version::RESERVE`] changes) beside one without.

use std::time::{Duration, Instant};

use eventpipe::event::Event;
use eventpipe::watch_cache::resource_version::{self, HighWaterMark};
use eventpipe::watch_cache::{FieldSelector, Frame, Predicate, Start, WatchCache, WatchCacheConfig};

fn occurrences() -> Vec<Event> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/data/occurrences.jsonl");
    let text = std::fs::read_to_string(path).expect("the bundled events");
    text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

/// Creates every event, then patches each `passes - 1` times; returns the changes made.
fn write_all(cache: &WatchCache, events: &[Event], passes: usize) -> u64 {
    let mut changes = 0;
    for pass in 1..=passes {
        for event in events {
            let ok = if pass == 1 {
                cache.create(event).is_ok()
            } else {
                let patch = format!(r#"{{"count":{pass},"message":"{} (x{pass})"}}"#, event.message.replace('"', "'"));
                cache.patch(&event.metadata.namespace, &event.metadata.name, patch.as_bytes()).is_ok()
            };
            changes += u64::from(ok);
        }
    }
    changes
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// One throughput run: `watchers` streams (each excluding one reason when `selectors`).
fn throughput(rt: &tokio::runtime::Runtime, events: &[Event], passes: usize, watchers: usize, selectors: bool) {
    let total = events.len() * passes + 1;
    let config = WatchCacheConfig {
        window_size: total,
        max_objects: events.len() + 1,
        watcher_budget: Duration::from_secs(600),
        ..WatchCacheConfig::default()
    };
    let cache = WatchCache::new(config, eventpipe::clock::system());
    let reasons: Vec<String> = {
        let mut r: Vec<String> = events.iter().map(|e| e.reason.to_string()).collect();
        r.sort();
        r.dedup();
        r
    };
    let tasks: Vec<_> = (0..watchers)
        .map(|i| {
            let predicate = if selectors {
                Predicate {
                    fields: FieldSelector::parse(&format!("reason!={}", reasons[i % reasons.len()])).unwrap(),
                    ..Predicate::default()
                }
            } else {
                Predicate::default()
            };
            let mut stream = rt.block_on(async { cache.stream(Start::Now, predicate, false, false).unwrap() });
            rt.spawn(async move {
                let (mut frames, mut bytes) = (0u64, 0usize);
                while let Some(frame) = stream.recv().await {
                    if let Frame::Event(served) = frame {
                        frames += 1;
                        bytes += served.object.json().len();
                        if served.object.event.metadata.name == "sentinel" {
                            break;
                        }
                    }
                }
                (frames, bytes, Instant::now())
            })
        })
        .collect();
    let started = Instant::now();
    let writer = {
        let (cache, events) = (cache.clone(), events.to_vec());
        std::thread::spawn(move || {
            let n = write_all(&cache, &events, passes);
            let mut sentinel = events[0].clone();
            sentinel.metadata.name = "sentinel".into();
            sentinel.reason = "Sentinel".into();
            cache.create(&sentinel).unwrap();
            (n + 1, Instant::now())
        })
    };
    let (changes, written) = writer.join().unwrap();
    let mut last = written;
    let mut delivered = 0;
    for task in tasks {
        let (frames, _bytes, done) = rt.block_on(task).unwrap();
        delivered += frames;
        last = last.max(done);
    }
    let elapsed = last - started;
    let stats = cache.stats();
    println!(
        "{watchers:>3} watchers{}: {changes} changes in {:.2} s (writer alone done at {:.2} s): {:>9.0} changes/s, \
         {:>10.0} deliveries/s ({delivered} delivered), cut off {}",
        if selectors { " (a field selector each)" } else { "" },
        elapsed.as_secs_f64(),
        (written - started).as_secs_f64(),
        changes as f64 / elapsed.as_secs_f64(),
        delivered as f64 / elapsed.as_secs_f64(),
        stats.cut_off,
    );
    cache.close();
}

fn memory(events: &[Event]) {
    let before = rss_kib();
    let config = WatchCacheConfig::default();
    let cache = WatchCache::new(config.clone(), eventpipe::clock::system());
    // 13,860 creates (3,860 of them evicting the oldest), then 2 passes of patches.
    let changes = write_all(&cache, events, 3);
    let (_, held) = cache.list(&Predicate::default(), None).unwrap();
    let mut json_bytes = 0;
    for version in &held {
        json_bytes += version.json().len();
    }
    // Every change in the window serialised too (as after serving it to a watcher).
    let oldest = cache.stats().resource_version - cache.stats().window as u64;
    let (_, mut cursor) = cache.cursor(Start::After(oldest), Predicate::default()).unwrap();
    let mut window_versions = 0;
    loop {
        let batch = cursor.poll(4096).unwrap();
        if batch.is_empty() {
            break;
        }
        for served in batch {
            json_bytes += served.object.json().len();
            window_versions += 1;
        }
    }
    let after = rss_kib();
    let stats = cache.stats();
    let versions = stats.objects + stats.window;
    println!(
        "memory at the default bound ({} events, {} changes): {changes} changes made, {} events and {} changes held \
         ({window_versions} window versions read); resident {:.1} MiB more ({:.0} bytes per version held, \
         {:.0} of it JSON)",
        config.max_objects,
        config.window_size,
        stats.objects,
        stats.window,
        (after.saturating_sub(before)) as f64 / 1024.0,
        (after.saturating_sub(before) * 1024) as f64 / versions as f64,
        json_bytes as f64 / versions as f64,
    );
}

fn high_water_mark(events: &[Event]) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mark = HighWaterMark::new(dir.path().join("state.json.resource-version"));
    let writes = 50;
    let started = Instant::now();
    for i in 0..writes {
        mark.store(1_800_000_000_000_000 + i).expect("the mark is written");
    }
    let per_write = started.elapsed() / writes as u32;
    let config = WatchCacheConfig { max_objects: events.len() + 1, ..WatchCacheConfig::default() };
    let mut rates = Vec::new();
    for kept in [false, true] {
        let cache = WatchCache::continuing(config.clone(), eventpipe::clock::system(), kept.then(|| mark.clone()));
        let started = Instant::now();
        let changes = write_all(&cache, events, 4);
        rates.push(changes as f64 / started.elapsed().as_secs_f64());
    }
    println!(
        "high-water mark: {:.2} ms per durable write (one per {} changes); writer alone {:.0} changes/s without \
         the mark, {:.0} with it",
        per_write.as_secs_f64() * 1e3,
        resource_version::RESERVE,
        rates[0],
        rates[1],
    );
}

fn main() {
    let events = occurrences();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    println!("{} bundled events, 4 passes (1 create + 3 patches each)", events.len());
    memory(&events);
    for (watchers, selectors) in [(0, false), (1, false), (100, false), (100, true)] {
        throughput(&rt, &events, 4, watchers, selectors);
    }
    high_water_mark(&events);
}
