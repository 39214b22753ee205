//! A sink plugin as an [`EventSink`]: each create / patch is one `deliver-batch` call; what the
//! plugin writes through its `output` import goes to the destination the host gives it.

use std::io::Write;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::bindings as wit;
use super::call::Caller;
use super::convert::{describe, from_wit, to_wit};
use super::functions::{WrongKind, check_kind};
use super::{PluginHandle, PluginKind};
use crate::event::Event;
use crate::sink::{EventSink, SinkError, StatusError};

/// The `deliver-batch` export.
pub(crate) type DeliverBatch = Caller<(String, Vec<wit::SinkRequest>), (Vec<Result<wit::Event, wit::SinkError>>,)>;

/// An `EventSink` backed by a `sink` plugin.
///
/// Error classes: the plugin's `retryable` → retried, `permanent` → dropped, `not-found` on a
/// patch → create (client-go's 404 path); a failed call (trap, fuel, memory, garbage) is retried
/// like a transport error, on a fresh instance.
pub struct WasmSink {
    deliver: DeliverBatch,
    tenant: String,
    out: Arc<Mutex<Box<dyn Write + Send>>>,
}

impl WasmSink {
    /// Wraps `handle` (a `sink` plugin as one tenant uses it); its `output` bytes go to `out`.
    ///
    /// # Errors
    /// [`WrongKind`] for a plugin of another kind.
    pub fn new(handle: PluginHandle, out: Box<dyn Write + Send>) -> Result<Self, WrongKind> {
        check_kind(&handle, PluginKind::Sink)?;
        let tenant = handle.tenant().to_string();
        let out = Arc::new(Mutex::new(out));
        let writer = out.clone();
        let output: super::state::OutputFn = Arc::new(move |bytes: &[u8]| {
            writer.lock().unwrap_or_else(|p| p.into_inner()).write_all(bytes).map_err(|e| e.to_string())
        });
        let deliver = Caller::new(handle, PluginKind::Sink.batch_export(), Some(output));
        Ok(Self { deliver, tenant, out })
    }

    /// Flushes what the plugin wrote.
    ///
    /// # Errors
    /// The destination's I/O error.
    pub fn flush(&self) -> std::io::Result<()> {
        self.out.lock().unwrap_or_else(|p| p.into_inner()).flush()
    }

    fn deliver(&self, request: wit::SinkRequest, event: &Event) -> Result<Event, SinkError> {
        let answer = self.deliver.call((self.tenant.clone(), vec![request]), 1);
        let mut results = match answer {
            Ok(((results,), _cost)) => results,
            Err(failure) => return Err(SinkError::Transport(self.deliver.error(describe(event), failure).to_string())),
        };
        match (results.pop(), results.is_empty()) {
            (Some(Ok(stored)), true) => Ok(from_wit(stored, event)),
            (Some(Err(wit::SinkError::Retryable(m))), true) => Err(SinkError::Transport(m)),
            (Some(Err(wit::SinkError::Permanent(m))), true) => Err(SinkError::RequestConstruction(m)),
            (Some(Err(wit::SinkError::NotFound(m))), true) => Err(SinkError::Status(StatusError {
                code: 404,
                reason: "NotFound".into(),
                message: m,
                causes: Vec::new(),
            })),
            _ => Err(SinkError::Transport(format!(
                "sink plugin `{}` answered {} results for 1 request",
                self.deliver.handle().name(),
                results.len() + 1
            ))),
        }
    }
}

#[async_trait]
impl EventSink for WasmSink {
    async fn create(&self, event: &Event) -> Result<Event, SinkError> {
        self.deliver(wit::SinkRequest::Create(to_wit(event)), event)
    }

    async fn update(&self, _event: &Event) -> Result<Event, SinkError> {
        Err(SinkError::RequestConstruction("the sink world has no update".into()))
    }

    async fn patch(&self, event: &Event, patch: &[u8]) -> Result<Event, SinkError> {
        self.deliver(wit::SinkRequest::Patch(wit::PatchRequest { event: to_wit(event), body: patch.to_vec() }), event)
    }
}
