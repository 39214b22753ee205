//! The glue between the generated `Guest` traits and the SDK's plugin traits, and the
//! `export_*!` macros.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::cell::OnceCell;
use core::marker::PhantomData;

use crate::bindings::{aggregate_key, encoder, filter, message_combiner, sink, spam_key, watcher};
use crate::packed::{KeyField, KeyFieldsBatch, KeyWriter, StringPacker};
use crate::projection::ProjectedBatch;
use crate::{
    AggregateKey, AggregateKeyPair, EncodedRequest, Encoder, EncoderWrite, EnrichmentField, Event, EventField,
    EventView, Filter, MessageCombiner, PackedStrings, Sink, SinkError, SinkRequest, SpamKey, Verdict, Watcher,
};

/// Gives the exported functions the plugin value. Implemented by the `export_*!` macros.
pub trait Instance: 'static {
    /// The plugin type.
    type Plugin: Default + 'static;
    /// Runs `f` on the plugin value (built on first use).
    fn with<R>(f: impl FnOnce(&Self::Plugin) -> R) -> R;
}

/// Holds the plugin value of a component instance, built on first use.
pub struct PluginCell<T>(OnceCell<T>);

// SAFETY: a `wasm32` component instance without the `atomics` feature has exactly one
// thread, and the component model never re-enters an instance while an export runs, so the
// cell is never accessed concurrently. Elsewhere the macros build a fresh value per call.
#[cfg(all(target_arch = "wasm32", not(target_feature = "atomics")))]
unsafe impl<T> Sync for PluginCell<T> {}

impl<T: Default> PluginCell<T> {
    /// An empty cell.
    #[allow(clippy::new_without_default)]
    pub const fn new() -> Self {
        Self(OnceCell::new())
    }

    /// The value, built with `T::default()` on first use.
    pub fn get(&self) -> &T {
        self.0.get_or_init(T::default)
    }
}

/// Implements every generated `Guest` trait whose SDK trait `I::Plugin` implements.
pub struct Export<I>(PhantomData<I>);

