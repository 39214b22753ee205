//! `eventpipe config …`: about the tenant config file.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use eventpipe::config::Config;
use eventpipe::pipeline::plan::{Setting, TenantPlan};
use eventpipe::sink::SinkEntry;

use super::{CorrelatorArgs, FilterArgs, OciArgs, PinArgs, PluginArgs, RuntimeArgs};

/// `eventpipe config` subcommands.
#[derive(Subcommand, Debug)]
pub enum ConfigCommand {
    /// Print the JSON Schema of the tenant config file (for editors: e.g. taplo's
    /// `#:schema ./eventpipe.schema.json` line at the top of the TOML).
    Schema,
    /// Print the effective plan of `eventpipe run` with these flags: per tenant, its routing
    /// (`match`, `drop`, `keep`, `spam_exempt`), rules, plugins (with SHA-256 digests), filters
    /// and sinks, each with where it came from (a flag,
    /// `FILE:LINE` of the config, the plugins directory, or the default). The command line
    /// wins over the config file, which wins over the built-in defaults.
    Show(Box<ShowArgs>),
}

/// `eventpipe config show` flags: those of `eventpipe run` that make the plan.
#[derive(Args, Debug)]
pub struct ShowArgs {
    /// The tenant config (TOML).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The plugins directory [default: ./plugins when it exists].
    #[arg(long, value_name = "DIR")]
    plugins: Option<PathBuf>,
    /// A sink, as `run --sink` takes it. Repeatable.
    #[arg(long)]
    sink: Vec<SinkEntry>,
    #[command(flatten)]
    filters: FilterArgs,
    #[command(flatten)]
    correlator: CorrelatorArgs,
    #[command(flatten)]
    limits: PluginArgs,
    #[command(flatten)]
    runtime: RuntimeArgs,
    #[command(flatten)]
    pins: PinArgs,
    #[command(flatten)]
    oci: OciArgs,
    /// `text` (aligned, for people) or `json`.
    #[arg(long, value_enum, default_value_t = Output::Text)]
    output: Output,
}

/// How `config show` prints.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Output {
    Text,
    Json,
}

/// Runs `command`.
pub fn execute(command: ConfigCommand) -> anyhow::Result<ExitCode> {
    match command {
        ConfigCommand::Schema => {
            let text = serde_json::to_string_pretty(&eventpipe::config::json_schema())?;
            super::print_to_stdout(text.as_bytes())
        }
        ConfigCommand::Show(args) => show(*args),
    }
}

fn show(args: ShowArgs) -> anyhow::Result<ExitCode> {
    // The registry `run` would load: plugins pulled from OCI registries by the config's `source`
    // included (else a name they share with an embedded plugin shows the embedded one).
    let registry = super::run_registry(
        &args.runtime,
        &args.limits,
        args.plugins.as_deref(),
        (&args.pins, &args.oci),
        args.config.as_deref(),
        "eventpipe config show",
    )?;
    let mut base = args.filters.apply(args.correlator.rules(&args.limits)).rules(&registry)?;
    base.sinks = args.sink;
    let config = args.config.as_deref().map(Config::load).transpose()?;
    let plan = TenantPlan::build_unopened(&base, config.as_ref(), &registry)?;
    let tenants = plan.effective(&registry);
    let text = match args.output {
        Output::Json => serde_json::to_string_pretty(&tenants)?,
        Output::Text => {
            let mut out = String::new();
            for t in &tenants {
                out += &format!("tenant {}\n", t.tenant);
                let sections = [
                    ("routing", &t.routing),
                    ("rules", &t.rules),
                    ("plugins", &t.plugins),
                    ("filters", &t.filters),
                    ("sinks", &t.sinks),
                ];
                for (title, settings) in sections {
                    out += &format!("  {title}:{}\n", if settings.is_empty() { " none" } else { "" });
                    for s in settings {
                        out += &line(s);
                    }
                }
            }
            out.trim_end().to_string()
        }
    };
    super::print_to_stdout(text.as_bytes())
}

/// `    KEY = VALUE    # ORIGIN`, with a plugin's component and digest.
fn line(s: &Setting) -> String {
    let component = match (&s.component, &s.sha256) {
        (Some(c), Some(d)) => format!(" ({c}, sha256:{d})"),
        _ => String::new(),
    };
    format!("    {:<22} {:<28} # {}{component}\n", s.key, s.value, s.origin)
}
