//! `eventpipe run`: source → Broadcaster → sink watcher (EventCorrelator → EventSink).

use std::path::PathBuf;
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

use crate::broadcaster::WatchEventType;
use crate::event_broadcaster::{EventBroadcaster, EventBroadcasterOptions, SinkStats};
use crate::plugin::functions::DEFAULT_TENANT;
use crate::plugin::sink::WasmSink;
use crate::plugin::{Metering, PluginRuntime, PluginSettings, embedded};
use crate::sink::EventSink;
use crate::sink::jsonl::JsonLinesSink;
use crate::source::decode::{Decoded, Decoder};

/// Where events come from: `jsonl:PATH` or `jsonl:-` (stdin).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceSpec {
    /// JSON lines (or any shape the decoder accepts) from a file.
    JsonLinesFile(PathBuf),
    /// The same from standard input.
    JsonLinesStdin,
}

/// Where sink calls go: `jsonl:PATH`, `jsonl:-` (stdout), or `plugin:NAME` / `plugin:FILE.wasm`
/// (a sink plugin, embedded or from a file, writing to stdout).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkSpec {
    /// One JSON line per sink call, to a file (created or truncated).
    JsonLinesFile(PathBuf),
    /// The same to standard output.
    JsonLinesStdout,
    /// A sink plugin: an embedded one by name (`jsonl`) or a component file.
    Plugin(String),
}

/// A `--source` / `--sink` value that is not `KIND:TARGET` with a known kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?}: expected jsonl:PATH, jsonl:- or (sinks only) plugin:NAME")]
pub struct SpecError(String);

impl std::str::FromStr for SourceSpec {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once(':') {
            Some(("jsonl", "-")) => Ok(SourceSpec::JsonLinesStdin),
            Some(("jsonl", path)) if !path.is_empty() => Ok(SourceSpec::JsonLinesFile(path.into())),
            _ => Err(SpecError(s.into())),
        }
    }
}

impl std::str::FromStr for SinkSpec {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once(':') {
            Some(("jsonl", "-")) => Ok(SinkSpec::JsonLinesStdout),
            Some(("jsonl", path)) if !path.is_empty() => Ok(SinkSpec::JsonLinesFile(path.into())),
            Some(("plugin", name)) if !name.is_empty() => Ok(SinkSpec::Plugin(name.into())),
            _ => Err(SpecError(s.into())),
        }
    }
}

/// What a run did: the source's side and the sink watcher's [`SinkStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RunSummary {
    /// Events read from the source and accepted by the Broadcaster.
    pub read: u64,
    /// Input documents that could not be decoded (each logged with its line number).
    pub bad_lines: u64,
    /// Watch bookmarks and error envelopes seen (not events).
    pub non_events: u64,
    /// Events the Broadcaster's incoming queue dropped (only with `DropIfChannelFull`).
    pub dropped_incoming: u64,
    /// The sink watcher's totals.
    #[serde(flatten)]
    pub sink: SinkStats,
}

impl std::fmt::Display for RunSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.sink;
        write!(
            f,
            "read {} events ({} bad lines, {} non-events); created {}, patched {}, skipped by spam filter {}, \
             aggregated {}; sink dropped {}, gave up {}, retries {}; incoming queue dropped {}",
            self.read,
            self.bad_lines,
            self.non_events,
            s.created,
            s.patched,
            s.skipped,
            s.aggregated,
            s.dropped,
            s.gave_up,
            s.retries,
            self.dropped_incoming
        )
    }
}

/// Why a run failed to start or finish (bad lines and sink errors never fail a run).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The source could not be opened or read.
    #[error("source {path}: {error}")]
    Source {
        /// The source's path (`-` for stdin).
        path: String,
        /// The I/O error.
        #[source]
        error: std::io::Error,
    },
    /// The sink plugin could not be loaded.
    #[error("sink plugin: {0}")]
    SinkPlugin(String),
    /// The sink could not be opened or flushed.
    #[error("sink {path}: {error}")]
    Sink {
        /// The sink's path (`-` for stdout).
        path: String,
        /// The I/O error.
        #[source]
        error: std::io::Error,
    },
    /// The sink watcher's task panicked or was cancelled.
    #[error("sink watcher failed: {0}")]
    Watcher(#[from] tokio::task::JoinError),
}

