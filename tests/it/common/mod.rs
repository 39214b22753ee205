//! Helpers shared by the integration tests: fixture paths and the conformance comparison rules
//! of `../shared/conformance/README.md` ("compare as JSON, not as bytes").
#![allow(dead_code)]

use std::path::PathBuf;

pub mod apiserver;
pub mod recording_webhook;

use serde_json::Value;

/// The shared conformance directory next to this repository, when present.
pub fn shared_conformance() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/conformance");
    dir.is_dir().then_some(dir)
}

/// The bytes of `path`, gunzipped when it ends in `.gz`.
pub fn read_maybe_gz(path: &std::path::Path) -> Vec<u8> {
    use std::io::Read;
    let raw = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if path.extension().is_some_and(|x| x == "gz") {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&raw[..]).read_to_end(&mut out).unwrap();
        out
    } else {
        raw
    }
}

/// `tests/fixtures/<rel>` of this repository.
pub fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures").join(rel)
}

/// Every scenario of `vectors.jsonl` whose `kind` is `kind`.
pub fn scenarios(kind: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(fixture("vectors.jsonl")).expect("vectors.jsonl");
    let all: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).expect("vector line")).collect();
    let picked: Vec<Value> = all.into_iter().filter(|s| s["kind"] == kind).collect();
    assert!(!picked.is_empty(), "no scenario of kind {kind}");
    picked
}

/// Missing, `null` and `""` are alike (Go's zero values).
fn is_zero(v: Option<&Value>) -> bool {
    matches!(v, None | Some(Value::Null)) || v.and_then(Value::as_str) == Some("")
}

/// A timestamp as whole Unix seconds, if `v` is an RFC 3339 string.
fn instant_seconds(v: &Value) -> Option<i64> {
    v.as_str().and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok()).map(|t| t.timestamp())
}

/// Whether every field of `expected` is in `actual` under the conformance rules: missing / null /
/// "" alike, timestamps compared as instants to the second, objects compared recursively
/// (extra fields in `actual` allowed only when `subset`), arrays element-wise.
pub fn json_matches(expected: &Value, actual: &Value, subset: bool, path: &str) -> Result<(), String> {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (k, ev) in e {
                let p = format!("{path}.{k}");
                match a.get(k) {
                    _ if is_zero(Some(ev)) && is_zero(a.get(k)) => {}
                    Some(av) => json_matches(ev, av, subset, &p)?,
                    None if is_zero(Some(ev))
                        || ev.as_object().is_some_and(|o| o.values().all(|v| is_zero(Some(v)))) => {}
                    None => return Err(format!("{p}: expected {ev}, missing")),
                }
            }
            if !subset {
                for (k, av) in a {
                    if !e.contains_key(k) && !is_zero(Some(av)) && !av.as_object().is_some_and(|o| o.is_empty()) {
                        return Err(format!("{path}.{k}: unexpected {av}"));
                    }
                }
            }
            Ok(())
        }
        (Value::Array(e), Value::Array(a)) if e.len() == a.len() => e
            .iter()
            .zip(a)
            .enumerate()
            .try_for_each(|(i, (ev, av))| json_matches(ev, av, subset, &format!("{path}[{i}]"))),
        _ if is_zero(Some(expected)) && is_zero(Some(actual)) => Ok(()),
        _ if expected == actual => Ok(()),
        _ => match (instant_seconds(expected), instant_seconds(actual)) {
            (Some(e), Some(a)) if e == a => Ok(()),
            _ => Err(format!("{path}: expected {expected}, got {actual}")),
        },
    }
}

/// One replay output line compared with client-go's, as the conformance README says:
/// `skip`, `patch` (key order irrelevant) and `event` ignoring `metadata.resourceVersion` and
/// `metadata.creationTimestamp`.
pub fn replay_line_matches(expected: &Value, actual: &Value) -> Result<(), String> {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.pointer_mut("/event/metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
            m.remove("creationTimestamp");
        }
        v
    };
    json_matches(&strip(expected), &strip(actual), false, "")
}

/// Puts one way of computing keys into correlator options.
pub type KeyFunctions = fn(eventpipe::correlator::CorrelatorOptions) -> eventpipe::correlator::CorrelatorOptions;

