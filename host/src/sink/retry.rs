//! client-go's `recordToSink` / `recordEvent`: create or patch, fall back to create on 404, up to
//! 12 tries with client-go's sleeps (spec §2.5).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::{EventSink, SinkError, SinkPatch, Stored, StoredEvent};
use crate::correlator::{EventCorrelateResult, EventCorrelator};
use crate::event::Event;

/// client-go `maxTriesPerEvent`.
pub const MAX_TRIES_PER_EVENT: u32 = 12;
/// client-go `defaultSleepDuration`, between tries.
pub const DEFAULT_SLEEP_DURATION: Duration = Duration::from_secs(10);

/// How `recordToSink` retries.
#[derive(Clone)]
pub struct RetryPolicy {
    /// Attempts per event, including the first (client-go: 12).
    pub max_tries: u32,
    /// Pause between attempts (client-go: 10 s); the first pause is scaled by [`Self::jitter`].
    pub sleep_duration: Duration,
    /// Returns a factor in `[0, 1)` for the first pause (client-go: `rand.Float64()`).
    /// Injectable so tests are deterministic.
    pub jitter: Arc<dyn Fn() -> f64 + Send + Sync>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_tries: MAX_TRIES_PER_EVENT,
            sleep_duration: DEFAULT_SLEEP_DURATION,
            jitter: Arc::new(rand::random::<f64>),
        }
    }
}

impl std::fmt::Debug for RetryPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("max_tries", &self.max_tries)
            .field("sleep_duration", &self.sleep_duration)
            .finish()
    }
}

impl RetryPolicy {
    /// The pause after failed attempt number `tries` (1-based): `sleep × jitter` after the first
    /// failure, `sleep` after the others, as client-go.
    pub fn delay_after(&self, tries: u32) -> Duration {
        if tries == 1 { self.sleep_duration.mul_f64((self.jitter)().clamp(0.0, 1.0)) } else { self.sleep_duration }
    }
}

/// Which call wrote the event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    /// `create` (first occurrence, or a patch target that was gone).
    Create,
    /// `patch` (a repeat).
    Patch,
}

/// How writing one correlated event ended.
#[derive(Debug, Clone, PartialEq)]
pub enum WriteOutcome {
    /// The spam filter skipped it; nothing was sent.
    Skipped,
    /// events.k8s.io recording ([`super::series::SeriesSink`]): an isomorphic event's series
    /// counted it; nothing was sent now (client-go `tools/events` sends the count with the
    /// series' next patch).
    SeriesCounted,
    /// Written by `verb` after `attempts` attempts; the sink's copy was fed to `update_state`.
    Written {
        /// The call that succeeded.
        verb: Verb,
        /// Attempts made, ≥ 1.
        attempts: u32,
    },
    /// A non-retryable error: dropped after `attempts` attempts, as client-go.
    Dropped {
        /// The last error.
        error: SinkError,
        /// Attempts made.
        attempts: u32,
    },
    /// Every one of `max_tries` attempts failed with a retryable error ("retry limit exceeded").
    GaveUp {
        /// The last error.
        error: SinkError,
        /// Attempts made (= `max_tries`).
        attempts: u32,
    },
    /// Shutdown was requested while waiting to retry.
    Cancelled {
        /// The last error.
        error: SinkError,
        /// Attempts made.
        attempts: u32,
    },
}

/// client-go `recordToSink` after `EventCorrelate`: writes `result` to `sink` (patch when the
/// event's count > 1, else create), retrying per `policy` until success, a non-retryable error,
/// `max_tries`, or `cancel`. On success the sink's copy goes to `correlator.update_state`.
///
/// Quirks kept from client-go: a patch that fails with a non-404 status is dropped without
/// trying create; a count > 1 event with no patch sends an empty patch body; the
/// `resourceVersion` cleared before a create stays cleared for later attempts.
pub async fn write_event(
    sink: &dyn EventSink,
    correlator: &mut EventCorrelator,
    result: EventCorrelateResult,
    policy: &RetryPolicy,
    cancel: &CancellationToken,
) -> WriteOutcome {
    let (outcome, stored) = deliver(sink, result, policy, cancel).await;
    if let Some(stored) = stored {
        correlator.update_state(stored.event());
    }
    outcome
}

