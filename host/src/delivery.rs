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
//! position of the last finished event in the state file (written to a temporary file, fsynced,
//! renamed over the old one, the directory fsynced). A single host saves only positions the
//! router marked, each with the correlator snapshot of exactly the events before it, once the
//! acknowledged prefix reached it ([`Committer::snapshot_taken`]): a restart restores that
//! state and resumes after the position, so its output is an uninterrupted run's.
//!
//! A Kubernetes source also records, per event, the resourceVersion it was sent with
//! ([`SeenVersions`]); the committer keeps those of finished events (and of the events already
//! in the cluster at the first start, which are not sent) in the state file, so that a restart
//! whose resourceVersion has expired (`410 Gone`, a re-list) sends only the events that changed
//! or appeared since, not every event in the cluster. The file is JSON:
//!
//! ```json
//! {"source":"k8s","position":{"resource_version":"1234"},"acknowledged":8,"seen":"<base64>"}
//! ```
//!
//! `seen` is optional (a state file without it, as earlier versions wrote, loads with nothing
//! seen): base64 of 16-byte records, least recently seen first — the xxh3-64 hash of the event's
//! key (its `metadata.uid`, else `namespace/name`) and of its resourceVersion, little-endian —
//! at most [`SEEN_VERSIONS_MAX`] records (about 1.4 MB). A position is never an empty
//! resourceVersion. While the file is large, saves are spaced so that it is written at no
//! more than [`STATE_WRITE_BYTES_PER_SECOND`] (a full `seen` is saved every ~1.4 s, a small
//! file at every commit).

use std::collections::VecDeque;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::metrics::Counts;
use crate::metrics::histogram::{HistogramOf, Writes};

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

impl Position {
    /// Whether this position lies after `other` in the same source: a later byte offset, or a
    /// resourceVersion greater as an integer (what every API server stores: etcd's revision).
    /// `None` when they cannot be compared (different kinds, or a resourceVersion that is not
    /// an integer: opaque to clients).
    pub fn is_after(&self, other: &Position) -> Option<bool> {
        match (self, other) {
            (Position::FileOffset(a), Position::FileOffset(b)) => Some(a > b),
            (Position::ResourceVersion(a), Position::ResourceVersion(b)) => {
                Some(a.parse::<u64>().ok()? > b.parse::<u64>().ok()?)
            }
            _ => None,
        }
    }
}

/// A saved position as one replica hands it to the next (`run --leader-elect`): the leader
/// records the position it last saved in its Lease, and the replica that takes the Lease over
/// resumes from it. JSON with the state file's field names:
/// `{"source":"k8s","position":{"resource_version":"1234"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandedOver {
    /// The source spec the position belongs to (`k8s`, `k8s:NS`, a file path).
    pub source: String,
    /// Where the source resumes: every event before it is acknowledged by every sink.
    pub position: Position,
}

/// The newest position the [`Committer`] saved, for whoever hands it on (the Lease of
/// `--leader-elect`): set after every save, `None` before the first.
#[derive(Debug, Default)]
pub struct SavedPosition(Mutex<Option<HandedOver>>);

impl SavedPosition {
    /// The newest position saved.
    pub fn get(&self) -> Option<HandedOver> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the position held (the committer after a save; a standby's elector after
    /// reading the Lease).
    pub fn set(&self, saved: HandedOver) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(saved);
    }
}

/// Default `run --checkpoint-interval`: how often at-least-once marks a position (with the
/// correlator snapshot of the events before it) to save once they are acknowledged.
pub const DEFAULT_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);

/// At-least-once also marks a position after this many events (but at most ten marks a
/// `--checkpoint-interval` more): an acknowledged event is saved once about this many more are
/// acknowledged, even while thousands of writes are in flight to a slow sink.
pub const CHECKPOINT_EVERY_EVENTS: u64 = 1_000;

/// Most events whose resourceVersion [`SeenVersions`] remembers (the least recently seen go
/// first): what a Kubernetes source keeps in memory and in the state file.
pub const SEEN_VERSIONS_MAX: usize = 65_536;

/// The state file is written at most at this rate: a save waits until the last one's size at
/// this rate has passed (a file up to 200 KiB: every commit, 200 ms), but with correlator
/// snapshots no longer than `--checkpoint-interval` (a 3 MB snapshot: once a second, not every
/// 3 s).
pub const STATE_WRITE_BYTES_PER_SECOND: f64 = 1024.0 * 1024.0;

/// One event's resourceVersion as remembered: hashes (xxh3-64) of the event's key and of the
/// resourceVersion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SeenVersion {
    key: u64,
    version: u64,
}

impl SeenVersion {
    /// `resource_version` of the event with `key` (its `metadata.uid`, else
    /// `namespace/name`).
    pub fn new(key: &str, resource_version: &str) -> Self {
        use xxhash_rust::xxh3::xxh3_64;
        Self { key: xxh3_64(key.as_bytes()), version: xxh3_64(resource_version.as_bytes()) }
    }
}