/// The two ways eventpipe computes keys: the native client-go functions, and the default Wasm
/// plugins (the path `replay` and `run` take by default). Conformance tests run both.
pub fn correlator_paths() -> Vec<(&'static str, KeyFunctions)> {
    vec![("native", |o| o), ("wasm", with_default_plugins)]
}

/// `options` with the default Wasm plugins as key, message and spam-key functions; a custom
/// spam-key function already in `options` is kept.
pub fn with_default_plugins(
    mut options: eventpipe::correlator::CorrelatorOptions,
) -> eventpipe::correlator::CorrelatorOptions {
    use eventpipe::plugin::functions::CorrelatorPlugins;
    use eventpipe::plugin::registry::PluginRegistry;
    use eventpipe::plugin::{Metering, PluginRuntime, PluginSettings};
    static PLUGINS: std::sync::OnceLock<CorrelatorPlugins> = std::sync::OnceLock::new();
    let plugins = PLUGINS.get_or_init(|| {
        let registry = PluginRegistry::new(PluginRuntime::new(Metering::Fuel).expect("wasm runtime"))
            .expect("embedded plugins load");
        CorrelatorPlugins::defaults(&registry, "default", &PluginSettings::default()).expect("default plugins")
    });
    let custom_spam_key = options.spam_key_func.take();
    let mut options = plugins.apply(options).expect("default plugins have the right kinds");
    if custom_spam_key.is_some() {
        options.spam_key_func = custom_spam_key;
    }
    options
}

/// A `plugins` directory under `dir` holding the fixture plugins `names` as `NAME.wasm`.
pub fn plugins_dir(dir: &std::path::Path, names: &[&str]) -> PathBuf {
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    for name in names {
        std::fs::copy(fixture_plugin(name), plugins.join(format!("{name}.wasm"))).unwrap();
    }
    plugins
}

/// The component of test fixture plugin `name` (the crate `tests/plugins/<name>`, package
/// `fixture-<name>`), all fixtures built once per test binary for wasm32-wasip2 into
/// `target/wasm-plugins`.
pub fn fixture_plugin(name: &str) -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = BUILT.get_or_init(|| {
        let target = root.join("target").join("wasm-plugins");
        let mut build = std::process::Command::new(option_env!("CARGO").unwrap_or("cargo"));
        build
            .current_dir(root.join("plugins"))
            .args(["build", "--release", "--locked", "--target", "wasm32-wasip2", "--target-dir"])
            .arg(&target);
        // Every crate under tests/plugins is a fixture package `fixture-<dir name>`.
        let fixtures = std::fs::read_dir(root.join("tests").join("plugins")).expect("tests/plugins");
        for dir in fixtures.filter_map(Result::ok).filter(|d| d.path().join("Cargo.toml").is_file()) {
            build.arg("-p").arg(format!("fixture-{}", dir.file_name().to_string_lossy()));
        }
        for var in ["RUSTFLAGS", "CARGO_ENCODED_RUSTFLAGS", "CARGO_BUILD_TARGET", "CARGO_TARGET_DIR"] {
            build.env_remove(var);
        }
        assert!(build.status().expect("cargo runs").success(), "building the fixture plugins failed");
        target.join("wasm32-wasip2").join("release")
    });
    dir.join(format!("{}.wasm", name.replace('-', "_")))
}

/// The stderr lines of `child` (spawned with a piped stderr) as they come, read on a thread.
pub fn stderr_lines(child: &mut std::process::Child) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().expect("stderr is piped");
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    rx
}

/// Waits (up to 120 s) among a run's stderr `lines` for its `metrics on http://ADDR/metrics`
/// line; returns `ADDR` (`HOST:PORT`).
pub fn metrics_address(lines: &std::sync::mpsc::Receiver<String>) -> String {
    loop {
        let line =
            lines.recv_timeout(std::time::Duration::from_secs(120)).expect("the run announces its metrics address");
        if let Some((_, rest)) = line.split_once("metrics on http://") {
            return rest.trim_end_matches("/metrics").to_string();
        }
    }
}

