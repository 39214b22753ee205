//! The watch cache: the correlated core/v1 Events eventpipe has written, as they would exist in
//! a cluster, with a window of recent changes that watchers resume from — the apiserver's Cacher
//! (`staging/src/k8s.io/apiserver/pkg/storage/cacher`: `watchCache`, `cacheWatcher`) rebuilt
//! for eventpipe's output.
//!
//! # Where it sits
//!
//! ```text
//! tenant router ─► every sink of the tenant ─┬─► jsonl / k8s / webhook / plugin
//!                                            └─► WatchCacheSink (a tap added to every tenant)
//!                                                  │ create / patch / update, as the apiserver
//!                                                  ▼
//!                               WatchCache: objects (ns/name → newest version)
//!                                           Window<Change> (resourceVersion N → change)
//!                                                  │
//!                     ┌────────────────────────────┼─────────────────────────┐
//!                  Cursor (pull; Wasm watchers)  WatchStream (HTTP watch)   list / get
//! ```
//!
//! The cache is fed by what the sinks are given, not by the Broadcaster's input, because what
//! a watcher of eventpipe wants is the deduplicated, aggregated stream: the result of the
//! correlator after client-go's `recordToSink` (create when new, strategic-merge patch of
//! `count` / `lastTimestamp` / `message` when repeated). [`crate::sink::watch_cache`] is the
//! sink side: it answers exactly as an apiserver would (`409 AlreadyExists` on a duplicate
//! create, `404 NotFound` on a patch of an unknown event, which `recordToSink` answers with a
//! create), so the correlator's `update_state` sees the stored event with its resourceVersion.
//!
//! # Resource versions and the window
//!
//! Every change — a create, a patch, an update, or a deletion — gets the next resourceVersion
//! (decimal strings; one counter for the whole cache, as etcd's revision, which a run starts
//! above every version an earlier process issued: see [`resource_version`]) and
//! enters a bounded [`Window`] (`--watch-cache-size` changes, at most `--watch-cache-age`
//! old). A watcher that starts at resourceVersion N gets every change after N from the window,
//! then the live ones, with no gap and no duplicate (the apiserver's `initEvents` then the
//! dispatch loop); a watcher whose N has left the window — or is ahead of the newest, which
//! this cache never issued — gets [`TooOld`], answered `410 Gone` (reason `Expired`, "too old
//! resource version"), and re-lists.
//!
//! # Memory bound
//!
//! The objects are bounded as a cluster bounds events: an event not changed for
//! `--event-ttl` (default 1 h, the apiserver's `--event-ttl`) is deleted (a `DELETED` change),
//! and beyond `--watch-cache-objects` events the least recently changed one is deleted the same
//! way. Window entries share the versions they name with the objects (`Arc`), and each version
//! is serialised to JSON at most once however many watchers are sent it (the apiserver's
//! `cachingObject`). So the cache holds at most `objects + window` versions of an event, each
//! the event plus its JSON once served (about 2-3 KB for a typical event; see the bench).
//!
//! # Watchers
//!
//! A watcher is a cursor over the shared window: dispatch costs the writer nothing per watcher
//! (it pushes one change and wakes the watchers), and a slow watcher holds back no one — it
//! only falls behind. Each watcher filters with its own [`Predicate`] and turns changes into the
//! apiserver's transitions (`cacheWatcher.convertToWatchEvent`): a change whose new version
//! matches and whose previous one did not is `ADDED`; both match, `MODIFIED`; the previous
//! matched and the new one does not, `DELETED` (the previous version, with the change's
//! resourceVersion); neither, nothing. An HTTP watch ([`WatchCache::stream`]) has a queue of
//! `--watch-queue-length` events towards its connection; when it stays full for
//! `--watch-budget` the watcher is cut off with its reason logged and counted (the apiserver's
//! `dispatchTimeoutBudget` and "Forcing … watcher close due to unresponsiveness"), and the
//! client, which resumes from the last resourceVersion it saw, finds it in the window.
//!
//! # Divergences from the apiserver
//! - The objects do not outlive the process: a run starts empty, its resourceVersions above
//!   the previous run's ([`resource_version`]), so an informer that reconnects with a version
//!   from before gets `410` and re-lists.
//! - Objects leave by TTL or by the object bound, not by a client's `DELETE` (the API is read
//!   only); patch bodies are applied as JSON merge patches, which is what a strategic-merge
//!   patch of an Event's scalar fields amounts to.
//! - A watch at a resourceVersion newer than the cache's newest is answered `410 Expired` at
//!   once (the apiserver's watch waits for etcd to get there; this cache's head never will).
//!   A list at such a version waits 3 s and answers `504`, as the apiserver's Cacher.

pub mod api;
pub mod resource_version;
pub mod selector;
pub mod table;
pub mod window;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use tokio::sync::{mpsc, watch};

use crate::broadcaster::WatchEventType;
use crate::clock::SharedClock;
use crate::event::Event;
pub use crate::watch_cache::window::TooOld;
use crate::watch_cache::window::Window;
pub use selector::{FieldSelector, LabelSelector, Predicate, SelectorError};

