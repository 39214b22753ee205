//! Turns event streams, as they really arrive, into core/v1 [`Event`]s.
//!
//! [`Decoder`] is push-style and transport-agnostic: the caller feeds it one line at a time (from
//! a file, stdin, a file being followed, or an HTTP body) and gets each [`Decoded`] item or
//! [`DecodeError`] as soon as the document holding it is complete.
//!
//! # Accepted shapes (they may be mixed in one stream)
//! 1. JSON Lines of core/v1 Events, one compact object per line.
//! 2. Watch events `{"type": …, "object": {…}}` (`metav1.WatchEvent`), as the raw API watch
//!    stream and `kubectl get events -w --output-watch-events -o json` write them (spec §6.4,
//!    §6.5). `ADDED`, `MODIFIED` and `DELETED` give [`Decoded::Event`] with the
//!    [`WatchEventType`]; `BOOKMARK` gives [`Decoded::Bookmark`]; `ERROR` gives
//!    [`Decoded::WatchError`]. A `DELETED` object is the event's last state (the apiserver
//!    deletes events when their TTL expires); it is emitted like the others, tagged
//!    [`WatchEventType::Deleted`], and the caller decides what to do with it.
//! 3. Lists: an object with `items` (`"kind": "EventList"` or `"List"`, or no kind at all), and a
//!    top-level JSON array of events. Each element is decoded in order, with its own line.
//! 4. Concatenated pretty-printed documents, as `kubectl get events -w -o json` writes them
//!    (spec §6.5): documents end where their brackets balance, not at line ends.
//! 5. Replay lines `{"clock": RFC 3339, "event": {…}, "spam_filter_clock"?: RFC 3339}`.
//! 6. events.k8s.io/v1 and v1beta1 Events (`regarding`, `note`, `deprecated*`, …), converted to
//!    core/v1 exactly as the apiserver's `Convert_v1_Event_To_core_Event` does (spec §6.2):
//!    `regarding`→`involvedObject`, `note`→`message`, `deprecatedSource`→`source`,
//!    `deprecatedFirstTimestamp`/`deprecatedLastTimestamp`→`firstTimestamp`/`lastTimestamp`,
//!    `deprecatedCount`→`count`, `reportingController`→`reportingComponent`; `metadata`,
//!    `reason`, `type`, `action`, `eventTime`, `series`, `related` and `reportingInstance` carry
//!    over. The result has `kind: Event`, `apiVersion: v1`, as the core/v1 endpoint serves it.
//!
//! An object counts as a core/v1 Event when it has `involvedObject` (or is typed
//! `kind: Event, apiVersion: v1`), and as an events.k8s.io Event when its `apiVersion` (or,
//! for list items without one, the list's) starts with `events.k8s.io/`, or when it has
//! `regarding` and no `involvedObject`. Unknown fields are ignored. core/v1 objects are not
//! otherwise changed: list items without `kind`/`apiVersion` keep them empty.
//!
//! # Framing and recovery
//! A document starts at `{` or `[` and ends where its brackets balance; a small scanner tracks
//! bracket depth outside strings (honouring `\` escapes), so a one-line document is parsed
//! straight from the line and a multi-line one is buffered until it closes. Blank lines are
//! skipped. A malformed document costs one [`DecodeError`] and never the documents after it, and
//! a line costs at most one: the faults found on one line (a document that fails and the text
//! after where it seemed to close; bad items of a one-line list) are joined into one error, so
//! that a bad line counts once.
//! - A line that does not start a document (`not json`) is an error for that line.
//! - A complete document that fails to parse is an error naming the line it starts on; the
//!   message gives the exact position and a short excerpt.
//! - **Restart rule.** While a document is open, a line whose first character (column 0, no
//!   indentation) is `{` or `[` starts a new document, and the open one is reported as
//!   incomplete at its start line. Pretty printers (kubectl, `jq`, Go's `MarshalIndent`) never
//!   put a nested value at column 0, so this is where a truncated document meets the next one.
//!   The exception is a document that is not indented (hand- or script-written lists such as
//!   `[` / `{…},` / `{…}` / `]`): a column-0 value continues the document where the grammar
//!   allows a value, if it is the first element of a list that is the document or its `items`
//!   (not of a deeper list: a line of 100k `[` does not swallow the next document) or the
//!   document already has nested values at column 0. Hence the one ambiguity: a document cut
//!   off right after such a `[` takes the next column-0 document as that list's first element,
//!   and both are lost together; the error then says that the framing could not resync.
//! - A line that ends inside a string (JSON strings cannot span lines), a closing bracket that
//!   does not match, or a document over [`MAX_DOCUMENT_BYTES`] abandons the document with one
//!   error at its start line.
//! - After a document is abandoned, and after a garbage line that looks like the inside of a
//!   document (indented, or starting with `}`, `]`, `"` or `,`), the following lines of that
//!   shape are skipped silently as the broken document's tail, until a line starts at column 0
//!   with anything else.
//! - A line longer than [`MAX_LINE_BYTES`] is rejected (and abandons an open document).
//! - At the end of input, [`Decoder::finish`] reports a document that never closed.
//!
//! # Strings as Go reads them
//! An escape of an unpaired UTF-16 surrogate (`"\ud800"`, a lone `"\udc00"`) is read as
//! U+FFFD, as Go's `encoding/json` reads it, where serde_json would reject the document: a stream
//! that client-go or the apiserver accepts decodes to the same events (see `go_strings`). A
//! line of bytes that are not UTF-8 ([`Decoder::push_bytes`], and every source) is read as Go
//! reads it too: each bad byte is U+FFFD.

use std::fmt;

use crate::broadcaster::WatchEventType;
use chrono::DateTime;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::event::{
    CompactString, Event, EventSeries, EventSource, ObjectMeta, ObjectReference, Time, metav1_micro_time, metav1_time,
    nullable,
};

use super::go_strings;

/// Longest line accepted, in bytes (4 MiB). A longer line is rejected with an error instead of
/// being buffered; a reader in front of the decoder should stop reading a line at this size.
pub const MAX_LINE_BYTES: usize = 4 << 20;

/// Largest multi-line document buffered, in bytes (64 MiB), so that a document whose brackets
/// never close cannot grow without bound. Larger documents are abandoned with an error.
pub const MAX_DOCUMENT_BYTES: usize = 64 << 20;

/// Characters of input quoted in an error message.
const EXCERPT_CHARS: usize = 60;

/// Prefix of the events.k8s.io API versions (`events.k8s.io/v1`, `events.k8s.io/v1beta1`).
const EVENTS_API_PREFIX: &str = "events.k8s.io/";

/// Every `type` a watch envelope may carry (apimachinery `watch.EventType`).
#[derive(Debug, Clone, Copy)]
enum WatchKind {
    Event(WatchEventType),
    Bookmark,
    Error,
}

impl WatchKind {
    fn parse(s: &str) -> Option<Self> {
        Some(match s.parse::<WatchEventType>().ok()? {
            WatchEventType::Bookmark => WatchKind::Bookmark,
            WatchEventType::Error => WatchKind::Error,
            t => WatchKind::Event(t),
        })
    }
}

/// One item decoded from the stream.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant, reason = "events are the common case; boxing would cost an allocation each")]
pub enum Decoded {
    /// An event occurrence, converted to core/v1.
    Event {
        /// The event.
        event: Event,
        /// The replay line's `clock`; `None` outside replay lines.
        clock: Option<Time>,
        /// The replay line's `spam_filter_clock`, when it has one.
        spam_filter_clock: Option<Time>,
        /// The watch envelope's type when the event came in one.
        watch_type: Option<WatchEventType>,
        /// Line where the event's document (or, in a list, the item) starts, 1-based.
        line: u64,
    },
    /// A watch `BOOKMARK`: only its `metadata.resourceVersion` matters (spec §6.4).
    Bookmark {
        /// The resourceVersion to resume watching from.
        resource_version: String,
        /// Line of the envelope, 1-based.
        line: u64,
    },
    /// A watch `ERROR` envelope carrying a `metav1.Status`, e.g. `410 Expired` ("too old
    /// resource version") after which the watcher must re-list.
    WatchError {
        /// The Status `code` (HTTP status, e.g. 410).
        code: i32,
        /// The Status `reason` (e.g. `"Expired"`).
        reason: String,
        /// The Status `message`.
        message: String,
        /// Line of the envelope, 1-based.
        line: u64,
    },
}

impl Decoded {
    /// The 1-based line where this item starts.
    pub fn line(&self) -> u64 {
        match self {
            Decoded::Event { line, .. } | Decoded::Bookmark { line, .. } | Decoded::WatchError { line, .. } => *line,
        }
    }

    /// A short description for logs: `event`, `watch bookmark (resourceVersion 42)`,
    /// `watch error 410 Expired: too old resource version`.
    pub fn describe(&self) -> String {
        match self {
            Decoded::Event { .. } => "event".into(),
            Decoded::Bookmark { resource_version, .. } => {
                format!("watch bookmark (resourceVersion {resource_version})")
            }
            Decoded::WatchError { code, reason, message, .. } => format!("watch error {code} {reason}: {message}"),
        }
    }
}

/// A document or line that could not be decoded. Displays as `line 17: <what is wrong>`, where
/// the message says what was expected and quotes a short excerpt of the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct DecodeError {
    /// 1-based line where the bad document, list item or line starts.
    pub line: u64,
    /// What is wrong, with the exact position when known and an excerpt.
    pub message: String,
}

impl DecodeError {
    fn new(line: u64, message: impl Into<String>) -> Self {
        DecodeError { line, message: message.into() }
    }
}

type Emit<'e> = &'e mut dyn FnMut(Result<Decoded, DecodeError>);

/// The push-style stream decoder; see the [module docs](self) for the shapes it accepts and how
/// it recovers from damage. It counts lines itself and keeps at most one partial document.
#[derive(Debug, Default)]
pub struct Decoder {
    /// Lines pushed so far (the current line's number while it is processed).
    line: u64,
    /// Where the open multi-line document starts; `None` when no document is open.
    open: Option<Origin>,
    /// Text of the open document, its lines joined by `\n`.
    buf: String,
    scanner: Scanner,
    /// A document was abandoned: skip lines that look like its tail.
    skipping: bool,
}

impl Decoder {
    /// A decoder at line 0 with no open document.
    pub fn new() -> Self {
        Self::default()
    }

    /// A decoder whose next line is line `after + 1`, for decoding a stream in pieces: a piece
    /// given to it decodes exactly as it would through one decoder that read the whole stream
    /// and was [clean](Self::is_clean) after line `after`.
    pub fn after_line(after: u64) -> Self {
        Self { line: after, ..Self::default() }
    }

    /// No document is open and no broken document's tail is being skipped: the next line
    /// decodes the same whichever decoder reads it (one made with [`after_line`](Self::after_line)
    /// included).
    pub fn is_clean(&self) -> bool {
        self.open.is_none() && !self.skipping
    }

    /// Feeds one line, without its `\n` (it must not contain one; a trailing `\r` and a
    /// byte-order mark at the start of line 1 are ignored). Every item or error this line
    /// completes is passed to `emit`, in input order: usually none (a blank line, or inside a
    /// multi-line document) or one, so nothing is allocated to return them.
    pub fn push_line(&mut self, line: &str, mut emit: impl FnMut(Result<Decoded, DecodeError>)) {
        self.line += 1;
        let mut line = line.strip_suffix('\r').unwrap_or(line);
        if self.line == 1 {
            line = line.strip_prefix('\u{feff}').unwrap_or(line);
        }
        self.process(line, &mut emit);
    }

    /// As [`push_line`](Self::push_line), for a line of raw bytes, read as Go's `encoding/json`
    /// reads them: each byte of an invalid UTF-8 sequence is U+FFFD (inside a string, where Go
    /// reads it so; anywhere else the line stays as malformed as it was).
    pub fn push_bytes(&mut self, line: &[u8], emit: impl FnMut(Result<Decoded, DecodeError>)) {
        self.push_line(&go_strings::lossy_utf8(line), emit);
    }

    /// Ends the input. A document still open is returned as an error naming the line it started
    /// on; the decoder is then empty again (line numbers keep counting).
    pub fn finish(&mut self) -> Option<DecodeError> {
        self.open?;
        let err = self.abandon("incomplete document: the input ended before it closed");
        self.skipping = false;
        Some(err)
    }

    fn process(&mut self, line: &str, emit: Emit) {
        if line.len() > MAX_LINE_BYTES {
            return self.reject_long_line(line, emit);
        }
        if self.open.is_some() {
            if !self.starts_new_document(line) {
                return self.continue_document(line, emit);
            }
            let reason =
                format!("incomplete document: a new document starts at line {} before this one closed", self.line);
            emit(Err(self.abandon(&reason)));
        }
        if self.skipping {
            if looks_like_document_tail(line) {
                return;
            }
            self.skipping = false;
        }
        self.scan_fresh(line, 0, emit);
    }

    /// The restart rule (module docs): does `line` begin a new document while one is open?
    fn starts_new_document(&self, line: &str) -> bool {
        matches!(line.as_bytes().first(), Some(b'{' | b'[')) && !self.scanner.accepts_column0_value()
    }

    /// Scans `line[pos..]` with no document open: each complete document on it is decoded, and
    /// one left open is buffered. A line costs at most one error: when several things on it are
    /// wrong (a malformed document and the text after the point where it seemed to close), their
    /// messages are joined into one error, emitted after the line's other items, so that a bad
    /// line counts once (`bad_lines`) and `replay` writes one error line for it.
    fn scan_fresh(&mut self, line: &str, pos: usize, emit: Emit) {
        let this_line = self.line;
        let mut error: Option<DecodeError> = None;
        let mut one_error = |item: Result<Decoded, DecodeError>| match (item, &mut error) {
            (Err(e), None) if e.line == this_line => error = Some(e),
            (Err(e), Some(first)) if e.line == this_line => {
                first.message.push_str("; then ");
                first.message.push_str(&e.message);
            }
            (item, _) => emit(item),
        };
        self.scan_documents(line, pos, &mut one_error);
        if let Some(error) = error {
            emit(Err(error));
        }
    }

