//! What writing to sinks did: counts of client-go `recordToSink` outcomes.

use super::WriteOutcome;
use super::retry::Verb;

/// What one sink watcher did, returned when its task ends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SinkStats {
    /// Events received from the Broadcaster.
    pub received: u64,
    /// Written with create. In a run's totals and per tenant: events written, each once however
    /// many sinks wrote it (with the verb of its first write to succeed); per sink: the sink's
    /// writes that ended created.
    pub created: u64,
    /// Written with patch (counted as `created` is).
    pub patched: u64,
    /// Skipped by the spam filter.
    pub skipped: u64,
    /// events.k8s.io recording: counted in the cached series of an isomorphic event, nothing
    /// sent then (the series' next patch carries it).
    pub series_counted: u64,
    /// Replaced by an aggregate event by this run's EventAggregator.
    pub aggregated: u64,
    /// Received already aggregated: the message begins with client-go's
    /// `(combined from similar events): ` (a stream recorded after a correlator). Not counted
    /// in `aggregated`.
    pub already_aggregated: u64,
    /// Dropped by filter plugins.
    pub filtered: u64,
    /// Dropped by declarative `drop` / `keep` rules ([`crate::tenant::rules`]).
    pub dropped_by_rules: u64,
    /// Dropped because a key-function plugin failed under the `drop` or `fail` fallback policy
    /// (`--plugin-fallback`): not written, and not a spam-filter skip.
    pub dropped_by_plugins: u64,
    /// Let through the spam filter by a `spam_exempt` rule.
    pub spam_exempted: u64,
    /// "N suppressed" summary events sent ([`crate::pipeline::suppressed`]; each also counts as created,
    /// per sink, when written).
    pub suppressed_summaries: u64,
    /// Dropped after a non-retryable sink error.
    pub dropped: u64,
    /// Abandoned after the last retry.
    pub gave_up: u64,
    /// Abandoned because of shutdown.
    pub cancelled: u64,
    /// Sink calls beyond the first per event.
    pub retries: u64,
    /// Writes an `at-most-once` sink dropped because its window of writes in flight was full.
    pub shed: u64,
}

impl SinkStats {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &SinkStats) {
        self.received += other.received;
        self.created += other.created;
        self.patched += other.patched;
        self.skipped += other.skipped;
        self.series_counted += other.series_counted;
        self.aggregated += other.aggregated;
        self.already_aggregated += other.already_aggregated;
        self.filtered += other.filtered;
        self.dropped_by_rules += other.dropped_by_rules;
        self.dropped_by_plugins += other.dropped_by_plugins;
        self.spam_exempted += other.spam_exempted;
        self.suppressed_summaries += other.suppressed_summaries;
        self.dropped += other.dropped;
        self.gave_up += other.gave_up;
        self.cancelled += other.cancelled;
        self.retries += other.retries;
        self.shed += other.shed;
    }

    /// Counts one `recordToSink` outcome.
    pub fn count(&mut self, outcome: &WriteOutcome) {
        self.count_outcome(outcome, true);
    }

    /// Counts one `recordToSink` outcome, but not a written one's verb: for the totals, whose
    /// `created` / `patched` count an event once however many sinks wrote it.
    pub fn count_unless_written(&mut self, outcome: &WriteOutcome) {
        self.count_outcome(outcome, false);
    }

    fn count_outcome(&mut self, outcome: &WriteOutcome, verbs: bool) {
        let attempts = match *outcome {
            WriteOutcome::Skipped => {
                self.skipped += 1;
                return;
            }
            WriteOutcome::SeriesCounted => {
                self.series_counted += 1;
                return;
            }
            WriteOutcome::Written { verb: Verb::Create, attempts } => {
                self.created += u64::from(verbs);
                attempts
            }
            WriteOutcome::Written { verb: Verb::Patch, attempts } => {
                self.patched += u64::from(verbs);
                attempts
            }
            WriteOutcome::Dropped { attempts, .. } => {
                self.dropped += 1;
                attempts
            }
            WriteOutcome::GaveUp { attempts, .. } => {
                self.gave_up += 1;
                attempts
            }
            WriteOutcome::Cancelled { attempts, .. } => {
                self.cancelled += 1;
                attempts
            }
        };
        self.retries += u64::from(attempts.saturating_sub(1));
    }
}
