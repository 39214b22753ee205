//! The `eventpipe` command line: thin glue over the library.

use std::io::{BufReader, BufWriter};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use eventpipe::broadcaster::FullChannelBehavior;
use eventpipe::correlator::CorrelationClock;
use eventpipe::correlator::{CorrelatorOptions, SourceObjectType};
use eventpipe::delivery::Delivery;
use eventpipe::event_broadcaster::EventBroadcasterOptions;
use eventpipe::golden::{Subject, compare, run_test, write_golden};
use eventpipe::k8s::KubeOptions;
use eventpipe::logging::{LogFormat, try_init_logging};
use eventpipe::plan::{KeyChoice, TenantRules};
use eventpipe::plugin::check::check;
use eventpipe::plugin::functions::{CorrelatorPlugins, DEFAULT_TENANT};
use eventpipe::plugin::registry::{PluginRegistry, ReloadOutcome};
use eventpipe::plugin::{
    DEFAULT_FUEL_PER_EVENT, DEFAULT_MEMORY_LIMIT_BYTES, FallbackPolicy, Metering, PluginHandle, PluginKind,
    PluginRuntime, PluginSettings,
};
use eventpipe::replay::{ReplayOptions, replay};
use eventpipe::router::{DEFAULT_MAX_IN_FLIGHT, PartitionKey};
use eventpipe::run::{RunOptions, run};
use eventpipe::scaffold;
use eventpipe::sink::SinkSpec;
use eventpipe::source::SourceSpec;
use eventpipe::source::k8s::{EventsApi, WatchOptions};

/// The Kubernetes event pipeline (client-go's EventRecorder → Broadcaster → EventCorrelator →
/// EventSink) as a fast, pluggable host.
#[derive(Parser, Debug)]
#[command(name = "eventpipe", version, about)]
struct Cli {
    /// Log lines on stderr: `pretty` (human) or `json` (one object per line).
    #[arg(long, global = true, default_value = "pretty")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Replay a recorded stream through one EventCorrelator, one result line per input line
    /// (`{"clock","event"}` lines in, `{"skip","event","patch"}` lines out).
    Replay(ReplayArgs),
    /// Read events from a source, run them Broadcaster → EventCorrelator → sink, print a summary.
    Run(Box<RunArgs>),
    /// Work with plugin components.
    #[command(subcommand)]
    Plugins(PluginsCommand),
    /// Run a plugin (or a tenant config's plugins) over JSON lines with the replay clock and
    /// compare the output with a golden file; exit 1 on a difference.
    Test(TestArgs),
    /// Create a plugin project (directory NAME) that builds with the commands in its README.
    NewPlugin(NewPluginArgs),
}

#[derive(Args, Debug)]
struct TestArgs {
    /// The plugin component (its kind decides what is tested). Or use `--config`.
    #[arg(value_name = "PLUGIN.wasm", required_unless_present = "config", conflicts_with = "config")]
    plugin: Option<PathBuf>,
    /// A tenant config whose rules name the plugins to test (looked up in `--plugins`).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The plugins directory the config's plugin names refer to.
    #[arg(long, value_name = "DIR")]
    plugins: Option<PathBuf>,
    /// The input: JSON lines (`{"clock","event"}` replay lines, or events); `-` for stdin.
    #[arg(long, value_name = "FILE")]
    input: PathBuf,
    /// The golden output file.
    #[arg(long, value_name = "FILE")]
    expected: PathBuf,
    /// Write the output to the golden file instead of comparing.
    #[arg(long)]
    update: bool,
    /// Config of the plugin (its `config` import), `KEY=VALUE`; repeatable.
    #[arg(long = "plugin-config", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    plugin_config: Vec<(String, String)>,
    /// How many differing lines to show.
    #[arg(long, default_value_t = 10)]
    show: usize,
    #[command(flatten)]
    limits: PluginArgs,
    #[command(flatten)]
    runtime: RuntimeArgs,
}

fn parse_key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("expected KEY=VALUE, got {s:?}"))
}

