//! Memoized key plugins: a pure plugin's answer to an input it gave before comes from the memo
//! without calling it; a hot swap starts the memo over; `pure = false` calls the plugin every
//! time. (That the output stays the same is the conformance tests' part: they run the Wasm
//! path with the memo on.)

use std::collections::BTreeMap;

use eventpipe::correlator::{
    ByReason, EventAggregatorKeyFunc, EventAggregatorMessageFunc, EventSpamKeyFunc, SourceObject,
};
use eventpipe::event::{Event, EventSource, ObjectReference};
use eventpipe::plugin::functions::{WasmAggregateKeyFunc, WasmMessageFunc, WasmSpamKeyFunc};
use eventpipe::plugin::{Metering, PluginHandle, PluginOrigin, PluginRuntime, PluginSettings, embedded};

use crate::common;

fn event(name: &str, reason: &str, message: &str) -> Event {
    Event {
        involved_object: ObjectReference {
            kind: "Pod".into(),
            namespace: "ns".into(),
            name: name.into(),
            ..ObjectReference::default()
        },
        reason: reason.into(),
        message: message.into(),
        source: EventSource { component: "kubelet".into(), host: "node-1".into() },
        type_: "Warning".into(),
        ..Event::default()
    }
}

fn runtime() -> PluginRuntime {
    PluginRuntime::new(Metering::Fuel).unwrap()
}

/// The stateful fixture `counter` (a message combiner answering `[call:N] message`, N the
/// messages it combined before) with `settings`.
fn counter(runtime: &PluginRuntime, settings: PluginSettings) -> PluginHandle {
    let plugin = runtime.load_file("counter", &common::fixture_plugin("counter")).unwrap();
    PluginHandle::fixed(plugin, "default", settings)
}

fn messages(combiner: &WasmMessageFunc, events: &[&Event]) -> Vec<String> {
    let mut out = Vec::new();
    combiner.aggregate_messages(events, &mut out);
    out.into_iter().map(|m| m.expect("no failure")).collect()
}

#[test]
fn a_repeated_input_is_answered_from_the_memo_without_calling_the_plugin() {
    let plugin = runtime().load("by-reason", embedded::BY_REASON, PluginOrigin::Embedded).unwrap();
    let handle = PluginHandle::fixed(plugin, "default", PluginSettings::default());
    let key_fn = WasmAggregateKeyFunc::new(handle.clone()).unwrap();
    let (a, b, c) = (event("a", "Started", "m"), event("b", "Started", "m"), event("c", "Pulled", "m"));
    let keys = |events: &[&Event]| {
        let mut out = Vec::new();
        key_fn.aggregate_keys(events, &mut out);
        assert_eq!(out, events.iter().map(|e| Some(ByReason.aggregate_key(e))).collect::<Vec<_>>(), "in order");
    };

    keys(&[&a, &b, &a]);
    let first = handle.stats().snapshot();
    assert_eq!((first.calls, first.events), (1, 2), "`a` went to the plugin once: {first:?}");
    assert_eq!((first.memo_hits, first.memo_misses), (1, 2));

    keys(&[&b, &c, &a]);
    let second = handle.stats().snapshot();
    assert_eq!((second.calls, second.events), (2, 3), "only `c` went to the plugin: {second:?}");
    assert_eq!((second.memo_hits, second.memo_misses), (3, 3));

    keys(&[&c, &a, &b]);
    let third = handle.stats().snapshot();
    assert_eq!((third.calls, third.events, third.fuel_consumed), (2, 3, second.fuel_consumed), "{third:?}");
    assert_eq!(third.memo_hits, 6);

    // The stateful fixture shows it too: its second answer is its first one.
    let combiner = WasmMessageFunc::new(counter(&runtime(), PluginSettings::default())).unwrap();
    assert_eq!(messages(&combiner, &[&a]), ["[call:0] m"]);
    assert_eq!(messages(&combiner, &[&a, &b]), ["[call:0] m", "[call:1] m"]);
    assert_eq!(combiner.aggregate_message(&a), "[call:0] m");
}

