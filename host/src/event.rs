//! The core/v1 `Event` model with its wire field names.
//!
//! Serialisation follows the Go types in `k8s.io/api/core/v1` as the apiserver emits them
//! (spec §6.1): struct field order, `omitempty` where Go has it, `metav1.Time` as RFC 3339 to the
//! second (`null` when unset), `metav1.MicroTime` to the microsecond, and `reportingComponent` /
//! `reportingInstance` always present. In memory, timestamps keep full precision: client-go
//! compares `time.Time` values, and only the wire truncates.
//!
//! Strings are [`CompactString`]s: up to 24 bytes are stored inline (kinds, namespaces,
//! reasons, components, hosts, most names), so decoding, copying and dropping an event costs
//! one allocation for its message instead of one per field; they deref to `&str`.
//!
//! Deserialisation is lenient in the ways real streams need: `null` for any string or number,
//! missing objects, the Go zero time `0001-01-01T00:00:00Z` (read as unset), and unknown
//! `metadata` fields (labels, ownerReferences, managedFields, …), which are kept and written back.
//! Other input shapes (watch envelopes, `EventList`, events.k8s.io/v1) are mapped to this model
//! by [`crate::source::decode`].

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};
pub use compact_str::CompactString;
use serde::{Deserialize, Deserializer, Serialize};

pub mod enrichment;
mod metadata;
mod sparse;

pub use sparse::{Empty, Sparse};

/// An instant, UTC, nanosecond precision (Go `time.Time` inside `metav1.Time`).
pub type Time = DateTime<Utc>;

/// `type` value for ordinary events (client-go `v1.EventTypeNormal`).
pub const EVENT_TYPE_NORMAL: &str = "Normal";
/// `type` value for events that may need attention (client-go `v1.EventTypeWarning`).
pub const EVENT_TYPE_WARNING: &str = "Warning";

/// An event as the Broadcaster carries it: one boxed [`Event`] shared by every watcher, as
/// apimachinery's broadcaster hands every watcher the same object pointer. Moving it through
/// the queues moves a pointer, not the 648-byte [`Event`]. A watcher that changes the event (the
/// tenant router: the EventCorrelator rewrites count and name) takes the box with
/// [`Arc::unwrap_or_clone`](std::sync::Arc::unwrap_or_clone): when it is the last holder, that
/// moves a pointer (the correlator's [`Occurrence`](crate::correlator::Occurrence) keeps the
/// same box), else it clones the event. Make one with [`shared`].
pub type SharedEvent = std::sync::Arc<Box<Event>>;

/// `event` as a [`SharedEvent`].
pub fn shared(event: Event) -> SharedEvent {
    std::sync::Arc::new(Box::new(event))
}

/// The two event types the EventRecorder accepts; anything else is dropped as client-go's
/// `generateEvent` does ("Unsupported event type").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// `"Normal"`.
    Normal,
    /// `"Warning"`.
    Warning,
}

impl EventType {
    /// The wire string, `"Normal"` or `"Warning"`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => EVENT_TYPE_NORMAL,
            EventType::Warning => EVENT_TYPE_WARNING,
        }
    }

    /// Parses the wire string, case-sensitively as client-go does; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            EVENT_TYPE_NORMAL => Some(EventType::Normal),
            EVENT_TYPE_WARNING => Some(EventType::Warning),
            _ => None,
        }
    }
}