    /// [`scan_fresh`](Self::scan_fresh) without the one-error-per-line rule.
    fn scan_documents(&mut self, line: &str, mut pos: usize, emit: Emit) {
        let bytes = line.as_bytes();
        loop {
            pos = skip_whitespace(bytes, pos);
            let Some(&first) = bytes.get(pos) else { return };
            if first != b'{' && first != b'[' {
                return emit(Err(self.garbage(line, pos)));
            }
            let origin = Origin { line: self.line, col: pos };
            // Fast path: the rest of the line is exactly one document (the JSON Lines case).
            let rest = line[pos..].trim_end_matches([' ', '\t', '\r', '\n']);
            if rest.ends_with(['}', ']']) {
                if first == b'{'
                    && let Some(decoded) = decode_one_pass(rest, origin.line)
                {
                    return emit(Ok(decoded));
                }
                if let Some(fixed) = go_strings::replace_unpaired(rest) {
                    // As Go reads them (U+FFFD); the same length, so positions hold.
                    let line = format!("{}{fixed}", &line[..pos]);
                    return self.scan_documents(&line, pos, emit);
                }
                if let Ok(top) = parse_top(rest) {
                    return decode_top(&Doc { text: rest, origin }, top, emit);
                }
            }
            self.scanner.reset();
            match self.scanner.scan(bytes, pos) {
                Scan::Closed(end) => {
                    decode_document(&Doc { text: &line[pos..end], origin }, emit);
                    pos = end;
                }
                Scan::Open => {
                    self.open = Some(origin);
                    self.buf.push_str(&line[pos..]);
                    self.buf.push('\n');
                    return;
                }
                Scan::Broken(reason) => {
                    self.skipping = true;
                    let message = format!("{reason}; the document starts `{}`", excerpt(&line[pos..]));
                    return emit(Err(DecodeError::new(self.line, message)));
                }
            }
        }
    }

    /// Adds `line` to the open document; decodes it if it closes, then goes on with the rest of
    /// the line.
    fn continue_document(&mut self, line: &str, emit: Emit) {
        if self.buf.len() + line.len() >= MAX_DOCUMENT_BYTES {
            let reason = format!(
                "document abandoned: it grew past MAX_DOCUMENT_BYTES ({} MiB) at line {}",
                MAX_DOCUMENT_BYTES >> 20,
                self.line
            );
            return emit(Err(self.abandon(&reason)));
        }
        match self.scanner.scan(line.as_bytes(), 0) {
            Scan::Open => {
                self.buf.push_str(line);
                self.buf.push('\n');
            }
            Scan::Closed(end) => {
                self.buf.push_str(&line[..end]);
                let origin = self.open.take().unwrap_or_default();
                decode_document(&Doc { text: &self.buf, origin }, emit);
                self.clear_buffer();
                self.scan_fresh(line, end, emit);
            }
            Scan::Broken(reason) => {
                let reason = format!("document abandoned at line {}: {reason}", self.line);
                emit(Err(self.abandon(&reason)));
            }
        }
    }

    /// Drops the open document and returns the error describing it; skips its tail afterwards.
    fn abandon(&mut self, reason: &str) -> DecodeError {
        let start = self.open.take().map_or(self.line, |o| o.line);
        let mut message = format!(
            "{reason}; the document (still missing {}) starts `{}`",
            self.scanner.missing_closers(),
            excerpt(&self.buf)
        );
        if self.scanner.column0_values {
            // The framing could not resync inside it: say what went down with it.
            message.push_str(
                "; the framing could not resync: its lines that start at column 0 were read as its \
                 values (a list that is not indented) and are lost with it",
            );
        }
        self.clear_buffer();
        self.skipping = true;
        DecodeError::new(start, message)
    }

    fn reject_long_line(&mut self, line: &str, emit: Emit) {
        let size = format!("{} bytes, over MAX_LINE_BYTES ({} MiB)", line.len(), MAX_LINE_BYTES >> 20);
        let err = if self.open.is_some() {
            self.abandon(&format!("document abandoned: line {} is {size}", self.line))
        } else {
            self.skipping = true;
            let message = format!("line too long: {size}; skipped `{}`", excerpt(line));
            DecodeError::new(self.line, message)
        };
        emit(Err(err));
    }

    /// The error for text at `line[pos..]` that does not start a document.
    fn garbage(&mut self, line: &str, pos: usize) -> DecodeError {
        let found = excerpt(&line[pos..]);
        if pos > 0 && line[..pos].bytes().any(|b| !b.is_ascii_whitespace()) {
            return DecodeError::new(
                self.line,
                format!("unexpected text after a complete document at column {}: `{found}`", pos + 1),
            );
        }
        let mut message = format!(
            "expected a JSON object or array (an Event, a list, a watch event or a replay line), found `{found}`"
        );
        if looks_like_document_tail(line) {
            self.skipping = true;
            message.push_str("; skipping what looks like the rest of a broken document");
        }
        DecodeError::new(self.line, message)
    }

    fn clear_buffer(&mut self) {
        self.buf.clear();
        if self.buf.capacity() > MAX_LINE_BYTES {
            self.buf = String::new();
        }
        self.scanner.reset();
    }
}

/// Decodes a whole input held in memory (tests, small HTTP bodies): every item and every error,
/// each in input order, including [`Decoder::finish`]'s.
pub fn decode_str(input: &str) -> (Vec<Decoded>, Vec<DecodeError>) {
    let (mut items, mut errors) = (Vec::new(), Vec::new());
    let mut decoder = Decoder::new();
    let mut sink = |r: Result<Decoded, DecodeError>| match r {
        Ok(item) => items.push(item),
        Err(e) => errors.push(e),
    };
    for line in input.lines() {
        decoder.push_line(line, &mut sink);
    }
    errors.extend(decoder.finish());
    (items, errors)
}

/// Blank, indented, or starting with what only appears inside a document.
fn looks_like_document_tail(line: &str) -> bool {
    match line.as_bytes().first() {
        None => true,
        Some(b) => b.is_ascii_whitespace() || matches!(b, b'}' | b']' | b'"' | b','),
    }
}

fn skip_whitespace(bytes: &[u8], mut pos: usize) -> usize {
    while bytes.get(pos).is_some_and(u8::is_ascii_whitespace) {
        pos += 1;
    }
    pos
}

// ---------------------------------------------------------------------------------------------
// Framing: bracket depth outside strings.

/// How a scan of (part of) a line ended.
#[derive(Debug)]
enum Scan {
    /// The document's brackets balanced; the value is the byte index just past its end.
    Closed(usize),
    /// The line ended with the document still open.
    Open,
    /// The document cannot be valid JSON whatever follows.
    Broken(String),
}

/// Tracks a document's open brackets across lines. Bytes are enough: every byte of a multi-byte
/// UTF-8 character is ≥ 0x80, so none is mistaken for JSON punctuation.
#[derive(Debug, Default)]
struct Scanner {
    /// Open brackets, `{` or `[`, outermost first.
    stack: Vec<u8>,
    in_string: bool,
    escaped: bool,
    /// The last significant byte outside strings (`"` after a string).
    last: u8,
    /// A continuation line of this document began at column 0 with a nested value: the
    /// document is not indented, so column 0 says nothing about document boundaries.
    column0_values: bool,
}

impl Scanner {
    fn reset(&mut self) {
        self.stack.clear();
        self.in_string = false;
        self.escaped = false;
        self.last = 0;
        self.column0_values = false;
    }

    /// Scans `bytes[from..]`, continuing the current document (or starting one at `from`).
    fn scan(&mut self, bytes: &[u8], from: usize) -> Scan {
        let mut i = from;
        while i < bytes.len() {
            if self.in_string {
                i = self.scan_string(bytes, i);
                continue;
            }
            let b = bytes[i];
            match b {
                b' ' | b'\t' | b'\r' | b'\n' => {
                    i += 1;
                    continue;
                }
                b'}' | b']' => {
                    let opener = if b == b'}' { b'{' } else { b'[' };
                    if self.stack.last() != Some(&opener) {
                        return Scan::Broken(format!(
                            "`{}` at column {} does not match the open brackets",
                            b as char,
                            i + 1
                        ));
                    }
                    self.stack.pop();
                    if self.stack.is_empty() {
                        return Scan::Closed(i + 1);
                    }
                }
                _ => {
                    if i == 0 && !self.stack.is_empty() {
                        self.column0_values = true;
                    }
                    match b {
                        b'{' | b'[' => self.stack.push(b),
                        b'"' => self.in_string = true,
                        _ => {}
                    }
                }
            }
            self.last = b;
            i += 1;
        }
        if self.in_string {
            Scan::Broken("a string is still open at the end of the line (JSON strings cannot span lines)".to_owned())
        } else {
            Scan::Open
        }
    }

    /// Advances through string contents from `i`; returns the next index to look at.
    fn scan_string(&mut self, bytes: &[u8], i: usize) -> usize {
        if self.escaped {
            self.escaped = false;
            return i + 1;
        }
        match bytes[i..].iter().position(|&c| c == b'"' || c == b'\\') {
            None => bytes.len(),
            Some(p) => {
                if bytes[i + p] == b'\\' {
                    self.escaped = true;
                } else {
                    self.in_string = false;
                    self.last = b'"';
                }
                i + p + 1
            }
        }
    }

    /// The restart rule's exception: may a column-0 value continue this document? Only where
    /// the grammar allows a value, and only as an array's first element or in a document that
    /// already has nested values at column 0.
    fn accepts_column0_value(&self) -> bool {
        let in_array = self.stack.last() == Some(&b'[');
        match self.last {
            // Only the first element of a list that is the document or its `items` (`[` or
            // `{"items":[` alone, then `{…},` lines): after a deeper `[` (`[[[…`) a column-0
            // document is the next document.
            b'[' => matches!(self.stack.as_slice(), [b'['] | [b'{', b'[']) || self.column0_values,
            b',' => in_array && self.column0_values,
            b':' => self.column0_values,
            _ => false,
        }
    }

    /// The closing brackets the open document still needs, innermost first, e.g. "`]}`".
    fn missing_closers(&self) -> String {
        const SHOWN: usize = 8;
        let closers: String = self.stack.iter().rev().take(SHOWN).map(|&b| if b == b'{' { '}' } else { ']' }).collect();
        if self.stack.len() > SHOWN {
            format!("`{closers}…`, {} brackets", self.stack.len())
        } else {
            format!("`{closers}`")
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Documents.

/// A position in the input: 1-based line, 0-based byte column.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Origin {
    line: u64,
    col: usize,
}

/// A complete document's text and where it starts in the input.
struct Doc<'a> {
    text: &'a str,
    origin: Origin,
}

impl<'a> Doc<'a> {
    /// Byte offset of `sub`, a slice of this document's text.
    fn offset_of(&self, sub: &str) -> usize {
        (sub.as_ptr() as usize).saturating_sub(self.text.as_ptr() as usize).min(self.text.len())
    }

    /// A cursor at the document's start.
    fn start(&self) -> Cursor<'a> {
        Cursor { text: self.text, off: 0, pos: self.origin }
    }

    /// Parses `raw` (a slice of this document at or after `at`) as `T`; errors name the line of
    /// `at` and give the exact position of the problem.
    fn parse<T: Deserialize<'a>>(&self, at: Cursor<'a>, raw: &'a str, ctx: Context) -> Result<T, DecodeError> {
        serde_json::from_str(raw).map_err(|e| self.json_error(at, raw, ctx, &e))
    }

    /// [`Doc::parse`] for JSON objects only: serde would also read a struct from an array.
    fn parse_object<T: Deserialize<'a>>(&self, at: Cursor<'a>, raw: &'a str, ctx: Context) -> Result<T, DecodeError> {
        if !raw.starts_with('{') {
            let message = format!("{ctx}expected a JSON object, found `{}`", excerpt(raw));
            return Err(DecodeError::new(at.pos.line, message));
        }
        self.parse(at, raw, ctx)
    }

    fn json_error(&self, mut at: Cursor<'a>, raw: &str, ctx: Context, e: &serde_json::Error) -> DecodeError {
        let line = at.pos.line;
        let full = e.to_string();
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        let what = full.strip_suffix(&suffix).unwrap_or(&full);
        let kind = if e.is_data() { "" } else { "malformed JSON: " };
        let mut message = format!("{ctx}{kind}{what}");
        if e.line() > 0 {
            let off = self.offset_of(raw) + offset_in(raw, e.line(), e.column());
            let p = at.advance_to(off);
            let place = if p.line == line { String::new() } else { format!("line {} ", p.line) };
            message.push_str(&format!(" at {place}column {}, near `{}`", p.col + 1, excerpt_around(self.text, off)));
        }
        DecodeError::new(line, message)
    }
}

/// Byte offset in `s` of serde_json's 1-based (line, column).
fn offset_in(s: &str, line: usize, column: usize) -> usize {
    let line_start = if line <= 1 { 0 } else { s.match_indices('\n').nth(line - 2).map_or(s.len(), |(i, _)| i + 1) };
    (line_start + column.saturating_sub(1)).min(s.len())
}

/// Walks a document forwards, turning byte offsets into input positions without rescanning.
#[derive(Debug, Clone, Copy)]
struct Cursor<'a> {
    text: &'a str,
    off: usize,
    pos: Origin,
}

impl Cursor<'_> {
    fn advance_to(&mut self, off: usize) -> Origin {
        let seg = &self.text.as_bytes()[self.off..off.max(self.off)];
        match seg.iter().rposition(|&b| b == b'\n') {
            None => self.pos.col += seg.len(),
            Some(nl) => {
                self.pos.line += seg.iter().filter(|&&b| b == b'\n').count() as u64;
                self.pos.col = seg.len() - nl - 1;
            }
        }
        self.off = self.off.max(off);
        self.pos
    }
}

/// Which part of a document an error is about (prefixes the message).
#[derive(Debug, Clone, Copy)]
enum Context {
    Document,
    WatchObject,
    ReplayEvent,
    Items,
    Item(usize),
    Element(usize),
}

impl fmt::Display for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Context::Document => Ok(()),
            Context::WatchObject => f.write_str("in the watch event's `object`: "),
            Context::ReplayEvent => f.write_str("in the replay line's `event`: "),
            Context::Items => f.write_str("in `items`: "),
            Context::Item(i) => write!(f, "in `items[{i}]`: "),
            Context::Element(i) => write!(f, "in array element [{i}]: "),
        }
    }
}

