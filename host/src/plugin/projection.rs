//! Projections: the fields a plugin declared it reads, asked once per plugin version, and the
//! batches packed from exactly those fields, so a plugin pays for the strings it reads and
//! nothing else.
//!
//! - A filter declares `event-field`s (`filter.fields`) and gets a `projected-batch` of exactly
//!   those ([`ProjectedFilter`]).
//! - A key plugin of a `*-projected` world declares which of the 13 key fields it reads
//!   (`key-fields`) and gets a key-fields batch with the others empty; its memo keys answers by
//!   the declared fields alone ([`ProjectedKeys`]). A plugin of a plain key world reads all 13.
//!
//! Measured against the earlier design (every event lowered as a whole `event` record) and a
//! resource with a getter per field: see `docs/performance.md`, "The plugin boundary".

use std::io::Write;
use std::sync::{Arc, Mutex};

use super::bindings as wit;
use super::call::{CallCost, CallFailure, Caller};
use super::convert::{KeyFields, key_field, pack_key_fields};
use super::{ENRICHMENT_FIELDS_EXPORT, KEY_FIELDS_EXPORT, LOCAL_KEY_FIELD_EXPORT, Plugin, PluginHandle};
use crate::clock::to_unix_nanos;
use crate::event::{Event, ObjectReference, Time};

/// A filter's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Pass the event on to correlation.
    Keep,
    /// Discard it, with the plugin's reason (if it gave one).
    Drop(Option<String>),
}

/// Most fields a filter may declare.
pub const MAX_FIELDS: usize = 64;

/// The `filter-batch` export: tenant, event count, projected batch → verdicts.
type FilterBatch = Caller<(String, u32, wit::PackedStrings), (Vec<wit::Verdict>,)>;

/// What one plugin version declared, remembered with the version's number: asked again only
/// when the slot serves another version (hot reload, revert, tier-up).
struct PerVersion<T> {
    declared: Mutex<Option<(u64, T)>>,
}

impl<T: Clone> PerVersion<T> {
    fn new() -> Self {
        Self { declared: Mutex::new(None) }
    }

    /// The declaration of the version `handle`'s slot serves, with that version's number:
    /// remembered, or asked with `ask` (given the version, and a handle fixed to it for a
    /// fresh instance of its own, dropped after the call).
    fn get(
        &self,
        handle: &PluginHandle,
        ask: impl FnOnce(&Plugin, PluginHandle) -> Result<T, CallFailure>,
    ) -> Result<(u64, T), CallFailure> {
        let Some(current) = handle.slot().load() else {
            return Err(CallFailure::Unloaded);
        };
        let mut guard = self.declared.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((version, declared)) = guard.as_ref().filter(|(version, _)| *version == current.version) {
            return Ok((*version, declared.clone()));
        }
        let fixed = PluginHandle::fixed(current.clone(), handle.tenant(), handle.settings().clone());
        let declared = ask(&current, fixed)?;
        *guard = Some((current.version, declared.clone()));
        Ok((current.version, declared))
    }
}

/// What a filter version declared it reads: event fields (`fields`) and, for a
/// `filter-enriched` filter, enrichment fields (`enrichment-fields`), packed after them.
#[derive(Debug, Clone)]
pub(crate) struct FilterProjection {
    /// The event fields, in the filter's order.
    pub(crate) fields: Arc<[wit::EventField]>,
    /// The enrichment fields, in the filter's order (none for a plain `filter`).
    pub(crate) enrichment: Arc<[wit::EnrichmentField]>,
}

impl FilterProjection {
    /// As `plugins check` shows it: `type, reason; enrichment: owner-kind, object-label(team)`.
    pub(crate) fn describe(&self) -> String {
        let fields = super::convert::describe_fields(&self.fields);
        if self.enrichment.is_empty() {
            return fields;
        }
        format!("{fields}; enrichment: {}", describe_enrichment_fields(&self.enrichment))
    }
}

/// One tenant's `filter-batch` caller with the projection of the version it calls.
pub(crate) struct ProjectedFilter {
    batch: FilterBatch,
    projection: PerVersion<FilterProjection>,
}

