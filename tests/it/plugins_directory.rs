//! The plugins directory is drop-in: a filter plugin copied into `--plugins DIR` filters every
//! tenant whose config lists no `filters` (the Rust example `quiet-normal`, built from source),
//! and removing or adding the file while `eventpipe run` goes on detaches or attaches it through
//! the hot-reload path, with nothing lost. A config that lists `filters`, or `--filter`, takes
//! control; a drop-in filter nothing uses is named in one warning.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::example_plugins::build_rust;
use crate::hot_reload::{Running, lines};

fn bundled_stream() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/data/occurrences.jsonl")
}

/// The Rust example filter `quiet-normal`, built for wasm32-wasip2.
fn quiet_normal() -> PathBuf {
    build_rust().into_iter().find(|b| b.name == "quiet-normal").expect("the Rust filter example").file
}

/// A plugins directory under `dir` holding only the example filter, as `quiet-normal.wasm`.
fn plugins_with_filter(dir: &Path) -> PathBuf {
    let plugins = dir.join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    std::fs::copy(quiet_normal(), plugins.join("quiet-normal.wasm")).unwrap();
    plugins
}

/// `eventpipe run` on the bundled stream with `args`; returns (summary, stderr).
fn run_bundled(dir: &Path, args: &[String]) -> (Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .current_dir(dir)
        .args(["run", "--summary-json", "--no-watch", "--workers=1"])
        .arg(format!("--source=jsonl:{}", bundled_stream().display()))
        .arg(format!("--sink=jsonl:{}", dir.join("out.jsonl").display()))
        .arg(format!("--compile-cache={}", dir.join("cache").display()))
        .args(args)
        .output()
        .expect("eventpipe runs");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stderr}");
    let summary = stderr.lines().rev().find_map(|l| serde_json::from_str(l).ok()).expect("a JSON summary");
    (summary, stderr)
}

/// The routine `Normal` reasons `quiet-normal` drops by default.
const ROUTINE: [&str; 5] = ["Scheduled", "Pulling", "Pulled", "Created", "Started"];

#[test]
fn a_filter_dropped_into_the_plugins_directory_filters_without_a_config() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugins_with_filter(dir.path());
    let (summary, stderr) = run_bundled(dir.path(), &[format!("--plugins={}", plugins.display())]);
    let routine = std::fs::read_to_string(bundled_stream())
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "Normal" && ROUTINE.iter().any(|r| e["reason"] == *r))
        .count() as u64;
    assert!(routine > 0, "the stream has routine Normal events");
    assert_eq!(summary["filtered"], routine, "every routine Normal event is filtered: {summary}");
    assert!(stderr.contains("filters=[quiet-normal]"), "the plan names the drop-in filter: {stderr}");

    // A config that lists `filters` takes control: the drop-in filter is not used, and one
    // warning names it and says how to enable it.
    let config = dir.path().join("eventpipe.toml");
    std::fs::write(&config, "[defaults]\nfilters = []\n").unwrap();
    let (summary, stderr) = run_bundled(
        dir.path(),
        &[format!("--plugins={}", plugins.display()), format!("--config={}", config.display())],
    );
    assert_eq!(summary["filtered"], 0, "{summary}");
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("WARN") && l.contains("quiet-normal")).collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(warnings[0].contains("used by no tenant") && warnings[0].contains("filters"), "{}", warnings[0]);

    // `--filter FILE.wasm` without a plugins directory: the same filter, from the command line.
    let (summary, stderr) = run_bundled(dir.path(), &[format!("--filter={}", quiet_normal().display())]);
    assert_eq!(summary["filtered"], routine, "{summary}");
    assert!(stderr.contains("filters=[quiet_normal]"), "{stderr}");
}