/// Default window, changes (`--watch-cache-size`).
pub const DEFAULT_WINDOW_SIZE: usize = 10_000;
/// Default longest a change stays in the window (`--watch-cache-age`): 5 minutes.
pub const DEFAULT_WINDOW_AGE: Duration = Duration::from_secs(300);
/// Default most events held (`--watch-cache-objects`).
pub const DEFAULT_MAX_OBJECTS: usize = 10_000;
/// Default time an event not changed is kept (`--event-ttl`): 1 hour, the apiserver's default.
pub const DEFAULT_EVENT_TTL: Duration = Duration::from_secs(3600);
/// Default queue of an HTTP watch towards its connection, events (`--watch-queue-length`).
pub const DEFAULT_WATCHER_QUEUE: usize = 100;
/// Default time a watch's queue may stay full before it is cut off (`--watch-budget`).
pub const DEFAULT_WATCHER_BUDGET: Duration = Duration::from_secs(10);
/// Default interval between bookmarks of a watch that asked for them: 1 minute, as the
/// apiserver's periodic bookmarks.
pub const DEFAULT_BOOKMARK_INTERVAL: Duration = Duration::from_secs(60);

/// The bounds and timings of a [`WatchCache`] (each a `run` flag and a key of the config's
/// `[watch_cache]`, [`WatchCacheSettings`]; see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchCacheConfig {
    /// Most changes in the window (≥ 1).
    pub window_size: usize,
    /// Longest a change stays in the window (the newest one always stays).
    pub window_age: Duration,
    /// Most events held; beyond it the least recently changed one is deleted.
    pub max_objects: usize,
    /// An event not changed for this long is deleted.
    pub event_ttl: Duration,
    /// Queue of an HTTP watch towards its connection, events (≥ 1).
    pub watcher_queue: usize,
    /// How long a watch's full queue may keep it waiting before it is cut off.
    pub watcher_budget: Duration,
    /// Interval between bookmarks of a watch with `allowWatchBookmarks=true`.
    pub bookmark_interval: Duration,
}

/// Watch cache settings as given: the `run` flags (`--watch-cache-size`, …) or the config
/// file's `[watch_cache]` table, `None` where not given. [`or`](Self::or) fills the gaps of one
/// from the other (the flags win), [`resolve`](Self::resolve) the rest from the defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WatchCacheSettings {
    /// [`WatchCacheConfig::window_size`], changes (`--watch-cache-size`, `size`).
    pub size: Option<usize>,
    /// [`WatchCacheConfig::window_age`], seconds (`--watch-cache-age`, `age_seconds`).
    pub age_seconds: Option<u64>,
    /// [`WatchCacheConfig::max_objects`], events (`--watch-cache-objects`, `objects`).
    pub objects: Option<usize>,
    /// [`WatchCacheConfig::event_ttl`], seconds (`--event-ttl`, `event_ttl_seconds`).
    pub event_ttl_seconds: Option<u64>,
    /// [`WatchCacheConfig::watcher_queue`], events (`--watch-queue-length`, `queue_length`).
    pub queue_length: Option<usize>,
    /// [`WatchCacheConfig::watcher_budget`], seconds (`--watch-budget`, `budget_seconds`).
    pub budget_seconds: Option<f64>,
    /// [`WatchCacheConfig::bookmark_interval`], seconds (`--watch-bookmark-interval`,
    /// `bookmark_interval_seconds`).
    pub bookmark_interval_seconds: Option<f64>,
}

impl WatchCacheSettings {
    /// These settings, with `other`'s where these have none.
    pub fn or(self, other: Self) -> Self {
        Self {
            size: self.size.or(other.size),
            age_seconds: self.age_seconds.or(other.age_seconds),
            objects: self.objects.or(other.objects),
            event_ttl_seconds: self.event_ttl_seconds.or(other.event_ttl_seconds),
            queue_length: self.queue_length.or(other.queue_length),
            budget_seconds: self.budget_seconds.or(other.budget_seconds),
            bookmark_interval_seconds: self.bookmark_interval_seconds.or(other.bookmark_interval_seconds),
        }
    }

    /// The configuration: these settings, the defaults (`DEFAULT_*`) where none is given; a
    /// window size or queue length of 0 counts as 1.
    ///
    /// # Errors
    /// A message naming the setting when the budget or the bookmark interval is not a positive,
    /// finite number of seconds.
    pub fn resolve(self) -> Result<WatchCacheConfig, String> {
        let seconds = |name: &str, given: Option<f64>, default: Duration| match given {
            None => Ok(default),
            Some(s) => Duration::try_from_secs_f64(s)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| format!("{name} must be a positive number of seconds, not {s}")),
        };
        Ok(WatchCacheConfig {
            window_size: self.size.unwrap_or(DEFAULT_WINDOW_SIZE).max(1),
            window_age: self.age_seconds.map_or(DEFAULT_WINDOW_AGE, Duration::from_secs),
            max_objects: self.objects.unwrap_or(DEFAULT_MAX_OBJECTS),
            event_ttl: self.event_ttl_seconds.map_or(DEFAULT_EVENT_TTL, Duration::from_secs),
            watcher_queue: self.queue_length.unwrap_or(DEFAULT_WATCHER_QUEUE).max(1),
            watcher_budget: seconds(
                "the watch budget (--watch-budget, watch_cache.budget_seconds)",
                self.budget_seconds,
                DEFAULT_WATCHER_BUDGET,
            )?,
            bookmark_interval: seconds(
                "the bookmark interval (--watch-bookmark-interval, watch_cache.bookmark_interval_seconds)",
                self.bookmark_interval_seconds,
                DEFAULT_BOOKMARK_INTERVAL,
            )?,
        })
    }
}

