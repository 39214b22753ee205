//! `eventpipe test`: run a plugin (or a tenant config's plugins) over JSON lines with the replay
//! clock and compare the output with a golden file.
//!
//! One output line per input document, so that line `n` of the output is about line `n` of the
//! input (a document spanning several lines gets one output line):
//!
//! - **key functions and combiners** (and configs): the EventCorrelator's result, exactly as
//!   `eventpipe replay` writes it: `{"skip","event","patch"}`;
//! - **filters**: the same for kept events, and `{"filtered": REASON}` (the plugin's reason, or
//!   `null`) in place of a dropped event; a config's filters run per tenant, in order;
//! - **sinks**: the default correlator decides create or patch as `eventpipe run` does, the
//!   plugin is called, and the line is `{"verb":"create"|"patch","result":"ok"|{"error":MSG},
//!   "output":TEXT}` with what the plugin wrote through `output`; `{"skip":true}` when the spam
//!   filter dropped the event;
//! - **watchers**: `{"watched":true}`, or `{"watched":false,"error":MSG}` when the call failed;
//! - **encoders**: the default correlator decides create or patch, the write is encoded alone,
//!   and the line is `{"verb","result":"ok","content_type","headers","body":TEXT}` (or
//!   `"result":{"error":MSG}`);
//! - a line that is not an event: `{"error":"line N: …"}`, as `eventpipe replay`.
//!
//! The clock of each event is its line's `clock` (replay lines `{"clock","event"}`), else the
//! event's own time (`lastTimestamp`, `eventTime`, …), so the output is the same on every run.
//! [`compare`] tells a golden file from the output line by line, comparing JSON values (so a
//! hand-edited golden file may differ in whitespace and key order).

use std::fmt;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::json;

use crate::config::Config;
use crate::correlator::{CorrelatorOptions, EventCorrelateResult, Occurrence, PREPARE_BATCH_SIZE};
use crate::event::Event;
use crate::pipeline::plan::{KeyChoice, PlanError, TenantPlan, TenantRules};
use crate::pipeline::stage::{Staged, TenantStage, TenantStages};
use crate::plugin::encoder::WasmEncoder;
use crate::plugin::registry::{PluginRegistry, ReloadOutcome};
use crate::plugin::sink::WasmSink;
use crate::plugin::watcher::WasmWatcher;
use crate::plugin::{PluginHandle, PluginKind, PluginSettings};
use crate::sink::SinkSpec;
use crate::sink::set::SinkSet;
use crate::source::decode::{DecodeError, Decoded, Decoder};
use crate::tenant::DEFAULT_TENANT;

/// What to test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// One component file; its kind decides what runs (see the module docs).
    Component(PathBuf),
    /// A tenant config: every tenant's filters and key functions, events routed as
    /// `eventpipe run` routes them (sinks are not opened).
    Config(PathBuf),
}

