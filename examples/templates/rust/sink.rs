//! {{name}}: a sink formats each create / patch and writes it through the `output` import (the
//! host delivers the bytes: to standard output, or a file). This one writes each request's event
//! as one line of JSON, the way `kubectl get events -o json` shows it.
#![cfg_attr(target_arch = "wasm32", no_std)]

use eventpipe_guest::prelude::*;
use eventpipe_guest::{json, output};

eventpipe_guest::no_std_runtime!();
eventpipe_guest::export_sink!(Lines);

/// The sink (stateless).
#[derive(Default)]
struct Lines;

impl Sink for Lines {
    fn deliver(&self, tenant: &str, request: SinkRequest) -> Result<Event, SinkError> {
        self.deliver_batch(tenant, vec![request]).pop().unwrap_or_else(|| Err(SinkError::Permanent("no result".into())))
    }

    fn deliver_batch(&self, _tenant: &str, requests: Vec<SinkRequest>) -> Vec<Result<Event, SinkError>> {
        let mut lines = String::new();
        for request in &requests {
            json::write_event(request.event(), &mut lines);
            lines.push('\n');
        }
        // One write per batch; the host flushes after the call. A failed write is retried.
        let written = output::write(lines.as_bytes());
        requests
            .into_iter()
            .map(|r| match &written {
                Ok(()) => Ok(r.into_event()),
                Err(e) => Err(SinkError::Retryable(format!("{{name}}: output: {e}"))),
            })
            .collect()
    }
}
