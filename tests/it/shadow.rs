//! Shadow plugins: a candidate runs beside a serving plugin on the same events and never
//! changes the output; where the two answer otherwise it is counted and the first divergences
//! are written with both answers.

use std::process::{Command, Stdio};

use serde_json::Value;

use crate::common;

fn event(i: usize, host: &str, reason: &str) -> String {
    serde_json::json!({
        "metadata": {"name": format!("web-0.{i}"), "namespace": "shop"},
        "involvedObject": {"kind": "Pod", "namespace": "shop", "name": "web-0", "uid": "u"},
        "reason": reason, "message": format!("message {i}"), "type": "Warning",
        "source": {"component": "kubelet", "host": host},
        "firstTimestamp": format!("2025-01-01T00:00:{i:02}Z"), "lastTimestamp": format!("2025-01-01T00:00:{i:02}Z"),
        "count": 1
    })
    .to_string()
}

/// `eventpipe run` over `input` (stdin) with `args`: the summary, the sink calls, stderr.
fn run(args: &[String], input: &str) -> (Value, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    let mut child = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(["run", "--source=jsonl:-", "--summary-json", "--no-watch", "--workers=1"])
        .arg(format!("--sink=jsonl:{}", out.display()))
        .args(args)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    let summary = stderr.lines().rev().find_map(|l| serde_json::from_str(l).ok()).unwrap_or(Value::Null);
    (summary, std::fs::read_to_string(&out).unwrap_or_default(), stderr)
}

#[test]
fn a_shadow_key_plugin_is_compared_on_every_event_and_never_changes_the_output() {
    let input: String =
        (0..12).map(|i| event(i, if i % 2 == 0 { "node-1" } else { "node-2" }, "BackOff") + "\n").collect();
    let dir = tempfile::tempdir().unwrap();
    let diffs = dir.path().join("diffs.jsonl");
    let candidate = common::fixture_plugin("ignore-host");
    let (plain, plain_out, stderr) = run(&[], &input);
    assert!(plain["shadows"].is_null(), "{stderr}");
    let (summary, out, stderr) = run(
        &[
            format!("--shadow=by-reason={}", candidate.display()),
            format!("--shadow-diffs={}", diffs.display()),
            "--shadow-diffs-max=3".into(),
        ],
        &input,
    );
    assert!(stderr.contains("runs beside plugin `by-reason`"), "{stderr}");
    assert_eq!(out, plain_out, "the shadow never changes what is written");
    assert_eq!(summary["created"], plain["created"]);
    // Every event has a host, which by-reason puts in the key and ignore-host leaves out.
    assert_eq!(summary["shadows"]["by-reason"], serde_json::json!({"compared": 12, "diverged": 12}), "{summary}");
    let lines: Vec<Value> =
        std::fs::read_to_string(&diffs).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 3, "only the first 3 divergences are written");
    let first = &lines[0];
    assert_eq!(
        (first["plugin"].as_str(), first["kind"].as_str(), first["tenant"].as_str()),
        (Some("by-reason"), Some("aggregate-key"), Some("default"))
    );
    let (serving, candidate) = (first["serving"].as_array().unwrap(), first["candidate"].as_array().unwrap());
    assert_eq!(serving.len(), 2, "an aggregate key and a local key: {first}");
    assert!(
        serving[0].as_str().unwrap().contains("node-1") && !candidate[0].as_str().unwrap().contains("node-1"),
        "{first}"
    );
    assert!(first["event"].as_str().unwrap().contains("web-0"), "{first}");
}

#[test]
fn a_shadow_filter_from_the_config_and_a_candidate_of_another_kind() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = common::plugins_dir(dir.path(), &["drop-reasons", "keep-all"]);
    let config = dir.path().join("eventpipe.toml");
    std::fs::write(
        &config,
        format!(
            "[defaults]\nfilters = [\"drop-reasons\"]\n[plugins.drop-reasons]\nreasons = \"Pulled\"\n[shadow]\ndrop-reasons = \"{}\"\n",
            plugins.join("keep-all.wasm").display()
        ),
    )
    .unwrap();
    let input: String = [event(1, "n", "Pulled"), event(2, "n", "BackOff"), event(3, "n", "Pulled")].join("\n");
    let args = [format!("--config={}", config.display()), format!("--plugins={}", plugins.display())];
    let (summary, out, stderr) = run(&args, &input);
    assert_eq!(summary["filtered"], 2, "{stderr}");
    assert_eq!(out.lines().count(), 1, "the serving filter decides");
    assert_eq!(summary["shadows"]["drop-reasons"], serde_json::json!({"compared": 3, "diverged": 2}), "{summary}");

    let (_, _, stderr) = run(&[format!("--shadow=by-reason={}", plugins.join("keep-all.wasm").display())], &input);
    assert!(
        stderr.contains("shadow plugin by-reason")
            && stderr.contains("aggregate-key plugin; the new file is a filter plugin"),
        "{stderr}"
    );
}
