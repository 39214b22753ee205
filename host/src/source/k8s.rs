//! The Kubernetes API as an event source: list, then watch core/v1 Events (or events.k8s.io/v1,
//! converted to core/v1) across all namespaces or selected ones, as client-go's reflector and
//! `kubectl get events --watch` do.
//!
//! - The first list gives the resourceVersion to watch from; its items — events already in the
//!   cluster — are not sent on as new unless `replay_existing`.
//! - The watch asks for bookmarks (`allowWatchBookmarks=true`) and resumes from the last
//!   resourceVersion seen (event or bookmark) whenever the server closes the stream
//!   (`timeoutSeconds`).
//! - `410 Gone` / `Expired` (the resourceVersion is too old), as an HTTP status or a watch `ERROR`
//!   envelope, makes it list again. Events listed again are sent on only when their
//!   resourceVersion differs from the one last seen for that event (changes missed in the gap);
//!   the memory of what was seen is an LRU of [`SEEN_ENTRIES`] events.
//! - Other errors back off exponentially with jitter: 800 ms doubling up to 30 s, as client-go's
//!   reflector.
//!
//! Every event sent on goes to the Broadcaster with `action`, so a full queue in
//! `WaitIfChannelFull` mode slows the watch (back-pressure), never loses events.

use std::num::NonZeroUsize;
use std::time::Duration;

use http::{Request, header};
use http_body_util::BodyExt;
use kube::client::Body;
use tokio_util::sync::CancellationToken;

use crate::broadcaster::{Broadcaster, WatchEventType};
use crate::event::Event;
use crate::k8s::status_error;
use crate::source::decode::{Decoded, Decoder};

/// Events whose last resourceVersion the source remembers, to tell changes from repeats after a
/// re-list.
pub const SEEN_ENTRIES: usize = 65_536;
/// client-go reflector back-off: first pause.
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(800);
/// client-go reflector back-off: longest pause.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Items per list page (client-go's reflector pages by 500).
pub const LIST_PAGE_SIZE: u32 = 500;

/// Which Events API to watch (`--events-api core|events.k8s.io`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum EventsApi {
    /// `/api/v1/events`.
    #[default]
    #[value(name = "core")]
    CoreV1,
    /// `/apis/events.k8s.io/v1/events` (converted to core/v1 as the apiserver converts).
    #[value(name = "events.k8s.io")]
    EventsV1,
}

/// What to watch.
#[derive(Clone, Default)]
pub struct WatchOptions {
    /// Namespaces to watch; empty: all namespaces.
    pub namespaces: Vec<String>,
    /// A field selector, e.g. `involvedObject.kind=Pod`.
    pub field_selector: Option<String>,
    /// A label selector.
    pub label_selector: Option<String>,
    /// Which API.
    pub api: EventsApi,
    /// Send the events listed at start on as new.
    pub replay_existing: bool,
    /// Server-side watch timeout, seconds (0: 300). The watch is resumed after it.
    pub timeout_seconds: u32,
    /// Resume watching from this resourceVersion (a saved position) instead of listing first.
    pub resume_from: Option<String>,
    /// Records the position after each event sent (at-least-once delivery).
    pub progress: Option<std::sync::Arc<crate::delivery::Progress>>,
}

impl std::fmt::Debug for WatchOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchOptions")
            .field("namespaces", &self.namespaces)
            .field("field_selector", &self.field_selector)
            .field("label_selector", &self.label_selector)
            .field("api", &self.api)
            .field("replay_existing", &self.replay_existing)
            .field("resume_from", &self.resume_from)
            .finish_non_exhaustive()
    }
}

/// What a watch did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct WatchStats {
    /// Events sent on to the Broadcaster.
    pub events: u64,
    /// Lists made (the first, and one per `410 Gone`).
    pub lists: u64,
    /// Watch requests made.
    pub watches: u64,
    /// Bookmarks received.
    pub bookmarks: u64,
    /// Failed requests and error envelopes other than `410` (each followed by a back-off).
    pub errors: u64,
    /// Listed or watched events not sent on because they were seen already.
    pub repeats: u64,
}

