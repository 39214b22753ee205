//! client-go's key functions (`tools/record/events_cache.go`), bit-exact, for composing your
//! own and for the default plugins (`by-reason`, `similar-events`, `source-object`).
//!
//! Keys are plain concatenations with **no separator**, as in Go, so Go's collisions
//! (`"ab" + "c"` = `"a" + "bc"`) are reproduced exactly.
//!
//! ```
//! use eventpipe_guest::{EventView, KeyWriter, SpamKey, defaults};
//!
//! /// client-go's spam key, plus the reason: one token bucket per object *and* reason.
//! #[derive(Default)]
//! struct PerReason;
//!
//! impl SpamKey for PerReason {
//!     fn spam_key(&self, event: &EventView<'_>, key: &mut KeyWriter<'_>) {
//!         defaults::spam_key(event, key);
//!         key.push_str(event.reason);
//!     }
//! }
//! ```

use alloc::vec;
use alloc::vec::Vec;

use crate::{AggregateKey, EventView, KeyField, KeyWriter, MessageCombiner, SpamKey};

/// Prefix of combined messages (client-go `EventAggregatorByReasonMessageFunc`, since k8s 1.8).
pub const COMBINED_MESSAGE_PREFIX: &str = "(combined from similar events): ";

/// client-go `getEventKey` (the EventLogger's key; the host computes it itself): `source.component,
/// source.host, io.kind, io.namespace, io.name, io.fieldPath, io.uid, io.apiVersion, type,
/// reason, message`.
pub fn event_key(e: &EventView<'_>, out: &mut KeyWriter<'_>) {
    let f = e.fields();
    out.push_all(&f[..11]);
}

/// client-go `getSpamKey` as of v0.26 (the behaviour eventpipe's defaults reproduce):
/// `source.component, source.host, io.kind, io.namespace, io.name, io.uid, io.apiVersion` (no
/// fieldPath, reason, message or type: Normal and Warning events of one object share a bucket).
pub fn spam_key(e: &EventView<'_>, out: &mut KeyWriter<'_>) {
    let (s, o) = (&e.source, &e.involved_object);
    out.push_all(&[s.component, s.host, o.kind, o.namespace, o.name, o.uid, o.api_version]);
}

/// client-go `getSpamKey` since k8s 1.32: [`spam_key`] followed by `type`.
pub fn spam_key_with_type(e: &EventView<'_>, out: &mut KeyWriter<'_>) {
    spam_key(e, out);
    out.push_str(e.type_);
}

/// client-go `EventAggregatorByReasonFunc`'s aggregate key: `source.component, source.host,
/// io.kind, io.namespace, io.name, io.uid, io.apiVersion, type, reason, reportingComponent,
/// reportingInstance` (reporting fields since k8s 1.20; no fieldPath).
pub fn aggregate_by_reason(e: &EventView<'_>, out: &mut KeyWriter<'_>) {
    let (s, o) = (&e.source, &e.involved_object);
    out.push_all(&[
        s.component,
        s.host,
        o.kind,
        o.namespace,
        o.name,
        o.uid,
        o.api_version,
        e.type_,
        e.reason,
        e.reporting_component,
        e.reporting_instance,
    ]);
}

/// client-go `EventAggregatorByReasonFunc`'s local key: the message.
pub fn aggregate_by_reason_local(e: &EventView<'_>, out: &mut KeyWriter<'_>) {
    out.push_str(e.message);
}

/// client-go `EventAggregatorByReasonMessageFunc`: `"(combined from similar events): " + message`.
pub fn aggregate_by_reason_message(e: &EventView<'_>, out: &mut KeyWriter<'_>) {
    out.push_all(&[COMBINED_MESSAGE_PREFIX, e.message]);
}

/// The default aggregate-key plugin `by-reason`: client-go `EventAggregatorByReasonFunc`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ByReason;

impl AggregateKey for ByReason {
    /// Every key field but `involved-object.field-path`, which client-go's key leaves out.
    fn key_fields(&self) -> Vec<KeyField> {
        KeyField::ALL.into_iter().filter(|f| *f != KeyField::FieldPath).collect()
    }

    fn aggregate_key(&self, event: &EventView<'_>, key: &mut KeyWriter<'_>) {
        aggregate_by_reason(event, key);
    }

    fn local_key(&self, event: &EventView<'_>, key: &mut KeyWriter<'_>) {
        aggregate_by_reason_local(event, key);
    }

    /// The message, as client-go's local key; the aggregate key does not read it.
    fn local_key_field(&self) -> Option<KeyField> {
        Some(KeyField::Message)
    }
}

/// The default combiner plugin `similar-events`: client-go `EventAggregatorByReasonMessageFunc`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SimilarEvents;

impl MessageCombiner for SimilarEvents {
    fn key_fields(&self) -> Vec<KeyField> {
        vec![KeyField::Message]
    }

    fn combine_message(&self, event: &EventView<'_>, message: &mut KeyWriter<'_>) {
        aggregate_by_reason_message(event, message);
    }
}

/// The default spam-key plugin `source-object`: client-go `getSpamKey`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SourceObject;

impl SpamKey for SourceObject {
    /// Source and involved object (not `field-path`), as client-go's key.
    fn key_fields(&self) -> Vec<KeyField> {
        use KeyField::*;
        vec![SourceComponent, SourceHost, Kind, Namespace, Name, Uid, ApiVersion]
    }

