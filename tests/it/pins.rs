//! Pinned plugins through `eventpipe run`, `validate` and `plugins lock` as processes: a plugin
//! whose bytes do not match its pin is refused at start (exit 1, both digests named) and on hot
//! reload (the pinned version serves on, counted on `/metrics`); one matching its pin runs.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use eventpipe::plugin::embedded::BY_REASON;
use eventpipe::plugin::pin::Sha256Digest;

/// `by-reason` with a custom section `v` holding `tag`: other bytes, the same plugin.
fn by_reason(tag: u8) -> Vec<u8> {
    let mut bytes = BY_REASON.to_vec();
    bytes.extend_from_slice(&[0, 3, 1, b'v', tag]);
    bytes
}

fn events(n: usize) -> String {
    (0..n)
        .map(|i| {
            serde_json::json!({
                "metadata": {"name": format!("pod-{i}.1"), "namespace": "pins"},
                "involvedObject": {"kind": "Pod", "namespace": "pins", "name": format!("pod-{i}"), "uid": format!("u{i}")},
                "reason": "Started", "message": "started", "type": "Normal", "source": {"component": "kubelet"},
                "firstTimestamp": "2025-01-01T00:00:00Z", "lastTimestamp": "2025-01-01T00:00:00Z", "count": 1
            })
            .to_string()
                + "\n"
        })
        .collect()
}