impl std::ops::AddAssign for WatchStats {
    fn add_assign(&mut self, o: Self) {
        self.events += o.events;
        self.lists += o.lists;
        self.watches += o.watches;
        self.bookmarks += o.bookmarks;
        self.errors += o.errors;
        self.repeats += o.repeats;
    }
}

/// The Kubernetes source: [`watch_events`] with a client and what to watch.
pub struct KubernetesSource {
    /// The API client.
    pub client: kube::Client,
    /// What to watch.
    pub options: WatchOptions,
}

impl std::fmt::Debug for KubernetesSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubernetesSource").field("options", &self.options).finish_non_exhaustive()
    }
}

impl KubernetesSource {
    /// Watches until `shutdown` fires or the Broadcaster stops; API errors are retried with
    /// back-off, never returned.
    pub async fn run(self, to: Broadcaster<Event>, shutdown: CancellationToken) -> super::SourceStats {
        let watch = watch_events(self.client, self.options, to, shutdown).await;
        super::SourceStats { read: watch.events, non_events: watch.bookmarks, bad_lines: 0 }
    }
}

/// Watches until `cancel` fires or the Broadcaster stops, one watch per namespace (or one for
/// all), sending events to `to`.
pub async fn watch_events(
    client: kube::Client,
    options: WatchOptions,
    to: Broadcaster<Event>,
    cancel: CancellationToken,
) -> WatchStats {
    let scopes: Vec<Option<String>> =
        if options.namespaces.is_empty() { vec![None] } else { options.namespaces.iter().cloned().map(Some).collect() };
    let mut tasks = tokio::task::JoinSet::new();
    for namespace in scopes {
        let watch = Watch::new(client.clone(), &options, namespace, to.clone(), cancel.clone());
        tasks.spawn(watch.run());
    }
    let mut total = WatchStats::default();
    while let Some(stats) = tasks.join_next().await {
        match stats {
            Ok(stats) => total += stats,
            Err(e) => tracing::error!(error = %e, "a watch task failed"),
        }
    }
    total
}

/// Why one request of the watch loop failed.
enum Failure {
    /// The resourceVersion is too old: list again.
    Gone,
    /// Anything else: back off, then retry.
    Other(String),
    /// The Broadcaster stopped or the watch was cancelled.
    Stopped,
}

struct Watch {
    client: kube::Client,
    path: String,
    selectors: String,
    replay_existing: bool,
    timeout_seconds: u32,
    to: Broadcaster<Event>,
    cancel: CancellationToken,
    seen: lru::LruCache<String, String>,
    stats: WatchStats,
    backoff: Duration,
    resume_from: Option<String>,
    progress: Option<std::sync::Arc<crate::delivery::Progress>>,
}

impl Watch {
    fn new(
        client: kube::Client,
        options: &WatchOptions,
        namespace: Option<String>,
        to: Broadcaster<Event>,
        cancel: CancellationToken,
    ) -> Self {
        let base = match options.api {
            EventsApi::CoreV1 => "/api/v1",
            EventsApi::EventsV1 => "/apis/events.k8s.io/v1",
        };
        let path = match &namespace {
            Some(ns) => format!("{base}/namespaces/{ns}/events"),
            None => format!("{base}/events"),
        };
        let mut selectors = String::new();
        for (key, value) in [("fieldSelector", &options.field_selector), ("labelSelector", &options.label_selector)] {
            if let Some(v) = value {
                selectors.push_str(&format!("&{key}={}", encode(v)));
            }
        }
        Self {
            client,
            path,
            selectors,
            replay_existing: options.replay_existing,
            timeout_seconds: if options.timeout_seconds == 0 { 300 } else { options.timeout_seconds },
            to,
            cancel,
            seen: lru::LruCache::new(NonZeroUsize::new(SEEN_ENTRIES).expect("non-zero")),
            stats: WatchStats::default(),
            backoff: INITIAL_BACKOFF,
            // A saved resourceVersion belongs to one watch; with several namespaces each lists.
            resume_from: options.resume_from.clone().filter(|_| options.namespaces.len() <= 1),
            progress: options.progress.clone(),
        }
    }

