//! Event sources: decoding real event streams into the core/v1 model ([`decode`]), and the
//! sources themselves, each of one shape (as Vector's `SourceConfig::build`): a [`SourceSpec`]
//! is built into a [`Source`] ([`SourceSpec::build`]), whose [`Source::run`] is one async task
//! that pushes events into the Broadcaster until its input ends or shutdown, and returns its
//! [`SourceStats`].
//!
//! - [`jsonl`]: JSON lines from a file (optionally followed) or stdin;
//! - [`k8s`]: a Kubernetes API watch (list, then watch; relist on `410 Gone`);
//! - [`http`]: HTTP ingest (client-go's event paths, `POST /ingest`), straight into the
//!   Broadcaster's incoming queue.

use crate::http_server::api_status;
mod blocks;
pub mod decode;
pub mod event_validation;
mod go_strings;
pub mod http;
pub mod jsonl;
pub mod k8s;
pub mod lines;
pub mod request_options;
mod spec;

use std::sync::atomic::{AtomicU64, Ordering};

use tokio_util::sync::CancellationToken;

use crate::broadcaster::Broadcaster;
use crate::event::SharedEvent;

pub use spec::{SourceContext, SourceSpec, SourceSpecError};

/// What a source did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SourceStats {
    /// Events read and accepted by the Broadcaster.
    pub read: u64,
    /// Input documents that could not be decoded (each logged with its line number).
    pub bad_lines: u64,
    /// Watch bookmarks and error envelopes seen (not events).
    pub non_events: u64,
}

/// Live counters of a running source, read at every `/metrics` scrape; [`stats`](Self::stats)
/// gives their values as [`SourceStats`]. Share one as `Arc<SourceCounters>` through
/// [`SourceContext::counters`]. HTTP ingest counts its documents in
/// [`http::IngestCounters`] instead ([`SourceContext::ingest_counters`]).
#[derive(Debug, Default)]
pub struct SourceCounters {
    read: AtomicU64,
    bad_lines: AtomicU64,
    non_events: AtomicU64,
    bytes_read: AtomicU64,
    /// Unix seconds of the last event or bookmark a Kubernetes watch delivered (or list it
    /// completed); 0: none yet.
    last_progress: AtomicU64,
    /// Kubernetes watch restarts, by [`k8s::WatchRestart`].
    watch_restarts: [AtomicU64; k8s::WatchRestart::ALL.len()],
}

impl SourceCounters {
    /// Counters at zero.
    pub const fn new() -> Self {
        Self {
            read: AtomicU64::new(0),
            bad_lines: AtomicU64::new(0),
            non_events: AtomicU64::new(0),
            bytes_read: AtomicU64::new(0),
            last_progress: AtomicU64::new(0),
            watch_restarts: [const { AtomicU64::new(0) }; k8s::WatchRestart::ALL.len()],
        }
    }

    /// Unix seconds (whole) of the last event or bookmark a Kubernetes watch delivered, or of
    /// the last list it completed; 0 before the first.
    pub fn last_progress(&self) -> u64 {
        self.last_progress.load(Ordering::Relaxed)
    }

    /// Kubernetes watch restarts for `reason` so far.
    pub fn watch_restarts(&self, reason: k8s::WatchRestart) -> u64 {
        self.watch_restarts[reason as usize].load(Ordering::Relaxed)
    }

    pub(crate) fn progressed_now(&self) {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        self.last_progress.store(now, Ordering::Relaxed);
    }

    pub(crate) fn add_watch_restart(&self, reason: k8s::WatchRestart) {
        self.watch_restarts[reason as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Input bytes read so far (JSON-lines sources), counted as lines are handed to decoding.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read.load(Ordering::Relaxed)
    }

    pub(crate) fn add_bytes_read(&self, n: u64) {
        self.bytes_read.fetch_add(n, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn stats(&self) -> SourceStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        SourceStats { read: get(&self.read), bad_lines: get(&self.bad_lines), non_events: get(&self.non_events) }
    }

    pub(crate) fn add_read(&self, n: u64) {
        self.read.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn add_bad_line(&self) {
        self.bad_lines.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn add_non_event(&self) {
        self.non_events.fetch_add(1, Ordering::Relaxed);
    }
}

/// Why a source could not run: it could not be opened, bound or read.
#[derive(Debug, thiserror::Error)]
#[error("source {source}: {error}")]
pub struct SourceError {
    /// The source, as given (`-` for stdin).
    pub source: String,
    /// What failed.
    #[source]
    pub error: std::io::Error,
}

/// A source, built and ready to run.
#[derive(Debug)]
pub enum Source {
    /// JSON lines from a file or stdin.
    JsonLines(jsonl::JsonLinesSource),
    /// A Kubernetes Events watch.
    Kubernetes(k8s::KubernetesSource),
    /// HTTP ingest.
    Http(http::HttpSource),
}

impl Source {
    /// Pushes events into `to` until the input ends or `shutdown` fires (then stops reading;
    /// what was accepted before still goes in).
    ///
    /// # Errors
    /// [`SourceError`] when the input cannot be opened, bound or read.
    pub async fn run(
        self,
        to: Broadcaster<SharedEvent>,
        shutdown: CancellationToken,
    ) -> Result<SourceStats, SourceError> {
        match self {
            Source::JsonLines(s) => s.run(to, shutdown).await,
            Source::Kubernetes(s) => Ok(s.run(to, shutdown).await),
            Source::Http(s) => s.run(to, shutdown).await,
        }
    }
}

impl crate::metrics::Snapshot {
    /// Adds a JSON-lines or Kubernetes source's bad lines and non-events under `source`.
    pub fn add_source(&mut self, source: &str, stats: &SourceStats) {
        self.add(&crate::metrics::BAD_INPUT, &[("source", source)], stats.bad_lines);
        self.add(&crate::metrics::NON_EVENTS, &[("source", source)], stats.non_events);
    }

    /// Adds a Kubernetes source's watch progress (`eventpipe_source_last_progress_timestamp_seconds`)
    /// and restarts per reason (`eventpipe_source_watch_restarts_total`, every reason shown)
    /// under `source`.
    pub fn add_watch(&mut self, source: &str, counters: &SourceCounters) {
        self.set(&crate::metrics::SOURCE_LAST_PROGRESS, &[("source", source)], counters.last_progress());
        for reason in k8s::WatchRestart::ALL {
            let labels = [("source", source), ("reason", reason.as_str())];
            self.add(&crate::metrics::SOURCE_WATCH_RESTARTS, &labels, counters.watch_restarts(reason));
        }
    }
}
