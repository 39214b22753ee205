//! What a build carries about itself: `--version` names the commit it was built from.

use std::path::Path;
use std::process::Command;

/// `git rev-parse --short HEAD` at the repository root, if it is a git checkout.
fn head_commit(root: &Path) -> Option<String> {
    let out = Command::new("git").current_dir(root).args(["rev-parse", "--short", "HEAD"]).output().ok()?;
    out.status.success().then(|| String::from_utf8(out.stdout).unwrap().trim().to_owned())
}

#[test]
fn version_names_the_package_version_and_the_commit_it_was_built_from() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_eventpipe")).arg("--version").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let commit = head_commit(root).unwrap_or_else(|| "unknown commit".into());
    let expected = format!("eventpipe {} ({commit})\n", env!("CARGO_PKG_VERSION"));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), expected);
}