/// The resourceVersion last seen per event, bounded: an LRU of at most [`SEEN_VERSIONS_MAX`]
/// (or the given capacity) events, keyed and compared by hash ([`SeenVersion`]).
/// resourceVersions are only compared for equality (they are opaque, as client-go treats them).
/// Serialized (in the state file) as base64 of 16-byte records, least recently seen first.
#[derive(Debug, Clone)]
pub struct SeenVersions {
    map: lru::LruCache<u64, u64>,
}

impl Default for SeenVersions {
    fn default() -> Self {
        Self::with_capacity(SEEN_VERSIONS_MAX)
    }
}

impl PartialEq for SeenVersions {
    fn eq(&self, other: &Self) -> bool {
        self.map.len() == other.map.len() && self.map.iter().eq(other.map.iter())
    }
}

impl Eq for SeenVersions {}

impl SeenVersions {
    /// Nothing seen, remembering at most `capacity` events (≥ 1).
    pub fn with_capacity(capacity: usize) -> Self {
        Self { map: lru::LruCache::new(NonZeroUsize::new(capacity.max(1)).expect("at least 1")) }
    }

    /// Whether `seen` is the version last recorded for its event (marks the event recently
    /// seen).
    pub fn is_current(&mut self, seen: SeenVersion) -> bool {
        self.map.get(&seen.key) == Some(&seen.version)
    }

    /// Records `seen` as its event's version, dropping the least recently seen event when full.
    pub fn record(&mut self, seen: SeenVersion) {
        self.map.put(seen.key, seen.version);
    }

    /// Events remembered.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    fn encode(&self) -> String {
        use base64::Engine;
        let mut bytes = Vec::with_capacity(self.map.len() * 16);
        for (key, version) in self.map.iter().rev() {
            bytes.extend_from_slice(&key.to_le_bytes());
            bytes.extend_from_slice(&version.to_le_bytes());
        }
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    fn decode(text: &str) -> Result<Self, String> {
        use base64::Engine;
        let bytes = base64::engine::general_purpose::STANDARD.decode(text).map_err(|e| format!("seen: {e}"))?;
        if bytes.len() % 16 != 0 {
            return Err(format!("seen: {} bytes, not a whole number of 16-byte records", bytes.len()));
        }
        let mut seen = Self::default();
        for record in bytes.chunks_exact(16) {
            let word = |at: usize| u64::from_le_bytes(record[at..at + 8].try_into().expect("8 bytes"));
            seen.map.put(word(0), word(8));
        }
        Ok(seen)
    }
}

impl Serialize for SeenVersions {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.encode())
    }
}

impl<'de> Deserialize<'de> for SeenVersions {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::decode(&text).map_err(serde::de::Error::custom)
    }
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
    /// A Kubernetes source: the resourceVersion of every event sent and acknowledged, or found
    /// in the cluster at the first start (up to [`SEEN_VERSIONS_MAX`]), so that a re-list sends
    /// only what changed. Absent in state files of earlier versions.
    #[serde(default, skip_serializing_if = "SeenVersions::is_empty")]
    pub seen: SeenVersions,
    /// The correlator state (every router partition's [`PartitionSnapshot`]) and the position it
    /// reflects, which may be behind `position`: a restart that restores it resumes from its
    /// position, so the events in between are correlated again (and written again: duplicates
    /// bounded by the snapshot interval) and counts continue exactly. Absent in state files of
    /// earlier versions, and when no snapshot was taken.
    ///
    /// [`PartitionSnapshot`]: crate::correlator::snapshot::PartitionSnapshot
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlator: Option<SavedCorrelator>,
}

/// A correlator snapshot in the state file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedCorrelator {
    /// Where to resume for the state to be exact.
    pub position: Position,
    /// Per router partition, base64 of [`PartitionSnapshot::encode`].
    ///
    /// [`PartitionSnapshot::encode`]: crate::correlator::snapshot::PartitionSnapshot::encode
    pub partitions: Vec<String>,
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

    /// Writes this state to `path` atomically, in one write: a temporary file beside it,
    /// fsync, rename over `path`, fsync of the directory (so the rename survives a power
    /// loss); returns the bytes written. A crash at any point leaves the old state or the new.
    ///
    /// # Errors
    /// [`StateError`] on any I/O error.
    pub fn save(&self, path: &Path) -> Result<usize, StateError> {
        use std::io::Write;
        let fail = |e: std::io::Error| StateError { path: path.into(), message: e.to_string() };
        let tmp = path.with_extension("tmp");
        let mut file = std::fs::File::create(&tmp).map_err(fail)?;
        let bytes = serde_json::to_vec(self).expect("state serialises");
        file.write_all(&bytes).map_err(fail)?;
        file.sync_all().map_err(fail)?;
        std::fs::rename(&tmp, path).map_err(fail)?;
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(fail)?;
        Ok(bytes.len())
    }
}

