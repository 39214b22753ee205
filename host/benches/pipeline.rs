//! Whole `eventpipe` processes on a real event stream: the figures of a release, each as
//! min / median / max over a few runs.
//!
//! 1. **Webhook sink throughput**: `run --sink webhook:URL` against a local HTTP server that
//!    answers `200` to every batch and counts its items; events/s = events read / wall seconds
//!    (target ≥ 20,000), and the server must receive as many items as the summary says were
//!    written (created + patched). With `--workers 1` and `0` too, and with a correlator that
//!    writes every event (by default the spam filter skips most of this stream).
//! 2. **`run` against single-core `replay`**: wall time of `run --sink jsonl:/dev/null` with the
//!    default `--workers`, `--workers 1` and `--workers 0` (the number of cores), and of
//!    `replay < STREAM > /dev/null` held to one core (`taskset -c 0`: replay runs its three
//!    pipeline steps on threads of their own) and, for reference, free to use every core; the
//!    ratios run / single-core replay (target ≤ 0.6). And the CPU seconds of `run` and of
//!    `replay` on every core over single-core `replay`'s, pair by pair: the second is the price
//!    of handing data between cores on the machine at that moment (the same work either way).
//!    `run` held to one core too, so that the target's ratio splits into two factors: `run` on
//!    one core / `replay` on one core (what the orchestration costs beyond replay's work) and
//!    `run` / `run` on one core (the speed-up the cores give at that moment's price). Before each
//!    process, the cores' round trip (a cache line handed from one core to the other and back):
//!    the ratio is also given for the rounds whose largest round trip was at most 150 ns and for
//!    the others, since on a virtual machine it shows whether the cores share a last-level cache
//!    at that moment.
//! 3. **At-least-once under SIGKILL**: `run --delivery at-least-once` with a correlator that may
//!    neither skip nor aggregate (so every input event must reach the sink), killed with SIGKILL
//!    every 2 s and started again until a run ends by itself; every restart must have saved a
//!    position further on, and every input event must be in the output at least once (lost
//!    events are listed; duplicates are counted). The killed runs read the stream played
//!    several times over, so that an uninterrupted run would last three kill periods.
//! 4. **Circuit breaker**: the first 60,000 events of the stream with every reason set to
//!    `Loop`, on which the `misbehave` test plugin (`tests/plugins/misbehave`) runs out of fuel,
//!    run with it as the aggregate-key plugin and without it (the built-in key), pair by pair;
//!    the ratio with / without (target ≤ 2: the breaker quarantines the plugin and its fallback
//!    serves without calling it). Built for `wasm32-wasip2` with cargo on first use.
//! 5. **Against another build** (`baseline`, when `EVENTPIPE_BENCH_BASELINE=BIN` names one):
//!    figure 1's webhook run with default flags, this binary and BIN alternating; events/s of
//!    each and this / BIN pair by pair. BIN is an `eventpipe` built from another commit (with
//!    the same profile), so that a change is judged side by side in one run.
//! 6. **Template rendering** (`rendering`): the webhook sink's encoding step on one thread over
//!    the writes of a run of the bundled stream (`examples/data/occurrences.jsonl`), in rounds
//!    alternating the cases: the default JSON items, `preset=slack`, a custom template per
//!    write and the same over batches (`batch=true`); events/s per core of each and each
//!    template's over the JSON items', round by round ([`rendering`]).
//! 7. **Enrichment** (`enrichment`): passes over the bundled stream as `run` makes them (the
//!    enrichment step, the tenant stage, each write's webhook item) with enrichment on, from a
//!    seeded metadata cache, and off, alternating on one thread: CPU per event on / off, pair
//!    by pair; and the resident memory that 10,000 and 100,000 cached Pods add to a fresh
//!    process, as jemalloc holds them ([`enrichment`]).
//!
//! In-process figures (6, 7) take each pass's CPU time from the thread's own accounting
//! (`/proc/thread-self/schedstat`), so another process on the core does not count; the bench
//! allocates with the `eventpipe` binary's allocator (jemalloc).
//!
//! `EVENTPIPE_BENCH_ONLY=breaker` (or `webhook`, `replay`, `sigkill`, `baseline`, `rendering`,
//! comma-separated) runs only those figures.
//!
//! ```sh
//! cargo bench -p eventpipe --bench pipeline                        # the default stream
//! cargo bench -p eventpipe --bench pipeline -- STREAM.jsonl[.gz]   # or EVENTPIPE_BENCH_STREAM
//! ```
//!
//! The stream is not part of the repository: by default it is
//! `../shared/conformance/replay-real/real-expanded.in.jsonl.gz` relative to the repository root
//! (`{"clock","event"}` lines; any shape `run --source jsonl:` reads works). A `.gz` file is
//! decompressed to a temporary file first. `EVENTPIPE_BENCH_RUNS` sets the runs per figure
//! (default 3); `EVENTPIPE_BIN` the binary (default: the one `cargo bench` builds).

use std::collections::HashMap;
use std::fmt;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use eventpipe::delivery::{Position, SavedState};
use eventpipe::event::Event;
use eventpipe::source::decode::{Decoded, Decoder};
use serde::Deserialize;

#[path = "pipeline/enrichment.rs"]
mod enrichment;
#[path = "pipeline/rendering.rs"]
mod rendering;

/// The `eventpipe` binary's allocator, so that in-process figures are the shipped pipeline's.
#[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Set in a child process of figure 7: seed this many Pods, print the objects held and the
/// kibibytes of resident memory they added, and exit.
const SEED_PODS_VAR: &str = "EVENTPIPE_BENCH_SEED_PODS";
/// Cached objects whose resident memory figure 7 measures.
const CACHED_OBJECTS: [usize; 2] = [10_000, 100_000];

