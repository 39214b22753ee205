//! A fan-out of watch events to many watchers, as apimachinery `k8s.io/apimachinery/pkg/watch`
//! (`mux.go` `Broadcaster`, `watch.go` `Event`, `filter.go` `Filter`), on tokio.
//!
//! Shape (spec §1.2): producers push events into ONE ordered incoming queue; ONE distributor task
//! takes them in FIFO order and offers each to every registered watcher's bounded queue. Watcher
//! registration and removal travel through the same incoming queue as markers, so a watcher sees
//! exactly the events accepted after its registration, and each watcher receives events in
//! acceptance order. When a watcher's queue is full, [`FullChannelBehavior`] decides: wait for room
//! (`WaitIfChannelFull`) or skip that watcher and count a drop (`DropIfChannelFull`).
//!
//! All queues here, including the incoming one, follow Go channel semantics: a queue of capacity
//! `n` holds `n` items plus one per receiver parked in `recv` at that instant, so capacity 0 is a
//! rendezvous (Go's unbuffered channel).
//!
//! # Divergence
//! - Watchers are offered each event in id (registration) order; Go iterates its map in random
//!   order.
//! - [`Broadcaster::watch`], [`Broadcaster::watch_with_prefix`] and [`Watcher::stop`] enqueue
//!   their marker and return at once; Go's `blockQueue` waits until the distributor has run the
//!   marker, and holds the lock that `Action`/`ActionOrDrop` need meanwhile. The ordering guarantee
//!   is the same, but here a wedged distributor (Wait mode, stuck watcher) never blocks them, nor
//!   the producers.
//! - A stopped watcher is skipped only when its queue is full; with room it still gets the events
//!   accepted before the `stop()` (Go picks at random between the send and `stopped`). Its stream
//!   ends when the distributor reaches the stop marker.
//! - A [`Broadcaster::action`] still waiting for room in incoming when [`Broadcaster::shutdown`]
//!   starts returns [`BroadcasterError::Stopped`] and its event is not delivered; Go's `Action`
//!   holds the lock during its blocking send, so `Shutdown` waits for it.
//! - Dropping the last [`Broadcaster`] handle shuts it down (without waiting); Go leaks the
//!   distributor goroutine. Dropping a [`Watcher`] stops it; dropping a [`FilteredWatcher`] stops
//!   its source and ends the filter task.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::pin::pin;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::{Notify, watch};

/// Capacity of the incoming queue of [`Broadcaster::new`] (apimachinery `incomingQueueLength`).
pub const INCOMING_QUEUE_LENGTH: usize = 25;

/// What the distributor does when a watcher's queue is full (apimachinery `FullChannelBehavior`).
/// As a command-line or config value: `wait` or `drop`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum FullChannelBehavior {
    /// Wait until that watcher has room or is stopped (Go `WaitIfChannelFull = 0`). One stuck
    /// watcher stalls delivery to all of them.
    #[value(name = "wait")]
    WaitIfChannelFull,
    /// Skip that watcher for this event and count a drop on it (Go `DropIfChannelFull = 1`).
    #[value(name = "drop")]
    DropIfChannelFull,
}

/// The kind of a watch event (apimachinery `watch.EventType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WatchEventType {
    /// `"ADDED"`.
    Added,
    /// `"MODIFIED"`.
    Modified,
    /// `"DELETED"`: the object is its last state.
    Deleted,
    /// `"BOOKMARK"`: only `metadata.resourceVersion` is meaningful.
    Bookmark,
    /// `"ERROR"`: the object is normally a `metav1.Status`.
    Error,
}

impl WatchEventType {
    /// The wire string: `"ADDED"`, `"MODIFIED"`, `"DELETED"`, `"BOOKMARK"` or `"ERROR"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
            Self::Bookmark => "BOOKMARK",
            Self::Error => "ERROR",
        }
    }
}

impl fmt::Display for WatchEventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that is not one of the five wire values of [`WatchEventType`] (case-sensitive).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown watch event type {0:?}")]
pub struct UnknownWatchEventType(pub String);

impl FromStr for WatchEventType {
    type Err = UnknownWatchEventType;

    /// Parses the exact wire string; errors with [`UnknownWatchEventType`] otherwise.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [Self::Added, Self::Modified, Self::Deleted, Self::Bookmark, Self::Error]
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| UnknownWatchEventType(s.to_owned()))
    }
}

/// One watch event, `{type, object}` (apimachinery `watch.Event`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchEvent<T> {
    /// What happened to the object.
    pub type_: WatchEventType,
    /// The object (for `Deleted`, its last state).
    pub object: T,
}

/// Errors of [`Broadcaster`] operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BroadcasterError {
    /// The broadcaster was shut down (apimachinery returns the same text since v0.25).
    #[error("broadcaster already stopped")]
    Stopped,
    /// [`Broadcaster::action_all`] was given more events than the incoming queue holds.
    #[error("{0} events do not fit the incoming queue at once")]
    TooMany(usize),
}

/// Distributes watch events to every registered [`Watcher`] (apimachinery `watch.Broadcaster`).
///
/// Cheap to clone: clones share one incoming queue and one distributor task. Dropping the last
/// clone closes incoming, like [`Broadcaster::shutdown`] without the wait.
pub struct Broadcaster<T: Clone + Send + 'static> {
    inner: Arc<Inner<T>>,
}

struct Inner<T> {
    incoming: Arc<Queue<Item<T>>>,
    watch_queue_length: usize,
    next_id: AtomicU64,
    distributor_done: watch::Receiver<bool>,
}

impl<T> Drop for Inner<T> {
    fn drop(&mut self) {
        self.incoming.close();
    }
}

