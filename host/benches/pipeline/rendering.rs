//! What a templated webhook's rendering costs: the webhook sink's encoding step (each write
//! encoded when it is queued, each batch made into a body when it is sent) on one thread, over
//! the writes a run of the bundled stream makes, without HTTP: the default JSON items, the
//! `slack` preset, a custom template per write and the same template over batches
//! (`batch=true`).

use std::path::Path;
use std::sync::Arc;

use eventpipe::event::Event;
use eventpipe::sink::SinkPatch;
use eventpipe::sink::retry::Verb;
use eventpipe::sink::template::{BodyOptions, Rendered};
use eventpipe::sink::webhook::{BatchEncoding, DEFAULT_MAX_BATCH, JsonItems};

/// A custom per-write template: what a chat or incident body typically takes of a write (a
/// title, the message cut to a limit, the count, the time formatted, the object and the key).
pub const CUSTOM_TEMPLATE: &str = r#"{"title": {{ (type ~ " " ~ reason ~ " on " ~ involved_object.kind ~ "/" ~ involved_object.name) | truncate_chars(150) | tojson }},
 "text": {{ message | truncate_bytes(2000) | tojson }}, "count": {{ count }}, "verb": {{ verb | tojson }},
 "namespace": {{ involved_object.namespace | default("") | tojson }},
 "at": {{ ((last_timestamp | strftime("%Y-%m-%d %H:%M:%S")) if last_timestamp else "") | tojson }},
 "key": {{ key | tojson }}, "tenant": {{ tenant | tojson }}}"#;

/// [`CUSTOM_TEMPLATE`]'s body for every write of a batch, as a batch template.
pub const CUSTOM_BATCH_TEMPLATE: &str = r#"{"tenant": {{ tenant | tojson }}, "records": [{% for item in items %}
{"title": {{ (item.type ~ " " ~ item.reason ~ " on " ~ item.involved_object.kind ~ "/" ~ item.involved_object.name) | truncate_chars(150) | tojson }},
 "text": {{ item.message | truncate_bytes(2000) | tojson }}, "count": {{ item.count }}, "verb": {{ item.verb | tojson }},
 "namespace": {{ item.involved_object.namespace | default("") | tojson }},
 "at": {{ ((item.last_timestamp | strftime("%Y-%m-%d %H:%M:%S")) if item.last_timestamp else "") | tojson }},
 "key": {{ item.key | tojson }}}{{ "," if not loop.last }}{% endfor %}]}"#;

/// One sink call of a run: its verb, event and patch body (empty: none).
pub struct Write {
    verb: Verb,
    event: Event,
    patch: Vec<u8>,
}

/// The calls of a JSON-lines sink's output (`{"verb","event","patch"}` lines).
pub fn writes(calls: &str) -> Vec<Write> {
    calls
        .lines()
        .map(|line| {
            let call: serde_json::Value = serde_json::from_str(line).expect("a sink call");
            let verb = if call["verb"] == "patch" { Verb::Patch } else { Verb::Create };
            let event = serde_json::from_value(call["event"].clone()).expect("the call's event");
            let patch = if call["patch"].is_null() { Vec::new() } else { call["patch"].to_string().into_bytes() };
            Write { verb, event, patch }
        })
        .collect()
}

/// One way of encoding: its label, its encoding, and the events per batch its sink sends.
pub struct Case {
    /// What the figure's rows call it.
    pub label: &'static str,
    encoding: Arc<dyn BatchEncoding>,
    max_batch: usize,
}

/// The cases, the default JSON items first (the others' ratios are to it); the templates are
/// written into `dir`.
pub fn cases(dir: &Path) -> Vec<Case> {
    let rendered = |options: BodyOptions| -> Arc<dyn BatchEncoding> {
        Arc::new(Rendered::new("bench", "default", &options).expect("the template compiles"))
    };
    let file = |name: &str, text: &str, batch: bool| {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("writing the template");
        let mut options = BodyOptions::default();
        options.set("template", path.to_str().expect("a UTF-8 path")).expect("an option").expect("compiles");
        options.batch = batch;
        rendered(options)
    };
    let mut slack = BodyOptions::default();
    slack.set("preset", "slack").expect("an option").expect("a preset");
    vec![
        Case { label: "no template (JSON items)", encoding: Arc::new(JsonItems), max_batch: DEFAULT_MAX_BATCH },
        Case { label: "preset=slack", encoding: rendered(slack), max_batch: 1 },
        Case { label: "custom template", encoding: file("custom.json.j2", CUSTOM_TEMPLATE, false), max_batch: 1 },
        Case {
            label: "custom template, batch=true",
            encoding: file("batch.json.j2", CUSTOM_BATCH_TEMPLATE, true),
            max_batch: DEFAULT_MAX_BATCH,
        },
    ]
}

/// One pass of `case` over `writes`: every write encoded, then each batch of `max_batch` of
/// them made into a body, as the sink does. Returns the bodies' bytes; panics when a write or
/// batch does not encode (the figure would not be of the whole stream).
pub fn pass(case: &Case, writes: &[Write]) -> usize {
    let mut bytes = 0usize;
    for chunk in writes.chunks(case.max_batch) {
        let items: Vec<Vec<u8>> = chunk
            .iter()
            .map(|w| case.encoding.encode(w.verb, &w.event, SinkPatch::Bytes(&w.patch)).expect("the write encodes"))
            .collect();
        let refs: Vec<&[u8]> = items.iter().map(Vec::as_slice).collect();
        bytes += case.encoding.body(&refs).expect("the batch renders").len();
    }
    bytes
}
