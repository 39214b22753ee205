//! Webhook bodies from templates: `webhook:URL,template=FILE` and `webhook:URL,preset=NAME`.
//!
//! A templated webhook is the [webhook sink](super::webhook) (its queue, adaptive concurrency,
//! retries with `Retry-After`, per-object order and delivery modes) with another
//! [`BatchEncoding`]: [`Rendered`], which renders request bodies with
//! [minijinja](https://docs.rs/minijinja), Jinja2's syntax: one per write (a batch is one
//! write), or with `batch=true` one per batch of writes (`webhook:URL,template=FILE,batch=true`;
//! the batches of the webhook's `max_batch` and `max_batch_bytes`).
//!
//! # Context
//! A template sees, for one write:
//!
//! | name | what |
//! |---|---|
//! | `event` | the correlated event as the JSON-lines sink writes it (`event.metadata.name`, `event.involvedObject.kind`, `event.source.component`, …) |
//! | `verb` | `create` (first occurrence) or `patch` (a repeat: `count` went up) |
//! | `count` | the event's count (occurrences so far) |
//! | `type`, `reason`, `message` | the event's fields |
//! | `first_timestamp`, `last_timestamp` | RFC 3339 text, or none when unset |
//! | `involved_object` | `{kind, namespace, name, uid, apiVersion, fieldPath, …}` |
//! | `tenant` | the tenant whose sink this is |
//! | `key` | the event's correlation key: 32 hex digits of SHA-256 over the involved object (kind, namespace, name, uid, apiVersion), the source (component, host) and the reason — the same for every repeat of one event, so a PagerDuty `dedup_key` or Opsgenie `alias` |
//! | `secret` | the sink's secret (`secret_env=VAR` or `secret_file=PATH`), or none |
//! | `resolve_on` | the sink's `resolve_on` option (an event type), or none |
//! | `enrichment` | with enrichment on ([`crate::event::enrichment`]): `{cluster, labels, annotations, owner: {kind, name, uid, apiVersion}, node: {name, labels}}`, each key only when configured and found; none without enrichment |
//!
//! A batch template (`batch=true`) sees, for one batch:
//!
//! | name | what |
//! |---|---|
//! | `items` | the batch's writes in call order, each the context above (`item.verb`, `item.event`, `item.count`, `item.key`, `item.enrichment`, …) |
//! | `tenant`, `secret`, `resolve_on` | as above |
//!
//! A write's context reaches the batch as JSON: it is encoded when the write is queued (its
//! size counts towards `max_batch_bytes`) and decoded when the batch's body is rendered.
//!
//! # Filters
//! Besides minijinja's built-ins (`tojson` escapes any value as JSON, `default`, `upper`, …):
//! - `strftime(format="%Y-%m-%dT%H:%M:%SZ")`: an RFC 3339 time as chrono's `strftime` format;
//!   raises on anything else.
//! - `truncate_bytes(n, end="…")`: text cut to at most `n` bytes of UTF-8 (never inside a
//!   character), `end` included when cut.
//! - `truncate_chars(n, end="…")`: the same in characters (Unicode scalar values), for limits
//!   stated in characters (Slack, Discord).
//!
//! # Errors
//! A template that fails to render an event (a filter raising, an error in an expression) or
//! renders something that is not JSON fails that write for good
//! ([`SinkError::RequestConstruction`], dropped by `recordToSink`): logged with the event's
//! name and counted (`eventpipe_sink_render_errors_total{sink}`); the sink and the other events
//! go on. A batch template that fails on a batch fails the batch's writes for good in the same
//! way, logged once with the number of events and the first [`NAMED`] names, counted per event
//! (in `render_errors_total` and `failures_total`); it is not retried, and the other batches are
//! delivered. A syntax error is found when the sink option is parsed (`eventpipe validate`,
//! `config show`, start-up), with the file and line, for batch templates too.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use hyper::StatusCode;
use minijinja::{Environment, Error, ErrorKind, Value};
use sha2::Digest as _;

