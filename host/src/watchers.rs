//! Wasm watcher plugins attached to the Broadcaster: each is a watcher of its own (client-go
//! `StartEventWatcher` with a plugin as the handler), with its own queue length and full-queue
//! behaviour — `DropIfChannelFull` by default, as client-go's watchers — so a slow, trapping or
//! looping plugin only loses its own events and never holds back the Broadcaster or the other
//! watchers. Calls run on the blocking pool (one batch of up to 256 events per call), each cut
//! off by the plugin's fuel per event; a failed call is logged with the plugin's name and
//! counted, and the next batch goes to a fresh instance.
//!
//! A watcher named by plugin name is called through its registry slot, so a new `.wasm` in the
//! plugins directory swaps in without losing the watcher's queue.
//!
//! **Watchers of the results** (`on=results`) watch the [`WatchCache`] instead: the correlated
//! events as written (created and patched), each with its resourceVersion. Such a watcher is a
//! cursor over the cache's window rather than a queue, so nothing is dropped while it is slow —
//! a plugin being recompiled after a hot reload, a call looping until its fuel runs out — it
//! resumes at the resourceVersion it reached; a batch whose call fails is tried once more (on the
//! fresh instance, which after a hot reload is the new version) before it is counted as failed.
//! It can start at an earlier resourceVersion (`resource_version=N`: every result after N still
//! in the window, then live). Only a watcher that falls out of the window loses results: it is
//! told how many (counted as `dropped`) and goes on from the oldest one kept.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::task::JoinHandle;

use crate::broadcaster::{Broadcaster, BroadcasterError, FullChannelBehavior};
use crate::correlator::PREPARE_BATCH_SIZE;
use crate::event::{Event, SharedEvent};
use crate::plugin::PluginHandle;
use crate::plugin::watcher::WasmWatcher;
use crate::watch_cache::{Predicate, Start, TooOld, WatchCache};

/// What a watcher plugin watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WatchOn {
    /// The Broadcaster's events, as they come in (`on=input`, the default).
    #[default]
    Input,
    /// The correlated results, from the watch cache (`on=results`).
    Results,
}

/// Default queue length of a watcher plugin, events (client-go `maxQueuedEvents`).
pub const DEFAULT_WATCHER_QUEUE_LENGTH: usize = 1000;

/// A watcher plugin to attach: `--watcher NAME|FILE.wasm`, or a `[[watchers]]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatcherSpec {
    /// A plugin name (embedded, like `log`, or from the plugins directory) or a component file.
    pub plugin: String,
    /// Its queue length, events.
    pub queue_length: usize,
    /// What its full queue does.
    pub full_channel_behavior: FullChannelBehavior,
    /// What it watches.
    pub on: WatchOn,
    /// With [`WatchOn::Results`]: the resourceVersion to start after (`None`: now).
    pub resource_version: Option<u64>,
}

impl WatcherSpec {
    /// `plugin` with the defaults: a queue of [`DEFAULT_WATCHER_QUEUE_LENGTH`] events that
    /// drops when full.
    pub fn new(plugin: impl Into<String>) -> Self {
        Self {
            plugin: plugin.into(),
            queue_length: DEFAULT_WATCHER_QUEUE_LENGTH,
            full_channel_behavior: FullChannelBehavior::DropIfChannelFull,
            on: WatchOn::Input,
            resource_version: None,
        }
    }
}

/// `--watcher NAME|FILE.wasm[,queue_length=N][,full_channel_behavior=drop|wait][,on=input|results][,resource_version=N]`:
/// the keys of a `[[watchers]]` table.
impl std::str::FromStr for WatcherSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        const FORM: &str = "NAME or FILE.wasm, then optionally ,queue_length=N, ,full_channel_behavior=drop|wait, \
                            ,on=input|results and ,resource_version=N";
        let mut parts = s.split(',');
        let plugin = parts.next().unwrap_or_default();
        if plugin.is_empty() {
            return Err(format!("expected a watcher plugin: {FORM}"));
        }
        let mut spec = Self::new(plugin);
        for part in parts {
            match part.split_once('=') {
                Some(("queue_length", n)) => {
                    spec.queue_length =
                        n.parse().map_err(|_| format!("{s}: queue_length must be a number of events"))?;
                }
                Some(("full_channel_behavior", b)) => {
                    spec.full_channel_behavior = <FullChannelBehavior as clap::ValueEnum>::from_str(b, false)
                        .map_err(|_| format!("{s}: full_channel_behavior must be drop or wait"))?;
                }
                Some(("on", "input")) => spec.on = WatchOn::Input,
                Some(("on", "results")) => spec.on = WatchOn::Results,
                Some(("on", _)) => return Err(format!("{s}: on must be input or results")),
                Some(("resource_version", n)) => {
                    spec.resource_version =
                        Some(n.parse().map_err(|_| format!("{s}: resource_version must be a number"))?);
                }
                _ => return Err(format!("{s}: expected {FORM}")),
            }
        }
        Ok(spec)
    }
}