/// Runs the pipeline until the source ends, then shuts the Broadcaster down (draining it) and
/// waits for the sink watcher to finish.
///
/// # Errors
/// [`RunError`] when the source or sink cannot be opened, read or flushed.
pub async fn run(
    source: SourceSpec,
    sink: SinkSpec,
    options: EventBroadcasterOptions,
    plugins: &PluginSettings,
) -> Result<RunSummary, RunError> {
    let (sink_path, sink) = match &sink {
        SinkSpec::JsonLinesStdout => {
            ("-".to_string(), OpenSink::Jsonl(Arc::new(JsonLinesSink::new(Box::new(std::io::stdout())))))
        }
        SinkSpec::JsonLinesFile(p) => {
            let file =
                std::fs::File::create(p).map_err(|error| RunError::Sink { path: p.display().to_string(), error })?;
            (p.display().to_string(), OpenSink::Jsonl(Arc::new(JsonLinesSink::new(Box::new(file)))))
        }
        SinkSpec::Plugin(name) => ("-".to_string(), OpenSink::Plugin(Arc::new(sink_plugin(name, plugins)?))),
    };
    let event_broadcaster = EventBroadcaster::new(options);
    let watcher =
        event_broadcaster.start_recording_to_sink(sink.as_event_sink()).expect("a new broadcaster is running");

    let mut summary = match &source {
        SourceSpec::JsonLinesStdin => pump(tokio::io::stdin(), "-", &event_broadcaster).await,
        SourceSpec::JsonLinesFile(p) => {
            let path = p.display().to_string();
            match tokio::fs::File::open(p).await {
                Ok(file) => pump(file, &path, &event_broadcaster).await,
                Err(error) => Err(RunError::Source { path, error }),
            }
        }
    };
    event_broadcaster.shutdown().await;
    let sink_stats = watcher.await?;
    sink.flush().map_err(|error| RunError::Sink { path: sink_path, error })?;
    if let Ok(s) = summary.as_mut() {
        s.sink = sink_stats;
        s.dropped_incoming = event_broadcaster.broadcaster().incoming_dropped();
    }
    summary
}

/// The sink of a run, kept typed so it can be flushed at the end.
enum OpenSink {
    Jsonl(Arc<JsonLinesSink>),
    Plugin(Arc<WasmSink>),
}

impl OpenSink {
    fn as_event_sink(&self) -> Arc<dyn EventSink> {
        match self {
            OpenSink::Jsonl(s) => s.clone(),
            OpenSink::Plugin(s) => s.clone(),
        }
    }

    fn flush(&self) -> std::io::Result<()> {
        match self {
            OpenSink::Jsonl(s) => s.flush(),
            OpenSink::Plugin(s) => s.flush(),
        }
    }
}

/// The sink plugin `name`: an embedded one, or a component file when `name` ends in `.wasm`.
fn sink_plugin(name: &str, settings: &PluginSettings) -> Result<WasmSink, RunError> {
    let fail = |e: &dyn std::fmt::Display| RunError::SinkPlugin(e.to_string());
    let runtime = PluginRuntime::new(Metering::Fuel).map_err(|e| fail(&e))?;
    let (stem, bytes) = if name.ends_with(".wasm") {
        let path = std::path::Path::new(name);
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        (stem, std::fs::read(path).map_err(|e| fail(&format!("{name}: {e}")))?)
    } else {
        let (_, bytes) = embedded::ALL
            .iter()
            .find(|(n, _)| *n == name)
            .ok_or_else(|| fail(&format!("no embedded plugin named {name:?}")))?;
        (name.to_string(), bytes.to_vec())
    };
    let plugin = runtime.load(&stem, &bytes, settings.clone()).map_err(|e| fail(&e))?;
    WasmSink::new(plugin, DEFAULT_TENANT, Box::new(std::io::stdout())).map_err(|e| fail(&e))
}

/// Reads the source line by line into the Broadcaster (waiting for room: `Action`).
async fn pump(input: impl AsyncRead + Unpin, path: &str, to: &EventBroadcaster) -> Result<RunSummary, RunError> {
    let mut summary = RunSummary::default();
    let mut lines = BufReader::with_capacity(1 << 16, input).lines();
    let mut decoder = Decoder::new();
    loop {
        let line = lines.next_line().await.map_err(|error| RunError::Source { path: path.into(), error })?;
        let mut items = Vec::new();
        match &line {
            Some(l) => decoder.push_line(l, |item| items.push(item)),
            None => items.extend(decoder.finish().map(Err)),
        }
        for item in items {
            match item {
                Ok(Decoded::Event { event, .. }) => match to.broadcaster().action(WatchEventType::Added, event).await {
                    Ok(()) => summary.read += 1,
                    Err(error) => tracing::error!(%error, "broadcaster refused an event"),
                },
                Ok(other) => {
                    tracing::info!(
                        source = path,
                        line = other.line(),
                        what = other.describe(),
                        "not an event, skipped"
                    );
                    summary.non_events += 1;
                }
                Err(error) => {
                    tracing::warn!(source = path, %error, "bad input skipped");
                    summary.bad_lines += 1;
                }
            }
        }
        if line.is_none() {
            return Ok(summary);
        }
    }
}
