//! Shadow plugins: a candidate version of a plugin runs beside the serving one, on the same
//! batches, in instances of its own (its own state), and never affects output. Where the two
//! answer differently for an event, the divergence is counted and — the first `max` of them —
//! written to a JSON-lines file with both answers:
//!
//! ```json
//! {"plugin":"by-reason","tenant":"default","kind":"aggregate-key","event":"shop/web-0.17… BackOff about Pod/web-0","serving":["…","…"],"candidate":["…","…"]}
//! ```
//!
//! Key functions (aggregate key, message combiner, spam key) are compared on the strings they
//! return, filters on their verdicts (`"keep"` or `{"drop": reason}`); a candidate call that
//! fails is a divergence whose candidate answer is `{"error": …}`. The serving side of the
//! comparison is a call of its own (not counted in the plugin's series), so a shadow costs
//! two extra calls per batch. Sinks and watchers have no shadow. Promoting a candidate is the
//! normal hot reload (copy it into the plugins directory under the plugin's name).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::convert::{describe, unpack};
use super::projection::{ProjectedFilter, ProjectedKeys, Verdict};
use super::{Plugin, PluginHandle, PluginSlot};
use crate::event::Event;

/// Divergences written to the diffs file by default before it stops (they are still counted).
pub const DEFAULT_SHADOW_DIFFS_MAX: u64 = 100;

/// Where the first divergences go: a JSON-lines writer, at most `max` lines.
pub struct ShadowLog {
    out: Mutex<Option<Box<dyn Write + Send>>>,
    max: u64,
    written: AtomicU64,
}

impl std::fmt::Debug for ShadowLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShadowLog").field("max", &self.max).finish_non_exhaustive()
    }
}

impl ShadowLog {
    /// A log writing at most `max` lines to `out` (`None`: divergences are only counted).
    pub fn new(out: Option<Box<dyn Write + Send>>, max: u64) -> Arc<Self> {
        Arc::new(Self { out: Mutex::new(out), max, written: AtomicU64::new(0) })
    }

    /// Lines written so far.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    fn record(&self, line: &Value) {
        if self.written.fetch_add(1, Ordering::Relaxed) >= self.max {
            return;
        }
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(w) = out.as_mut()
            && let Err(error) = writeln!(w, "{line}").and_then(|()| w.flush())
        {
            tracing::warn!(%error, "cannot write the shadow diffs file; divergences are only counted from now on");
            *out = None;
        }
    }
}

/// A candidate version set beside a plugin name ([`super::PluginSlot::set_shadow`]), with its
/// counters over every tenant. The candidate sits in a slot of its own, so that its file is
/// hot-reloaded like a plugin's ([`super::registry::PluginRegistry::reload_shadow_file`]): the
/// comparisons move to the new candidate version at their next batch.
#[derive(Debug)]
pub struct Shadow {
    candidate: Arc<PluginSlot>,
    file: PathBuf,
    log: Arc<ShadowLog>,
    compared: AtomicU64,
    diverged: AtomicU64,
}

/// What a shadow found so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ShadowStats {
    /// Events both versions answered for.
    pub compared: u64,
    /// Events they answered differently for.
    pub diverged: u64,
}

impl Shadow {
    /// `candidate`, loaded from `file`, shadowing its name, divergences written to `log`.
    pub fn new(candidate: Arc<Plugin>, file: PathBuf, log: Arc<ShadowLog>) -> Arc<Self> {
        let candidate = PluginSlot::new(candidate);
        Arc::new(Self { candidate, file, log, compared: AtomicU64::new(0), diverged: AtomicU64::new(0) })
    }

    /// The candidate's slot (its current version: [`PluginSlot::load`]).
    pub fn candidate(&self) -> &Arc<PluginSlot> {
        &self.candidate
    }

    /// The candidate's file, as given.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The counters now.
    pub fn stats(&self) -> ShadowStats {
        ShadowStats { compared: self.compared.load(Ordering::Relaxed), diverged: self.diverged.load(Ordering::Relaxed) }
    }