/// The positions of the events a source sent, in order, and how many of them the router has
/// finished.
#[derive(Debug, Default)]
pub struct Progress {
    sent: Mutex<VecDeque<Sent>>,
    /// Versions of events not sent on (found at the first start): remembered without waiting
    /// for any acknowledgement; at most [`SEEN_VERSIONS_MAX`] kept until taken.
    unsent: Mutex<VecDeque<SeenVersion>>,
    finished: AtomicU64,
    taken: AtomicU64,
}

/// What one sent event leaves behind once finished.
#[derive(Debug)]
struct Sent {
    /// Where to resume after it; `None`: where the event before it left off.
    position: Option<Position>,
    /// Its version, remembered once it is finished.
    seen: Option<SeenVersion>,
}

impl Progress {
    /// Records the position after the next event sent (call before sending it).
    pub fn sent(&self, position: Position) {
        self.push(Sent { position: Some(position), seen: None });
    }

    /// Records the next event sent by a Kubernetes source: the position after it (`None`: it
    /// does not move the position, e.g. a re-listed event before the list's end) and its
    /// version (call before sending it).
    pub fn sent_event(&self, position: Option<Position>, seen: SeenVersion) {
        self.push(Sent { position, seen: Some(seen) });
    }

    /// Records the version of an event the source does not send on (already in the cluster at
    /// the first start): remembered at the next [`take_finished`](Self::take_finished).
    pub fn seen_unsent(&self, seen: SeenVersion) {
        let mut unsent = self.unsent.lock().unwrap_or_else(|p| p.into_inner());
        if unsent.len() == SEEN_VERSIONS_MAX {
            unsent.pop_front();
        }
        unsent.push_back(seen);
    }

    fn push(&self, sent: Sent) {
        self.sent.lock().unwrap_or_else(|p| p.into_inner()).push_back(sent);
    }

    /// The position recorded after event `seq` (numbered in Broadcaster order from 0), while it
    /// is not finished yet: what the NATS publisher derives a message's `Nats-Msg-Id` from.
    /// `None` once taken, or when the source records no positions.
    pub fn position_of(&self, seq: u64) -> Option<Position> {
        let sent = self.sent.lock().unwrap_or_else(|p| p.into_inner());
        let i = seq.checked_sub(self.taken.load(Ordering::Acquire))?;
        sent.get(usize::try_from(i).ok()?)?.position.clone()
    }

    /// Counts `n` events finished by the router.
    pub fn finished(&self, n: u64) {
        self.finished.fetch_add(n, Ordering::AcqRel);
    }

    /// Events finished so far.
    pub fn finished_count(&self) -> u64 {
        self.finished.load(Ordering::Acquire)
    }

    /// The position after the last finished event not yet taken that moved it (never an empty
    /// resourceVersion), if any finished since the last call. The versions of the unsent
    /// events, then of the finished ones, are recorded in `seen`.
    pub fn take_finished(&self, seen: &mut SeenVersions) -> Option<Position> {
        self.take_finished_up_to(seen, u64::MAX)
    }