use super::encoding::BatchEncoding;
use super::retry::Verb;
use super::{SinkError, SinkPatch};
use crate::event::Event;

/// A body preset: a template embedded in the binary for one service's webhook API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    /// Slack incoming webhook: Block Kit `blocks` and a `text` fallback.
    Slack,
    /// Microsoft Teams Workflows webhook: an Adaptive Card in an `attachments` message.
    Teams,
    /// Discord webhook: `content` and one embed (2000 / 4096 character limits).
    Discord,
    /// Google Chat incoming webhook: `text`.
    GoogleChat,
    /// PagerDuty Events API v2: `routing_key` from the secret, `dedup_key` = `key`.
    PagerDuty,
    /// Opsgenie Alert API: `alias` = `key`; the secret is sent as `Authorization: GenieKey …`.
    Opsgenie,
}

impl Preset {
    /// Every preset, in the order the docs list them.
    pub const ALL: [Preset; 6] =
        [Preset::Slack, Preset::Teams, Preset::Discord, Preset::GoogleChat, Preset::PagerDuty, Preset::Opsgenie];

    /// The name given as `preset=NAME`.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Slack => "slack",
            Preset::Teams => "teams",
            Preset::Discord => "discord",
            Preset::GoogleChat => "google-chat",
            Preset::PagerDuty => "pagerduty",
            Preset::Opsgenie => "opsgenie",
        }
    }

    /// The template text.
    pub fn source(self) -> &'static str {
        match self {
            Preset::Slack => include_str!("presets/slack.json.j2"),
            Preset::Teams => include_str!("presets/teams.json.j2"),
            Preset::Discord => include_str!("presets/discord.json.j2"),
            Preset::GoogleChat => include_str!("presets/google-chat.json.j2"),
            Preset::PagerDuty => include_str!("presets/pagerduty.json.j2"),
            Preset::Opsgenie => include_str!("presets/opsgenie.json.j2"),
        }
    }

    /// The environment variable the secret is read from when the sink names none: the
    /// PagerDuty routing key and the Opsgenie API key are never given on the command line.
    pub fn secret_env(self) -> Option<&'static str> {
        match self {
            Preset::PagerDuty => Some("EVENTPIPE_PAGERDUTY_ROUTING_KEY"),
            Preset::Opsgenie => Some("EVENTPIPE_OPSGENIE_API_KEY"),
            _ => None,
        }
    }

    /// The `Authorization` scheme the secret is sent with, if the service takes it in a header.
    pub fn authorization_scheme(self) -> Option<&'static str> {
        match self {
            Preset::Opsgenie => Some("GenieKey"),
            _ => None,
        }
    }
}

impl std::str::FromStr for Preset {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Preset::ALL.into_iter().find(|p| p.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Preset::ALL.iter().map(|p| p.name()).collect();
            format!("unknown preset `{s}` (presets: {})", names.join(", "))
        })
    }
}

/// Where a templated webhook's body comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodySource {
    /// `template=FILE`: a template file, read when the sink option is parsed.
    File(PathBuf),
    /// `preset=NAME`.
    Preset(Preset),
    /// `encoder=NAME`: an `encoder` plugin makes each batch's request ([`crate::sink::encoder`]);
    /// no template.
    Encoder(String),
}

/// Where the sink's secret (`secret` in the context) is read from — never the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// `secret_env=VAR`.
    Env(String),
    /// `secret_file=PATH` (trailing whitespace removed).
    File(PathBuf),
}

/// A webhook's body options: `template=FILE` or `preset=NAME`, `batch=true|false`,
/// `secret_env=VAR` or `secret_file=PATH`, `resolve_on=TYPE`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BodyOptions {
    /// The template, if the body is not the default `{"items":[…]}`.
    pub source: Option<BodySource>,
    /// `batch=true`: the template renders one body per batch of writes (its context's `items`),
    /// not one per write. Only with `template=FILE` ([`check`](Self::check)).
    pub batch: bool,
    /// The secret's source.
    pub secret: Option<SecretSource>,
    /// An event type (`Normal`) whose events resolve rather than trigger (PagerDuty).
    pub resolve_on: Option<String>,
}

