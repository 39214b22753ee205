//! `eventpipe run` on the bundled real stream: its summary checked against counts made here,
//! independently of the pipeline, and its sink calls against `eventpipe replay` of the same stream:
//! in the same order with one partition (`--workers 1`), in the same order per source and
//! involved object with the default partitions.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::common;

fn bundled_stream() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/data/occurrences.jsonl")
}

/// Runs `eventpipe run ARGS` from `source` into a temporary sink file; returns (summary, sink
/// lines).
fn run(source: &Path, args: &[&str]) -> (Value, Vec<Value>) {
    run_from(&format!("--source=jsonl:{}", source.display()), Stdio::null(), args)
}

/// As [`run`], with the source given as its flag (`--source=…`) and what stdin is.
fn run_from(source: &str, stdin: Stdio, args: &[&str]) -> (Value, Vec<Value>) {
    let dir = tempfile::tempdir().unwrap();
    let sink = dir.path().join("calls.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(["run", "--summary-json", source])
        .arg(format!("--sink=jsonl:{}", sink.display()))
        .args(args)
        .stdin(stdin)
        .output()
        .expect("eventpipe runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8(out.stderr).unwrap();
    let summary = stderr.lines().rev().find_map(|l| serde_json::from_str(l).ok()).expect("a JSON summary on stderr");
    let calls = std::fs::read_to_string(sink).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    (summary, calls)
}

/// `events` grouped by what the default partition key hashes (source + involved object), each
/// group in its original order.
fn by_object<'a>(events: impl IntoIterator<Item = &'a Value>) -> BTreeMap<String, Vec<&'a Value>> {
    let mut groups: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for e in events {
        groups.entry(format!("{}|{}", e["source"], e["involvedObject"])).or_default().push(e);
    }
    groups
}

fn n(summary: &Value, key: &str) -> u64 {
    summary[key].as_u64().unwrap_or_else(|| panic!("summary has no {key}: {summary}"))
}

#[test]
fn run_on_the_bundled_stream_reports_what_it_did() {
    let source = bundled_stream();
    let (summary, calls) = run(&source, &["--workers=1"]);

    // Counted here, from the files, not by the pipeline.
    let input_events =
        std::fs::read_to_string(&source).unwrap().lines().filter(|l| !l.trim().is_empty()).count() as u64;
    let creates = calls.iter().filter(|c| c["verb"] == "create").count() as u64;
    let patches = calls.iter().filter(|c| c["verb"] == "patch").count() as u64;
    assert_eq!(n(&summary, "read"), input_events);
    assert_eq!((n(&summary, "bad_lines"), n(&summary, "dropped_incoming")), (0, 0));
    assert_eq!(n(&summary, "created"), creates);
    assert_eq!(n(&summary, "patched"), patches);
    assert_eq!(creates + patches + n(&summary, "skipped"), input_events, "every event written or skipped");
    assert!(
        patches > 0 && n(&summary, "skipped") > 0,
        "the stream exercises the logger and the spam filter: {summary}"
    );

    for call in &calls {
        let count = call["event"]["count"].as_i64().unwrap();
        match call["verb"].as_str().unwrap() {
            "create" => assert_eq!((count, &call["patch"]), (1, &Value::Null), "{call}"),
            _ => assert!(count > 1 && call["patch"]["count"] == count, "{call}"),
        }
    }

    // The same stream through the correlator alone (no Broadcaster, no sink): same decisions.
    let events: Vec<Value> =
        std::fs::read_to_string(&source).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let results = common::replay_with_event_clock(&events, &[]);
    let written: Vec<&Value> = results.iter().filter(|r| r["skip"] == false).map(|r| &r["event"]).collect();
    assert_eq!(results.len() as u64 - written.len() as u64, n(&summary, "skipped"));
    assert_eq!(written.len(), calls.len());
    for (call, event) in calls.iter().zip(&written) {
        assert_eq!(call["event"], **event);
    }

    // Partitioned (the default, and more partitions than cores): the same calls, in the same
    // order for each source and involved object.
    for workers in [None, Some("--workers=3")] {
        let (partitioned_summary, partitioned) = run(&source, workers.as_slice());
        for key in ["read", "created", "patched", "skipped", "aggregated"] {
            assert_eq!(n(&partitioned_summary, key), n(&summary, key), "{key} with {workers:?}");
        }
        assert_eq!(
            by_object(partitioned.iter().map(|c| &c["event"])),
            by_object(written.iter().copied()),
            "{workers:?}"
        );
    }
}