    fn spam_key(&self, event: &EventView<'_>, key: &mut KeyWriter<'_>) {
        spam_key(event, key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packed::{ObjectView, SourceView};
    use alloc::string::String;

    fn key(f: impl FnOnce(&mut KeyWriter<'_>)) -> String {
        let mut s = String::new();
        f(&mut KeyWriter::new(&mut s));
        s
    }

    /// The kubelet/Pod example of spec §3.2 (from client-go's test vectors).
    fn kubelet_pod() -> EventView<'static> {
        EventView {
            source: SourceView { component: "kubelet", host: "kublet.node1" },
            involved_object: ObjectView {
                kind: "Pod",
                namespace: "other",
                name: "pod1",
                field_path: "spec.containers{mycontainer}",
                uid: "C934D34AFB20242",
                api_version: "version",
            },
            type_: "Normal",
            reason: "end-of-world",
            message: "it was fun",
            reporting_component: "",
            reporting_instance: "",
        }
    }

    #[test]
    fn spec_vectors() {
        let e = kubelet_pod();
        assert_eq!(
            key(|w| event_key(&e, w)),
            "kubeletkublet.node1Podotherpod1spec.containers{mycontainer}C934D34AFB20242versionNormalend-of-worldit was fun"
        );
        // The vector derives HEAD's key (with `type`); the default is v0.26's (without).
        assert_eq!(key(|w| spam_key_with_type(&e, w)), "kubeletkublet.node1Podotherpod1C934D34AFB20242versionNormal");
        assert_eq!(key(|w| spam_key(&e, w)), "kubeletkublet.node1Podotherpod1C934D34AFB20242version");
        assert_eq!(
            key(|w| aggregate_by_reason(&e, w)),
            "kubeletkublet.node1Podotherpod1C934D34AFB20242versionNormalend-of-world"
        );
        assert_eq!(key(|w| aggregate_by_reason_local(&e, w)), "it was fun");
        assert_eq!(key(|w| aggregate_by_reason_message(&e, w)), "(combined from similar events): it was fun");
    }

    #[test]
    fn reporting_fields_are_in_the_aggregate_key_only() {
        let mut e = kubelet_pod();
        e.reporting_component = "kubelet-rc";
        e.reporting_instance = "i-1";
        assert!(key(|w| aggregate_by_reason(&e, w)).ends_with("end-of-worldkubelet-rci-1"));
        assert_eq!(key(|w| spam_key(&e, w)), "kubeletkublet.node1Podotherpod1C934D34AFB20242version");
    }

    /// `e` as the host sends it to a plugin reading `fields`: every other field empty.
    fn projected(e: &EventView<'static>, fields: &[KeyField]) -> EventView<'static> {
        let all = [
            e.source.component,
            e.source.host,
            e.involved_object.kind,
            e.involved_object.namespace,
            e.involved_object.name,
            e.involved_object.field_path,
            e.involved_object.uid,
            e.involved_object.api_version,
            e.type_,
            e.reason,
            e.message,
            e.reporting_component,
            e.reporting_instance,
        ];
        let mut kept = [""; crate::packed::KEY_FIELD_COUNT];
        for f in fields {
            kept[*f as usize] = all[*f as usize];
        }
        EventView::from_fields(kept)
    }

    #[test]
    fn each_default_reads_only_the_key_fields_it_declares() {
        let mut e = kubelet_pod();
        e.reporting_component = "kubelet-rc";
        e.reporting_instance = "i-1";
        let p = projected(&e, &ByReason.key_fields());
        assert_eq!(key(|w| ByReason.aggregate_key(&e, w)), key(|w| ByReason.aggregate_key(&p, w)));
        assert_eq!(key(|w| ByReason.local_key(&e, w)), key(|w| ByReason.local_key(&p, w)));
        let p = projected(&e, &SimilarEvents.key_fields());
        assert_eq!(key(|w| SimilarEvents.combine_message(&e, w)), key(|w| SimilarEvents.combine_message(&p, w)));
        let p = projected(&e, &SourceObject.key_fields());
        assert_eq!(key(|w| SourceObject.spam_key(&e, w)), key(|w| SourceObject.spam_key(&p, w)));
        assert!(p.message.is_empty() && p.type_.is_empty(), "the spam key reads neither message nor type");
        // And each leaves out something: a plugin reading everything would gain nothing.
        for declared in [ByReason.key_fields(), SimilarEvents.key_fields(), SourceObject.key_fields()] {
            assert!(declared.len() < KeyField::ALL.len());
        }
    }

    /// `by-reason` declares its local key to be the message: it is, and its aggregate key is
    /// the same without the message (as the host sends it then).
    #[test]
    fn by_reason_s_local_key_is_the_message_which_its_aggregate_key_does_not_read() {
        let e = kubelet_pod();
        assert_eq!(ByReason.local_key_field(), Some(KeyField::Message));
        assert_eq!(key(|w| ByReason.local_key(&e, w)), e.message);
        let without: Vec<KeyField> = ByReason.key_fields().into_iter().filter(|f| *f != KeyField::Message).collect();
        let p = projected(&e, &without);
        assert!(p.message.is_empty());
        assert_eq!(key(|w| ByReason.aggregate_key(&e, w)), key(|w| ByReason.aggregate_key(&p, w)));
    }

    #[test]
    fn no_separator_collisions_are_kept() {
        let mut a = kubelet_pod();
        let mut b = kubelet_pod();
        (a.involved_object.namespace, a.involved_object.name) = ("ab", "c");
        (b.involved_object.namespace, b.involved_object.name) = ("a", "bc");
        assert_eq!(key(|w| spam_key(&a, w)), key(|w| spam_key(&b, w)));
    }
}