/// The option keys [`BodyOptions::set`] takes.
pub const OPTIONS: [&str; 7] = ["template", "preset", "encoder", "batch", "secret_env", "secret_file", "resolve_on"];

impl BodyOptions {
    /// Whether no option was given.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Whether a template renders each write alone: the webhook's batches are of one write.
    pub fn renders_each_write(&self) -> bool {
        matches!(self.source, Some(BodySource::File(_) | BodySource::Preset(_))) && !self.batch
    }

    /// The encoder plugin named by `encoder=NAME`, if the body comes from one.
    pub fn encoder(&self) -> Option<&str> {
        match &self.source {
            Some(BodySource::Encoder(name)) => Some(name),
            _ => None,
        }
    }

    /// Checks the options together, once all are set (they may be given in any order).
    ///
    /// # Errors
    /// `batch=true` without `template=FILE`: a preset renders one write.
    pub fn check(&self) -> Result<(), String> {
        match (&self.source, self.batch) {
            (Some(BodySource::Preset(p)), true) => {
                Err(format!("batch=true takes template=FILE; preset {} renders one write", p.name()))
            }
            (Some(BodySource::Encoder(name)), true) => {
                Err(format!("batch=true goes with template=FILE; encoder {name} is given every batch"))
            }
            (None, true) => Err("batch=true needs template=FILE".into()),
            (Some(BodySource::Encoder(name)), false) if self.secret.is_some() || self.resolve_on.is_some() => {
                Err(format!("secret_env, secret_file and resolve_on go with template= or preset=, not encoder {name}"))
            }
            _ => Ok(()),
        }
    }

    /// Takes option `key` = `value`: `None` when `key` is not a body option, `Some(Err)` with the
    /// problem when its value is wrong (an unknown preset, a template that does not compile).
    pub fn set(&mut self, key: &str, value: &str) -> Option<Result<(), String>> {
        let both = || Err("give one of template=, preset= and encoder=".to_string());
        Some(match key {
            "template" | "preset" | "encoder" if self.source.is_some() => both(),
            "encoder" if value.is_empty() => Err("option `encoder` needs a plugin's name".into()),
            "encoder" => {
                self.source = Some(BodySource::Encoder(value.into()));
                Ok(())
            }
            "template" => compile_file(Path::new(value)).map(|_| self.source = Some(BodySource::File(value.into()))),
            "preset" => value.parse().map(|p| self.source = Some(BodySource::Preset(p))),
            "batch" => value.parse().map(|b| self.batch = b).map_err(|_| "batch takes true or false".to_string()),
            "secret_env" if !value.is_empty() => {
                self.secret = Some(SecretSource::Env(value.into()));
                Ok(())
            }
            "secret_file" if !value.is_empty() => {
                self.secret = Some(SecretSource::File(value.into()));
                Ok(())
            }
            "resolve_on" if !value.is_empty() => {
                self.resolve_on = Some(value.into());
                Ok(())
            }
            "secret_env" | "secret_file" | "resolve_on" => Err(format!("option `{key}` needs a value")),
            _ => return None,
        })
    }
}

impl std::fmt::Display for BodyOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.source {
            Some(BodySource::File(path)) => write!(f, ",template={}", path.display())?,
            Some(BodySource::Preset(p)) => write!(f, ",preset={}", p.name())?,
            Some(BodySource::Encoder(name)) => write!(f, ",encoder={name}")?,
            None => {}
        }
        if self.batch {
            f.write_str(",batch=true")?;
        }
        match &self.secret {
            Some(SecretSource::Env(var)) => write!(f, ",secret_env={var}")?,
            Some(SecretSource::File(path)) => write!(f, ",secret_file={}", path.display())?,
            None => {}
        }
        if let Some(t) = &self.resolve_on {
            write!(f, ",resolve_on={t}")?;
        }
        Ok(())
    }
}

/// Name of the template inside a [`Rendered`]'s environment.
const BODY: &str = "body";