    /// As [`take_finished`](Self::take_finished), taking no event past the first `limit`
    /// finished ones (the position a snapshot taken at `limit` finished events reflects).
    pub fn take_finished_up_to(&self, seen: &mut SeenVersions, limit: u64) -> Option<Position> {
        for version in self.unsent.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
            seen.record(version);
        }
        let finished = self.finished.load(Ordering::Acquire).min(limit);
        let taken = self.taken.load(Ordering::Acquire);
        if finished <= taken {
            return None;
        }
        let mut sent = self.sent.lock().unwrap_or_else(|p| p.into_inner());
        let mut last = None;
        for _ in taken..finished {
            let Some(event) = sent.pop_front() else { break };
            if let Some(version) = event.seen {
                seen.record(version);
            }
            // An empty resourceVersion is no place to resume from.
            match event.position {
                Some(Position::ResourceVersion(rv)) if rv.is_empty() => {}
                Some(position) => last = Some(position),
                None => {}
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
///
/// It also times each event from its numbering to its acknowledgement
/// ([`latencies`](Self::latencies)).
#[derive(Debug, Default)]
pub struct Acknowledgements {
    state: Mutex<AckState>,
    progress: Option<Arc<Progress>>,
    latency: HistogramOf<Writes>,
}

#[derive(Debug, Default)]
struct AckState {
    /// Sequence number of `done[0]`.
    base: u64,
    /// Whether each event from `base` on is acknowledged.
    done: VecDeque<bool>,
    /// When each event from `base` on was numbered.
    begun: VecDeque<Instant>,
    /// When an event was last acknowledged.
    last_ack: Option<Instant>,
}

impl Acknowledgements {
    /// A tracker reporting to `progress` (none: it only numbers events).
    pub fn new(progress: Option<Arc<Progress>>) -> Self {
        Self { progress, ..Self::default() }
    }

    /// Numbers the next event (call in Broadcaster order).
    pub fn begin(&self) -> u64 {
        self.begin_many(1).start
    }

    /// Numbers the next `n` events at once (call in Broadcaster order): the same numbers as `n`
    /// calls of [`begin`](Self::begin), under one lock.
    pub fn begin_many(&self, n: usize) -> std::ops::Range<u64> {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let first = state.base + state.done.len() as u64;
        state.done.extend(std::iter::repeat_n(false, n));
        state.begun.extend(std::iter::repeat_n(now, n));
        first..first + n as u64
    }

    /// Event `seq` is finished (written to every sink of its tenant, or skipped, filtered or
    /// dropped); reports the prefix that became complete.
    pub fn ack(&self, seq: u64) {
        self.ack_many(&[seq]);
    }

    /// Events `seqs` are finished, in any order: as one [`ack`](Self::ack) each, under one lock.
    pub fn ack_many(&self, seqs: &[u64]) {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let base = state.base;
        for &seq in seqs {
            let Some(i) = seq.checked_sub(base).map(|i| i as usize) else { continue };
            if let Some(slot @ false) = state.done.get_mut(i) {
                *slot = true;
                self.latency.observe_duration(now.saturating_duration_since(state.begun[i]));
                state.last_ack = Some(now);
            }
        }
        let mut finished = 0;
        while state.done.front() == Some(&true) {
            state.done.pop_front();
            state.begun.pop_front();
            finished += 1;
        }
        state.base += finished;
        drop(state);
        if let (Some(progress), true) = (&self.progress, finished > 0) {
            progress.finished(finished);
        }
    }

    /// How long each acknowledged event took from its numbering (the tenant router taking it
    /// off the Broadcaster's queue) to its acknowledgement, nanoseconds.
    pub fn latencies(&self) -> Counts {
        self.latency.counts()
    }

    /// How long the sinks have acknowledged nothing while events wait for them: since the later
    /// of the last acknowledgement and the numbering of the oldest waiting event. `None` while
    /// nothing waits.
    pub fn unacknowledged_for(&self) -> Option<Duration> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let oldest = *state.begun.front()?;
        let since = state.last_ack.map_or(oldest, |ack| ack.max(oldest));
        Some(since.elapsed())
    }

    /// Events numbered and not yet part of the acknowledged prefix.
    pub fn pending(&self) -> usize {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).done.len()
    }
}

impl crate::metrics::Snapshot {
    /// Adds the events' latency from numbering to acknowledgement
    /// (`eventpipe_event_latency_seconds`).
    pub fn add_acknowledgements(&mut self, acks: &Acknowledgements) {
        self.add_histogram(&crate::metrics::EVENT_LATENCY, &[], &acks.latencies());
    }
}

/// Saves positions for `at-least-once`: after flushing the sinks, the position of the last
/// finished event, with the versions of the events finished so far ([`SeenVersions`]).
///
/// With correlator snapshots ([`expect_snapshots`](Self::expect_snapshots), a single host),
/// the saved position is always a snapshot's: the newest snapshot taken at `at` events
/// ([`snapshot_taken`](Self::snapshot_taken)) once the acknowledged prefix reached `at`, saved
/// in the same write as the position after event `at`. A restart then restores the correlator
/// state of exactly the events before the position and resumes after it, so its output is what
/// an uninterrupted run writes; only writes in flight at a crash (and those after the
/// position) are written again.
pub struct Committer {
    /// The state file.
    pub state_file: PathBuf,
    /// The source spec (stored with the position).
    pub source: String,
    /// The shared progress.
    pub progress: Arc<Progress>,
    state: Mutex<CommitState>,
    /// Where every save is also told ([`Committer::share_with`]).
    shared: Option<Arc<SavedPosition>>,
    /// A hot standby's bound: no position past the leader's ([`Committer::bounded_by`]).
    ceiling: Option<Arc<SavedPosition>>,
}

/// Correlator snapshots taken and not yet covered by the acknowledged prefix, at most: when
/// more are waiting (a sink stuck in retries), the newest but one gives way.
pub const MAX_PENDING_SNAPSHOTS: usize = 32;

/// A correlator snapshot waiting for its events' acknowledgements: encodes it (per router
/// partition, base64 of [`PartitionSnapshot::encode`]) when it is saved.
///
/// [`PartitionSnapshot::encode`]: crate::correlator::snapshot::PartitionSnapshot::encode
pub type PendingSnapshot = Box<dyn FnOnce() -> Vec<String> + Send>;

struct CommitState {
    /// Versions of the finished (and unsent) events, saved with the position.
    seen: SeenVersions,
    /// The newest position to save.
    position: Option<Position>,
    /// Events the position covers (acknowledged) at the last save.
    saved_finished: u64,
    /// When the file was last written, and its size.
    last_write: Option<(Instant, usize)>,
    /// Whether positions wait for correlator snapshots.
    snapshots: bool,
    /// Snapshots taken at this many events, oldest first, waiting for their acknowledgements.
    pending: VecDeque<(u64, PendingSnapshot)>,
    /// Events the newest covered snapshot reflects.
    covered: u64,
    /// The newest covered correlator snapshot with its position, saved with every later commit.
    correlator: Option<SavedCorrelator>,
    /// The longest a save may be put off by [`STATE_WRITE_BYTES_PER_SECOND`] (`None`: as long
    /// as that rate says).
    at_least_every: Option<Duration>,
}

impl Committer {
    /// A committer saving to `state_file` for `source`, from `progress`, starting from the
    /// versions `seen` by earlier runs (from the state file).
    pub fn new(state_file: PathBuf, source: String, progress: Arc<Progress>, seen: SeenVersions) -> Self {
        let state = CommitState {
            seen,
            position: None,
            saved_finished: 0,
            last_write: None,
            snapshots: false,
            pending: VecDeque::new(),
            covered: 0,
            correlator: None,
            at_least_every: None,
        };
        Self { state_file, source, progress, state: Mutex::new(state), shared: None, ceiling: None }
    }

