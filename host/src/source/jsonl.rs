//! The JSON-lines source: a file (optionally followed as it grows) or standard input, decoded by
//! [`super::decode`] line by line into the Broadcaster.

use std::path::PathBuf;
use std::sync::Arc;

use super::blocks::BlockReader;
use tokio::io::AsyncBufReadExt;
use tokio_util::sync::CancellationToken;

use std::collections::VecDeque;

use tokio::task::JoinHandle;

use super::decode::{DecodeError, Decoded, Decoder};
use super::go_strings;
use super::lines::{Line, LineEnd, read_line_async, take_line};
use super::{SourceCounters, SourceError, SourceStats};
use crate::broadcaster::{Broadcaster, WatchEventType};
use crate::delivery::{Position, Progress};
use crate::event::SharedEvent;

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
    pub async fn run(
        self,
        to: Broadcaster<SharedEvent>,
        shutdown: CancellationToken,
    ) -> Result<SourceStats, SourceError> {
        let name = self.name();
        let fail = |error| SourceError { source: name.clone(), error };
        match &self.path {
            None => match stdin_file() {
                Some(file) => self.pump(BlockReader::file(file, READ_BUFFER_BYTES), &to, &shutdown).await,
                None => self.pump(BlockReader::new(std::io::stdin(), READ_BUFFER_BYTES), &to, &shutdown).await,
            }
            .map_err(fail),
            Some(path) => {
                let file = open_at(path, self.start).await.map_err(fail)?;
                self.pump(BlockReader::file(file, READ_BUFFER_BYTES), &to, &shutdown).await.map_err(fail)
            }
        }
    }

    /// Reads `input` into the Broadcaster (waiting for room: `Action`). Lines are read in
    /// [`Chunk`]s that are decoded as tasks of the runtime (on its worker threads, one per core,
    /// beside the router's partitions: a blocking-pool thread per chunk made `run` 1.10× slower
    /// on 2 cores, by thread hand-offs and oversubscription), up to [`MAX_CHUNKS_IN_FLIGHT`] at
    /// once, and handed over in input order (one [`Broadcaster::action_many`] per chunk), so
    /// that decoding — most of a JSON-lines source's work — uses every core while the events
    /// keep their order. The result is exactly that of one [`Decoder`] reading every line: a
    /// chunk decoded from a fresh decoder is used only when the decoder was
    /// [clean](Decoder::is_clean) where it starts, and is decoded again from the real state
    /// otherwise (a multi-line document across the boundary); after a chunk that ends inside a
    /// document (pretty-printed input), the next ones are decoded one after another.
    ///
    /// A chunk is handed to decoding as soon as the reader has nothing more buffered, and
    /// decoded chunks are handed over while reading waits, so that nothing read is held back
    /// while the input pauses. With `progress`, records the byte offset after each event's
    /// line; an earlier event of a line that holds several gets the line's start, so a restart
    /// re-reads the whole line (duplicates, never gaps). With `follow`, the end of the input is
    /// not its end: reading goes on as it grows (polled every [`FOLLOW_POLL`]) until `shutdown`.
    async fn pump<R: std::io::Read + Send + Unpin + 'static>(
        &self,
        mut reader: BlockReader<R>,
        to: &Broadcaster<SharedEvent>,
        shutdown: &CancellationToken,
    ) -> std::io::Result<SourceStats> {
        let mut state = Some(Decoder::new());
        let mut pending: VecDeque<Pending> = VecDeque::new();
        let mut chunk = Chunk::new(0, self.start);
        // The line being read (all of it is read before it is decoded).
        let mut line = Line::default();
        // Whether the last chunk handed over ended clean: speculation is then worth it.
        let mut speculate = true;
        let mut ended = false;
        let mut idle_until: Option<tokio::time::Instant> = None;
        // One wait for shutdown for the whole loop (a new one per turn registers and
        // unregisters a waiter under the token's lock).
        let cancelled = shutdown.cancelled();
        tokio::pin!(cancelled);
        loop {
            start_held(&mut pending, &mut state);
            if ended && pending.is_empty() {
                break;
            }
            let can_read = !ended && idle_until.is_none() && pending.len() < MAX_CHUNKS_IN_FLIGHT;
            let running = matches!(pending.front(), Some(Pending::Speculative(_) | Pending::Continued(_)));
            tokio::select! {
                biased;
                done = front(&mut pending), if running => {
                    let kind = pending.pop_front().expect("the front just finished");
                    let done = done.map_err(std::io::Error::other)?;
                    let items = settle(kind, done, &mut state).await?;
                    speculate = state.as_ref().is_some_and(Decoder::is_clean);
                    self.hand_over(items, to).await;
                }
                _ = &mut cancelled, if !ended => {
                    // Stop reading; what was read still goes in.
                    self.dispatch(&mut chunk, &mut pending, speculate);
                    ended = true;
                }
                _ = sleep_until(idle_until), if idle_until.is_some() => idle_until = None,
                end = read_line_async(&mut reader, &mut line), if can_read => match end? {
                    LineEnd::Newline => {
                        chunk.push(&line.bytes, line.read);
                        line.clear();
                        // The further lines already read in are taken here, not with a turn of
                        // the loop each; a partial last one waits in `line` for the next read.
                        while !chunk.is_full() && !reader.available().is_empty() {
                            let (used, whole) = take_line(reader.available(), &mut line);
                            reader.consume(used);
                            if !whole {
                                break;
                            }
                            chunk.push(&line.bytes, line.read);
                            line.clear();
                        }
                        if chunk.is_full() || reader.available().is_empty() {
                            self.dispatch(&mut chunk, &mut pending, speculate);
                        }
                    }
                    // The end of the input for now: a followed file may grow (a partial last
                    // line waits in `line` for its end); otherwise the last line goes in.
                    LineEnd::Eof => {
                        if !self.follow && line.read > 0 {
                            chunk.push(&line.bytes, line.read);
                        }
                        self.dispatch(&mut chunk, &mut pending, speculate);
                        if self.follow {
                            idle_until = Some(tokio::time::Instant::now() + FOLLOW_POLL);
                        } else {
                            ended = true;
                        }
                    }
                },
            }
        }
        let mut decoder = state.expect("no decoding is in flight at the end");
        if let Some(error) = decoder.finish() {
            tracing::warn!(source = self.name(), %error, "bad input skipped");
            self.counters.add_bad_line();
        }
        Ok(self.counters.stats())
    }

    /// [`dispatch`]es `chunk`, counting its input bytes.
    fn dispatch(&self, chunk: &mut Chunk, pending: &mut VecDeque<Pending>, speculate: bool) {
        let bytes = chunk.lines.last().map_or(0, |&(_, end)| end - chunk.start);
        self.counters.add_bytes_read(bytes);
        dispatch(chunk, pending, speculate);
    }

    /// Hands a decoded chunk's events to the Broadcaster (recording their positions first),
    /// and logs and counts its other documents and its errors.
    async fn hand_over(&self, items: Vec<Item>, to: &Broadcaster<SharedEvent>) {
        let mut batch = Vec::with_capacity(items.len());
        for item in items {
            match item {
                Item::Event { event, position } => {
                    if let Some(progress) = &self.progress {
                        progress.sent(Position::FileOffset(position));
                    }
                    batch.push((WatchEventType::Added, event));
                }
                Item::Other { line, what } => {
                    tracing::info!(source = self.name(), line, what, "not an event, skipped");
                    self.counters.add_non_event();
                }
                Item::Error(error) => {
                    tracing::warn!(source = self.name(), %error, "bad input skipped");
                    self.counters.add_bad_line();
                }
            }
        }
        if batch.is_empty() {
            return;
        }
        let n = batch.len() as u64;
        match to.action_many(batch).await {
            Ok(()) => {
                self.counters.add_read(n);
            }
            Err(error) => tracing::error!(%error, events = n, "broadcaster refused events"),
        }
    }
}