/// What travels through the incoming queue. Only `Event` counts against its capacity.
enum Item<T> {
    Event(WatchEvent<T>),
    Register(u64, Arc<Queue<WatchEvent<T>>>, Option<FullChannelBehavior>),
    Unregister(u64),
}

impl<T: Clone + Send + 'static> Clone for Broadcaster<T> {
    fn clone(&self) -> Self {
        Self { inner: Arc::clone(&self.inner) }
    }
}

impl<T: Clone + Send + 'static> fmt::Debug for Broadcaster<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Broadcaster")
            .field("watch_queue_length", &self.inner.watch_queue_length)
            .field("incoming_dropped", &self.incoming_dropped())
            .finish_non_exhaustive()
    }
}

impl<T: Clone + Send + 'static> Broadcaster<T> {
    /// A broadcaster with an incoming queue of [`INCOMING_QUEUE_LENGTH`] (25) events and a buffer
    /// of `queue_length` events per watcher (0 = unbuffered), as apimachinery `NewBroadcaster`.
    ///
    /// # Panics
    /// Outside a tokio runtime: the distributor is `tokio::spawn`ed here.
    pub fn new(queue_length: usize, behavior: FullChannelBehavior) -> Self {
        Self::with_incoming(INCOMING_QUEUE_LENGTH, queue_length, behavior)
    }

    /// As [`Broadcaster::new`], but the incoming queue also holds `queue_length` events, as
    /// apimachinery `NewLongQueueBroadcaster` (client-go's event broadcaster uses 1000, Drop).
    ///
    /// # Panics
    /// Outside a tokio runtime: the distributor is `tokio::spawn`ed here.
    pub fn new_long_queue(queue_length: usize, behavior: FullChannelBehavior) -> Self {
        Self::with_incoming(queue_length, queue_length, behavior)
    }

    fn with_incoming(incoming_length: usize, queue_length: usize, behavior: FullChannelBehavior) -> Self {
        let incoming = Arc::new(Queue::new(incoming_length));
        let (done_tx, distributor_done) = watch::channel(false);
        tokio::spawn(distributor(Arc::clone(&incoming), behavior, done_tx));
        let inner = Inner { incoming, watch_queue_length: queue_length, next_id: AtomicU64::new(0), distributor_done };
        Self { inner: Arc::new(inner) }
    }

    /// Registers a new watcher with a buffer of `queue_length` events (apimachinery `Watch`).
    ///
    /// The watcher receives exactly the events accepted after this call, never an earlier one.
    /// Never blocks.
    ///
    /// # Errors
    /// [`BroadcasterError::Stopped`] after [`Broadcaster::shutdown`].
    pub fn watch(&self) -> Result<Watcher<T>, BroadcasterError> {
        self.register(self.inner.watch_queue_length, Vec::new(), None)
    }

    /// As [`Broadcaster::watch`], but with a buffer of `queue_length` events and its own
    /// full-queue behaviour instead of the Broadcaster's: a `DropIfChannelFull` watcher never
    /// holds the others back, even when the Broadcaster waits for its other watchers.
    ///
    /// # Errors
    /// [`BroadcasterError::Stopped`] after [`Broadcaster::shutdown`].
    pub fn watch_with(
        &self,
        queue_length: usize,
        behavior: FullChannelBehavior,
    ) -> Result<Watcher<T>, BroadcasterError> {
        self.register(queue_length, Vec::new(), Some(behavior))
    }

    /// As [`Broadcaster::watch`], but `prefix` is queued to this watcher alone, ahead of every
    /// later event; its buffer is `max(queue_length, prefix.len() + 1)` events (apimachinery
    /// `WatchWithPrefix`).
    ///
    /// # Errors
    /// [`BroadcasterError::Stopped`] after [`Broadcaster::shutdown`].
    pub fn watch_with_prefix(&self, prefix: Vec<WatchEvent<T>>) -> Result<Watcher<T>, BroadcasterError> {
        let capacity = self.inner.watch_queue_length.max(prefix.len() + 1);
        self.register(capacity, prefix, None)
    }

    fn register(
        &self,
        capacity: usize,
        prefix: Vec<WatchEvent<T>>,
        behavior: Option<FullChannelBehavior>,
    ) -> Result<Watcher<T>, BroadcasterError> {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let queue = Arc::new(Queue::with_items(capacity, prefix));
        self.inner
            .incoming
            .push_marker(Item::Register(id, Arc::clone(&queue), behavior))
            .map_err(|_| BroadcasterError::Stopped)?;
        let stopper = WatcherStopper::new(id, Arc::clone(&queue), Arc::clone(&self.inner.incoming));
        Ok(Watcher { id, queue, stopper })
    }

    /// Accepts an event for distribution, waiting while the incoming queue is full
    /// (apimachinery `Action`).
    ///
    /// # Errors
    /// [`BroadcasterError::Stopped`] after [`Broadcaster::shutdown`], including when shutdown
    /// starts while this call is still waiting for room (see the module's `# Divergence`).
    ///
    /// Cancellation-safe: a future dropped before it completes has not enqueued the event.
    pub async fn action(&self, type_: WatchEventType, object: T) -> Result<(), BroadcasterError> {
        let event = Item::Event(WatchEvent { type_, object });
        self.inner.incoming.push(event).await.map_err(|_| BroadcasterError::Stopped)
    }

    /// Accepts `events` in order, waiting for room as [`action`](Self::action) does, but as many
    /// at a time as fit (one lock, one wake-up of the distributor), and, while waiting, woken only
    /// once half the incoming queue is free: for a producer with events at hand (a file source),
    /// so that it and the distributor do not wake each other once per event.
    ///
    /// # Errors
    /// [`BroadcasterError::Stopped`] after [`Broadcaster::shutdown`]: the events not yet accepted
    /// are not.
    pub async fn action_many(&self, events: Vec<(WatchEventType, T)>) -> Result<(), BroadcasterError> {
        // Moved straight from `events` into the queue: no second vector of events.
        let items = events.into_iter().map(|(type_, object)| Item::Event(WatchEvent { type_, object }));
        self.inner.incoming.push_many(items).await.map_err(|_| BroadcasterError::Stopped)
    }

    /// Accepts `events` together, in order, waiting until the incoming queue has room for all of
    /// them (at most [`incoming_capacity`](Self::incoming_capacity) events): all are accepted or
    /// none (HTTP ingest's all-or-nothing batches). Cancellation-safe: a future dropped before it
    /// completes has enqueued nothing.
    ///
    /// # Errors
    /// [`BroadcasterError::Stopped`] after [`Broadcaster::shutdown`];
    /// [`BroadcasterError::TooMany`] for more events than the incoming queue holds.
    pub async fn action_all(&self, events: Vec<(WatchEventType, T)>) -> Result<(), BroadcasterError> {
        let n = events.len();
        let items = events.into_iter().map(|(type_, object)| Item::Event(WatchEvent { type_, object })).collect();
        self.inner.incoming.push_all(items).await.map_err(|why| match why {
            Rejected::Closed => BroadcasterError::Stopped,
            Rejected::Full => BroadcasterError::TooMany(n),
        })
    }

    /// How many events the incoming queue holds.
    pub fn incoming_capacity(&self) -> usize {
        self.inner.incoming.capacity
    }

    /// Accepts an event if the incoming queue has room; never blocks (apimachinery
    /// `ActionOrDrop`). `Ok(false)`: incoming was full, the event is dropped and counted in
    /// [`Broadcaster::incoming_dropped`].
    ///
    /// # Errors
    /// [`BroadcasterError::Stopped`] after [`Broadcaster::shutdown`] (Go returns `(false, err)`).
    pub fn action_or_drop(&self, type_: WatchEventType, object: T) -> Result<bool, BroadcasterError> {
        match self.inner.incoming.try_push(Item::Event(WatchEvent { type_, object })) {
            Ok(()) => Ok(true),
            Err(Rejected::Full) => Ok(false),
            Err(Rejected::Closed) => Err(BroadcasterError::Stopped),
        }
    }

    /// Stops accepting events and watchers, lets the distributor hand out everything accepted
    /// before, then closes every watcher; returns when that is done (apimachinery `Shutdown`).
    ///
    /// Watchers can still drain their buffered events; then `recv` returns `None`. Idempotent:
    /// a later call returns as soon as the first one's work is done. In Wait mode a watcher that
    /// never reads keeps this waiting, as in Go.
    pub async fn shutdown(&self) {
        self.inner.incoming.close();
        let mut done = self.inner.distributor_done.clone();
        // Err means the distributor task is gone (runtime shutting down): nothing left to wait on.
        let _ = done.wait_for(|finished| *finished).await;
    }

    /// How many events [`Broadcaster::action_or_drop`] refused because incoming was full.
    pub fn incoming_dropped(&self) -> u64 {
        self.inner.incoming.dropped()
    }
}

