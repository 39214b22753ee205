//! The sink of a hot standby (`run --leader-elect` while another replica leads): every call
//! succeeds at once and sends nothing, storing the event as sent — what a sink that stores
//! nothing of its own (JSON lines, a webhook) returns after a successful write. The standby's
//! correlator therefore takes the same `update_state` steps as the leader's does when its
//! writes succeed, so its state follows the leader's while it writes nothing.

use async_trait::async_trait;

use super::{EventSink, SinkError, SinkPatch, Stored};
use crate::event::Event;

/// Stands in for every sink of a hot standby: writes nothing, acknowledges every call.
#[derive(Debug, Default)]
pub struct StandbySink;

#[async_trait]
impl EventSink for StandbySink {
    async fn create(&self, _event: &Event) -> Result<Stored, SinkError> {
        Ok(Stored::AsSent)
    }

    async fn update(&self, _event: &Event) -> Result<Stored, SinkError> {
        Ok(Stored::AsSent)
    }

    async fn patch(&self, _event: &Event, _patch: &[u8]) -> Result<Stored, SinkError> {
        Ok(Stored::AsSent)
    }

    async fn patch_observed(&self, _event: &Event, _patch: SinkPatch<'_>) -> Result<Stored, SinkError> {
        Ok(Stored::AsSent) // not serialised: nothing is sent
    }
}
