//! client-go v0.26.15 itself, side by side: `tools/client-go-replay` (client-go's EventCorrelator
//! over a replay stream), built offline by its `build.sh` from the vendored client-go of the
//! shared conformance material, runs every public stream of `../shared/conformance/replay` on
//! every variant, and `eventpipe replay` must write what it writes, compared as JSON by the
//! conformance rules (Go's encoder escapes `<`, `>`, `&`). Its own output is checked against the
//! suite's expected files first: the yardstick is client-go. Without the shared material the tests
//! are skipped; without Go (or the vendored tree) they are skipped with a printed line, and fail
//! with `CI` set (`.ci/run` installs Go).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

use crate::common::{self, read_maybe_gz};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The shared material beside the repository (`../shared`), when its conformance suite is there.
fn shared() -> Option<PathBuf> {
    let dir = root().join("../shared");
    dir.join("conformance").is_dir().then_some(dir)
}

/// Whether `out` exists and is newer than every file of `inputs`.
fn fresh(out: &Path, inputs: &[PathBuf]) -> bool {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let Some(built) = modified(out) else { return false };
    inputs.iter().all(|i| modified(i).is_some_and(|m| m <= built))
}

/// The client-go-replay binary, built once per test binary (and again only when its sources,
/// its build script or the vendored tree are newer), under the target directory; `Err` says why
/// it could not be built for want of a tool.
fn client_go_replay(shared: &Path) -> Result<PathBuf, String> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let tool = root().join("tools/client-go-replay");
            let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("client-go-replay").join("client-go-replay");
            let inputs = [
                tool.join("main.go"),
                tool.join("go.mod"),
                tool.join("build.sh"),
                shared.join("go-vendor/client-go-v0.26.15-vendor.tar.xz"),
                shared.join("go-vendor/client-go-v0.26.15.require"),
            ];
            if fresh(&out, &inputs) {
                return Ok(out);
            }
            let go = crate::example_plugins::go_command()?;
            let started = std::time::Instant::now();
            let output = Command::new("bash")
                .arg(tool.join("build.sh"))
                .arg(&out)
                .arg(shared)
                .env("GO", &go)
                .output()
                .expect("bash runs build.sh");
            let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
            match output.status.code() {
                Some(0) => {
                    eprintln!("client-go-replay built in {:.0} s", started.elapsed().as_secs_f64());
                    Ok(out)
                }
                // 3: no Go, 4: no vendored client-go; anything else is a broken build.
                Some(3 | 4) => Err(stderr.trim().to_string()),
                _ => panic!("tools/client-go-replay/build.sh failed ({}):\n{stderr}", output.status),
            }
        })
        .clone()
}

/// The shared material and the built yardstick, or `None` (printed) when the test cannot run;
/// a missing tool is a failure under `CI`.
fn yardstick(test: &str) -> Option<(PathBuf, PathBuf)> {
    let Some(shared) = shared() else {
        println!("{test}: skipped, the shared conformance material is not beside the repository");
        return None;
    };
    match client_go_replay(&shared) {
        Ok(binary) => Some((shared, binary)),
        Err(reason) if std::env::var_os("CI").is_some() => panic!("{test}: {reason}"),
        Err(reason) => {
            println!("{test}: skipped, {reason}");
            None
        }
    }
}

/// Runs `program ARGS < input`; its stdout, which it must write with exit status 0.
fn run(program: &Path, args: &[String], input: Vec<u8>) -> String {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    writer.join().unwrap().unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{} {args:?}: {status}", program.display());
    out
}

/// Every line of `actual` against `expected` by the conformance rules: the first mismatches
/// (at most 5), and the number of lines compared. Lines equal byte for byte are equal as JSON:
/// only the others are parsed (on the real stream, the few where Go escapes `<`, `>`, `&`).
fn compare(expected: &str, actual: &str) -> (Vec<String>, usize) {
    let (e, a): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    let mut problems = Vec::new();
    if e.len() != a.len() {
        problems.push(format!("{} lines expected, {} written", e.len(), a.len()));
    }
    for (i, (el, al)) in e.iter().zip(&a).enumerate().filter(|(_, (el, al))| el != al) {
        let (ev, av): (Value, Value) = (serde_json::from_str(el).unwrap(), serde_json::from_str(al).unwrap());
        if let Err(why) = common::replay_line_matches(&ev, &av) {
            problems.push(format!("line {}: {why}", i + 1));
            if problems.len() >= 5 {
                break;
            }
        }
    }
    (problems, e.len())
}

#[test]
fn client_go_and_eventpipe_replay_agree_on_every_public_stream_and_variant() {
    let test = "client_go_and_eventpipe_replay_agree_on_every_public_stream_and_variant";
    let Some((shared, client_go)) = yardstick(test) else { return };
    let dir = shared.join("conformance/replay");
    let variants: BTreeMap<String, Vec<String>> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("variants.json")).unwrap()).unwrap();
    let mut streams: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().into_string().unwrap().strip_suffix(".in.jsonl").map(String::from))
        .collect();
    streams.sort();
    assert!(streams.len() >= 4, "the public streams of {}: {streams:?}", dir.display());
    let eventpipe = PathBuf::from(env!("CARGO_BIN_EXE_eventpipe"));
    let (mut failures, mut runs, mut against_expected, mut lines) = (Vec::new(), 0, 0, 0);
    for stream in &streams {
        let input = std::fs::read(dir.join(format!("{stream}.in.jsonl"))).unwrap();
        for (variant, flags) in &variants {
            let name = format!("{stream}.{variant}");
            let by_client_go = run(&client_go, flags, input.clone());
            // The yardstick is client-go: it writes the suite's expected output, where there is one.
            let expected = dir.join(format!("{name}.expected.jsonl"));
            if expected.is_file() {
                let (problems, _) = compare(&std::fs::read_to_string(&expected).unwrap(), &by_client_go);
                if !problems.is_empty() {
                    failures.push(format!(
                        "{name}: client-go-replay against the expected file:\n  {}",
                        problems.join("\n  ")
                    ));
                }
                against_expected += 1;
            }
            let mut args = vec!["replay".to_string()];
            args.extend(flags.iter().cloned());
            let by_eventpipe = run(&eventpipe, &args, input.clone());
            let (problems, n) = compare(&by_client_go, &by_eventpipe);
            if !problems.is_empty() {
                failures
                    .push(format!("{name}: eventpipe replay against client-go-replay:\n  {}", problems.join("\n  ")));
            }
            runs += 1;
            lines += n;
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(runs, streams.len() * variants.len());
    assert!(against_expected >= 6, "client-go-replay checked against {against_expected} expected files");
    println!(
        "{runs} stream × variant runs, {lines} lines alike; {against_expected} expected files written by client-go-replay"
    );
}

#[test]
fn client_go_replay_writes_client_gos_output_on_the_real_stream() {
    let test = "client_go_replay_writes_client_gos_output_on_the_real_stream";
    let Some((shared, client_go)) = yardstick(test) else { return };
    let dir = shared.join("conformance/replay-real");
    let by_client_go = run(&client_go, &[], read_maybe_gz(&dir.join("real-expanded.in.jsonl.gz")));
    let expected = String::from_utf8(read_maybe_gz(&dir.join("real-expanded.default.expected.jsonl.gz"))).unwrap();
    let (problems, n) = compare(&expected, &by_client_go);
    assert!(problems.is_empty(), "client-go-replay against the expected file:\n  {}", problems.join("\n  "));
    assert!(n > 100_000, "{n} lines");
}
