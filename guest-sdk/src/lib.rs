//! Write [eventpipe](https://github.com/eventpipe/eventpipe) plugins in Rust.
//!
//! A plugin is a WebAssembly component that exports one world of the WIT package
//! `eventpipe:plugin@0.1.0` (the repository's `wit/` directory). With this crate a plugin is a
//! type that implements one trait, plus one export macro:
//!
//! ```no_run
//! use eventpipe_guest::{Event, EventField, Filter, Verdict};
//!
//! #[derive(Default)]
//! struct DropNormal;
//!
//! impl Filter for DropNormal {
//!     fn fields(&self) -> Vec<EventField> {
//!         vec![EventField::Type]
//!     }
//!     fn filter(&self, _tenant: &str, event: &Event) -> Verdict {
//!         if event.type_ == "Normal" { Verdict::Drop(Some("normal event".into())) } else { Verdict::Keep }
//!     }
//! }
//!
//! eventpipe_guest::export_filter!(DropNormal);
//! ```
//!
//! Build it as a `cdylib` with `cargo build --target wasm32-wasip2 --release`: the output
//! `.wasm` is the component.
//!
//! | kind (WIT world)   | trait               | macro                    | sees                        |
//! |--------------------|---------------------|--------------------------|-----------------------------|
//! | `aggregate-key`    | [`AggregateKey`]    | [`export_aggregate_key!`]| [`EventView`] (key fields)  |
//! | `message-combiner` | [`MessageCombiner`] | [`export_message_combiner!`] | [`EventView`]           |
//! | `spam-key`         | [`SpamKey`]         | [`export_spam_key!`]     | [`EventView`]               |
//! | `filter-enriched`  | [`Filter`]          | [`export_filter!`]       | [`Event`] (declared fields), [`Enrichment`] |
//! | `sink`             | [`Sink`]            | [`export_sink!`]         | [`SinkRequest`]             |
//! | `watcher`          | [`Watcher`]         | [`export_watcher!`]      | [`Event`]                   |
//! | `encoder`          | [`Encoder`]         | [`export_encoder!`]      | [`EncoderWrite`]s           |
//!
//! The key and combiner kinds run on every event, so their batches cross the component
//! boundary packed ([`packed`]): the SDK decodes them into borrowed [`EventView`]s and collects
//! what your functions write through a [`KeyWriter`] into one buffer, so a batch costs a few
//! copies, not an allocation per string. They are built against the `*-projected` worlds:
//! `key_fields()` says which [`KeyField`]s your functions read (default: all 13), and the host
//! sends and memoizes by only those. The client-go functions are in [`defaults`].
//!
//! # Plugin values
//! Your type is built once per component instance, with [`Default::default`], on the first
//! call: read [`config`] there. Methods take `&self`; use `Cell`/`RefCell` for state (an
//! instance is single-threaded and never re-entered).
//!
//! # Imports
//! [`log`] (structured logging into the host's `tracing`), [`config`] (the plugin's key/value
//! config) and, for sinks only, [`output`]. There is no filesystem, network or clock.
//!
//! # `std` or `no_std`
//! Rust's `std` makes a component import the WASI CLI interfaces (stdio, environment, exit).
//! eventpipe links no WASI, so it refuses such a component at load, naming the import. Make
//! the crate `no_std` on wasm and install the SDK runtime (allocator, panic handler that logs
//! the panic, `cabi_realloc`); the component then imports exactly its world:
//!
//! ```ignore
//! #![cfg_attr(target_arch = "wasm32", no_std)]
//! use eventpipe_guest::prelude::*; // String, Vec, format!, … from `alloc`
//! eventpipe_guest::no_std_runtime!();
//! ```
//!
//! Off wasm32 (native unit tests) the imports are inert: logs are discarded, the config is
//! empty and output writes succeed without going anywhere.
#![cfg_attr(not(test), no_std)]

extern crate alloc;
// Generated bindings name this crate by its external name, also from inside it.
extern crate self as eventpipe_guest;

#[doc(hidden)]
pub mod bindings;
pub mod config;
pub mod defaults;
mod export;
pub mod json;
pub mod log;
pub mod output;
pub mod packed;
pub mod prelude;
pub mod projection;
mod runtime;

use alloc::string::String;
use alloc::vec::Vec;

pub use bindings::plugin::eventpipe::plugin::types::{
    AggregateKeyPair, EncodedRequest, EncoderWrite, EnrichmentField, Event, EventField, EventSeries, EventSource,
    ObjectMeta, ObjectReference, PackedStrings, PatchRequest, SinkError, SinkRequest, StringMap, Verdict,
};
pub use packed::{EventView, KeyField, KeyWriter};
pub use projection::Enrichment;