/// The stream, relative to the repository root, when neither the argument nor
/// `EVENTPIPE_BENCH_STREAM` names one.
const DEFAULT_STREAM: &str = "../shared/conformance/replay-real/real-expanded.in.jsonl.gz";
/// Runs per figure unless `EVENTPIPE_BENCH_RUNS` says otherwise.
const DEFAULT_RUNS: usize = 3;
/// Webhook sink throughput target, events per second.
const WEBHOOK_TARGET: f64 = 20_000.0;
/// Target of run's wall time over replay's.
const RATIO_TARGET: f64 = 0.6;
/// Cores' round trips up to this many nanoseconds are taken as cores under one last-level cache
/// (between the ~60 and ~350 ns seen on the machine of `docs/performance.md`).
const SHARED_CACHE_NS: f64 = 150.0;
/// How long each at-least-once run lives before it is killed.
const KILL_EVERY: Duration = Duration::from_secs(2);
/// How many kill periods an uninterrupted run of the killed scenario's input lasts.
const KILLED_RUN_PERIODS: f64 = 3.0;
/// Consecutive killed runs without progress after which the at-least-once figure gives up.
const MAX_STALLS: usize = 5;
/// Correlator flags under which every input event is written (no spam filtering, no
/// aggregation): the webhook sink's full load, and what lets the at-least-once check demand
/// each input event in the output.
const WRITE_EVERY_EVENT: [&str; 4] = ["--burst", "1000000000", "--max-events", "1000000000"];
/// Lost events listed one by one at most (all are counted).
const LOST_SHOWN: usize = 50;
/// Events of the circuit-breaker figure.
const BREAKER_EVENTS: usize = 60_000;
/// Target of the run with an always-out-of-fuel plugin over the run without it.
const BREAKER_TARGET: f64 = 2.0;

fn main() {
    if let Some(pods) = std::env::var(SEED_PODS_VAR).ok().and_then(|n| n.parse().ok()) {
        let enricher = enrichment::enricher();
        let before = resident_kib();
        enrichment::seed_pods(&enricher, pods);
        let after = resident_kib();
        println!("{} {}", enricher.objects(), after.saturating_sub(before));
        return;
    }
    let bench = Bench::new();
    println!("{bench}");
    bench.warm_up();
    let only = std::env::var("EVENTPIPE_BENCH_ONLY").unwrap_or_default();
    let wanted = |figure: &str| only.is_empty() || only.split(',').any(|f| f.trim() == figure);
    let mut table = Table::default();
    let webhook_ok = wanted("webhook").then(|| webhook_throughput(&bench, &mut table));
    let ratio_ok = wanted("replay").then(|| run_against_replay(&bench, &mut table));
    let breaker_ok = wanted("breaker").then(|| circuit_breaker(&bench, &mut table));
    if wanted("baseline")
        && let Some(baseline) = std::env::var_os("EVENTPIPE_BENCH_BASELINE")
    {
        against_baseline(&bench, Path::new(&baseline), &mut table);
    }
    if wanted("rendering") {
        template_rendering(&bench, &mut table);
    }
    if wanted("enrichment") {
        enrichment_cost(&bench, &mut table);
    }
    table.print();
    println!();
    if let Some(ok) = webhook_ok {
        target(&format!("webhook sink, default flags: events/s ≥ {WEBHOOK_TARGET:.0}"), ok);
    }
    if let Some(ok) = ratio_ok {
        target(&format!("run (default) / replay and run (--workers 0) / replay ≤ {RATIO_TARGET}"), ok);
    }
    if let Some(ok) = breaker_ok {
        target(&format!("run with an always-out-of-fuel plugin / without it ≤ {BREAKER_TARGET}"), ok);
    }
    if wanted("sigkill") {
        println!();
        let survived = at_least_once_under_sigkill(&bench);
        target("at-least-once under SIGKILL: nothing lost, every restart made progress", survived);
    }
}

/// The `misbehave` test plugin's component, built for wasm32-wasip2 into
/// `target/wasm-plugins` (where the tests build it too).
fn misbehave_plugin() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = root.join("target").join("wasm-plugins");
    let mut build = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    build
        .current_dir(root.join("plugins"))
        .args([
            "build",
            "--release",
            "--locked",
            "--target",
            "wasm32-wasip2",
            "-p",
            "fixture-misbehave",
            "--target-dir",
        ])
        .arg(&target);
    for var in ["RUSTFLAGS", "CARGO_ENCODED_RUSTFLAGS", "CARGO_BUILD_TARGET", "CARGO_TARGET_DIR"] {
        build.env_remove(var);
    }
    assert!(build.status().expect("cargo runs").success(), "building the misbehave plugin failed");
    target.join("wasm32-wasip2").join("release").join("misbehave.wasm")
}

/// Figure 4: `run` on [`BREAKER_EVENTS`] events whose reason is `Loop`, with the `misbehave`
/// plugin as the aggregate key (out of fuel on every event) and without it; the ratio of the
/// pairs' wall times. Whether the median ratio is within [`BREAKER_TARGET`].
fn circuit_breaker(bench: &Bench, table: &mut Table) -> bool {
    let plugin = misbehave_plugin();
    let stream = bench.path("loop.jsonl");
    let mut out = BufWriter::new(std::fs::File::create(&stream).expect("the loop stream"));
    let input = BufReader::new(std::fs::File::open(&bench.stream).expect("the stream"));
    for line in input.lines().map_while(Result::ok).take(BREAKER_EVENTS) {
        let mut value: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
        let event = if value.get("event").is_some() { &mut value["event"] } else { &mut value };
        event["reason"] = "Loop".into();
        writeln!(out, "{value}").expect("writing the loop stream");
    }
    out.flush().expect("writing the loop stream");
    let run = |with_plugin: &bool| {
        let mut command = bench.eventpipe(["run", "--summary-json", "--sink=jsonl:/dev/null"]);
        command.arg(format!("--source=jsonl:{}", stream.display()));
        if *with_plugin {
            command.arg(format!("--aggregate-key-plugin={}", plugin.display()));
        }
        timed(command)
    };
    run(&true); // compiled into the cache before anything is timed
    let samples = interleaved(bench.runs, &[false, true], run);
    let wall = |runs: &[Finished]| runs.iter().map(|r| r.wall.as_secs_f64()).collect::<Vec<_>>();
    let (without, with) = (wall(&samples[0]), wall(&samples[1]));
    let ratios: Vec<f64> = with.iter().zip(&without).map(|(w, b)| w / b).collect();
    table.add(format!("breaker: run, {BREAKER_EVENTS} events, built-in key"), "s", &without);
    table.add("breaker: run, always-out-of-fuel plugin", "s", &with);
    table.add("breaker: with / without (pairs)", "ratio", &ratios);
    median_of(&ratios) <= BREAKER_TARGET
}

fn target(what: &str, met: bool) {
    println!("target {what}: {}", if met { "met" } else { "MISSED" });
}

/// What every figure shares: the binary, the stream (decompressed), its event count, the runs
/// per figure and a scratch directory (also the processes' working directory, so that no
/// `./plugins` changes what runs).
struct Bench {
    bin: PathBuf,
    stream: PathBuf,
    events: u64,
    runs: usize,
    cores: usize,
    scratch: tempfile::TempDir,
}

