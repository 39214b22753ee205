//! The terms of a leader election on a `coordination.k8s.io/v1` Lease, as client-go's
//! `tools/leaderelection` takes them (`LeaderElectionConfig`): where the Lease is, how long it
//! holds, and who this candidate is. The election itself runs in [`crate::topology::leader`];
//! these terms sit below it so that the config file (`[leader_election]`) can give and check
//! them too.

use std::time::Duration;

/// client-go's default LeaseDuration (kube-controller-manager's `--leader-elect-lease-duration`).
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// client-go's default RenewDeadline.
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// client-go's default RetryPeriod.
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);
/// client-go's `JitterFactor`: a candidate waits RetryPeriod × (1 + up to 1.2) between tries,
/// and RenewDeadline must exceed RetryPeriod × 1.2.
pub const JITTER_FACTOR: f64 = 1.2;
/// The Lease's name when `--leader-elect-lease` does not give one.
pub const DEFAULT_LEASE_NAME: &str = "eventpipe";

/// Where the Lease is and how long its terms are.
#[derive(Debug, Clone)]
pub struct LeaderElectionConfig {
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name.
    pub name: String,
    /// This candidate's `holderIdentity` (see [`default_identity`]).
    pub identity: String,
    /// How long a Lease holds without renewal, as candidates observe it (`leaseDurationSeconds`,
    /// whole seconds on the wire, rounded up).
    pub lease_duration: Duration,
    /// How long the leader tries to renew before it steps down.
    pub renew_deadline: Duration,
    /// How often candidates try to acquire and the leader renews.
    pub retry_period: Duration,
}

impl LeaderElectionConfig {
    /// Checks the terms as client-go's `NewLeaderElector` does.
    ///
    /// # Errors
    /// A sentence naming the rule broken: every duration > 0, LeaseDuration > RenewDeadline,
    /// RenewDeadline > RetryPeriod × [`JITTER_FACTOR`]; an empty namespace, name or identity.
    pub fn validate(&self) -> Result<(), String> {
        if self.lease_duration.is_zero() || self.renew_deadline.is_zero() || self.retry_period.is_zero() {
            return Err(
                "leader election: lease duration, renew deadline and retry period must be greater than zero".into()
            );
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(format!(
                "leader election: the lease duration ({:?}) must be greater than the renew deadline ({:?})",
                self.lease_duration, self.renew_deadline
            ));
        }
        if self.renew_deadline.as_secs_f64() <= JITTER_FACTOR * self.retry_period.as_secs_f64() {
            return Err(format!(
                "leader election: the renew deadline ({:?}) must be greater than the retry period × {JITTER_FACTOR} ({:?})",
                self.renew_deadline,
                self.retry_period.mul_f64(JITTER_FACTOR)
            ));
        }
        if self.namespace.is_empty() || self.name.is_empty() {
            return Err("leader election: the Lease needs a namespace and a name".into());
        }
        if self.identity.is_empty() {
            return Err("leader election: the identity must not be empty".into());
        }
        Ok(())
    }

    /// `leaseDurationSeconds` as written: whole seconds, rounded up, at least 1.
    pub fn lease_duration_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs_f64().ceil() as i64).unwrap_or(i32::MAX).max(1)
    }
}

/// This candidate's identity: the pod name (`POD_NAME`, from the downward API), else the host
/// name, then `_` and a random suffix (so a restarted pod of the same name is a new holder), as
/// kube-controller-manager's `hostname_uuid`.
pub fn default_identity() -> String {
    let base = std::env::var("POD_NAME")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|s| s.trim().to_owned()))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "eventpipe".to_owned());
    format!("{base}_{:016x}", rand::random::<u64>())
}

/// The Lease's namespace when none is given: `POD_NAMESPACE` (downward API), else the service
/// account's namespace file, else `default`.
pub fn default_namespace() -> String {
    std::env::var("POD_NAMESPACE")
        .ok()
        .or_else(|| std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace").ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "default".to_owned())
}
