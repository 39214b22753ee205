//! Tenants through `eventpipe run --config`: each tenant gets exactly what one correlator with
//! its options gives on its own sub-stream; one tenant's failing plugin does not disturb another;
//! a broken config or plugin file is refused while the old ones keep serving.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::common;

fn bundled_stream() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/data/occurrences.jsonl")
}

/// The namespace a tenant matcher reads: `metadata.namespace`, else the involved object's.
fn namespace(event: &Value) -> &str {
    match event["metadata"]["namespace"].as_str() {
        Some(ns) if !ns.is_empty() => ns,
        _ => event["involvedObject"]["namespace"].as_str().unwrap_or(""),
    }
}

fn run(args: &[String], input: &[u8]) -> (Value, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        // One partition: each tenant's sink lines in input order, comparable with `replay`.
        .args(["run", "--source=jsonl:-", "--summary-json", "--no-watch", "--workers=1"])
        .args(args)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stderr}");
    let summary = stderr.lines().rev().find_map(|l| serde_json::from_str(l).ok()).expect("a JSON summary");
    (summary, stderr)
}

/// `eventpipe replay FLAGS` of `events` with each event's own time as its clock (what `run`
/// reads by default); returns the `(event, patch)` of every result that is not skipped.
fn replay_written(events: &[&Value], flags: &[&str]) -> Vec<(Value, Value)> {
    common::replay_with_event_clock(events.iter().copied(), flags)
        .into_iter()
        .filter(|r| r["skip"] == false)
        .map(|r| (r["event"].clone(), r["patch"].clone()))
        .collect()
}

fn sink_calls(path: &Path) -> Vec<(Value, Value)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|c| (c["event"].clone(), c["patch"].clone()))
        .collect()
}

/// `text` written as `eventpipe.toml` in `dir`, each `{dir}` in it replaced by `dir`'s path
/// (where the tenants' sinks write); the file's path.
fn config_in(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("eventpipe.toml");
    std::fs::write(&path, text.replace("{dir}", &dir.display().to_string())).unwrap();
    path
}

fn arg(name: &str, value: impl std::fmt::Display) -> String {
    format!("--{name}={value}")
}

#[test]
fn each_tenant_gets_what_its_own_correlator_gives_on_its_sub_stream() {
    let dir = tempfile::tempdir().unwrap();
    let (system_out, rest_out) = (dir.path().join("system.jsonl"), dir.path().join("rest.jsonl"));
    let config = config_in(
        dir.path(),
        r#"
[defaults]
max_events = 4
burst = 8
sinks = ["jsonl:{dir}/rest.jsonl"]

[[tenants]]
name = "platform"
[tenants.match]
namespaces = ["kube-*", "sumologic", "velero"]
[tenants.rules]
max_events = 2
burst = 3
qps = 0.01
sinks = ["jsonl:{dir}/system.jsonl"]
"#,
    );
    let text = std::fs::read_to_string(bundled_stream()).unwrap();
    let (summary, stderr) = run(&[arg("config", config.display())], text.as_bytes());
    assert!(stderr.contains("tenant `platform`") && stderr.contains("tenant `default`"), "{stderr}");

    let events: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let platform = |e: &&Value| {
        let ns = namespace(e);
        ns.starts_with("kube-") || ns == "sumologic" || ns == "velero"
    };
    let (mine, rest): (Vec<&Value>, Vec<&Value>) = events.iter().partition(platform);
    assert!(mine.len() > 5_000 && rest.len() > 5_000, "both tenants get a real share");

    let expected_platform = replay_written(&mine, &["--max-events=2", "--burst=3", "--qps=0.01"]);
    let expected_rest = replay_written(&rest, &["--max-events=4", "--burst=8"]);
    let (got_platform, got_rest) = (sink_calls(&system_out), sink_calls(&rest_out));
    assert_eq!(got_platform.len(), expected_platform.len(), "{summary}");
    assert_eq!(got_rest.len(), expected_rest.len(), "{summary}");
    assert!(got_platform == expected_platform, "tenant platform differs from its own replay");
    assert!(got_rest == expected_rest, "the default tenant differs from its own replay");
    // The tighter limits really bite: the two tenants' options give different results.
    let platform_with_rest_rules = replay_written(&mine, &["--max-events=4", "--burst=8"]);
    assert_ne!(platform_with_rest_rules.len(), expected_platform.len());
    assert_eq!(summary["tenants"]["platform"]["received"], mine.len());
    assert_eq!(summary["tenants"]["default"]["received"], rest.len());
}

