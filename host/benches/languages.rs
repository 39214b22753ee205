//! The example plugins per language: build time, component size, compile time in the host,
//! ns per call and fuel per call, for the `quiet-normal` filter and the `namespace-reason` key
//! function.
//!
//! ```sh
//! cargo test -p eventpipe --test it example_plugins:: # builds the examples (records build times)
//! cargo bench -p eventpipe --bench languages
//! ```
//!
//! Components are read from where `tests/it/example_plugins.rs` puts them
//! (`target/tmp/example-plugins/LANG/`, the Rust ones from `target/wasm-plugins/`); a missing one
//! is reported as not built. Calls run on the bundled stream's events, in batches of 256 (what
//! the correlator and the router send) and of 1.

use std::path::{Path, PathBuf};
use std::time::Instant;

use eventpipe::correlator::{AggregateKey, EventAggregatorKeyFunc};
use eventpipe::event::Event;
use eventpipe::plugin::filter::WasmFilter;
use eventpipe::plugin::functions::WasmAggregateKeyFunc;
use eventpipe::plugin::{Metering, PluginHandle, PluginRuntime, PluginSettings};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn events() -> Vec<Event> {
    let text = std::fs::read_to_string(root().join("examples/data/occurrences.jsonl")).unwrap();
    text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

/// (language, build command, directory of the components, file stem of the filter / key function).
fn languages() -> Vec<(&'static str, &'static str, PathBuf, [&'static str; 2])> {
    let tmp = root().join("target/tmp/example-plugins");
    vec![
        (
            "Rust",
            "cargo build --target wasm32-wasip2 --release",
            root().join("target/wasm-plugins/wasm32-wasip2/release"),
            ["quiet_normal", "namespace_reason"],
        ),
        ("C", "clang + eventpipe-plugin-build", tmp.join("c"), ["quiet-normal", "namespace-reason"]),
        ("Go", "go build + eventpipe-plugin-build --stub-wasi", tmp.join("go"), ["quiet-normal", "namespace-reason"]),
        ("Python", "componentize-py … --stub-wasi", tmp.join("python"), ["quiet-normal", "namespace-reason"]),
        ("JS (componentize-js)", "componentize-js … -d …", tmp.join("js"), ["quiet-normal", "namespace-reason"]),
        (
            "JS (componentize-qjs)",
            "componentize-qjs … --stub-wasi --sync",
            tmp.join("js"),
            ["quiet-normal-qjs", "namespace-reason-qjs"],
        ),
    ]
}

/// Median of `runs` measurements of `f`, seconds.
fn median(runs: usize, mut f: impl FnMut()) -> f64 {
    let mut times: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[runs / 2]
}

/// One plugin call on a batch of events.
type Call = Box<dyn Fn(&[&Event])>;

struct Row {
    language: &'static str,
    plugin: &'static str,
    command: &'static str,
    build: String,
    size: u64,
    compile_ms: f64,
    ns_batch: f64,
    ns_single: f64,
    fuel: f64,
}

fn measure(runtime: &PluginRuntime, file: &Path, filter: bool, events: &[Event]) -> Option<(u64, f64, f64, f64, f64)> {
    let bytes = std::fs::read(file).ok()?;
    let started = Instant::now();
    let name = file.file_stem()?.to_string_lossy().into_owned();
    let plugin = runtime.load(&name, &bytes, eventpipe::plugin::PluginOrigin::File(file.into())).ok()?;
    let compile_ms = started.elapsed().as_secs_f64() * 1e3;
    let settings = PluginSettings { fuel_per_event: 50_000_000, ..PluginSettings::default() };
    let handle = PluginHandle::fixed(plugin, "default", settings);
    let refs: Vec<&Event> = events.iter().collect();
    let batches: Vec<&[&Event]> = refs.chunks(256).collect();
    let singles: Vec<&[&Event]> = refs.chunks(1).take(512).collect();
    let call: Call = if filter {
        let f = WasmFilter::new(handle.clone()).ok()?;
        Box::new(move |batch: &[&Event]| {
            std::hint::black_box(f.filter(batch));
        })
    } else {
        let f = WasmAggregateKeyFunc::new(handle.clone()).ok()?;
        Box::new(move |batch: &[&Event]| {
            let mut out: Vec<Option<AggregateKey>> = Vec::with_capacity(batch.len());
            f.aggregate_keys(batch, &mut out);
            std::hint::black_box(out);
        })
    };
    call(batches[0]); // instantiate, warm up
    let before = handle.stats().snapshot();
    let per_batch = median(3, || batches.iter().for_each(|b| call(b))) / events.len() as f64 * 1e9;
    let after = handle.stats().snapshot();
    assert_eq!(after.failures, before.failures, "{}: calls failed", file.display());
    let fuel = (after.fuel_consumed - before.fuel_consumed) as f64 / (after.events - before.events) as f64;
    let per_single = median(3, || singles.iter().for_each(|b| call(b))) / singles.len() as f64 * 1e9;
    Some((bytes.len() as u64, compile_ms, per_batch, per_single, fuel))
}

fn main() {
    let events = events();
    let runtime = PluginRuntime::new(Metering::Fuel).unwrap();
    let mut rows = Vec::new();
    for (language, command, dir, stems) in languages() {
        for (stem, filter) in stems.into_iter().zip([true, false]) {
            let file = dir.join(format!("{stem}.wasm"));
            let build = std::fs::read_to_string(dir.join(format!("{stem}.build-seconds")))
                .map(|s| format!("{} s", s.trim()))
                .unwrap_or_else(|_| "—".into());
            let plugin = if filter { "quiet-normal (filter)" } else { "namespace-reason (aggregate-key)" };
            match measure(&runtime, &file, filter, &events) {
                Some((size, compile_ms, ns_batch, ns_single, fuel)) => {
                    rows.push(Row { language, plugin, command, build, size, compile_ms, ns_batch, ns_single, fuel })
                }
                None => println!("{language} {plugin}: not built ({})", file.display()),
            }
        }
    }
    println!(
        "| language | plugin | build | build time | .wasm size | compile in host | ns/event (batch 256) | ns/call (batch 1) | fuel/event |"
    );
    println!("|---|---|---|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        println!(
            "| {} | {} | `{}` | {} | {:.1} KB | {:.0} ms | {:.0} | {:.0} | {:.0} |",
            r.language,
            r.plugin,
            r.command,
            r.build,
            r.size as f64 / 1024.0,
            r.compile_ms,
            r.ns_batch,
            r.ns_single,
            r.fuel
        );
    }
}