impl ProjectedFilter {
    /// A caller of `handle`'s `filter-batch` (instantiated lazily).
    pub(crate) fn new(handle: PluginHandle) -> Self {
        let batch = Caller::new(handle, super::PluginKind::Filter.batch_export(), None);
        Self { batch, projection: PerVersion::new() }
    }

    pub(crate) fn handle(&self) -> &PluginHandle {
        self.batch.handle()
    }

    /// The error for `failure` on `event`, counted in the handle's stats.
    pub(crate) fn error(&self, event: String, failure: CallFailure) -> super::call::PluginCallError {
        self.batch.error(event, failure)
    }

    /// Quarantines the plugin: a batch's bisection found it failing on every event it tried.
    pub(crate) fn keeps_failing(&self, failure: &CallFailure) {
        self.batch.keeps_failing(failure);
    }

    /// One `filter-batch` call on `events`: a verdict per event, or why not. Packs the fields
    /// the current version declared; when a hot reload swapped the version between asking and
    /// calling, asks the new version and calls again (once).
    pub(crate) fn call(&self, events: &[&Event]) -> Result<Vec<Verdict>, CallFailure> {
        self.call_costed(events).map(|(verdicts, _)| verdicts)
    }

    /// As [`call`](Self::call), with what the call cost.
    pub(crate) fn call_costed(&self, events: &[&Event]) -> Result<(Vec<Verdict>, CallCost), CallFailure> {
        let count = u32::try_from(events.len()).map_err(|_| CallFailure::GuestError("batch too large".into()))?;
        let tenant = self.handle().tenant().to_string();
        for _ in 0..2 {
            let (version, projection) = self.fields()?;
            let packed = pack_projection(events, &projection).map_err(CallFailure::GuestError)?;
            let ((verdicts,), cost, answered) =
                self.batch.call_versioned((tenant.clone(), count, packed), events.len())?;
            if answered != version {
                continue; // packed for another version's fields: ask again
            }
            if verdicts.len() != events.len() {
                return Err(CallFailure::Garbage(format!("{} verdicts for {} events", verdicts.len(), events.len())));
            }
            let verdicts = verdicts
                .into_iter()
                .map(|v| match v {
                    wit::Verdict::Keep => Verdict::Keep,
                    wit::Verdict::Drop(reason) => Verdict::Drop(reason),
                })
                .collect();
            return Ok((verdicts, cost));
        }
        Err(CallFailure::Trap("the plugin was swapped twice during one batch".into()))
    }

    /// The projection of the slot's current version: remembered, or asked of a fresh instance
    /// of that version (dropped after the call): its `fields`, and its `enrichment-fields` when
    /// it exports them. More than [`MAX_FIELDS`] in all is [`CallFailure::Garbage`].
    pub(crate) fn fields(&self) -> Result<(u64, FilterProjection), CallFailure> {
        self.projection.get(self.handle(), |plugin, fixed| {
            let asker: Caller<(), (Vec<wit::EventField>,)> = Caller::new(fixed.clone(), "fields", None);
            let ((fields,), _) = asker.call((), 1)?;
            let enrichment = if plugin.declares_enrichment_fields() {
                let asker: Caller<(), (Vec<wit::EnrichmentField>,)> =
                    Caller::new(fixed, ENRICHMENT_FIELDS_EXPORT, None);
                asker.call((), 1)?.0.0
            } else {
                Vec::new()
            };
            if fields.len() + enrichment.len() > MAX_FIELDS {
                return Err(CallFailure::Garbage(format!(
                    "{} fields declared (at most {MAX_FIELDS}, enrichment fields included)",
                    fields.len() + enrichment.len()
                )));
            }
            Ok(FilterProjection { fields: fields.into(), enrichment: enrichment.into() })
        })
    }
}

/// A key-fields batch export: key-fields batch → packed strings, or the guest's error.
type KeyBatch = Caller<(wit::PackedStrings,), (Result<wit::PackedStrings, String>,)>;