#[test]
fn a_plugin_that_declares_its_key_fields_is_remembered_by_those_alone() {
    let plugin = runtime().load("source-object", embedded::SOURCE_OBJECT, PluginOrigin::Embedded).unwrap();
    assert!(plugin.declares_key_fields(), "the default spam key is built against `spam-key-projected`");
    let handle = PluginHandle::fixed(plugin, "default", PluginSettings::default());
    let spam_key_fn = WasmSpamKeyFunc::new(handle.clone()).unwrap();
    let (a, a_again, b) =
        (event("a", "Started", "m"), event("a", "BackOff", "another message"), event("b", "Started", "m"));
    let mut out = Vec::new();
    spam_key_fn.spam_keys(&[&a, &b], &mut out);
    spam_key_fn.spam_keys(&[&a_again], &mut out);
    assert_eq!(out, [&a, &b, &a_again].map(|e| Some(SourceObject.spam_key(e))), "client-go's keys, in order");
    let stats = handle.stats().snapshot();
    assert_eq!(stats.memo_hits, 1, "another reason and message about `a`: the same inputs to this plugin: {stats:?}");
    assert_eq!(stats.events, 2, "only `a` and `b` went to the plugin: {stats:?}");

    // `by-reason` declares that its local key is the message as it is: a new message about `a`
    // is answered from the memo too, with the event's own message as its local key.
    let plugin = runtime().load("by-reason", embedded::BY_REASON, PluginOrigin::Embedded).unwrap();
    assert!(plugin.declares_local_key_field(), "the default aggregate key is built against `aggregate-key-projected`");
    let handle = PluginHandle::fixed(plugin, "default", PluginSettings::default());
    let key_fn = WasmAggregateKeyFunc::new(handle.clone()).unwrap();
    let mut keys = Vec::new();
    let mut moved = event("a", "Started", "m");
    moved.involved_object.field_path = "spec.containers{other}".into();
    let (new_message, other_reason) = (event("a", "Started", "m2"), event("a", "BackOff", "m"));
    let events = [&a, &moved, &new_message, &other_reason];
    key_fn.aggregate_keys(&events, &mut keys);
    assert_eq!(keys, events.map(|e| Some(ByReason.aggregate_key(e))), "client-go's key pairs, in order");
    assert_ne!(keys[0], keys[2], "the local keys are the events' own messages");
    let stats = handle.stats().snapshot();
    assert_eq!(
        (stats.memo_hits, stats.memo_misses, stats.events),
        (2, 2, 2),
        "a field path it does not read and a new message are no new input; a new reason is: {stats:?}"
    );
}

#[test]
fn a_hot_swap_starts_the_memo_over() {
    let runtime = runtime();
    let handle = counter(&runtime, PluginSettings::default());
    let combiner = WasmMessageFunc::new(handle.clone()).unwrap();
    let a = event("a", "Started", "m");
    assert_eq!(messages(&combiner, &[&a, &a]), ["[call:0] m", "[call:0] m"]);

    // Another version under the same name: its answers, not the memo's.
    let tagger = runtime.load_file("counter", &common::fixture_plugin("tagger")).unwrap();
    let counter_v1 = handle.slot().swap(Some(tagger)).unwrap().expect("a version was serving");
    assert_eq!(messages(&combiner, &[&a, &a]), ["[tag:000] m", "[tag:000] m"]);

    // Back to the first version (as when a file is removed and its default serves again):
    // called again, on a fresh instance, not answered with the other version's memo.
    let calls = handle.stats().snapshot().calls;
    handle.slot().swap(Some(counter_v1)).unwrap();
    assert_eq!(messages(&combiner, &[&a]), ["[call:0] m"]);
    assert_eq!(handle.stats().snapshot().calls, calls + 1);
}

