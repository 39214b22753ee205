//! EventBroadcaster: the Broadcaster of Events plus its consumers — recording to a sink through
//! an EventCorrelator, plain event watchers and structured logging (client-go
//! `record.EventBroadcaster`, spec §2.2 and §2.4).

use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::broadcaster::{Broadcaster, BroadcasterError, FullChannelBehavior, Watcher};
use crate::clock::SharedClock;
use crate::correlator::{CorrelatorOptions, EventCorrelator, Occurrence, PREPARE_BATCH_SIZE};
use crate::event::{Event, EventSource};
use crate::recorder::EventRecorder;
use crate::sink::retry::Verb;
use crate::sink::{EventSink, RetryPolicy, WriteOutcome, write_event};

/// client-go `maxQueuedEvents`: the incoming queue and every watcher's queue, events.
pub const MAX_QUEUED_EVENTS: usize = 1000;

/// Which instant the correlator reads for an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CorrelationClock {
    /// The correlator's clock when the event is processed, as client-go.
    #[default]
    Processing,
    /// The event's own time ([`Event::occurred_at`]), falling back to the correlator's clock:
    /// deterministic when replaying recorded streams.
    EventTime,
}

impl CorrelationClock {
    /// `event` as an [`Occurrence`] whose clocks this choice sets: none (the correlator reads
    /// its own) or both from [`Event::occurred_at`].
    pub fn occurrence(self, event: Event) -> Occurrence {
        match self {
            CorrelationClock::Processing => Occurrence::from(event),
            CorrelationClock::EventTime => {
                let at = event.occurred_at();
                Occurrence { event, clock: at, spam_filter_clock: at }
            }
        }
    }
}

/// The next batch of a watcher: the next event (waiting for it) and whatever else is queued,
/// up to [`PREPARE_BATCH_SIZE`] events; `None` when the watcher is closed.
pub(crate) async fn recv_batch(watcher: &mut Watcher<Event>) -> Option<Vec<Event>> {
    let first = watcher.recv().await?;
    let mut batch = Vec::with_capacity(PREPARE_BATCH_SIZE);
    batch.push(first.object);
    while batch.len() < PREPARE_BATCH_SIZE {
        match watcher.try_recv() {
            Some(next) => batch.push(next.object),
            None => break,
        }
    }
    Some(batch)
}

/// How an [`EventBroadcaster`] is built (client-go `NewBroadcaster` options).
#[derive(Clone, Debug)]
pub struct EventBroadcasterOptions {
    /// Incoming and per-watcher queue length, events (client-go: 1000).
    pub queue_length: usize,
    /// What a full watcher queue does (client-go: drop).
    pub full_channel_behavior: FullChannelBehavior,
    /// Options of each sink's EventCorrelator (client-go `WithCorrelatorOptions`).
    pub correlator: CorrelatorOptions,
    /// The sink retry policy (client-go `WithSleepDuration` sets its sleep).
    pub retry: RetryPolicy,
    /// Which instant the correlators read.
    pub correlation_clock: CorrelationClock,
}

impl Default for EventBroadcasterOptions {
    fn default() -> Self {
        Self {
            queue_length: MAX_QUEUED_EVENTS,
            full_channel_behavior: FullChannelBehavior::DropIfChannelFull,
            correlator: CorrelatorOptions::default(),
            retry: RetryPolicy::default(),
            correlation_clock: CorrelationClock::Processing,
        }
    }
}

/// What one sink watcher did, returned when its task ends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SinkStats {
    /// Events received from the Broadcaster.
    pub received: u64,
    /// Written with create.
    pub created: u64,
    /// Written with patch.
    pub patched: u64,
    /// Skipped by the spam filter.
    pub skipped: u64,
    /// Replaced by an aggregate event.
    pub aggregated: u64,
    /// Dropped after a non-retryable sink error.
    pub dropped: u64,
    /// Abandoned after the last retry.
    pub gave_up: u64,
    /// Abandoned because of shutdown.
    pub cancelled: u64,
    /// Sink calls beyond the first per event.
    pub retries: u64,
}

