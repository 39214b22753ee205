//! One Kubernetes Event as an OTLP log record, named as the OpenTelemetry Collector's
//! `k8s_events` receiver (opentelemetry-collector-contrib `receiver/k8seventsreceiver`,
//! `k8sEventToLogData`) names it, so that what reads that receiver's logs reads these.
//!
//! Each event is one `ResourceLogs` holding one `ScopeLogs` (scope `eventpipe`, the crate's
//! version) holding one `LogRecord`:
//!
//! | where | attribute / field | from |
//! |---|---|---|
//! | resource | `k8s.node.name` | `reportingInstance`, else `source.host` |
//! | resource | `k8s.object.kind`, `.name`, `.uid`, `.fieldpath`, `.api_version`, `.resource_version` | `involvedObject` |
//! | record | `k8s.event.reason`, `k8s.event.action`, `k8s.event.name`, `k8s.event.uid` | `reason`, `action`, `metadata.name`, `metadata.uid` |
//! | record | `k8s.event.start_time` | `metadata.creationTimestamp` as Go's `Time.String()` (`2006-01-02 15:04:05 +0000 UTC`) |
//! | record | `k8s.namespace.name` | `involvedObject.namespace` |
//! | record | `k8s.event.count` (int) | `count`, only when not 0 |
//! | record | `time_unix_nano` | `lastTimestamp`, else `eventTime`, else `creationTimestamp` (the receiver's `getEventTimestamp`) |
//! | record | `observed_time_unix_nano` | when the record was made |
//! | record | `severity_number`, `severity_text` | `type`: `Normal` → INFO (9), `Warning` → WARN (13) (case-insensitive), text as given; others unset |
//! | record | `body` (string) | `message` |
//!
//! With enrichment ([`crate::event::enrichment`]), the resource also gets what it attached,
//! named as the Collector's `k8sattributes` processor names it: `k8s.cluster.name`; for a Pod
//! `k8s.pod.name`, `k8s.pod.uid` and `k8s.pod.labels.<key>`; the top owner as
//! `k8s.deployment.name` / `.uid` (likewise `k8s.statefulset`, `k8s.daemonset`, `k8s.replicaset`,
//! `k8s.job`, `k8s.cronjob`; other kinds as `k8s.<kind, lowercase>.name`); the Pod's node as
//! `k8s.node.name` (in place of the reporting host) and `k8s.node.labels.<key>`.

use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs, SeverityNumber};
use opentelemetry_proto::tonic::resource::v1::Resource;

use crate::event::{Event, Time};

/// The instrumentation scope's name.
pub const SCOPE_NAME: &str = "eventpipe";

fn attribute(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue { key: key.into(), value: Some(AnyValue { value: Some(value) }), ..KeyValue::default() }
}

fn string(key: &str, value: &str) -> KeyValue {
    attribute(key, any_value::Value::StringValue(value.into()))
}

fn nanos(t: &Time) -> u64 {
    t.timestamp_nanos_opt().map_or(0, |n| n.max(0) as u64)
}

/// Go's `time.Time.String()` of a UTC time (`metav1.Time.String()`): `2006-01-02 15:04:05
/// +0000 UTC`, with the fraction of a second trimmed of trailing zeros; a missing time is Go's
/// zero time.
fn go_time_string(t: Option<&Time>) -> String {
    let Some(t) = t else { return "0001-01-01 00:00:00 +0000 UTC".into() };
    let mut text = t.format("%Y-%m-%d %H:%M:%S").to_string();
    let nanos = t.timestamp_subsec_nanos();
    if nanos > 0 {
        let fraction = format!("{nanos:09}");
        text.push('.');
        text.push_str(fraction.trim_end_matches('0'));
    }
    text.push_str(" +0000 UTC");
    text
}

