//! `use eventpipe_guest::prelude::*;` brings the SDK's traits and types and, for `no_std`
//! plugins, the `alloc` items `std`'s prelude would give (`String`, `Vec`, `format!`, …).

pub use crate::{
    AggregateKey, EncodedRequest, Encoder, EncoderWrite, Enrichment, EnrichmentField, Event, EventField, EventView,
    Filter, KeyField, KeyWriter, MessageCombiner, Sink, SinkError, SinkRequest, SpamKey, Verdict, Watcher, config,
    defaults, log,
};
pub use alloc::borrow::ToOwned;
pub use alloc::boxed::Box;
pub use alloc::string::{String, ToString};
pub use alloc::vec::Vec;
pub use alloc::{format, vec};
