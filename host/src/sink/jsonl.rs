//! A sink that writes each call as one JSON line: `{"verb":"create"|"patch","event":…,"patch":…}`.
//!
//! It stores nothing and echoes the event back, like client-go's test sink; the correlator's
//! `update_state` therefore sees exactly what was written.

use std::io::Write;
use std::sync::Mutex;

use async_trait::async_trait;
use serde::Serialize;

use super::retry::Verb;
use super::{EventSink, SinkError};
use crate::event::Event;

/// One line of the JSON-lines sink.
#[derive(Debug, Serialize)]
struct SinkCall<'a> {
    verb: Verb,
    event: &'a Event,
    /// The patch body as sent, embedded without re-serialising it.
    patch: Option<&'a serde_json::value::RawValue>,
}

/// Writes sink calls as JSON lines to any writer (a file, stdout), buffered.
///
/// # Errors
/// A failed write is a [`SinkError::Transport`] (retried by `recordToSink`). `update` is not part
/// of this sink's vocabulary and is refused as [`SinkError::RequestConstruction`].
pub struct JsonLinesSink {
    out: Mutex<std::io::BufWriter<Box<dyn Write + Send>>>,
}

impl JsonLinesSink {
    /// A sink writing to `out`.
    pub fn new(out: Box<dyn Write + Send>) -> Self {
        Self { out: Mutex::new(std::io::BufWriter::with_capacity(1 << 16, out)) }
    }

    /// Flushes buffered lines.
    ///
    /// # Errors
    /// The underlying writer's error.
    pub fn flush(&self) -> std::io::Result<()> {
        self.out.lock().unwrap_or_else(|p| p.into_inner()).flush()
    }

    fn write(&self, call: &SinkCall<'_>) -> Result<(), SinkError> {
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        serde_json::to_writer(&mut *out, call)
            .map_err(std::io::Error::from)
            .and_then(|()| out.write_all(b"\n"))
            .map_err(|e| SinkError::Transport(format!("jsonl sink: {e}")))
    }
}

#[async_trait]
impl EventSink for JsonLinesSink {
    async fn create(&self, event: &Event) -> Result<Event, SinkError> {
        self.write(&SinkCall { verb: Verb::Create, event, patch: None })?;
        Ok(event.clone())
    }

    async fn update(&self, _event: &Event) -> Result<Event, SinkError> {
        Err(SinkError::RequestConstruction("the jsonl sink records creates and patches only".into()))
    }

    async fn patch(&self, event: &Event, patch: &[u8]) -> Result<Event, SinkError> {
        let patch = if patch.is_empty() {
            None
        } else {
            Some(
                serde_json::from_slice::<&serde_json::value::RawValue>(patch)
                    .map_err(|e| SinkError::RequestConstruction(format!("patch is not JSON: {e}")))?,
            )
        };
        self.write(&SinkCall { verb: Verb::Patch, event, patch })?;
        Ok(event.clone())
    }
}
