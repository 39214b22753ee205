//! What the fuzz targets check on every input. A violated invariant panics, and afl-fuzz keeps
//! the input as a crash (`out/<target>/default/crashes/`).
//!
//! - [`check_decoder`]: the input, split on `\n`, is pushed line by line into a [`Decoder`] as
//!   raw bytes, then [`Decoder::finish`] is called.
//! - [`check_ingest_body`]: the input is a `POST /ingest` body given to [`decode_ingest_body`].
//!
//! Both then check the events they got by writing them out again (JSON Lines, pretty printed,
//! a `List`, watch envelopes) and decoding that.

use std::sync::Arc;

use chrono::Datelike;

use eventpipe::Event;
use eventpipe::source::decode::{DecodeError, Decoded, Decoder, decode_str};
use eventpipe::source::http::{IngestRoute, decode_ingest_body};

/// Checks the stream decoder on `data` split into lines at `\n`:
/// - every item and error names a line in `1..=n`, where `n` is the number of lines pushed when
///   it was emitted (an item never names a line not yet seen);
/// - line numbers never go backwards, across items and errors, in emission order;
/// - [`decode_str`] gives the same items and errors for `data` read as Go reads it (each byte
///   of an invalid UTF-8 sequence U+FFFD, [`as_go_reads_it`]);
/// - the events decoded survive being written out again (see [`check_round_trips`]).
pub fn check_decoder(data: &[u8]) {
    let mut decoder = Decoder::new();
    let mut out: Vec<(u64, Result<Decoded, DecodeError>)> = Vec::new();
    let mut pushed = 0u64;
    for line in data.split(|&b| b == b'\n') {
        pushed += 1;
        let at = pushed;
        decoder.push_bytes(line, |r| out.push((at, r)));
    }
    if let Some(e) = decoder.finish() {
        out.push((pushed, Err(e)));
    }

    let mut last = 0;
    for (at, r) in &out {
        let line = match r {
            Ok(item) => item.line(),
            Err(e) => e.line,
        };
        assert!((1..=*at).contains(&line), "line {line} named after {at} line(s) were pushed: {r:?}");
        assert!(line >= last, "line numbers went backwards: {line} after {last}: {r:?}");
        last = line;
    }

    let (mut items, mut errors) = (Vec::new(), Vec::new());
    for (_, r) in out {
        match r {
            Ok(item) => items.push(item),
            Err(e) => errors.push(e),
        }
    }
    let text = as_go_reads_it(data);
    let (str_items, str_errors) = decode_str(&text);
    assert_eq!(items, str_items, "push_bytes and decode_str decode different items");
    assert_eq!(
        same_errors(&text, &errors),
        same_errors(&text, &str_errors),
        "push_bytes and decode_str report different errors"
    );

    check_round_trips(&events_of(&items));
}

/// `data` as text, each byte of an invalid UTF-8 sequence U+FFFD, as Go's `encoding/json` reads
/// it (`utf8.DecodeRune` reads one byte of an invalid sequence at a time).
fn as_go_reads_it(data: &[u8]) -> String {
    let mut text = String::with_capacity(data.len());
    for chunk in data.utf8_chunks() {
        text.push_str(chunk.valid());
        chunk.invalid().iter().for_each(|_| text.push(char::REPLACEMENT_CHARACTER));
    }
    text
}