/// Adds (or, for `k8s.node.name`, replaces) the resource attributes of `enrichment` (see the
/// [module docs](self)).
fn enriched(attributes: &mut Vec<KeyValue>, event: &Event, enrichment: &crate::event::enrichment::Enrichment) {
    let o = &event.involved_object;
    if let Some(cluster) = &enrichment.cluster {
        attributes.push(string("k8s.cluster.name", cluster));
    }
    let pod = o.kind == "Pod";
    if pod {
        attributes.push(string("k8s.pod.name", &o.name));
        attributes.push(string("k8s.pod.uid", &o.uid));
    }
    if let Some(owner) = &enrichment.owner {
        let kind = owner.kind.to_ascii_lowercase();
        attributes.push(string(&format!("k8s.{kind}.name"), &owner.name));
        attributes.push(string(&format!("k8s.{kind}.uid"), &owner.uid));
    }
    if pod {
        for (key, value) in enrichment.labels.iter().flatten() {
            attributes.push(string(&format!("k8s.pod.labels.{key}"), value));
        }
    }
    if let Some(node) = &enrichment.node {
        attributes.retain(|kv| kv.key != "k8s.node.name");
        attributes.push(string("k8s.node.name", &node.name));
        for (key, value) in &node.labels {
            attributes.push(string(&format!("k8s.node.labels.{key}"), value));
        }
    }
}

/// The receiver's `getEventTimestamp`: `lastTimestamp`, else `eventTime`, else the creation time.
pub fn event_time(event: &Event) -> Option<&Time> {
    fn set(t: &Option<Time>) -> Option<&Time> {
        t.as_ref().filter(|t| t.timestamp() != 0)
    }
    set(&event.last_timestamp).or(set(&event.event_time)).or(event.metadata.creation_timestamp.as_ref())
}