#[derive(Args, Debug)]
struct NewPluginArgs {
    /// The language: rust, python, js or c.
    #[arg(long)]
    lang: Lang,
    /// The plugin kind (WIT world).
    #[arg(long)]
    kind: KindArg,
    /// The plugin's name; also the directory created.
    name: String,
    /// Create the project in this directory instead of `./NAME`.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Rust: the `guest-sdk` directory of an eventpipe clone (default: the one this binary was
    /// built from, when it still exists).
    #[arg(long, value_name = "PATH")]
    sdk: Option<PathBuf>,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
enum Lang {
    Rust,
    Python,
    Js,
    C,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
enum KindArg {
    Filter,
    AggregateKey,
    MessageCombiner,
    SpamKey,
    Sink,
    Watcher,
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
struct LoadedPlugins(Vec<PluginHandle>);

impl LoadedPlugins {
    /// Exit status 3 when a plugin failed under the `fail` policy.
    fn failed(&self) -> bool {
        self.0.iter().any(|p| p.settings().fallback == FallbackPolicy::Fail && p.stats().snapshot().drops > 0)
    }
}

/// Where compiled plugins are cached, and the plugins directory.
#[derive(Args, Debug, Clone)]
struct RuntimeArgs {
    /// wasmtime's compilation cache directory (default: wasmtime's, e.g. ~/.cache/wasmtime).
    #[arg(long, value_name = "DIR")]
    compile_cache: Option<PathBuf>,
    /// Compile every plugin at start instead of using the compilation cache.
    #[arg(long, conflicts_with = "compile_cache")]
    no_compile_cache: bool,
}

impl RuntimeArgs {
    fn registry(&self) -> anyhow::Result<PluginRegistry> {
        let runtime = if self.no_compile_cache {
            PluginRuntime::new(Metering::Fuel)?
        } else {
            match PluginRuntime::with_cache(Metering::Fuel, self.compile_cache.as_deref()) {
                Ok(runtime) => runtime,
                // No writable cache directory (e.g. no HOME): compile every time.
                Err(e) if self.compile_cache.is_none() => {
                    tracing::warn!(error = %e, "no compilation cache");
                    PluginRuntime::new(Metering::Fuel)?
                }
                Err(e) => return Err(e.into()),
            }
        };
        Ok(PluginRegistry::new(runtime)?)
    }
}

impl CorrelatorArgs {
    /// The correlator options of `replay`, with the key functions from the default plugins (or
    /// the given files), unless `--builtin`.
    fn options(&self, registry: &PluginRegistry) -> anyhow::Result<(CorrelatorOptions, LoadedPlugins)> {
        let options = self.builtin_options();
        if self.builtin {
            return Ok((options, LoadedPlugins(Vec::new())));
        }
        let settings = self.limits.settings();
        let mut plugins = CorrelatorPlugins::defaults(registry, DEFAULT_TENANT, &settings)?;
        let rules = self.base_rules(registry)?;
        let handle = |choice: &KeyChoice, kind| match choice {
            KeyChoice::Plugin(name) => Ok(Some(registry.handle(name, kind, DEFAULT_TENANT, settings.clone())?)),
            KeyChoice::Builtin => Ok::<_, anyhow::Error>(None),
        };
        if let Some(h) = handle(&rules.aggregate_key, PluginKind::AggregateKey)? {
            plugins.aggregate_key = h;
        }
        if let Some(h) = handle(&rules.message_combiner, PluginKind::MessageCombiner)? {
            plugins.message_combiner = h;
        }
        if let Some(h) = handle(&rules.spam_key, PluginKind::SpamKey)? {
            plugins.spam_key = h;
        }
        let spam_key_func = options.spam_key_func.clone();
        let mut options = plugins.apply(options)?;
        if spam_key_func.is_some() {
            options.spam_key_func = spam_key_func; // --spam-key source-object-type
        }
        let loaded = LoadedPlugins(plugins.handles().into_iter().cloned().collect());
        Ok((options, loaded))
    }

