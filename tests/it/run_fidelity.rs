//! `run` writes each object what `replay` (client-go's sequential `recordToSink` loop) writes,
//! whatever the sink's latency, concurrency and failures — also while objects outnumber the
//! EventLogger's LRU cache, so that which entry is evicted depends on the order of `UpdateState`.
//! On the real-event stream of the shared conformance suite (18,930 objects, default 4,096-entry
//! caches) when it is beside the repository.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common::recording_webhook::{self, Answers, object_key, write};
use crate::common::{read_maybe_gz, shared_conformance};

/// Per object (`namespace/name`), its writes: verb, count, message, reason, lastTimestamp.
type Writes = BTreeMap<String, Vec<Value>>;

/// A lastTimestamp as Unix seconds (both sides write RFC 3339 seconds; compared as instants).
fn seconds(v: &Value) -> Value {
    v.as_str()
        .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
        .map_or(Value::Null, |t| Value::from(t.timestamp()))
}

/// Writes as compared: the lastTimestamp as an instant.
fn normalised(mut writes: Writes) -> Writes {
    for w in writes.values_mut().flatten() {
        w[4] = seconds(&w[4]);
    }
    writes
}

/// client-go's writes per object from its whole-stream output: each result not skipped is one
/// write, a patch when its count is over 1 (`recordToSink`'s `updateExistingEvent`).
fn client_go_writes(output: &[u8]) -> Writes {
    let mut writes = Writes::new();
    for line in output.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let r: Value = serde_json::from_slice(line).unwrap();
        let e = &r["event"];
        if r["skip"] == true || e.is_null() {
            continue;
        }
        let verb = if e["count"].as_i64().unwrap_or(0) > 1 { "patch" } else { "create" };
        writes.entry(object_key(e)).or_default().push(write(&verb.into(), e));
    }
    normalised(writes)
}

/// Objects whose writes differ, with a few of them shown.
fn differences(expected: &Writes, actual: &Writes) -> (usize, Vec<String>) {
    let keys: std::collections::BTreeSet<&String> = expected.keys().chain(actual.keys()).collect();
    let differ: Vec<&String> = keys.into_iter().filter(|k| expected.get(*k) != actual.get(*k)).collect();
    let shown = differ
        .iter()
        .take(3)
        .map(|k| {
            let (e, a) =
                (expected.get(*k).map_or(&[][..], Vec::as_slice), actual.get(*k).map_or(&[][..], Vec::as_slice));
            let at = e.iter().zip(a).take_while(|(x, y)| x == y).count();
            format!(
                "{k}: {} writes vs {}, first differing at write {at}: {:?} vs {:?}",
                e.len(),
                a.len(),
                e.get(at),
                a.get(at)
            )
        })
        .collect();
    (differ.len(), shown)
}

/// `run --source jsonl:INPUT --sink webhook:…` with `args`, to an endpoint answering as
/// `answers`; returns the writes it received and how many requests it refused. A batch sent
/// again after a request timeout is recorded once (the endpoint drops a batch id it took).
fn run_to_webhook(input: &Path, answers: Answers, args: &[&str]) -> (Writes, u64) {
    let (received, url, _endpoint) = recording_webhook::start_answering(answers);
    let out = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(["run", "--no-watch"])
        .arg(format!("--source=jsonl:{}", input.display()))
        .arg(format!("--sink=webhook:{url}"))
        .args(args)
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let resent = received.resent.load(std::sync::atomic::Ordering::SeqCst);
    if resent > 0 {
        println!("{resent} batch(es) sent again after a request timeout, recorded once");
    }
    (normalised(received.writes()), received.refused.load(std::sync::atomic::Ordering::SeqCst))
}

/// The real-event stream, written out, and client-go's output on it; `None` when the shared
/// conformance suite is not beside the repository.
fn real_stream(dir: &Path) -> Option<(std::path::PathBuf, Writes)> {
    let Some(shared) = shared_conformance() else {
        eprintln!("shared conformance suite not beside the repository: run fidelity on the real stream not checked");
        return None;
    };
    let input = dir.join("real-expanded.jsonl");
    std::fs::write(&input, read_maybe_gz(&shared.join("replay-real/real-expanded.in.jsonl.gz"))).unwrap();
    let expected =
        client_go_writes(&read_maybe_gz(&shared.join("replay-real/real-expanded.default.expected.jsonl.gz")));
    Some((input, expected))
}

/// Latency drawn in 0–5 ms, seeded.
fn jittered(seed: u64, refuse: f64) -> Answers {
    Answers { random_latency: Some((Duration::from_millis(5), seed)), refuse, ..Answers::default() }
}

/// Default flags (one partition): to a webhook answering in 0–5 ms, and to one refusing 5 % of
/// requests with 503 (retried until written), every object gets client-go's writes, in order.
#[test]
fn run_writes_each_object_what_client_go_writes_whatever_the_webhooks_timing() {
    let dir = tempfile::tempdir().unwrap();
    let Some((input, expected)) = real_stream(dir.path()) else { return };
    assert!(expected.len() > 4 * 4096, "the stream outnumbers the default caches: {} objects", expected.len());
    for (answers, what) in [(jittered(1, 0.0), "0-5 ms"), (jittered(2, 0.05), "0-5 ms, 5 % refused with 503")] {
        let (actual, refused) = run_to_webhook(&input, answers, &[]);
        if answers.refuse > 0.0 {
            assert!(refused > 0, "the endpoint refused some requests");
        }
        let (n, shown) = differences(&expected, &actual);
        assert_eq!(n, 0, "{what}: {n} of {} objects' writes differ from client-go's, e.g. {shown:#?}", expected.len());
    }
}

/// Two partitions: each is client-go's correlator over its own events, so the output depends on
/// the input alone, never on when the webhook answers (two latency sequences, same writes).
#[test]
fn partitioned_run_writes_the_same_whatever_the_webhooks_timing() {
    let dir = tempfile::tempdir().unwrap();
    let Some((input, _)) = real_stream(dir.path()) else { return };
    let (first, _) = run_to_webhook(&input, jittered(3, 0.0), &["--workers=2"]);
    let (second, _) = run_to_webhook(&input, jittered(4, 0.02), &["--workers=2"]);
    let (n, shown) = differences(&first, &second);
    assert_eq!(
        n,
        0,
        "{n} of {} objects' writes differ between two runs (left the first, right the second), e.g. {shown:#?}",
        first.len()
    );
}

/// `,timeout=SECONDS`: a request not answered in time is sent again under its batch id, and a
/// receiver that drops a batch id it took records each write once: the same writes as a run
/// whose endpoint answered at once.
#[test]
fn a_request_answered_after_its_timeout_is_sent_again_under_its_batch_id() {
    let input = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/data/occurrences.jsonl");
    let (prompt, _) = run_to_webhook(&input, Answers::default(), &[]);
    let slow = Answers { slow_first: Duration::from_millis(1500), ..Answers::default() };
    let (received, url, _endpoint) = recording_webhook::start_answering(slow);
    let out = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(["run", "--no-watch"])
        .arg(format!("--source=jsonl:{}", input.display()))
        .arg(format!("--sink=webhook:{url},timeout=0.3"))
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let resent = received.resent.load(std::sync::atomic::Ordering::SeqCst);
    assert!(resent >= 1, "the first batch was sent again after 0.3 s");
    let (n, shown) = differences(&prompt, &normalised(received.writes()));
    assert_eq!(n, 0, "{n} objects' writes differ from the prompt endpoint's, e.g. {shown:#?}");
}
