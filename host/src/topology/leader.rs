//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go `tools/leaderelection`
//! (`LeaseLock`): one replica of `eventpipe run --leader-elect` leads (runs the pipeline), the
//! others wait as candidates and take over when the Lease is free.
//!
//! The semantics are client-go's:
//! - a candidate acquires only when the Lease is free: no holder (never held, or released),
//!   or not renewed for `leaseDurationSeconds` as the candidate's own clock sees it — like
//!   client-go it records when it last *observed a change* of the record, never compares the
//!   remote `renewTime` with its clock;
//! - every write is an update with the resourceVersion read (optimistic concurrency): a
//!   `409 Conflict` means another candidate wrote first, and this attempt failed;
//! - `leaseTransitions` counts changes of holder; `acquireTime` is kept while the holder renews;
//! - the leader renews every RetryPeriod; when no renewal succeeds within RenewDeadline it has
//!   lost the lead ([`LeaderElector::renew_until_lost`]) — before its Lease can expire for the
//!   others (LeaseDuration > RenewDeadline) — and must stop writing;
//! - on a graceful stop the leader releases the Lease (`ReleaseOnCancel`): holder cleared,
//!   `leaseDurationSeconds` 1, so a candidate takes over at its next retry.
//!
//! Candidates retry every RetryPeriod, jittered by up to [`JITTER_FACTOR`] of it (client-go's
//! `wait.JitterUntil`).
//!
//! Beyond client-go: with at-least-once delivery the leader records the position it last saved
//! (every event before it acknowledged by every sink) in the Lease's [`HANDOVER_ANNOTATION`] at
//! each renewal and at release ([`LeaderElector::hand_over`]); a candidate that takes the Lease
//! over reads it ([`LeaderElector::inherited`]) and resumes from there, so a takeover writes
//! every event after it: none is lost, and what the old leader wrote after its last recorded
//! save is written again.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use tokio_util::sync::CancellationToken;

pub use crate::election::{
    DEFAULT_LEASE_DURATION, DEFAULT_LEASE_NAME, DEFAULT_RENEW_DEADLINE, DEFAULT_RETRY_PERIOD, JITTER_FACTOR,
    LeaderElectionConfig, default_identity, default_namespace,
};

use crate::delivery::{HandedOver, SavedPosition};
use crate::metrics::{LEADER, LEADER_TRANSITIONS, Metrics};

/// The Lease annotation in which the leader records the position it last saved, as
/// [`HandedOver`] JSON: `{"source":"k8s","position":{"resource_version":"1234"}}`.
pub const HANDOVER_ANNOTATION: &str = "eventpipe.io/saved-position";

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A candidate's watch of its Lease (kube-rs's `watcher`, backing off on errors), beside
/// client-go's polling every RetryPeriod: sends `seen` each record with when it was seen, so
/// that a Lease released at a leader's graceful stop is taken over at once, and a lease that
/// is not renewed any more as soon as it expires, rather than at the next retry (up to
/// RetryPeriod × 2.2 later); tells `following` (a hot standby's ceiling) the position the
/// holder records at each renewal. Without RBAC to `list` and `watch` leases it only logs, and
/// the retries alone go on.
async fn watch_lease(
    api: Api<Lease>,
    name: String,
    seen: tokio::sync::watch::Sender<Option<(LeaderElectionRecord, Instant)>>,
    following: Option<Arc<SavedPosition>>,
) {
    use futures_util::TryStreamExt;
    use kube::runtime::WatchStreamExt;
    use kube::runtime::watcher::{self, Event};
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let stream = watcher::watcher(api, config).default_backoff();
    futures_util::pin_mut!(stream);
    let mut told = false;
    loop {
        match stream.try_next().await {
            Ok(Some(Event::Apply(lease) | Event::InitApply(lease))) => {
                if let (Some(following), Some(found)) = (&following, handed_over(&lease, &name)) {
                    following.set(found);
                }
                if seen.send(Some((LeaderElectionRecord::from_spec(lease.spec.as_ref()), Instant::now()))).is_err() {
                    return;
                }
            }
            Ok(Some(_)) => {}
            Ok(None) => return,
            Err(error) if !told => {
                told = true;
                tracing::info!(
                    "leader election: cannot watch the Lease {name} ({error}); a released Lease is taken over at the next retry"
                );
            }
            Err(_) => {}
        }
    }
}