/// A core/v1 `Event` (`kind: Event`, `apiVersion: v1`), field for field.
///
/// `count` is Go's `int32`; 0 means unset (omitted on the wire). `type` is kept as a string so
/// that foreign values survive a round trip; use [`EventType`] to validate.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// TypeMeta `kind` (`"Event"`); empty when the producer did not set it (omitted).
    #[serde(default, deserialize_with = "nullable", skip_serializing_if = "CompactString::is_empty")]
    pub kind: CompactString,
    /// TypeMeta `apiVersion` (`"v1"`); empty when unset (omitted).
    #[serde(default, deserialize_with = "nullable", skip_serializing_if = "CompactString::is_empty")]
    pub api_version: CompactString,
    /// Standard object metadata.
    #[serde(default, deserialize_with = "nullable")]
    pub metadata: ObjectMeta,
    /// The object this event is about.
    #[serde(default, deserialize_with = "nullable")]
    pub involved_object: ObjectReference,
    /// Short, machine-understandable reason (`"FailedMount"`).
    #[serde(default, deserialize_with = "nullable", skip_serializing_if = "CompactString::is_empty")]
    pub reason: CompactString,
    /// Human-readable description.
    #[serde(default, deserialize_with = "nullable", skip_serializing_if = "CompactString::is_empty")]
    pub message: CompactString,
    /// The component reporting this event (always written, possibly `{}`).
    #[serde(default, deserialize_with = "nullable")]
    pub source: EventSource,
    /// When the event was first recorded; `null` when unset. Written to the second.
    #[serde(default, with = "metav1_time")]
    pub first_timestamp: Option<Time>,
    /// When the most recent occurrence was recorded; `null` when unset. Written to the second.
    #[serde(default, with = "metav1_time")]
    pub last_timestamp: Option<Time>,
    /// Number of occurrences (Go `int32`); 0 is unset and omitted.
    #[serde(default, deserialize_with = "nullable", skip_serializing_if = "is_zero")]
    pub count: i32,
    /// `"Normal"` or `"Warning"` (empty is omitted).
    #[serde(rename = "type", default, deserialize_with = "nullable", skip_serializing_if = "CompactString::is_empty")]
    pub type_: CompactString,
    /// events.k8s.io-style first observation, to the microsecond; `null` when unset.
    #[serde(default, with = "metav1_micro_time")]
    pub event_time: Option<Time>,
    /// events.k8s.io-style series data; omitted when unset. Boxed: few core/v1 events have
    /// one, and the event stays smaller for all the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub series: Option<Box<EventSeries>>,
    /// What action was taken or failed (events.k8s.io); omitted when empty.
    #[serde(default, deserialize_with = "nullable", skip_serializing_if = "CompactString::is_empty")]
    pub action: CompactString,
    /// A secondary object; omitted when unset. Boxed: few events have one, and the event
    /// stays smaller for all the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub related: Option<Box<ObjectReference>>,
    /// Go `ReportingController`; always written (`""` when unset), as the apiserver does.
    #[serde(default, deserialize_with = "nullable")]
    pub reporting_component: CompactString,
    /// The reporting controller's instance; always written.
    #[serde(default, deserialize_with = "nullable")]
    pub reporting_instance: CompactString,
    /// Not part of the API object: the HTTP ingest request's headers, for tenant routing
    /// (`match.headers`). Never serialised, never compared.
    #[serde(skip)]
    pub ingest_headers: IngestHeaders,
    /// Not part of the API object: the instants a replay line gave with the event (its `clock`
    /// and `spam_filter_clock`), which `--clock event` correlates with, as `replay` does. Never
    /// serialised, never compared.
    #[serde(skip)]
    pub recorded_clock: RecordedClock,
    /// Not part of the API object: what the metadata cache attached about the involved object
    /// ([`enrichment`]), for tenant routing (`match.object_labels`, …) and the sinks. Never
    /// serialised with the event, never compared.
    #[serde(skip)]
    pub enrichment: enrichment::Enriched,
}

/// The headers of the HTTP ingest request an [`Event`] came in with, carried beside it from the
/// source through the Broadcaster to the tenant router: `(name, value)` pairs, names lowercase,
/// credentials (`Authorization`, `Cookie`) left out by the source. Empty for events from other
/// sources. Transport metadata, not part of the event's value: any two compare equal. One
/// pointer wide (an `Arc` of a `Vec`, not of a slice): every event carries the field.
#[derive(Debug, Clone, Default)]
pub struct IngestHeaders(Option<std::sync::Arc<Vec<(String, String)>>>);

impl IngestHeaders {
    /// The headers of one ingest request, shared by the events it carried.
    pub fn new(headers: std::sync::Arc<Vec<(String, String)>>) -> Self {
        Self(Some(headers))
    }

