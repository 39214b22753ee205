//! `eventpipe bench`: what the tenant stage and each plugin cost on a stream of the user's own.
//!
//! The whole input is decoded first (any shape the decoder accepts; replay lines keep their
//! clocks, other events use their own time, as `replay`). Then, `reps` times, fresh tenant
//! stages (new correlator state, new plugin instances, empty memos) run every event through
//! route → rules → filters → keys → correlate, as `run` does but with no sink: the result's
//! event is given back to `update_state`, as `replay` does. Each pass is timed (the copy of the
//! input it consumes is made before the clock starts); per plugin, the time inside its calls,
//! the fuel and the memo's hits are read from its counters.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::correlator::{Occurrence, PREPARE_BATCH_SIZE};
use crate::event::Event;
use crate::pipeline::plan::TenantPlan;
use crate::pipeline::stage::{Staged, TenantStages};
use crate::plugin::PluginStatsSnapshot;
use crate::source::decode::{Decoded, Decoder};

/// Minimum, median and maximum over the passes.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Spread {
    /// The fastest pass.
    pub min: f64,
    /// The median pass.
    pub median: f64,
    /// The slowest pass.
    pub max: f64,
}

impl Spread {
    fn of(mut values: Vec<f64>) -> Self {
        values.sort_by(f64::total_cmp);
        match values.len() {
            0 => Self::default(),
            n => Self { min: values[0], median: values[n / 2], max: values[n - 1] },
        }
    }
}

/// What one plugin of one tenant cost.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PluginBench {
    /// Plugin name.
    pub plugin: String,
    /// Tenant using it.
    pub tenant: String,
    /// Its kind.
    pub kind: String,
    /// Nanoseconds inside its calls per event of the stream (all tenants), over the passes.
    pub ns_per_event: Spread,
    /// Fuel (≈ Wasm instructions) per event it was called on, over all passes.
    pub fuel_per_event: f64,
    /// Share of the events it was asked about that its memo answered (pure key plugins;
    /// `None` for others).
    pub memo_hit_rate: Option<f64>,
    /// Calls per pass.
    pub calls_per_pass: f64,
}

/// What [`bench()`] measured.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BenchReport {
    /// Events in the input (documents that are not events are left out).
    pub events: usize,
    /// Input documents that were not events or could not be decoded.
    pub skipped_input: usize,
    /// Passes made.
    pub reps: usize,
    /// Nanoseconds per event of a whole pass (the tenant stage and its plugins).
    pub stage_ns_per_event: Spread,
    /// Events per second of the median pass.
    pub events_per_second: f64,
    /// Per plugin of every tenant, in plan order.
    pub plugins: Vec<PluginBench>,
}

/// Decodes `input` into occurrences with replay's clocks; returns them and how many documents
/// were not events (or not decodable). Bytes that are not UTF-8 are read as `replay` reads
/// them (as Go does: U+FFFD each).
pub fn decode_input(input: &[u8]) -> (Vec<Occurrence>, usize) {
    let mut decoder = Decoder::new();
    let (mut occurrences, mut skipped) = (Vec::new(), 0);
    let mut take = |item| match item {
        Ok(Decoded::Event { event, clock, spam_filter_clock, .. }) => {
            occurrences.push(Occurrence::replayed(event, clock, spam_filter_clock))
        }
        _ => skipped += 1,
    };
    for line in input.split(|&b| b == b'\n') {
        decoder.push_bytes(line, &mut take);
    }
    if let Some(error) = decoder.finish() {
        take(Err(error));
    }
    (occurrences, skipped)
}

/// One pass over `occurrences` through fresh stages of `plan`, in batches of
/// [`PREPARE_BATCH_SIZE`]: its wall time.
pub fn pass(plan: &Arc<TenantPlan>, occurrences: Vec<Occurrence>) -> Duration {
    pass_writing(plan, occurrences, |_| {})
}

