//! The `correlator` and `keys` scenarios of client-go's tests (`tests/fixtures/vectors.jsonl`),
//! run through the EventCorrelator step by step.

use std::sync::Arc;

use eventpipe::correlator::keys::{
    aggregate_by_reason, aggregate_by_reason_message, event_cache_key, event_key, spam_key, spam_key_with_type,
};
use eventpipe::correlator::{CorrelatorOptions, EventCorrelator, EventSpamKeyFunc, Occurrence};
use eventpipe::event::{Event, Time, format_time};
use serde_json::{Value, json};

use crate::common;

fn time(v: &Value) -> Time {
    v.as_str().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("not a time: {v}"))
}

fn int(options: &Value, key: &str) -> i64 {
    options.get(key).and_then(Value::as_i64).unwrap_or(0)
}

/// A spam key function concatenating the given dotted field paths of the event's JSON form,
/// the way client-go's test builds its custom `SpamKeyFunc`.
fn spam_key_from_fields(fields: Vec<String>) -> Arc<dyn EventSpamKeyFunc> {
    Arc::new(move |e: &Event| {
        let v = serde_json::to_value(e).unwrap();
        fields
            .iter()
            .map(|f| v.pointer(&format!("/{}", f.replace('.', "/"))).and_then(Value::as_str).unwrap_or("").to_string())
            .collect::<String>()
    })
}

fn options(scenario: &Value) -> CorrelatorOptions {
    let o = &scenario["options"];
    let qps = match o["QPS"].as_str() {
        Some(s) if s.starts_with("1/300") || s.starts_with("0 ") => 0.0, // the default, by zero value
        Some(other) => panic!("unknown QPS {other}"),
        None => 0.0,
    };
    let spam_key_func = match o["SpamKeyFunc"].as_str() {
        // The vectors list HEAD's fields (with `type`); their events are all Normal, so the
        // default (v0.26, no `type`) gives the same outcomes.
        Some("getSpamKey") | None => None,
        Some(_) => {
            let fields = serde_json::from_value(o["spamKeyFields"].clone()).expect("custom spam key needs its fields");
            Some(spam_key_from_fields(fields))
        }
    };
    CorrelatorOptions {
        lru_cache_size: int(o, "LRUCacheSize"),
        burst_size: int(o, "BurstSize"),
        qps,
        max_events: int(o, "MaxEvents"),
        max_interval_in_seconds: int(o, "MaxIntervalInSeconds"),
        spam_key_func,
        ..CorrelatorOptions::default()
    }
}

fn check_step(
    name: &str,
    i: usize,
    expect: &Value,
    event: Option<&Value>,
    aggregated: bool,
    patch: &Value,
    logger_count: Option<i32>,
) {
    let ctx = format!("{name} step {i}");
    let get = |k: &str| expect.get(k).filter(|v| !v.is_null());
    if let Some(skip) = get("skip") {
        assert_eq!(skip.as_bool(), Some(event.is_none()), "{ctx}: skip");
    }
    if let Some(n) = get("logger_cached_count_after") {
        assert_eq!(logger_count.map(i64::from), n.as_i64(), "{ctx}: logger count after");
    }
    if let Some(a) = get("name_is_aggregate") {
        assert_eq!(a.as_bool(), Some(aggregated), "{ctx}: aggregated");
    }
    let Some(e) = event else { return };
    let count = e["count"].as_i64().unwrap_or(0);
    if let Some(c) = get("count") {
        assert_eq!(c.as_i64(), Some(count), "{ctx}: count");
    }
    if let Some(m) = get("message") {
        assert_eq!(&e["message"], m, "{ctx}: message");
    }
    if let Some(f) = get("first_equals_last") {
        assert_eq!(f.as_bool(), Some(e["firstTimestamp"] == e["lastTimestamp"]), "{ctx}: first == last");
    }
    if let Some(p) = get("name_prefix") {
        assert!(e["metadata"]["name"].as_str().unwrap_or("").starts_with(p.as_str().unwrap()), "{ctx}: name prefix");
    }
    for (key, path) in [
        ("name", "/metadata/name"),
        ("namespace", "/metadata/namespace"),
        ("firstTimestamp", "/firstTimestamp"),
        ("lastTimestamp", "/lastTimestamp"),
    ] {
        if let Some(want) = expect.get(key) {
            let got = e.pointer(path).cloned().unwrap_or(Value::Null);
            common::json_matches(want, &got, false, key).unwrap_or_else(|err| panic!("{ctx}: {err}"));
        }
    }
    if let Some(sub) = get("event") {
        common::json_matches(sub, e, true, "event").unwrap_or_else(|err| panic!("{ctx}: {err}"));
    }
    if let Some(call) = get("sink_call") {
        assert_eq!(call.as_str(), Some(if count > 1 { "patch" } else { "create" }), "{ctx}: sink call");
    }
    if expect.get("patch").is_some() {
        assert_eq!(patch, &expect["patch"], "{ctx}: patch");
    }
    if let Some(fields) = get("patch_fields") {
        let got: Vec<&String> = patch.as_object().map(|m| m.keys().collect()).unwrap_or_default();
        let want: Vec<&str> = fields.as_array().unwrap().iter().filter_map(Value::as_str).collect();
        assert_eq!(got, want, "{ctx}: patch fields");
    }
}