/// An environment with the filters of the [module docs](self) and `source` as [`BODY`].
fn environment(name: String, source: String) -> Result<Environment<'static>, Error> {
    let mut env = Environment::new();
    env.add_filter("strftime", strftime);
    env.add_filter("truncate_bytes", truncate_bytes);
    env.add_filter("truncate_chars", truncate_chars);
    env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
    env.add_template_owned(BODY, source).map_err(|e| {
        // Name the file in the error (the template's own name is internal).
        Error::new(e.kind(), format!("{name}: {}", describe(&e)))
    })?;
    Ok(env)
}

/// An error with its line, as `line N: what`.
fn describe(e: &Error) -> String {
    match e.line() {
        Some(line) => format!("line {line}: {}", e.detail().unwrap_or(&e.kind().to_string())),
        None => e.to_string(),
    }
}

/// Reads and compiles a template file.
///
/// # Errors
/// The file cannot be read, or `FILE: line N: …` for a syntax error.
pub fn compile_file(path: &Path) -> Result<Environment<'static>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("template {}: {e}", path.display()))?;
    environment(path.display().to_string(), text).map_err(|e| format!("template {}", e.detail().unwrap_or_default()))
}

/// `strftime(value, format)`: an RFC 3339 time in chrono's `strftime` format.
fn strftime(value: &Value, format: Option<&str>) -> Result<String, Error> {
    let text = value.as_str().ok_or_else(|| {
        Error::new(ErrorKind::InvalidOperation, format!("strftime: expected an RFC 3339 time, got {value}"))
    })?;
    let time = chrono::DateTime::parse_from_rfc3339(text)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("strftime: \"{text}\": {e}")))?;
    let mut out = String::new();
    use std::fmt::Write as _;
    write!(out, "{}", time.with_timezone(&chrono::Utc).format(format.unwrap_or("%Y-%m-%dT%H:%M:%SZ")))
        .map_err(|_| Error::new(ErrorKind::InvalidOperation, "strftime: invalid format"))?;
    Ok(out)
}

/// `text` cut to at most `limit` bytes, on a character boundary, `end` included when cut.
pub fn cut_bytes(text: &str, limit: usize, end: &str) -> String {
    if text.len() <= limit {
        return text.to_string();
    }
    let room = limit.saturating_sub(end.len());
    let mut at = room.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let end = if end.len() <= limit { end } else { "" };
    format!("{}{end}", &text[..at])
}

/// `text` cut to at most `limit` characters, `end` included when cut.
pub fn cut_chars(text: &str, limit: usize, end: &str) -> String {
    if text.chars().count() <= limit {
        return text.to_string();
    }
    let end_chars = end.chars().count();
    let (room, end) = if end_chars <= limit { (limit - end_chars, end) } else { (limit, "") };
    let mut out: String = text.chars().take(room).collect();
    out.push_str(end);
    out
}

fn truncate_bytes(value: &Value, limit: usize, end: Option<&str>) -> String {
    cut_bytes(&text_of(value), limit, end.unwrap_or("…"))
}

fn truncate_chars(value: &Value, limit: usize, end: Option<&str>) -> String {
    cut_chars(&text_of(value), limit, end.unwrap_or("…"))
}

fn text_of(value: &Value) -> String {
    match value.as_str() {
        Some(s) => s.to_string(),
        None if value.is_undefined() || value.is_none() => String::new(),
        None => value.to_string(),
    }
}