/// What a key plugin version declared: the key fields it is sent (and memoized by), and for an
/// aggregate-key plugin the key field its local key is (`local-key-field`), which is then not
/// among `fields`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyProjection {
    /// The fields packed into its batches; the others are `""`.
    pub(crate) fields: KeyFields,
    /// The index of the key field that is the local key as it is; `None`: the plugin's answer.
    pub(crate) local: Option<usize>,
}

impl KeyProjection {
    /// What a plugin of a plain key world gets: every field, its own local key.
    const ALL: KeyProjection = KeyProjection { fields: KeyFields::ALL, local: None };

    /// As `plugins check` shows it: `all 13 key fields`, or the fields and the local key field.
    pub(crate) fn describe(self) -> String {
        match self.local {
            None => self.fields.describe(),
            Some(i) => format!("{}; local key: {}", self.fields.describe(), KeyFields::describe_one(i)),
        }
    }

    /// The local key of `e` when the version declared it to be a key field (`local-key-field`):
    /// that field as it is, whatever the plugin returned. `None`: the plugin's answer is it.
    pub(crate) fn local_key(self, e: &Event) -> Option<&str> {
        self.local.map(|i| key_field(e, i))
    }
}

/// One tenant's caller of a key plugin's batch export (aggregate key, message combiner, spam
/// key) with the key fields of the version it calls.
pub(crate) struct ProjectedKeys {
    batch: KeyBatch,
    fields: PerVersion<KeyProjection>,
    /// The last batch's buffers, reused for the next one.
    packed: Mutex<wit::PackedStrings>,
}

/// Bytes of a key-fields batch buffer kept for the next batch; a larger one (events with huge
/// messages) is freed after its call.
const KEEP_PACKED_BYTES: usize = 1 << 20;

impl ProjectedKeys {
    /// A caller of `handle`'s batch export (instantiated lazily).
    pub(crate) fn new(handle: PluginHandle) -> Self {
        let export = handle.kind().batch_export();
        let packed = Mutex::new(wit::PackedStrings { bytes: Vec::new(), ends: Vec::new() });
        Self { batch: Caller::new(handle, export, None), fields: PerVersion::new(), packed }
    }

    pub(crate) fn handle(&self) -> &PluginHandle {
        self.batch.handle()
    }

    /// The error for `failure` on `event`, counted in the handle's stats.
    pub(crate) fn error(&self, event: String, failure: CallFailure) -> super::call::PluginCallError {
        self.batch.error(event, failure)
    }

    /// Quarantines the plugin: a batch's bisection found it failing on every event it tried.
    pub(crate) fn keeps_failing(&self, failure: &CallFailure) {
        self.batch.keeps_failing(failure);
    }

    /// What the slot's current version declared, with its version number: all 13 fields for a
    /// plugin of a plain key world; for a `*-projected` one, what its `key-fields` answered and,
    /// for an aggregate key, its `local-key-field` (that field is then left out of `fields`),
    /// asked once per version. A declaration naming a field that is not a key field is
    /// [`CallFailure::Garbage`], and so is every batch until the plugin is fixed.
    pub(crate) fn fields(&self) -> Result<(u64, KeyProjection), CallFailure> {
        self.fields.get(self.handle(), |plugin, fixed| {
            if !plugin.declares_key_fields() {
                return Ok(KeyProjection::ALL);
            }
            let asker: Caller<(), (Vec<u8>,)> = Caller::new(fixed.clone(), KEY_FIELDS_EXPORT, None);
            let ((fields,), _) = asker.call((), 1)?;
            let fields = KeyFields::declared(&fields).map_err(CallFailure::Garbage)?;
            if !plugin.declares_local_key_field() {
                return Ok(KeyProjection { fields, local: None });
            }
            let asker: Caller<(), (Option<u8>,)> = Caller::new(fixed, LOCAL_KEY_FIELD_EXPORT, None);
            let ((local,), _) = asker.call((), 1)?;
            match local.map(KeyFields::local).transpose().map_err(CallFailure::Garbage)? {
                Some(i) => Ok(KeyProjection { fields: fields.without(i), local: Some(i) }),
                None => Ok(KeyProjection { fields, local: None }),
            }
        })
    }

