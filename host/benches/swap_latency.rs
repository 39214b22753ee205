//! Swap latency: from a plugin file renamed into the plugins directory to the first event
//! handled by the new version, through the same path `eventpipe run` uses (file watch → compile
//! through wasmtime's cache, at the quick tier for new content → validate → atomic swap), while a
//! thread keeps calling the plugin on batches of events. For new content it also prints when the
//! optimized build (compiled in the background) took over.
//!
//! `cargo bench -p eventpipe --bench swap_latency` prints median and p99 over 50 swaps of the
//! default `by-reason` plugin, for new content (a cache miss: full compile) and for content
//! compiled before (a cache hit, e.g. rolling back).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use eventpipe::correlator::EventAggregatorKeyFunc;
use eventpipe::event::Event;
use eventpipe::plugin::check::sample_event;
use eventpipe::plugin::functions::WasmAggregateKeyFunc;
use eventpipe::plugin::registry::PluginRegistry;
use eventpipe::plugin::{Metering, PluginKind, PluginRuntime, PluginSettings, Tier, embedded};
use eventpipe::reload::{Change, FileWatcher};

const SWAPS: usize = 50;

/// `by-reason` with a custom section holding `n`: new bytes, the same code.
fn variant(n: usize) -> Vec<u8> {
    let payload = format!("{n:08}");
    let name = b"eventpipe-bench";
    let mut bytes = embedded::BY_REASON.to_vec();
    bytes.push(0); // custom section
    bytes.push((1 + name.len() + payload.len()) as u8);
    bytes.push(name.len() as u8);
    bytes.extend_from_slice(name);
    bytes.extend_from_slice(payload.as_bytes());
    bytes
}

fn install(dir: &Path, bytes: &[u8]) -> Instant {
    let tmp = dir.join(".by-reason.wasm.tmp");
    std::fs::write(&tmp, bytes).unwrap();
    let at = Instant::now();
    std::fs::rename(&tmp, dir.join("by-reason.wasm")).unwrap();
    at
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

fn measure(label: &str, registry: &Arc<PluginRegistry>, dir: &Path, versions: impl Fn(usize) -> Vec<u8>) {
    let handle = registry.handle("by-reason", PluginKind::AggregateKey, "bench", PluginSettings::default()).unwrap();
    let slot = handle.slot().clone();
    let key_fn = WasmAggregateKeyFunc::new(handle).unwrap();
    let events: Vec<Event> = (0..64).map(|_| sample_event()).collect();
    let batch: Vec<&Event> = events.iter().collect();
    let mut out = Vec::with_capacity(batch.len());
    let mut latencies = Vec::with_capacity(SWAPS);
    let mut compiles = Vec::with_capacity(SWAPS);
    let mut optimized_after = Vec::with_capacity(SWAPS);
    let mut tiers = std::collections::BTreeMap::<String, usize>::new();
    for i in 0..SWAPS {
        let bytes = versions(i);
        let digest = xxhash_rust::xxh3::xxh3_64(&bytes);
        let renamed = install(dir, &bytes);
        loop {
            let new_version_serves = slot.load().is_some_and(|p| p.digest() == digest);
            out.clear();
            key_fn.aggregate_keys(&batch, &mut out);
            if new_version_serves {
                latencies.push(renamed.elapsed());
                let serving = slot.load().unwrap();
                compiles.push(serving.compile_time());
                *tiers.entry(serving.tier().to_string()).or_default() += 1;
                break;
            }
            assert!(renamed.elapsed() < Duration::from_secs(30), "swap {i} never happened");
        }
        // Until the optimized build serves (at once for cached content), calls going on.
        loop {
            out.clear();
            key_fn.aggregate_keys(&batch, &mut out);
            if slot.load().is_some_and(|p| p.digest() == digest && p.tier() == Tier::Optimized) {
                optimized_after.push(renamed.elapsed());
                break;
            }
            assert!(renamed.elapsed() < Duration::from_secs(30), "swap {i} never reached the optimized build");
        }
    }
    latencies.sort();
    compiles.sort();
    optimized_after.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "swap_latency/{label}: median {:.1} ms, p99 {:.1} ms, max {:.1} ms over {SWAPS} swaps \
         (served first by {tiers:?}; of which compiling or loading from the cache: median {:.1} ms, p99 {:.1} ms; \
         optimized build serving after: median {:.1} ms, p99 {:.1} ms)",
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.99)),
        ms(*latencies.last().unwrap()),
        ms(percentile(&compiles, 0.5)),
        ms(percentile(&compiles, 0.99)),
        ms(percentile(&optimized_after, 0.5)),
        ms(percentile(&optimized_after, 0.99)),
    );
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    let cache = dir.path().join("cache");
    let runtime = PluginRuntime::with_cache(Metering::Fuel, Some(&cache)).unwrap();
    let (registry, _) = PluginRegistry::new(runtime).unwrap().with_dir(&plugins).unwrap();
    let registry = Arc::new(registry);
    let (tx, rx) = std::sync::mpsc::channel();
    let _watch = FileWatcher::start(Some(&plugins), None, &[], move |c| {
        let _ = tx.send(c);
    })
    .unwrap();
    let reloader = registry.clone();
    std::thread::spawn(move || {
        for change in rx {
            if let Change::Plugin(path) = change {
                reloader.hot_reload_file(&path, |_| {});
            }
        }
    });
    // New content every time: the whole compile is in the latency.
    measure("new_content", &registry, &plugins, |i| variant(1_000 + i));
    // Alternating between two versions compiled before (a rollback): served optimized, from
    // the compilation cache. Both are installed (and built optimized) first, so that no swap
    // measured here compiles.
    let slot = registry.slot("by-reason").unwrap();
    for n in 0..2 {
        let bytes = variant(n);
        let digest = xxhash_rust::xxh3::xxh3_64(&bytes);
        install(&plugins, &bytes);
        while !slot.load().is_some_and(|p| p.digest() == digest && p.tier() == Tier::Optimized) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    measure("cached_content", &registry, &plugins, |i| variant(i % 2));
}
