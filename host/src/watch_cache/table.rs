//! The apiserver's `Table` of core/v1 Events (`meta.k8s.io/v1` or `v1beta1`), which is what
//! `kubectl get events` asks for (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`) and
//! prints: its columns, their order and `priority` (1: shown only with `-o wide`), and the cells
//! of each row as the apiserver's printer computes them (`pkg/printers/internalversion`:
//! `eventColumnDefinitions`, `printEvent`, `translateTimestampSince`, and apimachinery's
//! `duration.HumanDuration`).
//!
//! | column | cell |
//! |---|---|
//! | Last Seen | age of `lastTimestamp` (else of First Seen; `series.lastObservedTime` when a series is set) |
//! | Type | `type` |
//! | Reason | `reason` |
//! | Object | `kind/name`, the kind in lower case (`kind` alone without a name) |
//! | Subobject (wide) | `involvedObject.fieldPath` |
//! | Source (wide) | `source.component, source.host` (`reportingComponent` / `reportingInstance` where those are empty; no `, ` without a host) |
//! | Message | `message`, surrounding white space trimmed |
//! | First Seen (wide) | age of `firstTimestamp` (else of `eventTime`) |
//! | Count (wide) | `series.count`, else `count`, `0` read as `1` (a number) |
//! | Name (wide) | `metadata.name` |
//!
//! An age is [`human_duration`] of the time since then, `<unknown>` for an unset time. As the
//! apiserver, every row carries all ten cells (it converts with `Wide: true`) and kubectl drops
//! the wide ones unless asked. Each row's `object` follows `includeObject`: the
//! `PartialObjectMetadata` of the event (`Metadata`, the default), the whole event (`Object`,
//! which `kubectl get --sort-by` asks for), or nothing (`None`).

use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::event::{Event, Time};

/// `Accept` parameters that ask for a Table, with the `apiVersion` the Table is served as.
const TABLE_VERSIONS: [(&str, &str); 2] = [("v1", "meta.k8s.io/v1"), ("v1beta1", "meta.k8s.io/v1beta1")];

/// The columns of a core/v1 Event Table, in order: `(name, priority, format, description)`, as
/// the apiserver's `eventColumnDefinitions` (the descriptions are ours). Every column is of type
/// `string`; priority 1 columns are the ones kubectl shows only with `-o wide`.
pub const COLUMNS: [(&str, u8, &str, &str); 10] = [
    ("Last Seen", 0, "", "How long ago the event was last seen (lastTimestamp)."),
    ("Type", 0, "", "The type of the event: Normal or Warning."),
    ("Reason", 0, "", "Why the event happened: a short, machine-readable word."),
    ("Object", 0, "", "The object the event is about (involvedObject), as kind/name."),
    ("Subobject", 1, "", "The part of the object the event is about (involvedObject.fieldPath)."),
    ("Source", 1, "", "The component (and host) that reported the event."),
    ("Message", 0, "", "A human-readable description of what happened."),
    ("First Seen", 1, "", "How long ago the event was first seen (firstTimestamp)."),
    ("Count", 1, "", "How many times the event has happened."),
    ("Name", 1, "name", "The event's name (metadata.name)."),
];

/// What each row's `object` holds (the `includeObject` query parameter).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum IncludeObject {
    /// No object.
    None,
    /// The event's `PartialObjectMetadata` (the apiserver's default).
    #[default]
    Metadata,
    /// The whole event.
    Object,
}

impl IncludeObject {
    /// Parses the `includeObject` query parameter (`None`, `Metadata`, `Object`; unset or empty:
    /// `Metadata`).
    ///
    /// # Errors
    /// The `400 BadRequest` message for any other value, as the apiserver's.
    pub fn parse(value: Option<&str>) -> Result<Self, String> {
        match value.unwrap_or("") {
            "" | "Metadata" => Ok(Self::Metadata),
            "None" => Ok(Self::None),
            "Object" => Ok(Self::Object),
            other => Err(format!("unrecognized includeObject value: {other:?}")),
        }
    }
}

