//! Routes (`[[routes]]`, a tenant's `rules.routes`): the bundled stream through `eventpipe run`
//! with routes to JSON-lines sinks, each route's output checked against the tenant's own output
//! of the same run (what the route should have selected, computed here); `validate` and
//! `config show` listing routes, and a bad rate refused with its line.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn bundled_stream() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/data/occurrences.jsonl")
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Runs the bundled stream with `config` (`{DIR}` replaced by a temporary directory, where
/// the sinks write) and `args`; returns the summary and the directory.
fn run(config: &str, args: &[&str]) -> (Value, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("eventpipe.toml");
    std::fs::write(&path, config.replace("{DIR}", &dir.path().display().to_string())).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(["run", "--summary-json", "--no-watch", "--workers=1", "--no-compile-cache"])
        .arg(format!("--source=jsonl:{}", bundled_stream().display()))
        .arg(format!("--config={}", path.display()))
        .args(args)
        .output()
        .expect("eventpipe runs");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stderr}");
    let summary = stderr.lines().rev().find_map(|l| serde_json::from_str(l).ok()).expect("a JSON summary on stderr");
    (summary, dir)
}

/// What identifies a write: verb, event name and count.
fn write(call: &Value) -> (String, String, i64) {
    (
        call["verb"].as_str().unwrap().to_string(),
        call["event"]["metadata"]["name"].as_str().unwrap().to_string(),
        call["event"]["count"].as_i64().unwrap(),
    )
}

fn namespace(call: &Value) -> &str {
    let event = &call["event"];
    event["metadata"]["namespace"].as_str().or(event["involvedObject"]["namespace"].as_str()).unwrap_or("")
}

/// The issue's test: a route with `min_count` sees exactly the writes whose event count
/// reached it (the first at that count included, as it is: a `patch`), and the tenant's own
/// sink still gets every write.
#[test]
fn a_route_with_min_count_sees_exactly_the_writes_whose_count_reached_it() {
    let (summary, dir) = run(
        "[defaults]\nsinks = [\"jsonl:{DIR}/all.jsonl\"]\n\n[[routes]]\nmin_count = 3\nsinks = [\"jsonl:{DIR}/route.jsonl\"]\n",
        &[],
    );
    let all = lines(&dir.path().join("all.jsonl"));
    let routed = lines(&dir.path().join("route.jsonl"));
    let expected: Vec<_> = all.iter().filter(|c| c["event"]["count"].as_i64().unwrap() >= 3).map(write).collect();
    assert!(!expected.is_empty() && expected.len() < all.len(), "the stream has repeats to hold back");
    assert_eq!(routed.iter().map(write).collect::<Vec<_>>(), expected);
    assert!(routed.iter().all(|c| c["verb"] == "patch"), "a count of 3 is a repeat: sent as the patch it is");
    // The tenant's own sink gets everything, counted as without the route.
    assert_eq!(summary["created"].as_u64().unwrap() + summary["patched"].as_u64().unwrap(), all.len() as u64);
    let route = &summary["routes"]["route-0"];
    assert_eq!(route["sent"], expected.len() as u64, "{summary}");
    assert_eq!(route["held_back_min_count"], (all.len() - expected.len()) as u64, "{summary}");
    assert_eq!(route["held_back_rate"], 0, "{summary}");
    assert_eq!(
        summary["sinks"][format!("jsonl:{}/route.jsonl", dir.path().display())]["patched"],
        expected.len() as u64
    );
}

