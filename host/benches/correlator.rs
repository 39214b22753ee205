//! ns/event of the EventCorrelator on a 1M-event synthetic stream: 1000 objects, 20 reasons,
//! message suffixes drawn from a Zipf distribution, events 50 ms apart. Each iteration runs the
//! whole stream the way a sink watcher does: `prepare` batches of 256, then `finish` and
//! `update_state` per event. Four ways to compute the keys: (a) the native client-go functions,
//! (b) the default Wasm plugins with fuel metering (answers memoized, the default), (c) the
//! same plugins without fuel, (d) as (b) with the memo off (`pure = false`). Then ns per call of
//! each key plugin (`by-reason`, `source-object`) on a batch of 256 events and on a batch of
//! one (memo off: real calls), their fuel per event, and a batch of 256 answered from the memo.
//! Last, `tenant_stage/bundled_stream_pass`: the code path of `eventpipe bench` (one pass of
//! the bundled real stream through a tenant stage with the default plugins). Throughput is
//! printed as elements (events) per second; the `ns/event` lines give the per-event cost
//! directly.

#![allow(missing_docs, reason = "criterion_group! generates an undocumented function")]

use std::time::{Duration, Instant};

/// The `eventpipe` binary's allocator, so that the figures are the shipped pipeline's.
#[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use eventpipe::correlator::{
    ByReason, CorrelatorOptions, EventAggregatorKeyFunc, EventCorrelator, EventSpamKeyFunc, Occurrence,
};
use eventpipe::event::{Event, EventSource, ObjectReference, Time};
use eventpipe::plugin::embedded;
use eventpipe::plugin::functions::CorrelatorPlugins;
use eventpipe::plugin::functions::{WasmAggregateKeyFunc, WasmSpamKeyFunc};
use eventpipe::plugin::registry::PluginRegistry;
use eventpipe::plugin::{Metering, PluginHandle, PluginOrigin, PluginRuntime, PluginSettings};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

const EVENTS: usize = 1_000_000;
const OBJECTS: usize = 1000;
const REASONS: usize = 20;
const SUFFIXES: usize = 1000;
const ZIPF_S: f64 = 1.1;
const BATCH: usize = 256;

/// Inverse-CDF sampler of a Zipf(s) distribution over `1..=n`.
struct Zipf(Vec<f64>);

impl Zipf {
    fn new(n: usize, s: f64) -> Self {
        let mut acc = 0.0;
        let mut cdf: Vec<f64> = (1..=n)
            .map(|k| {
                acc += 1.0 / (k as f64).powf(s);
                acc
            })
            .collect();
        cdf.iter_mut().for_each(|c| *c /= acc);
        Zipf(cdf)
    }

    fn sample(&self, rng: &mut StdRng) -> usize {
        let u: f64 = rng.random();
        self.0.partition_point(|&c| c < u)
    }
}

fn stream() -> Vec<Occurrence> {
    let mut rng = StdRng::seed_from_u64(42);
    let zipf = Zipf::new(SUFFIXES, ZIPF_S);
    let start: Time = "2025-01-01T00:00:00Z".parse().unwrap();
    (0..EVENTS)
        .map(|i| {
            let object = rng.random_range(0..OBJECTS);
            let reason = rng.random_range(0..REASONS);
            let t = start + chrono::Duration::milliseconds(50 * i as i64);
            let event = Event {
                involved_object: ObjectReference {
                    kind: "Pod".into(),
                    namespace: format!("ns-{}", object % 37).into(),
                    name: format!("pod-{object}").into(),
                    uid: format!("uid-{object:08}").into(),
                    api_version: "v1".into(),
                    field_path: "spec.containers{app}".into(),
                    ..ObjectReference::default()
                },
                reason: format!("Reason{reason}").into(),
                message: format!("back-off restarting failed container, attempt {}", zipf.sample(&mut rng)).into(),
                source: EventSource { component: "kubelet".into(), host: format!("node-{}", object % 50).into() },
                first_timestamp: Some(t),
                last_timestamp: Some(t),
                count: 1,
                type_: "Warning".into(),
                ..Event::default()
            };
            Occurrence { event: Box::new(event), clock: Some(t), spam_filter_clock: Some(t) }
        })
        .collect()
}

