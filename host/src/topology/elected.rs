//! `run --leader-elect`: the pipeline of one replica among several, run only while it holds
//! the Lease ([`super::leader`]), with a hot standby before that.
//!
//! With at-least-once delivery a candidate is a **hot standby**: it runs the whole pipeline —
//! source, Broadcaster, correlators — but its sinks write nothing
//! ([`crate::sink::set::SinkSet::standing_by`]), and it saves its position and correlator
//! snapshot into its own state file only up to the position the leader recorded in the Lease
//! ([`crate::delivery::Committer::bounded_by`]). When it takes the Lease over, the standby
//! drains and stops, and the leading pipeline starts from that state file: its correlator holds
//! exactly the state at that position, and the source resumes there, so every event after the
//! old leader's last recorded position is written, and the events between the standby's saved
//! position and it are written again. A standby that saved nothing (the leader recorded no
//! position yet) resumes from the Lease's position with a fresh correlator, as a cold standby.
//!
//! Without at-least-once a candidate only waits, and the pipeline starts when it leads.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::leader::{LeaderElectionConfig, LeaderElector, Renewal};
use super::{Handover, RunError, RunOptions, RunSummary, announce};
use crate::delivery::{Delivery, SavedPosition};

/// Waits as a candidate (a hot standby with at-least-once) until this process holds the Lease,
/// then runs the pipeline while renewing it, and releases it once the run ends. `None` when
/// `options.shutdown` fired while a candidate. A leader whose renewal fails within RenewDeadline
/// calls `lost` at once, while the pipeline runs (the caller exits the process, as
/// kube-controller-manager's "leaderelection lost": it must write nothing more).
///
/// # Errors
/// [`RunError::Kubernetes`] when the API cannot be reached at start, [`RunError::Leader`] for
/// terms client-go refuses, and the leading run's errors.
pub async fn run_elected(
    mut options: RunOptions,
    config: LeaderElectionConfig,
    lost: Box<dyn FnOnce() + Send>,
) -> Result<Option<RunSummary>, RunError> {
    let client = crate::k8s::connect(&options.kubernetes.connection).await?;
    let mut elector = LeaderElector::new(client, config).map_err(RunError::Leader)?;
    let shutdown = options.shutdown.clone();
    let signals = tokio::spawn(super::builder::stop_on_signal(shutdown.clone()));
    let saved = Arc::new(SavedPosition::default());
    let standby = if matches!(options.delivery.mode, Delivery::AtLeastOnce { .. }) {
        elector.hand_over(saved.clone());
        Some(Standby::start(&options, &mut elector))
    } else {
        tracing::warn!(
            "--leader-elect without --delivery at-least-once: no hot standby, and a new leader does not resume \
             where the last one stopped"
        );
        None
    };
    let acquired = elector.acquire(&shutdown).await;
    // The standby's own state file, bounded by the position the leader recorded last (read
    // as this candidate took the Lease over), is where the leading run resumes.
    let mut inherited = elector.inherited().cloned();
    if let Some(standby) = standby
        && standby.stop().await
    {
        inherited = None;
    }
    if !acquired {
        signals.abort();
        return Ok(None);
    }
    options.serving.leader = Some(elector.status());
    options.delivery.handover = Some(Handover { saved, inherited, standby: None });
    let stop_renewing = CancellationToken::new();
    let renewing = tokio::spawn({
        let stop = stop_renewing.clone();
        async move {
            if elector.renew_until_lost(&stop).await == Renewal::Lost {
                lost();
            }
            elector
        }
    });
    let summary = super::build(options).await;
    let summary = match summary {
        Ok(running) => running.run().await,
        Err(error) => Err(error),
    };
    signals.abort();
    stop_renewing.cancel();
    match renewing.await {
        Ok(mut elector) => elector.release().await,
        Err(error) => tracing::error!(%error, "leader election: the renewal task failed"),
    }
    summary.map(Some)
}

/// A hot standby's pipeline, running while this process is a candidate.
struct Standby {
    task: tokio::task::JoinHandle<Result<RunSummary, RunError>>,
    stop: CancellationToken,
    /// What the standby saved into its state file.
    saved: Arc<SavedPosition>,
}

impl Standby {
    /// Starts `options`' pipeline as a hot standby of the leader `elector` follows.
    fn start(options: &RunOptions, elector: &mut LeaderElector) -> Self {
        let leader = Arc::new(SavedPosition::default());
        elector.follow(leader.clone());
        let saved = Arc::new(SavedPosition::default());
        let mut standby = options.clone();
        // Its reads are not the leading run's: counted apart (the summary and the progress
        // bar read the run's counters).
        standby.source.counters = Arc::default();
        standby.shutdown = options.shutdown.child_token();
        standby.serving.leader = Some(elector.status());
        standby.delivery.handover = Some(Handover { saved: saved.clone(), inherited: None, standby: Some(leader) });
        let stop = standby.shutdown.clone();
        announce("leader election: a hot standby: reading and correlating, writing nothing until this replica leads");
        let task = tokio::spawn(async move { super::build(standby).await?.run().await });
        Standby { task, stop, saved }
    }

    /// Stops the standby (it drains and saves within the leader's position): whether it saved
    /// a position the leading run can resume from.
    async fn stop(self) -> bool {
        self.stop.cancel();
        match self.task.await {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => tracing::warn!("leader election: the hot standby ended: {error}"),
            Err(error) => tracing::warn!("leader election: the hot standby failed: {error}"),
        }
        match self.saved.get() {
            Some(saved) => {
                announce(&format!("leader election: the hot standby saved {:?}: leading from there", saved.position));
                true
            }
            None => false,
        }
    }
}