/// A route's `match` selects on the correlated event; a top-level route serves every tenant,
/// a tenant's own route only that tenant.
#[test]
fn routes_send_only_what_they_match_and_a_tenants_route_only_its_writes() {
    let (summary, dir) = run(
        "[defaults]\nsinks = [\"jsonl:{DIR}/default.jsonl\"]\n\n\
         [[tenants]]\nname = \"system\"\nmatch = { namespaces = [\"kube-system\"] }\n\
         [tenants.rules]\nsinks = [\"jsonl:{DIR}/system.jsonl\"]\n\
         [[tenants.rules.routes]]\nsinks = [\"jsonl:{DIR}/system-route.jsonl\"]\n\n\
         [[routes]]\nname = \"tests-warnings\"\nmatch = { types = [\"Warning\"], namespaces = [\"test-*\", \"kube-*\"] }\n\
         sinks = [\"jsonl:{DIR}/warnings.jsonl\"]\n",
        &[],
    );
    let system = lines(&dir.path().join("system.jsonl"));
    let default = lines(&dir.path().join("default.jsonl"));
    // Both tenants' writes, in order, are what the top-level route chose from: compare as sets
    // of writes per tenant (one partition: each sink's order is the decision order).
    let warnings = lines(&dir.path().join("warnings.jsonl"));
    let selects = |c: &&Value| {
        c["event"]["type"] == "Warning" && (namespace(c).starts_with("test-") || namespace(c).starts_with("kube-"))
    };
    let mut expected: Vec<_> = system.iter().chain(&default).filter(selects).map(write).collect();
    let mut got: Vec<_> = warnings.iter().map(write).collect();
    assert!(!got.is_empty());
    assert!(
        warnings.iter().any(|c| namespace(c) == "kube-system") && warnings.iter().any(|c| namespace(c) == "test-oom")
    );
    expected.sort();
    got.sort();
    assert_eq!(got, expected);
    // The tenant's own route: every write of `system`, none of the defaults'.
    let system_route = lines(&dir.path().join("system-route.jsonl"));
    assert_eq!(system_route.iter().map(write).collect::<Vec<_>>(), system.iter().map(write).collect::<Vec<_>>());
    assert_eq!(summary["routes"]["system/route-0"]["sent"], system.len() as u64, "{summary}");
    assert_eq!(summary["routes"]["tests-warnings"]["sent"], expected.len() as u64, "{summary}");
}

/// `rate`: the bucket sends its N, then holds back; each write sent after held-back ones
/// carries their number in `eventpipe.io/held-back`, and the counts add up. With the events'
/// own clock the decisions are the stream's, not the machine's.
#[test]
fn a_rate_holds_back_and_the_next_write_sent_says_how_many() {
    let (summary, dir) = run(
        "[defaults]\nsinks = [\"jsonl:{DIR}/all.jsonl\"]\n\n[[routes]]\nname = \"warnings\"\n\
         match = { types = [\"Warning\"] }\nrate = \"2/min\"\nsinks = [\"jsonl:{DIR}/route.jsonl\"]\n",
        &["--clock=event"],
    );
    let all = lines(&dir.path().join("all.jsonl"));
    let routed = lines(&dir.path().join("route.jsonl"));
    let selected: Vec<&Value> = all.iter().filter(|c| c["event"]["type"] == "Warning").collect();
    let route = &summary["routes"]["warnings"];
    let (sent, held) = (route["sent"].as_u64().unwrap(), route["held_back_rate"].as_u64().unwrap());
    assert_eq!(sent, routed.len() as u64, "{summary}");
    assert_eq!(sent + held, selected.len() as u64, "every selected write sent or held back: {summary}");
    assert!(held > 0 && sent >= 2, "2/min over the stream holds writes back: {summary}");
    assert_eq!(route["held_back_min_count"], 0);
    // The first two selected writes go out at once: a full bucket.
    assert_eq!(
        routed[..2].iter().map(write).collect::<Vec<_>>(),
        selected[..2].iter().map(|c| write(c)).collect::<Vec<_>>()
    );
    // Walk the tenant's selected writes in order: a write not in the route's output was held
    // back; the next one sent carries how many were.
    let (mut next, mut since, mut summarised) = (0, 0u64, 0u64);
    for call in &selected {
        if next < routed.len() && write(&routed[next]) == write(call) {
            let note = &routed[next]["event"]["metadata"]["annotations"]["eventpipe.io/held-back"];
            let carried = note.as_str().map_or(0, |n| n.parse::<u64>().unwrap());
            assert_eq!(carried, since, "write {next} of the route: {}", routed[next]);
            assert!(
                call["event"]["metadata"]["annotations"]["eventpipe.io/held-back"].is_null(),
                "the tenant's copy is as it was"
            );
            (next, since, summarised) = (next + 1, 0, summarised + carried);
        } else {
            since += 1;
        }
    }
    assert_eq!(next, routed.len(), "the route's writes are the tenant's, in order");
    assert!(summarised > 0, "some write carried a summary");
    assert_eq!(summarised + since, held, "what was held back is summarised, or left after the last write sent");
}

