//! Delivery modes, and the source position that makes `at-least-once` survive restarts.
//!
//! | mode | watcher queues | guarantee | cost |
//! |---|---|---|---|
//! | `at-most-once` | `DropIfChannelFull` (client-go) | never blocks the source; a full queue drops (counted) | events lost under overload |
//! | `wait` | `WaitIfChannelFull` | nothing lost inside the process; a slow sink slows the source | a crash loses what was in flight |
//! | `at-least-once` | `WaitIfChannelFull` | the source position is saved only after every sink acknowledged every event before it; a restart resumes from there | duplicates after a crash (what was written after the last save is written again); a flush of the sinks per save |
//!
//! The router watcher handles events in broadcast order and counts those it has finished
//! (written to every sink of the event's tenant, or skipped / filtered / dropped by a sink's
//! error policy). The source records one [`Position`] per event it sends, in the same order;
//! the [`Committer`] matches the count to the positions, flushes the sinks and saves the
//! position of the last finished event in the state file (written to a temporary file, then
//! renamed over the old one).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// How events are delivered.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Delivery {
    /// `DropIfChannelFull`: at most once.
    AtMostOnce,
    /// `WaitIfChannelFull`: no loss inside the process (the default).
    #[default]
    Wait,
    /// `WaitIfChannelFull` plus the source position saved in this state file after the sinks
    /// acknowledged.
    AtLeastOnce {
        /// The state file.
        state_file: PathBuf,
    },
}

/// A delivery mode without its state file: `--delivery`, and a sink's `delivery` in the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeliveryMode {
    /// `DropIfChannelFull`: never blocks the source; drops are counted.
    AtMostOnce,
    /// `WaitIfChannelFull`: nothing lost inside the process.
    #[default]
    Wait,
    /// Wait, plus a saved source position: nothing lost across restarts (duplicates possible).
    AtLeastOnce,
}

impl Delivery {
    /// `mode` with the state file at-least-once saves its position in.
    ///
    /// # Errors
    /// At-least-once without a state file.
    pub fn new(mode: DeliveryMode, state_file: Option<PathBuf>) -> Result<Self, String> {
        Ok(match (mode, state_file) {
            (DeliveryMode::AtMostOnce, _) => Delivery::AtMostOnce,
            (DeliveryMode::Wait, _) => Delivery::Wait,
            (DeliveryMode::AtLeastOnce, Some(state_file)) => Delivery::AtLeastOnce { state_file },
            (DeliveryMode::AtLeastOnce, None) => return Err("at-least-once delivery needs a state file".into()),
        })
    }

    /// The mode, without the state file.
    pub fn mode(&self) -> DeliveryMode {
        match self {
            Delivery::AtMostOnce => DeliveryMode::AtMostOnce,
            Delivery::Wait => DeliveryMode::Wait,
            Delivery::AtLeastOnce { .. } => DeliveryMode::AtLeastOnce,
        }
    }
}

/// Where a source stands after an event: what a restart resumes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Position {
    /// A byte offset in a JSON-lines file, at a line start.
    FileOffset(u64),
    /// A Kubernetes resourceVersion to watch from.
    ResourceVersion(String),
}

/// The state file's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedState {
    /// The source spec the position belongs to (a position of another source is ignored).
    pub source: String,
    /// Where to resume.
    pub position: Position,
    /// Events acknowledged when it was saved (this run).
    pub acknowledged: u64,
}

/// Why the state file could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("state file {}: {message}", path.display())]
pub struct StateError {
    /// The file.
    pub path: PathBuf,
    /// What went wrong.
    pub message: String,
}

impl SavedState {
    /// The saved state in `path`; `None` when the file does not exist.
    ///
    /// # Errors
    /// [`StateError`] when it exists but cannot be read or parsed.
    pub fn load(path: &Path) -> Result<Option<Self>, StateError> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| StateError { path: path.into(), message: format!("not a state file: {e}") }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StateError { path: path.into(), message: e.to_string() }),
        }
    }

    /// Writes this state to `path` atomically (temporary file, fsync, rename).
    ///
    /// # Errors
    /// [`StateError`] on any I/O error.
    pub fn save(&self, path: &Path) -> Result<(), StateError> {
        use std::io::Write;
        let fail = |e: std::io::Error| StateError { path: path.into(), message: e.to_string() };
        let tmp = path.with_extension("tmp");
        let mut file = std::fs::File::create(&tmp).map_err(fail)?;
        file.write_all(&serde_json::to_vec(self).expect("state serialises")).map_err(fail)?;
        file.sync_all().map_err(fail)?;
        std::fs::rename(&tmp, path).map_err(fail)
    }
}

/// The positions of the events a source sent, in order, and how many of them the router has
/// finished.
#[derive(Debug, Default)]
pub struct Progress {
    positions: Mutex<VecDeque<Position>>,
    finished: AtomicU64,
    taken: AtomicU64,
}

impl Progress {
    /// Records the position after the next event sent (call before sending it).
    pub fn sent(&self, position: Position) {
        self.positions.lock().unwrap_or_else(|p| p.into_inner()).push_back(position);
    }

    /// Counts `n` events finished by the router.
    pub fn finished(&self, n: u64) {
        self.finished.fetch_add(n, Ordering::AcqRel);
    }

    /// Events finished so far.
    pub fn finished_count(&self) -> u64 {
        self.finished.load(Ordering::Acquire)
    }

