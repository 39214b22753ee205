//! `eventpipe replay`: one tenant stage (an EventCorrelator, no filter) over a recorded stream, its clocks set from each line,
//! writing client-go's `EventCorrelateResult` per line (the contract of the conformance suite).
//!
//! Input lines: `{"clock": RFC3339Nano, "event": Event, "spam_filter_clock"?: RFC3339Nano}`;
//! any other shape the [`crate::source::decode`] decoder accepts is replayed too, with the
//! event's own time as its clock. Output: one `{"skip","event","patch"}` line per input
//! document, in order; a line that cannot be replayed yields `{"error": "line N: …"}` so that
//! output stays aligned with input.

use std::io::{BufRead, Write};

use crate::source::lines::{Line, LineEnd, read_line};

use crate::correlator::{CorrelatorOptions, Occurrence, PREPARE_BATCH_SIZE};
use crate::source::decode::{DecodeError, Decoded, Decoder};
use crate::stage::TenantStage;
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

/// Replays `input` to `output`. Malformed lines are reported on the `error` output line and
/// in the log (with their line number) and never stop the replay.
///
/// # Errors
/// Only I/O errors on `input` or `output`.
pub fn replay(
    input: impl BufRead,
    mut output: impl Write,
    options: ReplayOptions,
) -> Result<ReplaySummary, ReplayError> {
    let mut stage = TenantStage::new(DEFAULT_TENANT, options.correlator);
    let mut decoder = Decoder::new();
    let mut summary = ReplaySummary::default();
    let mut pending: Vec<Result<Decoded, DecodeError>> = Vec::with_capacity(PREPARE_BATCH_SIZE);
    let mut write_batch = |pending: &mut Vec<Result<Decoded, DecodeError>>, summary: &mut ReplaySummary| {
        flush(pending, &mut stage, &mut output, summary, !options.no_update_state)
    };
    let mut input = input;
    let mut line = Line::default();
    loop {
        line.clear();
        // Bounded: a line over MAX_LINE_BYTES is cut there (and rejected by the decoder).
        if read_line(&mut input, &mut line).map_err(ReplayError::Read)? == LineEnd::Eof && line.read == 0 {
            break;
        }
        let text = line.bytes.strip_suffix(b"\n").unwrap_or(&line.bytes);
        // A line that is not UTF-8 becomes an error line in its place (exit 2), as any bad line.
        decoder.push_bytes(text, |item| pending.push(item));
        if pending.len() >= PREPARE_BATCH_SIZE {
            write_batch(&mut pending, &mut summary)?;
        }
    }
    pending.extend(decoder.finish().map(Err));
    write_batch(&mut pending, &mut summary)?;
    summary.aggregated = stage.stats().aggregated;
    output.flush().map_err(ReplayError::Write)?;
    Ok(summary)
}

/// Correlates and writes the pending documents, in order.
fn flush(
    pending: &mut Vec<Result<Decoded, DecodeError>>,
    stage: &mut TenantStage,
    output: &mut impl Write,
    summary: &mut ReplaySummary,
    update_state: bool,
) -> Result<(), ReplayError> {
    // Positions of the events among the pending documents, so errors keep their place.
    let mut occurrences = Vec::with_capacity(pending.len());
    let mut slots = Vec::with_capacity(pending.len());
    for item in pending.drain(..) {
        match item {
            Ok(Decoded::Event { event, clock, spam_filter_clock, .. }) => {
                occurrences.push(Occurrence::replayed(event, clock, spam_filter_clock));
                slots.push(None);
            }
            Ok(other) => slots.push(Some(format!("line {}: not an event ({})", other.line(), other.describe()))),
            Err(e) => slots.push(Some(e.to_string())),
        }
    }
    let mut results = stage.correlate(occurrences, |r| r.event.clone().filter(|_| update_state)).into_iter();
    for slot in slots {
        let line = match slot {
            Some(error) => {
                tracing::warn!(%error, "replay: skipping input");
                summary.errors += 1;
                serde_json::to_vec(&serde_json::json!({ "error": error }))
            }
            None => {
                let result = results.next().expect("one result per event slot").expect("no filters in replay");
                summary.results += 1;
                summary.skipped += u64::from(result.skip);
                serde_json::to_vec(&result)
            }
        }
        .expect("results serialise");
        output.write_all(&line).and_then(|()| output.write_all(b"\n")).map_err(ReplayError::Write)?;
    }
    Ok(())
}