/// Why a test could not run (a difference from the golden file is not an error).
#[derive(Debug, thiserror::Error)]
pub enum TestError {
    /// The component could not be loaded or failed its check on the sample event.
    #[error("{0}")]
    Plugin(String),
    /// The config file is invalid.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The config names a plugin that does not exist or has the wrong kind.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// Reading the input failed.
    #[error("reading input: {0}")]
    Read(#[source] std::io::Error),
}

/// A loaded subject, ready to run over documents.
enum Harness {
    /// The tenant stages of a plan.
    Pipeline(Box<TenantStages>),
    /// A sink plugin behind the default correlator.
    Sink { sink: WasmSink, written: Arc<Mutex<Vec<u8>>>, stage: Box<TenantStage> },
    /// A watcher plugin.
    Watcher(WasmWatcher),
    /// An encoder plugin behind the default correlator, each write encoded alone.
    Encoder { encoder: WasmEncoder, stage: Box<TenantStage> },
}

/// Runs `subject` over `input` (JSON lines, any shape `eventpipe replay` reads) and returns
/// one output line per input document (see the module docs). `settings` are the limits,
/// fallback and config of a component subject; a config subject takes its own from the file,
/// over `settings`' limits. Plugin files named by a config are looked up in `registry` (give it
/// the plugins directory).
///
/// # Errors
/// [`TestError`] when the subject cannot be loaded or the input cannot be read. Plugin failures
/// during the run are not errors: they apply the fallback policy and show in the output.
pub fn run_test(
    registry: &PluginRegistry,
    subject: &Subject,
    settings: &PluginSettings,
    input: impl BufRead,
) -> Result<Vec<String>, TestError> {
    let mut harness = load(registry, subject, settings)?;
    let mut decoder = Decoder::new();
    let mut out = Vec::new();
    let mut pending: Vec<Result<Decoded, DecodeError>> = Vec::with_capacity(PREPARE_BATCH_SIZE);
    for line in input.split(b'\n') {
        let line = line.map_err(TestError::Read)?;
        decoder.push_bytes(&line, |item| pending.push(item));
        if pending.len() >= PREPARE_BATCH_SIZE {
            harness.process(std::mem::take(&mut pending), &mut out);
        }
    }
    pending.extend(decoder.finish().map(Err));
    harness.process(pending, &mut out);
    Ok(out)
}

/// The rules of a single-plugin test: client-go's numbers and native key functions, no filter,
/// one (unused) sink.
fn base_rules(settings: &PluginSettings) -> TenantRules {
    TenantRules {
        lru_cache_size: 0,
        burst: 0,
        qps: 0.0,
        max_events: 0,
        max_interval_seconds: 0,
        aggregate_key: KeyChoice::Builtin,
        message_combiner: KeyChoice::Builtin,
        spam_key: KeyChoice::Builtin,
        builtin_spam_key: Default::default(),
        filters: Vec::new(),
        plugin: PluginSettings { config: Default::default(), ..settings.clone() },
        plugin_config: Default::default(),
        sinks: vec![SinkSpec::JsonLinesStdout.into()],
        partition_key: None,
        event_rules: Default::default(),
        suppressed_summary_seconds: 0,
        command_line: Default::default(),
    }
}

fn load(registry: &PluginRegistry, subject: &Subject, settings: &PluginSettings) -> Result<Harness, TestError> {
    let sinks = SinkSet::default();
    let mut base = base_rules(settings);
    let plan = match subject {
        Subject::Config(path) => {
            let mut config = Config::load(path)?;
            // Nothing is delivered in a test: no sink is opened.
            config.defaults.sinks = None;
            for tenant in &mut config.tenants {
                tenant.rules.sinks = None;
            }
            base.aggregate_key = KeyChoice::Plugin("by-reason".into());
            base.message_combiner = KeyChoice::Plugin("similar-events".into());
            base.spam_key = KeyChoice::Plugin("source-object".into());
            TenantPlan::build(&base, Some(&config), registry, &sinks)?
        }
        Subject::Component(path) => {
            let name = match registry.reload_file(path) {
                ReloadOutcome::Live(p) => p.name,
                ReloadOutcome::Unchanged { name } => name,
                ReloadOutcome::Ignored if !path.exists() => {
                    return Err(TestError::Plugin(format!("{}: no such file", path.display())));
                }
                ReloadOutcome::Ignored => {
                    return Err(TestError::Plugin(format!("{}: not a .wasm file", path.display())));
                }
                other => return Err(TestError::Plugin(other.to_string())),
            };
            let kind = registry
                .live()
                .into_iter()
                .find_map(|(n, p)| p.filter(|_| n == name).map(|p| p.kind))
                .ok_or_else(|| TestError::Plugin(format!("plugin `{name}` is not loaded")))?;
            base.plugin_config.insert(name.clone(), settings.config.clone());
            match kind {
                PluginKind::AggregateKey => base.aggregate_key = KeyChoice::Plugin(name),
                PluginKind::MessageCombiner => base.message_combiner = KeyChoice::Plugin(name),
                PluginKind::SpamKey => base.spam_key = KeyChoice::Plugin(name),
                PluginKind::Filter => base.filters = vec![name],
                PluginKind::Sink | PluginKind::Watcher | PluginKind::Encoder => {
                    let handle = registry
                        .handle(&name, kind, DEFAULT_TENANT, settings.clone())
                        .map_err(|e| TestError::Plugin(e.to_string()))?;
                    return Ok(single(handle));
                }
            }
            TenantPlan::build(&base, None, registry, &sinks)?
        }
    };
    Ok(Harness::Pipeline(Box::new(TenantStages::new(Arc::new(plan)))))
}

/// The harness of a sink or watcher plugin.
fn single(handle: PluginHandle) -> Harness {
    if handle.kind() == PluginKind::Watcher {
        return Harness::Watcher(WasmWatcher::new(handle).expect("checked to be a watcher"));
    }
    if handle.kind() == PluginKind::Encoder {
        let encoder = WasmEncoder::new(handle).expect("checked to be an encoder");
        return Harness::Encoder {
            encoder,
            stage: Box::new(TenantStage::new(DEFAULT_TENANT, CorrelatorOptions::default())),
        };
    }
    #[derive(Clone)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap_or_else(|p| p.into_inner()).extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let written = Arc::new(Mutex::new(Vec::new()));
    let sink = WasmSink::new(handle, Box::new(Shared(written.clone()))).expect("checked to be a sink");
    let stage = Box::new(TenantStage::new(DEFAULT_TENANT, CorrelatorOptions::default()));
    Harness::Sink { sink, written, stage }
}

fn line(value: serde_json::Value) -> String {
    value.to_string()
}

impl Harness {
    /// Appends one output line per document of `docs`, in order.
    fn process(&mut self, docs: Vec<Result<Decoded, DecodeError>>, out: &mut Vec<String>) {
        let mut lines: Vec<Option<String>> = vec![None; docs.len()];
        let mut events = Vec::with_capacity(docs.len());
        for (i, doc) in docs.into_iter().enumerate() {
            match doc {
                Ok(Decoded::Event { event, clock, spam_filter_clock, .. }) => {
                    events.push((i, Occurrence::replayed(event, clock, spam_filter_clock)));
                }
                Ok(other) => {
                    let error = format!("line {}: not an event ({})", other.line(), other.describe());
                    lines[i] = Some(line(json!({ "error": error })));
                }
                Err(e) => lines[i] = Some(line(json!({ "error": e.to_string() }))),
            }
        }
        match self {
            Harness::Pipeline(stages) => {
                let (positions, occurrences): (Vec<usize>, Vec<Occurrence>) = events.into_iter().unzip();
                for (i, (t, staged)) in positions.into_iter().zip(stages.prepare(occurrences)) {
                    lines[i] = Some(match staged {
                        Staged::Filtered { reason, .. } => line(json!({ "filtered": reason })),
                        Staged::Dropped { rule } => line(json!({ "dropped_by_rule": &*rule })),
                        Staged::Prepared(p) => {
                            let result = stages.finish(t, p);
                            if let Some(event) = &result.event {
                                stages.stage_mut(t).update_state(event);
                            }
                            serde_json::to_string(&result).expect("results serialise")
                        }
                    });
                }
            }
            Harness::Sink { sink, written, stage } => {
                each_write(stage, events, &mut lines, |event, patch| {
                    let (verb, answer) = match patch {
                        Some(patch) => ("patch", sink.patch(event, &patch)),
                        None => ("create", sink.create(event)),
                    };
                    let text = String::from_utf8_lossy(&std::mem::take(
                        &mut *written.lock().unwrap_or_else(|p| p.into_inner()),
                    ))
                    .into_owned();
                    let (result, stored) = match answer {
                        Ok(stored) => (json!("ok"), Some(stored)),
                        Err(e) => (json!({ "error": crate::sink::SinkError::from(e).to_string() }), None),
                    };
                    (json!({ "verb": verb, "result": result, "output": text }), stored)
                });
            }
            Harness::Encoder { encoder, stage } => {
                each_write(stage, events, &mut lines, |event, patch| {
                    let verb = if patch.is_some() { "patch" } else { "create" };
                    let enrichment = event.enrichment.get().map(|e| serde_json::to_string(e).unwrap_or_default());
                    let write = crate::plugin::encoder::Write {
                        event,
                        patch: patch.as_deref(),
                        enrichment: enrichment.as_deref().unwrap_or(""),
                    };
                    let call = match encoder.encode(&[write]) {
                        Ok(request) => json!({
                            "verb": verb,
                            "result": "ok",
                            "content_type": request.content_type,
                            "headers": request.headers,
                            "body": String::from_utf8_lossy(&request.body),
                        }),
                        Err(e) => json!({ "verb": verb, "result": { "error": e.to_string() } }),
                    };
                    (call, Some(event.clone()))
                });
            }
            Harness::Watcher(watcher) => {
                for (i, o) in events {
                    lines[i] = Some(line(match watcher.watch(&[&o.event]) {
                        Ok(_) => json!({ "watched": true }),
                        Err(e) => json!({ "watched": false, "error": e.to_string() }),
                    }));
                }
            }
        }
        out.extend(lines.into_iter().map(|l| l.expect("one line per document")));
    }
}

/// Correlates `events` (with their output positions) on `stage` with the default correlator and
/// calls `write` for each write `eventpipe run` would make: the event, and for a repeat (count
/// above 1) the patch body; `write` answers the output line and the event as stored (`None`: not
/// stored). `{"skip":true}` where the spam filter dropped the event.
fn each_write(
    stage: &mut TenantStage,
    events: Vec<(usize, Occurrence)>,
    lines: &mut [Option<String>],
    mut write: impl FnMut(&Event, Option<Vec<u8>>) -> (serde_json::Value, Option<Event>),
) {
    let (positions, occurrences): (Vec<usize>, Vec<Occurrence>) = events.into_iter().unzip();
    let mut calls = Vec::with_capacity(positions.len());
    stage.correlate(occurrences, |result: &EventCorrelateResult| {
        let Some(event) = &result.event else {
            calls.push(json!({ "skip": true }));
            return None;
        };
        let patch = result.patch.as_ref().filter(|_| event.count > 1).map(|p| p.to_json());
        let (call, stored) = write(event, patch);
        calls.push(call);
        stored
    });
    for (i, call) in positions.into_iter().zip(calls) {
        lines[i] = Some(line(call));
    }
}

/// One line that differs between the golden file and the output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineDiff {
    /// 1-based line number.
    pub line: usize,
    /// The golden file's line (`None`: the output has more lines).
    pub expected: Option<String>,
    /// The output's line (`None`: the output has fewer lines).
    pub got: Option<String>,
}