impl Default for WatchCacheConfig {
    fn default() -> Self {
        Self {
            window_size: DEFAULT_WINDOW_SIZE,
            window_age: DEFAULT_WINDOW_AGE,
            max_objects: DEFAULT_MAX_OBJECTS,
            event_ttl: DEFAULT_EVENT_TTL,
            watcher_queue: DEFAULT_WATCHER_QUEUE,
            watcher_budget: DEFAULT_WATCHER_BUDGET,
            bookmark_interval: DEFAULT_BOOKMARK_INTERVAL,
        }
    }
}

/// One stored version of an event: the event with `metadata.resourceVersion` set to `rv`, and
/// its JSON, made once on first use and shared by every watcher and list that sends it.
#[derive(Debug)]
pub struct Version {
    /// Its resourceVersion.
    pub rv: u64,
    /// The event, `metadata.resourceVersion` = `rv`.
    pub event: Event,
    /// When it was written (the cache's clock): what the TTL counts from.
    pub written: DateTime<Utc>,
    json: OnceLock<Bytes>,
}

impl Version {
    fn new(rv: u64, mut event: Event, written: DateTime<Utc>) -> Arc<Self> {
        event.metadata.resource_version = compact_str::ToCompactString::to_compact_string(&rv);
        Arc::new(Self { rv, event, written, json: OnceLock::new() })
    }

    /// The event as core/v1 JSON (`kind: Event`, `apiVersion: v1`), serialised once.
    pub fn json(&self) -> Bytes {
        self.json
            .get_or_init(|| Bytes::from(serde_json::to_vec(&self.event).expect("an Event always serialises")))
            .clone()
    }

    fn key(&self) -> Key {
        key_of(&self.event)
    }
}

/// An event's identity: (namespace, name), sorted as the apiserver lists them.
type Key = (String, String);

fn key_of(event: &Event) -> Key {
    (event.metadata.namespace.to_string(), event.metadata.name.to_string())
}

/// One change in the window: what happened and the object before and after.
#[derive(Debug, Clone)]
pub struct Change {
    /// `Added`, `Modified` or `Deleted`.
    pub type_: WatchEventType,
    /// The new version (for `Deleted`: the last state, with the deletion's resourceVersion).
    pub object: Arc<Version>,
    /// The version before (`None` for `Added`).
    pub prev: Option<Arc<Version>>,
}

/// What a watcher is sent: a watch event type and the version it carries.
#[derive(Debug, Clone)]
pub struct Served {
    /// `Added`, `Modified` or `Deleted` (as the watcher's predicate sees the change).
    pub type_: WatchEventType,
    /// The version.
    pub object: Arc<Version>,
}

/// Why a write to the cache was refused, as the apiserver refuses it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// A create of a name that exists (`409 AlreadyExists`).
    #[error("events \"{0}\" already exists")]
    AlreadyExists(String),
    /// A patch of a name that does not exist (`404 NotFound`).
    #[error("events \"{0}\" not found")]
    NotFound(String),
    /// A patch body that is not a JSON object, or that makes the event invalid (`400`).
    #[error("{0}")]
    BadPatch(String),
}

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// At the cache's newest resourceVersion: only changes after now.
    Now,
    /// With a synthetic `ADDED` for every event held now (that the predicate selects), then the
    /// changes after now: a watch with `resourceVersion` unset or `"0"` (the apiserver's "get
    /// state and start at most recent" / "start at any").
    State,
    /// After this resourceVersion: every change after it from the window, then live.
    After(u64),
}

/// Live counts of a cache.
#[derive(Debug, Default)]
struct Counters {
    changes: AtomicU64,
    expired_ttl: AtomicU64,
    evicted: AtomicU64,
    watchers: AtomicU64,
    cut_off: AtomicU64,
    too_old: AtomicU64,
}

/// A snapshot of a cache's state and counts (for `/metrics` and the bench).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct WatchCacheStats {
    /// The newest resourceVersion.
    pub resource_version: u64,
    /// Events held.
    pub objects: usize,
    /// Changes in the window.
    pub window: usize,
    /// Changes made (creates, patches, updates, deletions).
    pub changes: u64,
    /// Events deleted because their TTL passed.
    pub expired_ttl: u64,
    /// Events deleted because the cache held `max_objects`.
    pub evicted: u64,
    /// Watches open now (HTTP watches and cursors).
    pub watchers: u64,
    /// Watches cut off because their queue stayed full for the budget.
    pub cut_off: u64,
    /// Watch or list requests answered `410` (resourceVersion left the window).
    pub too_old: u64,
}

struct State {
    objects: BTreeMap<Key, Arc<Version>>,
    /// The keys by the resourceVersion of their newest version: oldest change first (TTL and
    /// the object bound delete from the front).
    by_rv: BTreeMap<u64, Key>,
    window: Window<Change>,
    /// The high-water mark file and the ceiling saved in it: no resourceVersion above the
    /// ceiling is issued before a higher one is saved (`None`: no file, or it failed).
    ceiling: Option<(resource_version::HighWaterMark, u64)>,
}

/// The watch cache (see the module docs). Shared as `Arc<WatchCache>` between the sink that
/// writes it, the HTTP read API and the watchers.
pub struct WatchCache {
    config: WatchCacheConfig,
    clock: SharedClock,
    state: Mutex<State>,
    head: watch::Sender<u64>,
    counters: Counters,
    /// Ends every watcher, once each has taken what is left.
    closed: tokio_util::sync::CancellationToken,
    /// Ends the HTTP watches ([`WatchCache::stream`]) at once; a child of `closed`.
    streams_closed: tokio_util::sync::CancellationToken,
}