#[test]
fn a_tenant_with_a_failing_plugin_falls_back_per_its_config_and_leaves_others_alone() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = common::plugins_dir(dir.path(), &["misbehave"]);
    let (a_out, b_out) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
    let config = config_in(
        dir.path(),
        r#"
[defaults]
sinks = ["jsonl:{dir}/b.jsonl"]

[[tenants]]
name = "risky"
match = { namespaces = ["a"] }
rules = { aggregate_key = "misbehave", fallback = "drop", fuel_per_event = 100000, sinks = ["jsonl:{dir}/a.jsonl"] }
"#,
    );
    // Interleaved: tenant `risky` gets events that trap, loop and hog memory; the default tenant
    // gets the same reasons (its by-reason plugin does not care).
    let mut input = String::new();
    let reasons = ["Pulled", "Trap", "Started", "Loop", "Hog", "Killing", "Panic"];
    for i in 0..70 {
        for ns in ["a", "b"] {
            let reason = reasons[i % reasons.len()];
            let event = serde_json::json!({
                "metadata": {"name": format!("{ns}-{i}"), "namespace": ns},
                "involvedObject": {"kind": "Pod", "namespace": ns, "name": format!("pod-{i}")},
                "reason": reason, "message": format!("{reason} {i}"), "type": "Normal",
                "source": {"component": "kubelet", "host": "node-1"},
                "lastTimestamp": "2025-01-01T00:00:00Z", "count": 1
            });
            input += &format!("{event}\n");
        }
    }
    let (summary, stderr) =
        run(&[arg("config", config.display()), arg("plugins", plugins.display())], input.as_bytes());
    assert!(stderr.contains("plugin `misbehave` (aggregate-key) for tenant `risky` failed"), "{stderr}");
    let (a, b) = (sink_calls(&a_out), sink_calls(&b_out));
    // The default tenant: every event written (its own objects, under the spam burst).
    assert_eq!(b.len(), 70, "{summary}");
    // `risky`: the events whose key call failed are dropped (fallback = drop), the others written.
    let failing = (0..70).filter(|i| ["Trap", "Loop", "Hog", "Panic"].contains(&reasons[i % reasons.len()])).count();
    assert_eq!(a.len(), 70 - failing, "{summary}");
    assert!(a.iter().all(|(e, _)| !["Trap", "Loop", "Hog", "Panic"].contains(&e["reason"].as_str().unwrap())));
}

#[test]
fn a_config_naming_a_missing_plugin_is_refused_with_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bad.toml");
    std::fs::write(&config, "[defaults]\nburst = 5\n\n[[tenants]]\nname = \"x\"\nmatch = { namespaces = [\"x\"] }\nrules = { spam_key = \"nope\" }\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(["run", "--source=jsonl:-", "--sink=jsonl:-", "--no-watch"])
        .arg(arg("config", config.display()))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("bad.toml:7") && stderr.contains("spam_key") && stderr.contains("no plugin named `nope`"),
        "{stderr}"
    );
}