    fn tally(&self, handle: &PluginHandle, events: &[&Event], answers: Vec<(Value, Value)>) {
        self.compared.fetch_add(events.len() as u64, Ordering::Relaxed);
        for (event, (serving, candidate)) in events.iter().zip(answers) {
            if serving == candidate {
                continue;
            }
            self.diverged.fetch_add(1, Ordering::Relaxed);
            self.log.record(&json!({
                "plugin": handle.name(),
                "tenant": &**handle.tenant(),
                "kind": handle.kind().to_string(),
                "event": describe(event),
                "serving": serving,
                "candidate": candidate,
            }));
        }
    }
}

/// The two callers of one tenant's use of a shadowed plugin: the serving version (a handle of
/// its own, so the plugin's series count only real calls) and the candidate.
pub(crate) struct ShadowCalls<C> {
    shadow: Arc<Shadow>,
    handle: PluginHandle,
    serving: C,
    candidate: C,
}

impl<C> ShadowCalls<C> {
    /// Both versions' `answers` for `events` (one value per event), compared event by event;
    /// nothing is compared when the serving version itself fails (its own path reports that).
    fn compare_with(&self, events: &[&Event], answers: impl Fn(&C) -> Result<Vec<Value>, String>) {
        let Ok(serving) = answers(&self.serving) else { return };
        let candidate = match answers(&self.candidate) {
            Ok(c) => c,
            Err(error) => vec![json!({ "error": error }); events.len()],
        };
        self.shadow.tally(&self.handle, events, serving.into_iter().zip(candidate).collect());
    }

    fn make(handle: &PluginHandle, caller: impl Fn(PluginHandle) -> C) -> Option<Self> {
        let shadow = handle.slot().shadow()?;
        let settings = handle.settings().clone();
        let serving = caller(PluginHandle::new(handle.slot().clone(), handle.tenant(), settings.clone()));
        let candidate = caller(PluginHandle::new(shadow.candidate.clone(), handle.tenant(), settings));
        Some(Self { shadow, handle: handle.clone(), serving, candidate })
    }
}

impl ShadowCalls<ProjectedKeys> {
    /// For a key function, when its slot has a shadow.
    pub(crate) fn for_keys(handle: &PluginHandle) -> Option<Self> {
        Self::make(handle, ProjectedKeys::new)
    }

    /// Both versions' answers (`per_event` strings per event) for `events` (each packed by its
    /// own version's key fields), compared event by event.
    pub(crate) fn compare(&self, events: &[&Event], per_event: usize) {
        self.compare_with(events, |caller: &ProjectedKeys| -> Result<Vec<Value>, String> {
            let (answer, _, _, projection) = caller.call(events).map_err(|e| e.to_string())?;
            let packed = answer?;
            let strings = unpack(&packed, events.len() * per_event)?;
            Ok(strings
                .chunks(per_event)
                .zip(events)
                .map(|(s, e)| {
                    let mut strings: Vec<String> = s.iter().map(|b| String::from_utf8_lossy(b).into_owned()).collect();
                    // A local key declared to be a key field is that field, whatever was returned.
                    if let (Some(field), Some(local)) = (projection.local_key(e), strings.get_mut(1)) {
                        *local = field.to_string();
                    }
                    Value::from(strings)
                })
                .collect())
        });
    }
}

impl ShadowCalls<ProjectedFilter> {
    /// For a filter, when its slot has a shadow.
    pub(crate) fn for_filter(handle: &PluginHandle) -> Option<Self> {
        Self::make(handle, ProjectedFilter::new)
    }

    /// Both versions' verdicts for `events` (each packed by its own version's fields),
    /// compared event by event.
    pub(crate) fn compare(&self, events: &[&Event]) {
        self.compare_with(events, |caller: &ProjectedFilter| -> Result<Vec<Value>, String> {
            let verdicts = caller.call(events).map_err(|e| e.to_string())?;
            Ok(verdicts
                .into_iter()
                .map(|v| match v {
                    Verdict::Keep => json!("keep"),
                    Verdict::Drop(reason) => json!({ "drop": reason }),
                })
                .collect())
        });
    }
}
