//! Runs every `broadcaster` and `watch_filter` scenario of `tests/fixtures/vectors.jsonl` (ported
//! from apimachinery `pkg/watch/mux_test.go` and `filter_test.go`) against
//! `eventpipe::broadcaster`, with `serde_json::Value` objects.
//!
//! An op, option or expectation this interpreter does not know fails the test, so a new vector is
//! never skipped silently. Each scenario runs under a timeout, so a deadlock fails instead of
//! hanging.

use std::collections::BTreeMap;
use std::time::Duration;

use eventpipe::broadcaster::{
    Broadcaster, BroadcasterError, FilteredWatcher, FullChannelBehavior, WatchEvent, WatchEventType, Watcher,
    WatcherStopper, filter,
};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio::time::timeout;

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/vectors.jsonl");
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Go's `watch.DefaultChanSize`: the filter scenarios feed the source through a broadcaster with
/// room for all their events, which gives what Go's blocking `FakeWatcher.Add` gives (no loss).
const FILTER_SOURCE_QUEUE: usize = 100;
const KEEP_UNLESS_B: &str = "keep iff object string does not start with \"b\"";

fn scenarios(kind: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(VECTORS).expect("read vectors.jsonl");
    let found: Vec<Value> = text
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| serde_json::from_str(line).expect("vector line is JSON"))
        .filter(|s: &Value| s["kind"] == kind)
        .collect();
    assert!(!found.is_empty(), "no {kind} scenarios in {VECTORS}");
    found
}

fn name(s: &Value) -> &str {
    s["name"].as_str().expect("scenario name")
}

fn field<'a>(v: &'a Value, key: &str, scenario: &str) -> &'a str {
    v[key].as_str().unwrap_or_else(|| panic!("{scenario}: missing string {key:?} in {v}"))
}

/// The scenario's own deadline ("30s (wait.ForeverTestTimeout)"), else [`DEFAULT_TIMEOUT`].
fn deadline(s: &Value) -> Duration {
    s["expect"]["completes_without_deadlock_within"].as_str().map_or(DEFAULT_TIMEOUT, |text| {
        let secs = text.split('s').next().and_then(|n| n.parse().ok());
        Duration::from_secs(secs.unwrap_or_else(|| panic!("{}: bad deadline {text:?}", name(s))))
    })
}

