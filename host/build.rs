//! Builds the default plugins (`plugins/`, a cargo workspace of its own) for `wasm32-wasip2` and
//! puts the components in `OUT_DIR`, where `src/plugin/embedded.rs` includes them: the
//! `eventpipe` binary carries its default plugins, so it needs no plugins directory and no
//! set-up step. The target comes from `rust-toolchain.toml`.
//!
//! It also sets `EVENTPIPE_VERSION`, what `eventpipe --version` prints after the name: the
//! package version and the commit the binary was built from (`0.1.0 (abc1234)`), or
//! `(unknown commit)` outside a git checkout (a source tarball, a container build without
//! `.git`) unless `EVENTPIPE_GIT_COMMIT` names it.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The default plugins: crate directory under `plugins/` = component name; the package is
/// `plugin-<name>` and its library `<name>` with `_` for `-`.
const DEFAULT_PLUGINS: [&str; 5] = ["by-reason", "similar-events", "source-object", "jsonl", "log"];

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let root = manifest.parent().expect("host/ sits in the repository").to_path_buf();
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    for path in ["plugins/Cargo.toml", "plugins/Cargo.lock", "guest-sdk", "wit"] {
        println!("cargo:rerun-if-changed={}", root.join(path).display());
    }
    for name in DEFAULT_PLUGINS {
        println!("cargo:rerun-if-changed={}", root.join("plugins").join(name).display());
    }

    version(&root);
    ensure_wasm_target();
    let target_dir = root.join("target").join("wasm-plugins");
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .current_dir(root.join("plugins"))
        .args(["build", "--release", "--locked", "--target", "wasm32-wasip2", "--target-dir"])
        .arg(&target_dir);
    for name in DEFAULT_PLUGINS {
        build.args(["-p", &format!("plugin-{name}")]);
    }
    // The host build's flags and target do not apply to the guests.
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
    ] {
        build.env_remove(var);
    }
    let status = build.status().expect("running cargo to build the default plugins");
    assert!(status.success(), "building the default plugins (plugins/) for wasm32-wasip2 failed");

    let built = target_dir.join("wasm32-wasip2").join("release");
    for name in DEFAULT_PLUGINS {
        copy(&built.join(format!("{}.wasm", name.replace('-', "_"))), &out.join(format!("{name}.wasm")));
    }
}

/// Sets `EVENTPIPE_VERSION` for clap's `version`: `<package version> (<short commit>)`.
fn version(root: &Path) {
    println!("cargo:rerun-if-env-changed=EVENTPIPE_GIT_COMMIT");
    let given = env::var("EVENTPIPE_GIT_COMMIT").ok().filter(|c| !c.trim().is_empty());
    let commit = given.map(|c| c.trim().to_owned()).or_else(|| git_commit(root));
    let version = env::var("CARGO_PKG_VERSION").expect("cargo sets CARGO_PKG_VERSION");
    let commit = commit.unwrap_or_else(|| "unknown commit".into());
    println!("cargo:rustc-env=EVENTPIPE_VERSION={version} ({commit})");
}

/// `git rev-parse --short HEAD` in `root` when `root` is the top of a git checkout (not a
/// directory inside some other repository), and rerun-if-changed on what moves HEAD: HEAD
/// itself (per worktree, in `--git-dir`), the branch's ref and `packed-refs` (shared by every
/// worktree, in `--git-common-dir`).
fn git_commit(root: &Path) -> Option<String> {
    let git = |args: &[&str]| {
        let out = Command::new("git").current_dir(root).args(args).output().ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
    };
    let top = PathBuf::from(git(&["rev-parse", "--show-toplevel"])?);
    if top.canonicalize().ok()? != root.canonicalize().ok()? {
        return None;
    }
    let absolute = |dir: String| {
        let dir = PathBuf::from(dir);
        if dir.is_absolute() { dir } else { root.join(dir) }
    };
    let git_dir = absolute(git(&["rev-parse", "--git-dir"])?);
    let common_dir = absolute(git(&["rev-parse", "--git-common-dir"])?);
    let mut watched = vec![git_dir.join("HEAD"), common_dir.join("packed-refs")];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(common_dir.join(branch));
    }
    // A path that does not exist would make cargo run this script on every build.
    for path in watched.iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    git(&["rev-parse", "--short", "HEAD"])
}

/// Adds the `wasm32-wasip2` target with rustup when the toolchain lacks it (rustup installs
/// `rust-toolchain.toml`'s targets itself unless told not to auto-install).
fn ensure_wasm_target() {
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let sysroot = Command::new(&rustc).args(["--print", "sysroot"]).output().ok().filter(|o| o.status.success());
    let installed = sysroot
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()).join("lib/rustlib/wasm32-wasip2").is_dir())
        .unwrap_or(true); // cannot tell: let cargo report it
    if !installed {
        println!("cargo:warning=adding the wasm32-wasip2 target with rustup (needed to build the default plugins)");
        let added = Command::new("rustup").args(["target", "add", "wasm32-wasip2"]).status();
        if !added.is_ok_and(|s| s.success()) {
            println!("cargo:warning=`rustup target add wasm32-wasip2` failed; install the target and build again");
        }
    }
}

fn copy(from: &Path, to: &Path) {
    std::fs::copy(from, to).unwrap_or_else(|e| panic!("copying {} to {}: {e}", from.display(), to.display()));
}