/// Checks [`decode_ingest_body`] on `data` as a request body:
/// - it is `Err` exactly when `data` is not UTF-8, at the same offset as [`std::str::from_utf8`];
/// - otherwise it holds what [`decode_str`] gives for the same text: the same events (same
///   value, watch type and line, as `IngestRoute::Batch { line }`, each with the request's
///   headers), as many non-events as bookmarks and watch errors, the same errors, `accepted` 0;
/// - every error names a line in `1..=` the body's number of lines;
/// - the events survive being written out again (see [`check_round_trips`]).
pub fn check_ingest_body(data: &[u8]) {
    let headers = Arc::new(vec![("x-tenant".to_owned(), "fuzz".to_owned())]);
    let result = decode_ingest_body(data, headers.clone());
    let (text, (ingested, report)) = match (std::str::from_utf8(data), result) {
        (Err(want), Err(got)) => {
            assert_eq!(got.valid_up_to(), want.valid_up_to(), "the body's UTF-8 error is at another offset");
            return;
        }
        (Ok(_), Err(e)) => panic!("a UTF-8 body was rejected: {e}"),
        (Err(e), Ok(_)) => panic!("a body that is not UTF-8 ({e}) was accepted"),
        (Ok(text), Ok(decoded)) => (text, decoded),
    };

    let lines = text.split('\n').count() as u64;
    for e in &report.errors {
        assert!((1..=lines).contains(&e.line), "error at line {} of a {lines}-line body: {e:?}", e.line);
    }
    assert_eq!(report.accepted, 0, "decode_ingest_body leaves `accepted` to its caller");

    let (items, errors) = decode_str(text);
    let decoded_events: Vec<&Decoded> = items.iter().filter(|d| matches!(d, Decoded::Event { .. })).collect();
    assert_eq!(ingested.len(), decoded_events.len(), "events: ingest body and decode_str disagree");
    assert_eq!(report.non_events as usize, items.len() - decoded_events.len(), "non-events: they disagree");
    let got_errors: Vec<DecodeError> =
        report.errors.iter().map(|e| DecodeError { line: e.line, message: e.error.clone() }).collect();
    assert_eq!(
        same_errors(text, &got_errors),
        same_errors(text, &errors),
        "errors: ingest body and decode_str disagree"
    );
    for (got, want) in ingested.iter().zip(decoded_events) {
        let Decoded::Event { event, watch_type, line, .. } = want else { unreachable!() };
        assert_eq!(&got.event, event);
        assert_eq!(got.watch_type, *watch_type);
        assert_eq!(got.route, IngestRoute::Batch { line: *line });
        assert!(Arc::ptr_eq(&got.headers, &headers), "an event lost the request's headers");
    }

    let events: Vec<Event> = ingested.into_iter().map(|i| i.event).collect();
    check_round_trips(&events);
}

/// What must be the same of two error lists for one text: each error's line, and its message
/// unless the text has a `\r`. [`decode_str`] splits lines with [`str::lines`], which takes
/// `\r\n` off a line before [`Decoder::push_line`] takes one more trailing `\r`; the
/// stream readers strip carriage returns each in their own way. The line is kept either way, but
/// an excerpt or column in a message may differ.
fn same_errors<'e>(text: &str, errors: &'e [DecodeError]) -> Vec<(u64, Option<&'e str>)> {
    let messages = !text.contains('\r');
    errors.iter().map(|e| (e.line, messages.then_some(e.message.as_str()))).collect()
}

fn events_of(items: &[Decoded]) -> Vec<Event> {
    items
        .iter()
        .filter_map(|d| match d {
            Decoded::Event { event, .. } => Some(event.clone()),
            _ => None,
        })
        .collect()
}

/// Decoded events, written out again as JSON Lines, as concatenated pretty-printed documents
/// (`kubectl get events -w -o json`), as one pretty `List` and as watch envelopes, decode to as
/// many events, in order, with no error, on strictly increasing lines, each of which writes out
/// exactly as the event it came from. Events that cannot make the trip for a known reason (see
/// [`known_not_to_round_trip`]) are left out.
pub fn check_round_trips(events: &[Event]) {
    let events: Vec<&Event> = events.iter().filter(|e| !known_not_to_round_trip(e)).collect();
    if events.is_empty() {
        return;
    }
    let compact: Vec<String> = events.iter().map(to_json).collect();
    expect_events("JSON Lines", &compact.join("\n"), &compact);

    let pretty: String = events.iter().map(|e| to_pretty(e) + "\n").collect();
    expect_events("pretty documents", &pretty, &compact);

    let list = serde_json::json!({ "kind": "List", "apiVersion": "v1", "items": events });
    expect_events("a List", &to_pretty(&list), &compact);

    let watch: String =
        events.iter().map(|e| to_json(&serde_json::json!({ "type": "MODIFIED", "object": e })) + "\n").collect();
    expect_events("watch envelopes", &watch, &compact);
}

