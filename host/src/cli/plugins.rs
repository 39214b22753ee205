//! `eventpipe plugins …`: tools for plugin components.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use eventpipe::plugin::check::check;

use super::{PluginArgs, RuntimeArgs};

/// `eventpipe plugins` subcommands.
#[derive(Subcommand, Debug)]
pub enum PluginsCommand {
    /// Load a component, tell its kind, run it on a sample event, print fuel used and peak
    /// memory; exit 1 with the reason when it is not a working plugin.
    Check {
        /// The component file.
        file: PathBuf,
        #[command(flatten)]
        limits: PluginArgs,
        #[command(flatten)]
        runtime: RuntimeArgs,
    },
}

/// Runs `command`.
pub fn execute(command: PluginsCommand) -> anyhow::Result<ExitCode> {
    match command {
        PluginsCommand::Check { file, limits, runtime } => {
            let runtime = runtime.runtime()?;
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