    /// The headers, `None` for an event that did not come through HTTP ingest.
    pub fn get(&self) -> Option<&[(String, String)]> {
        self.0.as_deref().map(Vec::as_slice)
    }
}

impl PartialEq for IngestHeaders {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// The instants a replay line (`{"clock": …, "spam_filter_clock"?: …, "event": …}`) gave with
/// its event, carried beside it from the source through the Broadcaster to the tenant router:
/// the aggregator's "now" and the spam filter's. Metadata of the input, not part of the event's
/// value: any two compare equal. One pointer wide (boxed, `None` for events of every other
/// source), so that an [`Event`] stays small.
#[derive(Debug, Clone, Default)]
pub struct RecordedClock(Option<Box<(Time, Option<Time>)>>);

impl RecordedClock {
    /// A replay line's `clock` and `spam_filter_clock` (`None` when it gave no `clock`).
    pub fn new(clock: Option<Time>, spam_filter_clock: Option<Time>) -> Self {
        Self(clock.map(|clock| Box::new((clock, spam_filter_clock))))
    }

    /// The line's `clock`.
    pub fn clock(&self) -> Option<Time> {
        self.0.as_ref().map(|c| c.0)
    }

    /// The line's `spam_filter_clock`, else its `clock`.
    pub fn spam_filter_clock(&self) -> Option<Time> {
        self.0.as_ref().map(|c| c.1.unwrap_or(c.0))
    }
}

impl PartialEq for RecordedClock {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// The `metadata` of an Event. Fields the correlator and sinks use are typed; everything else
/// (labels' siblings such as `ownerReferences`, `managedFields`, `selfLink`, …) is kept in
/// [`ObjectMeta::other`] and written back unchanged.
///
/// Read by hand (in `event/metadata.rs`) rather than derived: serde's derive buffers a whole
/// object with a `flatten` field into an intermediate tree (every key and string copied) before
/// reading it again; this reads each value once, into its field or into `other`. Same rules as
/// the derive: `null` is the zero value, a typed field given twice is an error.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    /// Object name; for events `<involvedObject.name>.<hex unix nanos>`.
    #[serde(skip_serializing_if = "CompactString::is_empty")]
    pub name: CompactString,
    /// Prefix for server-generated names.
    #[serde(skip_serializing_if = "CompactString::is_empty")]
    pub generate_name: CompactString,
    /// Namespace; empty for cluster-scoped.
    #[serde(skip_serializing_if = "CompactString::is_empty")]
    pub namespace: CompactString,
    /// Server-assigned unique id.
    #[serde(skip_serializing_if = "CompactString::is_empty")]
    pub uid: CompactString,
    /// Opaque server version, used for optimistic concurrency.
    #[serde(skip_serializing_if = "CompactString::is_empty")]
    pub resource_version: CompactString,
    /// Server creation time; written as `null` when unset, as Go's non-pointer `metav1.Time`.
    #[serde(serialize_with = "metav1_time::serialize")]
    pub creation_timestamp: Option<Time>,
    /// Labels; omitted when empty. [`Sparse`]: a pointer while empty.
    #[serde(skip_serializing_if = "Sparse::is_empty")]
    pub labels: Sparse<BTreeMap<String, String>>,
    /// Annotations (the EventRecorder's `AnnotatedEventf` sets these); omitted when empty.
    /// [`Sparse`]: a pointer while empty.
    #[serde(skip_serializing_if = "Sparse::is_empty")]
    pub annotations: Sparse<BTreeMap<String, String>>,
    /// Every other metadata field, kept verbatim. [`Sparse`]: a pointer while empty.
    #[serde(flatten)]
    pub other: Sparse<serde_json::Map<String, serde_json::Value>>,
}

/// core/v1 `ObjectReference`: what an event is about. Every field is `omitempty`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    /// Kind of the referent (`"Pod"`).
    #[serde(default, deserialize_with = "nullable", skip_serializing_if = "CompactString::is_empty")]
    pub kind: CompactString,
    /// Namespace of the referent.
    #[serde(default, deserialize_with = "nullable", skip_serializing_if = "CompactString::is_empty")]
    pub namespace: CompactString,
    /// Name of the referent.
    #[serde(default, deserialize_with = "nullable", skip_serializing_if = "CompactString::is_empty")]
    pub name: CompactString,
    /// UID of the referent.
    #[serde(default, deserialize_with = "nullable", skip_serializing_if = "CompactString::is_empty")]
    pub uid: CompactString,
    /// API version of the referent.
    #[serde(default, deserialize_with = "nullable", skip_serializing_if = "CompactString::is_empty")]
    pub api_version: CompactString,
    /// The referent's resourceVersion when the reference was made.
    #[serde(default, deserialize_with = "nullable", skip_serializing_if = "CompactString::is_empty")]
    pub resource_version: CompactString,
    /// A piece of the object (`"spec.containers{app}"`).
    #[serde(default, deserialize_with = "nullable", skip_serializing_if = "CompactString::is_empty")]
    pub field_path: CompactString,
}