impl std::fmt::Debug for WatchCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchCache").field("config", &self.config).field("stats", &self.stats()).finish()
    }
}

impl WatchCache {
    /// An empty cache with `config`, reading time (TTL, window age) from `clock`, whose
    /// resourceVersions start at 1 (tests and benches; a run uses [`continuing`](Self::continuing)).
    pub fn new(config: WatchCacheConfig, clock: SharedClock) -> Arc<Self> {
        Self::starting_after(config, clock, 0, None)
    }

    /// An empty cache whose resourceVersions continue above every one an earlier process can
    /// have issued ([`resource_version`]): above the wall-clock floor at start, and above the
    /// ceiling saved in `mark` (the sidecar of the state file) when there is one; the new
    /// ceiling is saved before the first change. A mark that cannot be read or written is
    /// warned about and the cache goes on from the time floor alone: a run never fails for it.
    pub fn continuing(
        config: WatchCacheConfig,
        clock: SharedClock,
        mark: Option<resource_version::HighWaterMark>,
    ) -> Arc<Self> {
        let saved = mark.as_ref().and_then(|m| {
            m.load()
                .inspect_err(|e| tracing::warn!(file = %m.path().display(), %e, "watch cache: ignoring the resourceVersion high-water mark"))
                .ok()
                .flatten()
        });
        let after = resource_version::start_after(clock.now(), saved);
        let cache = Self::starting_after(config, clock, after, None);
        if let Some(mark) = mark {
            let mut state = cache.lock();
            state.ceiling = Some((mark, after));
            cache.reserve(&mut state, after + 1);
        }
        cache
    }

    /// An empty cache whose first change gets resourceVersion `after + 1`.
    fn starting_after(
        config: WatchCacheConfig,
        clock: SharedClock,
        after: u64,
        ceiling: Option<(resource_version::HighWaterMark, u64)>,
    ) -> Arc<Self> {
        let window = Window::starting_after(after, config.window_size, Some(config.window_age));
        let state = State { objects: BTreeMap::new(), by_rv: BTreeMap::new(), window, ceiling };
        let closed = tokio_util::sync::CancellationToken::new();
        Arc::new(Self {
            config,
            clock,
            state: Mutex::new(state),
            head: watch::channel(after).0,
            counters: Counters::default(),
            streams_closed: closed.child_token(),
            closed,
        })
    }

    /// Its configuration.
    pub fn config(&self) -> &WatchCacheConfig {
        &self.config
    }

    /// The time on the cache's clock: what the read API's Table ages count to.
    pub fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The newest resourceVersion (0 before the first change).
    pub fn resource_version(&self) -> u64 {
        *self.head.borrow()
    }

    /// Waits until the newest resourceVersion is at least `rv`, at most `timeout`; whether it
    /// got there.
    pub async fn wait_for(&self, rv: u64, timeout: Duration) -> bool {
        let mut head = self.head.subscribe();
        tokio::time::timeout(timeout, head.wait_for(|h| *h >= rv)).await.is_ok_and(|r| r.is_ok())
    }

    /// State and counts now.
    pub fn stats(&self) -> WatchCacheStats {
        let state = self.lock();
        let c = &self.counters;
        WatchCacheStats {
            resource_version: state.window.head(),
            objects: state.objects.len(),
            window: state.window.len(),
            changes: c.changes.load(Ordering::Relaxed),
            expired_ttl: c.expired_ttl.load(Ordering::Relaxed),
            evicted: c.evicted.load(Ordering::Relaxed),
            watchers: c.watchers.load(Ordering::Relaxed),
            cut_off: c.cut_off.load(Ordering::Relaxed),
            too_old: c.too_old.load(Ordering::Relaxed),
        }
    }

    /// Records one change (under the lock) and returns its resourceVersion.
    fn record(
        &self,
        state: &mut State,
        type_: WatchEventType,
        event: Event,
        prev: Option<Arc<Version>>,
        now: DateTime<Utc>,
    ) -> Arc<Version> {
        let rv = state.window.head() + 1;
        self.reserve(state, rv);
        let version = Version::new(rv, event, now);
        let key = version.key();
        if let Some(prev) = &prev {
            state.by_rv.remove(&prev.rv);
        }
        if type_ == WatchEventType::Deleted {
            state.objects.remove(&key);
        } else {
            state.objects.insert(key.clone(), version.clone());
            state.by_rv.insert(rv, key);
        }
        let pushed = state.window.push(Change { type_, object: version.clone(), prev }, now);
        debug_assert_eq!(pushed, rv);
        self.counters.changes.fetch_add(1, Ordering::Relaxed);
        version
    }

    /// Before `rv` is issued: when it is above the saved ceiling, saves `rv +`
    /// [`resource_version::RESERVE`] as the new one (under the lock: once per that many
    /// changes). A failed save is warned about once and the mark dropped (the time floor
    /// still holds).
    fn reserve(&self, state: &mut State, rv: u64) {
        let Some((mark, ceiling)) = &mut state.ceiling else { return };
        if rv <= *ceiling {
            return;
        }
        let next = rv.saturating_add(resource_version::RESERVE);
        match mark.store(next) {
            Ok(()) => *ceiling = next,
            Err(e) => {
                tracing::warn!(file = %mark.path().display(), %e, "watch cache: cannot save the resourceVersion high-water mark; restarts rely on the clock alone");
                state.ceiling = None;
            }
        }
    }

