//! Builds the default plugins (`plugins/`, a cargo workspace of its own) for `wasm32-wasip2` and
//! puts the components in `OUT_DIR`, where `src/plugin/embedded.rs` includes them: the
//! `eventpipe` binary carries its default plugins, so it needs no plugins directory and no
//! set-up step. The target comes from `rust-toolchain.toml`.

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