/// core/v1 `EventSource`: the reporting component and host. Written even when empty (`{}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EventSource {
    /// Component that generated the event (`"kubelet"`).
    #[serde(default, deserialize_with = "nullable", skip_serializing_if = "CompactString::is_empty")]
    pub component: CompactString,
    /// Node name on which the event was generated.
    #[serde(default, deserialize_with = "nullable", skip_serializing_if = "CompactString::is_empty")]
    pub host: CompactString,
}

/// core/v1 `EventSeries`: occurrence count and the last observation (MicroTime).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventSeries {
    /// Occurrences in the series so far.
    #[serde(default, deserialize_with = "nullable")]
    pub count: i32,
    /// Time of the last occurrence, to the microsecond.
    #[serde(default, with = "metav1_micro_time")]
    pub last_observed_time: Option<Time>,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// Reads `null` as the type's default (Go's zero value), anything else as `T`.
pub(crate) fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// Parses a Kubernetes timestamp (RFC 3339, any fractional precision, any offset).
/// The empty string and Go's zero time (year 1) read as unset, as `metav1.Time` does.
///
/// # Errors
/// A string that is not RFC 3339.
pub fn parse_time(s: &str) -> Result<Option<Time>, chrono::ParseError> {
    if s.is_empty() {
        return Ok(None);
    }
    let t = DateTime::parse_from_rfc3339(s)?.with_timezone(&Utc);
    Ok(if t.timestamp() == GO_ZERO_TIME_UNIX { None } else { Some(t) })
}

/// `time.Time{}` in Go (0001-01-01T00:00:00Z) as Unix seconds.
const GO_ZERO_TIME_UNIX: i64 = -62_135_596_800;

/// Formats as `metav1.Time` does: RFC 3339, UTC, truncated to the second, `Z` suffix.
pub fn format_time(t: &Time) -> String {
    TimeText::seconds(t).as_str().to_owned()
}

/// Formats as `metav1.MicroTime` does: RFC 3339, UTC, six fractional digits, `Z` suffix.
pub fn format_micro_time(t: &Time) -> String {
    TimeText::micros(t).as_str().to_owned()
}

/// A timestamp's wire text, formatted on the stack: what [`format_time`] and
/// [`format_micro_time`] return, without their allocation (serialisation writes one to three
/// per event).
pub struct TimeText {
    bytes: [u8; 27],
    len: u8,
    /// Years outside 0–9999 (chrono writes a sign and more digits) and leap seconds.
    unusual: Option<String>,
}

impl TimeText {
    /// `2024-06-01T00:21:17Z`.
    pub fn seconds(t: &Time) -> Self {
        Self::new(t, false)
    }

    /// `2024-06-01T00:21:17.494265Z`.
    pub fn micros(t: &Time) -> Self {
        Self::new(t, true)
    }