/// The result of [`compare`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Comparison {
    /// Lines in the golden file.
    pub expected_lines: usize,
    /// Lines in the output.
    pub got_lines: usize,
    /// Every differing line, in order.
    pub differences: Vec<LineDiff>,
    /// How many differences [`fmt::Display`] shows (default 10 when 0).
    pub shown: usize,
}

impl Comparison {
    /// Whether the output matches the golden file.
    pub fn matches(&self) -> bool {
        self.differences.is_empty()
    }
}

impl fmt::Display for Comparison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = if self.shown == 0 { 10 } else { self.shown };
        for d in self.differences.iter().take(shown) {
            writeln!(f, "line {}:", d.line)?;
            writeln!(f, "  expected: {}", d.expected.as_deref().unwrap_or("<no line>"))?;
            writeln!(f, "  got:      {}", d.got.as_deref().unwrap_or("<no line>"))?;
        }
        if self.differences.len() > shown {
            writeln!(f, "… and {} more differing lines", self.differences.len() - shown)?;
        }
        write!(
            f,
            "{} of {} lines differ (expected {} lines, got {})",
            self.differences.len(),
            self.expected_lines.max(self.got_lines),
            self.expected_lines,
            self.got_lines
        )
    }
}

/// Compares the golden text `expected` with the output lines `got`, line by line. Two lines are
/// equal when they are equal JSON values (or, when either is not JSON, equal text after trimming).
pub fn compare(expected: &str, got: &[String]) -> Comparison {
    let expected: Vec<&str> = expected.lines().collect();
    let same = |a: &str, b: &str| match (
        serde_json::from_str::<serde_json::Value>(a),
        serde_json::from_str::<serde_json::Value>(b),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => a.trim() == b.trim(),
    };
    let differences = (0..expected.len().max(got.len()))
        .filter_map(|i| {
            let (e, g) = (expected.get(i).copied(), got.get(i).map(String::as_str));
            match (e, g) {
                (Some(e), Some(g)) if same(e, g) => None,
                _ => Some(LineDiff { line: i + 1, expected: e.map(String::from), got: g.map(String::from) }),
            }
        })
        .collect();
    Comparison { expected_lines: expected.len(), got_lines: got.len(), differences, shown: 0 }
}