/// The watcher plugins a run attaches: those `given` (`--watcher`, then `[[watchers]]`) or,
/// when none is given, every watcher plugin of the plugins directory (drop-in, in file-name
/// order, each with the defaults of [`WatcherSpec::new`]).
pub fn attached_specs(given: Vec<WatcherSpec>, registry: &crate::plugin::registry::PluginRegistry) -> Vec<WatcherSpec> {
    if !given.is_empty() {
        return given;
    }
    registry.directory_plugins(crate::plugin::PluginKind::Watcher).into_iter().map(WatcherSpec::new).collect()
}

/// The plugin name a spec attaches: the stem of a `FILE.wasm`, else the name as given.
pub fn spec_plugin_name(spec: &WatcherSpec) -> String {
    crate::plugin::registry::plugin_name(std::path::Path::new(&spec.plugin)).unwrap_or_else(|| spec.plugin.clone())
}

/// What a watcher plugin did; live (shared with `/metrics`) and final.
#[derive(Debug, Default)]
pub struct WatcherCounters {
    /// Events handed to the plugin in calls that succeeded.
    pub seen: AtomicU64,
    /// Events in calls that failed (trap, fuel, memory limit).
    pub failed: AtomicU64,
    /// Events its full queue dropped (`DropIfChannelFull`); for a watcher of the results, the
    /// results it missed by falling out of the window.
    pub dropped: AtomicU64,
    /// A watcher of the results: the resourceVersion it has handled everything up to.
    pub resource_version: AtomicU64,
}

/// A snapshot of [`WatcherCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct WatcherStats {
    /// Events handed to the plugin in calls that succeeded.
    pub seen: u64,
    /// Events in calls that failed.
    pub failed: u64,
    /// Events its full queue dropped (results missed, for a watcher of the results).
    pub dropped: u64,
    /// A watcher of the results: the resourceVersion it has handled everything up to (0 for a
    /// watcher of the input).
    #[serde(skip_serializing_if = "is_zero")]
    pub resource_version: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl WatcherCounters {
    /// The counts now.
    pub fn snapshot(&self) -> WatcherStats {
        WatcherStats {
            seen: self.seen.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            resource_version: self.resource_version.load(Ordering::Relaxed),
        }
    }
}

/// A watcher plugin attached to a Broadcaster.
#[derive(Debug)]
pub struct PluginWatcher {
    /// The plugin (name, counters of its calls).
    pub handle: PluginHandle,
    /// Its live counts.
    pub counters: Arc<WatcherCounters>,
    /// Ends when the Broadcaster shuts down (after the queue is drained).
    pub task: JoinHandle<()>,
}

/// Attaches the `watcher` plugin `handle` to `broadcaster` with `spec`'s queue.
///
/// # Errors
/// [`BroadcasterError::Stopped`] after shutdown.
///
/// # Panics
/// When `handle` is not a watcher plugin (check its kind first).
pub fn attach(
    broadcaster: &Broadcaster<SharedEvent>,
    handle: PluginHandle,
    spec: &WatcherSpec,
) -> Result<PluginWatcher, BroadcasterError> {
    let mut watcher = broadcaster.watch_with(spec.queue_length, spec.full_channel_behavior)?;
    let plugin = Arc::new(WasmWatcher::new(handle.clone()).expect("a watcher plugin"));
    let counters = Arc::new(WatcherCounters::default());
    let c = counters.clone();
    let task = tokio::spawn(async move {
        while let Some(batch) = watcher.recv_batch(PREPARE_BATCH_SIZE).await {
            let n = batch.len() as u64;
            let plugin = plugin.clone();
            let call =
                tokio::task::spawn_blocking(move || plugin.watch(&batch.iter().map(|e| &***e).collect::<Vec<_>>()))
                    .await;
            match call {
                Ok(Ok(_)) => c.seen.fetch_add(n, Ordering::Relaxed),
                Ok(Err(error)) => {
                    tracing::warn!(%error, "watcher plugin call failed");
                    c.failed.fetch_add(n, Ordering::Relaxed)
                }
                Err(error) => {
                    tracing::error!(%error, "watcher plugin call panicked");
                    c.failed.fetch_add(n, Ordering::Relaxed)
                }
            };
            c.dropped.store(watcher.dropped(), Ordering::Relaxed);
        }
        c.dropped.store(watcher.dropped(), Ordering::Relaxed);
    });
    Ok(PluginWatcher { handle, counters, task })
}