/// Runs a batch of key-fields events through `write`, which adds `per_event` strings each.
fn key_batch(
    events: &PackedStrings,
    per_event: usize,
    mut write: impl FnMut(&EventView<'_>, &mut StringPacker) -> Result<(), crate::packed::PackError>,
) -> Result<PackedStrings, String> {
    let batch = KeyFieldsBatch::from_packed(events).map_err(|e| e.to_string())?;
    let mut out = StringPacker::with_capacity(events.bytes.len(), per_event * batch.len());
    for event in batch.iter() {
        write(&event, &mut out).map_err(|e| e.to_string())?;
    }
    Ok(out.finish())
}

/// Key fields as their indices in a key-fields batch (`key-fields`).
fn wire(fields: Vec<KeyField>) -> Vec<u8> {
    fields.into_iter().map(|f| f as u8).collect()
}

fn one_string(write: impl FnOnce(&mut KeyWriter<'_>)) -> String {
    let mut s = String::new();
    write(&mut KeyWriter::new(&mut s));
    s
}

impl<I: Instance> aggregate_key::Guest for Export<I>
where
    I::Plugin: AggregateKey,
{
    fn aggregate_key(event: Event) -> AggregateKeyPair {
        I::with(|p| {
            let view = EventView::from(&event);
            AggregateKeyPair {
                aggregate: one_string(|w| p.aggregate_key(&view, w)),
                local: one_string(|w| p.local_key(&view, w)),
            }
        })
    }

    fn key_fields() -> Vec<u8> {
        I::with(|p| wire(p.key_fields()))
    }

    fn local_key_field() -> Option<u8> {
        I::with(|p| p.local_key_field().map(|f| f as u8))
    }

    fn aggregate_key_batch(events: PackedStrings) -> Result<PackedStrings, String> {
        I::with(|p| {
            key_batch(&events, 2, |e, out| {
                out.push_with(|w| p.aggregate_key(e, w))?;
                out.push_with(|w| p.local_key(e, w))
            })
        })
    }
}

impl<I: Instance> message_combiner::Guest for Export<I>
where
    I::Plugin: MessageCombiner,
{
    fn combine_message(event: Event) -> String {
        I::with(|p| one_string(|w| p.combine_message(&EventView::from(&event), w)))
    }

    fn key_fields() -> Vec<u8> {
        I::with(|p| wire(p.key_fields()))
    }

    fn combine_message_batch(events: PackedStrings) -> Result<PackedStrings, String> {
        I::with(|p| key_batch(&events, 1, |e, out| out.push_with(|w| p.combine_message(e, w))))
    }
}

impl<I: Instance> spam_key::Guest for Export<I>
where
    I::Plugin: SpamKey,
{
    fn spam_key(event: Event) -> String {
        I::with(|p| one_string(|w| p.spam_key(&EventView::from(&event), w)))
    }

    fn key_fields() -> Vec<u8> {
        I::with(|p| wire(p.key_fields()))
    }

    fn spam_key_batch(events: PackedStrings) -> Result<PackedStrings, String> {
        I::with(|p| key_batch(&events, 1, |e, out| out.push_with(|w| p.spam_key(e, w))))
    }
}

impl<I: Instance> filter::Guest for Export<I>
where
    I::Plugin: Filter,
{
    fn filter(tenant: String, event: Event) -> Verdict {
        I::with(|p| p.filter(&tenant, &event))
    }

    fn fields() -> Vec<EventField> {
        I::with(|p| p.fields())
    }

    fn enrichment_fields() -> Vec<EnrichmentField> {
        I::with(|p| p.enrichment_fields())
    }

    /// Traps (a panic the host reports as the plugin's failure) on a batch that breaks the
    /// projection's rules: the host never sends one.
    fn filter_batch(tenant: String, count: u32, events: PackedStrings) -> Vec<Verdict> {
        I::with(|p| {
            let (fields, enrichment) = (p.fields(), p.enrichment_fields());
            let batch = match ProjectedBatch::new(&events, count as usize, &fields, &enrichment) {
                Ok(batch) => batch,
                Err(e) => panic!("malformed projected batch: {e}"),
            };
            let mut verdicts = Vec::with_capacity(batch.len());
            batch.for_each(|event, enriched| verdicts.push(p.filter_enriched(&tenant, event, enriched)));
            verdicts
        })
    }
}

impl<I: Instance> sink::Guest for Export<I>
where
    I::Plugin: Sink,
{
    fn deliver(tenant: String, request: SinkRequest) -> Result<Event, SinkError> {
        I::with(|p| p.deliver(&tenant, request))
    }

    fn deliver_batch(tenant: String, requests: Vec<SinkRequest>) -> Vec<Result<Event, SinkError>> {
        I::with(|p| p.deliver_batch(&tenant, requests))
    }
}

impl<I: Instance> watcher::Guest for Export<I>
where
    I::Plugin: Watcher,
{
    fn watch(event: Event) {
        I::with(|p| p.watch(&event))
    }

    fn watch_batch(events: Vec<Event>) {
        I::with(|p| p.watch_batch(&events))
    }
}

impl<I: Instance> encoder::Guest for Export<I>
where
    I::Plugin: Encoder,
{
    fn encode(tenant: String, writes: Vec<EncoderWrite>) -> Result<EncodedRequest, String> {
        I::with(|p| p.encode(&tenant, &writes))
    }
}

/// Expands the generated export macro of `$world` for `$plugin` (shared by the `export_*!`
/// macros).
#[doc(hidden)]
#[macro_export]
macro_rules! __export_plugin {
    ($plugin:ty, $world:ident) => {
        const _: () = {
            struct __EventpipeInstance;
            impl $crate::__private::Instance for __EventpipeInstance {
                type Plugin = $plugin;
                #[inline]
                fn with<R>(f: impl ::core::ops::FnOnce(&$plugin) -> R) -> R {
                    #[cfg(target_arch = "wasm32")]
                    {
                        static PLUGIN: $crate::__private::PluginCell<$plugin> = $crate::__private::PluginCell::new();
                        f(PLUGIN.get())
                    }
                    #[cfg(not(target_arch = "wasm32"))]
                    {
                        f(&<$plugin as ::core::default::Default>::default())
                    }
                }
            }
            type __EventpipeExport = $crate::__private::Export<__EventpipeInstance>;
    $crate::bindings::$world::export!(__EventpipeExport with_types_in $crate::bindings::$world);
        };
    };
}

/// Exports a type implementing [`AggregateKey`](crate::AggregateKey) as this component's
/// `aggregate-key` world. Use once per crate.
///
/// ```ignore
/// eventpipe_guest::export_aggregate_key!(eventpipe_guest::defaults::ByReason);
/// ```
#[macro_export]
macro_rules! export_aggregate_key {
    ($plugin:ty) => {
        $crate::__export_plugin!($plugin, aggregate_key);
    };
}

/// Exports a type implementing [`MessageCombiner`](crate::MessageCombiner) as this
/// component's `message-combiner` world. Use once per crate.
#[macro_export]
macro_rules! export_message_combiner {
    ($plugin:ty) => {
        $crate::__export_plugin!($plugin, message_combiner);
    };
}

/// Exports a type implementing [`SpamKey`](crate::SpamKey) as this component's `spam-key`
/// world. Use once per crate.
#[macro_export]
macro_rules! export_spam_key {
    ($plugin:ty) => {
        $crate::__export_plugin!($plugin, spam_key);
    };
}

/// Exports a type implementing [`Filter`](crate::Filter) as this component's `filter` world.
/// Use once per crate.
#[macro_export]
macro_rules! export_filter {
    ($plugin:ty) => {
        $crate::__export_plugin!($plugin, filter);
    };
}

/// Exports a type implementing [`Sink`](crate::Sink) as this component's `sink` world. Use
/// once per crate.
#[macro_export]
macro_rules! export_sink {
    ($plugin:ty) => {
        $crate::__export_plugin!($plugin, sink);
    };
}

/// Exports a type implementing [`Watcher`](crate::Watcher) as this component's `watcher`
/// world. Use once per crate.
#[macro_export]
macro_rules! export_watcher {
    ($plugin:ty) => {
        $crate::__export_plugin!($plugin, watcher);
    };
}

/// Exports a type implementing [`Encoder`](crate::Encoder) as this component's `encoder`
/// world. Use once per crate.
#[macro_export]
macro_rules! export_encoder {
    ($plugin:ty) => {
        $crate::__export_plugin!($plugin, encoder);
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::defaults::{ByReason, SimilarEvents, SourceObject};
    use crate::packed::{PackedStrs, pack_key_fields};

    struct Native<T>(PhantomData<T>);
    impl<T: Default + 'static> Instance for Native<T> {
        type Plugin = T;
        fn with<R>(f: impl FnOnce(&T) -> R) -> R {
            f(&T::default())
        }
    }

    fn sample(name: &str) -> Event {
        let mut e = Event::default();
        e.source.component = "kubelet".into();
        e.source.host = "node1".into();
        e.involved_object.kind = "Pod".into();
        e.involved_object.name = name.into();
        e.involved_object.field_path = "spec.containers{app}".into();
        e.type_ = "Normal".into();
        e.reason = "Pulled".into();
        e.message = "pulled".into();
        e
    }

    #[test]
    fn batch_and_single_calls_agree() {
        let events = [sample("a"), sample("b"), sample("")];
        let batch = pack_key_fields(events.iter().map(EventView::from)).unwrap();

        let out = <Export<Native<ByReason>> as aggregate_key::Guest>::aggregate_key_batch(batch.clone()).unwrap();
        let out = PackedStrs::new(&out.bytes, &out.ends).unwrap();
        assert_eq!(out.len(), 2 * events.len());
        for (i, e) in events.iter().enumerate() {
            let one = <Export<Native<ByReason>> as aggregate_key::Guest>::aggregate_key(e.clone());
            assert_eq!((out.get(2 * i).unwrap(), out.get(2 * i + 1).unwrap()), (&*one.aggregate, &*one.local));
        }

        let out =
            <Export<Native<SimilarEvents>> as message_combiner::Guest>::combine_message_batch(batch.clone()).unwrap();
        let out = PackedStrs::new(&out.bytes, &out.ends).unwrap();
        assert_eq!(out.get(1), Some("(combined from similar events): pulled"));

        let out = <Export<Native<SourceObject>> as spam_key::Guest>::spam_key_batch(batch).unwrap();
        let out = PackedStrs::new(&out.bytes, &out.ends).unwrap();
        assert_eq!(out.iter().len(), events.len());
        assert_eq!(out.get(0), Some("kubeletnode1Poda"), "client-go v0.26 getSpamKey: no type");
        assert_eq!(<Export<Native<SourceObject>> as spam_key::Guest>::spam_key(sample("a")), "kubeletnode1Poda");
    }

    #[test]
    fn malformed_batches_are_err_strings() {
        let bad = PackedStrings { bytes: b"abc".to_vec(), ends: alloc::vec![1, 2] };
        let err = <Export<Native<SourceObject>> as spam_key::Guest>::spam_key_batch(bad).unwrap_err();
        assert_eq!(err, "2 strings is not a multiple of 13 key fields");
    }
}
