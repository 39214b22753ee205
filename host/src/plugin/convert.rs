//! Conversions between the host's [`Event`] and the WIT records, and the packed batches the key
//! functions exchange (layouts in `wit/types.wit`: `packed-strings`, `key-fields-batch`).

use std::collections::BTreeMap;

use chrono::DateTime;

use super::bindings as wit;
use crate::clock::to_unix_nanos;
use crate::correlator::keys::Key;
use crate::event::{self, Event, Time};

/// Strings per event in a key-fields batch.
pub(crate) const KEY_FIELDS: usize = 13;

/// The key fields of `e`, in the order of `wit/types.wit` `key-fields-batch`.
fn key_fields(e: &Event) -> [&str; KEY_FIELDS] {
    let io = &e.involved_object;
    [
        &e.source.component,
        &e.source.host,
        &io.kind,
        &io.namespace,
        &io.name,
        &io.field_path,
        &io.uid,
        &io.api_version,
        &e.type_,
        &e.reason,
        &e.message,
        &e.reporting_component,
        &e.reporting_instance,
    ]
}

/// Key field `index` of `e`, as [`key_fields`] gives it (a unit test holds the two to one
/// order), `""` past the last one: one field without reading the others.
pub(crate) fn key_field(e: &Event, index: usize) -> &str {
    let io = &e.involved_object;
    match index {
        0 => &e.source.component,
        1 => &e.source.host,
        2 => &io.kind,
        3 => &io.namespace,
        4 => &io.name,
        5 => &io.field_path,
        6 => &io.uid,
        7 => &io.api_version,
        8 => &e.type_,
        9 => &e.reason,
        10 => &e.message,
        11 => &e.reporting_component,
        12 => &e.reporting_instance,
        _ => "",
    }
}

/// The key fields as `event-field`s, in key-fields batch order.
const KEY_EVENT_FIELDS: [wit::EventField; KEY_FIELDS] = {
    use wit::EventField as F;
    [
        F::SourceComponent,
        F::SourceHost,
        F::InvolvedObjectKind,
        F::InvolvedObjectNamespace,
        F::InvolvedObjectName,
        F::InvolvedObjectFieldPath,
        F::InvolvedObjectUid,
        F::InvolvedObjectApiVersion,
        F::Type,
        F::Reason,
        F::Message,
        F::ReportingComponent,
        F::ReportingInstance,
    ]
};

/// Which of the [`KEY_FIELDS`] key fields a key plugin reads: bit `i` is field `i` of a
/// key-fields batch. A plugin of a `*-projected` world declares them (`key-fields`); any other
/// reads them all ([`KeyFields::ALL`]). The host packs an undeclared field as `""`, and a memo
/// keys answers by the declared fields only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyFields(u16);

impl KeyFields {
    /// Every key field: what a plugin of a plain key world gets.
    pub(crate) const ALL: KeyFields = KeyFields((1 << KEY_FIELDS) - 1);

    /// The set a plugin declared as indices into a key-fields batch, or why it is not one: an
    /// index past the 13 key fields.
    pub(crate) fn declared(indices: &[u8]) -> Result<Self, String> {
        let mut bits = 0u16;
        for &index in indices {
            if usize::from(index) >= KEY_FIELDS {
                return Err(format!(
                    "declares key field {index}; a key-fields batch has {KEY_FIELDS} (indices 0 to {})",
                    KEY_FIELDS - 1
                ));
            }
            bits |= 1 << index;
        }
        Ok(KeyFields(bits))
    }

    /// The declared fields of `all` (an event's [`key_fields`]), in batch order.
    fn pick<'a>(self, all: &[&'a str; KEY_FIELDS]) -> impl Iterator<Item = &'a [u8]> {
        let mut bits = self.0;
        std::iter::from_fn(move || {
            (bits != 0).then(|| {
                let index = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                all[index].as_bytes()
            })
        })
    }

    fn contains(self, index: usize) -> bool {
        self.0 & (1 << index) != 0
    }

    /// These fields but field `index`.
    pub(crate) fn without(self, index: usize) -> Self {
        KeyFields(self.0 & !(1 << index))
    }

    /// The index a plugin declared as its local key field (`local-key-field`), or why it is
    /// none: an index past the 13 key fields.
    pub(crate) fn local(index: u8) -> Result<usize, String> {
        Self::declared(&[index]).map(|_| usize::from(index))
    }

    /// The fields as WIT names in batch order, e.g. `source-component, source-host`.
    pub(crate) fn describe(self) -> String {
        if self == Self::ALL {
            return "all 13 key fields".into();
        }
        let declared: Vec<wit::EventField> =
            (0..KEY_FIELDS).filter(|&i| self.contains(i)).map(|i| KEY_EVENT_FIELDS[i].clone()).collect();
        describe_fields(&declared)
    }

    /// Key field `index` by its WIT name, e.g. `message`.
    pub(crate) fn describe_one(index: usize) -> String {
        KEY_EVENT_FIELDS
            .get(index)
            .map_or_else(|| format!("key field {index}"), |f| describe_fields(std::slice::from_ref(f)))
    }
}