/// [`write_event`] without the correlator: the outcome, and on success the event as the sink
/// stored it (the result's own box when the sink stored it as sent, [`StoredEvent`]), for the
/// caller to give to `update_state` (a caller with several writes in flight does so when each
/// completes).
pub async fn deliver<S: EventSink + ?Sized>(
    sink: &S,
    result: EventCorrelateResult,
    policy: &RetryPolicy,
    cancel: &CancellationToken,
) -> (WriteOutcome, Option<StoredEvent>) {
    let EventCorrelateResult { skip, event, patch } = result;
    let Some(mut event) = event.filter(|_| !skip) else {
        return (WriteOutcome::Skipped, None);
    };
    let patch = patch.as_ref().map_or(SinkPatch::Bytes(&[]), SinkPatch::Observed);
    let update_existing = event.count > 1;
    let mut tries = Tries::new(policy);
    loop {
        let error = match record_event(sink, &mut event, patch, update_existing).await {
            Ok((Stored::AsSent, verb)) => return (tries.written(verb), Some(StoredEvent::AsSent(event))),
            Ok((Stored::Copy(copy), verb)) => return (tries.written(verb), Some(StoredEvent::Copy(copy))),
            Err(error) => error,
        };
        let retryable = error.is_retryable();
        if let Some(outcome) = tries.after_failure(&event, error, retryable, |n| policy.delay_after(n), cancel).await {
            return (outcome, None);
        }
    }
}

/// The attempts of one event's write and what ends them: the retry loop that client-go's
/// `tools/record` `recordToSink` and `tools/events` `attemptRecording` share.
pub(crate) struct Tries<'p> {
    policy: &'p RetryPolicy,
    /// The attempt under way, 1-based.
    tries: u32,
}

impl<'p> Tries<'p> {
    /// Before the first attempt.
    pub(crate) fn new(policy: &'p RetryPolicy) -> Self {
        Self { policy, tries: 1 }
    }

    /// The attempt under way succeeded with `verb`.
    pub(crate) fn written(&self, verb: Verb) -> WriteOutcome {
        WriteOutcome::Written { verb, attempts: self.tries }
    }

    /// The attempt under way failed with `error`. Ends the write (`Some`) when the error is not
    /// `retryable` (dropped, as client-go), after `max_tries` attempts (gave up), or when `cancel`
    /// fires during the pause; otherwise pauses for `pause(failed attempts so far)` and returns
    /// `None`: try again.
    pub(crate) async fn after_failure(
        &mut self,
        event: &Event,
        error: SinkError,
        retryable: bool,
        pause: impl FnOnce(u32) -> Duration,
        cancel: &CancellationToken,
    ) -> Option<WriteOutcome> {
        let attempts = self.tries;
        if !retryable {
            log_dropped(event, &error);
            return Some(WriteOutcome::Dropped { error, attempts });
        }
        if attempts >= self.policy.max_tries {
            tracing::error!(event = %event.metadata.name, %error, "unable to write event (retry limit exceeded!)");
            return Some(WriteOutcome::GaveUp { error, attempts });
        }
        tokio::select! {
            biased;
            _ = cancel.cancelled() => {
                tracing::info!(event = %event.metadata.name, "shutdown requested, not retrying the event");
                return Some(WriteOutcome::Cancelled { error, attempts });
            }
            _ = tokio::time::sleep(pause(attempts)) => {}
        }
        self.tries += 1;
        None
    }
}