fn eventpipe(args: &[String]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_eventpipe")).args(args).output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `dir/plugins` with `by-reason.wasm` holding `bytes`.
fn plugins_with(dir: &Path, bytes: &[u8]) -> std::path::PathBuf {
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::write(plugins.join("by-reason.wasm"), bytes).unwrap();
    plugins
}

/// `run` over three events from a file, with the plugins directory and `extra` flags.
fn run_file(dir: &Path, plugins: &Path, extra: &[String]) -> Output {
    let input = dir.join("in.jsonl");
    std::fs::write(&input, events(3)).unwrap();
    let mut args = vec![
        "run".into(),
        format!("--source=jsonl:{}", input.display()),
        format!("--sink=jsonl:{}", dir.join("out.jsonl").display()),
        format!("--plugins={}", plugins.display()),
        format!("--compile-cache={}", dir.join("cache").display()),
    ];
    args.extend_from_slice(extra);
    eventpipe(&args)
}

#[test]
fn a_plugin_pinned_to_another_digest_is_refused_at_start_and_one_pinned_to_its_own_runs() {
    let dir = tempfile::tempdir().unwrap();
    let file = by_reason(1);
    let plugins = plugins_with(dir.path(), &file);
    let (own, other) = (Sha256Digest::of(&file), Sha256Digest::of(BY_REASON));

    // Pinned on the command line, and in the config: refused, naming the plugin and both digests.
    let config = dir.path().join("eventpipe.toml");
    std::fs::write(&config, format!("[plugins.by-reason]\ndigest = \"{other}\"\n")).unwrap();
    for pin in [format!("--plugin-digest=by-reason={other}"), format!("--config={}", config.display())] {
        let out = run_file(dir.path(), &plugins, std::slice::from_ref(&pin));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{pin}: {stderr}");
        let last = stderr.lines().last().unwrap();
        for needle in ["plugin `by-reason`", &format!("pinned to {other}"), &format!("its bytes are {own}")] {
            assert!(last.contains(needle), "{pin}: no {needle} in {last}");
        }
        assert!(!dir.path().join("out.jsonl").exists(), "nothing ran");
        let out = eventpipe(&[
            "validate".into(),
            format!("--plugins={}", plugins.display()),
            pin.clone(),
            format!("--compile-cache={}", dir.path().join("cache").display()),
        ]);
        assert_eq!(out.status.code(), Some(1), "{pin}: validate refuses it too");
        assert!(text(&out.stderr).contains(&format!("pinned to {other}, but its bytes are {own}")), "{pin}");
    }

    // Pinned to its own digest (the flag wins over the config): it runs.
    let out = run_file(
        dir.path(),
        &plugins,
        &[format!("--config={}", config.display()), format!("--plugin-digest=by-reason={own}")],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(dir.path().join("out.jsonl")).unwrap().lines().count(), 3);
}

/// `run` from standard input into `dir/out.jsonl`, with `plugins` and `by-reason` pinned to
/// `pinned`'s digest, and `extra` flags; its stderr lines as they come.
fn run_pinned(dir: &Path, plugins: &Path, pinned: &[u8], extra: &[&str]) -> (Child, Receiver<String>) {
    let mut run = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(["run", "--source=jsonl:-", "--summary-json"])
        .args(extra)
        .arg(format!("--sink=jsonl:{}", dir.join("out.jsonl").display()))
        .arg(format!("--plugins={}", plugins.display()))
        .arg(format!("--compile-cache={}", dir.join("cache").display()))
        .arg(format!("--plugin-digest=by-reason={}", Sha256Digest::of(pinned)))
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = crate::common::stderr_lines(&mut run);
    (run, lines)
}

/// The next line of `lines` containing `needle` (each line read is kept in `seen`); panics after
/// 60 s without one.
fn wait_for(lines: &Receiver<String>, seen: &mut Vec<String>, needle: &str) -> String {
    loop {
        let line = lines.recv_timeout(Duration::from_secs(60)).unwrap_or_else(|_| panic!("no {needle}: {seen:?}"));
        seen.push(line.clone());
        if line.contains(needle) {
            return line;
        }
    }
}

#[test]
fn a_hot_reload_of_other_bytes_is_refused_counted_and_the_pinned_version_serves_on() {
    let dir = tempfile::tempdir().unwrap();
    let pinned = by_reason(1);
    let plugins = plugins_with(dir.path(), &pinned);
    let (mut run, lines) = run_pinned(dir.path(), &plugins, &pinned, &["--metrics=127.0.0.1:0"]);
    let mut seen = Vec::new();
    let mut wait_for = |needle: &str| wait_for(&lines, &mut seen, needle);
    let addr = wait_for("metrics on http://").split_once("http://").unwrap().1.trim_end_matches("/metrics").to_string();

    let other = by_reason(2);
    std::fs::write(plugins.join(".by-reason.wasm.tmp"), &other).unwrap();
    std::fs::rename(plugins.join(".by-reason.wasm.tmp"), plugins.join("by-reason.wasm")).unwrap();
    let refused = wait_for("rejected, previous version kept");
    let expected = format!("pinned to {}, but its bytes are {}", Sha256Digest::of(&pinned), Sha256Digest::of(&other));
    assert!(refused.contains("plugin `by-reason`") && refused.contains(&expected), "{refused}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut conn = std::net::TcpStream::connect(&addr).unwrap();
        write!(conn, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
        let mut scrape = String::new();
        conn.read_to_string(&mut scrape).unwrap();
        let counted = scrape.lines().find(|l| l.starts_with("eventpipe_plugin_pin_mismatches_total"));
        if counted.is_some_and(|l| l.ends_with(" 1")) {
            break;
        }
        assert!(Instant::now() < deadline, "the refusal is not counted:\n{scrape}");
        std::thread::sleep(Duration::from_millis(100));
    }

    let mut stdin = run.stdin.take().unwrap();
    stdin.write_all(events(3).as_bytes()).unwrap();
    drop(stdin);
    assert!(run.wait().unwrap().success(), "{seen:?}");
    seen.extend(lines.iter());
    let summary: serde_json::Value = seen.iter().rev().find_map(|l| serde_json::from_str(l).ok()).expect("a summary");
    assert_eq!(
        (summary["plugin_swaps"].as_u64(), summary["rejected_reloads"].as_u64()),
        (Some(0), Some(1)),
        "no swap during the run, one refusal: {summary}"
    );
    let other_live = format!("digest {}", Sha256Digest::of(&other).short());
    assert!(!seen.iter().any(|l| l.contains(&other_live)), "never live");
    assert_eq!(std::fs::read_to_string(dir.path().join("out.jsonl")).unwrap().lines().count(), 3);
}

/// A pinned plugin's file removed during a run: the name is never served by its embedded
/// default of other bytes; the removal is an error, and the events after it meet the tenant's
/// fallback policy (here `drop`: dropped and counted) until the pinned file is back.
#[test]
fn a_pinned_plugin_whose_file_is_removed_is_withdrawn_not_replaced_by_the_embedded_default() {
    let dir = tempfile::tempdir().unwrap();
    let pinned = by_reason(1);
    let plugins = plugins_with(dir.path(), &pinned);
    let out = dir.path().join("out.jsonl");
    let (mut run, lines) = run_pinned(dir.path(), &plugins, &pinned, &["--plugin-fallback=drop"]);
    let mut seen = Vec::new();
    let mut wait_for = |needle: &str| wait_for(&lines, &mut seen, needle);
    let mut stdin = run.stdin.take().unwrap();
    wait_for("is live");
    stdin.write_all(events(3).as_bytes()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(&out).map_or(0, |t| t.lines().count()) < 3 {
        assert!(Instant::now() < deadline, "the first 3 events were not written");
        std::thread::sleep(Duration::from_millis(50));
    }

    std::fs::remove_file(plugins.join("by-reason.wasm")).unwrap();
    let refused = wait_for("the file is gone");
    assert!(refused.contains("plugin `by-reason`"), "{refused}");
    assert!(refused.contains(&format!("pinned to {}", Sha256Digest::of(&pinned))), "{refused}");
    stdin.write_all(events(5).as_bytes()).unwrap();
    drop(stdin);
    let status = run.wait().unwrap();
    seen.extend(lines.iter());
    assert!(status.success(), "the drop policy is no failure: {seen:?}");
    assert!(!seen.iter().any(|l| l.contains("removed;")), "never reverted to the embedded default: {seen:?}");
    let summary: serde_json::Value = seen.iter().rev().find_map(|l| serde_json::from_str(l).ok()).expect("a summary");
    assert_eq!(summary["dropped_by_plugins"].as_u64(), Some(5), "the 5 events after the removal: {summary}");
    assert_eq!(std::fs::read_to_string(&out).unwrap().lines().count(), 3, "{summary}");
}

#[test]
fn plugins_lock_pins_the_directory_in_the_config_and_keeps_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = plugins_with(dir.path(), &by_reason(1));
    std::fs::write(plugins.join("spare.wasm"), by_reason(2)).unwrap();
    std::fs::write(plugins.join("notes.txt"), "not a plugin").unwrap();
    let config = dir.path().join("eventpipe.toml");
    let before = "# the defaults\n[defaults]\nmax_events = 5  # five\n\n[plugins.spare]\nlevel = \"3\"\n";
    std::fs::write(&config, before).unwrap();
    let lock = || {
        let out = eventpipe(&[
            "plugins".into(),
            "lock".into(),
            format!("--plugins={}", plugins.display()),
            format!("--config={}", config.display()),
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    let validate = || {
        eventpipe(&[
            "validate".into(),
            format!("--plugins={}", plugins.display()),
            format!("--config={}", config.display()),
            format!("--compile-cache={}", dir.path().join("cache").display()),
        ])
    };

    let said = lock();
    assert!(said.contains(&format!("by-reason: {} (pinned)", Sha256Digest::of(&by_reason(1)))), "{said}");
    let written = std::fs::read_to_string(&config).unwrap();
    assert!(
        written.starts_with("# the defaults\n[defaults]\nmax_events = 5  # five\n\n[plugins.spare]\nlevel = \"3\"\n"),
        "{written}"
    );
    let parsed = eventpipe::Config::parse(&written, &config).unwrap();
    assert_eq!(parsed.pins.len(), 2, "{written}");
    assert_eq!(parsed.pins["spare"], Sha256Digest::of(&by_reason(2)));
    assert_eq!(parsed.plugin_config["spare"]["level"], "3");
    let out = validate();
    assert!(out.status.success(), "{}", text(&out.stderr));

    // Another version in the directory: refused until locked again.
    std::fs::write(plugins.join("by-reason.wasm"), by_reason(3)).unwrap();
    let out = validate();
    assert!(!out.status.success() && text(&out.stderr).contains("pinned to"), "{}", text(&out.stderr));
    let said = lock();
    assert!(said.contains(&format!("by-reason: {} (re-pinned)", Sha256Digest::of(&by_reason(3)))), "{said}");
    assert!(said.contains("spare: sha256:") && said.contains("(unchanged)"), "{said}");
    let out = validate();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(eventpipe::Config::load(&config).unwrap().pins["by-reason"], Sha256Digest::of(&by_reason(3)));
}
