//! `slack`: a sink that formats each create / patch as one Slack-style message, a JSON line
//! `{"text": "…"}` (the body of a Slack incoming-webhook request), written through the sink's
//! `output` import. The plugin has no network access: the host delivers the bytes (to a file or
//! standard output today; to a webhook URL with the host's webhook sink).
//!
//! ```text
//! {"text":":warning: *BackOff* Pod default/web-0: Back-off restarting failed container"}
//! {"text":":warning: *BackOff* Pod default/web-0 (x3): Back-off restarting failed container"}
//! ```
//!
//! `Normal` events get `:information_source:`. Config key `min_type = "Warning"` keeps only
//! warnings (others are acknowledged without a message). Errors: an output the host cannot
//! write is a retryable error.
#![cfg_attr(target_arch = "wasm32", no_std)]

use eventpipe_guest::prelude::*;
use eventpipe_guest::{json, output};

eventpipe_guest::no_std_runtime!();
eventpipe_guest::export_sink!(Slack);

/// The sink; `warnings_only` from config key `min_type`.
struct Slack {
    warnings_only: bool,
}

impl Default for Slack {
    fn default() -> Self {
        Self { warnings_only: config::get("min_type").is_some_and(|t| t == "Warning") }
    }
}

/// Appends the message line for `event` to `out`.
fn write_message(event: &Event, out: &mut String) {
    let icon = if event.type_ == "Warning" { ":warning:" } else { ":information_source:" };
    let o = &event.involved_object;
    let object = if o.namespace.is_empty() { o.name.clone() } else { format!("{}/{}", o.namespace, o.name) };
    let repeat = if event.count > 1 { format!(" (x{})", event.count) } else { String::new() };
    let text = format!("{icon} *{}* {} {object}{repeat}: {}", event.reason, o.kind, event.message);
    out.push_str("{\"text\":");
    json::write_str(&text, out);
    out.push_str("}\n");
}

impl Sink for Slack {
    fn deliver(&self, tenant: &str, request: SinkRequest) -> Result<Event, SinkError> {
        self.deliver_batch(tenant, vec![request]).pop().unwrap_or_else(|| Err(SinkError::Permanent("no result".into())))
    }

    fn deliver_batch(&self, _tenant: &str, requests: Vec<SinkRequest>) -> Vec<Result<Event, SinkError>> {
        let mut lines = String::new();
        for request in &requests {
            let event = request.event();
            if !self.warnings_only || event.type_ == "Warning" {
                write_message(event, &mut lines);
            }
        }
        // One write per batch; the host flushes after the call.
        let written = if lines.is_empty() { Ok(()) } else { output::write(lines.as_bytes()) };
        requests
            .into_iter()
            .map(|r| match &written {
                Ok(()) => Ok(r.into_event()),
                Err(e) => Err(SinkError::Retryable(format!("slack: output: {e}"))),
            })
            .collect()
    }
}