/// Events the decoder accepts that do not come back from their own JSON, known and left out of
/// [`check_round_trips`] so that the fuzzer looks for something else:
/// - a `type` that is a watch event type (`ADDED`, …, `ERROR`) or a `kind` ending in `List`,
///   accepted inside a watch envelope or a list: as a top-level object the decoder takes it for
///   an envelope (an error: no `object`) or a list (no `items`: nothing at all);
/// - a timestamp whose UTC year is outside 0000-9999 (RFC 3339 with an offset, such as
///   `0000-01-01T00:00:00+01:00`): it is written as `-0001-…` or `+10000-…`, which does not
///   parse back;
/// - a floating-point number in `metadata` (kept verbatim in `ObjectMeta::other`), such as
///   `{"metadata":{"x":2000022000050000000000}}`: without its `float_roundtrip` feature,
///   serde_json does not always parse a number to the nearest `f64`, so the number written out
///   may read back as a neighbouring one.
fn known_not_to_round_trip(e: &Event) -> bool {
    let watch_type = e.type_.parse::<eventpipe::WatchEventType>().is_ok();
    let times = [
        e.metadata.creation_timestamp,
        e.first_timestamp,
        e.last_timestamp,
        e.event_time,
        e.series.as_ref().and_then(|s| s.last_observed_time),
    ];
    let out_of_range = times.iter().flatten().any(|t| !(0..=9999).contains(&t.year()));
    let float = e.metadata.other.values().any(has_float);
    watch_type || e.kind.ends_with("List") || out_of_range || float
}

fn has_float(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Number(n) => n.is_f64(),
        serde_json::Value::Array(a) => a.iter().any(has_float),
        serde_json::Value::Object(o) => o.values().any(has_float),
        _ => false,
    }
}

fn expect_events(shape: &str, text: &str, expected: &[String]) {
    let (items, errors) = decode_str(text);
    assert!(errors.is_empty(), "{shape}: the events written out again gave errors: {errors:?}\n{text}");
    assert_eq!(
        items.len(),
        expected.len(),
        "{shape}: {} event(s) written, {} decoded\n{text}",
        expected.len(),
        items.len()
    );
    let mut last = 0;
    for (item, want) in items.iter().zip(expected) {
        let Decoded::Event { event, line, .. } = item else { panic!("{shape}: decoded a non-event: {item:?}") };
        assert!(*line > last, "{shape}: event at line {line} after one at line {last}");
        last = *line;
        assert_eq!(&to_json(event), want, "{shape}: an event changed on its way through\n{text}");
    }
}

fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("an Event always serialises")
}

fn to_pretty<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string_pretty(value).expect("an Event always serialises")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every seed, as it is and with bytes that are not UTF-8 put inside and outside its
    /// strings, holds every invariant (what afl-fuzz starts from; `cargo test` here runs it
    /// without AFL++).
    #[test]
    fn the_seeds_hold_every_invariant() {
        let seeds = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/seeds")).unwrap();
        let mut checked = 0;
        for seed in seeds {
            let data = std::fs::read(seed.unwrap().path()).unwrap();
            let mut variants = vec![data.clone()];
            // A cut euro sign after every third quote (inside some strings, outside others).
            let mut cut = Vec::new();
            for (i, &b) in data.iter().enumerate() {
                cut.push(b);
                if b == b'"' && i % 3 == 0 {
                    cut.extend_from_slice(b"\xe2\x82");
                }
            }
            variants.push(cut);
            for data in variants {
                check_decoder(&data);
                check_ingest_body(&data);
                checked += 1;
            }
        }
        assert!(checked >= 16, "{checked} inputs");
    }

    #[test]
    fn go_reads_each_bad_byte_as_one_u_fffd() {
        assert_eq!(as_go_reads_it(b"a\xe2\x82b\xff"), "a\u{fffd}\u{fffd}b\u{fffd}");
    }
}