/// Packs the key fields of `events` into `out` (its buffers cleared, and reused) as a
/// key-fields batch, `fields` filled and the others `""`: one byte buffer and one end offset
/// per field, in one pass over the fields (one copy each).
///
/// # Errors
/// The batch is larger than the 4 GiB the `u32` offsets address.
pub(crate) fn pack_key_fields(
    out: &mut wit::PackedStrings,
    events: &[&Event],
    fields: KeyFields,
) -> Result<(), String> {
    let wit::PackedStrings { bytes, ends } = out;
    bytes.clear();
    ends.clear();
    ends.reserve(events.len() * KEY_FIELDS);
    for e in events {
        for (i, field) in key_fields(e).into_iter().enumerate() {
            if fields.contains(i) {
                bytes.extend_from_slice(field.as_bytes());
            }
            ends.push(bytes.len() as u32); // checked below: the total fits in u32
        }
    }
    if u32::try_from(bytes.len()).is_err() {
        return Err(format!("a batch of {} bytes is too large for one call", bytes.len()));
    }
    Ok(())
}

/// The digest of the key fields of `e` exactly as a key-fields batch hands them to a plugin
/// that reads `fields`: a [`Key`] of each declared field's length (a LEB128 varint) followed by
/// its bytes, in batch order. Two events whose declared fields differ in any way, even only in
/// where the bytes split between fields, hash different inputs; two that differ only in fields
/// the plugin does not read hash the same. (A memo holds one version's answers, so `fields` is
/// the same for every digest it compares.) `buf` is scratch space, reused across calls.
pub(crate) fn key_fields_digest(e: &Event, fields: KeyFields, buf: &mut Vec<u8>) -> Key {
    // Taking all thirteen at once and picking is faster than a lookup per declared field.
    let all = key_fields(e);
    // The usual input (each declared field under 128 bytes, so its length is one byte, and
    // all of them within `DIGEST_STACK_BYTES`) is written into a stack buffer: a length byte
    // and one copy per field, where `buf` checks its capacity at every write.
    let mut stack = [0u8; DIGEST_STACK_BYTES];
    let mut len = 0;
    for field in fields.pick(&all) {
        let end = len + 1 + field.len();
        if field.len() >= 0x80 || end > DIGEST_STACK_BYTES {
            return key_fields_digest_in(&all, fields, buf);
        }
        stack[len] = field.len() as u8;
        stack[len + 1..end].copy_from_slice(field);
        len = end;
    }
    Key::of_bytes(&stack[..len])
}

/// The stack buffer of [`key_fields_digest`]: the declared key fields of most events fit
/// (`by-reason`'s are ~70 bytes on the synthetic stream and up to ~200 on real ones).
const DIGEST_STACK_BYTES: usize = 256;