    /// Saves no position past the one `ceiling` holds (nothing while it holds none or another
    /// source's): a hot standby's, whose `ceiling` is what the leader last recorded in the
    /// Lease. Only positions of correlator snapshots are bounded (a single host's, as every
    /// elected run is); a snapshot whose position cannot be compared with the ceiling is not
    /// saved. The standby's state file then never runs ahead of what the leader's sinks
    /// acknowledged, so the standby, once it leads, resumes from it and writes every event
    /// after it.
    pub fn bounded_by(mut self, ceiling: Arc<SavedPosition>) -> Self {
        self.ceiling = Some(ceiling);
        self
    }

    /// Whether the position after the first `at` events lies within the ceiling (true without
    /// one).
    fn within_ceiling(&self, at: u64) -> bool {
        let Some(ceiling) = &self.ceiling else { return true };
        let Some(ceiling) = ceiling.get().filter(|c| c.source == self.source) else { return false };
        let Some(position) = at.checked_sub(1).and_then(|last| self.progress.position_of(last)) else { return false };
        position == ceiling.position || ceiling.position.is_after(&position) == Some(true)
    }

    /// Also tells `saved` every position saved from now on (what `--leader-elect` records in
    /// its Lease for the next leader).
    pub fn share_with(mut self, saved: Arc<SavedPosition>) -> Self {
        self.shared = Some(saved);
        self
    }

    /// Events (of this run) the position last saved covers.
    pub fn saved_count(&self) -> u64 {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).saved_finished
    }

    /// From now on a position is saved only with a correlator snapshot of the events before it,
    /// and at least every `at_least_every` (`--checkpoint-interval`) while there is progress to
    /// save, however large the file (the write-rate bound spaces saves by at most that).
    pub fn expect_snapshots(&self, at_least_every: Duration) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.snapshots = true;
        state.at_least_every = Some(at_least_every);
    }

    /// Hands over a correlator snapshot of the first `at` events (numbered in Broadcaster
    /// order), taken while later ones may be in flight: a commit saves it with the position
    /// after event `at` once those `at` events are acknowledged.
    pub fn snapshot_taken(&self, at: u64, encode: PendingSnapshot) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.pending.back().is_some_and(|(last, _)| *last >= at) {
            state.pending.pop_back(); // the same events (a last snapshot after the drain)
        }
        if state.pending.len() >= MAX_PENDING_SNAPSHOTS {
            state.pending.pop_back();
        }
        state.pending.push_back((at, encode));
    }

    /// Saves the newest finished position (with snapshots: the newest covered snapshot and its
    /// position) and the versions seen, after `flush` succeeded; returns whether it saved.
    /// Unless `now`, a save is put off (the sinks are still flushed) while the last write's
    /// size at [`STATE_WRITE_BYTES_PER_SECOND`] has not passed yet.
    ///
    /// # Errors
    /// [`StateError`] when the sinks cannot be flushed or the file cannot be written.
    pub fn commit(&self, flush: impl FnOnce() -> Result<(), String>, now: bool) -> Result<bool, StateError> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let state = &mut *state;
        // The finished count first: what is taken next covers at least as many events.
        let finished = self.progress.finished_count();
        let mut covered = state.pending.iter().take_while(|(at, _)| *at <= finished).count();
        if self.ceiling.is_some() {
            covered =
                state.pending.iter().take(covered).rposition(|(at, _)| self.within_ceiling(*at)).map_or(0, |i| i + 1);
        }
        let news = if state.snapshots { covered > 0 } else { finished != state.saved_finished };
        if !news && !(state.snapshots && state.covered != state.saved_finished) {
            return Ok(false);
        }
        flush().map_err(|message| StateError { path: self.state_file.clone(), message })?;
        let spacing = |bytes: usize| {
            let by_rate = Duration::from_secs_f64(bytes as f64 / STATE_WRITE_BYTES_PER_SECOND);
            state.at_least_every.map_or(by_rate, |most| by_rate.min(most))
        };
        if let (Some((at, bytes)), false) = (state.last_write, now)
            && at.elapsed() < spacing(bytes)
        {
            return Ok(false);
        }
        let acknowledged = if state.snapshots {
            if let Some((at, encode)) = state.pending.drain(..covered).last() {
                if let Some(position) = self.progress.take_finished_up_to(&mut state.seen, at) {
                    state.position = Some(position);
                }
                if let Some(position) = &state.position {
                    state.correlator = Some(SavedCorrelator { position: position.clone(), partitions: encode() });
                    state.covered = at;
                }
            }
            state.covered
        } else {
            if let Some(position) = self.progress.take_finished(&mut state.seen) {
                state.position = Some(position);
            }
            finished
        };
        let Some(position) = &state.position else { return Ok(false) };
        if state.snapshots && state.correlator.is_none() {
            return Ok(false);
        }
        let saved = SavedState {
            source: self.source.clone(),
            position: position.clone(),
            acknowledged,
            seen: std::mem::take(&mut state.seen),
            correlator: state.correlator.clone(),
        };
        let written = saved.save(&self.state_file);
        state.seen = saved.seen;
        state.last_write = Some((Instant::now(), written?));
        state.saved_finished = acknowledged;
        if let Some(shared) = &self.shared {
            shared.set(HandedOver { source: saved.source, position: saved.position });
        }
        Ok(true)
    }
}

