//! The guest SDK's own unit tests (pack / unpack helpers, client-go default key functions,
//! export glue) live in the `plugins/` workspace; this runs them natively so that the README's
//! one test command covers them too.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn guest_sdk_unit_tests_pass() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut test = Command::new(option_env!("CARGO").unwrap_or("cargo"));
    test.current_dir(root.join("plugins"))
        .args(["test", "--locked", "-p", "eventpipe-guest", "--target-dir"])
        .arg(root.join("target").join("wasm-plugins"));
    for var in ["RUSTFLAGS", "CARGO_ENCODED_RUSTFLAGS", "CARGO_BUILD_TARGET", "CARGO_TARGET_DIR"] {
        test.env_remove(var);
    }
    let out = test.output().expect("cargo runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "guest SDK tests failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let passed: u32 = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("test result: ok. "))
        .filter_map(|l| l.split(' ').next()?.parse::<u32>().ok())
        .sum();
    assert!(passed >= 19, "expected the SDK's unit tests to run, {passed} passed:\n{stdout}");
}