    /// Deletes what is past its TTL and what is over the object bound (oldest change first),
    /// each a `DELETED` change.
    fn trim(&self, state: &mut State, now: DateTime<Utc>) {
        let ttl = chrono::Duration::from_std(self.config.event_ttl).unwrap_or(chrono::Duration::MAX);
        // The oldest held version (an `Arc`: no key copied for the usual check that stops here).
        while let Some(version) = state
            .by_rv
            .first_key_value()
            .map(|(_, key)| state.objects.get(key).expect("by_rv names held objects").clone())
        {
            let expired = version.written + ttl <= now;
            let over = state.objects.len() > self.config.max_objects;
            if !expired && !over {
                break;
            }
            let counter = if expired { &self.counters.expired_ttl } else { &self.counters.evicted };
            counter.fetch_add(1, Ordering::Relaxed);
            self.record(state, WatchEventType::Deleted, version.event.clone(), Some(version), now);
        }
        state.window.expire(now);
    }

    fn publish(&self, state: &State) {
        self.head.send_replace(state.window.head());
    }

    /// Creates `event` as the apiserver's create does: `metadata.uid` and `creationTimestamp`
    /// filled when missing, a new resourceVersion; returns the stored event.
    ///
    /// # Errors
    /// [`WriteError::AlreadyExists`] when an event of that namespace and name is held.
    pub fn create(&self, event: &Event) -> Result<Event, WriteError> {
        let now = self.clock.now();
        let mut state = self.lock();
        self.trim(&mut state, now);
        let key = key_of(event);
        if state.objects.contains_key(&key) {
            return Err(WriteError::AlreadyExists(key.1));
        }
        let version = self.record(&mut state, WatchEventType::Added, fill_server_fields(event.clone(), now), None, now);
        self.trim(&mut state, now);
        self.publish(&state);
        Ok(version.event.clone())
    }

    /// Applies `patch` (a JSON object, as a merge patch) to the held event `namespace`/`name`
    /// and returns the stored result; name and namespace stay.
    ///
    /// # Errors
    /// [`WriteError::NotFound`] when no such event is held; [`WriteError::BadPatch`] for a body
    /// that is not a JSON object or makes the event invalid.
    pub fn patch(&self, namespace: &str, name: &str, patch: &[u8]) -> Result<Event, WriteError> {
        let patch: serde_json::Value = if patch.trim_ascii().is_empty() {
            serde_json::Value::Object(Default::default())
        } else {
            serde_json::from_slice(patch).map_err(|e| WriteError::BadPatch(format!("invalid patch: {e}")))?
        };
        if !patch.is_object() {
            return Err(WriteError::BadPatch("a patch must be a JSON object".into()));
        }
        let now = self.clock.now();
        let mut state = self.lock();
        self.trim(&mut state, now);
        let key = (namespace.to_string(), name.to_string());
        let prev = state.objects.get(&key).cloned().ok_or_else(|| WriteError::NotFound(name.to_string()))?;
        let mut value = serde_json::to_value(&prev.event).expect("an Event always serialises");
        crate::event::merge_patch(&mut value, patch);
        let mut event: Event = serde_json::from_value(value)
            .map_err(|e| WriteError::BadPatch(format!("patched event is invalid: {e}")))?;
        event.metadata.namespace = prev.event.metadata.namespace.clone();
        event.metadata.name = prev.event.metadata.name.clone();
        let version = self.record(&mut state, WatchEventType::Modified, event, Some(prev), now);
        self.trim(&mut state, now);
        self.publish(&state);
        Ok(version.event.clone())
    }

    /// Stores `event` whole: replaces the held event of its namespace and name (`MODIFIED`), or
    /// creates it (`ADDED`), as a `PUT` without a resourceVersion does. Returns the stored event.
    pub fn update(&self, event: &Event) -> Event {
        let now = self.clock.now();
        let mut state = self.lock();
        self.trim(&mut state, now);
        let prev = state.objects.get(&key_of(event)).cloned();
        let event = fill_server_fields(event.clone(), now);
        let type_ = if prev.is_some() { WatchEventType::Modified } else { WatchEventType::Added };
        let version = self.record(&mut state, type_, event, prev, now);
        self.trim(&mut state, now);
        self.publish(&state);
        version.event.clone()
    }

    /// Deletes what the TTL and the object bound say must go now (the writes do this too; a
    /// run calls it every second so that an idle cache expires its events as well).
    pub fn expire(&self) {
        let now = self.clock.now();
        let mut state = self.lock();
        let before = state.window.head();
        self.trim(&mut state, now);
        if state.window.head() != before {
            self.publish(&state);
        }
    }

