//! `eventpipe plugins …`: tools for plugin components.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;
use eventpipe::oci::{OciOptions, OciReference};
use eventpipe::plugin::check::check;
use eventpipe::plugin::pin::digests_of_dir;

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
    /// Pin the plugins of the plugins directory: write `digest = "sha256:…"` (the SHA-256 of
    /// each NAME.wasm) into the `[plugins.NAME]` tables of the config, as a lock file records
    /// what was resolved; the rest of the file stays as it was. `run` then refuses any other
    /// version of them.
    Lock {
        /// The plugins directory [default: ./plugins].
        #[arg(long, value_name = "DIR")]
        plugins: Option<PathBuf>,
        /// The config file to write the pins into (created when missing).
        #[arg(long, value_name = "FILE", default_value = "eventpipe.toml")]
        config: PathBuf,
    },
    /// Push a plugin component to an OCI registry as a Wasm OCI artifact (the layout of
    /// wasm-pkg-tools and Spin); print the reference pinned to the manifest's digest.
    /// Credentials from the docker config.json; HTTPS unless the registry is on loopback or
    /// `--insecure`.
    Push {
        /// The component file.
        file: PathBuf,
        /// Where to: `oci://HOST[:PORT]/REPO:TAG`.
        reference: OciReference,
        /// Plain HTTP to any registry (not only loopback ones).
        #[arg(long)]
        insecure: bool,
        #[command(flatten)]
        runtime: RuntimeArgs,
    },
    /// Pull a plugin component from an OCI registry into the plugins directory as NAME.wasm
    /// (written beside and renamed in, so a running `run` swaps it in whole); verified against
    /// the reference's digest when it has one.
    Pull {
        /// `oci://HOST[:PORT]/REPO:TAG[@sha256:HEX]`.
        reference: OciReference,
        /// The plugins directory.
        #[arg(long, value_name = "DIR")]
        plugins: PathBuf,
        /// The plugin name [default: the repository's last segment].
        #[arg(long)]
        name: Option<String>,
        /// Plain HTTP to any registry (not only loopback ones).
        #[arg(long)]
        insecure: bool,
    },
}

/// Runs `command`.
pub fn execute(command: PluginsCommand) -> anyhow::Result<ExitCode> {
    match command {
        PluginsCommand::Lock { plugins, config } => lock(plugins.as_deref(), &config),
        PluginsCommand::Push { file, reference, insecure, runtime } => {
            let bytes = std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
            let (imports, exports) = runtime.runtime()?.component_names(reference.name(), &bytes)?;
            let options = OciOptions { insecure, ..OciOptions::default() };
            let pushed =
                tokio_runtime()?.block_on(eventpipe::oci::push(&reference, &bytes, imports, exports, &options))?;
            println!("{pushed}");
            Ok(ExitCode::SUCCESS)
        }
        PluginsCommand::Pull { reference, plugins, name, insecure } => {
            let options = OciOptions { insecure, ..OciOptions::default() };
            let pulled = tokio_runtime()?.block_on(eventpipe::oci::pull(&reference, &options))?;
            let name = name.unwrap_or_else(|| reference.name().to_string());
            let target = plugins.join(format!("{name}.wasm"));
            if eventpipe::plugin::registry::plugin_name(&target).as_deref() != Some(name.as_str()) {
                anyhow::bail!("`{name}` is not a plugin name");
            }
            eventpipe::oci::write_atomically(&target, &pulled.bytes)?;
            println!("{}: {} ({}, {} bytes)", target.display(), pulled.reference, pulled.layer, pulled.bytes.len());
            Ok(ExitCode::SUCCESS)
        }
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

/// `plugins lock`: the pins of `dir`'s plugins written into `config` (replaced by a rename, so
/// a running `run` never reads half a file).
fn lock(dir: Option<&Path>, config: &Path) -> anyhow::Result<ExitCode> {
    let dir = super::plugins_dir(dir).context("no plugins directory (give --plugins DIR)")?;
    let pins = digests_of_dir(&dir).with_context(|| format!("plugins directory {}", dir.display()))?;
    let text = match std::fs::read_to_string(config) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", config.display())),
    };
    let before = eventpipe::Config::parse(&text, config)?.pins;
    let written = eventpipe::config::with_pins_written(&text, config, &pins)?;
    eventpipe::oci::write_atomically(config, written.as_bytes())?;
    for (name, digest) in &pins {
        let what = match before.get(name) {
            None => "pinned",
            Some(old) if old == digest => "unchanged",
            Some(_) => "re-pinned",
        };
        println!("{name}: {digest} ({what})");
    }
    println!("eventpipe plugins lock: {} plugin(s) pinned in {}", pins.len(), config.display());
    Ok(ExitCode::SUCCESS)
}

/// A runtime for one registry exchange.
fn tokio_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting the tokio runtime")
}