    /// One batch call on `events`, packed by the fields of the version it calls: the guest's
    /// answer, and the number of the version that gave it. When a hot reload swapped the
    /// version between asking and calling, asks the new version and calls again (once).
    pub(crate) fn call(
        &self,
        events: &[&Event],
    ) -> Result<(Result<wit::PackedStrings, String>, CallCost, u64, KeyProjection), CallFailure> {
        let mut packed = self.packed.lock().unwrap_or_else(|p| p.into_inner());
        for _ in 0..2 {
            let (version, projection) = self.fields()?;
            pack_key_fields(&mut packed, events, projection.fields).map_err(CallFailure::GuestError)?;
            let called = self.batch.call_lowering((&*packed,), events.len());
            if packed.bytes.capacity() > KEEP_PACKED_BYTES {
                *packed = wit::PackedStrings { bytes: Vec::new(), ends: Vec::new() };
            }
            let ((answer,), cost, answered) = called?;
            if answered == version {
                return Ok((answer, cost, version, projection));
            }
        }
        Err(CallFailure::Trap("the plugin was swapped twice during one batch".into()))
    }
}

fn instant(bytes: &mut Vec<u8>, t: Option<Time>) {
    if let Some(t) = t {
        let _ = write!(bytes, "{}", to_unix_nanos(t));
    }
}

fn related<'e>(e: &'e Event, field: impl Fn(&'e ObjectReference) -> &'e str) -> &'e str {
    e.related.as_deref().map_or("", field)
}

/// Appends the value of `field` of `e` to `bytes`, as `types.event-field` encodes it.
fn write_field(bytes: &mut Vec<u8>, e: &Event, field: &wit::EventField) {
    use wit::EventField as F;
    let (m, io) = (&e.metadata, &e.involved_object);
    let s: &str = match field {
        F::Name => &m.name,
        F::GenerateName => &m.generate_name,
        F::Namespace => &m.namespace,
        F::Uid => &m.uid,
        F::ResourceVersion => &m.resource_version,
        F::CreationTimestamp => return instant(bytes, m.creation_timestamp),
        F::Label(key) => m.labels.get(key).map_or("", String::as_str),
        F::Annotation(key) => m.annotations.get(key).map_or("", String::as_str),
        F::InvolvedObjectKind => &io.kind,
        F::InvolvedObjectNamespace => &io.namespace,
        F::InvolvedObjectName => &io.name,
        F::InvolvedObjectUid => &io.uid,
        F::InvolvedObjectApiVersion => &io.api_version,
        F::InvolvedObjectResourceVersion => &io.resource_version,
        F::InvolvedObjectFieldPath => &io.field_path,
        F::Reason => &e.reason,
        F::Message => &e.message,
        F::SourceComponent => &e.source.component,
        F::SourceHost => &e.source.host,
        F::FirstTimestamp => return instant(bytes, e.first_timestamp),
        F::LastTimestamp => return instant(bytes, e.last_timestamp),
        F::Count => {
            let _ = write!(bytes, "{}", e.count);
            return;
        }
        F::Type => &e.type_,
        F::EventTime => return instant(bytes, e.event_time),
        F::SeriesCount => {
            if let Some(series) = &e.series {
                let _ = write!(bytes, "{}", series.count);
            }
            return;
        }
        F::SeriesLastObservedTime => return instant(bytes, e.series.as_ref().and_then(|s| s.last_observed_time)),
        F::Action => &e.action,
        F::RelatedKind => related(e, |r| &r.kind),
        F::RelatedNamespace => related(e, |r| &r.namespace),
        F::RelatedName => related(e, |r| &r.name),
        F::RelatedUid => related(e, |r| &r.uid),
        F::RelatedApiVersion => related(e, |r| &r.api_version),
        F::RelatedResourceVersion => related(e, |r| &r.resource_version),
        F::RelatedFieldPath => related(e, |r| &r.field_path),
        F::ReportingComponent => &e.reporting_component,
        F::ReportingInstance => &e.reporting_instance,
    };
    bytes.extend_from_slice(s.as_bytes());
}