/// Event `i`: its own object, `Normal`, with reason `reason`.
fn event_line(i: usize, reason: &str) -> String {
    serde_json::json!({
        "metadata": {"name": format!("obj-{i}.1"), "namespace": "dropin"},
        "involvedObject": {"kind": "Pod", "namespace": "dropin", "name": format!("obj-{i}"), "uid": format!("uid-{i}")},
        "reason": reason, "message": format!("m{i}"), "type": "Normal",
        "source": {"component": "test"},
        "firstTimestamp": "2025-01-01T00:00:00Z", "lastTimestamp": "2025-01-01T00:00:00Z", "count": 1
    })
    .to_string()
        + "\n"
}

/// Waits until the sink file has `n` lines (the run flushes it every second or so): the events
/// sent so far went through the plan they were sent under.
fn written(out: &Path, n: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::fs::read_to_string(out).map_or(0, |t| t.lines().count()) < n {
        assert!(std::time::Instant::now() < deadline, "the sink never had {n} lines");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Events `from..to`, every other one routine (`Pulled`, which the filter drops).
fn batch(from: usize, to: usize) -> String {
    (from..to).map(|i| event_line(i, if i % 2 == 0 { "Pulled" } else { "Killing" })).collect()
}

#[test]
fn removing_and_adding_a_drop_in_filter_while_running_detaches_and_attaches_it() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugins_with_filter(dir.path());
    let out = dir.path().join("out.jsonl");
    let mut run = Running::start(&[
        format!("--sink=jsonl:{}", out.display()),
        format!("--plugins={}", plugins.display()),
        format!("--compile-cache={}", dir.path().join("cache").display()),
    ]);
    run.wait_for(&["tenant `default`", "filters=[quiet-normal]"]);
    run.send(&batch(0, 100));
    written(&out, 50);
    std::fs::remove_file(plugins.join("quiet-normal.wasm")).unwrap();
    run.wait_for_next(&["tenant `default`", "filters=[]"]);
    run.send(&batch(100, 200));
    written(&out, 150);
    let filter = std::fs::read(quiet_normal()).unwrap();
    let tmp = plugins.join(".quiet-normal.wasm.tmp");
    std::fs::write(&tmp, filter).unwrap();
    std::fs::rename(&tmp, plugins.join("quiet-normal.wasm")).unwrap();
    run.wait_for_next(&["tenant `default`", "filters=[quiet-normal]"]);
    run.send(&batch(200, 300));
    let (summary, _) = run.finish();

    // 50 routine events in each of the first and last hundred; none filtered in between.
    assert_eq!(summary["filtered"], 100, "{summary}");
    let results = lines(&out);
    let names: Vec<usize> =
        results.iter().map(|r| r["event"]["involvedObject"]["name"].as_str().unwrap()[4..].parse().unwrap()).collect();
    let expected: Vec<usize> = (0..300).filter(|i| (100..200).contains(i) || i % 2 == 1).collect();
    assert_eq!(names, expected, "nothing lost, in input order");
}

/// A watcher plugin in the plugins directory is attached to the Broadcaster without a flag or a
/// config; `--watcher` takes control, and the drop-in one is named in one warning.
#[test]
fn a_watcher_dropped_into_the_plugins_directory_is_attached() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    std::fs::write(plugins.join("audit.wasm"), eventpipe::plugin::embedded::LOG).unwrap();
    let (summary, _) = run_bundled(dir.path(), &[format!("--plugins={}", plugins.display())]);
    let read = summary["read"].as_u64().unwrap();
    let audit = &summary["watchers"]["audit"];
    let count = |key: &str| audit[key].as_u64().unwrap_or_else(|| panic!("{key}: {summary}"));
    assert!(count("seen") > 0, "the drop-in watcher is attached: {summary}");
    assert_eq!(count("seen") + count("dropped") + count("failed"), read, "{summary}");

    let (summary, stderr) =
        run_bundled(dir.path(), &[format!("--plugins={}", plugins.display()), "--watcher=log".into()]);
    assert!(summary["watchers"].get("audit").is_none(), "{summary}");
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("WARN") && l.contains("`audit`")).collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(warnings[0].contains("--watcher audit"), "{}", warnings[0]);
}