/// The position recorded in `lease`'s [`HANDOVER_ANNOTATION`] (`None`: none, or not
/// [`HandedOver`] JSON — logged).
fn handed_over(lease: &Lease, name: &str) -> Option<HandedOver> {
    let text = lease.metadata.annotations.as_ref()?.get(HANDOVER_ANNOTATION)?;
    serde_json::from_str(text)
        .map_err(|error| {
            tracing::warn!(
                "leader election: the Lease {name}'s {HANDOVER_ANNOTATION} is unreadable ({error}): ignored"
            );
        })
        .ok()
}

/// client-go's `LeaderElectionRecord`: what the Lease's spec says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaderElectionRecord {
    /// `holderIdentity` (empty: released or never held).
    pub holder_identity: String,
    /// `leaseDurationSeconds`.
    pub lease_duration_seconds: i32,
    /// `acquireTime`.
    pub acquire_time: Option<Timestamp>,
    /// `renewTime`.
    pub renew_time: Option<Timestamp>,
    /// `leaseTransitions`.
    pub leader_transitions: i32,
}

impl LeaderElectionRecord {
    fn from_spec(spec: Option<&LeaseSpec>) -> Self {
        let Some(spec) = spec else { return Self::default() };
        Self {
            holder_identity: spec.holder_identity.clone().unwrap_or_default(),
            lease_duration_seconds: spec.lease_duration_seconds.unwrap_or(0),
            acquire_time: spec.acquire_time.as_ref().map(|t| t.0),
            renew_time: spec.renew_time.as_ref().map(|t| t.0),
            leader_transitions: spec.lease_transitions.unwrap_or(0),
        }
    }

    fn to_spec(&self) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.holder_identity.clone()),
            lease_duration_seconds: Some(self.lease_duration_seconds),
            acquire_time: self.acquire_time.map(MicroTime),
            renew_time: self.renew_time.map(MicroTime),
            lease_transitions: Some(self.leader_transitions),
            ..LeaseSpec::default()
        }
    }
}

/// What a candidate last saw of the Lease (client-go's `observedRecord` and `observedTime`):
/// the record, and when, by this candidate's monotonic clock, it last changed.
#[derive(Debug, Default)]
struct Observation {
    record: Option<LeaderElectionRecord>,
    at: Option<Instant>,
}

impl Observation {
    /// Notes `record` read at `now`: the time moves only when the record changed.
    fn observe(&mut self, record: LeaderElectionRecord, now: Instant) {
        if self.record.as_ref() != Some(&record) {
            self.record = Some(record);
            self.at = Some(now);
        }
    }

    /// Whether another holder's lease is still valid at `now` by this candidate's clock.
    fn held_by_other(&self, identity: &str, now: Instant) -> bool {
        self.expiry(identity).is_some_and(|expiry| expiry > now)
    }

    /// When another holder's lease expires by this candidate's clock (`None`: no other holder).
    fn expiry(&self, identity: &str) -> Option<Instant> {
        let (Some(record), Some(at)) = (&self.record, self.at) else { return None };
        (!record.holder_identity.is_empty() && record.holder_identity != identity)
            .then(|| at + Duration::from_secs(u64::try_from(record.lease_duration_seconds).unwrap_or(0)))
    }
}

/// The record a successful acquire or renew writes over `old` (client-go's
/// `tryAcquireOrRenew`): a renewal keeps `acquireTime` and the transitions; a change of holder
/// counts one transition.
fn next_record(
    old: &LeaderElectionRecord,
    identity: &str,
    lease_duration_seconds: i32,
    now: Timestamp,
) -> LeaderElectionRecord {
    let renewing = old.holder_identity == identity;
    LeaderElectionRecord {
        holder_identity: identity.to_owned(),
        lease_duration_seconds,
        acquire_time: if renewing { old.acquire_time.or(Some(now)) } else { Some(now) },
        renew_time: Some(now),
        leader_transitions: if renewing { old.leader_transitions } else { old.leader_transitions.saturating_add(1) },
    }
}

