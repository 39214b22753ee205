//! EventBroadcaster: the Broadcaster of Events plus its consumers — recording to a sink through
//! an EventCorrelator, plain event watchers and structured logging (client-go
//! `record.EventBroadcaster`, spec §2.2 and §2.4).

use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::broadcaster::{Broadcaster, BroadcasterError, FullChannelBehavior};
use crate::clock::SharedClock;
use crate::correlator::{CorrelationClock, CorrelatorOptions};
use crate::event::{Event, EventSource, SharedEvent};
use crate::pipeline::plan::{PlannedTenant, TenantPlan};
use crate::pipeline::router::{RouterOptions, RouterStats, record_to_tenants};
use crate::record::recorder::EventRecorder;
use crate::sink::{EventSink, RetryPolicy, SinkStats};
use crate::tenant::DEFAULT_TENANT;

/// client-go `maxQueuedEvents`: the incoming queue and every watcher's queue, events.
pub const MAX_QUEUED_EVENTS: usize = 1000;

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

/// client-go `EventBroadcaster`: owns the `Broadcaster<SharedEvent>`, makes recorders, and starts
/// watchers that record to sinks (each with its own EventCorrelator) or call a handler.
#[derive(Clone, Debug)]
pub struct EventBroadcaster {
    broadcaster: Broadcaster<SharedEvent>,
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
    pub fn broadcaster(&self) -> &Broadcaster<SharedEvent> {
        &self.broadcaster
    }

    /// client-go `NewRecorder`: a recorder reporting as `source`, timestamping with `clock`.
    pub fn new_recorder(&self, source: EventSource, clock: SharedClock) -> EventRecorder {
        EventRecorder::new(self.broadcaster.clone(), source, clock)
    }

    /// client-go `StartRecordingToSink`: a new watcher whose task runs every event through a
    /// **new** EventCorrelator (one tenant stage) and writes the result to `sink` with the retry
    /// policy, one write at a time as client-go. The task ends, returning its [`SinkStats`],
    /// when the watcher closes (shutdown or stop).
    ///
    /// # Errors
    /// [`BroadcasterError::Stopped`] after shutdown.
    pub fn start_recording_to_sink(&self, sink: Arc<dyn EventSink>) -> Result<JoinHandle<SinkStats>, BroadcasterError> {
        let plan = TenantPlan::single(PlannedTenant::fixed(DEFAULT_TENANT, self.options.correlator.clone(), sink));
        let (_keep, plans) = tokio::sync::watch::channel(Arc::new(plan));
        let options = RouterOptions { max_in_flight: 1, ..self.router_options() };
        let task = self.start_recording_to_tenants(plans, options)?;
        Ok(tokio::spawn(async move { task.await.map(|s| s.total).unwrap_or_default() }))
    }

    /// The router options this broadcaster's sink watchers get: its retry policy, clock and
    /// shutdown token; one partition.
    pub fn router_options(&self) -> RouterOptions {
        RouterOptions {
            retry: self.options.retry.clone(),
            cancel: self.cancel.clone(),
            clock: self.options.correlation_clock,
            ..RouterOptions::default()
        }
    }

    /// The tenant router watcher ([`crate::pipeline::router::record_to_tenants`]): each event goes to its
    /// tenant's stage and sinks, as the latest plan from `plans` says. Pass
    /// [`router_options`](Self::router_options), changed where needed (partitions, window,
    /// acknowledgements, live stats).
    ///
    /// # Errors
    /// [`BroadcasterError::Stopped`] after shutdown.
    pub fn start_recording_to_tenants(
        &self,
        plans: tokio::sync::watch::Receiver<Arc<TenantPlan>>,
        options: RouterOptions,
    ) -> Result<JoinHandle<RouterStats>, BroadcasterError> {
        let watcher = self.broadcaster.watch()?;
        Ok(tokio::spawn(record_to_tenants(watcher, plans, options)))
    }

    /// client-go `StartEventWatcher`: calls `handler` synchronously for every event (the
    /// Broadcaster's shared copy, as client-go hands its handler the shared pointer); a slow
    /// handler only backs up its own watcher's queue. Ends when the watcher closes.
    ///
    /// # Errors
    /// [`BroadcasterError::Stopped`] after shutdown.
    pub fn start_event_watcher<F>(&self, mut handler: F) -> Result<JoinHandle<()>, BroadcasterError>
    where
        F: FnMut(&Event) + Send + 'static,
    {
        let mut watcher = self.broadcaster.watch()?;
        let cancel = self.cancel.clone();
        Ok(tokio::spawn(async move {
            loop {
                tokio::select! {
                    biased;
                    _ = cancel.cancelled() => break,
                    next = watcher.recv() => match next {
                        Some(e) => handler(&e.object),
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
        self.start_event_watcher(move |e| logf(logging_line(e)))
    }

    /// client-go `StartStructuredLogging`: logs `"Event occurred"` at INFO with the key/value
    /// pairs of [`structured_logging_fields`].
    ///
    /// # Errors
    /// [`BroadcasterError::Stopped`] after shutdown.
    pub fn start_structured_logging(&self) -> Result<JoinHandle<()>, BroadcasterError> {
        self.start_event_watcher(|e| {
            let [object, field_path, kind, api_version, type_, reason, message] =
                structured_logging_fields(e).map(|(_, v)| v);
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
    let object = if io.namespace.is_empty() { io.name.to_string() } else { format!("{}/{}", io.namespace, io.name) };
    [
        ("object", object),
        ("fieldPath", io.field_path.to_string()),
        ("kind", io.kind.to_string()),
        ("apiVersion", io.api_version.to_string()),
        ("type", e.type_.to_string()),
        ("reason", e.reason.to_string()),
        ("message", e.message.to_string()),
    ]
}
