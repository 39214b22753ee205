//! `eventpipe new-plugin`: the projects it creates build with the commands of their README and
//! pass `eventpipe plugins check`. Rust: every kind (encoders too); C and Go: every kind but
//! encoders (Rust and Python only); JavaScript: every kind with
//! componentize-qjs and one with componentize-js; Python: the kinds that are not examples
//! (the filter and key function are `examples/plugins/python`, built by `example_plugins`).
//! A language whose toolchain is missing is skipped with a printed reason, except under `CI`
//! (`.ci/run` installs every toolchain), where it fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const KINDS: [&str; 6] = ["filter", "aggregate-key", "message-combiner", "spam-key", "sink", "watcher"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

fn ok(output: Output, what: &str) -> String {
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `eventpipe new-plugin --lang LANG --kind KIND NAME` in `parent`; returns the project directory.
fn new_plugin(parent: &Path, lang: &str, kind: &str) -> PathBuf {
    let name = format!("my-{kind}");
    let out = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .current_dir(parent)
        .args(["new-plugin", "--lang", lang, "--kind", kind, &name])
        .output()
        .unwrap();
    let stdout = ok(out, &format!("new-plugin {lang} {kind}"));
    assert!(stdout.contains("README.md"), "{stdout}");
    parent.join(name)
}

/// `eventpipe plugins check FILE`: the kind it reports.
fn check(file: &Path, kind: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(["plugins", "check", "--fuel-per-event", "20000000"])
        .arg(file)
        .output()
        .unwrap();
    let stdout = ok(out, &format!("plugins check {}", file.display()));
    assert!(stdout.contains(&format!(": {kind} plugin")), "{stdout}");
    eprintln!("{}", stdout.trim_end());
}

fn available(program: &str) -> bool {
    Command::new(program).arg("--version").output().is_ok_and(|o| o.status.success())
}

#[test]
fn rust_projects_of_every_kind_build_and_pass_the_check() {
    let tmp = tempfile::tempdir().unwrap();
    // Shared with the default plugins' build: the SDK's dependencies are compiled once.
    let target = root().join("target/wasm-plugins");
    for kind in KINDS.into_iter().chain(["encoder"]) {
        let dir = new_plugin(tmp.path(), "rust", kind);
        let mut build = Command::new(cargo());
        build.current_dir(&dir).args(["build", "--target", "wasm32-wasip2", "--release", "--target-dir"]).arg(&target);
        for var in ["RUSTFLAGS", "CARGO_ENCODED_RUSTFLAGS", "CARGO_BUILD_TARGET", "CARGO_TARGET_DIR"] {
            build.env_remove(var);
        }
        ok(build.output().unwrap(), &format!("cargo build ({kind})"));
        let crate_name = format!("my_{}", kind.replace('-', "_"));
        check(&target.join(format!("wasm32-wasip2/release/{crate_name}.wasm")), kind);
    }
}

#[test]
fn an_encoder_project_is_made_in_rust_and_python_only() {
    let tmp = tempfile::tempdir().unwrap();
    for lang in ["js", "c", "go"] {
        let out = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
            .current_dir(tmp.path())
            .args(["new-plugin", "--lang", lang, "--kind", "encoder", "my-encoder"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains("Rust or Python"), "{lang}: {stderr}");
        assert!(!tmp.path().join("my-encoder").exists(), "{lang}: nothing is written");
    }
    let dir = new_plugin(tmp.path(), "python", "encoder");
    let app = std::fs::read_to_string(dir.join("app.py")).unwrap();
    assert!(app.contains("def encode(self, tenant"), "{app}");
    assert!(std::fs::read_to_string(dir.join("build.sh")).unwrap().contains("-w encoder"));
}

#[test]
fn c_projects_of_every_kind_build_with_build_sh_and_pass_the_check() {
    if !available("clang") || !Path::new("/usr/include/wasm32-wasi/stdlib.h").exists() {
        return skip("C: clang or wasi-libc is not installed");
    }
    let tmp = tempfile::tempdir().unwrap();
    let manifest = root().join("tools/plugin-build/Cargo.toml");
    let plugin_build = format!("{} run -q --manifest-path {} --", cargo(), manifest.display());
    for kind in KINDS {
        let dir = new_plugin(tmp.path(), "c", kind);
        let out = Command::new("./build.sh").current_dir(&dir).env("PLUGIN_BUILD", &plugin_build).output().unwrap();
        ok(out, &format!("build.sh ({kind})"));
        check(&dir.join(format!("my-{kind}.wasm")), kind);
    }
}

#[test]
fn go_projects_of_every_kind_build_with_build_sh_and_pass_the_check() {
    let go = match crate::example_plugins::go_command() {
        Ok(go) => go,
        Err(reason) => return skip(&format!("Go: {reason}")),
    };
    let tmp = tempfile::tempdir().unwrap();
    let manifest = root().join("tools/plugin-build/Cargo.toml");
    let plugin_build = format!("{} run -q --manifest-path {} --", cargo(), manifest.display());
    for kind in KINDS {
        let dir = new_plugin(tmp.path(), "go", kind);
        let out = Command::new("./build.sh")
            .current_dir(&dir)
            .env("PLUGIN_BUILD", &plugin_build)
            .env("GO", &go)
            .output()
            .unwrap();
        ok(out, &format!("build.sh ({kind})"));
        check(&dir.join(format!("my-{kind}.wasm")), kind);
    }
}

#[test]
fn javascript_projects_build_with_npm_and_pass_the_check() {
    let examples = root().join("examples/plugins/js/node_modules");
    if !examples.join(".bin/componentize-qjs").exists() && !available("npm") {
        return skip("JavaScript: npm is not installed");
    }
    let tmp = tempfile::tempdir().unwrap();
    for kind in KINDS {
        let dir = new_plugin(tmp.path(), "js", kind);
        // The examples' node_modules has the same pinned packages: link it instead of
        // downloading them again for every project (`npm install` works as well).
        if examples.join(".bin/componentize-qjs").exists() {
            std::os::unix::fs::symlink(&examples, dir.join("node_modules")).unwrap();
        } else {
            ok(
                Command::new("npm").current_dir(&dir).args(["install", "--no-audit", "--no-fund"]).output().unwrap(),
                "npm install",
            );
        }
        ok(Command::new("npm").current_dir(&dir).args(["run", "-s", "build:qjs"]).output().unwrap(), "build:qjs");
        check(&dir.join(format!("my-{kind}-qjs.wasm")), kind);
        if kind == "sink" {
            // `eventpipe plugins build` runs the project's `npm run build` (componentize-js).
            let built = plugins_build(&dir, &[]);
            assert_eq!(built, dir.join(format!("my-{kind}.wasm")));
            check(&built, kind);
        }
    }
}

#[test]
fn python_projects_build_with_componentize_py_and_pass_the_check() {
    let tool = std::env::var("COMPONENTIZE_PY").unwrap_or_else(|_| "componentize-py".into());
    if !available(&tool) {
        return skip(&format!("Python: `{tool}` is not installed (pip install componentize-py==0.25.1)"));
    }
    let tmp = tempfile::tempdir().unwrap();
    // Without componentize-py, `plugins build` says how to install it.
    let dir = new_plugin(tmp.path(), "python", "filter");
    let out = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(["plugins", "build"])
        .arg(&dir)
        .env("COMPONENTIZE_PY", tmp.path().join("no-such-componentize-py"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("pip install componentize-py=="), "{stderr}");
    for kind in ["aggregate-key", "message-combiner", "spam-key", "sink", "watcher"] {
        let dir = new_plugin(tmp.path(), "python", kind);
        // `eventpipe plugins build` runs the project's build.sh: componentize-py on the
        // project's world (the Python aggregate key's is its projected form, declaring the
        // fields it reads).
        let built = plugins_build(&dir, &[("COMPONENTIZE_PY", tool.as_str())]);
        assert_eq!(built, dir.join(format!("my-{kind}.wasm")));
        check(&built, kind);
    }
}

/// `eventpipe plugins build DIR` with `env`; returns the component file it names.
fn plugins_build(dir: &Path, env: &[(&str, &str)]) -> PathBuf {
    let out = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(["plugins", "build"])
        .arg(dir)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stdout = ok(out, &format!("plugins build {}", dir.display()));
    let built = stdout.lines().find_map(|l| l.split_whitespace().find(|w| w.ends_with(".wasm"))).expect(&stdout);
    PathBuf::from(built)
}

/// Skips a language whose toolchain is missing; under `CI` that is a failure.
fn skip(reason: &str) {
    assert!(std::env::var_os("CI").is_none(), "{reason}");
    eprintln!("SKIPPING {reason}");
}

/// `eventpipe plugins build DIR` builds a Rust plugin project with cargo alone (no separate
/// install): the example filter, checked as a filter plugin.
#[test]
fn plugins_build_builds_the_rust_example_filter() {
    let installed = Command::new("rustup").args(["target", "list", "--installed"]).output();
    if installed.is_ok_and(|o| !String::from_utf8_lossy(&o.stdout).contains("wasm32-wasip2")) {
        return skip("Rust: the wasm32-wasip2 target is not installed");
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("quiet-normal.wasm");
    let mut build = Command::new(env!("CARGO_BIN_EXE_eventpipe"));
    build.args(["plugins", "build"]).arg(root().join("examples/plugins/rust/filter")).arg("-o").arg(&out);
    // Shared with the examples' build: already compiled there.
    build.env("CARGO_TARGET_DIR", root().join("target/wasm-plugins"));
    for var in ["RUSTFLAGS", "CARGO_ENCODED_RUSTFLAGS", "CARGO_BUILD_TARGET"] {
        build.env_remove(var);
    }
    let said = ok(build.output().unwrap(), "eventpipe plugins build");
    assert!(said.contains(&format!("built {}", out.display())), "{said}");
    check(&out, "filter");
}

/// A Go older than 1.24 is refused before building, with a one-line fix.
#[test]
fn plugins_build_names_a_too_old_go_and_the_fix() {
    let tmp = tempfile::tempdir().unwrap();
    let go = tmp.path().join("go");
    std::fs::write(&go, "#!/bin/sh\necho 'go version go1.22.3 linux/amd64'\n").unwrap();
    std::fs::set_permissions(&go, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let project = tmp.path().join("project");
    std::fs::create_dir(&project).unwrap();
    std::fs::write(project.join("go.mod"), "module example.com/p\n\ngo 1.24\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .args(["plugins", "build"])
        .arg(&project)
        .env("GO", &go)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("Go 1.24 or newer is needed for //go:wasmexport; found go1.22.3"), "{stderr}");
}
