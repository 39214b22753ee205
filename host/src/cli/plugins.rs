//! `eventpipe plugins …`: tools for plugin components.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

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
    /// Build the plugin project in DIR (as `eventpipe new-plugin` makes them) into a component,
    /// with the language's own toolchain and nothing else: Rust (`Cargo.toml`: cargo, target
    /// wasm32-wasip2), Go (`go.mod`: Go 1.24 or newer), C (`build.sh`: clang and wasi-libc),
    /// Python (`app.py`: componentize-py, from the project's `.venv` or PATH), JavaScript
    /// (`package.json`: npm runs componentize-js, installed first if need be). The C bindings and
    /// `component new` steps run inside eventpipe. Each toolchain is checked first, with a
    /// one-line fix when it is missing or too old.
    Build {
        /// The project directory.
        #[arg(default_value = ".")]
        dir: PathBuf,
        /// Where to write the component [default: DIR/NAME.wasm].
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// The C bindings of a world (`W.h`, `W.c`, `W_component_type.o`), as `wit-bindgen c`; a
    /// step of `build.sh`.
    #[command(hide = true)]
    CBindings {
        /// The WIT directory.
        #[arg(long)]
        wit: PathBuf,
        /// The world.
        #[arg(long)]
        world: String,
        /// Where to write the files.
        #[arg(long)]
        out_dir: PathBuf,
    },
    /// A core module made a component, as `wasm-tools component new`; a step of `build.sh`.
    #[command(hide = true)]
    Component {
        /// The core module.
        core: PathBuf,
        /// The component to write.
        #[arg(short, long)]
        output: PathBuf,
        /// Embed this WIT directory's world first (needs `--world`).
        #[arg(long, requires = "world")]
        wit: Option<PathBuf>,
        /// The world to embed.
        #[arg(long, requires = "wit")]
        world: Option<String>,
        /// Replace WASI preview 1 imports by deterministic stubs.
        #[arg(long)]
        stub_wasi: bool,
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
        PluginsCommand::Build { dir, output } => match build(&dir, output.as_deref()) {
            Ok(file) => {
                println!("built {}", file.display());
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                eprintln!("eventpipe plugins build: {e}");
                Ok(ExitCode::FAILURE)
            }
        },
        PluginsCommand::CBindings { wit, world, out_dir } => {
            for file in eventpipe_plugin_build::c_bindings(&wit, &world, &out_dir)? {
                println!("{}", file.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        PluginsCommand::Component { core, output, wit, world, stub_wasi } => {
            let embed = wit.as_deref().zip(world.as_deref());
            let options = eventpipe_plugin_build::ComponentOptions { stub_wasi };
            eventpipe_plugin_build::componentize_file_with(&core, &output, embed, options)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Builds the project in `dir`; returns the component file written.
///
/// # Errors
/// One line: a missing or too old toolchain with its fix, or the failed step.
fn build(dir: &Path, output: Option<&Path>) -> anyhow::Result<PathBuf> {
    if dir.join("Cargo.toml").is_file() {
        build_rust(dir, output)
    } else if dir.join("go.mod").is_file() {
        let go = std::env::var("GO").unwrap_or_else(|_| "go".into());
        check_go(&go)?;
        build_sh(dir, output)
    } else if dir.join("package.json").is_file() {
        build_js(dir, output)
    } else if dir.join("app.py").is_file() && dir.join("build.sh").is_file() {
        check_componentize_py(dir)?;
        build_sh(dir, output)
    } else if dir.join("build.sh").is_file() {
        if !Command::new(std::env::var("CC").unwrap_or_else(|_| "clang".into()))
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            anyhow::bail!(
                "clang is needed to build a C plugin (with wasi-libc): install clang and wasi-libc (Debian: apt install clang lld wasi-libc)"
            );
        }
        build_sh(dir, output)
    } else {
        anyhow::bail!(
            "{}: not a plugin project (no Cargo.toml, go.mod, package.json or build.sh; `eventpipe new-plugin` makes one)",
            dir.display()
        )
    }
}

/// Whether `program --version` runs.
fn runs(program: impl AsRef<std::ffi::OsStr>) -> bool {
    Command::new(program).arg("--version").output().is_ok_and(|o| o.status.success())
}

/// Checks that componentize-py runs: `$COMPONENTIZE_PY`, the project's `.venv`, or on PATH (what
/// the project's `build.sh` runs).
fn check_componentize_py(dir: &Path) -> anyhow::Result<()> {
    let program = std::env::var_os("COMPONENTIZE_PY")
        .map(PathBuf::from)
        .or_else(|| Some(dir.join(".venv/bin/componentize-py")).filter(|p| p.is_file()))
        .unwrap_or_else(|| PathBuf::from("componentize-py"));
    if runs(&program) {
        return Ok(());
    }
    anyhow::bail!(
        "componentize-py is needed to build a Python plugin: python3 -m venv .venv && .venv/bin/pip install componentize-py==0.25.1 (in {})",
        dir.display()
    )
}

/// `npm run build` (componentize-js, as the project's `package.json` says), after `npm install`
/// when its tools are not installed yet; the component is `NAME.wasm`, NAME the package's.
fn build_js(dir: &Path, output: Option<&Path>) -> anyhow::Result<PathBuf> {
    let npm = std::env::var("NPM").unwrap_or_else(|_| "npm".into());
    if !runs(&npm) {
        anyhow::bail!(
            "Node.js 20 or newer and npm are needed to build a JavaScript plugin: install them from https://nodejs.org (Debian: apt install nodejs npm)"
        );
    }
    let npm_step = |args: &[&str]| -> anyhow::Result<()> {
        let status = Command::new(&npm)
            .current_dir(dir)
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::inherit())
            .status()?;
        anyhow::ensure!(status.success(), "npm {} failed ({status})", args.join(" "));
        Ok(())
    };
    if !dir.join("node_modules/.bin/componentize-js").exists() {
        npm_step(&["install", "--no-audit", "--no-fund"])?;
    }
    npm_step(&["run", "build"])?;
    let package: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("package.json"))?)?;
    let name = package["name"].as_str().context("package.json has no name")?;
    let built = dir.join(format!("{name}.wasm"));
    anyhow::ensure!(built.is_file(), "npm run build wrote no {}", built.display());
    match output {
        Some(target) => {
            std::fs::rename(&built, target).or_else(|_| std::fs::copy(&built, target).map(|_| ()))?;
            Ok(target.to_path_buf())
        }
        None => Ok(built),
    }
}

/// `cargo build --release --target wasm32-wasip2`, the component copied to `output` (default
/// `DIR/NAME.wasm`, NAME the crate's name with dashes).
fn build_rust(dir: &Path, output: Option<&Path>) -> anyhow::Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    if Command::new(&cargo).arg("--version").output().is_err() {
        anyhow::bail!("cargo is needed to build a Rust plugin: install Rust from https://rustup.rs");
    }
    if let Ok(out) = Command::new("rustup").args(["target", "list", "--installed"]).output()
        && out.status.success()
        && !String::from_utf8_lossy(&out.stdout).lines().any(|l| l.trim() == "wasm32-wasip2")
    {
        anyhow::bail!("the wasm32-wasip2 target is needed: rustup target add wasm32-wasip2");
    }
    let out = Command::new(&cargo)
        .current_dir(dir)
        .args(["build", "--release", "--target", "wasm32-wasip2", "--message-format=json-render-diagnostics"])
        .stderr(std::process::Stdio::inherit())
        .output()?;
    if !out.status.success() {
        anyhow::bail!("cargo build failed ({})", out.status);
    }
    // The last `.wasm` artifact cargo reports is the plugin (a workspace member builds alone).
    let built = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact")
        .flat_map(|m| m["filenames"].as_array().cloned().unwrap_or_default())
        .filter_map(|f| f.as_str().map(PathBuf::from))
        .rfind(|f| f.extension().is_some_and(|x| x == "wasm"))
        .ok_or_else(|| anyhow::anyhow!("cargo built no .wasm: is the crate a cdylib?"))?;
    let name = built.file_stem().and_then(|s| s.to_str()).unwrap_or("plugin").replace('_', "-");
    let target = output.map_or_else(|| dir.join(format!("{name}.wasm")), Path::to_path_buf);
    std::fs::copy(&built, &target)?;
    Ok(target)
}

/// Checks that `go` is Go 1.24 or newer (`//go:wasmexport` and `-buildmode=c-shared` on
/// wasip1).
fn check_go(go: &str) -> anyhow::Result<()> {
    let out = Command::new(go).arg("version").output().map_err(|_| {
        anyhow::anyhow!(
            "Go 1.24 or newer is needed to build a Go plugin: install it from https://go.dev/dl (or set GO)"
        )
    })?;
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text.split_whitespace().find(|w| w.starts_with("go1")).unwrap_or_default();
    let minor: u32 =
        version.trim_start_matches("go1.").split(['.', 'r', 'b']).next().and_then(|m| m.parse().ok()).unwrap_or(0);
    if minor < 24 {
        anyhow::bail!(
            "Go 1.24 or newer is needed for //go:wasmexport; found {}: install a newer Go from https://go.dev/dl (or set GO)",
            if version.is_empty() { "an unknown version" } else { version }
        );
    }
    Ok(())
}

/// Runs the project's `build.sh` with its build steps done by this eventpipe, then moves the
/// component it printed (`built NAME.wasm`) to `output` when given.
fn build_sh(dir: &Path, output: Option<&Path>) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let out = Command::new("sh")
        .current_dir(dir)
        .arg("build.sh")
        .env("PLUGIN_BUILD", format!("{} plugins", exe.display()))
        .stderr(std::process::Stdio::inherit())
        .output()?;
    if !out.status.success() {
        anyhow::bail!("build.sh failed ({})", out.status);
    }
    let said = String::from_utf8_lossy(&out.stdout);
    let file = said
        .lines()
        .filter_map(|l| l.strip_prefix("built "))
        .next_back()
        .map(|f| dir.join(f.trim()))
        .ok_or_else(|| anyhow::anyhow!("build.sh did not say what it built"))?;
    match output {
        Some(target) => {
            std::fs::rename(&file, target).or_else(|_| std::fs::copy(&file, target).map(|_| ()))?;
            Ok(target.to_path_buf())
        }
        None => Ok(file),
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