#[test]
fn a_tenant_filter_plugin_drops_what_its_config_names_before_correlation() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = common::plugins_dir(dir.path(), &["drop-reasons"]);
    let (quiet_out, rest_out) = (dir.path().join("quiet.jsonl"), dir.path().join("rest.jsonl"));
    let config = config_in(
        dir.path(),
        r#"
[defaults]
sinks = ["jsonl:{dir}/rest.jsonl"]
# The plugins directory's filters would apply to the defaults too (drop-in): none here.
filters = []

[plugins.drop-reasons]
reasons = "Pulled, Created,Started"

[[tenants]]
name = "quiet"
match = { namespaces = ["default", "test*"] }
rules = { filters = ["drop-reasons"], sinks = ["jsonl:{dir}/quiet.jsonl"] }
"#,
    );
    let text = std::fs::read_to_string(bundled_stream()).unwrap();
    let (summary, _) = run(&[arg("config", config.display()), arg("plugins", plugins.display())], text.as_bytes());
    let events: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let quiet = |e: &&Value| namespace(e) == "default" || namespace(e).starts_with("test");
    let noise = |e: &&&Value| ["Pulled", "Created", "Started"].contains(&e["reason"].as_str().unwrap());
    let (mine, rest): (Vec<&Value>, Vec<&Value>) = events.iter().partition(quiet);
    let dropped = mine.iter().filter(noise).count();
    assert!(dropped > 100, "the stream has noise to drop");
    let kept: Vec<&Value> = mine.iter().filter(|e| !noise(e)).copied().collect();
    // Filtered events never reach the correlator: the tenant's output is the correlator's on
    // the kept events alone; the other tenant keeps its noise.
    assert_eq!(summary["filtered"], dropped as u64, "{summary}");
    assert!(sink_calls(&quiet_out) == replay_written(&kept, &[]));
    assert!(sink_calls(&rest_out) == replay_written(&rest, &[]));
    assert!(sink_calls(&rest_out).iter().any(|(e, _)| e["reason"] == "Pulled"));
}

/// A filter that declares `reason` and `label(team)` (the key from its config) gets that
/// label's value on the batch path and drops by it.
#[test]
fn a_filter_declaring_a_label_from_its_config_drops_by_it() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = common::plugins_dir(dir.path(), &["drop-reasons"]);
    let config = config_in(
        dir.path(),
        "[defaults]\nfilters = [\"drop-reasons\"]\n\n[plugins.drop-reasons]\nreasons = \"Noise\"\nlabel = \"team=payments\"\n",
    );
    let event = |i: usize, team: &str, reason: &str| {
        let labels = if team.is_empty() { json!({}) } else { json!({ "team": team }) };
        json!({
            "metadata": { "name": format!("pod-{i}.1"), "namespace": "default", "labels": labels },
            "involvedObject": { "kind": "Pod", "namespace": "default", "name": format!("pod-{i}"), "uid": format!("u{i}") },
            "reason": reason, "message": format!("m{i}"), "type": "Normal",
            "source": { "component": "kubelet", "host": "node-1" },
            "firstTimestamp": "2025-01-01T00:00:00Z", "lastTimestamp": "2025-01-01T00:00:00Z", "count": 1
        })
        .to_string()
    };
    let lines = [
        event(0, "payments", "Started"),
        event(1, "search", "Started"),
        event(2, "", "Started"),
        event(3, "search", "Noise"),
        event(4, "payments", "Pulled"),
    ];
    let out = dir.path().join("out.jsonl");
    let (summary, _) = run(
        &[
            arg("config", config.display()),
            arg("plugins", plugins.display()),
            arg("sink", format!("jsonl:{}", out.display())),
        ],
        lines.join("\n").as_bytes(),
    );
    assert_eq!(summary["filtered"], 3, "{summary}");
    let kept: Vec<String> =
        sink_calls(&out).iter().map(|(e, _)| e["involvedObject"]["name"].as_str().unwrap().to_string()).collect();
    assert_eq!(kept, ["pod-1", "pod-2"]);
}