/// Lines decoded together, at most [`CHUNK_LINES`] lines or about [`CHUNK_BYTES`] bytes.
struct Chunk {
    /// The lines' bytes, back to back (each as read: with its `\n`, cut at `MAX_LINE_BYTES`).
    text: Vec<u8>,
    /// Per line: where it ends in `text`, and the input offset just after it.
    lines: Vec<(usize, u64)>,
    /// The number of the line before the first (the decoder's count).
    after_line: u64,
    /// The input offset of the first line.
    start: u64,
}

impl Chunk {
    fn new(after_line: u64, start: u64) -> Self {
        Self { text: Vec::new(), lines: Vec::new(), after_line, start }
    }

    /// An empty chunk with room for `text` bytes and [`CHUNK_LINES`] lines.
    fn with_capacity(after_line: u64, start: u64, text: usize) -> Self {
        Self { text: Vec::with_capacity(text), lines: Vec::with_capacity(CHUNK_LINES), after_line, start }
    }

    /// Adds a line of `read` input bytes, of which `line` were kept.
    fn push(&mut self, line: &[u8], read: u64) {
        let offset = self.lines.last().map_or(self.start, |&(_, end)| end) + read;
        self.text.extend_from_slice(line);
        self.lines.push((self.text.len(), offset));
    }