/// As [`pass`], handing each event the correlator writes to `write` (inside the timed pass),
/// before it is given back to `update_state`: a bench's stand-in for a sink.
pub fn pass_writing(plan: &Arc<TenantPlan>, occurrences: Vec<Occurrence>, mut write: impl FnMut(&Event)) -> Duration {
    let mut stages = TenantStages::new(plan.clone());
    let started = Instant::now();
    let mut batches = occurrences.into_iter().peekable();
    while batches.peek().is_some() {
        let batch: Vec<Occurrence> = batches.by_ref().take(PREPARE_BATCH_SIZE).collect();
        for (t, staged) in stages.prepare(batch) {
            if let Staged::Prepared(prepared) = staged {
                let key = prepared.state_key();
                let result = stages.finish(t, prepared);
                if let Some(event) = &result.event {
                    write(event);
                    stages.stage_mut(t).update_state_keyed(event, key);
                }
            }
        }
    }
    started.elapsed()
}

/// `reps` passes (at least one) of `occurrences` through `plan`, and what each plugin cost.
pub fn bench(plan: &Arc<TenantPlan>, occurrences: &[Occurrence], skipped_input: usize, reps: usize) -> BenchReport {
    let reps = reps.max(1);
    let handles: Vec<_> = plan.handles().cloned().collect();
    let snapshot = || handles.iter().map(|h| h.stats().snapshot()).collect::<Vec<_>>();
    let events = occurrences.len();
    let per_event = |d: Duration| d.as_nanos() as f64 / events.max(1) as f64;
    let (mut stage, mut plugin_ns): (Vec<f64>, Vec<Vec<f64>>) = (Vec::new(), vec![Vec::new(); handles.len()]);
    let first = snapshot();
    for _ in 0..reps {
        let before = snapshot();
        let input = occurrences.to_vec();
        stage.push(per_event(pass(plan, input)));
        for ((ns, b), a) in plugin_ns.iter_mut().zip(&before).zip(snapshot()) {
            ns.push((a.call_nanos - b.call_nanos) as f64 / events.max(1) as f64);
        }
    }
    let last = snapshot();
    let plugins = handles
        .iter()
        .zip(plugin_ns)
        .zip(first.iter().zip(&last))
        .map(|((h, ns), (a, b))| {
            let delta = |f: fn(&PluginStatsSnapshot) -> u64| (f(b) - f(a)) as f64;
            let asked = delta(|s| s.memo_hits) + delta(|s| s.memo_misses);
            PluginBench {
                plugin: h.name().to_string(),
                tenant: h.tenant().to_string(),
                kind: h.kind().to_string(),
                ns_per_event: Spread::of(ns),
                fuel_per_event: delta(|s| s.fuel_consumed) / delta(|s| s.events).max(1.0),
                memo_hit_rate: (asked > 0.0).then(|| delta(|s| s.memo_hits) / asked),
                calls_per_pass: delta(|s| s.calls) / reps as f64,
            }
        })
        .collect();
    let stage = Spread::of(stage);
    BenchReport {
        events,
        skipped_input,
        reps,
        stage_ns_per_event: stage,
        events_per_second: if stage.median > 0.0 { 1e9 / stage.median } else { 0.0 },
        plugins,
    }
}

impl std::fmt::Display for BenchReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.stage_ns_per_event;
        writeln!(f, "{} events ({} other documents skipped), {} pass(es)", self.events, self.skipped_input, self.reps)?;
        writeln!(
            f,
            "tenant stage: {:.0} ns/event median (min {:.0}, max {:.0}), {:.0} events/s",
            s.median, s.min, s.max, self.events_per_second
        )?;
        writeln!(
            f,
            "{:<20} {:<12} {:<17} {:>28} {:>12} {:>10} {:>12}",
            "plugin", "tenant", "kind", "ns/event median (min–max)", "fuel/event", "memo hits", "calls/pass"
        )?;
        for p in &self.plugins {
            let ns = format!("{:.0} ({:.0}–{:.0})", p.ns_per_event.median, p.ns_per_event.min, p.ns_per_event.max);
            let memo = p.memo_hit_rate.map_or("-".to_string(), |r| format!("{:.1}%", r * 100.0));
            writeln!(
                f,
                "{:<20} {:<12} {:<17} {:>28} {:>12.0} {:>10} {:>12.0}",
                p.plugin, p.tenant, p.kind, ns, p.fuel_per_event, memo, p.calls_per_pass
            )?;
        }
        Ok(())
    }
}
