//! core/v1 `Event` as JSON, in the host's wire form (spec §6.1), without a JSON library.
//!
//! Field order and omission follow the Go types as the apiserver writes them: `omitempty`
//! strings and `count` are left out when empty/zero; `metadata.creationTimestamp`,
//! `firstTimestamp`, `lastTimestamp` and `eventTime` are always written (`null` when unset);
//! `metav1.Time` is RFC 3339 UTC to the second (truncated), `metav1.MicroTime` to the
//! microsecond; `reportingComponent` and `reportingInstance` are always written. Strings are
//! escaped as the host's `serde_json` compact writer does (`"`, `\`, control characters;
//! nothing else), so an event the host would print prints identically here (`kind`,
//! `apiVersion` and metadata fields plugins do not see are not written).

use alloc::string::String;
use core::fmt::Write;

use crate::{Event, EventSeries, ObjectMeta, ObjectReference, StringMap};

/// The event as one line of compact JSON.
pub fn event_to_string(event: &Event) -> String {
    let mut out = String::with_capacity(512);
    write_event(event, &mut out);
    out
}

/// Appends the event as compact JSON.
pub fn write_event(e: &Event, out: &mut String) {
    out.push('{');
    let mut obj = Obj::new(out);
    obj.key("metadata");
    write_meta(&e.metadata, obj.out);
    obj.key("involvedObject");
    write_object_reference(&e.involved_object, obj.out);
    obj.str_omitempty("reason", &e.reason);
    obj.str_omitempty("message", &e.message);
    obj.key("source");
    {
        obj.out.push('{');
        let mut src = Obj::new(obj.out);
        src.str_omitempty("component", &e.source.component);
        src.str_omitempty("host", &e.source.host);
        obj.out.push('}');
    }
    obj.key("firstTimestamp");
    write_time(e.first_timestamp_unix_nanos, obj.out);
    obj.key("lastTimestamp");
    write_time(e.last_timestamp_unix_nanos, obj.out);
    if e.count != 0 {
        obj.key("count");
        let _ = write!(obj.out, "{}", e.count);
    }
    obj.str_omitempty("type", &e.type_);
    obj.key("eventTime");
    write_micro_time(e.event_time_unix_nanos, obj.out);
    if let Some(series) = &e.series {
        obj.key("series");
        write_series(series, obj.out);
    }
    obj.str_omitempty("action", &e.action);
    if let Some(related) = &e.related {
        obj.key("related");
        write_object_reference(related, obj.out);
    }
    obj.key("reportingComponent");
    write_str(&e.reporting_component, obj.out);
    obj.key("reportingInstance");
    write_str(&e.reporting_instance, obj.out);
    out.push('}');
}

fn write_meta(m: &ObjectMeta, out: &mut String) {
    out.push('{');
    let mut obj = Obj::new(out);
    obj.str_omitempty("name", &m.name);
    obj.str_omitempty("generateName", &m.generate_name);
    obj.str_omitempty("namespace", &m.namespace);
    obj.str_omitempty("uid", &m.uid);
    obj.str_omitempty("resourceVersion", &m.resource_version);
    obj.key("creationTimestamp");
    write_time(m.creation_timestamp_unix_nanos, obj.out);
    obj.map_omitempty("labels", &m.labels);
    obj.map_omitempty("annotations", &m.annotations);
    out.push('}');
}

/// Appends a core/v1 `ObjectReference` (every field `omitempty`).
pub fn write_object_reference(r: &ObjectReference, out: &mut String) {
    out.push('{');
    let mut obj = Obj::new(out);
    obj.str_omitempty("kind", &r.kind);
    obj.str_omitempty("namespace", &r.namespace);
    obj.str_omitempty("name", &r.name);
    obj.str_omitempty("uid", &r.uid);
    obj.str_omitempty("apiVersion", &r.api_version);
    obj.str_omitempty("resourceVersion", &r.resource_version);
    obj.str_omitempty("fieldPath", &r.field_path);
    out.push('}');
}

