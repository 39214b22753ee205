//! A sink plugin: each create / patch is one `deliver-batch` call; what the plugin writes through
//! its `output` import goes to the destination the host gives it. `crate::sink::plugin` makes it
//! an `EventSink`.

use std::io::Write;
use std::sync::{Arc, Mutex};

use super::bindings as wit;
use super::call::Caller;
use super::convert::{describe, from_wit, to_wit};
use super::{PluginHandle, PluginKind};
use super::{WrongKind, check_kind};
use crate::event::Event;

/// The `deliver-batch` export.
pub(crate) type DeliverBatch = Caller<(String, Vec<wit::SinkRequest>), (Vec<Result<wit::Event, wit::SinkError>>,)>;

/// Why a sink plugin did not store an event: the plugin's own answer, or a failed call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliverError {
    /// The plugin answered `retryable`: try again later.
    Retryable(String),
    /// The plugin answered `permanent`: this event can never be stored.
    Permanent(String),
    /// The plugin answered `not-found` (a patch whose target is gone: client-go's 404 path).
    NotFound(String),
    /// The call failed (trap, fuel, memory limit); the instance is replaced for the next call.
    Failed(String),
    /// The plugin answered garbage: not one result for one request.
    Garbage(String),
}

/// A `sink` plugin as one tenant uses it.
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

    /// The plugin as used here (name, tenant, counters).
    pub fn handle(&self) -> &PluginHandle {
        self.deliver.handle()
    }

    /// `create` of `event` in one `deliver-batch` call; the plugin's copy of the event.
    ///
    /// # Errors
    /// [`DeliverError`]: the plugin's answer, or a failed call.
    pub fn create(&self, event: &Event) -> Result<Event, DeliverError> {
        self.deliver(wit::SinkRequest::Create(to_wit(event)), event)
    }

    /// `patch` of `event` (strategic-merge `patch` body) in one `deliver-batch` call.
    ///
    /// # Errors
    /// [`DeliverError`]: the plugin's answer, or a failed call.
    pub fn patch(&self, event: &Event, patch: &[u8]) -> Result<Event, DeliverError> {
        self.deliver(wit::SinkRequest::Patch(wit::PatchRequest { event: to_wit(event), body: patch.to_vec() }), event)
    }

    fn deliver(&self, request: wit::SinkRequest, event: &Event) -> Result<Event, DeliverError> {
        let answer = self.deliver.call((self.tenant.clone(), vec![request]), 1);
        let mut results = match answer {
            Ok(((results,), _cost)) => results,
            Err(failure) => return Err(DeliverError::Failed(self.deliver.error(describe(event), failure).to_string())),
        };
        match (results.pop(), results.is_empty()) {
            (Some(Ok(stored)), true) => Ok(from_wit(stored, event)),
            (Some(Err(wit::SinkError::Retryable(m))), true) => Err(DeliverError::Retryable(m)),
            (Some(Err(wit::SinkError::Permanent(m))), true) => Err(DeliverError::Permanent(m)),
            (Some(Err(wit::SinkError::NotFound(m))), true) => Err(DeliverError::NotFound(m)),
            (last, _) => {
                let answered = results.len() + usize::from(last.is_some());
                let failure = super::CallFailure::Garbage(format!("{answered} results for 1 request"));
                Err(DeliverError::Garbage(self.deliver.error(describe(event), failure).to_string()))
            }
        }
    }
}