#[test]
fn correlator_scenarios_match_client_go() {
    let scenarios = common::scenarios("correlator");
    assert_eq!(scenarios.len(), 12);
    for ((path, functions), scenario) in
        common::correlator_paths().into_iter().flat_map(|p| scenarios.iter().map(move |s| (p, s)))
    {
        let name = &format!("{} [{path}]", scenario["name"].as_str().unwrap());
        let mut correlator = EventCorrelator::new(functions(options(scenario)));
        for (i, step) in scenario["steps"].as_array().unwrap().iter().enumerate() {
            let event: Event = serde_json::from_value(step["event"].clone()).expect("step event");
            let occurrence = Occurrence {
                event: Box::new(event.clone()),
                clock: Some(time(&step["clock"])),
                spam_filter_clock: Some(time(&step["spam_filter_clock"])),
            };
            let prepared = correlator.prepare(vec![occurrence]).pop().unwrap();
            let aggregated = prepared.aggregated();
            let result = correlator.finish(prepared);
            let event_json = result.event.as_ref().map(|e| serde_json::to_value(e).unwrap());
            let patch = serde_json::to_value(&result.patch).unwrap();
            let logger_count = correlator.logger().cached_count(event_cache_key(&event));
            for block in ["expect", "expect_derived"] {
                if let Some(expect) = step.get(block) {
                    check_step(name, i, expect, event_json.as_ref(), aggregated, &patch, logger_count);
                }
            }
            if step["update_state_after"] == true && !result.skip {
                correlator.update_state(result.event.as_ref().unwrap());
            }
        }
    }
}

#[test]
fn key_functions_match_client_go() {
    for scenario in common::scenarios("keys") {
        let mut computed = Vec::new();
        for step in scenario["steps"].as_array().unwrap() {
            let e: Event = serde_json::from_value(step["event"].clone()).unwrap();
            let (aggregate, local) = aggregate_by_reason(&e);
            // The vector derives `spamKey` from client-go HEAD (≥ 1.32, with `type`).
            let got = json!({
                "eventKey": event_key(&e), "spamKey": spam_key_with_type(&e), "aggregateKey": aggregate,
                "localKey": local, "aggregateMessage": aggregate_by_reason_message(&e),
            });
            for k in ["eventKey", "spamKey", "aggregateKey", "localKey", "aggregateMessage"] {
                assert_eq!(got[k], step["expect"][k], "{k} of {}", step["event"]["message"]);
            }
            assert_eq!(spam_key(&e) + &e.type_, spam_key_with_type(&e), "v0.26 key is HEAD's without type");
            computed.push((aggregate, local));
        }
        let asserted = &scenario["asserted"];
        assert_eq!(asserted["aggregateKey[0] == aggregateKey[1]"], computed[0].0 == computed[1].0);
        assert_eq!(asserted["localKey[0] != localKey[1]"], computed[0].1 != computed[1].1);
        assert_eq!(asserted["aggregateKey[0] != aggregateKey[2]"], computed[0].0 != computed[2].0);
    }
}

#[test]
fn wire_timestamps_are_whole_seconds() {
    // The replay compares timestamps to the second; make sure what we write is exactly that.
    assert_eq!(format_time(&"2025-01-01T00:00:05.999Z".parse().unwrap()), "2025-01-01T00:00:05Z");
}