    /// The held event `namespace`/`name`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<Version>> {
        self.lock().objects.get(&(namespace.to_string(), name.to_string())).cloned()
    }

    /// The events `predicate` selects, sorted by namespace and name, as they were at
    /// resourceVersion `at` (`None`: now), with that resourceVersion. A past state is rebuilt
    /// from the current one by undoing the window's later changes, so it is exact.
    ///
    /// # Errors
    /// [`TooOld`] when `at` has left the window.
    pub fn list(&self, predicate: &Predicate, at: Option<u64>) -> Result<(u64, Vec<Arc<Version>>), TooOld> {
        let state = self.lock();
        let head = state.window.head();
        let at = at.unwrap_or(head).min(head);
        let selected = |v: &Arc<Version>| predicate.matches(&v.event);
        if at == head {
            return Ok((head, state.objects.values().filter(|v| selected(v)).cloned().collect()));
        }
        let changes = state.window.since(at).inspect_err(|_| {
            self.counters.too_old.fetch_add(1, Ordering::Relaxed);
        })?;
        // Undo, newest first, every change after `at`: only the keys they touch differ.
        let mut undone: HashMap<Key, Option<Arc<Version>>> = HashMap::new();
        for (_, change) in changes.rev() {
            undone.insert(change.object.key(), change.prev.clone());
        }
        let mut items: BTreeMap<&Key, Arc<Version>> =
            state.objects.iter().filter(|(k, _)| !undone.contains_key(*k)).map(|(k, v)| (k, v.clone())).collect();
        for (key, prev) in &undone {
            if let Some(prev) = prev {
                items.insert(key, prev.clone());
            }
        }
        Ok((at, items.into_values().filter(|v| selected(v)).collect()))
    }

    /// A pull-style watcher starting at `start` with `predicate`, and the `ADDED` events of the
    /// current state first when `start` is [`Start::State`].
    ///
    /// # Errors
    /// [`TooOld`] for [`Start::After`] a resourceVersion that has left the window, or one ahead
    /// of the newest (never issued here: from before a restart of another history); `410`.
    pub fn cursor(self: &Arc<Self>, start: Start, predicate: Predicate) -> Result<(Vec<Served>, Cursor), TooOld> {
        let state = self.lock();
        let head = state.window.head();
        let (initial, rv) = match start {
            Start::Now => (Vec::new(), head),
            Start::State => {
                let initial = state
                    .objects
                    .values()
                    .filter(|v| predicate.matches(&v.event))
                    .map(|v| Served { type_: WatchEventType::Added, object: v.clone() })
                    .collect();
                (initial, head)
            }
            Start::After(rv) => {
                // Ahead of the head: a version this cache never issued (its versions only grow,
                // across restarts too), from another history; the client must list again.
                let refused = match state.window.since(rv) {
                    Err(too_old) => Some(too_old),
                    Ok(_) if rv > head => Some(TooOld { asked: rv, oldest: state.window.oldest() }),
                    Ok(_) => None,
                };
                if let Some(too_old) = refused {
                    self.counters.too_old.fetch_add(1, Ordering::Relaxed);
                    return Err(too_old);
                }
                (Vec::new(), rv)
            }
        };
        drop(state);
        self.counters.watchers.fetch_add(1, Ordering::Relaxed);
        let cursor = Cursor { cache: self.clone(), rv, predicate, head: self.head.subscribe() };
        Ok((initial, cursor))
    }

    /// Ends every watcher once it has taken the changes made so far (a cursor's
    /// [`next`](Cursor::next) then returns `None`), and every HTTP watch at once (its stream
    /// ends after what it has queued), as at the end of a run. Writes still work.
    pub fn close(&self) {
        self.closed.cancel();
    }

    /// Ends the HTTP watches only ([`stream`](Self::stream)), as when a run begins its shutdown:
    /// a server stops only once its requests have ended, and a watch does not end by itself.
    pub fn close_streams(&self) {
        self.streams_closed.cancel();
    }

    /// An HTTP-style watch: [`cursor`](Self::cursor) driven by a task of its own into a queue
    /// of [`WatchCacheConfig::watcher_queue`] frames, with bookmarks every
    /// [`WatchCacheConfig::bookmark_interval`] when `bookmarks`, and the `k8s.io/initial-events-end`
    /// bookmark after the initial events when `initial_events_end` (a watch-list). A queue that
    /// stays full for [`WatchCacheConfig::watcher_budget`] cuts the watch off (logged with its
    /// reason, counted); a watcher that falls out of the window gets an [`Frame::Expired`] and ends.
    ///
    /// # Errors
    /// [`TooOld`] as [`cursor`](Self::cursor).
    ///
    /// # Panics
    /// Outside a tokio runtime (the task is spawned here).
    pub fn stream(
        self: &Arc<Self>,
        start: Start,
        predicate: Predicate,
        bookmarks: bool,
        initial_events_end: bool,
    ) -> Result<WatchStream, TooOld> {
        let (initial, mut cursor) = self.cursor(start, predicate)?;
        let (tx, rx) = mpsc::channel(self.config.watcher_queue.max(1));
        let end = Arc::new(Mutex::new(None));
        let (cache, end_out) = (self.clone(), end.clone());
        tokio::spawn(async move {
            let ended = pump(&cache, &tx, initial, &mut cursor, bookmarks, initial_events_end).await;
            if let End::CutOff { behind, .. } = &ended {
                cache.counters.cut_off.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    resource_version = cursor.rv,
                    behind,
                    budget_ms = cache.config.watcher_budget.as_millis() as u64,
                    "watch cache: {ended}"
                );
            }
            *end_out.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(ended);
        });
        Ok(WatchStream { rx, end })
    }
}