/// The leadership as `/metrics` shows it: `eventpipe_leader` (0 / 1) and
/// `eventpipe_leader_transitions_total` (times this process acquired the lead).
#[derive(Debug, Default)]
pub struct LeaderStatus {
    leading: AtomicBool,
    acquired: AtomicU64,
}

impl LeaderStatus {
    /// Whether this process leads now.
    pub fn is_leader(&self) -> bool {
        self.leading.load(Ordering::Relaxed)
    }

    /// Registers the two families on `metrics`.
    pub fn register(self: &Arc<Self>, metrics: &Metrics) {
        let status = self.clone();
        metrics.add_source(move |s| {
            s.set(&LEADER, &[], u64::from(status.is_leader()));
            s.add(&LEADER_TRANSITIONS, &[], status.acquired.load(Ordering::Relaxed));
        });
    }
}

/// Why [`LeaderElector::renew_until_lost`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// No renewal succeeded within RenewDeadline: this process no longer leads.
    Lost,
    /// The stop token fired while leading (release the Lease next).
    Stopped,
}

/// One candidate of the election on one Lease.
#[derive(Debug)]
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaderElectionConfig,
    observation: Observation,
    /// The resourceVersion of the last Lease read or written.
    resource_version: Option<String>,
    status: Arc<LeaderStatus>,
    /// What this process saves, recorded in the Lease while it leads.
    handover: Option<Arc<SavedPosition>>,
    /// The position the previous holder recorded, read when this candidate took the Lease.
    inherited: Option<HandedOver>,
    /// A hot standby's: told the position the holder recorded at every read of the Lease.
    following: Option<Arc<SavedPosition>>,
}