fn write_series(s: &EventSeries, out: &mut String) {
    let _ = write!(out, "{{\"count\":{},\"lastObservedTime\":", s.count);
    write_micro_time(s.last_observed_time_unix_nanos, out);
    out.push('}');
}

/// Appends `s` as a JSON string literal: `"` and `\` escaped, control characters as `\n`,
/// `\t`, `\r`, `\b`, `\f` or `\u00XX` (lowercase hex); everything else verbatim.
pub fn write_str(s: &str, out: &mut String) {
    out.push('"');
    let mut plain = 0;
    for (i, b) in s.bytes().enumerate() {
        let escape = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\t' => "\\t",
            b'\r' => "\\r",
            0x08 => "\\b",
            0x0c => "\\f",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(&s[plain..i]);
        if escape.is_empty() {
            let _ = write!(out, "\\u{:04x}", b);
        } else {
            out.push_str(escape);
        }
        plain = i + 1;
    }
    out.push_str(&s[plain..]);
    out.push('"');
}

/// Appends a `metav1.Time`: `"YYYY-MM-DDTHH:MM:SSZ"` (UTC, truncated to the second) or `null`.
pub fn write_time(unix_nanos: Option<i64>, out: &mut String) {
    write_instant(unix_nanos, false, out);
}

/// Appends a `metav1.MicroTime`: `"YYYY-MM-DDTHH:MM:SS.ffffffZ"` (UTC, truncated to the
/// microsecond) or `null`.
pub fn write_micro_time(unix_nanos: Option<i64>, out: &mut String) {
    write_instant(unix_nanos, true, out);
}

fn write_instant(unix_nanos: Option<i64>, micros: bool, out: &mut String) {
    let Some(nanos) = unix_nanos else {
        out.push_str("null");
        return;
    };
    let secs = nanos.div_euclid(1_000_000_000);
    let subsec = nanos.rem_euclid(1_000_000_000);
    let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    let _ = write!(out, "\"{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}", sod / 3600, sod / 60 % 60, sod % 60);
    if micros {
        let _ = write!(out, ".{:06}", subsec / 1000);
    }
    out.push_str("Z\"");
}

/// (year, month 1–12, day 1–31) of a day count since 1970-01-01 (proleptic Gregorian;
/// Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Writes the members of one JSON object, with commas.
struct Obj<'a> {
    out: &'a mut String,
    first: bool,
}

impl<'a> Obj<'a> {
    fn new(out: &'a mut String) -> Self {
        Self { out, first: true }
    }

    fn key(&mut self, key: &str) {
        if !self.first {
            self.out.push(',');
        }
        self.first = false;
        self.out.push('"');
        self.out.push_str(key);
        self.out.push_str("\":");
    }

    fn str_omitempty(&mut self, key: &str, value: &str) {
        if !value.is_empty() {
            self.key(key);
            write_str(value, self.out);
        }
    }

    fn map_omitempty(&mut self, key: &str, map: &StringMap) {
        if map.is_empty() {
            return;
        }
        self.key(key);
        self.out.push('{');
        for (i, (k, v)) in map.iter().enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            write_str(k, self.out);
            self.out.push(':');
            write_str(v, self.out);
        }
        self.out.push('}');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ObjectReference;
    use alloc::string::ToString;
    use alloc::vec;

    const T0: i64 = 1_735_689_601_000_000_000; // 2025-01-01T00:00:01Z