/// The distributor loop (apimachinery `Broadcaster.loop`): FIFO over incoming, markers run
/// inline, then `closeAll` once incoming is closed and drained.
async fn distributor<T: Clone>(
    incoming: Arc<Queue<Item<T>>>,
    behavior: FullChannelBehavior,
    done: watch::Sender<bool>,
) {
    let mut watchers: Watchers<T> = BTreeMap::new();
    let (mut items, mut run) = (Vec::new(), Vec::new());
    while let Some(first) = incoming.recv().await {
        // With one Wait-mode watcher, the events queued behind this one come along (one lock) as
        // far as that watcher has room for them now: the distributor still never holds more than
        // one event it cannot hand on, as in Go, so the incoming queue's length keeps its meaning.
        let room = match single_waiting(&watchers) {
            Some(queue) if matches!(first, Item::Event(_)) => queue.room_now().min(DISTRIBUTE_BATCH),
            _ => 0,
        };
        items.push(first);
        incoming.try_recv_many_while(room, &mut items, |item| matches!(item, Item::Event(_)));
        for item in items.drain(..) {
            match item {
                Item::Event(event) => run.push(event),
                Item::Register(id, queue, own) => {
                    distribute(&watchers, &mut run).await;
                    watchers.insert(id, (queue, own.unwrap_or(behavior)));
                }
                Item::Unregister(id) => {
                    distribute(&watchers, &mut run).await;
                    if let Some((queue, _)) = watchers.remove(&id) {
                        queue.close();
                    }
                }
            }
        }
        distribute(&watchers, &mut run).await;
    }
    watchers.values().for_each(|(queue, _)| queue.close());
    done.send_replace(true);
}

/// The registered watchers by id: each one's queue and full-queue behaviour.
type Watchers<T> = BTreeMap<u64, (Arc<Queue<WatchEvent<T>>>, FullChannelBehavior)>;

/// The queue of the only watcher, when there is one and it is in Wait mode.
fn single_waiting<T>(watchers: &Watchers<T>) -> Option<&Arc<Queue<WatchEvent<T>>>> {
    match (watchers.len(), watchers.values().next()) {
        (1, Some((queue, FullChannelBehavior::WaitIfChannelFull))) => Some(queue),
        _ => None,
    }
}

/// Events the distributor takes from the incoming queue at once, at most.
const DISTRIBUTE_BATCH: usize = 256;