/// A tenant's `partition_key` shards only its own events by it; other tenants keep the default.
#[test]
fn a_tenants_partition_key_shards_only_its_own_events() {
    use eventpipe::config::Config;
    use eventpipe::pipeline::plan::{KeyChoice, TenantPlan, TenantRules};
    use eventpipe::pipeline::router::PartitionKey;
    use eventpipe::plugin::registry::PluginRegistry;
    use eventpipe::plugin::{Metering, PluginRuntime};
    use eventpipe::sink::set::SinkSet;

    let text = "[[tenants]]\nname = \"wide\"\nmatch = { namespaces = [\"wide\"] }\nrules = { partition_key = \"namespace\" }\n";
    let config = Config::parse(text, std::path::Path::new("t.toml")).unwrap();
    let base = TenantRules {
        aggregate_key: KeyChoice::Builtin,
        message_combiner: KeyChoice::Builtin,
        spam_key: KeyChoice::Builtin,
        sinks: vec!["jsonl:-".parse().unwrap()],
        ..TenantRules::default()
    };
    let registry = PluginRegistry::new(PluginRuntime::new(Metering::Fuel).unwrap()).unwrap();
    let plan = TenantPlan::build(&base, Some(&config), &registry, &SinkSet::default()).unwrap();
    let event = |namespace: &str, name: &str| -> eventpipe::event::Event {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("{name}.1"), "namespace": namespace},
            "involvedObject": {"kind": "Pod", "namespace": namespace, "name": name},
            "source": {"component": "kubelet"}, "reason": "Started", "message": "m"
        }))
        .unwrap()
    };
    const PARTITIONS: usize = 8;
    let partitions = |namespace: &str| -> std::collections::BTreeSet<usize> {
        (0..64)
            .map(|i| plan.partition(&event(namespace, &format!("pod-{i}")), PartitionKey::SourceObject, PARTITIONS))
            .collect()
    };
    assert_eq!(partitions("wide").len(), 1, "the `wide` tenant keeps one namespace in one partition");
    assert!(partitions("other").len() > 1, "the defaults spread objects over partitions");
}

/// Declarative `drop` / `keep` rules do what a filter plugin does, without one: dropped events
/// never reach the correlator, and each drop is counted under its tenant and rule.
#[test]
fn declarative_drop_and_keep_rules_drop_before_correlation_and_count_per_rule() {
    let dir = tempfile::tempdir().unwrap();
    let (quiet_out, rest_out) = (dir.path().join("quiet.jsonl"), dir.path().join("rest.jsonl"));
    let config = config_in(
        dir.path(),
        r#"
[defaults]
sinks = ["jsonl:{dir}/rest.jsonl"]

[[tenants]]
name = "quiet"
match = { namespaces = ["default", "test*"] }
[tenants.rules]
sinks = ["jsonl:{dir}/quiet.jsonl"]
drop = [{ name = "noise", reasons = ["Pulled", "Created", "Start*"] }, { message = "^Successfully assigned " }]
keep = [{ kinds = ["Pod", "Node"] }]
"#,
    );
    let text = std::fs::read_to_string(bundled_stream()).unwrap();
    let (summary, _) = run(&[arg("config", config.display())], text.as_bytes());
    let events: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let quiet = |e: &&Value| namespace(e) == "default" || namespace(e).starts_with("test");
    let reason = |e: &Value| e["reason"].as_str().unwrap_or("").to_string();
    let noise = |e: &Value| ["Pulled", "Created"].contains(&reason(e).as_str()) || reason(e).starts_with("Start");
    let assigned = |e: &Value| e["message"].as_str().unwrap_or("").starts_with("Successfully assigned ");
    let kind_kept = |e: &Value| ["Pod", "Node"].contains(&e["involvedObject"]["kind"].as_str().unwrap_or(""));
    let (mine, rest): (Vec<&Value>, Vec<&Value>) = events.iter().partition(quiet);
    let by_noise = mine.iter().filter(|e| noise(e)).count() as u64;
    let by_message = mine.iter().filter(|e| !noise(e) && assigned(e)).count() as u64;
    let not_kept = mine.iter().filter(|e| !noise(e) && !assigned(e) && !kind_kept(e)).count() as u64;
    assert!(by_noise > 100 && by_message > 0 && not_kept > 0, "the stream exercises every rule");
    let kept: Vec<&Value> = mine.iter().filter(|e| !noise(e) && !assigned(e) && kind_kept(e)).copied().collect();
    assert_eq!(
        summary["dropped_by_rule"],
        serde_json::json!({"quiet": {"noise": by_noise, "drop[1]": by_message, "keep:no-match": not_kept}}),
        "{summary}"
    );
    assert_eq!(summary["dropped_by_rules"], by_noise + by_message + not_kept);
    assert_eq!(summary["filtered"], 0, "no filter plugin ran");
    assert!(sink_calls(&quiet_out) == replay_written(&kept, &[]));
    assert!(sink_calls(&rest_out) == replay_written(&rest, &[]), "other tenants keep everything");
}