/// The event's correlation key (`key` in the context): 32 hex digits of SHA-256 over the
/// involved object (kind, namespace, name, uid, apiVersion), the source (component, host) and
/// the reason, each followed by a NUL. client-go's aggregate key without the type and message,
/// so the repeats of one event, and a `Normal` event of the same object and reason, share it.
pub fn correlation_key(event: &Event) -> String {
    let io = &event.involved_object;
    let mut hash = sha2::Sha256::new();
    for part in [
        &io.kind,
        &io.namespace,
        &io.name,
        &io.uid,
        &io.api_version,
        &event.source.component,
        &event.source.host,
        &event.reason,
    ] {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    let digest = hash.finalize();
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// The context of one write (see the [module docs](self)); a batch template's `items` are these.
#[derive(serde::Serialize)]
struct Context<'a> {
    event: &'a Event,
    verb: &'static str,
    count: i32,
    #[serde(rename = "type")]
    type_: &'a str,
    reason: &'a str,
    message: &'a str,
    first_timestamp: Option<String>,
    last_timestamp: Option<String>,
    involved_object: &'a crate::event::ObjectReference,
    tenant: &'a str,
    key: String,
    secret: Option<&'a str>,
    resolve_on: Option<&'a str>,
    enrichment: Option<&'a crate::event::enrichment::Enrichment>,
}

/// The context of one batch (`batch=true`; see the [module docs](self)): the writes' contexts,
/// decoded from their items.
#[derive(serde::Serialize)]
struct BatchContext<'a> {
    items: Vec<serde_json::Value>,
    tenant: &'a str,
    secret: Option<&'a str>,
    resolve_on: Option<&'a str>,
}

/// Event names a failed batch's log line gives at most (then how many more).
pub const NAMED: usize = 10;

fn rfc3339(time: Option<crate::event::Time>) -> Option<String> {
    time.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}

/// The [`BatchEncoding`] of a templated webhook, `application/json`, retried on `408`, `429`
/// and `5xx` as the webhook's JSON items are: one rendered body per write (batches of one), or
/// with `batch=true` one per batch, each write's item its context as JSON.
pub struct Rendered {
    sink: String,
    tenant: String,
    env: Environment<'static>,
    batch: bool,
    secret: Option<String>,
    resolve_on: Option<String>,
}

impl std::fmt::Debug for Rendered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rendered")
            .field("sink", &self.sink)
            .field("tenant", &self.tenant)
            .field("batch", &self.batch)
            .finish_non_exhaustive()
    }
}

impl Rendered {
    /// The encoding of sink `sink` (its name in logs) for `tenant`, with the body and secret
    /// `options` give.
    ///
    /// # Errors
    /// No template given, a template file that cannot be read or compiled, a secret that
    /// cannot be read (an unset variable, a missing file), or a preset that needs a secret and
    /// has none.
    pub fn new(sink: &str, tenant: &str, options: &BodyOptions) -> Result<Self, String> {
        let env = match &options.source {
            Some(BodySource::File(path)) => compile_file(path)?,
            Some(BodySource::Preset(p)) => environment(format!("preset {}", p.name()), p.source().to_string())
                .map_err(|e| e.detail().unwrap_or_default().to_string())?,
            Some(BodySource::Encoder(_)) | None => return Err("no template= or preset= given".into()),
        };
        let preset = match options.source {
            Some(BodySource::Preset(p)) => Some(p),
            _ => None,
        };
        let source = options.secret.clone().or_else(|| preset?.secret_env().map(|v| SecretSource::Env(v.into())));
        let secret = match source {
            Some(SecretSource::Env(var)) => {
                Some(std::env::var(&var).map_err(|_| format!("the secret's variable {var} is not set"))?)
            }
            Some(SecretSource::File(path)) => Some(
                std::fs::read_to_string(&path)
                    .map_err(|e| format!("the secret's file {}: {e}", path.display()))?
                    .trim_end()
                    .to_string(),
            ),
            None => None,
        };
        Ok(Self {
            sink: sink.into(),
            tenant: tenant.into(),
            env,
            batch: options.batch,
            secret,
            resolve_on: options.resolve_on.clone(),
        })
    }

    /// The secret, as the `Authorization` value `preset` sends it with, if it sends one.
    pub fn authorization(&self, preset: Option<Preset>) -> Option<String> {
        Some(format!("{} {}", preset?.authorization_scheme()?, self.secret.as_deref()?))
    }