/// Offers `events` (emptied), one after the other, to every watcher in id order, each as its
/// behaviour says (apimachinery `distribute`): each event reaches every watcher before the next
/// one is offered, so a watcher that makes the distributor wait holds the others back by one
/// event, as in Go. With one watcher that is the same as handing it all the events at once, so
/// they go in one bulk push (one lock, one wake-up).
async fn distribute<T: Clone>(watchers: &Watchers<T>, events: &mut Vec<WatchEvent<T>>) {
    if let Some(queue) = single_waiting(watchers) {
        let _ = queue.push_many(events.drain(..)).await;
        return;
    }
    for event in events.drain(..) {
        let mut event = Some(event);
        let mut left = watchers.len();
        for (id, (queue, behavior)) in watchers {
            left -= 1;
            // The last watcher takes the event itself; the others get clones.
            let event = if left == 0 { event.take() } else { event.clone() }.expect("taken by the last watcher only");
            let outcome = match behavior {
                FullChannelBehavior::DropIfChannelFull => queue.try_push(event),
                FullChannelBehavior::WaitIfChannelFull => queue.push(event).await,
            };
            if outcome == Err(Rejected::Full) {
                tracing::trace!(watcher = id, "watcher queue full, event dropped for it");
            }
        }
    }
}

/// One consumer of a [`Broadcaster`] (apimachinery `broadcasterWatcher`, with `ResultChan()`
/// replaced by [`Watcher::recv`]).
///
/// Dropping it stops it, so a forgotten watcher never wedges a Wait-mode distributor.
pub struct Watcher<T> {
    id: u64,
    queue: Arc<Queue<WatchEvent<T>>>,
    stopper: WatcherStopper,
}

impl<T> fmt::Debug for Watcher<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watcher").field("id", &self.id).field("dropped", &self.dropped()).finish()
    }
}

impl<T> Watcher<T> {
    /// The next event in acceptance order; `None` once the watcher is closed (stopped, or the
    /// broadcaster shut down) and its buffer drained (Go: the result channel is closed).
    ///
    /// Cancellation-safe: dropping the future loses no event.
    pub async fn recv(&mut self) -> Option<WatchEvent<T>> {
        self.queue.recv().await
    }

    /// The next batch: the next event's object (waiting for it) and the objects of whatever else
    /// is buffered, up to `max` (≥ 1) in all, in acceptance order; `None` once the watcher is
    /// closed and drained. Watch event types are dropped: for consumers that only add.
    ///
    /// Cancellation-safe as [`Watcher::recv`].
    pub async fn recv_batch(&mut self, max: usize) -> Option<Vec<T>> {
        let first = self.queue.recv().await?;
        let mut events = Vec::with_capacity(max.clamp(1, 1024));
        self.queue.try_recv_many(max.max(1) - 1, &mut events);
        Some(std::iter::once(first).chain(events).map(|e| e.object).collect())
    }

    /// The next buffered event without waiting: `None` when nothing is buffered right now, or
    /// when the watcher is closed and drained ([`Watcher::recv`] tells the two apart).
    pub fn try_recv(&mut self) -> Option<WatchEvent<T>> {
        self.queue.try_recv()
    }

    /// Stops this watcher (apimachinery `broadcasterWatcher.Stop`): idempotent, never blocks.
    ///
    /// A distributor waiting for room in this watcher (Wait mode) is released at once; events
    /// accepted before this call are still queued while there is room, none after it, and the
    /// stream then ends (`recv` returns `None`) once the distributor reaches the stop.
    pub fn stop(&self) {
        self.stopper.stop();
    }

    /// A cloneable handle that stops this watcher from another task.
    pub fn stopper(&self) -> WatcherStopper {
        self.stopper.clone()
    }

    /// This watcher's id: unique per broadcaster, counted from 0 in the order `watch` was called.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// How many events this watcher missed because its buffer was full when the distributor
    /// offered them (Drop mode, or Wait mode after `stop`).
    pub fn dropped(&self) -> u64 {
        self.queue.dropped()
    }
}

impl<T> Drop for Watcher<T> {
    fn drop(&mut self) {
        self.stopper.stop();
    }
}

/// Stops one [`Watcher`] from anywhere; as [`Watcher::stop`]. Cheap to clone.
#[derive(Clone)]
pub struct WatcherStopper {
    id: u64,
    stop: Arc<dyn Fn() + Send + Sync>,
}

impl fmt::Debug for WatcherStopper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WatcherStopper").field("id", &self.id).finish_non_exhaustive()
    }
}

impl WatcherStopper {
    fn new<T: Send + 'static>(id: u64, queue: Arc<Queue<WatchEvent<T>>>, incoming: Arc<Queue<Item<T>>>) -> Self {
        let stop = move || {
            if queue.stop() {
                // After shutdown incoming is closed and closeAll has closed the queue: no-op.
                let _ = incoming.push_marker(Item::Unregister(id));
            }
        };
        Self { id, stop: Arc::new(stop) }
    }

    /// Stops the watcher; idempotent, never blocks. See [`Watcher::stop`].
    pub fn stop(&self) {
        (self.stop)();
    }

    /// The id of the watcher this handle stops.
    pub fn id(&self) -> u64 {
        self.id
    }
}

/// A watcher whose events pass through a filter function (apimachinery `watch.Filter`).
///
/// Its output is unbuffered (a rendezvous, as Go's), so the filter task adds one event of
/// queueing. Dropping it stops the source and ends the filter task.
pub struct FilteredWatcher<T> {
    out: Arc<Queue<WatchEvent<T>>>,
    source: WatcherStopper,
}

impl<T> fmt::Debug for FilteredWatcher<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FilteredWatcher").field("source", &self.source).finish_non_exhaustive()
    }
}