    #[test]
    fn kubelet_event_matches_the_host_wire_form() {
        let mut e = Event::default();
        e.metadata.name = "nginx.1816687efbf1ca00".into();
        e.metadata.namespace = "default".into();
        e.metadata.uid = "u1".into();
        e.metadata.resource_version = "1234".into();
        e.metadata.creation_timestamp_unix_nanos = Some(T0);
        e.involved_object = ObjectReference {
            kind: "Pod".into(),
            namespace: "default".into(),
            name: "nginx".into(),
            uid: "u2".into(),
            api_version: "v1".into(),
            resource_version: "1200".into(),
            field_path: "spec.containers{nginx}".into(),
        };
        e.reason = "Pulled".into();
        e.message = "pulled".into();
        e.source.component = "kubelet".into();
        e.source.host = "node1".into();
        e.first_timestamp_unix_nanos = Some(T0);
        e.last_timestamp_unix_nanos = Some(T0 + 999_999_999);
        e.count = 1;
        e.type_ = "Normal".into();
        e.reporting_component = "kubelet".into();
        e.reporting_instance = "node1".into();
        // The host's `KUBELET_LINE` test vector without `kind`, `apiVersion` and `managedFields`.
        assert_eq!(
            event_to_string(&e),
            r#"{"metadata":{"name":"nginx.1816687efbf1ca00","namespace":"default","uid":"u1","resourceVersion":"1234","creationTimestamp":"2025-01-01T00:00:01Z"},"involvedObject":{"kind":"Pod","namespace":"default","name":"nginx","uid":"u2","apiVersion":"v1","resourceVersion":"1200","fieldPath":"spec.containers{nginx}"},"reason":"Pulled","message":"pulled","source":{"component":"kubelet","host":"node1"},"firstTimestamp":"2025-01-01T00:00:01Z","lastTimestamp":"2025-01-01T00:00:01Z","count":1,"type":"Normal","eventTime":null,"reportingComponent":"kubelet","reportingInstance":"node1"}"#
        );
    }

    #[test]
    fn empty_event_and_optional_parts() {
        let mut e = Event::default();
        assert_eq!(
            event_to_string(&e),
            r#"{"metadata":{"creationTimestamp":null},"involvedObject":{},"source":{},"firstTimestamp":null,"lastTimestamp":null,"eventTime":null,"reportingComponent":"","reportingInstance":""}"#
        );
        e.metadata.labels = vec![("a".into(), "1".into()), ("b".into(), "2".into())];
        e.metadata.annotations = vec![("x".into(), "\"q\"".into())];
        e.event_time_unix_nanos = Some(1_717_200_142_123_456_789);
        e.series = Some(EventSeries { count: 3, last_observed_time_unix_nanos: None });
        e.action = "Binding".into();
        e.related = Some(ObjectReference { kind: "Node".into(), ..Default::default() });
        assert_eq!(
            event_to_string(&e),
            r#"{"metadata":{"creationTimestamp":null,"labels":{"a":"1","b":"2"},"annotations":{"x":"\"q\""}},"involvedObject":{},"source":{},"firstTimestamp":null,"lastTimestamp":null,"eventTime":"2024-06-01T00:02:22.123456Z","series":{"count":3,"lastObservedTime":null},"action":"Binding","related":{"kind":"Node"},"reportingComponent":"","reportingInstance":""}"#
        );
    }

    #[test]
    fn strings_escape_like_serde_json() {
        let mut s = String::new();
        write_str("a\"b\\c\nd\te\u{1}f\u{7f}ü/</script>\u{2028}", &mut s);
        assert_eq!(s, "\"a\\\"b\\\\c\\nd\\te\\u0001f\u{7f}ü/</script>\u{2028}\"");
    }

    #[test]
    fn times_truncate_and_handle_the_range() {
        let t = |n: i64| {
            let mut s = String::new();
            write_micro_time(Some(n), &mut s);
            s
        };
        assert_eq!(t(0), "\"1970-01-01T00:00:00.000000Z\"");
        assert_eq!(t(-1), "\"1969-12-31T23:59:59.999999Z\"");
        assert_eq!(t(951_782_400_000_000_000), "\"2000-02-29T00:00:00.000000Z\"");
        assert_eq!(t(i64::MAX), "\"2262-04-11T23:47:16.854775Z\"");
        assert_eq!(t(i64::MIN), "\"1677-09-21T00:12:43.145224Z\"");
        let mut s = String::new();
        write_time(Some(-1), &mut s);
        assert_eq!(s, "\"1969-12-31T23:59:59Z\"");
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!("null", {
            let mut s = String::new();
            write_time(None, &mut s);
            s.to_string()
        });
    }
}