    async fn run(mut self) -> WatchStats {
        // Resuming: the events before the saved position were delivered; a relist (410) then
        // sends on everything it finds (at-least-once: duplicates rather than gaps).
        let mut first_list = self.resume_from.is_none();
        let mut resource_version: Option<String> = self.resume_from.take().filter(|rv| !rv.is_empty());
        // The last resourceVersion a watch reached (where a restart resumes for listed events).
        let mut last_watched = String::new();
        loop {
            if self.cancel.is_cancelled() {
                break;
            }
            let outcome = match &resource_version {
                None => self.list(!first_list || self.replay_existing, last_watched.clone()).await.map(Some),
                Some(rv) => self.watch(rv.clone()).await,
            };
            match outcome {
                Ok(Some(rv)) => {
                    if resource_version.is_none() {
                        first_list = false;
                    } else {
                        last_watched = rv.clone();
                    }
                    resource_version = Some(rv);
                    self.backoff = INITIAL_BACKOFF;
                }
                Ok(None) => {}
                Err(Failure::Gone) => {
                    tracing::info!(path = %self.path, "resourceVersion too old (410 Gone); listing again");
                    resource_version = None;
                }
                Err(Failure::Stopped) => break,
                Err(Failure::Other(error)) => {
                    self.stats.errors += 1;
                    // Full jitter on top of the exponential pause, as client-go (jitter 1.0).
                    let pause = self.backoff.mul_f64(1.0 + rand::random::<f64>());
                    tracing::warn!(path = %self.path, %error, pause_ms = pause.as_millis() as u64, "watch failed; backing off");
                    self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                    tokio::select! {
                        _ = self.cancel.cancelled() => break,
                        _ = tokio::time::sleep(pause) => {}
                    }
                }
            }
        }
        self.stats
    }

    /// Remembers `event`'s resourceVersion; whether it is new or changed.
    fn changed(&mut self, event: &Event) -> bool {
        let key = if event.metadata.uid.is_empty() {
            format!("{}/{}", event.metadata.namespace, event.metadata.name)
        } else {
            event.metadata.uid.clone()
        };
        let rv = &event.metadata.resource_version;
        if self.seen.get(&key).is_some_and(|seen| seen == rv) {
            return false;
        }
        self.seen.put(key, rv.clone());
        true
    }

    /// Sends `event` on; `position` is where a restart must resume to see it again (a watched
    /// event's own resourceVersion; for a listed one, the resourceVersion before the list, as
    /// list items come in no resourceVersion order).
    async fn send(&mut self, event: Event, position: &str) -> Result<(), Failure> {
        self.stats.events += 1;
        if let Some(progress) = &self.progress {
            progress.sent(crate::delivery::Position::ResourceVersion(position.to_string()));
        }
        self.to.action(WatchEventType::Added, event).await.map_err(|_| Failure::Stopped)
    }

    async fn get(&self, uri: String) -> Result<http::Response<Body>, Failure> {
        let request = Request::get(&uri)
            .header(header::ACCEPT, "application/json")
            .body(Body::from(Vec::new()))
            .map_err(|e| Failure::Other(e.to_string()))?;
        let response = tokio::select! {
            _ = self.cancel.cancelled() => return Err(Failure::Stopped),
            r = self.client.send(request) => r.map_err(|e| Failure::Other(format!("GET {uri}: {e}")))?,
        };
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let body = response.into_body().collect_bytes().await.unwrap_or_default();
        let error = status_error(status.as_u16(), &body);
        if error.code == 410 || error.reason == "Expired" || error.reason == "Gone" {
            return Err(Failure::Gone);
        }
        Err(Failure::Other(format!("GET {uri}: {} {}: {}", error.code, error.reason, error.message)))
    }

