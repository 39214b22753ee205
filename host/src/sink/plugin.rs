//! A `sink` plugin as an [`EventSink`].
//!
//! Error classes: the plugin's `retryable` → retried, `permanent` → dropped, `not-found` on a
//! patch → create (client-go's 404 path); a failed call (trap, fuel, memory, garbage) is retried
//! like a transport error, on a fresh instance.

use async_trait::async_trait;

use super::{EventSink, SinkError, StatusError};
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
            DeliverError::Retryable(m) | DeliverError::Failed(m) => SinkError::Transport(m),
            DeliverError::Permanent(m) => SinkError::RequestConstruction(m),
            DeliverError::NotFound(message) => {
                SinkError::Status(StatusError { code: 404, reason: "NotFound".into(), message, causes: Vec::new() })
            }
        }
    }
}

#[async_trait]
impl EventSink for PluginSink {
    async fn create(&self, event: &Event) -> Result<Event, SinkError> {
        self.0.create(event).map_err(SinkError::from)
    }

    async fn update(&self, _event: &Event) -> Result<Event, SinkError> {
        Err(SinkError::RequestConstruction("the sink world has no update".into()))
    }

    async fn patch(&self, event: &Event, patch: &[u8]) -> Result<Event, SinkError> {
        self.0.patch(event, patch).map_err(SinkError::from)
    }
}
