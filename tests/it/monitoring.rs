//! `examples/monitoring/`: the Prometheus alert rules pass `promtool check rules` and their unit
//! tests (`promtool test rules`), and every series the rules and the Grafana dashboard query is
//! one eventpipe exports ([`eventpipe::metrics::FAMILIES`]) under the name its kind gives it:
//! a counter's `_total`, a histogram's `_bucket` / `_sum` / `_count`, a gauge's bare name.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use eventpipe::metrics::{FAMILIES, Kind};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/monitoring")
}

/// `promtool`, or `None` (the test is skipped) when it is not installed and `CI` is not set.
fn promtool() -> Option<PathBuf> {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join("promtool"))
        .find(|bin| bin.is_file());
    if found.is_none() {
        assert!(std::env::var_os("CI").is_none(), "promtool is not installed (.ci/run installs prometheus)");
        eprintln!("skipped: promtool is not installed (apt-get install prometheus)");
    }
    found
}

fn promtool_passes(args: &[&str]) {
    let Some(promtool) = promtool() else { return };
    let out = Command::new(promtool).args(args).current_dir(dir()).output().unwrap();
    assert!(
        out.status.success(),
        "promtool {args:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_alert_rules_pass_promtool_check() {
    promtool_passes(&["check", "rules", "eventpipe-alerts.yaml"]);
}

#[test]
fn the_alert_rules_pass_their_unit_tests() {
    promtool_passes(&["test", "rules", "eventpipe-alerts.test.yaml"]);
}

/// Every `eventpipe_…` name in `text`.
fn series_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("eventpipe_") {
        let tail = &rest[at..];
        let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        names.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// The series names eventpipe exports: per family, as its kind names its samples.
fn exported() -> BTreeSet<String> {
    FAMILIES
        .iter()
        .flat_map(|f| match f.kind {
            Kind::Counter | Kind::Nanoseconds => vec![format!("{}_total", f.name)],
            Kind::Gauge => vec![f.name.to_string()],
            Kind::DurationHistogram | Kind::SizeHistogram => {
                ["_bucket", "_sum", "_count"].iter().map(|s| format!("{}{s}", f.name)).collect()
            }
        })
        .collect()
}

/// The PromQL expressions of the alert rules and of the dashboard's panels.
fn expressions() -> Vec<(String, String)> {
    let rules: serde_json::Value =
        serde_norway::from_str(&std::fs::read_to_string(dir().join("eventpipe-alerts.yaml")).unwrap()).unwrap();
    let mut exprs = Vec::new();
    for group in rules["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            exprs.push((format!("rule {}", rule["alert"]), rule["expr"].as_str().unwrap().to_string()));
        }
    }
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir().join("eventpipe-dashboard.json")).unwrap()).unwrap();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            exprs.push((format!("panel {}", panel["title"]), target["expr"].as_str().unwrap().to_string()));
        }
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(query) = variable["query"].as_str() {
            exprs.push((format!("variable {}", variable["name"].as_str().unwrap()), query.to_string()));
        }
    }
    exprs
}

#[test]
fn every_series_the_rules_and_the_dashboard_query_is_exported() {
    let exported = exported();
    let exprs = expressions();
    assert!(exprs.len() >= 20, "{exprs:?}");
    let mut used = BTreeSet::new();
    for (what, expr) in &exprs {
        let names = series_names(expr);
        assert!(!names.is_empty() || what.starts_with("variable datasource"), "{what} queries no eventpipe series");
        for name in names {
            assert!(exported.contains(&name), "{what}: {name} is not a series eventpipe exports ({expr})");
            used.insert(name);
        }
    }
    // The alerts of issue #49 and the new histograms are covered.
    for name in [
        "eventpipe_sink_outcomes_total",
        "eventpipe_plugin_failures_total",
        "eventpipe_plugin_quarantined",
        "eventpipe_watcher_dropped_total",
        "eventpipe_event_latency_seconds_bucket",
        "eventpipe_nats_worker_partitions",
        "eventpipe_sink_write_duration_seconds_bucket",
        "eventpipe_plugin_call_duration_seconds_bucket",
        "eventpipe_sink_batch_size_count",
    ] {
        assert!(used.contains(name), "nothing queries {name}");
    }
}
