//! `slack`: an encoder that turns each batch of writes into one Slack incoming-webhook message
//! (`webhook:https://hooks.slack.com/services/…,encoder=slack`): a `text` fallback with one
//! line per write, and one Block Kit `section` per write (at most 50 blocks: past 49 writes the
//! last block says how many more the text holds). The host posts it, with its queue, batching,
//! retries (Slack's `429` and `Retry-After`) and order; the plugin has no network.
//!
//! ```text
//! {"text":":warning: *BackOff* Pod default/web-0: Back-off restarting failed container","blocks":[{"type":"section","text":{"type":"mrkdwn","text":":warning: *BackOff* Pod default/web-0: Back-off restarting failed container"}}]}
//! ```
//!
//! A repeat shows its count (`(x3)`); `Normal` events get `:information_source:`. Config key
//! `min_type = "Warning"` leaves other events out of the message (a batch of none of them is
//! an empty `text`, which the plugin refuses: such a batch fails without a request). A section
//! holds at most 3,000 characters (Slack's limit), cut there.
#![cfg_attr(target_arch = "wasm32", no_std)]

use eventpipe_guest::json;
use eventpipe_guest::prelude::*;

eventpipe_guest::no_std_runtime!();
eventpipe_guest::export_encoder!(Slack);

/// Slack's most blocks in one message.
const MAX_BLOCKS: usize = 50;
/// Slack's most characters in a section's text.
const MAX_SECTION_CHARS: usize = 3000;

/// The encoder; `warnings_only` from config key `min_type`.
struct Slack {
    warnings_only: bool,
}

impl Default for Slack {
    fn default() -> Self {
        Self { warnings_only: config::get("min_type").is_some_and(|t| t == "Warning") }
    }
}

/// The message line for `event`.
fn line(event: &Event) -> String {
    let icon = if event.type_ == "Warning" { ":warning:" } else { ":information_source:" };
    let o = &event.involved_object;
    let object = if o.namespace.is_empty() { o.name.clone() } else { format!("{}/{}", o.namespace, o.name) };
    let repeat = if event.count > 1 { format!(" (x{})", event.count) } else { String::new() };
    format!("{icon} *{}* {} {object}{repeat}: {}", event.reason, o.kind, event.message)
}

/// Appends a `mrkdwn` section block holding `text` (cut to [`MAX_SECTION_CHARS`]).
fn section(text: &str, out: &mut String) {
    let cut = text.char_indices().nth(MAX_SECTION_CHARS).map_or(text, |(at, _)| &text[..at]);
    out.push_str("{\"type\":\"section\",\"text\":{\"type\":\"mrkdwn\",\"text\":");
    json::write_str(cut, out);
    out.push_str("}}");
}

impl Encoder for Slack {
    fn encode(&self, _tenant: &str, writes: &[EncoderWrite]) -> Result<EncodedRequest, String> {
        let lines: Vec<String> = writes
            .iter()
            .map(|w| w.request.event())
            .filter(|e| !self.warnings_only || e.type_ == "Warning")
            .map(line)
            .collect();
        if lines.is_empty() {
            return Err("no event of the batch is for Slack (min_type)".into());
        }
        let mut body = String::from("{\"text\":");
        json::write_str(&lines.join("\n"), &mut body);
        body.push_str(",\"blocks\":[");
        let shown = if lines.len() > MAX_BLOCKS { MAX_BLOCKS - 1 } else { lines.len() };
        for (i, text) in lines[..shown].iter().enumerate() {
            if i > 0 {
                body.push(',');
            }
            section(text, &mut body);
        }
        if shown < lines.len() {
            body.push(',');
            section(&format!("…and {} more", lines.len() - shown), &mut body);
        }
        body.push_str("]}");
        Ok(EncodedRequest::json(body.into_bytes()))
    }
}
