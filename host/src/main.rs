//! The `eventpipe` command line: thin glue over the library.

use std::io::{BufReader, BufWriter};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use eventpipe::broadcaster::FullChannelBehavior;
use eventpipe::correlator::{CorrelatorOptions, SourceObjectType};
use eventpipe::event_broadcaster::{CorrelationClock, EventBroadcasterOptions};
use eventpipe::plugin::check::check;
use eventpipe::plugin::embedded::CorrelatorPlugins;
use eventpipe::plugin::functions::DEFAULT_TENANT;
use eventpipe::plugin::{
    DEFAULT_FUEL_PER_EVENT, DEFAULT_MEMORY_LIMIT_BYTES, FallbackPolicy, Metering, Plugin, PluginRuntime, PluginSettings,
};
use eventpipe::replay::{ReplayOptions, replay};
use eventpipe::run::{SinkSpec, SourceSpec, run};

/// The Kubernetes event pipeline (client-go's EventRecorder → Broadcaster → EventCorrelator →
/// EventSink) as a fast, pluggable host.
#[derive(Parser, Debug)]
#[command(name = "eventpipe", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Replay a recorded stream through one EventCorrelator, one result line per input line
    /// (`{"clock","event"}` lines in, `{"skip","event","patch"}` lines out).
    Replay(ReplayArgs),
    /// Read events from a source, run them Broadcaster → EventCorrelator → sink, print a summary.
    Run(RunArgs),
    /// Work with plugin components.
    #[command(subcommand)]
    Plugins(PluginsCommand),
}

#[derive(Subcommand, Debug)]
enum PluginsCommand {
    /// Load a component, tell its kind, run it on a sample event, print fuel used and peak
    /// memory; exit 1 with the reason when it is not a working plugin.
    Check {
        /// The component file.
        file: PathBuf,
        #[command(flatten)]
        limits: PluginArgs,
    },
}

/// client-go `CorrelatorOptions` as flags; 0 means client-go's default.
#[derive(Args, Debug, Clone)]
struct CorrelatorArgs {
    /// Entries in each of the three LRU caches (default 4096).
    #[arg(long, default_value_t = 0)]
    lru_cache_size: usize,
    /// Spam filter bucket size per source+object, events (default 25).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    burst: i64,
    /// Spam filter refill rate, events per second (default 1/300).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    qps: f32,
    /// Distinct messages per reason within the interval before aggregating (default 10).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    max_events: i64,
    /// Aggregation window, seconds (default 600).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    max_interval_seconds: i64,
    /// Spam filter key: `source-object` (client-go v0.26, the default) or `source-object-type`
    /// (client-go ≥ 1.32: Normal and Warning events get separate buckets; built in).
    #[arg(long, value_enum, default_value_t = SpamKeyArg::SourceObject)]
    spam_key: SpamKeyArg,
    /// Use the native built-in key functions instead of the (identical) default Wasm plugins.
    #[arg(long)]
    builtin: bool,
    /// An aggregate-key plugin (component file) replacing the default `by-reason`.
    #[arg(long, value_name = "FILE.wasm", conflicts_with = "builtin")]
    aggregate_key_plugin: Option<PathBuf>,
    /// A message-combiner plugin replacing the default `similar-events`.
    #[arg(long, value_name = "FILE.wasm", conflicts_with = "builtin")]
    message_combiner_plugin: Option<PathBuf>,
    /// A spam-key plugin replacing the default `source-object`.
    #[arg(long, value_name = "FILE.wasm", conflicts_with = "builtin")]
    spam_key_plugin: Option<PathBuf>,
    #[command(flatten)]
    limits: PluginArgs,
}

/// Limits and failure policy of every plugin.
#[derive(Args, Debug, Clone)]
struct PluginArgs {
    /// Fuel per event of a plugin call (≈ Wasm instructions).
    #[arg(long, default_value_t = DEFAULT_FUEL_PER_EVENT)]
    fuel_per_event: u64,
    /// Linear-memory limit of a plugin instance, bytes.
    #[arg(long, default_value_t = DEFAULT_MEMORY_LIMIT_BYTES)]
    memory_limit_bytes: usize,
    /// What a failed plugin call does: `builtin` (use the client-go function), `drop` (drop the
    /// event), `fail` (drop it and exit with status 3 at the end).
    #[arg(long, default_value = "builtin")]
    plugin_fallback: FallbackPolicy,
}

impl PluginArgs {
    fn settings(&self) -> PluginSettings {
        PluginSettings {
            fuel_per_event: self.fuel_per_event,
            memory_limit_bytes: self.memory_limit_bytes,
            fallback: self.plugin_fallback,
            ..PluginSettings::default()
        }
    }
}

#[derive(Copy, Clone, Debug, ValueEnum)]
enum SpamKeyArg {
    /// One bucket per source + involved object.
    SourceObject,
    /// One bucket per source + involved object + type.
    SourceObjectType,
}

/// The plugins a command runs with, kept to read their stats at the end.
struct LoadedPlugins(Vec<Arc<Plugin>>);

impl LoadedPlugins {
    /// Exit status 3 when a plugin failed under the `fail` policy.
    fn failed(&self) -> bool {
        self.0.iter().any(|p| p.settings().fallback == FallbackPolicy::Fail && p.stats().snapshot().drops > 0)
    }
}

