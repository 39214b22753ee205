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

pub mod decode;
pub mod http;
pub mod jsonl;
pub mod k8s;
mod spec;

use tokio_util::sync::CancellationToken;

use crate::broadcaster::Broadcaster;
use crate::event::Event;

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
    pub async fn run(self, to: Broadcaster<Event>, shutdown: CancellationToken) -> Result<SourceStats, SourceError> {
        match self {
            Source::JsonLines(s) => s.run(to, shutdown).await,
            Source::Kubernetes(s) => Ok(s.run(to, shutdown).await),
            Source::Http(s) => s.run(to, shutdown).await,
        }
    }
}
