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
//!   the memory of what was seen is an LRU of [`crate::delivery::SEEN_VERSIONS_MAX`] events ([`SeenVersions`], one
//!   for all the namespaces watched). With at-least-once delivery that memory survives
//!   restarts: the versions of acknowledged events (and of the events found at the first start)
//!   are kept in the state file and given back as [`WatchOptions::resume_seen`], so a restart
//!   whose saved resourceVersion has expired re-lists and sends only what changed, and a first
//!   list of a resumed run (several namespaces) sends only what the state does not know.
//! - Positions (at-least-once): a watched event's own resourceVersion; a listed event moves
//!   none, except the last one sent, which carries the list's resourceVersion (once it is
//!   acknowledged, every listed event before it is too). An empty resourceVersion is never a
//!   position.
//! - Other errors back off exponentially with jitter: 800 ms doubling up to 30 s, as client-go's
//!   reflector.
//! - A watch that stays open but delivers nothing while the server moves on is restarted from
//!   its position ([`stall`]: `--stall-timeout`); a watch that stalls again right after that
//!   fails `/healthz`, and an API server that answers nothing for the timeout fails `/readyz`.
//!   Every restart is counted by [`WatchRestart`].
//!
//! Every event sent on goes to the Broadcaster with `action`, so a full queue in
//! `WaitIfChannelFull` mode slows the watch (back-pressure), never loses events.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, header};
use http_body_util::BodyExt;
use kube::client::Body;
use tokio_util::sync::CancellationToken;

pub mod stall;

use crate::broadcaster::{Broadcaster, WatchEventType};
use crate::delivery::{Position, SeenVersion, SeenVersions};
use crate::event::{Event, SharedEvent};
use crate::health::{Probe, Readiness};
use crate::k8s::{EventsApi, status_error};
use crate::source::decode::{Decoded, Decoder};
use crate::source::go_strings;

/// client-go reflector back-off: first pause.
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(800);
/// client-go reflector back-off: longest pause.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Items per list page (client-go's reflector pages by 500).
pub const LIST_PAGE_SIZE: u32 = 500;

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
    pub progress: Option<Arc<crate::delivery::Progress>>,
    /// The versions of events an earlier run delivered or found (from the state file): not
    /// sent again unless they changed. Given, a first list sends what is new or changed (as a
    /// re-list), also without `replay_existing`.
    pub resume_seen: Option<SeenVersions>,
    /// Counted into while the watch runs (events sent on, bookmarks, progress, restarts), for
    /// `/metrics`.
    pub counters: Arc<super::SourceCounters>,
    /// When a quiet watch counts as stalled ([`stall`]).
    pub stall: stall::StallOptions,
    /// Where the watch reports what fails the probes: an API server that does not answer
    /// (`/readyz`), a watch that stalls again right after a restart (`/healthz`).
    pub health: Readiness,
}

/// Why a watch request was made again (`eventpipe_source_watch_restarts_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchRestart {
    /// It delivered nothing while the server moved past its position ([`stall`]); restarted
    /// from the position at once.
    Stalled,
    /// `410 Gone` / `Expired`: listed again.
    Expired,
    /// A request or the stream failed: restarted after the back-off.
    Error,
    /// The server ended the stream (its `timeoutSeconds`): resumed from the last
    /// resourceVersion, as client-go's reflector.
    Ended,
}

impl WatchRestart {
    /// Every reason, in label order.
    pub const ALL: [WatchRestart; 4] = [Self::Stalled, Self::Expired, Self::Error, Self::Ended];

    /// The `reason` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stalled => "stalled",
            Self::Expired => "expired",
            Self::Error => "error",
            Self::Ended => "ended",
        }
    }
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
            .field("resume_seen", &self.resume_seen.as_ref().map(SeenVersions::len))
            .field("stall", &self.stall)
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
    /// The source watching with `client` what `options` say. Reports each watch path not
    /// synced yet at once, so that `/readyz` never answers `200` between the run's start and
    /// the watch's first step.
    pub fn new(client: kube::Client, options: WatchOptions) -> Self {
        for namespace in scopes(&options) {
            let subject = subject(&watch_path(options.api, namespace.as_deref()));
            options.health.report_pending(&subject, NOT_SYNCED.into());
        }
        Self { client, options }
    }

    /// Watches until `shutdown` fires or the Broadcaster stops; API errors are retried with
    /// back-off, never returned.
    pub async fn run(self, to: Broadcaster<SharedEvent>, shutdown: CancellationToken) -> super::SourceStats {
        let watch = watch_events(self.client, self.options, to, shutdown).await;
        super::SourceStats { read: watch.events, non_events: watch.bookmarks, bad_lines: 0 }
    }
}

