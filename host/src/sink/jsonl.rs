//! A sink that writes each call as one JSON line: `{"verb":"create"|"patch","event":…,"patch":…}`.
//!
//! It stores nothing of its own ([`Stored::AsSent`]), like client-go's test sink echoing the
//! event back; the correlator's `update_state` therefore sees exactly what was written.
//!
//! Lines are buffered and reach the writer whole, never cut in the middle (a reader following
//! the file sees complete lines only): when [`FLUSH_BYTES`] are buffered, on
//! [`JsonLinesSink::flush`], and on a write [`FLUSH_INTERVAL`] after the last flush; `run`
//! also flushes every sink every [`FLUSH_INTERVAL`].

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::Mutex;

use async_trait::async_trait;
use serde::Serialize;

use super::retry::Verb;
use super::{EventSink, SinkError, SinkPatch, Stored};
use crate::correlator::EventPatch;
use crate::event::Event;

/// One sink call as JSON: `{"verb":"create"|"patch","event":…,"patch":…}` — a line of the
/// JSON-lines sink and an item of a webhook batch — with `"enrichment":{…}` after `"event"` when
/// the metadata cache attached something to the event ([`crate::event::enrichment`]).
#[derive(Debug, Serialize)]
pub(crate) struct SinkCall<'a> {
    verb: Verb,
    event: &'a Event,
    /// What the metadata cache attached; absent when nothing was.
    #[serde(skip_serializing_if = "Option::is_none")]
    enrichment: Option<&'a crate::event::enrichment::Enrichment>,
    /// The patch body as sent; absent for an empty body.
    patch: Option<PatchJson<'a>>,
}