/// `event` as one OTLP `ResourceLogs` (see the [module docs](self)), observed at
/// `observed_unix_nano` (ns since the Unix epoch).
pub fn resource_logs(event: &Event, observed_unix_nano: u64) -> ResourceLogs {
    let o = &event.involved_object;
    let node = if event.reporting_instance.is_empty() { &event.source.host } else { &event.reporting_instance };
    let resource = Resource {
        attributes: vec![
            string("k8s.node.name", node),
            string("k8s.object.kind", &o.kind),
            string("k8s.object.name", &o.name),
            string("k8s.object.uid", &o.uid),
            string("k8s.object.fieldpath", &o.field_path),
            string("k8s.object.api_version", &o.api_version),
            string("k8s.object.resource_version", &o.resource_version),
        ],
        ..Resource::default()
    };
    let mut resource = resource;
    if let Some(enrichment) = event.enrichment.get() {
        enriched(&mut resource.attributes, event, enrichment);
    }
    let mut attributes = vec![
        string("k8s.event.reason", &event.reason),
        string("k8s.event.action", &event.action),
        string("k8s.event.start_time", &go_time_string(event.metadata.creation_timestamp.as_ref())),
        string("k8s.event.name", &event.metadata.name),
        string("k8s.event.uid", &event.metadata.uid),
        string("k8s.namespace.name", &o.namespace),
    ];
    if event.count != 0 {
        attributes.push(attribute("k8s.event.count", any_value::Value::IntValue(i64::from(event.count))));
    }
    let severity = match event.type_.to_ascii_lowercase().as_str() {
        "normal" => Some(SeverityNumber::Info),
        "warning" => Some(SeverityNumber::Warn),
        _ => None,
    };
    let record = LogRecord {
        time_unix_nano: event_time(event).map_or(0, nanos),
        observed_time_unix_nano: observed_unix_nano,
        severity_number: severity.map_or(0, |s| s as i32),
        severity_text: if severity.is_some() { event.type_.to_string() } else { String::new() },
        body: Some(AnyValue { value: Some(any_value::Value::StringValue(event.message.to_string())) }),
        attributes,
        ..LogRecord::default()
    };
    ResourceLogs {
        resource: Some(resource),
        scope_logs: vec![ScopeLogs {
            scope: Some(InstrumentationScope {
                name: SCOPE_NAME.into(),
                version: env!("CARGO_PKG_VERSION").into(),
                ..InstrumentationScope::default()
            }),
            log_records: vec![record],
            ..ScopeLogs::default()
        }],
        ..ResourceLogs::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
        attrs.iter().find(|kv| kv.key == key).and_then(|kv| kv.value.as_ref()?.value.as_ref())
    }

    /// Enrichment adds the `k8sattributes` processor's names; the node replaces the reporter's.
    #[test]
    fn enrichment_becomes_k8sattributes_resource_attributes() {
        use crate::event::enrichment::{Enriched, Enrichment, Node, Owner};
        let mut event = Event::default();
        event.involved_object.kind = "Pod".into();
        event.involved_object.name = "web-1".into();
        event.involved_object.uid = "u-1".into();
        event.source.host = "reporter".into();
        let plain = resource_logs(&event, 0).resource.unwrap().attributes;
        event.enrichment = Enriched::new(std::sync::Arc::new(Enrichment {
            cluster: Some("prod-eu".into()),
            labels: Some([("team".to_string(), "payments".to_string())].into()),
            owner: Some(Owner {
                kind: "Deployment".into(),
                name: "web".into(),
                uid: "d-1".into(),
                api_version: "apps/v1".into(),
            }),
            node: Some(Node {
                name: "node-a".into(),
                labels: [("topology.kubernetes.io/zone".to_string(), "z1".to_string())].into(),
            }),
            ..Enrichment::default()
        }));
        let attrs = resource_logs(&event, 0).resource.unwrap().attributes;
        let s = |v: &str| any_value::Value::StringValue(v.into());
        assert_eq!(attr(&plain, "k8s.node.name"), Some(&s("reporter")));
        assert_eq!(attr(&plain, "k8s.cluster.name"), None);
        for (key, value) in [
            ("k8s.cluster.name", "prod-eu"),
            ("k8s.pod.name", "web-1"),
            ("k8s.pod.uid", "u-1"),
            ("k8s.deployment.name", "web"),
            ("k8s.deployment.uid", "d-1"),
            ("k8s.pod.labels.team", "payments"),
            ("k8s.node.name", "node-a"),
            ("k8s.node.labels.topology.kubernetes.io/zone", "z1"),
        ] {
            assert_eq!(attr(&attrs, key), Some(&s(value)), "{key}");
        }
        assert_eq!(attrs.iter().filter(|kv| kv.key == "k8s.node.name").count(), 1);
    }

    #[test]
    fn an_event_becomes_the_receivers_record() {
        let mut event = Event::default();
        event.metadata.name = "web-1.17a".into();
        event.metadata.uid = "u-1".into();
        event.metadata.creation_timestamp = Some("2026-11-27T14:00:00.25Z".parse().unwrap());
        event.involved_object.kind = "Pod".into();
        event.involved_object.namespace = "shop".into();
        event.involved_object.name = "web-1".into();
        event.reason = "BackOff".into();
        event.message = "Back-off restarting failed container".into();
        event.type_ = "Warning".into();
        event.count = 3;
        event.source.host = "node-a".into();
        event.last_timestamp = Some("2026-11-27T14:05:00Z".parse().unwrap());
        let logs = resource_logs(&event, 7);
        let resource = logs.resource.as_ref().unwrap();
        let s = |v: &str| any_value::Value::StringValue(v.into());
        assert_eq!(attr(&resource.attributes, "k8s.object.kind"), Some(&s("Pod")));
        assert_eq!(attr(&resource.attributes, "k8s.node.name"), Some(&s("node-a")));
        let record = &logs.scope_logs[0].log_records[0];
        assert_eq!(attr(&record.attributes, "k8s.namespace.name"), Some(&s("shop")));
        assert_eq!(attr(&record.attributes, "k8s.event.reason"), Some(&s("BackOff")));
        assert_eq!(attr(&record.attributes, "k8s.event.count"), Some(&any_value::Value::IntValue(3)));
        assert_eq!(attr(&record.attributes, "k8s.event.start_time"), Some(&s("2026-11-27 14:00:00.25 +0000 UTC")));
        assert_eq!((record.severity_number, record.severity_text.as_str()), (13, "Warning"));
        assert_eq!(record.time_unix_nano, nanos(event.last_timestamp.as_ref().unwrap()));
        assert_eq!(record.observed_time_unix_nano, 7);
        event.type_ = "Custom".into();
        event.count = 0;
        let record = &resource_logs(&event, 7).scope_logs[0].log_records[0];
        assert_eq!((record.severity_number, record.severity_text.as_str()), (0, ""), "unknown types leave it unset");
        assert_eq!(attr(&record.attributes, "k8s.event.count"), None, "count 0 is left out");
    }
}
