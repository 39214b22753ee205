//! The `eventpipe` command line: thin glue over the library.

use std::io::{BufReader, BufWriter};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use eventpipe::broadcaster::FullChannelBehavior;
use eventpipe::correlator::{CorrelatorOptions, SourceObjectType};
use eventpipe::event_broadcaster::{CorrelationClock, EventBroadcasterOptions};
use eventpipe::replay::{ReplayOptions, replay};
use eventpipe::run::{SinkSpec, SourceSpec, run};

/// The Kubernetes event pipeline (client-go's EventRecorder → Broadcaster → EventCorrelator →
/// EventSink) as a fast, pluggable host.
#[derive(Parser, Debug)]
#[command(name = "eventpipe", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Replay a recorded stream through one EventCorrelator, one result line per input line
    /// (`{"clock","event"}` lines in, `{"skip","event","patch"}` lines out).
    Replay(ReplayArgs),
    /// Read events from a source, run them Broadcaster → EventCorrelator → sink, print a summary.
    Run(RunArgs),
}

/// client-go `CorrelatorOptions` as flags; 0 means client-go's default.
#[derive(Args, Debug, Clone)]
struct CorrelatorArgs {
    /// Entries in each of the three LRU caches (default 4096).
    #[arg(long, default_value_t = 0)]
    lru_cache_size: usize,
    /// Spam filter bucket size per source+object, events (default 25).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    burst: i64,
    /// Spam filter refill rate, events per second (default 1/300).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    qps: f32,
    /// Distinct messages per reason within the interval before aggregating (default 10).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    max_events: i64,
    /// Aggregation window, seconds (default 600).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    max_interval_seconds: i64,
    /// Spam filter key: `source-object` (client-go v0.26, the default) or `source-object-type`
    /// (client-go ≥ 1.32: Normal and Warning events get separate buckets).
    #[arg(long, value_enum, default_value_t = SpamKeyArg::SourceObject)]
    spam_key: SpamKeyArg,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
enum SpamKeyArg {
    /// One bucket per source + involved object.
    SourceObject,
    /// One bucket per source + involved object + type.
    SourceObjectType,
}

impl CorrelatorArgs {
    fn options(&self) -> CorrelatorOptions {
        CorrelatorOptions {
            lru_cache_size: self.lru_cache_size,
            burst_size: self.burst,
            qps: self.qps,
            max_events: self.max_events,
            max_interval_in_seconds: self.max_interval_seconds,
            spam_key_func: match self.spam_key {
                SpamKeyArg::SourceObject => None,
                SpamKeyArg::SourceObjectType => Some(Arc::new(SourceObjectType)),
            },
            ..CorrelatorOptions::default()
        }
    }
}

#[derive(Args, Debug)]
struct ReplayArgs {
    #[command(flatten)]
    correlator: CorrelatorArgs,
    /// Do not call UpdateState after a result (a sink that never succeeds).
    #[arg(long)]
    no_update_state: bool,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
enum Behavior {
    /// WaitIfChannelFull: nothing is lost in process; a slow sink slows the source.
    Wait,
    /// DropIfChannelFull: never blocks; a full watcher queue drops (counted), as client-go.
    Drop,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
enum ClockArg {
    /// The event's own time (lastTimestamp, else eventTime…): deterministic for recorded streams.
    Event,
    /// The wall clock when the event is processed, as client-go.
    Processing,
}

#[derive(Args, Debug)]
struct RunArgs {
    /// `jsonl:PATH` or `jsonl:-` (stdin): JSON lines, watch envelopes, EventLists or
    /// `kubectl get events -w -o json` output.
    #[arg(long)]
    source: SourceSpec,
    /// `jsonl:PATH` or `jsonl:-` (stdout): one `{"verb","event","patch"}` line per sink call.
    #[arg(long)]
    sink: SinkSpec,
    /// What a full watcher queue does.
    #[arg(long, value_enum, default_value_t = Behavior::Wait)]
    full_channel_behavior: Behavior,
    /// Which clock the correlator reads.
    #[arg(long, value_enum, default_value_t = ClockArg::Event)]
    clock: ClockArg,
    /// Print the summary as one JSON object on stderr instead of a sentence.
    #[arg(long)]
    summary_json: bool,
    #[command(flatten)]
    correlator: CorrelatorArgs,
}

fn init_logging() {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn main() -> ExitCode {
    init_logging();
    match execute(Cli::parse().command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("eventpipe: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn execute(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Replay(args) => {
            let options = ReplayOptions {
                correlator: args.correlator.options(),
                no_update_state: args.no_update_state,
            };
            let stdin = BufReader::with_capacity(1 << 16, std::io::stdin().lock());
            let stdout = BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
            let summary = replay(stdin, stdout, options).context("replay")?;
            // Bad input lines are reported and replayed around; they make the exit status 2.
            Ok(if summary.errors > 0 {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Run(args) => {
            let options = EventBroadcasterOptions {
                full_channel_behavior: match args.full_channel_behavior {
                    Behavior::Wait => FullChannelBehavior::WaitIfChannelFull,
                    Behavior::Drop => FullChannelBehavior::DropIfChannelFull,
                },
                correlation_clock: match args.clock {
                    ClockArg::Event => CorrelationClock::EventTime,
                    ClockArg::Processing => CorrelationClock::Processing,
                },
                correlator: args.correlator.options(),
                ..EventBroadcasterOptions::default()
            };
            let runtime = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
            let summary = runtime.block_on(run(args.source, args.sink, options))?;
            if args.summary_json {
                eprintln!("{}", serde_json::to_string(&summary)?);
            } else {
                eprintln!("eventpipe run: {summary}");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