/// What `/readyz` says of a watch path before its first list or watch was answered.
const NOT_SYNCED: &str = "not synced yet: no list or watch has been answered";

/// The namespaces watched, one watch each (`None`: one watch of all).
fn scopes(options: &WatchOptions) -> Vec<Option<String>> {
    if options.namespaces.is_empty() { vec![None] } else { options.namespaces.iter().cloned().map(Some).collect() }
}

/// The events collection of `api` in `namespace` (or of all): `/api/v1/namespaces/NS/events`.
fn watch_path(api: EventsApi, namespace: Option<&str>) -> String {
    let base = match api {
        EventsApi::CoreV1 => "/api/v1",
        EventsApi::EventsV1 => "/apis/events.k8s.io/v1",
    };
    match namespace {
        Some(ns) => format!("{base}/namespaces/{ns}/events"),
        None => format!("{base}/events"),
    }
}

/// The probes' subject of a watch path: `k8s source PATH`.
fn subject(path: &str) -> String {
    format!("k8s source {path}")
}

/// Watches until `cancel` fires or the Broadcaster stops, one watch per namespace (or one for
/// all), sending events to `to`.
pub async fn watch_events(
    client: kube::Client,
    options: WatchOptions,
    to: Broadcaster<SharedEvent>,
    cancel: CancellationToken,
) -> WatchStats {
    let scopes = scopes(&options);
    // One memory of versions for every namespace's watch (event keys are unique across them).
    let seen = Arc::new(Mutex::new(options.resume_seen.clone().unwrap_or_default()));
    let mut tasks = tokio::task::JoinSet::new();
    for namespace in scopes {
        let watch = Watch::new(client.clone(), &options, namespace, to.clone(), cancel.clone(), seen.clone());
        watch.report_reachability(); // not synced yet (already reported by `new`)
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
    /// The watch stalled ([`stall`]): restart it from the last resourceVersion it delivered
    /// (`None`: from where it started).
    Stalled(Option<String>),
    /// The Broadcaster stopped or the watch was cancelled.
    Stopped,
}

struct Watch {
    client: kube::Client,
    path: String,
    selectors: String,
    replay_existing: bool,
    timeout_seconds: u32,
    to: Broadcaster<SharedEvent>,
    cancel: CancellationToken,
    seen: Arc<Mutex<SeenVersions>>,
    /// The run resumes from a state file's versions: the first list sends what changed.
    resumed_with_seen: bool,
    stats: WatchStats,
    backoff: Duration,
    resume_from: Option<String>,
    progress: Option<Arc<crate::delivery::Progress>>,
    counters: Arc<super::SourceCounters>,
    stall: stall::Tracker,
    health: Readiness,
    /// The probes' subject: `k8s source PATH`.
    subject: String,
    /// A list completed or a watch was answered: the source has caught up with the API server
    /// once (client-go's `HasSynced`); `/readyz` fails until then.
    synced: bool,
}

impl Watch {
    fn new(
        client: kube::Client,
        options: &WatchOptions,
        namespace: Option<String>,
        to: Broadcaster<SharedEvent>,
        cancel: CancellationToken,
        seen: Arc<Mutex<SeenVersions>>,
    ) -> Self {
        let path = watch_path(options.api, namespace.as_deref());
        let mut selectors = String::new();
        for (key, value) in [("fieldSelector", &options.field_selector), ("labelSelector", &options.label_selector)] {
            if let Some(v) = value {
                selectors.push_str(&format!("&{key}={}", encode(v)));
            }
        }
        Self {
            client,
            selectors,
            replay_existing: options.replay_existing,
            timeout_seconds: if options.timeout_seconds == 0 { 300 } else { options.timeout_seconds },
            to,
            cancel,
            seen,
            resumed_with_seen: options.resume_seen.is_some(),
            stats: WatchStats::default(),
            backoff: INITIAL_BACKOFF,
            // A saved resourceVersion belongs to one watch; with several namespaces each lists.
            resume_from: options.resume_from.clone().filter(|_| options.namespaces.len() <= 1),
            progress: options.progress.clone(),
            counters: options.counters.clone(),
            stall: stall::Tracker::new(options.stall),
            health: options.health.clone(),
            subject: subject(&path),
            synced: false,
            path,
        }
    }

    async fn run(mut self) -> WatchStats {
        // Resuming: the events before the saved position were delivered; a relist (410) then
        // sends on what changed since the versions saved with it (at-least-once: duplicates
        // rather than gaps).
        let mut first_list = self.resume_from.is_none() && !self.resumed_with_seen;
        let mut resource_version: Option<String> = self.resume_from.take().filter(|rv| !rv.is_empty());
        loop {
            if self.cancel.is_cancelled() {
                break;
            }
            let watching = resource_version.is_some();
            let outcome = match &resource_version {
                None => self.list(!first_list || self.replay_existing).await.map(Some),
                Some(rv) => self.watch(rv.clone()).await,
            };
            self.report_reachability();
            match outcome {
                Ok(Some(rv)) => {
                    first_list = false;
                    resource_version = Some(rv);
                    self.backoff = INITIAL_BACKOFF;
                    if watching {
                        self.counters.add_watch_restart(WatchRestart::Ended);
                    }
                }
                Ok(None) => self.counters.add_watch_restart(WatchRestart::Ended),
                Err(Failure::Gone) => {
                    tracing::info!(path = %self.path, "resourceVersion too old (410 Gone); listing again");
                    self.counters.add_watch_restart(WatchRestart::Expired);
                    resource_version = None;
                }
                Err(Failure::Stopped) => break,
                Err(Failure::Stalled(last)) => {
                    resource_version = last.or(resource_version);
                    self.counters.add_watch_restart(WatchRestart::Stalled);
                    let again = self.stall.restarted_for_stall();
                    let timeout = self.stall.options().timeout.as_secs_f64();
                    tracing::warn!(
                        path = %self.path,
                        resource_version = resource_version.as_deref().unwrap_or_default(),
                        stall_timeout_s = timeout,
                        again,
                        "watch stalled (nothing delivered while the API server moved on); restarting it from its position"
                    );
                    if again {
                        let problem = format!(
                            "the watch stalled again right after a restart (nothing delivered for {timeout} s while \
                             the API server is past resourceVersion {}): restart the process",
                            resource_version.as_deref().unwrap_or_default()
                        );
                        self.health.report(Probe::Liveness, &self.subject, Some(problem));
                    }
                }
                Err(Failure::Other(error)) => {
                    self.stats.errors += 1;
                    if watching {
                        self.counters.add_watch_restart(WatchRestart::Error);
                    }
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
        self.health.report(Probe::Readiness, &self.subject, None);
        self.health.report(Probe::Liveness, &self.subject, None);
        self.stats
    }

    /// Fails `/readyz` until the source first synced, and while the API server has answered
    /// nothing for the stall timeout; clears that once it answers.
    fn report_reachability(&self) {
        let problem = self.stall.unreachable_for().map(|quiet| {
            format!("no answer from the Kubernetes API server for {:.0} s (--stall-timeout)", quiet.as_secs_f64())
        });
        match problem {
            None if !self.synced => {
                self.health.report_pending(&self.subject, NOT_SYNCED.into());
            }
            problem => self.health.report(Probe::Readiness, &self.subject, problem),
        }
    }

    /// A list completed or a watch was answered: synced from now on.
    fn synced(&mut self) {
        if !self.synced {
            self.synced = true;
            self.report_reachability();
        }
    }

    /// The watch delivered an event or bookmark, or a list completed: the progress gauge moves,
    /// and a restart for a stall is proven to have healed it.
    fn progressed(&mut self) {
        self.synced();
        self.counters.progressed_now();
        if self.stall.delivered() {
            self.health.report(Probe::Liveness, &self.subject, None);
        }
    }

    /// One stall check of a watch at `position` ([`stall`]): `true` when it stalled.
    async fn check_stall(&mut self, position: &str) -> Result<bool, Failure> {
        if !self.stall.should_list() {
            return Ok(false);
        }
        let limit = self.stall.options().request_timeout();
        let listed = match tokio::time::timeout(limit, self.head_resource_version()).await {
            Ok(Ok(rv)) => Some(rv),
            Ok(Err(Failure::Stopped)) => return Err(Failure::Stopped),
            Ok(Err(_)) | Err(_) => None,
        };
        self.report_reachability();
        let Some(listed) = listed else { return Ok(false) };
        if !self.stall.suspect(&listed, position) {
            return Ok(false);
        }
        // The one-second watch ends by itself after `timeoutSeconds`.
        match tokio::time::timeout(limit + Duration::from_secs(2), self.changed_since(position)).await {
            Ok(Ok(true)) => Ok(true),
            Ok(Ok(false)) => {
                // Idle: nothing of ours past the position; quiet from now on.
                self.stall.heard();
                Ok(false)
            }
            Ok(Err(Failure::Stopped)) => Err(Failure::Stopped),
            Ok(Err(_)) | Err(_) => Ok(false),
        }
    }

    /// The server's resourceVersion now, from a list of one item of the watched path and
    /// selectors.
    async fn head_resource_version(&mut self) -> Result<String, Failure> {
        let uri = format!("{}?limit=1{}", self.path, self.selectors);
        let bytes = self.get(uri.clone()).await?.into_body().collect_bytes().await;
        let bytes = bytes.map_err(|e| Failure::Other(e.to_string()))?;
        let page: ListPage =
            serde_json::from_slice(&bytes).map_err(|e| Failure::Other(format!("GET {uri}: not a list: {e}")))?;
        Ok(page.metadata.resource_version)
    }

    /// Whether the server has an event of the watched path and selectors past `position`: a
    /// watch from it for one second (`timeoutSeconds=1`), which the server starts with every
    /// change after the position. A `410` or the stream's end without one: no.
    async fn changed_since(&mut self, position: &str) -> Result<bool, Failure> {
        let uri =
            format!("{}?watch=true&resourceVersion={}&timeoutSeconds=1{}", self.path, encode(position), self.selectors);
        let mut body = match self.get(uri).await {
            Ok(response) => response.into_body(),
            Err(Failure::Gone) => return Ok(false),
            Err(e) => return Err(e),
        };
        let mut pending = Vec::<u8>::new();
        while let Some(frame) = body.frame().await {
            let Ok(data) = frame.map_err(|e| Failure::Other(e.to_string()))?.into_data() else { continue };
            pending.extend_from_slice(&data);
            if let Some(end) = pending.iter().position(|&b| b == b'\n') {
                let line: serde_json::Value = serde_json::from_slice(&pending[..end]).unwrap_or_default();
                return Ok(matches!(line["type"].as_str(), Some("ADDED" | "MODIFIED" | "DELETED")));
            }
        }
        Ok(false)
    }

    /// Remembers `event`'s resourceVersion: `Some` (the version) when it is new or changed.
    fn changed(&mut self, event: &Event) -> Option<SeenVersion> {
        let key = if event.metadata.uid.is_empty() {
            std::borrow::Cow::Owned(format!("{}/{}", event.metadata.namespace, event.metadata.name))
        } else {
            std::borrow::Cow::Borrowed(event.metadata.uid.as_str())
        };
        let version = SeenVersion::new(&key, &event.metadata.resource_version);
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.is_current(version) {
            return None;
        }
        seen.record(version);
        Some(version)
    }

    /// Sends `event` (of version `seen`) on; `position` is where a restart resumes once it and
    /// every event before it are delivered (`None`: it moves no position; never empty).
    async fn send(&mut self, event: Event, seen: SeenVersion, position: Option<String>) -> Result<(), Failure> {
        self.stats.events += 1;
        self.counters.add_read(1);
        if let Some(progress) = &self.progress {
            let position = position.filter(|rv| !rv.is_empty()).map(Position::ResourceVersion);
            progress.sent_event(position, seen);
        }
        self.progressed();
        self.to.action(WatchEventType::Added, crate::event::shared(event)).await.map_err(|_| Failure::Stopped)
    }

    async fn get(&mut self, uri: String) -> Result<http::Response<Body>, Failure> {
        let request = Request::get(&uri)
            .header(header::ACCEPT, "application/json")
            .body(Body::from(Vec::new()))
            .map_err(|e| Failure::Other(e.to_string()))?;
        let response = tokio::select! {
            _ = self.cancel.cancelled() => return Err(Failure::Stopped),
            r = self.client.send(request) => r.map_err(|e| Failure::Other(format!("GET {uri}: {e}")))?,
        };
        self.stall.reached();
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

    /// Lists every page; sends on the items that are new or changed since last seen when
    /// `send_items` (else only remembers them); returns the list's resourceVersion. List items
    /// come in no resourceVersion order, so only the last item sent carries a position: the
    /// list's resourceVersion.
    async fn list(&mut self, send_items: bool) -> Result<String, Failure> {
        self.stats.lists += 1;
        // The last changed item, held back until the next one (or the list's end) is known.
        let mut held: Option<(Event, SeenVersion)> = None;
        let listed = self.list_pages(send_items, &mut held).await;
        // A list that failed half-way still sends what it held (it is remembered as seen).
        let position = match &listed {
            Ok(resource_version) => Some(resource_version.clone()),
            Err(Failure::Stopped) => return listed,
            Err(_) => None,
        };
        if let Some((event, version)) = held {
            self.send(event, version, position).await?;
        }
        if listed.is_ok() {
            self.progressed();
        }
        listed
    }

    async fn list_pages(
        &mut self,
        send_items: bool,
        held: &mut Option<(Event, SeenVersion)>,
    ) -> Result<String, Failure> {
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
            decoder.push_line(&go_strings::lossy_utf8(&bytes), |d| items.push(d));
            items.extend(decoder.finish().map(Err));
            for item in items {
                let Ok(Decoded::Event { event, .. }) = item else { continue };
                match self.changed(&event) {
                    Some(version) if send_items => {
                        if let Some((event, version)) = held.replace((event, version)) {
                            self.send(event, version, None).await?;
                        }
                    }
                    Some(version) => {
                        // Already in the cluster at the first start: not sent, but known.
                        if let Some(progress) = &self.progress {
                            progress.seen_unsent(version);
                        }
                    }
                    None => self.stats.repeats += u64::from(send_items),
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
        self.stall.heard();
        self.synced();
        let mut checks = self.stall.options().enabled().then(|| {
            let every = self.stall.options().check_interval;
            let mut checks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            checks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            checks
        });
        let mut decoder = Decoder::new();
        let mut pending = Vec::<u8>::new();
        let mut last: Option<String> = None;
        loop {
            let frame = tokio::select! {
                _ = self.cancel.cancelled() => return Err(Failure::Stopped),
                _ = tick(&mut checks) => {
                    let position = last.as_deref().unwrap_or(&resource_version).to_string();
                    if self.check_stall(&position).await? {
                        return Err(Failure::Stalled(last));
                    }
                    continue;
                }
                f = body.frame() => f,
            };
            let Some(frame) = frame else { return Ok(last) };
            let frame = frame.map_err(|e| Failure::Other(format!("watch stream: {e}")))?;
            let Ok(data) = frame.into_data() else { continue };
            pending.extend_from_slice(&data);
            while let Some(end) = pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                let mut items = Vec::new();
                decoder.push_line(go_strings::lossy_utf8(&line).trim_end(), |d| items.push(d));
                for item in items {
                    match item {
                        Ok(Decoded::Event { event, watch_type, .. }) => {
                            if !event.metadata.resource_version.is_empty() {
                                last = Some(event.metadata.resource_version.to_string());
                            }
                            if watch_type == Some(WatchEventType::Deleted) {
                                continue; // an expired event going away is not an occurrence
                            }
                            match self.changed(&event) {
                                Some(version) => {
                                    let position = event.metadata.resource_version.to_string();
                                    self.send(event, version, Some(position)).await?;
                                }
                                None => self.stats.repeats += 1,
                            }
                        }
                        Ok(Decoded::Bookmark { resource_version, .. }) => {
                            self.stats.bookmarks += 1;
                            self.counters.add_non_event();
                            self.progressed();
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
            // Heard from, once what it brought is sent on: time spent waiting for room in the
            // Broadcaster (back-pressure) is not quiet.
            self.stall.heard();
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

/// The next tick of `checks`; never, without checks.
async fn tick(checks: &mut Option<tokio::time::Interval>) {
    match checks {
        Some(checks) => {
            checks.tick().await;
        }
        None => std::future::pending().await,
    }
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