impl Bench {
    /// Finds the binary and the stream; exits with a message when the stream is missing.
    fn new() -> Self {
        let bin = std::env::var_os("EVENTPIPE_BIN")
            .map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_eventpipe")), PathBuf::from);
        let runs =
            std::env::var("EVENTPIPE_BENCH_RUNS").ok().and_then(|r| r.parse().ok()).unwrap_or(DEFAULT_RUNS).max(1);
        let given = std::env::args().skip(1).find(|a| !a.starts_with('-')).map(PathBuf::from);
        let given = given.or_else(|| std::env::var_os("EVENTPIPE_BENCH_STREAM").map(PathBuf::from));
        let source = given.unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(DEFAULT_STREAM));
        if !source.is_file() {
            eprintln!(
                "pipeline bench: the event stream {} is missing.\n\
                 It is not part of the repository: give its path as the argument \
                 (`cargo bench -p eventpipe --bench pipeline -- STREAM.jsonl[.gz]`) or in EVENTPIPE_BENCH_STREAM.",
                source.display()
            );
            std::process::exit(2);
        }
        let scratch = tempfile::tempdir().expect("a temporary directory");
        let (stream, events) = prepare_stream(&source, scratch.path());
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self { bin, stream, events, runs, cores, scratch }
    }

    /// `eventpipe ARGS…` in the scratch directory, quiet on stdout, logging at its default level.
    fn eventpipe<S: AsRef<std::ffi::OsStr>>(&self, args: impl IntoIterator<Item = S>) -> Command {
        self.eventpipe_on(false, args)
    }

    /// As [`eventpipe`](Self::eventpipe), held to the first core (`taskset -c 0 eventpipe
    /// ARGS…`) when `one_core`.
    fn eventpipe_on<S: AsRef<std::ffi::OsStr>>(&self, one_core: bool, args: impl IntoIterator<Item = S>) -> Command {
        self.binary_on(&self.bin, one_core, args)
    }

    /// As [`eventpipe_on`](Self::eventpipe_on) with the binary `bin`.
    fn binary_on<S: AsRef<std::ffi::OsStr>>(
        &self,
        bin: &Path,
        one_core: bool,
        args: impl IntoIterator<Item = S>,
    ) -> Command {
        let mut command = if one_core {
            let mut taskset = Command::new("taskset");
            taskset.args(["-c", "0"]).arg(bin);
            taskset
        } else {
            Command::new(bin)
        };
        command.args(args).current_dir(self.scratch.path()).env_remove("RUST_LOG").stdout(Stdio::null());
        command
    }

    /// `eventpipe run --summary-json --source jsonl:STREAM ARGS…`.
    fn run<S: AsRef<std::ffi::OsStr>>(&self, args: impl IntoIterator<Item = S>) -> Command {
        self.run_on(false, args)
    }

    /// As [`run`](Self::run), held to the first core when `one_core`.
    fn run_on<S: AsRef<std::ffi::OsStr>>(&self, one_core: bool, args: impl IntoIterator<Item = S>) -> Command {
        self.run_of(&self.bin, one_core, args)
    }

    /// As [`run_on`](Self::run_on) with the binary `bin`.
    fn run_of<S: AsRef<std::ffi::OsStr>>(
        &self,
        bin: &Path,
        one_core: bool,
        args: impl IntoIterator<Item = S>,
    ) -> Command {
        let mut command = self.binary_on(bin, one_core, ["run", "--summary-json"]);
        command.arg(format!("--source=jsonl:{}", self.stream.display())).args(args);
        command
    }

    /// One unmeasured run, so that the plugins are in the compilation cache and the stream in
    /// the page cache before anything is timed.
    fn warm_up(&self) {
        timed(self.run(["--sink=jsonl:/dev/null"]));
    }

    fn path(&self, name: &str) -> PathBuf {
        self.scratch.path().join(name)
    }
}

impl fmt::Display for Bench {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pipeline: {} events, {} core(s), {} run(s) per figure\n  binary {}",
            self.events,
            self.cores,
            self.runs,
            self.bin.display()
        )
    }
}

/// The stream as a plain file (a `.gz` one decompressed into `dir`) and its line count.
fn prepare_stream(source: &Path, dir: &Path) -> (PathBuf, u64) {
    let file = std::fs::File::open(source).unwrap_or_else(|e| panic!("{}: {e}", source.display()));
    let (input, plain): (Box<dyn BufRead>, PathBuf) = if source.extension().is_some_and(|e| e == "gz") {
        (Box::new(BufReader::new(flate2::read::GzDecoder::new(file))), dir.join("stream.jsonl"))
    } else {
        (Box::new(BufReader::new(file)), source.to_path_buf())
    };
    let mut copy = (plain != source).then(|| BufWriter::new(std::fs::File::create(&plain).expect("the stream copy")));
    let mut lines = 0;
    for line in input.split(b'\n') {
        let line = line.unwrap_or_else(|e| panic!("reading {}: {e}", source.display()));
        if let Some(copy) = &mut copy {
            copy.write_all(&line).and_then(|()| copy.write_all(b"\n")).expect("writing the stream copy");
        }
        lines += 1;
    }
    if let Some(mut copy) = copy {
        copy.flush().expect("writing the stream copy");
    }
    (plain, lines)
}

/// The counts of `run --summary-json` the figures need (the object has more).
#[derive(Debug, Default, Deserialize)]
struct Summary {
    read: u64,
    bad_lines: u64,
    created: u64,
    patched: u64,
    skipped: u64,
    aggregated: u64,
    dropped: u64,
    gave_up: u64,
    retries: u64,
}

impl Summary {
    /// The summary object, the last JSON line of a run's stderr.
    fn parse(stderr: &str) -> Option<Self> {
        stderr.lines().rev().find_map(|l| serde_json::from_str(l).ok())
    }

    fn written(&self) -> u64 {
        self.created + self.patched
    }
}

/// A finished process: its wall time and stderr.
struct Finished {
    wall: Duration,
    /// User + system CPU seconds of the process (and of anything it waited for), from the
    /// kernel's clock ticks: `None` where `/proc/self/stat` is not there.
    cpu: Option<f64>,
    stderr: String,
}

impl Finished {
    fn summary(&self) -> Summary {
        Summary::parse(&self.stderr).unwrap_or_else(|| panic!("no summary in:\n{}", self.stderr))
    }
}