/// [`key_fields_digest`] of the fields `all` in `buf`, for any lengths (LEB128 varints of one
/// byte or more).
fn key_fields_digest_in(all: &[&str; KEY_FIELDS], fields: KeyFields, buf: &mut Vec<u8>) -> Key {
    buf.clear();
    for field in fields.pick(all) {
        let mut len = field.len();
        while len >= 0x80 {
            buf.push((len as u8) | 0x80);
            len >>= 7;
        }
        buf.push(len as u8);
        buf.extend_from_slice(field);
    }
    Key::of_bytes(buf)
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

/// The strings of a `packed-strings` result, checked against its rules and against the count
/// the caller expects.
///
/// # Errors
/// A description of the first broken rule (the caller reports it as garbage).
pub(crate) fn unpack(packed: &wit::PackedStrings, expected: usize) -> Result<Vec<&[u8]>, String> {
    let wit::PackedStrings { bytes, ends } = packed;
    if ends.len() != expected {
        return Err(format!("{} strings for {expected} expected", ends.len()));
    }
    let mut start = 0usize;
    let mut out = Vec::with_capacity(expected);
    for (i, &end) in ends.iter().enumerate() {
        let end = end as usize;
        if end < start || end > bytes.len() {
            return Err(format!("string {i} ends at {end}, outside {start}..={}", bytes.len()));
        }
        out.push(&bytes[start..end]);
        start = end;
    }
    if start != bytes.len() {
        return Err(format!("{} bytes after the last string", bytes.len() - start));
    }
    Ok(out)
}

fn nanos(t: Option<Time>) -> Option<i64> {
    t.map(to_unix_nanos)
}

fn time(n: Option<i64>) -> Option<Time> {
    n.map(DateTime::from_timestamp_nanos)
}

fn pairs(m: &BTreeMap<String, String>) -> Vec<(String, String)> {
    m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn reference(r: &event::ObjectReference) -> wit::ObjectReference {
    wit::ObjectReference {
        kind: r.kind.to_string(),
        namespace: r.namespace.to_string(),
        name: r.name.to_string(),
        uid: r.uid.to_string(),
        api_version: r.api_version.to_string(),
        resource_version: r.resource_version.to_string(),
        field_path: r.field_path.to_string(),
    }
}

fn from_reference(r: wit::ObjectReference) -> event::ObjectReference {
    event::ObjectReference {
        kind: r.kind.into(),
        namespace: r.namespace.into(),
        name: r.name.into(),
        uid: r.uid.into(),
        api_version: r.api_version.into(),
        resource_version: r.resource_version.into(),
        field_path: r.field_path.into(),
    }
}

/// The WIT record of an event (metadata beyond the typed fields stays in the host).
pub(crate) fn to_wit(e: &Event) -> wit::Event {
    let m = &e.metadata;
    wit::Event {
        metadata: wit::ObjectMeta {
            name: m.name.to_string(),
            generate_name: m.generate_name.to_string(),
            namespace: m.namespace.to_string(),
            uid: m.uid.to_string(),
            resource_version: m.resource_version.to_string(),
            creation_timestamp_unix_nanos: nanos(m.creation_timestamp),
            labels: pairs(&m.labels),
            annotations: pairs(&m.annotations),
        },
        involved_object: reference(&e.involved_object),
        reason: e.reason.to_string(),
        message: e.message.to_string(),
        source: wit::EventSource { component: e.source.component.to_string(), host: e.source.host.to_string() },
        first_timestamp_unix_nanos: nanos(e.first_timestamp),
        last_timestamp_unix_nanos: nanos(e.last_timestamp),
        count: e.count,
        type_: e.type_.to_string(),
        event_time_unix_nanos: nanos(e.event_time),
        series: e
            .series
            .as_ref()
            .map(|s| wit::EventSeries { count: s.count, last_observed_time_unix_nanos: nanos(s.last_observed_time) }),
        action: e.action.to_string(),
        related: e.related.as_deref().map(reference),
        reporting_component: e.reporting_component.to_string(),
        reporting_instance: e.reporting_instance.to_string(),
    }
}

/// The host event for a WIT record a plugin returned; `like` supplies what the record cannot
/// carry (TypeMeta and metadata fields other than the typed ones).
pub(crate) fn from_wit(w: wit::Event, like: &Event) -> Event {
    let mut metadata = like.metadata.clone();
    metadata.name = w.metadata.name.into();
    metadata.generate_name = w.metadata.generate_name.into();
    metadata.namespace = w.metadata.namespace.into();
    metadata.uid = w.metadata.uid.into();
    metadata.resource_version = w.metadata.resource_version.into();
    metadata.creation_timestamp = time(w.metadata.creation_timestamp_unix_nanos);
    metadata.labels = w.metadata.labels.into_iter().collect();
    metadata.annotations = w.metadata.annotations.into_iter().collect();
    Event {
        kind: like.kind.clone(),
        api_version: like.api_version.clone(),
        metadata,
        involved_object: from_reference(w.involved_object),
        reason: w.reason.into(),
        message: w.message.into(),
        source: event::EventSource { component: w.source.component.into(), host: w.source.host.into() },
        first_timestamp: time(w.first_timestamp_unix_nanos),
        last_timestamp: time(w.last_timestamp_unix_nanos),
        count: w.count,
        type_: w.type_.into(),
        event_time: time(w.event_time_unix_nanos),
        series: w.series.map(|s| {
            Box::new(event::EventSeries { count: s.count, last_observed_time: time(s.last_observed_time_unix_nanos) })
        }),
        action: w.action.into(),
        related: w.related.map(|r| Box::new(from_reference(r))),
        reporting_component: w.reporting_component.into(),
        reporting_instance: w.reporting_instance.into(),
        ingest_headers: like.ingest_headers.clone(),
        recorded_clock: like.recorded_clock.clone(),
        enrichment: like.enrichment.clone(),
    }
}

/// `namespace/name` of an event, for error messages.
pub(crate) fn describe(e: &Event) -> String {
    let name = if e.metadata.name.is_empty() { "<unnamed>" } else { &e.metadata.name };
    if e.metadata.namespace.is_empty() { name.to_string() } else { format!("{}/{name}", e.metadata.namespace) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_fields_pack_in_wit_order_and_unpack_back() {
        let mut e = Event { reason: "R".into(), message: "m".into(), type_: "Normal".into(), ..Event::default() };
        e.source.component = "kubelet".into();
        e.involved_object.name = "pod".into();
        let mut packed = wit::PackedStrings { bytes: Vec::new(), ends: Vec::new() };
        pack_key_fields(&mut packed, &[&e, &e], KeyFields::ALL).unwrap();
        let strings = unpack(&packed, 2 * KEY_FIELDS).unwrap();
        assert_eq!(strings[0], b"kubelet");
        assert_eq!(strings[4], b"pod");
        assert_eq!(strings[KEY_FIELDS + 10], b"m");
    }

    #[test]
    fn key_fields_digest_tells_apart_fields_that_concatenate_alike() {
        let mut buf = Vec::new();
        let e = Event { reason: "ab".into(), message: "c".into(), ..Event::default() };
        let moved = Event { reason: "a".into(), message: "bc".into(), ..Event::default() };
        let all = KeyFields::ALL;
        let digest = key_fields_digest(&e, all, &mut buf);
        assert_ne!(digest, key_fields_digest(&moved, all, &mut buf), "lengths are part of the input");
        let long = Event { reason: "r".repeat(300).into(), message: "r".into(), ..e.clone() };
        let longer = Event { reason: "r".repeat(301).into(), message: "".into(), ..e.clone() };
        assert_ne!(
            key_fields_digest(&long, all, &mut buf),
            key_fields_digest(&longer, all, &mut buf),
            "the same bytes split elsewhere, lengths of two bytes"
        );
        assert_eq!(digest, key_fields_digest(&e.clone(), all, &mut buf), "same fields, same digest");
        let mut not_sent = e.clone();
        not_sent.metadata.name = "other".into();
        not_sent.count = 7;
        assert_eq!(digest, key_fields_digest(&not_sent, all, &mut buf), "only the fields a plugin receives count");
    }

    /// The digest is the key of each declared field's LEB128 length followed by its bytes, with
    /// lengths of one varint byte or two.
    #[test]
    fn key_fields_digest_is_the_key_of_each_length_then_its_bytes() {
        let expected = |e: &Event| {
            let mut bytes = Vec::new();
            for f in key_fields(e) {
                let mut len = f.len();
                while len >= 0x80 {
                    bytes.push((len as u8) | 0x80);
                    len >>= 7;
                }
                bytes.push(len as u8);
                bytes.extend_from_slice(f.as_bytes());
            }
            Key::of_bytes(&bytes)
        };
        let mut buf = Vec::new();
        let short = Event { reason: "BackOff".into(), message: "m".into(), ..Event::default() };
        let long = Event { message: "x".repeat(200).into(), reason: "y".repeat(150).into(), ..short.clone() };
        // Short fields that together overflow the stack buffer, and a long field after short
        // ones: both go on in the growable buffer.
        let many = Event {
            message: "m".repeat(100).into(),
            reason: "r".repeat(100).into(),
            type_: "t".repeat(100).into(),
            ..short.clone()
        };
        let late = Event { reporting_instance: "i".repeat(128).into(), ..short.clone() };
        for e in [&short, &long, &many, &late] {
            assert_eq!(key_fields_digest(e, KeyFields::ALL, &mut buf), expected(e));
        }
    }

    /// One key field by index is that field of the whole list, and a local key field past the
    /// 13 is refused; taking it out of a declaration leaves the others.
    #[test]
    fn one_key_field_and_the_local_key_field() {
        let mut e = Event { message: "m".into(), reason: "R".into(), ..Event::default() };
        e.involved_object.field_path = "spec".into();
        e.reporting_instance = "ri".into();
        let all = key_fields(&e);
        for (i, field) in all.iter().enumerate() {
            assert_eq!(key_field(&e, i), *field, "field {i}");
        }
        assert_eq!(key_field(&e, KEY_FIELDS), "");
        assert_eq!(KeyFields::local(10), Ok(10));
        assert!(KeyFields::local(13).unwrap_err().contains("declares key field 13"));
        let without = KeyFields::ALL.without(10);
        assert!((0..KEY_FIELDS).all(|i| without.contains(i) == (i != 10)), "every field but the message");
        assert_eq!(KeyFields::describe_one(10), "message");
    }

    #[test]
    fn declared_key_fields_are_packed_and_digested_alone() {
        let reads = KeyFields::declared(&[9, 0, 9]).unwrap();
        assert_eq!(reads.describe(), "source-component, reason");
        let mut e = Event { reason: "R".into(), message: "m".into(), type_: "Normal".into(), ..Event::default() };
        e.source.component = "kubelet".into();
        e.involved_object.name = "pod".into();
        let mut packed = wit::PackedStrings { bytes: b"left from the last batch".to_vec(), ends: vec![3, 9] };
        pack_key_fields(&mut packed, &[&e], reads).unwrap();
        let strings = unpack(&packed, KEY_FIELDS).unwrap();
        let expected: Vec<&[u8]> = (0..KEY_FIELDS)
            .map(|i| match i {
                0 => &b"kubelet"[..],
                9 => b"R",
                _ => b"",
            })
            .collect();
        assert_eq!(strings, expected, "undeclared fields go as empty strings, in place");
        let mut buf = Vec::new();
        assert_eq!(
            key_fields_digest(&e, reads, &mut buf),
            Key::of_bytes(b"\x07kubelet\x01R"),
            "each declared field's length, then its bytes, in batch order"
        );
        let other_message = Event { message: "another".into(), ..e.clone() };
        assert_eq!(key_fields_digest(&e, reads, &mut buf), key_fields_digest(&other_message, reads, &mut buf));
        assert_ne!(
            key_fields_digest(&e, KeyFields::ALL, &mut buf),
            key_fields_digest(&other_message, KeyFields::ALL, &mut buf)
        );
        let other_reason = Event { reason: "S".into(), ..e.clone() };
        assert_ne!(key_fields_digest(&e, reads, &mut buf), key_fields_digest(&other_reason, reads, &mut buf));
        assert_eq!(KeyFields::declared(&(0..13).collect::<Vec<u8>>()), Ok(KeyFields::ALL));
        assert_eq!(KeyFields::declared(&[]).unwrap().describe(), "no fields");
        let error = KeyFields::declared(&[9, 13]).unwrap_err();
        assert_eq!(error, "declares key field 13; a key-fields batch has 13 (indices 0 to 12)");
    }

    #[test]
    fn unpack_rejects_every_broken_rule() {
        let p = |bytes: &[u8], ends: &[u32]| wit::PackedStrings { bytes: bytes.to_vec(), ends: ends.to_vec() };
        assert!(unpack(&p(b"ab", &[1, 2]), 3).unwrap_err().contains("2 strings for 3"));
        assert!(unpack(&p(b"ab", &[2, 1]), 2).unwrap_err().contains("outside"));
        assert!(unpack(&p(b"ab", &[1, 9]), 2).unwrap_err().contains("outside"));
        assert!(unpack(&p(b"abc", &[1, 2]), 2).unwrap_err().contains("after the last"));
        assert_eq!(unpack(&p(b"", &[0, 0]), 2).unwrap(), vec![&b""[..], &b""[..]]);
    }

    #[test]
    fn wit_record_round_trips_the_typed_fields() {
        let line = r#"{"kind":"Event","apiVersion":"v1","metadata":{"name":"p.1","namespace":"ns","labels":{"a":"b"},"managedFields":[1]},"involvedObject":{"kind":"Pod","name":"p","fieldPath":"spec"},"reason":"R","message":"m","source":{"component":"c","host":"h"},"firstTimestamp":"2025-01-01T00:00:01Z","lastTimestamp":"2025-01-01T00:00:02Z","count":3,"type":"Warning","eventTime":"2025-01-01T00:00:01.123456Z","action":"A","related":{"name":"r"},"reportingComponent":"rc","reportingInstance":"ri"}"#;
        let e: Event = serde_json::from_str(line).unwrap();
        assert_eq!(from_wit(to_wit(&e), &e), e);
    }
}