/// The metrics address (`HOST:PORT`) of a run spawned with a piped stderr ([`metrics_address`]);
/// the rest of its stderr is drained on a thread, so that the run never blocks on a full pipe.
pub fn metrics_address_draining(child: &mut std::process::Child) -> String {
    let lines = stderr_lines(child);
    let metrics = metrics_address(&lines);
    std::thread::spawn(move || while lines.recv().is_ok() {});
    metrics
}

/// A webhook sink back-off for tests: 1 ms doubling up to 5 s, 5 attempts, no jitter.
pub fn quick_backoff() -> eventpipe::sink::webhook::Backoff {
    eventpipe::sink::webhook::Backoff {
        base: std::time::Duration::from_millis(1),
        cap: std::time::Duration::from_secs(5),
        max_attempts: Some(5),
        jitter: std::sync::Arc::new(|| 0.0),
    }
}

/// Runs `eventpipe ARGS` with stdin `before`, a 1 GiB line, `after`, each line ended by `\n`,
/// and returns how much its peak resident memory grew over the same process with the same
/// stdin but no huge line, in KiB (`VmHWM`, read once the lines have gone by, before stdin
/// closes), and the output of the run with the huge line (stdout and stderr piped). Growth, not
/// the peak itself: the process alone (runtime, compiled plugins) takes ~45 MiB, more or less
/// with the machine's load; holding the line would take 1 GiB more.
pub fn peak_rss_growth_over_a_huge_line(args: &[&str], before: &str, after: &str) -> (u64, std::process::Output) {
    let (baseline, _) = peak_rss_with(args, before, after, 0);
    let (peak, out) = peak_rss_with(args, before, after, 1024);
    (peak.saturating_sub(baseline), out)
}

/// `eventpipe ARGS` fed `before`, a line of `mib` MiB (none for 0), `after`: its `VmHWM` in
/// KiB once they have gone by, and its output.
fn peak_rss_with(args: &[&str], before: &str, after: &str, mib: usize) -> (u64, std::process::Output) {
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{before}").unwrap();
    if mib > 0 {
        // The pipe only takes the line as fast as eventpipe reads it.
        let block = vec![b'x'; 1 << 20];
        stdin.write_all(b"{\"message\":\"").unwrap();
        for _ in 0..mib {
            stdin.write_all(&block).unwrap();
        }
        writeln!(stdin, "\"}}").unwrap();
    }
    writeln!(stdin, "{after}").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let peak_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/PID/status");
    drop(stdin);
    (peak_kib, child.wait_with_output().unwrap())
}

/// `eventpipe replay FLAGS` of `events`, each with its own `lastTimestamp` as its clock (what
/// `run --clock event`, the default, reads): every result line, in order.
pub fn replay_with_event_clock<'a>(events: impl IntoIterator<Item = &'a Value>, flags: &[&str]) -> Vec<Value> {
    use std::io::Write;
    let mut input = Vec::new();
    for event in events {
        writeln!(input, "{}", serde_json::json!({ "clock": event["lastTimestamp"], "event": event })).unwrap();
    }
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .arg("replay")
        .args(flags)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Debian's `kubectl` (package `kubernetes-client`, or `$EVENTPIPE_KUBECTL`), or `None` with a
/// printed line when it is missing; under `CI` a missing kubectl fails the test (`.ci/run`
/// unpacks it into `target/kubernetes-client`, because `/usr/bin/kubectl` may be another one,
/// e.g. the Google Cloud SDK's dispatcher).
pub fn kubectl_or_skip() -> Option<PathBuf> {
    match kubectl() {
        Ok(path) => Some(path),
        Err(reason) if std::env::var_os("CI").is_some() => panic!("kubectl: {reason}"),
        Err(reason) => {
            println!("skipped: {reason}");
            None
        }
    }
}

fn kubectl() -> Result<PathBuf, String> {
    let unpacked = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/kubernetes-client/usr/bin/kubectl");
    let candidates = std::env::var_os("EVENTPIPE_KUBECTL").map(PathBuf::from).into_iter().chain([unpacked]);
    for candidate in candidates {
        let version = std::process::Command::new(&candidate).args(["version", "--client"]).output();
        if version.is_ok_and(|o| o.status.success()) {
            return Ok(candidate);
        }
    }
    Err("kubectl not found (run .ci/run, or set EVENTPIPE_KUBECTL)".into())
}
