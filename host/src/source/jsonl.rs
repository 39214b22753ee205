//! The JSON-lines source: a file (optionally followed as it grows) or standard input, decoded by
//! [`super::decode`] line by line into the Broadcaster.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::io::{AsyncRead, BufReader};
use tokio_util::sync::CancellationToken;

use super::decode::{Decoded, Decoder};
use super::lines::read_line_async;
use super::{SourceCounters, SourceError, SourceStats};
use crate::broadcaster::{Broadcaster, WatchEventType};
use crate::delivery::{Position, Progress};
use crate::event::Event;

/// How often a followed file is checked for more lines.
const FOLLOW_POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// JSON lines from a file or stdin.
#[derive(Debug)]
pub struct JsonLinesSource {
    /// The file; `None`: standard input.
    pub path: Option<PathBuf>,
    /// Byte offset to start reading the file at (a saved position; a line start).
    pub start: u64,
    /// With at-least-once delivery: records the position after each event.
    pub progress: Option<Arc<Progress>>,
    /// At the end of the file, wait for more (as `tail -f`) until shutdown.
    pub follow: bool,
    /// Counted into as lines are read (events handed over, bad lines, non-events).
    pub counters: Arc<SourceCounters>,
}

impl JsonLinesSource {
    /// The source's name in logs and errors: its path, `-` for stdin.
    pub fn name(&self) -> String {
        self.path.as_ref().map_or_else(|| "-".to_string(), |p| p.display().to_string())
    }

    /// Reads the input into `to` until it ends or `shutdown` fires. Bad lines are logged with
    /// their line number and counted; they never stop the source.
    ///
    /// # Errors
    /// [`SourceError`] when the file cannot be opened or read.
    pub async fn run(self, to: Broadcaster<Event>, shutdown: CancellationToken) -> Result<SourceStats, SourceError> {
        let name = self.name();
        let fail = |error| SourceError { source: name.clone(), error };
        match &self.path {
            None => self.pump(tokio::io::stdin(), &to, &shutdown).await.map_err(fail),
            Some(path) => {
                let file = open_at(path, self.start).await.map_err(fail)?;
                self.pump(file, &to, &shutdown).await.map_err(fail)
            }
        }
    }

    /// Reads `input` line by line into the Broadcaster (waiting for room: `Action`), handing
    /// over the events of the lines already buffered together (up to [`HANDOFF_BATCH`],
    /// [`Broadcaster::action_many`]), so that a line waiting for more input is never held back. With
    /// `progress`, records the byte offset after each event's line; an earlier event of a line
    /// that holds several gets the line's start, so a restart re-reads the whole line
    /// (duplicates, never gaps). With `follow`, the end of the input is not its end: reading goes
    /// on as it grows (polled every [`FOLLOW_POLL`]) until `shutdown`.
    async fn pump(
        &self,
        input: impl AsyncRead + Unpin,
        to: &Broadcaster<Event>,
        shutdown: &CancellationToken,
    ) -> std::io::Result<SourceStats> {
        let name = self.name();
        let mut reader = BufReader::with_capacity(1 << 16, input);
        let mut decoder = Decoder::new();
        let mut buf = Vec::with_capacity(4096);
        let mut offset = self.start;
        let mut batch = Vec::with_capacity(HANDOFF_BATCH);
        loop {
            buf.clear();
            let (mut read, mut complete) = tokio::select! {
                _ = shutdown.cancelled() => (0, true),
                line = read_line_async(&mut reader, &mut buf) => line?,
            };
            if read == 0 && self.follow && !shutdown.is_cancelled() {
                tokio::select! {
                    _ = shutdown.cancelled() => {}
                    _ = tokio::time::sleep(FOLLOW_POLL) => {}
                }
                continue;
            }
            while read > 0 && self.follow && !complete {
                // A line still being written: read the rest of it before decoding.
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep(FOLLOW_POLL) => {}
                }
                let (more, ended) = read_line_async(&mut reader, &mut buf).await?;
                (read, complete) = (read + more, ended);
            }
            let line_start = offset;
            offset += read as u64;
            let mut items = Vec::new();
            if read > 0 {
                let text = String::from_utf8_lossy(&buf);
                decoder.push_line(text.trim_end_matches(['\n', '\r']), |item| items.push(item));
            } else {
                items.extend(decoder.finish().map(Err));
            }
            let events = items.iter().filter(|i| matches!(i, Ok(Decoded::Event { .. }))).count();
            let mut nth = 0;
            for item in items {
                match item {
                    Ok(Decoded::Event { event, .. }) => {
                        nth += 1;
                        if let Some(progress) = &self.progress {
                            progress.sent(Position::FileOffset(if nth == events { offset } else { line_start }));
                        }
                        batch.push((WatchEventType::Added, event));
                    }
                    Ok(other) => {
                        tracing::info!(
                            source = name,
                            line = other.line(),
                            what = other.describe(),
                            "not an event, skipped"
                        );
                        self.counters.add_non_event();
                    }
                    Err(error) => {
                        tracing::warn!(source = name, %error, "bad input skipped");
                        self.counters.add_bad_line();
                    }
                }
            }
            if batch.len() >= HANDOFF_BATCH || reader.buffer().is_empty() || read == 0 {
                let n = batch.len() as u64;
                match to.action_many(std::mem::take(&mut batch)).await {
                    Ok(()) => self.counters.add_read(n),
                    Err(error) => tracing::error!(%error, events = n, "broadcaster refused events"),
                }
            }
            if read == 0 {
                return Ok(self.counters.stats());
            }
        }
    }
}

/// Events handed to the Broadcaster at once, at most.
const HANDOFF_BATCH: usize = 256;

/// `path` opened and positioned at byte `offset`.
async fn open_at(path: &std::path::Path, offset: u64) -> std::io::Result<tokio::fs::File> {
    use tokio::io::AsyncSeekExt;
    let mut file = tokio::fs::File::open(path).await?;
    if offset > 0 {
        file.seek(std::io::SeekFrom::Start(offset)).await?;
    }
    Ok(file)
}