/// Wraps `watcher` so that each event goes through `f`: `Some(event)` is forwarded (possibly
/// rewritten), `None` is discarded (apimachinery `watch.Filter`; Go's `(event, keep)` pair is an
/// `Option` here). The filtered stream ends when the source does.
///
/// # Panics
/// Outside a tokio runtime: the filter task is `tokio::spawn`ed here.
pub fn filter<T, F>(watcher: Watcher<T>, mut f: F) -> FilteredWatcher<T>
where
    T: Send + 'static,
    F: FnMut(WatchEvent<T>) -> Option<WatchEvent<T>> + Send + 'static,
{
    let out = Arc::new(Queue::new(0));
    let source = watcher.stopper();
    let tx = Arc::clone(&out);
    tokio::spawn(async move {
        let mut watcher = watcher;
        while let Some(event) = watcher.recv().await {
            if let Some(kept) = f(event)
                && tx.push(kept).await.is_err()
            {
                break;
            }
        }
        tx.close();
    });
    FilteredWatcher { out, source }
}

impl<T> FilteredWatcher<T> {
    /// The next event that passed the filter; `None` once the source has ended.
    /// Cancellation-safe.
    pub async fn recv(&mut self) -> Option<WatchEvent<T>> {
        self.out.recv().await
    }

    /// Stops the source watcher (apimachinery `filteredWatch.Stop`); this stream then ends.
    /// Idempotent, never blocks.
    pub fn stop(&self) {
        self.source.stop();
    }

    /// A handle that stops the source watcher from another task.
    pub fn stopper(&self) -> WatcherStopper {
        self.source.clone()
    }
}

impl<T> Drop for FilteredWatcher<T> {
    fn drop(&mut self) {
        self.source.stop();
        self.out.close();
    }
}

/// Why a push was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rejected {
    /// No room (and the sender may not wait): counted in `Queue::dropped`.
    Full,
    /// The queue is closed.
    Closed,
}

/// Result of one push attempt.
enum Offer<I> {
    Accepted,
    Rejected(Rejected),
    /// Full, and the sender should wait for `writable`; the item is handed back.
    Wait(I),
}

/// A bounded FIFO with Go channel semantics: room for `capacity` counted items plus one per
/// receiver parked in `recv`; markers bypass the capacity. `stop` makes senders stop waiting;
/// `close` refuses further pushes while the receiver drains what is left.
struct Queue<I> {
    capacity: usize,
    state: Mutex<QueueState<I>>,
    /// Signalled when an item arrives or the queue closes.
    readable: Notify,
    /// Signalled when room appears (pop, receiver parks) or the queue stops or closes.
    writable: Notify,
    /// Signalled when at least [`Queue::low_watermark`] slots are free, or the queue stops or
    /// closes: what [`Queue::push_many`] waits for, so that a fast producer and its consumer do
    /// not wake each other once per item.
    writable_bulk: Notify,
    dropped: AtomicU64,
}

struct QueueState<I> {
    /// Items with whether they count against the capacity.
    items: VecDeque<(I, bool)>,
    counted: usize,
    parked: usize,
    stopped: bool,
    closed: bool,
}

impl<I> Queue<I> {
    fn new(capacity: usize) -> Self {
        Self::with_items(capacity, Vec::new())
    }