async fn run_all(kind: &str, run: impl AsyncFn(&Value)) {
    for s in scenarios(kind) {
        timeout(deadline(&s), run(&s)).await.unwrap_or_else(|_| panic!("{}: did not complete (deadlock?)", name(&s)));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn broadcaster_scenarios() {
    run_all("broadcaster", async |s| BroadcasterRun::new(s).run().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watch_filter_scenarios() {
    run_all("watch_filter", run_filter).await;
}

fn event(v: &Value) -> WatchEvent<Value> {
    let type_ = v["type"].as_str().expect("event type").parse().expect("known event type");
    WatchEvent { type_, object: v["object"].clone() }
}

fn event_json(e: WatchEvent<Value>) -> Value {
    json!({ "type": e.type_.as_str(), "object": e.object })
}

/// Lets the distributor take what it can before the next step ("let the distributor settle").
async fn settle() {
    tokio::time::sleep(Duration::from_millis(20)).await;
}

/// When the scenario's watchers read.
#[derive(Clone, Copy, PartialEq)]
enum Reading {
    /// From registration on, each in its own task (Go's test goroutines).
    Concurrent,
    /// Not until a `then_read_all` or `concurrently` step takes them.
    Deferred,
    /// Never ("exactly one watcher, which never reads").
    Never,
}

struct BroadcasterRun<'a> {
    scenario: &'a Value,
    name: &'a str,
    broadcaster: Broadcaster<Value>,
    reading: Reading,
    idle: BTreeMap<String, Watcher<Value>>,
    stoppers: BTreeMap<String, WatcherStopper>,
    readers: BTreeMap<String, JoinHandle<Vec<Value>>>,
    background: Vec<JoinHandle<()>>,
    sent: Vec<Value>,
    errors: Vec<Value>,
}

impl<'a> BroadcasterRun<'a> {
    fn new(scenario: &'a Value) -> Self {
        let name = name(scenario);
        let options = &scenario["options"];
        let queue_length = options["queueLength"].as_u64().expect("queueLength") as usize;
        let behavior = match field(options, "fullChannelBehavior", name) {
            "WaitIfChannelFull" => FullChannelBehavior::WaitIfChannelFull,
            "DropIfChannelFull" => FullChannelBehavior::DropIfChannelFull,
            other => panic!("{name}: unhandled fullChannelBehavior {other}"),
        };
        let broadcaster = match field(options, "constructor", name) {
            "NewBroadcaster" => Broadcaster::new(queue_length, behavior),
            "NewLongQueueBroadcaster" => Broadcaster::new_long_queue(queue_length, behavior),
            other => panic!("{name}: unhandled constructor {other}"),
        };
        Self {
            scenario,
            name,
            broadcaster,
            reading: Self::reading(scenario),
            idle: BTreeMap::new(),
            stoppers: BTreeMap::new(),
            readers: BTreeMap::new(),
            background: Vec::new(),
            sent: Vec::new(),
            errors: Vec::new(),
        }
    }

    fn reading(s: &Value) -> Reading {
        match s["options"]["precondition"].as_str() {
            Some(p) if p.contains("which never reads") => return Reading::Never,
            Some(p) => panic!("{}: unhandled precondition {p:?}", name(s)),
            None => {}
        }
        let steps = s["steps"].as_array().expect("steps");
        let deferring = |op: &Value| op == "then_read_all" || op == "concurrently";
        if steps.iter().any(|step| deferring(&step["op"])) { Reading::Deferred } else { Reading::Concurrent }
    }

    async fn run(mut self) {
        for step in self.scenario["steps"].as_array().expect("steps") {
            self.step(step).await;
        }
        for task in std::mem::take(&mut self.background) {
            task.await.expect("concurrent step");
        }
        let mut received = BTreeMap::new();
        for (id, reader) in std::mem::take(&mut self.readers) {
            received.insert(id, reader.await.expect("reader task"));
        }
        self.check(&received);
    }

    async fn step(&mut self, step: &Value) {
        let b = &self.broadcaster;
        match field(step, "op", self.name) {
            "watch" => {
                let result = b.watch();
                self.adopt(step, result);
            }
            "watch_with_prefix" => {
                let prefix = step["prefix"].as_array().expect("prefix").iter().map(event).collect();
                let result = b.watch_with_prefix(prefix);
                self.adopt(step, result);
            }
            "action" => {
                let e = event(&step["event"]);
                let result = b.action(e.type_, e.object).await;
                self.outcome(step, result);
            }
            "action_or_drop" => {
                let e = event(&step["event"]);
                let result = b.action_or_drop(e.type_, e.object);
                self.record_sent(step, result);
                settle().await;
            }
            "stop" => self.stoppers[field(step, "id", self.name)].stop(),
            "shutdown" => b.shutdown().await,
            "then_read_all" => {
                for (id, w) in std::mem::take(&mut self.idle) {
                    self.readers.insert(id, tokio::spawn(read_all(w)));
                }
            }
            "concurrently" => self.concurrently(step),
            other => panic!("{}: unhandled op {other}", self.name),
        }
    }

    /// Checks `expect_error`; returns the value when the step expects success.
    fn outcome<T: std::fmt::Debug>(&self, step: &Value, result: Result<T, BroadcasterError>) -> Option<T> {
        match step["expect_error"].as_str() {
            Some(text) => {
                let err = result.expect_err(&format!("{}: {step} should fail", self.name));
                assert_eq!(err.to_string(), text, "{}: {step}", self.name);
                None
            }
            None => Some(result.unwrap_or_else(|e| panic!("{}: {step} failed: {e}", self.name))),
        }
    }

    fn adopt(&mut self, step: &Value, result: Result<Watcher<Value>, BroadcasterError>) {
        let Some(w) = self.outcome(step, result) else {
            return;
        };
        let id = field(step, "id", self.name).to_owned();
        self.stoppers.insert(id.clone(), w.stopper());
        match self.reading {
            Reading::Concurrent => {
                self.readers.insert(id, tokio::spawn(read_all(w)));
            }
            Reading::Deferred | Reading::Never => {
                self.idle.insert(id, w);
            }
        }
    }

    fn record_sent(&mut self, step: &Value, result: Result<bool, BroadcasterError>) {
        let sent = matches!(result, Ok(true));
        if let Some(expected) = step.get("expect_sent") {
            assert_eq!(&json!(sent), expected, "{}: {step}", self.name);
        }
        self.outcome(step, result.map(|_| ()));
        self.sent.push(json!(sent));
        self.errors.push(result.err().map_or(Value::Null, |e| json!(e.to_string())));
    }

    /// TestBroadcasterWatcherStopDeadlock: one task takes both watchers; whichever receives first
    /// stops the other, which the distributor may be blocked on.
    fn concurrently(&mut self, step: &Value) {
        let what = field(step, "do", self.name);
        assert!(what.contains("stops the OTHER"), "{}: unhandled concurrently {what:?}", self.name);
        let mut taken = std::mem::take(&mut self.idle).into_values();
        let (Some(mut a), Some(mut b), None) = (taken.next(), taken.next(), taken.next()) else {
            panic!("{}: concurrently needs exactly two idle watchers", self.name)
        };
        self.background.push(tokio::spawn(async move {
            tokio::select! {
                Some(_) = a.recv() => b.stop(),
                Some(_) = b.recv() => a.stop(),
                else => panic!("both watchers closed before either received"),
            }
        }));
    }

    fn check(&self, received: &BTreeMap<String, Vec<Value>>) {
        let expect = self.scenario["expect"].as_object().expect("expect");
        for (key, want) in expect {
            match key.as_str() {
                "derived" | "note" | "completes_without_deadlock_within" => {}
                // Every stop step has run by now without blocking or panicking.
                "extra_stops_are_noops" => assert_eq!(want, true, "{}", self.name),
                "sent" => self.check_sent(want),
                "errors" => assert_eq!(want, &json!(self.errors), "{}: errors", self.name),
                id if self.stoppers.contains_key(id) => check_watcher(self.name, id, want, received),
                other => panic!("{}: unhandled expectation {other}", self.name),
            }
        }
    }

    fn check_sent(&self, want: &Value) {
        assert_eq!(want, &json!(self.sent), "{}: sent", self.name);
        let refused = self.sent.iter().zip(&self.errors).filter(|(s, e)| *s == false && e.is_null());
        let refused = refused.count() as u64;
        assert_eq!(self.broadcaster.incoming_dropped(), refused, "{}: incoming_dropped", self.name);
    }
}

/// Reads a watcher until its stream ends (Go: the result channel is closed).
async fn read_all(mut w: Watcher<Value>) -> Vec<Value> {
    let mut got = Vec::new();
    while let Some(e) = w.recv().await {
        got.push(event_json(e));
    }
    got
}

/// `{"receives": [...], "then_closed": true, "note": ...}` for one watcher. A reader's result
/// exists only once its stream has ended, so its presence proves `then_closed`.
fn check_watcher(scenario: &str, id: &str, want: &Value, received: &BTreeMap<String, Vec<Value>>) {
    let got = received.get(id);
    for (key, value) in want.as_object().expect("watcher expectation") {
        match key.as_str() {
            "note" => {}
            "receives" => {
                let got = got.unwrap_or_else(|| panic!("{scenario}: {id} was never read"));
                assert_eq!(value, &json!(got), "{scenario}: {id} receives");
            }
            "then_closed" if value == true => {
                assert!(got.is_some(), "{scenario}: {id} was never read to its end");
            }
            other => panic!("{scenario}: {id}: unhandled expectation {other}={value}"),
        }
    }
}

/// TestFilter / TestFilterStop: the source is a broadcaster watcher, read through `filter`.
async fn run_filter(s: &Value) {
    let name = name(s);
    let rule = field(&s["options"], "filter", name);
    assert_eq!(rule, KEEP_UNLESS_B, "{name}: unhandled filter");
    let b = Broadcaster::new(FILTER_SOURCE_QUEUE, FullChannelBehavior::WaitIfChannelFull);
    let source = b.watch().expect("watch");
    let source_stopper = source.stopper();
    let filtered = filter(source, |e: WatchEvent<Value>| {
        let object = e.object.as_str().expect("string object");
        (!object.starts_with('b')).then_some(e)
    });
    let filtered_stopper = filtered.stopper();
    let reader = tokio::spawn(read_filtered(filtered));
    for step in s["steps"].as_array().expect("steps") {
        match field(step, "op", name) {
            "action" => {
                let e = event(&step["event"]);
                b.action(e.type_, e.object).await.expect("action");
            }
            "source_stop" => source_stopper.stop(),
            "filtered_stop" => filtered_stopper.stop(),
            other => panic!("{name}: unhandled op {other}"),
        }
    }
    let got = reader.await.expect("filtered reader");
    for (key, want) in s["expect"].as_object().expect("expect") {
        match key.as_str() {
            "derived" | "note" => {}
            "receives" => assert_eq!(want, &json!(got), "{name}: receives"),
            // `got` exists only once the filtered stream has ended.
            "then_closed" => assert_eq!(want, true, "{name}"),
            other => panic!("{name}: unhandled expectation {other}"),
        }
    }
}

async fn read_filtered(mut w: FilteredWatcher<Value>) -> Vec<Value> {
    let mut got = Vec::new();
    while let Some(e) = w.recv().await {
        assert_eq!(e.type_, WatchEventType::Added);
        got.push(e.object);
    }
    got
}