    /// The context of `verb` on `event`.
    fn context<'a>(&'a self, verb: Verb, event: &'a Event) -> Context<'a> {
        Context {
            event,
            verb: match verb {
                Verb::Create => "create",
                Verb::Patch => "patch",
            },
            count: event.count,
            type_: &event.type_,
            reason: &event.reason,
            message: &event.message,
            first_timestamp: rfc3339(event.first_timestamp),
            last_timestamp: rfc3339(event.last_timestamp),
            involved_object: &event.involved_object,
            tenant: &self.tenant,
            key: correlation_key(event),
            secret: self.secret.as_deref(),
            resolve_on: self.resolve_on.as_deref(),
            enrichment: event.enrichment.get(),
        }
    }

    /// The template rendered over `context`, checked to be JSON.
    fn render_json(&self, context: Value) -> Result<String, Error> {
        let body = self.env.get_template(BODY)?.render(context)?;
        serde_json::from_str::<serde::de::IgnoredAny>(&body)
            .map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("the body is not JSON: {e}")))?;
        Ok(body)
    }

    /// The body of `verb` on `event` (a template rendering each write).
    ///
    /// # Errors
    /// The template's error, or the output's JSON error.
    pub fn render(&self, verb: Verb, event: &Event) -> Result<String, Error> {
        self.render_json(Value::from_serialize(self.context(verb, event)))
    }

    /// The body of a batch (`batch=true`) whose items are its writes' contexts as JSON, in
    /// call order.
    ///
    /// # Errors
    /// An item that is not a context's JSON, the template's error, or the output's JSON error.
    pub fn render_batch(&self, items: &[&[u8]]) -> Result<String, Error> {
        let items = items
            .iter()
            .map(|item| serde_json::from_slice(item))
            .collect::<Result<Vec<serde_json::Value>, _>>()
            .map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("an item is not a write's context: {e}")))?;
        let context = BatchContext {
            items,
            tenant: &self.tenant,
            secret: self.secret.as_deref(),
            resolve_on: self.resolve_on.as_deref(),
        };
        self.render_json(Value::from_serialize(&context))
    }
}

/// `namespace/name` of the events of a batch's items (contexts as JSON), the first [`NAMED`],
/// then how many more.
fn batch_names(items: &[&[u8]]) -> String {
    #[derive(serde::Deserialize)]
    struct Item<'a> {
        #[serde(borrow)]
        event: Named<'a>,
    }
    #[derive(serde::Deserialize)]
    struct Named<'a> {
        #[serde(borrow)]
        metadata: Metadata<'a>,
    }
    #[derive(serde::Deserialize)]
    struct Metadata<'a> {
        #[serde(borrow, default)]
        namespace: std::borrow::Cow<'a, str>,
        #[serde(borrow, default)]
        name: std::borrow::Cow<'a, str>,
    }
    let mut names: Vec<String> = items
        .iter()
        .take(NAMED)
        .map(|item| match serde_json::from_slice::<Item<'_>>(item) {
            Ok(Item { event: Named { metadata } }) => format!("{}/{}", metadata.namespace, metadata.name),
            Err(_) => "?".into(),
        })
        .collect();
    if items.len() > NAMED {
        names.push(format!("and {} more", items.len() - NAMED));
    }
    names.join(", ")
}

