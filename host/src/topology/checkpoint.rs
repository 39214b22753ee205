//! The checkpointer: at-least-once delivery's saved position (restored at start, saved while
//! the run goes and at its end) and a single host's correlator snapshots in the state file;
//! without at-least-once, the periodic sink flush.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use crate::correlator::snapshot::TenantSnapshot;
use crate::delivery::{
    CHECKPOINT_EVERY_EVENTS, Committer, Delivery, HandedOver, Position, Progress, SavedCorrelator, SavedPosition,
    SavedState, SeenVersions,
};
use crate::pipeline::router::RouterSnapshots;
use crate::pipeline::scale::ScaleCounters;
use crate::sink::set::SinkSet;
use crate::source::SourceSpec;

use super::{Role, RunError, announce};

/// How often runs that save no position flush their sinks.
const COMMIT_INTERVAL: std::time::Duration = crate::sink::jsonl::FLUSH_INTERVAL;

/// How often at-least-once looks for a newly acknowledged mark to save (the sinks are flushed
/// only when there is one).
const SAVE_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// Marks per `--checkpoint-interval`: a mark is saved once the events before it are
/// acknowledged, so an acknowledged event waits for the next mark after it (a quarter of the
/// interval at most) to be acknowledged too; saves still come at least once an interval.
const MARKS_PER_INTERVAL: u32 = 4;

/// What the last run left: where to resume and the correlator state to start from.
pub(super) struct Restored {
    /// At-least-once (or the publish tier, whose message ids come from the positions): the
    /// progress this run makes.
    pub progress: Option<Arc<Progress>>,
    /// Where the source resumes.
    pub resume: Option<Position>,
    /// A Kubernetes source's versions already sent.
    pub seen: SeenVersions,
    /// Per router partition, the correlator state restored (empty: fresh).
    pub restore: Vec<Vec<TenantSnapshot>>,
}

impl Restored {
    /// Loads the state file of at-least-once `delivery` (a position of another source than
    /// `source` is ignored) and checks its correlator snapshot against `workers` partitions,
    /// counting a restore or a refusal in `counters`.
    ///
    /// `inherited` is the position the previous leader recorded in the Lease (`--leader-elect`):
    /// when it lies after the state file's (or the file has none, or the two cannot be
    /// compared), the source resumes from it with a fresh correlator — the file's snapshot is
    /// of an older point — keeping the file's versions seen. A state file as new as it (this
    /// replica led last) is restored as without election.
    ///
    /// # Errors
    /// [`RunError::Delivery`] for at-least-once from stdin or a state file that cannot be read.
    pub fn load(
        delivery: &Delivery,
        source: &SourceSpec,
        role: &Role,
        workers: usize,
        counters: &ScaleCounters,
        inherited: Option<&HandedOver>,
    ) -> Result<Self, RunError> {
        let source_name = source.to_string();
        let (progress, saved) = match delivery {
            Delivery::AtLeastOnce { state_file } => {
                if *source == SourceSpec::JsonLinesStdin {
                    return Err(RunError::Delivery(
                        "at-least-once needs a file or k8s source (stdin cannot resume)".into(),
                    ));
                }
                let saved = SavedState::load(state_file).map_err(|e| RunError::Delivery(e.to_string()))?;
                let saved = saved.filter(|s| s.source == source_name);
                if let Some(s) = &saved {
                    announce(&format!(
                        "resuming {source_name} from {:?}, {} event version(s) known ({})",
                        s.position,
                        s.seen.len(),
                        state_file.display()
                    ));
                }
                (Some(Arc::new(Progress::default())), saved)
            }
            _ => (None, None),
        };
        // A publisher derives message ids from the source's positions, at-least-once or not.
        let progress = progress.or_else(|| role.publishes().then(|| Arc::new(Progress::default())));
        let at_least_once = matches!(delivery, Delivery::AtLeastOnce { .. });
        let inherited = inherited.filter(|h| at_least_once && h.source == source_name);
        if let Some(handed) = inherited {
            let local = saved.as_ref().map(|s| s.correlator.as_ref().map_or(&s.position, |c| &c.position));
            if local.is_none_or(|local| handed.position.is_after(local) != Some(false)) {
                announce(&format!(
                    "resuming {source_name} from {:?}, the position the previous leader saved (in the Lease); the correlator starts fresh",
                    handed.position
                ));
                let seen = saved.map(|s| s.seen).unwrap_or_default();
                return Ok(Restored { progress, resume: Some(handed.position.clone()), seen, restore: Vec::new() });
            }
        }
        // A single host's correlator snapshot: restored, the source resuming from its position.
        let mut restore = Vec::new();
        let (resume, seen) = match saved {
            Some(s) => {
                let mut position = s.position;
                if let Some(correlator) = s.correlator {
                    match decode_saved(&correlator, workers.max(1)) {
                        Ok(partitions) => {
                            announce(&format!(
                                "correlator state of {} partition(s) restored; resuming from its position {:?}",
                                partitions.len(),
                                correlator.position
                            ));
                            position = correlator.position;
                            restore = partitions;
                            counters.restored();
                        }
                        Err(why) => {
                            counters.refused();
                            announce(&format!("correlator snapshot in the state file refused, starting fresh: {why}"));
                        }
                    }
                }
                (Some(position), s.seen)
            }
            None => (None, SeenVersions::default()),
        };
        Ok(Restored { progress, resume, seen, restore })
    }
}