#[test]
fn pure_false_calls_the_plugin_on_every_event() {
    // As the config file's `[plugins.counter]` table `pure = false` gives it.
    let table = BTreeMap::from([("pure".to_string(), "false".to_string()), ("x".to_string(), "1".to_string())]);
    let settings = PluginSettings::default().with_plugin_table(table);
    assert!(!settings.pure);
    assert_eq!(settings.config.keys().collect::<Vec<_>>(), ["x"], "`pure` is the host's, not the plugin's");
    let handle = counter(&runtime(), settings);
    let combiner = WasmMessageFunc::new(handle.clone()).unwrap();
    let a = event("a", "Started", "m");
    assert_eq!(messages(&combiner, &[&a, &a]), ["[call:0] m", "[call:1] m"]);
    assert_eq!(messages(&combiner, &[&a]), ["[call:2] m"]);
    let stats = handle.stats().snapshot();
    assert_eq!((stats.calls, stats.events, stats.memo_hits, stats.memo_misses), (2, 3, 0, 0), "{stats:?}");
}

/// On a stream that does not repeat itself the memo does not pay: after
/// `MEMO_PROBE_EVENTS` lookups with (almost) no hit it stands aside for
/// `MEMO_BYPASS_BATCHES` batches (answers come straight from the plugin, unchanged), then looks
/// again; a second such judgement stands it aside for twice as many batches.
#[test]
fn a_memo_that_does_not_pay_stands_aside_then_looks_again() {
    use eventpipe::plugin::{MEMO_BYPASS_BATCHES, MEMO_PROBE_EVENTS};
    let plugin = runtime().load("by-reason", embedded::BY_REASON, PluginOrigin::Embedded).unwrap();
    let handle = PluginHandle::fixed(plugin, "default", PluginSettings::default());
    let key_fn = WasmAggregateKeyFunc::new(handle.clone()).unwrap();
    let mut n = 0;
    let mut batch = |size: usize| {
        let events: Vec<Event> = (0..size)
            .map(|_| {
                n += 1;
                event(&format!("pod-{n}"), "Started", "m")
            })
            .collect();
        let refs: Vec<&Event> = events.iter().collect();
        let mut out = Vec::new();
        key_fn.aggregate_keys(&refs, &mut out);
        assert_eq!(
            out,
            refs.iter().map(|e| Some(ByReason.aggregate_key(e))).collect::<Vec<_>>(),
            "answers never change"
        );
    };
    let looked = || {
        let s = handle.stats().snapshot();
        s.memo_hits + s.memo_misses
    };
    let probe = MEMO_PROBE_EVENTS as usize / 256;
    for _ in 0..probe {
        batch(256);
    }
    assert_eq!(looked(), MEMO_PROBE_EVENTS, "every event looked up while probing");
    let events_before = handle.stats().snapshot().events;
    for _ in 0..MEMO_BYPASS_BATCHES {
        batch(256);
    }
    assert_eq!(looked(), MEMO_PROBE_EVENTS, "no lookup while standing aside");
    assert_eq!(
        handle.stats().snapshot().events - events_before,
        256 * u64::from(MEMO_BYPASS_BATCHES),
        "the plugin answers all"
    );
    batch(256);
    assert_eq!(looked(), MEMO_PROBE_EVENTS + 256, "then it looks again");

    // Still no hits: it stands aside twice as long, and so on up to MEMO_MAX_BYPASS_BATCHES.
    for _ in 1..probe {
        batch(256);
    }
    assert_eq!(looked(), 2 * MEMO_PROBE_EVENTS, "a second probe");
    for _ in 0..2 * MEMO_BYPASS_BATCHES {
        batch(256);
    }
    assert_eq!(looked(), 2 * MEMO_PROBE_EVENTS, "no lookup for twice the batches");
    batch(256);
    assert_eq!(looked(), 2 * MEMO_PROBE_EVENTS + 256, "then it looks again");
}
