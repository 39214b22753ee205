//! `eventpipe test`: a plugin (or a tenant config's plugins) over JSON lines, against a golden
//! file.

use std::io::BufReader;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use eventpipe::commands::golden::{Subject, compare, run_test, write_golden};

use super::{PluginArgs, RuntimeArgs};

/// `eventpipe test` flags.
#[derive(Args, Debug)]
pub struct TestArgs {
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
    #[command(flatten, next_help_heading = "Plugins")]
    limits: PluginArgs,
    #[command(flatten, next_help_heading = "Plugins")]
    runtime: RuntimeArgs,
}

fn parse_key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("expected KEY=VALUE, got {s:?}"))
}

/// Exit 0 when the output matches the golden file (or `--update` wrote it), 1 on a difference.
pub fn execute(args: TestArgs) -> anyhow::Result<ExitCode> {
    let mut settings = args.limits.settings();
    settings.config = args.plugin_config.into_iter().collect();
    let mut registry = args.runtime.registry(settings.clone())?;
    if let Some(dir) = &args.plugins {
        registry = super::with_plugins_dir(registry, dir, "eventpipe test")?;
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
