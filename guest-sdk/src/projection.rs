//! A filter's projection (world `filter`): the fields it reads ([`Filter::fields`]) and the
//! batches the host packs from exactly those fields (`types.projected-batch`), decoded back
//! into an [`Event`] whose other fields are empty.
//!
//! Encoding, as `wit/types.wit` `event-field` gives it: strings as they are; instants as
//! decimal Unix nanoseconds (`""` when unset); `count` and `series-count` as decimal
//! (`series-count` is `""` without a series); `label(key)` / `annotation(key)` as that one
//! value (`""` when absent); `related-*` as the related object's field (`""` without one).
//!
//! [`Filter::fields`]: crate::Filter::fields

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::packed::{PackError, PackedStrs};
use crate::{EnrichmentField, Event, EventField, EventSeries, ObjectReference, PackedStrings};

/// Every field but labels and annotations (which are named one key at a time): the default
/// projection of a filter that does not list what it reads.
pub fn every_field() -> Vec<EventField> {
    use EventField as F;
    alloc::vec![
        F::Name,
        F::GenerateName,
        F::Namespace,
        F::Uid,
        F::ResourceVersion,
        F::CreationTimestamp,
        F::InvolvedObjectKind,
        F::InvolvedObjectNamespace,
        F::InvolvedObjectName,
        F::InvolvedObjectUid,
        F::InvolvedObjectApiVersion,
        F::InvolvedObjectResourceVersion,
        F::InvolvedObjectFieldPath,
        F::Reason,
        F::Message,
        F::SourceComponent,
        F::SourceHost,
        F::FirstTimestamp,
        F::LastTimestamp,
        F::Count,
        F::Type,
        F::EventTime,
        F::SeriesCount,
        F::SeriesLastObservedTime,
        F::Action,
        F::RelatedKind,
        F::RelatedNamespace,
        F::RelatedName,
        F::RelatedUid,
        F::RelatedApiVersion,
        F::RelatedResourceVersion,
        F::RelatedFieldPath,
        F::ReportingComponent,
        F::ReportingInstance,
    ]
}

/// Why a projected batch was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProjectionError {
    /// The buffers break a `packed-strings` rule.
    Packed(PackError),
    /// The batch does not hold `count × fields` strings.
    Count {
        /// Strings in the batch.
        strings: usize,
        /// Events the host announced.
        events: usize,
        /// Fields per event.
        fields: usize,
    },
}

impl core::fmt::Display for ProjectionError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ProjectionError::Packed(e) => write!(f, "{e}"),
            ProjectionError::Count { strings, events, fields } => {
                write!(f, "{strings} strings for {events} events of {fields} fields")
            }
        }
    }
}

/// The values of the enrichment fields a filter declared ([`Filter::enrichment_fields`]) for
/// one event, in their order: `""` for a field the host found nothing of.
///
/// [`Filter::enrichment_fields`]: crate::Filter::enrichment_fields
#[derive(Debug, Clone, Copy)]
pub struct Enrichment<'a> {
    fields: &'a [EnrichmentField],
    values: &'a [&'a str],
}

impl<'a> Enrichment<'a> {
    /// No enrichment: every field reads `""` (what the single-event `filter` call gets).
    pub fn none() -> Self {
        Self { fields: &[], values: &[] }
    }

    /// The value of `field`: `""` when the filter did not declare it or the host found nothing.
    pub fn get(&self, field: &EnrichmentField) -> &'a str {
        self.fields.iter().position(|f| f == field).and_then(|i| self.values.get(i).copied()).unwrap_or("")
    }

    /// Each declared field with its value, in the declared order.
    pub fn iter(&self) -> impl Iterator<Item = (&'a EnrichmentField, &'a str)> + '_ {
        self.fields.iter().zip(self.values.iter().copied())
    }
}

/// A projected batch, checked once: [`ProjectedBatch::for_each`] hands out each event.
pub struct ProjectedBatch<'a> {
    strings: PackedStrs<'a>,
    fields: &'a [EventField],
    enrichment: &'a [EnrichmentField],
    events: usize,
}

impl<'a> ProjectedBatch<'a> {
    /// Checks `packed` against the rules of `packed-strings` and against
    /// `events × (fields + enrichment)` (each event's declared event fields, then its
    /// declared enrichment fields).
    ///
    /// # Errors
    /// [`ProjectionError`] naming the first broken rule.
    pub fn new(
        packed: &'a PackedStrings,
        events: usize,
        fields: &'a [EventField],
        enrichment: &'a [EnrichmentField],
    ) -> Result<Self, ProjectionError> {
        let strings = PackedStrs::new(&packed.bytes, &packed.ends).map_err(ProjectionError::Packed)?;
        let per_event = fields.len() + enrichment.len();
        if strings.len() != events * per_event {
            return Err(ProjectionError::Count { strings: strings.len(), events, fields: per_event });
        }
        Ok(Self { strings, fields, enrichment, events })
    }