impl LeaderElector {
    /// A candidate on `config`'s Lease through `client`.
    ///
    /// # Errors
    /// [`LeaderElectionConfig::validate`]'s sentence.
    pub fn new(client: kube::Client, config: LeaderElectionConfig) -> Result<Self, String> {
        config.validate()?;
        Ok(Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            observation: Observation::default(),
            resource_version: None,
            status: Arc::default(),
            handover: None,
            inherited: None,
            following: None,
        })
    }

    /// While a candidate, tells `leader` the position the holder recorded in the Lease at every
    /// read (a hot standby bounds its saves by it: [`crate::delivery::Committer::bounded_by`]).
    pub fn follow(&mut self, leader: Arc<SavedPosition>) {
        self.following = Some(leader);
    }

    /// While leading, records `saved`'s newest position in the Lease ([`HANDOVER_ANNOTATION`])
    /// at every renewal and at release; before the first save the annotation is left as the
    /// previous leader wrote it.
    pub fn hand_over(&mut self, saved: Arc<SavedPosition>) {
        self.handover = Some(saved);
    }

    /// The position the previous holder recorded in the Lease, read when this candidate took
    /// it over (`None`: none recorded, or unreadable — logged).
    pub fn inherited(&self) -> Option<&HandedOver> {
        self.inherited.as_ref()
    }

    /// Writes the newest saved position into `metadata`'s annotations (nothing before a save).
    fn record_position(&self, metadata: &mut ObjectMeta) {
        let Some(saved) = self.handover.as_ref().and_then(|h| h.get()) else { return };
        match serde_json::to_string(&saved) {
            Ok(json) => {
                metadata.annotations.get_or_insert_default().insert(HANDOVER_ANNOTATION.to_owned(), json);
            }
            Err(error) => tracing::warn!("leader election: cannot record the saved position: {error}"),
        }
    }

    /// The status shown on `/metrics`.
    pub fn status(&self) -> Arc<LeaderStatus> {
        self.status.clone()
    }

    /// The terms.
    pub fn config(&self) -> &LeaderElectionConfig {
        &self.config
    }

    /// One try (client-go's `tryAcquireOrRenew`): `Ok(true)` when this candidate now holds the
    /// Lease, `Ok(false)` when another does (or wrote first: 409).
    async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let identity = self.config.identity.clone();
        let seconds = self.config.lease_duration_seconds();
        let now = Timestamp::now();
        let Some(lease) = self.api.get_opt(&self.config.name).await? else {
            let record = next_record(&LeaderElectionRecord::default(), &identity, seconds, now);
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec { lease_transitions: Some(0), ..record.to_spec() }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.wrote(&created);
                    Ok(true)
                }
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
                Err(error) => Err(error),
            };
        };
        let old = LeaderElectionRecord::from_spec(lease.spec.as_ref());
        self.resource_version = lease.metadata.resource_version.clone();
        self.observation.observe(old.clone(), Instant::now());
        let taking_over = old.holder_identity != identity;
        let found = if taking_over { handed_over(&lease, &self.config.name) } else { None };
        if let (Some(following), Some(found)) = (&self.following, &found) {
            following.set(found.clone());
        }
        if self.observation.held_by_other(&identity, Instant::now()) {
            return Ok(false);
        }
        let record = next_record(&old, &identity, seconds, now);
        let mut updated = lease;
        updated.spec = Some(record.to_spec());
        self.record_position(&mut updated.metadata);
        match self.api.replace(&self.config.name, &PostParams::default(), &updated).await {
            Ok(written) => {
                self.wrote(&written);
                if taking_over {
                    self.inherited = found;
                }
                Ok(true)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// Notes a Lease this candidate wrote.
    fn wrote(&mut self, lease: &Lease) {
        self.resource_version = lease.metadata.resource_version.clone();
        self.observation.observe(LeaderElectionRecord::from_spec(lease.spec.as_ref()), Instant::now());
    }

    /// Tries until this candidate leads (`true`) or `stop` fires (`false`), every RetryPeriod
    /// jittered by up to [`JITTER_FACTOR`]. Logs the acquisition.
    pub async fn acquire(&mut self, stop: &CancellationToken) -> bool {
        let mut told_holder = String::new();
        let (seen_tx, mut seen) = tokio::sync::watch::channel(None);
        let watch =
            tokio::spawn(watch_lease(self.api.clone(), self.config.name.clone(), seen_tx, self.following.clone()));
        let _watch = AbortOnDrop(watch);
        loop {
            let attempt = tokio::time::timeout(self.config.renew_deadline, self.try_acquire_or_renew());
            let outcome = tokio::select! { r = attempt => r, () = stop.cancelled() => return false };
            match outcome {
                Ok(Ok(true)) => {
                    self.status.leading.store(true, Ordering::Relaxed);
                    self.status.acquired.fetch_add(1, Ordering::Relaxed);
                    let transitions = self.observation.record.as_ref().map_or(0, |r| r.leader_transitions);
                    crate::topology::announce(&format!(
                        "leader election: {} acquired the Lease {}/{} (leaseTransitions {transitions})",
                        self.config.identity, self.config.namespace, self.config.name
                    ));
                    return true;
                }
                Ok(Ok(false)) => {
                    let holder =
                        self.observation.record.as_ref().map(|r| r.holder_identity.clone()).unwrap_or_default();
                    if holder != told_holder {
                        tracing::info!(
                            lease = %format!("{}/{}", self.config.namespace, self.config.name),
                            "leader election: the Lease is held by {holder}; waiting as a candidate"
                        );
                        told_holder = holder;
                    }
                }
                Ok(Err(error)) => tracing::warn!("leader election: acquiring {}: {error}", self.config.name),
                Err(_) => tracing::warn!("leader election: acquiring {}: no answer in time", self.config.name),
            }
            let pause = self.config.retry_period.mul_f64(1.0 + JITTER_FACTOR * rand::random::<f64>());
            if !self.wait_to_retry(Instant::now() + pause, &mut seen, stop).await {
                return false;
            }
        }
    }

    /// A candidate's pause before its next try: until `retry`, or sooner when the Lease's watch
    /// shows it released or the observed lease expires first (the watch's records are
    /// observations as a read's are). `false` when `stop` fired.
    async fn wait_to_retry(
        &mut self,
        retry: Instant,
        seen: &mut tokio::sync::watch::Receiver<Option<(LeaderElectionRecord, Instant)>>,
        stop: &CancellationToken,
    ) -> bool {
        let mut watching = true;
        loop {
            // An expiry already past was tried at: only the retry is left.
            let expiry = self.observation.expiry(&self.config.identity).filter(|e| *e > Instant::now());
            let wake = expiry.map_or(retry, |expiry| expiry.min(retry));
            tokio::select! {
                () = tokio::time::sleep_until(wake.into()) => return true,
                changed = seen.changed(), if watching => {
                    if changed.is_err() {
                        watching = false;
                        continue;
                    }
                    let Some((record, at)) = seen.borrow_and_update().clone() else { continue };
                    let released = record.holder_identity.is_empty();
                    self.observation.observe(record, at);
                    if released {
                        return true;
                    }
                }
                () = stop.cancelled() => return false,
            }
        }
    }

    /// While leading: renews every RetryPeriod; each renewal is retried every RetryPeriod until
    /// RenewDeadline after it began, each request bounded by what is left of it. Returns
    /// [`Renewal::Lost`] (logged) when a renewal does not succeed in time, [`Renewal::Stopped`]
    /// when `stop` fires.
    pub async fn renew_until_lost(&mut self, stop: &CancellationToken) -> Renewal {
        loop {
            tokio::select! {
                () = tokio::time::sleep(self.config.retry_period) => {}
                () = stop.cancelled() => return Renewal::Stopped,
            }
            let deadline = Instant::now() + self.config.renew_deadline;
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let attempt = tokio::time::timeout(left, self.try_acquire_or_renew());
                let outcome = tokio::select! { r = attempt => r, () = stop.cancelled() => return Renewal::Stopped };
                match outcome {
                    Ok(Ok(true)) => break,
                    Ok(Ok(false)) => {
                        tracing::warn!("leader election: the Lease {} was taken over", self.config.name);
                        return self.lost();
                    }
                    Ok(Err(error)) => tracing::warn!("leader election: renewing {}: {error}", self.config.name),
                    Err(_) => {}
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return self.lost();
                }
                tokio::select! {
                    () = tokio::time::sleep(self.config.retry_period.min(left)) => {}
                    () = stop.cancelled() => return Renewal::Stopped,
                }
            }
        }
    }

    fn lost(&mut self) -> Renewal {
        self.status.leading.store(false, Ordering::Relaxed);
        crate::topology::announce(&format!(
            "leader election: {} lost the Lease {}/{} (not renewed within {:?})",
            self.config.identity, self.config.namespace, self.config.name, self.config.renew_deadline
        ));
        Renewal::Lost
    }

    /// Releases the Lease if this candidate holds it (client-go's `ReleaseOnCancel`): holder
    /// cleared, `leaseDurationSeconds` 1, the transitions kept; bounded by RenewDeadline.
    /// Logged; a failure only logged (the Lease then expires after LeaseDuration).
    pub async fn release(&mut self) {
        if !self.status.is_leader() {
            return;
        }
        self.status.leading.store(false, Ordering::Relaxed);
        let deadline = self.config.renew_deadline;
        let result = tokio::time::timeout(deadline, async {
            let mut lease = self.api.get(&self.config.name).await?;
            let old = LeaderElectionRecord::from_spec(lease.spec.as_ref());
            if old.holder_identity != self.config.identity {
                return Ok(false);
            }
            let now = Timestamp::now();
            let record = LeaderElectionRecord {
                holder_identity: String::new(),
                lease_duration_seconds: 1,
                acquire_time: Some(now),
                renew_time: Some(now),
                leader_transitions: old.leader_transitions,
            };
            lease.spec = Some(record.to_spec());
            self.record_position(&mut lease.metadata);
            self.api.replace(&self.config.name, &PostParams::default(), &lease).await.map(|_| true)
        })
        .await;
        let lease = format!("{}/{}", self.config.namespace, self.config.name);
        match result {
            Ok(Ok(true)) => crate::topology::announce(&format!("leader election: released the Lease {lease}")),
            Ok(Ok(false)) => tracing::warn!("leader election: the Lease {lease} was no longer held at release"),
            Ok(Err(error)) => tracing::warn!("leader election: releasing the Lease {lease}: {error}"),
            Err(_) => tracing::warn!("leader election: releasing the Lease {lease}: no answer in time"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> LeaderElectionConfig {
        LeaderElectionConfig {
            namespace: "ns".into(),
            name: "eventpipe".into(),
            identity: "a_1".into(),
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_deadline: DEFAULT_RENEW_DEADLINE,
            retry_period: DEFAULT_RETRY_PERIOD,
        }
    }

    #[test]
    fn validates_as_client_go() {
        assert!(config().validate().is_ok());
        let c = LeaderElectionConfig { renew_deadline: Duration::from_secs(15), ..config() };
        assert!(c.validate().unwrap_err().contains("greater than the renew deadline"));
        // 2.4 s is RetryPeriod × 1.2: not greater.
        let c = LeaderElectionConfig { renew_deadline: Duration::from_secs_f64(2.4), ..config() };
        assert!(c.validate().unwrap_err().contains("retry period"));
        let c = LeaderElectionConfig { retry_period: Duration::ZERO, ..config() };
        assert!(c.validate().is_err());
        let c = LeaderElectionConfig { lease_duration: Duration::from_millis(1500), ..config() };
        assert_eq!(c.lease_duration_seconds(), 2);
    }

    fn held_by(holder: &str, transitions: i32) -> LeaderElectionRecord {
        LeaderElectionRecord {
            holder_identity: holder.into(),
            lease_duration_seconds: 15,
            leader_transitions: transitions,
            ..LeaderElectionRecord::default()
        }
    }

    #[test]
    fn a_held_lease_expires_by_the_observers_clock() {
        let t0 = Instant::now();
        let mut seen = Observation::default();
        seen.observe(held_by("b_1", 0), t0);
        assert!(seen.held_by_other("a_1", t0 + Duration::from_secs(14)));
        // The same record read again does not move the observed time: it expires 15 s after
        // it was first seen.
        seen.observe(held_by("b_1", 0), t0 + Duration::from_secs(10));
        assert!(!seen.held_by_other("a_1", t0 + Duration::from_secs(15)));
        // A renewal (a changed record) starts the 15 s again.
        let renewed = LeaderElectionRecord { renew_time: Some(Timestamp::now()), ..held_by("b_1", 0) };
        seen.observe(renewed, t0 + Duration::from_secs(15));
        assert!(seen.held_by_other("a_1", t0 + Duration::from_secs(29)));
        // Its own lease and a released one are never "held by another".
        assert!(!seen.held_by_other("b_1", t0 + Duration::from_secs(16)));
        seen.observe(LeaderElectionRecord { lease_duration_seconds: 1, ..held_by("", 0) }, t0);
        assert!(!seen.held_by_other("a_1", t0));
    }

    #[test]
    fn transitions_count_changes_of_holder() {
        let t1 = Timestamp::from_second(1_000).unwrap();
        let t2 = Timestamp::from_second(1_002).unwrap();
        let taken = next_record(&held_by("b_1", 3), "a_1", 15, t1);
        assert_eq!((taken.leader_transitions, taken.acquire_time, taken.renew_time), (4, Some(t1), Some(t1)));
        let renewed = next_record(&taken, "a_1", 15, t2);
        assert_eq!((renewed.leader_transitions, renewed.acquire_time, renewed.renew_time), (4, Some(t1), Some(t2)));
        let after_release = next_record(&held_by("", 4), "b_1", 15, t2);
        assert_eq!(after_release.leader_transitions, 5);
    }
}
