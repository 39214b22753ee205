//! `eventpipe bench`: the tenant stage and each plugin timed on the user's own stream.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use eventpipe::commands::bench::{bench, decode_input};
use eventpipe::config::Config;
use eventpipe::pipeline::plan::TenantPlan;

use super::{CorrelatorArgs, FilterArgs, PluginArgs, RuntimeArgs};

/// `eventpipe bench` flags.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// The stream: JSON lines, watch envelopes, lists or replay lines (`{"clock","event"}`);
    /// gzip-compressed when the name ends in `.gz`. Decoded whole before timing.
    #[arg(long, value_name = "FILE")]
    input: PathBuf,
    /// A tenant config (its tenants, rules and plugins are benchmarked; sinks are not opened).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The plugins directory [default: ./plugins when it exists].
    #[arg(long, value_name = "DIR")]
    plugins: Option<PathBuf>,
    /// Passes over the whole input (fresh state and plugin instances each); min, median and
    /// max are reported.
    #[arg(long, value_name = "N", default_value_t = 5)]
    reps: usize,
    /// Print the report as one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten, next_help_heading = "Plugins")]
    filters: FilterArgs,
    #[command(flatten, next_help_heading = "Correlator")]
    correlator: CorrelatorArgs,
    #[command(flatten, next_help_heading = "Plugins")]
    limits: PluginArgs,
    #[command(flatten, next_help_heading = "Plugins")]
    runtime: RuntimeArgs,
}

/// Prints the report (table or JSON).
pub fn execute(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let registry = super::registry_with_dir(&args.runtime, &args.limits, args.plugins.as_deref(), "eventpipe bench")?;
    let base = args.filters.apply(args.correlator.rules(&args.limits)).rules(&registry)?;
    let config = args.config.as_deref().map(Config::load).transpose()?;
    let plan = Arc::new(TenantPlan::build_unopened(&base, config.as_ref(), &registry)?);
    let file = std::fs::File::open(&args.input).with_context(|| format!("{}", args.input.display()))?;
    let mut text = Vec::new();
    if args.input.extension().is_some_and(|e| e == "gz") {
        flate2::read::MultiGzDecoder::new(file).read_to_end(&mut text)
    } else {
        std::io::BufReader::new(file).read_to_end(&mut text)
    }
    .with_context(|| format!("reading {}", args.input.display()))?;
    let (occurrences, skipped) = decode_input(&text);
    drop(text);
    let report = bench(&plan, &occurrences, skipped, args.reps);
    let out = if args.json { serde_json::to_string(&report)? } else { report.to_string() };
    super::print_to_stdout(out.trim_end().as_bytes())
}