    /// Events in the batch.
    pub fn len(&self) -> usize {
        self.events
    }

    /// Whether the batch holds no event.
    pub fn is_empty(&self) -> bool {
        self.events == 0
    }

    /// Calls `f` with each event in order, decoded into one reused [`Event`] (so a batch
    /// allocates only where a field outgrows what an earlier event used), and its
    /// [`Enrichment`].
    pub fn for_each(&self, mut f: impl FnMut(&Event, &Enrichment<'_>)) {
        let mut event = Event::default();
        let mut strings = self.strings.iter();
        let mut values: Vec<&str> = Vec::with_capacity(self.enrichment.len());
        for _ in 0..self.events {
            clear(&mut event, self.fields);
            for field in self.fields {
                set(&mut event, field, strings.next().unwrap_or(""));
            }
            values.clear();
            values.extend(self.enrichment.iter().map(|_| strings.next().unwrap_or("")));
            f(&event, &Enrichment { fields: self.enrichment, values: &values });
        }
    }
}

/// Empties the fields `fields` set (keeping their capacity).
fn clear(e: &mut Event, fields: &[EventField]) {
    for field in fields {
        set(e, field, "");
    }
    e.metadata.labels.clear();
    e.metadata.annotations.clear();
    e.series = None;
    e.related = None;
}

fn assign(target: &mut String, value: &str) {
    target.clear();
    target.push_str(value);
}

fn instant(value: &str) -> Option<i64> {
    if value.is_empty() { None } else { value.parse().ok() }
}

fn related(e: &mut Event, value: &str, field: impl FnOnce(&mut ObjectReference) -> &mut String) {
    if value.is_empty() {
        if let Some(r) = e.related.as_mut() {
            field(r).clear();
        }
        return;
    }
    let r = e.related.get_or_insert_with(ObjectReference::default);
    assign(field(r), value);
}

fn series(e: &mut Event) -> &mut EventSeries {
    e.series.get_or_insert(EventSeries { count: 0, last_observed_time_unix_nanos: None })
}

/// Sets `field` of `e` from its packed `value`.
fn set(e: &mut Event, field: &EventField, value: &str) {
    use EventField as F;
    let (m, io) = (&mut e.metadata, &mut e.involved_object);
    match field {
        F::Name => assign(&mut m.name, value),
        F::GenerateName => assign(&mut m.generate_name, value),
        F::Namespace => assign(&mut m.namespace, value),
        F::Uid => assign(&mut m.uid, value),
        F::ResourceVersion => assign(&mut m.resource_version, value),
        F::CreationTimestamp => m.creation_timestamp_unix_nanos = instant(value),
        F::Label(key) if !value.is_empty() => m.labels.push((key.clone(), value.to_string())),
        F::Annotation(key) if !value.is_empty() => m.annotations.push((key.clone(), value.to_string())),
        F::Label(_) | F::Annotation(_) => {}
        F::InvolvedObjectKind => assign(&mut io.kind, value),
        F::InvolvedObjectNamespace => assign(&mut io.namespace, value),
        F::InvolvedObjectName => assign(&mut io.name, value),
        F::InvolvedObjectUid => assign(&mut io.uid, value),
        F::InvolvedObjectApiVersion => assign(&mut io.api_version, value),
        F::InvolvedObjectResourceVersion => assign(&mut io.resource_version, value),
        F::InvolvedObjectFieldPath => assign(&mut io.field_path, value),
        F::Reason => assign(&mut e.reason, value),
        F::Message => assign(&mut e.message, value),
        F::SourceComponent => assign(&mut e.source.component, value),
        F::SourceHost => assign(&mut e.source.host, value),
        F::FirstTimestamp => e.first_timestamp_unix_nanos = instant(value),
        F::LastTimestamp => e.last_timestamp_unix_nanos = instant(value),
        F::Count => e.count = value.parse().unwrap_or(0),
        F::Type => assign(&mut e.type_, value),
        F::EventTime => e.event_time_unix_nanos = instant(value),
        F::SeriesCount if !value.is_empty() => series(e).count = value.parse().unwrap_or(0),
        F::SeriesLastObservedTime if !value.is_empty() => series(e).last_observed_time_unix_nanos = instant(value),
        F::SeriesCount | F::SeriesLastObservedTime => {}
        F::Action => assign(&mut e.action, value),
        F::RelatedKind => related(e, value, |r| &mut r.kind),
        F::RelatedNamespace => related(e, value, |r| &mut r.namespace),
        F::RelatedName => related(e, value, |r| &mut r.name),
        F::RelatedUid => related(e, value, |r| &mut r.uid),
        F::RelatedApiVersion => related(e, value, |r| &mut r.api_version),
        F::RelatedResourceVersion => related(e, value, |r| &mut r.resource_version),
        F::RelatedFieldPath => related(e, value, |r| &mut r.field_path),
        F::ReportingComponent => assign(&mut e.reporting_component, value),
        F::ReportingInstance => assign(&mut e.reporting_instance, value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn packed(strings: &[&str]) -> PackedStrings {
        let mut bytes = Vec::new();
        let mut ends = Vec::new();
        for s in strings {
            bytes.extend_from_slice(s.as_bytes());
            ends.push(bytes.len() as u32);
        }
        PackedStrings { bytes, ends }
    }

    #[test]
    fn decodes_each_event_with_only_the_declared_fields() {
        let fields = vec![
            EventField::Type,
            EventField::Reason,
            EventField::Count,
            EventField::Label("team".into()),
            EventField::FirstTimestamp,
            EventField::SeriesCount,
            EventField::RelatedKind,
        ];
        let batch = packed(&[
            "Warning",
            "BackOff",
            "7",
            "payments",
            "1700000000000000005",
            "",
            "",
            "Normal",
            "Pulled",
            "1",
            "",
            "",
            "3",
            "Node",
        ]);
        let projected = ProjectedBatch::new(&batch, 2, &fields, &[]).unwrap();
        let mut seen = Vec::new();
        projected.for_each(|e, enrichment| {
            assert_eq!(enrichment.iter().count(), 0);
            seen.push(e.clone())
        });
        assert_eq!(seen.len(), 2);
        let (a, b) = (&seen[0], &seen[1]);
        assert_eq!((a.type_.as_str(), a.reason.as_str(), a.count), ("Warning", "BackOff", 7));
        assert_eq!(a.metadata.labels, vec![("team".to_string(), "payments".to_string())]);
        assert_eq!(a.first_timestamp_unix_nanos, Some(1_700_000_000_000_000_005));
        assert!(a.series.is_none() && a.related.is_none() && a.message.is_empty());
        assert_eq!((b.type_.as_str(), b.reason.as_str(), b.count), ("Normal", "Pulled", 1));
        assert!(b.metadata.labels.is_empty(), "one event's label does not leak into the next");
        assert_eq!(b.first_timestamp_unix_nanos, None);
        assert_eq!(b.series.as_ref().map(|s| s.count), Some(3));
        assert_eq!(b.related.as_ref().map(|r| r.kind.as_str()), Some("Node"));
    }

    #[test]
    fn rejects_a_batch_of_the_wrong_size() {
        let fields = vec![EventField::Reason, EventField::Type];
        let batch = packed(&["a", "b", "c"]);
        assert_eq!(
            ProjectedBatch::new(&batch, 2, &fields, &[]).err(),
            Some(ProjectionError::Count { strings: 3, events: 2, fields: 2 })
        );
        assert_eq!(
            ProjectedBatch::new(&packed(&["a", "b", "c", "d"]), 2, &fields, &[EnrichmentField::Cluster]).err(),
            Some(ProjectionError::Count { strings: 4, events: 2, fields: 3 }),
            "enrichment fields count towards each event's strings"
        );
        assert!(ProjectedBatch::new(&packed(&[]), 5, &[], &[]).is_ok(), "no fields: only the count");
    }

    #[test]
    fn enrichment_values_follow_each_events_fields() {
        let fields = vec![EventField::Reason];
        let enrichment = vec![EnrichmentField::OwnerKind, EnrichmentField::ObjectLabel("team".into())];
        let batch = packed(&["BackOff", "Deployment", "payments", "Pulled", "", ""]);
        let projected = ProjectedBatch::new(&batch, 2, &fields, &enrichment).unwrap();
        let mut seen = Vec::new();
        projected.for_each(|e, enriched| {
            seen.push((
                e.reason.clone(),
                enriched.get(&EnrichmentField::OwnerKind).to_string(),
                enriched.get(&EnrichmentField::ObjectLabel("team".into())).to_string(),
                enriched.get(&EnrichmentField::Cluster).to_string(),
            ))
        });
        let row = |r: &str, k: &str, t: &str| (r.to_string(), k.to_string(), t.to_string(), String::new());
        assert_eq!(seen, vec![row("BackOff", "Deployment", "payments"), row("Pulled", "", "")]);
        assert_eq!(Enrichment::none().get(&EnrichmentField::Cluster), "");
    }
}
