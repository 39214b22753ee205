//! `eventpipe top`: a live terminal view of a running instance, from its `GET /metrics`
//! ([`eventpipe::commands::top`] parses, computes rates and renders; this module scrapes on a timer, reads
//! keys and owns the terminal).

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use eventpipe::commands::top::{Scrape, Scraper, View, metrics_url, render};
use eventpipe::source::http::TOKEN_ENV;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};

/// `eventpipe top` flags.
#[derive(Args, Debug)]
pub struct TopArgs {
    /// The instance to watch: `HOST:PORT` (what `eventpipe run --metrics ADDR` was given) or a
    /// URL (`http://HOST:PORT`, with `/metrics` added when it has no path).
    #[arg(value_name = "HOST:PORT|URL", conflicts_with = "metrics_url")]
    target: Option<String>,
    /// The instance's metrics endpoint (`eventpipe run --metrics ADDR` serves it). Sent with
    /// `Authorization: Bearer $EVENTPIPE_INGEST_TOKEN` when that variable is set.
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:9090/metrics")]
    metrics_url: String,
    /// Seconds between scrapes (rates are over this interval).
    #[arg(long, value_name = "SECONDS", default_value_t = 1.0)]
    interval: f64,
}

/// Scrapes once (an error ends here, before the terminal is touched), then shows the view until
/// `q`, Esc or Ctrl-C, and restores the terminal.
pub fn execute(args: TopArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.interval.is_finite() && args.interval >= 0.1,
        "top: --interval must be at least 0.1 seconds, not {}",
        args.interval
    );
    let interval = Duration::from_secs_f64(args.interval);
    let token = std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty());
    // A slow answer must not freeze the keys for long.
    let timeout = interval.clamp(Duration::from_secs(1), Duration::from_secs(5));
    let url = args.target.as_deref().map_or_else(|| args.metrics_url.clone(), metrics_url);
    let scraper = Scraper::new(&url, token, timeout).context("top")?;
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting the tokio runtime")?;
    let first = runtime.block_on(scraper.scrape()).context("top")?;
    anyhow::ensure!(std::io::stdout().is_terminal(), "top: standard output is not a terminal");
    let mut terminal = match ratatui::try_init() {
        Ok(terminal) => terminal,
        Err(e) => {
            ratatui::restore();
            return Err(anyhow::Error::new(e).context("top: setting up the terminal"));
        }
    };
    let result = show(&mut terminal, &runtime, &scraper, first, interval);
    ratatui::restore();
    result.context("top")?;
    Ok(ExitCode::SUCCESS)
}

/// The loop: draw, wait for a key until the next scrape, scrape.
fn show(
    terminal: &mut ratatui::DefaultTerminal,
    runtime: &tokio::runtime::Runtime,
    scraper: &Scraper,
    first: Scrape,
    interval: Duration,
) -> std::io::Result<()> {
    let mut last = (first, Instant::now());
    let mut view = View::new(scraper.url(), None, &last.0, Duration::ZERO);
    let mut next = last.1 + interval;
    loop {
        terminal.draw(|frame| render(frame, &view))?;
        let wait = next.saturating_duration_since(Instant::now());
        if event::poll(wait)? {
            if let Event::Key(key) = event::read()?
                && key.kind == KeyEventKind::Press
                && (matches!(key.code, KeyCode::Char('q') | KeyCode::Esc)
                    || (key.code == KeyCode::Char('c') && key.modifiers.contains(KeyModifiers::CONTROL)))
            {
                return Ok(());
            }
            // Another key or a resize: draw again.
            continue;
        }
        next = Instant::now() + interval;
        match runtime.block_on(scraper.scrape()) {
            Ok(scrape) => {
                let now = Instant::now();
                view = View::new(scraper.url(), Some(&last.0), &scrape, now - last.1);
                last = (scrape, now);
            }
            // The instance may be restarting: keep the last view and say so.
            Err(e) => view.error = Some(e.to_string()),
        }
    }
}