/// Every field of every accepted object: watch envelope, list, replay line, core/v1 and
/// events.k8s.io Event. One parse decides the shape; unknown fields are ignored.
///
/// `N` is what a watch envelope's `object` and a replay line's `event` are read as: their raw
/// text by default (the exact path, [`decode_top`], which parses them in a second step and
/// names them in its errors), or an [`Inner`] Wire read in the same pass ([`decode_one_pass`]).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", expecting = "a JSON object", bound(deserialize = "N: Deserialize<'de>"))]
struct Wire<'a, N = &'a RawValue> {
    #[serde(default, deserialize_with = "nullable")]
    kind: CompactString,
    #[serde(default, deserialize_with = "nullable")]
    api_version: CompactString,
    // Watch envelope (`type` is shared with events), list, replay line.
    #[serde(default)]
    object: Option<N>,
    #[serde(borrow, default)]
    items: Option<&'a RawValue>,
    #[serde(default)]
    event: Option<N>,
    #[serde(default)]
    clock: Option<String>,
    #[serde(rename = "spam_filter_clock", default)]
    spam_filter_clock: Option<String>,
    // Fields both Event APIs have.
    #[serde(default, deserialize_with = "nullable")]
    metadata: ObjectMeta,
    #[serde(rename = "type", default, deserialize_with = "nullable")]
    type_: CompactString,
    #[serde(default, deserialize_with = "nullable")]
    reason: CompactString,
    #[serde(default, deserialize_with = "nullable")]
    action: CompactString,
    #[serde(default, with = "metav1_micro_time")]
    event_time: Option<Time>,
    #[serde(default)]
    series: Option<Box<EventSeries>>,
    #[serde(default)]
    related: Option<Box<ObjectReference>>,
    #[serde(default, deserialize_with = "nullable")]
    reporting_instance: CompactString,
    // core/v1 only.
    #[serde(default)]
    involved_object: Option<ObjectReference>,
    #[serde(default, deserialize_with = "nullable")]
    message: CompactString,
    #[serde(default, deserialize_with = "nullable")]
    source: EventSource,
    #[serde(default, with = "metav1_time")]
    first_timestamp: Option<Time>,
    #[serde(default, with = "metav1_time")]
    last_timestamp: Option<Time>,
    #[serde(default, deserialize_with = "nullable")]
    count: i32,
    #[serde(default, deserialize_with = "nullable")]
    reporting_component: CompactString,
    // events.k8s.io only.
    #[serde(default)]
    regarding: Option<ObjectReference>,
    #[serde(default, deserialize_with = "nullable")]
    note: CompactString,
    #[serde(default, deserialize_with = "nullable")]
    reporting_controller: CompactString,
    #[serde(default, deserialize_with = "nullable")]
    deprecated_source: EventSource,
    #[serde(default, with = "metav1_time")]
    deprecated_first_timestamp: Option<Time>,
    #[serde(default, with = "metav1_time")]
    deprecated_last_timestamp: Option<Time>,
    #[serde(default, deserialize_with = "nullable")]
    deprecated_count: i32,
}

/// Which Event API an object is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    Core,
    Events,
}

impl<N> Wire<'_, N> {
    fn is_envelope(&self) -> bool {
        self.object.is_some() || WatchKind::parse(&self.type_).is_some()
    }

    fn is_replay(&self) -> bool {
        self.event.is_some() || self.clock.is_some()
    }

    fn is_list(&self) -> bool {
        self.items.is_some() || self.kind.ends_with("List")
    }

    /// The object's Event API (module docs); `inherited_api` is a list's `apiVersion`.
    fn api(&self, inherited_api: &str) -> Option<Api> {
        let api_version = if self.api_version.is_empty() { inherited_api } else { &self.api_version };
        if api_version.starts_with(EVENTS_API_PREFIX) {
            Some(Api::Events)
        } else if self.involved_object.is_some() || (self.kind == "Event" && self.api_version == "v1") {
            Some(Api::Core)
        } else if self.regarding.is_some() {
            Some(Api::Events)
        } else {
            None
        }
    }

    /// The object as a core/v1 Event, or why it is not an event.
    ///
    /// Takes the fields it uses out of `self` (which is dropped next) rather than `self`: a
    /// boxed Wire is ~1.3 KB, which taking it out of its box copied whole.
    fn take_event(&mut self, inherited_api: &str) -> Result<Event, String> {
        match self.api(inherited_api) {
            Some(api) => Ok(self.convert(api)),
            None => Err(self.not_an_event()),
        }
    }

    /// Builds the core/v1 Event; for events.k8s.io as `Convert_v1_Event_To_core_Event`
    /// (and `Convert_v1beta1_Event_To_core_Event`, the same mapping) do.
    fn convert(&mut self, api: Api) -> Event {
        use std::mem::take;
        let mut event = Event {
            metadata: take(&mut self.metadata),
            reason: take(&mut self.reason),
            type_: take(&mut self.type_),
            event_time: self.event_time,
            series: self.series.take(),
            action: take(&mut self.action),
            related: self.related.take(),
            reporting_instance: take(&mut self.reporting_instance),
            ..Event::default()
        };
        match api {
            Api::Core => {
                event.kind = take(&mut self.kind);
                event.api_version = take(&mut self.api_version);
                event.involved_object = self.involved_object.take().unwrap_or_default();
                event.message = take(&mut self.message);
                event.source = take(&mut self.source);
                event.first_timestamp = self.first_timestamp;
                event.last_timestamp = self.last_timestamp;
                event.count = self.count;
                event.reporting_component = take(&mut self.reporting_component);
            }
            Api::Events => {
                event.kind = "Event".into();
                event.api_version = "v1".into();
                event.involved_object = self.regarding.take().unwrap_or_default();
                event.message = take(&mut self.note);
                event.source = take(&mut self.deprecated_source);
                event.first_timestamp = self.deprecated_first_timestamp;
                event.last_timestamp = self.deprecated_last_timestamp;
                event.count = self.deprecated_count;
                event.reporting_component = take(&mut self.reporting_controller);
            }
        }
        event
    }

    fn not_an_event(&self) -> String {
        let mut message =
            "not an event: expected `involvedObject` (core/v1 Event), `regarding` (events.k8s.io Event), \
             a watch event {type, object}, a list with `items` or a replay line {clock, event}"
                .to_owned();
        if !self.kind.is_empty() {
            message.push_str(&format!("; found kind `{}`", excerpt(&self.kind)));
        }
        if self.kind == "Status" {
            message.push_str(&format!(" ({}: {})", self.reason, excerpt(&self.message)));
        }
        message
    }
}

/// A watch envelope's `object` or a replay line's `event` read in the same pass as the line
/// ([`decode_one_pass`]): a JSON object only (serde would also read a struct from an array),
/// whose own `object` / `event` are kept raw, as the exact path's second step reads them.
struct Inner<'a>(Box<Wire<'a>>);

impl<'de: 'a, 'a> Deserialize<'de> for Inner<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Wire::deserialize(ObjectsOnly(d)).map(|w| Inner(Box::new(w)))
    }
}

/// A deserializer that reads structs from JSON objects only.
struct ObjectsOnly<D>(D);

impl<'de, D: serde::Deserializer<'de>> serde::Deserializer<'de> for ObjectsOnly<D> {
    type Error = D::Error;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_map(visitor)
    }

    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_map(visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option
        unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

/// The common documents — a core/v1 or events.k8s.io Event, a watch event `ADDED`, `MODIFIED`
/// or `DELETED`, a replay line — on one line or several, decoded in one pass over the text (the
/// exact path reads a nested `object` / `event` twice: once to find its end, once to decode
/// it). `None` for anything else, and for any document with a problem: the exact path then
/// decodes it and words the error, so what comes out is exactly the exact path's.
fn decode_one_pass(text: &str, line: u64) -> Option<Decoded> {
    if starts_like_outer(text)
        && let Ok(outer) = serde_json::from_str::<Outer<'_>>(text)
    {
        return if outer.object.is_some() || WatchKind::parse(&outer.type_).is_some() {
            one_pass_envelope(&outer.type_, outer.object, line)
        } else if outer.event.is_some() || outer.clock.is_some() {
            one_pass_replay(outer.clock, outer.spam_filter_clock, outer.event, line)
        } else {
            None // neither: the exact path says why
        };
    }
    let mut wire: Wire<'_, Inner<'_>> = serde_json::from_str(text).ok()?;
    if wire.is_envelope() {
        one_pass_envelope(&wire.type_, wire.object, line)
    } else if wire.is_replay() {
        one_pass_replay(wire.clock.as_deref(), wire.spam_filter_clock.as_deref(), wire.event, line)
    } else if wire.is_list() {
        None
    } else {
        wire.take_event("").ok().map(|event| occurrence(event, None, line))
    }
}

/// [`decode_one_pass`] of a watch envelope: its `type` and `object`.
fn one_pass_envelope(type_: &str, object: Option<Inner<'_>>, line: u64) -> Option<Decoded> {
    let Some(WatchKind::Event(t)) = WatchKind::parse(type_) else { return None };
    let event = object?.0.take_event("").ok()?;
    Some(occurrence(event, Some(t), line))
}

/// [`decode_one_pass`] of a replay line: its clocks and `event`.
fn one_pass_replay(
    clock: Option<&str>,
    spam_filter_clock: Option<&str>,
    event: Option<Inner<'_>>,
    line: u64,
) -> Option<Decoded> {
    let clock = parse_clock("clock", clock?, line).ok()?;
    let spam_filter_clock = spam_filter_clock.map(|c| parse_clock("spam_filter_clock", c, line)).transpose().ok()?;
    let event = event?.0.take_event("").ok()?;
    Some(Decoded::Event { event, clock: Some(clock), spam_filter_clock, watch_type: None, line })
}

/// Whether the object `text` opens with one of [`Outer`]'s keys: a bare event (whose first key
/// is `kind`, `apiVersion` or `metadata` as the API server writes it) is not tried as an
/// [`Outer`], whose failed read would cost an error message.
fn starts_like_outer(text: &str) -> bool {
    let first_key = text.strip_prefix('{').unwrap_or(text).trim_start_matches([' ', '\t', '\r', '\n']);
    ["\"clock\"", "\"event\"", "\"type\"", "\"object\"", "\"spam_filter_clock\""]
        .iter()
        .any(|key| first_key.starts_with(key))
}

/// A replay line or a watch envelope with none but its own fields, as
/// [`decode_one_pass`] reads them first: the ~1.3 KB [`Wire`] that a bare event needs was built,
/// moved and dropped for every such line. Any other field fails the parse at that key, and the
/// document is read as a [`Wire`] instead; what comes out is the same either way.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a JSON object")]
struct Outer<'a> {
    #[serde(rename = "type", default, deserialize_with = "nullable")]
    type_: CompactString,
    #[serde(default)]
    object: Option<Inner<'a>>,
    #[serde(default)]
    event: Option<Inner<'a>>,
    /// Borrowed: a clock with escapes in it (never an RFC 3339 one) fails here, and the line
    /// is read as a [`Wire`].
    #[serde(default)]
    clock: Option<&'a str>,
    #[serde(rename = "spam_filter_clock", default)]
    spam_filter_clock: Option<&'a str>,
}

/// `metav1.Status`, the object of an `ERROR` watch event.
#[derive(Debug, Default, Deserialize)]
#[serde(expecting = "a metav1.Status object")]
struct Status {
    #[serde(default, deserialize_with = "nullable")]
    code: i32,
    #[serde(default, deserialize_with = "nullable")]
    reason: String,
    #[serde(default, deserialize_with = "nullable")]
    message: String,
}

/// The object of a `BOOKMARK` watch event: only its metadata matters.
#[derive(Debug, Default, Deserialize)]
#[serde(expecting = "a JSON object")]
struct MetadataOnly {
    #[serde(default, deserialize_with = "nullable")]
    metadata: ObjectMeta,
}

fn occurrence(event: Event, watch_type: Option<WatchEventType>, line: u64) -> Decoded {
    Decoded::Event { event, clock: None, spam_filter_clock: None, watch_type, line }
}

/// A syntactically valid top-level document, before its contents are decoded.
enum Top<'a> {
    Array(Vec<&'a RawValue>),
    Object(Box<Wire<'a>>),
}

fn parse_top(text: &str) -> Result<Top<'_>, serde_json::Error> {
    if text.starts_with('[') {
        serde_json::from_str(text).map(Top::Array)
    } else {
        serde_json::from_str(text).map(|w| Top::Object(Box::new(w)))
    }
}

/// Decodes one complete document (an object or an array) and emits what it holds: in one
/// pass when it is one of the common shapes ([`decode_one_pass`]; a multi-line document such as
/// `kubectl -o json --output-watch-events` prints), else by the exact path.
fn decode_document(doc: &Doc<'_>, emit: Emit) {
    if doc.text.starts_with('{')
        && let Some(decoded) = decode_one_pass(doc.text, doc.origin.line)
    {
        return emit(Ok(decoded));
    }
    if let Some(fixed) = go_strings::replace_unpaired(doc.text) {
        return decode_document(&Doc { text: &fixed, origin: doc.origin }, emit);
    }
    match parse_top(doc.text) {
        Ok(top) => decode_top(doc, top, emit),
        Err(e) => emit(Err(doc.json_error(doc.start(), doc.text, Context::Document, &e))),
    }
}

fn decode_top<'a>(doc: &Doc<'a>, top: Top<'a>, emit: Emit) {
    let line = doc.origin.line;
    let mut wire = match top {
        Top::Array(elements) => return decode_items(doc, &elements, "", Context::Element, emit),
        Top::Object(wire) => *wire,
    };
    if wire.is_envelope() {
        emit(decode_envelope(doc, wire));
    } else if wire.is_replay() {
        emit(decode_replay(doc, wire));
    } else if wire.is_list() {
        decode_list(doc, wire, emit);
    } else {
        emit(wire.take_event("").map(|e| occurrence(e, None, line)).map_err(|m| DecodeError::new(line, m)));
    }
}