#[test]
fn bad_lines_are_counted_and_skipped_without_losing_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(bundled_stream()).unwrap();
    let good: Vec<&str> = text.lines().take(400).collect();
    let clean = dir.path().join("clean.jsonl");
    std::fs::write(&clean, good.join("\n") + "\n").unwrap();
    let mut noisy_lines = Vec::new();
    for (i, line) in good.iter().enumerate() {
        noisy_lines.push(line.to_string());
        // Two independent faults per 100 lines: a truncated object and a line of garbage.
        match i % 100 {
            7 => noisy_lines.push("{\"truncated\": ".into()),
            50 => noisy_lines.push("garbage".into()),
            _ => {}
        }
    }
    let noisy = dir.path().join("noisy.jsonl");
    std::fs::write(&noisy, noisy_lines.join("\n") + "\n").unwrap();

    let (clean_summary, clean_calls) = run(&clean, &[]);
    let (noisy_summary, noisy_calls) = run(&noisy, &[]);
    assert_eq!(n(&noisy_summary, "bad_lines"), 8, "{noisy_summary}");
    assert_eq!(n(&noisy_summary, "read"), 400);
    for key in ["created", "patched", "skipped", "aggregated"] {
        assert_eq!(n(&noisy_summary, key), n(&clean_summary, key), "{key}");
    }
    let events = |calls: &[Value]| calls.iter().map(|c| c["event"].clone()).collect::<Vec<_>>();
    let (noisy_events, clean_events) = (events(&noisy_calls), events(&clean_calls));
    assert_eq!(by_object(&noisy_events), by_object(&clean_events));
}

