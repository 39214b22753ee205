//! `eventpipe replay`: stdin → one tenant stage → stdout, one result line per input line.

use std::io::{BufReader, BufWriter};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use eventpipe::plan::PlannedTenant;
use eventpipe::replay::{ReplayOptions, replay};
use eventpipe::tenant::DEFAULT_TENANT;

use super::{CorrelatorArgs, PluginArgs, RuntimeArgs};

/// Exit status when input lines could not be replayed (each got an `error` line).
const BAD_INPUT: u8 = 2;

/// `eventpipe replay` flags.
#[derive(Args, Debug)]
pub struct ReplayArgs {
    #[command(flatten, next_help_heading = "Correlator")]
    correlator: CorrelatorArgs,
    /// Do not call UpdateState after a result (a sink that never succeeds).
    #[arg(long, help_heading = "Correlator")]
    no_update_state: bool,
    #[command(flatten, next_help_heading = "Plugins")]
    limits: PluginArgs,
    #[command(flatten, next_help_heading = "Plugins")]
    runtime: RuntimeArgs,
}

/// Replays stdin to stdout: exit 3 when a plugin failed under `--plugin-fallback fail`, 2 when
/// input lines were bad (they are reported and replayed around), else 0.
pub fn execute(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let registry = args.runtime.registry(args.limits.settings())?;
    let rules = args.correlator.rules(&args.limits).rules(&registry)?;
    let tenant = PlannedTenant::without_sinks(DEFAULT_TENANT, rules, &registry)?;
    let (_, correlator) = tenant.instantiate();
    let options = ReplayOptions { correlator, no_update_state: args.no_update_state };
    let stdin = BufReader::with_capacity(1 << 16, std::io::stdin().lock());
    let stdout = BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let summary = replay(stdin, stdout, options).context("replay")?;
    Ok(if tenant.failed() {
        ExitCode::from(super::PLUGIN_FAILED)
    } else if summary.errors > 0 {
        ExitCode::from(BAD_INPUT)
    } else {
        ExitCode::SUCCESS
    })
}