    fn with_items(capacity: usize, items: Vec<I>) -> Self {
        let state = QueueState {
            counted: items.len(),
            items: items.into_iter().map(|item| (item, true)).collect(),
            parked: 0,
            stopped: false,
            closed: false,
        };
        Self {
            capacity,
            state: Mutex::new(state),
            readable: Notify::new(),
            writable: Notify::new(),
            writable_bulk: Notify::new(),
            dropped: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, QueueState<I>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// One push attempt; `may_wait` lets a full, non-stopped queue hand the item back.
    fn offer(&self, item: I, may_wait: bool) -> Offer<I> {
        let mut state = self.lock();
        if state.closed {
            return Offer::Rejected(Rejected::Closed);
        }
        if state.counted >= self.capacity + state.parked {
            if may_wait && !state.stopped {
                return Offer::Wait(item);
            }
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return Offer::Rejected(Rejected::Full);
        }
        state.items.push_back((item, true));
        state.counted += 1;
        drop(state);
        self.readable.notify_waiters();
        Offer::Accepted
    }

    /// Pushes if there is room, never waits.
    fn try_push(&self, item: I) -> Result<(), Rejected> {
        match self.offer(item, false) {
            Offer::Accepted => Ok(()),
            Offer::Rejected(why) => Err(why),
            Offer::Wait(_) => unreachable!("offer(may_wait = false) never asks to wait"),
        }
    }

    /// Pushes, waiting for room unless (or until) the queue is stopped; then as `try_push`.
    async fn push(&self, mut item: I) -> Result<(), Rejected> {
        loop {
            let mut writable = pin!(self.writable.notified());
            writable.as_mut().enable();
            match self.offer(item, true) {
                Offer::Accepted => return Ok(()),
                Offer::Rejected(why) => return Err(why),
                Offer::Wait(back) => item = back,
            }
            writable.await;
        }
    }

    /// Pushes all of `items` at once (at most `capacity` of them), waiting until there is room for
    /// every one; `Full` for more items than the capacity, `Closed` once closed or stopped.
    /// Nothing is pushed on an error.
    /// Cancellation-safe: nothing is pushed before the call completes.
    async fn push_all(&self, items: Vec<I>) -> Result<(), Rejected> {
        if items.len() > self.capacity {
            return Err(Rejected::Full);
        }
        loop {
            let mut writable = pin!(self.writable.notified());
            writable.as_mut().enable();
            {
                let mut state = self.lock();
                if state.closed {
                    return Err(Rejected::Closed);
                }
                if state.counted + items.len() <= self.capacity + state.parked {
                    state.counted += items.len();
                    state.items.extend(items.into_iter().map(|item| (item, true)));
                    drop(state);
                    self.readable.notify_waiters();
                    return Ok(());
                }
                if state.stopped {
                    return Err(Rejected::Closed);
                }
            }
            writable.await;
        }
    }

    /// Pushes an item that does not count against the capacity; fails only when closed.
    fn push_marker(&self, item: I) -> Result<(), Rejected> {
        let mut state = self.lock();
        if state.closed {
            return Err(Rejected::Closed);
        }
        state.items.push_back((item, false));
        drop(state);
        self.readable.notify_waiters();
        Ok(())
    }

    fn pop(&self, state: &mut QueueState<I>) -> Option<I> {
        let (item, counted) = state.items.pop_front()?;
        if counted {
            state.counted -= 1;
            self.room_appeared(state);
        }
        Some(item)
    }

    /// Free slots now (taking the lock).
    fn room_now(&self) -> usize {
        self.room(&self.lock())
    }

    /// Free slots now.
    fn room(&self, state: &QueueState<I>) -> usize {
        (self.capacity + state.parked).saturating_sub(state.counted)
    }

    /// How much room wakes a bulk producer: half the capacity (at least 1).
    fn low_watermark(&self) -> usize {
        (self.capacity / 2).max(1)
    }

    /// Wakes the senders waiting for room: every single-item sender, and bulk senders once the
    /// room reaches the low watermark.
    fn room_appeared(&self, state: &QueueState<I>) {
        self.writable.notify_waiters();
        if self.room(state) >= self.low_watermark() {
            self.writable_bulk.notify_waiters();
        }
    }

    fn try_recv(&self) -> Option<I> {
        self.pop(&mut self.lock())
    }

    /// Up to `max` more items into `into` at once, under one lock and with one wake-up of the
    /// senders; none when nothing is queued.
    fn try_recv_many(&self, max: usize, into: &mut Vec<I>) {
        self.try_recv_many_while(max, into, |_| true);
    }

    /// As [`try_recv_many`](Self::try_recv_many), up to `max` more items, stopping before the
    /// first one that `take` refuses.
    fn try_recv_many_while(&self, max: usize, into: &mut Vec<I>, take: impl Fn(&I) -> bool) {
        let max = into.len() + max;
        let mut state = self.lock();
        let mut freed = false;
        while into.len() < max {
            if !state.items.front().is_some_and(|(item, _)| take(item)) {
                break;
            }
            let Some((item, counted)) = state.items.pop_front() else { break };
            if counted {
                state.counted -= 1;
                freed = true;
            }
            into.push(item);
        }
        if freed {
            self.room_appeared(&state);
        }
    }

    /// Pushes `items` in order, as many at a time as there is room for (one lock and one
    /// wake-up of the receiver each time), waiting for room unless (or until) the queue is
    /// stopped; a waiting call is woken only once the low watermark of room is free. `Full`
    /// (the rest dropped and counted) when it stopped, `Closed` (the rest not pushed) once
    /// closed. Not cancellation-safe: a dropped call may have pushed a prefix.
    async fn push_many(&self, items: impl IntoIterator<Item = I>) -> Result<(), Rejected> {
        let mut rest = items.into_iter().peekable();
        while rest.peek().is_some() {
            let mut writable = pin!(self.writable_bulk.notified());
            writable.as_mut().enable();
            {
                let mut state = self.lock();
                if state.closed {
                    return Err(Rejected::Closed);
                }
                let room = self.room(&state);
                if room > 0 {
                    let before = state.items.len();
                    state.items.extend(rest.by_ref().take(room).map(|item| (item, true)));
                    state.counted += state.items.len() - before;
                    drop(state);
                    self.readable.notify_waiters();
                    continue;
                }
                if state.stopped {
                    self.dropped.fetch_add(rest.count() as u64, Ordering::Relaxed);
                    return Err(Rejected::Full);
                }
            }
            writable.await;
        }
        Ok(())
    }

    /// The next item, parking (which adds one slot of room) while empty; `None` once closed and
    /// drained. The park guard keeps the parked count right if the future is dropped.
    async fn recv(&self) -> Option<I> {
        let mut park = Park { queue: self, parked: false };
        loop {
            let mut readable = pin!(self.readable.notified());
            readable.as_mut().enable();
            {
                let mut state = self.lock();
                let item = self.pop(&mut state);
                if item.is_some() || state.closed {
                    park.leave(&mut state);
                    return item;
                }
                park.enter(&mut state);
            }
            readable.await;
        }
    }

    /// Senders stop waiting on this queue; returns whether this call stopped it.
    fn stop(&self) -> bool {
        let first = !std::mem::replace(&mut self.lock().stopped, true);
        self.writable.notify_waiters();
        self.writable_bulk.notify_waiters();
        first
    }

    /// Refuses further pushes; the receiver drains what is left, then gets `None`.
    fn close(&self) {
        self.lock().closed = true;
        self.readable.notify_waiters();
        self.writable.notify_waiters();
        self.writable_bulk.notify_waiters();
    }
}

/// A receiver's parked slot in a [`Queue`], released on every exit path of `recv`.
struct Park<'a, I> {
    queue: &'a Queue<I>,
    parked: bool,
}

impl<I> Park<'_, I> {
    fn enter(&mut self, state: &mut QueueState<I>) {
        if !self.parked {
            self.parked = true;
            state.parked += 1;
            // A sender waiting for a rendezvous may proceed now.
            self.queue.room_appeared(state);
        }
    }

    fn leave(&mut self, state: &mut QueueState<I>) {
        if std::mem::take(&mut self.parked) {
            state.parked -= 1;
        }
    }
}

impl<I> Drop for Park<'_, I> {
    fn drop(&mut self) {
        if self.parked {
            let mut state = self.queue.lock();
            self.leave(&mut state);
        }
    }
}

