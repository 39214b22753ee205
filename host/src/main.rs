//! The `eventpipe` command line. This file only parses the flags and hands each subcommand to
//! its module under `cli/`; everything those call is the `eventpipe` library (its crate docs say
//! where to start).

mod cli;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use eventpipe::logging::{LogFormat, try_init_logging};

/// The Kubernetes event pipeline (client-go's EventRecorder → Broadcaster → EventCorrelator →
/// EventSink) as a fast, pluggable host.
#[derive(Parser, Debug)]
#[command(name = "eventpipe", version = env!("EVENTPIPE_VERSION"), about)]
struct Cli {
    /// Log lines on stderr: `pretty` (human) or `json` (one object per line).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Pretty)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Replay a recorded stream through one EventCorrelator, one result line per input line
    /// (`{"clock","event"}` lines in, `{"skip","event","patch"}` lines out).
    Replay(cli::replay::ReplayArgs),
    /// Read events from a source, run them Broadcaster → tenant stage (filters, EventCorrelator)
    /// → sinks, print a summary.
    Run(Box<cli::run::RunArgs>),
    /// Work with plugin components.
    #[command(subcommand)]
    Plugins(cli::plugins::PluginsCommand),
    /// Run a plugin (or a tenant config's plugins) over JSON lines with the replay clock and
    /// compare the output with a golden file; exit 1 on a difference.
    Test(cli::test::TestArgs),
    /// Create a plugin project (directory NAME) that builds with the commands in its README.
    NewPlugin(cli::new_plugin::NewPluginArgs),
    /// Check a config, its plugins, sinks and source without running; list every problem and
    /// exit 1, or exit 0.
    Validate(cli::validate::ValidateArgs),
    /// Time the tenant stage and each plugin on a stream of your own: ns/event, events/s, fuel
    /// and memo hits per plugin, min/median/max over passes.
    Bench(cli::bench::BenchArgs),
    /// About the tenant config file (its JSON Schema).
    #[command(subcommand)]
    Config(cli::config::ConfigCommand),
    /// A live view of a running instance (`eventpipe run --metrics ADDR`) from its `/metrics`:
    /// events/s per source and tenant, sink writes, plugins, queues, drops; `q` quits.
    Top(cli::top::TopArgs),
    /// Print a shell completion script (e.g. `eventpipe completions bash > /etc/bash_completion.d/eventpipe`).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// jemalloc: events are allocated on one thread and freed on another (decoding, correlating,
/// writing), where glibc's malloc spends more time than the pipeline itself.
#[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = try_init_logging(cli.log_format) {
        eprintln!("eventpipe: {e}");
        return ExitCode::FAILURE;
    }
    let result = match cli.command {
        Command::Replay(args) => cli::replay::execute(args),
        Command::Run(args) => cli::run::execute(*args),
        Command::Plugins(command) => cli::plugins::execute(command),
        Command::Test(args) => cli::test::execute(args),
        Command::NewPlugin(args) => cli::new_plugin::execute(args),
        Command::Validate(args) => cli::validate::execute(args),
        Command::Config(command) => cli::config::execute(command),
        Command::Bench(args) => cli::bench::execute(args),
        Command::Top(args) => cli::top::execute(args),
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "eventpipe", &mut script);
            cli::print_to_stdout(script.trim_ascii_end())
        }
    };
    result.unwrap_or_else(|e| {
        // A reader that closed its end early (`eventpipe replay … | head`) ends the command
        // quietly with 0, as other Unix tools' output to a pipe ends.
        if closed_stdout(&e) {
            return ExitCode::SUCCESS;
        }
        eprintln!("eventpipe: {}", error_chain(&e));
        ExitCode::FAILURE
    })
}

/// Whether `error` is a write to a pipe whose reader has gone (`EPIPE`; Rust ignores `SIGPIPE`).
fn closed_stdout(error: &anyhow::Error) -> bool {
    error
        .chain()
        .any(|cause| cause.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe))
}

/// The error and its causes, `: `-separated, leaving out a cause whose text the message already
/// holds (many errors name their cause in their own message).
fn error_chain(error: &anyhow::Error) -> String {
    let mut out = error.to_string();
    for cause in error.chain().skip(1) {
        let cause = cause.to_string();
        if !out.contains(&cause) {
            out.push_str(": ");
            out.push_str(&cause);
        }
    }
    out
}