fn eventpipe(args: &[&str], config: &Path) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(args)
        .arg(format!("--config={}", config.display()))
        .output()
        .unwrap();
    (out.status.success(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

/// `validate` counts routes and checks their sinks and rates where they are written; `config
/// show` lists each tenant's routes with their match, `min_count`, `rate` and sinks.
#[test]
fn validate_and_config_show_show_routes_and_a_bad_rate_is_refused_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("eventpipe.toml");
    let d = dir.path().display();
    std::fs::write(
        &config,
        format!(
            "[defaults]\nsinks = [\"jsonl:{d}/all.jsonl\"]\n\n[[tenants]]\nname = \"pay\"\nmatch = {{ namespaces = [\"pay\"] }}\n\
             [[tenants.rules.routes]]\nname = \"pay-oom\"\nmatch = {{ reasons = [\"OOM*\"] }}\nsinks = [\"jsonl:{d}/oom.jsonl\"]\n\n\
             [[routes]]\nname = \"slack-prod\"\nmatch = {{ types = [\"Warning\"], namespaces = [\"prod-*\"] }}\nmin_count = 3\n\
             rate = \"10/min\"\nsinks = [\"jsonl:{d}/slack.jsonl\"]\n"
        ),
    )
    .unwrap();
    let (ok, stdout, stderr) = eventpipe(&["validate"], &config);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("ok (1 tenant(s) and the defaults, 2 route(s), 3 sink(s)"), "{stdout}");

    let (ok, stdout, stderr) = eventpipe(&["config", "show", "--output=json", "--no-compile-cache"], &config);
    assert!(ok, "{stderr}");
    let shown: Value = serde_json::from_str(&stdout).unwrap();
    let routing = |tenant: &str| -> Vec<Value> {
        let t = shown.as_array().unwrap().iter().find(|t| t["tenant"] == tenant).unwrap();
        t["routing"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["key"].as_str().unwrap().contains("routes["))
            .cloned()
            .collect()
    };
    let file = config.display().to_string();
    let pay = routing("pay");
    assert_eq!(pay.len(), 2, "the top-level route and its own: {pay:?}");
    assert_eq!(pay[0]["key"], "routes[0]");
    assert_eq!(
        pay[0]["value"],
        format!(
            r#"slack-prod: match = {{ namespaces = ["prod-*"], types = ["Warning"] }}, min_count = 3, rate = "10/min", sinks = ["jsonl:{d}/slack.jsonl"]"#
        )
    );
    assert_eq!(pay[0]["origin"], serde_json::json!({"from": "file", "at": format!("{file}:12")}));
    assert_eq!(pay[1]["key"], "tenants[0].rules.routes[0]");
    assert!(pay[1]["value"].as_str().unwrap().starts_with("pay-oom: match = { reasons = [\"OOM*\"] }, min_count = 1"));
    assert_eq!(routing("default").len(), 1, "the defaults get the top-level route only");
    let (ok, text, _) = eventpipe(&["config", "show", "--no-compile-cache"], &config);
    assert!(ok && text.contains("routes[0]") && text.contains("slack-prod: match"), "{text}");

    // A bad rate, a bad sink and a duplicate name: each where it is.
    std::fs::write(
        &config,
        "[[routes]]\nname = \"a\"\nrate = \"10/day\"\nsinks = [\"jsonl:-\"]\n\n[[routes]]\nname = \"a\"\nsinks = [\"nope:x\"]\n\n\
         [[routes]]\nname = \"b\"\nmin_count = 0\nsinks = [\"jsonl:-\"]\n",
    )
    .unwrap();
    let (ok, _, stderr) = eventpipe(&["validate"], &config);
    assert!(!ok);
    let has = |needle: &str| stderr.lines().any(|l| l.contains(needle));
    assert!(has(&format!("{file}:3:8: routes[0].rate: unknown unit \"day\": expected s, min or h")), "{stderr}");
    assert!(has(&format!("{file}:8:")) && has("routes[1].sinks[0]: invalid sink"), "{stderr}");
    assert!(has(&format!("{file}:12:13: routes[2].min_count: expected a count from 1")), "{stderr}");
    let (ok, _, stderr) = eventpipe(&["run", "--source=jsonl:/dev/null"], &config);
    assert!(!ok && stderr.contains("routes[0].rate"), "run refuses it too: {stderr}");
}