impl BatchEncoding for Rendered {
    fn kind(&self) -> &'static str {
        "webhook"
    }

    fn content_type(&self) -> &'static str {
        "application/json"
    }

    /// With `batch=true` the write's context as JSON; otherwise its rendered body.
    fn encode(&self, verb: Verb, event: &Event, _patch: SinkPatch<'_>) -> Result<Vec<u8>, SinkError> {
        if self.batch {
            return serde_json::to_vec(&self.context(verb, event))
                .map_err(|e| SinkError::RequestConstruction(format!("encoding the template's context: {e}")));
        }
        self.render(verb, event).map(String::into_bytes).map_err(|e| {
            let error = describe(&e);
            tracing::warn!(
                sink = %self.sink,
                tenant = %self.tenant,
                event = %format_args!("{}/{}", event.metadata.namespace, event.metadata.name),
                %error,
                "the template failed to render an event; the event is dropped from this sink"
            );
            SinkError::RequestConstruction(format!("template: {error}"))
        })
    }

    /// With `batch=true` the template rendered over the batch; otherwise a batch is one write
    /// (the sink's `max_batch` is 1), its rendered body.
    ///
    /// # Errors
    /// [`SinkError::RequestConstruction`] when the batch template fails on the batch (logged
    /// with the events' names).
    fn body(&self, items: &[&[u8]]) -> Result<Vec<u8>, SinkError> {
        if !self.batch {
            return Ok(items.concat());
        }
        self.render_batch(items).map(String::into_bytes).map_err(|e| {
            let error = describe(&e);
            tracing::warn!(
                sink = %self.sink,
                tenant = %self.tenant,
                events = items.len(),
                names = %batch_names(items),
                %error,
                "the template failed to render a batch; its events are dropped from this sink"
            );
            SinkError::RequestConstruction(format!("template: {error}"))
        })
    }

    fn retryable(&self, status: StatusCode) -> bool {
        super::encoding::JsonItems.retryable(status)
    }
}

