//! A filter's projection: the fields it declared (`filter.fields`), asked once per plugin
//! version, and the batches packed from exactly those fields (`types.projected-batch`), so a
//! filter pays for the strings it reads and nothing else.
//!
//! Measured against the earlier design (every event lowered as a whole `event` record) and a
//! resource with a getter per field: see the README's plugin section.

use std::io::Write;
use std::sync::{Arc, Mutex};

use super::PluginHandle;
use super::bindings as wit;
use super::call::{CallCost, CallFailure, Caller};
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

/// The fields of one plugin version, and which version declared them.
struct Projection {
    version: u64,
    fields: Arc<[wit::EventField]>,
}

/// One tenant's `filter-batch` caller with the projection of the version it calls.
pub(crate) struct ProjectedFilter {
    batch: FilterBatch,
    projection: Mutex<Option<Projection>>,
}

impl ProjectedFilter {
    /// A caller of `handle`'s `filter-batch` (instantiated lazily).
    pub(crate) fn new(handle: PluginHandle) -> Self {
        let batch = Caller::new(handle, super::PluginKind::Filter.batch_export(), None);
        Self { batch, projection: Mutex::new(None) }
    }

    pub(crate) fn handle(&self) -> &PluginHandle {
        self.batch.handle()
    }

    /// The error for `failure` on `event`, counted in the handle's stats.
    pub(crate) fn error(&self, event: String, failure: CallFailure) -> super::call::PluginCallError {
        self.batch.error(event, failure)
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
            let (version, fields) = self.fields()?;
            let packed = pack_projection(events, &fields).map_err(CallFailure::GuestError)?;
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

    /// The fields of the slot's current version: remembered, or asked of a fresh instance of
    /// that version (dropped after the call).
    pub(crate) fn fields(&self) -> Result<(u64, Arc<[wit::EventField]>), CallFailure> {
        let Some(current) = self.handle().slot().load() else {
            return Err(CallFailure::Unloaded);
        };
        let mut guard = self.projection.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = guard.as_ref().filter(|p| p.version == current.version) {
            return Ok((p.version, p.fields.clone()));
        }
        let handle = PluginHandle::fixed(current.clone(), self.handle().tenant(), self.handle().settings().clone());
        let asker: Caller<(), (Vec<wit::EventField>,)> = Caller::new(handle, "fields", None);
        let ((fields,), _) = asker.call((), 1)?;
        if fields.len() > MAX_FIELDS {
            return Err(CallFailure::Garbage(format!("{} fields declared (at most {MAX_FIELDS})", fields.len())));
        }
        let fields: Arc<[wit::EventField]> = fields.into();
        *guard = Some(Projection { version: current.version, fields: fields.clone() });
        Ok((current.version, fields))
    }
}

/// `fields` as WIT names, e.g. `type, reason, label(team)`; `no fields` when empty.
pub(crate) fn describe_fields(fields: &[wit::EventField]) -> String {
    if fields.is_empty() {
        return "no fields".into();
    }
    let names: Vec<String> = fields
        .iter()
        .map(|f| match f {
            wit::EventField::Label(key) => format!("label({key})"),
            wit::EventField::Annotation(key) => format!("annotation({key})"),
            other => {
                // `EventField::SourceComponent` → `source-component`, as the WIT names the case.
                let debug = format!("{other:?}");
                let debug = debug.rsplit("::").next().unwrap_or(&debug);
                let mut name = String::with_capacity(debug.len() + 4);
                for (i, c) in debug.chars().enumerate() {
                    if c.is_ascii_uppercase() {
                        if i > 0 {
                            name.push('-');
                        }
                        name.push(c.to_ascii_lowercase());
                    } else {
                        name.push(c);
                    }
                }
                name
            }
        })
        .collect();
    names.join(", ")
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

/// Packs `fields` of every event of `events` (`types.projected-batch`): one byte buffer and
/// one end offset per field, copied straight from the events.
///
/// # Errors
/// The batch is larger than the 4 GiB the `u32` offsets address.
pub(crate) fn pack_projection(events: &[&Event], fields: &[wit::EventField]) -> Result<wit::PackedStrings, String> {
    /// A first guess of the bytes per field (grown as needed).
    const BYTES_PER_FIELD: usize = 16;
    let strings = events.len() * fields.len();
    let mut bytes = Vec::with_capacity(strings * BYTES_PER_FIELD);
    let mut ends = Vec::with_capacity(strings);
    for e in events {
        for field in fields {
            write_field(&mut bytes, e, field);
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
            series: Some(crate::event::EventSeries { count: 3, last_observed_time: None }),
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
        let packed = pack_projection(&[&a, &b], &fields).unwrap();
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
        let packed = pack_projection(&[&e, &e], &[]).unwrap();
        assert!(packed.bytes.is_empty() && packed.ends.is_empty());
    }
}