/// An aggregate-key function (world `aggregate-key-projected`, client-go `EventAggregatorKeyFunc`).
/// Export with [`export_aggregate_key!`]. Default: [`defaults::ByReason`].
///
/// Both keys must be pure functions of the event's key fields: the host calls them in
/// batches, ahead of each event's turn.
pub trait AggregateKey: Default + 'static {
    /// The key fields this function reads: the host fills only these in each batch (the
    /// others are `""` in the [`EventView`]) and remembers answers by them alone, so a memo
    /// hit needs only these to repeat. Default: [`KeyField::ALL`] (correct for any function,
    /// but then every field, the message too, must repeat for a memo hit).
    fn key_fields(&self) -> Vec<KeyField> {
        KeyField::ALL.to_vec()
    }

    /// Appends the aggregate key of `event` to `key`: events with equal aggregate keys are
    /// "similar".
    fn aggregate_key(&self, event: &EventView<'_>, key: &mut KeyWriter<'_>);

    /// Appends the local key of `event` to `key`: distinct local keys within one aggregate key
    /// count towards aggregation. Default: the message, as client-go.
    fn local_key(&self, event: &EventView<'_>, key: &mut KeyWriter<'_>) {
        key.push_str(event.message);
    }

    /// `Some(field)` when [`local_key`](Self::local_key) is always exactly that field as it is
    /// and [`aggregate_key`](Self::aggregate_key) never reads it (client-go's by-reason:
    /// [`KeyField::Message`]). The host then takes the local key from each event itself, leaves
    /// the field out of the batches (`""` in the [`EventView`]) and remembers aggregate keys by
    /// the other fields, so events that differ only in that field share one answer. Default:
    /// `None` (the local key is what `local_key` writes); a wrong `Some` gives wrong keys.
    fn local_key_field(&self) -> Option<KeyField> {
        None
    }
}

/// A message combiner (world `message-combiner-projected`, client-go `EventAggregatorMessageFunc`).
/// Export with [`export_message_combiner!`]. Default: [`defaults::SimilarEvents`].
pub trait MessageCombiner: Default + 'static {
    /// The key fields this function reads: the host fills only these in each batch (the
    /// others are `""` in the [`EventView`]) and remembers answers by them alone, so a memo
    /// hit needs only these to repeat. Default: [`KeyField::ALL`] (correct for any function,
    /// but then every field, the message too, must repeat for a memo hit).
    fn key_fields(&self) -> Vec<KeyField> {
        KeyField::ALL.to_vec()
    }

    /// Appends the message of the aggregate event that replaces events similar to `event`.
    fn combine_message(&self, event: &EventView<'_>, message: &mut KeyWriter<'_>);
}

/// A spam key function (world `spam-key-projected`, client-go `EventSpamKeyFunc`): events with equal
/// keys share one token bucket. Export with [`export_spam_key!`]. Default:
/// [`defaults::SourceObject`].
pub trait SpamKey: Default + 'static {
    /// The key fields this function reads: the host fills only these in each batch (the
    /// others are `""` in the [`EventView`]) and remembers answers by them alone, so a memo
    /// hit needs only these to repeat. Default: [`KeyField::ALL`] (correct for any function,
    /// but then every field, the message too, must repeat for a memo hit).
    fn key_fields(&self) -> Vec<KeyField> {
        KeyField::ALL.to_vec()
    }

    /// Appends the spam key of `event` to `key`.
    fn spam_key(&self, event: &EventView<'_>, key: &mut KeyWriter<'_>);
}

/// A filter (world `filter-enriched`, a `filter` that may also read each event's
/// enrichment): keeps or drops events before correlation. Export with [`export_filter!`].
///
/// The host sends a filter only the fields it reads ([`Filter::fields`], packed: see
/// [`projection`]); on that path every other field of the [`Event`] that
/// [`Filter::filter`] gets is empty (`""`, `0`, `None`, no labels). List what you read:
///
/// ```
/// # use eventpipe_guest::{Event, EventField, Filter, Verdict};
/// # #[derive(Default)] struct DropNormal;
/// impl Filter for DropNormal {
///     fn fields(&self) -> Vec<EventField> {
///         vec![EventField::Type]
///     }
///     fn filter(&self, _tenant: &str, event: &Event) -> Verdict {
///         if event.type_ == "Normal" { Verdict::Drop(None) } else { Verdict::Keep }
///     }
/// }
/// ```
pub trait Filter: Default + 'static {
    /// The fields [`Filter::filter`] reads, asked once per plugin version and config: the
    /// host packs only these. May depend on the config (e.g. `EventField::Label(key)` with a
    /// key from it). Default: [`projection::every_field`] (every field but labels and
    /// annotations) — correct for any filter, but each event then costs every string.
    fn fields(&self) -> Vec<EventField> {
        projection::every_field()
    }

    /// The verdict for one event. `tenant` names the tenant whose rules matched the event
    /// (`""` when none did and the defaults apply).
    fn filter(&self, tenant: &str, event: &Event) -> Verdict;

    /// The enrichment fields [`Filter::filter_enriched`] reads (the involved object's labels
    /// and annotations, its top owner, its node, the cluster: `wit/types.wit`
    /// `enrichment-field`), asked with [`Filter::fields`] and under its rules (at most 64 in
    /// all). Default: none, and [`Filter::filter`] decides alone.
    ///
    /// ```
    /// # use eventpipe_guest::{Enrichment, EnrichmentField, Event, EventField, Filter, Verdict};
    /// # #[derive(Default)] struct PaymentsOnly;
    /// impl Filter for PaymentsOnly {
    ///     fn fields(&self) -> Vec<EventField> {
    ///         vec![]
    ///     }
    ///     fn enrichment_fields(&self) -> Vec<EnrichmentField> {
    ///         vec![EnrichmentField::ObjectLabel("team".into())]
    ///     }
    ///     fn filter_enriched(&self, _tenant: &str, _event: &Event, enrichment: &Enrichment<'_>) -> Verdict {
    ///         match enrichment.get(&EnrichmentField::ObjectLabel("team".into())) {
    ///             "payments" => Verdict::Keep,
    ///             _ => Verdict::Drop(Some("not the payments team's".into())),
    ///         }
    ///     }
    ///     fn filter(&self, tenant: &str, event: &Event) -> Verdict {
    ///         self.filter_enriched(tenant, event, &Enrichment::none())
    ///     }
    /// }
    /// ```
    fn enrichment_fields(&self) -> Vec<EnrichmentField> {
        Vec::new()
    }

    /// The verdict for one event of a batch, with the values of the declared
    /// [`Filter::enrichment_fields`] (`""` for each the host found nothing of, or when
    /// enrichment is off). Default: [`Filter::filter`]. The single-event `filter` export (for
    /// tools) carries no enrichment and calls [`Filter::filter`].
    fn filter_enriched(&self, tenant: &str, event: &Event, enrichment: &Enrichment<'_>) -> Verdict {
        let _ = enrichment;
        self.filter(tenant, event)
    }
}