/// A `spam_exempt` rule lets recovery events through a spam filter whose bucket a storm
/// emptied; they still count in the EventLogger (a repeat is a patch).
#[test]
fn spam_exempt_events_pass_an_empty_bucket_and_still_count() {
    let dir = tempfile::tempdir().unwrap();
    let config =
        config_in(dir.path(), "[defaults]\nburst = 2\nqps = 0.0\nspam_exempt = [{ reasons = [\"Started\"] }]\n");
    let out = dir.path().join("out.jsonl");
    let event = |n: usize, reason: &str, message: &str| {
        serde_json::json!({
            "metadata": {"name": format!("web-0.{n}"), "namespace": "ns"},
            "involvedObject": {"kind": "Pod", "namespace": "ns", "name": "web-0", "uid": "u"},
            "reason": reason, "message": message, "type": "Normal",
            "source": {"component": "kubelet", "host": "n1"},
            "firstTimestamp": format!("2025-01-01T00:00:{n:02}Z"), "lastTimestamp": format!("2025-01-01T00:00:{n:02}Z"),
            "count": 1
        })
        .to_string()
    };
    let lines = [
        event(1, "BackOff", "back-off 1"),
        event(2, "BackOff", "back-off 2"),
        event(3, "BackOff", "back-off 3"), // the bucket is empty from here
        event(4, "BackOff", "back-off 4"),
        event(5, "Started", "Started container"),
        event(6, "BackOff", "back-off 5"),
        event(7, "Started", "Started container"),
    ];
    let (summary, _) = run(
        &[arg("config", config.display()), arg("sink", format!("jsonl:{}", out.display()))],
        lines.join("\n").as_bytes(),
    );
    assert_eq!((summary["skipped"].as_u64(), summary["spam_exempted"].as_u64()), (Some(3), Some(2)), "{summary}");
    let calls = sink_calls(&out);
    let reasons: Vec<&str> = calls.iter().map(|(e, _)| e["reason"].as_str().unwrap()).collect();
    assert_eq!(reasons, ["BackOff", "BackOff", "Started", "Started"]);
    assert_eq!(calls[3].0["count"], 2, "the second Started is a repeat of the first");
    assert_eq!(calls[3].1["count"], 2, "and is written as a patch");
}

