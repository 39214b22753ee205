//! Wasm watcher plugins attached to the Broadcaster with `run --watcher`: a watcher sees every
//! event; a trapping or looping one is counted and cut off, and the sink output is unchanged.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

/// `n` events of distinct objects, every `every`-th with reason `odd` (else `Started`).
fn stream(dir: &Path, n: usize, every: usize, odd: &str) -> PathBuf {
    let path = dir.join("events.jsonl");
    let mut text = String::new();
    for i in 0..n {
        let reason = if every > 0 && i % every == every - 1 { odd } else { "Started" };
        let event = json!({
            "metadata": {"name": format!("pod-{i}.1"), "namespace": "ns"},
            "involvedObject": {"kind": "Pod", "name": format!("pod-{i}"), "namespace": "ns"},
            "reason": reason, "message": "m", "type": "Normal", "count": 1,
            "source": {"component": "kubelet", "host": "n1"},
            "lastTimestamp": "2025-01-01T00:00:00Z"
        });
        text.push_str(&event.to_string());
        text.push('\n');
    }
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs `eventpipe run` with `extra` arguments; returns (summary, sink file text).
fn run(dir: &Path, source: &Path, extra: &[&str]) -> (Value, String) {
    let sink = dir.join(format!("calls-{}.jsonl", extra.len()));
    let out = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(["run", "--summary-json", "--no-watch", "--workers", "1"])
        .arg(format!("--source=jsonl:{}", source.display()))
        .arg(format!("--sink=jsonl:{}", sink.display()))
        .args(extra)
        .output()
        .expect("eventpipe runs");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stderr}");
    let summary = stderr.lines().rev().find_map(|l| serde_json::from_str(l).ok()).expect("a JSON summary");
    (summary, std::fs::read_to_string(sink).unwrap())
}

#[test]
fn an_attached_log_watcher_sees_every_event() {
    let dir = tempfile::tempdir().unwrap();
    // Fewer events than the watcher's queue holds: nothing can be dropped.
    let source = stream(dir.path(), 600, 0, "");
    let (summary, _) = run(dir.path(), &source, &["--watcher", "log"]);
    assert_eq!(summary["read"], 600, "{summary}");
    assert_eq!(summary["watchers"]["log"], json!({"seen": 600, "failed": 0, "dropped": 0}), "{summary}");
}

#[test]
fn a_trapping_or_looping_watcher_is_counted_and_cut_off_and_output_is_unchanged() {
    for odd in ["Trap", "Loop"] {
        let dir = tempfile::tempdir().unwrap();
        let source = stream(dir.path(), 600, 100, odd);
        let (plain, plain_calls) = run(dir.path(), &source, &[]);
        let plugin = crate::common::fixture_plugin("stall-watcher");
        let plugin = plugin.to_str().unwrap();
        let (summary, calls) = run(dir.path(), &source, &["--watcher", plugin, "--fuel-per-event", "200000"]);
        assert_eq!(calls, plain_calls, "{odd}: the watcher changed the sink output");
        assert_eq!(summary["created"], plain["created"], "{summary}");
        let w = &summary["watchers"]["stall_watcher"];
        let (seen, failed, dropped) =
            (w["seen"].as_u64().unwrap(), w["failed"].as_u64().unwrap(), w["dropped"].as_u64().unwrap());
        assert!(failed > 0, "{odd}: failures counted: {summary}");
        assert_eq!(seen + failed + dropped, 600, "{odd}: every event accounted for: {summary}");
    }
}
