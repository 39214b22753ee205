//! `eventpipe validate`: check a config, its plugins, sinks and source without running.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use eventpipe::commands::validate::{ValidateOptions, validate};
use eventpipe::plugin::registry::ReloadOutcome;
use eventpipe::sink::SinkEntry;
use eventpipe::source::SourceSpec;
use eventpipe::watchers::WatcherSpec;

use super::{CorrelatorArgs, KubeConnectionArgs, OciArgs, PinArgs, PluginArgs, RuntimeArgs};

/// `eventpipe validate` flags: those of `run` that say what would run.
#[derive(Args, Debug)]
pub struct ValidateArgs {
    /// The tenant config (TOML).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The plugins directory [default: ./plugins when it exists]; every file in it is loaded and
    /// called once on a sample event.
    #[arg(long, value_name = "DIR")]
    plugins: Option<PathBuf>,
    /// A sink, as `run --sink` takes it. Repeatable.
    #[arg(long)]
    sink: Vec<SinkEntry>,
    /// The source, as `run --source` takes it (a file must be readable; HTTP ingest on a
    /// non-loopback address needs $EVENTPIPE_INGEST_TOKEN).
    #[arg(long)]
    source: Option<SourceSpec>,
    /// A watcher plugin, as `run --watcher` takes it. Repeatable.
    #[arg(long, value_name = "NAME|FILE.wasm[,KEY=VALUE…]")]
    watcher: Vec<WatcherSpec>,
    /// How problems are printed: `text` (one line each on stderr, `FILE:LINE:COLUMN: KEY:
    /// MESSAGE`) or `json` (for CI: one JSON array on stdout of `{"file", "line", "column",
    /// "key", "message"}`, `[]` when all is well). The exit status is 1 on any problem either way.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Also reach every server named, and say which failed: the Kubernetes API server
    /// (`GET /version`), NATS servers, webhook and OTLP hosts (each within 5 s). Without it, a
    /// Kubernetes config is only found and parsed.
    #[arg(long)]
    connect: bool,
    #[command(flatten, next_help_heading = "Kubernetes")]
    kube: KubeConnectionArgs,
    #[command(flatten, next_help_heading = "Correlator")]
    correlator: CorrelatorArgs,
    #[command(flatten, next_help_heading = "Plugins")]
    limits: PluginArgs,
    #[command(flatten, next_help_heading = "Plugins")]
    runtime: RuntimeArgs,
    #[command(flatten, next_help_heading = "Plugins")]
    pins: PinArgs,
    #[command(flatten, next_help_heading = "Plugins")]
    oci: OciArgs,
}

/// `validate --format`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    /// Lines for people.
    Text,
    /// A JSON array for programs.
    Json,
}

/// Lists every problem (on stderr, or as JSON on stdout) and exits 1, or says what was checked
/// and exits 0.
pub fn execute(args: ValidateArgs) -> anyhow::Result<ExitCode> {
    let plugins_dir = super::plugins_dir(args.plugins.as_deref());
    // A config that does not parse is listed below, with the other problems.
    let mut pins = args.pins.pins(args.config.as_deref()).unwrap_or_default();
    let mut pull_problems = Vec::new();
    let parsed = args.config.as_deref().filter(|c| eventpipe::Config::load(c).is_ok());
    let pulled = args.oci.pull(parsed, &mut pins).unwrap_or_else(|e| {
        pull_problems.push(format!("{e:#}"));
        Vec::new()
    });
    let mut registry = args.runtime.registry(args.limits.settings())?.with_pins(pins);
    for file in &pulled {
        if let outcome @ ReloadOutcome::Rejected { .. } = registry.reload_file(file) {
            pull_problems.push(outcome.to_string());
        }
    }
    let mut refused_plugins = Vec::new();
    if let Some(dir) = &plugins_dir {
        let (loaded, outcomes) =
            registry.with_dir(dir).with_context(|| format!("plugins directory {}", dir.display()))?;
        registry = loaded;
        refused_plugins =
            outcomes.iter().filter(|o| matches!(o, ReloadOutcome::Rejected { .. })).map(ToString::to_string).collect();
    }
    // A file refused for its pin is listed above already.
    refused_plugins.extend(pull_problems);
    if let Err(e) = registry.verify_pins()
        && !refused_plugins.iter().any(|r| r.starts_with(&format!("plugin `{}` ", e.name())))
    {
        refused_plugins.push(e.to_string());
    }
    let mut base = args.correlator.rules(&args.limits).rules(&registry)?;
    base.sinks = args.sink;
    let report = validate(&ValidateOptions {
        base: &base,
        config: args.config.as_deref(),
        registry: &registry,
        refused_plugins,
        watchers: &args.watcher,
        source: args.source.as_ref(),
        kube: &args.kube.options(),
        connect: args.connect,
    });
    if args.format == Format::Json {
        println!("{}", serde_json::to_string_pretty(&report.problems)?);
        return Ok(if report.ok() { ExitCode::SUCCESS } else { ExitCode::FAILURE });
    }
    if report.ok() {
        println!(
            "eventpipe validate: ok ({} tenant(s) and the defaults, {} route(s), {} sink(s), {} watcher plugin(s), {} plugin(s) loaded{})",
            report.tenants,
            report.routes,
            report.sinks,
            report.watchers,
            registry.live().len(),
            if args.connect { "; every server reached" } else { "" }
        );
        return Ok(ExitCode::SUCCESS);
    }
    for problem in &report.problems {
        eprintln!("eventpipe validate: {problem}");
    }
    eprintln!("eventpipe validate: {} problem(s)", report.problems.len());
    Ok(ExitCode::FAILURE)
}