/// `suppressed_summary_seconds`: at the end of each window in which the spam filter skipped
/// events about one object, one `EventsSuppressed` event says how many, by reason; a window
/// still open when the run ends is summarised then.
#[test]
fn suppressed_summaries_count_what_the_spam_filter_skipped_per_object_and_window() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_in(dir.path(), "[defaults]\nburst = 1\nqps = 0.0\nsuppressed_summary_seconds = 60\n");
    let out = dir.path().join("out.jsonl");
    let event = |object: &str, second: u32, reason: &str| {
        serde_json::json!({
            "metadata": {"name": format!("{object}.{second}"), "namespace": "ns"},
            "involvedObject": {"kind": "Pod", "namespace": "ns", "name": object, "uid": object},
            "reason": reason, "message": format!("{reason} at {second}"), "type": "Warning",
            "source": {"component": "kubelet", "host": "n1"},
            "firstTimestamp": format!("2025-01-01T00:{:02}:{:02}Z", second / 60, second % 60),
            "lastTimestamp": format!("2025-01-01T00:{:02}:{:02}Z", second / 60, second % 60), "count": 1
        })
        .to_string()
    };
    let lines = [
        event("web-0", 0, "BackOff"), // passes (burst 1)
        event("web-0", 1, "BackOff"), // skipped: web-0's window opens at 00:00:01
        event("web-0", 2, "Unhealthy"),
        event("web-0", 3, "BackOff"),
        event("web-1", 30, "BackOff"), // passes
        event("web-1", 31, "BackOff"), // skipped: web-1's window opens at 00:00:31
        event("db-0", 70, "Started"),  // 00:01:10: web-0's window (to 00:01:01) has closed
        event("db-0", 80, "Started"),  // skipped: db-0's window, open at the end
    ];
    let (summary, _) = run(
        &[arg("config", config.display()), arg("sink", format!("jsonl:{}", out.display()))],
        lines.join("\n").as_bytes(),
    );
    assert_eq!(
        (summary["skipped"].as_u64(), summary["suppressed_summaries"].as_u64()),
        (Some(5), Some(3)),
        "{summary}"
    );
    let calls = sink_calls(&out);
    let shown: Vec<(String, String)> = calls
        .iter()
        .map(|(e, _)| {
            (e["involvedObject"]["name"].as_str().unwrap().to_string(), e["message"].as_str().unwrap().to_string())
        })
        .collect();
    let pos = |object: &str| shown.iter().position(|(o, m)| o == object && m.contains("suppressed")).unwrap();
    assert_eq!(shown[pos("web-0")].1, "3 events suppressed in the last 1m: BackOff ×2, Unhealthy ×1");
    assert!(
        pos("web-0") < shown.iter().position(|(o, _)| o == "db-0").unwrap(),
        "web-0's summary comes when its window closes: {shown:?}"
    );
    assert_eq!(shown[pos("web-1")].1, "1 event suppressed in the last 1m: BackOff ×1");
    assert_eq!(shown[pos("db-0")].1, "1 event suppressed in the last 1m: Started ×1");
    let (web0, _) = &calls[pos("web-0")];
    assert_eq!(
        (web0["reason"].as_str(), web0["type"].as_str(), web0["count"].as_i64()),
        (Some("EventsSuppressed"), Some("Normal"), Some(1))
    );
    assert_eq!(
        (web0["firstTimestamp"].as_str(), web0["lastTimestamp"].as_str()),
        (Some("2025-01-01T00:00:01Z"), Some("2025-01-01T00:00:03Z"))
    );
    assert_eq!(web0["source"]["component"], "kubelet");
    assert_eq!(summary["abandoned"], 0, "summaries are not source events");
}