impl crate::metrics::Snapshot {
    /// Adds at-least-once's progress: the events of the acknowledged prefix and those the saved
    /// position covers (this run; the difference is what a crash now would deliver again).
    pub fn add_delivery(&mut self, committer: &Committer) {
        use crate::metrics::{DELIVERY_ACKNOWLEDGED, DELIVERY_SAVED};
        self.add(&DELIVERY_ACKNOWLEDGED, &[], committer.progress.finished_count());
        self.add(&DELIVERY_SAVED, &[], committer.saved_count());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unacknowledged_time_counts_from_the_last_acknowledgement_while_events_wait() {
        let acks = Acknowledgements::new(None);
        assert_eq!(acks.unacknowledged_for(), None, "nothing waits");
        acks.begin_many(2);
        std::thread::sleep(Duration::from_millis(30));
        assert!(acks.unacknowledged_for().unwrap() >= Duration::from_millis(30));
        acks.ack(1);
        assert!(acks.unacknowledged_for().unwrap() < Duration::from_millis(30), "an acknowledgement restarts it");
        acks.ack(0);
        assert_eq!(acks.unacknowledged_for(), None);
    }

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
        assert_eq!(acks.begin_many(3), 5..8, "numbers as three `begin` calls would");
        assert_eq!(acks.pending(), 4);
        acks.ack_many(&[7, 5, 6]);
        assert_eq!(progress.finished_count(), 4, "event 4 is still in flight");
        acks.ack_many(&[4, 4, 3]); // twice, and one acknowledged before: ignored
        assert_eq!(progress.finished_count(), 8);
        assert_eq!(acks.pending(), 0);
    }

    #[test]
    fn only_finished_positions_are_taken_in_order() {
        let p = Progress::default();
        let mut seen = SeenVersions::default();
        for o in [10, 20, 30] {
            p.sent(Position::FileOffset(o));
        }
        assert_eq!(p.take_finished(&mut seen), None);
        p.finished(2);
        assert_eq!(p.take_finished(&mut seen), Some(Position::FileOffset(20)));
        assert_eq!(p.take_finished(&mut seen), None);
        p.finished(1);
        assert_eq!(p.take_finished(&mut seen), Some(Position::FileOffset(30)));
        assert!(seen.is_empty());
    }

    #[test]
    fn versions_are_remembered_only_once_their_events_finished() {
        let p = Progress::default();
        let mut seen = SeenVersions::default();
        let (a, b, c) = (SeenVersion::new("a", "1"), SeenVersion::new("b", "2"), SeenVersion::new("c", "3"));
        p.seen_unsent(a);
        p.sent_event(None, b);
        p.sent_event(Some(Position::ResourceVersion("100".into())), c);
        assert_eq!(p.take_finished(&mut seen), None);
        assert!(seen.is_current(a), "an unsent event needs no acknowledgement");
        assert!(!seen.is_current(b));
        p.finished(1);
        assert_eq!(p.take_finished(&mut seen), None, "b does not move the position");
        assert!(seen.is_current(b) && !seen.is_current(c));
        p.finished(1);
        assert_eq!(p.take_finished(&mut seen), Some(Position::ResourceVersion("100".into())));
        assert!(seen.is_current(c));
        assert!(!seen.is_current(SeenVersion::new("c", "4")), "another version of c");
    }