impl crate::metrics::Snapshot {
    /// Adds the Broadcaster's incoming-queue drops (watcher `incoming`, reason `queue_full`).
    pub fn add_broadcaster<T: Clone + Send + 'static>(&mut self, broadcaster: &Broadcaster<T>) {
        self.add_watcher_dropped("incoming", "queue_full", broadcaster.incoming_dropped());
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::timeout;

    use super::FullChannelBehavior::{DropIfChannelFull as Drop, WaitIfChannelFull as Wait};
    use super::*;

    const ADDED: WatchEventType = WatchEventType::Added;
    const LONG: Duration = Duration::from_secs(10);

    /// Lets the distributor and any spawned readers run until they block.
    async fn settle() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    async fn next<T>(w: &mut Watcher<T>) -> Option<T> {
        timeout(LONG, w.recv()).await.expect("recv timed out").map(|e| e.object)
    }

    async fn drain<T>(mut w: Watcher<T>) -> Vec<T> {
        let mut got = Vec::new();
        while let Some(object) = next(&mut w).await {
            got.push(object);
        }
        got
    }

    async fn send_all(b: &Broadcaster<u32>, objects: impl IntoIterator<Item = u32>) {
        for object in objects {
            b.action(ADDED, object).await.expect("broadcaster is running");
        }
    }

    #[test]
    fn event_type_wire_strings_round_trip() {
        for t in [ADDED, WatchEventType::Modified, WatchEventType::Deleted]
            .into_iter()
            .chain([WatchEventType::Bookmark, WatchEventType::Error])
        {
            assert_eq!(t.as_str().parse::<WatchEventType>(), Ok(t));
        }
        assert_eq!("added".parse::<WatchEventType>(), Err(UnknownWatchEventType("added".into())));
    }