/// One precedence rule: `--sink` replaces the config's `[defaults]` sinks, a tenant naming its
/// own sinks keeps them, and `--burst` replaces `[defaults] burst` (a tenant's own stays);
/// `config show` tells where each came from, and each tenant's `match`.
#[test]
fn the_command_line_wins_over_the_configs_defaults_and_tenants_keep_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_in(
        dir.path(),
        "[defaults]\nsinks = [\"jsonl:{dir}/defaults.jsonl\"]\nburst = 1\n\n[[tenants]]\nname = \"own\"\n\
         match = { namespaces = [\"own\"] }\n[tenants.rules]\nsinks = [\"jsonl:{dir}/own.jsonl\"]\nburst = 2\n\n\
         [[tenants]]\nname = \"inherits\"\nmatch = { namespaces = [\"inherits\"] }\n",
    );
    // Three events of one object per namespace: `burst = 1` would skip two of each.
    let input: String = ["own", "inherits", "other"]
        .iter()
        .flat_map(|ns| {
            (0..3).map(move |i| {
                serde_json::json!({
                    "metadata": {"name": format!("e{i}"), "namespace": ns},
                    "involvedObject": {"kind": "Pod", "namespace": ns, "name": "p"},
                    "source": {"component": "kubelet"}, "reason": format!("R{i}"), "message": "m", "type": "Normal",
                    "lastTimestamp": "2025-01-01T00:00:00Z"
                })
                .to_string()
                    + "\n"
            })
        })
        .collect();
    let flag_sink = dir.path().join("flag.jsonl");
    let (summary, _) = run(
        &[arg("config", config.display()), arg("sink", format!("jsonl:{}", flag_sink.display())), arg("burst", 5)],
        input.as_bytes(),
    );
    assert!(!dir.path().join("defaults.jsonl").exists(), "the config's [defaults] sink is replaced: {summary}");
    let namespaces = |path: &Path| -> Vec<String> {
        sink_calls(path).iter().map(|(e, _)| e["metadata"]["namespace"].as_str().unwrap().to_string()).collect()
    };
    // `inherits` and the defaults take the flag's sink and burst (5: nothing skipped).
    assert_eq!(namespaces(&flag_sink), ["inherits"; 3].into_iter().chain(["other"; 3]).collect::<Vec<_>>());
    // `own` keeps its sink and its burst of 2: the third event is skipped.
    assert_eq!(namespaces(&dir.path().join("own.jsonl")), ["own", "own"]);
    assert_eq!(summary["skipped"], 1, "{summary}");

    let shown = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(["config", "show", "--output=json", "--no-compile-cache", "--burst=5"])
        .arg(arg("config", config.display()))
        .arg(arg("sink", format!("jsonl:{}", flag_sink.display())))
        .output()
        .unwrap();
    assert!(shown.status.success(), "{}", String::from_utf8_lossy(&shown.stderr));
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    let setting = |tenant: &str, group: &str, key: &str| -> Value {
        let t = shown.as_array().unwrap().iter().find(|t| t["tenant"] == tenant).unwrap();
        t[group].as_array().unwrap().iter().find(|s| s["key"] == key).unwrap().clone()
    };
    let file = config.display().to_string();
    assert_eq!(
        setting("own", "sinks", "sinks[0]")["origin"],
        serde_json::json!({"from": "file", "at": format!("{file}:9")})
    );
    assert_eq!(
        setting("own", "rules", "burst")["origin"],
        serde_json::json!({"from": "file", "at": format!("{file}:10")})
    );
    assert_eq!(setting("inherits", "sinks", "sinks[0]")["origin"], serde_json::json!({"from": "flag", "at": "--sink"}));
    assert_eq!(setting("default", "rules", "burst")["value"], "5");
    assert_eq!(setting("default", "rules", "max_events")["origin"], serde_json::json!({"from": "default"}));
    let by_reason = setting("default", "plugins", "aggregate_key");
    assert_eq!((by_reason["value"].as_str(), by_reason["component"].as_str()), (Some("by-reason"), Some("embedded")));
    assert_eq!(by_reason["sha256"].as_str().map(str::len), Some(64), "{by_reason}");
    // Routing: each tenant's `match`, where it is written; the defaults take the rest.
    let own_match = setting("own", "routing", "match");
    assert_eq!(own_match["value"], r#"{ namespaces = ["own"] }"#);
    assert_eq!(own_match["origin"], serde_json::json!({"from": "file", "at": format!("{file}:7")}));
    assert_eq!(setting("default", "routing", "match")["value"], "every event no tenant above matches");
}
