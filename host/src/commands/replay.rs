//! `eventpipe replay`: one tenant stage (an EventCorrelator, no filter) over a recorded stream, its clocks set from each line,
//! writing client-go's `EventCorrelateResult` per line (the contract of the conformance suite).
//!
//! Input lines: `{"clock": RFC3339Nano, "event": Event, "spam_filter_clock"?: RFC3339Nano}`;
//! any other shape the [`crate::source::decode`] decoder accepts is replayed too, with the
//! event's own time as its clock. Output: one `{"skip","event","patch"}` line per input
//! document, in order; a line that cannot be replayed yields `{"error": "line N: …"}` so that
//! output stays aligned with input.

use std::io::{BufRead, Write};
use std::sync::mpsc;

use crate::source::lines::{Line, LineEnd, read_line};

use crate::correlator::{CorrelatorOptions, EventCorrelateResult, Occurrence, PREPARE_BATCH_SIZE};
use crate::pipeline::stage::{Staged, TenantStage};
use crate::source::decode::{DecodeError, Decoded, Decoder};
use crate::tenant::DEFAULT_TENANT;

/// How to replay.
#[derive(Debug, Clone, Default)]
pub struct ReplayOptions {
    /// The correlator's options (client-go defaults for zero values).
    pub correlator: CorrelatorOptions,
    /// Skip `UpdateState` after each written result (models a sink that never succeeds).
    pub no_update_state: bool,
}

/// What a replay did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReplaySummary {
    /// Results written (one per event document).
    pub results: u64,
    /// Results with `skip: true`.
    pub skipped: u64,
    /// Events replaced by an aggregate event.
    pub aggregated: u64,
    /// Lines that were not events (malformed, bookmarks, watch errors): an `error` line each.
    pub errors: u64,
}