/// Parses `raw` as an event of either API.
fn parse_event<'a>(
    doc: &Doc<'a>,
    at: Cursor<'a>,
    raw: &'a str,
    inherited_api: &str,
    ctx: Context,
) -> Result<Event, DecodeError> {
    let mut wire: Wire<'a> = doc.parse_object(at, raw, ctx)?;
    wire.take_event(inherited_api).map_err(|m| DecodeError::new(at.pos.line, format!("{ctx}{m}")))
}

fn decode_envelope<'a>(doc: &Doc<'a>, wire: Wire<'a>) -> Result<Decoded, DecodeError> {
    let at = doc.start();
    let line = doc.origin.line;
    let Some(kind) = WatchKind::parse(&wire.type_) else {
        let message = format!(
            "watch event with unknown type `{}`: expected ADDED, MODIFIED, DELETED, BOOKMARK or ERROR",
            excerpt(&wire.type_)
        );
        return Err(DecodeError::new(line, message));
    };
    let Some(object) = wire.object else {
        return Err(DecodeError::new(line, format!("watch event {} has no `object`", wire.type_)));
    };
    match kind {
        WatchKind::Event(t) => {
            parse_event(doc, at, object.get(), "", Context::WatchObject).map(|e| occurrence(e, Some(t), line))
        }
        WatchKind::Bookmark => {
            let meta: MetadataOnly = doc.parse_object(at, object.get(), Context::WatchObject)?;
            let resource_version = meta.metadata.resource_version;
            if resource_version.is_empty() {
                return Err(DecodeError::new(line, "watch event BOOKMARK has no `object.metadata.resourceVersion`"));
            }
            Ok(Decoded::Bookmark { resource_version: resource_version.to_string(), line })
        }
        WatchKind::Error => {
            let s: Status = doc.parse_object(at, object.get(), Context::WatchObject)?;
            Ok(Decoded::WatchError { code: s.code, reason: s.reason, message: s.message, line })
        }
    }
}

fn decode_replay<'a>(doc: &Doc<'a>, wire: Wire<'a>) -> Result<Decoded, DecodeError> {
    let line = doc.origin.line;
    let (Some(raw), Some(clock)) = (wire.event, wire.clock.as_deref()) else {
        let missing = if wire.event.is_none() { "event" } else { "clock" };
        return Err(DecodeError::new(
            line,
            format!("replay line has no `{missing}`: expected {{\"clock\": RFC 3339, \"event\": {{…}}}}"),
        ));
    };
    let clock = parse_clock("clock", clock, line)?;
    let spam_filter_clock =
        wire.spam_filter_clock.as_deref().map(|c| parse_clock("spam_filter_clock", c, line)).transpose()?;
    let event = parse_event(doc, doc.start(), raw.get(), "", Context::ReplayEvent)?;
    Ok(Decoded::Event { event, clock: Some(clock), spam_filter_clock, watch_type: None, line })
}

fn parse_clock(field: &str, s: &str, line: u64) -> Result<Time, DecodeError> {
    DateTime::parse_from_rfc3339(s).map(|t| t.to_utc()).map_err(|e| {
        DecodeError::new(line, format!("replay `{field}` is not an RFC 3339 time ({e}): `{}`", excerpt(s)))
    })
}

fn decode_list<'a>(doc: &Doc<'a>, wire: Wire<'a>, emit: Emit) {
    let Some(items) = wire.items else { return };
    match doc.parse::<Option<Vec<&RawValue>>>(doc.start(), items.get(), Context::Items) {
        Ok(items) => decode_items(doc, &items.unwrap_or_default(), &wire.api_version, Context::Item, emit),
        Err(e) => emit(Err(e)),
    }
}

/// Decodes list items or array elements in order, each reporting its own start line.
fn decode_items<'a>(doc: &Doc<'a>, items: &[&'a RawValue], inherited_api: &str, ctx: fn(usize) -> Context, emit: Emit) {
    let mut cursor = doc.start();
    for (i, item) in items.iter().enumerate() {
        let raw = item.get();
        let line = cursor.advance_to(doc.offset_of(raw)).line;
        let event = parse_event(doc, cursor, raw, inherited_api, ctx(i));
        emit(event.map(|e| occurrence(e, None, line)));
    }
}

// ---------------------------------------------------------------------------------------------
// Excerpts for error messages.

/// The start of `s`, whitespace runs collapsed to one space, at most [`EXCERPT_CHARS`]
/// characters (then `…`).
fn excerpt(s: &str) -> String {
    let mut out = String::new();
    let mut chars = 0;
    let words = s.split(|c: char| c.is_whitespace() || c.is_control());
    for word in words.filter(|w| !w.is_empty()) {
        let space = (!out.is_empty()).then_some(' ');
        for c in space.into_iter().chain(word.chars()) {
            if chars == EXCERPT_CHARS {
                out.push('…');
                return out;
            }
            out.push(c);
            chars += 1;
        }
    }
    out
}

