//! Stall detection for the Kubernetes watch: when a watch connection stays open but delivers
//! nothing while the API server moves on (a half-dead TCP connection, a proxy or load balancer
//! that stopped forwarding), nothing in the HTTP stack notices until kube's read timeout
//! (295 s) — and a watch of a quiet namespace legitimately delivers nothing for hours.
//!
//! The rule (issue #56), checked every [`StallOptions::check_interval`] while the watch has
//! been quiet for that long:
//!
//! 1. A cheap `list?limit=1` of the same path and selectors gives the server's resourceVersion
//!    now. When it is not [`newer`] than the watch's position (the last resourceVersion
//!    delivered: event, bookmark, or where the watch started), the cluster is idle: no stall.
//! 2. When it is newer and the watch has been quiet for [`StallOptions::timeout`], the list's
//!    resourceVersion alone does not prove a stall: it is etcd's revision of the whole cluster,
//!    which moves with every Lease renewal, while the watch sees only its Events (and in
//!    Kubernetes before 1.27 a bookmark carries the watch cache's own resourceVersion, which
//!    stands still when no Event changes). So a one-second watch from the position
//!    (`timeoutSeconds=1`) asks the server whether it has an Event past it: the server sends
//!    every change after the position at once. An Event there that the open watch has not
//!    delivered is a stall; nothing there is an idle watch, and the quiet clock starts again.
//!
//! The remedy is the watch's: it is restarted from its position (client-go's reflector does
//! the same after its watch ends). A watch judged stalled again before it delivered anything
//! after such a restart fails `/healthz`: restarting the process is what is left. Lists that
//! get no answer for the timeout (or failing watch requests) fail `/readyz` instead.

use std::time::Duration;

use tokio::time::Instant;

/// The default [`StallOptions::timeout`]: 2 minutes.
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(120);

/// When a quiet watch counts as stalled, and how often it is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StallOptions {
    /// How long a watch may deliver nothing while the server is ahead of it, and how long the
    /// API server may give no answer before `/readyz` fails; zero: no checks.
    pub timeout: Duration,
    /// How often a quiet watch is checked (a `list?limit=1`, and when it is ahead a one-second
    /// watch from the position); also how long a check's list waits for an answer (at least
    /// 1 s, at most the timeout).
    pub check_interval: Duration,
}

impl Default for StallOptions {
    fn default() -> Self {
        Self::with_timeout(DEFAULT_STALL_TIMEOUT)
    }
}

impl StallOptions {
    /// `timeout`, checked every quarter of it (at least every 100 ms).
    pub fn with_timeout(timeout: Duration) -> Self {
        Self { timeout, check_interval: (timeout / 4).max(Duration::from_millis(100)) }
    }

    /// Whether checks run at all.
    pub fn enabled(&self) -> bool {
        !self.timeout.is_zero() && !self.check_interval.is_zero()
    }

    /// How long one check's list may take: the check interval, at least 1 s, at most the
    /// timeout (so that a server that answers nothing fails `/readyz` about when the timeout
    /// has passed).
    pub fn request_timeout(&self) -> Duration {
        self.check_interval.max(Duration::from_secs(1)).min(self.timeout.max(Duration::from_secs(1)))
    }
}

/// Whether resourceVersion `candidate` is newer than `than`. resourceVersions are opaque
/// strings to clients, but every API server stores etcd's revision in them: when both parse
/// as integers they compare as integers; otherwise any difference counts as newer (the server
/// moved), and an empty `candidate` never does.
pub fn newer(candidate: &str, than: &str) -> bool {
    match (candidate.parse::<u64>(), than.parse::<u64>()) {
        (Ok(c), Ok(t)) => c > t,
        _ => !candidate.is_empty() && candidate != than,
    }
}

/// One watch's clocks: when it last heard from its stream, when the server last answered, and
/// whether its last restart was for a stall with nothing delivered since.
#[derive(Debug)]
pub(super) struct Tracker {
    options: StallOptions,
    heard_at: Instant,
    reached_at: Instant,
    restarted_unproven: bool,
}

impl Tracker {
    pub fn new(options: StallOptions) -> Self {
        let now = Instant::now();
        Self { options, heard_at: now, reached_at: now, restarted_unproven: false }
    }

    pub fn options(&self) -> StallOptions {
        self.options
    }

    /// The watch stream gave data, or a watch started: the quiet clock starts again (and the
    /// server answered).
    pub fn heard(&mut self) {
        self.heard_at = Instant::now();
        self.reached_at = self.heard_at;
    }

    /// The server answered a request.
    pub fn reached(&mut self) {
        self.reached_at = Instant::now();
    }

    /// Whether a check should list now: the watch has been quiet for a check interval.
    pub fn should_list(&self) -> bool {
        self.options.enabled() && self.heard_at.elapsed() >= self.options.check_interval
    }

    /// Whether a list at `listed` suggests a stall of a watch at `position`: the server is
    /// ahead, and the watch has been quiet for the timeout.
    pub fn suspect(&self, listed: &str, position: &str) -> bool {
        newer(listed, position) && self.heard_at.elapsed() >= self.options.timeout
    }

    /// How long the server has not answered, once that is the timeout or longer.
    pub fn unreachable_for(&self) -> Option<Duration> {
        let quiet = self.reached_at.elapsed();
        (self.options.enabled() && quiet >= self.options.timeout).then_some(quiet)
    }

    /// The watch delivered an event or bookmark: `true` when that proves a restart for a stall
    /// healed it.
    pub fn delivered(&mut self) -> bool {
        std::mem::take(&mut self.restarted_unproven)
    }

    /// The watch is restarted for a stall: `true` when the previous restart was for a stall
    /// too and nothing was delivered since (it stalled again right away).
    pub fn restarted_for_stall(&mut self) -> bool {
        std::mem::replace(&mut self.restarted_unproven, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_versions_compare_as_integers_when_both_parse() {
        assert!(newer("10", "9"));
        assert!(!newer("9", "10"));
        assert!(!newer("10", "10"));
        assert!(newer("b", "a"));
        assert!(!newer("", "10"));
        assert!(!newer("x", "x"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_watch_is_suspect_only_behind_the_server_after_the_timeout() {
        let mut t = Tracker::new(StallOptions::with_timeout(Duration::from_secs(8)));
        assert_eq!(t.options().check_interval, Duration::from_secs(2));
        assert!(!t.should_list());
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(t.should_list());
        assert!(!t.suspect("20", "10"), "quiet for less than the timeout");
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(t.suspect("20", "10"));
        assert!(!t.suspect("10", "10"), "an idle cluster is not a stall");
        assert_eq!(t.unreachable_for(), Some(Duration::from_secs(8)));
        t.heard();
        assert!(!t.should_list() && !t.suspect("20", "10") && t.unreachable_for().is_none());
    }

    #[test]
    fn a_second_stall_before_any_delivery_is_a_stall_again() {
        let mut t = Tracker::new(StallOptions::default());
        assert!(!t.restarted_for_stall());
        assert!(t.restarted_for_stall(), "nothing delivered since the first restart");
        assert!(t.delivered());
        assert!(!t.restarted_for_stall());
        assert!(!StallOptions::with_timeout(Duration::ZERO).enabled());
    }
}
