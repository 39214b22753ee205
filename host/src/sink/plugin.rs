//! A `sink` plugin as an [`EventSink`].
//!
//! Error classes: only the plugin's `retryable` follows client-go's retry policy (as a
//! transport error); `permanent`, an answer that is not one result per request (garbage) and a
//! failed call (trap, fuel, memory limit: deterministic for the same event, so a retry would
//! fail again) drop the event at once ([`SinkError::Refused`], counted per reason, logged with
//! the plugin, tenant and event); `not-found` on a patch → create (client-go's 404 path). Other
//! events keep flowing meanwhile: the router's in-flight window never waits on one event.

use async_trait::async_trait;

use super::{EventSink, SinkError, StatusError, Stored};
use crate::event::Event;
use crate::plugin::sink::{DeliverError, WasmSink};

/// A sink plugin behind the [`EventSink`] trait.
pub struct PluginSink(pub WasmSink);

impl PluginSink {
    /// Flushes what the plugin wrote.
    ///
    /// # Errors
    /// The destination's I/O error.
    pub fn flush(&self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl From<DeliverError> for SinkError {
    fn from(error: DeliverError) -> Self {
        match error {
            DeliverError::Retryable(m) => SinkError::Transport(m),
            DeliverError::Permanent(message) => SinkError::Refused { reason: "Permanent", message },
            DeliverError::Garbage(message) => SinkError::Refused { reason: "PluginGarbage", message },
            DeliverError::Failed(message) => SinkError::Refused { reason: "PluginFailed", message },
            DeliverError::NotFound(message) => {
                SinkError::Status(StatusError { code: 404, reason: "NotFound".into(), message, causes: Vec::new() })
            }
        }
    }
}

#[async_trait]
impl EventSink for PluginSink {
    async fn create(&self, event: &Event) -> Result<Stored, SinkError> {
        self.0.create(event).map(Stored::copy).map_err(SinkError::from)
    }

    async fn update(&self, _event: &Event) -> Result<Stored, SinkError> {
        Err(SinkError::RequestConstruction("the sink world has no update".into()))
    }

    async fn patch(&self, event: &Event, patch: &[u8]) -> Result<Stored, SinkError> {
        self.0.patch(event, patch).map(Stored::copy).map_err(SinkError::from)
    }
}
