//! An `encoder` plugin: one `encode` call per batch of a webhook's writes, answering the
//! request the host sends (body, content type, headers). `crate::sink::encoder` makes it the
//! webhook's encoding (`webhook:URL,encoder=NAME`).
//!
//! A failed call (trap, fuel, memory, the plugin's own `err`) fails the batch: the sink fails its
//! writes for good with the error, which names plugin, tenant and the batch's first event.

use super::bindings as wit;
use super::call::Caller;
use super::convert::{describe, to_wit};
use super::{PluginCallError, PluginHandle, PluginKind};
use super::{WrongKind, check_kind};
use crate::event::Event;

/// The `encode` export: tenant, writes → the request, or the plugin's error.
type Encode = Caller<(String, Vec<wit::EncoderWrite>), (Result<wit::EncodedRequest, String>,)>;

/// One write as the encoder gets it: the event, its patch body (`None`: a create) and its
/// enrichment as JSON (`""` without).
#[derive(Debug, Clone, Copy)]
pub struct Write<'a> {
    /// The event after correlation.
    pub event: &'a Event,
    /// A patch's body (`Some`, possibly empty), or `None` for a create.
    pub patch: Option<&'a [u8]>,
    /// The enrichment, one line of compact JSON, or `""`.
    pub enrichment: &'a str,
}

/// An `encoder` plugin as one tenant's webhook uses it.
pub struct WasmEncoder {
    call: Encode,
}

impl WasmEncoder {
    /// Wraps `handle` (an `encoder` plugin).
    ///
    /// # Errors
    /// [`WrongKind`] for a plugin of another kind.
    pub fn new(handle: PluginHandle) -> Result<Self, WrongKind> {
        check_kind(&handle, PluginKind::Encoder)?;
        Ok(Self { call: Caller::new(handle, PluginKind::Encoder.batch_export(), None) })
    }

    /// The plugin as used here (name, tenant, counters).
    pub fn handle(&self) -> &PluginHandle {
        self.call.handle()
    }

    /// The request for `writes`, in order (fuel: the per-event budget times the writes).
    ///
    /// # Errors
    /// [`PluginCallError`] naming plugin, kind, tenant and the batch's first event when the call
    /// fails (trap, fuel, memory limit) or the plugin answers `err` (a guest error).
    pub fn encode(&self, writes: &[Write<'_>]) -> Result<wit::EncodedRequest, PluginCallError> {
        let tenant = self.handle().tenant().to_string();
        let lowered = writes
            .iter()
            .map(|w| wit::EncoderWrite {
                request: match w.patch {
                    None => wit::SinkRequest::Create(to_wit(w.event)),
                    Some(body) => {
                        wit::SinkRequest::Patch(wit::PatchRequest { event: to_wit(w.event), body: body.to_vec() })
                    }
                },
                enrichment: w.enrichment.to_string(),
            })
            .collect();
        let failed = |failure| {
            let first = writes.first().map_or_else(|| "an empty batch".to_string(), |w| describe(w.event));
            self.call.error(format!("{first} (first of a batch of {})", writes.len()), failure)
        };
        match self.call.call((tenant, lowered), writes.len().max(1)) {
            Ok(((Ok(request),), _)) => Ok(request),
            Ok(((Err(message),), _)) => Err(failed(super::CallFailure::GuestError(message))),
            Err(failure) => Err(failed(failure)),
        }
    }
}