    fn new(t: &Time, micros: bool) -> Self {
        use chrono::{Datelike, Timelike};
        let (year, nanos) = (t.year(), t.nanosecond());
        if !(0..=9999).contains(&year) || nanos >= 1_000_000_000 {
            let unusual = if micros {
                t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
            } else {
                t.to_rfc3339_opts(SecondsFormat::Secs, true)
            };
            return Self { bytes: [0; 27], len: 0, unusual: Some(unusual) };
        }
        let mut bytes = *b"0000-00-00T00:00:00.000000Z";
        let mut put = |at: usize, width: usize, mut n: u32| {
            for i in (at..at + width).rev() {
                bytes[i] = b'0' + (n % 10) as u8;
                n /= 10;
            }
        };
        put(0, 4, year as u32);
        put(5, 2, t.month());
        put(8, 2, t.day());
        put(11, 2, t.hour());
        put(14, 2, t.minute());
        put(17, 2, t.second());
        let len = if micros {
            put(20, 6, nanos / 1000);
            27
        } else {
            bytes[19] = b'Z';
            20
        };
        Self { bytes, len, unusual: None }
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        match &self.unusual {
            Some(text) => text,
            None => std::str::from_utf8(&self.bytes[..usize::from(self.len)]).expect("ASCII digits"),
        }
    }
}

/// Reads an optional timestamp straight from the input's text (no `String` per timestamp).
struct TimeVisitor;

impl<'de> serde::de::Visitor<'de> for TimeVisitor {
    type Value = Option<Time>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Self::Value, E> {
        parse_time(s).map_err(|e| E::custom(format!("invalid timestamp {s:?}: {e}")))
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(TimeVisitor)
    }
}

fn deserialize_time<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Time>, D::Error> {
    d.deserialize_option(TimeVisitor)
}

/// serde for `metav1.Time` fields (`Option<Time>`; `null` when unset).
pub mod metav1_time {
    use super::*;
    use serde::Serializer;

    /// Writes RFC 3339 seconds, or `null`.
    pub fn serialize<S: Serializer>(t: &Option<Time>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.serialize_str(TimeText::seconds(t).as_str()),
            None => s.serialize_none(),
        }
    }

    /// Reads RFC 3339 (any precision), `null`, `""` or Go's zero time.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Time>, D::Error> {
        deserialize_time(d)
    }
}

/// serde for `metav1.MicroTime` fields (`Option<Time>`; `null` when unset).
pub mod metav1_micro_time {
    use super::*;
    use serde::Serializer;

    /// Writes RFC 3339 with microseconds, or `null`.
    pub fn serialize<S: Serializer>(t: &Option<Time>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.serialize_str(TimeText::micros(t).as_str()),
            None => s.serialize_none(),
        }
    }

    /// Reads RFC 3339 (any precision), `null`, `""` or Go's zero time.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Time>, D::Error> {
        deserialize_time(d)
    }
}

impl Event {
    /// The instant this occurrence happened, as best the event tells: `lastTimestamp`, else
    /// `series.lastObservedTime`, else `eventTime`, else `firstTimestamp`. `None` if it has none.
    pub fn occurred_at(&self) -> Option<Time> {
        self.last_timestamp
            .or_else(|| self.series.as_ref().and_then(|s| s.last_observed_time))
            .or(self.event_time)
            .or(self.first_timestamp)
    }
}

/// Maximum length of a DNS-1123 subdomain (Kubernetes object names).
pub const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;