/// Each event of the bundled stream has its own name, `<involvedObject.name>.<hex>` as
/// client-go's recorder names it, so that with `--serve` the watch cache refuses no create as a
/// duplicate (`409 AlreadyExists`) and no sink write is dropped.
#[test]
fn the_bundled_stream_names_each_event_once_and_serve_drops_nothing() {
    let text = std::fs::read_to_string(bundled_stream()).unwrap();
    let mut names = std::collections::HashSet::new();
    for line in text.lines() {
        let event: Value = serde_json::from_str(line).unwrap();
        let name = event["metadata"]["name"].as_str().unwrap();
        let (object, hex) = name.rsplit_once('.').unwrap();
        assert_eq!(object, event["involvedObject"]["name"].as_str().unwrap_or(""), "{name}");
        assert!(u64::from_str_radix(hex, 16).is_ok(), "{name}");
        let key = (event["metadata"]["namespace"].as_str().unwrap().to_string(), name.to_string());
        assert!(names.insert(key), "{name} is used twice");
    }
    let (summary, calls) = run(&bundled_stream(), &["--serve=127.0.0.1:0", "--no-watch"]);
    assert_eq!(n(&summary, "read"), 13_860);
    assert_eq!((n(&summary, "dropped"), n(&summary, "gave_up")), (0, 0), "{summary}");

    // The totals count each write once, as the correlator decided it; the JSON-lines sink's
    // own figures are under `sinks`, and the watch cache, which got the same writes, apart.
    let verbs = |verb: &str| calls.iter().filter(|c| c["verb"] == verb).count() as u64;
    assert_eq!((n(&summary, "created"), n(&summary, "patched")), (verbs("create"), verbs("patch")), "{summary}");
    let sinks = summary["sinks"].as_object().expect("per-sink figures");
    assert_eq!(sinks.len(), 1, "only the JSON-lines sink: {summary}");
    let (label, sink) = sinks.iter().next().unwrap();
    assert!(label.starts_with("jsonl:"), "{label}");
    let cache = &summary["watch_cache"];
    for figures in [sink, cache] {
        assert_eq!((n(figures, "created"), n(figures, "patched")), (verbs("create"), verbs("patch")), "{summary}");
    }
    // `aggregated` is what this run aggregated; what the input held already aggregated is apart.
    let combined = text.lines().filter(|l| l.contains(r#""message":"(combined from similar events): "#)).count();
    assert!(combined > 0);
    assert_eq!(n(&summary, "already_aggregated"), combined as u64, "{summary}");
    let aggregated_calls = calls
        .iter()
        .filter(|c| c["event"]["message"].as_str().unwrap_or("").starts_with("(combined from similar events): "));
    assert!(n(&summary, "aggregated") < aggregated_calls.count() as u64, "{summary}");
}

/// A server beyond loopback without a token is refused, and the message names the flag that
/// asked for it: `--serve` for the events API, `--source http:…` for HTTP ingest.
#[test]
fn a_refused_server_names_its_own_flag() {
    for (args, flag) in [
        (&["--source=jsonl:-", "--serve=0.0.0.0:0"][..], "--serve"),
        (&["--source=http:0.0.0.0:0"][..], "--source http:"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
            .args(["run", "--no-watch", "--sink=jsonl:/dev/null"])
            .args(args)
            .env("EVENTPIPE_INGEST_TOKEN", "")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {stderr}");
        assert!(stderr.contains("without a bearer token") && stderr.contains(flag), "{args:?}: {stderr}");
        assert!(!stderr.contains("metrics"), "{args:?}: {stderr}");
    }
}

/// A line with two faults (a misplaced `}` closes the document early, so it fails to decode and
/// the rest of the line is text after it) is one bad line.
#[test]
fn a_line_with_several_faults_counts_once_in_bad_lines() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(bundled_stream()).unwrap();
    let good: Vec<&str> = text.lines().take(3).collect();
    let two_faults = good[1].replacen(r#""involvedObject":{"#, r#""involvedObject":}{"#, 1);
    assert_ne!(two_faults, good[1]);
    let file = dir.path().join("noisy.jsonl");
    std::fs::write(&file, [good[0], two_faults.as_str(), good[2]].join("\n") + "\n").unwrap();
    let (summary, _) = run(&file, &[]);
    assert_eq!((n(&summary, "read"), n(&summary, "bad_lines")), (2, 1), "{summary}");
}

#[test]
fn a_huge_line_is_skipped_in_bounded_memory_and_the_next_line_is_read() {
    let text = std::fs::read_to_string(bundled_stream()).unwrap();
    let good: Vec<&str> = text.lines().take(2).collect();
    let (growth_kib, out) = common::peak_rss_growth_over_a_huge_line(
        &["run", "--summary-json", "--no-watch", "--source=jsonl:-", "--sink=jsonl:/dev/null"],
        good[0],
        good[1],
    );
    let stderr = String::from_utf8(out.stderr).unwrap();
    let summary: Value = stderr.lines().rev().find_map(|l| serde_json::from_str(l).ok()).expect("a summary");
    assert_eq!((n(&summary, "read"), n(&summary, "bad_lines")), (2, 1), "{summary}");
    // The reader keeps at most `MAX_LINE_BYTES` (4 MiB) of a line, in a few buffers.
    assert!(growth_kib < 48 << 10, "peak RSS grew by {growth_kib} KiB while a 1 GiB line went by");
}

/// Stdin redirected from a regular file (`< FILE`) is read as that file is: the same sink calls,
/// in the same order (one partition), as `--source jsonl:FILE`.
#[test]
fn stdin_redirected_from_a_file_gives_the_sink_calls_of_the_file_source() {
    let source = bundled_stream();
    let (summary, calls) = run(&source, &["--workers=1", "--no-watch"]);
    let stdin = std::fs::File::open(&source).unwrap();
    let (from_stdin, stdin_calls) = run_from("--source=jsonl:-", stdin.into(), &["--workers=1", "--no-watch"]);
    assert!(n(&summary, "read") > 10_000, "{summary}");
    assert_eq!(n(&from_stdin, "read"), n(&summary, "read"), "{from_stdin}");
    assert_eq!(stdin_calls, calls);
}

/// `eventpipe completions SHELL` prints a completion script that knows every subcommand and
/// their flags.
#[test]
fn completions_cover_every_subcommand_and_flag() {
    for shell in ["bash", "zsh", "fish"] {
        let out =
            std::process::Command::new(env!("CARGO_BIN_EXE_eventpipe")).args(["completions", shell]).output().unwrap();
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8(out.stdout).unwrap();
        for word in ["validate", "replay", "new-plugin", "events-api", "summary-json"] {
            assert!(script.contains(word), "{shell} completions lack {word}");
        }
    }
    let bad =
        std::process::Command::new(env!("CARGO_BIN_EXE_eventpipe")).args(["completions", "cmd.exe"]).output().unwrap();
    assert!(!bad.status.success());
}

/// An error is printed once, however many layers carry it; a missing file is called missing.
#[test]
fn errors_are_printed_once_and_a_missing_file_is_named_so() {
    let eventpipe = || std::process::Command::new(env!("CARGO_BIN_EXE_eventpipe"));
    let out = eventpipe().args(["run", "--source=jsonl:/nonexistent/in.jsonl", "--sink=jsonl:-"]).output().unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    let line = stderr.lines().last().unwrap();
    assert_eq!(line.matches("No such file or directory").count(), 1, "{line}");
    let out = eventpipe()
        .args(["test", "/nonexistent/plugin.wasm", "--input=/dev/null", "--expected=/dev/null"])
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("/nonexistent/plugin.wasm: no such file"), "{stderr}");
    // A sink file in a missing directory: the message `validate` gives.
    let out = eventpipe()
        .args(["run", "--source=jsonl:/dev/null", "--sink=jsonl:/nonexistent-dir/out.jsonl"])
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(!out.status.success());
    assert!(
        stderr.contains("sink jsonl:/nonexistent-dir/out.jsonl: directory /nonexistent-dir does not exist"),
        "{stderr}"
    );
}

/// Loading the plugins directory at start is not a swap: a run in which no plugin file changed
/// reports none.
#[test]
fn a_run_without_plugin_changes_reports_no_swap() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = crate::common::plugins_dir(dir.path(), &["keep-all"]);
    std::fs::copy(crate::common::fixture_plugin("keep-all"), plugins.join("by-reason.wasm")).ok();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(["run", "--source=jsonl:-", "--sink=jsonl:-", "--summary-json", "--no-watch"])
        .arg(format!("--plugins={}", plugins.display()))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stderr}");
    let summary: Value = stderr.lines().rev().find_map(|l| serde_json::from_str(l).ok()).unwrap();
    assert_eq!(summary["plugin_swaps"], 0, "{stderr}");
}

