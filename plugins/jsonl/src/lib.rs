//! `jsonl`: a sink that writes each request as one JSON line to its output, in the format of
//! the host's built-in JSON-lines sink:
//!
//! ```text
//! {"verb":"create","event":{…},"patch":null}
//! {"verb":"patch","event":{…},"patch":{"count":2,"lastTimestamp":"…","message":"…"}}
//! ```
//!
//! `event` is the event in the apiserver's wire form ([`eventpipe_guest::json`]); `patch` is
//! the patch body, compacted (whitespace outside strings removed, key order kept), or `null`
//! when the body is empty. The lines go through the sink `output` import, so the host decides
//! where they land (standard output by default); a batch is written with one `output.write`.
//! Like the host's sink it stores nothing and echoes each event back.
//!
//! Errors: a patch body that is not JSON is a permanent error (the host's sink refuses it the
//! same way); an output the host cannot write is a retryable error.
#![cfg_attr(target_arch = "wasm32", no_std)]

mod compact;

use eventpipe_guest::prelude::*;
use eventpipe_guest::{json, output};

eventpipe_guest::no_std_runtime!();
eventpipe_guest::export_sink!(JsonLines);

/// The sink (stateless).
#[derive(Debug, Default)]
pub struct JsonLines;

impl Sink for JsonLines {
    fn deliver(&self, tenant: &str, request: SinkRequest) -> Result<Event, SinkError> {
        self.deliver_batch(tenant, vec![request])
            .pop()
            .unwrap_or_else(|| Err(SinkError::Permanent("jsonl: no result".into())))
    }

    fn deliver_batch(
        &self,
        _tenant: &str,
        requests: Vec<SinkRequest>,
    ) -> Vec<Result<Event, SinkError>> {
        let mut lines = String::with_capacity(768 * requests.len());
        let mut results: Vec<Result<Event, SinkError>> = requests
            .into_iter()
            .map(|request| {
                let start = lines.len();
                match write_line(&request, &mut lines) {
                    Ok(()) => Ok(request.into_event()),
                    Err(e) => {
                        lines.truncate(start);
                        Err(e)
                    }
                }
            })
            .collect();
        if !lines.is_empty()
            && let Err(e) = output::write(lines.as_bytes())
        {
            let error = format!("jsonl: output: {e}");
            for result in results.iter_mut().filter(|r| r.is_ok()) {
                *result = Err(SinkError::Retryable(error.clone()));
            }
        }
        results
    }
}

/// Appends the request's line, newline included.
///
/// # Errors
/// [`SinkError::Permanent`] when a patch body is not JSON.
pub fn write_line(request: &SinkRequest, out: &mut String) -> Result<(), SinkError> {
    let (verb, body) = match request {
        SinkRequest::Create(_) => ("create", &[][..]),
        SinkRequest::Patch(p) => ("patch", &p.body[..]),
    };
    out.push_str("{\"verb\":\"");
    out.push_str(verb);
    out.push_str("\",\"event\":");
    json::write_event(request.event(), out);
    out.push_str(",\"patch\":");
    if body.is_empty() {
        out.push_str("null");
    } else {
        compact::compact(body, out)
            .map_err(|e| SinkError::Permanent(format!("jsonl: patch is not JSON: {e}")))?;
    }
    out.push_str("}\n");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use eventpipe_guest::PatchRequest;

    fn event() -> Event {
        let mut e = Event::default();
        e.metadata.name = "foo.1816687efbf1ca00".into();
        e.reason = "Started".into();
        e.count = 2;
        e
    }

    #[test]
    fn create_and_patch_lines() {
        let results = JsonLines.deliver_batch(
            "t",
            vec![
                SinkRequest::Create(event()),
                SinkRequest::Patch(PatchRequest {
                    event: event(),
                    body: br#"{"count": 2,
                    "message":"a b"}"#
                        .to_vec(),
                }),
                SinkRequest::Patch(PatchRequest {
                    event: event(),
                    body: b"{oops".to_vec(),
                }),
                SinkRequest::Patch(PatchRequest {
                    event: event(),
                    body: vec![],
                }),
            ],
        );
        assert_eq!(results[0], Ok(event()));
        assert_eq!(results[1], Ok(event()));
        assert!(
            matches!(&results[2], Err(SinkError::Permanent(m)) if m.starts_with("jsonl: patch is not JSON"))
        );
        assert_eq!(results[3], Ok(event()));

        let mut line = String::new();
        write_line(
            &SinkRequest::Patch(PatchRequest {
                event: event(),
                body: br#"{"count":2}"#.to_vec(),
            }),
            &mut line,
        )
        .unwrap();
        assert_eq!(
            line,
            "{\"verb\":\"patch\",\"event\":{\"metadata\":{\"name\":\"foo.1816687efbf1ca00\",\"creationTimestamp\":null},\
             \"involvedObject\":{},\"reason\":\"Started\",\"source\":{},\"firstTimestamp\":null,\"lastTimestamp\":null,\
             \"count\":2,\"eventTime\":null,\"reportingComponent\":\"\",\"reportingInstance\":\"\"},\"patch\":{\"count\":2}}\n"
        );
    }
}