impl Drop for Cursor {
    fn drop(&mut self) {
        self.cache.counters.watchers.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The server fields a create fills in: `kind`, `apiVersion`, `uid`, `creationTimestamp`.
fn fill_server_fields(mut event: Event, now: DateTime<Utc>) -> Event {
    if event.kind.is_empty() {
        event.kind = "Event".into();
    }
    if event.api_version.is_empty() {
        event.api_version = "v1".into();
    }
    if event.metadata.uid.is_empty() {
        event.metadata.uid = uuid::Uuid::new_v4().to_string().into();
    }
    if event.metadata.creation_timestamp.is_none() {
        event.metadata.creation_timestamp = Some(now);
    }
    event
}

/// A pull-style watcher of a [`WatchCache`]: a resourceVersion and a predicate (see the module
/// docs). Used directly by Wasm watcher plugins of the results, and by [`WatchCache::stream`].
pub struct Cursor {
    cache: Arc<WatchCache>,
    rv: u64,
    predicate: Predicate,
    head: watch::Receiver<u64>,
}

impl std::fmt::Debug for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cursor").field("rv", &self.rv).field("predicate", &self.predicate).finish()
    }
}

impl Cursor {
    /// The resourceVersion it has seen everything up to (filtered changes included): where a
    /// watch that resumes should start.
    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    /// The changes after [`resource_version`](Self::resource_version) that are in the window
    /// now, up to `max` of them (≥ 1), as this watcher's predicate turns them into events
    /// (possibly none, when nothing selected changed); advances the resourceVersion past them.
    /// Never waits.
    ///
    /// # Errors
    /// [`TooOld`] when a change after its resourceVersion has left the window: it fell too far
    /// behind (the apiserver answers `410`).
    pub fn poll(&mut self, max: usize) -> Result<Vec<Served>, TooOld> {
        let state = self.cache.lock();
        let changes = state.window.since(self.rv).inspect_err(|_| {
            self.cache.counters.too_old.fetch_add(1, Ordering::Relaxed);
        })?;
        let mut out = Vec::new();
        for (rv, change) in changes.take(max.max(1)) {
            self.rv = rv;
            if let Some(served) = transition(&self.predicate, change) {
                out.push(served);
            }
        }
        Ok(out)
    }

    /// How many changes it has not taken yet, and when the oldest of them was made.
    pub fn behind(&self) -> (u64, Option<DateTime<Utc>>) {
        let state = self.cache.lock();
        (state.window.head().saturating_sub(self.rv), state.window.pushed_at(self.rv + 1))
    }

    /// The next events: waits until a change after its resourceVersion is made, then as
    /// [`poll`](Self::poll) (an empty batch when the changes made were all filtered out).
    /// `Ok(None)` once the cache is closed and every change made before was taken.
    ///
    /// # Errors
    /// As [`poll`](Self::poll).
    pub async fn next(&mut self, max: usize) -> Result<Option<Vec<Served>>, TooOld> {
        loop {
            if *self.head.borrow_and_update() > self.rv {
                return self.poll(max).map(Some);
            }
            if self.cache.closed.is_cancelled() {
                return Ok(None);
            }
            tokio::select! {
                changed = self.head.changed() => {
                    if changed.is_err() {
                        return Ok(None);
                    }
                }
                () = self.cache.closed.cancelled() => return Ok(None),
            }
        }
    }
}

/// The apiserver's `convertToWatchEvent`: what a watcher with `predicate` is sent for `change`.
fn transition(predicate: &Predicate, change: &Change) -> Option<Served> {
    let everything = predicate.is_everything();
    let now = change.type_ != WatchEventType::Deleted && (everything || predicate.matches(&change.object.event));
    let before = change.prev.as_ref().is_some_and(|p| everything || predicate.matches(&p.event));
    match (before, now) {
        (false, true) => Some(Served { type_: WatchEventType::Added, object: change.object.clone() }),
        (true, true) => Some(Served { type_: WatchEventType::Modified, object: change.object.clone() }),
        (true, false) if change.type_ == WatchEventType::Deleted => {
            Some(Served { type_: WatchEventType::Deleted, object: change.object.clone() })
        }
        (true, false) => {
            // The previous version, carrying the change's resourceVersion.
            let prev = change.prev.as_ref().expect("matched before");
            let gone = Version::new(change.object.rv, prev.event.clone(), change.object.written);
            Some(Served { type_: WatchEventType::Deleted, object: gone })
        }
        (false, false) => None,
    }
}

/// What an HTTP watch sends, in order.
#[derive(Debug, Clone)]
pub enum Frame {
    /// An event.
    Event(Served),
    /// A `BOOKMARK` at this resourceVersion; `initial_events_end`: the one that ends a
    /// watch-list's initial events (annotation `k8s.io/initial-events-end: "true"`).
    Bookmark {
        /// The resourceVersion the watcher has seen everything up to.
        rv: u64,
        /// Whether it ends the initial events.
        initial_events_end: bool,
    },
    /// The watcher fell out of the window: an `ERROR` with a `410 Expired` Status; the last
    /// frame.
    Expired(TooOld),
}

/// Why an HTTP watch ended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum End {
    /// The cache was closed (the run ends).
    #[error("the watch cache closed")]
    Closed,
    /// The client went away.
    #[error("the client went away")]
    Gone,
    /// Its queue stayed full for the budget.
    #[error(
        "watcher cut off: its queue of {queue} events stayed full for {budget:?} (the client reads too slowly); \
         it was {behind} changes behind and may resume from resourceVersion {rv}"
    )]
    CutOff {
        /// Queue length, events.
        queue: usize,
        /// The budget.
        budget: Duration,
        /// Changes it had not taken.
        behind: u64,
        /// The resourceVersion of the last frame queued.
        rv: u64,
    },
    /// It fell out of the window (`410` sent).
    #[error("{0}")]
    Expired(TooOld),
}