    fn is_full(&self) -> bool {
        self.lines.len() >= CHUNK_LINES || self.text.len() >= CHUNK_BYTES
    }

    /// The chunk that follows this one, with room for as much text as this one holds and an
    /// eighth more (chunks of one stream are alike: few grow their buffer again).
    fn next(&self) -> Self {
        let start = self.lines.last().map_or(self.start, |&(_, end)| end);
        let room = (self.text.len() + self.text.len() / 8).min(CHUNK_BYTES + CHUNK_BYTES / 8);
        Self::with_capacity(self.after_line + self.lines.len() as u64, start, room)
    }
}

/// One decoded document of a chunk.
enum Item {
    /// An event, and the input offset a restart resumes at to see it again.
    Event { event: SharedEvent, position: u64 },
    /// A document that is not an event (a bookmark, an `ERROR` envelope).
    Other { line: u64, what: String },
    /// A document that could not be decoded.
    Error(DecodeError),
}

/// A chunk decoded, its items in input order, and the decoder after it.
struct DecodedChunk {
    chunk: Chunk,
    items: Vec<Item>,
    decoder: Decoder,
}

/// A chunk handed to decoding, in input order.
enum Pending {
    /// Decoded from a fresh decoder: right when the decoder is clean where it starts.
    Speculative(JoinHandle<DecodedChunk>),
    /// Decoded from the decoder as the chunk before it left it: right.
    Continued(JoinHandle<DecodedChunk>),
    /// Waiting for the decoder as the chunk before it leaves it.
    Held(Chunk),
}

/// Decodes `chunk`'s lines with `decoder` (a runtime task: a chunk is at most [`CHUNK_LINES`]
/// lines or about [`CHUNK_BYTES`]; 128 typical lines are a few hundred microseconds of work).
/// Lines that are not UTF-8 are decoded with each bad byte replaced by U+FFFD, as Go reads them
/// ([`go_strings::lossy_utf8`]).
fn decode_chunk(mut decoder: Decoder, chunk: Chunk) -> DecodedChunk {
    let mut items = Vec::with_capacity(chunk.lines.len());
    let mut from = 0;
    let mut line_start = chunk.start;
    for &(end, offset) in &chunk.lines {
        let bytes = &chunk.text[from..end];
        let text = go_strings::lossy_utf8(bytes);
        let first = items.len();
        decoder.push_line(text.trim_end_matches(['\n', '\r']), |item| {
            items.push(match item {
                Ok(Decoded::Event { mut event, clock, spam_filter_clock, .. }) => {
                    // A replay line's instants ride with its event (`--clock event` reads them).
                    event.recorded_clock = crate::event::RecordedClock::new(clock, spam_filter_clock);
                    Item::Event { event: crate::event::shared(event), position: line_start }
                }
                Ok(other) => Item::Other { line: other.line(), what: other.describe() },
                Err(error) => Item::Error(error),
            });
        });
        // The line's last event resumes after the line; earlier ones at its start.
        if let Some(Item::Event { position, .. }) =
            items[first..].iter_mut().rev().find(|i| matches!(i, Item::Event { .. }))
        {
            *position = offset;
        }
        (from, line_start) = (end, offset);
    }
    DecodedChunk { chunk, items, decoder }
}

