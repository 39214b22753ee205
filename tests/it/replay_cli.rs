//! `eventpipe replay` as a process against client-go's whole-stream outputs
//! (`tests/fixtures/replay/`, and the real-event stream of the shared conformance suite when it is
//! beside the repository), compared as the conformance README says.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::common::{self, read_maybe_gz, shared_conformance};

/// Runs `eventpipe replay ARGS < input` and returns stdout and the exit code.
fn replay(args: &[String], input: &[u8]) -> (String, i32) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .arg("replay")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("eventpipe runs");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    writer.join().unwrap().unwrap();
    (out, child.wait().unwrap().code().unwrap_or(-1))
}

/// Compares every output line with client-go's; returns the first mismatches (at most 5).
fn compare(expected: &str, actual: &str) -> Vec<String> {
    let (e, a): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    let mut problems = Vec::new();
    if e.len() != a.len() {
        problems.push(format!("{} lines expected, {} written", e.len(), a.len()));
    }
    for (i, (el, al)) in e.iter().zip(&a).enumerate() {
        let (ev, av): (Value, Value) = (serde_json::from_str(el).unwrap(), serde_json::from_str(al).unwrap());
        if let Err(why) = common::replay_line_matches(&ev, &av) {
            problems.push(format!("line {}: {why}", i + 1));
            if problems.len() >= 5 {
                break;
            }
        }
    }
    problems
}

fn variants(dir: &Path) -> BTreeMap<String, Vec<String>> {
    serde_json::from_str(&std::fs::read_to_string(dir.join("variants.json")).unwrap()).unwrap()
}

/// Every `X.VARIANT.expected.jsonl` in `dir`, as (case, variant, input path, expected path).
fn cases(dir: &Path) -> Vec<(String, String, PathBuf, PathBuf)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let Some(stem) = name.strip_suffix(".expected.jsonl").or_else(|| name.strip_suffix(".expected.jsonl.gz"))
        else {
            continue;
        };
        let (case, variant) = stem.split_once('.').expect("CASE.VARIANT");
        let gz = if name.ends_with(".gz") { ".gz" } else { "" };
        found.push((case.to_string(), variant.to_string(), dir.join(format!("{case}.in.jsonl{gz}")), dir.join(&name)));
    }
    found.sort();
    found
}

/// Runs every case of `dir` through `eventpipe replay`, on the default Wasm plugins and with
/// `--builtin`; returns the number of cases.
fn run_cases(dir: &Path) -> usize {
    let variants = variants(dir);
    let cases = cases(dir);
    let mut failures = Vec::new();
    for ((case, variant, input, expected), path) in cases.iter().flat_map(|c| [(c, "wasm"), (c, "builtin")]) {
        let mut args = variants.get(variant).unwrap_or_else(|| panic!("unknown variant {variant}")).clone();
        if path == "builtin" {
            args.push("--builtin".into());
        }
        let (out, code) = replay(&args, &read_maybe_gz(input));
        assert_eq!(code, 0, "{case}.{variant} [{path}]: exit status");
        let expected = String::from_utf8(read_maybe_gz(expected)).unwrap();
        let problems = compare(&expected, &out);
        if !problems.is_empty() {
            failures.push(format!("{case}.{variant} [{path}]:\n  {}", problems.join("\n  ")));
        }
    }
    assert!(failures.is_empty(), "replay differs from client-go:\n{}", failures.join("\n"));
    cases.len()
}

#[test]
fn replay_matches_client_go_on_every_fixture_case() {
    let n = run_cases(&common::fixture("replay"));
    assert_eq!(n, 6, "every case × variant in tests/fixtures/replay");
}

#[test]
fn replay_matches_client_go_on_the_real_event_stream() {
    let Some(shared) = shared_conformance() else {
        eprintln!("shared conformance suite not beside the repository: real-event replay not run");
        return;
    };
    assert!(run_cases(&shared.join("replay-real")) >= 1);
}

#[test]
fn fixtures_have_not_drifted_from_the_shared_suite() {
    let Some(shared) = shared_conformance() else {
        eprintln!("shared conformance suite not beside the repository: drift check not run");
        return;
    };
    let mut pairs = vec![(shared.join("client-go-tests/vectors.jsonl"), common::fixture("vectors.jsonl"))];
    for entry in std::fs::read_dir(shared.join("replay")).unwrap() {
        let path = entry.unwrap().path();
        pairs.push((path.clone(), common::fixture("replay").join(path.file_name().unwrap())));
    }
    for (upstream, copy) in pairs {
        assert_eq!(
            std::fs::read(&upstream).unwrap(),
            std::fs::read(&copy).unwrap_or_default(),
            "{} drifted",
            copy.display()
        );
    }
}

#[test]
fn malformed_lines_get_an_error_line_in_place_and_exit_status_2() {
    let good = std::fs::read_to_string(common::fixture("replay/burst30.in.jsonl")).unwrap();
    let lines: Vec<&str> = good.lines().take(3).collect();
    let input = format!("{}\nnot json\n{}\n{{\"clock\":\"nope\",\"event\":{{}}}}\n{}\n", lines[0], lines[1], lines[2]);
    let (out, code) = replay(&[], input.as_bytes());
    assert_eq!(code, 2);
    let out: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(out.len(), 5, "one output line per input line");
    assert!(out[1]["error"].as_str().unwrap().starts_with("line 2:"), "{}", out[1]);
    assert!(out[3]["error"].as_str().unwrap().starts_with("line 4:"), "{}", out[3]);
    for i in [0, 2, 4] {
        assert_eq!(out[i]["skip"], false, "good line {i} still correlated");
    }
    // The third good event is the third occurrence of the same event: count 3 despite the noise.
    assert_eq!(out[4]["event"]["count"], 3);
}

