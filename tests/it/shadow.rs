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

/// The candidate's file is watched like a plugin's: a new version renamed over it takes over the
/// comparisons at once (here one that answers as the serving version: no more divergences), and
/// a file that does not load is refused with the candidate in use kept.
#[test]
fn a_shadow_candidate_file_is_hot_reloaded() {
    use std::io::{BufRead, Write};
    let dir = tempfile::tempdir().unwrap();
    let (candidate, diffs, out) =
        (dir.path().join("candidate.wasm"), dir.path().join("diffs.jsonl"), dir.path().join("out.jsonl"));
    std::fs::copy(common::fixture_plugin("ignore-host"), &candidate).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(["run", "--source=jsonl:-", "--summary-json", "--workers=1"])
        .arg(format!("--sink=jsonl:{}", out.display()))
        .arg(format!("--shadow=by-reason={}", candidate.display()))
        .arg(format!("--shadow-diffs={}", diffs.display()))
        .arg("--shadow-diffs-max=100")
        .current_dir(dir.path())
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, lines) = std::sync::mpsc::channel::<String>();
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let wait_for = |what: &str| loop {
        let line = lines.recv_timeout(std::time::Duration::from_secs(30)).unwrap_or_else(|_| panic!("no {what:?}"));
        if line.contains(what) {
            return line;
        }
    };
    let diverged = || std::fs::read_to_string(&diffs).unwrap_or_default().lines().count();
    let mut stdin = child.stdin.take().unwrap();
    let mut feed = |range: std::ops::Range<usize>| {
        for i in range {
            writeln!(stdin, "{}", event(i, "node-1", "BackOff")).unwrap();
        }
        stdin.flush().unwrap();
    };
    wait_for("runs beside plugin `by-reason`");
    feed(0..4);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while diverged() < 4 {
        assert!(std::time::Instant::now() < deadline, "4 divergences written, got {}", diverged());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // A broken file: refused, the candidate in use stays (it still diverges).
    let staged = dir.path().join(".candidate.tmp");
    std::fs::write(&staged, b"not a component").unwrap();
    std::fs::rename(&staged, &candidate).unwrap();
    let refused = wait_for("shadow candidate: plugin `by-reason`");
    assert!(refused.contains("rejected, previous version kept"), "{refused}");
    feed(4..6);
    while diverged() < 6 {
        assert!(std::time::Instant::now() < deadline, "6 divergences written, got {}", diverged());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // The serving version's own component as the candidate: it answers alike.
    std::fs::write(&staged, eventpipe::plugin::embedded::BY_REASON).unwrap();
    std::fs::rename(&staged, &candidate).unwrap();
    // (A second report of the broken file, should the watch give one, is refused again first.)
    let live = loop {
        let line = wait_for("shadow candidate: plugin `by-reason`");
        if !line.contains("rejected") {
            break line;
        }
    };
    assert!(live.contains("is live"), "{live}");
    feed(6..10);
    drop(stdin);
    let summary: Value = loop {
        let line = lines.recv_timeout(std::time::Duration::from_secs(30)).expect("the summary");
        if let Ok(summary) = serde_json::from_str::<Value>(&line) {
            break summary;
        }
    };
    assert!(child.wait().unwrap().success());
    reader.join().unwrap();
    assert_eq!(summary["shadows"]["by-reason"], serde_json::json!({"compared": 10, "diverged": 6}), "{summary}");
    assert_eq!(diverged(), 6, "no divergence after the reload");
}