/// Hands `chunk` (if it has lines) to decoding: from a fresh decoder when `speculate`, else
/// held until the chunk before it is decoded. `chunk` becomes the next one.
fn dispatch(chunk: &mut Chunk, pending: &mut VecDeque<Pending>, speculate: bool) {
    if chunk.lines.is_empty() {
        return;
    }
    let next = chunk.next();
    let chunk = std::mem::replace(chunk, next);
    pending.push_back(if speculate {
        let decoder = Decoder::after_line(chunk.after_line);
        Pending::Speculative(tokio::task::spawn(async move { decode_chunk(decoder, chunk) }))
    } else {
        Pending::Held(chunk)
    });
}

/// Starts decoding the held chunk at the front, once the decoder state before it is here.
fn start_held(pending: &mut VecDeque<Pending>, state: &mut Option<Decoder>) {
    if matches!(pending.front(), Some(Pending::Held(_)))
        && let Some(decoder) = state.take()
        && let Some(Pending::Held(chunk)) = pending.pop_front()
    {
        pending.push_front(Pending::Continued(tokio::task::spawn(async move { decode_chunk(decoder, chunk) })));
    }
}

/// The front chunk's decoding (cancellation-safe: it stays at the front until it is done).
async fn front(pending: &mut VecDeque<Pending>) -> Result<DecodedChunk, tokio::task::JoinError> {
    match pending.front_mut() {
        Some(Pending::Speculative(handle) | Pending::Continued(handle)) => handle.await,
        _ => std::future::pending().await,
    }
}

/// The right decoding of a finished front chunk, as its items: a speculative one is kept when
/// the decoder was clean before it, and decoded again from the real state otherwise. `state`
/// becomes the decoder after it.
async fn settle(kind: Pending, done: DecodedChunk, state: &mut Option<Decoder>) -> std::io::Result<Vec<Item>> {
    let decoded = match kind {
        Pending::Speculative(_) => {
            let before = state.take().expect("the chunk before was handed over");
            if before.is_clean() {
                done
            } else {
                let chunk = done.chunk;
                tokio::task::spawn(async move { decode_chunk(before, chunk) }).await.map_err(std::io::Error::other)?
            }
        }
        _ => done,
    };
    *state = Some(decoded.decoder);
    Ok(decoded.items)
}

async fn sleep_until(until: Option<tokio::time::Instant>) {
    match until {
        Some(until) => tokio::time::sleep_until(until).await,
        None => std::future::pending().await,
    }
}

/// Lines decoded together, at most. Smaller chunks start the pipeline sooner and keep both
/// cores busy; larger ones cost fewer hand-offs (`run` on the 176k-line real stream, 2 cores:
/// 64 and 128 lines 0.95×, 1024 lines 1.16× the wall time of 256).
const CHUNK_LINES: usize = 128;

/// Bytes of lines decoded together, about (a longer line is a chunk of its own).
const CHUNK_BYTES: usize = 1 << 20;

/// Bytes read from the input at once ([`BlockReader`]: a regular file's on the task, anything
/// else's on the blocking pool, one block ahead). With one hand-off to the blocking pool per
/// read, `run` on the 176k-event stream (11 pairs) took 0.91× the wall time and 0.96× the CPU
/// with 256 KiB reads than with 64 KiB, for 4 MiB more peak memory; 1 MiB was no faster.
const READ_BUFFER_BYTES: usize = 1 << 18;