/// client-go `recordEvent`: one attempt. Patch when `update_existing`; create when not, or when
/// the patch target is gone (404), with `resourceVersion` cleared.
pub(crate) async fn record_event<S: EventSink + ?Sized>(
    sink: &S,
    event: &mut Event,
    patch: SinkPatch<'_>,
    update_existing: bool,
) -> Result<(Stored, Verb), SinkError> {
    if update_existing {
        match sink.patch_observed(event, patch).await {
            Ok(stored) => return Ok((stored, Verb::Patch)),
            Err(SinkError::Status(s)) if s.is_not_found() => {}
            Err(other) => return Err(other),
        }
    }
    event.metadata.resource_version.clear();
    sink.create(event).await.map(|stored| (stored, Verb::Create))
}

fn log_dropped(event: &Event, error: &SinkError) {
    match error {
        // client-go drops these with an error line per event; the events of a deleted
        // namespace can be many, so each namespace is named once (the counts are in the run
        // summary and `/metrics`).
        SinkError::Status(s) if s.missing_namespace().is_some() => {
            let namespace = s.missing_namespace().unwrap_or_default();
            let first = MISSING_NAMESPACES.lock().unwrap_or_else(|p| p.into_inner()).first(namespace);
            match first {
                Some(true) => tracing::warn!(
                    namespace,
                    event = %event.metadata.name,
                    %error,
                    "namespace not found: its events are dropped (will not retry!); warned once per namespace, \
                     counted as reason {REASON_NAMESPACE_NOT_FOUND} in the summary and /metrics"
                ),
                Some(false) => {}
                None => tracing::warn!(
                    namespace,
                    "namespace not found, and more than {MAX_NAMED_MISSING_NAMESPACES} namespaces were: \
                     further ones are counted but not named"
                ),
            }
        }
        // client-go logs these at V(5); they are the commonest drops, so they are warned about
        // at most once per reason per EXPECTED_DROP_LOG_INTERVAL, with the count in between.
        SinkError::Status(s) if s.is_expected() => {
            let reason = rejection_reason(error);
            if let Some(since) = EXPECTED_DROPS.lock().unwrap_or_else(|p| p.into_inner()).admit(&reason, Instant::now())
            {
                tracing::warn!(event = %event.metadata.name, %error, reason, dropped_since_last_warning = since, "server rejected event (will not retry!)");
            }
        }
        // A sink plugin's refusal names the plugin, tenant and event itself.
        SinkError::Refused { reason, .. } => {
            tracing::error!(event = %event.metadata.name, %error, reason, "sink refused event (will not retry!)")
        }
        _ => {
            tracing::error!(event = %event.metadata.name, %error, "server rejected event (will not retry!)")
        }
    }
}

/// The rejection reason of a write to a namespace that does not exist (a `404` with
/// `namespaces "NAME" not found`): one label value for every such namespace.
pub const REASON_NAMESPACE_NOT_FOUND: &str = "NamespaceNotFound";

/// Missing namespaces named in logs and kept per namespace in the run's stats; beyond this many
/// in one process, further ones are only counted (under [`REASON_NAMESPACE_NOT_FOUND`]).
pub const MAX_NAMED_MISSING_NAMESPACES: usize = 1024;

/// The reason a write was rejected and dropped, for counting: the Kubernetes status reason
/// (`AlreadyExists`, `NotFound`, `Forbidden`, …; `NamespaceTerminating` when that is the cause,
/// [`REASON_NAMESPACE_NOT_FOUND`] for a namespace that does not exist; the HTTP code when there
/// is no reason), `RequestConstruction`, or the reason a sink gave with [`SinkError::Refused`]
/// (`Permanent`, `PluginGarbage`, `PluginFailed`).
pub fn rejection_reason(error: &SinkError) -> String {
    match error {
        SinkError::Status(s) if s.missing_namespace().is_some() => REASON_NAMESPACE_NOT_FOUND.to_string(),
        SinkError::Status(s) if s.causes.iter().any(|c| c == crate::k8s::CAUSE_NAMESPACE_TERMINATING) => {
            crate::k8s::CAUSE_NAMESPACE_TERMINATING.to_string()
        }
        SinkError::Status(s) if s.reason.is_empty() => s.code.to_string(),
        SinkError::Status(s) => s.reason.clone(),
        SinkError::RequestConstruction(_) => "RequestConstruction".into(),
        SinkError::UnexpectedObject(_) => "UnexpectedObject".into(),
        SinkError::Transport(_) => "Transport".into(),
        SinkError::Refused { reason, .. } => (*reason).into(),
    }
}