/// An event sink (world `sink`, client-go `EventSink`). Export with [`export_sink!`]. Write
/// what you format with [`output::write`]; the host delivers it.
pub trait Sink: Default + 'static {
    /// Performs one request. `Ok` carries the event as stored (usually the request's event:
    /// the host remembers its name, resourceVersion, count and firstTimestamp).
    ///
    /// # Errors
    /// [`SinkError::Retryable`] (the host retries later), [`SinkError::Permanent`] (dropped),
    /// [`SinkError::NotFound`] (a patch's target is missing: the host creates instead).
    fn deliver(&self, tenant: &str, request: SinkRequest) -> Result<Event, SinkError>;

    /// Performs a batch of requests in order: exactly one result per request. Default:
    /// [`Sink::deliver`] on each.
    fn deliver_batch(&self, tenant: &str, requests: Vec<SinkRequest>) -> Vec<Result<Event, SinkError>> {
        requests.into_iter().map(|r| self.deliver(tenant, r)).collect()
    }
}

/// A watcher on the Broadcaster (world `watcher`): sees every event, before correlation.
/// Export with [`export_watcher!`].
pub trait Watcher: Default + 'static {
    /// Receives one event.
    fn watch(&self, event: &Event);

    /// Receives a batch of events in broadcast order. Default: [`Watcher::watch`] on each.
    fn watch_batch(&self, events: &[Event]) {
        for event in events {
            self.watch(event);
        }
    }
}

/// An encoder (world `encoder`): turns a batch of writes into the one HTTP request the host's
/// webhook sink sends for it (`webhook:URL,encoder=NAME`): body, `Content-Type` and headers. The
/// host does all delivery (queue, batching, retries, order); an encoder has no network. Export
/// with [`export_encoder!`].
pub trait Encoder: Default + 'static {
    /// The request for `writes` of `tenant`, in call order: each a create or a patch
    /// ([`EncoderWrite::request`], [`SinkRequest::event`]) and the event's enrichment as JSON
    /// (`""` without). A batch holds up to the sink's `max_batch` writes.
    ///
    /// # Errors
    /// A message when the batch cannot be encoded: the host fails its writes for good, counts
    /// them and logs the message with the events' names.
    fn encode(&self, tenant: &str, writes: &[EncoderWrite]) -> Result<EncodedRequest, String>;
}

impl EncodedRequest {
    /// A `Content-Type: application/json` request with `body` and no other header.
    pub fn json(body: Vec<u8>) -> Self {
        Self { content_type: String::new(), headers: Vec::new(), body }
    }
}

impl SinkRequest {
    /// The event of the request (created or patched).
    pub fn event(&self) -> &Event {
        match self {
            SinkRequest::Create(event) => event,
            SinkRequest::Patch(patch) => &patch.event,
        }
    }

    /// The event of the request, by value.
    pub fn into_event(self) -> Event {
        match self {
            SinkRequest::Create(event) => event,
            SinkRequest::Patch(patch) => patch.event,
        }
    }
}

#[doc(hidden)]
pub mod __private {
    pub use crate::export::{Export, Instance, PluginCell};
    pub use crate::runtime::{cabi_realloc, panic};
    #[cfg(target_arch = "wasm32")]
    pub use talc;
    pub use wit_bindgen;
}