/// Chunks being decoded at once, at most (memory: this many × [`CHUNK_BYTES`], plus one line).
const MAX_CHUNKS_IN_FLIGHT: usize = 4;

/// Stdin as a file of its own (a duplicate of its descriptor), so that it is read as a file
/// named on the command line is ([`BlockReader::file`]: on the task when redirected from a
/// regular file, `< FILE`); `None` where descriptors are not Unix's or it has none.
fn stdin_file() -> Option<std::fs::File> {
    #[cfg(unix)]
    {
        use std::os::fd::AsFd;
        std::io::stdin().as_fd().try_clone_to_owned().ok().map(std::fs::File::from)
    }
    #[cfg(not(unix))]
    None
}

/// `path` opened and positioned at byte `offset`.
async fn open_at(path: &std::path::Path, offset: u64) -> std::io::Result<std::fs::File> {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        use std::io::Seek;
        let mut file = std::fs::File::open(path)?;
        if offset > 0 {
            file.seek(std::io::SeekFrom::Start(offset))?;
        }
        Ok(file)
    })
    .await
    .map_err(std::io::Error::other)?
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broadcaster::FullChannelBehavior;
    use crate::source::decode::decode_str;

    fn event(i: usize) -> serde_json::Value {
        serde_json::json!({
            "metadata": {"name": format!("e{i}"), "namespace": "ns"},
            "involvedObject": {"kind": "Pod", "name": format!("p{i}")},
            "reason": "R", "message": format!("m{i}"),
        })
    }

    /// A named pipe is read on the blocking pool, not on the source's task: while the source
    /// waits for the writer, the runtime's only thread goes on running other tasks. (A regular
    /// file is read on the task; a pipe's read may wait for input indefinitely.)
    #[tokio::test(flavor = "current_thread")]
    async fn a_named_pipe_is_read_without_holding_the_runtime() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("in.jsonl");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo runs");
        assert!(made.success(), "mkfifo {}", fifo.display());
        let second_line_sent = Arc::new(AtomicBool::new(false));
        let writer = std::thread::spawn({
            let (fifo, sent) = (fifo.clone(), second_line_sent.clone());
            move || {
                use std::io::Write;
                let mut pipe = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
                writeln!(pipe, "{}", event(1)).unwrap();
                std::thread::sleep(std::time::Duration::from_secs(2));
                sent.store(true, Ordering::SeqCst);
                writeln!(pipe, "{}", event(2)).unwrap();
            }
        });
        let broadcaster = Broadcaster::new(100, FullChannelBehavior::WaitIfChannelFull);
        let mut watcher = broadcaster.watch().unwrap();
        let source =
            JsonLinesSource { path: Some(fifo), start: 0, progress: None, follow: false, counters: Arc::default() };
        let running = tokio::spawn(source.run(broadcaster.clone(), CancellationToken::new()));
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert!(
            !second_line_sent.load(Ordering::SeqCst),
            "this thread ran on while the source waited for the pipe's second line"
        );
        let stats = running.await.unwrap().unwrap();
        writer.join().unwrap();
        broadcaster.shutdown().await;
        let mut names = Vec::new();
        while let Some(e) = watcher.recv().await {
            names.push(e.object.metadata.name.to_string());
        }
        assert_eq!((stats.read, names), (2, vec!["e1".to_string(), "e2".to_string()]));
    }

    /// Runs a source on a file holding `input` to its end: the events the Broadcaster got, in
    /// order, and the source's counts.
    async fn read_file(input: &[u8]) -> (Vec<SharedEvent>, SourceStats) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.jsonl");
        std::fs::write(&path, input).unwrap();
        let broadcaster = Broadcaster::new(100_000, FullChannelBehavior::WaitIfChannelFull);
        let mut watcher = broadcaster.watch().unwrap();
        let source =
            JsonLinesSource { path: Some(path), start: 0, progress: None, follow: false, counters: Arc::default() };
        let stats = source.run(broadcaster.clone(), CancellationToken::new()).await.unwrap();
        broadcaster.shutdown().await;
        let mut events = Vec::new();
        while let Some(e) = watcher.recv().await {
            events.push(e.object);
        }
        (events, stats)
    }

    /// A line with bytes that are not UTF-8 in a string is decoded as Go reads it, one U+FFFD
    /// per bad byte, and the lines around it as they are.
    #[tokio::test(flavor = "current_thread")]
    async fn bytes_that_are_not_utf8_are_read_as_go_reads_them() {
        let mut input = format!("{}\n", event(1)).into_bytes();
        input.extend_from_slice(format!("{}\n", event(2)).replace("m2", "m\u{1}\u{1}2").as_bytes());
        let at = input.iter().position(|&b| b == 1).unwrap();
        input[at..at + 2].copy_from_slice(b"\xe2\x82"); // a euro sign cut after two of its bytes
        input.extend_from_slice(format!("{}\n", event(3)).as_bytes());
        let (events, stats) = read_file(&input).await;
        let messages: Vec<&str> = events.iter().map(|e| e.message.as_str()).collect();
        assert_eq!(messages, ["m1", "m\u{fffd}\u{fffd}2", "m3"]);
        assert_eq!((stats.read, stats.bad_lines), (3, 0));
    }

    /// Compact lines, pretty-printed documents across chunk boundaries, bad lines and broken
    /// documents: decoded in parallel chunks, the events, their order and the bad lines are
    /// exactly those of one decoder reading the whole input.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn chunked_decoding_equals_one_decoder() {
        let mut text = String::new();
        for i in 0..3000 {
            match i % 97 {
                0 => text += &format!("{}\n", serde_json::to_string_pretty(&event(i)).unwrap()),
                13 => text += "not json\n",
                31 => text += "{\"metadata\": {\"name\": \"broken\"\n  \"more\": [\n",
                _ => text += &format!("{}\n", event(i)),
            }
        }
        text += "{\"unterminated\": [1,";
        let (expected, errors) = decode_str(&text);
        let expected: Vec<String> = expected
            .into_iter()
            .filter_map(|d| match d {
                Decoded::Event { event, .. } => Some(event.metadata.name.to_string()),
                _ => None,
            })
            .collect();

        let (events, stats) = read_file(text.as_bytes()).await;
        let names: Vec<String> = events.iter().map(|e| e.metadata.name.to_string()).collect();
        assert_eq!(names.len(), expected.len());
        assert!(names == expected, "the events and their order");
        assert_eq!((stats.read, stats.bad_lines), (expected.len() as u64, errors.len() as u64));

        // The speculation rule itself, at every chunk size: a chunk decoded from a fresh decoder
        // is taken when the decoder before it is clean, else decoded again from that state.
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        for size in [1, 2, 3, 5, 8, 64] {
            let mut state = Decoder::new();
            let (mut names, mut bad) = (Vec::new(), 0);
            let mut after = 0;
            for piece in lines.chunks(size) {
                let mut chunk = Chunk::new(after, 0);
                for line in piece {
                    chunk.push(line.as_bytes(), line.len() as u64);
                }
                after += piece.len() as u64;
                let speculative = decode_chunk(Decoder::after_line(chunk.after_line), chunk);
                let decoded = if state.is_clean() { speculative } else { decode_chunk(state, speculative.chunk) };
                for item in decoded.items {
                    match item {
                        Item::Event { event, .. } => names.push(event.metadata.name.clone()),
                        Item::Error(_) => bad += 1,
                        Item::Other { .. } => {}
                    }
                }
                state = decoded.decoder;
            }
            bad += usize::from(state.finish().is_some());
            assert!(names == expected, "chunks of {size} lines");
            assert_eq!(bad, errors.len(), "chunks of {size} lines");
        }
    }
}