/// The value of enrichment `field` of `e` (`types.enrichment-field`), `""` when the event
/// carries no enrichment or none of that field.
fn enrichment_field<'e>(e: &'e Event, field: &wit::EnrichmentField) -> &'e str {
    use wit::EnrichmentField as F;
    let Some(enrichment) = e.enrichment.get() else { return "" };
    let owner = |f: fn(&'e crate::event::enrichment::Owner) -> &'e str| enrichment.owner.as_ref().map_or("", f);
    let of = |map: &'e Option<std::collections::BTreeMap<String, String>>, key: &str| {
        map.as_ref().and_then(|m| m.get(key)).map_or("", String::as_str)
    };
    match field {
        F::Cluster => enrichment.cluster.as_deref().unwrap_or(""),
        F::ObjectLabel(key) => of(&enrichment.labels, key),
        F::ObjectAnnotation(key) => of(&enrichment.annotations, key),
        F::OwnerKind => owner(|o| &o.kind),
        F::OwnerName => owner(|o| &o.name),
        F::OwnerUid => owner(|o| &o.uid),
        F::OwnerApiVersion => owner(|o| &o.api_version),
        F::NodeName => enrichment.node.as_ref().map_or("", |n| &n.name),
        F::NodeLabel(key) => enrichment.node.as_ref().and_then(|n| n.labels.get(key)).map_or("", String::as_str),
    }
}

/// `fields` as WIT names, e.g. `owner-kind, object-label(team)`.
pub(crate) fn describe_enrichment_fields(fields: &[wit::EnrichmentField]) -> String {
    use wit::EnrichmentField as F;
    let names: Vec<String> = fields
        .iter()
        .map(|f| match f {
            F::Cluster => "cluster".into(),
            F::ObjectLabel(key) => format!("object-label({key})"),
            F::ObjectAnnotation(key) => format!("object-annotation({key})"),
            F::OwnerKind => "owner-kind".into(),
            F::OwnerName => "owner-name".into(),
            F::OwnerUid => "owner-uid".into(),
            F::OwnerApiVersion => "owner-api-version".into(),
            F::NodeName => "node-name".into(),
            F::NodeLabel(key) => format!("node-label({key})"),
        })
        .collect();
    names.join(", ")
}