impl CorrelatorArgs {
    /// The correlator options, with the key functions from the default plugins (or the given
    /// ones), unless `--builtin`.
    fn options(&self) -> anyhow::Result<(CorrelatorOptions, LoadedPlugins)> {
        let options = self.builtin_options();
        if self.builtin {
            return Ok((options, LoadedPlugins(Vec::new())));
        }
        let runtime = PluginRuntime::new(Metering::Fuel)?;
        let settings = self.limits.settings();
        let mut plugins = CorrelatorPlugins::defaults(&runtime, &settings)?;
        let load = |path: &PathBuf| -> anyhow::Result<Arc<Plugin>> {
            let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            Ok(runtime.load(&name, &bytes, settings.clone())?)
        };
        if let Some(p) = &self.aggregate_key_plugin {
            plugins.aggregate_key = load(p)?;
        }
        if let Some(p) = &self.message_combiner_plugin {
            plugins.message_combiner = load(p)?;
        }
        if let Some(p) = &self.spam_key_plugin {
            plugins.spam_key = load(p)?;
        }
        let spam_key_func = options.spam_key_func.clone();
        let mut options = plugins.apply(options, DEFAULT_TENANT)?;
        if spam_key_func.is_some() {
            options.spam_key_func = spam_key_func; // --spam-key source-object-type
        }
        let loaded = LoadedPlugins(vec![plugins.aggregate_key, plugins.message_combiner, plugins.spam_key]);
        Ok((options, loaded))
    }

    fn builtin_options(&self) -> CorrelatorOptions {
        CorrelatorOptions {
            lru_cache_size: self.lru_cache_size,
            burst_size: self.burst,
            qps: self.qps,
            max_events: self.max_events,
            max_interval_in_seconds: self.max_interval_seconds,
            spam_key_func: match self.spam_key {
                SpamKeyArg::SourceObject => None,
                SpamKeyArg::SourceObjectType => Some(Arc::new(SourceObjectType)),
            },
            ..CorrelatorOptions::default()
        }
    }
}

#[derive(Args, Debug)]
struct ReplayArgs {
    #[command(flatten)]
    correlator: CorrelatorArgs,
    /// Do not call UpdateState after a result (a sink that never succeeds).
    #[arg(long)]
    no_update_state: bool,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
enum Behavior {
    /// WaitIfChannelFull: nothing is lost in process; a slow sink slows the source.
    Wait,
    /// DropIfChannelFull: never blocks; a full watcher queue drops (counted), as client-go.
    Drop,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
enum ClockArg {
    /// The event's own time (lastTimestamp, else eventTime…): deterministic for recorded streams.
    Event,
    /// The wall clock when the event is processed, as client-go.
    Processing,
}

#[derive(Args, Debug)]
struct RunArgs {
    /// `jsonl:PATH` or `jsonl:-` (stdin): JSON lines, watch envelopes, EventLists or
    /// `kubectl get events -w -o json` output.
    #[arg(long)]
    source: SourceSpec,
    /// `jsonl:PATH` or `jsonl:-` (stdout): one `{"verb","event","patch"}` line per sink call;
    /// `plugin:NAME` (an embedded sink plugin, e.g. `plugin:jsonl`) or `plugin:FILE.wasm`
    /// (writes to stdout).
    #[arg(long)]
    sink: SinkSpec,
    /// What a full watcher queue does.
    #[arg(long, value_enum, default_value_t = Behavior::Wait)]
    full_channel_behavior: Behavior,
    /// Which clock the correlator reads.
    #[arg(long, value_enum, default_value_t = ClockArg::Event)]
    clock: ClockArg,
    /// Print the summary as one JSON object on stderr instead of a sentence.
    #[arg(long)]
    summary_json: bool,
    #[command(flatten)]
    correlator: CorrelatorArgs,
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into());
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
}

fn main() -> ExitCode {
    init_logging();
    match execute(Cli::parse().command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("eventpipe: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn execute(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Replay(args) => {
            let (correlator, plugins) = args.correlator.options()?;
            let options = ReplayOptions { correlator, no_update_state: args.no_update_state };
            let stdin = BufReader::with_capacity(1 << 16, std::io::stdin().lock());
            let stdout = BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
            let summary = replay(stdin, stdout, options).context("replay")?;
            // Bad input lines are reported and replayed around; they make the exit status 2.
            Ok(if plugins.failed() {
                ExitCode::from(3)
            } else if summary.errors > 0 {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Run(args) => {
            let (correlator, plugins) = args.correlator.options()?;
            let options = EventBroadcasterOptions {
                full_channel_behavior: match args.full_channel_behavior {
                    Behavior::Wait => FullChannelBehavior::WaitIfChannelFull,
                    Behavior::Drop => FullChannelBehavior::DropIfChannelFull,
                },
                correlation_clock: match args.clock {
                    ClockArg::Event => CorrelationClock::EventTime,
                    ClockArg::Processing => CorrelationClock::Processing,
                },
                correlator,
                ..EventBroadcasterOptions::default()
            };
            let runtime = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
            let settings = args.correlator.limits.settings();
            let summary = runtime.block_on(run(args.source, args.sink, options, &settings))?;
            if args.summary_json {
                eprintln!("{}", serde_json::to_string(&summary)?);
            } else {
                eprintln!("eventpipe run: {summary}");
            }
            Ok(if plugins.failed() { ExitCode::from(3) } else { ExitCode::SUCCESS })
        }
        Command::Plugins(PluginsCommand::Check { file, limits }) => {
            let runtime = PluginRuntime::new(Metering::Fuel)?;
            match check(&runtime, &file, limits.settings()) {
                Ok(report) => {
                    println!("{}: {} plugin", report.name, report.kind);
                    println!("  sample event -> {}", report.answer);
                    println!("  fuel used: {}", report.cost.fuel);
                    println!("  peak memory: {} bytes", report.cost.peak_memory_bytes);
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    eprintln!("eventpipe plugins check: {e}");
                    Ok(ExitCode::FAILURE)
                }
            }
        }
    }
}
