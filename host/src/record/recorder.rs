//! EventRecorder: makes events and hands them to the Broadcaster without ever blocking
//! (client-go `tools/record` `recorderImpl`, spec §2.3).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::broadcaster::{Broadcaster, WatchEventType};
use crate::clock::{SharedClock, go_unix_nano};
use crate::event::{Event, EventSource, EventType, ObjectMeta, ObjectReference, SharedEvent};

pub use crate::event::{DNS1123_SUBDOMAIN_MAX_LENGTH, generate_event_name, is_dns1123_subdomain};

/// Why the recorder did not enqueue an event (each is logged and counted, never returned to the
/// caller, who must not block or fail because of events).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordOutcome {
    /// Accepted into the Broadcaster's incoming queue.
    Queued,
    /// `type` was not exactly `Normal` or `Warning` ("Unsupported event type").
    UnsupportedType,
    /// The incoming queue was full ("too many queued events, dropped event").
    QueueFull,
    /// The Broadcaster was shut down ("Unable to record event (will not retry!)").
    Stopped,
}

/// Counters of one recorder (shared by its clones).
#[derive(Debug, Default)]
pub struct RecorderStats {
    /// Events accepted into the Broadcaster.
    pub queued: AtomicU64,
    /// Events dropped because the incoming queue was full.
    pub dropped_queue_full: AtomicU64,
    /// Events dropped for an unsupported type.
    pub dropped_unsupported_type: AtomicU64,
    /// Events dropped because the Broadcaster was stopped.
    pub dropped_stopped: AtomicU64,
}

/// client-go `EventRecorder`: `event`, `eventf`, `annotated_eventf`. Cheap to clone; every call
/// is non-blocking (`ActionOrDrop`, client-go ≥ 1.21).
#[derive(Clone)]
pub struct EventRecorder {
    broadcaster: Broadcaster<SharedEvent>,
    source: EventSource,
    clock: SharedClock,
    stats: Arc<RecorderStats>,
}

impl fmt::Debug for EventRecorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventRecorder").field("source", &self.source).field("stats", &self.stats).finish()
    }
}

impl EventRecorder {
    /// A recorder that reports as `source` and timestamps with `clock`
    /// (client-go `EventBroadcaster.NewRecorder`).
    pub fn new(broadcaster: Broadcaster<SharedEvent>, source: EventSource, clock: SharedClock) -> Self {
        Self { broadcaster, source, clock, stats: Arc::default() }
    }

    /// Records an event about `object` (client-go `Event`). `type_` must be `"Normal"` or
    /// `"Warning"`; anything else is logged and dropped.
    pub fn event(&self, object: &ObjectReference, type_: &str, reason: &str, message: &str) -> RecordOutcome {
        self.generate_event(object, BTreeMap::new(), type_, reason, message.to_string())
    }

    /// [`event`](Self::event) with a formatted message (client-go `Eventf`; pass
    /// `format_args!("…", …)`).
    pub fn eventf(
        &self,
        object: &ObjectReference,
        type_: &str,
        reason: &str,
        message: fmt::Arguments<'_>,
    ) -> RecordOutcome {
        self.generate_event(object, BTreeMap::new(), type_, reason, message.to_string())
    }

    /// [`eventf`](Self::eventf) with `metadata.annotations` (client-go `AnnotatedEventf`).
    pub fn annotated_eventf(
        &self,
        object: &ObjectReference,
        annotations: BTreeMap<String, String>,
        type_: &str,
        reason: &str,
        message: fmt::Arguments<'_>,
    ) -> RecordOutcome {
        self.generate_event(object, annotations, type_, reason, message.to_string())
    }

    /// The recorder's counters.
    pub fn stats(&self) -> &RecorderStats {
        &self.stats
    }

    fn generate_event(
        &self,
        object: &ObjectReference,
        annotations: BTreeMap<String, String>,
        type_: &str,
        reason: &str,
        message: String,
    ) -> RecordOutcome {
        if EventType::parse(type_).is_none() {
            tracing::error!(r#type = type_, object = %object.name, "Unsupported event type");
            self.stats.dropped_unsupported_type.fetch_add(1, Ordering::Relaxed);
            return RecordOutcome::UnsupportedType;
        }
        let mut event = self.make_event(object, type_, reason, message);
        event.metadata.annotations = annotations.into();
        match self.broadcaster.action_or_drop(WatchEventType::Added, crate::event::shared(event)) {
            Ok(true) => {
                self.stats.queued.fetch_add(1, Ordering::Relaxed);
                RecordOutcome::Queued
            }
            Ok(false) => {
                tracing::error!(object = %object.name, reason, "too many queued events, dropped event");
                self.stats.dropped_queue_full.fetch_add(1, Ordering::Relaxed);
                RecordOutcome::QueueFull
            }
            Err(error) => {
                tracing::error!(object = %object.name, reason, %error, "Unable to record event (will not retry!)");
                self.stats.dropped_stopped.fetch_add(1, Ordering::Relaxed);
                RecordOutcome::Stopped
            }
        }
    }

    /// client-go `makeEvent` (without annotations) plus the source and reporting fields
    /// `generateEvent` sets.
    fn make_event(&self, object: &ObjectReference, type_: &str, reason: &str, message: String) -> Event {
        let t = self.clock.now();
        let namespace = if object.namespace.is_empty() { "default".into() } else { object.namespace.clone() };
        Event {
            metadata: ObjectMeta {
                name: generate_event_name(&object.name, go_unix_nano(t)).into(),
                namespace,
                ..ObjectMeta::default()
            },
            involved_object: object.clone(),
            reason: reason.into(),
            message: message.into(),
            source: self.source.clone(),
            first_timestamp: Some(t),
            last_timestamp: Some(t),
            count: 1,
            type_: type_.into(),
            reporting_component: self.source.component.clone(),
            reporting_instance: self.source.host.clone(),
            ..Event::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns1123_subdomain_rules() {
        assert!(is_dns1123_subdomain("test-pod.178959f726d80ec"));
        for bad in ["", ".178959f726d80ec", "test.POD.1", "a..b", "-a.b", "a-.b", "a_b", &"x".repeat(254)] {
            assert!(!is_dns1123_subdomain(bad), "{bad:?}");
        }
    }
}