/// Attaches the `watcher` plugin `handle` to the results of `cache` (see the module docs),
/// starting after `spec.resource_version` (or now). A resourceVersion the cache cannot serve —
/// one of an earlier run (a run's resourceVersions start above every earlier one), one that
/// left the window, or one ahead of the newest — starts it at the oldest result kept instead
/// (at a run's start: every result of the run), logged.
///
/// # Errors
/// [`TooOld`] only if the window moved on while it attached.
///
/// # Panics
/// When `handle` is not a watcher plugin (check its kind first).
pub fn attach_results(
    cache: &Arc<WatchCache>,
    handle: PluginHandle,
    spec: &WatcherSpec,
) -> Result<PluginWatcher, TooOld> {
    let start = spec.resource_version.map_or(Start::Now, Start::After);
    let (_, mut cursor) = match cache.cursor(start, Predicate::default()) {
        Ok(started) => started,
        Err(TooOld { asked, oldest }) => {
            tracing::info!(
                asked,
                oldest,
                "watcher plugin: resource_version {asked} is not in the watch cache (an earlier run's, gone, or \
                 ahead); starting after the oldest kept, {oldest}"
            );
            cache.cursor(Start::After(oldest), Predicate::default())?
        }
    };
    let plugin = Arc::new(WasmWatcher::new(handle.clone()).expect("a watcher plugin"));
    let counters = Arc::new(WatcherCounters::default());
    counters.resource_version.store(cursor.resource_version(), Ordering::Relaxed);
    let (c, cache) = (counters.clone(), cache.clone());
    let task = tokio::spawn(async move {
        loop {
            let batch = match cursor.next(PREPARE_BATCH_SIZE).await {
                Ok(Some(batch)) => batch,
                Ok(None) => break,
                Err(TooOld { asked, oldest }) => {
                    tracing::warn!(
                        missed = oldest - asked,
                        resource_version = oldest,
                        "watcher plugin fell out of the watch cache's window; going on from the oldest result kept"
                    );
                    c.dropped.fetch_add(oldest - asked, Ordering::Relaxed);
                    // (Start::Now never fails; After(oldest) only if the window moved on meanwhile.)
                    let fresh = cache
                        .cursor(Start::After(oldest), Predicate::default())
                        .or_else(|_| cache.cursor(Start::Now, Predicate::default()));
                    if let Ok((_, fresh)) = fresh {
                        cursor = fresh;
                    }
                    continue;
                }
            };
            let events: Arc<Vec<Event>> = Arc::new(batch.into_iter().map(|s| s.object.event.clone()).collect());
            let n = events.len() as u64;
            let mut failure = None;
            // A failed call is tried once more: the slot has replaced the poisoned instance (after
            // a hot reload, with the new version).
            for _ in 0..2 {
                let (plugin, events) = (plugin.clone(), events.clone());
                let call = tokio::task::spawn_blocking(move || plugin.watch(&events.iter().collect::<Vec<_>>())).await;
                failure = match call {
                    Ok(Ok(_)) => None,
                    Ok(Err(error)) => Some(error.to_string()),
                    Err(error) => Some(format!("panicked: {error}")),
                };
                if failure.is_none() {
                    break;
                }
            }
            match failure {
                None => c.seen.fetch_add(n, Ordering::Relaxed),
                Some(error) => {
                    tracing::warn!(%error, "watcher plugin call failed twice on a batch of results");
                    c.failed.fetch_add(n, Ordering::Relaxed)
                }
            };
            c.resource_version.store(cursor.resource_version(), Ordering::Relaxed);
        }
    });
    Ok(PluginWatcher { handle, counters, task })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watcher_flags_take_the_keys_of_a_watchers_table() {
        assert_eq!("log".parse(), Ok(WatcherSpec::new("log")));
        let spec: WatcherSpec = "w.wasm,queue_length=5,full_channel_behavior=wait".parse().unwrap();
        assert_eq!(
            (spec.plugin.as_str(), spec.queue_length, spec.full_channel_behavior),
            ("w.wasm", 5, FullChannelBehavior::WaitIfChannelFull)
        );
        assert!("log,queue_length=x".parse::<WatcherSpec>().unwrap_err().contains("queue_length"));
        assert!("log,full_channel_behavior=block".parse::<WatcherSpec>().unwrap_err().contains("drop or wait"));
        assert!("log,color=red".parse::<WatcherSpec>().is_err());
        let spec: WatcherSpec = "log,on=results,resource_version=42".parse().unwrap();
        assert_eq!((spec.on, spec.resource_version), (WatchOn::Results, Some(42)));
        assert!("log,on=output".parse::<WatcherSpec>().unwrap_err().contains("input or results"));
        assert!("".parse::<WatcherSpec>().is_err());
    }
}
