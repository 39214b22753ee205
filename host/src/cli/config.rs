//! `eventpipe config …`: about the tenant config file.

use std::process::ExitCode;

use clap::Subcommand;

/// `eventpipe config` subcommands.
#[derive(Subcommand, Debug)]
pub enum ConfigCommand {
    /// Print the JSON Schema of the tenant config file (for editors: e.g. taplo's
    /// `#:schema ./eventpipe.schema.json` line at the top of the TOML).
    Schema,
}

/// Runs `command`.
pub fn execute(command: ConfigCommand) -> anyhow::Result<ExitCode> {
    match command {
        ConfigCommand::Schema => {
            let text = serde_json::to_string_pretty(&eventpipe::config::json_schema())?;
            super::print_to_stdout(text.as_bytes())
        }
    }
}
