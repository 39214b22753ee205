//! The output stream of a sink plugin (WIT interface `eventpipe:plugin/output`, imported by the
//! `sink` world only: calling it from another kind of plugin makes the component import an
//! interface its world lacks, and the host rejects it).
//!
//! The host appends the bytes, in call order, to the destination its config names for this
//! sink (default: standard output) and flushes after each `deliver`/`deliver-batch` call.
//! Off wasm32 (native unit tests) writes succeed and go nowhere.

use alloc::string::String;

/// Appends `bytes` to the sink's destination.
///
/// # Errors
/// The host's message when it cannot take the bytes (destination closed, buffer full); fail
/// the request as [`SinkError::Retryable`](crate::SinkError::Retryable).
pub fn write(bytes: &[u8]) -> Result<(), String> {
    #[cfg(target_arch = "wasm32")]
    {
        crate::bindings::sink::eventpipe::plugin::output::write(bytes)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = bytes;
        Ok(())
    }
}