    #[tokio::test]
    async fn action_all_accepts_a_batch_whole_once_it_fits_or_not_at_all() {
        // Incoming holds 4; the watcher's queue 0 in Wait mode, so nothing leaves incoming until
        // the watcher reads.
        let b = Broadcaster::with_incoming(4, 0, Wait);
        let mut w = b.watch().unwrap();
        settle().await;
        let batch = |r: std::ops::Range<u32>| r.map(|i| (ADDED, i)).collect::<Vec<_>>();
        assert_eq!(b.action_all(batch(0..5)).await, Err(BroadcasterError::TooMany(5)));
        b.action_all(batch(0..3)).await.unwrap();
        // The distributor holds 0 (waiting for the watcher) and 1, 2 are queued: a batch of 3
        // does not fit, and a cancelled wait enqueues nothing.
        assert!(timeout(Duration::from_millis(50), b.action_all(batch(10..13))).await.is_err());
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(i) = next(&mut w).await {
                got.push(i);
            }
            got
        });
        b.action_all(batch(3..7)).await.unwrap();
        b.shutdown().await;
        assert_eq!(reader.await.unwrap(), (0..7).collect::<Vec<_>>(), "in order, whole, nothing of 10..13");
        assert_eq!(b.action_all(batch(0..1)).await, Err(BroadcasterError::Stopped));
    }

    #[tokio::test]
    async fn unbuffered_drop_mode_delivers_only_to_a_parked_receiver() {
        let b = Broadcaster::new(0, Drop);
        let mut w = b.watch().unwrap();
        send_all(&b, [1]).await;
        settle().await;
        assert_eq!(w.try_recv(), None);
        assert_eq!(w.dropped(), 1);

        let reader = tokio::spawn(async move { next(&mut w).await });
        settle().await;
        send_all(&b, [2]).await;
        assert_eq!(reader.await.unwrap(), Some(2));
    }

    #[tokio::test]
    async fn unbuffered_wait_mode_holds_the_event_until_a_receiver_comes() {
        let b = Broadcaster::new(0, Wait);
        let mut w = b.watch().unwrap();
        send_all(&b, [1, 2]).await;
        settle().await;
        assert_eq!(w.try_recv(), None);
        assert_eq!(next(&mut w).await, Some(1));
        assert_eq!(next(&mut w).await, Some(2));
        assert_eq!(w.dropped(), 0);
    }

    #[tokio::test]
    async fn cancelled_recv_gives_back_its_parked_slot() {
        let b = Broadcaster::new(0, Drop);
        let mut w = b.watch().unwrap();
        settle().await;
        assert!(timeout(Duration::from_millis(10), w.recv()).await.is_err());
        send_all(&b, [1]).await;
        settle().await;
        assert_eq!(w.try_recv(), None);
        assert_eq!(w.dropped(), 1);
    }

    #[tokio::test]
    async fn drop_mode_counts_drops_per_watcher() {
        let b = Broadcaster::new(1, Drop);
        let mut slow = b.watch().unwrap();
        let fast = b.watch().unwrap();
        let fast_reader = tokio::spawn(drain(fast));
        for object in 1..=3 {
            send_all(&b, [object]).await;
            settle().await;
        }
        b.shutdown().await;
        assert_eq!(slow.dropped(), 2);
        assert_eq!(next(&mut slow).await, Some(1));
        assert_eq!(next(&mut slow).await, None);
        assert_eq!(fast_reader.await.unwrap(), vec![1, 2, 3]);
    }

    /// Wait mode, buffer 1: `stuck` (id 0) never reads, so the distributor blocks on it with the
    /// second event and `live` cannot get it until the task from `release` makes `stuck` go away.
    async fn stuck_watcher_blocks_until(release: impl FnOnce(Watcher<u32>) -> tokio::task::JoinHandle<()>) {
        let b = Broadcaster::new(1, Wait);
        let stuck = b.watch().unwrap();
        let mut live = b.watch().unwrap();
        send_all(&b, [1, 2]).await;
        assert_eq!(next(&mut live).await, Some(1));
        assert!(timeout(Duration::from_millis(50), live.recv()).await.is_err());
        let released = release(stuck);
        assert_eq!(next(&mut live).await, Some(2));
        released.await.unwrap();
    }

    #[tokio::test]
    async fn stop_from_another_task_releases_a_blocked_distributor() {
        stuck_watcher_blocks_until(|stuck| {
            tokio::spawn(async move {
                let stopper = stuck.stopper();
                tokio::spawn(async move { (0..2).for_each(|_| stopper.stop()) }).await.unwrap();
                assert_eq!(drain(stuck).await, vec![1], "buffered event stays, then the end");
            })
        })
        .await;
    }

    #[tokio::test]
    async fn dropping_a_watcher_releases_a_blocked_distributor() {
        stuck_watcher_blocks_until(|stuck| tokio::spawn(async move { drop(stuck) })).await;
    }

    #[tokio::test]
    async fn watcher_sees_exactly_the_events_after_its_registration() {
        let b = Broadcaster::new(10, Wait);
        let early = b.watch().unwrap();
        send_all(&b, [1]).await;
        let late = b.watch().unwrap();
        send_all(&b, [2]).await;
        let prefixed = b.watch_with_prefix(vec![WatchEvent { type_: ADDED, object: 9 }]).unwrap();
        send_all(&b, [3]).await;
        b.shutdown().await;
        assert_eq!(drain(early).await, vec![1, 2, 3]);
        assert_eq!(drain(late).await, vec![2, 3]);
        assert_eq!(drain(prefixed).await, vec![9, 3]);
    }

    #[tokio::test]
    async fn stop_keeps_earlier_events_and_ends_the_stream() {
        let b = Broadcaster::new(4, Wait);
        let w = b.watch().unwrap();
        send_all(&b, [1]).await;
        w.stop();
        send_all(&b, [2]).await;
        assert_eq!(drain(w).await, vec![1]);
    }

    #[tokio::test]
    async fn shutdown_drains_closes_and_then_refuses() {
        let b = Broadcaster::new_long_queue(100, Drop);
        let w = b.watch().unwrap();
        send_all(&b, 0..50).await;
        b.shutdown().await;
        assert_eq!(drain(w).await, (0..50).collect::<Vec<_>>());
        timeout(LONG, b.shutdown()).await.expect("second shutdown returns at once");
        assert_eq!(b.watch().unwrap_err().to_string(), "broadcaster already stopped");
        assert_eq!(b.action(ADDED, 1).await, Err(BroadcasterError::Stopped));
        assert_eq!(b.action_or_drop(ADDED, 1), Err(BroadcasterError::Stopped));
        assert_eq!(b.incoming_dropped(), 0);
    }

    #[tokio::test]
    async fn dropping_the_last_handle_ends_every_watcher() {
        let b = Broadcaster::new(4, Wait);
        let w = b.watch().unwrap();
        send_all(&b, [1, 2]).await;
        drop(b.clone());
        send_all(&b, [3]).await;
        drop(b);
        assert_eq!(drain(w).await, vec![1, 2, 3]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_producers_keep_one_order_for_every_watcher() {
        const PRODUCERS: u32 = 4;
        const EACH: u32 = 1000;
        let b = Broadcaster::new(16, Wait);
        let readers: Vec<_> = (0..3).map(|_| tokio::spawn(drain(b.watch().unwrap()))).collect();
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let b = b.clone();
                tokio::spawn(async move { send_all(&b, (0..EACH).map(|i| p * EACH + i)).await })
            })
            .collect();
        for producer in producers {
            producer.await.unwrap();
        }
        b.shutdown().await;
        let mut seen = Vec::new();
        for reader in readers {
            seen.push(reader.await.unwrap());
        }
        assert!(seen.windows(2).all(|pair| pair[0] == pair[1]), "watchers disagree on order");
        assert_eq!(seen[0].len(), (PRODUCERS * EACH) as usize);
        for p in 0..PRODUCERS {
            let mine: Vec<_> = seen[0].iter().filter(|&&o| o / EACH == p).collect();
            assert!(mine.is_sorted(), "producer {p} reordered");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn wait_mode_loses_nothing_to_a_slow_consumer() {
        let b = Broadcaster::new(8, Wait);
        let mut w = b.watch().unwrap();
        let consumer = tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(object) = next(&mut w).await {
                if object % 100 == 0 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                got.push(object);
            }
            (got, w.dropped())
        });
        send_all(&b, 0..10_000).await;
        b.shutdown().await;
        let (got, dropped) = consumer.await.unwrap();
        assert_eq!(got, (0..10_000).collect::<Vec<_>>());
        assert_eq!(dropped, 0);
    }

    #[tokio::test]
    async fn filter_rewrites_and_discards() {
        let b = Broadcaster::new(10, Wait);
        let source = b.watch().unwrap();
        let mut odd_doubled =
            filter(source, |e: WatchEvent<u32>| (e.object % 2 == 1).then(|| WatchEvent { object: e.object * 2, ..e }));
        send_all(&b, 1..=5).await;
        b.shutdown().await;
        let mut got = Vec::new();
        while let Some(e) = timeout(LONG, odd_doubled.recv()).await.unwrap() {
            got.push(e.object);
        }
        assert_eq!(got, vec![2, 6, 10]);
    }

    #[tokio::test]
    async fn dropping_a_filtered_watcher_unwedges_the_distributor() {
        let b = Broadcaster::new(0, Wait);
        let filtered = filter(b.watch().unwrap(), Some);
        send_all(&b, [1, 2, 3]).await;
        settle().await;
        drop(filtered);
        timeout(LONG, b.shutdown()).await.expect("shutdown must not hang on the dropped filter");
    }
}