/// The Table `apiVersion` an `Accept` header asks for (`meta.k8s.io/v1` or
/// `meta.k8s.io/v1beta1`), or `None` for the object itself. The media ranges are taken in order,
/// and the first one the read API can serve wins: a Table (`application/json;as=Table;v=…;
/// g=meta.k8s.io`), or plain JSON (`application/json`, `application/*`, `*/*`). Others (protobuf,
/// YAML, `as=PartialObjectMetadata`) are passed over; when none is left, JSON is served.
pub fn table_version(accept: Option<&str>) -> Option<&'static str> {
    for range in accept.unwrap_or("").split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media_type = parts.next().unwrap_or("").to_ascii_lowercase();
        if !matches!(media_type.as_str(), "application/json" | "application/*" | "*/*") {
            continue;
        }
        let (mut as_, mut version, mut group) = (None, None, None);
        for param in parts {
            let (key, value) = param.split_once('=').unwrap_or((param, ""));
            let value = value.trim().trim_matches('"');
            match key.trim().to_ascii_lowercase().as_str() {
                "as" => as_ = Some(value),
                "v" => version = Some(value),
                "g" => group = Some(value),
                _ => {}
            }
        }
        match as_ {
            None => return None,
            Some("Table") if group == Some("meta.k8s.io") => {
                if let Some((_, api_version)) = TABLE_VERSIONS.iter().find(|(v, _)| version == Some(*v)) {
                    return Some(api_version);
                }
            }
            Some(_) => {}
        }
    }
    None
}

/// The `Content-Type` of a Table answer, as the apiserver's
/// (`application/json;as=Table;v=v1;g=meta.k8s.io`).
pub fn content_type(api_version: &str) -> String {
    let version = api_version.rsplit('/').next().unwrap_or("v1");
    format!("application/json;as=Table;v={version};g=meta.k8s.io")
}

/// apimachinery's `duration.HumanDuration`: a duration as kubectl prints ages, with at most two
/// units and fewer digits the older it is (`90s`, `5m30s`, `42m`, `3h15m`, `20h`, `2d3h`, `30d`,
/// `2y40d`, `9y`). Down to 2 s in the future (clock skew) reads `0s`; further is `<invalid>`.
pub fn human_duration(d: chrono::TimeDelta) -> String {
    // Go's integer conversions truncate toward zero, as chrono's `num_*`.
    let seconds = d.num_seconds();
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = d.num_minutes();
    if minutes < 10 {
        return with_rest(minutes, "m", seconds % 60, "s");
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = d.num_hours();
    if hours < 8 {
        return with_rest(hours, "h", minutes % 60, "m");
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        return with_rest(hours / 24, "d", hours % 24, "h");
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        return with_rest(hours / 24 / 365, "y", (hours / 24) % 365, "d");
    }
    format!("{}y", hours / 24 / 365)
}

/// `"{n}{unit}"`, followed by `"{rest}{rest_unit}"` unless `rest` is 0.
fn with_rest(n: i64, unit: &str, rest: i64, rest_unit: &str) -> String {
    let mut out = format!("{n}{unit}");
    if rest != 0 {
        let _ = write!(out, "{rest}{rest_unit}");
    }
    out
}

/// The apiserver's `translateTimestampSince`: the age of `time` at `now`, `<unknown>` when unset.
pub fn age(time: Option<&Time>, now: DateTime<Utc>) -> String {
    time.map_or_else(|| "<unknown>".into(), |t| human_duration(now - *t))
}

/// The ten cells of `event`'s row at `now`, in [`COLUMNS`] order (see the module docs).
pub fn cells(event: &Event, now: DateTime<Utc>) -> [Value; 10] {
    let first_seen = match &event.first_timestamp {
        Some(t) => age(Some(t), now),
        None => age(event.event_time.as_ref(), now),
    };
    let mut last_seen = match &event.last_timestamp {
        Some(t) => age(Some(t), now),
        None => first_seen.clone(),
    };
    let count = match &event.series {
        Some(series) => {
            last_seen = age(series.last_observed_time.as_ref(), now);
            series.count
        }
        None if event.count == 0 => 1,
        None => event.count,
    };
    let object = &event.involved_object;
    let target = if object.name.is_empty() {
        object.kind.to_lowercase().to_string()
    } else {
        format!("{}/{}", object.kind.to_lowercase(), object.name)
    };
    let component = first_non_empty(&event.source.component, &event.reporting_component);
    let instance = first_non_empty(&event.source.host, &event.reporting_instance);
    let source = if instance.is_empty() { component.to_string() } else { format!("{component}, {instance}") };
    [
        last_seen.into(),
        event.type_.as_str().into(),
        event.reason.as_str().into(),
        target.into(),
        object.field_path.as_str().into(),
        source.into(),
        event.message.trim().into(),
        first_seen.into(),
        i64::from(count).into(),
        event.metadata.name.as_str().into(),
    ]
}

fn first_non_empty<'a>(a: &'a str, b: &'a str) -> &'a str {
    if a.is_empty() { b } else { a }
}

/// The `columnDefinitions` of an Event Table.
pub fn column_definitions() -> Value {
    COLUMNS
        .iter()
        .map(|(name, priority, format, description)| {
            json!({"name": name, "type": "string", "format": format, "description": description, "priority": priority})
        })
        .collect()
}

/// One row: the cells, and the object `include` asks for (`api_version`: the Table's, which a
/// `PartialObjectMetadata` takes).
pub fn row(event: &Event, event_json: &[u8], include: IncludeObject, api_version: &str, now: DateTime<Utc>) -> Value {
    let mut row = json!({ "cells": cells(event, now) });
    let object = match include {
        IncludeObject::None => return row,
        IncludeObject::Object => serde_json::from_slice(event_json).expect("the cache's JSON is valid"),
        IncludeObject::Metadata => json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": api_version,
            "metadata": event.metadata,
        }),
    };
    row["object"] = object;
    row
}