    /// The position after the last finished event not yet taken, if any finished since the last
    /// call.
    pub fn take_finished(&self) -> Option<Position> {
        let finished = self.finished.load(Ordering::Acquire);
        let taken = self.taken.load(Ordering::Acquire);
        let mut positions = self.positions.lock().unwrap_or_else(|p| p.into_inner());
        let mut last = None;
        for _ in taken..finished {
            match positions.pop_front() {
                Some(p) => last = Some(p),
                None => break,
            }
        }
        self.taken.store(finished, Ordering::Release);
        last
    }
}

/// Turns acknowledgements that arrive in any order into [`Progress::finished`] counts of the
/// acknowledged prefix: event `seq` (numbered in Broadcaster order from 0) counts only once it
/// and every event before it are acknowledged, so a saved position never skips an event still
/// in flight. Shared by the partitions of a run.
#[derive(Debug, Default)]
pub struct Acknowledgements {
    state: Mutex<AckState>,
    progress: Option<Arc<Progress>>,
}

#[derive(Debug, Default)]
struct AckState {
    /// Sequence number of `done[0]`.
    base: u64,
    /// Whether each event from `base` on is acknowledged.
    done: VecDeque<bool>,
}

impl Acknowledgements {
    /// A tracker reporting to `progress` (none: it only numbers events).
    pub fn new(progress: Option<Arc<Progress>>) -> Self {
        Self { state: Mutex::default(), progress }
    }

    /// Numbers the next event (call in Broadcaster order).
    pub fn begin(&self) -> u64 {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.done.push_back(false);
        state.base + state.done.len() as u64 - 1
    }

    /// Event `seq` is finished (written to every sink of its tenant, or skipped, filtered or
    /// dropped); reports the prefix that became complete.
    pub fn ack(&self, seq: u64) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let Some(i) = seq.checked_sub(state.base) else { return };
        match state.done.get_mut(i as usize) {
            Some(slot) => *slot = true,
            None => return,
        }
        let mut finished = 0;
        while state.done.front() == Some(&true) {
            state.done.pop_front();
            finished += 1;
        }
        state.base += finished;
        drop(state);
        if let (Some(progress), true) = (&self.progress, finished > 0) {
            progress.finished(finished);
        }
    }

    /// Events numbered and not yet part of the acknowledged prefix.
    pub fn pending(&self) -> usize {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).done.len()
    }
}

/// Saves positions for `at-least-once`: after flushing the sinks, the position of the last
/// finished event.
pub struct Committer {
    /// The state file.
    pub state_file: PathBuf,
    /// The source spec (stored with the position).
    pub source: String,
    /// The shared progress.
    pub progress: Arc<Progress>,
}

impl Committer {
    /// Saves the newest finished position (after `flush` succeeded); returns whether it saved.
    ///
    /// # Errors
    /// [`StateError`] when the sinks cannot be flushed or the file cannot be written.
    pub fn commit(&self, flush: impl FnOnce() -> Result<(), String>) -> Result<bool, StateError> {
        let Some(position) = self.progress.take_finished() else { return Ok(false) };
        flush().map_err(|message| StateError { path: self.state_file.clone(), message })?;
        let state = SavedState { source: self.source.clone(), position, acknowledged: self.progress.finished_count() };
        state.save(&self.state_file)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acknowledgements_report_only_the_complete_prefix() {
        let progress = Arc::new(Progress::default());
        let acks = Acknowledgements::new(Some(progress.clone()));
        let seqs: Vec<u64> = (0..4).map(|_| acks.begin()).collect();
        assert_eq!(seqs, [0, 1, 2, 3]);
        acks.ack(2);
        acks.ack(1);
        assert_eq!(progress.finished_count(), 0, "event 0 is still in flight");
        acks.ack(0);
        assert_eq!(progress.finished_count(), 3);
        acks.ack(0); // twice: ignored
        assert_eq!(progress.finished_count(), 3);
        assert_eq!(acks.pending(), 1);
        acks.ack(3);
        assert_eq!(progress.finished_count(), 4);
        assert_eq!(acks.begin(), 4);
    }

    #[test]
    fn only_finished_positions_are_taken_in_order() {
        let p = Progress::default();
        for o in [10, 20, 30] {
            p.sent(Position::FileOffset(o));
        }
        assert_eq!(p.take_finished(), None);
        p.finished(2);
        assert_eq!(p.take_finished(), Some(Position::FileOffset(20)));
        assert_eq!(p.take_finished(), None);
        p.finished(1);
        assert_eq!(p.take_finished(), Some(Position::FileOffset(30)));
    }

    #[test]
    fn state_round_trips_and_commits_flush_first() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        assert_eq!(SavedState::load(&path).unwrap(), None);
        let progress = Arc::new(Progress::default());
        let c = Committer { state_file: path.clone(), source: "jsonl:x".into(), progress: progress.clone() };
        progress.sent(Position::ResourceVersion("7".into()));
        progress.finished(1);
        assert!(c.commit(|| Err("disk full".into())).is_err(), "a failed flush saves nothing");
        assert_eq!(SavedState::load(&path).unwrap(), None);
        progress.sent(Position::ResourceVersion("8".into()));
        progress.finished(1);
        assert!(c.commit(|| Ok(())).unwrap());
        let saved = SavedState::load(&path).unwrap().unwrap();
        assert_eq!((saved.position, saved.acknowledged), (Position::ResourceVersion("8".into()), 2));
    }
}