    #[test]
    fn seen_versions_are_bounded_least_recently_seen_first() {
        let mut seen = SeenVersions::with_capacity(2);
        seen.record(SeenVersion::new("a", "1"));
        seen.record(SeenVersion::new("b", "1"));
        assert!(seen.is_current(SeenVersion::new("a", "1")), "a is now the most recent");
        seen.record(SeenVersion::new("c", "1"));
        assert_eq!(seen.len(), 2);
        assert!(!seen.is_current(SeenVersion::new("b", "1")), "b went");
        assert!(seen.is_current(SeenVersion::new("a", "1")) && seen.is_current(SeenVersion::new("c", "1")));
    }

    #[test]
    fn state_round_trips_and_commits_flush_first() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        assert_eq!(SavedState::load(&path).unwrap(), None);
        let progress = Arc::new(Progress::default());
        let c = Committer::new(path.clone(), "jsonl:x".into(), progress.clone(), SeenVersions::default());
        progress.sent(Position::ResourceVersion("7".into()));
        progress.finished(1);
        assert!(c.commit(|| Err("disk full".into()), false).is_err(), "a failed flush saves nothing");
        assert_eq!(SavedState::load(&path).unwrap(), None);
        progress.sent(Position::ResourceVersion("8".into()));
        progress.finished(1);
        assert!(c.commit(|| Ok(()), false).unwrap());
        let saved = SavedState::load(&path).unwrap().unwrap();
        assert_eq!((saved.position, saved.acknowledged), (Position::ResourceVersion("8".into()), 2));
        assert!(!c.commit(|| Ok(()), true).unwrap(), "nothing new");
    }

    #[test]
    fn a_state_file_of_earlier_versions_loads_and_seen_versions_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        std::fs::write(&path, r#"{"source":"k8s","position":{"resource_version":"1234"},"acknowledged":8}"#).unwrap();
        let old = SavedState::load(&path).unwrap().unwrap();
        assert_eq!((old.position, old.acknowledged), (Position::ResourceVersion("1234".into()), 8));
        assert!(old.seen.is_empty());

        let mut seen = SeenVersions::default();
        for (key, rv) in [("a", "1"), ("b", "2"), ("c", "3")] {
            seen.record(SeenVersion::new(key, rv));
        }
        let state = SavedState {
            source: "k8s".into(),
            position: Position::ResourceVersion("9".into()),
            acknowledged: 3,
            seen: seen.clone(),
            correlator: None,
        };
        let bytes = state.save(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.len(), bytes);
        assert!(text.contains(r#""seen":""#), "{text}");
        let loaded = SavedState::load(&path).unwrap().unwrap();
        assert_eq!(loaded, state, "order and versions kept");
        std::fs::write(&path, r#"{"source":"k8s","position":{"resource_version":"1"},"acknowledged":0,"seen":"AAEC"}"#)
            .unwrap();
        assert!(SavedState::load(&path).unwrap_err().message.contains("16-byte records"));
    }

    #[test]
    fn an_empty_resource_version_is_never_saved() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let progress = Arc::new(Progress::default());
        let c = Committer::new(path.clone(), "k8s".into(), progress.clone(), SeenVersions::default());
        progress.sent_event(Some(Position::ResourceVersion(String::new())), SeenVersion::new("a", "1"));
        progress.finished(1);
        assert!(!c.commit(|| Ok(()), true).unwrap());
        assert_eq!(SavedState::load(&path).unwrap(), None);
        progress.sent_event(Some(Position::ResourceVersion("5".into())), SeenVersion::new("b", "1"));
        progress.sent_event(Some(Position::ResourceVersion(String::new())), SeenVersion::new("c", "1"));
        progress.finished(2);
        assert!(c.commit(|| Ok(()), true).unwrap());
        let saved = SavedState::load(&path).unwrap().unwrap();
        assert_eq!(saved.position, Position::ResourceVersion("5".into()));
        assert_eq!(saved.seen.len(), 3, "every finished event's version is kept");
    }

    /// A committer saving to `path` whose versions seen are full (a ~1.4 MB state file).
    fn full_committer(path: &Path) -> (Arc<Progress>, Committer) {
        let progress = Arc::new(Progress::default());
        let mut seen = SeenVersions::default();
        for i in 0..SEEN_VERSIONS_MAX {
            seen.record(SeenVersion::new(&i.to_string(), "1"));
        }
        (progress.clone(), Committer::new(path.to_path_buf(), "k8s".into(), progress, seen))
    }

    #[test]
    fn large_state_files_are_written_at_a_bounded_rate() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let (progress, c) = full_committer(&path);
        for rv in ["1", "2"] {
            progress.sent(Position::ResourceVersion(rv.into()));
            progress.finished(1);
            let flushed = std::cell::Cell::new(false);
            let saved = c
                .commit(
                    || {
                        flushed.set(true);
                        Ok(())
                    },
                    false,
                )
                .unwrap();
            assert!(flushed.get(), "the sinks are flushed either way");
            assert_eq!(saved, rv == "1", "the second save waits (~1.4 MB at 1 MiB/s)");
        }
        assert!(c.commit(|| Ok(()), true).unwrap(), "unless now");
        let saved = SavedState::load(&path).unwrap().unwrap();
        assert_eq!((saved.position, saved.seen.len()), (Position::ResourceVersion("2".into()), SEEN_VERSIONS_MAX));
    }
    #[test]
    fn with_snapshots_a_large_state_file_is_still_saved_every_checkpoint_interval() {
        const INTERVAL: Duration = Duration::from_millis(50);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let (progress, c) = full_committer(&path);
        c.expect_snapshots(INTERVAL);
        for (at, rv) in [(1, "1"), (2, "2")] {
            progress.sent(Position::ResourceVersion(rv.into()));
            progress.finished(1);
            c.snapshot_taken(at, Box::new(move || vec![format!("snapshot at {at}")]));
            if at == 2 {
                // ~1.4 MB at 1 MiB/s would put this save off for 1.3 s more.
                std::thread::sleep(INTERVAL + Duration::from_millis(10));
            }
            assert!(c.commit(|| Ok(()), false).unwrap(), "saved at {at}");
        }
        let saved = SavedState::load(&path).unwrap().unwrap();
        assert_eq!(saved.position, Position::ResourceVersion("2".into()));
        assert_eq!(saved.correlator.unwrap().partitions, ["snapshot at 2"]);
    }

    #[test]
    fn positions_compare_as_integers_within_one_kind() {
        let rv = |v: &str| Position::ResourceVersion(v.into());
        assert_eq!(rv("1000").is_after(&rv("999")), Some(true), "as integers, not as strings");
        assert_eq!(rv("999").is_after(&rv("1000")), Some(false));
        assert_eq!(rv("7").is_after(&rv("7")), Some(false));
        assert_eq!(rv("a1").is_after(&rv("7")), None, "opaque");
        assert_eq!(Position::FileOffset(10).is_after(&Position::FileOffset(9)), Some(true));
        assert_eq!(Position::FileOffset(10).is_after(&rv("9")), None);
    }

    #[test]
    fn every_save_is_shared_with_the_saved_position() {
        let dir = tempfile::tempdir().unwrap();
        let progress = Arc::new(Progress::default());
        let shared = Arc::new(SavedPosition::default());
        let c =
            Committer::new(dir.path().join("state.json"), "k8s:ns".into(), progress.clone(), SeenVersions::default())
                .share_with(shared.clone());
        progress.sent(Position::ResourceVersion("5".into()));
        progress.sent(Position::ResourceVersion("9".into()));
        assert!(!c.commit(|| Ok(()), true).unwrap());
        assert_eq!(shared.get(), None, "nothing saved yet");
        progress.finished(1);
        assert!(c.commit(|| Ok(()), true).unwrap());
        let expected = HandedOver { source: "k8s:ns".into(), position: Position::ResourceVersion("5".into()) };
        assert_eq!(shared.get(), Some(expected.clone()));
        // A failed flush saves nothing and shares nothing.
        progress.finished(1);
        assert!(c.commit(|| Err("sink down".into()), true).is_err());
        assert_eq!(shared.get(), Some(expected));
        assert_eq!(
            serde_json::to_string(&shared.get().unwrap()).unwrap(),
            r#"{"source":"k8s:ns","position":{"resource_version":"5"}}"#
        );
    }

    #[test]
    fn a_standby_saves_no_position_past_the_leaders() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let progress = Arc::new(Progress::default());
        let leader = Arc::new(SavedPosition::default());
        let c = Committer::new(path.clone(), "k8s:ns".into(), progress.clone(), SeenVersions::default())
            .bounded_by(leader.clone());
        c.expect_snapshots(Duration::from_secs(1));
        for (at, rv) in [(1, "10"), (2, "20"), (3, "30")] {
            progress.sent(Position::ResourceVersion(rv.into()));
            c.snapshot_taken(at, Box::new(move || vec![format!("snapshot at {at}")]));
        }
        progress.finished(3);
        assert!(!c.commit(|| Ok(()), true).unwrap(), "the leader recorded nothing yet");
        let at = |rv: &str| HandedOver { source: "k8s:ns".into(), position: Position::ResourceVersion(rv.into()) };
        leader.set(HandedOver { source: "k8s:other".into(), ..at("99") });
        assert!(!c.commit(|| Ok(()), true).unwrap(), "another source's position bounds nothing");
        leader.set(at("25"));
        assert!(c.commit(|| Ok(()), true).unwrap());
        let saved = SavedState::load(&path).unwrap().unwrap();
        assert_eq!(saved.position, Position::ResourceVersion("20".into()), "the newest snapshot within 25");
        assert_eq!(saved.correlator.unwrap().partitions, ["snapshot at 2"]);
        leader.set(at("30"));
        assert!(c.commit(|| Ok(()), true).unwrap());
        let saved = SavedState::load(&path).unwrap().unwrap();
        assert_eq!(
            (saved.position, saved.correlator.unwrap().partitions),
            (Position::ResourceVersion("30".into()), vec!["snapshot at 3".to_string()])
        );
    }
}