/// Packs the projection of every event of `events` (`types.projected-batch`): its event
/// fields, then its enrichment fields; one byte buffer and one end offset per field, copied
/// straight from the events.
///
/// # Errors
/// The batch is larger than the 4 GiB the `u32` offsets address.
pub(crate) fn pack_projection(events: &[&Event], projection: &FilterProjection) -> Result<wit::PackedStrings, String> {
    /// A first guess of the bytes per field (grown as needed).
    const BYTES_PER_FIELD: usize = 16;
    let strings = events.len() * (projection.fields.len() + projection.enrichment.len());
    let mut bytes = Vec::with_capacity(strings * BYTES_PER_FIELD);
    let mut ends = Vec::with_capacity(strings);
    for e in events {
        for field in projection.fields.iter() {
            write_field(&mut bytes, e, field);
            ends.push(bytes.len() as u32); // checked below: the total fits in u32
        }
        for field in projection.enrichment.iter() {
            bytes.extend_from_slice(enrichment_field(e, field).as_bytes());
            ends.push(bytes.len() as u32); // checked below: the total fits in u32
        }
    }
    if u32::try_from(bytes.len()).is_err() {
        return Err(format!("a batch of {} bytes is too large for one call", bytes.len()));
    }
    Ok(wit::PackedStrings { bytes, ends })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::convert::describe_fields;
    use crate::plugin::convert::unpack;
    use wit::EventField as F;

    fn strings(packed: &wit::PackedStrings, n: usize) -> Vec<String> {
        unpack(packed, n).unwrap().into_iter().map(|b| String::from_utf8(b.to_vec()).unwrap()).collect()
    }

    #[test]
    fn packs_exactly_the_declared_fields_in_their_order() {
        let mut a = Event {
            type_: "Warning".into(),
            reason: "BackOff".into(),
            message: "not declared".into(),
            count: 7,
            first_timestamp: Some(chrono::DateTime::from_timestamp(1_700_000_000, 5).unwrap()),
            ..Default::default()
        };
        a.metadata.labels.insert("team".into(), "payments".into());
        let b = Event {
            reason: "Pulled".into(),
            series: Some(Box::new(crate::event::EventSeries { count: 3, last_observed_time: None })),
            related: Some(Box::new(ObjectReference { kind: "Node".into(), ..Default::default() })),
            ..Default::default()
        };
        let fields = [
            F::Reason,
            F::Type,
            F::Count,
            F::Label("team".into()),
            F::FirstTimestamp,
            F::SeriesCount,
            F::SeriesLastObservedTime,
            F::RelatedKind,
        ];
        let packed = pack_projection(&[&a, &b], &only(&fields)).unwrap();
        assert_eq!(
            strings(&packed, 16),
            [
                "BackOff",
                "Warning",
                "7",
                "payments",
                "1700000000000000005",
                "",
                "",
                "",
                "Pulled",
                "",
                "0",
                "",
                "",
                "3",
                "",
                "Node"
            ]
        );
        assert!(!String::from_utf8_lossy(&packed.bytes).contains("not declared"));
    }

    #[test]
    fn fields_are_described_by_their_wit_names() {
        let fields = [F::Type, F::SourceComponent, F::Label("team".into())];
        assert_eq!(describe_fields(&fields), "type, source-component, label(team)");
        assert_eq!(describe_fields(&[]), "no fields");
    }

    #[test]
    fn no_fields_packs_nothing() {
        let e = Event::default();
        let packed = pack_projection(&[&e, &e], &only(&[])).unwrap();
        assert!(packed.bytes.is_empty() && packed.ends.is_empty());
    }

    /// A projection of event fields alone (a plain `filter`).
    fn only(fields: &[wit::EventField]) -> FilterProjection {
        FilterProjection { fields: fields.into(), enrichment: Arc::from([]) }
    }

    #[test]
    fn enrichment_fields_are_packed_after_the_event_fields() {
        use crate::event::enrichment::{Enriched, Enrichment, Node, Owner};
        use wit::EnrichmentField as X;
        let enrichment = Enrichment {
            cluster: Some("prod-eu".into()),
            labels: Some([("team".to_string(), "payments".to_string())].into()),
            annotations: None,
            owner: Some(Owner {
                kind: "Deployment".into(),
                name: "web".into(),
                uid: "u-1".into(),
                api_version: "apps/v1".into(),
            }),
            node: Some(Node {
                name: "node-a".into(),
                labels: [("topology.kubernetes.io/zone".to_string(), "eu-1a".to_string())].into(),
            }),
        };
        let enriched =
            Event { reason: "BackOff".into(), enrichment: Enriched::new(Arc::new(enrichment)), ..Default::default() };
        let bare = Event { reason: "Pulled".into(), ..Default::default() };
        let projection = FilterProjection {
            fields: Arc::from([F::Reason]),
            enrichment: Arc::from([
                X::OwnerKind,
                X::OwnerName,
                X::ObjectLabel("team".into()),
                X::ObjectLabel("absent".into()),
                X::ObjectAnnotation("a".into()),
                X::NodeName,
                X::NodeLabel("topology.kubernetes.io/zone".into()),
                X::Cluster,
                X::OwnerApiVersion,
                X::OwnerUid,
            ]),
        };
        let packed = pack_projection(&[&enriched, &bare], &projection).unwrap();
        let mut expected =
            vec!["BackOff", "Deployment", "web", "payments", "", "", "node-a", "eu-1a", "prod-eu", "apps/v1", "u-1"];
        expected.extend(["Pulled", "", "", "", "", "", "", "", "", "", ""]);
        assert_eq!(strings(&packed, 22), expected);
        assert_eq!(
            projection.describe(),
            "reason; enrichment: owner-kind, owner-name, object-label(team), object-label(absent), \
             object-annotation(a), node-name, node-label(topology.kubernetes.io/zone), cluster, owner-api-version, owner-uid"
        );
        assert_eq!(only(&[F::Reason]).describe(), "reason", "a plain filter's projection names no enrichment");
    }
}