/// Runs `command` to its end, timing it; panics (with its stderr) when it fails.
fn timed(mut command: Command) -> Finished {
    let (started, cpu_before) = (Instant::now(), children_cpu_seconds());
    let out = command.stderr(Stdio::piped()).output().unwrap_or_else(|e| panic!("{command:?}: {e}"));
    let wall = started.elapsed();
    let cpu = children_cpu_seconds().zip(cpu_before).map(|(after, before)| after - before);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{command:?} failed ({}):\n{stderr}", out.status);
    Finished { wall, cpu, stderr }
}

/// CPU seconds (user + system) of this process's children that ended and were waited for:
/// `cutime` + `cstime` of `/proc/self/stat`, in clock ticks of 1/100 s (Linux's `USER_HZ`), so
/// a figure is good to ±0.01 s.
fn children_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces), from field 3 on.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |field: usize| fields.get(field - 3)?.parse::<f64>().ok();
    Some((ticks(16)? + ticks(17)?) / 100.0)
}

/// Runs `measure` on every case, `runs` rounds of one run per case, so that a slow moment of
/// the machine hits every case alike. Returns the samples per case, in case order.
fn interleaved<C, T>(runs: usize, cases: &[C], mut measure: impl FnMut(&C) -> T) -> Vec<Vec<T>> {
    let mut samples: Vec<Vec<T>> = cases.iter().map(|_| Vec::with_capacity(runs)).collect();
    for _ in 0..runs {
        for (case, samples) in cases.iter().zip(&mut samples) {
            samples.push(measure(case));
        }
    }
    samples
}

/// Nanoseconds for a cache line to go from one core to another and back, as the machine is at
/// that moment: two threads hand a counter back and forth, each spinning until it is its turn,
/// so that each holds a core of its own (the median of 5 series of 20,000 trips). On a virtual
/// machine it tells whether the virtual cores share a last-level cache just then: on the 2-core
/// machine of `docs/performance.md` it was ~60 ns when they did and ~350 ns when they did not,
/// and `run`'s time followed it. `None` with fewer than 2 cores (the threads would take turns on
/// one).
fn core_round_trip_ns(cores: usize) -> Option<f64> {
    const TRIPS: u64 = 20_000;
    if cores < 2 {
        return None;
    }
    let turn = Arc::new(AtomicU64::new(0));
    let other = std::thread::spawn({
        let turn = turn.clone();
        move || {
            for i in 0..6 * TRIPS {
                while turn.load(Ordering::Acquire) != 2 * i + 1 {}
                turn.store(2 * i + 2, Ordering::Release);
            }
        }
    });
    let mut series = Vec::with_capacity(5);
    for s in 0..6 {
        let started = Instant::now();
        for i in s * TRIPS..(s + 1) * TRIPS {
            turn.store(2 * i + 1, Ordering::Release);
            while turn.load(Ordering::Acquire) != 2 * i + 2 {}
        }
        // The first series also waits for the other thread to start: not counted.
        if s > 0 {
            series.push(started.elapsed().as_nanos() as f64 / TRIPS as f64);
        }
    }
    other.join().expect("the other thread does not panic");
    Some(median_of(&series))
}

/// Rows of min / median / max.
#[derive(Default)]
struct Table {
    rows: Vec<(String, String, [f64; 3])>,
}

impl Table {
    /// Adds `samples` (in `unit`) as a row.
    fn add(&mut self, label: impl Into<String>, unit: &str, samples: &[f64]) {
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let spread = [sorted[0], median(&sorted), sorted[sorted.len() - 1]];
        self.rows.push((label.into(), unit.into(), spread));
    }

    fn print(&self) {
        let width = self.rows.iter().map(|(l, ..)| l.chars().count()).max().unwrap_or(0);
        println!("\n{:width$}  {:>10} {:>10} {:>10}", "figure", "min", "median", "max");
        for (label, unit, values) in &self.rows {
            let [lo, mid, hi] = values.map(|v| format_value(v, unit));
            println!("{label:width$}  {lo:>10} {mid:>10} {hi:>10}  {unit}");
        }
    }
}

fn format_value(v: f64, unit: &str) -> String {
    match unit {
        "events/s" | "events/s per core" => format!("{v:.0}"),
        "MiB" => format!("{v:.2}"),
        "s" => format!("{v:.2}"),
        _ => format!("{v:.3}"),
    }
}

/// The median of sorted, non-empty `values`.
fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 { sorted[n / 2] } else { (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0 }
}

fn median_of(samples: &[f64]) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    median(&sorted)
}

/// The `--workers` variants of `run` compared by figures 1 and 2.
fn workers_cases(cores: usize) -> [(String, Vec<String>); 3] {
    [
        ("default flags".into(), vec![]),
        ("--workers 1".into(), vec!["--workers=1".into()]),
        (format!("--workers 0 (= {cores})"), vec!["--workers=0".into()]),
    ]
}

// ---------------------------------------------------------------------------------------------
// 1. Webhook sink throughput

/// What the webhook receiver counted, live.
#[derive(Default)]
struct Tally {
    requests: AtomicU64,
    items: AtomicU64,
    refused: AtomicU64,
}

/// What the webhook receiver counted during one run.
struct Received {
    requests: u64,
    items: u64,
    /// Requests whose body was not a batch (answered `400`).
    refused: u64,
}

impl Tally {
    /// The counts since the last call.
    fn take(&self) -> Received {
        let take = |c: &AtomicU64| c.swap(0, Ordering::SeqCst);
        Received { requests: take(&self.requests), items: take(&self.items), refused: take(&self.refused) }
    }
}

/// A webhook batch, items counted but not decoded.
#[derive(Deserialize)]
struct Batch {
    items: Vec<serde::de::IgnoredAny>,
}

async fn receive(State(tally): State<Arc<Tally>>, body: Bytes) -> StatusCode {
    tally.requests.fetch_add(1, Ordering::SeqCst);
    match serde_json::from_slice::<Batch>(&body) {
        Ok(batch) => {
            tally.items.fetch_add(batch.items.len() as u64, Ordering::SeqCst);
            StatusCode::OK
        }
        Err(_) => {
            tally.refused.fetch_add(1, Ordering::SeqCst);
            StatusCode::BAD_REQUEST
        }
    }
}