    /// Lists every page; sends on the items when `send_items` (or when they changed since
    /// last seen); returns the list's resourceVersion.
    async fn list(&mut self, send_items: bool, position: String) -> Result<String, Failure> {
        self.stats.lists += 1;
        let mut continue_token: Option<String> = None;
        loop {
            let mut uri = format!("{}?limit={LIST_PAGE_SIZE}{}", self.path, self.selectors);
            if let Some(token) = &continue_token {
                uri.push_str(&format!("&continue={}", encode(token)));
            }
            let response = self.get(uri.clone()).await?;
            let bytes = response.into_body().collect_bytes().await.map_err(|e| Failure::Other(e.to_string()))?;
            let page: ListPage =
                serde_json::from_slice(&bytes).map_err(|e| Failure::Other(format!("GET {uri}: not a list: {e}")))?;
            // The whole list through the decoder: items inherit the list's apiVersion
            // (events.k8s.io items carry none).
            let mut items = Vec::new();
            let mut decoder = Decoder::new();
            decoder.push_line(&String::from_utf8_lossy(&bytes), |d| items.push(d));
            items.extend(decoder.finish().map(Err));
            for item in items {
                if let Ok(Decoded::Event { event, .. }) = item {
                    if self.changed(&event) && send_items {
                        self.send(event, &position).await?;
                    } else {
                        self.stats.repeats += u64::from(send_items);
                    }
                }
            }
            match page.metadata.continue_token.filter(|t| !t.is_empty()) {
                Some(token) => continue_token = Some(token),
                None => return Ok(page.metadata.resource_version),
            }
        }
    }

    /// One watch request from `resource_version`, until the server ends it. Returns the last
    /// resourceVersion seen (`None`: nothing new).
    async fn watch(&mut self, resource_version: String) -> Result<Option<String>, Failure> {
        self.stats.watches += 1;
        let uri = format!(
            "{}?watch=true&resourceVersion={}&allowWatchBookmarks=true&timeoutSeconds={}{}",
            self.path,
            encode(&resource_version),
            self.timeout_seconds,
            self.selectors
        );
        let mut body = self.get(uri).await?.into_body();
        let mut decoder = Decoder::new();
        let mut pending = Vec::<u8>::new();
        let mut last = None;
        loop {
            let frame = tokio::select! {
                _ = self.cancel.cancelled() => return Err(Failure::Stopped),
                f = body.frame() => f,
            };
            let Some(frame) = frame else { return Ok(last) };
            let frame = frame.map_err(|e| Failure::Other(format!("watch stream: {e}")))?;
            let Ok(data) = frame.into_data() else { continue };
            pending.extend_from_slice(&data);
            while let Some(end) = pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                let mut items = Vec::new();
                decoder.push_line(String::from_utf8_lossy(&line).trim_end(), |d| items.push(d));
                for item in items {
                    match item {
                        Ok(Decoded::Event { event, watch_type, .. }) => {
                            if !event.metadata.resource_version.is_empty() {
                                last = Some(event.metadata.resource_version.clone());
                            }
                            if watch_type == Some(WatchEventType::Deleted) {
                                continue; // an expired event going away is not an occurrence
                            }
                            if self.changed(&event) {
                                let position = event.metadata.resource_version.clone();
                                self.send(event, &position).await?;
                            } else {
                                self.stats.repeats += 1;
                            }
                        }
                        Ok(Decoded::Bookmark { resource_version, .. }) => {
                            self.stats.bookmarks += 1;
                            last = Some(resource_version);
                        }
                        Ok(Decoded::WatchError { code, reason, message, .. }) => {
                            if code == 410 || reason == "Expired" || reason == "Gone" {
                                return Err(Failure::Gone);
                            }
                            return Err(Failure::Other(format!("watch error {code} {reason}: {message}")));
                        }
                        Err(e) => tracing::warn!(path = %self.path, error = %e, "undecodable watch line skipped"),
                    }
                }
            }
        }
    }
}

#[derive(serde::Deserialize)]
struct ListPage {
    #[serde(default)]
    metadata: ListMeta,
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ListMeta {
    #[serde(default)]
    resource_version: String,
    #[serde(default, rename = "continue")]
    continue_token: Option<String>,
}

/// Percent-encodes a query value (RFC 3986 unreserved characters pass).
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}
