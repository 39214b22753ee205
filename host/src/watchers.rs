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

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::task::JoinHandle;

use crate::broadcaster::{Broadcaster, BroadcasterError, FullChannelBehavior};
use crate::correlator::PREPARE_BATCH_SIZE;
use crate::event::Event;
use crate::plugin::PluginHandle;
use crate::plugin::watcher::WasmWatcher;

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
}

impl WatcherSpec {
    /// `plugin` with the defaults: a queue of [`DEFAULT_WATCHER_QUEUE_LENGTH`] events that
    /// drops when full.
    pub fn new(plugin: impl Into<String>) -> Self {
        Self {
            plugin: plugin.into(),
            queue_length: DEFAULT_WATCHER_QUEUE_LENGTH,
            full_channel_behavior: FullChannelBehavior::DropIfChannelFull,
        }
    }
}

/// `--watcher NAME|FILE.wasm[,queue_length=N][,full_channel_behavior=drop|wait]`: the keys of a
/// `[[watchers]]` table.
impl std::str::FromStr for WatcherSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        const FORM: &str = "NAME or FILE.wasm, then optionally ,queue_length=N and ,full_channel_behavior=drop|wait";
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
                _ => return Err(format!("{s}: expected {FORM}")),
            }
        }
        Ok(spec)
    }
}

/// What a watcher plugin did; live (shared with `/metrics`) and final.
#[derive(Debug, Default)]
pub struct WatcherCounters {
    /// Events handed to the plugin in calls that succeeded.
    pub seen: AtomicU64,
    /// Events in calls that failed (trap, fuel, memory limit).
    pub failed: AtomicU64,
    /// Events its full queue dropped (`DropIfChannelFull`).
    pub dropped: AtomicU64,
}

/// A snapshot of [`WatcherCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct WatcherStats {
    /// Events handed to the plugin in calls that succeeded.
    pub seen: u64,
    /// Events in calls that failed.
    pub failed: u64,
    /// Events its full queue dropped.
    pub dropped: u64,
}

impl WatcherCounters {
    /// The counts now.
    pub fn snapshot(&self) -> WatcherStats {
        WatcherStats {
            seen: self.seen.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
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
    broadcaster: &Broadcaster<Event>,
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
            let call = tokio::task::spawn_blocking(move || plugin.watch(&batch.iter().collect::<Vec<_>>())).await;
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
        assert!("".parse::<WatcherSpec>().is_err());
    }
}