/// `eventpipe bench` decodes the input, times passes of the tenant stage and reports per
/// plugin what it cost, as a table or JSON.
#[test]
fn bench_reports_the_stage_and_every_plugin_of_the_plan() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = crate::common::plugins_dir(dir.path(), &["drop-reasons"]);
    let config = dir.path().join("eventpipe.toml");
    std::fs::write(&config, "[defaults]\nfilters = [\"drop-reasons\"]\n[plugins.drop-reasons]\nreasons = \"Pulled\"\n")
        .unwrap();
    let input = bundled_stream();
    let lines = std::fs::read_to_string(&input).unwrap().lines().count();
    let bench = |json: bool| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_eventpipe"));
        cmd.args(["bench", "--reps=2"])
            .arg(format!("--input={}", input.display()))
            .arg(format!("--config={}", config.display()))
            .arg(format!("--plugins={}", plugins.display()));
        if json {
            cmd.arg("--json");
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let report: Value = serde_json::from_str(&bench(true)).unwrap();
    assert_eq!((report["events"].as_u64(), report["reps"].as_u64()), (Some(lines as u64), Some(2)));
    let stage = &report["stage_ns_per_event"];
    assert!(stage["min"].as_f64().unwrap() > 0.0 && stage["min"].as_f64() <= stage["max"].as_f64(), "{report}");
    assert!(report["events_per_second"].as_f64().unwrap() > 0.0);
    let plugin =
        |name: &str| report["plugins"].as_array().unwrap().iter().find(|p| p["plugin"] == name).cloned().unwrap();
    let keys = plugin("by-reason");
    assert_eq!(keys["kind"], "aggregate-key");
    let hit_rate = keys["memo_hit_rate"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&hit_rate) && hit_rate > 0.5, "the bundled stream repeats itself: {keys}");
    assert!(keys["fuel_per_event"].as_f64().unwrap() > 0.0 && keys["ns_per_event"]["median"].as_f64().unwrap() > 0.0);
    let filter = plugin("drop-reasons");
    assert_eq!((filter["kind"].as_str(), filter["memo_hit_rate"].as_f64()), (Some("filter"), None));
    assert!(filter["calls_per_pass"].as_f64().unwrap() >= 1.0);
    let table = bench(false);
    assert!(table.contains("tenant stage:") && table.contains("ns/event") && table.contains("drop-reasons"), "{table}");
    // `--filter` selects filters as `run`'s does: over `[defaults]` that lists none (which also
    // keeps the plugins directory's drop-in filter out).
    std::fs::write(&config, "[defaults]\nfilters = []\n[plugins.drop-reasons]\nreasons = \"Pulled\"\n").unwrap();
    let filters = |extra: &[&str]| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_eventpipe"));
        cmd.args(["bench", "--reps=1", "--json"])
            .arg(format!("--input={}", input.display()))
            .arg(format!("--config={}", config.display()))
            .arg(format!("--plugins={}", plugins.display()))
            .args(extra);
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        report["plugins"].as_array().unwrap().iter().filter(|p| p["kind"] == "filter").count()
    };
    assert_eq!((filters(&[]), filters(&["--filter=drop-reasons"])), (0, 1));
}