/// About [`EXCERPT_CHARS`] characters of `text` centred on byte `off`.
fn excerpt_around(text: &str, off: usize) -> String {
    let half = EXCERPT_CHARS / 2;
    let mut start = off.saturating_sub(half).min(text.len());
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    let mut out = if start > 0 { "…".to_owned() } else { String::new() };
    out.push_str(&excerpt(&text[start..]));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // Real watch lines, verbatim from SumoLogic/sumologic-kubernetes-fluentd (Apache-2.0),
    // fluent-plugin-events/test/resources/api_watch_events_v1.txt lines 1, 4 and 8.
    const SUMO_ADDED: &str = r#"{"type":"ADDED","object":{"kind":"Event","apiVersion":"v1","metadata":{"name":"fluentd-8657bcb875-5p9cd.15ae9d646156dad4","namespace":"sumologic","selfLink":"/api/v1/namespaces/sumologic/events/fluentd-8657bcb875-5p9cd.15ae9d646156dad4","uid":"00037925-9f65-11e9-965c-025000000001","resourceVersion":"2336941","creationTimestamp":"2019-07-05T20:39:35Z"},"involvedObject":{"kind":"Pod","namespace":"sumologic","name":"fluentd-8657bcb875-5p9cd","uid":"fffc91c6-9f64-11e9-965c-025000000001","apiVersion":"v1","resourceVersion":"2336925"},"reason":"Scheduled","message":"Successfully assigned fluentd-8657bcb875-5p9cd to docker-for-desktop","source":{"component":"default-scheduler"},"firstTimestamp":"2019-07-05T20:39:35Z","lastTimestamp":"2019-07-05T20:39:35Z","count":1,"type":"Normal","eventTime":null,"reportingComponent":"","reportingInstance":""}}"#;
    const SUMO_MODIFIED: &str = r#"{"type":"MODIFIED","object":{"kind":"Event","apiVersion":"v1","metadata":{"name":"fluentd-8657bcb875.15ae9d64620be8d4","namespace":"sumologic","selfLink":"/api/v1/namespaces/sumologic/events/fluentd-8657bcb875.15ae9d64620be8d4","uid":"0006d68d-9f65-11e9-965c-025000000001","resourceVersion":"2336945","creationTimestamp":"2019-07-05T20:39:35Z"},"involvedObject":{"kind":"ReplicaSet","namespace":"sumologic","name":"fluentd-8657bcb875","uid":"fff91f05-9f64-11e9-965c-025000000001","apiVersion":"extensions","resourceVersion":"2336920"},"reason":"SuccessfulCreate","message":"Created pod: fluentd-8657bcb875-g6g5g","source":{"component":"replicaset-controller"},"firstTimestamp":"2019-07-05T20:39:35Z","lastTimestamp":"2019-07-05T20:39:35Z","count":1,"type":"Normal","eventTime":null,"reportingComponent":"","reportingInstance":""}}"#;
    const SUMO_DELETED: &str = r#"{"type":"DELETED","object":{"kind":"Event","apiVersion":"v1","metadata":{"name":"fluentd-events-597cbf49bf-j9f9j.15ae9d64680f7124","namespace":"sumologic","selfLink":"/api/v1/namespaces/sumologic/events/fluentd-events-597cbf49bf-j9f9j.15ae9d64680f7124","uid":"0010fe3f-9f65-11e9-965c-025000000001","resourceVersion":"2336955","creationTimestamp":"2019-07-05T20:39:35Z"},"involvedObject":{"kind":"Pod","namespace":"sumologic","name":"fluentd-events-597cbf49bf-j9f9j","uid":"fffcc9d8-9f64-11e9-965c-025000000001","apiVersion":"v1","resourceVersion":"2336927"},"reason":"SuccessfulMountVolume","message":"MountVolume.SetUp succeeded for volume \"config-volume\" ","source":{"component":"kubelet","host":"docker-for-desktop"},"firstTimestamp":"2019-07-05T20:39:35Z","lastTimestamp":"2019-07-05T20:39:35Z","count":1,"type":"Normal","eventTime":null,"reportingComponent":"","reportingInstance":""}}"#;
    // Same repository, api_watch_events_v1beta1.txt line 7: an events.k8s.io/v1beta1 watch line.
    const SUMO_V1BETA1: &str = r#"{"type":"ADDED","object":{"kind":"Event","apiVersion":"events.k8s.io/v1beta1","metadata":{"name":"fluentd-8657bcb875-tn5sb.15afa85b9adaad28","namespace":"sumologic","selfLink":"/apis/events.k8s.io/v1beta1/namespaces/sumologic/events/fluentd-8657bcb875-tn5sb.15afa85b9adaad28","uid":"76d0d317-a7ee-11e9-80e5-025000000001","resourceVersion":"2718374","creationTimestamp":"2019-07-16T17:23:44Z"},"eventTime":null,"reportingInstance":"","action":"","reason":"Failed","regarding":{"kind":"Pod","namespace":"sumologic","name":"fluentd-8657bcb875-tn5sb","uid":"636c7d92-a210-11e9-965c-025000000001","apiVersion":"v1","resourceVersion":"2460607","fieldPath":"spec.containers{fluentd}"},"note":"Error: ImagePullBackOff","type":"Warning","deprecatedSource":{"component":"kubelet","host":"docker-for-desktop"},"deprecatedFirstTimestamp":"2019-07-09T06:11:47Z","deprecatedLastTimestamp":"2019-07-16T17:23:44Z","deprecatedCount":4491}}"#;
    // Same repository, the start of api_list_events_v1beta1.json: a pretty events.k8s.io/v1beta1
    // EventList whose items carry no apiVersion (verbatim lines 1-39, list closed after item 0).
    const SUMO_V1BETA1_LIST: &str = r#"{
    "kind": "EventList",
    "apiVersion": "events.k8s.io/v1beta1",
    "metadata": {
      "selfLink": "/apis/events.k8s.io/v1beta1/namespaces/sumologic/events",
      "resourceVersion": "2721303"
    },
    "items": [
      {
        "metadata": {
          "name": "fluentd-8657bcb875-mj2ft.15afa857956ee9e8",
          "namespace": "sumologic",
          "selfLink": "/apis/events.k8s.io/v1beta1/namespaces/sumologic/events/fluentd-8657bcb875-mj2ft.15afa857956ee9e8",
          "uid": "645cf1d6-a210-11e9-965c-025000000001",
          "resourceVersion": "2721285",
          "creationTimestamp": "2019-07-09T06:11:29Z"
        },
        "eventTime": null,
        "reportingInstance": "",
        "action": "",
        "reason": "Pulling",
        "regarding": {
          "kind": "Pod",
          "namespace": "sumologic",
          "name": "fluentd-8657bcb875-mj2ft",
          "uid": "636844c0-a210-11e9-965c-025000000001",
          "apiVersion": "v1",
          "resourceVersion": "2460599",
          "fieldPath": "spec.containers{fluentd}"
        },
        "note": "pulling image \"sumologic/kubernetes-fluentd\"",
        "type": "Normal",
        "deprecatedSource": {
          "component": "kubelet",
          "host": "docker-for-desktop"
        },
        "deprecatedFirstTimestamp": "2019-07-09T06:11:29Z",
        "deprecatedLastTimestamp": "2019-07-16T18:04:00Z",
        "deprecatedCount": 9534
      }
    ]
}"#;
    // vmware-tanzu/sonobuoy (Apache-2.0), results-0.10.tar.gz resources/ns/default/Events.json:
    // its first two array elements, verbatim, with the array closed after them.
    const SONOBUOY_ARRAY: &str = r#"[{"metadata":{"name":"ip-10-0-26-239.14ffe954c1aec5e8","namespace":"default","selfLink":"/api/v1/namespaces/default/events/ip-10-0-26-239.14ffe954c1aec5e8","uid":"676122a0-e027-11e7-8132-0254a9767590","resourceVersion":"753","creationTimestamp":"2017-12-13T17:02:30Z"},"involvedObject":{"kind":"Node","name":"ip-10-0-26-239","uid":"ip-10-0-26-239"},"reason":"Starting","message":"Starting kube-proxy.","source":{"component":"kube-proxy","host":"ip-10-0-26-239"},"firstTimestamp":"2017-12-13T17:02:30Z","lastTimestamp":"2017-12-13T17:02:30Z","count":1,"type":"Normal"},{"metadata":{"name":"ip-10-0-26-239.us-west-2.compute.internal.14ffe951a475012d","namespace":"default","selfLink":"/api/v1/namespaces/default/events/ip-10-0-26-239.us-west-2.compute.internal.14ffe951a475012d","uid":"5f65d057-e027-11e7-8132-0254a9767590","resourceVersion":"656","creationTimestamp":"2017-12-13T17:02:16Z"},"involvedObject":{"kind":"Node","name":"ip-10-0-26-239.us-west-2.compute.internal","uid":"ip-10-0-26-239.us-west-2.compute.internal"},"reason":"Starting","message":"Starting kubelet.","source":{"component":"kubelet","host":"ip-10-0-26-239.us-west-2.compute.internal"},"firstTimestamp":"2017-12-13T17:02:16Z","lastTimestamp":"2017-12-13T17:02:16Z","count":1,"type":"Normal"}]"#;

    // `kubectl get events -w -o json` output (spec §6.5): pretty, 4-space indent, keys sorted,
    // one document after another. Written for this test; the message has escaped quotes,
    // brackets and a trailing escaped backslash to exercise the scanner. 33 lines.
    const KUBECTL_PRETTY: &str = r#"{
    "apiVersion": "v1",
    "count": 1,
    "eventTime": null,
    "firstTimestamp": "2025-01-01T00:00:01Z",
    "involvedObject": {
        "apiVersion": "v1",
        "fieldPath": "spec.containers{nginx}",
        "kind": "Pod",
        "name": "nginx",
        "namespace": "default",
        "resourceVersion": "1200",
        "uid": "u2"
    },
    "kind": "Event",
    "lastTimestamp": "2025-01-01T00:00:01Z",
    "message": "Pulling image \"nginx:1.27\" {not a brace} [nor a bracket] \\",
    "metadata": {
        "creationTimestamp": "2025-01-01T00:00:01Z",
        "name": "nginx.1816687efbf1ca00",
        "namespace": "default",
        "resourceVersion": "1234",
        "uid": "u1"
    },
    "reason": "Pulling",
    "reportingComponent": "kubelet",
    "reportingInstance": "node1",
    "source": {
        "component": "kubelet",
        "host": "node1"
    },
    "type": "Normal"
}"#;

    /// The same event after a count bump, as kubectl prints the next watch notification.
    fn kubectl_pretty_bumped() -> String {
        KUBECTL_PRETTY
            .replace(r#""count": 1"#, r#""count": 2"#)
            .replace(r#""resourceVersion": "1234""#, r#""resourceVersion": "1240""#)
            .replace(r#""lastTimestamp": "2025-01-01T00:00:01Z""#, r#""lastTimestamp": "2025-01-01T00:00:09Z""#)
    }

    /// The exact path's items for a one-line document (what the decoder gave before the
    /// one-pass path existed).
    fn exact(text: &str) -> Vec<Result<Decoded, DecodeError>> {
        let mut out = Vec::new();
        let doc = Doc { text, origin: Origin { line: 7, col: 0 } };
        match parse_top(text) {
            Ok(top) => decode_top(&doc, top, &mut |r| out.push(r)),
            Err(e) => out.push(Err(doc.json_error(doc.start(), text, Context::Document, &e))),
        }
        out
    }

    /// Wherever the one-pass path answers, it answers exactly what the exact path does; and it
    /// does answer for the common shapes (so the exact path is not silently taken for them).
    #[test]
    fn one_pass_decoding_equals_the_exact_path() {
        let ev = r#"{"metadata":{"name":"n.1","namespace":"ns","labels":{"a":"b"},"managedFields":[{"x":1}]},"involvedObject":{"kind":"Pod","name":"p","uid":"u"},"reason":"R","message":"m \"q\" \u00e9","source":{"component":"kubelet","host":"h"},"firstTimestamp":"2024-06-01T00:00:01Z","lastTimestamp":"2024-06-01T00:00:02.5Z","count":3,"type":"Warning","eventTime":null}"#;
        let v1 = r#"{"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":{"name":"e"},"regarding":{"kind":"Pod","name":"p"},"note":"n","reason":"R","type":"Normal","deprecatedCount":4,"deprecatedSource":{"component":"c"}}"#;
        let answered = [
            ev.to_string(),
            v1.to_string(),
            format!(r#"{{"type":"ADDED","object":{ev}}}"#),
            format!(r#"{{"object":{ev},"type":"MODIFIED"}}"#),
            format!(r#"{{"type":"DELETED","object":{v1}}}"#),
            format!(r#"{{"clock":"2024-06-01T00:00:03.123456789Z","event":{ev}}}"#),
            format!(r#"{{"event":{ev},"clock":"2024-06-01T00:00:03Z","spam_filter_clock":"2024-06-01T00:00:04Z"}}"#),
            // A nested value's own `object` / `event` is not read (as the exact path's second step).
            format!(r#"{{"type":"ADDED","object":{}}}"#, ev.replacen('{', r#"{"object":[1,{"a":2}],"event":5,"#, 1)),
            // Read as a Wire after the envelope-only read declined: a field of no envelope, an
            // escaped clock, a bare event whose first key is `type`.
            format!(r#"{{"clock":"2024-06-01T00:00:03Z","event":{ev},"recorded_by":"x"}}"#),
            format!(r#"{{"type":"ADDED","recorded_by":"x","object":{ev}}}"#),
            format!(r#"{{"clock":"2024-06-01T00:00:03\u005a","event":{ev}}}"#),
            r#"{ "type":"Normal","kind":"Event","apiVersion":"v1","involvedObject":{"kind":"Pod","name":"p"},"reason":"R"}"#
                .to_string(),
        ];
        let declined = [
            r#"{"type":"ADDED","object":[]}"#.to_string(),
            r#"{"type":"ADDED","object":5}"#.to_string(),
            r#"{"type":"ADDED","object":null}"#.to_string(),
            r#"{"type":"ADDED"}"#.to_string(),
            r#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"12"}}}"#.to_string(),
            r#"{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old"}}"#
                .to_string(),
            format!(r#"{{"type":"NOPE","object":{ev}}}"#),
            r#"{"type":"ADDED","object":{"metadata":{}}}"#.to_string(),
            format!(r#"{{"clock":"yesterday","event":{ev}}}"#),
            format!(r#"{{"clock":"2024-06-01T00:00:03Z","spam_filter_clock":7,"event":{ev}}}"#),
            r#"{"clock":"2024-06-01T00:00:03Z"}"#.to_string(),
            format!(r#"{{"event":{ev}}}"#),
            r#"{"clock":"2024-06-01T00:00:03Z","event":[]}"#.to_string(),
            format!(r#"{{"clock":"2024-06-01T00:00:03Z","event":{}}}"#, ev.replace(r#""count":3"#, r#""count":"3""#)),
            format!(r#"{{"kind":"EventList","items":[{ev}]}}"#),
            r#"{"kind":"Status","reason":"Gone","message":"m"}"#.to_string(),
            ev.replace(r#""lastTimestamp":"2024-06-01T00:00:02.5Z""#, r#""lastTimestamp":"soon""#),
            format!(r#"{{"metadata":{{"name":"x"}},"object":{ev},"object":{ev},"type":"ADDED"}}"#),
            format!(r#"{{"object":{ev},"type":"ADDED","object":{ev}}}"#),
            format!(r#"{{"clock":"2024-06-01T00:00:03Z","event":{ev},"metadata":5}}"#),
            r#"{"type":"Normal"}"#.to_string(),
            "{}".to_string(),
            r#"{"a":1"#.to_string(),
        ];
        for text in &answered {
            let fast = decode_one_pass(text, 7).unwrap_or_else(|| panic!("the one-pass path declined {text}"));
            assert_eq!(exact(text), vec![Ok(fast)], "{text}");
            // Printed over many lines, as kubectl prints (multi-line documents are read in one
            // pass too).
            let pretty =
                serde_json::to_string_pretty(&serde_json::from_str::<serde_json::Value>(text).unwrap()).unwrap();
            let fast = decode_one_pass(&pretty, 7).unwrap_or_else(|| panic!("the one-pass path declined {pretty}"));
            assert_eq!(exact(&pretty), vec![Ok(fast)], "{pretty}");
        }
        for text in &declined {
            assert!(decode_one_pass(text, 7).is_none(), "the one-pass path answered {text}");
        }
        // The first 3,000 lines of the bundled stream.
        let bundled = include_str!("../../../examples/data/occurrences.jsonl");
        for text in bundled.lines().take(3000) {
            let fast = decode_one_pass(text, 7).expect("a bundled line is one-pass");
            assert_eq!(exact(text), vec![Ok(fast)]);
        }
    }

    fn feed(decoder: &mut Decoder, line: &str) -> Vec<Result<Decoded, DecodeError>> {
        let mut out = Vec::new();
        decoder.push_line(line, |r| out.push(r));
        out
    }

    fn event(d: &Decoded) -> &Event {
        match d {
            Decoded::Event { event, .. } => event,
            other => panic!("expected an event, got {other:?}"),
        }
    }

    /// One label per item: the event name, `bookmark:<rv>` or `error:<code>`.
    fn labels(items: &[Decoded]) -> Vec<String> {
        items
            .iter()
            .map(|d| match d {
                Decoded::Event { event, .. } => event.metadata.name.to_string(),
                Decoded::Bookmark { resource_version, .. } => format!("bookmark:{resource_version}"),
                Decoded::WatchError { code, .. } => format!("error:{code}"),
            })
            .collect()
    }

    fn lines_of(items: &[Decoded]) -> Vec<u64> {
        items.iter().map(Decoded::line).collect()
    }

    fn error_lines(errors: &[DecodeError]) -> Vec<u64> {
        errors.iter().map(|e| e.line).collect()
    }

    /// The watch line's `object`, parsed directly as the core/v1 model.
    fn object_of(line: &str) -> Event {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        serde_json::from_value(v["object"].clone()).unwrap()
    }

    fn time(s: &str) -> Time {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    // ---- shapes -------------------------------------------------------------------------

    #[test]
    fn raw_watch_stream_decodes_each_line_with_its_watch_type() {
        let input = [SUMO_ADDED, SUMO_MODIFIED, SUMO_DELETED].join("\n");
        let (items, errors) = decode_str(&input);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(lines_of(&items), [1, 2, 3]);
        let types: Vec<_> = items
            .iter()
            .map(|d| match d {
                Decoded::Event { watch_type, clock, spam_filter_clock, .. } => {
                    assert_eq!((clock, spam_filter_clock), (&None, &None));
                    *watch_type
                }
                other => panic!("{other:?}"),
            })
            .collect();
        use WatchEventType::*;
        assert_eq!(types, [Some(Added), Some(Modified), Some(Deleted)]);
        for (item, line) in items.iter().zip([SUMO_ADDED, SUMO_MODIFIED, SUMO_DELETED]) {
            assert_eq!(event(item), &object_of(line), "decoded exactly as the core/v1 model reads it");
        }
        let deleted = event(&items[2]);
        assert_eq!(deleted.message, "MountVolume.SetUp succeeded for volume \"config-volume\" ");
        assert_eq!(
            deleted.metadata.other["selfLink"],
            "/api/v1/namespaces/sumologic/events/fluentd-events-597cbf49bf-j9f9j.15ae9d64680f7124"
        );
        assert_eq!(WatchEventType::Deleted.as_str(), "DELETED");
    }

    #[test]
    fn plain_json_lines_decode_as_core_events() {
        let objects: Vec<String> = [SUMO_ADDED, SUMO_MODIFIED]
            .iter()
            .map(|l| serde_json::to_string(&serde_json::from_str::<serde_json::Value>(l).unwrap()["object"]).unwrap())
            .collect();
        let (items, errors) = decode_str(&objects.join("\n"));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(
            labels(&items),
            ["fluentd-8657bcb875-5p9cd.15ae9d646156dad4", "fluentd-8657bcb875.15ae9d64620be8d4"]
        );
        assert!(matches!(items[0], Decoded::Event { watch_type: None, clock: None, line: 1, .. }));
        assert_eq!(event(&items[1]), &object_of(SUMO_MODIFIED));
        assert_eq!(event(&items[1]).involved_object.kind, "ReplicaSet");
    }

    #[test]
    fn top_level_array_decodes_each_element_in_order() {
        let (items, errors) = decode_str(SONOBUOY_ARRAY);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(
            labels(&items),
            ["ip-10-0-26-239.14ffe954c1aec5e8", "ip-10-0-26-239.us-west-2.compute.internal.14ffe951a475012d"]
        );
        assert_eq!(lines_of(&items), [1, 1]);
        let e = event(&items[1]);
        assert_eq!((e.kind.as_str(), e.api_version.as_str()), ("", ""), "core/v1 items are left as they came");
        assert_eq!(e.message, "Starting kubelet.");
        assert_eq!(e.source.host, "ip-10-0-26-239.us-west-2.compute.internal");
        assert_eq!(e.last_timestamp, Some(time("2017-12-13T17:02:16Z")));
    }

    #[test]
    fn event_list_items_decode_in_order_with_their_own_lines() {
        let list = serde_json::json!({
            "kind": "EventList", "apiVersion": "v1", "metadata": {"resourceVersion": "27217"},
            "items": [serde_json::from_str::<serde_json::Value>(SUMO_ADDED).unwrap()["object"].clone(),
                      serde_json::from_str::<serde_json::Value>(SUMO_MODIFIED).unwrap()["object"].clone()],
        });
        let pretty = serde_json::to_string_pretty(&list).unwrap();
        let first_item_line = 1 + pretty.lines().position(|l| l == "    {").unwrap() as u64;
        let second_item_line =
            1 + pretty.lines().collect::<Vec<_>>().iter().rposition(|l| *l == "    {").unwrap() as u64;
        let input = format!("\n{pretty}\n{}", serde_json::to_string(&list).unwrap());
        let (items, errors) = decode_str(&input);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(
            lines_of(&items),
            [
                first_item_line + 1,
                second_item_line + 1,
                pretty.lines().count() as u64 + 2,
                pretty.lines().count() as u64 + 2
            ]
        );
        assert_eq!(event(&items[0]), &object_of(SUMO_ADDED));
        assert_eq!(event(&items[1]), &object_of(SUMO_MODIFIED));
        assert_eq!(event(&items[2]), event(&items[0]), "compact and pretty lists decode alike");
        assert_eq!(event(&items[3]), event(&items[1]));
    }

    #[test]
    fn list_shapes_without_eventlist_kind_are_lists_too() {
        let item = r#"{"metadata":{"name":"a"},"involvedObject":{"kind":"Pod","name":"p"},"reason":"Started"}"#;
        let input = format!(
            "{{\"kind\":\"List\",\"apiVersion\":\"v1\",\"items\":[{item}]}}\n{{\"metadata\":{{\"resourceVersion\":\"2462\"}},\"items\":[{item},{item}]}}\n{{\"kind\":\"EventList\",\"items\":null}}"
        );
        let (items, errors) = decode_str(&input);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(labels(&items), ["a", "a", "a"]);
        assert_eq!(lines_of(&items), [1, 2, 2]);
    }

    #[test]
    fn kubectl_pretty_documents_decode_once_complete() {
        let bumped = kubectl_pretty_bumped();
        let input = format!("{KUBECTL_PRETTY}\n{bumped}\n");
        let mut decoder = Decoder::new();
        let mut per_line = Vec::new();
        for line in input.lines() {
            per_line.push(feed(&mut decoder, line));
        }
        assert!(decoder.finish().is_none());
        assert_eq!(per_line.len(), 66);
        let emitting: Vec<usize> = (0..per_line.len()).filter(|&i| !per_line[i].is_empty()).map(|i| i + 1).collect();
        assert_eq!(emitting, [33, 66], "each document is emitted on its closing line, once");
        let first = match &per_line[32][..] {
            [Ok(d)] => d.clone(),
            other => panic!("{other:?}"),
        };
        let second = match &per_line[65][..] {
            [Ok(d)] => d.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!((first.line(), second.line()), (1, 34));
        let (a, b) = (event(&first), event(&second));
        assert_eq!(a, &serde_json::from_str::<Event>(KUBECTL_PRETTY).unwrap());
        assert_eq!(a.message, r#"Pulling image "nginx:1.27" {not a brace} [nor a bracket] \"#);
        assert_eq!(a.involved_object.field_path, "spec.containers{nginx}");
        assert_eq!((a.count, b.count), (1, 2));
        assert_eq!(b.metadata.resource_version, "1240");
        assert_eq!(b.last_timestamp, Some(time("2025-01-01T00:00:09Z")));
        assert!(matches!(second, Decoded::Event { watch_type: None, .. }));
    }

    #[test]
    fn replay_lines_carry_their_clocks() {
        // The first line of the project's conformance/replay/burst30.in.jsonl, then the same
        // event with a spam_filter_clock.
        let line = r#"{"clock":"2024-05-01T12:00:00.000000Z","event":{"metadata":{"name":"web-0.17cb5b99f8638000","namespace":"default"},"involvedObject":{"kind":"Pod","namespace":"default","name":"web-0","uid":"7d3c2a1e-0000-4000-8000-000000000001","apiVersion":"v1","resourceVersion":"4242","fieldPath":"spec.containers{app}"},"reason":"BackOff","message":"Back-off restarting failed container","source":{"component":"kubelet","host":"node-1"},"firstTimestamp":"2024-05-01T12:00:00Z","lastTimestamp":"2024-05-01T12:00:00Z","count":1,"type":"Warning","eventTime":null,"reportingComponent":"","reportingInstance":""}}"#;
        let with_spam = line.replacen('{', r#"{"spam_filter_clock":"2024-05-01T12:00:07.5+02:00","#, 1);
        let (items, errors) = decode_str(&format!("{line}\n{with_spam}"));
        assert!(errors.is_empty(), "{errors:?}");
        match &items[..] {
            [
                Decoded::Event { event: a, clock: Some(c1), spam_filter_clock: None, watch_type: None, line: 1 },
                Decoded::Event { event: b, clock: Some(c2), spam_filter_clock: Some(s2), watch_type: None, line: 2 },
            ] => {
                assert_eq!((*c1, *c2), (time("2024-05-01T12:00:00Z"), time("2024-05-01T12:00:00Z")));
                assert_eq!(*s2, time("2024-05-01T10:00:07.5Z"));
                assert_eq!(a, b);
                assert_eq!((a.reason.as_str(), a.type_.as_str(), a.count), ("BackOff", "Warning", 1));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn replay_line_errors_name_the_missing_or_bad_clock() {
        let ev = r#"{"involvedObject":{"name":"p"},"metadata":{"name":"e"}}"#;
        let input = format!(
            "{{\"event\":{ev}}}\n{{\"clock\":\"noon\",\"event\":{ev}}}\n{{\"clock\":\"2024-05-01T12:00:00Z\"}}\n{{\"clock\":\"2024-05-01T12:00:00Z\",\"event\":{ev}}}"
        );
        let (items, errors) = decode_str(&input);
        assert_eq!(labels(&items), ["e"]);
        assert_eq!(items[0].line(), 4);
        assert_eq!(error_lines(&errors), [1, 2, 3]);
        assert!(errors[0].message.contains("replay line has no `clock`"), "{}", errors[0]);
        assert!(
            errors[1].message.contains("`clock` is not an RFC 3339 time") && errors[1].message.contains("`noon`"),
            "{}",
            errors[1]
        );
        assert!(errors[2].message.contains("replay line has no `event`"), "{}", errors[2]);
    }

    #[test]
    fn events_k8s_io_v1_maps_to_core_v1_field_by_field() {
        // Synthetic: every events.k8s.io/v1 field set, plus a field from the future.
        let line = r#"{"kind":"Event","apiVersion":"events.k8s.io/v1","metadata":{"name":"web-0.17cb5b99f8638000","namespace":"default","uid":"e-uid","resourceVersion":"77","creationTimestamp":"2024-05-01T12:00:00Z","labels":{"app":"web"}},"eventTime":"2024-05-01T12:00:00.123456Z","series":{"count":3,"lastObservedTime":"2024-05-01T12:05:00.654321Z"},"reportingController":"example.com/controller","reportingInstance":"controller-node-1","action":"Restarting","reason":"BackOff","regarding":{"kind":"Pod","namespace":"default","name":"web-0","uid":"pod-uid","apiVersion":"v1","resourceVersion":"4242","fieldPath":"spec.containers{app}"},"related":{"kind":"Node","name":"node-1","uid":"node-uid","apiVersion":"v1"},"note":"Back-off restarting failed container","type":"Warning","deprecatedSource":{"component":"kubelet","host":"node-1"},"deprecatedFirstTimestamp":"2024-05-01T11:59:00Z","deprecatedLastTimestamp":"2024-05-01T12:04:00Z","deprecatedCount":7,"someFutureField":{"x":[1,2]}}"#;
        let (items, errors) = decode_str(line);
        assert!(errors.is_empty(), "{errors:?}");
        let e = event(&items[0]);
        assert_eq!((e.kind.as_str(), e.api_version.as_str()), ("Event", "v1"), "as the core/v1 endpoint serves it");
        assert_eq!(e.metadata.name, "web-0.17cb5b99f8638000");
        assert_eq!(e.metadata.resource_version, "77");
        assert_eq!(e.metadata.labels["app"], "web");
        let regarding = ObjectReference {
            kind: "Pod".into(),
            namespace: "default".into(),
            name: "web-0".into(),
            uid: "pod-uid".into(),
            api_version: "v1".into(),
            resource_version: "4242".into(),
            field_path: "spec.containers{app}".into(),
        };
        assert_eq!(e.involved_object, regarding, "regarding → involvedObject");
        assert_eq!(e.message, "Back-off restarting failed container", "note → message");
        assert_eq!(
            e.source,
            EventSource { component: "kubelet".into(), host: "node-1".into() },
            "deprecatedSource → source"
        );
        assert_eq!(e.first_timestamp, Some(time("2024-05-01T11:59:00Z")), "deprecatedFirstTimestamp → firstTimestamp");
        assert_eq!(e.last_timestamp, Some(time("2024-05-01T12:04:00Z")), "deprecatedLastTimestamp → lastTimestamp");
        assert_eq!(e.count, 7, "deprecatedCount → count");
        assert_eq!(e.reporting_component, "example.com/controller", "reportingController → reportingComponent");
        assert_eq!(e.reporting_instance, "controller-node-1");
        assert_eq!((e.reason.as_str(), e.type_.as_str(), e.action.as_str()), ("BackOff", "Warning", "Restarting"));
        assert_eq!(e.event_time, Some(time("2024-05-01T12:00:00.123456Z")));
        assert_eq!(
            e.series,
            Some(Box::new(EventSeries { count: 3, last_observed_time: Some(time("2024-05-01T12:05:00.654321Z")) }))
        );
        let related = e.related.as_ref().unwrap();
        assert_eq!(
            (related.kind.as_str(), related.name.as_str(), related.uid.as_str()),
            ("Node", "node-1", "node-uid")
        );
        let wire = serde_json::to_value(e).unwrap();
        assert_eq!(wire["reportingComponent"], "example.com/controller");
        assert!(wire.get("note").is_none() && wire.get("regarding").is_none() && wire.get("someFutureField").is_none());
    }

    #[test]
    fn events_k8s_io_v1beta1_watch_line_maps_to_core_v1() {
        let (items, errors) = decode_str(SUMO_V1BETA1);
        assert!(errors.is_empty(), "{errors:?}");
        assert!(matches!(items[0], Decoded::Event { watch_type: Some(WatchEventType::Added), line: 1, .. }));
        let e = event(&items[0]);
        assert_eq!((e.kind.as_str(), e.api_version.as_str()), ("Event", "v1"));
        assert_eq!(e.metadata.name, "fluentd-8657bcb875-tn5sb.15afa85b9adaad28");
        assert_eq!(e.involved_object.name, "fluentd-8657bcb875-tn5sb");
        assert_eq!(e.involved_object.field_path, "spec.containers{fluentd}");
        assert_eq!(e.message, "Error: ImagePullBackOff");
        assert_eq!((e.source.component.as_str(), e.source.host.as_str()), ("kubelet", "docker-for-desktop"));
        assert_eq!(e.first_timestamp, Some(time("2019-07-09T06:11:47Z")));
        assert_eq!(e.last_timestamp, Some(time("2019-07-16T17:23:44Z")));
        assert_eq!(e.count, 4491);
        assert_eq!((e.reason.as_str(), e.type_.as_str()), ("Failed", "Warning"));
        assert_eq!((e.event_time, e.series.as_ref(), e.related.as_ref()), (None, None, None));
    }

    #[test]
    fn events_k8s_io_list_items_inherit_the_list_api_version() {
        let (items, errors) = decode_str(SUMO_V1BETA1_LIST);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(lines_of(&items), [9]);
        let e = event(&items[0]);
        assert_eq!((e.kind.as_str(), e.api_version.as_str()), ("Event", "v1"));
        assert_eq!(e.message, "pulling image \"sumologic/kubernetes-fluentd\"");
        assert_eq!(e.count, 9534);
        assert_eq!(e.involved_object.uid, "636844c0-a210-11e9-965c-025000000001");
        assert_eq!(e.last_timestamp, Some(time("2019-07-16T18:04:00Z")));
    }

    #[test]
    fn bookmark_and_expired_error_envelopes() {
        // Spec §6.4: a bookmark is a mostly empty typed Event; an ERROR carries a metav1.Status.
        let bookmark = r#"{"type":"BOOKMARK","object":{"kind":"Event","apiVersion":"v1","metadata":{"resourceVersion":"12746","annotations":{"k8s.io/initial-events-end":"true"}},"involvedObject":{},"source":{},"firstTimestamp":null,"lastTimestamp":null,"eventTime":null,"reportingComponent":"","reportingInstance":""}}"#;
        let expired = r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 2336941 (2336955)","reason":"Expired","code":410}}"#;
        let empty_bookmark = r#"{"type":"BOOKMARK","object":{"metadata":{}}}"#;
        let (items, errors) = decode_str(&[bookmark, expired, empty_bookmark, SUMO_ADDED].join("\n"));
        assert_eq!(
            items[..2],
            [
                Decoded::Bookmark { resource_version: "12746".into(), line: 1 },
                Decoded::WatchError {
                    code: 410,
                    reason: "Expired".into(),
                    message: "too old resource version: 2336941 (2336955)".into(),
                    line: 2
                },
            ]
        );
        assert_eq!(lines_of(&items), [1, 2, 4]);
        assert_eq!(error_lines(&errors), [3]);
        assert!(errors[0].message.contains("BOOKMARK has no `object.metadata.resourceVersion`"), "{}", errors[0]);
    }

    #[test]
    fn mixed_stream_of_every_shape_decodes_in_order() {
        let bumped = kubectl_pretty_bumped();
        let replay = r#"{"clock":"2024-05-01T12:00:00Z","event":{"metadata":{"name":"replayed"},"involvedObject":{"name":"p"}}}"#;
        let parts = [
            SUMO_ADDED,                                                              // 1
            "",                                                                      // 2
            KUBECTL_PRETTY,                                                          // 3-35
            SONOBUOY_ARRAY,                                                          // 36
            r#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"99"}}}"#, // 37
            replay,                                                                  // 38
            SUMO_V1BETA1_LIST,                                                       // 39-80
            "   ",                                                                   // 81
            &bumped,                                                                 // 82-114
            SUMO_V1BETA1,                                                            // 115
        ];
        let (items, errors) = decode_str(&parts.join("\n"));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(
            labels(&items),
            [
                "fluentd-8657bcb875-5p9cd.15ae9d646156dad4",
                "nginx.1816687efbf1ca00",
                "ip-10-0-26-239.14ffe954c1aec5e8",
                "ip-10-0-26-239.us-west-2.compute.internal.14ffe951a475012d",
                "bookmark:99",
                "replayed",
                "fluentd-8657bcb875-mj2ft.15afa857956ee9e8",
                "nginx.1816687efbf1ca00",
                "fluentd-8657bcb875-tn5sb.15afa85b9adaad28",
            ]
        );
        assert_eq!(lines_of(&items), [1, 3, 36, 36, 37, 38, 47, 82, 115]);
    }

    #[test]
    fn unindented_multi_line_lists_are_one_document() {
        let a = r#"{"metadata":{"name":"a"},"involvedObject":{"name":"p"}}"#;
        let b = r#"{"metadata":{"name":"b"},"involvedObject":{"name":"p"}}"#;
        let input = format!("[\n{a},\n{b}\n]\n{a}\n{{\"kind\":\"EventList\",\"items\":[\n{b},\n{a}\n]}}");
        let (items, errors) = decode_str(&input);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(labels(&items), ["a", "b", "a", "b", "a"]);
        assert_eq!(lines_of(&items), [2, 3, 5, 7, 8]);
    }

    #[test]
    fn pretty_list_cut_between_items_does_not_swallow_the_next_document() {
        let list = serde_json::json!({"kind": "EventList", "items": [
            serde_json::from_str::<serde_json::Value>(SUMO_ADDED).unwrap()["object"].clone(),
            serde_json::from_str::<serde_json::Value>(SUMO_MODIFIED).unwrap()["object"].clone(),
        ]});
        let pretty = pretty4(&list);
        let cut = &pretty[..pretty.find("\n        },\n").unwrap() + "\n        },".len()];
        let (items, errors) = decode_str(&format!("{cut}\n{KUBECTL_PRETTY}"));
        assert_eq!(labels(&items), ["nginx.1816687efbf1ca00"]);
        assert_eq!(error_lines(&errors), [1]);
        assert!(errors[0].message.contains("still missing `]}`"), "{}", errors[0]);
    }

    #[test]
    fn deeply_nested_unclosed_document_gives_a_short_error() {
        let mut decoder = Decoder::new();
        for _ in 0..10_000 {
            assert!(feed(&mut decoder, "  [{").is_empty());
        }
        let err = decoder.finish().unwrap();
        assert_eq!(err.line, 1);
        assert!(err.message.contains("still missing `}]}]}]}]…`, 20000 brackets"), "{err}");
        assert!(err.message.len() < 300, "{err}");
    }

    #[test]
    fn several_documents_on_one_line_crlf_and_bom_are_tolerated() {
        let a = r#"{"metadata":{"name":"a"},"involvedObject":{"name":"p"}}"#;
        let input = format!("\u{feff}{a}{a} {a}\r\n{a}\r\n");
        let (items, errors) = decode_str(&input);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(lines_of(&items), [1, 1, 1, 2]);
    }

    // ---- malformed input ------------------------------------------------------------------

    #[test]
    fn garbage_line_is_one_error_and_the_next_line_decodes() {
        let (items, errors) = decode_str(&format!("not json\n{SUMO_ADDED}\n42\n{SUMO_MODIFIED}"));
        assert_eq!(lines_of(&items), [2, 4]);
        assert_eq!(error_lines(&errors), [1, 3]);
        assert_eq!(
            errors[0].to_string(),
            "line 1: expected a JSON object or array (an Event, a list, a watch event or a replay line), found `not json`"
        );
    }

    #[test]
    fn truncated_line_is_reported_at_its_line_and_the_next_line_decodes() {
        let in_string = &SUMO_ADDED[..200];
        let outside_string = &SUMO_ADDED[..SUMO_ADDED.find(r#","reason""#).unwrap()];
        let input = [SUMO_MODIFIED, in_string, SUMO_ADDED, outside_string, SUMO_DELETED].join("\n");
        let (items, errors) = decode_str(&input);
        assert_eq!(lines_of(&items), [1, 3, 5]);
        assert_eq!(error_lines(&errors), [2, 4]);
        assert!(errors[0].message.contains("a string is still open at the end of the line"), "{}", errors[0]);
        assert!(
            errors[0]
                .message
                .contains(r#"; the document starts `{"type":"ADDED","object":{"kind":"Event","apiVersion":"v1","…`"#),
            "{}",
            errors[0]
        );
        assert!(errors[1].message.starts_with("incomplete document: a new document starts at line 5 before this one closed; the document (still missing `}}`)"), "{}", errors[1]);
    }

    #[test]
    fn numbers_in_metadata_keep_their_value_when_written_and_read_again() {
        // Found by fuzzing: without serde_json's `float_roundtrip`, this integer changed on
        // every write and read.
        let line = r#"{"metadata":{"name":"a","0":2000022000050000000000},"involvedObject":{"kind":"Pod"}}"#;
        let (items, errors) = decode_str(line);
        assert!(errors.is_empty(), "{errors:?}");
        let Some(Decoded::Event { event, .. }) = items.into_iter().next() else { panic!("an event") };
        let written = serde_json::to_string(&event).unwrap();
        let (again, _) = decode_str(&written);
        let Some(Decoded::Event { event: again, .. }) = again.into_iter().next() else { panic!("an event") };
        assert_eq!(again, event, "{written}");
    }

    #[test]
    fn a_deeply_nested_open_document_does_not_swallow_the_next_line() {
        // 100k `[` that never close, then good lines: each good line still decodes.
        let deep = "[".repeat(100_000);
        let input = [deep.as_str(), SUMO_ADDED, SUMO_MODIFIED].join("\n");
        let (items, errors) = decode_str(&input);
        assert_eq!(lines_of(&items), [2, 3]);
        assert_eq!(error_lines(&errors), [1]);
        assert!(
            errors[0]
                .message
                .starts_with("incomplete document: a new document starts at line 2 before this one closed"),
            "{}",
            errors[0]
        );
        assert!(errors[0].message.contains("100000 brackets"), "{}", errors[0]);
        // The same for a list nested in a list.
        let input = ["[[", SUMO_ADDED].join("\n");
        let (items, errors) = decode_str(&input);
        assert_eq!((lines_of(&items), error_lines(&errors)), (vec![2], vec![1]));
    }

    #[test]
    fn a_list_that_cannot_resync_says_so() {
        // A top-level list that is not indented takes column-0 documents as its elements; cut
        // off, it loses them, and its error says so.
        let a = r#"{"metadata":{"name":"a"},"involvedObject":{"name":"p"}}"#;
        let b = r#"{"metadata":{"name":"b"},"involvedObject":{"name":"p"}}"#;
        let input = ["[", &format!("{a},"), b].join("\n");
        let (items, errors) = decode_str(&input);
        assert!(items.is_empty(), "{items:?}");
        assert_eq!(error_lines(&errors), [1]);
        assert!(errors[0].message.contains("the framing could not resync"), "{}", errors[0]);
        // Closed, the same list decodes.
        let (items, errors) = decode_str(&[input.as_str(), "]"].join("\n"));
        assert_eq!((items.len(), errors.len()), (2, 0), "{errors:?}");
    }

    #[test]
    fn envelope_without_object_or_with_unknown_type_is_an_error() {
        let input =
            [r#"{"type":"ADDED"}"#, r#"{"type":"ADDED","object":null}"#, r#"{"type":"SYNC","object":{}}"#, SUMO_ADDED]
                .join("\n");
        let (items, errors) = decode_str(&input);
        assert_eq!(lines_of(&items), [4]);
        assert_eq!(error_lines(&errors), [1, 2, 3]);
        assert_eq!(errors[0].to_string(), "line 1: watch event ADDED has no `object`");
        assert!(
            errors[2].message.contains("unknown type `SYNC`: expected ADDED, MODIFIED, DELETED, BOOKMARK or ERROR"),
            "{}",
            errors[2]
        );
    }

    #[test]
    fn wrong_typed_field_names_the_value_and_its_position() {
        let bad = SUMO_ADDED.replace(r#""count":1"#, r#""count":"three""#);
        let col = bad.find(r#""three""#).unwrap() + r#""three""#.len();
        let (items, errors) = decode_str(&format!("{bad}\n{SUMO_MODIFIED}"));
        assert_eq!(lines_of(&items), [2]);
        assert_eq!(error_lines(&errors), [1]);
        let msg = &errors[0].message;
        assert!(
            msg.starts_with("in the watch event's `object`: invalid type: string \"three\", expected i32"),
            "{msg}"
        );
        assert!(msg.contains(&format!(" at column {col}, near `")), "{msg}");
        assert!(msg.contains(r#""count":"three""#), "{msg}");
        // In a pretty document the position is given as line and column.
        let pretty = KUBECTL_PRETTY.replace(r#""count": 1"#, r#""count": "three""#);
        let (items, errors) = decode_str(&format!("{SUMO_ADDED}\n{pretty}\n{SUMO_MODIFIED}"));
        assert_eq!(lines_of(&items), [1, 35]);
        assert_eq!(error_lines(&errors), [2]);
        assert!(errors[0].message.contains("expected i32 at line 4 column 20, near `"), "{}", errors[0]);
    }

    #[test]
    fn bad_list_item_costs_only_that_item() {
        let good = r#"{"metadata":{"name":"ok"},"involvedObject":{"name":"p"}}"#;
        let input = format!(
            "{{\"kind\":\"EventList\",\"items\":[\n  {good},\n  {{\"count\":\"three\"}},\n  {{\"metadata\":{{\"name\":\"no-ref\"}}}},\n  {good}\n]}}"
        );
        let (items, errors) = decode_str(&input);
        assert_eq!(labels(&items), ["ok", "ok"]);
        assert_eq!(lines_of(&items), [2, 5]);
        assert_eq!(error_lines(&errors), [3, 4]);
        assert!(errors[0].message.starts_with("in `items[1]`: invalid type: string \"three\""), "{}", errors[0]);
        assert!(errors[1].message.starts_with("in `items[2]`: not an event"), "{}", errors[1]);
        // On one line, the bad items are one error (one bad line) naming each.
        let (items, errors) = decode_str(r#"[["Event", "v1"], 7, {"involvedObject": {}}]"#);
        assert_eq!((items.len(), errors.len()), (1, 1));
        assert_eq!(
            errors[0].message,
            r#"in array element [0]: expected a JSON object, found `["Event", "v1"]`; then in array element [1]: expected a JSON object, found `7`"#
        );
    }

    #[test]
    fn object_that_is_not_an_event_is_an_error() {
        let input = [
            r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p"}}"#,
            r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"events is forbidden","reason":"Forbidden","code":403}"#,
            r#"{"metadata":{"name":"no-ref"},"reason":"x"}"#,
            SUMO_ADDED,
        ]
        .join("\n");
        let (items, errors) = decode_str(&input);
        assert_eq!(lines_of(&items), [4]);
        assert_eq!(error_lines(&errors), [1, 2, 3]);
        assert!(
            errors[0].message.starts_with("not an event: expected `involvedObject` (core/v1 Event)"),
            "{}",
            errors[0]
        );
        assert!(errors[0].message.ends_with("found kind `Pod`"), "{}", errors[0]);
        assert!(errors[1].message.ends_with("found kind `Status` (Forbidden: events is forbidden)"), "{}", errors[1]);
    }

    #[test]
    fn malformed_json_reports_position_and_excerpt() {
        let (items, errors) = decode_str(&format!("{{\"a\" 1}}\n{SUMO_ADDED}"));
        assert_eq!(lines_of(&items), [2]);
        assert_eq!(errors[0].to_string(), "line 1: malformed JSON: expected `:` at column 6, near `{\"a\" 1}`");
    }

    #[test]
    fn unclosed_pretty_document_is_reported_at_its_start_when_the_next_begins() {
        let cut: String = KUBECTL_PRETTY.lines().take(20).collect::<Vec<_>>().join("\n");
        let input = format!("{SUMO_ADDED}\n{cut}\n{}\n{SUMO_MODIFIED}", kubectl_pretty_bumped());
        let (items, errors) = decode_str(&input);
        assert_eq!(lines_of(&items), [1, 22, 55]);
        assert_eq!(event(&items[1]).count, 2);
        assert_eq!(error_lines(&errors), [2]);
        assert!(
            errors[0].message.starts_with(
                "incomplete document: a new document starts at line 22 before this one closed; the document (still missing `}}`) starts `{ \"apiVersion\": \"v1\", \"count\": 1,"
            ),
            "{}",
            errors[0]
        );
    }

    #[test]
    fn unclosed_document_at_end_of_input_is_reported_by_finish() {
        let mut decoder = Decoder::new();
        assert!(feed(&mut decoder, SUMO_ADDED).len() == 1);
        for line in KUBECTL_PRETTY.lines().take(7) {
            assert!(feed(&mut decoder, line).is_empty());
        }
        let err = decoder.finish().unwrap();
        assert_eq!(err.line, 2);
        assert!(
            err.message.starts_with(
                "incomplete document: the input ended before it closed; the document (still missing `}}`)"
            ),
            "{err}"
        );
        assert!(decoder.finish().is_none(), "finish leaves the decoder empty");
        assert_eq!(lines_of(&[feed(&mut decoder, SUMO_ADDED).remove(0).unwrap()]), [9]);
    }

    #[test]
    fn string_broken_across_lines_abandons_the_document_and_skips_its_tail() {
        let broken = KUBECTL_PRETTY.replace(r#"{not a brace} [nor a bracket]"#, "{not a brace}\n    [nor a bracket]");
        let input = format!("{broken}\nnot json\n{SUMO_ADDED}");
        let (items, errors) = decode_str(&input);
        assert_eq!(lines_of(&items), [36]);
        assert_eq!(error_lines(&errors), [1, 35]);
        assert!(
            errors[0]
                .message
                .starts_with("document abandoned at line 17: a string is still open at the end of the line"),
            "{}",
            errors[0]
        );
        assert!(
            errors[1].message.contains("found `not json`"),
            "the tail is skipped, later garbage is not: {}",
            errors[1]
        );
    }

    #[test]
    fn mismatched_bracket_abandons_the_document() {
        let input = format!("{{\"a\": [1, 2}}\n  \"tail\": 1\n}}\n{SUMO_ADDED}\n[1, 2}}\n{SUMO_MODIFIED}");
        let (items, errors) = decode_str(&input);
        assert_eq!(lines_of(&items), [4, 6]);
        assert_eq!(error_lines(&errors), [1, 5]);
        assert!(errors[0].message.starts_with("`}` at column 12 does not match the open brackets"), "{}", errors[0]);
    }

    #[test]
    fn text_after_a_complete_document_is_an_error() {
        let (items, errors) = decode_str(&format!("{SUMO_ADDED} trailing\n{SUMO_MODIFIED}"));
        assert_eq!(lines_of(&items), [1, 2]);
        assert_eq!(error_lines(&errors), [1]);
        assert!(
            errors[0].message.starts_with(&format!(
                "unexpected text after a complete document at column {}: `trailing`",
                SUMO_ADDED.len() + 2
            )),
            "{}",
            errors[0]
        );
    }

    #[test]
    fn a_line_with_several_faults_is_one_error() {
        // A misplaced `}` closes the document early (it then fails to decode) and leaves the
        // rest of the line as text after it: two faults, one line, one error.
        let broken = r#"{"metadata":{"name":"a"},"involvedObject":"kind":"Pod"},"reason":"x"}"#;
        let (items, errors) = decode_str(&format!("{broken}\n{SUMO_ADDED}\n[1, 2] x\n"));
        assert_eq!(lines_of(&items), [2]);
        assert_eq!(error_lines(&errors), [1, 3], "{errors:?}");
        assert!(errors[0].message.contains("expected struct ObjectReference"), "{}", errors[0]);
        assert!(errors[0].message.contains("; then unexpected text after a complete document"), "{}", errors[0]);
    }

    #[test]
    fn stray_document_tail_is_one_error() {
        let tail: String = KUBECTL_PRETTY.lines().skip(5).collect::<Vec<_>>().join("\n");
        let (items, errors) = decode_str(&format!("{tail}\n{SUMO_ADDED}"));
        assert_eq!(lines_of(&items), [29]);
        assert_eq!(error_lines(&errors), [1]);
        assert!(
            errors[0].message.ends_with("; skipping what looks like the rest of a broken document"),
            "{}",
            errors[0]
        );
    }

    #[test]
    fn overlong_line_is_rejected_not_buffered() {
        let huge = format!("{{\"message\":\"{}\"}}", "x".repeat(MAX_LINE_BYTES));
        let mut decoder = Decoder::new();
        let out = feed(&mut decoder, &huge);
        let [Err(err)] = &out[..] else { panic!("{out:?}") };
        assert_eq!(err.line, 1);
        assert!(
            err.message.starts_with(&format!(
                "line too long: {} bytes, over MAX_LINE_BYTES (4 MiB); skipped `{{\"message\":\"xxx",
                huge.len()
            )),
            "{err}"
        );
        assert!(err.message.len() < 200, "the excerpt is short");
        assert!(feed(&mut decoder, SUMO_ADDED)[0].is_ok());
        // Inside an open document it abandons the document; its tail is skipped.
        for line in ["{", "    \"metadata\": {"] {
            assert!(feed(&mut decoder, line).is_empty());
        }
        let out = feed(&mut decoder, &huge);
        let [Err(err)] = &out[..] else { panic!("{out:?}") };
        assert_eq!(err.line, 3);
        assert!(err.message.starts_with("document abandoned: line 5 is"), "{err}");
        assert!(feed(&mut decoder, "    }").is_empty());
        assert!(feed(&mut decoder, "}").is_empty());
        assert_eq!(feed(&mut decoder, SUMO_MODIFIED)[0].as_ref().unwrap().line(), 8);
        assert!(decoder.finish().is_none());
    }

    /// A byte that is not UTF-8 is U+FFFD, one per byte, as Go reads it: in a string the event
    /// is decoded; outside one the line is as malformed as before, and the next line is decoded.
    #[test]
    fn bytes_that_are_not_utf8_are_read_as_go_reads_them() {
        let mut d = Decoder::new();
        let mut got = Vec::new();
        let mut bad = SUMO_MODIFIED.replace("Created pod", "Created \u{1}\u{1}pod").into_bytes();
        let at = bad.iter().position(|&b| b == 1).unwrap();
        bad[at..at + 2].copy_from_slice(b"\xe2\x82"); // a euro sign cut after two of its bytes
        let garbage = b"\xff\xfe{}";
        for line in [SUMO_ADDED.as_bytes(), &bad, garbage, SUMO_DELETED.as_bytes()] {
            d.push_bytes(line, |item| got.push(item));
        }
        assert_eq!(got.len(), 4, "{got:?}");
        assert!(matches!(got[0], Ok(Decoded::Event { .. })));
        let e = event(got[1].as_ref().unwrap());
        assert_eq!(e.message, "Created \u{fffd}\u{fffd}pod: fluentd-8657bcb875-g6g5g");
        let err = got[2].as_ref().unwrap_err();
        assert_eq!(err.line, 3);
        assert!(err.message.starts_with("expected a JSON object or array"), "{err}");
        assert!(matches!(got[3], Ok(Decoded::Event { .. })), "the next line is decoded");
    }

    /// An unpaired surrogate escape is U+FFFD, as Go's `encoding/json` reads it, on every path:
    /// a one-line watch event, a pretty-printed document, a list item and a document with a
    /// real error (still reported, at its place in the input).
    #[test]
    fn unpaired_surrogate_escapes_are_read_as_go_reads_them() {
        let line = SUMO_MODIFIED.replace("Created pod", r"Created \ud800pod").replace("SuccessfulCreate", r"\udc00Ok");
        let (items, errors) = decode_str(&format!("{SUMO_ADDED}\n{line}\n{SUMO_DELETED}"));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(items.len(), 3);
        let e = event(&items[1]);
        assert_eq!(
            (e.message.as_str(), e.reason.as_str()),
            ("Created \u{fffd}pod: fluentd-8657bcb875-g6g5g", "\u{fffd}Ok")
        );
        assert_eq!(items[1].line(), 2);

        let pretty = KUBECTL_PRETTY.replacen(r#""message": ""#, r#""message": "\uDBFF\u0041 "#, 1);
        assert_ne!(pretty, KUBECTL_PRETTY, "the message was found");
        let (items, errors) = decode_str(&pretty);
        assert!(errors.is_empty(), "{errors:?}");
        assert!(event(&items[0]).message.starts_with("\u{fffd}A "), "{:?}", event(&items[0]).message);

        let list = r#"{"kind":"EventList","items":[{"involvedObject":{"name":"a"},"message":"\ud83d\ude00 \ud83d"}]}"#;
        let (items, errors) = decode_str(list);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(event(&items[0]).message, "\u{1f600} \u{fffd}", "a pair is one character");

        let broken = r#"{"involvedObject":{"name":"a"},"message":"\ud800","count":"x"}"#;
        let (items, errors) = decode_str(broken);
        assert!(items.is_empty());
        let column = broken.find(r#""x""#).unwrap();
        assert!(errors[0].message.contains("invalid type: string"), "{}", errors[0]);
        assert!(errors[0].message.contains(&format!("column {}", column + 3)), "{}", errors[0]);
    }

    #[test]
    fn document_over_the_size_limit_is_abandoned() {
        let chunk = format!("  \"x\": \"{}\",", "y".repeat(1 << 20));
        let mut decoder = Decoder::new();
        assert!(feed(&mut decoder, "{").is_empty());
        let mut errors = Vec::new();
        for _ in 0..(MAX_DOCUMENT_BYTES >> 20) + 1 {
            errors.extend(feed(&mut decoder, &chunk));
        }
        let [Err(err)] = &errors[..] else { panic!("{errors:?}") };
        assert_eq!(err.line, 1);
        assert!(
            err.message.starts_with("document abandoned: it grew past MAX_DOCUMENT_BYTES (64 MiB) at line"),
            "{err}"
        );
        assert!(feed(&mut decoder, "}").is_empty());
        assert!(feed(&mut decoder, SUMO_ADDED)[0].is_ok());
    }

    #[test]
    fn every_malformed_case_in_one_stream_costs_one_error_each() {
        let count_three = SUMO_MODIFIED.replace(r#""count":1"#, r#""count":"three""#);
        let parts = [
            SUMO_ADDED,                                                             // 1 ok
            "not json",                                                             // 2 err
            &SUMO_ADDED[..300],                                                     // 3 err (string open)
            r#"{"type":"ADDED"}"#,                                                  // 4 err
            &count_three,                                                           // 5 err
            SUMO_MODIFIED,                                                          // 6 ok
            r#"{"kind":"Pod","metadata":{"name":"p"}}"#,                            // 7 err
            r#"{"type":"ADDED","object":{"kind":"Event","involvedObject":{}"#,      // 8 err (never closes)
            SUMO_DELETED,                                                           // 9 ok
            "",                                                                     // 10
            "]",                                                                    // 11 err, tail
            "    \"kind\": \"Event\",",                                             // 12 skipped
            r#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"5"}}}"#, // 13 ok
            &KUBECTL_PRETTY[..KUBECTL_PRETTY.len() - 2],                            // 14-45 err at finish
        ];
        let (items, errors) = decode_str(&parts.join("\n"));
        assert_eq!(lines_of(&items), [1, 6, 9, 13]);
        assert_eq!(error_lines(&errors), [2, 3, 4, 5, 7, 8, 11, 14]);
    }

    #[test]
    fn excerpts_are_bounded() {
        let spaced = "a b\n".repeat(1000);
        for text in [spaced.as_str(), &"€".repeat(1000)] {
            let e = excerpt(text);
            assert!(e.chars().count() <= EXCERPT_CHARS + 1 && e.ends_with('…'), "{e}");
            let around = excerpt_around(text, text.len() / 2 + 1);
            assert!(around.chars().count() <= EXCERPT_CHARS + 2, "{around}");
        }
        assert_eq!(excerpt("  {\n    \"kind\":  \"Event\"\n}"), "{ \"kind\": \"Event\" }");
    }

    // ---- damage fuzzing ---------------------------------------------------------------------

    /// xorshift64*: a deterministic generator so failures reproduce.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n.max(1)
        }
    }

    fn pretty4(v: &serde_json::Value) -> String {
        use serde::Serialize;
        let mut out = Vec::new();
        let mut ser =
            serde_json::Serializer::with_formatter(&mut out, serde_json::ser::PrettyFormatter::with_indent(b"    "));
        v.serialize(&mut ser).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn sample_event(name: &str) -> serde_json::Value {
        serde_json::json!({
            "kind": "Event", "apiVersion": "v1",
            "metadata": {"name": name, "namespace": "default", "resourceVersion": "1"},
            "involvedObject": {"kind": "Pod", "name": "web-0", "fieldPath": "spec.containers{app}"},
            "reason": "BackOff",
            "message": format!("ünïcödé € {{brace}} [bracket] \"quoted\" back\\slash {name}"),
            "source": {"component": "kubelet"}, "count": 3, "type": "Warning",
            "firstTimestamp": "2024-05-01T12:00:00Z", "lastTimestamp": "2024-05-01T12:01:00Z",
        })
    }

    /// A stream of every shape; each document with the labels it yields.
    fn fuzz_documents() -> Vec<(String, Vec<String>)> {
        let mut docs = Vec::new();
        for round in 0..2 {
            let n = |i: &str| format!("r{round}-{i}");
            let events_v1 = serde_json::json!({
                "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": n("v1")},
                "regarding": {"kind": "Pod", "name": "web-0"}, "note": "n", "reportingController": "c",
                "eventTime": "2024-05-01T12:00:00.000001Z",
            });
            let list = serde_json::json!({"kind": "EventList", "apiVersion": "v1", "items": [sample_event(&n("l0")), sample_event(&n("l1"))]});
            let array = serde_json::Value::Array(vec![sample_event(&n("a0")), sample_event(&n("a1"))]);
            docs.push((pretty4(&sample_event(&n("pretty"))), vec![n("pretty")]));
            docs.push((
                serde_json::json!({"type": "ADDED", "object": sample_event(&n("watch"))}).to_string(),
                vec![n("watch")],
            ));
            docs.push((pretty4(&list), vec![n("l0"), n("l1")]));
            docs.push((array.to_string(), vec![n("a0"), n("a1")]));
            docs.push((
                serde_json::json!({"clock": "2024-05-01T12:00:00Z", "event": sample_event(&n("replay"))}).to_string(),
                vec![n("replay")],
            ));
            docs.push((pretty4(&events_v1), vec![n("v1")]));
            docs.push((sample_event(&n("line")).to_string(), vec![n("line")]));
            docs.push((
                format!(r#"{{"type":"BOOKMARK","object":{{"metadata":{{"resourceVersion":"{round}"}}}}}}"#),
                vec![format!("bookmark:{round}")],
            ));
        }
        docs
    }

    fn floor_boundary(s: &str, mut i: usize) -> usize {
        while !s.is_char_boundary(i) {
            i -= 1;
        }
        i
    }

    #[test]
    fn fuzz_truncating_one_document_loses_only_that_document() {
        let docs = fuzz_documents();
        let (all, errors) = decode_str(&docs.iter().map(|d| d.0.as_str()).collect::<Vec<_>>().join("\n"));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(labels(&all), docs.iter().flat_map(|d| d.1.clone()).collect::<Vec<_>>());
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..1500 {
            let k = rng.below(docs.len());
            let text = &docs[k].0;
            let cut = floor_boundary(text, 1 + rng.below(text.len() - 2));
            let truncated = &text[..cut];
            if truncated.trim_end().ends_with('[') {
                continue; // a `[` may open an unindented array: the documented ambiguity
            }
            let mut parts: Vec<&str> = docs.iter().map(|d| d.0.as_str()).collect();
            parts[k] = truncated;
            let start_line = 1 + parts[..k].iter().map(|p| p.lines().count()).sum::<usize>() as u64;
            let input = parts.join("\n");
            let (items, errors) = decode_str(&input);
            let expected: Vec<String> =
                docs.iter().enumerate().filter(|(i, _)| *i != k).flat_map(|(_, d)| d.1.clone()).collect();
            assert_eq!(labels(&items), expected, "doc {k} cut at {cut}: {truncated:?}");
            assert_eq!(error_lines(&errors), [start_line], "doc {k} cut at {cut}: {errors:?}");
        }
    }

    #[test]
    fn fuzz_cutting_out_a_random_span_never_loses_documents_outside_it() {
        let docs = fuzz_documents();
        let mut starts = Vec::new();
        let mut input = String::new();
        for (text, _) in &docs {
            starts.push(input.len());
            input.push_str(text);
            input.push('\n');
        }
        let mut rng = Rng(42);
        for _ in 0..1500 {
            let a = floor_boundary(&input, rng.below(input.len()));
            let b = floor_boundary(&input, a + rng.below((input.len() - a).min(3000)));
            let damaged = format!("{}{}", &input[..a], &input[b..]);
            let (items, _errors) = decode_str(&damaged);
            // Documents wholly before the cut, and those starting on a later line than the
            // one the cut joins, decode; those the cut touches may or may not.
            let joined_line_end = input[b..].find('\n').map_or(input.len(), |i| b + i);
            let joined =
                format!("{}{}", &input[input[..a].rfind('\n').map_or(0, |i| i + 1)..a], &input[b..joined_line_end]);
            let before: Vec<String> =
                docs.iter().zip(&starts).filter(|(d, s)| **s + d.0.len() < a).flat_map(|(d, _)| d.1.clone()).collect();
            let after: Vec<String> = docs
                .iter()
                .zip(&starts)
                .filter(|(_, s)| **s > joined_line_end)
                .flat_map(|(d, _)| d.1.clone())
                .collect();
            let got = labels(&items);
            assert_eq!(got[..before.len().min(got.len())], before[..], "cut {a}..{b}");
            if a < b && !joined.trim_end().ends_with('[') {
                assert!(got.ends_with(&after), "cut {a}..{b}: got {got:?}, want suffix {after:?}");
            }
        }
    }
}