/// The single-host correlator snapshot of a state file, per router partition (each checked:
/// format version, key seed — adopted by the process —, and `workers` partitions).
///
/// # Errors
/// Why it cannot be used (the run then starts fresh from the saved position).
fn decode_saved(saved: &SavedCorrelator, workers: usize) -> Result<Vec<Vec<TenantSnapshot>>, String> {
    use base64::Engine;
    if saved.partitions.len() != workers {
        return Err(format!(
            "it holds {} router partition(s), this run has --workers {workers}",
            saved.partitions.len()
        ));
    }
    saved
        .partitions
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let bytes = base64::engine::general_purpose::STANDARD.decode(text).map_err(|e| e.to_string())?;
            let snapshot = crate::correlator::snapshot::PartitionSnapshot::decode(&bytes).map_err(|e| e.to_string())?;
            snapshot.check(i as u32, workers as u32).map_err(|e| e.to_string())?;
            Ok(snapshot.tenants)
        })
        .collect()
}

/// The checkpointer piece: saves the acknowledged position (at-least-once) or flushes the
/// sinks, every [`COMMIT_INTERVAL`] and once at the end.
pub(super) struct Checkpointer {
    committer: Option<Arc<Committer>>,
    sinks: Arc<SinkSet>,
    periodic: Option<tokio::task::JoinHandle<()>>,
}

impl Checkpointer {
    /// With at-least-once `delivery` (and its `progress`), a committer of `source`'s position
    /// into the state file; `handover` (`--leader-elect`): the cell told each position saved,
    /// and a hot standby's ceiling ([`Committer::bounded_by`]). Otherwise only the flush of
    /// `sinks`.
    pub fn build(
        delivery: &Delivery,
        source: &SourceSpec,
        progress: Option<&Arc<Progress>>,
        seen: SeenVersions,
        sinks: Arc<SinkSet>,
        handover: Option<(Arc<SavedPosition>, Option<Arc<SavedPosition>>)>,
    ) -> Self {
        let committer = match (delivery, progress) {
            (Delivery::AtLeastOnce { state_file }, Some(progress)) => {
                let mut committer = Committer::new(state_file.clone(), source.to_string(), progress.clone(), seen);
                if let Some((shared, ceiling)) = handover {
                    committer = committer.share_with(shared);
                    if let Some(ceiling) = ceiling {
                        committer = committer.bounded_by(ceiling);
                    }
                }
                Some(Arc::new(committer))
            }
            _ => None,
        };
        Checkpointer { committer, sinks, periodic: None }
    }

    /// Registers at-least-once's progress (acknowledged and saved events) with `/metrics`.
    pub fn register(&self, metrics: &crate::metrics::Metrics) {
        if let Some(committer) = self.committer.clone() {
            metrics.add_source(move |s| s.add_delivery(&committer));
        }
    }

    /// Whether the position is saved (at-least-once).
    pub fn saves_position(&self) -> bool {
        self.committer.is_some()
    }