/// Starts the receiver on a thread of its own (one-threaded runtime) for the rest of the bench.
fn start_receiver() -> (SocketAddr, Arc<Tally>) {
    let tally = Arc::new(Tally::default());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binding the webhook receiver");
    listener.set_nonblocking(true).expect("a non-blocking listener");
    let addr = listener.local_addr().expect("the receiver's address");
    let app = Router::new().route("/events", post(receive)).with_state(tally.clone());
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
            axum::serve(listener, app).await.expect("the webhook receiver");
        });
    });
    (addr, tally)
}

/// Figure 1; returns whether the default flags met the target (and every count matched).
fn webhook_throughput(bench: &Bench, table: &mut Table) -> bool {
    let (addr, tally) = start_receiver();
    let sink = format!("--sink=webhook:http://{addr}/events");
    let mut cases = workers_cases(bench.cores).to_vec();
    cases.push(("every event written".into(), WRITE_EVERY_EVENT.map(String::from).to_vec()));
    let mut mismatches = Vec::new();
    let samples = interleaved(bench.runs, &cases, |(label, flags)| {
        let run = timed(bench.run(flags.iter().chain([&sink])));
        let summary = run.summary();
        let got = tally.take();
        if got.items != summary.written() || got.refused > 0 || summary.dropped + summary.gave_up > 0 {
            mismatches.push(format!(
                "{label}: the receiver got {} items ({} requests refused), the summary says {} written \
                 (created {} + patched {}), {} dropped, {} gave up, {} retries",
                got.items,
                got.refused,
                summary.written(),
                summary.created,
                summary.patched,
                summary.dropped,
                summary.gave_up,
                summary.retries
            ));
        }
        let rate = summary.read as f64 / run.wall.as_secs_f64();
        (rate, got.items as f64 / got.requests.max(1) as f64)
    });
    for ((label, _), samples) in cases.iter().zip(&samples) {
        let rates: Vec<f64> = samples.iter().map(|s| s.0).collect();
        table.add(format!("webhook sink, {label}"), "events/s", &rates);
        let batches: Vec<f64> = samples.iter().map(|s| s.1).collect();
        table.add(format!("  mean batch, {label}"), "items/request", &batches);
    }
    if mismatches.is_empty() {
        println!("webhook: the receiver got every item the summaries count as written");
    } else {
        println!("webhook: COUNTS DIFFER:\n  {}", mismatches.join("\n  "));
    }
    let rate = median_of(&samples[0].iter().map(|s| s.0).collect::<Vec<_>>());
    mismatches.is_empty() && rate >= WEBHOOK_TARGET
}

// ---------------------------------------------------------------------------------------------
// 5. Against another build

/// Figure 5: the webhook run of figure 1 (default flags) by this binary and by `baseline`,
/// alternating; every count must match as in figure 1.
fn against_baseline(bench: &Bench, baseline: &Path, table: &mut Table) {
    let (addr, tally) = start_receiver();
    let sink = format!("--sink=webhook:http://{addr}/events");
    timed(bench.run_of(baseline, false, ["--sink=jsonl:/dev/null"])); // its plugins compiled first
    let builds = [baseline, bench.bin.as_path()];
    let samples = interleaved(bench.runs, &builds, |bin| {
        let run = timed(bench.run_of(bin, false, [&sink]));
        let summary = run.summary();
        let got = tally.take();
        assert!(
            got.items == summary.written() && got.refused == 0 && summary.dropped + summary.gave_up == 0,
            "{}: the receiver got {} items, the summary says {} written",
            bin.display(),
            got.items,
            summary.written()
        );
        summary.read as f64 / run.wall.as_secs_f64()
    });
    println!("baseline: {}", baseline.display());
    let ratios: Vec<f64> = samples[1].iter().zip(&samples[0]).map(|(this, base)| this / base).collect();
    table.add("webhook sink, default flags, baseline build", "events/s", &samples[0]);
    table.add("webhook sink, default flags, this build", "events/s", &samples[1]);
    table.add("  this build / baseline (pairs)", "ratio", &ratios);
}

// ---------------------------------------------------------------------------------------------
// 6. Template rendering

/// Figure 6: the writes of a run of the bundled stream, encoded by each [`rendering::cases`]
/// case in alternating rounds (at least 7).
fn template_rendering(bench: &Bench, table: &mut Table) {
    let calls = bench.path("bundled-calls.jsonl");
    let bundled = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/data/occurrences.jsonl");
    let mut run = bench.eventpipe(["run", "--summary-json"]);
    run.arg(format!("--source=jsonl:{}", bundled.display())).arg(format!("--sink=jsonl:{}", calls.display()));
    timed(run);
    let writes = rendering::writes(&std::fs::read_to_string(&calls).expect("the run's calls"));
    let cases = rendering::cases(bench.scratch.path());
    rendering::pass(&cases[0], &writes); // warm
    let seconds = interleaved(bench.runs.max(7), &cases, |case| {
        let started = thread_cpu_seconds();
        std::hint::black_box(rendering::pass(case, &writes));
        thread_cpu_seconds() - started
    });
    let n = writes.len() as f64;
    for (case, seconds) in cases.iter().zip(&seconds) {
        let rates: Vec<f64> = seconds.iter().map(|s| n / s).collect();
        table.add(format!("rendering {} writes, {}", writes.len(), case.label), "events/s per core", &rates);
    }
    for (case, times) in cases.iter().zip(&seconds).skip(1) {
        let ratios: Vec<f64> = times.iter().zip(&seconds[0]).map(|(s, plain)| s / plain).collect();
        table.add(format!("  CPU per write, {} / no template (rounds)", case.label), "ratio", &ratios);
    }
}

// ---------------------------------------------------------------------------------------------
// 7. Enrichment