/// Why a replay stopped early: only I/O on the input or output.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// Reading the input failed.
    #[error("reading input: {0}")]
    Read(#[source] std::io::Error),
    /// Writing the output failed.
    #[error("writing output: {0}")]
    Write(#[source] std::io::Error),
}

/// Batches in flight between two threads of a replay (each up to [`PREPARE_BATCH_SIZE`]
/// documents): bounds memory while each thread keeps working.
const BATCHES_IN_FLIGHT: usize = 4;

/// One input document's outcome, in input order.
enum Outcome {
    /// The event's result.
    Result(EventCorrelateResult),
    /// Why the document was not replayed (`line N: …`).
    Error(String),
}

/// Replays `input` to `output`. Malformed lines are reported on the `error` output line and
/// in the log (with their line number) and never stop the replay.
///
/// Three threads, each a step of one pipeline, hand batches of [`PREPARE_BATCH_SIZE`]
/// documents on: reading and decoding (a thread of its own), correlating (the calling
/// thread: the EventCorrelator is sequential by nature), and writing the JSON lines (a
/// thread of its own). The output is exactly that of one thread doing all three in turn.
///
/// # Errors
/// Only I/O errors on `input` or `output`; the first one stops every step.
pub fn replay(
    input: impl BufRead + Send,
    output: impl Write + Send,
    options: ReplayOptions,
) -> Result<ReplaySummary, ReplayError> {
    let mut stage = TenantStage::new(DEFAULT_TENANT, options.correlator);
    let (decoded_tx, decoded_rx) = mpsc::sync_channel::<Vec<Result<Decoded, DecodeError>>>(BATCHES_IN_FLIGHT);
    let (outcome_tx, outcome_rx) = mpsc::sync_channel::<Vec<Outcome>>(BATCHES_IN_FLIGHT);
    std::thread::scope(|scope| {
        let spawn = |name: &str| std::thread::Builder::new().name(format!("replay-{name}"));
        let reader = spawn("read").spawn_scoped(scope, move || read(input, &decoded_tx)).map_err(ReplayError::Read)?;
        let writer =
            spawn("write").spawn_scoped(scope, move || write(output, &outcome_rx)).map_err(ReplayError::Write)?;
        let mut summary = ReplaySummary::default();
        for batch in decoded_rx {
            let outcomes = correlate(batch, &mut stage, &mut summary, !options.no_update_state);
            if outcome_tx.send(outcomes).is_err() {
                break; // the writer failed: its error is returned below
            }
        }
        drop(outcome_tx);
        summary.aggregated = stage.stats().aggregated;
        let written = writer.join().expect("the replay writer does not panic");
        let read = reader.join().expect("the replay reader does not panic");
        written?;
        read?;
        Ok(summary)
    })
}

/// Step 1: reads and decodes `input`, handing on batches of up to [`PREPARE_BATCH_SIZE`]
/// documents, until the input ends or the correlating step stops.
fn read(mut input: impl BufRead, to: &mpsc::SyncSender<Vec<Result<Decoded, DecodeError>>>) -> Result<(), ReplayError> {
    let mut decoder = Decoder::new();
    let mut pending: Vec<Result<Decoded, DecodeError>> = Vec::with_capacity(PREPARE_BATCH_SIZE);
    let mut line = Line::default();
    loop {
        line.clear();
        // Bounded: a line over MAX_LINE_BYTES is cut there (and rejected by the decoder).
        if read_line(&mut input, &mut line).map_err(ReplayError::Read)? == LineEnd::Eof && line.read == 0 {
            break;
        }
        let text = line.bytes.strip_suffix(b"\n").unwrap_or(&line.bytes);
        // Bytes that are not UTF-8 are read as Go reads them (U+FFFD each).
        let start = pending.len();
        decoder.push_bytes(text, |item| pending.push(item));
        one_outcome_per_bad_line(&mut pending, start);
        if pending.len() >= PREPARE_BATCH_SIZE {
            let full = std::mem::replace(&mut pending, Vec::with_capacity(PREPARE_BATCH_SIZE));
            if to.send(full).is_err() {
                return Ok(()); // a later step failed: its error is the one returned
            }
        }
    }
    pending.extend(decoder.finish().map(Err));
    if !pending.is_empty() {
        let _ = to.send(pending);
    }
    Ok(())
}

/// A line the decoder found wrong is one error line of output, as Go's `json.Unmarshal` of the
/// line fails as a whole: events that line also held (a document followed by text on the same
/// line) are dropped, so that the output stays one line per input line. `pending[start..]` are
/// the items of the line just pushed (and of earlier lines it completed, which are kept); the
/// decoder gives at most one error per line.
fn one_outcome_per_bad_line(pending: &mut Vec<Result<Decoded, DecodeError>>, start: usize) {
    let bad: Vec<u64> = pending[start..].iter().filter_map(|item| item.as_ref().err().map(|e| e.line)).collect();
    if bad.is_empty() {
        return;
    }
    let mut index = 0;
    pending.retain(|item| {
        index += 1;
        index <= start || !matches!(item, Ok(decoded) if bad.contains(&decoded.line()))
    });
}

/// Step 2: correlates one batch, in order, calling `update_state` after each written result
/// as client-go's `recordToSink` does after a successful write.
fn correlate(
    batch: Vec<Result<Decoded, DecodeError>>,
    stage: &mut TenantStage,
    summary: &mut ReplaySummary,
    update_state: bool,
) -> Vec<Outcome> {
    // Per document, in order: `None` for an event, else why it is not one (errors keep their
    // place among the results).
    let mut occurrences = Vec::with_capacity(batch.len());
    let mut slots: Vec<Option<String>> = Vec::with_capacity(batch.len());
    for item in batch {
        slots.push(match item {
            Ok(Decoded::Event { event, clock, spam_filter_clock, .. }) => {
                occurrences.push(Occurrence::replayed(event, clock, spam_filter_clock));
                None
            }
            Ok(other) => Some(format!("line {}: not an event ({})", other.line(), other.describe())),
            Err(e) => Some(e.to_string()),
        });
    }
    let mut staged = stage.prepare(occurrences).into_iter();
    slots
        .into_iter()
        .map(|slot| match slot {
            Some(error) => {
                tracing::warn!(%error, "replay: skipping input");
                summary.errors += 1;
                Outcome::Error(error)
            }
            None => {
                let Some(Staged::Prepared(prepared)) = staged.next() else {
                    unreachable!("replay has no filters and no rules: one prepared event per event")
                };
                let key = prepared.state_key();
                let result = stage.finish(prepared);
                if update_state && let Some(event) = &result.event {
                    stage.update_state_keyed(event, key);
                }
                summary.results += 1;
                summary.skipped += u64::from(result.skip);
                Outcome::Result(result)
            }
        })
        .collect()
}

/// Step 3: writes one JSON line per outcome, in order.
fn write(mut output: impl Write, from: &mpsc::Receiver<Vec<Outcome>>) -> Result<(), ReplayError> {
    let mut text = Vec::with_capacity(1 << 16);
    for batch in from {
        text.clear();
        for outcome in batch {
            match &outcome {
                Outcome::Result(result) => serde_json::to_writer(&mut text, result),
                Outcome::Error(error) => serde_json::to_writer(&mut text, &serde_json::json!({ "error": error })),
            }
            .expect("results serialise");
            text.push(b'\n');
        }
        output.write_all(&text).map_err(ReplayError::Write)?;
    }
    output.flush().map_err(ReplayError::Write)
}