    /// A single host (at-least-once) marks its correlator state [`MARKS_PER_INTERVAL`] times
    /// every `interval` and every
    /// [`CHECKPOINT_EVERY_EVENTS`] events, starting from `restore`; each is saved into the state
    /// file with its position once its events are acknowledged (the stores are counted in
    /// `counters`).
    pub fn snapshots(
        &self,
        role: &Role,
        interval: std::time::Duration,
        restore: Vec<Vec<TenantSnapshot>>,
        workers: usize,
        counters: &Arc<ScaleCounters>,
    ) -> Option<RouterSnapshots> {
        let committer = match (&self.committer, role) {
            (Some(committer), Role::SingleHost) => committer.clone(),
            _ => return None,
        };
        let counters = counters.clone();
        let partitions = workers.max(1) as u32;
        committer.expect_snapshots(interval);
        Some(RouterSnapshots {
            interval: interval / MARKS_PER_INTERVAL,
            every_events: CHECKPOINT_EVERY_EVENTS,
            restore,
            taken: Arc::new(move |at, states| {
                let counters = counters.clone();
                let taken_at_ms = chrono::Utc::now().timestamp_millis();
                // Encoded only if saved (a newer one covered by the same commit replaces it).
                let encode = move || {
                    let started = std::time::Instant::now();
                    let encoded: Vec<String> = states
                        .into_iter()
                        .enumerate()
                        .map(|(i, tenants)| {
                            use base64::Engine;
                            let snapshot = crate::correlator::snapshot::PartitionSnapshot {
                                key_seed: crate::correlator::keys::key_seed(),
                                partition: i as u32,
                                partitions,
                                sequence: at,
                                taken_at_ms,
                                tenants,
                            };
                            base64::engine::general_purpose::STANDARD.encode(snapshot.encode())
                        })
                        .collect();
                    counters.stored(encoded.iter().map(String::len).sum(), started.elapsed());
                    encoded
                };
                committer.snapshot_taken(at, Box::new(encode));
            }),
            refused: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Until [`finish`](Self::finish) (through the drain after a signal too, so what the drain
    /// acknowledges is saved even if the process is killed before it ends): at-least-once
    /// saves the newest acknowledged mark every [`SAVE_POLL`] (flushing the sinks first);
    /// otherwise the sinks are flushed, so their output shows while the run goes on.
    pub fn start(&mut self) {
        let (c, s) = (self.committer.clone(), self.sinks.clone());
        self.periodic = Some(tokio::spawn(async move {
            loop {
                tokio::time::sleep(if c.is_some() { SAVE_POLL } else { COMMIT_INTERVAL }).await;
                match &c {
                    Some(c) => commit(c, &s, false),
                    None => {
                        if let Err((spec, error)) = s.flush() {
                            tracing::error!(sink = spec, %error, "could not flush the sink");
                        }
                    }
                }
            }
        }));
    }

    /// The last checkpoint, once the pipeline drained: stops the periodic one, saves what the
    /// drain finished and flushes the sinks.
    ///
    /// # Errors
    /// [`RunError::Sink`] when a sink cannot be flushed.
    pub fn finish(self) -> Result<(), RunError> {
        if let Some(periodic) = &self.periodic {
            periodic.abort();
        }
        if let Some(committer) = &self.committer {
            commit(committer, &self.sinks, true); // what the drain finished
        }
        self.sinks.flush().map_err(|(spec, error)| RunError::Sink { spec, error })
    }
}

/// Flushes the sinks and saves the newest finished position (`now`: even if a large state file
/// was written very recently); errors are logged (the next commit tries again).
fn commit(committer: &Committer, sinks: &SinkSet, now: bool) {
    let flush = || sinks.flush().map_err(|(spec, e)| format!("flushing sink {spec}: {e}"));
    if let Err(error) = committer.commit(flush, now) {
        tracing::error!(%error, "could not save the source position");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rv(v: &str) -> Position {
        Position::ResourceVersion(v.into())
    }

    /// What a run resumes from with a state file at `file` (none: no file) and a Lease
    /// recording `lease`.
    fn resume(file: Option<&str>, lease: Option<HandedOver>) -> (Option<Position>, usize) {
        let dir = tempfile::tempdir().unwrap();
        let state_file = dir.path().join("state.json");
        if let Some(v) = file {
            let mut seen = SeenVersions::default();
            seen.record(crate::delivery::SeenVersion::new("ns/e1", "3"));
            let saved =
                SavedState { source: "k8s:ns".into(), position: rv(v), acknowledged: 1, seen, correlator: None };
            saved.save(&state_file).unwrap();
        }
        let delivery = Delivery::AtLeastOnce { state_file };
        let source: SourceSpec = "k8s:ns".parse().unwrap();
        let counters = ScaleCounters::default();
        let restored = Restored::load(&delivery, &source, &Role::SingleHost, 1, &counters, lease.as_ref()).unwrap();
        (restored.resume, restored.seen.len())
    }

    fn lease(source: &str, v: &str) -> Option<HandedOver> {
        Some(HandedOver { source: source.into(), position: rv(v) })
    }

    #[test]
    fn a_new_leader_resumes_from_the_lease_unless_its_own_state_file_is_as_new() {
        assert_eq!(resume(None, None), (None, 0));
        assert_eq!(resume(None, lease("k8s:ns", "40")), (Some(rv("40")), 0), "no file: the Lease's");
        assert_eq!(resume(Some("30"), lease("k8s:ns", "40")), (Some(rv("40")), 1), "newer: the Lease's, seen kept");
        assert_eq!(resume(Some("40"), lease("k8s:ns", "40")), (Some(rv("40")), 1), "as new: the file's");
        assert_eq!(resume(Some("50"), lease("k8s:ns", "40")), (Some(rv("50")), 1), "this replica led last");
        assert_eq!(resume(Some("50"), lease("k8s:other", "60")), (Some(rv("50")), 1), "another source's");
        assert_eq!(resume(Some("x9"), lease("k8s:ns", "40")), (Some(rv("40")), 1), "not comparable: the Lease's");
    }
}
