//! `eventpipe-plugin-build`: the C plugin build steps without wit-bindgen-cli or wasm-tools.
//!
//! ```sh
//! eventpipe-plugin-build c-bindings --wit wit --world filter --out-dir gen
//! clang --target=wasm32-wasi -mexec-model=reactor -O2 -Igen -o filter.core.wasm \
//!       filter_impl.c gen/filter.c gen/filter_component_type.o
//! eventpipe-plugin-build component filter.core.wasm -o filter.wasm
//!
//! # Go (GOOS=wasip1): no bindings step; embed the world and stub WASI preview 1
//! GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o filter.core.wasm .
//! eventpipe-plugin-build component filter.core.wasm --wit wit --world filter --stub-wasi -o filter.wasm
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Build steps for eventpipe plugins written in C (or any language that makes a core module).
#[derive(Parser, Debug)]
#[command(name = "eventpipe-plugin-build", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Write the C bindings of a world (`W.h`, `W.c`, `W_component_type.o`), like
    /// `wit-bindgen c --world W --out-dir DIR WIT`.
    CBindings {
        /// The WIT directory (the repository's `wit/`).
        #[arg(long)]
        wit: PathBuf,
        /// The world: filter, aggregate-key, message-combiner, spam-key, sink, watcher.
        #[arg(long)]
        world: String,
        /// Where to write the files.
        #[arg(long)]
        out_dir: PathBuf,
    },
    /// Turn a core module into a component, like `wasm-tools component new CORE -o OUT`.
    Component {
        /// The core module (e.g. from clang).
        core: PathBuf,
        /// The component to write.
        #[arg(short, long)]
        output: PathBuf,
        /// Embed this WIT directory's world first (when the module was linked without
        /// `W_component_type.o`); needs `--world`.
        #[arg(long, requires = "world")]
        wit: Option<PathBuf>,
        /// The world to embed (with `--wit`).
        #[arg(long, requires = "wit")]
        world: Option<String>,
        /// Replace the module's WASI preview 1 imports (`wasi_snapshot_preview1`, e.g. of a Go
        /// `GOOS=wasip1` module) by deterministic stubs inside it: no filesystem, network,
        /// environment or real clock; zero random bytes; stdout and stderr dropped;
        /// `proc_exit` traps.
        #[arg(long)]
        stub_wasi: bool,
    },
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::CBindings { wit, world, out_dir } => eventpipe_plugin_build::c_bindings(&wit, &world, &out_dir)
            .map(|files| files.iter().for_each(|f| println!("{}", f.display()))),
        Command::Component { core, output, wit, world, stub_wasi } => {
            let embed = wit.as_deref().zip(world.as_deref());
            let options = eventpipe_plugin_build::ComponentOptions { stub_wasi };
            eventpipe_plugin_build::componentize_file_with(&core, &output, embed, options)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("eventpipe-plugin-build: {e}");
            ExitCode::FAILURE
        }
    }
}