/// Warnings about expected rejections: at most one per reason per this interval.
pub const EXPECTED_DROP_LOG_INTERVAL: Duration = Duration::from_secs(10);

static EXPECTED_DROPS: std::sync::Mutex<LogLimiter> = std::sync::Mutex::new(LogLimiter::new());

static MISSING_NAMESPACES: std::sync::Mutex<SeenOnce> = std::sync::Mutex::new(SeenOnce::new());

/// Names seen, up to [`MAX_NAMED_MISSING_NAMESPACES`]: what is warned about once.
#[derive(Debug)]
struct SeenOnce {
    names: std::collections::BTreeSet<String>,
    /// Whether a name was refused for want of room (that is warned about once too).
    full: bool,
}

impl SeenOnce {
    const fn new() -> Self {
        Self { names: std::collections::BTreeSet::new(), full: false }
    }

    /// `Some(true)` the first time `name` comes, `Some(false)` later; `None` the first time a
    /// name finds no room (then `Some(false)` for every name not kept).
    fn first(&mut self, name: &str) -> Option<bool> {
        if self.names.contains(name) {
            return Some(false);
        }
        if self.names.len() < MAX_NAMED_MISSING_NAMESPACES {
            self.names.insert(name.to_string());
            return Some(true);
        }
        if std::mem::replace(&mut self.full, true) { Some(false) } else { None }
    }
}

/// Lets one log line per key through per [`EXPECTED_DROP_LOG_INTERVAL`].
#[derive(Debug)]
struct LogLimiter {
    /// Per key: when its last line was let through, and how many were held back since.
    keys: std::collections::BTreeMap<String, (Instant, u64)>,
}

impl LogLimiter {
    const fn new() -> Self {
        Self { keys: std::collections::BTreeMap::new() }
    }