/// A patch body inside a [`SinkCall`]: bytes a caller gave, embedded as they are (checked to be
/// JSON), or the EventLogger's patch serialised in place (the same bytes its `to_json` gives).
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum PatchJson<'a> {
    Raw(&'a serde_json::value::RawValue),
    Observed(&'a EventPatch),
}

impl<'a> SinkCall<'a> {
    /// The call `verb` on `event` with the patch body `patch` (empty: none).
    ///
    /// # Errors
    /// [`SinkError::RequestConstruction`] when a non-empty `patch` is not JSON.
    pub(crate) fn new(verb: Verb, event: &'a Event, patch: &'a [u8]) -> Result<Self, SinkError> {
        let patch = if patch.is_empty() {
            None
        } else {
            Some(PatchJson::Raw(
                serde_json::from_slice::<&serde_json::value::RawValue>(patch)
                    .map_err(|e| SinkError::RequestConstruction(format!("patch is not JSON: {e}")))?,
            ))
        };
        Ok(Self { verb, event, enrichment: event.enrichment.get(), patch })
    }

    /// The patch `patch` of `event`, as `recordToSink` sends it ([`SinkPatch`]).
    ///
    /// # Errors
    /// As [`SinkCall::new`] for [`SinkPatch::Bytes`].
    pub(crate) fn patch(event: &'a Event, patch: SinkPatch<'a>) -> Result<Self, SinkError> {
        Self::with(Verb::Patch, event, patch)
    }

    /// The call `verb` on `event` with `patch` in the form it has ([`SinkPatch`]; empty bytes:
    /// none).
    ///
    /// # Errors
    /// As [`SinkCall::new`] for [`SinkPatch::Bytes`].
    pub(crate) fn with(verb: Verb, event: &'a Event, patch: SinkPatch<'a>) -> Result<Self, SinkError> {
        match patch {
            SinkPatch::Observed(p) => {
                Ok(Self { verb, event, enrichment: event.enrichment.get(), patch: Some(PatchJson::Observed(p)) })
            }
            SinkPatch::Bytes(bytes) => Self::new(verb, event, bytes),
        }
    }
}

/// Buffered lines are written out once they reach this many bytes.
pub const FLUSH_BYTES: usize = 1 << 16;

/// Buffered lines are written out at least this often while calls come in (and `run` flushes
/// every sink this often).
pub const FLUSH_INTERVAL: std::time::Duration = std::time::Duration::from_millis(200);

/// Writes sink calls as JSON lines to any writer (a file, stdout), buffered in whole lines.
///
/// # Errors
/// A failed write is a [`SinkError::Transport`] (retried by `recordToSink`). `update` is not part
/// of this sink's vocabulary and is refused as [`SinkError::RequestConstruction`].
pub struct JsonLinesSink {
    out: Mutex<Lines>,
}

/// Whole lines not yet written, and where they go.
struct Lines {
    buf: Vec<u8>,
    out: Box<dyn Write + Send>,
    flushed: std::time::Instant,
}

impl Lines {
    fn flush(&mut self) -> std::io::Result<()> {
        self.flushed = std::time::Instant::now();
        if !self.buf.is_empty() {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        self.out.flush()
    }
}

impl JsonLinesSink {
    /// A sink writing to `out`.
    pub fn new(out: Box<dyn Write + Send>) -> Self {
        let lines = Lines { buf: Vec::with_capacity(FLUSH_BYTES), out, flushed: std::time::Instant::now() };
        Self { out: Mutex::new(lines) }
    }

    /// Writes out the buffered lines and flushes the writer.
    ///
    /// # Errors
    /// The underlying writer's error.
    pub fn flush(&self) -> std::io::Result<()> {
        self.out.lock().unwrap_or_else(|p| p.into_inner()).flush()
    }

    /// Opens `path` for appending (creating it), first cutting off a torn last line: a process
    /// killed mid-write leaves a line without its `\n`, and appending to it would make that line
    /// and the next one unreadable. The torn record was never acknowledged, so at-least-once
    /// delivery writes it again. Returns the file and how many bytes were cut (0 for a file
    /// that ends with `\n`, is empty or is not a regular file, e.g. a pipe).
    ///
    /// # Errors
    /// Opening, reading or truncating the file.
    pub fn open_append(path: &Path) -> std::io::Result<(std::fs::File, u64)> {
        let mut file = std::fs::OpenOptions::new().create(true).read(true).append(true).open(path)?;
        let meta = file.metadata()?;
        if !meta.is_file() || meta.len() == 0 {
            return Ok((file, 0));
        }
        // Find the last '\n', reading backwards in 64 KiB blocks.
        let len = meta.len();
        let mut end = len;
        let mut block = vec![0u8; 1 << 16];
        let keep = loop {
            let start = end.saturating_sub(block.len() as u64);
            let chunk = &mut block[..(end - start) as usize];
            file.seek(SeekFrom::Start(start))?;
            file.read_exact(chunk)?;
            if let Some(i) = chunk.iter().rposition(|&b| b == b'\n') {
                break start + i as u64 + 1;
            }
            if start == 0 {
                break 0;
            }
            end = start;
        };
        if keep < len {
            file.set_len(keep)?;
        }
        Ok((file, len - keep))
    }

    /// Serialises `call` before taking the lock (partitions on other cores serialise their
    /// calls at the same time), then appends the whole line.
    fn write(&self, call: &SinkCall<'_>) -> Result<(), SinkError> {
        thread_local! {
            /// The line being serialised, reused by every call on this thread.
            static LINE: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(Vec::with_capacity(4096));
        }
        LINE.with_borrow_mut(|line| {
            line.clear();
            serde_json::to_writer(&mut *line, call).map_err(|e| SinkError::Transport(format!("jsonl sink: {e}")))?;
            line.push(b'\n');
            let mut lines = self.out.lock().unwrap_or_else(|p| p.into_inner());
            lines.buf.extend_from_slice(line);
            let flushed = if lines.buf.len() >= FLUSH_BYTES || lines.flushed.elapsed() >= FLUSH_INTERVAL {
                lines.flush().map_err(|e| SinkError::Transport(format!("jsonl sink: {e}")))
            } else {
                Ok(())
            };
            if line.capacity() > 1 << 20 {
                *line = Vec::with_capacity(4096); // a huge event does not keep its buffer
            }
            flushed
        })
    }
}

#[async_trait]
impl EventSink for JsonLinesSink {
    async fn create(&self, event: &Event) -> Result<Stored, SinkError> {
        self.write(&SinkCall::new(Verb::Create, event, &[])?)?;
        Ok(Stored::AsSent)
    }

    async fn update(&self, _event: &Event) -> Result<Stored, SinkError> {
        Err(SinkError::RequestConstruction("the jsonl sink records creates and patches only".into()))
    }

    async fn patch(&self, event: &Event, patch: &[u8]) -> Result<Stored, SinkError> {
        self.patch_observed(event, SinkPatch::Bytes(patch)).await
    }

    /// The EventLogger's patch is serialised into the line itself (no JSON bytes made, then
    /// checked and copied).
    async fn patch_observed(&self, event: &Event, patch: SinkPatch<'_>) -> Result<Stored, SinkError> {
        self.write(&SinkCall::patch(event, patch)?)?;
        Ok(Stored::AsSent)
    }
}

/// Whether a file sink could open `path` for writing, without truncating it: the file, when
/// it exists, is not a directory and opens for appending; else its directory exists and a new
/// file can be made in it (a probe file, removed at once). `Err` says what is wrong (what
/// `validate` reports, and `run` when it cannot open the file), e.g. `directory out does not
/// exist`.
pub fn writable(path: &Path) -> Result<(), String> {
    if let Ok(meta) = std::fs::metadata(path) {
        if meta.is_dir() {
            return Err("is a directory".into());
        }
        return std::fs::OpenOptions::new().append(true).open(path).map(drop).map_err(|e| format!("not writable: {e}"));
    }
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !parent.is_dir() {
        return Err(format!("directory {} does not exist", parent.display()));
    }
    let probe = parent.join(format!(".eventpipe-probe-{}", std::process::id()));
    match std::fs::OpenOptions::new().write(true).create_new(true).open(&probe) {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(format!("directory {}: not writable: {e}", parent.display())),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// Records every write it is given, to check where they end.
    #[derive(Clone, Default)]
    struct Writes(Arc<Mutex<Vec<Vec<u8>>>>);

    impl Write for Writes {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().push(b.to_vec());
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn lines_reach_the_writer_whole() {
        let writes = Writes::default();
        let sink = JsonLinesSink::new(Box::new(writes.clone()));
        let event = Event { message: "x".repeat(3000).into(), ..Event::default() };
        for _ in 0..100 {
            sink.create(&event).await.unwrap();
        }
        assert!(!writes.0.lock().unwrap().is_empty(), "300 KB of lines were written out before the end");
        sink.flush().unwrap();
        let writes = writes.0.lock().unwrap();
        assert!(writes.iter().all(|w| w.ends_with(b"\n")), "every write ends a line");
        assert_eq!(writes.concat().iter().filter(|&&b| b == b'\n').count(), 100);
    }

    /// The EventLogger's patch serialised into the line gives the line its JSON bytes give; an
    /// empty body is `"patch":null` either way, and bytes that are not JSON are refused.
    #[tokio::test]
    async fn an_observed_patch_is_written_as_its_json_bytes_are() {
        let writes = Writes::default();
        let sink = JsonLinesSink::new(Box::new(writes.clone()));
        let mut event = Event { message: "back-off \"app\"\n".into(), count: 3, ..Event::default() };
        event.last_timestamp = Some("2025-01-01T00:00:00Z".parse().unwrap());
        let patch = EventPatch::for_event(&event);
        sink.patch(&event, &patch.to_json()).await.unwrap();
        sink.patch_observed(&event, SinkPatch::Observed(&patch)).await.unwrap();
        sink.patch(&event, b"").await.unwrap();
        sink.patch_observed(&event, SinkPatch::Bytes(b"")).await.unwrap();
        assert!(matches!(
            sink.patch_observed(&event, SinkPatch::Bytes(b"{oops")).await,
            Err(SinkError::RequestConstruction(_))
        ));
        sink.flush().unwrap();
        let text = String::from_utf8(writes.0.lock().unwrap().concat()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert_eq!(lines[0], lines[1]);
        assert!(lines[0].contains(r#""patch":{"count":3,"lastTimestamp":"2025-01-01T00:00:00Z","message":"back-off"#));
        assert_eq!(lines[2], lines[3]);
        assert!(lines[2].ends_with(r#""patch":null}"#), "{}", lines[2]);
    }

    #[test]
    fn open_append_cuts_only_a_torn_last_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        // A long first line so the backwards scan crosses a block boundary.
        let whole = format!("{{\"a\":\"{}\"}}\n{{\"b\":1}}\n", "x".repeat(100_000));
        std::fs::write(&path, format!("{whole}{{\"c\":")).unwrap();
        let (mut file, torn) = JsonLinesSink::open_append(&path).unwrap();
        assert_eq!(torn, 5);
        file.write_all(b"{\"d\":2}\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), format!("{whole}{{\"d\":2}}\n"));

        let (_, torn) = JsonLinesSink::open_append(&path).unwrap();
        assert_eq!(torn, 0, "a file ending in a newline is left alone");
        std::fs::write(&path, "no newline at all").unwrap();
        assert_eq!(JsonLinesSink::open_append(&path).unwrap().1, 17);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
        let fresh = dir.path().join("new.jsonl");
        assert_eq!(JsonLinesSink::open_append(&fresh).unwrap().1, 0);
    }
}
