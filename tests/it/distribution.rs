//! What a build carries about itself and how it ships: `--version` names the commit it was built
//! from; the Dockerfile builds the `dist` profile and the Helm chart runs the image it tags.

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

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// One instruction of a Dockerfile: keyword (upper case) and its arguments, continuation lines
/// joined; comments left out.
fn instructions(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut line = String::new();
    for raw in text.lines() {
        let raw = raw.trim();
        if line.is_empty() && (raw.is_empty() || raw.starts_with('#')) {
            continue;
        }
        match raw.strip_suffix('\\') {
            Some(part) => line.push_str(part),
            None => {
                line.push_str(raw);
                let (keyword, args) = line.split_once(char::is_whitespace).unwrap_or((&line, ""));
                out.push((keyword.to_uppercase(), args.trim().to_owned()));
                line.clear();
            }
        }
    }
    out
}

/// The image examples/kubernetes/Dockerfile builds cannot be built in every test environment
/// (its base images come from container registries), so its stages are checked against the
/// build instead: the build stage builds the `dist` profile, the final stage copies the binary
/// from where that profile puts it, runs it as its entrypoint, and has the shared libraries it
/// needs.
#[test]
fn the_dockerfile_copies_the_dist_binary_from_where_the_build_stage_puts_it() {
    let dockerfile = instructions(&read("examples/kubernetes/Dockerfile"));
    let stages: Vec<&[(String, String)]> = {
        let starts: Vec<usize> =
            dockerfile.iter().enumerate().filter(|(_, (k, _))| k == "FROM").map(|(i, _)| i).collect();
        assert_eq!(starts.first(), Some(&0), "a Dockerfile starts with FROM");
        starts.iter().zip(starts.iter().skip(1).chain([&dockerfile.len()])).map(|(&a, &b)| &dockerfile[a..b]).collect()
    };
    assert_eq!(stages.len(), 2, "a build stage and the image: {dockerfile:?}");
    let (build, image) = (stages[0], stages[1]);

    // The build stage: its name, working directory and cargo command give the binary's path.
    let from: Vec<&str> = build[0].1.split_whitespace().collect();
    let [_, as_, name] = from[..] else { panic!("the build stage is named: FROM IMAGE AS NAME, not {from:?}") };
    assert!(as_.eq_ignore_ascii_case("as"));
    let workdir = build.iter().filter(|(k, _)| k == "WORKDIR").map(|(_, a)| a.as_str()).last().expect("WORKDIR");
    assert!(
        !build.iter().any(|(k, a)| k == "ENV" && a.contains("CARGO_TARGET_DIR")),
        "the target dir is WORKDIR/target"
    );
    let cargo = build.iter().find(|(k, a)| k == "RUN" && a.contains("cargo build")).expect("a RUN with cargo build");
    let words: Vec<&str> = cargo.1.split_whitespace().collect();
    let after = |flag: &str| words.iter().position(|w| *w == flag).map(|i| words[i + 1]);
    assert_eq!(after("--profile"), Some("dist"), "the image ships the dist profile: {}", cargo.1);
    assert_eq!(after("-p"), Some("eventpipe"));
    assert!(words.contains(&"--locked"), "the build uses Cargo.lock: {}", cargo.1);
    let built = format!("{workdir}/target/dist/eventpipe");

    // The dist profile is what the workspace says it is.
    let manifest: toml::Table = read("Cargo.toml").parse().unwrap();
    let dist = &manifest["profile"]["dist"];
    assert_eq!(dist["inherits"].as_str(), Some("release"));
    assert_eq!(dist["lto"].as_str(), Some("fat"));
    assert_eq!(dist["codegen-units"].as_integer(), Some(1));

    // The image: distroless's cc (glibc), the binary copied from the build stage, its entrypoint.
    assert!(image[0].1.starts_with("gcr.io/distroless/cc-debian12"), "{}", image[0].1);
    let copies: Vec<Vec<&str>> =
        image.iter().filter(|(k, _)| k == "COPY").map(|(_, a)| a.split_whitespace().collect()).collect();
    assert_eq!(copies.len(), 1, "{copies:?}");
    assert_eq!(copies[0], [format!("--from={name}").as_str(), built.as_str(), "/usr/local/bin/eventpipe"]);
    let entrypoint = image.iter().find(|(k, _)| k == "ENTRYPOINT").expect("ENTRYPOINT");
    let entrypoint: Vec<String> = serde_json::from_str(&entrypoint.1).expect("ENTRYPOINT in exec form");
    assert_eq!(entrypoint, ["/usr/local/bin/eventpipe"]);

    // The build context holds what the build needs (.dockerignore leaves it in).
    let ignored: Vec<String> = read(".dockerignore")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.trim_end_matches('/').to_owned())
        .collect();
    let members = manifest["workspace"]["members"].as_array().unwrap().iter().map(|m| m.as_str().unwrap());
    for needed in members.chain(["Cargo.toml", "Cargo.lock", "rust-toolchain.toml", "plugins", "guest-sdk", "wit"]) {
        assert!(root().join(needed).exists(), "{needed}");
        for pattern in &ignored {
            assert!(
                !(needed == pattern || needed.starts_with(&format!("{pattern}/"))),
                ".dockerignore leaves out {needed}"
            );
        }
    }

    // Distroless's cc image has glibc and libgcc_s and no other shared library: the binary (the
    // same dependencies in every profile) needs no more.
    let readelf =
        Command::new("readelf").args(["-d", env!("CARGO_BIN_EXE_eventpipe")]).output().expect("readelf (binutils)");
    assert!(readelf.status.success());
    let dynamic = String::from_utf8(readelf.stdout).unwrap();
    let needed: Vec<&str> = dynamic
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| l.split('[').nth(1)?.strip_suffix(']'))
        .collect();
    assert!(needed.contains(&"libc.so.6"), "{needed:?}");
    let provided = [
        "libc.so.6",
        "libm.so.6",
        "libgcc_s.so.1",
        "ld-linux-x86-64.so.2",
        "ld-linux-aarch64.so.1",
        "libpthread.so.0",
        "libdl.so.2",
        "librt.so.1",
    ];
    for lib in needed {
        assert!(provided.contains(&lib), "{lib} is not in gcr.io/distroless/cc-debian12");
    }
}

/// The Helm chart's default image is the one the Dockerfile's build command tags.
#[test]
fn the_charts_default_image_is_the_one_the_dockerfile_tags() {
    let text = read("examples/kubernetes/Dockerfile");
    let command = text.lines().find(|l| l.contains("docker build")).expect("the Dockerfile shows its build command");
    let words: Vec<&str> = command.split_whitespace().collect();
    let tag = words[words.iter().position(|w| *w == "-t").expect("-t TAG") + 1];
    let chart: serde_json::Value =
        serde_norway::from_str(&read("examples/kubernetes/helm/eventpipe/Chart.yaml")).unwrap();
    let values: serde_json::Value =
        serde_norway::from_str(&read("examples/kubernetes/helm/eventpipe/values.yaml")).unwrap();
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"), "the chart's appVersion is the package's version");
    assert_eq!(values["image"]["tag"], "", "the tag defaults to appVersion");
    assert_eq!(tag, format!("{}:{}", values["image"]["repository"].as_str().unwrap(), env!("CARGO_PKG_VERSION")));
}