    /// `Some(held back since the last line)` when a line for `key` may be logged at `now`.
    fn admit(&mut self, key: &str, now: Instant) -> Option<u64> {
        match self.keys.get_mut(key) {
            Some((last, held)) if now.duration_since(*last) < EXPECTED_DROP_LOG_INTERVAL => {
                *held += 1;
                None
            }
            Some((last, held)) => {
                *last = now;
                Some(std::mem::take(held))
            }
            None => {
                self.keys.insert(key.to_string(), (now, 0));
                Some(0)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::StatusError;

    /// Answers every call with what it was built to store: the event as sent, or its own copy
    /// (a server that names the event and gives it a resourceVersion).
    struct Storing {
        as_sent: bool,
    }

    #[async_trait::async_trait]
    impl EventSink for Storing {
        async fn create(&self, event: &Event) -> Result<Stored, SinkError> {
            if self.as_sent {
                return Ok(Stored::AsSent);
            }
            let mut copy = event.clone();
            copy.metadata.resource_version = "42".into();
            Ok(Stored::copy(copy))
        }
        async fn update(&self, event: &Event) -> Result<Stored, SinkError> {
            self.create(event).await
        }
        async fn patch(&self, event: &Event, _patch: &[u8]) -> Result<Stored, SinkError> {
            self.create(event).await
        }
    }

    /// `update_state` gets the event as the sink stored it: for a sink that stores it as sent,
    /// the result's own box (the same allocation, no copy); otherwise the sink's copy.
    #[tokio::test]
    async fn deliver_hands_back_the_results_own_box_or_the_sinks_copy() {
        let (policy, cancel) = (RetryPolicy::default(), CancellationToken::new());
        let result = || {
            let mut event = Event { reason: "Started".into(), count: 1, ..Event::default() };
            event.metadata.resource_version = "7".into();
            EventCorrelateResult { skip: false, event: Some(Box::new(event)), patch: None }
        };
        let sent = result();
        let address = std::ptr::from_ref::<Event>(sent.event.as_deref().unwrap());
        let (outcome, stored) = deliver(&Storing { as_sent: true }, sent, &policy, &cancel).await;
        assert!(matches!(outcome, WriteOutcome::Written { verb: Verb::Create, attempts: 1 }), "{outcome:?}");
        let Some(StoredEvent::AsSent(stored)) = stored else { panic!("stored as sent: {stored:?}") };
        assert_eq!(std::ptr::from_ref::<Event>(&stored), address, "the result's own box");
        // Cleared before a create, as client-go's recordEvent does.
        assert_eq!((stored.reason.as_str(), stored.metadata.resource_version.as_str()), ("Started", ""));

        let (_, stored) = deliver(&Storing { as_sent: false }, result(), &policy, &cancel).await;
        let Some(StoredEvent::Copy(stored)) = stored else { panic!("the sink's copy: {stored:?}") };
        assert_eq!(stored.metadata.resource_version, "42", "the sink's copy");

        let skipped = EventCorrelateResult { skip: true, event: None, patch: None };
        let (outcome, stored) = deliver(&Storing { as_sent: true }, skipped, &policy, &cancel).await;
        assert!(matches!(outcome, WriteOutcome::Skipped) && stored.is_none());
    }

    #[test]
    fn expected_rejections_are_logged_once_per_reason_per_interval_with_the_count_between() {
        let mut limiter = LogLimiter::new();
        let t0 = Instant::now();
        assert_eq!(limiter.admit("AlreadyExists", t0), Some(0));
        assert_eq!(limiter.admit("AlreadyExists", t0 + Duration::from_secs(1)), None);
        assert_eq!(limiter.admit("AlreadyExists", t0 + Duration::from_secs(2)), None);
        assert_eq!(limiter.admit("NamespaceTerminating", t0 + Duration::from_secs(2)), Some(0), "per reason");
        assert_eq!(limiter.admit("AlreadyExists", t0 + EXPECTED_DROP_LOG_INTERVAL), Some(2), "two held back");
    }

    #[test]
    fn rejection_reasons_name_the_status_reason_or_cause() {
        let status = |code, reason: &str, causes: &[&str]| {
            SinkError::Status(StatusError {
                code,
                reason: reason.into(),
                message: String::new(),
                causes: causes.iter().map(|c| c.to_string()).collect(),
            })
        };
        assert_eq!(rejection_reason(&status(409, "AlreadyExists", &[])), "AlreadyExists");
        assert_eq!(rejection_reason(&status(403, "Forbidden", &["NamespaceTerminating"])), "NamespaceTerminating");
        assert_eq!(rejection_reason(&status(502, "", &[])), "502");
        let missing = SinkError::Status(StatusError {
            code: 404,
            reason: "NotFound".into(),
            message: "namespaces \"gone\" not found".into(),
            causes: Vec::new(),
        });
        assert_eq!(rejection_reason(&missing), REASON_NAMESPACE_NOT_FOUND);
    }

    #[test]
    fn missing_namespaces_are_named_once_each_up_to_the_bound() {
        let mut seen = SeenOnce::new();
        assert_eq!(seen.first("a"), Some(true));
        assert_eq!(seen.first("a"), Some(false));
        for i in 1..MAX_NAMED_MISSING_NAMESPACES {
            assert_eq!(seen.first(&format!("n{i}")), Some(true));
        }
        assert_eq!(seen.first("one-too-many"), None, "the bound is reported once");
        assert_eq!(seen.first("another"), Some(false));
        assert_eq!(seen.first("a"), Some(false));
    }
}