    /// The rules the flags give: numbers, key functions (default plugins, `--builtin`, or files
    /// loaded into `registry` under their stems) and plugin limits. No sinks.
    fn base_rules(&self, registry: &PluginRegistry) -> anyhow::Result<TenantRules> {
        let choice = |file: &Option<PathBuf>, default: &str| -> anyhow::Result<KeyChoice> {
            if self.builtin {
                return Ok(KeyChoice::Builtin);
            }
            let Some(path) = file else { return Ok(KeyChoice::Plugin(default.into())) };
            match registry.reload_file(path) {
                ReloadOutcome::Live(p) => Ok(KeyChoice::Plugin(p.name)),
                ReloadOutcome::Unchanged { name } => Ok(KeyChoice::Plugin(name)),
                ReloadOutcome::Ignored => anyhow::bail!("{}: not a .wasm file", path.display()),
                other => anyhow::bail!("{other}"),
            }
        };
        let spam_key = if self.builtin || matches!(self.spam_key, SpamKeyArg::SourceObjectType) {
            if self.spam_key_plugin.is_some() {
                anyhow::bail!(
                    "--spam-key source-object-type is built in; it cannot be combined with --spam-key-plugin"
                );
            }
            KeyChoice::Builtin
        } else {
            choice(&self.spam_key_plugin, "source-object")?
        };
        Ok(TenantRules {
            lru_cache_size: self.lru_cache_size,
            burst: self.burst,
            qps: self.qps,
            max_events: self.max_events,
            max_interval_seconds: self.max_interval_seconds,
            aggregate_key: choice(&self.aggregate_key_plugin, "by-reason")?,
            message_combiner: choice(&self.message_combiner_plugin, "similar-events")?,
            spam_key,
            spam_key_with_type: matches!(self.spam_key, SpamKeyArg::SourceObjectType),
            filters: Vec::new(),
            plugin: self.limits.settings(),
            plugin_config: Default::default(),
            sinks: Vec::new(),
        })
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
    #[command(flatten)]
    runtime: RuntimeArgs,
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

#[derive(Copy, Clone, Debug, ValueEnum, PartialEq, Eq)]
enum DeliveryArg {
    /// DropIfChannelFull: never blocks the source; drops are counted.
    AtMostOnce,
    /// WaitIfChannelFull: nothing lost in process.
    Wait,
    /// Wait, plus a saved source position: nothing lost across restarts (duplicates possible).
    AtLeastOnce,
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
    /// `kubectl get events -w -o json` output; `k8s` / `k8s:NS[,NS…]`: a Kubernetes watch;
    /// `http` / `http:ADDR` (default 127.0.0.1:8080): HTTP ingest (client-go's event paths and
    /// `POST /ingest`; a non-loopback address needs $EVENTPIPE_INGEST_TOKEN).
    #[arg(long)]
    source: SourceSpec,
    /// `jsonl:PATH` or `jsonl:-` (stdout): one `{"verb","event","patch"}` line per sink call;
    /// `plugin:NAME` (a sink plugin, embedded like `plugin:jsonl` or from the plugins
    /// directory) or `plugin:FILE.wasm` (writes to stdout). Repeatable. The sinks of tenants
    /// whose config names none; required unless `--config` gives `sinks` in `[defaults]` (a
    /// tenant left without a sink is an error at start).
    #[arg(long)]
    sink: Vec<SinkSpec>,
    /// The plugins directory: every NAME.wasm in it is plugin NAME (overriding an embedded one
    /// of that name), watched and hot-swapped. Default: `./plugins` when it exists.
    #[arg(long, value_name = "DIR")]
    plugins: Option<PathBuf>,
    /// The tenant config (TOML), watched and hot-reloaded.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Do not watch the plugins directory and config file.
    #[arg(long)]
    no_watch: bool,
    /// After SIGINT / SIGTERM, seconds to drain the Broadcaster and the sinks before pending
    /// sink retries are abandoned.
    #[arg(long, default_value_t = 30)]
    shutdown_timeout: u64,
    #[command(flatten)]
    kube: KubeArgs,
    #[command(flatten)]
    runtime: RuntimeArgs,
    /// What a full watcher queue does (`--delivery` sets it too).
    #[arg(long, value_enum, default_value_t = Behavior::Wait)]
    full_channel_behavior: Behavior,
    /// Delivery mode: `at-most-once` (DropIfChannelFull), `wait` (WaitIfChannelFull, nothing
    /// lost in process), `at-least-once` (wait, and the source position is saved in
    /// `--state-file` once every sink acknowledged, so a restart resumes without loss).
    #[arg(long, value_enum)]
    delivery: Option<DeliveryArg>,
    /// Keep reading a `jsonl:FILE` source as it grows (as `tail -f`) until SIGINT / SIGTERM.
    #[arg(long)]
    follow: bool,
    /// Serve Prometheus metrics at `GET /metrics` on this address (e.g. 127.0.0.1:9090).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,
    /// The state file of `--delivery at-least-once`.
    #[arg(long, value_name = "FILE", required_if_eq("delivery", "at-least-once"))]
    state_file: Option<PathBuf>,
    /// Which clock the correlator reads.
    #[arg(long, value_enum, default_value_t = ClockArg::Event)]
    clock: ClockArg,
    /// Print the summary as one JSON object on stderr instead of a sentence.
    #[arg(long)]
    summary_json: bool,
    /// Partitions of the tenant router, each on its own task and core. Events are sharded by
    /// `--partition-key`; 1 (the default) is one EventCorrelator per tenant, with every sink
    /// call in input order; `0` is the number of cores.
    #[arg(long, value_name = "N", default_value_t = 1)]
    workers: usize,
    /// What an event's partition is computed from.
    #[arg(long, value_enum, default_value_t = PartitionKey::SourceObject)]
    partition_key: PartitionKey,
    /// A watcher plugin to attach to the Broadcaster: a plugin name (the embedded `log`, or one
    /// in the plugins directory) or a component file; its own queue of 1000 events, dropping
    /// when full (as client-go's watchers). Repeatable; the config's `[[watchers]]` add more.
    #[arg(long, value_name = "NAME|FILE.wasm")]
    watcher: Vec<eventpipe::watchers::WatcherSpec>,
    /// Writes in flight per sink (1: client-go's one write at a time).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_IN_FLIGHT)]
    max_in_flight: usize,
    #[command(flatten)]
    correlator: CorrelatorArgs,
}

/// The Kubernetes connection (for `--source k8s…` and `--sink k8s…`) and watch.
#[derive(Args, Debug, Clone)]
struct KubeArgs {
    /// A kubeconfig file (default: as kubectl: $KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context (default: its current context).
    #[arg(long)]
    context: Option<String>,
    /// The API server URL, overriding the kubeconfig's (e.g. `http://127.0.0.1:8001` from
    /// `kubectl proxy`).
    #[arg(long, value_name = "URL")]
    kube_server: Option<String>,
    /// Watch only events matching this field selector (e.g. `involvedObject.kind=Pod`).
    #[arg(long)]
    field_selector: Option<String>,
    /// Watch only events matching this label selector.
    #[arg(long)]
    label_selector: Option<String>,
    /// Which Events API the `k8s` source watches.
    #[arg(long, value_enum, default_value_t = EventsApiArg::Core)]
    events_api: EventsApiArg,
    /// Also send on the events already in the cluster when the watch starts.
    #[arg(long)]
    replay_existing: bool,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
enum EventsApiArg {
    /// core/v1 (`/api/v1/events`).
    Core,
    /// events.k8s.io/v1, converted to core/v1.
    #[value(name = "events.k8s.io")]
    EventsK8sIo,
}

/// `eventpipe test`: exit 0 when the output matches the golden file (or `--update` wrote it),
/// 1 on a difference.
fn test(args: TestArgs) -> anyhow::Result<ExitCode> {
    let mut settings = args.limits.settings();
    settings.config = args.plugin_config.into_iter().collect();
    let mut registry = args.runtime.registry()?.with_validation(settings.clone());
    if let Some(dir) = &args.plugins {
        let (with_dir, outcomes) =
            registry.with_dir(dir).with_context(|| format!("plugins directory {}", dir.display()))?;
        registry = with_dir;
        for outcome in outcomes.iter().filter(|o| matches!(o, ReloadOutcome::Rejected { .. })) {
            eprintln!("eventpipe test: {outcome}");
        }
    }
    let subject = match (args.plugin, args.config) {
        (Some(plugin), _) => Subject::Component(plugin),
        (None, Some(config)) => Subject::Config(config),
        (None, None) => anyhow::bail!("give a PLUGIN.wasm or --config FILE"),
    };
    let input: Box<dyn std::io::BufRead> = if args.input.as_os_str() == "-" {
        Box::new(BufReader::new(std::io::stdin().lock()))
    } else {
        let file = std::fs::File::open(&args.input).with_context(|| format!("input {}", args.input.display()))?;
        Box::new(BufReader::with_capacity(1 << 16, file))
    };
    let got = run_test(&registry, &subject, &settings, input)?;
    if args.update {
        write_golden(&args.expected, &got).with_context(|| format!("writing {}", args.expected.display()))?;
        println!("wrote {} lines to {}", got.len(), args.expected.display());
        return Ok(ExitCode::SUCCESS);
    }
    let expected = std::fs::read_to_string(&args.expected)
        .with_context(|| format!("golden file {} (create it with --update)", args.expected.display()))?;
    let mut comparison = compare(&expected, &got);
    comparison.shown = args.show;
    if comparison.matches() {
        println!("ok: {} lines match {}", got.len(), args.expected.display());
        Ok(ExitCode::SUCCESS)
    } else {
        println!("{comparison}");
        Ok(ExitCode::FAILURE)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = try_init_logging(cli.log_format) {
        eprintln!("eventpipe: {e}");
        return ExitCode::FAILURE;
    }
    match execute(cli.command) {
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
            let registry = args.runtime.registry()?.with_validation(args.correlator.limits.settings());
            let (correlator, plugins) = args.correlator.options(&registry)?;
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
            let plugins_dir = args.plugins.clone().or_else(|| {
                let default = PathBuf::from("plugins");
                default.is_dir().then_some(default)
            });
            let mut registry = args.runtime.registry()?.with_validation(args.correlator.limits.settings());
            if let Some(dir) = &plugins_dir {
                let (with_dir, outcomes) =
                    registry.with_dir(dir).with_context(|| format!("plugins directory {}", dir.display()))?;
                registry = with_dir;
                for outcome in outcomes.iter().filter(|o| matches!(o, ReloadOutcome::Rejected { .. })) {
                    eprintln!("eventpipe: {outcome}");
                }
            }
            let mut base = args.correlator.base_rules(&registry)?;
            base.sinks = args.sink.clone();
            let options = RunOptions {
                source: args.source,
                broadcaster: EventBroadcasterOptions {
                    full_channel_behavior: match args.full_channel_behavior {
                        Behavior::Wait => FullChannelBehavior::WaitIfChannelFull,
                        Behavior::Drop => FullChannelBehavior::DropIfChannelFull,
                    },
                    correlation_clock: match args.clock {
                        ClockArg::Event => CorrelationClock::EventTime,
                        ClockArg::Processing => CorrelationClock::Processing,
                    },
                    ..EventBroadcasterOptions::default()
                },
                base,
                config: args.config,
                registry: Arc::new(registry),
                watch: !args.no_watch,
                kube: KubeOptions {
                    kubeconfig: args.kube.kubeconfig,
                    context: args.kube.context,
                    server: args.kube.kube_server,
                },
                kube_watch: WatchOptions {
                    field_selector: args.kube.field_selector,
                    label_selector: args.kube.label_selector,
                    api: match args.kube.events_api {
                        EventsApiArg::Core => EventsApi::CoreV1,
                        EventsApiArg::EventsK8sIo => EventsApi::EventsV1,
                    },
                    replay_existing: args.kube.replay_existing,
                    ..WatchOptions::default()
                },
                shutdown_timeout: std::time::Duration::from_secs(args.shutdown_timeout),
                shutdown: tokio_util::sync::CancellationToken::new(),
                metrics: args.metrics,
                follow: args.follow,
                workers: match args.workers {
                    0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
                    n => n,
                },
                partition_key: args.partition_key,
                max_in_flight: args.max_in_flight,
                watchers: args.watcher,
                delivery: match (args.delivery, args.full_channel_behavior) {
                    (Some(DeliveryArg::AtLeastOnce), _) => {
                        Delivery::AtLeastOnce { state_file: args.state_file.expect("required by clap") }
                    }
                    (Some(DeliveryArg::AtMostOnce), _) | (None, Behavior::Drop) => Delivery::AtMostOnce,
                    (Some(DeliveryArg::Wait), _) | (None, Behavior::Wait) => Delivery::Wait,
                },
            };
            let runtime = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
            let summary = runtime.block_on(run(options));
            // A watcher plugin cut off at shutdown may still be inside a call: do not wait for it.
            runtime.shutdown_background();
            let summary = summary?;
            if args.summary_json {
                eprintln!("{}", serde_json::to_string(&summary)?);
            } else {
                eprintln!("eventpipe run: {summary}");
            }
            Ok(if summary.plugin_failed { ExitCode::from(3) } else { ExitCode::SUCCESS })
        }
        Command::Test(args) => test(args),
        Command::NewPlugin(args) => {
            let lang = match args.lang {
                Lang::Rust => scaffold::Lang::Rust,
                Lang::Python => scaffold::Lang::Python,
                Lang::Js => scaffold::Lang::Js,
                Lang::C => scaffold::Lang::C,
            };
            let kind = match args.kind {
                KindArg::Filter => PluginKind::Filter,
                KindArg::AggregateKey => PluginKind::AggregateKey,
                KindArg::MessageCombiner => PluginKind::MessageCombiner,
                KindArg::SpamKey => PluginKind::SpamKey,
                KindArg::Sink => PluginKind::Sink,
                KindArg::Watcher => PluginKind::Watcher,
            };
            let dir = args.dir.unwrap_or_else(|| PathBuf::from(&args.name));
            let sdk = args.sdk.or_else(scaffold::built_in_sdk);
            let files = scaffold::scaffold(&scaffold::Scaffold { lang, kind, name: args.name, dir: dir.clone(), sdk })?;
            for f in &files {
                println!("created {}", f.display());
            }
            println!("see {} for how to build it", dir.join("README.md").display());
            Ok(ExitCode::SUCCESS)
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