/// Figure 7: CPU per event of the bundled stream with enrichment off and on (seeded cache), in
/// alternating pairs (at least 7); then the resident memory of [`CACHED_OBJECTS`] cached Pods,
/// each the median of 3 fresh processes.
fn enrichment_cost(bench: &Bench, table: &mut Table) {
    let text = std::fs::read(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/data/occurrences.jsonl"))
        .expect("the bundled stream");
    let (occurrences, _) = eventpipe::commands::bench::decode_input(&text);
    let plan = enrichment::plan();
    let enricher = enrichment::enricher();
    let seeded = enrichment::seed_stream(&enricher, &occurrences);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let cases = [false, true];
    let measure = |on: &bool| {
        let input = occurrences.to_vec();
        let started = thread_cpu_seconds();
        let bytes = enrichment::pass(&plan, input, on.then_some(&enricher), &runtime);
        (thread_cpu_seconds() - started, bytes)
    };
    cases.iter().for_each(|on| _ = measure(on)); // warm
    let samples = interleaved(bench.runs.max(7), &cases, measure);
    let n = occurrences.len() as f64;
    let unresolved: u64 = enricher.counters().unresolved().values().sum();
    println!(
        "enrichment: {seeded} objects seeded; {} events enriched; {unresolved} lookups unresolved; \
         {} bytes written off, {} on",
        enricher.counters().enriched(),
        samples[0][0].1,
        samples[1][0].1
    );
    let rate = |s: &[(f64, usize)]| s.iter().map(|(t, _)| n / t).collect::<Vec<_>>();
    table.add(format!("{} events, enrichment off", occurrences.len()), "events/s per core", &rate(&samples[0]));
    table.add(format!("{} events, enrichment on", occurrences.len()), "events/s per core", &rate(&samples[1]));
    let ratios: Vec<f64> = samples[1].iter().zip(&samples[0]).map(|(on, off)| on.0 / off.0).collect();
    table.add("  CPU per event, on / off (pairs)", "ratio", &ratios);
    for objects in CACHED_OBJECTS {
        let kib: Vec<f64> = (0..3)
            .map(|_| {
                let out = Command::new(std::env::current_exe().expect("this bench"))
                    .env(SEED_PODS_VAR, objects.to_string())
                    .output()
                    .expect("the bench runs again");
                let text = String::from_utf8_lossy(&out.stdout);
                let (held, kib) = text.trim().split_once(' ').expect("objects and KiB");
                assert_eq!(held.parse::<usize>().ok(), Some(objects), "every Pod is held");
                kib.parse::<f64>().expect("KiB")
            })
            .collect();
        let per_10k: Vec<f64> = kib.iter().map(|k| k / 1024.0 * 10_000.0 / objects as f64).collect();
        table.add(format!("resident memory of {objects} cached Pods, per 10,000"), "MiB", &per_10k);
    }
}

/// Kibibytes of this process resident now (`VmRSS` of `/proc/self/status`).
fn resident_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status (Linux)");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// CPU seconds this thread has run: the first field of `/proc/thread-self/schedstat`, the
/// scheduler's nanoseconds on a CPU (exact to the context switch; time waiting for a core is
/// not counted).
fn thread_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").expect("/proc/thread-self/schedstat (Linux)");
    let ns: u64 = stat.split_whitespace().next().and_then(|ns| ns.parse().ok()).expect("nanoseconds");
    ns as f64 / 1e9
}

// ---------------------------------------------------------------------------------------------
// 2. run against single-core replay

/// One process of figure 2: `run` with these flags (`None`: `replay`), held to one core or not.
struct Case {
    label: String,
    run: Option<Vec<String>>,
    one_core: bool,
}

/// Figure 2; returns whether both ratios met the target.
fn run_against_replay(bench: &Bench, table: &mut Table) -> bool {
    let pinned = std::process::Command::new("taskset").arg("--version").output().is_ok_and(|o| o.status.success());
    let one_core = if pinned { "one core (taskset -c 0)" } else { "taskset not found: not pinned" };
    // The run cases in `workers_cases` order, then run held to one core, then replay on one
    // core, then replay on all (the ratios below find them by these places).
    let mut cases: Vec<Case> = workers_cases(bench.cores)
        .into_iter()
        .map(|(label, flags)| Case { label: format!("run, {label}"), run: Some(flags), one_core: false })
        .collect();
    cases.push(Case { label: format!("run, default flags, {one_core}"), run: Some(vec![]), one_core: pinned });
    cases.push(Case { label: format!("replay, {one_core}"), run: None, one_core: pinned });
    cases.push(Case { label: "replay, every core".into(), run: None, one_core: false });
    // Each process is preceded by a measurement of the cores' round trip (the placement of
    // virtual cores can change within a round).
    let measured = interleaved(bench.runs, &cases, |case| {
        let round_trip = core_round_trip_ns(bench.cores);
        let command = match &case.run {
            Some(flags) => {
                bench.run_on(case.one_core, flags.iter().map(String::as_str).chain(["--sink=jsonl:/dev/null"]))
            }
            None => {
                let mut replay = bench.eventpipe_on(case.one_core, ["replay"]);
                replay.stdin(std::fs::File::open(&bench.stream).expect("the stream"));
                replay
            }
        };
        (round_trip, timed(command))
    });
    // Per round, the largest round trip measured in it.
    let round_trips: Option<Vec<f64>> = (0..bench.runs)
        .map(|round| measured.iter().try_fold(0.0_f64, |most, case| case[round].0.map(|ns| most.max(ns))))
        .collect();
    let finished: Vec<Vec<Finished>> =
        measured.into_iter().map(|case| case.into_iter().map(|(_, finished)| finished).collect()).collect();
    let seconds: Vec<Vec<f64>> = finished.iter().map(|f| f.iter().map(|f| f.wall.as_secs_f64()).collect()).collect();
    for (case, seconds) in cases.iter().zip(&seconds) {
        table.add(format!("{} → /dev/null", case.label), "s", seconds);
    }
    let ratio = |a: &[f64], b: &[f64]| -> Vec<f64> { a.iter().zip(b).map(|(a, b)| a / b).collect() };
    let (one_core_run, single, every) = (cases.len() - 3, cases.len() - 2, cases.len() - 1);
    let (run, run_one_core, replay) = (&seconds[0], &seconds[one_core_run], &seconds[single]);
    // CPU seconds over single-core replay's, pair by pair: what each costs beyond replay's work.
    // Replay on every core does the same work as on one, so its ratio is the price of handing
    // data between cores on this machine at this moment (it varies with where the virtual
    // cores land: 1.0–1.4 on the 2-core machine of `docs/performance.md`).
    let cpu: Vec<Option<Vec<f64>>> = finished.iter().map(|f| f.iter().map(|f| f.cpu).collect()).collect();
    if let Some(single) = &cpu[single] {
        for (i, label) in [(0, "run (default)"), (every, "replay, every core")] {
            if let Some(other) = &cpu[i] {
                table.add(format!("{label} CPU / single-core replay CPU"), "ratio", &ratio(other, single));
            }
        }
    }
    // The target's ratio as the product of two: run on one core over replay on one core (what
    // the orchestration costs beyond replay's work), and run on every core over run on one
    // (the speed-up the cores give, at the machine's price of handing data between them).
    if pinned {
        table.add("run on one core / single-core replay", "ratio", &ratio(run_one_core, replay));
        table.add("run (default) / run on one core", "ratio", &ratio(run, run_one_core));
    }
    let (default_ratios, workers_0_ratios) = (ratio(run, replay), ratio(&seconds[2], replay));
    let mut met = true;
    for (ratios, label) in [
        (&default_ratios, "run (default) / single-core replay"),
        (&workers_0_ratios, "run (--workers 0) / single-core replay"),
    ] {
        met &= median_of(ratios) <= RATIO_TARGET;
        table.add(label, "ratio", ratios);
    }
    // The cores' round trip, the largest of each round, and the target's ratio in the rounds on
    // either side of SHARED_CACHE_NS: what the machine's moment did to it.
    if let Some(round_trips) = round_trips {
        table.add("cores' round trip, the largest of each round", "ns", &round_trips);
        for (shared, label) in [(true, "≤"), (false, ">")] {
            let side: Vec<f64> = default_ratios
                .iter()
                .zip(&round_trips)
                .filter(|(_, ns)| (**ns <= SHARED_CACHE_NS) == shared)
                .map(|(r, _)| *r)
                .collect();
            if !side.is_empty() {
                let label = format!("run (default) / single-core replay, rounds at {label} {SHARED_CACHE_NS} ns");
                table.add(label, "ratio", &side);
            }
        }
    }
    met
}