/// With two sinks, each event counts once in the summary (the spam filter's skips are the
/// stream's, as with one sink), and each sink's writes appear on their own, labelled by sink.
#[test]
fn two_sinks_count_each_event_once_and_each_sink_apart() {
    let source = bundled_stream();
    let (one, calls) = run(&source, &[]);
    let dir = tempfile::tempdir().unwrap();
    let second = dir.path().join("second.jsonl");
    let (two, _) = run(&source, &[&format!("--sink=jsonl:{}", second.display())]);
    assert!(n(&one, "skipped") > 0, "{one}");
    for key in ["skipped", "aggregated", "filtered", "received"] {
        assert_eq!(n(&two, key), n(&one, key), "{key}: {two}");
    }
    let sinks = two["sinks"].as_object().expect("per-sink figures");
    assert_eq!(sinks.len(), 2, "{two}");
    let written = calls.len() as u64;
    for (label, s) in sinks {
        assert!(label.starts_with("jsonl:"), "{label}");
        assert_eq!(s["created"].as_u64().unwrap() + s["patched"].as_u64().unwrap(), written, "{label}: {s}");
    }
}

/// `--summary-json=-` puts the summary on stdout and `--summary-json=FILE` into FILE (stderr
/// keeps only the logs); the sentence has a line per tenant when there are several.
#[test]
fn the_summary_goes_where_it_is_told_and_names_each_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("two.toml");
    std::fs::write(&config, "[[tenants]]\nname = \"system\"\nmatch = { namespaces = [\"kube-*\"] }\n").unwrap();
    let sink = format!("--sink=jsonl:{}", dir.path().join("calls.jsonl").display());
    let source = format!("--source=jsonl:{}", bundled_stream().display());
    let eventpipe = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
            .args(["run", &source, &sink, &format!("--config={}", config.display())])
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        (String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
    };
    let (stdout, stderr) = eventpipe(&["--summary-json=-"]);
    let on_stdout: Value = serde_json::from_str(stdout.trim()).expect("the JSON summary on stdout");
    assert!(!stderr.contains("\"created\""), "{stderr}");
    let file = dir.path().join("summary.json");
    let (stdout, _) = eventpipe(&[&format!("--summary-json={}", file.display())]);
    assert!(stdout.is_empty(), "{stdout}");
    let in_file: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(n(&in_file, "created"), n(&on_stdout, "created"));
    let tenants = on_stdout["tenants"].as_object().unwrap();
    assert_eq!(tenants.keys().collect::<Vec<_>>(), ["default", "system"], "{on_stdout}");

    let (_, stderr) = eventpipe(&[]);
    for (name, t) in tenants {
        let line = format!(
            "  tenant `{name}`: received {}, filtered 0; created {}, patched {},",
            n(t, "received"),
            n(t, "created"),
            n(t, "patched")
        );
        assert!(stderr.contains(&line), "{line:?} in {stderr}");
    }
}
