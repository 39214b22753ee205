//! `eventpipe replay`: stdin → one tenant stage → stdout, one result line per input line.

use std::io::{BufReader, BufWriter, Read};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context;
use clap::Args;
use eventpipe::commands::replay::{ReplayOptions, replay};
use eventpipe::pipeline::plan::PlannedTenant;
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
    // Standard input redirected from a file: a progress bar on a terminal (bytes, lines/s).
    let counts = super::run::stdin_file_len().and_then(|len| {
        let counts = Arc::new(Counts::default());
        let c = counts.clone();
        let progress = super::run::Progress::start(len, "lines", move || {
            (c.bytes.load(Ordering::Relaxed), c.lines.load(Ordering::Relaxed))
        })?;
        Some((counts, progress))
    });
    let input = Counting { inner: std::io::stdin(), counts: counts.as_ref().map(|(c, _)| c.clone()) };
    let stdin = BufReader::with_capacity(1 << 16, input);
    let stdout = BufWriter::with_capacity(1 << 16, std::io::stdout());
    let summary = replay(stdin, stdout, options);
    if let Some((_, progress)) = counts {
        progress.finish();
    }
    let summary = summary.context("replay")?;
    Ok(if tenant.failed() {
        ExitCode::from(super::PLUGIN_FAILED)
    } else if summary.errors > 0 {
        ExitCode::from(BAD_INPUT)
    } else {
        ExitCode::SUCCESS
    })
}

/// Bytes and lines read, for the progress bar.
#[derive(Default)]
struct Counts {
    bytes: AtomicU64,
    lines: AtomicU64,
}

/// A reader that counts what passes through it (once per read of up to 64 KiB), when `counts`.
struct Counting<R> {
    inner: R,
    counts: Option<Arc<Counts>>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(counts) = &self.counts {
            counts.bytes.fetch_add(n as u64, Ordering::Relaxed);
            counts.lines.fetch_add(memchr::memchr_iter(b'\n', &buf[..n]).count() as u64, Ordering::Relaxed);
        }
        Ok(n)
    }
}