// ---------------------------------------------------------------------------------------------
// 3. At-least-once under SIGKILL

/// What identifies one occurrence in the input and in the sink's lines: the event's identity
/// fields (a patch keeps them; only name, count and firstTimestamp change) and its own time.
/// Two occurrences may share it, so identities are counted, not merely collected.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Identity {
    object: String,
    source: String,
    reason: String,
    type_: String,
    message: String,
    at: String,
}

impl Identity {
    fn of(e: &Event) -> Self {
        let o = &e.involved_object;
        let at = e.last_timestamp.or(e.event_time).map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
        Self {
            object: format!(
                "{}/{}/{}/{} uid={} ({})",
                e.metadata.namespace, o.kind, o.namespace, o.name, o.uid, o.field_path
            ),
            source: format!("{}@{}", e.source.component, e.source.host),
            reason: e.reason.to_string(),
            type_: e.type_.to_string(),
            message: e.message.to_string(),
            at: at.unwrap_or_default(),
        }
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {} {} at {}: {:?}", self.object, self.source, self.type_, self.reason, self.at, self.message)
    }
}

/// The input's occurrences, counted by identity (decoded as `run` decodes them).
fn input_identities(stream: &Path) -> HashMap<Identity, u64> {
    let mut counts = HashMap::new();
    let mut decoder = Decoder::new();
    let mut count = |item: Result<Decoded, _>| {
        if let Ok(Decoded::Event { event, .. }) = item {
            *counts.entry(Identity::of(&event)).or_default() += 1;
        }
    };
    let file = BufReader::new(std::fs::File::open(stream).expect("the stream"));
    for line in file.lines() {
        decoder.push_line(&line.expect("reading the stream"), &mut count);
    }
    if let Some(error) = decoder.finish() {
        count(Err(error));
    }
    counts
}

/// A line of the JSON-lines sink (`{"verb","event","patch"}`), only its event.
#[derive(Deserialize)]
struct SinkLine {
    event: Event,
}

/// The sink's occurrences, counted by identity, and its lines that are not sink calls.
fn output_identities(out: &Path) -> (HashMap<Identity, u64>, Vec<String>) {
    let mut counts = HashMap::new();
    let mut unreadable = Vec::new();
    let text = std::fs::read_to_string(out).unwrap_or_default();
    for (n, line) in text.lines().enumerate() {
        match serde_json::from_str::<SinkLine>(line) {
            Ok(call) => *counts.entry(Identity::of(&call.event)).or_default() += 1,
            Err(e) => unreadable.push(format!("line {}: {e}", n + 1)),
        }
    }
    (counts, unreadable)
}

/// How the killed runs went.
#[derive(Default)]
struct Restarts {
    /// Saved byte offset after each killed run (`None`: nothing saved yet).
    positions: Vec<Option<u64>>,
    /// The run that ended by itself, if one did.
    last: Option<Finished>,
}

impl Restarts {
    /// Killed runs whose saved position did not advance, as (run number from 1, position).
    fn stalls(&self) -> Vec<(usize, Option<u64>)> {
        let before = std::iter::once(None).chain(self.positions.iter().copied());
        before.zip(&self.positions).enumerate().filter(|(_, (b, p))| *p <= b).map(|(i, (_, p))| (i + 1, *p)).collect()
    }
}

/// The saved byte offset in `state`, if any.
fn saved_offset(state: &Path) -> Option<u64> {
    match SavedState::load(state).expect("a readable state file")?.position {
        Position::FileOffset(offset) => Some(offset),
        Position::ResourceVersion(rv) => panic!("a file source saved resourceVersion {rv}"),
    }
}