/// A Table (`api_version`) with `metadata` (a ListMeta: `resourceVersion`, and `continue` /
/// `remainingItemCount` for a page) and `rows`, serialised.
pub fn table(api_version: &str, metadata: &serde_json::Map<String, Value>, rows: Vec<Value>) -> Vec<u8> {
    let table = json!({
        "kind": "Table",
        "apiVersion": api_version,
        "metadata": metadata,
        "columnDefinitions": column_definitions(),
        "rows": rows,
    });
    serde_json::to_vec(&table).expect("a Table serialises")
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeDelta;

    #[test]
    fn ages_read_as_kubectl_prints_them() {
        let cases = [
            (TimeDelta::seconds(-5), "<invalid>"),
            (TimeDelta::milliseconds(-1500), "0s"),
            (TimeDelta::zero(), "0s"),
            (TimeDelta::seconds(59), "59s"),
            (TimeDelta::seconds(119), "119s"),
            (TimeDelta::minutes(5), "5m"),
            (TimeDelta::seconds(5 * 60 + 30), "5m30s"),
            (TimeDelta::minutes(42), "42m"),
            (TimeDelta::minutes(179), "179m"),
            (TimeDelta::hours(3), "3h"),
            (TimeDelta::minutes(3 * 60 + 15), "3h15m"),
            (TimeDelta::hours(20), "20h"),
            (TimeDelta::hours(48), "2d"),
            (TimeDelta::hours(51), "2d3h"),
            (TimeDelta::days(30), "30d"),
            (TimeDelta::days(730), "2y"),
            (TimeDelta::days(770), "2y40d"),
            (TimeDelta::days(365 * 9), "9y"),
        ];
        for (d, want) in cases {
            assert_eq!(human_duration(d), want, "{d}");
        }
        assert_eq!(age(None, Utc::now()), "<unknown>");
    }

    fn event() -> Event {
        serde_json::from_value(json!({
            "metadata": {"name": "web-0.17cb", "namespace": "shop", "resourceVersion": "7"},
            "involvedObject": {"kind": "Pod", "name": "web-0", "fieldPath": "spec.containers{web}"},
            "reason": "BackOff", "message": "  Back-off restarting  \n", "type": "Warning",
            "source": {"component": "kubelet", "host": "node-1"},
            "firstTimestamp": "2024-05-01T10:00:00Z", "lastTimestamp": "2024-05-01T12:55:00Z", "count": 4,
        }))
        .unwrap()
    }

    #[test]
    fn cells_are_the_apiservers() {
        let now = "2024-05-01T13:00:00Z".parse::<DateTime<Utc>>().unwrap();
        let cells = cells(&event(), now);
        let want = json!([
            "5m",
            "Warning",
            "BackOff",
            "pod/web-0",
            "spec.containers{web}",
            "kubelet, node-1",
            "Back-off restarting",
            "3h",
            4,
            "web-0.17cb"
        ]);
        assert_eq!(Value::from(cells.to_vec()), want);
    }

    #[test]
    fn missing_times_counts_and_hosts_fall_back_as_the_apiservers() {
        let now = "2024-05-03T10:00:00Z".parse::<DateTime<Utc>>().unwrap();
        let mut e = event();
        e.last_timestamp = None;
        e.count = 0;
        e.source.host = "".into();
        e.involved_object.name = "".into();
        let c = cells(&e, now);
        // Last Seen falls back to First Seen; a count of 0 is 1; no host, no comma.
        assert_eq!((c[0].as_str(), c[7].as_str(), &c[8]), (Some("2d"), Some("2d"), &json!(1)));
        assert_eq!((c[3].as_str(), c[5].as_str()), (Some("pod"), Some("kubelet")));
        // Only eventTime: First Seen is its age; nothing at all: <unknown>.
        e.first_timestamp = None;
        e.event_time = Some("2024-05-03T09:58:00Z".parse().unwrap());
        assert_eq!(cells(&e, now)[7], "2m");
        e.event_time = None;
        assert_eq!((cells(&e, now)[0].as_str(), cells(&e, now)[7].as_str()), (Some("<unknown>"), Some("<unknown>")));
        // A series gives Last Seen and Count; reportingComponent stands in for no component.
        e.series = Some(Box::new(crate::event::EventSeries {
            count: 9,
            last_observed_time: Some("2024-05-03T09:00:00Z".parse().unwrap()),
        }));
        e.source.component = "".into();
        e.reporting_component = "scheduler".into();
        let c = cells(&e, now);
        assert_eq!((c[0].as_str(), &c[8], c[5].as_str()), (Some("60m"), &json!(9), Some("scheduler")));
    }

    #[test]
    fn accept_headers_pick_the_first_servable_media_range() {
        let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(table_version(Some(kubectl)), Some("meta.k8s.io/v1"));
        assert_eq!(
            table_version(Some("application/json;as=Table;v=v1beta1;g=meta.k8s.io")),
            Some("meta.k8s.io/v1beta1")
        );
        assert_eq!(table_version(Some("application/json, application/json;as=Table;v=v1;g=meta.k8s.io")), None);
        assert_eq!(
            table_version(Some(
                "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io, application/json; as=Table; v=v1; g=meta.k8s.io"
            )),
            Some("meta.k8s.io/v1")
        );
        assert_eq!(table_version(Some("application/json;as=Table;v=v2;g=meta.k8s.io")), None);
        assert_eq!(table_version(None), None);
        assert_eq!(content_type("meta.k8s.io/v1beta1"), "application/json;as=Table;v=v1beta1;g=meta.k8s.io");
    }

    #[test]
    fn rows_carry_the_object_include_object_asks_for() {
        let e = event();
        let now = Utc::now();
        let bytes = serde_json::to_vec(&e).unwrap();
        let meta = row(&e, &bytes, IncludeObject::Metadata, "meta.k8s.io/v1", now);
        assert_eq!(meta["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(meta["object"]["metadata"]["namespace"], "shop");
        assert_eq!(meta["object"].get("reason"), None);
        let whole = row(&e, &bytes, IncludeObject::Object, "meta.k8s.io/v1", now);
        assert_eq!(whole["object"]["reason"], "BackOff");
        assert_eq!(row(&e, &bytes, IncludeObject::None, "meta.k8s.io/v1", now).get("object"), None);
        assert_eq!(IncludeObject::parse(None), Ok(IncludeObject::Metadata));
        assert!(IncludeObject::parse(Some("All")).unwrap_err().contains("unrecognized includeObject value"));
    }
}