/// A webhook config whose body is rendered with `options`: batches of one write, or with
/// `batch=true` the webhook's batches.
///
/// # Errors
/// As [`Rendered::new`].
pub fn config(
    name: String,
    url: &str,
    tenant: &str,
    options: &BodyOptions,
) -> Result<super::webhook::WebhookConfig, String> {
    let rendered = Rendered::new(&name, tenant, options)?;
    let preset = match options.source {
        Some(BodySource::Preset(p)) => Some(p),
        _ => None,
    };
    let mut config = super::webhook::WebhookConfig::new(name, url);
    config.authorization = rendered.authorization(preset);
    if options.renders_each_write() {
        config.max_batch = 1;
    }
    config.encoding = Arc::new(rendered);
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_never_split_a_character() {
        assert_eq!(cut_bytes("héllo", 3, ""), "h\u{e9}");
        assert_eq!(cut_bytes("héllo", 2, ""), "h");
        assert_eq!(cut_bytes("short", 10, "…"), "short");
        assert_eq!(cut_bytes("abcdefgh", 6, "…"), "abc…");
        assert!(cut_bytes("ééééé", 7, "…").len() <= 7);
        assert_eq!(cut_chars("ééééé", 3, "…"), "éé…");
        assert_eq!(cut_chars("ab", 3, "…"), "ab");
    }

    #[test]
    fn an_encoder_is_a_body_source_of_its_own() {
        let mut body = BodyOptions::default();
        assert_eq!(body.set("encoder", "slack"), Some(Ok(())));
        assert_eq!((body.encoder(), body.renders_each_write()), (Some("slack"), false), "the encoder gets batches");
        assert_eq!(body.to_string(), ",encoder=slack");
        assert!(body.check().is_ok());
        assert!(matches!(body.set("preset", "slack"), Some(Err(e)) if e.contains("one of")));
        assert!(matches!(BodyOptions::default().set("encoder", ""), Some(Err(e)) if e.contains("needs")));
        let mut batched = body.clone();
        batched.batch = true;
        assert!(batched.check().unwrap_err().contains("batch=true goes with template=FILE"));
        body.secret = Some(SecretSource::Env("TOKEN".into()));
        assert!(body.check().unwrap_err().contains("not encoder slack"), "secrets are a template's");
    }

    #[test]
    fn every_preset_compiles() {
        for p in Preset::ALL {
            environment(p.name().into(), p.source().into()).unwrap_or_else(|e| panic!("{}: {e:#}", p.name()));
        }
    }

    #[test]
    fn the_enrichment_is_in_the_context_where_present() {
        use crate::event::enrichment::{Enriched, Enrichment, Owner};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.j2");
        std::fs::write(
            &path,
            r#"{"cluster": {{ enrichment.cluster | default("none") | tojson }}, "owner": {{ (enrichment.owner.name if enrichment else "none") | tojson }}}"#,
        )
        .unwrap();
        let options = BodyOptions { source: Some(BodySource::File(path)), ..BodyOptions::default() };
        let rendered = Rendered::new("webhook:t", "default", &options).unwrap();
        let mut event = Event::default();
        assert_eq!(rendered.render(Verb::Create, &event).unwrap(), r#"{"cluster": "none", "owner": "none"}"#);
        let owner = Owner { kind: "Deployment".into(), name: "web".into(), ..Owner::default() };
        event.enrichment = Enriched::new(std::sync::Arc::new(Enrichment {
            cluster: Some("prod-eu".into()),
            owner: Some(owner),
            ..Enrichment::default()
        }));
        assert_eq!(rendered.render(Verb::Create, &event).unwrap(), r#"{"cluster": "prod-eu", "owner": "web"}"#);
    }

    #[test]
    fn a_batch_template_sees_every_writes_context_in_order_and_names_a_failed_batchs_events() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("batch.j2");
        std::fs::write(
            &path,
            r#"{"tenant": {{ tenant | tojson }}, "writes": [{% for item in items %}{{ (item.verb ~ " " ~ item.event.metadata.name ~ " " ~ item.count ~ " " ~ item.tenant) | tojson }}{% if item.reason == "Bad" %}{{ item.reason | strftime }}{% endif %}{{ "," if not loop.last }}{% endfor %}]}"#,
        )
        .unwrap();
        let mut options = BodyOptions::default();
        for (key, value) in [("batch", "true"), ("template", path.to_str().unwrap())] {
            options.set(key, value).unwrap().unwrap();
        }
        options.check().unwrap();
        assert!(!options.renders_each_write());
        assert!(options.to_string().ends_with(",batch=true"), "{options}");
        let rendered = Rendered::new("webhook:t", "team-a", &options).unwrap();
        let event = |name: &str, count, reason: &str| {
            let mut event = Event::default();
            event.metadata.namespace = "shop".into();
            event.metadata.name = name.into();
            event.count = count;
            event.reason = reason.into();
            event
        };
        let items = [
            rendered.encode(Verb::Create, &event("a.1", 1, "Pulled"), SinkPatch::Bytes(&[])).unwrap(),
            rendered.encode(Verb::Patch, &event("a.1", 2, "Pulled"), SinkPatch::Bytes(&[])).unwrap(),
        ];
        let refs: Vec<&[u8]> = items.iter().map(Vec::as_slice).collect();
        let body: serde_json::Value = serde_json::from_slice(&rendered.body(&refs).unwrap()).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"tenant": "team-a", "writes": ["create a.1 1 team-a", "patch a.1 2 team-a"]})
        );
        let bad = rendered.encode(Verb::Create, &event("b.1", 1, "Bad"), SinkPatch::Bytes(&[])).unwrap();
        let err = rendered.body(&[&items[0], &bad]).unwrap_err();
        assert!(matches!(&err, SinkError::RequestConstruction(e) if e.contains("strftime")), "{err:?}");
        assert_eq!(batch_names(&[&items[0], &bad]), "shop/a.1, shop/b.1");
        let many: Vec<&[u8]> = std::iter::repeat_n(items[0].as_slice(), NAMED + 3).collect();
        assert!(batch_names(&many).ends_with("shop/a.1, and 3 more"), "{}", batch_names(&many));
    }

    #[test]
    fn batch_needs_a_template_file() {
        let mut options = BodyOptions::default();
        options.set("batch", "true").unwrap().unwrap();
        assert!(options.check().unwrap_err().contains("template=FILE"));
        options.set("preset", "slack").unwrap().unwrap();
        assert!(options.check().unwrap_err().contains("preset slack"));
        assert!(options.set("batch", "yes").unwrap().is_err());
    }

    #[test]
    fn a_syntax_error_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.j2");
        std::fs::write(&path, "{\n\"a\": {{ reason }\n}").unwrap();
        let err = compile_file(&path).unwrap_err();
        assert!(err.contains("bad.j2") && err.contains("line 2"), "{err}");
    }
}