/// Applies `patch` to `target` as an RFC 7386 JSON merge patch: objects merge key by key,
/// `null` removes a key, anything else replaces. For an Event's patch (client-go's `count`,
/// `lastTimestamp`, `message`) this is what the apiserver's strategic merge gives; the HTTP
/// ingest and the watch cache apply patches with it.
pub fn merge_patch(target: &mut serde_json::Value, patch: serde_json::Value) {
    match patch {
        serde_json::Value::Object(fields) => {
            if !target.is_object() {
                *target = serde_json::Value::Object(serde_json::Map::new());
            }
            let object = target.as_object_mut().expect("made an object above");
            for (k, v) in fields {
                if v.is_null() {
                    object.remove(&k);
                } else {
                    merge_patch(object.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
        }
        other => *target = other,
    }
}

/// Whether `name` is a DNS-1123 subdomain: at most 253 characters of `[a-z0-9.-]`, each
/// dot-separated label starting and ending with an alphanumeric character
/// (apimachinery `validation.IsDNS1123Subdomain`).
pub fn is_dns1123_subdomain(name: &str) -> bool {
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !name.is_empty()
        && name.len() <= DNS1123_SUBDOMAIN_MAX_LENGTH
        && name.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty() && alnum(b[0]) && alnum(b[b.len() - 1]) && b.iter().all(|&c| alnum(c) || c == b'-')
        })
}

/// client-go's event name, `fmt.Sprintf("%v.%x", refName, unixNano)`: the name, a dot and the
/// lowercase hex of `unix_nanos` (Go's `UnixNano`, [`crate::clock::go_unix_nano`]) with no `0x`
/// and no padding; a negative value is written as Go writes it, `-` and the hex of its
/// magnitude (Rust's `{:x}` would give the two's complement). The aggregator names its
/// aggregate events so, unchecked.
pub fn event_name(ref_name: &str, unix_nanos: i64) -> String {
    let sign = if unix_nanos < 0 { "-" } else { "" };
    format!("{ref_name}.{sign}{:x}", unix_nanos.unsigned_abs())
}

/// client-go `util.GenerateEventName`: [`event_name`], or a random UUIDv4 when that is not a
/// valid DNS-1123 subdomain (since k8s 1.33).
pub fn generate_event_name(ref_name: &str, unix_nanos: i64) -> String {
    let candidate = event_name(ref_name, unix_nanos);
    if is_dns1123_subdomain(&candidate) { candidate } else { uuid::Uuid::new_v4().to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBELET_LINE: &str = r#"{"kind":"Event","apiVersion":"v1","metadata":{"name":"nginx.1816687efbf1ca00","namespace":"default","uid":"u1","resourceVersion":"1234","creationTimestamp":"2025-01-01T00:00:01Z","managedFields":[{"manager":"kubelet"}]},"involvedObject":{"kind":"Pod","namespace":"default","name":"nginx","uid":"u2","apiVersion":"v1","resourceVersion":"1200","fieldPath":"spec.containers{nginx}"},"reason":"Pulled","message":"pulled","source":{"component":"kubelet","host":"node1"},"firstTimestamp":"2025-01-01T00:00:01Z","lastTimestamp":"2025-01-01T00:00:01Z","count":1,"type":"Normal","eventTime":null,"reportingComponent":"kubelet","reportingInstance":"node1"}"#;

    #[test]
    fn round_trips_the_apiserver_wire_form_byte_for_byte() {
        let e: Event = serde_json::from_str(KUBELET_LINE).unwrap();
        assert_eq!(e.involved_object.field_path, "spec.containers{nginx}");
        assert_eq!(e.metadata.other["managedFields"][0]["manager"], "kubelet");
        assert_eq!(serde_json::to_string(&e).unwrap(), KUBELET_LINE);
    }

    #[test]
    fn nulls_and_missing_fields_read_as_go_zero_values() {
        let e: Event = serde_json::from_str(
            r#"{"metadata":null,"reason":null,"count":null,"source":null,"firstTimestamp":"0001-01-01T00:00:00Z","lastTimestamp":""}"#,
        )
        .unwrap();
        assert_eq!(e, Event::default());
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["firstTimestamp"], serde_json::Value::Null);
        assert_eq!(v["source"], serde_json::json!({}));
        assert_eq!(v["reportingComponent"], "");
        assert!(v.get("count").is_none(), "count is omitempty");
    }

    #[test]
    fn timestamps_keep_precision_in_memory_and_truncate_on_the_wire() {
        let e: Event = serde_json::from_str(
            r#"{"lastTimestamp":"2024-06-01T00:02:22.999999999+02:00","eventTime":"2024-06-01T00:02:22.123456789Z"}"#,
        )
        .unwrap();
        assert_eq!(e.last_timestamp.unwrap().timestamp_subsec_nanos(), 999_999_999);
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["lastTimestamp"], "2024-05-31T22:02:22Z");
        assert_eq!(v["eventTime"], "2024-06-01T00:02:22.123456Z");
    }

    /// The stack formatter writes exactly what chrono writes, for ordinary instants, the
    /// edges of 4-digit years, years outside them and a leap second.
    #[test]
    fn time_text_is_chronos_rfc3339() {
        use chrono::TimeZone;
        let mut instants: Vec<Time> = vec![
            Utc.with_ymd_and_hms(0, 1, 1, 0, 0, 0).unwrap(),
            Utc.with_ymd_and_hms(9999, 12, 31, 23, 59, 59).unwrap() + chrono::Duration::nanoseconds(999_999_999),
            Utc.with_ymd_and_hms(-1, 6, 1, 1, 2, 3).unwrap(),
            Utc.with_ymd_and_hms(10000, 1, 1, 0, 0, 0).unwrap(),
            chrono::NaiveDate::from_ymd_opt(2016, 12, 31)
                .unwrap()
                .and_hms_nano_opt(23, 59, 59, 1_500_000_000)
                .unwrap()
                .and_utc(),
        ];
        let mut nanos: i64 = 1_717_200_077_494_265_694;
        for _ in 0..2000 {
            instants.push(Utc.timestamp_nanos(nanos));
            nanos = nanos.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407) >> 1;
        }
        for t in instants {
            assert_eq!(TimeText::seconds(&t).as_str(), t.to_rfc3339_opts(SecondsFormat::Secs, true), "{t:?}");
            assert_eq!(TimeText::micros(&t).as_str(), t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string(), "{t:?}");
        }
    }

    /// An event is 648 bytes: the rarely set maps and the series are a pointer each while unset.
    /// It fitted jemalloc's 640-byte size class (10 cache lines) until the enrichment pointer
    /// was added; the boxed event now takes the 768-byte class. Folding the enrichment, the
    /// ingest headers and the recorded clock (each rarely set) into one pointer would bring it
    /// back to 632 bytes.
    #[test]
    fn an_event_fits_its_size() {
        assert!(std::mem::size_of::<Event>() <= 648, "{} bytes", std::mem::size_of::<Event>());
        assert_eq!(std::mem::size_of::<crate::event::enrichment::Enriched>(), 8);
        assert_eq!(std::mem::size_of::<Sparse<BTreeMap<String, String>>>(), 8);
        assert_eq!(std::mem::size_of::<IngestHeaders>(), 8);
        assert_eq!(std::mem::size_of::<RecordedClock>(), 8);
    }

    /// A `Sparse` field reads as an empty value while unset, boxes on the first write, and
    /// compares, serialises and deserialises as its value (an empty value stays unset).
    #[test]
    fn sparse_fields_read_write_and_round_trip_as_their_value() {
        let mut m = ObjectMeta::default();
        assert!(m.labels.is_empty() && m.labels.get("a").is_none());
        assert_eq!(m, serde_json::from_str::<ObjectMeta>(r#"{"labels":{},"annotations":null}"#).unwrap());
        m.labels.insert("team".into(), "pay".into());
        assert_eq!(m.labels["team"], "pay");
        assert_ne!(m, ObjectMeta::default());
        let wire = serde_json::to_string(&m).unwrap();
        assert_eq!(wire, r#"{"creationTimestamp":null,"labels":{"team":"pay"}}"#);
        assert_eq!(serde_json::from_str::<ObjectMeta>(&wire).unwrap(), m);
        m.labels.clear();
        assert_eq!(m, ObjectMeta::default(), "an emptied map equals an unset one");
        assert_eq!(serde_json::to_string(&m).unwrap(), r#"{"creationTimestamp":null}"#);
        let collected: Sparse<BTreeMap<String, String>> = [("k".to_string(), "v".to_string())].into_iter().collect();
        assert_eq!((&collected).into_iter().collect::<Vec<_>>(), [(&"k".to_string(), &"v".to_string())]);
    }

    /// The hand-written `metadata` reader reads what serde's derive (with `other` flattened,
    /// as `ObjectMeta` was) reads, and fails where it fails.
    #[test]
    fn metadata_reads_as_the_derived_reader_did() {
        #[derive(Debug, Default, PartialEq, Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Derived {
            #[serde(default, deserialize_with = "nullable")]
            name: CompactString,
            #[serde(default, deserialize_with = "nullable")]
            generate_name: CompactString,
            #[serde(default, deserialize_with = "nullable")]
            namespace: CompactString,
            #[serde(default, deserialize_with = "nullable")]
            uid: CompactString,
            #[serde(default, deserialize_with = "nullable")]
            resource_version: CompactString,
            #[serde(default, with = "metav1_time")]
            creation_timestamp: Option<Time>,
            #[serde(default, deserialize_with = "nullable")]
            labels: BTreeMap<String, String>,
            #[serde(default, deserialize_with = "nullable")]
            annotations: BTreeMap<String, String>,
            #[serde(flatten)]
            other: serde_json::Map<String, serde_json::Value>,
        }
        let inputs = [
            r#"{}"#,
            r#"{"name":"a.1","generateName":"a-","namespace":"ns","uid":"u","resourceVersion":"7","creationTimestamp":"2025-01-01T00:00:01.5Z","labels":{"k":"v"},"annotations":{"x":"y"}}"#,
            r#"{"name":null,"namespace":null,"creationTimestamp":null,"labels":null,"annotations":{},"uid":""}"#,
            r#"{"managedFields":[{"manager":"kubelet","time":"2025-01-01T00:00:01Z"}],"selfLink":"/x","ownerReferences":null,"n":1.5e300}"#,
            r#"{"na\u006de":"escaped","\u0073elfLink":"escaped too","creationTimestamp":"0001-01-01T00:00:00Z"}"#,
            r#"{"name":"a","name":"b"}"#,
            r#"{"labels":{"a":"b"},"labels":{}}"#,
            r#"{"x":1,"x":2}"#,
            r#"{"name":7}"#,
            r#"{"creationTimestamp":"yesterday"}"#,
            r#"{"labels":{"a":1}}"#,
            r#"[]"#,
            r#""name""#,
        ];
        for input in inputs {
            let ours = serde_json::from_str::<ObjectMeta>(input);
            let derived = serde_json::from_str::<Derived>(input);
            match (ours, derived) {
                (Ok(m), Ok(d)) => {
                    let as_derived = Derived {
                        name: m.name,
                        generate_name: m.generate_name,
                        namespace: m.namespace,
                        uid: m.uid,
                        resource_version: m.resource_version,
                        creation_timestamp: m.creation_timestamp,
                        labels: m.labels.into_inner(),
                        annotations: m.annotations.into_inner(),
                        other: m.other.into_inner(),
                    };
                    assert_eq!(as_derived, d, "{input}");
                }
                (Err(_), Err(_)) => {}
                (ours, derived) => panic!("{input}: ours {ours:?}, derived {derived:?}"),
            }
        }
    }

    #[test]
    fn bad_timestamp_is_an_error_naming_the_value() {
        let err = serde_json::from_str::<Event>(r#"{"lastTimestamp":"yesterday"}"#).unwrap_err();
        assert!(err.to_string().contains("\"yesterday\""), "{err}");
    }

    /// Go's `%x` of an `int64`: lowercase hex, no padding, a negative as `-` and its magnitude;
    /// such a name is no DNS-1123 subdomain, so `GenerateEventName` falls back to a UUID.
    #[test]
    fn event_names_write_unix_nanos_as_go_formats_them() {
        assert_eq!(event_name("web-0", 0x17d4_b86e_594e_abb7), "web-0.17d4b86e594eabb7");
        assert_eq!(event_name("web-0", -500_000_000), "web-0.-1dcd6500");
        assert_eq!(event_name("web-0", i64::MIN), "web-0.-8000000000000000");
        assert_eq!(generate_event_name("web-0", 0x1dcd_6500), "web-0.1dcd6500");
        let fallback = generate_event_name("web-0", -500_000_000);
        assert!(uuid::Uuid::parse_str(&fallback).is_ok(), "{fallback}");
    }
}