impl SinkStats {
    /// Counts one `recordToSink` outcome.
    pub(crate) fn count(&mut self, outcome: &WriteOutcome) {
        let attempts = match *outcome {
            WriteOutcome::Skipped => {
                self.skipped += 1;
                return;
            }
            WriteOutcome::Written { verb: Verb::Create, attempts } => {
                self.created += 1;
                attempts
            }
            WriteOutcome::Written { verb: Verb::Patch, attempts } => {
                self.patched += 1;
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

/// client-go `EventBroadcaster`: owns the `Broadcaster<Event>`, makes recorders, and starts
/// watchers that record to sinks (each with its own EventCorrelator) or call a handler.
#[derive(Clone, Debug)]
pub struct EventBroadcaster {
    broadcaster: Broadcaster<Event>,
    options: EventBroadcasterOptions,
    cancel: CancellationToken,
}

impl EventBroadcaster {
    /// client-go `NewBroadcaster`: a long-queue Broadcaster (incoming and watcher queues of
    /// `queue_length`). Needs a tokio runtime.
    pub fn new(options: EventBroadcasterOptions) -> Self {
        let broadcaster = Broadcaster::new_long_queue(options.queue_length, options.full_channel_behavior);
        Self { broadcaster, options, cancel: CancellationToken::new() }
    }

    /// The underlying Broadcaster (sources that are not recorders send through it).
    pub fn broadcaster(&self) -> &Broadcaster<Event> {
        &self.broadcaster
    }

    /// client-go `NewRecorder`: a recorder reporting as `source`, timestamping with `clock`.
    pub fn new_recorder(&self, source: EventSource, clock: SharedClock) -> EventRecorder {
        EventRecorder::new(self.broadcaster.clone(), source, clock)
    }

    /// client-go `StartRecordingToSink`: a new watcher whose task runs every event through a
    /// **new** EventCorrelator and writes the result to `sink` with the retry policy. The task
    /// ends, returning its [`SinkStats`], when the watcher closes (shutdown or stop).
    ///
    /// # Errors
    /// [`BroadcasterError::Stopped`] after shutdown.
    pub fn start_recording_to_sink(&self, sink: Arc<dyn EventSink>) -> Result<JoinHandle<SinkStats>, BroadcasterError> {
        let watcher = self.broadcaster.watch()?;
        let correlator = EventCorrelator::new(self.options.correlator.clone());
        let (retry, cancel, clock) = (self.options.retry.clone(), self.cancel.clone(), self.options.correlation_clock);
        Ok(tokio::spawn(record_to_sink(watcher, sink, correlator, retry, cancel, clock)))
    }

    /// The tenant router watcher ([`crate::pipeline::record_to_tenants`]): like
    /// [`start_recording_to_sink`](Self::start_recording_to_sink), but each event goes to its
    /// tenant's filters and correlators and sinks, as the latest plan from `plans` says;
    /// `progress` counts finished events (at-least-once delivery); `live` mirrors the stats.
    ///
    /// # Errors
    /// [`BroadcasterError::Stopped`] after shutdown.
    pub fn start_recording_to_tenants(
        &self,
        plans: tokio::sync::watch::Receiver<Arc<crate::pipeline::TenantPlan>>,
        progress: Option<Arc<crate::delivery::Progress>>,
        live: Option<Arc<std::sync::Mutex<crate::pipeline::RouterStats>>>,
    ) -> Result<JoinHandle<crate::pipeline::RouterStats>, BroadcasterError> {
        let watcher = self.broadcaster.watch()?;
        let (retry, cancel, clock) = (self.options.retry.clone(), self.cancel.clone(), self.options.correlation_clock);
        Ok(tokio::spawn(crate::pipeline::record_to_tenants(watcher, plans, retry, cancel, clock, progress, live)))
    }

    /// client-go `StartEventWatcher`: calls `handler` synchronously for every event; a slow
    /// handler only backs up its own watcher's queue. Ends when the watcher closes.
    ///
    /// # Errors
    /// [`BroadcasterError::Stopped`] after shutdown.
    pub fn start_event_watcher<F>(&self, mut handler: F) -> Result<JoinHandle<()>, BroadcasterError>
    where
        F: FnMut(Event) + Send + 'static,
    {
        let mut watcher = self.broadcaster.watch()?;
        let cancel = self.cancel.clone();
        Ok(tokio::spawn(async move {
            loop {
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => break,
                    next = watcher.recv() => match next {
                        Some(e) => handler(e.object),
                        None => break,
                    },
                }
            }
            watcher.stop();
        }))
    }

    /// client-go `StartLogging`: calls `logf` with one line per event, in client-go's format
    /// (see [`logging_line`]).
    ///
    /// # Errors
    /// [`BroadcasterError::Stopped`] after shutdown.
    pub fn start_logging<F>(&self, mut logf: F) -> Result<JoinHandle<()>, BroadcasterError>
    where
        F: FnMut(String) + Send + 'static,
    {
        self.start_event_watcher(move |e| logf(logging_line(&e)))
    }

    /// client-go `StartStructuredLogging`: logs `"Event occurred"` at INFO with the key/value
    /// pairs of [`structured_logging_fields`].
    ///
    /// # Errors
    /// [`BroadcasterError::Stopped`] after shutdown.
    pub fn start_structured_logging(&self) -> Result<JoinHandle<()>, BroadcasterError> {
        self.start_event_watcher(|e| {
            let [object, field_path, kind, api_version, type_, reason, message] =
                structured_logging_fields(&e).map(|(_, v)| v);
            tracing::info!(
                object,
                fieldPath = field_path,
                kind,
                apiVersion = api_version,
                r#type = type_,
                reason,
                message,
                "Event occurred"
            );
        })
    }

    /// client-go `Shutdown`: drains the Broadcaster (every accepted event reaches every
    /// watcher's queue or is dropped per its behaviour), closes all watchers, then cancels
    /// pending retries (a sink gets one more attempt per event, then gives up).
    pub async fn shutdown(&self) {
        self.broadcaster.shutdown().await;
        self.cancel.cancel();
    }
}

/// The sink watcher's loop: batches of up to [`PREPARE_BATCH_SIZE`] queued events are prepared
/// together (one key-function call per batch), then each is finished and written in order, with
/// `update_state` after each successful write, exactly where client-go calls it.
async fn record_to_sink(
    mut watcher: Watcher<Event>,
    sink: Arc<dyn EventSink>,
    mut correlator: EventCorrelator,
    retry: RetryPolicy,
    cancel: CancellationToken,
    clock: CorrelationClock,
) -> SinkStats {
    let mut stats = SinkStats::default();
    while let Some(events) = recv_batch(&mut watcher).await {
        let batch: Vec<Occurrence> = events.into_iter().map(|e| clock.occurrence(e)).collect();
        stats.received += batch.len() as u64;
        for prepared in correlator.prepare(batch) {
            stats.aggregated += u64::from(prepared.aggregated());
            let result = correlator.finish(prepared);
            let outcome = write_event(sink.as_ref(), &mut correlator, result, &retry, &cancel).await;
            stats.count(&outcome);
        }
    }
    stats
}

/// Go's `%q` for the strings events carry: double-quoted, with `"`, `\` and control
/// characters escaped.
fn go_quote(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            '\n' => q.push_str("\\n"),
            '\t' => q.push_str("\\t"),
            '\r' => q.push_str("\\r"),
            c if c.is_control() => q.push_str(&format!("\\u{:04x}", c as u32)),
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

/// The line client-go's `StartLogging` writes: `Event(<involvedObject as Go %#v>): type: '<type>'
/// reason: '<reason>' <message>`, e.g. `Event(v1.ObjectReference{Kind:"Pod", Namespace:"baz",
/// Name:"foo", UID:"bar", APIVersion:"v1", ResourceVersion:"", FieldPath:""}): type: 'Normal'
/// reason: 'Killed' some message`.
pub fn logging_line(e: &Event) -> String {
    let io = &e.involved_object;
    format!(
        "Event(v1.ObjectReference{{Kind:{}, Namespace:{}, Name:{}, UID:{}, APIVersion:{}, ResourceVersion:{}, FieldPath:{}}}): type: '{}' reason: '{}' {}",
        go_quote(&io.kind),
        go_quote(&io.namespace),
        go_quote(&io.name),
        go_quote(&io.uid),
        go_quote(&io.api_version),
        go_quote(&io.resource_version),
        go_quote(&io.field_path),
        e.type_,
        e.reason,
        e.message
    )
}

/// The key/value pairs of client-go's `StartStructuredLogging` line, in its order: `object`
/// (`namespace/name`, or `name` when cluster-scoped), `fieldPath`, `kind`, `apiVersion`, `type`,
/// `reason`, `message`.
pub fn structured_logging_fields(e: &Event) -> [(&'static str, String); 7] {
    let io = &e.involved_object;
    let object = if io.namespace.is_empty() { io.name.clone() } else { format!("{}/{}", io.namespace, io.name) };
    [
        ("object", object),
        ("fieldPath", io.field_path.clone()),
        ("kind", io.kind.clone()),
        ("apiVersion", io.api_version.clone()),
        ("type", e.type_.clone()),
        ("reason", e.reason.clone()),
        ("message", e.message.clone()),
    ]
}