/// A line with two faults (a misplaced `}` closes the document early, so it fails to decode and
/// the rest of the line is text after it), and a line holding a good event followed by text: one
/// error line each, in place; the output keeps one line per input line.
#[test]
fn a_line_with_several_faults_gets_one_error_line() {
    let good = std::fs::read_to_string(common::fixture("replay/burst30.in.jsonl")).unwrap();
    let lines: Vec<&str> = good.lines().take(2).collect();
    let two_faults = lines[1].replacen(r#""involvedObject":{"#, r#""involvedObject":}{"#, 1);
    let then_text = format!("{} trailing", lines[1]);
    let input = format!("{}\n{two_faults}\n{then_text}\n{}\n", lines[0], lines[1]);
    let (out, code) = replay(&[], input.as_bytes());
    assert_eq!(code, 2);
    let out: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(out.len(), 4, "one output line per input line: {out:#?}");
    for (i, line) in [(1, 2), (2, 3)] {
        let error = out[i]["error"].as_str().unwrap_or_else(|| panic!("an error line: {}", out[i]));
        assert!(error.starts_with(&format!("line {line}:")), "{error}");
    }
    assert!(out[1]["error"].as_str().unwrap().contains("; then unexpected text after a complete document"));
    // The event of the line with text after it was not correlated: the last line is the
    // second occurrence.
    assert_eq!(out[3]["event"]["count"], 2, "{}", out[3]);
}

/// `eventpipe replay … | head -1`: the reader closes the pipe after one line; replay ends
/// quietly (no "Broken pipe" message) with status 0, as other Unix tools do.
#[test]
fn a_closed_stdout_ends_the_replay_quietly() {
    let stream =
        std::fs::File::open(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/data/occurrences.jsonl"))
            .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_eventpipe"))
        .arg("replay")
        .stdin(stream)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("eventpipe runs");
    let mut first = [0u8; 1];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    // The read end is dropped here: every later write fails with EPIPE.
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.to_lowercase().contains("broken pipe"), "{stderr}");
}

/// One event as a replay line, its message `m`.
const LINE_WITH_MESSAGE_M: &str = r#"{"clock":"2025-01-01T00:00:00Z","event":{"metadata":{"name":"a.1","namespace":"ns"},"involvedObject":{"kind":"Pod","namespace":"ns","name":"a"},"reason":"Started","message":"m","source":{"component":"kubelet"},"count":1}}"#;

/// `eventpipe replay` of [`LINE_WITH_MESSAGE_M`], `odd`, and the first line again: the three
/// output lines, after checking that the exit status is 0.
fn replay_between_two_repeats(odd: &[u8]) -> Vec<Value> {
    let good = LINE_WITH_MESSAGE_M.as_bytes();
    let input = [good, b"\n", odd, b"\n", good, b"\n"].concat();
    let (out, code) = replay(&[], &input);
    let lines: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[2]["event"]["count"], 2, "the first event's repeat: {}", lines[2]);
    assert_eq!(code, 0);
    lines
}

/// Bytes that are not UTF-8 are read as the Go program the replay reproduces reads them
/// (`encoding/json`: each is U+FFFD): the line is correlated, not reported.
#[test]
fn bytes_that_are_not_utf8_are_read_as_go_reads_them() {
    let mut odd = LINE_WITH_MESSAGE_M.replace("\"m\"", "\"m\u{7f}\"").into_bytes(); // 0x7f becomes 0xff below
    let bad_at = odd.iter().position(|&b| b == 0x7f).unwrap();
    odd[bad_at] = 0xff;
    let lines = replay_between_two_repeats(&odd);
    assert_eq!(lines[1]["event"]["message"], "m\u{fffd}", "{}", lines[1]);
}

/// An unpaired surrogate escape is U+FFFD, as in the Go program the replay reproduces
/// (`encoding/json`): the line is correlated, not reported.
#[test]
fn an_unpaired_surrogate_escape_is_read_as_go_reads_it() {
    let odd = LINE_WITH_MESSAGE_M.replace(r#""m""#, r#""\ud800m""#);
    let lines = replay_between_two_repeats(odd.as_bytes());
    assert_eq!(lines[1]["event"]["message"], "\u{fffd}m", "{}", lines[1]);
    assert_eq!(lines[1]["event"]["count"], 1, "another message, another event");
}

#[test]
fn replay_skips_a_huge_line_in_bounded_memory_and_goes_on() {
    let good = r#"{"metadata":{"name":"a.1","namespace":"ns"},"involvedObject":{"kind":"Pod","name":"a"},"reason":"R","message":"m","source":{"component":"c"}}"#;
    let (growth_kib, out) = common::peak_rss_growth_over_a_huge_line(&["replay"], good, good);
    let lines: Vec<Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(lines[1]["error"].as_str().unwrap().starts_with("line 2: line too long"), "{}", lines[1]);
    assert_eq!(lines[2]["event"]["metadata"]["name"], "a.1", "the line after the huge one is read: {}", lines[2]);
    assert_eq!(lines[2]["skip"], false);
    assert_eq!(out.status.code(), Some(2));
    // The reader keeps at most `MAX_LINE_BYTES` (4 MiB) of a line, in a few buffers.
    assert!(growth_kib < 48 << 10, "peak RSS grew by {growth_kib} KiB while a 1 GiB line went by");
}