fn correlate_all(stream: Vec<Occurrence>, options: &CorrelatorOptions) -> u64 {
    let mut correlator = EventCorrelator::new(options.clone());
    let mut written = 0;
    let mut it = stream.into_iter();
    loop {
        let batch: Vec<Occurrence> = it.by_ref().take(BATCH).collect();
        if batch.is_empty() {
            return written;
        }
        for p in correlator.prepare(batch) {
            let key = p.state_key();
            let r = correlator.finish(p);
            if let Some(e) = &r.event {
                correlator.update_state_keyed(e, key);
                written += 1;
            }
        }
    }
}

/// What every iteration does besides correlating: split the stream into batches and drop the
/// events (the baseline to subtract from the correlator figures).
fn batch_and_drop(stream: Vec<Occurrence>) -> u64 {
    let mut it = stream.into_iter();
    let mut seen = 0;
    loop {
        let batch: Vec<Occurrence> = it.by_ref().take(BATCH).collect();
        if batch.is_empty() {
            return seen;
        }
        seen += std::hint::black_box(batch).len() as u64;
    }
}

/// The four ways to compute keys, as correlator options, with the plugins (to read their
/// counters).
fn paths() -> Vec<(&'static str, CorrelatorOptions, Option<CorrelatorPlugins>)> {
    let wasm = |name, metering, pure| {
        let registry = PluginRegistry::new(PluginRuntime::new(metering).expect("runtime")).expect("embedded plugins");
        let settings = PluginSettings { pure, ..PluginSettings::default() };
        let plugins = CorrelatorPlugins::defaults(&registry, "default", &settings).expect("defaults");
        (name, plugins.apply(CorrelatorOptions::default()).expect("kinds"), Some(plugins))
    };
    vec![
        ("native", CorrelatorOptions::default(), None),
        wasm("wasm_fuel", Metering::Fuel, true),
        wasm("wasm_no_fuel", Metering::Unmetered, true),
        wasm("wasm_fuel_no_memo", Metering::Fuel, false),
    ]
}