/// Writes `lines` as the golden file `path` (one line each, newline-terminated).
///
/// # Errors
/// The I/O error of writing `path`.
pub fn write_golden(path: &Path, lines: &[String]) -> std::io::Result<()> {
    let mut text = String::with_capacity(lines.iter().map(|l| l.len() + 1).sum());
    for l in lines {
        text.push_str(l);
        text.push('\n');
    }
    std::fs::write(path, text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(s: &[&str]) -> Vec<String> {
        s.iter().map(|l| l.to_string()).collect()
    }

    #[test]
    fn equal_json_matches_whatever_the_whitespace_and_key_order() {
        let c = compare("{\"a\": 1, \"b\": [2]}\n{\"x\":null}\n", &lines(&[r#"{"b":[2],"a":1}"#, r#"{"x":null}"#]));
        assert!(c.matches(), "{c}");
        assert_eq!(c.to_string(), "0 of 2 lines differ (expected 2 lines, got 2)");
    }

    #[test]
    fn differences_are_reported_with_line_numbers_both_sides_and_a_count() {
        let c = compare("{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n", &lines(&[r#"{"a":1}"#, r#"{"a":20}"#]));
        assert!(!c.matches());
        assert_eq!(
            c.differences,
            vec![
                LineDiff { line: 2, expected: Some(r#"{"a":2}"#.into()), got: Some(r#"{"a":20}"#.into()) },
                LineDiff { line: 3, expected: Some(r#"{"a":3}"#.into()), got: None },
            ]
        );
        let shown = c.to_string();
        assert!(shown.contains("line 2:\n  expected: {\"a\":2}\n  got:      {\"a\":20}\n"), "{shown}");
        assert!(shown.contains("line 3:\n  expected: {\"a\":3}\n  got:      <no line>\n"), "{shown}");
        assert!(shown.ends_with("2 of 3 lines differ (expected 3 lines, got 2)"), "{shown}");
    }

    #[test]
    fn only_the_first_differences_are_shown() {
        let expected: String = (0..30).map(|i| format!("{i}\n")).collect();
        let c = compare(&expected, &[]);
        let shown = c.to_string();
        assert_eq!(shown.matches("expected:").count(), 10);
        assert!(shown.contains("… and 20 more differing lines"), "{shown}");
    }

    fn registry() -> PluginRegistry {
        PluginRegistry::new(crate::plugin::PluginRuntime::new(crate::plugin::Metering::Fuel).unwrap()).unwrap()
    }

    const INPUT: &str = concat!(
        r#"{"clock":"2025-01-01T00:00:00Z","event":{"metadata":{"name":"a.1","namespace":"ns"},"involvedObject":{"kind":"Pod","name":"a","namespace":"ns"},"reason":"BackOff","message":"m1","source":{"component":"kubelet","host":"n1"},"count":1,"type":"Warning"}}"#,
        "\nnot json\n",
        r#"{"clock":"2025-01-01T00:00:01Z","event":{"metadata":{"name":"a.2","namespace":"ns"},"involvedObject":{"kind":"Pod","name":"a","namespace":"ns"},"reason":"BackOff","message":"m1","source":{"component":"kubelet","host":"n1"},"count":1,"type":"Warning"}}"#,
        "\n"
    );

    #[test]
    fn a_sink_plugin_gets_a_create_then_a_patch_and_its_output_is_shown() {
        let dir = tempfile::tempdir().unwrap();
        let component = dir.path().join("jsonl.wasm");
        std::fs::write(&component, crate::plugin::embedded::JSONL).unwrap();
        let out = run_test(
            &registry(),
            &Subject::Component(component),
            &PluginSettings::default(),
            std::io::Cursor::new(INPUT),
        )
        .unwrap();
        assert_eq!(out.len(), 3, "{out:?}");
        let calls: Vec<serde_json::Value> =
            [&out[0], &out[2]].iter().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!((&calls[0]["verb"], &calls[0]["result"]), (&json!("create"), &json!("ok")), "{out:?}");
        assert_eq!((&calls[1]["verb"], &calls[1]["result"]), (&json!("patch"), &json!("ok")), "{out:?}");
        for call in &calls {
            let written: serde_json::Value = serde_json::from_str(call["output"].as_str().unwrap().trim_end()).unwrap();
            assert_eq!(written["event"]["reason"], "BackOff", "what the plugin wrote: {call}");
        }
        assert!(out[1].contains("\"error\""), "the bad line in place: {}", out[1]);
    }

    #[test]
    fn a_config_with_only_defaults_replays_like_eventpipe_replay_with_errors_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("t.toml");
        std::fs::write(&config, "[defaults]\nsinks = [\"jsonl:/nonexistent/never-opened.jsonl\"]\n").unwrap();
        let out =
            run_test(&registry(), &Subject::Config(config), &PluginSettings::default(), std::io::Cursor::new(INPUT))
                .unwrap();
        let mut replayed = Vec::new();
        crate::commands::replay::replay(std::io::Cursor::new(INPUT), &mut replayed, Default::default()).unwrap();
        let replayed: Vec<String> = String::from_utf8(replayed).unwrap().lines().map(String::from).collect();
        assert_eq!(out.len(), 3);
        assert!(compare(&replayed.join("\n"), &out).matches(), "{}", compare(&replayed.join("\n"), &out));
        assert!(out[1].starts_with(r#"{"error":"line 2"#), "{}", out[1]);
        let second: serde_json::Value = serde_json::from_str(&out[2]).unwrap();
        assert_eq!(second["event"]["count"], 2, "the repeat is counted: {second}");
    }

    #[test]
    fn a_missing_component_is_an_error_naming_the_file() {
        let error = run_test(
            &registry(),
            &Subject::Component("/nonexistent/x.wasm".into()),
            &PluginSettings::default(),
            std::io::Cursor::new(""),
        )
        .expect_err("an error");
        assert!(error.to_string().contains("/nonexistent/x.wasm"), "{error}");
    }
}