/// The receiving end of [`WatchCache::stream`]: frames in order, then `None`.
#[derive(Debug)]
pub struct WatchStream {
    rx: mpsc::Receiver<Frame>,
    end: Arc<Mutex<Option<End>>>,
}

impl WatchStream {
    /// The next frame; `None` once the watch has ended and its queue is drained.
    pub async fn recv(&mut self) -> Option<Frame> {
        self.rx.recv().await
    }

    /// Why it ended, once it has.
    pub fn end(&self) -> Option<End> {
        self.end.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The frames as a stream (for an HTTP body).
    pub fn into_inner(self) -> mpsc::Receiver<Frame> {
        self.rx
    }
}

/// Sends `frame`, waiting at most the budget for room; `last` is the resourceVersion of the
/// last event queued (what the client resumes from). `Err` ends the watch.
async fn send(cache: &WatchCache, tx: &mpsc::Sender<Frame>, frame: Frame, last: u64) -> Result<(), End> {
    match tx.try_send(frame) {
        Ok(()) => Ok(()),
        Err(mpsc::error::TrySendError::Closed(_)) => Err(End::Gone),
        Err(mpsc::error::TrySendError::Full(frame)) => {
            match tokio::time::timeout(cache.config.watcher_budget, tx.send(frame)).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(_)) => Err(End::Gone),
                Err(_) => Err(End::CutOff {
                    queue: cache.config.watcher_queue,
                    budget: cache.config.watcher_budget,
                    behind: cache.resource_version().saturating_sub(last),
                    rv: last,
                }),
            }
        }
    }
}

/// The task behind a [`WatchStream`].
async fn pump(
    cache: &WatchCache,
    tx: &mpsc::Sender<Frame>,
    initial: Vec<Served>,
    cursor: &mut Cursor,
    bookmarks: bool,
    initial_events_end: bool,
) -> End {
    let start = cursor.rv;
    let mut last = start;
    for served in initial {
        if let Err(end) = send(cache, tx, Frame::Event(served), last).await {
            return end;
        }
    }
    if initial_events_end {
        let frame = Frame::Bookmark { rv: start, initial_events_end: true };
        if let Err(end) = send(cache, tx, frame, last).await {
            return end;
        }
    }
    let mut tick = tokio::time::interval_at(
        tokio::time::Instant::now() + cache.config.bookmark_interval,
        cache.config.bookmark_interval.max(Duration::from_millis(1)),
    );
    loop {
        let batch = tokio::select! {
            batch = cursor.next(256) => batch,
            _ = tick.tick(), if bookmarks => {
                // Progress for a watcher whose changes were all filtered out (so that it
                // resumes inside the window); skipped, never waited for, when its queue is full.
                if let Err(mpsc::error::TrySendError::Closed(_)) =
                    tx.try_send(Frame::Bookmark { rv: cursor.rv, initial_events_end: false })
                {
                    return End::Gone;
                }
                continue;
            }
            () = tx.closed() => return End::Gone,
            () = cache.streams_closed.cancelled() => return End::Closed,
        };
        match batch {
            Ok(None) => return End::Closed,
            Ok(Some(events)) => {
                for served in events {
                    let rv = served.object.rv;
                    if let Err(end) = send(cache, tx, Frame::Event(served), last).await {
                        return end;
                    }
                    last = rv;
                }
            }
            Err(too_old) => {
                let _ = tx.try_send(Frame::Expired(too_old));
                return End::Expired(too_old);
            }
        }
    }
}

impl crate::metrics::Snapshot {
    /// Sets the watch cache's state and counts (a run has one cache at most): its newest
    /// resourceVersion, events held, changes in the window, watches open (gauges); changes
    /// made, events deleted per reason, watches cut off, requests answered `410 Expired`.
    pub fn add_watch_cache(&mut self, c: WatchCacheStats) {
        use crate::metrics::{
            WATCH_CACHE_CHANGES, WATCH_CACHE_CUT_OFF, WATCH_CACHE_DELETED, WATCH_CACHE_EXPIRED, WATCH_CACHE_OBJECTS,
            WATCH_CACHE_RESOURCE_VERSION, WATCH_CACHE_WATCHES, WATCH_CACHE_WINDOW,
        };
        for (family, n) in [
            (&WATCH_CACHE_RESOURCE_VERSION, c.resource_version),
            (&WATCH_CACHE_OBJECTS, c.objects as u64),
            (&WATCH_CACHE_WINDOW, c.window as u64),
            (&WATCH_CACHE_WATCHES, c.watchers),
            (&WATCH_CACHE_CHANGES, c.changes),
            (&WATCH_CACHE_CUT_OFF, c.cut_off),
            (&WATCH_CACHE_EXPIRED, c.too_old),
        ] {
            self.set(family, &[], n);
        }
        self.set(&WATCH_CACHE_DELETED, &[("reason", "ttl")], c.expired_ttl);
        self.set(&WATCH_CACHE_DELETED, &[("reason", "max_objects")], c.evicted);
    }
}

#[cfg(test)]
mod tests;