fn bench(c: &mut Criterion) {
    let events = stream();
    let paths = paths();
    let mut group = c.benchmark_group("correlator");
    group.throughput(Throughput::Elements(EVENTS as u64));
    group.sample_size(10).measurement_time(Duration::from_secs(30));
    for (name, options, _) in &paths {
        group.bench_function(format!("{name}_1M"), |b| {
            b.iter_batched(|| events.clone(), |s| correlate_all(s, options), BatchSize::PerIteration)
        });
    }
    group.bench_function("baseline_batch_and_drop_1M", |b| {
        b.iter_batched(|| events.clone(), batch_and_drop, BatchSize::PerIteration)
    });
    group.finish();
    // One pass per path, the paths interleaved, three rounds: the best pass of each path (the
    // machine's noise hits every path alike). The input is cloned before the clock starts.
    const ROUNDS: usize = 3;
    let mut best = vec![(f64::INFINITY, 0); paths.len()];
    for _ in 0..ROUNDS {
        for ((_, options, _), best) in paths.iter().zip(&mut best) {
            let input = events.clone();
            let t = Instant::now();
            let written = correlate_all(input, options);
            best.0 = best.0.min(t.elapsed().as_nanos() as f64 / EVENTS as f64);
            best.1 = written;
        }
    }
    for ((name, _, plugins), (ns, written)) in paths.iter().zip(best) {
        println!(
            "correlator/{name}_1M: {ns:.0} ns/event (best of {ROUNDS} passes; {written} of {EVENTS} events written)"
        );
        for handle in plugins.iter().flat_map(|p| p.handles()) {
            let stats = handle.stats().snapshot();
            let looked_up = (stats.memo_hits + stats.memo_misses).max(1);
            println!(
                "correlator/{name}_1M: {}: {} calls, memo hits {:.1}%",
                handle.name(),
                stats.calls,
                100.0 * stats.memo_hits as f64 / looked_up as f64
            );
        }
    }

    // One plugin call of each key plugin, batch of 256 and batch of 1, fuel on, memo off.
    let runtime = PluginRuntime::new(Metering::Fuel).expect("runtime");
    let handle = |name, bytes, pure| {
        let plugin = runtime.load(name, bytes, PluginOrigin::Embedded).expect("embedded plugin");
        PluginHandle::fixed(plugin, "default", PluginSettings { pure, ..PluginSettings::default() })
    };
    let by_reason = handle("by-reason", embedded::BY_REASON, false);
    let source_object = handle("source-object", embedded::SOURCE_OBJECT, false);
    let key_fn = WasmAggregateKeyFunc::new(by_reason.clone()).expect("kind");
    let spam_key_fn = WasmSpamKeyFunc::new(source_object.clone()).expect("kind");
    let batch: Vec<&Event> = events.iter().take(BATCH).map(|o| &*o.event).collect();
    let mut calls = c.benchmark_group("plugin_call");
    for (label, size) in [("batch_256", BATCH), ("batch_1", 1)] {
        calls.throughput(Throughput::Elements(size as u64));
        calls.bench_function(format!("by_reason_{label}"), |b| {
            let mut out = Vec::with_capacity(size);
            b.iter(|| {
                out.clear();
                key_fn.aggregate_keys(&batch[..size], &mut out);
                out.len()
            })
        });
        calls.bench_function(format!("source_object_{label}"), |b| {
            let mut out = Vec::with_capacity(size);
            b.iter(|| {
                out.clear();
                spam_key_fn.spam_keys(&batch[..size], &mut out);
                out.len()
            })
        });
    }
    // The same batch of 256 answered from the memo (every input seen before).
    let memoized = WasmAggregateKeyFunc::new(handle("by-reason", embedded::BY_REASON, true)).expect("kind");
    calls.throughput(Throughput::Elements(BATCH as u64));
    calls.bench_function("by_reason_batch_256_memo_hits", |b| {
        let mut out = Vec::with_capacity(BATCH);
        b.iter(|| {
            out.clear();
            memoized.aggregate_keys(&batch, &mut out);
            out.len()
        })
    });
    // Batches of 256 taken in turn from the stream (about 1 % memo hits), memo off and on: what
    // the memo costs when it rarely helps.
    for (label, pure) in [("by_reason_stream_256", false), ("by_reason_stream_256_memo", true)] {
        let key_fn = WasmAggregateKeyFunc::new(handle("by-reason", embedded::BY_REASON, pure)).expect("kind");
        let mut batches = events.chunks(BATCH).cycle();
        calls.bench_function(label, |b| {
            let mut out = Vec::with_capacity(BATCH);
            b.iter(|| {
                let batch: Vec<&Event> = batches.next().expect("endless").iter().map(|o| &*o.event).collect();
                out.clear();
                key_fn.aggregate_keys(&batch, &mut out);
                out.len()
            })
        });
    }
    calls.finish();
    let native = ByReason;
    let t = Instant::now();
    for _ in 0..10_000 {
        std::hint::black_box(native.aggregate_key(batch[0]));
    }
    println!("plugin_call/native_by_reason: {:.0} ns/call", t.elapsed().as_nanos() as f64 / 10_000.0);
    for (name, handle) in [("by_reason", &by_reason), ("source_object", &source_object)] {
        let stats = handle.stats().snapshot();
        println!("plugin_call/{name}: {:.0} fuel/event", stats.fuel_consumed as f64 / stats.events.max(1) as f64);
    }

    // The path of `eventpipe bench`: the bundled real stream, one pass through a tenant stage
    // with the default plugins (fresh state and instances per pass).
    let text = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/data/occurrences.jsonl"))
        .expect("the bundled stream");
    let (bundled, _) = eventpipe::commands::bench::decode_input(&text);
    let registry = PluginRegistry::new(PluginRuntime::new(Metering::Fuel).expect("runtime")).expect("embedded plugins");
    let rules = eventpipe::pipeline::plan::CommandLineRules::default().rules(&registry).expect("default rules");
    let plan = std::sync::Arc::new(
        eventpipe::pipeline::plan::TenantPlan::build_unopened(&rules, None, &registry).expect("the default plan"),
    );
    let mut stage = c.benchmark_group("tenant_stage");
    stage.throughput(Throughput::Elements(bundled.len() as u64)).sample_size(10);
    stage.bench_function("bundled_stream_pass", |b| {
        b.iter_batched(
            || bundled.clone(),
            |input| eventpipe::commands::bench::pass(&plan, input),
            BatchSize::LargeInput,
        )
    });
    stage.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
