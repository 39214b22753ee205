//! `eventpipe new-plugin`: a plugin project that builds with the commands in its README.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use eventpipe::commands::scaffold::{self, Lang, Scaffold};
use eventpipe::plugin::PluginKind;

/// `eventpipe new-plugin` flags.
#[derive(Args, Debug)]
pub struct NewPluginArgs {
    /// The language.
    #[arg(long, value_enum)]
    lang: Lang,
    /// The plugin kind (WIT world).
    #[arg(long, value_enum)]
    kind: PluginKind,
    /// The plugin's name; also the directory created.
    name: String,
    /// Create the project in this directory instead of `./NAME`.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// Creates the project and lists its files.
pub fn execute(args: NewPluginArgs) -> anyhow::Result<ExitCode> {
    let dir = args.dir.unwrap_or_else(|| PathBuf::from(&args.name));
    let files = scaffold::scaffold(&Scaffold { lang: args.lang, kind: args.kind, name: args.name, dir: dir.clone() })?;
    for f in &files {
        println!("created {}", f.display());
    }
    println!("see {} for how to build it", dir.join("README.md").display());
    Ok(ExitCode::SUCCESS)
}