/// Waits for `child` until `deadline`; `None` when it is still running then.
fn wait_until(child: &mut Child, deadline: Instant) -> Option<ExitStatus> {
    loop {
        if let Some(status) = child.try_wait().expect("waiting for eventpipe") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Starts `command` again and again, killing it with SIGKILL after [`KILL_EVERY`], until a run
/// ends by itself (or [`MAX_STALLS`] killed runs in a row saved nothing new).
fn kill_and_restart(command: impl Fn() -> Command, state: &Path, log: &Path) -> Restarts {
    let mut restarts = Restarts::default();
    let mut stalled_in_a_row = 0;
    loop {
        let stderr = std::fs::File::create(log).expect("the run's log");
        let started = Instant::now();
        let mut child = command().stderr(stderr).spawn().expect("starting eventpipe");
        if let Some(status) = wait_until(&mut child, started + KILL_EVERY) {
            let stderr = std::fs::read_to_string(log).unwrap_or_default();
            assert!(status.success(), "the last run failed ({status}):\n{stderr}");
            restarts.last = Some(Finished { wall: started.elapsed(), cpu: None, stderr });
            return restarts;
        }
        child.kill().expect("SIGKILL"); // Child::kill is SIGKILL on Unix
        child.wait().expect("reaping eventpipe");
        let position = saved_offset(state);
        let advanced = position > restarts.positions.last().copied().flatten();
        stalled_in_a_row = if advanced { 0 } else { stalled_in_a_row + 1 };
        restarts.positions.push(position);
        if stalled_in_a_row >= MAX_STALLS {
            return restarts;
        }
    }
}

/// One at-least-once scenario: its input, sink file, state file and log of the current run.
struct Scenario {
    input: PathBuf,
    out: PathBuf,
    state: PathBuf,
    log: PathBuf,
}

impl Scenario {
    fn new(bench: &Bench, name: &str, input: PathBuf) -> Self {
        let path = |what: &str| bench.path(&format!("{name}.{what}"));
        Self { input, out: path("out.jsonl"), state: path("state.json"), log: path("log") }
    }

    /// `run` from the input to the sink file, at least once, writing every event.
    fn command(&self, bench: &Bench) -> Command {
        let mut run = bench.eventpipe(["run", "--summary-json", "--delivery=at-least-once"]);
        run.args(WRITE_EVERY_EVENT)
            .arg(format!("--state-file={}", self.state.display()))
            .arg(format!("--source=jsonl:{}", self.input.display()))
            .arg(format!("--sink=jsonl:{}", self.out.display()));
        run
    }

    /// Checks the sink file against `expected` and prints what was lost; returns whether the
    /// output holds every input occurrence and nothing else is wrong.
    fn check(&self, expected: &HashMap<Identity, u64>, summary: &Summary) -> bool {
        let (written, unreadable) = output_identities(&self.out);
        let report = Comparison::of(expected, &written);
        println!(
            "  input {} events, output {} lines: lost {}, duplicates {}, not in the input {}, unreadable lines {} \
             (the last run: bad lines {}, skipped {}, aggregated {}, dropped {}, gave up {})",
            report.input,
            report.output + unreadable.len() as u64,
            report.lost.iter().map(|(_, n)| n).sum::<u64>(),
            report.duplicates,
            report.foreign,
            unreadable.len(),
            summary.bad_lines,
            summary.skipped,
            summary.aggregated,
            summary.dropped,
            summary.gave_up
        );
        for (identity, missing) in report.lost.iter().take(LOST_SHOWN) {
            println!("  LOST {missing}× {identity}");
        }
        if report.lost.len() > LOST_SHOWN {
            println!("  … and {} more lost identities", report.lost.len() - LOST_SHOWN);
        }
        for line in unreadable.iter().take(LOST_SHOWN) {
            println!("  UNREADABLE {line}");
        }
        report.lost.is_empty() && report.foreign == 0 && unreadable.is_empty() && summary.bad_lines == 0
    }
}

/// `source` played `copies` times, into `target`.
fn repeat(source: &Path, copies: u32, target: &Path) {
    let mut out = BufWriter::new(std::fs::File::create(target).expect("the repeated stream"));
    for _ in 0..copies {
        let mut input = std::fs::File::open(source).expect("the stream");
        std::io::copy(&mut input, &mut out).expect("writing the repeated stream");
    }
    out.flush().expect("writing the repeated stream");
}

/// Figure 3; returns whether nothing was lost and every restart made progress.
///
/// An uninterrupted run first gives the baseline (and checks the check: nothing lost, no
/// duplicates). The killed runs then read the stream played as many times as makes an
/// uninterrupted run last [`KILLED_RUN_PERIODS`] kill periods, so that several kills land
/// mid-stream however fast the machine is.
fn at_least_once_under_sigkill(bench: &Bench) -> bool {
    let once = input_identities(&bench.stream);
    let clean = Scenario::new(bench, "uninterrupted", bench.stream.clone());
    let baseline = timed(clean.command(bench));
    println!("at-least-once, uninterrupted: {:.2} s", baseline.wall.as_secs_f64());
    let clean_ok = clean.check(&once, &baseline.summary());

    let copies = (KILLED_RUN_PERIODS * KILL_EVERY.as_secs_f64() / baseline.wall.as_secs_f64()).ceil().max(1.0) as u32;
    let input = bench.path("repeated.jsonl");
    repeat(&bench.stream, copies, &input);
    let expected: HashMap<Identity, u64> = once.iter().map(|(id, n)| (id.clone(), n * u64::from(copies))).collect();
    let killed = Scenario::new(bench, "killed", input);
    let started = Instant::now();
    let restarts = kill_and_restart(|| killed.command(bench), &killed.state, &killed.log);
    let elapsed = started.elapsed();
    let Some(last) = &restarts.last else {
        println!(
            "at-least-once, SIGKILL: GAVE UP after {} restarts: {MAX_STALLS} killed runs in a row saved no new \
             position (positions {:?})",
            restarts.positions.len(),
            restarts.positions
        );
        return false;
    };
    println!(
        "at-least-once, SIGKILL every {} s, the stream played {copies} times: {} restart(s), {:.1} s in all \
         (the last run read {} events in {:.1} s); saved byte offsets at the kills {:?}",
        KILL_EVERY.as_secs(),
        restarts.positions.len(),
        elapsed.as_secs_f64(),
        last.summary().read,
        last.wall.as_secs_f64(),
        restarts.positions
    );
    let stalls = restarts.stalls();
    for (run, position) in &stalls {
        println!("  run {run} was killed without saving a new position (saved {position:?})");
    }
    let killed_ok = killed.check(&expected, &last.summary());
    clean_ok && killed_ok && stalls.is_empty() && !restarts.positions.is_empty()
}

/// Input against output, by identity.
struct Comparison {
    input: u64,
    output: u64,
    /// Identities seen fewer times in the output than in the input, with how many are missing.
    lost: Vec<(Identity, u64)>,
    /// Output occurrences beyond the input's count.
    duplicates: u64,
    /// Output occurrences whose identity is not in the input at all.
    foreign: u64,
}

impl Comparison {
    fn of(expected: &HashMap<Identity, u64>, written: &HashMap<Identity, u64>) -> Self {
        let mut lost: Vec<(Identity, u64)> = expected
            .iter()
            .filter_map(|(id, &n)| {
                let got = written.get(id).copied().unwrap_or(0);
                (got < n).then(|| (id.clone(), n - got))
            })
            .collect();
        lost.sort();
        let (mut duplicates, mut foreign) = (0, 0);
        for (id, &got) in written {
            match expected.get(id) {
                Some(&n) => duplicates += got.saturating_sub(n),
                None => foreign += got,
            }
        }
        Self { input: expected.values().sum(), output: written.values().sum(), lost, duplicates, foreign }
    }
}
